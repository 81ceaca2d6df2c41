/* Content codings of bodies: which a message has and a client accepts, inflating, gzip. */
#ifndef JG_BODY_CODING_H
#define JG_BODY_CODING_H

#include <stddef.h>
#include "http.h"

struct evbuffer;
struct body_pool;
struct body_block;

enum body_coding { BODY_CODING_IDENTITY, BODY_CODING_GZIP, BODY_CODING_DEFLATE, BODY_CODING_OTHER };

/* A worker's zlib states (its body pool holds one): they serve one body at a time. */
struct body_coding_state;
struct body_coding_state *body_coding_state_new(void);
void body_coding_state_free(struct body_coding_state *z);

/* What one content-coding name is. */
enum body_coding body_coding(struct http_str name);
/* The coding of a message's body, from all its Content-Encoding lines as one list:
 * "identity" is none, and codings applied one over another are BODY_CODING_OTHER. */
enum body_coding body_content_coding(const struct http_header *h, size_t n);
/* 1 when the Accept-Encoding lines of a request take gzip: gzip (or x-gzip) with a weight
 * above 0, or else "*" with one (RFC 9110 12.5.3).  Without Accept-Encoding: 0. */
int body_accepts_gzip(const struct http_header *h, size_t n);

/*
 * On a route with response ops: leave in req's Accept-Encoding only the codings body_apply
 * can decode (gzip, x-gzip, deflate, identity, with their parameters) that the client does
 * not refuse with q=0, "identity" when none is left, so that upstream answers come in a
 * coding the ops can read.  buf (at least 8 bytes) holds the new value and must live as long
 * as req's headers are used.  A request without Accept-Encoding is left alone: upstreams
 * answer it in identity.
 */
void body_limit_accept_encoding(struct http_request *req, char *buf, size_t size);

enum body_inflate_result {
	BODY_INFLATE_END,               /* the compressed data ended with the input */
	BODY_INFLATE_FULL,              /* the output is full */
	BODY_INFLATE_SHORT,             /* the input is used up: more of it is needed */
	BODY_INFLATE_ERROR              /* not gzip or deflate data, or bytes after its end */
};

/*
 * Inflate the first bytes of a body (routing reads a prefix) into out[0..cap): start, then
 * feed the compressed bytes in pieces as they lie in the input; *out_len is the output so
 * far.  Returns an enum body_inflate_result; start returns 0 or -1.  The pool's inflate state
 * serves one body at a time.
 */
int body_prefix_inflate_start(struct body_pool *pool, enum body_coding coding, char *out,
    size_t cap);
int body_prefix_inflate(struct body_pool *pool, const char *src, size_t len, size_t *out_len);

/* Inflate src[0..len) (gzip or deflate) into a new block (one reference), bounded by max:
 * *out_len bytes; NULL with *error set on failure. */
struct body_block *body_inflate(struct body_pool *pool, const char *src, size_t len,
    enum body_coding coding, size_t max, size_t *out_len, const char **error);

/* Replace the contents of data with their gzip encoding; 0 or -1. */
int body_gzip(struct body_pool *pool, struct evbuffer *data);

#endif
