/* The connection layer over TLS, on a socketpair with a real OpenSSL peer: the orders of socket
 * events that once lost input or an answer, set up so they run the same way every time instead
 * of waiting for a load test to hit the race; the session ticket held back for the first
 * response; and records a full socket did not take. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "config.h"
#include "conn.h"
#include "tls.h"

static const char request[] = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
static const char response[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";

static char dir[] = "/tmp/check_conn.XXXXXX";
static char cert_path[64], key_path[64];

/* A self-signed P-256 certificate for this run, written where tls_server_new reads it. */
static void
make_certificate(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *name;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir);
	snprintf(key_path, sizeof(key_path), "%s/key.pem", dir);
	ck_assert_ptr_nonnull(key);
	ck_assert_ptr_nonnull(x);
	ck_assert_int_eq(X509_set_version(x, 2), 1);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	ck_assert_int_eq(X509_set_pubkey(x, key), 1);
	name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost",
	    -1, -1, 0);
	ck_assert_int_eq(X509_set_issuer_name(x, name), 1);
	ck_assert_int_gt(X509_sign(x, key, EVP_sha256()), 0);
	ck_assert_ptr_nonnull(f = fopen(cert_path, "w"));
	ck_assert_int_eq(PEM_write_X509(f, x), 1);
	fclose(f);
	ck_assert_ptr_nonnull(f = fopen(key_path, "w"));
	ck_assert_int_eq(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(key);
}

static void
remove_certificate(void)
{
	unlink(cert_path);
	unlink(key_path);
	rmdir(dir);
}

static void
tls_error(void *arg, enum tls_setting at, size_t index, const char *msg)
{
	(void)arg;
	(void)at;
	(void)index;
	ck_abort_msg("tls_server_new: %s", msg);
}

static int events_seen;

static void
on_conn(struct conn *c, int what, void *arg)
{
	(void)c;
	(void)arg;
	events_seen |= what;
}

/* Run the server's loop until nothing is ready (one pass of each event ready now). */
static void
run_loop(struct event_base *base)
{
	int i;

	for (i = 0; i < 8; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* A TLS server connection on one end of a socketpair, an OpenSSL client on the other. */
struct tls_pair {
	struct event_base *base;
	struct timers *timers;
	struct tls_server *ts;          /* the caller may free it early (NULL then) */
	SSL_CTX *cctx;
	SSL *client;
	struct conn srv;
	int sv[2];
};

static void
tls_pair_open(struct tls_pair *t)
{
	static struct config_tls_cert pair;
	struct config_listener_tls cfg = { .certs = &pair, .ncerts = 1,
		.protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3, .session_tickets = 1 };

	pair.cert = cert_path;
	pair.key = key_path;
	ck_assert_ptr_nonnull(t->base = event_base_new());
	ck_assert_ptr_nonnull(t->timers = timers_new(t->base));
	ck_assert_ptr_nonnull(t->cctx = SSL_CTX_new(TLS_client_method()));
	ck_assert_ptr_nonnull(t->ts = tls_server_new(&cfg, tls_error, NULL));
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, t->sv), 0);
	ck_assert_int_eq(conn_init(&t->srv, t->timers, t->sv[0], on_conn, NULL), 0);
	ck_assert_int_eq(tls_accept(&t->srv, t->ts), 0);
	conn_read_start(&t->srv);
	SSL_CTX_set_verify(t->cctx, SSL_VERIFY_NONE, NULL);
	ck_assert_ptr_nonnull(t->client = SSL_new(t->cctx));
	SSL_set_fd(t->client, t->sv[1]);
	SSL_set_tlsext_host_name(t->client, "localhost");
	SSL_set_connect_state(t->client);
}

/* The client's handshake, the server's loop run between its steps: 1 once done. */
static int
tls_pair_handshake(struct tls_pair *t)
{
	int i, rc = -1;

	for (i = 0; i < 10 && (rc = SSL_do_handshake(t->client)) != 1; i++)
		run_loop(t->base);
	return rc;
}

static void
tls_pair_close(struct tls_pair *t)
{
	conn_close(&t->srv);
	if (t->ts != NULL)
		tls_server_free(t->ts);
	SSL_free(t->client);
	close(t->sv[1]);
	SSL_CTX_free(t->cctx);
	timers_free(t->timers);
	event_base_free(t->base);
}

