"""Aggregated routes: one client request fans out to several backends and
the answers are merged into one JSON body by splicing.  Merged bodies are
checked byte for byte (escapes, big numbers, duplicate keys inside values),
with the exact requests the backends received; HEAD, keep-alive reuse of
backend connections, chunked and close-delimited answers, failing backends,
16 backends and 10 MB answers."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:     # Debian's python3-prometheus-client under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    from prometheus_client.parser import text_string_to_metric_families

T = Suite(__file__)

USER = (b'{"id":7,"name":"Ren\\u00e9e \\"Q\\" O\'Brien","big":123456789012345678901234567890,'
        b'"pi":3.14159265358979323846264338327950288,"tags":{"a":1,"a":2},"esc":"\\/\\b\\f"}')
ORDERS = b'[{"id":1,"total":1e400},{"id":2,"note":"\\ud83d\\ude00","dup":{"k":1,"k":1}}]'


def json_answer(body, **kw):
    return answer(http_response(200, body), **kw)


def aggregated(backends, upstreams, **route):
    """A configuration with one aggregated route /agg and the given upstreams
    (name -> list of addresses); route= keys go to the route."""
    conf = upstream_config('127.0.0.1:1', routes=[dict(
        {'name': 'agg', 'match': {'path': '/agg'}, 'backends': backends}, **route)])
    conf['upstreams'] = {name: {'servers': list(addrs), 'keepalive': 8}
                         for name, addrs in upstreams.items()}
    return conf


def get(env, gw, target='/agg', method='GET', headers=(), client=None):
    c = client or env.client(gw.port)
    return c.request(method, target, [('Host', 'api.test')] + list(headers))


def head_of(body_len, rid, extra=b''):
    return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n'
            % rid.encode() + extra + b'Content-Length: %d\r\n\r\n' % body_len)


@T.case
def keyed_merge_is_the_answers_spliced(env):
    users = env.scripted(default=json_answer(b' \r\n' + USER + b'\n\t'))
    orders = env.scripted(default=json_answer(ORDERS))
    gw = env.daemon(aggregated(
        {'user': {'upstream': 'users', 'path': '/users/7'},
         'orders': {'upstream': 'orders', 'path': '/orders?user=7&limit=10'}},
        {'users': [users.address], 'orders': [orders.address]}))
    r = get(env, gw, headers=[('X-Request-Id', 'trace-1'), ('X-Forwarded-For', '10.0.0.9'),
                              ('Accept', 'text/html'), ('Cookie', 'a=b')])
    want = b'{"user":' + USER + b',"orders":' + ORDERS + b'}'
    env.eq('merged body: the answers spliced, whitespace around them dropped', r.body, want)
    env.eq('head', r.head, head_of(len(want), 'trace-1'))
    env.eq('user backend request, exact', users.requests[0].raw,
           b'GET /users/7 HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: trace-1\r\n'
           b'X-Forwarded-For: 10.0.0.9, 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n')
    env.eq('orders backend request, exact', orders.requests[0].raw,
           b'GET /orders?user=7&limit=10 HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: trace-1\r\n'
           b'X-Forwarded-For: 10.0.0.9, 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n')


@T.case
def the_sample_overview_route_on_the_demo_upstream(env):
    demo = env.demo()
    route = {'name': 'overview', 'match': {'path': '/v2/overview/{id}'}, 'backends': {
        'order': {'upstream': 'demo', 'path': '/api/orders/${path.id}',
                  'response': [{'unwrap': 'data'}]},
        'orders': {'upstream': 'demo', 'path': '/api/orders', 'response': [{'unwrap': 'data'}]},
        'stats': {'upstream': 'demo', 'path': '/api/stats', 'required': False}}}
    conf = upstream_config(demo.address, routes=[route])
    conf['upstreams'] = {'demo': {'servers': [demo.address]}}
    gw = env.daemon(conf)
    r = get(env, gw, '/v2/overview/2')
    env.eq('the demo envelopes merged, escapes and numbers as sent', r.body,
           b'{"order":{"id":2,"customer":{"id":7,"name":"Jos\\u00e9 \\u00c1lvarez \\u2603"},'
           b'"items":[],"total":0,"paid":false,"note":"line\\nbreak \\"quoted\\" '
           b'\\ud83d\\ude00"},"orders":{"orders":[1,2],"next":null},"stats":{"code":0,"msg":"ok",'
           b'"data":{"requests":18446744073709551615,"bytes":123456789012345678901234567890,'
           b'"ratio":1.5e-300,"neg":-9007199254740993,"empty":{},"list":[[],[{}]]}}}')
    r = get(env, gw, '/v2/overview/404', headers=[('X-Request-Id', 'nf')])
    env.gateway_error('order 404: a required backend', r, 502, 'upstream_status',
                      'backend order: the answer of upstream demo is status 404', False,
                      request_id='nf')


@T.case
def backend_method_and_host_header(env):
    up = env.scripted(default=json_answer(b'{}'))
    conf = aggregated({'made': {'upstream': 'app', 'path': '/make', 'method': 'post'},
                       'gone': {'upstream': 'app', 'path': '/gone', 'method': 'DELETE'}},
                      {'app': [up.address]})
    conf['upstreams']['app']['host_header'] = 'internal.app'
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'm-1')])
    env.eq('body', r.body, b'{"made":{},"gone":{}}')
    env.eq('requests, exact', sorted(q.raw for q in up.requests), sorted([
        b'POST /make HTTP/1.1\r\nHost: internal.app\r\nX-Request-Id: m-1\r\n'
        b'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nContent-Length: 0\r\n\r\n',
        b'DELETE /gone HTTP/1.1\r\nHost: internal.app\r\nX-Request-Id: m-1\r\n'
        b'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n']))


@T.case
def head_answers_what_get_would(env):
    up = env.scripted(default=json_answer(USER))
    gw = env.daemon(aggregated({'a': {'upstream': 'app', 'path': '/a'},
                                'b': {'upstream': 'app', 'path': '/b'}}, {'app': [up.address]}))
    c = env.client(gw.port)
    g = get(env, gw, headers=[('X-Request-Id', 'h-1')], client=c)
    h = get(env, gw, method='HEAD', headers=[('X-Request-Id', 'h-1')], client=c)
    env.eq('GET body', g.body, b'{"a":' + USER + b',"b":' + USER + b'}')
    env.eq('HEAD: the same head', h.head, g.head)
    env.eq('HEAD: no body, connection kept', (h.body, get(env, gw, client=c).status), (b'', 200))
    env.eq('HEAD: the backends got GET', [q.method for q in up.requests[2:4]], ['GET', 'GET'])


@T.case
def backends_are_requested_at_once(env):
    """Each upstream holds its answer until the three backend requests have all arrived: a
    gateway that asked one after another would get 'together': false after 5 s."""
    lock = threading.Lock()
    seen = {'n': 0}
    everyone = threading.Event()

    def together(req):
        with lock:
            seen['n'] += 1
            if seen['n'] == 3:
                everyone.set()
        return http_response(200, b'{"together":%s}' % (
            b'true' if everyone.wait(5 * SLOW) else b'false'))

    ups = [env.scripted(default=answer(together)) for _ in range(3)]
    gw = env.daemon(aggregated({k: {'upstream': k, 'path': '/' + k} for k in 'abc'},
                               {k: [u.address] for k, u in zip('abc', ups)}))
    r = get(env, gw)
    env.eq('every answer made once all three requests were in', r.body,
           b'{"a":{"together":true},"b":{"together":true},"c":{"together":true}}')


@T.case
def backend_connections_are_reused(env):
    users = env.scripted(default=json_answer(b'{"u":1}'))
    orders = env.scripted(default=json_answer(b'[2]'))
    gw = env.daemon(aggregated(
        {'user': {'upstream': 'users', 'path': '/u'}, 'orders': {'upstream': 'orders', 'path': '/o'}},
        {'users': [users.address], 'orders': [orders.address]}))
    c = env.client(gw.port)
    bodies = set(get(env, gw, client=c).body for _ in range(50))
    env.eq('50 merged answers, all the same', bodies, {b'{"user":{"u":1},"orders":[2]}'})
    env.eq('one connection to each backend, kept alive', (users.connections, orders.connections),
           (1, 1))
    env.eq('50 requests each', (len(users.requests), len(orders.requests)), (50, 50))


@T.case
def chunked_and_close_delimited_answers(env):
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3;x=y\r\n:[1\r\n2\r\n]}\r\n0\r\n\r\n'
    closing = b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"text \\u0041"'
    one = env.scripted(default=answer(chunked))
    two = env.scripted(default=answer(closing, close=True))
    gw = env.daemon(aggregated({'c': {'upstream': 'one', 'path': '/c'},
                                'd': {'upstream': 'two', 'path': '/d'}},
                               {'one': [one.address], 'two': [two.address]}))
    r = get(env, gw)
    env.eq('de-chunked and close-delimited answers spliced', r.body,
           b'{"c":{"a":[1]},"d":"text \\u0041"}')
    r = get(env, gw)
    env.eq('again: the closed connection was not reused', (r.status, two.connections), (200, 2))


@T.case
def a_failing_backend_fails_the_route(env):
    good = env.scripted(default=json_answer(b'{}'))
    bad = env.scripted([answer(http_response(500, b'{"oops":1}')),
                        answer(http_response(200, b'<html>', content_type='text/html')),
                        answer(http_response(200, b'{"a":1} {"b":2}')),
                        answer(http_response(200, b'')),
                        hang()])
    conf = aggregated({'good': {'upstream': 'good', 'path': '/g'},
                       'bad': {'upstream': 'bad', 'path': '/b', 'timeout': '300ms'}},
                      {'good': [good.address], 'bad': [bad.address]})
    conf['upstreams']['bad']['retries'] = 0
    gw = env.daemon(conf)
    cases = [
        (502, 'upstream_status', 'backend bad: the answer of upstream bad is status 500'),
        (502, 'upstream_invalid', 'backend bad: the answer of upstream bad is not one JSON value'),
        (502, 'upstream_invalid', 'backend bad: the answer of upstream bad is not one JSON value'),
        (502, 'upstream_invalid', 'backend bad: the answer of upstream bad is empty, not JSON'),
        (504, 'upstream_timeout', 'backend bad: upstream bad did not answer in time'),
    ]
    for i, (status, code, message) in enumerate(cases):
        r = get(env, gw, headers=[('X-Request-Id', 'f-%d' % i)])
        env.gateway_error('answer %d' % i, r, status, code, message, False, request_id='f-%d' % i)
    closed = env.closed_port()
    conf = aggregated({'good': {'upstream': 'good', 'path': '/g'},
                       'gone': {'upstream': 'gone', 'path': '/x'}},
                      {'good': [good.address], 'gone': ['127.0.0.1:%d' % closed]})
    gw2 = env.daemon(conf)
    r = get(env, gw2, headers=[('X-Request-Id', 'f-r')])
    env.gateway_error('refused', r, 502, 'upstream_unavailable',
                      'backend gone: connect to upstream gone refused', False, request_id='f-r')
    env.check('the failure is logged with the request id',
              gw.wait_log(r'route agg: backend bad: the answer of upstream bad is status 500 '
                          r'\(request f-0\)'))


@T.case
def bytes_after_an_answer_end_its_connection(env):
    """An answer read straight into its block (past the first 8 KB) with bytes after its
    Content-Length in the same segment: the answer is its Content-Length, the rest is not
    taken for the next answer, and the connection is not reused."""
    body = b'{"k":"' + b'v' * 100000 + b'"}'
    extra = http_response(200, b'{"next":true}')
    up = env.scripted([answer(http_response(200, body) + extra),
                       answer(http_response(200, body) + b'junk')],
                      json_answer(b'{"fresh":1}'))
    gw = env.daemon(aggregated({'x': {'upstream': 'app', 'path': '/x'}}, {'app': [up.address]}))
    c = env.client(gw.port)
    bodies = [get(env, gw, client=c).body for _ in range(3)]
    env.eq('each answer its Content-Length, nothing of what came after',
           bodies, [b'{"x":' + body + b'}', b'{"x":' + body + b'}', b'{"x":{"fresh":1}}'])
    env.eq('a new connection after each', up.connections, 3)


@T.case
def long_answer_heads(env):
    body = b'{"k":"' + b'v' * 30000 + b'"}'
    long_head = http_response(200, body, [('X-Long', 'x' * 20000)])
    too_long = http_response(200, b'{}', [('X-Long', 'x' * 70000)])
    up = env.scripted([answer(long_head), answer(too_long)])
    conf = aggregated({'l': {'upstream': 'app', 'path': '/l'}}, {'app': [up.address]})
    conf['upstreams']['app']['retries'] = 0
    gw = env.daemon(conf)
    env.eq('a 20 KB head, then the body read into place', get(env, gw).body,
           b'{"l":' + body + b'}')
    r = get(env, gw, headers=[('X-Request-Id', 'lh')])
    env.gateway_error('a head over 64 KB', r, 502, 'upstream_invalid',
                      'backend l: malformed response from upstream app', False, request_id='lh')


@T.case
def failover_to_another_server(env):
    closed = env.closed_port()
    up = env.scripted(default=json_answer(b'[true]'))
    gw = env.daemon(aggregated({'x': {'upstream': 'app', 'path': '/x'}},
                               {'app': ['127.0.0.1:%d' % closed, up.address]}))
    bodies = [get(env, gw).body for _ in range(4)]
    env.eq('every request answered by the server that works', bodies, [b'{"x":[true]}'] * 4)


@T.case
def an_answer_cut_short_is_not_an_answer(env):
    cut = env.scripted([close_mid_body(b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"a":')])
    closed = env.closed_port()
    gw = env.daemon(aggregated({'x': {'upstream': 'app', 'path': '/x'}},
                               {'app': [cut.address, '127.0.0.1:%d' % closed]}))
    r = get(env, gw, headers=[('X-Request-Id', 'cut')])
    env.gateway_error('a 200 cut mid-body, then a refused retry: the retry\'s error', r, 502,
                      'upstream_unavailable', 'backend x: connect to upstream app refused', False,
                      request_id='cut')


@T.case
def path_templates_and_variables(env):
    users = env.scripted(default=json_answer(b'{"u":1}'))
    files = env.scripted(default=json_answer(b'"f"'))
    conf = upstream_config('127.0.0.1:1', routes=[
        {'name': 'dash', 'match': {'path': '/users/{id}/dashboard'}, 'backends': {
            'user': {'upstream': 'users',
                     'path': '/users/${path.id}?fields=${query.fields}&rid=${request_id}',
                     'headers': {'X-Tenant': '${header.x-tenant}', 'X-Price': '$$5',
                                 'X-Client': '${remote_addr}', 'X-Request-Id': 'own-${request_id}'}}}},
        {'name': 'files', 'match': {'path': '/files/{rest...}'}, 'backends': {
            'f': {'upstream': 'files', 'path': '/store/${path.rest}?q=${path.rest}'}}},
        {'name': 'plain', 'match': {'path': '/users/me'}, 'backends': {
            'me': {'upstream': 'files', 'path': '/me'}}}])
    conf['upstreams'] = {'users': {'servers': [users.address]}, 'files': {'servers': [files.address]}}
    gw = env.daemon(conf)
    r = get(env, gw, '/users/a%20b%2Fc/dashboard?x=1&fields=id,name+x',
            headers=[('X-Tenant', 'Acme Corp'), ('X-Request-Id', 't-1')])
    env.eq('answer', r.body, b'{"user":{"u":1}}')
    env.eq('variables interpolated, percent-encoded in the target', users.requests[0].raw,
           b'GET /users/a%20b%2Fc?fields=id%2Cname%20x&rid=t-1 HTTP/1.1\r\nHost: api.test\r\n'
           b'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Tenant: Acme Corp\r\n'
           b'X-Price: $5\r\nX-Client: 127.0.0.1\r\nX-Request-Id: own-t-1\r\n\r\n')
    r = get(env, gw, '/files/a/b%20c/d')
    env.eq('{rest...}: its slashes stay in the path, not in the query', files.requests[0].target,
           '/store/a/b%20c/d?q=a%2Fb%20c%2Fd')
    env.eq('an exact path still matches', (get(env, gw, '/users/me').body, files.requests[1].target),
           (b'{"me":"f"}', '/me'))
    env.eq('a template does not match more segments', get(env, gw, '/users/1/2/dashboard').status,
           404)
    # a path capture holding CR LF is fine in a target, refused in a header:
    conf['routes'][0]['backends']['user']['headers']['X-Id'] = '${path.id}'
    gw2 = env.daemon(conf)
    r = get(env, gw2, '/users/x%0D%0Ay/dashboard', headers=[('X-Request-Id', 'crlf')])
    env.gateway_error('CR LF from the client into a header: refused', r, 400, 'bad_request',
                      'backend user: the value of ${path.id} holds a line break: it cannot go '
                      'in a header', False, request_id='crlf')
    env.eq('no backend request for it', len(users.requests), 1)
    conf['routes'][0]['backends']['user']['required'] = False
    gw2 = env.daemon(conf)
    r = get(env, gw2, '/users/x%0D%0Ay/dashboard', headers=[('X-Request-Id', 'crlf')])
    env.gateway_error('the backend optional: still the request\'s fault, 400', r, 400,
                      'bad_request', 'backend user: the value of ${path.id} holds a line break: '
                      'it cannot go in a header', False, request_id='crlf')


@T.case
def route_request_headers_go_to_every_backend(env):
    """The route's request_headers apply to every backend request, after the gateway's own
    headers and before the backend's headers, which win for the names they give."""
    one = env.scripted(default=json_answer(b'{"id":"u1"}'))
    two = env.scripted(default=json_answer(b'[]'))
    conf = upstream_config('127.0.0.1:1', routes=[{
        'name': 'dash', 'match': {'path': '/d/{id}'},
        'request_headers': {
            'set': {'X-Uid': '$path.id', 'X-Tenant': '$header.x-tenant',
                    'X-Forwarded-For': '$remote_addr', 'X-Shared': 'route'},
            'add': {'X-Route': '$route', 'X-Own': 'route'},
            'remove': ['X-Forwarded-Proto', 'X-Kept']},
        'backends': {
            'a': {'upstream': 'one', 'path': '/a'},
            'b': {'upstream': 'two', 'path': '/b/${path.id}',
                  'headers': {'X-Shared': 'b-${header.x-tenant}', 'x-own': 'b', 'X-Kept': 'b',
                              'X-Forwarded-Proto': 'own'}},
            'c': {'upstream': 'two', 'path': '/c/${backend.a.id}', 'after': 'a'}}}])
    conf['upstreams'] = {'one': {'servers': [one.address]}, 'two': {'servers': [two.address]}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('GET', '/d/a%20b%0D%0Ac', [('Host', 'api.test'), ('X-Request-Id', 'rh-1'),
                                             ('X-Tenant', 'Acme'), ('X-Forwarded-For', '10.1.1.1')])
    env.eq('answered', (r.status, r.body), (200, b'{"a":{"id":"u1"},"b":[],"c":[]}'))
    route_part = (b'X-Uid: a bc\r\nX-Tenant: Acme\r\nX-Forwarded-For: 127.0.0.1\r\n'
                  b'X-Shared: route\r\nX-Route: dash\r\nX-Own: route\r\n')
    env.eq('a: the gateway\'s headers the ops do not take over, then the ops (a capture\'s '
           'controls left out)', one.requests[0].raw,
           b'GET /a HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: rh-1\r\n' + route_part +
           b'\r\n')
    asked = {q.target.split('/')[1]: q.raw for q in two.requests}
    env.eq('b: its own headers win, the route\'s ops of those names left out', asked.get('b'),
           b'GET /b/a%20b%0D%0Ac HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: rh-1\r\n'
           b'X-Uid: a bc\r\nX-Tenant: Acme\r\nX-Forwarded-For: 127.0.0.1\r\nX-Route: dash\r\n'
           b'X-Shared: b-Acme\r\nx-own: b\r\nX-Kept: b\r\nX-Forwarded-Proto: own\r\n\r\n')
    env.eq('c, started once a answered: the client\'s headers read again', asked.get('c'),
           b'GET /c/u1 HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: rh-1\r\n' + route_part +
           b'\r\n')
    r = c.request('GET', '/d/7', [('Host', 'api.test'), ('X-Request-Id', 'rh-2')])
    env.eq('a header the request does not carry: left out', one.requests[1].raw,
           b'GET /a HTTP/1.1\r\nHost: api.test\r\nX-Request-Id: rh-2\r\nX-Uid: 7\r\n'
           b'X-Forwarded-For: 127.0.0.1\r\nX-Shared: route\r\nX-Route: dash\r\n'
           b'X-Own: route\r\n\r\n')


@T.case
def path_captures_stay_inside_the_backend_path(env):
    """A %2F in a capture stays %2F in a backend path; a capture holding a dot segment
    once decoded ("." or "..", encoded or not, around a %2F) is a bad request, no backend
    asked.  Dot segments of the client's path itself are resolved before routing."""
    files = env.scripted(default=json_answer(b'"f"'))
    other = env.scripted(default=json_answer(b'"o"'))
    conf = upstream_config('127.0.0.1:1', routes=[
        {'name': 'files', 'match': {'path': '/files/{rest...}'}, 'backends': {
            'f': {'upstream': 'files', 'path': '/store/${path.rest}?q=${path.rest}'},
            'o': {'upstream': 'other', 'path': '/other', 'required': False}}},
        {'name': 'users', 'match': {'path': '/users/{id}'}, 'backends': {
            'u': {'upstream': 'files', 'path': '/u/${path.id}', 'required': False}}},
        {'name': 'search', 'match': {'path': '/search/{rest...}'}, 'backends': {
            's': {'upstream': 'files', 'path': '/find?q=${path.rest}'}}}])
    conf['upstreams'] = {'files': {'servers': [files.address]},
                         'other': {'servers': [other.address]}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    for target in ('/files/..%2F..%2Fadmin', '/files/a%2F..%2Fb', '/files/%2e%2E%2Fx',
                   '/files/a%2F.%2Fb', '/files/a%2F.', '/files/..%2F', '/files/x/%2E%2F'):
        r = get(env, gw, target, headers=[('X-Request-Id', 'dot')], client=c)
        env.gateway_error('%s: 400' % target, r, 400, 'bad_request',
                          'backend f: ${path.rest} holds a dot segment (\'.\' or \'..\'), which '
                          'cannot go in a path', False, request_id='dot')
    r = get(env, gw, '/users/%2E.%2F', headers=[('X-Request-Id', 'dot')], client=c)
    env.gateway_error('a {NAME} capture too, its backend optional', r, 400, 'bad_request',
                      'backend u: ${path.id} holds a dot segment (\'.\' or \'..\'), which cannot go '
                      'in a path', False, request_id='dot')
    env.eq('no backend was asked', (files.requests, other.requests), ([], []))
    for target in ('/files/a%2Fb/c', '/files/.../x.', '/files/a./.b/%2E%2E%2E', '/files/',
                   '/files/a/../b', '/files/a/./b', '/files/x/%2E'):
        env.eq('%s: answered' % target, get(env, gw, target, client=c).status, 200)
    env.eq('the backend paths: the client\'s slashes, a %2F stays %2F, the path normal',
           [q.target for q in files.requests],
           ['/store/a%2Fb/c?q=a%2Fb%2Fc', '/store/.../x.?q=...%2Fx.',
            '/store/a./.b/...?q=a.%2F.b%2F...', '/store/?q=', '/store/b?q=b',
            '/store/a/b?q=a%2Fb', '/store/x/?q=x%2F'])
    for target in ('/files/%2e%2E/x', '/files/..', '/users/%2E.'):
        env.eq('%s: the normal path, which no route takes' % target,
               get(env, gw, target, client=c).status, 404)
    r = get(env, gw, '/search/..%2Fx', client=c)
    env.eq('a dot segment in a query is no path: passed, encoded',
           (r.status, files.requests[-1].target), (200, '/find?q=..%2Fx'))


@T.case
def request_and_answer_values_stay_inside_the_backend_path(env):
    """Not only captures: a query parameter or header of the request with a dot segment is a
    bad request; a field of an answer with one fails the backend that would use it."""
    users = env.scripted([json_answer(b'{"id":"a/.."}'), json_answer(b'{"id":"a/b"}')])
    orders = env.scripted(default=json_answer(b'[]'))
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u/${query.u}/${header.x-zone}'},
         'orders': {'upstream': 'orders', 'after': 'user', 'path': '/o/${backend.user.id}'}},
        {'users': [users.address], 'orders': [orders.address]})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    for what, target, zone in (('a query parameter', '/agg?u=%2E%2E', 'eu'),
                               ('a header', '/agg?u=1', 'a/.')):
        r = get(env, gw, target, headers=[('X-Request-Id', 'q'), ('X-Zone', zone)], client=c)
        env.gateway_error(what, r, 400, 'bad_request', 'backend user: ${%s} holds a dot '
                          'segment (\'.\' or \'..\'), which cannot go in a path' %
                          ('query.u' if zone == 'eu' else 'header.x-zone'), False,
                          request_id='q')
    env.eq('no backend was asked', users.requests, [])
    r = get(env, gw, '/agg?u=1', headers=[('X-Request-Id', 'f'), ('X-Zone', 'eu')], client=c)
    env.gateway_error('a field of an answer', r, 502, 'upstream_invalid', 'backend orders: '
                      '${backend.user.id} holds a dot segment (\'.\' or \'..\'), which cannot '
                      'go in a path', False, request_id='f')
    r = get(env, gw, '/agg?u=1', headers=[('X-Zone', 'eu')], client=c)
    env.eq('without one: asked, slashes of values encoded',
           (r.status, [q.target for q in users.requests], [q.target for q in orders.requests]),
           (200, ['/u/1/eu', '/u/1/eu'], ['/o/a%2Fb']))


