/*
 * A chunked body read from an evbuffer a piece at a time: the chunked decoder is driven from
 * two readers only, the HTTP/1.1 session's of request bodies and http_answer_next's of
 * answers (proxied and fetched answers, health checks).  A piece is framing, a run of data
 * or the body's end; the caller takes it (drains it, or moves its cursor past it) and does
 * with the data what it does.
 */
#ifndef JG_HTTP_BODY_H
#define JG_HTTP_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

struct evbuffer;

/* What http_chunked_next says when the buffer holds no more bytes at the position. */
#define HTTP_CHUNKED_NONE 3

struct http_chunk_piece {
	size_t consumed;                /* bytes of the buffer the piece spans */
	size_t data_off;                /* its data (HTTP_CHUNKED_DATA): data_len bytes, from */
	size_t data_len;                /* data_off within those */
	const char *data;               /* where they lie (valid until the buffer changes) */
};

/*
 * The next piece of the body through decoder ch, at off bytes into in, looking at max bytes
 * at most: HTTP_CHUNKED_DATA, _MORE (framing), _DONE, _ERROR, or HTTP_CHUNKED_NONE when in
 * holds nothing there.  The piece stays in the buffer.
 */
int http_chunked_next(struct http_chunked *ch, struct evbuffer *in, size_t off, size_t max,
    struct http_chunk_piece *piece);
/*
 * An answer's body as it is read from the front of its connection's buffer, whatever its
 * framing: chunks (through ch), a length (*left bytes still to come) or the close.  The one
 * reader of answers, proxied, fetched and health checks alike.
 */
struct http_answer_body {
	enum { HTTP_ANSWER_LENGTH, HTTP_ANSWER_CHUNKED, HTTP_ANSWER_CLOSE } framing;
	uint64_t *left;                 /* HTTP_ANSWER_LENGTH: bytes still to come */
	struct http_chunked *ch;        /* HTTP_ANSWER_CHUNKED: the decoder */
};

/*
 * The next piece of the answer at off bytes into in (looking at max bytes at most; eof: the
 * upstream closed, which ends a body framed by the close): HTTP_CHUNKED_DATA (data_len bytes
 * at data_off within consumed; piece->data set for chunks only), _MORE (framing), _DONE (the
 * body ended; consumed is its last framing), _ERROR, or HTTP_CHUNKED_NONE when nothing more
 * is there yet.  The piece stays in the buffer; a length goes down by the data returned.
 */
int http_answer_next(const struct http_answer_body *b, struct evbuffer *in, size_t off,
    size_t max, int eof, struct http_chunk_piece *piece);
/* The next piece at the front of in, taken: its data moved to dst (NULL: dropped), its
 * framing dropped.  What http_answer_next says. */
int http_answer_take(const struct http_answer_body *b, struct evbuffer *in, int eof,
    struct evbuffer *dst);

/*
 * A request body as its session hands it over, a run of payload at a time (framing, if the
 * protocol has any, stays the session's): what the next look found.
 */
enum body_run {
	BODY_RUN_NONE,          /* no more of it came yet */
	BODY_RUN_DATA,          /* a run of payload */
	BODY_RUN_END,           /* the body ended: the input past it is not the body's */
	BODY_RUN_BAD            /* its framing is bad */
};

/* A reader's place in a body it reads where it lies, without taking it. */
struct body_cursor {
	size_t at;                      /* the input's next byte to look at */
	struct http_chunked ch;         /* the session's, for a body it de-chunks */
};

/* A body read without taking it: the next run from cur on (*p, *n for BODY_RUN_DATA), cur
 * moved past it.  An enum body_run. */
typedef int (*body_peek_fn)(void *arg, struct body_cursor *cur, const char **p, size_t *n);

/* cur at the first byte of a body that begins at off bytes into the input. */
static inline void
body_cursor_init(struct body_cursor *cur, size_t off)
{
	cur->at = off;
	http_chunked_init(&cur->ch);
}

#endif
