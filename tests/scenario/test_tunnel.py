"""Upgrade tunnels (WebSocket): an HTTP/1.1 Upgrade on a route without body ops goes upstream
with Upgrade and Connection: upgrade, a 101 turns both connections into a byte tunnel both ways
(exact bytes through ws:// and wss:// with a real WebSocket server, half-closes passed on), an
answer other than 101 is an ordinary one on a connection that goes on, a route with body ops
drops the upgrade; the tunnel's bounds (200 MB pushed at an upstream that never reads, RSS
bounded), timeouts.tunnel (idle closed, busy kept), SIGHUP and SIGTERM, limits.max_connections,
/metrics and the access log line."""

import asyncio
import random
import ssl
import struct
import sys

from harness import *
from tunnel_peers import (RawUpstream, WsServer, make_pki, metric, metrics,  # noqa: E402
                          sizes_1b_to_1mb, with_admin)

try:
    import websockets
except ImportError:
    sys.path.append('/usr/lib/python3/dist-packages')
    import websockets

T = Suite(__file__)


# --------------------------------------------------------------------- upstreams

def recv_exact(sock, n, timeout=IO_TIMEOUT):
    sock.settimeout(timeout)
    out = b''
    while len(out) < n:
        d = sock.recv(n - len(out))
        if not d:
            break
        out += d
    return out


def recv_until_eof(sock, timeout=IO_TIMEOUT):
    sock.settimeout(timeout)
    out = b''
    while True:
        d = sock.recv(65536)
        if not d:
            return out
        out += d


def read_head(sock, timeout=IO_TIMEOUT):
    """The response head (through the blank line) and what came after it."""
    sock.settimeout(timeout)
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = sock.recv(65536)
        if not d:
            return buf, None
        buf += d
    head, rest = buf.split(b'\r\n\r\n', 1)
    return head + b'\r\n\r\n', rest


UPGRADE_REQ = (b'GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
               b'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n'
               b'X-Request-Id: tunnel-1\r\n\r\n')
SWITCH = (b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
          b'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n'
          b'Sec-WebSocket-Protocol: chat\r\n\r\n')


def echo_script(conn, head, rest):
    """101, then every byte back until the client's half-close; then 'bye' and a close."""
    conn.sendall(SWITCH + b'early')
    if rest:
        conn.sendall(rest)
    while True:
        d = conn.recv(65536)
        if not d:
            break
        conn.sendall(d)
    conn.sendall(b'bye')
    conn.close()


def mixed_script(conn, head, rest):
    """An upgrade as echo_script; any other request a 200 and a close."""
    if b'Upgrade:' in head:
        echo_script(conn, head, rest)
    else:
        conn.sendall(http_response(200, b'{}', headers=[('Connection', 'close')]))
        conn.close()


def tunnel_conf(upstream, **top):
    return upstream_config(upstream.address, **top)


def open_tunnel(env, gw, sock=None):
    s = sock or socket.create_connection(('127.0.0.1', gw.port), timeout=IO_TIMEOUT)
    s.sendall(UPGRADE_REQ)
    head, rest = read_head(s)
    return s, head, rest


# ------------------------------------------------------------------------- cases

