#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "lru.h"

/* The node not first, so that LRU_ENTRY has an offset to take off. */
struct ent {
	int key;
	struct lru_node node;
};

static atomic_int nfreed;
static atomic_int last_freed;

static void
ent_free(struct lru_node *n)
{
	struct ent *e = LRU_ENTRY(n, struct ent, node);

	last_freed = e->key;
	atomic_fetch_add(&nfreed, 1);
	free(e);
}

static int
ent_eq(const struct lru_node *n, const void *key)
{
	return LRU_ENTRY(n, const struct ent, node)->key == *(const int *)key;
}

/* A hash in shard sh, bucket bits low. */
static uint64_t
hash_in(unsigned sh, uint64_t low)
{
	return (uint64_t)sh << 60 | low;
}

static int
has(struct lru *t, uint64_t h, int key)
{
	struct lru_shard *s = lru_shard(t, h);
	int found;

	lru_lock(s);
	found = lru_find(s, h, ent_eq, &key) != NULL;
	lru_unlock(s);
	return found;
}

/* As the tables using it add: room first, then the entry. */
static void
add(struct lru *t, uint64_t h, int key)
{
	struct lru_shard *s = lru_shard(t, h);
	struct ent *e = calloc(1, sizeof(*e));

	ck_assert_ptr_nonnull(e);
	e->key = key;
	lru_lock(s);
	lru_make_room(s);
	lru_add(s, &e->node, h);
	lru_unlock(s);
}

static void
use(struct lru *t, uint64_t h, int key)
{
	struct lru_shard *s = lru_shard(t, h);
	struct lru_node *n;

	lru_lock(s);
	n = lru_find(s, h, ent_eq, &key);
	ck_assert_ptr_nonnull(n);
	lru_use(s, n);
	lru_unlock(s);
}

static int
oldest(struct lru *t, uint64_t h)
{
	struct lru_node *n = lru_oldest(lru_shard(t, h));

	return n == NULL ? -1 : LRU_ENTRY(n, struct ent, node)->key;
}

START_TEST(shards_share_the_bound)
{
	struct lru *t;
	unsigned i;

	ck_assert_ptr_null(lru_new(0, ent_free));
	/* 20: the first 4 shards keep 2, the others 1. */
	t = lru_new(20, ent_free);
	ck_assert_ptr_nonnull(t);
	for (i = 0; i < LRU_SHARDS; i++)
		ck_assert_uint_eq(lru_max(lru_shard(t, hash_in(i, 7))), i < 4 ? 2 : 1);
	lru_free(t);
	/* Under 16: some shards keep none. */
	t = lru_new(5, ent_free);
	for (i = 0; i < LRU_SHARDS; i++)
		ck_assert_uint_eq(lru_max(lru_shard(t, hash_in(i, 0))), i < 5 ? 1 : 0);
	lru_free(t);
	/* The shard is the top 4 bits, whatever the low ones. */
	t = lru_new(16, ent_free);
	ck_assert_ptr_eq(lru_shard(t, hash_in(3, 0)), lru_shard(t, hash_in(3, UINT64_MAX >> 4)));
	ck_assert_ptr_ne(lru_shard(t, hash_in(3, 0)), lru_shard(t, hash_in(4, 0)));
	lru_free(t);
}
END_TEST

START_TEST(least_recently_used_goes_first)
{
	struct lru *t = lru_new(3 * LRU_SHARDS, ent_free);      /* 3 per shard */
	uint64_t h = hash_in(5, 0);

	atomic_store(&nfreed, 0);
	add(t, h + 1, 1);
	add(t, h + 2, 2);
	add(t, h + 3, 3);
	ck_assert_int_eq(oldest(t, h), 1);
	use(t, h + 1, 1);               /* 2 is now the least recently used */
	ck_assert_int_eq(oldest(t, h), 2);
	add(t, h + 4, 4);
	ck_assert_int_eq(atomic_load(&nfreed), 1);
	ck_assert_int_eq(last_freed, 2);
	ck_assert(!has(t, h + 2, 2));
	ck_assert(has(t, h + 1, 1) && has(t, h + 3, 3) && has(t, h + 4, 4));
	ck_assert_int_eq(oldest(t, h), 3);
	/* A find alone does not count as a use. */
	add(t, h + 5, 5);
	ck_assert_int_eq(last_freed, 3);
	ck_assert_int_eq(oldest(t, h), 1);
	/* Using the most recent one changes nothing. */
	use(t, h + 5, 5);
	ck_assert_int_eq(oldest(t, h), 1);
	ck_assert_uint_eq(lru_count(t), 3);
	lru_free(t);
	ck_assert_int_eq(atomic_load(&nfreed), 5);
}
END_TEST

START_TEST(a_full_shard_leaves_the_others_alone)
{
	struct lru *t = lru_new(LRU_SHARDS, ent_free);          /* 1 per shard */
	unsigned i;

	atomic_store(&nfreed, 0);
	for (i = 0; i < LRU_SHARDS; i++)
		add(t, hash_in(i, i), (int)i);
	ck_assert_uint_eq(lru_count(t), LRU_SHARDS);
	add(t, hash_in(9, 100), 100);
	ck_assert_int_eq(atomic_load(&nfreed), 1);
	ck_assert_int_eq(last_freed, 9);
	for (i = 0; i < LRU_SHARDS; i++)
		ck_assert_int_eq(has(t, hash_in(i, i), (int)i), i != 9);
	ck_assert_uint_eq(lru_count(t), LRU_SHARDS);
	lru_free(t);
}
END_TEST

