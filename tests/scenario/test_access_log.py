"""Access log: json (one object per line with the documented keys) or
combined, to a file or stderr, or off."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

KEYS = {'time', 'remote_addr', 'method', 'path', 'status', 'bytes_sent', 'upstream', 'route',
        'duration_ms', 'request_id'}
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
    env.check('200 line: bytes_sent counts the body (with or without the head)',
              first.get('bytes_sent') in (len(ok.body), len(ok.head) + len(ok.body)), first.get('bytes_sent'))
    env.eq('404 line: method, path, status, request_id',
           (second.get('method'), second.get('path'), second.get('status'), second.get('request_id')),
           ('POST', '/nowhere', 404, 'log-me-404'))
    env.check('404 line: no route and no upstream (null, empty or "-")',
              second.get('route') in (None, '', '-') and second.get('upstream') in (None, '', '-'),
              (second.get('route'), second.get('upstream')))
    env.check('404 line: bytes_sent counts the body (with or without the head)',
              second.get('bytes_sent') in (len(missing.body), len(missing.head) + len(missing.body)),
              second.get('bytes_sent'))


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
        env.check('first line bytes', m1['bytes'] in (str(len(ok.body)), str(len(ok.head) + len(ok.body))),
                  m1['bytes'])
    if m2:
        env.eq('second line fields', (m2['request'], m2['status'], m2['referer'], m2['agent']),
               ('POST /nowhere HTTP/1.1', '404', '-', '-'))


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


T.run()
