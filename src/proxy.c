/* A proxied request's tries and its answer: the server's head, the body streamed
 * or collected for the route's ops, failures and retries. */
#include "config.h"
#include "request.h"

#include "jsonrpc_route.h"

static void proxy_skip_body(struct client *c);
static void proxy_invalid_response(struct client *c);

/* --- tries ------------------------------------------------------------------------------ */

/* A try starts: it carries the request's hash key and the route's timeouts. */
static void
proxy_try_begin(void *arg)
{
	struct client *c = arg;

	c->rq->t.ex.key = c->rq->hash_key;
	c->rq->t.ex.keylen = c->rq->hash_key_len;
	c->rq->t.ex.connect_timeout = c->rq->route->timeouts.upstream_connect;
	c->rq->t.ex.try_timeout = c->rq->route->timeouts.upstream_try;
}

/* No try is left: the client gets the last try's error. */
static void
proxy_tries_failed(void *arg)
{
	struct client *c = arg;

	client_error(c, c->rq->t.error, c->rq->t.message, 0);
}

const struct tries_ops proxy_tries_ops = { proxy_try_begin, NULL, proxy_tries_failed };

/* Write our response head for resp: its headers with the route's header ops, and the
 * framing of the body that follows. */
void
proxy_answer_head(struct client *c, struct http_response *resp, enum answer_framing framing,
    uint64_t length, const char *extra, struct answer_head *h, struct rewrite_vars *vars,
    struct body_tls_text *tls_text)
{
	h->resp = resp;
	h->ops = c->rq->route->response_headers;
	h->vars = NULL;
	h->extra = extra;
	h->framing = framing;
	h->length = length;
	if (c->rq->answer_headers_len != 0) {
		/* The route's CORS says it, not the upstream. */
		proxy_remove_header(resp->headers, &resp->nheaders, "access-control-allow-origin");
		proxy_remove_header(resp->headers, &resp->nheaders,
		    "access-control-allow-credentials");
	}
	if (h->ops != NULL) {
		proxy_vars(c, h->ops->vars, vars, tls_text);
		if (h->ops->vars & (1u << REWRITE_VAR_HEADER))
			proxy_kept_request_headers(c, vars);
		h->vars = vars;
	}
}

void
proxy_write_response_head(struct client *c, struct http_response *resp,
    enum answer_framing framing, uint64_t length, const char *extra)
{
	struct answer_head h;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;

	proxy_answer_head(c, resp, framing, length, extra, &h, &vars, &tls_text);
	c->down->head(c, &h);
	c->rq->status = resp->status;
	c->rq->ans.started = 1;
}

/* 1: collect this response body for the ops its status calls for (response for the statuses
 * of response_on, else error_response); 2: it is over limits.max_body, rewrite it while it is
 * forwarded; 0: stream it untouched; -1: answered already. */
static int
proxy_wants_body(struct client *c, const struct http_response *resp)
{
	const struct config *cfg = client_cfg(c);
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	c->rq->ans.prog = config_status_in(c->rq->route->response_on, resp->status) ?
	    c->rq->route->response : c->rq->route->error_response;
	if (c->rq->ans.prog == NULL)
		why = METRICS_REASON_STATUS;
	else if (c->rq->ans.mode == BODY_NONE && (c->rq->route->validate != VALIDATE_FULL ||
	    resp->framing.content_length != 0 || c->rq->head_request || resp->status == 204 ||
	    resp->status == 304))
		why = METRICS_REASON_EMPTY;
	else if (!body_is_json(c->rq->route, http_find_header(resp->headers, resp->nheaders,
	    "content-type")))
		why = METRICS_REASON_NOT_JSON;
	if (why != METRICS_REASON_NONE) {
		metrics_envelope(c->w, c->rq->route, METRICS_RESPONSE, METRICS_PASSED, why);
		return 0;
	}
	if (c->rq->ans.mode == BODY_NONE) {
		/* Content-Length: 0 is an empty body, which validate: full does not take as JSON. */
		log_warnx("route %s: response body not rewritten: empty body (request %s)",
		    c->rq->route->name, c->rq->request_id);
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_EMPTY,
		    GW_UPSTREAM_INVALID, "response body not rewritten: empty body", 0);
	}
	if (body_content_coding(resp->headers, resp->nheaders) == BODY_CODING_OTHER) {
		/* Streamed untouched (pass) or refused (fail), never run through the ops. */
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_ENCODING,
		    GW_UPSTREAM_INVALID, "upstream response has a Content-Encoding that cannot be "
		    "decoded", 0);
	}
	if (c->rq->ans.mode == BODY_LENGTH && c->rq->ans.left > cfg->limits.max_body) {
		if (proxy_rewriting_can(c, resp))
			return 2;
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT,
		    GW_UPSTREAM_INVALID, "upstream response body exceeds limits.max_body", 0);
	}
	return 1;
}

