/* The HTTP/2 session of a client connection (RFC 9113), on nghttp2: each stream a request of
 * the request core, reached through its own struct downstream. */
#ifndef JG_H2_H
#define JG_H2_H

#include <stddef.h>

#include "close_reason.h"

struct client;
struct evbuffer;
struct h2_session;

/* What the first bytes of a plain connection say: 1 the HTTP/2 preface, 0 not it, -1 too
 * few bytes to tell. */
int h2_preface(struct evbuffer *in);
/* HTTP/2 takes over c's connection (the preface read, or h2 chosen by ALPN).  0, or -1
 * without memory (c is left to its caller). */
int h2_start(struct client *c);
/* An event (CONN_*) of the connection: CLIENT_CLOSE_NONE, or why it is to close now. */
enum client_close h2_conn_event(struct h2_session *s, int what);
/* Stopping, or a new configuration (why): GOAWAY with the last stream taken; the streams in
 * flight finish, then the connection closes. */
void h2_drain(struct h2_session *s, enum client_close why);
/* The connection closes: every stream's request is cut short and freed, then the session. */
void h2_free(struct h2_session *s);
/* The worker thread ends: the streams it kept for reuse go. */
void h2_worker_end(void);
/* Streams open. */
size_t h2_streams(const struct h2_session *s);

#endif
