/*
 * libFuzzer target for the proxy's own request reading: a worker of the daemon, set up in this
 * process and run on this thread's loop, reads the input as a client's bytes from a
 * socketpair: leading empty lines, limits.max_header, pipelined requests, Content-Length and
 * chunked bodies (de-chunked for request ops, streamed otherwise), the window of match.json,
 * a path template's captures (percent-decoded into ops, header ops and the access log).
 * The listener takes HTTP/2 too: an input that opens with the connection preface is an h2c
 * client, its frames going through nghttp2 to the same request core.
 * The upstream is in this process too, served on the same loop: it reads each request the
 * proxy sends with the project's own parser and answers it.
 *
 * Input: one control byte, then the client's bytes.
 *   bits 0-3: the bytes are written in (bits + 1) pieces of equal size, the loop run in
 *             between, so that heads, chunk lines and bodies arrive split;
 *   bit 4:    the client half-closes after its last piece (else it waits, keep-alive).
 * Checked on every input:
 *   - every request the upstream receives parses, head and chunked framing (the proxy never
 *     forwards a request it could not frame);
 *   - what the client receives starts with a complete response head (HTTP/1.1), or with the
 *     server's SETTINGS frame (HTTP/2).
 * FUZZ_PROXY_SHOW=1 in the environment prints what the client received, to see what an input
 * does.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "config.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "server.h"
#include "upstream_set.h"
#include "upstream_state.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config_text[] =
    "workers: 1\n"
    "log: { level: error, access: /dev/null, format: json, path_fields: [ id, rest ],\n"
    "       json_fields: [ user ] }\n"
    "limits: { max_header: 1k, max_body: 4k, route_scan: 1k }\n"
    "listeners:\n"
    "  - listen: 127.0.0.1:%d\n"
    "upstreams:\n"
    "  app: { servers: [ 127.0.0.1:%d ], keepalive: 2 }\n"
    "routes:\n"
    "  - name: ops\n"
    "    match: { path_prefix: /ops }\n"
    "    upstream: app\n"
    "    on_error: fail\n"
    "    request: [ set: { u: $json.user, h: $header.x } ]\n"
    "  - name: scan\n"
    "    match: { path_prefix: /scan, json: { field: user, equals: a } }\n"
    "    upstream: app\n"
    "    request: [ wrap: r ]\n"
    "  - name: response\n"
    "    match: { path_prefix: /r }\n"
    "    upstream: app\n"
    "    response: [ unwrap: ok ]\n"
    "  - name: template\n"
    "    match: { path: \"/u/{id}/f/{rest...}\" }\n"
    "    upstream: app\n"
    "    on_error: fail\n"
    "    request: [ set: { id: $path.id, rest: $path.rest } ]\n"
    "    response: [ set: { for: { user: $path.id } } ]\n"
    "    request_headers: { set: { X-Uid: $path.id }, add: { X-Rest: $path.rest } }\n"
    "    response_headers: { set: { X-Rest: $path.rest } }\n"
    "  - name: stream\n"
    "    match: { path_prefix: / }\n"
    "    upstream: app\n";

static const char answer[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
    "{\"ok\":{\"n\":1}}\n";

static struct worker worker;
static int ready;

/* --- the upstream -------------------------------------------------------------------- */

/* One connection from the proxy: requests are read as they come, each answered when whole. */
struct fuzz_upstream_conn {
	struct bufferevent *bev;
	int in_body;                    /* the head of the current request was read */
	int chunked;
	uint64_t left;                  /* Content-Length bytes still to come */
	struct http_chunked ch;
};

static void
fuzz_upstream_free(struct fuzz_upstream_conn *u)
{
	bufferevent_free(u->bev);
	free(u);
}

/* Take the next whole request of the input and answer it: 0, -1 when the rest cannot be read
 * yet, -2 when the head has more headers than this parser takes (the proxy adds a few to
 * what it was sent): the connection is then closed. */
