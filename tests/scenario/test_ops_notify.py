"""systemd notifications: with NOTIFY_SOCKET set, jsongate sends READY=1 once
listening, RELOADING=1 then READY=1 around a reload (a rejected one too), and
STOPPING=1 on SIGTERM, in that order; path and abstract ('@') sockets."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)


def fields(datagram):
    """'A=1\\nB=2' -> {'A': '1', 'B': '2'}."""
    out = {}
    for line in datagram.decode().split('\n'):
        if '=' in line:
            k, v = line.split('=', 1)
            out[k] = v
    return out


class Listener:
    def __init__(self, env, abstract):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = 'jsongate-test-%d-%d' % (os.getpid(), free_port())
            self.sock.bind('\0' + name)
            self.address = '@' + name
        else:
            self.address = os.path.join(env.tmp, 'notify.sock')
            self.sock.bind(self.address)
        self.sock.settimeout(IO_TIMEOUT)

    def next(self):
        try:
            return fields(self.sock.recv(4096))
        except socket.timeout:
            return {}


def run_sequence(env, abstract):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    ln = Listener(env, abstract)
    os.environ['NOTIFY_SOCKET'] = ln.address
    try:
        gw = env.daemon(upstream_config(up.address))
    finally:
        del os.environ['NOTIFY_SOCKET']
    first = ln.next()
    env.eq('first message: READY=1', first.get('READY'), '1')
    env.eq('the gateway answers once READY=1 came', env.client(gw.port).request(
        'GET', '/', [('Host', 'a')]).status, 200)

    gw.signal(signal.SIGHUP)
    m = ln.next()
    env.eq('SIGHUP: RELOADING=1', m.get('RELOADING'), '1')
    env.check('RELOADING=1 carries MONOTONIC_USEC', m.get('MONOTONIC_USEC', '').isdigit(), m)
    env.eq('then READY=1', ln.next().get('READY'), '1')

    gw.write_config('workers: [\n')
    gw.signal(signal.SIGHUP)
    env.eq('a rejected reload: RELOADING=1', ln.next().get('RELOADING'), '1')
    m = ln.next()
    env.eq('then READY=1 again (the old configuration serves)', m.get('READY'), '1')
    env.check('with a STATUS saying so', 'failed' in m.get('STATUS', ''), m)

    gw.signal(signal.SIGTERM)
    gw.signalled = True
    env.eq('SIGTERM: STOPPING=1', ln.next().get('STOPPING'), '1')
    env.eq('exit status 0', gw.proc.wait(10 * SLOW), 0)
    ln.sock.close()


@T.case
def notify_path_socket(env):
    run_sequence(env, abstract=False)


@T.case
def notify_abstract_socket(env):
    run_sequence(env, abstract=True)


@T.case
def no_notify_socket(env):
    os.environ.pop('NOTIFY_SOCKET', None)
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = env.daemon(upstream_config(up.address))
    env.eq('without NOTIFY_SOCKET it serves', env.client(gw.port).request(
        'GET', '/', [('Host', 'a')]).status, 200)


T.run()
