"""Message framing: Content-Length and chunked on both sides, HTTP/1.0
clients, close-delimited upstream bodies, bodiless statuses, 100-continue."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

BINARY = bytes(range(256)) * 20 + b'\r\n0\r\n\r\n'     # bytes that look like framing


def chunked(*pieces, ext=b''):
    out = b''
    for p in pieces:
        out += b'%x%s\r\n%s\r\n' % (len(p), ext, p)
    return out + b'0\r\n\r\n'


def gateway(env, steps=(), default=None):
    up = env.scripted(steps, default or answer(http_response(200, b'{"ok":1}')))
    gw = env.daemon(upstream_config(up.address))
    return up, gw, env.client(gw.port)


@T.case
def content_length_request_body(env):
    up, gw, c = gateway(env)
    r = c.request('POST', '/cl', [('Host', 'a'), ('Content-Type', 'application/octet-stream')], BINARY)
    env.eq('status', r.status, 200)
    req = up.requests[0]
    env.eq('upstream framing', (req.framing, req.all('Content-Length')), ('length', [str(len(BINARY))]))
    env.eq('upstream body identical', req.body, BINARY)
    env.check('no Transfer-Encoding upstream', 'transfer-encoding' not in req.names(), req.head)


@T.case
def chunked_request_body(env):
    up, gw, c = gateway(env)
    pieces = [b'abc', BINARY, b'x' * 100000, b'!']
    c.send(build_request('PUT', '/ch', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
           chunked(*pieces))
    r = c.read_response('PUT')
    env.eq('status', r.status, 200)
    req = up.requests[0]
    env.eq('upstream framing is chunked', (req.framing, req.all('Transfer-Encoding')),
           ('chunked', ['chunked']))
    env.check('no Content-Length upstream', 'content-length' not in req.names(), req.head)
    env.eq('upstream body identical', req.body, b''.join(pieces))

    c.send(build_request('POST', '/ext', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
           chunked(b'hello', b'world', ext=b';name=value'))
    r = c.read_response('POST')
    env.eq('chunk extensions accepted', (r.status, up.requests[1].body), (200, b'helloworld'))

    c.send(build_request('POST', '/trailer', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
           b'4;ext=1\r\ndata\r\n0;last\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\n')
    r = c.read_response('POST')
    env.eq('a trailer section is consumed', (r.status, up.requests[2].body), (200, b'data'))
    raw = up.requests[2].raw
    env.eq('the upstream gets the payload only: extensions and trailers discarded',
           raw[raw.index(b'\r\n\r\n') + 4:], b'4\r\ndata\r\n0\r\n\r\n')
    r = c.request('GET', '/after', [('Host', 'a')])
    env.eq('the connection stays in sync after the trailer', (r.status, up.requests[3].target),
           (200, '/after'))


@T.case
def pipelined_chunked_bodies(env):
    """Chunked bodies pipelined in one write, with extensions, trailers and payload that
    looks like framing, then the same bytes one at a time: each request gets its payload
    only (kept and sent with its length, or streamed in chunks of our own), and what
    follows a body's last chunk is the next request."""
    put = (build_request('PUT', '/kept', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
           b'3;a=b\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n')
    post = (build_request('POST', '/streamed', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
            b'5;x\r\n0\r\n\r\n\r\n1\r\n!\r\n0;end\r\nX-T: 2\r\nX-U: 3\r\n\r\n')
    get = build_request('GET', '/after', [('Host', 'a')])
    want = [('PUT', '/kept', 'length', b'abcde'), ('POST', '/streamed', 'chunked', b'0\r\n\r\n!'),
            ('GET', '/after', 'none', b'')]
    for how in ('one write', 'byte by byte'):
        up, gw, c = gateway(env)
        if how == 'one write':
            c.send(put + post + get)
        else:
            for i in range(len(put + post + get)):
                c.send((put + post + get)[i:i + 1])
        got = [c.read_response(m).status for m in ('PUT', 'POST', 'GET')]
        env.eq('%s: three answers' % how, got, [200, 200, 200])
        env.eq('%s: each request upstream with its payload only' % how,
               [(q.method, q.target, q.framing, q.body) for q in up.requests], want)
        env.eq('%s: the kept body\'s length, no trailer' % how,
               (up.requests[0].all('Content-Length'), 'x-t' in up.requests[0].names()),
               (['5'], False))
        if how == 'one write':
            raw = up.requests[1].raw
            env.eq('the streamed body in chunks of our own, one per chunk that came',
                   raw[raw.index(b'\r\n\r\n') + 4:], b'5\r\n0\r\n\r\n\r\n1\r\n!\r\n0\r\n\r\n')
        env.eq('%s: nothing else' % how, up.errors, [])


@T.case
def a_body_cut_short_leaves_nothing_behind(env):
    """A client that closes halfway through a chunked PUT (its body kept for another try:
    PUT is idempotent) leaves none of it to the requests that come after on the same worker:
    each goes upstream with its own body only."""
    up = env.scripted([], answer(http_response(200, b'{"ok":1}')), truncated_ok=True)
    gw = env.daemon(upstream_config(up.address))
    cut = env.client(gw.port)
    cut.send(build_request('PUT', '/cut', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
             b'5\r\n{"a":\r\n2\r')
    env.require('the PUT went upstream', wait_until(lambda: up.connections == 1, 5))
    cut.close()
    env.require('its upstream connection closed with it',
                wait_until(lambda: up.open_connections == 0, 5))
    c = env.client(gw.port)
    r = c.request('GET', '/next', [('Host', 'a')])
    env.eq('the GET after it', (r.status, r.body), (200, b'{"ok":1}'))
    c.send(build_request('POST', '/after', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]) +
           chunked(b'hello'))
    r = c.read_response('POST')
    env.eq('the chunked POST after it', (r.status, r.body), (200, b'{"ok":1}'))
    env.eq('the upstream got each request with its own body only',
           [(q.method, q.target, q.framing, q.body) for q in up.requests],
           [('GET', '/next', 'none', b''), ('POST', '/after', 'chunked', b'hello')])
    env.eq('and nothing else', up.errors, [])


@T.case
def chunked_response_to_http11(env):
    pieces = [b'{"part":1,', BINARY, b'"end":true}']
    raw = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
           + chunked(*pieces))
    up, gw, c = gateway(env, [answer(raw)])
    r = c.request('GET', '/chunked', [('Host', 'a')])
    env.eq('forwarded chunked', (r.status, r.framing, r.complete), (200, 'chunked', True))
    env.check('no Content-Length with chunked', 'content-length' not in r.names(), r.head)
    env.eq('payload identical', r.body, b''.join(pieces))
    r = c.request('GET', '/next', [('Host', 'a')])
    env.eq('keep-alive after a chunked response', (r.status, r.body), (200, b'{"ok":1}'))


@T.case
def chunked_response_to_http10(env):
    pieces = [b'{"a":', b'1}', BINARY]
    raw = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
           + chunked(*pieces))
    up, gw, c = gateway(env, [answer(raw), answer(raw)])
    r = c.request('GET', '/ten', [('Host', 'a')], version='HTTP/1.0')
    env.eq('status line is HTTP/1.1', r.head.split(b'\r\n')[0], b'HTTP/1.1 200 OK')
    env.eq('de-chunked and close-delimited', (r.framing, r.complete), ('close', True))
    env.check('no Transfer-Encoding to HTTP/1.0', 'transfer-encoding' not in r.names(), r.head)
    env.eq('payload identical', r.body, b''.join(pieces))
    env.eq('request upstream is HTTP/1.1', up.requests[0].head.split(b'\r\n')[0], b'GET /ten HTTP/1.1')

    c2 = env.client(gw.port)
    r = c2.request('GET', '/ten-ka', [('Host', 'a'), ('Connection', 'keep-alive')], version='HTTP/1.0')
    env.eq('HTTP/1.0 keep-alive client still gets a close-delimited body', (r.framing, r.body),
           ('close', b''.join(pieces)))
    env.check('and no Connection: keep-alive promise',
              all('keep-alive' not in v.lower() for v in r.all('Connection')), r.head)


