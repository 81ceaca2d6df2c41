"""Servers by host name, against a DNS server of the test's own (dns_server.py) given as
`resolver:`: -t resolves them (a name that does not resolve is FILE:LINE:COL), every A and
AAAA address becomes a server with the entry's weight, SIGHUP resolves again, and while
running a failing nameserver keeps the last good answer (logged once per streak, counted in
/metrics) and a change of addresses is logged.  Names the hosts file lists (one of the
test's own, named by JSONGATE_HOSTS_FILE) resolve from it, at load and while running; a
nameserver refusing AAAA queries leaves the A addresses in use."""

import contextlib

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
import dns_server  # noqa: E402

T = Suite(__file__)
OK = answer(http_response(200, b'{"ok":true}'))


def write(env, name, text):
    path = os.path.join(env.tmp, name)
    with open(path, 'w') as f:
        f.write(text)
    return path


def twins(env, *hosts):
    """Scripted upstreams answering 200 on the same free port of each host."""
    first = env.scripted(default=OK, host=hosts[0])
    return [first] + [env.scripted(default=OK, host=h, port=first.port) for h in hosts[1:]]


def named_config(dns, servers, admin_port=None, **upstream):
    conf = upstream_config(*servers, resolver=dns.address)
    conf['upstreams']['app'].update(upstream)
    if admin_port:
        conf['admin'] = {'listen': '127.0.0.1:%d' % admin_port}
    return conf


def get_many(env, gw, n, path='/x'):
    c = env.client(gw.port)
    statuses = [c.request('GET', '%s/%d' % (path, i), [('Host', 'api.example')]).status
                for i in range(n)]
    env.eq('%d GETs answered 200' % n, statuses, [200] * n)


@contextlib.contextmanager
def hosts_file(path):
    """Daemons and -t started meanwhile read path as their hosts file."""
    old = os.environ.get('JSONGATE_HOSTS_FILE')
    os.environ['JSONGATE_HOSTS_FILE'] = path
    try:
        yield
    finally:
        if old is None:
            del os.environ['JSONGATE_HOSTS_FILE']
        else:
            os.environ['JSONGATE_HOSTS_FILE'] = old


def check_ok(env, dns, servers, what):
    conf = named_config(dns, servers)
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % free_port()}]
    path = write(env, 'check.yaml', to_yaml(conf) + '\n')
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t %s' % what, (p.returncode, p.stdout, p.stderr),
           (0, b'configuration ok\n', b''))


metrics = metrics_text


def lookups(port, name, result):
    m = re.search(r'^jsongate_resolver_lookups_total\{name="%s",result="%s"\} (\d+)$'
                  % (re.escape(name), result), metrics(port), re.M)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ -t

@T.case
def check_resolves_names(env):
    dns = dns_server.start(env)
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'], aaaa=['::1'])
    conf = named_config(dns, ['api.test:9000', {'address': 'API.Test.:9001', 'weight': 2}])
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % free_port()}]
    path = write(env, 'ok.yaml', to_yaml(conf) + '\n')
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 0)
    env.eq('-t stdout', p.stdout, b'configuration ok\n')
    env.eq('-t stderr', p.stderr, b'')
    env.eq('one A and one AAAA query for the name', (dns.queries('api.test', 'A'),
                                                     dns.queries('api.test', 'AAAA')), (1, 1))


@T.case
def check_reports_unknown_names(env):
    dns = dns_server.start(env)
    dns.set('empty.test')
    text = ('listeners: [ { listen: 127.0.0.1:%d } ]\n'
            'resolver: %s\n'
            'upstreams:\n'
            '  app:\n'
            '    servers:\n'
            '      - nowhere.test:9000\n'
            '      - { address: empty.test:9001, weight: 2 }\n'
            '      - "bad name:80"\n'
            '      - 256.1.1.1:80\n'
            'routes: [ { upstream: app } ]\n' % (free_port(), dns.address))
    path = write(env, 'bad.yaml', text)
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 1)
    env.eq('-t stdout', p.stdout, b'')
    env.eq('-t stderr', p.stderr.decode(), ''.join(line % path + '\n' for line in (
        '%s:6:9: upstreams.app.servers[0]: cannot resolve "nowhere.test": name does not exist',
        '%s:7:20: upstreams.app.servers[1].address: cannot resolve "empty.test": '
        'no A or AAAA record',
        '%s:8:9: upstreams.app.servers[2]: invalid address "bad name:80": host must be an '
        'IPv4 address, [IPv6], localhost or a host name',
        '%s:9:9: upstreams.app.servers[3]: invalid address "256.1.1.1:80": host must be an '
        'IPv4 address, [IPv6], localhost or a host name')))

    dns.fail('servfail')
    dns.set('api.test', a=['127.0.0.2'])
    text = ('listeners: [ { listen: 127.0.0.1:%d } ]\nresolver: %s\n'
            'upstreams: { app: { servers: [ api.test:80 ] } }\n' % (free_port(), dns.address))
    path = write(env, 'servfail.yaml', text)
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t with a failing nameserver', (p.returncode, p.stderr.decode()), (
        1, '%s:3:32: upstreams.app.servers[0]: cannot resolve "api.test": request timed out\n'
        % path))


