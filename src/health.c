#include "config.h"
#include "health.h"
#include "http_body.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "http.h"
#include "jcond.h"
#include "log.h"
#include "tls.h"
#include "upstream_set.h"
#include "upstream_state.h"

/* The most of an answer a check reads: a health answer is small. */
#define HEALTH_MAX_ANSWER (64 * 1024)
/* Nesting a health answer may have above the fields looked at. */
#define HEALTH_MAX_DEPTH 64

struct health_check {
	struct health *h;
	const struct config_upstream *up;
	const struct config_server *srv;
	struct event *timer;            /* the next check, or the deadline of this one */
	struct conn conn;
	int running;                    /* conn is open */
	unsigned passes, fails;         /* in a row */
	void *tls_session;
};

struct health {
	struct event_base *base;
	struct timers *timers;          /* the checks' connection timeouts, passed on with them */
	struct health_check **checks;   /* each on its own: a check that stays keeps its place */
	size_t nchecks;
	struct jcond_scratch *scratch;  /* expect.json reads the answer with it */
};

static void health_timer_cb(evutil_socket_t fd, short what, void *arg);
static void health_conn_cb(struct conn *conn, int what, void *arg);

static void
health_timer(struct health_check *hc, uint64_t ms)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	evtimer_add(hc->timer, &tv);
}

int
health_expect(const struct config_health *cfg, int status, const char *body, size_t len,
    struct jcond_scratch *scratch, const char **why)
{
	if (!config_status_in(cfg->status, status)) {
		*why = "unexpected status";
		return 0;
	}
	if (cfg->json == NULL)
		return 1;
	switch (jcond_eval(cfg->json, body, len, status, scratch)) {
	case 1:
		return 1;
	case 0:
		*why = "JSON answer not as expected";
		return 0;
	default:
		*why = "answer not valid JSON";
		return 0;
	}
}

/* The check is over: close, count, tell the shared state, and plan the next one. */
static void
health_done(struct health_check *hc, int passed, const char *why)
{
	const struct config_health *cfg = hc->up->health;
	struct upstream_server_state *st = hc->srv->state;

	if (hc->running) {
		conn_close(&hc->conn);
		hc->running = 0;
	}
	atomic_fetch_add_explicit(&st->checks_total[passed ? 0 : 1], 1, memory_order_relaxed);
	if (passed) {
		hc->fails = 0;
		if (++hc->passes >= cfg->passes)
			upstream_server_check_verdict(hc->up, hc->srv, 1, NULL);
	} else {
		hc->passes = 0;
		log_debug("upstream %s: health check of %s failed: %s", hc->up->name,
		    hc->srv->addr.text, why);
		if (++hc->fails >= cfg->fails)
			upstream_server_check_verdict(hc->up, hc->srv, 0, why);
	}
	health_timer(hc, cfg->interval);
}

