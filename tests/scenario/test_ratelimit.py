"""Rate limits (a route's rate_limit:): the exact RateLimit-Limit/-Remaining/-Reset of every
answer and the exact 429 rate_limited with Retry-After; one bucket per key for the whole
daemon (two workers admit 5-7 of 30 immediate requests at rate 5/s, burst 5); keys by
$api_key, $jwt.CLAIM, $header.NAME and $client_addr (X-Forwarded-For believed only from
trusted_proxies); buckets kept by a reload that keeps the limit, new ones for a new limit;
the counters of /metrics; shared limits through a real redis-server on a free port (two
daemons admit together what one would; Redis killed: on_error allow passes every request,
counted, deny answers 503 rate_limit_unavailable; Redis restarted: limiting resumes within
seconds, without a restart)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
from harness import REASONS  # noqa: E402

try:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec
except ImportError:     # Debian's python3-jwt under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

T = Suite(__file__)
REASONS.update({401: 'Unauthorized', 403: 'Forbidden', 429: 'Too Many Requests'})


def upstream_ok():
    return answer(lambda req: http_response(200, b'{"ok":true}'))


def limited_config(up, rate_limit, extra_route=None, **top):
    route = {'name': 'api', 'match': {'path_prefix': '/api/'}, 'upstream': 'app',
             'rate_limit': rate_limit}
    route.update(extra_route or {})
    return upstream_config(up.address, routes=[
        route, {'name': 'open', 'match': {'path_prefix': '/'}, 'upstream': 'app'}], **top)


def get(c, target, rid, headers=()):
    return c.request('GET', target, [('Host', 'h'), ('X-Request-Id', rid)] + list(headers))


def rl_headers(r):
    return tuple(r.header(n) for n in ('RateLimit-Limit', 'RateLimit-Remaining',
                                       'RateLimit-Reset', 'Retry-After'))


metrics = metrics_text


def sample(text, line_start):
    for line in text.splitlines():
        if line.startswith(line_start + ' '):
            return float(line.split()[-1])
    return None


@T.case
def exact_headers(env):
    up = env.scripted(default=upstream_ok())
    aport = free_port()
    gw = env.daemon(limited_config(up, {'rate': '1/m', 'burst': 3},
                                   admin={'listen': '127.0.0.1:%d' % aport}))
    c = env.client(gw.port)
    for n, (remaining, reset) in enumerate([(2, 60), (1, 120), (0, 180)]):
        r = get(c, '/api/x', 'e-%d' % n)
        env.eq('request %d: admitted' % n, (r.status, r.body), (200, b'{"ok":true}'))
        env.eq('request %d: its headers' % n, rl_headers(r), ('3', str(remaining), str(reset),
                                                             None))
    r = get(c, '/api/x', 'e-3')
    env.gateway_error('the fourth: refused', r, 429, 'rate_limited', 'too many requests',
                      close=False, request_id='e-3', headers=[
                          ('RateLimit-Limit', '3'), ('RateLimit-Remaining', '0'),
                          ('RateLimit-Reset', '180'), ('Retry-After', '60')])
    env.eq('the refused request did not reach the upstream', len(up.requests), 3)
    r = get(c, '/other', 'e-4')
    env.eq('a route without a limit: no headers', (r.status, rl_headers(r)),
           (200, (None, None, None, None)))
    m = metrics(aport)
    env.eq('allowed counted', sample(
        m, 'jsongate_ratelimit_requests_total{route="api",outcome="allowed"}'), 3)
    env.eq('limited counted', sample(
        m, 'jsongate_ratelimit_requests_total{route="api",outcome="limited"}'), 1)
    env.eq('no error', sample(
        m, 'jsongate_ratelimit_requests_total{route="api",outcome="error"}'), 0)

    # A reload keeping the limit keeps the bucket; a new limit starts a new one.
    mark = len(gw.log())
    gw.signal(signal.SIGHUP)
    gw.wait_log('reload', start=mark)
    time.sleep(0.2 * SLOW)
    c = env.client(gw.port)
    env.eq('after a reload with the same limit: still refused', get(c, '/api/x', 'e-5').status,
           429)
    gw.write_config(dict(limited_config(up, {'rate': '2/m', 'burst': 3}),
                         listeners=[{'listen': '127.0.0.1:%d' % gw.port}]))
    mark = len(gw.log())
    gw.signal(signal.SIGHUP)
    gw.wait_log('reload', start=mark)
    time.sleep(0.2 * SLOW)
    c = env.client(gw.port)
    r = get(c, '/api/x', 'e-6')
    env.eq('a new limit: a new bucket', (r.status, rl_headers(r)), (200, ('3', '2', '30', None)))


@T.case
def one_bucket_for_the_daemon(env):
    """Two workers, 30 requests at once on 30 connections: the bucket is the daemon's."""
    up = env.scripted(default=upstream_ok())
    gw = env.daemon(limited_config(up, {'rate': '5/s', 'burst': 5}, workers=2))
    statuses = []
    lock = threading.Lock()
    clients = [Client(gw.port) for _ in range(30)]
    start = threading.Event()

    def one(c, n):
        start.wait()
        r = get(c, '/api/x', 'w-%d' % n)
        with lock:
            statuses.append(r.status)
        c.close()

    threads = [threading.Thread(target=one, args=(c, n)) for n, c in enumerate(clients)]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join(IO_TIMEOUT)
    admitted = statuses.count(200)
    env.check('5 to 7 of 30 admitted', 5 <= admitted <= 7, statuses)
    env.eq('the rest refused with 429', statuses.count(429), 30 - admitted)