@T.case
def a_dependent_call_reads_the_answer_it_waits_for(env):
    user = b'{"account":{"id":"ac/1","id":"ac/2"},"region":"eu west","name":"Zo\\u00eb \\"Z\\"","n":12.50}'
    users = env.scripted([json_answer(user), json_answer(b'{"region":"x"}'),
                          answer(http_response(503, b'{}'))])
    orders = env.scripted(default=json_answer(b'[{"id":1}]'))
    gw = env.daemon(aggregated(
        {'orders': {'upstream': 'orders', 'after': 'user',
                    'path': '/accounts/${backend.user.account.id}/orders?region=${backend.user.region}',
                    'headers': {'X-Account-Name': '${backend.user.name}', 'X-N': '${backend.user.n}'}},
         'user': {'upstream': 'users', 'path': '/me'}},
        {'users': [users.address], 'orders': [orders.address]}))
    r = get(env, gw, headers=[('X-Request-Id', 'd-1')])
    env.eq('merged in the order of the configuration', r.body,
           b'{"orders":[{"id":1}],"user":' + user + b'}')
    env.eq('the dependent request: fields of the answer (the last of duplicate keys), '
           'decoded, encoded again for the target', orders.requests[0].raw,
           b'GET /accounts/ac%2F2/orders?region=eu%20west HTTP/1.1\r\nHost: api.test\r\n'
           b'X-Request-Id: d-1\r\nX-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\n'
           b'X-Account-Name: Zo\xc3\xab "Z"\r\nX-N: 12.50\r\n\r\n')
    r = get(env, gw, headers=[('X-Request-Id', 'd-2')])
    env.gateway_error('a field missing from the answer waited for', r, 502, 'upstream_invalid',
                      'backend orders: ${backend.user.account.id}: the answer of backend user '
                      'has no account', False, request_id='d-2')
    r = get(env, gw, headers=[('X-Request-Id', 'd-3')])
    env.gateway_error('the backend waited for fails', r, 502, 'upstream_status',
                      'backend user: the answer of upstream users is status 503', False,
                      request_id='d-3')
    env.eq('orders was asked once', len(orders.requests), 1)


