"""WebSocket over HTTP/2 (RFC 8441): the server's SETTINGS_ENABLE_CONNECT_PROTOCOL; an
extended CONNECT (:protocol websocket) going upstream as RFC 6455's GET with Upgrade (a key of
our own, the client's version and other fields), the upstream's 101 answered 200 (its
Sec-WebSocket-Protocol kept, its accept dropped) and the stream's DATA a byte tunnel both ways
(exact bytes, END_STREAM both ways); a real WebSocket server echoing messages from 1 B to 1 MB
in frames built here; another stream served while the tunnel is open; an answer other than
101 an ordinary one; a route with body ops or another :protocol refused with 501; flow
control both ways (a client that opens no window: the upstream no longer read; an upstream
that never reads: the client's window stays shut); timeouts.tunnel, SIGHUP, SIGTERM; the
tunnel's metrics and access log line."""

import base64
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
from tunnel_peers import (RawUpstream, WsServer, make_pki, metric, metrics,  # noqa: E402
                          sizes_1b_to_1mb, with_admin)

try:
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.settings
except ImportError:     # Debian's python3-h2 under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.settings

T = Suite(__file__)


# --------------------------------------------------------------------- upstreams

SWITCH = (b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
          b'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n'
          b'Sec-WebSocket-Protocol: chat\r\n\r\n')


def echo_script(conn, head, rest):
    """101 and 'early', then every byte back until the client's half-close; then 'bye' and
    a close.  Anything but an upgrade: a 200 and a close."""
    if b'Upgrade: websocket' not in head:
        conn.sendall(http_response(200, b'{"plain":1}', headers=[('Connection', 'close')]))
        conn.close()
        return
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


# ------------------------------------------------------------------------ client

GOAWAY = 7


class H2:
    """A frame-level HTTP/2 client (python3-h2).  GOAWAY frames are taken out of what comes
    before h2 sees them (it would end the connection's state at once): the tunnel's stream
    goes on after one."""

    def __init__(self, port, settings=None):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.events = []
        self.data = {}
        self.goaways = []
        self.closed = False
        self.buf = b''

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def _frames(self, data):
        """What came, without its GOAWAY frames (kept in self.goaways)."""
        self.buf += data
        out = b''
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], 'big')
            if len(self.buf) < 9 + n:
                break
            frame, self.buf = self.buf[:9 + n], self.buf[9 + n:]
            if frame[3] == GOAWAY:
                self.goaways.append(frame)
            else:
                out += frame
        return out

    def settled(self):
        return self.pump(lambda h: any(isinstance(e, h2.events.SettingsAcknowledged)
                                       for e in h.events) and
                         any(isinstance(e, h2.events.RemoteSettingsChanged)
                             for e in h.events), 5)

    def pump(self, until, timeout=10, window=True):
        deadline = time.time() + timeout * SLOW
        while not until(self):
            left = deadline - time.time()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                return False
            except ConnectionError:
                data = b''
            if not data:
                self.closed = True
                return until(self)
            for ev in self.conn.receive_data(self._frames(data)):
                self.events.append(ev)
                if isinstance(ev, h2.events.DataReceived):
                    self.data[ev.stream_id] = self.data.get(ev.stream_id, b'') + ev.data
                    if window:
                        self.conn.acknowledge_received_data(ev.flow_controlled_length,
                                                            ev.stream_id)
            self.flush()
        return True

    def connect(self, path, headers=(), protocol='websocket', end=False):
        sid = self.conn.get_next_available_stream_id()
        fields = [(':method', 'CONNECT')]
        if protocol is not None:
            fields += [(':protocol', protocol), (':scheme', 'http'), (':path', path)]
        fields += [(':authority', 'h2.example')]
        self.conn.send_headers(sid, fields + list(headers), end_stream=end)
        self.flush()
        return sid

    def get(self, path, headers=()):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(':method', 'GET'), (':scheme', 'http'),
                                     (':authority', 'h2.example'), (':path', path)] +
                               list(headers), end_stream=True)
        self.flush()
        return sid

    def send(self, sid, data, end=False, timeout=20):
        """All of data, as the stream's and the connection's windows let it go."""
        view = memoryview(data)
        while len(view):
            room = min(self.conn.local_flow_control_window(sid),
                       self.conn.max_outbound_frame_size)
            if room <= 0:
                n = len(self.events)
                if not self.pump(lambda h: any(isinstance(e, h2.events.WindowUpdated)
                                               for e in h.events[n:]), timeout):
                    return False
                continue
            self.conn.send_data(sid, bytes(view[:room]))
            view = view[room:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()
        return True

    def response(self, sid):
        for e in self.events:
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                return [(k.decode(), v.decode()) for k, v in e.headers]
        return None

    def status(self, sid):
        r = self.response(sid)
        return int(dict(r)[':status']) if r else None

    def ended(self, sid):
        return any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and
                   e.stream_id == sid for e in self.events)

    def end_kind(self, sid):
        for e in self.events:
            if getattr(e, 'stream_id', None) != sid:
                continue
            if isinstance(e, h2.events.StreamEnded):
                return 'END_STREAM'
            if isinstance(e, h2.events.StreamReset):
                return 'RST_STREAM %s' % h2.errors.ErrorCodes(e.error_code).name
        return None

    def close(self):
        self.sock.close()


