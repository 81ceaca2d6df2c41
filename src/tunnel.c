/* A tunnel: the bytes of an upgraded request's two connections, passed across both ways
 * (tunnel.h). */
#include "config.h"
#include "request.h"

#include <sys/socket.h>

#include "tunnel.h"

struct tunnel_end {
	const struct tunnel_end_ops *ops;
	void *arg;
	uint64_t bytes;                 /* taken from it, passed to the other end */
	unsigned eof : 1;               /* it closed its side */
	unsigned shut : 1;              /* its direction from us is ended */
	unsigned paused : 1;            /* not read: the other end has enough queued */
};

struct tunnel {
	struct client *c;
	struct tunnel_end end[2];       /* by enum tunnel_side */
	struct deadline idle;           /* timeouts.tunnel without a byte either way */
	uint64_t idle_ms;
	enum tunnel_close first;        /* who closed first, or NONE */
	enum tunnel_close why;          /* how it ended, once over */
	unsigned over : 1;
};

/* --- an end that is a connection of the worker --------------------------------------- */

struct evbuffer *
tunnel_conn_input(void *arg)
{
	return ((struct conn *)arg)->in;
}

void
tunnel_conn_write(void *arg, struct evbuffer *from, size_t n)
{
	evbuffer_remove_buffer(from, ((struct conn *)arg)->out, n);
}

size_t
tunnel_conn_unsent(void *arg)
{
	return conn_out_left(arg);
}

void
tunnel_conn_reading(void *arg, int on)
{
	if (on)
		conn_read_start(arg);
	else
		conn_read_stop(arg);
}

void
tunnel_conn_drained(void *arg, size_t low)
{
	conn_notify_drained(arg, 1, low);
}

/* TLS has no half-close that both ends of a WebSocket expect: its close_notify ends it. */
int
tunnel_conn_shutdown(void *arg)
{
	struct conn *conn = arg;

	if (conn->ssl != NULL)
		return -1;
	return shutdown(conn->fd, SHUT_WR);
}

int
tunnel_conn_ended(void *arg)
{
	return ((struct conn *)arg)->eof;
}

void
tunnel_conn_close(void *arg, enum tunnel_close why)
{
	(void)why;
	conn_read_stop(arg);
	conn_notify_drained(arg, 0, 0);
}

const struct tunnel_end_ops tunnel_conn_ops = {
	tunnel_conn_input, tunnel_conn_write, tunnel_conn_unsent, tunnel_conn_reading,
	tunnel_conn_drained, tunnel_conn_shutdown, tunnel_conn_ended, tunnel_conn_close
};

/* --- the request ----------------------------------------------------------------------- */

/* 1 when a Connection header of req lists "upgrade". */
static int
tunnel_connection_upgrade(const struct http_request *req)
{
	struct http_str tok;
	const char *p, *end;
	size_t i;

	for (i = 0; i < req->nheaders; i++) {
		if (http_header_kind(&req->headers[i]) != HN_CONNECTION)
			continue;
		p = req->headers[i].value.p;
		end = p + req->headers[i].value.len;
		do {
			p = http_list_next(p, end, &tok);
			if (HTTP_IEQ(tok.p, tok.len, "upgrade"))
				return 1;
		} while (p != NULL);
	}
	return 0;
}

int
tunnel_wanted(const struct client *c, const struct http_request *req)
{
	const struct config_route *route = c->rq->route;

	return req->framing.upgrade && req->version_minor == 1 &&
	    req->method_bit == METHOD_GET && c->rq->up.mode == BODY_NONE &&
	    c->down->upgrade != NULL && c->rq->rpc == NULL && c->rq->agg == NULL &&
	    route->request == NULL && !proxy_has_response_ops(route) &&
	    http_find_header(req->headers, req->nheaders, "upgrade").len != 0 &&
	    tunnel_connection_upgrade(req);
}

int
tunnel_upstream_headers(struct evbuffer *out, const struct http_request *req)
{
	struct http_str v = http_find_header(req->headers, req->nheaders, "upgrade");

	return evbuffer_add_printf(out, "Upgrade: %.*s\r\nConnection: upgrade\r\n", (int)v.len,
	    v.p) < 0 ? -1 : 0;
}

