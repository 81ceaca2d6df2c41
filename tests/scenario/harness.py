"""Scenario test harness for jsongate (Python 3 standard library only).

A test file builds cases on a Suite; each case gets an Env that starts the
real daemon on a generated configuration, a scripted upstream or the demo
upstream, and raw-socket clients, and tears everything down afterwards:

    from harness import *
    T = Suite(__file__)

    @T.case
    def plain_get(env):
        up = env.scripted([answer(http_response(200, b'{}'))])
        gw = env.daemon(upstream_config(up.address))
        c = env.client(gw.port)
        r = c.request('GET', '/x', [('Host', 'a')])
        env.eq('status', r.status, 200)

    T.run()

Environment: JSONGATE (daemon binary), DEMO_UPSTREAM (demo upstream binary),
TESTS_SRCDIR (the tests/ source directory), and optionally JSONGATE_WRAPPER,
a command prefixed to the daemon (e.g. "valgrind --error-exitcode=99"):
then every case also checks the exit status after SIGTERM, and deadlines
are stretched.

Output: one line per check ("ok N - what" or "FAIL N - what: detail") and a
closing "N passed, M failed"; the exit status is 0 only when nothing failed.
A test never skips.
"""

import email.utils
import fcntl
import json
import os
import re
import select
import shutil
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import traceback
import zlib

