"""JSON answers over limits.max_body rewritten while they are forwarded: the
same bytes as the buffered path (one daemon streams, another buffers the
same bodies, for every op that streams, over a Content-Length, chunks cut
anywhere and the close), sent chunked; ops that cannot stream, encoded
bodies and errors found before the first byte out follow on_error as
before; a body found malformed after its answer started is cut (no last
chunk, the connection closed; a stream reset over HTTP/2) and counted; a
64 MB body to a slow reader costs the daemon at most idle + 32 MB."""

import os
import random
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

RID = 'req-stream-1'

# Programs that stream, and the YAML of their routes.
PROGRAMS = {
    'unwrap': '[ { unwrap: data } ]',
    'drop': '[ { drop: [ debug, msg ] } ]',
    'rename': '[ { rename: { msg: message } } ]',
    'keep': '[ { keep: [ code, data ] } ]',
    'set': '[ { set: { gateway: jsongate, request_id: $request_id, n: 1 } } ]',
    'wrap': '[ { wrap: payload } ]',
    'chain': '[ { unwrap: data }, { drop: [ secret ] }, { set: { ok: true } }, { wrap: result } ]',
    'status': '[ { drop: [ debug ], when: { status: 2xx } } ]',
}


def routes(extra=''):
    text = ''
    for name, ops in PROGRAMS.items():
        text += ('  - name: %s\n    match: { path_prefix: /%s/ }\n    upstream: app\n'
                 '    response: %s\n' % (name, name, ops))
    return text + extra


def start(env, up, max_body, extra_routes='', admin=False, h2=False, **top):
    port = free_port()
    conf = upstream_config(up.address, **top)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    if h2:
        conf['listeners'][0]['http2'] = True
    conf.setdefault('limits', {})['max_body'] = max_body
    if admin:
        conf['admin'] = {'listen': '127.0.0.1:%d' % free_port()}
    gw = env.daemon(to_yaml(conf) + '\nroutes:\n' + routes(extra_routes), port=port)
    gw.admin = conf['admin']['listen'] if admin else None
    return gw


def scrape(gw, prefix):
    """The sample lines of /metrics starting with prefix, sorted."""
    return metrics_lines(gw.admin, prefix)


def chunked(body, rng):
    """body in chunks of random sizes (1 byte to 3 KB), with an extension now and then."""
    out, at = [], 0
    while at < len(body):
        n = rng.choice((1, 2, 7, 100, 1000, 3000))
        piece = body[at:at + n]
        out.append(b'%x%s\r\n%s\r\n' % (len(piece), b';x=1' if n == 7 else b'', piece))
        at += n
    return b''.join(out) + b'0\r\n\r\n'


def random_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(['1', '-0', '1.50e+3', '12345678901234567890', '0.1E-2'])
    if kind == 1:
        return rng.choice(['"a"', '"\\u00e9\\n\\"q\\""', '"\\ud83d\\ude00"', '""', '"%s"' %
                           ('x' * rng.randrange(400))])
    if kind == 2:
        return rng.choice(['true', 'false', 'null'])
    if kind in (3, 4):
        return '"s%d"' % rng.randrange(1000)
    ws = rng.choice(['', ' ', '\n  '])
    if kind in (5, 6):
        return '{' + ws + (',' + ws).join('"k%d"%s:%s%s' % (i, ws, ws, random_value(rng, depth + 1))
                                          for i in range(rng.randrange(6))) + ws + '}'
    return '[' + ws + (',' + ws).join(random_value(rng, depth + 1)
                                      for _ in range(rng.randrange(6))) + ws + ']'


def random_envelope(rng, i):
    """An envelope over 2 KB (the streaming daemon's max_body is 1k): code, msg, data, debug
    and others in a random order, spaced or not; every fifth without data."""
    members = [('code', '0'), ('msg', '"ok"'), ('debug', '"%s"' % ('d' * 2100)),
               ('data', '{"secret":1,"items":%s,"n":%s}' % (random_value(rng), i)),
               ('extra', random_value(rng))]
    if i % 5 == 4:
        members = [m for m in members if m[0] != 'data']
    rng.shuffle(members)
    ws = rng.choice(['', ' ', '\n', '\t '])
    body = '{' + ws + (',' + ws).join('"%s"%s:%s%s' % (k, ws, ws, v) for k, v in members) + ws + '}'
    return (rng.choice(['', ' ', '\n']) + body + rng.choice(['', '\n'])).encode()