# ----------------------------------------------------------- WebSocket framing

def ws_frame(payload, opcode=2, fin=True):
    """A client frame: masked (RFC 6455 5.3)."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack('!H', n)
    else:
        head += bytes([0x80 | 127]) + struct.pack('!Q', n)
    key = os.urandom(4)
    mask = (key * (n // 4 + 1))[:n]
    body = (int.from_bytes(payload, 'big') ^ int.from_bytes(mask, 'big')).to_bytes(n, 'big') \
        if n else b''
    return head + key + body


def ws_parse(buf):
    """(messages, rest): whole server messages (opcode, payload) at the front of buf."""
    msgs, parts, op, i, consumed = [], [], None, 0, 0
    while True:
        if len(buf) - i < 2:
            break
        b0, b1 = buf[i], buf[i + 1]
        if b1 & 0x80:
            raise ValueError('a masked server frame')
        n, j = b1 & 0x7f, i + 2
        if n == 126:
            if len(buf) - j < 2:
                break
            n, j = struct.unpack('!H', buf[j:j + 2])[0], j + 2
        elif n == 127:
            if len(buf) - j < 8:
                break
            n, j = struct.unpack('!Q', buf[j:j + 8])[0], j + 8
        if len(buf) - j < n:
            break
        if b0 & 0x0f:
            op = b0 & 0x0f
        parts.append(buf[j:j + n])
        i = j + n
        if b0 & 0x80:
            msgs.append((op, b''.join(parts)))
            parts, op = [], None
            consumed = i
    return msgs, buf[consumed:]


# ------------------------------------------------------------------------ helpers

def h2_daemon(env, conf):
    port = free_port()
    return env.daemon(dict(conf, listeners=[{'listen': '127.0.0.1:%d' % port,
                                             'http2': True}]), port=port)


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines()]


def open_tunnel(env, gw, headers=(), settings=None):
    h = H2(gw.port, settings)
    env.require('the server\'s SETTINGS', h.settled())
    sid = h.connect('/chat', headers)
    env.require('the tunnel\'s 200', h.pump(lambda h: h.response(sid) is not None),
                h.events[-5:])
    return h, sid


WS_HEADERS = [('sec-websocket-version', '13'), ('sec-websocket-protocol', 'chat, superchat'),
              ('sec-websocket-extensions', 'permessage-deflate'),
              ('origin', 'http://h2.example'), ('x-request-id', 'ws-h2-1')]


# ------------------------------------------------------------------------- cases

@T.case
def handshake_and_bytes(env):
    up = RawUpstream(echo_script)
    log = os.path.join(env.tmp, 'access.log')
    conf, aport = with_admin(upstream_config(up.address, log={
        'level': 'info', 'access': log, 'format': 'json'}))
    gw = h2_daemon(env, conf)
    h = H2(gw.port)
    env.require('the server\'s SETTINGS', h.settled())
    remote = h.conn.remote_settings
    env.eq('SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 in the server\'s SETTINGS',
           remote.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL), 1)
    sid = h.connect('/chat?room=1', WS_HEADERS)
    env.require('an answer', h.pump(lambda h: h.response(sid) is not None), h.events[-5:])
    head = h.response(sid)
    env.eq('200 with the 101\'s Sec-WebSocket-Protocol; no accept, Upgrade or Connection',
           [(n, v) for n, v in head if n != 'date'],
           [(':status', '200'), ('sec-websocket-protocol', 'chat'),
            ('x-request-id', 'ws-h2-1')])
    m = re.fullmatch(rb'GET /chat\?room=1 HTTP/1\.1\r\nHost: h2\.example\r\n'
                     rb'Sec-WebSocket-Key: ([A-Za-z0-9+/]{22}==)\r\n'
                     rb'Sec-WebSocket-Version: 13\r\n'
                     rb'sec-websocket-protocol: chat, superchat\r\n'
                     rb'sec-websocket-extensions: permessage-deflate\r\n'
                     rb'origin: http://h2\.example\r\n'
                     rb'X-Forwarded-For: 127\.0\.0\.1\r\nX-Forwarded-Proto: http\r\n'
                     rb'X-Request-Id: ws-h2-1\r\n'
                     rb'Upgrade: websocket\r\nConnection: upgrade\r\n\r\n', up.heads[0])
    env.check('the upstream asked as RFC 6455 says: GET, Upgrade, a fresh key, the version '
              'and the client\'s fields', m, up.heads[0])
    env.eq('the key is 16 bytes', len(base64.b64decode(m.group(1))) if m else None, 16)
    env.check('bytes the upstream sent with its 101 reach the client as DATA',
              h.pump(lambda h: h.data.get(sid, b'') == b'early'), h.data.get(sid))
    env.eq('jsongate_tunnels_active while open',
           metric(metrics(aport), 'jsongate_tunnels_active'), 1)
    payload = random.Random(8441).randbytes(300000)
    env.require('300,000 bytes sent', h.send(sid, payload))
    env.check('echoed exactly', h.pump(lambda h: len(h.data.get(sid, b'')) >= 300005))
    env.eq('the bytes', h.data.get(sid, b'')[5:], payload)
    h.send(sid, b'', end=True)
    env.check('the client\'s END_STREAM reached the upstream, which answered and closed',
              h.pump(lambda h: h.ended(sid)), h.events[-5:])
    env.eq('its last bytes, then END_STREAM', (h.data[sid][-3:], h.end_kind(sid)),
           (b'bye', 'END_STREAM'))
    ok = wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.check('jsongate_tunnels_active back to 0', ok)
    m = metrics(aport)
    env.eq('tunnels by outcome', [metric(m, 'jsongate_tunnels_total', '{outcome="%s"}' % o)
                                  for o in ('client_closed', 'upstream_closed',
                                            'client_error', 'idle_timeout')], [1, 0, 0, 0])
    env.eq('bytes both ways',
           (metric(m, 'jsongate_tunnel_bytes_total', '{direction="to_upstream"}'),
            metric(m, 'jsongate_tunnel_bytes_total', '{direction="to_client"}')),
           (300000, 300008))
    env.eq('the request counted with the status the client got',
           metric(m, 'jsongate_requests_total', '{route="all",code="200"}'), 1)
    wait_until(lambda: read_log(log), 5)
    lines = read_log(log)
    env.eq('one access log line: status, method, bytes, outcome',
           [(e.get('status'), e.get('method'), e.get('path'), e.get('body_bytes_sent'),
             e.get('bytes_received'), e.get('tunnel'), e.get('request_id')) for e in lines],
           [(200, 'GET', '/chat?room=1', 300008, 300000, 'client_closed', 'ws-h2-1')])
    sid = h.connect('/chat', [('sec-websocket-version', '13')])
    h.pump(lambda h: h.response(sid) is not None)
    env.eq('a second tunnel on the connection', h.status(sid), 200)
    keys = [re.search(rb'Sec-WebSocket-Key: (\S+)', x).group(1) for x in up.heads]
    env.check('with a key of its own', len(keys) == 2 and keys[0] != keys[1], keys)
    h.close()
    up.stop()


def ws_echo_run(h, sid, n):
    """n messages from 1 B to 1 MB, text and binary, in frames of our own: the indexes of
    those not echoed exactly, and what came after the last one."""
    rnd = random.Random(26)
    bad, pending = [], b''
    for i, n in enumerate(sizes_1b_to_1mb(n)):
        msg = rnd.randbytes(n) if i % 2 else \
            bytes(0x20 + rnd.randrange(0x5f) for _ in range(min(n, 64))) * (n // 64 + 1)
        msg = msg[:n]
        if not h.send(sid, ws_frame(msg, opcode=2 if i % 2 else 1)):
            bad.append((i, 'send'))
            break
        back = None

        def have(h):
            nonlocal pending, back
            pending += h.data.pop(sid, b'')
            msgs, pending = ws_parse(pending)
            if msgs:
                back = msgs[0]
            return back is not None
        if not h.pump(have, 20):
            bad.append((i, 'no answer'))
            break
        if back != (2 if i % 2 else 1, msg):
            bad.append(i)
    return bad, pending


def ws_close(h, sid, pending):
    """A close frame sent: 1 once the server's close frame came."""
    h.send(sid, ws_frame(struct.pack('!H', 1000), opcode=8))

    def closed(h):
        nonlocal pending
        pending += h.data.pop(sid, b'')
        return any(op == 8 for op, _ in ws_parse(pending)[0])
    return h.pump(closed)


