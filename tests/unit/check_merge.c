/* The flat merge: members side by side, a later (decoded-equal) key winning, spans out. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

struct out {
	char buf[256 * 1024];
	size_t n;
};

static void
emit_cb(void *arg, size_t source, const char *p, size_t len)
{
	struct out *o = arg;
	int n = snprintf(o->buf + o->n, sizeof(o->buf) - o->n, "%s%zu[%.*s]", o->n ? " " : "",
	    source, (int)len, p);

	ck_assert(n > 0 && (size_t)n < sizeof(o->buf) - o->n);
	o->n += (size_t)n;
}

/* The spans of merging objs[0..n) (NULL: a source not added), after reserving key. */
static const char *
merged(const char *const *objs, size_t n, const char *reserve, long *spans)
{
	static struct out o;
	struct merge *m = merge_new();
	size_t i;

	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(merge_reset(m, n), 0);
	for (i = 0; i < n; i++)
		if (objs[i] != NULL)
			ck_assert_int_eq(merge_add(m, i, objs[i], strlen(objs[i]), 100,
			    SIZE_MAX), 0);
	if (reserve != NULL)
		ck_assert_int_eq(merge_reserve(m, reserve, strlen(reserve)), 0);
	memset(&o, 0, sizeof(o));
	*spans = merge_spans(m, emit_cb, &o);
	merge_free(m);
	return o.buf;
}

START_TEST(test_side_by_side)
{
	const char *objs[] = { "{\"a\":1, \"b\" : [2]}", "{}", "{\"c\":{\"a\":1}}" };
	long n;

	ck_assert_str_eq(merged(objs, 3, NULL, &n), "0[\"a\":1, \"b\" : [2]] 2[\"c\":{\"a\":1}]");
	ck_assert_int_eq(n, 2);
}
END_TEST

START_TEST(test_later_wins)
{
	const char *objs[] = {
		"{\"a\":1,\"b\":2,\"c\":3,\"a\":4}", NULL, "{\"b\":5,\"d\":6}"
	};
	long n;

	ck_assert_str_eq(merged(objs, 3, NULL, &n), "0[\"c\":3,\"a\":4] 2[\"b\":5,\"d\":6]");
}
END_TEST

START_TEST(test_decoded_keys)
{
	const char *objs[] = {
		"{\"\\u0061\":1,\"x\\/\":2,\"\\ud83d\\ude00\":3,\"k\":4}",
		"{\"a\":5,\"\\u0078/\":6,\"\xf0\x9f\x98\x80\":7,\"K\":8}"
	};
	long n;

	ck_assert_str_eq(merged(objs, 2, NULL, &n),
	    "0[\"k\":4] 1[\"a\":5,\"\\u0078/\":6,\"\xf0\x9f\x98\x80\":7,\"K\":8]");
}
END_TEST

START_TEST(test_reserved_key)
{
	const char *objs[] = { "{\"errors\":[1],\"a\":1}", "{\"b\":2,\"err\\u006frs\":3}" };
	long n;

	ck_assert_str_eq(merged(objs, 2, "\"errors\"", &n), "0[\"a\":1] 1[\"b\":2]");
	ck_assert_int_eq(n, 2);
}
END_TEST

START_TEST(test_not_objects)
{
	struct merge *m = merge_new();

	ck_assert_int_eq(merge_reset(m, 1), 0);
	ck_assert_int_eq(merge_add(m, 0, "[1]", 3, 100, 10), MERGE_ERR_NOT_OBJECT);
	ck_assert_int_eq(merge_add(m, 0, "{\"a\":1} ", 8, 100, 10), MERGE_ERR_NOT_OBJECT);
	ck_assert_int_eq(merge_add(m, 0, "{\"a\":}", 6, 100, 10), MERGE_ERR_NOT_OBJECT);
	ck_assert_int_eq(merge_add(m, 0, "{\"a\":[[1]]}", 11, 2, 10), MERGE_ERR_NOT_OBJECT);
	merge_free(m);
}
END_TEST

