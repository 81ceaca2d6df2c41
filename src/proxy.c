#include "config.h"
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "aggregate.h"
#include "body.h"
#include "close_reason.h"
#include "conn.h"
#include "errors.h"
#include "exchange.h"
#include "header_ops.h"
#include "headers.h"
#include "http.h"
#include "jsonrpc_route.h"
#include "log.h"
#include "metrics.h"
#include "path_vars.h"
#include "respond.h"
#include "route.h"
#include "route_scan.h"
#include "server.h"
#include "tls.h"
#include "upstream.h"
#include "upstream_state.h"

/* Bytes queued towards a slow peer before we stop reading from the other side. */
#define FLOW_HIGH (256 * 1024)
#define FLOW_LOW (64 * 1024)
/* Largest response head accepted from an upstream. */
#define UPSTREAM_MAX_HEAD (64 * 1024)
/* What a plain upstream connection reads before the head of an answer the route's ops
 * collect: the part of a Content-Length body read with the head is copied into its block,
 * the rest is read straight into place.  Bodies this small come in one read, as before. */
#define UPSTREAM_HEAD_READ (32 * 1024)
/* Unsent output above which a connection's next request waits for its client to read what
 * it was sent: a client that pipelines requests and never reads costs this much, not an
 * answer per request it wrote. */
#define PIPELINE_HIGH (64 * 1024)
#define PIPELINE_LOW (16 * 1024)
/* Requests of one pipeline handled in one turn; then the other connections get theirs. */
#define PIPELINE_TURN 32

enum client_state {
	CLIENT_IDLE,                    /* waiting for (the rest of) a request head */
	CLIENT_BUSY,                    /* a request is being proxied */
	CLIENT_CLOSING,                 /* flushing the last bytes, then close */
	CLIENT_DEAD                     /* closed; memory freed from the loop */
};

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

enum timer_mode { TIMER_OFF, TIMER_KEEPALIVE, TIMER_HEADER, TIMER_LINGER };

/* A request on a client connection, from its head to the end of its answer, and its tries
 * with upstream servers.  Requests come from a per-worker free list: a connection waiting
 * for its next request holds none. */
struct request {
	struct request *next_free;      /* in its worker's free list */
	/* Kept from one request to the next (drained, emptied): buffers, the exchange's timer,
	 * the route scan's and the path captures' memory. */
	struct exchange ex;             /* the try in progress */
	struct evbuffer *up_head;       /* the head sent upstream, written once for every try */
	struct evbuffer *req_body;      /* the request body to send (request ops), or NULL */
	struct evbuffer *req_copy;      /* the request head, for $header.NAME in response ops */
	struct evbuffer *resp_head;     /* the upstream's head, kept while the body is collected */
	struct evbuffer *body;          /* the collected body */
	struct route_scan scan;         /* the body's first bytes, read to choose the route */
	struct path_vars pathv;         /* the captures of its route's path template */
	/* Written before they are read in every request (lengths and counts are zeroed). */
	char hash_key[256];             /* the hash balancing key of this request */
	struct server_pool *tried[CONFIG_MAX_TRIES];
	char last_message[384];
	char method[16];                /* for the access log, and the ones below */
	char target[512];
	char request_id[130];
	char user_agent[128];
	char referer[128];

	/* Zeroed for every request (REQUEST_STATE on). */
	struct worker_runtime *wr;
	const struct config_route *route;
	struct upstream_pool *upool;
	size_t replay_len;              /* body bytes at the front of the input kept for another
	                                 * try, until the answer starts */
	size_t hash_key_len;
	unsigned idempotent : 1;        /* safe to send twice (method, or Idempotency-Key) */
	unsigned replayable : 1;        /* the request can be sent again once it went out */
	unsigned buffer_body : 1;       /* the body is kept in the input: wait for all of it */
	unsigned keep_chunked : 1;      /* a chunked body kept de-chunked in req_body: up_head
	                                 * waits for its framing until the body's end */
	unsigned expect_continue : 1;
	unsigned head_request : 1;
	unsigned head_as_get : 1;       /* HEAD sent upstream as GET: answered as GET, bodiless */
	unsigned req_done : 1;          /* request body fully passed upstream (or in hand) */
	unsigned req_buffering : 1;     /* collecting a JSON request body for request ops */
	unsigned accept_gzip : 1;       /* compress: gzip route and a client that accepts gzip */
	unsigned sent : 1;              /* this try's request bytes went out */
	unsigned noted : 1;             /* this try's server is in tried[] */
	unsigned stale_retried : 1;     /* a stale pooled connection was replaced once */
	unsigned pick_after_body : 1;   /* the server is chosen once the body the request ops
	                                 * take is in: its upstream hashes by a $json field */
	int64_t req_out_len;            /* Content-Length sent upstream instead of the client's, or -1 */
	enum body_mode req_mode;
	uint64_t req_left;
	struct http_chunked req_chunk;
	struct body_block *req_block;   /* a request body collected for request ops */
	size_t req_block_len;           /* its bytes so far, de-chunked */
	struct aggregate *agg;          /* an aggregated route's backends and merge, or NULL */
	struct jsonrpc_route *rpc;      /* a JSON-RPC route's calls and answers, or NULL */

	/* Its tries. */
	size_t ntried;
	unsigned retries;               /* retries of retry_on (not connect failovers) */
	enum gateway_error last_error;  /* what the latest failed try would answer */

	/* The answer. */
	unsigned resp_started : 1;      /* response head sent to the client */
	unsigned resp_head_seen : 1;    /* the upstream's final response head was parsed */
	unsigned resp_buffering : 1;    /* collecting a JSON body for the route's envelope ops */
	unsigned resp_rechunk : 1;      /* re-framing a de-chunked body as chunks */
	unsigned resp_dechunk : 1;      /* HTTP/1.0 client: strip chunked framing */
	unsigned resp_sinking : 1;      /* the upstream connection reads into resp_block */
	unsigned up_close : 1;          /* upstream connection not reusable after this response */
	unsigned answer_refused : 1;    /* a well-formed answer the ops refused for the gateway's
	                                 * own reasons: no fault of its server */
	const struct rewrite_program *resp_prog;   /* the ops this answer's status calls for */
	struct body_block *resp_block;  /* or: a Content-Length body read straight into a block */
	size_t resp_block_len;
	enum body_mode resp_mode;
	uint64_t resp_left;
	struct http_chunked resp_chunk;

	/* For the access log. */
	int status;
	int gw_error;                   /* gateway error answered, or -1 (for metrics) */
	uint64_t bytes_sent;
	size_t head_sent;               /* of bytes_sent, the response head's */
	struct timespec start;
	size_t request_id_len;
};

#define REQUEST_STATE offsetof(struct request, wr)
/* Requests a worker keeps for the next ones, beyond those in progress. */
#define REQUESTS_KEPT 256

/* A client connection (the downstream side) and the request in progress on it, if any. */
struct client {
	LIST_ENTRY(client) entry;
	struct worker *w;
	struct conn conn;
	struct deadline timer;          /* keep-alive, header and lingering-close limits */
	enum timer_mode timer_mode;
	enum client_state state;
	enum client_close close_reason; /* why it closes, once decided (the first reason given) */
	char addr[INET6_ADDRSTRLEN];
	int http_minor;
	unsigned keepalive : 1;
	unsigned lingering : 1;         /* our side is shut: reading what the client still sends */
	unsigned up_paused : 1;         /* upstream reads stopped: client output is full */
	unsigned client_paused : 1;     /* client reads stopped: upstream output is full */
	unsigned processing : 1;        /* client_process runs for it: a request's end goes on
	                                 * with the next one from there, not by recursion */
	unsigned out_paused : 1;        /* waiting for the client to read before the next
	                                 * pipelined request */
	unsigned resume_queued : 1;     /* in w->resume: its pipeline goes on at its next turn */
	TAILQ_ENTRY(client) resume_entry;

	struct request *rq;             /* from its head to its end (until the reaper once closed) */
};

static void client_process(struct client *c);
static void client_request_detach(struct client *c);
static void client_route(struct client *c, struct http_request *req, ssize_t r);
static void proxy_forward_request_body(struct client *c);
static void proxy_forward_response_body(struct client *c);
static void proxy_try(struct client *c, int fresh);
static void proxy_send_request(struct client *c);
static void proxy_keep_chunked(struct client *c);
static void proxy_invalid_response(struct client *c);
static void proxy_collect_response_body(struct client *c);
static void proxy_respond_rewritten(struct client *c);
static void proxy_collect_request_body(struct client *c);
static void proxy_upstream_timeouts(struct client *c);
static void proxy_drop_block(struct client *c);
static void proxy_skip_body(struct client *c);
static void proxy_move(struct client *c, struct evbuffer *in, struct evbuffer *out, size_t n);
static void proxy_flush(struct client *c);
static void proxy_exchange_cb(struct exchange *ex, int what, void *arg);
static void proxy_end_aggregate(struct client *c);
static void proxy_aggregate(struct client *c, const struct http_request *req, size_t head_len);
static void proxy_jsonrpc(struct client *c, const struct http_request *req, size_t head_len);
static void proxy_jsonrpc_start(struct client *c, struct http_request *req);
static int proxy_jsonrpc_failed(struct client *c, enum gateway_error err, const char *message);
static int proxy_jsonrpc_hold_answer(struct client *c, size_t head_len);
static void proxy_jsonrpc_judge(struct client *c);
static void proxy_jsonrpc_too_large(struct client *c);
static void proxy_end_jsonrpc(struct client *c);
static void proxy_next_try(struct client *c, unsigned fail, enum upstream_retry_reason why);
static void proxy_forget_tried(struct client *c);
static void proxy_try_error(struct client *c, enum gateway_error err, const char *fmt,
    const char *detail);
static int proxy_dechunk_into_block(struct client *c, struct evbuffer *in,
    struct evbuffer_iovec vec);
static void proxy_drop_request_block(struct client *c);
static int proxy_dechunk(struct http_chunked *ch, struct evbuffer *in, struct evbuffer_iovec vec,
    struct evbuffer *dst);

/* The route rewrites responses, for response_on's statuses or for the others. */
static int
proxy_has_response_ops(const struct config_route *route)
{
	return route->response != NULL || route->error_response != NULL;
}

/* Bits 1 << REWRITE_VAR_* of the variables an op list uses. */
static unsigned
proxy_prog_vars(const struct rewrite_program *prog)
{
	return prog != NULL ? prog->vars : 0;
}

/* Response ops or response header ops read request headers ($header.NAME): the request head
 * is kept for them. */
static int
proxy_response_needs_headers(const struct config_route *route)
{
	return body_needs_headers(route->response) || body_needs_headers(route->error_response) ||
	    (route->response_headers != NULL &&
	    (route->response_headers->vars & (1u << REWRITE_VAR_HEADER)));
}

static void client_error(struct client *c, enum gateway_error err, const char *message,
    int must_close);

/*
 * A body the ops cannot take, for why: counted as passed or failed, as on_error decides.
 * Under fail the client gets err with message (NULL: its default text): 1, the request is
 * answered.  0: the body goes on untouched.
 */
static int
proxy_unrewritten(struct client *c, enum metrics_direction direction,
    enum metrics_envelope_reason why, enum gateway_error err, const char *message,
    int must_close)
{
	int fail = c->rq->route->on_error == ON_ERROR_FAIL;

	metrics_envelope(c->w, c->rq->route, direction, fail ? METRICS_FAILED : METRICS_PASSED, why);
	if (!fail)
		return 0;
	/* An answer over our limit or in a coding we do not decode is still a good answer. */
	c->rq->answer_refused = direction == METRICS_RESPONSE &&
	    (why == METRICS_REASON_OVER_LIMIT || why == METRICS_REASON_ENCODING);
	client_error(c, err, message, must_close);
	return 1;
}

/* Why the ops could not rewrite a body, for jsongate_envelope_total. */
static enum metrics_envelope_reason
proxy_unrewritten_reason(const struct body_result *res)
{
	return res->encoding ? METRICS_REASON_ENCODING : res->invalid ?
	    METRICS_REASON_INVALID_JSON : METRICS_REASON_OP_ERROR;
}

static const struct config *
client_cfg(const struct client *c)
{
	return (c->rq != NULL && c->rq->wr != NULL ? c->rq->wr : c->w->cur)->rt->cfg;
}

/* The connection of the try in progress (the caller knows there is one). */
static struct conn *
upconn(struct client *c)
{
	return &c->rq->ex.uc->conn;
}

/* The server of the latest try, or NULL. */
static const struct config_server *
proxy_server(const struct client *c)
{
	return c->rq->ntried != 0 ? c->rq->tried[c->rq->ntried - 1]->srv : NULL;
}

/* Framing lines are written on every message: no printf on that path. */
static inline char *
put_bytes(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return p + n;
}
#define put_lit(p, lit) put_bytes((p), (lit), sizeof(lit) - 1)

static char *
put_content_length(char *p, uint64_t v)
{
	char digits[20];
	int n = 0;

	p = put_lit(p, "Content-Length: ");
	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n > 0)
		*p++ = digits[--n];
	return put_lit(p, "\r\n");
}

static void
client_timer_set(struct client *c, enum timer_mode mode, uint64_t ms)
{
	c->timer_mode = mode;
	if (mode == TIMER_OFF)
		deadline_stop(&c->timer);
	else
		deadline_start(&c->timer, ms);
}

/* Every state change goes through here, so the active/idle connection gauges stay true. */
static void
client_set_state(struct client *c, enum client_state state)
{
	if (c->state == CLIENT_BUSY && state != CLIENT_BUSY)
		metrics_client_active(c->w, -1);
	else if (c->state != CLIENT_BUSY && state == CLIENT_BUSY)
		metrics_client_active(c->w, 1);
	c->state = state;
}

