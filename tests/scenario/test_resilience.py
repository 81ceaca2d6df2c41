"""Upstream resilience: failover after failed connects, retries (retry_on,
idempotency, the retry budget, per-try timeouts), passive health (ejection,
max_ejected_percent, panic), Retry-After, backups, circuit breaking
(max_connections, max_pending, the queue), active health checks with a JSON
expectation, balancing (least_conn, hash), and the metrics and logs that show
it all."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

OK = http_response(200, b'{"ok":true}', [('Content-Type', 'application/json')])


def ok_from(name):
    """An answer naming the server, so that a test sees who answered."""
    return answer(http_response(200, ('{"server":"%s"}' % name).encode(),
                                [('Content-Type', 'application/json')]))


def with_admin(conf):
    port = free_port()
    conf['admin'] = {'listen': '127.0.0.1:%d' % port}
    return conf, port


def metrics(port):
    c = Client(port)
    try:
        r = c.request('GET', '/metrics', [('Host', 'admin')])
    finally:
        c.close()
    out = {}
    for line in r.body.decode().splitlines():
        if line.startswith('#') or not line:
            continue
        key, _, val = line.rpartition(' ')
        out[key] = float(val)
    return out


def metric(port, name, **labels):
    key = name
    if labels:
        key += '{' + ','.join('%s="%s"' % kv for kv in labels.items()) + '}'
    return metrics(port).get(key)


def dead_address():
    """An address where nothing listens: connects are refused."""
    return '127.0.0.1:%d' % free_port()


def get(env, gw, path='/x', method='GET', headers=(), body=None):
    c = env.client(gw.port)
    r = c.request(method, path, [('Host', 'a')] + list(headers), body=body)
    c.close()
    return r


@T.case
def failover_from_a_refusing_server(env):
    up = env.scripted(default=ok_from('live'))
    dead = dead_address()
    conf, aport = with_admin(upstream_config(dead, up.address))
    conf['log']['access'] = os.path.join(env.tmp, 'access.log')
    gw = env.daemon(conf)
    statuses = [get(env, gw, '/g%d' % i).status for i in range(40)]
    statuses += [get(env, gw, '/p%d' % i, 'POST', [('Content-Length', '2')], b'{}').status
                 for i in range(20)]
    env.eq('40 GETs and 20 POSTs with one server refusing: all 200', statuses, [200] * 60)
    env.eq('the live server got every request', len(up.requests), 60)
    env.check('the dead server was ejected once and logged',
              gw.wait_log(r'upstream app: server %s ejected for 10s after 1 connect error'
                          % re.escape(dead)))
    env.eq('ejections_total', metric(aport, 'jsongate_upstream_ejections_total',
                                     upstream='app', server=dead), 1)
    env.eq('server_up of the dead one', metric(aport, 'jsongate_upstream_server_up',
                                               upstream='app', server=dead), 0)
    env.eq('server_up of the live one', metric(aport, 'jsongate_upstream_server_up',
                                               upstream='app', server=up.address), 1)
    env.eq('one failover counted', metric(aport, 'jsongate_upstream_retries_total',
                                          upstream='app', reason='connect_error'), 1)
    with open(conf['log']['access']) as f:
        lines = [json.loads(line) for line in f]
    tried = [line['upstream'] for line in lines]
    env.check('the access log lists both servers for the request that failed over',
              '%s, %s' % (dead, up.address) in tried, tried[:3])


@T.case
def every_server_refusing(env):
    conf = upstream_config(dead_address(), dead_address())
    gw = env.daemon(conf)
    r = get(env, gw)
    env.gateway_error('both refused', r, 502, 'upstream_unavailable',
                      'connect to upstream app refused', close=False)
    env.check('each server was tried once', len(re.findall(r'connect to upstream app server',
                                                         gw.log())) == 2, gw.log()[-800:])


@T.case
def retry_after_reset_only_when_idempotent(env):
    a = env.scripted(default=close_before_answer())
    b = env.scripted(default=ok_from('b'))
    conf, aport = with_admin(upstream_config(a.address, b.address,
                                             timeouts={'upstream_connect': '2s',
                                                       'upstream_response': '10s',
                                                       'shutdown_grace': '5s'}))
    conf['upstreams']['app']['max_fails'] = 0      # keep both in service
    gw = env.daemon(conf)
    for i in range(4):
        r = get(env, gw, '/get%d' % i)
        env.eq('GET %d answered by a server that works' % i, (r.status, r.body),
               (200, b'{"server":"b"}'))
    env.eq('a saw the GETs that went to it first', len(a.requests), 2)
    posts = [get(env, gw, '/post%d' % i, 'POST', [('Content-Length', '2')], b'{}')
             for i in range(4)]
    env.eq('POSTs are not sent twice: half fail', sorted(r.status for r in posts),
           [200, 200, 502, 502])
    keyed = [get(env, gw, '/keyed%d' % i, 'POST', [('Content-Length', '2'),
                                                    ('Idempotency-Key', 'k%d' % i)], b'{}')
             for i in range(4)]
    env.eq('POSTs with Idempotency-Key are retried', [r.status for r in keyed], [200] * 4)
    env.eq('the kept body reached b intact', b.requests[-1].body, b'{}')
    env.eq('retries counted as resets', metric(aport, 'jsongate_upstream_retries_total',
                                               upstream='app', reason='reset'), 4)


def stale_pair(env, second, **upstream):
    """One server whose second request (on the pooled connection of the first) takes the
    step second; then it answers."""
    a = env.scripted([answer(OK), second], default=answer(OK))
    conf, aport = with_admin(upstream_config(a.address))
    conf['upstreams']['app'].update(upstream)
    return a, env.daemon(conf), aport


def seen(up):
    return [(r.method, r.target, r.conn) for r in up.requests]


@T.case
def stale_connection_retried_as_nginx(env):
    """A reused pooled connection reset with no answer byte: one extra try on a new
    connection that uses up no retries, counted as stale, no server failure."""
    a, gw, aport = stale_pair(env, reset(), retries=0)
    statuses = [get(env, gw, '/%d' % i, 'DELETE').status for i in range(2)]
    env.eq('both answered', statuses, [200, 200])
    env.eq('the second sent again on a new connection', seen(a),
           [('DELETE', '/0', 0), ('DELETE', '/1', 0), ('DELETE', '/1', 1)])
    env.eq('counted as a stale retry', metric(aport, 'jsongate_upstream_retries_total',
                                              upstream='app', reason='stale'), 1)
    env.eq('no reset retry counted', metric(aport, 'jsongate_upstream_retries_total',
                                            upstream='app', reason='reset'), None)
    env.eq('no ejection (max_fails 1)', metric(aport, 'jsongate_upstream_ejections_total',
                                               upstream='app', server=a.address), 0)


@T.case
def stale_connection_not_retried_without_reset_in_retry_on(env):
    a, gw, aport = stale_pair(env, reset(), retries=0, retry_on=['connect_error'])
    env.eq('first answered', get(env, gw, '/0', 'DELETE').status, 200)
    r = get(env, gw, '/1', 'DELETE')
    env.gateway_error('a reset is not in retry_on: the error', r, 502, 'upstream_unavailable',
                      'upstream app closed the connection before answering', close=False)
    env.eq('the DELETE reached the server once', seen(a),
           [('DELETE', '/0', 0), ('DELETE', '/1', 0)])
    env.eq('no retry counted', [k for k in metrics(aport)
                                if k.startswith('jsongate_upstream_retries_total')], [])


@T.case
def stale_connection_never_retries_a_post(env):
    a, gw, aport = stale_pair(env, reset())
    post = lambda i: get(env, gw, '/%d' % i, 'POST', [('Content-Length', '2')], b'{}')
    env.eq('first answered', post(0).status, 200)
    env.gateway_error('a POST is not sent twice', post(1), 502, 'upstream_unavailable',
                      'upstream app closed the connection before answering', close=False)
    env.eq('sent once', seen(a), [('POST', '/0', 0), ('POST', '/1', 0)])


@T.case
def stale_connection_retry_not_charged_to_the_budget(env):
    """The extra try after a stale pooled connection is the try the pool could not carry,
    no retry on top of a server's load: a budget of nothing allows it."""
    a, gw, aport = stale_pair(env, reset(), retry_budget={'percent': 0, 'min': 0})
    env.eq('first answered', get(env, gw, '/0').status, 200)
    env.eq('no budget: the extra try still goes', get(env, gw, '/1').status, 200)
    env.eq('sent again on a new connection', seen(a),
           [('GET', '/0', 0), ('GET', '/1', 0), ('GET', '/1', 1)])
    env.eq('counted as a stale retry', metric(aport, 'jsongate_upstream_retries_total',
                                              upstream='app', reason='stale'), 1)
    env.eq('no budget exhaustion', metric(
        aport, 'jsongate_upstream_retry_budget_exhausted_total', upstream='app'), 0)


