/*
 * The HTTP/2 session's private parts, shared by h2.c (the session, its streams' requests and
 * answers) and h2_tunnel.c (a stream as a tunnel's client end, RFC 8441).
 */
#ifndef JG_H2_SESSION_H
#define JG_H2_SESSION_H

#include <sys/queue.h>

#include <nghttp2/nghttp2.h>

#include "request.h"

/* Longest :method, :path and :authority kept. */
#define H2_METHOD_MAX 16
/* Longest sec-websocket-version kept (it is "13"). */
#define H2_WS_VERSION_MAX 8

/* Bytes a stream keeps from one request to the next: no allocation once it is warm. */
struct h2_buf {
	char *p;
	size_t len, size;
};

struct h2_stream {
	struct client c;                /* first: the request core's view of the stream */
	struct h2_session *s;
	struct h2_stream *next_kept;    /* in the thread's streams kept for reuse */
	int32_t id;
	LIST_ENTRY(h2_stream) entry;    /* in s->streams, or s->dead */
	TAILQ_ENTRY(h2_stream) pending; /* in s->work: input to hand on, or an answer drained */
	struct evbuffer *out;           /* answer body bytes waiting for the window */
	struct h2_buf fields;           /* the request's fields as HTTP/1.1 lines, while read */
	struct evbuffer *cookie;        /* its cookie crumbs joined, or NULL */
	char method[H2_METHOD_MAX];
	struct h2_buf path;             /* :path and :authority, copied */
	struct h2_buf authority;
	size_t field_bytes;             /* decoded fields + 32 each, against limits.max_header */
	uint64_t unconsumed;            /* DATA bytes received not yet given back as window */
	uint64_t progress;              /* ms (monotonic) its answer last moved, or began to wait */
	size_t low;                     /* the mark out must fall to before drained is told */
	struct tunnel *tunnel;          /* the tunnel this stream is the client end of, or NULL */
	char ws_version[H2_WS_VERSION_MAX];     /* an extended CONNECT's sec-websocket-version */
	unsigned queued : 1;            /* in s->work */
	unsigned reading : 1;           /* its request takes body bytes now */
	unsigned in_done : 1;           /* the client's half is closed */
	unsigned out_done : 1;          /* the answer's last byte is in out */
	unsigned deferred : 1;          /* the answer waits for bytes in out */
	unsigned drained : 1;           /* its request waits to hear that out went down */
	unsigned closed : 1;            /* nghttp2 is done with it */
	unsigned aborted : 1;           /* reset by us: its request ended in an error */
	struct {                        /* what its request's fields said */
		unsigned too_large : 1; /* they outgrew limits.max_header */
		unsigned has_host : 1;
		unsigned has_path : 1;
		unsigned has_authority : 1;
		unsigned has_length : 1;
		unsigned websocket : 1; /* an extended CONNECT with :protocol websocket */
	} head;
	unsigned ws_eof_told : 1;       /* its tunnel heard of the client's END_STREAM */
	unsigned ws_shut : 1;           /* its tunnel ended the answer's direction */
};

LIST_HEAD(h2_stream_list, h2_stream);
TAILQ_HEAD(h2_stream_queue, h2_stream);

struct h2_session {
	struct client *c;               /* the connection */
	struct worker *w;
	nghttp2_session *ng;
	struct h2_stream_list streams;  /* with a request or an answer in flight */
	struct h2_stream_list dead;     /* closed, freed from the loop */
	struct h2_stream_queue work;
	struct event *kick;             /* runs s->work and frees s->dead from the loop */
	struct event *tick;             /* once a second: answers stuck at a shut window */
	size_t nstreams;
	enum client_close close_why;    /* the connection is to close, from the loop */
	enum client_close drain_why;    /* why it was told to go (GOAWAY) */
	unsigned sending : 1;
	unsigned send_again : 1;
	unsigned in_recv : 1;           /* inside nghttp2's recv: frames go out after it */
	unsigned draining : 1;
	unsigned closing : 1;
};

static inline struct h2_stream *
h2_stream_of(struct client *c)
{
	return (struct h2_stream *)c;
}

/* The stream has work for the loop (input to hand on, an answer drained, a tunnel's turn). */
void h2_queue(struct h2_stream *st);
/* The session's loop runs soon (frames to send, streams to free). */
void h2_kick(struct h2_session *s);
/* The fields of the answer head h and of the request's answer_headers, made ready for
 * h2_submit_head: the length of the same head as HTTP/1.1 text (the access log's count), or
 * -1 without memory. */
ssize_t h2_answer_fields(struct client *c, const struct answer_head *h);
/* Submit the head h2_answer_fields made as HEADERS (with_body: DATA follows), length its
 * content-length or NULL; tunnel: the 200 that opens an RFC 8441 tunnel. */
int h2_submit_head(struct h2_stream *st, int with_body, const char *length, int tunnel);

/* h2_tunnel.c */
/* The answer is 101 to an extended CONNECT: the stream becomes the tunnel's client end. */
int h2_upgrade(struct client *c, const struct answer_head *h, struct http_str protocol,
    struct tunnel *t);
/* What the stream's loop turn has for its tunnel: DATA, the window opened, END_STREAM. */
void h2_tunnel_work(struct h2_stream *st);

#endif