static void
proxy_drop(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_drain(b, evbuffer_get_length(b));
}

/* Empty the buffers a request keeps for the next one: however the request ended, none of
 * what it read or wrote may go out with the next request that takes them. */
static void
request_drain(struct request *rq)
{
	proxy_drop(rq->up_head);
	proxy_drop(rq->req_body);
	proxy_drop(rq->req_copy);
	proxy_drop(rq->resp_head);
	proxy_drop(rq->body);
}

/* The connection will close, for why (unless a reason was given before). */
static void
client_closing_for(struct client *c, enum client_close why)
{
	if (c->close_reason == CLIENT_CLOSE_NONE)
		c->close_reason = why;
}

/* Close at once, for why unless a reason was given before: every close ends here.  The
 * memory goes back from the loop, so callers up the stack may still look at c->state
 * (CLIENT_DEAD) after this. */
static void
client_free(struct client *c, enum client_close why)
{
	struct worker *w = c->w;

	if (c->state == CLIENT_DEAD)
		return;
	client_closing_for(c, why);
	/* A lingering close ends a close that had its reason; none is left to the client. */
	client_closing_for(c, CLIENT_CLOSE_CLIENT_CLOSED);
	metrics_client_closed(w, c->close_reason);
	log_debug("client %s: closed: %s", c->addr, client_closes[c->close_reason].text);
	if (c->rq != NULL) {
		/* The request stays the client's until the reaper: callers may still look. */
		proxy_drop_block(c);
		exchange_end(&c->rq->ex, 0);
		proxy_forget_tried(c);
		proxy_end_aggregate(c);
		proxy_end_jsonrpc(c);
		request_drain(c->rq);
		if (c->rq->wr != NULL) {
			worker_runtime_unref(c->rq->wr);
			c->rq->wr = NULL;
		}
	}
	client_set_state(c, CLIENT_DEAD);
	if (c->resume_queued) {
		TAILQ_REMOVE(&w->resume, c, resume_entry);
		c->resume_queued = 0;
	}
	LIST_REMOVE(c, entry);
	w->nclients--;
	metrics_client(w, -1);
	deadline_stop(&c->timer);
	conn_close(&c->conn);
	LIST_INSERT_HEAD(&w->dead, c, entry);
	event_active(w->reaper, EV_TIMEOUT, 0);
	worker_client_closed(w);
}

static void
proxy_free_buffer(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_free(b);
}

void
proxy_reap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct client *c;

	(void)fd;
	(void)what;
	while ((c = LIST_FIRST(&w->dead)) != NULL) {
		LIST_REMOVE(c, entry);
		client_request_detach(c);
		free(c);
	}
}

/* --- requests ---------------------------------------------------------------------------- */

static void
request_free(struct request *rq)
{
	exchange_free(&rq->ex);
	proxy_free_buffer(rq->resp_head);
	proxy_free_buffer(rq->body);
	proxy_free_buffer(rq->req_copy);
	proxy_free_buffer(rq->up_head);
	proxy_free_buffer(rq->req_body);
	route_scan_free(&rq->scan);
	path_vars_free(&rq->pathv);
	free(rq);
}

/* c's head is here: it gets a request, from the worker's free list when one is there, with
 * its per-request state zeroed.  0, or -1 without memory. */
static int
client_request_attach(struct client *c)
{
	struct worker *w = c->w;
	struct request *rq = w->free_requests;

	if (rq != NULL) {
		w->free_requests = rq->next_free;
		w->nfree_requests--;
		rq->ex.arg = c;
	} else if ((rq = calloc(1, sizeof(*rq))) == NULL ||
	    exchange_init(&rq->ex, w, proxy_exchange_cb, c) < 0) {
		free(rq);
		return -1;
	}
	memset((char *)rq + REQUEST_STATE, 0, sizeof(*rq) - REQUEST_STATE);
	rq->method[0] = rq->target[0] = rq->user_agent[0] = rq->referer[0] = '\0';
	c->rq = rq;
	return 0;
}

/* c's request is over (buffers drained, tries ended): back to the free list, or freed when
 * the worker keeps enough. */
static void
client_request_detach(struct client *c)
{
	struct request *rq = c->rq;
	struct worker *w = c->w;

	if (rq == NULL)
		return;
	c->rq = NULL;
	route_scan_done(&rq->scan);
	path_vars_clear(&rq->pathv);
	if (w->nfree_requests >= REQUESTS_KEPT) {
		request_free(rq);
		return;
	}
	rq->next_free = w->free_requests;
	w->free_requests = rq;
	w->nfree_requests++;
}

void
proxy_worker_free(struct worker *w)
{
	struct request *rq;

	while ((rq = w->free_requests) != NULL) {
		w->free_requests = rq->next_free;
		request_free(rq);
	}
	w->nfree_requests = 0;
}

/* How long a closing connection may take to hear the end of what its client was sending. */
#define LINGER_TOTAL_MS 30000
#define LINGER_IDLE_MS 2000

/* Our last byte is out: close.  If the client may still be sending (a request we did not
 * read to its end, or pipelined bytes), closing now would make the kernel answer with a
 * reset that can destroy the response before the client reads it: shut our side, read
 * and discard for a while first, as nginx's lingering close does. */
static void
client_close_now(struct client *c)
{
	if (c->lingering || c->conn.error || c->conn.eof || c->conn.ssl != NULL ||
	    ((c->rq == NULL || c->rq->req_done) && evbuffer_get_length(c->conn.in) == 0 &&
	    !c->conn.readable)) {
		client_free(c, CLIENT_CLOSE_NONE);
		return;
	}
	c->lingering = 1;
	if (shutdown(c->conn.fd, SHUT_WR) < 0) {
		client_free(c, CLIENT_CLOSE_NONE);
		return;
	}
	conn_notify_drained(&c->conn, 0, 0);
	evbuffer_drain(c->conn.in, evbuffer_get_length(c->conn.in));
	client_timer_set(c, TIMER_LINGER, LINGER_TOTAL_MS);
	conn_set_timeouts(&c->conn, LINGER_IDLE_MS, 0);
	conn_read_start(&c->conn);
}

/* Stop reading, send what is queued, then close for why. */
static void
client_close_after_flush(struct client *c, enum client_close why)
{
	client_closing_for(c, why);
	client_set_state(c, CLIENT_CLOSING);
	client_timer_set(c, TIMER_OFF, 0);
	conn_read_stop(&c->conn);
	conn_flush(&c->conn);
	if (c->conn.error) {
		client_free(c, CLIENT_CLOSE_CLIENT_ERROR);
		return;
	}
	if (evbuffer_get_length(c->conn.out) == 0) {
		client_close_now(c);
		return;
	}
	conn_notify_drained(&c->conn, 1, 0);
	/* A peer that never reads must not hold the connection forever. */
	conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
}

static void
client_now(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
}

/* We refused the client's own request (a 4xx of ours, as invalid JSON) before it went to the
 * server of the try in progress. */
static int
client_refused_unsent(const struct client *c)
{
	return !c->rq->sent && c->rq->gw_error >= 0 && gateway_errors[c->rq->gw_error].status < 500;
}

/* The server a request counts for in the upstream metrics. */
static const struct config_server *
client_counted_server(const struct client *c)
{
	return client_refused_unsent(c) ? NULL : proxy_server(c);
}

/* The servers tried, as nginx's $upstream_addr: "10.0.0.1:80, 10.0.0.2:80"; "-" for none.
 * The server of a try that never sent the request we refused is none of them. */
static void
client_servers_tried(const struct client *c, char *buf, size_t cap)
{
	size_t i, len = 0, n = c->rq->ntried;

	if (n > 0 && c->rq->noted && client_refused_unsent(c))
		n--;
	strcpy(buf, "-");
	for (i = 0; i < n && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
		    c->rq->tried[i]->srv->addr.text);
}

static void
client_log(struct client *c)
{
	const struct runtime *rt = (c->rq->wr != NULL ? c->rq->wr : c->w->cur)->rt;
	struct access_entry e;
	struct access_field json[CONFIG_MAX_JSON_FIELDS];
	struct access_field path[CONFIG_MAX_PATH_FIELDS];
	struct timespec now;
	char upstream[256];

	client_now(&now);
	metrics_request(c->w, c->rq->route, client_counted_server(c), c->rq->status,
	    c->rq->answer_refused ? -1 : c->rq->gw_error, &c->rq->start, &now);
	e.rpc_method = NULL;
	e.rpc_batch = -1;
	if (c->rq->rpc != NULL)
		jsonrpc_route_log(c->rq->rpc, c->rq->status, c->rq->gw_error, &e);
	if (rt->access.fd < 0) {
		route_scan_done(&c->rq->scan);
		path_vars_clear(&c->rq->pathv);
		return;
	}
	client_servers_tried(c, upstream, sizeof(upstream));
	e.remote_addr = c->addr;
	e.method = c->rq->method;
	e.path = c->rq->target;
	e.status = c->rq->status;
	e.bytes_sent = c->rq->bytes_sent;
	e.body_bytes_sent = c->rq->bytes_sent - c->rq->head_sent;
	e.upstream = upstream;
	e.route = c->rq->route != NULL ? c->rq->route->name : "-";
	e.duration_ms = (double)(now.tv_sec - c->rq->start.tv_sec) * 1e3 +
	    (double)(now.tv_nsec - c->rq->start.tv_nsec) / 1e6;
	e.request_id = c->rq->request_id;
	e.user_agent = c->rq->user_agent;
	e.referer = c->rq->referer;
	e.http_minor = c->http_minor;
	e.json = json;
	e.njson = route_scan_log(&c->rq->scan, rt->cfg, json);
	e.path_fields = path;
	e.npath = path_vars_log(&c->rq->pathv, rt->cfg, path);
	e.backends = c->rq->agg != NULL ? aggregate_log(c->rq->agg, &e.nbackends) : NULL;
	access_log_write(&rt->access, &e);
	route_scan_done(&c->rq->scan);
	path_vars_clear(&c->rq->pathv);
}

/* Let go of the body blocks; the socket layer must not write into them any more. */
static void
proxy_drop_block(struct client *c)
{
	body_block_release(c->rq->req_block);
	c->rq->req_block = NULL;
	if (c->rq->resp_block == NULL)
		return;
	if (c->rq->ex.uc != NULL)
		upconn(c)->sink = NULL;
	c->rq->resp_sinking = 0;
	body_block_release(c->rq->resp_block);
	c->rq->resp_block = NULL;
}

/* The answer started: what was kept for another try can go. */
static void
proxy_drop_replay(struct client *c)
{
	if (c->rq->replay_len != 0) {
		evbuffer_drain(c->conn.in, c->rq->replay_len);
		c->rq->replay_len = 0;
	}
	proxy_drop(c->rq->req_body);
	c->rq->replayable = 0;
}

/* The response is complete (or the request ended in an error): log, reset, go on. */
static void
client_request_end(struct client *c)
{
	struct worker *w = c->w;

	client_log(c);
	/* A body kept for ops goes now, not at the next request: idle clients hold nothing. */
	request_drain(c->rq);
	proxy_drop_block(c);
	if (c->rq->ex.stage != EXCHANGE_IDLE) {
		/* The whole answer came: the server did well (unless its status said otherwise). */
		exchange_verdict(&c->rq->ex, 0);
		exchange_end(&c->rq->ex, !c->rq->up_close && c->rq->req_done && c->rq->sent);
	}
	proxy_drop_replay(c);
	proxy_forget_tried(c);
	proxy_end_aggregate(c);
	proxy_end_jsonrpc(c);
	if (c->rq->wr != NULL) {
		worker_runtime_unref(c->rq->wr);
		c->rq->wr = NULL;
	}
	c->rq->route = NULL;
	c->rq->upool = NULL;
	c->conn.read_max = FLOW_HIGH;
	if (c->up_paused || c->client_paused)
		conn_notify_drained(&c->conn, 0, 0);
	c->up_paused = c->client_paused = 0;
	/* A request whose body we did not read to the end leaves the stream unframed.  While
	 * stopping, a request pipelined behind this one is still answered (503 shutting_down). */
	if (!c->keepalive || !c->rq->req_done ||
	    (w->draining && evbuffer_get_length(c->conn.in) == 0)) {
		client_close_after_flush(c, !c->rq->req_done ? CLIENT_CLOSE_UNREAD_BODY :
		    w->draining ? CLIENT_CLOSE_SHUTDOWN : CLIENT_CLOSE_NOT_KEEPALIVE);
		return;
	}
	client_request_detach(c);
	client_set_state(c, CLIENT_IDLE);
	conn_set_timeouts(&c->conn, 0, 0);
	client_timer_set(c, TIMER_KEEPALIVE, client_cfg(c)->timeouts.keepalive);
	conn_read_start(&c->conn);
	client_process(c);
}

/* Why the connection closes after answering err. */
static enum client_close
client_error_closes(enum gateway_error err, int draining)
{
	switch (err) {
	case GW_BAD_REQUEST:
	case GW_NOT_IMPLEMENTED:
	case GW_VERSION_NOT_SUPPORTED:
		return CLIENT_CLOSE_BAD_REQUEST;
	case GW_REQUEST_TIMEOUT:
		return CLIENT_CLOSE_HEADER_TIMEOUT;
	case GW_PAYLOAD_TOO_LARGE:
	case GW_HEADER_TOO_LARGE:
		return CLIENT_CLOSE_LIMIT;
	case GW_INTERNAL_ERROR:
		return CLIENT_CLOSE_OUT_OF_MEMORY;
	default:
		return draining ? CLIENT_CLOSE_SHUTDOWN : CLIENT_CLOSE_UNREAD_BODY;
	}
}