/*
 * The client's Finished and its first request arrive while the server waits for them, and
 * the server handles the socket's write edge before any read edge is reported.  The handshake
 * run from that edge reads both records (read-ahead); the socket is then empty, so epoll will
 * report no read edge for the request.  The connection must still deliver it.
 */
START_TEST(tls_request_read_during_handshake_on_write_edge)
{
	struct tls_pair t;
	struct conn *srv = &t.srv;
	event_callback_fn write_cb;
	SSL_SESSION *session;
	char got[sizeof(response) > sizeof(request) ? sizeof(response) : sizeof(request)];

	tls_pair_open(&t);
	/* A reload frees the configuration that accepted the connection before its ClientHello
	 * came: the handshake (and its SNI callback) must still have what it needs.  Under the
	 * sanitizers or valgrind a use after free fails here. */
	tls_server_free(t.ts);
	t.ts = NULL;

	/* ClientHello, the server's flight, then the client's Finished: the client is done
	 * and the server has not yet looked at the socket again. */
	ck_assert_int_eq(tls_pair_handshake(&t), 1);
	ck_assert_int_eq(srv->tls.handshaking, 1);
	ck_assert_int_eq(SSL_write(t.client, request, (int)strlen(request)), (int)strlen(request));

	/* The write edge first, as epoll reports it when only the ACK of the flight was seen. */
	write_cb = event_get_callback(srv->ev);
	write_cb(srv->fd, EV_WRITE, event_get_callback_arg(srv->ev));
	run_loop(t.base);

	ck_assert_int_eq(srv->tls.handshaking, 0);
	ck_assert_msg(events_seen & CONN_READ, "the request was never reported (events 0x%x)",
	    events_seen);
	ck_assert_uint_eq(evbuffer_get_length(srv->in), strlen(request));
	ck_assert_int_eq(evbuffer_remove(srv->in, got, strlen(request)), (int)strlen(request));
	ck_assert_mem_eq(got, request, strlen(request));

	/* The session ticket made at the end of the handshake is held back, not sent alone... */
	ck_assert_uint_gt(srv->tls_held_len, 0);
	ck_assert_int_eq(recv(t.sv[1], got, 1, MSG_PEEK), -1);
	/* ...and goes out with the response, in one write. */
	evbuffer_add(srv->out, response, strlen(response));
	conn_flush(srv);
	ck_assert_uint_eq(srv->tls_held_len, 0);
	ck_assert_uint_eq(evbuffer_get_length(srv->out), 0);
	ck_assert_int_eq(SSL_read(t.client, got, sizeof(got)), (int)strlen(response));
	ck_assert_mem_eq(got, response, strlen(response));
	session = SSL_get1_session(t.client);
	ck_assert_msg(session != NULL && SSL_SESSION_is_resumable(session),
	    "the client got no session ticket");
	SSL_SESSION_free(session);
	tls_pair_close(&t);
}
END_TEST


/* The socket the next empty look (recv with MSG_PEEK that finds nothing) makes the client's
 * plain request arrive on: the bytes come right after the sniff saw nothing, before the
 * server can do anything else, as they may on a busy machine. */
static int arrive_after_peek_fd = -1;

ssize_t
recv(int fd, void *buf, size_t len, int flags)
{
	ssize_t n = recvfrom(fd, buf, len, flags, NULL, NULL);
	int saved = errno;

	if (n < 0 && (flags & MSG_PEEK) && arrive_after_peek_fd >= 0) {
		ck_assert_int_eq(write(arrive_after_peek_fd, request, strlen(request)),
		    (ssize_t)strlen(request));
		arrive_after_peek_fd = -1;
	}
	errno = saved;
	return n;
}

/*
 * A client speaking plain HTTP to a TLS listener: the server looks for its first byte and
 * finds none, then the request arrives, then its read edge.  The handshake must not start
 * in between (OpenSSL would read the request itself, fail, and the client would get no
 * answer): the connection waits for the edge, sees the method's letter, and hands the
 * request over in clear text.
 */