@T.case
def handshake_and_bytes(env):
    up = RawUpstream(echo_script)
    conf, aport = with_admin(tunnel_conf(up, log={'level': 'info', 'access': os.path.join(
        env.tmp, 'access.log'), 'format': 'json'}))
    gw = env.daemon(conf)
    s, head, rest = open_tunnel(env, gw)
    env.eq('the 101 head, its Upgrade, Connection and Sec-WebSocket-* intact',
           re.sub(rb'Date: [^\r]*\r\n', b'', head),
           b'HTTP/1.1 101 Switching Protocols\r\n'
           b'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n'
           b'Sec-WebSocket-Protocol: chat\r\nX-Request-Id: tunnel-1\r\n'
           b'Upgrade: websocket\r\nConnection: upgrade\r\n\r\n')
    env.eq('the upstream asked with Upgrade and Connection: upgrade', up.heads[0],
           b'GET /chat HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n'
           b'Sec-WebSocket-Version: 13\r\nX-Forwarded-For: 127.0.0.1\r\n'
           b'X-Forwarded-Proto: http\r\nX-Request-Id: tunnel-1\r\n'
           b'Upgrade: websocket\r\nConnection: upgrade\r\n\r\n')
    got = rest + recv_exact(s, 5 - len(rest))
    env.eq('bytes the upstream sent with its 101 reach the client', got, b'early')
    m = metrics(aport)
    env.eq('jsongate_tunnels_active while open', metric(m, 'jsongate_tunnels_active'), 1)
    payload = bytes(random.Random(7).getrandbits(8) for _ in range(300000))
    s.sendall(payload)
    env.eq('300,000 bytes echoed exactly', recv_exact(s, len(payload)), payload)
    s.shutdown(socket.SHUT_WR)
    env.eq('the half-close reached the upstream, which answered and closed',
           recv_until_eof(s), b'bye')
    s.close()
    ok = wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.check('jsongate_tunnels_active back to 0', ok)
    m = metrics(aport)
    env.eq('tunnels by outcome', [metric(m, 'jsongate_tunnels_total', '{outcome="%s"}' % o)
                                  for o in ('client_closed', 'upstream_closed',
                                            'idle_timeout')], [1, 0, 0])
    env.eq('bytes to the upstream', metric(m, 'jsongate_tunnel_bytes_total',
                                           '{direction="to_upstream"}'), 300000)
    env.eq('bytes to the client', metric(m, 'jsongate_tunnel_bytes_total',
                                         '{direction="to_client"}'), 300008)
    env.eq('the client connection closed as a tunnel end',
           metric(m, 'jsongate_client_closes_total', '{reason="tunnel_ended"}'), 1)
    env.eq('the 101 counted', metric(m, 'jsongate_requests_total', '{route="all",code="101"}'),
           1)
    wait_until(lambda: os.path.getsize(os.path.join(env.tmp, 'access.log')) > 0, 5)
    with open(os.path.join(env.tmp, 'access.log')) as f:
        lines = f.read().splitlines()
    env.eq('one access log line', len(lines), 1)
    e = json.loads(lines[0]) if lines else {}
    env.eq('its status, bytes both ways and outcome',
           (e.get('status'), e.get('method'), e.get('path'), e.get('bytes_sent') - len(head)
            if 'bytes_sent' in e else None, e.get('body_bytes_sent'), e.get('bytes_received'),
            e.get('tunnel'), e.get('request_id')),
           (101, 'GET', '/chat', 300008, 300008, 300000, 'client_closed', 'tunnel-1'))
    env.check('its duration', isinstance(e.get('duration_ms'), float) and
              e['duration_ms'] > 0, repr(e))
    up.stop()


async def ws_echo_run(uri, ssl_ctx=None, n=1000):
    """n messages from 1 B to 1 MB, text and binary, each echoed exactly."""
    rnd = random.Random(26)
    bad = []
    async with websockets.connect(uri, max_size=None, ssl=ssl_ctx, ping_interval=None) as ws:
        ext = ws.response_headers.get('Sec-WebSocket-Extensions')
        for i, n in enumerate(sizes_1b_to_1mb(n)):
            if i % 2:
                msg = rnd.randbytes(n)
            else:
                msg = ''.join(chr(0x20 + rnd.randrange(0x5f)) for _ in range(min(n, 64)))
                msg = (msg * (n // len(msg) + 1))[:n]
            await ws.send(msg)
            back = await ws.recv()
            if back != msg:
                bad.append(i)
    return bad, ext


@T.case
def websocket_echo_ws(env):
    ws = WsServer()
    gw = env.daemon(upstream_config(ws.address))
    bad, ext = asyncio.run(ws_echo_run('ws://127.0.0.1:%d/echo' % gw.port))
    env.eq('1,000 messages (1 B to 1 MB) echoed exactly through ws://', bad, [])
    env.eq('permessage-deflate negotiated end to end',
           (ext or '').split(';')[0], 'permessage-deflate')
    env.eq('the server saw the path and the Upgrade',
           (ws.requests[0].get('Upgrade'), ws.requests[0].get('Connection')) if ws.requests
           else None, ('websocket', 'upgrade'))
    ws.stop()


@T.case
def websocket_echo_wss(env):
    ws = WsServer()
    cert, key = make_pki()
    port = free_port()
    conf = upstream_config(ws.address)
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port,
                          'tls': {'certificates': [{'cert': cert, 'key': key}]}}]
    gw = env.daemon(conf, port=port)
    ctx = ssl.create_default_context(cafile=cert)
    bad, _ = asyncio.run(ws_echo_run('wss://127.0.0.1:%d/echo' % gw.port, ctx))
    env.eq('1,000 messages (1 B to 1 MB) echoed exactly through wss://', bad, [])
    ws.stop()


