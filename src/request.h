/*
 * A request on a client connection, and the connection: what the files of a request's
 * life share (client.c, request.c, proxy_request.c, proxy.c, kind_aggregate.c,
 * kind_jsonrpc.c, tunnel.c).  Private to them.
 */
#ifndef JG_REQUEST_H
#define JG_REQUEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "body.h"
#include "close_reason.h"
#include "conn.h"
#include "errors.h"
#include "exchange.h"
#include "header_ops.h"
#include "headers.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "path_vars.h"
#include "respond.h"
#include "route.h"
#include "route_scan.h"
#include "server.h"
#include "tls.h"
#include "upstream.h"
#include "upstream_state.h"
#include "tries.h"
#include "http_body.h"
#include "config.h"
#include "proxy.h"
#include "ratelimit.h"
#include "tunnel.h"

/* Bytes queued towards a slow peer before we stop reading from the other side. */
#define FLOW_HIGH (256 * 1024)
#define FLOW_LOW (64 * 1024)
/* Largest response head accepted from an upstream. */
#define UPSTREAM_MAX_HEAD (64 * 1024)
/* What a plain upstream connection reads before the head of an answer the route's ops
 * collect: the part of a Content-Length body read with the head is copied into its block,
 * the rest is read straight into place.  Bodies this small come in one read, as before. */
#define UPSTREAM_HEAD_READ (32 * 1024)
/* Unsent output above which a connection's next request waits for its client to read what
 * it was sent: a client that pipelines requests and never reads costs this much, not an
 * answer per request it wrote. */
#define PIPELINE_HIGH (64 * 1024)
#define PIPELINE_LOW (16 * 1024)
/* Requests of one pipeline handled in one turn; then the other connections get theirs. */
#define PIPELINE_TURN 32

enum client_state {
	CLIENT_IDLE,                    /* waiting for (the rest of) a request head */
	CLIENT_BUSY,                    /* a request is being proxied */
	CLIENT_CLOSING,                 /* flushing the last bytes, then close */
	CLIENT_DEAD                     /* closed; memory freed from the loop */
};

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

enum timer_mode { TIMER_OFF, TIMER_KEEPALIVE, TIMER_HEADER, TIMER_LINGER };

struct h2_session;
struct proxy_events;
struct proxy_rewriting;

/* A request on a client connection, from its head to the end of its answer, and its tries
 * with upstream servers.  Requests come from a per-worker free list: a connection waiting
 * for its next request holds none. */
struct request {
	struct request *next_free;      /* in its worker's free list */
	/* Kept from one request to the next (drained, emptied): buffers, the exchange's timer,
	 * the route scan's and the path captures' memory. */
	struct tries t;                 /* its tries (the one in progress is t.ex): reset for
	                                 * every request */
	struct evbuffer *up_head;       /* the head sent upstream, written once for every try */
	struct evbuffer *req_body;      /* the request body to send (request ops), or NULL */
	struct evbuffer *req_copy;      /* the request head, for $header.NAME in response ops */
	struct evbuffer *resp_head;     /* the upstream's head, kept while the body is collected */
	struct evbuffer *body;          /* the collected body */
	struct route_scan scan;         /* the body's first bytes, read to choose the route */
	struct path_vars pathv;         /* the captures of its route's path template */
	/* Written before they are read in every request (lengths and counts are zeroed). */
	char hash_key[256];             /* the hash balancing key of this request */
	char method[16];                /* for the access log, and the ones below */
	char target[512];
	char request_id[130];
	char user_agent[128];
	char referer[128];
	char answer_headers[CORS_ORIGIN_MAX + 384];  /* header lines the request's phases add
	                                             * to its answer, whatever answers it */
	struct event *phase_timer;      /* a waiting phase's, made on first use */
	char *auth_buf;                 /* a Cookie value or query without the credential */
	size_t auth_buf_cap;

