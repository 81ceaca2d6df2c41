/* Fields of a JSON text cut short: found, absent, not decided yet, invalid; conditions on it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "envelope.h"
#include "jprefix.h"

static int
find(const char *text, size_t len, int complete, const char *path, int whole, char *value)
{
	struct jcond_seg *segs;
	size_t nseg, vlen = 0;
	const char *json = NULL;
	unsigned char type = 0;
	int r;

	ck_assert_int_eq(jcond_path_split(path, strlen(path), &segs, &nseg), 0);
	r = jprefix_find(text, len, complete, 100, whole, segs, nseg, &json, &vlen, &type);
	jcond_path_free(segs, nseg);
	if (value != NULL) {
		value[0] = '\0';
		if (r == JPREFIX_FOUND) {
			ck_assert(json >= text && json + vlen <= text + len && type != 0);
			memcpy(value, json, vlen);
			value[vlen] = '\0';
		}
	}
	return r;
}

static const struct {
	const char *path;
	const char *text;
	int complete;
	int result;
	const char *value;              /* FOUND: the value's bytes */
} find_cases[] = {
	/* found: every type, escaped keys, nested paths, whitespace */
	{ "type", "{\"type\":\"order\"", 0, JPREFIX_FOUND, "\"order\"" },
	{ "type", "{\"t\\u0079pe\" : \"a\\u0062\" ,", 0, JPREFIX_FOUND, "\"a\\u0062\"" },
	{ "n", "{\"n\":1.5e3,", 0, JPREFIX_FOUND, "1.5e3" },
	{ "n", "{\"n\":true}", 1, JPREFIX_FOUND, "true" },
	{ "n", " \n{ \"x\":[1,{\"n\":2}], \"n\" :null ", 0, JPREFIX_FOUND, "null" },
	{ "a.b", "{\"a\":{\"x\":\"}\",\"b\":[1,2]}", 0, JPREFIX_FOUND, "[1,2]" },
	{ "a.b.c", "{\"a\":{\"b\":{\"c\":\"deep\"", 0, JPREFIX_FOUND, "\"deep\"" },
	{ "a", "{\"a\":{\"x\":1}}", 1, JPREFIX_FOUND, "{\"x\":1}" },
	/* the first occurrence decides */
	{ "t", "{\"t\":1,\"t\":2}", 1, JPREFIX_FOUND, "1" },
	{ "a.b", "{\"a\":{\"c\":1},\"a\":{\"b\":2}}", 1, JPREFIX_ABSENT, NULL },
	/* absent: the object closed, a value on the path is no object, no object at all */
	{ "type", "{\"a\":1,\"b\":{\"type\":2}}", 0, JPREFIX_ABSENT, NULL },
	{ "type", "{}", 0, JPREFIX_ABSENT, NULL },
	{ "a.b", "{\"a\":{\"c\":1}", 0, JPREFIX_ABSENT, NULL },
	{ "a.b", "{\"a\":7", 0, JPREFIX_ABSENT, NULL },
	{ "a.b", "{\"a\":[{\"b\":1}]", 0, JPREFIX_ABSENT, NULL },
	{ "type", "[{\"type\":1}]", 1, JPREFIX_ABSENT, NULL },
	{ "type", "\"type\"", 1, JPREFIX_ABSENT, NULL },
	{ "type", "12", 1, JPREFIX_ABSENT, NULL },
	/* not decided yet: a key, a value or a number running to the end */
	{ "type", "", 0, JPREFIX_MORE, NULL },
	{ "type", "  ", 0, JPREFIX_MORE, NULL },
	{ "type", "{", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"ty", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"type\"", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"type\":", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"type\":\"ord", 0, JPREFIX_MORE, NULL },
	{ "n", "{\"n\":12", 0, JPREFIX_MORE, NULL },
	{ "n", "{\"n\":tr", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"data\":{\"x\":[1,2", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"data\":\"abc\\\"", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"a\":1", 0, JPREFIX_MORE, NULL },
	{ "type", "{\"a\":1,", 0, JPREFIX_MORE, NULL },
	/* the same cut short at the end of the text: invalid, except a value complete there */
	{ "type", "", 1, JPREFIX_INVALID, NULL },
	{ "type", "{\"type\":\"ord", 1, JPREFIX_INVALID, NULL },
	{ "n", "{\"n\":12", 1, JPREFIX_FOUND, "12" },
	{ "type", "{\"a\":1", 1, JPREFIX_INVALID, NULL },
	/* invalid where read */
	{ "type", "hello", 0, JPREFIX_INVALID, NULL },
	{ "type", "\xef\xbb\xbf{\"type\":1}", 1, JPREFIX_INVALID, NULL },
	{ "type", "{type:1}", 0, JPREFIX_INVALID, NULL },
	{ "type", "{\"a\" 1}", 0, JPREFIX_INVALID, NULL },
	{ "type", "{\"a\":1,}", 0, JPREFIX_INVALID, NULL },
	{ "type", "{\"a\":1;}", 0, JPREFIX_INVALID, NULL },
	{ "type", "{\"a\":tru,\"type\":1}", 0, JPREFIX_INVALID, NULL },
	{ "type", "{\"type\":01}", 0, JPREFIX_INVALID, NULL },
	{ "a.b", "{\"a\":x", 0, JPREFIX_INVALID, NULL },
};

