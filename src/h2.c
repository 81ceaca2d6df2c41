/*
 * The HTTP/2 session of a client connection, on nghttp2.  Each stream is a struct client of
 * its own (h2_stream.c's is the connection's): its request sees the head as HTTP/1.1 in its
 * input (the fields as received, :authority as Host, cookie crumbs joined, a body without a
 * length announced as chunked), then its DATA payload as it came, and answers through
 * h2_downstream, which maps heads to HEADERS frames and moves body bytes into DATA frames
 * without copying them.  Flow control bounds what a stream holds both ways: a request body
 * reads ahead at most the stream window; an answer's client that opens no window makes its
 * request stop reading the upstream once FLOW_HIGH waits.
 * An extended CONNECT for a WebSocket (RFC 8441) is written as RFC 6455's GET with Upgrade;
 * the upstream's 101 makes the stream a tunnel's client end (h2_upgrade, h2_tunnel_ops).
 */
#include "config.h"
#include "request.h"

#include <nghttp2/nghttp2.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "h2.h"
#include "h2_session.h"
#include "mempool.h"

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
/* Frames queued on the socket before nghttp2 is asked for more. */
#define H2_OUT_HIGH (64 * 1024)
#define H2_OUT_LOW (16 * 1024)
extern const struct downstream h2_downstream;

/* The worker's answer head being submitted: its fields (headers.c decides them), then the
 * same as nghttp2's name-value pairs with the names in lower case.  Kept from one answer to
 * the next. */
static _Thread_local struct headers_fields h2_fields;
static _Thread_local struct {
	nghttp2_nv *nv;
	size_t cap;
	char *lower;                    /* the names in lower case, one after the other */
	size_t lower_size;
} h2_nvs;

static void h2_send(struct h2_session *s);
static void h2_answer_error(struct client *c, enum gateway_error err, const char *message,
    const char *extra, int must_close);

static uint64_t
h2_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int
h2_preface(struct evbuffer *in)
{
	size_t len = evbuffer_get_length(in);
	size_t n = len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN;

	if (memcmp(evbuffer_pullup(in, (ev_ssize_t)n), H2_PREFACE, n) != 0)
		return 0;
	return n == H2_PREFACE_LEN ? 1 : -1;
}

size_t
h2_streams(const struct h2_session *s)
{
	return s->nstreams;
}

/* --- streams ----------------------------------------------------------------------------- */

/* Window given back for DATA bytes its request took out of the input (or that no request
 * will take). */
static void
h2_consume(struct h2_stream *st, size_t n)
{
	if (n > st->unconsumed)
		n = (size_t)st->unconsumed;
	if (n == 0)
		return;
	st->unconsumed -= n;
	nghttp2_session_consume_connection(st->s->ng, n);
	if (!st->closed)
		nghttp2_session_consume_stream(st->s->ng, st->id, n);
}

/* The request drained its input: what were DATA bytes is window again. */
static void
h2_input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)buf;
	if (info->n_deleted != 0)
		h2_consume(arg, info->n_deleted);
}

/* Streams a worker thread keeps for the next ones, their buffers with them: a stream costs
 * no allocation once the worker is warm. */
#define H2_STREAMS_KEPT 256
static _Thread_local struct h2_stream *h2_kept;
static _Thread_local unsigned h2_nkept;

static void
h2_stream_release(struct h2_stream *st)
{
	if (st->c.conn.in != NULL)
		evbuffer_free(st->c.conn.in);
	if (st->out != NULL)
		evbuffer_free(st->out);
	free(st->fields.p);
	free(st->path.p);
	free(st->authority.p);
	if (st->cookie != NULL)
		evbuffer_free(st->cookie);
	free(st);
}

static struct h2_stream *
h2_stream_new(struct h2_session *s, int32_t id)
{
	struct h2_stream *st = h2_kept;
	struct evbuffer *in, *out, *cookie;
	struct h2_buf fields, path, authority;

	if (st != NULL) {
		h2_kept = st->next_kept;
		h2_nkept--;
		in = st->c.conn.in;
		out = st->out;
		fields = st->fields;
		path = st->path;
		authority = st->authority;
		cookie = st->cookie;
		memset(st, 0, sizeof(*st));
		st->c.conn.in = in;
		st->out = out;
		st->fields = fields;
		st->path = path;
		st->authority = authority;
		st->fields.len = st->path.len = st->authority.len = 0;
		st->cookie = cookie;
	} else {
		if ((st = calloc(1, sizeof(*st))) == NULL)
			return NULL;
		if ((st->c.conn.in = evbuffer_new()) == NULL || (st->out = evbuffer_new()) == NULL ||
		    evbuffer_add_cb(st->c.conn.in, h2_input_cb, st) == NULL) {
			h2_stream_release(st);
			return NULL;
		}
	}
	st->c.w = s->w;
	st->c.down = &h2_downstream;
	st->c.close_reason = CLIENT_CLOSE_NONE;
	st->c.h2_stream = 1;
	st->c.http_minor = 1;
	st->c.state = CLIENT_IDLE;
	memcpy(st->c.addr, s->c->addr, sizeof(st->c.addr));
	st->c.conn.fd = -1;
	st->s = s;
	st->id = id;
	st->reading = 1;
	LIST_INSERT_HEAD(&s->streams, st, entry);
	s->nstreams++;
	client_idle(s->c, 0);
	return st;
}

static void
h2_stream_free(struct h2_stream *st)
{
	st->unconsumed = 0;     /* what the buffers still hold is no window any more */
	if (h2_nkept >= H2_STREAMS_KEPT) {
		h2_stream_release(st);
		return;
	}
	evbuffer_drain(st->c.conn.in, evbuffer_get_length(st->c.conn.in));
	evbuffer_drain(st->out, evbuffer_get_length(st->out));
	if (st->cookie != NULL)
		evbuffer_drain(st->cookie, evbuffer_get_length(st->cookie));
	st->next_kept = h2_kept;
	h2_kept = st;
	h2_nkept++;
}

