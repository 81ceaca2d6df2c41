"""Errors the gateway produces: exact bytes of the JSON error responses for
no route, malformed requests (400), transfer codings other than chunked
(501), unsupported versions (505), upstreams refusing, closing, answering
garbage or too slowly (502, 504)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

# Each is sent alone on a fresh connection; all must get 400 and a close.
MALFORMED = [
    ('Content-Length with Transfer-Encoding',
     b'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'),
    ('Transfer-Encoding with Content-Length',
     b'POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n'),
    ('conflicting Content-Length headers',
     b'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!'),
    ('conflicting Content-Length list',
     b'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!'),
    ('non-numeric Content-Length',
     b'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n'),
    ('negative Content-Length',
     b'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n'),
    ('obs-fold header continuation',
     b'GET /x HTTP/1.1\r\nHost: a\r\nX-Long: one\r\n  two\r\n\r\n'),
    ('bare LF in the request line',
     b'GET /x HTTP/1.1\nHost: a\r\n\r\n'),
    ('bare LF before the request line',
     b'\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n'),
    ('CR without LF before the request line',
     b'\r\rGET /x HTTP/1.1\r\nHost: a\r\n\r\n'),
    ('garbage request line',
     b'HELLO\r\n\r\n'),
    ('space before the colon',
     b'GET /x HTTP/1.1\r\nHost : a\r\n\r\n'),
    ('header line without a colon',
     b'GET /x HTTP/1.1\r\nHost: a\r\nNoColonHere\r\n\r\n'),
]

# The head is valid, so it may be forwarded before the body turns out bad.
BAD_CHUNKS = [
    ('invalid chunk size', b'zz\r\nhello\r\n0\r\n\r\n'),
    ('chunk size overflowing 64 bits', b'1ffffffffffffffff\r\nhello\r\n0\r\n\r\n'),
    ('chunk data not followed by CRLF', b'5\r\nhelloXX0\r\n\r\n'),
    ('chunk size followed by a space and no extension', b'5 \r\nhello\r\n0\r\n\r\n'),
]


def fail_everything(req):
    return 'request reached the upstream: %r' % req


@T.case
def no_route(env):
    up = env.scripted()
    routes = [{'name': 'api', 'match': {'path_prefix': '/api'}, 'upstream': 'app'}]
    gw = env.daemon(upstream_config(up.address, routes=routes))
    c = env.client(gw.port)
    r = c.request('GET', '/nothing/here?x=1', [('Host', 'a')])
    env.gateway_error('404 generated id', r, 404, 'no_route', 'no route matches the request', close=False)
    r = c.request('GET', '/nothing', [('Host', 'a'), ('X-Request-Id', 'client-id-1')])
    env.gateway_error('404 keeps the connection and the client id', r, 404, 'no_route',
                      'no route matches the request', close=False, request_id='client-id-1')
    r = c.request('POST', '/nothing', [('Host', 'a')], b'{"unread":"body"}')
    closes = r is not None and r.all('Connection') == ['close']
    env.gateway_error('404 for a request with a body (the body may be drained or not)', r, 404,
                      'no_route', 'no route matches the request', close=closes)
    if closes:
        env.check('404 with Connection: close, then closed', c.wait_closed(5), 'still open')
    else:
        r = c.request('GET', '/nothing', [('Host', 'a')])
        env.eq('404 kept alive: the body was drained, the next request is answered',
               r.status if r else None, 404)
    c = env.client(gw.port)
    r = c.request('GET', '/nothing', [('Host', 'a'), ('Connection', 'close')])
    env.gateway_error('404 when the client asked to close', r, 404, 'no_route',
                      'no route matches the request', close=True)
    env.check('then closed', c.wait_closed(5), 'still open')
    env.eq('nothing reached the upstream', up.requests, [])


@T.case
def malformed_requests(env):
    up = env.scripted()
    gw = env.daemon(upstream_config(up.address))
    for label, raw in MALFORMED:
        c = env.client(gw.port)
        c.send(raw)
        try:
            r = c.read_response()
        except (ProtocolError, socket.timeout) as e:
            env.check(label + ': a 400 response', False, repr(e))
            continue
        env.gateway_error(label, r, 400, 'bad_request', 'malformed request', close=True)
        env.check(label + ': connection closed', c.wait_closed(5), 'still open')
    env.eq('no malformed request reached the upstream', up.requests, [])


@T.case
def malformed_chunked_bodies(env):
    # The upstream may see a head, then a close.
    up = env.scripted(default=answer(http_response(200, b'{}')), truncated_ok=True)
    gw = env.daemon(upstream_config(up.address))
    for label, body in BAD_CHUNKS:
        c = env.client(gw.port)
        c.send(b'POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n' + body)
        try:
            r = c.read_response('POST')
        except (ProtocolError, socket.timeout) as e:
            env.check(label + ': a 400 response', False, repr(e))
            continue
        env.gateway_error(label, r, 400, 'bad_request', 'malformed request', close=True)
        env.check(label + ': connection closed', c.wait_closed(5), 'still open')
    env.eq('no complete request reached the upstream', up.requests, [])


@T.case
def transfer_codings_not_implemented(env):
    """A request Transfer-Encoding other than exactly chunked gets 501, as with nginx: any
    other coding would reach the upstream undecoded, announced as plain chunked."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address))
    body = b'5\r\nhello\r\n0\r\n\r\n'
    for te in ('gzip, chunked', 'foo, chunked', 'chunked, gzip, chunked', 'chunked, gzip',
               'identity', 'gzip', 'chunked;x=1', 'chunked, '):
        c = env.client(gw.port)
        c.send(b'POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: %s\r\n\r\n' % te.encode() + body)
        r = c.read_response('POST')
        env.gateway_error('Transfer-Encoding: %s' % te, r, 501, 'not_implemented',
                          'only the chunked transfer coding is implemented', close=True)
        env.check('Transfer-Encoding: %s: connection closed' % te, c.wait_closed(5), 'still open')
    c = env.client(gw.port)
    c.send(b'POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n'
           + body)
    r = c.read_response('POST')
    env.gateway_error('gzip and chunked on two lines', r, 501, 'not_implemented',
                      'only the chunked transfer coding is implemented', close=True)
    env.eq('none of them reached the upstream', up.requests, [])
    c = env.client(gw.port)
    c.send(b'POST /ok HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n' + body)
    r = c.read_response('POST')
    env.eq('CHUNKED in any case is chunked', (r.status, up.requests[0].framing, up.requests[0].body),
           (200, 'chunked', b'hello'))