/* A whole answer may be in the input: 1 with a verdict given, 0 to read on. */
static int
health_answer(struct health_check *hc, int eof)
{
	struct evbuffer *in = hc->conn.in;
	struct http_response resp;
	struct evbuffer *body;
	size_t len = evbuffer_get_length(in), want, at;
	const char *p, *why = NULL;
	struct http_chunked ch;
	struct http_answer_body chunks = { HTTP_ANSWER_CHUNKED, NULL, &ch };
	struct http_chunk_piece piece;
	ssize_t r;
	int passed, rc;

	want = len < HEALTH_MAX_ANSWER ? len : HEALTH_MAX_ANSWER;
	p = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
	r = http_parse_response(p, want, &resp);
	if (r == HTTP_INCOMPLETE && !eof && len < HEALTH_MAX_ANSWER)
		return 0;
	if (r <= 0) {
		health_done(hc, 0, "malformed answer");
		return 1;
	}
	if (resp.status < 200) {
		evbuffer_drain(in, (size_t)r);
		return health_answer(hc, eof);
	}
	p += r;
	len -= (size_t)r;
	if (resp.framing.chunked) {
		if ((body = evbuffer_new()) == NULL) {
			health_done(hc, 0, "out of memory");
			return 1;
		}
		http_chunked_init(&ch);
		rc = HTTP_CHUNKED_MORE;
		at = (size_t)r;
		while (rc != HTTP_CHUNKED_DONE && (rc = http_answer_next(&chunks, in, at,
		    (size_t)-1, eof, &piece)) != HTTP_CHUNKED_NONE) {
			if (rc == HTTP_CHUNKED_ERROR)
				break;
			if (rc == HTTP_CHUNKED_DATA)
				evbuffer_add(body, piece.data, piece.data_len);
			at += piece.consumed;
		}
		if (rc != HTTP_CHUNKED_DONE && rc != HTTP_CHUNKED_ERROR && !eof &&
		    evbuffer_get_length(in) < HEALTH_MAX_ANSWER) {
			evbuffer_free(body);
			return 0;
		}
		passed = rc == HTTP_CHUNKED_DONE && health_expect(hc->up->health, resp.status,
		    (const char *)evbuffer_pullup(body, -1), evbuffer_get_length(body), hc->h->scratch,
		    &why);
		evbuffer_free(body);
		health_done(hc, passed, rc == HTTP_CHUNKED_DONE ? why : "malformed chunked answer");
		return 1;
	}
	if (resp.framing.content_length >= 0) {
		if ((uint64_t)resp.framing.content_length > HEALTH_MAX_ANSWER) {
			health_done(hc, 0, "answer too large");
			return 1;
		}
		if (len < (size_t)resp.framing.content_length) {
			if (eof) {
				health_done(hc, 0, "answer cut short");
				return 1;
			}
			return 0;
		}
		len = (size_t)resp.framing.content_length;
	} else if (!eof && evbuffer_get_length(in) < HEALTH_MAX_ANSWER) {
		return 0;       /* delimited by the end of the connection */
	}
	passed = health_expect(hc->up->health, resp.status, p, len, hc->h->scratch, &why);
	health_done(hc, passed, why);
	return 1;
}

static void
health_conn_cb(struct conn *conn, int what, void *arg)
{
	struct health_check *hc = arg;
	char reason[160];

	if ((what & CONN_READ) && health_answer(hc, (what & CONN_EOF) != 0))
		return;
	if (what & CONN_READ)
		conn_read_again(conn);  /* a reset may have come with the data */
	if (what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) {
		if (conn->tls.failed) {
			tls_conn_error(conn, reason, sizeof(reason));
			health_done(hc, 0, reason);
		} else if (what & CONN_EOF) {
			if (!health_answer(hc, 1))
				health_done(hc, 0, "closed before answering");
		} else {
			health_done(hc, 0, conn->error ? strerror(conn->error) : "timeout");
		}
		return;
	}
	conn_flush(conn);
}

static void
health_begin(struct health_check *hc)
{
	const struct config_health *cfg = hc->up->health;
	const struct config_addr *addr = &hc->srv->addr;
	const char *host = cfg->host != NULL ? cfg->host :
	    hc->up->host_header != NULL ? hc->up->host_header : addr->text;
	int fd, one = 1;

	fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		health_done(hc, 0, strerror(errno));
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (conn_init(&hc->conn, hc->h->timers, fd, health_conn_cb, hc) < 0) {
		close(fd);
		health_done(hc, 0, "out of memory");
		return;
	}
	hc->running = 1;
	if (conn_connect(&hc->conn, (const struct sockaddr *)&addr->ss, addr->sslen) < 0 ||
	    (hc->up->tls != NULL &&
	    tls_connect(&hc->conn, hc->up->tls->ctx, addr->name ? addr->name : addr->host,
	    &hc->tls_session) < 0)) {
		health_done(hc, 0, strerror(errno));
		return;
	}
	evbuffer_add_printf(hc->conn.out, "GET %s HTTP/1.1\r\nHost: %s\r\n"
	    "User-Agent: jsongate-health/%s\r\nAccept: application/json\r\n"
	    "Connection: close\r\n\r\n", cfg->path, host, PACKAGE_VERSION);
	conn_set_timeouts(&hc->conn, cfg->timeout, cfg->timeout);
	conn_read_start(&hc->conn);
	conn_flush(&hc->conn);
	health_timer(hc, cfg->timeout);
}