@T.case
def websocket_over_a_tls_upstream(env):
    cert, key = make_pki()
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(cert, key)
    ws = WsServer(ssl_ctx=sctx)
    conf = upstream_config(ws.address)
    conf['upstreams']['app']['tls'] = {'verify': True, 'ca': cert}
    gw = env.daemon(conf)
    bad, _ = asyncio.run(ws_echo_run('ws://127.0.0.1:%d/echo' % gw.port, n=200))
    env.eq('200 messages (1 B to 1 MB) echoed exactly through a TLS upstream', bad, [])
    ws.stop()


@T.case
def upgrade_refused_is_an_answer(env):
    for status, body in ((426, b'{"error":"upgrade required"}'), (200, b'{"plain":true}')):
        def script(conn, head, rest, status=status, body=body):
            conn.sendall(http_response(status, body))
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            conn.close()
        up = RawUpstream(script)
        gw = env.daemon(tunnel_conf(up))
        c = env.client(gw.port)
        c.send(UPGRADE_REQ)
        r = c.read_response()
        env.eq('%d: an ordinary answer' % status, (r.status, r.body, r.header('Connection')),
               (status, body, None))
        env.eq('%d: the upstream was asked for the upgrade' % status,
               b'Upgrade: websocket\r\nConnection: upgrade\r\n' in up.heads[0], True)
        r = c.request('GET', '/next', [('Host', 'a')])
        env.eq('%d: the client connection serves the next request' % status, r.status, status)
        env.eq('%d: on a new upstream connection (the first one not reused)' % status,
               len(up.heads), 2)
        up.stop()


@T.case
def body_ops_route_not_tunnelled(env):
    def script(conn, head, rest):
        conn.sendall(http_response(200, b'{"data":{"x":1}}',
                                   headers=[('Content-Type', 'application/json')]))
        conn.close()
    up = RawUpstream(script)
    routes = [{'name': 'ops', 'match': {'path_prefix': '/'}, 'upstream': 'app',
               'response': [{'unwrap': 'data'}]}]
    gw = env.daemon(upstream_config(up.address, routes=routes))
    c = env.client(gw.port)
    c.send(UPGRADE_REQ)
    r = c.read_response()
    env.eq('served as a plain request through the ops', (r.status, r.body), (200, b'{"x":1}'))
    env.eq('Upgrade and Connection dropped on the way up',
           (b'Upgrade' in up.heads[0], b'Connection' in up.heads[0]), (False, False))
    env.eq('the connection goes on', c.request('GET', '/2', [('Host', 'a')]).status, 200)
    up.stop()