START_TEST(test_find)
{
	char value[256];
	const char *text = find_cases[_i].text;
	int r = find(text, strlen(text), find_cases[_i].complete, find_cases[_i].path, 1, value);

	ck_assert_msg(r == find_cases[_i].result, "%s in %s: %d", find_cases[_i].path, text, r);
	if (r == JPREFIX_FOUND)
		ck_assert_str_eq(value, find_cases[_i].value);
}
END_TEST

/* Texts and paths whose every prefix must either wait or say what the whole text says. */
static const struct {
	const char *path;
	const char *text;
} whole_cases[] = {
	{ "type", "{\"type\":\"order\",\"data\":[1,2,3]}" },
	{ "type", "{\"data\":{\"a\":[1,\"}]\"],\"b\":\"\\\"\"},\"type\":\"order\"}" },
	{ "type", " { \"data\" : 123 , \"other\" : null } " },
	{ "n", "{\"x\":-1.5e-3,\"n\":12345}" },
	{ "a.b", "{\"a\":{\"c\":{\"b\":1},\"b\":false},\"z\":0}" },
	{ "a.b", "{\"a\":[],\"a\":{\"b\":1}}" },
	{ "t", "{\"t\\u00e9\":1,\"t\":\"\\ud83d\\ude00\"}" },
	{ "t", "{\"a\":1 \"t\":2}" },
	{ "t", "[{\"t\":1}]" },
};

START_TEST(test_prefixes_agree)
{
	const char *text = whole_cases[_i].text, *path = whole_cases[_i].path;
	size_t n = strlen(text), k;
	char whole[256], part[256];
	int full = find(text, n, 1, path, 1, whole), r;

	for (k = 0; k < n; k++) {
		r = find(text, k, 0, path, 1, part);
		ck_assert_msg(r == JPREFIX_MORE || r == full, "%s: %d at %zu, %d whole", text, r,
		    k, full);
		if (r == JPREFIX_FOUND)
			ck_assert_str_eq(part, whole);
	}
}
END_TEST

/* A value off the path is skipped whole, whatever its size; on the path it is entered. */
START_TEST(test_large_values)
{
	size_t big = 10 * 1024 * 1024, n;
	char *text = malloc(big + 64), value[64];

	ck_assert_ptr_nonnull(text);
	n = (size_t)sprintf(text, "{\"data\":\"");
	memset(text + n, 'x', big);
	n += big;
	n += (size_t)sprintf(text + n, "\",\"type\":\"a\"}");
	ck_assert_int_eq(find(text, n, 1, "type", 1, value), JPREFIX_FOUND);
	ck_assert_str_eq(value, "\"a\"");
	ck_assert_int_eq(find(text, 65536, 0, "type", 1, value), JPREFIX_MORE);
	/* An object on the path or an object found need not be complete without whole. */
	memcpy(text, "{\"data\":{\"a\":\"", 14);
	ck_assert_int_eq(find(text, 65536, 0, "data", 0, value), JPREFIX_FOUND);
	ck_assert_str_eq(value, "{");
	ck_assert_int_eq(find(text, 65536, 0, "data", 1, value), JPREFIX_MORE);
	ck_assert_int_eq(find(text, 65536, 0, "data.b", 1, value), JPREFIX_MORE);
	free(text);
}
END_TEST

START_TEST(test_depth)
{
	const char *text = "{\"a\":{\"b\":{\"c\":1}},\"t\":1}";
	struct jcond_seg seg = { (char *)"t", 1 };
	const char *json;
	size_t vlen;
	unsigned char type;

	ck_assert_int_eq(jprefix_find(text, strlen(text), 1, 3, 1, &seg, 1, &json, &vlen, &type),
	    JPREFIX_FOUND);
	ck_assert_int_eq(jprefix_find(text, strlen(text), 1, 2, 1, &seg, 1, &json, &vlen, &type),
	    JPREFIX_INVALID);
}
END_TEST

