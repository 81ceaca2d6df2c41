/* Listening sockets: bound by the main thread, one SO_REUSEPORT socket per worker for each
 * address, so that the kernel spreads new connections over the workers evenly. */
#ifndef JG_LISTENER_H
#define JG_LISTENER_H

#include <stdatomic.h>
#include "config.h"

struct worker;

struct listen_sock {
	char *key;                      /* the address text, to keep sockets across reloads */
	int *fds;                       /* fds[i]: worker i's socket */
	unsigned nfds;
	atomic_uint refs;               /* runtimes and worker listeners using it */
};

/* Bind and listen on addr with one socket per worker; NULL with errno set on failure. */
struct listen_sock *listener_open(const struct config_addr *addr, unsigned nworkers);
void listener_ref(struct listen_sock *ls);
/* Drops a reference; the last one closes the sockets. */
void listener_unref(struct listen_sock *ls);
/* Stop listening now: new clients are refused, the queued ones reset.  The descriptors stay
 * open (a worker may still be watching one) until the last reference goes. */
void listener_shutdown(struct listen_sock *ls);

struct worker_listener;
struct tls_server;
/* Start accepting on worker w's socket of ls; accepted sockets go to proxy_accept, with TLS
 * over them when tls is not NULL. */
struct worker_listener *listener_attach(struct worker *w, struct listen_sock *ls,
    struct tls_server *tls, int http2);
void listener_detach(struct worker_listener *wl);
void listener_enable(struct worker_listener *wl, int on);

#endif
