"""Hostile clients: pipeline floods that are never read, pipelines deeper than a small
stack allows, one pipelining connection against another client, heads as large as
max_header allows.

Memory bounds are VmRSS against the daemon's idle figure.  Under a sanitizer or valgrind the
allocator keeps freed memory in quarantine: the bounds are then the wrapper's, and the
answers are still checked exactly.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

NOTHING = b'GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n'
MB = 1024


def no_route_config(**top):
    """A daemon whose only route is /api/: /nothing gets 404 no_route from the gateway."""
    up_routes = [{'name': 'api', 'match': {'path_prefix': '/api/'}, 'upstream': 'app'}]
    return upstream_config('127.0.0.1:9', routes=up_routes, **top)


def flood(sock, data, seconds):
    """Sends data until all of it is out or the daemon stopped taking it for `seconds`;
    returns the bytes sent."""
    sock.setblocking(False)
    sent, stalled_since = 0, None
    view = memoryview(data)
    while sent < len(data):
        try:
            n = sock.send(view[sent:sent + 65536])
            sent += n
            stalled_since = None
        except BlockingIOError:
            now = time.monotonic()
            stalled_since = stalled_since or now
            if now - stalled_since > seconds:
                break
            time.sleep(0.01)
    sock.setblocking(True)
    return sent


def small_receive_buffer_client(port):
    """A connected socket whose receive buffer is 4 KB: what the daemon sends it piles up
    on the daemon's side."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(('127.0.0.1', port))
    return s


def rss_bound_kb(idle_kb, extra_mb):
    """The RSS a test allows: idle + extra, or the sanitizer's more generous figure."""
    return idle_kb + (extra_mb * 4 if instrumented() else extra_mb) * MB


