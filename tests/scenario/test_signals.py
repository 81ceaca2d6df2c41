"""Signals and workers: SIGTERM/SIGINT finish in-flight requests, refuse new
connections and exit 0; SIGHUP reloads (new routes answer; a broken file is
rejected with its FILE:LINE:COL error and the old routes keep serving; every
listening socket is kept and no connection refused across reloads);
`workers: 2` serves correctly; a signal sent the moment the listener accepts
is handled, never fatal (SIGNAL_STARTS starts per signal, 50 by default)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
from harness import listening_sockets, process_sockets  # noqa: E402

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
    up = env.scripted([answer(by_target), answer(by_target, delay=1.5)], default=answer(by_target))
    gw = env.daemon(upstream_config(up.address, timeouts={'shutdown_grace': '10s'}))
    idle = env.client(gw.port)
    env.eq('an idle keep-alive client first', idle.request('GET', '/idle', [('Host', 'a')]).status, 200)
    slow = env.client(gw.port)
    slow.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('the slow request reached the upstream',
                wait_until(lambda: any(q.target == '/slow' for q in up.requests), 5), '')
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    env.require('shutdown logged', gw.wait_log('shutting down'), gw.log())
    env.check('new connections are refused at once, with a request still in flight',
              refused(gw.port), 'accepted')
    env.check('the idle keep-alive connection is closed at once', idle.wait_closed(3 * SLOW),
              'still open')
    env.eq('without an answer', idle.buf, b'')
    r = slow.read_response(timeout=10 * SLOW)
    env.eq('the in-flight request completes, with Connection: close',
           (r.status, r.json(), r.header('Connection')) if r else None,
           (200, {'target': '/slow'}, 'close'))
    env.eq('exit status 0', wait_exit(gw, 8), 0)


@T.case
def sigterm_refuses_requests_that_still_arrive(env):
    """During the drain, a request that still arrives on an open connection is answered 503
    shutting_down: one pipelined behind the response in flight, and one whose head was
    still coming in when the signal came."""
    resume = threading.Event()
    first = http_response(200, b'{"first":true}')
    head, body = first.split(b'\r\n\r\n', 1)
    up = env.scripted([answer(by_target), pieces((head + b'\r\n\r\n', resume), (body, 0), close=False)],
                      default=answer(by_target))
    gw = env.daemon(upstream_config(up.address, timeouts={'shutdown_grace': '10s'}))
    idle = env.client(gw.port)
    env.eq('an idle keep-alive client first', idle.request('GET', '/idle', [('Host', 'a')]).status, 200)
    partial = env.client(gw.port)
    partial.send(b'GET /late HTTP/1.1\r\nHost: a\r\n')
    piped = env.client(gw.port)
    piped.send(build_request('GET', '/first', [('Host', 'a')]) +
               build_request('GET', '/second', [('Host', 'a')]))
    env.require('the head of the first response arrived',
                wait_until(lambda: piped._fill(time.monotonic() + 5 * SLOW) and b'\r\n\r\n' in piped.buf,
                           5 * SLOW), piped.buf)
    gw.signal(signal.SIGTERM)
    gw.signalled = True
    # The idle connection closes when the worker starts draining: from then on it is draining.
    env.require('the idle connection closed', idle.wait_closed(5 * SLOW), 'still open')
    partial.send(b'\r\n')
    r = partial.read_response()
    env.gateway_error('the request whose head arrived during the drain', r, 503, 'shutting_down',
                      'gateway is shutting down', close=True)
    env.check('then that connection closes', partial.wait_closed(5 * SLOW), 'still open')
    resume.set()
    r = piped.read_response()
    env.eq('the response in flight completes; its head went out before the drain',
           (r.status, r.body, r.header('Connection')) if r else None, (200, b'{"first":true}', None))
    r = piped.read_response()
    env.gateway_error('the request pipelined behind it', r, 503, 'shutting_down',
                      'gateway is shutting down', close=True)
    env.check('then that connection closes', piped.wait_closed(5 * SLOW), 'still open')
    env.eq('neither reached the upstream', [q.target for q in up.requests], ['/idle', '/first'])
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


STARTS = int(os.environ.get('SIGNAL_STARTS', '50'))


def first_connect(gw, deadline):
    """Connects the moment the listener accepts, as a client retrying in a loop would."""
    while time.monotonic() < deadline and gw.alive():
        s = socket.socket()
        try:
            s.connect(('127.0.0.1', gw.port))
            return s
        except OSError:
            s.close()
    return None


@T.case
def signals_during_startup(env):
    """A signal sent right after the first connection succeeds (the listener is open, the
    workers may not be running yet) is handled like any other, never fatal: SIGHUP reloads,
    SIGUSR1 reopens the access log, SIGTERM and SIGINT stop with status 0."""
    up = env.scripted(default=answer(by_target))
    access = os.path.join(env.tmp, 'access.log')
    conf = upstream_config(up.address, log={'level': 'info', 'access': access})
    handled = {signal.SIGHUP: 'configuration reloaded', signal.SIGUSR1: 'access log .* reopened'}
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        problems = []
        for i in range(STARTS):
            gw = env.daemon(conf, wait=False)
            s = first_connect(gw, time.monotonic() + 10 * SLOW)
            if s is None:
                problems.append('start %d: never accepted: %s' % (i, gw.log()[-300:]))
                break
            gw.signal(sig)
            gw.signalled = True
            s.close()
            if sig in handled:
                rx = re.compile(handled[sig])
                if not wait_until(lambda: rx.search(gw.log()) or not gw.alive(), 10 * SLOW) \
                        or not gw.alive():
                    problems.append('start %d: %s not handled, exit status %s' % (
                        i, sig.name, gw.proc.poll()))
                    break
                status = gw.stop()
            else:
                status = wait_exit(gw, 10)
            if status != 0:
                problems.append('start %d: exit status %s after %s' % (i, status, sig.name))
                break
            env.daemons.remove(gw)      # checked: teardown keeps only daemons that failed
            if any(m in gw.log() for m in ('ERROR: AddressSanitizer', 'runtime error:')):
                problems.append('start %d: sanitizer report: %s' % (i, gw.log()[-2000:]))
                break
        env.eq('%s right after the first connection, %d starts' % (sig.name, STARTS),
               problems, [])


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
def sighup_removed_listener_refuses_at_once(env):
    up = env.scripted([answer(by_target, delay=1.5)], default=answer(by_target))
    conf = upstream_config(up.address)
    port, extra = free_port(), free_port()
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}, {'listen': '127.0.0.1:%d' % extra}]
    gw = env.daemon(conf, port=port)
    slow = env.client(extra)
    slow.send(build_request('GET', '/slow', [('Host', 'a')]))
    env.require('the slow request reached the upstream',
                wait_until(lambda: any(q.target == '/slow' for q in up.requests), 5), '')
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    gw.write_config(conf)
    gw.signal(signal.SIGHUP)
    env.require('reload done', gw.wait_log('configuration reloaded'), gw.log())
    env.check('the removed listener refuses at once, with a request on the old configuration '
              'in flight', refused(extra), 'accepted')
    env.check('the kept one accepts', not refused(port), 'refused')
    r = slow.read_response(timeout=10 * SLOW)
    env.eq('the request in flight completes', (r.status, r.json()) if r else None,
           (200, {'target': '/slow'}))


class Connector:
    """Threads that each open a connection, make one request on it and close it, again and
    again; a refused connect or any other failure is kept."""

    def __init__(self, port, threads=4):
        self.port = port
        self.stop = False
        self.ok = 0
        self.problems = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, index):
        n = 0
        while not self.stop:
            target = '/a/%d/%d' % (index, n)
            n += 1
            c = None
            try:
                c = Client(self.port, timeout=10 * SLOW)
                r = c.request('GET', target, [('Host', 'x')])
                good = r is not None and r.status == 200 and r.json() == {'target': target}
                problem = None if good else (target, r)
            except Exception as e:      # refused, reset, timeout, malformed
                problem = (target, repr(e))
            finally:
                if c is not None:
                    c.close()
            with self.lock:
                if problem is None:
                    self.ok += 1
                else:
                    self.problems.append(problem)

    def count(self):
        with self.lock:
            return self.ok

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join()


@T.case
def sighup_keeps_listening_sockets(env):
    """A reload keeps every listening socket, each worker's of each address, open all along:
    the same sockets before and after 6 reloads, and no connection refused meanwhile."""
    up = env.scripted(default=answer(by_target))
    port, extra = free_port(), free_port()
    conf = upstream_config(up.address, routes=routes('a'), workers=2)
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}, {'listen': '127.0.0.1:%d' % extra}]
    gw = env.daemon(conf, port=port)

    def sockets():
        held = process_sockets(gw.pid)
        return [sorted(listening_sockets(p) & held) for p in (port, extra)]
    before = sockets()
    env.eq('one listening socket per worker and address', [len(s) for s in before], [2, 2])
    load = [Connector(port), Connector(extra)]
    reloads = 6
    for i in range(reloads):
        # The routes change each time, so every reload builds a new configuration.
        conf['routes'] = routes('a', 'b%d' % i)
        gw.write_config(conf)
        served = [c.count() for c in load]
        gw.signal(signal.SIGHUP)
        env.require('reload %d applied' % (i + 1),
                    wait_until(lambda: gw.log().count('configuration reloaded') == i + 1,
                               10 * SLOW), gw.log()[-1000:])
        env.require('clients served on both addresses after reload %d' % (i + 1),
                    wait_until(lambda: all(c.count() > n + 20 for c, n in zip(load, served)),
                               10 * SLOW), [c.count() for c in load])
    for c in load:
        c.finish()
    env.eq('no connection refused or failed during the reloads',
           [c.problems[:3] for c in load], [[], []])
    env.eq('the same listening sockets after %d reloads' % reloads, sockets(), before)
    print('# %d reloads, requests served on each address: %s'
          % (reloads, [c.ok for c in load]))


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