void
h2_worker_end(void)
{
	struct h2_stream *st;

	headers_fields_free(&h2_fields);
	free(h2_nvs.nv);
	free(h2_nvs.lower);
	memset(&h2_nvs, 0, sizeof(h2_nvs));

	while ((st = h2_kept) != NULL) {
		h2_kept = st->next_kept;
		h2_stream_release(st);
	}
	h2_nkept = 0;
}

/* Hand the stream's new input, or the news that its answer drained, to its request from the
 * loop: never from inside nghttp2. */
void
h2_queue(struct h2_stream *st)
{
	if (st->queued)
		return;
	st->queued = 1;
	TAILQ_INSERT_TAIL(&st->s->work, st, pending);
	h2_kick(st->s);
}

static void
h2_unqueue(struct h2_stream *st)
{
	if (!st->queued)
		return;
	st->queued = 0;
	TAILQ_REMOVE(&st->s->work, st, pending);
}

/* Neither nghttp2 nor a request needs it any more: freed from the loop. */
static void
h2_stream_dead(struct h2_stream *st)
{
	struct h2_session *s = st->s;

	h2_unqueue(st);
	st->c.state = CLIENT_DEAD;
	LIST_REMOVE(st, entry);
	LIST_INSERT_HEAD(&s->dead, st, entry);
	s->nstreams--;
	h2_kick(s);
	if (s->nstreams == 0 && !s->draining)
		client_idle(s->c, 1);
}

/* The stream's request is over or cut short: it lets go of the stream. */
static void
h2_request_gone(struct h2_stream *st)
{
	/* What it did not read of the body is window again: the connection's is shared. */
	evbuffer_drain(st->c.conn.in, evbuffer_get_length(st->c.conn.in));
	h2_consume(st, (size_t)st->unconsumed);
	st->tunnel = NULL;
	client_request_detach(&st->c);
	st->c.state = CLIENT_IDLE;
	if (st->closed)
		h2_stream_dead(st);
}

/* --- the request's head ------------------------------------------------------------------ */

static void
h2_refuse(struct h2_stream *st, enum gateway_error err, const char *message)
{
	struct client *c = &st->c;

	strcpy(c->rq->method, "-");
	strcpy(c->rq->target, "-");
	headers_request_id_generate(c->rq->request_id);
	c->rq->request_id_len = REQUEST_ID_LEN;
	c->rq->request_id[REQUEST_ID_LEN] = '\0';
	client_error(c, err, message, 1);
}

static char *
h2_put(char *p, const void *s, size_t n)
{
	if (n != 0)     /* a buffer not yet allocated is NULL */
		memcpy(p, s, n);
	return p + n;
}

/* The lines that make an extended CONNECT (RFC 8441) RFC 6455's opening handshake for the
 * upstream: Upgrade, Connection, a key of our own (the client sent none: the accept that
 * answers it is for us) and the client's version. */
#define H2_WS_HEAD_MAX 160     /* h2_websocket_head's lines, at most */

static size_t
h2_websocket_head(char *out, const char *version)
{
	static const char upgrade[] =
	    "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ";
	static const char version_field[] = "\r\nSec-WebSocket-Version: ";
	unsigned char nonce[16] = { 0 };
	char key[4 * ((sizeof(nonce) + 2) / 3) + 1];

	/* The key proves nothing to us (RFC 6455 4.1: a nonce against caches); a failing
	 * generator still gives a well-formed one. */
	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
		log_warnx("RAND_bytes failed: a WebSocket key of zeros");
	EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
	char *p = out;

	p = h2_put(p, upgrade, sizeof(upgrade) - 1);
	p = h2_put(p, key, sizeof(key) - 1);
	p = h2_put(p, version_field, sizeof(version_field) - 1);
	if (version[0] == '\0')
		version = "13";
	p = h2_put(p, version, strlen(version));
	p = h2_put(p, "\r\n", 2);
	return (size_t)(p - out);
}

/* All the fields are in: the head as HTTP/1.1 at the front of the input, then its request. */
static void
h2_stream_start(struct h2_stream *st, int end_stream)
{
	struct client *c = &st->c;
	struct evbuffer *in = c->conn.in;
	struct http_request *req = &c->w->req;
	size_t len, method_len, path_len, authority_len, cookie_len;
	struct evbuffer_iovec v;
	unsigned char *p;
	char *w;
	ssize_t r;

	if (request_begin(c) < 0) {
		nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id,
		    NGHTTP2_INTERNAL_ERROR);
		return;
	}
	c->state = CLIENT_BUSY;
	if (st->head.too_large) {
		h2_refuse(st, GW_HEADER_TOO_LARGE, NULL);
		return;
	}
	if (!st->head.has_path || strcmp(st->method, "CONNECT") == 0) {
		/* CONNECT is no method jsongate proxies; RFC 8441's extended CONNECT for a
		 * WebSocket goes on as RFC 6455's GET with Upgrade (h2_websocket_head), any other
		 * :protocol is refused. */
		if (!st->head.websocket || !st->head.has_path) {
			h2_refuse(st, GW_NOT_IMPLEMENTED, st->head.has_path ?
			    "only the websocket protocol is tunnelled" : NULL);
			return;
		}
		memcpy(st->method, "GET", 4);
	}
	/* Every stream's head, written in one piece into the (empty) input: no printf, one
	 * evbuffer call, nothing for the pullup to move. */
	method_len = strlen(st->method);
	path_len = st->path.len;
	authority_len = st->head.has_authority && !st->head.has_host ? st->authority.len : 0;
	cookie_len = st->cookie != NULL ? evbuffer_get_length(st->cookie) : 0;
	len = method_len + 1 + path_len + 11 + (st->head.websocket ? H2_WS_HEAD_MAX : 0) +
	    (authority_len != 0 ? authority_len + 8 : 0) + st->fields.len +
	    (cookie_len != 0 ? cookie_len + 10 : 0) + 28 + 2;
	if (evbuffer_reserve_space(in, (ev_ssize_t)len, &v, 1) != 1) {
		h2_refuse(st, GW_INTERNAL_ERROR, NULL);
		return;
	}
	w = v.iov_base;
	w = h2_put(w, st->method, method_len);
	*w++ = ' ';
	w = h2_put(w, st->path.p, path_len);
	w = h2_put(w, " HTTP/1.1\r\n", 11);
	if (st->head.websocket)
		w += h2_websocket_head(w, st->ws_version);
	if (authority_len != 0) {
		w = h2_put(w, "Host: ", 6);
		w = h2_put(w, st->authority.p, authority_len);
		w = h2_put(w, "\r\n", 2);
	}
	w = h2_put(w, st->fields.p, st->fields.len);
	if (cookie_len != 0) {
		w = h2_put(w, "Cookie: ", 8);
		evbuffer_remove(st->cookie, w, cookie_len);
		w += cookie_len;
		w = h2_put(w, "\r\n", 2);
	}
	/* A body without a length: the request takes its payload through h2_body_next.  A
	 * WebSocket's stream has none: what it sends after the head is the tunnel's. */
	if (!end_stream && !st->head.has_length && !st->head.websocket)
		w = h2_put(w, "Transfer-Encoding: chunked\r\n", 28);
	w = h2_put(w, "\r\n", 2);
	v.iov_len = (size_t)(w - (char *)v.iov_base);
	evbuffer_commit_space(in, &v, 1);
	len = evbuffer_get_length(in);
	p = evbuffer_pullup(in, (ev_ssize_t)len);
	r = http_parse_request((const char *)p, len, req);
	if (r != (ssize_t)len) {
		h2_refuse(st, r == HTTP_ERR_TOO_MANY_HEADERS ? GW_HEADER_TOO_LARGE :
		    GW_BAD_REQUEST, NULL);
		return;
	}
	request_take_head(c, req, p, len);
}

