"""Files and privileges: SIGUSR1 reopens the access log after logrotate renamed
it; `user:` drops root to that user and its group (uid, gid and supplementary
groups checked in /proc), or fails loudly when not started as root; -V names
the versions of libevent, OpenSSL and libyaml."""

import grp
import os
import pwd
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

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


@T.case
def version_lists_libraries(env):
    p = env.run([JSONGATE, '-V'])
    out = p.stdout.decode()
    env.eq('-V exit status', p.returncode, 0)
    env.check('jsongate version first', re.match(r'jsongate \d+\.\d+\.\d+\n', out), out)
    env.check('libevent version', re.search(r'^libevent \d+\.\d+\.\d+', out, re.M), out)
    env.check('OpenSSL version', re.search(r'^OpenSSL \d+\.\d+\.\d+', out, re.M), out)
    env.check('libyaml version', re.search(r'^libyaml \d+\.\d+\.\d+', out, re.M), out)


T.run()
