"""Access log: json (one object per line with the documented keys, valid
whatever the request held) or combined, to a file or stderr, or off; a
relative file name is taken from the configuration file's directory, whatever
the working directory; a request refused before it went upstream names no
server."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

KEYS = {'time', 'remote_addr', 'method', 'path', 'status', 'bytes_sent', 'body_bytes_sent',
        'upstream', 'route', 'duration_ms', 'request_id'}
ROUTES = [{'name': 'api', 'match': {'path_prefix': '/api'}, 'upstream': 'app'}]
ISO8601 = re.compile(r'\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})\Z')
COMBINED = re.compile(r'127\.0\.0\.1 - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\] '
                      r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+|-) '
                      r'"(?P<referer>[^"]*)" "(?P<agent>[^"]*)"\Z')


def read_lines(path, n, timeout=5):
    def enough():
        if not os.path.exists(path):
            return None
        with open(path, 'rb') as f:
            lines = f.read().decode('utf-8', 'replace').splitlines()
        return lines if len(lines) >= n else None
    return wait_until(enough, timeout * SLOW) or []


def two_requests(env, gw):
    c = env.client(gw.port)
    ok = c.request('GET', '/api/orders?id=7', [('Host', 'a'), ('User-Agent', 'scenario-agent/1.0'),
                                              ('Referer', 'http://ref.example/page')])
    missing = c.request('POST', '/nowhere', [('Host', 'a'), ('X-Request-Id', 'log-me-404')], b'{}')
    return ok, missing


@T.case
def json_to_file(env):
    up = env.scripted(default=answer(http_response(200, b'{"orders":[]}')))
    path = os.path.join(env.tmp, 'access.json.log')
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': path, 'format': 'json'}))
    ok, missing = two_requests(env, gw)
    lines = read_lines(path, 2)
    env.require('two lines written', len(lines) == 2, lines)
    try:
        first, second = json.loads(lines[0]), json.loads(lines[1])
    except ValueError as e:
        env.require('each line is one JSON object', False, '%s: %r' % (e, lines))
    for label, entry in (('200 line', first), ('404 line', second)):
        env.check('%s has every key' % label, KEYS <= set(entry), sorted(KEYS - set(entry)))
        env.check('%s: time is ISO 8601' % label, ISO8601.match(str(entry.get('time'))), entry.get('time'))
        env.eq('%s: remote_addr' % label, entry.get('remote_addr'), '127.0.0.1')
        env.check('%s: duration_ms is a small non-negative number' % label,
                  isinstance(entry.get('duration_ms'), (int, float)) and 0 <= entry['duration_ms'] < 5000,
                  entry.get('duration_ms'))
        env.check('%s: bytes_sent is an integer' % label, isinstance(entry.get('bytes_sent'), int),
                  entry.get('bytes_sent'))
    env.eq('200 line: method, status, route, upstream',
           (first.get('method'), first.get('status'), first.get('route'), first.get('upstream')),
           ('GET', 200, 'api', up.address))
    env.check('200 line: path', first.get('path') in ('/api/orders?id=7', '/api/orders'), first.get('path'))
    env.eq('200 line: request_id is the one returned', first.get('request_id'), ok.header('X-Request-Id'))
    env.eq('200 line: bytes_sent counts head and body, body_bytes_sent the body',
           (first.get('bytes_sent'), first.get('body_bytes_sent')), (len(ok.raw_head) + len(ok.body), len(ok.body)))
    env.eq('404 line: method, path, status, request_id',
           (second.get('method'), second.get('path'), second.get('status'), second.get('request_id')),
           ('POST', '/nowhere', 404, 'log-me-404'))
    env.check('404 line: no route and no upstream (null, empty or "-")',
              second.get('route') in (None, '', '-') and second.get('upstream') in (None, '', '-'),
              (second.get('route'), second.get('upstream')))
    env.eq('404 line (a gateway error): bytes_sent and body_bytes_sent',
           (second.get('bytes_sent'), second.get('body_bytes_sent')),
           (len(missing.raw_head) + len(missing.body), len(missing.body)))


@T.case
def combined_to_file(env):
    up = env.scripted(default=answer(http_response(200, b'{"orders":[]}')))
    path = os.path.join(env.tmp, 'access.combined.log')
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': path, 'format': 'combined'}))
    ok, missing = two_requests(env, gw)
    lines = read_lines(path, 2)
    env.require('two lines written', len(lines) == 2, lines)
    m1, m2 = COMBINED.match(lines[0]), COMBINED.match(lines[1])
    env.check('first line is Apache combined', m1, lines[0])
    env.check('second line is Apache combined', m2, lines[1])
    if m1:
        env.eq('first line fields', (m1['request'], m1['status'], m1['referer'], m1['agent']),
               ('GET /api/orders?id=7 HTTP/1.1', '200', 'http://ref.example/page', 'scenario-agent/1.0'))
        env.eq('first line: %b counts the body only, as nginx', m1['bytes'], str(len(ok.body)))
    if m2:
        env.eq('second line fields', (m2['request'], m2['status'], m2['referer'], m2['agent']),
               ('POST /nowhere HTTP/1.1', '404', '-', '-'))
        env.eq('second line: %b counts the error body only', m2['bytes'], str(len(missing.body)))


def read_raw_lines(path, n, timeout=5):
    """The first n lines as bytes, newline removed: no decoding that could hide a bad byte."""
    def enough():
        if not os.path.exists(path):
            return None
        with open(path, 'rb') as f:
            lines = f.read().split(b'\n')
        return lines[:n] if len(lines) > n else None
    return wait_until(enough, timeout * SLOW) or []


@T.case
def json_lines_whatever_the_request_held(env):
    """Every JSON line is valid JSON in strict UTF-8: controls escaped, valid UTF-8 as it is,
    every other byte as U+FFFD, and a value too long for a 4 KB line is cut short, never the
    line."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.json.log')
    name = 'r"o\\u\x01te-\u00e9-' + 'n' * 5000
    routes = [{'name': name, 'match': {'path_prefix': '/'}, 'upstream': 'app'}]
    gw = env.daemon(upstream_config(up.address, routes=routes,
                                    log={'level': 'info', 'access': path, 'format': 'json'}))
    targets = [b'/bad/\xff\xfe\xc3\x28?q=\x80"\\', b'/long/' + b'x' * 5000, b'/' + b'\xff' * 3000]
    rid = 'id-"q"\\x'
    for t in targets:
        c = env.client(gw.port)
        c.send(b'GET %s HTTP/1.1\r\nHost: a\r\nX-Request-Id: %s\r\n\r\n' % (t, rid.encode()))
        r = c.read_response()
        env.eq('%r...: answered' % t[:12], r.status, 200)
    lines = read_raw_lines(path, len(targets))
    env.require('one line per request', len(lines) == len(targets), lines)
    paths = []
    for t, raw in zip(targets, lines):
        what = 'line for %r...' % t[:12]
        env.check(what + ': at most 4 KB', len(raw) < 4096, len(raw))
        try:
            entry = json.loads(raw.decode('utf-8'))
        except ValueError as e:
            env.check(what + ': strict UTF-8 and valid JSON', False, '%s: %r' % (e, raw[:300]))
            continue
        # Each target's bytes that are not UTF-8 stand alone: each is one U+FFFD.
        logged, received = entry.get('path', ''), t.decode('utf-8', 'replace')
        paths.append(logged)
        env.check(what + ': path holds the bytes received (bad ones U+FFFD), maybe cut',
                  0 < len(logged) <= len(received) and received.startswith(logged), logged[:100])
        env.eq(what + ': request_id with its quotes and backslash', entry.get('request_id'), rid)
        route = entry.get('route', '').encode('utf-8')
        env.check(what + ': the 5 KB route name is cut, the control escaped',
                  name.encode().startswith(route) and 20 < len(route) < len(name), route)
        env.eq(what + ': fields after the cut ones are whole', (entry.get('status'), entry.get('method')),
               (200, 'GET'))
    env.eq('a short path is logged whole', paths[:1], [targets[0].decode('utf-8', 'replace')])


