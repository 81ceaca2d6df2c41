#include "config.h"
#include "upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "server.h"

/* Reads per callback; larger than libevent's 16 KB default so big bodies take fewer calls. */
#define UPSTREAM_MAX_SINGLE_READ (256 * 1024)

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
	size_t i;

	if (wr->pools == NULL)
		return;
	upstream_pools_close_idle(wr);
	for (i = 0; i < wr->rt->cfg->nupstreams; i++)
		free(wr->pools[i].servers);
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

static void
upstream_idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	upstream_close(arg);
}

/* An idle connection must stay silent: data or EOF means it cannot be reused. */
static void
upstream_idle_read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
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
	uc->idle = 0;
	bufferevent_set_timeouts(uc->bev, NULL, NULL);
	return uc;
}

struct upconn *
upstream_connect(struct server_pool *sp, struct event_base *base)
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
	uc->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (uc->bev == NULL) {
		close(fd);
		free(uc);
		return NULL;
	}
	bufferevent_set_max_single_read(uc->bev, UPSTREAM_MAX_SINGLE_READ);
	if (bufferevent_socket_connect(uc->bev, (struct sockaddr *)&addr->ss, (int)addr->sslen) < 0) {
		int saved = errno;
		bufferevent_free(uc->bev);
		free(uc);
		errno = saved ? saved : ECONNREFUSED;
		return NULL;
	}
	uc->sp = sp;
	sp->active++;
	return uc;
}

void
upstream_release(struct upconn *uc)
{
	struct server_pool *sp = uc->sp;
	struct worker_runtime *wr = sp->up->wr;
	struct timeval idle_tv;
	uint64_t ms = wr->rt->cfg->timeouts.keepalive;

	/* Pool only into the current runtime: an old one is on its way out. */
	if (sp->nidle >= sp->up->cfg->keepalive || wr->w->cur != wr || wr->w->draining ||
	    evbuffer_get_length(bufferevent_get_input(uc->bev)) != 0) {
		upstream_close(uc);
		return;
	}
	sp->active--;
	uc->idle = 1;
	uc->reused = 1;
	idle_tv.tv_sec = (time_t)(ms / 1000);
	idle_tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	bufferevent_setcb(uc->bev, upstream_idle_read_cb, NULL, upstream_idle_event_cb, uc);
	bufferevent_setwatermark(uc->bev, EV_WRITE, 0, 0);
	bufferevent_set_timeouts(uc->bev, &idle_tv, NULL);
	bufferevent_enable(uc->bev, EV_READ);
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
	bufferevent_free(uc->bev);
	free(uc);
}
