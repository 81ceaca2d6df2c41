"""Envelope ops through the daemon: every `response:` and `request:` op with
exact bytes, statuses and headers; Content-Length recomputed, chunked and
gzip/deflate upstream bodies; what passes untouched (non-JSON, 204, 304,
json_types), HEAD; on_error pass/fail with the exact gateway errors;
validate: full; keep-alive and pipelining after rewritten responses; a
pass-through route next to an ops route."""

import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

TIME_ISO = re.compile(rb'"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\+00:00"')


# ------------------------------------------------------------------ helpers

def route(name, prefix, response=None, request=None, **kw):
    """One route as YAML text; ops are YAML flow text, e.g. '[ {unwrap: data} ]'."""
    lines = ['  - name: %s' % json.dumps(name),
             '    match: { path_prefix: %s }' % prefix,
             '    upstream: app']
    for key, value in kw.items():
        if isinstance(value, list):
            value = '[ %s ]' % ', '.join(value)
        lines.append('    %s: %s' % (key, value))
    if response is not None:
        lines.append('    response: %s' % response)
    if request is not None:
        lines.append('    request: %s' % request)
    return '\n'.join(lines) + '\n'


def start(env, up, *routes, **top):
    """jsongate in front of `up` with the given routes (YAML text blocks)."""
    port = free_port()
    conf = upstream_config(up.address, **top)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    text = to_yaml(conf) + '\nroutes:\n' + ''.join(routes)
    return env.daemon(text, port=port)


def served(env, table, **kw):
    """A scripted upstream answering by request target from table (bytes or function)."""
    def respond(req):
        v = table.get(req.target)
        if v is None:
            return http_response(404, b'{"unknown":"%s"}' % req.target.encode())
        return v(req) if callable(v) else v
    return env.scripted([], answer(respond), **kw)


def chunked(*parts):
    return b''.join(b'%x\r\n%s\r\n' % (len(p), p) for p in parts) + b'0\r\n\r\n'


def raw_response(status, reason, headers, body):
    head = 'HTTP/1.1 %d %s\r\n' % (status, reason)
    head += ''.join('%s: %s\r\n' % h for h in headers)
    return head.encode('latin-1') + b'\r\n' + body


def gz(data):
    return gzip.compress(data, mtime=0)


def want_head(status, reason, headers, rid, length=None, close=False):
    """The exact head jsongate sends for upstream headers (hop-by-hop and framing removed)."""
    text = 'HTTP/1.1 %d %s\r\n' % (status, reason)
    text += ''.join('%s: %s\r\n' % h for h in headers)
    text += 'X-Request-Id: %s\r\n' % rid
    if length is not None:
        text += 'Content-Length: %d\r\n' % length
    if close:
        text += 'Connection: close\r\n'
    return text.encode('latin-1') + b'\r\n'


def rewritten(env, what, r, body, status=200, reason='OK', headers=(('Content-Type', 'application/json'),)):
    """r is a rewritten response: exact head (new Content-Length, no Transfer-Encoding) and body."""
    if r is None:
        return env.check(what, False, 'no response (connection closed)')
    rid = r.header('X-Request-Id', '')
    env.eq(what + ': head', r.head, want_head(status, reason, list(headers), rid, len(body)))
    env.eq(what + ': body', r.body, body)


def get(c, target, headers=(), method='GET'):
    return c.request(method, target, [('Host', 'a')] + list(headers))


def post(c, target, body, ctype='application/json', headers=()):
    return c.request('POST', target, [('Host', 'a'), ('Content-Type', ctype)] + list(headers), body)


# ------------------------------------------------------------------ each op on responses

