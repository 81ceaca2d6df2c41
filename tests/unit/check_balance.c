/* Server choice: round robin, least connections, the hash ring, backups. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"

#define MAX_SERVERS 16
#define KEYS 100000

/* Loops check with if + ck_abort_msg: every ck_assert records a checkpoint with a write(2). */

static struct balance_server servers[MAX_SERVERS];
static char ids[MAX_SERVERS][32];

/* n usable primaries "10.0.0.I:9001" with the given weights (NULL: all 1). */
static void
reset(size_t n, const unsigned *weights)
{
	size_t i;

	memset(servers, 0, sizeof(servers));
	for (i = 0; i < n; i++) {
		snprintf(ids[i], sizeof(ids[i]), "10.0.0.%zu:9001", i);
		servers[i].id = ids[i];
		servers[i].weight = weights ? weights[i] : 1;
		servers[i].usable = 1;
	}
}

/* Picks per server over count picks of round robin. */
static void
count_round_robin(size_t n, unsigned count, unsigned *picks)
{
	unsigned k;

	memset(picks, 0, n * sizeof(*picks));
	for (k = 0; k < count; k++) {
		int i = balance_round_robin(servers, n);
		if (i < 0)
			ck_abort_msg("nothing picked");
		picks[i]++;
	}
}

static void
count_least_conn(size_t n, unsigned count, uint64_t *rng, unsigned *picks)
{
	unsigned k;

	memset(picks, 0, n * sizeof(*picks));
	for (k = 0; k < count; k++) {
		int i = balance_least_conn(servers, n, rng);
		if (i < 0)
			ck_abort_msg("nothing picked");
		picks[i]++;
	}
}

/* share (0..1) within want +- tolerance */
static void
assert_share(unsigned got, unsigned total, double want, double tolerance)
{
	double share = (double)got / total;

	ck_assert_msg(share >= want - tolerance && share <= want + tolerance,
	    "share %.4f, want %.4f +- %.4f", share, want, tolerance);
}

START_TEST(test_rr_smooth_sequence)
{
	static const unsigned w[] = { 5, 1, 1 };
	char seq[15];
	size_t k;

	reset(3, w);
	for (k = 0; k < 14; k++)
		seq[k] = (char)('a' + balance_round_robin(servers, 3));
	seq[14] = '\0';
	ck_assert_str_eq(seq, "aabacaaaabacaa");
}
END_TEST

START_TEST(test_rr_weights)
{
	static const unsigned w[] = { 3, 2, 1, 4 };
	unsigned picks[4];

	reset(4, w);
	count_round_robin(4, 10000, picks);
	ck_assert_uint_eq(picks[0], 3000);
	ck_assert_uint_eq(picks[1], 2000);
	ck_assert_uint_eq(picks[2], 1000);
	ck_assert_uint_eq(picks[3], 4000);
}
END_TEST

/* An unusable server neither gains weight nor is picked, and rejoins where it left off. */
START_TEST(test_rr_skips_unusable)
{
	unsigned picks[3];
	int before;

	reset(3, NULL);
	balance_round_robin(servers, 3);
	servers[1].usable = 0;
	before = servers[1].rr_current;
	count_round_robin(3, 1000, picks);
	ck_assert_uint_eq(picks[1], 0);
	ck_assert_uint_eq(picks[0] + picks[2], 1000);
	ck_assert_uint_le(abs((int)picks[0] - (int)picks[2]), 2);
	ck_assert_int_eq(servers[1].rr_current, before);
	servers[1].usable = 1;
	count_round_robin(3, 3000, picks);
	ck_assert_uint_eq(picks[0], 1000);
	ck_assert_uint_eq(picks[1], 1000);
	ck_assert_uint_eq(picks[2], 1000);
}
END_TEST

START_TEST(test_nothing_usable)
{
	struct balance_ring *ring;
	uint64_t rng = 1;
	size_t i;

	reset(4, NULL);
	servers[3].backup = 1;
	ring = balance_ring_build(servers, 4);
	ck_assert_ptr_nonnull(ring);
	for (i = 0; i < 4; i++)
		servers[i].usable = 0;
	ck_assert_int_eq(balance_round_robin(servers, 4), -1);
	ck_assert_int_eq(balance_least_conn(servers, 4, &rng), -1);
	ck_assert_int_eq(balance_hash(ring, servers, "k", 1), -1);
	balance_ring_free(ring);

	ck_assert_int_eq(balance_round_robin(servers, 0), -1);
	ck_assert_int_eq(balance_least_conn(servers, 0, &rng), -1);
	ring = balance_ring_build(servers, 0);
	ck_assert_ptr_nonnull(ring);
	ck_assert_int_eq(balance_hash(ring, servers, "k", 1), -1);
	balance_ring_free(ring);
}
END_TEST