@T.case
def same_bytes_as_the_buffered_path(env):
    rng = random.Random(28)
    bodies = [random_envelope(rng, i) for i in range(25)]

    def framed(body, framing):
        if framing == 'chunked':
            return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                    b'Transfer-Encoding: chunked\r\n\r\n' + chunked(body, rng))
        if framing == 'close':
            return answer(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                          b'Connection: close\r\n\r\n' + body, close=True)
        return http_response(200, body)
    cases = [(name, i, framing) for name in PROGRAMS for i in range(len(bodies))
             for framing in ('length', 'chunked', 'close')]
    # One answer for each daemon, in the order they ask.
    steps = []
    for _, i, framing in cases:
        a = framed(bodies[i], framing)
        steps += [a if isinstance(a, dict) else answer(a)] * 2
    up = env.scripted(steps)
    streaming = start(env, up, '1k', admin=True)
    buffering = start(env, up, '8m')
    cs, cb = env.client(streaming.port), env.client(buffering.port)
    n = 0
    for name, i, framing in cases:
        target = '/%s/%d/%s' % (name, i, framing)
        hdrs = [('Host', 'a'), ('X-Request-Id', RID)]
        rs = cs.request('GET', target, hdrs)
        rb = cb.request('GET', target, hdrs)
        env.eq('%s: status' % target, rs.status, rb.status)
        env.eq('%s: body' % target, rs.body, rb.body)
        n += rs.body != bodies[i]
        if rs.body != bodies[i]:
            env.eq('%s: rewritten, so chunked' % target,
                   (rs.header('Content-Length'), rs.header('Transfer-Encoding')),
                   (None, 'chunked'))
        if 'close' in (rs.framing, rb.framing):
            # An answer framed by the close ends its connection.
            cs, cb = env.client(streaming.port), env.client(buffering.port)
    env.check('most answers were rewritten', n > 400, n)
    got = scrape(streaming, 'jsongate_streamed_bodies_total')
    env.eq('every rewritten answer counted, none aborted',
           [l.rsplit(' ', 1)[0] for l in got if 'aborted' in l], [])
    env.eq('rewritten, all routes', sum(int(l.rsplit(' ', 1)[1]) for l in got), n)


ENVELOPE = (b'{"code":0,"msg":"ok","debug":"' + b'd' * 3000 + b'","data":{"id":7,"v":1.50e+3,'
            b'"s":"\\u00e9"},"z":[]}')


@T.case
def head_of_a_rewritten_answer(env):
    up = env.scripted([answer(http_response(200, ENVELOPE, headers=[
        ('ETag', '"v1"'), ('Cache-Control', 'no-cache')]))])
    gw = start(env, up, '1k')
    r = env.client(gw.port).request('GET', '/unwrap/x', [('Host', 'a'), ('X-Request-Id', RID)])
    env.eq('head', r.head, b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: W/"v1"\r\n'
           b'Cache-Control: no-cache\r\nX-Request-Id: req-stream-1\r\n'
           b'Transfer-Encoding: chunked\r\n\r\n')
    env.eq('body', r.body, b'{"id":7,"v":1.50e+3,"s":"\\u00e9"}')


@T.case
def head_kept_until_the_first_output(env):
    """The head goes out at the first output, after other answers went through the same
    worker: it is still this answer's own, over a Content-Length and chunked."""
    start_a = b'{"code":0,"msg":"' + b'm' * 3000
    rest_a = b'","data":{"id":1}}'
    whole = start_a + rest_a
    for framing in ('length', 'chunked'):
        go = threading.Event()
        if framing == 'length':
            head = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Which: a\r\n'
                    b'Content-Length: %d\r\n\r\n' % len(whole))
            parts = ((head + start_a, go), (rest_a, 0))
        else:
            head = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Which: a\r\n'
                    b'Transfer-Encoding: chunked\r\n\r\n')
            parts = ((head + b'%x\r\n%s\r\n' % (len(start_a), start_a), go),
                     (b'%x\r\n%s\r\n0\r\n\r\n' % (len(rest_a), rest_a), 0))
        up = env.scripted([pieces(*parts, close=False),
                           answer(http_response(201, b'{"code":0,"data":{"b":2}}',
                                                headers=[('X-Which', 'b')]))])
        gw = start(env, up, '1k')
        a = env.client(gw.port)
        a.send(build_request('GET', '/unwrap/a', [('Host', 'a'), ('X-Request-Id', RID)]))
        env.require('%s: a asked' % framing, wait_until(lambda: len(up.requests) == 1, 5))
        b = env.client(gw.port).request('GET', '/unwrap/b', [('Host', 'a')])
        env.eq('%s: b' % framing, (b.status, b.header('X-Which'), b.body),
               (201, 'b', b'{"b":2}'))
        go.set()
        r = a.read_response()
        env.eq('%s: a, its own head' % framing, r.head,
               b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Which: a\r\n'
               b'X-Request-Id: req-stream-1\r\nTransfer-Encoding: chunked\r\n\r\n')
        env.eq('%s: a, its body' % framing, r.body, b'{"id":1}')


