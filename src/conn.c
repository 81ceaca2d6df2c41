#include "config.h"
#include "conn.h"
#include "grow.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

/* Bytes asked for per read: large enough that a big body takes few system calls. */
#define CONN_READ_CHUNK (64 * 1024)
/* Pieces of the output handed to one sendmsg (libevent's own writes take up to 128). */
#define CONN_WRITE_IOV 64
/* A full TLS record's payload: smaller output pieces are gathered into one record. */
#define CONN_TLS_RECORD 16384
/* The most held back (a TLS 1.3 session ticket is a few hundred bytes; more goes out). */
#define CONN_TLS_HOLD_MAX 4096
/* The records one drain makes go out together, up to this many bytes a system call; room
 * for a whole record is kept before each SSL_write (its header, type and tag included). */
#define CONN_TLS_BATCH (64 * 1024)
#define CONN_TLS_RECORD_MAX (CONN_TLS_RECORD + 256)

/* The records of the drain in progress: one per thread, since a drain ends before the next
 * begins (owner NULL between drains). */
static _Thread_local struct {
	struct conn *owner;
	size_t len;
	char buf[CONN_TLS_BATCH];
} conn_tls_batch;

static void conn_read_event_cb(evutil_socket_t fd, short events, void *arg);
static void conn_write_event_cb(evutil_socket_t fd, short events, void *arg);
static void conn_tls_read_event_cb(evutil_socket_t fd, short events, void *arg);
static void conn_event_cb(evutil_socket_t fd, short events, void *arg);
static int conn_tls_drain(struct conn *c);
static void conn_tls_run(struct conn *c);
static int conn_tls_has_input(const struct conn *c);

/* libevent's common timeouts: O(1) queues for durations that repeat, as ours do.  One
 * small cache per thread, since each thread runs its own event base. */
const struct timeval *
conn_timeout_tv(struct event *ev, uint64_t ms, struct timeval *tv)
{
	static __thread struct {
		struct event_base *base;
		uint64_t ms;
		const struct timeval *tv;
	} cache[16];
	struct event_base *base = event_get_base(ev);
	const struct timeval *common;
	unsigned i;

	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
	for (i = 0; i < 16 && cache[i].base != NULL; i++)
		if (cache[i].base == base && cache[i].ms == ms)
			return cache[i].tv;
	if (i == 16 || (common = event_base_init_common_timeout(base, tv)) == NULL)
		return tv;
	cache[i].base = base;
	cache[i].ms = ms;
	cache[i].tv = common;
	return common;
}

/* Start (or stop) the read or write inactivity timeout.  A running one is left alone: the
 * socket's events restart it (conn_touch), which is what inactivity means. */
static void
conn_arm_timer(struct conn *c, int write, uint64_t ms, int on)
{
	struct deadline *d = write ? &c->wtimer : &c->rtimer;

	if (!on || ms == 0)
		deadline_stop(d);
	else if (!deadline_running(d) || d->ms != ms)
		deadline_start(d, ms);
}

/* The socket showed life in one direction: its inactivity timeout starts again. */
static void
conn_touch(struct conn *c, int write)
{
	struct deadline *d = write ? &c->wtimer : &c->rtimer;

	if (deadline_running(d))
		deadline_start(d, d->ms);
}

/* Read timeouts run only while input is wanted; write timeouts while output waits. */
static void
conn_update_timers(struct conn *c)
{
	conn_arm_timer(c, 0, c->read_timeout_ms, c->reading && !c->eof);
	if (c->write_timeout_ms != 0 || deadline_running(&c->wtimer))
		conn_arm_timer(c, 1, c->write_timeout_ms,
		    c->connecting || conn_out_left(c) != 0);
}

static void
conn_read_timeout_cb(struct deadline *d, void *arg)
{
	struct conn *c = arg;

	(void)d;
	if (c->reading)
		c->cb(c, CONN_TIMEOUT, c->arg);
}

static void
conn_write_timeout_cb(struct deadline *d, void *arg)
{
	struct conn *c = arg;

	(void)d;
	c->cb(c, CONN_TIMEOUT, c->arg);
}