	/* What the auth phase found out.  Its texts are written before they are read; the rest
	 * of it is the first of the state zeroed for every request. */
	struct request_auth {
		char principal[128];    /* who it admitted: $jwt.sub or $api_key */
		char client_addr[64];   /* $client_addr (client_addr_len bytes) */
		size_t principal_len;   /* (REQUEST_STATE on) */
		size_t client_addr_len;
		struct jwt_claims *claims;  /* the verified token's claims, or NULL */
		const char *api_key;    /* the API key's NAME, or NULL */
		unsigned next;          /* the policy it goes on with */
		const char *strip;      /* the header, cookie or query parameter the credential
		                         * came in, kept from the upstream, or NULL */
		int strip_where;        /* an enum auth_token_where */
		int worst;              /* an enum auth_outcome: the worst one so far */
		unsigned gen;           /* the key set generation a waiting token saw */
		struct timespec wait;   /* when it began to wait */
		unsigned resumed : 1;   /* it waited once already */
	} auth;
	/* Zeroed for every request. */
	struct worker_runtime *wr;
	const struct config_route *route;
	const struct route_kind *kind;  /* its route's kind, once the route is chosen */
	struct upstream_pool *upool;
	size_t hash_key_len;
	size_t answer_headers_len;
	struct request_phase_wait {     /* a phase that waits (PHASE_WAIT) */
		unsigned at;            /* which one */
		size_t head_len;        /* and the head's length, parsed again on resuming */
	} ph;
	struct request_ratelimit {      /* a shared limit's decision */
		unsigned decided : 1;   /* Redis decided (or failed to): status, ans */
		int status;             /* an enum resp_status */
		struct ratelimit_answer ans;
		struct ratelimit_wait *wait;    /* asked for, or NULL */
	} rl;
	unsigned head_request : 1;
	unsigned head_as_get : 1;       /* HEAD sent upstream as GET: answered as GET, bodiless */
	unsigned accept_gzip : 1;       /* compress: gzip route and a client that accepts gzip */
	unsigned upgrade : 1;           /* an upgrade that a 101 turns into a tunnel (tunnel.h):
	                                 * Upgrade and Connection go upstream */
	struct tunnel *tunnel;          /* from its 101 answer to its end, or NULL */
	struct aggregate *agg;          /* an aggregated route's backends and merge, or NULL */
	struct jsonrpc_route *rpc;      /* a JSON-RPC route's calls and answers, or NULL */
	unsigned allow;                 /* a 405's Allow: METHOD_* bits */

	/* The request body, on its way up. */
	struct request_upload {
		size_t replay_len;      /* body bytes at the front of the input kept for another
		                         * try, until the answer starts */
		unsigned buffer_body : 1;   /* the body is kept in the input: wait for all of it */
		unsigned keep_chunked : 1;  /* a chunked body kept de-chunked in req_body: up_head
		                             * waits for its framing until the body's end */
		unsigned expect_continue : 1;
		unsigned done : 1;      /* the body fully passed upstream (or in hand) */
		unsigned collecting : 1;    /* collecting a JSON request body for request ops */
		unsigned paused : 1;    /* not read while the upstream's output is full */
		unsigned pick_after_body : 1;   /* the server is chosen once the body the request
		                                 * ops take is in: its upstream hashes by a $json
		                                 * field */
		int64_t out_len;        /* Content-Length sent upstream instead of the client's, or -1 */
		uint64_t seen;          /* body bytes taken so far (de-chunked), against the
		                         * route's max_request_body */
		enum body_mode mode;    /* BODY_CHUNKED: no length, taken through down->body_next */
		uint64_t left;
		struct body_block *block;   /* a request body collected for request ops */
		size_t block_len;       /* its bytes so far, de-chunked */
	} up;

