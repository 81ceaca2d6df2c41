"""Envelope ops and API errors: `response_on` (answers outside it pass
untouched and streamed: a 5xx never becomes a 2xx, a problem+json error is
never mangled), `error_response` for the others, HEAD on a route with
response ops (the status and headers GET would answer), and the exact
counters of jsongate_envelope_total, bytes spliced/copied and
jsongate_upstream_requests_total after known traffic."""

import base64
import gzip
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

ENVELOPE_OPS = '[ {status_from: {field: code, map: {0: 200, 404: 404}, default: 502}}, {unwrap: data} ]'


def route(name, prefix, **kw):
    """One route as YAML text; values are YAML flow text."""
    lines = ['  - name: %s' % name,
             '    match: { path_prefix: %s }' % prefix,
             '    upstream: app']
    lines += ['    %s: %s' % (k, v) for k, v in kw.items()]
    return '\n'.join(lines) + '\n'


def start(env, up, *routes, admin=False, **top):
    """jsongate in front of `up` with the given routes (YAML text blocks)."""
    port = free_port()
    conf = upstream_config(up.address, **top)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    if admin:
        conf['admin'] = {'listen': '127.0.0.1:%d' % free_port()}
    gw = env.daemon(to_yaml(conf) + '\nroutes:\n' + ''.join(routes), port=port)
    gw.admin = conf['admin']['listen'] if admin else None
    return gw


def served(env, table):
    """A scripted upstream answering by request target from table."""
    def respond(req):
        v = table.get(req.target)
        if v is None:
            return http_response(404, b'{"unknown":"%s"}' % req.target.encode())
        return v(req) if callable(v) else v
    return env.scripted([], answer(respond))


def raw_response(status, reason, headers, body):
    head = 'HTTP/1.1 %d %s\r\n' % (status, reason)
    head += ''.join('%s: %s\r\n' % h for h in headers)
    return head.encode('latin-1') + b'\r\n' + body


def chunked(*parts):
    return b''.join(b'%x\r\n%s\r\n' % (len(p), p) for p in parts) + b'0\r\n\r\n'


def want_head(status, reason, headers, rid, length=None, chunked=False):
    """The exact head jsongate sends for upstream headers (hop-by-hop and framing removed)."""
    text = 'HTTP/1.1 %d %s\r\n' % (status, reason)
    text += ''.join('%s: %s\r\n' % h for h in headers)
    text += 'X-Request-Id: %s\r\n' % rid
    if chunked:
        text += 'Transfer-Encoding: chunked\r\n'
    if length is not None:
        text += 'Content-Length: %d\r\n' % length
    return text.encode('latin-1') + b'\r\n'


def get(c, target, method='GET', headers=()):
    return c.request(method, target, [('Host', 'a')] + list(headers))


def untouched(env, what, r, status, reason, headers, body, chunked=False):
    """r is the upstream's answer as it was: status, reason, headers, framing and bytes."""
    if r is None:
        return env.check(what, False, 'no response (connection closed)')
    rid = r.header('X-Request-Id', '')
    env.eq(what + ': head', r.head,
           want_head(status, reason, headers, rid, None if chunked else len(body), chunked))
    env.eq(what + ': body', r.body, body)


JSON = [('Content-Type', 'application/json')]
PROBLEM = [('Content-Type', 'application/problem+json')]


# ------------------------------------------------------------------ response_on