@T.case
def reset_failover_from_an_ejected_server_not_charged(env):
    """A reset that ejects its server (max_fails 1) moves the request away from a server
    that gets nothing more: a failover the budget does not refuse.  While the server stays
    in service (max_fails 2), the same retry is charged and, with no budget, refused."""
    for max_fails, want in ((1, [200, 200]), (2, [502, 200])):
        a = env.scripted(default=reset())
        b = env.scripted(default=ok_from('b'))
        conf, aport = with_admin(upstream_config(a.address, b.address))
        conf['upstreams']['app'].update(max_fails=max_fails, balance='round_robin',
                                        retry_budget={'percent': 0, 'min': 0})
        gw = env.daemon(conf)
        env.eq('max_fails %d: the GET a resets, then one b answers' % max_fails,
               [get(env, gw, '/%d' % i).status for i in range(2)], want)
        env.eq('max_fails %d: a got one request' % max_fails, len(a.requests), 1)
        env.eq('max_fails %d: reset retries' % max_fails, metric(
            aport, 'jsongate_upstream_retries_total', upstream='app', reason='reset'),
            1 if max_fails == 1 else None)
        env.eq('max_fails %d: budget exhaustions' % max_fails, metric(
            aport, 'jsongate_upstream_retry_budget_exhausted_total', upstream='app'),
            0 if max_fails == 1 else 1)


