/* Answers rewritten while they stream: ops per event of an SSE or NDJSON answer, and a JSON
 * body over limits.max_body through ops that can stream. */
#include "config.h"
#include "request.h"

#include "stream_envelope.h"
#include "stream_event.h"

/* --- the payload of an answer's body, as it comes ------------------------------------------ */

enum payload_result { PAYLOAD_MORE, PAYLOAD_END, PAYLOAD_BAD_FRAMING, PAYLOAD_TAKE_FAILED };

/* Takes n bytes at the front of in, draining them all: 0, or -1 to stop. */
typedef int (*payload_take_fn)(struct client *c, void *arg, struct evbuffer *in, size_t n);

/*
 * The payload of the answer's body at the front of the upstream's input goes to take, its
 * framing (a length, chunks, the close) read here; eof: the upstream closed.  Bytes past the
 * body stay in the input.
 */
static enum payload_result
proxy_payload(struct client *c, int eof, payload_take_fn take, void *arg)
{
	struct http_answer_body b = proxy_answer_body(c->rq);
	struct evbuffer *in = upconn(c)->in;
	struct http_chunk_piece p;
	int r;

	if (c->rq->ans.mode == BODY_NONE)
		return PAYLOAD_END;
	while ((r = http_answer_next(&b, in, 0, (size_t)-1, eof, &p)) != HTTP_CHUNKED_NONE) {
		if (r == HTTP_CHUNKED_ERROR)
			return PAYLOAD_BAD_FRAMING;
		if (r == HTTP_CHUNKED_DATA) {
			evbuffer_drain(in, p.data_off);
			if (take(c, arg, in, p.data_len) != 0)
				return PAYLOAD_TAKE_FAILED;
			evbuffer_drain(in, p.consumed - p.data_off - p.data_len);
		} else {
			evbuffer_drain(in, p.consumed);
		}
		if (r == HTTP_CHUNKED_DONE)
			return PAYLOAD_END;
	}
	return PAYLOAD_MORE;
}

/* --- a worker's idle objects, kept for its next answers -------------------------------- */

/* The limits an object was made for (its kind's own meaning; unused ones 0). */
struct proxy_made_for {
	size_t limit[3];
};

/* Embedded first in a pooled object. */
struct proxy_pooled {
	struct proxy_pooled *next;      /* in the worker's idle list */
	struct proxy_made_for made_for;
};

/* One kind of object: up to PROXY_POOL_KEPT idle ones per worker; beyond, they are freed.
 * make: a new one for those limits, NULL without memory. */
struct proxy_pool {
	struct proxy_pooled *idle;
	unsigned nidle;
	struct proxy_pooled *(*make)(const struct proxy_made_for *);
	void (*free)(struct proxy_pooled *);
};

#define PROXY_POOL_KEPT 16

/* An idle one made for these limits, or a new one; NULL without memory. */
static struct proxy_pooled *
proxy_pool_get(struct proxy_pool *pool, const struct proxy_made_for *want)
{
	struct proxy_pooled *p;

	while ((p = pool->idle) != NULL) {
		pool->idle = p->next;
		pool->nidle--;
		if (memcmp(&p->made_for, want, sizeof(*want)) == 0)
			return p;
		pool->free(p);          /* made for the limits of a configuration gone */
	}
	if ((p = pool->make(want)) != NULL)
		p->made_for = *want;
	return p;
}

static void
proxy_pool_put(struct proxy_pool *pool, struct proxy_pooled *p)
{
	if (pool->nidle >= PROXY_POOL_KEPT) {
		pool->free(p);
		return;
	}
	p->next = pool->idle;
	pool->idle = p;
	pool->nidle++;
}

/* The worker ends: its idle ones go. */
static void
proxy_pool_empty(struct proxy_pool *pool)
{
	struct proxy_pooled *p;

	while ((p = pool->idle) != NULL) {
		pool->idle = p->next;
		pool->free(p);
	}
	pool->nidle = 0;
}

