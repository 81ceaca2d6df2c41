#!/usr/bin/env python3
"""Small HTTP/1.1 client for the load benchmark (standard library only).

    client.py verify PORT PATH FILE [OPS [MATCH]]
        GET http://127.0.0.1:PORT/PATH once; exit 0 when the status is 200 and the body is what
        the proxy must make of the envelope in FILE, else print what differs and exit 1.
        OPS is what the proxy does to the body: pass (the default: the body is FILE), unwrap
        (`unwrap: data`: the body is the value of "data") or reshape (`drop: [debug]`,
        `rename: {msg: message}`, `set: {gateway: bench}`) or aggregate (three backends asked
        for FILE, merged keyed: {"a":FILE,"b":FILE,"c":FILE}). MATCH is bytes (the default: the
        body equals the expected bytes, as a proxy that splices spans of the input must give)
        or json (the body parses to the same JSON value, for proxies that decode and re-encode;
        key order does not count, and an empty array may come back as an empty object, which
        is all lua-cjson 2.1 can encode an empty table as).

    client.py post PORT PATH BODY EXPECTED [MATCH]
        POST the bytes of the file BODY to http://127.0.0.1:PORT/PATH once (the rpc rows'
        JSON-RPC calls); exit 0 when the status is 200 and the body is the file EXPECTED, byte
        for byte (MATCH bytes, the default) or as a JSON value (json), else say what differs.

    client.py idle PORT PATH COUNT [HOLD_SECONDS]
        Open COUNT keep-alive connections to 127.0.0.1:PORT, send one GET PATH on each and read
        the whole response, then leave every connection open and idle. Prints "ready N" on
        stdout once all are idle, then holds them until SIGTERM or until HOLD_SECONDS (default
        120) pass. Exits 1 if a connection fails or the proxy closes one early.
"""

import json
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


WS = b" \t\r\n"


def skip_ws(doc, i):
    while i < len(doc) and doc[i] in WS:
        i += 1
    return i


def end_of_string(doc, i):
    """doc[i] is the opening quote; return the index after the closing one."""
    i += 1
    while doc[i] != 0x22:
        i += 2 if doc[i] == 0x5C else 1
    return i + 1


def end_of_value(doc, i):
    """Return the index after the JSON value that starts at doc[i]."""
    if doc[i] == 0x22:
        return end_of_string(doc, i)
    if doc[i] in b"{[":
        depth = 0
        while True:
            c = doc[i]
            if c == 0x22:
                i = end_of_string(doc, i)
                continue
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(doc) and doc[i] not in b",}] \t\r\n":
        i += 1
    return i


def members(doc):
    """The members of the top-level object in doc: a list of (raw key, raw value) byte
    strings, exactly as they appear in doc."""
    i = skip_ws(doc, 0)
    if doc[i:i + 1] != b"{":
        raise ValueError("not an object")
    out = []
    i = skip_ws(doc, i + 1)
    if doc[i:i + 1] == b"}":
        return out
    while True:
        k = end_of_string(doc, i)
        key = doc[i:k]
        i = skip_ws(doc, k)
        if doc[i:i + 1] != b":":
            raise ValueError("no colon after key at %d" % i)
        i = skip_ws(doc, i + 1)
        v = end_of_value(doc, i)
        out.append((key, doc[i:v]))
        i = skip_ws(doc, v)
        if doc[i:i + 1] == b"}":
            return out
        if doc[i:i + 1] != b",":
            raise ValueError("no comma after value at %d" % i)
        i = skip_ws(doc, i + 1)


def expected_bytes(doc, ops):
    """What a splicing proxy sends for the envelope doc: spans of doc, compact."""
    if ops == "pass":
        return doc
    if ops == "aggregate":
        value = doc.strip(WS)
        return b'{"a":' + value + b',"b":' + value + b',"c":' + value + b'}'
    mem = [(json.loads(k), k, v) for k, v in members(doc)]
    if ops == "unwrap":
        found = [v for name, _, v in mem if name == "data"]
        if not found:
            raise ValueError("no data member")
        return found[-1]
    if ops == "reshape":
        parts = [(b'"message"' if name == "msg" else k) + b":" + v
                 for name, k, v in mem if name != "debug"]
        parts.append(b'"gateway":"bench"')
        return b"{" + b",".join(parts) + b"}"
    raise ValueError("unknown ops %r" % ops)


