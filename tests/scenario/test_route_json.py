"""Routing by a field of the JSON request body (match.json): decoded strings
and escapes, numbers by value, nested paths, lists of conditions, absent
fields, bodies that are not JSON or not of a JSON media type, chunked and
gzip/deflate bodies, a field before and after a 10 MB value (inside and
outside limits.route_scan), a later json route reusing the look, a route
decided before the body ended, routes that never wait, Expect:
100-continue, keep-alive and pipelining after a routed request.  Every
upstream must receive the body byte for byte as the client sent it."""

import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

MB = 1 << 20


# ------------------------------------------------------------------ helpers

def named(env, name):
    """A scripted upstream answering every request with its name."""
    return env.scripted([], answer(http_response(200, name.encode(), content_type='text/plain')))


def start(env, routes, upstreams, **top):
    """jsongate with the given routes (YAML text) over named upstreams {name: scripted}."""
    port = free_port()
    conf = upstream_config('127.0.0.1:1', **top)
    conf['upstreams'] = {n: {'servers': [u.address]} for n, u in upstreams.items()}
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    return env.daemon(to_yaml(conf) + '\nroutes:\n' + routes, port=port)


def post(c, body, headers=(), target='/api', ctype='application/json'):
    h = [('Host', 'a')]
    if ctype is not None:
        h.append(('Content-Type', ctype))
    return c.request('POST', target, h + list(headers), body)


def chunked(*parts):
    return b''.join(b'%x\r\n%s\r\n' % (len(p), p) for p in parts) + b'0\r\n\r\n'


def went(env, what, r, ups, name, body, sent_before, chunks=None):
    """The response came from upstream `name`, which got exactly `body`."""
    env.eq(what + ': answered by', (r.status, r.body) if r else None, (200, name.encode()))
    up = ups[name]
    got = up.requests[sent_before[name]] if len(up.requests) > sent_before[name] else None
    env.eq(what + ': body at the upstream, byte for byte', got.body if got else None, body)
    if chunks is not None and got is not None:
        env.eq(what + ': forwarded chunked', got.framing, 'chunked')


def counts(ups):
    return {n: len(u.requests) for n, u in ups.items()}


ROUTES = '''\
  - name: by-type
    match: { path_prefix: /api, json: { field: type, equals: order } }
    upstream: orders
  - name: by-number
    match: { path_prefix: /api, methods: [ POST ], json: { field: n, equals: 1 } }
    upstream: numbers
  - name: by-nested-list
    match:
      path_prefix: /api
      json:
        - { field: user.tier, in: [ gold, "platinum" ] }
        - { field: user.id, exists: true }
    upstream: vip
  - name: by-prefix
    match:
      path_prefix: /api
      json: { any: [ { field: method, prefix: eth_ }, { field: kind, type: array } ] }
    upstream: eth
  - name: absent
    match: { path: /absent, json: { field: type, exists: false } }
    upstream: orders
  - name: fallback
    upstream: fallback
'''


def setup(env, routes=ROUTES, **top):
    ups = {n: named(env, n) for n in ('orders', 'numbers', 'vip', 'eth', 'fallback')}
    return ups, start(env, routes, ups, **top)


# ------------------------------------------------------------------ the cases

