"""HTTP/2 from clients: h2c by prior knowledge next to HTTP/1.1 on one plain port, h2 by
ALPN over TLS; the same bytes as HTTP/1.1 on pass-through (a 10 MB upload with and without
content-length byte for byte upstream, chunked and large answers), envelope ops, aggregated
routes and gateway errors; the head mapped per RFC 9113 (:authority as Host, cookie crumbs
joined); h2load's 1,000 requests over one connection 100 at a time; flow control (an answer
whose client opens no window holds the daemon to its buffers while another stream of the
connection goes on); the known attacks (rapid reset, an HPACK bomb against
limits.max_header, a CONTINUATION flood, a PING flood never read, an oversized frame);
SIGTERM's GOAWAY with the streams in flight finishing; the idle close."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
except ImportError:     # Debian's python3-h2 under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

T = Suite(__file__)

CERTS = os.path.join(TESTS_SRCDIR, 'config', 'certs')


def h2_conf(up_address, routes=None, **top):
    return upstream_config(up_address, routes=routes, **top)


def h2_daemon(env, conf, tls=False):
    port = free_port()
    listener = {'listen': '127.0.0.1:%d' % port, 'http2': True}
    if tls:
        listener['tls'] = {'certificates': [{'cert': os.path.join(CERTS, 'api.crt'),
                                             'key': os.path.join(CERTS, 'api.key')}]}
    return env.daemon(dict(conf, listeners=[listener]), port=port)


def curl(env, *args):
    r = env.run(['curl', '-sS', '--http2-prior-knowledge', '-o', '-', '-w',
                 '\n%{http_code} %{http_version}'] + list(args), timeout=60)
    out, _, tail = r.stdout.rpartition(b'\n')
    return out, tail.decode(), r.returncode


class H2:
    """A frame-level HTTP/2 client (python3-h2) on a plain socket."""

    def __init__(self, port, settings=None):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.events = []
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, headers=(), body=None, end=True, method='GET'):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(':method', method), (':scheme', 'http'),
                                     (':authority', 'h2.example'), (':path', path)] +
                               list(headers), end_stream=body is None and end)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def pump(self, until, timeout=10, window=True):
        """Read events until until(self) holds; give back the window of what came when
        window is true."""
        deadline = time.time() + timeout
        while not until(self):
            left = deadline - time.time()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            except ConnectionError:
                data = b''
            if not data:
                self.closed = True
                return until(self)
            for ev in self.conn.receive_data(data):
                self.events.append(ev)
                if window and isinstance(ev, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(ev.flow_controlled_length,
                                                        ev.stream_id)
            self.flush()
        return True

    def ended(self, sid):
        return any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and
                   e.stream_id == sid for e in self.events)

    def answer(self, sid):
        status, headers, body, reset = None, [], b'', None
        for e in self.events:
            if getattr(e, 'stream_id', None) != sid:
                continue
            if isinstance(e, h2.events.ResponseReceived):
                headers = [(k.decode(), v.decode()) for k, v in e.headers]
                status = int(dict(headers)[':status'])
            elif isinstance(e, h2.events.DataReceived):
                body += e.data
            elif isinstance(e, h2.events.StreamReset):
                reset = e.error_code
        return status, headers, body, reset

    def goaway(self):
        for e in self.events:
            if isinstance(e, h2.events.ConnectionTerminated):
                return e
        return None

    def close(self):
        self.sock.close()


def echo(req):
    """The request as the upstream got it, as JSON."""
    import json
    body = json.dumps({'method': req.method, 'target': req.target,
                       'headers': [[n, v] for n, v in req.headers],
                       'framing': req.framing, 'len': len(req.body)}).encode()
    return http_response(200, body)


@T.case
def same_bytes_as_http11(env):
    up = env.scripted(default=answer(lambda req: http_response(
        200, b'{"code":0,"data":{"n":1.50,"s":"\\u00e9"}}', headers=[('X-Up', 'yes')])))
    gw = h2_daemon(env, h2_conf(up.address, routes=[
        {'name': 'ops', 'match': {'path_prefix': '/ops/'}, 'upstream': 'app',
         'response': [{'unwrap': 'data'}]},
        {'name': 'all', 'upstream': 'app'}]))
    url = 'http://127.0.0.1:%d' % gw.port
    body, tail, rc = curl(env, url + '/plain')
    env.eq('pass-through over h2c', (body, tail, rc),
           (b'{"code":0,"data":{"n":1.50,"s":"\\u00e9"}}', '200 2', 0))
    body, tail, rc = curl(env, url + '/ops/x')
    env.eq('envelope ops over h2c: the inner bytes as they came', (body, tail),
           (b'{"n":1.50,"s":"\\u00e9"}', '200 2'))
    c = env.client(gw.port)
    r = c.request('GET', '/ops/x', [('Host', 'h')])
    env.eq('HTTP/1.1 on the same port', (r.status, r.body), (200, b'{"n":1.50,"s":"\\u00e9"}'))

    h = H2(gw.port)
    sid = h.request('/plain', [('cookie', 'a=1'), ('accept', '*/*'), ('cookie', 'b=2')])
    env.check('an answer', h.pump(lambda h: h.ended(sid)))
    status, headers, body, reset = h.answer(sid)
    names = [n for n, _ in headers]
    env.eq('status and body', (status, body, reset),
           (200, b'{"code":0,"data":{"n":1.50,"s":"\\u00e9"}}', None))
    env.eq('the upstream\'s field, our request id, the length; no connection fields',
           (dict(headers).get('x-up'), len(dict(headers).get('x-request-id', '')),
            dict(headers).get('content-length'),
            [n for n in names if n in ('connection', 'keep-alive', 'transfer-encoding')]),
           ('yes', 32, '41', []))
    req = up.requests[-1]
    env.eq('upstream head: Host from :authority, cookie crumbs joined, HTTP/1.1',
           (req.method, req.target, req.version, req.header('Host'), req.all('Cookie'),
            req.header('Accept')),
           ('GET', '/plain', 'HTTP/1.1', 'h2.example', ['a=1; b=2'], '*/*'))
    h.close()


@T.case
def answer_fields_as_http11(env):
    """An answer's fields over h2c are the HTTP/1.1 answer's, in its order and case but for
    the names: header ops with variables, a strong ETag of a rewritten (and gzipped) body
    made weak, the added Vary merged with the upstream's, the request id, CORS lines, a name
    of 72 bytes."""
    def app(req):
        vary = 'Origin, Accept-Encoding' if req.target.startswith('/ops/merged') else 'Origin'
        return http_response(200, b'{"code":0,"data":{"n":1,"pad":"' + b'x' * 300 + b'"}}',
                             headers=[('ETag', '"v1"'), ('Vary', vary), ('Server', 'app/1'),
                                      ('Cache-Control', 'private'), ('X-Up', 'Yes'),
                                      ('X-' + 'Long-' * 14 + 'Name', 'kept')])
    up = env.scripted(default=answer(app))
    gw = h2_daemon(env, h2_conf(up.address, routes=[
        {'name': 'ops', 'match': {'path_prefix': '/ops/'}, 'upstream': 'app',
         'response': [{'unwrap': 'data'}], 'compress': 'gzip',
         'cors': {'origins': ['https://app.example']},
         'response_headers': {'set': {'Cache-Control': 'no-store', 'X-Route': '$route'},
                              'add': {'X-Echo': '$header.x-trace'},
                              'remove': ['Server']}},
        {'name': 'all', 'upstream': 'app'}]))
    headers = [('accept-encoding', 'gzip'), ('x-trace', 't-1'),
               ('origin', 'https://app.example')]
    h = H2(gw.port)
    c = env.client(gw.port)
    for path in ('/ops/merged', '/ops/origin', '/plain'):
        rid = 'id' + path.replace('/', '-')
        r = c.request('GET', path, [('Host', 'h2.example'), ('X-Request-Id', rid)] +
                      [(n.title(), v) for n, v in headers])
        sid = h.request(path, [('x-request-id', rid)] + headers)
        env.check('%s: an answer' % path, h.pump(lambda h: h.ended(sid)))
        status, fields, body, reset = h.answer(sid)
        # The harness keeps HTTP/1.1's Date (the clock) apart, in r.date.
        h1 = [(n.lower(), v) for n, v in r.headers
              if n.lower() not in ('content-length', 'transfer-encoding', 'connection',
                                   'keep-alive')]
        h2f = [(n, v) for n, v in fields if n not in (':status', 'content-length', 'date')]
        env.eq('%s: status, body' % path, (status, body, reset), (r.status, r.body, None))
        env.eq('%s: the fields of the HTTP/1.1 answer' % path, h2f, h1)
        env.eq('%s: one date, first, as HTTP/1.1 has one' % path,
               ([n for n, _ in fields].count('date'), fields[1][0], r.date is not None),
               (1, 'date', True))
        env.eq('%s: the length' % path, dict(fields).get('content-length'),
               str(len(r.body)))
        want = {'etag': 'W/"v1"' if path.startswith('/ops/') else '"v1"',
                'x-request-id': rid, 'x-echo': 't-1' if path.startswith('/ops/') else None,
                'server': None if path.startswith('/ops/') else 'app/1'}
        env.eq('%s: the fields the rules make' % path,
               {n: dict(h2f).get(n) for n in want}, want)
        if path.startswith('/ops/'):
            # The upstream's, ours for gzip unless it said so already, CORS's.
            env.eq('%s: one Vary names Accept-Encoding' % path,
                   [v for n, v in h2f if n == 'vary'],
                   ['Origin, Accept-Encoding', 'Origin'] if path == '/ops/merged' else
                   ['Origin', 'Accept-Encoding', 'Origin'])
    h.close()


@T.case
def uploads_byte_for_byte(env):
    up = env.scripted(default=answer(echo))
    # The scripted upstream reads 10 MB of chunks in Python: slow on a loaded machine.
    gw = h2_daemon(env, h2_conf(up.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '120s', 'shutdown_grace': '5s'}))
    url = 'http://127.0.0.1:%d/up' % gw.port
    data = os.urandom(10 * 1024 * 1024)
    path = os.path.join(env.tmp, 'ten')
    with open(path, 'wb') as f:
        f.write(data)
    body, tail, rc = curl(env, '--data-binary', '@' + path, url)
    env.eq('10 MB with content-length', (tail, rc), ('200 2', 0))
    env.eq('upstream: the body byte for byte, with its length',
           (up.requests[-1].framing, up.requests[-1].body == data),
           ('length', True))
    body, tail, rc = curl(env, '-T', path, '-X', 'POST', '-H', 'content-length:', url)
    r = env.run(['sh', '-c', 'cat %s | curl -sS --http2-prior-knowledge -T - -X POST %s -o '
                 '/dev/null -w "%%{http_code} %%{http_version}"' % (path, url)], timeout=60)
    env.eq('10 MB without a length', r.stdout, b'200 2')
    env.eq('upstream: chunked, byte for byte', (up.requests[-1].framing,
                                                up.requests[-1].body == data),
           ('chunked', True))


@T.case
def a_body_without_a_length_is_its_payload(env):
    """DATA without a content-length reaches the request as its payload, ended by
    END_STREAM, even one that comes alone after a pause: a route chosen by a body field,
    request ops, a body kept for another try, a body streamed on."""
    up = env.scripted(default=answer(echo))
    gw = h2_daemon(env, h2_conf(up.address, routes=[
        {'name': 'typed', 'match': {'path': '/typed', 'json': {'field': 'type', 'equals': 'a'}},
         'upstream': 'app'},
        {'name': 'ops', 'match': {'path': '/ops'}, 'upstream': 'app',
         'request': [{'wrap': 'r'}]},
        {'name': 'all', 'upstream': 'app'}]))
    h = H2(gw.port)
    json_ct = [('content-type', 'application/json')]

    def send(path, pieces, method='POST'):
        sid = h.request(path, json_ct, method=method, end=False)
        for p in pieces:
            h.conn.send_data(sid, p)
            h.flush()
            time.sleep(0.05)
        h.conn.end_stream(sid)
        h.flush()
        env.check('%s %s: an answer' % (method, path), h.pump(lambda h: h.ended(sid)))
        return h.answer(sid)

    status, _, body, _ = send('/typed', [b'{"type":', b'"a","n":1}'])
    req = up.requests[-1]
    env.eq('the route its field chose, once END_STREAM came alone',
           (status, json.loads(body)['target'], req.framing, req.body),
           (200, '/typed', 'chunked', b'{"type":"a","n":1}'))
    status, _, _, _ = send('/typed', [b'{"type":"b"}'])
    env.eq('no match: the next route', (status, up.requests[-1].target,
                                        up.requests[-1].body), (200, '/typed', b'{"type":"b"}'))
    status, _, _, _ = send('/ops', [b'{"a":', b'1}'])
    req = up.requests[-1]
    env.eq('request ops: the whole payload, sent with its length',
           (status, req.framing, req.body), (200, 'length', b'{"r":{"a":1}}'))
    status, _, _, _ = send('/put', [b'hello ', b'world'], method='PUT')
    req = up.requests[-1]
    env.eq('kept for another try: sent with its length',
           (status, req.framing, req.all('Content-Length'), req.body),
           (200, 'length', ['11'], b'hello world'))
    h.close()


@T.case
def every_route_kind(env):
    demo = env.demo()
    up = env.scripted(default=answer(lambda req: http_response(200, b'{"a":1}')))
    conf = h2_conf(demo.address, routes=[
        {'name': 'agg', 'match': {'path': '/bff'},
         'backends': {'one': {'upstream': 'other', 'path': '/x'},
                      'two': {'upstream': 'other', 'path': '/y'}}},
        {'name': 'rpc', 'match': {'path': '/rpc'},
         'jsonrpc': {'methods': [{'prefix': 'eth_', 'upstream': 'other'}]}},
        {'name': 'all', 'upstream': 'app'}])
    conf['upstreams']['other'] = {'servers': [up.address]}
    gw = h2_daemon(env, conf)
    url = 'http://127.0.0.1:%d' % gw.port
    c = env.client(gw.port)
    body, tail, _ = curl(env, url + '/bff')
    r = c.request('GET', '/bff', [('Host', 'h')])
    env.eq('aggregated: the bytes HTTP/1.1 gets', (body, tail), (r.body, '200 2'))
    env.eq('which are the merge', body, b'{"one":{"a":1},"two":{"a":1}}')
    batch = (b'[{"jsonrpc":"2.0","id":1,"method":"eth_x"},'
             b'{"jsonrpc":"2.0","id":2,"method":"nope"}]')
    body, tail, _ = curl(env, '-H', 'content-type: application/json', '--data-binary',
                         batch, url + '/rpc')
    r = c.request('POST', '/rpc', [('Host', 'h'), ('Content-Type', 'application/json'),
                                   ('Content-Length', str(len(batch)))], batch)
    env.eq('a JSON-RPC batch: the bytes HTTP/1.1 gets', (body, tail), (r.body, '200 2'))
    env.check('with the gateway\'s -32601 for the unknown method', b'-32601' in body, body)
    body, tail, _ = curl(env, url + '/bytes/3000000')
    env.eq('3 MB from the demo upstream', (len(body), tail), (3000000, '200 2'))
    body, tail, _ = curl(env, url + '/chunked/3000000')
    env.eq('3 MB chunked upstream: de-chunked into DATA', (len(body), tail), (3000000, '200 2'))
    body, tail, _ = curl(env, '-I', url + '/bytes/100')
    env.eq('HEAD: the head only', (tail, b'content-length: 100' in body.lower()), ('200 2', True))

    dead = h2_daemon(env, h2_conf('127.0.0.1:%d' % free_port()))
    h = H2(dead.port)
    sid = h.request('/x', [('x-request-id', 'e-1')])
    h.pump(lambda h: h.ended(sid))
    status, headers, body, _ = h.answer(sid)
    env.eq('a gateway error: its JSON, its length',
           (status, body, dict(headers).get('content-length')),
           (502, gateway_error_body(502, 'upstream_unavailable',
                                    'connect to upstream app refused', 'e-1'),
            str(len(gateway_error_body(502, 'upstream_unavailable',
                                       'connect to upstream app refused', 'e-1')))))
    sid = h.request('/y', [('x-request-id', 'e-2')])
    env.check('the connection goes on after an error', h.pump(lambda h: h.ended(sid)))


@T.case
def tls_alpn(env):
    demo = env.demo()
    gw = h2_daemon(env, h2_conf(demo.address), tls=True)
    r = env.run(['curl', '-sSk', '--http2', '-o', '/dev/null', '-w', '%{http_version}',
                 'https://127.0.0.1:%d/api/orders/1' % gw.port])
    env.eq('curl --http2 over TLS negotiates h2', r.stdout, b'2')
    r = env.run(['curl', '-sSk', '--http1.1', '-o', '/dev/null', '-w', '%{http_version}',
                 'https://127.0.0.1:%d/api/orders/1' % gw.port])
    env.eq('and HTTP/1.1 when asked', r.stdout, b'1.1')
    r = env.run(['nghttp', '-n', '-s', 'https://127.0.0.1:%d/api/orders/1' % gw.port])
    env.eq('nghttp over TLS', r.returncode, 0)


@T.case
def h2load_one_connection(env):
    demo = env.demo()
    gw = h2_daemon(env, h2_conf(demo.address))
    r = env.run(['h2load', '-n', '1000', '-c', '1', '-m', '100',
                 'http://127.0.0.1:%d/api/orders/1' % gw.port], timeout=120)
    out = r.stdout.decode()
    env.check('h2load -n 1000 -c 1 -m 100: 1,000 succeeded',
              'requests: 1000 total, 1000 started, 1000 done, 1000 succeeded' in out, out)


@T.case
def concurrent_streams_use_several_upstream_connections(env):
    up = env.scripted(default=answer(lambda req: http_response(200, b'{}'), delay=0.5))
    gw = h2_daemon(env, h2_conf(up.address))
    h = H2(gw.port)
    sids = [h.request('/s%d' % i) for i in range(8)]
    t0 = time.time()
    env.check('8 answers', h.pump(lambda h: all(h.ended(s) for s in sids)))
    env.check('at once, not one after the other (%.2fs)' % (time.time() - t0),
              time.time() - t0 < 3.5)
    env.check('over several upstream connections',
              len(set(r.conn for r in up.requests)) >= 4, [r.conn for r in up.requests])


@T.case
def window_never_opened(env):
    """A stream whose window stays shut: the daemon holds about FLOW_HIGH of its answer and
    stops reading the upstream; another stream of the connection is answered meanwhile; after
    timeouts.client_body without progress the stream is reset."""
    demo = env.demo()
    conf = h2_conf(demo.address)
    conf['timeouts'] = dict(conf['timeouts'], client_body='4s')
    gw = h2_daemon(env, conf)
    idle = gw.rss()['VmRSS']
    h = H2(gw.port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    h.pump(lambda h: any(isinstance(e, h2.events.SettingsAcknowledged) for e in h.events), 5)
    big = h.request('/bytes/268435456')
    time.sleep(2)
    small = h.request('/api/orders/1')
    h.conn.increment_flow_control_window(1 << 20, stream_id=small)
    h.flush()
    env.check('the other stream is answered', h.pump(lambda h: h.ended(small), window=False),
              h.events[-5:])
    status, _, body, _ = h.answer(small)
    env.eq('its answer', (status, len(body) > 0), (200, True))
    time.sleep(1)
    grown = gw.rss()['VmRSS'] - idle
    env.check('the unread 256 MB answer costs < 64 MB (%d KB)' % grown, grown < 64 * 1024)
    env.eq('not a byte of it sent', len(h.answer(big)[2]), 0)
    t0 = time.time()
    env.check('the stuck stream is reset after timeouts.client_body',
              h.pump(lambda h: h.ended(big), timeout=8, window=False))
    env.eq('with CANCEL, about 4 s after its answer stopped (%.1fs later)' % (time.time() - t0),
           (h.answer(big)[3], time.time() - t0 < 4), (h2.errors.ErrorCodes.CANCEL, True))
    sid = h.request('/api/orders/1')
    h.conn.increment_flow_control_window(1 << 20, stream_id=sid)
    h.flush()
    env.check('and the connection goes on', h.pump(lambda h: h.ended(sid), window=False))
    h.close()


@T.case
def rapid_reset(env):
    """CVE-2023-44487: streams opened and reset at once. nghttp2's limit ends the
    connection; the upstream sees a bounded number of them; the daemon serves on."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{}'), delay=0.2))
    gw = h2_daemon(env, h2_conf(up.address))
    h = H2(gw.port)
    sent = 0
    try:
        for i in range(20000):
            sid = h.request('/r')
            h.conn.reset_stream(sid)
            sent += 1
            if i % 100 == 99:
                h.flush()
        h.flush()
    except (ConnectionError, OSError):
        pass
    h.pump(lambda h: h.closed or h.goaway() is not None, timeout=10)
    g = h.goaway()
    env.check('the connection ends with GOAWAY (%s) or a close' % (g,), g is not None or
              h.closed)
    time.sleep(0.5)
    env.check('at most 1,000 of %d reached the upstream (%d)' % (sent, len(up.requests)),
              len(up.requests) <= 1000)
    body, tail, _ = curl(env, 'http://127.0.0.1:%d/after' % gw.port)
    env.eq('the daemon serves on', tail, '200 2')