START_TEST(test_lc_minimum)
{
	static const unsigned w[] = { 1, 4, 2 };
	uint64_t rng = 42;
	int k;

	reset(3, NULL);
	servers[0].in_flight = 3;
	servers[1].in_flight = 1;
	servers[2].in_flight = 2;
	ck_assert_int_eq(balance_least_conn(servers, 3, &rng), 1);
	ck_assert_uint_eq(rng, 42);         /* no tie: no random number drawn */
	servers[1].usable = 0;
	ck_assert_int_eq(balance_least_conn(servers, 3, &rng), 2);

	/* Relative to weight: 1/1 > 3/4 < 2/2. */
	reset(3, w);
	servers[0].in_flight = 1;
	servers[1].in_flight = 3;
	servers[2].in_flight = 2;
	ck_assert_int_eq(balance_least_conn(servers, 3, &rng), 1);
	servers[1].in_flight = 5;           /* 5/4 > 1/1 = 2/2: a tie of 0 and 2 */
	k = balance_least_conn(servers, 3, &rng);
	ck_assert_msg(k == 0 || k == 2, "picked %d", k);
	ck_assert_uint_ne(rng, 42);
}
END_TEST

/* Tied servers share evenly whatever their position; the others get nothing. */
START_TEST(test_lc_random_ties)
{
	unsigned picks[6];
	uint64_t rng = 7;
	size_t i;

	reset(4, NULL);
	count_least_conn(4, 40000, &rng, picks);
	for (i = 0; i < 4; i++)
		assert_share(picks[i], 40000, 0.25, 0.015);

	reset(6, NULL);
	for (i = 0; i < 6; i++)
		servers[i].in_flight = i % 2 ? 2 : 3;
	count_least_conn(6, 30000, &rng, picks);
	for (i = 0; i < 6; i++)
		if (i % 2)
			assert_share(picks[i], 30000, 1.0 / 3, 0.015);
		else
			ck_assert_uint_eq(picks[i], 0);
}
END_TEST

/* Idle servers tie and share by weight; busy ones hold in-flight requests in proportion to
 * weight. */
START_TEST(test_lc_weights)
{
	static const unsigned w[] = { 3, 1, 2 };
	unsigned picks[3];
	uint64_t rng = 99;
	unsigned k;

	reset(3, w);
	count_least_conn(3, 90000, &rng, picks);
	assert_share(picks[0], 90000, 1.0 / 2, 0.01);
	assert_share(picks[1], 90000, 1.0 / 6, 0.01);
	assert_share(picks[2], 90000, 1.0 / 3, 0.01);

	for (k = 0; k < 600; k++)
		servers[balance_least_conn(servers, 3, &rng)].in_flight++;
	ck_assert_uint_eq(servers[0].in_flight, 300);
	ck_assert_uint_eq(servers[1].in_flight, 100);
	ck_assert_uint_eq(servers[2].in_flight, 200);
}
END_TEST

/*
 * 16 clients in a closed loop against two servers, one taking `slow` time units per request
 * and the other 1: the share of requests the fast one serves.
 */
static double
simulate_fast_share(int least_conn, unsigned slow)
{
	enum { CLIENTS = 16, REQUESTS = 100000 };
	const unsigned service[2] = { 1, slow };
	unsigned long done_at[CLIENTS];
	int server[CLIENTS];
	unsigned served[2] = { 0, 0 };
	uint64_t rng = 12345;
	unsigned k, c;

	reset(2, NULL);
	for (k = 0; k < REQUESTS + CLIENTS; k++) {
		unsigned long now = 0;
		int s;
		if (k < CLIENTS) {
			c = k;
		} else {
			unsigned j;
			for (c = 0, j = 1; j < CLIENTS; j++)
				if (done_at[j] < done_at[c])
					c = j;
			now = done_at[c];
			servers[server[c]].in_flight--;
			served[server[c]]++;
		}
		s = least_conn ? balance_least_conn(servers, 2, &rng) :
		    balance_round_robin(servers, 2);
		servers[s].in_flight++;
		server[c] = s;
		done_at[c] = now + service[s];
	}
	return (double)served[0] / (served[0] + served[1]);
}