@T.case
def to_an_http10_client(env):
    """No chunks for HTTP/1.0: the rewritten body goes until the close."""
    up = env.scripted([answer(http_response(200, ENVELOPE))])
    gw = start(env, up, '1k')
    r = env.client(gw.port).request('GET', '/unwrap/x', [('Host', 'a')], version='HTTP/1.0')
    env.eq('until the close', (r.status, r.framing, r.header('Content-Length'), r.body),
           (200, 'close', None, b'{"id":7,"v":1.50e+3,"s":"\\u00e9"}'))


@T.case
def errors_before_output_follow_on_error(env):
    """The unwrap key is missing (found at the body's end) or begins too late: pass gives the
    body untouched with its own framing, fail a 502; ops that cannot stream as before."""
    missing = b'{"code":0,"debug":"' + b'd' * 3000 + b'"}'
    # data begins past what is kept before the first output (128 KB at this max_body)
    late = b'{"code":0,"debug":"' + b'd' * 200000 + b'","data":{"id":1}}'
    up = env.scripted([
        answer(http_response(200, missing)),
        answer(http_response(200, missing,
                             chunked=True)),
        answer(http_response(200, missing)),
        answer(http_response(200, ENVELOPE)),
        answer(http_response(200, late)),
    ])
    extra = ('  - name: strict\n    match: { path_prefix: /strict/ }\n    upstream: app\n'
             '    on_error: fail\n    response: [ { unwrap: data } ]\n'
             '  - name: mapped\n    match: { path_prefix: /mapped/ }\n    upstream: app\n'
             '    response: [ { status_from: { field: code, map: { 0: 201 } } } ]\n')
    gw = start(env, up, '1k', extra_routes=extra, admin=True)
    c = env.client(gw.port)
    h = [('Host', 'a'), ('X-Request-Id', RID)]
    r = c.request('GET', '/unwrap/length', h)
    env.eq('pass, Content-Length', (r.status, r.header('Content-Length'), r.body),
           (200, str(len(missing)), missing))
    r = c.request('GET', '/unwrap/chunked', h)
    env.eq('pass, chunked', (r.status, r.framing, r.body), (200, 'chunked', missing))
    r = c.request('GET', '/strict/x', h)
    env.eq('fail: 502', (r.status, r.json()['error']['message']),
           (502, 'response body over limits.max_body not rewritten: unwrap: key not found'))
    r = c.request('GET', '/mapped/x', h)
    env.eq('status_from cannot stream: untouched as before',
           (r.status, r.header('Content-Length'), r.body), (200, str(len(ENVELOPE)), ENVELOPE))
    r = c.request('GET', '/unwrap/late', h)
    env.eq('the unwrapped key too late: pass', (r.status, r.header('Content-Length'), r.body),
           (200, str(len(late)), late))
    env.eq('metrics', scrape(gw, 'jsongate_streamed_bodies_total'), [])


