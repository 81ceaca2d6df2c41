"""Admin endpoint: GET /healthz (200, then 503 while draining with a slow
request in flight), 404/405 as JSON, and GET /metrics parsed with the
Prometheus client library's parser, with exact values after a known sequence
of requests and reloads; connections accepted by each worker, evenly spread
over 2 workers when they come in bursts of 100."""

import http.client
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
from harness import listening_sockets  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:     # Debian's python3-prometheus-client under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    from prometheus_client.parser import text_string_to_metric_families

T = Suite(__file__)


def admin_get(port, path, method='GET'):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=IO_TIMEOUT)
    try:
        c.request(method, path)
        r = c.getresponse()
        ADMIN_REASONS[r.status] = r.reason
        return r.status, r.getheader('Content-Type'), r.read()
    finally:
        c.close()


# The reason phrase the admin endpoint gave for each status: RFC 9110's, as everywhere.
ADMIN_REASONS = {}


def with_admin(conf):
    port = free_port()
    conf['admin'] = {'listen': '127.0.0.1:%d' % port}
    return conf, port


def scrape(env, port):
    status, ctype, body = admin_get(port, '/metrics')
    env.eq('/metrics status', status, 200)
    env.eq('/metrics content type', ctype, 'text/plain; version=0.0.4; charset=utf-8')
    families = list(text_string_to_metric_families(body.decode()))
    samples = {}
    for fam in families:
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return {f.name: f for f in families}, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