@T.case
def websocket_echo(env):
    ws = WsServer(compression=None)
    gw = h2_daemon(env, upstream_config(ws.address))
    h, sid = open_tunnel(env, gw, [('sec-websocket-version', '13')])
    env.eq('a real WebSocket server: 200', h.status(sid), 200)
    bad, pending = ws_echo_run(h, sid, 300)
    env.eq('300 messages (1 B to 1 MB, text and binary) echoed exactly', bad, [])
    env.eq('the server saw an RFC 6455 handshake',
           (ws.requests[0].get('Upgrade'), ws.requests[0].get('Sec-WebSocket-Version'))
           if ws.requests else None, ('websocket', '13'))
    env.check('a close frame answered', ws_close(h, sid, pending))
    h.close()
    ws.stop()


@T.case
def websocket_over_a_tls_upstream(env):
    """TLS cannot half-close: the client's END_STREAM ends the tunnel, and the stream ends
    with END_STREAM, not a reset."""
    cert, key = make_pki()
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(cert, key)
    ws = WsServer(ssl_ctx=sctx, compression=None)
    conf, aport = with_admin(upstream_config(ws.address))
    conf['upstreams']['app']['tls'] = {'verify': True, 'ca': cert}
    gw = h2_daemon(env, conf)
    h, sid = open_tunnel(env, gw, [('sec-websocket-version', '13')])
    bad, pending = ws_echo_run(h, sid, 60)
    env.eq('60 messages (1 B to 1 MB) echoed exactly through a TLS upstream', bad, [])
    h.send(sid, b'', end=True)
    env.check('the client\'s END_STREAM ends the stream', h.pump(lambda h: h.ended(sid)))
    env.eq('with END_STREAM', h.end_kind(sid), 'END_STREAM')
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.eq('counted as client_closed', metric(metrics(aport), 'jsongate_tunnels_total',
                                               '{outcome="client_closed"}'), 1)
    h.close()
    ws.stop()