@T.case
def answers_outside_response_on_pass_untouched(env):
    problem = b'{"type":"about:blank","title":"Bad Request","status":400,"detail":"x"}'
    big = b'{"code":0,"data":"' + b'z' * 6000 + b'"}'
    up = served(env, {
        '/ok': http_response(200, b'{"code":0,"data":{"id":1}}'),
        '/outage': http_response(503, b'{"code":0,"data":{"id":1}}'),
        '/problem': http_response(400, problem, content_type='application/problem+json'),
        '/error-chunked': raw_response(500, 'Internal Server Error',
                                       JSON + [('Transfer-Encoding', 'chunked')],
                                       chunked(b'{"code":0,', b'"data":1}')),
        '/error-big': http_response(502, big),
        '/not-found': http_response(404, b'{"code":404,"data":null}'),
    })
    gw = start(env, up, route('api', '/', response=ENVELOPE_OPS, on_error='fail'),
               limits={'max_body': '4k'})
    c = env.client(gw.port)
    r = get(c, '/ok')
    env.eq('2xx: rewritten', (r.status, r.body), (200, b'{"id":1}'))
    untouched(env, 'a 503 whose body says code 0 stays a 503', get(c, '/outage'), 503,
              'Service Unavailable', JSON, b'{"code":0,"data":{"id":1}}')
    untouched(env, 'a problem+json 400 is not an op failure', get(c, '/problem'), 400,
              'Bad Request', PROBLEM, problem)
    r = get(c, '/error-chunked')
    untouched(env, 'a chunked 500 streams on as chunks', r, 500, 'Internal Server Error', JSON,
              b'{"code":0,"data":1}', chunked=True)
    env.eq('its chunks as the upstream sent them', r.chunks, [10, 9, 0])
    untouched(env, 'a 502 over max_body with on_error fail streams on', get(c, '/error-big'), 502,
              'Bad Gateway', JSON, big)
    untouched(env, 'a 404 is outside the default [2xx]', get(c, '/not-found'), 404, 'Not Found',
              JSON, b'{"code":404,"data":null}')
    r = get(c, '/ok')
    env.eq('the connection still serves', (r.status, r.body), (200, b'{"id":1}'))


@T.case
def response_on_statuses_and_classes(env):
    up = served(env, {
        '/200': http_response(200, b'{"data":1}'),
        '/201': http_response(201, b'{"data":2}'),
        '/404': http_response(404, b'{"data":3}'),
        '/409': http_response(409, b'{"data":4}', reason='Conflict'),
        '/500': http_response(500, b'{"data":5}'),
    })
    gw = start(env, up, route('api', '/', response='[ {unwrap: data} ]', response_on='[ 200, 4xx ]'))
    c = env.client(gw.port)
    for target, status, reason, body in (('/200', 200, 'OK', b'1'), ('/404', 404, 'Not Found', b'3'),
                                         ('/409', 409, 'Conflict', b'4')):
        r = get(c, target)
        env.eq('%s is in response_on: rewritten' % target, (r.status, r.reason, r.body),
               (status, reason, body))
    untouched(env, '201 is not in [200, 4xx]', get(c, '/201'), 201, 'Created', JSON, b'{"data":2}')
    untouched(env, '500 is not in [200, 4xx]', get(c, '/500'), 500, 'Internal Server Error', JSON,
              b'{"data":5}')


@T.case
def error_response_ops(env):
    problem = b'{"title":"Conflict","status":409}'
    up = served(env, {
        '/ok': http_response(200, b'{"code":0,"data":{"id":7},"debug":1}'),
        '/fail': http_response(502, b'{"code":9,"msg":"db down","debug":{"q":1}}'),
        '/problem': http_response(409, problem, content_type='application/problem+json',
                                  reason='Conflict'),
        '/html': http_response(500, b'<h1>oops</h1>', content_type='text/html'),
        '/invalid': http_response(503, b'{"code":'),
    })
    gw = start(env, up, route('api', '/', response='[ {unwrap: data} ]',
                              error_response='[ {drop: [debug]}, {wrap: error} ]', on_error='fail'))
    c = env.client(gw.port)
    r = get(c, '/ok')
    env.eq('2xx: response ops', (r.status, r.body), (200, b'{"id":7}'))
    r = get(c, '/fail')
    rid = r.header('X-Request-Id', '')
    want = b'{"error":{"code":9,"msg":"db down"}}'
    env.eq('5xx: error_response ops, status kept: head', r.head,
           want_head(502, 'Bad Gateway', JSON, rid, len(want)))
    env.eq('5xx: error_response ops: body', r.body, want)
    r = get(c, '/problem')
    env.eq('409 problem+json: error_response ops', (r.status, r.reason, r.body),
           (409, 'Conflict', b'{"error":' + problem + b'}'))
    untouched(env, 'a 500 that is not JSON passes untouched', get(c, '/html'), 500,
              'Internal Server Error', [('Content-Type', 'text/html')], b'<h1>oops</h1>')
    r = get(c, '/invalid', headers=[('X-Request-Id', 'rq-invalid')])
    env.gateway_error('invalid JSON under error_response follows on_error', r, 502,
                      'upstream_invalid', 'response body not rewritten: invalid JSON', close=False,
                      request_id='rq-invalid')



