/* HTTP/1.1 head parser and chunked decoder: exact results for valid and invalid input. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "config.h"
#include "http.h"
#include "http_body.h"

/* Error rows of the tables leave the fields they do not check out. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define WHOLE 0                 /* expected result: the whole input is the head */
#define NA (-2)                 /* framing field not checked */

struct req_case {
	const char *name;
	const char *in;
	ssize_t want;           /* WHOLE, a length, or an HTTP_* result */
	const char *method;
	unsigned bit;
	const char *target, *path, *query;
	int minor;
	const char *host, *rid;
	int64_t cl;
	int chunked, close, keepalive, expect, upgrade;
	int nheaders;
	size_t inlen;           /* for inputs holding a NUL byte; 0: strlen(in) */
};

#define H11 "Host: a\r\n"
#define NUL_VALUE "GET / HTTP/1.1\r\n" H11 "X: a\0b\r\n\r\n"
#define NUL_EXT "5;a\0b\r\nhello\r\n"

static const struct req_case req_cases[] = {
	{ "get", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 1, "example.com", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "head", "HEAD /x HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "HEAD", METHOD_HEAD, "/x", "/x", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "options", "OPTIONS /x HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "OPTIONS", METHOD_OPTIONS, "/x", "/x", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "options asterisk", "OPTIONS * HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "OPTIONS", METHOD_OPTIONS, "*", "*", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "patch", "PATCH /p HTTP/1.1\r\n" H11 "Content-Length: 2\r\n\r\n", WHOLE,
	    "PATCH", METHOD_PATCH, "/p", "/p", "", 1, "a", "", 2, 0, 0, 0, 0, 0, 2 },
	{ "post", "POST /p HTTP/1.1\r\n" H11 "Content-Length: 0\r\n\r\n", WHOLE,
	    "POST", METHOD_POST, "/p", "/p", "", 1, "a", "", 0, 0, 0, 0, 0, 0, 2 },
	{ "put", "PUT /p HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "PUT", METHOD_PUT, "/p", "/p", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "delete", "DELETE /p HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "DELETE", METHOD_DELETE, "/p", "/p", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "trace", "TRACE /p HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "TRACE", METHOD_TRACE, "/p", "/p", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "connect", "CONNECT a:443 HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "CONNECT", METHOD_CONNECT, "a:443", "a:443", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "other method", "PROPFIND /d HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "PROPFIND", METHOD_OTHER, "/d", "/d", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "lowercase method is another token", "get / HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "get", METHOD_OTHER, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "http/1.0 without host", "GET /old HTTP/1.0\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/old", "/old", "", 0, "", "", -1, 0, 0, 0, 0, 0, 0 },
	{ "http/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 0, "", "", -1, 0, 0, 1, 0, 0, 1 },
	{ "query", "GET /a/b?x=1&y=2 HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "GET", METHOD_GET, "/a/b?x=1&y=2", "/a/b", "?x=1&y=2", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "empty query", "GET /a? HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "GET", METHOD_GET, "/a?", "/a", "?", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "absolute-form", "GET http://api.example.com:8080/v1/x?q HTTP/1.1\r\nHost: other\r\n\r\n",
	    WHOLE, "GET", METHOD_GET, "http://api.example.com:8080/v1/x?q", "/v1/x", "?q", 1,
	    "api.example.com:8080", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "absolute-form without path", "GET https://h?q=1 HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "GET", METHOD_GET, "https://h?q=1", "/", "?q=1", 1, "h", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "leading empty lines", "\r\n\r\nGET / HTTP/1.1\r\n" H11 "\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "pipelined bytes after the head", "GET / HTTP/1.1\r\n" H11 "\r\nGET / HTTP/1.1\r\n", 27,
	    "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "ows trimmed, empty value", "GET / HTTP/1.1\r\nHost:  \t a \t\r\nX-E:\r\nX-F: \r\n\r\n",
	    WHOLE, "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 3 },
	{ "value with htab, obs-text", "GET / HTTP/1.1\r\n" H11 "X-V: a\tb \xc3\xa9 c\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 2 },
	{ "request id", "GET / HTTP/1.1\r\n" H11 "x-request-id: abc-123\r\nX-Request-Id: 2\r\n\r\n",
	    WHOLE, "GET", METHOD_GET, "/", "/", "", 1, "a", "abc-123", -1, 0, 0, 0, 0, 0, 3 },
	{ "chunked", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n", WHOLE,
	    "POST", METHOD_POST, "/", "/", "", 1, "a", "", -1, 1, 0, 0, 0, 0, 2 },
	{ "chunked in any case", "POST / HTTP/1.1\r\n" H11 "transfer-encoding:  ChUnKeD \r\n\r\n",
	    WHOLE, "POST", METHOD_POST, "/", "/", "", 1, "a", "", -1, 1, 0, 0, 0, 0, 2 },
	{ "chunked in http/1.0 closes", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	    WHOLE, "POST", METHOD_POST, "/", "/", "", 0, "", "", -1, 1, 1, 0, 0, 0, 1 },
	{ "identical content-lengths", "POST / HTTP/1.1\r\n" H11 "Content-Length: 5\r\n"
	    "Content-Length: 005, 5\r\n\r\n", WHOLE,
	    "POST", METHOD_POST, "/", "/", "", 1, "a", "", 5, 0, 0, 0, 0, 0, 3 },
	{ "large content-length", "POST / HTTP/1.1\r\n" H11 "Content-Length: 4611686018427387903\r\n\r\n",
	    WHOLE, "POST", METHOD_POST, "/", "/", "", 1, "a", "", 4611686018427387903LL,
	    0, 0, 0, 0, 0, 2 },
	{ "connection tokens", "GET / HTTP/1.1\r\n" H11 "Connection: foo, CLOSE ,Upgrade\r\n\r\n",
	    WHOLE, "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 1, 0, 0, 1, 2 },
	{ "upgrade header", "GET / HTTP/1.1\r\n" H11 "Upgrade: websocket\r\n\r\n",
	    WHOLE, "GET", METHOD_GET, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 1, 2 },
	{ "expect", "PUT / HTTP/1.1\r\n" H11 "Expect: 100-Continue\r\nContent-Length: 1\r\n\r\n",
	    WHOLE, "PUT", METHOD_PUT, "/", "/", "", 1, "a", "", 1, 0, 0, 0, 1, 0, 3 },
	{ "other expectation", "PUT / HTTP/1.1\r\n" H11 "Expect: 100-continuex\r\n\r\n",
	    WHOLE, "PUT", METHOD_PUT, "/", "/", "", 1, "a", "", -1, 0, 0, 0, 0, 0, 2 },
	{ "ipv6 host", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 1, "[::1]:8080", "", -1, 0, 0, 0, 0, 0, 1 },
	{ "empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", WHOLE,
	    "GET", METHOD_GET, "/", "/", "", 1, "", "", -1, 0, 0, 0, 0, 0, 1 },

	/* errors */
	{ "bare LF ends request line", "GET / HTTP/1.1\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "bare LF in header line", "GET / HTTP/1.1\r\nHost: a\n\r\n", HTTP_ERR_MALFORMED },
	{ "bare LF ends head", "GET / HTTP/1.1\r\n" H11 "\n", HTTP_ERR_MALFORMED },
	{ "bare CR in request line", "GET / HTTP/1.1\rX\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "leading bare LF", "\nGET / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "leading CRLF, then bare LF", "\r\n\nGET / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "leading CR without LF", "\r\rGET / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "obs-fold", "GET / HTTP/1.1\r\n" H11 "X: a\r\n b\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "obs-fold tab", "GET / HTTP/1.1\r\n" H11 "X: a\r\n\tb\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "space before first header", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "empty header name", "GET / HTTP/1.1\r\n" H11 ": a\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "no colon", "GET / HTTP/1.1\r\n" H11 "Xa\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "bad name char", "GET / HTTP/1.1\r\n" H11 "X(y): a\r\n\r\n", HTTP_ERR_MALFORMED },
	{ .name = "NUL in value", .in = NUL_VALUE, .inlen = sizeof(NUL_VALUE) - 1,
	    .want = HTTP_ERR_MALFORMED },
	{ "DEL in value", "GET / HTTP/1.1\r\n" H11 "X: a\x7f\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "control in long value", "GET / HTTP/1.1\r\n" H11 "X: aaaaaaaaaaaaaaaaaaaaa\x01zz\r\n\r\n",
	    HTTP_ERR_MALFORMED },
	{ "empty method", " / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "bad method char", "GE(T / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "two spaces", "GET  / HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "tab separator", "GET\t/ HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "no version", "GET /\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "space after version", "GET / HTTP/1.1 \r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "control in target", "GET /a\x01 HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "relative target", "GET a/b HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "asterisk with GET", "GET * HTTP/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "absolute-form with userinfo", "GET http://u@h/ HTTP/1.1\r\n" H11 "\r\n",
	    HTTP_ERR_MALFORMED },
	{ "absolute-form empty authority", "GET http:///x HTTP/1.1\r\n" H11 "\r\n",
	    HTTP_ERR_MALFORMED },
	{ "lowercase version", "GET / http/1.1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "version 1.10", "GET / HTTP/1.10\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "version 1", "GET / HTTP/1\r\n" H11 "\r\n", HTTP_ERR_MALFORMED },
	{ "version 2.0", "GET / HTTP/2.0\r\n" H11 "\r\n", HTTP_ERR_VERSION },
	{ "version 1.2", "GET / HTTP/1.2\r\n" H11 "\r\n", HTTP_ERR_VERSION },
	{ "version 0.9", "GET / HTTP/0.9\r\n" H11 "\r\n", HTTP_ERR_VERSION },
	{ "missing host", "GET / HTTP/1.1\r\nX: y\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "two hosts", "GET / HTTP/1.1\r\n" H11 "host: b\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "bad host", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "CL with TE", "POST / HTTP/1.1\r\n" H11 "Content-Length: 3\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", HTTP_ERR_FRAMING },
	{ "TE with CL", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n"
	    "Content-Length: 3\r\n\r\n", HTTP_ERR_FRAMING },
	{ "conflicting CLs", "POST / HTTP/1.1\r\n" H11 "Content-Length: 3\r\n"
	    "Content-Length: 4\r\n\r\n", HTTP_ERR_FRAMING },
	{ "conflicting CL list", "POST / HTTP/1.1\r\n" H11 "Content-Length: 3, 4\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "CL empty element", "POST / HTTP/1.1\r\n" H11 "Content-Length: 3,\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "CL sign", "POST / HTTP/1.1\r\n" H11 "Content-Length: +3\r\n\r\n", HTTP_ERR_FRAMING },
	{ "CL negative", "POST / HTTP/1.1\r\n" H11 "Content-Length: -1\r\n\r\n", HTTP_ERR_FRAMING },
	{ "CL hex", "POST / HTTP/1.1\r\n" H11 "Content-Length: 0x10\r\n\r\n", HTTP_ERR_FRAMING },
	{ "CL empty", "POST / HTTP/1.1\r\n" H11 "Content-Length:\r\n\r\n", HTTP_ERR_FRAMING },
	{ "CL inner space", "POST / HTTP/1.1\r\n" H11 "Content-Length: 1 2\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "CL 2^62", "POST / HTTP/1.1\r\n" H11 "Content-Length: 4611686018427387904\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "CL overflow", "POST / HTTP/1.1\r\n" H11 "Content-Length: 99999999999999999999999\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "CL with another coding", "POST / HTTP/1.1\r\n" H11 "Content-Length: 3\r\n"
	    "Transfer-Encoding: gzip\r\n\r\n", HTTP_ERR_FRAMING },
	/* A request's Transfer-Encoding is "chunked" or 501, as with nginx. */
	{ "TE not ending in chunked", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked, gzip\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE gzip, chunked", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: gzip, chunked\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE unknown, chunked", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: foo, chunked\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE chunked around gzip", "POST / HTTP/1.1\r\n" H11
	    "Transfer-Encoding: chunked, gzip, chunked\r\n\r\n", HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE chunked after gzip line", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: gzip\r\n"
	    "transfer-encoding: CHUNKED\r\n\r\n", HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE chunked with empty element", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked,\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE identity", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: identity\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE empty", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding:\r\n\r\n", HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE chunked twice", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", HTTP_ERR_NOT_IMPLEMENTED },
	{ "TE chunked with parameter", "POST / HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked;x=1\r\n\r\n",
	    HTTP_ERR_NOT_IMPLEMENTED },
};

static void
check_str(const char *what, struct http_str got, const char *want)
{
	ck_assert_msg(got.len == strlen(want) && (got.len == 0 || memcmp(got.p, want, got.len) == 0),
	    "%s: got \"%.*s\", want \"%s\"", what, (int)got.len, got.p ? got.p : "", want);
}

/* Run against a heap copy of exactly len bytes so ASan and valgrind see any over-read. */
static ssize_t
parse_req_exact(const char *in, size_t len, struct http_request *req)
{
	char *copy = malloc(len ? len : 1);
	ssize_t r;

	memcpy(copy, in, len);
	r = http_parse_request(copy, len, req);
	free(copy);
	return r;
}

static size_t
case_len(const struct req_case *c)
{
	return c->inlen ? c->inlen : strlen(c->in);
}

START_TEST(test_request)
{
	const struct req_case *c = &req_cases[_i];
	struct http_request req;
	size_t len = case_len(c);
	ssize_t want = c->want == WHOLE ? (ssize_t)len : c->want;
	char *copy = malloc(len);
	ssize_t r;

	memcpy(copy, c->in, len);
	memset(&req, 0xa5, sizeof(req));
	r = http_parse_request(copy, len, &req);
	ck_assert_msg(r == want, "%s: got %zd, want %zd", c->name, r, want);
	if (want > 0) {
		check_str("method", req.method, c->method);
		ck_assert_uint_eq(req.method_bit, c->bit);
		check_str("target", req.target, c->target);
		check_str("path", req.path, c->path);
		check_str("query", req.query, c->query);
		ck_assert_int_eq(req.version_minor, c->minor);
		check_str("host", req.host, c->host);
		check_str("request_id", req.request_id, c->rid);
		ck_assert_int_eq(req.framing.content_length, c->cl);
		ck_assert_int_eq(req.framing.chunked, c->chunked);
		ck_assert_int_eq(req.framing.conn_close, c->close);
		ck_assert_int_eq(req.framing.conn_keepalive, c->keepalive);
		ck_assert_int_eq(req.framing.expect_continue, c->expect);
		ck_assert_int_eq(req.framing.upgrade, c->upgrade);
		ck_assert_int_eq(req.framing.until_close, 0);
		ck_assert_uint_eq(req.nheaders, (size_t)c->nheaders);
	}
	free(copy);
}
END_TEST

/* Every proper prefix of a valid head is incomplete, never an error. */
START_TEST(test_request_prefixes)
{
	const struct req_case *c = &req_cases[_i];
	struct http_request req;
	size_t len = case_len(c);
	ssize_t want = c->want == WHOLE ? (ssize_t)len : c->want;

	if (want <= 0)
		return;
	for (size_t k = 0; k < (size_t)want; k++) {
		ssize_t r = parse_req_exact(c->in, k, &req);
		ck_assert_msg(r == HTTP_INCOMPLETE, "%s: prefix %zu gave %zd", c->name, k, r);
	}
}
END_TEST

/* A prefix of an invalid head is incomplete or the same error; never success. */
START_TEST(test_request_error_prefixes)
{
	const struct req_case *c = &req_cases[_i];
	struct http_request req;
	size_t len = case_len(c);

	if (c->want >= 0)
		return;
	for (size_t k = 0; k <= len; k++) {
		ssize_t r = parse_req_exact(c->in, k, &req);
		ck_assert_msg(r == HTTP_INCOMPLETE || r == c->want, "%s: prefix %zu gave %zd",
		    c->name, k, r);
	}
}
END_TEST

START_TEST(test_request_headers)
{
	static const char in[] = "GET / HTTP/1.1\r\nHost: h\r\nX-A:  1 2 \r\nx-b:\r\n\r\n";
	struct http_request req;

	ck_assert_int_eq(http_parse_request(in, sizeof(in) - 1, &req), sizeof(in) - 1);
	ck_assert_uint_eq(req.nheaders, 3);
	check_str("name0", req.headers[0].name, "Host");
	check_str("value0", req.headers[0].value, "h");
	check_str("name1", req.headers[1].name, "X-A");
	check_str("value1", req.headers[1].value, "1 2");
	check_str("name2", req.headers[2].name, "x-b");
	check_str("value2", req.headers[2].value, "");
	ck_assert(http_header_is(&req.headers[1], "x-a"));
	ck_assert(http_header_is(&req.headers[2], "x-b"));
	ck_assert(!http_header_is(&req.headers[2], "x-bb"));
	ck_assert(!http_header_is(&req.headers[0], "x-a"));
}
END_TEST

/* The one list tokenizer: OWS trimmed, empty elements kept, NULL after the last. */
START_TEST(test_list_next)
{
	static const char v[] = " a ,\tB c\t,, ";
	const char *p = v, *end = v + sizeof(v) - 1;
	static const char *const want[] = { "a", "B c", "", "" };
	struct http_str e;
	size_t i = 0;

	do {
		ck_assert_uint_lt(i, 4);
		p = http_list_next(p, end, &e);
		check_str("element", e, want[i++]);
	} while (p != NULL);
	ck_assert_uint_eq(i, 4);
	p = http_list_next(v, v, &e);
	ck_assert_ptr_null(p);
	ck_assert_uint_eq(e.len, 0);
}
END_TEST

/* The one case-insensitive compare: ASCII letters only, every length and position, against
 * a byte at a time. */
START_TEST(test_ieq)
{
	char a[20], b[20];
	unsigned x, y;
	size_t n, at;

	ck_assert(HTTP_IEQ("Keep-Alive", 10, "keep-alive"));
	ck_assert(HTTP_IEQ("kEEP-aLIVE", 10, "Keep-Alive"));
	ck_assert(!HTTP_IEQ("Keep-Alive", 10, "keep-alivex"));
	ck_assert(!HTTP_IEQ("Keep_Alive", 10, "keep-alive"));
	for (n = 1; n <= sizeof(a); n++)
		for (at = 0; at < n; at += n > 9 ? 7 : 1)
			for (x = 0; x < 256; x++)
				for (y = 0; y < 256; y++) {
					int same = x == y || (x >= 'A' && x <= 'Z' && y == (x | 0x20)) ||
					    (y >= 'A' && y <= 'Z' && x == (y | 0x20));

					memset(a, 'q', n);
					memset(b, 'Q', n);
					a[at] = (char)x;
					b[at] = (char)y;
					if (http_ieq(a, b, n) != same)
						ck_abort_msg("http_ieq: length %zu, byte %zu: %02x, %02x",
						    n, at, x, y);
				}
}
END_TEST

/* Repeated lines as one list, empty elements skipped, other names left out. */
START_TEST(test_elements)
{
	static const struct http_header h[] = {
		{ { "Accept-Encoding", 15 }, { "a, ,b", 5 }, 0 },
		{ { "X-Other", 7 }, { "c", 1 }, 0 },
		{ { "accept-encoding", 15 }, { "", 0 }, 0 },
		{ { "ACCEPT-ENCODING", 15 }, { " d ;q=0 ,", 9 }, 0 },
	};
	static const char *const want[] = { "a", "b", "d ;q=0" };
	struct http_elements it;
	struct http_str e;
	size_t i = 0;

	http_elements_start(&it, h, 4, "accept-encoding");
	while (http_elements_next(&it, &e)) {
		ck_assert_uint_lt(i, 3);
		check_str("element", e, want[i++]);
	}
	ck_assert_uint_eq(i, 3);
	http_elements_start(&it, h, 4, "content-encoding");
	ck_assert_int_eq(http_elements_next(&it, &e), 0);
}
END_TEST

/* Weights (RFC 9110 12.4.2): "q" in any case, qvalues only, other parameters skipped. */
START_TEST(test_weight)
{
	static const struct {
		const char *elem, *token;
		int weight;
	} cases[] = {
		{ "gzip", "gzip", 1000 }, { "gzip;q=0.5", "gzip", 500 }, { "gzip; Q=0", "gzip", 0 },
		{ "gzip ;q=0.000", "gzip", 0 }, { "br;q=1.000", "br", 1000 }, { "*;q=0.125", "*", 125 },
		{ "x;q=1", "x", 1000 }, { "x;q=0.", "x", 0 }, { "x; level=9 ;q=0.3", "x", 300 },
		{ "x;q = 0.2", "x", 200 }, { "x;q=1.5", "x", -1 }, { "x;q=0.0001", "x", -1 },
		{ "x;q=", "x", -1 }, { "x;q=00", "x", -1 }, { "x;q=.5", "x", -1 },
		{ "x;q=0.5x", "x", -1 }, { "x;qq=0", "x", 1000 }, { ";q=0", "", 0 },
	};
	struct http_str e, token;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		e.p = cases[i].elem;
		e.len = strlen(e.p);
		ck_assert_msg(http_weight(e, &token) == cases[i].weight, "%s", cases[i].elem);
		check_str(cases[i].elem, token, cases[i].token);
	}
}
END_TEST

START_TEST(test_is_token)
{
	static const char *const tokens[] = { "x", "Content-Type", "a!#$%&'*+-.^_`|~z", "0" };
	static const char *const not_tokens[] = { "", "a b", "a:b", "a/b", "x\xc3\xa9", "a\tb",
	    "(a)", "a\"b", "a,b", "a;b", "a=b", "a@b", "a[b]", "{a}", "a\\b", "a?b", "<a>",
	    "a\x7f" };
	size_t i;

	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		ck_assert_msg(http_is_token(tokens[i], strlen(tokens[i])), "%s", tokens[i]);
	for (i = 0; i < sizeof(not_tokens) / sizeof(not_tokens[0]); i++)
		ck_assert_msg(!http_is_token(not_tokens[i], strlen(not_tokens[i])), "%s",
		    not_tokens[i]);
}
END_TEST

START_TEST(test_reason)
{
	check_str("200", http_reason(200), "OK");
	check_str("413", http_reason(413), "Content Too Large");
	check_str("501", http_reason(501), "Not Implemented");
	check_str("505", http_reason(505), "HTTP Version Not Supported");
	check_str("299", http_reason(299), "");
}
END_TEST

static char *
many_headers(int n, size_t *len)
{
	char *buf = malloc(64 + (size_t)n * 16);
	size_t off = (size_t)sprintf(buf, "GET / HTTP/1.1\r\nHost: a\r\n");

	for (int i = 1; i < n; i++)
		off += (size_t)sprintf(buf + off, "X-%d: v\r\n", i);
	off += (size_t)sprintf(buf + off, "\r\n");
	*len = off;
	return buf;
}

START_TEST(test_request_max_headers)
{
	struct http_request req;
	size_t len;
	char *buf = many_headers(HTTP_MAX_HEADERS, &len);

	ck_assert_int_eq(http_parse_request(buf, len, &req), (ssize_t)len);
	ck_assert_uint_eq(req.nheaders, HTTP_MAX_HEADERS);
	free(buf);
	buf = many_headers(HTTP_MAX_HEADERS + 1, &len);
	ck_assert_int_eq(http_parse_request(buf, len, &req), HTTP_ERR_TOO_MANY_HEADERS);
	free(buf);
}
END_TEST

/* Long values and targets cross the eight-byte fast path at every alignment. */
START_TEST(test_request_scan_alignment)
{
	struct http_request req;
	char buf[512];

	for (int pad = 0; pad < 24; pad++) {
		for (int bad = 0; bad < 2; bad++) {
			int n = snprintf(buf, sizeof(buf), "GET /%.*s HTTP/1.1\r\nHost: a\r\n"
			    "X: v%.*s%s%.*s\r\n\r\n", pad, "abcdefghijklmnopqrstuvwxyz",
			    pad, "abcdefghijklmnopqrstuvwxyz", bad ? "\x1f" : "\t",
			    17, "abcdefghijklmnopqrstuvwxyz");
			ssize_t r = http_parse_request(buf, (size_t)n, &req);
			if (bad)
				ck_assert_int_eq(r, HTTP_ERR_MALFORMED);
			else {
				ck_assert_int_eq(r, n);
				ck_assert_uint_eq(req.headers[1].value.len, (size_t)pad + 19);
				ck_assert_uint_eq(req.path.len, (size_t)pad + 1);
			}
		}
	}
}
END_TEST

struct resp_case {
	const char *name;
	const char *in;
	ssize_t want;
	int status;
	const char *reason;
	int minor;
	int64_t cl;
	int chunked, until_close, close;
	int nheaders;
};

static const struct resp_case resp_cases[] = {
	{ "ok", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", WHOLE, 200, "OK", 1, 2, 0, 0, 0, 1 },
	{ "http/1.0", "HTTP/1.0 404 Not Found\r\n\r\n", WHOLE, 404, "Not Found", 0, -1, 0, 1, 0, 0 },
	{ "empty reason", "HTTP/1.1 204 \r\n\r\n", WHOLE, 204, "", 1, -1, 0, 1, 0, 0 },
	{ "no reason no space", "HTTP/1.1 304\r\nETag: x\r\n\r\n", WHOLE, 304, "", 1, -1, 0, 1, 0, 1 },
	{ "reason with spaces", "HTTP/1.1 599 Some  odd\treason \r\n\r\n", WHOLE,
	    599, "Some  odd\treason ", 1, -1, 0, 1, 0, 0 },
	{ "100 continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 25,
	    100, "Continue", 1, -1, 0, 1, 0, 0 },
	{ "chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", WHOLE,
	    200, "OK", 1, -1, 1, 0, 0, 1 },
	{ "TE wins over CL", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", WHOLE, 200, "OK", 1, -1, 1, 0, 1, 2 },
	{ "TE wins over bad CL", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", WHOLE, 200, "OK", 1, -1, 1, 0, 1, 2 },
	{ "TE gzip, chunked: chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    WHOLE, 200, "OK", 1, -1, 1, 0, 0, 1 },
	{ "TE gzip: until close", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", WHOLE,
	    200, "OK", 1, -1, 0, 1, 0, 1 },
	{ "TE chunked then gzip: until close", "HTTP/1.1 200 OK\r\n"
	    "Transfer-Encoding: chunked, gzip\r\n\r\n", WHOLE, 200, "OK", 1, -1, 0, 1, 0, 1 },
	{ "connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	    WHOLE, 200, "OK", 1, 0, 0, 0, 1, 2 },
	{ "identical CLs", "HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", WHOLE,
	    200, "OK", 1, 7, 0, 0, 0, 1 },
	{ "status 999", "HTTP/1.1 999 X\r\n\r\n", WHOLE, 999, "X", 1, -1, 0, 1, 0, 0 },

	{ "status 099", "HTTP/1.1 099 X\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "status 2 digits", "HTTP/1.1 20 X\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "status 4 digits", "HTTP/1.1 2000 X\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "status letters", "HTTP/1.1 2x0 X\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "bare LF status line", "HTTP/1.1 200 OK\n\r\n", HTTP_ERR_MALFORMED },
	{ "control in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "version 2", "HTTP/2.0 200 OK\r\n\r\n", HTTP_ERR_VERSION },
	{ "garbage", "HTTX/1.1 200 OK\r\n\r\n", HTTP_ERR_MALFORMED },
	{ "conflicting CLs", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "bad CL", "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", HTTP_ERR_FRAMING },
	{ "chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	    HTTP_ERR_FRAMING },
	{ "obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n  b\r\n\r\n", HTTP_ERR_MALFORMED },
};

START_TEST(test_response)
{
	const struct resp_case *c = &resp_cases[_i];
	struct http_response resp;
	size_t len = strlen(c->in);
	ssize_t want = c->want == WHOLE ? (ssize_t)len : c->want;
	char *copy = malloc(len);

	memcpy(copy, c->in, len);
	ck_assert_msg(http_parse_response(copy, len, &resp) == want, "%s", c->name);
	if (want > 0) {
		ck_assert_int_eq(resp.status, c->status);
		check_str("reason", resp.reason, c->reason);
		ck_assert_int_eq(resp.version_minor, c->minor);
		ck_assert_int_eq(resp.framing.content_length, c->cl);
		ck_assert_int_eq(resp.framing.chunked, c->chunked);
		ck_assert_int_eq(resp.framing.until_close, c->until_close);
		ck_assert_int_eq(resp.framing.conn_close, c->close);
		ck_assert_uint_eq(resp.nheaders, (size_t)c->nheaders);
		for (ssize_t k = 0; k < want; k++) {
			ssize_t r = http_parse_response(copy, (size_t)k, &resp);
			ck_assert_msg(r == HTTP_INCOMPLETE, "%s: prefix %zd gave %zd", c->name, k, r);
		}
	}
	free(copy);
}
END_TEST

/* ------------------------------------------------------------------ chunked */

struct chunk_case {
	const char *name;
	const char *in;
	int want;               /* HTTP_CHUNKED_DONE / _ERROR / _MORE */
	const char *payload;    /* decoded bytes (up to the error, for errors) */
	size_t end;             /* DONE: where the message ended; 0 means strlen(in) */
	size_t inlen;           /* for inputs holding a NUL byte; 0: strlen(in) */
};

static const struct chunk_case chunk_cases[] = {
	{ "simple", "5\r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, "hello" },
	{ "two chunks", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, "abcde" },
	{ "hex upper and lower", "a\r\n0123456789\r\nB\r\nabcdefghijk\r\n0\r\n\r\n",
	    HTTP_CHUNKED_DONE, "0123456789abcdefghijk" },
	{ "leading zeros", "0005\r\nhello\r\n000\r\n\r\n", HTTP_CHUNKED_DONE, "hello" },
	{ "empty body", "0\r\n\r\n", HTTP_CHUNKED_DONE, "" },
	{ "extensions", "5;name=val;x=\"q;\"\r\nhello\r\n0;last\r\n\r\n", HTTP_CHUNKED_DONE, "hello" },
	{ "BWS before extension", "5 ;a\r\nhello\r\n0\t \t;b\r\n\r\n", HTTP_CHUNKED_DONE, "hello" },
	{ "trailers", "2\r\nhi\r\n0\r\nX-Sum: 1\r\nY: \r\n\r\n", HTTP_CHUNKED_DONE, "hi" },
	{ "CRLF inside data", "4\r\n\r\n\r\n\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, "\r\n\r\n" },
	{ "next message follows", "1\r\nx\r\n0\r\n\r\nGET / HTTP/1.1\r\n", HTTP_CHUNKED_DONE, "x", 11 },
	{ "incomplete data", "5\r\nhel", HTTP_CHUNKED_MORE, "hel" },
	{ "incomplete trailer", "0\r\nX: y\r\n", HTTP_CHUNKED_MORE, "" },
	{ "max size", "4000000000000000\r\nab", HTTP_CHUNKED_MORE, "ab" },

	{ "size over 2^62", "4000000000000001\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "size overflow 64 bits", "10000000000000000\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "empty size", "\r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "empty size with extension", ";x\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "non-hex size", "5g\r\nhello\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "sign", "+5\r\nhello\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "0x prefix", "0x5\r\nhello\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "space inside size", "1 2\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "space after size, no extension", "5 \r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "tab after last chunk, no extension", "2\r\nhi\r\n0\t\r\n\r\n", HTTP_CHUNKED_ERROR, "hi" },
	{ "bare LF after size", "5\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "bare LF after data", "5\r\nhello\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "hello" },
	{ "missing CRLF after data", "5\r\nhelloX\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "hello" },
	{ "data longer than size", "2\r\nabc\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, "ab" },
	{ "CR without LF", "5\rhello", HTTP_CHUNKED_ERROR, "" },
	{ "LF in extension", "5;a\nb\r\nhello\r\n", HTTP_CHUNKED_ERROR, "" },
	{ .name = "NUL in extension", .in = NUL_EXT, .inlen = sizeof(NUL_EXT) - 1,
	    .want = HTTP_CHUNKED_ERROR, .payload = "" },
	{ "bare LF ends trailers", "0\r\nX: y\r\n\n", HTTP_CHUNKED_ERROR, "" },
	{ "bare LF last chunk", "0\r\n\n", HTTP_CHUNKED_ERROR, "" },
	{ "folded trailer", "0\r\nX: y\r\n z\r\n\r\n", HTTP_CHUNKED_ERROR, "" },
	{ "control in trailer", "0\r\nX: \x01\r\n\r\n", HTTP_CHUNKED_ERROR, "" },
};

/* Feed in pieces of at most step bytes (0: all at once); collect payload and the end. */
static int
chunk_run(const char *in, size_t len, size_t step, char *out, size_t *outlen, size_t *end)
{
	struct http_chunked c;
	size_t pos = 0;
	int r = HTTP_CHUNKED_MORE;

	http_chunked_init(&c);
	*outlen = 0;
	*end = 0;
	while (pos < len) {
		size_t n = step == 0 || len - pos < step ? len - pos : step;
		size_t off = 0;

		while (off < n) {
			size_t consumed, doff, dlen;

			r = http_chunked_feed(&c, in + pos + off, n - off, &consumed, &doff, &dlen);
			ck_assert_uint_le(consumed, n - off);
			if (r == HTTP_CHUNKED_DATA) {
				ck_assert_uint_le(doff + dlen, consumed);
				ck_assert_uint_gt(dlen, 0);
				memcpy(out + *outlen, in + pos + off + doff, dlen);
				*outlen += dlen;
			}
			off += consumed;
			if (r == HTTP_CHUNKED_DONE) {
				*end = pos + off;
				return r;
			}
			if (r == HTTP_CHUNKED_ERROR)
				return r;
			if (r == HTTP_CHUNKED_MORE)
				ck_assert_uint_eq(off, n);
		}
		pos += n;
	}
	return r == HTTP_CHUNKED_DATA ? HTTP_CHUNKED_MORE : r;
}

static size_t
chunk_case_len(const struct chunk_case *c)
{
	return c->inlen ? c->inlen : strlen(c->in);
}

START_TEST(test_chunked)
{
	const struct chunk_case *c = &chunk_cases[_i];
	size_t len = chunk_case_len(c);
	char *in = malloc(len), *out = malloc(len + 1);
	size_t want_end = c->end ? c->end : len;
	static const size_t steps[] = { 0, 1, 2, 3, 7 };

	memcpy(in, c->in, len);
	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		size_t outlen, end;
		int r = chunk_run(in, len, steps[s], out, &outlen, &end);

		ck_assert_msg(r == c->want, "%s step %zu: got %d want %d", c->name, steps[s], r, c->want);
		ck_assert_msg(outlen == strlen(c->payload) && memcmp(out, c->payload, outlen) == 0,
		    "%s step %zu: payload \"%.*s\"", c->name, steps[s], (int)outlen, out);
		if (r == HTTP_CHUNKED_DONE)
			ck_assert_uint_eq(end, want_end);
	}
	free(in);
	free(out);
}
END_TEST

START_TEST(test_chunked_done_is_sticky)
{
	struct http_chunked c;
	size_t consumed, off, len;

	http_chunked_init(&c);
	ck_assert_int_eq(http_chunked_feed(&c, "0\r\n\r\nXYZ", 8, &consumed, &off, &len),
	    HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(consumed, 5);
	ck_assert_int_eq(http_chunked_feed(&c, "XYZ", 3, &consumed, &off, &len), HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(consumed, 0);
	ck_assert_int_eq(http_chunked_feed(&c, "", 0, &consumed, &off, &len), HTTP_CHUNKED_DONE);
}
END_TEST

START_TEST(test_chunked_error_is_sticky)
{
	struct http_chunked c;
	size_t consumed, off, len;

	http_chunked_init(&c);
	ck_assert_int_eq(http_chunked_feed(&c, "z", 1, &consumed, &off, &len), HTTP_CHUNKED_ERROR);
	ck_assert_int_eq(http_chunked_feed(&c, "5\r\n", 3, &consumed, &off, &len),
	    HTTP_CHUNKED_ERROR);
	ck_assert_int_eq(http_chunked_feed(&c, "", 0, &consumed, &off, &len), HTTP_CHUNKED_ERROR);
}
END_TEST

/* One DATA run per call, pointing into the fragment, then the rest. */
START_TEST(test_chunked_data_runs)
{
	static const char in[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
	struct http_chunked c;
	size_t consumed, off, len;

	http_chunked_init(&c);
	ck_assert_int_eq(http_chunked_feed(&c, in, sizeof(in) - 1, &consumed, &off, &len),
	    HTTP_CHUNKED_DATA);
	ck_assert_uint_eq(off, 3);
	ck_assert_uint_eq(len, 3);
	ck_assert_uint_eq(consumed, 6);
	ck_assert_int_eq(http_chunked_feed(&c, in + 6, sizeof(in) - 7, &consumed, &off, &len),
	    HTTP_CHUNKED_DATA);
	ck_assert_uint_eq(off, 5);
	ck_assert_uint_eq(len, 2);
	ck_assert_uint_eq(consumed, 7);
	ck_assert_int_eq(http_chunked_feed(&c, in + 13, sizeof(in) - 14, &consumed, &off, &len),
	    HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(consumed, sizeof(in) - 14);
}
END_TEST

START_TEST(test_chunked_line_limits)
{
	size_t n = HTTP_CHUNKED_MAX_LINE + 16;
	char *buf = malloc(n + HTTP_CHUNKED_MAX_TRAILER + 64);
	char out[8];
	size_t outlen, end;

	/* an extension just within the bound, then one byte over */
	buf[0] = '1';
	buf[1] = ';';
	memset(buf + 2, 'e', HTTP_CHUNKED_MAX_LINE - 2);
	memcpy(buf + HTTP_CHUNKED_MAX_LINE, "\r\nx\r\n0\r\n\r\n", 10);
	ck_assert_int_eq(chunk_run(buf, HTTP_CHUNKED_MAX_LINE + 10, 0, out, &outlen, &end),
	    HTTP_CHUNKED_DONE);
	memset(buf + 2, 'e', HTTP_CHUNKED_MAX_LINE - 1);
	memcpy(buf + HTTP_CHUNKED_MAX_LINE + 1, "\r\nx\r\n0\r\n\r\n", 10);
	ck_assert_int_eq(chunk_run(buf, HTTP_CHUNKED_MAX_LINE + 11, 0, out, &outlen, &end),
	    HTTP_CHUNKED_ERROR);

	/* endless leading zeros */
	memset(buf, '0', n);
	ck_assert_int_eq(chunk_run(buf, n, 0, out, &outlen, &end), HTTP_CHUNKED_ERROR);

	/* trailers over the total bound */
	size_t k = 0;
	k += (size_t)sprintf(buf, "0\r\n");
	while (k < HTTP_CHUNKED_MAX_TRAILER + 8)
		k += (size_t)sprintf(buf + k, "X-T: 0123456789\r\n");
	memcpy(buf + k, "\r\n", 2);
	ck_assert_int_eq(chunk_run(buf, k + 2, 0, out, &outlen, &end), HTTP_CHUNKED_ERROR);
	free(buf);
}
END_TEST


/* The field grammar of RFC 9110/9112 written plainly, one byte at a time: what the parser's
 * word-at-a-time scanning must agree with. */
static int
ref_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int
ref_vchar(unsigned char c)
{
	return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f);
}

/* Headers of head[0..len) after the request line: their count (*end: where the head
 * ends), or -1 when malformed. */
static int
ref_fields(const char *h, size_t len, struct http_header *out, size_t *end)
{
	size_t i = 0;
	int n = 0;

	for (;;) {
		if (i + 1 < len && h[i] == '\r' && h[i + 1] == '\n') {
			*end = i + 2;
			return n;
		}
		size_t name = i;
		while (i < len && ref_tchar((unsigned char)h[i]))
			i++;
		if (i == name || i == len || h[i] != ':')
			return -1;
		out[n].name.p = h + name;
		out[n].name.len = i - name;
		i++;
		while (i < len && (h[i] == ' ' || h[i] == '\t'))
			i++;
		size_t val = i;
		while (i < len && ref_vchar((unsigned char)h[i]))
			i++;
		if (i + 1 >= len || h[i] != '\r' || h[i + 1] != '\n')
			return -1;
		size_t vend = i;
		while (vend > val && (h[vend - 1] == ' ' || h[vend - 1] == '\t'))
			vend--;
		out[n].value.p = h + val;
		out[n].value.len = vend - val;
		n++;
		i += 2;
	}
}

START_TEST(test_fields_against_reference)
{
	/* Bytes that matter to the scanners, letters and digits most of all. */
	static const char palette[] = "aZm9-x_!~:\t \x7f\x80\xff\x01\"(@{";
	static struct http_request req;
	struct http_header want[HTTP_MAX_HEADERS];
	char head[512];
	uint64_t rng = 0x9e3779b97f4a7c15ULL;
	unsigned agreed = 0;

	for (int round = 0; round < 20000; round++) {
		/* Host first: a request without one is malformed whatever its fields. */
		size_t len = (size_t)snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nHost: a\r\n");
		size_t fields = len - 9;
		int lines = 1 + round % 4;

		for (int l = 0; l < lines; l++) {
			int parts = 1 + (int)(rng >> 60);
			for (int k = 0; k < parts && len < 400; k++) {
				rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
				unsigned pick = (unsigned)(rng >> 33);
				/* Mostly runs of name letters, now and then any byte of the palette. */
				if (pick % 4 != 0) {
					size_t run = pick / 4 % 13;
					for (size_t r = 0; r < run; r++)
						head[len++] = "Content-Type0"[(pick + r) % 13];
				} else
					head[len++] = palette[pick / 4 % (sizeof(palette) - 1)];
				if (k == 0 && pick % 3 != 0) {
					memcpy(head + len, ": ", 2);
					len += 2;
				}
			}
			memcpy(head + len, "\r\n", 2);
			len += 2;
		}
		memcpy(head + len, "\r\n", 2);
		len += 2;
		size_t end = 0;
		int n = ref_fields(head + fields, len - fields, want, &end);
		ssize_t r = http_parse_request(head, len, &req);
		if (n < 0) {
			ck_assert_msg(r < 0 && r != HTTP_INCOMPLETE, "round %d: accepted a malformed head",
			    round);
			continue;
		}
		if (r < 0 && r != HTTP_INCOMPLETE) {
			/* Field lines the reference takes may still break a rule on their
			 * meaning (two Content-Length values, say): only framing errors count. */
			ck_assert_int_ne(r, HTTP_ERR_MALFORMED);
			continue;
		}
		ck_assert_int_eq(r, (ssize_t)(fields + end));
		ck_assert_uint_eq(req.nheaders, (size_t)n);
		for (int i = 0; i < n; i++) {
			ck_assert_ptr_eq(req.headers[i].name.p, want[i].name.p);
			ck_assert_uint_eq(req.headers[i].name.len, want[i].name.len);
			ck_assert_ptr_eq(req.headers[i].value.p, want[i].value.p);
			ck_assert_uint_eq(req.headers[i].value.len, want[i].value.len);
		}
		agreed++;
	}
	ck_assert_uint_gt(agreed, 2000);        /* well-formed heads were made too */
}
END_TEST

/* A chunked body spread over several buffer chains, read a piece at a time: from an offset
 * without taking it (as the route scan and health checks read), then taken into a buffer. */
START_TEST(test_chunked_over_an_evbuffer)
{
	static const char *parts[] = { "GET-HEAD|", "5;x=1\r\nhel", "lo\r\n3\r", "\nabc\r\n0\r\n",
	    "T: v\r\n\r\nNEXT" };
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
	struct http_chunk_piece p;
	struct http_chunked ch;
	struct http_answer_body chunks = { HTTP_ANSWER_CHUNKED, NULL, &ch };
	char data[64];
	size_t at = 9, got = 0, i;
	int r;

	for (i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		evbuffer_add_reference(in, parts[i], strlen(parts[i]), NULL, NULL);
	http_chunked_init(&ch);
	while ((r = http_chunked_next(&ch, in, at, (size_t)-1, &p)) != HTTP_CHUNKED_NONE &&
	    r != HTTP_CHUNKED_DONE) {
		ck_assert_int_ne(r, HTTP_CHUNKED_ERROR);
		ck_assert_uint_gt(p.consumed, 0);
		if (r == HTTP_CHUNKED_DATA) {
			memcpy(data + got, p.data, p.data_len);
			got += p.data_len;
		}
		at += p.consumed;
	}
	ck_assert_int_eq(r, HTTP_CHUNKED_DONE);
	at += p.consumed;
	ck_assert_uint_eq(got, 8);
	ck_assert(memcmp(data, "helloabc", 8) == 0);
	ck_assert_uint_eq(at, evbuffer_get_length(in) - 4);     /* NEXT stays */
	ck_assert_int_eq(http_chunked_next(&ch, in, evbuffer_get_length(in), (size_t)-1, &p),
	    HTTP_CHUNKED_NONE);

	/* Taken from the front: the data moved, the framing dropped, what follows kept. */
	evbuffer_drain(in, 9);
	http_chunked_init(&ch);
	while ((r = http_answer_take(&chunks, in, 0, out)) != HTTP_CHUNKED_NONE &&
	    r != HTTP_CHUNKED_DONE)
		ck_assert_int_ne(r, HTTP_CHUNKED_ERROR);
	ck_assert_int_eq(r, HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(evbuffer_get_length(out), 8);
	ck_assert(memcmp(evbuffer_pullup(out, -1), "helloabc", 8) == 0);
	ck_assert_uint_eq(evbuffer_get_length(in), 4);
	ck_assert(memcmp(evbuffer_pullup(in, -1), "NEXT", 4) == 0);

	/* Broken framing says so; max bounds what is looked at. */
	evbuffer_drain(in, 4);
	evbuffer_add(in, "zz\r\n", 4);
	http_chunked_init(&ch);
	ck_assert_int_eq(http_answer_take(&chunks, in, 0, out), HTTP_CHUNKED_ERROR);
	evbuffer_drain(in, evbuffer_get_length(in));
	evbuffer_add(in, "5\r\nhello\r\n", 10);
	http_chunked_init(&ch);
	ck_assert_int_eq(http_chunked_next(&ch, in, 0, 2, &p), HTTP_CHUNKED_MORE);
	ck_assert_uint_eq(p.consumed, 2);
	evbuffer_free(in);
	evbuffer_free(out);
}
END_TEST

/* An answer framed by its length stops there (what follows is not its); one framed by the
 * close takes all that comes and ends at the close. */
START_TEST(test_answer_length_and_close)
{
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
	struct http_chunk_piece p;
	uint64_t left = 7;
	struct http_answer_body length = { HTTP_ANSWER_LENGTH, &left, NULL };
	struct http_answer_body close = { HTTP_ANSWER_CLOSE, NULL, NULL };

	evbuffer_add(in, "abc", 3);
	ck_assert_int_eq(http_answer_next(&length, in, 1, (size_t)-1, 0, &p), HTTP_CHUNKED_DATA);
	ck_assert_uint_eq(p.consumed, 2);
	ck_assert_uint_eq(p.data_len, 2);
	ck_assert_uint_eq(p.data_off, 0);
	ck_assert_uint_eq(left, 5);
	left = 7;
	ck_assert_int_eq(http_answer_take(&length, in, 0, out), HTTP_CHUNKED_DATA);
	ck_assert_int_eq(http_answer_take(&length, in, 0, out), HTTP_CHUNKED_NONE);
	evbuffer_add(in, "defgNEXT", 8);
	ck_assert_int_eq(http_answer_take(&length, in, 0, out), HTTP_CHUNKED_DATA);
	ck_assert_int_eq(http_answer_take(&length, in, 0, out), HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(left, 0);
	ck_assert(memcmp(evbuffer_pullup(out, -1), "abcdefg", 7) == 0);
	ck_assert_uint_eq(evbuffer_get_length(out), 7);
	ck_assert(memcmp(evbuffer_pullup(in, -1), "NEXT", 4) == 0);

	ck_assert_int_eq(http_answer_take(&close, in, 0, out), HTTP_CHUNKED_DATA);
	ck_assert_int_eq(http_answer_take(&close, in, 0, out), HTTP_CHUNKED_NONE);
	ck_assert_int_eq(http_answer_take(&close, in, 1, out), HTTP_CHUNKED_DONE);
	ck_assert_uint_eq(evbuffer_get_length(out), 11);
	ck_assert_uint_eq(evbuffer_get_length(in), 0);
	evbuffer_free(in);
	evbuffer_free(out);
}
END_TEST

static Suite *
http_suite(void)
{
	Suite *s = suite_create("http");
	TCase *tc = tcase_create("request");

	tcase_add_loop_test(tc, test_request, 0, sizeof(req_cases) / sizeof(req_cases[0]));
	tcase_add_loop_test(tc, test_request_prefixes, 0, sizeof(req_cases) / sizeof(req_cases[0]));
	tcase_add_loop_test(tc, test_request_error_prefixes, 0,
	    sizeof(req_cases) / sizeof(req_cases[0]));
	tcase_add_test(tc, test_request_headers);
	tcase_add_test(tc, test_list_next);
	tcase_add_test(tc, test_ieq);
	tcase_add_test(tc, test_is_token);
	tcase_add_test(tc, test_elements);
	tcase_add_test(tc, test_weight);
	tcase_add_test(tc, test_reason);
	tcase_add_test(tc, test_request_max_headers);
	tcase_add_test(tc, test_request_scan_alignment);
	tcase_add_test(tc, test_fields_against_reference);
	suite_add_tcase(s, tc);

	tc = tcase_create("response");
	tcase_add_loop_test(tc, test_response, 0, sizeof(resp_cases) / sizeof(resp_cases[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("chunked");
	tcase_add_loop_test(tc, test_chunked, 0, sizeof(chunk_cases) / sizeof(chunk_cases[0]));
	tcase_add_test(tc, test_chunked_done_is_sticky);
	tcase_add_test(tc, test_chunked_error_is_sticky);
	tcase_add_test(tc, test_chunked_data_runs);
	tcase_add_test(tc, test_chunked_line_limits);
	tcase_add_test(tc, test_chunked_over_an_evbuffer);
	tcase_add_test(tc, test_answer_length_and_close);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(http_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
