#include "config.h"
#include "upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "balance.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "tls.h"
#include "upstream_set.h"
#include "upstream_state.h"

/* How often a worker looks again for a server when requests wait and the place that frees
 * is in another worker. */
#define QUEUE_RECHECK_MS 10

static void upstream_queue_timer_cb(evutil_socket_t fd, short what, void *arg);

void
upstream_server_ref(struct server_pool *sp)
{
	sp->refs++;
}

void
upstream_server_unref(struct server_pool *sp)
{
	if (--sp->refs != 0)
		return;
	tls_session_free(sp->tls_session);
	upstream_set_unref(sp->set);
	free(sp);
}

static struct server_pool *
upstream_server_new(struct upstream_pool *up, struct upstream_set *set, size_t i)
{
	struct server_pool *sp = calloc(1, sizeof(*sp));

	if (sp == NULL)
		return NULL;
	sp->srv = &set->servers[i];
	sp->set = set;
	upstream_set_ref(set);
	sp->up = up;
	sp->refs = 1;                   /* the pool's */
	TAILQ_INIT(&sp->idle);
	return sp;
}

/* The server leaves the pool's list: its idle connections close, its memory goes with the
 * last request or connection that has it. */
static void
upstream_server_retire(struct server_pool *sp)
{
	struct upconn *uc;

	sp->retired = 1;
	while ((uc = TAILQ_FIRST(&sp->idle)) != NULL)
		upstream_close(uc);
	upstream_server_unref(sp);
}

/* What the policy is told about each server, and the hash ring, for the current list. */
static int
upstream_pool_candidates(struct upstream_pool *up)
{
	size_t j;

	free(up->candidates);
	balance_ring_free(up->ring);
	up->ring = NULL;
	up->candidates = calloc(up->nservers ? up->nservers : 1, sizeof(*up->candidates));
	if (up->candidates == NULL)
		return -1;
	for (j = 0; j < up->nservers; j++) {
		const struct config_server *srv = up->servers[j]->srv;
		up->candidates[j].id = srv->addr.text;
		up->candidates[j].weight = srv->weight;
		up->candidates[j].backup = srv->backup != 0;
	}
	if (up->cfg->balance == BALANCE_HASH &&
	    (up->ring = balance_ring_build(up->candidates, up->nservers)) == NULL)
		return -1;
	return 0;
}

static int
upstream_pool_init(struct upstream_pool *up, struct worker_runtime *wr,
    const struct config_upstream *cfg)
{
	struct upstream_set *set = cfg->initial;
	size_t j;

	up->cfg = cfg;
	up->wr = wr;
	up->set = set;
	upstream_set_ref(set);
	TAILQ_INIT(&up->queue);
	up->rng = (uint64_t)(uintptr_t)up ^ ((uint64_t)wr->w->id << 32);
	up->servers = calloc(set->nservers ? set->nservers : 1, sizeof(*up->servers));
	up->queue_timer = evtimer_new(wr->w->base, upstream_queue_timer_cb, up);
	if (up->servers == NULL || up->queue_timer == NULL)
		return -1;
	for (j = 0; j < set->nservers; j++) {
		if ((up->servers[j] = upstream_server_new(up, set, j)) == NULL)
			return -1;
		up->nservers++;
	}
	return upstream_pool_candidates(up);
}

int
upstream_pools_init(struct worker_runtime *wr)
{
	const struct config *cfg = wr->rt->cfg;
	size_t i;

	wr->pools = calloc(cfg->nupstreams ? cfg->nupstreams : 1, sizeof(*wr->pools));
	if (wr->pools == NULL)
		return -1;
	for (i = 0; i < cfg->nupstreams; i++)
		if (upstream_pool_init(&wr->pools[i], wr, &cfg->upstreams[i]) < 0)
			return -1;
	return 0;
}

