/*
 * An aggregated route: one client request fans out to the route's backends (each a fetch,
 * over the pooled upstream connections with their balancing, retries and health), every
 * answer is checked to be one JSON value, and the answers are merged into one body by
 * splicing: the merged body references the bytes received, nothing is decoded or encoded.
 */
#ifndef JG_AGGREGATE_H
#define JG_AGGREGATE_H

#include <stddef.h>

#include "errors.h"
#include "http.h"

struct access_backend;
struct aggregate;
struct config_route;
struct conn;
struct evbuffer;
struct path_vars;
struct worker;
struct worker_runtime;

/* What the aggregation needs of the client's request. */
struct jwt_claims;

struct aggregate_request {
	const struct http_request *req; /* parsed; read during aggregate_start only */
	const char *head;               /* its bytes, kept for backends that start later */
	size_t head_len;
	const char *request_id;
	const char *remote_addr;
	int tls;                        /* the client connection is TLS */
	const struct conn *client;      /* for the TLS variables of ops; outlives the aggregate */
	const struct path_vars *path;   /* $path.NAME of ops; outlives the aggregate */
	const struct jwt_claims *claims;    /* ${jwt.CLAIM}: the verified token's, or NULL;
	                                     * outlives the aggregate */
	const char *api_key;            /* ${api_key}: the admitted key's NAME, or NULL */
};

/* How it ended: the answer to send, or the gateway error to answer with. */
struct aggregate_answer {
	int status;                     /* 0: a gateway error (error, message) */
	enum gateway_error error;
	const char *message;
	int partial;                    /* an optional backend failed: X-Jsongate-Partial */
	struct evbuffer *body;          /* the merged body, the caller's to move */
};

typedef void (*aggregate_done_cb)(const struct aggregate_answer *ans, void *arg);

/*
 * Start the backends of route (a route with backends) for the request r, on the pools of
 * wr.  cb is called once, from the loop (never from here), unless aggregate_end comes
 * first.  NULL when out of memory.
 */
struct aggregate *aggregate_start(struct worker_runtime *wr, const struct config_route *route,
    const struct aggregate_request *r, aggregate_done_cb cb, void *arg);
/* What the access log says of each backend (n of them): valid until aggregate_end. */
const struct access_backend *aggregate_log(struct aggregate *a, size_t *n);
/* Done with it (answered, or the client went away): backends still running are given up,
 * and it goes back to the worker for the next aggregated request. */
void aggregate_end(struct aggregate *a);
/* Free this thread's idle aggregates (its worker is stopping). */
void aggregate_free_idle(void);

#endif