START_TEST(test_lc_slow_server)
{
	double fast;

	fast = simulate_fast_share(1, 10);
	ck_assert_msg(fast >= 0.80, "fast server share %.3f", fast);
	fast = simulate_fast_share(0, 10);
	ck_assert_msg(fast > 0.49 && fast < 0.51, "round robin: fast server share %.3f", fast);
	fast = simulate_fast_share(1, 1);
	ck_assert_msg(fast > 0.49 && fast < 0.51, "equal servers: first share %.3f", fast);
}
END_TEST

/* Every policy keeps to the primaries while one is usable, then uses the backups alone. */
START_TEST(test_backups)
{
	static const unsigned w[] = { 1, 1, 2, 1 };
	struct balance_ring *ring;
	unsigned picks[4];
	uint64_t rng = 5;
	char key[16];
	unsigned k;

	reset(4, w);
	servers[2].backup = servers[3].backup = 1;
	ring = balance_ring_build(servers, 4);
	ck_assert_ptr_nonnull(ring);

	servers[0].in_flight = 10;          /* busier primaries still win over idle backups */
	servers[1].in_flight = 10;
	count_round_robin(4, 1000, picks);
	ck_assert_uint_eq(picks[0] + picks[1], 1000);
	count_least_conn(4, 1000, &rng, picks);
	ck_assert_uint_eq(picks[0] + picks[1], 1000);
	servers[0].usable = 0;
	count_round_robin(4, 1000, picks);
	ck_assert_uint_eq(picks[1], 1000);
	ck_assert_int_eq(balance_least_conn(servers, 4, &rng), 1);
	for (k = 0; k < 1000; k++) {
		snprintf(key, sizeof(key), "key-%u", k);
		if (balance_hash(ring, servers, key, strlen(key)) != 1)
			ck_abort_msg("%s not on the only usable primary", key);
	}

	/* No primary usable: the backups, by weight, with the same policy. */
	servers[1].usable = 0;
	count_round_robin(4, 3000, picks);
	ck_assert_uint_eq(picks[2], 2000);
	ck_assert_uint_eq(picks[3], 1000);
	count_least_conn(4, 30000, &rng, picks);
	assert_share(picks[2], 30000, 2.0 / 3, 0.015);     /* by weight, 2:1 */
	assert_share(picks[3], 30000, 1.0 / 3, 0.015);
	memset(picks, 0, sizeof(picks));
	for (k = 0; k < KEYS; k++) {
		int i;
		snprintf(key, sizeof(key), "key-%u", k);
		i = balance_hash(ring, servers, key, strlen(key));
		if (i < 2)
			ck_abort_msg("%s not on a backup: %d", key, i);
		picks[i]++;
	}
	assert_share(picks[2], KEYS, 2.0 / 3, 0.05);
	balance_ring_free(ring);
}
END_TEST

/* The id (not the index) owning each of KEYS keys. */
static void
owners(const struct balance_ring *ring, size_t n, const char **out)
{
	char key[16];
	unsigned k;

	for (k = 0; k < KEYS; k++) {
		int i;
		snprintf(key, sizeof(key), "key-%u", k);
		i = balance_hash(ring, servers, key, strlen(key));
		if (i < 0 || (size_t)i >= n)
			ck_abort_msg("%s: server %d", key, i);
		out[k] = servers[i].id;
	}
}

static const char **
owners_of(size_t n)
{
	struct balance_ring *ring = balance_ring_build(servers, n);
	const char **out = malloc(KEYS * sizeof(*out));

	ck_assert_ptr_nonnull(ring);
	ck_assert_ptr_nonnull(out);
	owners(ring, n, out);
	balance_ring_free(ring);
	return out;
}

/* Removing one of 10 servers moves its keys, about 1/10, and no others. */
START_TEST(test_hash_remove)
{
	const char **before, **after;
	unsigned k, moved = 0;

	reset(10, NULL);
	before = owners_of(10);
	memmove(&servers[3], &servers[4], 6 * sizeof(servers[0]));
	after = owners_of(9);
	for (k = 0; k < KEYS; k++) {
		if (before[k] == after[k])
			continue;
		if (strcmp(before[k], "10.0.0.3:9001") != 0)
			ck_abort_msg("key-%u moved from %s", k, before[k]);
		moved++;
	}
	assert_share(moved, KEYS, 0.10, 0.02);
	free(before);
	free(after);
}
END_TEST

