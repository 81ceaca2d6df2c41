/*
 * One try of a request with one upstream server: choosing the server, waiting for a place
 * under max_connections, connecting (or taking a pooled connection), the connect and per-try
 * deadlines, and the verdict on the server that passive health and the balancers live on.
 *
 * What goes over the connection is the owner's business (proxy.c and fetch.c write the
 * request and read the answer); the exchange says when the connection is ready and passes on
 * what the socket layer reports after that.  Whether another server gets a try when one
 * fails is decided by the request's tries (tries.h).
 */
#ifndef JG_EXCHANGE_H
#define JG_EXCHANGE_H

#include <stdint.h>
#include <sys/queue.h>

#include "conn.h"
#include "errors.h"
#include "http.h"
#include "upstream_state.h"

struct event;
struct worker;
struct upstream_pool;
struct server_pool;
struct upconn;
struct exchange;

/* Reported to the owner, besides the socket layer's CONN_* bits once ready. */
enum exchange_what {
	EXCHANGE_READY = 1 << 8,        /* ex->uc is connected: write the request */
	EXCHANGE_FAILED = 1 << 9        /* no connection: see ex->fail and ex->error */
};

/* Why an exchange failed before its connection was ready (ex->fail besides FAIL_*). */
#define EXCHANGE_OVERLOADED (1u << 30)  /* every server at max_connections, queue full or
                                         * the wait over timeouts.queue */
#define EXCHANGE_NO_SERVER (1u << 31)   /* every server tried already */

enum exchange_stage {
	EXCHANGE_IDLE,                  /* not started, or over */
	EXCHANGE_QUEUED,                /* waiting for a server under max_connections */
	EXCHANGE_CONNECTING,
	EXCHANGE_ACTIVE                 /* the connection is the owner's */
};

typedef void (*exchange_cb)(struct exchange *ex, int what, void *arg);

struct exchange {
	struct upstream_pool *up;
	struct server_pool *sp;         /* this try's server */
	struct upstream_server_state *state;    /* its shared state, kept once the try ends */
	struct upconn *uc;              /* its connection, from EXCHANGE_READY on */
	struct event *timer;            /* queue, connect and per-try deadlines */
	exchange_cb cb;
	void *arg;
	enum exchange_stage stage;
	int timer_mode;                 /* private: which deadline the timer holds */
	int timer_on;                   /* private: the timer is pending */
	uint64_t started;               /* ms (upstream_state_now) when the try began */
	unsigned fail;                  /* FAIL_* or EXCHANGE_* of a failure */
	int error;                      /* errno of a failed connect, or 0 */
	unsigned trial : 1;             /* the trial request of an ejected server */
	unsigned retry : 1;             /* holds a place in the retry budget until it ends */
	unsigned next_retry : 1;        /* private: exchange_may_retry charged the next try */
	unsigned verdict : 1;           /* passive health has its answer for this try */
	unsigned in_try : 1;            /* the per-try deadline runs (until the answer's head) */
	unsigned fresh : 1;             /* this try needs a new connection */
	unsigned tls_failed : 1;        /* the failed connect was a TLS handshake (tls_error) */
	char tls_error[160];
	uint64_t connect_timeout;       /* ms: the owner's connect deadline for this try */
	uint64_t try_timeout;           /* ms: its per-try deadline, 0: none */
	const char *key;                /* hash balancing key for this request */
	size_t keylen;
	struct server_pool *const *tried;   /* servers this request has had (skipped) */
	size_t ntried;
	TAILQ_ENTRY(exchange) queue_entry;
};

TAILQ_HEAD(exchange_queue, exchange);

/* Once per owner: the timer lives with the exchange; 0 or -1. */
int exchange_init(struct exchange *ex, struct worker *w, exchange_cb cb, void *arg);
void exchange_free(struct exchange *ex);

/*
 * Start a try on up, skipping the servers in tried[0..ntried).  Returns 1 when a pooled
 * connection is ready now (EXCHANGE_READY is not reported), 0 when the exchange waits for a
 * connection or a place (READY or FAILED follow), -1 when it failed at once (ex->fail).
 * fresh: never take a pooled connection (the last one turned out stale).
 */
int exchange_start(struct exchange *ex, struct upstream_pool *up, int fresh);

/* Queued ex may find a server now (upstream.c calls it when a place frees): 1 when it left
 * the queue. */
int exchange_wake(struct exchange *ex);

/* The answer's head is here: stop the per-try deadline. */
void exchange_head_received(struct exchange *ex);
/* Tell passive health how the server did: 0 for success, else the FAIL_* bit.  Once per try;
 * later calls are ignored. */
void exchange_verdict(struct exchange *ex, unsigned fail);
/*
 * Whether a request whose try failed with fail (FAIL_*) may have another, after ntried tries
 * (the servers tried are skipped).  A failed connect reached no server: every request fails
 * over, to each server once.  Otherwise retry_on must list the failure, the request must be
 * idempotent and still in hand (replayable), and *retries under the upstream's retries
 * (*retries then counts it).
 * why UPSTREAM_RETRY_STALE (fail FAIL_RESET) is nginx's extra try after a reused pooled
 * connection closed with no byte of an answer: it does not use up retries, and the server
 * it failed on (the last of the ntried) may take it again.
 * The retry budget is asked only for retries that may add load: not for a failover after a
 * failed connect, nor for the extra try after a stale pooled connection, nor for a retry
 * after a reset that leaves a server out of service (ejected, failing its checks), which
 * gets nothing more.  The next exchange_start holds the place the budget gave until it ends.
 */
int exchange_may_retry(struct exchange *ex, unsigned fail,
    enum upstream_retry_reason why, size_t ntried, unsigned *retries,
    int idempotent, int replayable, const char *request_id);

/*
 * The hash balancing key of a request for up, by its hash_key variable ($remote_addr,
 * $request_uri: target, $path: path, $host, $header.NAME), copied into out (cap bytes at
 * most): its length, 0 when up does not hash.
 */
size_t exchange_hash_key(const struct config_upstream *up, const char *remote_addr,
    const struct http_request *req, struct http_str target, struct http_str path, char *out,
    size_t cap);

/* The FAIL_* bit of an answer's status (429, 500, 502, 503, 504), or 0. */
unsigned exchange_status_failure(int status);
/* The retry reason of a failing status (one exchange_status_failure gives a bit for). */
enum upstream_retry_reason exchange_status_reason(int status);
/* The gateway error a request answers when every try got the failing status. */
enum gateway_error exchange_status_error(int status);
/* The answer's head is here (its server is ex->sp): a 503 or 429 with Retry-After keeps
 * requests away from that server until then. */
void exchange_note_retry_after(struct exchange *ex, const struct http_response *resp);

/* A failed connect (ex->fail FAIL_CONNECT): the gateway error to answer, the client's message
 * (naming the upstream) and the log's (naming the server). */
enum gateway_error exchange_describe_connect(const struct exchange *ex, char *client,
    size_t ccap, char *log, size_t lcap);

/*
 * End the try: the connection goes back to its pool when reusable, else it is closed.  A try
 * without a verdict counts as none (the client went away): only its trial is given back.
 */
void exchange_end(struct exchange *ex, int reusable);

#endif