/* Answer with a gateway error; a request that cannot be framed any more closes after. */
static void
client_error(struct client *c, enum gateway_error err, const char *message, int must_close)
{
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	enum respond_connection conn;

	c->rq->gw_error = (int)err;
	if (c->rq->resp_started) {
		/* Too late for an error response: cut the connection so the truncation shows. */
		c->keepalive = 0;
		c->rq->up_close = 1;
		c->rq->status = c->rq->status ? c->rq->status : gateway_errors[err].status;
		client_log(c);
		exchange_end(&c->rq->ex, 0);
		client_close_after_flush(c, CLIENT_CLOSE_UPSTREAM_ERROR);
		return;
	}
	exchange_end(&c->rq->ex, 0);
	/* A forwarded JSON-RPC call that got no answer: its error object answers it. */
	if (c->rq->rpc != NULL && proxy_jsonrpc_failed(c, err, message))
		return;
	/* A body still in the input unread, or streamed halfway: the stream is unframed. */
	if (must_close || !c->rq->req_done || c->w->draining) {
		c->keepalive = 0;
		client_closing_for(c, client_error_closes(err, c->w->draining));
	}
	conn = !c->keepalive ? RESPOND_CONN_CLOSE :
	    c->http_minor == 0 ? RESPOND_CONN_KEEPALIVE : RESPOND_CONN_NONE;
	c->rq->status = gateway_errors[err].status;
	c->rq->bytes_sent += respond_error(c->conn.out, err, message, id, conn, c->rq->head_request,
	    &c->rq->head_sent);
	c->rq->resp_started = 1;
	client_request_end(c);
}

static void
client_body_framing(struct client *c, const struct http_request *req)
{
	if (req->framing.chunked) {
		c->rq->req_mode = BODY_CHUNKED;
		http_chunked_init(&c->rq->req_chunk);
	} else if (req->framing.content_length > 0) {
		c->rq->req_mode = BODY_LENGTH;
		c->rq->req_left = (uint64_t)req->framing.content_length;
	} else {
		c->rq->req_mode = BODY_NONE;
	}
	c->rq->req_done = c->rq->req_mode == BODY_NONE;
}

static void
client_new_request_id(struct client *c, const struct http_request *req)
{
	if (headers_request_id_acceptable(req->request_id)) {
		memcpy(c->rq->request_id, req->request_id.p, req->request_id.len);
		c->rq->request_id_len = req->request_id.len;
	} else {
		headers_request_id_generate(c->rq->request_id);
		c->rq->request_id_len = REQUEST_ID_LEN;
	}
	c->rq->request_id[c->rq->request_id_len] = '\0';
}

static void
copy_str(char *dst, size_t cap, struct http_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	memcpy(dst, s.p, n);
	dst[n] = '\0';
}

static void
client_remember_for_log(struct client *c, const struct http_request *req)
{
	size_t i;

	copy_str(c->rq->method, sizeof(c->rq->method), req->method);
	copy_str(c->rq->target, sizeof(c->rq->target), req->target);
	c->rq->user_agent[0] = c->rq->referer[0] = '\0';
	if (c->w->cur->rt->access.format != ACCESS_COMBINED)
		return;
	for (i = 0; i < req->nheaders; i++) {
		if (http_header_is(&req->headers[i], "user-agent"))
			copy_str(c->rq->user_agent, sizeof(c->rq->user_agent), req->headers[i].value);
		else if (http_header_is(&req->headers[i], "referer"))
			copy_str(c->rq->referer, sizeof(c->rq->referer), req->headers[i].value);
	}
}

/* The upstream's hash_key for this request, kept for every try. */
static void
client_hash_key(struct client *c, const struct http_request *req)
{
	const char *var = c->rq->upool->cfg->hash_key;
	struct http_str v = { "", 0 };

	if (var != NULL && strncmp(var, "$json.", 6) == 0) {
		/* A body field: only a proxied request has read one. */
		route_scan_value(&c->rq->scan, var + 6, strlen(var + 6), &v.p, &v.len);
		c->rq->hash_key_len = v.len < sizeof(c->rq->hash_key) ? v.len : sizeof(c->rq->hash_key);
		memcpy(c->rq->hash_key, v.p, c->rq->hash_key_len);
		return;
	}
	c->rq->hash_key_len = exchange_hash_key(c->rq->upool->cfg, c->addr, req, req->target, req->path,
	    c->rq->hash_key, sizeof(c->rq->hash_key));
}

#define PROXY_USES(uses, var) (((uses) & (1u << REWRITE_VAR_##var)) != 0)

/* The $variables of this request that ops using the ones in uses (1 << REWRITE_VAR_*) need;
 * request headers are the caller's to add. */
static void
proxy_vars(struct client *c, unsigned uses, struct rewrite_vars *vars,
    struct body_tls_text *tls_text)
{
	const struct config_server *srv = proxy_server(c);

	memset(vars, 0, sizeof(*vars));
	vars->request_id.p = c->rq->request_id;
	vars->request_id.len = c->rq->request_id_len;
	vars->route.p = vars->upstream.p = vars->remote_addr.p = "";
	if (PROXY_USES(uses, ROUTE)) {
		vars->route.p = c->rq->route->name;
		vars->route.len = strlen(c->rq->route->name);
	}
	if (PROXY_USES(uses, UPSTREAM) && srv != NULL) {
		vars->upstream.p = srv->addr.text;
		vars->upstream.len = strlen(srv->addr.text);
	}
	if (PROXY_USES(uses, REMOTE_ADDR)) {
		vars->remote_addr.p = c->addr;
		vars->remote_addr.len = strlen(c->addr);
	}
	if (PROXY_USES(uses, TIME_ISO8601))
		vars->now = (long long)time(NULL);
	body_tls_vars(uses, &c->conn, vars, tls_text);
	route_scan_vars(&c->rq->scan, vars);
	path_vars_vars(&c->rq->pathv, vars);
}

/* For $header.NAME in response ops: the request head kept in req_copy, parsed again. */
static void
proxy_kept_request_headers(struct client *c, struct rewrite_vars *vars)
{
	struct http_request *req = &c->w->req;
	size_t ql = c->rq->req_copy != NULL ? evbuffer_get_length(c->rq->req_copy) : 0;

	if (ql != 0 && http_parse_request((const char *)evbuffer_pullup(c->rq->req_copy,
	    (ev_ssize_t)ql), ql, req) > 0)
		body_vars_headers(vars, req);
}

/* The target to send upstream (the route's strip_prefix applied) in the worker's buffer: its
 * length, or -1 without memory. */
static int
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
static int
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
	fw.tls = c->conn.ssl != NULL;
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
	if (c->rq->keep_chunked)
		return 0;       /* proxy_head_framing, once the body decides */
	p = framing;
	if (c->rq->req_out_len >= 0)
		p = put_content_length(p, (uint64_t)c->rq->req_out_len);
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

static enum gateway_error
parse_error_to_gateway(ssize_t r)
{
	switch (r) {
	case HTTP_ERR_TOO_MANY_HEADERS: return GW_HEADER_TOO_LARGE;
	case HTTP_ERR_VERSION: return GW_VERSION_NOT_SUPPORTED;
	case HTTP_ERR_NOT_IMPLEMENTED: return GW_NOT_IMPLEMENTED;
	default: return GW_BAD_REQUEST;
	}
}

/* Remove every header named lower_name (the body it described was changed). */
static void
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

/* Nothing upstream will ask for a body we read first: invite it ourselves. */
static void
proxy_continue(struct client *c)
{
	if (c->rq->expect_continue && c->http_minor == 1) {
		c->rq->expect_continue = 0;
		evbuffer_add(c->conn.out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	}
}

/* Request ops: take the body in first (its head is kept in req_copy), then connect. */
static void
proxy_start_request_collect(struct client *c)
{
	const struct config *cfg = client_cfg(c);

	/* One block, sized up front for a Content-Length body and grown for a chunked one:
	 * the body is held once, not once in buffers and again pulled up for the parser. */
	body_block_release(c->rq->req_block);
	c->rq->req_block_len = 0;
	if ((c->rq->req_block = body_block_new(c->w->bodies,
	    c->rq->req_mode == BODY_LENGTH ? (size_t)c->rq->req_left : 0)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	c->rq->req_buffering = 1;
	proxy_continue(c);
	conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
	conn_read_start(&c->conn);
	proxy_collect_request_body(c);
}

/* The head and body collected for request ops are ready: they go as soon as the try that
 * started with the collection has its connection. */
static void
proxy_request_ready(struct client *c)
{
	if (c->rq->ex.stage == EXCHANGE_IDLE)
		proxy_try(c, 0);
	else if (c->rq->ex.stage == EXCHANGE_ACTIVE && c->rq->ex.uc != NULL)
		proxy_send_request(c);
}

/* The request body to send is req_body: keep it for another try when it is small enough. */
static void
proxy_send_collected(struct client *c)
{
	c->rq->replayable = evbuffer_get_length(c->rq->req_body) <= c->rq->upool->cfg->retry_body;
	proxy_request_ready(c);
}

/* The request's upstream balances by a field of the body: read whole by request ops, the
 * body is in before a server is chosen. */
static int
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

	if (!rq->pick_after_body)
		return 0;
	client_hash_key(c, req);
	proxy_try(c, 0);
	if (c->rq != rq || !rq->pick_after_body || c->state != CLIENT_BUSY || rq->resp_started)
		return -1;
	rq->pick_after_body = 0;
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
	struct body_block *b = c->rq->req_block;
	const char *why;
	size_t n;

	*len = c->rq->req_block_len;
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
		body_block_ref(c->rq->req_block);
		return c->rq->req_block;
	}
	route_scan_read_body(&c->rq->scan, cfg, c->rq->route, body_block_data(b), *len);
	return b;
}

/* Collect the request body, de-chunked; when complete, rewrite it and send it upstream. */
static void
proxy_collect_request_body(struct client *c)
{
	struct worker *w = c->w;
	const struct config *cfg = client_cfg(c);
	struct evbuffer *in = c->conn.in;
	struct evbuffer_iovec vec;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	struct http_request *req = &w->req;
	struct body_block *text;
	enum body_coding coding;
	size_t n, ql, len;
	char msg[256];
	int r;

	if (c->rq->req_mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->rq->req_left)
			n = (size_t)c->rq->req_left;
		evbuffer_remove(in, body_block_data(c->rq->req_block) + c->rq->req_block_len, n);
		c->rq->req_block_len += n;
		c->rq->req_left -= n;
		c->rq->req_done = c->rq->req_left == 0;
	} else {
		while (!c->rq->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = proxy_dechunk_into_block(c, in, vec);
			if (r == HTTP_CHUNKED_ERROR) {
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return;
			}
			c->rq->req_done = r == HTTP_CHUNKED_DONE;
		}
	}
	ql = evbuffer_get_length(c->rq->req_copy);
	if (c->rq->req_block_len > cfg->limits.max_body) {
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
			    body_block_data(c->rq->req_block), c->rq->req_block_len);
		if (proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		/* pass: send what we have as one chunk and re-chunk the rest as it comes. */
		if (proxy_pick_after_body(c, req) < 0)
			return;
		c->rq->req_buffering = 0;
		if (proxy_build_upstream_head(c, req) < 0) {
			client_error(c, GW_BAD_REQUEST, NULL, 1);
			return;
		}
		char size_line[24];
		int sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", c->rq->req_block_len);
		if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
			client_error(c, GW_INTERNAL_ERROR, NULL, 1);
			return;
		}
		evbuffer_add(c->rq->req_body, size_line, (size_t)sl);
		body_block_add_to(c->rq->req_body, c->rq->req_block, c->rq->req_block_len);
		evbuffer_add(c->rq->req_body, "\r\n", 2);
		if (c->rq->req_done)
			evbuffer_add(c->rq->req_body, "0\r\n\r\n", 5);
		proxy_drop_request_block(c);
		/* The rest streams after it: this request cannot be sent twice. */
		c->rq->replayable = 0;
		proxy_request_ready(c);
		return;
	}
	if (!c->rq->req_done)
		return;

	conn_read_stop(&c->conn);
	conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
	http_parse_request((const char *)evbuffer_pullup(c->rq->req_copy, (ev_ssize_t)ql), ql, req);
	if (c->rq->route->jsonrpc != NULL) {
		c->rq->req_buffering = 0;
		proxy_jsonrpc_start(c, req);
		return;
	}
	coding = body_content_coding(req->headers, req->nheaders);
	text = proxy_request_text(c, &coding, &len);
	if (proxy_pick_after_body(c, req) < 0) {
		body_block_release(text);
		return;
	}
	c->rq->req_buffering = 0;
	if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
		body_block_release(text);
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->rq->req_block_len == 0 && c->rq->route->validate != VALIDATE_FULL) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		body_block_release(text);
		metrics_envelope(w, c->rq->route, METRICS_REQUEST, METRICS_PASSED, METRICS_REASON_EMPTY);
		c->rq->req_out_len = 0;
	} else {
		proxy_vars(c, proxy_prog_vars(c->rq->route->request), &vars, &tls_text);
		body_vars_headers(&vars, req);
		r = body_apply_block(w->bodies, cfg, c->rq->route, c->rq->route->request, coding,
		    text, len, &vars, w->rewritten, &res);
		/* The output holds references of its own to what it splices. */
		res.inflated |= text != c->rq->req_block;
		body_block_release(text);
		if (r < 0) {
			snprintf(msg, sizeof(msg), "request body not rewritten: %s", res.error);
			log_warnx("route %s: %s (request %s)", c->rq->route->name, msg, c->rq->request_id);
			evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
			if (proxy_unrewritten(c, METRICS_REQUEST, proxy_unrewritten_reason(&res),
			    res.encoding ? GW_UNSUPPORTED_MEDIA_TYPE : GW_INVALID_JSON, msg, 0))
				return;
			/* pass: the client's bytes, untouched */
			body_block_add_to(c->rq->req_body, c->rq->req_block, c->rq->req_block_len);
		} else {
			metrics_envelope(w, c->rq->route, METRICS_REQUEST, METRICS_APPLIED,
			    METRICS_REASON_NONE);
			metrics_bytes(w, res.spliced, res.copied);
			/* The rewritten body may refer to the collected one: both stay until sent. */
			evbuffer_add_buffer(c->rq->req_body, w->rewritten);
			if (res.inflated)
				proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
		}
		c->rq->req_out_len = (int64_t)evbuffer_get_length(c->rq->req_body);
	}
	proxy_drop_request_block(c);
	if (proxy_build_upstream_head(c, req) < 0) {
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	proxy_send_collected(c);
}