# ------------------------------------------------------------------ HEAD

@T.case
def head_answers_as_get_would(env):
    big = b'{"code":0,"data":"' + b'h' * 6000 + b'"}'
    table = {
        '/ok': http_response(200, b'{"code":0,"data":{"id":1}}'),
        '/mapped': http_response(200, b'{"code":404,"msg":"no such order","data":null}'),
        '/chunked': http_response(200, b'{"code":0,"data":[1,2,3]}', chunked=True),
        '/outage': http_response(503, b'{"code":0,"data":{"id":1}}'),
        '/outage-chunked': http_response(503, big, chunked=True),
        '/text': http_response(200, b'plain text, not JSON', content_type='text/plain'),
        '/invalid': http_response(200, b'{"code":0,'),
        '/big-chunked': http_response(200, big, chunked=True),
    }
    up = served(env, dict([('/strict' + k, v) for k, v in table.items()] +
                          [('/lenient' + k, v) for k, v in table.items()] +
                          [('/plain/head', lambda q: http_response(200, b'{"m":"%s"}' % q.method.encode()))]))
    gw = start(env, up, route('strict', '/strict', response=ENVELOPE_OPS, on_error='fail'),
               route('lenient', '/lenient', response=ENVELOPE_OPS),
               route('plain', '/plain'), limits={'max_body': '4k'})
    c = env.client(gw.port)
    for target in sorted(table):
        for prefix in ('/strict', '/lenient'):
            if prefix == '/strict' and target == '/big-chunked':
                continue
            t = prefix + target
            g = get(c, t, headers=[('X-Request-Id', 'same')])
            if g is None or g.header('Connection') == 'close':
                c = env.client(gw.port)
            n = len(up.requests)
            h = get(c, t, 'HEAD', headers=[('X-Request-Id', 'same')])
            if h is None:
                env.check('HEAD %s answered' % t, False, 'closed')
                c = env.client(gw.port)
                continue
            env.eq('HEAD %s: the head GET gets' % t, h.head, g.head)
            env.eq('HEAD %s: no body' % t, h.body, b'')
            env.eq('HEAD %s: asked upstream as GET' % t, up.requests[n].method, 'GET')
            if h.header('Connection') == 'close':
                c = env.client(gw.port)
            r = get(c, '/strict/ok')
            env.eq('after HEAD %s the connection serves' % t, (r.status, r.body), (200, b'{"id":1}'))
    r = get(c, '/strict/ok', 'HEAD')
    env.eq('HEAD with ops: Content-Length of the rewritten body', r.header('Content-Length'), '8')
    r = get(c, '/strict/mapped', 'HEAD')
    env.eq('HEAD with ops: the status status_from gives', r.status, 404)
    r = get(c, '/plain/head', 'HEAD')
    env.eq('HEAD without response ops goes as HEAD',
           (r.status, r.header('Content-Length'), up.requests[-1].method), (200, '12', 'HEAD'))


# ------------------------------------------------------------------ metrics

def scrape(gw, prefix):
    """The sample lines of /metrics starting with prefix, sorted."""
    return metrics_lines(gw.admin, prefix)


