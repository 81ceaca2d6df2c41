#include "config.h"
#include "fetch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "body.h"
#include "http_body.h"
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
static void fetch_try_begin(void *arg);
static void fetch_try_end(void *arg);
static void fetch_tries_failed(void *arg);

static const struct tries_ops fetch_tries_ops = {
	fetch_try_begin, fetch_try_end, fetch_tries_failed
};

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
	    tries_init(&f->t, w, fetch_exchange_cb, &fetch_tries_ops, f) < 0) {
		fetch_free(f);
		return -1;
	}
	return 0;
}

/* The socket layer must not write into the block any more. */
static void
fetch_try_end(void *arg)
{
	struct fetch *f = arg;

	if (f->t.ex.uc != NULL) {
		f->t.ex.uc->conn.sink = NULL;
		f->t.ex.uc->conn.read_max = CONN_READ_MAX;
	}
	f->sinking = 0;
}

/* End this try's exchange. */
static void
fetch_end_try(struct fetch *f, int reusable)
{
	fetch_try_end(f);
	if (f->t.ex.timer != NULL)
		exchange_end(&f->t.ex, reusable);
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
	tries_forget(&f->t);
	f->state = FETCH_IDLE;
}

void
fetch_free(struct fetch *f)
{
	fetch_cancel(f);
	tries_free(&f->t);
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
	return tries_server(&f->t);
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
	f->max_body = max_body;
	f->timeouts = timeouts;
	tries_reset(&f->t);
	tries_begin(&f->t, up, f->request_id);
	f->t.idempotent = idempotent != 0;
	f->t.replayable = 1;            /* the request is kept whole for every try */
	f->t.ex.connect_timeout = timeouts->upstream_connect;
	f->t.ex.try_timeout = timeouts->upstream_try;
	f->t.ex.key = key;
	f->t.ex.keylen = keylen;
	f->error = GW_UPSTREAM_UNAVAILABLE;
	f->message[0] = '\0';
	f->state = FETCH_RUNNING;
	f->started_us = upstream_state_now_us();
	if (timeout_ms != 0)
		evtimer_add(f->timer, conn_timeout_tv(f->timer, timeout_ms, &tv));
	tries_start(&f->t, 0);
}

/* A try starts: nothing of an earlier try's answer stays. */
static void
fetch_try_begin(void *arg)
{
	struct fetch *f = arg;

	f->head_seen = f->up_close = 0;
	f->status = 0;
	fetch_drop_answer(f);
}

/* No try is left: the fetch fails with the last try's error. */
static void
fetch_tries_failed(void *arg)
{
	struct fetch *f = arg;

	f->status = 0;
	f->error = f->t.error;
	snprintf(f->message, sizeof(f->message), "%s", f->t.message);
	fetch_finish(f, 0);
}

static void
fetch_send(struct fetch *f)
{
	struct conn *uc = &f->t.ex.uc->conn;
	uint64_t ms = f->timeouts->upstream_response;

	evbuffer_add(uc->out, evbuffer_pullup(f->request, -1), evbuffer_get_length(f->request));
	f->t.sent = 1;
	if (uc->ssl == NULL)
		uc->read_max = FETCH_HEAD_READ;
	conn_set_timeouts(uc, ms, ms);
	conn_read_start(uc);
}

/* The answer's head: 1 when read (the body follows), 0 for more bytes, -1 when the try is
 * over (failed or retried). */
static int
fetch_read_head(struct fetch *f)
{
	struct conn *uc = &f->t.ex.uc->conn;
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
			tries_invalid(&f->t);
			tries_next(&f->t, FAIL_INVALID, UPSTREAM_RETRY_INVALID);
			return -1;
		}
		if (resp->status >= 200)
			break;
		evbuffer_drain(uc->in, (size_t)r);
	}
	exchange_head_received(&f->t.ex);
	if (tries_retry_status(&f->t, resp))
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
	struct conn *uc = &f->t.ex.uc->conn;
	struct http_answer_body b = { f->body_mode == FETCH_BODY_CHUNKED ? HTTP_ANSWER_CHUNKED :
	    f->body_mode == FETCH_BODY_CLOSE ? HTTP_ANSWER_CLOSE : HTTP_ANSWER_LENGTH, &f->left,
	    &f->chunk };
	int r, sinking;

	if (f->body_mode == FETCH_BODY_NONE)
		return 1;
	if (f->body_mode == FETCH_BODY_BLOCK) {
		sinking = f->sinking;
		body_block_fill(f->block, f->block_len, &f->left, &sinking, uc);
		f->sinking = sinking != 0;
		return f->left == 0;
	}
	while ((r = http_answer_take(&b, uc->in, 0, f->body)) != HTTP_CHUNKED_NONE) {
		if (r == HTTP_CHUNKED_ERROR) {
			/* The answer is not the client's yet: another try may go. */
			tries_bad_framing(&f->t);
			tries_next(&f->t, FAIL_INVALID, UPSTREAM_RETRY_INVALID);
			return -1;
		}
		if (evbuffer_get_length(f->body) > f->max_body)
			break;
		if (r == HTTP_CHUNKED_DONE)
			return 1;
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
	struct conn *uc = &f->t.ex.uc->conn;

	if (!f->head_seen && fetch_read_head(f) <= 0)
		return;
	if (fetch_read_body(f) != 1)
		return;
	exchange_verdict(&f->t.ex, 0);  /* the whole answer came */
	/* Bytes past the answer, or an answer that ends the connection: never reuse it. */
	fetch_finish(f, !f->up_close && evbuffer_get_length(uc->in) == 0 && !uc->eof);
}

/* The connection ended, failed or timed out while the answer was awaited. */
static void
fetch_upstream_failed(struct fetch *f, int what)
{
	if (f->head_seen && f->body_mode == FETCH_BODY_CLOSE && (what & CONN_EOF)) {
		exchange_verdict(&f->t.ex, 0);
		fetch_finish(f, 0);
		return;
	}
	/* Before or after the head: the answer is not the client's yet, another try may go. */
	tries_connection_failed(&f->t, what, f->head_seen);
}

static void
fetch_exchange_cb(struct exchange *ex, int what, void *arg)
{
	struct fetch *f = arg;
	struct upconn *uc;

	(void)ex;
	tries_note_server(&f->t);
	if (what & EXCHANGE_FAILED) {
		tries_connect_failed(&f->t);
		return;
	}
	if (what & EXCHANGE_READY)
		fetch_send(f);
	/* Each step may end the try (and start another, or the fetch ends): go on only while
	 * it is the same connection. */
	uc = f->t.ex.uc;
	if ((what & CONN_READ) && f->state == FETCH_RUNNING && uc != NULL) {
		fetch_input(f);
		/* Still waiting for the rest of this answer: a reset may have come with the data. */
		if (f->state == FETCH_RUNNING && f->t.ex.uc == uc)
			conn_read_again(&uc->conn);
	}
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && f->state == FETCH_RUNNING &&
	    uc != NULL && f->t.ex.uc == uc)
		fetch_upstream_failed(f, what);
	if (f->state == FETCH_RUNNING && f->t.ex.uc != NULL)
		conn_flush(&f->t.ex.uc->conn);
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
