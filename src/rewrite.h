/* Envelope ops (unwrap, wrap, rename, drop, keep, set, status_from), each possibly under a
 * when: condition, applied to a JSON body, producing the output as a list of spans: pieces of
 * the input plus small generated literals. */
#ifndef JG_REWRITE_H
#define JG_REWRITE_H

#include <stddef.h>
#include <yaml.h>

#include "jcond.h"
#include "jstr.h"

struct config_parse;                    /* config.h: where parse errors go */
struct rewrite_program;                 /* compiled op list of one route direction */
struct rewrite_ctx;                     /* per-worker scratch: tokens, spans, literal bytes */

struct rewrite_str {
	const char *p;
	size_t len;
};

/*
 * Values for the $variables of `set`, resolved per request.  The engine knows nothing of HTTP:
 * the caller fills the values, and looks request headers up for $header.NAME.
 */
struct rewrite_vars {
	struct rewrite_str request_id;
	struct rewrite_str route;
	struct rewrite_str upstream;
	struct rewrite_str remote_addr;
	struct rewrite_str ssl_client_s_dn;     /* "" when the client sent no certificate */
	struct rewrite_str ssl_client_verify;   /* SUCCESS, NONE or FAILED:reason */
	long long now;                  /* unix time, for $time_iso8601 */
	int status;                     /* the upstream's HTTP status; 0 for request bodies */
	/* $header.NAME: 1 and *value set when the request has header NAME (any case), else 0.
	 * NULL: no headers. */
	int (*header_cb)(const void *arg, const char *name, size_t len, struct rewrite_str *value);
	const void *header_arg;
	/* $json.PATH: 1 and *value set (the decoded string, or the bytes of another value) when
	 * the request body has the field, else 0.  NULL: no body fields. */
	int (*json_cb)(const void *arg, const char *path, size_t len, struct rewrite_str *value);
	const void *json_arg;
	/* $path.NAME: 1 and *value set (the capture, percent-decoded) when the route's path
	 * template has it, else 0.  NULL: no captures. */
	int (*path_cb)(const void *arg, const char *name, size_t len, struct rewrite_str *value);
	const void *path_arg;
	/* $jwt.CLAIM: 1 and *value set (a string claim decoded, another claim's JSON text;
	 * valid until the next call) when the request's verified token has the claim, else 0.
	 * NULL: no token. */
	int (*jwt_cb)(const void *arg, const char *path, size_t len, struct rewrite_str *value);
	const void *jwt_arg;
	struct rewrite_str api_key;     /* $api_key: the key's NAME, "" for none */
	struct rewrite_str client_addr; /* $client_addr (trusted_proxies) */
};

/* One piece of output: points into the input body or into the ctx's literal storage. */
struct rewrite_span {
	const char *p;
	size_t len;
};

struct rewrite_result {
	int status;                     /* HTTP status chosen by status_from, 0: keep the upstream's */
	const struct rewrite_span *spans;   /* valid until the next rewrite_apply on this ctx */
	size_t nspans;
	size_t total_len;               /* sum of span lengths: the new Content-Length */
	const char *error;              /* on failure: a short static reason */
	int invalid;                    /* on failure: the body is not JSON (RFC 8259), rather
	                                 * than ops that could not apply or a limit */
};

enum rewrite_direction { REWRITE_REQUEST, REWRITE_RESPONSE };

/* How much of a body is checked: the object being edited (envelope), or all of it, strictly
 * (full). */
enum validate_mode { VALIDATE_ENVELOPE, VALIDATE_FULL };

/*
 * Parse the YAML sequence `node` (a route's `request:` or `response:` list, as direction says)
 * into a program.  Errors are reported with config_error at the offending node.  *out is NULL
 * for an empty list.  Returns 0 when no error was found.
 */
int rewrite_program_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node,
    enum rewrite_direction direction, struct rewrite_program **out);
void rewrite_program_free(struct rewrite_program *prog);

/*
 * A context accepts nesting up to max_depth and tokenizes at most max_members members in one
 * body, all the objects the ops look into together: what it holds stays in proportion.
 */
struct rewrite_ctx *rewrite_ctx_new(unsigned max_depth, size_t max_members);
void rewrite_ctx_free(struct rewrite_ctx *ctx);
/*
 * Send the output to cb in batches of spans as it is produced instead of collecting it in the
 * result (whose spans are then empty; total_len still counts it).  cb returns 0, or nonzero
 * to fail the rewrite.  NULL: collect.
 */
void rewrite_ctx_sink(struct rewrite_ctx *ctx,
    int (*cb)(void *arg, const struct rewrite_span *spans, size_t n), void *arg);
/* The last result is no longer needed: free what one large body grew past a warm size. */
void rewrite_ctx_release(struct rewrite_ctx *ctx);

