/* TLS with OpenSSL: a listener's contexts (one per certificate, chosen by SNI) and an
 * upstream's client context.  Both are built when the configuration loads and shared by every
 * worker; the connections themselves run in conn.c. */
#ifndef JG_TLS_H
#define JG_TLS_H

#include <stddef.h>

#include "config.h"

struct conn;

/* Which setting a load error is about, for its position in the configuration. */
enum tls_setting {
	TLS_AT_CERT,                    /* certificates[index].cert, or the upstream's cert */
	TLS_AT_KEY,                     /* certificates[index].key, or the upstream's key */
	TLS_AT_CLIENT_CA,
	TLS_AT_CA,
	TLS_AT_CIPHERS,
	TLS_AT_NONE
};

typedef void (*tls_error_fn)(void *arg, enum tls_setting at, size_t index, const char *msg);

/* Build a listener's contexts; NULL after reporting every problem through fn. */
struct tls_server *tls_server_new(const struct config_listener_tls *cfg, tls_error_fn fn,
    void *arg);
void tls_server_free(struct tls_server *ts);
/* Server-side TLS on an accepted connection; -1 on allocation failure. */
int tls_accept(struct conn *c, struct tls_server *ts);

struct tls_client *tls_client_new(const struct config_upstream_tls *cfg, tls_error_fn fn,
    void *arg);
void tls_client_free(struct tls_client *tc);
/*
 * Client-side TLS on a connection being opened to host (numeric; the configured server_name
 * wins).  *session is the server's cached session: offered for resumption, and replaced by
 * the new one the server sends (it must outlive the connection).  -1 on failure.
 */
int tls_connect(struct conn *c, struct tls_client *tc, const char *host, void **session);
void tls_session_free(void *session);

/* Why the handshake of c failed, as a line for a log and an error response. */
void tls_conn_error(const struct conn *c, char *buf, size_t cap);
/* 1 when the client chose h2 by ALPN (the handshake is over). */
int tls_alpn_is_h2(const struct conn *c);

/*
 * Request variables of a TLS client connection.  $ssl_client_s_dn: the client certificate's
 * subject as RFC 2253 text, "" when none.  $ssl_client_verify: "SUCCESS", "NONE" (no
 * certificate, or not TLS) or "FAILED:reason".  Both write a NUL-terminated string into buf
 * (truncated to cap) and return its length.
 */
size_t tls_client_s_dn(const struct conn *c, char *buf, size_t cap);
size_t tls_client_verify(const struct conn *c, char *buf, size_t cap);

#endif