/* Feed the first segment vec of in to a chunked decoder: payload moves to dst, framing is
 * dropped.  Returns what http_chunked_feed said. */
static int
proxy_dechunk(struct http_chunked *ch, struct evbuffer *in, struct evbuffer_iovec vec,
    struct evbuffer *dst)
{
	size_t consumed, off, dlen;
	int r;

	r = http_chunked_feed(ch, vec.iov_base, vec.iov_len, &consumed, &off, &dlen);
	if (r == HTTP_CHUNKED_ERROR)
		return r;
	if (r == HTTP_CHUNKED_DATA) {
		evbuffer_drain(in, off);
		evbuffer_remove_buffer(in, dst, dlen);
		evbuffer_drain(in, consumed - off - dlen);
	} else {
		evbuffer_drain(in, consumed);
	}
	return r;
}

/* Like proxy_dechunk, into the request block. */
static int
proxy_dechunk_into_block(struct client *c, struct evbuffer *in, struct evbuffer_iovec vec)
{
	size_t consumed, off, dlen;
	int r;

	r = http_chunked_feed(&c->rq->req_chunk, vec.iov_base, vec.iov_len, &consumed, &off, &dlen);
	if (r == HTTP_CHUNKED_ERROR)
		return r;
	if (r == HTTP_CHUNKED_DATA) {
		if (body_block_reserve(&c->rq->req_block, c->rq->req_block_len + dlen) < 0)
			return HTTP_CHUNKED_ERROR;
		evbuffer_drain(in, off);
		evbuffer_remove(in, body_block_data(c->rq->req_block) + c->rq->req_block_len, dlen);
		c->rq->req_block_len += dlen;
		evbuffer_drain(in, consumed - off - dlen);
	} else {
		evbuffer_drain(in, consumed);
	}
	return r;
}

/* The collected request body went into req_body (by reference) or was rewritten. */
static void
proxy_drop_request_block(struct client *c)
{
	body_block_release(c->rq->req_block);
	c->rq->req_block = NULL;
	c->rq->req_block_len = 0;
}

/* Response ops may read request headers ($header.NAME) after the head has left the input. */
static int
proxy_keep_request_head(struct client *c, size_t len)
{
	if (c->rq->req_copy == NULL && (c->rq->req_copy = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->rq->req_copy, evbuffer_get_length(c->rq->req_copy));
	return evbuffer_add(c->rq->req_copy, evbuffer_pullup(c->conn.in, (ev_ssize_t)len), len);
}

/* 1 when the request body is one for request ops (a JSON body; one in a coding they cannot
 * read follows on_error); else it goes untouched, counted with the reason.  Under on_error:
 * fail a body that is not JSON by its type is refused (-1, answered 415): most frameworks
 * read such a body as JSON all the same, and it must not reach them past the ops. */
static int
proxy_wants_request_body(struct client *c, const struct http_request *req)
{
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	/* Content-Length: 0 is an empty body, which validate: full does not take as JSON. */
	if (c->rq->req_mode == BODY_NONE && (req->framing.content_length != 0 ||
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
static void
proxy_plan_body(struct client *c)
{
	const struct config_upstream *up = c->rq->upool->cfg;
	const struct config *cfg = client_cfg(c);

	if (c->rq->req_mode == BODY_NONE) {
		c->rq->replayable = 1;
		return;
	}
	if (c->rq->keep_chunked) {
		c->rq->buffer_body = 1;
		proxy_continue(c);
		conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
		conn_read_start(&c->conn);
		proxy_keep_chunked(c);
		return;
	}
	if (c->rq->req_mode == BODY_LENGTH && c->rq->idempotent && c->rq->req_left <= up->retry_body) {
		c->rq->buffer_body = c->rq->replayable = 1;
		c->rq->replay_len = (size_t)c->rq->req_left;
		/* The input holds it whole (its usual limit again once the request ends). */
		if (c->conn.read_max < c->rq->replay_len)
			c->conn.read_max = c->rq->replay_len;
		if (evbuffer_get_length(c->conn.in) >= c->rq->replay_len) {
			c->rq->req_done = 1;
			return;
		}
		proxy_continue(c);
	}
	/* The body is read once the connection is ready, or now when it is kept. */
	conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
	if (c->rq->buffer_body)
		conn_read_start(&c->conn);
	else
		conn_read_stop(&c->conn);
}

/*
 * A chunked body of an idempotent request is kept, de-chunked, for another try while it stays
 * within retry_body; all of it here, it goes with a Content-Length.  Larger, what came goes
 * as one chunk and the rest streams in chunks: the request cannot be sent twice.
 */
static void
proxy_keep_chunked(struct client *c)
{
	size_t max = c->rq->upool->cfg->retry_body;
	struct evbuffer *in = c->conn.in;
	struct evbuffer_iovec vec;
	int r = HTTP_CHUNKED_MORE, sl;
	char size_line[24];
	size_t n;

	while (r != HTTP_CHUNKED_DONE && evbuffer_get_length(c->rq->req_body) <= max &&
	    evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0)
		if ((r = proxy_dechunk(&c->rq->req_chunk, in, vec, c->rq->req_body)) == HTTP_CHUNKED_ERROR) {
			client_error(c, GW_BAD_REQUEST, NULL, 1);
			return;
		}
	n = evbuffer_get_length(c->rq->req_body);
	if (r != HTTP_CHUNKED_DONE && n <= max)
		return;
	c->rq->buffer_body = c->rq->keep_chunked = 0;
	c->rq->req_done = r == HTTP_CHUNKED_DONE;
	c->rq->replayable = c->rq->req_done && n <= max;
	sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
	if ((!c->rq->req_done && (evbuffer_prepend(c->rq->req_body, size_line, (size_t)sl) < 0 ||
	    evbuffer_add(c->rq->req_body, "\r\n", 2) < 0)) || proxy_head_framing(c, c->rq->req_done) < 0) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	/* The rest waits until the connection is ready (proxy_send_request reads on). */
	conn_read_stop(&c->conn);
	if (c->rq->ex.stage == EXCHANGE_ACTIVE && c->rq->ex.uc != NULL)
		proxy_send_request(c);
}

/* A request begins on c (its head is here, or what came of it is all that will): it gets
 * its request, with the state every request starts from.  0, or -1 when c was closed. */
static int
client_request_begin(struct client *c)
{
	if (client_request_attach(c) < 0) {
		log_errorx("out of memory for a request from %s", c->addr);
		client_free(c, CLIENT_CLOSE_OUT_OF_MEMORY);
		return -1;
	}
	client_set_state(c, CLIENT_BUSY);
	client_timer_set(c, TIMER_OFF, 0);
	client_now(&c->rq->start);
	c->rq->status = 0;
	c->rq->gw_error = -1;
	c->rq->bytes_sent = 0;
	c->rq->head_sent = 0;
	c->rq->resp_started = 0;
	c->rq->req_buffering = 0;
	c->rq->req_out_len = -1;
	c->rq->resp_head_seen = 0;
	c->rq->resp_buffering = 0;
	c->rq->resp_rechunk = 0;
	c->rq->up_close = 0;
	c->rq->answer_refused = 0;
	c->rq->req_done = 1;
	c->keepalive = 0;
	c->http_minor = 1;
	c->rq->route = NULL;
	c->rq->ntried = 0;
	c->rq->retries = 0;
	c->rq->stale_retried = 0;
	c->rq->sent = 0;
	c->rq->buffer_body = 0;
	c->rq->keep_chunked = 0;
	c->rq->replayable = 0;
	c->rq->replay_len = 0;
	c->rq->last_error = GW_UPSTREAM_UNAVAILABLE;
	c->rq->last_message[0] = '\0';
	return 0;
}

/* A request whose head could not be read is answered with err, and the connection closes:
 * nothing after it can be framed. */
static void
client_refuse_head(struct client *c, enum gateway_error err)
{
	strcpy(c->rq->method, "-");
	strcpy(c->rq->target, "-");
	headers_request_id_generate(c->rq->request_id);
	c->rq->request_id_len = REQUEST_ID_LEN;
	c->rq->request_id[REQUEST_ID_LEN] = '\0';
	evbuffer_drain(c->conn.in, evbuffer_get_length(c->conn.in));
	client_error(c, err, NULL, 1);
}

/* Parse a request head at the front of the input and start proxying it. */
static void
client_read_head(struct client *c)
{
	struct worker *w = c->w;
	struct evbuffer *in = c->conn.in;
	const struct config *cfg = w->cur->rt->cfg;
	struct http_request *req = &w->req;
	size_t len, want;
	unsigned char *p;
	ssize_t r;

	/* Empty lines before the request line are part of the head for the parser and the limit. */
	if ((len = evbuffer_get_length(in)) == 0)
		return;
	want = len < cfg->limits.max_header ? len : cfg->limits.max_header;
	p = evbuffer_pullup(in, (ev_ssize_t)want);
	r = http_parse_request((const char *)p, want, req);
	if (r == HTTP_INCOMPLETE) {
		if (len < cfg->limits.max_header) {
			/* A head in pieces: from its first byte it has client_header to arrive. */
			if (c->timer_mode == TIMER_KEEPALIVE)
				client_timer_set(c, TIMER_HEADER, cfg->timeouts.client_header);
			/* A head longer than the input may hold: room for all of it. */
			if (len >= c->conn.read_max) {
				c->conn.read_max = cfg->limits.max_header;
				conn_read_stop(&c->conn);
				conn_read_start(&c->conn);
			}
			return;
		}
		r = HTTP_ERR_TOO_MANY_HEADERS;
	}

	if (client_request_begin(c) < 0)
		return;
	c->conn.read_max = FLOW_HIGH;
	if (r < 0) {
		client_refuse_head(c, parse_error_to_gateway(r));
		return;
	}

	c->http_minor = req->version_minor;
	/* timeouts.keepalive: 0 disables keep-alive: every answer says Connection: close. */
	c->keepalive = cfg->timeouts.keepalive != 0 && (req->version_minor == 1 ?
	    !req->framing.conn_close : req->framing.conn_keepalive && !req->framing.conn_close);
	c->rq->expect_continue = req->framing.expect_continue;
	c->rq->head_request = req->method_bit == METHOD_HEAD;
	c->rq->head_as_get = 0;
	c->rq->idempotent = (req->method_bit & (METHOD_GET | METHOD_HEAD | METHOD_PUT |
	    METHOD_DELETE | METHOD_OPTIONS | METHOD_TRACE)) != 0 ||
	    http_find_header(req->headers, req->nheaders, "idempotency-key").len != 0;
	client_body_framing(c, req);
	client_new_request_id(c, req);
	c->rq->accept_gzip = 0;
	if (w->cur->rt->access.fd >= 0)
		client_remember_for_log(c, req);
	if (w->draining) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_SHUTTING_DOWN, NULL, 1);
		return;
	}
	if (c->conn.tls_plain) {
		client_error(c, GW_BAD_REQUEST, "plain HTTP request sent to HTTPS port", 1);
		return;
	}
	client_route(c, req, r);
}

/* The route needs more of the body to decide: read it (its window, no more), within
 * client_body, the runtime kept for when it is decided. */
static void
client_scan_wait(struct client *c, size_t head_len)
{
	const struct config *cfg = client_cfg(c);

	if (c->rq->wr == NULL) {
		c->rq->wr = c->w->cur;
		worker_runtime_ref(c->rq->wr);
	}
	proxy_continue(c);
	c->conn.read_max = route_scan_input_max(cfg, head_len);
	conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
	conn_read_stop(&c->conn);       /* and start: input held back by the old limit is read */
	conn_read_start(&c->conn);
}

/* More of the body came while the route waits for it. */
static void
client_scan_more(struct client *c)
{
	struct http_request *req = &c->w->req;
	size_t hl = c->rq->scan.head_len;

	http_parse_request((const char *)evbuffer_pullup(c->conn.in, (ev_ssize_t)hl), hl, req);
	c->conn.read_max = FLOW_HIGH;
	client_route(c, req, (ssize_t)hl);
}

/* Choose the route of the request whose head (r bytes) leads the input, and start it. */
static void
client_route(struct client *c, struct http_request *req, ssize_t r)
{
	struct worker *w = c->w;
	struct evbuffer *in = c->conn.in;
	const struct config *cfg = client_cfg(c);
	int mismatch = 0, wants;

	if (route_scan_match(&c->rq->scan, w->bodies, cfg, req, in, (size_t)r, &c->rq->route,
	    &mismatch) == ROUTE_SCAN_WAIT) {
		client_scan_wait(c, (size_t)r);
		return;
	}
	if (c->rq->route == NULL) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, mismatch ? GW_METHOD_NOT_ALLOWED : GW_NO_ROUTE, NULL, 0);
		return;
	}
	if (c->rq->wr == NULL) {
		c->rq->wr = w->cur;
		worker_runtime_ref(c->rq->wr);
	}
	if (path_vars_set(&c->rq->pathv, c->rq->route, req->path.p, req->path.len) < 0) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->rq->route->backends != NULL) {
		proxy_aggregate(c, req, (size_t)r);
		return;
	}
	if (c->rq->route->jsonrpc != NULL) {
		proxy_jsonrpc(c, req, (size_t)r);
		return;
	}
	c->rq->upool = &c->rq->wr->pools[c->rq->route->upstream - cfg->upstreams];
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
		if (c->rq->req_mode == BODY_LENGTH && c->rq->req_left > cfg->limits.max_body &&
		    proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		if (c->rq->req_mode != BODY_LENGTH || c->rq->req_left <= cfg->limits.max_body) {
			/* The try starts now, connecting while the body comes: $upstream in the
			 * ops names its server. */
			evbuffer_drain(in, (size_t)r);
			c->rq->req_buffering = 1;
			c->rq->pick_after_body = proxy_hashes_by_field(c);
			if (!c->rq->pick_after_body)
				proxy_try(c, 0);
			if (c->state == CLIENT_BUSY && !c->rq->resp_started)
				proxy_start_request_collect(c);
			return;
		}
	}
	c->rq->keep_chunked = c->rq->req_mode == BODY_CHUNKED && c->rq->idempotent &&
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
		proxy_try(c, 0);
}