@T.case
def other_stream_meanwhile(env):
    up = RawUpstream(echo_script)
    gw = h2_daemon(env, upstream_config(up.address))
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    h.pump(lambda h: h.data.get(sid) == b'early')
    other = h.get('/api')
    env.check('another stream of the connection is answered while the tunnel is open',
              h.pump(lambda h: h.ended(other)))
    env.eq('its answer', (h.status(other), h.data.get(other), h.end_kind(other)),
           (200, b'{"plain":1}', 'END_STREAM'))
    h.send(sid, b'after')
    env.check('the tunnel goes on', h.pump(lambda h: h.data.get(sid) == b'earlyafter'),
              h.data.get(sid))
    h.close()
    up.stop()


@T.case
def data_before_the_200(env):
    """DATA the client sends before the upstream switched waits for the tunnel and goes
    first."""
    up = RawUpstream(echo_script)
    gw = h2_daemon(env, upstream_config(up.address))
    h = H2(gw.port)
    h.settled()
    sid = h.connect('/chat', WS_HEADERS)
    h.send(sid, b'hello')
    env.check('the upstream\'s bytes and the early ones echoed',
              h.pump(lambda h: h.data.get(sid) == b'earlyhello'), h.data.get(sid))
    env.eq('200', h.status(sid), 200)
    env.eq('the upstream head carried no body framing',
           (b'Transfer-Encoding' in up.heads[0], b'Content-Length' in up.heads[0]),
           (False, False))
    h.close()
    up.stop()