@T.case
def bounded_against_a_never_reading_upstream(env):
    hold = threading.Event()

    def script(conn, head, rest):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        conn.sendall(SWITCH)
        hold.wait(120)              # never reads
        conn.close()
    up = RawUpstream(script)
    conf, aport = with_admin(tunnel_conf(up))
    gw = env.daemon(conf)
    idle = gw.rss()['VmRSS']
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    s.setblocking(False)
    chunk = b'x' * (1 << 20)
    sent, stalled_since = 0, None
    deadline = time.monotonic() + 60 * SLOW
    while sent < 200 << 20 and time.monotonic() < deadline:
        try:
            sent += s.send(chunk)
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 2:
                break
            time.sleep(0.05)
    peak = gw.rss()['VmHWM']
    env.check('the client could not push 200 MB: reading it stopped (%d bytes taken)' % sent,
              sent < 32 << 20, 'sent %d' % sent)
    bound = 512 * 1024 if instrumented() else 64 * 1024
    env.check('RSS within idle + 64 MB (idle %d KB, now %d KB)' % (idle, peak),
              peak - idle <= bound, 'grew %d KB' % (peak - idle))
    env.eq('the tunnel is still open', metric(metrics(aport), 'jsongate_tunnels_active'), 1)
    hold.set()
    recv_until_eof(s)
    s.close()
    up.stop()


@T.case
def idle_timeout_closes(env):
    up = RawUpstream(echo_script)
    conf, aport = with_admin(tunnel_conf(up, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '5s',
        'tunnel': '1s'}))
    gw = env.daemon(conf)
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    t0 = time.monotonic()
    got = rest + recv_until_eof(s, timeout=10)
    took = time.monotonic() - t0
    env.eq('the idle tunnel closed, its bytes delivered', got, b'early')
    env.check('after timeouts.tunnel (1s): took %.2fs' % took, 0.9 <= took <= 3 * SLOW)
    m = metrics(aport)
    env.eq('counted as idle_timeout',
           metric(m, 'jsongate_tunnels_total', '{outcome="idle_timeout"}'), 1)
    up.stop()


@T.case
def busy_tunnel_lives_on(env):
    up = RawUpstream(echo_script)
    gw = env.daemon(tunnel_conf(up, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '5s',
        'tunnel': '1s'}))
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    recv_exact(s, 5 - len(rest))
    ok = True
    for i in range(10):             # 3 s, a byte every 0.3 s
        s.sendall(b'%d' % i)
        if recv_exact(s, 1) != b'%d' % i:
            ok = False
        time.sleep(0.3)
    env.check('a byte every 0.3s keeps a tunnel with timeouts.tunnel 1s open for 3s', ok)
    s.shutdown(socket.SHUT_WR)
    env.eq('and it ends as it should', recv_until_eof(s), b'bye')
    up.stop()


