"""The scripted upstream's fault steps, proven against it directly with raw
sockets before the resilience tests rely on them: a refusing port, resets
(on accept, after the request, after the head), garbage, wrong
Content-Length both ways, a stall mid-body, keep-alive connections closed
when idle, 503/429 with Retry-After, a switchable health endpoint, and a
server killed and restarted on the same port."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

REQUEST = build_request('GET', '/x', [('Host', 'a')])
OK = http_response(200, b'{"ok":true}')


def by_target(req):
    return http_response(200, json.dumps({'target': req.target}, separators=(',', ':')).encode())


def connect(env, port):
    s = socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT)
    env.held.append(s)              # closed at teardown
    return s


def until_end(s):
    """Bytes read until the peer ends the connection, and how: 'eof' or 'reset'."""
    got = b''
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return got, 'eof'
            got += data
    except ConnectionResetError:
        return got, 'reset'


def exchange(env, port, data=REQUEST):
    """Sends data on a new connection; what comes back until the end, and how it ended.
    An RST may come before the connect or the send is through."""
    try:
        s = connect(env, port)
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        return b'', 'reset'
    return until_end(s)


def exactly(s, n):
    got = b''
    while len(got) < n:
        data = s.recv(n - len(got))
        if not data:
            break
        got += data
    return got


def head_of(raw):
    return raw[:raw.index(b'\r\n\r\n') + 4]


@T.case
def closed_port_refuses(env):
    port = env.closed_port()
    for i in range(2):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT).close()
            refused = False
        except ConnectionRefusedError:
            refused = True
        env.check('connect %d to the closed port is refused' % i, refused)
    env.check('free_port() never hands it out', port not in [free_port() for _ in range(50)])


@T.case
def reset_on_accept_step(env):
    up = env.scripted([reset_on_accept()], default=answer(OK))
    env.eq('the first connection is reset before a byte is read',
           exchange(env, up.port), (b'', 'reset'))
    env.eq('no request recorded', up.requests, [])
    r = env.client(up.port).request('GET', '/x', [('Host', 'a')])
    env.eq('the next connection follows the script', (r.status, r.body), (200, b'{"ok":true}'))
    env.eq('connections', up.connections, 2)


@T.case
def reset_on_accept_is_per_connection(env):
    # A request on a kept-alive connection cannot take it: an error, and a reset.
    up = env.scripted([answer(OK), reset_on_accept()])
    s = connect(env, up.port)
    s.sendall(REQUEST)
    env.eq('first answer', exactly(s, len(OK)), OK)
    s.sendall(REQUEST)
    env.eq('the second request on the same connection is reset', until_end(s), (b'', 'reset'))
    env.eq('and reported', [e.split(':')[0] for e in up.errors],
           ['request on connection 0 while the next step resets a new connection'])
    up.errors.clear()


@T.case
def reset_after_request(env):
    up = env.scripted([reset()])
    env.eq('reset after the request, nothing sent', exchange(env, up.port), (b'', 'reset'))
    env.eq('the request was read first', [(r.method, r.target) for r in up.requests],
           [('GET', '/x')])


@T.case
def reset_after_response_head(env):
    head = head_of(http_response(200, b'{"never":"sent"}'))
    up = env.scripted([reset_after(head)])
    env.eq('the head, then a reset', exchange(env, up.port), (head, 'reset'))
    env.eq('one request', len(up.requests), 1)


@T.case
def garbage_answer(env):
    up = env.scripted([garbage(), garbage(b'\x00\x01\x02')])
    env.eq('default garbage, then closed', exchange(env, up.port), (GARBAGE, 'eof'))
    env.check('it is not HTTP', not GARBAGE.startswith(b'HTTP/'))
    env.eq('given garbage, then closed', exchange(env, up.port), (b'\x00\x01\x02', 'eof'))


@T.case
def content_length_longer_than_body(env):
    up = env.scripted([wrong_length(b'{"a":1}', 20)])
    want = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n'
            b'{"a":1}')
    env.eq('7 of 20 body bytes, then closed', exchange(env, up.port), (want, 'eof'))


@T.case
def content_length_shorter_than_body(env):
    up = env.scripted([wrong_length(b'{"a":1}extra', 7)], default=answer(OK))
    first = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n'
             b'{"a":1}extra')
    s = connect(env, up.port)
    s.sendall(REQUEST)
    env.eq('Content-Length 7, then 5 bytes more', exactly(s, len(first)), first)
    s.sendall(REQUEST)
    env.eq('the connection stayed open: the next answer follows', exactly(s, len(OK)), OK)
    env.eq('one connection', up.connections, 1)


@T.case
def stall_in_the_body(env):
    partial = head_of(http_response(200, b'x' * 100)) + b'x' * 40
    up = env.scripted([stall_mid_body(partial)])
    s = connect(env, up.port)
    s.sendall(REQUEST)
    env.eq('head and 40 of 100 body bytes', exactly(s, len(partial)), partial)
    env.require('the upstream holds the connection', wait_until(lambda: up.hanging == 1, 5))
    s.setblocking(False)
    try:
        state = s.recv(1) or 'eof'
    except BlockingIOError:
        state = 'open'
    env.eq('nothing more, not closed', state, 'open')
    s.setblocking(True)
    up.kill()
    env.eq('stopping the upstream ends it', until_end(s)[0], b'')
    env.eq('no longer hanging', up.hanging, 0)


@T.case
def keepalive_closed_at_once(env):
    up = env.scripted([close_when_idle(OK)])
    env.eq('a keep-alive answer, then closed', exchange(env, up.port), (OK, 'eof'))
    env.check('the answer does not announce the close', b'Connection' not in OK)


@T.case
def keepalive_closed_when_idle(env):
    second = http_response(200, b'{"second":true}')
    up = env.scripted([close_when_idle(OK, after=IO_TIMEOUT), close_when_idle(second, after=0.2)])
    s = connect(env, up.port)
    s.sendall(REQUEST)
    env.eq('first answer', exactly(s, len(OK)), OK)
    s.sendall(REQUEST)
    env.eq('a request in time is served on the same connection', exactly(s, len(second)), second)
    env.eq('then closed once idle', until_end(s), (b'', 'eof'))
    env.eq('one connection, two requests', (up.connections, len(up.requests)), (1, 2))


@T.case
def retry_after_answers(env):
    up = env.scripted([retry_after(7), retry_after(3, status=429, body=b'{}')])
    c = env.client(up.port)
    r = c.request('GET', '/x', [('Host', 'a')])
    env.eq('503 with Retry-After', (r.status, r.header('Retry-After'), r.body),
           (503, '7', b'{"error":"overloaded"}'))
    r = c.request('GET', '/x', [('Host', 'a')])
    env.eq('429 with Retry-After on the same connection',
           (r.status, r.header('Retry-After'), r.body, up.connections), (429, '3', b'{}', 1))


@T.case
def health_switched_at_run_time(env):
    up = env.scripted([], default=answer(by_target), health=(200, {'status': 'ok'}))
    c = env.client(up.port)

    def get(target):
        r = c.request('GET', target, [('Host', 'a')])
        return r.status, r.body

    env.eq('healthy', get('/health'), (200, b'{"status":"ok"}'))
    env.eq('other paths follow the script', get('/x'), (200, b'{"target":"/x"}'))
    up.set_health(503, {'status': 'down'})
    env.eq('failing', get('/health?probe=1'), (503, b'{"status":"down"}'))
    up.set_health(200, '{"status":"ok"}')
    env.eq('recovered', get('/health'), (200, b'{"status":"ok"}'))
    env.eq('health checks recorded apart', [r.target for r in up.health_requests],
           ['/health', '/health?probe=1', '/health'])
    up.set_health(None)
    env.eq('without a health answer the script answers', get('/health'),
           (200, b'{"target":"/health"}'))
    env.eq('requests holds the scripted ones', [r.target for r in up.requests], ['/x', '/health'])
    env.eq('one connection', up.connections, 1)


@T.case
def kill_and_restart_on_the_same_port(env):
    up = env.scripted([], default=answer(by_target))
    port = up.port
    for life in range(3):
        c = env.client(port)
        r = c.request('GET', '/life-%d' % life, [('Host', 'a')])
        env.eq('life %d answers' % life, (r.status, r.json()), (200, {'target': '/life-%d' % life}))
        up.kill()
        env.check('life %d: kill closes the open connection' % life, c.wait_closed(5))
        try:
            socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT).close()
            refused = False
        except ConnectionRefusedError:
            refused = True
        env.check('life %d: the killed server refuses connections' % life, refused)
        up.restart()
        env.eq('same port after restart', up.port, port)
    r = env.client(port).request('GET', '/last', [('Host', 'a')])
    env.eq('the restarted server answers', r.status, 200)
    env.eq('requests and connection numbers carry on',
           [(q.target, q.conn) for q in up.requests],
           [('/life-0', 0), ('/life-1', 1), ('/life-2', 2), ('/last', 3)])


T.run()
