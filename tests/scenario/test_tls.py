"""TLS on both sides: certificates by SNI, protocol versions, client certificates, upstream
verification (name, expiry, servers given by host name, failover from a server failing it), session resumption both ways, large bodies and keep-alive over
TLS, X-Forwarded-Proto, certificate errors at load, renewed certificates on SIGHUP.

A CA and every certificate are made at test time with the openssl command."""

import os
import re
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import zlib

from harness import *
import dns_server

T = Suite(__file__)
PKI = tempfile.mkdtemp(prefix='jsongate-tls-')

CA_CNF = """[ ca ]
default_ca = ca_default
[ ca_default ]
dir = %(dir)s
database = %(dir)s/index.txt
new_certs_dir = %(dir)s
serial = %(dir)s/serial
default_md = sha256
policy = policy_any
copy_extensions = copy
unique_subject = no
[ policy_any ]
commonName = supplied
"""


def openssl(*args, stdin=None):
    r = subprocess.run(('openssl',) + args, cwd=PKI, capture_output=True, input=stdin,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError('openssl %s: %s' % (' '.join(args), r.stderr.decode()[-2000:]))
    return r


def pki_path(name):
    return os.path.join(PKI, name)


def make_ca(name):
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
            '-keyout', name + '.key', '-out', name + '.crt', '-days', '30',
            '-subj', '/CN=jsongate test %s' % name,
            '-addext', 'basicConstraints=critical,CA:TRUE',
            '-addext', 'keyUsage=critical,keyCertSign,cRLSign')


def make_cert(name, cn, sans=None, ca='ca', client=False, dates=None):
    """A P-256 key and a certificate signed by ca; dates=(start, end) signs with openssl ca."""
    exts = []
    if sans:
        exts += ['-addext', 'subjectAltName=' + ','.join(sans)]
    exts += ['-addext', 'extendedKeyUsage=' + ('clientAuth' if client else 'serverAuth')]
    openssl('req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
            '-keyout', name + '.key', '-out', name + '.csr', '-subj', '/CN=' + cn, *exts)
    if dates is None:
        ext = pki_path(name + '.ext')
        with open(ext, 'w') as f:
            if sans:
                f.write('subjectAltName=%s\n' % ','.join(sans))
            f.write('extendedKeyUsage=%s\n' % ('clientAuth' if client else 'serverAuth'))
        openssl('x509', '-req', '-in', name + '.csr', '-CA', ca + '.crt', '-CAkey', ca + '.key',
                '-CAcreateserial', '-days', '30', '-sha256', '-extfile', ext,
                '-out', name + '.crt')
    else:
        # OpenSSL 3.0's req/x509 take no start date: openssl ca does.
        with open(pki_path('ca.cnf'), 'w') as f:
            f.write(CA_CNF % {'dir': PKI})
        open(pki_path('index.txt'), 'a').close()
        if not os.path.exists(pki_path('serial')):
            with open(pki_path('serial'), 'w') as f:
                f.write('1000\n')
        openssl('ca', '-batch', '-config', 'ca.cnf', '-cert', ca + '.crt', '-keyfile',
                ca + '.key', '-in', name + '.csr', '-out', name + '.crt', '-notext',
                '-startdate', dates[0], '-enddate', dates[1])


make_ca('ca')
make_ca('other-ca')
make_cert('a', 'a.test', ['DNS:a.test', 'IP:127.0.0.1'])
make_cert('b', 'b-wildcard', ['DNS:*.b.test'])
make_cert('b-exact', 'x.b.test', ['DNS:x.b.test'])
make_cert('up', 'up.test', ['DNS:up.test', 'IP:127.0.0.1'])
make_cert('named', 'named.test', ['DNS:named.test'])
make_cert('expired', 'up.test', ['DNS:up.test', 'IP:127.0.0.1'],
          dates=('20200101000000Z', '20200201000000Z'))
make_cert('client', 'client one', client=True)
make_cert('stranger', 'stranger', ca='other-ca', client=True)
CA = pki_path('ca.crt')


def tls_listener(port, certs=('a',), **extra):
    tls = {'certificates': [{'cert': pki_path(c + '.crt'), 'key': pki_path(c + '.key')}
                            for c in certs]}
    tls.update(extra)
    return {'listen': '127.0.0.1:%d' % port, 'tls': tls}


# Large bodies under valgrind take long: the upstream answers only after a whole upload.
SLOW_TIMEOUTS = {'upstream_connect': '2s', 'upstream_response': '60s', 'shutdown_grace': '5s'}


def tls_gateway(env, up_address, certs=('a',), upstream_tls=None, keepalive=8, workers=1,
                timeouts=None, **extra):
    port = free_port()
    conf = upstream_config(up_address, keepalive=keepalive, workers=workers,
                           listeners=[tls_listener(port, certs, **extra)])
    if timeouts:
        conf['timeouts'] = timeouts
    if upstream_tls is not None:
        conf['upstreams']['app']['tls'] = upstream_tls
    return env.daemon(conf, port=port)


def s_client(env, port, *args, stdin=b''):
    """openssl s_client's output (stdout and stderr) and exit status."""
    r = subprocess.run(['openssl', 's_client', '-connect', '127.0.0.1:%d' % port,
                        '-CAfile', CA] + list(args), input=stdin, capture_output=True,
                       timeout=30 * SLOW)
    return r.stdout.decode('utf-8', 'replace') + r.stderr.decode('utf-8', 'replace'), \
        r.returncode