int
conn_init(struct conn *c, struct timers *t, int fd, conn_cb cb, void *arg)
{
	struct event_base *base = timers_base(t);

	c->fd = fd;
	c->cb = cb;
	c->arg = arg;
	c->read_max = CONN_READ_MAX;
	c->write_low = 0;
	c->read_timeout_ms = c->write_timeout_ms = 0;
	c->error = 0;
	c->readable = c->reading = c->connecting = c->eof = c->want_drained = 0;
	c->tls.handshaking = c->tls.read_wants_write = c->tls.write_wants_read = 0;
	c->tls.failed = c->tls.fatal = c->tls.holding = c->tls.sniffed = c->tls.plain = 0;
	c->ssl = NULL;
	c->tls_err = 0;
	c->tls_held = NULL;
	c->tls_held_len = c->tls_held_cap = 0;
	c->writable = 1;
	c->in = evbuffer_new();
	c->out = evbuffer_new();
	c->peer_closed = 0;
	c->recheck = 0;
	deadline_init(&c->rtimer, t, conn_read_timeout_cb, c);
	deadline_init(&c->wtimer, t, conn_write_timeout_cb, c);
	c->sink = NULL;
	c->sink_left = 0;
	c->alive = NULL;
	c->ev = event_new(base, fd, EV_READ | EV_WRITE | EV_CLOSED | EV_PERSIST | EV_ET,
	    conn_event_cb, c);
	if (c->in == NULL || c->out == NULL || c->ev == NULL || event_add(c->ev, NULL) < 0) {
		if (c->in != NULL)
			evbuffer_free(c->in);
		if (c->out != NULL)
			evbuffer_free(c->out);
		if (c->ev != NULL)
			event_free(c->ev);
		c->fd = -1;
		return -1;
	}
	return 0;
}

void
conn_close(struct conn *c)
{
	if (c->fd < 0)
		return;
	if (c->ssl != NULL) {
		/* Best effort close_notify; never after a fatal error (OpenSSL forbids it). */
		c->tls.holding = 0;
		if (!c->tls.handshaking && !c->tls.fatal)
			SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
		c->ssl = NULL;
		ERR_clear_error();
		free(c->tls_held);
		c->tls_held = NULL;
		c->tls_held_len = c->tls_held_cap = 0;
	}
	deadline_stop(&c->rtimer);
	deadline_stop(&c->wtimer);
	if (c->alive != NULL)
		*c->alive = 0;
	event_free(c->ev);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	close(c->fd);
	c->fd = -1;
}

void
conn_set_cb(struct conn *c, conn_cb cb, void *arg)
{
	c->cb = cb;
	c->arg = arg;
}

int
conn_connect(struct conn *c, const struct sockaddr *sa, unsigned salen)
{
	if (connect(c->fd, sa, salen) == 0) {
		c->writable = 1;
		return 0;
	}
	if (errno != EINPROGRESS)
		return -1;
	c->connecting = 1;
	c->writable = 0;
	conn_update_timers(c);
	return 0;
}

/* Room in the input for the next read, up to read_max and CONN_READ_CHUNK: the number of
 * pieces reserved, 0 when the input is full, -1 (c->error set) without memory. */
static int
conn_reserve_input(struct conn *c, struct evbuffer_iovec vec[2], size_t *want)
{
	size_t have = evbuffer_get_length(c->in);
	int nvec;

	if (have >= c->read_max)
		return 0;
	*want = c->read_max - have;
	if (*want > CONN_READ_CHUNK)
		*want = CONN_READ_CHUNK;
	if ((nvec = evbuffer_reserve_space(c->in, (ev_ssize_t)*want, vec, 2)) <= 0) {
		c->error = ENOMEM;
		return -1;
	}
	return nvec;
}