static int
h2_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if ((st = h2_stream_new(s, frame->hd.stream_id)) == NULL)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	nghttp2_session_set_stream_user_data(ng, frame->hd.stream_id, st);
	metrics_h2(s->w, METRICS_H2_STREAM);
	return 0;
}

/* Room for need bytes in b, kept for the stream's next requests. */
static char *
h2_buf_room(struct h2_buf *b, size_t need)
{
	size_t size = b->size != 0 ? b->size : 256;
	char *p;

	if (need <= b->size)
		return b->p;
	while (size < need)
		size *= 2;
	if ((p = realloc(b->p, size)) == NULL)
		return NULL;
	b->p = p;
	b->size = size;
	return p;
}

static int
h2_buf_set(struct h2_buf *b, const uint8_t *p, size_t n)
{
	if (h2_buf_room(b, n + 1) == NULL)
		return -1;
	memcpy(b->p, p, n);
	b->p[n] = '\0';
	b->len = n;
	return 0;
}

/* A field as an HTTP/1.1 line in the stream's own buffer: one copy into the input when all
 * are in (h2_stream_start), where an evbuffer would take four calls per field. */
static int
h2_field_line(struct h2_stream *st, const uint8_t *name, size_t namelen, const uint8_t *value,
    size_t valuelen)
{
	size_t need = st->fields.len + namelen + valuelen + 4;
	char *p;

	if (h2_buf_room(&st->fields, need) == NULL)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	p = st->fields.p + st->fields.len;
	memcpy(p, name, namelen);
	p += namelen;
	*p++ = ':';
	*p++ = ' ';
	memcpy(p, value, valuelen);
	p += valuelen;
	*p++ = '\r';
	*p++ = '\n';
	st->fields.len = need;
	return 0;
}

static int
h2_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
    size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);

	(void)flags;
	if (st == NULL || frame->hd.type != NGHTTP2_HEADERS ||
	    frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	/* RFC 7541's size of a field: what an HPACK bomb inflates is counted, not its bytes. */
	st->field_bytes += namelen + valuelen + 32;
	if (st->head.too_large || st->field_bytes > s->w->cur->rt->cfg->limits.max_header) {
		st->head.too_large = 1;
		return 0;
	}
	if (namelen > 0 && name[0] == ':') {
		if (namelen == 7 && memcmp(name, ":method", 7) == 0) {
			if (valuelen >= sizeof(st->method))
				st->head.too_large = 1;
			else
				memcpy(st->method, value, valuelen + 1);
		} else if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
			if (h2_buf_set(&st->path, value, valuelen) < 0)
				return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
			st->head.has_path = 1;
		} else if (namelen == 10 && memcmp(name, ":authority", 10) == 0) {
			if (h2_buf_set(&st->authority, value, valuelen) < 0)
				return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
			st->head.has_authority = 1;
		} else if (namelen == 9 && memcmp(name, ":protocol", 9) == 0) {
			st->head.websocket = HTTP_IEQ((const char *)value, valuelen, "websocket");
		}
		return 0;
	}
	/* The handshake's key is ours to make, its version written with it (h2_websocket_head):
	 * pseudo-fields come first, so :protocol is known here. */
	if (st->head.websocket && namelen == 17 && memcmp(name, "sec-websocket-key", 17) == 0)
		return 0;
	if (st->head.websocket && namelen == 21 && memcmp(name, "sec-websocket-version", 21) == 0) {
		if (valuelen >= sizeof(st->ws_version))
			st->head.too_large = 1;
		else
			memcpy(st->ws_version, value, valuelen + 1);
		return 0;
	}
	if (namelen == 6 && memcmp(name, "cookie", 6) == 0) {
		/* RFC 9113 8.2.3: the crumbs of a cookie go on as one field, "; " between them. */
		if (st->cookie == NULL && (st->cookie = evbuffer_new()) == NULL)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		if (evbuffer_get_length(st->cookie) != 0)
			evbuffer_add(st->cookie, "; ", 2);
		evbuffer_add(st->cookie, value, valuelen);
		return 0;
	}
	if (namelen == 14 && memcmp(name, "content-length", 14) == 0)
		st->head.has_length = 1;
	if (namelen == 4 && memcmp(name, "host", 4) == 0)
		st->head.has_host = 1;
	return h2_field_line(st, name, namelen, value, valuelen);
}

