/* Path normalisation: dot segments (RFC 3986 5.2.4, "%2e" a dot too), merged slashes, and
 * the request head rewritten around the normal path. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "path_norm.h"

/* The normal form of path: itself when already normal (checked to be left alone), "ERR"
 * above the root.  Done into a copy and in place, which must agree. */
static const char *
norm(const char *path)
{
	static char out[256];
	char in[256], guard[256 + 8];
	size_t len = strlen(path), n = 0, m = 0;
	int r, r2;

	ck_assert_uint_lt(len, sizeof(in));
	memset(guard, 'Z', sizeof(guard));
	r = path_norm(path, len, guard, &n);
	/* never a byte past len, nothing at all when the path is already normal */
	ck_assert(memcmp(guard + (r == PATH_NORM_ASIS ? 0 : len), "ZZZZZZZZ", 8) == 0);
	memcpy(in, path, len);
	r2 = path_norm(in, len, in, &m);
	ck_assert_int_eq(r, r2);
	if (r == PATH_NORM_ABOVE_ROOT)
		return "ERR";
	if (r == PATH_NORM_ASIS) {
		ck_assert(memcmp(in, path, len) == 0);
		return path;
	}
	ck_assert_uint_eq(n, m);
	ck_assert_uint_le(n, len);
	ck_assert(memcmp(guard, in, n) == 0);
	memcpy(out, guard, n);
	out[n] = '\0';
	/* the normal form is normal */
	ck_assert_int_eq(path_norm(out, n, in, &m), PATH_NORM_ASIS);
	return out;
}

/* RFC 3986 5.4.1 and 5.4.2 (the references that are relative paths) resolved against the
 * base path "/b/c/d;p": the merged path "/b/c/" + reference, normalised. */
START_TEST(test_rfc3986_examples)
{
	static const char *const cases[][2] = {
		{ "g", "/b/c/g" }, { "./g", "/b/c/g" }, { "g/", "/b/c/g/" }, { ";x", "/b/c/;x" },
		{ "g;x", "/b/c/g;x" }, { ".", "/b/c/" }, { "./", "/b/c/" }, { "..", "/b/" },
		{ "../", "/b/" }, { "../g", "/b/g" }, { "../..", "/" }, { "../../", "/" },
		{ "../../g", "/g" },
		/* abnormal examples: RFC 3986 drops a ".." above the root, the gateway refuses it */
		{ "../../../g", "ERR" }, { "../../../../g", "ERR" },
		{ "g.", "/b/c/g." }, { ".g", "/b/c/.g" }, { "g..", "/b/c/g.." }, { "..g", "/b/c/..g" },
		{ "./../g", "/b/g" }, { "./g/.", "/b/c/g/" }, { "g/./h", "/b/c/g/h" },
		{ "g/../h", "/b/c/h" }, { "g;x=1/./y", "/b/c/g;x=1/y" }, { "g;x=1/../y", "/b/c/y" },
	};
	char path[64];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(path, sizeof(path), "/b/c/%s", cases[i][0]);
		ck_assert_msg(strcmp(norm(path), cases[i][1]) == 0, "%s -> %s, not %s", path,
		    norm(path), cases[i][1]);
	}
	/* 5.2.4's own walk-throughs, as paths */
	ck_assert_str_eq(norm("/a/b/c/./../../g"), "/a/g");
	ck_assert_str_eq(norm("/mid/content=5/../6"), "/mid/6");
	/* "/../g" and "/./g" of 5.4.2 from the root */
	ck_assert_str_eq(norm("/../g"), "ERR");
	ck_assert_str_eq(norm("/./g"), "/g");
}
END_TEST