@T.case
def stale_connection_not_retried_after_the_answer_started(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n'
    a, gw, aport = stale_pair(env, reset_after(head + b'{"a"'), max_fails=0)
    env.eq('first answered', get(env, gw, '/0').status, 200)
    c = env.client(gw.port)
    r = c.request('GET', '/1', [('Host', 'a')])
    env.eq('the head went out: the answer is cut short, not sent again',
           (r.status, r.body, r.complete), (200, b'{"a"', False))
    env.eq('sent once', seen(a), [('GET', '/0', 0), ('GET', '/1', 0)])


@T.case
def stale_connection_in_an_aggregated_route(env):
    a = env.scripted([answer(OK), reset()], default=answer(OK))
    conf = upstream_config(a.address, routes=[{'name': 'agg', 'match': {'path': '/agg'},
                                               'backends': {'x': {'upstream': 'app',
                                                                  'path': '/x'}}}])
    conf['upstreams']['app'].update(retry_on=['connect_error'])
    gw = env.daemon(conf)
    env.eq('first answered', get(env, gw, '/agg').status, 200)
    env.eq('a reset is not in retry_on: the backend fails', get(env, gw, '/agg').status, 502)
    env.eq('its request went once', seen(a), [('GET', '/x', 0), ('GET', '/x', 0)])


CHUNKED_PUT = (b'PUT /doc HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n'
               b'6;ext=1\r\nhello \r\n8\r\nworld!!!\r\n0\r\nX-Trailer: t\r\n\r\n')


@T.case
def chunked_body_kept_for_a_retry(env):
    a = env.scripted(default=reset())
    b = env.scripted(default=ok_from('b'))
    conf, aport = with_admin(upstream_config(a.address, b.address))
    conf['upstreams']['app']['max_fails'] = 0
    gw = env.daemon(conf)
    c = env.client(gw.port)
    c.send(CHUNKED_PUT)
    r = c.read_response()
    env.eq('a chunked PUT reset by the first server is answered by the other',
           (r.status, r.body), (200, b'{"server":"b"}'))
    for name, up in (('first', a), ('second', b)):
        req = up.requests[0]
        env.eq('the %s server got the body de-chunked with a Content-Length' % name,
               (req.framing, req.header('Content-Length'), req.header('Transfer-Encoding'),
                req.body), ('length', '14', None, b'hello world!!!'))
    env.eq('counted as a reset retry', metric(aport, 'jsongate_upstream_retries_total',
                                              upstream='app', reason='reset'), 1)
    c.send(CHUNKED_PUT.replace(b'/doc', b'/again'))
    env.eq('the connection goes on', c.read_response().status, 200)


@T.case
def large_body_within_retry_body_kept(env):
    """A 300 KB PUT with a Content-Length under retry_body: 1m is kept whole for another try
    (the client's input grows to hold it): each of four, reset by one server, is answered by
    the other with the body byte for byte."""
    a = env.scripted(default=reset())
    b = env.scripted(default=ok_from('b'))
    conf = upstream_config(a.address, b.address)
    conf['upstreams']['app'].update(max_fails=0, retry_body='1m')
    gw = env.daemon(conf)
    body = (pattern_block() * 5)[:300 * 1024]
    for i in range(4):
        c = env.client(gw.port)
        r = c.request('PUT', '/big%d' % i, [('Host', 'a')], body=body, timeout=10)
        env.eq('PUT %d answered by the other server' % i, (r.status, r.body),
               (200, b'{"server":"b"}'))
    env.eq('the other server got each body whole',
           [(q.target, q.body == body) for q in b.requests],
           [('/big%d' % i, True) for i in range(4)])


@T.case
def chunked_body_over_retry_body_streams(env):
    a = env.scripted(default=reset())
    b = env.scripted(default=ok_from('b'))
    conf = upstream_config(a.address, b.address)
    conf['upstreams']['app'].update(max_fails=0, retry_body=8)
    gw = env.daemon(conf)
    c = env.client(gw.port)
    c.send(CHUNKED_PUT)
    env.gateway_error('over retry_body: sent once, not tried again', c.read_response(), 502,
                      'upstream_unavailable',
                      'upstream app closed the connection before answering', close=False)
    req = a.requests[0]
    env.eq('what came first went as one chunk, the rest chunked',
           (req.framing, req.chunks, req.body), ('chunked', [14, 0], b'hello world!!!'))
    env.eq('the other server got nothing', len(b.requests), 0)


@T.case
def retry_budget_stops_retries(env):
    a = env.scripted(default=close_before_answer())
    b = env.scripted(default=ok_from('b'))
    conf, aport = with_admin(upstream_config(a.address, b.address))
    conf['upstreams']['app'].update(max_fails=0, retry_budget={'percent': 0, 'min': 0})
    gw = env.daemon(conf)
    statuses = [get(env, gw, '/%d' % i).status for i in range(4)]
    env.eq('no retry without budget: the tries on a fail', sorted(statuses), [200, 200, 502, 502])
    env.eq('budget exhaustion counted', metric(
        aport, 'jsongate_upstream_retry_budget_exhausted_total', upstream='app'), 2)
    env.check('logged', gw.wait_log(r'upstream app: retry budget exhausted'))


@T.case
def retry_on_status_and_retry_after(env):
    busy = http_response(503, b'{"busy":true}', [('Retry-After', '30')])
    a = env.scripted(default=answer(busy))
    b = env.scripted(default=ok_from('b'))
    conf, aport = with_admin(upstream_config(a.address, b.address))
    conf['upstreams']['app'].update(retry_on=['connect_error', 'timeout', 'reset', 503])
    gw = env.daemon(conf)
    statuses = [get(env, gw, '/%d' % i).status for i in range(6)]
    env.eq('503 retried on the other server', statuses, [200] * 6)
    env.eq('after its Retry-After, a gets nothing more', len(a.requests), 1)
    env.eq('status retry counted under its status', metric(
        aport, 'jsongate_upstream_retries_total', upstream='app', reason='503'), 1)


@T.case
def retries_counted_by_status(env):
    a = env.scripted([answer(http_response(status, b'{}')) for status in (429, 502, 503, 504)],
                     default=ok_from('a'))
    b = env.scripted(default=ok_from('b'))
    conf, aport = with_admin(upstream_config(a.address, b.address))
    conf['upstreams']['app'].update(max_fails=0, retry_on=[429, 502, 503, 504])
    gw = env.daemon(conf)
    statuses = [get(env, gw, '/%d' % i).status for i in range(12)]
    env.eq('each failing status retried on the other server', statuses, [200] * 12)
    env.check('a answered its four statuses', len(a.requests) >= 4, len(a.requests))
    m = metrics(aport)
    env.eq('one retry under each status', [m.get('jsongate_upstream_retries_total{upstream="app",'
                                                 'reason="%s"}' % s) for s in
                                           ('429', '502', '503', '504')], [1, 1, 1, 1])
    env.eq('no lumped status reason', [k for k in m if 'reason="status"' in k], [])


@T.case
def status_not_in_retry_on_passes_through(env):
    a = env.scripted(default=answer(http_response(503, b'{"busy":true}')))
    gw = env.daemon(upstream_config(a.address))
    r = get(env, gw)
    env.eq('a 503 reaches the client as it is', (r.status, r.body), (503, b'{"busy":true}'))


@T.case
def last_status_kept_when_no_server_left(env):
    a = env.scripted(default=answer(http_response(503, b'{"busy":"a"}')))
    conf = upstream_config(a.address)
    conf['upstreams']['app'].update(retry_on=[503])
    gw = env.daemon(conf)
    r = get(env, gw)
    env.eq('one server: its 503 is the answer', (r.status, r.body), (503, b'{"busy":"a"}'))


@T.case
def per_try_timeout_moves_on(env):
    a = env.scripted(default=answer(OK, delay=3))
    b = env.scripted(default=ok_from('b'))
    conf = upstream_config(a.address, b.address,
                           timeouts={'upstream_connect': '2s', 'upstream_response': '10s',
                                     'upstream_try': '300ms', 'shutdown_grace': '5s'})
    conf['upstreams']['app']['max_fails'] = 0
    gw = env.daemon(conf)
    statuses = [get(env, gw, '/%d' % i).status for i in range(2)]
    env.eq('a slow server: the try times out and b answers', statuses, [200, 200])
    env.check('logged as a timeout', gw.wait_log(r'upstream app server %s did not answer in time'
                                                 % re.escape(a.address)))


@T.case
def per_try_timeout_bounds_the_connect(env):
    """upstream_try covers the connect: a connect that hangs ends at the try's deadline,
    well before upstream_connect (60s, longer than the client waits)."""
    lst, fillers = blackhole()
    env.held.extend([lst] + fillers)
    hole = '127.0.0.1:%d' % lst.getsockname()[1]
    good = env.scripted(default=ok_from('good'))
    timeouts = {'upstream_connect': '60s', 'upstream_response': '10s', 'upstream_try': '300ms',
                'shutdown_grace': '5s'}
    conf, aport = with_admin(upstream_config(hole, good.address, timeouts=timeouts))
    gw = env.daemon(conf)
    c = env.client(gw.port, timeout=5)
    r = c.request('GET', '/first', [('Host', 'a')])
    env.eq('the hanging connect fails over at the try deadline', (r.status, r.body),
           (200, b'{"server":"good"}'))
    env.check('logged as a connect timeout', gw.wait_log(
        r'connect to upstream app server %s timed out' % re.escape(hole)))
    env.eq('counted as a connect failover', metric(aport, 'jsongate_upstream_retries_total',
                                                   upstream='app', reason='connect_error'), 1)
    alone = env.daemon(upstream_config(hole, timeouts=timeouts))
    c = env.client(alone.port, timeout=5)
    env.gateway_error('no other server: 504 at the try deadline',
                      c.request('GET', '/alone', [('Host', 'a')]), 504, 'upstream_timeout',
                      'connect to upstream app timed out', close=False)


@T.case
def passive_5xx_ejection_and_max_ejected_percent(env):
    bad = env.scripted(default=answer(http_response(500, b'{}')))
    good = [env.scripted(default=ok_from('g%d' % i)) for i in range(3)]
    conf, aport = with_admin(upstream_config(bad.address, *[g.address for g in good]))
    conf['upstreams']['app'].update(fail_on=['5xx'], max_fails=2, fail_timeout='30s',
                                    max_ejected_percent=25)
    gw = env.daemon(conf)
    for i in range(16):
        get(env, gw, '/%d' % i)
    env.eq('the server answering 500 was ejected after 2 of them', len(bad.requests), 2)
    env.check('logged with the reason', gw.wait_log(
        r'server %s ejected for 30s after 2 error statuses' % re.escape(bad.address)))
    for g in good:
        g.default = answer(http_response(500, b'{}'))
    for i in range(24):
        get(env, gw, '/later%d' % i)
    up = [metric(aport, 'jsongate_upstream_server_up', upstream='app', server=s.address)
          for s in [bad] + good]
    env.eq('max_ejected_percent 25 of 4: only one server ejected at a time', up,
           [0, 1, 1, 1])
    refused = re.findall(r'upstream app: server (\S+) not ejected after 2 error statuses: '
                         r'max_ejected_percent 25 keeps it in service', gw.log())
    env.eq('each server kept in service logged once, not at each further failure',
           sorted(refused), sorted(g.address for g in good))


@T.case
def panic_when_every_server_is_out(env):
    a = env.scripted(default=answer(http_response(500, b'{}')))
    b = env.scripted(default=answer(http_response(500, b'{}')))
    conf = upstream_config(a.address, b.address)
    conf['upstreams']['app'].update(fail_on=['5xx'], max_fails=1, fail_timeout='60s',
                                    max_ejected_percent=100)
    gw = env.daemon(conf)
    for i in range(2):
        get(env, gw, '/%d' % i)
    env.require('both ejected', len(re.findall('ejected for', gw.log())) == 2, gw.log()[-600:])
    a.default = ok_from('a')
    b.default = ok_from('b')
    statuses = [get(env, gw, '/after%d' % i).status for i in range(4)]
    env.eq('every server out: they are tried anyway', statuses, [200] * 4)


@T.case
def backup_only_while_primaries_are_out(env):
    primary = env.scripted(default=ok_from('primary'))
    backup = env.scripted(default=ok_from('backup'))
    conf = upstream_config(primary.address, {'address': backup.address, 'backup': True})
    gw = env.daemon(conf)
    bodies = {get(env, gw, '/%d' % i).body for i in range(6)}
    env.eq('the backup takes nothing while the primary works', bodies,
           {b'{"server":"primary"}'})
    primary.stop()
    bodies = [get(env, gw, '/down%d' % i).body for i in range(4)]
    env.eq('primary down: the backup answers', bodies, [b'{"server":"backup"}'] * 4)


@T.case
def max_connections_and_the_queue(env):
    a = env.scripted([answer(OK, delay=1.0)], default=answer(OK))
    conf, aport = with_admin(upstream_config(a.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'queue': '3s',
        'shutdown_grace': '5s'}))
    conf['upstreams']['app'].update(max_connections=1, max_pending=1)
    gw = env.daemon(conf)
    slow = env.client(gw.port)
    slow.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('the slow request is in flight', wait_until(lambda: a.requests, 5))
    queued = env.client(gw.port)
    queued.send(build_request('GET', '/queued', [('Host', 'a')]))
    env.require('the second request waits', wait_until(
        lambda: metric(aport, 'jsongate_upstream_requests_in_flight', upstream='app',
                       server=a.address) == 1, 5))
    r = get(env, gw, '/overflow')
    env.gateway_error('max_pending 1: a third request gets 503 at once', r, 503,
                      'upstream_overloaded', 'every upstream server is at its limit', close=False)
    env.eq('slow one answered', slow.read_response().status, 200)
    env.eq('queued one answered after it', queued.read_response().status, 200)
    env.eq('overloaded counted', metric(aport, 'jsongate_upstream_overloaded_total',
                                        upstream='app'), 1)


