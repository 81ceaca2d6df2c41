#!/usr/bin/env python3
"""Write deterministic JSON API envelopes of exact sizes for the load benchmark.

    envelopes.py DIR SIZE...      SIZE is a byte count with an optional k or m suffix

Each file DIR/SIZE.json is one compact object shaped like a typical API answer,
{"code":0,"msg":"ok","data":{...,"items":[...]},"debug":{...}}, with nested objects and arrays,
escaped strings and non-ASCII text, padded to exactly SIZE bytes. The same SIZE always gives
the same bytes.
"""

import json
import sys


def parse_size(text):
    mult = {"k": 1024, "m": 1024 * 1024}.get(text[-1:].lower(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError("bad size: %r" % text)
    return int(digits) * mult


class Lcg:
    """A fixed pseudo-random sequence, so the files never change between runs."""

    def __init__(self, seed):
        self.state = seed

    def next(self, bound):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.state >> 33) % bound


WORDS = ["alpha", "bravo", "café", "delta", "echo", "foxtrot", "größe", "hotel",
         "india", "juliett", "kilo", "lima", "mike", "naïve", "oscar", "papa"]


def item(rng, n):
    return {
        "id": 100000 + n,
        "sku": "SKU-%06d" % rng.next(1000000),
        "name": "%s %s \"%s\"" % (WORDS[rng.next(16)], WORDS[rng.next(16)], WORDS[rng.next(16)]),
        "price": rng.next(100000) / 100,
        "qty": rng.next(50),
        "active": rng.next(2) == 1,
        "tags": [WORDS[rng.next(16)] for _ in range(rng.next(4))],
        "dims": {"w": rng.next(1000) / 10, "h": rng.next(1000) / 10, "unit": "cm"},
        "seller": {"id": rng.next(5000), "path": "/sellers/%d\\n" % rng.next(5000),
                   "rating": [rng.next(5) + 1, rng.next(5) + 1, rng.next(5) + 1]},
        "note": None if rng.next(3) else "back\torder\u2028",
    }


def dump(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True)


def envelope(size):
    rng = Lcg(size)
    data = {"page": 1, "per_page": 0, "total": 0, "next": None, "items": []}
    debug = {
        "trace_id": "%016x%016x" % (rng.next(1 << 31), rng.next(1 << 31)),
        "server": "api-%d.eu-west" % rng.next(16),
        "timings_ms": {"db": 1.25, "cache": 0.07, "render": 0.5},
        "cache": {"hit": False, "keys": ["items:page:1", "user:42:prefs"]},
        "pad": "",
    }
    env = {"code": 0, "msg": "ok", "data": data, "debug": debug}
    base = len(dump(env))
    items = data["items"]
    grown = base
    while True:
        nxt = item(rng, len(items))
        # An item adds its length and a comma; per_page and total may each gain a digit.
        n = len(items)
        cost = len(dump(nxt)) + (1 if n else 0) + 2 * (len(str(n + 1)) - len(str(n)))
        if grown + cost > size:
            break
        items.append(nxt)
        grown += cost
    data["per_page"] = data["total"] = len(items)
    short = size - len(dump(env))
    if short < 0:
        raise ValueError("size %d is below the smallest envelope (%d bytes)" % (size, base))
    debug["pad"] = "".join("abcdefghijklmnopqrstuvwxyz0123456789"[i % 36] for i in range(short))
    out = dump(env).encode("ascii")
    assert len(out) == size, (len(out), size)
    return out


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    for name in argv[2:]:
        with open("%s/%s.json" % (argv[1], name), "wb") as f:
            f.write(envelope(parse_size(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