/* --- the tunnel -------------------------------------------------------------------------- */

static void tunnel_idle_cb(struct deadline *d, void *arg);

/* It is over, for why: counted, both ends stopped, and the request ends (the access log
 * line; the upstream connection closes, the session closes the client's after what is
 * queued for it). */
static void
tunnel_finish(struct tunnel *t, enum tunnel_close why)
{
	struct client *c = t->c;

	t->over = 1;
	t->why = why;
	deadline_stop(&t->idle);
	t->end[TUNNEL_CLIENT].ops->close(t->end[TUNNEL_CLIENT].arg, why);
	t->end[TUNNEL_UPSTREAM].ops->close(t->end[TUNNEL_UPSTREAM].arg, why);
	log_debug("tunnel %s: %s (request %s)", c->addr, tunnel_closes[why].text,
	    c->rq->request_id);
	c->rq->ans.up_close = 1;
	client_request_end(c);
}

/* Nothing more goes towards side: its direction ends once what is queued for it went.
 * -1 when the tunnel is over. */
static int
tunnel_shut(struct tunnel *t, enum tunnel_side side)
{
	struct tunnel_end *e = &t->end[side];

	if (e->shut)
		return 0;
	if (e->ops->unsent(e->arg) != 0) {
		e->ops->drained(e->arg, 0);
		return 0;
	}
	if (e->ops->shutdown(e->arg) < 0) {
		tunnel_finish(t, t->first);
		return -1;
	}
	e->shut = 1;
	if (t->end[0].shut && t->end[1].shut) {
		tunnel_finish(t, t->first);
		return -1;
	}
	return 0;
}

/* Pass what came from side to the other end; stop reading side while that end holds more
 * than FLOW_HIGH.  -1 when the tunnel is over. */
static int
tunnel_move(struct tunnel *t, enum tunnel_side from)
{
	struct tunnel_end *src = &t->end[from], *dst = &t->end[!from];
	struct evbuffer *in = src->ops->input(src->arg);
	size_t n = evbuffer_get_length(in);

	if (n != 0) {
		dst->ops->write(dst->arg, in, n);
		src->bytes += n;
		metrics_tunnel_bytes(t->c->w, from == TUNNEL_UPSTREAM, n);
		deadline_start(&t->idle, t->idle_ms);
	}
	if (!src->paused && !src->eof && dst->ops->unsent(dst->arg) > FLOW_HIGH) {
		src->paused = 1;
		src->ops->reading(src->arg, 0);
		dst->ops->drained(dst->arg, FLOW_LOW);
	}
	if (src->eof)
		return tunnel_shut(t, (enum tunnel_side)!from);
	return 0;
}

/* side took what was queued for it, down to the mark asked for. */
static int
tunnel_drained(struct tunnel *t, enum tunnel_side side)
{
	struct tunnel_end *src = &t->end[!side];

	if (src->paused) {
		src->paused = 0;
		src->ops->reading(src->arg, 1);
	}
	if (src->eof)
		return tunnel_shut(t, side);
	return 0;
}

void
tunnel_event(struct tunnel *t, enum tunnel_side side, int what)
{
	struct tunnel_end *e = &t->end[side];

	if (t->over)
		return;
	if ((what & TUNNEL_READ) && tunnel_move(t, side) < 0)
		return;
	if ((what & TUNNEL_DRAINED) && tunnel_drained(t, side) < 0)
		return;
	if (what & TUNNEL_ERROR) {
		tunnel_finish(t, side == TUNNEL_CLIENT ? TUNNEL_CLOSE_CLIENT_ERROR :
		    TUNNEL_CLOSE_UPSTREAM_ERROR);
		return;
	}
	if (what & TUNNEL_TIMEOUT) {
		tunnel_finish(t, TUNNEL_CLOSE_IDLE_TIMEOUT);
		return;
	}
	if ((what & TUNNEL_EOF) && !e->eof) {
		e->eof = 1;
		if (t->first == TUNNEL_CLOSE_NONE)
			t->first = side == TUNNEL_CLIENT ? TUNNEL_CLOSE_CLIENT_CLOSED :
			    TUNNEL_CLOSE_UPSTREAM_CLOSED;
		tunnel_move(t, side);
	}
}