	/* The answer. */
	struct request_answer {
		unsigned started : 1;   /* response head sent to the client */
		unsigned head_seen : 1; /* the upstream's final response head was parsed */
		unsigned collecting : 1;    /* collecting a JSON body for the route's envelope ops */
		unsigned dechunk : 1;   /* HTTP/1.0 client: strip chunked framing */
		unsigned sinking : 1;   /* the upstream connection reads into block */
		unsigned up_close : 1;  /* upstream connection not reusable after this response */
		unsigned refused : 1;   /* a well-formed answer the ops refused for the gateway's
		                         * own reasons: no fault of its server */
		const struct rewrite_program *prog;    /* the ops this answer's status calls for */
		struct proxy_events *events;    /* an SSE or NDJSON body through the route's
		                                 * events ops (proxy_stream.c), or NULL */
		struct proxy_rewriting *rewriting;      /* or: a body over limits.max_body
		                                         * rewritten while it is forwarded */
		struct body_block *block;   /* or: a Content-Length body read straight into a block */
		size_t block_len;
		enum body_mode mode;
		uint64_t left;
		struct http_chunked chunk;
	} ans;

	/* For the access log. */
	int status;
	int gw_error;                   /* gateway error answered, or -1 (for metrics) */
	uint64_t bytes_sent;
	size_t head_sent;               /* of bytes_sent, the response head's */
	struct timespec start;
	size_t request_id_len;
};

#define REQUEST_STATE (offsetof(struct request, auth) + offsetof(struct request_auth, principal_len))
/* Requests a worker keeps for the next ones, beyond those in progress. */
#define REQUESTS_KEPT 256

/* A client connection (the downstream side) and the request in progress on it, if any. */
struct client {
	LIST_ENTRY(client) entry;
	struct worker *w;
	struct conn conn;
	struct deadline timer;          /* keep-alive, header and lingering-close limits */
	enum timer_mode timer_mode;
	enum client_state state;
	enum client_close close_reason; /* why it closes, once decided (the first reason given) */
	char addr[INET6_ADDRSTRLEN];
	const struct downstream *down;  /* how its requests write their answers */
	struct h2_session *h2;          /* the connection speaks HTTP/2: its session, or NULL */
	int http_minor;
	unsigned keepalive : 1;
	unsigned out_chunking : 1;      /* the answer is framed in chunks by the session */
	unsigned lingering : 1;         /* our side is shut: reading what the client still sends */
	unsigned up_paused : 1;         /* upstream reads stopped: client output is full */
	unsigned processing : 1;        /* client_process runs for it: a request's end goes on
	                                 * with the next one from there, not by recursion */
	unsigned out_paused : 1;        /* waiting for the client to read before the next
	                                 * pipelined request */
	unsigned resume_queued : 1;     /* in w->resume: its pipeline goes on at its next turn */
	unsigned h2_possible : 1;       /* its listener takes HTTP/2: the first bytes tell */
	unsigned h2_stream : 1;         /* an HTTP/2 stream (h2.c), not a connection */
	TAILQ_ENTRY(client) resume_entry;
	struct http_chunked body_chunk; /* the framing of a request body without a length, which
	                                 * the HTTP/1.1 session takes off (client_body_next) */

	struct request *rq;             /* from its head to its end (until the reaper once closed) */
};

/* The request's input (see struct downstream). */
static inline struct evbuffer *
client_input(struct client *c)
{
	return c->conn.in;
}

/* Framing lines are written on every message: no printf on that path. */
static inline char *
put_bytes(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return p + n;
}
#define put_lit(p, lit) put_bytes((p), (lit), sizeof(lit) - 1)

/* The line for a length: p must have room for 38 bytes (20 digits are copied whatever the
 * length, in one move). */
static inline char *
put_content_length(char *p, uint64_t v)
{
	static const char pairs[] =
	    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	    "8081828384858687888990919293949596979899";
	char digits[40] = { 0 }, *d = digits + 20;

	p = put_lit(p, "Content-Length: ");
	for (; v >= 100; v /= 100) {
		d -= 2;
		memcpy(d, pairs + 2 * (v % 100), 2);
	}
	if (v >= 10) {
		d -= 2;
		memcpy(d, pairs + 2 * v, 2);
	} else {
		*--d = (char)('0' + v);
	}
	memcpy(p, d, 20);
	p += digits + 20 - d;
	return put_lit(p, "\r\n");
}