JSONGATE = os.environ.get('JSONGATE', 'jsongate')
DEMO_UPSTREAM = os.environ.get('DEMO_UPSTREAM', 'demo-upstream')
TESTS_SRCDIR = os.environ.get('TESTS_SRCDIR',
                              os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRAPPER = shlex.split(os.environ.get('JSONGATE_WRAPPER', ''))
# Valgrind and sanitizers make everything slower: stretch deadlines, never bounds.
SLOW = 10 if WRAPPER else 1
IO_TIMEOUT = 10 * SLOW          # default deadline for a socket read
FILE_DEADLINE = 240 * SLOW      # a whole test file; the suite aims at < 4 min
SANITIZER_MARKS = ('ERROR: AddressSanitizer', 'ERROR: LeakSanitizer',
                   'runtime error:')

__all__ = [
    'Suite', 'Env', 'Client', 'Response', 'ScriptedUpstream', 'Request',
    'answer', 'slowly', 'pieces', 'close_before_answer', 'close_mid_body', 'hang',
    'reset', 'reset_on_accept', 'reset_after', 'garbage', 'wrong_length', 'stall_mid_body',
    'close_when_idle', 'retry_after', 'blackhole', 'GARBAGE',
    'http_response', 'build_request', 'upstream_config', 'to_yaml', 'free_port',
    'pattern_block', 'pattern_crc', 'rss_kb', 'wait_until', 'instrumented',
    'gateway_error_body', 'date_is_now', 'metrics_lines', 'metrics_text', 'JSONGATE', 'DEMO_UPSTREAM', 'TESTS_SRCDIR',
    'WRAPPER', 'SLOW', 'IO_TIMEOUT', 'ProtocolError', 'json', 'os', 're',
    'socket', 'time', 'signal', 'threading', 'zlib', 'subprocess',
]


class ProtocolError(Exception):
    """The peer sent bytes that are not valid HTTP/1.1."""


class CheckFailed(Exception):
    """A required check failed; the rest of the case makes no sense."""


# ------------------------------------------------------------------ utilities

_ports_given = set()


def free_port():
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago, never one this process
    handed out before (the kernel may offer a just-released port again)."""
    while True:
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _ports_given:
            _ports_given.add(port)
            return port


def listening_sockets(port):
    """The inodes of the TCP sockets listening on port (any address)."""
    inodes = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == '0A' and int(fields[1].rsplit(':', 1)[1], 16) == port:
                        inodes.add(fields[9])
        except OSError:
            pass
    return inodes


def process_sockets(pid):
    """The inodes of the sockets process pid holds open."""
    inodes = set()
    fd_dir = '/proc/%d/fd' % pid
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(target[8:-1])
    return inodes


def wait_until(predicate, timeout, interval=0.02):
    """Polls predicate() until it is true or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return value
        time.sleep(interval)


_PATTERN_BLOCK = bytes(((i * 31 + 7) & 0xff) for i in range(65536))


def pattern_block():
    """64 KiB of the demo upstream's pattern: byte i is (i * 31 + 7) & 0xff."""
    return _PATTERN_BLOCK


def pattern_crc(n):
    """crc32 of the first n bytes of the pattern."""
    crc, block = 0, _PATTERN_BLOCK
    full, rest = divmod(n, len(block))
    for _ in range(full):
        crc = zlib.crc32(block, crc)
    return zlib.crc32(block[:rest], crc)


def instrumented():
    """True when the daemon runs under a wrapper (valgrind) or is built with
    sanitizers: memory figures then include their bookkeeping (ASan keeps
    freed memory in quarantine)."""
    with open(JSONGATE, 'rb') as f:
        return bool(WRAPPER) or b'__asan_init' in f.read()


def rss_kb(pid):
    """{'VmRSS': kB, 'VmHWM': kB} of a live process, from /proc."""
    out = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            key, _, value = line.partition(':')
            if key in ('VmRSS', 'VmHWM'):
                out[key] = int(value.split()[0])
    return out


def metrics_text(port, host='127.0.0.1'):
    """The text of /metrics on the admin listener at host:port."""
    import http.client
    c = http.client.HTTPConnection(host, int(port), timeout=IO_TIMEOUT)
    try:
        c.request('GET', '/metrics')
        return c.getresponse().read().decode()
    finally:
        c.close()


def metrics_lines(admin, prefix):
    """The sample lines of /metrics on the admin listener (host:port) starting with prefix,
    sorted."""
    host, port = admin.rsplit(':', 1)
    text = metrics_text(port, host)
    return sorted(l for l in text.splitlines() if l.startswith(prefix))


def date_is_now(value, slack=60):
    """value is an HTTP-date (RFC 9110 5.6.7) within slack seconds of the clock."""
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return False
    return value.endswith(' GMT') and abs(when - time.time()) <= slack * SLOW


def gateway_error_body(status, code, message, request_id):
    return ('{"error":{"status":%d,"code":"%s","message":"%s","request_id":"%s"}}'
            % (status, code, message, request_id)).encode()


# RFC 9110's reason phrases, as the gateway writes them.
REASONS = {100: 'Continue', 200: 'OK', 201: 'Created', 204: 'No Content',
           304: 'Not Modified', 400: 'Bad Request', 404: 'Not Found',
           405: 'Method Not Allowed', 408: 'Request Timeout', 413: 'Content Too Large',
           415: 'Unsupported Media Type',
           431: 'Request Header Fields Too Large', 500: 'Internal Server Error',
           501: 'Not Implemented', 502: 'Bad Gateway', 503: 'Service Unavailable',
           504: 'Gateway Timeout', 505: 'HTTP Version Not Supported'}


def http_response(status, body=b'', headers=None, chunked=False,
                  content_type='application/json', reason=None):
    """Raw bytes of an HTTP/1.1 response (for scripted upstreams)."""
    if isinstance(body, str):
        body = body.encode()
    lines = ['HTTP/1.1 %d %s' % (status, reason or REASONS.get(status, 'Whatever'))]
    if content_type:
        lines.append('Content-Type: ' + content_type)
    for name, value in headers or []:
        lines.append('%s: %s' % (name, value))
    if chunked:
        lines.append('Transfer-Encoding: chunked')
        payload = b''
        if body:
            payload = b'%x\r\n%s\r\n' % (len(body), body)
        payload += b'0\r\n\r\n'
    else:
        lines.append('Content-Length: %d' % len(body))
        payload = body
    return ('\r\n'.join(lines) + '\r\n\r\n').encode() + payload


_PLAIN = re.compile(r'^[A-Za-z0-9_./$][A-Za-z0-9_./:$+-]*$')


def _scalar(value):
    if value is True:
        return 'true'
    if value is False:
        return 'false'
    if isinstance(value, (int, float)):
        return str(value)
    value = str(value)
    if _PLAIN.match(value) and not value.endswith(':'):
        return value
    return json.dumps(value)


def to_yaml(obj, indent=0):
    """Block-style YAML for dicts, lists and scalars (plain where safe)."""
    pad = ' ' * indent
    out = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, (dict, list)) and value:
                out.append('%s%s:' % (pad, _scalar(key)))
                out.append(to_yaml(value, indent + 2))
            elif isinstance(value, (dict, list)):
                out.append('%s%s: %s' % (pad, _scalar(key), '{}' if isinstance(value, dict) else '[]'))
            else:
                out.append('%s%s: %s' % (pad, _scalar(key), _scalar(value)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, (dict, list)) and item:
                inner = to_yaml(item, indent + 2).lstrip(' ')
                out.append('%s- %s' % (pad, inner))
            else:
                out.append('%s- %s' % (pad, _scalar(item)))
    else:
        out.append(pad + _scalar(obj))
    return '\n'.join(out)


def upstream_config(*servers, routes=None, keepalive=8, **top):
    """A complete configuration dict: one upstream 'app', catch-all route.

    listeners are filled in by Env.daemon(); any top-level key may be given
    (log=..., limits=..., timeouts=..., workers=...) and replaces the default.
    """
    conf = {
        'workers': 1,
        'log': {'level': 'info', 'access': 'off'},
        'timeouts': {'upstream_connect': '2s', 'upstream_response': '10s',
                     'shutdown_grace': '5s'},
        'upstreams': {'app': {'servers': list(servers), 'keepalive': keepalive}},
        'routes': routes if routes is not None else [
            {'name': 'all', 'match': {'path_prefix': '/'}, 'upstream': 'app'}],
    }
    conf.update(top)
    return conf


# ------------------------------------------------------------------ HTTP client

class Response:
    """A parsed response. headers is the ordered list of (name, value)."""

    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.headers = []
        self.head = b''          # raw status line and headers, with the blank line, but Date
        self.raw_head = b''      # the same with Date
        self.date = None         # the Date header's value (the one header that is the clock)
        self.body = b''
        self.body_len = 0
        self.body_crc = 0
        self.framing = None      # 'length', 'chunked', 'close' or 'none'
        self.chunks = []         # chunk sizes as received, for chunked bodies
        self.complete = False    # False when the peer closed before the end
        self.error = None

    def header(self, name, default=None):
        values = self.all(name)
        return values[0] if values else default

    def all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def names(self):
        return [n.lower() for n, _ in self.headers]

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return '<Response %s %s %r>' % (self.status, self.headers, self.body[:200])


_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_STATUS_LINE = re.compile(rb'HTTP/(1\.[01]) ([0-9]{3}) ([^\r\n]*)\r\n\Z')
_HEADER_LINE = re.compile(rb'(' + _TOKEN + rb'):[ \t]*([^\r\n]*?)[ \t]*\r\n\Z')
_HTTP_DATE = re.compile(rb'(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|'
                        rb'Sep|Oct|Nov|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT\Z')
_CHUNK_LINE = re.compile(rb'([0-9A-Fa-f]+)(;[^\r\n]*)?\r\n\Z')


class Client:
    """A raw-socket HTTP/1.1 client with a strict response parser."""

    def __init__(self, port, host='127.0.0.1', timeout=IO_TIMEOUT, connect=True):
        self.port = port
        self.host = host
        self.timeout = timeout
        self.buf = b''
        self.eof = False
        self.sock = None
        if connect:
            self.sock = socket.create_connection((host, port), timeout=timeout)

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def _fill(self, deadline, want=65536):
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout('timed out waiting for the response')
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(min(max(want, 65536), 1 << 20))
        except ConnectionResetError:
            data = b''
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _line(self, deadline, limit=65536):
        while True:
            i = self.buf.find(b'\n')
            if i >= 0:
                line, self.buf = self.buf[:i + 1], self.buf[i + 1:]
                if not line.endswith(b'\r\n'):
                    raise ProtocolError('bare LF in %r' % line)
                return line
            if len(self.buf) > limit:
                raise ProtocolError('line too long')
            if not self._fill(deadline):
                return None

    def _exact(self, n, deadline, r, keep):
        while n > 0:
            if not self.buf and not self._fill(deadline, n):
                return False
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            r.body_len += len(piece)
            r.body_crc = zlib.crc32(piece, r.body_crc)
            if keep:
                r.body += piece
        return True

    def read_response(self, method='GET', timeout=None, keep_body=True,
                      skip_interim=True):
        """Reads one response; 1xx interim responses are skipped unless asked.

        Raises ProtocolError on anything malformed and socket.timeout when
        nothing arrives in time; returns None when the connection closed
        before a status line. keep_body=False keeps only length and crc32.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            r = Response()
            line = self._line(deadline)
            if line is None:
                if self.buf:
                    raise ProtocolError('connection closed in status line: %r' % self.buf)
                return None
            m = _STATUS_LINE.match(line)
            if not m:
                raise ProtocolError('bad status line %r' % line)
            r.version, r.status, r.reason = m.group(1).decode(), int(m.group(2)), m.group(3).decode('latin-1')
            r.head = r.raw_head = line
            while True:
                line = self._line(deadline)
                if line is None:
                    raise ProtocolError('connection closed in the header block')
                r.raw_head += line
                if line == b'\r\n':
                    r.head += line
                    break
                hm = _HEADER_LINE.match(line)
                if not hm:
                    raise ProtocolError('bad header line %r' % line)
                if hm.group(1).lower() == b'date':
                    # Checked here and kept apart, so that heads compare byte for byte.
                    if r.date is not None or not _HTTP_DATE.match(hm.group(2)):
                        raise ProtocolError('a second or malformed Date %r' % line)
                    r.date = hm.group(2).decode()
                    continue
                r.head += line
                r.headers.append((hm.group(1).decode(), hm.group(2).decode('latin-1')))
            if 100 <= r.status < 200 and skip_interim:
                continue
            break
        self._body(r, method, deadline, keep_body)
        return r

    def _body(self, r, method, deadline, keep):
        te = ','.join(r.all('Transfer-Encoding')).lower()
        cls = r.all('Content-Length')
        if method == 'HEAD' or 100 <= r.status < 200 or r.status in (204, 304):
            r.framing, r.complete = 'none', True
        elif te:
            if te.split(',')[-1].strip() != 'chunked':
                raise ProtocolError('unsupported transfer-coding %r' % te)
            if cls:
                raise ProtocolError('both Content-Length and Transfer-Encoding')
            r.framing = 'chunked'
            while True:
                line = self._line(deadline)
                if line is None:
                    r.error = 'closed before the last chunk'
                    return
                m = _CHUNK_LINE.match(line)
                if not m:
                    raise ProtocolError('bad chunk size line %r' % line)
                size = int(m.group(1), 16)
                r.chunks.append(size)
                if size == 0:
                    break
                if not self._exact(size, deadline, r, keep):
                    r.error = 'closed inside a chunk'
                    return
                crlf = self._line(deadline)
                if crlf != b'\r\n':
                    if crlf is None:
                        r.error = 'closed after chunk data'
                        return
                    raise ProtocolError('chunk data not followed by CRLF: %r' % crlf)
            while True:             # trailers
                line = self._line(deadline)
                if line is None:
                    r.error = 'closed in trailers'
                    return
                if line == b'\r\n':
                    break
            r.complete = True
        elif cls:
            if len(set(cls)) != 1 or not cls[0].isdigit():
                raise ProtocolError('bad Content-Length %r' % cls)
            r.framing = 'length'
            r.complete = self._exact(int(cls[0]), deadline, r, keep)
            if not r.complete:
                r.error = 'closed after %d of %s body bytes' % (r.body_len, cls[0])
        else:
            r.framing = 'close'
            while True:
                piece, self.buf = self.buf, b''
                r.body_len += len(piece)
                r.body_crc = zlib.crc32(piece, r.body_crc)
                if keep:
                    r.body += piece
                if not self._fill(deadline):
                    break
            r.complete = True

    def request(self, method, target, headers=(), body=None, version='HTTP/1.1',
                timeout=None, keep_body=True):
        """Sends a request (Content-Length added for a body) and reads the answer."""
        self.send(build_request(method, target, headers, body, version))
        return self.read_response(method, timeout=timeout, keep_body=keep_body)

    def wait_closed(self, timeout=None):
        """True when the peer closes (EOF or reset) before the deadline.

        Bytes that arrive meanwhile are kept in self.buf.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while self._fill(deadline):
                pass
            return True
        except socket.timeout:
            return False
        except OSError:
            return True


def build_request(method, target, headers=(), body=None, version='HTTP/1.1'):
    lines = ['%s %s %s' % (method, target, version)]
    names = [n.lower() for n, _ in headers]
    for name, value in headers:
        lines.append('%s: %s' % (name, value))
    if isinstance(body, str):
        body = body.encode()
    if body is not None and 'content-length' not in names and 'transfer-encoding' not in names:
        lines.append('Content-Length: %d' % len(body))
    return ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1') + (body or b'')


# ------------------------------------------------------------------ scripted upstream

class Request:
    """A request as the upstream received it."""

    def __init__(self, conn):
        self.conn = conn            # index of the accepted connection, from 0
        self.raw = b''              # exact bytes: head and body framing
        self.head = b''
        self.method = self.target = self.version = None
        self.headers = []
        self.body = b''
        self.framing = 'none'       # 'length', 'chunked' or 'none'
        self.chunks = []

    def header(self, name, default=None):
        values = self.all(name)
        return values[0] if values else default

    def all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def names(self):
        return [n.lower() for n, _ in self.headers]

    def __repr__(self):
        return '<Request #%d %r>' % (self.conn, self.raw[:300])


def answer(data, close=False, expect=None, delay=0):
    """Send data (bytes, or a function of the Request giving bytes).

    delay: seconds to wait before sending. close=True closes the connection
    after sending. expect, a function of the Request, returns an error
    string when the request is not what the test expected (recorded in
    upstream.errors).
    """
    return {'action': 'answer', 'data': data, 'close': close, 'expect': expect,
            'delay': delay}


def slowly(data, piece=1, delay=0.05, close=False):
    """Send data in pieces of `piece` bytes with `delay` seconds between."""
    return {'action': 'pieces', 'data': data, 'piece': piece, 'delay': delay,
            'close': close, 'expect': None}


def pieces(*parts, close=True):
    """Send each (bytes, seconds to wait after) in turn, then close.

    Instead of seconds, a threading.Event holds the rest back until the test sets it."""
    return {'action': 'parts', 'data': b'', 'parts': parts, 'close': close,
            'expect': None}


def close_before_answer():
    return {'action': 'close', 'data': b'', 'close': True, 'expect': None}


def close_mid_body(data):
    """Send the partial response data, then close the connection."""
    return {'action': 'answer', 'data': data, 'close': True, 'expect': None}


def hang():
    """Read the request and never answer (until the upstream stops)."""
    return {'action': 'hang', 'data': b'', 'close': True, 'expect': None}


def reset():
    """Read the request, then reset the connection (RST) without answering."""
    return {'action': 'answer', 'data': b'', 'close': 'reset', 'expect': None}


def reset_on_accept():
    """Reset the next accepted connection (RST) at once, before reading a byte.

    Taken by a connection when it is accepted, not by a request: it is never
    in requests. A request arriving while it is the next step is an error.
    The peer may see the reset in connect() already.
    """
    return {'action': 'reset_on_accept', 'data': b'', 'close': 'reset', 'expect': None}


def reset_after(data):
    """Send data (a response head, or part of a response), then reset (RST).

    The reset waits until the peer has received every byte sent: an RST
    discards what is still unsent.
    """
    return {'action': 'answer', 'data': data, 'close': 'reset', 'expect': None}


GARBAGE = b'\x16\x03\x01\x00\x05hello\x00\xff this is not HTTP\r\n\r\n'


def garbage(data=GARBAGE):
    """Answer bytes that are not HTTP, then close."""
    return answer(data, close=True)


def wrong_length(body, length, status=200, close=None):
    """Answer with a Content-Length of `length` over `body`.

    Longer than the body: the body, then close (the answer is cut short).
    Shorter: the extra bytes follow in the same write and the connection
    stays open, as a broken server would leave it. close= overrides.
    """
    if isinstance(body, str):
        body = body.encode()
    raw = http_response(status, body)
    raw = raw.replace(b'Content-Length: %d\r\n' % len(body), b'Content-Length: %d\r\n' % length, 1)
    return answer(raw, close=length > len(body) if close is None else close)


def stall_mid_body(data):
    """Send the partial response data, then hang until the upstream stops."""
    return {'action': 'hang', 'data': data, 'close': True, 'expect': None}


def close_when_idle(data, after=0):
    """Send data (a keep-alive answer), then close once the connection was idle
    `after` seconds (0: at once), as a server with a short keep-alive timeout
    does; a request arriving in time is served by the next step."""
    return {'action': 'answer', 'data': data, 'close': 'idle', 'idle': after, 'expect': None}


def retry_after(seconds, status=503, body=b'{"error":"overloaded"}'):
    """Answer status (503 or 429) with `Retry-After: seconds`, keeping the connection."""
    return answer(http_response(status, body, headers=[('Retry-After', str(seconds))]))


def blackhole():
    """A listener whose accept queue is full: connecting to it times out."""
    lst = socket.socket()
    lst.bind(('127.0.0.1', 0))
    lst.listen(0)
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(lst.getsockname())
        except BlockingIOError:
            pass
        fillers.append(s)
    return lst, fillers


def _hold_port(port=0, host='127.0.0.1'):
    """A socket bound to the port without listening: connecting to the port is
    refused and the port is given to no one else, while a listener with
    SO_REUSEADDR may still bind beside it (restart())."""
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    _ports_given.add(s.getsockname()[1])
    return s


def _listener(port=0, host='127.0.0.1'):
    """A listening socket on host:port (an IPv6 host without brackets)."""
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
    _ports_given.add(s.getsockname()[1])
    return s


def _unsent(conn):
    """Bytes sent on conn that the peer has not acknowledged yet (SIOCOUTQ)."""
    try:
        return struct.unpack('i', fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b'\0' * 4))[0]
    except OSError:
        return 0


