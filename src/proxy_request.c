/* A proxied request, the way up: the head sent upstream, and the body taken
 * whole (request ops, another try), kept, or streamed as it comes: its payload, as the
 * session hands it over. */
#include "config.h"
#include "request.h"

static int proxy_head_framing(struct client *c, int whole);
static int proxy_collect_runs(struct client *c, struct evbuffer *in);
static void proxy_upstream_timeouts(struct client *c);

/* The target to send upstream (the route's strip_prefix applied) in the worker's buffer: its
 * length, or -1 without memory. */
int
proxy_rewrite_target(struct client *c, const struct http_request *req)
{
	struct worker *w = c->w;

	if (w->target_cap < req->target.len + 2) {
		char *grown = realloc(w->target_buf, req->target.len + 2);
		if (grown == NULL)
			return -1;
		w->target_buf = grown;
		w->target_cap = req->target.len + 2;
	}
	return route_rewrite_target(c->rq->route, req->path.p, req->path.len, req->query.p,
	    req->query.len, w->target_buf, w->target_cap);
}

/* Write the head to send upstream for req into up_head, once for every try. */
int
proxy_build_upstream_head(struct client *c, struct http_request *req)
{
	struct worker *w = c->w;
	struct headers_forward fw;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	char framing[64], *p;
	int n;

	/* req's headers may point into the buffer after we return: the worker owns it, as req. */
	if (proxy_has_response_ops(c->rq->route))
		body_limit_accept_encoding(req, w->req_accept_encoding,
		    sizeof(w->req_accept_encoding));
	if (c->rq->up_head == NULL && (c->rq->up_head = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->rq->up_head, evbuffer_get_length(c->rq->up_head));
	if ((n = proxy_rewrite_target(c, req)) < 0)
		return -1;
	fw.client_addr = c->addr;
	fw.tls = c->down->transport(c)->ssl != NULL;
	fw.request_id.p = c->rq->request_id;
	fw.request_id.len = c->rq->request_id_len;
	fw.host_override = c->rq->upool->cfg->host_header;
	fw.target.p = w->target_buf;
	fw.target.len = (size_t)n;
	fw.method.p = c->rq->head_as_get ? "GET" : NULL;
	fw.method.len = c->rq->head_as_get ? 3 : 0;
	fw.ops = c->rq->route->request_headers;
	fw.vars = NULL;
	if (fw.ops != NULL) {
		proxy_vars(c, fw.ops->vars, &vars, &tls_text);
		body_vars_headers(&vars, req);
		fw.vars = &vars;
	}
	if (headers_request_out(c->rq->up_head, req, &fw) < 0)
		return -1;
	if (c->rq->upgrade && tunnel_upstream_headers(c->rq->up_head, req) < 0)
		return -1;
	if (c->rq->up.keep_chunked)
		return 0;       /* proxy_head_framing, once the body decides */
	p = framing;
	if (c->rq->up.out_len >= 0)
		p = put_content_length(p, (uint64_t)c->rq->up.out_len);
	else if (req->framing.chunked)
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	else if (req->framing.content_length >= 0)
		p = put_content_length(p, (uint64_t)req->framing.content_length);
	p = put_lit(p, "\r\n");
	n = (int)(p - framing);
	return evbuffer_add(c->rq->up_head, framing, (size_t)n);
}

/* End the head of a kept chunked body: a Content-Length when the body is all here (as nginx
 * sends a buffered body), else chunked. */
static int
proxy_head_framing(struct client *c, int whole)
{
	char framing[64], *p = framing;

	if (whole)
		p = put_content_length(p, evbuffer_get_length(c->rq->req_body));
	else
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	p = put_lit(p, "\r\n");
	return evbuffer_add(c->rq->up_head, framing, (size_t)(p - framing));
}

/* Remove every header named lower_name (the body it described was changed). */
void
proxy_remove_header(struct http_header *h, size_t *n, const char *lower_name)
{
	size_t i = 0;

	while (i < *n) {
		if (http_header_is(&h[i], lower_name)) {
			memmove(&h[i], &h[i + 1], (*n - i - 1) * sizeof(*h));
			(*n)--;
		} else {
			i++;
		}
	}
}

/* Request ops: take the body in first (its head is kept in req_copy), then connect. */
void
proxy_start_request_collect(struct client *c)
{
	/* One block, sized up front for a Content-Length body and grown for a chunked one:
	 * the body is held once, not once in buffers and again pulled up for the parser. */
	body_block_release(c->rq->up.block);
	c->rq->up.block_len = 0;
	if ((c->rq->up.block = body_block_new(c->w->bodies,
	    c->rq->up.mode == BODY_LENGTH ? (size_t)c->rq->up.left : 0)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	c->rq->up.collecting = 1;
	c->down->continue_(c);
	c->down->read_body(c, BODY_READING);
	proxy_collect_request_body(c);
}

/* The head and body collected for request ops are ready: they go as soon as the try that
 * started with the collection has its connection. */
static void
proxy_request_ready(struct client *c)
{
	if (c->rq->t.ex.stage == EXCHANGE_IDLE)
		tries_start(&c->rq->t, 0);
	else if (c->rq->t.ex.stage == EXCHANGE_ACTIVE && c->rq->t.ex.uc != NULL)
		proxy_send_request(c);
}

/* The request body to send is req_body: keep it for another try when it is small enough. */
void
proxy_send_collected(struct client *c)
{
	c->rq->t.replayable = evbuffer_get_length(c->rq->req_body) <= c->rq->upool->cfg->retry_body;
	proxy_request_ready(c);
}

/* The request's upstream balances by a field of the body: read whole by request ops, the
 * body is in before a server is chosen. */
int
proxy_hashes_by_field(const struct client *c)
{
	const char *key = c->rq->upool->cfg->hash_key;

	return key != NULL && strncmp(key, "$json.", 6) == 0;
}

/*
 * The body the request ops take is in: a server balanced by one of its fields is chosen now,
 * before the ops ($upstream) and the head are written.  0, or -1 when the try ended the
 * request (a failure at once; the client's next request may then hold the same object,
 * with pick_after_body clear).
 */
static int
proxy_pick_after_body(struct client *c, const struct http_request *req)
{
	struct request *rq = c->rq;

	if (!rq->up.pick_after_body)
		return 0;
	client_hash_key(c, req);
	tries_start(&c->rq->t, 0);
	if (c->rq != rq || !rq->up.pick_after_body || c->state != CLIENT_BUSY || rq->ans.started)
		return -1;
	rq->up.pick_after_body = 0;
	return 0;
}

/*
 * The collected request body as the ops read it, with a reference: the block, or its
 * inflated copy (*coding then identity) when the route reads $json values.  Those are taken
 * from it here, the whole body as the client sent it: the ops and their values read the
 * same text.  A body that cannot be inflated is left to the ops to refuse.
 */
static struct body_block *
proxy_request_text(struct client *c, enum body_coding *coding, size_t *len)
{
	const struct config *cfg = client_cfg(c);
	struct body_block *b = c->rq->up.block;
	const char *why;
	size_t n;

	*len = c->rq->up.block_len;
	if (*len == 0 || *coding == BODY_CODING_OTHER ||
	    !route_scan_reads_values(cfg, c->rq->route)) {
		body_block_ref(b);
		return b;
	}
	if (*coding == BODY_CODING_IDENTITY) {
		body_block_ref(b);
	} else if ((b = body_inflate(c->w->bodies, body_block_data(b), *len, *coding,
	    cfg->limits.max_body, &n, &why)) != NULL) {
		*coding = BODY_CODING_IDENTITY;
		*len = n;
	} else {
		body_block_ref(c->rq->up.block);
		return c->rq->up.block;
	}
	route_scan_read_body(&c->rq->scan, cfg, c->rq->route, body_block_data(b), *len);
	return b;
}

/* Collect the request body's payload; when complete, rewrite it and send it upstream. */
void
proxy_collect_request_body(struct client *c)
{
	struct worker *w = c->w;
	const struct config *cfg = client_cfg(c);
	struct evbuffer *in = client_input(c);
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	struct http_request *req = &w->req;
	struct body_block *text;
	enum body_coding coding;
	size_t n, ql, len;
	char msg[256];
	int r;

	if (c->rq->up.mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->rq->up.left)
			n = (size_t)c->rq->up.left;
		evbuffer_remove(in, body_block_data(c->rq->up.block) + c->rq->up.block_len, n);
		c->rq->up.block_len += n;
		c->rq->up.left -= n;
		c->rq->up.done = c->rq->up.left == 0;
	} else {
		if (proxy_collect_runs(c, in) < 0)
			return;
		if (request_body_too_large(c, c->rq->up.block_len - c->rq->up.seen))
			return;
	}
	ql = evbuffer_get_length(c->rq->req_copy);
	if (c->rq->up.block_len > cfg->limits.max_body) {
		/* Only a chunked body gets here: its size was not known up front. */
		if (c->rq->route->jsonrpc != NULL) {
			client_error(c, GW_PAYLOAD_TOO_LARGE, NULL, 1);
			return;
		}
		/* The ops do not take it: its values are those of its window. */
		http_parse_request((const char *)evbuffer_pullup(c->rq->req_copy, (ev_ssize_t)ql), ql, req);
		if (route_scan_reads_values(cfg, c->rq->route))
			route_scan_read_prefix(&c->rq->scan, w->bodies, cfg, c->rq->route,
			    body_content_coding(req->headers, req->nheaders),
			    body_block_data(c->rq->up.block), c->rq->up.block_len);
		if (proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		/* pass: send what we have as one chunk and re-chunk the rest as it comes. */
		if (proxy_pick_after_body(c, req) < 0)
			return;
		c->rq->up.collecting = 0;
		if (proxy_build_upstream_head(c, req) < 0) {
			client_error(c, GW_BAD_REQUEST, NULL, 1);
			return;
		}
		char size_line[24];
		int sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", c->rq->up.block_len);
		if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
			client_error(c, GW_INTERNAL_ERROR, NULL, 1);
			return;
		}
		evbuffer_add(c->rq->req_body, size_line, (size_t)sl);
		body_block_add_to(c->rq->req_body, c->rq->up.block, c->rq->up.block_len);
		evbuffer_add(c->rq->req_body, "\r\n", 2);
		if (c->rq->up.done)
			evbuffer_add(c->rq->req_body, "0\r\n\r\n", 5);
		proxy_drop_request_block(c);
		/* The rest streams after it: this request cannot be sent twice. */
		c->rq->t.replayable = 0;
		proxy_request_ready(c);
		return;
	}
	if (!c->rq->up.done)
		return;

	c->down->read_body(c, BODY_WAITING);
	http_parse_request((const char *)evbuffer_pullup(c->rq->req_copy, (ev_ssize_t)ql), ql, req);
	if (c->rq->route->jsonrpc != NULL) {
		c->rq->up.collecting = 0;
		proxy_jsonrpc_start(c, req);
		return;
	}
	coding = body_content_coding(req->headers, req->nheaders);
	text = proxy_request_text(c, &coding, &len);
	if (proxy_pick_after_body(c, req) < 0) {
		body_block_release(text);
		return;
	}
	c->rq->up.collecting = 0;
	if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
		body_block_release(text);
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->rq->up.block_len == 0 && c->rq->route->validate != VALIDATE_FULL) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		body_block_release(text);
		metrics_envelope(w, c->rq->route, METRICS_REQUEST, METRICS_PASSED, METRICS_REASON_EMPTY);
		c->rq->up.out_len = 0;
	} else {
		proxy_vars(c, proxy_prog_vars(c->rq->route->request), &vars, &tls_text);
		body_vars_headers(&vars, req);
		r = body_apply_block(w->bodies, cfg, c->rq->route, c->rq->route->request, coding,
		    text, len, &vars, w->rewritten, &res);
		/* The output holds references of its own to what it splices. */
		res.inflated |= text != c->rq->up.block;
		body_block_release(text);
		if (r < 0) {
			snprintf(msg, sizeof(msg), "request body not rewritten: %s", res.error);
			log_warnx("route %s: %s (request %s)", c->rq->route->name, msg, c->rq->request_id);
			evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
			if (proxy_unrewritten(c, METRICS_REQUEST, proxy_unrewritten_reason(&res),
			    res.encoding ? GW_UNSUPPORTED_MEDIA_TYPE : GW_INVALID_JSON, msg, 0))
				return;
			/* pass: the client's bytes, untouched */
			body_block_add_to(c->rq->req_body, c->rq->up.block, c->rq->up.block_len);
		} else {
			metrics_envelope(w, c->rq->route, METRICS_REQUEST, METRICS_APPLIED,
			    METRICS_REASON_NONE);
			metrics_bytes(w, res.spliced, res.copied);
			/* The rewritten body may refer to the collected one: both stay until sent. */
			evbuffer_add_buffer(c->rq->req_body, w->rewritten);
			if (res.inflated)
				proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
		}
		c->rq->up.out_len = (int64_t)evbuffer_get_length(c->rq->req_body);
	}
	proxy_drop_request_block(c);
	if (proxy_build_upstream_head(c, req) < 0) {
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	proxy_send_collected(c);
}

/* Take the runs of a body without a length that came into the request block.  0, or -1
 * when the request was answered. */
static int
proxy_collect_runs(struct client *c, struct evbuffer *in)
{
	size_t n;
	int r;

	while (!c->rq->up.done && (r = c->down->body_next(c, &n)) != BODY_RUN_NONE) {
		if (r == BODY_RUN_BAD)
			return -1;
		if (r == BODY_RUN_DATA) {
			if (body_block_reserve(&c->rq->up.block, c->rq->up.block_len + n) < 0) {
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return -1;
			}
			evbuffer_remove(in, body_block_data(c->rq->up.block) + c->rq->up.block_len, n);
			c->rq->up.block_len += n;
		}
		c->rq->up.done = r == BODY_RUN_END;
	}
	return 0;
}

/* The collected request body went into req_body (by reference) or was rewritten. */
void
proxy_drop_request_block(struct client *c)
{
	body_block_release(c->rq->up.block);
	c->rq->up.block = NULL;
	c->rq->up.block_len = 0;
}

/* Response ops may read request headers ($header.NAME) after the head has left the input. */
int
proxy_keep_request_head(struct client *c, size_t len)
{
	if (c->rq->req_copy == NULL && (c->rq->req_copy = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->rq->req_copy, evbuffer_get_length(c->rq->req_copy));
	return evbuffer_add(c->rq->req_copy, evbuffer_pullup(client_input(c), (ev_ssize_t)len), len);
}

/* 1 when the request body is one for request ops (a JSON body; one in a coding they cannot
 * read follows on_error); else it goes untouched, counted with the reason.  Under on_error:
 * fail a body that is not JSON by its type is refused (-1, answered 415): most frameworks
 * read such a body as JSON all the same, and it must not reach them past the ops. */
int
proxy_wants_request_body(struct client *c, const struct http_request *req)
{
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	/* Content-Length: 0 is an empty body, which validate: full does not take as JSON. */
	if (c->rq->up.mode == BODY_NONE && (req->framing.content_length != 0 ||
	    c->rq->route->validate != VALIDATE_FULL))
		why = METRICS_REASON_EMPTY;
	else if (!body_is_json(c->rq->route, http_find_header(req->headers, req->nheaders,
	    "content-type")))
		why = METRICS_REASON_NOT_JSON;
	if (why == METRICS_REASON_NONE)
		return 1;
	if (why == METRICS_REASON_NOT_JSON && proxy_unrewritten(c, METRICS_REQUEST, why,
	    GW_UNSUPPORTED_MEDIA_TYPE, "request body is not JSON: its Content-Type is none of the "
	    "route's json_types", 1))
		return -1;
	if (why == METRICS_REASON_EMPTY)
		metrics_envelope(c->w, c->rq->route, METRICS_REQUEST, METRICS_PASSED, why);
	return 0;
}

/* How a request without request ops takes its body: kept whole in the input for another try
 * when it is within retry_body, else streamed once the connection is ready. */
void
proxy_plan_body(struct client *c)
{
	const struct config_upstream *up = c->rq->upool->cfg;

	if (c->rq->up.mode == BODY_NONE) {
		c->rq->t.replayable = 1;
		return;
	}
	if (c->rq->up.keep_chunked) {
		c->rq->up.buffer_body = 1;
		c->down->continue_(c);
		c->down->read_body(c, BODY_READING);
		proxy_keep_chunked(c);
		return;
	}
	if (c->rq->up.mode == BODY_LENGTH && c->rq->t.idempotent && c->rq->up.left <= up->retry_body) {
		c->rq->up.buffer_body = c->rq->t.replayable = 1;
		c->rq->up.replay_len = (size_t)c->rq->up.left;
		/* The input holds it whole (its usual limit again once the request ends). */
		if (c->rq->up.replay_len > FLOW_HIGH)
			c->down->input_room(c, c->rq->up.replay_len);
		if (evbuffer_get_length(client_input(c)) >= c->rq->up.replay_len) {
			c->rq->up.done = 1;
			return;
		}
		c->down->continue_(c);
	}
	/* The body is read once the connection is ready, or now when it is kept. */
	c->down->read_body(c, c->rq->up.buffer_body ? BODY_READING : BODY_WAITING);
}

/*
 * A body without a length of an idempotent request is kept for another try while it stays
 * within retry_body; all of it here, it goes with a Content-Length.  Larger, what came goes
 * as one chunk and the rest streams in chunks: the request cannot be sent twice.
 */
void
proxy_keep_chunked(struct client *c)
{
	size_t max = c->rq->upool->cfg->retry_body;
	struct evbuffer *in = client_input(c);
	int r = BODY_RUN_NONE, sl;
	char size_line[24];
	size_t n;

	while (r != BODY_RUN_END && evbuffer_get_length(c->rq->req_body) <= max) {
		if ((r = c->down->body_next(c, &n)) == BODY_RUN_NONE)
			break;
		if (r == BODY_RUN_BAD)
			return;
		if (r == BODY_RUN_DATA)
			evbuffer_remove_buffer(in, c->rq->req_body, n);
	}
	n = evbuffer_get_length(c->rq->req_body);
	if (request_body_too_large(c, n - c->rq->up.seen))
		return;
	if (r != BODY_RUN_END && n <= max)
		return;
	c->rq->up.buffer_body = c->rq->up.keep_chunked = 0;
	c->rq->up.done = r == BODY_RUN_END;
	c->rq->t.replayable = c->rq->up.done && n <= max;
	sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
	if ((!c->rq->up.done && (evbuffer_prepend(c->rq->req_body, size_line, (size_t)sl) < 0 ||
	    evbuffer_add(c->rq->req_body, "\r\n", 2) < 0)) || proxy_head_framing(c, c->rq->up.done) < 0) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	/* The rest waits until the connection is ready (proxy_send_request reads on). */
	c->down->read_body(c, BODY_PAUSED);
	if (c->rq->t.ex.stage == EXCHANGE_ACTIVE && c->rq->t.ex.uc != NULL)
		proxy_send_request(c);
}

/* The connection is ready: send the head, then the body (a copy when it may go again). */
void
proxy_send_request(struct client *c)
{
	struct evbuffer *out = upconn(c)->out;
	size_t n;

	if (c->rq->t.sent || c->rq->up.collecting || (c->rq->up.buffer_body && !c->rq->up.done))
		return;         /* the body is still coming: it goes once all of it is here */
	c->rq->t.sent = 1;
	n = evbuffer_get_length(c->rq->up_head);
	evbuffer_add(out, evbuffer_pullup(c->rq->up_head, -1), n);
	if (c->rq->req_body != NULL && evbuffer_get_length(c->rq->req_body) != 0) {
		if (c->rq->t.replayable) {
			/* Kept for another try: shared with the connection's output, not copied. */
			if (evbuffer_add_buffer_reference(out, c->rq->req_body) < 0) {
				n = evbuffer_get_length(c->rq->req_body);
				evbuffer_add(out, evbuffer_pullup(c->rq->req_body, -1), n);
			}
		} else {
			evbuffer_add_buffer(out, c->rq->req_body);
		}
	} else if (c->rq->up.replay_len != 0) {
		evbuffer_add(out, evbuffer_pullup(client_input(c), (ev_ssize_t)c->rq->up.replay_len),
		    c->rq->up.replay_len);
	}
	if (!c->rq->up.done) {
		/* A streamed body: from now on it goes as it comes. */
		c->down->read_body(c, BODY_READING);
		proxy_forward_request_body(c);
		if (c->state != CLIENT_BUSY || c->rq->t.ex.uc == NULL)
			return;
	} else {
		c->down->read_body(c, BODY_WAITING);
		proxy_upstream_timeouts(c);
	}
	if (upconn(c)->ssl == NULL && proxy_has_response_ops(c->rq->route))
		upconn(c)->read_max = UPSTREAM_HEAD_READ;
	conn_read_start(upconn(c));
}

/* upstream_response bounds the wait for the answer once the request is sent (as nginx's
 * proxy_read_timeout), and each stalled write of the request meanwhile. */
static void
proxy_upstream_timeouts(struct client *c)
{
	uint64_t ms = c->rq->route->timeouts.upstream_response;

	conn_set_timeouts(upconn(c), c->rq->up.done ? ms : 0, ms);
}

/* Pass request body bytes from the client to the upstream as they arrive. */
void
proxy_forward_request_body(struct client *c)
{
	struct evbuffer *in = client_input(c);
	struct evbuffer *out = upconn(c)->out;
	size_t n;
	int r;

	if (c->rq->up.mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->rq->up.left)
			n = (size_t)c->rq->up.left;
		evbuffer_remove_buffer(in, out, n);
		c->rq->up.left -= n;
		c->rq->up.done = c->rq->up.left == 0;
	} else if (c->rq->up.mode == BODY_CHUNKED) {
		/* The payload, run by run, goes in chunks of our own. */
		while (!c->rq->up.done && (r = c->down->body_next(c, &n)) != BODY_RUN_NONE) {
			if (r == BODY_RUN_BAD)
				return;
			if (r == BODY_RUN_DATA) {
				if (request_body_too_large(c, n))
					return;
				evbuffer_add_printf(out, "%zx\r\n", n);
				evbuffer_remove_buffer(in, out, n);
				evbuffer_add(out, "\r\n", 2);
			} else {
				evbuffer_add(out, "0\r\n\r\n", 5);
			}
			c->rq->up.done = r == BODY_RUN_END;
		}
	}
	if (c->rq->up.done) {
		c->down->read_body(c, BODY_WAITING);
		proxy_upstream_timeouts(c);
		return;
	}
	if (evbuffer_get_length(out) > FLOW_HIGH && !c->rq->up.paused) {
		c->rq->up.paused = 1;
		c->down->read_body(c, BODY_PAUSED);
		conn_notify_drained(upconn(c), 1, FLOW_LOW);
	}
}

/* Response ops, events ops or response header ops read request headers ($header.NAME): the
 * request head is kept for them. */
static int
proxy_response_needs_headers(const struct config_route *route)
{
	/* Asked for every request: most routes have few of these op lists. */
	return (route->response != NULL && body_needs_headers(route->response)) ||
	    (route->error_response != NULL && body_needs_headers(route->error_response)) ||
	    (route->events != NULL && body_needs_headers(route->events)) ||
	    (route->response_headers != NULL &&
	    (route->response_headers->vars & (1u << REWRITE_VAR_HEADER)));
}

/* A proxied request starts, its head the head_len bytes at the front of the input: the head
 * for upstream is written, the body planned (taken for request ops, kept for another try, or
 * streamed), and the first try goes. */
static void
proxy_start(struct client *c, struct http_request *req, size_t head_len)
{
	struct evbuffer *in = client_input(c);
	const struct config *cfg = client_cfg(c);
	ssize_t r = (ssize_t)head_len;
	int wants = 0;

	c->rq->upool = &c->rq->wr->pools[c->rq->route->upstream - cfg->upstreams];
	tries_begin(&c->rq->t, c->rq->upool, c->rq->request_id);
	/* Only GET's answer tells the status and length the ops give it: ask for that. */
	c->rq->head_as_get = c->rq->head_request && proxy_has_response_ops(c->rq->route);
	client_hash_key(c, req);
	c->rq->accept_gzip = c->rq->route->compress == COMPRESS_GZIP && proxy_has_response_ops(c->rq->route) &&
	    body_accepts_gzip(req->headers, req->nheaders);
	if ((c->rq->route->request != NULL || proxy_response_needs_headers(c->rq->route)) &&
	    proxy_keep_request_head(c, (size_t)r) < 0) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->rq->route->request != NULL && (wants = proxy_wants_request_body(c, req)) < 0)
		return;
	if (c->rq->route->request != NULL && wants) {
		/* Too large for the ops: refused, or streamed untouched below. */
		if (c->rq->up.mode == BODY_LENGTH && c->rq->up.left > cfg->limits.max_body &&
		    proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		if (c->rq->up.mode != BODY_LENGTH || c->rq->up.left <= cfg->limits.max_body) {
			/* The try starts now, connecting while the body comes: $upstream in the
			 * ops names its server. */
			evbuffer_drain(in, (size_t)r);
			c->rq->up.collecting = 1;
			c->rq->up.pick_after_body = proxy_hashes_by_field(c);
			if (!c->rq->up.pick_after_body)
				tries_start(&c->rq->t, 0);
			if (c->state == CLIENT_BUSY && !c->rq->ans.started)
				proxy_start_request_collect(c);
			return;
		}
	}
	/* An upgrade on a route with body ops goes as a plain request, Upgrade dropped. */
	c->rq->upgrade = req->framing.upgrade && tunnel_wanted(c, req);
	c->rq->up.keep_chunked = c->rq->up.mode == BODY_CHUNKED && c->rq->t.idempotent &&
	    c->rq->upool->cfg->retry_body != 0 &&
	    (c->rq->req_body != NULL || (c->rq->req_body = evbuffer_new()) != NULL);
	if (proxy_build_upstream_head(c, req) < 0) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	evbuffer_drain(in, (size_t)r);
	proxy_plan_body(c);
	if (c->state == CLIENT_BUSY)
		tries_start(&c->rq->t, 0);
}

static int
proxy_takes(const struct config_route *route)
{
	return route->upstream != NULL;
}

void
proxy_body_in(struct client *c)
{
	if (c->rq->up.collecting) {
		proxy_collect_request_body(c);
	} else if (c->rq->up.keep_chunked) {
		proxy_keep_chunked(c);
	} else if (c->rq->up.buffer_body && !c->rq->up.done) {
		/* The body is kept whole: once it is all here, it goes with the head. */
		if (evbuffer_get_length(client_input(c)) < c->rq->up.replay_len)
			return;
		c->rq->up.done = 1;
		c->down->read_body(c, BODY_PAUSED);
		if (c->rq->t.ex.stage == EXCHANGE_ACTIVE && c->rq->t.ex.uc != NULL)
			proxy_send_request(c);
	} else if (!c->rq->up.done && c->rq->t.ex.uc != NULL && c->rq->t.sent) {
		proxy_forward_request_body(c);
	} else if (c->rq->up.done) {
		c->down->read_body(c, BODY_PAUSED);     /* pipelined: wait our turn */
	}
}

/* A route with an upstream: requests go to it, answers come back through the ops (an event
 * stream through the events ops); an upgrade answered 101 becomes a tunnel (tunnel.c), which
 * its end lets go. */
const struct route_kind kind_proxy = {
	proxy_takes, proxy_start, proxy_body_in, proxy_end, tunnel_log, proxy_events_worker_end
};
