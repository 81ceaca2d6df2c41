#include "resp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#define RESP_MAX_DEPTH 4
#define RESP_MAX_ELEMS 1024
#define RESP_MAX_BULK (512 * 1024)
#define RESP_MAX_LINE (64 * 1024)

static const char *const resp_status_names[] = {
#define RESP_STATUS_NAME(id, name) name,
	RESP_STATUSES(RESP_STATUS_NAME)
#undef RESP_STATUS_NAME
};

struct resp_pending {
	TAILQ_ENTRY(resp_pending) entry;
	uint64_t deadline;              /* ms, resp_ms() */
	resp_cb cb;
	void *arg;
};

TAILQ_HEAD(resp_queue, resp_pending);

struct resp_client {
	struct event_base *base;
	struct sockaddr_storage addr;
	int addrlen;
	uint32_t timeout_ms, retry_ms;
	struct bufferevent *bev;        /* NULL: not connected */
	struct event *timer;            /* the head's deadline */
	struct resp_queue pending;
	uint64_t down_until;            /* ms: no connection attempt before */
	struct resp_stats stats;
};

const char *
resp_status_name(enum resp_status status)
{
	return (unsigned)status < RESP_STATUS_N ? resp_status_names[status] : "?";
}

static uint64_t
resp_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Arm the timer for the head's deadline, or disarm it. */
static void
resp_arm(struct resp_client *c)
{
	struct resp_pending *p = TAILQ_FIRST(&c->pending);
	uint64_t now = resp_ms(), left;
	struct timeval tv;

	if (p == NULL) {
		event_del(c->timer);
		return;
	}
	left = p->deadline > now ? p->deadline - now : 0;
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	event_add(c->timer, &tv);
}

/* Close the connection and fail every pending command with st; no new connection before
 * retry_ms. */
static void
resp_fail(struct resp_client *c, enum resp_status st)
{
	struct resp_queue q;
	struct resp_pending *p;

	if (c->bev != NULL) {
		bufferevent_free(c->bev);
		c->bev = NULL;
	}
	event_del(c->timer);
	c->down_until = resp_ms() + c->retry_ms;
	c->stats.failures++;
	/* Callbacks may send commands: they go to a fresh queue. */
	TAILQ_INIT(&q);
	TAILQ_CONCAT(&q, &c->pending, entry);
	while ((p = TAILQ_FIRST(&q)) != NULL) {
		TAILQ_REMOVE(&q, p, entry);
		p->cb(p->arg, st, NULL);
		free(p);
	}
}

static void
resp_reply_free(struct resp_reply *r)
{
	size_t i;

	if (r->type != RESP_ARRAY)
		return;
	for (i = 0; i < r->n; i++)
		resp_reply_free(&r->elems[i]);
	free(r->elems);
}

/* One CRLF-terminated line at b[pos..len): its length without the CRLF, 0 incomplete
 * (returned through *linelen = SIZE_MAX), or -1 when too long. */
static int
resp_line(const char *b, size_t len, size_t pos, size_t *linelen)
{
	const char *cr;
	size_t max = len - pos < RESP_MAX_LINE ? len - pos : RESP_MAX_LINE;

	if ((cr = memchr(b + pos, '\r', max)) == NULL) {
		*linelen = SIZE_MAX;
		return len - pos >= RESP_MAX_LINE ? -1 : 0;
	}
	if ((size_t)(cr - b) + 1 >= len) {
		*linelen = SIZE_MAX;
		return 0;
	}
	if (cr[1] != '\n')
		return -1;
	*linelen = (size_t)(cr - (b + pos));
	return 0;
}

static int
resp_number(const char *s, size_t n, long long *v)
{
	char buf[24], *end;

	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	*v = strtoll(buf, &end, 10);
	return *end != '\0' || errno != 0 ? -1 : 0;
}

/* Parse one reply at b[*pos..len) into r: 1 done (*pos past it), 0 incomplete, -1 bad. */
static int
resp_parse(const char *b, size_t len, size_t *pos, struct resp_reply *r, int depth)
{
	size_t n, p = *pos;
	long long v;
	int k;

	memset(r, 0, sizeof(*r));
	if (p >= len)
		return 0;
	if (resp_line(b, len, p + 1, &n) < 0)
		return -1;
	if (n == SIZE_MAX)
		return 0;
	switch (b[p]) {
	case '+':
	case '-':
		r->type = b[p] == '+' ? RESP_STATUS : RESP_ERROR;
		r->str = b + p + 1;
		r->len = n;
		*pos = p + 1 + n + 2;
		return 1;
	case ':':
		if (resp_number(b + p + 1, n, &r->integer) != 0)
			return -1;
		r->type = RESP_INTEGER;
		*pos = p + 1 + n + 2;
		return 1;
	case '$':
		if (resp_number(b + p + 1, n, &v) != 0 || v < -1 || v > RESP_MAX_BULK)
			return -1;
		p += 1 + n + 2;
		if (v == -1) {
			r->type = RESP_NIL;
			*pos = p;
			return 1;
		}
		if (len - p < (size_t)v + 2)
			return 0;
		if (b[p + (size_t)v] != '\r' || b[p + (size_t)v + 1] != '\n')
			return -1;
		r->type = RESP_BULK;
		r->str = b + p;
		r->len = (size_t)v;
		*pos = p + (size_t)v + 2;
		return 1;
	case '*':
		if (depth >= RESP_MAX_DEPTH || resp_number(b + p + 1, n, &v) != 0 || v < -1 ||
		    v > RESP_MAX_ELEMS)
			return -1;
		p += 1 + n + 2;
		if (v == -1) {
			r->type = RESP_NIL;
			*pos = p;
			return 1;
		}
		r->type = RESP_ARRAY;
		if (v > 0 && (r->elems = calloc((size_t)v, sizeof(*r->elems))) == NULL)
			return -1;
		for (r->n = 0; r->n < (size_t)v; r->n++) {
			if ((k = resp_parse(b, len, &p, &r->elems[r->n], depth + 1)) != 1) {
				resp_reply_free(r);
				return k;
			}
		}
		*pos = p;
		return 1;
	default:
		return -1;
	}
}

