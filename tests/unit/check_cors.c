#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cors.h"
#include "http_method.h"

static char *origins[] = { "https://app.example", "*.example.com", "https://*.shop.test",
	"null", NULL };
static const struct cors_policy policy = { origins, METHOD_GET | METHOD_POST, NULL, 0, 0 };

static const struct {
	const char *origin;
	int admitted;
} cases[] = {
	{ "https://app.example", 1 },
	{ "HTTPS://App.Example", 1 },           /* scheme and host are case-insensitive */
	{ "https://app.example:443", 0 },       /* another origin, as browsers compare them */
	{ "http://app.example", 0 },
	{ "https://app.example.evil", 0 },
	{ "https://a.example.com", 1 },
	{ "http://a.b.example.com:8080", 1 },   /* any scheme, any port */
	{ "https://example.com", 0 },           /* the domain itself is no subdomain */
	{ "https://aexample.com", 0 },
	{ "https://a.example.com.evil", 0 },
	{ "https://x.shop.test", 1 },
	{ "http://x.shop.test", 0 },            /* the wildcard's scheme */
	{ "null", 1 },
	{ "", 0 },
	{ "example.com", 0 },
};

START_TEST(test_origins)
{
	const char *o = cases[_i].origin;

	ck_assert_msg(cors_origin_allowed(&policy, o, strlen(o)) == cases[_i].admitted, "%s",
	    cases[_i].origin);
}
END_TEST

START_TEST(test_origin_too_long)
{
	char *any[] = { "*", NULL };
	struct cors_policy p = { any, 0, NULL, 0, 0 };
	char buf[CORS_ORIGIN_MAX + 2];

	memset(buf, 'a', sizeof(buf));
	memcpy(buf, "https://", 8);
	ck_assert_int_eq(cors_origin_allowed(&p, buf, CORS_ORIGIN_MAX + 1), 0);
	ck_assert_int_eq(cors_origin_allowed(&p, buf, CORS_ORIGIN_MAX), 1);
}
END_TEST

START_TEST(test_lines)
{
	const char *o = "https://app.example";
	struct cors_policy p = policy;
	char out[512];
	size_t n;

	n = cors_answer_lines(&p, o, 19, out, sizeof(out));
	out[n] = '\0';
	ck_assert_str_eq(out, "Access-Control-Allow-Origin: https://app.example\r\n"
	    "Vary: Origin\r\n");
	p.credentials = 1;
	p.headers = "Content-Type";
	p.max_age = 90500;
	n = cors_preflight_lines(&p, o, 19, "x-a", 3, out, sizeof(out));
	out[n] = '\0';
	ck_assert_str_eq(out, "Access-Control-Allow-Origin: https://app.example\r\n"
	    "Access-Control-Allow-Credentials: true\r\nVary: Origin\r\n"
	    "Access-Control-Allow-Methods: GET, POST\r\n"
	    "Access-Control-Allow-Headers: Content-Type\r\nAccess-Control-Max-Age: 90\r\n");
	/* What does not fit is not cut: nothing is said. */
	ck_assert_uint_eq(cors_preflight_lines(&p, o, 19, "x-a", 3, out, 60), 0);
	ck_assert_uint_eq(cors_answer_lines(&p, o, 19, out, 20), 0);
}
END_TEST

START_TEST(test_patterns)
{
	const char *why = NULL;

	ck_assert_int_eq(cors_pattern_valid("*", &why), 1);
	ck_assert_int_eq(cors_pattern_valid("https://a.example:8443", &why), 1);
	ck_assert_int_eq(cors_pattern_valid("*.example.com", &why), 1);
	ck_assert_int_eq(cors_pattern_valid("https://*.example.com", &why), 1);
	ck_assert_int_eq(cors_pattern_valid("https://a.example/", &why), 0);
	ck_assert_int_eq(cors_pattern_valid("a.example", &why), 0);
	ck_assert_int_eq(cors_pattern_valid("*.*.example", &why), 0);
	ck_assert_int_eq(cors_pattern_valid("https://", &why), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("cors");
	TCase *tc = tcase_create("cors");
	SRunner *sr;
	int failed;

	tcase_add_loop_test(tc, test_origins, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_origin_too_long);
	tcase_add_test(tc, test_lines);
	tcase_add_test(tc, test_patterns);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
