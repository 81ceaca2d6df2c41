"""Command line and configuration: -t, -V, -h, errors as FILE:LINE:COL,
readiness, IPv4 and IPv6 listeners, `workers: auto`."""

import os
import pwd
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

GOOD = """\
workers: 1
log:
  level: info
  access: off
  format: json
limits:
  max_header: 16k
  max_body: 8m
  max_connections: 100
  max_depth: 100
timeouts:
  client_header: 10s
  client_body: 30s
  keepalive: 60s
  upstream_connect: 2s
  upstream_response: 30s
  shutdown_grace: 5s
listeners:
  - listen: 127.0.0.1:%(port)d
upstreams:
  orders:
    servers: [ 127.0.0.1:%(up)d, { address: 127.0.0.1:%(up)d, weight: 2 } ]
    balance: round_robin
    keepalive: 4
routes:
  - name: orders
    match:
      path_prefix: /api/orders
      methods: [GET, POST]
    upstream: orders
"""

# Every error below is on a known line and column (1-based).
BAD = """\
workers: 1
listeners:
  - listen: 127.0.0.1:8080
upstreams:
  app:
    servers: [ 127.0.0.1:9001 ]
timeouts:
  client_header: 10 parsecs
routes:
  - name: r
    match: { path_prefix: / }
    upstream: nowhere
bogus_key: 1
"""
BAD_ERRORS = [  # (line, column, a word the message must contain)
    (8, 18, 'client_header'),
    (12, 15, 'nowhere'),
    (13, 1, 'bogus_key'),
]


def write(env, name, text):
    path = os.path.join(env.tmp, name)
    with open(path, 'w') as f:
        f.write(text)
    return path


@T.case
def check_good_config(env):
    path = write(env, 'good.yaml', GOOD % {'port': free_port(), 'up': free_port()})
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 0)
    env.eq('-t stdout', p.stdout, b'configuration ok\n')


@T.case
def check_bad_config_reports_all_errors(env):
    path = write(env, 'bad.yaml', BAD)
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 1)
    env.eq('-t stdout is empty', p.stdout, b'')
    lines = [l for l in p.stderr.decode('utf-8', 'replace').splitlines() if l.strip()]
    for line in lines:
        env.check('stderr line is FILE:LINE:COL: message', re.match(re.escape(path) + r':\d+:\d+: \S', line),
                  'got %r' % line)
    for lnum, col, word in BAD_ERRORS:
        prefix = '%s:%d:%d: ' % (path, lnum, col)
        hits = [l for l in lines if l.startswith(prefix)]
        env.check('error reported at %d:%d' % (lnum, col), hits, 'stderr:\n' + '\n'.join(lines))
        env.check('error at %d:%d names %s' % (lnum, col, word), any(word in h for h in hits),
                  'got %r' % hits)


@T.case
def check_syntax_error(env):
    path = write(env, 'syntax.yaml', 'workers: 1\nlisteners:\n  - listen: [127.0.0.1:1\n')
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('exit status', p.returncode, 1)
    env.check('stderr names the file and a position', re.search(re.escape(path) + r':\d+:\d+: ',
                                                                  p.stderr.decode()), p.stderr)


@T.case
def missing_file(env):
    path = os.path.join(env.tmp, 'absent.yaml')
    p = env.run([JSONGATE, '-t', '-c', path])
    env.check('exit status non-zero', p.returncode != 0, 'got %d' % p.returncode)
    env.check('stderr names the file', path.encode() in p.stderr, p.stderr)


@T.case
def check_log_file_cannot_be_opened(env):
    """-t opens the log files as the start would, checks that the pid file can be created,
    and names the key of what cannot be."""
    port = free_port()
    text = 'log:\n  access: %s\nlisteners:\n  - listen: 127.0.0.1:%d\n'
    path = write(env, 'nodir.yaml', text % ('/nonexistent-dir/access.log', port))
    want = ('%s:2:11: log.access: cannot open /nonexistent-dir/access.log: '
            'No such file or directory\n' % path).encode()
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t: exit status, stdout, stderr', (p.returncode, p.stdout, p.stderr), (1, b'', want))
    p = env.run([JSONGATE, '-f', '-c', path], timeout=10)
    env.eq('start: exit status and the same error', (p.returncode, p.stderr), (1, want))
    path = write(env, 'relative.yaml', text % ('logs/access.log', port))
    p = env.run([JSONGATE, '-t', '-c', path], cwd='/')
    env.eq('a relative name is taken from the configuration\'s directory', p.stderr,
           ('%s:2:11: log.access: cannot open %s/logs/access.log: No such file or directory\n'
            % (path, env.tmp)).encode())
    os.mkdir(os.path.join(env.tmp, 'logs'))
    p = env.run([JSONGATE, '-t', '-c', path], cwd='/')
    env.eq('then it opens, and is created as at the start', (p.returncode, p.stdout,
           os.path.exists(os.path.join(env.tmp, 'logs', 'access.log'))),
           (0, b'configuration ok\n', True))
    text = ('pid_file: run/jsongate.pid\nlog:\n  error: /nonexistent-dir/error.log\n'
            'listeners:\n  - listen: 127.0.0.1:%d\n' % port)
    path = write(env, 'more.yaml', text)
    p = env.run([JSONGATE, '-t', '-c', path], cwd='/')
    env.eq('the pid file\'s directory and the error log, each at its key', (p.returncode, p.stderr),
           (1, ('%s:1:11: pid_file: cannot create files in %s/run: No such file or directory\n'
                '%s:3:10: log.error: cannot open /nonexistent-dir/error.log: No such file or '
                'directory\n' % (path, env.tmp, path)).encode()))


