#include "config.h"
#include "exchange.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "http.h"
#include "log.h"
#include "server.h"
#include "tls.h"
#include "upstream.h"
#include "upstream_state.h"

/* Longest Retry-After honoured, in seconds. */
#define RETRY_AFTER_MAX 3600

enum exchange_timer { TIMER_QUEUE, TIMER_CONNECT, TIMER_TRY };

static void exchange_timer_cb(evutil_socket_t fd, short what, void *arg);
static void exchange_conn_cb(struct conn *conn, int what, void *arg);

static const struct config *
exchange_cfg(const struct exchange *ex)
{
	return ex->up->wr->rt->cfg;
}

int
exchange_init(struct exchange *ex, struct worker *w, exchange_cb cb, void *arg)
{
	ex->cb = cb;
	ex->arg = arg;
	ex->stage = EXCHANGE_IDLE;
	ex->retry = ex->next_retry = 0;
	ex->timer = evtimer_new(w->base, exchange_timer_cb, ex);
	return ex->timer != NULL ? 0 : -1;
}

void
exchange_free(struct exchange *ex)
{
	if (ex->stage != EXCHANGE_IDLE)
		exchange_end(ex, 0);
	if (ex->timer != NULL)
		event_free(ex->timer);
	ex->timer = NULL;
}

static void
exchange_timer(struct exchange *ex, enum exchange_timer which, uint64_t ms)
{
	struct timeval tv;

	ex->timer_mode = which;
	ex->timer_on = 1;
	evtimer_add(ex->timer, conn_timeout_tv(ex->timer, ms, &tv));
}

/* Most tries never arm the timer: deleting an event that is not pending costs too. */
static void
exchange_timer_off(struct exchange *ex)
{
	if (ex->timer_on) {
		evtimer_del(ex->timer);
		ex->timer_on = 0;
	}
}

/* What is left of the per-try deadline (at least 1 ms), or 0 when there is none. */
static uint64_t
exchange_try_left(const struct exchange *ex)
{
	uint64_t limit = ex->try_timeout, spent;

	if (limit == 0)
		return 0;
	spent = upstream_state_now() - ex->started;
	return spent < limit ? limit - spent : 1;
}

/* The per-try deadline runs from the try's start until the answer's head. */
static void
exchange_try_timer(struct exchange *ex)
{
	uint64_t left = exchange_try_left(ex);

	exchange_timer_off(ex);
	ex->in_try = left != 0;
	if (ex->in_try)
		exchange_timer(ex, TIMER_TRY, left);
}

/* The connect ends at the connect deadline or the per-try one, whichever comes first. */
static uint64_t
exchange_connect_left(const struct exchange *ex)
{
	uint64_t left = exchange_try_left(ex);

	return left != 0 && left < ex->connect_timeout ? left : ex->connect_timeout;
}

/* sp was chosen: take a pooled connection (1), or start connecting (0), or fail (-1). */
static int
exchange_connect(struct exchange *ex, struct server_pool *sp, int trial, int fresh)
{
	struct upconn *uc;

	ex->sp = sp;
	ex->state = sp->srv->state;
	ex->trial = trial != 0;
	ex->verdict = 0;
	if (!fresh && (uc = upstream_take_idle(sp)) != NULL) {
		ex->uc = uc;
		conn_set_cb(&uc->conn, exchange_conn_cb, ex);
		ex->stage = EXCHANGE_ACTIVE;
		exchange_try_timer(ex);
		return 1;
	}
	uc = upstream_connect(sp, ex->up->wr->w->timers, exchange_conn_cb, ex);
	if (uc == NULL) {
		ex->fail = FAIL_CONNECT;
		ex->error = errno;
		exchange_verdict(ex, FAIL_CONNECT);
		return -1;
	}
	ex->uc = uc;
	if (!uc->conn.connecting && uc->conn.ssl == NULL) {
		ex->stage = EXCHANGE_ACTIVE;     /* connected at once (loopback may) */
		exchange_try_timer(ex);
		return 1;
	}
	ex->stage = EXCHANGE_CONNECTING;
	exchange_timer(ex, TIMER_CONNECT, exchange_connect_left(ex));
	return 0;
}

