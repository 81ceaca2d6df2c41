#!/usr/bin/env python3
"""Write deterministic JSON-RPC calls and answers for the load benchmark's rpc rows.

    rpc.py DIR SIZE...      SIZE is a byte count with an optional k or m suffix

For each SIZE:
  - DIR/rpc-call-SIZE.json: one eth_call of SIZE bytes (a body the rpc rows POST), and
    DIR/rpc-SIZE.json, its answer, SIZE bytes too (what the upstream serves at /rpc-SIZE.json);
  - DIR/rpcb-call-SIZE.json: a batch of BATCH calls of SIZE bytes each, their methods in turn
    eth_call, eth_getBalance and eth_getLogs (the three upstreams of jsongate-rpc.yaml.in);
    DIR/rpcb-SIZE.json, DIR/u2/rpcb-SIZE.json and DIR/u3/rpcb-SIZE.json, the answers of the
    three upstreams to their calls (each answer SIZE bytes, in the order asked); and
    DIR/rpcb-SIZE.expected, the whole batch's answer in the order of the calls, as a gateway
    that splices the answers sends it.
The same SIZE always gives the same bytes.
"""

import json
import os
import sys

from envelopes import parse_size

BATCH = 100
METHODS = ("eth_call", "eth_getBalance", "eth_getLogs")     # upstreams 1, 2 and 3


def padded(prefix, suffix, size):
    """prefix + "0x" + hex digits + suffix, exactly size bytes (at least the bare parts)."""
    room = max(0, size - len(prefix) - len(suffix) - 4)
    digits = ("%x" % (0x5eed1e55 * (size + 7)) * (room // 8 + 2))[:room]
    return prefix + b'"0x' + digits.encode() + b'"' + suffix


def call(method, id, size):
    return padded(b'{"jsonrpc":"2.0","method":"' + method.encode() +
                  b'","params":[{"to":"0xd8da6bf26964af9d7eed9e03e53415d37aa96045","data":',
                  b'},"latest"],"id":' + str(id).encode() + b'}', size)


def answer(id, size):
    return padded(b'{"jsonrpc":"2.0","id":' + str(id).encode() + b',"result":', b'}', size)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    top = argv[1]
    for sub in ("u2", "u3"):
        os.makedirs(os.path.join(top, sub), exist_ok=True)
    for text in argv[2:]:
        size = parse_size(text)
        write(os.path.join(top, "rpc-call-%s.json" % text), call("eth_call", 1, size))
        write(os.path.join(top, "rpc-%s.json" % text), answer(1, size))
        calls = [(METHODS[i % 3], i + 1) for i in range(BATCH)]
        write(os.path.join(top, "rpcb-call-%s.json" % text),
              b"[" + b",".join(call(m, i, size) for m, i in calls) + b"]")
        for k, sub in enumerate(("", "u2", "u3")):
            mine = [answer(i, size) for m, i in calls if m == METHODS[k]]
            write(os.path.join(top, sub, "rpcb-%s.json" % text), b"[" + b",".join(mine) + b"]")
        write(os.path.join(top, "rpcb-%s.expected" % text),
              b"[" + b",".join(answer(i, size) for _, i in calls) + b"]")
        json.loads(open(os.path.join(top, "rpcb-%s.expected" % text), "rb").read())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
