"""Fault injection: one server of two fails in each way a real server does
(refuses, resets at accept, after the request or after the head, answers
garbage, a wrong Content-Length, stalls mid-body, answers slowly, closes idle
keep-alive connections, answers 503 with Retry-After, is killed and
restarted, is killed under concurrent load).  For each: the status the client
gets, which server received what, and the retries and ejections in /metrics.
Then 10,000 requests through all those faults in turn, and a health endpoint
failing and recovering, must give each its exact answer and leave no file
descriptor or memory behind."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

BODY = b'{"server":"good"}'
GOOD = answer(http_response(200, BODY, [('Content-Type', 'application/json')]))


def with_admin(conf):
    port = free_port()
    conf['admin'] = {'listen': '127.0.0.1:%d' % port}
    return conf, port


def metric(port, name, **labels):
    c = Client(port)
    try:
        r = c.request('GET', '/metrics', [('Host', 'admin')])
    finally:
        c.close()
    key = name
    if labels:
        key += '{' + ','.join('%s="%s"' % kv for kv in sorted(labels.items())) + '}'
    for line in r.body.decode().splitlines():
        k, _, v = line.rpartition(' ')
        if not line.startswith('#') and canonical(k) == key:
            return float(v)
    return 0.0


def canonical(key):
    """name{b="2",a="1"} -> name{a="1",b="2"}: labels in a fixed order."""
    if '{' not in key:
        return key
    name, _, rest = key.partition('{')
    labels = sorted(re.findall(r'(\w+="[^"]*")', rest))
    return name + '{' + ','.join(labels) + '}'


def pair(env, faulty_steps, faulty_default=None, **upstream):
    """A faulty server first and a good one; requests alternate between them."""
    bad = env.scripted(faulty_steps, faulty_default)
    good = env.scripted(default=GOOD)
    conf, aport = with_admin(upstream_config(bad.address, good.address, timeouts={
        'upstream_connect': '2s', 'upstream_response': '1s', 'shutdown_grace': '5s'}))
    conf['upstreams']['app'].update(upstream)
    return bad, good, conf, aport


def outcome(r):
    """What the client got, exactly: (status, body, complete), or None for no answer."""
    return None if r is None else (r.status, r.body, r.complete)


def invalid_error(r):
    """The exact 502 upstream_invalid a malformed answer gives (its request id is r's)."""
    rid = r.header('X-Request-Id', '') if r is not None else ''
    return (502, gateway_error_body(502, 'upstream_invalid', 'malformed response from '
                                    'upstream app', rid), True)


def get(env, gw, path, method='GET', headers=()):
    c = env.client(gw.port)
    try:
        body = b'{}' if method == 'POST' else None
        hdrs = [('Host', 'a')] + list(headers)
        if body is not None:
            hdrs.append(('Content-Length', '2'))
        return c.request(method, path, hdrs, body=body)
    except (ProtocolError, OSError, socket.timeout):
        return None
    finally:
        c.close()


@T.case
def refused_killed_and_restarted(env):
    bad, good, conf, aport = pair(env, [], GOOD, max_fails=1, fail_timeout='1s')
    gw = env.daemon(conf)
    bad.kill()
    statuses = [get(env, gw, '/%d' % i).status for i in range(10)]
    statuses += [get(env, gw, '/p%d' % i, 'POST').status for i in range(4)]
    env.eq('killed server: every GET and POST answered by the other', statuses, [200] * 14)
    env.eq('the good server got all 14', len(good.requests), 14)
    env.eq('the killed server got nothing', len(bad.requests), 0)
    env.eq('one ejection', metric(aport, 'jsongate_upstream_ejections_total', upstream='app',
                                  server=bad.address), 1)
    env.eq('one failover', metric(aport, 'jsongate_upstream_retries_total', upstream='app',
                                  reason='connect_error'), 1)
    bad.restart()
    env.require('after fail_timeout a trial request goes to it and brings it back',
                wait_until(lambda: get(env, gw, '/trial') and len(bad.requests) > 0, 5, 0.1))
    env.check('logged', gw.wait_log(r'server %s back in service after a successful trial'
                                    % re.escape(bad.address)))
    env.eq('in service again', metric(aport, 'jsongate_upstream_server_up', upstream='app',
                                      server=bad.address), 1)


@T.case
def failed_trial_ejects_for_longer(env):
    bad, good, conf, aport = pair(env, [], GOOD, max_fails=1, fail_timeout='500ms')
    gw = env.daemon(conf)
    bad.kill()
    get(env, gw, '/first')
    env.require('ejected', gw.wait_log(r'ejected for 500ms after 1 connect error'))
    env.require('the trial fails after the first ejection', wait_until(
        lambda: get(env, gw, '/t') and re.search(r'failed its trial request \(connect error\): '
                                                 r'ejected for 1s', gw.log()), 5, 0.05))
    env.eq('every request still answered', outcome(get(env, gw, '/after')),
           (200, BODY, True))
    env.eq('two ejections: the first and the failed trial', metric(
        aport, 'jsongate_upstream_ejections_total', upstream='app', server=bad.address), 2)
    env.eq('the dead server is out', metric(aport, 'jsongate_upstream_server_up',
                                            upstream='app', server=bad.address), 0)


@T.case
def reset_on_accept_and_after_request(env):
    bad, good, conf, aport = pair(env, [], reset(), max_fails=0)
    gw = env.daemon(conf)
    gets = [get(env, gw, '/g%d' % i).status for i in range(4)]
    env.eq('reset after the request: GETs retried on the good server', gets, [200] * 4)
    posts = [r.status if r else None for r in (get(env, gw, '/p%d' % i, 'POST')
                                                  for i in range(4))]
    env.eq('POSTs are not sent twice: the two on the resetting server fail', sorted(posts),
           [200, 200, 502, 502])
    env.eq('retries counted as resets', metric(aport, 'jsongate_upstream_retries_total',
                                               upstream='app', reason='reset'), 2)
    env.eq('the resetting server saw 2 GETs and 2 POSTs', [r.method for r in bad.requests],
           ['GET', 'GET', 'POST', 'POST'])

    bad2, good2, conf2, aport2 = pair(env, [], reset_on_accept(), max_fails=0)
    gw2 = env.daemon(conf2)
    answers = [outcome(get(env, gw2, '/a%d' % i)) for i in range(4)]
    env.eq('reset at accept: GETs answered by the other server', answers,
           [(200, BODY, True)] * 4)
    env.eq('nothing was read by the resetting server', len(bad2.requests), 0)
    env.eq('the other server got all 4', len(good2.requests), 4)
    # The reset may come in connect() or after the request was written: either way one retry
    # for each of the two tries on the resetting server.
    env.eq('two retries', metric(aport2, 'jsongate_upstream_retries_total', upstream='app',
                                 reason='connect_error') +
           metric(aport2, 'jsongate_upstream_retries_total', upstream='app', reason='reset'), 2)

    bad3, good3, conf3, aport3 = pair(env, [], reset_on_accept(), max_fails=1,
                                      fail_timeout='30s')
    gw3 = env.daemon(conf3)
    answers = [outcome(get(env, gw3, '/e%d' % i)) for i in range(4)]
    env.eq('max_fails 1: every GET answered', answers, [(200, BODY, True)] * 4)
    env.eq('reset at accept ejects the server: one connection, then none',
           bad3.connections, 1)
    env.eq('one ejection', metric(aport3, 'jsongate_upstream_ejections_total', upstream='app',
                                  server=bad3.address), 1)
    env.eq('out of service', metric(aport3, 'jsongate_upstream_server_up', upstream='app',
                                    server=bad3.address), 0)
    env.check('logged', gw3.wait_log(r'server %s ejected for 30s after 1 (connect error|'
                                     r'reset)' % re.escape(bad3.address)))


@T.case
def reset_after_head_cuts_the_answer(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'
    bad, good, conf, aport = pair(env, [reset_after(head + b'{"par')], GOOD, max_fails=0)
    gw = env.daemon(conf)
    r = get(env, gw, '/cut')
    env.eq('the head went to the client: no retry, the answer is cut short', outcome(r),
           (200, b'{"par', False))
    env.eq('its head as the server sent it', r.header('Content-Length'), '100')
    env.eq('the good server got nothing for it', len(good.requests), 0)
    env.eq('no retry counted', metric(aport, 'jsongate_upstream_retries_total',
                                      upstream='app', reason='reset'), 0)


@T.case
def failures_after_the_head_eject(env):
    """Passive health judges an answer at its end: a server that resets after sending the
    head, or stalls mid-body, fails as much as one that refuses."""
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'
    for fault, why in ((reset_after(head + b'{"par'), 'reset'),
                       (stall_mid_body(head + b'{"par'), 'timeout')):
        bad, good, conf, aport = pair(env, [], fault, max_fails=1, fail_timeout='30s')
        gw = env.daemon(conf)
        answers = [get(env, gw, '/%d' % i) for i in range(6)]
        env.eq('%s mid-body: the first answer is cut, the rest come from the good server'
               % why, [(r.status, r.body, r.complete) for r in answers],
               [(200, b'{"par', False)] + [(200, BODY, True)] * 5)
        env.eq('%s: the server got one request' % why, len(bad.requests), 1)
        env.eq('%s: ejected' % why, metric(aport, 'jsongate_upstream_ejections_total',
                                           upstream='app', server=bad.address), 1)
        env.check('%s: logged' % why, gw.wait_log(r'server %s ejected for 30s after 1 %s'
                                                  % (re.escape(bad.address), why)))


@T.case
def failures_after_the_head_eject_in_an_aggregated_route(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'
    bad = env.scripted(default=reset_after(head + b'{"par'))
    good = env.scripted(default=GOOD)
    conf, aport = with_admin(upstream_config(bad.address, good.address, routes=[
        {'name': 'agg', 'match': {'path': '/agg'},
         'backends': {'x': {'upstream': 'app', 'path': '/x'}}}]))
    gw = env.daemon(conf)
    answers = [get(env, gw, '/agg') for i in range(4)]
    env.eq('the answer cut mid-body is fetched again from the other server',
           [(r.status, r.body) for r in answers], [(200, b'{"x":' + BODY + b'}')] * 4)
    env.eq('the resetting server got one request', len(bad.requests), 1)
    env.eq('ejected', metric(aport, 'jsongate_upstream_ejections_total', upstream='app',
                             server=bad.address), 1)
    env.eq('counted as a reset retry', metric(aport, 'jsongate_upstream_retries_total',
                                              upstream='app', reason='reset'), 1)


@T.case
def garbage_is_invalid(env):
    bad, good, conf, aport = pair(env, [], garbage(), max_fails=0)
    gw = env.daemon(conf)
    answers = [get(env, gw, '/%d' % i) for i in range(4)]
    env.eq('garbage: 502 upstream_invalid unless invalid is in retry_on',
           [outcome(r) for r in answers],
           [invalid_error(answers[0]), (200, BODY, True), invalid_error(answers[2]),
            (200, BODY, True)])
    env.eq('the garbage server got 2 requests, the good one 2',
           (len(bad.requests), len(good.requests)), (2, 2))
    env.eq('no retry counted', metric(aport, 'jsongate_upstream_retries_total',
                                      upstream='app', reason='invalid'), 0)
    bad2, good2, conf2, aport2 = pair(env, [], garbage(), max_fails=0,
                                      retry_on=['connect_error', 'timeout', 'reset', 'invalid'])
    gw2 = env.daemon(conf2)
    answers = [outcome(get(env, gw2, '/%d' % i)) for i in range(4)]
    env.eq('with retry_on invalid: all answered', answers, [(200, BODY, True)] * 4)
    env.eq('counted', metric(aport2, 'jsongate_upstream_retries_total', upstream='app',
                             reason='invalid'), 2)
    bad3, good3, conf3, aport3 = pair(env, [], garbage(), max_fails=1, fail_timeout='30s',
                                      fail_on=['connect_error', 'timeout', 'reset', 'invalid'])
    gw3 = env.daemon(conf3)
    answers = [get(env, gw3, '/%d' % i) for i in range(4)]
    env.eq('with invalid in fail_on: the first garbage ejects, the rest go to the good one',
           [outcome(r) for r in answers], [invalid_error(answers[0])] + [(200, BODY, True)] * 3)
    env.eq('the garbage server got one request', len(bad3.requests), 1)
    env.eq('one ejection', metric(aport3, 'jsongate_upstream_ejections_total', upstream='app',
                                  server=bad3.address), 1)
    env.eq('counted as an invalid answer', metric(
        aport3, 'jsongate_upstream_requests_total', upstream='app', server=bad3.address,
        outcome='invalid'), 1)
    env.check('logged', gw3.wait_log(r'server %s ejected for 30s after 1 invalid answer'
                                     % re.escape(bad3.address)))


@T.case
def wrong_content_length(env):
    bad, good, conf, aport = pair(env, [wrong_length(b'{"a":1}', 50)], GOOD, max_fails=0)
    gw = env.daemon(conf)
    r = get(env, gw, '/long')
    env.eq('a Content-Length longer than the body: the answer is cut short', outcome(r),
           (200, b'{"a":1}', False))
    env.eq('with the declared length', r.header('Content-Length'), '50')
    env.eq('not retried: the good server got nothing', len(good.requests), 0)
    env.eq('counted as the server failing mid-answer', metric(
        aport, 'jsongate_upstream_requests_total', upstream='app', server=bad.address,
        outcome='unavailable'), 1)
    env.eq('no retry counted', metric(aport, 'jsongate_upstream_retries_total', upstream='app',
                                      reason='reset'), 0)
    bad2, good2, conf2, aport2 = pair(env, [wrong_length(b'{"a":1}XXXX', 7)], GOOD,
                                      max_fails=0)
    gw2 = env.daemon(conf2)
    r = get(env, gw2, '/short')
    env.eq('a shorter Content-Length: exactly that many bytes', (r.status, r.body),
           (200, b'{"a":1}'))
    answers = [outcome(get(env, gw2, '/next%d' % i)) for i in range(3)]
    env.eq('the next ones answered', answers, [(200, BODY, True)] * 3)
    env.eq('the connection with bytes past the answer is not reused', bad2.connections,
           len(bad2.requests))
    env.eq('the short answer counts as a success', metric(
        aport2, 'jsongate_upstream_requests_total', upstream='app', server=bad2.address,
        outcome='ok'), len(bad2.requests))


@T.case
def stall_mid_body_times_out(env):
    head = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n'
    bad, good, conf, aport = pair(env, [stall_mid_body(head + b'{"x":')], GOOD, max_fails=0)
    gw = env.daemon(conf)
    r = get(env, gw, '/stall')
    env.eq('stalled mid-body: the client gets the head and a cut answer after '
           'upstream_response', outcome(r), (200, b'{"x":', False))
    env.eq('not retried: the good server got nothing', len(good.requests), 0)
    env.check('logged', gw.wait_log(r'upstream app server %s failed in the middle of a '
                                    r'response' % re.escape(bad.address)))
    env.eq('no retry counted', [metric(aport, 'jsongate_upstream_retries_total', upstream='app',
                                       reason=why) for why in ('timeout', 'reset', 'stale')],
           [0, 0, 0])

    # An aggregated route holds the answer until it is whole: the stalled one is fetched again.
    bad2 = env.scripted([stall_mid_body(head + b'{"x":')], GOOD)
    good2 = env.scripted(default=GOOD)
    conf2, aport2 = with_admin(upstream_config(bad2.address, good2.address, routes=[
        {'name': 'agg', 'match': {'path': '/agg'},
         'backends': {'x': {'upstream': 'app', 'path': '/x'}}}], timeouts={
        'upstream_connect': '2s', 'upstream_response': '300ms', 'shutdown_grace': '5s'}))
    conf2['upstreams']['app']['max_fails'] = 0
    gw2 = env.daemon(conf2)
    env.eq('aggregated: the stalled answer is replaced by the good one',
           outcome(get(env, gw2, '/agg')), (200, b'{"x":' + BODY + b'}', True))
    env.eq('aggregated: each server got the request once',
           (len(bad2.requests), len(good2.requests)), (1, 1))
    env.eq('aggregated: counted as a timeout retry', metric(
        aport2, 'jsongate_upstream_retries_total', upstream='app', reason='timeout'), 1)


@T.case
def slow_answer_and_per_try_timeout(env):
    bad, good, conf, aport = pair(env, [], answer(http_response(200, b'{"slow":1}'), delay=2),
                                  max_fails=0)
    conf['timeouts']['upstream_try'] = '200ms'
    gw = env.daemon(conf)
    answers = [outcome(get(env, gw, '/%d' % i)) for i in range(2)]
    env.eq('a slow server: its try times out and the other answers', answers,
           [(200, BODY, True)] * 2)
    env.eq('the slow server got one, the good one both', (len(bad.requests), len(good.requests)),
           (1, 2))
    env.eq('counted as a timeout retry', metric(aport, 'jsongate_upstream_retries_total',
                                                upstream='app', reason='timeout'), 1)
    env.eq('max_fails 0: no ejection', metric(aport, 'jsongate_upstream_ejections_total',
                                              upstream='app', server=bad.address), 0)

    bad2, good2, conf2, aport2 = pair(env, [], answer(http_response(200, b'{"slow":1}'),
                                                      delay=2), max_fails=1, fail_timeout='30s')
    conf2['timeouts']['upstream_try'] = '200ms'
    gw2 = env.daemon(conf2)
    answers = [outcome(get(env, gw2, '/%d' % i)) for i in range(4)]
    env.eq('max_fails 1: every request answered by the other', answers,
           [(200, BODY, True)] * 4)
    env.eq('the slow server got one request: its timeout ejected it', len(bad2.requests), 1)
    env.eq('one ejection', metric(aport2, 'jsongate_upstream_ejections_total', upstream='app',
                                  server=bad2.address), 1)
    env.check('logged', gw2.wait_log(r'server %s ejected for 30s after 1 timeout'
                                     % re.escape(bad2.address)))


@T.case
def idle_keepalive_closed_by_the_server(env):
    ok = http_response(200, b'{"server":"closer"}')
    bad = env.scripted(default=close_when_idle(ok))
    conf, aport = with_admin(upstream_config(bad.address))
    gw = env.daemon(conf)
    bodies = []
    for i in range(6):
        r = get(env, gw, '/%d' % i)
        bodies.append((r.status, r.body))
        time.sleep(0.05)        # let the server's close reach the pooled connection
    env.eq('every request answered though the server closes idle connections', bodies,
           [(200, b'{"server":"closer"}')] * 6)
    env.eq('no server failure: nothing ejected', metric(
        aport, 'jsongate_upstream_ejections_total', upstream='app', server=bad.address), 0)
    env.eq('every request reached the server once', len(bad.requests), 6)
    env.eq('the pool saw each close: no retry', [
        metric(aport, 'jsongate_upstream_retries_total', upstream='app', reason=why)
        for why in ('stale', 'reset')], [0, 0])

    # The keep-alive timeout fires as a request arrives on the pooled connection: the server
    # closes it unanswered, and the request goes again on a new connection.
    ok = http_response(200, b'{"server":"closer"}')
    closer = env.scripted([answer(ok), close_before_answer()], answer(ok))
    conf2, aport2 = with_admin(upstream_config(closer.address))
    gw2 = env.daemon(conf2)
    c = env.client(gw2.port)
    bodies = [c.request('GET', '/%d' % i, [('Host', 'a')]).body for i in range(3)]
    env.eq('a close crossing the request: every request answered', bodies,
           [b'{"server":"closer"}'] * 3)
    env.eq('the crossed request went again on a new connection',
           [(r.target, r.conn) for r in closer.requests],
           [('/0', 0), ('/1', 0), ('/1', 1), ('/2', 1)])
    env.eq('counted as a stale retry', metric(aport2, 'jsongate_upstream_retries_total',
                                              upstream='app', reason='stale'), 1)
    env.eq('no server failure', metric(aport2, 'jsongate_upstream_ejections_total',
                                       upstream='app', server=closer.address), 0)


@T.case
def retry_after_503(env):
    bad, good, conf, aport = pair(env, [retry_after(60)], GOOD,
                                  retry_on=['connect_error', 'timeout', 'reset', 503])
    gw = env.daemon(conf)
    answers = [outcome(get(env, gw, '/%d' % i)) for i in range(6)]
    env.eq('503 with Retry-After: retried, then the server is left alone', answers,
           [(200, BODY, True)] * 6)
    env.eq('the busy server got one request', len(bad.requests), 1)
    env.eq('one retry for the 503', metric(aport, 'jsongate_upstream_retries_total',
                                           upstream='app', reason='503'), 1)
    env.eq('server_up stays 1 (Retry-After is no ejection)', metric(
        aport, 'jsongate_upstream_server_up', upstream='app', server=bad.address), 1)


def load(gw, clients, until):
    """clients keep-alive connections sending GETs until the event is set: every
    answer's (status, body), or None for a connection that got no answer."""
    got = [[] for _ in range(clients)]

    def run(out):
        c = Client(gw.port)
        try:
            while not until.is_set():
                try:
                    r = c.request('GET', '/load', [('Host', 'a')])
                except (ProtocolError, OSError, socket.timeout):
                    out.append(None)
                    c.close()
                    c = Client(gw.port)
                    continue
                out.append((r.status, r.body))
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(got[i],)) for i in range(clients)]
    for t in threads:
        t.start()
    return threads, got


@T.case
def killed_under_concurrent_load_loses_nothing(env):
    """The kill benchmark in small: 16 keep-alive clients, two servers that answer after
    20ms, one killed while requests wait on its pooled connections.  Every request that
    failed on the dead server moves to the other one, more at once than the retry budget
    (3 at 16 in flight) allows: the extra try after a closed pooled connection and the
    failover from a server out of service add no load, and the budget does not count them."""
    body = {'a': b'{"server":"a"}', 'b': b'{"server":"b"}'}
    a = env.scripted(default=answer(http_response(200, body['a']), delay=0.02))
    b = env.scripted(default=answer(http_response(200, body['b']), delay=0.02))
    conf, aport = with_admin(upstream_config(a.address, b.address, keepalive=16))
    gw = env.daemon(conf)
    stop = threading.Event()
    threads, got = load(gw, 16, stop)
    env.require('both servers busy', wait_until(
        lambda: len(a.requests) > 50 and a.open_connections >= 6, 10 * SLOW, 0.01))
    a.kill()
    went_on = wait_until(lambda: len(b.requests) > 200, 10 * SLOW, 0.01)
    stop.set()
    for t in threads:
        t.join(IO_TIMEOUT)
    answers = [r for out in got for r in out]
    env.eq('every request answered 200 by one of the servers', [
        r for r in answers if r not in ((200, body['a']), (200, body['b']))], [])
    env.check('load went on after the kill', went_on, len(b.requests))
    lost = len(a.requests) - answers.count((200, body['a']))
    env.check('requests were waiting on the killed server (%d)' % lost, lost >= 4, lost)
    retried = sum(metric(aport, 'jsongate_upstream_retries_total', upstream='app', reason=why)
                  for why in ('stale', 'reset', 'connect_error'))
    env.check('each counted as a retry (%d retries)' % retried, retried >= lost, retried)
    env.eq('the budget refused none', metric(
        aport, 'jsongate_upstream_retry_budget_exhausted_total', upstream='app'), 0)
    env.eq('b answered every request a did not', len(b.requests),
           len(answers) - answers.count((200, body['a'])))


TCP_STATES = {'01': 'ESTABLISHED', '02': 'SYN_SENT', '03': 'SYN_RECV', '04': 'FIN_WAIT1',
              '05': 'FIN_WAIT2', '06': 'TIME_WAIT', '07': 'CLOSE', '08': 'CLOSE_WAIT',
              '09': 'LAST_ACK', '0A': 'LISTEN', '0B': 'CLOSING'}


def open_files(pid):
    """What process pid holds open, by fd: a TCP socket as (local port, remote port, state),
    anything else as its /proc link (a socket gone from the TCP tables as 'socket:[N]')."""
    tcp = {}
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        with open(table) as f:
            next(f)
            for line in f:
                x = line.split()
                tcp[x[9]] = (int(x[1].rsplit(':', 1)[1], 16), int(x[2].rsplit(':', 1)[1], 16),
                             TCP_STATES.get(x[3], x[3]))
    files = {}
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            target = os.readlink('/proc/%d/fd/%s' % (pid, fd))
        except OSError:
            continue            # closed meanwhile
        files[int(fd)] = tcp.get(target[8:-1], target) if target.startswith('socket:[') else \
            target
    return files


def stopped(pid):
    """Whether every thread of process pid is stopped (by SIGSTOP)."""
    for task in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/stat' % (pid, task)) as f:
            if f.read().rpartition(')')[2].split()[0] != 'T':
                return False
    return True


def scrape(c):
    """Every sample of /metrics read on the keep-alive admin connection c, by canonical key."""
    r = c.request('GET', '/metrics', [('Host', 'admin')])
    samples = {}
    for line in r.body.decode().splitlines():
        k, _, v = line.rpartition(' ')
        if line and not line.startswith('#'):
            samples[canonical(k)] = float(v)
    return samples


def leftovers(gw, admin, servers, keepalive, own=None):
    """What the daemon holds open besides its own files and listeners (own: as they were
    before, {fd: target}) and its pool, as (problems, own files now).  The pool is the
    connections its metrics count idle, none active, at most keepalive to a server, each
    established and held open by the server too.  admin is the connection the metrics are
    read on; any other connection (a client's, a check's) is a problem until it is closed."""
    gauges = scrape(admin)
    files = open_files(gw.proc.pid)
    ports = {s.port: s for s in servers}
    scraper = admin.sock.getsockname()[1]
    pooled = {port: [] for port in ports}
    now, others = {}, []
    for fd, t in sorted(files.items()):
        if isinstance(t, str) and not t.startswith('socket:'):
            now[fd] = t                 # a file, pipe, eventfd, epoll
        elif isinstance(t, tuple) and t[2] == 'LISTEN':
            now[fd] = t[:1] + t[2:]     # a listener
        elif isinstance(t, tuple) and t[1] in ports:
            pooled[t[1]].append((fd, t[2]))
        elif not (isinstance(t, tuple) and t[1] == scraper):
            others.append((fd, t))
    problems = []
    if own is not None and now != own:
        problems.append('own files and listeners %r, before %r' % (now, own))
    if others:
        problems.append('connections or sockets left: %r' % others)
    idle = gauges.get('jsongate_upstream_connections{state="idle",upstream="app"}')
    active = gauges.get('jsongate_upstream_connections{state="active",upstream="app"}')
    count = sum(len(p) for p in pooled.values())
    if (idle, active) != (count, 0):
        problems.append('%d connections to the servers, the metrics say %s idle and %s active'
                        % (count, idle, active))
    for port, conns in pooled.items():
        if any(state != 'ESTABLISHED' for _, state in conns):
            problems.append('connections to :%d not established: %r' % (port, conns))
        if len(conns) > keepalive:
            problems.append('%d connections to :%d, keepalive %d' % (len(conns), port,
                                                                      keepalive))
        if len(conns) != ports[port].open_connections:
            problems.append('%d connections to :%d, the server holds %d open' % (
                len(conns), port, ports[port].open_connections))
    return problems, now


def answer_kind(r):
    """An answer reduced to what must repeat exactly: status, body (a gateway error's code and
    message, its request id aside) and whether it came whole."""
    if r is None:
        return None
    if r.status >= 500 and r.header('X-Request-Id') and b'"error"' in r.body:
        e = r.json()['error']
        return (r.status, '%s: %s' % (e['code'], e['message']), r.complete)
    return (r.status, r.body, r.complete)


def fault_schedule():
    """The faulty server's answer to its n-th request: the quick faults in turn, the ones
    that wait for a timeout (a stall mid-body, a slow answer) every 150th, a 503 with
    Retry-After, which keeps the server off for a second, every 1000th."""
    head = b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n'
    quick = [('reset', reset()), ('garbage', garbage()), ('close', close_before_answer()),
             ('reset_after_head', reset_after(head + b'{')),
             ('long_length', wrong_length(b'{}', 20)),
             ('ok', answer(http_response(200, b'{}'))),
             ('idle_close', close_when_idle(http_response(200, b'{"idle":1}')))]
    stall = pieces((head + b'{"x":', 1))
    slow = answer(http_response(200, b'{"slow":1}'), delay=1)
    busy = retry_after(1)

    def step(n):
        if n % 1000 == 500:
            return 'retry_after', busy
        if n % 150 == 75:
            return 'stall', stall
        if n % 150 == 0:
            return 'slow', slow
        return quick[n % len(quick)]
    names = [name for name, _ in quick] + ['retry_after', 'stall', 'slow']
    # The steps by which every fault has come once: the last to come first is the 503.
    first = {}
    n = 0
    while len(first) < len(names):
        n += 1
        first.setdefault(step(n)[0], n)
    return step, names, n


@T.case
def ten_thousand_faulty_requests_leave_nothing_behind(env):
    """10,000 requests while one of two servers fails in every way in turn: refused while
    killed, reset after the request or at once, garbage, a close before the answer, a reset
    after the head, a long Content-Length, a stall mid-body, a slow answer, an idle keep-alive
    connection closed, 503 with Retry-After, its health endpoint failing and recovering.
    Every answer is the one its fault gives, retries are counted exactly, and no file
    descriptor or memory is left behind.  Each phase waits for what it needs, never for
    time: how many requests the faulty server gets depends on how fast the good one
    answers while a Retry-After keeps it off."""
    schedule, names, rotation = fault_schedule()
    taken = []

    def next_fault():
        name, step = schedule(len(taken) + 1)
        taken.append(name)
        return step

    bad = env.scripted(default=GOOD, health=(200, b'{}'))
    good = env.scripted(default=GOOD, health=(200, b'{}'))
    bad._next_step = next_fault
    keepalive = 4
    conf, aport = with_admin(upstream_config(
        bad.address, good.address, keepalive=keepalive, timeouts={
            'upstream_connect': '2s', 'upstream_response': '300ms', 'upstream_try': '300ms',
            'shutdown_grace': '5s'}))
    conf['upstreams']['app'].update(
        max_fails=0, retry_on=['connect_error', 'timeout', 'reset', 503],
        health={'path': '/health', 'interval': '20ms', 'timeout': '1s', 'fails': 10,
                'passes': 1})
    gw = env.daemon(conf)
    total = int(os.environ.get('FAULT_REQUESTS', '10000')) // (SLOW if WRAPPER else 1)
    kinds = {}
    sent = [0]

    def record(r):
        kinds[answer_kind(r)] = kinds.get(answer_kind(r), 0) + 1
        sent[0] += 1

    def burst(done):
        """Requests one after another, on one keep-alive connection while it lasts, until
        done() (or a deadline the checks after it fail on)."""
        deadline = time.monotonic() + 60 * SLOW
        c = env.client(gw.port)
        while not done() and time.monotonic() < deadline:
            try:
                r = c.request('GET', '/%d' % sent[0], [('Host', 'a')])
            except (ProtocolError, OSError, socket.timeout):
                r = None
            record(r)
            if r is None or r.header('Connection') == 'close' or not r.complete:
                c.close()
                c = env.client(gw.port)
        c.close()

    def bad_up():
        return metric(aport, 'jsongate_upstream_server_up', upstream='app',
                      server=bad.address)

    def settled(own=None):
        """The daemon's leftovers once every connection that is not pooled has closed (a
        stall's closes when its server gives up after a second)."""
        admin = env.client(aport)
        last = []

        def none_left():
            last[:] = [leftovers(gw, admin, (bad, good), keepalive, own)]
            return not last[0][0]
        wait_until(none_left, 5 * SLOW, 0.05)
        admin.close()
        return last[0]

    burst(lambda: sent[0] >= total // 10)
    problems, own = settled()
    env.require('before: only its own files, listeners and pooled connections', not problems,
                problems)
    base_rss = gw.rss()['VmRSS']
    burst(lambda: sent[0] >= total // 2)

    # Its health endpoint fails: no request goes to it until it passes again.
    bad.set_health(503)
    env.require('failing checks take it out', wait_until(lambda: bad_up() == 0, 5 * SLOW))
    steps, before = len(taken), sent[0]
    burst(lambda: sent[0] >= before + 50)
    env.eq('out of service: it got no request', len(taken), steps)
    bad.set_health(200)
    env.require('passing again brings it back', wait_until(lambda: bad_up() == 1, 5 * SLOW))
    # Back in the rotation, and not kept off by a Retry-After: it answered a request since,
    # which it gets only once the time a 503 asked for is over.
    burst(lambda: len(taken) > steps and taken[-1] != 'retry_after')

    # Killed: connects are refused and fail over until the checks take it out (10 at 20ms).
    # The daemon is stopped meanwhile, so that its checks cannot fail before the requests
    # queued while the server died reach it: round robin gives it every second try, at most
    # keepalive of those find a pooled connection the kill closed, the others are refused.
    queued = [env.client(gw.port) for _ in range(2 * (keepalive + 1))]
    gw.signal(signal.SIGSTOP)
    try:
        env.require('stopped', wait_until(lambda: stopped(gw.proc.pid), 5 * SLOW, 0.001))
        bad.kill()
        for i, c in enumerate(queued):
            c.send(build_request('GET', '/killed%d' % i, [('Host', 'a')]))
    finally:
        gw.signal(signal.SIGCONT)
    for c in queued:
        try:
            record(c.read_response())
        except (ProtocolError, OSError, socket.timeout):
            record(None)
        c.close()
    env.require('killed: out of service', wait_until(lambda: bad_up() == 0, 5 * SLOW))
    bad.restart()
    env.require('restarted: back', wait_until(lambda: bad_up() == 1, 5 * SLOW))
    steps = len(taken)
    burst(lambda: sent[0] >= total and len(taken) >= steps + rotation)
    env.check('restarted, it takes requests again, every fault once more (%d of %d)' % (
        len(taken) - steps, rotation), len(taken) >= steps + rotation)

    problems, _ = settled(own)
    env.check('no file descriptor left behind: its %d own files and listeners as before, and '
              'only pooled connections' % len(own), not problems, problems)
    rss = gw.rss()['VmRSS']
    # ASan keeps what is freed in quarantine: there, a leak is LeakSanitizer's to find.
    env.check('memory stays put (%d kB before, %d kB after)' % (base_rss, rss),
              rss <= base_rss + (256 * 1024 if instrumented() else 2048))
    count = {name: taken.count(name) for name in names}
    env.check('every fault taken: %r' % count, all(count.values()), count)
    # A reset or close before an answer, a slow answer and a 503 go to the other server;
    # what got a head or a malformed answer reaches the client as it was.
    env.eq('every answer as its server gave it', kinds, {
        (200, BODY, True): len(good.requests),
        (200, b'{}', True): count['ok'],
        (200, b'{"idle":1}', True): count['idle_close'],
        (502, 'upstream_invalid: malformed response from upstream app', True):
            count['garbage'],
        (200, b'{', False): count['reset_after_head'],
        (200, b'{}', False): count['long_length'],
        (200, b'{"x":', False): count['stall']})
    retries = {why: metric(aport, 'jsongate_upstream_retries_total', upstream='app', reason=why)
               for why in ('connect_error', 'timeout', 'reset', 'stale', 'invalid', '503')}
    refused = len(re.findall(r'connect to upstream app server %s failed: Connection refused'
                             % re.escape(bad.address), gw.log()))
    env.check('connects refused while it was killed (%d)' % refused, refused > 0)
    env.eq('a retry for each slow answer, 503 and refused connect, none for garbage', [
        retries[why] for why in ('timeout', '503', 'connect_error', 'invalid')],
        [count['slow'], count['retry_after'], refused, 0])
    # A request may also find a pooled connection closed before the pool saw it: after an
    # idle close (the server's close races the next request), or when the server was killed.
    extra = retries['reset'] + retries['stale'] - count['reset'] - count['close']
    env.check('one retry for each reset or close before an answer, and at most one for each '
              'idle close or pooled connection of the killed server (%d)' % extra,
              0 <= extra <= count['idle_close'] + keepalive, retries)
    env.eq('the checks counted both ways', [metric(
        aport, 'jsongate_upstream_health_checks_total', upstream='app', server=bad.address,
        result=r) > 0 for r in ('passed', 'failed')], [True, True])
    env.eq('max_fails 0: no ejection', metric(aport, 'jsongate_upstream_ejections_total',
                                              upstream='app', server=bad.address), 0)
    env.eq('no retry refused by the budget', metric(
        aport, 'jsongate_upstream_retry_budget_exhausted_total', upstream='app'), 0)


T.run()
