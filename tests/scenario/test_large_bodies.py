"""Large bodies streamed both ways: a 1 GB download and a 1 GB upload pass
byte-identical (crc32) while jsongate's peak RSS stays under 64 MB, also
when the upload is routed by a leading field of its JSON body (match.json);
chunked both ways; a slow reader makes jsongate stop reading from the
upstream instead of buffering the body.

Under JSONGATE_WRAPPER (valgrind) the sizes shrink to 64 MB; with a
sanitizer build or a wrapper the RSS bound is raised to 512 MB, which still
catches a proxy holding whole bodies.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

GB = 1 << 30
MB = 1 << 20


SCALE = 16 if WRAPPER else 1        # 1 GB -> 64 MB under valgrind
RSS_LIMIT_KB = (512 if instrumented() else 64) * 1024


def size(n):
    return n // SCALE


class RssWatch:
    """Samples the daemon's VmRSS in a thread; peak is the largest seen."""

    def __init__(self, pid):
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.05):
            try:
                self.peak = max(self.peak, rss_kb(self.pid)['VmRSS'])
            except (OSError, KeyError):
                return

    def done(self):
        self.stop.set()
        self.thread.join(2)
        return self.peak


def gateway(env, **kw):
    demo = env.demo()
    conf = upstream_config(demo.address, timeouts={'upstream_connect': '2s', 'upstream_response': '60s',
                                                   'client_body': '60s', 'shutdown_grace': '2s'}, **kw)
    return demo, env.daemon(conf)


