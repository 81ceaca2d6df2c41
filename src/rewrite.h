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
	struct http_str ssl_client_s_dn;    /* "" when the client sent no certificate */
	struct http_str ssl_client_verify;  /* SUCCESS, NONE or FAILED:reason */
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

/*
 * Parse a program from YAML text holding one op sequence, outside a configuration file (unit
 * tests, fuzzers, benchmarks).  On error returns NULL and writes "LINE:COL: message" (the first
 * error) to errbuf.  An empty sequence yields an empty program, never NULL.
 */
struct rewrite_program *rewrite_program_from_yaml(const char *yaml, size_t len, char *errbuf,
    size_t errlen);

/*
 * Escape src[0..len) as the inside of a JSON string into dst, which must hold 6 * len bytes:
 * `"`, `\` and control bytes are escaped, invalid UTF-8 becomes U+FFFD.  Returns the length.
 */
size_t rewrite_json_escape(char *dst, const char *src, size_t len);

/* ---- compiled programs: shared by rewrite_config.c (builds) and rewrite.c (runs) ---- */

enum rewrite_op_kind {
	REWRITE_UNWRAP, REWRITE_WRAP, REWRITE_RENAME, REWRITE_DROP, REWRITE_KEEP, REWRITE_SET,
	REWRITE_STATUS_FROM
};

enum rewrite_var {
	REWRITE_VAR_NONE,               /* a JSON literal */
	REWRITE_VAR_REQUEST_ID, REWRITE_VAR_ROUTE, REWRITE_VAR_UPSTREAM, REWRITE_VAR_REMOTE_ADDR,
	REWRITE_VAR_TIME_ISO8601, REWRITE_VAR_HEADER, REWRITE_VAR_SSL_CLIENT_S_DN,
	REWRITE_VAR_SSL_CLIENT_VERIFY
};

/* 1 when the program's set values use the variable var. */
int rewrite_program_uses(const struct rewrite_program *prog, enum rewrite_var var);

struct rewrite_key {
	char *name;                     /* the key as text (what input keys are compared to) */
	size_t len;
	char *json;                     /* the key as a JSON string, quotes included; */
	size_t json_len;                /* json[-1] is ',' and json[json_len] is ':' */
};

struct rewrite_path {                   /* "data.result" -> { data, result } */
	struct rewrite_key *seg;
	size_t nseg;
};

/* A set value: JSON text with $variables spliced in, e.g. {"id":  $request_id  } */
struct rewrite_piece {
	enum rewrite_var var;
	char *s;                        /* JSON literal (VAR_NONE) or header name (VAR_HEADER) */
	size_t len;
};

struct rewrite_item {
	struct rewrite_path path;       /* rename source, drop/keep path, set target */
	struct rewrite_key to;          /* rename: the new key */
	struct rewrite_piece *val;      /* set: the value */
	size_t nval;
};

struct rewrite_status_map {
	char *json;                     /* the YAML key as JSON: 0, "0", true, null */
	size_t len;
	char *text;                     /* string keys: the text itself, else NULL */
	size_t text_len;
	int status;
};

struct rewrite_op {
	enum rewrite_op_kind kind;
	struct rewrite_path path;       /* unwrap, wrap, status_from field */
	struct rewrite_item *items;     /* rename, drop, keep (sorted by path), set */
	size_t nitems;
	struct rewrite_status_map *map; /* status_from */
	size_t nmap;
	int def_status;                 /* status_from default, 0 when none */
};

struct rewrite_program {
	struct rewrite_op *ops;
	size_t nops;
	int sets_status;
	unsigned vars;                  /* bit 1 << var for each variable a set value uses */
};

#endif