/* Many members with colliding buckets: each key once, the last of each. */
START_TEST(test_many)
{
	static char obj[200000];
	static struct out o;
	const char *objs[2];
	struct merge *m = merge_new();
	size_t n = 0, i;

	n += (size_t)snprintf(obj + n, sizeof(obj) - n, "{");
	for (i = 0; i < 5000; i++)
		n += (size_t)snprintf(obj + n, sizeof(obj) - n, "%s\"k%zu\":%zu", i ? "," : "",
		    i % 2500, i);
	n += (size_t)snprintf(obj + n, sizeof(obj) - n, "}");
	objs[0] = obj;
	objs[1] = "{\"k0\":0}";
	ck_assert_int_eq(merge_reset(m, 2), 0);
	ck_assert_int_eq(merge_add(m, 0, objs[0], n, 10, SIZE_MAX), 0);
	ck_assert_int_eq(merge_add(m, 1, objs[1], strlen(objs[1]), 10, SIZE_MAX), 0);
	memset(&o, 0, sizeof(o));
	/* the second half of source 0 but k0 (a run from k1 on), then source 1 */
	ck_assert_int_eq(merge_spans(m, emit_cb, &o) > 0, 1);
	ck_assert(strncmp(o.buf, "0[\"k1\":2501,", 12) == 0);
	ck_assert(strstr(o.buf, "\"k2499\":4999] 1[\"k0\":0]") != NULL);
	merge_free(m);
}
END_TEST

/* max_members bounds each object's top-level members; an object over it adds nothing, and
 * the merge goes on with the others. */
START_TEST(test_max_members)
{
	static struct out o;
	struct merge *m = merge_new();
	const char *three = "{\"a\":{\"x\":1,\"y\":2},\"b\":2,\"c\":3}";

	ck_assert_int_eq(merge_reset(m, 3), 0);
	ck_assert_int_eq(merge_add(m, 0, three, strlen(three), 10, 3), 0);
	ck_assert_int_eq(merge_add(m, 1, "{\"d\":1,\"e\":2,\"f\":3,\"g\":4}", 25, 10, 3),
	    MERGE_ERR_MEMBERS);
	ck_assert_int_eq(merge_add(m, 2, "{\"c\":0,\"h\":1,\"a\":1", 18, 10, 3),
	    MERGE_ERR_NOT_OBJECT);
	ck_assert_int_eq(merge_add(m, 2, "{\"c\":0}", 7, 10, 3), 0);
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(merge_spans(m, emit_cb, &o), 2);
	ck_assert_str_eq(o.buf, "0[\"a\":{\"x\":1,\"y\":2},\"b\":2] 2[\"c\":0]");
	merge_release(m);
	merge_free(m);
}
END_TEST

/* A merge grown large gives its arrays back; the next one works as before. */
START_TEST(test_release)
{
	static char obj[240000];
	static struct out o;
	struct merge *m = merge_new();
	size_t n = 0, i;

	n += (size_t)snprintf(obj + n, sizeof(obj) - n, "{");
	for (i = 0; i < 20000; i++)
		n += (size_t)snprintf(obj + n, sizeof(obj) - n, "%s\"k%zu\":1", i ? "," : "", i);
	n += (size_t)snprintf(obj + n, sizeof(obj) - n, "}");
	ck_assert_int_eq(merge_reset(m, 1), 0);
	ck_assert_int_eq(merge_add(m, 0, obj, n, 10, SIZE_MAX), 0);
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(merge_spans(m, emit_cb, &o), 1);
	merge_release(m);
	ck_assert_int_eq(merge_reset(m, 2), 0);
	ck_assert_int_eq(merge_add(m, 0, "{\"a\":1}", 7, 10, SIZE_MAX), 0);
	ck_assert_int_eq(merge_add(m, 1, "{\"a\":2}", 7, 10, SIZE_MAX), 0);
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(merge_spans(m, emit_cb, &o), 1);
	ck_assert_str_eq(o.buf, "1[\"a\":2]");
	merge_free(m);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("merge");
	TCase *tc = tcase_create("flat");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_side_by_side);
	tcase_add_test(tc, test_later_wins);
	tcase_add_test(tc, test_decoded_keys);
	tcase_add_test(tc, test_reserved_key);
	tcase_add_test(tc, test_not_objects);
	tcase_add_test(tc, test_many);
	tcase_add_test(tc, test_max_members);
	tcase_add_test(tc, test_release);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