@T.case
def http10_keepalive_only_when_asked(env):
    up, gw, c = gateway(env)
    r = c.request('GET', '/a', [('Host', 'a'), ('Connection', 'keep-alive')], version='HTTP/1.0')
    env.eq('status line is HTTP/1.1', r.head.split(b'\r\n')[0], b'HTTP/1.1 200 OK')
    env.eq('Connection: keep-alive echoed', r.all('Connection'), ['keep-alive'])
    env.eq('Content-Length kept', r.header('Content-Length'), '8')
    r = c.request('GET', '/b', [('Host', 'a'), ('Connection', 'keep-alive')], version='HTTP/1.0')
    env.eq('second request on the same connection', (r.status, up.requests[-1].target), (200, '/b'))
    r = c.request('GET', '/c', [('Host', 'a')], version='HTTP/1.0')
    env.eq('without keep-alive: answered', (r.status, r.body), (200, b'{"ok":1}'))
    env.check('then the connection is closed', c.wait_closed(5), 'still open after 5s')

    c2 = env.client(gw.port)
    r = c2.request('GET', '/d', [], version='HTTP/1.0')
    env.eq('HTTP/1.0 without Host is served', r.status, 200)
    env.check('and closed', c2.wait_closed(5), 'still open after 5s')

    c3 = env.client(gw.port)
    r = c3.request('GET', '/e', [('Host', 'a'), ('Connection', 'close')])
    env.eq('HTTP/1.1 Connection: close: answered', r.status, 200)
    env.check('HTTP/1.1 Connection: close: closed', c3.wait_closed(5), 'still open after 5s')