@T.case
def never_read_pipeline_flood(env):
    """30 MB of pipelined GETs on one connection that never reads its answers: the daemon
    stops reading once the unsent answers pass its watermark, so it holds a bounded amount,
    and the memory goes back once the client is gone."""
    gw = env.daemon(no_route_config())
    time.sleep(0.2)
    idle = gw.rss()['VmRSS']
    s = small_receive_buffer_client(gw.port)
    sent = flood(s, NOTHING * (30 * 1024 * 1024 // len(NOTHING)), 2)
    peak = gw.rss()['VmRSS']
    env.check('the daemon stopped reading: far less than 30 MB taken',
              sent < 16 * 1024 * 1024, '%d bytes taken' % sent)
    env.check('RSS within idle + 64 MB while the flood waits',
              peak <= rss_bound_kb(idle, 64), 'idle %d kB, now %d kB' % (idle, peak))
    other = env.client(gw.port)
    r = other.request('GET', '/nothing', [('Host', 'a')])
    env.eq('another client is answered meanwhile', r.status, 404)
    s.close()
    if not instrumented():
        settled = wait_until(lambda: gw.rss()['VmRSS'] <= idle + 8 * MB, 5)
        env.check('memory back within 5 s of the close (idle + 8 MB)', settled,
                  'idle %d kB, now %d kB' % (idle, gw.rss()['VmRSS']))
    r = other.request('GET', '/nothing', [('Host', 'a')])
    env.eq('and still served afterwards', r.status, 404)


@T.case
def never_read_proxied_pipeline(env):
    """Pipelined proxied 1 KB GETs never read: bounded as well, every upstream answer taken
    only while the client's share of answers is under the watermark."""
    body = b'{"k":"' + b'x' * 1010 + b'"}'
    up = env.scripted(default=answer(http_response(200, body)))
    gw = env.daemon(upstream_config(up.address))
    time.sleep(0.2)
    idle = gw.rss()['VmRSS']
    s = small_receive_buffer_client(gw.port)
    req = b'GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n'
    sent = flood(s, req * (3 * 1024 * 1024 // len(req)), 2)
    # Until the upstream sees no new request for a second (or 15 s have passed).
    seen, since = -1, time.monotonic()
    deadline = time.monotonic() + 15 * SLOW
    while time.monotonic() < deadline and time.monotonic() - since < 1:
        if len(up.requests) != seen:
            seen, since = len(up.requests), time.monotonic()
        time.sleep(0.05)
    peak = gw.rss()['VmRSS']
    env.check('RSS within idle + 64 MB', peak <= rss_bound_kb(idle, 64),
              'idle %d kB, now %d kB, %d bytes taken' % (idle, peak, sent))
    # What the kernel's send buffer takes (tcp_wmem's maximum), plus the 64 KB watermark.
    with open('/proc/sys/net/ipv4/tcp_wmem') as f:
        wmem_max = int(f.read().split()[2])
    most = (wmem_max + 64 * 1024) // len(body) + 1
    env.check('the upstream was asked only while the answers fit the socket and the '
              'watermark (at most %d answers), not once per request sent' % most,
              len(up.requests) <= most,
              '%d upstream requests for %d sent' % (len(up.requests), sent // len(req)))
    s.close()


@T.case
def sigterm_while_a_pipeline_waits_for_its_reader(env):
    """SIGTERM while a client that never reads holds a paused pipeline: the daemon stops
    within shutdown_grace (the connection is cut then) and exits 0."""
    gw = env.daemon(no_route_config(timeouts={'upstream_connect': '2s',
                                              'upstream_response': '10s',
                                              'shutdown_grace': '2s'}))
    s = small_receive_buffer_client(gw.port)
    flood(s, NOTHING * (4 * 1024 * 1024 // len(NOTHING)), 1)
    start = time.monotonic()
    status = gw.stop(10)                # SIGTERM, then wait
    took = time.monotonic() - start
    env.eq('exit status', status, 0)
    env.check('stopped by shutdown_grace (2 s)', took < 2 + 3 * SLOW, '%.1f s' % took)
    s.close()


@T.case
def deep_pipeline_small_stack(env):
    """20,001 pipelined requests in one write to a daemon running with a 256 KB stack: each
    is answered, in order, and the daemon lives (requests are handled in a loop)."""
    gw = env.daemon(no_route_config(), stack_kb=256)
    n = 20001
    data = NOTHING * (n - 1) + b'GET /nothing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n'
    c = env.client(gw.port)
    sender = threading.Thread(target=lambda: c.sock.sendall(data), daemon=True)
    sender.start()
    got = bytearray()
    c.sock.settimeout(30 * SLOW)
    while True:
        chunk = c.sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sender.join(5)
    env.eq('every request answered 404', got.count(b'HTTP/1.1 404 Not Found\r\n'), n)
    env.eq('the last one closes the connection', got.count(b'Connection: close\r\n'), 1)
    env.check('the daemon is alive', gw.alive(), 'exit status %s' % gw.proc.returncode)


@T.case
def pipeline_shares_the_worker(env):
    """7,000 pipelined requests in one read: a request on another connection, sent after
    them, is answered before the pipeline's end (the pipeline waits for its client to read,
    and goes a turn at a time), and every request of the pipeline is answered in order."""
    gw = env.daemon(no_route_config(log={'level': 'info', 'access': 'stderr'}))
    c = env.client(gw.port)
    n = 7000
    c.send(b''.join(b'GET /nothing?%d HTTP/1.1\r\nHost: a\r\n\r\n' % i for i in range(n)))
    other = env.client(gw.port)
    r = other.request('GET', '/nothing?other', [('Host', 'a')])
    env.eq('the other client is answered', r.status, 404)
    for i in range(n):
        c.read_response()
    gw.wait_log(r'/nothing\?%d"' % (n - 1))
    order = re.findall(r'"path":"/nothing\?(\w+)"', gw.log())
    env.eq('the pipeline answered in order', [o for o in order if o != 'other'],
           [str(i) for i in range(n)])
    env.check('the other request logged before the pipeline\'s end',
              'other' in order and order.index('other') < n - 1,
              'at %s of %d' % (order.index('other') if 'other' in order else None, n))


@T.case
def head_as_large_as_max_header(env):
    """A 300 KB cookie jar under max_header: 512k is proxied (the input grows to hold the
    head); over it, 431."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, limits={'max_header': '512k'}))
    jar = 'c=' + 'j' * (300 * 1024)
    c = env.client(gw.port)
    r = c.request('GET', '/jar', [('Host', 'a'), ('Cookie', jar)], timeout=8)
    env.eq('a 300 KB head is proxied', r.status, 200)
    env.eq('the upstream got the whole cookie', up.requests[0].header('cookie'), jar)
    c = env.client(gw.port)
    r = c.request('GET', '/jar', [('Host', 'a'), ('Cookie', 'c=' + 'j' * (600 * 1024))],
                  timeout=8)
    env.gateway_error('a 600 KB head', r, 431, 'header_too_large',
                      'request header exceeds limits.max_header', close=True)


T.run()