START_TEST(test_percent_dots)
{
	ck_assert_str_eq(norm("/v1/x/%2e%2e/y"), "/v1/y");
	ck_assert_str_eq(norm("/v1/x/%2E%2E/y"), "/v1/y");
	ck_assert_str_eq(norm("/v1/x/.%2e/y"), "/v1/y");
	ck_assert_str_eq(norm("/v1/x/%2E./y"), "/v1/y");
	ck_assert_str_eq(norm("/v1/%2e/y"), "/v1/y");
	ck_assert_str_eq(norm("/v1/x/%2e%2e"), "/v1/");
	ck_assert_str_eq(norm("/%2e%2e/debug"), "ERR");
	ck_assert_str_eq(norm("/v1/orders/%2e%2e/%2E%2e/debug/vars"), "/debug/vars");
	ck_assert_str_eq(norm("/v1/orders/%2e%2e/%2E%2e/%2e./debug/vars"), "ERR");
	/* not dots: three of them, other escapes, a double-encoded dot, a bare '%' */
	ck_assert_str_eq(norm("/v1/%2e%2e%2e/y"), "/v1/%2e%2e%2e/y");
	ck_assert_str_eq(norm("/v1/.../y"), "/v1/.../y");
	ck_assert_str_eq(norm("/v1/%252e%252e/y"), "/v1/%252e%252e/y");
	ck_assert_str_eq(norm("/v1/%2f/y"), "/v1/%2f/y");
	ck_assert_str_eq(norm("/v1/%2/y"), "/v1/%2/y");
	ck_assert_str_eq(norm("/v1/%2e%2/y"), "/v1/%2e%2/y");
	ck_assert_str_eq(norm("/v1/%2ex/y"), "/v1/%2ex/y");
	ck_assert_str_eq(norm("/v1/%3e/y"), "/v1/%3e/y");
}
END_TEST

START_TEST(test_encoded_slash)
{
	/* "%2F" is a byte of its segment, not a separator: nothing to climb out of */
	ck_assert_str_eq(norm("/a%2Fb"), "/a%2Fb");
	ck_assert_str_eq(norm("/a/..%2F..%2Fetc"), "/a/..%2F..%2Fetc");
	ck_assert_str_eq(norm("/a/b%2F../c"), "/a/b%2F../c");
	ck_assert_str_eq(norm("/a/b%2F/../c"), "/a/c");
	ck_assert_str_eq(norm("/x/%2F/./y"), "/x/%2F/y");
}
END_TEST

START_TEST(test_above_root)
{
	ck_assert_str_eq(norm("/.."), "ERR");
	ck_assert_str_eq(norm("/../"), "ERR");
	ck_assert_str_eq(norm("/a/../.."), "ERR");
	ck_assert_str_eq(norm("/v1/orders/../../../debug/vars"), "ERR");
	ck_assert_str_eq(norm("/v1/orders/../x/../../../debug/vars"), "ERR");
	/* back to the root is fine */
	ck_assert_str_eq(norm("/a/.."), "/");
	ck_assert_str_eq(norm("/a/../"), "/");
	ck_assert_str_eq(norm("/v1/orders/../../"), "/");
	ck_assert_str_eq(norm("/v1/orders/../../debug/vars"), "/debug/vars");
	ck_assert_str_eq(norm("/."), "/");
	ck_assert_str_eq(norm("/./"), "/");
}
END_TEST

START_TEST(test_slashes)
{
	ck_assert_str_eq(norm("//"), "/");
	ck_assert_str_eq(norm("//admin"), "/admin");
	ck_assert_str_eq(norm("/a//b"), "/a/b");
	ck_assert_str_eq(norm("/a///b//"), "/a/b/");
	ck_assert_str_eq(norm("/a//"), "/a/");
	/* an empty segment is no segment: ".." does not eat it */
	ck_assert_str_eq(norm("/a//../b"), "/b");
	ck_assert_str_eq(norm("//.."), "ERR");
	ck_assert_str_eq(norm("/v1/orders/./1/../2"), "/v1/orders/2");
}
END_TEST

