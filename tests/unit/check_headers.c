/* Header rules: the exact bytes sent upstream and downstream, and request ids. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "body.h"
#include "header_ops.h"
#include "headers.h"
#include "http.h"
#include "route.h"

/* Rows of the tables leave the fields they do not use out. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

struct req_rule {
	const char *name;
	const char *in;                 /* request head as received */
	const char *client;
	int tls;
	const char *request_id;         /* NULL: none */
	const char *host_override;
	const char *target;             /* NULL: let headers_request_out pick */
	const char *want;               /* exact output */
};

#define XFP_HTTP "X-Forwarded-Proto: http\r\n"

static const struct req_rule req_rules[] = {
	{ "plain get", "GET /a?b=1 HTTP/1.1\r\nHost: api\r\nAccept: */*\r\n\r\n", "10.0.0.1", 0, "id1",
	    NULL, NULL,
	    "GET /a?b=1 HTTP/1.1\r\nHost: api\r\nAccept: */*\r\nX-Forwarded-For: 10.0.0.1\r\n"
	    XFP_HTTP "X-Request-Id: id1\r\n" },
	{ "hop-by-hop stripped", "POST /p HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Hop\r\n"
	    "Keep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X-Sum\r\nUpgrade: h2c\r\n"
	    "Proxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\nX-Hop: 1\r\n"
	    "x-hop: 2\r\nContent-Length: 3\r\nContent-Type: application/json\r\n\r\n",
	    "::1", 0, "r", NULL, NULL,
	    "POST /p HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
	    "X-Forwarded-For: ::1\r\n" XFP_HTTP "X-Request-Id: r\r\n" },
	{ "transfer-encoding stripped", "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
	    "X-A: 1\r\n\r\n", "1.2.3.4", 0, "r", NULL, NULL,
	    "POST /p HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-Forwarded-For: 1.2.3.4\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "xff appended", "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\n\r\n",
	    "3.3.3.3", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 3.3.3.3\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "several xff merged", "GET / HTTP/1.1\r\nx-forwarded-for: 1.1.1.1\r\nHost: h\r\n"
	    "X-Forwarded-For:\r\nX-FORWARDED-FOR: 2.2.2.2\r\n\r\n",
	    "3.3.3.3", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 3.3.3.3\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "xff without client", "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n",
	    NULL, 0, NULL, NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\n" XFP_HTTP },
	{ "xfp replaced, tls", "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: http\r\n"
	    "x-forwarded-proto: ftp\r\n\r\n", "c", 1, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: c\r\nX-Forwarded-Proto: https\r\n"
	    "X-Request-Id: r\r\n" },
	{ "request id replaced", "GET / HTTP/1.1\r\nHost: h\r\nX-Request-Id: client-id\r\n"
	    "X-Request-Id: second\r\n\r\n", "c", 0, "gen", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: c\r\n" XFP_HTTP "X-Request-Id: gen\r\n" },
	{ "request id kept by the caller", "GET / HTTP/1.1\r\nHost: h\r\nX-Request-Id: client-id\r\n\r\n",
	    "c", 0, "client-id", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: client-id\r\n" },
	{ "host override", "GET / HTTP/1.1\r\nX-A: 1\r\nHost: public.example\r\n\r\n", "c", 0, "r",
	    "orders.internal", NULL,
	    "GET / HTTP/1.1\r\nHost: orders.internal\r\nX-A: 1\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "host added for http/1.0", "GET / HTTP/1.0\r\nX-A: 1\r\n\r\n", "c", 0, "r",
	    "up:9001", NULL,
	    "GET / HTTP/1.1\r\nHost: up:9001\r\nX-A: 1\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "empty host for http/1.0", "GET / HTTP/1.0\r\n\r\n", "c", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: \r\nX-Forwarded-For: c\r\n" XFP_HTTP "X-Request-Id: r\r\n" },
	{ "strip_prefix target", "GET /api/orders/7?x HTTP/1.1\r\nHost: h\r\n\r\n", "c", 0, "r",
	    NULL, "/orders/7?x",
	    "GET /orders/7?x HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "absolute-form sent as origin-form", "GET http://api.example:81/v?q=1 HTTP/1.1\r\n"
	    "Host: wrong\r\n\r\n", "c", 0, "r", NULL, NULL,
	    "GET /v?q=1 HTTP/1.1\r\nHost: api.example:81\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "absolute-form without path", "GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n", "c", 0, "r",
	    NULL, NULL,
	    "GET /?q HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: c\r\n" XFP_HTTP "X-Request-Id: r\r\n" },
	{ "names and values kept verbatim", "PATCH /x HTTP/1.1\r\nhost: h\r\nx-Mixed-CASE:  a \t b  \r\n"
	    "Content-Type: application/merge-patch+json\r\nExpect: 100-continue\r\n\r\n",
	    "c", 0, "r", NULL, NULL,
	    "PATCH /x HTTP/1.1\r\nHost: h\r\nx-Mixed-CASE: a \t b\r\n"
	    "Content-Type: application/merge-patch+json\r\nExpect: 100-continue\r\n"
	    "X-Forwarded-For: c\r\n" XFP_HTTP "X-Request-Id: r\r\n" },
	{ "proxy- prefix only", "GET / HTTP/1.1\r\nHost: h\r\nProxy: x\r\nProxyish: y\r\n"
	    "Proxy-Foo: z\r\n\r\n", "c", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nProxy: x\r\nProxyish: y\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "connection lists many names", "GET / HTTP/1.1\r\nHost: h\r\nConnection: a1, a2, a3, a4, "
	    "a5, a6, a7, a8, a9, b1, b2, b3, b4, b5, b6, b7, b8, b9, c1, c2, c3, c4, c5, c6, c7, "
	    "c8, c9, d1, d2, d3, d4, d5, d6, d7, d8\r\nA1: x\r\nD8: x\r\nD9: y\r\n\r\n",
	    "c", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nD9: y\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
	{ "several connection headers", "GET / HTTP/1.1\r\nHost: h\r\nConnection: x-a\r\n"
	    "Connection: ,X-B ,\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\n\r\n", "c", 0, "r", NULL, NULL,
	    "GET / HTTP/1.1\r\nHost: h\r\nX-C: 3\r\nX-Forwarded-For: c\r\n" XFP_HTTP
	    "X-Request-Id: r\r\n" },
};

static void
check_output(const char *name, struct evbuffer *out, const char *want)
{
	size_t len = evbuffer_get_length(out);
	const char *got = (const char *)evbuffer_pullup(out, -1);

	ck_assert_msg(len == strlen(want) && memcmp(got, want, len) == 0,
	    "%s:\n got: %.*s\nwant: %s", name, (int)len, got ? got : "", want);
}

/* A Date line's value, "Sat, 05 Dec 2026 11:00:00 GMT", written now (this second or the one
 * before). */
static int
date_is_now(const char *v)
{
	char now[2][64];
	time_t t = time(NULL);
	struct tm tm;

	for (int i = 0; i < 2; i++) {
		time_t at = t - i;

		gmtime_r(&at, &tm);
		strftime(now[i], sizeof(now[i]), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	}
	return strlen(now[0]) == HEADERS_DATE_LEN && (memcmp(v, now[0], HEADERS_DATE_LEN) == 0 ||
	    memcmp(v, now[1], HEADERS_DATE_LEN) == 0);
}

/* check_output for a response head: a Date line jsongate wrote must hold the current time,
 * and want has "Date: @" in its place. */
static void
check_head(const char *name, struct evbuffer *out, const char *want)
{
	size_t len = evbuffer_get_length(out);
	const char *got = (const char *)evbuffer_pullup(out, -1);
	char norm[8192];
	const char *d = len < sizeof(norm) ? strstr(want, "\r\nDate: @\r\n") : NULL;
	size_t at;

	if (d == NULL) {
		check_output(name, out, want);
		return;
	}
	at = (size_t)(d - want) + 8;    /* the value's offset, the same in got */
	ck_assert_msg(len >= at + HEADERS_DATE_LEN + 2 && memcmp(got, want, at) == 0 &&
	    date_is_now(got + at) && memcmp(got + at + HEADERS_DATE_LEN, "\r\n", 2) == 0,
	    "%s: no Date of now where expected:\n got: %.*s", name, (int)len, got ? got : "");
	memcpy(norm, got, at);
	norm[at] = '@';
	memcpy(norm + at + 1, got + at + HEADERS_DATE_LEN, len - at - HEADERS_DATE_LEN);
	len = len - HEADERS_DATE_LEN + 1;
	ck_assert_msg(len == strlen(want) && memcmp(norm, want, len) == 0,
	    "%s:\n got: %.*s\nwant: %s", name, (int)len, norm, want);
}

static struct http_str
str_of(const char *s)
{
	struct http_str r = { s ? s : "", s ? strlen(s) : 0 };

	return r;
}

START_TEST(test_request_rules)
{
	const struct req_rule *c = &req_rules[_i];
	struct http_request req;
	struct headers_forward fw;
	struct evbuffer *out = evbuffer_new();
	size_t len = strlen(c->in);

	ck_assert_msg(http_parse_request(c->in, len, &req) == (ssize_t)len, "%s: parse", c->name);
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = c->client;
	fw.tls = c->tls;
	fw.request_id = str_of(c->request_id);
	fw.host_override = c->host_override;
	if (c->target != NULL)
		fw.target = str_of(c->target);
	evbuffer_add(out, "prefix|", 7);        /* output is appended */
	ck_assert_int_eq(headers_request_out(out, &req, &fw), 0);
	evbuffer_drain(out, 7);
	check_output(c->name, out, c->want);
	evbuffer_free(out);
}
END_TEST

struct resp_rule {
	const char *name;
	const char *in;
	const char *request_id;
	const char *want;
	const char *added;              /* NULL: the upstream's body, untouched */
};

#define ADDED_GZIP "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n"
#define UP_DATE "Date: Sat, 05 Dec 2026 10:59:58 GMT\r\n"

static const struct resp_rule resp_rules[] = {
	{ "ok", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n",
	    "id", "HTTP/1.1 200 OK\r\nDate: @\r\nContent-Type: application/json\r\n"
	    "X-Request-Id: id\r\n" },
	{ "http/1.0 upstream", "HTTP/1.0 404 Nope\r\n\r\n", "id",
	    "HTTP/1.1 404 Nope\r\nDate: @\r\nX-Request-Id: id\r\n" },
	{ "empty reason gets the standard one", "HTTP/1.1 503 \r\nRetry-After: 1\r\n\r\n", "id",
	    "HTTP/1.1 503 Service Unavailable\r\nDate: @\r\nRetry-After: 1\r\nX-Request-Id: id\r\n" },
	{ "missing reason", "HTTP/1.1 204\r\n\r\n", "id",
	    "HTTP/1.1 204 No Content\r\nDate: @\r\nX-Request-Id: id\r\n" },
	{ "unknown status keeps an empty reason", "HTTP/1.1 299\r\n\r\n", "id",
	    "HTTP/1.1 299 \r\nDate: @\r\nX-Request-Id: id\r\n" },
	{ "upstream request id kept", "HTTP/1.1 200 OK\r\nx-request-id: up\r\n\r\n", "id",
	    "HTTP/1.1 200 OK\r\nDate: @\r\nx-request-id: up\r\n" },
	{ "no request id", "HTTP/1.1 200 OK\r\nA: b\r\n\r\n", NULL,
	    "HTTP/1.1 200 OK\r\nDate: @\r\nA: b\r\n" },
	{ "hop-by-hop stripped", "HTTP/1.1 200 OK\r\nConnection: close, X-Internal\r\n"
	    "Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n"
	    "Upgrade: h2\r\nProxy-Authenticate: Basic\r\nX-Internal: 1\r\nSet-Cookie: a=1\r\n"
	    "Set-Cookie: b=2\r\n\r\n", "id",
	    "HTTP/1.1 200 OK\r\nDate: @\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Request-Id: id\r\n" },
	{ "content-length dropped with TE", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", "id",
	    "HTTP/1.1 200 OK\r\nDate: @\r\nX-Request-Id: id\r\n" },
	{ "100 continue", "HTTP/1.1 100 Continue\r\n\r\n", "", "HTTP/1.1 100 Continue\r\nDate: @\r\n" },
	{ "listed request id replaced", "HTTP/1.1 200 OK\r\nConnection: X-Request-Id\r\n"
	    "X-Request-Id: hop\r\n\r\n", "id", "HTTP/1.1 200 OK\r\nDate: @\r\nX-Request-Id: id\r\n" },
	/* Date: the upstream's kept where it was, byte for byte; none added then. */
	{ "upstream date kept", "HTTP/1.1 200 OK\r\nA: b\r\n" UP_DATE "\r\n", NULL,
	    "HTTP/1.1 200 OK\r\nA: b\r\n" UP_DATE },
	{ "upstream date kept, any case", "HTTP/1.1 200 OK\r\ndATE: x\r\n\r\n", NULL,
	    "HTTP/1.1 200 OK\r\ndATE: x\r\n", "" },
	{ "a date listed in Connection is replaced", "HTTP/1.1 200 OK\r\nConnection: date\r\n"
	    UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\nDate: @\r\n" },
	/* ETag: untouched bodies keep it as it came; a changed body's strong one goes weak. */
	{ "strong etag, untouched body", "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n" UP_DATE },
	{ "strong etag, changed body", "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\nETag: W/\"abc\"\r\n" UP_DATE, "" },
	{ "strong etag, any case, gzip added", "HTTP/1.1 200 OK\r\netag: \"\"\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\netag: W/\"\"\r\n" UP_DATE ADDED_GZIP, ADDED_GZIP },
	{ "weak etag, changed body", "HTTP/1.1 200 OK\r\nETag: W/\"abc\"\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\nETag: W/\"abc\"\r\n" UP_DATE, "" },
	{ "no entity-tag, changed body: dropped", "HTTP/1.1 200 OK\r\nETag: abc\r\nETag:\r\n"
	    UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\n" UP_DATE, "" },
	{ "no entity-tag, untouched body", "HTTP/1.1 200 OK\r\nETag: abc\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\nETag: abc\r\n" UP_DATE },
	{ "etag-like names untouched", "HTTP/1.1 200 OK\r\nETags: \"a\"\r\nX-ETag: \"b\"\r\n"
	    UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\nETags: \"a\"\r\nX-ETag: \"b\"\r\n" UP_DATE, "" },
	/* Vary: Accept-Encoding at most once. */
	{ "vary added", "HTTP/1.1 200 OK\r\n" UP_DATE "\r\n", NULL,
	    "HTTP/1.1 200 OK\r\n" UP_DATE ADDED_GZIP, ADDED_GZIP },
	{ "upstream vary lists it", "HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\n" UP_DATE "\r\n",
	    NULL, "HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\n" UP_DATE
	    "Content-Encoding: gzip\r\n", ADDED_GZIP },
	{ "upstream vary lists it among others, any case", "HTTP/1.1 200 OK\r\n"
	    "vary: Origin ,ACCEPT-ENCODING\r\n" UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\n"
	    "vary: Origin ,ACCEPT-ENCODING\r\n" UP_DATE "Content-Encoding: gzip\r\n", ADDED_GZIP },
	{ "upstream vary lists it on a second line", "HTTP/1.1 200 OK\r\nVary: Origin\r\n"
	    "Vary: accept-encoding\r\n" UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\nVary: Origin\r\n"
	    "Vary: accept-encoding\r\n" UP_DATE "Content-Encoding: gzip\r\n", ADDED_GZIP },
	{ "upstream vary *", "HTTP/1.1 200 OK\r\nVary: *\r\n" UP_DATE "\r\n", NULL,
	    "HTTP/1.1 200 OK\r\nVary: *\r\n" UP_DATE "Content-Encoding: gzip\r\n", ADDED_GZIP },
	{ "upstream vary lists others only: a second line", "HTTP/1.1 200 OK\r\n"
	    "Vary: Origin, Accept-Encoding-X\r\n" UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\n"
	    "Vary: Origin, Accept-Encoding-X\r\n" UP_DATE ADDED_GZIP, ADDED_GZIP },
	{ "a vary listed in Connection does not count", "HTTP/1.1 200 OK\r\nConnection: vary\r\n"
	    "Vary: Accept-Encoding\r\n" UP_DATE "\r\n", NULL, "HTTP/1.1 200 OK\r\n" UP_DATE
	    ADDED_GZIP, ADDED_GZIP },
};

START_TEST(test_response_rules)
{
	const struct resp_rule *c = &resp_rules[_i];
	struct http_response resp;
	struct evbuffer *out = evbuffer_new();
	size_t len = strlen(c->in);

	ck_assert_msg(http_parse_response(c->in, len, &resp) == (ssize_t)len, "%s: parse", c->name);
	ck_assert_int_eq(headers_response_out(out, &resp, str_of(c->request_id), NULL, NULL,
	    c->added), 0);
	check_head(c->name, out, c->want);
	evbuffer_free(out);
}
END_TEST

/* The head headers_response_out writes, and the status and fields headers_response_fields
 * gives for the same answer written as lines: the same bytes, text_len their length. */
static void
check_fields_match(const char *name, const struct http_response *resp, struct http_str id,
    const struct header_ops *ops, const struct rewrite_vars *vars, const char *added)
{
	static struct headers_fields hf;
	struct evbuffer *out = evbuffer_new(), *lines = evbuffer_new();
	const char *text, *eol;
	size_t len;

	/* Twice at most: a Date of each may fall on both sides of a second. */
	for (int round = 0; round < 2; round++) {
		evbuffer_drain(out, evbuffer_get_length(out));
		evbuffer_drain(lines, evbuffer_get_length(lines));
		ck_assert_int_eq(headers_response_fields(&hf, resp, id, ops, vars, added), 0);
		ck_assert_int_eq(headers_response_out(out, resp, id, ops, vars, added), 0);
		for (size_t i = 0; i < hf.n; i++)
			evbuffer_add_printf(lines, "%.*s: %.*s\r\n", (int)hf.f[i].name.len,
			    hf.f[i].name.p, (int)hf.f[i].value.len, hf.f[i].value.p);
		len = evbuffer_get_length(out);
		text = (const char *)evbuffer_pullup(out, -1);
		eol = memchr(text, '\n', len);
		ck_assert_msg(eol != NULL, "%s: no status line", name);
		if (evbuffer_get_length(lines) == len - (size_t)(eol + 1 - text) &&
		    memcmp(evbuffer_pullup(lines, -1), eol + 1, evbuffer_get_length(lines)) == 0)
			break;
		ck_assert_msg(round == 0, "%s: fields\n%.*s\nnot the lines\n%.*s", name,
		    (int)evbuffer_get_length(lines), (const char *)evbuffer_pullup(lines, -1),
		    (int)len, text);
	}
	ck_assert_msg(hf.status == (text[9] - '0') * 100 + (text[10] - '0') * 10 + text[11] - '0',
	    "%s: status %d for %.12s", name, hf.status, text);
	ck_assert_msg(hf.text_len == len, "%s: text_len %zu, the text %zu", name, hf.text_len,
	    len);
	evbuffer_free(out);
	evbuffer_free(lines);
}

START_TEST(test_response_rules_as_fields)
{
	const struct resp_rule *c = &resp_rules[_i];
	struct http_response resp;
	size_t len = strlen(c->in);

	ck_assert_msg(http_parse_response(c->in, len, &resp) == (ssize_t)len, "%s: parse", c->name);
	check_fields_match(c->name, &resp, str_of(c->request_id), NULL, NULL, c->added);
}
END_TEST

/* jsongate's own lines (an error's head, the request's answer lines): the hop-by-hop ones
 * and Content-Length left out, values without the whitespace around them. */
START_TEST(test_fields_lines)
{
	static struct headers_fields hf;
	const char *lines = "Content-Type: application/json\r\nContent-Length: 42\r\n"
	    "Connection: close\r\nX-RateLimit-Limit:  10 \r\nAccess-Control-Allow-Origin: *\r\n";

	hf.n = 0;
	hf.text_len = 0;
	ck_assert_int_eq(headers_fields_lines(&hf, lines, strlen(lines)), 0);
	ck_assert_uint_eq(hf.n, 3);
	ck_assert_msg(hf.f[0].name.len == 12 && memcmp(hf.f[0].name.p, "Content-Type", 12) == 0 &&
	    hf.f[0].value.len == 16 && memcmp(hf.f[0].value.p, "application/json", 16) == 0,
	    "content-type");
	ck_assert_msg(hf.f[1].name.len == 17 && hf.f[1].value.len == 2 &&
	    memcmp(hf.f[1].value.p, "10", 2) == 0, "rate limit value trimmed");
	ck_assert_msg(hf.f[2].value.len == 1 && hf.f[2].value.p[0] == '*', "allow origin");
	ck_assert_uint_eq(hf.text_len, 32 + 25 + 32);
	headers_fields_free(&hf);
}
END_TEST

/* A head near the limits: one reservation must hold it all. */
START_TEST(test_request_many_headers)
{
	char in[8192], want[8192];
	size_t n = 0, w = 0;
	struct http_request req;
	struct headers_forward fw;
	struct evbuffer *out = evbuffer_new();

	n += (size_t)sprintf(in + n, "GET / HTTP/1.1\r\nHost: h\r\n");
	w += (size_t)sprintf(want + w, "GET / HTTP/1.1\r\nHost: h\r\n");
	for (int i = 1; i < HTTP_MAX_HEADERS; i++) {
		n += (size_t)sprintf(in + n, "X-Forwarded-For: 10.0.0.%d\r\n", i);
	}
	n += (size_t)sprintf(in + n, "\r\n");
	w += (size_t)sprintf(want + w, "X-Forwarded-For: ");
	for (int i = 1; i < HTTP_MAX_HEADERS; i++)
		w += (size_t)sprintf(want + w, "10.0.0.%d, ", i);
	w += (size_t)sprintf(want + w, "192.168.1.1\r\n" XFP_HTTP);
	ck_assert_int_eq(http_parse_request(in, n, &req), (ssize_t)n);
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = "192.168.1.1";
	ck_assert_int_eq(headers_request_out(out, &req, &fw), 0);
	check_output("many", out, want);
	evbuffer_free(out);
}
END_TEST

/* ---- header ops ---- */

/* Ops from "KIND NAME[=VALUE]" lines; the test fails on any refusal. */
static struct header_ops *
ops_of(int request, const char *const *specs)
{
	struct header_ops *ops = NULL;
	char buf[256], *eq;
	int in_value;

	for (; *specs != NULL; specs++) {
		enum header_op_kind kind = strncmp(*specs, "set ", 4) == 0 ? HEADER_OP_SET :
		    strncmp(*specs, "add ", 4) == 0 ? HEADER_OP_ADD : HEADER_OP_REMOVE;
		const char *why;

		snprintf(buf, sizeof(buf), "%s", strchr(*specs, ' ') + 1);
		if ((eq = strchr(buf, '=')) != NULL)
			*eq++ = '\0';
		why = header_ops_add(&ops, request, kind, buf, eq, NULL, &in_value);
		ck_assert_msg(why == NULL, "%s: %s", *specs, why);
	}
	return ops;
}

static struct rewrite_str
var_of(const char *s)
{
	struct rewrite_str v = { s, strlen(s) };

	return v;
}

static struct rewrite_vars
vars_of(const struct http_request *req)
{
	struct rewrite_vars v;

	memset(&v, 0, sizeof(v));
	v.request_id = var_of("rid");
	v.route = var_of("r\x01oute");        /* a control byte never reaches the head */
	v.upstream = var_of("10.0.0.9:80");
	v.remote_addr = var_of("192.0.2.7");
	v.now = 86400 + 3661;
	if (req != NULL)
		body_vars_headers(&v, req);
	return v;
}

START_TEST(test_request_header_ops)
{
	static const char *const specs[] = {
		"set X-Api=2", "set x-forwarded-for=$remote_addr", "set X-Trace=$header.x-b3",
		"set X-Missing=$header.X-Absent", "set X-Time=$time_iso8601",
		"add x-tag=gw", "add X-Route=$route", "add X-Dollar=$$route",
		"remove X-Debug", "remove X-Forwarded-Proto", NULL
	};
	const char *in = "GET /a HTTP/1.1\r\nHost: h\r\nX-API: 1\r\nX-Tag: client\r\n"
	    "X-Debug: on\r\nx-debug: again\r\nX-Forwarded-For: 6.6.6.6\r\nX-B3: t-1\r\n"
	    "Accept: */*\r\n\r\n";
	struct header_ops *ops = ops_of(1, specs);
	struct http_request req;
	struct headers_forward fw;
	struct rewrite_vars vars;
	struct evbuffer *out = evbuffer_new();

	ck_assert_int_eq(http_parse_request(in, strlen(in), &req), (ssize_t)strlen(in));
	vars = vars_of(&req);
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = "192.0.2.7";
	fw.request_id = str_of("rid");
	fw.ops = ops;
	fw.vars = &vars;
	ck_assert_int_eq(headers_request_out(out, &req, &fw), 0);
	check_output("request ops", out,
	    "GET /a HTTP/1.1\r\nHost: h\r\nX-Tag: client\r\nX-B3: t-1\r\nAccept: */*\r\n"
	    "X-Request-Id: rid\r\nX-Api: 2\r\nx-forwarded-for: 192.0.2.7\r\nX-Trace: t-1\r\n"
	    "X-Time: 1970-01-02T01:01:01+00:00\r\nx-tag: gw\r\nX-Route: route\r\n"
	    "X-Dollar: $route\r\n");
	evbuffer_free(out);
	header_ops_free(ops);
}
END_TEST

START_TEST(test_response_header_ops)
{
	static const char *const specs[] = {
		"remove Server", "set X-Request-Id=$request_id", "set X-Upstream=$upstream",
		"add Cache-Control=no-store", "set X-Empty=", NULL
	};
	const char *in = "HTTP/1.1 200 OK\r\nServer: app/1\r\nX-Request-Id: upstream-id\r\n"
	    "Cache-Control: private\r\nContent-Length: 2\r\n\r\n";
	struct header_ops *ops = ops_of(0, specs);
	struct http_response resp;
	struct rewrite_vars vars = vars_of(NULL);
	struct evbuffer *out = evbuffer_new();

	ck_assert_int_eq(http_parse_response(in, strlen(in), &resp), (ssize_t)strlen(in));
	ck_assert_int_eq(headers_response_out(out, &resp, str_of("rid"), ops, &vars, NULL), 0);
	check_head("response ops", out,
	    "HTTP/1.1 200 OK\r\nDate: @\r\nCache-Control: private\r\nX-Request-Id: rid\r\n"
	    "X-Upstream: 10.0.0.9:80\r\nCache-Control: no-store\r\nX-Empty: \r\n");
	evbuffer_free(out);
	header_ops_free(ops);
}
END_TEST

/* Ops that set or remove Date own it: none is added. */
START_TEST(test_response_date_ops)
{
	static const char *const removes[] = { "remove Date", NULL };
	static const char *const sets[] = { "set date=then", NULL };
	const char *in = "HTTP/1.1 200 OK\r\nDate: upstream\r\nA: b\r\n\r\n";
	struct header_ops *ops;
	struct http_response resp;
	struct rewrite_vars vars = vars_of(NULL);
	struct evbuffer *out = evbuffer_new();

	ck_assert_int_eq(http_parse_response(in, strlen(in), &resp), (ssize_t)strlen(in));
	ops = ops_of(0, removes);
	ck_assert_int_eq(headers_response_out(out, &resp, str_of(NULL), ops, &vars, ""), 0);
	check_output("date removed", out, "HTTP/1.1 200 OK\r\nA: b\r\n");
	header_ops_free(ops);
	evbuffer_drain(out, evbuffer_get_length(out));
	ops = ops_of(0, sets);
	ck_assert_int_eq(headers_response_out(out, &resp, str_of(NULL), ops, &vars, NULL), 0);
	check_output("date set", out, "HTTP/1.1 200 OK\r\nA: b\r\ndate: then\r\n");
	header_ops_free(ops);
	evbuffer_free(out);
}
END_TEST

/* Ops with variables (a control byte of one left out), a strong ETag of a changed body,
 * Vary merging, Date and request id: the same fields as the text, in its order. */
START_TEST(test_response_ops_as_fields)
{
	static const char *const specs[] = {
		"remove Server", "set X-Upstream=$upstream", "add X-Route=$route",
		"add Cache-Control=no-store", "set X-Empty=", "set X-Time=$time_iso8601", NULL
	};
	static const char *const own_id[] = { "set X-Request-Id=$request_id", NULL };
	const char *in = "HTTP/1.1 201 Created\r\nServer: app/1\r\nETag: \"v1\"\r\n"
	    "Vary: Origin\r\nCache-Control: private\r\nContent-Length: 2\r\n\r\n";
	struct header_ops *ops = ops_of(0, specs), *ops2 = ops_of(0, own_id);
	struct http_response resp;
	struct rewrite_vars vars = vars_of(NULL);

	ck_assert_int_eq(http_parse_response(in, strlen(in), &resp), (ssize_t)strlen(in));
	check_fields_match("ops, untouched body", &resp, str_of("rid"), ops, &vars, NULL);
	check_fields_match("ops, gzipped body", &resp, str_of("rid"), ops, &vars, ADDED_GZIP);
	check_fields_match("ops own the id", &resp, str_of("rid"), ops2, &vars, "");
	header_ops_free(ops);
	header_ops_free(ops2);
}
END_TEST

/* The cached text is the current second's, in the RFC 9110 form. */
START_TEST(test_date_text)
{
	const char *d = headers_date();

	ck_assert_uint_eq(strlen(d), HEADERS_DATE_LEN);
	ck_assert_msg(date_is_now(d), "%s", d);
	ck_assert_ptr_eq(headers_date(), d);
}
END_TEST

/* $json.PATH and $path.NAME of a test request, for header ops. */
static int
field_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	(void)arg;
	if (len == 4 && memcmp(name, "user", 4) == 0) {
		*value = var_of("u\r\n1\x7f\xc3\xa9");  /* controls never reach the head */
		return 1;
	}
	if (len == 4 && memcmp(name, "rest", 4) == 0) {
		*value = var_of("a/b c");
		return 1;
	}
	return 0;
}

START_TEST(test_header_ops_body_and_path_vars)
{
	static const char *const specs[] = {
		"set X-User=$json.user", "set X-Gone=$json.gone", "add X-Rest=$path.rest", NULL
	};
	const char *in = "GET /files/a%2Fb%20c HTTP/1.1\r\nHost: h\r\n\r\n";
	const char *why;
	struct route_pattern *p = route_pattern_new("/files/{rest...}", &why);
	struct header_ops *ops = NULL;
	struct http_request req;
	struct headers_forward fw;
	struct rewrite_vars vars;
	struct evbuffer *out = evbuffer_new();
	size_t i;
	int in_value;

	ck_assert_ptr_nonnull(p);
	for (i = 0; specs[i] != NULL; i++) {
		char name[32], *eq;

		snprintf(name, sizeof(name), "%s", specs[i] + 4);
		eq = strchr(name, '=');
		*eq++ = '\0';
		ck_assert_ptr_null(header_ops_add(&ops, 1, specs[i][0] == 's' ? HEADER_OP_SET :
		    HEADER_OP_ADD, name, eq, p, &in_value));
	}
	ck_assert_str_eq(header_ops_add(&ops, 1, HEADER_OP_SET, "X-No", "$path.res", p,
	    &in_value), "the route's path template has no such capture");
	ck_assert_int_eq(http_parse_request(in, strlen(in), &req), (ssize_t)strlen(in));
	vars = vars_of(&req);
	vars.json_cb = vars.path_cb = field_cb;
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = "192.0.2.7";
	fw.request_id = str_of("rid");
	fw.ops = ops;
	fw.vars = &vars;
	ck_assert_int_eq(headers_request_out(out, &req, &fw), 0);
	check_output("body and path variables", out,
	    "GET /files/a%2Fb%20c HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\n"
	    "X-Forwarded-Proto: http\r\nX-Request-Id: rid\r\n"
	    "X-User: u1\xc3\xa9\r\nX-Rest: a/b c\r\n");
	evbuffer_free(out);
	header_ops_free(ops);
	route_pattern_free(p);
}
END_TEST

struct op_refusal {
	int request;
	enum header_op_kind kind;
	const char *name, *value;
	int in_value;
	const char *why;                /* start of the reason */
};

static const struct op_refusal op_refusals[] = {
	{ 1, HEADER_OP_SET, "Connection", "close", 0, "a hop-by-hop header" },
	{ 0, HEADER_OP_ADD, "keep-alive", "1", 0, "a hop-by-hop header" },
	{ 1, HEADER_OP_REMOVE, "TE", NULL, 0, "a hop-by-hop header" },
	{ 0, HEADER_OP_SET, "Trailer", "x", 0, "a hop-by-hop header" },
	{ 0, HEADER_OP_SET, "Upgrade", "h2c", 0, "a hop-by-hop header" },
	{ 1, HEADER_OP_SET, "Proxy-Authorization", "x", 0, "a hop-by-hop header" },
	{ 0, HEADER_OP_SET, "Content-Length", "0", 0, "message framing" },
	{ 1, HEADER_OP_REMOVE, "transfer-encoding", NULL, 0, "message framing" },
	{ 1, HEADER_OP_SET, "Host", "h", 0, "the Host sent upstream" },
	{ 1, HEADER_OP_SET, "Bad Name", "x", 0, "not a header name" },
	{ 1, HEADER_OP_SET, "X-A", "a\r\nX-B: b", 1, "the value has a control character" },
	{ 1, HEADER_OP_SET, "X-A", "$nope", 1, "unknown variable" },
	{ 1, HEADER_OP_SET, "X-A", "$header.a b", 1, "bad header name" },
	{ 1, HEADER_OP_SET, "X-A", "$upstream", 1, "$upstream is not known yet" },
	{ 1, HEADER_OP_SET, "X-A", "$json.a..b", 1, "bad path in $json.PATH" },
	{ 0, HEADER_OP_ADD, "X-A", "$path.id", 1, "the route's match.path is not a path template" },
};

START_TEST(test_header_op_refusals)
{
	const struct op_refusal *c = &op_refusals[_i];
	struct header_ops *ops = NULL;
	const char *why;
	int in_value = -1;

	why = header_ops_add(&ops, c->request, c->kind, c->name, c->value, NULL, &in_value);
	ck_assert_msg(why != NULL && strncmp(why, c->why, strlen(c->why)) == 0,
	    "%s: got %s", c->name, why ? why : "(accepted)");
	ck_assert_int_eq(in_value, c->in_value);
	header_ops_free(ops);
}
END_TEST

START_TEST(test_header_op_named_twice)
{
	struct header_ops *ops = NULL;
	int in_value;

	ck_assert_ptr_null(header_ops_add(&ops, 1, HEADER_OP_SET, "X-A", "1", NULL, &in_value));
	ck_assert_str_eq(header_ops_add(&ops, 1, HEADER_OP_ADD, "x-a", "2", NULL, &in_value),
	    "named twice (names are case-insensitive)");
	ck_assert_str_eq(header_ops_add(&ops, 1, HEADER_OP_REMOVE, "X-A", NULL, NULL, &in_value),
	    "named twice (names are case-insensitive)");
	ck_assert_ptr_null(header_ops_add(&ops, 0, HEADER_OP_SET, "X-U", "$upstream", NULL, &in_value));
	ck_assert_uint_eq(ops->ndrop, 2);
	ck_assert_uint_eq(ops->nout, 2);
	header_ops_free(ops);
}
END_TEST

static int
is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

START_TEST(test_request_id_generate)
{
	char a[REQUEST_ID_LEN + 1], b[REQUEST_ID_LEN + 1];

	a[REQUEST_ID_LEN] = b[REQUEST_ID_LEN] = 'Z';
	headers_request_id_generate(a);
	headers_request_id_generate(b);
	ck_assert(is_lower_hex(a, REQUEST_ID_LEN));
	ck_assert(is_lower_hex(b, REQUEST_ID_LEN));
	ck_assert(a[REQUEST_ID_LEN] == 'Z' && b[REQUEST_ID_LEN] == 'Z');       /* no NUL written */
	ck_assert(memcmp(a, b, REQUEST_ID_LEN) != 0);
	ck_assert(headers_request_id_acceptable((struct http_str){ a, REQUEST_ID_LEN }));
}
END_TEST

#define ID_THREADS 4
#define ID_PER_THREAD 2000

static char thread_ids[ID_THREADS][ID_PER_THREAD][REQUEST_ID_LEN];

static void *
id_thread(void *arg)
{
	char (*ids)[REQUEST_ID_LEN] = arg;

	for (int i = 0; i < ID_PER_THREAD; i++)
		headers_request_id_generate(ids[i]);
	return NULL;
}

static int
id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, REQUEST_ID_LEN);
}

/* Threads get their own streams: no id repeats across them. */
START_TEST(test_request_id_threads)
{
	pthread_t t[ID_THREADS];

	for (int i = 0; i < ID_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, id_thread, thread_ids[i]), 0);
	for (int i = 0; i < ID_THREADS; i++)
		pthread_join(t[i], NULL);
	qsort(thread_ids, ID_THREADS * ID_PER_THREAD, REQUEST_ID_LEN, id_cmp);
	char *all = &thread_ids[0][0][0];
	for (int i = 1; i < ID_THREADS * ID_PER_THREAD; i++)
		ck_assert(memcmp(all + (i - 1) * REQUEST_ID_LEN, all + i * REQUEST_ID_LEN,
		    REQUEST_ID_LEN) != 0);
}
END_TEST

struct id_case {
	const char *id;
	int ok;
};

static const struct id_case id_cases[] = {
	{ "a", 1 },
	{ "0123456789abcdef0123456789abcdef", 1 },
	{ "req-1:trace/2~!", 1 },
	{ "", 0 },
	{ "has space", 0 },
	{ "tab\there", 0 },
	{ "caf\xc3\xa9", 0 },
	{ "del\x7f", 0 },
	{ "x\"y", 1 },
};

START_TEST(test_request_id_acceptable)
{
	const struct id_case *c = &id_cases[_i];

	ck_assert_int_eq(headers_request_id_acceptable(str_of(c->id)), c->ok);
}
END_TEST

START_TEST(test_request_id_length_bound)
{
	char buf[130];

	memset(buf, 'x', sizeof(buf));
	ck_assert(headers_request_id_acceptable((struct http_str){ buf, 128 }));
	ck_assert(!headers_request_id_acceptable((struct http_str){ buf, 129 }));
}
END_TEST

static Suite *
headers_suite(void)
{
	Suite *s = suite_create("headers");
	TCase *tc = tcase_create("rules");

	tcase_add_loop_test(tc, test_request_rules, 0, sizeof(req_rules) / sizeof(req_rules[0]));
	tcase_add_loop_test(tc, test_response_rules, 0, sizeof(resp_rules) / sizeof(resp_rules[0]));
	tcase_add_test(tc, test_request_many_headers);
	tcase_add_loop_test(tc, test_response_rules_as_fields, 0,
	    sizeof(resp_rules) / sizeof(resp_rules[0]));
	tcase_add_test(tc, test_fields_lines);
	suite_add_tcase(s, tc);

	tc = tcase_create("header_ops");
	tcase_add_test(tc, test_request_header_ops);
	tcase_add_test(tc, test_response_header_ops);
	tcase_add_test(tc, test_response_date_ops);
	tcase_add_test(tc, test_response_ops_as_fields);
	tcase_add_test(tc, test_date_text);
	tcase_add_test(tc, test_header_ops_body_and_path_vars);
	tcase_add_loop_test(tc, test_header_op_refusals, 0,
	    sizeof(op_refusals) / sizeof(op_refusals[0]));
	tcase_add_test(tc, test_header_op_named_twice);
	suite_add_tcase(s, tc);

	tc = tcase_create("request_id");
	tcase_add_test(tc, test_request_id_generate);
	tcase_add_test(tc, test_request_id_threads);
	tcase_add_loop_test(tc, test_request_id_acceptable, 0, sizeof(id_cases) / sizeof(id_cases[0]));
	tcase_add_test(tc, test_request_id_length_bound);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(headers_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