/* The head kept by proxy_hold_response, parsed into resp (which points into it). */
static void
proxy_parse_held(struct client *c, struct http_response *resp)
{
	size_t hl = evbuffer_get_length(c->rq->resp_head);

	http_parse_response((const char *)evbuffer_pullup(c->rq->resp_head, (ev_ssize_t)hl), hl, resp);
}

/* Keep the answer's head (head_len bytes of the upstream input) and collect its body before
 * answering.  0, or -1 when answered with an error. */
int
proxy_hold_response(struct client *c, size_t head_len)
{
	if ((c->rq->resp_head == NULL && (c->rq->resp_head = evbuffer_new()) == NULL) ||
	    (c->rq->body == NULL && (c->rq->body = evbuffer_new()) == NULL)) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
		return -1;
	}
	evbuffer_drain(c->rq->resp_head, evbuffer_get_length(c->rq->resp_head));
	evbuffer_drain(c->rq->body, evbuffer_get_length(c->rq->body));
	evbuffer_remove_buffer(upconn(c)->in, c->rq->resp_head, head_len);
	if (c->rq->ans.mode == BODY_LENGTH && upconn(c)->ssl == NULL &&
	    c->rq->ans.left <= client_cfg(c)->limits.max_body) {
		c->rq->ans.block = body_block_new(c->w->bodies, (size_t)c->rq->ans.left);
		c->rq->ans.block_len = (size_t)c->rq->ans.left;
	}
	c->rq->ans.collecting = 1;
	c->rq->ans.dechunk = 1;
	c->rq->ans.head_seen = 1;
	return 0;
}

