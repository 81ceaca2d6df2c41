#include "config.h"
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "proxy.h"
#include "server.h"

/* Connections accepted per wake-up; the rest wait a turn of the loop (the event is
 * level-triggered), so that a flood of new clients does not starve the open ones. */
#define LISTENER_BATCH 64

struct worker_listener {
	struct event *ev;
	struct listen_sock *ls;
	struct worker *w;
	struct tls_server *tls;         /* the runtime's configuration owns it */
	int http2;                      /* HTTP/2 (h2 by ALPN, or h2c by prior knowledge) too */
	int on;
	int shut;                       /* the socket no longer listens */
};

/* A bound socket for addr, or -1 with errno set. */
static int
listener_socket(const struct config_addr *addr, int reuseport)
{
	int fd, one = 1, saved;

	fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* "[::]:port" listens on IPv6 only, so "0.0.0.0:port" can be listed beside it. */
	if (addr->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if ((reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
	    bind(fd, (const struct sockaddr *)&addr->ss, addr->sslen) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static void
listener_free(struct listen_sock *ls)
{
	unsigned i;

	for (i = 0; i < ls->nfds; i++)
		if (ls->fds[i] >= 0)
			close(ls->fds[i]);
	free(ls->fds);
	free(ls->key);
	free(ls);
}

struct listen_sock *
listener_open(const struct config_addr *addr, unsigned nworkers)
{
	struct listen_sock *ls;
	unsigned i;
	int fd, saved;

	/* SO_REUSEPORT would join the sockets of another process of ours listening there and
	 * split its clients silently: a plain bind fails with EADDRINUSE instead. */
	if ((fd = listener_socket(addr, 0)) < 0)
		return NULL;
	close(fd);
	if ((ls = calloc(1, sizeof(*ls))) == NULL ||
	    (ls->fds = calloc(nworkers, sizeof(*ls->fds))) == NULL ||
	    (ls->key = strdup(addr->text)) == NULL) {
		if (ls != NULL)
			free(ls->fds);
		free(ls);
		errno = ENOMEM;
		return NULL;
	}
	ls->nfds = nworkers;
	for (i = 0; i < nworkers; i++)
		ls->fds[i] = -1;
	atomic_init(&ls->refs, 1);
	for (i = 0; i < nworkers; i++) {
		if ((ls->fds[i] = listener_socket(addr, 1)) < 0 || listen(ls->fds[i], 4096) < 0) {
			saved = errno;
			listener_free(ls);
			errno = saved;
			return NULL;
		}
	}
	return ls;
}

void
listener_ref(struct listen_sock *ls)
{
	atomic_fetch_add(&ls->refs, 1);
}

void
listener_unref(struct listen_sock *ls)
{
	if (ls == NULL || atomic_fetch_sub(&ls->refs, 1) != 1)
		return;
	listener_free(ls);
}

void
listener_shutdown(struct listen_sock *ls)
{
	unsigned i;

	for (i = 0; i < ls->nfds; i++)
		shutdown(ls->fds[i], SHUT_RDWR);
}

static void
listener_accept_error(struct worker_listener *wl, int err)
{
	switch (err) {
	case EAGAIN:
	case EINTR:
	case ECONNABORTED:
		return;
	case EINVAL:
		/* The socket was shut down (stop, or removed by a reload): nothing more comes. */
		listener_enable(wl, 0);
		wl->shut = 1;
		return;
	}
	/* EMFILE and friends: stop accepting briefly rather than spin; the next close resumes. */
	errno = err;
	log_warn("accept on %s", wl->ls->key);
	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
		worker_set_accepting(wl->w, 0);
}

static void
listener_accept_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker_listener *wl = arg;
	struct sockaddr_storage ss;
	socklen_t sslen;
	int cfd, one = 1, n;

	(void)what;
	for (n = 0; n < LISTENER_BATCH && wl->on; n++) {
		/* The slot first: max_connections holds exactly however many workers accept. */
		if (!worker_slot_take(wl->w))
			return;
		sslen = sizeof(ss);
		cfd = accept4(fd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			int err = errno;

			worker_slot_give(wl->w);
			listener_accept_error(wl, err);
			if (err != EINTR && err != ECONNABORTED)
				return;
			continue;
		}
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (proxy_accept(wl->w, cfd, (struct sockaddr *)&ss, (int)sslen, wl->tls,
		    wl->http2) < 0)
			worker_slot_give(wl->w);
	}
}

struct worker_listener *
listener_attach(struct worker *w, struct listen_sock *ls, struct tls_server *tls, int http2)
{
	struct worker_listener *wl;

	if (w->id >= ls->nfds || (wl = calloc(1, sizeof(*wl))) == NULL)
		return NULL;
	/* This worker's socket of the group. */
	wl->ev = event_new(w->base, ls->fds[w->id], EV_READ | EV_PERSIST, listener_accept_cb, wl);
	if (wl->ev == NULL) {
		free(wl);
		return NULL;
	}
	wl->ls = ls;
	wl->w = w;
	wl->tls = tls;
	wl->http2 = http2;
	listener_ref(ls);
	return wl;
}

void
listener_detach(struct worker_listener *wl)
{
	if (wl == NULL)
		return;
	event_free(wl->ev);
	listener_unref(wl->ls);
	free(wl);
}

void
listener_enable(struct worker_listener *wl, int on)
{
	if (wl == NULL || on == wl->on || (on && wl->shut))
		return;
	wl->on = on;
	if (on)
		event_add(wl->ev, NULL);
	else
		event_del(wl->ev);
}
