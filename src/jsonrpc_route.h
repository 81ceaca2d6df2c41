/*
 * A request's life on a JSON-RPC route, once its body is in: split into calls, each routed by
 * its method; a single call the caller forwards as it came, its answer streamed back when it
 * is a 2xx JSON one and judged as a batch element's otherwise; a batch is grouped by upstream,
 * each group sent as one batch (or each call alone, split: single) over fetches, at most
 * jsonrpc.parallel at once, and the answers are put back together in the order of the
 * request by splicing their bytes; the errors the gateway gives itself are JSON-RPC error
 * objects in place of the calls they are for.
 */
#ifndef JG_JSONRPC_ROUTE_H
#define JG_JSONRPC_ROUTE_H

#include <stddef.h>

#include "body.h"
#include "errors.h"
#include "http.h"

struct access_entry;
struct body_block;
struct config_route;
struct config_upstream;
struct evbuffer;
struct jsonrpc_route;
struct worker;
struct worker_runtime;

/* What the route needs of the client's request. */
struct jsonrpc_request {
	const struct http_request *req; /* parsed; read during jsonrpc_route_start only */
	const char *request_id;
	const char *remote_addr;
	struct body_block *body;        /* the body as received (the caller keeps its reference) */
	size_t len;
	enum body_coding coding;        /* its Content-Encoding: identity, gzip or deflate */
	int idempotent;                 /* the client's request may be sent twice */
	/* The head of an upstream request to up, without framing and the empty line, into out;
	 * 0 or -1.  Called during jsonrpc_route_start only. */
	int (*head)(void *arg, const struct config_upstream *up, struct evbuffer *out);
	void *head_arg;
};

/* The answer: a status (200, or 204 with no body), or a gateway error (status 0). */
struct jsonrpc_answer {
	int status;
	struct evbuffer *body;          /* the caller's to move */
	enum gateway_error error;
	const char *message;
};

typedef void (*jsonrpc_done_cb)(const struct jsonrpc_answer *ans, void *arg);

/*
 * Take the request r on route (a route with jsonrpc).  A single call routed to an upstream
 * is the caller's to forward as it came: *forward is that upstream and cb is never called.
 * Otherwise *forward is NULL and cb is called once, from the loop (never from here), unless
 * jsonrpc_route_end comes first.  NULL when out of memory.
 */
struct jsonrpc_route *jsonrpc_route_start(struct worker_runtime *wr,
    const struct config_route *route, const struct jsonrpc_request *r, jsonrpc_done_cb cb,
    void *arg, const struct config_upstream **forward);

/*
 * A forwarded call's upstream gave no answer (err, message say why): the call is answered as
 * a batch element would be.  Returns 200 with its -32603 error object in out, 204 for a
 * notification (no answer, no body), or 0 when the failure is not the upstream's and the
 * client gets the gateway error.
 */
int jsonrpc_route_failed(struct jsonrpc_route *jr, enum gateway_error err, const char *message,
    struct evbuffer *out);

/*
 * The head of a forwarded call's answer: 1 when it goes to the client as it comes, unread (a
 * 2xx answer of a call with a body whose Content-Type is one of the route's json_types, or
 * any 2xx answer of a notification); 0 when the whole answer is to be read and given to
 * jsonrpc_route_answered.  has_body: the head announces a body.
 */
int jsonrpc_route_streams(const struct jsonrpc_route *jr, const struct http_response *resp,
    int has_body);

/*
 * The whole answer of a forwarded call that did not stream: status, its body body[0..len)
 * (NULL: none) in coding.  Returns 0 when it answers the call (a Response object with its id,
 * whatever the status) and goes to the client as sent; else what the client gets instead,
 * as a batch element would: 200 with the call's -32603 error object in out, or 204 for a
 * notification.  *gateway_error is the failure's (-1: none), for the metrics.
 */
int jsonrpc_route_answered(struct jsonrpc_route *jr, int status, enum body_coding coding,
    struct body_block *body, size_t len, struct evbuffer *out, int *gateway_error);

/* The request is logged with the status sent and the gateway error answered (-1: none):
 * counted in metrics, its method or batch size set in e. */
void jsonrpc_route_log(struct jsonrpc_route *jr, int status, int gateway_error,
    struct access_entry *e);

/* Done with it (answered, or the client went away): what is still out is given up, and it
 * goes back to the worker for the next JSON-RPC request. */
void jsonrpc_route_end(struct jsonrpc_route *jr);
/* Free this thread's idle ones (its worker is stopping). */
void jsonrpc_route_free_idle(void);

#endif