@T.case
def keys(env):
    up = env.scripted(default=upstream_ok())
    gw = env.daemon(limited_config(up, {'rate': '1/m', 'burst': 1, 'key': '$header.X-User'}))
    c = env.client(gw.port)
    env.eq('alice: admitted', get(c, '/api/x', 'h-1', [('X-User', 'alice')]).status, 200)
    env.eq('alice again: refused', get(c, '/api/x', 'h-2', [('X-User', 'alice')]).status, 429)
    env.eq('bob: his own bucket', get(c, '/api/x', 'h-3', [('X-User', 'bob')]).status, 200)
    env.eq('no header: by the address', get(c, '/api/x', 'h-4').status, 200)
    env.eq('no header again: refused', get(c, '/api/x', 'h-5').status, 429)


@T.case
def client_addr_from_trusted_proxies(env):
    up = env.scripted(default=upstream_ok())
    gw = env.daemon(limited_config(up, {'rate': '1/m', 'burst': 1},
                                   trusted_proxies=['127.0.0.0/8']))
    c = env.client(gw.port)
    xff = lambda a: [('X-Forwarded-For', a)]  # noqa: E731
    env.eq('a client behind the proxy', get(c, '/api/x', 'c-1', xff('192.0.2.1')).status, 200)
    env.eq('another client behind it', get(c, '/api/x', 'c-2',
                                           xff('192.0.2.2, 127.0.0.5')).status, 200)
    env.eq('the first again', get(c, '/api/x', 'c-3', xff('192.0.2.1')).status, 429)

    up2 = env.scripted(default=upstream_ok())
    gw2 = env.daemon(limited_config(up2, {'rate': '1/m', 'burst': 1},
                                    trusted_proxies=['10.0.0.0/8']))
    c = env.client(gw2.port)
    env.eq('an untrusted peer', get(c, '/api/x', 'u-1', xff('192.0.2.1')).status, 200)
    env.eq('its X-Forwarded-For is not believed', get(c, '/api/x', 'u-2',
                                                      xff('192.0.2.2')).status, 429)


@T.case
def keys_from_credentials(env):
    up = env.scripted(default=upstream_ok())
    key = ec.generate_private_key(ec.SECP256R1())
    d = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    d['kid'] = 'k1'
    path = os.path.join(env.tmp, 'jwks.json')
    with open(path, 'w') as f:
        json.dump({'keys': [d]}, f)
    conf = limited_config(up, {'rate': '1/m', 'burst': 1, 'key': '$jwt.org.id'},
                          {'auth': 'users'}, auth={'users': {'jwt': {'jwks_file': path}}})
    gw = env.daemon(conf)
    c = env.client(gw.port)

    def tok(sub, org):
        return [('Authorization', 'Bearer ' + jwt.encode(
            {'sub': sub, 'org': {'id': org}, 'exp': int(time.time()) + 300}, key,
            algorithm='ES256', headers={'kid': 'k1'}))]

    env.eq('org 1, alice', get(c, '/api/x', 'j-1', tok('alice', 1)).status, 200)
    env.eq('org 1, bob: the org\'s bucket is empty', get(c, '/api/x', 'j-2',
                                                         tok('bob', 1)).status, 429)
    env.eq('org 2', get(c, '/api/x', 'j-3', tok('carol', 2)).status, 200)
    r = get(c, '/api/x', 'j-4')
    env.eq('no token: 401 before the limit, without its headers', (r.status, rl_headers(r)),
           (401, (None, None, None, None)))


