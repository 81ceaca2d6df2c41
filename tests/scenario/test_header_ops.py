"""Header ops of a route: `request_headers` and `response_headers` with set,
add and remove (names case-insensitive, values literal or request
variables), applied after jsongate's own header rules, on streamed,
rewritten and untouched answers alike, never on gateway errors; a route
without them unchanged; hop-by-hop and framing headers refused by -t with
FILE:LINE:COL; and headers jsongate itself passes on or rewrites (Expect,
Accept-Encoding, Content-Encoding and Vary)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

REQUEST_HEADERS = ('{ set: { X-Api-Version: "2", X-Forwarded-For: $remote_addr, '
                   'X-User: $header.X-Auth-User, X-Absent: $header.X-Nope }, '
                   'add: { X-Gateway: jsongate, x-tag: gw }, remove: [ x-debug, X-Forwarded-Proto ] }')
RESPONSE_HEADERS = ('{ set: { Cache-Control: no-store, X-Served-By: $upstream, '
                    'X-Echo: $header.X-Trace, X-Request-Id: $$fixed }, '
                    'add: { Vary: Origin }, remove: [ Server, x-powered-by ] }')

UPSTREAM_HEADERS = [('Server', 'app/1.0'), ('X-Powered-By', 'php'),
                    ('Cache-Control', 'private'), ('Vary', 'Accept'), ('X-Request-Id', 'up-id')]


def route(name, prefix, **kw):
    lines = ['  - name: %s' % name, '    match: { path_prefix: %s }' % prefix, '    upstream: app']
    lines += ['    %s: %s' % (k, v) for k, v in kw.items()]
    return '\n'.join(lines) + '\n'


def start(env, up, *routes):
    port = free_port()
    conf = upstream_config(up.address)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    return env.daemon(to_yaml(conf) + '\nroutes:\n' + ''.join(routes), port=port)


def served(env):
    def respond(req):
        body = b'{"code":0,"data":{"path":"%s"}}' % req.target.encode()
        if req.target.endswith('/chunked'):
            return http_response(200, body, UPSTREAM_HEADERS, chunked=True)
        if req.target.endswith('/error'):
            return http_response(503, body, UPSTREAM_HEADERS)
        if req.target.endswith('/text'):
            return http_response(200, b'plain', UPSTREAM_HEADERS, content_type='text/plain')
        return http_response(200, body, UPSTREAM_HEADERS)
    return env.scripted([], answer(respond))


CLIENT_HEADERS = [('Host', 'api.example'), ('X-Debug', '1'), ('X-DEBUG', '2'),
                  ('X-Api-Version', '1'), ('X-Forwarded-For', '6.6.6.6'), ('X-Auth-User', 'alice'),
                  ('X-Tag', 'client'), ('X-Trace', 't-1'), ('Accept', 'application/json')]


@T.case
def request_header_ops(env):
    up = served(env)
    gw = start(env, up, route('ops', '/ops', request_headers=REQUEST_HEADERS),
               route('plain', '/plain'))
    c = env.client(gw.port)
    r = c.request('GET', '/ops/x', CLIENT_HEADERS + [('X-Request-Id', 'rq-1')])
    env.eq('answered', r.status, 200)
    env.eq('the headers upstream got: kept, then ours, then set and add, in order',
           up.requests[-1].headers, [
               ('Host', 'api.example'), ('X-Auth-User', 'alice'), ('X-Tag', 'client'),
               ('X-Trace', 't-1'), ('Accept', 'application/json'), ('X-Request-Id', 'rq-1'),
               ('X-Api-Version', '2'), ('X-Forwarded-For', '127.0.0.1'), ('X-User', 'alice'),
               ('X-Gateway', 'jsongate'), ('x-tag', 'gw')])
    r = c.request('GET', '/plain/x', CLIENT_HEADERS + [('X-Request-Id', 'rq-2')])
    env.eq('a route without header ops: the usual rules only', up.requests[-1].headers, [
        ('Host', 'api.example'), ('X-Debug', '1'), ('X-DEBUG', '2'), ('X-Api-Version', '1'),
        ('X-Auth-User', 'alice'), ('X-Tag', 'client'), ('X-Trace', 't-1'),
        ('Accept', 'application/json'), ('X-Forwarded-For', '6.6.6.6, 127.0.0.1'),
        ('X-Forwarded-Proto', 'http'), ('X-Request-Id', 'rq-2')])
    env.eq('and its answer keeps the upstream headers', r.headers,
           [('Content-Type', 'application/json')] + UPSTREAM_HEADERS +
           [('Content-Length', str(len(r.body)))])


@T.case
def response_header_ops_on_every_answer(env):
    up = served(env)
    gw = start(env, up,
               route('stream', '/stream', response_headers=RESPONSE_HEADERS),
               route('ops', '/ops', response='[ {unwrap: data} ]', response_headers=RESPONSE_HEADERS))
    c = env.client(gw.port)
    # Set replaces the upstream's Cache-Control; add keeps its Vary.
    want = [('Content-Type', 'application/json'), ('Vary', 'Accept'),
            ('Cache-Control', 'no-store'), ('X-Served-By', up.address), ('X-Echo', 't-1'),
            ('X-Request-Id', '$fixed'), ('Vary', 'Origin')]
    for target, framing, body in (
            ('/stream/x', ('Content-Length', '38'), b'{"code":0,"data":{"path":"/stream/x"}}'),
            ('/stream/chunked', ('Transfer-Encoding', 'chunked'),
             b'{"code":0,"data":{"path":"/stream/chunked"}}'),
            ('/ops/x', ('Content-Length', '17'), b'{"path":"/ops/x"}'),
            ('/ops/chunked', ('Content-Length', '23'), b'{"path":"/ops/chunked"}')):
        r = c.request('GET', target, [('Host', 'a'), ('X-Trace', 't-1')])
        env.eq('%s: headers' % target, r.headers, want + [framing])
        env.eq('%s: body' % target, r.body, body)
    r = c.request('GET', '/ops/error', [('Host', 'a')])
    env.eq('an answer outside response_on passes untouched but for the header ops', r.headers,
           [('Content-Type', 'application/json'), ('Vary', 'Accept'), ('Cache-Control', 'no-store'),
            ('X-Served-By', up.address), ('X-Request-Id', '$fixed'), ('Vary', 'Origin'),
            ('Content-Length', '39')])
    env.eq('a $header.NAME the request does not carry leaves the header out',
           r.header('X-Echo'), None)
    r = c.request('HEAD', '/ops/x', [('Host', 'a'), ('X-Trace', 't-1')])
    env.eq('HEAD: the same head', (r.headers, r.body), (want + [('Content-Length', '17')], b''))


@T.case
def gateway_errors_carry_no_header_ops(env):
    port = free_port()
    conf = upstream_config('127.0.0.1:%d' % port)
    conf['routes'][0]['response_headers'] = {'set': {'Cache-Control': 'no-store'}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('GET', '/x', [('Host', 'a'), ('X-Request-Id', 'refused')])
    env.gateway_error('refused: the gateway error as always', r, 502, 'upstream_unavailable',
                      'connect to upstream app refused', close=False, request_id='refused')


@T.case
def hop_by_hop_headers_refused_by_t(env):
    path = os.path.join(env.tmp, 'hop.yaml')
    with open(path, 'w') as f:
        f.write('listeners:\n'
                '  - listen: 127.0.0.1:8080\n'
                'upstreams:\n'
                '  app: { servers: [ 127.0.0.1:9001 ] }\n'
                'routes:\n'
                '  - upstream: app\n'
                '    response_headers:\n'
                '      set: { Connection: keep-alive, Transfer-Encoding: identity }\n'
                '      remove: [ Keep-Alive ]\n')
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 1)
    env.eq('-t errors', p.stderr.decode().splitlines(), [
        "%s:8:14: routes[0].response_headers.set: cannot set 'Connection': a hop-by-hop header, "
        "which jsongate removes and manages itself" % path,
        "%s:8:38: routes[0].response_headers.set: cannot set 'Transfer-Encoding': message "
        "framing, which jsongate writes itself" % path,
        "%s:9:17: routes[0].response_headers.remove: cannot remove 'Keep-Alive': a hop-by-hop "
        "header, which jsongate removes and manages itself" % path])


@T.case
def headers_jsongate_rewrites(env):
    """jsongate.yaml(5), HEADERS: Expect passed on, Accept-Encoding reduced on a route with
    response ops, an inflated answer's Content-Encoding replaced by compress: gzip's."""
    import gzip
    import zlib

    def respond(req):
        if req.target == '/ops/gz':
            return http_response(200, gzip.compress(b'{"data":{"id":1}}', mtime=0),
                                 [('Content-Encoding', 'gzip'), ('Vary', 'Accept')])
        return http_response(200, b'{"data":{"id":1}}')
    up = env.scripted([], answer(respond))
    gw = start(env, up, route('plain', '/plain'),
               route('ops', '/ops', response='[ {unwrap: data} ]', compress='gzip'))
    c = env.client(gw.port)
    r = c.request('POST', '/plain/x', [('Host', 'a'), ('Expect', '100-continue'),
                                       ('Accept-Encoding', 'br, gzip;q=0.5'),
                                       ('X-Request-Id', 'h-1')], b'{}')
    env.eq('pass-through: Expect and Accept-Encoding as sent', (r.status, up.requests[-1].headers), (200, [
        ('Host', 'a'), ('Expect', '100-continue'), ('Accept-Encoding', 'br, gzip;q=0.5'),
        ('X-Forwarded-For', '127.0.0.1'), ('X-Forwarded-Proto', 'http'), ('X-Request-Id', 'h-1'),
        ('Content-Length', '2')]))
    for sent, upstream_got in (('br, gzip;q=0.5', 'gzip;q=0.5'), ('br', 'identity')):
        c.request('GET', '/ops/x', [('Host', 'a'), ('Accept-Encoding', sent)])
        env.eq('response ops: Accept-Encoding %s goes upstream as %s' % (sent, upstream_got),
               up.requests[-1].header('Accept-Encoding'), upstream_got)
    r = c.request('GET', '/ops/gz', [('Host', 'a'), ('Accept-Encoding', 'gzip'),
                                     ('X-Request-Id', 'h-2')])
    body = zlib.decompress(r.body, 16 + 15) if r.body[:2] == b'\x1f\x8b' else r.body
    env.eq('inflated, rewritten, compressed again: the upstream\'s Content-Encoding replaced',
           (r.status, body, r.headers), (200, b'{"id":1}', [
               ('Content-Type', 'application/json'), ('Vary', 'Accept'), ('X-Request-Id', 'h-2'),
               ('Content-Encoding', 'gzip'), ('Vary', 'Accept-Encoding'),
               ('Content-Length', str(len(r.body)))]))


T.run()