@T.case
def json_values_keep_utf8(env):
    """Valid UTF-8 is logged as it is (an e acute is its two bytes, not \\u00c3\\u00a9),
    a percent-encoded target as it came, a byte that is not UTF-8 as U+FFFD: exact bytes."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.json.log')
    gw = env.daemon(upstream_config(up.address, routes=[{'name': 'caf\u00e9', 'match': {'path_prefix': '/'},
                                                         'upstream': 'app'}],
                                    log={'level': 'info', 'access': path, 'format': 'json'}))
    targets = [b'/caf%C3%A9', b'/caf\xc3\xa9', b'/x\xff\xc3(\xed\xa0\x80y', b'/\xf0\x9f\x98\x80']
    for t in targets:
        c = env.client(gw.port)
        c.send(b'GET %s HTTP/1.1\r\nHost: a\r\nX-Request-Id: rid\r\nUser-Agent: caf\xc3\xa9\r\n\r\n' % t)
        env.eq('%r: answered' % t, c.read_response().status, 200)
    env.eq('the upstream got each target as sent', [r.head.split(b' ')[1] for r in up.requests], targets)
    lines = read_raw_lines(path, len(targets))
    env.require('one line per request', len(lines) == len(targets), lines)
    fffd = b'\xef\xbf\xbd'
    wanted = [b'/caf%C3%A9', b'/caf\xc3\xa9', b'/x' + fffd * 2 + b'(' + fffd * 3 + b'y', b'/\xf0\x9f\x98\x80']
    for t, raw, want in zip(targets, lines, wanted):
        env.check('%r: "path" exactly' % t, b',"path":"' + want + b'",' in raw, raw)
        env.check('%r: "route" in UTF-8' % t, b',"route":"caf\xc3\xa9",' in raw, raw)
        try:
            json.loads(raw.decode('utf-8'))
        except ValueError as e:
            env.check('%r: strict UTF-8 and valid JSON' % t, False, '%s: %r' % (e, raw))


@T.case
def combined_keeps_nginx_escapes(env):
    """combined is not JSON: an e acute in the target and the User-Agent is \\xC3\\xA9 there,
    as nginx writes it."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.combined.log')
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': path, 'format': 'combined'}))
    c = env.client(gw.port)
    c.send(b'GET /api/caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\nUser-Agent: caf\xc3\xa9\r\n\r\n')
    env.eq('answered', c.read_response().status, 200)
    lines = read_raw_lines(path, 1)
    env.require('a line', len(lines) == 1, lines)
    env.check('target and agent as nginx writes them',
              lines[0].endswith(b'] "GET /api/caf\\xC3\\xA9 HTTP/1.1" 200 2 "-" "caf\\xC3\\xA9"'), lines[0])