@T.case
def check_names_from_hosts_file(env):
    dns = dns_server.start(env)
    hosts = write(env, 'hosts', '# extra_hosts\n127.0.0.2 db web.test\n')
    with hosts_file(hosts):
        check_ok(env, dns, ['Web.Test:80'], 'with a name the hosts file lists')
    env.eq('the nameserver was not asked', dns.queries('web.test'), 0)


@T.case
def check_a_without_aaaa(env):
    dns = dns_server.start(env)
    dns.set('half.test', a=['127.0.0.2'], aaaa=['::1'])
    dns.fail('refused', only='AAAA')
    check_ok(env, dns, ['half.test:80'], 'with AAAA queries refused')
    env.eq('one A and one AAAA query', (dns.queries('half.test', 'A'),
                                        dns.queries('half.test', 'AAAA')), (1, 1))


# ------------------------------------------------------------------ serving

@T.case
def names_from_hosts_file(env):
    dns = dns_server.start(env)
    up2, up3, up4 = twins(env, '127.0.0.2', '127.0.0.3', '127.0.0.4')
    dns.set('web.test', a=['127.0.0.4'])
    hosts = write(env, 'hosts', '127.0.0.1 localhost\n'
                                '127.0.0.2 web.test  # a comment\n'
                                '127.0.0.3 db WEB.test\n')
    with hosts_file(hosts):
        gw = env.daemon(named_config(dns, ['web.test:%d' % up2.port], resolve_interval='1s'))
    get_many(env, gw, 4, '/before')
    env.eq('every line naming it is a server, not what DNS says',
           (len(up2.requests), len(up3.requests), len(up4.requests)), (2, 2, 0))

    start = len(gw.log())
    write(env, 'hosts', '127.0.0.4 web.test\n')
    env.require('a change of the file is seen while running', gw.wait_log(
        r'\[info\] resolver: web\.test now resolves to 127\.0\.0\.4\n', start=start,
        timeout=10 * SLOW))
    env.require('and applied', gw.wait_log(r'upstream app: now 1 server\n', start=start))
    get_many(env, gw, 2, '/after')
    env.eq('requests go to the new address', [r.target for r in up4.requests],
           ['/after/0', '/after/1'])
    env.eq('the nameserver was never asked', dns.queries('web.test'), 0)


@T.case
def a_without_aaaa(env):
    dns = dns_server.start(env)
    v4, v4b, v6 = twins(env, '127.0.0.2', '127.0.0.3', '::1')
    dns.set('half.test', a=['127.0.0.2'], aaaa=['::1'])
    dns.fail('refused', only='AAAA')
    gw = env.daemon(named_config(dns, ['half.test:%d' % v4.port]))
    get_many(env, gw, 3, '/refused')
    env.eq('the A address takes every request', (len(v4.requests), len(v6.requests)), (3, 0))

    # both at first, then AAAA refused while A changes: the new A, the last AAAA kept
    dns.fail(None)
    dns.set('dual.test', a=['127.0.0.2'], aaaa=['::1'], ttl=1)
    gw2 = env.daemon(named_config(dns, ['dual.test:%d' % v4.port]))
    start = len(gw2.log())
    dns.fail('refused', only='AAAA')
    dns.set('dual.test', a=['127.0.0.3'], aaaa=['::2'], ttl=1)
    env.require('the change is logged', gw2.wait_log(
        r'\[info\] resolver: dual\.test now resolves to 127\.0\.0\.3, ::1\n', start=start,
        timeout=10 * SLOW))
    env.check('the refused family is logged once', gw2.wait_log(
        r'\[warn\] resolver: cannot resolve dual\.test \(AAAA\): refused; keeping ::1\n',
        start=start))
    env.require('and applied', gw2.wait_log(r'upstream app: now 2 servers\n', start=start))
    c = env.client(gw2.port)
    statuses = [c.request('GET', '/kept/%d' % i, [('Host', 'api.example')]).status
                for i in range(4)]
    env.eq('answered', statuses, [200] * 4)
    env.eq('the new A address and the kept AAAA one share them',
           (len(v4b.requests), len([r for r in v6.requests if r.target.startswith('/kept')])),
           (2, 2))