@T.case
def flat_merge_later_backend_wins(env):
    a = env.scripted(default=json_answer(
        b'{ "a" : 1, "b":{"x":1,"x":2}, "e" : null , "c\\u0041":"\\u00e9", "k":1, "k":2, "s\\/":true }'))
    b = env.scripted(default=json_answer(b'{"cA":2,"d":[1e999,-0.0],"a":"\\"3\\"","s/":0}'))
    c = env.scripted([json_answer(b'{}'), json_answer(b'[1]')])
    gw = env.daemon(aggregated(
        {'one': {'upstream': 'a', 'path': '/a'}, 'two': {'upstream': 'b', 'path': '/b'},
         'three': {'upstream': 'c', 'path': '/c'}},
        {'a': [a.address], 'b': [b.address], 'c': [c.address]}, merge='flat'))
    r = get(env, gw)
    env.eq('members side by side; a later (or decoded-equal) key wins; spans as received',
           r.body, b'{"b":{"x":1,"x":2}, "e" : null,"k":2,"cA":2,"d":[1e999,-0.0],"a":"\\"3\\"",'
           b'"s/":0}')
    r = get(env, gw, headers=[('X-Request-Id', 'fl')])
    env.gateway_error('an answer that is not an object', r, 502, 'upstream_invalid',
                      'backend three: the answer of upstream c is not an object, which a flat '
                      'merge takes', False, request_id='fl')


