"""Files and privileges: SIGUSR1 reopens the access log after logrotate renamed
it; `user:` drops root to that user and its group (uid, gid and supplementary
groups checked in /proc), or fails loudly when not started as root; -V names
the versions of libevent, OpenSSL, libyaml and zlib exactly as each reports itself (jsmn: header-only);
log.error to a file (reopened on SIGUSR1) or to syslog (exact datagrams on a
socket of the test's), start-up errors on stderr too; without -f the daemon
detaches with stdin, stdout and stderr on /dev/null and logs to syslog, or, where
nothing listens on the syslog socket, to the stderr it was started with (said once);
pid_file holds the daemon's pid while it runs, written only once it listens (with
user:, written and removed as that user)."""

import grp
import os
import pwd
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
import shutil  # noqa: E402

T = Suite(__file__)


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return None


@T.case
def sigusr1_reopens_access_log(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'access.log')
    gw = env.daemon(upstream_config(up.address, log={'access': path}, workers=2))
    c = env.client(gw.port)
    for i in range(2):
        env.eq('request %d' % i, c.request('GET', '/before-%d' % i, [('Host', 'a')]).status, 200)
    os.rename(path, path + '.1')
    env.eq('request after the rename', c.request('GET', '/renamed', [('Host', 'a')]).status, 200)
    gw.signal(signal.SIGUSR1)
    env.require('reopen logged', gw.wait_log('access log .* reopened'))
    env.check('the new file exists at once', os.path.exists(path))
    for i in range(2):
        env.eq('request after reopen %d' % i, c.request(
            'GET', '/after-%d' % i, [('Host', 'a')]).status, 200)
    env.eq('the renamed file holds the lines written before SIGUSR1',
           [e['path'] for e in lines(path + '.1')], ['/before-0', '/before-1', '/renamed'])
    env.eq('the new file holds the lines written after',
           [e['path'] for e in lines(path)], ['/after-0', '/after-1'])
    mode = os.stat(path).st_mode & 0o777
    env.eq('the new file mode', oct(mode), oct(0o640))
    fds = os.listdir('/proc/%d/fd' % gw.pid)
    targets = [os.readlink('/proc/%d/fd/%s' % (gw.pid, fd)) for fd in fds]
    env.check('no descriptor left on the renamed file',
              not any(t.endswith('access.log.1') for t in targets), targets)


@T.case
def sigusr1_with_stderr_log_is_harmless(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address, log={'access': 'stderr'}))
    gw.signal(signal.SIGUSR1)
    c = env.client(gw.port)
    env.eq('still serving after SIGUSR1', c.request('GET', '/x', [('Host', 'a')]).status, 200)
    env.check('still running', gw.alive())


def run_failing(env, conf):
    """Runs jsongate on conf expecting it to exit at start; returns (status, stderr)."""
    conf = dict(conf, listeners=[{'listen': '127.0.0.1:%d' % free_port()}])
    path = os.path.join(env.tmp, 'failing.yaml')
    with open(path, 'w') as f:
        f.write(to_yaml(conf) + '\n')
    p = env.run([JSONGATE, '-f', '-c', path], timeout=10)
    return p.returncode, p.stderr.decode()


def proc_status(pid):
    out = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            k, _, v = line.partition(':')
            out[k] = v.split()
    return out


