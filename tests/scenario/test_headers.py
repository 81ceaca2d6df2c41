"""Header rules both ways: hop-by-hop headers stripped, X-Forwarded-For,
X-Forwarded-Proto and X-Request-Id added or kept, Host passed through,
everything else kept in order."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

HEX32 = re.compile(r'[0-9a-f]{32}\Z')
ADDED = ('x-forwarded-for', 'x-forwarded-proto', 'x-request-id')


def gateway(env, steps=(), default=None):
    up = env.scripted(steps, default or answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address))
    return up, gw, env.client(gw.port)


@T.case
def request_hop_by_hop_stripped(env):
    up, gw, c = gateway(env)
    r = c.request('GET', '/h', [
        ('Host', 'api.example.com'),
        ('User-Agent', 'scenario/1'),
        ('Connection', 'keep-alive, X-Private'),
        ('X-Private', 'secret'),
        ('Keep-Alive', 'timeout=5'),
        ('TE', 'trailers'),
        ('Trailer', 'X-Checksum'),
        ('Upgrade', 'websocket'),
        ('Proxy-Authorization', 'Basic YTpi'),
        ('Proxy-Connection', 'keep-alive'),
        ('Accept', 'application/json'),
        ('X-Dup', '1'),
        ('X-Dup', '2'),
        ('Cookie', 'a=b; c=d'),
    ])
    env.eq('status', r.status, 200)
    req = up.requests[0]
    names = req.names()
    for hop in ('x-private', 'keep-alive', 'te', 'trailer', 'upgrade',
                'proxy-authorization', 'proxy-connection', 'transfer-encoding'):
        env.check('%s not forwarded' % hop, hop not in names, req.head)
    env.check('the client Connection header not forwarded',
              all('x-private' not in v.lower() for v in req.all('Connection')), req.head)
    kept = [(n, v) for n, v in req.headers if n.lower() not in ADDED + ('connection',)]
    env.eq('end-to-end headers kept, in order, Host passed through', kept, [
        ('Host', 'api.example.com'), ('User-Agent', 'scenario/1'), ('Accept', 'application/json'),
        ('X-Dup', '1'), ('X-Dup', '2'), ('Cookie', 'a=b; c=d')])
    env.eq('X-Forwarded-For added', req.all('X-Forwarded-For'), ['127.0.0.1'])
    env.eq('X-Forwarded-Proto added', req.all('X-Forwarded-Proto'), ['http'])
    ids = req.all('X-Request-Id')
    env.check('X-Request-Id generated: 32 lowercase hex', len(ids) == 1 and HEX32.match(ids[0]), ids)
    env.eq('the response carries the same id', r.all('X-Request-Id'), ids)


@T.case
def request_ids_are_unique(env):
    up, gw, c = gateway(env)
    seen = set()
    for _ in range(20):
        r = c.request('GET', '/id', [('Host', 'a')])
        seen.add(r.header('X-Request-Id'))
    env.eq('20 requests, 20 different generated ids', len(seen), 20)


@T.case
def x_forwarded_for_appended(env):
    up, gw, c = gateway(env)
    c.request('GET', '/xff', [('Host', 'a'), ('X-Forwarded-For', '203.0.113.9')])
    env.eq('one client value: appended', ', '.join(up.requests[0].all('X-Forwarded-For')),
           '203.0.113.9, 127.0.0.1')
    c.request('GET', '/xff', [('Host', 'a'), ('X-Forwarded-For', '198.51.100.1'),
                              ('X-Forwarded-For', '198.51.100.2')])
    env.eq('two client values: both kept, then ours',
           ', '.join(up.requests[1].all('X-Forwarded-For')),
           '198.51.100.1, 198.51.100.2, 127.0.0.1')


@T.case
def client_request_id_kept_or_replaced(env):
    up, gw, c = gateway(env)
    good = 'Req-42.abc_~!' + 'x' * 100                       # 113 visible characters
    r = c.request('GET', '/rid', [('Host', 'a'), ('X-Request-Id', good)])
    env.eq('acceptable id forwarded once, unchanged', up.requests[-1].all('X-Request-Id'), [good])
    env.eq('acceptable id returned', r.all('X-Request-Id'), [good])

    edge = 'y' * 128
    r = c.request('GET', '/rid', [('Host', 'a'), ('X-Request-Id', edge)])
    env.eq('128 characters is acceptable', (up.requests[-1].all('X-Request-Id'), r.all('X-Request-Id')),
           ([edge], [edge]))

    for label, bad in (('129 characters', 'z' * 129), ('an inner space', 'a b'),
                       ('non-ASCII', 'caf\xe9')):
        r = c.request('GET', '/rid', [('Host', 'a'), ('X-Request-Id', bad)])
        ids = up.requests[-1].all('X-Request-Id')
        env.check('id with %s replaced by a generated one' % label,
                  len(ids) == 1 and HEX32.match(ids[0]), ids)
        env.eq('id with %s: response has the replacement' % label, r.all('X-Request-Id'), ids)


@T.case
def response_hop_by_hop_stripped(env):
    raw = (b'HTTP/1.1 201 Created\r\n'
           b'Content-Type: application/json\r\n'
           b'X-Up: 1\r\n'
           b'Connection: X-Hop, keep-alive\r\n'
           b'X-Hop: drop-me\r\n'
           b'Keep-Alive: timeout=5, max=100\r\n'
           b'Proxy-Authenticate: Basic realm="x"\r\n'
           b'Upgrade: h2c\r\n'
           b'Set-Cookie: a=1\r\n'
           b'Set-Cookie: b=2\r\n'
           b'Cache-Control: no-store\r\n'
           b'Content-Length: 11\r\n'
           b'\r\n'
           b'{"ok":true}')
    up, gw, c = gateway(env, [answer(raw)])
    r = c.request('POST', '/r', [('Host', 'a')], b'{}')
    env.eq('status line', r.head.split(b'\r\n')[0], b'HTTP/1.1 201 Created')
    ids = r.all('X-Request-Id')
    env.check('X-Request-Id added', len(ids) == 1 and HEX32.match(ids[0]), ids)
    env.eq('response headers: upstream end-to-end headers in order',
           [(n, v) for n, v in r.headers if n.lower() != 'x-request-id'],
           [('Content-Type', 'application/json'), ('X-Up', '1'), ('Set-Cookie', 'a=1'),
            ('Set-Cookie', 'b=2'), ('Cache-Control', 'no-store'), ('Content-Length', '11')])
    env.eq('body', r.body, b'{"ok":true}')


@T.case
def upstream_request_id_kept(env):
    raw = http_response(200, b'{}', headers=[('X-Request-Id', 'from-upstream-7')])
    up, gw, c = gateway(env, [answer(raw)])
    r = c.request('GET', '/u', [('Host', 'a')])
    env.eq('the upstream id is the only one', r.all('X-Request-Id'), ['from-upstream-7'])


@T.case
def host_passed_through(env):
    up, gw, c = gateway(env)
    for host in ('api.example.com', 'api.example.com:8443', '[2001:db8::1]:80', '127.0.0.1'):
        c.request('GET', '/host', [('Host', host)])
        env.eq('Host %s passed through' % host, up.requests[-1].all('Host'), [host])


T.run()
