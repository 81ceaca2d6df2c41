#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

#define S 1000000000ULL
#define T0 (1000 * S)

START_TEST(test_rate_parse)
{
	uint64_t n, p;
	struct ratelimit_rule r;

	ck_assert_int_eq(ratelimit_rate_parse("100/s", &n, &p), 0);
	ck_assert_uint_eq(n, 100);
	ck_assert_uint_eq(p, S);
	ck_assert_int_eq(ratelimit_rate_parse("10/m", &n, &p), 0);
	ck_assert_uint_eq(p, 60 * S);
	ck_assert_int_eq(ratelimit_rate_parse("5/h", &n, &p), 0);
	ck_assert_uint_eq(p, 3600 * S);
	ck_assert_int_eq(ratelimit_rate_parse("1/d", &n, &p), 0);
	ck_assert_uint_eq(p, 86400 * S);
	ck_assert_int_eq(ratelimit_rate_parse("10/x", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("0/s", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("/s", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("5/ss", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("5", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("-5/s", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("1.5/s", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rate_parse("99999999999/s", &n, &p), -1);
	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 3, S, 10), 0);
	ck_assert_uint_eq(r.interval_ns, 333333333);
	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 3, S, 0), -1);
	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 2 * S, S, 1), -1);
	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 1, 86400 * S, RATELIMIT_MAX_BURST + 1), -1);
}
END_TEST

#define ASSERT_ANSWER(a, adm, rem, res, retry) do { \
	ck_assert_int_eq((a).admitted, adm); \
	ck_assert_uint_eq((a).remaining, rem); \
	ck_assert_uint_eq((a).reset, res); \
	ck_assert_uint_eq((a).retry_after, retry); \
} while (0)

START_TEST(test_gcra_burst_then_refill)
{
	struct ratelimit_rule r;
	struct ratelimit_answer a;
	uint64_t tat = 0;
	unsigned i;

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 5, S, 5), 0);      /* 5/s, burst 5 */
	for (i = 0; i < 5; i++) {
		ratelimit_gcra(&tat, &r, T0, &a);
		ASSERT_ANSWER(a, 1, 4 - i, 1, 0);
		ck_assert_uint_eq(a.limit, 5);
	}
	ratelimit_gcra(&tat, &r, T0, &a);
	ASSERT_ANSWER(a, 0, 0, 1, 1);
	ck_assert_uint_eq(tat, T0 + S);                 /* a refusal costs nothing */
	/* One request's worth later, one more. */
	ratelimit_gcra(&tat, &r, T0 + S / 5 - 1, &a);
	ck_assert_int_eq(a.admitted, 0);
	ratelimit_gcra(&tat, &r, T0 + S / 5, &a);
	ASSERT_ANSWER(a, 1, 0, 1, 0);
	ratelimit_gcra(&tat, &r, T0 + S / 5, &a);
	ck_assert_int_eq(a.admitted, 0);
	/* Idle a second: the whole burst again. */
	for (i = 0; i < 5; i++) {
		ratelimit_gcra(&tat, &r, T0 + 3 * S, &a);
		ASSERT_ANSWER(a, 1, 4 - i, 1, 0);
	}
	ratelimit_gcra(&tat, &r, T0 + 3 * S, &a);
	ck_assert_int_eq(a.admitted, 0);
}
END_TEST

START_TEST(test_gcra_seconds)
{
	struct ratelimit_rule r;
	struct ratelimit_answer a;
	uint64_t tat = 0;

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 1, 60 * S, 2), 0); /* 1/m, burst 2 */
	ratelimit_gcra(&tat, &r, T0, &a);
	ASSERT_ANSWER(a, 1, 1, 60, 0);
	ratelimit_gcra(&tat, &r, T0, &a);
	ASSERT_ANSWER(a, 1, 0, 120, 0);
	ratelimit_gcra(&tat, &r, T0, &a);
	ASSERT_ANSWER(a, 0, 0, 120, 60);
	ratelimit_gcra(&tat, &r, T0 + 59 * S + 1, &a);
	ASSERT_ANSWER(a, 0, 0, 61, 1);
	ratelimit_gcra(&tat, &r, T0 + 60 * S, &a);
	ASSERT_ANSWER(a, 1, 0, 120, 0);
}
END_TEST