/*
 * The session that carries a request, seen from the request: all the request writes to its
 * client, and how it learns that its client read what it was sent, goes through c->down.
 * client.c is the HTTP/1.1 session; framing, keep-alive and the connection are its own.
 */
enum answer_framing {
	ANSWER_BODYLESS,        /* no body and no length: 1xx, 204, 304, a HEAD answered so */
	ANSWER_LENGTH,          /* length bytes follow (none for a HEAD: the length is GET's) */
	ANSWER_CHUNKS,          /* the upstream's chunked framing goes on as it came: only
	                         * where down->takes_chunks says the client takes it */
	ANSWER_STREAM,          /* a length not known: the session frames what is written */
	ANSWER_UNTIL_CLOSE      /* a length not known, ended by the upstream's close */
};

/* The head of an answer. */
struct answer_head {
	struct http_response *resp;     /* its status and headers (hop-by-hop ones not sent) */
	const struct header_ops *ops;   /* the route's response header ops, or NULL */
	const struct rewrite_vars *vars;    /* their variables */
	const char *extra;              /* header lines the gateway adds (each ending in CRLF),
	                                 * or NULL */
	enum answer_framing framing;
	uint64_t length;                /* for ANSWER_LENGTH */
};

/* How the request takes its body from the client. */
enum body_reading {
	BODY_READING,           /* read it, within timeouts.client_body */
	BODY_PAUSED,            /* not now: its upstream has enough of it to send */
	BODY_WAITING,           /* not now (in hand, or read once the upstream is ready); the
	                         * answer has timeouts.client_body to be taken */
	BODY_IGNORED            /* never: what carries it is not used again after the answer */
};

/*
 * The request's input, client_input(c), holds its head as HTTP/1.1 at the front: its framing
 * lines say whether a body follows and whether its length is known (Content-Length, or
 * Transfer-Encoding: chunked for a body without one, whatever the protocol).  A body with a
 * length follows as its payload, bytes past that length not the request's; one without is
 * the session's to hand over, payload only (body_next, body_peek): chunk framing, extensions
 * and trailers never reach the request.
 */
struct downstream {
	/* How the request takes its body from now on. */
	void (*read_body)(struct client *c, enum body_reading how);
	/* The input may hold n bytes (0: FLOW_HIGH, the usual limit); what it held back while
	 * it was smaller is read. */
	void (*input_room)(struct client *c, size_t n);
	/*
	 * A body without a length, its head out of the input: the next run of its payload
	 * (an enum body_run).  BODY_RUN_DATA: *n bytes at the front of the input, which the
	 * request takes (drains or moves) before it asks again.  BODY_RUN_END: the body ended.
	 * BODY_RUN_BAD: its framing is bad, and the session answered 400 (the request is
	 * over).  BODY_RUN_NONE: no more came yet (read_body says when to look again).
	 */
	int (*body_next)(struct client *c, size_t *n);
	/* The same body read where it lies, without taking it (the route scan, its head still
	 * in the input): the run at cur (body_cursor_init at the head's end), cur moved past
	 * it; BODY_RUN_BAD answers nothing. */
	int (*body_peek)(struct client *c, struct body_cursor *cur, const char **p, size_t *n);
	/* The connection the request came over (its TLS session for $ssl_* variables). */
	const struct conn *(*transport)(struct client *c);
	/* 1: the client takes the upstream's chunked framing as it came (ANSWER_CHUNKS). */
	int (*takes_chunks)(struct client *c);
	/* The request reads its body before anything upstream asks for it: a client that
	 * waits for 100 Continue gets it. */
	void (*continue_)(struct client *c);
	/* The answer's head; its body follows through body. */
	void (*head)(struct client *c, const struct answer_head *h);
	/* n bytes of the answer's body, moved out of from. */
	void (*body)(struct client *c, struct evbuffer *from, size_t n);
	/* The answer is complete: its end is written. */
	void (*finish)(struct client *c);
	/* The gateway's error answers the request (nothing of an answer went yet); extra: header
	 * lines to add, or NULL; must_close: nothing after it can be framed on this connection. */
	void (*error)(struct client *c, enum gateway_error err, const char *message,
	    const char *extra, int must_close);
	/* The answer started but cannot be completed: the client must see it cut, for why. */
	void (*abort)(struct client *c, enum client_close why);
	/* 1 while more than FLOW_HIGH of the answer waits for the client: the request stops
	 * reading it, and proxy_answer_drained follows once the client read it down to
	 * FLOW_LOW. */
	int (*backlogged)(struct client *c);
	/* The request is over (its answer finished): the session goes on with the next
	 * request, or closes. */
	void (*end)(struct client *c);
	/* Send what the session has queued (at the end of every event). */
	void (*flush)(struct client *c);
	/*
	 * The answer is 101 (Switching Protocols) to protocol: write its head h and hand the
	 * tunnel t the client's side from now on (tunnel_attach with the ops that read, write,
	 * pause and shut it; its events go to tunnel_event), so that no further request is read
	 * from it.  The request's end closes it.  0, or -1 when the session cannot (then the
	 * answer is invalid).  NULL: the session tunnels nothing (upgrades are then dropped).
	 */
	int (*upgrade)(struct client *c, const struct answer_head *h, struct http_str protocol,
	    struct tunnel *t);
};