/* The client has enough answers to read: no further request of its pipeline is parsed
 * until it reads them, within client_body. */
static void
client_wait_for_reader(struct client *c)
{
	c->out_paused = 1;
	conn_read_stop(&c->conn);
	client_timer_set(c, TIMER_OFF, 0);
	conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
	conn_notify_drained(&c->conn, 1, PIPELINE_LOW);
}

/* The client read enough of its answers: its pipeline goes on. */
static void
client_reader_caught_up(struct client *c)
{
	c->out_paused = 0;
	conn_notify_drained(&c->conn, 0, 0);
	conn_set_timeouts(&c->conn, 0, 0);
	client_timer_set(c, TIMER_KEEPALIVE, client_cfg(c)->timeouts.keepalive);
	conn_read_start(&c->conn);
	client_process(c);
}

/* One pipeline had its turn: the others go first, then it goes on from the loop.  A zero
 * timer, not an active event, so that the loop polls the sockets in between. */
static void
client_resume_later(struct client *c)
{
	static const struct timeval now = { 0, 0 };

	conn_read_stop(&c->conn);
	c->resume_queued = 1;
	TAILQ_INSERT_TAIL(&c->w->resume, c, resume_entry);
	evtimer_add(c->w->resume_ev, &now);
}

void
proxy_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct worker *w = arg;
	struct client *c;
	size_t n = 0;

	(void)fd;
	(void)what;
	/* A turn each for those queued until now; a client queued again waits for the next. */
	TAILQ_FOREACH(c, &w->resume, resume_entry)
		n++;
	while (n-- > 0 && (c = TAILQ_FIRST(&w->resume)) != NULL) {
		TAILQ_REMOVE(&w->resume, c, resume_entry);
		c->resume_queued = 0;
		conn_read_start(&c->conn);
		client_process(c);
		proxy_flush(c);
	}
	if (!TAILQ_EMPTY(&w->resume))
		evtimer_add(w->resume_ev, &now);
}

/*
 * Handle the requests whose heads lead the input, one after the other: in a loop, never by
 * recursion (20,000 pipelined requests in one read must not grow the stack), at most
 * PIPELINE_TURN in one turn, and none while the client has not read PIPELINE_HIGH of its
 * answers.  A request that ends inside the loop leaves the next one to it.
 */
static void
client_process(struct client *c)
{
	unsigned handled = 0;
	size_t before;

	if (c->processing)
		return;
	c->processing = 1;
	while (c->state == CLIENT_IDLE && (before = evbuffer_get_length(c->conn.in)) != 0) {
		if (evbuffer_get_length(c->conn.out) > PIPELINE_HIGH) {
			conn_flush(&c->conn);
			if (evbuffer_get_length(c->conn.out) > PIPELINE_HIGH) {
				client_wait_for_reader(c);
				break;
			}
		}
		if (handled++ == PIPELINE_TURN) {
			client_resume_later(c);
			break;
		}
		client_read_head(c);
		if (c->state == CLIENT_IDLE && evbuffer_get_length(c->conn.in) == before)
			break;          /* incomplete head: wait for more */
	}
	c->processing = 0;
	/* The client closed its side after its last request: the answers go, then we close. */
	if (c->state == CLIENT_IDLE && c->conn.eof && !c->out_paused && !c->resume_queued)
		client_close_after_flush(c, CLIENT_CLOSE_CLIENT_CLOSED);
}

/* Send what both sides have queued. */
static void
proxy_flush(struct client *c)
{
	if (c->state == CLIENT_DEAD)
		return;
	conn_flush(&c->conn);
	if (c->rq != NULL && c->rq->ex.uc != NULL)
		conn_flush(upconn(c));
}

/* --- tries ------------------------------------------------------------------------------ */

/* The server of the try in progress joins tried[] (once). */
static void
proxy_note_server(struct client *c)
{
	if (c->rq->noted || c->rq->ex.sp == NULL || c->rq->ntried == CONFIG_MAX_TRIES)
		return;
	upstream_server_ref(c->rq->ex.sp);
	c->rq->tried[c->rq->ntried++] = c->rq->ex.sp;
	c->rq->noted = 1;
}

/* The request is over (logged): the servers it tried may go. */
static void
proxy_forget_tried(struct client *c)
{
	while (c->rq->ntried > 0)
		upstream_server_unref(c->rq->tried[--c->rq->ntried]);
}

/* Start a try on a server not tried yet (fresh: on a new connection). */
static void
proxy_try(struct client *c, int fresh)
{
	int r;

	c->rq->sent = 0;
	c->rq->noted = 0;
	c->rq->ex.key = c->rq->hash_key;
	c->rq->ex.keylen = c->rq->hash_key_len;
	c->rq->ex.connect_timeout = c->rq->route->timeouts.upstream_connect;
	c->rq->ex.try_timeout = c->rq->route->timeouts.upstream_try;
	c->rq->ex.tried = c->rq->tried;
	c->rq->ex.ntried = c->rq->ntried;
	r = exchange_start(&c->rq->ex, c->rq->upool, fresh);
	proxy_note_server(c);
	if (r < 0)
		proxy_exchange_cb(&c->rq->ex, EXCHANGE_FAILED, c);
	else if (r > 0)
		proxy_exchange_cb(&c->rq->ex, EXCHANGE_READY, c);
}

/* Whether a failed try may be followed by another.  A failed connect reached no server:
 * every method fails over, to each server once.  Otherwise the request must be safe to
 * send again and still in hand, and retries, retry_on and the retry budget must allow it. */
static int
proxy_may_retry(struct client *c, unsigned fail, enum upstream_retry_reason why)
{
	return !c->rq->resp_started && exchange_may_retry(&c->rq->ex, fail, why, c->rq->ntried,
	    &c->rq->retries, c->rq->idempotent, c->rq->replayable, c->rq->request_id);
}

/* Remember why this try failed: what the client gets if no other try succeeds. */
static void
proxy_try_error(struct client *c, enum gateway_error err, const char *fmt, const char *detail)
{
	c->rq->last_error = err;
	snprintf(c->rq->last_message, sizeof(c->rq->last_message), fmt, c->rq->upool->cfg->name, detail);
}

/* The try failed with fail (FAIL_*): end it, then try another server or answer the error. */
static void
proxy_next_try(struct client *c, unsigned fail, enum upstream_retry_reason why)
{
	int retry;

	exchange_verdict(&c->rq->ex, fail);
	exchange_end(&c->rq->ex, 0);
	retry = proxy_may_retry(c, fail, why);
	if (!retry) {
		client_error(c, c->rq->last_error, c->rq->last_message, 0);
		return;
	}
	proxy_try(c, 0);
}

/* The exchange could not give a connection: no server left, overloaded, or a failed
 * connect. */
static void
proxy_connect_failed(struct client *c)
{
	struct exchange *ex = &c->rq->ex;
	char logmsg[384];

	if (ex->fail == EXCHANGE_OVERLOADED) {
		exchange_end(ex, 0);
		log_warnx("upstream %s: every server is at max_connections and the queue is full "
		    "or the wait ran out (request %s)", c->rq->upool->cfg->name, c->rq->request_id);
		client_error(c, GW_UPSTREAM_OVERLOADED, NULL, 0);
		return;
	}
	if (ex->fail == EXCHANGE_NO_SERVER) {
		exchange_end(ex, 0);
		if (c->rq->ntried == 0)
			proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE, "upstream %s has no server%s", "");
		client_error(c, c->rq->last_error, c->rq->last_message, 0);
		return;
	}
	c->rq->last_error = exchange_describe_connect(ex, c->rq->last_message, sizeof(c->rq->last_message),
	    logmsg, sizeof(logmsg));
	log_warnx("%s (request %s)", logmsg, c->rq->request_id);
	proxy_next_try(c, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
}

/* The connection is ready: send the head, then the body (a copy when it may go again). */
static void
proxy_send_request(struct client *c)
{
	const struct config *cfg = client_cfg(c);
	struct evbuffer *out = upconn(c)->out;
	size_t n;

	if (c->rq->sent || c->rq->req_buffering || (c->rq->buffer_body && !c->rq->req_done))
		return;         /* the body is still coming: it goes once all of it is here */
	c->rq->sent = 1;
	n = evbuffer_get_length(c->rq->up_head);
	evbuffer_add(out, evbuffer_pullup(c->rq->up_head, -1), n);
	if (c->rq->req_body != NULL && evbuffer_get_length(c->rq->req_body) != 0) {
		if (c->rq->replayable) {
			/* Kept for another try: shared with the connection's output, not copied. */
			if (evbuffer_add_buffer_reference(out, c->rq->req_body) < 0) {
				n = evbuffer_get_length(c->rq->req_body);
				evbuffer_add(out, evbuffer_pullup(c->rq->req_body, -1), n);
			}
		} else {
			evbuffer_add_buffer(out, c->rq->req_body);
		}
	} else if (c->rq->replay_len != 0) {
		evbuffer_add(out, evbuffer_pullup(c->conn.in, (ev_ssize_t)c->rq->replay_len),
		    c->rq->replay_len);
	}
	if (!c->rq->req_done) {
		/* A streamed body: from now on it goes as it comes. */
		conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
		conn_read_start(&c->conn);
		proxy_forward_request_body(c);
		if (c->state != CLIENT_BUSY || c->rq->ex.uc == NULL)
			return;
	} else {
		conn_read_stop(&c->conn);
		conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
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

	conn_set_timeouts(upconn(c), c->rq->req_done ? ms : 0, ms);
}

/* Pass request body bytes from the client to the upstream as they arrive. */
static void
proxy_forward_request_body(struct client *c)
{
	struct evbuffer *in = c->conn.in;
	struct evbuffer *out = upconn(c)->out;
	struct evbuffer_iovec vec;
	size_t n, consumed, off, dlen;
	int r;

	if (c->rq->req_mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->rq->req_left)
			n = (size_t)c->rq->req_left;
		evbuffer_remove_buffer(in, out, n);
		c->rq->req_left -= n;
		c->rq->req_done = c->rq->req_left == 0;
	} else if (c->rq->req_mode == BODY_CHUNKED) {
		/* The payload goes in chunks of our own: extensions and trailers stop here. */
		while (!c->rq->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 &&
		    vec.iov_len > 0) {
			r = http_chunked_feed(&c->rq->req_chunk, vec.iov_base, vec.iov_len, &consumed,
			    &off, &dlen);
			if (r == HTTP_CHUNKED_ERROR) {
				c->rq->up_close = 1;
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return;
			}
			if (r == HTTP_CHUNKED_DATA) {
				evbuffer_drain(in, off);
				evbuffer_add_printf(out, "%zx\r\n", dlen);
				evbuffer_remove_buffer(in, out, dlen);
				evbuffer_add(out, "\r\n", 2);
				evbuffer_drain(in, consumed - off - dlen);
			} else {
				evbuffer_drain(in, consumed);
				if (r == HTTP_CHUNKED_DONE)
					evbuffer_add(out, "0\r\n\r\n", 5);
			}
			c->rq->req_done = r == HTTP_CHUNKED_DONE;
		}
	}
	if (c->rq->req_done) {
		conn_read_stop(&c->conn);
		conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
		proxy_upstream_timeouts(c);
		return;
	}
	if (evbuffer_get_length(out) > FLOW_HIGH && !c->client_paused) {
		c->client_paused = 1;
		conn_read_stop(&c->conn);
		conn_notify_drained(upconn(c), 1, FLOW_LOW);
	}
}

/* --- answers that call for another try ----------------------------------------------- */

/* The final head of an answer is here: a failing status is the server's verdict, and when it
 * is in retry_on and another try may go, this answer is dropped (1) for a try elsewhere.  Any
 * other answer is judged at its end (client_request_end). */
static int
proxy_retry_status(struct client *c, const struct http_response *resp)
{
	unsigned fail = exchange_status_failure(resp->status);
	char status[8];

	if (fail == 0)
		return 0;
	exchange_verdict(&c->rq->ex, fail);
	exchange_note_retry_after(&c->rq->ex, resp);
	if (!(c->rq->upool->cfg->retry_on & fail) ||
	    !proxy_may_retry(c, fail, exchange_status_reason(resp->status)))
		return 0;
	log_info("upstream %s server %s answered %d: trying another server (request %s)",
	    c->rq->upool->cfg->name, c->rq->ex.sp->srv->addr.text, resp->status, c->rq->request_id);
	snprintf(status, sizeof(status), "%d", resp->status);
	proxy_try_error(c, exchange_status_error(resp->status), "upstream %s answered %s",
	    status);
	exchange_end(&c->rq->ex, 0);
	proxy_try(c, 0);
	return 1;
}
enum out_framing { OUT_NONE, OUT_LENGTH, OUT_CHUNKED };