void
upstream_pool_use_set(struct upstream_pool *up, struct upstream_set *set)
{
	struct server_pool **servers, *sp;
	size_t i, j, n = 0;

	servers = calloc(set->nservers ? set->nservers : 1, sizeof(*servers));
	if (servers == NULL) {
		log_errorx("upstream %s: out of memory for its new servers", up->cfg->name);
		upstream_set_unref(set);
		return;
	}
	for (i = 0; i < set->nservers; i++) {
		const struct config_server *srv = &set->servers[i];
		for (j = 0; j < up->nservers; j++)
			if (up->servers[j] != NULL &&
			    strcmp(up->servers[j]->srv->addr.text, srv->addr.text) == 0)
				break;
		if (j < up->nservers) {
			/* An address that stays keeps its connections and its TLS session. */
			sp = up->servers[j];
			up->servers[j] = NULL;
			upstream_set_ref(set);
			upstream_set_unref(sp->set);
			sp->set = set;
			sp->srv = srv;
		} else if ((sp = upstream_server_new(up, set, i)) == NULL) {
			log_errorx("upstream %s: out of memory for server %s", up->cfg->name,
			    srv->addr.text);
			continue;
		}
		servers[n++] = sp;
	}
	for (j = 0; j < up->nservers; j++)
		if (up->servers[j] != NULL)
			upstream_server_retire(up->servers[j]);
	free(up->servers);
	up->servers = servers;
	up->nservers = n;
	upstream_set_unref(up->set);
	up->set = set;
	if (upstream_pool_candidates(up) < 0)
		log_errorx("upstream %s: out of memory for balancing its new servers", up->cfg->name);
}

void
upstream_pools_close_idle(struct worker_runtime *wr)
{
	size_t i, j;
	struct upconn *uc;

	if (wr->pools == NULL)
		return;
	for (i = 0; i < wr->rt->cfg->nupstreams; i++) {
		struct upstream_pool *up = &wr->pools[i];
		for (j = 0; up->servers != NULL && j < up->nservers; j++)
			while ((uc = TAILQ_FIRST(&up->servers[j]->idle)) != NULL)
				upstream_close(uc);
	}
}

void
upstream_pools_free(struct worker_runtime *wr)
{
	size_t i, j;

	if (wr->pools == NULL)
		return;
	upstream_pools_close_idle(wr);
	for (i = 0; i < wr->rt->cfg->nupstreams; i++) {
		struct upstream_pool *up = &wr->pools[i];
		for (j = 0; up->servers != NULL && j < up->nservers; j++)
			upstream_server_unref(up->servers[j]);
		free(up->servers);
		free(up->candidates);
		balance_ring_free(up->ring);
		if (up->queue_timer != NULL)
			event_free(up->queue_timer);
		if (up->set != NULL)
			upstream_set_unref(up->set);
	}
	free(wr->pools);
	wr->pools = NULL;
}

size_t
upstream_pool_ejected(const struct upstream_pool *up)
{
	size_t j, n = 0;

	for (j = 0; j < up->nservers; j++)
		n += atomic_load_explicit(&up->servers[j]->srv->state->ejected_until,
		    memory_order_relaxed) != 0;
	return n;
}

static int
upstream_was_tried(const struct server_pool *sp, struct server_pool *const *tried, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (tried[i] == sp)
			return 1;
	return 0;
}

/* Fill the candidates: untried servers in service (health: 1) or any untried (0), and
 * under max_connections.  Returns how many are usable; *full counts those left out only for
 * max_connections, *out those left out only for their health. */
static size_t
upstream_candidates(struct upstream_pool *up, struct server_pool *const *tried, size_t ntried,
    int health, uint64_t now, size_t *full, size_t *out)
{
	size_t i, n = 0;

	*full = *out = 0;
	for (i = 0; i < up->nservers; i++) {
		const struct config_server *srv = up->servers[i]->srv;
		struct balance_server *b = &up->candidates[i];
		unsigned in_flight = atomic_load_explicit(&srv->state->in_flight,
		    memory_order_relaxed);

		b->usable = 0;
		b->in_flight = in_flight;
		if (upstream_was_tried(up->servers[i], tried, ntried))
			continue;
		if (health && upstream_server_availability(srv->state, now) == UPSTREAM_OUT) {
			(*out)++;
			continue;
		}
		if (srv->max_connections != 0 && in_flight >= srv->max_connections) {
			(*full)++;
			continue;
		}
		b->usable = 1;
		n++;
	}
	return n;
}