int
exchange_start(struct exchange *ex, struct upstream_pool *up, int fresh)
{
	enum upstream_pick_none why;
	struct server_pool *sp;
	int trial;

	ex->up = up;
	ex->sp = NULL;
	ex->state = NULL;
	ex->uc = NULL;
	ex->retry = ex->next_retry;
	ex->next_retry = 0;
	ex->fail = 0;
	ex->error = 0;
	ex->in_try = 0;
	ex->fresh = fresh != 0;
	ex->started = upstream_state_now();
	sp = upstream_pick(up, ex->key, ex->keylen, ex->tried, ex->ntried, &trial, &why);
	if (sp != NULL)
		return exchange_connect(ex, sp, trial, fresh);
	if (why == UPSTREAM_NONE_LEFT) {
		ex->fail = EXCHANGE_NO_SERVER;
		return -1;
	}
	if (upstream_queue(up, ex) < 0) {
		atomic_fetch_add_explicit(&up->cfg->state->overloaded_total, 1,
		    memory_order_relaxed);
		ex->fail = EXCHANGE_OVERLOADED;
		return -1;
	}
	ex->stage = EXCHANGE_QUEUED;
	exchange_timer(ex, TIMER_QUEUE, exchange_cfg(ex)->timeouts.queue);
	return 0;
}

int
exchange_wake(struct exchange *ex)
{
	enum upstream_pick_none why;
	struct server_pool *sp;
	int trial, r;

	sp = upstream_pick(ex->up, ex->key, ex->keylen, ex->tried, ex->ntried, &trial, &why);
	if (sp == NULL && why == UPSTREAM_NONE_FULL)
		return 0;
	upstream_unqueue(ex->up, ex);
	exchange_timer_off(ex);
	if (sp == NULL) {
		ex->stage = EXCHANGE_IDLE;
		ex->fail = EXCHANGE_NO_SERVER;
		ex->cb(ex, EXCHANGE_FAILED, ex->arg);
		return 1;
	}
	r = exchange_connect(ex, sp, trial, ex->fresh);
	if (r < 0)
		ex->stage = EXCHANGE_IDLE;
	if (r != 0)
		ex->cb(ex, r > 0 ? EXCHANGE_READY : EXCHANGE_FAILED, ex->arg);
	return 1;
}

void
exchange_head_received(struct exchange *ex)
{
	if (ex->in_try) {
		exchange_timer_off(ex);
		ex->in_try = 0;
	}
}

void
exchange_verdict(struct exchange *ex, unsigned fail)
{
	const struct config_upstream *cfg = ex->up->cfg;

	if (ex->verdict || ex->sp == NULL)
		return;
	ex->verdict = 1;
	if (fail == 0)
		upstream_server_succeeded(cfg, ex->sp->srv, ex->trial);
	else
		upstream_server_failed(cfg, ex->sp->srv, fail, ex->trial, upstream_state_now(),
		    upstream_pool_ejected(ex->up), ex->up->nservers);
	ex->trial = 0;
}

void
exchange_end(struct exchange *ex, int reusable)
{
	struct server_pool *sp = ex->sp;

	exchange_timer_off(ex);
	ex->in_try = 0;
	if (ex->stage == EXCHANGE_QUEUED)
		upstream_unqueue(ex->up, ex);
	if (ex->uc != NULL) {
		ex->uc->conn.read_max = CONN_READ_MAX;  /* as a try may have lowered it */
		if (reusable)
			upstream_release(ex->uc);
		else
			upstream_close(ex->uc);
		ex->uc = NULL;
	}
	if (sp != NULL) {
		if (!ex->verdict)
			upstream_server_no_verdict(sp->srv, ex->trial);
		ex->trial = 0;
		ex->sp = NULL;
		upstream_unpick(sp);
	}
	if (ex->retry) {
		upstream_retry_end(ex->up->cfg);
		ex->retry = 0;
	}
	ex->stage = EXCHANGE_IDLE;
}

/* The server of the try that just failed is out of service: ejected (by this failure or
 * before), failing its health checks, or kept off by Retry-After. */
static int
exchange_left_out(const struct exchange *ex)
{
	return ex->state != NULL &&
	    upstream_server_availability(ex->state, upstream_state_now()) == UPSTREAM_OUT;
}