/* Write our response head for resp: its headers, our framing and connection handling. */
static void
proxy_write_response_head(struct client *c, struct http_response *resp,
    enum out_framing framing, uint64_t length, const char *extra)
{
	struct evbuffer *out = c->conn.out;
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	const struct header_ops *ops = c->rq->route->response_headers;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	char tail[96], *p = tail;
	size_t before = evbuffer_get_length(out);
	int n;

	if (ops != NULL) {
		proxy_vars(c, ops->vars, &vars, &tls_text);
		if (ops->vars & (1u << REWRITE_VAR_HEADER))
			proxy_kept_request_headers(c, &vars);
	}
	if (headers_response_out(out, resp, id, ops, &vars) < 0)
		c->keepalive = 0;
	if (extra != NULL)
		evbuffer_add(out, extra, strlen(extra));
	if (framing == OUT_CHUNKED)
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	else if (framing == OUT_LENGTH)
		p = put_content_length(p, length);
	if (!c->keepalive)
		p = put_lit(p, "Connection: close\r\n");
	else if (c->http_minor == 0)
		p = put_lit(p, "Connection: keep-alive\r\n");
	p = put_lit(p, "\r\n");
	n = (int)(p - tail);
	evbuffer_add(out, tail, (size_t)n);
	c->rq->head_sent = evbuffer_get_length(out) - before;
	c->rq->bytes_sent += c->rq->head_sent;
	c->rq->status = resp->status;
	c->rq->resp_started = 1;
}

/* 1: collect this response body for the ops its status calls for (response for the statuses
 * of response_on, else error_response); 0: stream it untouched; -1: answered already. */
static int
proxy_wants_body(struct client *c, const struct http_response *resp)
{
	const struct config *cfg = client_cfg(c);
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	c->rq->resp_prog = config_status_in(c->rq->route->response_on, resp->status) ?
	    c->rq->route->response : c->rq->route->error_response;
	if (c->rq->resp_prog == NULL)
		why = METRICS_REASON_STATUS;
	else if (c->rq->resp_mode == BODY_NONE && (c->rq->route->validate != VALIDATE_FULL ||
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
	if (c->rq->resp_mode == BODY_NONE) {
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
	if (c->rq->resp_mode == BODY_LENGTH && c->rq->resp_left > cfg->limits.max_body)
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT,
		    GW_UPSTREAM_INVALID, "upstream response body exceeds limits.max_body", 0);
	return 1;
}

/* Keep the answer's head (head_len bytes of the upstream input) and collect its body before
 * answering.  0, or -1 when answered with an error. */
static int
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
	if (c->rq->resp_mode == BODY_LENGTH && upconn(c)->ssl == NULL) {
		c->rq->resp_block = body_block_new(c->w->bodies, (size_t)c->rq->resp_left);
		c->rq->resp_block_len = (size_t)c->rq->resp_left;
	}
	c->rq->resp_buffering = 1;
	c->rq->resp_dechunk = 1;
	c->rq->resp_head_seen = 1;
	return 0;
}

/* Parse the upstream's response head and send ours to the client. Returns 0 when started. */
static int
proxy_read_response_head(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	struct evbuffer *out = c->conn.out;
	struct http_response *resp = &c->w->resp;
	size_t len, want;
	ssize_t r;

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
		if (r <= 0 || resp->status == 101) {
			proxy_invalid_response(c);
			return -1;
		}
		if (resp->status >= 200)
			break;
		/* Interim responses: relay 100 Continue to a client that waits for it. */
		if (resp->status == 100 && c->rq->expect_continue && c->http_minor == 1) {
			c->rq->expect_continue = 0;
			evbuffer_add(out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
		}
		evbuffer_drain(in, (size_t)r);
	}

	upconn(c)->read_max = CONN_READ_MAX;
	exchange_head_received(&c->rq->ex);
	if (proxy_retry_status(c, resp))
		return -1;
	/* What was kept for another try is no longer needed. */
	proxy_drop_replay(c);
	c->rq->status = resp->status;
	if ((c->rq->head_request && !c->rq->head_as_get) || resp->status == 204 || resp->status == 304)
		c->rq->resp_mode = BODY_NONE;
	else if (resp->framing.chunked) {
		c->rq->resp_mode = BODY_CHUNKED;
		http_chunked_init(&c->rq->resp_chunk);
	} else if (resp->framing.content_length >= 0) {
		c->rq->resp_mode = resp->framing.content_length ? BODY_LENGTH : BODY_NONE;
		c->rq->resp_left = (uint64_t)resp->framing.content_length;
	} else {
		c->rq->resp_mode = BODY_UNTIL_CLOSE;
	}
	c->rq->up_close = resp->framing.conn_close || c->rq->resp_mode == BODY_UNTIL_CLOSE ||
	    (resp->version_minor == 0 && !resp->framing.conn_keepalive);
	c->rq->resp_dechunk = c->rq->resp_mode == BODY_CHUNKED && c->http_minor == 0;
	if (c->rq->resp_mode == BODY_UNTIL_CLOSE || c->rq->resp_dechunk || c->w->draining)
		c->keepalive = 0;

	/* A forwarded JSON-RPC call: a 2xx JSON answer streams, any other is judged whole. */
	if (c->rq->rpc != NULL &&
	    !jsonrpc_route_streams(c->rq->rpc, resp, c->rq->resp_mode != BODY_NONE))
		return proxy_jsonrpc_hold_answer(c, (size_t)r);
	if (proxy_has_response_ops(c->rq->route)) {
		int collect = proxy_wants_body(c, resp);
		if (collect < 0)
			return -1;
		/* Envelope ops: keep the head, collect the body, answer when it is all here. */
		if (collect)
			return proxy_hold_response(c, (size_t)r);
	}
	if (resp->framing.chunked && !c->rq->resp_dechunk && resp->status != 204 &&
	    resp->status != 304)
		proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
	else if (resp->framing.content_length >= 0 && !resp->framing.chunked &&
	    resp->status != 204)
		proxy_write_response_head(c, resp, OUT_LENGTH,
		    (uint64_t)resp->framing.content_length, NULL);
	else
		proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
	evbuffer_drain(in, (size_t)r);
	c->rq->resp_head_seen = 1;
	if (c->rq->head_as_get)
		proxy_skip_body(c);
	return 0;
}

/* A HEAD asked as GET has its head out: the body is not read, nor the connection used again. */
static void
proxy_skip_body(struct client *c)
{
	c->rq->resp_mode = BODY_NONE;
	c->rq->up_close = 1;
}

/* Send n bytes of a body we hold to the client, or drop them for a HEAD request. */
static void
proxy_send_body(struct client *c, struct evbuffer *body, size_t n)
{
	if (c->rq->head_request)
		evbuffer_drain(body, n);
	else
		proxy_move(c, body, c->conn.out, n);
}

/* Move up to n bytes of the upstream input to the client. */
static void
proxy_move(struct client *c, struct evbuffer *in, struct evbuffer *out, size_t n)
{
	int moved = evbuffer_remove_buffer(in, out, n);

	if (moved > 0)
		c->rq->bytes_sent += (uint64_t)moved;
}

/* Chunked passthrough: forward framing and payload as they are, stopping at the message end;
 * for HTTP/1.0 clients, forward the payload only. Returns 1 at the end, -1 on bad framing. */
static int
proxy_forward_chunked(struct client *c, struct evbuffer *in, struct evbuffer *out)
{
	struct evbuffer_iovec vec;
	size_t consumed, off, dlen;
	int r;

	while (evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
		r = http_chunked_feed(&c->rq->resp_chunk, vec.iov_base, vec.iov_len, &consumed, &off,
		    &dlen);
		if (r == HTTP_CHUNKED_ERROR)
			return -1;
		if (!c->rq->resp_dechunk) {
			proxy_move(c, in, out, consumed);
		} else if (r == HTTP_CHUNKED_DATA) {
			evbuffer_drain(in, off);
			if (c->rq->resp_rechunk)
				c->rq->bytes_sent += (uint64_t)evbuffer_add_printf(out, "%zx\r\n", dlen);
			proxy_move(c, in, out, dlen);
			if (c->rq->resp_rechunk)
				c->rq->bytes_sent += evbuffer_add(out, "\r\n", 2) == 0 ? 2 : 0;
			evbuffer_drain(in, consumed - off - dlen);
		} else {
			evbuffer_drain(in, consumed);
		}
		if (r == HTTP_CHUNKED_DONE) {
			if (c->rq->resp_rechunk)
				c->rq->bytes_sent += evbuffer_add(out, "0\r\n\r\n", 5) == 0 ? 5 : 0;
			return 1;
		}
	}
	return 0;
}

static void
proxy_forward_response_body(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	struct evbuffer *out = c->conn.out;
	size_t len = evbuffer_get_length(in), n;
	int done = 0, r;

	switch (c->rq->resp_mode) {
	case BODY_NONE:
		done = 1;
		break;
	case BODY_LENGTH:
		n = len < c->rq->resp_left ? len : (size_t)c->rq->resp_left;
		proxy_move(c, in, out, n);
		c->rq->resp_left -= n;
		done = c->rq->resp_left == 0;
		break;
	case BODY_CHUNKED:
		r = proxy_forward_chunked(c, in, out);
		if (r < 0) {
			log_warnx("invalid chunked framing from upstream %s (request %s)",
			    proxy_server(c)->addr.text, c->rq->request_id);
			exchange_verdict(&c->rq->ex, FAIL_INVALID);
			client_error(c, GW_UPSTREAM_INVALID, NULL, 1);
			return;
		}
		done = r == 1;
		break;
	case BODY_UNTIL_CLOSE:
		proxy_move(c, in, out, len);
		break;
	}
	if (done) {
		if (evbuffer_get_length(in) != 0)
			c->rq->up_close = 1;        /* bytes past the response: never reuse */
		client_request_end(c);
		return;
	}
	if (evbuffer_get_length(out) > FLOW_HIGH && !c->up_paused) {
		c->up_paused = 1;
		conn_read_stop(upconn(c));
		conn_notify_drained(&c->conn, 1, FLOW_LOW);
	}
}

/* The collected body outgrew limits.max_body: fail, or stream it on untouched. */
static void
proxy_body_overflow(struct client *c)
{
	struct http_response *resp = &c->w->resp;
	size_t hl = evbuffer_get_length(c->rq->resp_head), n = evbuffer_get_length(c->rq->body);

	if (c->rq->rpc != NULL) {
		proxy_jsonrpc_too_large(c);
		return;
	}
	log_warnx("route %s: response body exceeds limits.max_body (request %s)", c->rq->route->name,
	    c->rq->request_id);
	if (proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT, GW_UPSTREAM_INVALID,
	    "upstream response body exceeds limits.max_body", 0))
		return;
	http_parse_response((const char *)evbuffer_pullup(c->rq->resp_head, (ev_ssize_t)hl), hl, resp);
	c->rq->resp_buffering = 0;
	if (c->rq->head_as_get) {
		/* The head GET would get: chunked for an HTTP/1.1 client, else until close. */
		if (c->rq->resp_mode == BODY_CHUNKED && c->http_minor == 1) {
			proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
		} else {
			c->keepalive = 0;
			proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
		}
		evbuffer_drain(c->rq->body, n);
		proxy_skip_body(c);
	} else if (c->rq->resp_mode == BODY_CHUNKED && c->http_minor == 1) {
		/* What was collected is de-chunked: send it as one chunk, then re-chunk the rest. */
		c->rq->resp_rechunk = 1;
		proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
		c->rq->bytes_sent += (uint64_t)evbuffer_add_printf(c->conn.out, "%zx\r\n", n);
		proxy_move(c, c->rq->body, c->conn.out, n);
		evbuffer_add(c->conn.out, "\r\n", 2);
		c->rq->bytes_sent += 2;
	} else {
		c->keepalive = 0;
		proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
		proxy_move(c, c->rq->body, c->conn.out, n);
	}
	proxy_forward_response_body(c);
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
	size_t hl = evbuffer_get_length(c->rq->resp_head);
	enum body_coding coding;
	char msg[256];
	int rc;

	if (c->rq->rpc != NULL) {
		proxy_jsonrpc_judge(c);
		return;
	}
	http_parse_response((const char *)evbuffer_pullup(c->rq->resp_head, (ev_ssize_t)hl), hl, resp);
	proxy_vars(c, proxy_prog_vars(c->rq->resp_prog), &vars, &tls_text);
	vars.status = resp->status;     /* for when: { status: ... } */
	if (body_needs_headers(c->rq->resp_prog))
		proxy_kept_request_headers(c, &vars);
	c->rq->resp_buffering = 0;
	coding = body_content_coding(resp->headers, resp->nheaders);
	if (c->rq->resp_block != NULL)
		rc = body_apply_block(w->bodies, cfg, c->rq->route, c->rq->resp_prog, coding,
		    c->rq->resp_block, c->rq->resp_block_len, &vars, w->rewritten, &res);
	else if (evbuffer_get_length(c->rq->body) != 0 || c->rq->route->validate == VALIDATE_FULL)
		rc = body_apply(w->bodies, cfg, c->rq->route, c->rq->resp_prog, coding, c->rq->body, &vars,
		    w->rewritten, &res);
	else
		rc = 1;
	if (rc == 1) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		metrics_envelope(w, c->rq->route, METRICS_RESPONSE, METRICS_PASSED, METRICS_REASON_EMPTY);
		proxy_write_response_head(c, resp, OUT_LENGTH, 0, NULL);
	} else if (rc < 0) {
		snprintf(msg, sizeof(msg), "response body not rewritten: %s", res.error);
		log_warnx("route %s: %s (request %s)", c->rq->route->name, msg, c->rq->request_id);
		evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
		if (proxy_unrewritten(c, METRICS_RESPONSE, proxy_unrewritten_reason(&res),
		    GW_UPSTREAM_INVALID, msg, 0))
			return;
		/* pass: the upstream's status and bytes, untouched */
		if (c->rq->resp_block != NULL)
			body_block_add_to(c->rq->body, c->rq->resp_block, c->rq->resp_block_len);
		proxy_write_response_head(c, resp, OUT_LENGTH, evbuffer_get_length(c->rq->body), NULL);
		proxy_send_body(c, c->rq->body, evbuffer_get_length(c->rq->body));
	} else {
		metrics_envelope(w, c->rq->route, METRICS_RESPONSE, METRICS_APPLIED, METRICS_REASON_NONE);
		metrics_bytes(w, res.spliced, res.copied);
		if (res.status != 0 && res.status != resp->status) {
			resp->status = res.status;
			resp->reason.len = 0;
		}
		const char *extra = NULL;
		if (res.inflated)
			proxy_remove_header(resp->headers, &resp->nheaders, "content-encoding");
		if (c->rq->accept_gzip && !res.inflated &&
		    body_content_coding(resp->headers, resp->nheaders) != BODY_CODING_IDENTITY)
			c->rq->accept_gzip = 0;     /* already encoded: leave it */
		if (c->rq->accept_gzip && body_gzip(w->bodies, w->rewritten) == 0)
			extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
		proxy_write_response_head(c, resp, OUT_LENGTH, evbuffer_get_length(w->rewritten),
		    extra);
		proxy_send_body(c, w->rewritten, evbuffer_get_length(w->rewritten));
	}
	if (c->rq->ex.uc != NULL && evbuffer_get_length(upconn(c)->in) != 0)
		c->rq->up_close = 1;
	client_request_end(c);
}