/* Read until the socket is empty, the input is full, or the peer closed. Returns what. */
static int
conn_fill(struct conn *c)
{
	struct evbuffer_iovec vec[3];
	size_t want, room, more;
	ssize_t n;
	int nvec, what = 0;

	while (c->readable && !c->eof) {
		if (c->sink != NULL) {
			/* Straight into the owner's buffer: no evbuffer, no later copy.  Room in
			 * the input after it makes a read that fills the sink a short one when
			 * the socket had no more, so that no read is spent to learn it. */
			vec[0].iov_base = c->sink;
			vec[0].iov_len = c->sink_left;
			want = c->sink_left;
			if ((nvec = conn_reserve_input(c, vec + 1, &more)) < 0)
				return what | CONN_ERROR;
			if (nvec > 0) {
				room = c->read_max - evbuffer_get_length(c->in);
				if (vec[1].iov_len > room)
					vec[1].iov_len = room;
				want += vec[1].iov_len;
			}
			nvec = nvec > 0 ? 2 : 1;
		} else {
			if ((nvec = conn_reserve_input(c, vec, &want)) == 0)
				break;
			if (nvec < 0)
				return what | CONN_ERROR;
			/* The space reserved may be larger than asked for: never read past
			 * read_max (an owner lowers it to see a head before the body comes). */
			room = c->read_max - evbuffer_get_length(c->in);
			if (vec[0].iov_len >= room) {
				vec[0].iov_len = room;
				nvec = 1;
			} else if (nvec == 2 && vec[0].iov_len + vec[1].iov_len > room) {
				vec[1].iov_len = room - vec[0].iov_len;
			}
			if (nvec == 2 && vec[0].iov_len >= want)
				nvec = 1;
		}
		/* recv for one piece: a socket's readv goes through the file layer first. */
		n = nvec == 1 ? recv(c->fd, vec[0].iov_base, vec[0].iov_len, 0) :
		    readv(c->fd, (struct iovec *)vec, nvec);
		if (n <= 0 && c->sink == NULL)
			evbuffer_commit_space(c->in, vec, 0);
		else if (n <= 0 && nvec == 2)
			evbuffer_commit_space(c->in, vec + 1, 0);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->readable = 0;
				break;
			}
			if (errno == EINTR)
				continue;
			c->error = errno;
			return what | CONN_ERROR;
		}
		if (n == 0) {
			c->eof = 1;
			return what | CONN_EOF;
		}
		if (c->sink != NULL) {
			more = (size_t)n > c->sink_left ? (size_t)n - c->sink_left : 0;
			c->sink += (size_t)n - more;
			c->sink_left -= (size_t)n - more;
			if (c->sink_left == 0)
				c->sink = NULL;
			if (nvec == 2) {
				vec[1].iov_len = more;
				evbuffer_commit_space(c->in, vec + 1, more != 0);
			}
		} else {
			if ((size_t)n <= vec[0].iov_len) {
				vec[0].iov_len = (size_t)n;
				nvec = 1;
			} else {
				vec[1].iov_len = (size_t)n - vec[0].iov_len;
			}
			evbuffer_commit_space(c->in, vec, nvec);
		}
		what |= CONN_READ;
		/* A short read means the socket is empty for now and the next edge says when not,
		 * unless the peer's FIN came with this edge: then read on to the end of stream. */
		if ((size_t)n < want && !c->peer_closed) {
			c->readable = 0;
			break;
		}
	}
	return what;
}

/* An edge: the write side first (a connect completing, output draining), then the read
 * side, unless handling the first closed the connection. */
static void
conn_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;
	int alive = 1;

	if (!(events & EV_WRITE)) {
		conn_read_event_cb(fd, events, arg);
		return;
	}
	if (!(events & (EV_READ | EV_CLOSED))) {
		conn_write_event_cb(fd, events, arg);
		return;
	}
	c->alive = &alive;
	conn_write_event_cb(fd, events, arg);
	if (!alive)
		return;
	c->alive = NULL;
	conn_read_event_cb(fd, events, arg);
}

static void
conn_read_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;
	int what;

	if (c->ssl != NULL) {
		conn_tls_read_event_cb(fd, events, arg);
		return;
	}
	conn_touch(c, 0);
	c->recheck = 0;
	c->readable = 1;
	if (events & EV_CLOSED)
		c->peer_closed = 1;
	if (!c->reading)
		return;
	what = conn_fill(c);
	if (what & (CONN_EOF | CONN_ERROR))
		conn_update_timers(c);
	/* Stopped by read_max with data still waiting: no new edge will come for it, so look
	 * again from the loop once the owner has taken some input. */
	else if ((what & CONN_READ) && c->readable)
		event_active(c->ev, EV_READ, 0);
	if (what != 0)
		c->cb(c, what, c->arg);
}

void
conn_read_start(struct conn *c)
{
	if (c->reading)
		return;
	c->reading = 1;
	conn_update_timers(c);
	/* Data (or EOF) may have arrived while we were not reading: its edge is gone. */
	if (c->readable || (c->ssl != NULL && conn_tls_has_input(c)))
		event_active(c->ev, EV_READ, 0);
}

