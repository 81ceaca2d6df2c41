"""WebSocket load for bench/websocket.sh (Python 3 standard library only).

  ws_load.py server PORT             an echo upstream: answers the handshake with 101, then
                                     sends back every byte it gets (the client's frames as
                                     they came: the proxies in between pass bytes, not frames)
  ws_load.py load PORT CONNS SIZE SECONDS
                                     CONNS connections, each sending one masked binary frame
                                     of SIZE bytes and reading its echo, over and over, for
                                     SECONDS; prints the messages echoed
  ws_load.py idle PORT N             opens N tunnels, prints "ready", holds them until
                                     stopped (SIGTERM)
"""

import asyncio
import base64
import hashlib
import os
import struct
import sys
import time

GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC11B65'
KEY = base64.b64encode(b'jsongate-bench-k')


def handshake_request(port):
    return (b'GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n'
            b'Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n'
            % (port, KEY))


def frame(size):
    """A masked binary frame of size bytes (the mask applied, as a client sends it)."""
    mask = b'\x01\x02\x03\x04'
    payload = bytes(i & 0xff for i in range(size))
    masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
    if size < 126:
        head = struct.pack('!BB', 0x82, 0x80 | size)
    elif size < 65536:
        head = struct.pack('!BBH', 0x82, 0x80 | 126, size)
    else:
        head = struct.pack('!BBQ', 0x82, 0x80 | 127, size)
    return head + mask + masked


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.head = b''
        self.open = False

    def data_received(self, data):
        if self.open:
            self.t.write(data)
            return
        self.head += data
        if b'\r\n\r\n' not in self.head:
            return
        head, rest = self.head.split(b'\r\n\r\n', 1)
        key = b''
        for line in head.split(b'\r\n')[1:]:
            name, _, value = line.partition(b':')
            if name.strip().lower() == b'sec-websocket-key':
                key = value.strip()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self.t.write(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n'
                     b'Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n' % accept)
        self.open = True
        if rest:
            self.t.write(rest)


async def server(port):
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(Echo, '127.0.0.1', port, backlog=4096)
    async with srv:
        await srv.serve_forever()


async def open_tunnel(port):
    reader, writer = await asyncio.open_connection('127.0.0.1', port, limit=1 << 22)
    writer.write(handshake_request(port))
    head = await reader.readuntil(b'\r\n\r\n')
    if not head.startswith(b'HTTP/1.1 101 '):
        raise SystemExit('no 101: %r' % head[:200])
    return reader, writer


async def load(port, conns, size, seconds):
    msg = frame(size)
    tunnels = [await open_tunnel(port) for _ in range(conns)]
    count = 0
    end = time.monotonic() + seconds

    async def run(reader, writer):
        nonlocal count
        while time.monotonic() < end:
            writer.write(msg)
            got = await reader.readexactly(len(msg))
            if got != msg:
                raise SystemExit('echo differs')
            count += 1
    await asyncio.gather(*(run(r, w) for r, w in tunnels))
    for _, w in tunnels:
        w.close()
    print(count)


async def idle(port, n):
    tunnels = []
    for _ in range(n):
        tunnels.append(await open_tunnel(port))
    print('ready', flush=True)
    await asyncio.Event().wait()


def main():
    mode = sys.argv[1]
    if mode == 'server':
        asyncio.run(server(int(sys.argv[2])))
    elif mode == 'load':
        asyncio.run(load(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                         float(sys.argv[5])))
    elif mode == 'idle':
        asyncio.run(idle(int(sys.argv[2]), int(sys.argv[3])))
    else:
        raise SystemExit(__doc__)


if __name__ == '__main__':
    main()
