/* Conditions: parsing with exact errors, values compared by value, evaluation on JSON bytes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "jcond.h"

/* Compile YAML text into a condition; on error NULL and the errors in *errors. */
static struct jcond *
compile(const char *yaml, char **errors)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	struct config_parse *ctx = config_parse_new("t.yaml");
	struct jcond *c;

	ck_assert(yaml_parser_initialize(&parser));
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, strlen(yaml));
	ck_assert_msg(yaml_parser_load(&parser, &doc), "bad YAML: %s", yaml);
	c = jcond_parse(ctx, &doc, yaml_document_get_root_node(&doc));
	*errors = config_parse_errors(ctx);
	ck_assert_int_eq(c == NULL, *errors != NULL);
	config_parse_free(ctx);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return c;
}

static const struct {
	const char *cond;
	const char *body;
	int status;
	int result;
} eval_cases[] = {
	/* status: codes and classes */
	{ "{status: [200, 2xx]}", "{}", 204, 1 },
	{ "{status: [200, 2xx]}", "{}", 302, 0 },
	{ "{status: 5xx}", "{}", 503, 1 },
	{ "{status: 404}", "{}", 404, 1 },
	{ "{status: 404}", "{}", 0, 0 },
	{ "{status: 200..299}", "{}", 299, 1 },
	{ "{status: 200..299}", "{}", 300, 0 },
	{ "{status: 200..299}", "{}", 199, 0 },
	{ "{status: [2XX, 404..404]}", "{}", 404, 1 },
	{ "{status: [2XX, 404..404]}", "{}", 405, 0 },
	/* equals: decoded strings, numbers by value, literals */
	{ "{field: code, equals: 0}", "{\"code\":0}", 0, 1 },
	{ "{field: code, equals: 0}", "{\"code\":0.0}", 0, 1 },
	{ "{field: code, equals: 0}", "{\"code\":-0e10}", 0, 1 },
	{ "{field: code, equals: 0}", "{\"code\":\"0\"}", 0, 0 },
	{ "{field: code, equals: \"0\"}", "{\"code\":0}", 0, 0 },
	{ "{field: code, equals: \"0\"}", "{\"code\":\"0\"}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":1.0}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":1e0}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":10e-1}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":0.001e3}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":1.0000000000000000001}", 0, 0 },
	{ "{field: code, equals: 1.5e3}", "{\"code\":1500}", 0, 1 },
	{ "{field: n, equals: 9007199254740993}", "{\"n\":9007199254740992}", 0, 0 },
	{ "{field: n, equals: 9007199254740993}", "{\"n\":9007199254740993.0}", 0, 1 },
	{ "{field: n, equals: 12345678901234567890123}", "{\"n\":1.2345678901234567890123e22}", 0, 1 },
	{ "{field: n, equals: -2}", "{\"n\":2}", 0, 0 },
	{ "{field: s, equals: ab}", "{\"s\":\"a\\u0062\"}", 0, 1 },
	{ "{field: s, equals: ab}", "{\"s\":\"ab \"}", 0, 0 },
	{ "{field: s, equals: é}", "{\"s\":\"\\u00e9\"}", 0, 1 },
	{ "{field: s, equals: \"true\"}", "{\"s\":true}", 0, 0 },
	{ "{field: s, equals: true}", "{\"s\":true}", 0, 1 },
	{ "{field: s, equals: null}", "{\"s\":null}", 0, 1 },
	{ "{field: s, equals: ~}", "{\"s\":false}", 0, 0 },
	{ "{field: s, equals: 1}", "{\"s\":[1]}", 0, 0 },
	{ "{field: s, equals: 1}", "{\"s\":{\"a\":1}}", 0, 0 },
	{ "{field: s, equals: 1}", "{}", 0, 0 },
	/* the last occurrence of a duplicate key, nested paths, escaped keys */
	{ "{field: code, equals: 0}", "{\"code\":1,\"code\":0}", 0, 1 },
	{ "{field: code, equals: 1}", "{\"code\":1,\"code\":0}", 0, 0 },
	{ "{field: data.code, equals: 7}", "{\"data\":{\"code\":7}}", 0, 1 },
	{ "{field: data.code, equals: 7}", "{\"d\\u0061ta\":{\"c\\u006fde\":7}}", 0, 1 },
	{ "{field: data.code, equals: 7}", "{\"data\":[{\"code\":7}]}", 0, 0 },
	{ "{field: data.code, equals: 7}", "{\"data\":7}", 0, 0 },
	{ "{field: a.b.c, equals: x}", " {\"a\" : {\"b\" : {\"c\" : \"x\"} } } ", 0, 1 },
	/* in, prefix, exists, type */
	{ "{field: code, in: [0, 200, ok]}", "{\"code\":200.0}", 0, 1 },
	{ "{field: code, in: [0, 200, ok]}", "{\"code\":\"ok\"}", 0, 1 },
	{ "{field: code, in: [0, 200, ok]}", "{\"code\":\"200\"}", 0, 0 },
	{ "{field: msg, prefix: ab}", "{\"msg\":\"abc\"}", 0, 1 },
	{ "{field: msg, prefix: ab}", "{\"msg\":\"\\u0061bc\"}", 0, 1 },
	{ "{field: msg, prefix: ab}", "{\"msg\":\"a\"}", 0, 0 },
	{ "{field: msg, prefix: \"\"}", "{\"msg\":\"\"}", 0, 1 },
	{ "{field: msg, prefix: \"1\"}", "{\"msg\":12}", 0, 0 },
	{ "{field: data, exists: true}", "{\"data\":null}", 0, 1 },
	{ "{field: data, exists: false}", "{\"data\":null}", 0, 0 },
	{ "{field: data, exists: false}", "{\"x\":1}", 0, 1 },
	{ "{field: data.x, exists: false}", "{\"data\":\"x\"}", 0, 1 },
	{ "{field: v, type: object}", "{\"v\":{}}", 0, 1 },
	{ "{field: v, type: array}", "{\"v\":[]}", 0, 1 },
	{ "{field: v, type: string}", "{\"v\":\"\"}", 0, 1 },
	{ "{field: v, type: number}", "{\"v\":-1.5e-3}", 0, 1 },
	{ "{field: v, type: bool}", "{\"v\":false}", 0, 1 },
	{ "{field: v, type: null}", "{\"v\":null}", 0, 1 },
	{ "{field: v, type: number}", "{\"v\":\"1\"}", 0, 0 },
	{ "{field: v, type: null}", "{}", 0, 0 },
	/* all, any, not */
	{ "{all: [{status: 2xx}, {field: code, equals: 0}]}", "{\"code\":0}", 200, 1 },
	{ "{all: [{status: 2xx}, {field: code, equals: 0}]}", "{\"code\":0}", 500, 0 },
	{ "{any: [{status: 2xx}, {field: code, equals: 0}]}", "{\"code\":0}", 500, 1 },
	{ "{any: [{status: 2xx}, {field: code, equals: 0}]}", "{\"code\":1}", 500, 0 },
	{ "{not: {field: code, equals: 0}}", "{\"code\":1}", 0, 1 },
	{ "{not: {not: {field: code, equals: 0}}}", "{\"code\":0}", 0, 1 },
	/* bodies that are not objects have no fields; invalid ones where read are -1 */
	{ "{field: a, equals: 1}", "[{\"a\":1}]", 0, 0 },
	{ "{field: a, exists: false}", "\"a\"", 0, 1 },
	{ "{field: a, equals: 1}", "{\"a\":1,}", 0, -1 },
	{ "{field: a, equals: 1}", "{\"a\":1} x", 0, -1 },
	{ "{field: a.b, equals: 1}", "{\"a\":{\"b\":1,]}", 0, -1 },
	{ "{not: {field: a, equals: 1}}", "{\"a\":", 0, -1 },
	{ "{any: [{status: 2xx}, {field: a, equals: 1}]}", "{\"a\":", 200, 1 },
	{ "{status: 2xx}", "not json", 200, 1 },
};