void
conn_read_again(struct conn *c)
{
	if (c->ssl != NULL || !c->reading || c->eof || c->recheck)
		return;
	c->recheck = 1;
	c->readable = 1;
	event_active(c->ev, EV_READ, 0);
}

void
conn_set_read_max(struct conn *c, size_t max)
{
	int grew = max > c->read_max;

	c->read_max = max;
	if (grew && c->reading) {
		conn_read_stop(c);
		conn_read_start(c);
	}
}

void
conn_read_stop(struct conn *c)
{
	if (!c->reading)
		return;
	c->reading = 0;
	conn_arm_timer(c, 0, 0, 0);
}

/*
 * One send of the output's first pieces; what the socket took leaves the output.  send or
 * sendmsg rather than evbuffer_write's writev: a socket's writev goes through the file
 * layer (position lock, area checks) before it reaches the same sendmsg.
 */
static ssize_t
conn_send(struct conn *c)
{
	struct evbuffer_iovec vec[CONN_WRITE_IOV];
	struct msghdr msg;
	ssize_t n;
	int nvec;

	nvec = evbuffer_peek(c->out, -1, NULL, vec, CONN_WRITE_IOV);
	if (nvec > CONN_WRITE_IOV)
		nvec = CONN_WRITE_IOV;
	if (nvec == 1) {
		n = send(c->fd, vec[0].iov_base, vec[0].iov_len, MSG_NOSIGNAL);
	} else {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = (struct iovec *)vec;
		msg.msg_iovlen = (size_t)nvec;
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
	}
	if (n > 0)
		evbuffer_drain(c->out, (size_t)n);
	return n;
}

/* Write what the socket takes; returns CONN_ERROR on failure, else 0 with *left the bytes
 * still waiting in the output. */
static int
conn_drain(struct conn *c, size_t *left)
{
	size_t len = evbuffer_get_length(c->out);
	ssize_t n;

	while (c->writable && len != 0) {
		n = conn_send(c);
		if (n >= 0) {
			len -= (size_t)n;       /* a short write: the next one says EAGAIN */
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->writable = 0;
			break;
		}
		if (errno != EINTR) {
			c->error = errno;
			return CONN_ERROR;
		}
	}
	*left = len;
	return 0;
}

size_t
conn_out_left(const struct conn *c)
{
	/* Records held on purpose (a handshake's tickets) wait for output; the others are
	 * output a full socket did not take. */
	return evbuffer_get_length(c->out) + (c->tls.holding ? 0 : c->tls_held_len);
}

void
conn_flush(struct conn *c)
{
	size_t left;
	int err;

	if (c->connecting || c->error || (c->ssl != NULL && c->tls.handshaking))
		return;
	if (c->ssl != NULL) {
		err = conn_tls_drain(c);
		left = conn_out_left(c);
	} else {
		err = conn_drain(c, &left);
	}
	if (err != 0) {
		/* Report from the loop: the caller is in the middle of something. */
		event_active(c->ev, EV_WRITE, 0);
		return;
	}
	conn_arm_timer(c, 1, c->write_timeout_ms, left != 0);
	/* Drained here rather than by a socket edge: still report it, from the loop. */
	if (c->want_drained && left <= c->write_low)
		event_active(c->ev, EV_WRITE, 0);
}

static void
conn_write_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;
	int what = 0;
	socklen_t len = sizeof(c->error);
	size_t left;

	(void)fd;
	(void)events;
	conn_touch(c, 1);
	if (c->error) {
		c->cb(c, CONN_ERROR, c->arg);
		return;
	}
	c->writable = 1;
	if (c->connecting) {
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &c->error, &len) < 0)
			c->error = errno;
		if (c->error != 0) {
			c->cb(c, CONN_ERROR, c->arg);
			return;
		}
		c->connecting = 0;
		what |= CONN_CONNECTED;
	}
	/* Over TLS the handshake comes first; it reports CONN_CONNECTED itself when done. */
	if (c->ssl != NULL) {
		conn_tls_run(c);
		return;
	}
	if (conn_drain(c, &left) != 0) {
		c->cb(c, what | CONN_ERROR, c->arg);
		return;
	}
	conn_arm_timer(c, 1, c->write_timeout_ms, left != 0);
	if (c->want_drained && left <= c->write_low) {
		c->want_drained = 0;
		what |= CONN_DRAINED;
	}
	if (what != 0)
		c->cb(c, what, c->arg);
}

