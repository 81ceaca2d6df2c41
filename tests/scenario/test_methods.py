"""Every method proxied with its exact request line and body; HEAD; routing
by path, path_prefix, host and methods (a method a route does not take going
on to later routes; 405 with Allow when none takes it); strip_prefix; demo
envelopes pass through byte-identical."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'TRACE']
WITH_BODY = ('POST', 'PUT', 'PATCH', 'DELETE')


def reply_for(req):
    if req.method == 'HEAD':
        # The head a GET would get: Content-Length of the body not sent.
        return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                b'Content-Length: 42\r\n\r\n')
    body = json.dumps({'method': req.method, 'body_len': len(req.body)}).encode()
    return http_response(200, body)


@T.case
def every_method(env):
    up = env.scripted(default=answer(reply_for))
    gw = env.daemon(upstream_config(up.address))
    c = env.client(gw.port)
    for method in METHODS:
        body = ('{"m":"%s","x":[1,2,3]}' % method).encode() if method in WITH_BODY else None
        before = len(up.requests)
        r = c.request(method, '/m/path?q=1&r=%2F', [('Host', 'api.example.com')], body)
        env.require('%s: a response' % method, r is not None, 'connection closed')
        env.eq('%s: status' % method, r.status, 200)
        env.eq('%s: one request upstream' % method, len(up.requests), before + 1)
        if len(up.requests) != before + 1:
            continue
        req = up.requests[-1]
        env.eq('%s: request line upstream' % method, req.head.split(b'\r\n')[0],
               ('%s /m/path?q=1&r=%%2F HTTP/1.1' % method).encode())
        if body is not None:
            env.eq('%s: body upstream' % method, req.body, body)
            env.eq('%s: Content-Length upstream' % method, req.all('Content-Length'), [str(len(body))])
        else:
            env.eq('%s: no body upstream' % method, (req.body, req.framing), (b'', 'none'))
        if method == 'HEAD':
            env.eq('HEAD: Content-Length kept', r.header('Content-Length'), '42')
            env.eq('HEAD: no body', r.body, b'')
        else:
            env.eq('%s: response body' % method, r.json(),
                   {'method': method, 'body_len': len(body or b'')})
    # The connection is still in sync after HEAD: a last GET works.
    r = c.request('GET', '/last', [('Host', 'a')])
    env.eq('GET after all methods on one connection', (r.status, r.json()['method']), (200, 'GET'))


ROUTES = [
    {'name': 'orders', 'match': {'path_prefix': '/api/orders', 'methods': ['GET', 'POST']},
     'upstream': 'app', 'strip_prefix': '/api'},
    {'name': 'health', 'match': {'path': '/health'}, 'upstream': 'app'},
    {'name': 'other-host', 'match': {'host': 'example.org', 'path_prefix': '/'},
     'upstream': 'second'},
]


@T.case
def routing(env):
    up = env.scripted(default=answer(lambda q: http_response(200, b'{"up":1}')))
    up2 = env.scripted(default=answer(lambda q: http_response(200, b'{"up":2}')))
    conf = upstream_config(up.address, routes=ROUTES)
    conf['upstreams']['second'] = {'servers': [up2.address]}
    gw = env.daemon(conf)
    c = env.client(gw.port)

    r = c.request('GET', '/api/orders/7?x=1&y', [('Host', 'a')])
    env.eq('path_prefix route: status and upstream', (r.status, r.body), (200, b'{"up":1}'))
    env.eq('strip_prefix keeps the query', up.requests[-1].target, '/orders/7?x=1&y')

    r = c.request('POST', '/api/orders', [('Host', 'a')], b'{}')
    env.eq('allowed method POST', r.status, 200)
    env.eq('strip_prefix of the whole prefix', up.requests[-1].target, '/orders')

    r = c.request('DELETE', '/api/orders/7', [('Host', 'a'), ('X-Request-Id', 'del-1')])
    env.gateway_error('method not in methods: Allow names the route\'s', r, 405,
                      'method_not_allowed', 'method not allowed on this route', close=False,
                      request_id='del-1', headers=[('Allow', 'GET, HEAD, POST')])

    r = c.request('GET', '/health', [('Host', 'a')])
    env.eq('exact path route', (r.status, up.requests[-1].target), (200, '/health'))

    r = c.request('GET', '/health/more', [('Host', 'a'), ('X-Request-Id', 'h-2')])
    env.gateway_error('exact path does not match a longer path', r, 404, 'no_route',
                      'no route matches the request', close=False, request_id='h-2')

    r = c.request('GET', '/anything', [('Host', 'example.org')])
    env.eq('host route goes to the second upstream', (r.status, r.body), (200, b'{"up":2}'))
    env.eq('host route target', up2.requests[-1].target if up2.requests else None, '/anything')

    r = c.request('GET', '/anything', [('Host', 'example.org:%d' % gw.port)])
    env.eq('host match ignores the port', (r.status, r.body), (200, b'{"up":2}'))

    r = c.request('GET', '/anything', [('Host', 'example.com')])
    env.gateway_error('no route for another host', r, 404, 'no_route',
                      'no route matches the request', close=False)
    env.eq('the 404s and 405 never reached an upstream', len(up.requests) + len(up2.requests), 5)


@T.case
def methods_fall_through_and_405_allow(env):
    up = env.scripted(default=answer(lambda q: http_response(200, q.method.encode())))
    gw = env.daemon(upstream_config(up.address, routes=[
        {'name': 'read', 'match': {'path': '/items', 'methods': ['GET']}, 'upstream': 'app'},
        {'name': 'write', 'match': {'path': '/items', 'methods': ['DELETE', 'POST']},
         'upstream': 'app', 'request_headers': {'set': {'X-Route': '$route'}}},
        {'name': 'put', 'match': {'path_prefix': '/put/', 'methods': ['PUT']}, 'upstream': 'app'},
        {'name': 'rpc', 'match': {'path': '/rpc'}, 'jsonrpc': {'default': 'app'}}]))
    c = env.client(gw.port)

    r = c.request('GET', '/items', [('Host', 'h')])
    env.eq('GET: the first route', (r.status, r.body, up.requests[-1].header('X-Route')),
           (200, b'GET', None))
    r = c.request('POST', '/items', [('Host', 'h')], b'{}')
    env.eq('POST: not the first route\'s, taken by the second',
           (r.status, r.body, up.requests[-1].header('X-Route')), (200, b'POST', 'write'))
    n = len(up.requests)
    for method, target, allow in [('PATCH', '/items', 'GET, HEAD, POST, DELETE'),
                                  ('PUT', '/items', 'GET, HEAD, POST, DELETE'),
                                  ('FOO', '/items', 'GET, HEAD, POST, DELETE'),
                                  ('HEAD', '/put/x', 'PUT'),
                                  ('GET', '/rpc', 'POST')]:
        r = c.request(method, target, [('Host', 'h'), ('X-Request-Id', 'm-1')])
        what = '%s %s' % (method, target)
        env.eq('%s: the status line' % what, r.head.split(b'\r\n')[0],
               b'HTTP/1.1 405 Method Not Allowed')
        env.check('%s: the Allow line' % what,
                  b'\r\nAllow: ' + allow.encode() + b'\r\n' in r.head, r.head)
        env.eq('%s: one Allow header' % what, r.all('Allow'), [allow])
        env.eq('%s: the error' % what, json.loads(r.body)['error']['code'] if r.body else None,
               None if method == 'HEAD' else 'method_not_allowed')
    r = c.request('DELETE', '/nothing', [('Host', 'h'), ('X-Request-Id', 'm-2')])
    env.gateway_error('no route for the path: 404', r, 404, 'no_route',
                      'no route matches the request', close=False, request_id='m-2')
    env.eq('404: no Allow', r.all('Allow'), [])
    env.eq('none of them went upstream', len(up.requests), n)


@T.case
def demo_upstream_reason_phrases(env):
    """The demo upstream's /status/N speaks RFC 9110, as jsongate does."""
    demo = env.demo()
    c = env.client(demo.port)
    for status, reason in ((200, 'OK'), (404, 'Not Found'), (413, 'Content Too Large'),
                           (503, 'Service Unavailable')):
        r = c.request('GET', '/status/%d' % status, [('Host', 'demo')])
        env.eq('/status/%d' % status, r.head.split(b'\r\n')[0],
               b'HTTP/1.1 %d %s' % (status, reason.encode()))


@T.case
def demo_envelopes_pass_unchanged(env):
    demo = env.demo()
    gw = env.daemon(upstream_config(demo.address))
    direct = env.client(demo.port)
    c = env.client(gw.port)
    for path, status in (('/api/orders/1', 200), ('/api/orders/2', 200),
                         ('/api/orders/404', 404), ('/api/stats', 200)):
        want = direct.request('GET', path, [('Host', 'demo')])
        r = c.request('GET', path, [('Host', 'demo')])
        env.eq('%s: status' % path, r.status, status)
        env.eq('%s: body byte-identical' % path, r.body, want.body)
        env.eq('%s: Content-Type and Content-Length' % path,
               (r.header('Content-Type'), r.header('Content-Length')),
               ('application/json', str(len(want.body))))


T.run()
