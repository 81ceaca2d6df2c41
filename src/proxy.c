#include "config.h"
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "aggregate.h"
#include "body.h"
#include "conn.h"
#include "errors.h"
#include "exchange.h"
#include "header_ops.h"
#include "headers.h"
#include "http.h"
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

enum client_state {
	CLIENT_IDLE,                    /* waiting for (the rest of) a request head */
	CLIENT_BUSY,                    /* a request is being proxied */
	CLIENT_CLOSING,                 /* flushing the last bytes, then close */
	CLIENT_DEAD                     /* closed; memory freed from the loop */
};

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

enum timer_mode { TIMER_OFF, TIMER_KEEPALIVE, TIMER_HEADER, TIMER_LINGER };

/* A client connection (the downstream side), the request in progress on it, and that
 * request's tries with upstream servers. */
struct client {
	LIST_ENTRY(client) entry;
	struct worker *w;
	struct conn conn;
	struct deadline timer;          /* keep-alive, header and lingering-close limits */
	enum timer_mode timer_mode;
	enum client_state state;
	char addr[INET6_ADDRSTRLEN];
	int http_minor;
	unsigned keepalive : 1;
	unsigned lingering : 1;         /* our side is shut: reading what the client still sends */
	unsigned up_paused : 1;         /* upstream reads stopped: client output is full */
	unsigned client_paused : 1;     /* client reads stopped: upstream output is full */

	/* The request. */
	struct worker_runtime *wr;
	const struct config_route *route;
	struct upstream_pool *upool;
	struct evbuffer *up_head;       /* the head sent upstream, written once for every try */
	struct evbuffer *req_body;      /* the request body to send (request ops), or NULL */
	size_t replay_len;              /* body bytes at the front of the input kept for another
	                                 * try, until the answer starts */
	char hash_key[256];             /* the hash balancing key of this request */
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
	int64_t req_out_len;            /* Content-Length sent upstream instead of the client's, or -1 */
	enum body_mode req_mode;
	uint64_t req_left;
	struct http_chunked req_chunk;
	struct evbuffer *req_copy;      /* the request head, for $header.NAME in response ops */
	struct body_block *req_block;   /* a request body collected for request ops */
	size_t req_block_len;           /* its bytes so far, de-chunked */
	struct route_scan scan;         /* the body's first bytes, read to choose the route */
	struct path_vars pathv;         /* the captures of its route's path template */
	struct aggregate *agg;          /* an aggregated route's backends and merge, or NULL */

	/* Its tries. */
	struct exchange ex;             /* the try in progress */
	struct server_pool *tried[CONFIG_MAX_TRIES];
	size_t ntried;
	unsigned retries;               /* retries of retry_on (not connect failovers) */
	enum gateway_error last_error;  /* what the latest failed try would answer */
	char last_message[384];

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
	struct evbuffer *resp_head;     /* the upstream's head, kept while the body is collected */
	struct evbuffer *body;          /* the collected body */
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
	char method[16];
	char target[512];
	char request_id[130];
	size_t request_id_len;
	char user_agent[128];
	char referer[128];
};

static void client_process(struct client *c);
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
	int fail = c->route->on_error == ON_ERROR_FAIL;

	metrics_envelope(c->w, c->route, direction, fail ? METRICS_FAILED : METRICS_PASSED, why);
	if (!fail)
		return 0;
	/* An answer over our limit or in a coding we do not decode is still a good answer. */
	c->answer_refused = direction == METRICS_RESPONSE &&
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
	return (c->wr != NULL ? c->wr : c->w->cur)->rt->cfg;
}

/* The connection of the try in progress (the caller knows there is one). */
static struct conn *
upconn(struct client *c)
{
	return &c->ex.uc->conn;
}

/* The server of the latest try, or NULL. */
static const struct config_server *
proxy_server(const struct client *c)
{
	return c->ntried != 0 ? c->tried[c->ntried - 1]->srv : NULL;
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

/* Close at once.  The memory goes back from the loop, so callers up the stack may still look
 * at c->state (CLIENT_DEAD) after this. */
static void
client_free(struct client *c)
{
	struct worker *w = c->w;

	if (c->state == CLIENT_DEAD)
		return;
	proxy_drop_block(c);
	exchange_end(&c->ex, 0);
	proxy_forget_tried(c);
	proxy_end_aggregate(c);
	if (c->wr != NULL) {
		worker_runtime_unref(c->wr);
		c->wr = NULL;
	}
	client_set_state(c, CLIENT_DEAD);
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
		exchange_free(&c->ex);
		proxy_free_buffer(c->resp_head);
		proxy_free_buffer(c->body);
		proxy_free_buffer(c->req_copy);
		proxy_free_buffer(c->up_head);
		proxy_free_buffer(c->req_body);
		route_scan_free(&c->scan);
		path_vars_free(&c->pathv);
		free(c);
	}
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
	    (c->req_done && evbuffer_get_length(c->conn.in) == 0 && !c->conn.readable)) {
		client_free(c);
		return;
	}
	c->lingering = 1;
	if (shutdown(c->conn.fd, SHUT_WR) < 0) {
		client_free(c);
		return;
	}
	conn_notify_drained(&c->conn, 0, 0);
	evbuffer_drain(c->conn.in, evbuffer_get_length(c->conn.in));
	client_timer_set(c, TIMER_LINGER, LINGER_TOTAL_MS);
	conn_set_timeouts(&c->conn, LINGER_IDLE_MS, 0);
	conn_read_start(&c->conn);
}

