/* Templates with ${variables}: parsing against a scope, rendering with percent-encoding. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http.h"
#include "route.h"
#include "template.h"

static struct route_pattern *pattern;
static const char *backend_names[] = { "user", "user.v2" };
static const unsigned backend_index[] = { 3, 5 };

static void
setup(void)
{
	const char *why;

	pattern = route_pattern_new("/users/{id}/files/{rest...}", &why);
	ck_assert_ptr_nonnull(pattern);
}

static void
teardown(void)
{
	route_pattern_free(pattern);
}

static struct template_scope
scope(void)
{
	struct template_scope s = { pattern, backend_names, backend_index, 2 };

	return s;
}

/* The error parsing text gives, or "" when it parses. */
static const char *
parse_error(const char *text, int target)
{
	static char err[512];
	struct template_scope s = scope();
	struct template t;

	if (template_parse(&t, text, target, &s, err, sizeof(err)) == 0) {
		template_free(&t);
		return "";
	}
	return err;
}

static unsigned last_backend;
static char last_field[64];

static int
field_cb(void *arg, unsigned backend, const char *field, size_t len, struct http_str *value,
    const char **why)
{
	(void)arg;
	last_backend = backend;
	snprintf(last_field, sizeof(last_field), "%.*s", (int)len, field);
	if (strcmp(last_field, "missing") == 0) {
		*why = "no such field";
		return -1;
	}
	if (strcmp(last_field, "crlf") == 0) {
		*value = (struct http_str){ "a\r\nb", 4 };
		return 0;
	}
	if (strcmp(last_field, "dots") == 0) {
		*value = (struct http_str){ "a/..", 4 };
		return 0;
	}
	*value = (struct http_str){ "42/x y", 6 };
	return 0;
}

/* A verified token's claims: sub and tier; others missing. */
static int
claim_cb(void *arg, const char *path, size_t len, struct http_str *value)
{
	(void)arg;
	if (len == 3 && memcmp(path, "sub", 3) == 0) {
		*value = (struct http_str){ "ann b/..", 8 };
		return 0;
	}
	if (len == 8 && memcmp(path, "org.tier", 8) == 0) {
		*value = (struct http_str){ "gold\r\n", 6 };
		return 0;
	}
	return -1;
}

/* Render text for a request "GET target" with headers, path captures from the pattern. */
static const char *
render(const char *text, int target, const char *request, int *result)
{
	static char out[1024];
	static struct http_request req;
	struct template_scope s = scope();
	struct http_str caps[ROUTE_MAX_CAPTURES];
	struct template_values v;
	struct evbuffer *buf = evbuffer_new();
	struct template t;
	char err[512];
	size_t n;

	ck_assert_int_eq(template_parse(&t, text, target, &s, err, sizeof(err)), 0);
	ck_assert_int_gt(http_parse_request(request, strlen(request), &req), 0);
	memset(caps, 0, sizeof(caps));
	route_pattern_match(pattern, req.path.p, req.path.len, caps);
	v.req = &req;
	v.captures = caps;
	v.request_id = "r-1";
	v.remote_addr = "10.0.0.1";
	v.backend = field_cb;
	v.backend_arg = NULL;
	v.claim = claim_cb;
	v.claim_arg = NULL;
	v.api_key = "partner-1";
	*result = template_render(&t, &v, buf, err, sizeof(err));
	if (*result != 0) {
		snprintf(out, sizeof(out), "%s", err);
	} else {
		n = evbuffer_get_length(buf);
		ck_assert_uint_lt(n, sizeof(out));
		evbuffer_remove(buf, out, n);
		out[n] = '\0';
	}
	evbuffer_free(buf);
	template_free(&t);
	return out;
}

#define REQ(target, headers) "GET " target " HTTP/1.1\r\nHost: h\r\n" headers "\r\n"