@T.case
def decoded_values(env):
    ups, gw = setup(env)
    c = env.client(gw.port)
    cases = [
        ('plain string', b'{"type":"order","id":1}', 'orders'),
        ('escaped key and value', b'{"t\\u0079pe":"ord\\u0065r"}', 'orders'),
        ('whitespace around', b' \r\n{ "id" : [1, {"type":"x"}] ,\t"type" : "order" } ', 'orders'),
        ('another string', b'{"type":"orders"}', 'fallback'),
        ('a number is no string', b'{"type":1}', 'fallback'),
        ('1', b'{"n":1}', 'numbers'),
        ('1.0', b'{"n":1.0}', 'numbers'),
        ('1e0', b'{"n":1e0}', 'numbers'),
        ('10e-1', b'{"n":10e-1}', 'numbers'),
        ('"1" is a string', b'{"n":"1"}', 'fallback'),
        ('1.0000000000000000001', b'{"n":1.0000000000000000001}', 'fallback'),
        ('nested, both conditions', b'{"user":{"id":7,"tier":"gold"}}', 'vip'),
        ('nested, escaped', b'{"user":{"tier":"pl\\u0061tinum","id":null}}', 'vip'),
        ('nested, one condition fails', b'{"user":{"tier":"gold"}}', 'fallback'),
        ('nested, not an object', b'{"user":"gold"}', 'fallback'),
        ('prefix', b'{"jsonrpc":"2.0","method":"eth_call","id":1}', 'eth'),
        ('any: the other branch', b'{"kind":[1,2]}', 'eth'),
        ('the first occurrence decides', b'{"type":"order","type":"other"}', 'orders'),
        ('field absent', b'{"id":1}', 'fallback'),
        ('not JSON', b'{"type" "order"}', 'fallback'),
        ('not an object', b'["order"]', 'fallback'),
        ('byte order mark', b'\xef\xbb\xbf{"type":"order"}', 'fallback'),
    ]
    for what, body, name in cases:
        before = counts(ups)
        went(env, what, post(c, body), ups, name, body, before)


@T.case
def media_types_and_methods(env):
    ups, gw = setup(env)
    c = env.client(gw.port)
    body = b'{"type":"order","n":1}'
    for what, ctype, name in [('application/json; charset=utf-8', 'application/json; charset=utf-8', 'orders'),
                              ('a +json type', 'application/vnd.api+json', 'orders'),
                              ('text/plain is not looked at', 'text/plain', 'fallback'),
                              ('no Content-Type', None, 'fallback')]:
        before = counts(ups)
        went(env, what, post(c, body, ctype=ctype), ups, name, body, before)
    # A route whose methods do not match is passed over; PUT falls through to the fallback.
    before = counts(ups)
    r = c.request('PUT', '/api', [('Host', 'a'), ('Content-Type', 'application/json')],
                  b'{"n":1}')
    went(env, 'PUT skips the POST-only route', r, ups, 'fallback', b'{"n":1}', before)
    # No body, or an empty one: no field, no match.
    before = counts(ups)
    r = c.request('GET', '/api', [('Host', 'a'), ('Content-Type', 'application/json')])
    went(env, 'GET without a body', r, ups, 'fallback', b'', before)
    before = counts(ups)
    went(env, 'empty body', post(c, b''), ups, 'fallback', b'', before)
    # exists: false holds for a JSON object without the field, not for a body that is no JSON.
    before = counts(ups)
    went(env, 'exists: false, field absent', post(c, b'{"id":1}', target='/absent'), ups,
         'orders', b'{"id":1}', before)
    before = counts(ups)
    went(env, 'exists: false, text/plain', post(c, b'{"id":1}', target='/absent', ctype='text/plain'),
         ups, 'fallback', b'{"id":1}', before)
    before = counts(ups)
    went(env, 'exists: false, not JSON', post(c, b'{id:1}', target='/absent'), ups,
         'fallback', b'{id:1}', before)