@T.case
def each_op_on_responses(env):
    up = served(env, {
        '/unwrap': http_response(200, b'{"code":0,"data":{"id":1,"name":"x"}}'),
        '/unwrap-dotted': http_response(200, b'{"data":{"meta":1,"result":{"a":[1, 2]}},"x":1}'),
        '/unwrap-escaped': http_response(200, b'{"d\\u0061ta":{"result":"v"}}'),
        '/wrap-array': http_response(200, b'[1, 2]'),
        '/wrap-scalar': http_response(200, b' 42 \n'),
        '/rename': http_response(200, b'{"a":1,"msg":"ok","b":2,"msg":3}'),
        '/rename-replaces': http_response(200, b'{"b":2,"a":1,"c":3}'),
        '/drop': http_response(200, b'{"code":0,"debug":{"trace":[1]},"data":1,"debug":2}'),
        '/drop-dotted': http_response(200, b'{"data":{"x":1,"secret":"s"},"secret":0}'),
        '/keep': http_response(200, b'{"code":0,"msg":"x","data":{"id":1,"pw":2},"debug":2}'),
        '/set': http_response(200, b'{"n":0,"a":1,"n":{"old":[1]}}'),
        '/set-nested': http_response(200, b'{"meta":{"a":1}}'),
    })
    gw = start(env, up,
               route('unwrap-dotted', '/unwrap-dotted', '[ {unwrap: data.result} ]', on_error='fail'),
               route('unwrap-escaped', '/unwrap-escaped', '[ {unwrap: data.result} ]', on_error='fail'),
               route('unwrap', '/unwrap', '[ {unwrap: data} ]', on_error='fail'),
               route('wrap', '/wrap', '[ {wrap: result} ]', on_error='fail'),
               route('rename-replaces', '/rename-replaces', '[ {rename: {a: b}} ]', on_error='fail'),
               route('rename', '/rename', '[ {rename: {msg: message}} ]', on_error='fail'),
               route('drop-dotted', '/drop-dotted', '[ {drop: [data.secret]} ]', on_error='fail'),
               route('drop', '/drop', '[ {drop: [debug]} ]', on_error='fail'),
               route('keep', '/keep', '[ {keep: [code, data.id]} ]', on_error='fail'),
               route('set-nested', '/set-nested', '[ {set: {meta.gw: x, meta.v: 2}} ]', on_error='fail'),
               route('set', '/set', '[ {set: {n: 2, s: "2", t: true, f: false, z: null, fl: 1.5, '
                     'e: -1e3, y: yes, m: {a: [1, x]}, l: [], p: $$route}} ]', on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'unwrap data', get(c, '/unwrap'), b'{"id":1,"name":"x"}')
    rewritten(env, 'unwrap data.result', get(c, '/unwrap-dotted'), b'{"a":[1, 2]}')
    rewritten(env, 'unwrap compares unescaped keys', get(c, '/unwrap-escaped'), b'"v"')
    rewritten(env, 'wrap an array', get(c, '/wrap-array'), b'{"result":[1, 2]}')
    rewritten(env, 'wrap a scalar (surrounding whitespace dropped)', get(c, '/wrap-scalar'),
              b'{"result":42}')
    rewritten(env, 'rename every occurrence, in place', get(c, '/rename'),
              b'{"a":1,"message":"ok","b":2,"message":3}')
    rewritten(env, 'rename onto an existing key replaces it', get(c, '/rename-replaces'),
              b'{"b":1,"c":3}')
    rewritten(env, 'drop every occurrence', get(c, '/drop'), b'{"code":0,"data":1}')
    rewritten(env, 'drop data.secret only', get(c, '/drop-dotted'),
              b'{"data":{"x":1},"secret":0}')
    rewritten(env, 'keep code and data.id', get(c, '/keep'), b'{"code":0,"data":{"id":1}}')
    rewritten(env, 'set literals: YAML types, replaced in place or appended', get(c, '/set'),
              b'{"n":2,"a":1,"n":2,"s":"2","t":true,"f":false,"z":null,"fl":1.5,"e":-1e3,'
              b'"y":"yes","m":{"a":[1,"x"]},"l":[],"p":"$route"}')
    rewritten(env, 'set a dotted path', get(c, '/set-nested'), b'{"meta":{"a":1,"gw":"x","v":2}}')


@T.case
def ops_apply_in_order(env):
    body = b'{"code":0,"msg":"ok","data":{"a":1,"b":2},"debug":{"t":[1]}}'
    up = served(env, {'/reshape': http_response(200, body), '/rename-drop': http_response(200, body),
                      '/drop-rename': http_response(200, body), '/wrap-set': http_response(200, b'[1]'),
                      '/unwrap-wrap': http_response(200, body)})
    gw = start(env, up,
               route('reshape', '/reshape', '[ {drop: [debug]}, {rename: {msg: message}}, '
                     '{set: {gateway: jsongate}} ]', on_error='fail'),
               route('rename-drop', '/rename-drop', '[ {rename: {msg: debug}}, {drop: [debug]} ]',
                     on_error='fail'),
               route('drop-rename', '/drop-rename', '[ {drop: [debug]}, {rename: {msg: debug}} ]',
                     on_error='fail'),
               route('wrap-set', '/wrap-set', '[ {wrap: r}, {set: {x: 2}} ]', on_error='fail'),
               route('unwrap-wrap', '/unwrap-wrap', '[ {unwrap: data}, {keep: [b]}, {wrap: result} ]',
                     on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'drop, rename, set', get(c, '/reshape'),
              b'{"code":0,"message":"ok","data":{"a":1,"b":2},"gateway":"jsongate"}')
    rewritten(env, 'rename then drop drops both', get(c, '/rename-drop'),
              b'{"code":0,"data":{"a":1,"b":2}}')
    rewritten(env, 'drop then rename keeps the renamed one', get(c, '/drop-rename'),
              b'{"code":0,"debug":"ok","data":{"a":1,"b":2}}')
    rewritten(env, 'wrap then set', get(c, '/wrap-set'), b'{"r":[1],"x":2}')
    rewritten(env, 'unwrap, keep, wrap', get(c, '/unwrap-wrap'), b'{"result":{"b":2}}')


# ------------------------------------------------------------------ set variables

HOSTILE = 'q"b\\s\tt\xff\xc3z'          # quote, backslash, a control byte, invalid UTF-8
HOSTILE_JSON = b'"q\\"b\\\\s\\tt\xef\xbf\xbd\xef\xbf\xbdz"'


@T.case
def set_variables(env):
    up = served(env, {'/vars': http_response(200, b'{"a":1}'),
                      '/weird': http_response(200, b'{"unknown":"/weird"}')})
    ops = ('[ {set: {rid: $request_id, route: $route, up: $upstream, addr: $remote_addr, '
           'h: $header.X-Test, lower: $header.x-test, missing: $header.X-Absent, t: $time_iso8601, '
           'lit: "$$header.X-Test"}} ]')
    gw = start(env, up, route('vars', '/vars', ops, on_error='fail'),
               route('r"o\\u\x01te', '/weird', '[ {set: {route: $route}} ]', on_error='fail'))
    c = env.client(gw.port)
    before = time.time()
    r = get(c, '/vars', [('X-Test', HOSTILE)])
    after = time.time()
    rid = r.header('X-Request-Id', '')
    env.check('generated request id', re.fullmatch('[0-9a-f]{32}', rid), rid)
    m = TIME_ISO.search(r.body)
    env.check('$time_iso8601 is UTC with +00:00', m, r.body)
    stamp = m.group(0) if m else b'""'
    if m:
        t = time.mktime(tuple(int(x) for x in m.groups()) + (0, 0, 0)) - time.timezone
        env.check('$time_iso8601 is now', before - 2 <= t <= after + 1, (before, t, after))
    want = (b'{"a":1,"rid":"%s","route":"vars","up":"%s","addr":"127.0.0.1","h":%s,"lower":%s,'
            b'"missing":null,"t":%s,"lit":"$header.X-Test"}'
            % (rid.encode(), up.address.encode(), HOSTILE_JSON, HOSTILE_JSON, stamp))
    rewritten(env, 'every variable, escaped', r, want)
    try:
        doc = json.loads(r.body)
        env.eq('still valid JSON (strict UTF-8 decoding)', (doc['rid'], doc['h']),
               (rid, 'q"b\\s\tt\ufffd\ufffdz'))
    except ValueError as e:
        env.check('still valid JSON (strict UTF-8 decoding)', False, '%s: %r' % (e, r.body))

    r = get(c, '/vars', [('X-Request-Id', 'client-id-7'), ('X-Test', 'plain')])
    env.check('$request_id is the client X-Request-Id',
              r.header('X-Request-Id') == 'client-id-7' and b'"rid":"client-id-7"' in r.body, r)
    r = get(c, '/weird')
    rewritten(env, '$route with a quote, a backslash and a control byte', r,
              b'{"unknown":"/weird","route":"r\\"o\\\\u\\u0001te"}')


@T.case
def upstream_variable_same_in_request_and_response(env):
    up = served(env, {'/u': lambda q: http_response(200, q.body)})
    gw = start(env, up, route('u', '/u', '[ {set: {resp: $upstream}} ]',
                              '[ {set: {req: $upstream}} ]', on_error='fail'))
    r = post(env.client(gw.port), '/u', b'{}')
    doc = json.loads(r.body) if r and r.status == 200 else {}
    env.check('$upstream resolves', doc.get('req') and doc.get('resp'), r)
    env.eq('$upstream is the same value in request and response ops',
           doc.get('req'), doc.get('resp'))


# ------------------------------------------------------------------ status_from

@T.case
def status_from(env):
    def up_answer(status, body, reason=None):
        return http_response(status, body, reason=reason)
    up = served(env, {
        '/int/hit-404': up_answer(200, b'{"code":404,"msg":"nope"}'),
        '/int/hit-0': up_answer(500, b'{"code":0}'),
        '/int/miss': up_answer(200, b'{"code":7}'),
        '/int/absent': up_answer(200, b'{"x":1}'),
        '/int/string-0': up_answer(200, b'{"code":"0"}'),
        '/int/same': up_answer(200, b'{"code":0}', reason='Fine'),
        '/str/string-0': up_answer(200, b'{"code":"0"}'),
        '/str/escaped-0': up_answer(200, b'{"code":"\\u0030"}'),
        '/str/int-0': up_answer(418, b'{"code":0}', reason='Teapot'),
        '/bool/false': up_answer(200, b'{"ok":false}'),
        '/unwrap/0': up_answer(200, b'{"code":0,"data":[1]}'),
    })
    gw = start(env, up,
               route('int', '/int', '[ {status_from: {field: code, map: {0: 200, 404: 404}, default: 502}} ]',
                     on_error='fail'),
               route('str', '/str', '[ {status_from: {field: code, map: {"0": 201}}} ]', on_error='fail'),
               route('bool', '/bool', '[ {status_from: {field: ok, map: {true: 200, false: 503}}} ]',
                     on_error='fail'),
               route('unwrap', '/unwrap', '[ {status_from: {field: code, map: {0: 202}}}, {unwrap: data} ]',
                     on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'map hit 404', get(c, '/int/hit-404'), b'{"code":404,"msg":"nope"}', 404, 'Not Found')
    r = get(c, '/int/hit-0')
    env.eq('a 500 is outside response_on: untouched though the map has its code',
           (r.status, r.body), (500, b'{"code":0}'))
    rewritten(env, 'miss: default', get(c, '/int/miss'), b'{"code":7}', 502, 'Bad Gateway')
    rewritten(env, 'field absent: default', get(c, '/int/absent'), b'{"x":1}', 502, 'Bad Gateway')
    rewritten(env, 'YAML 0 does not match JSON "0"', get(c, '/int/string-0'), b'{"code":"0"}', 502,
              'Bad Gateway')
    rewritten(env, 'same status keeps the upstream reason', get(c, '/int/same'), b'{"code":0}', 200,
              'Fine')
    rewritten(env, 'YAML "0" matches JSON "0"', get(c, '/str/string-0'), b'{"code":"0"}', 201, 'Created')
    rewritten(env, 'YAML "0" matches JSON "\\u0030"', get(c, '/str/escaped-0'), b'{"code":"\\u0030"}',
              201, 'Created')
    rewritten(env, 'YAML "0" does not match JSON 0; no default: upstream status', get(c, '/str/int-0'),
              b'{"code":0}', 418, 'Teapot')
    rewritten(env, 'boolean keys', get(c, '/bool/false'), b'{"ok":false}', 503, 'Service Unavailable')
    rewritten(env, 'status_from then unwrap', get(c, '/unwrap/0'), b'[1]', 202, 'Accepted')


@T.case
def status_from_by_value_strings_and_ranges(env):
    up = served(env, {
        '/v/zero-float': http_response(200, b'{"code":0.0}'),
        '/v/unmapped': http_response(418, b'{"code":9}', reason='Teapot'),
        '/v/range': http_response(200, b'{"code":503}'),
        '/v/exact-first': http_response(200, b'{"code":501}'),
        '/s/string-0': http_response(200, b'{"code":"0"}'),
        '/s/string-range': http_response(200, b'{"code":"550"}'),
    })
    ops = '{status_from: {field: code, map: {0: 200, 5xx: 502, 501: 501}%s}}'
    gw = start(env, up, route('v', '/v', '[ %s ]' % (ops % ''), on_error='fail'),
               route('s', '/s', '[ %s ]' % (ops % ', strings: true'), on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'key 0 matches 0.0', get(c, '/v/zero-float'), b'{"code":0.0}', 200, 'OK')
    rewritten(env, 'no default: an unmapped value keeps the upstream status', get(c, '/v/unmapped'),
              b'{"code":9}', 418, 'Teapot')
    rewritten(env, 'range key 5xx', get(c, '/v/range'), b'{"code":503}', 502, 'Bad Gateway')
    rewritten(env, 'an exact key wins over a range', get(c, '/v/exact-first'), b'{"code":501}', 501,
              'Not Implemented')
    rewritten(env, 'strings: true: "0" matches 0', get(c, '/s/string-0'), b'{"code":"0"}', 200, 'OK')
    rewritten(env, 'strings: true: "550" falls in 5xx', get(c, '/s/string-range'), b'{"code":"550"}',
              502, 'Bad Gateway')


RECIPE = ('[ {status_from: {field: code, map: {0: 200, 1001: 401, 404: 404}}}, '
          '{unwrap: data, when: {field: code, equals: 0}} ]')


@T.case
def recipe_code_msg_data_envelope(env):
    """The sample configuration's recipe: successes become their data, API errors keep their
    envelope with the mapped status, other codes keep the upstream's status."""
    error = b'{"code":1001,"msg":"invalid token","data":null}'
    up = served(env, {
        '/api/ok': http_response(200, b'{"code":0,"msg":"ok","data":{"id":1,"tags":["a"]}}'),
        '/api/ok-escaped': http_response(200, b'{"c\\u006fde":0.0,"data":[1]}'),
        '/api/token': http_response(200, error),
        '/api/other': http_response(200, b'{"code":7,"msg":"busy","data":{"x":1}}'),
        '/api/other-500': http_response(500, b'{"code":7,"data":{}}'),
        '/api/string-code': http_response(200, b'{"code":"0","data":1}'),
    })
    gw = start(env, up, route('recipe', '/api', RECIPE, on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'code 0: the data, 200', get(c, '/api/ok'), b'{"id":1,"tags":["a"]}', 200, 'OK')
    rewritten(env, 'code 0.0 under an escaped key: the data', get(c, '/api/ok-escaped'), b'[1]', 200,
              'OK')
    rewritten(env, 'code 1001: 401 with the envelope as sent', get(c, '/api/token'), error, 401,
              'Unauthorized')
    rewritten(env, 'code 7: the upstream status, the envelope as sent', get(c, '/api/other'),
              b'{"code":7,"msg":"busy","data":{"x":1}}', 200, 'OK')
    rewritten(env, 'code 7 on a 500: still 500', get(c, '/api/other-500'), b'{"code":7,"data":{}}',
              500, 'Internal Server Error')
    rewritten(env, 'a string "0" is not the number 0', get(c, '/api/string-code'),
              b'{"code":"0","data":1}', 200, 'OK')

    demo = env.demo()
    port = free_port()
    conf = upstream_config(demo.address)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    gw2 = env.daemon(to_yaml(conf) + '\nroutes:\n' + route('orders', '/', RECIPE, on_error='fail'),
                     port=port)
    c = env.client(gw2.port)
    r = get(c, '/api/orders/1')
    env.eq('demo upstream: an order is its data', (r.status, r.json().get('id')), (200, 1))
    r = get(c, '/api/orders/404')
    env.eq('demo upstream: a missing order keeps its envelope', (r.status, r.json().get('msg')),
           (404, 'order not found'))


@T.case
def when_on_status_and_fields(env):
    up = served(env, {
        '/w/ok': http_response(200, b'{"data":{"a":1}}'),
        '/w/busy': http_response(503, b'{"data":{"a":1}}', reason='Busy'),
        '/w/flagged': http_response(200, b'{"data":{"a":1},"flag":"beta-2"}'),
    })
    ops = ('[ {set: {retry: true}, when: {status: [429, 5xx]}}, '
           '{rename: {flag: channel}, when: {field: flag, prefix: beta}}, '
           '{set: {beta: true}, when: {field: channel, exists: true}}, '
           '{unwrap: data, when: {not: {status: 5xx}}} ]')
    # response_on takes the 5xx too: the ops themselves decide what each status gets.
    gw = start(env, up, route('w', '/w', ops, on_error='fail', response_on=['2xx', '5xx']),
               route('req', '/req', request='[ {set: {checked: true}, when: {field: kind, in: [a, b]}} ]'))
    c = env.client(gw.port)
    rewritten(env, 'a 200: unwrapped, nothing added', get(c, '/w/ok'), b'{"a":1}')
    rewritten(env, 'the upstream status reaches when:', get(c, '/w/busy'),
              b'{"data":{"a":1},"retry":true}', 503, 'Busy')
    rewritten(env, 'when: sees what the ops before it did', get(c, '/w/flagged'), b'{"a":1}')
    up.default = answer(lambda req: http_response(200, b'{}'))
    for body, want in ((b'{"kind":"a"}', b'{"kind":"a","checked":true}'),
                       (b'{"kind":"c"}', b'{"kind":"c"}')):
        post(c, '/req', body)
        env.eq('request ops: when on a field of %s' % body.decode(), up.requests[-1].body, want)


@T.case
def rename_within_the_parent_object(env):
    up = served(env, {'/r': http_response(200, b'{"data":{"name":"n","title":"old"},"name":1}')})
    gw = start(env, up, route('r', '/r', '[ {rename: {data.name: data.title}} ]', on_error='fail'))
    c = env.client(gw.port)
    rewritten(env, 'data.name becomes data.title, replacing it; the top-level name stays',
              get(c, '/r'), b'{"data":{"title":"n"},"name":1}')


# ------------------------------------------------------------------ framing and encodings

@T.case
def chunked_upstream_bodies(env):
    body = b'{"code":0,"data":{"items":[1,2,3],"name":"chunked"},"debug":"x"}'
    parts = [body[:3], body[3:9], body[9:40], body[40:41], body[41:]]
    chunked_raw = raw_response(200, 'OK', [('Content-Type', 'application/json'),
                                           ('Transfer-Encoding', 'chunked')], chunked(*parts))
    up = env.scripted([answer(chunked_raw), answer(chunked_raw)])
    gw = start(env, up, route('u', '/', '[ {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    want = b'{"items":[1,2,3],"name":"chunked"}'
    r = get(c, '/chunked')
    rewritten(env, 'chunked upstream body re-assembled and rewritten', r, want)
    env.eq('client framing', (r.framing, r.complete), ('length', True))

    c10 = env.client(gw.port)
    r = c10.request('GET', '/ten', [('Host', 'a')], version='HTTP/1.0')
    rid = r.header('X-Request-Id', '') if r else ''
    env.eq('HTTP/1.0 client: Content-Length and close',
           r.head if r else None,
           want_head(200, 'OK', [('Content-Type', 'application/json')], rid, len(want), close=True))
    env.eq('HTTP/1.0 client: body', r.body if r else None, want)


@T.case
def long_heads_and_large_bodies(env):
    """Before the head of an answer its ops collect, the daemon reads 32 KB at most, so that
    a large body is read straight into its block: a head longer than that still comes whole,
    a body is right however it is cut, and a pass-through answer on the same pooled
    connection afterwards is read as before."""
    data = b'{"items":"' + b'i' * 300000 + b'"}'
    body = b'{"code":0,"data":' + data + b'}'
    long_head = http_response(200, body, [('X-Long', 'x' * 40000)])
    head, _, _ = http_response(200, body).partition(b'\r\n\r\n')
    cut = head + b'\r\n\r\n' + body[:100]
    up = env.scripted([answer(long_head),
                       pieces((cut, 0.2), (body[100:200000], 0.2), (body[200000:], 0),
                              close=False),
                       answer(http_response(200, body)),
                       answer(http_response(200, b'{}', [('X-Long', 'x' * 70000)]))])
    gw = start(env, up, route('u', '/u', '[ {unwrap: data} ]', on_error='fail'),
               route('plain', '/plain'))
    c = env.client(gw.port)
    rewritten(env, 'a 40 KB head, a 300 KB body unwrapped', get(c, '/u/1'), data,
              headers=[('Content-Type', 'application/json'), ('X-Long', 'x' * 40000)])
    rewritten(env, 'the body cut in three, unwrapped', get(c, '/u/2'), data)
    r = get(c, '/plain/3')
    env.eq('then a pass-through answer on the same connection',
           (r.status, r.body, r.complete), (200, body, True))
    env.eq('one upstream connection for the three', up.connections, 1)
    r = get(c, '/u/4', [('X-Request-Id', 'long')])
    env.eq('a head over 64 KB: 502', r.status if r else None, 502)


@T.case
def close_delimited_upstream_bodies(env):
    body = b'{"code":0,"data":{"items":[1,2,3]}}'
    raw = raw_response(200, 'OK', [('Content-Type', 'application/json')], body)
    want = (200, b'{"items":[1,2,3]}', ['17'], False)
    timeouts = {'upstream_connect': '2s', 'upstream_response': '1s', 'shutdown_grace': '5s'}

    def fetch(gw):
        c = env.client(gw.port)
        try:
            r = c.request('GET', '/close', [('Host', 'a')], timeout=3)
        except socket.timeout:
            return 'no answer within 3 s'
        c.close()
        return ((r.status, r.body, r.all('Content-Length'), 'transfer-encoding' in r.names())
                if r is not None else 'connection closed')

    # The FIN sent right after the whole response: whether it shows up in the same read as
    # the bytes is a race, so try several times.
    up = env.scripted([], answer(raw, close=True))
    gw = start(env, up, route('u', '/', '[ {unwrap: data} ]', on_error='fail'), timeouts=timeouts)
    tries, got = 0, want
    while tries < 10 and got == want:
        tries += 1
        got = fetch(gw)
    env.eq('close-delimited upstream body, FIN right after it: rewritten with a Content-Length '
           '(try %d)' % tries, got, want)

    head, tail = raw[:-10], raw[-10:]
    up = env.scripted([pieces((head, 0.2), (tail, 0)), pieces((raw, 0.2))])
    gw = start(env, up, route('u', '/', '[ {unwrap: data} ]', on_error='fail'), timeouts=timeouts)
    env.eq('close-delimited upstream body, FIN with the last piece', fetch(gw), want)
    env.eq('close-delimited upstream body, FIN a moment after the body', fetch(gw), want)


@T.case
def empty_bodies_treated_alike(env):
    up = served(env, {'/fail/length': http_response(200, b''),
                      '/fail/chunked': http_response(200, b'', chunked=True),
                      '/fail/req': lambda q: http_response(200, b'{"data":{"got":%d}}' % len(q.body))})
    gw = start(env, up, route('fail', '/fail', '[ {unwrap: data} ]', '[ {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    a, b = get(c, '/fail/length'), get(c, '/fail/chunked')
    env.eq('empty response body: same answer with Content-Length: 0 and chunked',
           (b.status, b.body), (a.status, a.body))
    a = c.request('POST', '/fail/req', [('Host', 'a'), ('Content-Type', 'application/json'),
                                        ('Content-Length', '0')])
    c.send(build_request('POST', '/fail/req', [('Host', 'a'), ('Content-Type', 'application/json'),
                                               ('Transfer-Encoding', 'chunked')]) + b'0\r\n\r\n')
    b = c.read_response('POST')
    env.eq('empty request body: same answer with Content-Length: 0 and chunked',
           (b.status, b.body), (a.status, a.body))


@T.case
def empty_json_bodies_under_validate_full(env):
    """validate: full takes an empty body with a JSON media type as invalid JSON (JSONTestSuite
    n_structure_no_data); validate: envelope passes it untouched."""
    def table(prefix):
        return {prefix + '/length': http_response(200, b''),
                prefix + '/chunked': http_response(200, b'', chunked=True),
                prefix + '/no-content': http_response(204, b''),
                prefix + '/text': http_response(200, b'', content_type='text/plain'),
                prefix + '/req': lambda q: http_response(200, b'{"data":{"got":%d}}' % len(q.body))}
    t = {}
    for prefix in ('/full', '/pass', '/env'):
        t.update(table(prefix))
    up = served(env, t)
    ops = '[ {wrap: w} ]'
    gw = start(env, up, route('full', '/full', ops, ops, on_error='fail', validate='full'),
               route('pass', '/pass', ops, ops, validate='full'),
               route('env', '/env', ops, ops, on_error='fail'))
    for target in ('/full/length', '/full/chunked'):
        c = env.client(gw.port)
        env.gateway_error('full, fail: empty response ' + target, get(c, target), 502, 'upstream_invalid',
                          'response body not rewritten: empty body', close=False)
    c = env.client(gw.port)
    r = get(c, '/full/no-content')
    env.eq('full: 204 has no body to check', (r.status, r.body), (204, b''))
    r = get(c, '/full/length', method='HEAD')
    env.eq('full: HEAD has no body to check', (r.status, r.body), (200, b''))
    r = get(c, '/full/text')
    env.eq('full: an empty text/plain body is not JSON: untouched', (r.status, r.body), (200, b''))
    for target in ('/pass/length', '/pass/chunked', '/env/length', '/env/chunked'):
        r = get(c, target)
        env.eq('%s: empty body untouched' % target, (r.status, r.body), (200, b''))

    json_ct = [('Host', 'a'), ('Content-Type', 'application/json')]
    r = c.request('POST', '/full/req', json_ct + [('Content-Length', '0')])
    env.gateway_error('full, fail: empty request with Content-Length: 0', r, 400, 'invalid_json',
                      'request body not rewritten: empty body', close=False)
    c.send(build_request('POST', '/full/req', json_ct + [('Transfer-Encoding', 'chunked')]) +
           b'0\r\n\r\n')
    env.gateway_error('full, fail: empty chunked request', c.read_response('POST'), 400, 'invalid_json',
                      'request body not rewritten: empty body', close=False)
    n = len(up.requests)
    r = c.request('GET', '/full/req', json_ct)
    env.eq('full: a request without a body is not an empty body', (r.status, len(up.requests)),
           (200, n + 1))
    for target in ('/pass/req', '/env/req'):
        r = c.request('POST', target, json_ct + [('Content-Length', '0')])
        q = up.requests[-1]
        env.eq('%s: empty request sent on untouched' % target,
               (r.status, q.body, q.all('Content-Length')), (200, b'', ['0']))


@T.case
def compressed_upstream_bodies(env):
    body = b'{"code":0,"data":{"text":"' + b'compressible ' * 500 + b'"},"debug":1}'
    want = b'{"text":"' + b'compressible ' * 500 + b'"}'
    ct = ('Content-Type', 'application/json')
    big = b'{"data":"' + b'0' * 300000 + b'"}'
    up = served(env, {
        '/gzip': raw_response(200, 'OK', [ct, ('Content-Encoding', 'gzip'), ('Vary', 'Accept-Encoding'),
                                          ('Content-Length', str(len(gz(body))))], gz(body)),
        '/x-gzip': http_response(200, gz(body), headers=[('Content-Encoding', 'x-gzip')]),
        '/deflate': http_response(200, zlib.compress(body), headers=[('Content-Encoding', 'deflate')]),
        '/gzip-chunked': raw_response(200, 'OK', [ct, ('Content-Encoding', 'gzip'),
                                                  ('Transfer-Encoding', 'chunked')],
                                      chunked(*[gz(body)[i:i + 100] for i in range(0, len(gz(body)), 100)])),
        '/br': http_response(200, b'\x1b\x03\x00\xf8\xa5', headers=[('Content-Encoding', 'br')]),
        '/pass/br': http_response(200, b'\x1b\x03\x00\xf8\xa5', headers=[('Content-Encoding', 'br')]),
        '/gzip-members': http_response(200, gz(body[:1000]) + gz(body[1000:2000]) + gz(body[2000:]),
                                       headers=[('Content-Encoding', 'gzip')]),
        '/fail/gzip-trailing': http_response(200, gz(body) + b'\0\0', headers=[('Content-Encoding', 'gzip')]),
        '/fail/gzip-half-member': http_response(200, gz(body) + gz(body)[:20],
                                                headers=[('Content-Encoding', 'gzip')]),
        '/fail/deflate-trailing': http_response(200, zlib.compress(body) + b'x',
                                                headers=[('Content-Encoding', 'deflate')]),
        '/fail/deflate-members': http_response(200, zlib.compress(body) + zlib.compress(body),
                                               headers=[('Content-Encoding', 'deflate')]),
        '/pass/corrupt': http_response(200, gz(body)[:-30] + b'garbage' * 5,
                                       headers=[('Content-Encoding', 'gzip')]),
        '/fail/corrupt': http_response(200, gz(body)[:-30] + b'garbage' * 5,
                                       headers=[('Content-Encoding', 'gzip')]),
        '/pass/invalid': http_response(200, gz(b'{"data":1,}'), headers=[('Content-Encoding', 'gzip')]),
        '/fail/bomb': http_response(200, gz(big), headers=[('Content-Encoding', 'gzip')]),
        '/pass/bomb': http_response(200, gz(big), headers=[('Content-Encoding', 'gzip')]),
    })
    gw = start(env, up, route('pass', '/pass', '[ {unwrap: data} ]'),
               route('ops', '/', '[ {unwrap: data} ]', on_error='fail'),
               limits={'max_body': '64k'})
    c = env.client(gw.port)
    ae = [('Accept-Encoding', 'gzip, deflate')]
    rewritten(env, 'gzip inflated, rewritten, identity to the client', get(c, '/gzip', ae), want,
              headers=[ct, ('Vary', 'Accept-Encoding')])
    r = get(c, '/x-gzip', ae)
    env.eq('x-gzip inflated', (r.status, r.body, r.header('Content-Encoding')), (200, want, None))
    r = get(c, '/deflate', ae)
    env.eq('deflate (zlib) inflated', (r.status, r.body, r.header('Content-Encoding'),
                                       r.all('Content-Length')), (200, want, None, [str(len(want))]))
    r = get(c, '/gzip-chunked', ae)
    env.eq('chunked gzip inflated', (r.status, r.framing, r.body, r.header('Content-Encoding')),
           (200, 'length', want, None))
    r = get(c, '/gzip-members', ae)
    env.eq('gzip of three members (RFC 1952) inflated whole', (r.status, r.body), (200, want))
    for target, message in (('/fail/gzip-trailing', 'bytes after the end of the compressed body'),
                            ('/fail/gzip-half-member', 'cannot inflate the body'),
                            ('/fail/deflate-trailing', 'bytes after the end of the compressed body'),
                            ('/fail/deflate-members', 'bytes after the end of the compressed body')):
        env.gateway_error('fail: ' + target, get(c, target, ae), 502, 'upstream_invalid',
                          'response body not rewritten: ' + message, close=False)
    r = get(c, '/pass/br', ae)
    env.eq('pass: an unknown coding streams untouched', (r.status, r.body, r.header('Content-Encoding')),
           (200, b'\x1b\x03\x00\xf8\xa5', 'br'))
    r = get(c, '/br', ae)
    env.gateway_error('fail: an unknown coding', r, 502, 'upstream_invalid',
                      'upstream response has a Content-Encoding that cannot be decoded', close=False)
    corrupt = gz(body)[:-30] + b'garbage' * 5
    r = get(c, '/pass/corrupt', ae)
    env.eq('pass: corrupt gzip untouched, Content-Encoding kept',
           (r.status, r.body, r.header('Content-Encoding'), r.all('Content-Length')),
           (200, corrupt, 'gzip', [str(len(corrupt))]))
    r = get(c, '/fail/corrupt', ae)
    env.gateway_error('fail: corrupt gzip', r, 502, 'upstream_invalid',
                      'response body not rewritten: cannot inflate the body', close=False)
    r = get(c, '/pass/invalid', ae)
    env.eq('pass: gzip of invalid JSON untouched',
           (r.status, r.body, r.header('Content-Encoding')), (200, gz(b'{"data":1,}'), 'gzip'))
    r = get(c, '/fail/bomb', ae)
    env.gateway_error('fail: inflated body over max_body', r, 502, 'upstream_invalid',
                      'response body not rewritten: inflated body exceeds limits.max_body', close=False)
    r = get(c, '/pass/bomb', ae)
    env.eq('pass: inflated body over max_body untouched',
           (r.status, r.body == gz(big), r.header('Content-Encoding')), (200, True, 'gzip'))
    r = get(c, '/gzip', ae)
    env.eq('the connection still serves', (r.status, r.body), (200, want))


def envelope_counters(port):
    """jsongate_envelope_total samples from the admin endpoint:
    {(route, direction, result, reason): n}, reason '' when there is none."""
    c = Client(port)
    try:
        r = c.request('GET', '/metrics', [('Host', 'a')])
    finally:
        c.close()
    return {m[:4]: int(m[4]) for m in re.findall(
        r'^jsongate_envelope_total\{route="([^"]*)",direction="(\w+)",result="(\w+)"'
        r'(?:,reason="(\w+)")?\} (\d+)$', r.body.decode(), re.M)}


@T.case
def content_codings_that_cannot_be_decoded(env):
    body = b'{"data":{"a":1}}'
    up = served(env, {'/resp/fail/br': http_response(200, b'\x1b\x00', headers=[('Content-Encoding', 'br')]),
                      '/resp/pass/zstd': http_response(200, b'(\xb5/\xfd', headers=[('Content-Encoding', 'zstd')]),
                      '/req/pass': http_response(200, b'{"ok":1}')})
    admin = free_port()
    gw = start(env, up,
               route('req-fail', '/req/fail', request='[ {unwrap: data} ]', on_error='fail'),
               route('req-pass', '/req/pass', request='[ {unwrap: data} ]'),
               route('resp-fail', '/resp/fail', '[ {unwrap: data} ]', on_error='fail'),
               route('resp-pass', '/resp/pass', '[ {unwrap: data} ]'),
               route('plain', '/plain'),
               admin={'listen': '127.0.0.1:%d' % admin})
    c = env.client(gw.port)
    for coding in ('br', 'zstd', 'compress', 'x-unknown', 'gzip, br', 'gzip, gzip'):
        r = post(c, '/req/fail', body, headers=[('Content-Encoding', coding)])
        env.gateway_error('request with Content-Encoding: %s, on_error fail' % coding, r, 415,
                          'unsupported_media_type',
                          'request body not rewritten: Content-Encoding that cannot be decoded',
                          close=False)
    env.eq('none of them reached the upstream', len(up.requests), 0)
    r = post(c, '/req/pass', body, headers=[('Content-Encoding', 'br')])
    q = up.requests[-1] if up.requests else None
    env.eq('on_error pass: sent upstream untouched, coding kept',
           (r.status, q.body, q.header('Content-Encoding')) if q else None, (200, body, 'br'))
    r = get(c, '/resp/fail/br')
    env.gateway_error('response in br, on_error fail', r, 502, 'upstream_invalid',
                      'upstream response has a Content-Encoding that cannot be decoded', close=False)
    r = get(c, '/resp/pass/zstd')
    env.eq('response in zstd, on_error pass: untouched',
           (r.status, r.body, r.header('Content-Encoding')), (200, b'(\xb5/\xfd', 'zstd'))
    env.eq('counted with reason="encoding"', {k: v for k, v in envelope_counters(admin).items()
                                               if k[3] == 'encoding'},
           {('req-fail', 'request', 'failed', 'encoding'): 6,
            ('req-pass', 'request', 'passed', 'encoding'): 1,
            ('resp-fail', 'response', 'failed', 'encoding'): 1,
            ('resp-pass', 'response', 'passed', 'encoding'): 1})


@T.case
def content_encoding_from_every_line(env):
    """Repeated Content-Encoding lines are one list (RFC 9110 5.3): the last line's br
    counts as much as the first line's identity, both ways."""
    body = b'{"data":{"a":1}}'
    ce = lambda *codings: [('Content-Encoding', c) for c in codings]
    up = served(env, {
        '/resp/fail/br': http_response(200, b'\x1b\x00', headers=ce('identity', 'br')),
        '/resp/pass/br': http_response(200, b'\x1b\x00', headers=ce('identity', 'br')),
        '/resp/fail/gzip-gzip': http_response(200, gz(gz(body)), headers=ce('gzip', 'gzip')),
        '/resp/fail/gzip': http_response(200, gz(body), headers=ce('identity', 'gzip')),
        '/resp/fail/empty-gzip': http_response(200, gz(body), headers=ce('', 'gzip,')),
        '/req/pass': http_response(200, b'{"ok":1}'),
        '/req/fail': http_response(200, b'{"ok":1}')})
    gw = start(env, up,
               route('req-fail', '/req/fail', request='[ {unwrap: data} ]', on_error='fail'),
               route('req-pass', '/req/pass', request='[ {unwrap: data} ]'),
               route('resp-fail', '/resp/fail', '[ {unwrap: data} ]', on_error='fail'),
               route('resp-pass', '/resp/pass', '[ {unwrap: data} ]'))
    c = env.client(gw.port)
    for codings in (('identity', 'br'), ('gzip', 'br'), ('gzip', 'gzip')):
        r = post(c, '/req/fail', gz(body), headers=ce(*codings))
        env.gateway_error('request with Content-Encoding lines %s, on_error fail' % (codings,),
                          r, 415, 'unsupported_media_type',
                          'request body not rewritten: Content-Encoding that cannot be decoded',
                          close=False)
    env.eq('none of them reached the upstream', len(up.requests), 0)
    r = post(c, '/req/pass', body, headers=ce('identity', 'br'))
    q = up.requests[-1]
    env.eq('on_error pass: the request goes untouched, both lines kept',
           (r.status, q.body, q.all('Content-Encoding')), (200, body, ['identity', 'br']))
    r = post(c, '/req/fail', gz(body), headers=ce('identity', 'gzip'))
    q = up.requests[-1]
    env.eq('identity then gzip: inflated, rewritten, no Content-Encoding upstream',
           (r.status, q.body, q.all('Content-Encoding')), (200, b'{"a":1}', []))
    r = get(c, '/resp/fail/br')
    env.gateway_error('response with Content-Encoding lines identity and br, on_error fail', r,
                      502, 'upstream_invalid',
                      'upstream response has a Content-Encoding that cannot be decoded', close=False)
    r = get(c, '/resp/fail/gzip-gzip')
    env.gateway_error('response gzip-coded twice, on_error fail', r, 502, 'upstream_invalid',
                      'upstream response has a Content-Encoding that cannot be decoded', close=False)
    r = get(c, '/resp/pass/br')
    env.eq('on_error pass: the response untouched, both lines kept',
           (r.status, r.body, r.all('Content-Encoding')), (200, b'\x1b\x00', ['identity', 'br']))
    for target in ('/resp/fail/gzip', '/resp/fail/empty-gzip'):
        r = get(c, target)
        rewritten(env, '%s: inflated and rewritten' % target, r, b'{"a":1}')


@T.case
def compress_gzip_by_accept_encoding_weights(env):
    body = b'{"code":0,"data":{"text":"' + b'again ' * 400 + b'"}}'
    want = b'{"text":"' + b'again ' * 400 + b'"}'
    up = served(env, {'/i': http_response(200, body)})
    gw = start(env, up, route('z', '/', '[ {unwrap: data} ]', compress='gzip'))
    c = env.client(gw.port)
    long_list = ', '.join('x-coding-%03d' % i for i in range(60))
    for sent, zipped in ((['gzip; Q=0'], False), (['gzip;q=0.000'], False), (['gzip;q=0'], False),
                         (['gzip;q=0.5'], True), (['GZIP ; q=1.000'], True), (['x-gzip'], True),
                         (['gzip;q=0, *'], False), (['br, *;q=0.1'], True), (['*;Q=0'], False),
                         (['gzip;q=2'], False), (['gzip;q=0.0001'], False),
                         (['br', 'gzip;q=0.2'], True), (['identity, gzip;q=0', '*'], False),
                         ([long_list + ', gzip'], True), ([''], False)):
        r = get(c, '/i', [('Accept-Encoding', v) for v in sent])
        try:
            plain = gzip.decompress(r.body) if zipped else r.body
        except Exception as e:
            plain = 'not gzip: %s' % e
        env.eq('Accept-Encoding %r: %s' % (sent, 'gzip' if zipped else 'identity'),
               (r.status, r.header('Content-Encoding'), plain),
               (200, 'gzip' if zipped else None, want))


@T.case
def accept_encoding_upstream_on_routes_with_response_ops(env):
    up = served(env, {})
    up.default = answer(lambda req: http_response(200, b'{"data":1}'))
    gw = start(env, up, route('ops', '/ops', '[ {unwrap: data} ]'), route('plain', '/plain'),
               route('req', '/req', request='[ {unwrap: data} ]'))
    c = env.client(gw.port)
    for sent, want in ((['gzip, deflate, br;q=0.9, zstd'], ['gzip, deflate']),
                       (['br'], ['identity']),
                       (['br, *;q=0.1'], ['identity']),
                       (['GZIP;q=0.5 , x-gzip ,identity;q=0.1, compress'], ['GZIP;q=0.5, x-gzip, identity;q=0.1']),
                       (['gzip', 'br, deflate;q=0.5'], ['gzip, deflate;q=0.5']),
                       # a refusal is not passed on: jsongate decodes what comes back
                       (['identity;q=0, br'], ['identity']),
                       (['identity;q=0', 'gzip'], ['gzip']),
                       (['gzip; Q=0, deflate;q=0.000, br'], ['identity']),
                       (['gzip;q=5, deflate;q=0.5'], ['deflate;q=0.5']),
                       ([''], ['identity']),
                       ([], [])):
        get(c, '/ops', [('Accept-Encoding', v) for v in sent])
        env.eq('response ops: Accept-Encoding %r goes upstream as %r' % (sent, want),
               up.requests[-1].all('Accept-Encoding'), want)
    for target in ('/plain', '/req'):
        get(c, target, [('Accept-Encoding', 'br, gzip')])
        env.eq('%s: no response ops, Accept-Encoding untouched' % target,
               up.requests[-1].all('Accept-Encoding'), ['br, gzip'])


@T.case
def compress_gzip_for_clients_that_accept_it(env):
    body = b'{"code":0,"data":{"text":"' + b'again ' * 400 + b'"}}'
    want = b'{"text":"' + b'again ' * 400 + b'"}'
    up = served(env, {'/z': http_response(200, gz(body), headers=[('Content-Encoding', 'gzip')]),
                      '/i': http_response(200, body)})
    gw = start(env, up, route('z', '/', '[ {unwrap: data} ]', on_error='fail', compress='gzip'))
    c = env.client(gw.port)
    for target in ('/z', '/i'):
        r = get(c, target, [('Accept-Encoding', 'gzip')])
        try:
            plain = gzip.decompress(r.body)
        except Exception as e:
            plain = 'not gzip: %s' % e
        env.eq('%s: gzip again for a client that accepts it' % target,
               (r.status, r.header('Content-Encoding'), r.all('Content-Length'), plain),
               (200, 'gzip', [str(len(r.body))], want))
        r = get(c, target)
        env.eq('%s: identity for a client that does not' % target,
               (r.status, r.header('Content-Encoding'), r.body), (200, None, want))


# ------------------------------------------------------------------ what passes untouched

@T.case
def untouched_bodies(env):
    jbody = b'{"code":0,"data":{"a":1}}'
    up = served(env, {
        '/text': http_response(200, jbody, content_type='text/plain'),
        '/none': http_response(200, jbody, content_type=None),
        '/jsonx': http_response(200, jbody, content_type='application/jsonx'),
        '/text-chunked': http_response(200, jbody, content_type='text/plain', chunked=True),
        '/problem': http_response(200, jbody, content_type='application/problem+json'),
        '/charset': http_response(200, jbody, content_type='Application/JSON; charset=utf-8'),
        '/head': http_response(200, jbody),
        '/204': raw_response(204, 'No Content', [('Content-Type', 'application/json')], b''),
        '/304': raw_response(304, 'Not Modified', [('Content-Type', 'application/json'),
                                                   ('ETag', '"v1"')], b''),
    })
    gw = start(env, up, route('ops', '/', '[ {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    for target, ctype in (('/text', 'text/plain'), ('/jsonx', 'application/jsonx')):
        r = get(c, target)
        rid = r.header('X-Request-Id', '')
        env.eq('%s passes untouched: head' % ctype, r.head,
               want_head(200, 'OK', [('Content-Type', ctype)], rid, len(jbody)))
        env.eq('%s passes untouched: body' % ctype, r.body, jbody)
    r = get(c, '/none')
    env.eq('no Content-Type passes untouched', (r.status, r.body), (200, jbody))
    r = get(c, '/text-chunked')
    env.eq('non-JSON chunked stays chunked', (r.status, r.framing, r.body), (200, 'chunked', jbody))
    rewritten(env, '+json is JSON', get(c, '/problem'), b'{"a":1}',
              headers=[('Content-Type', 'application/problem+json')])
    rewritten(env, 'parameters and case ignored', get(c, '/charset'), b'{"a":1}',
              headers=[('Content-Type', 'Application/JSON; charset=utf-8')])
    r = get(c, '/head', method='HEAD')
    env.eq('HEAD: the head of the rewritten GET answer', (r.head, up.requests[-1].method),
           (want_head(200, 'OK', [('Content-Type', 'application/json')], r.header('X-Request-Id', ''),
                      len(b'{"a":1}')), 'GET'))
    r = get(c, '/204')
    env.eq('204 untouched', r.head,
           want_head(204, 'No Content', [('Content-Type', 'application/json')], r.header('X-Request-Id', '')))
    r = get(c, '/304')
    env.eq('304 untouched', r.head,
           want_head(304, 'Not Modified', [('Content-Type', 'application/json'), ('ETag', '"v1"')],
                     r.header('X-Request-Id', '')))
    r = get(c, '/problem')
    env.eq('the connection is still in sync', (r.status, r.body), (200, b'{"a":1}'))


@T.case
def json_types_configurable(env):
    jbody = b'{"code":0,"data":{"a":1}}'
    table = {'/text': http_response(200, jbody, content_type='text/plain'),
             '/json': http_response(200, jbody),
             '/vnd': http_response(200, jbody, content_type='application/vnd.api+json'),
             '/x-any': http_response(200, jbody, content_type='text/x-anything')}
    up = served(env, dict(('/custom' + k, v) for k, v in table.items()))
    gw = start(env, up, route('custom', '/custom', '[ {unwrap: data} ]', on_error='fail',
                              json_types=['text/plain', 'application/*+json', '"text/*"']))
    c = env.client(gw.port)
    r = get(c, '/custom/text')
    env.eq('text/plain listed: rewritten', (r.status, r.body), (200, b'{"a":1}'))
    r = get(c, '/custom/vnd')
    env.eq('application/*+json listed: rewritten', (r.status, r.body), (200, b'{"a":1}'))
    r = get(c, '/custom/x-any')
    env.eq('text/* listed: rewritten', (r.status, r.body), (200, b'{"a":1}'))
    r = get(c, '/custom/json')
    env.eq('application/json not listed: untouched', (r.status, r.body), (200, jbody))


# ------------------------------------------------------------------ on_error

OVER = 'response body over limits.max_body not rewritten: '


@T.case
def on_error_pass_and_fail_on_responses(env):
    invalid = b'{"data":1,}'
    bom = b'\xef\xbb\xbf{"data":{"ok":true}}'
    missing = b'{"code":0,"other":{"a":1}}'
    array = b'[{"debug":1}]'
    big = b'{"data":"' + b'b' * 5000 + b'"}'

    def table(prefix):
        return {
            prefix + '/invalid': http_response(201, invalid, reason='Oops'),
            prefix + '/missing': http_response(200, missing),
            prefix + '/bom': http_response(200, bom),
            prefix + '/array': http_response(201, array),
            prefix + '/big-length': http_response(200, big),
            prefix + '/big-chunked': http_response(200, big, chunked=True),
            prefix + '/big-chunked-split': raw_response(200, 'OK', [('Content-Type', 'application/json'),
                                                                    ('Transfer-Encoding', 'chunked')],
                                                        chunked(*[big[i:i + 700] for i in range(0, len(big), 700)])),
            prefix + '/ok': http_response(200, b'{"data":{"ok":true},"debug":1}'),
        }
    t = table('/pass')
    t.update(table('/fail'))
    up = served(env, t)
    ops = '[ {unwrap: data}, {drop: [debug]} ]'
    gw = start(env, up, route('pass', '/pass', ops), route('fail', '/fail', ops, on_error='fail'),
               limits={'max_body': '4k'})
    c = env.client(gw.port)

    # pass: the upstream's status and bytes
    r = get(c, '/pass/invalid')
    rid = r.header('X-Request-Id', '')
    env.eq('pass: invalid JSON: head', r.head,
           want_head(201, 'Oops', [('Content-Type', 'application/json')], rid, len(invalid)))
    env.eq('pass: invalid JSON: body', r.body, invalid)
    r = get(c, '/pass/missing')
    env.eq('pass: unwrap of a missing key', (r.status, r.body, r.all('Content-Length')),
           (200, missing, [str(len(missing))]))
    r = get(c, '/pass/bom')
    env.eq('pass: a byte order mark', (r.status, r.body), (200, bom))
    env.check('pass: the byte order mark is named in the log',
              gw.wait_log(r'route pass: response body not rewritten: body starts with a UTF-8 byte '
                          r'order mark \(RFC 8259 forbids it\)'), gw.log()[-500:])
    r = get(c, '/pass/array')
    env.eq('pass: top-level array under an object op', (r.status, r.body), (201, array))
    r = get(c, '/pass/big-length')
    env.eq('pass: over max_body with Content-Length',
           (r.status, r.framing, r.body, r.all('Content-Length')), (200, 'length', big, [str(len(big))]))
    for target in ('/pass/big-chunked', '/pass/big-chunked-split'):
        r = get(c, target)
        env.eq('pass: %s over max_body' % target, (r.status, r.body, r.complete), (200, big, True))
        env.check('pass: %s: no Content-Length with chunked' % target,
                  r.framing != 'chunked' or 'content-length' not in r.names(), r.head)
    r = get(c, '/pass/ok')
    env.eq('pass: the connection still serves', (r.status, r.body), (200, b'{"ok":true}'))

    # fail: 502 upstream_invalid, the connection stays usable
    for target, message in (('/fail/invalid', 'response body not rewritten: invalid JSON'),
                            ('/fail/missing', 'response body not rewritten: unwrap: key not found'),
                            ('/fail/bom', 'response body not rewritten: body starts with a UTF-8 '
                             'byte order mark (RFC 8259 forbids it)'),
                            ('/fail/array', 'response body not rewritten: unwrap: body is not an object'),
                            # over max_body: rewritten as it streams, which fails before
                            # any output (drop on the string data)
                            ('/fail/big-length', OVER + 'the value unwrap takes is not an object'),
                            ('/fail/big-chunked', OVER + 'the value unwrap takes is not an object'),
                            ('/fail/big-chunked-split', OVER + 'the value unwrap takes is not an '
                             'object'),
                            ('/fail/ok', None)):
        r = get(c, target, [('X-Request-Id', 'rq-' + target[6:])])
        if message is None:
            rewritten(env, 'fail: the connection still serves', r, b'{"ok":true}')
        else:
            env.gateway_error('fail: ' + target, r, 502, 'upstream_invalid', message, close=False,
                              request_id='rq-' + target[6:])


@T.case
def top_level_values_under_each_op(env):
    bodies = {'/a': b'[1,2]', '/s': b'"str"', '/n': b'12.50', '/null': b'null'}
    ops = {'unwrap': '{unwrap: data}', 'rename': '{rename: {a: b}}', 'drop': '{drop: [a]}',
           'keep': '{keep: [a]}', 'set': '{set: {a: 1}}',
           'status_from': '{status_from: {field: code, map: {0: 200}}}'}
    table = {}
    routes = []
    for op, yaml_op in ops.items():
        for path, body in bodies.items():
            table['/%s%s' % (op, path)] = http_response(200, body)
        routes.append(route(op, '/%s/' % op, '[ %s ]' % yaml_op, on_error='fail'))
    for path, body in bodies.items():
        table['/wrap' + path] = http_response(200, body)
    routes.append(route('wrap', '/wrap/', '[ {wrap: w} ]', on_error='fail'))
    up = served(env, table)
    gw = start(env, up, *routes)
    c = env.client(gw.port)
    for op in ops:
        for path in bodies:
            r = get(c, '/%s%s' % (op, path))
            env.gateway_error('%s on %s' % (op, bodies[path].decode()), r, 502, 'upstream_invalid',
                              'response body not rewritten: %s: body is not an object' % op,
                              close=False)
    for path, body in bodies.items():
        rewritten(env, 'wrap works on ' + body.decode(), get(c, '/wrap' + path), b'{"w":%s}' % body)


# ------------------------------------------------------------------ validate

@T.case
def validate_full(env):
    t = {}
    for mode in ('envelope', 'full-fail', 'full-pass'):
        t['/%s/trailing-comma' % mode] = http_response(200, b'{"data":{"a":[1,]},"x":1}')
        t['/%s/skipped' % mode] = http_response(200, b'{"data":1,"skip":[1,]}')
        t['/%s/utf8' % mode] = http_response(200, b'{"data":"\xff\xfe"}')
        t['/%s/control' % mode] = http_response(200, b'{"data":"a\x01b"}')
        t['/%s/good' % mode] = http_response(200, b' {"data" : {"k":[1,{"z":null}],"s":"\\ud83d\\ude00"}} \n')
    up = served(env, t)
    gw = start(env, up, route('envelope', '/envelope', '[ {unwrap: data} ]', on_error='fail'),
               route('full-fail', '/full-fail', '[ {unwrap: data} ]', on_error='fail', validate='full'),
               route('full-pass', '/full-pass', '[ {unwrap: data} ]', validate='full'))
    c = env.client(gw.port)
    good = b'{"k":[1,{"z":null}],"s":"\\ud83d\\ude00"}'
    rewritten(env, 'envelope: [1,] inside the unwrapped value is accepted', get(c, '/envelope/trailing-comma'),
              b'{"a":[1,]}')
    rewritten(env, 'envelope: [1,] in a skipped value is accepted', get(c, '/envelope/skipped'), b'1')
    rewritten(env, 'envelope: invalid UTF-8 accepted', get(c, '/envelope/utf8'), b'"\xff\xfe"')
    rewritten(env, 'envelope: good body', get(c, '/envelope/good'), good)
    rewritten(env, 'full: good body', get(c, '/full-fail/good'), good)
    for case in ('trailing-comma', 'skipped', 'utf8', 'control'):
        r = get(c, '/full-fail/' + case)
        env.gateway_error('full + fail rejects ' + case, r, 502, 'upstream_invalid',
                          'response body not rewritten: invalid JSON', close=False)
        r = get(c, '/full-pass/' + case)
        env.eq('full + pass passes %s untouched' % case, (r.status, r.body),
               (200, t['/full-pass/' + case].split(b'\r\n\r\n', 1)[1]))


# ------------------------------------------------------------------ request ops

@T.case
def request_ops(env):
    up = served(env, {})
    up.default = answer(http_response(200, b'{"ok":1}'))
    gw = start(env, up,
               route('req', '/req', response=None,
                     request='[ {unwrap: data}, {drop: [secret]}, {set: {via: jsongate, rid: $request_id}} ]',
                     on_error='fail'),
               route('lenient', '/lenient', request='[ {unwrap: data} ]'))
    c = env.client(gw.port)
    body = b'{"data":{"id":7,"secret":"s","n":1.50},"meta":1}'
    want = b'{"id":7,"n":1.50,"via":"jsongate","rid":"r-1"}'
    r = post(c, '/req', body, headers=[('X-Request-Id', 'r-1')])
    env.eq('answered', (r.status, r.body), (200, b'{"ok":1}'))
    q = up.requests[-1]
    head = ('POST /req HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n'
            'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Request-Id: r-1\r\n')
    env.eq('rewritten request: exact bytes upstream', q.raw,
           head.encode() + b'Content-Length: %d\r\n\r\n' % len(want) + want)

    # chunked request body: re-assembled, sent with a Content-Length
    c.send(build_request('POST', '/req', [('Host', 'a'), ('Content-Type', 'application/json'),
                                          ('X-Request-Id', 'r-1'), ('Transfer-Encoding', 'chunked')])
           + chunked(body[:5], body[5:6], body[6:30], body[30:]))
    r = c.read_response('POST')
    q = up.requests[-1]
    env.eq('chunked request: answered', (r.status, r.body), (200, b'{"ok":1}'))
    env.eq('chunked request: exact bytes upstream', q.raw,
           head.encode() + b'Content-Length: %d\r\n\r\n' % len(want) + want)

    # gzip request body: inflated, Content-Encoding removed
    r = post(c, '/req', gz(body), headers=[('Content-Encoding', 'gzip'), ('X-Request-Id', 'r-1')])
    q = up.requests[-1]
    env.eq('gzip request: answered', (r.status, r.body), (200, b'{"ok":1}'))
    env.eq('gzip request: inflated and rewritten upstream', q.raw,
           head.encode() + b'Content-Length: %d\r\n\r\n' % len(want) + want)

    # non-JSON request bodies pass untouched under on_error: pass, whatever their framing
    # (under fail they are refused: request_on_error_fail_and_limits)
    text = b'{"data":{"id":7}}'
    r = post(c, '/lenient', text, ctype='text/plain')
    q = up.requests[-1]
    env.eq('text/plain request body untouched', (r.status, q.body, q.all('Content-Length')),
           (200, text, [str(len(text))]))
    c.send(build_request('POST', '/lenient', [('Host', 'a'),
                                              ('Content-Type', 'application/octet-stream'),
                                              ('Transfer-Encoding', 'chunked')]) +
           chunked(text[:4], text[4:]))
    r = c.read_response('POST')
    q = up.requests[-1]
    env.eq('non-JSON chunked request body untouched and still chunked',
           (r.status, q.framing, q.chunks, q.body), (200, 'chunked', [4, len(text) - 4, 0], text))
    r = c.request('GET', '/req', [('Host', 'a')])
    env.eq('GET without a body goes through', (r.status, up.requests[-1].raw[:17]),
           (200, b'GET /req HTTP/1.1'))

    # pass: invalid JSON request body goes as it is
    bad = b'{"data":{"id":7},}'
    r = post(c, '/lenient', bad)
    q = up.requests[-1]
    env.eq('pass: invalid request body untouched', (r.status, q.body, q.all('Content-Length')),
           (200, bad, [str(len(bad))]))
    r = post(c, '/lenient', b'{"nodata":1}')
    env.eq('pass: missing key: untouched', (r.status, up.requests[-1].body), (200, b'{"nodata":1}'))
    r = post(c, '/lenient', gz(bad), headers=[('Content-Encoding', 'gzip')])
    q = up.requests[-1]
    env.eq('pass: gzip of invalid JSON untouched, Content-Encoding kept',
           (r.status, q.body, q.all('Content-Encoding')), (200, gz(bad), ['gzip']))

    # pipelined requests whose bodies are rewritten
    seen = len(up.requests)
    bodies = [b'{"data":{"p":%d}}' % i for i in range(4)]
    c.send(b''.join(build_request('POST', '/lenient/%d' % i, [('Host', 'a'), ('Content-Type', 'application/json')],
                                  b) for i, b in enumerate(bodies)))
    got = [c.read_response('POST') for _ in bodies]
    env.eq('pipelined rewritten requests: answered in order', [r.status if r else None for r in got],
           [200] * 4)
    env.eq('pipelined rewritten requests: upstream got each body rewritten, in order',
           [(q.target, q.body) for q in up.requests[seen:]],
           [('/lenient/%d' % i, b'{"p":%d}' % i) for i in range(4)])


@T.case
def request_expect_100_continue(env):
    up = served(env, {})
    up.default = answer(http_response(200, b'{"ok":1}'))
    gw = start(env, up, route('req', '/', request='[ {rename: {a: b}} ]', on_error='fail'))
    c = env.client(gw.port)
    body = b'{"a":1,"c":[1, 2]}'
    c.send(build_request('POST', '/x', [('Host', 'a'), ('Content-Type', 'application/json'),
                                        ('Content-Length', str(len(body))), ('Expect', '100-continue')]))
    r = c.read_response('POST', timeout=3, skip_interim=False)
    env.eq('the gateway answers 100 Continue before the body', (r.status, r.head) if r else None,
           (100, b'HTTP/1.1 100 Continue\r\n\r\n'))
    env.eq('nothing went upstream yet', len(up.requests), 0)
    c.send(body)
    r = c.read_response('POST', skip_interim=False)
    env.eq('then one final response (no second 100)', (r.status, r.body) if r else None,
           (200, b'{"ok":1}'))
    q = up.requests[-1] if up.requests else None
    env.eq('upstream got the rewritten body', (q.body, q.all('Content-Length')) if q else None,
           (b'{"b":1,"c":[1, 2]}', ['18']))
    r = c.request('GET', '/after', [('Host', 'a')])
    env.eq('the connection stays in sync', (r.status, up.requests[-1].target), (200, '/after'))


@T.case
def request_on_error_fail_and_limits(env):
    up = served(env, {})
    up.default = answer(http_response(200, b'{"ok":1}'))
    gw = start(env, up,
               route('fail', '/fail', request='[ {unwrap: data} ]', on_error='fail'),
               route('pass', '/pass', request='[ {unwrap: data} ]'),
               route('full', '/full', request='[ {unwrap: data} ]', on_error='fail', validate='full'),
               limits={'max_body': '1k'})
    ctype = [('Host', 'a'), ('Content-Type', 'application/json')]
    c = env.client(gw.port)
    r = post(c, '/fail', b'{"data":1,}', headers=[('X-Request-Id', 'bad-1')])
    env.gateway_error('invalid JSON request body', r, 400, 'invalid_json',
                      'request body not rewritten: invalid JSON', close=False, request_id='bad-1')
    r = post(c, '/fail', b'{"other":1}', headers=[('X-Request-Id', 'bad-2')])
    env.gateway_error('unwrap of a missing key in a request', r, 400, 'invalid_json',
                      'request body not rewritten: unwrap: key not found', close=False, request_id='bad-2')
    r = post(c, '/full', b'{"data":{"a":[1,]}}', headers=[('X-Request-Id', 'bad-3')])
    env.gateway_error('validate: full on a request body', r, 400, 'invalid_json',
                      'request body not rewritten: invalid JSON', close=False, request_id='bad-3')
    env.eq('nothing reached the upstream', len(up.requests), 0)
    r = post(c, '/fail', b'{"data":{"fine":true}}')
    env.eq('the connection still serves', (r.status, up.requests[-1].body if up.requests else None),
           (200, b'{"fine":true}'))

    big = b'{"data":"' + b'x' * 2000 + b'"}'
    c = env.client(gw.port)
    c.send(build_request('POST', '/fail', ctype + [('Content-Length', str(len(big)))]))
    r = c.read_response('POST', timeout=3)
    env.gateway_error('over max_body with Content-Length: 413 before the body', r, 413,
                      'payload_too_large', 'request body exceeds limits.max_body', close=True)
    c = env.client(gw.port)
    c.send(build_request('POST', '/fail', ctype + [('Content-Length', str(len(big))),
                                                   ('Expect', '100-continue')]))
    r = c.read_response('POST', timeout=3, skip_interim=False)
    env.gateway_error('over max_body with Expect: 100-continue: 413 instead of 100', r, 413,
                      'payload_too_large', 'request body exceeds limits.max_body', close=True)
    c = env.client(gw.port)
    c.send(build_request('POST', '/fail', ctype + [('Transfer-Encoding', 'chunked')]) +
           chunked(*[big[i:i + 300] for i in range(0, len(big), 300)]))
    r = c.read_response('POST')
    env.gateway_error('over max_body chunked: 413', r, 413, 'payload_too_large',
                      'request body exceeds limits.max_body', close=True)
    env.eq('still nothing upstream from these', [q.target for q in up.requests], ['/fail'])

    # A body that is not JSON by its type: refused under fail (frameworks often read it as
    # JSON all the same, past the ops), nothing forwarded; passed untouched under pass.
    secret = b'{"data":{"a":1},"secret":"s"}'
    for ctype_value in ('application/x-www-form-urlencoded', None):
        c = env.client(gw.port)
        hdrs = [('Host', 'a'), ('X-Request-Id', 'form-1')]
        if ctype_value:
            hdrs.append(('Content-Type', ctype_value))
        r = c.request('POST', '/fail', hdrs, body=secret)
        env.gateway_error('fail: a %s body is refused' % (ctype_value or 'type-less'), r, 415,
                          'unsupported_media_type', 'request body is not JSON: its '
                          'Content-Type is none of the route\'s json_types', close=True,
                          request_id='form-1')
    env.eq('and never forwarded', [q.target for q in up.requests], ['/fail'])
    c = env.client(gw.port)
    r = c.request('POST', '/pass', [('Host', 'a'),
                                    ('Content-Type', 'application/x-www-form-urlencoded')],
                  body=secret)
    env.eq('pass: a form-typed body goes untouched (best effort)',
           (r.status, up.requests[-1].body), (200, secret))

    c = env.client(gw.port)
    r = post(c, '/pass', big)
    env.eq('pass: over max_body with Content-Length streams untouched',
           (r.status, up.requests[-1].body, up.requests[-1].all('Content-Length')),
           (200, big, [str(len(big))]))
    seen = len(up.requests)
    c.send(build_request('POST', '/pass', ctype + [('Transfer-Encoding', 'chunked')]) +
           chunked(*[big[i:i + 300] for i in range(0, len(big), 300)]))
    r = c.read_response('POST')
    q = up.requests[seen] if len(up.requests) > seen else None
    env.eq('pass: over max_body chunked goes upstream untouched',
           (r.status if r else None, q.body if q else 'nothing upstream'), (200, big))


# ------------------------------------------------------------------ connections

@T.case
def keepalive_and_pipelining(env):
    def answer_for(req):
        n = req.target.rsplit('/', 1)[-1]
        if req.target.startswith('/plain/'):
            return http_response(200, b'{"plain":%s}' % n.encode(), chunked=True)
        body = b'{"data":{"n":%s},"pad":"%s"}' % (n.encode(), b'p' * int(n) * 100)
        return http_response(200, body, chunked=int(n) % 2 == 1)
    up = env.scripted([], answer(answer_for))
    gw = start(env, up, route('plain', '/plain'), route('ops', '/ops', '[ {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    for i in range(6):
        r = get(c, '/ops/%d' % i)
        env.eq('keep-alive request %d rewritten' % i, (r.status, r.body, r.framing),
               (200, b'{"n":%d}' % i, 'length'))
    env.eq('one client connection, one upstream connection', up.connections, 1)

    c2 = env.client(gw.port)
    targets = ['/ops/1', '/plain/2', '/ops/30', '/ops/4', '/plain/5', '/ops/7']
    c2.send(b''.join(build_request('GET', t, [('Host', 'a')]) for t in targets))
    got = []
    for t in targets:
        r = c2.read_response('GET')
        got.append(r.body if r else None)
    want = [b'{"plain":%s}' % t.rsplit('/', 1)[1].encode() if t.startswith('/plain') else
            b'{"n":%s}' % t.rsplit('/', 1)[1].encode() for t in targets]
    env.eq('pipelined responses in order', got, want)

    c3 = env.client(gw.port)
    c3.send(build_request('GET', '/ops/3', [('Host', 'a')]) +
            build_request('GET', '/ops/8', [('Host', 'a'), ('Connection', 'close')]))
    r1, r2 = c3.read_response('GET'), c3.read_response('GET')
    env.eq('last request asked to close', (r1.body, r2.body, r2.all('Connection')),
           (b'{"n":3}', b'{"n":8}', ['close']))
    env.check('and the connection is closed', c3.wait_closed(5), 'still open')


@T.case
def pass_through_route_next_to_ops_route(env):
    body = b'{"code":0,"data":{"a":1} ,"debug":1}'
    bad = b'{"data":'
    up = served(env, {'/plain/chunked': http_response(200, body, chunked=True),
                      '/plain/length': http_response(200, body),
                      '/plain/invalid': http_response(200, bad),
                      '/plain/gzip': http_response(200, gz(body), headers=[('Content-Encoding', 'gzip')]),
                      '/ops/length': http_response(200, body)})
    gw = start(env, up, route('plain', '/plain'),
               route('ops', '/ops', '[ {unwrap: data} ]', '[ {unwrap: data} ]', on_error='fail'))
    c = env.client(gw.port)
    r = get(c, '/plain/chunked')
    env.eq('pass-through: chunked stays chunked, untouched', (r.status, r.framing, r.chunks, r.body),
           (200, 'chunked', [len(body), 0], body))
    r = get(c, '/plain/length')
    env.eq('pass-through: Content-Length body untouched', (r.status, r.body, r.all('Content-Length')),
           (200, body, [str(len(body))]))
    r = get(c, '/plain/invalid')
    env.eq('pass-through: invalid JSON untouched', (r.status, r.body), (200, bad))
    r = get(c, '/plain/gzip')
    env.eq('pass-through: gzip untouched', (r.status, r.body, r.header('Content-Encoding')),
           (200, gz(body), 'gzip'))
    r = post(c, '/plain/length', b'{"data":{"x":1}}')
    env.eq('pass-through: request body untouched', up.requests[-1].body, b'{"data":{"x":1}}')
    r = get(c, '/ops/length')
    env.eq('ops route next to it', (r.status, r.body), (200, b'{"a":1}'))
    r = post(c, '/ops/length', b'{"data":{"x":1}}')
    env.eq('ops route request body', up.requests[-1].body, b'{"x":1}')


@T.case
def failing_op_list_rolls_back_status_and_body(env):
    """status_from and set applied, then unwrap of a missing key: none of it stays.  Under
    on_error pass the client gets the upstream's status, headers and bytes; under fail, 502."""
    sent = b'{"code":1,"msg":"conflict"} '
    ops = '[ {status_from: {field: code, map: {1: 409}}}, {set: {seen: true}}, {unwrap: missing} ]'
    up = served(env, {'/pass/x': http_response(200, sent, [('X-Up', '1')]),
                      '/fail/x': http_response(200, sent, [('X-Up', '1')]),
                      '/pass/ok': http_response(200, b'{"code":1,"missing":{"id":2}}')})
    gw = start(env, up, route('pass', '/pass', ops), route('fail', '/fail', ops, on_error='fail'))
    c = env.client(gw.port)
    r = get(c, '/pass/ok')
    env.eq('the same ops, all applying: 409 and the value', (r.status, r.body), (409, b'{"id":2}'))
    r = get(c, '/pass/x', [('X-Request-Id', 'rb-1')])
    env.eq('pass: the upstream\'s status, headers and body, untouched', (r.head, r.body), (
        want_head(200, 'OK', [('Content-Type', 'application/json'), ('X-Up', '1')], 'rb-1',
                  len(sent)), sent))
    r = get(c, '/fail/x', [('X-Request-Id', 'rb-2')])
    env.gateway_error('fail: 502, not the 409 status_from chose', r, 502, 'upstream_invalid',
                      'response body not rewritten: unwrap: key not found', close=False,
                      request_id='rb-2')
    r = get(c, '/pass/ok')
    env.eq('the connection still serves', (r.status, r.body), (409, b'{"id":2}'))


# ------------------------------------------------------------------ what a rewritten head says

UP_DATE = 'Sat, 05 Dec 2026 10:00:00 GMT'


@T.case
def rewritten_answers_weaken_a_strong_etag(env):
    """A body the ops changed goes out with the upstream's strong ETag made weak (W/, RFC 9110
    8.8.1); a weak one, and every answer passed untouched, keep theirs byte for byte; the
    upstream's Date stays as it came."""
    body = b'{"code":0,"data":{"a":1}}'
    tagged = [('ETag', '"v1-abc"'), ('Date', UP_DATE)]
    up = served(env, {
        '/ops/strong': http_response(200, body, tagged),
        '/ops/weak': http_response(200, body, [('ETag', 'W/"v1"'), ('Date', UP_DATE)]),
        '/ops/odd': http_response(200, body, [('ETag', 'v1'), ('Date', UP_DATE)]),
        '/ops/text': http_response(200, b'plain', tagged, content_type='text/plain'),
        '/ops/invalid': http_response(200, b'{"code":', tagged),
        '/pass/strong': http_response(200, body, tagged),
    })
    gw = start(env, up, route('ops', '/ops', '[ {unwrap: data} ]', on_error='pass'),
               route('pass', '/pass'))
    c = env.client(gw.port)
    rid = [('X-Request-Id', 'etag-1')]
    ct = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
    for target, head, out in (
            ('/ops/strong', ct + b'ETag: W/"v1-abc"\r\n', b'{"a":1}'),
            ('/ops/weak', ct + b'ETag: W/"v1"\r\n', b'{"a":1}'),
            ('/ops/odd', ct, b'{"a":1}'),
            ('/ops/text', b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: "v1-abc"\r\n', b'plain'),
            ('/ops/invalid', ct + b'ETag: "v1-abc"\r\n', b'{"code":'),
            ('/pass/strong', ct + b'ETag: "v1-abc"\r\n', body)):
        r = get(c, target, rid)
        want = head + b'Date: %s\r\nX-Request-Id: etag-1\r\nContent-Length: %d\r\n\r\n' % (
            UP_DATE.encode(), len(out))
        env.eq(target + ': exact head and body', (r.raw_head, r.body) if r else None, (want, out))


@T.case
def compressed_answers_say_vary_once(env):
    """compress: gzip adds Vary: Accept-Encoding only when the upstream's Vary does not list
    it already (any case, among other names); an upstream Vary of other names gets a second
    line.  The re-compressed body's strong ETag goes out weak."""
    body = b'{"code":0,"data":{"text":"' + b'vary ' * 100 + b'"}}'
    want = b'{"text":"' + b'vary ' * 100 + b'"}'
    d = ('Date', UP_DATE)
    up = served(env, {
        '/v/ae': http_response(200, body, [('Vary', 'Accept-Encoding'), d]),
        '/v/mixed': http_response(200, body, [('Vary', 'Origin, accept-ENCODING'), ('ETag', '"z"'), d]),
        '/v/origin': http_response(200, body, [('Vary', 'Origin'), d]),
        '/v/none': http_response(200, body, [d]),
    })
    gw = start(env, up, route('z', '/', '[ {unwrap: data} ]', compress='gzip'))
    c = env.client(gw.port)
    ct = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
    tail = b'Date: ' + UP_DATE.encode() + b'\r\nX-Request-Id: vary-1\r\nContent-Encoding: gzip\r\n'
    for target, head, ours in (
            ('/v/ae', ct + b'Vary: Accept-Encoding\r\n', b''),
            ('/v/mixed', ct + b'Vary: Origin, accept-ENCODING\r\nETag: W/"z"\r\n', b''),
            ('/v/origin', ct + b'Vary: Origin\r\n', b'Vary: Accept-Encoding\r\n'),
            ('/v/none', ct, b'Vary: Accept-Encoding\r\n')):
        r = get(c, target, [('X-Request-Id', 'vary-1'), ('Accept-Encoding', 'gzip')])
        if r is None:
            env.check(target + ': answered', False, 'connection closed')
            continue
        env.eq(target + ': exact head', r.raw_head,
               head + tail + ours + b'Content-Length: %d\r\n\r\n' % len(r.body))
        env.eq(target + ': the body gzip', gzip.decompress(r.body), want)


@T.case
def proxied_answers_without_date_get_one(env):
    """An upstream answer without Date gets jsongate's (the current time, first after the
    status line, as nginx adds one); one with Date keeps it where it was."""
    up = served(env, {'/plain': http_response(200, b'{}'),
                      '/dated': http_response(200, b'{}', [('Date', UP_DATE)])})
    gw = start(env, up, route('p', '/'))
    c = env.client(gw.port)
    r = get(c, '/plain', [('X-Request-Id', 'date-1')])
    env.check('a Date of now', r is not None and date_is_now(r.date), r and r.date)
    env.eq('Date first', r.raw_head if r else None,
           b'HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: application/json\r\nX-Request-Id: date-1\r\n'
           b'Content-Length: 2\r\n\r\n' % (r.date or '').encode())
    r = get(c, '/dated', [('X-Request-Id', 'date-2')])
    env.eq('the upstream\'s Date kept', r.raw_head if r else None,
           b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: %s\r\nX-Request-Id: date-2\r\n'
           b'Content-Length: 2\r\n\r\n' % UP_DATE.encode())


T.run()