def check_rss(env, gw, watch, label):
    peak = watch.done()
    hwm = rss_kb(gw.pid)['VmHWM']
    env.check('%s: peak RSS under %d MB' % (label, RSS_LIMIT_KB // 1024), hwm < RSS_LIMIT_KB,
              'VmHWM %d kB, sampled peak %d kB' % (hwm, peak))


@T.case
def download_1gb(env):
    demo, gw = gateway(env)
    n = size(GB)
    watch = RssWatch(gw.pid)
    c = env.client(gw.port, timeout=120 * SLOW)
    start = time.monotonic()
    r = c.request('GET', '/bytes/%d' % n, [('Host', 'a')], keep_body=False)
    took = time.monotonic() - start
    env.eq('%d MB download: status, framing, length' % (n // MB),
           (r.status, r.framing, r.header('Content-Length'), r.body_len), (200, 'length', str(n), n))
    env.eq('%d MB download: crc32 identical' % (n // MB), r.body_crc, pattern_crc(n))
    print('# %d MB download in %.1fs' % (n // MB, took))
    check_rss(env, gw, watch, 'download')


@T.case
def upload_1gb(env):
    demo, gw = gateway(env)
    n = size(GB)
    watch = RssWatch(gw.pid)
    c = env.client(gw.port, timeout=120 * SLOW)
    block = pattern_block() * 16                        # 1 MB of the pattern
    start = time.monotonic()
    c.send(build_request('PUT', '/sink', [('Host', 'a'), ('Content-Length', str(n))]))
    sent = 0
    while sent < n:
        piece = block[:min(len(block), n - sent)]
        c.send(piece)
        sent += len(piece)
    r = c.read_response('PUT', timeout=60 * SLOW)
    took = time.monotonic() - start
    env.eq('%d MB upload: the upstream counted every byte with the same crc32' % (n // MB),
           (r.status, r.json()) if r else None, (200, {'bytes': n, 'crc32': pattern_crc(n)}))
    print('# %d MB upload in %.1fs' % (n // MB, took))
    check_rss(env, gw, watch, 'upload')


@T.case
def upload_1gb_routed_by_field(env):
    demo = env.demo()
    conf = upstream_config(demo.address, timeouts={'upstream_connect': '2s', 'upstream_response': '60s',
                                                   'client_body': '60s', 'shutdown_grace': '2s'},
                           routes=[{'name': 'big', 'match': {'json': {'field': 'type', 'equals': 'big'}},
                                    'upstream': 'app'},
                                   {'name': 'other', 'upstream': 'none'}])
    conf['upstreams']['none'] = {'servers': ['127.0.0.1:%d' % env.closed_port()]}
    gw = env.daemon(conf)
    head, tail = b'{"type":"big","data":"', b'"}'
    n = size(GB)
    watch = RssWatch(gw.pid)
    c = env.client(gw.port, timeout=120 * SLOW)
    block = pattern_block() * 16                        # 1 MB of the pattern
    start = time.monotonic()
    c.send(build_request('PUT', '/sink', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('Content-Length', str(n))]) + head)
    crc, sent = zlib.crc32(head), len(head)
    while sent < n - len(tail):
        piece = block[:min(len(block), n - len(tail) - sent)]
        c.send(piece)
        crc = zlib.crc32(piece, crc)
        sent += len(piece)
    c.send(tail)
    crc = zlib.crc32(tail, crc)
    r = c.read_response('PUT', timeout=60 * SLOW)
    took = time.monotonic() - start
    env.eq('%d MB upload routed by its first field: the upstream counted every byte' % (n // MB),
           (r.status, r.json()) if r else None, (200, {'bytes': n, 'crc32': crc}))
    print('# %d MB upload routed by a field in %.1fs, VmHWM %d kB' % (n // MB, took,
                                                                     rss_kb(gw.pid)['VmHWM']))
    check_rss(env, gw, watch, 'routed upload')


@T.case
def chunked_both_ways(env):
    demo, gw = gateway(env)
    n = size(256 * MB)
    watch = RssWatch(gw.pid)
    c = env.client(gw.port, timeout=120 * SLOW)
    r = c.request('GET', '/chunked/%d' % n, [('Host', 'a')], keep_body=False)
    env.eq('%d MB chunked download: forwarded chunked, identical' % (n // MB),
           (r.status, r.framing, r.body_len, r.body_crc), (200, 'chunked', n, pattern_crc(n)))
    c.send(build_request('POST', '/sink', [('Host', 'a'), ('Transfer-Encoding', 'chunked')]))
    block = pattern_block() * 4                         # 256 KB chunks
    sent = 0
    while sent < n:
        piece = block[:min(len(block), n - sent)]
        c.send(b'%x\r\n' % len(piece) + piece + b'\r\n')
        sent += len(piece)
    c.send(b'0\r\n\r\n')
    r = c.read_response('POST', timeout=60 * SLOW)
    env.eq('%d MB chunked upload: identical at the upstream' % (n // MB),
           (r.status, r.json()) if r else None, (200, {'bytes': n, 'crc32': pattern_crc(n)}))
    check_rss(env, gw, watch, 'chunked')


@T.case
def slow_reader_backpressure(env):
    demo, gw = gateway(env)
    n = size(512 * MB)
    watch = RssWatch(gw.pid)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.connect(('127.0.0.1', gw.port))
    c = Client(gw.port, connect=False, timeout=120 * SLOW)
    c.sock = s
    env.clients.append(c)
    c.send(build_request('GET', '/bytes/%d' % n, [('Host', 'a')]))
    # Read slowly for a while: 64 KB every 50 ms. The demo upstream could
    # send all 512 MB in well under a second, so anything buffering shows.
    got, crc = 0, 0
    head = b''
    while b'\r\n\r\n' not in head:
        head += s.recv(1)
    for _ in range(60):
        data = s.recv(64 * 1024)
        got += len(data)
        crc = zlib.crc32(data, crc)
        time.sleep(0.05)            # the slowness under test, not synchronisation
    slow_peak = rss_kb(gw.pid)
    # Then read the rest at full speed and check every byte.
    s.settimeout(60 * SLOW)
    while got < n:
        data = s.recv(1 << 20)
        if not data:
            break
        got += len(data)
        crc = zlib.crc32(data, crc)
    env.eq('%d MB read slowly, then fast: identical' % (n // MB), (got, crc), (n, pattern_crc(n)))
    env.check('RSS while the client read slowly under %d MB' % (RSS_LIMIT_KB // 1024),
              slow_peak['VmRSS'] < RSS_LIMIT_KB, slow_peak)
    check_rss(env, gw, watch, 'slow reader')


T.run()