@T.case
def chunked_and_compressed(env):
    ups, gw = setup(env)
    c = env.client(gw.port)
    # The field split across chunks: de-chunked for the look, forwarded as received.
    parts = [b'{"ty', b'pe":"or', b'der","data":[1,2,3]}']
    before = counts(ups)
    r = c.request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                   ('Transfer-Encoding', 'chunked')], chunked(*parts))
    went(env, 'chunked, field across chunks', r, ups, 'orders', b''.join(parts), before, chunks=True)
    parts = [b'{"type":', b'"other"}']
    before = counts(ups)
    r = c.request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                   ('Transfer-Encoding', 'chunked')], chunked(*parts))
    went(env, 'chunked, no match', r, ups, 'fallback', b''.join(parts), before, chunks=True)
    # gzip and deflate bodies: inflated for the look, the compressed bytes go upstream.
    plain = b'{"user":{"id":1,"tier":"gold"},"pad":"' + b'z' * 5000 + b'"}'
    for what, data in [('gzip', gzip.compress(plain, mtime=0)),
                       ('gzip, two members', gzip.compress(plain[:20], mtime=0) +
                        gzip.compress(plain[20:], mtime=0)),
                       ('deflate', zlib.compress(plain))]:
        coding = 'deflate' if what == 'deflate' else 'gzip'
        before = counts(ups)
        r = post(c, data, headers=[('Content-Encoding', coding)])
        went(env, what, r, ups, 'vip', data, before)
        env.eq(what + ': Content-Encoding kept', ups['vip'].requests[-1].header('Content-Encoding'),
               coding)
    data = gzip.compress(plain, mtime=0)
    before = counts(ups)
    r = c.request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                   ('Content-Encoding', 'gzip'), ('Transfer-Encoding', 'chunked')],
                  chunked(data[:7], data[7:30], data[30:]))
    went(env, 'gzip, chunked', r, ups, 'vip', data, before, chunks=True)
    # The window counts inflated bytes: a field past 64 KB of them does not match, however
    # few compressed bytes come before it.
    for what, pad, name in [('gzip, the field inside the window once inflated', 60000, 'orders'),
                            ('gzip, the field past the window once inflated', 70000,
                             'fallback')]:
        data = gzip.compress(b'{"pad":"' + b'z' * pad + b'","type":"order"}', mtime=0)
        before = counts(ups)
        r = post(c, data, headers=[('Content-Encoding', 'gzip')])
        went(env, what, r, ups, name, data, before)
    for what, data, coding in [('gzip cut short', gzip.compress(plain, mtime=0)[:30], 'gzip'),
                               ('not gzip', plain, 'gzip'),
                               ('a coding jsongate cannot read', plain, 'br')]:
        before = counts(ups)
        r = post(c, data, headers=[('Content-Encoding', coding)])
        went(env, what, r, ups, 'fallback', data, before)


def big_body(first, inner_mb):
    """first, then a member holding an inner value of inner_mb MB, or the other way round."""
    inner = b'{"blob":"' + b'x' * (inner_mb * MB) + b'","list":[1,2,3]}'
    if first:
        return b'{"type":"order","data":' + inner + b'}'
    return b'{"data":' + inner + b',"type":"order"}'


@T.case
def window(env):
    ups, gw = setup(env)
    c = env.client(gw.port, timeout=60 * SLOW)
    for what, body, name in [('field before a 10 MB value', big_body(True, 10), 'orders'),
                             ('field after a 10 MB value: outside the window',
                              big_body(False, 10), 'fallback')]:
        before = counts(ups)
        r = post(c, body)
        env.eq(what + ': answered by', (r.status, r.body) if r else None, (200, name.encode()))
        got = ups[name].requests[before[name]].body if len(ups[name].requests) > before[name] \
            else b''
        env.eq(what + ': crc32 at the upstream', (len(got), zlib.crc32(got)),
               (len(body), zlib.crc32(body)))
    before = counts(ups)
    body = big_body(False, 10)
    pieces = [body[i:i + MB] for i in range(0, len(body), MB)]
    r = c.request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                   ('Transfer-Encoding', 'chunked')], chunked(*pieces))
    got = ups['fallback'].requests[before['fallback']].body \
        if len(ups['fallback'].requests) > before['fallback'] else b''
    env.eq('chunked, field after 10 MB: fallback, identical',
           (r.status, r.body, len(got), zlib.crc32(got)),
           (200, b'fallback', len(body), zlib.crc32(body)))


