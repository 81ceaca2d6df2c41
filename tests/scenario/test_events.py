"""Envelope ops per event (`events:`): an SSE stream like an LLM API's and
NDJSON lines through the route's ops, each event sent on as soon as it is
complete (the first one reaches the client while the upstream still sends),
exact bytes out, `when:` on an event field, events over `limits.max_event`
passed untouched, chunked, Content-Length and close-delimited upstream
bodies, answers the ops leave alone (another type, a Content-Encoding, HEAD,
204), and jsongate_events_total exact."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

T = Suite(__file__)

OPS = '[ { drop: [ system_fingerprint ] }, { set: { gateway: jsongate, request_id: $request_id } } ]'
RID = 'req-events-1'
SET = b',"gateway":"jsongate","request_id":"' + RID.encode() + b'"}'

# An LLM API's stream: data events, comments, event/id/retry lines, a
# multi-line data, CRLF line ends, data that is no JSON object, [DONE].
SSE_IN = [
    b': stream opened\n\n',
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,'
    b'"system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"finish_reason":null}]}\n\n',
    b'event: message\nid: 42\nretry: 3000\ndata: {"id":"chatcmpl-1","choices":[{"delta":'
    b'{"content":"H\\u00e9llo \\"w\\"\\n"}}],"n":1.50e+3,\ndata: "system_fingerprint":"fp"}\n\n',
    b'data:{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":9}}\r\n\r\n',
    b'data: not json\n\n',
    b'data: [1,2]\n\n',
    b'data: [DONE]\n\n',
]
SSE_OUT = [
    b': stream opened\n\n',
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,'
    b'"choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"finish_reason":null}]' + SET + b'\n\n',
    b'event: message\nid: 42\nretry: 3000\ndata: {"id":"chatcmpl-1","choices":[{"delta":'
    b'{"content":"H\\u00e9llo \\"w\\"\\n"}}],"n":1.50e+3' + SET + b'\n\n',
    b'data:{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":9}' + SET + b'\r\n\r\n',
    b'data: not json\n\n',
    b'data: [1,2]\n\n',
    b'data: [DONE]\n\n',
]

NDJSON_IN = [
    b'{"level":"info","msg":"a","system_fingerprint":"x"}\n',
    b'{"level":"debug","msg":"b"}\r\n',
    b'\n',
    b'not json\n',
    b'{"level":"info","msg":"c \\u2028"}',        # the last line has no line end
]
NDJSON_OUT = [
    b'{"level":"info","msg":"a","tag":"kept"' + SET + b'\n',
    b'{"level":"debug","msg":"b"' + SET + b'\r\n',
    b'\n',
    b'not json\n',
    b'{"level":"info","msg":"c \\u2028","tag":"kept"' + SET,
]
# RFC 7464 records: RS, a JSON text, LF.
SEQ_IN = b'\x1e{"level":"info","system_fingerprint":"x"}\n\x1e{"n":[1, 2]}\n'
SEQ_OUT = (b'\x1e{"level":"info","tag":"kept"' + SET + b'\n\x1e{"n":[1, 2]' + SET + b'\n')
NDJSON_OPS = ('[ { drop: [ system_fingerprint ] }, { set: { tag: kept }, when: { field: level, '
              'equals: info } }, { set: { gateway: jsongate, request_id: $request_id } } ]')


def route(name, prefix, **kw):
    """One route as YAML text; values are YAML flow text."""
    lines = ['  - name: %s' % name,
             '    match: { path_prefix: %s }' % prefix,
             '    upstream: app']
    lines += ['    %s: %s' % (k, v) for k, v in kw.items()]
    return '\n'.join(lines) + '\n'


def start(env, up, *routes, admin=False, h2=False, **top):
    """jsongate in front of `up` with the given routes (YAML text blocks)."""
    port = free_port()
    conf = upstream_config(up.address, **top)
    del conf['routes']
    conf['listeners'] = [{'listen': '127.0.0.1:%d' % port}]
    if h2:
        conf['listeners'][0]['http2'] = True
    if admin:
        conf['admin'] = {'listen': '127.0.0.1:%d' % free_port()}
    gw = env.daemon(to_yaml(conf) + '\nroutes:\n' + ''.join(routes), port=port)
    gw.admin = conf['admin']['listen'] if admin else None
    return gw


def head(content_type, framing):
    """An upstream head: its type, a header kept, and the framing lines."""
    return ('HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n'
            'ETag: "v1"\r\n%s\r\n' % (content_type, framing)).encode()


def chunk(data):
    return b'%x\r\n%s\r\n' % (len(data), data)


def want_head(content_type):
    """The head jsongate sends for head(): no Content-Length, framed in chunks, ETag weak."""
    return ('HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\nETag: W/"v1"\r\n'
            'X-Request-Id: %s\r\nTransfer-Encoding: chunked\r\n\r\n'
            % (content_type, RID)).encode()


class Stream:
    """A raw HTTP/1.1 request whose chunked answer is read as it comes."""

    def __init__(self, port, target, method='GET'):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=IO_TIMEOUT)
        self.sock.sendall(('%s %s HTTP/1.1\r\nHost: a\r\nX-Request-Id: %s\r\n\r\n'
                           % (method, target, RID)).encode())
        self.raw = b''
        self.head = None
        self.body = b''
        self.done = False

    def _parse(self):
        if self.head is None:
            end = self.raw.find(b'\r\n\r\n')
            if end < 0:
                return
            self.head = re.sub(rb'Date: [^\r]*\r\n', b'', self.raw[:end + 4])
            self.raw = self.raw[end + 4:]
        while not self.done:
            eol = self.raw.find(b'\r\n')
            if eol < 0:
                return
            size = int(self.raw[:eol], 16)
            if len(self.raw) < eol + 2 + size + 2:
                return
            if size == 0:
                self.done = self.raw[eol + 2:eol + 4] == b'\r\n'
                return
            self.body += self.raw[eol + 2:eol + 2 + size]
            self.raw = self.raw[eol + 2 + size + 2:]

    def read_until(self, pred, timeout=IO_TIMEOUT):
        """Read until pred(self) holds; False when the deadline passes first."""
        deadline = time.monotonic() + timeout
        while not pred(self):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            if not data:
                return pred(self)
            self.raw += data
            self._parse()
        return True

    def close(self):
        self.sock.close()


def scrape(gw, prefix):
    """The sample lines of /metrics starting with prefix, sorted."""
    return metrics_lines(gw.admin, prefix)


@T.case
def sse_streamed_event_by_event(env):
    """Chunked upstream that waits after each event until the client saw it."""
    gates = [threading.Event() for _ in SSE_IN]
    parts = [(head('text/event-stream', 'Transfer-Encoding: chunked\r\n'), 0)]
    # The second event comes in two chunks cut inside a value.
    parts += [(chunk(SSE_IN[0]), 0), (chunk(SSE_IN[1][:70]), 0.05), (chunk(SSE_IN[1][70:]), gates[1])]
    parts += [(chunk(e), g) for e, g in zip(SSE_IN[2:], gates[2:])]
    parts += [(b'0\r\n\r\n', 0)]
    up = env.scripted([pieces(*parts)])
    gw = start(env, up, route('chat', '/v1/chat', events=OPS), admin=True)
    s = Stream(gw.port, '/v1/chat/completions')
    try:
        for i in range(1, len(SSE_IN)):
            want = b''.join(SSE_OUT[:i + 1])
            got = s.read_until(lambda s: len(s.body) >= len(want), timeout=5)
            env.check('event %d reaches the client before the upstream sends the next' % i,
                      got and not gates[i].is_set() and s.body == want,
                      'got %r' % s.body)
            gates[i].set()
        env.check('the answer ends', s.read_until(lambda s: s.done), repr(s.raw))
        env.eq('head', s.head, want_head('text/event-stream'))
        env.eq('body, exact bytes', s.body, b''.join(SSE_OUT))
    finally:
        for g in gates:
            g.set()
        s.close()
    env.eq('metrics', scrape(gw, 'jsongate_events_total'), [
        'jsongate_events_total{route="chat",result="passed"} 3',
        'jsongate_events_total{route="chat",result="rewritten"} 3',
    ])


def one_stream(env, gw, target, want):
    c = env.client(gw.port)
    r = c.request('GET', target, [('Host', 'a'), ('X-Request-Id', RID)])
    env.eq('%s: status' % target, r.status, 200)
    env.eq('%s: body' % target, r.body, want)
    return r


@T.case
def sse_content_length_and_until_close(env):
    body = b''.join(SSE_IN)
    up = env.scripted([
        slowly(head('text/event-stream', 'Content-Length: %d\r\n' % len(body)) + body,
               piece=97, delay=0.01),
        slowly(head('text/event-stream', 'Connection: close\r\n') + body, piece=61, delay=0.01,
               close=True),
        answer(head('text/event-stream; charset=utf-8', 'Content-Length: %d\r\n' % len(body)) +
               body),
    ])
    gw = start(env, up, route('chat', '/', events=OPS))
    for what in ('length', 'close', 'one read'):
        r = one_stream(env, gw, '/' + what.replace(' ', '_'), b''.join(SSE_OUT))
        env.eq('%s: no Content-Length, chunked' % what,
               (r.header('Content-Length'), r.header('Transfer-Encoding')), (None, 'chunked'))


@T.case
def ndjson_lines(env):
    body = b''.join(NDJSON_IN)
    up = env.scripted([
        answer(head('application/x-ndjson', 'Transfer-Encoding: chunked\r\n') +
               b''.join(chunk(body[i:i + 13]) for i in range(0, len(body), 13)) + b'0\r\n\r\n'),
        slowly(head('application/jsonl', 'Content-Length: %d\r\n' % len(body)) + body, piece=50,
               delay=0.01),
        slowly(head('application/json-seq', 'Connection: close\r\n') + SEQ_IN, piece=7,
               delay=0.01, close=True),
    ])
    gw = start(env, up, route('logs', '/', events=NDJSON_OPS), admin=True)
    one_stream(env, gw, '/x-ndjson', b''.join(NDJSON_OUT))
    one_stream(env, gw, '/jsonl', b''.join(NDJSON_OUT))
    one_stream(env, gw, '/json-seq', SEQ_OUT)
    env.eq('metrics', scrape(gw, 'jsongate_events_total'), [
        'jsongate_events_total{route="logs",result="passed"} 4',
        'jsongate_events_total{route="logs",result="rewritten"} 8',
    ])


@T.case
def ndjson_first_line_before_the_rest(env):
    gate = threading.Event()
    up = env.scripted([pieces(
        (head('application/x-ndjson', 'Transfer-Encoding: chunked\r\n'), 0),
        (chunk(NDJSON_IN[0] + NDJSON_IN[1][:10]), gate),
        (chunk(NDJSON_IN[1][10:]) + b'0\r\n\r\n', 0))])
    gw = start(env, up, route('logs', '/', events=NDJSON_OPS))
    s = Stream(gw.port, '/')
    try:
        got = s.read_until(lambda s: len(s.body) >= len(NDJSON_OUT[0]), timeout=5)
        env.check('the first line goes on while the second is cut', got and not gate.is_set() and
                  s.body == NDJSON_OUT[0], repr(s.body))
        gate.set()
        env.check('the answer ends', s.read_until(lambda s: s.done), repr(s.raw))
        env.eq('body', s.body, NDJSON_OUT[0] + NDJSON_OUT[1])
    finally:
        gate.set()
        s.close()


@T.case
def variables_for_the_whole_answer(env):
    """$header.NAME and $route in events after other requests went through the worker."""
    gate = threading.Event()
    up = env.scripted([
        pieces((head('text/event-stream', 'Transfer-Encoding: chunked\r\n'), 0),
               (chunk(b'data: {"n":1}\n\n'), gate), (chunk(b'data: {"n":2}\n\n') + b'0\r\n\r\n', 0)),
        answer(http_response(200, b'{"other":true}', headers=[('X-User', 'bob')]))])
    gw = start(env, up, route('chat', '/', events='[ { set: { user: $header.x-user, route: $route '
                                                  '} } ]'))
    s = socket.create_connection(('127.0.0.1', gw.port), timeout=IO_TIMEOUT)
    st = Stream.__new__(Stream)
    st.sock, st.raw, st.head, st.body, st.done = s, b'', None, b'', False
    s.sendall(b'GET /a HTTP/1.1\r\nHost: a\r\nX-User: al\\"ice\r\nX-Other: 1\r\n\r\n')
    try:
        first = b'data: {"n":1,"user":"al\\\\\\"ice","route":"chat"}\n\n'
        env.check('the first event', st.read_until(lambda st: len(st.body) >= len(first)) and
                  st.body == first, repr(st.body))
        c = env.client(gw.port)
        r = c.request('GET', '/b', [('Host', 'a'), ('X-User', 'bob'), ('X-Pad', 'x' * 300)])
        env.eq('another request meanwhile', r.body, b'{"other":true}')
        gate.set()
        env.check('the answer ends', st.read_until(lambda st: st.done), repr(st.raw))
        env.eq('both events, their variables the request\'s', st.body,
               first + b'data: {"n":2,"user":"al\\\\\\"ice","route":"chat"}\n\n')
    finally:
        gate.set()
        s.close()


@T.case
def many_events_to_a_slow_reader(env):
    """64 MB of events, chunked and with a Content-Length, to a client that reads only after
    a pause: the upstream is held back (the daemon's peak RSS stays within idle + 32 MB) and
    every byte comes out right, in order."""
    import hashlib
    n = 500000
    events_in = b''.join(b'data: {"i":%d,"system_fingerprint":"fp","pad":"%s"}\n\n'
                         % (i, b'p' * 60) for i in range(n))
    events_out = b''.join(b'data: {"i":%d,"pad":"%s"' % (i, b'p' * 60) + SET + b'\n\n'
                          for i in range(n))
    want = (len(events_out), hashlib.sha256(events_out).hexdigest())
    up = env.scripted([
        answer(head('text/event-stream', 'Content-Length: %d\r\n' % len(events_in)) + events_in),
        answer(head('text/event-stream', 'Transfer-Encoding: chunked\r\n') +
               b''.join(chunk(events_in[i:i + 70001]) for i in range(0, len(events_in), 70001)) +
               b'0\r\n\r\n')])
    gw = start(env, up, route('chat', '/', events=OPS), admin=True)
    idle = gw.rss()['VmRSS']
    for what in ('length', 'chunked'):
        # HTTP/1.0: the body comes until the close, as it is.
        sock = socket.create_connection(('127.0.0.1', gw.port), timeout=IO_TIMEOUT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(('GET /%s HTTP/1.0\r\nX-Request-Id: %s\r\n\r\n' % (what, RID)).encode())
        time.sleep(1.0)     # the client does not read meanwhile
        got = bytearray()
        try:
            while True:
                data = sock.recv(1 << 20)
                if not data:
                    break
                got += data
        finally:
            sock.close()
        body = bytes(got[got.find(b'\r\n\r\n') + 4:])
        env.eq('%s: every event, exact bytes' % what,
               (len(body), hashlib.sha256(body).hexdigest()), want)
    peak = gw.rss()['VmHWM']
    # Under ASan freed memory waits in its quarantine (256 MB): the bound is its.
    bound_mb = 512 if instrumented() else 32
    env.check('peak RSS within idle + %d MB' % bound_mb, peak - idle < bound_mb * 1024,
              'idle %d kB, peak %d kB' % (idle, peak))
    env.eq('metrics', scrape(gw, 'jsongate_events_total'), [
        'jsongate_events_total{route="chat",result="rewritten"} %d' % (2 * n),
    ])


@T.case
def json_variable_of_the_request(env):
    """$json.PATH in events: a field of the request body, in every event."""
    body = b'data: {"n":1}\n\ndata: {"n":2}\n\n'
    up = env.scripted([answer(head('text/event-stream', 'Content-Length: %d\r\n' % len(body)) +
                              body)])
    gw = start(env, up, route('chat', '/', events='[ { set: { model: $json.model } } ]'))
    c = env.client(gw.port)
    r = c.request('POST', '/v1', [('Host', 'a'), ('Content-Type', 'application/json')],
                  b'{"model":"gpt-\\u00e9","stream":true}')
    env.eq('events', r.body, b'data: {"n":1,"model":"gpt-\xc3\xa9"}\n\ndata: {"n":2,"model":'
           b'"gpt-\xc3\xa9"}\n\n')
    env.eq('the request body upstream, as sent', up.requests[0].body,
           b'{"model":"gpt-\\u00e9","stream":true}')


@T.case
def ops_that_cannot_apply_and_status(env):
    """An event the ops cannot take passes as it came (failed); when: status reads the
    upstream's status, which the answer keeps."""
    body = b'data: {"data":{"x":1}}\n\ndata: {"other":1}\n\n'
    up = env.scripted([
        answer(head('text/event-stream', 'Content-Length: %d\r\n' % len(body)) + body),
        answer(head('text/event-stream', 'Content-Length: %d\r\n' % len(body))
               .replace(b'200 OK', b'503 Service Unavailable') + body),
    ])
    gw = start(env, up, route('chat', '/', events='[ { unwrap: data }, { set: { down: true }, '
                                                  'when: { status: 5xx } } ]'), admin=True)
    one_stream(env, gw, '/ok', b'data: {"x":1}\n\ndata: {"other":1}\n\n')
    c = env.client(gw.port)
    r = c.request('GET', '/down', [('Host', 'a')])
    env.eq('503: status and events', (r.status, r.body),
           (503, b'data: {"x":1,"down":true}\n\ndata: {"other":1}\n\n'))
    env.eq('metrics', scrape(gw, 'jsongate_events_total'), [
        'jsongate_events_total{route="chat",result="failed"} 2',
        'jsongate_events_total{route="chat",result="rewritten"} 2',
    ])


@T.case
def over_max_event(env):
    big = b'data: {"system_fingerprint":"fp","text":"' + b'x' * 300 + b'"}\n\n'
    small = b'data: {"system_fingerprint":"fp"}\n\n'
    line = b'{"system_fingerprint":"fp","text":"' + b'y' * 300 + b'"}\n'
    body = small + big + small
    up = env.scripted([
        answer(head('text/event-stream', 'Transfer-Encoding: chunked\r\n') +
               b''.join(chunk(body[i:i + 40]) for i in range(0, len(body), 40)) + b'0\r\n\r\n'),
        answer(head('application/x-ndjson', 'Content-Length: %d\r\n' % (len(line) + 29)) + line +
               b'{"system_fingerprint":"fp"}\n\n'),
    ])
    gw = start(env, up, route('chat', '/', events=OPS), admin=True,
               limits={'max_event': 128})
    rewritten = b'data: {' + SET[1:] + b'\n\n'
    one_stream(env, gw, '/sse', rewritten + big + rewritten)
    one_stream(env, gw, '/ndjson', line + b'{' + SET[1:] + b'\n\n')
    env.eq('metrics', scrape(gw, 'jsongate_events_total'), [
        'jsongate_events_total{route="chat",result="over_limit"} 2',
        'jsongate_events_total{route="chat",result="passed"} 1',
        'jsongate_events_total{route="chat",result="rewritten"} 3',
    ])


@T.case
def answers_left_alone(env):
    """Another type, a Content-Encoding, HEAD, 204: as the upstream sent them."""
    sse = SSE_IN[1]
    gz = zlib.compress(sse)
    up = env.scripted([
        answer(head('application/json', 'Content-Length: %d\r\n' % len(sse)) + sse),
        answer(head('text/event-stream', 'Content-Encoding: deflate\r\nContent-Length: %d\r\n'
                    % len(gz)) + gz),
        answer(head('text/event-stream', 'Content-Length: %d\r\n' % len(sse))),
        answer(b'HTTP/1.1 204 No Content\r\nContent-Type: text/event-stream\r\n\r\n'),
    ])
    gw = start(env, up, route('chat', '/', events=OPS), admin=True)
    c = env.client(gw.port)
    r = c.request('GET', '/json', [('Host', 'a')])
    env.eq('json: untouched', (r.body, r.header('Content-Length')), (sse, str(len(sse))))
    r = c.request('GET', '/deflate', [('Host', 'a')])
    env.eq('deflate: untouched', (r.body, r.header('Content-Length'), r.header('ETag')),
           (gz, str(len(gz)), '"v1"'))
    r = c.request('HEAD', '/head', [('Host', 'a')])
    env.eq('HEAD: the upstream head', (r.status, r.body, r.header('Content-Length')),
           (200, b'', str(len(sse))))
    r = c.request('GET', '/204', [('Host', 'a')])
    env.eq('204', (r.status, r.body), (204, b''))
    env.eq('metrics', scrape(gw, 'jsongate_e'), [
        'jsongate_envelope_total{route="chat",direction="response",result="passed",'
        'reason="encoding"} 1',
    ])


@T.case
def config_errors(env):
    conf = to_yaml(upstream_config('127.0.0.1:1', routes=[])).replace('routes: []', '')
    conf += '\nlisteners:\n  - listen: 127.0.0.1:1\nroutes:\n'
    conf += route('chat', '/', events='[ { drop: [ a ] }, { nope: 1 } ]')
    path = os.path.join(env.tmp, 'bad.yaml')
    with open(path, 'w') as f:
        f.write(conf)
    r = env.run([JSONGATE, '-t', '-c', path])
    lines = conf.splitlines()
    at = [i for i, l in enumerate(lines) if l.startswith('    events:')][0]
    env.eq('-t exit status', r.returncode, 1)
    env.eq('the error at FILE:LINE:COL of events', r.stderr.decode(),
           "%s:%d:%d: routes[0].events: unknown op 'nope' (expected unwrap, wrap, rename, drop, "
           "keep, set, status_from)\n" % (path, at + 1, lines[at].index('nope') + 1))

    # An aggregated route answers with one merged body: no event stream to rewrite.
    conf = to_yaml(upstream_config('127.0.0.1:1', routes=[])).replace('routes: []', '')
    conf += '\nlisteners:\n  - listen: 127.0.0.1:1\nroutes:\n'
    conf += ('  - name: agg\n    match: { path_prefix: / }\n    backends:\n'
             '      a: { upstream: app, path: /a }\n    events: [ { drop: [ a ] } ]\n')
    with open(path, 'w') as f:
        f.write(conf)
    r = env.run([JSONGATE, '-t', '-c', path])
    lines = conf.splitlines()
    at = [i for i, l in enumerate(lines) if l.startswith('    events:')][0]
    env.eq('events with backends: -t exit status', r.returncode, 1)
    env.eq('events with backends: the error at FILE:LINE:COL', r.stderr.decode(),
           '%s:%d:13: routes[0].events: events cannot go with backends: an aggregated route '
           'answers with one merged JSON body\n' % (path, at + 1))


@T.case
def sse_over_http2(env):
    """curl --http2-prior-knowledge: the same bytes, the first event before the second."""
    import select
    gates = [threading.Event() for _ in SSE_IN]
    parts = [(head('text/event-stream', 'Transfer-Encoding: chunked\r\n'), 0)]
    parts += [(chunk(e), g) for e, g in zip(SSE_IN, gates)]
    parts += [(b'0\r\n\r\n', 0)]
    up = env.scripted([pieces(*parts)])
    gw = start(env, up, route('chat', '/', events=OPS), h2=True)
    p = subprocess.Popen(['curl', '-sSN', '--http2-prior-knowledge', '-H', 'X-Request-Id: ' + RID,
                          'http://127.0.0.1:%d/v1/chat' % gw.port], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out = b''
    try:
        deadline = time.monotonic() + IO_TIMEOUT
        gates[0].set()
        want = SSE_OUT[0] + SSE_OUT[1]
        while len(out) < len(want) and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.1)[0]:
                data = os.read(p.stdout.fileno(), 65536)
                if not data:
                    break
                out += data
        env.check('the first events reach the HTTP/2 client before the upstream sends the next',
                  out == want and not gates[1].is_set(), repr(out))
    finally:
        for g in gates:
            g.set()
        rest, err = p.communicate(timeout=IO_TIMEOUT)
    env.eq('curl exit status', (p.returncode, err), (0, b''))
    env.eq('body over HTTP/2, exact bytes', out + rest, b''.join(SSE_OUT))


T.run()