START_TEST(test_parse_errors)
{
	ck_assert_str_eq(parse_error("/a/${path.id}/${query.q}/${header.X-Y}", 1), "");
	ck_assert_str_eq(parse_error("/a/${request_id}?x=${remote_addr}&c=$$1", 1), "");
	ck_assert_str_eq(parse_error("/${backend.user.id}/${backend.user.v2.a.b}", 1), "");
	ck_assert_str_eq(parse_error("/${path.idd}", 1),
	    "${path.idd}: the route's path template has no {idd}");
	ck_assert_str_eq(parse_error("/${foo}", 1), "unknown variable ${foo} (expected "
	    "${path.NAME}, ${query.NAME}, ${header.NAME}, ${backend.NAME.FIELD}, ${request_id}, "
	    "${remote_addr}, ${jwt.CLAIM} or ${api_key}; $$ for a literal $)");
	ck_assert_str_eq(parse_error("/$id", 1), "a '$' starts ${NAME} or $$ (a literal $)");
	ck_assert_str_eq(parse_error("/${path.id", 1), "'${' without its '}'");
	ck_assert_str_eq(parse_error("/${backend.orders.id}", 1), "${backend.orders.id}: only "
	    "the answer of a backend named in after can be read, as ${backend.NAME.FIELD}");
	ck_assert_str_eq(parse_error("/${backend.user.}", 1), "${backend.user.}: only the "
	    "answer of a backend named in after can be read, as ${backend.NAME.FIELD}");
	ck_assert_str_eq(parse_error("/${backend.user.a..b}", 1),
	    "${backend.user.a..b}: a field is names joined by dots");
	ck_assert_str_eq(parse_error("/${header.a b}", 1), "${header.a b}: not a header name");
	ck_assert_str_eq(parse_error("/a b", 1),
	    "a request-target holds visible ASCII characters only, without '#'");
	ck_assert_str_eq(parse_error("/a#b", 1),
	    "a request-target holds visible ASCII characters only, without '#'");
	ck_assert_str_eq(parse_error("a\nb", 0), "a header value cannot hold a line break");
	ck_assert_str_eq(parse_error("a b #${path.id}", 0), "");
}
END_TEST

START_TEST(test_parse_without_pattern)
{
	struct template_scope s = { NULL, NULL, NULL, 0 };
	struct template t;
	char err[256];

	ck_assert_int_eq(template_parse(&t, "/${path.id}", 1, &s, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "${path.id}: the route's match.path is not a path template");
}
END_TEST

START_TEST(test_render_target)
{
	int r;

	ck_assert_str_eq(render("/u/${path.id}/f/${path.rest}?q=${query.q}&r=${path.rest}", 1,
	    REQ("/users/a%2Fb%20c/files/x/y%20z?q=1+2%263&p", ""), &r),
	    "/u/a%2Fb%20c/f/x/y%20z?q=1%202%263&r=x%2Fy%20z");
	ck_assert_int_eq(r, 0);
	ck_assert_str_eq(render("/${query.missing}/${query.a b}/${query.p}$$/${request_id}", 1,
	    REQ("/users/1/files/?%61+b=%C3%A9&p&a+b=2", ""), &r), "//%C3%A9/$/r-1");
	ck_assert_str_eq(render("/${header.x-tenant}?ip=${remote_addr}", 1,
	    REQ("/users/1/files/", "X-Tenant: Acme Corp/é\r\n"), &r),
	    "/Acme%20Corp%2F%C3%A9?ip=10.0.0.1");
	ck_assert_str_eq(render("/${path.id}%41~", 1, REQ("/users/%zz-._~/files/", ""), &r),
	    "/%25zz-._~%41~");
}
END_TEST

START_TEST(test_render_rest_keeps_encoded_slashes)
{
	int r;

	ck_assert_str_eq(render("/s/${path.rest}?q=${path.rest}", 1,
	    REQ("/users/1/files/a%2Fb/c%2f/d", ""), &r), "/s/a%2Fb/c%2F/d?q=a%2Fb%2Fc%2F%2Fd");
	ck_assert_str_eq(render("/s/${path.id}", 1, REQ("/users/a%2Fb/files/", ""), &r),
	    "/s/a%2Fb");
}
END_TEST

/* What template_dot_segment says of text for a request "GET target" (with an X-T header):
 * "" when nothing; render must say the same. */
static const char *
dot_segment(const char *text, const char *target)
{
	static char err[512];
	static struct http_request req;
	char request[512];
	const char *rendered;
	struct template_scope s = scope();
	struct http_str caps[ROUTE_MAX_CAPTURES];
	struct template_values v;
	struct template t;
	int r;

	snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: h\r\nX-T: a/.\r\n\r\n",
	    target);
	ck_assert_int_eq(template_parse(&t, text, 1, &s, err, sizeof(err)), 0);
	ck_assert_int_gt(http_parse_request(request, strlen(request), &req), 0);
	memset(caps, 0, sizeof(caps));
	ck_assert_int_eq(route_pattern_match(pattern, req.path.p, req.path.len, caps), 1);
	memset(&v, 0, sizeof(v));
	v.req = &req;
	v.captures = caps;
	err[0] = '\0';
	r = template_dot_segment(&t, &v, err, sizeof(err));
	ck_assert_int_eq(r, err[0] != '\0' ? TEMPLATE_BAD_VALUE : 0);
	template_free(&t);
	rendered = render(text, 1, request, &r);
	if (err[0] != '\0')
		ck_assert_str_eq(rendered, err);
	ck_assert_int_eq(r, err[0] != '\0' ? TEMPLATE_BAD_VALUE : 0);
	return err;
}

