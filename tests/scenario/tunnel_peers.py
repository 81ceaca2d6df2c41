"""The peers of the tunnel tests (test_tunnel.py over HTTP/1.1, test_h2_websocket.py over
HTTP/2): a real WebSocket echo server, a scripted raw TCP upstream, a certificate for TLS
upstreams, and the daemon's metrics.

    from tunnel_peers import WsServer, RawUpstream, make_pki, with_admin, metrics, metric
"""

import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading

from harness import free_port, metrics_text

try:
    import websockets
except ImportError:     # Debian's python3-websockets under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    import websockets


def make_pki():
    """A self-signed certificate for 127.0.0.1, made with the openssl command: (cert, key)."""
    d = tempfile.mkdtemp(prefix='jsongate-tunnel-pki-')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                    'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'peer.key', '-out',
                    'peer.crt', '-days', '30', '-subj', '/CN=127.0.0.1',
                    '-addext', 'subjectAltName=IP:127.0.0.1'],
                   cwd=d, check=True, capture_output=True, timeout=60)
    return os.path.join(d, 'peer.crt'), os.path.join(d, 'peer.key')


class WsServer:
    """A websockets server in a thread of its own that echoes every message; compression is
    websockets' (permessage-deflate by default, None for clients whose frames are built by
    hand)."""

    def __init__(self, ssl_ctx=None, compression='deflate'):
        self.ssl_ctx = ssl_ctx
        self.compression = compression
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.requests = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError('websocket server did not start')
        self.address = '127.0.0.1:%d' % self.port

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def start():
            async def handler(ws, path=None):
                self.requests.append(ws.request_headers)
                try:
                    async for m in ws:
                        await ws.send(m)
                except websockets.ConnectionClosed:
                    pass        # a client that ends without a close frame
            self.server = await websockets.serve(handler, '127.0.0.1', 0, max_size=None,
                                                 ping_interval=None,
                                                 compression=self.compression,
                                                 ssl=self.ssl_ctx)
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()
        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def stop(self):
        async def close():
            self.server.close()
            await self.server.wait_closed()
        try:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class RawUpstream:
    """A TCP server whose connections each run script(sock, head, rest): head is the request
    head it read (bytes up to and including the blank line), rest what came after it."""

    def __init__(self, script):
        self.script = script
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.address = '127.0.0.1:%d' % self.port
        self.heads = []
        self.conns = []
        self.errors = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b''
        try:
            while b'\r\n\r\n' not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, rest = buf.split(b'\r\n\r\n', 1)
            self.heads.append(head + b'\r\n\r\n')
            self.script(conn, head + b'\r\n\r\n', rest)
        except Exception as e:      # recorded for the case to see
            self.errors.append(repr(e))

    def stop(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def with_admin(conf):
    """conf with an admin listener on a free port: (conf, port)."""
    port = free_port()
    conf['admin'] = {'listen': '127.0.0.1:%d' % port}
    return conf, port


metrics = metrics_text


def metric(text, name, labels=''):
    m = re.search(r'^%s%s (\S+)$' % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def sizes_1b_to_1mb(n):
    """n sizes from 1 B to 1 MB, evenly spread on a log scale."""
    return [max(1, int(round(2 ** (20 * i / (n - 1))))) for i in range(n)]
