"""$path.NAME variables: the captures of a route's path template,
percent-decoded, in `set` of request and response ops, in request and
response header ops and in the access log (log.path_fields), on plain
proxied routes and aggregated ones, with the exact bytes each side gets;
configuration errors."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def echo(env):
    """An upstream answering with the request body it got."""
    return env.scripted([], answer(lambda req: http_response(200, req.body or b'{}')))


def read_lines(path, n, timeout=5):
    def enough():
        if not os.path.exists(path):
            return None
        with open(path, 'rb') as f:
            lines = f.read().decode('utf-8', 'replace').splitlines()
        return lines if len(lines) >= n else None
    return wait_until(enough, timeout * SLOW) or []


@T.case
def plain_route_ops_and_header_ops(env):
    up = echo(env)
    conf = upstream_config(up.address, routes=[{
        'name': 'files', 'match': {'path': '/users/{id}/files/{rest...}'}, 'upstream': 'app',
        'request': [{'set': {'uid': '$path.id', 'rest': '$path.rest'}}],
        'response': [{'set': {'for': {'user': '$path.id'}}}],
        'request_headers': {'set': {'X-Uid': '$path.id'}, 'add': {'X-Rest': '$path.rest'}},
        'response_headers': {'set': {'X-Rest': '$path.rest'}}}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('POST', '/users/J%C3%B6rg%20%22Q%22/files/a%2Fb/c%0D%0Ad?x=1',
                  [('Host', 'h'), ('Content-Type', 'application/json'),
                   ('X-Request-Id', 'p-1')], b'{"n":1}')
    env.eq('upstream request: the path as sent, the captures decoded in the body (escaped) '
           'and headers (controls left out)',
           up.requests[0].raw if up.requests else None,
           b'POST /users/J%C3%B6rg%20%22Q%22/files/a%2Fb/c%0D%0Ad?x=1 HTTP/1.1\r\nHost: h\r\n'
           b'Content-Type: application/json\r\nX-Forwarded-For: 127.0.0.1\r\n'
           b'X-Forwarded-Proto: http\r\nX-Request-Id: p-1\r\n'
           b'X-Uid: J\xc3\xb6rg "Q"\r\nX-Rest: a/b/cd\r\nContent-Length: 47\r\n\r\n'
           b'{"n":1,"uid":"J\xc3\xb6rg \\"Q\\"","rest":"a/b/c\\r\\nd"}')
    env.eq('answer: response ops and header ops read them too', (r.body, r.header('X-Rest')),
           (b'{"n":1,"uid":"J\xc3\xb6rg \\"Q\\"","rest":"a/b/c\\r\\nd","for":{"user":'
            b'"J\xc3\xb6rg \\"Q\\""}}', 'a/b/cd'))
    r = c.request('GET', '/users/7/files/', [('Host', 'h')])
    env.eq('an empty {rest...}: an empty string; the next request\'s own values',
           (r.body, r.header('X-Rest'), up.requests[1].header('X-Uid'),
            up.requests[1].header('X-Rest')),
           (b'{"for":{"user":"7"}}', '', '7', ''))


@T.case
def aggregated_route(env):
    users = env.scripted(default=answer(http_response(200, b'{"name":"n"}')))
    conf = upstream_config('127.0.0.1:1', routes=[{
        'name': 'dash', 'match': {'path': '/d/{id}'}, 'backends': {
            'user': {'upstream': 'users', 'path': '/u/${path.id}',
                     'response': [{'set': {'id': '$path.id'}}]}},
        'response': [{'set': {'asked': '$path.id'}}],
        'response_headers': {'set': {'X-Id': '$path.id'}}}])
    conf['upstreams'] = {'users': {'servers': [users.address]}}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('GET', '/d/a%20b', [('Host', 'h')])
    env.eq('backend ops, route ops and header ops read the capture, decoded',
           (r.body, r.header('X-Id'), users.requests[0].target),
           (b'{"user":{"name":"n","id":"a b"},"asked":"a b"}', 'a b', '/u/a%20b'))
    r = c.request('GET', '/d/2', [('Host', 'h')])
    env.eq('the next request, its own', (r.body, r.header('X-Id')),
           (b'{"user":{"name":"n","id":"2"},"asked":"2"}', '2'))


@T.case
def access_log_path_fields(env):
    up = env.scripted([], answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.log')
    conf = upstream_config(up.address, log={'level': 'info', 'access': path, 'format': 'json',
                                            'path_fields': ['id', 'rest', 'other']},
                           routes=[{'name': 'files', 'match': {'path': '/f/{id}/{rest...}'},
                                    'upstream': 'app'},
                                   {'name': 'rest', 'match': {'path_prefix': '/'},
                                    'upstream': 'app'}])
    gw = env.daemon(conf)
    c = env.client(gw.port)
    c.request('GET', '/f/%C3%A9%22/x/y', [('Host', 'h')])
    c.request('GET', '/plain', [('Host', 'h')])
    c.send(b'BAD REQUEST LINE\r\n\r\n')
    c.read_response()
    lines = read_lines(path, 3)
    env.require('three lines', len(lines) == 3, lines)
    env.check('the captures, decoded, escaped as the log does; null where the route has none',
              lines[0].endswith(',"path_fields":{"id":"\u00e9\\"","rest":"x/y",'
                                '"other":null}}'), lines[0][-120:])
    entries = [json.loads(line) for line in lines]
    env.eq('a route without a template, a request without a route: null',
           [e.get('path_fields') for e in entries[1:]],
           [{'id': None, 'rest': None, 'other': None}] * 2)


@T.case
def configuration_errors(env):
    def check(what, conf, message):
        conf['listeners'] = [{'listen': '127.0.0.1:1'}]
        path = os.path.join(env.tmp, 'bad.yaml')
        with open(path, 'w') as f:
            f.write(to_yaml(conf))
        p = env.run([JSONGATE, '-t', '-c', path])
        env.check(what, p.returncode == 1 and message in p.stderr.decode(), p.stderr.decode())
    conf = upstream_config('127.0.0.1:1', routes=[{
        'match': {'path': '/u/{id}'}, 'upstream': 'app', 'response': [{'set': {'a': '$path.ids'}}]}])
    check('a capture the template does not have', conf,
          "routes[0].response: variable '$path.ids': the route's path template has no such "
          "capture")
    conf = upstream_config('127.0.0.1:1', routes=[{
        'match': {'path_prefix': '/u'}, 'upstream': 'app',
        'request_headers': {'set': {'X-Id': '$path.id'}}}])
    check('no template', conf, "routes[0].request_headers.set: cannot set 'X-Id': the route's "
          "match.path is not a path template")
    conf = upstream_config('127.0.0.1:1', log={'access': 'stderr', 'format': 'combined',
                                               'path_fields': ['id']})
    check('path_fields with the combined format', conf,
          'log.path_fields: only the json access log format has path captures')


T.run()