@T.case
def queue_wait_runs_out(env):
    a = env.scripted([hang()], default=answer(OK))
    conf = upstream_config(a.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '10s', 'queue': '200ms',
        'shutdown_grace': '5s'})
    conf['upstreams']['app'].update(max_connections=1)
    gw = env.daemon(conf)
    hung = env.client(gw.port)
    hung.send(build_request('GET', '/hang', [('Host', 'a')]))
    env.require('the first request holds the only place', wait_until(lambda: a.requests, 5))
    start = time.monotonic()
    r = get(env, gw, '/waits')
    env.gateway_error('queued past timeouts.queue: 503', r, 503, 'upstream_overloaded',
                      'every upstream server is at its limit', close=False)
    env.check('it waited for the queue timeout', time.monotonic() - start >= 0.15,
              time.monotonic() - start)


def health_answer(state, name='checked'):
    """A /health answer following state['status'] and state['body'] (chunked when
    state['chunked'])."""
    def make(req):
        if req.target == '/health':
            return http_response(state['status'], state['body'],
                                 [('Content-Type', 'application/json')],
                                 chunked=state.get('chunked', False))
        return http_response(200, ('{"server":"%s"}' % name).encode(),
                             [('Content-Type', 'application/json')])
    return answer(make)


@T.case
def active_health_checks_with_json(env):
    state = {'status': 200, 'body': b'{"status":"ok","db":{"up":true}}'}
    checked = env.scripted(default=health_answer(state))
    other = env.scripted(default=health_answer({'status': 200, 'body': b'{"status":"ok"}'},
                                               'other'))
    conf, aport = with_admin(upstream_config(checked.address, other.address))
    conf['upstreams']['app']['health'] = {
        'path': '/health', 'interval': '50ms', 'timeout': '1s', 'fails': 2, 'passes': 2,
        'expect': {'status': ['200..299'], 'json': {'field': 'status', 'equals': 'ok'}}}
    gw = env.daemon(conf)
    env.require('checks run', wait_until(lambda: metric(
        aport, 'jsongate_upstream_health_checks_total', upstream='app', server=checked.address,
        result='passed'), 5))
    check = [r for r in checked.requests if r.target == '/health'][0]
    env.eq('the check request', check.head.decode().split('\r\n')[0], 'GET /health HTTP/1.1')
    env.eq('checks close their connection', check.header('Connection'), 'close')
    bodies = {get(env, gw, '/%d' % i).body for i in range(4)}
    env.eq('both servers in service', len(bodies), 2)

    state['body'] = b'{"status":"degraded"}'
    env.require('a JSON field that differs takes it out', wait_until(lambda: metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=checked.address) == 0, 5))
    env.check('logged once with the reason', gw.wait_log(
        r'server %s failed 2 health checks \(JSON answer not as expected\): out of service'
        % re.escape(checked.address)))
    bodies = {get(env, gw, '/out%d' % i).body for i in range(4)}
    env.eq('no requests to a server failing its checks', bodies, {b'{"server":"other"}'})

    state['body'] = b'{"status":"ok"}'
    env.require('passing again brings it back', wait_until(lambda: metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=checked.address) == 1, 5))
    env.check('logged', gw.wait_log(r'server %s passed 2 health checks: back in service'
                                    % re.escape(checked.address)))
    state['status'] = 500
    env.require('a status outside expect.status takes it out', wait_until(lambda: metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=checked.address) == 0, 5))