/* --- the request's body ------------------------------------------------------------------ */

static int
h2_on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
    size_t len, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);

	(void)flags;
	/* A body no request takes any more: its window goes back at once. */
	if (st == NULL || st->c.state != CLIENT_BUSY || st->c.rq == NULL) {
		nghttp2_session_consume_connection(s->ng, len);
		if (st != NULL && !st->closed)
			nghttp2_session_consume_stream(s->ng, id, len);
		return 0;
	}
	st->unconsumed += len;
	evbuffer_add(st->c.conn.in, data, len);
	if (st->reading)
		h2_queue(st);
	return 0;
}

static int
h2_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st;

	if (frame->hd.type == NGHTTP2_RST_STREAM)
		metrics_h2(s->w, METRICS_H2_RESET_RECEIVED);
	else if (frame->hd.type == NGHTTP2_GOAWAY)
		metrics_h2(s->w, METRICS_H2_GOAWAY_RECEIVED);
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	if ((st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id)) == NULL)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
		st->in_done = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
		h2_stream_start(st, st->in_done);
		return 0;
	}
	/* A tunnel's client end: its END_STREAM is the tunnel's EOF, from the loop. */
	if (st->tunnel != NULL) {
		if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->in_done) {
			st->in_done = 1;
			h2_queue(st);
		}
		return 0;
	}
	if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->in_done) {
		st->in_done = 1;
		if (st->reading)
			h2_queue(st);
	}
	return 0;
}

/* Every reset and GOAWAY we send is counted, the ones nghttp2 decides on too (a client that
 * provokes resets is seen, MadeYouReset). */
static int
h2_on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *arg)
{
	struct h2_session *s = arg;

	(void)ng;
	if (frame->hd.type == NGHTTP2_RST_STREAM)
		metrics_h2(s->w, METRICS_H2_RESET_SENT);
	else if (frame->hd.type == NGHTTP2_GOAWAY)
		metrics_h2(s->w, METRICS_H2_GOAWAY_SENT);
	return 0;
}

static int
h2_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *arg)
{
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);
	struct client *c;

	(void)arg;
	if (st == NULL)
		return 0;
	nghttp2_session_set_stream_user_data(ng, id, NULL);
	st->closed = 1;
	c = &st->c;
	if (c->state == CLIENT_BUSY && c->rq != NULL && st->tunnel != NULL) {
		/* Closed both ways in order (our END_STREAM went, the client's came): its EOF;
		 * else a reset, the tunnel's error.  Its end writes the line. */
		tunnel_event(st->tunnel, TUNNEL_CLIENT, error_code == NGHTTP2_NO_ERROR &&
		    st->in_done ? TUNNEL_READ | TUNNEL_EOF : TUNNEL_ERROR);
		return 0;
	}
	if (c->state == CLIENT_BUSY && c->rq != NULL) {
		/* The client reset it (or the connection went) before the answer was whole:
		 * logged like HTTP/1.1's, 499 before the answer started. */
		if (!st->aborted) {
			if (!c->rq->ans.started)
				c->rq->status = 499;
			client_log(c);
		}
		request_abort(c);
		h2_request_gone(st);
		return 0;
	}
	if (c->rq == NULL)
		h2_stream_dead(st);
	return 0;
}

/* --- the answer -------------------------------------------------------------------------- */

/* DATA of the answer: as much of out as the window and the frame take, moved by
 * h2_send_data without a copy. */
static ssize_t
h2_read_answer(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
    uint32_t *data_flags, nghttp2_data_source *source, void *arg)
{
	struct h2_stream *st = source->ptr;
	size_t have = evbuffer_get_length(st->out);

	(void)ng;
	(void)id;
	(void)buf;
	(void)arg;
	if (have == 0 && !st->out_done) {
		st->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	if (length > have)
		length = have;
	*data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	if (length == have && st->out_done)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)length;
}

static int
h2_send_data(nghttp2_session *ng, nghttp2_frame *frame, const uint8_t *framehd,
    size_t length, nghttp2_data_source *source, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st = source->ptr;
	struct evbuffer *out = s->c->conn.out;

	(void)ng;
	(void)frame;
	if (evbuffer_get_length(out) >= H2_OUT_HIGH)
		return NGHTTP2_ERR_WOULDBLOCK;
	evbuffer_add(out, framehd, 9);
	evbuffer_remove_buffer(st->out, out, length);
	st->progress = h2_now_ms();
	if (st->drained && evbuffer_get_length(st->out) <= st->low)
		h2_queue(st);
	return 0;
}

static ssize_t
h2_send_cb(nghttp2_session *ng, const uint8_t *data, size_t length, int flags, void *arg)
{
	struct h2_session *s = arg;

	(void)ng;
	(void)flags;
	if (conn_out_left(&s->c->conn) >= H2_OUT_HIGH)
		return NGHTTP2_ERR_WOULDBLOCK;
	evbuffer_add(s->c->conn.out, data, length);
	return (ssize_t)length;
}

/* Eight bytes in lower case at once: 0x80 in each byte from 'A' to 'Z' (a byte with its high
 * bit set is none), moved onto its 0x20. */
static inline uint64_t
h2_lower8(uint64_t x)
{
	const uint64_t high = 0x8080808080808080ull, seven = 0x7f7f7f7f7f7f7f7full;
	uint64_t upper = ((x & seven) + 0x3f3f3f3f3f3f3f3full) ^
	    ((x & seven) + 0x2525252525252525ull);

	return x | (upper & ~x & high) >> 2;
}

/* HTTP/2's field names are lower case (RFC 9113 8.2.1): eight bytes at a time, A-Z only; the
 * tail as an overlapping word, a short name as two overlapping halves (every answer has a
 * few: Date, ETag, Server). */