START_TEST(test_table_keys_and_rules)
{
	struct ratelimit *rl = ratelimit_new(1000);
	struct ratelimit_rule r1, r2;
	struct ratelimit_answer a;
	int i;

	ck_assert_int_eq(ratelimit_rule_init(&r1, 1, 1, S, 3), 0);
	ck_assert_int_eq(ratelimit_rule_init(&r2, 2, 1, S, 3), 0);
	for (i = 0; i < 3; i++) {
		ratelimit_take(rl, &r1, "alice", 5, T0, &a);
		ck_assert_int_eq(a.admitted, 1);
	}
	ratelimit_take(rl, &r1, "alice", 5, T0, &a);
	ck_assert_int_eq(a.admitted, 0);
	ck_assert_uint_eq(a.retry_after, 1);
	/* Another key, the same key under another rule, a key that is a prefix: buckets of
	 * their own. */
	ratelimit_take(rl, &r1, "bob", 3, T0, &a);
	ASSERT_ANSWER(a, 1, 2, 1, 0);
	ratelimit_take(rl, &r2, "alice", 5, T0, &a);
	ASSERT_ANSWER(a, 1, 2, 1, 0);
	ratelimit_take(rl, &r1, "alic", 4, T0, &a);
	ASSERT_ANSWER(a, 1, 2, 1, 0);
	ck_assert_uint_eq(ratelimit_count(rl), 4);
	/* Keys of any bytes and length. */
	ratelimit_take(rl, &r1, "a\0b-with-a-longer-tail", 22, T0, &a);
	ck_assert_int_eq(a.admitted, 1);
	ratelimit_take(rl, &r1, "", 0, T0, &a);
	ck_assert_int_eq(a.admitted, 1);
	ratelimit_take(rl, &r1, "alice", 5, T0 + S, &a);
	ASSERT_ANSWER(a, 1, 0, 3, 0);
	ratelimit_free(rl);
}
END_TEST

START_TEST(test_table_bounded)
{
	struct ratelimit *rl = ratelimit_new(64);
	struct ratelimit_rule r;
	struct ratelimit_answer a;
	char key[32];
	int i;

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 1, 3600 * S, 1), 0);
	for (i = 0; i < 10000; i++) {
		snprintf(key, sizeof(key), "client-%d", i);
		ratelimit_take(rl, &r, key, strlen(key), T0, &a);
		ck_assert_int_eq(a.admitted, 1);
		ck_assert_uint_le(ratelimit_count(rl), 64);
	}
	ck_assert_uint_eq(ratelimit_count(rl), 64);
	/* The most recent key is still limited. */
	ratelimit_take(rl, &r, key, strlen(key), T0, &a);
	ck_assert_int_eq(a.admitted, 0);
	ratelimit_free(rl);
}
END_TEST

START_TEST(test_idle_keys_dropped)
{
	struct ratelimit *rl = ratelimit_new(100000);
	struct ratelimit_rule r;
	struct ratelimit_answer a;
	char key[32];
	int i;

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 10, S, 10), 0);
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "old-%d", i);
		ratelimit_take(rl, &r, key, strlen(key), T0, &a);
	}
	ck_assert_uint_eq(ratelimit_count(rl), 1000);
	/* A second later every bucket is full again: new keys push out up to two idle ones
	 * each. */
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "new-%d", i);
		ratelimit_take(rl, &r, key, strlen(key), T0 + S, &a);
	}
	ck_assert_uint_lt(ratelimit_count(rl), 1300);
	ratelimit_free(rl);
}
END_TEST

struct hammer {
	struct ratelimit *rl;
	const struct ratelimit_rule *rule;
	pthread_barrier_t *start;
	int n;
	uint64_t fixed_now;             /* 0: the real clock */
	int admitted;
};

static void *
hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct ratelimit_answer a;
	int i;

	pthread_barrier_wait(h->start);
	for (i = 0; i < h->n; i++) {
		ratelimit_take(h->rl, h->rule, "203.0.113.7", 11,
		    h->fixed_now != 0 ? h->fixed_now : ratelimit_now(), &a);
		h->admitted += a.admitted;
	}
	return NULL;
}

static int
hammer(int threads, int each, uint64_t fixed_now, uint64_t count, uint32_t burst)
{
	struct ratelimit *rl = ratelimit_new(1000);
	struct ratelimit_rule r;
	pthread_barrier_t start;
	struct hammer h[8];
	pthread_t t[8];
	int i, total = 0;

	ck_assert_int_eq(ratelimit_rule_init(&r, 7, count, S, burst), 0);
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (i = 0; i < threads; i++) {
		h[i] = (struct hammer){ .rl = rl, .rule = &r, .start = &start, .n = each,
		    .fixed_now = fixed_now };
		ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	for (i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		total += h[i].admitted;
	}
	pthread_barrier_destroy(&start);
	ratelimit_free(rl);
	return total;
}

/* Two workers, 30 requests at once, rate 5/s burst 5: one bucket for both. */
START_TEST(test_two_threads_share_one_bucket)
{
	int admitted = hammer(2, 15, 0, 5, 5);

	ck_assert_msg(admitted >= 5 && admitted <= 7, "admitted %d", admitted);
}
END_TEST

/* At one instant exactly the burst, however many threads race for it. */
START_TEST(test_exact_under_contention)
{
	ck_assert_int_eq(hammer(8, 2000, T0, 5, 100), 100);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("ratelimit");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_rate_parse);
	tcase_add_test(tc, test_gcra_burst_then_refill);
	tcase_add_test(tc, test_gcra_seconds);
	tcase_add_test(tc, test_table_keys_and_rules);
	tcase_add_test(tc, test_table_bounded);
	tcase_add_test(tc, test_idle_keys_dropped);
	tcase_add_test(tc, test_two_threads_share_one_bucket);
	tcase_add_test(tc, test_exact_under_contention);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
