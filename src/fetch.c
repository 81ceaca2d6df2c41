#include "config.h"
#include "fetch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "body.h"
#include "log.h"
#include "server.h"
#include "tls.h"
#include "upstream.h"
#include "upstream_state.h"

/* Largest answer head taken from an upstream. */
#define FETCH_MAX_HEAD (64 * 1024)
/* What a plain connection reads before the head is parsed: a Content-Length body read with
 * the head is copied into its block, the rest is read straight into place. */
#define FETCH_HEAD_READ (8 * 1024)

enum fetch_body {
	FETCH_BODY_NONE,
	FETCH_BODY_LENGTH,              /* Content-Length over TLS: into body */
	FETCH_BODY_BLOCK,               /* Content-Length: read straight into block */
	FETCH_BODY_CHUNKED,
	FETCH_BODY_CLOSE
};

static void fetch_exchange_cb(struct exchange *ex, int what, void *arg);
static void fetch_timer_cb(evutil_socket_t fd, short what, void *arg);
static void fetch_try(struct fetch *f, int fresh);

int
fetch_init(struct fetch *f, struct worker *w, fetch_done_cb cb, void *arg)
{
	memset(f, 0, sizeof(*f));
	f->w = w;
	f->cb = cb;
	f->arg = arg;
	f->request_id = "-";
	f->timer = evtimer_new(w->base, fetch_timer_cb, f);
	f->request = evbuffer_new();
	f->head = evbuffer_new();
	f->body = evbuffer_new();
	if (f->timer == NULL || f->request == NULL || f->head == NULL || f->body == NULL ||
	    exchange_init(&f->ex, w, fetch_exchange_cb, f) < 0) {
		fetch_free(f);
		return -1;
	}
	return 0;
}

static void
fetch_forget_tried(struct fetch *f)
{
	while (f->ntried > 0)
		upstream_server_unref(f->tried[--f->ntried]);
}

/* End this try's exchange; the socket layer must not write into the block any more. */
static void
fetch_end_try(struct fetch *f, int reusable)
{
	if (f->ex.uc != NULL) {
		f->ex.uc->conn.sink = NULL;
		f->ex.uc->conn.read_max = CONN_READ_MAX;
	}
	f->sinking = 0;
	if (f->ex.timer != NULL)
		exchange_end(&f->ex, reusable);
}

/* Let go of what an answer left: its head and body (output that references the block
 * keeps it alive). */
static void
fetch_drop_answer(struct fetch *f)
{
	if (f->block != NULL)
		body_block_release(f->block);
	f->block = NULL;
	f->block_len = 0;
	if (f->head != NULL)
		evbuffer_drain(f->head, evbuffer_get_length(f->head));
	if (f->body != NULL)
		evbuffer_drain(f->body, evbuffer_get_length(f->body));
}

void
fetch_cancel(struct fetch *f)
{
	if (f->timer != NULL)
		evtimer_del(f->timer);
	fetch_end_try(f, 0);
	fetch_drop_answer(f);
	fetch_forget_tried(f);
	f->state = FETCH_IDLE;
}

void
fetch_free(struct fetch *f)
{
	fetch_cancel(f);
	exchange_free(&f->ex);
	if (f->timer != NULL)
		event_free(f->timer);
	if (f->request != NULL)
		evbuffer_free(f->request);
	if (f->head != NULL)
		evbuffer_free(f->head);
	if (f->body != NULL)
		evbuffer_free(f->body);
	f->timer = NULL;
	f->request = f->head = f->body = NULL;
}

const struct config_server *
fetch_server(const struct fetch *f)
{
	return f->ntried != 0 ? f->tried[f->ntried - 1]->srv : NULL;
}

int
fetch_body(struct fetch *f, struct body_block **b, size_t *len)
{
	if (f->block == NULL && (*len = evbuffer_get_length(f->body)) != 0) {
		if ((f->block = body_block_copy(f->w->bodies, f->body)) == NULL)
			return -1;
		f->block_len = *len;
		evbuffer_drain(f->body, *len);
	}
	*b = f->block;
	*len = f->block_len;
	return 0;
}