@T.case
def non_101_is_an_answer(env):
    def script(conn, head, rest):
        conn.sendall(http_response(426, b'{"error":"upgrade required"}',
                                   headers=[('Connection', 'close')]))
        conn.close()
    up = RawUpstream(script)
    gw = h2_daemon(env, upstream_config(up.address))
    h = H2(gw.port)
    h.settled()
    sid = h.connect('/chat', WS_HEADERS)
    env.check('an answer', h.pump(lambda h: h.data.get(sid) and h.response(sid)))
    env.eq('426 as the upstream gave it, with its body',
           (h.status(sid), dict(h.response(sid)).get('content-length'), h.data.get(sid)),
           (426, '28', b'{"error":"upgrade required"}'))
    env.check('the stream ends', h.pump(lambda h: h.ended(sid)))
    env.eq('the upstream was asked for the upgrade',
           b'Upgrade: websocket\r\nConnection: upgrade\r\n' in up.heads[0], True)
    other = h.get('/x')
    h.pump(lambda h: h.ended(other))
    env.eq('the connection goes on', h.status(other), 426)
    h.close()
    up.stop()


@T.case
def upgrade_answered_200(env):
    """An upstream that takes the upgrade for a plain GET: its 200 would tell the client the
    tunnel is open; it gets 502 instead."""
    def script(conn, head, rest):
        conn.sendall(http_response(200, b'{"plain":1}', headers=[('Connection', 'close')]))
        conn.close()
    up = RawUpstream(script)
    gw = h2_daemon(env, upstream_config(up.address))
    h = H2(gw.port)
    h.settled()
    sid = h.connect('/chat', WS_HEADERS)
    env.check('answered', h.pump(lambda h: h.ended(sid)))
    headers = dict(h.response(sid) or [])
    body = gateway_error_body(502, 'upstream_invalid', 'the upstream did not switch to WebSocket',
                              'ws-h2-1')
    env.eq('502 upstream_invalid', (h.status(sid), headers.get('content-length'),
                                    h.data.get(sid), h.end_kind(sid)),
           (502, str(len(body)), body, 'END_STREAM'))
    h.close()
    up.stop()