static void
h2_lower(char *to, const char *from, size_t n)
{
	uint64_t x;
	uint32_t y;
	size_t j;

	if (n >= 8) {
		for (j = 0; j + 8 <= n; j += 8) {
			memcpy(&x, from + j, 8);
			x = h2_lower8(x);
			memcpy(to + j, &x, 8);
		}
		if (j < n) {
			memcpy(&x, from + n - 8, 8);
			x = h2_lower8(x);
			memcpy(to + n - 8, &x, 8);
		}
	} else if (n >= 4) {
		memcpy(&y, from, 4);
		y = (uint32_t)h2_lower8(y);
		memcpy(to, &y, 4);
		memcpy(&y, from + n - 4, 4);
		y = (uint32_t)h2_lower8(y);
		memcpy(to + n - 4, &y, 4);
	} else {
		for (j = 0; j < n; j++)
			to[j] = (char)(from[j] >= 'A' && from[j] <= 'Z' ? from[j] - 'A' + 'a' :
			    from[j]);
	}
}

static int
h2_nvs_room(size_t n, size_t names)
{
	if (n > h2_nvs.cap) {
		nghttp2_nv *nv = realloc(h2_nvs.nv, n * sizeof(*nv));

		if (nv == NULL)
			return -1;
		h2_nvs.nv = nv;
		h2_nvs.cap = n;
	}
	if (names > h2_nvs.lower_size) {
		char *p = realloc(h2_nvs.lower, names);

		if (p == NULL)
			return -1;
		h2_nvs.lower = p;
		h2_nvs.lower_size = names;
	}
	return 0;
}

/* The head in h2_fields goes as a HEADERS frame (with_body: DATA follows), length as its
 * content-length (or NULL).  A tunnel's (RFC 8441) is a 200 without the handshake's
 * Sec-WebSocket-Accept (h2_upgrade). */
int
h2_submit_head(struct h2_stream *st, int with_body, const char *length, int tunnel)
{
	const struct headers_fields *hf = &h2_fields;
	nghttp2_data_provider data = { { .ptr = st }, h2_read_answer };
	size_t n = 0, names = 0, i;
	nghttp2_nv *nv;
	char status[4], *lower;
	int code = tunnel ? 200 : hf->status;

	for (i = 0; i < hf->n; i++)
		names += hf->f[i].name.len;
	if (h2_nvs_room(hf->n + 2, names) < 0)
		return -1;
	nv = h2_nvs.nv;
	lower = h2_nvs.lower;
	status[0] = (char)('0' + code / 100 % 10);
	status[1] = (char)('0' + code / 10 % 10);
	status[2] = (char)('0' + code % 10);
	status[3] = '\0';
	nv[n++] = (nghttp2_nv){ (uint8_t *)":status", (uint8_t *)status, 7, 3,
	    NGHTTP2_NV_FLAG_NONE };
	for (i = 0; i < hf->n; i++) {
		const struct headers_field *f = &hf->f[i];
		uint8_t flags = NGHTTP2_NV_FLAG_NONE;

		h2_lower(lower, f->name.p, f->name.len);
		if (tunnel && f->name.len == 20 && memcmp(lower, "sec-websocket-accept", 20) == 0)
			continue;
		/* A request's id is new with every answer: in HPACK's table it would only push
		 * out the fields that repeat (Date, Content-Type, Server, ...). */
		if (f->name.len == 12 && memcmp(lower, "x-request-id", 12) == 0)
			flags = NGHTTP2_NV_FLAG_NO_INDEX;
		nv[n++] = (nghttp2_nv){ (uint8_t *)lower, (uint8_t *)f->value.p, f->name.len,
		    f->value.len, flags };
		lower += f->name.len;
	}
	if (length != NULL)
		nv[n++] = (nghttp2_nv){ (uint8_t *)"content-length", (uint8_t *)length, 14,
		    strlen(length), NGHTTP2_NV_FLAG_NONE };
	/* nghttp2 copies the names and values: the buffers are the next answer's. */
	return nghttp2_submit_response(st->s->ng, st->id, nv, n, with_body ? &data : NULL) == 0 ?
	    0 : -1;
}

/* The fields of the answer head h with the request's own lines: into h2_fields, the length
 * of the same head as HTTP/1.1 text returned (what the access log counts), or -1. */
ssize_t
h2_answer_fields(struct client *c, const struct answer_head *h)
{
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };

	if (headers_response_fields(&h2_fields, h->resp, id, h->ops, h->vars, h->extra) < 0 ||
	    headers_fields_lines(&h2_fields, c->rq->answer_headers, c->rq->answer_headers_len) <
	    0)
		return -1;
	return (ssize_t)h2_fields.text_len + 2;         /* the blank line */
}

/* A decimal number without printf: every answer's content-length. */
static const char *
h2_decimal(char *buf, size_t size, uint64_t v)
{
	char *p = buf + size;

	*--p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	return p;
}

static int
h2_takes_chunks(struct client *c)
{
	(void)c;
	return 0;
}

static void
h2_continue(struct client *c)
{
	struct h2_stream *st = h2_stream_of(c);
	nghttp2_nv nv = { (uint8_t *)":status", (uint8_t *)"100", 7, 3, NGHTTP2_NV_FLAG_NONE };

	if (!c->rq->up.expect_continue)
		return;
	c->rq->up.expect_continue = 0;
	nghttp2_submit_headers(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NULL, &nv, 1, NULL);
}

