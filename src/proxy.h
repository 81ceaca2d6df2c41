/* A client connection and the life of each request on it:
 * accept -> read head -> route -> connect -> send -> read response -> respond -> close(reason). */
#ifndef JG_PROXY_H
#define JG_PROXY_H

#include <sys/socket.h>

struct worker;
struct tls_server;

/* Take ownership of an accepted socket; tls: run TLS over it (NULL: plain); http2: HTTP/2
 * too (chosen by ALPN, or by the client's preface on a plain socket).  -1: it could not be
 * set up and is closed already. */
int proxy_accept(struct worker *w, int fd, struct sockaddr *sa, int salen,
    struct tls_server *tls, int http2);
/* Drain: close idle keep-alive clients now, let busy ones finish and close. */
void proxy_drain_idle(struct worker *w);
/* A new configuration: HTTP/2 connections get GOAWAY (their streams in flight finish), so
 * that their clients' next requests come on new connections under it; HTTP/1.1 ones take
 * their next request under it anyway. */
void proxy_reloaded(struct worker *w);
/* Close every client connection at once (the grace period ran out). */
void proxy_close_all(struct worker *w);
/* The worker thread is ending: the route kinds free what they kept for its next requests. */
void proxy_worker_end(void);
/* The worker is ending: free the requests it kept for reuse. */
void proxy_worker_free(struct worker *w);
/* Frees the memory of closed clients; the worker's reaper event runs it. */
void proxy_reap_cb(int fd, short what, void *arg);
/* Goes on with the pipelines that gave other connections their turn (w->resume). */
void proxy_resume_cb(int fd, short what, void *arg);

#endif
