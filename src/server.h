/* Workers, loaded configurations and their swap on reload. */
#ifndef JG_SERVER_H
#define JG_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/queue.h>

#include "access_log.h"
#include "config.h"
#include "http.h"
#include "timers.h"

struct event_base;
struct event;
struct listen_sock;
struct upstream_pool;
struct worker_listener;
struct client;
struct body_pool;
struct evbuffer;
struct upstream_set;
struct request;

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
TAILQ_HEAD(client_queue, client);

struct worker {
	unsigned id;
	pthread_t thread;
	struct event_base *base;
	struct timers *timers;          /* the deadlines of its connections */
	int notify_fd;                  /* eventfd: the main thread posts messages */
	struct event *notify_ev;
	pthread_mutex_t lock;           /* guards the message fields below */
	struct runtime *pending;        /* new runtime to switch to */
	int pending_drain;              /* 1: drain and stop, 2: stop now */
	struct upstream_set **pending_sets; /* newer versions of upstreams' servers */
	size_t npending_sets, pending_sets_cap;
	int pending_resume;             /* a connection slot came free: accept again */
	atomic_int full;                /* stopped accepting at max_connections */

	struct worker_runtime *cur;
	struct client_list clients;     /* every open client connection */
	struct client_list dead;        /* closed clients whose memory the reaper frees */
	struct event *reaper;
	struct client_queue resume;     /* clients whose pipelined requests wait for their turn */
	struct event *resume_ev;        /* active while resume is not empty */
	struct deadline trim;           /* memory left by closed connections goes back */
	unsigned nclients;
	int accepting;                  /* listeners enabled */
	int draining;

	/* Scratch for parsing heads: used and done with inside one callback. */
	struct http_request req;
	char req_accept_encoding[256];  /* req's Accept-Encoding when the proxy rewrote it */
	struct http_response resp;
	char *target_buf;               /* the rewritten request-target */
	size_t target_cap;
	struct body_pool *bodies;       /* envelope engine scratch and body blocks */
	struct evbuffer *rewritten;     /* a rewritten body on its way to a client */
	struct evbuffer *h2_head;       /* an HTTP/2 answer's head, written as HTTP/1.1 first */
	struct request *free_requests;  /* idle ones, kept for the next requests (request.c) */
	unsigned nfree_requests;
};

/* A runtime for cfg, with sockets for nworkers; the sockets of previous still listed are kept. */
struct runtime *runtime_new(struct config *cfg, struct runtime *previous, unsigned nworkers,
    char **errors);
void runtime_release(struct runtime *rt);
/* Stop listening at once on the sockets of rt that keep does not have (keep NULL: all). */
void runtime_stop_listening(struct runtime *rt, const struct runtime *keep);

/* Set up worker w (no thread yet) on rt, taking a reference to it.  server_start does it for
 * each worker; the proxy's fuzz target drives one on its own loop. */
int worker_init(struct worker *w, unsigned id, struct runtime *rt);

void worker_runtime_ref(struct worker_runtime *wr);
void worker_runtime_unref(struct worker_runtime *wr);
/* Stop or resume accepting on every listener of this worker (max_connections, drain). */
void worker_set_accepting(struct worker *w, int on);
/* Take one of the limits.max_connections slots shared by all workers before accepting; 0:
 * none is free, and w stops accepting until one is given back. */
int worker_slot_take(struct worker *w);
/* Give a slot back (an accept failed, or its connection closed): wakes full workers. */
void worker_slot_give(struct worker *w);
/* Called by proxy when a client connection closes: may resume accepting, or end the drain;
 * the memory its buffers left in the heap goes back to the system a second later. */
void worker_client_closed(struct worker *w);

/* Main-thread side: start workers on rt, swap all of them to a new runtime, stop them. */
int server_start(struct runtime *rt, unsigned nworkers);
void server_swap(struct runtime *rt);
/* Give every worker a newer version of an upstream's servers (a reference each). */
void server_publish_set(struct upstream_set *set);
void server_drain(void);
void server_stop_now(void);
void server_join(void);
/* Readable (eventfd) each time a worker thread ends. */
int server_exit_fd(void);
unsigned server_nworkers(void);

#endif