void
conn_notify_drained(struct conn *c, int on, size_t low)
{
	c->want_drained = on != 0;
	c->write_low = low;
}

void
conn_set_timeouts(struct conn *c, uint64_t read_ms, uint64_t write_ms)
{
	c->read_timeout_ms = read_ms;
	c->write_timeout_ms = write_ms;
	conn_update_timers(c);
}

/* --- TLS ------------------------------------------------------------------------------
 * The same edge-triggered scheme: readable/writable say what the socket may take.  An SSL
 * call that stops with WANT_READ or WANT_WRITE clears the flag of the direction it waits
 * for; a read that must write first (or a write that must read first) is remembered and
 * retried on the other direction's edge.  A connection's events are registered once, by
 * conn_init: the plain callbacks hand a TLS connection's events to the ones below, which
 * costs a test per event where re-registering them would cost four epoll_ctl calls per
 * connection. */

/* A fatal error from an SSL call: errno for the socket's, EPROTO for TLS's. */
static int
conn_tls_fatal(struct conn *c, int sslerr)
{
	unsigned long e = ERR_peek_last_error();

	if (sslerr == SSL_ERROR_SYSCALL && e == 0)
		c->error = errno != 0 ? errno : ECONNRESET;
	else
		c->error = EPROTO;
	c->tls_err = e;
	c->tls.fatal = 1;
	if (sslerr == SSL_ERROR_SSL)
		c->tls.failed = 1;
	ERR_clear_error();
	return CONN_ERROR;
}

/*
 * Records go to the socket through our own BIO, so that some can be held back and sent with
 * the next ones in one write: a TLS 1.3 server's session ticket, made when the handshake ends,
 * goes out with the first response instead of in a segment of its own.  Anything else is
 * written at once, as a socket BIO would.
 */
static BIO_METHOD *conn_bio_method;
static pthread_once_t conn_bio_once = PTHREAD_ONCE_INIT;

/* Only handshakes hold records often: an open connection keeps no buffer for them. */
static void
conn_tls_release_held(struct conn *c)
{
	if (c->tls_held_len == 0 && !c->tls.handshaking) {
		free(c->tls_held);
		c->tls_held = NULL;
		c->tls_held_cap = 0;
	}
}

/*
 * Send the held records, then the batch: 0 when both went, 1 when the socket is full (what
 * it did not take is held, to go on its next edge), -1 on an error (c->error).  What is held
 * is then at most a batch and what was held before it.
 */
static int
conn_tls_batch_send(struct conn *c)
{
	struct iovec iov[2];
	size_t total, left;
	ssize_t n;

	iov[0].iov_base = c->tls_held;
	iov[0].iov_len = c->tls_held_len;
	iov[1].iov_base = conn_tls_batch.buf;
	iov[1].iov_len = conn_tls_batch.len;
	total = c->tls_held_len + conn_tls_batch.len;
	if (total == 0)
		return 0;
	do
		n = writev(c->fd, iov, 2);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		c->error = errno;
		c->tls.fatal = 1;
		return -1;
	}
	if (n < 0)
		n = 0;
	conn_tls_batch.len = 0;
	if ((size_t)n == total) {
		c->tls_held_len = 0;
		conn_tls_release_held(c);
		return 0;
	}
	/* The rest, in order: what is left of the held records, then of the batch. */
	left = total - (size_t)n;
	if (grow_array(&c->tls_held, &c->tls_held_cap, left, 1, CONN_TLS_HOLD_MAX) != 0) {
		c->error = ENOMEM;
		c->tls.fatal = 1;
		return -1;
	}
	if ((size_t)n < c->tls_held_len) {
		memmove(c->tls_held, c->tls_held + n, c->tls_held_len - (size_t)n);
		memcpy(c->tls_held + (c->tls_held_len - (size_t)n), iov[1].iov_base, iov[1].iov_len);
	} else {
		memcpy(c->tls_held, (char *)iov[1].iov_base + ((size_t)n - c->tls_held_len), left);
	}
	c->tls_held_len = left;
	c->writable = 0;
	return 1;
}

/* Send the held records, then data: what was taken of data, or -1 (errno set, and a retry
 * flag on b when the socket is full). */