@T.case
def check_user_and_error_log_as_the_start(env):
    """-t refuses what the start refuses, at its key: a user that does not exist, a syslog
    socket that is not there (or not a socket, or too long a name); the start says the same."""
    port = free_port()
    sock_dir = tempfile.mkdtemp(prefix='jg-t-')
    try:
        text = ('user: no-such-user-jsongate\nlog:\n  error: syslog:%s/log.sock\n'
                'listeners:\n  - listen: 127.0.0.1:%d\n' % (sock_dir, port))
        path = write(env, 'user.yaml', text)
        want = ('%s:1:7: user: user no-such-user-jsongate not found\n'
                '%s:3:10: log.error: no syslog socket %s/log.sock: No such file or directory\n'
                % (path, path, sock_dir)).encode()
        p = env.run([JSONGATE, '-t', '-c', path])
        env.eq('-t: exit status, stdout, stderr', (p.returncode, p.stdout, p.stderr), (1, b'', want))
        p = env.run([JSONGATE, '-f', '-c', path], timeout=10)
        env.eq('start: exit status and the same errors', (p.returncode, p.stderr), (1, want))

        text = 'log:\n  error: syslog:%s\nlisteners:\n  - listen: 127.0.0.1:%d\n'
        not_socket = path
        path = write(env, 'notsock.yaml', text % (not_socket, port))
        p = env.run([JSONGATE, '-t', '-c', path])
        env.eq('a file that is not a socket', (p.returncode, p.stderr),
               (1, ('%s:2:10: log.error: %s is not a socket\n' % (path, not_socket)).encode()))
        long_name = '/' + 'x' * 108
        path = write(env, 'long.yaml', text % (long_name, port))
        p = env.run([JSONGATE, '-t', '-c', path])
        env.eq('a socket name longer than a socket address takes', (p.returncode, p.stderr),
               (1, ('%s:2:10: log.error: the socket name %s is longer than 107 bytes\n'
                    % (path, long_name)).encode()))

        # A socket nobody listens on is there: its lines go to stderr (test_ops_files.py).
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(os.path.join(sock_dir, 'log.sock'))
        s.close()
        user = pwd.getpwuid(os.geteuid()).pw_name
        text = ('user: %s\nlog:\n  error: syslog:%s/log.sock\n'
                'listeners:\n  - listen: 127.0.0.1:%d\n' % (user, sock_dir, port))
        path = write(env, 'ok.yaml', text)
        p = env.run([JSONGATE, '-t', '-c', path])
        env.eq('an existing user and socket: ok', (p.returncode, p.stdout, p.stderr),
               (0, b'configuration ok\n', b''))
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


@T.case
def version_and_help(env):
    p = env.run([JSONGATE, '-V'])
    env.eq('-V exit status', p.returncode, 0)
    # Its exact lines, against what each linked library reports: test_ops_files.py.
    env.check('-V prints the version first', p.stdout.startswith(b'jsongate '), p.stdout)
    p = env.run([JSONGATE, '-h'])
    env.eq('-h exit status', p.returncode, 0)
    text = (p.stdout + p.stderr).decode()
    env.check('-h prints usage with every option',
              all(o in text for o in ('-c', '-t', '-f', '-V', '-h')), text)
    p = env.run([JSONGATE, '-Z'])
    env.check('unknown option: non-zero exit', p.returncode != 0, 'got %d' % p.returncode)


@T.case
def readiness_log_and_ipv4(env):
    demo = env.demo()
    gw = env.daemon(upstream_config(demo.address))
    env.check('error log says ready', gw.wait_log(r'ready'), gw.log())
    r = env.client(gw.port).request('GET', '/api/orders/1', [('Host', 'a')])
    env.eq('GET through the IPv4 listener', r.status, 200)


@T.case
def ipv6_listener(env):
    demo = env.demo()
    port = free_port()
    conf = upstream_config(demo.address, listeners=[{'listen': '[::1]:%d' % port}])
    gw = env.daemon(conf, port=port, wait=False)
    ok = wait_until(lambda: _connects('::1', port), 10 * SLOW)
    env.require('listening on [::1]', ok, gw.log())
    c = env.client(port, host='::1')
    r = c.request('GET', '/api/orders/1', [('Host', 'a')])
    env.eq('GET through the IPv6 listener', r.status, 200)


def _connects(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


@T.case
def workers_auto(env):
    demo = env.demo()
    gw = env.daemon(upstream_config(demo.address, workers='auto'))
    r = env.client(gw.port).request('GET', '/api/orders/2', [('Host', 'a')])
    env.eq('workers: auto serves', r.status, 200)


T.run()