/* A Content-Length body goes into one block: what came with the head is copied, the rest
 * is read by the socket layer straight into place. */
static void
proxy_collect_into_block(struct client *c)
{
	int sinking = c->rq->resp_sinking;

	body_block_fill(c->rq->resp_block, c->rq->resp_block_len, &c->rq->resp_left, &sinking, upconn(c));
	c->rq->resp_sinking = sinking != 0;
}

/* Collect the response body for envelope ops, de-chunked, up to limits.max_body. */
static void
proxy_collect_response_body(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	struct evbuffer_iovec vec;
	size_t n;
	int r, done = 0;

	switch (c->rq->resp_mode) {
	case BODY_LENGTH:
		if (c->rq->resp_block != NULL) {
			proxy_collect_into_block(c);
			done = c->rq->resp_left == 0;
			break;
		}
		n = evbuffer_get_length(in);
		if (n > c->rq->resp_left)
			n = (size_t)c->rq->resp_left;
		evbuffer_remove_buffer(in, c->rq->body, n);
		c->rq->resp_left -= n;
		done = c->rq->resp_left == 0;
		break;
	case BODY_CHUNKED:
		while (!done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = proxy_dechunk(&c->rq->resp_chunk, in, vec, c->rq->body);
			if (r == HTTP_CHUNKED_ERROR) {
				proxy_invalid_response(c);
				return;
			}
			done = r == HTTP_CHUNKED_DONE;
			if (!done && evbuffer_get_length(c->rq->body) > client_cfg(c)->limits.max_body)
				break;
		}
		break;
	default:
		evbuffer_remove_buffer(in, c->rq->body, evbuffer_get_length(in));
		break;
	}
	if (!done && evbuffer_get_length(c->rq->body) > client_cfg(c)->limits.max_body) {
		proxy_body_overflow(c);
		return;
	}
	if (done)
		proxy_respond_rewritten(c);
}

/* --- the upstream side of a try --------------------------------------------------------- */

static void
proxy_invalid_response(struct client *c)
{
	log_warnx("malformed response from upstream %s server %s (request %s)",
	    c->rq->upool->cfg->name, proxy_server(c)->addr.text, c->rq->request_id);
	proxy_try_error(c, GW_UPSTREAM_INVALID, "malformed response from upstream %s%s", "");
	if (c->rq->resp_head_seen) {
		exchange_verdict(&c->rq->ex, FAIL_INVALID);
		client_error(c, c->rq->last_error, c->rq->last_message, c->rq->resp_started);
		return;
	}
	proxy_next_try(c, FAIL_INVALID, UPSTREAM_RETRY_INVALID);
}

/* A pooled connection may have been closed by the server while it sat idle, the request
 * crossing the close: no server failure.  As nginx, the request gets one extra try on a new
 * connection when a reset may be retried, which uses up no retries; else its error. */
static int
proxy_stale_retry(struct client *c)
{
	if (!c->rq->ex.uc->reused || c->rq->stale_retried || c->rq->resp_head_seen ||
	    evbuffer_get_length(upconn(c)->in) != 0)
		return 0;
	if (!proxy_may_retry(c, FAIL_RESET, UPSTREAM_RETRY_STALE)) {
		log_warnx("upstream %s server %s closed a pooled connection before answering "
		    "(request %s)", c->rq->upool->cfg->name, proxy_server(c)->addr.text,
		    c->rq->request_id);
		proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE,
		    "upstream %s closed the connection before answering%s", "");
		client_error(c, c->rq->last_error, c->rq->last_message, 0);
		return 1;
	}
	c->rq->stale_retried = 1;
	exchange_end(&c->rq->ex, 0);
	if (c->rq->noted)
		upstream_server_unref(c->rq->tried[--c->rq->ntried]);  /* the same server may take it */
	proxy_try(c, 1);
	return 1;
}

/* The upstream connection ended, failed or timed out while active. */
static void
proxy_upstream_failed(struct client *c, int what)
{
	const char *addr = proxy_server(c)->addr.text;
	const char *name = c->rq->upool->cfg->name;

	if (c->rq->resp_buffering && c->rq->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		c->rq->up_close = 1;
		proxy_collect_response_body(c);
		if (c->state == CLIENT_BUSY && c->rq->resp_buffering)
			proxy_respond_rewritten(c);
		return;
	}
	if (c->rq->resp_started && c->rq->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		proxy_forward_response_body(c);
		if (c->state == CLIENT_BUSY && c->rq->ex.uc != NULL) {
			c->rq->up_close = 1;
			client_request_end(c);
		}
		return;
	}
	if (c->rq->resp_head_seen) {
		/* Part of the answer is gone already (to the client, or into ops): no retry. */
		log_warnx("upstream %s server %s failed in the middle of a response (request %s)",
		    name, addr, c->rq->request_id);
		exchange_verdict(&c->rq->ex, what & CONN_TIMEOUT ? FAIL_TIMEOUT : FAIL_RESET);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, NULL, c->rq->resp_started);
		return;
	}
	if (upconn(c)->tls_failed) {
		/* A TLS 1.3 server refuses a client certificate after our side of the handshake:
		 * the request never reached the application, and may go elsewhere.  But its bytes
		 * went out: one that is not safe to send twice goes to no other server, whatever
		 * the alert was for. */
		char reason[160];
		tls_conn_error(upconn(c), reason, sizeof(reason));
		log_warnx("TLS with upstream %s server %s failed: %s (request %s)", name, addr,
		    reason, c->rq->request_id);
		proxy_try_error(c, GW_UPSTREAM_TLS, "TLS handshake with upstream %s failed: %s",
		    reason);
		if (c->rq->sent && !c->rq->idempotent) {
			exchange_verdict(&c->rq->ex, FAIL_CONNECT);
			client_error(c, c->rq->last_error, c->rq->last_message, 0);
			return;
		}
		proxy_next_try(c, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
		return;
	}
	if (!(what & CONN_TIMEOUT) && proxy_stale_retry(c))
		return;
	if (what & CONN_TIMEOUT) {
		log_warnx("upstream %s server %s did not answer in time (request %s)", name, addr,
		    c->rq->request_id);
		proxy_try_error(c, GW_UPSTREAM_TIMEOUT, "upstream %s did not answer in time%s", "");
		proxy_next_try(c, FAIL_TIMEOUT, UPSTREAM_RETRY_TIMEOUT);
		return;
	}
	log_warnx("upstream %s server %s closed the connection before answering (request %s)",
	    name, addr, c->rq->request_id);
	proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE,
	    "upstream %s closed the connection before answering%s", "");
	proxy_next_try(c, FAIL_RESET, UPSTREAM_RETRY_RESET);
}

static void
upstream_on_input(struct client *c)
{
	struct upconn *uc = c->rq->ex.uc;

	if (c->rq->resp_head_seen || proxy_read_response_head(c) == 0) {
		if (c->state != CLIENT_BUSY || c->rq->ex.uc != uc)
			return;
		if (c->rq->resp_buffering)
			proxy_collect_response_body(c);
		else if (c->rq->resp_started)
			proxy_forward_response_body(c);
	}
	/* Still waiting for the rest of this answer: a reset may have come with the data. */
	if (c->state == CLIENT_BUSY && c->rq->ex.uc == uc && uc != NULL)
		conn_read_again(upconn(c));
}

static void
upstream_on_drained(struct client *c)
{
	if (c->client_paused) {
		c->client_paused = 0;
		conn_read_start(&c->conn);
		if (evbuffer_get_length(c->conn.in) != 0)
			proxy_forward_request_body(c);
	}
}

static void
proxy_exchange_cb(struct exchange *ex, int what, void *arg)
{
	struct client *c = arg;
	struct upconn *uc;

	(void)ex;
	proxy_note_server(c);
	if (what & EXCHANGE_FAILED) {
		proxy_connect_failed(c);
		proxy_flush(c);
		return;
	}
	if (what & EXCHANGE_READY)
		proxy_send_request(c);
	/* Each step may end the try and hand the connection back, start another, or close the
	 * client: go on only while it is the same connection. */
	uc = c->rq->ex.uc;
	if ((what & CONN_READ) && c->state == CLIENT_BUSY && uc != NULL)
		upstream_on_input(c);
	if ((what & CONN_DRAINED) && c->state == CLIENT_BUSY && uc != NULL && c->rq->ex.uc == uc)
		upstream_on_drained(c);
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && c->state == CLIENT_BUSY &&
	    uc != NULL && c->rq->ex.uc == uc)
		proxy_upstream_failed(c, what);
	proxy_flush(c);
}

/* --- aggregated routes ------------------------------------------------------------------ */

/* The merged answer (or the gateway error) of an aggregated route. */
static void
proxy_aggregate_done_cb(const struct aggregate_answer *ans, void *arg)
{
	struct client *c = arg;
	struct http_response *resp = &c->w->resp;
	char extra[96];
	size_t len;

	if (ans->status == 0) {
		client_error(c, ans->error, ans->message, 0);
		proxy_flush(c);
		return;
	}
	memset(resp, 0, sizeof(*resp));
	resp->status = ans->status;
	resp->nheaders = 1;
	resp->headers[0].name = (struct http_str){ "Content-Type", 12 };
	resp->headers[0].value = (struct http_str){ "application/json", 16 };
	/* The client can always tell a complete answer from a partial one. */
	snprintf(extra, sizeof(extra), "%s%s", ans->partial ? "X-Jsongate-Partial: true\r\n" : "",
	    c->rq->accept_gzip && body_gzip(c->w->bodies, ans->body) == 0 ?
	    "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n" : "");
	len = evbuffer_get_length(ans->body);
	proxy_write_response_head(c, resp, OUT_LENGTH, len, extra);
	if (c->rq->head_request)
		evbuffer_drain(ans->body, len);
	else
		proxy_move(c, ans->body, c->conn.out, len);
	client_request_end(c);
	proxy_flush(c);
}

/* The request goes to the route's backends, not upstream: nothing of it is forwarded but
 * what the backends' configuration takes from it. */
static void
proxy_aggregate(struct client *c, const struct http_request *req, size_t head_len)
{
	struct aggregate_request ar = {
		req, (const char *)evbuffer_pullup(c->conn.in, (ev_ssize_t)head_len), head_len,
		c->rq->request_id, c->addr, c->conn.ssl != NULL, &c->conn, &c->rq->pathv
	};

	/* A request body is not read: the connection closes after the answer. */
	if (!c->rq->req_done)
		c->keepalive = 0;
	c->rq->accept_gzip = c->rq->route->compress == COMPRESS_GZIP &&
	    body_accepts_gzip(req->headers, req->nheaders);
	conn_read_stop(&c->conn);
	conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
	c->rq->agg = aggregate_start(c->rq->wr, c->rq->route, &ar, proxy_aggregate_done_cb, c);
	evbuffer_drain(c->conn.in, head_len);
	if (c->rq->agg == NULL)
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
}

static void
proxy_end_aggregate(struct client *c)
{
	if (c->rq->agg != NULL) {
		aggregate_end(c->rq->agg);
		c->rq->agg = NULL;
	}
}

/* --- JSON-RPC routes ----------------------------------------------------------------------- */

/* Answer with a body the gateway made: 200 with the JSON in body, or 204 with none. */
static void
proxy_jsonrpc_answer(struct client *c, int status, struct evbuffer *body)
{
	struct http_response *resp = &c->w->resp;
	size_t len = evbuffer_get_length(body);
	const char *extra = NULL;

	memset(resp, 0, sizeof(*resp));
	resp->status = status;
	if (status == 204) {
		proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
	} else {
		resp->nheaders = 1;
		resp->headers[0].name = (struct http_str){ "Content-Type", 12 };
		resp->headers[0].value = (struct http_str){ "application/json", 16 };
		if (c->rq->accept_gzip && body_gzip(c->w->bodies, body) == 0) {
			extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
			len = evbuffer_get_length(body);
		}
		proxy_write_response_head(c, resp, OUT_LENGTH, len, extra);
		proxy_move(c, body, c->conn.out, len);
	}
	client_request_end(c);
}

