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

#include <event2/listener.h>

#include "log.h"
#include "proxy.h"
#include "server.h"

struct worker_listener {
	struct evconnlistener *evl;
	struct listen_sock *ls;
	struct worker *w;
	struct tls_server *tls;         /* the runtime's configuration owns it */
};

struct listen_sock *
listener_open(const struct config_addr *addr)
{
	struct listen_sock *ls;
	int fd, one = 1, saved;

	fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* "[::]:port" listens on IPv6 only, so "0.0.0.0:port" can be listed beside it. */
	if (addr->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&addr->ss, addr->sslen) < 0 ||
	    listen(fd, 4096) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return NULL;
	}
	if ((ls = calloc(1, sizeof(*ls))) == NULL || (ls->key = strdup(addr->text)) == NULL) {
		free(ls);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	ls->fd = fd;
	atomic_init(&ls->refs, 1);
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
	close(ls->fd);
	free(ls->key);
	free(ls);
}

static void
listener_accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct worker_listener *wl = arg;
	int one = 1;

	(void)evl;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	proxy_accept(wl->w, fd, sa, salen, wl->tls);
}

static void
listener_error_cb(struct evconnlistener *evl, void *arg)
{
	struct worker_listener *wl = arg;
	int err = EVUTIL_SOCKET_ERROR();

	(void)evl;
	/* EMFILE and friends: stop accepting briefly rather than spin; the next close resumes. */
	errno = err;
	log_warn("accept on %s", wl->ls->key);
	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
		worker_set_accepting(wl->w, 0);
}

struct worker_listener *
listener_attach(struct worker *w, struct listen_sock *ls, struct tls_server *tls)
{
	struct worker_listener *wl;

	if ((wl = calloc(1, sizeof(*wl))) == NULL)
		return NULL;
	/* Backlog 0: the socket already listens; -1 would call listen() again with 128. */
	wl->evl = evconnlistener_new(w->base, listener_accept_cb, wl,
	    LEV_OPT_DISABLED, 0, ls->fd);
	if (wl->evl == NULL) {
		free(wl);
		return NULL;
	}
	evconnlistener_set_error_cb(wl->evl, listener_error_cb);
	wl->ls = ls;
	wl->w = w;
	wl->tls = tls;
	listener_ref(ls);
	return wl;
}

void
listener_detach(struct worker_listener *wl)
{
	if (wl == NULL)
		return;
	evconnlistener_free(wl->evl);
	listener_unref(wl->ls);
	free(wl);
}

void
listener_enable(struct worker_listener *wl, int on)
{
	if (on)
		evconnlistener_enable(wl->evl);
	else
		evconnlistener_disable(wl->evl);
}