int
exchange_may_retry(struct exchange *ex, unsigned fail,
    enum upstream_retry_reason why, size_t ntried, unsigned *retries,
    int idempotent, int replayable, const char *request_id)
{
	const struct config_upstream *up = ex->up->cfg;
	int stale = why == UPSTREAM_RETRY_STALE;
	int budgeted;

	if (stale && ntried > 0)
		ntried--;       /* the same server may take it again */
	if (ntried >= CONFIG_MAX_TRIES || ntried >= ex->up->nservers || ex->up->wr->w->draining)
		return 0;
	if (fail == FAIL_CONNECT)
		return upstream_retry_begin(up, UPSTREAM_RETRY_CONNECT_ERROR, 0);
	if (!(up->retry_on & fail) || !idempotent || !replayable ||
	    (!stale && *retries >= up->retries))
		return 0;
	/* What cannot multiply an overload is not charged: the extra try after a stale pooled
	 * connection (no server failed: it is the try the pool could not carry), and a
	 * failover from a server the reset left out of service (it gets nothing more). */
	budgeted = !stale && !(fail == FAIL_RESET && exchange_left_out(ex));
	if (!upstream_retry_begin(up, why, budgeted)) {
		log_warnx("upstream %s: retry budget exhausted, not retrying request %s",
		    up->name, request_id);
		return 0;
	}
	ex->next_retry = budgeted != 0;
	if (!stale)
		(*retries)++;
	return 1;
}

size_t
exchange_hash_key(const struct config_upstream *up, const char *remote_addr,
    const struct http_request *req, struct http_str target, struct http_str path, char *out,
    size_t cap)
{
	const char *var = up->hash_key;
	struct http_str v = { "", 0 };
	size_t i, n;

	if (var == NULL)
		return 0;
	if (strcmp(var, "$remote_addr") == 0) {
		v.p = remote_addr;
		v.len = strlen(remote_addr);
	} else if (strcmp(var, "$request_uri") == 0) {
		v = target;
	} else if (strcmp(var, "$path") == 0) {
		v = path;
	} else if (strcmp(var, "$host") == 0) {
		v = req->host;
	} else if (strncmp(var, "$header.", 8) == 0) {
		n = strlen(var + 8);
		for (i = 0; i < req->nheaders; i++)
			if (req->headers[i].name.len == n &&
			    http_ieq(req->headers[i].name.p, var + 8, n)) {
				v = req->headers[i].value;
				break;
			}
	}
	n = v.len < cap ? v.len : cap;
	memcpy(out, v.p, n);
	return n;
}

unsigned
exchange_status_failure(int status)
{
	switch (status) {
	case 429: return FAIL_429;
	case 500: return FAIL_500;
	case 502: return FAIL_502;
	case 503: return FAIL_503;
	case 504: return FAIL_504;
	default: return 0;
	}
}

enum upstream_retry_reason
exchange_status_reason(int status)
{
	switch (status) {
	case 429: return UPSTREAM_RETRY_STATUS_429;
	case 500: return UPSTREAM_RETRY_STATUS_500;
	case 502: return UPSTREAM_RETRY_STATUS_502;
	case 503: return UPSTREAM_RETRY_STATUS_503;
	default: return UPSTREAM_RETRY_STATUS_504;
	}
}

enum gateway_error
exchange_status_error(int status)
{
	switch (status) {
	case 429:
	case 503:
		return GW_UPSTREAM_OVERLOADED;
	case 504:
		return GW_UPSTREAM_TIMEOUT;
	default:
		return GW_UPSTREAM_UNAVAILABLE;
	}
}

/* Seconds of a Retry-After value (delay-seconds or an HTTP-date), or -1. */
static long
exchange_retry_after(struct http_str v)
{
	char text[64];
	struct tm tm;
	long secs = 0;
	size_t i;

	if (v.len == 0 || v.len >= sizeof(text))
		return -1;
	memcpy(text, v.p, v.len);
	text[v.len] = '\0';
	for (i = 0; i < v.len && text[i] >= '0' && text[i] <= '9'; i++)
		if ((secs = secs * 10 + (text[i] - '0')) > RETRY_AFTER_MAX)
			secs = RETRY_AFTER_MAX;
	if (i == v.len)
		return secs;
	memset(&tm, 0, sizeof(tm));
	if (strptime(text, "%a, %d %b %Y %H:%M:%S GMT", &tm) == NULL)
		return -1;
	secs = (long)(timegm(&tm) - time(NULL));
	return secs < 0 ? 0 : secs > RETRY_AFTER_MAX ? RETRY_AFTER_MAX : secs;
}

