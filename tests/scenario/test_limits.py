"""Limits and timeouts: max_header (431, empty lines before the request line
included), client_header against a client
sending one byte per second, client_body, keepalive, max_connections.

max_connections: like nginx and HAProxy, jsongate stops accepting at the
limit, so the extra connection waits in the kernel backlog; what is asserted
is that a request on it is answered only after another connection closes.
The limit holds for all workers together: with two workers, each closed
connection lets exactly one waiting connection in, whichever worker holds
either.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def timeouts(**kw):
    t = {'client_header': '10s', 'client_body': '10s', 'keepalive': '60s',
         'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '2s'}
    t.update(kw)
    return t


@T.case
def header_too_large(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, limits={'max_header': '1k'}))
    c = env.client(gw.port)
    r = c.request('GET', '/small', [('Host', 'a'), ('X-Fill', 'f' * 500)])
    env.eq('a 600-byte head passes', r.status, 200)
    c = env.client(gw.port)
    r = c.request('GET', '/big', [('Host', 'a'), ('X-Fill', 'f' * 2000)])
    env.gateway_error('a 2 KB head', r, 431, 'header_too_large',
                      'request header exceeds limits.max_header', close=True)
    env.check('then closed', c.wait_closed(5), 'still open')
    c = env.client(gw.port)
    r = c.request('GET', '/many', [('Host', 'a')] + [('X-H%d' % i, 'v' * 20) for i in range(60)])
    env.gateway_error('many small headers adding up', r, 431, 'header_too_large',
                      'request header exceeds limits.max_header', close=True)
    env.eq('the big ones never reached the upstream', [q.target for q in up.requests], ['/small'])


@T.case
def leading_empty_lines(env):
    """RFC 9112 2.2: CRLFs before a request line are ignored, and count against max_header."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, limits={'max_header': '1k'}))
    c = env.client(gw.port)
    c.send(b'\r\n' * 3 + b'GET /after-empty-lines HTTP/1.1\r\nHost: a\r\n\r\n')
    r = c.read_response()
    env.eq('three empty lines, then a request: answered', r.status, 200)
    env.check('the upstream gets a head without them',
              up.requests[0].head.startswith(b'GET /after-empty-lines HTTP/1.1\r\n'),
              up.requests[0].head[:100])
    c.send(b'POST /body HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}\r\n')
    r = c.read_response('POST')
    env.eq('a CRLF after a body (as old clients send)', r.status, 200)
    r = c.request('GET', '/next', [('Host', 'a')])
    env.eq('is taken as an empty line before the next request', (r.status, up.requests[-1].target),
           (200, '/next'))
    c = env.client(gw.port)
    head = b'GET /within HTTP/1.1\r\nHost: a\r\n\r\n'
    c.send(b'\r\n' * ((1024 - len(head)) // 2) + head)
    r = c.read_response()
    env.eq('empty lines and a head within max_header (1k)', r.status, 200)
    c = env.client(gw.port)
    c.send(b'\r\n' * 600)
    r = c.read_response()
    env.gateway_error('1200 bytes of empty lines', r, 431, 'header_too_large',
                      'request header exceeds limits.max_header', close=True)
    env.check('then closed', c.wait_closed(5), 'still open')
    env.eq('the upstream saw the requests only', [q.target for q in up.requests],
           ['/after-empty-lines', '/body', '/next', '/within'])


@T.case
def slow_header_client(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, timeouts=timeouts(client_header='2s'),
                                    log={'level': 'info', 'access': 'stderr'}))
    c = env.client(gw.port)
    head = b'GET /slowloris HTTP/1.1\r\nHost: a\r\nX-Drip: ' + b'd' * 60 + b'\r\n\r\n'
    start = time.monotonic()
    closed_at = None
    for i in range(len(head)):
        try:
            c.send(head[i:i + 1])
        except OSError:
            closed_at = time.monotonic()
            break
        if c.wait_closed(1.0):          # the one-second pacing of the drip
            closed_at = time.monotonic()
            break
    took = (closed_at or time.monotonic()) - start
    env.check('disconnected while still sending the head', closed_at is not None,
              'still open after %.1fs' % took)
    env.check('at client_header (2s): between 1.5s and 6s', 1.5 <= took <= 6 * SLOW, '%.2fs' % took)
    env.eq('nothing reached the upstream', up.requests, [])
    r = c.read_response()
    env.gateway_error('the head that did not arrive in time: 408', r, 408, 'request_timeout',
                      'request head not received within timeouts.client_header', close=True)
    env.eq('logged as 408', re.findall(r'"status":(\d+)', gw.log()), ['408'])


@T.case
def silent_connection_closed_quietly(env):
    """A connection that sends nothing within client_header is closed without an answer
    (a browser's preconnect, a port probe), as nginx does."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, timeouts=timeouts(client_header='1s'),
                                    log={'level': 'info', 'access': 'stderr'}))
    c = env.client(gw.port)
    env.check('closed after client_header', c.wait_closed(5 * SLOW), 'still open')
    env.eq('with no byte sent', c.buf, b'')
    env.eq('nothing logged', re.findall(r'"status":(\d+)', gw.log()), [])


@T.case
def slow_body_client(env):
    up = env.scripted(default=answer(http_response(200, b'{}')), truncated_ok=True)
    gw = env.daemon(upstream_config(up.address, timeouts=timeouts(client_body='1s')))
    c = env.client(gw.port)
    start = time.monotonic()
    c.send(b'POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789')
    closed = c.wait_closed(10 * SLOW)
    took = time.monotonic() - start
    env.check('a stalled body is cut at client_body (1s): closed between 0.8s and 6s',
              closed and 0.8 <= took <= 6 * SLOW, 'closed=%s after %.2fs' % (closed, took))
    env.eq('no complete request reached the upstream', up.requests, [])


@T.case
def keepalive_timeout(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, timeouts=timeouts(keepalive='1s')))
    c = env.client(gw.port)
    r = c.request('GET', '/a', [('Host', 'a')])
    env.eq('answered', r.status, 200)
    start = time.monotonic()
    closed = c.wait_closed(10 * SLOW)
    took = time.monotonic() - start
    env.check('idle connection closed at keepalive (1s): between 0.8s and 6s',
              closed and 0.8 <= took <= 6 * SLOW, 'closed=%s after %.2fs' % (closed, took))
    env.eq('silently', c.buf, b'')


@T.case
def keepalive_zero(env):
    """timeouts.keepalive: 0 disables keep-alive: the answer says Connection: close and the
    connection closes after it, and no upstream connection is pooled (each request opens
    one, and the daemon holds none afterwards)."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, timeouts=timeouts(keepalive='0')))
    for i in range(3):
        c = env.client(gw.port)
        r = c.request('GET', '/k%d' % i, [('Host', 'a')])
        env.eq('request %d: 200 with Connection: close' % i, (r.status, r.header('Connection')),
               (200, 'close'))
        env.check('request %d: then closed' % i, c.wait_closed(5), 'still open')
    env.eq('a new upstream connection for each request', up.connections, 3)
    env.check('none kept open by the daemon',
              wait_until(lambda: up.open_connections == 0, 5 * SLOW),
              '%d still open' % up.open_connections)


@T.case
def max_request_body(env):
    """limits.max_request_body bounds every request body, streamed or not: a Content-Length
    over it gets 413 before a byte is forwarded (instead of 100 Continue), a chunked body that
    goes over it gets 413 and the upstream never gets all of it; a route's own limit wins."""
    up = env.scripted(default=answer(lambda q: http_response(
        200, b'{"got":%d}' % len(q.body))), truncated_ok=True)
    gw = env.daemon(upstream_config(up.address, limits={'max_request_body': '1k'}, routes=[
        {'name': 'big', 'match': {'path_prefix': '/big/'}, 'upstream': 'app',
         'limits': {'max_request_body': '4k'}},
        {'name': 'all', 'match': {'path_prefix': '/'}, 'upstream': 'app'}]))
    msg = 'request body exceeds limits.max_request_body'
    c = env.client(gw.port)
    c.send(b'POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n')
    env.gateway_error('Content-Length over the limit: 413 before the body', c.read_response(),
                      413, 'payload_too_large', msg, close=True)
    c = env.client(gw.port)
    c.send(b'POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n'
           b'Expect: 100-continue\r\n\r\n')
    env.gateway_error('with Expect: 100-continue: 413 instead of 100',
                      c.read_response(skip_interim=False), 413, 'payload_too_large', msg,
                      close=True)
    c = env.client(gw.port)
    c.send(b'POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n' +
           b''.join(b'1f4\r\n' + b'x' * 500 + b'\r\n' for _ in range(4)) + b'0\r\n\r\n')
    env.gateway_error('a chunked body going over the limit: 413', c.read_response(), 413,
                      'payload_too_large', msg, close=True)
    env.eq('no upstream got a whole request of these', up.requests, [])
    c = env.client(gw.port)
    r = c.request('POST', '/up', [('Host', 'a')], body=b'y' * 1024)
    env.eq('a body at the limit passes', (r.status, r.body), (200, b'{"got":1024}'))
    r = c.request('POST', '/big/up', [('Host', 'a')], body=b'y' * 3000)
    env.eq('the route\'s own limit (4k) wins', (r.status, r.body), (200, b'{"got":3000}'))
    c.send(b'POST /big/up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n' +
           b'bb8\r\n' + b'z' * 3000 + b'\r\n0\r\n\r\n')
    r = c.read_response()
    env.eq('a chunked body within it passes', (r.status, r.body), (200, b'{"got":3000}'))
    r = c.request('GET', '/up', [('Host', 'a')])
    env.eq('a request without a body is not concerned', r.status, 200)


@T.case
def max_connections(env):
    up = env.scripted(default=answer(lambda q: http_response(200, json.dumps({'t': q.target}).encode())))
    gw = env.daemon(upstream_config(up.address, limits={'max_connections': 2}))
    c1 = env.client(gw.port)
    c2 = env.client(gw.port)
    env.eq('first connection served', c1.request('GET', '/1', [('Host', 'a')]).status, 200)
    env.eq('second connection served', c2.request('GET', '/2', [('Host', 'a')]).status, 200)
    c3 = env.client(gw.port)          # completes in the kernel backlog
    c3.send(build_request('GET', '/3', [('Host', 'a')]))
    try:
        early = c3.read_response(timeout=1.5)
    except socket.timeout:
        early = 'waiting'
    env.eq('the third connection is not served while two are open', early, 'waiting')
    c1.close()
    try:
        r = c3.read_response(timeout=5 * SLOW)
    except socket.timeout:
        r = None
    env.eq('served once one closes', (r.status, r.json()) if r else None, (200, {'t': '/3'}))
    env.eq('the second connection still works', c2.request('GET', '/2b', [('Host', 'a')]).status, 200)


def admin_gauge(port):
    """Open client connections, from the admin endpoint's jsongate_connections."""
    c = Client(port)
    r = c.request('GET', '/metrics', [('Host', 'admin')])
    c.close()
    return sum(int(n) for n in re.findall(rb'^jsongate_connections\{state="\w+"\} (\d+)$',
                                          r.body, re.M))


def answered(clients, timeout):
    """The clients among these whose socket turns readable (a response, or a close)."""
    import select
    ready, _, _ = select.select([c.sock for c in clients], [], [], timeout)
    return [c for c in clients if c.sock in ready]


@T.case
def max_connections_over_workers(env):
    up = env.scripted(default=answer(lambda q: http_response(200, json.dumps({'t': q.target}).encode())))
    aport = free_port()
    gw = env.daemon(upstream_config(up.address, workers=2, limits={'max_connections': 3},
                                    admin={'listen': '127.0.0.1:%d' % aport}))
    served = [env.client(gw.port) for _ in range(3)]
    for i, c in enumerate(served):
        env.eq('connection %d served' % i, c.request('GET', '/open%d' % i, [('Host', 'a')]).status, 200)
    waiting = [env.client(gw.port) for _ in range(4)]     # complete in the kernel backlogs
    for i, c in enumerate(waiting):
        c.send(build_request('GET', '/wait%d' % i, [('Host', 'a')]))
    env.eq('none of 4 more connections is served while 3 are open',
           len(answered(waiting, 1.5)), 0)
    env.eq('3 connections open', admin_gauge(aport), 3)
    for n in range(len(waiting)):
        served.pop(0).close()
        first = answered(waiting, 5 * SLOW)
        env.eq('close %d: one waiting connection is served' % n, len(first), 1)
        if len(first) != 1:
            break
        c = first[0]
        waiting.remove(c)
        r = c.read_response()
        env.eq('close %d: its answer' % n, (r.status, r.json()['t'].startswith('/wait')), (200, True))
        served.append(c)
        env.eq('close %d: no other one' % n, len(answered(waiting, 0.3)), 0)
        env.eq('close %d: still 3 connections open' % n, admin_gauge(aport), 3)


T.run()
