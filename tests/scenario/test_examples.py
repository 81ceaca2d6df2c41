"""The EXAMPLES of jsongate.yaml(5), taken from the man page itself: each recipe
must load with -t as printed, and do what the page says when its upstream
addresses and listener are pointed at scripted upstreams."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

MAN_PAGE = os.path.join(os.path.dirname(TESTS_SRCDIR), 'man', 'jsongate.yaml.5')
ESCAPES = (('\\(dq', '"'), ('\\(em', '--'), ('\\&', ''), ('\\e', '\\'))


def examples():
    """The literal blocks of the EXAMPLES section, mdoc escapes undone, by subsection."""
    with open(MAN_PAGE) as f:
        text = f.read()
    section = text.split('\n.Sh EXAMPLES\n', 1)[1].split('\n.Sh ', 1)[0]
    found = {}
    for sub in section.split('\n.Ss ')[1:]:
        title = sub.split('\n', 1)[0]
        block = re.search(r'\n\.Bd -literal[^\n]*\n(.*?)\n\.Ed', sub, re.S).group(1)
        for esc, plain in ESCAPES:
            block = block.replace(esc, plain)
        found[title] = block + '\n'
    return found


RECIPES = examples()


def recipe(env, title, servers):
    """Start the recipe titled title with its server addresses replaced (a dict)."""
    text = RECIPES[title]
    check_printed(env, title, text)
    for printed, up in servers.items():
        env.require('the recipe names %s' % printed, printed in text)
        text = text.replace(printed, up.address)
    port = free_port()
    text = text.replace('listen: 0.0.0.0:8080', 'listen: 127.0.0.1:%d' % port)
    return env.daemon(text, port=port)


def check_printed(env, title, text):
    path = os.path.join(env.tmp, 'printed.yaml')
    with open(path, 'w') as f:
        f.write(text)
    r = env.run([JSONGATE, '-t', '-c', path])
    env.eq('%s: -t on the recipe as printed' % title, (r.returncode, r.stdout, r.stderr),
           (0, b'configuration ok\n', b''))


def by_target(env, table):
    """A scripted upstream answering by request target (unknown targets: 404)."""
    def respond(req):
        return table.get(req.target, http_response(404, b'{"unknown":true}'))
    return env.scripted([], answer(respond))


def exchange(c, target, rid):
    r = c.request('GET', target, [('Host', 'api.example.com'), ('X-Request-Id', rid)])
    return (r.status, r.header('Content-Type'), r.header('Content-Length'), r.body)


def same(body, status=200, content_type='application/json'):
    return (status, content_type, str(len(body)), body)


@T.case
def code_msg_data_envelope(env):
    table = {
        '/api/orders/1': http_response(200, b'{"code":0,"msg":"ok","data":{"id":1}}'),
        '/api/orders/token': http_response(
            200, b'{"code":1001,"msg":"invalid token","data":null}'),
        '/api/orders/busy': http_response(200, b'{"code":503,"msg":"try later","data":null}'),
        '/api/orders/odd': http_response(200, b'{"code":7,"msg":"odd","data":{"x":1}}'),
        '/api/orders/outage': http_response(503, b'{"code":0,"msg":"ok","data":{}}'),
    }
    a, b = by_target(env, table), by_target(env, table)
    gw = recipe(env, 'An API that wraps every answer in code, msg and data',
                {'127.0.0.1:9001': a, '127.0.0.1:9002': b})
    c = env.client(gw.port)
    for _ in range(3):      # both servers (weights 1 and 2) give the same answers
        env.eq('code 0: the data, 200', exchange(c, '/api/orders/1', 'e1'), same(b'{"id":1}'))
    env.eq('both servers took requests', (len(a.requests) > 0, len(b.requests) > 0),
           (True, True))
    env.eq('code 1001: 401 with its envelope', exchange(c, '/api/orders/token', 'e2'),
           same(b'{"code":1001,"msg":"invalid token","data":null}', 401))
    env.eq('code 503: 502 (5xx) with its envelope', exchange(c, '/api/orders/busy', 'e3'),
           same(b'{"code":503,"msg":"try later","data":null}', 502))
    env.eq('code 7: the upstream status and envelope', exchange(c, '/api/orders/odd', 'e4'),
           same(b'{"code":7,"msg":"odd","data":{"x":1}}'))
    env.eq('an upstream 503 stays a 503, untouched', exchange(c, '/api/orders/outage', 'e5'),
           same(b'{"code":0,"msg":"ok","data":{}}', 503))


@T.case
def problem_details_pass_through(env):
    problem = b'{"type":"about:blank","title":"Not Found","status":404,"detail":"no invoice 9"}'
    up = by_target(env, {
        '/billing/invoices/1': http_response(200, b'{"total":5,"lines":[{"sku":"a"}]}'),
        '/billing/invoices/9': http_response(404, problem,
                                             content_type='application/problem+json'),
    })
    gw = recipe(env, 'An API that reports errors as problem details', {'127.0.0.1:9003': up})
    c = env.client(gw.port)
    r = c.request('GET', '/billing/invoices/1', [('Host', 'a'), ('X-Request-Id', 'p-1')])
    body = b'{"data":{"total":5,"lines":[{"sku":"a"}]},"request_id":"p-1"}'
    env.eq('a success: its data and the request id',
           (r.status, r.body, r.header('Content-Length'), r.header('Cache-Control')),
           (200, body, str(len(body)), 'no-store'))
    r = c.request('GET', '/billing/invoices/9', [('Host', 'a'), ('X-Request-Id', 'p-2')])
    env.eq('a problem: status, type and body as the upstream sent them',
           (r.status, r.header('Content-Type'), r.body, r.header('Cache-Control')),
           (404, 'application/problem+json', problem, 'no-store'))


@T.case
def legacy_api_wrapped(env):
    up = by_target(env, {
        '/users': http_response(200, b'[{"id":1},{"id":2}]'),
        '/users/9': http_response(404, b'{"error":"no such user"}'),
        '/broken': http_response(500, b'<h1>oops</h1>', content_type='text/html'),
    })
    gw = recipe(env, 'A legacy API wrapped in the envelope newer clients expect',
                {'127.0.0.1:9004': up})
    c = env.client(gw.port)
    env.eq('a success in the envelope', exchange(c, '/v2/users', 'l-1'),
           same(b'{"data":[{"id":1},{"id":2}],"code":0,"msg":"ok"}'))
    env.eq('the old service is asked under its own path',
           (up.requests[0].target, up.requests[0].header('X-Forwarded-Prefix')),
           ('/users', '/v2'))
    env.eq('a JSON error in the envelope, its status kept', exchange(c, '/v2/users/9', 'l-2'),
           same(b'{"data":{"error":"no such user"},"code":1,"msg":"error"}', 404))
    env.eq('an error that is not JSON passes untouched', exchange(c, '/v2/broken', 'l-3'),
           same(b'<h1>oops</h1>', 500, 'text/html'))


@T.case
def every_recipe_is_tested(env):
    env.eq('the recipes of EXAMPLES', sorted(RECIPES), sorted([
        'A legacy API wrapped in the envelope newer clients expect',
        'An API that reports errors as problem details',
        'An API that wraps every answer in code, msg and data']))


T.run()