extern const struct downstream h2_downstream;

extern const struct downstream client_downstream;

/* The answer's body as http_answer_next reads it: by its chunks, its length, or the close. */
static inline struct http_answer_body
proxy_answer_body(struct request *rq)
{
	struct http_answer_body b = { rq->ans.mode == BODY_CHUNKED ? HTTP_ANSWER_CHUNKED :
	    rq->ans.mode == BODY_UNTIL_CLOSE ? HTTP_ANSWER_CLOSE : HTTP_ANSWER_LENGTH,
	    &rq->ans.left, &rq->ans.chunk };

	return b;
}

/* The route rewrites responses, for response_on's statuses or for the others. */
static inline int
proxy_has_response_ops(const struct config_route *route)
{
	return route->response != NULL || route->error_response != NULL;
}

/* Bits 1 << REWRITE_VAR_* of the variables an op list uses. */
static inline unsigned
proxy_prog_vars(const struct rewrite_program *prog)
{
	return prog != NULL ? prog->vars : 0;
}

/* The configuration of c's request (the one current when it began), or the worker's. */
static inline const struct config *
client_cfg(const struct client *c)
{
	return (c->rq != NULL && c->rq->wr != NULL ? c->rq->wr : c->w->cur)->rt->cfg;
}

/* The connection of the try in progress (the caller knows there is one). */
static inline struct conn *
upconn(struct client *c)
{
	return &c->rq->t.ex.uc->conn;
}

struct access_entry;

/* A route kind: what a request does once its route is chosen.  The worker and the listeners
 * know none; request.c asks each in turn (route_kind_of) and calls its hooks. */
struct route_kind {
	/* The route is one of this kind. */
	int (*takes)(const struct config_route *route);
	/* The request starts, its head the head_len bytes at the front of the input. */
	void (*start)(struct client *c, struct http_request *req, size_t head_len);
	/* More of the request's body is in its input (NULL: the kind reads none). */
	void (*body)(struct client *c);
	/* The request ends, however it ends (answered, or cut short: its client gone, the
	 * daemon stopping): what the kind holds for it goes (NULL: nothing). */
	void (*end)(struct client *c);
	/* What the kind adds to the request's access log line (NULL: nothing). */
	void (*log)(struct client *c, struct access_entry *e);
	/* The worker thread stops: what the kind keeps for its next requests goes (NULL:
	 * nothing). */
	void (*worker_end)(void);
};

extern const struct route_kind kind_proxy, kind_aggregate, kind_jsonrpc;

