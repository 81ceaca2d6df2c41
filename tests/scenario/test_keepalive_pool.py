"""Client keep-alive, pipelining, the upstream connection pool, retry of
idempotent requests on a reused connection, upstreams dying mid-response."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def head_only(req, raw):
    """A correct server sends no body to HEAD."""
    return raw[:raw.index(b'\r\n\r\n') + 4] if req.method == 'HEAD' else raw


def by_target(req):
    return head_only(req, http_response(200, json.dumps({'target': req.target}).encode()))


def gateway(env, steps=(), default=None, **conf):
    up = env.scripted(steps, default)
    gw = env.daemon(upstream_config(up.address, **conf))
    return up, gw, env.client(gw.port)


@T.case
def client_keepalive(env):
    up, gw, c = gateway(env, default=answer(by_target))
    for i in range(5):
        r = c.request('GET', '/k/%d' % i, [('Host', 'a')])
        env.eq('request %d on one connection' % i, (r.status, r.json()), (200, {'target': '/k/%d' % i}))
    env.eq('upstream saw them in order', [q.target for q in up.requests], ['/k/%d' % i for i in range(5)])


@T.case
def pipelined_in_order(env):
    # The first answer is the slowest: responses must still come in order.
    up, gw, c = gateway(env, [answer(by_target, delay=0.5)], default=answer(by_target))
    batch = b''.join([
        build_request('GET', '/p/0', [('Host', 'a')]),
        build_request('POST', '/p/1', [('Host', 'a')], b'{"one":1}'),
        build_request('GET', '/p/2', [('Host', 'a'), ('X-Request-Id', 'pipe-2')]),
        build_request('HEAD', '/p/3', [('Host', 'a')]),
        build_request('GET', '/p/4', [('Host', 'a')]),
    ])
    c.send(batch)
    got = []
    for i, method in enumerate(['GET', 'POST', 'GET', 'HEAD', 'GET']):
        r = c.read_response(method)
        env.require('pipelined response %d arrives' % i, r is not None, 'connection closed')
        got.append((r.status, r.body))
    want = [(200, json.dumps({'target': '/p/%d' % i}).encode()) for i in range(5)]
    want[3] = (200, b'')
    env.eq('five pipelined responses in request order', got, want)
    env.eq('POST body in the pipeline arrived', [q.body for q in up.requests if q.target == '/p/1'],
           [b'{"one":1}'])


@T.case
def hundred_requests_few_connections(env):
    up, gw, c = gateway(env, default=answer(by_target))
    ok = 0
    for i in range(100):
        r = c.request('GET', '/n/%d' % i, [('Host', 'a')])
        ok += r.status == 200 and r.json() == {'target': '/n/%d' % i}
    env.eq('100 sequential requests answered', ok, 100)
    env.check('at most 2 upstream connections', up.connections <= 2, 'opened %d' % up.connections)

    before = up.connections
    for i in range(50):
        c2 = env.client(gw.port)
        c2.request('GET', '/fresh/%d' % i, [('Host', 'a'), ('Connection', 'close')])
        c2.close()
    env.check('50 short client connections reuse the pool', up.connections - before <= 2,
              'opened %d more' % (up.connections - before))


@T.case
def reuse_only_after_complete_response(env):
    slow_body = b'{"slow":"' + b's' * 2000 + b'"}'
    slow = slowly(http_response(200, slow_body), piece=200, delay=0.1)
    up, gw, a = gateway(env, [slow], default=answer(by_target))
    b = env.client(gw.port)
    a.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('slow request reached the upstream', wait_until(lambda: up.requests, 5), '')
    r = b.request('GET', '/fast', [('Host', 'a')])
    env.eq('second client answered while the first is in progress', r.status, 200)
    env.check('on another upstream connection', up.requests[1].conn != up.requests[0].conn,
              [q.conn for q in up.requests])
    r = a.read_response()
    env.eq('slow response complete and intact', (r.status, r.body), (200, slow_body))
    for i in range(3):
        a.request('GET', '/again/%d' % i, [('Host', 'a')])
    env.eq('later requests reuse the two connections', up.connections, 2)


@T.case
def retry_idempotent_on_reused_connection(env):
    ok = http_response(200, b'{"n":1}')
    for method, body in (('GET', None), ('PUT', b'{"put":true}'), ('DELETE', None),
                         ('HEAD', None), ('OPTIONS', None)):
        third = http_response(200, b'{"n":3}')
        up, gw, c = gateway(env, [answer(ok), close_before_answer(),
                                  answer(lambda q: head_only(q, third))])
        c.request('GET', '/warm', [('Host', 'a')])
        r = c.request(method, '/retry', [('Host', 'a')], body)
        want_body = b'' if method == 'HEAD' else b'{"n":3}'
        env.eq('%s retried once on a fresh connection: client sees success' % method,
               (r.status, r.body) if r else None, (200, want_body))
        env.eq('%s: upstream saw the request twice' % method,
               [(q.method, q.target, q.body) for q in up.requests[1:]],
               [(method, '/retry', body or b'')] * 2)
        if len(up.requests) == 3:
            env.check('%s: the retry used a new connection' % method,
                      up.requests[2].conn != up.requests[1].conn, [q.conn for q in up.requests])


@T.case
def no_retry_for_post(env):
    up, gw, c = gateway(env, [answer(http_response(200, b'{}')), close_before_answer()],
                        default=answer(http_response(200, b'{"retried":true}')))
    c.request('GET', '/warm', [('Host', 'a')])
    r = c.request('POST', '/order', [('Host', 'a'), ('X-Request-Id', 'post-1')], b'{"buy":1}')
    env.gateway_error('POST on a connection that closes', r, 502, 'upstream_unavailable',
                      'upstream app closed the connection before answering',
                      close=False, request_id='post-1')
    env.eq('POST not retried', len(up.requests), 2)


@T.case
def upstream_dies_mid_body_content_length(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n'
    up, gw, c = gateway(env, [pieces((head + b'{"partial":"' + b'p' * 288, 0.3))])
    r = c.request('GET', '/dies', [('Host', 'a')])
    env.eq('status 200 as sent', r.status, 200)
    env.eq('fewer bytes than Content-Length, then close', (r.complete, r.body_len), (False, 300))
    env.check('connection closed', c.eof, 'open')


@T.case
def upstream_dies_mid_body_chunked(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
    up, gw, c = gateway(env, [pieces((head + b'a\r\n0123456789\r\n', 0.3))])
    r = c.request('GET', '/dies', [('Host', 'a')])
    env.eq('status 200 and chunked as sent', (r.status, r.framing), (200, 'chunked'))
    env.eq('no terminating chunk, connection closed', (r.complete, r.body, c.eof),
           (False, b'0123456789', True))
    env.check('no zero-size chunk', 0 not in r.chunks, r.chunks)


@T.case
def upstream_connection_close_not_reused(env):
    closing = http_response(200, b'{"first":1}', headers=[('Connection', 'close')])
    up, gw, c = gateway(env, [answer(closing, close=True)], default=answer(by_target))
    r = c.request('GET', '/one', [('Host', 'a')])
    env.eq('answer with Connection: close passed', (r.status, r.body), (200, b'{"first":1}'))
    env.check('Connection: close of the upstream not forwarded to a keep-alive client',
              not r.all('Connection'), r.head)
    r = c.request('GET', '/two', [('Host', 'a')])
    env.eq('next request on a new upstream connection', (r.status, up.connections), (200, 2))


@T.case
def upstream_closed_idle_connection(env):
    # The upstream answers without announcing it, then closes the idle connection.
    up, gw, c = gateway(env, [answer(http_response(200, b'{"a":1}'), close=True)],
                        default=answer(by_target))
    c.request('GET', '/one', [('Host', 'a')])
    env.require('the upstream closed its side', wait_until(lambda: up.open_connections == 0, 5), '')
    r = c.request('GET', '/two', [('Host', 'a')])
    env.eq('a request after the idle close succeeds', (r.status, r.json()), (200, {'target': '/two'}))


T.run()