@T.case
def health_checks_read_chunked_answers(env):
    """A health answer in chunks is de-chunked before expect.json looks at it; one whose
    framing is broken fails the check."""
    state = {'status': 200, 'body': b'{"status":"ok"}', 'chunked': True}
    checked = env.scripted(default=health_answer(state))
    conf, aport = with_admin(upstream_config(checked.address))
    conf['upstreams']['app']['health'] = {
        'path': '/health', 'interval': '50ms', 'timeout': '1s', 'fails': 1, 'passes': 1,
        'expect': {'json': {'field': 'status', 'equals': 'ok'}}}
    env.daemon(conf)

    def checks(result):
        return metric(aport, 'jsongate_upstream_health_checks_total', upstream='app',
                      server=checked.address, result=result) or 0
    env.require('a chunked answer that holds the field passes', wait_until(
        lambda: checks('passed') >= 2, 5 * SLOW))
    env.eq('and none failed', checks('failed'), 0)
    state['body'] = b'{"status":"down"}'
    env.require('a chunked answer that does not, fails', wait_until(
        lambda: checks('failed') >= 1, 5 * SLOW))


@T.case
def health_json_expectation_by_value(env):
    """expect.json is a condition as match.json and when: have: numbers compare by value,
    strings decoded, and every test (type, all) is there."""
    answers = {
        'by_value': b'{"code":1.0,"state":"\\u006fk","db":{}}',
        'a_string': b'{"code":"1","state":"ok","db":{}}',
        'not_object': b'{"code":10e-1,"state":"ok","db":[]}',
        'not_json': b'{"code":1,',
    }
    ups = {name: env.scripted(default=ok_from(name), health=(200, body))
           for name, body in answers.items()}
    conf, aport = with_admin(upstream_config(*[up.address for up in ups.values()]))
    conf['upstreams']['app']['health'] = {
        'path': '/health', 'interval': '50ms', 'fails': 1, 'passes': 1,
        'expect': {'json': {'all': [{'field': 'code', 'equals': 1},
                                    {'field': 'state', 'equals': 'ok'},
                                    {'field': 'db', 'type': 'object'}]}}}
    gw = env.daemon(conf)

    def up_now():
        return {name: metric(aport, 'jsongate_upstream_server_up', upstream='app',
                             server=up.address) for name, up in ups.items()}
    want = {'by_value': 1, 'a_string': 0, 'not_object': 0, 'not_json': 0}
    env.require('1.0 equals 1 and "\\u006fk" equals ok; a string "1", an array where an '
                'object is expected and a cut answer fail', wait_until(
                    lambda: up_now() == want and metric(
                        aport, 'jsongate_upstream_health_checks_total', upstream='app',
                        server=ups['by_value'].address, result='passed'), 5 * SLOW), up_now())
    for name, why in (('a_string', 'JSON answer not as expected'),
                      ('not_object', 'JSON answer not as expected'),
                      ('not_json', 'answer not valid JSON')):
        env.check('%s: logged with the reason' % name, gw.wait_log(
            r'server %s failed 1 health check \(%s\): out of service'
            % (re.escape(ups[name].address), why)))
    bodies = {get(env, gw, '/%d' % i).body for i in range(4)}
    env.eq('only the server that passes gets requests', bodies, {b'{"server":"by_value"}'})
    env.eq('its checks never failed', metric(
        aport, 'jsongate_upstream_health_checks_total', upstream='app',
        server=ups['by_value'].address, result='failed'), None)


