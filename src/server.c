#include "config.h"
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "body.h"
#include "listener.h"
#include "log.h"
#include "mempool.h"
#include "proxy.h"
#include "timers.h"
#include "upstream.h"
#include "upstream_set.h"

/* A burst of connections (a pipeline flood, a client that never read its answers) grows
 * the heap by their buffers; once they are closed, malloc keeps what it freed in the middle
 * of the heap.  Trimmed a second after a close, at most once a second, it goes back. */
#define WORKER_TRIM_DELAY_MS 1000

static struct worker *workers;
static unsigned nworkers;
static int exit_fd = -1;                /* eventfd: workers tell the main thread they ended */
/* Client connections open in all workers, counted against limits.max_connections. */
static atomic_uint slots_taken;
static atomic_uint workers_full;        /* workers whose full flag is set */

static void worker_post(struct worker *w, struct runtime *rt, int drain, int resume);

static void
runtime_add_error(char **errors, const char *fmt, const char *a, const char *b)
{
	size_t old = *errors != NULL ? strlen(*errors) : 0;
	size_t add = strlen(fmt) + strlen(a) + strlen(b) + 2;
	char *p = realloc(*errors, old + add);

	if (p == NULL)
		return;
	snprintf(p + old, add, fmt, a, b);
	strcat(p + old, "\n");
	*errors = p;
}

static struct listen_sock *
runtime_find_sock(struct runtime *rt, const char *key)
{
	size_t i;

	for (i = 0; rt != NULL && i < rt->cfg->nlisteners; i++)
		if (rt->socks[i] != NULL && strcmp(rt->socks[i]->key, key) == 0)
			return rt->socks[i];
	return NULL;
}

/* Build a runtime for cfg, keeping the sockets of previous that are still listed. */
struct runtime *
runtime_new(struct config *cfg, struct runtime *previous, unsigned nworkers_wanted,
    char **errors)
{
	struct runtime *rt;
	struct listen_sock *ls;
	size_t i;

	*errors = NULL;
	if ((rt = calloc(1, sizeof(*rt))) == NULL ||
	    (rt->socks = calloc(cfg->nlisteners ? cfg->nlisteners : 1, sizeof(*rt->socks))) == NULL) {
		free(rt);
		runtime_add_error(errors, "%s%s", "out of memory", "");
		return NULL;
	}
	rt->cfg = cfg;
	atomic_init(&rt->refs, 1);
	rt->access.fd = -1;
	for (i = 0; i < cfg->nlisteners; i++) {
		const struct config_addr *addr = &cfg->listeners[i].addr;
		if ((ls = runtime_find_sock(previous, addr->text)) != NULL)
			listener_ref(ls);
		else if ((ls = listener_open(addr, nworkers_wanted)) == NULL)
			runtime_add_error(errors, "cannot listen on %s: %s", addr->text,
			    strerror(errno));
		rt->socks[i] = ls;
	}
	if (access_log_open(&rt->access, cfg) < 0)
		runtime_add_error(errors, "cannot open access log %s: %s", cfg->access_log,
		    strerror(errno));
	if (*errors != NULL) {
		/* The caller still owns cfg. */
		for (i = 0; i < cfg->nlisteners; i++)
			listener_unref(rt->socks[i]);
		access_log_close(&rt->access);
		free(rt->socks);
		free(rt);
		return NULL;
	}
	return rt;
}

void
runtime_release(struct runtime *rt)
{
	size_t i;

	if (rt == NULL || atomic_fetch_sub(&rt->refs, 1) != 1)
		return;
	for (i = 0; i < rt->cfg->nlisteners; i++)
		listener_unref(rt->socks[i]);
	access_log_close(&rt->access);
	upstream_sets_release(rt->cfg);
	config_free(rt->cfg);
	free(rt->socks);
	free(rt);
}

void
runtime_stop_listening(struct runtime *rt, const struct runtime *keep)
{
	size_t i, j;

	for (i = 0; i < rt->cfg->nlisteners; i++) {
		for (j = 0; keep != NULL && j < keep->cfg->nlisteners; j++)
			if (keep->socks[j] == rt->socks[i])
				break;
		if (keep == NULL || j == keep->cfg->nlisteners)
			listener_shutdown(rt->socks[i]);
	}
}

