/*
 * TLS contexts.  A listener gets one SSL_CTX per certificate, all set up alike: the first
 * serves handshakes and the servername callback switches to the certificate whose names
 * match the SNI (exact names before wildcards).  Every context of every listener encrypts
 * session tickets with the same keys, rotated hourly, so a session resumes on any worker and
 * across reloads.  An upstream gets one client SSL_CTX; each server pool keeps the last
 * session its server sent, so pooled connections resume instead of a full handshake.
 */
#include "config.h"
#include "tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/core_names.h>
#endif

#include "conn.h"

/* Ticket keys are replaced this often; the previous one still decrypts for as long. */
#define TLS_TICKET_ROTATE       3600
#define TLS_SID_CONTEXT         "jsongate"

/* Shared by the configuration that built it and every connection accepted with it: a
 * handshake still running after a reload freed that configuration picks its certificate from
 * here (the SNI callback), so the last of them frees it. */
struct tls_server {
	SSL_CTX **ctxs;                 /* one per certificate, in configuration order */
	size_t n;
	atomic_int refs;
};

static int tls_server_index = -1;       /* a connection's tls_server, in its SSL */

struct tls_client {
	SSL_CTX *ctx;
	char *server_name;
	int verify;
};

static const unsigned char tls_alpn_http11[] = "\x08http/1.1";
static const unsigned char tls_alpn_h2[] = "\x02h2\x08http/1.1";

/* --- errors ---------------------------------------------------------------------------- */

/* The reason of OpenSSL's last error, then clear the queue. */
static const char *
tls_last_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return r != NULL ? r : "unknown error";
}

/* As tls_last_reason, saying plainly when a file held no PEM block at all. */
static const char *
tls_pem_reason(void)
{
	unsigned long e;

	while ((e = ERR_peek_error()) != 0) {
		if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
			ERR_clear_error();
			return "no PEM data found";
		}
		ERR_get_error();
	}
	return tls_last_reason();
}

static void
tls_report(tls_error_fn fn, void *arg, enum tls_setting at, size_t index, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void
tls_report(tls_error_fn fn, void *arg, enum tls_setting at, size_t index, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(arg, at, index, msg);
}

/* 0 when path can be opened for reading, else -1 after reporting why. */
static int
tls_check_file(const char *what, const char *path, tls_error_fn fn, void *arg,
    enum tls_setting at, size_t index)
{
	FILE *fp = fopen(path, "r");

	if (fp == NULL) {
		tls_report(fn, arg, at, index, "cannot read %s %s: %s", what, path, strerror(errno));
		return -1;
	}
	fclose(fp);
	return 0;
}

/* Never prompt for a passphrase on a terminal: an encrypted key is an error. */
static int
tls_no_passphrase_cb(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	return 0;
}

static void
tls_time_text(const ASN1_TIME *t, char *buf, size_t cap)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *p;
	long n;

	buf[0] = '\0';
	if (bio == NULL)
		return;
	if (ASN1_TIME_print(bio, t) == 1 && (n = BIO_get_mem_data(bio, &p)) > 0)
		snprintf(buf, cap, "%.*s", (int)n, p);
	BIO_free(bio);
}

