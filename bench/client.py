#!/usr/bin/env python3
"""Small HTTP/1.1 client for the load benchmark (standard library only).

    client.py verify PORT PATH FILE
        GET http://127.0.0.1:PORT/PATH once; exit 0 when the status is 200 and the body equals
        FILE byte for byte, else print what differs and exit 1.

    client.py idle PORT PATH COUNT [HOLD_SECONDS]
        Open COUNT keep-alive connections to 127.0.0.1:PORT, send one GET PATH on each and read
        the whole response, then leave every connection open and idle. Prints "ready N" on
        stdout once all are idle, then holds them until SIGTERM or until HOLD_SECONDS (default
        120) pass. Exits 1 if a connection fails or the proxy closes one early.
"""

import select
import signal
import socket
import struct
import sys
import time


def read_response(sock):
    """Read one response with a Content-Length or chunked body; return (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed before the response head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if b"content-length" in headers:
        want = int(headers[b"content-length"])
        while len(rest) < want:
            chunk = sock.recv(max(65536, want - len(rest)))
            if not chunk:
                raise ConnectionError("connection closed in the body")
            rest += chunk
        return status, rest[:want]
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed in a chunk size")
                rest += chunk
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed in a chunk")
                rest += chunk
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                return status, body
    raise ConnectionError("response without Content-Length or chunked body (status %d)" % status)


def request(path):
    return ("GET %s HTTP/1.1\r\nHost: bench.local\r\nUser-Agent: jsongate-bench\r\n"
            "Accept: application/json\r\n\r\n" % path).encode("ascii")


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def verify(port, path, filename):
    with open(filename, "rb") as f:
        want = f.read()
    try:
        with connect(port) as sock:
            sock.sendall(request(path))
            status, body = read_response(sock)
    except (OSError, ValueError) as exc:
        print("GET %s: %s" % (path, exc))
        return 1
    if status != 200:
        print("GET %s: status %d, body %r" % (path, status, body[:200]))
        return 1
    if body != want:
        print("GET %s: body differs from %s (%d bytes, expected %d)"
              % (path, filename, len(body), len(want)))
        return 1
    return 0


def idle(port, path, count, hold):
    socks = []
    req = request(path)
    try:
        for i in range(count):
            sock = connect(port)
            sock.sendall(req)
            status, _ = read_response(sock)
            if status != 200:
                print("connection %d: status %d" % (i, status), file=sys.stderr)
                return 1
            # Close with a reset at exit: 10k sockets in TIME_WAIT would hold local ports
            # for a minute and starve the next run.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            socks.append(sock)
    except (OSError, ValueError) as exc:
        print("connection %d: %s" % (len(socks), exc), file=sys.stderr)
        return 1
    print("ready %d" % len(socks), flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    deadline = time.monotonic() + hold
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    while time.monotonic() < deadline:
        if poller.poll(1000):
            print("the proxy closed an idle connection early", file=sys.stderr)
            return 1
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "verify":
        return verify(int(argv[2]), argv[3], argv[4])
    if len(argv) in (5, 6) and argv[1] == "idle":
        hold = float(argv[5]) if len(argv) == 6 else 120.0
        return idle(int(argv[2]), argv[3], int(argv[4]), hold)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