static int
fuzz_upstream_request(struct fuzz_upstream_conn *u, struct evbuffer *in)
{
	static struct http_request req;
	size_t len = evbuffer_get_length(in), consumed, off, dlen;
	struct evbuffer_iovec v;
	ssize_t r;
	int cr;

	if (!u->in_body) {
		if (len == 0)
			return -1;
		r = http_parse_request((const char *)evbuffer_pullup(in, (ev_ssize_t)len), len, &req);
		if (r == HTTP_INCOMPLETE)
			return -1;
		if (r == HTTP_ERR_TOO_MANY_HEADERS)
			return -2;
		/* The proxy sends only heads it could write out itself. */
		FUZZ_CHECK(r > 0);
		evbuffer_drain(in, (size_t)r);
		u->in_body = 1;
		u->chunked = req.framing.chunked;
		u->left = req.framing.content_length > 0 ? (uint64_t)req.framing.content_length : 0;
		http_chunked_init(&u->ch);
	}
	while (u->chunked) {
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || v.iov_len == 0)
			return -1;
		cr = http_chunked_feed(&u->ch, v.iov_base, v.iov_len, &consumed, &off, &dlen);
		FUZZ_CHECK(cr != HTTP_CHUNKED_ERROR);
		evbuffer_drain(in, consumed);
		if (cr == HTTP_CHUNKED_DONE)
			u->chunked = 0;
	}
	len = evbuffer_get_length(in);
	if (u->left > len) {
		u->left -= len;
		evbuffer_drain(in, len);
		return -1;
	}
	evbuffer_drain(in, (size_t)u->left);
	u->left = 0;
	u->in_body = 0;
	bufferevent_write(u->bev, answer, sizeof(answer) - 1);
	return 0;
}

static void
fuzz_upstream_read_cb(struct bufferevent *bev, void *arg)
{
	int r;

	while ((r = fuzz_upstream_request(arg, bufferevent_get_input(bev))) == 0)
		;
	if (r == -2)
		fuzz_upstream_free(arg);
}

static void
fuzz_upstream_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		fuzz_upstream_free(arg);
}

static void
fuzz_upstream_accept_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fuzz_upstream_conn *u;
	int cfd;

	(void)what;
	(void)arg;
	while ((cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		FUZZ_CHECK((u = calloc(1, sizeof(*u))) != NULL);
		u->bev = bufferevent_socket_new(worker.base, cfd, BEV_OPT_CLOSE_ON_FREE);
		FUZZ_CHECK(u->bev != NULL);
		bufferevent_setcb(u->bev, fuzz_upstream_read_cb, NULL, fuzz_upstream_event_cb, u);
		bufferevent_enable(u->bev, EV_READ | EV_WRITE);
	}
}