@T.case
def hpack_bomb_and_continuation_flood(env):
    demo = env.demo()
    gw = h2_daemon(env, h2_conf(demo.address, limits={'max_header': '16k'}))
    h = H2(gw.port)
    # One 4 KB field in the dynamic table, then referred to 100 times: 400 KB decoded.
    sid = h.request('/api/orders/1', [('x-big', 'a' * 4000)] * 100)
    h.pump(lambda h: h.ended(sid))
    status, _, body, reset = h.answer(sid)
    env.check('fields over limits.max_header: 431 or the stream reset (%s, %s)' %
              (status, reset), status == 431 or reset is not None)
    sid = h.request('/api/orders/1')
    env.check('the next stream is served', h.pump(lambda h: h.ended(sid)))
    env.eq('its answer', h.answer(sid)[0], 200)
    h.close()

    # A header block that never ends: HEADERS without END_HEADERS, then CONTINUATIONs.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    s.settimeout(IO_TIMEOUT)
    s.connect(('127.0.0.1', gw.port))
    s.sendall(b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\x00\x00\x00\x04\x00\x00\x00\x00\x00')
    block = b'\x40\x05x-aaa\x03bbb' * 100
    frame = lambda t, f, sid, p: len(p).to_bytes(3, 'big') + bytes([t, f]) + \
        sid.to_bytes(4, 'big') + p
    sent, closed = 0, False
    try:
        s.sendall(frame(1, 0, 1, b'\x82\x86\x84' + block))
        while sent < (8 << 20):
            s.sendall(frame(9, 0, 1, block))
            sent += len(block) + 9
    except (ConnectionError, OSError):
        closed = True
    # What was sent counts the socket buffers both ways too: nghttp2 stops at its eighth
    # CONTINUATION frame, about 10 KB into the header block.
    env.check('a CONTINUATION flood is cut (%d bytes sent, socket buffers included)' % sent,
              closed and sent < (1 << 20))
    s.close()
    body, tail, _ = curl(env, 'http://127.0.0.1:%d/api/orders/1' % gw.port)
    env.eq('the daemon serves on', tail, '200 2')


@T.case
def floods_and_bad_frames(env):
    demo = env.demo()
    gw = h2_daemon(env, h2_conf(demo.address))
    # PINGs never read: the acks we owe are bounded; the connection is closed.
    s = socket.create_connection(('127.0.0.1', gw.port), timeout=IO_TIMEOUT)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\x00\x00\x00\x04\x00\x00\x00\x00\x00')
    ping = b'\x00\x00\x08\x06\x00\x00\x00\x00\x00' + b'12345678'
    closed = False
    idle = gw.rss()['VmRSS']
    try:
        for _ in range(200):
            s.sendall(ping * 1000)
    except (ConnectionError, OSError, socket.timeout):
        closed = True
    env.check('a PING flood never read: the connection closed', closed)
    env.check('the daemon held little for it', gw.rss()['VmRSS'] - idle < 32 * 1024)
    s.close()
    # A frame larger than SETTINGS_MAX_FRAME_SIZE: GOAWAY FRAME_SIZE_ERROR.
    h = H2(gw.port)
    h.sock.sendall(b'\x00\x80\x00\x00\x00\x00\x00\x00\x01' + b'\x00' * 32768)
    h.pump(lambda h: h.closed or h.goaway() is not None, timeout=5)
    g = h.goaway()
    env.eq('an oversized frame: GOAWAY FRAME_SIZE_ERROR', g.error_code if g else None,
           h2.errors.ErrorCodes.FRAME_SIZE_ERROR)
    h.close()
    body, tail, _ = curl(env, 'http://127.0.0.1:%d/api/orders/1' % gw.port)
    env.eq('the daemon serves on', tail, '200 2')


@T.case
def sigterm_goaway(env):
    """nghttp sees the GOAWAY (python3-h2 takes a GOAWAY for the connection's end)."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{"slow":1}'), delay=1))
    gw = h2_daemon(env, h2_conf(up.address))
    p = subprocess.Popen(['nghttp', '-v', 'http://127.0.0.1:%d/slow' % gw.port],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    env.check('the request reached the upstream', wait_until(lambda: up.requests, 5))
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    out = p.communicate(timeout=20)[0].decode('utf-8', 'replace')
    g = re.search(r'recv GOAWAY frame .*\n.*last_stream_id=(\d+), error_code=NO_ERROR', out)
    a = re.search(r'recv \(stream_id=(\d+)\) :status: 200', out)
    env.check('GOAWAY with NO_ERROR, before the answer', g and a and g.start() < a.start(),
              out[-1500:])
    env.eq('its last stream: the one in flight', g and a and g.group(1) == a.group(1), True)
    env.check('which finishes with its answer', '{"slow":1}' in out, out[-1500:])
    gw.proc.wait(10)
    env.eq('exit 0', gw.proc.returncode, 0)


@T.case
def sighup_goaway(env):
    """A reload tells HTTP/2 clients to go: GOAWAY, the stream in flight finishes on the old
    configuration, the next connection gets the new one."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{"slow":1}'), delay=1))
    gw = h2_daemon(env, h2_conf(up.address))
    p = subprocess.Popen(['nghttp', '-v', 'http://127.0.0.1:%d/slow' % gw.port],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    env.check('the request reached the upstream', wait_until(lambda: up.requests, 5))
    conf = h2_conf(up.address, routes=[{'name': 'new', 'upstream': 'app',
                                        'response_headers': {'set': {'X-Conf': 'new'}}}])
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port, 'http2': True}]
    gw.write_config(conf)
    gw.signal(signal.SIGHUP)
    out = p.communicate(timeout=20)[0].decode('utf-8', 'replace')
    g = re.search(r'recv GOAWAY frame .*\n.*last_stream_id=(\d+), error_code=NO_ERROR', out)
    a = re.search(r'recv \(stream_id=(\d+)\) :status: 200', out)
    env.check('GOAWAY with NO_ERROR naming the stream in flight', g and a and
              g.group(1) == a.group(1) and g.start() < a.start(), out[-1500:])
    env.check('which finishes on the old configuration', '{"slow":1}' in out and
              'x-conf' not in out, out[-1500:])
    env.check('the reload is done', gw.wait_log('configuration reloaded|reloaded'), gw.log())
    r = env.run(['curl', '-sS', '--http2-prior-knowledge', '-D', '-', '-o', '/dev/null',
                 'http://127.0.0.1:%d/next' % gw.port], timeout=30)
    env.check('a new connection gets the new configuration',
              b'x-conf: new' in r.stdout.lower(), r.stdout)
    env.check('the daemon serves on', gw.alive())