@T.case
def close_delimited_upstream_body(env):
    raw = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n' + b'{"big":"' + b'z' * 70000 + b'"}'
    up, gw, c = gateway(env, [answer(raw, close=True), answer(raw, close=True)])
    r = c.request('GET', '/eof', [('Host', 'a')])
    env.eq('HTTP/1.1 client: complete payload', (r.status, r.complete, r.body), (200, True, raw[raw.index(b'\r\n\r\n') + 4:]))
    env.check('framed with chunked or by closing', r.framing in ('chunked', 'close'), r.framing)
    c2 = env.client(gw.port)
    r = c2.request('GET', '/eof', [('Host', 'a')], version='HTTP/1.0')
    env.eq('HTTP/1.0 client: close-delimited payload', (r.framing, r.body),
           ('close', raw[raw.index(b'\r\n\r\n') + 4:]))


@T.case
def bodiless_statuses(env):
    steps = [answer(b'HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n'),
             answer(b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n'),
             answer(http_response(200, b'{"after":true}'))]
    up, gw, c = gateway(env, steps)
    r = c.request('DELETE', '/x', [('Host', 'a')])
    env.eq('204 passed with no body', (r.status, r.body, r.header('X-A')), (204, b'', '1'))
    env.check('204 without Content-Length or chunked',
              'content-length' not in r.names() and 'transfer-encoding' not in r.names(), r.head)
    r = c.request('GET', '/x', [('Host', 'a'), ('If-None-Match', '"v1"')])
    env.eq('304 passed', (r.status, r.header('ETag')), (304, '"v1"'))
    env.check('304 without Transfer-Encoding', 'transfer-encoding' not in r.names(), r.head)
    r = c.request('GET', '/y', [('Host', 'a')])
    env.eq('connection in sync afterwards', r.body, b'{"after":true}')


@T.case
def expect_100_continue(env):
    up, gw, c = gateway(env)
    body = BINARY * 10
    c.send(build_request('POST', '/upload', [('Host', 'a'), ('Expect', '100-continue'),
                                             ('Content-Length', str(len(body)))]))
    # Like curl: wait a while for the interim response, then send anyway.
    first = None
    try:
        first = c.read_response('POST', timeout=3, skip_interim=False)
    except socket.timeout:
        pass
    c.send(body)
    final = first if first is not None and first.status >= 200 else c.read_response('POST')
    env.eq('the exchange completes with 200', final.status if final else None, 200)
    env.eq('upstream got the body identical', up.requests[0].body if up.requests else None, body)

    demo = env.demo()
    gw2 = env.daemon(upstream_config(demo.address))
    data_path = os.path.join(env.tmp, 'upload.bin')
    data = (pattern_block() * 48)[:3000001]
    with open(data_path, 'wb') as f:
        f.write(data)
    p = env.run(['curl', '-sS', '-H', 'Expect: 100-continue',
                 '-X', 'POST', '--data-binary', '@' + data_path,
                 'http://127.0.0.1:%d/sink' % gw2.port])
    env.eq('curl upload with Expect through to the demo sink',
           (p.returncode, p.stdout), (0, ('{"bytes":%d,"crc32":%d}' % (len(data), zlib.crc32(data))).encode()))


T.run()