/* Parse the upstream's response head and send ours to the client. Returns 0 when started. */
static int
proxy_read_response_head(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	struct http_response *resp = &c->w->resp;
	size_t len, want;
	ssize_t r;
	int untouched = 0;

	for (;;) {
		len = evbuffer_get_length(in);
		if (len == 0)
			return -1;
		want = len < UPSTREAM_MAX_HEAD ? len : UPSTREAM_MAX_HEAD;
		r = http_parse_response((const char *)evbuffer_pullup(in, (ev_ssize_t)want), want,
		    resp);
		if (r == HTTP_INCOMPLETE && len < UPSTREAM_MAX_HEAD) {
			/* A long head: room for all of it (the socket layer reads on). */
			if (len >= upconn(c)->read_max)
				upconn(c)->read_max = UPSTREAM_MAX_HEAD;
			return -1;
		}
		/* A 101 answers only an upgrade asked for: its connection becomes a tunnel. */
		if (r > 0 && resp->status == 101 && c->rq->upgrade &&
		    tunnel_start(c, resp, (size_t)r) == 0)
			return -1;
		if (r <= 0 || resp->status == 101) {
			proxy_invalid_response(c);
			return -1;
		}
		if (resp->status >= 200)
			break;
		/* Interim responses: relay 100 Continue to a client that waits for it. */
		if (resp->status == 100)
			c->down->continue_(c);
		evbuffer_drain(in, (size_t)r);
	}

	upconn(c)->read_max = CONN_READ_MAX;
	exchange_head_received(&c->rq->t.ex);
	if (tries_retry_status(&c->rq->t, resp))
		return -1;
	/* What was kept for another try is no longer needed. */
	proxy_drop_replay(c);
	c->rq->status = resp->status;
	if ((c->rq->head_request && !c->rq->head_as_get) || resp->status == 204 || resp->status == 304)
		c->rq->ans.mode = BODY_NONE;
	else if (resp->framing.chunked) {
		c->rq->ans.mode = BODY_CHUNKED;
		http_chunked_init(&c->rq->ans.chunk);
	} else if (resp->framing.content_length >= 0) {
		c->rq->ans.mode = resp->framing.content_length ? BODY_LENGTH : BODY_NONE;
		c->rq->ans.left = (uint64_t)resp->framing.content_length;
	} else {
		c->rq->ans.mode = BODY_UNTIL_CLOSE;
	}
	/* An upgrade's connection is never used again: the upstream may have switched. */
	c->rq->ans.up_close = resp->framing.conn_close || c->rq->ans.mode == BODY_UNTIL_CLOSE ||
	    (resp->version_minor == 0 && !resp->framing.conn_keepalive) || c->rq->upgrade;
	c->rq->ans.dechunk = c->rq->ans.mode == BODY_CHUNKED && !c->down->takes_chunks(c);

	/* A forwarded JSON-RPC call: a 2xx JSON answer streams, any other is judged whole. */
	if (c->rq->rpc != NULL &&
	    !jsonrpc_route_streams(c->rq->rpc, resp, c->rq->ans.mode != BODY_NONE))
		return proxy_jsonrpc_hold_answer(c, (size_t)r);
	if (c->rq->route->events != NULL) {
		int ev = proxy_events_wanted(c, resp);
		if (ev > 0)
			return proxy_events_start(c, resp, (size_t)r);
		untouched = ev < 0;
	}
	if (!untouched && proxy_has_response_ops(c->rq->route)) {
		int collect = proxy_wants_body(c, resp);
		if (collect < 0)
			return -1;
		/* Envelope ops: keep the head, collect the body, answer when it is all here (or
		 * rewrite it as it comes, when it is too large to hold). */
		if (collect && proxy_hold_response(c, (size_t)r) != 0)
			return -1;
		if (collect == 2) {
			/* The head moved to resp_head: parsed there, where it stays. */
			proxy_parse_held(c, resp);
			proxy_rewriting_start(c, resp);
		}
		if (collect)
			return c->state == CLIENT_BUSY ? 0 : -1;
	}
	if (resp->framing.chunked && resp->status != 204 && resp->status != 304)
		proxy_write_response_head(c, resp, c->rq->ans.dechunk ? ANSWER_STREAM :
		    ANSWER_CHUNKS, 0, NULL);
	else if (resp->framing.content_length >= 0 && !resp->framing.chunked &&
	    resp->status != 204)
		proxy_write_response_head(c, resp, ANSWER_LENGTH,
		    (uint64_t)resp->framing.content_length, NULL);
	else
		proxy_write_response_head(c, resp, c->rq->ans.mode == BODY_UNTIL_CLOSE ?
		    ANSWER_UNTIL_CLOSE : ANSWER_BODYLESS, 0, NULL);
	evbuffer_drain(in, (size_t)r);
	c->rq->ans.head_seen = 1;
	if (c->rq->head_as_get)
		proxy_skip_body(c);
	return 0;
}

/* A HEAD asked as GET has its head out: the body is not read, nor the connection used again. */
static void
proxy_skip_body(struct client *c)
{
	c->rq->ans.mode = BODY_NONE;
	c->rq->ans.up_close = 1;
}

/* Send n bytes of a body we hold to the client, or drop them for a HEAD request. */
void
proxy_send_body(struct client *c, struct evbuffer *body, size_t n)
{
	if (c->rq->head_request)
		evbuffer_drain(body, n);
	else
		c->down->body(c, body, n);
}

