"""Signals and workers: SIGTERM/SIGINT finish in-flight requests, refuse new
connections and exit 0; SIGHUP reloads (new routes answer; a broken file is
rejected with its FILE:LINE:COL error and the old routes keep serving);
`workers: 2` serves correctly."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def by_target(req):
    return http_response(200, json.dumps({'target': req.target}).encode())


def refused(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def wait_exit(gw, timeout):
    try:
        return gw.proc.wait(timeout * SLOW)
    except subprocess.TimeoutExpired:
        return 'running'


@T.case
def sigterm_finishes_in_flight(env):
    up = env.scripted([answer(by_target, delay=1.5)], default=answer(by_target))
    gw = env.daemon(upstream_config(up.address, timeouts={'shutdown_grace': '10s'}))
    idle = env.client(gw.port)
    env.eq('an idle keep-alive client first', idle.request('GET', '/idle', [('Host', 'a')]).status, 200)
    slow = env.client(gw.port)
    slow.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('the slow request reached the upstream',
                wait_until(lambda: any(q.target == '/slow' for q in up.requests), 5), '')
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    env.check('new connections refused soon after SIGTERM', wait_until(lambda: refused(gw.port), 3 * SLOW),
              'still accepting')
    try:
        late = idle.request('GET', '/late', [('Host', 'a')], timeout=5)
    except OSError:
        late = None
    if late is not None:        # else the idle connection was closed: fine too
        env.gateway_error('a new request on an idle connection during shutdown', late, 503,
                          'shutting_down', None, close=True)
    r = slow.read_response(timeout=10 * SLOW)
    env.eq('the in-flight request completes', (r.status, r.json()) if r else None, (200, {'target': '/slow'}))
    env.eq('exit status 0', wait_exit(gw, 8), 0)


@T.case
def sigterm_idle_exits_promptly(env):
    up = env.scripted(default=answer(by_target))
    gw = env.daemon(upstream_config(up.address, timeouts={'shutdown_grace': '30s'}))
    c = env.client(gw.port)
    c.request('GET', '/a', [('Host', 'a')])
    start = time.monotonic()
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    status = wait_exit(gw, 10)
    env.eq('exit status 0', status, 0)
    env.check('an idle keep-alive client does not hold the shutdown for shutdown_grace',
              time.monotonic() - start < 5 * SLOW, '%.1fs' % (time.monotonic() - start))


@T.case
def sigint_stops(env):
    up = env.scripted(default=answer(by_target))
    gw = env.daemon(upstream_config(up.address))
    env.client(gw.port).request('GET', '/a', [('Host', 'a')])
    gw.signal(signal.SIGINT)
    gw.signalled = True
    env.eq('SIGINT: exit status 0', wait_exit(gw, 10), 0)


def routes(*names):
    return [{'name': n, 'match': {'path_prefix': '/' + n}, 'upstream': 'app'} for n in names]


@T.case
def sighup_reload(env):
    up = env.scripted(default=answer(by_target))
    conf = upstream_config(up.address, routes=routes('a'))
    gw = env.daemon(conf)
    kept = env.client(gw.port)
    env.eq('route /a answers', kept.request('GET', '/a/1', [('Host', 'x')]).status, 200)
    env.eq('route /b does not exist yet', kept.request('GET', '/b/1', [('Host', 'x')]).status, 404)

    conf['routes'] = routes('a', 'b')
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % gw.port}]
    gw.write_config(conf)
    gw.signal(signal.SIGHUP)

    def b_answers():
        try:
            return Client(gw.port).request('GET', '/b/2', [('Host', 'x')]).status == 200
        except OSError:
            return False
    env.check('after SIGHUP the new route answers', wait_until(b_answers, 5 * SLOW, 0.05), gw.log()[-1000:])
    r = kept.request('GET', '/b/3', [('Host', 'x')])
    env.eq('a keep-alive connection from before the reload sees the new route',
           (r.status, r.json()) if r else None, (200, {'target': '/b/3'}))
    env.check('the daemon is still the same process', gw.alive(), 'exited')

    log_before = len(gw.log())
    broken = gw.config_text.replace('routes:', 'routez:\n  oops: 1\nroutes:', 1)
    lines = broken.splitlines()
    line = lines.index('routez:') + 1
    gw.write_config(broken)
    gw.signal(signal.SIGHUP)
    where = '%s:%d:1: ' % (gw.config_path, line)
    env.check('the broken file is rejected with FILE:LINE:COL in the log',
              gw.wait_log(re.escape(where), 5, log_before), gw.log()[log_before:])
    env.check('still running', gw.alive(), 'exited')
    r = Client(gw.port).request('GET', '/a/4', [('Host', 'x')])
    env.eq('old routes keep serving: /a', r.status, 200)
    r = Client(gw.port).request('GET', '/b/4', [('Host', 'x')])
    env.eq('old routes keep serving: /b', r.status, 200)
    r = kept.request('GET', '/a/5', [('Host', 'x')])
    env.eq('the kept connection keeps working', r.status, 200)


@T.case
def two_workers(env):
    demo = env.demo()
    gw = env.daemon(upstream_config(demo.address, workers=2))
    want = {}
    direct = Client(demo.port)
    for path in ('/api/orders/1', '/api/orders/2', '/api/stats'):
        want[path] = direct.request('GET', path, [('Host', 'd')]).body
    direct.close()
    results = []

    def worker(n):
        try:
            c = Client(gw.port)
            for i in range(25):
                path = list(want)[(n + i) % 3]
                if i % 5 == 4:              # a fresh connection now and then
                    c.close()
                    c = Client(gw.port)
                r = c.request('GET', path, [('Host', 'd')])
                results.append(r.status == 200 and r.body == want[path])
            c.close()
        except Exception as e:
            results.append(repr(e))
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    env.eq('6 concurrent clients x 25 requests with workers: 2, all correct',
           (len(results), [x for x in results if x is not True][:3]), (150, []))
    threads_now = 0
    with open('/proc/%d/status' % gw.pid) as f:
        for line in f:
            if line.startswith('Threads:'):
                threads_now = int(line.split()[1])
    env.check('at least 2 threads', threads_now >= 2, 'Threads: %d' % threads_now)


T.run()