static int
conn_bio_write(BIO *b, const char *data, int len)
{
	struct conn *c = BIO_get_data(b);
	struct iovec iov[2];
	ssize_t n;
	char *p;

	BIO_clear_retry_flags(b);
	if (conn_tls_batch.owner == c) {
		if ((size_t)len > CONN_TLS_BATCH - conn_tls_batch.len &&
		    conn_tls_batch_send(c) != 0) {
			if (c->error == 0)
				BIO_set_retry_write(b);
			errno = c->error != 0 ? c->error : EAGAIN;
			return -1;
		}
		if ((size_t)len <= CONN_TLS_BATCH) {
			memcpy(conn_tls_batch.buf + conn_tls_batch.len, data, (size_t)len);
			conn_tls_batch.len += (size_t)len;
			return len;
		}
		/* More than a batch (no record is): to the socket, after what went above. */
	}
	if (c->tls.holding && c->tls_held_len + (size_t)len <= CONN_TLS_HOLD_MAX) {
		if (grow_array(&c->tls_held, &c->tls_held_cap, CONN_TLS_HOLD_MAX, 1,
		    CONN_TLS_HOLD_MAX) != 0) {
			errno = ENOMEM;
			return -1;
		}
		memcpy(c->tls_held + c->tls_held_len, data, (size_t)len);
		c->tls_held_len += (size_t)len;
		return len;
	}
	iov[0].iov_base = c->tls_held;
	iov[0].iov_len = c->tls_held_len;
	iov[1].iov_base = (char *)data;
	iov[1].iov_len = (size_t)len;
	do
		n = c->tls_held_len != 0 ? writev(c->fd, iov, 2) : write(c->fd, data, (size_t)len);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_write(b);
		return -1;
	}
	if ((size_t)n < c->tls_held_len) {
		p = c->tls_held;
		memmove(p, p + n, c->tls_held_len - (size_t)n);
		c->tls_held_len -= (size_t)n;
		c->tls.holding = 0;
		BIO_set_retry_write(b);         /* the socket is full: wait for its edge */
		errno = EAGAIN;
		return -1;
	}
	n -= (ssize_t)c->tls_held_len;
	c->tls_held_len = 0;
	conn_tls_release_held(c);
	if (n == 0 && len > 0) {
		BIO_set_retry_write(b);
		errno = EAGAIN;
		return -1;
	}
	return (int)n;
}

/* OpenSSL flushes after each flight; held records wait for ours. */
static long
conn_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static void
conn_bio_make(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "conn");

	if (m != NULL && (BIO_meth_set_write(m, conn_bio_write) != 1 ||
	    BIO_meth_set_ctrl(m, conn_bio_ctrl) != 1)) {
		BIO_meth_free(m);
		m = NULL;
	}
	conn_bio_method = m;
}

/* Send what is held: 0 when nothing is left, 1 when the socket is full, CONN_ERROR. */
static int
conn_tls_send_held(struct conn *c)
{
	BIO *b = SSL_get_wbio(c->ssl);

	if (c->tls_held_len == 0)
		return 0;
	if (conn_bio_write(b, "", 0) >= 0)
		return 0;
	if (BIO_should_retry(b)) {
		c->writable = 0;
		return 1;
	}
	c->error = errno;
	c->tls.fatal = 1;
	return CONN_ERROR;
}

int
conn_start_tls(struct conn *c, struct ssl_st *ssl)
{
	BIO *rbio, *wbio;

	pthread_once(&conn_bio_once, conn_bio_make);
	if (conn_bio_method == NULL || (rbio = BIO_new_socket(c->fd, BIO_NOCLOSE)) == NULL)
		goto fail;
	if ((wbio = BIO_new(conn_bio_method)) == NULL) {
		BIO_free(rbio);
		goto fail;
	}
	BIO_set_data(wbio, c);
	BIO_set_init(wbio, 1);
	SSL_set_bio(ssl, rbio, wbio);
	c->ssl = ssl;
	c->tls.handshaking = 1;
	conn_update_timers(c);
	/* Start the handshake from the loop (the socket's first edges may be gone). */
	if (SSL_is_server(ssl))
		event_active(c->ev, EV_READ, 0);
	else if (!c->connecting)
		event_active(c->ev, EV_WRITE, 0);
	return 0;
fail:
	ERR_clear_error();
	return -1;
}