/* Chunked passthrough: forward framing and payload as they are, stopping at the message end;
 * to a client that does not take them, the payload only.  Returns 1 at the end, -1 on bad
 * framing. */
static int
proxy_forward_chunked(struct client *c, struct evbuffer *in)
{
	struct http_answer_body b = proxy_answer_body(c->rq);
	struct http_chunk_piece p;
	int r;

	while ((r = http_answer_next(&b, in, 0, (size_t)-1, 0, &p)) != HTTP_CHUNKED_NONE) {
		if (r == HTTP_CHUNKED_ERROR)
			return -1;
		if (!c->rq->ans.dechunk) {
			c->down->body(c, in, p.consumed);
		} else if (r == HTTP_CHUNKED_DATA) {
			evbuffer_drain(in, p.data_off);
			c->down->body(c, in, p.data_len);
			evbuffer_drain(in, p.consumed - p.data_off - p.data_len);
		} else {
			evbuffer_drain(in, p.consumed);
		}
		if (r == HTTP_CHUNKED_DONE)
			return 1;
	}
	return 0;
}

void
proxy_forward_response_body(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	size_t len = evbuffer_get_length(in), n;
	int done = 0, r;

	if (c->rq->ans.events != NULL) {
		proxy_events_forward(c, 0);
		return;
	}
	if (c->rq->ans.rewriting != NULL) {
		proxy_rewriting_forward(c, 0);
		return;
	}
	switch (c->rq->ans.mode) {
	case BODY_NONE:
		done = 1;
		break;
	case BODY_LENGTH:
		n = len < c->rq->ans.left ? len : (size_t)c->rq->ans.left;
		c->down->body(c, in, n);
		c->rq->ans.left -= n;
		done = c->rq->ans.left == 0;
		break;
	case BODY_CHUNKED:
		r = proxy_forward_chunked(c, in);
		if (r < 0) {
			tries_bad_framing(&c->rq->t);
			client_error(c, GW_UPSTREAM_INVALID, NULL, 1);
			return;
		}
		done = r == 1;
		break;
	case BODY_UNTIL_CLOSE:
		c->down->body(c, in, len);
		break;
	}
	proxy_answer_went_on(c, done, 0);
}

void
proxy_answer_went_on(struct client *c, int ended, int eof)
{
	if (ended) {
		if (eof || evbuffer_get_length(upconn(c)->in) != 0)
			c->rq->ans.up_close = 1;        /* bytes past the response: never reuse */
		client_request_end(c);
		return;
	}
	if (c->down->backlogged(c))
		conn_read_stop(upconn(c));
}

/* The client read enough of the answer: its body goes on from the upstream. */
void
proxy_answer_drained(struct client *c)
{
	if (c->rq->t.ex.uc == NULL)
		return;
	conn_read_start(upconn(c));
	proxy_forward_response_body(c);
}

/* The collected body outgrew limits.max_body: rewrite it as it comes when its ops can, else
 * fail, or stream it on untouched. */
static void
proxy_body_overflow(struct client *c)
{
	struct http_response *resp = &c->w->resp;

	if (c->rq->rpc != NULL) {
		proxy_jsonrpc_too_large(c);
		return;
	}
	proxy_parse_held(c, resp);
	if (proxy_rewriting_can(c, resp)) {
		proxy_rewriting_start(c, resp);
		return;
	}
	log_warnx("route %s: response body exceeds limits.max_body (request %s)", c->rq->route->name,
	    c->rq->request_id);
	if (proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT, GW_UPSTREAM_INVALID,
	    "upstream response body exceeds limits.max_body", 0))
		return;
	proxy_pass_held(c, 0);
}