@T.case
def health_state_survives_reload(env):
    state = {'status': 500, 'body': b'{}'}
    checked = env.scripted(default=health_answer(state))
    other = env.scripted(default=health_answer({'status': 200, 'body': b'{}'}, 'other'))
    conf, aport = with_admin(upstream_config(checked.address, other.address))
    conf['upstreams']['app']['health'] = {'path': '/health', 'interval': '1s', 'fails': 1}
    gw = env.daemon(conf)
    env.require('out of service', wait_until(lambda: metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=checked.address) == 0, 5))
    conf['upstreams']['app']['health']['interval'] = '10s'
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port}]
    gw.write_config(conf)
    gw.signal(signal.SIGHUP)
    env.require('reloaded', gw.wait_log('configuration reloaded'))
    bodies = {get(env, gw, '/%d' % i).body for i in range(4)}
    env.eq('after the reload it is still out of service', bodies, {b'{"server":"other"}'})


@T.case
def reload_removing_health_checks(env):
    state = {'status': 500, 'body': b'{}'}
    checked = env.scripted(default=health_answer(state))
    other = env.scripted(default=health_answer({'status': 200, 'body': b'{}'}, 'other'))
    conf, aport = with_admin(upstream_config(checked.address, other.address))
    conf['upstreams']['app']['health'] = {'path': '/health', 'interval': '100ms', 'fails': 1}
    gw = env.daemon(conf)
    env.require('out of service', wait_until(lambda: metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=checked.address) == 0, 5))
    del conf['upstreams']['app']['health']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port}]
    gw.write_config(conf)
    gw.signal(signal.SIGHUP)
    env.require('reloaded', gw.wait_log('configuration reloaded'))
    env.check('logged', gw.wait_log(r'server %s back in service: no health checks any more'
                                    % re.escape(checked.address)))
    env.eq('server_up again', metric(aport, 'jsongate_upstream_server_up', upstream='app',
                                     server=checked.address), 1)
    bodies = sorted(get(env, gw, '/%d' % i).body for i in range(4))
    env.eq('without health: both servers take requests', bodies,
           [b'{"server":"checked"}'] * 2 + [b'{"server":"other"}'] * 2)