@T.case
def combined_lines_stay_whole(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.combined.log')
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': path, 'format': 'combined'}))
    agent = b'agent\t"quoted"\\ \xc3\xa9' + b'\xff' * 5000
    c = env.client(gw.port)
    c.send(b'GET /api/' + b'\xfe' * 3000 + b' HTTP/1.1\r\nHost: a\r\nUser-Agent: ' + agent +
           b'\r\nReferer: ' + b'r' * 3000 + b'\r\n\r\n')
    env.eq('answered', c.read_response().status, 200)
    lines = read_raw_lines(path, 1)
    env.require('a line', len(lines) == 1, lines)
    m = COMBINED.match(lines[0].decode('ascii', 'replace'))
    env.check('still a combined line, quotes closed, under 4 KB', m and len(lines[0]) < 4096,
              lines[0][-300:])
    if m:
        env.check('the agent escaped as nginx does, maybe cut',
                  m['agent'].startswith('agent\\x09\\x22quoted\\x22\\x5C \\xC3\\xA9\\xFF'), m['agent'][:80])


@T.case
def refused_request_names_no_upstream(env):
    """A request refused before it went to a server names none: the try that was connecting
    while its body came never carried it."""
    path = os.path.join(env.tmp, 'access.json.log')
    routes = [{'name': 'strict', 'match': {'path_prefix': '/'}, 'upstream': 'app',
               'on_error': 'fail', 'request': [{'wrap': 'r'}]}]
    gw = env.daemon(upstream_config('127.0.0.1:1', routes=routes,
                                    log={'level': 'info', 'access': path, 'format': 'json'}))
    headers = [('Host', 'a'), ('Content-Type', 'application/json')]
    r = env.client(gw.port).request('POST', '/bom', headers, b'\xef\xbb\xbf{"a":1}')
    env.eq('a body with a byte order mark refused', r.status, 400)
    r = env.client(gw.port).request('POST', '/sent', headers, b'{"a":1}')
    env.eq('a good body tries the server, which refuses', r.status, 502)
    lines = read_lines(path, 2)
    env.require('two lines written', len(lines) == 2, lines)
    env.eq('the refused request names no server; the tried one names it',
           [(e['path'], e['status'], e['upstream']) for e in map(json.loads, lines)],
           [('/bom', 400, '-'), ('/sent', 502, '127.0.0.1:1')])


@T.case
def json_to_stderr(env):
    up = env.scripted(default=answer(http_response(200, b'{"orders":[]}')))
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': 'stderr', 'format': 'json'}))
    ok, missing = two_requests(env, gw)
    rid = ok.header('X-Request-Id')
    found = gw.wait_log(r'\{[^\n]*"request_id":"%s"[^\n]*\}' % re.escape(rid), 5)
    env.check('a JSON access line on stderr', found, gw.log()[-1000:])
    if found:
        entry = json.loads(found.group(0))
        env.eq('its status and route', (entry.get('status'), entry.get('route')), (200, 'api'))


@T.case
def access_off(env):
    up = env.scripted(default=answer(http_response(200, b'{"orders":[]}')))
    gw = env.daemon(upstream_config(up.address, routes=ROUTES,
                                    log={'level': 'info', 'access': 'off', 'format': 'json'}))
    ok, missing = two_requests(env, gw)
    gw.stop()
    log = gw.log()
    env.check('no access line on stderr', ok.header('X-Request-Id') not in log and '/api/orders' not in log,
              log[-1000:])
    env.eq('no file appeared in the directory', sorted(f for f in os.listdir(env.tmp) if 'access' in f), [])


@T.case
def relative_file_next_to_the_configuration(env):
    up = env.scripted(default=answer(http_response(200, b'{"orders":[]}')))
    elsewhere = os.path.join(env.tmp, 'elsewhere')
    os.mkdir(elsewhere)
    gw = env.daemon(upstream_config(up.address, routes=ROUTES, log={'access': 'access.log'}),
                    cwd=elsewhere)
    two_requests(env, gw)
    lines = read_lines(os.path.join(env.tmp, 'access.log'), 2)
    env.eq('both lines in the file beside the configuration',
           [json.loads(l)['path'] for l in lines], ['/api/orders?id=7', '/nowhere'])
    env.eq('nothing in the working directory', os.listdir(elsewhere), [])


T.run()