/* A socket bound to a port of 127.0.0.1 the kernel chose. */
static int
fuzz_bind_any(int *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t slen = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	FUZZ_CHECK(fd >= 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FUZZ_CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	FUZZ_CHECK(getsockname(fd, (struct sockaddr *)&sin, &slen) == 0);
	*port = ntohs(sin.sin_port);
	return fd;
}

/* --- the daemon's side ----------------------------------------------------------------- */

/* The configuration, its runtime and one worker, as main() and server_start() make them. */
static void
fuzz_setup(void)
{
	char dir[] = "/tmp/fuzz-proxy-XXXXXX", path[64], *errors = NULL;
	struct runtime *rt;
	struct config *cfg;
	struct event *ev;
	int up_fd, up_port, gw_fd, gw_port;
	FILE *fp;

	log_init(LOG_LEVEL_ERROR);
	up_fd = fuzz_bind_any(&up_port);
	FUZZ_CHECK(listen(up_fd, 64) == 0);
	gw_fd = fuzz_bind_any(&gw_port);   /* the listener's port: never connected to */
	close(gw_fd);
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/jsongate.yaml", dir);
	FUZZ_CHECK((fp = fopen(path, "w")) != NULL);
	fprintf(fp, config_text, gw_port, up_port);
	fclose(fp);
	cfg = config_load(path, &errors);
	if (cfg == NULL)
		fprintf(stderr, "%s", errors);
	FUZZ_CHECK(cfg != NULL);
	unlink(path);
	rmdir(dir);
	FUZZ_CHECK((rt = runtime_new(cfg, NULL, 1, &errors)) != NULL);
	FUZZ_CHECK(metrics_init(1) == 0 && metrics_bind(cfg) == 0);
	FUZZ_CHECK(upstream_state_bind(cfg) == 0 && upstream_sets_init(cfg) == 0);
	FUZZ_CHECK(worker_init(&worker, 0, rt) == 0);
	runtime_release(rt);            /* the worker holds it */
	ev = event_new(worker.base, up_fd, EV_READ | EV_PERSIST, fuzz_upstream_accept_cb, NULL);
	FUZZ_CHECK(ev != NULL && event_add(ev, NULL) == 0);
	ready = 1;
}

/* Run the loop until it stays idle: no new bytes for the client a few passes running. */
static void
fuzz_run(int fd, struct evbuffer *got, int *eof)
{
	char buf[16384];
	ssize_t n = -1;
	int idle = 0;

	while (idle < 4) {
		event_base_loop(worker.base, EVLOOP_NONBLOCK);
		idle++;
		while (!*eof && (n = read(fd, buf, sizeof(buf))) != 0) {
			if (n < 0) {
				*eof = errno != EAGAIN;
				break;
			}
			evbuffer_add(got, buf, (size_t)n);
			idle = 0;
		}
		if (n == 0)
			*eof = 1;
	}
}

/* What the client got starts with a complete response head (interim ones included). */
static void
fuzz_check_answer(struct evbuffer *got, int h2)
{
	static struct http_response resp;
	size_t len = evbuffer_get_length(got);
	ssize_t r;

	if (h2) {
		/* The server's SETTINGS go first, whatever the client sends after its preface. */
		const unsigned char *p = evbuffer_pullup(got, len < 9 ? (ev_ssize_t)len : 9);

		FUZZ_CHECK(len >= 9 && p[3] == 0x04 && p[5] == 0 && p[6] == 0 && p[7] == 0 &&
		    p[8] == 0);
		return;
	}
	if (len == 0)
		return;
	r = http_parse_response((const char *)evbuffer_pullup(got, (ev_ssize_t)len), len, &resp);
	FUZZ_CHECK(r > 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in peer = { .sin_family = AF_INET };
	struct evbuffer *got;
	size_t pieces, piece, at, n;
	int sv[2], eof = 0, half_close;

	if (!ready)
		fuzz_setup();
	if (size < 1)
		return 0;
	pieces = (size_t)(data[0] & 15) + 1;
	half_close = data[0] & 16;
	data++;
	size--;
	FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
	peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FUZZ_CHECK(worker_slot_take(&worker));
	FUZZ_CHECK(proxy_accept(&worker, sv[0], (struct sockaddr *)&peer, sizeof(peer), NULL,
	    1) == 0);
	FUZZ_CHECK((got = evbuffer_new()) != NULL);
	piece = (size + pieces - 1) / pieces;
	for (at = 0; at < size; at += n) {
		n = size - at < piece ? size - at : piece;
		/* A closed connection takes no more: the rest is lost, as for a real client. */
		if (eof || write(sv[1], data + at, n) != (ssize_t)n)
			break;
		fuzz_run(sv[1], got, &eof);
	}
	if (half_close && !eof) {
		shutdown(sv[1], SHUT_WR);
		fuzz_run(sv[1], got, &eof);
	}
	close(sv[1]);
	fuzz_run(-1, got, &(int){ 1 });
	if (getenv("FUZZ_PROXY_SHOW") != NULL)
		fprintf(stderr, "--- the client got:\n%.*s\n", (int)evbuffer_get_length(got),
		    (const char *)evbuffer_pullup(got, -1));
	fuzz_check_answer(got, size >= 24 &&
	    memcmp(data, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) == 0);
	/* Whatever is still open goes, as at the end of a grace period. */
	proxy_close_all(&worker);
	proxy_reap_cb(-1, 0, &worker);
	evbuffer_free(got);
	return 0;
}