@T.case
def hash_balancing_is_sticky(env):
    servers = [env.scripted(default=ok_from('s%d' % i)) for i in range(3)]
    conf = upstream_config(*[s.address for s in servers])
    conf['upstreams']['app'].update(balance='hash', hash_key='$header.X-User')
    gw = env.daemon(conf)
    seen = {}
    for user in range(12):
        bodies = {get(env, gw, '/%d' % i, headers=[('X-User', 'u%d' % user)]).body
                  for i in range(3)}
        env.eq('user %d always on one server' % user, len(bodies), 1)
        seen[user] = bodies.pop()
    env.check('users spread over the servers', len(set(seen.values())) >= 2, seen)


@T.case
def least_conn_prefers_the_idle_server(env):
    """With one request held on a server, least_conn sends every other request to the idle
    one; round robin would send it every second request."""
    release = threading.Event()
    slow = env.scripted([pieces((b'', release), (OK, 0), close=False)],
                        answer(OK, delay=0.3))
    fast = env.scripted(default=ok_from('fast'))
    conf = upstream_config(slow.address, fast.address)
    conf['upstreams']['app']['balance'] = 'least_conn'
    gw = env.daemon(conf)
    busy = env.client(gw.port)
    # Both idle: the tie goes to either; ask until the slow server holds a request.
    for _ in range(40):
        taken = len(fast.requests)
        busy.send(build_request('GET', '/busy', [('Host', 'a')]))
        env.require('the busy request reached a server', wait_until(
            lambda: slow.requests or len(fast.requests) > taken, 10))
        if slow.requests:
            break
        env.eq('a busy request the fast server took is answered', busy.read_response().status,
               200)
    env.require('the slow server holds one request', len(slow.requests) == 1)
    before = len(fast.requests)
    bodies = [get(env, gw, '/%d' % i).body for i in range(10)]
    env.eq('every request meanwhile goes to the idle server', bodies,
           [b'{"server":"fast"}'] * 10)
    env.eq('the busy server got none of them', (len(slow.requests), len(fast.requests) - before),
           (1, 10))
    release.set()
    env.eq('the held request is answered once released', busy.read_response().body,
           b'{"ok":true}')