/* The fetch is over: give the answer (or the error) to the owner. */
static void
fetch_finish(struct fetch *f, int reusable)
{
	fetch_end_try(f, reusable);
	evtimer_del(f->timer);
	f->state = FETCH_DONE;
	f->ended_us = upstream_state_now_us();
	f->cb(f, f->arg);
}

static void
fetch_fail(struct fetch *f, enum gateway_error err, const char *fmt, const char *detail)
{
	f->status = 0;
	f->error = err;
	snprintf(f->message, sizeof(f->message), fmt, f->up->cfg->name, detail);
	fetch_finish(f, 0);
}

void
fetch_start(struct fetch *f, struct upstream_pool *up, const char *key, size_t keylen,
    int idempotent, size_t max_body, const struct route_timeouts *timeouts,
    uint64_t timeout_ms)
{
	struct timeval tv;

	fetch_cancel(f);
	f->up = up;
	f->idempotent = idempotent != 0;
	f->max_body = max_body;
	f->timeouts = timeouts;
	f->ex.connect_timeout = timeouts->upstream_connect;
	f->ex.try_timeout = timeouts->upstream_try;
	f->retries = 0;
	f->stale_retried = 0;
	f->error = GW_UPSTREAM_UNAVAILABLE;
	f->message[0] = '\0';
	f->ex.key = key;
	f->ex.keylen = keylen;
	f->state = FETCH_RUNNING;
	f->started_us = upstream_state_now_us();
	if (timeout_ms != 0)
		evtimer_add(f->timer, conn_timeout_tv(f->timer, timeout_ms, &tv));
	fetch_try(f, 0);
}

static void
fetch_note_server(struct fetch *f)
{
	if (f->noted || f->ex.sp == NULL || f->ntried == CONFIG_MAX_TRIES)
		return;
	upstream_server_ref(f->ex.sp);
	f->tried[f->ntried++] = f->ex.sp;
	f->noted = 1;
}

static void
fetch_try(struct fetch *f, int fresh)
{
	int r;

	f->noted = f->head_seen = f->up_close = 0;
	f->status = 0;
	fetch_drop_answer(f);
	f->ex.tried = f->tried;
	f->ex.ntried = f->ntried;
	r = exchange_start(&f->ex, f->up, fresh);
	fetch_note_server(f);
	if (r < 0)
		fetch_exchange_cb(&f->ex, EXCHANGE_FAILED, f);
	else if (r > 0)
		fetch_exchange_cb(&f->ex, EXCHANGE_READY, f);
}

/* This try failed with fail: another one, or the fetch fails with err. */
static void
fetch_next_try(struct fetch *f, unsigned fail, enum upstream_retry_reason why,
    enum gateway_error err, const char *fmt, const char *detail)
{
	exchange_verdict(&f->ex, fail);
	fetch_end_try(f, 0);
	f->status = 0;
	f->error = err;
	snprintf(f->message, sizeof(f->message), fmt, f->up->cfg->name, detail);
	if (!exchange_may_retry(&f->ex, fail, why, f->ntried, &f->retries, f->idempotent,
	    1, f->request_id)) {
		fetch_finish(f, 0);
		return;
	}
	fetch_try(f, 0);
}

/* The exchange could not give a connection: no server left, overloaded, or a failed
 * connect. */
static void
fetch_connect_failed(struct fetch *f)
{
	char logmsg[384];

	if (f->ex.fail == EXCHANGE_OVERLOADED) {
		log_warnx("upstream %s: every server is at max_connections and the queue is full "
		    "or the wait ran out (request %s)", f->up->cfg->name, f->request_id);
		fetch_fail(f, GW_UPSTREAM_OVERLOADED, "every server of upstream %s is at its limit%s",
		    "");
		return;
	}
	if (f->ex.fail == EXCHANGE_NO_SERVER) {
		if (f->ntried == 0)
			fetch_fail(f, GW_UPSTREAM_UNAVAILABLE, "upstream %s has no server%s", "");
		else
			fetch_finish(f, 0);     /* the last try's error stands */
		return;
	}
	f->error = exchange_describe_connect(&f->ex, f->message, sizeof(f->message), logmsg,
	    sizeof(logmsg));
	log_warnx("%s (request %s)", logmsg, f->request_id);
	exchange_verdict(&f->ex, FAIL_CONNECT);
	fetch_end_try(f, 0);
	if (!exchange_may_retry(&f->ex, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR, f->ntried,
	    &f->retries, f->idempotent, 1, f->request_id)) {
		fetch_finish(f, 0);
		return;
	}
	fetch_try(f, 0);
}