@T.case
def flat_merge_members_are_bounded(env):
    """limits.max_members bounds the top-level members of each answer a flat merge takes
    (and of each object a ${backend...} field is looked for in): an answer over it fails its
    backend, whatever its on_error, as an answer over limits.max_body does."""
    three = b'{"a":{"x":1,"y":2,"z":3,"w":4},"b":2,"c":3}'
    four = b'{"d":1,"e":2,"f":3,"g":4}'
    a = env.scripted(default=json_answer(three))
    b = env.scripted(default=json_answer(four))
    conf = aggregated({'a': {'upstream': 'a', 'path': '/a'},
                       'b': {'upstream': 'b', 'path': '/b', 'on_error': 'pass'}},
                      {'a': [a.address], 'b': [b.address]}, merge='flat')
    conf['limits'] = {'max_members': 3}
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'mm-1')])
    why = 'the answer of upstream b has more members than limits.max_members, which a flat merge takes'
    env.gateway_error('4 members, required (on_error: pass changes nothing)', r, 502,
                      'upstream_invalid', 'backend b: ' + why, False, request_id='mm-1')
    env.check('logged', gw.wait_log(r'route agg: backend b: %s \(request mm-1\)' % why))
    conf['routes'][0]['backends']['b']['required'] = False
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'mm-2')])
    want = (three[:-1] + b',"errors":{"b":{"error":"upstream_invalid","message":"%s"}}}'
            % why.encode())
    env.eq('optional: a partial answer without it, 3 members (nested ones not counted) kept',
           (r.body, r.head), (want, partial_head(len(want), 'mm-2')))
    conf['routes'][0]['merge'] = 'keyed'
    gw = env.daemon(conf)
    env.eq('a keyed merge tokenizes no members: no bound', get(env, gw).body,
           b'{"a":' + three + b',"b":' + four + b'}')
    conf['routes'][0]['backends'] = {
        'b': {'upstream': 'b', 'path': '/b'},
        'x': {'upstream': 'a', 'path': '/x/${backend.b.d}', 'after': 'b'}}
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'mm-3')])
    env.gateway_error('a field looked for in an answer over the bound', r, 502, 'upstream_invalid',
                      'backend x: ${backend.b.d}: the answer of backend b has more members than '
                      'limits.max_members (looking for d)', False, request_id='mm-3')


def flat_members(n, width):
    """An object of n members "kNNNNNNN":"xx...", each 14 + width bytes."""
    return b'{' + b','.join(b'"k%07d":"%s"' % (i, b'x' * width) for i in range(n)) + b'}'


@T.case
def flat_merge_memory_is_bounded(env):
    """Peak RSS (VmHWM) of a flat merge of two 4 MB answers stays under 3 x max_body above
    idle: 99,000 members each (within the default max_members: merged), then 340,000 short
    ones each (over it: refused).  Then four such merges at once: each aggregate goes back to
    the worker with what its merge grew given back, so RSS after them stays near idle (glibc
    keeps some freed heap: under 2 x max_body)."""
    mb = 1 << 20
    within = flat_members(99000, 24)
    other = within.replace(b'"k', b'"j')
    over = flat_members(340000, 0)
    answers = {'/1/within': within, '/2/within': other, '/1/over': over, '/2/over': over,
               '/1/held': within, '/2/held': other}
    release = threading.Event()

    def by_path(req):
        if req.target.endswith('/held'):
            release.wait(30 * SLOW)
        return http_response(200, answers.get(req.target, b'{"s":1}'))

    up = env.scripted(default=answer(by_path))
    conf = upstream_config('127.0.0.1:1', routes=[{
        'name': 'agg', 'match': {'path': '/agg/{size}'}, 'merge': 'flat', 'backends': {
            'one': {'upstream': 'app', 'path': '/1/${path.size}'},
            'two': {'upstream': 'app', 'path': '/2/${path.size}'}}}])
    conf['upstreams'] = {'app': {'servers': [up.address], 'keepalive': 8}}
    conf['limits'] = {'max_body': '8m'}
    gw = env.daemon(conf)
    c = env.client(gw.port, timeout=60 * SLOW)
    r = c.request('GET', '/agg/small', [('Host', 'a')])
    env.eq('a small merge first', (r.status, r.body), (200, b'{"s":1}'))
    idle = gw.rss()['VmRSS']
    limit = 512 * 1024 if instrumented() else 3 * 8 * mb // 1024 + idle
    want = within[:-1] + b',' + other[1:]
    r = c.request('GET', '/agg/within', [('Host', 'a')], keep_body=False)
    env.eq('within max_members: merged, %d bytes, byte-identical (crc32)' % len(want),
           (r.status, r.body_len, r.body_crc), (200, len(want), zlib.crc32(want)))
    peak = gw.rss()['VmHWM']
    print('# within: idle %d kB, peak %d kB (%.2f x max_body above idle)'
          % (idle, peak, (peak - idle) / 8192.0))
    env.check('within: peak RSS %d kB within 3 x max_body + idle (%d kB)' % (peak, limit),
              peak <= limit, peak)
    r = c.request('GET', '/agg/over', [('Host', 'a'), ('X-Request-Id', 'over')])
    env.gateway_error('over max_members', r, 502, 'upstream_invalid', None, False,
                      request_id='over')
    env.check('the first to answer is the one refused', re.fullmatch(
        rb'.*"backend (one|two): the answer of upstream app has more members than '
        rb'limits.max_members, which a flat merge takes".*', r.body), r.body[:300])
    peak = gw.rss()['VmHWM']
    print('# over: peak %d kB' % peak)
    env.check('over: peak RSS %d kB within the same bound' % peak, peak <= limit, peak)

    results = [None] * 4

    def one(i):
        try:
            cl = Client(gw.port, timeout=60 * SLOW)
            results[i] = cl.request('GET', '/agg/held', [('Host', 'a')], keep_body=False)
            cl.close()
        except (OSError, ProtocolError) as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    env.require('4 fan-outs in flight at once', wait_until(
        lambda: sum(q.target.endswith('/held') for q in up.requests) == 8, 20 * SLOW))
    release.set()
    for t in threads:
        t.join(60 * SLOW)
    env.eq('four merges at once, each byte-identical',
           [(r.status, r.body_crc) if isinstance(r, Response) else r for r in results],
           [(200, zlib.crc32(want))] * 4)
    r = c.request('GET', '/agg/small', [('Host', 'a')])
    # The large answers' blocks stay for the next large bodies and go back to the system a
    # second after the last one.
    bound = idle + (256 * 1024 if instrumented() else 2 * 8 * 1024)
    wait_until(lambda: gw.rss()['VmRSS'] <= bound, 5 * SLOW)
    after = gw.rss()['VmRSS']
    print('# after four at once: %d kB' % after)
    env.check('what the merges grew is given back: RSS %d kB after, %d kB idle' % (after, idle),
              after <= bound, after)


@T.case
def ops_on_answers_and_on_the_merged_envelope(env):
    users = env.scripted(default=json_answer(
        b'{"code":0,"data":{"id":7,"name":"N\\u00e9"},"debug":{"t":1}}'))
    orders = env.scripted(default=json_answer(b'{"items":[1,2],"total":2,"secret":"x"}'))
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u', 'response': [{'unwrap': 'data'}]},
         'orders': {'upstream': 'orders', 'path': '/o',
                    'response': [{'drop': ['secret']}, {'rename': {'total': 'count'}},
                                 {'set': {'from': '$upstream', 'rid': '$request_id'}}]}},
        {'users': [users.address], 'orders': [orders.address]},
        response=[{'set': {'gateway': 'jsongate', 'via': '$route', 'tenant': '$header.x-tenant'}},
                  {'wrap': 'result'}])
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'ops'), ('X-Tenant', 'acme')])
    env.eq('backend ops, then the route\'s on the merged envelope', r.body,
           b'{"result":{"user":{"id":7,"name":"N\\u00e9"},"orders":{"items":[1,2],"count":2,'
           b'"from":"%s","rid":"ops"},"gateway":"jsongate","via":"agg","tenant":"acme"}}'
           % orders.address.encode())
    env.eq('Content-Length is the body\'s', int(r.header('Content-Length')), len(r.body))


@T.case
def route_ops_that_fail_follow_on_error(env):
    up = env.scripted(default=json_answer(b'{"x":1}'))
    ops = [{'unwrap': 'missing'}]
    gw = env.daemon(aggregated({'a': {'upstream': 'app', 'path': '/a'}}, {'app': [up.address]},
                               response=ops, on_error='fail'))
    r = get(env, gw, headers=[('X-Request-Id', 'rf')])
    env.gateway_error('on_error: fail', r, 502, 'upstream_invalid',
                      'merged body not rewritten: unwrap: key not found', False, request_id='rf')
    gw = env.daemon(aggregated({'a': {'upstream': 'app', 'path': '/a'}}, {'app': [up.address]},
                               response=ops))
    env.eq('on_error: pass (the default): the merged body untouched', get(env, gw).body,
           b'{"a":{"x":1}}')