@T.case
def refused_with_501(env):
    up = RawUpstream(echo_script)
    routes = [{'name': 'ops', 'match': {'path_prefix': '/ops'}, 'upstream': 'app',
               'response': [{'unwrap': 'data'}]},
              {'name': 'all', 'match': {'path_prefix': '/'}, 'upstream': 'app'}]
    gw = h2_daemon(env, upstream_config(up.address, routes=routes))
    h = H2(gw.port)
    h.settled()

    def refused(sid, what, message):
        env.check(what + ': answered', h.pump(lambda h: h.ended(sid)), h.events[-5:])
        headers = dict(h.response(sid) or [])
        rid = headers.get('x-request-id', '')
        body = gateway_error_body(501, 'not_implemented', message, rid)
        env.eq(what + ': 501 not_implemented',
               (h.status(sid), headers.get('content-type'), headers.get('content-length'),
                h.data.get(sid), h.end_kind(sid)),
               (501, 'application/json', str(len(body)), body, 'END_STREAM'))

    sid = h.connect('/ops/chat', WS_HEADERS)
    refused(sid, 'a route with body ops', 'the route does not tunnel WebSocket')
    env.eq('which asked the upstream as a plain GET (Upgrade dropped)',
           [(b'Upgrade' in x, x.split(b'\r\n')[0]) for x in up.heads],
           [(False, b'GET /ops/chat HTTP/1.1')])
    n = len(up.heads)
    sid = h.connect('/chat', [('sec-websocket-version', '13')], protocol='connect-udp')
    refused(sid, 'a :protocol other than websocket', 'only the websocket protocol is tunnelled')
    sid = h.connect(None, protocol=None)
    refused(sid, 'a plain CONNECT (as before)',
            'only the chunked transfer coding is implemented')
    env.eq('neither reached the upstream', len(up.heads), n)
    sid = h.connect('/chat', WS_HEADERS)
    h.pump(lambda h: h.response(sid) is not None)
    env.eq('the connection goes on: a tunnel', h.status(sid), 200)
    h.close()
    up.stop()


