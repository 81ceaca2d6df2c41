/* Unit tests for timers.c: deadlines in lists by duration, one wake-up timer per loop. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "timers.h"

/* The order deadlines ran in, by name. */
static char fired[64];

struct named {
	struct deadline d;
	char name;
	struct named *start_other;      /* started (with other_ms) when this one runs */
	uint64_t other_ms;
	struct named *stop_other;       /* stopped when this one runs */
};

static void
named_cb(struct deadline *d, void *arg)
{
	struct named *n = arg;
	size_t len = strlen(fired);

	ck_assert_ptr_eq(d, &n->d);
	ck_assert(!deadline_running(d));
	if (len + 1 < sizeof(fired)) {
		fired[len] = n->name;
		fired[len + 1] = '\0';
	}
	if (n->start_other != NULL)
		ck_assert_int_eq(deadline_start(&n->start_other->d, n->other_ms), 0);
	if (n->stop_other != NULL)
		deadline_stop(&n->stop_other->d);
}

static void
named_init(struct named *n, struct timers *t, char name)
{
	memset(n, 0, sizeof(*n));
	n->name = name;
	deadline_init(&n->d, t, named_cb, n);
}

/* Run the loop for ms milliseconds of wall time. */
static void
run_for(struct event_base *base, unsigned ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

/* Run the loop until n deadlines ran (at most 10 s): order is what the tests look at, since a
 * loaded machine may wake the loop late but never early. */
static void
run_until(struct event_base *base, size_t n)
{
	for (int i = 0; i < 1000 && strlen(fired) < n; i++)
		run_for(base, 10);
}

static struct event_base *base;
static struct timers *timers;

static void
setup(void)
{
	fired[0] = '\0';
	ck_assert_ptr_nonnull(base = event_base_new());
	ck_assert_ptr_nonnull(timers = timers_new(base));
	ck_assert_ptr_eq(timers_base(timers), base);
}

static void
teardown(void)
{
	timers_free(timers);
	event_base_free(base);
}

START_TEST(test_order_across_durations)
{
	struct named a, b, c;

	named_init(&a, timers, 'a');
	named_init(&b, timers, 'b');
	named_init(&c, timers, 'c');
	ck_assert_int_eq(deadline_start(&c.d, 900), 0);
	ck_assert_int_eq(deadline_start(&a.d, 300), 0);
	ck_assert_int_eq(deadline_start(&b.d, 600), 0);
	ck_assert(deadline_running(&a.d));
	run_for(base, 20);
	ck_assert_str_eq(fired, "");            /* nothing runs early */
	run_until(base, 3);
	ck_assert_str_eq(fired, "abc");
	ck_assert(!deadline_running(&a.d) && !deadline_running(&b.d) && !deadline_running(&c.d));
}
END_TEST

START_TEST(test_restart_moves_later)
{
	struct named x, y;

	named_init(&x, timers, 'x');
	named_init(&y, timers, 'y');
	ck_assert_int_eq(deadline_start(&x.d, 600), 0);
	run_for(base, 50);
	ck_assert_int_eq(deadline_start(&y.d, 600), 0);
	run_for(base, 50);
	/* Activity on x: it now expires after y, which was started later. */
	ck_assert_int_eq(deadline_start(&x.d, 600), 0);
	ck_assert_str_eq(fired, "");
	run_until(base, 2);
	ck_assert_str_eq(fired, "yx");
}
END_TEST

START_TEST(test_stop_and_new_duration)
{
	struct named a, b;

	named_init(&a, timers, 'a');
	named_init(&b, timers, 'b');
	ck_assert_int_eq(deadline_start(&a.d, 100), 0);
	ck_assert_int_eq(deadline_start(&b.d, 200), 0);
	deadline_stop(&a.d);
	deadline_stop(&a.d);            /* stopping twice is harmless */
	ck_assert(!deadline_running(&a.d));
	/* Started again with another duration: it leaves its list for that one's. */
	ck_assert_int_eq(deadline_start(&b.d, 400), 0);
	ck_assert_uint_eq(b.d.ms, 400);
	run_until(base, 1);
	ck_assert_str_eq(fired, "b");
	run_for(base, 150);                     /* a, stopped, never runs */
	ck_assert_str_eq(fired, "b");
}
END_TEST

START_TEST(test_callbacks_start_and_stop_others)
{
	struct named a, b, c, d;

	named_init(&a, timers, 'a');
	named_init(&b, timers, 'b');
	named_init(&c, timers, 'c');
	named_init(&d, timers, 'd');
	/* a and b are due together: a stops b (same list) and starts c (a new duration). */
	a.stop_other = &b;
	a.start_other = &c;
	a.other_ms = 25;
	c.start_other = &d;             /* and c starts d in its own list again */
	c.other_ms = 25;
	ck_assert_int_eq(deadline_start(&a.d, 20), 0);
	ck_assert_int_eq(deadline_start(&b.d, 20), 0);
	run_until(base, 3);
	run_for(base, 50);                      /* and b, stopped by a, never runs */
	ck_assert_str_eq(fired, "acd");
}
END_TEST

START_TEST(test_many_durations)
{
	struct named n[20];
	uint64_t at[20];
	int i;

	/* More durations than the first list array holds: running deadlines keep their place,
	 * and deadlines due together in different lists still run earliest first. */
	for (i = 0; i < 20; i++) {
		named_init(&n[i], timers, (char)('A' + i));
		ck_assert_int_eq(deadline_start(&n[i].d, (uint64_t)(400 - i * 15)), 0);
		at[i] = n[i].d.at;
	}
	run_until(base, 20);
	ck_assert_uint_eq(strlen(fired), 20);
	for (i = 1; i < 20; i++)
		ck_assert_uint_le(at[fired[i - 1] - 'A'], at[fired[i] - 'A']);
}
END_TEST

START_TEST(test_durations_come_and_go)
{
	struct named a;
	int i;

	/* A thousand durations one after the other (as reloads may bring): lists are reused. */
	named_init(&a, timers, 'a');
	for (i = 0; i < 1000; i++)
		ck_assert_int_eq(deadline_start(&a.d, (uint64_t)(100000 + i)), 0);
	ck_assert_uint_eq(a.d.ms, 100999);
	ck_assert_uint_le(timers_lists(timers), 2);
	deadline_stop(&a.d);
	ck_assert_int_eq(deadline_start(&a.d, 30), 0);
	run_until(base, 1);
	ck_assert_str_eq(fired, "a");
}
END_TEST

START_TEST(test_now_is_monotonic_ms)
{
	uint64_t a = timers_now(), b;
	struct timespec pause = { 0, 30 * 1000 * 1000 };

	nanosleep(&pause, NULL);
	b = timers_now();
	ck_assert_uint_ge(b - a, 20);
	ck_assert_uint_lt(b - a, 1000);
}
END_TEST

static Suite *
timers_suite(void)
{
	Suite *s = suite_create("timers");
	TCase *tc = tcase_create("deadlines");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_order_across_durations);
	tcase_add_test(tc, test_restart_moves_later);
	tcase_add_test(tc, test_stop_and_new_duration);
	tcase_add_test(tc, test_callbacks_start_and_stop_others);
	tcase_add_test(tc, test_many_durations);
	tcase_add_test(tc, test_durations_come_and_go);
	tcase_add_test(tc, test_now_is_monotonic_ms);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(timers_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
