/* Inflating collected bodies: whole (body_inflate) and fed in pieces (body_prefix_inflate, as
 * routing reads the start of a body); a rewritten body's output (body_apply_block); the pool's
 * blocks. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <event2/buffer.h>

#include "body.h"
#include "mempool.h"

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

/*
 * A large body whose output is nearly all copied (a member renamed every 80 bytes): the
 * output is byte for byte what the rewrite gives, and its copies lie in a few blocks of their
 * own instead of thousands of small buffers, so that all of it goes back once written.
 */
START_TEST(large_body_copies_go_into_blocks)
{
	static const char ops[] = "[ {set: {x: 1}}, {rename: {a: b}} ]";
	static const char member[] = "\"a\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct body_pool *pool = body_pool_new();
	struct config cfg;
	struct config_route route;
	struct rewrite_result rr;
	struct body_result res;
	struct evbuffer *out = evbuffer_new(), *want = evbuffer_new();
	struct body_block *in;
	size_t i, n = 50000, len = 0, mlen = strlen(member);
	char *p;

	ck_assert_ptr_nonnull(prog);
	memset(&cfg, 0, sizeof(cfg));
	cfg.limits.max_body = 8 << 20;
	cfg.limits.max_depth = 1000;
	cfg.limits.max_members = 100000;
	memset(&route, 0, sizeof(route));
	in = body_block_new(pool, 1 + n * (mlen + 1));
	p = body_block_data(in);
	for (i = 0; i < n; i++) {
		p[len++] = i == 0 ? '{' : ',';
		memcpy(p + len, member, mlen);
		len += mlen;
	}
	p[len++] = '}';
	ck_assert_uint_gt(len, 3 * MEMPOOL_LARGE_BLOCK);

	ck_assert_int_eq(rewrite_apply(ctx, prog, VALIDATE_ENVELOPE, p, len, NULL, &rr), 0);
	for (i = 0; i < rr.nspans; i++)
		evbuffer_add(want, rr.spans[i].p, rr.spans[i].len);
	ck_assert_int_eq(body_apply_block(pool, &cfg, &route, prog, BODY_CODING_IDENTITY, in, len,
	    NULL, out, &res), 0);
	body_block_release(in);
	ck_assert_uint_eq(res.spliced + res.copied, evbuffer_get_length(want));
	/* Over 3 MB in short spans, copied into 2 MB blocks: two pieces. */
	ck_assert_int_eq(evbuffer_peek(out, -1, NULL, NULL, 0), 2);
	ck_assert_uint_eq(evbuffer_get_length(out), evbuffer_get_length(want));
	ck_assert_int_eq(memcmp(evbuffer_pullup(out, -1), evbuffer_pullup(want, -1),
	    evbuffer_get_length(want)), 0);
	evbuffer_free(out);
	evbuffer_free(want);
	body_pool_free(pool);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* The body pool's blocks are a block pool of their own, which code without bodies can use. */
START_TEST(body_blocks_come_from_the_pools_block_pool)
{
	struct body_pool *pool = body_pool_new();
	struct evbuffer *src = evbuffer_new();
	struct body_block *a, *b;

	ck_assert_ptr_nonnull(body_pool_blocks(pool));
	a = body_block_new(pool, 100);
	ck_assert_ptr_nonnull(a);
	body_block_release(a);
	b = body_block_pool_get(body_pool_blocks(pool), 100);
	ck_assert_ptr_eq(a, b);
	body_block_release(b);
	evbuffer_add(src, "{}", 2);
	b = body_block_copy(pool, src);
	ck_assert_ptr_eq(a, b);
	ck_assert_int_eq(memcmp(body_block_data(b), "{}", 2), 0);
	body_block_release(b);
	evbuffer_free(src);
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
	tc = tcase_create("apply");
	tcase_add_test(tc, large_body_copies_go_into_blocks);
	tcase_add_test(tc, body_blocks_come_from_the_pools_block_pool);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
