"""quickstart.sh run stops and names the port when the demo upstream cannot
listen, instead of starting jsongate in front of nothing; the demo upstream
exits 1 with the reason when its port is taken.

quickstart.sh runs in a copy of its tree where the build is already done and
every package is reported installed (a dpkg-query of the test's on PATH; apt-get
and sudo there fail the test if called), with the real demo upstream.

Prints one line per check and "N passed, M failed"; exit 0 only when nothing
failed."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs'))
from checks import TOP, check, finish  # noqa: E402
DEMO_UPSTREAM = os.environ.get('DEMO_UPSTREAM', 'demo-upstream')
QUICKSTART_PORT = 9000          # the demo upstream's port in quickstart.sh

def hold(port):
    """A socket listening on 127.0.0.1:port, or None when something else holds it already
    (the port is taken either way)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(('127.0.0.1', port))
    except OSError:
        s.close()
        return None
    s.listen(1)
    return s


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, mode)


def demo_upstream_on_a_taken_port(tmp):
    held = hold(0)
    port = held.getsockname()[1]
    portfile = os.path.join(tmp, 'port')
    try:
        p = subprocess.run([DEMO_UPSTREAM, '-l', '127.0.0.1:%d' % port, '-p', portfile],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    except subprocess.TimeoutExpired:
        check('demo-upstream exits when its port is taken', False, 'still running after 10 s')
        return
    finally:
        held.close()
    check('demo-upstream: exit status 1 on a taken port', p.returncode == 1, p.returncode)
    check('demo-upstream: says why', p.stderr == b'demo-upstream: listen: Address already in use\n',
          p.stderr)
    check('demo-upstream: no port file', not os.path.exists(portfile), os.listdir(tmp))


def quickstart_names_the_taken_port(tmp):
    tree = os.path.join(tmp, 'tree')
    os.makedirs(tree)
    shutil.copy(os.path.join(TOP, 'quickstart.sh'), tree)
    # Configured and built already: nothing to generate, make has nothing to do.
    write(os.path.join(tree, 'configure'), '#!/bin/sh\nexit 0\n', 0o755)
    write(os.path.join(tree, 'build', 'Makefile'), 'all:\n\t@:\n')
    os.makedirs(os.path.join(tree, 'build', 'tests', 'upstream'))
    os.symlink(os.path.abspath(DEMO_UPSTREAM),
               os.path.join(tree, 'build', 'tests', 'upstream', 'demo-upstream'))
    bin_dir = os.path.join(tmp, 'bin')
    write(os.path.join(bin_dir, 'dpkg-query'), '#!/bin/sh\nprintf "install ok installed"\n', 0o755)
    marker = os.path.join(tmp, 'installer-called')
    for name in ('apt-get', 'sudo'):
        write(os.path.join(bin_dir, name), '#!/bin/sh\necho "$0 $*" >> %s\nexit 1\n' % marker,
              0o755)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get('PATH', ''))

    held = hold(QUICKSTART_PORT)
    try:
        p = subprocess.run(['sh', os.path.join(tree, 'quickstart.sh'), 'run'], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
    except subprocess.TimeoutExpired:
        check('quickstart.sh run stops when port %d is taken' % QUICKSTART_PORT, False,
              'still running after 60 s')
        return
    finally:
        if held is not None:
            held.close()
    err = p.stderr.decode()
    check('nothing installed: every package is there', not os.path.exists(marker),
          open(marker).read() if os.path.exists(marker) else '')
    check('quickstart.sh run: exit status 1', p.returncode == 1, '%d\n%s' % (p.returncode, err))
    check("the demo upstream's own reason is shown",
          'demo-upstream: listen: Address already in use\n' in err, err)
    check('quickstart names the address and the port to free',
          '\nquickstart: the demo upstream cannot listen on 127.0.0.1:%d (see above).\n'
          'Free port %d (`ss -ltnp \'sport = :%d\'` shows what holds it) and run '
          './quickstart.sh run again.\n' % ((QUICKSTART_PORT,) * 3) in err, err)
    check('jsongate is not started', b'jsongate runs in the foreground' not in p.stdout,
          p.stdout.decode())


def main():
    tmp = tempfile.mkdtemp(prefix='check-quickstart-')
    try:
        demo_upstream_on_a_taken_port(tmp)
        quickstart_names_the_taken_port(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish(need_one=False)


main()
