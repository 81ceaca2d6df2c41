/* An HTTP/2 stream as a tunnel's client end: WebSocket over HTTP/2 (RFC 8441). */
#include "config.h"
#include "request.h"

#include "h2_session.h"

/* The client's DATA, as it came; the window it used opens as the tunnel moves it out (the
 * input's callback, h2_consume), and stays shut while the tunnel does not read. */
static struct evbuffer *
h2_tunnel_input(void *arg)
{
	return ((struct h2_stream *)arg)->c.conn.in;
}

/* Into DATA frames, as the client's window lets them go. */
static void
h2_tunnel_write(void *arg, struct evbuffer *from, size_t n)
{
	struct h2_stream *st = arg;

	if (st->closed || st->ws_shut || st->aborted) {
		evbuffer_drain(from, n);
		return;
	}
	evbuffer_remove_buffer(from, st->out, n);
	if (st->deferred && evbuffer_get_length(st->out) != 0) {
		st->deferred = 0;
		nghttp2_session_resume_data(st->s->ng, st->id);
	}
}

static size_t
h2_tunnel_unsent(void *arg)
{
	struct h2_stream *st = arg;

	return st->closed || st->aborted ? 0 : evbuffer_get_length(st->out);
}

static void
h2_tunnel_reading(void *arg, int on)
{
	struct h2_stream *st = arg;

	st->reading = on != 0;
	if (st->reading && evbuffer_get_length(st->c.conn.in) != 0)
		h2_queue(st);
}

static void
h2_tunnel_drained(void *arg, size_t low)
{
	struct h2_stream *st = arg;

	st->drained = 1;
	st->low = low;
	if (h2_tunnel_unsent(st) <= low)
		h2_queue(st);
}

/* The answer's direction ends: END_STREAM, once out went (it has: the tunnel waits). */
static int
h2_tunnel_shutdown(void *arg)
{
	struct h2_stream *st = arg;

	st->ws_shut = 1;
	st->out_done = 1;
	if (st->deferred && !st->closed) {
		st->deferred = 0;
		nghttp2_session_resume_data(st->s->ng, st->id);
	}
	return 0;
}

static int
h2_tunnel_ended(void *arg)
{
	return ((struct h2_stream *)arg)->in_done;
}

/* The tunnel is over.  Ended by both sides (an upstream that cannot half-close too): what
 * is queued goes, then END_STREAM; else (a failure, timeouts.tunnel, the shutdown) the
 * stream is reset (CANCEL). */
static void
h2_tunnel_close(void *arg, enum tunnel_close why)
{
	struct h2_stream *st = arg;

	st->reading = 0;
	if (st->closed || st->aborted || (st->ws_shut && st->in_done))
		return;
	if (st->in_done && (why == TUNNEL_CLOSE_CLIENT_CLOSED ||
	    why == TUNNEL_CLOSE_UPSTREAM_CLOSED)) {
		h2_tunnel_shutdown(st);
		h2_kick(st->s);
		return;
	}
	st->aborted = 1;
	st->out_done = 1;
	nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
	h2_kick(st->s);         /* from a timer too: the reset goes from the loop */
}

static const struct tunnel_end_ops h2_tunnel_ops = {
	h2_tunnel_input, h2_tunnel_write, h2_tunnel_unsent, h2_tunnel_reading,
	h2_tunnel_drained, h2_tunnel_shutdown, h2_tunnel_ended, h2_tunnel_close
};

/* What the stream's loop turn has for its tunnel: DATA, the window opened, END_STREAM. */
void
h2_tunnel_work(struct h2_stream *st)
{
	int what = 0;

	if (st->drained && h2_tunnel_unsent(st) <= st->low) {
		st->drained = 0;
		what |= TUNNEL_DRAINED;
	}
	if (st->reading && evbuffer_get_length(st->c.conn.in) != 0)
		what |= TUNNEL_READ;
	if (st->in_done && !st->ws_eof_told) {
		st->ws_eof_told = 1;
		what |= TUNNEL_READ | TUNNEL_EOF;
	}
	if (what != 0)
		tunnel_event(st->tunnel, TUNNEL_CLIENT, what);
}

/* The upstream switched to the WebSocket protocol: the extended CONNECT is answered 200 with
 * the 101's fields but its handshake's own (Upgrade, Connection, Sec-WebSocket-Accept), and
 * the stream's DATA both ways is the tunnel's. */
int
h2_upgrade(struct client *c, const struct answer_head *h, struct http_str protocol,
    struct tunnel *t)
{
	struct h2_stream *st = h2_stream_of(c);
	ssize_t head_len;

	if (!st->head.websocket || !HTTP_IEQ(protocol.p, protocol.len, "websocket") || st->closed)
		return -1;
	if ((head_len = h2_answer_fields(c, h)) < 0 || h2_submit_head(st, 1, NULL, 1) < 0)
		return -1;
	c->rq->head_sent = (size_t)head_len;
	c->rq->bytes_sent += c->rq->head_sent;
	c->rq->status = 200;
	st->tunnel = t;
	st->reading = 1;
	st->ws_eof_told = st->in_done;  /* tunnel_start asks ended() */
	tunnel_attach(t, TUNNEL_CLIENT, &h2_tunnel_ops, st);
	return 0;
}
