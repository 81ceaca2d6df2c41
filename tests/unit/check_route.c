/* Route matching and target rewriting. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "route.h"

static struct config cfg;
static struct config_route routes[8];

/* Add a route; NULL fields are unset, methods 0 means any. */
static struct config_route *
add(const char *name, const char *host, const char *path, const char *prefix, unsigned methods,
    const char *strip)
{
	struct config_route *r = &routes[cfg.nroutes++];

	memset(r, 0, sizeof(*r));
	r->name = (char *)name;
	r->host = (char *)host;
	r->path = (char *)path;
	r->path_prefix = (char *)prefix;
	r->methods = methods ? methods : METHOD_ANY;
	r->strip_prefix = (char *)strip;
	return r;
}

static void
reset(void)
{
	memset(&cfg, 0, sizeof(cfg));
	memset(routes, 0, sizeof(routes));
	cfg.routes = routes;
}

/* Name of the route chosen for host/path/method ("-" for none), and the methods of a 405. */
static const char *
match(const char *host, const char *path, unsigned method, unsigned *mismatch)
{
	const struct config_route *r;

	*mismatch = ~0u;
	r = route_match(&cfg, host, strlen(host), path, strlen(path), method, mismatch);
	return r ? r->name : "-";
}

START_TEST(test_first_match_wins)
{
	unsigned mm;

	reset();
	add("api", NULL, NULL, "/api/", 0, NULL);
	add("all", NULL, NULL, "/", 0, NULL);
	add("never", NULL, NULL, "/api/x", 0, NULL);
	ck_assert_str_eq(match("h", "/api/x", METHOD_GET, &mm), "api");
	ck_assert_uint_eq(mm, 0);
	ck_assert_str_eq(match("h", "/api", METHOD_GET, &mm), "all");
	ck_assert_str_eq(match("h", "/", METHOD_GET, &mm), "all");
	ck_assert_str_eq(match("h", "/other", METHOD_GET, &mm), "all");
}
END_TEST

START_TEST(test_no_routes)
{
	unsigned mm;

	reset();
	ck_assert_str_eq(match("h", "/", METHOD_GET, &mm), "-");
	ck_assert_uint_eq(mm, 0);
}
END_TEST

START_TEST(test_catch_all)
{
	unsigned mm;

	reset();
	add("any", NULL, NULL, NULL, 0, NULL);
	ck_assert_str_eq(match("", "/", METHOD_OTHER, &mm), "any");
	ck_assert_str_eq(match("h", "/x/y", METHOD_PATCH, &mm), "any");
	ck_assert_str_eq(match("h", "", METHOD_GET, &mm), "any");
}
END_TEST