/* One step of the handshake: CONN_CONNECTED (client side) or 0 when done or waiting. */
static int
conn_tls_handshake(struct conn *c)
{
	int n, err;

	ERR_clear_error();
	/* A TLS 1.3 server has sent its last flight when the handshake ends; what it writes
	 * next, before our first response, is session tickets (OpenSSL makes them in the
	 * first SSL_read): hold them for that response.  Flights, and TLS 1.2's last one
	 * that the client waits for, go at once. */
	c->tls.holding = SSL_is_server(c->ssl);
	n = SSL_do_handshake(c->ssl);
	if (n != 1 || !SSL_is_server(c->ssl) || SSL_version(c->ssl) != TLS1_3_VERSION) {
		c->tls.holding = 0;
		if (conn_tls_send_held(c) == CONN_ERROR)
			return CONN_ERROR;
	}
	if (n == 1) {
		c->tls.handshaking = 0;
		conn_tls_release_held(c);
		return SSL_is_server(c->ssl) ? 0 : CONN_CONNECTED;
	}
	switch ((err = SSL_get_error(c->ssl, n))) {
	case SSL_ERROR_WANT_READ:
		c->readable = 0;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		c->writable = 0;
		return 0;
	default:
		c->tls.failed = 1;
		return conn_tls_fatal(c, err);
	}
}

/*
 * Before a server's handshake, its client's first byte: a TLS record starts with its content
 * type (22 for a handshake), a plain HTTP request with a method's letter or an empty line.
 * For plain HTTP, TLS is dropped and 1 returned: the owner reads the request and answers it
 * in clear text, as nginx does.  0 for TLS (or an end of stream or error, which the handshake
 * reports).  -1 while nothing has come: the handshake must wait for the read edge, for the
 * first bytes could arrive just after this look and OpenSSL would read them itself.
 */
static int
conn_tls_sniff(struct conn *c)
{
	unsigned char b;
	ssize_t n;

	do
		n = recv(c->fd, &b, 1, MSG_PEEK);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		c->readable = 0;
		return -1;
	}
	c->tls.sniffed = 1;
	if (n != 1 || !((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b == '\r'))
		return 0;       /* TLS, or what the handshake will report (EOF, an error) */
	SSL_free(c->ssl);
	c->ssl = NULL;
	c->tls.handshaking = 0;
	c->tls.plain = 1;
	return 1;
}

/* Input to decrypt: the socket had an edge not yet read to its end, or OpenSSL holds bytes
 * it read already.  It reads whatever the socket has whenever it needs to read, also in a
 * handshake or SSL_write run from the write edge: those bytes are then in its buffer and
 * the socket is empty, so epoll reports no read edge for them and only this test finds them. */
static int
conn_tls_has_input(const struct conn *c)
{
	return c->tls.read_wants_write ? c->writable : c->readable || SSL_has_pending(c->ssl);
}

/* Decrypt into the input until the socket is empty, the input full, or the peer closed. */
static int
conn_tls_fill(struct conn *c)
{
	struct evbuffer_iovec vec[2];
	size_t want, got, room;
	int nvec, i, n = 1, what = 0;

	while (!c->eof && conn_tls_has_input(c)) {
		if ((nvec = conn_reserve_input(c, vec, &want)) == 0)
			break;
		if (nvec < 0)
			return what | CONN_ERROR;
		/* SSL_read returns a record at a time: fill the reserved space with several. */
		for (i = 0, got = 0; i < nvec; ) {
			room = vec[i].iov_len - got;
			n = SSL_read(c->ssl, (char *)vec[i].iov_base + got,
			    room > INT_MAX ? INT_MAX : (int)room);
			if (n <= 0)
				break;
			c->tls.read_wants_write = 0;
			what |= CONN_READ;
			got += (size_t)n;
			if (got == vec[i].iov_len) {
				i++;
				got = 0;
			}
		}
		if (i < nvec) {
			vec[i].iov_len = got;
			i += got != 0;
		}
		evbuffer_commit_space(c->in, vec, i);
		if (n > 0)
			continue;
		switch ((n = SSL_get_error(c->ssl, n))) {
		case SSL_ERROR_WANT_READ:
			c->readable = 0;
			return what;
		case SSL_ERROR_WANT_WRITE:
			c->writable = 0;
			c->tls.read_wants_write = 1;
			return what;
		case SSL_ERROR_ZERO_RETURN:
			c->eof = 1;
			return what | CONN_EOF;
		default:
			return what | conn_tls_fatal(c, n);
		}
	}
	return what;
}