/* Adding an 11th server moves about 1/11 of the keys, all to it. */
START_TEST(test_hash_add)
{
	const char **before, **after;
	unsigned k, moved = 0;

	reset(11, NULL);
	before = owners_of(10);
	after = owners_of(11);
	for (k = 0; k < KEYS; k++) {
		if (before[k] == after[k])
			continue;
		if (strcmp(after[k], "10.0.0.10:9001") != 0)
			ck_abort_msg("key-%u moved to %s", k, after[k]);
		moved++;
	}
	assert_share(moved, KEYS, 1.0 / 11, 0.02);
	free(before);
	free(after);
}
END_TEST

/*
 * Keys of unusable servers go to the next usable server clockwise: exactly where a ring
 * without them puts them, and no other key moves.
 */
START_TEST(test_hash_ejected)
{
	struct balance_ring *ring;
	const char **before, **ejected, **removed;
	unsigned k, moved = 0;

	reset(10, NULL);
	ring = balance_ring_build(servers, 10);
	ck_assert_ptr_nonnull(ring);
	before = malloc(KEYS * sizeof(*before));
	ejected = malloc(KEYS * sizeof(*ejected));
	ck_assert_ptr_nonnull(before);
	ck_assert_ptr_nonnull(ejected);
	owners(ring, 10, before);
	servers[3].usable = servers[4].usable = servers[8].usable = 0;
	owners(ring, 10, ejected);
	for (k = 0; k < KEYS; k++) {
		if (before[k] == ejected[k])
			continue;
		if (before[k] != ids[3] && before[k] != ids[4] && before[k] != ids[8])
			ck_abort_msg("key-%u moved from %s", k, before[k]);
		moved++;
	}
	assert_share(moved, KEYS, 0.30, 0.03);

	memmove(&servers[8], &servers[9], sizeof(servers[0]));
	memmove(&servers[3], &servers[5], 4 * sizeof(servers[0]));
	removed = owners_of(7);
	for (k = 0; k < KEYS; k++)
		if (ejected[k] != removed[k])
			ck_abort_msg("key-%u: %s ejected, %s removed", k, ejected[k], removed[k]);
	balance_ring_free(ring);
	free(before);
	free(ejected);
	free(removed);
}
END_TEST

/* Keys follow ids, not positions in the array. */
START_TEST(test_hash_order)
{
	const char **before, **after;
	struct balance_server tmp;
	unsigned k;

	reset(5, NULL);
	before = owners_of(5);
	tmp = servers[0];
	servers[0] = servers[4];
	servers[4] = tmp;
	after = owners_of(5);
	for (k = 0; k < KEYS; k++)
		if (before[k] != after[k])
			ck_abort_msg("key-%u: %s, then %s", k, before[k], after[k]);
	free(before);
	free(after);
}
END_TEST

START_TEST(test_hash_weights)
{
	static const unsigned w[] = { 1, 1, 1, 2, 3 };
	unsigned picks[5] = { 0 };
	const char **own;
	unsigned k;
	size_t i;

	reset(5, w);
	own = owners_of(5);
	for (k = 0; k < KEYS; k++)
		for (i = 0; i < 5; i++)
			if (own[k] == ids[i])
				picks[i]++;
	for (i = 0; i < 5; i++)
		assert_share(picks[i], KEYS, w[i] / 8.0, 0.02);
	free(own);
}
END_TEST

static Suite *
balance_suite(void)
{
	Suite *s = suite_create("balance");
	TCase *tc;

	tc = tcase_create("round_robin");
	tcase_add_test(tc, test_rr_smooth_sequence);
	tcase_add_test(tc, test_rr_weights);
	tcase_add_test(tc, test_rr_skips_unusable);
	suite_add_tcase(s, tc);

	tc = tcase_create("least_conn");
	tcase_add_test(tc, test_lc_minimum);
	tcase_add_test(tc, test_lc_random_ties);
	tcase_add_test(tc, test_lc_weights);
	tcase_add_test(tc, test_lc_slow_server);
	suite_add_tcase(s, tc);

	tc = tcase_create("hash");
	tcase_add_test(tc, test_hash_remove);
	tcase_add_test(tc, test_hash_add);
	tcase_add_test(tc, test_hash_ejected);
	tcase_add_test(tc, test_hash_order);
	tcase_add_test(tc, test_hash_weights);
	suite_add_tcase(s, tc);

	tc = tcase_create("every policy");
	tcase_add_test(tc, test_nothing_usable);
	tcase_add_test(tc, test_backups);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(balance_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