@T.case
def a_merged_body_over_max_body_follows_on_error(env):
    """Each answer fits in limits.max_body, the merged body does not: on_error: fail
    answers 502; on_error: pass (the default) sends the merged body as merged, without the
    route's ops, with its Content-Length."""
    up = env.scripted(default=json_answer(b'{"x":1}'))
    two = {'a': {'upstream': 'app', 'path': '/a'}, 'b': {'upstream': 'app', 'path': '/b'}}
    merged = b'{"a":{"x":1},"b":{"x":1}}'
    for what, route in (('no route ops, on_error: fail', {'on_error': 'fail'}),
                        ('route ops, on_error: fail', {'response': [{'wrap': 'r'}],
                                                       'on_error': 'fail'})):
        conf = aggregated(two, {'app': [up.address]}, **route)
        conf['limits'] = {'max_body': 24}
        gw = env.daemon(conf)
        r = get(env, gw, headers=[('X-Request-Id', 'mb')])
        env.gateway_error(what, r, 502, 'upstream_invalid',
                          'the merged body exceeds limits.max_body', False, request_id='mb')
        env.check(what + ': logged', gw.wait_log(r'route agg: the merged body exceeds '
                                                 r'limits.max_body \(request mb\)'))
    for what, route in (('no route ops, on_error: pass', {}),
                        ('route ops, on_error: pass', {'response': [{'wrap': 'r'}]})):
        conf = aggregated(two, {'app': [up.address]}, **route)
        conf['limits'] = {'max_body': 24}
        aport = with_admin(conf)
        gw = env.daemon(conf)
        c = env.client(gw.port)
        r = get(env, gw, headers=[('X-Request-Id', 'mp')], client=c)
        env.eq(what + ': the merged body as merged, untouched by the ops', r.body, merged)
        env.eq(what + ': head, exact', r.head, head_of(len(merged), 'mp'))
        env.check(what + ': logged', gw.wait_log(r'route agg: the merged body exceeds '
                                                 r'limits.max_body \(request mp\)'))
        env.eq(what + ': the connection stays', get(env, gw, client=c).body, merged)
        if route:
            env.eq(what + ': counted as passed for over_limit', scrape(aport).get((
                'jsongate_envelope_total', (('direction', 'response'), ('reason', 'over_limit'),
                                            ('result', 'passed'), ('route', 'agg')))), 2)
    conf = aggregated(two, {'app': [up.address]}, response=[{'wrap': 'r'}], on_error='fail')
    conf['limits'] = {'max_body': 25}
    gw = env.daemon(conf)
    env.eq('a merged body of exactly limits.max_body goes through the ops',
           get(env, gw).body, b'{"r":' + merged + b'}')


@T.case
def compressed_answers_are_inflated(env):
    body = b'{"z":"' + b'zip' * 1000 + b'"}'
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    gzipped = gz.compress(body) + gz.flush()
    deflated = zlib.compress(b'[true,false]')
    one = env.scripted(default=answer(http_response(200, gzipped, [('Content-Encoding', 'gzip')])))
    two = env.scripted(default=answer(http_response(200, deflated, [('Content-Encoding', 'deflate')],
                                                    chunked=True)))
    three = env.scripted(default=answer(http_response(200, b'x', [('Content-Encoding', 'br')])))
    conf = aggregated({'g': {'upstream': 'one', 'path': '/g'}, 'd': {'upstream': 'two', 'path': '/d'}},
                      {'one': [one.address], 'two': [two.address], 'three': [three.address]})
    gw = env.daemon(conf)
    env.eq('gzip and deflate answers inflated, then spliced', get(env, gw).body,
           b'{"g":' + body + b',"d":[true,false]}')
    conf['routes'][0]['backends']['b'] = {'upstream': 'three', 'path': '/b'}
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'br')])
    env.gateway_error('a coding that cannot be inflated', r, 502, 'upstream_invalid',
                      'backend b: the answer of upstream three has a content coding other than '
                      'gzip and deflate', False, request_id='br')
    conf['routes'][0]['compress'] = 'gzip'
    del conf['routes'][0]['backends']['b']
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('Accept-Encoding', 'gzip')])
    env.eq('compress: gzip: the merged body compressed for a client that accepts it',
           (r.header('Content-Encoding'), r.header('Vary'), zlib.decompress(r.body, 31)),
           ('gzip', 'Accept-Encoding', b'{"g":' + body + b',"d":[true,false]}'))


@T.case
def on_error_pass_takes_answers_as_they_are(env):
    html = env.scripted(default=answer(http_response(
        200, b'<p class="x">caf\xc3\xa9 \xff\n</p>', content_type='text/html')))
    json_up = env.scripted(default=json_answer(b'{"a":1}'))
    gw = env.daemon(aggregated(
        {'page': {'upstream': 'html', 'path': '/p', 'on_error': 'pass'},
         'data': {'upstream': 'json', 'path': '/d', 'on_error': 'pass',
                  'response': [{'unwrap': 'nothing'}]}},
        {'html': [html.address], 'json': [json_up.address]}))
    env.eq('not JSON: its text as a JSON string; ops that fail: the answer untouched',
           get(env, gw).body,
           b'{"page":"<p class=\\"x\\">caf\xc3\xa9 \xef\xbf\xbd\\n</p>","data":{"a":1}}')


def scrape(port):
    """Every sample of /metrics, parsed by the Prometheus client library:
    {(name, sorted labels): value}."""
    body = metrics_text(port)
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(body) for smp in fam.samples}


def with_admin(conf):
    port = free_port()
    conf['admin'] = {'listen': '127.0.0.1:%d' % port}
    return port


def partial_head(body_len, rid):
    return head_of(body_len, rid, b'X-Jsongate-Partial: true\r\n')


@T.case
def optional_backends_that_fail_make_a_partial_answer(env):
    good = env.scripted(default=json_answer(b'{"ok":true}'))
    slow = env.scripted(default=hang())
    failing = env.scripted(default=answer(http_response(500, b'{}')))
    text = env.scripted(default=answer(http_response(200, b'oops', content_type='text/plain')))
    conf = aggregated(
        {'good': {'upstream': 'good', 'path': '/g'},
         'slow': {'upstream': 'slow', 'path': '/s', 'required': False, 'timeout': '200ms'},
         'failing': {'upstream': 'failing', 'path': '/f', 'required': False, 'missing': 'null'},
         'text': {'upstream': 'text', 'path': '/t', 'required': False}},
        {'good': [good.address], 'slow': [slow.address], 'failing': [failing.address],
         'text': [text.address]})
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'p-1')])
    want = (b'{"good":{"ok":true},"failing":null,"errors":{'
            b'"slow":{"error":"upstream_timeout","message":"upstream slow did not answer in time"},'
            b'"failing":{"error":"upstream_status","message":"the answer of upstream failing is '
            b'status 500"},'
            b'"text":{"error":"upstream_invalid","message":"the answer of upstream text is not one '
            b'JSON value"}}}')
    env.eq('partial: 200, the failed keys left out (or null), an errors member', r.body, want)
    env.eq('partial: X-Jsongate-Partial: true', r.head, partial_head(len(want), 'p-1'))
    r = get(env, gw, method='HEAD', headers=[('X-Request-Id', 'p-1')])
    env.eq('HEAD of a partial answer', r.head, partial_head(len(want), 'p-1'))


@T.case
def a_required_backend_that_fails_fails_the_route(env):
    good = env.scripted(default=json_answer(b'{"ok":true}'))
    slow = env.scripted(default=hang())
    text = env.scripted(default=answer(http_response(200, b'oops', content_type='text/plain')))
    conf = aggregated(
        {'good': {'upstream': 'good', 'path': '/g', 'required': False},
         'slow': {'upstream': 'slow', 'path': '/s', 'timeout': '200ms'}},
        {'good': [good.address], 'slow': [slow.address], 'text': [text.address]})
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'r-1')])
    env.gateway_error('slow and required', r, 504, 'upstream_timeout',
                      'backend slow: upstream slow did not answer in time', False, request_id='r-1')
    conf['routes'][0]['backends']['slow'] = {'upstream': 'text', 'path': '/t'}
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'r-2')])
    env.gateway_error('not JSON and required', r, 502, 'upstream_invalid',
                      'backend slow: the answer of upstream text is not one JSON value', False,
                      request_id='r-2')


@T.case
def backends_connect_within_the_route_timeouts(env):
    # Connecting to the full listener never completes: only upstream_connect can end it.
    lst, fillers = blackhole()
    try:
        fast = env.scripted(default=json_answer(b'1'))
        conf = aggregated(
            {'fast': {'upstream': 'fast', 'path': '/f'},
             'hole': {'upstream': 'hole', 'path': '/h', 'required': False}},
            {'fast': [fast.address], 'hole': ['127.0.0.1:%d' % lst.getsockname()[1]]},
            timeouts={'upstream_connect': '%dms' % (500 * SLOW)})
        gw = env.daemon(conf)
        start = time.monotonic()
        r = get(env, gw, headers=[('X-Request-Id', 'c-1')])
        took = time.monotonic() - start
        want = (b'{"fast":1,"errors":{"hole":{"error":"upstream_timeout","message":'
                b'"connect to upstream hole timed out"}}}')
        env.eq('the backend that cannot connect is left out', (r.status, r.body), (200, want))
        env.check('after the route\'s upstream_connect, not at once', took >= 0.4 * SLOW,
                  '%.2fs' % took)
    finally:
        for s in fillers:
            s.close()
        lst.close()