/* Load a certificate chain and its key into ctx, checking they match and are valid now. */
static int
tls_load_pair(SSL_CTX *ctx, const char *cert, const char *key, tls_error_fn fn, void *arg,
    size_t index)
{
	const ASN1_TIME *t;
	char when[64];
	X509 *x;
	int rc = 0;

	if (tls_check_file("certificate", cert, fn, arg, TLS_AT_CERT, index) < 0)
		rc = -1;
	else if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		tls_report(fn, arg, TLS_AT_CERT, index, "cannot use certificate %s: %s", cert,
		    tls_pem_reason());
		rc = -1;
	} else if ((x = SSL_CTX_get0_certificate(ctx)) != NULL) {
		t = X509_get0_notAfter(x);
		if (X509_cmp_current_time(t) < 0) {
			tls_time_text(t, when, sizeof(when));
			tls_report(fn, arg, TLS_AT_CERT, index, "certificate %s expired on %s",
			    cert, when);
			rc = -1;
		}
		t = X509_get0_notBefore(x);
		if (X509_cmp_current_time(t) > 0) {
			tls_time_text(t, when, sizeof(when));
			tls_report(fn, arg, TLS_AT_CERT, index,
			    "certificate %s is not valid before %s", cert, when);
			rc = -1;
		}
	}
	if (tls_check_file("key", key, fn, arg, TLS_AT_KEY, index) < 0)
		return -1;
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		unsigned long e = ERR_peek_last_error();

		if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
		    ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH) {
			ERR_clear_error();
			tls_report(fn, arg, TLS_AT_KEY, index,
			    "key %s does not match certificate %s", key, cert);
		} else
			tls_report(fn, arg, TLS_AT_KEY, index, "cannot use key %s: %s", key,
			    tls_pem_reason());
		return -1;
	}
	if (rc == 0 && SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		tls_report(fn, arg, TLS_AT_KEY, index, "key %s does not match certificate %s",
		    key, cert);
		return -1;
	}
	return rc;
}

/* --- session tickets -------------------------------------------------------------------- */

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
struct tls_ticket_key {
	unsigned char name[16];
	unsigned char aes[32];
	unsigned char hmac[32];
	time_t born;                    /* 0: not made yet */
};

static pthread_mutex_t tls_ticket_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tls_ticket_key tls_ticket_keys[2];    /* current, previous */
/* Fetched once for the process: a lookup by name per handshake shows in profiles. */
static pthread_once_t tls_ticket_once = PTHREAD_ONCE_INIT;
static EVP_CIPHER *tls_ticket_cipher;

static void
tls_ticket_fetch(void)
{
	tls_ticket_cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
}

/* Under the lock: make the first key, or rotate an old one. */
static int
tls_ticket_rotate(time_t now)
{
	struct tls_ticket_key *k = &tls_ticket_keys[0];

	if (k->born != 0 && now - k->born < TLS_TICKET_ROTATE)
		return 0;
	tls_ticket_keys[1] = *k;
	if (RAND_bytes(k->name, sizeof(k->name)) != 1 || RAND_bytes(k->aes, sizeof(k->aes)) != 1 ||
	    RAND_bytes(k->hmac, sizeof(k->hmac)) != 1) {
		*k = tls_ticket_keys[1];
		return -1;
	}
	k->born = now;
	return 0;
}

static int
tls_ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
    EVP_MAC_CTX *hctx, int enc)
{
	struct tls_ticket_key k;
	OSSL_PARAM params[3];
	int i, rc = 1;

	pthread_once(&tls_ticket_once, tls_ticket_fetch);
	if (tls_ticket_cipher == NULL)
		return -1;
	pthread_mutex_lock(&tls_ticket_lock);
	if (tls_ticket_rotate(time(NULL)) < 0 && tls_ticket_keys[0].born == 0) {
		pthread_mutex_unlock(&tls_ticket_lock);
		return -1;
	}
	if (enc)
		i = 0;
	else {
		for (i = 0; i < 2; i++)
			if (tls_ticket_keys[i].born != 0 &&
			    memcmp(name, tls_ticket_keys[i].name, 16) == 0)
				break;
	}
	if (i < 2)
		k = tls_ticket_keys[i];
	pthread_mutex_unlock(&tls_ticket_lock);
	if (i == 2)
		return 0;               /* unknown or expired key: a full handshake */
	if (enc) {
		memcpy(name, k.name, 16);
		if (RAND_bytes(iv, 16) != 1 ||
		    EVP_EncryptInit_ex2(cctx, tls_ticket_cipher, k.aes, iv, NULL) != 1)
			rc = -1;
	} else {
		if (EVP_DecryptInit_ex2(cctx, tls_ticket_cipher, k.aes, iv, NULL) != 1)
			rc = -1;
		/* Accept, and send a fresh ticket: with the previous key, so the client moves
		 * to the current one; and always in TLS 1.3, whose clients use a ticket once
		 * (RFC 8446 C.4) and would otherwise make every other handshake a full one. */
		else if (i == 1 || SSL_version(ssl) >= TLS1_3_VERSION)
			rc = 2;
	}
	params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac, sizeof(k.hmac));
	params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
	params[2] = OSSL_PARAM_construct_end();
	if (rc > 0 && EVP_MAC_CTX_set_params(hctx, params) != 1)
		rc = -1;
	OPENSSL_cleanse(&k, sizeof(k));
	return rc;
}
#endif