START_TEST(test_path)
{
	struct jcond_seg segs[JPREFIX_MAX_PATH];
	char deep[2 * JPREFIX_MAX_PATH + 2];
	size_t i;

	ck_assert_uint_eq(jprefix_path("user.id", 7, segs), 2);
	ck_assert(segs[0].len == 4 && memcmp(segs[0].name, "user", 4) == 0);
	ck_assert(segs[1].len == 2 && memcmp(segs[1].name, "id", 2) == 0);
	ck_assert_uint_eq(jprefix_path("type", 4, segs), 1);
	ck_assert_uint_eq(jprefix_path("", 0, segs), 0);
	ck_assert_uint_eq(jprefix_path("a..b", 4, segs), 0);
	ck_assert_uint_eq(jprefix_path(".a", 2, segs), 0);
	ck_assert_uint_eq(jprefix_path("a.", 2, segs), 0);
	for (i = 0; i < JPREFIX_MAX_PATH; i++)
		memcpy(deep + 2 * i, "a.", 2);
	ck_assert_uint_eq(jprefix_path(deep, 2 * JPREFIX_MAX_PATH - 1, segs), JPREFIX_MAX_PATH);
	deep[2 * JPREFIX_MAX_PATH] = 'b';
	ck_assert_uint_eq(jprefix_path(deep, 2 * JPREFIX_MAX_PATH + 1, segs), 0);
}
END_TEST

/* Compile a condition from YAML text. */
static struct jcond *
compile(const char *yaml)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	struct config_parse *ctx = config_parse_new("t.yaml");
	struct jcond *c;

	ck_assert(yaml_parser_initialize(&parser));
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, strlen(yaml));
	ck_assert(yaml_parser_load(&parser, &doc));
	c = jcond_parse(ctx, &doc, yaml_document_get_root_node(&doc));
	ck_assert_ptr_nonnull(c);
	config_parse_free(ctx);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return c;
}

static const struct {
	const char *cond;
	const char *text;
	int complete;
	int result;
} eval_cases[] = {
	{ "{field: type, equals: ab}", "{\"type\":\"a\\u0062\",", 0, 1 },
	{ "{field: type, equals: ab}", "{\"type\":\"ab \",", 0, 0 },
	{ "{field: n, equals: 1}", "{\"n\":1.0,", 0, 1 },
	{ "{field: n, equals: 1}", "{\"n\":1e0}", 1, 1 },
	{ "{field: n, equals: 1}", "{\"n\":1", 0, JPREFIX_MORE },
	{ "{field: n, in: [2, 3]}", "{\"n\":10e-1}", 1, 0 },
	{ "{field: user.tier, prefix: gold}", "{\"user\":{\"tier\":\"golden\"", 0, 1 },
	{ "{field: type, exists: false}", "{\"a\":1}", 0, 1 },
	{ "{field: type, exists: false}", "{\"a\":1", 0, JPREFIX_MORE },
	{ "{field: data, exists: true}", "{\"data\":{\"big\":\"xxxx", 0, 1 },
	{ "{field: data, type: array}", "{\"data\":[1,", 0, 1 },
	{ "{field: data, equals: 1}", "{\"data\":[1,", 0, 0 },
	{ "{all: [{field: a, equals: 1}, {field: b, equals: 2}]}", "{\"a\":0,\"b\":", 0, 0 },
	{ "{all: [{field: a, equals: 1}, {field: b, equals: 2}]}", "{\"a\":1,\"b\":", 0,
	    JPREFIX_MORE },
	{ "{any: [{field: a, equals: 1}, {field: b, equals: 2}]}", "{\"a\":1,\"b\":", 0, 1 },
	/* fields are read in the order written: an undecided one stops the evaluation */
	{ "{any: [{field: a, equals: 1}, {field: b, equals: 2}]}", "{\"b\":2,\"a\":", 0,
	    JPREFIX_MORE },
	{ "{not: {field: a, equals: 1}}", "{\"a\":2}", 1, 1 },
	{ "{field: a, equals: 1}", "{\"a\" 1}", 0, JPREFIX_INVALID },
	{ "{field: a, equals: 1}", "[1]", 1, 0 },
};

START_TEST(test_eval)
{
	struct jcond *c = compile(eval_cases[_i].cond);
	const char *text = eval_cases[_i].text;

	ck_assert_int_eq(jprefix_eval(c, text, strlen(text), eval_cases[_i].complete, 100),
	    eval_cases[_i].result);
	jcond_free(c);
}
END_TEST

static Suite *
jprefix_suite(void)
{
	Suite *s = suite_create("jprefix");
	TCase *tc = tcase_create("prefix");

	tcase_add_loop_test(tc, test_find, 0, (int)(sizeof(find_cases) / sizeof(find_cases[0])));
	tcase_add_loop_test(tc, test_prefixes_agree, 0,
	    (int)(sizeof(whole_cases) / sizeof(whole_cases[0])));
	tcase_add_test(tc, test_large_values);
	tcase_add_test(tc, test_depth);
	tcase_add_test(tc, test_path);
	tcase_add_loop_test(tc, test_eval, 0, (int)(sizeof(eval_cases) / sizeof(eval_cases[0])));
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(jprefix_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