static void
h2_answer_head(struct client *c, const struct answer_head *h)
{
	struct h2_stream *st = h2_stream_of(c);
	char length[24];
	int body = h->framing != ANSWER_BODYLESS && !c->rq->head_request;
	ssize_t head_len;

	/* A 2xx to an extended CONNECT would tell its client the tunnel is open (RFC 8441 5):
	 * a route that does not tunnel (body ops, aggregated) cannot answer it so, nor an
	 * upstream that took the upgrade for a plain GET. */
	if (st->head.websocket && h->resp->status / 100 == 2) {
		enum gateway_error err = c->rq->upgrade ? GW_UPSTREAM_INVALID : GW_NOT_IMPLEMENTED;

		c->rq->status = gateway_errors[err].status;
		h2_answer_error(c, err, c->rq->upgrade ? "the upstream did not switch to WebSocket" :
		    "the route does not tunnel WebSocket", NULL, 0);
		return;
	}
	if ((head_len = h2_answer_fields(c, h)) < 0 ||
	    h2_submit_head(st, body, h->framing == ANSWER_LENGTH ?
	    h2_decimal(length, sizeof(length), h->length) : NULL, 0) < 0)
		nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id,
		    NGHTTP2_INTERNAL_ERROR);
	c->rq->head_sent = head_len > 0 ? (size_t)head_len : 0;
	c->rq->bytes_sent += c->rq->head_sent;
	if (!body)
		st->out_done = 1;
}

static void
h2_answer_body(struct client *c, struct evbuffer *from, size_t n)
{
	struct h2_stream *st = h2_stream_of(c);
	int moved;

	if (st->out_done) {
		evbuffer_drain(from, n);        /* a HEAD's, or after the end */
		return;
	}
	if (evbuffer_get_length(st->out) == 0)
		st->progress = h2_now_ms();
	if ((moved = evbuffer_remove_buffer(from, st->out, n)) > 0)
		c->rq->bytes_sent += (uint64_t)moved;
	if (st->deferred && moved > 0) {
		st->deferred = 0;
		nghttp2_session_resume_data(st->s->ng, st->id);
	}
}

static void
h2_answer_finish(struct client *c)
{
	struct h2_stream *st = h2_stream_of(c);

	if (st->out_done)
		return;
	st->out_done = 1;
	if (st->deferred) {
		st->deferred = 0;
		nghttp2_session_resume_data(st->s->ng, st->id);
	}
}

static void
h2_answer_error(struct client *c, enum gateway_error err, const char *message,
    const char *extra, int must_close)
{
	struct h2_stream *st = h2_stream_of(c);
	struct evbuffer *text = c->w->h2_head;
	struct http_str id = { c->rq->request_id, c->rq->request_id_len };
	char lines[ROUTE_ALLOW_MAX + sizeof(c->rq->answer_headers)], length[24];
	size_t head_len = 0, total;
	const char *p, *eol;

	(void)must_close;       /* a stream's error ends the stream, not the connection */
	if (c->rq->answer_headers_len != 0) {
		snprintf(lines, sizeof(lines), "%s%.*s", extra != NULL ? extra : "",
		    (int)c->rq->answer_headers_len, c->rq->answer_headers);
		extra = lines;
	}
	evbuffer_drain(text, evbuffer_get_length(text));
	total = respond_error(text, err, message, id, RESPOND_CONN_NONE, extra, 0, &head_len);
	c->rq->head_sent = head_len;
	c->rq->bytes_sent += c->rq->head_request ? head_len : total;
	snprintf(length, sizeof(length), "%zu", total - head_len);
	p = (const char *)evbuffer_pullup(text, -1);
	/* The body follows the head in text: it goes to out, the head as HEADERS. */
	if (!c->rq->head_request)
		evbuffer_add(st->out, p + head_len, total - head_len);
	st->out_done = 1;
	/* Its status line, its lines (their Content-Length is the one given), the blank line. */
	eol = head_len >= 16 ? memchr(p, '\n', head_len) : NULL;
	h2_fields.status = gateway_errors[err].status;
	h2_fields.n = 0;
	h2_fields.text_len = 0;
	if (eol == NULL || headers_fields_lines(&h2_fields, eol + 1,
	    head_len - (size_t)(eol + 1 - p) - 2) < 0 ||
	    h2_submit_head(st, !c->rq->head_request, length, 0) < 0)
		nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id,
		    NGHTTP2_INTERNAL_ERROR);
}

/* The answer cannot be completed: the stream is reset, which the client sees as a failed
 * request (never as a complete answer). */