@T.case
def unsupported_version(env):
    up = env.scripted()
    gw = env.daemon(upstream_config(up.address))
    for version in ('HTTP/2.0', 'HTTP/3.0'):
        c = env.client(gw.port)
        c.send(('GET /x %s\r\nHost: a\r\n\r\n' % version).encode())
        r = c.read_response()
        env.gateway_error(version + ' gets 505', r, 505, 'version_not_supported', None, close=True)
    env.eq('nothing reached the upstream', up.requests, [])


@T.case
def upstream_refused(env):
    port = free_port()
    gw = env.daemon(upstream_config('127.0.0.1:%d' % port))
    c = env.client(gw.port)
    for i in range(2):
        r = c.request('GET', '/x', [('Host', 'a'), ('X-Request-Id', 'refused-%d' % i)])
        env.gateway_error('refused, request %d on the same connection' % i, r, 502,
                          'upstream_unavailable', 'connect to upstream app refused',
                          close=False, request_id='refused-%d' % i)
    # HEAD: the head GET would get, Content-Length included, and no body.
    r = c.request('HEAD', '/x', [('Host', 'a'), ('X-Request-Id', 'refused-head')])
    get = c.request('GET', '/x', [('Host', 'a'), ('X-Request-Id', 'refused-head')])
    env.eq('refused HEAD: the error head GET gets, no body', (r.head, r.body), (get.head, b''))
    r = c.request('GET', '/x', [('Host', 'a'), ('X-Request-Id', 'after-head')])
    env.gateway_error('the connection is in step after the HEAD', r, 502, 'upstream_unavailable',
                      'connect to upstream app refused', close=False, request_id='after-head')


@T.case
def upstream_closes_before_answering(env):
    up = env.scripted([close_before_answer()])
    gw = env.daemon(upstream_config(up.address))
    c = env.client(gw.port)
    r = c.request('POST', '/x', [('Host', 'a')], b'{"a":1}')
    env.gateway_error('fresh connection closed without a byte', r, 502, 'upstream_unavailable',
                      'upstream app closed the connection before answering', close=False)
    env.eq('the POST was sent once', len(up.requests), 1)


@T.case
def upstream_invalid(env):
    cases = [('garbage status line', b'HELLO WORLD\r\n\r\n'),
             ('bad Content-Length', b'HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n'),
             ('obs-fold in the response', b'HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n'),
             ('status code out of range', b'HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n')]
    up = env.scripted([answer(raw, close=True) for _, raw in cases])
    gw = env.daemon(upstream_config(up.address))
    for label, _ in cases:
        c = env.client(gw.port)
        r = c.request('GET', '/x', [('Host', 'a')])
        env.gateway_error(label, r, 502, 'upstream_invalid',
                          'malformed response from upstream app', close=False)


@T.case
def upstream_content_length_with_chunked(env):
    # RFC 9112 6.3: an error, or forwarded with chunked winning and no Content-Length.
    raw = b'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'
    up = env.scripted([answer(raw, close=True)])
    gw = env.daemon(upstream_config(up.address))
    r = env.client(gw.port).request('GET', '/x', [('Host', 'a')])
    if r.status == 502:
        env.gateway_error('refused as invalid', r, 502, 'upstream_invalid',
                          'malformed response from upstream app', close=False)
    else:
        env.eq('or forwarded chunked without Content-Length',
               (r.status, r.framing, 'content-length' in r.names(), r.body, r.complete),
               (200, 'chunked', False, b'abc', True))