@T.case
def client_window_shut(env):
    """The client opens no window: the daemon holds about FLOW_HIGH and stops reading the
    upstream; once the window opens every byte comes, in order."""
    sent = [0]
    stalled = threading.Event()
    go = threading.Event()

    def script(conn, head, rest):
        conn.sendall(SWITCH)
        conn.setblocking(False)
        chunk = bytes(range(256)) * 256
        stall = None
        while sent[0] < (200 << 20):
            try:
                sent[0] += conn.send(chunk[sent[0] % 256:] + chunk[:sent[0] % 256])
                stall = None
            except BlockingIOError:
                stall = stall or time.monotonic()
                if time.monotonic() - stall > 2:
                    break
                time.sleep(0.02)
        stalled.set()
        go.wait(60)
        conn.setblocking(True)
        conn.close()
    up = RawUpstream(script)
    conf, aport = with_admin(upstream_config(up.address))
    gw = h2_daemon(env, conf)
    idle = gw.rss()['VmRSS']
    h, sid = open_tunnel(env, gw, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    env.require('the upstream stopped being read', stalled.wait(60 * SLOW))
    grown = gw.rss()['VmHWM'] - idle
    env.check('the upstream could not push 200 MB (%d bytes taken)' % sent[0],
              sent[0] < (16 << 20), sent[0])
    bound = 512 * 1024 if instrumented() else 64 * 1024
    env.check('RSS within idle + 64 MB (grew %d KB)' % grown, grown <= bound)
    h.pump(lambda h: False, 0.5)
    env.eq('not a byte of DATA sent into a shut window', len(h.data.get(sid, b'')), 0)
    env.eq('the tunnel is still open', metric(metrics(aport), 'jsongate_tunnels_active'), 1)
    go.set()
    h.conn.increment_flow_control_window(1 << 30, stream_id=sid)
    h.conn.increment_flow_control_window(1 << 30)
    h.flush()
    total = sent[0]
    env.check('once the window opens, every byte comes and the stream ends',
              h.pump(lambda h: h.ended(sid), 60), (len(h.data.get(sid, b'')), total))
    data = h.data.get(sid, b'')
    want = (bytes(range(256)) * (total // 256 + 2))[:total]
    env.eq('in order, exactly (%d bytes)' % total, (len(data), data == want, h.end_kind(sid)),
           (total, True, 'END_STREAM'))
    h.close()
    up.stop()


@T.case
def upstream_never_reads(env):
    """An upstream that never reads: the stream's window is given back only as the
    upstream takes the bytes; the client cannot push 200 MB."""
    hold = threading.Event()

    def script(conn, head, rest):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        conn.sendall(SWITCH)
        hold.wait(120)
        conn.close()
    up = RawUpstream(script)
    conf, aport = with_admin(upstream_config(up.address))
    gw = h2_daemon(env, conf)
    idle = gw.rss()['VmRSS']
    h, sid = open_tunnel(env, gw)
    chunk = b'x' * (1 << 20)
    sent = 0
    t0 = time.monotonic()
    while sent < (200 << 20) and time.monotonic() - t0 < 60 * SLOW:
        if not h.send(sid, chunk, timeout=2):
            break
        sent += len(chunk)
    left = h.conn.local_flow_control_window(sid)
    grown = gw.rss()['VmHWM'] - idle
    env.check('the client could not push 200 MB: its window stayed shut (%d MB sent)'
              % (sent >> 20), sent < (16 << 20), sent)
    bound = 512 * 1024 if instrumented() else 64 * 1024
    env.check('RSS within idle + 64 MB (grew %d KB)' % grown, grown <= bound)
    env.eq('no window left', left, 0)
    env.eq('the tunnel is still open', metric(metrics(aport), 'jsongate_tunnels_active'), 1)
    hold.set()
    env.check('the upstream\'s close ends the stream', h.pump(lambda h: h.ended(sid), 20))
    h.close()
    up.stop()


@T.case
def idle_timeout(env):
    up = RawUpstream(echo_script)
    conf, aport = with_admin(upstream_config(up.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '5s',
        'tunnel': '1s'}))
    gw = h2_daemon(env, conf)
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    t0 = time.monotonic()
    env.check('the idle tunnel ends', h.pump(lambda h: h.ended(sid), 10))
    took = time.monotonic() - t0
    env.eq('its bytes delivered, then RST_STREAM (CANCEL)', (h.data.get(sid), h.end_kind(sid)),
           (b'early', 'RST_STREAM CANCEL'))
    env.check('after timeouts.tunnel (1s): took %.2fs' % took, 0.8 <= took <= 3 * SLOW)
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.eq('counted as idle_timeout',
           metric(metrics(aport), 'jsongate_tunnels_total', '{outcome="idle_timeout"}'), 1)
    sid = h.get('/api')
    h.pump(lambda h: h.ended(sid))
    env.eq('the connection goes on', (h.status(sid), h.data.get(sid)), (200, b'{"plain":1}'))
    h.close()
    up.stop()


@T.case
def client_reset(env):
    seen = []

    def script(conn, head, rest):
        conn.sendall(SWITCH)
        buf = b''
        while True:
            d = conn.recv(65536)
            if not d:
                break
            buf += d
        seen.append(buf)
        conn.close()
    up = RawUpstream(script)
    log = os.path.join(env.tmp, 'access.log')
    conf, aport = with_admin(upstream_config(up.address, log={
        'level': 'info', 'access': log, 'format': 'json'}))
    gw = h2_daemon(env, conf)
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    h.send(sid, b'abc')
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnel_bytes_total',
                              '{direction="to_upstream"}') == 3, 5)
    h.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    h.flush()
    env.check('the upstream got the bytes, then its connection closed',
              wait_until(lambda: seen, 5))
    env.eq('the bytes', seen, [b'abc'])
    wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.eq('counted as client_error', metric(metrics(aport), 'jsongate_tunnels_total',
                                              '{outcome="client_error"}'), 1)
    wait_until(lambda: read_log(log), 5)
    env.eq('one line', [(e.get('status'), e.get('tunnel'), e.get('bytes_received'))
                        for e in read_log(log)], [(200, 'client_error', 3)])
    h.close()
    up.stop()


