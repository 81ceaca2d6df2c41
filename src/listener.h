/* Listening sockets: bound once by the main thread, accepted on by every worker. */
#ifndef JG_LISTENER_H
#define JG_LISTENER_H

#include <stdatomic.h>
#include "config.h"

struct worker;

struct listen_sock {
	char *key;                      /* the address text, to keep sockets across reloads */
	int fd;
	atomic_uint refs;               /* runtimes and worker listeners using it */
};

/* Bind and listen on addr; NULL with errno set on failure. */
struct listen_sock *listener_open(const struct config_addr *addr);
void listener_ref(struct listen_sock *ls);
/* Drops a reference; the last one closes the socket. */
void listener_unref(struct listen_sock *ls);

struct worker_listener;
struct tls_server;
/* Start accepting on ls in worker w; accepted sockets go to proxy_accept, with TLS over them
 * when tls is not NULL. */
struct worker_listener *listener_attach(struct worker *w, struct listen_sock *ls,
    struct tls_server *tls);
void listener_detach(struct worker_listener *wl);
void listener_enable(struct worker_listener *wl, int on);

#endif