static void
health_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct health_check *hc = arg;

	(void)fd;
	(void)what;
	if (hc->running)
		health_done(hc, 0, "timeout");
	else
		health_begin(hc);
}

static void
health_check_free(struct health_check *hc)
{
	if (hc->running)
		conn_close(&hc->conn);
	if (hc->timer != NULL)
		event_free(hc->timer);
	tls_session_free(hc->tls_session);
	free(hc);
}

/* The check of old that checks srv of up, taken out of old, or NULL. */
static struct health_check *
health_take(struct health *old, const struct config_upstream *up,
    const struct config_server *srv)
{
	struct health_check *hc;
	size_t i;

	for (i = 0; old != NULL && i < old->nchecks; i++) {
		hc = old->checks[i];
		if (hc != NULL && hc->up == up && hc->srv->state == srv->state) {
			old->checks[i] = NULL;
			return hc;
		}
	}
	return NULL;
}

/* A check of srv of up, its first one at once, so that a dead server is known soon. */
static struct health_check *
health_check_new(struct health *h, const struct config_upstream *up,
    const struct config_server *srv)
{
	struct health_check *hc;

	if ((hc = calloc(1, sizeof(*hc))) == NULL ||
	    (hc->timer = evtimer_new(h->base, health_timer_cb, hc)) == NULL) {
		free(hc);
		return NULL;
	}
	hc->h = h;
	hc->up = up;
	hc->srv = srv;
	health_timer(hc, 0);
	return hc;
}

struct health *
health_update(struct health *old, struct event_base *base, const struct config *cfg)
{
	struct health *h;
	struct health_check *hc;
	size_t i, j, n = 0;

	for (i = 0; i < cfg->nupstreams; i++) {
		const struct config_upstream *up = &cfg->upstreams[i];
		if (up->health != NULL)
			n += up->current->nservers;
		else    /* health: removed by a reload: a server it had failed is back */
			for (j = 0; j < up->current->nservers; j++)
				upstream_server_unchecked(up, &up->current->servers[j]);
	}
	h = NULL;
	if (n != 0 && ((h = calloc(1, sizeof(*h))) == NULL ||
	    (h->checks = calloc(n, sizeof(*h->checks))) == NULL ||
	    (h->scratch = jcond_scratch_new(HEALTH_MAX_DEPTH, HEALTH_MAX_ANSWER)) == NULL)) {
		if (h != NULL)
			free(h->checks);
		free(h);
		h = NULL;
		log_errorx("out of memory for health checks");
	}
	if (h != NULL) {
		h->base = base;
		/* Checks that stay keep their connection and its timeouts: those are old's. */
		if (old != NULL && old->timers != NULL) {
			h->timers = old->timers;
			old->timers = NULL;
		} else if ((h->timers = timers_new(base)) == NULL) {
			jcond_scratch_free(h->scratch);
			free(h->checks);
			free(h);
			h = NULL;
			log_errorx("out of memory for health checks");
		}
	}
	for (i = 0; h != NULL && i < cfg->nupstreams; i++) {
		const struct config_upstream *up = &cfg->upstreams[i];
		const struct upstream_set *set = up->current;
		for (j = 0; up->health != NULL && j < set->nservers; j++) {
			if ((hc = health_take(old, up, &set->servers[j])) != NULL) {
				hc->h = h;
				hc->srv = &set->servers[j];     /* the new version of the server */
			} else if ((hc = health_check_new(h, up, &set->servers[j])) == NULL) {
				log_errorx("out of memory for health checks");
				continue;
			}
			h->checks[h->nchecks++] = hc;
		}
	}
	health_stop(old);
	return h;
}

struct health *
health_start(struct event_base *base, const struct config *cfg)
{
	return health_update(NULL, base, cfg);
}

void
health_stop(struct health *h)
{
	size_t i;

	if (h == NULL)
		return;
	for (i = 0; i < h->nchecks; i++)
		if (h->checks[i] != NULL)
			health_check_free(h->checks[i]);
	free(h->checks);
	timers_free(h->timers);
	jcond_scratch_free(h->scratch);
	free(h);
}