@T.case
def every_backend_failing(env):
    closed = env.closed_port()
    slow = env.scripted(default=hang())
    conf = aggregated(
        {'a': {'upstream': 'slow', 'path': '/a', 'required': False, 'timeout': '100ms'},
         'b': {'upstream': 'gone', 'path': '/b', 'required': False}},
        {'gone': ['127.0.0.1:%d' % closed], 'slow': [slow.address]})
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'all')])
    env.gateway_error('nothing to merge: the first failure in time answers, not the first '
                      'backend\'s', r, 502, 'upstream_unavailable',
                      'backend b: connect to upstream gone refused', False, request_id='all')
    conf['routes'][0]['timeout'] = '%dms' % (100 * SLOW)
    del conf['routes'][0]['backends']['a']['timeout']
    conf['routes'][0]['backends']['b'] = {'upstream': 'slow', 'path': '/b', 'required': False}
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'all-2')])
    env.gateway_error('all out of time at once: the first in the list', r, 504,
                      'upstream_timeout', 'backend a: no answer within the route\'s timeout',
                      False, request_id='all-2')


@T.case
def the_route_timeout_bounds_every_backend(env):
    fast = env.scripted(default=json_answer(b'1'))
    slow = env.scripted(default=hang())
    conf = aggregated(
        {'fast': {'upstream': 'fast', 'path': '/f'},
         'slow': {'upstream': 'slow', 'path': '/s', 'required': False},
         'later': {'upstream': 'fast', 'path': '/l', 'after': 'slow', 'required': False}},
        {'fast': [fast.address], 'slow': [slow.address]}, timeout='%dms' % (300 * SLOW),
        errors_key='_failed')
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 't-1')])
    want = (b'{"fast":1,"_failed":{"slow":{"error":"upstream_timeout","message":"no answer '
            b'within the route\'s timeout"},"later":{"error":"upstream_timeout","message":"no '
            b'answer within the route\'s timeout"}}}')
    env.eq('the answers in time, the others in errors_key', r.body, want)
    env.eq('partial', r.head, partial_head(len(want), 't-1'))
    conf['routes'][0]['backends']['slow']['required'] = True
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 't-2')])
    env.gateway_error('a required backend out of time', r, 504, 'upstream_timeout',
                      'backend slow: no answer within the route\'s timeout', False,
                      request_id='t-2')
    env.check('logged', gw.wait_log(r'route agg: not every backend answered within the '
                                    r'route\'s timeout \(request t-2\)'))


@T.case
def a_backend_waiting_for_a_failed_one_is_not_requested(env):
    users = env.scripted(default=answer(http_response(404, b'{}')))
    orders = env.scripted(default=json_answer(b'[]'))
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u', 'required': False},
         'orders': {'upstream': 'orders', 'path': '/o/${backend.user.id}', 'after': 'user',
                    'required': False},
         'other': {'upstream': 'orders', 'path': '/x'}},
        {'users': [users.address], 'orders': [orders.address]})
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'w-1')])
    env.eq('both in the errors member', r.body,
           b'{"other":[],"errors":{"user":{"error":"upstream_status","message":"the answer of '
           b'upstream users is status 404"},"orders":{"error":"upstream_status","message":'
           b'"backend user, whose answer it waits for, failed"}}}')
    env.eq('orders got only the independent request', [q.target for q in orders.requests], ['/x'])
    conf['routes'][0]['backends']['orders']['required'] = True
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'w-2')])
    env.gateway_error('a required one: the route fails', r, 502, 'upstream_status',
                      'backend orders: backend user, whose answer it waits for, failed', False,
                      request_id='w-2')


@T.case
def a_flat_partial_answer_keeps_its_errors_member(env):
    a = env.scripted(default=json_answer(b'{"a":1,"errors":["theirs"],"z":0}'))
    b = env.scripted(default=answer(http_response(503, b'{}')))
    gw = env.daemon(aggregated(
        {'a': {'upstream': 'a', 'path': '/a'}, 'b': {'upstream': 'b', 'path': '/b', 'required': False}},
        {'a': [a.address], 'b': [b.address]}, merge='flat'))
    r = get(env, gw)
    env.eq('a member named like errors_key gives way to it', r.body,
           b'{"a":1,"z":0,"errors":{"b":{"error":"upstream_status","message":"the answer of '
           b'upstream b is status 503"}}}')
    env.eq('partial', r.header('X-Jsongate-Partial'), 'true')


# A code/msg/data envelope: code 0 is the data with 200, 1001 a bad token, anything else 502.
ENVELOPE_OPS = [{'status_from': {'field': 'code', 'map': {0: 200, 1001: 401, 3: 302, 404: 404},
                                 'default': 502}},
                {'unwrap': 'data', 'when': {'field': 'code', 'equals': 0}}]


def error_head(status, reason, body_len, rid):
    return (b'HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n'
            b'Content-Length: %d\r\n\r\n' % (status, reason, rid.encode(), body_len))


@T.case
def a_required_backend_maps_its_error_envelope(env):
    """status_from on a required backend: a 2xx mapping is an answer to merge; a 4xx or 5xx
    one fails the route with that status and the backend's answer as its ops left it."""
    users = env.scripted([
        json_answer(b'{"code":0,"data":{"id":7,"name":"N"}}'),
        json_answer(b'{"code":1001,"msg":"bad token"}'),
        json_answer(b' {"code":99,"msg":"\\u00e9"}\n'),
        json_answer(b'{"code":3,"to":"/elsewhere"}'),
        json_answer(b'{"code":1001,"msg":"bad token"}')])
    orders = env.scripted(default=json_answer(b'{"items":[],"secret":1}'))
    log_path = os.path.join(env.tmp, 'access.log')
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u', 'response': ENVELOPE_OPS},
         'orders': {'upstream': 'orders', 'path': '/o',
                    'response': [{'drop': ['secret'], 'when': {'status': 200}},
                                 {'set': {'late': True}, 'when': {'status': 201}}]}},
        {'users': [users.address], 'orders': [orders.address]},
        response=[{'wrap': 'result'}], compress='gzip')
    conf['log'] = {'level': 'info', 'access': log_path, 'format': 'json'}
    aport = with_admin(conf)
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'e-0')])
    want = b'{"result":{"user":{"id":7,"name":"N"},"orders":{"items":[]}}}'
    env.eq('code 0: its data merged (when: on a field, when: on the status)', r.body, want)
    env.eq('code 0: 200, complete', r.head, head_of(len(want), 'e-0'))
    r = get(env, gw, headers=[('X-Request-Id', 'e-1')])
    want = b'{"code":1001,"msg":"bad token"}'
    env.eq('code 1001: 401 with the backend\'s answer, not merged, not the route\'s ops',
           (r.head, r.body), (error_head(401, b'Unauthorized', len(want), 'e-1'), want))
    r = get(env, gw, headers=[('X-Request-Id', 'e-2')])
    want = b' {"code":99,"msg":"\\u00e9"}\n'
    env.eq('an unmapped code: the default, 502, the answer as it came',
           (r.head, r.body), (error_head(502, b'Bad Gateway', len(want), 'e-2'), want))
    r = get(env, gw, headers=[('X-Request-Id', 'e-3')])
    env.gateway_error('a 3xx mapping fails the backend too, as a gateway error', r, 502,
                      'upstream_status', 'backend user: the answer of upstream users is status '
                      '302 by status_from', False, request_id='e-3')
    r = get(env, gw, headers=[('X-Request-Id', 'e-4'), ('Accept-Encoding', 'gzip')])
    env.eq('compress: gzip applies to it', (r.status, r.header('Content-Encoding'),
                                            zlib.decompress(r.body, 31)),
           (401, 'gzip', b'{"code":1001,"msg":"bad token"}'))
    lines = wait_until(lambda: [json.loads(l) for l in open(log_path).read().splitlines()]
                       if open(log_path).read().count('\n') >= 5 else None, 5)
    env.eq('access log: the route\'s status, and the backend\'s as status_from made it',
           [(l['status'], l['backends']['user']['status'], l['backends']['user']['outcome'])
            for l in lines],
           [(200, 200, 'ok'), (401, 401, 'status'), (502, 502, 'status'),
            (502, 302, 'status'), (401, 401, 'status')])
    m = scrape(aport)
    env.eq('counted as failed on its status', [m.get(('jsongate_backend_requests_total', (
        ('backend', 'user'), ('outcome', o), ('route', 'agg')))) for o in ('ok', 'status')],
        [1, 4])
    env.eq('the upstream\'s own answers were 200', m.get((
        'jsongate_upstream_requests_total', (('outcome', 'ok'), ('server', users.address),
                                             ('upstream', 'users')))), 5)


@T.case
def an_optional_backend_maps_its_error_envelope(env):
    """status_from on an optional backend: a status that is not 2xx leaves it out of a
    partial answer, the errors member naming it and its status."""
    users = env.scripted(default=json_answer(b'{"id":7}'))
    profiles = env.scripted([json_answer(b'{"code":404,"data":null}'),
                             json_answer(b'{"code":0,"data":{"bio":"x"}}'),
                             json_answer(b'{"code":404,"data":null}')])
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u'},
         'profile': {'upstream': 'profiles', 'path': '/p', 'response': ENVELOPE_OPS,
                     'required': False, 'missing': 'null'}},
        {'users': [users.address], 'profiles': [profiles.address]})
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'o-1')])
    want = (b'{"user":{"id":7},"profile":null,"errors":{"profile":{"error":"upstream_status",'
            b'"message":"the answer of upstream profiles is status 404 by status_from"}}}')
    env.eq('code 404: partial, null, in the errors member', r.body, want)
    env.eq('code 404: 200 and X-Jsongate-Partial', r.head, partial_head(len(want), 'o-1'))
    r = get(env, gw, headers=[('X-Request-Id', 'o-2')])
    want = b'{"user":{"id":7},"profile":{"bio":"x"}}'
    env.eq('code 0: complete', (r.head, r.body), (head_of(len(want), 'o-2'), want))
    # Both fail, the mapped one first: nothing to merge, its answer is the route's.
    slow = env.scripted(default=answer(http_response(500, b'{}'), delay=0.2 * SLOW))
    conf['upstreams']['users']['servers'] = [slow.address]
    conf['routes'][0]['backends']['user']['required'] = False
    gw = env.daemon(conf)
    r = get(env, gw, headers=[('X-Request-Id', 'o-3')])
    want = b'{"code":404,"data":null}'
    env.eq('every backend failed, the mapped one first: its status and answer, not partial',
           (r.head, r.body), (error_head(404, b'Not Found', len(want), 'o-3'), want))


