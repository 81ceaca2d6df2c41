"""Envelope fidelity and size through the daemon: every JSONTestSuite
test_transform file survives `wrap` then `unwrap` byte for byte (responses
and requests); numbers, escapes, duplicate keys and whitespace inside spliced
spans stay untouched; a 4 MB envelope unwrapped to the exact slice of the
input (Content-Length and chunked, response and request); 10^6 tiny
elements; 2*10^6 nested arrays answered per on_error quickly."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

TRANSFORM_DIR = os.path.join(TESTS_SRCDIR, 'data', 'JSONTestSuite', 'test_transform')


def route(name, prefix, response=None, request=None, **kw):
    lines = ['  - name: %s' % name,
             '    match: { path_prefix: %s }' % prefix,
             '    upstream: app']
    for key, value in kw.items():
        lines.append('    %s: %s' % (key, value))
    if response is not None:
        lines.append('    response: %s' % response)
    if request is not None:
        lines.append('    request: %s' % request)
    return '\n'.join(lines) + '\n'


def start(env, up, *routes, **top):
    port = free_port()
    conf = upstream_config(up.address, **top)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    return env.daemon(to_yaml(conf) + '\nroutes:\n' + ''.join(routes), port=port)


def served(env, table):
    def respond(req):
        v = table.get(req.target)
        if v is None:
            return http_response(404, b'{"unknown":"%s"}' % req.target.encode())
        return v(req) if callable(v) else v
    return env.scripted([], answer(respond))


def chunked_body(data, size=65536):
    return b''.join(b'%x\r\n%s\r\n' % (len(data[i:i + size]), data[i:i + size])
                    for i in range(0, len(data), size)) + b'0\r\n\r\n'


def chunked_response(data, size=65536):
    return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
            + chunked_body(data, size))


@T.case
def jsontestsuite_transform_files_survive_wrap_unwrap(env):
    names = sorted(n for n in os.listdir(TRANSFORM_DIR) if n.endswith('.json'))
    env.require('test_transform files found in %s' % TRANSFORM_DIR, len(names) >= 20, names)
    files = {}
    for n in names:
        with open(os.path.join(TRANSFORM_DIR, n), 'rb') as f:
            files[n] = f.read()
    table = {'/t/' + n: http_response(200, data) for n, data in files.items()}
    table['/echo'] = lambda q: http_response(200, q.body, content_type='text/plain')
    up = served(env, table)
    gw = start(env, up,
               route('t', '/t/', '[ {wrap: x}, {unwrap: x} ]', on_error='fail'),
               route('echo', '/echo', request='[ {wrap: x}, {unwrap: x} ]', on_error='fail'))
    c = env.client(gw.port)
    for n in names:
        r = c.request('GET', '/t/' + n, [('Host', 'a')])
        env.eq('response %s byte for byte' % n, (r.status, r.body, r.all('Content-Length')),
               (200, files[n], [str(len(files[n]))]))
    for n in names:
        r = c.request('POST', '/echo', [('Host', 'a'), ('Content-Type', 'application/json')], files[n])
        q = up.requests[-1]
        env.eq('request %s byte for byte' % n, (r.status, q.body, q.all('Content-Length')),
               (200, files[n], [str(len(files[n]))]))


# Numbers, escapes, duplicate keys and whitespace that a decode/re-encode would change.
INNER = (b'{ "n" : [1.0E+2, -0, 1e-999, 10000000000000000999, 0.10], "s": "\\u00e9\\ud83d\\ude00\\/'
         b'\\"\\\\ \xc3\xa9\\t", "d": 1, "d": 2,\n\t"w" : [ 1 ,2 ] , "o": {"k":{"x":1},"k":{"x":2}},'
         b' "e": {}, "a": [] }')
ENVELOPE = (b'{"meta" : {"n": 1.50}, "data" :  ' + INNER + b' ,\r\n "debug": [true, null],'
            b' "msg":"k\\u00e9y"}\n')


@T.case
def spliced_spans_untouched(env):
    up = served(env, {p: http_response(200, ENVELOPE) for p in
                      ('/unwrap', '/reshape', '/set', '/keep', '/dotted')})
    gw = start(env, up,
               route('unwrap', '/unwrap', '[ {unwrap: data} ]', on_error='fail'),
               route('reshape', '/reshape', '[ {drop: [debug]}, {rename: {msg: message}} ]',
                     on_error='fail'),
               route('set', '/set', '[ {set: {debug: 0}} ]', on_error='fail'),
               route('keep', '/keep', '[ {keep: [data]} ]', on_error='fail'),
               route('dotted', '/dotted', '[ {drop: [data.d]}, {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    r = c.request('GET', '/unwrap', [('Host', 'a')])
    env.eq('unwrap: the exact slice of the input', (r.status, r.body), (200, INNER))
    r = c.request('GET', '/reshape', [('Host', 'a')])
    env.eq('drop and rename: every other member byte-identical', (r.status, r.body),
           (200, b'{"meta" : {"n": 1.50}, "data" :  ' + INNER + b',"message":"k\\u00e9y"}'))
    r = c.request('GET', '/set', [('Host', 'a')])
    env.eq('set in place: every other member byte-identical', (r.status, r.body),
           (200, b'{"meta" : {"n": 1.50}, "data" :  ' + INNER + b',"debug":0,"msg":"k\\u00e9y"}'))
    r = c.request('GET', '/keep', [('Host', 'a')])
    env.eq('keep: the kept member byte-identical', (r.status, r.body), (200, b'{"data" :  ' + INNER + b'}'))
    r = c.request('GET', '/dotted', [('Host', 'a')])
    env.eq('drop of a duplicated inner key drops both, the rest untouched', (r.status, r.body),
           (200, b'{' + INNER[2:-2].replace(b', "d": 1, "d": 2,\n\t', b',') + b'}'))
    env.check('and the result is still valid JSON', _valid(r.body), r.body)


def _valid(data):
    try:
        json.loads(data)
        return True
    except ValueError:
        return False


def big_envelope(size):
    items = []
    n = 0
    total = 0
    while total < size:
        item = b'{"id":%d,"name":"item \\"%d\\"","v":[%d.5,-1e%d,null,true],"s":"\\u00e9\xc3\xa9"}' % (
            n, n, n, n % 300)
        items.append(item)
        total += len(item) + 2
        n += 1
    data = b'[' + b', '.join(items) + b']'
    return b'{"code":0,"meta":{"count":%d},"data":' % n + data + b',"tail":"end"}', data


@T.case
def four_megabyte_envelope(env):
    body, data = big_envelope(4 << 20)
    env.require('envelope is about 4 MB', 4 << 20 <= len(body) < (4 << 20) + 4096, len(body))
    up = served(env, {'/big/length': http_response(200, body),
                      '/big/chunked': chunked_response(body, 65536),
                      '/big/tiny-chunks': chunked_response(body, 4000),
                      '/drop/length': http_response(200, body)})
    up2 = served(env, {})
    gw = start(env, up, route('big', '/big', '[ {unwrap: data} ]', on_error='fail'),
               route('drop', '/drop', '[ {drop: [meta, code]} ]', on_error='fail'))
    c = env.client(gw.port)
    for target in ('/big/length', '/big/chunked', '/big/tiny-chunks'):
        t0 = time.monotonic()
        r = c.request('GET', target, [('Host', 'a')])
        took = time.monotonic() - t0
        env.eq('%s: data is the exact slice of the input' % target,
               (r.status, r.all('Content-Length'), len(r.body), r.body == data),
               (200, [str(len(data))], len(data), True))
        env.check('%s: answered in under 3 s' % target, took < 3 * SLOW, '%.2fs' % took)
    r = c.request('GET', '/drop/length', [('Host', 'a')])
    env.eq('drop next to a 4 MB member', (r.status, r.body == b'{"data":' + data + b',"tail":"end"}'),
           (200, True))
    r = c.request('GET', '/big/length', [('Host', 'a')])
    env.eq('keep-alive after large rewritten responses', (r.status, len(r.body)), (200, len(data)))

    # the same as a request body, Content-Length and chunked
    up2.default = answer(lambda q: http_response(200, b'{"got":%d}' % len(q.body)))
    gw2 = start(env, up2, route('req', '/', request='[ {unwrap: data} ]', on_error='fail'))
    c2 = env.client(gw2.port)
    hdrs = [('Host', 'a'), ('Content-Type', 'application/json')]
    r = c2.request('POST', '/up', hdrs, body)
    q = up2.requests[-1] if up2.requests else None
    env.eq('4 MB request body unwrapped upstream',
           (r.status, q.all('Content-Length') if q else None, q is not None and q.body == data),
           (200, [str(len(data))], True))
    c2.send(build_request('POST', '/up', hdrs + [('Transfer-Encoding', 'chunked')]) +
            chunked_body(body, 100000))
    r = c2.read_response('POST')
    q = up2.requests[-1] if up2.requests else None
    env.eq('4 MB chunked request body unwrapped upstream',
           (r.status, q.all('Content-Length') if q else None, q is not None and q.body == data),
           (200, [str(len(data))], True))


@T.case
def million_tiny_elements(env):
    data = b'[' + b','.join([b'0'] * 1000000) + b']'
    body = b'{"data":' + data + b'}'
    up = served(env, {'/tiny': http_response(200, body)})
    gw = start(env, up, route('tiny', '/', '[ {unwrap: data} ]', on_error='fail', validate='full'))
    t0 = time.monotonic()
    r = env.client(gw.port).request('GET', '/tiny', [('Host', 'a')])
    took = time.monotonic() - t0
    env.eq('10^6 elements unwrapped (validate: full)', (r.status, r.body == data), (200, True))
    env.check('in under 3 s', took < 3 * SLOW, '%.2fs' % took)


@T.case
def deep_nesting_answers_per_on_error_quickly(env):
    depth = 2000000
    deep = b'[' * depth + b']' * depth
    under = b'{"data":' + deep + b'}'
    ok_depth = b'{"data":' + b'[' * 900 + b']' * 900 + b'}'
    t = {}
    for policy in ('pass', 'fail'):
        t['/%s/under-data' % policy] = http_response(200, under)
        t['/%s/sibling' % policy] = http_response(200, b'{"x":' + deep + b',"data":1}')
        t['/wrap/%s/top' % policy] = http_response(200, deep)
        t['/%s/chunked' % policy] = chunked_response(under, 65536)
        t['/%s/within' % policy] = http_response(200, ok_depth)
    up = served(env, t)
    gw = start(env, up, route('pass', '/pass', '[ {unwrap: data} ]'),
               route('fail', '/fail', '[ {unwrap: data} ]', on_error='fail'),
               route('wrap-pass', '/wrap/pass', '[ {wrap: w} ]'),
               route('wrap-fail', '/wrap/fail', '[ {wrap: w} ]', on_error='fail'))
    env.require('the body is about 4 MB', len(under) > 4000000, len(under))
    c = env.client(gw.port)
    for target in ('under-data', 'sibling', 'top', 'chunked'):
        prefix = '/wrap' if target == 'top' else ''
        src = {'under-data': under, 'chunked': under, 'top': deep,
               'sibling': b'{"x":' + deep + b',"data":1}'}[target]
        t0 = time.monotonic()
        r = c.request('GET', prefix + '/pass/' + target, [('Host', 'a')], timeout=10 * SLOW)
        took = time.monotonic() - t0
        env.eq('pass: %s untouched' % target, (r.status, len(r.body), r.body == src),
               (200, len(src), True))
        env.check('pass: %s answered in under 2 s' % target, took < 2 * SLOW, '%.2fs' % took)
        t0 = time.monotonic()
        r = c.request('GET', prefix + '/fail/' + target, [('Host', 'a')], timeout=10 * SLOW)
        took = time.monotonic() - t0
        env.gateway_error('fail: ' + target, r, 502, 'upstream_invalid',
                          'response body not rewritten: JSON nested too deep', close=False)
        env.check('fail: %s answered in under 2 s' % target, took < 2 * SLOW, '%.2fs' % took)
    r = c.request('GET', '/fail/within', [('Host', 'a')])
    env.eq('900 levels under data: within max_depth', (r.status, r.body),
           (200, b'[' * 900 + b']' * 900))


T.run()
