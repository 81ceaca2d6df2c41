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
#include "body.h"
#include "conn.h"
#include "errors.h"
#include "headers.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "respond.h"
#include "route.h"
#include "server.h"
#include "tls.h"
#include "upstream.h"

/* Bytes queued towards a slow peer before we stop reading from the other side. */
#define FLOW_HIGH (256 * 1024)
#define FLOW_LOW (64 * 1024)
/* Largest response head accepted from an upstream. */
#define UPSTREAM_MAX_HEAD (64 * 1024)
/* Largest request body kept for sending again on a fresh connection. */
#define REPLAY_MAX_BODY (64 * 1024)

enum client_state {
	CLIENT_IDLE,                    /* waiting for (the rest of) a request head */
	CLIENT_BUSY,                    /* a request is being proxied */
	CLIENT_CLOSING,                 /* flushing the last bytes, then close */
	CLIENT_DEAD                     /* closed; memory freed from the loop */
};

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

enum timer_mode { TIMER_OFF, TIMER_KEEPALIVE, TIMER_HEADER, TIMER_CONNECT, TIMER_LINGER };

struct client {
	LIST_ENTRY(client) entry;
	struct worker *w;
	struct conn conn;
	struct event *timer;
	enum timer_mode timer_mode;
	enum client_state state;
	char addr[INET6_ADDRSTRLEN];

	/* The request in progress. */
	struct worker_runtime *wr;
	const struct config_route *route;
	struct upstream_pool *upool;
	struct server_pool *sp;
	struct upconn *up;
	size_t replay_len;              /* request bytes kept at the front of the input until the
	                                 * response starts, to send again after a stale connection */
	size_t head_len;
	int http_minor;
	unsigned keepalive : 1;
	unsigned idempotent : 1;
	unsigned retried : 1;
	unsigned expect_continue : 1;
	unsigned head_request : 1;
	unsigned req_done : 1;          /* request body fully passed upstream */
	unsigned resp_started : 1;      /* response head sent to the client */
	unsigned up_close : 1;          /* upstream connection not reusable after this response */
	unsigned resp_dechunk : 1;      /* HTTP/1.0 client: strip chunked framing */
	unsigned up_paused : 1;         /* upstream reads stopped: client output is full */
	unsigned client_paused : 1;     /* client reads stopped: upstream output is full */
	unsigned lingering : 1;         /* our side is shut: reading what the client still sends */
	unsigned resp_head_seen : 1;    /* the upstream's final response head was parsed */
	unsigned resp_buffering : 1;    /* collecting a JSON body for the route's envelope ops */
	unsigned resp_rechunk : 1;      /* re-framing a de-chunked body as chunks */
	struct evbuffer *resp_head;     /* the upstream's head, kept while the body is collected */
	struct evbuffer *body;          /* the collected body */
	struct body_block *resp_block;  /* or: a Content-Length body read straight into a block */
	size_t resp_block_len;
	unsigned resp_sinking : 1;      /* the upstream connection reads into resp_block */
	struct evbuffer *req_copy;      /* the request head, for $header.NAME in response ops */
	unsigned req_buffering : 1;     /* collecting a JSON request body for request ops */
	unsigned req_rechunk : 1;       /* re-framing a de-chunked request body as chunks */
	unsigned accept_gzip : 1;       /* compress: gzip route and a client that accepts gzip */
	int64_t req_out_len;            /* Content-Length sent upstream instead of the client's, or -1 */
	struct evbuffer *req_out_body;  /* the rewritten request body to send, or NULL */
	enum body_mode req_mode;
	uint64_t req_left;
	struct http_chunked req_chunk;
	enum body_mode resp_mode;
	uint64_t resp_left;
	struct http_chunked resp_chunk;

	/* For the access log. */
	int status;
	int gw_error;                   /* gateway error answered, or -1 (for metrics) */
	uint64_t bytes_sent;
	struct timespec start;
	char method[16];
	char target[512];
	char request_id[130];
	size_t request_id_len;
	char user_agent[128];
	char referer[128];
};

static void client_process(struct client *c);
static void proxy_forward_request_body(struct client *c);
static void proxy_forward_response_body(struct client *c);
static void proxy_connect(struct client *c);
static void proxy_invalid_response(struct client *c);
static void proxy_collect_response_body(struct client *c);
static void proxy_respond_rewritten(struct client *c);
static void proxy_collect_request_body(struct client *c);
static void proxy_upstream_timeouts(struct client *c);
static void proxy_drop_block(struct client *c);
static int proxy_dechunk(struct http_chunked *ch, struct evbuffer *in, struct evbuffer_iovec vec,
    struct evbuffer *dst);

