"""A small DNS server for the scenario tests (Python 3 standard library only).

It answers A and AAAA queries over UDP on 127.0.0.1 from a table the test changes while it
runs, can be told to fail and to recover, and counts the queries it gets:

    from dns_server import DNSServer
    dns = DNSServer()                       # an ephemeral port; dns.address is HOST:PORT
    dns.set('api.test', a=['127.0.0.2', '127.0.0.3'], aaaa=['::1'], ttl=30)
    dns.set_records('api.test', [('A', '127.0.0.2', 5), ('AAAA', '::1', 60)])
    dns.remove('api.test')                  # NXDOMAIN from now on
    dns.fail('servfail')                    # or 'refused', or 'drop' (no answer at all)
    dns.fail(None)                          # answer again
    dns.fail('refused', only='AAAA')        # fail AAAA queries only, answer A ones
    dns.queries('api.test')                 # queries for that name so far (any type)
    dns.wait_queries('api.test', 3, 10)     # until 3 were counted, or 10 s passed
    dns.stop()

A name the table does not hold gets NXDOMAIN; a name it holds without a record of the asked
type gets an empty answer (NODATA).  Names are compared case-insensitively, without a final
dot.  Only UDP: libevent's evdns, the daemon's resolver, never falls back to TCP.
"""

import select
import socket
import struct
import threading

TYPES = {'A': 1, 'AAAA': 28}
FAMILIES = {1: socket.AF_INET, 28: socket.AF_INET6}
RCODE_OK, RCODE_SERVFAIL, RCODE_NXDOMAIN, RCODE_REFUSED = 0, 2, 3, 5
FAILURES = {'servfail': RCODE_SERVFAIL, 'refused': RCODE_REFUSED, 'drop': None}


def _norm(name):
    return name.lower().rstrip('.')


class DNSServer:
    def __init__(self, host='127.0.0.1', port=0):
        self.lock = threading.Condition()
        self.records = {}           # name -> [(qtype, packed address, ttl)]
        self.failure = None         # None, or a key of FAILURES
        self.failing = None         # the query type failed, None: every type
        self.counts = {}            # name -> {qtype: queries}
        self.errors = []            # malformed queries, for the test to check
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.port = self.sock.getsockname()[1]
        self.address = '%s:%d' % (host, self.port)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # -- what the test changes
    def set_records(self, name, records):
        """records: (type, address, ttl) tuples, type 'A' or 'AAAA'."""
        packed = [(TYPES[t], socket.inet_pton(FAMILIES[TYPES[t]], addr), ttl)
                  for t, addr, ttl in records]
        with self.lock:
            self.records[_norm(name)] = packed

    def set(self, name, a=(), aaaa=(), ttl=30):
        self.set_records(name, [('A', x, ttl) for x in a] + [('AAAA', x, ttl) for x in aaaa])

    def remove(self, name):
        with self.lock:
            self.records.pop(_norm(name), None)

    def fail(self, mode, only=None):
        """'servfail', 'refused' or 'drop' from now on, for queries of type only ('A' or
        'AAAA') or of every type; None answers again."""
        if mode is not None and mode not in FAILURES:
            raise ValueError('unknown failure %r' % mode)
        with self.lock:
            self.failure = mode
            self.failing = TYPES[only] if only else None

    # -- what the test reads
    def queries(self, name, qtype=None):
        with self.lock:
            per_type = self.counts.get(_norm(name), {})
            return per_type.get(TYPES[qtype], 0) if qtype else sum(per_type.values())

    def wait_queries(self, name, n, timeout):
        """True once queries(name) >= n; False when timeout seconds pass first."""
        with self.lock:
            return self.lock.wait_for(
                lambda: sum(self.counts.get(_norm(name), {}).values()) >= n, timeout)

    def stop(self):
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()

    # -- serving
    def _loop(self):
        while not self.stopping.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            try:
                query, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            reply = self._answer(query)
            if reply is not None:
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    pass

    def _answer(self, query):
        try:
            qid, flags, qdcount = struct.unpack('!HHH', query[:6])
            if qdcount != 1:
                raise ValueError('%d questions' % qdcount)
            labels, i = [], 12
            while query[i] != 0:
                if query[i] & 0xc0:
                    raise ValueError('compressed question name')
                labels.append(query[i + 1:i + 1 + query[i]].decode('ascii'))
                i += 1 + query[i]
            question = query[12:i + 5]
            qtype, qclass = struct.unpack('!HH', query[i + 1:i + 5])
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            with self.lock:
                self.errors.append('malformed query %r: %s' % (query[:64], e))
            return None
        name = _norm('.'.join(labels))
        with self.lock:
            per_type = self.counts.setdefault(name, {})
            per_type[qtype] = per_type.get(qtype, 0) + 1
            self.lock.notify_all()
            failure = self.failure
            if self.failing is not None and self.failing != qtype:
                failure = None
            records = self.records.get(name)
        if failure == 'drop':
            return None
        answers = []
        if failure is not None:
            rcode = FAILURES[failure]
        elif records is None:
            rcode = RCODE_NXDOMAIN
        else:
            rcode = RCODE_OK
            for rtype, addr, ttl in records:
                if rtype == qtype and qclass == 1:
                    # the name as a pointer to the question (offset 12)
                    answers.append(struct.pack('!HHHIH', 0xc00c, rtype, 1, ttl, len(addr)) + addr)
        # QR, the query's opcode and RD, AA, RA, the rcode
        rflags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
        return struct.pack('!HHHHHH', qid, rflags, 1, len(answers), 0, 0) + question + \
            b''.join(answers)


def start(env, **kw):
    """A DNSServer stopped with the case's other processes."""
    dns = DNSServer(**kw)
    env.procs.append(dns)
    return dns
