/*
 * Strings with ${variables} (a backend's request-target and header values), compiled at
 * load and interpolated per request:
 *
 *   ${path.NAME}           a capture of the route's path template
 *   ${query.NAME}          the first query parameter NAME, decoded (empty when absent)
 *   ${header.NAME}         the first request header NAME (empty when absent)
 *   ${backend.NAME.FIELD}  a field (dotted path) of the answer of a backend waited for
 *   ${request_id}, ${remote_addr}
 *   ${jwt.CLAIM}           a claim (dotted path) of the token the auth phase verified
 *   ${api_key}             the NAME of the API key the auth phase admitted
 *
 * $$ is a literal $.  In a request-target every value is percent-encoded (all but
 * A-Z a-z 0-9 - . _ ~; the slashes the client wrote in a {NAME...} capture stay in the path,
 * a %2F stays %2F), and one that would put a dot segment in the path is refused; in a
 * header a value holding CR, LF or NUL is refused.
 */
#ifndef JG_TEMPLATE_H
#define JG_TEMPLATE_H

#include <stddef.h>

/* No http.h: config.h holds compiled templates, and the envelope engine includes config.h
 * but nothing of the HTTP layer. */
struct evbuffer;
struct http_request;
struct http_str;
struct route_pattern;

enum template_var {
	TEMPLATE_TEXT,                  /* literal text */
	TEMPLATE_PATH,
	TEMPLATE_QUERY,
	TEMPLATE_HEADER,
	TEMPLATE_BACKEND,
	TEMPLATE_REQUEST_ID,
	TEMPLATE_REMOTE_ADDR,
	TEMPLATE_JWT,
	TEMPLATE_API_KEY
};

struct template_piece {
	enum template_var var;
	char *text;                     /* the literal, or the variable as written in ${} */
	size_t len;
	size_t off;                     /* where its name (capture, parameter, lowercase header,
	                                 * field) starts in text */
	unsigned index;                 /* the capture, or the backend */
	unsigned rest : 1;              /* a {NAME...} capture */
	unsigned in_query : 1;          /* after the '?' of a request-target */
};

struct template {
	struct template_piece *pieces;
	size_t npieces;
	int target;                     /* a request-target, else a header value */
	unsigned vars;                  /* bit 1 << var of each variable used */
};

/* The names a template may use. */
struct template_scope {
	const struct route_pattern *pattern;    /* the route's path template, or NULL */
	const char *const *backends;    /* the backends ${backend.NAME...} may read ... */
	const unsigned *backend_index;  /* ... and their indexes */
	size_t nbackends;
};

/* Compile text (a request-target when target, else a header value).  0, or -1 with a
 * message in err. */
int template_parse(struct template *t, const char *text, int target,
    const struct template_scope *scope, char *err, size_t errcap);
void template_free(struct template *t);

/* What ${backend.NAME.FIELD} reads: 0 with the field's value as text (a string decoded),
 * or -1 with *why. */
typedef int (*template_backend_fn)(void *arg, unsigned backend, const char *field,
    size_t len, struct http_str *value, const char **why);

/* What ${jwt.CLAIM} reads: 0 with the claim as text (a string decoded), or -1 when the
 * request has no such claim (the value is then empty). */
typedef int (*template_claim_fn)(void *arg, const char *path, size_t len,
    struct http_str *value);

/* A request's values. */
struct template_values {
	const struct http_request *req;
	const struct http_str *captures;    /* of the route's path template, as sent */
	const char *request_id;
	const char *remote_addr;
	template_backend_fn backend;
	void *backend_arg;
	template_claim_fn claim;        /* NULL: no token was verified */
	void *claim_arg;
	const char *api_key;            /* or NULL */
};

/* Why a template could not be rendered. */
enum template_error {
	TEMPLATE_BAD_VALUE = 1,         /* a request's value cannot go there (CR or LF in a header,
	                                 * a dot segment in a path) */
	TEMPLATE_BAD_FIELD = 2          /* a backend's field is missing, not a scalar, or cannot
	                                 * go there */
};

/* TEMPLATE_BAD_VALUE with a message in err when a value of the request (all but the
 * ${backend...} ones, known only later) that t puts in a request-target's path holds a dot
 * segment ("." or "..", its dots or the slashes around it percent-encoded or not), which a
 * backend would resolve out of the path the configuration gives; else 0.  template_render
 * refuses those too: this tells before any backend is asked. */
int template_dot_segment(const struct template *t, const struct template_values *v, char *err,
    size_t errcap);

/* Append the interpolated text to out: 0, or a template_error with a message in err. */
int template_render(const struct template *t, const struct template_values *v,
    struct evbuffer *out, char *err, size_t errcap);

#endif