START_TEST(test_as_is)
{
	/* already normal, dots inside segments and a trailing slash included: left alone */
	ck_assert_str_eq(norm("/"), "/");
	ck_assert_str_eq(norm("/v1/orders/"), "/v1/orders/");
	ck_assert_str_eq(norm("/v1/orders.json"), "/v1/orders.json");
	ck_assert_str_eq(norm("/.well-known/x"), "/.well-known/x");
	ck_assert_str_eq(norm("/a/.b/c./..d/e../%2ex"), "/a/.b/c./..d/e../%2ex");
	/* not origin-form paths: "*", an authority, nothing */
	ck_assert_str_eq(norm("*"), "*");
	ck_assert_str_eq(norm("example.com:443"), "example.com:443");
	ck_assert_str_eq(norm(""), "");
	ck_assert_str_eq(norm("a/../.."), "a/../..");
}
END_TEST

/* The head rewritten in place: what a worker parses again and sends on. */
static const char *
head(const char *text, ssize_t *shift)
{
	static char buf[512];
	struct http_request req;
	size_t len = strlen(text);
	ssize_t r;

	memcpy(buf, text, len + 1);
	r = http_parse_request(buf, len, &req);
	ck_assert_int_eq(r, (ssize_t)len);
	*shift = path_norm_head(buf, len, &req);
	if (*shift < 0)
		return "ERR";
	/* parsed again, the head is whole */
	ck_assert_int_eq(http_parse_request(buf + *shift, len - (size_t)*shift, &req),
	    (ssize_t)len - *shift);
	return buf + *shift;
}

START_TEST(test_head)
{
	ssize_t shift;

	ck_assert_str_eq(head("GET /v1/orders/./1/../2?a=/../b HTTP/1.1\r\nHost: h\r\n\r\n",
	    &shift), "GET /v1/orders/2?a=/../b HTTP/1.1\r\nHost: h\r\n\r\n");
	ck_assert_int_eq(shift, 7);
	ck_assert_str_eq(head("PUT /a/%2e%2E/b HTTP/1.1\r\nHost: h\r\n\r\n", &shift),
	    "PUT /b HTTP/1.1\r\nHost: h\r\n\r\n");
	ck_assert_int_eq(shift, 9);
	/* the request's query is not a path: its dots stay */
	ck_assert_str_eq(head("GET /a?../..//x HTTP/1.1\r\nHost: h\r\n\r\n", &shift),
	    "GET /a?../..//x HTTP/1.1\r\nHost: h\r\n\r\n");
	ck_assert_int_eq(shift, 0);
	ck_assert_str_eq(head("GET /v1/orders/../../../debug/vars HTTP/1.1\r\nHost: h\r\n\r\n",
	    &shift), "ERR");
	ck_assert_int_eq(shift, PATH_NORM_ABOVE_ROOT);
	/* absolute-form: the authority stays before the normal path */
	ck_assert_str_eq(head("GET http://h.example/x/../y?q HTTP/1.1\r\nHost: h.example\r\n"
	    "\r\n", &shift), "GET http://h.example/y?q HTTP/1.1\r\nHost: h.example\r\n\r\n");
	ck_assert_str_eq(head("GET http://h.example HTTP/1.1\r\nHost: h.example\r\n\r\n",
	    &shift), "GET http://h.example HTTP/1.1\r\nHost: h.example\r\n\r\n");
	ck_assert_str_eq(head("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", &shift),
	    "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
	/* empty lines before the request line move with it */
	ck_assert_str_eq(head("\r\nGET //a HTTP/1.1\r\nHost: h\r\n\r\n", &shift),
	    "\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n");
}
END_TEST

static Suite *
path_norm_suite(void)
{
	Suite *s = suite_create("path_norm");
	TCase *tc = tcase_create("path_norm");

	tcase_add_test(tc, test_rfc3986_examples);
	tcase_add_test(tc, test_percent_dots);
	tcase_add_test(tc, test_encoded_slash);
	tcase_add_test(tc, test_above_root);
	tcase_add_test(tc, test_slashes);
	tcase_add_test(tc, test_as_is);
	tcase_add_test(tc, test_head);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(path_norm_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