@T.case
def config_errors(env):
    bad = [
        ({'balance': 'hash'}, 'balance: hash needs hash_key'),
        ({'hash_key': '$remote_addr'}, 'hash_key is used only with balance: hash'),
        ({'balance': 'hash', 'hash_key': '$nope'}, 'expected $remote_addr, $client_addr, $request_uri'),
        ({'retry_on': ['sometimes']}, 'unknown failure "sometimes"'),
        ({'retries': 16}, 'expected an integer from 0 to 15'),
        ({'retry_budget': 'lots'}, 'expected a percent from 0 to 100'),
        ({'health': {'interval': '1s'}}, "health: missing required key 'path'"),
        ({'health': {'path': '/h', 'expect': {'status': ['2yy']}}}, 'expected a status'),
        ({'health': {'path': '/h', 'expect': {'json': {'field': 'a'}}}},
         'field needs one test: equals, in, prefix, exists or type'),
        ({'health': {'path': '/h', 'expect': {'status': ['300..200']}}},
         'status range "300..200" runs backwards'),
    ]
    for extra, message in bad:
        conf = upstream_config('127.0.0.1:1')
        conf['upstreams']['app'].update(extra)
        conf['listeners'] = [{'listen': '127.0.0.1:1'}]
        path = os.path.join(env.tmp, 'bad.yaml')
        with open(path, 'w') as f:
            f.write(to_yaml(conf))
        p = env.run([JSONGATE, '-t', '-c', path])
        out = p.stderr.decode()
        env.check('%s: -t refuses with FILE:LINE:COL' % message,
                  p.returncode == 1 and re.search(r'%s:\d+:\d+: .*%s' % (
                      re.escape(path), re.escape(message)), out), out)
    conf = upstream_config('127.0.0.1:1', {'address': '127.0.0.1:2', 'backup': True})
    conf['upstreams']['app']['servers'] = [{'address': '127.0.0.1:2', 'backup': True}]
    conf['listeners'] = [{'listen': '127.0.0.1:1'}]
    path = os.path.join(env.tmp, 'backups.yaml')
    with open(path, 'w') as f:
        f.write(to_yaml(conf))
    p = env.run([JSONGATE, '-t', '-c', path])
    env.check('only backups: refused', p.returncode == 1 and
              b'every server is a backup' in p.stderr, p.stderr)


T.run()
