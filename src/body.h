/* Buffered JSON bodies for envelope ops: which bodies qualify, applying a route's ops, and
 * laying the result into an output buffer that references the input.  The blocks bodies are
 * held in (block.h), their content codings (body_coding.h) and the TLS variables
 * (body_tls.h) have files of their own, included here for the callers of all of them. */
#ifndef JG_BODY_H
#define JG_BODY_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "http.h"
#include "rewrite.h"
#include "block.h"
#include "body_coding.h"
#include "body_tls.h"

struct evbuffer;
struct body_pool;
struct timers;
struct conn;

/* 1 when content_type (a Content-Type value) is one of the route's JSON media types. */
int body_is_json(const struct config_route *route, struct http_str content_type);
/* 1 when prog reads request headers ($header.NAME), which must then be kept for it. */
int body_needs_headers(const struct rewrite_program *prog);

/* Let prog's $header.NAME read the headers of req, which must outlive the rewrite. */
void body_vars_headers(struct rewrite_vars *vars, const struct http_request *req);

/* Per-worker scratch: the rewrite context, the zlib states and a pool of body blocks. */
struct body_pool *body_pool_new(void);
/* The worker's deadlines: memory left by large bodies then goes back to the system a while
 * after the last one, not after each (without: after each). */
void body_pool_set_timers(struct body_pool *pool, struct timers *t);
void body_pool_free(struct body_pool *pool);
/* The pool's blocks, for code that needs blocks and nothing else of bodies. */
struct body_block_pool *body_pool_blocks(struct body_pool *pool);
/* The pool's zlib states, for the content codings. */
struct body_coding_state *body_pool_coding(struct body_pool *pool);
/* A block from the pool's blocks: new (one reference, len bytes of room), or a copy of src's
 * bytes; NULL when out of memory. */
struct body_block *body_block_new(struct body_pool *pool, size_t len);
struct body_block *body_block_copy(struct body_pool *pool, struct evbuffer *src);

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

#endif
