/* The block allocator on its own: a pool of blocks with no body pool, HTTP or config around. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "block.h"
#include "timers.h"

START_TEST(a_released_block_is_taken_again)
{
	struct body_block_pool *pool = body_block_pool_new();
	struct body_block *a, *b;

	ck_assert_ptr_nonnull(pool);
	a = body_block_pool_get(pool, 1000);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq(body_block_size(a), 64 * 1024);
	body_block_release(a);
	b = body_block_pool_get(pool, 2000);    /* from the free list: no new memory */
	ck_assert_ptr_eq(a, b);
	body_block_release(b);
	body_block_release(NULL);
	body_block_pool_free(pool);
}
END_TEST

START_TEST(a_referenced_block_lives_until_its_chains_are_freed)
{
	struct body_block_pool *pool = body_block_pool_new();
	struct evbuffer *out = evbuffer_new();
	struct body_block *a, *b;

	a = body_block_pool_get(pool, 10);
	memcpy(body_block_data(a), "0123456789", 10);
	ck_assert_int_eq(body_block_add_to(out, a, 10), 0);
	body_block_release(a);
	b = body_block_pool_get(pool, 10);      /* a is still out's */
	ck_assert_ptr_ne(a, b);
	body_block_release(b);
	ck_assert_int_eq(memcmp(evbuffer_pullup(out, -1), "0123456789", 10), 0);
	evbuffer_free(out);                     /* the last reference: a goes back to the pool */
	b = body_block_pool_get(pool, 10);
	ck_assert_ptr_eq(a, b);
	body_block_release(b);
	body_block_pool_free(pool);
}
END_TEST

/* Long spans go out by reference (later writes to the block show), short ones as copies. */
START_TEST(spans_by_reference_or_copied)
{
	struct body_block_pool *pool = body_block_pool_new();
	struct evbuffer *copied = evbuffer_new(), *referenced = evbuffer_new(),
	    *short_ref = evbuffer_new();
	struct body_block *b = body_block_pool_get(pool, BODY_REFERENCE_MIN);
	char *p = body_block_data(b);

	memset(p, 'a', BODY_REFERENCE_MIN);
	ck_assert_int_eq(body_block_add_span(copied, b, p, BODY_REFERENCE_MIN - 1), 0);
	ck_assert_int_eq(body_block_add_span(referenced, b, p, BODY_REFERENCE_MIN), 0);
	ck_assert_int_eq(body_block_add_ref(short_ref, b, p + 1, 1), 0);
	body_block_release(b);
	p[0] = 'b';
	p[1] = 'c';
	ck_assert_int_eq(((char *)evbuffer_pullup(copied, -1))[0], 'a');
	ck_assert_uint_eq(evbuffer_get_length(copied), BODY_REFERENCE_MIN - 1);
	ck_assert_int_eq(((char *)evbuffer_pullup(referenced, 1))[0], 'b');
	ck_assert_uint_eq(evbuffer_get_length(referenced), BODY_REFERENCE_MIN);
	ck_assert_int_eq(((char *)evbuffer_pullup(short_ref, 1))[0], 'c');
	evbuffer_free(copied);
	evbuffer_free(referenced);
	evbuffer_free(short_ref);
	body_block_pool_free(pool);
}
END_TEST

START_TEST(reserve_keeps_the_bytes_of_a_block_nobody_shares)
{
	struct body_block_pool *pool = body_block_pool_new();
	struct body_block *b = body_block_pool_get(pool, 3), *was;

	memcpy(body_block_data(b), "abc", 3);
	ck_assert_int_eq(body_block_reserve(&b, 200000), 0);
	ck_assert_uint_ge(body_block_size(b), 200000);
	ck_assert_int_eq(memcmp(body_block_data(b), "abc", 3), 0);
	body_block_ref(b);                      /* shared: it cannot move */
	was = b;
	ck_assert_int_eq(body_block_reserve(&b, 400000), -1);
	ck_assert_ptr_eq(b, was);
	ck_assert_uint_lt(body_block_size(b), 400000);
	body_block_release(b);
	body_block_release(b);
	body_block_pool_free(pool);
}
END_TEST

START_TEST(a_copy_of_a_buffer)
{
	struct body_block_pool *pool = body_block_pool_new();
	struct evbuffer *src = evbuffer_new(), *out = evbuffer_new();
	struct body_block *b;

	evbuffer_add(src, "hello, ", 7);
	evbuffer_add_reference(src, "world", 5, NULL, NULL);      /* a second chain */
	b = body_block_pool_copy(pool, src);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(memcmp(body_block_data(b), "hello, world", 12), 0);
	ck_assert_uint_eq(evbuffer_get_length(src), 12);        /* copied, not taken */
	ck_assert_int_eq(body_add_copy(out, "x", 1), 0);
	ck_assert_int_eq(body_add_copy(out, "", 0), 0);
	ck_assert_uint_eq(evbuffer_get_length(out), 1);
	body_block_release(b);
	evbuffer_free(src);
	evbuffer_free(out);
	body_block_pool_free(pool);
}
END_TEST

/* With the worker's deadlines, a large body's block is kept for the next large body. */
START_TEST(a_large_block_is_kept_while_large_bodies_come)
{
	struct event_base *base = event_base_new();
	struct timers *t = timers_new(base);
	struct body_block_pool *pool = body_block_pool_new();
	struct body_block *a, *b;

	body_block_pool_set_timers(pool, t);
	a = body_block_pool_get(pool, 3 * BODY_POOL_BLOCK);
	ck_assert_ptr_nonnull(a);
	body_block_release(a);
	b = body_block_pool_get(pool, 3 * BODY_POOL_BLOCK);
	ck_assert_ptr_eq(a, b);
	body_block_release(b);
	body_block_pool_free(pool);             /* stops the trim deadline */
	timers_free(t);
	event_base_free(base);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("block");
	TCase *tc = tcase_create("blocks");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, a_released_block_is_taken_again);
	tcase_add_test(tc, a_referenced_block_lives_until_its_chains_are_freed);
	tcase_add_test(tc, spans_by_reference_or_copied);
	tcase_add_test(tc, reserve_keeps_the_bytes_of_a_block_nobody_shares);
	tcase_add_test(tc, a_copy_of_a_buffer);
	tcase_add_test(tc, a_large_block_is_kept_while_large_bodies_come);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
