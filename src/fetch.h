/*
 * A request jsongate makes itself (a backend of an aggregated route, a group of a JSON-RPC
 * batch) whose whole answer is collected: the same tries, failover and retries as a proxied
 * request (exchange.c), then the answer's status, head and de-chunked body for the owner to
 * merge.  A fetch lives inside its owner; nothing is allocated per fetch but its buffers,
 * which are kept and reused, and the block a body is read into (from the worker's pool).
 */
#ifndef JG_FETCH_H
#define JG_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "config.h"
#include "errors.h"
#include "exchange.h"
#include "http.h"
#include "tries.h"

struct event;
struct evbuffer;
struct worker;
struct upstream_pool;
struct server_pool;
struct body_block;

struct fetch;
typedef void (*fetch_done_cb)(struct fetch *f, void *arg);

enum fetch_state { FETCH_IDLE, FETCH_RUNNING, FETCH_DONE };

struct fetch {
	struct tries t;                 /* its tries (the exchange in progress is t.ex) */
	struct worker *w;
	struct upstream_pool *up;
	struct event *timer;            /* the fetch's own deadline, over every try */
	fetch_done_cb cb;
	void *arg;
	enum fetch_state state;
	const char *request_id;         /* for logs */
	struct evbuffer *request;       /* head and body, sent again on each try */
	size_t max_body;
	const struct route_timeouts *timeouts;   /* the owner's route's */
	unsigned head_seen : 1;
	unsigned up_close : 1;          /* the answer says the connection ends with it */
	unsigned sinking : 1;           /* the connection reads into block */
	/* The answer. */
	int status;                     /* 0 when the fetch failed: see error and message */
	enum gateway_error error;
	char message[384];
	struct evbuffer *head;          /* the answer's head as received */
	enum body_coding coding;        /* its Content-Encoding */
	struct evbuffer *body;          /* its body, de-chunked (still content-coded) ... */
	struct body_block *block;       /* ... or, for a Content-Length body, read into a block */
	size_t block_len;
	int body_mode;                  /* private: framing of the answer's body */
	uint64_t left;
	struct http_chunked chunk;
	uint64_t started_us, ended_us;  /* when it started and ended (upstream_state_now_us) */
};

/* Once per owner; 0 or -1. */
int fetch_init(struct fetch *f, struct worker *w, fetch_done_cb cb, void *arg);
void fetch_free(struct fetch *f);

/*
 * Send the request in f->request (complete: head with framing, then the body; the owner fills
 * it and it is kept for other tries; never a HEAD request) to up, with the hash key key, and
 * collect the answer (bodies over max_body fail as upstream_invalid).  Each try connects,
 * waits for the head and reads within the route's timeouts; timeout_ms bounds the whole fetch
 * (0: only those).  cb is called once, from the loop or from
 * here when it fails at once, with f->status set (the answer) or 0 (f->error, f->message).
 */
void fetch_start(struct fetch *f, struct upstream_pool *up, const char *key, size_t keylen,
    int idempotent, size_t max_body, const struct route_timeouts *timeouts,
    uint64_t timeout_ms);
/* Give up a running fetch without calling cb; the buffers stay for the next start.  Also
 * what a finished fetch's owner calls once done with the answer: the servers it tried and
 * the body's block are let go. */
void fetch_cancel(struct fetch *f);
/* The server that answered (or was tried last), or NULL. */
const struct config_server *fetch_server(const struct fetch *f);
/* The answer's body in one piece (*b, *len): the block it was read into, or a block holding
 * a copy of what was collected (one copy).  The block stays the fetch's (take references to
 * keep it); *b is NULL for an empty body.  0, or -1 when out of memory. */
int fetch_body(struct fetch *f, struct body_block **b, size_t *len);

#endif