@T.case
def metrics_and_access_log_per_backend(env):
    users = env.scripted([json_answer(b'{"id":1}'), json_answer(b'{"id":2}'),
                          answer(http_response(500, b'{}')), json_answer(b'{"id":4}')])
    orders = env.scripted(default=json_answer(b'[]'))
    slow = env.scripted(default=hang())
    log_path = os.path.join(env.tmp, 'access.log')
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u', 'required': False},
         'orders': {'upstream': 'orders', 'path': '/o/${backend.user.id}', 'after': 'user',
                    'required': False},
         'slow': {'upstream': 'slow', 'path': '/s', 'required': False, 'timeout': '100ms'}},
        {'users': [users.address], 'orders': [orders.address], 'slow': [slow.address]},
        name='dash')
    conf['log'] = {'level': 'info', 'access': log_path, 'format': 'json'}
    aport = with_admin(conf)
    gw = env.daemon(conf)
    env.eq('partial, partial, then every backend failed',
           [get(env, gw, headers=[('X-Request-Id', 'm-%d' % i)]).status for i in range(3)],
           [200, 200, 502])
    m = scrape(aport)

    def count(backend, outcome):
        return m.get(('jsongate_backend_requests_total', (('backend', backend),
                      ('outcome', outcome), ('route', 'dash'))))

    env.eq('outcomes per backend', [count('user', 'ok'), count('user', 'status'),
                                    count('orders', 'ok'), count('orders', 'skipped'),
                                    count('slow', 'timeout')], [2, 1, 2, 1, 3])
    env.eq('no other outcome', sorted(k[1] for k in m if k[0] == 'jsongate_backend_requests_total'),
           sorted([(('backend', 'user'), ('outcome', 'ok'), ('route', 'dash')),
                   (('backend', 'user'), ('outcome', 'status'), ('route', 'dash')),
                   (('backend', 'orders'), ('outcome', 'ok'), ('route', 'dash')),
                   (('backend', 'orders'), ('outcome', 'skipped'), ('route', 'dash')),
                   (('backend', 'slow'), ('outcome', 'timeout'), ('route', 'dash'))]))
    hist = {b: m.get(('jsongate_backend_duration_seconds_count', (('backend', b), ('route', 'dash'))))
            for b in ('user', 'orders', 'slow')}
    env.eq('a latency histogram per backend, of the requests sent', hist,
           {'user': 3, 'orders': 2, 'slow': 3})

    def buckets(backend):
        return [m.get(('jsongate_backend_duration_seconds_bucket',
                       (('backend', backend), ('le', le), ('route', 'dash'))))
                for le in ('0.05', '10', '+Inf')]

    def seconds(backend):
        return m.get(('jsongate_backend_duration_seconds_sum',
                      (('backend', backend), ('route', 'dash'))))
    env.eq('slow: none within 50 ms (its timeout is 100 ms), all three within 10 s, cumulative',
           buckets('slow'), [0, 3, 3])
    env.check('slow: the sum is of seconds, each over 50 ms and under 10 s (%r)' % seconds('slow'),
              3 * 0.05 < seconds('slow') < 3 * 10)
    env.eq('user: all three within 10 s', buckets('user')[1:], [3, 3])
    env.check('user: its sum below slow\'s (%r < %r)' % (seconds('user'), seconds('slow')),
              seconds('user') < seconds('slow'))
    env.eq('backend exchanges count as upstream requests too', m.get((
        'jsongate_upstream_requests_total', (('outcome', 'ok'), ('server', users.address),
                                             ('upstream', 'users')))), 3)
    lines = wait_until(lambda: [json.loads(l) for l in open(log_path).read().splitlines()]
                       if open(log_path).read().count('\n') >= 3 else None, 5)
    env.eq('access log: each backend\'s status, outcome and time',
           [{k: (v['status'], v['outcome']) for k, v in l['backends'].items()} for l in lines],
           [{'user': (200, 'ok'), 'orders': (200, 'ok'), 'slow': (0, 'timeout')},
            {'user': (200, 'ok'), 'orders': (200, 'ok'), 'slow': (0, 'timeout')},
            {'user': (500, 'status'), 'orders': (0, 'skipped'), 'slow': (0, 'timeout')}])
    env.eq('access log: a backend never sent took no time',
           lines[2]['backends']['orders']['duration_ms'], 0)
    env.eq('access log: the rest as for any request', (lines[0]['route'], lines[0]['upstream'],
                                                       lines[0]['status']), ('dash', '-', 200))
    conf['log']['format'] = 'combined'
    del conf['admin']
    gw = env.daemon(conf)
    get(env, gw, headers=[('User-Agent', 'ua')])
    line = wait_until(lambda: open(log_path).read().splitlines()[-1]
                      if open(log_path).read().count('\n') >= 4 else None, 5)
    env.check('combined: a quoted field of name:status:outcome:ms words', re.search(
        r'"ua" "user:200:ok:\d+\.\d{3} orders:200:ok:\d+\.\d{3} slow:0:timeout:\d+\.\d{3}"$',
        line), line)


@T.case
def backend_durations_are_precise(env):
    """Backends answering after 3 ms and 7 ms: each logged time is at least its delay and at
    most the request's, with microseconds (not a coarse clock's whole milliseconds), and
    the histogram's sums are the logged times."""
    delays = {'a': 0.003, 'b': 0.007}
    ups = {n: env.scripted(default=json_answer(b'1', delay=d)) for n, d in delays.items()}
    log_path = os.path.join(env.tmp, 'access.log')
    conf = aggregated({n: {'upstream': n, 'path': '/' + n} for n in delays},
                      {n: [u.address] for n, u in ups.items()})
    conf['log'] = {'level': 'info', 'access': log_path, 'format': 'json'}
    aport = with_admin(conf)
    gw = env.daemon(conf)
    c = env.client(gw.port)
    n = 6
    env.eq('answered', [get(env, gw, client=c).body for _ in range(n)], [b'{"a":1,"b":1}'] * n)
    lines = wait_until(lambda: [json.loads(l) for l in open(log_path).read().splitlines()]
                       if open(log_path).read().count('\n') >= n else None, 5)
    env.require('a line a request', lines is not None and len(lines) == n, lines)
    took = [(l['duration_ms'], {b: l['backends'][b]['duration_ms'] for b in delays})
            for l in lines]
    env.check('each backend took at least its delay', all(
        t[b] >= delays[b] * 1000 for _, t in took for b in delays), took)
    env.check('each backend took at most the request', all(
        t[b] <= req for req, t in took for b in delays), took)
    whole = [t[b] for _, t in took for b in delays if t[b] == int(t[b])]
    env.check('microseconds: hardly any time a whole number of milliseconds', len(whole) < 3,
              (whole, took))
    env.check('not in 4 ms steps', any(t[b] % 4 != 0 for _, t in took for b in delays), took)
    m = scrape(aport)
    for b in delays:
        key = (('backend', b), ('route', 'agg'))
        logged = sum(t[b] for _, t in took) / 1000
        got = m.get(('jsongate_backend_duration_seconds_sum', key))
        env.check('%s: the histogram\'s sum is the logged times\' (%r, %r)' % (b, got, logged),
                  got is not None and abs(got - logged) < 0.001)
        env.eq('%s: counted' % b, m.get(('jsongate_backend_duration_seconds_count', key)), n)


@T.case
def sighup_while_fan_outs_are_in_flight(env):
    release = threading.Event()

    def held(req):
        release.wait(30 * SLOW)
        return http_response(200, b'{"held":true}')

    slow = env.scripted(default=answer(held))
    fast = env.scripted(default=json_answer(b'{"fast":1}'))
    conf = aggregated({'slow': {'upstream': 'slow', 'path': '/s'},
                       'fast': {'upstream': 'fast', 'path': '/f'}},
                      {'slow': [slow.address], 'fast': [fast.address]})
    conf['upstreams']['slow']['keepalive'] = 16
    gw = env.daemon(conf)
    results = [None] * 8

    def one(i):
        try:
            c = Client(gw.port, timeout=30 * SLOW)
            results[i] = c.request('GET', '/agg', [('Host', 'a')])
            c.close()
        except (OSError, ProtocolError) as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    env.require('8 fan-outs in flight', wait_until(lambda: len(slow.requests) == 8, 10 * SLOW))
    conf['routes'].insert(0, {'name': 'probe', 'match': {'path': '/probe'},
                              'backends': {'p': {'upstream': 'fast', 'path': '/p'}}})
    conf['routes'][1]['backends']['slow']['path'] = '/s2'
    gw.write_config(dict(conf, listeners=[{'listen': '127.0.0.1:%d' % gw.port}]))
    gw.signal(signal.SIGHUP)

    def probe():
        try:
            return Client(gw.port).request('GET', '/probe', [('Host', 'a')]).status == 200
        except (OSError, ProtocolError):
            return False
    env.check('the new configuration serves', wait_until(probe, 10 * SLOW, 0.05))
    release.set()
    for t in threads:
        t.join(30 * SLOW)
    env.eq('every fan-out in flight completed on the old configuration',
           [(r.status, r.body) if isinstance(r, Response) else r for r in results],
           [(200, b'{"slow":{"held":true},"fast":{"fast":1}}')] * 8)
    r = get(env, gw)
    env.eq('then the new one', (r.status, slow.requests[-1].target), (200, '/s2'))
    env.check('still the same process', gw.alive())