def subject_cn(out):
    m = re.search(r'^subject=.*CN ?= ?([^,\n]+)', out, re.M)
    return m.group(1).strip() if m else None


def curl(env, url, *args):
    r = env.run(['curl', '-sS', '--cacert', CA, '--resolve', 'a.test:%s:127.0.0.1' %
                 url.split(':')[2].split('/')[0]] + list(args) + [url], timeout=120)
    return r


def tls_client(env, port, name='a.test', cert=None):
    """A harness Client over TLS (strict response parsing on a TLS socket)."""
    ctx = ssl.create_default_context(cafile=CA)
    if cert:
        ctx.load_cert_chain(pki_path(cert + '.crt'), pki_path(cert + '.key'))
    c = env.client(port, connect=False)
    c.sock = ctx.wrap_socket(socket.create_connection(('127.0.0.1', port),
                                                      timeout=IO_TIMEOUT),
                             server_hostname=name)
    return c


class TLSUpstream:
    """A TLS server answering every request with a small JSON body; records the SNI names
    asked for, handshakes and resumed sessions."""

    def __init__(self, cert, alert_after_request=False):
        self.alert_after_request = alert_after_request
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(pki_path(cert + '.crt'), pki_path(cert + '.key'))
        self.names = []
        self.handshakes = 0
        self.resumed = 0
        self.requests = []
        self.ctx.sni_callback = lambda sock, name, ctx: self.names.append(name)
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.address = '127.0.0.1:%d' % self.port
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(IO_TIMEOUT)
        try:
            s = self.ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        self.handshakes += 1
        self.resumed += bool(s.session_reused)
        buf = b''
        try:
            while True:
                while b'\r\n\r\n' not in buf:
                    data = s.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b'\r\n\r\n', 1)
                self.requests.append(head)
                if self.alert_after_request:
                    # A fatal alert in a plaintext record where only encrypted ones may
                    # come: the client's TLS layer fails the connection.
                    os.write(s.fileno(), b'\x15\x03\x03\x00\x02\x02\x28')
                    return
                body = b'{"ok":true}'
                s.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                          b'Content-Length: %d\r\n\r\n%s' % (len(body), body))
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()

    def stop(self):
        self.stopping = True
        self.sock.close()


def tls_upstream(env, cert, **kw):
    up = TLSUpstream(cert, **kw)
    env.procs.append(up)
    return up


# ------------------------------------------------------------------ listeners

@T.case
def sni_selects_certificate(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address, certs=('a', 'b', 'b-exact'))
    for name, want in (('a.test', 'a.test'), ('y.b.test', 'b-wildcard'),
                       ('x.b.test', 'x.b.test'), ('unknown.test', 'a.test')):
        out, rc = s_client(env, gw.port, '-servername', name)
        env.eq('SNI %s: certificate' % name, subject_cn(out), want)
    out, rc = s_client(env, gw.port, '-noservername')
    env.eq('no SNI: the first certificate', subject_cn(out), 'a.test')
    out, rc = s_client(env, gw.port, '-servername', 'y.b.test', '-verify_hostname', 'y.b.test',
                       '-verify_return_error')
    env.check('wildcard certificate verifies for y.b.test', 'Verify return code: 0 (ok)' in out,
              out[-800:])
    out, rc = s_client(env, gw.port, '-servername', 'a.test', '-alpn', 'h2,http/1.1')
    env.check('ALPN selects h2 (HTTP/2 is on with TLS)', 'ALPN protocol: h2' in out, out[-800:])
    out, rc = s_client(env, gw.port, '-servername', 'a.test', '-alpn', 'http/1.1')
    env.check('ALPN selects http/1.1 when asked for it', 'ALPN protocol: http/1.1' in out,
              out[-800:])


@T.case
def protocol_versions(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address)
    for flag in ('-tls1', '-tls1_1'):
        out, rc = s_client(env, gw.port, flag, '-cipher', 'DEFAULT@SECLEVEL=0')
        env.check('%s refused by the server' % flag,
                  rc != 0 and 'Cipher is (NONE)' in out and 'alert protocol version' in out,
                  out[-800:])
    for flag, proto in (('-tls1_2', 'TLSv1.2'), ('-tls1_3', 'TLSv1.3')):
        out, rc = s_client(env, gw.port, flag)
        env.check('%s accepted' % flag, re.search(r'New, %s, Cipher is' % re.escape(proto), out),
                  out[-800:])
    gw13 = tls_gateway(env, up.address, protocols=['TLSv1.3'])
    out, rc = s_client(env, gw13.port, '-tls1_2')
    env.check('protocols: [TLSv1.3] refuses TLS 1.2', rc != 0, out[-800:])
    out, rc = s_client(env, gw13.port, '-tls1_3')
    env.check('protocols: [TLSv1.3] accepts TLS 1.3', 'New, TLSv1.3, Cipher is' in out,
              out[-800:])


def negotiated(out):
    """The cipher s_client's connection got, or None."""
    m = re.search(r'^New, TLSv1\.[23], Cipher is (\S+)', out, re.M)
    return m.group(1) if m else None