def _arm_reset(conn, stopping):
    """Make the coming close() send an RST, once the peer has every byte sent."""
    wait_until(lambda: stopping.is_set() or _unsent(conn) == 0, IO_TIMEOUT, 0.001)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))


class ScriptedUpstream:
    """A socket server answering requests with a script of steps.

    Steps are taken in order across all connections, one per request;
    when none is left `default` is used (a step, or None for a 500 and an
    entry in errors). requests lists every received Request; connections
    counts accepted connections; hanging counts the connections held in a
    hang() or stall_mid_body() step now. With health=(status, body) or after
    set_health(), GET on health_path is answered with it, recorded in
    health_requests rather than requests, and takes no step. It listens on
    host:port (an IPv6 host without brackets), an ephemeral port by default.
    """

    def __init__(self, steps=(), default=None, send_continue=True, truncated_ok=False,
                 health=None, health_path='/health', host='127.0.0.1', port=0):
        self.truncated_ok = truncated_ok    # a request cut short is no error
        self.steps = list(steps)
        self.default = default
        self.send_continue = send_continue
        self.health = None
        self.health_path = health_path
        self.requests = []
        self.health_requests = []
        self.errors = []
        self.connections = 0
        self.open_connections = 0
        self.hanging = 0
        self.lock = threading.Lock()
        if health is not None:
            self.set_health(*health)
        self.conns = []
        self.hold = None
        self.host = host
        self.sock = _listener(port, host)
        self.port = self.sock.getsockname()[1]
        self.address = ('[%s]:%d' if ':' in host else '%s:%d') % (host, self.port)
        self._start()

    def _start(self):
        # Each life of the server has its own stop event: kill() ends one, restart() starts one.
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept_loop, args=(self.sock, self.stopping),
                                       daemon=True)
        self.thread.start()

    def _shutdown(self):
        self.stopping.set()
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.thread.join(5)

    def stop(self):
        self._shutdown()
        if self.hold is not None:
            self.hold.close()
            self.hold = None

    def kill(self):
        """Stop as a killed server would: the listener and every connection close
        (hanging ones too) and the port refuses connections, kept for restart()."""
        self._shutdown()
        self.hold = _hold_port(self.port, self.host)

    def restart(self):
        """Listen again on the same port after kill(); the script, requests and
        connection numbers carry on."""
        self.sock = _listener(self.port, self.host)
        self.hold.close()
        self.hold = None
        self._start()

    def set_health(self, status, body=b'{}'):
        """Answer GET health_path with status and body (bytes, str or a dict
        sent as JSON) from now on; None lets the script answer it again."""
        if isinstance(body, dict):
            body = json.dumps(body, separators=(',', ':'))
        with self.lock:
            self.health = None if status is None else (status, body)

    def _accept_loop(self, sock, stopping):
        while not stopping.is_set():
            try:
                ready, _, _ = select.select([sock], [], [], 0.05)
                if not ready:
                    continue
                conn, _ = sock.accept()
            except OSError:
                return
            with self.lock:
                index = self.connections
                self.connections += 1
                self.open_connections += 1
                self.conns.append(conn)
                reset_now = self._take_accept_step()
            if reset_now:
                _arm_reset(conn, stopping)
                self._closed(conn)
                continue
            threading.Thread(target=self._serve, args=(conn, index, stopping), daemon=True).start()

    def _take_accept_step(self):
        """Whether the connection just accepted is to be reset at once (lock held)."""
        if self.steps:
            if self.steps[0]['action'] != 'reset_on_accept':
                return False
            self.steps.pop(0)
            return True
        return self.default is not None and self.default['action'] == 'reset_on_accept'

    def _closed(self, conn):
        with self.lock:
            self.open_connections -= 1
            if conn in self.conns:
                self.conns.remove(conn)
        try:
            conn.close()
        except OSError:
            pass

    def _next_step(self):
        with self.lock:
            if self.steps:
                return self.steps.pop(0)
        return self.default

    def _health_answer(self, req):
        with self.lock:
            health = self.health
            if health is None or req.method != 'GET' or \
                    req.target.split('?')[0] != self.health_path:
                return None
            self.health_requests.append(req)
        return http_response(*health)

    def _serve(self, conn, index, stopping):
        reader = _SockReader(conn, stopping)
        try:
            while not stopping.is_set():
                req = self._read_request(reader, conn, index)
                if req is None:
                    break
                health = self._health_answer(req)
                if health is not None:
                    conn.sendall(health)
                    continue
                with self.lock:
                    self.requests.append(req)
                step = self._next_step()
                if step is None:
                    self.errors.append('unexpected request %r' % req)
                    step = answer(http_response(500, b'{"unexpected":true}'), close=True)
                if step['action'] == 'reset_on_accept':
                    self.errors.append('request on connection %d while the next step resets a new '
                                       'connection: %r' % (index, req))
                    _arm_reset(conn, stopping)
                    break
                if step['expect'] is not None:
                    problem = step['expect'](req)
                    if problem:
                        self.errors.append(problem)
                data = step['data'](req) if callable(step['data']) else step['data']
                if step['action'] == 'hang':
                    if data:
                        conn.sendall(data)
                    with self.lock:
                        self.hanging += 1
                    stopping.wait()
                    with self.lock:
                        self.hanging -= 1
                    break
                if step['action'] == 'pieces':
                    for i in range(0, len(data), step['piece']):
                        conn.sendall(data[i:i + step['piece']])
                        if stopping.wait(step['delay']):
                            break
                elif step['action'] == 'parts':
                    for part, wait in step['parts']:
                        conn.sendall(part)
                        if isinstance(wait, threading.Event):
                            while not wait.wait(0.05) and not stopping.is_set():
                                pass
                        if stopping.wait(0 if isinstance(wait, threading.Event) else wait):
                            break
                elif data:
                    if step.get('delay') and stopping.wait(step['delay']):
                        break
                    conn.sendall(data)
                if step['close'] == 'reset':
                    _arm_reset(conn, stopping)
                    break
                if step['close'] == 'idle':
                    if step['idle'] > 0 and reader.readable(step['idle']):
                        continue
                    break
                if step['close']:
                    break
        except (OSError, ProtocolError) as e:
            expected = isinstance(e, (ConnectionResetError, BrokenPipeError)) or \
                (self.truncated_ok and isinstance(e, ProtocolError) and 'closed' in str(e))
            if not stopping.is_set() and not expected:
                self.errors.append('connection %d: %s' % (index, e))
        finally:
            self._closed(conn)

    def _read_request(self, reader, conn, index):
        req = Request(index)
        head = reader.until(b'\r\n\r\n')
        if head is None:
            return None
        req.raw = req.head = head
        lines = head[:-4].split(b'\r\n')
        parts = lines[0].split(b' ')
        if len(parts) != 3:
            raise ProtocolError('bad request line %r' % lines[0])
        req.method, req.target, req.version = (p.decode('latin-1') for p in parts)
        for line in lines[1:]:
            m = _HEADER_LINE.match(line + b'\r\n')
            if not m:
                raise ProtocolError('bad header line %r' % line)
            req.headers.append((m.group(1).decode(), m.group(2).decode('latin-1')))
        te = ','.join(req.all('Transfer-Encoding')).lower()
        cl = req.header('Content-Length')
        has_body = 'chunked' in te or (cl is not None and cl != '0')
        if has_body and self.send_continue and \
                (req.header('Expect') or '').lower() == '100-continue':
            conn.sendall(b'HTTP/1.1 100 Continue\r\n\r\n')
        if 'chunked' in te:
            req.framing = 'chunked'
            while True:
                line = reader.until(b'\r\n')
                if line is None:
                    raise ProtocolError('closed in chunked body')
                req.raw += line
                m = _CHUNK_LINE.match(line)
                if not m:
                    raise ProtocolError('bad chunk line %r' % line)
                size = int(m.group(1), 16)
                req.chunks.append(size)
                if size == 0:
                    break
                data = reader.exact(size + 2)
                if data is None:
                    raise ProtocolError('closed in chunk data')
                if not data.endswith(b'\r\n'):
                    raise ProtocolError('chunk data not followed by CRLF')
                req.raw += data
                req.body += data[:-2]
            while True:
                line = reader.until(b'\r\n')
                if line is None:
                    raise ProtocolError('closed in trailers')
                req.raw += line
                if line == b'\r\n':
                    break
        elif cl is not None:
            req.framing = 'length'
            data = reader.exact(int(cl))
            if data is None:
                raise ProtocolError('closed in body')
            req.raw += data
            req.body = data
        return req