/* --- a worker's view of a runtime --------------------------------------------------- */

static void
worker_runtime_detach_listeners(struct worker_runtime *wr)
{
	size_t i;

	if (wr->listeners == NULL)
		return;
	for (i = 0; i < wr->rt->cfg->nlisteners; i++)
		listener_detach(wr->listeners[i]);
	free(wr->listeners);
	wr->listeners = NULL;
}

void
worker_runtime_ref(struct worker_runtime *wr)
{
	wr->refs++;
}

void
worker_runtime_unref(struct worker_runtime *wr)
{
	if (--wr->refs != 0)
		return;
	worker_runtime_detach_listeners(wr);
	upstream_pools_free(wr);
	runtime_release(wr->rt);
	free(wr);
}

void
worker_set_accepting(struct worker *w, int on)
{
	size_t i;

	if (w->draining)
		on = 0;
	w->accepting = on;
	if (w->cur == NULL || w->cur->listeners == NULL)
		return;
	for (i = 0; i < w->cur->rt->cfg->nlisteners; i++)
		listener_enable(w->cur->listeners[i], on);
}

static int
server_slot_take(unsigned max)
{
	unsigned n = atomic_load(&slots_taken);

	do {
		if (n >= max)
			return 0;
	} while (!atomic_compare_exchange_weak(&slots_taken, &n, n + 1));
	return 1;
}

int
worker_slot_take(struct worker *w)
{
	unsigned max = w->cur->rt->cfg->limits.max_connections;

	if (server_slot_take(max))
		return 1;
	/* Flag first, then try again: a slot given back in between is either taken now or
	 * its giver sees the flag and wakes us. */
	if (!atomic_exchange(&w->full, 1))
		atomic_fetch_add(&workers_full, 1);
	if (server_slot_take(max)) {
		if (atomic_exchange(&w->full, 0))
			atomic_fetch_sub(&workers_full, 1);
		return 1;
	}
	worker_set_accepting(w, 0);
	return 0;
}

void
worker_slot_give(struct worker *w)
{
	unsigned i;

	atomic_fetch_sub(&slots_taken, 1);
	if (atomic_load(&workers_full) == 0)
		return;
	for (i = 0; i < nworkers; i++) {
		if (!atomic_exchange(&workers[i].full, 0))
			continue;
		atomic_fetch_sub(&workers_full, 1);
		if (&workers[i] != w)
			worker_post(&workers[i], NULL, 0, 1);
		else
			worker_set_accepting(w, 1);
	}
}

void
worker_client_closed(struct worker *w)
{
	worker_slot_give(w);
	if (!deadline_running(&w->trim))
		deadline_start(&w->trim, WORKER_TRIM_DELAY_MS);
	if (w->draining) {
		if (w->nclients == 0)
			event_base_loopbreak(w->base);
	} else if (!w->accepting) {
		/* After EMFILE and friends: a descriptor is free now. */
		worker_set_accepting(w, 1);
	}
}

/* Switch w to rt (the caller passed us one reference). */
static void
worker_use_runtime(struct worker *w, struct runtime *rt)
{
	struct worker_runtime *wr, *old = w->cur;
	const struct config *cfg = rt->cfg;
	size_t i;

	if ((wr = calloc(1, sizeof(*wr))) == NULL ||
	    (wr->listeners = calloc(cfg->nlisteners ? cfg->nlisteners : 1,
	    sizeof(*wr->listeners))) == NULL) {
		log_errorx("worker %u: out of memory, keeping the previous configuration", w->id);
		free(wr);
		runtime_release(rt);
		return;
	}
	wr->rt = rt;
	wr->w = w;
	wr->refs = 1;
	for (i = 0; i < cfg->nlisteners; i++)
		if ((wr->listeners[i] = listener_attach(w, rt->socks[i],
		    cfg->listeners[i].tls != NULL ? cfg->listeners[i].tls->ctx : NULL,
		    cfg->listeners[i].http2)) == NULL)
			log_errorx("worker %u: cannot accept on %s", w->id, rt->socks[i]->key);
	if (upstream_pools_init(wr) < 0)
		log_errorx("worker %u: out of memory for upstream pools", w->id);
	w->cur = wr;
	if (old != NULL) {
		/* Stop accepting on the old sockets now; requests on it finish on their own. */
		worker_runtime_detach_listeners(old);
		proxy_reloaded(w);
		upstream_pools_close_idle(old);
		worker_runtime_unref(old);
	}
	/* At max_connections the first accept finds no slot and stops again. */
	worker_set_accepting(w, 1);
}

