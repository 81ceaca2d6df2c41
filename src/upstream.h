/* Upstream servers of one worker: weighted round robin, pooled keep-alive connections. */
#ifndef JG_UPSTREAM_H
#define JG_UPSTREAM_H

#include <sys/queue.h>
#include "config.h"
#include "conn.h"

struct event_base;
struct worker_runtime;
struct server_pool;

/* One TCP connection to an upstream server; owned by a request, or idle in its pool. */
struct upconn {
	struct conn conn;
	struct server_pool *sp;
	TAILQ_ENTRY(upconn) idle_entry;
	unsigned reused : 1;            /* it served a request before: may have gone stale */
	unsigned idle : 1;
};

TAILQ_HEAD(upconn_list, upconn);

struct server_pool {
	const struct config_server *srv;
	struct upstream_pool *up;
	struct upconn_list idle;
	unsigned nidle;
	unsigned active;
	int current_weight;             /* smooth weighted round robin state */
	void *tls_session;              /* the server's last TLS session, offered for resumption */
};

struct upstream_pool {
	const struct config_upstream *cfg;
	struct worker_runtime *wr;
	struct server_pool *servers;
	size_t nservers;
};

int upstream_pools_init(struct worker_runtime *wr);
/* Close the idle connections of every pool (the runtime is being replaced). */
void upstream_pools_close_idle(struct worker_runtime *wr);
void upstream_pools_free(struct worker_runtime *wr);

struct server_pool *upstream_pick(struct upstream_pool *up);
/* An idle pooled connection to sp, or NULL. */
struct upconn *upstream_take_idle(struct server_pool *sp);
/* Start a non-blocking connect to sp, reporting to cb. NULL with errno on error. */
struct upconn *upstream_connect(struct server_pool *sp, struct event_base *base, conn_cb cb,
    void *arg);
/* Return a connection whose exchange completed cleanly to the pool (or close it if full). */
void upstream_release(struct upconn *uc);
void upstream_close(struct upconn *uc);

#endif
