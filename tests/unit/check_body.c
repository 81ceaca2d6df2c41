/* Inflating collected bodies: whole (body_inflate) and fed in pieces (body_prefix_inflate, as
 * routing reads the start of a body). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "body.h"

static const char FIRST[] = "{\"user\":\"first member\",";
static const char SECOND[] = "\"n\":2}";

/* One gzip member holding text into out; its length. */
static size_t
gzip_member(const char *text, unsigned char *out, size_t cap)
{
	z_stream zs;
	size_t n;

	memset(&zs, 0, sizeof(zs));
	ck_assert_int_eq(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_in = (Bytef *)(uintptr_t)text;
	zs.avail_in = (uInt)strlen(text);
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
	n = cap - zs.avail_out;
	deflateEnd(&zs);
	return n;
}

/* Two members one after the other; *first is where the second starts. */
static size_t
two_members(unsigned char *out, size_t cap, size_t *first)
{
	*first = gzip_member(FIRST, out, cap);
	return *first + gzip_member(SECOND, out + *first, cap - *first);
}

/* Feed data to the streaming inflater in two pieces split at cut; the result of each. */
static void
feed_split(struct body_pool *pool, const unsigned char *data, size_t len, size_t cut,
    char *out, size_t cap, int *r1, int *r2, size_t *out_len)
{
	ck_assert_int_eq(body_prefix_inflate_start(pool, BODY_CODING_GZIP, out, cap), 0);
	*r1 = body_prefix_inflate(pool, (const char *)data, cut, out_len);
	*r2 = *r1 == BODY_INFLATE_ERROR ? *r1 :
	    body_prefix_inflate(pool, (const char *)data + cut, len - cut, out_len);
}

START_TEST(second_member_split_after_its_first_magic_byte)
{
	struct body_pool *pool = body_pool_new();
	unsigned char data[256];
	char out[256];
	size_t first, len = two_members(data, sizeof(data), &first), n;
	int r1, r2;

	ck_assert_uint_eq(data[first], 0x1f);
	ck_assert_uint_eq(data[first + 1], 0x8b);
	/* A read ending right after the 0x1f that starts the second member. */
	feed_split(pool, data, len, first + 1, out, sizeof(out), &r1, &r2, &n);
	ck_assert_int_eq(r1, BODY_INFLATE_SHORT);
	ck_assert_int_eq(r2, BODY_INFLATE_END);
	ck_assert_uint_eq(n, strlen(FIRST) + strlen(SECOND));
	ck_assert(memcmp(out, FIRST, strlen(FIRST)) == 0);
	ck_assert(memcmp(out + strlen(FIRST), SECOND, strlen(SECOND)) == 0);
	body_pool_free(pool);
}
END_TEST

START_TEST(two_members_split_anywhere)
{
	struct body_pool *pool = body_pool_new();
	unsigned char data[256];
	char out[256];
	size_t first, len = two_members(data, sizeof(data), &first), cut, n;
	int r1, r2;

	for (cut = 0; cut <= len; cut++) {
		feed_split(pool, data, len, cut, out, sizeof(out), &r1, &r2, &n);
		/* Where a member ends, the data so far is a whole body. */
		ck_assert_msg(r1 == (cut == first || cut == len ? BODY_INFLATE_END :
		    BODY_INFLATE_SHORT),
		    "cut at %zu: first feed gave %d", cut, r1);
		ck_assert_msg(r2 == BODY_INFLATE_END, "cut at %zu: second feed gave %d", cut, r2);
		ck_assert_uint_eq(n, strlen(FIRST) + strlen(SECOND));
	}
	body_pool_free(pool);
}
END_TEST

START_TEST(not_a_member_after_the_end_in_pieces)
{
	struct body_pool *pool = body_pool_new();
	unsigned char data[256];
	char out[256];
	size_t len = gzip_member(FIRST, data, sizeof(data)), n;
	int r1, r2;

	/* 0x1f then a byte that is not 0x8b, in separate feeds: still bytes after the end. */
	data[len] = 0x1f;
	data[len + 1] = 0x00;
	feed_split(pool, data, len + 2, len + 1, out, sizeof(out), &r1, &r2, &n);
	ck_assert_int_eq(r1, BODY_INFLATE_SHORT);
	ck_assert_int_eq(r2, BODY_INFLATE_ERROR);
	/* A lone 0x1f at the very end is the start of a member cut short, not an end. */
	ck_assert_int_eq(body_prefix_inflate_start(pool, BODY_CODING_GZIP, out, sizeof(out)), 0);
	ck_assert_int_eq(body_prefix_inflate(pool, (const char *)data, len + 1, &n),
	    BODY_INFLATE_SHORT);
	body_pool_free(pool);
}
END_TEST

START_TEST(whole_body_members_and_trailing_bytes)
{
	struct body_pool *pool = body_pool_new();
	unsigned char data[256];
	struct body_block *b;
	const char *error = NULL;
	size_t first, len = two_members(data, sizeof(data), &first), n;

	b = body_inflate(pool, (const char *)data, len, BODY_CODING_GZIP, 1024, &n, &error);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(n, strlen(FIRST) + strlen(SECOND));
	body_block_release(b);
	data[len] = 'x';
	b = body_inflate(pool, (const char *)data, len + 1, BODY_CODING_GZIP, 1024, &n, &error);
	ck_assert_ptr_null(b);
	ck_assert_str_eq(error, "bytes after the end of the compressed body");
	/* The first magic byte alone after the end: a member cut short. */
	data[len] = 0x1f;
	b = body_inflate(pool, (const char *)data, len + 1, BODY_CODING_GZIP, 1024, &n, &error);
	ck_assert_ptr_null(b);
	body_pool_free(pool);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("body");
	TCase *tc = tcase_create("inflate");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, second_member_split_after_its_first_magic_byte);
	tcase_add_test(tc, two_members_split_anywhere);
	tcase_add_test(tc, not_a_member_after_the_end_in_pieces);
	tcase_add_test(tc, whole_body_members_and_trailing_bytes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