START_TEST(keys_that_share_a_hash_or_a_bucket)
{
	struct lru *t = lru_new(8 * LRU_SHARDS, ent_free);      /* 8 per shard: 16 buckets */
	uint64_t h = hash_in(2, 3);
	struct lru_shard *s = lru_shard(t, h);
	struct lru_node *n;
	int k;

	atomic_store(&nfreed, 0);
	add(t, h, 1);
	add(t, h, 2);                   /* the same hash, another key */
	add(t, h + 16, 3);              /* the same bucket, another hash */
	add(t, h + 16, 4);
	ck_assert(has(t, h, 1) && has(t, h, 2) && has(t, h + 16, 3) && has(t, h + 16, 4));
	/* A key is found only under its own hash. */
	ck_assert(!has(t, h + 16, 1));
	ck_assert(!has(t, h, 3));
	/* Dropped from the middle of the chain: the others stay. */
	lru_lock(s);
	k = 2;
	n = lru_find(s, h, ent_eq, &k);
	ck_assert_ptr_nonnull(n);
	lru_drop(s, n);
	lru_unlock(s);
	ck_assert_int_eq(last_freed, 2);
	ck_assert(!has(t, h, 2));
	ck_assert(has(t, h, 1) && has(t, h + 16, 3) && has(t, h + 16, 4));
	/* Dropped from the ends of the recency list. */
	lru_lock(s);
	lru_drop(s, lru_oldest(s));
	lru_unlock(s);
	ck_assert_int_eq(last_freed, 1);
	ck_assert_int_eq(oldest(t, h), 3);
	k = 4;
	lru_lock(s);
	lru_drop(s, lru_find(s, h + 16, ent_eq, &k));
	lru_unlock(s);
	ck_assert_int_eq(oldest(t, h), 3);
	lru_lock(s);
	lru_drop(s, lru_oldest(s));
	ck_assert_ptr_null(lru_oldest(s));
	lru_unlock(s);
	ck_assert_uint_eq(lru_count(t), 0);
	/* Empty again, it takes entries as before. */
	add(t, h, 7);
	ck_assert_int_eq(oldest(t, h), 7);
	lru_free(t);
	ck_assert_int_eq(atomic_load(&nfreed), 5);
}
END_TEST

START_TEST(clear_frees_every_entry)
{
	struct lru *t = lru_new(64, ent_free);
	unsigned i;

	atomic_store(&nfreed, 0);
	for (i = 0; i < 40; i++)
		add(t, hash_in(i % LRU_SHARDS, i), (int)i);
	ck_assert_uint_eq(lru_count(t), 40);
	lru_clear(t);
	ck_assert_int_eq(atomic_load(&nfreed), 40);
	ck_assert_uint_eq(lru_count(t), 0);
	for (i = 0; i < 40; i++)
		ck_assert(!has(t, hash_in(i % LRU_SHARDS, i), (int)i));
	add(t, hash_in(0, 1), 1);
	ck_assert_uint_eq(lru_count(t), 1);
	lru_free(t);
	ck_assert_int_eq(atomic_load(&nfreed), 41);
}
END_TEST

#define THREADS 4
#define ROUNDS 20000

static struct lru *shared;

/* splitmix64: spread keys over every shard and bucket. */
static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void *
worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg, i;
	struct lru_shard *s;
	struct lru_node *n;
	struct ent *e;
	uint64_t h;
	int key;

	for (i = 0; i < ROUNDS; i++) {
		key = (int)((id * 7 + i) % 500);       /* threads share keys */
		h = mix((uint64_t)key);
		s = lru_shard(shared, h);
		lru_lock(s);
		if ((n = lru_find(s, h, ent_eq, &key)) != NULL) {
			lru_use(s, n);
		} else {
			lru_make_room(s);
			if ((e = calloc(1, sizeof(*e))) == NULL)
				abort();
			e->key = key;
			lru_add(s, &e->node, h);
		}
		lru_unlock(s);
	}
	return NULL;
}

START_TEST(threads_stay_within_the_bound)
{
	pthread_t th[THREADS];
	unsigned i;

	atomic_store(&nfreed, 0);
	shared = lru_new(100, ent_free);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i), 0);
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ck_assert_uint_le(lru_count(shared), 100);
	ck_assert_uint_gt(lru_count(shared), 0);
	for (i = 0; i < LRU_SHARDS; i++)
		ck_assert_uint_le(lru_max(lru_shard(shared, hash_in(i, 0))), 7);
	lru_free(shared);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("lru");
	TCase *tc = tcase_create("table");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, shards_share_the_bound);
	tcase_add_test(tc, least_recently_used_goes_first);
	tcase_add_test(tc, a_full_shard_leaves_the_others_alone);
	tcase_add_test(tc, keys_that_share_a_hash_or_a_bucket);
	tcase_add_test(tc, clear_frees_every_entry);
	tcase_add_test(tc, threads_stay_within_the_bound);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