static void
fetch_send(struct fetch *f)
{
	struct conn *uc = &f->ex.uc->conn;
	uint64_t ms = f->timeouts->upstream_response;

	evbuffer_add(uc->out, evbuffer_pullup(f->request, -1), evbuffer_get_length(f->request));
	if (uc->ssl == NULL)
		uc->read_max = FETCH_HEAD_READ;
	conn_set_timeouts(uc, ms, ms);
	conn_read_start(uc);
}

/* A status in retry_on that another try may improve on: drop this answer for a try
 * elsewhere (1), or take it (0). */
static int
fetch_retry_status(struct fetch *f, const struct http_response *resp)
{
	unsigned fail = exchange_status_failure(resp->status);
	char code[8];

	if (fail == 0)
		return 0;       /* judged at the answer's end */
	exchange_verdict(&f->ex, fail);
	exchange_note_retry_after(&f->ex, resp);
	if (!(f->up->cfg->retry_on & fail) || !exchange_may_retry(&f->ex, fail,
	    exchange_status_reason(resp->status), f->ntried, &f->retries, f->idempotent, 1,
	    f->request_id))
		return 0;
	log_info("upstream %s server %s answered %d: trying another server (request %s)",
	    f->up->cfg->name, f->ex.sp->srv->addr.text, resp->status, f->request_id);
	snprintf(code, sizeof(code), "%d", resp->status);
	f->error = exchange_status_error(resp->status);
	snprintf(f->message, sizeof(f->message), "upstream %s answered %s", f->up->cfg->name,
	    code);
	fetch_end_try(f, 0);
	fetch_try(f, 0);
	return 1;
}

/* The answer's head: 1 when read (the body follows), 0 for more bytes, -1 when the try is
 * over (failed or retried). */
static int
fetch_read_head(struct fetch *f)
{
	struct conn *uc = &f->ex.uc->conn;
	struct http_response *resp = &f->w->resp;
	size_t len, want;
	ssize_t r;

	for (;;) {
		len = evbuffer_get_length(uc->in);
		want = len < FETCH_MAX_HEAD ? len : FETCH_MAX_HEAD;
		r = http_parse_response((const char *)evbuffer_pullup(uc->in, (ev_ssize_t)want),
		    want, resp);
		if (r == HTTP_INCOMPLETE && len < FETCH_MAX_HEAD) {
			/* A long head: room for all of it (the socket layer reads on). */
			if (len >= uc->read_max)
				uc->read_max = FETCH_MAX_HEAD;
			return 0;
		}
		if (r <= 0 || resp->status == 101) {
			log_warnx("malformed answer from upstream %s server %s (request %s)",
			    f->up->cfg->name, fetch_server(f)->addr.text, f->request_id);
			fetch_next_try(f, FAIL_INVALID, UPSTREAM_RETRY_INVALID, GW_UPSTREAM_INVALID,
			    "malformed response from upstream %s%s", "");
			return -1;
		}
		if (resp->status >= 200)
			break;
		evbuffer_drain(uc->in, (size_t)r);
	}
	exchange_head_received(&f->ex);
	if (fetch_retry_status(f, resp))
		return -1;
	f->status = resp->status;
	f->coding = body_content_coding(resp->headers, resp->nheaders);
	f->up_close = resp->framing.conn_close ||
	    (resp->version_minor == 0 && !resp->framing.conn_keepalive);
	if (resp->status == 204 || resp->status == 304) {
		f->body_mode = FETCH_BODY_NONE;
	} else if (resp->framing.chunked) {
		f->body_mode = FETCH_BODY_CHUNKED;
		http_chunked_init(&f->chunk);
	} else if (resp->framing.content_length >= 0) {
		f->left = (uint64_t)resp->framing.content_length;
		if (f->left > f->max_body) {
			fetch_fail(f, GW_UPSTREAM_INVALID, "the answer of upstream %s is over its "
			    "size limit%s", "");
			return -1;
		}
		if (f->left == 0) {
			f->body_mode = FETCH_BODY_NONE;
		} else if (uc->ssl != NULL) {
			f->body_mode = FETCH_BODY_LENGTH;
		} else {
			/* Plain TCP: the socket layer reads the body straight into one block. */
			f->body_mode = FETCH_BODY_BLOCK;
			f->block_len = (size_t)f->left;
			if ((f->block = body_block_new(f->w->bodies, f->block_len)) == NULL) {
				fetch_fail(f, GW_UPSTREAM_INVALID, "no memory for the answer of "
				    "upstream %s%s", "");
				return -1;
			}
		}
	} else {
		f->body_mode = FETCH_BODY_CLOSE;
		f->up_close = 1;
	}
	evbuffer_remove_buffer(uc->in, f->head, (size_t)r);
	f->head_seen = 1;
	uc->read_max = CONN_READ_MAX;
	return 1;
}