/* Encrypt what the socket may take, a record at a time, into the batch (sent whenever it
 * has no room for another); CONN_ERROR on failure, else 0. */
static int
conn_tls_encrypt(struct conn *c)
{
	struct evbuffer_iovec vec;
	const unsigned char *p;
	size_t len;
	int n;

	while ((c->tls.write_wants_read ? c->readable : c->writable) &&
	    (len = evbuffer_get_length(c->out)) != 0) {
		if (CONN_TLS_BATCH - conn_tls_batch.len < CONN_TLS_RECORD_MAX &&
		    (n = conn_tls_batch_send(c)) != 0)
			return n < 0 ? CONN_ERROR : 0;
		if (evbuffer_peek(c->out, -1, NULL, &vec, 1) < 1)
			break;
		/* A response head and a short body go out as one record, not two.  After a
		 * stalled write the bytes at the front are the same and no fewer, as OpenSSL
		 * needs them (the buffer may move: SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). */
		if (len > CONN_TLS_RECORD)
			len = CONN_TLS_RECORD;
		if (vec.iov_len < len) {
			if ((p = evbuffer_pullup(c->out, (ev_ssize_t)len)) == NULL) {
				c->error = ENOMEM;
				return CONN_ERROR;
			}
		} else {
			p = vec.iov_base;
		}
		c->tls.holding = 0;     /* what is held goes with this */
		n = SSL_write(c->ssl, p, (int)len);
		if (n > 0) {
			c->tls.write_wants_read = 0;
			evbuffer_drain(c->out, (size_t)n);
			continue;
		}
		switch ((n = SSL_get_error(c->ssl, n))) {
		case SSL_ERROR_WANT_WRITE:
			c->writable = 0;
			return 0;
		case SSL_ERROR_WANT_READ:
			c->readable = 0;
			c->tls.write_wants_read = 1;
			return 0;
		default:
			return conn_tls_fatal(c, n);
		}
	}
	return 0;
}

/* Encrypt and send what the socket takes, the records of one call together; CONN_ERROR on
 * failure, else 0. */
static int
conn_tls_drain(struct conn *c)
{
	int r;

	conn_tls_batch.owner = c;
	conn_tls_batch.len = 0;
	r = conn_tls_encrypt(c);
	if (r == 0 && conn_tls_batch.len != 0 && conn_tls_batch_send(c) < 0)
		r = CONN_ERROR;
	conn_tls_batch.owner = NULL;
	conn_tls_batch.len = 0;
	return r;
}

/* Whatever the socket's new state allows: the handshake, output, then input. */
static void
conn_tls_run(struct conn *c)
{
	size_t left;
	int what = 0, plain;

	/* The rest of a flight or a close_notify the socket did not take. */
	if (c->tls_held_len != 0 && !c->tls.holding && c->writable &&
	    (what = conn_tls_send_held(c)) == CONN_ERROR)
		goto report;
	what = 0;
	if (c->tls.handshaking) {
		if (!c->tls.sniffed && SSL_is_server(c->ssl)) {
			if ((plain = conn_tls_sniff(c)) < 0)
				return;         /* nothing to report before the first byte */
			if (plain) {
				event_active(c->ev, EV_READ, 0);       /* read on as plain TCP */
				return;
			}
		}
		what = conn_tls_handshake(c);
		if (c->tls.handshaking || (what & CONN_ERROR))
			goto report;
	}
	if (evbuffer_get_length(c->out) != 0) {
		what |= conn_tls_drain(c);
		if (what & CONN_ERROR)
			goto report;
	}
	left = conn_out_left(c);
	conn_arm_timer(c, 1, c->write_timeout_ms, left != 0);
	if (c->want_drained && left <= c->write_low) {
		c->want_drained = 0;
		what |= CONN_DRAINED;
	}
	if (c->reading)
		what |= conn_tls_fill(c);
report:
	if (what & (CONN_EOF | CONN_ERROR))
		conn_update_timers(c);
	if (what != 0)
		c->cb(c, what, c->arg);
}

static void
conn_tls_read_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	conn_touch(c, 0);
	if (c->error)
		return;
	c->readable = 1;
	conn_tls_run(c);
}