/* The upstream's policy over the candidates; a hash key that is empty goes round robin. */
static int
upstream_balance(struct upstream_pool *up, const char *key, size_t keylen)
{
	switch (up->cfg->balance) {
	case BALANCE_LEAST_CONN:
		return balance_least_conn(up->candidates, up->nservers, &up->rng);
	case BALANCE_HASH:
		if (keylen != 0)
			return balance_hash(up->ring, up->candidates, key, keylen);
		break;
	case BALANCE_ROUND_ROBIN:
		break;
	}
	return balance_round_robin(up->candidates, up->nservers);
}

struct server_pool *
upstream_pick(struct upstream_pool *up, const char *key, size_t keylen,
    struct server_pool *const *tried, size_t ntried, int *trial, enum upstream_pick_none *why)
{
	uint64_t now = upstream_state_now();
	size_t usable, full, out;
	struct server_pool *sp;
	int i, health = 1;

	*trial = 0;
	for (;;) {
		usable = upstream_candidates(up, tried, ntried, health, now, &full, &out);
		if (usable == 0 && health && out != 0) {
			/* Every server left is out of service: try them anyway (panic). */
			health = 0;
			continue;
		}
		if (usable == 0) {
			*why = full != 0 ? UPSTREAM_NONE_FULL : UPSTREAM_NONE_LEFT;
			return NULL;
		}
		i = upstream_balance(up, key, keylen);
		if (i < 0) {
			*why = UPSTREAM_NONE_LEFT;
			return NULL;
		}
		sp = up->servers[i];
		/* An ejection that is over lets one request through to decide. */
		if (health && upstream_server_availability(sp->srv->state, now) == UPSTREAM_TRIAL) {
			if (!upstream_server_claim_trial(sp->srv->state))
				continue;       /* another request took it: look again */
			*trial = 1;
		}
		break;
	}
	atomic_fetch_add_explicit(&sp->srv->state->in_flight, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&up->cfg->state->requests, 1, memory_order_relaxed);
	upstream_server_ref(sp);
	return sp;
}

void
upstream_unpick(struct server_pool *sp)
{
	struct upstream_pool *up = sp->up;

	atomic_fetch_sub_explicit(&sp->srv->state->in_flight, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&up->cfg->state->requests, 1, memory_order_relaxed);
	/* From the loop: the caller is in the middle of ending its own exchange. */
	if (!TAILQ_EMPTY(&up->queue))
		event_active(up->queue_timer, EV_TIMEOUT, 0);
	upstream_server_unref(sp);
}

static void
upstream_queue_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_pool *up = arg;
	struct timeval tv = { 0, QUEUE_RECHECK_MS * 1000 };
	struct exchange *ex;

	(void)fd;
	(void)what;
	while ((ex = TAILQ_FIRST(&up->queue)) != NULL && exchange_wake(ex))
		;
	if (up->nqueued != 0)
		evtimer_add(up->queue_timer, &tv);
}

int
upstream_queue(struct upstream_pool *up, struct exchange *ex)
{
	struct upstream_group_state *g = up->cfg->state;
	struct timeval tv = { 0, QUEUE_RECHECK_MS * 1000 };

	if (atomic_fetch_add(&g->pending, 1) >= up->cfg->max_pending) {
		atomic_fetch_sub(&g->pending, 1);
		return -1;
	}
	TAILQ_INSERT_TAIL(&up->queue, ex, queue_entry);
	if (up->nqueued++ == 0)
		evtimer_add(up->queue_timer, &tv);
	return 0;
}