@T.case
def window_size(env):
    """limits.route_scan bounds the look: a field ending just inside it, one ending just
    past it, and a number the window cuts."""
    ups, gw = setup(env, limits={'route_scan': '1k'})
    c = env.client(gw.port)

    def padded(field, end):
        """{"pad":"ppp...",FIELD...} with FIELD's last byte at offset end - 1."""
        pad = end - len(b'{"pad":"",') - len(field)
        return b'{"pad":"' + b'p' * pad + b'",' + field

    tail = b',"more":"' + b'm' * 500 + b'"}'
    for what, body, name in [('field ending at the last byte of the window',
                              padded(b'"type":"order"', 1024) + tail, 'orders'),
                             ('field ending one byte past it',
                              padded(b'"type":"order"', 1025) + tail, 'fallback'),
                             ('a number the window cuts is not decided',
                              padded(b'"n":1', 1024) + b'0' + tail, 'fallback'),
                             ('a number ending at the last byte of a body that fits',
                              padded(b'"n":1', 1023) + b'}', 'numbers')]:
        before = counts(ups)
        went(env, what, post(c, body), ups, name, body, before)


@T.case
def later_json_route_reuses_the_look(env):
    """Routes tried in order: a json route that does not match passes to the next one,
    which reads the same bytes, including a route on another path condition."""
    routes = '''\
  - name: first
    match: { path_prefix: /api, json: { field: a, equals: 1 } }
    upstream: orders
  - name: other-path
    match: { path_prefix: /other, json: { field: a, equals: 2 } }
    upstream: eth
  - name: second
    match: { path_prefix: /api, json: { field: a, equals: 2 } }
    upstream: numbers
  - name: fallback
    upstream: fallback
'''
    ups, gw = setup(env, routes)
    c = env.client(gw.port)
    for body, name in [(b'{"a":1}', 'orders'), (b'{"a":2}', 'numbers'), (b'{"a":3}', 'fallback')]:
        before = counts(ups)
        went(env, 'a in %s' % body.decode(), post(c, body), ups, name, body, before)


@T.case
def decided_before_the_body_ends(env):
    """A leading field decides as soon as it is complete: the request goes upstream while
    the rest of the body is still coming."""
    ups, gw = setup(env)
    c = env.client(gw.port)
    first, rest = b'{"type":"order","data":"', b'x' * 1000 + b'"}'
    c.send(build_request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('Content-Length', str(len(first) + len(rest)))]) + first)
    env.check('the upstream is connected before the body ended',
              wait_until(lambda: ups['orders'].connections == 1, 10 * SLOW))
    c.send(rest)
    r = c.read_response('POST')
    went(env, 'then the rest', r, ups, 'orders', first + rest, {'orders': 0})
    # The same for a PUT, whose small body is kept whole for another try before it goes.
    before = counts(ups)
    c.send(build_request('PUT', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                         ('Content-Length', str(len(first) + len(rest)))]) + first)
    c.send(rest)
    went(env, 'a PUT in two pieces', c.read_response('PUT'), ups, 'orders', first + rest, before)
    # A field cut in the middle of its value waits for the rest of it.
    before = counts(ups)
    body = b'{"type":"ord' + b'er","n":2}'
    c.send(build_request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('Content-Length', str(len(body)))]) + body[:12])
    c.send(body[12:])
    went(env, 'a value in two pieces', c.read_response('POST'), ups, 'orders', body, before)


@T.case
def routes_that_never_wait(env):
    """Requests no json route can take go upstream at once, their body still coming."""
    for what, target, ctype in [('no json route for this path', '/absent-not', 'application/json'),
                                ('not a JSON media type', '/api', 'text/plain')]:
        ups, gw = setup(env)
        c = env.client(gw.port)
        before = counts(ups)
        c.send(build_request('POST', target, [('Host', 'a'), ('Content-Type', ctype),
                                              ('Content-Length', '20')]) + b'{"type":')
        name = 'fallback'
        env.check(what + ': connected before the body ended',
                  wait_until(lambda: ups[name].connections == 1, 10 * SLOW))
        c.send(b'"order"}    ')
        went(env, what, c.read_response('POST'), ups, name, b'{"type":"order"}    ', before)