void
exchange_note_retry_after(struct exchange *ex, const struct http_response *resp)
{
	long secs;

	if ((resp->status != 503 && resp->status != 429) || ex->sp == NULL)
		return;
	secs = exchange_retry_after(http_find_header(resp->headers, resp->nheaders,
	    "retry-after"));
	if (secs > 0)
		upstream_server_not_before(ex->sp->srv,
		    upstream_state_now() + (uint64_t)secs * 1000);
}

enum gateway_error
exchange_describe_connect(const struct exchange *ex, char *client, size_t ccap, char *log,
    size_t lcap)
{
	const char *name = ex->up->cfg->name;
	const char *addr = ex->sp != NULL ? ex->sp->srv->addr.text : "-";

	if (ex->tls_failed) {
		snprintf(client, ccap, "TLS handshake with upstream %s failed: %s", name,
		    ex->tls_error);
		snprintf(log, lcap, "TLS handshake with upstream %s server %s failed: %s", name,
		    addr, ex->tls_error);
		return GW_UPSTREAM_TLS;
	}
	if (ex->error == ETIMEDOUT) {
		snprintf(client, ccap, "connect to upstream %s timed out", name);
		snprintf(log, lcap, "connect to upstream %s server %s timed out", name, addr);
		return GW_UPSTREAM_TIMEOUT;
	}
	if (ex->error == ECONNREFUSED)
		snprintf(client, ccap, "connect to upstream %s refused", name);
	else
		snprintf(client, ccap, "connect to upstream %s failed: %s", name,
		    strerror(ex->error));
	snprintf(log, lcap, "connect to upstream %s server %s failed: %s", name, addr,
	    strerror(ex->error));
	return GW_UPSTREAM_UNAVAILABLE;
}

/* A connect that failed or ran out of time: the connection goes, the owner hears why. */
static void
exchange_connect_failed(struct exchange *ex, int error)
{
	ex->fail = FAIL_CONNECT;
	ex->error = error;
	ex->tls_failed = ex->uc->conn.tls.failed;
	if (ex->tls_failed)
		tls_conn_error(&ex->uc->conn, ex->tls_error, sizeof(ex->tls_error));
	exchange_timer_off(ex);
	exchange_verdict(ex, FAIL_CONNECT);
	upstream_close(ex->uc);
	ex->uc = NULL;
	ex->stage = EXCHANGE_ACTIVE;    /* the server stays chosen until exchange_end */
	ex->cb(ex, EXCHANGE_FAILED, ex->arg);
}

static void
exchange_conn_cb(struct conn *conn, int what, void *arg)
{
	struct exchange *ex = arg;

	if (ex->stage == EXCHANGE_CONNECTING) {
		if (what & (CONN_ERROR | CONN_EOF | CONN_TIMEOUT)) {
			exchange_connect_failed(ex, conn->error ? conn->error : ECONNRESET);
			return;
		}
		if (!(what & CONN_CONNECTED))
			return;
		ex->stage = EXCHANGE_ACTIVE;
		exchange_try_timer(ex);
		what = (what & ~CONN_CONNECTED) | EXCHANGE_READY;
	}
	ex->cb(ex, what, ex->arg);
}

static void
exchange_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	(void)fd;
	(void)what;
	ex->timer_on = 0;
	switch (ex->timer_mode) {
	case TIMER_QUEUE:
		upstream_unqueue(ex->up, ex);
		atomic_fetch_add_explicit(&ex->up->cfg->state->overloaded_total, 1,
		    memory_order_relaxed);
		ex->stage = EXCHANGE_IDLE;
		ex->fail = EXCHANGE_OVERLOADED;
		ex->cb(ex, EXCHANGE_FAILED, ex->arg);
		break;
	case TIMER_CONNECT:
		exchange_connect_failed(ex, ETIMEDOUT);
		break;
	case TIMER_TRY:
		ex->in_try = 0;
		ex->cb(ex, CONN_TIMEOUT, ex->arg);
		break;
	}
}