START_TEST(test_eval)
{
	struct jcond_scratch *s = jcond_scratch_new(10, 1000);
	struct jcond *c;
	char *errors;

	c = compile(eval_cases[_i].cond, &errors);
	ck_assert_msg(c != NULL, "%s: %s", eval_cases[_i].cond, errors);
	ck_assert_msg(jcond_eval(c, eval_cases[_i].body, strlen(eval_cases[_i].body),
	    eval_cases[_i].status, s) == eval_cases[_i].result, "case %d: %s on %s", _i,
	    eval_cases[_i].cond, eval_cases[_i].body);
	jcond_free(c);
	jcond_scratch_free(s);
}
END_TEST

static const struct {
	const char *cond;
	const char *error;
} bad_cases[] = {
	{ "1", "t.yaml:1:1: a condition is a mapping such as { field: code, equals: 0 }, { status: [ 2xx ] }, or all:, any:, not: of conditions" },
	{ "{}", "t.yaml:1:1: a condition is a mapping such as { field: code, equals: 0 }, { status: [ 2xx ] }, or all:, any:, not: of conditions" },
	{ "{field: code}", "t.yaml:1:1: field needs one test: equals, in, prefix, exists or type" },
	{ "{equals: 0}", "t.yaml:1:1: equals needs a field, e.g. { field: code, equals: ... }" },
	{ "{field: code, equals: 0, in: [1]}", "t.yaml:1:26: unexpected key in a condition: each condition tests one thing (status; field with one of equals, in, prefix, exists, type; all; any; not)" },
	{ "{fld: code}", "t.yaml:1:2: unknown key in a condition: each condition tests one thing (status; field with one of equals, in, prefix, exists, type; all; any; not)" },
	{ "{status: 200, field: a, equals: 1}", "t.yaml:1:2: 'status' stands alone in its condition: combine with all:" },
	{ "{field: code, equals: [0]}", "t.yaml:1:23: equals expects a scalar (a string, number, true, false or null)" },
	{ "{field: code, in: []}", "t.yaml:1:19: in expects a non-empty list of values, e.g. [ 0, 200 ]" },
	{ "{field: code, in: [1, {a: 1}]}", "t.yaml:1:23: in expects a scalar (a string, number, true, false or null)" },
	{ "{field: code, prefix: [a]}", "t.yaml:1:23: prefix expects a string" },
	{ "{field: code, exists: yes}", "t.yaml:1:23: exists expects true or false" },
	{ "{field: code, type: int}", "t.yaml:1:21: type expects object, array, string, number, bool or null" },
	{ "{field: a..b, exists: true}", "t.yaml:1:9: field: empty key in path 'a..b'" },
	{ "{field: [a], exists: true}", "t.yaml:1:9: field must be a key or a dotted path such as data.code" },
	{ "{status: 700}", "t.yaml:1:10: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{status: [200, 6xx]}", "t.yaml:1:16: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{status: 300..200}", "t.yaml:1:10: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{status: [200..]}", "t.yaml:1:11: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{status: 200..600}", "t.yaml:1:10: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{status: []}", "t.yaml:1:10: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "{all: {status: 200}}", "t.yaml:1:7: all expects a non-empty list of conditions" },
	{ "{any: []}", "t.yaml:1:7: any expects a non-empty list of conditions" },
	{ "{not: [ {status: 200} ]}", "t.yaml:1:7: a condition is a mapping such as { field: code, equals: 0 }, { status: [ 2xx ] }, or all:, any:, not: of conditions" },
	{ "{all: [{status: 200}, {field: x}]}", "t.yaml:1:23: field needs one test: equals, in, prefix, exists or type" },
};

START_TEST(test_bad)
{
	char *errors, *nl;

	ck_assert_ptr_null(compile(bad_cases[_i].cond, &errors));
	if ((nl = strchr(errors, '\n')) != NULL)
		*nl = '\0';
	ck_assert_str_eq(errors, bad_cases[_i].error);
	free(errors);
}
END_TEST

/* Nesting deeper than 32 levels is refused before it can exhaust the stack. */
START_TEST(test_nesting)
{
	char yaml[600] = "", *errors;
	int i;

	for (i = 0; i < 40; i++)
		strcat(yaml, "{not: ");
	strcat(yaml, "{status: 200}");
	for (i = 0; i < 40; i++)
		strcat(yaml, "}");
	ck_assert_ptr_null(compile(yaml, &errors));
	ck_assert_ptr_nonnull(strstr(errors, "condition nested deeper than 32 levels"));
	free(errors);
}
END_TEST

static const struct {
	const char *a, *b;
	int eq;
} num_cases[] = {
	{ "1", "1.0", 1 }, { "1", "1e0", 1 }, { "1", "10e-1", 1 }, { "100", "1E2", 1 },
	{ "0", "-0", 1 }, { "0", "0.000e-5", 1 }, { "1.5", "15e-1", 1 }, { "-1.5", "1.5", 0 },
	{ "1", "1.1", 0 }, { "9007199254740993", "9007199254740992", 0 },
	{ "123456789012345678901234567890", "1.23456789012345678901234567890e29", 1 },
	{ "1e400", "10e399", 1 }, { "1e-400", "0", 0 }, { "1e999999999999", "1e999999999999", 1 },
	{ "1e999999999999", "10e999999999998", 0 }, { "0.1", "0.10", 1 }, { "10", "1", 0 },
};

START_TEST(test_numbers)
{
	ck_assert_msg(jcond_number_eq(num_cases[_i].a, strlen(num_cases[_i].a), num_cases[_i].b,
	    strlen(num_cases[_i].b)) == num_cases[_i].eq, "%s vs %s", num_cases[_i].a,
	    num_cases[_i].b);
	ck_assert_int_eq(jcond_number_eq(num_cases[_i].b, strlen(num_cases[_i].b),
	    num_cases[_i].a, strlen(num_cases[_i].a)), num_cases[_i].eq);
	/* equal numbers hash alike (JSON-RPC ids are looked up by value) */
	if (num_cases[_i].eq)
		ck_assert(jcond_number_hash(num_cases[_i].a, strlen(num_cases[_i].a)) ==
		    jcond_number_hash(num_cases[_i].b, strlen(num_cases[_i].b)));
}
END_TEST

START_TEST(test_number_int)
{
	long long v;

	ck_assert_int_eq(jcond_number_int("200", 3, &v), 1);
	ck_assert_int_eq(v, 200);
	ck_assert_int_eq(jcond_number_int("2e2", 3, &v), 1);
	ck_assert_int_eq(v, 200);
	ck_assert_int_eq(jcond_number_int("20000e-2", 8, &v), 1);
	ck_assert_int_eq(v, 200);
	ck_assert_int_eq(jcond_number_int("-3.0", 4, &v), 1);
	ck_assert_int_eq(v, -3);
	ck_assert_int_eq(jcond_number_int("0.0", 3, &v), 1);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(jcond_number_int("2.5", 3, &v), 0);
	ck_assert_int_eq(jcond_number_int("1e18", 4, &v), 0);
	ck_assert_int_eq(jcond_number_int("999999999999999999", 18, &v), 1);
	ck_assert_int_eq(v, 999999999999999999LL);
}
END_TEST

/* strings: numeric strings compare with number keys, both ways. */
START_TEST(test_scalar_strings)
{
	yaml_node_t num = { .type = YAML_SCALAR_NODE }, str = num;
	struct jcond_scalar n, s;

	num.data.scalar.value = (yaml_char_t *)"0";
	num.data.scalar.length = 1;
	num.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
	str.data.scalar.value = (yaml_char_t *)"0";
	str.data.scalar.length = 1;
	str.data.scalar.style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
	ck_assert_int_eq(jcond_scalar_parse(&num, &n), 0);
	ck_assert_int_eq(jcond_scalar_parse(&str, &s), 0);
	ck_assert_int_eq(jcond_scalar_eq(&n, "\"0\"", 3, 0), 0);
	ck_assert_int_eq(jcond_scalar_eq(&n, "\"0\"", 3, 1), 1);
	ck_assert_int_eq(jcond_scalar_eq(&n, "\"0.0\"", 5, 1), 1);
	ck_assert_int_eq(jcond_scalar_eq(&n, "\"00\"", 4, 1), 0);
	ck_assert_int_eq(jcond_scalar_eq(&n, "\"\\u0030\"", 8, 1), 0);
	ck_assert_int_eq(jcond_scalar_eq(&s, "0", 1, 0), 0);
	ck_assert_int_eq(jcond_scalar_eq(&s, "0", 1, 1), 1);
	ck_assert_int_eq(jcond_scalar_eq(&s, "0.0", 3, 1), 1);
	ck_assert_int_eq(jcond_scalar_eq(&s, "\"0\"", 3, 0), 1);
	jcond_scalar_free(&n);
	jcond_scalar_free(&s);
}
END_TEST

/* The scratch's limits hold: too deep or too many members reads as invalid. */
START_TEST(test_limits)
{
	struct jcond_scratch *s = jcond_scratch_new(2, 3);
	struct jcond *c;
	char *errors;

	c = compile("{field: a.b, exists: true}", &errors);
	ck_assert_int_eq(jcond_eval(c, "{\"a\":{\"b\":1}}", 13, 0, s), 1);
	ck_assert_int_eq(jcond_eval(c, "{\"a\":{\"b\":[1]}}", 15, 0, s), -1);
	ck_assert_int_eq(jcond_eval(c, "{\"x\":1,\"y\":2,\"a\":{\"b\":1}}", 25, 0, s), 1);
	ck_assert_int_eq(jcond_eval(c, "{\"w\":0,\"x\":1,\"y\":2,\"a\":{\"b\":1}}", 31, 0, s), -1);
	ck_assert_int_eq(jcond_uses_status(c), 0);
	jcond_free(c);
	c = compile("{any: [{field: a, exists: true}, {not: {status: 2xx}}]}", &errors);
	ck_assert_int_eq(jcond_uses_status(c), 1);
	jcond_free(c);
	jcond_scratch_free(s);
}
END_TEST

static Suite *
jcond_suite(void)
{
	Suite *s = suite_create("jcond");
	TCase *tc = tcase_create("jcond");

	tcase_add_loop_test(tc, test_eval, 0, (int)(sizeof(eval_cases) / sizeof(eval_cases[0])));
	tcase_add_loop_test(tc, test_bad, 0, (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
	tcase_add_test(tc, test_nesting);
	tcase_add_loop_test(tc, test_numbers, 0, (int)(sizeof(num_cases) / sizeof(num_cases[0])));
	tcase_add_test(tc, test_number_int);
	tcase_add_test(tc, test_scalar_strings);
	tcase_add_test(tc, test_limits);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(jcond_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
