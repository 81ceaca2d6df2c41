"""CORS on a route (cors:): a preflight from an admitted origin is answered by
the gateway with 204 and never reaches the upstream, even on a route whose
methods leave OPTIONS out; every answer to an admitted origin (proxied, or a
gateway error) carries Access-Control-Allow-Origin and Vary: Origin in place
of the upstream's own; requests from other origins go on untouched; wildcard
hosts, "*" with and without credentials; configuration errors name the line."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

APP = 'https://app.example'


def ok():
    return answer(lambda req: http_response(200, b'{"ok":true}', headers=[
        ('Access-Control-Allow-Origin', '*')]))


def cors_config(up, **cors):
    policy = {'origins': [APP, '*.example.com'], 'methods': ['GET', 'POST'],
              'headers': ['Content-Type', 'Authorization'], 'max_age': '10m'}
    policy.update(cors)
    return upstream_config(up.address, routes=[
        {'name': 'api', 'match': {'path_prefix': '/api/', 'methods': ['GET', 'POST']},
         'upstream': 'app', 'cors': policy}])


def head_lines(r):
    return r.head.decode().split('\r\n')


@T.case
def preflight_answered_here(env):
    up = env.scripted(default=ok())
    gw = env.daemon(cors_config(up))
    c = env.client(gw.port)
    r = c.request('OPTIONS', '/api/orders', [
        ('Host', 'h'), ('X-Request-Id', 'pf-1'), ('Origin', APP),
        ('Access-Control-Request-Method', 'POST'),
        ('Access-Control-Request-Headers', 'content-type')])
    env.eq('the preflight answer, exactly', r.head,
           b'HTTP/1.1 204 No Content\r\nX-Request-Id: pf-1\r\n'
           b'Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n'
           b'Access-Control-Allow-Methods: GET, POST\r\n'
           b'Access-Control-Allow-Headers: Content-Type, Authorization\r\n'
           b'Access-Control-Max-Age: 600\r\n\r\n')
    env.eq('no body', r.body, b'')
    env.check('a Date of now', date_is_now(r.date), r.date)

    r = c.request('OPTIONS', '/api/orders', [
        ('Host', 'h'), ('X-Request-Id', 'pf-2'), ('Origin', 'https://shop.eu.example.com:8443'),
        ('Access-Control-Request-Method', 'GET')])
    env.eq('a subdomain of the wildcard host: admitted', (r.status, r.header(
        'Access-Control-Allow-Origin')), (204, 'https://shop.eu.example.com:8443'))

    # Another origin: the route takes no OPTIONS, so it is the 405 it always was.
    r = c.request('OPTIONS', '/api/orders', [
        ('Host', 'h'), ('X-Request-Id', 'pf-3'), ('Origin', 'https://example.com'),
        ('Access-Control-Request-Method', 'GET')])
    env.gateway_error('a preflight from another origin', r, 405, 'method_not_allowed', None,
                      close=False, request_id='pf-3', headers=[('Allow', 'GET, HEAD, POST')])
    env.eq('no preflight reached the upstream', len(up.requests), 0)


@T.case
def preflight_headers_mirrored(env):
    """Without headers: the ones the browser asks for are allowed, and the answer varies by
    them; without max_age, no Max-Age."""
    up = env.scripted(default=ok())
    conf = cors_config(up)
    del conf['routes'][0]['cors']['headers']
    del conf['routes'][0]['cors']['max_age']
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('OPTIONS', '/api/x', [
        ('Host', 'h'), ('X-Request-Id', 'pf-4'), ('Origin', APP),
        ('Access-Control-Request-Method', 'GET'),
        ('Access-Control-Request-Headers', 'x-trace, content-type')])
    env.eq('the preflight answer, exactly', r.head,
           b'HTTP/1.1 204 No Content\r\nX-Request-Id: pf-4\r\n'
           b'Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n'
           b'Access-Control-Allow-Methods: GET, POST\r\n'
           b'Access-Control-Allow-Headers: x-trace, content-type\r\n'
           b'Vary: Access-Control-Request-Headers\r\n\r\n')
    env.eq('nothing upstream', len(up.requests), 0)


@T.case
def answers_to_an_admitted_origin(env):
    up = env.scripted(default=ok())
    gw = env.daemon(cors_config(up))
    c = env.client(gw.port)
    r = c.request('GET', '/api/orders', [('Host', 'h'), ('X-Request-Id', 'a-1'),
                                         ('Origin', APP)])
    env.eq('the answer: the route\'s CORS in place of the upstream\'s', r.head,
           b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: a-1\r\n'
           b'Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n'
           b'Content-Length: 11\r\n\r\n')
    env.eq('body', r.body, b'{"ok":true}')
    env.eq('the upstream got the Origin', up.requests[0].header('Origin') if up.requests
           else None, APP)

    r = c.request('GET', '/api/orders', [('Host', 'h'), ('X-Request-Id', 'a-2'),
                                         ('Origin', 'https://evil.example')])
    env.eq('another origin: the upstream\'s answer untouched', r.head,
           b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
           b'Access-Control-Allow-Origin: *\r\nX-Request-Id: a-2\r\n'
           b'Content-Length: 11\r\n\r\n')
    r = c.request('GET', '/api/orders', [('Host', 'h'), ('X-Request-Id', 'a-3')])
    env.eq('no Origin: untouched too', r.header('Access-Control-Allow-Origin'), '*')
    env.eq('three requests upstream', len(up.requests), 3)


@T.case
def gateway_errors_carry_it(env):
    """A page may read why its request failed."""
    conf = cors_config(type('Dead', (), {'address': '127.0.0.1:%d' % free_port()})())
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('GET', '/api/orders', [('Host', 'h'), ('X-Request-Id', 'e-1'),
                                         ('Origin', APP)])
    env.gateway_error('no server to answer', r, 502, 'upstream_unavailable', None, close=False,
                      request_id='e-1', headers=[('Access-Control-Allow-Origin', APP),
                                                 ('Vary', 'Origin')])


@T.case
def any_origin(env):
    up = env.scripted(default=ok())
    gw = env.daemon(cors_config(up, origins=['*']))
    c = env.client(gw.port)
    r = c.request('GET', '/api/a', [('Host', 'h'), ('Origin', 'https://x.test')])
    env.eq('"*" without credentials says *', (r.all('Access-Control-Allow-Origin'),
                                               r.all('Vary')), (['*'], []))
    gw2 = env.daemon(cors_config(up, origins=['*'], credentials=True))
    c2 = env.client(gw2.port)
    r = c2.request('GET', '/api/a', [('Host', 'h'), ('Origin', 'https://x.test')])
    env.eq('with credentials: the origin itself, never *',
           (r.all('Access-Control-Allow-Origin'), r.all('Access-Control-Allow-Credentials'),
            r.all('Vary')), (['https://x.test'], ['true'], ['Origin']))


BAD = '''listeners: [ { listen: "127.0.0.1:%(port)d" } ]
upstreams:
  app: { servers: [127.0.0.1:%(up)d] }
routes:
  - upstream: app
    cors:
      origins: [https://app.example/path, "ftp*.x"]
      methods: [GET, FETCH]
      headers: ["bad header"]
  - upstream: app
    cors: { methods: [GET] }
'''


@T.case
def config_errors(env):
    path = os.path.join(env.tmp, 'bad.yaml')
    with open(path, 'w') as f:
        f.write(BAD % {'port': free_port(), 'up': free_port()})
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 1)
    err = p.stderr.decode()
    for where, words in [('7:17', 'origin "https://app.example/path": an origin has no path'),
                         ('7:43', 'origin "ftp*.x"'),
                         ('8:22', 'unknown method "FETCH"'),
                         ('9:17', '"bad header" is not a header name'),
                         ('11:11', "missing required key 'origins'")]:
        env.check('%s: %s' % (where, words), ('%s:%s: ' % (path, where)) in err and words in err,
                  err)


T.run()