START_TEST(tls_plain_request_arriving_after_an_empty_sniff)
{
	struct config_tls_cert pair = { cert_path, key_path };
	struct config_listener_tls cfg = { .certs = &pair, .ncerts = 1,
		.protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3 };
	struct event_base *base = event_base_new();
	struct timers *timers;
	struct tls_server *ts;
	struct conn srv;
	char got[sizeof(response) > sizeof(request) ? sizeof(response) : sizeof(request)];
	int sv[2];

	ck_assert_ptr_nonnull(base);
	ck_assert_ptr_nonnull(timers = timers_new(base));
	ck_assert_ptr_nonnull(ts = tls_server_new(&cfg, tls_error, NULL));
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ck_assert_int_eq(conn_init(&srv, timers, sv[0], on_conn, NULL), 0);
	ck_assert_int_eq(tls_accept(&srv, ts), 0);
	tls_server_free(ts);
	conn_read_start(&srv);
	events_seen = 0;
	arrive_after_peek_fd = sv[1];

	run_loop(base);

	ck_assert_msg(arrive_after_peek_fd < 0, "the server never looked at the socket");
	ck_assert_msg(events_seen == CONN_READ, "events 0x%x, error %d (%s), TLS error %lu",
	    events_seen, srv.error, strerror(srv.error), srv.tls_err);
	ck_assert_int_eq(srv.tls.plain, 1);
	ck_assert_ptr_null(srv.ssl);
	ck_assert_uint_eq(evbuffer_get_length(srv.in), strlen(request));
	ck_assert_int_eq(evbuffer_remove(srv.in, got, strlen(request)), (int)strlen(request));
	ck_assert_mem_eq(got, request, strlen(request));
	/* The answer goes out in clear text. */
	evbuffer_add(srv.out, response, strlen(response));
	conn_flush(&srv);
	ck_assert_int_eq(read(sv[1], got, sizeof(got)), (ssize_t)strlen(response));
	ck_assert_mem_eq(got, response, strlen(response));

	conn_close(&srv);
	close(sv[1]);
	timers_free(timers);
	event_base_free(base);
}
END_TEST

/* What the reset test's owner was told, in order. */
static int reset_what[8];
static int reset_nwhat;

/* An owner that waits for more than it got, as the proxy does for an answer. */
static void
reset_owner_cb(struct conn *c, int what, void *arg)
{
	(void)arg;
	if (reset_nwhat < 8)
		reset_what[reset_nwhat++] = what;
	if (what & (CONN_ERROR | CONN_EOF))
		event_base_loopbreak(event_get_base(c->ev));
	else if (what & CONN_READ)
		conn_read_again(c);
}

/* A peer that sends data and resets at once: epoll reports both in one EPOLLERR edge, which
 * libevent passes on without EV_CLOSED.  An owner that still waits after the data must still
 * see the reset at once (conn_read_again), not when its read timeout runs out. */