/* What a request phase did. */
enum phase_result {
	PHASE_NEXT,             /* the request goes on to the next phase, then its kind */
	PHASE_ANSWERED,         /* the phase answered it (client_request_end is called) */
	PHASE_WAIT              /* the phase waits for something: request_phase_resume runs
	                         * it again, with what it kept in the request */
};

/* A request phase: a step between a request's route and its kind's start, run only for
 * the routes that need it, in the order of request_phases[] in request.c. */
struct request_phase {
	/* The route needs the phase. */
	int (*applies)(const struct config_route *route);
	/* Run it for the request whose head is the head_len bytes at the front of the input. */
	enum phase_result (*run)(struct client *c, struct http_request *req, size_t head_len);
};

extern const struct request_phase phase_cors, phase_auth, phase_ratelimit;
/* Run the phase that waited again, and the ones after it, from the head at the front of the
 * input (parsed again: the worker's head went to other requests meanwhile). */
void request_phase_resume(struct client *c);
/* The request ends: what the auth and rate limit phases hold for it goes. */
void phase_auth_end(struct request *rq);
void phase_ratelimit_end(struct request *rq);
/* The worker thread stops: its connections to Redis go. */
void phase_ratelimit_worker_end(void);
void phase_auth_worker_end(void);
/* Take the credential the request's policy keeps from the upstream out of req. */
void phase_auth_strip(struct client *c, struct http_request *req);
/* $jwt.CLAIM for rewrite_vars.jwt_cb: arg is the request's claims. */
int request_jwt_var(const void *arg, const char *path, size_t len, struct rewrite_str *value);
/* $client_addr: the peer, or the client a trusted proxy says it forwards for. */
void request_client_addr(struct client *c, const struct http_request *req, struct http_str *out);

/* The kind of route (the proxy's unless another takes it). */
const struct route_kind *route_kind_of(const struct config_route *route);
/* More of the request came from its client while it runs. */
void request_body_in(struct client *c);
/* The request is cut short (its client gone, the daemon stopping): its kind and its tries
 * let go of it; the request stays the client's until it is freed. */
void request_abort(struct client *c);

/* client.c */
/* For the HTTP/2 session of the connection: stop reading, send what is queued, then close
 * for why; and the connection idles (on: timeouts.keepalive closes it) or not. */
void client_close_after_flush(struct client *c, enum client_close why);
void client_idle(struct client *c, int on);
/* Send what both sides have queued. */
void proxy_flush(struct client *c);

/* request.c */
/*
 * A body the ops cannot take, for why: counted as passed or failed, as on_error decides.
 * Under fail the client gets err with message (NULL: its default text): 1, the request is
 * answered.  0: the body goes on untouched.
 */
int proxy_unrewritten(struct client *c, enum metrics_direction direction,
    enum metrics_envelope_reason why, enum gateway_error err, const char *message,
    int must_close);
/*
 * n more bytes of a chunked body came: 0 while they stay within the route's
 * limits.max_request_body, else 1 once the request is refused with 413 and its try ended, so
 * that no upstream gets the whole body.
 */
int request_body_too_large(struct client *c, uint64_t n);
/* Why the ops could not rewrite a body, for jsongate_envelope_total. */
enum metrics_envelope_reason proxy_unrewritten_reason(const struct body_result *res);
/* Empty the buffers a request keeps for the next one: however the request ended, none of
 * what it read or wrote may go out with the next request that takes them. */
void request_drain(struct request *rq);
/* c's head is here: it gets a request, from the worker's free list when one is there, with
 * its per-request state zeroed.  0, or -1 without memory. */
int client_request_attach(struct client *c);
/* c's request is over (buffers drained, tries ended): back to the free list, or freed when
 * the worker keeps enough. */
