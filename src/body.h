/* Buffered JSON bodies for envelope ops: which bodies qualify, inflating them, applying a
 * route's ops, and laying the result into an output buffer that references the input. */
#ifndef JG_BODY_H
#define JG_BODY_H

#include <stddef.h>
#include "config.h"
#include "http.h"
#include "rewrite.h"

struct evbuffer;
struct body_pool;
struct conn;

enum body_coding { BODY_CODING_IDENTITY, BODY_CODING_GZIP, BODY_CODING_DEFLATE, BODY_CODING_OTHER };

/* 1 when content_type (a Content-Type value) is one of the route's JSON media types. */
int body_is_json(const struct config_route *route, struct http_str content_type);
enum body_coding body_coding(struct http_str content_encoding);

/* 1 when prog reads request headers ($header.NAME), which must then be kept for it. */
int body_needs_headers(const struct rewrite_program *prog);

/* Room for the TLS variables of one request. */
struct body_tls_text {
	char s_dn[1024];
	char verify[160];
};

/* Set vars' $ssl_client_s_dn and $ssl_client_verify from the client connection when prog
 * uses them (text holds their bytes); a program without them costs one test. */
void body_tls_vars(const struct rewrite_program *prog, const struct conn *client,
    struct rewrite_vars *vars, struct body_tls_text *text);

/* Per-worker scratch: the rewrite context and a few reusable body blocks. */
struct body_pool *body_pool_new(void);
void body_pool_free(struct body_pool *pool);

struct body_result {
	int status;                     /* from status_from, 0 when none */
	const char *error;              /* why the body could not be rewritten */
	int inflated;                   /* the output is identity-coded: drop Content-Encoding */
	size_t spliced;                 /* output bytes that are references into the input */
	size_t copied;                  /* output bytes copied (generated JSON, short spans) */
};

/*
 * Rewrite the body held in raw (left untouched) with prog, appending the output to out.
 * Returns 0, or -1 with res->error set: the caller then follows on_error with raw.
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
void body_block_release(struct body_block *b);
/* Append the block's first len bytes to out by reference. */
int body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len);
/* body_apply for a body held in a block (the caller keeps its reference). */
int body_apply_block(struct body_pool *pool, const struct config *cfg,
    const struct config_route *route, const struct rewrite_program *prog,
    enum body_coding coding, struct body_block *raw, size_t len,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res);

/* Replace the contents of data with their gzip encoding; 0 or -1. */
int body_gzip(struct body_pool *pool, struct evbuffer *data);

#endif