/* --- events: ops per event of an SSE or NDJSON answer ------------------------------------ */

/* A streamed answer's events: the parser and its ops, the variables they read (valid for the
 * whole answer), and what the ops wrote since it last went to the client. */
struct proxy_events {
	struct proxy_pooled pooled;     /* made for limits.max_event, max_depth, max_members */
	struct stream_events *se;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct stream_events_counts counted;    /* of the counts, those in the metrics */
	struct evbuffer *out;
	int headers;                    /* the ops read $header.NAME: parsed again for each feed */
};

static int proxy_events_batch_cb(void *arg, char *p, size_t len);

static void
proxy_events_free(struct proxy_pooled *p)
{
	struct proxy_events *pe = (struct proxy_events *)p;

	stream_events_free(pe->se);
	if (pe->out != NULL)
		evbuffer_free(pe->out);
	free(pe);
}

static struct proxy_pooled *
proxy_events_make(const struct proxy_made_for *lim)
{
	struct proxy_events *pe;

	if ((pe = calloc(1, sizeof(*pe))) == NULL)
		return NULL;
	if ((pe->se = stream_events_new(lim->limit[0], (unsigned)lim->limit[1],
	    lim->limit[2])) == NULL || (pe->out = evbuffer_new()) == NULL) {
		proxy_events_free(&pe->pooled);
		return NULL;
	}
	stream_events_take_batches(pe->se, proxy_events_batch_cb);
	return &pe->pooled;
}

static _Thread_local struct proxy_pool events_pool = {
	.make = proxy_events_make, .free = proxy_events_free
};

/* An idle one made for cfg's limits, or a new one; NULL without memory. */
static struct proxy_events *
proxy_events_get(const struct config *cfg)
{
	struct proxy_made_for want = { { cfg->limits.max_event, cfg->limits.max_depth,
	    cfg->limits.max_members } };

	return (struct proxy_events *)proxy_pool_get(&events_pool, &want);
}

/* The answer's events are over (or the request ended first): back to the idle list. */
void
proxy_events_put(struct client *c)
{
	struct proxy_events *pe = c->rq->ans.events;

	if (pe == NULL)
		return;
	c->rq->ans.events = NULL;
	evbuffer_drain(pe->out, evbuffer_get_length(pe->out));
	proxy_pool_put(&events_pool, &pe->pooled);
}

/* The route has events: 1 when this answer streams through them (a body of an event format,
 * not encoded), -1 when it is of an event format but passes untouched (a Content-Encoding:
 * counted), 0 when it is no event stream. */
int
proxy_events_wanted(struct client *c, const struct http_response *resp)
{
	struct http_str ct;
	enum stream_events_format format;

	if (c->rq->head_request || c->rq->ans.mode == BODY_NONE || resp->status == 204 ||
	    resp->status == 304)
		return 0;
	ct = http_find_header(resp->headers, resp->nheaders, "content-type");
	if (ct.p == NULL || !stream_events_format_of(ct.p, ct.len, &format))
		return 0;
	if (body_content_coding(resp->headers, resp->nheaders) != BODY_CODING_IDENTITY) {
		metrics_envelope(c->w, c->rq->route, METRICS_RESPONSE, METRICS_PASSED,
		    METRICS_REASON_ENCODING);
		return -1;
	}
	return 1;
}

/* Each piece the ops write: gathered, for the client once the feed is over. */
static int
proxy_events_write_cb(void *arg, const char *p, size_t len)
{
	struct proxy_events *pe = arg;

	return evbuffer_add(pe->out, p, len) == 0 ? 0 : -1;
}

static void
proxy_events_batch_free_cb(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)(uintptr_t)data);
}

/* A batch of what the ops wrote: referenced, not copied, and freed once sent. */
static int
proxy_events_batch_cb(void *arg, char *p, size_t len)
{
	struct proxy_events *pe = arg;

	if (evbuffer_add_reference(pe->out, p, len, proxy_events_batch_free_cb, NULL) != 0) {
		free(p);
		return -1;
	}
	return 0;
}