@T.case
def upstream_closes_first(env):
    def script(conn, head, rest):
        conn.sendall(SWITCH + b'hello')
        conn.close()
    up = RawUpstream(script)
    log = os.path.join(env.tmp, 'access.log')
    conf, aport = with_admin(upstream_config(up.address, log={
        'level': 'info', 'access': log, 'format': 'combined'}))
    gw = h2_daemon(env, conf)
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    env.check('the upstream\'s bytes, then END_STREAM', h.pump(lambda h: h.ended(sid)))
    env.eq('exactly', (h.data.get(sid), h.end_kind(sid)), (b'hello', 'END_STREAM'))
    env.eq('the tunnel waits for the client\'s half',
           metric(metrics(aport), 'jsongate_tunnels_active'), 1)
    h.send(sid, b'', end=True)
    ok = wait_until(lambda: metric(metrics(aport), 'jsongate_tunnels_active') == 0, 5)
    env.check('which ends it', ok)
    env.eq('counted as upstream_closed', metric(metrics(aport), 'jsongate_tunnels_total',
                                                 '{outcome="upstream_closed"}'), 1)
    wait_until(lambda: os.path.getsize(log) > 0, 5)
    with open(log) as f:
        line = f.read()
    env.check('the combined line: the GET it became over HTTP/2, 200, the bytes to the '
              'client, the outcome',
              re.fullmatch(r'127\.0\.0\.1 - - \[[^]]+\] "GET /chat HTTP/2\.0" 200 5 "-" "-" '
                           r'"tunnel:upstream_closed received:0"\n', line), line)
    h.close()
    up.stop()


@T.case
def sighup_keeps_tunnel(env):
    up = RawUpstream(echo_script)
    conf = upstream_config(up.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '5s',
        'tunnel': '60s'})
    gw = h2_daemon(env, conf)
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    h.pump(lambda h: h.data.get(sid) == b'early')
    new = dict(conf, timeouts=dict(conf['timeouts'], tunnel='300ms'))
    new['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port, 'http2': True}]
    gw.write_config(new)
    gw.signal(signal.SIGHUP)
    env.require('reloaded', gw.wait_log('configuration reloaded', 10))
    h.pump(lambda h: h.goaways, 5)
    env.eq('the connection is told to go (GOAWAY)', len(h.goaways), 1)
    time.sleep(1)               # idle past the new tunnel timeout, within the old one
    h.send(sid, b'still here')
    env.check('the open tunnel kept its configuration and works',
              h.pump(lambda h: h.data.get(sid) == b'earlystill here'), h.data.get(sid))
    h.send(sid, b'', end=True)
    env.check('and ends as it should', h.pump(lambda h: h.ended(sid)))
    env.eq('its last bytes', (h.data.get(sid)[-3:], h.end_kind(sid)), (b'bye', 'END_STREAM'))
    h.close()
    up.stop()


@T.case
def sigterm_ends_tunnel(env):
    up = RawUpstream(echo_script)
    log = os.path.join(env.tmp, 'access.log')
    gw = h2_daemon(env, upstream_config(up.address, log={
        'level': 'info', 'access': log, 'format': 'json'}, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'shutdown_grace': '1s'}))
    h, sid = open_tunnel(env, gw, WS_HEADERS)
    h.pump(lambda h: h.data.get(sid) == b'early')
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    h.pump(lambda h: h.goaways, 5)
    env.eq('GOAWAY first', len(h.goaways), 1)
    h.send(sid, b'during')
    env.check('the tunnel works during the drain',
              h.pump(lambda h: h.data.get(sid) == b'earlyduring'), h.data.get(sid))
    h.pump(lambda h: h.closed, 10)
    took = time.monotonic() - t0
    env.check('the connection ends within shutdown_grace (1s): %.2fs' % took,
              h.closed and took <= 2.5 * SLOW)
    try:
        code = gw.proc.wait(10 * SLOW)
    except subprocess.TimeoutExpired:
        code = None
    env.eq('the daemon exits 0', code, 0)
    env.eq('the tunnel logged as ended by the shutdown',
           [(e['status'], e.get('tunnel'), e.get('bytes_received')) for e in read_log(log)],
           [(200, 'shutdown', 6)])
    h.close()
    up.stop()


T.run()