/* --- listeners -------------------------------------------------------------------------- */

/* OpenSSL frees a connection's SSL: its reference to the tls_server goes with it. */
static void
tls_server_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
    void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	tls_server_free(ptr);
}

/* The certificate for the name the client asked for; exact names win over wildcards. */
static int
tls_servername_cb(SSL *ssl, int *alert, void *arg)
{
	struct tls_server *ts = SSL_get_ex_data(ssl, tls_server_index);
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	size_t i, pass;
	X509 *x;

	(void)alert;
	(void)arg;
	if (name == NULL || ts == NULL || ts->n < 2)
		return SSL_TLSEXT_ERR_OK;
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < ts->n; i++) {
			x = SSL_CTX_get0_certificate(ts->ctxs[i]);
			if (x == NULL || X509_check_host(x, name, 0,
			    pass == 0 ? X509_CHECK_FLAG_NO_WILDCARDS : 0, NULL) != 1)
				continue;
			if (i != 0 && SSL_set_SSL_CTX(ssl, ts->ctxs[i]) == NULL)
				return SSL_TLSEXT_ERR_ALERT_FATAL;
			return SSL_TLSEXT_ERR_OK;
		}
	}
	return SSL_TLSEXT_ERR_OK;       /* no match: the default certificate */
}

static int
tls_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
    const unsigned char *in, unsigned int inlen, void *arg)
{
	unsigned char *sel;
	int h2 = arg != NULL;

	(void)ssl;
	/* Ours first: h2 (where the listener offers it), then http/1.1. */
	if (SSL_select_next_proto(&sel, outlen, h2 ? tls_alpn_h2 : tls_alpn_http11,
	    h2 ? sizeof(tls_alpn_h2) - 1 : sizeof(tls_alpn_http11) - 1,
	    in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static void
tls_set_protocols(SSL_CTX *ctx, unsigned protocols)
{
	SSL_CTX_set_min_proto_version(ctx, (protocols & CONFIG_TLS_V1_2) ? TLS1_2_VERSION :
	    TLS1_3_VERSION);
	SSL_CTX_set_max_proto_version(ctx, (protocols & CONFIG_TLS_V1_3) ? TLS1_3_VERSION :
	    TLS1_2_VERSION);
}

/* What both sides share: record handling fit for evbuffers, no renegotiation. */
static void
tls_common(SSL_CTX *ctx)
{
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* Read whole socket buffers, not a record header then its body. */
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	    /* HTTP framing detects truncation; many peers close without close_notify */
	    | SSL_OP_IGNORE_UNEXPECTED_EOF
#endif
	    );
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase_cb);
}

static SSL_CTX *
tls_server_ctx(const struct config_listener_tls *cfg, size_t index, tls_error_fn fn, void *arg)
{
	STACK_OF(X509_NAME) *names;
	SSL_CTX *ctx;
	int rc = 0;

	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		tls_report(fn, arg, TLS_AT_NONE, index, "cannot create a TLS context: %s",
		    tls_last_reason());
		return NULL;
	}
	tls_common(ctx);
	/* By default the client's order, as nginx's: the client knows whether it has AES in
	 * hardware (else it asks for ChaCha20 first); ciphers bounds what it may choose. */
	if (cfg->prefer_server_ciphers)
		SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	tls_set_protocols(ctx, cfg->protocols);
	SSL_CTX_set_alpn_select_cb(ctx, tls_alpn_cb, cfg->http2 ? (void *)tls_alpn_h2 : NULL);
	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)TLS_SID_CONTEXT,
	    sizeof(TLS_SID_CONTEXT) - 1);
	/* Resumption by tickets only: no per-context cache to lock and fill. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (!cfg->session_tickets) {
		SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_num_tickets(ctx, 0);
	} else {
		SSL_CTX_set_num_tickets(ctx, 1);
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, tls_ticket_cb);
#endif
	}
	/* Reported once, for the first certificate: the setting is the same for all. */
	if (cfg->ciphers != NULL && SSL_CTX_set_cipher_list(ctx, cfg->ciphers) != 1) {
		ERR_clear_error();
		if (index == 0)
			tls_report(fn, arg, TLS_AT_CIPHERS, 0, "no usable cipher in \"%s\"",
			    cfg->ciphers);
		rc = -1;
	}
	if (cfg->client_ca != NULL) {
		if (index == 0 &&
		    tls_check_file("client CA file", cfg->client_ca, fn, arg, TLS_AT_CLIENT_CA,
		    0) < 0)
			rc = -1;
		else if (SSL_CTX_load_verify_locations(ctx, cfg->client_ca, NULL) != 1 ||
		    (names = SSL_load_client_CA_file(cfg->client_ca)) == NULL) {
			if (index == 0)
				tls_report(fn, arg, TLS_AT_CLIENT_CA, 0,
				    "cannot use client CA file %s: %s", cfg->client_ca,
				    tls_pem_reason());
			ERR_clear_error();
			rc = -1;
		} else
			SSL_CTX_set_client_CA_list(ctx, names);
	}
	if (cfg->verify_client == VERIFY_CLIENT_ON)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	else if (cfg->verify_client == VERIFY_CLIENT_OPTIONAL)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (tls_load_pair(ctx, cfg->certs[index].cert, cfg->certs[index].key, fn, arg,
	    index) < 0)
		rc = -1;
	if (rc < 0) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