@T.case
def malformed_after_output_is_cut(env):
    """The data went out, then the body turns out not to be JSON: the chunked answer ends
    without its last chunk and the connection closes; over HTTP/2 the stream is reset."""
    bad = b'{"data":{"id":1},"debug":"' + b'd' * 3000 + b'", nope}'
    up = env.scripted(default=answer(http_response(200, bad, chunked=True)))
    gw = start(env, up, '1k', admin=True, h2=True)
    c = env.client(gw.port)
    r = c.request('GET', '/drop/x', [('Host', 'a'), ('X-Request-Id', RID)])
    env.eq('head out, body cut', (r.status, r.framing, r.complete), (200, 'chunked', False))
    env.eq('what went out is the rewritten start', r.body, b'{"data":{"id":1}')
    env.check('the connection closes', c.wait_closed(), 'still open')
    res = env.run(['curl', '-sS', '--http2-prior-knowledge', '-o', '/dev/null',
                   'http://127.0.0.1:%d/drop/y' % gw.port])
    env.check('HTTP/2: curl sees the stream cut', res.returncode != 0 and
              b'INTERNAL_ERROR' in res.stderr or b'not closed cleanly' in res.stderr,
              (res.returncode, res.stderr))
    env.eq('metrics', scrape(gw, 'jsongate_streamed_bodies_total'), [
        'jsongate_streamed_bodies_total{route="drop",outcome="aborted"} 2'])


@T.case
def upstream_dies_mid_body(env):
    """The upstream closes after the rewritten answer started: the client sees it cut (no
    last chunk, the connection closed), it is counted aborted, and no other try is made."""
    whole = http_response(200, ENVELOPE)
    up = env.scripted([close_mid_body(whole[:len(whole) - 40])])
    gw = start(env, up, '1k', admin=True)
    c = env.client(gw.port)
    r = c.request('GET', '/drop/x', [('Host', 'a'), ('X-Request-Id', RID)])
    env.eq('head out, body cut', (r.status, r.framing, r.complete), (200, 'chunked', False))
    env.check('the connection closes', c.wait_closed(), 'still open')
    env.eq('one try only', len(up.requests), 1)
    env.eq('metrics', scrape(gw, 'jsongate_streamed_bodies_total'), [
        'jsongate_streamed_bodies_total{route="drop",outcome="aborted"} 1'])


@T.case
def over_http2(env):
    up = env.scripted(default=answer(http_response(200, ENVELOPE, chunked=True)))
    gw = start(env, up, '1k', h2=True)
    res = env.run(['curl', '-sS', '--http2-prior-knowledge', '-o', '-', '-w', '\n%{http_code}',
                   'http://127.0.0.1:%d/chain/x' % gw.port])
    env.eq('HTTP/2: rewritten', res.stdout,
           b'{"result":{"id":7,"v":1.50e+3,"s":"\\u00e9","ok":true}}\n200')


@T.case
def large_body_to_a_slow_reader(env):
    """64 MB through unwrap (chunked) and drop (a Content-Length) to a client that pauses:
    the upstream is held back and the daemon's RSS stays within idle + 32 MB (512 under
    sanitizers); exact bytes."""
    item = b'{"i":%d,"v":1.50e+3,"s":"\\u00e9 x"}'
    data = b'[' + b','.join(item % i for i in range(1600000)) + b']'
    head_part = b'{"code":0,"msg":"ok","debug":"' + b'd' * 100 + b'","data":'
    body = head_part + data + b',"z":[]}'
    want = {'unwrap': data,
            'drop': b'{"code":0,"data":' + data + b',"z":[]}'}
    up = env.scripted([
        answer(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
               b'Transfer-Encoding: chunked\r\n\r\n' +
               b''.join(b'%x\r\n%s\r\n' % (len(body[i:i + 65521]), body[i:i + 65521])
                        for i in range(0, len(body), 65521)) + b'0\r\n\r\n'),
        answer(http_response(200, body))])
    gw = start(env, up, '1m')
    idle = gw.rss()['VmRSS']
    # Sanitizers keep freed memory in quarantine: the bound is then a loose one.
    bound_mb = 512 if instrumented() else 32
    for name in ('unwrap', 'drop'):
        c = env.client(gw.port)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        c.send(build_request('GET', '/%s/big' % name, [('Host', 'a')]))
        time.sleep(1.0)
        r = c.read_response(keep_body=False, timeout=60)
        peak = gw.rss()['VmHWM']
        env.eq('%s: complete, chunked' % name, (r.status, r.framing, r.complete),
               (200, 'chunked', True))
        env.eq('%s: exact bytes' % name, (r.body_len, r.body_crc),
               (len(want[name]), zlib.crc32(want[name])))
        env.check('%s: peak RSS within idle + %d MB' % (name, bound_mb),
                  peak - idle < bound_mb * 1024, '%d kB over idle' % (peak - idle))


if __name__ == '__main__':
    T.run()