void
proxy_pass_held(struct client *c, int ended)
{
	struct http_response *resp = &c->w->resp;
	size_t n = evbuffer_get_length(c->rq->body);
	enum answer_framing framing;

	proxy_parse_held(c, resp);
	c->rq->ans.collecting = 0;
	/* What was collected is de-chunked: a chunked body goes on as a stream. */
	framing = c->rq->ans.mode == BODY_CHUNKED ? ANSWER_STREAM : c->rq->ans.mode == BODY_LENGTH ?
	    ANSWER_LENGTH : ANSWER_UNTIL_CLOSE;
	proxy_write_response_head(c, resp, framing, (uint64_t)resp->framing.content_length, NULL);
	if (c->rq->head_as_get) {
		/* The head GET would get: its body is not read. */
		evbuffer_drain(c->rq->body, n);
		proxy_skip_body(c);
	} else {
		c->down->body(c, c->rq->body, n);
	}
	if (!ended) {
		proxy_forward_response_body(c);
		return;
	}
	if (c->rq->t.ex.uc == NULL || c->rq->ans.mode == BODY_UNTIL_CLOSE ||
	    evbuffer_get_length(upconn(c)->in) != 0)
		c->rq->ans.up_close = 1;
	client_request_end(c);
}

/* The whole body is here: apply the route's ops and answer with the result (or per on_error). */
static void
proxy_respond_rewritten(struct client *c)
{
	struct worker *w = c->w;
	struct http_response *resp = &w->resp;
	const struct config *cfg = client_cfg(c);
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	enum body_coding coding;
	char msg[256];
	int rc;

	if (c->rq->rpc != NULL) {
		proxy_jsonrpc_judge(c);
		return;
	}
	proxy_parse_held(c, resp);
	proxy_vars(c, proxy_prog_vars(c->rq->ans.prog), &vars, &tls_text);
	vars.status = resp->status;     /* for when: { status: ... } */
	if (body_needs_headers(c->rq->ans.prog))
		proxy_kept_request_headers(c, &vars);
	c->rq->ans.collecting = 0;
	coding = body_content_coding(resp->headers, resp->nheaders);
	if (c->rq->ans.block != NULL)
		rc = body_apply_block(w->bodies, cfg, c->rq->route, c->rq->ans.prog, coding,
		    c->rq->ans.block, c->rq->ans.block_len, &vars, w->rewritten, &res);
	else if (evbuffer_get_length(c->rq->body) != 0 || c->rq->route->validate == VALIDATE_FULL)
		rc = body_apply(w->bodies, cfg, c->rq->route, c->rq->ans.prog, coding, c->rq->body, &vars,
		    w->rewritten, &res);
	else
		rc = 1;
	if (rc == 1) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		metrics_envelope(w, c->rq->route, METRICS_RESPONSE, METRICS_PASSED, METRICS_REASON_EMPTY);
		proxy_write_response_head(c, resp, ANSWER_LENGTH, 0, NULL);
	} else if (rc < 0) {
		snprintf(msg, sizeof(msg), "response body not rewritten: %s", res.error);
		log_warnx("route %s: %s (request %s)", c->rq->route->name, msg, c->rq->request_id);
		evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
		if (proxy_unrewritten(c, METRICS_RESPONSE, proxy_unrewritten_reason(&res),
		    GW_UPSTREAM_INVALID, msg, 0))
			return;
		/* pass: the upstream's status and bytes, untouched */
		if (c->rq->ans.block != NULL)
			body_block_add_to(c->rq->body, c->rq->ans.block, c->rq->ans.block_len);
		proxy_write_response_head(c, resp, ANSWER_LENGTH, evbuffer_get_length(c->rq->body), NULL);
		proxy_send_body(c, c->rq->body, evbuffer_get_length(c->rq->body));
	} else {
		metrics_envelope(w, c->rq->route, METRICS_RESPONSE, METRICS_APPLIED, METRICS_REASON_NONE);
		metrics_bytes(w, res.spliced, res.copied);
		if (res.status != 0 && res.status != resp->status) {
			resp->status = res.status;
			resp->reason.len = 0;
		}
		const char *extra = "";         /* the body is jsongate's: no strong ETag */
		if (res.inflated)
			proxy_remove_header(resp->headers, &resp->nheaders, "content-encoding");
		if (c->rq->accept_gzip && !res.inflated &&
		    body_content_coding(resp->headers, resp->nheaders) != BODY_CODING_IDENTITY)
			c->rq->accept_gzip = 0;     /* already encoded: leave it */
		if (c->rq->accept_gzip && body_gzip(w->bodies, w->rewritten) == 0)
			extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
		proxy_write_response_head(c, resp, ANSWER_LENGTH, evbuffer_get_length(w->rewritten),
		    extra);
		proxy_send_body(c, w->rewritten, evbuffer_get_length(w->rewritten));
	}
	if (c->rq->t.ex.uc != NULL && evbuffer_get_length(upconn(c)->in) != 0)
		c->rq->ans.up_close = 1;
	client_request_end(c);
}