/* nginx location-prefix semantics: a plain string prefix, case-sensitive. */
START_TEST(test_prefix)
{
	unsigned mm;

	reset();
	add("api", NULL, NULL, "/api", 0, NULL);
	ck_assert_str_eq(match("h", "/api", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("h", "/api/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("h", "/api/x/y", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("h", "/apix", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("h", "/ap", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/API", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/v1/api", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "", METHOD_GET, &mm), "-");
	ck_assert_uint_eq(mm, 0);

	reset();
	add("slash", NULL, NULL, "/api/", 0, NULL);
	ck_assert_str_eq(match("h", "/api", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/api/", METHOD_GET, &mm), "slash");
	ck_assert_str_eq(match("h", "/apix", METHOD_GET, &mm), "-");
}
END_TEST

START_TEST(test_exact)
{
	unsigned mm;

	reset();
	add("health", NULL, "/healthz", NULL, 0, NULL);
	ck_assert_str_eq(match("h", "/healthz", METHOD_GET, &mm), "health");
	ck_assert_str_eq(match("h", "/healthz/", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/healthzz", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/health", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("h", "/Healthz", METHOD_GET, &mm), "-");
}
END_TEST

START_TEST(test_host)
{
	unsigned mm;

	reset();
	add("v6", "[::1]", NULL, NULL, 0, NULL);
	add("api", "api.example.com", NULL, NULL, 0, NULL);
	add("ip", "127.0.0.1", NULL, NULL, 0, NULL);
	ck_assert_str_eq(match("api.example.com", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("API.Example.COM", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("api.example.com:8080", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("api.example.com:", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("api.example.com.", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("api.example.com.:80", "/", METHOD_GET, &mm), "api");
	ck_assert_str_eq(match("api.example.co", "/", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("api.example.comx", "/", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("x.api.example.com", "/", METHOD_GET, &mm), "-");
	ck_assert_str_eq(match("", "/", METHOD_GET, &mm), "-");  /* HTTP/1.0 without Host */
	ck_assert_str_eq(match("127.0.0.1:8080", "/", METHOD_GET, &mm), "ip");
	ck_assert_str_eq(match("[::1]:8080", "/", METHOD_GET, &mm), "v6");
	ck_assert_str_eq(match("[::1]", "/", METHOD_GET, &mm), "v6");
	ck_assert_str_eq(match("[::2]:8080", "/", METHOD_GET, &mm), "-");
	ck_assert_uint_eq(mm, 0);
}
END_TEST

START_TEST(test_methods_405)
{
	unsigned mm;

	reset();
	add("read", NULL, NULL, "/orders", METHOD_GET | METHOD_HEAD, NULL);
	add("other", NULL, "/other", NULL, METHOD_POST, NULL);
	ck_assert_str_eq(match("h", "/orders/1", METHOD_GET, &mm), "read");
	ck_assert_uint_eq(mm, 0);
	ck_assert_str_eq(match("h", "/orders/1", METHOD_HEAD, &mm), "read");
	/* path matched, method did not: no route, and 405 with the methods that would do */
	ck_assert_str_eq(match("h", "/orders/1", METHOD_DELETE, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_GET | METHOD_HEAD);
	ck_assert_str_eq(match("h", "/orders", METHOD_OTHER, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_GET | METHOD_HEAD);
	/* nothing matched the path: 404 */
	ck_assert_str_eq(match("h", "/nothing", METHOD_DELETE, &mm), "-");
	ck_assert_uint_eq(mm, 0);

	/* a later route taking the method wins over the 405 */
	add("write", NULL, NULL, "/orders", METHOD_POST | METHOD_PUT, NULL);
	ck_assert_str_eq(match("h", "/orders/1", METHOD_PUT, &mm), "write");
	ck_assert_uint_eq(mm, 0);
	/* every route that matched the path names its methods, in no route's order */
	ck_assert_str_eq(match("h", "/orders/1", METHOD_PATCH, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_GET | METHOD_HEAD | METHOD_POST | METHOD_PUT);
	ck_assert_str_eq(match("h", "/other", METHOD_PATCH, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_POST);
}
END_TEST

START_TEST(test_405_needs_host_match)
{
	unsigned mm;

	reset();
	add("api", "api.example.com", NULL, "/", METHOD_GET, NULL);
	ck_assert_str_eq(match("www.example.com", "/", METHOD_POST, &mm), "-");
	ck_assert_uint_eq(mm, 0);
	ck_assert_str_eq(match("api.example.com", "/", METHOD_POST, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_GET);
	/* the flag pointer is optional */
	ck_assert_ptr_null(route_match(&cfg, "api.example.com", 15, "/", 1, METHOD_POST, NULL));
	ck_assert_ptr_nonnull(route_match(&cfg, "api.example.com", 15, "/", 1, METHOD_GET, NULL));
}
END_TEST

/* The Allow header: a fixed order, whatever the bits. */
START_TEST(test_allow_header)
{
	char out[ROUTE_ALLOW_MAX];

	ck_assert_uint_eq(route_allow_header(METHOD_POST, out), 13);
	ck_assert_str_eq(out, "Allow: POST\r\n");
	route_allow_header(METHOD_PUT | METHOD_HEAD | METHOD_GET | METHOD_DELETE, out);
	ck_assert_str_eq(out, "Allow: GET, HEAD, PUT, DELETE\r\n");
	/* a method the gateway has no name for is not listed */
	route_allow_header(METHOD_OTHER | METHOD_PATCH, out);
	ck_assert_str_eq(out, "Allow: PATCH\r\n");
	ck_assert_uint_eq(route_allow_header(METHOD_ANY, out), sizeof(out) - 1);
	ck_assert_str_eq(out,
	    "Allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE, CONNECT\r\n");
	ck_assert_uint_eq(route_allow_header(0, out), 0);
	ck_assert_str_eq(out, "");
	ck_assert_uint_eq(route_allow_header(METHOD_OTHER, out), 0);
}
END_TEST

/* Lengths, not NUL bytes, bound the inputs. */
START_TEST(test_lengths)
{
	unsigned mm;

	reset();
	add("exact", NULL, "/a", NULL, 0, NULL);
	add("host", "h.example", NULL, "/b", 0, NULL);
	ck_assert_ptr_nonnull(route_match(&cfg, "x", 1, "/a?q", 2, METHOD_GET, &mm));
	ck_assert_ptr_null(route_match(&cfg, "x", 1, "/ab", 3, METHOD_GET, &mm));
	ck_assert_ptr_nonnull(route_match(&cfg, "h.examplez", 9, "/b", 2, METHOD_GET, &mm));
	ck_assert_ptr_null(route_match(&cfg, "h.example", 8, "/b", 2, METHOD_GET, &mm));
}
END_TEST

/* Rewrite path+query for route r; returns the result or "ERR". */
static const char *
target(const struct config_route *r, const char *path, const char *query, size_t cap)
{
	static char out[256];
	int n;

	memset(out, 'Z', sizeof(out));
	n = route_rewrite_target(r, path, strlen(path), query, strlen(query), out, cap);
	if (n < 0)
		return "ERR";
	ck_assert_int_le(n, (int)cap);
	out[n] = '\0';
	return out;
}

START_TEST(test_strip_prefix)
{
	struct config_route *r;

	reset();
	r = add("api", NULL, NULL, "/api", 0, "/api");
	ck_assert_str_eq(target(r, "/api/orders/1", "", 256), "/orders/1");
	ck_assert_str_eq(target(r, "/api/", "", 256), "/");
	ck_assert_str_eq(target(r, "/api", "", 256), "/");
	ck_assert_str_eq(target(r, "/api", "?a=1&b=%20", 256), "/?a=1&b=%20");
	ck_assert_str_eq(target(r, "/api/x", "?q", 256), "/x?q");
	ck_assert_str_eq(target(r, "/api/x", "?", 256), "/x?");
	/* plain string prefix, as the match: the rest stays an origin-form path */
	ck_assert_str_eq(target(r, "/apix", "", 256), "/x");
	/* not a prefix of this path: unchanged */
	ck_assert_str_eq(target(r, "/other/api", "?q", 256), "/other/api?q");
	ck_assert_str_eq(target(r, "/ap", "", 256), "/ap");
	ck_assert_str_eq(target(r, "/API/x", "", 256), "/API/x");
	/* double slashes and encoded bytes are forwarded as they came */
	ck_assert_str_eq(target(r, "/api//x%2Fy", "", 256), "//x%2Fy");

	r = add("slash", NULL, NULL, "/v1/", 0, "/v1/");
	ck_assert_str_eq(target(r, "/v1/users", "", 256), "/users");
	ck_assert_str_eq(target(r, "/v1/", "?x", 256), "/?x");
	ck_assert_str_eq(target(r, "/v1", "", 256), "/v1");

	r = add("root", NULL, NULL, "/", 0, "/");
	ck_assert_str_eq(target(r, "/", "", 256), "/");
	ck_assert_str_eq(target(r, "/x", "", 256), "/x");
}
END_TEST

START_TEST(test_no_strip)
{
	struct config_route *r;

	reset();
	r = add("plain", NULL, NULL, "/api", 0, NULL);
	ck_assert_str_eq(target(r, "/api/orders", "", 256), "/api/orders");
	ck_assert_str_eq(target(r, "/api/orders", "?page=2", 256), "/api/orders?page=2");
	ck_assert_str_eq(target(r, "*", "", 256), "*");
}
END_TEST

START_TEST(test_target_capacity)
{
	struct config_route *r;
	char out[8];

	reset();
	r = add("api", NULL, NULL, "/api", 0, "/api");
	/* "/x?q=1" is 6 bytes: fits in 6 (no terminator), not in 5 */
	ck_assert_str_eq(target(r, "/api/x", "?q=1", 6), "/x?q=1");
	ck_assert_str_eq(target(r, "/api/x", "?q=1", 5), "ERR");
	ck_assert_str_eq(target(r, "/api", "", 1), "/");
	ck_assert_str_eq(target(r, "/api", "", 0), "ERR");
	ck_assert_str_eq(target(r, "/apix", "", 2), "/x");
	ck_assert_str_eq(target(r, "/apix", "", 1), "ERR");
	/* with room, the result is also NUL-terminated */
	memset(out, 'Z', sizeof(out));
	ck_assert_int_eq(route_rewrite_target(r, "/api/ab", 7, "", 0, out, sizeof(out)), 3);
	ck_assert_str_eq(out, "/ab");
}
END_TEST

/* The captures of template for path, as "name=value ..." ("-" when it does not match), or
 * the template's error. */
static const char *
captures(const char *template, const char *path)
{
	static char out[512];
	struct http_str caps[ROUTE_MAX_CAPTURES];
	struct route_pattern *p;
	const char *why;
	size_t i, n = 0;

	if ((p = route_pattern_new(template, &why)) == NULL)
		return why;
	if (!route_pattern_match(p, path, strlen(path), caps)) {
		route_pattern_free(p);
		return "-";
	}
	out[0] = '\0';
	for (i = 0; i < route_pattern_ncaptures(p); i++)
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s[%.*s]", i ? " " : "",
		    (int)caps[i].len, caps[i].p);
	route_pattern_free(p);
	return out;
}

START_TEST(test_templates)
{
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users/42/dashboard"), "[42]");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users/a%2Fb/dashboard"), "[a%2Fb]");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users//dashboard"), "-");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users/42/dashboard/"), "-");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users/42"), "-");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/users/4/2/dashboard"), "-");
	ck_assert_str_eq(captures("/users/{id}/dashboard", "/Users/42/dashboard"), "-");
	ck_assert_str_eq(captures("/{a}/{b}/", "/x/y/"), "[x] [y]");
	ck_assert_str_eq(captures("/{a}/{b}/", "/x/y"), "-");
	ck_assert_str_eq(captures("/files/{rest...}", "/files/a/b/c"), "[a/b/c]");
	ck_assert_str_eq(captures("/files/{rest...}", "/files/"), "[]");
	ck_assert_str_eq(captures("/files/{rest...}", "/files"), "-");
	ck_assert_str_eq(captures("/{t}/{rest...}", "/a/b/c"), "[a] [b/c]");
	ck_assert_str_eq(captures("/users/{id", "/users/1"),
	    "a capture in braces must be a whole segment, as in /users/{id}");
	ck_assert_str_eq(captures("/users/x{id}", "/users/1"),
	    "a capture in braces must be a whole segment, as in /users/{id}");
	ck_assert_str_eq(captures("/users/{}", "/users/1"),
	    "a capture's name is letters, digits, '_' and '-'");
	ck_assert_str_eq(captures("/users/{a b}", "/users/1"),
	    "a capture's name is letters, digits, '_' and '-'");
	ck_assert_str_eq(captures("/{rest...}/x", "/a/x"),
	    "a {NAME...} capture must be the last segment");
	ck_assert_str_eq(captures("/{a}/{a}", "/1/2"), "two captures have the same name");
}
END_TEST

START_TEST(test_template_route)
{
	struct config_route *r;
	const char *why;
	unsigned mm;

	reset();
	r = add("dash", NULL, "/users/{id}/dashboard", NULL, METHOD_GET, NULL);
	r->pattern = route_pattern_new(r->path, &why);
	add("exact", NULL, "/users/me/dashboard", NULL, 0, NULL);
	ck_assert_str_eq(match("h", "/users/me/dashboard", METHOD_GET, &mm), "dash");
	ck_assert_str_eq(match("h", "/users/me/dashboard", METHOD_POST, &mm), "exact");
	ck_assert_str_eq(match("h", "/users/1/dashboard", METHOD_POST, &mm), "-");
	ck_assert_uint_eq(mm, METHOD_GET);
	route_pattern_free(r->pattern);
}
END_TEST

static Suite *
route_suite(void)
{
	Suite *s = suite_create("route");
	TCase *tc;

	tc = tcase_create("match");
	tcase_add_test(tc, test_first_match_wins);
	tcase_add_test(tc, test_no_routes);
	tcase_add_test(tc, test_catch_all);
	tcase_add_test(tc, test_prefix);
	tcase_add_test(tc, test_exact);
	tcase_add_test(tc, test_host);
	tcase_add_test(tc, test_methods_405);
	tcase_add_test(tc, test_405_needs_host_match);
	tcase_add_test(tc, test_allow_header);
	tcase_add_test(tc, test_lengths);
	tcase_add_test(tc, test_templates);
	tcase_add_test(tc, test_template_route);
	suite_add_tcase(s, tc);

	tc = tcase_create("target");
	tcase_add_test(tc, test_strip_prefix);
	tcase_add_test(tc, test_no_strip);
	tcase_add_test(tc, test_target_capacity);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(route_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
