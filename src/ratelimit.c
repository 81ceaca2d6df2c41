#include "ratelimit.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "lru.h"

#define NS 1000000000ULL

struct ratelimit_entry {
	struct lru_node node;
	uint64_t tat;
	uint32_t rule;
	size_t len;
	unsigned char key[];
};

struct ratelimit {
	struct lru *table;
	uint64_t seed[2];                       /* keys come from clients: a keyed hash */
};

int
ratelimit_rule_init(struct ratelimit_rule *rule, uint32_t id, uint64_t count,
    uint64_t period_ns, uint32_t burst)
{
	if (count == 0 || period_ns == 0 || burst == 0 || burst > RATELIMIT_MAX_BURST ||
	    period_ns / count == 0 || period_ns / count > (1ULL << 62) / burst)
		return -1;
	rule->id = id;
	rule->burst = burst;
	rule->interval_ns = period_ns / count;
	return 0;
}

int
ratelimit_rate_parse(const char *s, uint64_t *count, uint64_t *period_ns)
{
	uint64_t n = 0;
	const char *p = s;

	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > UINT32_MAX)
			return -1;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	if (p == s || n == 0 || *p != '/' || p[1] == '\0' || p[2] != '\0')
		return -1;
	switch (p[1]) {
	case 's': *period_ns = NS; break;
	case 'm': *period_ns = 60 * NS; break;
	case 'h': *period_ns = 3600 * NS; break;
	case 'd': *period_ns = 86400 * NS; break;
	default: return -1;
	}
	*count = n;
	return 0;
}

static uint32_t
ratelimit_secs(uint64_t ns)
{
	uint64_t s = (ns + NS - 1) / NS;

	return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

void
ratelimit_gcra(uint64_t *tat, const struct ratelimit_rule *rule, uint64_t now,
    struct ratelimit_answer *ans)
{
	uint64_t t = *tat > now ? *tat : now, next = t + rule->interval_ns;
	uint64_t window = (uint64_t)rule->burst * rule->interval_ns;

	ans->limit = rule->burst;
	if (next - now > window) {
		ans->admitted = 0;
		ans->remaining = 0;
		ans->reset = ratelimit_secs(t - now);
		ans->retry_after = ratelimit_secs(next - now - window);
		if (ans->retry_after == 0)
			ans->retry_after = 1;
		return;
	}
	*tat = next;
	ans->admitted = 1;
	ans->remaining = (uint32_t)((window - (next - now)) / rule->interval_ns);
	ans->reset = ratelimit_secs(next - now);
	ans->retry_after = 0;
}

uint64_t
ratelimit_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* SipHash-2-4 (Aumasson and Bernstein) of the rule id and the key. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
} while (0)

static uint64_t
ratelimit_hash(const uint64_t seed[2], uint32_t rule, const unsigned char *p, size_t len)
{
	uint64_t v0 = 0x736f6d6570736575ULL ^ seed[0], v1 = 0x646f72616e646f6dULL ^ seed[1];
	uint64_t v2 = 0x6c7967656e657261ULL ^ seed[0], v3 = 0x7465646279746573ULL ^ seed[1];
	uint64_t m, b = (uint64_t)len << 56;
	size_t i, left = len & 7;

	/* The rule id first, as one word. */
	m = rule;
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&m, p + i, 8);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	for (m = 0; left > 0; left--)
		m |= (uint64_t)p[i + left - 1] << (8 * (left - 1));
	b |= m;
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* What a bucket's key is compared with. */
struct ratelimit_key {
	uint32_t rule;
	size_t len;
	const void *p;
};

static int
ratelimit_eq(const struct lru_node *n, const void *key)
{
	const struct ratelimit_entry *e = LRU_ENTRY(n, const struct ratelimit_entry, node);
	const struct ratelimit_key *k = key;

	return e->rule == k->rule && e->len == k->len && memcmp(e->key, k->p, k->len) == 0;
}

static void
ratelimit_entry_free(struct lru_node *n)
{
	free(LRU_ENTRY(n, struct ratelimit_entry, node));
}

struct ratelimit *
ratelimit_new(size_t max_keys)
{
	struct ratelimit *rl;

	if ((rl = calloc(1, sizeof(*rl))) == NULL)
		return NULL;
	/* Every shard holds at least one key, else its keys would not be limited. */
	if (max_keys < LRU_SHARDS)
		max_keys = LRU_SHARDS;
	if (RAND_bytes((unsigned char *)rl->seed, sizeof(rl->seed)) != 1 ||
	    (rl->table = lru_new(max_keys, ratelimit_entry_free)) == NULL) {
		free(rl);
		return NULL;
	}
	return rl;
}

void
ratelimit_take(struct ratelimit *rl, const struct ratelimit_rule *rule, const void *key,
    size_t len, uint64_t now, struct ratelimit_answer *ans)
{
	uint64_t h = ratelimit_hash(rl->seed, rule->id, key, len), tat = 0;
	struct ratelimit_key k = { rule->id, len, key };
	struct lru_shard *s = lru_shard(rl->table, h);
	struct lru_node *n;
	struct ratelimit_entry *e;
	int i;

	lru_lock(s);
	/* A key idle long enough to be full again is the same as no key: drop a few. */
	for (i = 0; i < 2 && (n = lru_oldest(s)) != NULL &&
	    LRU_ENTRY(n, struct ratelimit_entry, node)->tat <= now; i++)
		lru_drop(s, n);
	if ((n = lru_find(s, h, ratelimit_eq, &k)) != NULL) {
		ratelimit_gcra(&LRU_ENTRY(n, struct ratelimit_entry, node)->tat, rule, now, ans);
		lru_use(s, n);
		lru_unlock(s);
		return;
	}
	ratelimit_gcra(&tat, rule, now, ans);
	/* Make room: the least recently used key goes. */
	lru_make_room(s);
	if ((e = malloc(sizeof(*e) + len)) == NULL) {
		lru_unlock(s);
		return;
	}
	e->tat = tat;
	e->rule = rule->id;
	e->len = len;
	memcpy(e->key, key, len);
	lru_add(s, &e->node, h);
	lru_unlock(s);
}

size_t
ratelimit_count(struct ratelimit *rl)
{
	return lru_count(rl->table);
}

void
ratelimit_free(struct ratelimit *rl)
{
	if (rl == NULL)
		return;
	lru_free(rl->table);
	free(rl);
}