/* Newer versions of upstreams' servers: the pools of the current runtime follow them (one
 * made for an older configuration is too late and goes). */
static void
worker_take_sets(struct worker *w)
{
	struct upstream_set **sets;
	size_t i, n;

	pthread_mutex_lock(&w->lock);
	sets = w->pending_sets;
	n = w->npending_sets;
	w->pending_sets = NULL;
	w->npending_sets = w->pending_sets_cap = 0;
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < n; i++) {
		if (w->cur != NULL && w->cur->rt->cfg == sets[i]->cfg && w->cur->pools != NULL)
			upstream_pool_use_set(&w->cur->pools[sets[i]->upstream], sets[i]);
		else
			upstream_set_unref(sets[i]);
	}
	free(sets);
}

static void
worker_notify_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct runtime *rt;
	uint64_t v;
	int drain, resume;

	(void)what;
	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("worker %u: notify read", w->id);
	pthread_mutex_lock(&w->lock);
	rt = w->pending;
	w->pending = NULL;
	drain = w->pending_drain;
	resume = w->pending_resume;
	w->pending_resume = 0;
	pthread_mutex_unlock(&w->lock);

	if (rt != NULL && !w->draining)
		worker_use_runtime(w, rt);
	else if (rt != NULL)
		runtime_release(rt);
	worker_take_sets(w);
	if (resume)
		worker_set_accepting(w, 1);
	if (drain == 2) {
		proxy_close_all(w);
		event_base_loopbreak(w->base);
	} else if (drain == 1 && !w->draining) {
		w->draining = 1;
		worker_set_accepting(w, 0);
		proxy_drain_idle(w);
		if (w->nclients == 0)
			event_base_loopbreak(w->base);
	}
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct worker_runtime *wr;
	uint64_t one = 1;

	event_base_dispatch(w->base);
	proxy_close_all(w);
	proxy_reap_cb(-1, 0, w);
	proxy_worker_end();
	if ((wr = w->cur) != NULL) {
		w->cur = NULL;
		worker_runtime_detach_listeners(wr);
		worker_runtime_unref(wr);
	}
	mempool_thread_release();
	if (write(exit_fd, &one, sizeof(one)) < 0)
		log_warn("worker %u: exit notify", w->id);
	return NULL;
}

static void
worker_trim_cb(struct deadline *d, void *arg)
{
	(void)d;
	(void)arg;
	mempool_trim();
}

int
worker_init(struct worker *w, unsigned id, struct runtime *rt)
{
	struct event_config *ecfg;

	w->id = id;
	LIST_INIT(&w->clients);
	LIST_INIT(&w->dead);
	TAILQ_INIT(&w->resume);
	pthread_mutex_init(&w->lock, NULL);
	/* Each base is touched by its own thread only: no locking needed inside libevent. */
	if ((ecfg = event_config_new()) == NULL)
		return -1;
	event_config_set_flag(ecfg, EVENT_BASE_FLAG_NOLOCK);
	/* A connection's read and write events go to epoll as one change when it opens and one
	 * when it closes (2 epoll_ctl calls, not 4).  libevent warns against this for file
	 * descriptors shared by dup(); no socket we watch is ever duplicated. */
	event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	w->base = event_base_new_with_config(ecfg);
	event_config_free(ecfg);
	if (w->base == NULL || (w->timers = timers_new(w->base)) == NULL)
		return -1;
	w->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->notify_fd < 0)
		return -1;
	w->notify_ev = event_new(w->base, w->notify_fd, EV_READ | EV_PERSIST, worker_notify_cb, w);
	if (w->notify_ev == NULL || event_add(w->notify_ev, NULL) < 0)
		return -1;
	if ((w->reaper = event_new(w->base, -1, 0, proxy_reap_cb, w)) == NULL ||
	    (w->resume_ev = event_new(w->base, -1, 0, proxy_resume_cb, w)) == NULL)
		return -1;
	deadline_init(&w->trim, w->timers, worker_trim_cb, w);
	if ((w->bodies = body_pool_new()) == NULL || (w->rewritten = evbuffer_new()) == NULL ||
	    (w->h2_head = evbuffer_new()) == NULL)
		return -1;
	body_pool_set_timers(w->bodies, w->timers);
	atomic_fetch_add(&rt->refs, 1);
	worker_use_runtime(w, rt);
	return 0;
}