/* What the ops wrote goes to the client, what they counted to the metrics. */
static void
proxy_events_flush(struct client *c, struct proxy_events *pe)
{
	const struct stream_events_counts *n = stream_events_counts(pe->se);
	uint64_t over = n->over - pe->counted.over, failed = n->failed - pe->counted.failed;

	if (evbuffer_get_length(pe->out) != 0)
		c->down->body(c, pe->out, evbuffer_get_length(pe->out));
	metrics_events(c->w, c->rq->route, METRICS_EVENTS_REWRITTEN,
	    n->rewritten - pe->counted.rewritten);
	metrics_events(c->w, c->rq->route, METRICS_EVENTS_OVER_LIMIT, over);
	metrics_events(c->w, c->rq->route, METRICS_EVENTS_FAILED, failed);
	metrics_events(c->w, c->rq->route, METRICS_EVENTS_PASSED,
	    n->passed - pe->counted.passed - over - failed);
	pe->counted = *n;
}

/* Feed the n bytes at the front of in to the events, taken.  0, or -1 without memory. */
static int
proxy_events_take(struct client *c, void *arg, struct evbuffer *in, size_t n)
{
	struct proxy_events *pe = arg;
	struct evbuffer_iovec v;
	size_t k;

	if (pe->headers)
		proxy_kept_request_headers(c, &pe->vars);
	while (n != 0 && evbuffer_peek(in, (ev_ssize_t)n, NULL, &v, 1) >= 1 && v.iov_len != 0) {
		k = v.iov_len < n ? v.iov_len : n;
		if (stream_events_feed(pe->se, v.iov_base, k, proxy_events_write_cb, pe) != 0)
			return -1;
		evbuffer_drain(in, k);
		n -= k;
	}
	return 0;
}

/* The answer is of an event format: its head goes with the length left to the session (the
 * ops change it), and its body through the route's events ops.  0, or -1 when answered. */
int
proxy_events_start(struct client *c, struct http_response *resp, size_t head_len)
{
	const struct rewrite_program *prog = c->rq->route->events;
	struct http_str ct;
	enum stream_events_format format = STREAM_EVENTS_SSE;
	struct proxy_events *pe;

	if ((pe = proxy_events_get(client_cfg(c))) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
		return -1;
	}
	c->rq->ans.events = pe;
	ct = http_find_header(resp->headers, resp->nheaders, "content-type");
	stream_events_format_of(ct.p, ct.len, &format);
	proxy_vars(c, proxy_prog_vars(prog), &pe->vars, &pe->tls_text);
	pe->vars.status = resp->status;
	pe->headers = body_needs_headers(prog);
	memset(&pe->counted, 0, sizeof(pe->counted));
	stream_events_start(pe->se, format, prog, c->rq->route->validate, &pe->vars);
	proxy_remove_header(resp->headers, &resp->nheaders, "content-length");
	/* The bytes are jsongate's: no strong ETag. */
	proxy_write_response_head(c, resp, ANSWER_STREAM, 0, "");
	evbuffer_drain(upconn(c)->in, head_len);
	c->rq->ans.head_seen = 1;
	c->rq->ans.dechunk = 1;
	return 0;
}

/* More of an event stream's body came (eof: the upstream closed an answer that ends so):
 * every complete event goes on, the rest waits in the parser up to limits.max_event. */