/* A Content-Length body goes into one block: what came with the head is copied, the rest
 * is read by the socket layer straight into place. */
static void
proxy_collect_into_block(struct client *c)
{
	int sinking = c->rq->ans.sinking;

	body_block_fill(c->rq->ans.block, c->rq->ans.block_len, &c->rq->ans.left, &sinking, upconn(c));
	c->rq->ans.sinking = sinking != 0;
}

/* Collect the response body for envelope ops, de-chunked, up to limits.max_body. */
static void
proxy_collect_response_body(struct client *c)
{
	struct http_answer_body b = proxy_answer_body(c->rq);
	struct evbuffer *in = upconn(c)->in;
	int r, done = 0;

	if (c->rq->ans.block != NULL) {
		/* A Content-Length body read into place. */
		proxy_collect_into_block(c);
		done = c->rq->ans.left == 0;
	}
	while (c->rq->ans.block == NULL && !done &&
	    (r = http_answer_take(&b, in, 0, c->rq->body)) != HTTP_CHUNKED_NONE) {
		if (r == HTTP_CHUNKED_ERROR) {
			proxy_invalid_response(c);
			return;
		}
		done = r == HTTP_CHUNKED_DONE;
		if (!done && evbuffer_get_length(c->rq->body) > client_cfg(c)->limits.max_body)
			break;
	}
	if (!done && evbuffer_get_length(c->rq->body) > client_cfg(c)->limits.max_body) {
		proxy_body_overflow(c);
		return;
	}
	if (done)
		proxy_respond_rewritten(c);
}

/* A proxied request ends, however it ends: its tunnel, its events and its rewriting go. */
void
proxy_end(struct client *c)
{
	/* Most requests have none of them. */
	if (c->rq->tunnel != NULL)
		tunnel_free(c);
	if (c->rq->ans.events != NULL)
		proxy_events_put(c);
	if (c->rq->ans.rewriting != NULL)
		proxy_rewriting_put(c);
}

/* --- the upstream side of a try --------------------------------------------------------- */

static void
proxy_invalid_response(struct client *c)
{
	tries_invalid(&c->rq->t);
	if (c->rq->ans.head_seen) {
		/* Part of it went on already (to the client, or into ops): no other try. */
		exchange_verdict(&c->rq->t.ex, FAIL_INVALID);
		client_error(c, c->rq->t.error, c->rq->t.message, c->rq->ans.started);
		return;
	}
	tries_next(&c->rq->t, FAIL_INVALID, UPSTREAM_RETRY_INVALID);
}