def fds(pid):
    return len(os.listdir('/proc/%d/fd' % pid))


@T.case
def ten_thousand_fan_outs_leave_nothing_behind(env):
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    gzipped = gz.compress(b'{"z":[1,2,3]}') + gz.flush()
    rotation = [json_answer(b'{"n":1}'), answer(http_response(500, b'{}')),
                garbage(), reset(), answer(http_response(200, gzipped, [('Content-Encoding', 'gzip')])),
                answer(http_response(200, b'not json')), json_answer(b'{"n":2}', close=True)]
    turn = {'i': 0}

    def next_step():
        turn['i'] += 1
        return rotation[turn['i'] % len(rotation)]

    users = env.scripted(default=json_answer(b'{"id":"a b"}'))
    orders = env.scripted(default=json_answer(b'[]'))
    orders._next_step = next_step
    conf = aggregated(
        {'user': {'upstream': 'users', 'path': '/u'},
         'orders': {'upstream': 'orders', 'path': '/o/${backend.user.id}', 'after': 'user',
                    'required': False, 'response': [{'set': {'rid': '$request_id'}}]},
         'more': {'upstream': 'orders', 'path': '/m', 'required': False, 'missing': 'null'}},
        {'users': [users.address], 'orders': [orders.address]}, merge='keyed')
    conf['upstreams']['orders']['max_fails'] = 0
    gw = env.daemon(conf)
    total = int(os.environ.get('FAULT_REQUESTS', '10000')) // (SLOW if WRAPPER else 1)
    statuses = {}

    def burst(n):
        c = env.client(gw.port)
        for i in range(n):
            try:
                if i % 97 == 0:
                    # a client that goes away in the middle of a fan-out
                    c.send(build_request('GET', '/agg', [('Host', 'a')]))
                    c.close()
                    c = env.client(gw.port)
                    continue
                r = c.request('GET', '/agg', [('Host', 'a')])
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.header('Connection') == 'close' or not r.complete:
                    raise ProtocolError('closed')
            except (ProtocolError, OSError, socket.timeout):
                c.close()
                c = env.client(gw.port)
        c.close()

    burst(total // 10)
    base_fds, base_rss = fds(gw.proc.pid), gw.rss()['VmRSS']
    burst(total - total // 10)
    # what the clients that went away left in flight ends with the loop
    last = env.client(gw.port)
    get(env, gw, client=last)
    last.close()
    # A leak would be thousands; the pools of the two upstreams may hold an idle connection
    # or two more or fewer than at the first count (seen: 14 then 17 under ASan).
    settled = wait_until(lambda: fds(gw.proc.pid) <= base_fds + 3, 5 * SLOW)
    env.check('no file descriptor left behind (%d before, %d after)' % (
        base_fds, fds(gw.proc.pid)), settled)
    rss = gw.rss()['VmRSS']
    # ASan keeps up to 256 MB of freed memory in quarantine: there its leak check at exit
    # (and valgrind's) stands for this one
    env.check('memory stays put (%d kB before, %d kB after)' % (base_rss, rss),
              rss <= base_rss + (256 * 1024 if instrumented() else 2048))
    env.check('every answer 200 (partial or complete)', set(statuses) == {200}, statuses)


@T.case
def sixteen_backends(env):
    def by_path(req):
        n = int(req.target.split('/')[-1])
        return http_response(200, b'{"n":%d,"s":"%s"}' % (n, b'x' * (n * 100)))

    up = env.scripted(default=answer(by_path))
    backends = {'b%02d' % i: {'upstream': 'app', 'path': '/n/%d' % i} for i in range(16)}
    gw = env.daemon(aggregated(backends, {'app': [up.address]}))
    c = env.client(gw.port)
    for _ in range(3):
        r = get(env, gw, client=c)
    want = b'{' + b','.join(b'"b%02d":{"n":%d,"s":"%s"}' % (i, i, b'x' * (i * 100))
                            for i in range(16)) + b'}'
    env.eq('16 answers in the order of the configuration', r.body, want)
    env.eq('48 backend requests', len(up.requests), 48)


@T.case
def the_access_log_lists_every_backend(env):
    """256 backends with long names: every one in the line, which stays one JSON object (or
    one quoted combined field) however long it grows."""
    up = env.scripted(default=json_answer(b'1'))
    names = ['b%03d-' % i + 'n' * 200 + '"\u00e9' for i in range(256)]
    backends = {n: {'upstream': 'app', 'path': '/n'} for n in names}
    log_path = os.path.join(env.tmp, 'access.log')
    conf = aggregated(backends, {'app': [up.address]})
    conf['limits'] = {'max_backends': 256}
    conf['log'] = {'level': 'info', 'access': log_path, 'format': 'json'}
    gw = env.daemon(conf)
    r = get(env, gw)
    env.require('answered', r is not None and r.status == 200, r)
    lines = wait_until(lambda: open(log_path, 'rb').read().splitlines()
                       if os.path.exists(log_path) and open(log_path, 'rb').read() else None, 5)
    env.require('one line', lines is not None and len(lines) == 1, lines)
    entry = json.loads(lines[0])
    env.eq('every backend, in order, whole names (UTF-8 as it is)',
           list(entry['backends']), names)
    env.eq('each with its status and outcome',
           {(b['status'], b['outcome']) for b in entry['backends'].values()}, {(200, 'ok')})
    env.check('nothing said left out', 'backends_omitted' not in entry, entry.keys())
    env.check('past 64 KB', len(lines[0]) > 65536, len(lines[0]))
    conf['log']['format'] = 'combined'
    gw = env.daemon(conf)
    get(env, gw, headers=[('User-Agent', 'ua')])
    lines = wait_until(lambda: open(log_path, 'rb').read().splitlines()
                       if len(open(log_path, 'rb').read().splitlines()) >= 2 else None, 5)
    env.require('a second line', lines is not None and len(lines) == 2, lines)
    m = re.search(rb' "ua" "([^"]*)"$', lines[1])
    words = m.group(1).split(b' ') if m else []
    env.eq('combined: one word per backend, in order',
           [w.rsplit(b':', 3)[0] for w in words],
           [n.replace('"', '\\x22').replace('\u00e9', '\\xC3\\xA9').encode() for n in names])


@T.case
def ten_megabyte_answers(env):
    big = b'{"data":"' + b'0123456789abcdef' * (10 * 65536) + b'","end":true}'
    arr = b'[' + b','.join(b'%d' % i for i in range(1400000)) + b']'
    one = env.scripted(default=json_answer(big))
    two = env.scripted(default=answer(http_response(200, arr, chunked=True)))
    conf = aggregated({'big': {'upstream': 'one', 'path': '/big'},
                       'arr': {'upstream': 'two', 'path': '/arr'}},
                      {'one': [one.address], 'two': [two.address]})
    conf['limits'] = {'max_body': '24m'}       # the merged body's bound too
    gw = env.daemon(conf)
    c = env.client(gw.port, timeout=60)
    want = b'{"big":' + big + b',"arr":' + arr + b'}'
    for i in range(2):
        r = c.request('GET', '/agg', [('Host', 'a')], keep_body=False)
        env.eq('answer %d: %d bytes, byte-identical (crc32)' % (i, len(want)),
               (r.status, r.body_len, r.body_crc), (200, len(want), zlib.crc32(want)))
    conf['limits'] = {'max_body': '8m'}
    del conf['routes'][0]['backends']['arr']
    gw2 = env.daemon(conf)
    r = env.client(gw2.port).request('GET', '/agg', [('Host', 'a'), ('X-Request-Id', 'big')])
    env.gateway_error('an answer over limits.max_body', r, 502, 'upstream_invalid',
                      'backend big: the answer of upstream one is over its size limit', False,
                      request_id='big')


@T.case
def a_request_body_is_not_forwarded(env):
    up = env.scripted(default=json_answer(b'1'))
    gw = env.daemon(aggregated({'one': {'upstream': 'app', 'path': '/1'}}, {'app': [up.address]}))
    c = env.client(gw.port)
    r = c.request('POST', '/agg', [('Host', 'a')], body=b'{"ignored":true}')
    env.eq('answered', (r.status, r.body), (200, b'{"one":1}'))
    env.eq('then the connection closes', (r.header('Connection'), c.wait_closed()), ('close', True))
    env.eq('the backend got no body', up.requests[0].body, b'')
    # A JSON body is looked at for $json fields only on routes that have an upstream.
    c = env.client(gw.port)
    r = c.request('POST', '/agg', [('Host', 'a'), ('Content-Type', 'application/json')],
                  body=b'{"ignored":true}')
    env.eq('a JSON body too', (r.status, r.body), (200, b'{"one":1}'))
    env.eq('neither reached the backend', [q.body for q in up.requests], [b'', b''])


@T.case
def the_merged_answer_carries_date(env):
    """An aggregated answer is jsongate's own: it carries Date, the current time, right after
    the status line (the backends' Date headers are not its)."""
    users = env.scripted(default=json_answer(b'{"id":7}'))
    gw = env.daemon(aggregated({'user': {'upstream': 'users', 'path': '/users/7'}},
                               {'users': [users.address]}))
    r = get(env, gw, headers=[('X-Request-Id', 'agg-date')])
    want = b'{"user":{"id":7}}'
    env.check('a Date of now', r is not None and date_is_now(r.date), r and r.date)
    env.eq('exact head, Date first', r.raw_head if r else None,
           b'HTTP/1.1 200 OK\r\nDate: %s\r\n' % (r and r.date or '').encode() +
           head_of(len(want), 'agg-date')[len(b'HTTP/1.1 200 OK\r\n'):])
    env.eq('body', r.body if r else None, want)


T.run()
