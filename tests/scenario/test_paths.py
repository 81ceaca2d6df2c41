"""Paths normalised before routing: dot segments removed ("%2e" a dot too),
empty segments merged, a path climbing above "/" refused with 400; the route
is chosen on, and the upstream receives, the normal path (plain, strip_prefix,
path templates, request ops, match.json, aggregated routes); "%2F" and the
query as received."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

ABOVE = 'the path climbs above /'


def ok(name):
    return answer(lambda req: http_response(200, ('{"up":"%s"}' % name).encode()))


@T.case
def dot_segments_choose_the_route(env):
    orders = env.scripted(default=ok('orders'))
    other = env.scripted(default=ok('other'))
    conf = upstream_config(orders.address, routes=[
        {'name': 'orders', 'match': {'path_prefix': '/v1/orders/'}, 'upstream': 'app'},
        {'name': 'v1', 'match': {'path_prefix': '/v1/'}, 'upstream': 'other'}])
    conf['upstreams']['other'] = {'servers': [other.address]}
    gw = env.daemon(conf)
    c = env.client(gw.port)

    r = c.request('GET', '/v1/orders/../../debug/vars', [('Host', 'h'), ('X-Request-Id', 'd-1')])
    env.gateway_error('/v1/orders/../../debug/vars is /debug/vars: no route takes it', r, 404,
                      'no_route', 'no route matches the request', close=False, request_id='d-1')
    r = c.request('GET', '/v1/orders/../../../debug/vars', [('Host', 'h'),
                                                            ('X-Request-Id', 'd-2')])
    env.gateway_error('a path above the root', r, 400, 'bad_request', ABOVE, close=False,
                      request_id='d-2')
    r = c.request('GET', '/v1/orders/%2e%2E/%2E%2e/%2e./debug/vars',
                  [('Host', 'h'), ('X-Request-Id', 'd-3')])
    env.gateway_error('a path above the root in %2e', r, 400, 'bad_request', ABOVE, close=False,
                      request_id='d-3')
    env.eq('none of them went upstream', len(orders.requests) + len(other.requests), 0)

    for target, up, want in [
            ('/v1/orders/./1/../2', orders, '/v1/orders/2'),
            ('/v1/orders/%2e%2e/x', other, '/v1/x'),
            ('/v1/orders/.%2E/x', other, '/v1/x'),
            ('/v1/x/%2e%2e/y', other, '/v1/y'),
            ('/v1/x/%2E%2E/orders/7', orders, '/v1/orders/7'),
            ('/v1//orders/1', orders, '/v1/orders/1'),
            ('/v1/orders//../x', other, '/v1/x'),
            ('/v1/orders/..%2Fx', orders, '/v1/orders/..%2Fx'),
            ('/v1/orders/a/.?next=/../../x&y=%2e%2e', orders,
             '/v1/orders/a/?next=/../../x&y=%2e%2e'),
            ('/v1/orders/2.json', orders, '/v1/orders/2.json'),
            ('/v1/orders/.well-known/..x', orders, '/v1/orders/.well-known/..x')]:
        before = (len(orders.requests), len(other.requests))
        r = c.request('GET', target, [('Host', 'h')])
        env.eq('%s: the route of %s' % (target, want), (r.status, r.body),
               (200, b'{"up":"orders"}' if up is orders else b'{"up":"other"}'))
        env.eq('%s: one request upstream' % target, (len(orders.requests), len(other.requests)),
               (before[0] + (up is orders), before[1] + (up is other)))
        env.eq('%s: the target upstream' % target, up.requests[-1].target if up.requests else None,
               want)


@T.case
def exact_bytes_upstream(env):
    """The head is rewritten in place: every other byte reaches the upstream as sent."""
    up = env.scripted(default=ok('app'))
    gw = env.daemon(upstream_config(up.address))
    c = env.client(gw.port)
    c.send(b'\r\nPOST /a/b/./../c/%2e/d?q=/./ HTTP/1.1\r\nHost: h.example\r\nX-Request-Id: raw-1\r\n'
           b'X-A: /../\r\nContent-Length: 7\r\n\r\n{"a":1}')
    r = c.read_response()
    env.eq('status', r.status, 200)
    env.eq('the request upstream', up.requests[0].raw if up.requests else None,
           b'POST /a/c/d?q=/./ HTTP/1.1\r\nHost: h.example\r\nX-A: /../\r\n'
           b'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Request-Id: raw-1\r\n'
           b'Content-Length: 7\r\n\r\n{"a":1}')
    # pipelined: the second request's head starts where the first one's body ended
    c.send(b'GET /x/../a%2Fb HTTP/1.1\r\nHost: h\r\n\r\nGET /a%2Fb HTTP/1.1\r\nHost: h\r\n\r\n'
           b'GET http://h.example/p/../q?r HTTP/1.1\r\nHost: h.example\r\n\r\n')
    for i in range(3):
        env.eq('pipelined %d: status' % i, c.read_response().status, 200)
    env.eq('%2F kept, the absolute-form sent as origin-form, normal',
           [q.target for q in up.requests[1:]], ['/a%2Fb', '/a%2Fb', '/q?r'])


@T.case
def strip_prefix_templates_and_request_ops(env):
    up = env.scripted(default=answer(lambda req: http_response(200, req.body or b'{}')))
    conf = upstream_config(up.address, routes=[
        {'name': 'api', 'match': {'path_prefix': '/api/'}, 'strip_prefix': '/api',
         'upstream': 'app'},
        {'name': 'user', 'match': {'path': '/users/{id}'}, 'upstream': 'app',
         'request_headers': {'set': {'X-Id': '$path.id'}}},
        {'name': 'ops', 'match': {'path_prefix': '/ops/'}, 'upstream': 'app',
         'request': [{'set': {'seen': 1}}]},
        {'name': 'json', 'match': {'path': '/j/x', 'json': {'field': 'type', 'in': ['a']}},
         'upstream': 'app', 'request_headers': {'set': {'X-Route': '$route'}}}])
    gw = env.daemon(conf)
    c = env.client(gw.port)

    r = c.request('GET', '/api/v/../w', [('Host', 'h')])
    env.eq('strip_prefix applied to the normal path', (r.status, up.requests[-1].target),
           (200, '/w'))
    r = c.request('GET', '/api/../users/5', [('Host', 'h')])
    env.eq('a path leaving the prefix takes the route of where it lands',
           (r.status, up.requests[-1].target, up.requests[-1].header('X-Id')),
           (200, '/users/5', '5'))
    r = c.request('GET', '/users/1/%2e%2e/7', [('Host', 'h')])
    env.eq('a template captures from the normal path',
           (r.status, up.requests[-1].target, up.requests[-1].header('X-Id')),
           (200, '/users/7', '7'))
    r = c.request('POST', '/ops/./a/../b', [('Host', 'h'), ('Content-Type', 'application/json')],
                  b'{"n":1}')
    env.eq('request ops: the head sent after the body is the normal one',
           (r.status, up.requests[-1].target, up.requests[-1].body),
           (200, '/ops/b', b'{"n":1,"seen":1}'))
    # match.json waits for the body: the head is parsed again once it came
    c.send(b'POST /j/../j/./x HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n'
           b'Content-Length: 12\r\n\r\n')
    time.sleep(0.05 * SLOW)   # not synchronisation: either way the answer is the same
    c.send(b'{"type":"a"}')
    r = c.read_response()
    env.eq('a route decided by a body field after the head',
           (r.status, up.requests[-1].target, up.requests[-1].header('X-Route')),
           (200, '/j/x', 'json'))


@T.case
def aggregated_route(env):
    users = env.scripted(default=answer(lambda req: http_response(200, b'{"name":"n"}')))
    conf = upstream_config('127.0.0.1:1', routes=[{
        'name': 'dash', 'match': {'path': '/d/{id}'}, 'backends': {
            'user': {'upstream': 'users', 'path': '/u/${path.id}'}}}])
    conf['upstreams'] = {'users': {'servers': [users.address]}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('GET', '/d/1/%2E%2e/7', [('Host', 'h')])
    env.eq('the route and its capture from the normal path',
           (r.status, r.body, users.requests[-1].target if users.requests else None),
           (200, b'{"user":{"name":"n"}}', '/u/7'))
    r = c.request('GET', '/x/../../d/7', [('Host', 'h'), ('X-Request-Id', 'agg-2')])
    env.gateway_error('above the root', r, 400, 'bad_request', ABOVE, close=False,
                      request_id='agg-2')
    env.eq('one backend request in all', len(users.requests), 1)


@T.case
def access_log_keeps_the_target_as_received(env):
    up = env.scripted(default=ok('app'))
    path = os.path.join(env.tmp, 'access.json.log')
    gw = env.daemon(upstream_config(up.address, log={'level': 'info', 'access': path,
                                                     'format': 'json'}))
    c = env.client(gw.port)
    c.request('GET', '/a/./b/../c?x', [('Host', 'h')])
    c.request('GET', '/../x', [('Host', 'h')])

    def two_lines():
        with open(path) as f:
            lines = f.read().splitlines()
        return lines if len(lines) >= 2 else None
    lines = wait_until(lambda: os.path.exists(path) and two_lines(), 5 * SLOW) or []
    env.eq('the log names the target as the client sent it',
           [(json.loads(l).get('path'), json.loads(l).get('status')) for l in lines],
           [('/a/./b/../c?x', 200), ('/../x', 400)])
    env.eq('the upstream got the normal one', [q.target for q in up.requests], ['/a/c?x'])


T.run()