void
upstream_unqueue(struct upstream_pool *up, struct exchange *ex)
{
	TAILQ_REMOVE(&up->queue, ex, queue_entry);
	atomic_fetch_sub(&up->cfg->state->pending, 1);
	if (--up->nqueued == 0)
		evtimer_del(up->queue_timer);
}

/* An idle connection must stay silent: data, EOF, an error or the idle timeout close it. */
static void
upstream_idle_cb(struct conn *conn, int what, void *arg)
{
	(void)conn;
	(void)what;
	upstream_close(arg);
}

struct upconn *
upstream_take_idle(struct server_pool *sp)
{
	struct upconn *uc = TAILQ_FIRST(&sp->idle);

	if (uc == NULL)
		return NULL;
	TAILQ_REMOVE(&sp->idle, uc, idle_entry);
	sp->nidle--;
	sp->active++;
	metrics_upstream_conns(sp->up->wr->w, sp->srv, 1, -1);
	uc->idle = 0;
	conn_read_stop(&uc->conn);
	conn_set_timeouts(&uc->conn, 0, 0);
	return uc;
}

struct upconn *
upstream_connect(struct server_pool *sp, struct timers *timers, conn_cb cb, void *arg)
{
	const struct config_addr *addr = &sp->srv->addr;
	struct upconn *uc;
	int fd, one = 1;

	if ((uc = calloc(1, sizeof(*uc))) == NULL)
		return NULL;
	fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		free(uc);
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (conn_init(&uc->conn, timers, fd, cb, arg) < 0) {
		close(fd);
		free(uc);
		errno = ENOMEM;
		return NULL;
	}
	if (conn_connect(&uc->conn, (const struct sockaddr *)&addr->ss, addr->sslen) < 0 ||
	    (sp->up->cfg->tls != NULL &&
	    tls_connect(&uc->conn, sp->up->cfg->tls->ctx, addr->name ? addr->name : addr->host,
	    &sp->tls_session) < 0)) {
		int saved = errno;
		conn_close(&uc->conn);
		free(uc);
		errno = saved;
		return NULL;
	}
	uc->sp = sp;
	upstream_server_ref(sp);
	sp->active++;
	metrics_upstream_conns(sp->up->wr->w, sp->srv, 1, 0);
	return uc;
}

void
upstream_release(struct upconn *uc)
{
	struct server_pool *sp = uc->sp;
	struct worker_runtime *wr = sp->up->wr;

	/* Pool only into the current runtime: an old one is on its way out.  timeouts.keepalive:
	 * 0 disables keep-alive, upstream connections included (a 0 deadline would keep them
	 * for good). */
	if (sp->nidle >= sp->up->cfg->keepalive || sp->retired || wr->w->cur != wr ||
	    wr->rt->cfg->timeouts.keepalive == 0 ||
	    wr->w->draining ||
	    evbuffer_get_length(uc->conn.in) != 0 || conn_out_left(&uc->conn) != 0 ||
	    uc->conn.eof || uc->conn.error) {
		upstream_close(uc);
		return;
	}
	sp->active--;
	metrics_upstream_conns(wr->w, sp->srv, -1, 1);
	uc->idle = 1;
	uc->reused = 1;
	conn_set_cb(&uc->conn, upstream_idle_cb, uc);
	conn_notify_drained(&uc->conn, 0, 0);
	conn_set_timeouts(&uc->conn, wr->rt->cfg->timeouts.keepalive, 0);
	conn_read_start(&uc->conn);
	TAILQ_INSERT_HEAD(&sp->idle, uc, idle_entry);
	sp->nidle++;
}

void
upstream_close(struct upconn *uc)
{
	struct server_pool *sp = uc->sp;

	if (uc->idle) {
		TAILQ_REMOVE(&sp->idle, uc, idle_entry);
		sp->nidle--;
	} else {
		sp->active--;
	}
	metrics_upstream_conns(sp->up->wr->w, sp->srv, uc->idle ? 0 : -1, uc->idle ? -1 : 0);
	conn_close(&uc->conn);
	free(uc);
	upstream_server_unref(sp);
}