/* Take body bytes: 1 when the answer is complete, 0 for more, -1 when the fetch ended. */
static int
fetch_read_body(struct fetch *f)
{
	struct conn *uc = &f->ex.uc->conn;
	struct evbuffer_iovec vec;
	size_t n, consumed, off, dlen;
	int r, sinking;

	switch (f->body_mode) {
	case FETCH_BODY_NONE:
		return 1;
	case FETCH_BODY_BLOCK:
		sinking = f->sinking;
		body_block_fill(f->block, f->block_len, &f->left, &sinking, uc);
		f->sinking = sinking != 0;
		return f->left == 0;
	case FETCH_BODY_LENGTH:
		n = evbuffer_get_length(uc->in);
		if (n > f->left)
			n = (size_t)f->left;
		evbuffer_remove_buffer(uc->in, f->body, n);
		f->left -= n;
		return f->left == 0;
	case FETCH_BODY_CHUNKED:
		while (evbuffer_peek(uc->in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = http_chunked_feed(&f->chunk, vec.iov_base, vec.iov_len, &consumed, &off,
			    &dlen);
			if (r == HTTP_CHUNKED_ERROR) {
				log_warnx("invalid chunked framing from upstream %s server %s "
				    "(request %s)", f->up->cfg->name, fetch_server(f)->addr.text,
				    f->request_id);
				fetch_next_try(f, FAIL_INVALID, UPSTREAM_RETRY_INVALID,
				    GW_UPSTREAM_INVALID, "malformed response from upstream %s%s", "");
				return -1;
			}
			if (r == HTTP_CHUNKED_DATA) {
				evbuffer_drain(uc->in, off);
				evbuffer_remove_buffer(uc->in, f->body, dlen);
				evbuffer_drain(uc->in, consumed - off - dlen);
			} else {
				evbuffer_drain(uc->in, consumed);
			}
			if (evbuffer_get_length(f->body) > f->max_body)
				break;
			if (r == HTTP_CHUNKED_DONE)
				return 1;
		}
		break;
	case FETCH_BODY_CLOSE:
		evbuffer_remove_buffer(uc->in, f->body, evbuffer_get_length(uc->in));
		break;
	}
	if (evbuffer_get_length(f->body) > f->max_body) {
		fetch_fail(f, GW_UPSTREAM_INVALID, "the answer of upstream %s is over its size "
		    "limit%s", "");
		return -1;
	}
	return 0;
}

static void
fetch_input(struct fetch *f)
{
	struct conn *uc = &f->ex.uc->conn;

	if (!f->head_seen && fetch_read_head(f) <= 0)
		return;
	if (fetch_read_body(f) != 1)
		return;
	exchange_verdict(&f->ex, 0);    /* the whole answer came */
	/* Bytes past the answer, or an answer that ends the connection: never reuse it. */
	fetch_finish(f, !f->up_close && evbuffer_get_length(uc->in) == 0 && !uc->eof);
}

/* A pooled connection the server closed while idle, the request crossing the close: no
 * server failure.  One extra try on a new connection when a reset may be retried (it uses
 * up no retries, as nginx's), else the fetch fails. */
static int
fetch_stale_retry(struct fetch *f)
{
	struct upconn *uc = f->ex.uc;

	if (!uc->reused || f->stale_retried || f->head_seen || evbuffer_get_length(uc->conn.in) != 0)
		return 0;
	if (!exchange_may_retry(&f->ex, FAIL_RESET, UPSTREAM_RETRY_STALE, f->ntried, &f->retries,
	    f->idempotent, 1, f->request_id)) {
		log_warnx("upstream %s server %s closed a pooled connection before answering "
		    "(request %s)", f->up->cfg->name, fetch_server(f)->addr.text, f->request_id);
		fetch_fail(f, GW_UPSTREAM_UNAVAILABLE,
		    "upstream %s closed the connection before answering%s", "");
		return 1;
	}
	f->stale_retried = 1;
	fetch_end_try(f, 0);
	if (f->noted)
		upstream_server_unref(f->tried[--f->ntried]);  /* the same server may take it */
	fetch_try(f, 1);
	return 1;
}

/* The connection ended, failed or timed out while the answer was awaited. */
static void
fetch_upstream_failed(struct fetch *f, int what)
{
	struct upconn *uc = f->ex.uc;
	const char *name = f->up->cfg->name, *addr = fetch_server(f)->addr.text;
	char reason[160];

	if (f->head_seen && f->body_mode == FETCH_BODY_CLOSE && (what & CONN_EOF)) {
		exchange_verdict(&f->ex, 0);
		fetch_finish(f, 0);
		return;
	}
	if (uc->conn.tls_failed && !f->head_seen) {
		/* A TLS 1.3 server refuses a client certificate after our side of the
		 * handshake: the request never reached the application, and may go elsewhere.
		 * But its bytes went out: one that is not safe to send twice goes to no other
		 * server, whatever the alert was for. */
		tls_conn_error(&uc->conn, reason, sizeof(reason));
		log_warnx("TLS with upstream %s server %s failed: %s (request %s)", name, addr,
		    reason, f->request_id);
		if (!f->idempotent) {
			exchange_verdict(&f->ex, FAIL_CONNECT);
			fetch_fail(f, GW_UPSTREAM_TLS, "TLS handshake with upstream %s failed: %s",
			    reason);
			return;
		}
		fetch_next_try(f, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR, GW_UPSTREAM_TLS,
		    "TLS handshake with upstream %s failed: %s", reason);
		return;
	}
	if (!(what & CONN_TIMEOUT) && fetch_stale_retry(f))
		return;
	log_warnx("upstream %s server %s %s (request %s)", name, addr,
	    what & CONN_TIMEOUT ? "did not answer in time" :
	    "closed the connection before the answer was complete", f->request_id);
	if (what & CONN_TIMEOUT)
		fetch_next_try(f, FAIL_TIMEOUT, UPSTREAM_RETRY_TIMEOUT, GW_UPSTREAM_TIMEOUT,
		    "upstream %s did not answer in time%s", "");
	else
		fetch_next_try(f, FAIL_RESET, UPSTREAM_RETRY_RESET, GW_UPSTREAM_UNAVAILABLE,
		    "upstream %s closed the connection before answering%s", "");
}

static void
fetch_exchange_cb(struct exchange *ex, int what, void *arg)
{
	struct fetch *f = arg;
	struct upconn *uc;

	(void)ex;
	fetch_note_server(f);
	if (what & EXCHANGE_FAILED) {
		fetch_connect_failed(f);
		return;
	}
	if (what & EXCHANGE_READY)
		fetch_send(f);
	/* Each step may end the try (and start another, or the fetch ends): go on only while
	 * it is the same connection. */
	uc = f->ex.uc;
	if ((what & CONN_READ) && f->state == FETCH_RUNNING && uc != NULL) {
		fetch_input(f);
		/* Still waiting for the rest of this answer: a reset may have come with the data. */
		if (f->state == FETCH_RUNNING && f->ex.uc == uc)
			conn_read_again(&uc->conn);
	}
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && f->state == FETCH_RUNNING &&
	    uc != NULL && f->ex.uc == uc)
		fetch_upstream_failed(f, what);
	if (f->state == FETCH_RUNNING && f->ex.uc != NULL)
		conn_flush(&f->ex.uc->conn);
}

static void
fetch_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fetch *f = arg;

	(void)fd;
	(void)what;
	log_warnx("upstream %s: no answer within the time allowed (request %s)",
	    f->up->cfg->name, f->request_id);
	fetch_fail(f, GW_UPSTREAM_TIMEOUT, "upstream %s did not answer in time%s", "");
}