struct tls_server *
tls_server_new(const struct config_listener_tls *cfg, tls_error_fn fn, void *arg)
{
	struct tls_server *ts;
	size_t i;
	int failed = 0;

	/* Made at the first load, in the main thread, before any worker runs. */
	if (tls_server_index < 0 && (tls_server_index = SSL_get_ex_new_index(0, NULL, NULL,
	    NULL, tls_server_ex_free)) < 0) {
		tls_report(fn, arg, TLS_AT_NONE, 0, "cannot register with OpenSSL: %s",
		    tls_last_reason());
		return NULL;
	}
	if ((ts = calloc(1, sizeof(*ts))) == NULL ||
	    (ts->ctxs = calloc(cfg->ncerts ? cfg->ncerts : 1, sizeof(*ts->ctxs))) == NULL) {
		free(ts);
		tls_report(fn, arg, TLS_AT_NONE, 0, "out of memory");
		return NULL;
	}
	ts->n = cfg->ncerts;
	atomic_init(&ts->refs, 1);
	for (i = 0; i < cfg->ncerts; i++)
		if ((ts->ctxs[i] = tls_server_ctx(cfg, i, fn, arg)) == NULL)
			failed = 1;
	if (failed || ts->n == 0) {
		tls_server_free(ts);
		return NULL;
	}
	SSL_CTX_set_tlsext_servername_callback(ts->ctxs[0], tls_servername_cb);
	return ts;
}

void
tls_server_free(struct tls_server *ts)
{
	size_t i;

	if (ts == NULL || atomic_fetch_sub(&ts->refs, 1) != 1)
		return;
	for (i = 0; i < ts->n; i++)
		SSL_CTX_free(ts->ctxs[i]);
	free(ts->ctxs);
	free(ts);
}

