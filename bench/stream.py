"""Bodies and checks for bench/stream.sh (Python 3 standard library only).

  stream.py sse FILE EVENTS          writes an SSE stream of EVENTS chat-completion chunks of
                                     about 1 KB each (`data: {...}` and a blank line)
  stream.py json FILE MB             writes a JSON envelope of about MB megabytes:
                                     {"code":0,"msg":"ok","debug":"...","data":{"items":[...]}}
                                     and FILE.expect, one line per answer a route may give:
                                     "NAME SIZE SHA256 HEAD" for pass (the file), unwrap (the
                                     bytes of the value of "data") and drop (the file without
                                     its "debug" member); HEAD: the first bytes, hex
  stream.py check-sse EVENTS MODE    reads an answer on stdin: MODE pass, the events as
                                     written (byte for byte); MODE events, each event's JSON
                                     without "system_fingerprint" and with "gateway":"jsongate"
                                     and otherwise the same value (members in any order)
  stream.py check-json EXPECT MODE [json]
                                     reads an answer on stdin and compares its size, SHA-256
                                     and first bytes with MODE's line of EXPECT; "json": the
                                     size and the first byte only (a proxy that decodes and
                                     encodes again writes the members in another order)
The checks print one line ("ok ..." or what differs) and exit 1 when the answer is wrong.
"""

import hashlib
import json
import sys

HEAD = 32
ALPHABET = 'abcdefghijklmnopqrstuvwxyz' * 40


def sse_event(n):
    """Event n: 1,024 bytes with its blank line (n below 10,000,000)."""
    head = ('{"id":%d,"object":"chat.completion.chunk","created":1700000000,'
            '"model":"gpt-x","system_fingerprint":"fp_x","choices":[{"index":0,'
            '"delta":{"content":"' % n)
    tail = '"},"finish_reason":null}]}'
    pad = 1024 - len('data: ') - len(head) - len(tail) - 2
    text = ALPHABET[n % 26:n % 26 + pad]
    return ('data: ' + head + text + tail + '\n\n').encode()


def write_sse(path, events):
    with open(path, 'wb') as f:
        for n in range(events):
            f.write(sse_event(n))


def item(n):
    return ('{"id":%d,"name":"item-%d","tags":["a","b","c"],"price":%d,"stock":%d,'
            '"active":true,"text":"%s"}' % (n, n, n % 9973, n % 101, 'x' * 120))


def write_json(path, mb):
    """The envelope, and the hashes of the three answers a route may give of it."""
    target = mb * 1024 * 1024
    prefix = b'{"code":0,"msg":"ok",'
    debug = b'"debug":"' + b'd' * 1000 + b'",'
    data_head = b'{"items":['
    whole, unwrap, drop = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    sizes = {'pass': 0, 'unwrap': 0, 'drop': 0}
    heads = {'pass': b'', 'unwrap': b'', 'drop': b''}

    def put(data, answers):
        for name in answers:
            {'pass': whole, 'unwrap': unwrap, 'drop': drop}[name].update(data)
            sizes[name] += len(data)
            if len(heads[name]) < HEAD:
                heads[name] = (heads[name] + data)[:HEAD]

    with open(path, 'wb') as f:
        def out(data, answers):
            f.write(data)
            put(data, answers)

        out(prefix, ('pass', 'drop'))
        out(debug, ('pass',))
        out(b'"data":', ('pass', 'drop'))
        out(data_head, ('pass', 'drop', 'unwrap'))
        n = 0
        batch = []
        written = sizes['pass']
        while written < target - 64:
            s = (',' if n else '') + item(n)
            batch.append(s)
            written += len(s)
            n += 1
            if len(batch) == 4096:
                out(''.join(batch).encode(), ('pass', 'drop', 'unwrap'))
                batch = []
        out(''.join(batch).encode(), ('pass', 'drop', 'unwrap'))
        out(b'],"total":%d}' % n, ('pass', 'drop', 'unwrap'))
        out(b'}', ('pass', 'drop'))
    with open(path + '.expect', 'w') as f:
        for name, h in (('pass', whole), ('unwrap', unwrap), ('drop', drop)):
            f.write('%s %d %s %s\n' % (name, sizes[name], h.hexdigest(), heads[name].hex()))


def check_sse(events, mode):
    inp = sys.stdin.buffer
    rest = b''
    n = 0
    size = 0
    while True:
        chunk = inp.read(1 << 20)
        if not chunk:
            break
        size += len(chunk)
        rest += chunk
        parts = rest.split(b'\n\n')
        rest = parts.pop()
        for ev in parts:
            want = sse_event(n)
            if mode == 'pass':
                if ev + b'\n\n' != want:
                    return 'event %d differs: %r' % (n, ev[:80])
            else:
                if not ev.startswith(b'data: ') or b'\n' in ev:
                    return 'event %d is not one data line: %r' % (n, ev[:80])
                got = json.loads(ev[6:])
                exp = json.loads(want[6:-2])
                del exp['system_fingerprint']
                exp['gateway'] = 'jsongate'
                if got != exp:
                    return 'event %d differs: %r' % (n, ev[:120])
            n += 1
    if rest:
        return 'the stream ends in an unfinished event: %r' % rest[:80]
    if n != events:
        return '%d events, not %d' % (n, events)
    return None, 'ok %d events, %d bytes' % (n, size)


def check_json(expect, mode, how):
    lines = {}
    with open(expect) as f:
        for line in f:
            name, size, digest, head = line.split()
            lines[name] = (int(size), digest, bytes.fromhex(head))
    size, digest, head = lines[mode]
    inp = sys.stdin.buffer
    h = hashlib.sha256()
    got_size = 0
    got_head = b''
    while True:
        chunk = inp.read(1 << 20)
        if not chunk:
            break
        h.update(chunk)
        got_size += len(chunk)
        if len(got_head) < HEAD:
            got_head = (got_head + chunk)[:HEAD]
    if how == 'json':
        if got_size != size or got_head[:1] != head[:1]:
            return '%d bytes starting %r, not %d starting %r' % (got_size, got_head, size, head[:1])
        return None, 'ok %d bytes (size and first byte compared)' % got_size
    if (got_size, h.hexdigest(), got_head) == (size, digest, head):
        return None, 'ok %d bytes, sha256 %s' % (got_size, digest[:16])
    for other, (osize, odigest, _) in lines.items():
        if (got_size, h.hexdigest()) == (osize, odigest):
            return '%d bytes: the %s answer, not %s' % (got_size, other, mode)
    return '%d bytes starting %r: not the %s answer (%d bytes starting %r)' % (
        got_size, got_head, mode, size, head)


def main(argv):
    if len(argv) >= 4 and argv[1] == 'sse':
        write_sse(argv[2], int(argv[3]))
        return 0
    if len(argv) >= 4 and argv[1] == 'json':
        write_json(argv[2], int(argv[3]))
        return 0
    if len(argv) >= 4 and argv[1] == 'check-sse':
        result = check_sse(int(argv[2]), argv[3])
    elif len(argv) >= 4 and argv[1] == 'check-json':
        result = check_json(argv[2], argv[3], argv[4] if len(argv) > 4 else 'bytes')
    else:
        sys.stderr.write(__doc__)
        return 2
    if isinstance(result, tuple):
        print(result[1])
        return 0
    print(result)
    return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
