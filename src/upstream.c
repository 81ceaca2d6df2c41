#include "config.h"
#include "upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "metrics.h"
#include "server.h"
#include "tls.h"

int
upstream_pools_init(struct worker_runtime *wr)
{
	const struct config *cfg = wr->rt->cfg;
	size_t i, j;

	wr->pools = calloc(cfg->nupstreams ? cfg->nupstreams : 1, sizeof(*wr->pools));
	if (wr->pools == NULL)
		return -1;
	for (i = 0; i < cfg->nupstreams; i++) {
		struct upstream_pool *up = &wr->pools[i];
		up->cfg = &cfg->upstreams[i];
		up->wr = wr;
		up->nservers = up->cfg->nservers;
		up->servers = calloc(up->nservers ? up->nservers : 1, sizeof(*up->servers));
		if (up->servers == NULL)
			return -1;
		for (j = 0; j < up->nservers; j++) {
			up->servers[j].srv = &up->cfg->servers[j];
			up->servers[j].up = up;
			TAILQ_INIT(&up->servers[j].idle);
		}
	}
	return 0;
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
			while ((uc = TAILQ_FIRST(&up->servers[j].idle)) != NULL)
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
		for (j = 0; wr->pools[i].servers != NULL && j < wr->pools[i].nservers; j++)
			tls_session_free(wr->pools[i].servers[j].tls_session);
		free(wr->pools[i].servers);
	}
	free(wr->pools);
	wr->pools = NULL;
}

/* nginx's smooth weighted round robin: spreads heavier servers evenly, no randomness. */
struct server_pool *
upstream_pick(struct upstream_pool *up)
{
	struct server_pool *best = NULL;
	int total = 0;
	size_t i;

	for (i = 0; i < up->nservers; i++) {
		struct server_pool *sp = &up->servers[i];
		sp->current_weight += (int)sp->srv->weight;
		total += (int)sp->srv->weight;
		if (best == NULL || sp->current_weight > best->current_weight)
			best = sp;
	}
	if (best != NULL)
		best->current_weight -= total;
	return best;
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
upstream_connect(struct server_pool *sp, struct event_base *base, conn_cb cb, void *arg)
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
	if (conn_init(&uc->conn, base, fd, cb, arg) < 0) {
		close(fd);
		free(uc);
		errno = ENOMEM;
		return NULL;
	}
	if (conn_connect(&uc->conn, (const struct sockaddr *)&addr->ss, addr->sslen) < 0 ||
	    (sp->up->cfg->tls != NULL &&
	    tls_connect(&uc->conn, sp->up->cfg->tls->ctx, addr->host, &sp->tls_session) < 0)) {
		int saved = errno;
		conn_close(&uc->conn);
		free(uc);
		errno = saved;
		return NULL;
	}
	uc->sp = sp;
	sp->active++;
	metrics_upstream_conns(sp->up->wr->w, sp->srv, 1, 0);
	return uc;
}

void
upstream_release(struct upconn *uc)
{
	struct server_pool *sp = uc->sp;
	struct worker_runtime *wr = sp->up->wr;

	/* Pool only into the current runtime: an old one is on its way out. */
	if (sp->nidle >= sp->up->cfg->keepalive || wr->w->cur != wr || wr->w->draining ||
	    evbuffer_get_length(uc->conn.in) != 0 || evbuffer_get_length(uc->conn.out) != 0 ||
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
}