static void
worker_post(struct worker *w, struct runtime *rt, int drain, int resume)
{
	uint64_t one = 1;

	pthread_mutex_lock(&w->lock);
	if (rt != NULL) {
		atomic_fetch_add(&rt->refs, 1);
		if (w->pending != NULL)
			runtime_release(w->pending);
		w->pending = rt;
	}
	if (drain > w->pending_drain)
		w->pending_drain = drain;
	w->pending_resume |= resume;
	pthread_mutex_unlock(&w->lock);
	if (write(w->notify_fd, &one, sizeof(one)) < 0)
		log_warn("worker %u: notify", w->id);
}

int
server_start(struct runtime *rt, unsigned n)
{
	sigset_t all, old;
	unsigned i;

	nworkers = n ? n : 1;
	if ((workers = calloc(nworkers, sizeof(*workers))) == NULL)
		return -1;
	if ((exit_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		return -1;
	for (i = 0; i < nworkers; i++)
		if (worker_init(&workers[i], i, rt) < 0)
			return -1;
	/* Signals are for the main thread's event loop only. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (i = 0; i < nworkers; i++)
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			return -1;
		}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return 0;
}

int
server_exit_fd(void)
{
	return exit_fd;
}

unsigned
server_nworkers(void)
{
	return nworkers;
}

void
server_swap(struct runtime *rt)
{
	unsigned i;

	for (i = 0; i < nworkers; i++)
		worker_post(&workers[i], rt, 0, 0);
}

void
server_publish_set(struct upstream_set *set)
{
	struct upstream_set **grown;
	uint64_t one = 1;
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		struct worker *w = &workers[i];
		pthread_mutex_lock(&w->lock);
		if (w->npending_sets == w->pending_sets_cap) {
			size_t cap = w->pending_sets_cap ? w->pending_sets_cap * 2 : 4;
			if ((grown = realloc(w->pending_sets, cap * sizeof(*grown))) == NULL) {
				pthread_mutex_unlock(&w->lock);
				log_errorx("worker %u: out of memory for new upstream servers", w->id);
				continue;
			}
			w->pending_sets = grown;
			w->pending_sets_cap = cap;
		}
		upstream_set_ref(set);
		w->pending_sets[w->npending_sets++] = set;
		pthread_mutex_unlock(&w->lock);
		if (write(w->notify_fd, &one, sizeof(one)) < 0)
			log_warn("worker %u: notify", w->id);
	}
}

void
server_drain(void)
{
	unsigned i;

	for (i = 0; i < nworkers; i++)
		worker_post(&workers[i], NULL, 1, 0);
}

void
server_stop_now(void)
{
	unsigned i;

	for (i = 0; i < nworkers; i++)
		worker_post(&workers[i], NULL, 2, 0);
}

void
server_join(void)
{
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		struct worker *w = &workers[i];
		pthread_join(w->thread, NULL);
		if (w->pending != NULL)
			runtime_release(w->pending);
		while (w->npending_sets > 0)
			upstream_set_unref(w->pending_sets[--w->npending_sets]);
		free(w->pending_sets);
		event_free(w->notify_ev);
		event_free(w->reaper);
		event_free(w->resume_ev);
		deadline_stop(&w->trim);
		proxy_worker_free(w);
		body_pool_free(w->bodies);
		evbuffer_free(w->rewritten);
		if (w->h2_head != NULL)
			evbuffer_free(w->h2_head);
		close(w->notify_fd);
		timers_free(w->timers);
		event_base_free(w->base);
		pthread_mutex_destroy(&w->lock);
		free(w->target_buf);
	}
	free(workers);
	workers = NULL;
	close(exit_fd);
	exit_fd = -1;
}
