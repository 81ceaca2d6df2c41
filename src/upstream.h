/* Upstream servers of one worker: choosing one (balancing, health, max_connections), pooled
 * keep-alive connections, and the queue of requests waiting for a server. */
#ifndef JG_UPSTREAM_H
#define JG_UPSTREAM_H

#include <sys/queue.h>
#include "config.h"
#include "conn.h"
#include "exchange.h"

struct event;
struct event_base;
struct worker_runtime;
struct server_pool;
struct balance_ring;
struct balance_server;

/* One TCP connection to an upstream server; owned by a request, or idle in its pool. */
struct upconn {
	struct conn conn;
	struct server_pool *sp;
	TAILQ_ENTRY(upconn) idle_entry;
	unsigned reused : 1;            /* it served a request before: may have gone stale */
	unsigned idle : 1;
};

TAILQ_HEAD(upconn_list, upconn);

/* A server as one worker knows it.  Referenced by its pool while the server is in the
 * upstream's current version, by each of its connections, and by each request that tried it;
 * freed when the last reference goes (a server a name no longer resolves to lingers while a
 * request or connection still has it). */
struct server_pool {
	const struct config_server *srv;    /* in set */
	struct upstream_set *set;       /* the version srv belongs to (referenced) */
	struct upstream_pool *up;
	struct upconn_list idle;
	unsigned nidle;
	unsigned active;
	unsigned refs;
	unsigned retired : 1;           /* no longer in the pool's list: pools nothing */
	void *tls_session;              /* the server's last TLS session, offered for resumption */
};

struct upstream_pool {
	const struct config_upstream *cfg;
	struct worker_runtime *wr;
	struct upstream_set *set;       /* the version of the servers it follows (referenced) */
	struct server_pool **servers;
	size_t nservers;
	struct balance_server *candidates;  /* what the policy is told, updated per pick; also
	                                     * its round robin state */
	struct balance_ring *ring;      /* balance: hash */
	uint64_t rng;                   /* least_conn's ties */
	struct exchange_queue queue;    /* waiting for a server under max_connections */
	size_t nqueued;
	struct event *queue_timer;      /* looks again while the queue is not empty */
};

int upstream_pools_init(struct worker_runtime *wr);
/* Follow a newer version of up's servers (the caller gives its reference): pooled connections
 * to the addresses that stay are kept. */
void upstream_pool_use_set(struct upstream_pool *up, struct upstream_set *set);
/* Servers of up ejected now, for max_ejected_percent. */
size_t upstream_pool_ejected(const struct upstream_pool *up);
void upstream_server_ref(struct server_pool *sp);
void upstream_server_unref(struct server_pool *sp);
/* Close the idle connections of every pool (the runtime is being replaced). */
void upstream_pools_close_idle(struct worker_runtime *wr);
void upstream_pools_free(struct worker_runtime *wr);

/* Why upstream_pick found no server. */
enum upstream_pick_none {
	UPSTREAM_NONE_LEFT,             /* every server was tried */
	UPSTREAM_NONE_FULL              /* the servers left are at max_connections */
};

/*
 * Choose a server for a try of a request: skip tried[0..ntried), servers out of service
 * (ejected, failing checks, Retry-After: unless every server left is, as in Envoy's panic
 * mode) and servers at max_connections; backups only while no primary can take it.  key is
 * the hash balancing key (may be empty).  The chosen server counts the request in flight
 * until upstream_unpick; *trial says whether it is an ejected server's trial request.
 * NULL with *why when there is none.
 */
struct server_pool *upstream_pick(struct upstream_pool *up, const char *key, size_t keylen,
    struct server_pool *const *tried, size_t ntried, int *trial, enum upstream_pick_none *why);
/* The try with sp is over: it no longer counts in flight (and the reference upstream_pick
 * gave goes); a queued request may go now. */
void upstream_unpick(struct server_pool *sp);

/* Queue ex until a server has a place; -1 when the queue is full (max_pending). */
int upstream_queue(struct upstream_pool *up, struct exchange *ex);
void upstream_unqueue(struct upstream_pool *up, struct exchange *ex);

/* An idle pooled connection to sp, or NULL. */
struct upconn *upstream_take_idle(struct server_pool *sp);
/* Start a non-blocking connect to sp, reporting to cb. NULL with errno on error. */
struct upconn *upstream_connect(struct server_pool *sp, struct timers *timers, conn_cb cb,
    void *arg);
/* Return a connection whose exchange completed cleanly to the pool (or close it if full). */
void upstream_release(struct upconn *uc);
void upstream_close(struct upconn *uc);

#endif