static void
h2_answer_abort(struct client *c, enum client_close why)
{
	struct h2_stream *st = h2_stream_of(c);

	(void)why;
	st->aborted = 1;
	st->out_done = 1;
	nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

static int
h2_answer_backlogged(struct client *c)
{
	struct h2_stream *st = h2_stream_of(c);

	if (evbuffer_get_length(st->out) <= FLOW_HIGH)
		return 0;
	st->drained = 1;
	st->low = FLOW_LOW;
	return 1;
}

/* The request is over: the stream ends when its answer is sent.  A body the client still
 * sends is taken and dropped: its window goes back (h2_on_data_chunk). */
static void
h2_request_over(struct client *c)
{
	h2_request_gone(h2_stream_of(c));
}

/* The request has something to read: body bytes, or the news that its body ended. */
static int
h2_body_waits(struct h2_stream *st)
{
	return evbuffer_get_length(st->c.conn.in) != 0 || (st->in_done && !st->c.rq->up.done);
}

static void
h2_read_body(struct client *c, enum body_reading how)
{
	struct h2_stream *st = h2_stream_of(c);
	unsigned was = st->reading;

	/* While it read, what came was queued as it came: only what came while it did not
	 * is news (queued again, a request that waits for more would never leave the work). */
	st->reading = how == BODY_READING;
	if (st->reading && !was && h2_body_waits(st))
		h2_queue(st);
}

static void
h2_input_room(struct client *c, size_t n)
{
	(void)c;
	(void)n;        /* the stream window bounds the input */
}

/* A body without a length is its DATA payload as it came: all of the input, ended by
 * END_STREAM. */
static int
h2_body_next(struct client *c, size_t *n)
{
	if ((*n = evbuffer_get_length(c->conn.in)) != 0)
		return BODY_RUN_DATA;
	return h2_stream_of(c)->in_done ? BODY_RUN_END : BODY_RUN_NONE;
}

static int
h2_body_peek(struct client *c, struct body_cursor *cur, const char **p, size_t *n)
{
	struct evbuffer_ptr pos;
	struct evbuffer_iovec v;

	if (evbuffer_ptr_set(c->conn.in, &pos, cur->at, EVBUFFER_PTR_SET) == 0 &&
	    evbuffer_peek(c->conn.in, -1, &pos, &v, 1) > 0 && v.iov_len != 0) {
		*p = v.iov_base;
		*n = v.iov_len;
		cur->at += v.iov_len;
		return BODY_RUN_DATA;
	}
	return h2_stream_of(c)->in_done ? BODY_RUN_END : BODY_RUN_NONE;
}

static const struct conn *
h2_transport(struct client *c)
{
	return &h2_stream_of(c)->s->c->conn;
}

/* The frames of every stream that had something to say in this turn of the loop go out
 * together, from the loop: one send for many answers. */
static void
h2_flush(struct client *c)
{
	h2_kick(h2_stream_of(c)->s);
}

const struct downstream h2_downstream = {
	h2_read_body, h2_input_room, h2_body_next, h2_body_peek,
	h2_transport, h2_takes_chunks, h2_continue, h2_answer_head,
	h2_answer_body, h2_answer_finish, h2_answer_error, h2_answer_abort, h2_answer_backlogged,
	h2_request_over, h2_flush, h2_upgrade
};

/* --- the session ------------------------------------------------------------------------- */

/* The connection closes once its last frames are out, from the loop: callers up the stack
 * may still hold the session. */
static void
h2_close(struct h2_session *s, enum client_close why)
{
	if (s->close_why == CLIENT_CLOSE_NONE)
		s->close_why = why;
	h2_kick(s);
}

/* Send rounds in one go before the loop's other work has its turn. */
#define H2_SEND_ROUNDS 16

/* Frames out, as far as the socket takes them. */
static void
h2_send(struct h2_session *s)
{
	struct conn *conn = &s->c->conn;
	int rounds = 0;

	if (s->closing || s->close_why != CLIENT_CLOSE_NONE)
		return;
	if (s->sending || s->in_recv) {
		s->send_again = 1;
		return;
	}
	s->sending = 1;
	for (;;) {
		s->send_again = 0;
		if (nghttp2_session_send(s->ng) != 0) {
			s->sending = 0;
			h2_close(s, CLIENT_CLOSE_CLIENT_ERROR);
			return;
		}
		conn_flush(conn);
		if (conn->error || conn_out_left(conn) != 0)
			break;          /* the socket is full: its drain calls again */
		if (!s->send_again && !nghttp2_session_want_write(s->ng))
			break;
		if (++rounds == H2_SEND_ROUNDS) {
			h2_kick(s);     /* the rest from the loop */
			break;
		}
	}
	s->sending = 0;
	if (conn->error) {
		h2_close(s, CLIENT_CLOSE_CLIENT_ERROR);
		return;
	}
	if (conn_out_left(conn) != 0)
		conn_notify_drained(conn, 1, H2_OUT_LOW);
	if ((!nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng)) ||
	    (s->draining && s->nstreams == 0 && !nghttp2_session_want_write(s->ng)))
		h2_close(s, s->draining ? s->drain_why : CLIENT_CLOSE_CLIENT_CLOSED);
}

/* An answer that could not move for timeouts.client_body (its client opens no window) ends
 * its stream: what the client makes us hold is bounded in time as in size. */
static void
h2_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2_session *s = arg;
	uint64_t limit = s->w->cur->rt->cfg->timeouts.client_body, now = h2_now_ms();
	struct h2_stream *st;
	int reset = 0;

	(void)fd;
	(void)what;
	LIST_FOREACH(st, &s->streams, entry) {
		/* A tunnel's has timeouts.tunnel instead. */
		if (st->closed || st->aborted || st->tunnel != NULL ||
		    evbuffer_get_length(st->out) == 0 || now - st->progress < limit)
			continue;
		log_debug("client %s: HTTP/2 stream %d reset: no window for its answer in %llu ms",
		    s->c->addr, st->id, (unsigned long long)limit);
		st->aborted = 1;
		nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
		reset = 1;
	}
	if (reset)
		h2_send(s);
}

/* The streams' deferred work, from the loop: input to their requests, drained answers, and
 * the memory of the closed ones. */
static void
h2_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2_session *s = arg;
	struct h2_stream *st;

	(void)fd;
	(void)what;
	while ((st = TAILQ_FIRST(&s->work)) != NULL) {
		h2_unqueue(st);
		if (st->c.state != CLIENT_BUSY || st->c.rq == NULL)
			continue;
		if (st->tunnel != NULL) {
			h2_tunnel_work(st);
			proxy_flush(&st->c);
			continue;
		}
		if (st->drained && evbuffer_get_length(st->out) <= st->low) {
			st->drained = 0;
			proxy_answer_drained(&st->c);
		}
		if (st->c.state == CLIENT_BUSY && st->reading && h2_body_waits(st))
			request_body_in(&st->c);
		proxy_flush(&st->c);
	}
	while ((st = LIST_FIRST(&s->dead)) != NULL) {
		LIST_REMOVE(st, entry);
		h2_stream_free(st);
	}
	h2_send(s);
	if (s->close_why != CLIENT_CLOSE_NONE && !s->closing) {
		s->closing = 1;
		client_close_after_flush(s->c, s->close_why);     /* frees s */
	}
}

void
h2_kick(struct h2_session *s)
{
	event_active(s->kick, EV_TIMEOUT, 0);
}