/* Stop reading, send what is queued, then close. */
static void
client_close_after_flush(struct client *c)
{
	client_set_state(c, CLIENT_CLOSING);
	client_timer_set(c, TIMER_OFF, 0);
	conn_read_stop(&c->conn);
	conn_flush(&c->conn);
	if (c->conn.error) {
		client_free(c);
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
	return !c->sent && c->gw_error >= 0 && gateway_errors[c->gw_error].status < 500;
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
	size_t i, len = 0, n = c->ntried;

	if (n > 0 && c->noted && client_refused_unsent(c))
		n--;
	strcpy(buf, "-");
	for (i = 0; i < n && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
		    c->tried[i]->srv->addr.text);
}

static void
client_log(struct client *c)
{
	const struct runtime *rt = (c->wr != NULL ? c->wr : c->w->cur)->rt;
	struct access_entry e;
	struct access_field json[CONFIG_MAX_JSON_FIELDS];
	struct access_field path[CONFIG_MAX_PATH_FIELDS];
	struct timespec now;
	char upstream[256];

	client_now(&now);
	metrics_request(c->w, c->route, client_counted_server(c), c->status,
	    c->answer_refused ? -1 : c->gw_error, &c->start, &now);
	if (rt->access.fd < 0) {
		route_scan_done(&c->scan);
		path_vars_clear(&c->pathv);
		return;
	}
	client_servers_tried(c, upstream, sizeof(upstream));
	e.remote_addr = c->addr;
	e.method = c->method;
	e.path = c->target;
	e.status = c->status;
	e.bytes_sent = c->bytes_sent;
	e.body_bytes_sent = c->bytes_sent - c->head_sent;
	e.upstream = upstream;
	e.route = c->route != NULL ? c->route->name : "-";
	e.duration_ms = (double)(now.tv_sec - c->start.tv_sec) * 1e3 +
	    (double)(now.tv_nsec - c->start.tv_nsec) / 1e6;
	e.request_id = c->request_id;
	e.user_agent = c->user_agent;
	e.referer = c->referer;
	e.http_minor = c->http_minor;
	e.json = json;
	e.njson = route_scan_log(&c->scan, rt->cfg, json);
	e.path_fields = path;
	e.npath = path_vars_log(&c->pathv, rt->cfg, path);
	e.backends = c->agg != NULL ? aggregate_log(c->agg, &e.nbackends) : NULL;
	access_log_write(&rt->access, &e);
	route_scan_done(&c->scan);
	path_vars_clear(&c->pathv);
}

static void
proxy_drop(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_drain(b, evbuffer_get_length(b));
}

/* Let go of the body blocks; the socket layer must not write into them any more. */
static void
proxy_drop_block(struct client *c)
{
	body_block_release(c->req_block);
	c->req_block = NULL;
	if (c->resp_block == NULL)
		return;
	if (c->ex.uc != NULL)
		upconn(c)->sink = NULL;
	c->resp_sinking = 0;
	body_block_release(c->resp_block);
	c->resp_block = NULL;
}

/* The answer started: what was kept for another try can go. */
static void
proxy_drop_replay(struct client *c)
{
	if (c->replay_len != 0) {
		evbuffer_drain(c->conn.in, c->replay_len);
		c->replay_len = 0;
	}
	proxy_drop(c->req_body);
	c->replayable = 0;
}

/* The response is complete (or the request ended in an error): log, reset, go on. */
static void
client_request_end(struct client *c)
{
	struct worker *w = c->w;

	client_log(c);
	/* A body kept for ops goes now, not at the next request: idle clients hold nothing. */
	proxy_drop(c->body);
	proxy_drop(c->resp_head);
	proxy_drop(c->req_copy);
	proxy_drop(c->up_head);
	proxy_drop_block(c);
	if (c->ex.stage != EXCHANGE_IDLE) {
		/* The whole answer came: the server did well (unless its status said otherwise). */
		exchange_verdict(&c->ex, 0);
		exchange_end(&c->ex, !c->up_close && c->req_done && c->sent);
	}
	proxy_drop_replay(c);
	proxy_forget_tried(c);
	proxy_end_aggregate(c);
	if (c->wr != NULL) {
		worker_runtime_unref(c->wr);
		c->wr = NULL;
	}
	c->route = NULL;
	c->upool = NULL;
	if (c->up_paused || c->client_paused)
		conn_notify_drained(&c->conn, 0, 0);
	c->up_paused = c->client_paused = 0;
	/* A request whose body we did not read to the end leaves the stream unframed.  While
	 * stopping, a request pipelined behind this one is still answered (503 shutting_down). */
	if (!c->keepalive || !c->req_done ||
	    (w->draining && evbuffer_get_length(c->conn.in) == 0)) {
		client_close_after_flush(c);
		return;
	}
	client_set_state(c, CLIENT_IDLE);
	conn_set_timeouts(&c->conn, 0, 0);
	client_timer_set(c, TIMER_KEEPALIVE, client_cfg(c)->timeouts.keepalive);
	conn_read_start(&c->conn);
	if (evbuffer_get_length(c->conn.in) != 0)
		client_process(c);
	if (c->state == CLIENT_IDLE && c->conn.eof)
		client_close_after_flush(c);
}

/* Answer with a gateway error; a request that cannot be framed any more closes after. */
static void
client_error(struct client *c, enum gateway_error err, const char *message, int must_close)
{
	struct http_str id = { c->request_id, c->request_id_len };
	enum respond_connection conn;

	c->gw_error = (int)err;
	if (c->resp_started) {
		/* Too late for an error response: cut the connection so the truncation shows. */
		c->keepalive = 0;
		c->up_close = 1;
		c->status = c->status ? c->status : gateway_errors[err].status;
		client_log(c);
		exchange_end(&c->ex, 0);
		client_close_after_flush(c);
		return;
	}
	exchange_end(&c->ex, 0);
	/* A body still in the input unread, or streamed halfway: the stream is unframed. */
	if (must_close || !c->req_done || c->w->draining)
		c->keepalive = 0;
	conn = !c->keepalive ? RESPOND_CONN_CLOSE :
	    c->http_minor == 0 ? RESPOND_CONN_KEEPALIVE : RESPOND_CONN_NONE;
	c->status = gateway_errors[err].status;
	c->bytes_sent += respond_error(c->conn.out, err, message, id, conn, c->head_request,
	    &c->head_sent);
	c->resp_started = 1;
	client_request_end(c);
}

static void
client_body_framing(struct client *c, const struct http_request *req)
{
	if (req->framing.chunked) {
		c->req_mode = BODY_CHUNKED;
		http_chunked_init(&c->req_chunk);
	} else if (req->framing.content_length > 0) {
		c->req_mode = BODY_LENGTH;
		c->req_left = (uint64_t)req->framing.content_length;
	} else {
		c->req_mode = BODY_NONE;
	}
	c->req_done = c->req_mode == BODY_NONE;
}

static void
client_new_request_id(struct client *c, const struct http_request *req)
{
	if (headers_request_id_acceptable(req->request_id)) {
		memcpy(c->request_id, req->request_id.p, req->request_id.len);
		c->request_id_len = req->request_id.len;
	} else {
		headers_request_id_generate(c->request_id);
		c->request_id_len = REQUEST_ID_LEN;
	}
	c->request_id[c->request_id_len] = '\0';
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

	copy_str(c->method, sizeof(c->method), req->method);
	copy_str(c->target, sizeof(c->target), req->target);
	c->user_agent[0] = c->referer[0] = '\0';
	if (c->w->cur->rt->access.format != ACCESS_COMBINED)
		return;
	for (i = 0; i < req->nheaders; i++) {
		if (http_header_is(&req->headers[i], "user-agent"))
			copy_str(c->user_agent, sizeof(c->user_agent), req->headers[i].value);
		else if (http_header_is(&req->headers[i], "referer"))
			copy_str(c->referer, sizeof(c->referer), req->headers[i].value);
	}
}

/* The upstream's hash_key for this request, kept for every try. */
static void
client_hash_key(struct client *c, const struct http_request *req)
{
	const char *var = c->upool->cfg->hash_key;
	struct http_str v = { "", 0 };

	if (var != NULL && strncmp(var, "$json.", 6) == 0) {
		/* A body field: only a proxied request has read one. */
		route_scan_value(&c->scan, var + 6, strlen(var + 6), &v.p, &v.len);
		c->hash_key_len = v.len < sizeof(c->hash_key) ? v.len : sizeof(c->hash_key);
		memcpy(c->hash_key, v.p, c->hash_key_len);
		return;
	}
	c->hash_key_len = exchange_hash_key(c->upool->cfg, c->addr, req, req->target, req->path,
	    c->hash_key, sizeof(c->hash_key));
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
	vars->request_id.p = c->request_id;
	vars->request_id.len = c->request_id_len;
	vars->route.p = vars->upstream.p = vars->remote_addr.p = "";
	if (PROXY_USES(uses, ROUTE)) {
		vars->route.p = c->route->name;
		vars->route.len = strlen(c->route->name);
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
	route_scan_vars(&c->scan, vars);
	path_vars_vars(&c->pathv, vars);
}

/* For $header.NAME in response ops: the request head kept in req_copy, parsed again. */
static void
proxy_kept_request_headers(struct client *c, struct rewrite_vars *vars)
{
	struct http_request *req = &c->w->req;
	size_t ql = c->req_copy != NULL ? evbuffer_get_length(c->req_copy) : 0;

	if (ql != 0 && http_parse_request((const char *)evbuffer_pullup(c->req_copy,
	    (ev_ssize_t)ql), ql, req) > 0)
		body_vars_headers(vars, req);
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
	if (proxy_has_response_ops(c->route))
		body_limit_accept_encoding(req, w->req_accept_encoding,
		    sizeof(w->req_accept_encoding));
	if (c->up_head == NULL && (c->up_head = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->up_head, evbuffer_get_length(c->up_head));
	if (w->target_cap < req->target.len + 2) {
		char *grown = realloc(w->target_buf, req->target.len + 2);
		if (grown == NULL)
			return -1;
		w->target_buf = grown;
		w->target_cap = req->target.len + 2;
	}
	n = route_rewrite_target(c->route, req->path.p, req->path.len, req->query.p,
	    req->query.len, w->target_buf, w->target_cap);
	if (n < 0)
		return -1;
	fw.client_addr = c->addr;
	fw.tls = c->conn.ssl != NULL;
	fw.request_id.p = c->request_id;
	fw.request_id.len = c->request_id_len;
	fw.host_override = c->upool->cfg->host_header;
	fw.target.p = w->target_buf;
	fw.target.len = (size_t)n;
	fw.method.p = c->head_as_get ? "GET" : NULL;
	fw.method.len = c->head_as_get ? 3 : 0;
	fw.ops = c->route->request_headers;
	fw.vars = NULL;
	if (fw.ops != NULL) {
		proxy_vars(c, fw.ops->vars, &vars, &tls_text);
		body_vars_headers(&vars, req);
		fw.vars = &vars;
	}
	if (headers_request_out(c->up_head, req, &fw) < 0)
		return -1;
	if (c->keep_chunked)
		return 0;       /* proxy_head_framing, once the body decides */
	p = framing;
	if (c->req_out_len >= 0)
		p = put_content_length(p, (uint64_t)c->req_out_len);
	else if (req->framing.chunked)
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	else if (req->framing.content_length >= 0)
		p = put_content_length(p, (uint64_t)req->framing.content_length);
	p = put_lit(p, "\r\n");
	n = (int)(p - framing);
	return evbuffer_add(c->up_head, framing, (size_t)n);
}

/* End the head of a kept chunked body: a Content-Length when the body is all here (as nginx
 * sends a buffered body), else chunked. */
static int
proxy_head_framing(struct client *c, int whole)
{
	char framing[64], *p = framing;

	if (whole)
		p = put_content_length(p, evbuffer_get_length(c->req_body));
	else
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	p = put_lit(p, "\r\n");
	return evbuffer_add(c->up_head, framing, (size_t)(p - framing));
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

/* A client accepts gzip when Accept-Encoding lists gzip (or *) with a non-zero q. */
static int
proxy_accepts_gzip(struct http_str ae)
{
	char list[512], *save = NULL, *tok, *q;
	size_t n = ae.len < sizeof(list) - 1 ? ae.len : sizeof(list) - 1;

	memcpy(list, ae.p, n);
	list[n] = '\0';
	for (tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " \t");
		if (strncasecmp(tok, "gzip", 4) == 0)
			tok += 4;
		else if (tok[0] == '*')
			tok += 1;
		else
			continue;
		if (*tok != '\0' && *tok != ';' && *tok != ' ' && *tok != '\t')
			continue;
		q = strstr(tok, "q=");
		if (q == NULL || strtod(q + 2, NULL) > 0)
			return 1;
	}
	return 0;
}

/* Nothing upstream will ask for a body we read first: invite it ourselves. */
static void
proxy_continue(struct client *c)
{
	if (c->expect_continue && c->http_minor == 1) {
		c->expect_continue = 0;
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
	body_block_release(c->req_block);
	c->req_block_len = 0;
	if ((c->req_block = body_block_new(c->w->bodies,
	    c->req_mode == BODY_LENGTH ? (size_t)c->req_left : 0)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	c->req_buffering = 1;
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
	if (c->ex.stage == EXCHANGE_IDLE)
		proxy_try(c, 0);
	else if (c->ex.stage == EXCHANGE_ACTIVE && c->ex.uc != NULL)
		proxy_send_request(c);
}

/* The request body to send is req_body: keep it for another try when it is small enough. */
static void
proxy_send_collected(struct client *c)
{
	c->replayable = evbuffer_get_length(c->req_body) <= c->upool->cfg->retry_body;
	proxy_request_ready(c);
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
	size_t n, ql;
	char msg[256];
	int r;

	if (c->req_mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->req_left)
			n = (size_t)c->req_left;
		evbuffer_remove(in, body_block_data(c->req_block) + c->req_block_len, n);
		c->req_block_len += n;
		c->req_left -= n;
		c->req_done = c->req_left == 0;
	} else {
		while (!c->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = proxy_dechunk_into_block(c, in, vec);
			if (r == HTTP_CHUNKED_ERROR) {
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return;
			}
			c->req_done = r == HTTP_CHUNKED_DONE;
		}
	}
	ql = evbuffer_get_length(c->req_copy);
	if (c->req_block_len > cfg->limits.max_body) {
		/* Only a chunked body gets here: its size was not known up front. */
		if (proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		/* pass: send what we have as one chunk and re-chunk the rest as it comes. */
		c->req_buffering = 0;
		http_parse_request((const char *)evbuffer_pullup(c->req_copy, (ev_ssize_t)ql), ql, req);
		if (proxy_build_upstream_head(c, req) < 0) {
			client_error(c, GW_BAD_REQUEST, NULL, 1);
			return;
		}
		char size_line[24];
		int sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", c->req_block_len);
		if (c->req_body == NULL && (c->req_body = evbuffer_new()) == NULL) {
			client_error(c, GW_INTERNAL_ERROR, NULL, 1);
			return;
		}
		evbuffer_add(c->req_body, size_line, (size_t)sl);
		body_block_add_to(c->req_body, c->req_block, c->req_block_len);
		evbuffer_add(c->req_body, "\r\n", 2);
		if (c->req_done)
			evbuffer_add(c->req_body, "0\r\n\r\n", 5);
		proxy_drop_request_block(c);
		/* The rest streams after it: this request cannot be sent twice. */
		c->replayable = 0;
		proxy_request_ready(c);
		return;
	}
	if (!c->req_done)
		return;

	c->req_buffering = 0;
	conn_read_stop(&c->conn);
	conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
	http_parse_request((const char *)evbuffer_pullup(c->req_copy, (ev_ssize_t)ql), ql, req);
	if (c->req_body == NULL && (c->req_body = evbuffer_new()) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->req_block_len == 0 && c->route->validate != VALIDATE_FULL) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		metrics_envelope(w, c->route, METRICS_REQUEST, METRICS_PASSED, METRICS_REASON_EMPTY);
		c->req_out_len = 0;
	} else {
		proxy_vars(c, proxy_prog_vars(c->route->request), &vars, &tls_text);
		body_vars_headers(&vars, req);
		if (body_apply_block(w->bodies, cfg, c->route, c->route->request,
		    body_coding(http_find_header(req->headers, req->nheaders,
		    "content-encoding")), c->req_block, c->req_block_len, &vars, w->rewritten,
		    &res) < 0) {
			snprintf(msg, sizeof(msg), "request body not rewritten: %s", res.error);
			log_warnx("route %s: %s (request %s)", c->route->name, msg, c->request_id);
			evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
			if (proxy_unrewritten(c, METRICS_REQUEST, proxy_unrewritten_reason(&res),
			    res.encoding ? GW_UNSUPPORTED_MEDIA_TYPE : GW_INVALID_JSON, msg, 0))
				return;
			/* pass: the client's bytes, untouched */
			body_block_add_to(c->req_body, c->req_block, c->req_block_len);
		} else {
			metrics_envelope(w, c->route, METRICS_REQUEST, METRICS_APPLIED,
			    METRICS_REASON_NONE);
			metrics_bytes(w, res.spliced, res.copied);
			/* The rewritten body may refer to the collected one: both stay until sent. */
			evbuffer_add_buffer(c->req_body, w->rewritten);
			if (res.inflated)
				proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
		}
		c->req_out_len = (int64_t)evbuffer_get_length(c->req_body);
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

	r = http_chunked_feed(&c->req_chunk, vec.iov_base, vec.iov_len, &consumed, &off, &dlen);
	if (r == HTTP_CHUNKED_ERROR)
		return r;
	if (r == HTTP_CHUNKED_DATA) {
		if (body_block_reserve(&c->req_block, c->req_block_len + dlen) < 0)
			return HTTP_CHUNKED_ERROR;
		evbuffer_drain(in, off);
		evbuffer_remove(in, body_block_data(c->req_block) + c->req_block_len, dlen);
		c->req_block_len += dlen;
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
	body_block_release(c->req_block);
	c->req_block = NULL;
	c->req_block_len = 0;
}

/* Response ops may read request headers ($header.NAME) after the head has left the input. */
static int
proxy_keep_request_head(struct client *c, size_t len)
{
	if (c->req_copy == NULL && (c->req_copy = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->req_copy, evbuffer_get_length(c->req_copy));
	return evbuffer_add(c->req_copy, evbuffer_pullup(c->conn.in, (ev_ssize_t)len), len);
}

/* 1 when the request body is one for request ops (a JSON body; one in a coding they cannot
 * read follows on_error); else it goes untouched, counted with the reason. */
static int
proxy_wants_request_body(struct client *c, const struct http_request *req)
{
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	/* Content-Length: 0 is an empty body, which validate: full does not take as JSON. */
	if (c->req_mode == BODY_NONE && (req->framing.content_length != 0 ||
	    c->route->validate != VALIDATE_FULL))
		why = METRICS_REASON_EMPTY;
	else if (!body_is_json(c->route, http_find_header(req->headers, req->nheaders,
	    "content-type")))
		why = METRICS_REASON_NOT_JSON;
	if (why == METRICS_REASON_NONE)
		return 1;
	metrics_envelope(c->w, c->route, METRICS_REQUEST, METRICS_PASSED, why);
	return 0;
}

/* How a request without request ops takes its body: kept whole in the input for another try
 * when it is small, else streamed once the connection is ready. */
static void
proxy_plan_body(struct client *c, size_t head_len)
{
	const struct config_upstream *up = c->upool->cfg;
	const struct config *cfg = client_cfg(c);

	if (c->req_mode == BODY_NONE) {
		c->replayable = 1;
		return;
	}
	if (c->keep_chunked) {
		c->buffer_body = 1;
		proxy_continue(c);
		conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
		conn_read_start(&c->conn);
		proxy_keep_chunked(c);
		return;
	}
	if (c->req_mode == BODY_LENGTH && c->idempotent && c->req_left <= up->retry_body &&
	    head_len + c->req_left <= FLOW_HIGH) {
		c->buffer_body = c->replayable = 1;
		c->replay_len = (size_t)c->req_left;
		if (evbuffer_get_length(c->conn.in) >= c->replay_len) {
			c->req_done = 1;
			return;
		}
		proxy_continue(c);
	}
	/* The body is read once the connection is ready, or now when it is kept. */
	conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
	if (c->buffer_body)
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
	size_t max = c->upool->cfg->retry_body;
	struct evbuffer *in = c->conn.in;
	struct evbuffer_iovec vec;
	int r = HTTP_CHUNKED_MORE, sl;
	char size_line[24];
	size_t n;

	while (r != HTTP_CHUNKED_DONE && evbuffer_get_length(c->req_body) <= max &&
	    evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0)
		if ((r = proxy_dechunk(&c->req_chunk, in, vec, c->req_body)) == HTTP_CHUNKED_ERROR) {
			client_error(c, GW_BAD_REQUEST, NULL, 1);
			return;
		}
	n = evbuffer_get_length(c->req_body);
	if (r != HTTP_CHUNKED_DONE && n <= max)
		return;
	c->buffer_body = c->keep_chunked = 0;
	c->req_done = r == HTTP_CHUNKED_DONE;
	c->replayable = c->req_done && n <= max;
	sl = snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
	if ((!c->req_done && (evbuffer_prepend(c->req_body, size_line, (size_t)sl) < 0 ||
	    evbuffer_add(c->req_body, "\r\n", 2) < 0)) || proxy_head_framing(c, c->req_done) < 0) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	/* The rest waits until the connection is ready (proxy_send_request reads on). */
	conn_read_stop(&c->conn);
	if (c->ex.stage == EXCHANGE_ACTIVE && c->ex.uc != NULL)
		proxy_send_request(c);
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
			return;
		}
		r = HTTP_ERR_TOO_MANY_HEADERS;
	}

	client_set_state(c, CLIENT_BUSY);
	client_timer_set(c, TIMER_OFF, 0);
	client_now(&c->start);
	c->status = 0;
	c->gw_error = -1;
	c->bytes_sent = 0;
	c->head_sent = 0;
	c->resp_started = 0;
	c->req_buffering = 0;
	c->req_out_len = -1;
	c->resp_head_seen = 0;
	c->resp_buffering = 0;
	c->resp_rechunk = 0;
	c->up_close = 0;
	c->answer_refused = 0;
	c->req_done = 1;
	c->keepalive = 0;
	c->http_minor = 1;
	c->route = NULL;
	c->ntried = 0;
	c->retries = 0;
	c->stale_retried = 0;
	c->sent = 0;
	c->buffer_body = 0;
	c->keep_chunked = 0;
	c->replayable = 0;
	c->replay_len = 0;
	c->last_error = GW_UPSTREAM_UNAVAILABLE;
	c->last_message[0] = '\0';
	if (r < 0) {
		strcpy(c->method, "-");
		strcpy(c->target, "-");
		headers_request_id_generate(c->request_id);
		c->request_id_len = REQUEST_ID_LEN;
		c->request_id[REQUEST_ID_LEN] = '\0';
		client_error(c, parse_error_to_gateway(r), NULL, 1);
		return;
	}

	c->http_minor = req->version_minor;
	c->keepalive = req->version_minor == 1 ? !req->framing.conn_close :
	    req->framing.conn_keepalive && !req->framing.conn_close;
	c->expect_continue = req->framing.expect_continue;
	c->head_request = req->method_bit == METHOD_HEAD;
	c->head_as_get = 0;
	c->idempotent = (req->method_bit & (METHOD_GET | METHOD_HEAD | METHOD_PUT |
	    METHOD_DELETE | METHOD_OPTIONS | METHOD_TRACE)) != 0 ||
	    http_find_header(req->headers, req->nheaders, "idempotency-key").len != 0;
	client_body_framing(c, req);
	client_new_request_id(c, req);
	c->accept_gzip = 0;
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

	if (c->wr == NULL) {
		c->wr = c->w->cur;
		worker_runtime_ref(c->wr);
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
	size_t hl = c->scan.head_len;

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
	int mismatch = 0;

	if (route_scan_match(&c->scan, w->bodies, cfg, req, in, (size_t)r, &c->route,
	    &mismatch) == ROUTE_SCAN_WAIT) {
		client_scan_wait(c, (size_t)r);
		return;
	}
	if (c->route == NULL) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, mismatch ? GW_METHOD_NOT_ALLOWED : GW_NO_ROUTE, NULL, 0);
		return;
	}
	if (c->wr == NULL) {
		c->wr = w->cur;
		worker_runtime_ref(c->wr);
	}
	if (path_vars_set(&c->pathv, c->route, req->path.p, req->path.len) < 0) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	if (c->route->backends != NULL) {
		proxy_aggregate(c, req, (size_t)r);
		return;
	}
	c->upool = &c->wr->pools[c->route->upstream - cfg->upstreams];
	/* Only GET's answer tells the status and length the ops give it: ask for that. */
	c->head_as_get = c->head_request && proxy_has_response_ops(c->route);
	client_hash_key(c, req);
	c->accept_gzip = c->route->compress == COMPRESS_GZIP && proxy_has_response_ops(c->route) &&
	    proxy_accepts_gzip(http_find_header(req->headers, req->nheaders, "accept-encoding"));
	if ((c->route->request != NULL || proxy_response_needs_headers(c->route)) &&
	    proxy_keep_request_head(c, (size_t)r) < 0) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	if (c->route->request != NULL && proxy_wants_request_body(c, req)) {
		/* Too large for the ops: refused, or streamed untouched below. */
		if (c->req_mode == BODY_LENGTH && c->req_left > cfg->limits.max_body &&
		    proxy_unrewritten(c, METRICS_REQUEST, METRICS_REASON_OVER_LIMIT,
		    GW_PAYLOAD_TOO_LARGE, NULL, 1))
			return;
		if (c->req_mode != BODY_LENGTH || c->req_left <= cfg->limits.max_body) {
			/* The try starts now, connecting while the body comes: $upstream in the
			 * ops names its server. */
			evbuffer_drain(in, (size_t)r);
			c->req_buffering = 1;
			proxy_try(c, 0);
			if (c->state == CLIENT_BUSY && !c->resp_started)
				proxy_start_request_collect(c);
			return;
		}
	}
	c->keep_chunked = c->req_mode == BODY_CHUNKED && c->idempotent &&
	    c->upool->cfg->retry_body != 0 &&
	    (c->req_body != NULL || (c->req_body = evbuffer_new()) != NULL);
	if (proxy_build_upstream_head(c, req) < 0) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	evbuffer_drain(in, (size_t)r);
	proxy_plan_body(c, (size_t)r);
	if (c->state == CLIENT_BUSY)
		proxy_try(c, 0);
}

static void
client_process(struct client *c)
{
	while (c->state == CLIENT_IDLE &&
	    evbuffer_get_length(c->conn.in) != 0) {
		size_t before = evbuffer_get_length(c->conn.in);
		client_read_head(c);
		if (c->state == CLIENT_IDLE &&
		    evbuffer_get_length(c->conn.in) == before)
			break;          /* incomplete head: wait for more */
	}
}

/* Send what both sides have queued. */
static void
proxy_flush(struct client *c)
{
	if (c->state == CLIENT_DEAD)
		return;
	conn_flush(&c->conn);
	if (c->ex.uc != NULL)
		conn_flush(upconn(c));
}

/* --- tries ------------------------------------------------------------------------------ */

/* The server of the try in progress joins tried[] (once). */
static void
proxy_note_server(struct client *c)
{
	if (c->noted || c->ex.sp == NULL || c->ntried == CONFIG_MAX_TRIES)
		return;
	upstream_server_ref(c->ex.sp);
	c->tried[c->ntried++] = c->ex.sp;
	c->noted = 1;
}

/* The request is over (logged): the servers it tried may go. */
static void
proxy_forget_tried(struct client *c)
{
	while (c->ntried > 0)
		upstream_server_unref(c->tried[--c->ntried]);
}

/* Start a try on a server not tried yet (fresh: on a new connection). */
static void
proxy_try(struct client *c, int fresh)
{
	int r;

	c->sent = 0;
	c->noted = 0;
	c->ex.key = c->hash_key;
	c->ex.keylen = c->hash_key_len;
	c->ex.connect_timeout = c->route->timeouts.upstream_connect;
	c->ex.try_timeout = c->route->timeouts.upstream_try;
	c->ex.tried = c->tried;
	c->ex.ntried = c->ntried;
	r = exchange_start(&c->ex, c->upool, fresh);
	proxy_note_server(c);
	if (r < 0)
		proxy_exchange_cb(&c->ex, EXCHANGE_FAILED, c);
	else if (r > 0)
		proxy_exchange_cb(&c->ex, EXCHANGE_READY, c);
}

/* Whether a failed try may be followed by another.  A failed connect reached no server:
 * every method fails over, to each server once.  Otherwise the request must be safe to
 * send again and still in hand, and retries, retry_on and the retry budget must allow it. */
static int
proxy_may_retry(struct client *c, unsigned fail, enum upstream_retry_reason why)
{
	return !c->resp_started && exchange_may_retry(&c->ex, fail, why, c->ntried,
	    &c->retries, c->idempotent, c->replayable, c->request_id);
}

/* Remember why this try failed: what the client gets if no other try succeeds. */
static void
proxy_try_error(struct client *c, enum gateway_error err, const char *fmt, const char *detail)
{
	c->last_error = err;
	snprintf(c->last_message, sizeof(c->last_message), fmt, c->upool->cfg->name, detail);
}

/* The try failed with fail (FAIL_*): end it, then try another server or answer the error. */
static void
proxy_next_try(struct client *c, unsigned fail, enum upstream_retry_reason why)
{
	int retry;

	exchange_verdict(&c->ex, fail);
	exchange_end(&c->ex, 0);
	retry = proxy_may_retry(c, fail, why);
	if (!retry) {
		client_error(c, c->last_error, c->last_message, 0);
		return;
	}
	/* A budgeted retry holds its place in the budget until it ends. */
	c->ex.retry = fail != FAIL_CONNECT;
	proxy_try(c, 0);
}

/* The exchange could not give a connection: no server left, overloaded, or a failed
 * connect. */
static void
proxy_connect_failed(struct client *c)
{
	struct exchange *ex = &c->ex;
	char logmsg[384];

	if (ex->fail == EXCHANGE_OVERLOADED) {
		exchange_end(ex, 0);
		log_warnx("upstream %s: every server is at max_connections and the queue is full "
		    "or the wait ran out (request %s)", c->upool->cfg->name, c->request_id);
		client_error(c, GW_UPSTREAM_OVERLOADED, NULL, 0);
		return;
	}
	if (ex->fail == EXCHANGE_NO_SERVER) {
		exchange_end(ex, 0);
		if (c->ntried == 0)
			proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE, "upstream %s has no server%s", "");
		client_error(c, c->last_error, c->last_message, 0);
		return;
	}
	c->last_error = exchange_describe_connect(ex, c->last_message, sizeof(c->last_message),
	    logmsg, sizeof(logmsg));
	log_warnx("%s (request %s)", logmsg, c->request_id);
	proxy_next_try(c, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
}

/* The connection is ready: send the head, then the body (a copy when it may go again). */
static void
proxy_send_request(struct client *c)
{
	const struct config *cfg = client_cfg(c);
	struct evbuffer *out = upconn(c)->out;
	size_t n;

	if (c->sent || c->req_buffering || (c->buffer_body && !c->req_done))
		return;         /* the body is still coming: it goes once all of it is here */
	c->sent = 1;
	n = evbuffer_get_length(c->up_head);
	evbuffer_add(out, evbuffer_pullup(c->up_head, -1), n);
	if (c->req_body != NULL && evbuffer_get_length(c->req_body) != 0) {
		if (c->replayable) {
			n = evbuffer_get_length(c->req_body);
			evbuffer_add(out, evbuffer_pullup(c->req_body, -1), n);
		} else {
			evbuffer_add_buffer(out, c->req_body);
		}
	} else if (c->replay_len != 0) {
		evbuffer_add(out, evbuffer_pullup(c->conn.in, (ev_ssize_t)c->replay_len),
		    c->replay_len);
	}
	if (!c->req_done) {
		/* A streamed body: from now on it goes as it comes. */
		conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
		conn_read_start(&c->conn);
		proxy_forward_request_body(c);
		if (c->state != CLIENT_BUSY || c->ex.uc == NULL)
			return;
	} else {
		conn_read_stop(&c->conn);
		conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
		proxy_upstream_timeouts(c);
	}
	conn_read_start(upconn(c));
}

/* upstream_response bounds the wait for the answer once the request is sent (as nginx's
 * proxy_read_timeout), and each stalled write of the request meanwhile. */
static void
proxy_upstream_timeouts(struct client *c)
{
	uint64_t ms = c->route->timeouts.upstream_response;

	conn_set_timeouts(upconn(c), c->req_done ? ms : 0, ms);
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

	if (c->req_mode == BODY_LENGTH) {
		n = evbuffer_get_length(in);
		if (n > c->req_left)
			n = (size_t)c->req_left;
		evbuffer_remove_buffer(in, out, n);
		c->req_left -= n;
		c->req_done = c->req_left == 0;
	} else if (c->req_mode == BODY_CHUNKED) {
		/* The payload goes in chunks of our own: extensions and trailers stop here. */
		while (!c->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 &&
		    vec.iov_len > 0) {
			r = http_chunked_feed(&c->req_chunk, vec.iov_base, vec.iov_len, &consumed,
			    &off, &dlen);
			if (r == HTTP_CHUNKED_ERROR) {
				c->up_close = 1;
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
			c->req_done = r == HTTP_CHUNKED_DONE;
		}
	}
	if (c->req_done) {
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
	exchange_verdict(&c->ex, fail);
	exchange_note_retry_after(&c->ex, resp);
	if (!(c->upool->cfg->retry_on & fail) ||
	    !proxy_may_retry(c, fail, exchange_status_reason(resp->status)))
		return 0;
	log_info("upstream %s server %s answered %d: trying another server (request %s)",
	    c->upool->cfg->name, c->ex.sp->srv->addr.text, resp->status, c->request_id);
	snprintf(status, sizeof(status), "%d", resp->status);
	proxy_try_error(c, exchange_status_error(resp->status), "upstream %s answered %s",
	    status);
	exchange_end(&c->ex, 0);
	c->ex.retry = 1;
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
	struct http_str id = { c->request_id, c->request_id_len };
	const struct header_ops *ops = c->route->response_headers;
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
	c->head_sent = evbuffer_get_length(out) - before;
	c->bytes_sent += c->head_sent;
	c->status = resp->status;
	c->resp_started = 1;
}

/* 1: collect this response body for the ops its status calls for (response for the statuses
 * of response_on, else error_response); 0: stream it untouched; -1: answered already. */
static int
proxy_wants_body(struct client *c, const struct http_response *resp)
{
	const struct config *cfg = client_cfg(c);
	enum metrics_envelope_reason why = METRICS_REASON_NONE;

	c->resp_prog = config_status_in(c->route->response_on, resp->status) ?
	    c->route->response : c->route->error_response;
	if (c->resp_prog == NULL)
		why = METRICS_REASON_STATUS;
	else if (c->resp_mode == BODY_NONE && (c->route->validate != VALIDATE_FULL ||
	    resp->framing.content_length != 0 || c->head_request || resp->status == 204 ||
	    resp->status == 304))
		why = METRICS_REASON_EMPTY;
	else if (!body_is_json(c->route, http_find_header(resp->headers, resp->nheaders,
	    "content-type")))
		why = METRICS_REASON_NOT_JSON;
	if (why != METRICS_REASON_NONE) {
		metrics_envelope(c->w, c->route, METRICS_RESPONSE, METRICS_PASSED, why);
		return 0;
	}
	if (c->resp_mode == BODY_NONE) {
		/* Content-Length: 0 is an empty body, which validate: full does not take as JSON. */
		log_warnx("route %s: response body not rewritten: empty body (request %s)",
		    c->route->name, c->request_id);
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_EMPTY,
		    GW_UPSTREAM_INVALID, "response body not rewritten: empty body", 0);
	}
	if (body_coding(http_find_header(resp->headers, resp->nheaders, "content-encoding")) ==
	    BODY_CODING_OTHER) {
		/* Streamed untouched (pass) or refused (fail), never run through the ops. */
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_ENCODING,
		    GW_UPSTREAM_INVALID, "upstream response has a Content-Encoding that cannot be "
		    "decoded", 0);
	}
	if (c->resp_mode == BODY_LENGTH && c->resp_left > cfg->limits.max_body)
		return -proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT,
		    GW_UPSTREAM_INVALID, "upstream response body exceeds limits.max_body", 0);
	return 1;
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
		if (r == HTTP_INCOMPLETE && len < UPSTREAM_MAX_HEAD)
			return -1;
		if (r <= 0 || resp->status == 101) {
			proxy_invalid_response(c);
			return -1;
		}
		if (resp->status >= 200)
			break;
		/* Interim responses: relay 100 Continue to a client that waits for it. */
		if (resp->status == 100 && c->expect_continue && c->http_minor == 1) {
			c->expect_continue = 0;
			evbuffer_add(out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
		}
		evbuffer_drain(in, (size_t)r);
	}

	exchange_head_received(&c->ex);
	if (proxy_retry_status(c, resp))
		return -1;
	/* What was kept for another try is no longer needed. */
	proxy_drop_replay(c);
	c->status = resp->status;
	if ((c->head_request && !c->head_as_get) || resp->status == 204 || resp->status == 304)
		c->resp_mode = BODY_NONE;
	else if (resp->framing.chunked) {
		c->resp_mode = BODY_CHUNKED;
		http_chunked_init(&c->resp_chunk);
	} else if (resp->framing.content_length >= 0) {
		c->resp_mode = resp->framing.content_length ? BODY_LENGTH : BODY_NONE;
		c->resp_left = (uint64_t)resp->framing.content_length;
	} else {
		c->resp_mode = BODY_UNTIL_CLOSE;
	}
	c->up_close = resp->framing.conn_close || c->resp_mode == BODY_UNTIL_CLOSE ||
	    (resp->version_minor == 0 && !resp->framing.conn_keepalive);
	c->resp_dechunk = c->resp_mode == BODY_CHUNKED && c->http_minor == 0;
	if (c->resp_mode == BODY_UNTIL_CLOSE || c->resp_dechunk || c->w->draining)
		c->keepalive = 0;

	if (proxy_has_response_ops(c->route)) {
		int collect = proxy_wants_body(c, resp);
		if (collect < 0)
			return -1;
		if (collect) {
			/* Envelope ops: keep the head, collect the body, answer when it is all here. */
			if ((c->resp_head == NULL && (c->resp_head = evbuffer_new()) == NULL) ||
			    (c->body == NULL && (c->body = evbuffer_new()) == NULL)) {
				client_error(c, GW_INTERNAL_ERROR, NULL, 0);
				return -1;
			}
			evbuffer_drain(c->resp_head, evbuffer_get_length(c->resp_head));
			evbuffer_drain(c->body, evbuffer_get_length(c->body));
			evbuffer_remove_buffer(in, c->resp_head, (size_t)r);
			if (c->resp_mode == BODY_LENGTH && upconn(c)->ssl == NULL) {
				c->resp_block = body_block_new(c->w->bodies, (size_t)c->resp_left);
				c->resp_block_len = (size_t)c->resp_left;
			}
			c->resp_buffering = 1;
			c->resp_dechunk = 1;
			c->resp_head_seen = 1;
			return 0;
		}
	}
	if (resp->framing.chunked && !c->resp_dechunk && resp->status != 204 &&
	    resp->status != 304)
		proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
	else if (resp->framing.content_length >= 0 && !resp->framing.chunked &&
	    resp->status != 204)
		proxy_write_response_head(c, resp, OUT_LENGTH,
		    (uint64_t)resp->framing.content_length, NULL);
	else
		proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
	evbuffer_drain(in, (size_t)r);
	c->resp_head_seen = 1;
	if (c->head_as_get)
		proxy_skip_body(c);
	return 0;
}

/* A HEAD asked as GET has its head out: the body is not read, nor the connection used again. */
static void
proxy_skip_body(struct client *c)
{
	c->resp_mode = BODY_NONE;
	c->up_close = 1;
}

/* Send n bytes of a body we hold to the client, or drop them for a HEAD request. */
static void
proxy_send_body(struct client *c, struct evbuffer *body, size_t n)
{
	if (c->head_request)
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
		c->bytes_sent += (uint64_t)moved;
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
		r = http_chunked_feed(&c->resp_chunk, vec.iov_base, vec.iov_len, &consumed, &off,
		    &dlen);
		if (r == HTTP_CHUNKED_ERROR)
			return -1;
		if (!c->resp_dechunk) {
			proxy_move(c, in, out, consumed);
		} else if (r == HTTP_CHUNKED_DATA) {
			evbuffer_drain(in, off);
			if (c->resp_rechunk)
				c->bytes_sent += (uint64_t)evbuffer_add_printf(out, "%zx\r\n", dlen);
			proxy_move(c, in, out, dlen);
			if (c->resp_rechunk)
				c->bytes_sent += evbuffer_add(out, "\r\n", 2) == 0 ? 2 : 0;
			evbuffer_drain(in, consumed - off - dlen);
		} else {
			evbuffer_drain(in, consumed);
		}
		if (r == HTTP_CHUNKED_DONE) {
			if (c->resp_rechunk)
				c->bytes_sent += evbuffer_add(out, "0\r\n\r\n", 5) == 0 ? 5 : 0;
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

	switch (c->resp_mode) {
	case BODY_NONE:
		done = 1;
		break;
	case BODY_LENGTH:
		n = len < c->resp_left ? len : (size_t)c->resp_left;
		proxy_move(c, in, out, n);
		c->resp_left -= n;
		done = c->resp_left == 0;
		break;
	case BODY_CHUNKED:
		r = proxy_forward_chunked(c, in, out);
		if (r < 0) {
			log_warnx("invalid chunked framing from upstream %s (request %s)",
			    proxy_server(c)->addr.text, c->request_id);
			exchange_verdict(&c->ex, FAIL_INVALID);
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
			c->up_close = 1;        /* bytes past the response: never reuse */
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
	size_t hl = evbuffer_get_length(c->resp_head), n = evbuffer_get_length(c->body);

	log_warnx("route %s: response body exceeds limits.max_body (request %s)", c->route->name,
	    c->request_id);
	if (proxy_unrewritten(c, METRICS_RESPONSE, METRICS_REASON_OVER_LIMIT, GW_UPSTREAM_INVALID,
	    "upstream response body exceeds limits.max_body", 0))
		return;
	http_parse_response((const char *)evbuffer_pullup(c->resp_head, (ev_ssize_t)hl), hl, resp);
	c->resp_buffering = 0;
	if (c->head_as_get) {
		/* The head GET would get: chunked for an HTTP/1.1 client, else until close. */
		if (c->resp_mode == BODY_CHUNKED && c->http_minor == 1) {
			proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
		} else {
			c->keepalive = 0;
			proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
		}
		evbuffer_drain(c->body, n);
		proxy_skip_body(c);
	} else if (c->resp_mode == BODY_CHUNKED && c->http_minor == 1) {
		/* What was collected is de-chunked: send it as one chunk, then re-chunk the rest. */
		c->resp_rechunk = 1;
		proxy_write_response_head(c, resp, OUT_CHUNKED, 0, NULL);
		c->bytes_sent += (uint64_t)evbuffer_add_printf(c->conn.out, "%zx\r\n", n);
		proxy_move(c, c->body, c->conn.out, n);
		evbuffer_add(c->conn.out, "\r\n", 2);
		c->bytes_sent += 2;
	} else {
		c->keepalive = 0;
		proxy_write_response_head(c, resp, OUT_NONE, 0, NULL);
		proxy_move(c, c->body, c->conn.out, n);
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
	size_t hl = evbuffer_get_length(c->resp_head);
	enum body_coding coding;
	char msg[256];
	int rc;

	http_parse_response((const char *)evbuffer_pullup(c->resp_head, (ev_ssize_t)hl), hl, resp);
	proxy_vars(c, proxy_prog_vars(c->resp_prog), &vars, &tls_text);
	vars.status = resp->status;     /* for when: { status: ... } */
	if (body_needs_headers(c->resp_prog))
		proxy_kept_request_headers(c, &vars);
	c->resp_buffering = 0;
	coding = body_coding(http_find_header(resp->headers, resp->nheaders, "content-encoding"));
	if (c->resp_block != NULL)
		rc = body_apply_block(w->bodies, cfg, c->route, c->resp_prog, coding,
		    c->resp_block, c->resp_block_len, &vars, w->rewritten, &res);
	else if (evbuffer_get_length(c->body) != 0 || c->route->validate == VALIDATE_FULL)
		rc = body_apply(w->bodies, cfg, c->route, c->resp_prog, coding, c->body, &vars,
		    w->rewritten, &res);
	else
		rc = 1;
	if (rc == 1) {
		/* An empty body is no JSON document: validate: envelope passes it untouched. */
		metrics_envelope(w, c->route, METRICS_RESPONSE, METRICS_PASSED, METRICS_REASON_EMPTY);
		proxy_write_response_head(c, resp, OUT_LENGTH, 0, NULL);
	} else if (rc < 0) {
		snprintf(msg, sizeof(msg), "response body not rewritten: %s", res.error);
		log_warnx("route %s: %s (request %s)", c->route->name, msg, c->request_id);
		evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
		if (proxy_unrewritten(c, METRICS_RESPONSE, proxy_unrewritten_reason(&res),
		    GW_UPSTREAM_INVALID, msg, 0))
			return;
		/* pass: the upstream's status and bytes, untouched */
		if (c->resp_block != NULL)
			body_block_add_to(c->body, c->resp_block, c->resp_block_len);
		proxy_write_response_head(c, resp, OUT_LENGTH, evbuffer_get_length(c->body), NULL);
		proxy_send_body(c, c->body, evbuffer_get_length(c->body));
	} else {
		metrics_envelope(w, c->route, METRICS_RESPONSE, METRICS_APPLIED, METRICS_REASON_NONE);
		metrics_bytes(w, res.spliced, res.copied);
		if (res.status != 0 && res.status != resp->status) {
			resp->status = res.status;
			resp->reason.len = 0;
		}
		const char *extra = NULL;
		if (res.inflated)
			proxy_remove_header(resp->headers, &resp->nheaders, "content-encoding");
		if (c->accept_gzip && !res.inflated &&
		    body_coding(http_find_header(resp->headers, resp->nheaders, "content-encoding")) !=
		    BODY_CODING_IDENTITY)
			c->accept_gzip = 0;     /* already encoded: leave it */
		if (c->accept_gzip && body_gzip(w->bodies, w->rewritten) == 0)
			extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
		proxy_write_response_head(c, resp, OUT_LENGTH, evbuffer_get_length(w->rewritten),
		    extra);
		proxy_send_body(c, w->rewritten, evbuffer_get_length(w->rewritten));
	}
	if (c->ex.uc != NULL && evbuffer_get_length(upconn(c)->in) != 0)
		c->up_close = 1;
	client_request_end(c);
}

/* A Content-Length body goes into one block: what came with the head is copied, the rest
 * is read by the socket layer straight into place. */
static void
proxy_collect_into_block(struct client *c)
{
	int sinking = c->resp_sinking;

	body_block_fill(c->resp_block, c->resp_block_len, &c->resp_left, &sinking, upconn(c));
	c->resp_sinking = sinking != 0;
}

/* Collect the response body for envelope ops, de-chunked, up to limits.max_body. */
static void
proxy_collect_response_body(struct client *c)
{
	struct evbuffer *in = upconn(c)->in;
	struct evbuffer_iovec vec;
	size_t n;
	int r, done = 0;

	switch (c->resp_mode) {
	case BODY_LENGTH:
		if (c->resp_block != NULL) {
			proxy_collect_into_block(c);
			done = c->resp_left == 0;
			break;
		}
		n = evbuffer_get_length(in);
		if (n > c->resp_left)
			n = (size_t)c->resp_left;
		evbuffer_remove_buffer(in, c->body, n);
		c->resp_left -= n;
		done = c->resp_left == 0;
		break;
	case BODY_CHUNKED:
		while (!done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = proxy_dechunk(&c->resp_chunk, in, vec, c->body);
			if (r == HTTP_CHUNKED_ERROR) {
				proxy_invalid_response(c);
				return;
			}
			done = r == HTTP_CHUNKED_DONE;
			if (!done && evbuffer_get_length(c->body) > client_cfg(c)->limits.max_body)
				break;
		}
		break;
	default:
		evbuffer_remove_buffer(in, c->body, evbuffer_get_length(in));
		break;
	}
	if (!done && evbuffer_get_length(c->body) > client_cfg(c)->limits.max_body) {
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
	    c->upool->cfg->name, proxy_server(c)->addr.text, c->request_id);
	proxy_try_error(c, GW_UPSTREAM_INVALID, "malformed response from upstream %s%s", "");
	if (c->resp_head_seen) {
		exchange_verdict(&c->ex, FAIL_INVALID);
		client_error(c, c->last_error, c->last_message, c->resp_started);
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
	if (!c->ex.uc->reused || c->stale_retried || c->resp_head_seen ||
	    evbuffer_get_length(upconn(c)->in) != 0)
		return 0;
	if (!proxy_may_retry(c, FAIL_RESET, UPSTREAM_RETRY_STALE)) {
		log_warnx("upstream %s server %s closed a pooled connection before answering "
		    "(request %s)", c->upool->cfg->name, proxy_server(c)->addr.text,
		    c->request_id);
		proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE,
		    "upstream %s closed the connection before answering%s", "");
		client_error(c, c->last_error, c->last_message, 0);
		return 1;
	}
	c->stale_retried = 1;
	exchange_end(&c->ex, 0);
	if (c->noted)
		upstream_server_unref(c->tried[--c->ntried]);  /* the same server may take it */
	c->ex.retry = 1;
	proxy_try(c, 1);
	return 1;
}

/* The upstream connection ended, failed or timed out while active. */
static void
proxy_upstream_failed(struct client *c, int what)
{
	const char *addr = proxy_server(c)->addr.text;
	const char *name = c->upool->cfg->name;

	if (c->resp_buffering && c->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		c->up_close = 1;
		proxy_collect_response_body(c);
		if (c->state == CLIENT_BUSY && c->resp_buffering)
			proxy_respond_rewritten(c);
		return;
	}
	if (c->resp_started && c->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		proxy_forward_response_body(c);
		if (c->state == CLIENT_BUSY && c->ex.uc != NULL) {
			c->up_close = 1;
			client_request_end(c);
		}
		return;
	}
	if (c->resp_head_seen) {
		/* Part of the answer is gone already (to the client, or into ops): no retry. */
		log_warnx("upstream %s server %s failed in the middle of a response (request %s)",
		    name, addr, c->request_id);
		exchange_verdict(&c->ex, what & CONN_TIMEOUT ? FAIL_TIMEOUT : FAIL_RESET);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, NULL, c->resp_started);
		return;
	}
	if (upconn(c)->tls_failed) {
		/* A TLS 1.3 server refuses a client certificate after our side of the handshake:
		 * the request never reached the application. */
		char reason[160];
		tls_conn_error(upconn(c), reason, sizeof(reason));
		log_warnx("TLS with upstream %s server %s failed: %s (request %s)", name, addr,
		    reason, c->request_id);
		proxy_try_error(c, GW_UPSTREAM_TLS, "TLS handshake with upstream %s failed: %s",
		    reason);
		proxy_next_try(c, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
		return;
	}
	if (!(what & CONN_TIMEOUT) && proxy_stale_retry(c))
		return;
	if (what & CONN_TIMEOUT) {
		log_warnx("upstream %s server %s did not answer in time (request %s)", name, addr,
		    c->request_id);
		proxy_try_error(c, GW_UPSTREAM_TIMEOUT, "upstream %s did not answer in time%s", "");
		proxy_next_try(c, FAIL_TIMEOUT, UPSTREAM_RETRY_TIMEOUT);
		return;
	}
	log_warnx("upstream %s server %s closed the connection before answering (request %s)",
	    name, addr, c->request_id);
	proxy_try_error(c, GW_UPSTREAM_UNAVAILABLE,
	    "upstream %s closed the connection before answering%s", "");
	proxy_next_try(c, FAIL_RESET, UPSTREAM_RETRY_RESET);
}

static void
upstream_on_input(struct client *c)
{
	struct upconn *uc = c->ex.uc;

	if (c->resp_head_seen || proxy_read_response_head(c) == 0) {
		if (c->state != CLIENT_BUSY || c->ex.uc != uc)
			return;
		if (c->resp_buffering)
			proxy_collect_response_body(c);
		else if (c->resp_started)
			proxy_forward_response_body(c);
	}
	/* Still waiting for the rest of this answer: a reset may have come with the data. */
	if (c->state == CLIENT_BUSY && c->ex.uc == uc && uc != NULL)
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
	uc = c->ex.uc;
	if ((what & CONN_READ) && c->state == CLIENT_BUSY && uc != NULL)
		upstream_on_input(c);
	if ((what & CONN_DRAINED) && c->state == CLIENT_BUSY && uc != NULL && c->ex.uc == uc)
		upstream_on_drained(c);
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && c->state == CLIENT_BUSY &&
	    uc != NULL && c->ex.uc == uc)
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
	    c->accept_gzip && body_gzip(c->w->bodies, ans->body) == 0 ?
	    "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n" : "");
	len = evbuffer_get_length(ans->body);
	proxy_write_response_head(c, resp, OUT_LENGTH, len, extra);
	if (c->head_request)
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
		c->request_id, c->addr, c->conn.ssl != NULL, &c->conn, &c->pathv
	};

	/* A request body is not read: the connection closes after the answer. */
	if (!c->req_done)
		c->keepalive = 0;
	c->accept_gzip = c->route->compress == COMPRESS_GZIP &&
	    proxy_accepts_gzip(http_find_header(req->headers, req->nheaders, "accept-encoding"));
	conn_read_stop(&c->conn);
	conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
	c->agg = aggregate_start(c->wr, c->route, &ar, proxy_aggregate_done_cb, c);
	evbuffer_drain(c->conn.in, head_len);
	if (c->agg == NULL)
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
}

static void
proxy_end_aggregate(struct client *c)
{
	if (c->agg != NULL) {
		aggregate_end(c->agg);
		c->agg = NULL;
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
		if (c->scan.waiting) {
			client_scan_more(c);
		} else if (c->req_buffering) {
			proxy_collect_request_body(c);
		} else if (c->keep_chunked) {
			proxy_keep_chunked(c);
		} else if (c->buffer_body && !c->req_done) {
			/* The body is kept whole: once it is all here, it goes with the head. */
			if (evbuffer_get_length(c->conn.in) < c->replay_len)
				break;
			c->req_done = 1;
			conn_read_stop(&c->conn);
			if (c->ex.stage == EXCHANGE_ACTIVE && c->ex.uc != NULL)
				proxy_send_request(c);
		} else if (!c->req_done && c->ex.uc != NULL && c->sent) {
			proxy_forward_request_body(c);
		} else if (c->req_done) {
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
	if (c->up_paused && c->ex.uc != NULL) {
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
	if (what == CONN_EOF && c->state == CLIENT_BUSY && c->req_done)
		return;
	if (what == CONN_EOF && c->state == CLIENT_CLOSING && !c->lingering)
		return;         /* still flushing our last response */
	if (c->state == CLIENT_BUSY) {
		/* Logged like nginx: 499 before the response started, else its status, cut short. */
		if (!c->resp_started)
			c->status = 499;
		client_log(c);
	}
	client_free(c);
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

/* Idle keep-alive, a head that did not arrive in time, or a lingering close: close quietly,
 * like nginx. */
static void
client_timer_cb(struct deadline *d, void *arg)
{
	(void)d;
	client_free(arg);
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
	deadline_init(&c->timer, w->timers, client_timer_cb, c);
	if (exchange_init(&c->ex, w, proxy_exchange_cb, c) < 0 ||
	    conn_init(&c->conn, w->timers, fd, client_conn_cb, c) < 0) {
		exchange_free(&c->ex);
		close(fd);
		free(c);
		return -1;
	}
	if (tls != NULL && tls_accept(&c->conn, tls) < 0) {
		conn_close(&c->conn);
		exchange_free(&c->ex);
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
			client_free(c);
	}
}

void
proxy_close_all(struct worker *w)
{
	struct client *c;

	while ((c = LIST_FIRST(&w->clients)) != NULL)
		client_free(c);
}