@T.case
def healthz_and_errors(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    conf, aport = with_admin(upstream_config(up.address))
    env.daemon(conf)
    status, ctype, body = admin_get(aport, '/healthz')
    env.eq('/healthz', (status, ctype, body), (200, 'application/json', b'{"status":"ok"}\n'))
    status, ctype, body = admin_get(aport, '/nope')
    env.eq('unknown path: 404 JSON', (status, ctype, json.loads(body)['error']['code']),
           (404, 'application/json', 'not_found'))
    status, ctype, body = admin_get(aport, '/healthz', 'POST')
    env.eq('POST: 405 JSON', (status, ctype, json.loads(body)['error']['code']),
           (405, 'application/json', 'method_not_allowed'))
    admin_get(aport, '/metrics')
    env.eq('reason phrases of RFC 9110', ADMIN_REASONS,
           {200: 'OK', 404: 'Not Found', 405: 'Method Not Allowed'})


@T.case
def healthz_503_while_draining(env):
    up = env.scripted([answer(http_response(200, b'{"slow":true}'), delay=2)],
                      default=answer(http_response(200, b'{}')))
    conf, aport = with_admin(upstream_config(up.address, timeouts={'shutdown_grace': '10s'}))
    gw = env.daemon(conf)
    slow = env.client(gw.port)
    slow.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('the slow request reached the upstream', wait_until(lambda: up.requests, 5))
    text = scrape(env, aport)[1]
    env.eq('the connection with a request in flight counts as active',
           (value(text, 'jsongate_connections', state='active'),
            value(text, 'jsongate_connections', state='idle')), (1, 0))
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    # The signal is handled asynchronously: poll until it took effect.
    got = wait_until(lambda: admin_get(aport, '/healthz')[0] == 503, 3 * SLOW)
    status, _, body = admin_get(aport, '/healthz')
    env.eq('/healthz while draining', (got, status, body, ADMIN_REASONS.get(503)),
           (True, 503, b'{"status":"draining"}\n', 'Service Unavailable'))
    env.check('the slow request is still in flight then', gw.alive())
    r = slow.read_response(timeout=10 * SLOW)
    env.eq('the in-flight request completes', (r.status, r.body) if r else None,
           (200, b'{"slow":true}'))
    env.eq('exit status 0', gw.proc.wait(10 * SLOW), 0)


@T.case
def metrics_after_known_requests(env):
    up = env.scripted(default=answer(lambda req: http_response(
        404 if req.target.startswith('/b') else 200, b'{}')))
    dead = free_port()
    routes = [
        {'name': 'a', 'match': {'path_prefix': '/a'}, 'upstream': 'app'},
        {'name': 'b', 'match': {'path_prefix': '/b'}, 'upstream': 'app'},
        {'name': 'c', 'match': {'path_prefix': '/c'}, 'upstream': 'dead'},
    ]
    conf, aport = with_admin(upstream_config(up.address, routes=routes, workers=2))
    conf['upstreams']['dead'] = {'servers': ['127.0.0.1:%d' % dead]}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    for path, want in (('/a/1', 200), ('/a/2', 200), ('/a/3', 200), ('/b/1', 404),
                       ('/b/2', 404), ('/zzz', 404), ('/c', 502)):
        r = c.request('GET', path, [('Host', 'h')])
        env.eq('GET %s' % path, r.status if r else None, want)

    uc = 'jsongate_upstream_connections'
    s = scrape(env, aport)[1]
    env.eq('upstream connections active', value(s, uc, upstream='app', state='active'), 0)
    env.check('upstream connections idle (pooled)',
              1 <= (value(s, uc, upstream='app', state='idle') or 0) <= 2, s)

    gw.signal(signal.SIGHUP)
    env.require('reload done', gw.wait_log('configuration reloaded'))
    good = gw.config_text
    gw.write_config('workers: [\n')
    gw.signal(signal.SIGHUP)
    env.require('broken reload rejected', gw.wait_log('reload failed'))
    gw.write_config(good)

    fams, s = scrape(env, aport)
    upa = up.address
    deada = '127.0.0.1:%d' % dead
    req = 'jsongate_requests_total'
    env.eq('requests a 200', value(s, req, route='a', code='200'), 3)
    env.eq('requests b 404', value(s, req, route='b', code='404'), 2)
    env.eq('requests without a route', value(s, req, route='-', code='404'), 1)
    env.eq('requests c 502', value(s, req, route='c', code='502'), 1)
    env.eq('no other request series', sum(v for (n, _), v in s.items() if n == req), 7)

    h = 'jsongate_request_duration_seconds'
    env.eq('histogram type', fams[h].type, 'histogram')
    env.eq('duration count for a', value(s, h + '_count', route='a'), 3)
    env.eq('duration +Inf bucket for a', value(s, h + '_bucket', route='a', le='+Inf'), 3)
    buckets = sorted((float(dict(l)['le']), v) for (n, l), v in s.items()
                     if n == h + '_bucket' and dict(l)['route'] == 'b')
    env.check('buckets cumulative', all(buckets[i][1] <= buckets[i + 1][1]
                                        for i in range(len(buckets) - 1)), buckets)
    env.check('duration sum for a is small and positive',
              0 < value(s, h + '_sum', route='a') < 5, value(s, h + '_sum', route='a'))

    ur = 'jsongate_upstream_requests_total'
    env.eq('upstream ok', value(s, ur, upstream='app', server=upa, outcome='ok'), 5)
    env.eq('upstream refused', value(s, ur, upstream='dead', server=deada,
                                     outcome='unavailable'), 1)
    env.eq('a reload closes the idle pooled connections',
           value(s, uc, upstream='app', state='idle'), 0)
    env.eq('client connections: ours is idle between requests',
           (value(s, 'jsongate_connections', state='idle'),
            value(s, 'jsongate_connections', state='active')), (1, 0))
    rl = 'jsongate_config_reloads_total'
    env.eq('reloads', (value(s, rl, result='success'), value(s, rl, result='failure')), (1, 1))
    env.eq('bytes spliced type', fams['jsongate_bytes_spliced'].type, 'counter')
    env.check('bytes copied present', value(s, 'jsongate_bytes_copied_total') is not None, s)
    env.check('envelope family present', 'jsongate_envelope' in fams, list(fams))

    now = time.time()
    start = value(s, 'process_start_time_seconds')
    env.check('process start time', start is not None and now - 120 < start <= now, start)
    env.check('process resident memory', (value(s, 'process_resident_memory_bytes') or 0) > 1e6, s)
    env.check('process open fds', (value(s, 'process_open_fds') or 0) > 5, s)
    env.check('process cpu seconds', value(s, 'process_cpu_seconds_total') is not None, s)
    env.check('every family has help text', all(f.documentation for f in fams.values()), fams)

    c.close()
    env.check('the closed client leaves the gauge', wait_until(lambda: value(
        scrape(env, aport)[1], 'jsongate_connections', state='idle') == 0, 5 * SLOW))


CLOSE_REASONS = ['client_closed', 'client_error', 'keepalive_timeout', 'header_timeout',
                 'client_timeout', 'not_keepalive', 'bad_request', 'limit', 'unread_body',
                 'upstream_error', 'shutdown', 'out_of_memory']


@T.case
def client_closes_by_reason(env):
    """Every client connection that closes is counted once in jsongate_client_closes_total,
    under the reason it closed for; the debug log names it."""
    up = env.scripted(default=answer(http_response(200, b'{}')), truncated_ok=True)
    conf, aport = with_admin(upstream_config(
        up.address, routes=[{'name': 'api', 'match': {'path_prefix': '/api/'},
                             'upstream': 'app'}],
        timeouts={'keepalive': '1s', 'client_header': '1s', 'client_body': '1s',
                  'upstream_connect': '2s', 'upstream_response': '10s'},
        limits={'max_header': '2k'}, log={'level': 'debug', 'access': 'off'}))
    gw = env.daemon(conf)

    def closes():
        samples = scrape(env, aport)[1]
        return {r: value(samples, 'jsongate_client_closes_total', reason=r)
                for r in CLOSE_REASONS}
    env.eq('every reason listed, none counted yet', closes(), {r: 0 for r in CLOSE_REASONS})
    c = env.client(gw.port)
    r = c.request('GET', '/api/a', [('Host', 'a'), ('Connection', 'close')])
    env.check('Connection: close: answered, then closed', r.status == 200 and c.wait_closed(5))
    c = env.client(gw.port)
    c.send(b'GET /api/a HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n')
    env.check('a malformed head: 400, then closed', c.read_response().status == 400 and
              c.wait_closed(5))
    c = env.client(gw.port)
    env.eq('a request, then the client closes', c.request('GET', '/api/b', [('Host', 'a')]).status,
           200)
    c.close()
    c = env.client(gw.port)
    env.eq('a request, then idle', c.request('GET', '/api/c', [('Host', 'a')]).status, 200)
    env.check('closed at keepalive', c.wait_closed(5 * SLOW))
    c = env.client(gw.port)
    c.send(b'GET /api/slow HTTP/1.1\r\n')
    env.check('a head cut short: 408 at client_header, then closed',
              c.read_response(timeout=5 * SLOW).status == 408 and c.wait_closed(5))
    c = env.client(gw.port)
    c.send(b'POST /nothing HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"a":')
    env.check('a body not read (no route): 404, then closed',
              c.read_response().status == 404 and c.wait_closed(5))
    c = env.client(gw.port)
    c.send(b'GET /api/big HTTP/1.1\r\nHost: a\r\nX-Fill: ' + b'f' * 3000 + b'\r\n\r\n')
    env.check('a head over max_header: 431, then closed',
              c.read_response().status == 431 and c.wait_closed(5))
    c = env.client(gw.port)
    c.send(b'POST /api/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{')
    env.check('a body that stalls: closed at client_body', c.wait_closed(5 * SLOW))
    want = {r: 0 for r in CLOSE_REASONS}
    want.update(not_keepalive=1, bad_request=1, client_closed=1, keepalive_timeout=1,
                header_timeout=1, unread_body=1, limit=1, client_timeout=1)
    env.check('each close counted under its reason', wait_until(lambda: closes() == want, 5),
              'got %s, want %s' % (closes(), want))
    env.check('the debug log names a reason',
              gw.wait_log(r'client 127\.0\.0\.1: closed: idle for timeouts\.keepalive'))


@T.case
def connections_spread_over_workers(env):
    """Each worker accepts on its own SO_REUSEPORT socket: the kernel spreads connections over
    2 workers evenly, also when they come in bursts.  With one socket shared by the workers,
    the worker that wakes first takes most of a burst (up to 64 a turn) and often keeps
    winning: 10 bursts of 100 then ended 194/806 and 857/143, some bursts 100/0."""
    conf, aport = with_admin(upstream_config('127.0.0.1:%d' % free_port(), routes=[], workers=2))
    gw = env.daemon(conf)
    name = 'jsongate_connections_accepted_total'

    def accepted():
        s = scrape(env, aport)[1]
        return [value(s, name, worker='0') or 0, value(s, name, worker='1') or 0]
    env.eq('nothing accepted before the first client', accepted(), [0, 0])
    env.eq('one listening socket per worker', len(listening_sockets(gw.port)), 2)
    bursts, size = 10, 100
    total = bursts * size
    wrong = []
    split = []
    for b in range(bursts):
        before = accepted()
        # 100 connects at once (the kernel completes them before any accept), then a
        # request on each.
        clients = [Client(gw.port) for _ in range(size)]
        for i, c in enumerate(clients):
            c.send(build_request('GET', '/%d/%d' % (b, i), [('Host', 'h')]))
        for i, c in enumerate(clients):
            r = c.read_response()
            c.close()
            if r is None or r.status != 404:
                wrong.append((b, i, r))
        split.append([int(a - p) for a, p in zip(accepted(), before)])
    env.eq('every request answered 404', wrong, [])
    counts = accepted()
    env.eq('every connection counted once, by the worker that accepted it', sum(counts), total)
    env.check('each worker accepted 35-65 %', all(0.35 * total <= c <= 0.65 * total
                                                  for c in counts), counts)
    # A fair coin per connection leaves a burst of 100 outside 25-75 about once in 10^6.
    env.check('each worker accepted 25-75 of each burst',
              all(25 <= c <= 75 for burst in split for c in burst), split)
    print('# accepted by worker 0 and 1 in %d bursts of %d: %s, bursts %s'
          % (bursts, size, counts, split))


@T.case
def admin_moves_on_reload(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    conf, aport = with_admin(upstream_config(up.address))
    gw = env.daemon(conf)
    env.eq('first address', admin_get(aport, '/healthz')[0], 200)
    conf2, aport2 = with_admin(dict(conf))
    conf2['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port}]
    gw.write_config(conf2)
    gw.signal(signal.SIGHUP)
    env.require('reload done', gw.wait_log('configuration reloaded'))
    env.eq('new address', admin_get(aport2, '/healthz')[0], 200)
    try:
        admin_get(aport, '/healthz')
        env.check('old address closed', False, 'still answering')
    except OSError:
        env.check('old address closed', True)


T.run()