@T.case
def upstream_response_timeout(env):
    up = env.scripted([hang()])
    conf = upstream_config(up.address, timeouts={'upstream_connect': '2s', 'upstream_response': '1s',
                                                 'shutdown_grace': '2s'})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    start = time.monotonic()
    r = c.request('GET', '/slow', [('Host', 'a'), ('X-Request-Id', 'slow-1')])
    took = time.monotonic() - start
    env.gateway_error('no answer in time', r, 504, 'upstream_timeout',
                      'upstream app did not answer in time', close=False,
                      request_id='slow-1')
    env.check('504 after about upstream_response (1s)', 0.8 <= took <= 6 * SLOW, '%.2fs' % took)


@T.case
def route_timeouts_override_global_ones(env):
    # The global timeouts are longer than the client waits: only the route's can answer.
    up = env.scripted([], answer(http_response(200, b'{"late":true}'), delay=1))
    lst, fillers = blackhole()
    try:
        conf = upstream_config(up.address, timeouts={'upstream_connect': '60s',
                                                     'upstream_response': '60s',
                                                     'shutdown_grace': '2s'})
        conf['upstreams']['hole'] = {'servers': ['127.0.0.1:%d' % lst.getsockname()[1]]}
        conf['routes'] = [
            {'name': 'response', 'match': {'path_prefix': '/response'}, 'upstream': 'app',
             'timeouts': {'upstream_response': '200ms'}},
            {'name': 'try', 'match': {'path_prefix': '/try'}, 'upstream': 'app',
             'timeouts': {'upstream_try': '200ms'}},
            {'name': 'connect', 'match': {'path_prefix': '/connect'}, 'upstream': 'hole',
             'timeouts': {'upstream_connect': '200ms'}},
            {'name': 'global', 'match': {'path_prefix': '/'}, 'upstream': 'app'}]
        gw = env.daemon(conf)
        c = env.client(gw.port)
        for target, message in (('/response', 'upstream app did not answer in time'),
                                 ('/try', 'upstream app did not answer in time'),
                                 ('/connect', 'connect to upstream hole timed out')):
            r = c.request('GET', target, [('Host', 'a'), ('X-Request-Id', 'rt' + target[1:])])
            env.gateway_error('route %s timeout' % target[1:], r, 504, 'upstream_timeout', message,
                              close=False, request_id='rt' + target[1:])
        r = c.request('GET', '/other', [('Host', 'a')])
        env.eq('a route without timeouts waits the global ones', (r.status, r.body),
               (200, b'{"late":true}'))
    finally:
        for s in fillers:
            s.close()
        lst.close()


@T.case
def upstream_connect_timeout(env):
    lst, fillers = blackhole()
    port = lst.getsockname()[1]
    try:
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(('127.0.0.1', port))
            env.require('the blackhole listener drops connections', False, 'a connect succeeded')
        except socket.timeout:
            pass
        finally:
            probe.close()
        conf = upstream_config('127.0.0.1:%d' % port,
                               timeouts={'upstream_connect': '1s', 'upstream_response': '10s',
                                         'shutdown_grace': '2s'})
        gw = env.daemon(conf)
        c = env.client(gw.port)
        start = time.monotonic()
        r = c.request('GET', '/x', [('Host', 'a')])
        took = time.monotonic() - start
        env.gateway_error('connect timed out', r, 504, 'upstream_timeout',
                          'connect to upstream app timed out', close=False)
        env.check('504 after about upstream_connect (1s)', 0.8 <= took <= 6 * SLOW, '%.2fs' % took)
    finally:
        for s in fillers:
            s.close()
        lst.close()


@T.case
def gateway_errors_carry_date(env):
    """Every answer jsongate makes itself carries Date (RFC 9110 6.6.1), right after the status
    line: exact bytes of a 404 no_route and a 502 from a refused connect."""
    routes = [{'name': 'api', 'match': {'path_prefix': '/api'}, 'upstream': 'app'}]
    gw = env.daemon(upstream_config('127.0.0.1:%d' % env.closed_port(), routes=routes))
    c = env.client(gw.port)
    for target, status, reason, code, message in (
            ('/nothing', 404, 'Not Found', 'no_route', 'no route matches the request'),
            ('/api/x', 502, 'Bad Gateway', 'upstream_unavailable', 'connect to upstream app refused')):
        r = c.request('GET', target, [('Host', 'a'), ('X-Request-Id', 'dated')])
        body = gateway_error_body(status, code, message, 'dated')
        env.check('%d: a Date of now' % status, r is not None and date_is_now(r.date), r and r.date)
        env.eq('%d: exact head, Date first' % status, r.raw_head if r else None,
               ('HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n'
                'X-Request-Id: dated\r\n\r\n' % (status, reason, r and r.date, len(body))).encode())
        env.eq('%d: body' % status, r.body if r else None, body)


T.run()