void
proxy_events_forward(struct client *c, int eof)
{
	struct proxy_events *pe = c->rq->ans.events;
	int r, fail;

	r = proxy_payload(c, eof, proxy_events_take, pe);
	if (r == PAYLOAD_BAD_FRAMING) {
		proxy_events_flush(c, pe);
		tries_bad_framing(&c->rq->t);
		client_error(c, GW_UPSTREAM_INVALID, NULL, 1);
		return;
	}
	fail = r == PAYLOAD_TAKE_FAILED;
	if (!fail && r == PAYLOAD_END)
		fail = stream_events_finish(pe->se, proxy_events_write_cb, pe) != 0;
	proxy_events_flush(c, pe);
	if (fail) {
		log_warnx("route %s: out of memory in an event stream (request %s)",
		    c->rq->route->name, c->rq->request_id);
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	proxy_answer_went_on(c, r == PAYLOAD_END, eof);
}

/* --- a body over limits.max_body rewritten while it is forwarded -------------------------- */

/* A body rewritten as it streams: the engine, and what it wrote since it last went out.
 * The engine holds back at most limits.max_body or 64 KB, the larger (a key, whitespace, an
 * object whose change is undecided), and the body read before the first output is kept up
 * to twice that. */
#define REWRITING_MIN_HOLD (64 * 1024)

struct proxy_rewriting {
	struct proxy_pooled pooled;     /* made for max_hold */
	struct stream_envelope *se;
	struct evbuffer *out;
	size_t max_hold;                /* what se was made to hold back at most */
	int err;                        /* the engine's error, 0 while none */
	int complete;                   /* the whole body went out rewritten */
	/* While a piece of the upstream's input is fed: the piece (cur_len bytes at the front
	 * of in, of which cur_done are taken), and the body kept before the first output. */
	struct evbuffer *in, *kept;
	const char *cur;
	size_t cur_len, cur_done;
	/* The answer's head, parsed once from resp_head (which stays as it is while the body
	 * streams): its status for the ops, all of it for the first output. */
	struct http_response head;
};

static void
proxy_rewriting_free(struct proxy_pooled *p)
{
	struct proxy_rewriting *rw = (struct proxy_rewriting *)p;

	stream_envelope_free(rw->se);
	if (rw->out != NULL)
		evbuffer_free(rw->out);
	free(rw);
}

static struct proxy_pooled *
proxy_rewriting_make(const struct proxy_made_for *lim)
{
	struct proxy_rewriting *rw;

	if ((rw = calloc(1, sizeof(*rw))) == NULL)
		return NULL;
	rw->max_hold = lim->limit[0];
	if ((rw->se = stream_envelope_new(rw->max_hold)) == NULL ||
	    (rw->out = evbuffer_new()) == NULL) {
		proxy_rewriting_free(&rw->pooled);
		return NULL;
	}
	return &rw->pooled;
}

static _Thread_local struct proxy_pool rewriting_pool = {
	.make = proxy_rewriting_make, .free = proxy_rewriting_free
};

/* An idle one made for max_hold, or a new one; NULL without memory. */
static struct proxy_rewriting *
proxy_rewriting_get(size_t max_hold)
{
	struct proxy_made_for want = { { max_hold, 0, 0 } };

	return (struct proxy_rewriting *)proxy_pool_get(&rewriting_pool, &want);
}

void
proxy_rewriting_put(struct client *c)
{
	struct proxy_rewriting *rw = c->rq->ans.rewriting;

	if (rw == NULL)
		return;
	c->rq->ans.rewriting = NULL;
	if (!rw->complete && stream_envelope_written(rw->se) != 0)
		metrics_streamed(c->w, c->rq->route, METRICS_STREAMED_ABORTED);
	evbuffer_drain(rw->out, evbuffer_get_length(rw->out));
	proxy_pool_put(&rewriting_pool, &rw->pooled);
}

int
proxy_rewriting_can(struct client *c, const struct http_response *resp)
{
	const char *why;

	/* A JSON-RPC answer is judged whole; a HEAD asked as GET reads no body. */
	return c->rq->rpc == NULL && !c->rq->head_request && !c->rq->head_as_get &&
	    body_content_coding(resp->headers, resp->nheaders) == BODY_CODING_IDENTITY &&
	    stream_envelope_can(c->rq->ans.prog, c->rq->route->validate, &why);
}

static int
proxy_rewriting_write_cb(void *arg, const char *p, size_t len)
{
	struct proxy_rewriting *rw = arg;
	size_t skip;

	if (rw->cur == NULL || p < rw->cur + rw->cur_done || p + len > rw->cur + rw->cur_len)
		return evbuffer_add(rw->out, p, len) == 0 ? 0 : -1;
	/* Bytes of the piece being fed: moved out of the input, not copied (a whole chain of
	 * the input's buffer moves as it is); what the ops left out before them is dropped. */
	if (stream_envelope_written(rw->se) == 0)
		evbuffer_drain(rw->kept, evbuffer_get_length(rw->kept));
	skip = (size_t)(p - rw->cur) - rw->cur_done;
	evbuffer_drain(rw->in, skip);
	if (evbuffer_remove_buffer(rw->in, rw->out, len) != (int)len)
		return -1;
	rw->cur_done += skip + len;
	return 0;
}

/* What the ops wrote goes to the client, after the answer's head the first time. */
static void
proxy_rewriting_send(struct client *c, struct proxy_rewriting *rw)
{
	struct http_response *resp = &rw->head;

	if (evbuffer_get_length(rw->out) == 0)
		return;
	if (!c->rq->ans.started) {
		proxy_remove_header(resp->headers, &resp->nheaders, "content-length");
		/* The bytes are jsongate's: no strong ETag. */
		proxy_write_response_head(c, resp, ANSWER_STREAM, 0, "");
	}
	c->down->body(c, rw->out, evbuffer_get_length(rw->out));
}

/* Feed p[0..n) to the engine; until the engine writes, the bytes are kept (in the request's
 * body) for on_error.  0, or the engine's error. */
static int
proxy_rewriting_feed(struct client *c, struct proxy_rewriting *rw, const char *p, size_t n)
{
	if (rw->err == 0)
		rw->err = stream_envelope_feed(rw->se, p, n);
	if (rw->err == 0 && stream_envelope_written(rw->se) == 0 &&
	    evbuffer_get_length(c->rq->body) > 2 * rw->max_hold)
		rw->err = STREAM_ENVELOPE_LOOKAHEAD;
	return rw->err;
}

/* Take n bytes at the front of in: fed, then kept or dropped.  Always takes all n (the body's
 * framing goes on from them); -1 once the engine failed. */
static int
proxy_rewriting_take(struct client *c, void *arg, struct evbuffer *in, size_t n)
{
	struct proxy_rewriting *rw = arg;
	struct evbuffer_iovec v;
	size_t k;

	while (n != 0 && rw->err == 0 &&
	    evbuffer_peek(in, (ev_ssize_t)n, NULL, &v, 1) >= 1 && v.iov_len != 0) {
		k = v.iov_len < n ? v.iov_len : n;
		rw->in = in;
		rw->kept = c->rq->body;
		rw->cur = v.iov_base;
		rw->cur_len = k;
		rw->cur_done = 0;
		proxy_rewriting_feed(c, rw, v.iov_base, k);
		rw->cur = NULL;
		/* What the output took of the piece is out of the input already. */
		n -= rw->cur_done;
		k -= rw->cur_done;
		if (stream_envelope_written(rw->se) == 0) {
			evbuffer_remove_buffer(in, c->rq->body, k);
		} else {
			evbuffer_drain(in, k);
			evbuffer_drain(c->rq->body, evbuffer_get_length(c->rq->body));
		}
		n -= k;
	}
	/* After an error: kept while on_error may still pass the body, else dropped. */
	if (stream_envelope_written(rw->se) == 0)
		evbuffer_remove_buffer(in, c->rq->body, n);
	else
		evbuffer_drain(in, n);
	proxy_rewriting_send(c, rw);
	return rw->err == 0 ? 0 : -1;
}

/* The engine failed: before any output the answer follows on_error with the body kept,
 * after it the answer is cut (counted aborted when the rewriting goes). */
static void
proxy_rewriting_failed(struct client *c, struct proxy_rewriting *rw, int ended)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "response body over limits.max_body not rewritten: %s",
	    stream_envelope_error(rw->se));
	log_warnx("route %s: %s (request %s)", c->rq->route->name, msg, c->rq->request_id);
	if (stream_envelope_written(rw->se) != 0) {
		c->rq->ans.up_close = 1;
		client_error(c, GW_UPSTREAM_INVALID, NULL, 1);
		return;
	}
	proxy_rewriting_put(c);
	if (proxy_unrewritten(c, METRICS_RESPONSE, rw->err == STREAM_ENVELOPE_INVALID ?
	    METRICS_REASON_INVALID_JSON : METRICS_REASON_OP_ERROR, GW_UPSTREAM_INVALID, msg, 0))
		return;
	proxy_pass_held(c, ended);
}