@T.case
def metrics(env):
    up = env.scripted(default=answer(lambda req: http_response(200, b'{}'), delay=0.3))
    admin = free_port()
    gw = h2_daemon(env, h2_conf(up.address, admin={'listen': '127.0.0.1:%d' % admin}))
    h = H2(gw.port)
    a, b = h.request('/a'), h.request('/b')
    h.pump(lambda h: h.ended(a) and h.ended(b))
    c = h.request('/c')
    h.conn.reset_stream(c)
    h.flush()
    env.check('the reset stream\'s request reached the upstream', wait_until(
        lambda: len(up.requests) == 3, 5))
    h.sock.sendall(b'\x00\x80\x00\x00\x00\x00\x00\x00\x01' + b'\x00' * 32768)
    h.pump(lambda h: h.closed or h.goaway() is not None, timeout=5)
    r = env.client(gw.port).request('GET', '/h1', [('Host', 'h')])
    env.eq('an HTTP/1.1 request beside', r.status, 200)
    text = env.client(admin).request('GET', '/metrics', [('Host', 'h')]).body.decode()
    got = re.findall(r'^(jsongate_http2_\w+(?:\{[^}]*\})?) (\d+)$', text, re.M)
    env.eq('the HTTP/2 families, exactly', got, [
        ('jsongate_http2_connections_total', '1'),
        ('jsongate_http2_streams_total', '3'),
        ('jsongate_http2_resets_total{direction="sent"}', '0'),
        ('jsongate_http2_resets_total{direction="received"}', '1'),
        ('jsongate_http2_goaways_total{direction="sent"}', '1'),
        ('jsongate_http2_goaways_total{direction="received"}', '0')])