@T.case
def sighup_keeps_tunnels(env):
    up = RawUpstream(echo_script)
    conf = tunnel_conf(up, timeouts={'upstream_connect': '2s', 'upstream_response': '10s',
                                     'shutdown_grace': '5s', 'tunnel': '60s'})
    gw = env.daemon(conf)
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    recv_exact(s, 5 - len(rest))
    new = dict(conf, timeouts=dict(conf['timeouts'], tunnel='300ms'),
               routes=[{'name': 'other', 'match': {'path_prefix': '/other'}, 'upstream': 'app'}])
    new['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port}]
    gw.write_config(new)
    gw.signal(signal.SIGHUP)
    env.require('reloaded', gw.wait_log('configuration reloaded', 10))
    c = env.client(gw.port)
    r = c.request('GET', '/chat', [('Host', 'a')])
    env.eq('the new configuration serves new requests (no route for /chat)', r.status, 404)
    time.sleep(1)                   # idle past the new tunnel timeout, within the old one
    s.sendall(b'still here')
    env.eq('the open tunnel kept its configuration and works', recv_exact(s, 10), b'still here')
    s.shutdown(socket.SHUT_WR)
    env.eq('and ends as it should', recv_until_eof(s), b'bye')
    up.stop()


@T.case
def sigterm_ends_tunnels(env):
    up = RawUpstream(echo_script)
    log = os.path.join(env.tmp, 'access.log')
    gw = env.daemon(tunnel_conf(up, log={'level': 'info', 'access': log, 'format': 'json'},
                                timeouts={'upstream_connect': '2s', 'upstream_response': '10s',
                                          'shutdown_grace': '1s'}))
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    recv_exact(s, 5 - len(rest))
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    got = recv_until_eof(s, timeout=10)
    took = time.monotonic() - t0
    env.eq('the tunnel ended, nothing more sent', got, b'')
    env.check('within shutdown_grace (1s): %.2fs' % took, took <= 2.5 * SLOW)
    try:
        code = gw.proc.wait(10 * SLOW)
    except subprocess.TimeoutExpired:
        code = None
    env.eq('the daemon exits 0', code, 0)
    with open(log) as f:
        lines = [json.loads(l) for l in f.read().splitlines()]
    env.eq('the tunnel logged as ended by the shutdown',
           [(e['status'], e.get('tunnel')) for e in lines], [(101, 'shutdown')])
    up.stop()


@T.case
def max_connections_counts_tunnels(env):
    up = RawUpstream(mixed_script)
    gw = env.daemon(tunnel_conf(up, limits={'max_connections': 1}))
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    c = env.client(gw.port)          # completes in the kernel backlog
    c.send(build_request('GET', '/x', [('Host', 'a')]))
    try:
        early = c.read_response(timeout=1.5)
    except socket.timeout:
        early = 'waiting'
    env.eq('no other connection is served while the tunnel holds the only slot', early,
           'waiting')
    s.shutdown(socket.SHUT_WR)
    recv_until_eof(s)
    s.close()
    try:
        r = c.read_response(timeout=5 * SLOW)
    except socket.timeout:
        r = None
    env.eq('served once the tunnel ended', r.status if r else None, 200)
    up.stop()


@T.case
def upstream_closes_first(env):
    def script(conn, head, rest):
        conn.sendall(SWITCH + b'hello')
        conn.close()
    up = RawUpstream(script)
    log = os.path.join(env.tmp, 'access.log')
    conf, aport = with_admin(tunnel_conf(up, log={'level': 'info', 'access': log,
                                                  'format': 'combined'}))
    gw = env.daemon(conf)
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    env.eq('the upstream\'s bytes, then its close, reach the client',
           rest + recv_until_eof(s), b'hello')
    s.close()
    ok = wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.check('the tunnel ended', ok)
    env.eq('counted as upstream_closed', metric(metrics(aport), 'jsongate_tunnels_total',
                                                 '{outcome="upstream_closed"}'), 1)
    wait_until(lambda: os.path.getsize(log) > 0, 5)
    with open(log) as f:
        line = f.read()
    env.check('the combined line: status 101, the bytes to the client, the outcome',
              re.fullmatch(r'127\.0\.0\.1 - - \[[^]]+\] "GET /chat HTTP/1\.1" 101 5 "-" "-" '
                           r'"tunnel:upstream_closed received:0"\n', line), line)
    up.stop()


@T.case
def client_reset(env):
    seen = []

    def script(conn, head, rest):
        conn.sendall(SWITCH)
        seen.append(recv_until_eof(conn))
        conn.close()
    up = RawUpstream(script)
    conf, aport = with_admin(tunnel_conf(up))
    gw = env.daemon(conf)
    s, head, rest = open_tunnel(env, gw)
    env.require('101', head.startswith(b'HTTP/1.1 101 '), head)
    s.sendall(b'abc')
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnel_bytes_total',
                              '{direction="to_upstream"}') == 3, 5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    s.close()                       # a reset
    ok = wait_until(lambda: seen, 5)
    env.eq('the upstream got the bytes, then its connection closed', seen, [b'abc'])
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.eq('counted as client_error', metric(metrics(aport), 'jsongate_tunnels_total',
                                              '{outcome="client_error"}'), 1)
    up.stop()


@T.case
def switch_without_upgrade_is_invalid(env):
    def script(conn, head, rest):
        conn.sendall(b'HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n')
        conn.close()
    up = RawUpstream(script)
    gw = env.daemon(tunnel_conf(up))
    c = env.client(gw.port)
    c.send(UPGRADE_REQ)
    r = c.read_response()
    env.gateway_error('a 101 naming no protocol', r, 502, 'upstream_invalid', None, False,
                      request_id='tunnel-1')
    env.eq('the connection goes on', c.request('GET', '/2', [('Host', 'a')]).status, 502)
    up.stop()


T.run()