START_TEST(reset_with_data_is_seen)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t salen = sizeof(sa);
	struct linger lg = { 1, 0 };
	struct event_base *base = event_base_new();
	struct timers *timers;
	struct timeval limit = { 5, 0 };
	struct conn c;
	int lfd, cfd, sfd;

	ck_assert_ptr_nonnull(base);
	ck_assert_ptr_nonnull(timers = timers_new(base));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(lfd = socket(AF_INET, SOCK_STREAM, 0), 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &salen), 0);
	ck_assert_int_ge(cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), 0);
	ck_assert_int_eq(conn_init(&c, timers, cfd, reset_owner_cb, NULL), 0);
	ck_assert_int_eq(conn_connect(&c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_ge(sfd = accept(lfd, NULL, NULL), 0);
	event_base_loop(base, EVLOOP_NONBLOCK);         /* the connect completes */
	conn_read_start(&c);
	/* Data and reset before the loop looks: one edge for both. */
	ck_assert_int_eq(write(sfd, response, sizeof(response) - 1), sizeof(response) - 1);
	usleep(20000);
	ck_assert_int_eq(setsockopt(sfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	close(sfd);
	usleep(20000);
	reset_nwhat = 0;
	event_base_loopexit(base, &limit);
	event_base_dispatch(base);
	ck_assert_int_ge(reset_nwhat, 1);
	ck_assert_msg(reset_what[reset_nwhat - 1] & CONN_ERROR,
	    "the reset was not reported (what %#x after %d reports)", reset_what[reset_nwhat - 1],
	    reset_nwhat);
	ck_assert_int_eq(c.error, ECONNRESET);
	ck_assert_uint_eq(evbuffer_get_length(c.in), sizeof(response) - 1);
	conn_close(&c);
	close(lfd);
	timers_free(timers);
	event_base_free(base);
}
END_TEST

/*
 * The records of one drain go out in one system call; what a full socket does not take is
 * held.  The plain output may then be all taken while records still wait: the connection
 * must count them as output left (a caller closing on "nothing left" would cut the answer),
 * send them on the socket's next edges, and free what held them once they went.
 */
START_TEST(tls_records_a_full_socket_left)
{
	struct tls_pair t;
	struct conn *srv = &t.srv;
	static char sent[40000], got[sizeof(sent)];
	size_t have = 0, total;
	int i, n, small = 4096;

	for (i = 0; i < (int)sizeof(sent); i++)
		sent[i] = (char)('a' + i % 26);
	tls_pair_open(&t);
	ck_assert_int_eq(tls_pair_handshake(&t), 1);
	ck_assert_int_eq(SSL_write(t.client, request, (int)strlen(request)), (int)strlen(request));
	run_loop(t.base);
	ck_assert_int_eq(srv->tls.handshaking, 0);

	/* A socket that takes a few KB: the answer's records fill it. */
	ck_assert_int_eq(setsockopt(t.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	evbuffer_add(srv->out, sent, sizeof(sent));
	conn_flush(srv);
	ck_assert_uint_eq(evbuffer_get_length(srv->out), 0);
	ck_assert_uint_gt(srv->tls_held_len, 0);
	ck_assert_uint_eq(conn_out_left(srv), srv->tls_held_len);

	/* The client reads; each edge sends more of what is held, in order. */
	for (i = 0; i < 1000 && have < sizeof(sent); i++) {
		n = SSL_read(t.client, got + have, (int)(sizeof(got) - have));
		if (n > 0)
			have += (size_t)n;
		else
			ck_assert_int_eq(SSL_get_error(t.client, n), SSL_ERROR_WANT_READ);
		run_loop(t.base);
	}
	ck_assert_uint_eq(have, sizeof(sent));
	ck_assert_mem_eq(got, sent, sizeof(sent));
	ck_assert_uint_eq(conn_out_left(srv), 0);
	ck_assert_ptr_null(srv->tls_held);

	/* Ten times as much to a client that does not read: what the socket does not take
	 * stays plain in the buffer, and at most one batch (64 KB) of records is held. */
	for (i = 0; i < 10; i++)
		evbuffer_add(srv->out, sent, sizeof(sent));
	conn_flush(srv);
	run_loop(t.base);
	ck_assert_uint_gt(evbuffer_get_length(srv->out), 0);
	ck_assert_uint_le(srv->tls_held_len, 64 * 1024);
	for (i = 0, total = 0; i < 100000 && total < 10 * sizeof(sent); i++) {
		n = SSL_read(t.client, got, (int)sizeof(got));
		if (n > 0) {
			ck_assert_mem_eq(got, sent + total % sizeof(sent),
			    (size_t)n < sizeof(sent) - total % sizeof(sent) ? (size_t)n :
			    sizeof(sent) - total % sizeof(sent));
			total += (size_t)n;
		} else {
			ck_assert_int_eq(SSL_get_error(t.client, n), SSL_ERROR_WANT_READ);
		}
		ck_assert_uint_le(srv->tls_held_len, 64 * 1024);
		run_loop(t.base);
	}
	ck_assert_uint_eq(total, 10 * sizeof(sent));
	ck_assert_uint_eq(conn_out_left(srv), 0);
	tls_pair_close(&t);
}
END_TEST

static Suite *
conn_suite(void)
{
	Suite *s = suite_create("conn");
	TCase *tc = tcase_create("tls");

	tcase_add_unchecked_fixture(tc, make_certificate, remove_certificate);
	tcase_add_test(tc, tls_request_read_during_handshake_on_write_edge);
	tcase_add_test(tc, tls_plain_request_arriving_after_an_empty_sniff);
	tcase_add_test(tc, reset_with_data_is_seen);
	tcase_add_test(tc, tls_records_a_full_socket_left);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(conn_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
