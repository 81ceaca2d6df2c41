/* Buffered JSON bodies for envelope ops: which bodies qualify, inflating them, applying a
 * route's ops, and laying the result into an output buffer that references the input. */
#ifndef JG_BODY_H
#define JG_BODY_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "http.h"
#include "rewrite.h"

struct evbuffer;
struct body_pool;
struct timers;
struct conn;

enum body_coding { BODY_CODING_IDENTITY, BODY_CODING_GZIP, BODY_CODING_DEFLATE, BODY_CODING_OTHER };

/* 1 when content_type (a Content-Type value) is one of the route's JSON media types. */
int body_is_json(const struct config_route *route, struct http_str content_type);
/* What one content-coding name is. */
enum body_coding body_coding(struct http_str name);
/* The coding of a message's body, from all its Content-Encoding lines as one list:
 * "identity" is none, and codings applied one over another are BODY_CODING_OTHER. */
enum body_coding body_content_coding(const struct http_header *h, size_t n);
/* 1 when the Accept-Encoding lines of a request take gzip: gzip (or x-gzip) with a weight
 * above 0, or else "*" with one (RFC 9110 12.5.3).  Without Accept-Encoding: 0. */
int body_accepts_gzip(const struct http_header *h, size_t n);

/* 1 when prog reads request headers ($header.NAME), which must then be kept for it. */
int body_needs_headers(const struct rewrite_program *prog);

/* Let prog's $header.NAME read the headers of req, which must outlive the rewrite. */
void body_vars_headers(struct rewrite_vars *vars, const struct http_request *req);

/* Room for the TLS variables of one request. */
struct body_tls_text {
	char s_dn[1024];
	char verify[160];
};

/* Set vars' $ssl_client_s_dn and $ssl_client_verify from the client connection when uses
 * (bits 1 << REWRITE_VAR_*) has them (text holds their bytes); without them it costs one
 * test. */
void body_tls_vars(unsigned uses, const struct conn *client, struct rewrite_vars *vars,
    struct body_tls_text *text);

/* Per-worker scratch: the rewrite context and a few reusable body blocks. */
struct body_pool *body_pool_new(void);
/* The worker's deadlines: memory left by large bodies then goes back to the system a while
 * after the last one, not after each (without: after each). */
void body_pool_set_timers(struct body_pool *pool, struct timers *t);
void body_pool_free(struct body_pool *pool);

struct body_result {
	int status;                     /* from status_from, 0 when none */
	const char *error;              /* why the body could not be rewritten */
	int encoding;                   /* because of a Content-Encoding it cannot decode */
	int invalid;                    /* because the body is not JSON */
	int inflated;                   /* the output is identity-coded: drop Content-Encoding */
	size_t spliced;                 /* output bytes that are the input's, as they came */
	size_t copied;                  /* output bytes the ops wrote: keys, values, separators */
};

/*
 * Rewrite the body held in raw with prog, appending the output to out.  Returns 0 (raw is
 * then empty), or -1 with res->error set and raw holding the body as received: the caller
 * then follows on_error with raw.
 */
int body_apply(struct body_pool *pool, const struct config *cfg, const struct config_route *route,
    const struct rewrite_program *prog, enum body_coding coding, struct evbuffer *raw,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res);

/*
 * A body received straight into one contiguous block (a Content-Length body read by the
 * socket layer without an evbuffer in between): new (one reference, len bytes of room),
 * its memory, release.  Output chains that reference it keep it alive.
 */
struct body_block;
struct body_block *body_block_new(struct body_pool *pool, size_t len);
char *body_block_data(struct body_block *b);
/* Make room for len bytes in a block nobody else references yet, keeping its contents; a
 * large block grows in place (mremap), so collecting a body of unknown size needs no second
 * copy.  0 or -1 (the block is unchanged). */
int body_block_reserve(struct body_block **b, size_t len);
void body_block_release(struct body_block *b);
/* One more reference to b (released with body_block_release). */
void body_block_ref(struct body_block *b);
/* Append the block's first len bytes to out by reference. */
int body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len);
/* Append p[0..len), which lies in the block, to out: by reference when it is long enough to
 * be worth a chain of its own, else copied. */
int body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len);
/* Append a copy of p[0..len) to out, in a chain sized for it: after a reference, where
 * evbuffer_add would take a chain as large as the referenced span (libevent sizes a new
 * chain after the last one), a 1 MB allocation for a closing brace.  0 or -1. */
int body_add_copy(struct evbuffer *out, const void *p, size_t len);
/* A new block (one reference) holding a copy of src's bytes; NULL when out of memory. */
struct body_block *body_block_copy(struct body_pool *pool, struct evbuffer *src);
/*
 * Collect a Content-Length body of len bytes into b from the connection c: what its input
 * holds is copied, the rest the socket layer reads straight into place (c->sink).  *left
 * counts the bytes still to come; *sinking says whether c->sink is set for this block.
 */
void body_block_fill(struct body_block *b, size_t len, uint64_t *left, int *sinking,
    struct conn *c);
/* body_apply for a body held in a block (the caller keeps its reference). */
int body_apply_block(struct body_pool *pool, const struct config *cfg,
    const struct config_route *route, const struct rewrite_program *prog,
    enum body_coding coding, struct body_block *raw, size_t len,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res);

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
