"""$json.PATH variables: request body fields in `set` of request and
response ops (decoded strings, other values as their bytes, absent as
null, a field outside limits.route_scan), read from the whole body on a
route whose request ops take it (ops, header ops, the log and the hash key
past the window, the value as the client sent it), the `hash` balancing key (sticky
by $json.user_id, escapes decoded), the access log (log.json_fields, never
the values of an earlier request on the connection), the same look serving
match.json and the variables, and configuration errors."""

import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def echo(env):
    """An upstream answering with the request body it got."""
    return env.scripted([], answer(lambda req: http_response(200, req.body)))


def post(c, body, target='/api', headers=()):
    return c.request('POST', target, [('Host', 'a'), ('Content-Type', 'application/json')] +
                     list(headers), body)


def read_lines(path, n, timeout=5):
    def enough():
        if not os.path.exists(path):
            return None
        with open(path, 'rb') as f:
            lines = f.read().decode('utf-8', 'replace').splitlines()
        return lines if len(lines) >= n else None
    return wait_until(enough, timeout * SLOW) or []


@T.case
def set_in_request_and_response_ops(env):
    up = echo(env)
    conf = upstream_config(up.address, routes=[{
        'name': 'ops', 'upstream': 'app',
        'request': [{'set': {'v_user': '$json.user.id', 'v_tier': '$json.tier',
                             'v_meta': '$json.meta', 'v_n': '$json.n', 'v_gone': '$json.missing',
                             'v_deep': {'t': '$json.tier'}}}],
        'response': [{'set': {'asked_by': '$json.user.id', 'flag': '$json.flag'}}]}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = post(c, b'{"user":{"id":"u\\u0031"},"tier":"g\\"old","meta":{"a":[1, 2]},"n":1.50,'
                b'"flag":true}')
    env.eq('request ops got the fields: strings decoded, other values as their bytes, '
           'absent null', up.requests[0].body if up.requests else None,
           b'{"user":{"id":"u\\u0031"},"tier":"g\\"old","meta":{"a":[1, 2]},"n":1.50,'
           b'"flag":true,"v_user":"u1","v_tier":"g\\"old","v_meta":"{\\"a\\":[1, 2]}",'
           b'"v_n":"1.50","v_gone":null,"v_deep":{"t":"g\\"old"}}')
    sent = up.requests[0].body if up.requests else b''
    env.eq('the answer carries fields of the request body (flag set in place)',
           r.body if r else None,
           sent.replace(b'"flag":true', b'"flag":"true"')[:-1] + b',"asked_by":"u1"}')
    # A body without the fields, or that is not JSON, gives null.
    r = post(c, b'{"other":1}')
    env.eq('no such fields: null', up.requests[1].body if len(up.requests) > 1 else None,
           b'{"other":1,"v_user":null,"v_tier":null,"v_meta":null,"v_n":null,"v_gone":null,'
           b'"v_deep":{"t":null}}')
    sent = up.requests[1].body if len(up.requests) > 1 else b''
    env.eq('... in the answer too', r.body if r else None,
           sent[:-1] + b',"asked_by":null,"flag":null}')


@T.case
def header_ops(env):
    """$json.PATH in request and response header ops, with nothing else reading the body:
    the window is read for them; the same single look."""
    up = echo(env)
    conf = upstream_config(up.address, routes=[{
        'name': 'h', 'upstream': 'app',
        'request_headers': {'set': {'X-User': '$json.user_id'}, 'add': {'X-Tier': '$json.t.tier'}},
        'response_headers': {'set': {'X-Asked-By': '$json.user_id'}}}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = post(c, b'{"t":{"tier":1.50},"user_id":"u\\u0031\\r\\n\\u00e9"}',
             headers=[('X-Request-Id', 'j-1')])
    env.eq('the request head: the fields (a string decoded, controls left out, a number as '
           'its bytes), the body untouched', up.requests[0].raw if up.requests else None,
           b'POST /api HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n'
           b'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Request-Id: j-1\r\n'
           b'X-User: u1\xc3\xa9\r\nX-Tier: 1.50\r\nContent-Length: 49\r\n\r\n'
           b'{"t":{"tier":1.50},"user_id":"u\\u0031\\r\\n\\u00e9"}')
    env.eq('the answer\'s header', r.header('X-Asked-By') if r else None, 'u1\u00c3\u00a9')
    r = post(c, b'{"other":1}')
    env.eq('fields absent: the headers left out', (up.requests[1].names(), r.names()),
           (['host', 'content-type', 'x-forwarded-for', 'x-forwarded-proto', 'x-request-id',
             'content-length'], ['content-type', 'x-request-id', 'content-length']))
    r = c.request('POST', '/api', [('Host', 'a'), ('Content-Type', 'text/plain')], b'{"user_id":"x"}')
    env.eq('a body that is not JSON: left out too', up.requests[2].header('X-User'), None)


@T.case
def error_response_ops_read_fields(env):
    """error_response is the only reader of the body: its $json values are read too."""
    up = env.scripted([], answer(http_response(503, b'{"error":"busy"}')))
    conf = upstream_config(up.address, routes=[{
        'name': 'e', 'upstream': 'app',
        'error_response': [{'set': {'asked_by': '$json.user_id'}}]}])
    gw = env.daemon(conf)
    r = post(env.client(gw.port), b'{"user_id":"u1"}')
    env.eq('the field in the rewritten error', (r.status, r.body) if r else None,
           (503, b'{"error":"busy","asked_by":"u1"}'))


@T.case
def fields_of_compressed_and_long_bodies(env):
    up = env.scripted([], answer(http_response(200, b'{}')))
    conf = upstream_config(up.address, limits={'route_scan': '1k'}, routes=[{
        'name': 'ops', 'upstream': 'app',
        'response': [{'set': {'t': '$json.type'}}]}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    plain = b'{"type":"order","pad":"' + b'x' * 3000 + b'"}'
    r = c.request('POST', '/', [('Host', 'a'), ('Content-Type', 'application/json'),
                                ('Content-Encoding', 'gzip')], gzip.compress(plain, mtime=0))
    env.eq('a gzip body: its field', r.body if r else None, b'{"t":"order"}')
    env.eq('the gzip body went upstream untouched', up.requests[0].body,
           gzip.compress(plain, mtime=0))
    r = post(c, b'{"pad":"' + b'x' * 3000 + b'","type":"order"}', target='/')
    env.eq('a field past the window: null', r.body if r else None, b'{"t":null}')
    r = post(c, b'{"type":"order"', target='/')
    env.eq('a body cut short after the field: the field', r.body if r else None,
           b'{"t":"order"}')


@T.case
def request_ops_read_the_whole_body(env):
    """On a route whose request ops take the body whole, $json values are read from all of it
    as the ops read it, not from the window: the ops, the request header ops and the access
    log see the field past limits.route_scan that a when: sees.  They are the body as the
    client sent it: a field the ops rename still has its value."""
    up = echo(env)
    path = os.path.join(env.tmp, 'access.log')
    conf = upstream_config(
        up.address, limits={'route_scan': '1k'},
        log={'level': 'info', 'access': path, 'format': 'json', 'json_fields': ['late', 'a.b.c']},
        routes=[{'name': 'ops', 'upstream': 'app',
                 'request_headers': {'set': {'X-Late': '$json.late'}},
                 'request': [{'set': {'seen': True}, 'when': {'field': 'late', 'exists': True}},
                             {'rename': {'late': 'was_late'}},
                             {'set': {'copy': '$json.late', 'deep': '$json.a.b.c',
                                      'unescaped': '$json.esc'}}]}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    pad = b'"pad":"' + b'x' * 3000 + b'"'
    late = (b'{' + pad + b',"late":"L\\u00e9","a":{"p":"' + b'y' * 2000 +
            b'","b":{"c":[1, 2]}},"esc":"q\\"\\\\\\u0041"}')
    added = b',"seen":true,"copy":"L\xc3\xa9","deep":"[1, 2]","unescaped":"q\\"\\\\A"}'
    renamed = late.replace(b'"late":', b'"was_late":')[:-1] + added
    le = 'L\u00c3\u00a9'
    cases = [
        ('fields past the window', late, [], renamed, le),
        ('a field inside the window', b'{"late":"in",' + pad + b'}', [],
         b'{"was_late":"in",' + pad + b',"seen":true,"copy":"in","deep":null,"unescaped":null}',
         'in'),
        ('fields absent', b'{' + pad + b'}', [],
         b'{' + pad + b',"copy":null,"deep":null,"unescaped":null}', None),
        ('a gzip body: read inflated, sent rewritten', gzip.compress(late, mtime=0),
         [('Content-Encoding', 'gzip')], renamed, le),
    ]
    for i, (what, body, headers, want, header) in enumerate(cases):
        post(c, body, headers=headers)
        got = up.requests[i] if len(up.requests) > i else None
        env.eq(what + ': the body upstream', got.body if got else None, want)
        env.eq(what + ': X-Late, and no Content-Encoding', (got.header('X-Late'), got.header(
            'Content-Encoding')) if got else None, (header, None))
    lines = read_lines(path, len(cases))
    env.eq('the access log: the same values', [json.loads(line).get('json') for line in lines],
           [{'late': 'L\u00e9', 'a.b.c': '[1, 2]'}, {'late': 'in', 'a.b.c': None},
            {'late': None, 'a.b.c': None}, {'late': 'L\u00e9', 'a.b.c': '[1, 2]'}])


@T.case
def request_ops_hash_by_a_field_past_the_window(env):
    """The hash key of a route whose request ops take the body is read from the whole body:
    the server is chosen once it is in, before the ops ($upstream names it)."""
    servers = [env.scripted([], answer(lambda req, i=i: http_response(200, b's%d ' % i + req.body)))
               for i in range(3)]
    conf = upstream_config(*[s.address for s in servers], limits={'route_scan': '1k'},
                           routes=[{'name': 'ops', 'upstream': 'app',
                                    'request': [{'set': {'via': '$upstream'}}]}])
    conf['upstreams']['app'].update(balance='hash', hash_key='$json.user_id')
    gw = env.daemon(conf)
    c = env.client(gw.port)
    pad = b'"pad":"' + b'x' * 3000 + b'"'
    seen = {}
    # Eight users all on one of three servers happens for one set of ports in about 2,000:
    # more users come until two servers have some (40 all on one: one in 10^18).
    for user in range(40):
        if user >= 8 and len(set(seen.values())) >= 2:
            break
        got = set()
        for _ in range(3):
            r = post(c, b'{' + pad + b',"user_id":"u%d"}' % user)
            name, _, body = r.body.partition(b' ')
            got.add(name)
            env.eq('user %d: $upstream names the server that got it' % user,
                   json.loads(body)['via'], servers[int(name[1:])].address)
        env.eq('user %d always on one server' % user, len(got), 1)
        seen[user] = got.pop()
    env.check('users spread over the servers', len(set(seen.values())) >= 2, seen)
    r = post(c, b'{' + pad + b',"user_id":"u\\u0031"}')
    env.eq('"u\\u0031" past the window is user u1', r.body.partition(b' ')[0], seen[1])


@T.case
def a_server_chosen_after_the_body_that_fails(env):
    """A try started once the body is in and failing at once answers its error; the
    connection then serves the next request (pipelined behind it)."""
    closed = env.closed_port()
    conf = upstream_config('127.0.0.1:%d' % closed,
                           routes=[{'name': 'ops', 'upstream': 'app',
                                    'request': [{'set': {'via': '$upstream'}}]}])
    conf['upstreams']['app'].update(balance='hash', hash_key='$json.user_id', retries=0)
    gw = env.daemon(conf)
    c = env.client(gw.port)
    one = build_request('POST', '/', [('Host', 'a'), ('Content-Type', 'application/json'),
                                      ('X-Request-Id', 'p-%d')], b'{"user_id":"u1"}')
    c.send((one % 1) + (one % 2))
    for i in (1, 2):
        r = c.read_response('POST')
        env.gateway_error('request %d' % i, r, 502, 'upstream_unavailable',
                          'connect to upstream app refused', False, request_id='p-%d' % i)


@T.case
def a_chunked_body_past_max_body_gives_its_window(env):
    """A chunked body the request ops do not take (past limits.max_body, on_error: pass) goes
    untouched; its values are those of its window, as on a route without request ops."""
    up = echo(env)
    conf = upstream_config(up.address, limits={'route_scan': '1k', 'max_body': '4k'},
                           routes=[{'name': 'ops', 'upstream': 'app',
                                    'request_headers': {'set': {'X-Early': '$json.early',
                                                                'X-Late': '$json.late'}},
                                    'request': [{'set': {'copy': '$json.early'}}]}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    body = b'{"early":"e\\u0031","pad":"' + b'x' * 6000 + b'","late":1}'
    r = c.request('POST', '/', [('Host', 'a'), ('Content-Type', 'application/json'),
                                ('Transfer-Encoding', 'chunked')],
                  b''.join(b'%x\r\n%s\r\n' % (len(p), p) for p in (body[:3000], body[3000:])) +
                  b'0\r\n\r\n')
    got = up.requests[0] if up.requests else None
    env.eq('the body untouched, the window\'s field in the head, the late one left out',
           (r.status, got.body, got.header('X-Early'), got.header('X-Late')) if got else None,
           (200, body, 'e1', None))


@T.case
def one_look_for_match_and_variables(env):
    """A route chosen by a field and reading fields in its ops: one look serves both."""
    a, b = echo(env), echo(env)
    conf = upstream_config(a.address, routes=[
        {'name': 'orders', 'match': {'json': {'field': 'kind', 'equals': 'order'}},
         'upstream': 'app', 'request': [{'set': {'routed_by': '$json.kind', 'the_id': '$json.id'}}]},
        {'name': 'rest', 'upstream': 'other',
         'request': [{'set': {'routed_by': '$json.kind'}}]}])
    conf['upstreams']['other'] = {'servers': [b.address]}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    post(c, b'{"kind":"ord\\u0065r","id":7}')
    post(c, b'{"kind":"refund","id":8}')
    env.eq('orders route', [q.body for q in a.requests],
           [b'{"kind":"ord\\u0065r","id":7,"routed_by":"order","the_id":"7"}'])
    env.eq('the next route', [q.body for q in b.requests],
           [b'{"kind":"refund","id":8,"routed_by":"refund"}'])


@T.case
def hash_key_by_body_field(env):
    servers = [env.scripted([], answer(http_response(200, b's%d' % i))) for i in range(3)]
    conf = upstream_config(*[s.address for s in servers])
    conf['upstreams']['app'].update(balance='hash', hash_key='$json.user_id')
    gw = env.daemon(conf)
    c = env.client(gw.port)
    seen = {}
    for user in range(12):
        bodies = {post(c, b'{"user_id":"u%d","n":%d}' % (user, i)).body for i in range(3)}
        env.eq('user %d always on one server' % user, len(bodies), 1)
        seen[user] = bodies.pop()
    env.check('users spread over the servers', len(set(seen.values())) >= 2, seen)
    env.eq('"u\\u0031" is user u1', post(c, b'{"n":0,"user_id":"u\\u0031"}').body, seen[1])
    env.eq('a number: keyed by its bytes, sticky too',
           len({post(c, b'{"user_id":1234}').body for _ in range(3)}), 1)
    counts = [len(s.requests) for s in servers]
    bodies = [post(c, b'{"no_user":1}'), post(c, b'{"user_id":""}'), post(c, b'not json'),
              post(c, b'{"no_user":2}'), post(c, b'{"no_user":3}'), post(c, b'{"no_user":4}')]
    env.eq('no such field (or an empty one, or no JSON): answered', {r.status for r in bodies},
           {200})
    env.eq('... round robin, not all on one server: two each',
           [len(s.requests) - n for s, n in zip(servers, counts)], [2, 2, 2])


@T.case
def access_log_fields(env):
    up = env.scripted([], answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.log')
    conf = upstream_config(up.address, log={'level': 'info', 'access': path, 'format': 'json',
                                            'json_fields': ['user_id', 'tenant.id', 'amount']})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    post(c, b'{"amount":12.50,"user_id":"u\\u00e9\\"","tenant":{"id":{"x":[1]}}}')
    post(c, b'{"other":1}')
    c.send(b'BAD REQUEST LINE\r\n\r\n')
    c.read_response()
    lines = read_lines(path, 3)
    env.require('three lines', len(lines) == 3, lines)
    entries = [json.loads(line) for line in lines]
    env.eq('the fields: decoded text (UTF-8 as it is), other values as bytes',
           entries[0].get('json'), {'user_id': 'u\u00e9"', 'tenant.id': '{"x":[1]}',
                                    'amount': '12.50'})
    env.check('the line ends with the object', lines[0].endswith(
        ',"json":{"user_id":"u\u00e9\\"","tenant.id":"{\\"x\\":[1]}","amount":"12.50"}}'),
        lines[0][-120:])
    env.eq('fields absent: null', entries[1].get('json'),
           {'user_id': None, 'tenant.id': None, 'amount': None})
    env.eq('a request that never got a route: null, not the fields of the one before',
           (entries[2].get('status'), entries[2].get('json')),
           (400, {'user_id': None, 'tenant.id': None, 'amount': None}))


@T.case
def access_log_fields_past_8_kb(env):
    """Fields that take the line past 8 KB are all written: the line grows, and stays one
    JSON object."""
    up = env.scripted([], answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.log')
    names = ['f%d' % i + 'n' * 240 for i in range(16)]
    conf = upstream_config(up.address, log={'level': 'info', 'access': path, 'format': 'json',
                                            'json_fields': names})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    value = 'v' * 250
    post(c, json.dumps({n: value for n in names}).encode(), target='/' + 'p' * 3000)
    lines = read_lines(path, 1)
    env.require('one line', len(lines) == 1, lines)
    env.check('past 8 KB', len(lines[0]) > 8192, len(lines[0]))
    entry = json.loads(lines[0])
    env.eq('every field, in order', list(entry.get('json', {}).items()),
           [(n, value) for n in names])
    env.eq('the target cut short as ever', len(entry['path']), 511)


@T.case
def configuration_errors(env):
    def check(what, conf, message):
        conf['listeners'] = [{'listen': '127.0.0.1:1'}]
        path = os.path.join(env.tmp, 'bad.yaml')
        with open(path, 'w') as f:
            f.write(to_yaml(conf))
        p = env.run([JSONGATE, '-t', '-c', path])
        env.check(what, p.returncode == 1 and message in p.stderr.decode(), p.stderr.decode())
    conf = upstream_config('127.0.0.1:1')
    conf['upstreams']['app'].update(balance='hash', hash_key='$json.a..b')
    check('hash_key: a bad path', conf, 'hash_key: expected a field or a dotted path of at most '
          '32 keys such as user.id, got "a..b"')
    conf = upstream_config('127.0.0.1:1', log={'access': 'stderr', 'format': 'combined',
                                               'json_fields': ['a']})
    check('json_fields with the combined format', conf,
          'log.json_fields: only the json access log format has body fields')
    conf = upstream_config('127.0.0.1:1', log={'json_fields': ['f%d' % i for i in range(17)]})
    check('17 fields', conf, 'log.json_fields: at most 16 fields')
    conf = upstream_config('127.0.0.1:1', log={'json_fields': ['ok', '.x']})
    check('a bad path among the fields', conf, 'log.json_fields: expected a field or a dotted '
          'path of at most 32 keys such as user.id, got ".x"')


T.run()