START_TEST(test_dot_segment)
{
	static const char *const bad[] = {
		"/users/1/files/..", "/users/1/files/.", "/users/1/files/a/../b",
		"/users/1/files/a/./b", "/users/1/files/..%2F..%2Fadmin", "/users/1/files/%2e%2E",
		"/users/1/files/.%2e/x", "/users/1/files/a%2F.",
	};
	static const char *const good[] = {
		"/users/1/files/...", "/users/1/files/a./.b", "/users/1/files/", "/users/1/files/a",
		"/users/1/files/%2E%2E%2E/x", "/users/1/files/.a/b.", "/users/1/files/%2E%zz",
		"/users/1/files/x//y/",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(strcmp(dot_segment("/s/${path.rest}", bad[i]), "${path.rest} holds a "
		    "dot segment ('.' or '..'), which cannot go in a path") == 0, "%s", bad[i]);
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(dot_segment("/s/${path.rest}", good[i])[0] == '\0', "%s", good[i]);
	ck_assert_str_eq(dot_segment("/s/${path.id}", "/users/%2E./files/"), "${path.id} holds a "
	    "dot segment ('.' or '..'), which cannot go in a path");
	ck_assert_str_eq(dot_segment("/s/x${path.id}", "/users/../files/"), "${path.id} holds a "
	    "dot segment ('.' or '..'), which cannot go in a path");
	/* in the query it is only text */
	ck_assert_str_eq(dot_segment("/s?q=${path.rest}", "/users/1/files/../.."), "");
	ck_assert_str_eq(dot_segment("/s/${path.id}?q=${path.rest}", "/users/1/files/.."), "");
	/* any value of the request, in the path */
	ck_assert_str_eq(dot_segment("/s/${query.q}", "/users/1/files/?q=a%2F%2E+"), "");
	ck_assert_str_eq(dot_segment("/s/${query.q}", "/users/1/files/?q=a%2F%2E"), "${query.q} "
	    "holds a dot segment ('.' or '..'), which cannot go in a path");
	ck_assert_str_eq(dot_segment("/s/${header.x-t}", "/users/1/files/"), "${header.x-t} "
	    "holds a dot segment ('.' or '..'), which cannot go in a path");
	ck_assert_str_eq(dot_segment("/s?h=${header.x-t}", "/users/1/files/"), "");
}
END_TEST

START_TEST(test_render_backend_dot_segment)
{
	int r;

	ck_assert_str_eq(render("/o/${backend.user.dots}", 1, REQ("/users/1/files/", ""), &r),
	    "${backend.user.dots} holds a dot segment ('.' or '..'), which cannot go in a path");
	ck_assert_int_eq(r, TEMPLATE_BAD_FIELD);
	ck_assert_str_eq(render("/o?f=${backend.user.dots}", 1, REQ("/users/1/files/", ""), &r),
	    "/o?f=a%2F..");
	ck_assert_int_eq(r, 0);
}
END_TEST

START_TEST(test_render_backend_field)
{
	int r;

	ck_assert_str_eq(render("/o/${backend.user.v2.account.id}", 1, REQ("/users/1/files/", ""),
	    &r), "/o/42%2Fx%20y");
	ck_assert_uint_eq(last_backend, 5);
	ck_assert_str_eq(last_field, "account.id");
	ck_assert_str_eq(render("/o/${backend.user.missing}", 1, REQ("/users/1/files/", ""), &r),
	    "${backend.user.missing}: no such field");
	ck_assert_int_eq(r, TEMPLATE_BAD_FIELD);
	ck_assert_uint_eq(last_backend, 3);
}
END_TEST

START_TEST(test_render_auth)
{
	int r;

	/* Percent-encoded in a request-target; a missing claim is empty; a dot segment is
	 * refused in the path, as any request value is. */
	ck_assert_str_eq(render("/u/${api_key}?s=${jwt.sub}&m=${jwt.nope}", 1,
	    REQ("/users/1/files/", ""), &r), "/u/partner-1?s=ann%20b%2F..&m=");
	ck_assert_int_eq(r, 0);
	ck_assert_str_eq(render("/u/${jwt.sub}", 1, REQ("/users/1/files/", ""), &r),
	    "${jwt.sub} holds a dot segment ('.' or '..'), which cannot go in a path");
	ck_assert_int_eq(r, TEMPLATE_BAD_VALUE);
	ck_assert_str_eq(render("${api_key} ${jwt.sub}", 0, REQ("/users/1/files/", ""), &r),
	    "partner-1 ann b/..");
	ck_assert_str_eq(render("${jwt.org.tier}", 0, REQ("/users/1/files/", ""), &r),
	    "the value of ${jwt.org.tier} holds a line break: it cannot go in a header");
	ck_assert_int_eq(r, TEMPLATE_BAD_VALUE);
}
END_TEST

START_TEST(test_render_header)
{
	int r;

	ck_assert_str_eq(render("Bearer ${header.authorization} ${path.id}", 0,
	    REQ("/users/a%2Fb/files/", "Authorization: t0k/en\r\n"), &r), "Bearer t0k/en a/b");
	ck_assert_str_eq(render("id ${path.id}", 0, REQ("/users/a%0D%0Ab/files/", ""), &r),
	    "the value of ${path.id} holds a line break: it cannot go in a header");
	ck_assert_int_eq(r, TEMPLATE_BAD_VALUE);
	ck_assert_str_eq(render("${query.x}", 0, REQ("/users/1/files/?x=%0a", ""), &r),
	    "the value of ${query.x} holds a line break: it cannot go in a header");
	ck_assert_str_eq(render("${backend.user.crlf}", 0, REQ("/users/1/files/", ""), &r),
	    "the value of ${backend.user.crlf} holds a line break: it cannot go in a header");
	ck_assert_int_eq(r, TEMPLATE_BAD_FIELD);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("template");
	TCase *tc = tcase_create("template");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_parse_errors);
	tcase_add_test(tc, test_parse_without_pattern);
	tcase_add_test(tc, test_render_target);
	tcase_add_test(tc, test_render_rest_keeps_encoded_slashes);
	tcase_add_test(tc, test_dot_segment);
	tcase_add_test(tc, test_render_backend_dot_segment);
	tcase_add_test(tc, test_render_backend_field);
	tcase_add_test(tc, test_render_header);
	tcase_add_test(tc, test_render_auth);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