void client_request_detach(struct client *c);
void client_now(struct timespec *ts);
void client_log(struct client *c);
/* Let go of the body blocks; the socket layer must not write into them any more. */
void proxy_drop_block(struct client *c);
/* The answer started: what was kept for another try can go. */
void proxy_drop_replay(struct client *c);
/* The response is complete (or the request ended in an error): log, reset, go on. */
void client_request_end(struct client *c);
/* Answer with a gateway error; a request that cannot be framed any more closes after. */
void client_error(struct client *c, enum gateway_error err, const char *message, int must_close);
/* The upstream's hash_key for this request, kept for every try. */
void client_hash_key(struct client *c, const struct http_request *req);
/* The $variables of this request that ops using the ones in uses (1 << REWRITE_VAR_*) need;
 * request headers are the caller's to add. */
void proxy_vars(struct client *c, unsigned uses, struct rewrite_vars *vars,
    struct body_tls_text *tls_text);
/* For $header.NAME in response ops: the request head kept in req_copy, parsed again. */
void proxy_kept_request_headers(struct client *c, struct rewrite_vars *vars);
/* A request begins on c: it gets a request with the state every request starts from.  0, or
 * -1 without memory. */
int request_begin(struct client *c);
/* The request's head (len bytes at head, the front of the input, parsed into req) is here:
 * what the request keeps of it, then its route (the path normalised first). */
void request_take_head(struct client *c, struct http_request *req, unsigned char *head,
    size_t len);
/* More of the body came while the route waits for it. */
void client_scan_more(struct client *c);
/* Choose the route of the request whose head (r bytes) leads the input, and start it. */
void client_route(struct client *c, struct http_request *req, ssize_t r);

/* proxy_request.c */
/* The target to send upstream (the route's strip_prefix applied) in the worker's buffer: its
 * length, or -1 without memory. */
int proxy_rewrite_target(struct client *c, const struct http_request *req);
/* Write the head to send upstream for req into up_head, once for every try. */
int proxy_build_upstream_head(struct client *c, struct http_request *req);
/* Remove every header named lower_name (the body it described was changed). */
void proxy_remove_header(struct http_header *h, size_t *n, const char *lower_name);
/* Request ops: take the body in first (its head is kept in req_copy), then connect. */
void proxy_start_request_collect(struct client *c);
/* The request body to send is req_body: keep it for another try when it is small enough. */
void proxy_send_collected(struct client *c);
/* The request's upstream balances by a field of the body: read whole by request ops, the
 * body is in before a server is chosen. */
int proxy_hashes_by_field(const struct client *c);
/* Collect the request body's payload; when complete, rewrite it and send it upstream. */
void proxy_collect_request_body(struct client *c);
/* The collected request body went into req_body (by reference) or was rewritten. */
void proxy_drop_request_block(struct client *c);
/* Response ops may read request headers ($header.NAME) after the head has left the input. */
int proxy_keep_request_head(struct client *c, size_t len);
/* 1 when the request body is one for request ops (a JSON body; one in a coding they cannot
 * read follows on_error); else it goes untouched, counted with the reason.  Under on_error:
 * fail a body that is not JSON by its type is refused (-1, answered 415): most frameworks
 * read such a body as JSON all the same, and it must not reach them past the ops. */
int proxy_wants_request_body(struct client *c, const struct http_request *req);
/* How a request without request ops takes its body: kept whole in the input for another try
 * when it is within retry_body, else streamed once the connection is ready. */
void proxy_plan_body(struct client *c);
/*
 * A body without a length of an idempotent request is kept for another try while it stays
 * within retry_body; all of it here, it goes with a Content-Length.  Larger, what came goes
 * as one chunk and the rest streams in chunks: the request cannot be sent twice.
 */
void proxy_keep_chunked(struct client *c);
/* The connection is ready: send the head, then the body (a copy when it may go again). */
void proxy_send_request(struct client *c);
/* Pass request body bytes from the client to the upstream as they arrive. */
void proxy_forward_request_body(struct client *c);
/* More of the body came: collected, kept, or passed on, as the request takes it. */
void proxy_body_in(struct client *c);

/* proxy.c */
/* The head of an answer with resp's status and headers and the route's header ops (their
 * variables in vars and tls_text), for c->down->head or c->down->upgrade. */