/* The upstream connection ended, failed or timed out while active. */
static void
proxy_upstream_failed(struct client *c, int what)
{
	const char *addr = tries_server(&c->rq->t)->addr.text;
	const char *name = c->rq->upool->cfg->name;

	if (c->rq->ans.collecting && c->rq->ans.mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		c->rq->ans.up_close = 1;
		proxy_collect_response_body(c);
		if (c->state == CLIENT_BUSY && c->rq->ans.collecting)
			proxy_respond_rewritten(c);
		return;
	}
	if (c->rq->ans.events != NULL && c->rq->ans.mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		proxy_events_forward(c, 1);
		return;
	}
	if (c->rq->ans.rewriting != NULL && c->rq->ans.mode == BODY_UNTIL_CLOSE &&
	    (what & CONN_EOF)) {
		proxy_rewriting_forward(c, 1);
		return;
	}
	if (c->rq->ans.started && c->rq->ans.mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		proxy_forward_response_body(c);
		if (c->state == CLIENT_BUSY && c->rq->t.ex.uc != NULL) {
			c->rq->ans.up_close = 1;
			client_request_end(c);
		}
		return;
	}
	if (c->rq->ans.head_seen) {
		/* Part of the answer is gone already (to the client, or into ops): no retry. */
		log_warnx("upstream %s server %s failed in the middle of a response (request %s)",
		    name, addr, c->rq->request_id);
		exchange_verdict(&c->rq->t.ex, what & CONN_TIMEOUT ? FAIL_TIMEOUT : FAIL_RESET);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, NULL, c->rq->ans.started);
		return;
	}
	tries_connection_failed(&c->rq->t, what, 0);
}

static void
upstream_on_input(struct client *c)
{
	struct upconn *uc = c->rq->t.ex.uc;

	if (c->rq->ans.head_seen || proxy_read_response_head(c) == 0) {
		if (c->state != CLIENT_BUSY || c->rq->t.ex.uc != uc)
			return;
		if (c->rq->ans.collecting)
			proxy_collect_response_body(c);
		else if (c->rq->ans.started || c->rq->ans.rewriting != NULL)
			proxy_forward_response_body(c);
	}
	/* Still waiting for the rest of this answer: a reset may have come with the data.  A
	 * tunnel waits for nothing: a read now would only leave room reserved in its input. */
	if (c->state == CLIENT_BUSY && c->rq->t.ex.uc == uc && uc != NULL && c->rq->tunnel == NULL)
		conn_read_again(upconn(c));
}

static void
upstream_on_drained(struct client *c)
{
	if (c->rq->up.paused) {
		c->rq->up.paused = 0;
		c->down->read_body(c, BODY_READING);
		if (evbuffer_get_length(client_input(c)) != 0)
			proxy_forward_request_body(c);
	}
}

void
proxy_exchange_cb(struct exchange *ex, int what, void *arg)
{
	struct client *c = arg;
	struct upconn *uc;

	(void)ex;
	if (c->rq->tunnel != NULL) {
		tunnel_event(c->rq->tunnel, TUNNEL_UPSTREAM, what);
		proxy_flush(c);
		return;
	}
	tries_note_server(&c->rq->t);
	if (what & EXCHANGE_FAILED) {
		tries_connect_failed(&c->rq->t);
		proxy_flush(c);
		return;
	}
	if (what & EXCHANGE_READY)
		proxy_send_request(c);
	/* Each step may end the try and hand the connection back, start another, or close the
	 * client: go on only while it is the same connection. */
	uc = c->rq->t.ex.uc;
	if ((what & CONN_READ) && c->state == CLIENT_BUSY && uc != NULL)
		upstream_on_input(c);
	/* The answer was 101: a close that came with it is the tunnel's. */
	if (c->state == CLIENT_BUSY && c->rq->tunnel != NULL) {
		if (what & ~CONN_READ)
			tunnel_event(c->rq->tunnel, TUNNEL_UPSTREAM, what & ~CONN_READ);
		proxy_flush(c);
		return;
	}
	if ((what & CONN_DRAINED) && c->state == CLIENT_BUSY && uc != NULL && c->rq->t.ex.uc == uc)
		upstream_on_drained(c);
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && c->state == CLIENT_BUSY &&
	    uc != NULL && c->rq->t.ex.uc == uc)
		proxy_upstream_failed(c, what);
	proxy_flush(c);
}