static void
resp_read_cb(struct bufferevent *bev, void *arg)
{
	struct resp_client *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct resp_pending *p;
	struct resp_reply r;
	size_t len, pos;
	const char *b;
	int k;

	while ((len = evbuffer_get_length(in)) > 0) {
		b = (const char *)evbuffer_pullup(in, -1);
		pos = 0;
		if ((k = resp_parse(b, len, &pos, &r, 0)) == 0)
			break;
		if (k < 0 || (p = TAILQ_FIRST(&c->pending)) == NULL) {
			/* Garbage, or a reply to nothing: the stream cannot be trusted. */
			resp_fail(c, RESP_PROTOCOL);
			return;
		}
		TAILQ_REMOVE(&c->pending, p, entry);
		c->stats.replies++;
		p->cb(p->arg, RESP_OK, &r);
		resp_reply_free(&r);
		free(p);
		/* The callback may have failed the connection. */
		if (c->bev != bev)
			return;
		evbuffer_drain(in, pos);
	}
	resp_arm(c);
}

static void
resp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct resp_client *c = arg;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED)
		return;
	resp_fail(c, RESP_CONNECTION);
}

static void
resp_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resp_client *c = arg;
	struct resp_pending *p = TAILQ_FIRST(&c->pending);

	(void)fd;
	(void)what;
	if (p == NULL)
		return;
	if (p->deadline > resp_ms()) {
		resp_arm(c);
		return;
	}
	/* A late reply would answer the wrong command: start over. */
	c->stats.timeouts++;
	resp_fail(c, RESP_TIMEOUT);
}

struct resp_client *
resp_new(struct event_base *base, const char *address, uint32_t timeout_ms, uint32_t retry_ms)
{
	struct resp_client *c;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->addrlen = (int)sizeof(c->addr);
	if (evutil_parse_sockaddr_port(address, (struct sockaddr *)&c->addr, &c->addrlen) != 0 ||
	    (c->timer = evtimer_new(base, resp_timer_cb, c)) == NULL) {
		free(c);
		return NULL;
	}
	c->base = base;
	c->timeout_ms = timeout_ms;
	c->retry_ms = retry_ms;
	TAILQ_INIT(&c->pending);
	return c;
}

void
resp_free(struct resp_client *c)
{
	struct resp_pending *p;

	if (c == NULL)
		return;
	if (c->bev != NULL)
		bufferevent_free(c->bev);
	c->bev = NULL;
	while ((p = TAILQ_FIRST(&c->pending)) != NULL) {
		TAILQ_REMOVE(&c->pending, p, entry);
		p->cb(p->arg, RESP_CLOSED, NULL);
		free(p);
	}
	event_free(c->timer);
	free(c);
}

static int
resp_connect(struct resp_client *c)
{
	c->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL)
		return -1;
	bufferevent_setcb(c->bev, resp_read_cb, NULL, resp_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	c->stats.connects++;
	/* A refusal may be reported at once, through the event callback. */
	if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&c->addr, c->addrlen) != 0) {
		bufferevent_free(c->bev);
		c->bev = NULL;
		return -1;
	}
	return 0;
}

enum resp_status
resp_command(struct resp_client *c, int argc, const char *const *argv, const size_t *argvlen,
    resp_cb cb, void *arg)
{
	struct resp_pending *p;
	struct evbuffer *out;
	int i;

	if (c->bev == NULL) {
		if (resp_ms() < c->down_until)
			return RESP_DOWN;
		if (resp_connect(c) != 0) {
			c->down_until = resp_ms() + c->retry_ms;
			c->stats.failures++;
			return RESP_CONNECTION;
		}
	}
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return RESP_CONNECTION;
	out = bufferevent_get_output(c->bev);
	evbuffer_add_printf(out, "*%d\r\n", argc);
	for (i = 0; i < argc; i++) {
		evbuffer_add_printf(out, "$%zu\r\n", argvlen[i]);
		evbuffer_add(out, argv[i], argvlen[i]);
		evbuffer_add(out, "\r\n", 2);
	}
	p->deadline = resp_ms() + c->timeout_ms;
	p->cb = cb;
	p->arg = arg;
	TAILQ_INSERT_TAIL(&c->pending, p, entry);
	if (TAILQ_FIRST(&c->pending) == p)
		resp_arm(c);
	return RESP_OK;
}

void
resp_stats(const struct resp_client *c, struct resp_stats *st)
{
	*st = c->stats;
}
