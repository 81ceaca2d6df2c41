/* Access log: one line per request, JSON or Apache combined. */
#ifndef JG_ACCESS_LOG_H
#define JG_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

struct access_log {
	int fd;                         /* -1 when off */
	int owned;                      /* 1 when we opened it (not stderr) */
	enum access_format format;
};

/* A request body field of log.json_fields (its path) or a capture of log.path_fields (its
 * name), and the value's text, or absent. */
struct access_field {
	const char *name;
	const char *value;              /* NULL: absent (written as null) */
	size_t len;
};

/* A backend of an aggregated request. */
struct access_backend {
	const char *name;
	int status;                     /* of its answer, 0 when none */
	const char *outcome;            /* as in jsongate_backend_requests_total */
	double duration_ms;
};

struct access_entry {
	const char *remote_addr;
	const char *method;
	const char *path;               /* request-target as received (may be truncated) */
	int status;
	uint64_t bytes_sent;            /* response head and body */
	uint64_t body_bytes_sent;       /* body only, as nginx's $body_bytes_sent */
	const char *upstream;           /* server address, or "-" */
	const char *route;              /* route name, or "-" */
	double duration_ms;
	const char *request_id;
	const char *user_agent;         /* combined format only; may be NULL */
	const char *referer;            /* combined format only; may be NULL */
	const char *protocol;           /* "HTTP/1.1", "HTTP/1.0" or "HTTP/2.0" */
	const struct access_field *json;    /* json format: the "json" member, or none */
	size_t njson;
	const struct access_field *path_fields; /* json format: "path_fields", or none */
	size_t npath;
	const struct access_field *jwt_fields;  /* json format: "jwt_fields", or none */
	size_t njwt;
	const struct access_backend *backends;  /* an aggregated request's, or NULL */
	size_t nbackends;
	const char *rpc_method;         /* a JSON-RPC route's single call: its method, or NULL */
	size_t rpc_method_len;
	long rpc_batch;                 /* a JSON-RPC batch: its elements; -1 for none */
	const char *tunnel_outcome;     /* a tunnel's end (its outcome label), or NULL: then
	                                 * bytes_sent counts what went to the client through it */
	uint64_t tunnel_received;       /* a tunnel's bytes from the client */
	const char *principal;          /* who the auth phase admitted ($jwt.sub, $api_key), or
	                                 * NULL */
	size_t principal_len;
};

/* Open per cfg->access_log; 0 or -1 with errno. */
int access_log_open(struct access_log *al, const struct config *cfg);
void access_log_close(struct access_log *al);
/* Open path again (it was renamed away) and put it in place of the descriptor the workers
 * write to, atomically: 0, or -1 with errno (the old file stays in use). */
int access_log_reopen(struct access_log *al, const char *path);
void access_log_write(const struct access_log *al, const struct access_entry *e);

#endif