class Redis:
    """A redis-server of the test's own on a free port; kill() and start() again."""

    def __init__(self, env):
        self.env = env
        self.port = free_port()
        self.proc = None
        self.start()
        env.procs.append(self)

    def start(self):
        self.proc = subprocess.Popen(
            [shutil.which('redis-server') or '/usr/bin/redis-server', '--port', str(self.port),
             '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
             '--dir', self.env.tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_until(lambda: self._accepts(), 10 * SLOW):
            raise CheckFailed('redis-server did not start')

    def _accepts(self):
        try:
            s = socket.create_connection(('127.0.0.1', self.port), timeout=1)
            s.sendall(b'PING\r\n')
            ok = s.recv(16).startswith(b'+PONG')
            s.close()
            return ok
        except OSError:
            return False

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.kill()


def shared_config(up, redis, on_error='allow', **limit):
    rl = {'rate': '5/s', 'burst': 10, 'shared': True, 'key': '$header.X-User'}
    rl.update(limit)
    return limited_config(up, rl, rate_limits={'redis': {
        'address': '127.0.0.1:%d' % redis.port, 'timeout': '200ms', 'on_error': on_error}})


@T.case
def shared_through_redis(env):
    redis = Redis(env)
    up = env.scripted(default=upstream_ok())
    aport = free_port()
    gw1 = env.daemon(dict(shared_config(up, redis), admin={'listen': '127.0.0.1:%d' % aport}))
    gw2 = env.daemon(dict(shared_config(up, redis), workers=2))
    c1, c2 = env.client(gw1.port), env.client(gw2.port)
    user = [('X-User', 'alice')]
    t0 = time.time()
    statuses = []
    for n in range(20):
        statuses.append(get(c1, '/api/x', 's1-%d' % n, user).status)
        statuses.append(get(c2, '/api/x', 's2-%d' % n, user).status)
    elapsed = time.time() - t0
    admitted = statuses.count(200)
    env.check('40 requests across both daemons: 10 to 16 admitted (took %.2fs)' % elapsed,
              10 <= admitted <= 10 + int(5 * elapsed) + 1 and admitted <= 16 + int(
                  5 * max(0, elapsed - 1)), statuses)
    env.eq('the rest 429', statuses.count(429), 40 - admitted)
    r = get(c1, '/api/x', 's-h', [('X-User', 'bob')])
    env.eq('another key: its own bucket, with the headers', (r.status, rl_headers(r)),
           (200, ('10', '9', '1', None)))

    # Redis gone: on_error allow passes every request, counted as error.
    redis.kill()
    statuses = [get(c1, '/api/x', 'd-%d' % n, user).status for n in range(20)]
    env.eq('Redis down, on_error allow: all 20 pass', set(statuses), {200})
    m = metrics(aport)
    env.check('counted as error', sample(
        m, 'jsongate_ratelimit_requests_total{route="api",outcome="error"}') >= 20, m)
    env.check('Redis errors counted', sample(m, 'jsongate_redis_errors_total') >= 20)

    # Back: limiting resumes within seconds, no restart.
    redis.start()
    deadline = time.time() + 10 * SLOW
    limited = False
    while time.time() < deadline and not limited:
        limited = get(c1, '/api/x', 'b', [('X-User', 'carol')]).status == 429
        time.sleep(0.02)
    env.check('Redis back: limiting again', limited)


@T.case
def shared_after_auth(env):
    """A request that waited for Redis goes upstream without the key auth kept from it."""
    redis = Redis(env)
    up = env.scripted(default=upstream_ok())
    kf = os.path.join(env.tmp, 'keys.txt')
    with open(kf, 'w') as f:
        f.write('svc %s\n' % hashlib.sha256(b'k-1').hexdigest())
    conf = shared_config(up, redis, key='$api_key')
    conf['routes'][0]['auth'] = 'keys'
    conf['auth'] = {'keys': {'keys': {'keys_file': kf, 'forward_credentials': False}}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = get(c, '/api/x', 'a-1', [('X-API-Key', 'k-1'), ('X-Other', 'o')])
    env.eq('admitted, with the headers of the shared limit', (r.status, rl_headers(r)),
           (200, ('10', '9', '1', None)))
    env.eq('the key is not sent upstream', (up.requests[0].header('X-API-Key'),
                                            up.requests[0].header('X-Other')), (None, 'o'))


@T.case
def shared_on_error_deny(env):
    redis = Redis(env)
    up = env.scripted(default=upstream_ok())
    gw = env.daemon(shared_config(up, redis, on_error='deny'))
    c = env.client(gw.port)
    env.eq('with Redis: admitted', get(c, '/api/x', 'y-1').status, 200)
    redis.kill()
    r = get(c, '/api/x', 'y-2')
    env.gateway_error('Redis down, on_error deny', r, 503, 'rate_limit_unavailable',
                      'the shared rate limit store cannot be reached', close=False,
                      request_id='y-2')
    env.eq('the refused request did not reach the upstream', len(up.requests), 1)


T.run()
