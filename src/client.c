/* The HTTP/1.1 session of a client connection: reading heads, pipelining (a turn
 * at a time, waiting for a client that does not read), keep-alive, lingering close, and every
 * close with its reason. */
#include "config.h"
#include "request.h"

#include "h2.h"

/*
 * Handle the requests whose heads lead the input, one after the other: in a loop, never by
 * recursion (20,000 pipelined requests in one read must not grow the stack), at most
 * PIPELINE_TURN in one turn, and none while the client has not read PIPELINE_HIGH of its
 * answers.  A request that ends inside the loop leaves the next one to it.
 */
static void client_process(struct client *c);

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
	/* The request stays the client's until the reaper: callers may still look. */
	if (c->rq != NULL)
		request_abort(c);
	if (c->h2 != NULL)
		h2_free(c->h2);
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
	    ((c->rq == NULL || c->rq->up.done) && evbuffer_get_length(c->conn.in) == 0 &&
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
void
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
	if (conn_out_left(&c->conn) == 0) {
		client_close_now(c);
		return;
	}
	conn_notify_drained(&c->conn, 1, 0);
	/* A peer that never reads must not hold the connection forever. */
	conn_set_timeouts(&c->conn, 0, client_cfg(c)->timeouts.client_body);
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

/* A request begins on c (its head is here, or what came of it is all that will).  0, or -1
 * when c was closed. */
static int
client_request_begin(struct client *c)
{
	if (request_begin(c) < 0) {
		log_errorx("out of memory for a request from %s", c->addr);
		client_free(c, CLIENT_CLOSE_OUT_OF_MEMORY);
		return -1;
	}
	client_set_state(c, CLIENT_BUSY);
	client_timer_set(c, TIMER_OFF, 0);
	c->keepalive = 0;
	c->http_minor = 1;
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
			if (len >= c->conn.read_max)
				conn_set_read_max(&c->conn, cfg->limits.max_header);
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
	if (req->framing.chunked)
		http_chunked_init(&c->body_chunk);
	/* timeouts.keepalive: 0 disables keep-alive: every answer says Connection: close. */
	c->keepalive = cfg->timeouts.keepalive != 0 && (req->version_minor == 1 ?
	    !req->framing.conn_close : req->framing.conn_keepalive && !req->framing.conn_close);
	request_take_head(c, req, p, (size_t)r);
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

static void
client_process(struct client *c)
{
	unsigned handled = 0;
	size_t before;

	if (c->processing)
		return;
	c->processing = 1;
	while (c->state == CLIENT_IDLE && (before = evbuffer_get_length(c->conn.in)) != 0) {
		if (conn_out_left(&c->conn) > PIPELINE_HIGH) {
			conn_flush(&c->conn);
			if (conn_out_left(&c->conn) > PIPELINE_HIGH) {
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
void
proxy_flush(struct client *c)
{
	if (c->state == CLIENT_DEAD)
		return;
	c->down->flush(c);
	if (c->rq != NULL && c->rq->t.ex.uc != NULL)
		conn_flush(upconn(c));
}

static void
client_flush(struct client *c)
{
	conn_flush(&c->conn);
}

void
client_idle(struct client *c, int on)
{
	if (on)
		client_timer_set(c, TIMER_KEEPALIVE, client_cfg(c)->timeouts.keepalive);
	else
		client_timer_set(c, TIMER_OFF, 0);
}

/* A listener that takes HTTP/2: ALPN chose it, or the first bytes are its preface.  1 when
 * the connection is HTTP/2 now, -1 when it was closed, 0 when it stays HTTP/1.1. */
static int
client_choose_protocol(struct client *c)
{
	int h2 = c->conn.ssl != NULL ? tls_alpn_is_h2(&c->conn) : h2_preface(c->conn.in);

	if (h2 < 0)
		return 1;       /* a part of the preface: wait for the rest */
	c->h2_possible = 0;
	if (h2 == 0)
		return 0;
	if (h2_start(c) < 0) {
		client_free(c, CLIENT_CLOSE_OUT_OF_MEMORY);
		return -1;
	}
	return 1;
}

static void
client_on_input(struct client *c)
{
	switch (c->state) {
	case CLIENT_IDLE:
		client_process(c);
		break;
	case CLIENT_BUSY:
		request_body_in(c);
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
		if (conn_out_left(&c->conn) == 0 && !c->lingering)
			client_close_now(c);
		return;
	}
	if (c->out_paused) {
		client_reader_caught_up(c);
		return;
	}
	if (c->up_paused && c->rq != NULL) {
		c->up_paused = 0;
		proxy_answer_drained(c);
	}
}

/* The client closed its side or the connection failed. */
static void
client_on_close(struct client *c, int what)
{
	/* A half-close after a complete request: answer it (and any pipelined ones), then close. */
	if (what == CONN_EOF && c->state == CLIENT_BUSY && c->rq->up.done)
		return;
	if (what == CONN_EOF && c->state == CLIENT_CLOSING && !c->lingering)
		return;         /* still flushing our last response */
	if (what == CONN_EOF && c->state == CLIENT_IDLE && (c->out_paused || c->resume_queued))
		return;         /* its pipeline is still being answered */
	if (c->state == CLIENT_BUSY) {
		/* Logged like nginx: 499 before the response started, else its status, cut short. */
		if (!c->rq->ans.started)
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
	enum client_close why;

	(void)conn;
	if (c->h2_possible && (what & CONN_READ) && c->state == CLIENT_IDLE) {
		int h2 = client_choose_protocol(c);

		if (h2 < 0)
			return;
		if (h2 > 0 && c->h2 == NULL)
			what &= ~CONN_READ;     /* a part of the preface: the rest decides */
	}
	if (c->h2 != NULL) {
		if ((why = h2_conn_event(c->h2, what)) != CLIENT_CLOSE_NONE)
			client_free(c, why);
		return;
	}
	if (c->state == CLIENT_BUSY && c->rq->tunnel != NULL) {
		tunnel_event(c->rq->tunnel, TUNNEL_CLIENT, what);
		proxy_flush(c);
		return;
	}
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

/* --- the request's input ---------------------------------------------------------------- */

static void
client_read_body(struct client *c, enum body_reading how)
{
	uint64_t ms = client_cfg(c)->timeouts.client_body;

	switch (how) {
	case BODY_READING:
		conn_set_timeouts(&c->conn, ms, ms);
		conn_read_start(&c->conn);
		break;
	case BODY_PAUSED:
		conn_read_stop(&c->conn);
		break;
	case BODY_IGNORED:
		/* A body left unread leaves the stream unframed. */
		if (!c->rq->up.done)
			c->keepalive = 0;
		/* fall through */
	case BODY_WAITING:
		conn_read_stop(&c->conn);
		conn_set_timeouts(&c->conn, 0, ms);
		break;
	}
}

static void
client_input_room(struct client *c, size_t n)
{
	conn_set_read_max(&c->conn, n != 0 ? n : FLOW_HIGH);
}

/*
 * The h1 body reader: the next run of a chunked body's payload at cur->at in the input,
 * through cur's decoder, cur->at moved past it (and past the framing before it).  Chunk
 * extensions and trailers stop here.  An enum body_run.
 */
static int
client_body_run(struct client *c, struct body_cursor *cur, const char **p, size_t *n)
{
	struct http_chunk_piece piece;
	int r;

	for (;;) {
		r = http_chunked_next(&cur->ch, c->conn.in, cur->at, (size_t)-1, &piece);
		if (r == HTTP_CHUNKED_NONE)
			return BODY_RUN_NONE;
		if (r == HTTP_CHUNKED_ERROR)
			return BODY_RUN_BAD;
		cur->at += piece.consumed;
		if (r == HTTP_CHUNKED_DATA) {
			/* A run ends its piece: the framing after it is the next piece's. */
			*p = piece.data;
			*n = piece.data_len;
			return BODY_RUN_DATA;
		}
		if (r == HTTP_CHUNKED_DONE)
			return BODY_RUN_END;
	}
}

static int
client_body_peek(struct client *c, struct body_cursor *cur, const char **p, size_t *n)
{
	return client_body_run(c, cur, p, n);
}

/* The framing before the run leaves the input, the run stays at its front for the request;
 * bytes after the body's end are the next request's.  Bad framing is a 400, and the close:
 * nothing after it can be framed. */
static int
client_body_next(struct client *c, size_t *n)
{
	struct body_cursor cur = { 0, c->body_chunk };
	const char *p;
	int r;

	r = client_body_run(c, &cur, &p, n);
	c->body_chunk = cur.ch;
	if (r == BODY_RUN_BAD) {
		c->rq->ans.up_close = 1;
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return r;
	}
	evbuffer_drain(c->conn.in, cur.at - (r == BODY_RUN_DATA ? *n : 0));
	return r;
}

static const struct conn *
client_transport(struct client *c)
{
	return &c->conn;
}

/* --- the answer, as HTTP/1.1 ------------------------------------------------------------ */

static int
client_takes_chunks(struct client *c)
{
	return c->http_minor == 1;
}

/* An HTTP/1.0 client does not know 100 Continue. */
static void
client_continue(struct client *c)
{
	if (c->rq->up.expect_continue && c->http_minor == 1) {
		c->rq->up.expect_continue = 0;
		evbuffer_add(c->conn.out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	}
}

/* The head, with our framing and connection handling: a length not known goes in chunks to
 * an HTTP/1.1 client and until the close to an HTTP/1.0 one. */
static void
client_answer_head(struct client *c, const struct answer_head *h)
{
	struct evbuffer *out = c->conn.out;
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	char tail[96], *p = tail;
	size_t before = evbuffer_get_length(out);

	if (headers_response_out(out, h->resp, id, h->ops, h->vars, h->extra) < 0)
		c->keepalive = 0;
	if (c->rq->answer_headers_len != 0)
		evbuffer_add(out, c->rq->answer_headers, c->rq->answer_headers_len);
	c->out_chunking = 0;
	switch (h->framing) {
	case ANSWER_BODYLESS:
		break;
	case ANSWER_LENGTH:
		p = put_content_length(p, h->length);
		break;
	case ANSWER_CHUNKS:
		p = put_lit(p, "Transfer-Encoding: chunked\r\n");
		break;
	case ANSWER_STREAM:
		if (c->http_minor == 1) {
			p = put_lit(p, "Transfer-Encoding: chunked\r\n");
			c->out_chunking = !c->rq->head_request;
		} else {
			c->keepalive = 0;
		}
		break;
	case ANSWER_UNTIL_CLOSE:
		c->keepalive = 0;
		break;
	}
	if (c->w->draining)
		c->keepalive = 0;       /* stopping: the client learns it from this answer */
	if (!c->keepalive)
		p = put_lit(p, "Connection: close\r\n");
	else if (c->http_minor == 0)
		p = put_lit(p, "Connection: keep-alive\r\n");
	p = put_lit(p, "\r\n");
	evbuffer_add(out, tail, (size_t)(p - tail));
	c->rq->head_sent = evbuffer_get_length(out) - before;
	c->rq->bytes_sent += c->rq->head_sent;
}

static void
client_answer_body(struct client *c, struct evbuffer *from, size_t n)
{
	struct evbuffer *out = c->conn.out;
	size_t have = evbuffer_get_length(from);
	int moved;

	if (n > have)
		n = have;
	if (n == 0)
		return;
	if (c->out_chunking)
		c->rq->bytes_sent += (uint64_t)evbuffer_add_printf(out, "%zx\r\n", n);
	if ((moved = evbuffer_remove_buffer(from, out, n)) > 0)
		c->rq->bytes_sent += (uint64_t)moved;
	if (c->out_chunking && evbuffer_add(out, "\r\n", 2) == 0)
		c->rq->bytes_sent += 2;
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

/* A body still in the input unread, or streamed halfway, leaves the stream unframed: the
 * connection closes after the error. */
static void
client_answer_error(struct client *c, enum gateway_error err, const char *message,
    const char *extra, int must_close)
{
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	enum respond_connection conn;
	char lines[ROUTE_ALLOW_MAX + sizeof(c->rq->answer_headers)];

	/* The phases' lines too: a page may read why its request failed. */
	if (c->rq->answer_headers_len != 0) {
		snprintf(lines, sizeof(lines), "%s%.*s", extra != NULL ? extra : "",
		    (int)c->rq->answer_headers_len, c->rq->answer_headers);
		extra = lines;
	}
	if (must_close || !c->rq->up.done || c->w->draining) {
		c->keepalive = 0;
		client_closing_for(c, client_error_closes(err, c->w->draining));
	}
	conn = !c->keepalive ? RESPOND_CONN_CLOSE :
	    c->http_minor == 0 ? RESPOND_CONN_KEEPALIVE : RESPOND_CONN_NONE;
	c->rq->bytes_sent += respond_error(c->conn.out, err, message, id, conn, extra,
	    c->rq->head_request, &c->rq->head_sent);
}

/* Too late for an error response: the connection is cut so that the truncation shows. */
static void
client_answer_abort(struct client *c, enum client_close why)
{
	c->keepalive = 0;
	c->out_chunking = 0;
	client_close_after_flush(c, why);
}

static int
client_answer_backlogged(struct client *c)
{
	if (conn_out_left(&c->conn) <= FLOW_HIGH)
		return 0;
	if (!c->up_paused) {
		c->up_paused = 1;
		conn_notify_drained(&c->conn, 1, FLOW_LOW);
	}
	return 1;
}

/* The last chunk of an answer the session framed in chunks. */
static void
client_answer_finish(struct client *c)
{
	if (c->out_chunking && evbuffer_add(c->conn.out, "0\r\n\r\n", 5) == 0)
		c->rq->bytes_sent += 5;
	c->out_chunking = 0;
}

/* The request is over: the next one of the pipeline, or the close. */
static void
client_request_over(struct client *c)
{
	struct worker *w = c->w;

	c->conn.read_max = FLOW_HIGH;
	if (c->up_paused)
		conn_notify_drained(&c->conn, 0, 0);
	c->up_paused = 0;
	/* A request whose body we did not read to the end leaves the stream unframed.  While
	 * stopping, a request pipelined behind this one is still answered (503 shutting_down). */
	if (!c->keepalive || !c->rq->up.done ||
	    (w->draining && evbuffer_get_length(c->conn.in) == 0)) {
		client_close_after_flush(c, !c->rq->up.done ? CLIENT_CLOSE_UNREAD_BODY :
		    w->draining ? CLIENT_CLOSE_SHUTDOWN : CLIENT_CLOSE_NOT_KEEPALIVE);
		return;
	}
	client_request_detach(c);
	client_set_state(c, CLIENT_IDLE);
	conn_set_timeouts(&c->conn, 0, 0);
	client_timer_set(c, TIMER_KEEPALIVE, client_cfg(c)->timeouts.keepalive);
	conn_read_start(&c->conn);
	/* The next request, if it came already (or the close, if the client is done). */
	if (evbuffer_get_length(c->conn.in) != 0 || c->conn.eof)
		client_process(c);
}

/* --- a tunnel over the connection --------------------------------------------------- */

/* The tunnel is over: the connection closes once what is queued for the client went. */
static void
client_tunnel_close(void *arg, enum tunnel_close why)
{
	struct client *c = (struct client *)((char *)arg - offsetof(struct client, conn));

	tunnel_conn_close(arg, why);
	client_closing_for(c, CLIENT_CLOSE_TUNNEL_ENDED);
	c->keepalive = 0;
}

static const struct tunnel_end_ops client_tunnel_ops = {
	tunnel_conn_input, tunnel_conn_write, tunnel_conn_unsent, tunnel_conn_reading,
	tunnel_conn_drained, tunnel_conn_shutdown, tunnel_conn_ended, client_tunnel_close
};

/* The 101 with the protocol's Upgrade and Connection: upgrade (the session's own
 * hop-by-hop lines), then the connection's bytes are the tunnel's. */
static int
client_upgrade(struct client *c, const struct answer_head *h, struct http_str protocol,
    struct tunnel *t)
{
	struct evbuffer *out = c->conn.out;
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	size_t before = evbuffer_get_length(out);

	if (c->http_minor != 1 ||
	    headers_response_out(out, h->resp, id, h->ops, h->vars, h->extra) < 0)
		return -1;
	if (c->rq->answer_headers_len != 0)
		evbuffer_add(out, c->rq->answer_headers, c->rq->answer_headers_len);
	evbuffer_add_printf(out, "Upgrade: %.*s\r\nConnection: upgrade\r\n\r\n", (int)protocol.len,
	    protocol.p);
	c->rq->head_sent = evbuffer_get_length(out) - before;
	c->rq->bytes_sent += c->rq->head_sent;
	c->keepalive = 0;
	conn_set_timeouts(&c->conn, 0, 0);
	conn_set_read_max(&c->conn, FLOW_HIGH);
	tunnel_attach(t, TUNNEL_CLIENT, &client_tunnel_ops, &c->conn);
	conn_read_start(&c->conn);
	return 0;
}

const struct downstream client_downstream = {
	/* in the order of struct downstream (request.h) */
	client_read_body, client_input_room, client_body_next, client_body_peek,
	client_transport, client_takes_chunks, client_continue, client_answer_head, client_answer_body,
	client_answer_finish, client_answer_error, client_answer_abort, client_answer_backlogged,
	client_request_over, client_flush, client_upgrade
};

/* --- accept, drain ---------------------------------------------------------------------- */

int
proxy_accept(struct worker *w, int fd, struct sockaddr *sa, int salen,
    struct tls_server *tls, int http2)
{
	const struct config *cfg = w->cur->rt->cfg;
	struct client *c;

	(void)salen;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return -1;
	}
	c->w = w;
	c->down = &client_downstream;
	c->h2_possible = http2 != 0;
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
		if (c->h2 != NULL) {
			h2_drain(c->h2, CLIENT_CLOSE_SHUTDOWN);
			continue;
		}
		if (c->state == CLIENT_IDLE &&
		    evbuffer_get_length(c->conn.in) == 0)
			client_free(c, CLIENT_CLOSE_SHUTDOWN);
	}
}

void
proxy_reloaded(struct worker *w)
{
	struct client *c;

	LIST_FOREACH(c, &w->clients, entry)
		if (c->h2 != NULL)
			h2_drain(c->h2, CLIENT_CLOSE_RELOAD);
}

void
proxy_close_all(struct worker *w)
{
	struct client *c;

	while ((c = LIST_FIRST(&w->clients)) != NULL)
		client_free(c, CLIENT_CLOSE_SHUTDOWN);
}