@T.case
def every_address_is_a_server(env):
    dns = dns_server.start(env)
    up2, up3 = twins(env, '127.0.0.2', '127.0.0.3')
    dns.set('api.test', a=['127.0.0.3', '127.0.0.2'])
    admin = free_port()
    gw = env.daemon(named_config(dns, ['api.test:%d' % up2.port], admin))
    get_many(env, gw, 10)
    env.eq('127.0.0.2 got half of the requests', len(up2.requests), 5)
    env.eq('127.0.0.3 got the other half', len(up3.requests), 5)
    env.eq('the client\'s Host went through',
           {r.header('Host') for r in up2.requests + up3.requests}, {'api.example'})
    text = metrics(admin)
    for addr in ('127.0.0.2', '127.0.0.3'):
        env.check('/metrics counts %s as a server' % addr, re.search(
            r'^jsongate_upstream_requests_total\{upstream="app",server="%s:%d",outcome="ok"\} 5$'
            % (re.escape(addr), up2.port), text, re.M), text[:3000])


@T.case
def a_and_aaaa_records(env):
    dns = dns_server.start(env)
    v4, v6 = twins(env, '127.0.0.2', '::1')
    dns.set('dual.test', a=['127.0.0.2'], aaaa=['::1'])
    gw = env.daemon(named_config(dns, ['dual.test:%d' % v4.port]))
    get_many(env, gw, 6)
    env.eq('IPv4 server', len(v4.requests), 3)
    env.eq('IPv6 server', len(v6.requests), 3)


@T.case
def entry_weight_for_every_address(env):
    dns = dns_server.start(env)
    up2, up3 = twins(env, '127.0.0.2', '127.0.0.3')
    other = env.scripted(default=OK)
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'])
    gw = env.daemon(named_config(dns, [{'address': 'api.test:%d' % up2.port, 'weight': 2},
                                       other.address]))
    get_many(env, gw, 10)
    env.eq('requests per server, weights 2, 2 and 1',
           (len(up2.requests), len(up3.requests), len(other.requests)), (4, 4, 2))


@T.case
def reload_resolves_again(env):
    dns = dns_server.start(env)
    up2, up3 = twins(env, '127.0.0.2', '127.0.0.3')
    dns.set('api.test', a=['127.0.0.2'])
    gw = env.daemon(named_config(dns, ['api.test:%d' % up2.port]))
    get_many(env, gw, 2, '/before')
    dns.set('api.test', a=['127.0.0.3'])
    start = len(gw.log())
    gw.signal(signal.SIGHUP)
    env.require('reloaded', gw.wait_log(r'configuration reloaded', start=start))
    get_many(env, gw, 2, '/after')
    env.eq('before the reload: the old address', [r.target for r in up2.requests],
           ['/before/0', '/before/1'])
    env.eq('after it: the new one', [r.target for r in up3.requests], ['/after/0', '/after/1'])

    dns.remove('api.test')
    start = len(gw.log())
    gw.signal(signal.SIGHUP)
    env.check('a name gone at reload is an error', gw.wait_log(
        r'upstreams\.app\.servers\[0\]: cannot resolve "api\.test": name does not exist',
        start=start))
    env.require('the reload is rejected', gw.wait_log(r'reload failed', start=start))
    get_many(env, gw, 1, '/kept')
    env.eq('the running configuration keeps serving', up3.requests[-1].target, '/kept/0')