@T.case
def limits_on_the_wire(env):
    """http2.max_concurrent_streams, stream_window and connection_window are what the client
    is told (nghttp2 refuses streams over the limit itself)."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{}'), delay=1))
    gw = h2_daemon(env, h2_conf(up.address, http2={
        'max_concurrent_streams': 2, 'stream_window': '100k', 'connection_window': '300k'}))
    h = H2(gw.port)
    env.check('SETTINGS received', h.pump(lambda h: any(
        isinstance(e, h2.events.RemoteSettingsChanged) for e in h.events), 5))
    got = {}
    for e in h.events:
        if isinstance(e, h2.events.RemoteSettingsChanged):
            got.update({k: v.new_value for k, v in e.changed_settings.items()})
    env.eq('max_concurrent_streams and the stream window', (
        got.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS),
        got.get(h2.settings.SettingCodes.INITIAL_WINDOW_SIZE)), (2, 100 * 1024))
    env.eq('the connection window', h.conn.outbound_flow_control_window, 300 * 1024)
    a, b = h.request('/a'), h.request('/b')
    env.check('two streams at once', h.pump(lambda h: h.ended(a) and h.ended(b), 10))
    env.eq('both answered', (h.answer(a)[0], h.answer(b)[0]), (200, 200))


@T.case
def idle_connection_closed(env):
    demo = env.demo()
    conf = h2_conf(demo.address)
    conf['timeouts'] = dict(conf['timeouts'], keepalive='1s')
    gw = h2_daemon(env, conf)
    h = H2(gw.port)
    sid = h.request('/api/orders/1')
    h.pump(lambda h: h.ended(sid))
    t0 = time.time()
    h.pump(lambda h: h.closed, timeout=5)
    env.check('closed after timeouts.keepalive (%.1fs)' % (time.time() - t0),
              h.closed and 0.8 < time.time() - t0 < 3)


T.run()
