/* Workers, loaded configurations and their swap on reload. */
#ifndef JG_SERVER_H
#define JG_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/queue.h>

#include "access_log.h"
#include "config.h"
#include "http.h"

struct event_base;
struct event;
struct listen_sock;
struct upstream_pool;
struct worker_listener;
struct client;
struct body_pool;
struct evbuffer;

/* One loaded configuration and the listening sockets it owns; shared by every worker. */
struct runtime {
	struct config *cfg;
	struct listen_sock **socks;     /* one per cfg->listeners[i] */
	struct access_log access;
	atomic_uint refs;               /* one per worker view, plus the main thread's */
};

/* A runtime as one worker sees it: its accept events and its upstream connection pools. */
struct worker_runtime {
	struct runtime *rt;
	struct worker *w;
	unsigned refs;                  /* requests in flight on it, +1 while it is current */
	struct worker_listener **listeners; /* one per rt->socks[i] */
	struct upstream_pool *pools;    /* one per cfg->upstreams[i] */
};

LIST_HEAD(client_list, client);

struct worker {
	unsigned id;
	pthread_t thread;
	struct event_base *base;
	int notify_fd;                  /* eventfd: the main thread posts messages */
	struct event *notify_ev;
	pthread_mutex_t lock;           /* guards the two message fields below */
	struct runtime *pending;        /* new runtime to switch to */
	int pending_drain;              /* 1: drain and stop, 2: stop now */

	struct worker_runtime *cur;
	struct client_list clients;     /* every open client connection */
	struct client_list dead;        /* closed clients whose memory the reaper frees */
	struct event *reaper;
	unsigned nclients;
	unsigned max_clients;           /* limits.max_connections shared out between workers */
	int accepting;                  /* listeners enabled */
	int draining;

	/* Scratch for parsing heads: used and done with inside one callback. */
	struct http_request req;
	struct http_response resp;
	char *target_buf;               /* the rewritten request-target */
	size_t target_cap;
	struct body_pool *bodies;       /* envelope engine scratch and body blocks */
	struct evbuffer *rewritten;     /* a rewritten body on its way to a client */
};

struct runtime *runtime_new(struct config *cfg, struct runtime *previous, char **errors);
void runtime_release(struct runtime *rt);

void worker_runtime_ref(struct worker_runtime *wr);
void worker_runtime_unref(struct worker_runtime *wr);
/* Stop or resume accepting on every listener of this worker (max_connections, drain). */
void worker_set_accepting(struct worker *w, int on);
/* Called by proxy when a client connection closes: may resume accepting, or end the drain. */
void worker_client_closed(struct worker *w);

/* Main-thread side: start workers on rt, swap all of them to a new runtime, stop them. */
int server_start(struct runtime *rt, unsigned nworkers);
void server_swap(struct runtime *rt);
void server_drain(void);
void server_stop_now(void);
void server_join(void);
/* Readable (eventfd) each time a worker thread ends. */
int server_exit_fd(void);
unsigned server_nworkers(void);

#endif