/*
 * Apply prog to body[0..len).  Returns 0 and fills *out, or -1 when the body cannot be
 * rewritten (invalid JSON for `mode`, missing key for unwrap, non-object where an object is
 * needed, depth over max_depth): the caller then follows the route's on_error policy.
 */
int rewrite_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *body, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out);

/*
 * The JSON text of each value prog's set ops write, resolved with vars as rewrite_apply does:
 * vals[k] for the k-th item of a set op, in op then item order (valid until ctx is next
 * used).  For code that applies the ops without the document tree (stream_envelope.c).
 * Returns 0, or -1 when out of memory or nvals is too small.
 */
int rewrite_set_values(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    const struct rewrite_vars *vars, struct rewrite_str *vals, size_t nvals);

/*
 * Parse a program from YAML text holding one op sequence of responses, outside a configuration
 * file (unit tests, fuzzers, benchmarks).  On error returns NULL and writes "LINE:COL: message"
 * (the first error by position) to errbuf.  An empty sequence yields an empty program, never
 * NULL.
 */
struct rewrite_program *rewrite_program_from_yaml(const char *yaml, size_t len, char *errbuf,
    size_t errlen);
/* The same for a route whose match.path is path_template (NULL: a plain path): its captures
 * may be set as $path.NAME. */
struct rewrite_program *rewrite_program_from_yaml_route(const char *yaml, size_t len,
    const char *path_template, char *errbuf, size_t errlen);

/* Escape src[0..len) as the inside of a JSON string into dst, which must hold 6 * len bytes:
 * jstr_escape, the one escaper and its UTF-8 policy, under the name the engine's callers use. */
static inline size_t
rewrite_json_escape(char *dst, const char *src, size_t len)
{
	return jstr_escape(dst, src, len);
}

/* ---- compiled programs: shared by rewrite_config.c (builds) and rewrite.c (runs) ---- */

enum rewrite_op_kind {
	REWRITE_UNWRAP, REWRITE_WRAP, REWRITE_RENAME, REWRITE_DROP, REWRITE_KEEP, REWRITE_SET,
	REWRITE_STATUS_FROM
};

enum rewrite_var {
	REWRITE_VAR_NONE,               /* a JSON literal */
	REWRITE_VAR_REQUEST_ID, REWRITE_VAR_ROUTE, REWRITE_VAR_UPSTREAM, REWRITE_VAR_REMOTE_ADDR,
	REWRITE_VAR_TIME_ISO8601, REWRITE_VAR_HEADER, REWRITE_VAR_SSL_CLIENT_S_DN,
	REWRITE_VAR_SSL_CLIENT_VERIFY, REWRITE_VAR_JSON, REWRITE_VAR_PATH,
	REWRITE_VAR_JWT, REWRITE_VAR_API_KEY, REWRITE_VAR_CLIENT_ADDR
};

/* 1 when the program's set values use the variable var. */
int rewrite_program_uses(const struct rewrite_program *prog, enum rewrite_var var);
/* Call fn with the name of each $header.NAME, $json.PATH or $path.NAME (as var says) of
 * prog's values. */
void rewrite_program_names(const struct rewrite_program *prog, enum rewrite_var var,
    void (*fn)(void *arg, const char *name, size_t len), void *arg);

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
	char *s;                        /* JSON literal (VAR_NONE), header name (VAR_HEADER),
	                                 * dotted path (VAR_JSON) or capture name (VAR_PATH) */
	size_t len;
};

struct rewrite_item {
	struct rewrite_path path;       /* rename source, drop/keep path, set target */
	struct rewrite_key to;          /* rename: the new key, in the same object */
	int replaces;                   /* rename: members renamed to `to` replace those already
	                                 * called so (no other item of the op renames them) */
	struct rewrite_piece *val;      /* set: the value */
	size_t nval;
};

/* A status_from map entry: a value compared by value, or a range of integers (5xx). */
struct rewrite_status_map {
	struct jcond_scalar key;        /* unused for a range */
	int lo, hi;                     /* a range: 500..599; 0..0 otherwise */
	int status;
};

struct rewrite_op {
	enum rewrite_op_kind kind;
	struct jcond *when;             /* run only when this holds; NULL: always */
	struct rewrite_path path;       /* unwrap, wrap, status_from field */
	struct rewrite_item *items;     /* rename, drop, keep (sorted by path), set */
	size_t nitems;
	struct rewrite_status_map *map; /* status_from */
	size_t nmap;
	int def_status;                 /* status_from default, 0: keep the status */
	int strings;                    /* status_from: numeric strings match number keys */
};

struct rewrite_program {
	struct rewrite_op *ops;
	size_t nops;
	unsigned vars;                  /* bit 1 << var for each variable a set value uses */
};

#endif