void proxy_answer_head(struct client *c, struct http_response *resp,
    enum answer_framing framing, uint64_t length, const char *extra, struct answer_head *h,
    struct rewrite_vars *vars, struct body_tls_text *tls_text);
/* Write our response head for resp: its headers, our framing and connection handling. */
void proxy_write_response_head(struct client *c, struct http_response *resp,
    enum answer_framing framing, uint64_t length, const char *extra);
/* Keep the answer's head (head_len bytes of the upstream input) and collect its body before
 * answering.  0, or -1 when answered with an error. */
int proxy_hold_response(struct client *c, size_t head_len);
/* The held answer goes on untouched: its head, what was collected, then the rest as it
 * comes (ended: the body is all here already). */
void proxy_pass_held(struct client *c, int ended);
/* Send n bytes of a body we hold to the client, or drop them for a HEAD request. */
void proxy_send_body(struct client *c, struct evbuffer *body, size_t n);
void proxy_forward_response_body(struct client *c);
/* Some of the answer's body went on: when it ended (eof: by the upstream's close) the
 * request ends, else the upstream is read no more while the client is backlogged. */
void proxy_answer_went_on(struct client *c, int ended, int eof);
/* The client read enough of the answer: its body goes on from the upstream. */
void proxy_answer_drained(struct client *c);
void proxy_exchange_cb(struct exchange *ex, int what, void *arg);
/* A proxied request ends: its tunnel and its events go. */
void proxy_end(struct client *c);
/* What the tries of a proxied request ask of it. */
extern const struct tries_ops proxy_tries_ops;

/* proxy_stream.c */
/* A route with events: 1 when the answer streams through them, -1 when it is an event stream
 * that passes untouched (encoded), 0 when it is none. */
int proxy_events_wanted(struct client *c, const struct http_response *resp);
/* Answer with resp's head and stream its body through the events ops: 0, or -1 when answered. */
int proxy_events_start(struct client *c, struct http_response *resp, size_t head_len);
/* More of an event stream came (eof: the upstream closed an answer ended so). */
void proxy_events_forward(struct client *c, int eof);
/* The answer's events are over (or the request ended first): they go back for reuse. */
void proxy_events_put(struct client *c);
/* 1 when the held answer (its head resp), over limits.max_body, can be rewritten by the ops
 * of its status while it is forwarded. */
int proxy_rewriting_can(struct client *c, const struct http_response *resp);
/* Rewrite the held answer while it is forwarded: what was collected first, then the rest as
 * it comes.  The first output sends the head; an error before it follows on_error.  resp: the
 * head parsed from resp_head, kept (it points there) until the rewriting ends. */
void proxy_rewriting_start(struct client *c, const struct http_response *resp);
/* More of the body came (eof: the upstream closed an answer ended so). */
void proxy_rewriting_forward(struct client *c, int eof);
/* The request ends: its rewriting goes back for reuse (counted aborted when cut short). */
void proxy_rewriting_put(struct client *c);
/* The worker thread stops: the event parsers and rewriters it kept go. */
void proxy_events_worker_end(void);


/* kind_jsonrpc.c */
/* A forwarded call failed before an answer came: 1 when it is answered as a batch element
 * would be (its JSON-RPC error, or 204 for a notification), 0 when the gateway error goes
 * out instead. */
int proxy_jsonrpc_failed(struct client *c, enum gateway_error err, const char *message);
/* A forwarded call's answer that is judged before the client gets any of it: read whole,
 * up to limits.max_body.  0 while it is read, -1 once answered. */
int proxy_jsonrpc_hold_answer(struct client *c, size_t head_len);
/* The answer to judge is larger than limits.max_body: the call fails as a batch's would. */
void proxy_jsonrpc_too_large(struct client *c);
/* The whole answer of a forwarded call is in: it goes as the upstream sent it when it answers
 * the call, else the call gets what a batch element would. */
void proxy_jsonrpc_judge(struct client *c);
/* The body is in: split it, and forward a single call or wait for the answer. */
void proxy_jsonrpc_start(struct client *c, struct http_request *req);

#endif