@T.case
def envelope_metrics_exact(env):
    inner = b'{"s":"' + b'x' * 3000 + b'"}'
    big = b'{"data":"' + b'b' * 5000 + b'"}'
    # Over max_body and gzip-encoded, so not rewritten as it streams either: over_limit.
    big_gzip = gzip.compress(b'{"data":"' + base64.b64encode(random.Random(5).randbytes(6000)) +
                             b'"}')
    table = {}
    for prefix in ('/resp', '/strict'):
        table.update({
            prefix + '/ok': http_response(200, b'{"data":' + inner + b'}'),
            prefix + '/text': http_response(200, b'{"data":1}', content_type='text/plain'),
            prefix + '/503': http_response(503, b'{"data":1}'),
            prefix + '/204': raw_response(204, 'No Content', JSON, b''),
            prefix + '/br': http_response(200, b'not really brotli', headers=[('Content-Encoding', 'br')]),
            prefix + '/big': http_response(200, big_gzip, headers=[('Content-Encoding', 'gzip')]),
            prefix + '/bad': http_response(200, b'{"data":'),
        })
    table['/req'] = lambda q: http_response(200, b'{"got":%d}' % len(q.body))
    # unwrap of a key the body lacks: the ops cannot apply (op_error)
    table['/pass-miss'] = table['/fail-miss'] = http_response(200, b'{"code":0,"msg":"ok"}')
    # error_response: answers outside response_on get their own ops
    table.update({
        '/errs/ok': http_response(200, b'{"data":1}'),
        '/errs/500': http_response(500, b'{"code":9}'),
        '/errs/html': http_response(500, b'<h1>oops</h1>', content_type='text/html'),
        '/errs-miss/500': http_response(500, b'{"code":9}'),
    })
    up = served(env, table)
    gw = start(env, up,
               route('resp', '/resp', response='[ {unwrap: data} ]'),
               route('strict', '/strict', response='[ {unwrap: data} ]', on_error='fail'),
               route('req', '/req', request='[ {unwrap: data} ]', on_error='fail'),
               route('pass-miss', '/pass-miss', response='[ {unwrap: data} ]'),
               route('fail-miss', '/fail-miss', response='[ {unwrap: data} ]', on_error='fail'),
               route('errs-miss', '/errs-miss', response='[ {unwrap: data} ]',
                     error_response='[ {unwrap: detail} ]'),
               route('errs', '/errs', response='[ {unwrap: data} ]',
                     error_response='[ {wrap: error} ]'),
               admin=True, limits={'max_body': '4k'})
    c = env.client(gw.port)
    for prefix in ('/resp', '/strict'):
        for what in ('ok', 'text', '503', '204', 'br', 'big', 'bad'):
            r = get(c, prefix + '/' + what)
            env.check('%s/%s answered' % (prefix, what), r is not None and r.status, r)
    env.eq('/resp/ok rewritten', get(c, '/resp/ok').body, inner)
    env.eq('/strict/bad fails', get(c, '/strict/bad').status, 502)
    r = get(c, '/pass-miss')
    env.eq('unwrap of a missing key under pass: the answer untouched', (r.status, r.body),
           (200, b'{"code":0,"msg":"ok"}'))
    r = get(c, '/fail-miss', headers=[('X-Request-Id', 'rq-miss')])
    env.gateway_error('unwrap of a missing key under fail', r, 502, 'upstream_invalid',
                      'response body not rewritten: unwrap: key not found', close=False,
                      request_id='rq-miss')
    env.eq('error_response: a 2xx gets response', get(c, '/errs/ok').body, b'1')
    r = get(c, '/errs/500')
    env.eq('error_response: a 500 gets error_response', (r.status, r.body),
           (500, b'{"error":{"code":9}}'))
    env.eq('error_response: a 500 that is not JSON passes', get(c, '/errs/html').body,
           b'<h1>oops</h1>')
    r = get(c, '/errs-miss/500')
    env.eq('error_response that cannot apply, under pass: the answer untouched',
           (r.status, r.body), (500, b'{"code":9}'))

    def post(body, ctype='application/json', headers=(), client=None):
        return (client or c).request('POST', '/req', [('Host', 'a'), ('Content-Type', ctype)] +
                                     list(headers), body)
    env.eq('request ops applied', post(b'{"data":{"x":1}}').body, b'{"got":7}')
    env.eq('invalid JSON refused', post(b'{"data":').status, 400)
    env.eq('a GET has no body', get(c, '/req').body, b'{"got":0}')
    # Under on_error: fail a body that is not JSON by its type is refused, never forwarded.
    env.eq('text/plain refused (fail)',
           post(b'{"data":1}', 'text/plain', client=env.client(gw.port)).status, 415)
    env.eq('a request in a coding the ops cannot read refused',
           post(b'{"data":1}', headers=[('Content-Encoding', 'br')]).status, 415)
    # Refused before its body is read: the connection closes after each.
    env.eq('a request over max_body refused', post(big, client=env.client(gw.port)).status, 413)
    chunked = env.client(gw.port)
    chunked.send(b'POST /req HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n'
                 b'Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n' % (len(big), big))
    env.eq('a chunked request over max_body refused', chunked.read_response('POST').status, 413)

    env.eq('jsongate_envelope_total', scrape(gw, 'jsongate_envelope_total'), sorted([
        'jsongate_envelope_total{route="resp",direction="response",result="applied"} 2',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="not_json"} 1',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="status"} 1',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="empty"} 1',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="encoding"} 1',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="over_limit"} 1',
        'jsongate_envelope_total{route="resp",direction="response",result="passed",reason="invalid_json"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="applied"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="passed",reason="not_json"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="passed",reason="status"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="passed",reason="empty"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="failed",reason="encoding"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="failed",reason="over_limit"} 1',
        'jsongate_envelope_total{route="strict",direction="response",result="failed",reason="invalid_json"} 2',
        'jsongate_envelope_total{route="req",direction="request",result="applied"} 1',
        'jsongate_envelope_total{route="req",direction="request",result="failed",reason="invalid_json"} 1',
        'jsongate_envelope_total{route="req",direction="request",result="failed",reason="encoding"} 1',
        'jsongate_envelope_total{route="req",direction="request",result="failed",reason="over_limit"} 2',
        'jsongate_envelope_total{route="req",direction="request",result="passed",reason="empty"} 1',
        'jsongate_envelope_total{route="req",direction="request",result="failed",reason="not_json"} 1',
        'jsongate_envelope_total{route="pass-miss",direction="response",result="passed",reason="op_error"} 1',
        'jsongate_envelope_total{route="fail-miss",direction="response",result="failed",reason="op_error"} 1',
        'jsongate_envelope_total{route="errs",direction="response",result="applied"} 2',
        'jsongate_envelope_total{route="errs",direction="response",result="passed",reason="not_json"} 1',
        'jsongate_envelope_total{route="errs-miss",direction="response",result="passed",reason="op_error"} 1',
    ]))
    # Spliced: the 3006-byte value of two /resp/ok and one /strict/ok, the request's {"x":1},
    # the 1 of /errs/ok and the {"code":9} /errs/500 wraps.  Copied: that wrap's {"error": }.
    env.eq('bytes spliced and copied, responses and requests alike', scrape(gw, 'jsongate_bytes_'),
           ['jsongate_bytes_copied_total %d' % len(b'{"error":}'),
            'jsongate_bytes_spliced_total %d' % (3 * len(inner) + len(b'{"x":1}') + len(b'1') +
                                                 len(b'{"code":9}'))])
    # Of the 502s of /strict, the invalid JSON (twice) is an invalid answer of the server, and
    # so is the one of /fail-miss, which the ops could not apply to; the ones over max_body or
    # in a coding jsongate does not decode are good answers it refused.  The refused requests
    # never went upstream.
    env.eq('upstream requests: only the invalid answers blamed on the server',
           scrape(gw, 'jsongate_upstream_requests_total'),
           ['jsongate_upstream_requests_total{upstream="app",server="%s",outcome="invalid"} 3'
            % up.address,
            'jsongate_upstream_requests_total{upstream="app",server="%s",outcome="ok"} 21'
            % up.address])
    env.eq('the upstream got 24 requests', len(up.requests), 24)