def expected_value(value, ops):
    """The same transformation on the decoded JSON value."""
    if ops == "pass":
        return value
    if ops == "aggregate":
        return {"a": value, "b": value, "c": value}
    if ops == "unwrap":
        return value["data"]
    if ops == "reshape":
        out = {}
        for name, member in value.items():
            if name != "debug":
                out["message" if name == "msg" else name] = member
        out["gateway"] = "bench"
        return out
    raise ValueError("unknown ops %r" % ops)


def empty_as_object(value):
    """value with every empty array turned into an empty object."""
    if isinstance(value, list):
        return [empty_as_object(v) for v in value] if value else {}
    if isinstance(value, dict):
        return {k: empty_as_object(v) for k, v in value.items()}
    return value


def verify(port, path, filename, ops="pass", match="bytes"):
    with open(filename, "rb") as f:
        doc = f.read()
    want = expected_bytes(doc, ops)
    # The sliced bytes must mean what the transformation means: checks the slicing itself.
    want_value = expected_value(json.loads(doc), ops)
    assert json.loads(want) == want_value, "expected bytes do not match the expected value"
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
    if match == "json":
        try:
            got = json.loads(body)
        except ValueError as exc:
            print("GET %s: body is not JSON (%s): %r" % (path, exc, body[:200]))
            return 1
        if empty_as_object(got) != empty_as_object(want_value):
            print("GET %s: body (%d bytes) is not the JSON value %s of %s"
                  % (path, len(body), ops, filename))
            return 1
        return 0
    if body != want:
        at = next((i for i, (a, b) in enumerate(zip(body, want)) if a != b),
                  min(len(body), len(want)))
        lo = max(0, at - 20)
        print("GET %s: body differs from %s of %s (%d bytes, expected %d; first difference at "
              "byte %d: %r, expected %r)" % (path, ops, filename, len(body), len(want), at,
                                             body[lo:at + 20], want[lo:at + 20]))
        return 1
    return 0


def post(port, path, body_file, expected_file, match="bytes"):
    with open(body_file, "rb") as f:
        payload = f.read()
    with open(expected_file, "rb") as f:
        want = f.read()
    req = ("POST %s HTTP/1.1\r\nHost: bench.local\r\nUser-Agent: jsongate-bench\r\n"
           "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
           % (path, len(payload))).encode("ascii") + payload
    try:
        with connect(port) as sock:
            sock.sendall(req)
            status, body = read_response(sock)
    except (OSError, ValueError) as exc:
        print("POST %s: %s" % (path, exc))
        return 1
    if status != 200:
        print("POST %s: status %d, body %r" % (path, status, body[:200]))
        return 1
    try:
        same = json.loads(body) == json.loads(want) if match == "json" else body == want
    except ValueError as exc:
        print("POST %s: body is not JSON (%s): %r" % (path, exc, body[:200]))
        return 1
    if not same:
        print("POST %s: body (%d bytes) is not %s (%d bytes, compared as %s): %r"
              % (path, len(body), expected_file, len(want), match, body[:200]))
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
    if len(argv) in (5, 6, 7) and argv[1] == "verify":
        return verify(int(argv[2]), argv[3], argv[4], *argv[5:])
    if len(argv) in (6, 7) and argv[1] == "post":
        return post(int(argv[2]), argv[3], argv[4], argv[5], *argv[6:])
    if len(argv) in (5, 6) and argv[1] == "idle":
        hold = float(argv[5]) if len(argv) == 6 else 120.0
        return idle(int(argv[2]), argv[3], int(argv[4]), hold)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