static const struct config *
client_cfg(const struct client *c)
{
	return (c->wr != NULL ? c->wr : c->w->cur)->rt->cfg;
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
	struct timeval tv;

	c->timer_mode = mode;
	if (mode == TIMER_OFF)
		evtimer_del(c->timer);
	else
		evtimer_add(c->timer, conn_timeout_tv(c->timer, ms, &tv));
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
	if (c->up != NULL) {
		upstream_close(c->up);
		c->up = NULL;
	}
	if (c->wr != NULL) {
		worker_runtime_unref(c->wr);
		c->wr = NULL;
	}
	client_set_state(c, CLIENT_DEAD);
	LIST_REMOVE(c, entry);
	w->nclients--;
	metrics_client(w, -1);
	evtimer_del(c->timer);
	conn_close(&c->conn);
	LIST_INSERT_HEAD(&w->dead, c, entry);
	event_active(w->reaper, EV_TIMEOUT, 0);
	worker_client_closed(w);
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
		event_free(c->timer);
		if (c->resp_head != NULL)
			evbuffer_free(c->resp_head);
		if (c->body != NULL)
			evbuffer_free(c->body);
		if (c->req_copy != NULL)
			evbuffer_free(c->req_copy);
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

static void
client_log(struct client *c)
{
	const struct runtime *rt = (c->wr != NULL ? c->wr : c->w->cur)->rt;
	struct access_entry e;
	struct timespec now;
	char upstream[64];

	client_now(&now);
	metrics_request(c->w, c->route, c->sp != NULL ? c->sp->srv : NULL, c->status, c->gw_error,
	    &c->start, &now);
	if (rt->access.fd < 0)
		return;
	if (c->sp != NULL)
		snprintf(upstream, sizeof(upstream), "%s", c->sp->srv->addr.text);
	else
		strcpy(upstream, "-");
	e.remote_addr = c->addr;
	e.method = c->method;
	e.path = c->target;
	e.status = c->status;
	e.bytes_sent = c->bytes_sent;
	e.upstream = upstream;
	e.route = c->route != NULL ? c->route->name : "-";
	e.duration_ms = (double)(now.tv_sec - c->start.tv_sec) * 1e3 +
	    (double)(now.tv_nsec - c->start.tv_nsec) / 1e6;
	e.request_id = c->request_id;
	e.user_agent = c->user_agent;
	e.referer = c->referer;
	e.http_minor = c->http_minor;
	access_log_write(&rt->access, &e);
}

static void
proxy_drop(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_drain(b, evbuffer_get_length(b));
}

/* Let go of the response body block; the socket layer must not write into it any more. */
static void
proxy_drop_block(struct client *c)
{
	if (c->resp_block == NULL)
		return;
	if (c->up != NULL)
		c->up->conn.sink = NULL;
	c->resp_sinking = 0;
	body_block_release(c->resp_block);
	c->resp_block = NULL;
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
	proxy_drop_block(c);
	if (c->up != NULL) {
		if (c->up_close || !c->req_done)
			upstream_close(c->up);
		else
			upstream_release(c->up);
		c->up = NULL;
	}
	if (c->replay_len != 0) {
		evbuffer_drain(c->conn.in, c->replay_len);
		c->replay_len = 0;
	}
	if (c->wr != NULL) {
		worker_runtime_unref(c->wr);
		c->wr = NULL;
	}
	c->route = NULL;
	c->upool = NULL;
	c->sp = NULL;
	if (c->up_paused || c->client_paused)
		conn_notify_drained(&c->conn, 0, 0);
	c->up_paused = c->client_paused = 0;
	/* A request whose body we did not read to the end leaves the stream unframed. */
	if (!c->keepalive || !c->req_done || w->draining) {
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
		if (c->up != NULL) {
			upstream_close(c->up);
			c->up = NULL;
		}
		client_close_after_flush(c);
		return;
	}
	if (c->up != NULL) {
		upstream_close(c->up);
		c->up = NULL;
	}
	if (must_close || !c->req_done || c->w->draining)
		c->keepalive = 0;
	conn = !c->keepalive ? RESPOND_CONN_CLOSE :
	    c->http_minor == 0 ? RESPOND_CONN_KEEPALIVE : RESPOND_CONN_NONE;
	c->status = gateway_errors[err].status;
	c->bytes_sent += respond_error(c->conn.out, err, message, id, conn);
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

/* Write the upstream request head for req into the upstream's output buffer. */
static int
proxy_write_request_head(struct client *c, const struct http_request *req)
{
	struct worker *w = c->w;
	struct evbuffer *out = c->up->conn.out;
	struct headers_forward fw;
	char framing[64], *p;
	int n;

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
	if (headers_request_out(out, req, &fw) < 0)
		return -1;
	p = framing;
	if (c->req_out_len >= 0)
		p = put_content_length(p, (uint64_t)c->req_out_len);
	else if (req->framing.chunked)
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
	else if (req->framing.content_length >= 0)
		p = put_content_length(p, (uint64_t)req->framing.content_length);
	p = put_lit(p, "\r\n");
	n = (int)(p - framing);
	return evbuffer_add(out, framing, (size_t)n);
}

static enum gateway_error
parse_error_to_gateway(ssize_t r)
{
	switch (r) {
	case HTTP_ERR_TOO_MANY_HEADERS: return GW_HEADER_TOO_LARGE;
	case HTTP_ERR_VERSION: return GW_VERSION_NOT_SUPPORTED;
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

/* The $variables of `set` for this request (request headers are the caller's to add). */
static void
proxy_vars(struct client *c, const struct rewrite_program *prog, struct rewrite_vars *vars,
    struct body_tls_text *tls_text)
{
	memset(vars, 0, sizeof(*vars));
	vars->request_id.p = c->request_id;
	vars->request_id.len = c->request_id_len;
	vars->route.p = c->route->name;
	vars->route.len = strlen(c->route->name);
	vars->upstream.p = c->sp->srv->addr.text;
	vars->upstream.len = strlen(c->sp->srv->addr.text);
	vars->remote_addr.p = c->addr;
	vars->remote_addr.len = strlen(c->addr);
	vars->now = (long long)time(NULL);
	body_tls_vars(prog, &c->conn, vars, tls_text);
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

/* Request ops: take the body in first (its head is kept in req_copy), then connect. */
static void
proxy_start_request_collect(struct client *c)
{
	const struct config *cfg = client_cfg(c);

	if (c->body == NULL && (c->body = evbuffer_new()) == NULL) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	evbuffer_drain(c->body, evbuffer_get_length(c->body));
	evbuffer_drain(c->conn.in, c->replay_len);
	c->replay_len = 0;
	c->req_buffering = 1;
	/* The server is chosen now so that $upstream names it in request ops too. */
	if ((c->sp = upstream_pick(c->upool)) == NULL) {
		client_error(c, GW_UPSTREAM_UNAVAILABLE, "upstream has no servers", 0);
		return;
	}
	/* Nothing upstream will ask for the body: invite it ourselves. */
	if (c->expect_continue && c->http_minor == 1) {
		c->expect_continue = 0;
		evbuffer_add(c->conn.out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	}
	conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
	conn_read_start(&c->conn);
	proxy_collect_request_body(c);
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
		evbuffer_remove_buffer(in, c->body, n);
		c->req_left -= n;
		c->req_done = c->req_left == 0;
	} else {
		while (!c->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 && vec.iov_len > 0) {
			r = proxy_dechunk(&c->req_chunk, in, vec, c->body);
			if (r == HTTP_CHUNKED_ERROR) {
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return;
			}
			c->req_done = r == HTTP_CHUNKED_DONE;
		}
	}
	ql = evbuffer_get_length(c->req_copy);
	if (evbuffer_get_length(c->body) > cfg->limits.max_body) {
		/* Only a chunked body gets here: its size was not known up front. */
		metrics_envelope(w, c->route, METRICS_REQUEST,
		    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
		if (c->route->on_error == ON_ERROR_FAIL) {
			client_error(c, GW_PAYLOAD_TOO_LARGE, NULL, 1);
			return;
		}
		/* pass: send what we have as one chunk and re-chunk the rest as it comes. */
		c->req_buffering = 0;
		c->req_rechunk = 1;
		http_parse_request((const char *)evbuffer_pullup(c->req_copy, (ev_ssize_t)ql), ql, req);
		char size_line[24];
		int sl = snprintf(size_line, sizeof(size_line), "%zx\r\n",
		    evbuffer_get_length(c->body));
		evbuffer_prepend(c->body, size_line, (size_t)sl);
		evbuffer_add(c->body, "\r\n", 2);
		if (c->req_done)
			evbuffer_add(c->body, "0\r\n\r\n", 5);
		c->req_out_body = c->body;
		proxy_connect(c);
		return;
	}
	if (!c->req_done)
		return;

	c->req_buffering = 0;
	conn_read_stop(&c->conn);
	conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
	http_parse_request((const char *)evbuffer_pullup(c->req_copy, (ev_ssize_t)ql), ql, req);
	if (evbuffer_get_length(c->body) == 0) {
		/* An empty body is no JSON document: like Content-Length: 0, nothing to rewrite. */
		metrics_envelope(w, c->route, METRICS_REQUEST, METRICS_PASSED);
		c->req_out_body = c->body;
		c->req_out_len = 0;
		proxy_connect(c);
		return;
	}
	proxy_vars(c, c->route->request, &vars, &tls_text);
	vars.headers = req->headers;
	vars.nheaders = req->nheaders;
	if (body_apply(w->bodies, cfg, c->route, c->route->request,
	    body_coding(http_find_header(req->headers, req->nheaders, "content-encoding")), c->body, &vars,
	    w->rewritten, &res) < 0) {
		snprintf(msg, sizeof(msg), "request body not rewritten: %s", res.error);
		log_warnx("route %s: %s (request %s)", c->route->name, msg, c->request_id);
		evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
		metrics_envelope(w, c->route, METRICS_REQUEST,
		    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
		if (c->route->on_error == ON_ERROR_FAIL) {
			client_error(c, GW_INVALID_JSON, msg, 0);
			return;
		}
		c->req_out_body = c->body;      /* pass: the client's bytes, untouched */
	} else {
		metrics_envelope(w, c->route, METRICS_REQUEST, METRICS_APPLIED);
		metrics_bytes(w, res.spliced, res.copied);
		c->req_out_body = w->rewritten;
		if (res.inflated)
			proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
	}
	c->req_out_len = (int64_t)evbuffer_get_length(c->req_out_body);
	proxy_connect(c);
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

/* Response ops may read request headers ($header.NAME) after the head has left the input. */
static int
proxy_keep_request_head(struct client *c, size_t len)
{
	if (c->req_copy == NULL && (c->req_copy = evbuffer_new()) == NULL)
		return -1;
	evbuffer_drain(c->req_copy, evbuffer_get_length(c->req_copy));
	return evbuffer_add(c->req_copy, evbuffer_pullup(c->conn.in, (ev_ssize_t)len), len);
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
	int mismatch = 0;

	/* Empty lines before a request line are ignored (RFC 9112, 2.2). */
	while ((len = evbuffer_get_length(in)) != 0) {
		unsigned char ch;
		evbuffer_copyout(in, &ch, 1);
		if (ch != '\r' && ch != '\n')
			break;
		evbuffer_drain(in, 1);
	}
	if (len == 0)
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
	c->resp_started = 0;
	c->req_buffering = 0;
	c->req_rechunk = 0;
	c->req_out_len = -1;
	c->req_out_body = NULL;
	c->resp_head_seen = 0;
	c->resp_buffering = 0;
	c->resp_rechunk = 0;
	c->retried = 0;
	c->up_close = 0;
	c->req_done = 1;
	c->keepalive = 0;
	c->http_minor = 1;
	c->route = NULL;
	c->sp = NULL;
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
	c->idempotent = (req->method_bit & (METHOD_GET | METHOD_HEAD | METHOD_PUT |
	    METHOD_DELETE | METHOD_OPTIONS | METHOD_TRACE)) != 0;
	client_body_framing(c, req);
	client_new_request_id(c, req);
	c->accept_gzip = 0;
	if (w->cur->rt->access.fd >= 0)
		client_remember_for_log(c, req);

	c->route = route_match(cfg, req->host.p, req->host.len, req->path.p, req->path.len,
	    req->method_bit, &mismatch);
	if (c->route == NULL) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, mismatch ? GW_METHOD_NOT_ALLOWED : GW_NO_ROUTE, NULL, 0);
		return;
	}
	c->wr = w->cur;
	worker_runtime_ref(c->wr);
	c->upool = &c->wr->pools[c->route->upstream - cfg->upstreams];
	c->replay_len = c->head_len = (size_t)r;
	c->accept_gzip = c->route->compress == COMPRESS_GZIP && c->route->response != NULL &&
	    proxy_accepts_gzip(http_find_header(req->headers, req->nheaders, "accept-encoding"));
	if ((c->route->request != NULL || body_needs_headers(c->route->response)) &&
	    proxy_keep_request_head(c, (size_t)r) < 0) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	if (c->route->request != NULL && c->req_mode != BODY_NONE &&
	    body_is_json(c->route, http_find_header(req->headers, req->nheaders, "content-type"))) {
		if (c->req_mode == BODY_LENGTH && c->req_left > cfg->limits.max_body) {
			metrics_envelope(w, c->route, METRICS_REQUEST,
			    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
			if (c->route->on_error == ON_ERROR_FAIL) {
				client_error(c, GW_PAYLOAD_TOO_LARGE, NULL, 1);
				return;
			}
		}
		if (c->req_mode == BODY_CHUNKED || c->req_left <= cfg->limits.max_body) {
			proxy_start_request_collect(c);
			return;
		}
	}
	proxy_connect(c);
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
	if (c->up != NULL)
		conn_flush(&c->up->conn);
}

static void
client_on_input(struct client *c)
{
	switch (c->state) {
	case CLIENT_IDLE:
		client_process(c);
		break;
	case CLIENT_BUSY:
		if (c->req_buffering)
			proxy_collect_request_body(c);
		else if (!c->req_done && c->up != NULL && c->replay_len == 0)
			proxy_forward_request_body(c);
		else if (c->req_done)
			conn_read_stop(&c->conn);   /* pipelined: wait our turn */
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
	if (c->up_paused && c->up != NULL) {
		c->up_paused = 0;
		conn_read_start(&c->up->conn);
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

static void
client_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	char msg[160];

	(void)fd;
	(void)what;
	switch (c->timer_mode) {
	case TIMER_CONNECT:
		c->timer_mode = TIMER_OFF;
		snprintf(msg, sizeof(msg), "connect to %s timed out", c->sp->srv->addr.text);
		client_error(c, GW_UPSTREAM_TIMEOUT, msg, 0);
		proxy_flush(c);
		break;
	default:
		/* Idle keep-alive or a head that did not arrive in time: close quietly, like nginx. */
		client_free(c);
		break;
	}
}

/* --- upstream side -------------------------------------------------------------------- */

static void
proxy_retry_or_fail(struct client *c, enum gateway_error err, const char *msg)
{
	struct evbuffer *in = c->conn.in;
	ssize_t r;

	/* A pooled connection may have been closed by the server while idle: the request never
	 * reached it, so an idempotent request without a body can go again on a new connection. */
	if (c->up->reused && !c->retried && c->idempotent && c->replay_len != 0) {
		upstream_close(c->up);
		c->up = NULL;
		c->retried = 1;
		r = http_parse_request((const char *)evbuffer_pullup(in, (ev_ssize_t)c->replay_len),
		    c->replay_len, &c->w->req);
		if (r == (ssize_t)c->head_len) {
			client_body_framing(c, &c->w->req);
			c->replay_len = c->head_len;
			proxy_connect(c);
			return;
		}
	}
	client_error(c, err, msg, 0);
}

static void
proxy_upstream_failed(struct client *c, short what)
{
	const char *addr = c->sp->srv->addr.text;
	char msg[256];
	int err = c->up->conn.error;

	if (c->resp_buffering && c->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
		c->up_close = 1;
		proxy_collect_response_body(c);
		if (c->state == CLIENT_BUSY && c->resp_buffering)
			proxy_respond_rewritten(c);
		return;
	}
	if (c->resp_head_seen && !c->resp_started) {
		log_warnx("upstream %s failed in the middle of a response (request %s)", addr,
		    c->request_id);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, NULL, 0);
		return;
	}
	if (c->resp_started) {
		if (c->resp_mode == BODY_UNTIL_CLOSE && (what & CONN_EOF)) {
			proxy_forward_response_body(c);
			if (c->state == CLIENT_BUSY && c->up != NULL) {
				c->up_close = 1;
				client_request_end(c);
			}
			return;
		}
		log_warnx("upstream %s failed in the middle of a response (request %s)", addr,
		    c->request_id);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, NULL, 1);
		return;
	}
	if (what & CONN_TIMEOUT) {
		snprintf(msg, sizeof(msg), "upstream %s did not answer in time", addr);
		client_error(c, GW_UPSTREAM_TIMEOUT, msg, 0);
	} else if (c->up->conn.tls_failed) {
		client_timer_set(c, TIMER_OFF, 0);
		tls_conn_error(&c->up->conn, msg, sizeof(msg));
		log_warnx("TLS handshake with upstream %s failed: %s (request %s)", addr, msg,
		    c->request_id);
		client_error(c, GW_UPSTREAM_TLS, msg, 0);
	} else if (c->timer_mode == TIMER_CONNECT) {
		client_timer_set(c, TIMER_OFF, 0);
		if (err == ECONNREFUSED)
			snprintf(msg, sizeof(msg), "connect to %s refused", addr);
		else
			snprintf(msg, sizeof(msg), "connect to %s failed: %s", addr,
			    err ? strerror(err) : "connection closed");
		log_warnx("%s (request %s)", msg, c->request_id);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, msg, 0);
	} else {
		snprintf(msg, sizeof(msg), "upstream %s closed the connection before answering",
		    addr);
		proxy_retry_or_fail(c, GW_UPSTREAM_UNAVAILABLE, msg);
	}
}

static void
proxy_invalid_response(struct client *c)
{
	char msg[160];

	snprintf(msg, sizeof(msg), "malformed response from upstream %s", c->sp->srv->addr.text);
	log_warnx("%s (request %s)", msg, c->request_id);
	client_error(c, GW_UPSTREAM_INVALID, msg, 0);
}

enum out_framing { OUT_NONE, OUT_LENGTH, OUT_CHUNKED };

/* Write our response head for resp: its headers, our framing and connection handling. */
static void
proxy_write_response_head(struct client *c, struct http_response *resp,
    enum out_framing framing, uint64_t length, const char *extra)
{
	struct evbuffer *out = c->conn.out;
	struct http_str id = { c->request_id, c->request_id_len };
	char tail[96], *p = tail;
	size_t before = evbuffer_get_length(out);
	int n;

	if (headers_response_out(out, resp, id) < 0)
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
	c->bytes_sent += evbuffer_get_length(out) - before;
	c->status = resp->status;
	c->resp_started = 1;
}

/* 1: collect this response body for the route's ops; 0: stream it; -1: answered already. */
static int
proxy_wants_body(struct client *c, const struct http_response *resp)
{
	const struct config *cfg = client_cfg(c);

	if (c->resp_mode == BODY_NONE ||
	    !body_is_json(c->route, http_find_header(resp->headers, resp->nheaders, "content-type")) ||
	    body_coding(http_find_header(resp->headers, resp->nheaders, "content-encoding")) == BODY_CODING_OTHER)
		return 0;
	if (c->resp_mode == BODY_LENGTH && c->resp_left > cfg->limits.max_body) {
		metrics_envelope(c->w, c->route, METRICS_RESPONSE,
		    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
		if (c->route->on_error == ON_ERROR_PASS)
			return 0;
		client_error(c, GW_UPSTREAM_INVALID, "upstream response body exceeds limits.max_body",
		    0);
		return -1;
	}
	return 1;
}

/* Parse the upstream's response head and send ours to the client. Returns 0 when started. */
static int
proxy_read_response_head(struct client *c)
{
	struct evbuffer *in = c->up->conn.in;
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

	/* The request head is no longer needed for a retry. */
	if (c->replay_len != 0) {
		evbuffer_drain(c->conn.in, c->replay_len);
		c->replay_len = 0;
	}
	c->status = resp->status;
	if (c->head_request || resp->status == 204 || resp->status == 304)
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

	if (c->route->response != NULL) {
		int collect = proxy_wants_body(c, resp);
		if (collect < 0)
			return -1;
		if (collect) {
			/* Envelope ops: keep the head, collect the body, answer when it is all here. */
			if ((c->resp_head == NULL && (c->resp_head = evbuffer_new()) == NULL) ||
			    (c->body == NULL && (c->body = evbuffer_new()) == NULL)) {
				client_error(c, GW_UPSTREAM_INVALID, "out of memory", 0);
				return -1;
			}
			evbuffer_drain(c->resp_head, evbuffer_get_length(c->resp_head));
			evbuffer_drain(c->body, evbuffer_get_length(c->body));
			evbuffer_remove_buffer(in, c->resp_head, (size_t)r);
			if (c->resp_mode == BODY_LENGTH && c->up->conn.ssl == NULL) {
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
	return 0;
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
	struct evbuffer *in = c->up->conn.in;
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
			    c->sp->srv->addr.text, c->request_id);
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
		conn_read_stop(&c->up->conn);
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
	metrics_envelope(c->w, c->route, METRICS_RESPONSE,
	    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
	if (c->route->on_error == ON_ERROR_FAIL) {
		client_error(c, GW_UPSTREAM_INVALID, "upstream response body exceeds limits.max_body",
		    0);
		return;
	}
	http_parse_response((const char *)evbuffer_pullup(c->resp_head, (ev_ssize_t)hl), hl, resp);
	c->resp_buffering = 0;
	if (c->resp_mode == BODY_CHUNKED && c->http_minor == 1) {
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
	struct http_request *req = &w->req;
	const struct config *cfg = client_cfg(c);
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	size_t hl = evbuffer_get_length(c->resp_head), ql;
	enum body_coding coding;
	char msg[256];
	int rc;

	http_parse_response((const char *)evbuffer_pullup(c->resp_head, (ev_ssize_t)hl), hl, resp);
	proxy_vars(c, c->route->response, &vars, &tls_text);
	ql = c->req_copy != NULL && body_needs_headers(c->route->response) ?
	    evbuffer_get_length(c->req_copy) : 0;
	if (ql != 0 && http_parse_request((const char *)evbuffer_pullup(c->req_copy,
	    (ev_ssize_t)ql), ql, req) > 0) {
		vars.headers = req->headers;
		vars.nheaders = req->nheaders;
	}
	c->resp_buffering = 0;
	coding = body_coding(http_find_header(resp->headers, resp->nheaders, "content-encoding"));
	if (c->resp_block != NULL)
		rc = body_apply_block(w->bodies, cfg, c->route, c->route->response, coding,
		    c->resp_block, c->resp_block_len, &vars, w->rewritten, &res);
	else if (evbuffer_get_length(c->body) != 0)
		rc = body_apply(w->bodies, cfg, c->route, c->route->response, coding, c->body, &vars,
		    w->rewritten, &res);
	else
		rc = 1;
	if (rc == 1) {
		/* An empty body is no JSON document: like Content-Length: 0, nothing to rewrite. */
		metrics_envelope(w, c->route, METRICS_RESPONSE, METRICS_PASSED);
		proxy_write_response_head(c, resp, OUT_LENGTH, 0, NULL);
	} else if (rc < 0) {
		snprintf(msg, sizeof(msg), "response body not rewritten: %s", res.error);
		log_warnx("route %s: %s (request %s)", c->route->name, msg, c->request_id);
		evbuffer_drain(w->rewritten, evbuffer_get_length(w->rewritten));
		metrics_envelope(w, c->route, METRICS_RESPONSE,
		    c->route->on_error == ON_ERROR_FAIL ? METRICS_FAILED : METRICS_PASSED);
		if (c->route->on_error == ON_ERROR_FAIL) {
			client_error(c, GW_UPSTREAM_INVALID, msg, 0);
			return;
		}
		/* pass: the upstream's status and bytes, untouched */
		if (c->resp_block != NULL)
			body_block_add_to(c->body, c->resp_block, c->resp_block_len);
		proxy_write_response_head(c, resp, OUT_LENGTH, evbuffer_get_length(c->body), NULL);
		proxy_move(c, c->body, c->conn.out, evbuffer_get_length(c->body));
	} else {
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
		proxy_move(c, w->rewritten, c->conn.out, evbuffer_get_length(w->rewritten));
	}
	if (c->up != NULL && evbuffer_get_length(c->up->conn.in) != 0)
		c->up_close = 1;
	client_request_end(c);
}

/* A Content-Length body goes into one block: what came with the head is copied, the rest
 * is read by the socket layer straight into place. */
static void
proxy_collect_into_block(struct client *c)
{
	struct conn *uc = &c->up->conn;
	char *data = body_block_data(c->resp_block);
	size_t n;

	if (c->resp_sinking)
		c->resp_left = uc->sink_left;
	n = evbuffer_get_length(uc->in);
	if (n > c->resp_left)
		n = (size_t)c->resp_left;
	if (n != 0) {
		evbuffer_remove(uc->in, data + c->resp_block_len - c->resp_left, n);
		c->resp_left -= n;
	}
	if (c->resp_left == 0) {
		uc->sink = NULL;
		c->resp_sinking = 0;
	} else if (!c->resp_sinking) {
		uc->sink = data + c->resp_block_len - c->resp_left;
		uc->sink_left = (size_t)c->resp_left;
		c->resp_sinking = 1;
	}
}

/* Collect the response body for envelope ops, de-chunked, up to limits.max_body. */
static void
proxy_collect_response_body(struct client *c)
{
	struct evbuffer *in = c->up->conn.in;
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

static void
upstream_on_input(struct client *c)
{
	if (!c->resp_head_seen && proxy_read_response_head(c) < 0)
		return;
	if (c->state != CLIENT_BUSY || c->up == NULL)
		return;
	if (c->resp_buffering)
		proxy_collect_response_body(c);
	else if (c->resp_started)
		proxy_forward_response_body(c);
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
upstream_conn_cb(struct conn *conn, int what, void *arg)
{
	struct client *c = arg;
	struct upconn *uc = c->up;

	(void)conn;
	if (what & CONN_CONNECTED) {
		client_timer_set(c, TIMER_OFF, 0);
		proxy_upstream_timeouts(c);
	}
	if (what & CONN_READ)
		upstream_on_input(c);
	/* Each step may end the exchange and hand the connection back, or close the client. */
	if ((what & CONN_DRAINED) && c->state == CLIENT_BUSY && c->up == uc)
		upstream_on_drained(c);
	if ((what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) && c->state == CLIENT_BUSY &&
	    c->up == uc)
		proxy_upstream_failed(c, what);
	proxy_flush(c);
}

/* upstream_response bounds the wait for the answer once the request is sent (as nginx's
 * proxy_read_timeout), and each stalled write of the request meanwhile. */
static void
proxy_upstream_timeouts(struct client *c)
{
	uint64_t ms = client_cfg(c)->timeouts.upstream_response;

	conn_set_timeouts(&c->up->conn, c->req_done ? ms : 0, ms);
}

/* Pass request body bytes from the client to the upstream as they arrive. */
static void
proxy_forward_request_body(struct client *c)
{
	struct evbuffer *in = c->conn.in;
	struct evbuffer *out = c->up->conn.out;
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
		while (!c->req_done && evbuffer_peek(in, -1, NULL, &vec, 1) > 0 &&
		    vec.iov_len > 0) {
			r = http_chunked_feed(&c->req_chunk, vec.iov_base, vec.iov_len, &consumed,
			    &off, &dlen);
			if (r == HTTP_CHUNKED_ERROR) {
				c->up_close = 1;
				client_error(c, GW_BAD_REQUEST, NULL, 1);
				return;
			}
			if (!c->req_rechunk) {
				evbuffer_remove_buffer(in, out, consumed);
			} else if (r == HTTP_CHUNKED_DATA) {
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
		conn_notify_drained(&c->up->conn, 1, FLOW_LOW);
	}
}

/* Send the request head (and any body bytes already here) on c->up. */
static void
proxy_send_request(struct client *c)
{
	const struct config *cfg = client_cfg(c);

	conn_set_cb(&c->up->conn, upstream_conn_cb, c);
	if (proxy_write_request_head(c, &c->w->req) < 0) {
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	if (c->req_out_body != NULL) {
		evbuffer_add_buffer(c->up->conn.out, c->req_out_body);
		c->req_out_body = NULL;
	}
	if (!c->req_done && c->up->reused && c->idempotent && c->req_mode == BODY_LENGTH &&
	    c->req_left <= REPLAY_MAX_BODY &&
	    evbuffer_get_length(c->conn.in) >= c->head_len + c->req_left) {
		/* A small body that is all here: send a copy and keep it in case the pooled
		 * connection turns out to be stale. */
		size_t body = (size_t)c->req_left;
		const unsigned char *p = evbuffer_pullup(c->conn.in, (ev_ssize_t)(c->head_len + body));
		evbuffer_add(c->up->conn.out, p + c->head_len, body);
		c->replay_len = c->head_len + body;
		c->req_left = 0;
		c->req_done = 1;
	}
	if (!c->req_done) {
		/* The body follows the head in the input: the head can go now. */
		evbuffer_drain(c->conn.in, c->replay_len);
		c->replay_len = 0;
		conn_set_timeouts(&c->conn, cfg->timeouts.client_body, cfg->timeouts.client_body);
		conn_read_start(&c->conn);
		proxy_forward_request_body(c);
		if (c->state != CLIENT_BUSY || c->up == NULL)
			return;
	} else {
		conn_read_stop(&c->conn);
		conn_set_timeouts(&c->conn, 0, cfg->timeouts.client_body);
		proxy_upstream_timeouts(c);
	}
	conn_read_start(&c->up->conn);
}

static void
proxy_connect(struct client *c)
{
	const struct config *cfg = client_cfg(c);
	char msg[160];

	if (c->sp == NULL || c->retried)
		c->sp = upstream_pick(c->upool);
	if (c->sp == NULL) {
		client_error(c, GW_UPSTREAM_UNAVAILABLE, "upstream has no servers", 0);
		return;
	}
	if (!c->retried && (c->up = upstream_take_idle(c->sp)) != NULL) {
		proxy_upstream_timeouts(c);
		proxy_send_request(c);
		return;
	}
	c->up = upstream_connect(c->sp, c->w->base, upstream_conn_cb, c);
	if (c->up == NULL) {
		snprintf(msg, sizeof(msg), "connect to %s failed: %s", c->sp->srv->addr.text,
		    strerror(errno));
		log_warnx("%s (request %s)", msg, c->request_id);
		client_error(c, GW_UPSTREAM_UNAVAILABLE, msg, 0);
		return;
	}
	client_timer_set(c, TIMER_CONNECT, cfg->timeouts.upstream_connect);
	proxy_send_request(c);
}

/* --- accept, drain ---------------------------------------------------------------------- */

void
proxy_accept(struct worker *w, int fd, struct sockaddr *sa, int salen,
    struct tls_server *tls)
{
	const struct config *cfg = w->cur->rt->cfg;
	struct client *c;

	(void)salen;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return;
	}
	c->w = w;
	c->timer = evtimer_new(w->base, client_timer_cb, c);
	if (c->timer == NULL || conn_init(&c->conn, w->base, fd, client_conn_cb, c) < 0) {
		if (c->timer != NULL)
			event_free(c->timer);
		close(fd);
		free(c);
		return;
	}
	if (tls != NULL && tls_accept(&c->conn, tls) < 0) {
		conn_close(&c->conn);
		event_free(c->timer);
		free(c);
		return;
	}
	if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, c->addr,
		    sizeof(c->addr));
	else
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, c->addr, sizeof(c->addr));
	LIST_INSERT_HEAD(&w->clients, c, entry);
	metrics_client(w, 1);
	if (++w->nclients >= w->max_clients)
		worker_set_accepting(w, 0);
	c->conn.read_max = FLOW_HIGH;
	client_set_state(c, CLIENT_IDLE);
	client_timer_set(c, TIMER_HEADER, cfg->timeouts.client_header);
	conn_read_start(&c->conn);
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