static void
tunnel_idle_cb(struct deadline *d, void *arg)
{
	struct tunnel *t = arg;

	(void)d;
	tunnel_finish(t, TUNNEL_CLOSE_IDLE_TIMEOUT);
}

void
tunnel_attach(struct tunnel *t, enum tunnel_side side, const struct tunnel_end_ops *ops,
    void *arg)
{
	t->end[side].ops = ops;
	t->end[side].arg = arg;
}

int
tunnel_start(struct client *c, struct http_response *resp, size_t head_len)
{
	struct http_str proto = http_find_header(resp->headers, resp->nheaders, "upgrade");
	struct answer_head h;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct tunnel *t;
	int i;

	if (proto.len == 0 || (t = calloc(1, sizeof(*t))) == NULL)
		return -1;
	t->c = c;
	t->first = t->why = TUNNEL_CLOSE_NONE;
	t->idle_ms = client_cfg(c)->timeouts.tunnel;
	deadline_init(&t->idle, c->w->timers, tunnel_idle_cb, t);
	tunnel_attach(t, TUNNEL_UPSTREAM, &tunnel_conn_ops, upconn(c));
	exchange_head_received(&c->rq->t.ex);
	proxy_drop_replay(c);
	c->rq->ans.up_close = 1;
	c->rq->ans.head_seen = 1;
	upconn(c)->read_max = CONN_READ_MAX;
	conn_set_timeouts(upconn(c), 0, 0);
	proxy_answer_head(c, resp, ANSWER_BODYLESS, 0, NULL, &h, &vars, &tls_text);
	/* The status the client gets, for the log: the session may say another (HTTP/2's 200). */
	c->rq->status = resp->status;
	if (c->down->upgrade(c, &h, proto, t) < 0) {
		free(t);
		return -1;
	}
	c->rq->ans.started = 1;
	c->rq->tunnel = t;
	request_drain(c->rq);           /* nothing is sent again: an idle tunnel holds no head */
	evbuffer_drain(upconn(c)->in, head_len);
	metrics_tunnel(c->w, 1);
	deadline_start(&t->idle, t->idle_ms);
	/* What either side sent past the heads, and a close that came with it. */
	for (i = TUNNEL_UPSTREAM; i >= TUNNEL_CLIENT; i--) {
		tunnel_event(t, (enum tunnel_side)i, TUNNEL_READ |
		    (t->end[i].ops->ended(t->end[i].arg) ? TUNNEL_EOF : 0));
		if (c->state != CLIENT_BUSY || c->rq->tunnel != t)
			break;
	}
	return 0;
}

void
tunnel_free(struct client *c)
{
	struct tunnel *t = c->rq->tunnel;

	if (t == NULL)
		return;
	if (!t->over) {
		/* Cut short from outside (the daemon stopping): its line is written here. */
		t->over = 1;
		t->why = c->close_reason == CLIENT_CLOSE_SHUTDOWN || c->w->draining ?
		    TUNNEL_CLOSE_SHUTDOWN : TUNNEL_CLOSE_CLIENT_ERROR;
		deadline_stop(&t->idle);
		client_log(c);
	}
	metrics_tunnel(c->w, -1);
	metrics_tunnel_closed(c->w, t->why);
	c->rq->tunnel = NULL;
	free(t);
}

void
tunnel_log(struct client *c, struct access_entry *e)
{
	struct tunnel *t = c->rq->tunnel;

	if (t == NULL)
		return;
	c->rq->bytes_sent = c->rq->head_sent + t->end[TUNNEL_UPSTREAM].bytes;
	e->tunnel_outcome = t->why >= 0 ? tunnel_closes[t->why].label : "-";
	e->tunnel_received = t->end[TUNNEL_CLIENT].bytes;
}
