/* The per-thread free lists behind libevent's memory. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mempool.h"

START_TEST(freed_blocks_are_taken_again)
{
	void *a = mempool_malloc(1000), *b;

	ck_assert_ptr_nonnull(a);
	memset(a, 0xab, 1000);
	mempool_free(a);
	b = mempool_malloc(900);        /* same class: the same block, no heap call */
	ck_assert_ptr_eq(a, b);
	mempool_free(b);
	b = mempool_malloc(5000);       /* another class */
	ck_assert_ptr_ne(a, b);
	mempool_free(b);
	mempool_thread_release();
}
END_TEST

START_TEST(buffer_chains_fit_their_class)
{
	/* libevent asks for a power of two plus its chain header: 64 KB + 80 stays under 65 KB
	 * of class, so a read buffer does not take a block twice its size. */
	void *p = mempool_malloc(65536 + 80), *q;

	mempool_free(p);
	q = mempool_malloc(65536 + 100);
	ck_assert_ptr_eq(p, q);
	mempool_free(q);
	mempool_thread_release();
}
END_TEST

START_TEST(realloc_keeps_the_bytes)
{
	unsigned char *p = mempool_malloc(100), *q;
	size_t i;

	for (i = 0; i < 100; i++)
		p[i] = (unsigned char)i;
	q = mempool_realloc(p, 150);    /* still fits its class: the same block */
	ck_assert_ptr_eq(p, q);
	q = mempool_realloc(q, 100000);
	for (i = 0; i < 100; i++)
		ck_assert_uint_eq(q[i], i);
	q = mempool_realloc(q, 10u << 20);      /* past the largest class: the heap's */
	ck_assert_ptr_nonnull(q);
	for (i = 0; i < 100; i++)
		ck_assert_uint_eq(q[i], i);
	mempool_free(q);
	ck_assert_ptr_nonnull(q = mempool_realloc(NULL, 10));
	mempool_free(q);
	mempool_free(NULL);
	mempool_thread_release();
}
END_TEST

START_TEST(what_a_thread_keeps_is_bounded)
{
	enum { N = 2000 };
	void **blocks = calloc(N, sizeof(*blocks)), **again = calloc(N, sizeof(*again));
	size_t i, reused = 0;

	ck_assert_ptr_nonnull(blocks);
	ck_assert_ptr_nonnull(again);
	for (i = 0; i < N; i++)
		blocks[i] = mempool_malloc(200);
	for (i = 0; i < N; i++)
		mempool_free(blocks[i]);
	/* 512 blocks of the class are kept, and taken again first; the rest went back to the
	 * heap, which may or may not hand them out again (it does not under a sanitizer). */
	for (i = 0; i < N; i++) {
		size_t j;
		again[i] = mempool_malloc(200);
		for (j = 0; j < N && blocks[j] != again[i]; j++)
			;
		reused += j < N;
		if (i < 512)
			ck_assert_uint_lt(j, N);
	}
	ck_assert_uint_ge(reused, 512);
	for (i = 0; i < N; i++)
		mempool_free(again[i]);
	mempool_thread_release();
	free(blocks);
	free(again);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("mempool");
	TCase *tc = tcase_create("lists");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, freed_blocks_are_taken_again);
	tcase_add_test(tc, buffer_chains_fit_their_class);
	tcase_add_test(tc, realloc_keeps_the_bytes);
	tcase_add_test(tc, what_a_thread_keeps_is_bounded);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
