/*
 * A tunnel: a request answered 101 (Switching Protocols) turns its client's connection and its
 * upstream connection into one byte stream each way, passed on untouched (WebSocket frames
 * are not parsed), until both sides have closed, either fails, or it stays idle for
 * timeouts.tunnel.  Each direction holds at most about FLOW_HIGH queued before its sender is
 * no longer read.  A half-close goes across as a shutdown of the other side's writing.
 *
 * The tunnel knows neither protocol nor socket: it reaches each of its two ends through a
 * struct tunnel_end_ops (a TCP or TLS connection here, tunnel_conn_ops; an HTTP/2 stream's
 * in h2.c, RFC 8441), and each end reports its events with tunnel_event.  The request holds it
 * (rq->tunnel) from the 101 to its end, and with it the configuration it began under.
 */
#ifndef JG_TUNNEL_H
#define JG_TUNNEL_H

#include <stddef.h>
#include <stdint.h>

#include "close_reason.h"

struct client;
struct conn;
struct evbuffer;
struct http_request;
struct http_response;
struct access_entry;
struct tunnel;

enum tunnel_side { TUNNEL_CLIENT, TUNNEL_UPSTREAM };

/* One end of a tunnel, as the tunnel drives it; arg is the end's own. */
struct tunnel_end_ops {
	/* What came from this end, for the tunnel to take (it moves all of it out). */
	struct evbuffer *(*input)(void *arg);
	/* Queue n bytes moved out of from towards this end (the owner sends them). */
	void (*write)(void *arg, struct evbuffer *from, size_t n);
	/* Bytes queued towards this end that it has not taken yet. */
	size_t (*unsent)(void *arg);
	/* Read from this end (on) or stop reading it (its data would have nowhere to go). */
	void (*reading)(void *arg, int on);
	/* Report TUNNEL_DRAINED (tunnel_event) once unsent is at most low. */
	void (*drained)(void *arg, size_t low);
	/* Nothing more goes to this end (what was queued went): end its direction, 0; -1 when it
	 * cannot end one direction alone (TLS here): the tunnel then ends. */
	int (*shutdown)(void *arg);
	/* 1 once this end closed its side (nothing more comes from it). */
	int (*ended)(void *arg);
	/* The tunnel is over: stop reading this end (its owner closes it). */
	void (*close)(void *arg, enum tunnel_close why);
};

/* What an end reports to tunnel_event: the socket layer's bits (conn.h). */
#define TUNNEL_READ 1           /* CONN_READ: input grew */
#define TUNNEL_EOF 2            /* CONN_EOF: its peer closed its side */
#define TUNNEL_ERROR 4          /* CONN_ERROR */
#define TUNNEL_TIMEOUT 8        /* CONN_TIMEOUT */
#define TUNNEL_DRAINED 16       /* CONN_DRAINED: unsent fell to the low mark asked for */

/* An end that is a struct conn of the worker (arg: the struct conn). */
extern const struct tunnel_end_ops tunnel_conn_ops;
struct evbuffer *tunnel_conn_input(void *arg);
void tunnel_conn_write(void *arg, struct evbuffer *from, size_t n);
size_t tunnel_conn_unsent(void *arg);
void tunnel_conn_reading(void *arg, int on);
void tunnel_conn_drained(void *arg, size_t low);
int tunnel_conn_shutdown(void *arg);
int tunnel_conn_ended(void *arg);
void tunnel_conn_close(void *arg, enum tunnel_close why);

/* The request asks for an upgrade its route may tunnel: HTTP/1.1 GET with Upgrade and
 * Connection: upgrade, no body, a route without body ops.  Its upstream head then carries
 * them (tunnel_upstream_headers) and a 101 answer turns it into a tunnel. */
int tunnel_wanted(const struct client *c, const struct http_request *req);
/* The Upgrade and Connection lines of an upgrade request's upstream head. */
int tunnel_upstream_headers(struct evbuffer *out, const struct http_request *req);

/* c's upstream answered 101 (resp, its head head_len bytes of the upstream input): the
 * client gets the answer and both connections become the tunnel.  0, or -1 when the answer
 * cannot be one (no Upgrade header, no memory): it is then invalid. */
int tunnel_start(struct client *c, struct http_response *resp, size_t head_len);
/* End side of t says what (TUNNEL_* bits) happened.  t may be over (freed) on return. */
void tunnel_event(struct tunnel *t, enum tunnel_side side, int what);
/* Attach the end of side (the session's, in its upgrade). */
void tunnel_attach(struct tunnel *t, enum tunnel_side side, const struct tunnel_end_ops *ops,
    void *arg);
/* The request of t ends (its end, or cut short: the daemon stopping): counted, logged when
 * it did not end by itself, and freed. */
void tunnel_free(struct client *c);
/* What the tunnel adds to the access log line of its request. */
void tunnel_log(struct client *c, struct access_entry *e);

#endif