def byte_counters(gw):
    """(spliced, copied) from /metrics."""
    values = dict(l.split(' ') for l in scrape(gw, 'jsongate_bytes_'))
    return (int(values['jsongate_bytes_spliced_total']), int(values['jsongate_bytes_copied_total']))


@T.case
def bytes_spliced_and_copied_per_body(env):
    """Spliced: the received body's bytes passed on as they came, short or long, whether sent
    by reference or copied; copied: the bytes the ops wrote.  The two add up to the body
    sent."""
    import gzip
    long_value = b'"' + b'v' * 3000 + b'"'
    up = served(env, {
        '/unwrap/small': http_response(200, b'{"code":0,"data":{"id":1}}'),
        '/unwrap/long': http_response(200, b'{"code":0,"data":' + long_value + b'}'),
        '/unwrap/gzip': http_response(200, gzip.compress(b'{"data":{"id":2}}', mtime=0),
                                      headers=[('Content-Encoding', 'gzip')]),
        '/unwrap/missing': http_response(200, b'{"code":0}'),
        '/shape': http_response(200, b'{"code":0,"msg":"ok","data":1,"debug":{"t":1}}'),
        '/set': http_response(200, b'{"code":0,"msg":"ok","data":{"id":1}}'),
        '/when': http_response(200, b'{"code":7, "data":2}\n'),
        '/req': lambda q: http_response(200, b'{"got":%s}' % q.body),
    })
    gw = start(env, up,
               route('unwrap', '/unwrap', response='[ {unwrap: data} ]'),
               route('shape', '/shape',
                     response='[ {drop: [debug]}, {rename: {msg: message}}, {set: {gw: j}} ]'),
               route('set', '/set', response='[ {set: {gw: j}} ]'),
               route('when', '/when', response='[ {unwrap: data, when: {field: code, equals: 0}} ]'),
               route('req', '/req', request='[ {set: {b: 2}} ]'),
               admin=True)
    c = env.client(gw.port)
    cases = [
        # target, body sent to the client, (spliced, copied)
        ('/unwrap/small', b'{"id":1}', (8, 0)),
        ('/unwrap/long', long_value, (len(long_value), 0)),
        ('/unwrap/gzip', b'{"id":2}', (8, 0)),          # counted once inflated
        ('/unwrap/missing', b'{"code":0}', (0, 0)),     # not rewritten: on_error pass
        # {  "code":0  ,"message":  "ok"  ,  "data":1  ,"gw":  "j"  }
        ('/shape', b'{"code":0,"message":"ok","data":1,"gw":"j"}', (8 + 4 + 8, 1 + 11 + 1 + 6 + 3 + 1)),
        # jsongate.yaml(5)'s example: all but the braces received spliced, neighbours as one
        ('/set', b'{"code":0,"msg":"ok","data":{"id":1},"gw":"j"}', (35, 11)),
        # the op does not run: the body as received, whitespace and all
        ('/when', b'{"code":7, "data":2}\n', (21, 0)),
    ]
    for target, body, counted in cases:
        before = byte_counters(gw)
        r = get(c, target)
        after = byte_counters(gw)
        env.eq('%s: the body sent' % target, (r.status, r.body), (200, body))
        env.eq('%s: bytes spliced and copied' % target,
               (after[0] - before[0], after[1] - before[1]), counted)
    before = byte_counters(gw)
    r = c.request('POST', '/req', [('Host', 'a'), ('Content-Type', 'application/json')],
                  b'{"a":1}')
    after = byte_counters(gw)
    # {  "a":1  ,"b":  2  }
    env.eq('request: the body sent upstream', (r.status, up.requests[-1].body),
           (200, b'{"a":1,"b":2}'))
    env.eq('request: bytes spliced and copied', (after[0] - before[0], after[1] - before[1]),
           (5, 1 + 5 + 1 + 1))


T.run()