enum client_close
h2_conn_event(struct h2_session *s, int what)
{
	struct conn *conn = &s->c->conn;
	struct evbuffer_iovec v[8];
	ssize_t r;
	int i, n;

	if (what & CONN_READ) {
		s->in_recv = 1;
		while (evbuffer_get_length(conn->in) != 0) {
			n = evbuffer_peek(conn->in, -1, NULL, v, 8);
			for (i = 0; i < n && i < 8; i++) {
				r = nghttp2_session_mem_recv(s->ng, v[i].iov_base, v[i].iov_len);
				if (r < 0) {
					/* nghttp2 queued its GOAWAY: it goes, then the close. */
					s->in_recv = 0;
					evbuffer_drain(conn->in, evbuffer_get_length(conn->in));
					nghttp2_session_send(s->ng);
					return CLIENT_CLOSE_BAD_REQUEST;
				}
				evbuffer_drain(conn->in, (size_t)r);
			}
		}
		s->in_recv = 0;
	}
	if (what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT))
		return what & CONN_TIMEOUT ? CLIENT_CLOSE_CLIENT_TIMEOUT :
		    what & CONN_ERROR ? CLIENT_CLOSE_CLIENT_ERROR : CLIENT_CLOSE_CLIENT_CLOSED;
	/* Frames go from the loop, after the other events of this turn: answers that came
	 * in it share one write with what this one queued. */
	h2_kick(s);
	return CLIENT_CLOSE_NONE;
}

/* nghttp2's memory (its streams, frames, header copies: a few blocks per stream) comes from
 * the worker's free lists, as libevent's does: no malloc per stream once the worker is warm.
 * Not under AddressSanitizer, which must see every block on its own (as mempool_init). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define H2_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define H2_UNDER_ASAN 1
#endif

#ifndef H2_UNDER_ASAN
static void *
h2_mem_malloc(size_t size, void *arg)
{
	(void)arg;
	return mempool_malloc(size);
}

static void
h2_mem_free(void *p, void *arg)
{
	(void)arg;
	mempool_free(p);
}

static void *
h2_mem_calloc(size_t n, size_t size, void *arg)
{
	void *p;

	(void)arg;
	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	if ((p = mempool_malloc(n * size)) != NULL)
		memset(p, 0, n * size);
	return p;
}

static void *
h2_mem_realloc(void *p, size_t size, void *arg)
{
	(void)arg;
	return mempool_realloc(p, size);
}

static nghttp2_mem h2_mem = {
	NULL, h2_mem_malloc, h2_mem_free, h2_mem_calloc, h2_mem_realloc
};
#define H2_MEM (&h2_mem)
#else
#define H2_MEM NULL
#endif

int
h2_start(struct client *c)
{
	const struct config *cfg = c->w->cur->rt->cfg;
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	struct h2_session *s;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->http2.max_concurrent_streams },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)cfg->http2.stream_window },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)cfg->limits.max_header },
		/* RFC 8441: WebSocket over a stream (h2_upgrade). */
		{ NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1 },
		{ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
	};

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return -1;
	s->c = c;
	s->w = c->w;
	LIST_INIT(&s->streams);
	LIST_INIT(&s->dead);
	TAILQ_INIT(&s->work);
	if ((s->kick = event_new(c->w->base, -1, 0, h2_kick_cb, s)) == NULL ||
	    (s->tick = event_new(c->w->base, -1, EV_PERSIST, h2_tick_cb, s)) == NULL ||
	    nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0)
		goto fail;
	nghttp2_session_callbacks_set_send_callback(cb, h2_send_cb);
	nghttp2_session_callbacks_set_send_data_callback(cb, h2_send_data);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, h2_on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_on_stream_close);
	nghttp2_session_callbacks_set_on_frame_send_callback(cb, h2_on_frame_send);
	/* Windows are given back as requests take the bytes, not as they arrive. */
	nghttp2_option_set_no_auto_window_update(opt, 1);
	if (nghttp2_session_server_new3(&s->ng, cb, s, opt, H2_MEM) != 0)
		goto fail;
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	cb = NULL;
	opt = NULL;
	if (nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) !=
	    0 || nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0,
	    (int32_t)cfg->http2.connection_window) != 0)
		goto fail;
	c->h2 = s;
	s->close_why = CLIENT_CLOSE_NONE;
	{
		static const struct timeval second = { 1, 0 };
		evtimer_add(s->tick, &second);
	}
	metrics_h2(s->w, METRICS_H2_CONNECTION);
	client_idle(c, 1);
	return 0;
fail:
	if (cb != NULL)
		nghttp2_session_callbacks_del(cb);
	if (opt != NULL)
		nghttp2_option_del(opt);
	if (s->ng != NULL)
		nghttp2_session_del(s->ng);
	if (s->kick != NULL)
		event_free(s->kick);
	if (s->tick != NULL)
		event_free(s->tick);
	free(s);
	return -1;
}

void
h2_drain(struct h2_session *s, enum client_close why)
{
	if (s->draining)
		return;
	s->draining = 1;
	s->drain_why = why;
	client_idle(s->c, 0);   /* it ends with its streams, not at the keep-alive timeout */
	/* Streams up to the last one taken finish; later ones are refused. */
	nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE,
	    nghttp2_session_get_last_proc_stream_id(s->ng), NGHTTP2_NO_ERROR, NULL, 0);
	h2_send(s);
}

void
h2_free(struct h2_session *s)
{
	struct h2_stream *st;

	s->closing = 1;
	while ((st = LIST_FIRST(&s->streams)) != NULL) {
		struct client *c = &st->c;

		if (c->state == CLIENT_BUSY && c->rq != NULL) {
			if (!c->rq->ans.started)
				c->rq->status = 499;
			/* A tunnel's line is its end's (tunnel_free). */
			if (!st->aborted && c->rq->tunnel == NULL)
				client_log(c);
			request_abort(c);
			client_request_detach(c);
		}
		st->closed = 1;
		h2_unqueue(st);
		LIST_REMOVE(st, entry);
		h2_stream_free(st);
	}
	while ((st = LIST_FIRST(&s->dead)) != NULL) {
		LIST_REMOVE(st, entry);
		h2_stream_free(st);
	}
	nghttp2_session_del(s->ng);
	event_free(s->kick);
	event_free(s->tick);
	s->c->h2 = NULL;
	free(s);
}