/* The answer of a batch (or an error the gateway gives itself) is in. */
static void
proxy_jsonrpc_done_cb(const struct jsonrpc_answer *ans, void *arg)
{
	struct client *c = arg;

	if (ans->status == 0)
		client_error(c, ans->error, ans->message, 0);
	else
		proxy_jsonrpc_answer(c, ans->status, ans->body);
	proxy_flush(c);
}

/* A forwarded call failed before an answer came: 1 when it is answered as a batch element
 * would be (its JSON-RPC error, or 204 for a notification), 0 when the gateway error goes
 * out instead. */
static int
proxy_jsonrpc_failed(struct client *c, enum gateway_error err, const char *message)
{
	struct evbuffer *out = c->w->rewritten;
	int status;

	evbuffer_drain(out, evbuffer_get_length(out));
	if ((status = jsonrpc_route_failed(c->rq->rpc, err, message, out)) == 0)
		return 0;
	proxy_jsonrpc_answer(c, status, out);
	return 1;
}

/* A forwarded call's answer that is judged before the client gets any of it: read whole,
 * up to limits.max_body.  0 while it is read, -1 once answered. */
static int
proxy_jsonrpc_hold_answer(struct client *c, size_t head_len)
{
	if (c->rq->resp_mode == BODY_LENGTH && c->rq->resp_left > client_cfg(c)->limits.max_body) {
		proxy_jsonrpc_too_large(c);
		return -1;
	}
	if (proxy_hold_response(c, head_len) < 0)
		return -1;
	if (c->rq->resp_mode != BODY_NONE)
		return 0;
	proxy_jsonrpc_judge(c);
	return -1;
}

/* The answer to judge is larger than limits.max_body: the call fails as a batch's would. */
static void
proxy_jsonrpc_too_large(struct client *c)
{
	proxy_try_error(c, GW_UPSTREAM_INVALID, "the answer of upstream %s is over its size "
	    "limit%s", "");
	client_error(c, c->rq->last_error, c->rq->last_message, 0);
}

/* The whole answer of a forwarded call is in: it goes as the upstream sent it when it answers
 * the call, else the call gets what a batch element would. */
static void
proxy_jsonrpc_judge(struct client *c)
{
	struct worker *w = c->w;
	struct http_response *resp = &w->resp;
	struct evbuffer *out = w->rewritten;
	struct body_block *b = c->rq->resp_block;
	size_t hl = evbuffer_get_length(c->rq->resp_head), len = c->rq->resp_block_len;
	int status, err;

	http_parse_response((const char *)evbuffer_pullup(c->rq->resp_head, (ev_ssize_t)hl), hl,
	    resp);
	c->rq->resp_buffering = 0;
	if (b != NULL) {
		body_block_ref(b);
	} else if ((len = evbuffer_get_length(c->rq->body)) != 0 &&
	    (b = body_block_copy(w->bodies, c->rq->body)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
		return;
	}
	evbuffer_drain(out, evbuffer_get_length(out));
	status = jsonrpc_route_answered(c->rq->rpc, resp->status,
	    body_content_coding(resp->headers, resp->nheaders), b, len, out, &err);
	body_block_release(b);
	if (c->rq->ex.uc != NULL && evbuffer_get_length(upconn(c)->in) != 0)
		c->rq->up_close = 1;        /* bytes past the answer: never reuse */
	if (status != 0) {
		c->rq->gw_error = err;
		proxy_jsonrpc_answer(c, status, out);
		return;
	}
	if (c->rq->resp_block != NULL)
		body_block_add_to(c->rq->body, c->rq->resp_block, c->rq->resp_block_len);
	len = evbuffer_get_length(c->rq->body);
	proxy_write_response_head(c, resp, OUT_LENGTH, len, NULL);
	proxy_send_body(c, c->rq->body, len);
	client_request_end(c);
}

/* The head of a request to up for a group of calls: the client's, as a proxied request's,
 * its body's framing and coding left to the caller. */
static int
proxy_jsonrpc_head_cb(void *arg, const struct config_upstream *up, struct evbuffer *out)
{
	struct client *c = arg;
	struct worker *w = c->w;
	struct http_request *req = &w->req;
	struct headers_forward fw;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	int n;

	/* The groups are sent identity-coded, their answers asked for as identity. */
	proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
	proxy_remove_header(req->headers, &req->nheaders, "accept-encoding");
	proxy_remove_header(req->headers, &req->nheaders, "expect");
	if ((n = proxy_rewrite_target(c, req)) < 0)
		return -1;
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = c->addr;
	fw.tls = c->conn.ssl != NULL;
	fw.request_id.p = c->rq->request_id;
	fw.request_id.len = c->rq->request_id_len;
	fw.host_override = up->host_header;
	fw.target.p = w->target_buf;
	fw.target.len = (size_t)n;
	fw.ops = c->rq->route->request_headers;
	if (fw.ops != NULL) {
		proxy_vars(c, fw.ops->vars, &vars, &tls_text);
		body_vars_headers(&vars, req);
		fw.vars = &vars;
	}
	return headers_request_out(out, req, &fw);
}

/* The body is in: split it, and forward a single call or wait for the answer. */
static void
proxy_jsonrpc_start(struct client *c, struct http_request *req)
{
	const struct config *cfg = client_cfg(c);
	const struct config_upstream *up;
	struct jsonrpc_request jr = {
		req, c->rq->request_id, c->addr, c->rq->req_block, c->rq->req_block_len,
		body_content_coding(req->headers, req->nheaders),
		c->rq->idempotent, proxy_jsonrpc_head_cb, c
	};

	if (jr.coding == BODY_CODING_OTHER) {
		client_error(c, GW_UNSUPPORTED_MEDIA_TYPE, NULL, 0);
		return;
	}
	c->rq->rpc = jsonrpc_route_start(c->rq->wr, c->rq->route, &jr, proxy_jsonrpc_done_cb, c, &up);
	if (c->rq->rpc == NULL) {
		client_error(c, GW_UPSTREAM_UNAVAILABLE, "out of memory", 0);
		return;
	}
	if (up == NULL) {
		proxy_drop_request_block(c);
		return;
	}
	/* One call: it goes to its upstream as it came, its answer back as it comes. */
	c->rq->upool = &c->rq->wr->pools[up - cfg->upstreams];
	client_hash_key(c, req);
	if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	body_block_add_to(c->rq->req_body, c->rq->req_block, c->rq->req_block_len);
	c->rq->req_out_len = (int64_t)c->rq->req_block_len;
	proxy_drop_request_block(c);
	if (proxy_build_upstream_head(c, req) < 0) {
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	proxy_send_collected(c);
}

/* A JSON-RPC route takes POSTed bodies, read whole (up to limits.max_body) before anything
 * is sent. */
static void
proxy_jsonrpc(struct client *c, const struct http_request *req, size_t head_len)
{
	const struct config *cfg = client_cfg(c);

	if (req->method_bit != METHOD_POST) {
		evbuffer_drain(c->conn.in, head_len);
		client_error(c, GW_METHOD_NOT_ALLOWED, "a JSON-RPC route takes POST requests", 0);
		return;
	}
	if (c->rq->req_mode == BODY_LENGTH && c->rq->req_left > cfg->limits.max_body) {
		evbuffer_drain(c->conn.in, head_len);
		client_error(c, GW_PAYLOAD_TOO_LARGE, NULL, 1);
		return;
	}
	if (proxy_keep_request_head(c, head_len) < 0) {
		evbuffer_drain(c->conn.in, head_len);
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	c->rq->accept_gzip = c->rq->route->compress == COMPRESS_GZIP &&
	    body_accepts_gzip(req->headers, req->nheaders);
	evbuffer_drain(c->conn.in, head_len);
	proxy_start_request_collect(c);
}

static void
proxy_end_jsonrpc(struct client *c)
{
	if (c->rq->rpc != NULL) {
		jsonrpc_route_end(c->rq->rpc);
		c->rq->rpc = NULL;
	}
}

/* --- the client side -------------------------------------------------------------------- */

static void
client_on_input(struct client *c)
{
	switch (c->state) {
	case CLIENT_IDLE:
		client_process(c);
		break;
	case CLIENT_BUSY:
		if (c->rq->scan.waiting) {
			client_scan_more(c);
		} else if (c->rq->req_buffering) {
			proxy_collect_request_body(c);
		} else if (c->rq->keep_chunked) {
			proxy_keep_chunked(c);
		} else if (c->rq->buffer_body && !c->rq->req_done) {
			/* The body is kept whole: once it is all here, it goes with the head. */
			if (evbuffer_get_length(c->conn.in) < c->rq->replay_len)
				break;
			c->rq->req_done = 1;
			conn_read_stop(&c->conn);
			if (c->rq->ex.stage == EXCHANGE_ACTIVE && c->rq->ex.uc != NULL)
				proxy_send_request(c);
		} else if (!c->rq->req_done && c->rq->ex.uc != NULL && c->rq->sent) {
			proxy_forward_request_body(c);
		} else if (c->rq->req_done) {
			conn_read_stop(&c->conn);   /* pipelined: wait our turn */
		}
		break;
	case CLIENT_CLOSING:
		evbuffer_drain(c->conn.in, evbuffer_get_length(c->conn.in));
		break;
	case CLIENT_DEAD:
		break;
	}
}

static void
client_on_drained(struct client *c)
{
	if (c->state == CLIENT_CLOSING) {
		if (evbuffer_get_length(c->conn.out) == 0 && !c->lingering)
			client_close_now(c);
		return;
	}
	if (c->out_paused) {
		client_reader_caught_up(c);
		return;
	}
	if (c->up_paused && c->rq != NULL && c->rq->ex.uc != NULL) {
		c->up_paused = 0;
		conn_read_start(upconn(c));
		proxy_forward_response_body(c);
	}
}

/* The client closed its side or the connection failed. */
static void
client_on_close(struct client *c, int what)
{
	/* A half-close after a complete request: answer it (and any pipelined ones), then close. */
	if (what == CONN_EOF && c->state == CLIENT_BUSY && c->rq->req_done)
		return;
	if (what == CONN_EOF && c->state == CLIENT_CLOSING && !c->lingering)
		return;         /* still flushing our last response */
	if (what == CONN_EOF && c->state == CLIENT_IDLE && (c->out_paused || c->resume_queued))
		return;         /* its pipeline is still being answered */
	if (c->state == CLIENT_BUSY) {
		/* Logged like nginx: 499 before the response started, else its status, cut short. */
		if (!c->rq->resp_started)
			c->rq->status = 499;
		client_log(c);
	}
	client_free(c, what & CONN_TIMEOUT ? CLIENT_CLOSE_CLIENT_TIMEOUT :
	    what & CONN_ERROR ? CLIENT_CLOSE_CLIENT_ERROR : CLIENT_CLOSE_CLIENT_CLOSED);
}

static void
client_conn_cb(struct conn *conn, int what, void *arg)
{
	struct client *c = arg;

	(void)conn;
	if (what & CONN_READ)
		client_on_input(c);
	if ((what & CONN_DRAINED) && c->state != CLIENT_DEAD)
		client_on_drained(c);
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && c->state != CLIENT_DEAD)
		client_on_close(c, what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT));
	proxy_flush(c);
}

/* Idle keep-alive or a lingering close: close quietly, like nginx.  A head that began but
 * did not arrive in time gets 408 first; a connection that sent nothing, nothing. */
static void
client_timer_cb(struct deadline *d, void *arg)
{
	struct client *c = arg;

	(void)d;
	if (c->timer_mode != TIMER_HEADER || c->state != CLIENT_IDLE ||
	    evbuffer_get_length(c->conn.in) == 0) {
		client_free(c, c->timer_mode == TIMER_KEEPALIVE ? CLIENT_CLOSE_KEEPALIVE_TIMEOUT :
		    c->timer_mode == TIMER_HEADER ? CLIENT_CLOSE_HEADER_TIMEOUT :
		    CLIENT_CLOSE_NONE);
		return;
	}
	c->timer_mode = TIMER_OFF;
	if (client_request_begin(c) < 0)
		return;
	client_refuse_head(c, GW_REQUEST_TIMEOUT);
	proxy_flush(c);
}

/* --- accept, drain ---------------------------------------------------------------------- */

int
proxy_accept(struct worker *w, int fd, struct sockaddr *sa, int salen,
    struct tls_server *tls)
{
	const struct config *cfg = w->cur->rt->cfg;
	struct client *c;

	(void)salen;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return -1;
	}
	c->w = w;
	c->close_reason = CLIENT_CLOSE_NONE;
	deadline_init(&c->timer, w->timers, client_timer_cb, c);
	if (conn_init(&c->conn, w->timers, fd, client_conn_cb, c) < 0) {
		close(fd);
		free(c);
		return -1;
	}
	if (tls != NULL && tls_accept(&c->conn, tls) < 0) {
		conn_close(&c->conn);
		free(c);
		return -1;
	}
	if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, c->addr,
		    sizeof(c->addr));
	else
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, c->addr, sizeof(c->addr));
	LIST_INSERT_HEAD(&w->clients, c, entry);
	metrics_client(w, 1);
	w->nclients++;
	c->conn.read_max = FLOW_HIGH;
	client_set_state(c, CLIENT_IDLE);
	client_timer_set(c, TIMER_HEADER, cfg->timeouts.client_header);
	conn_read_start(&c->conn);
	return 0;
}

void
proxy_drain_idle(struct worker *w)
{
	struct client *c, *next;

	for (c = LIST_FIRST(&w->clients); c != NULL; c = next) {
		next = LIST_NEXT(c, entry);
		if (c->state == CLIENT_IDLE &&
		    evbuffer_get_length(c->conn.in) == 0)
			client_free(c, CLIENT_CLOSE_SHUTDOWN);
	}
}

void
proxy_close_all(struct worker *w)
{
	struct client *c;

	while ((c = LIST_FIRST(&w->clients)) != NULL)
		client_free(c, CLIENT_CLOSE_SHUTDOWN);
}
