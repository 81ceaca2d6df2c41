"""Reload under load: clients keep requesting (keep-alive connections, fresh
connections, requests that span a reload) while jsongate gets SIGHUP again
and again, alternating two valid configurations; the second adds a listener
and renames routes.  Every request must succeed: 0 failed requests, 0 socket
errors, every reload applied, the added listener opened and closed each time.

Under make check it runs 5 s with 20 reloads.  The full run of issue 4:

    RELOAD_SECONDS=20 RELOADS=100 python3 tests/scenario/test_ops_reload_load.py

(with JSONGATE and DEMO_UPSTREAM set as for any scenario test).
RELOAD_CLIENT=wrk drives the load with wrk instead of the Python clients."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

SECONDS = float(os.environ.get('RELOAD_SECONDS', '5'))
RELOADS = int(os.environ.get('RELOADS', '20'))
CLIENT = os.environ.get('RELOAD_CLIENT', 'python')
THREADS = 8


def config(demo, port, extra_port, variant):
    conf = upstream_config(demo, workers=2, keepalive=16, routes=[
        {'name': 'orders-%s' % variant, 'match': {'path_prefix': '/api/'}, 'upstream': 'app'},
        {'name': 'delay-%s' % variant, 'match': {'path_prefix': '/delay/'}, 'upstream': 'app'}])
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    if variant == 'b':
        conf['listeners'].append({'listen': '127.0.0.1:%d' % extra_port})
        conf['upstreams']['app']['keepalive'] = 4
    return conf


def accepting(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=1).close()
        return True
    except OSError:
        return False


class Load:
    """Python clients: keep-alive connections renewed every 50 requests, one request in 10
    held 30 ms by the upstream so that requests are in flight across reloads."""

    def __init__(self, port):
        self.port = port
        self.stop = False
        self.ok = 0
        self.failed = 0
        self.socket_errors = 0
        self.first_errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(THREADS)]
        for t in self.threads:
            t.start()

    def note(self, what):
        with self.lock:
            if len(self.first_errors) < 5:
                self.first_errors.append(what)

    def run(self, index):
        c = None
        n = 0
        while not self.stop:
            try:
                if c is None:
                    c = Client(self.port, timeout=10 * SLOW)
                path = '/delay/30' if n % 10 == index % 10 else '/api/orders/1'
                r = c.request('GET', path, [('Host', 'load')])
                n += 1
                with self.lock:
                    if r is not None and r.status == 200:
                        self.ok += 1
                    else:
                        self.failed += 1
                        self.note('%s: %r' % (path, r))
                if r is None or n % 50 == 0:
                    c.close()
                    c = None
            except Exception as e:      # socket errors and protocol errors alike
                with self.lock:
                    self.socket_errors += 1
                self.note('%s: %r' % (path, e))
                if c is not None:
                    c.close()
                c = None
        if c is not None:
            c.close()

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join()


def wrk_load(port, seconds):
    return subprocess.Popen(['wrk', '-t2', '-c32', '-d%ds' % max(1, int(seconds)),
                             'http://127.0.0.1:%d/api/orders/1' % port],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@T.case
def reload_under_load(env):
    demo = env.demo()
    port, extra = free_port(), free_port()
    gw = env.daemon(config(demo.address, port, extra, 'a'), port=port)
    wrk = load = None
    if CLIENT == 'wrk':
        wrk = wrk_load(port, SECONDS)
    else:
        load = Load(port)
    start = time.monotonic()
    applied = 0
    listener_ok = 0
    for i in range(RELOADS):
        variant = 'b' if i % 2 == 0 else 'a'
        gw.write_config(config(demo.address, port, extra, variant))
        gw.signal(signal.SIGHUP)
        if wait_until(lambda: gw.log().count('configuration reloaded') == i + 1, 10 * SLOW):
            applied += 1
        if wait_until(lambda: accepting(extra) == (variant == 'b'), 5 * SLOW):
            listener_ok += 1
        # Spread the reloads over the run.
        pause = start + SECONDS * (i + 1) / RELOADS - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    if wrk is not None:
        out = wrk.communicate(timeout=SECONDS + 30)[0].decode()
        print('# ' + out.replace('\n', '\n# '))
        m = re.search(r'(\d+) requests in', out)
        total = int(m.group(1)) if m else 0
        errors = re.search(r'Socket errors: (.*)', out)
        non2xx = re.search(r'Non-2xx or 3xx responses: (\d+)', out)
        env.check('wrk ran requests', total > 0, out)
        env.eq('wrk socket errors', errors.group(1) if errors else None, None)
        env.eq('wrk non-2xx responses', int(non2xx.group(1)) if non2xx else 0, 0)
        ok, failed, sock = total, 0, 0
    else:
        load.finish()
        ok, failed, sock = load.ok, load.failed, load.socket_errors
        env.eq('failed requests', failed, 0)
        env.eq('socket errors', sock, 0)
        env.check('first errors', not load.first_errors, load.first_errors)
    elapsed = time.monotonic() - start
    env.eq('reloads applied', applied, RELOADS)
    env.eq('added listener opened / removed listener closed after each reload',
           listener_ok, RELOADS)
    env.check('requests were served all along', ok > RELOADS * 10, ok)
    print('# reload under load: %.1f s, %d reloads, %d requests ok, %d failed, '
          '%d socket errors, client %s' % (elapsed, applied, ok, failed, sock, CLIENT))
    env.check('no reload failed', 'reload failed' not in gw.log(), gw.log()[-1000:])


T.run()