class _SockReader:
    def __init__(self, conn, stopping):
        self.conn = conn
        self.buf = b''
        self.stopping = stopping

    def _fill(self):
        while not self.stopping.is_set():
            ready, _, _ = select.select([self.conn], [], [], 0.05)
            if ready:
                try:
                    data = self.conn.recv(65536)
                except ConnectionResetError:
                    data = b''
                if not data:
                    return False
                self.buf += data
                return True
        return False

    def readable(self, timeout):
        """True when bytes are buffered, or arrive (or EOF) within timeout seconds."""
        deadline = time.monotonic() + timeout
        while not self.buf and not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select([self.conn], [], [], min(0.05, remaining))
            if ready:
                return True
        return bool(self.buf)

    def until(self, mark):
        while True:
            i = self.buf.find(mark)
            if i >= 0:
                out, self.buf = self.buf[:i + len(mark)], self.buf[i + len(mark):]
                return out
            if not self._fill():
                if self.buf and mark == b'\r\n\r\n':
                    raise ProtocolError('closed inside a request head: %r' % self.buf)
                return None

    def exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


# ------------------------------------------------------------------ processes

class Daemon:
    """A running jsongate. port is its first listener's port."""

    def __init__(self, env, conf, port, args=(), cwd=None, stack_kb=None):
        self.env = env
        self.port = port
        self.dir = env.tmp
        self.config_path = os.path.join(env.tmp, 'jsongate-%d.yaml' % port)
        self.stderr_path = os.path.join(env.tmp, 'jsongate-%d.stderr' % port)
        self.stdout_path = os.path.join(env.tmp, 'jsongate-%d.stdout' % port)
        self.write_config(conf)
        self.cmd = WRAPPER + [JSONGATE, '-f', '-c', self.config_path] + list(args)
        def limit_stack():
            import resource
            hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
            resource.setrlimit(resource.RLIMIT_STACK, (stack_kb * 1024, hard))
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, cwd=cwd,
                                     stdout=open(self.stdout_path, 'wb'),
                                     stderr=open(self.stderr_path, 'wb'),
                                     preexec_fn=limit_stack if stack_kb else None)
        self.pid = self.proc.pid
        self.signalled = False
        self.returncode = None

    def write_config(self, conf):
        """Writes the configuration file (a dict or YAML text) in place."""
        text = conf if isinstance(conf, str) else to_yaml(conf) + '\n'
        tmp = self.config_path + '.tmp'
        with open(tmp, 'w') as f:
            f.write(text)
        os.rename(tmp, self.config_path)
        self.config_text = text

    def log(self):
        with open(self.stderr_path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')

    def wait_log(self, pattern, timeout=5, start=0):
        """Polls the error log for a regex; returns the match or None."""
        rx = re.compile(pattern)
        return wait_until(lambda: rx.search(self.log(), start), timeout * SLOW)

    def alive(self):
        return self.proc.poll() is None

    def wait_ready(self, timeout=10):
        """Connects to the listener in a loop until it accepts."""
        deadline = time.monotonic() + timeout * SLOW
        while time.monotonic() < deadline:
            if not self.alive():
                raise CheckFailed('jsongate exited with status %s before listening:\n%s'
                                  % (self.proc.returncode, self.log()[-2000:]))
            # Another test running in parallel may have been handed the same port: only
            # a listening socket of this process counts.
            if listening_sockets(self.port) & process_sockets(self.pid):
                return True
            time.sleep(0.02)
        raise CheckFailed('jsongate not listening on port %d after %ss:\n%s'
                          % (self.port, timeout * SLOW, self.log()[-2000:]))

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after the deadline; returns the exit status."""
        if self.proc.poll() is None:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.returncode = 'killed'
                return self.returncode
        self.returncode = self.proc.returncode
        return self.returncode

    def rss(self):
        return rss_kb(self.pid)


class Demo:
    """A running demo upstream."""

    def __init__(self, env):
        portfile = os.path.join(env.tmp, 'demo-%d.port' % len(env.procs))
        self.stderr_path = portfile + '.stderr'
        self.proc = subprocess.Popen([DEMO_UPSTREAM, '-l', '127.0.0.1:0', '-p', portfile],
                                     stdin=subprocess.DEVNULL,
                                     stderr=open(self.stderr_path, 'wb'))
        ok = wait_until(lambda: os.path.exists(portfile) or self.proc.poll() is not None,
                        10)
        if not ok or self.proc.poll() is not None:
            raise CheckFailed('demo upstream did not start')
        with open(portfile) as f:
            self.port = int(f.read().strip())
        self.address = '127.0.0.1:%d' % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ------------------------------------------------------------------ suite and cases

class Env:
    """What a case uses; everything it starts is torn down after it."""

    def __init__(self, suite, name):
        self.suite = suite
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix='jsongate-scenario-')
        self.procs = []
        self.daemons = []
        self.upstreams = []
        self.clients = []
        self.held = []

    # -- starting things
    def daemon(self, conf, port=None, args=(), wait=True, cwd=None, stack_kb=None):
        """Starts jsongate on conf (a dict gets a listener on a free port), in the working
        directory cwd (default: the test's); stack_kb: its stack limit (RLIMIT_STACK, which
        sizes its threads' stacks too)."""
        port = port or free_port()
        if isinstance(conf, dict) and 'listeners' not in conf:
            conf = dict(conf, listeners=[{'listen': '127.0.0.1:%d' % port}])
        d = Daemon(self, conf, port, args, cwd, stack_kb)
        self.daemons.append(d)
        if wait:
            d.wait_ready()
        return d

    def scripted(self, steps=(), default=None, **kw):
        up = ScriptedUpstream(steps, default, **kw)
        self.upstreams.append(up)
        return up

    def closed_port(self):
        """A port on 127.0.0.1 that refuses connections for the whole case:
        bound without listening, so nothing else can take it meanwhile."""
        s = _hold_port()
        self.held.append(s)
        return s.getsockname()[1]

    def demo(self):
        d = Demo(self)
        self.procs.append(d)
        return d

    def client(self, port, **kw):
        c = Client(port, **kw)
        self.clients.append(c)
        return c

    def run(self, cmd, timeout=30, **kw):
        """Runs a command (curl, jsongate -t) and returns the CompletedProcess."""
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout * SLOW, **kw)

    # -- checks
    def check(self, what, cond, detail=''):
        return self.suite.record('%s: %s' % (self.name, what), bool(cond), detail)

    def eq(self, what, got, want):
        return self.check(what, got == want, _difference(got, want))

    def require(self, what, cond, detail=''):
        if not self.check(what, cond, detail):
            raise CheckFailed(what)

    def gateway_error(self, what, r, status, code, message, close, request_id=None,
                      headers=()):
        """Asserts the exact bytes of a gateway error response.

        The request id is the given one, or 32 lowercase hex digits; a
        message of None accepts any message; headers are the (name, value)
        lines the error carries at the end of its head (a 405's Allow).
        """
        if r is None:
            return self.check(what, False, 'no response (connection closed)')
        rid = r.header('X-Request-Id', '')
        if request_id is None:
            self.check(what + ': generated request id is 32 hex', re.fullmatch('[0-9a-f]{32}', rid),
                       'got %r' % rid)
        else:
            self.eq(what + ': request id', rid, request_id)
        if message is None:         # any message: check the shape, then take it
            m = re.fullmatch(rb'\{"error":\{"status":%d,"code":"%s","message":"([^"\\]*)",'
                             rb'"request_id":"[^"]*"\}\}' % (status, code.encode()), r.body)
            self.check(what + ': body shape', m, 'got %r' % r.body[:300])
            message = m.group(1).decode() if m else ''
        body = gateway_error_body(status, code, message, rid)
        want = ('HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n'
                'X-Request-Id: %s\r\n%s%s\r\n' % (status, REASONS[status], len(body), rid,
                                                  'Connection: close\r\n' if close else '',
                                                  ''.join('%s: %s\r\n' % h for h in headers))
                ).encode()
        self.eq(what + ': head', r.head, want)
        self.check(what + ': a Date of now', date_is_now(r.date), r.date)
        self.eq(what + ': body', r.body, body)

    def teardown(self):
        for c in self.clients:
            c.close()
        for d in self.daemons:
            was_alive = d.alive()
            if not d.signalled:
                self.check('jsongate %d was still running at the end' % d.port, was_alive,
                           'exit status %s' % d.proc.returncode)
            status = d.stop()
            self.check('jsongate %d exited on SIGTERM' % d.port, status != 'killed',
                       'had to be killed')
            if WRAPPER:
                self.eq('jsongate %d exit status under %s' % (d.port, WRAPPER[0]), status, 0)
            log = d.log()
            marks = [m for m in SANITIZER_MARKS if m in log]
            self.check('jsongate %d stderr free of sanitizer reports' % d.port, not marks,
                       log[log.find(marks[0]) - 200:][:3000] if marks else '')
        for up in self.upstreams:
            up.stop()
            self.check('upstream :%d saw only expected, well-formed requests' % up.port,
                       not up.errors, '; '.join(up.errors)[:2000])
        for p in self.procs:
            p.stop()
        for s in self.held:
            s.close()


def _short(value, limit=400):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + '...(%d chars)' % len(text)


def _difference(got, want):
    """got/want, shortened; for long strings, where they first differ."""
    if isinstance(got, (bytes, str)) and isinstance(want, type(got)) and \
            max(len(got), len(want)) > 200:
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        return 'lengths %d and %d (want), first difference at offset %d: got %s, want %s' % (
            len(got), len(want), i, _short(got[max(0, i - 40):i + 80], 300),
            _short(want[max(0, i - 40):i + 80], 300))
    return 'got %s, want %s' % (_short(got), _short(want))


class Suite:
    def __init__(self, path):
        self.name = os.path.basename(path)
        self.cases = []
        self.passed = 0
        self.failed = 0
        self.n = 0
        self.case_failed = False
        self.lock = threading.Lock()

    def case(self, fn):
        self.cases.append(fn)
        return fn

    def record(self, what, ok, detail=''):
        with self.lock:
            self.n += 1
            if ok:
                self.passed += 1
                print('ok %d - %s' % (self.n, what), flush=True)
            else:
                self.failed += 1
                self.case_failed = True
                print('FAIL %d - %s: %s' % (self.n, what, detail), flush=True)
        return ok

    def _watchdog(self):
        # A hung test must fail, not block make check forever.
        env = self.current
        print('FAIL - %s: watchdog: the file ran past %ds' % (self.name, FILE_DEADLINE), flush=True)
        if env is not None:
            for d in env.daemons:
                d.proc.kill()
            for p in env.procs:
                p.proc.kill()
        print('%d passed, %d failed' % (self.passed, self.failed + 1), flush=True)
        os._exit(1)

    def run(self):
        self.current = None
        timer = threading.Timer(FILE_DEADLINE, self._watchdog)
        timer.daemon = True
        timer.start()
        only = os.environ.get('SCENARIO_ONLY')
        for fn in self.cases:
            if only and fn.__name__ not in only.split(','):
                continue
            env = self.current = Env(self, fn.__name__)
            self.case_failed = False
            print('# %s' % fn.__name__, flush=True)
            try:
                fn(env)
            except CheckFailed:
                pass
            except Exception:
                self.record('%s: raised' % fn.__name__, False, traceback.format_exc())
            finally:
                try:
                    env.teardown()
                except Exception:
                    self.record('%s: teardown' % fn.__name__, False, traceback.format_exc())
            if self.case_failed:
                for d in env.daemons:
                    print('# jsongate stderr (%s), last lines:' % d.stderr_path)
                    for line in d.log().splitlines()[-15:]:
                        print('#   ' + line)
                    print('# config:\n' + '\n'.join('#   ' + l for l in d.config_text.splitlines()))
            else:
                shutil.rmtree(env.tmp, ignore_errors=True)
        timer.cancel()
        print('%d passed, %d failed' % (self.passed, self.failed), flush=True)
        sys.exit(0 if self.failed == 0 and self.passed > 0 else 1)