@T.case
def drops_privileges(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    conf = upstream_config(up.address, user='nobody')
    if os.geteuid() != 0:
        # Not root: setgroups must fail, and jsongate must say so and exit, not run as is.
        status, log = run_failing(env, conf)
        env.eq('exit status 1 when privileges cannot be dropped', status, 1)
        env.check('the error names the user', 'cannot drop privileges to nobody' in log,
                  log[-500:])
        return
    nobody = pwd.getpwnam('nobody')
    os.chmod(env.tmp, 0o755)
    gw = env.daemon(conf)
    c = env.client(gw.port)
    env.eq('serves after dropping privileges', c.request('GET', '/x', [('Host', 'a')]).status, 200)
    st = proc_status(gw.pid)
    env.eq('uid real, effective, saved, fs', st['Uid'], [str(nobody.pw_uid)] * 4)
    env.eq('gid real, effective, saved, fs', st['Gid'], [str(nobody.pw_gid)] * 4)
    env.eq('supplementary groups: only the user\'s group', st['Groups'], [str(nobody.pw_gid)])
    env.eq('no capabilities left', st['CapEff'], ['0000000000000000'])
    env.check('the group is the user\'s', grp.getgrgid(nobody.pw_gid) is not None)


@T.case
def unknown_user_fails(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    status, log = run_failing(env, upstream_config(up.address, user='no-such-user-jsongate'))
    env.eq('exit status 1', status, 1)
    env.check('the error names the user', 'no-such-user-jsongate not found' in log, log[-500:])


def linked_versions():
    """What the libraries the daemon is linked with report at run time, asked through their
    own version calls: the exact lines -V must print."""
    import ctypes
    libs = {}
    out = subprocess.run(['ldd', JSONGATE], stdout=subprocess.PIPE, check=True).stdout.decode()
    for m in re.finditer(r'^\s*(lib\S+)\.so\S* => (\S+)', out, re.M):
        libs[m.group(1)] = m.group(2)

    def call(lib, fn, *args):
        f = getattr(ctypes.CDLL(libs[lib]), fn)
        f.restype = ctypes.c_char_p
        return f(*args).decode()

    with open(os.path.join(TESTS_SRCDIR, '..', 'configure.ac')) as f:
        version = re.search(r'AC_INIT\(\[jsongate\], \[([^]]+)\]', f.read()).group(1)
    event = next(name for name in libs if name.startswith('libevent-'))
    return ['jsongate ' + version,
            'libevent ' + call(event, 'event_get_version'),
            call('libcrypto', 'OpenSSL_version', ctypes.c_int(0)),
            'libyaml ' + call('libyaml-0', 'yaml_get_version_string'),
            'zlib ' + call('libz', 'zlibVersion'),
            # jsmn is a header compiled in: no version of its own.
            'jsmn header-only']


@T.case
def version_lists_libraries(env):
    p = env.run([JSONGATE, '-V'])
    env.eq('-V exit status', p.returncode, 0)
    env.eq('-V: the version, then each linked library as it reports itself',
           p.stdout.decode().splitlines(), linked_versions())
    env.eq('-V: nothing on stderr', p.stderr, b'')


def own(text):
    """text without the lines a JSONGATE_WRAPPER such as valgrind adds (==PID== ...)."""
    return ''.join(l for l in text.splitlines(True) if not re.match(r'==\d+==', l))


SYSLOG = re.compile(r'<(\d+)>[A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d jsongate\[(\d+)\]: (.*)\Z', re.S)


class SyslogSocket:
    """A datagram socket standing in for /dev/log; lines() gives (PRI, PID, text) tuples."""

    def __init__(self, env):
        # A short directory of its own: socket paths are limited to 107 bytes.
        self.dir = tempfile.mkdtemp(prefix='jg-log-')
        self.path = os.path.join(self.dir, 'log.sock')
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.setblocking(False)
        self.got = []

    def lines(self):
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return self.got
            m = SYSLOG.match(data.decode('utf-8', 'replace'))
            self.got.append((int(m.group(1)), int(m.group(2)), m.group(3)) if m else data)

    def wait(self, pattern, timeout=5):
        rx = re.compile(pattern)
        return wait_until(lambda: [l for l in self.lines() if not isinstance(l, bytes)
                                   and rx.search(l[2])], timeout * SLOW)

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@T.case
def error_log_to_a_file(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    elsewhere = os.path.join(env.tmp, 'elsewhere')
    os.mkdir(elsewhere)
    path = os.path.join(env.tmp, 'error.log')
    gw = env.daemon(upstream_config(up.address, log={'level': 'info', 'error': 'error.log',
                                                     'access': 'off'}), cwd=elsewhere)
    read = lambda p: open(p).read() if os.path.exists(p) else ''
    env.check('the file beside the configuration has the ready line',
              wait_until(lambda: 'ready with 1 worker' in read(path), 5 * SLOW), read(path))
    env.eq('nothing on stderr: no error and no warning while starting', own(gw.log()), '')
    os.rename(path, path + '.1')
    gw.signal(signal.SIGUSR1)
    env.check('reopened: the new file says so', wait_until(
        lambda: 'error log %s reopened' % path in read(path), 5 * SLOW), read(path))
    env.check('the renamed file kept the lines before', 'ready with 1 worker' in read(path + '.1'),
              read(path + '.1'))
    env.eq('nothing in the working directory', os.listdir(elsewhere), [])


@T.case
def pid_file_in_the_foreground(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    path = os.path.join(env.tmp, 'run', 'jsongate.pid')
    os.mkdir(os.path.dirname(path))
    gw = env.daemon(upstream_config(up.address, pid_file=path))
    env.check('written once listening', wait_until(lambda: os.path.exists(path), 5 * SLOW))
    with open(path) as f:
        env.eq('the pid', f.read(), '%d\n' % gw.pid)
    env.eq('stopped', gw.stop(), 0)
    env.check('removed at exit', not os.path.exists(path))


@T.case
def pid_file_of_a_user(env):
    """With user:, the pid file is written and removed as that user, in a directory it may
    write (root keeps nothing to remove it with); one it may not write refuses the start and
    -t says so, rather than a file left behind at exit."""
    if os.geteuid() != 0:
        env.check('not root: nothing to drop to here (drops_privileges covers it)', True)
        return
    up = env.scripted(default=answer(http_response(200, b'{}')))
    nobody = pwd.getpwnam('nobody')
    os.chmod(env.tmp, 0o755)
    run = os.path.join(env.tmp, 'run')
    os.mkdir(run)
    os.chown(run, nobody.pw_uid, nobody.pw_gid)
    path = os.path.join(run, 'jsongate.pid')
    gw = env.daemon(upstream_config(up.address, user='nobody', pid_file=path))
    env.check('written once listening', wait_until(lambda: os.path.exists(path), 5 * SLOW))
    st = os.stat(path)
    env.eq('written by the user, after dropping root', (st.st_uid, st.st_gid),
           (nobody.pw_uid, nobody.pw_gid))
    with open(path) as f:
        env.eq('the pid', f.read(), '%d\n' % gw.pid)
    env.eq('stopped', gw.stop(), 0)
    env.check('removed at exit', not os.path.exists(path), os.listdir(run))
    env.check('no warning about it', 'pid file' not in gw.log(), gw.log()[-1000:])

    # A directory of root's: -t names it, and the start fails before binding.
    root_run = os.path.join(env.tmp, 'root-run')
    os.mkdir(root_run, 0o755)
    conf = upstream_config(up.address, user='nobody', pid_file=os.path.join(root_run, 'j.pid'),
                           listeners=[{'listen': '127.0.0.1:%d' % free_port()}])
    conf_path = os.path.join(env.tmp, 'root-run.yaml')
    with open(conf_path, 'w') as f:
        f.write(to_yaml(conf) + '\n')
    p = env.run([JSONGATE, '-t', '-c', conf_path], timeout=10)
    line = next((l for l in p.stderr.decode().splitlines() if 'pid_file' in l), '')
    env.eq('-t: exit status 1', p.returncode, 1)
    env.check('-t: the user cannot create files there, at the key',
              re.match(r'%s:\d+:\d+: pid_file: user nobody cannot create files in %s: '
                       r'Permission denied\Z' % (re.escape(conf_path), re.escape(root_run)), line),
              p.stderr.decode())
    status, log = run_failing(env, conf)
    env.eq('the start fails', status, 1)
    env.check('with the same error', 'pid_file: user nobody cannot create files in %s' % root_run
              in log, log[-500:])
    env.eq('nothing left in the directory', os.listdir(root_run), [])


@T.case
def error_log_to_syslog(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    log = SyslogSocket(env)
    try:
        gw = env.daemon(upstream_config(up.address, log={'level': 'info', 'access': 'off',
                                                         'error': 'syslog:' + log.path}))
        ready = log.wait('ready with 1 worker')
        env.eq('the ready line: facility daemon, severity info (30), our pid',
               [(l[0], l[1], l[2]) for l in ready], [(30, gw.pid, 'jsongate 0.1.0 ready with 1 worker')])
        env.eq('every datagram is "<PRI>Mmm dd hh:mm:ss jsongate[PID]: text"',
               [l for l in log.lines() if isinstance(l, bytes)], [])
        gw.write_config('workers: [\n')
        gw.signal(signal.SIGHUP)
        failed = log.wait('reload failed')
        env.eq('an error: severity err (27)', [l[0] for l in failed], [27])
        env.eq('nothing on stderr', own(gw.log()), '')
    finally:
        log.close()


@T.case
def start_error_on_stderr_too(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    conf = upstream_config(up.address, log={'error': 'error.log'}, pid_file='jsongate.pid',
                           listeners=[{'listen': '127.0.0.1:%d' % port}])
    path = os.path.join(env.tmp, 'taken.yaml')
    with open(path, 'w') as f:
        f.write(to_yaml(conf) + '\n')
    p = env.run([JSONGATE, '-f', '-c', path], timeout=10)
    taken.close()
    want = 'cannot listen on 127.0.0.1:%d: Address already in use' % port
    env.eq('exit status 1', p.returncode, 1)
    env.check('the reason on stderr, for whoever started it', want in p.stderr.decode(), p.stderr)
    with open(os.path.join(env.tmp, 'error.log')) as f:
        logged = f.read()
    env.check('and in the error log', want in logged, logged)
    env.check('no pid file for a daemon that never listened',
              not os.path.exists(os.path.join(env.tmp, 'jsongate.pid')))


def start_background(env, conf, name='bg'):
    """Runs jsongate without -f; returns (launcher exit status, its stdout + stderr)."""
    path = os.path.join(env.tmp, name + '.yaml')
    with open(path, 'w') as f:
        f.write(to_yaml(conf) + '\n')
    out = os.path.join(env.tmp, name + '.out')
    with open(out, 'wb') as f:
        status = subprocess.run(WRAPPER + [JSONGATE, '-c', path], stdin=subprocess.DEVNULL,
                                stdout=f, stderr=subprocess.STDOUT, timeout=30 * SLOW).returncode
    with open(out) as f:
        return status, own(f.read())


def running(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def stop_background(env, pid):
    if pid and running(pid):
        os.kill(pid, signal.SIGTERM)
        if not wait_until(lambda: not running(pid), 10 * SLOW):
            os.kill(pid, signal.SIGKILL)
            return False
    return True


def pids_with(path):
    """Processes whose command line names path."""
    out = []
    for d in os.listdir('/proc'):
        try:
            with open('/proc/%s/cmdline' % d, 'rb') as f:
                if path.encode() in f.read().split(b'\0') and running(int(d)):
                    out.append(int(d))
        except (OSError, ValueError):
            pass
    return out


@T.case
def background_logs_to_syslog(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    log = SyslogSocket(env)
    pid = None
    try:
        port = free_port()
        conf = upstream_config(up.address, log={'access': 'access.log', 'error': 'syslog:' + log.path},
                               pid_file='jsongate.pid', listeners=[{'listen': '127.0.0.1:%d' % port}])
        pid_path = os.path.join(env.tmp, 'jsongate.pid')
        status, out = start_background(env, conf)
        env.eq('the command returns 0 at once, having printed nothing', (status, out), (0, ''))
        ready = log.wait('ready with 1 worker')
        env.require('ready, in syslog', ready, log.lines())
        pid = ready[0][1]
        env.check('the daemon runs on', running(pid))
        with open(pid_path) as f:
            env.eq('pid_file, beside the configuration, holds its pid', f.read(), '%d\n' % pid)
        fds = {n: os.readlink('/proc/%d/fd/%d' % (pid, n)) for n in (0, 1, 2)}
        env.eq('stdin, stdout and stderr on /dev/null', fds, {0: '/dev/null', 1: '/dev/null', 2: '/dev/null'})
        r = Client(port).request('GET', '/x', [('Host', 'a')])
        env.eq('it serves', r.status if r else None, 200)
        env.check('the access log beside the configuration',
                  wait_until(lambda: os.path.exists(os.path.join(env.tmp, 'access.log')) and
                             os.path.getsize(os.path.join(env.tmp, 'access.log')) > 0, 5 * SLOW))
        env.check('SIGTERM stops it', stop_background(env, pid))
        env.check('"stopped" in syslog', log.wait('^stopped$'), log.lines())
        env.check('the pid file is gone', not os.path.exists(pid_path))
    finally:
        stop_background(env, pid)
        log.close()


def syslog_down(path):
    """None when a syslog socket at path takes datagrams, else why not (an OSError)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(path)
        return None
    except OSError as e:
        return e
    finally:
        s.close()


def text_lines(path):
    """The error log lines of a file, without their time stamps."""
    with open(path) as f:
        return [l.split(' ', 1)[1] for l in own(f.read()).splitlines() if not l.startswith('{')]


def json_lines(path):
    """The access log lines (JSON) of a file that has error log lines too."""
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith('{')]


@T.case
def background_default_leaves_the_terminal(env):
    """No -f and no log.error: errors go to syslog (/dev/log), never to the terminal that
    started jsongate, which only hears the warnings of the start; where nothing listens on
    /dev/log (a container), they go to the stderr it was started with, after a line saying so
    (without_syslog_errors_go_to_stderr)."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    port = free_port()
    conf = upstream_config(up.address, log={'access': 'stderr'},
                           listeners=[{'listen': '127.0.0.1:%d' % port}])
    out_path = os.path.join(env.tmp, 'default.out')
    down = syslog_down('/dev/log')
    pids = []
    try:
        status, out = start_background(env, conf, 'default')
        env.eq('exit status 0', status, 0)
        pids = wait_until(lambda: pids_with(os.path.join(env.tmp, 'default.yaml')), 5 * SLOW)
        env.eq('one daemon runs on', len(pids or []), 1)
        r = Client(port).request('GET', '/x', [('Host', 'a')])
        env.eq('it serves', r.status if r else None, 200)
        access = ('[warn] log.access: stderr is /dev/null once in the background: '
                  'name a file, or use -f')
        if down is None:
            env.eq('the terminal hears only the warning about the access log on stderr',
                   text_lines(out_path), [access])
            for pid in pids or []:
                env.eq('its stderr is /dev/null', os.readlink('/proc/%d/fd/2' % pid),
                       '/dev/null')
        else:
            env.eq('no /dev/log: the error log is the stderr it was started with, said once',
                   text_lines(out_path),
                   ['[warn] syslog at /dev/log cannot be reached (%s): error lines go to stderr'
                    % os.strerror(down.errno),
                    '[info] listening on 127.0.0.1:%d' % port,
                    '[info] jsongate 0.1.0 ready with 1 worker'])
            env.check('stderr is not /dev/null: no warning about the access log on stderr',
                      access not in text_lines(out_path))
            env.check('whose lines it gets too', wait_until(
                lambda: [l['path'] for l in json_lines(out_path)] == ['/x'], 5 * SLOW))
            for pid in pids or []:
                env.eq('its stderr is kept', os.readlink('/proc/%d/fd/2' % pid), out_path)
    finally:
        for pid in pids or []:
            env.check('SIGTERM stops it', stop_background(env, pid))


@T.case
def without_syslog_errors_go_to_stderr(env):
    """No -f, and nothing listens on the syslog socket log.error names (bound, then closed: what
    a syslog daemon that died leaves behind): one line says that error lines go to stderr, the
    daemon keeps the stderr it was started with (stdin and stdout on /dev/null), and a later
    error reaches it."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    sock_dir = tempfile.mkdtemp(prefix='jg-log-')
    sock_path = os.path.join(sock_dir, 'log.sock')
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.close()
    pid = None
    try:
        port = free_port()
        conf = upstream_config(up.address, log={'access': 'off', 'error': 'syslog:' + sock_path},
                               pid_file='jsongate.pid', listeners=[{'listen': '127.0.0.1:%d' % port}])
        out_path = os.path.join(env.tmp, 'nosyslog.out')
        pid_path = os.path.join(env.tmp, 'jsongate.pid')
        status, _ = start_background(env, conf, 'nosyslog')
        env.eq('the command returns 0', status, 0)
        env.require('the daemon writes its pid', wait_until(
            lambda: os.path.exists(pid_path) and os.path.getsize(pid_path) > 0, 5 * SLOW))
        with open(pid_path) as f:
            pid = int(f.read())
        env.check('ready, on its stderr', wait_until(
            lambda: any(' ready ' in l for l in text_lines(out_path)), 5 * SLOW),
            text_lines(out_path))
        env.eq('the line saying so first, then the error log\'s lines', text_lines(out_path),
               ['[warn] syslog at %s cannot be reached (Connection refused): error lines go to '
                'stderr' % sock_path,
                '[info] listening on 127.0.0.1:%d' % port,
                '[info] jsongate 0.1.0 ready with 1 worker'])
        fds = {n: os.readlink('/proc/%d/fd/%d' % (pid, n)) for n in (0, 1, 2)}
        env.eq('stdin and stdout on /dev/null, stderr kept', fds,
               {0: '/dev/null', 1: '/dev/null', 2: out_path})
        with open(os.path.join(env.tmp, 'nosyslog.yaml'), 'w') as f:
            f.write('workers: [\n')
        os.kill(pid, signal.SIGHUP)
        env.check('a later error reaches stderr', wait_until(
            lambda: '[error] reload failed: keeping the running configuration'
            in text_lines(out_path), 5 * SLOW), text_lines(out_path))
        env.eq('said once', sum('cannot be reached' in l for l in text_lines(out_path)), 1)
        r = Client(port).request('GET', '/x', [('Host', 'a')])
        env.eq('it serves on', r.status if r else None, 200)
    finally:
        env.check('SIGTERM stops it', stop_background(env, pid))
        shutil.rmtree(sock_dir, ignore_errors=True)


T.run()