@T.case
def expect_continue(env):
    """A route waiting for the body invites it with 100 Continue first."""
    ups, gw = setup(env)
    c = env.client(gw.port)
    body = b'{"n":1.0}'
    c.send(build_request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('Expect', '100-continue'),
                                          ('Content-Length', str(len(body)))]))
    r = c.read_response('POST', skip_interim=False)
    env.eq('100 Continue before the body', (r.status, r.head) if r else None,
           (100, b'HTTP/1.1 100 Continue\r\n\r\n'))
    c.send(body)
    r = c.read_response('POST')
    went(env, 'then routed by the body', r, ups, 'numbers', body, {'numbers': 0})


@T.case
def keepalive_and_pipelining(env):
    """Requests pipelined behind routed ones are each routed by their own body."""
    ups, gw = setup(env)
    c = env.client(gw.port)
    bodies = [b'{"type":"order"}', b'{"n":1}', b'{"type":"x"}',
              b'{"user":{"tier":"gold","id":1}}']
    data = b''.join(build_request('POST', '/api', [('Host', 'a'),
                                                   ('Content-Type', 'application/json')], b)
                    for b in bodies)
    data += build_request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                           ('Transfer-Encoding', 'chunked')], chunked(b'{"n":', b'1}'))
    c.send(data)
    got = [c.read_response('POST') for _ in range(5)]
    env.eq('five answers in order', [(r.status, r.body) if r else None for r in got],
           [(200, b'orders'), (200, b'numbers'), (200, b'fallback'), (200, b'vip'),
            (200, b'numbers')])
    env.eq('bodies upstream', ([q.body for q in ups['orders'].requests],
                               [q.body for q in ups['numbers'].requests],
                               [q.body for q in ups['fallback'].requests],
                               [q.body for q in ups['vip'].requests]),
           ([bodies[0]], [bodies[1], b'{"n":1}'], [bodies[2]], [bodies[3]]))


@T.case
def client_stops_sending(env):
    """A body that stops before the field is decided is cut at client_body, as any body."""
    ups, gw = setup(env, timeouts={'client_body': '300ms', 'upstream_connect': '2s',
                                   'upstream_response': '10s', 'shutdown_grace': '5s'})
    c = env.client(gw.port)
    c.send(build_request('POST', '/api', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('Content-Length', '100')]) + b'{"type":"ord')
    r = c.read_response('POST', timeout=10 * SLOW)
    env.check('closed without an answer', r is None or not r.complete, r)
    env.eq('no upstream got anything', sum(u.connections for u in ups.values()), 0)


@T.case
def configuration_errors(env):
    def check(what, match, message):
        port = free_port()
        path = os.path.join(env.tmp, 'bad-%d.yaml' % port)
        with open(path, 'w') as f:
            f.write('listeners: [ { listen: "127.0.0.1:%d" } ]\n'
                    'upstreams: { app: { servers: [ "127.0.0.1:1" ] } }\n'
                    'routes:\n'
                    '  - upstream: app\n'
                    '    match: %s\n' % (port, match))
        r = env.run([JSONGATE, '-t', '-c', path])
        env.eq(what, (r.returncode, r.stderr.decode().strip()), (1, '%s:%s' % (path, message)))
    check('status in a request condition', '{ json: { status: 200 } }',
          '5:20: routes[0].match.json: a request has no status: match.json tests fields')
    check('empty list', '{ json: [] }',
          '5:20: routes[0].match.json: expected a condition or a non-empty list of conditions')
    check('a test without a field', '{ json: [ { field: a, equals: 1 }, { equals: 1 } ] }',
          '5:47: routes[0].match.json: equals needs a field, e.g. { field: code, equals: ... }')
    check('an empty key in the path', '{ json: { field: "a..b", exists: true } }',
          "5:29: routes[0].match.json: field: empty key in path 'a..b'")


T.run()