void
proxy_rewriting_start(struct client *c, const struct http_response *resp)
{
	const struct rewrite_program *prog = c->rq->ans.prog;
	const struct config *cfg = client_cfg(c);
	struct proxy_rewriting *rw;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct evbuffer_iovec v;
	struct evbuffer_ptr at;

	c->rq->ans.collecting = 0;
	if ((rw = proxy_rewriting_get(cfg->limits.max_body > REWRITING_MIN_HOLD ?
	    cfg->limits.max_body : REWRITING_MIN_HOLD)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
		return;
	}
	c->rq->ans.rewriting = rw;
	rw->err = 0;
	rw->complete = 0;
	rw->cur = NULL;
	rw->head = *resp;
	proxy_vars(c, proxy_prog_vars(prog), &vars, &tls_text);
	vars.status = resp->status;     /* for when: { status: ... } */
	if (body_needs_headers(prog))
		proxy_kept_request_headers(c, &vars);
	rw->err = stream_envelope_start(rw->se, prog, c->rq->route->validate, cfg->limits.max_depth,
	    cfg->limits.max_members, &vars, proxy_rewriting_write_cb, rw);
	/* What was collected before the body outgrew max_body goes first. */
	evbuffer_ptr_set(c->rq->body, &at, 0, EVBUFFER_PTR_SET);
	while (rw->err == 0 && evbuffer_peek(c->rq->body, -1, &at, &v, 1) >= 1 && v.iov_len != 0) {
		proxy_rewriting_feed(c, rw, v.iov_base, v.iov_len);
		if (evbuffer_ptr_set(c->rq->body, &at, v.iov_len, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	if (stream_envelope_written(rw->se) != 0)
		evbuffer_drain(c->rq->body, evbuffer_get_length(c->rq->body));
	proxy_rewriting_send(c, rw);
	if (rw->err != 0) {
		proxy_rewriting_failed(c, rw, 0);
		return;
	}
	proxy_rewriting_forward(c, 0);
}

void
proxy_rewriting_forward(struct client *c, int eof)
{
	struct proxy_rewriting *rw = c->rq->ans.rewriting;
	enum payload_result r;

	r = proxy_payload(c, eof, proxy_rewriting_take, rw);
	if (r == PAYLOAD_BAD_FRAMING) {
		tries_bad_framing(&c->rq->t);
		client_error(c, GW_UPSTREAM_INVALID, NULL, 1);
		return;
	}
	if (r == PAYLOAD_END && rw->err == 0) {
		rw->err = stream_envelope_finish(rw->se);
		proxy_rewriting_send(c, rw);
	}
	if (rw->err != 0) {
		proxy_rewriting_failed(c, rw, r == PAYLOAD_END);
		return;
	}
	if (r == PAYLOAD_END) {
		metrics_envelope(c->w, c->rq->route, METRICS_RESPONSE, METRICS_APPLIED,
		    METRICS_REASON_NONE);
		metrics_streamed(c->w, c->rq->route, METRICS_STREAMED_REWRITTEN);
		rw->complete = 1;
	}
	proxy_answer_went_on(c, r == PAYLOAD_END, eof);
}

/* --- the worker's end --------------------------------------------------------------------- */

void
proxy_events_worker_end(void)
{
	proxy_pool_empty(&events_pool);
	proxy_pool_empty(&rewriting_pool);
}
