#include "config.h"
#include "conn.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

/* Bytes asked for per read: large enough that a big body takes few system calls. */
#define CONN_READ_CHUNK (64 * 1024)

static void conn_read_event_cb(evutil_socket_t fd, short events, void *arg);
static void conn_write_event_cb(evutil_socket_t fd, short events, void *arg);

static void
conn_arm_timer(struct event *ev, uint64_t ms, int on)
{
	struct timeval tv;

	if (on && ms != 0) {
		tv.tv_sec = (time_t)(ms / 1000);
		tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
		event_add(ev, &tv);
	} else {
		event_remove_timer(ev);
	}
}

/* Read timeouts run only while input is wanted; write timeouts while output waits. */
static void
conn_update_timers(struct conn *c)
{
	conn_arm_timer(c->rev, c->read_timeout_ms, c->reading && !c->eof);
	conn_arm_timer(c->wev, c->write_timeout_ms,
	    c->connecting || evbuffer_get_length(c->out) != 0);
}

int
conn_init(struct conn *c, struct event_base *base, int fd, conn_cb cb, void *arg)
{
	c->fd = fd;
	c->cb = cb;
	c->arg = arg;
	c->read_max = 256 * 1024;
	c->write_low = 0;
	c->read_timeout_ms = c->write_timeout_ms = 0;
	c->error = 0;
	c->readable = c->reading = c->connecting = c->eof = c->want_drained = 0;
	c->writable = 1;
	c->in = evbuffer_new();
	c->out = evbuffer_new();
	c->rev = event_new(base, fd, EV_READ | EV_PERSIST | EV_ET, conn_read_event_cb, c);
	c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST | EV_ET, conn_write_event_cb, c);
	if (c->in == NULL || c->out == NULL || c->rev == NULL || c->wev == NULL ||
	    event_add(c->rev, NULL) < 0 || event_add(c->wev, NULL) < 0) {
		if (c->in != NULL)
			evbuffer_free(c->in);
		if (c->out != NULL)
			evbuffer_free(c->out);
		if (c->rev != NULL)
			event_free(c->rev);
		if (c->wev != NULL)
			event_free(c->wev);
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
	event_free(c->rev);
	event_free(c->wev);
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

/* Read until the socket is empty, the input is full, or the peer closed. Returns what. */
static int
conn_fill(struct conn *c)
{
	struct evbuffer_iovec vec[2];
	size_t have, want;
	ssize_t n;
	int nvec, what = 0;

	while (c->readable && !c->eof) {
		have = evbuffer_get_length(c->in);
		if (have >= c->read_max)
			break;
		want = c->read_max - have;
		if (want > CONN_READ_CHUNK)
			want = CONN_READ_CHUNK;
		nvec = evbuffer_reserve_space(c->in, (ev_ssize_t)want, vec, 2);
		if (nvec <= 0) {
			c->error = ENOMEM;
			return what | CONN_ERROR;
		}
		if (nvec == 2 && vec[0].iov_len >= want)
			nvec = 1;
		n = readv(c->fd, (struct iovec *)vec, nvec);
		if (n < 0) {
			evbuffer_commit_space(c->in, vec, 0);
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
			evbuffer_commit_space(c->in, vec, 0);
			c->eof = 1;
			return what | CONN_EOF;
		}
		if ((size_t)n <= vec[0].iov_len) {
			vec[0].iov_len = (size_t)n;
			nvec = 1;
		} else {
			vec[1].iov_len = (size_t)n - vec[0].iov_len;
		}
		evbuffer_commit_space(c->in, vec, nvec);
		what |= CONN_READ;
		/* A short read means the socket is empty for now: the next edge says when not. */
		if ((size_t)n < want) {
			c->readable = 0;
			break;
		}
	}
	return what;
}

static void
conn_read_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;
	int what;

	(void)fd;
	if (events & EV_TIMEOUT) {
		if (c->reading)
			c->cb(c, CONN_TIMEOUT, c->arg);
		return;
	}
	c->readable = 1;
	if (!c->reading)
		return;
	what = conn_fill(c);
	if (what & (CONN_EOF | CONN_ERROR))
		conn_update_timers(c);
	/* Stopped by read_max with data still waiting: no new edge will come for it, so look
	 * again from the loop once the owner has taken some input. */
	else if ((what & CONN_READ) && c->readable)
		event_active(c->rev, EV_READ, 0);
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
	if (c->readable)
		event_active(c->rev, EV_READ, 0);
}

void
conn_read_stop(struct conn *c)
{
	if (!c->reading)
		return;
	c->reading = 0;
	conn_arm_timer(c->rev, 0, 0);
}

/* Write what the socket takes; returns CONN_ERROR on failure, else 0. */
static int
conn_drain(struct conn *c)
{
	int n;

	while (c->writable && evbuffer_get_length(c->out) != 0) {
		n = evbuffer_write_atmost(c->out, c->fd, -1);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->writable = 0;
				break;
			}
			if (errno == EINTR)
				continue;
			c->error = errno;
			return CONN_ERROR;
		}
	}
	return 0;
}

void
conn_flush(struct conn *c)
{
	if (c->connecting || c->error)
		return;
	if (conn_drain(c) != 0) {
		/* Report from the loop: the caller is in the middle of something. */
		event_active(c->wev, EV_WRITE, 0);
		return;
	}
	conn_arm_timer(c->wev, c->write_timeout_ms, evbuffer_get_length(c->out) != 0);
	/* Drained here rather than by a socket edge: still report it, from the loop. */
	if (c->want_drained && evbuffer_get_length(c->out) <= c->write_low)
		event_active(c->wev, EV_WRITE, 0);
}

static void
conn_write_event_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;
	int what = 0;
	socklen_t len = sizeof(c->error);

	(void)fd;
	if (events & EV_TIMEOUT) {
		c->cb(c, CONN_TIMEOUT, c->arg);
		return;
	}
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
	if (conn_drain(c) != 0) {
		c->cb(c, what | CONN_ERROR, c->arg);
		return;
	}
	conn_arm_timer(c->wev, c->write_timeout_ms, evbuffer_get_length(c->out) != 0);
	if (c->want_drained && evbuffer_get_length(c->out) <= c->write_low) {
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