int
tls_accept(struct conn *c, struct tls_server *ts)
{
	SSL *ssl = SSL_new(ts->ctxs[0]);

	if (ssl == NULL) {
		ERR_clear_error();
		return -1;
	}
	atomic_fetch_add(&ts->refs, 1);
	if (SSL_set_ex_data(ssl, tls_server_index, ts) != 1) {
		tls_server_free(ts);
		SSL_free(ssl);
		ERR_clear_error();
		return -1;
	}
	SSL_set_accept_state(ssl);
	if (conn_start_tls(c, ssl) < 0) {
		SSL_free(ssl);
		return -1;
	}
	return 0;
}

/* --- upstreams -------------------------------------------------------------------------- */

static int tls_session_index = -1;

/* Keep the session the server just sent in the pool's slot (we keep the reference). */
static int
tls_new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	void **slot = SSL_get_ex_data(ssl, tls_session_index);

	if (slot == NULL)
		return 0;
	if (*slot != NULL)
		SSL_SESSION_free(*slot);
	*slot = sess;
	return 1;
}

struct tls_client *
tls_client_new(const struct config_upstream_tls *cfg, tls_error_fn fn, void *arg)
{
	struct tls_client *tc;
	int rc = 0;

	if (tls_session_index < 0 &&
	    (tls_session_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL)) < 0) {
		tls_report(fn, arg, TLS_AT_NONE, 0, "cannot set up TLS: %s", tls_last_reason());
		return NULL;
	}
	if ((tc = calloc(1, sizeof(*tc))) == NULL ||
	    (cfg->server_name != NULL && (tc->server_name = strdup(cfg->server_name)) == NULL) ||
	    (tc->ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		tls_report(fn, arg, TLS_AT_NONE, 0, "cannot create a TLS context");
		tls_client_free(tc);
		return NULL;
	}
	tc->verify = cfg->verify;
	tls_common(tc->ctx);
	tls_set_protocols(tc->ctx, CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3);
	SSL_CTX_set_session_cache_mode(tc->ctx, SSL_SESS_CACHE_CLIENT |
	    SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(tc->ctx, tls_new_session_cb);
	if (cfg->verify)
		SSL_CTX_set_verify(tc->ctx, SSL_VERIFY_PEER, NULL);
	if (cfg->ca != NULL) {
		if (tls_check_file("CA file", cfg->ca, fn, arg, TLS_AT_CA, 0) < 0)
			rc = -1;
		else if (SSL_CTX_load_verify_locations(tc->ctx, cfg->ca, NULL) != 1) {
			tls_report(fn, arg, TLS_AT_CA, 0, "cannot use CA file %s: %s", cfg->ca,
			    tls_pem_reason());
			rc = -1;
		}
	} else if (SSL_CTX_set_default_verify_paths(tc->ctx) != 1) {
		ERR_clear_error();
	}
	if (cfg->cert != NULL && tls_load_pair(tc->ctx, cfg->cert, cfg->key, fn, arg, 0) < 0)
		rc = -1;
	if (rc < 0) {
		tls_client_free(tc);
		return NULL;
	}
	return tc;
}

void
tls_client_free(struct tls_client *tc)
{
	if (tc == NULL)
		return;
	SSL_CTX_free(tc->ctx);
	free(tc->server_name);
	free(tc);
}

static int
tls_is_ip(const char *name)
{
	ASN1_OCTET_STRING *ip = a2i_IPADDRESS(name);

	if (ip == NULL) {
		ERR_clear_error();
		return 0;
	}
	ASN1_OCTET_STRING_free(ip);
	return 1;
}

int
tls_connect(struct conn *c, struct tls_client *tc, const char *host, void **session)
{
	const char *name = tc->server_name != NULL ? tc->server_name : host;
	SSL *ssl = SSL_new(tc->ctx);

	if (ssl == NULL)
		goto fail;
	SSL_set_connect_state(ssl);
	/* SNI carries host names only (RFC 6066); an address is verified as one. */
	if (!tls_is_ip(name) && SSL_set_tlsext_host_name(ssl, name) != 1)
		goto fail;
	if (tc->verify) {
		SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (SSL_set1_host(ssl, name) != 1)
			goto fail;
	}
	if (*session != NULL)
		SSL_set_session(ssl, *session);
	SSL_set_ex_data(ssl, tls_session_index, session);
	if (conn_start_tls(c, ssl) < 0)
		goto fail;
	return 0;
fail:
	SSL_free(ssl);
	ERR_clear_error();
	errno = ENOMEM;
	return -1;
}

void
tls_session_free(void *session)
{
	SSL_SESSION_free(session);
}

void
tls_conn_error(const struct conn *c, char *buf, size_t cap)
{
	long v;
	const char *r;

	if (c->tls_err != 0 && ERR_GET_REASON(c->tls_err) == SSL_R_CERTIFICATE_VERIFY_FAILED &&
	    c->ssl != NULL && (v = SSL_get_verify_result(c->ssl)) != X509_V_OK) {
		snprintf(buf, cap, "certificate verify failed: %s",
		    X509_verify_cert_error_string(v));
		return;
	}
	if (c->tls_err != 0 && (r = ERR_reason_error_string(c->tls_err)) != NULL)
		snprintf(buf, cap, "%s", r);
	else if (c->error == ECONNRESET || c->error == 0)
		snprintf(buf, cap, "connection closed during the handshake");
	else
		snprintf(buf, cap, "%s", strerror(c->error));
}

/* --- request variables ------------------------------------------------------------------- */

static size_t
tls_copy(char *buf, size_t cap, const char *s, size_t len)
{
	if (cap == 0)
		return 0;
	if (len >= cap)
		len = cap - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return len;
}

static X509 *
tls_peer_cert(const struct conn *c)
{
	if (c->ssl == NULL)
		return NULL;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	return SSL_get0_peer_certificate(c->ssl);
#else
	{
		X509 *x = SSL_get_peer_certificate(c->ssl);

		X509_free(x);   /* the session keeps its own reference */
		return x;
	}
#endif
}

size_t
tls_client_s_dn(const struct conn *c, char *buf, size_t cap)
{
	X509 *x = tls_peer_cert(c);
	BIO *bio;
	char *p;
	long n;
	size_t len = 0;

	if (cap != 0)
		buf[0] = '\0';
	if (x == NULL || (bio = BIO_new(BIO_s_mem())) == NULL)
		return 0;
	if (X509_NAME_print_ex(bio, X509_get_subject_name(x), 0, XN_FLAG_RFC2253) >= 0 &&
	    (n = BIO_get_mem_data(bio, &p)) > 0)
		len = tls_copy(buf, cap, p, (size_t)n);
	BIO_free(bio);
	return len;
}

size_t
tls_client_verify(const struct conn *c, char *buf, size_t cap)
{
	char text[160];
	long v;
	int n;

	if (tls_peer_cert(c) == NULL)
		return tls_copy(buf, cap, "NONE", 4);
	if ((v = SSL_get_verify_result(c->ssl)) == X509_V_OK)
		return tls_copy(buf, cap, "SUCCESS", 7);
	n = snprintf(text, sizeof(text), "FAILED:%s", X509_verify_cert_error_string(v));
	return tls_copy(buf, cap, text, n < 0 ? 0 : (size_t)n < sizeof(text) ? (size_t)n :
	    sizeof(text) - 1);
}

int
tls_alpn_is_h2(const struct conn *c)
{
	const unsigned char *p;
	unsigned len = 0;

	if (c->ssl == NULL)
		return 0;
	SSL_get0_alpn_selected(c->ssl, &p, &len);
	return len == 2 && memcmp(p, "h2", 2) == 0;
}