@T.case
def failing_nameserver_keeps_last_answer(env):
    dns = dns_server.start(env)
    up2, up3 = twins(env, '127.0.0.2', '127.0.0.3')
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'], ttl=1)
    admin = free_port()
    gw = env.daemon(named_config(dns, ['api.test:%d' % up2.port], admin,
                                 resolve_interval='1m'))
    env.require('looked up again after the TTL (1 s), not the interval (1 min)',
                wait_until(lambda: lookups(admin, 'api.test', 'success') == 1, 10 * SLOW))
    dns.fail('servfail')
    env.require('two failed lookups counted',
                wait_until(lambda: lookups(admin, 'api.test', 'failure') == 2, 10 * SLOW))
    log = gw.log()
    env.eq('the failure is logged once', len(re.findall(
        r'\[warn\] resolver: cannot resolve api\.test: request timed out; keeping 127\.0\.0\.2, '
        r'127\.0\.0\.3\n', log)), 1)
    get_many(env, gw, 4, '/meanwhile')
    env.eq('both servers still take requests', (len(up2.requests), len(up3.requests)), (2, 2))

    dns.fail(None)
    env.check('recovery logged', gw.wait_log(
        r'\[info\] resolver: api\.test resolves again after \d+ failed lookups'))
    dns.set('api.test', a=['127.0.0.4'], ttl=1)
    env.check('a change logged', gw.wait_log(r'\[info\] resolver: api\.test now resolves to '
                                             r'127\.0\.0\.4\n'))
    env.check('/metrics counts successes', lookups(admin, 'api.test', 'success') >= 2)


@T.case
def address_changes_apply_while_running(env):
    dns = dns_server.start(env)
    up2, up3, up4 = twins(env, '127.0.0.2', '127.0.0.3', '127.0.0.4')
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'], ttl=1)
    admin = free_port()
    gw = env.daemon(named_config(dns, ['api.test:%d' % up2.port], admin))
    c = env.client(gw.port)
    for i in range(4):
        c.request('GET', '/before/%d' % i, [('Host', 'api.example')])
    env.eq('both addresses take requests', (len(up2.requests), len(up3.requests)), (2, 2))
    env.eq('one pooled connection each', (up2.connections, up3.connections), (1, 1))

    dns.set('api.test', a=['127.0.0.3', '127.0.0.4'], ttl=1)
    env.require('the change reaches the upstream', gw.wait_log(r'upstream app: now 2 servers',
                                                              timeout=10 * SLOW))
    before2 = len(up2.requests)
    for i in range(6):
        r = c.request('GET', '/after/%d' % i, [('Host', 'api.example')])
        env.eq('answered after the change %d' % i, r.status, 200)
    env.eq('the address that left gets nothing more', len(up2.requests), before2)
    env.eq('the new address takes its share', len(up4.requests), 3)
    env.eq('the address that stayed kept its pooled connection', up3.connections, 1)
    m = metrics(admin)
    env.check('/metrics: the new server is up and the old one no longer listed',
              'jsongate_upstream_server_up{upstream="app",server="127.0.0.4:%d"} 1' % up4.port
              in m and 'jsongate_upstream_server_up{upstream="app",server="127.0.0.2:%d"}'
              % up2.port not in m, m[-1500:])



@T.case
def address_changes_keep_health_checks_of_servers_that_stay(env):
    dns = dns_server.start(env)
    health = (500, b'{}')
    ups = [env.scripted(default=OK, host='127.0.0.2', health=health)]
    ups += [env.scripted(default=OK, host=h, port=ups[0].port, health=health)
            for h in ('127.0.0.3', '127.0.0.4')]
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'], ttl=1)
    gw = env.daemon(named_config(dns, ['api.test:%d' % ups[0].port], health={
        'path': '/health', 'interval': '1h', 'fails': 2}))
    env.require('the first checks', wait_until(
        lambda: [len(u.health_requests) for u in ups] == [1, 1, 0], 5))
    dns.set('api.test', a=['127.0.0.3', '127.0.0.4'], ttl=1)
    env.require('the change reaches the upstream', gw.wait_log(r'upstream app: now 2 servers',
                                                              timeout=10 * SLOW))
    env.require('the new server is checked at once', wait_until(
        lambda: len(ups[2].health_requests) == 1, 5))
    get_many(env, gw, 2, '/after')
    env.eq('the server that stayed was not checked again: its count of failures goes on',
           [len(u.health_requests) for u in ups], [1, 1, 1])
    env.eq('so both are still in service (1 of 2 failed checks each)',
           (len(ups[1].requests), len(ups[2].requests)), (1, 1))


T.run()
