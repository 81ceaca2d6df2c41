/* Envelope ops (unwrap, wrap, rename, drop, keep, set, status_from) applied to a JSON body,
 * producing the output as a list of spans: pieces of the input plus small generated literals. */
#ifndef JG_REWRITE_H
#define JG_REWRITE_H

#include <stddef.h>
#include <yaml.h>

#include "config.h"
#include "http.h"

struct rewrite_program;                 /* compiled op list of one route direction */
struct rewrite_ctx;                     /* per-worker scratch: tokens, spans, literal bytes */

/* Values for the $variables of `set`, resolved per request. */
struct rewrite_vars {
	struct http_str request_id;
	struct http_str route;
	struct http_str upstream;
	struct http_str remote_addr;
	long long now;                  /* unix time, for $time_iso8601 */
	const struct http_header *headers;  /* for $header.NAME (request headers) */
	size_t nheaders;
};

/* One piece of output: points into the input body or into the ctx's literal storage. */
struct rewrite_span {
	const char *p;
	size_t len;
};

struct rewrite_result {
	int status;                     /* HTTP status chosen by status_from, 0 when none */
	const struct rewrite_span *spans;   /* valid until the next rewrite_apply on this ctx */
	size_t nspans;
	size_t total_len;               /* sum of span lengths: the new Content-Length */
	const char *error;              /* on failure: a short static reason */
};

/*
 * Parse the YAML sequence `node` (a route's `request:` or `response:` list) into a program.
 * Errors are reported with config_error at the offending node.  *out is NULL for an empty list.
 * Returns 0 when no error was found.
 */
int rewrite_program_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node,
    struct rewrite_program **out);
void rewrite_program_free(struct rewrite_program *prog);
/* 1 when the program contains status_from. */
int rewrite_program_sets_status(const struct rewrite_program *prog);

struct rewrite_ctx *rewrite_ctx_new(unsigned max_depth);
void rewrite_ctx_free(struct rewrite_ctx *ctx);

/*
 * Apply prog to body[0..len).  Returns 0 and fills *out, or -1 when the body cannot be
 * rewritten (invalid JSON for `mode`, missing key for unwrap, non-object where an object is
 * needed, depth over max_depth): the caller then follows the route's on_error policy.
 */
int rewrite_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *body, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out);

#endif