@T.case
def cipher_preference(env):
    """By default the client's order picks the cipher; prefer_server_ciphers: true the
    server's (OpenSSL's TLS 1.3 order and its default TLS 1.2 list: AES-256 first)."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    aes128, aes256 = 'TLS_AES_128_GCM_SHA256', 'TLS_AES_256_GCM_SHA384'
    tls12 = ('ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384')
    for prefer, want in ((None, 'client'), (False, 'client'), (True, 'server')):
        extra = {} if prefer is None else {'prefer_server_ciphers': prefer}
        gw = tls_gateway(env, up.address, **extra)
        what = 'prefer_server_ciphers %s' % ('unset' if prefer is None else prefer)
        for order in ((aes128, aes256), (aes256, aes128)):
            out, rc = s_client(env, gw.port, '-tls1_3', '-ciphersuites', ':'.join(order))
            expect = order[0] if want == 'client' else aes256
            env.eq('%s, TLS 1.3, client asks %s first' % (what, order[0]), negotiated(out),
                   expect)
        for order in (tls12, tls12[::-1]):
            out, rc = s_client(env, gw.port, '-tls1_2', '-cipher', ':'.join(order))
            expect = order[0] if want == 'client' else tls12[1]
            env.eq('%s, TLS 1.2, client asks %s first' % (what, order[0]), negotiated(out),
                   expect)


@T.case
def client_certificates(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address, client_ca=CA, verify_client='on')
    c = tls_client(env, gw.port, cert='client')
    r = c.request('GET', '/mtls', [('Host', 'a.test')])
    env.eq('client certificate from the CA: accepted', r.status, 200)
    for cert, what in ((None, 'no client certificate'),
                       ('stranger', 'a certificate from another CA')):
        try:
            c = tls_client(env, gw.port, cert=cert)
            r = c.request('GET', '/mtls', [('Host', 'a.test')])
            ok = False
        except (ssl.SSLError, OSError, ProtocolError):
            ok = True
        env.check('%s: refused' % what, ok)
    gw2 = tls_gateway(env, up.address, client_ca=CA, verify_client='optional')
    c = tls_client(env, gw2.port)
    r = c.request('GET', '/optional', [('Host', 'a.test')])
    env.eq('verify_client optional: no certificate accepted', r.status, 200)
    c = tls_client(env, gw2.port, cert='client')
    r = c.request('GET', '/optional', [('Host', 'a.test')])
    env.eq('verify_client optional: a good certificate accepted', r.status, 200)


@T.case
def client_certificate_variables(env):
    """$ssl_client_s_dn and $ssl_client_verify in set, on request and response bodies."""
    ops = [{'set': {'dn': '$ssl_client_s_dn', 'verify': '$ssl_client_verify'}}]
    up = env.scripted(default=answer(http_response(200, b'{"a":1}')))
    port, plain_port = free_port(), free_port()
    conf = upstream_config(up.address, listeners=[
        tls_listener(port, client_ca=CA, verify_client='optional'),
        {'listen': '127.0.0.1:%d' % plain_port}], routes=[
        {'name': 'vars', 'match': {'path_prefix': '/'}, 'upstream': 'app',
         'request': ops, 'response': ops}])
    env.daemon(conf, port=port)
    json_body = [('Host', 'a.test'), ('Content-Type', 'application/json')]
    cases = (('a client certificate', lambda: tls_client(env, port, cert='client'),
              b'"dn":"CN=client one","verify":"SUCCESS"'),
             ('TLS without a certificate', lambda: tls_client(env, port),
              b'"dn":"","verify":"NONE"'),
             ('plain TCP', lambda: env.client(plain_port), b'"dn":"","verify":"NONE"'))
    for what, connect, fields in cases:
        c = connect()
        r = c.request('POST', '/v', json_body, body=b'{"q":1}')
        env.eq('%s: response body' % what, (r.status, r.body), (200, b'{"a":1,' + fields + b'}'))
        env.eq('%s: request body upstream' % what, up.requests[-1].body,
               b'{"q":1,' + fields + b'}')
        r = c.request('GET', '/v', [('Host', 'a.test')])
        env.eq('%s: again on the same connection' % what, r.body, b'{"a":1,' + fields + b'}')


@T.case
def forwarded_proto_and_keepalive(env):
    up = env.scripted(default=answer(http_response(200, b'{"n":1}')))
    gw = tls_gateway(env, up.address)
    c = tls_client(env, gw.port)
    for i in range(5):
        r = c.request('GET', '/ka/%d' % i, [('Host', 'a.test')])
        env.eq('keep-alive request %d over one TLS connection' % i, (r.status, r.body),
               (200, b'{"n":1}'))
    # pipelined: three requests in one write, answered in order
    c.send(b''.join(build_request('GET', '/pipe/%d' % i, [('Host', 'a.test')])
                    for i in range(3)))
    for i in range(3):
        r = c.read_response()
        env.eq('pipelined response %d' % i, r.status, 200)
    env.eq('upstream saw X-Forwarded-Proto https',
           {q.header('X-Forwarded-Proto') for q in up.requests}, {'https'})
    plain = env.daemon(upstream_config(up.address))
    env.client(plain.port).request('GET', '/plain', [('Host', 'a')])
    env.eq('plain listener still says http', up.requests[-1].header('X-Forwarded-Proto'), 'http')


def spin(seconds):
    """Waits without giving up the CPU: finer than time.sleep."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def plain_requests_to_tls(port, n, msg):
    """n clients in clear text, 8 at a time.  Five in eight send their request as soon as
    connected, 0 to 200 us after the connect (its bytes then arrive about when the gateway
    first looks at the socket); the others after a pause, in pieces after a pause, or their
    first byte at once and the rest later.  Returns what went wrong, as (client, way, what it
    got), for every client that did not get the exact 400 and then a close."""
    ways = ('at once',) * 5 + ('after a pause', 'in pieces', 'first byte at once')

    def one(i):
        way = ways[i % len(ways)]
        rid = 'plain-%d' % i
        request = ('GET /plain HTTP/1.1\r\nHost: a.test\r\nX-Request-Id: %s\r\n\r\n'
                   % rid).encode()
        body = gateway_error_body(400, 'bad_request', msg, rid)
        want = (b'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n'
                b'Content-Length: %d\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n'
                % (len(body), rid.encode())) + body
        pause = 0.002 * (1 + i % 10)
        c = Client(port)
        try:
            if way == 'at once':
                spin((i * 37 % 200) / 1e6)
                c.send(request)
            elif way == 'after a pause':
                time.sleep(pause)
                c.send(request)
            elif way == 'in pieces':
                time.sleep(pause)
                for k in range(0, len(request), 7):
                    c.send(request[k:k + 7])
                    time.sleep(0.001)
            else:
                c.send(request[:1])
                time.sleep(pause)
                c.send(request[1:])
            closed = c.wait_closed(10 * SLOW)
        except OSError as e:
            closed = 'error %r' % e
        finally:
            c.close()
        # The Date line (the clock) checked, then left out, as the Client does.
        m = re.search(rb'\r\nDate: ([^\r\n]*)\r\n', c.buf)
        got = c.buf
        if m and date_is_now(m.group(1).decode()):
            got = got[:m.start()] + b'\r\n' + got[m.end():]
        if closed is True and got == want:
            return None
        return (i, way, c.buf[:120] if closed is True else closed)
    results = []
    lock = threading.Lock()

    def run(indexes):
        for i in indexes:
            r = one(i)
            with lock:
                results.append(r)
    threads = [threading.Thread(target=run, args=(range(t, n, 8),)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(r for r in results if r is not None)


@T.case
def plain_http_to_tls_listener(env):
    """Plain HTTP to a TLS port gets a clear-text 400, as nginx answers, then a close."""
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address)
    msg = 'plain HTTP request sent to HTTPS port'
    c = env.client(gw.port)
    r = c.request('GET', '/plain', [('Host', 'a.test'), ('X-Request-Id', 'plain-1')])
    env.gateway_error('GET in clear text', r, 400, 'bad_request', msg, close=True,
                      request_id='plain-1')
    env.check('then closed', c.wait_closed(5), 'still open')
    c = env.client(gw.port)
    c.send(b'\r\nPOST /plain HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\n{}')
    r = c.read_response('POST')
    env.gateway_error('POST in clear text after an empty line', r, 400, 'bad_request', msg,
                      close=True)
    env.check('then closed too', c.wait_closed(5), 'still open')
    failed = plain_requests_to_tls(gw.port, 1000, msg)
    env.eq('1,000 more clients in clear text, sending at once, after a pause or in pieces: '
           'each gets the exact 400, then a close', failed, [])
    c = env.client(gw.port)
    c.send(b'\x00\x01\x02\x03 not TLS and not HTTP\r\n\r\n')
    env.check('bytes that are neither: closed without an answer', c.wait_closed(5) and c.buf == b'',
              c.buf[:200])
    r = tls_client(env, gw.port).request('GET', '/tls', [('Host', 'a.test')])
    env.eq('TLS clients are served as before', r.status, 200)
    env.eq('only the TLS request reached the upstream', [q.target for q in up.requests], ['/tls'])


@T.case
def large_bodies(env):
    demo = env.demo()
    gw = tls_gateway(env, demo.address, timeouts=SLOW_TIMEOUTS)
    n = 64 << 20
    r = curl(env, 'https://a.test:%d/bytes/%d' % (gw.port, n), '-o', '-')
    env.eq('64 MB download over TLS: size', len(r.stdout), n)
    env.eq('64 MB download over TLS: bytes', zlib.crc32(r.stdout), pattern_crc(n))
    src = os.path.join(env.tmp, 'upload')
    with open(src, 'wb') as f:
        block = pattern_block()
        for _ in range(n // len(block)):
            f.write(block)
        f.write(block[:n % len(block)])
    r = curl(env, 'https://a.test:%d/sink' % gw.port, '--data-binary', '@' + src,
             '-H', 'Content-Type: application/octet-stream', '-o', '-')
    env.eq('64 MB upload over TLS reached the upstream intact', r.stdout,
           b'{"bytes":%d,"crc32":%d}' % (n, pattern_crc(n)))
    # curl with several URLs reuses its connection
    urls = ['https://a.test:%d/bytes/%d' % (gw.port, 100000 + i) for i in range(3)]
    r = env.run(['curl', '-sS', '-v', '--cacert', CA, '--resolve',
                 'a.test:%d:127.0.0.1' % gw.port] + urls, timeout=60)
    env.eq('keep-alive with curl: bodies', len(r.stdout), 300003)
    env.check('keep-alive with curl: connection reused',
              b'Re-using existing connection' in r.stderr or b'Reusing existing' in r.stderr,
              r.stderr[-600:])


class Trickle:
    """A socket read 16 KB at a time, 5 ms apart: a client slower than the answer."""

    def __init__(self, sock):
        self.sock = sock

    def recv(self, n):
        time.sleep(0.005)
        return self.sock.recv(min(n, 16384))

    def __getattr__(self, name):
        return getattr(self.sock, name)


@T.case
def slow_reader(env):
    """An answer the client reads late and slowly comes whole: the records a full socket did
    not take go out before the connection closes, or before the next answer.  The answer is
    larger than the socket buffers can take, so its end reaches jsongate while the socket is
    full."""
    demo = env.demo()
    gw = tls_gateway(env, demo.address, timeouts=SLOW_TIMEOUTS)
    n = 8 << 20
    for close in (True, False):
        what = 'Connection: close' if close else 'keep-alive'
        ctx = ssl.create_default_context(cafile=CA)
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        raw.settimeout(IO_TIMEOUT)
        raw.connect(('127.0.0.1', gw.port))
        c = env.client(gw.port, connect=False)
        c.sock = Trickle(ctx.wrap_socket(raw, server_hostname='a.test'))
        c.send(b'GET /bytes/%d HTTP/1.1\r\nHost: a.test\r\n%s\r\n' %
               (n, b'Connection: close\r\n' if close else b''))
        time.sleep(1.5 * SLOW)     # the answer fills the socket and waits
        r = c.read_response(keep_body=False, timeout=60 * SLOW)
        env.eq('%s, read late: status' % what, r.status, 200)
        env.eq('%s, read late: size' % what, r.body_len, n)
        env.eq('%s, read late: bytes' % what, r.body_crc, pattern_crc(n))
        if close:
            env.eq('%s: then the end of the stream' % what, c.read_response(), None)
        else:
            r = c.request('GET', '/bytes/10', [('Host', 'a.test')])
            env.eq('%s: the next answer on the connection' % what, (r.status, r.body_len),
                   (200, 10))
        c.close()


@T.case
def resumption(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address, workers=2)
    for flag in ('-tls1_3', '-tls1_2'):
        sess = os.path.join(env.tmp, 'sess' + flag)
        req = b'GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n'
        out, rc = s_client(env, gw.port, flag, '-servername', 'a.test', '-sess_out', sess,
                           '-ign_eof', stdin=req)
        env.check('%s: first connection is new' % flag, re.search(r'^New, ', out, re.M),
                  out[-600:])
        reused = 0
        for i in range(3):
            out, rc = s_client(env, gw.port, flag, '-servername', 'a.test', '-sess_in', sess,
                               '-ign_eof', stdin=req)
            reused += bool(re.search(r'^Reused, ', out, re.M))
        env.eq('%s: later connections (either worker) are reused' % flag, reused, 3)

    # TLS 1.3 clients use a ticket once (RFC 8446 C.4): a resumed connection must bring a
    # fresh ticket, or every other connection would pay a full handshake.
    ctx = ssl.create_default_context(cafile=CA)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    session, reused = None, []
    for i in range(4):
        sock = ctx.wrap_socket(socket.create_connection(('127.0.0.1', gw.port),
                                                        timeout=IO_TIMEOUT),
                               server_hostname='a.test', session=session)
        sock.sendall(b'GET /t HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n')
        while sock.recv(65536):
            pass
        reused.append(sock.session_reused)
        if i > 0:
            env.check('TLS 1.3 connection %d brings a new ticket' % i,
                      sock.session is not None and sock.session.id != session.id)
        session = sock.session
        sock.close()
    env.eq('TLS 1.3: each connection resumes with the ticket of the one before', reused,
           [False, True, True, True])


@T.case
def session_tickets_off(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    gw = tls_gateway(env, up.address, session_tickets=False)
    req = b'GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n'
    for flag in ('-tls1_3', '-tls1_2'):
        sess = os.path.join(env.tmp, 'sess-off' + flag)
        out, rc = s_client(env, gw.port, flag, '-servername', 'a.test', '-sess_out', sess,
                           '-ign_eof', stdin=req)
        env.check('%s without tickets: the request is answered' % flag,
                  'HTTP/1.1 200 OK' in out, out[-600:])
        env.check('%s without tickets: no ticket is sent' % flag,
                  'TLS session ticket:' not in out, out[-600:])
        # s_client saves a session only when there is one to resume
        resume = ['-sess_in', sess] if os.path.exists(sess) else []
        out, rc = s_client(env, gw.port, flag, '-servername', 'a.test', '-ign_eof', *resume,
                           stdin=req)
        env.check('%s without tickets: the next connection is a full handshake' % flag,
                  re.search(r'^New, ', out, re.M) and not re.search(r'^Reused, ', out, re.M),
                  out[-600:])


# ------------------------------------------------------------------ upstreams

@T.case
def upstream_verification(env):
    up = tls_upstream(env, 'up')
    gw = env.daemon(upstream_config(up.address))
    conf = upstream_config(up.address)
    conf['upstreams']['app']['tls'] = {'ca': CA}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/by-ip', [('Host', 'a')])
    env.eq('verified by the server address (IP SAN)', (r.status, r.body), (200, b'{"ok":true}'))
    env.eq('no SNI for an address', up.names, [None])

    conf['upstreams']['app']['tls'] = {'ca': CA, 'server_name': 'up.test'}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/by-name', [('Host', 'a')])
    env.eq('server_name: verified', r.status, 200)
    env.eq('server_name sent as SNI', up.names[-1], 'up.test')

    conf['upstreams']['app']['tls'] = {'ca': CA, 'server_name': 'wrong.test'}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/mismatch', [('Host', 'a')])
    env.gateway_error('hostname mismatch', r, 502, 'upstream_tls',
                      'TLS handshake with upstream app failed: ' +
                      'certificate verify failed: hostname mismatch', close=False)
    env.check('mismatch logged with the reason',
              gw.wait_log(r'TLS handshake with upstream .* failed: certificate verify failed: '
                          r'hostname mismatch'))

    conf['upstreams']['app']['tls'] = {}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/untrusted', [('Host', 'a')])
    env.gateway_error('CA not in the system store', r, 502, 'upstream_tls',
                      'TLS handshake with upstream app failed: ' +
                      'certificate verify failed: unable to get local issuer certificate',
                      close=False)

    conf['upstreams']['app']['tls'] = {'verify': False}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/unverified', [('Host', 'a')])
    env.eq('verify: false accepts it', r.status, 200)


@T.case
def upstream_by_name(env):
    """A server given by host name: SNI and verification use the name, not its address."""
    dns = dns_server.start(env)
    dns.set('named.test', a=['127.0.0.1'])
    up = tls_upstream(env, 'named')
    conf = upstream_config('named.test:%d' % up.port, resolver=dns.address)
    conf['upstreams']['app']['tls'] = {'ca': CA}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/by-name', [('Host', 'a')])
    env.eq('verified by the host name', (r.status, r.body), (200, b'{"ok":true}'))
    env.eq('the host name sent as SNI', up.names, ['named.test'])


@T.case
def health_checks_by_name(env):
    """A TLS health check of a server given by host name verifies the certificate for the
    name, as requests do."""
    dns = dns_server.start(env)
    dns.set('named.test', a=['127.0.0.1'])
    up = tls_upstream(env, 'named')
    aport = free_port()
    conf = upstream_config('named.test:%d' % up.port, resolver=dns.address,
                           admin={'listen': '127.0.0.1:%d' % aport})
    conf['upstreams']['app']['tls'] = {'ca': CA}
    conf['upstreams']['app']['health'] = {'path': '/health', 'interval': '100ms',
                                          'fails': 1, 'passes': 1}
    gw = env.daemon(conf)
    server = '127.0.0.1:%d' % up.port

    def checks(result):
        r = Client(aport).request('GET', '/metrics', [('Host', 'admin')])
        key = ('jsongate_upstream_health_checks_total{upstream="app",server="%s",result="%s"} '
               % (server, result))
        return sum(int(float(line[len(key):])) for line in r.body.decode().splitlines()
                   if line.startswith(key))
    env.require('three checks ran', wait_until(lambda: checks('passed') + checks('failed') >= 3,
                                               10))
    env.eq('every check passed verification by the name', checks('failed'), 0)
    env.check('the name sent as SNI by the checks', set(up.names) == {'named.test'}, up.names)
    r = env.client(gw.port).request('GET', '/after', [('Host', 'a')])
    env.eq('the server stays in service', (r.status, r.body), (200, b'{"ok":true}'))


@T.case
def upstream_expired(env):
    up = tls_upstream(env, 'expired')
    conf = upstream_config(up.address)
    conf['upstreams']['app']['tls'] = {'ca': CA}
    gw = env.daemon(conf)
    r = env.client(gw.port).request('GET', '/expired', [('Host', 'a')])
    env.gateway_error('expired upstream certificate', r, 502, 'upstream_tls',
                      'TLS handshake with upstream app failed: ' +
                      'certificate verify failed: certificate has expired', close=False)


@T.case
def tls_handshake_failover(env):
    """A server whose certificate fails verification is a failed connect: nothing reached it,
    so GETs and POSTs alike go to the other server, counted as connect_error retries."""
    bad = tls_upstream(env, 'expired')
    good = tls_upstream(env, 'up')
    aport = free_port()
    conf = upstream_config(bad.address, good.address, admin={'listen': '127.0.0.1:%d' % aport})
    conf['upstreams']['app'].update(tls={'ca': CA}, max_fails=0)
    gw = env.daemon(conf)
    answers = []
    for method, body in (('GET', None), ('POST', b'{}')):
        for i in range(4):
            c = env.client(gw.port)
            hdrs = [('Host', 'a')] + ([('Content-Length', '2')] if body else [])
            r = c.request(method, '/%s%d' % (method, i), hdrs, body=body)
            answers.append((method, r.status, r.body, r.header('X-Request-Id')))
            c.close()
    env.eq('every GET and POST answered by the good server', [a[:3] for a in answers],
           [(m, 200, b'{"ok":true}') for m in ('GET', 'POST') for _ in range(4)])
    env.eq('the good server got all 8', len(good.requests), 8)
    failed = re.findall(r'TLS handshake with upstream app server %s failed: certificate verify '
                        r'failed: certificate has expired \(request ([0-9a-f]+)\)'
                        % re.escape(bad.address), gw.log())
    methods = sorted({m for m, _, _, rid in answers if rid in failed})
    env.eq('requests of both methods failed over', methods, ['GET', 'POST'])

    def metric(name, **labels):
        r = Client(aport).request('GET', '/metrics', [('Host', 'admin')])
        key = name + '{' + ','.join('%s="%s"' % kv for kv in labels.items()) + '} '
        return sum(int(float(line[len(key):])) for line in r.body.decode().splitlines()
                   if line.startswith(key))
    env.eq('each failover counted as a connect_error retry', metric(
        'jsongate_upstream_retries_total', upstream='app', reason='connect_error'), len(failed))

    conf['upstreams']['app']['max_fails'] = 1
    del conf['admin']
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = c.request('POST', '/first', [('Host', 'a'), ('Content-Length', '2')], body=b'{}')
    env.eq('max_fails 1: the first request, a POST, fails over', (r.status, r.body),
           (200, b'{"ok":true}'))
    env.check('the failed handshake ejects the server', gw.wait_log(
        r'upstream app: server %s ejected for 10s after 1 connect error'
        % re.escape(bad.address)))


@T.case
def tls_alert_after_request_not_replayed(env):
    """A server that reads a request and then fails the connection with a TLS alert has
    had the request's bytes: a POST is answered 502 upstream_tls and never sent to another
    server (a GET, safe to send twice, still fails over), on a proxied route and for the
    groups of a JSON-RPC batch alike."""
    bad = tls_upstream(env, 'up', alert_after_request=True)
    good = tls_upstream(env, 'up')
    conf = upstream_config(bad.address, good.address, routes=[
        {'name': 'rpc', 'match': {'path': '/rpc'},
         'jsonrpc': {'methods': [{'match': 'm', 'upstream': 'app'}]}},
        {'name': 'all', 'match': {'path_prefix': '/'}, 'upstream': 'app'}])
    conf['upstreams']['app'].update(tls={'ca': CA, 'server_name': 'up.test'}, max_fails=0,
                                    balance='round_robin')
    gw = env.daemon(conf)
    for i in range(2):
        c = env.client(gw.port)
        r = c.request('POST', '/p%d' % i, [('Host', 'a'), ('Content-Type', 'application/json')],
                      body=b'{"n":%d}' % i)
        if r.status == 502:
            env.eq('POST %d to the failing server: upstream_tls' % i,
                   json.loads(r.body)['error']['code'], 'upstream_tls')
        else:
            env.eq('POST %d to the good server: answered' % i, (r.status, r.body),
                   (200, b'{"ok":true}'))
    posts = lambda up: [h.split(b' ')[1] for h in up.requests if h.startswith(b'POST /p')]
    env.eq('each POST reached exactly one server, once',
           sorted(posts(bad) + posts(good)), [b'/p0', b'/p1'])
    env.eq('the failing server had one of them', len(posts(bad)), 1)
    for i in range(2):
        c = env.client(gw.port)
        r = c.request('GET', '/g%d' % i, [('Host', 'a')])
        env.eq('GET %d answered (failing over when it met the failing server)' % i,
               (r.status, r.body), (200, b'{"ok":true}'))
    batch = b'[{"jsonrpc":"2.0","method":"m","id":1},{"jsonrpc":"2.0","method":"m","id":2}]'
    before_bad, before_good = len(bad.requests), len(good.requests)
    answers = []
    for i in range(2):
        c = env.client(gw.port)
        r = c.request('POST', '/rpc', [('Host', 'a'), ('Content-Type', 'application/json')],
                      body=batch)
        answers.append(r.status)
    env.eq('the batch sent twice reached the servers twice in all, never retried',
           len(bad.requests) - before_bad + len(good.requests) - before_good, 2)
    env.eq('the failing server got one of the batches', len(bad.requests) - before_bad, 1)


@T.case
def upstream_sessions_and_mtls(env):
    # the upstream is jsongate itself, requiring a client certificate, before the demo
    demo = env.demo()
    inner_port = free_port()
    inner = env.daemon(upstream_config(demo.address, listeners=[
        tls_listener(inner_port, ('up',), client_ca=CA, verify_client='on')]), port=inner_port)
    conf = upstream_config('127.0.0.1:%d' % inner_port, keepalive=0)
    conf['upstreams']['app']['tls'] = {'ca': CA, 'server_name': 'up.test',
                                       'cert': pki_path('client.crt'),
                                       'key': pki_path('client.key')}
    gw = env.daemon(conf)
    c = env.client(gw.port)
    for i in range(4):
        r = c.request('GET', '/bytes/%d' % (1000 + i), [('Host', 'a')])
        env.eq('mutual TLS upstream, new connection %d' % i, (r.status, len(r.body)),
               (200, 1000 + i))
    # TLS 1.2: the refusal comes inside the handshake (a TLS 1.3 client may finish first and
    # exit before the alert arrives).
    out, rc = s_client(env, inner_port, '-servername', 'up.test', '-tls1_2')
    env.check('the inner gateway refuses clients without a certificate',
              rc != 0 or 'alert' in out, out[-400:])

    conf['upstreams']['app']['tls'] = {'ca': CA, 'server_name': 'up.test'}
    gw2 = env.daemon(conf)
    r = env.client(gw2.port).request('GET', '/bytes/10', [('Host', 'a')])
    env.gateway_error('no client certificate for a server requiring one', r, 502,
                      'upstream_tls', None, close=False)

    # pooled sessions: every connection after the first resumes
    up = tls_upstream(env, 'up')
    conf = upstream_config(up.address, keepalive=0)
    conf['upstreams']['app']['tls'] = {'ca': CA}
    gw3 = env.daemon(conf)
    c = env.client(gw3.port)
    for i in range(4):
        c.request('GET', '/s/%d' % i, [('Host', 'a')])
    env.eq('four upstream handshakes', up.handshakes, 4)
    env.check('later upstream connections resume the session', up.resumed >= 2,
              'resumed %d of %d' % (up.resumed, up.handshakes))


@T.case
def large_bodies_to_tls_upstream(env):
    demo = env.demo()
    inner_port = free_port()
    env.daemon(upstream_config(demo.address, listeners=[tls_listener(inner_port, ('up',))],
                               timeouts=SLOW_TIMEOUTS), port=inner_port)
    gw = tls_gateway(env, '127.0.0.1:%d' % inner_port, upstream_tls={'ca': CA},
                     timeouts=SLOW_TIMEOUTS)
    n = 64 << 20
    r = curl(env, 'https://a.test:%d/bytes/%d' % (gw.port, n), '-o', '-')
    env.eq('64 MB through TLS on both hops: bytes', (len(r.stdout), zlib.crc32(r.stdout)),
           (n, pattern_crc(n)))
    r = curl(env, 'https://a.test:%d/chunked/%d' % (gw.port, n), '-o', '-')
    env.eq('64 MB chunked through TLS on both hops', (len(r.stdout), zlib.crc32(r.stdout)),
           (n, pattern_crc(n)))
    src = os.path.join(env.tmp, 'upload')
    with open(src, 'wb') as f:
        block = pattern_block()
        for _ in range(n // len(block)):
            f.write(block)
        f.write(block[:n % len(block)])
    r = curl(env, 'https://a.test:%d/sink' % gw.port, '--data-binary', '@' + src, '-o', '-')
    env.eq('64 MB upload through TLS on both hops', r.stdout,
           b'{"bytes":%d,"crc32":%d}' % (n, pattern_crc(n)))


# ------------------------------------------------------------------ files and reload

@T.case
def certificate_errors_at_load(env):
    path = os.path.join(env.tmp, 'bad.yaml')
    conf = upstream_config('127.0.0.1:9', listeners=[
        tls_listener(free_port(), ('expired',)),
        {'listen': '127.0.0.1:%d' % free_port(),
         'tls': {'certificates': [{'cert': pki_path('a.crt'), 'key': pki_path('b.key')}]}},
        {'listen': '127.0.0.1:%d' % free_port(),
         'tls': {'certificates': [{'cert': pki_path('none.crt'), 'key': pki_path('a.key')}]}},
    ])
    os.chmod(pki_path('client.key'), 0)
    conf['upstreams']['app']['tls'] = {'cert': pki_path('client.crt'),
                                       'key': pki_path('client.key')}
    with open(path, 'w') as f:
        f.write(to_yaml(conf) + '\n')
    r = env.run([JSONGATE, '-t', '-c', path])
    os.chmod(pki_path('client.key'), 0o600)
    err = r.stderr.decode() + r.stdout.decode()
    env.eq('-t fails', r.returncode != 0, True)
    env.check('expired certificate named',
              re.search(r'certificates\[0\]\.cert: certificate %s expired on ' %
                        re.escape(pki_path('expired.crt')), err), err)
    env.check('key not matching named',
              'key %s does not match certificate %s' % (pki_path('b.key'), pki_path('a.crt'))
              in err, err)
    env.check('missing certificate named', 'cannot read certificate %s: No such file' %
              pki_path('none.crt') in err, err)
    if os.geteuid() != 0:
        env.check('unreadable key named', 'cannot read key %s: Permission denied' %
                  pki_path('client.key') in err, err)
    env.check('every error has a position', all(re.match(r'.*:\d+:\d+: ', l)
                                                for l in err.strip().splitlines()), err)


@T.case
def reload_renewed_certificate(env):
    up = env.scripted(default=answer(http_response(200, b'{}')))
    import shutil
    shutil.copy(pki_path('a.crt'), os.path.join(env.tmp, 'live.crt'))
    shutil.copy(pki_path('a.key'), os.path.join(env.tmp, 'live.key'))
    port = free_port()
    conf = upstream_config(up.address, listeners=[{'listen': '127.0.0.1:%d' % port, 'tls': {
        'certificates': [{'cert': 'live.crt', 'key': 'live.key'}]}}])
    gw = env.daemon(conf, port=port)
    old = tls_client(env, port)
    env.eq('before reload', old.request('GET', '/1', [('Host', 'a.test')]).status, 200)
    make_cert('renewed', 'a.test', ['DNS:a.test', 'IP:127.0.0.1'])
    shutil.copy(pki_path('renewed.crt'), os.path.join(env.tmp, 'live.crt'))
    shutil.copy(pki_path('renewed.key'), os.path.join(env.tmp, 'live.key'))
    before = len(gw.log())
    gw.signal(signal.SIGHUP)
    env.check('reloaded', gw.wait_log(r'reload', start=before))

    def serial_now():
        out, rc = s_client(env, port, '-servername', 'a.test', '-showcerts')
        m = re.search(r'-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----', out)
        return m.group(0) if m else None
    with open(pki_path('renewed.crt')) as f:
        renewed = re.search(r'-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----',
                            f.read()).group(0)
    env.check('new connections get the renewed certificate',
              wait_until(lambda: serial_now() == renewed, 5 * SLOW))
    env.eq('the established connection keeps working',
           old.request('GET', '/2', [('Host', 'a.test')]).status, 200)


T.run()
