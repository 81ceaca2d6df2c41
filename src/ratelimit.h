/*
 * Rate limits per daemon, exact across worker threads: one GCRA bucket per key for the whole
 * daemon (a bucket is one number, its theoretical arrival time), in a table shared by the
 * workers (sharded, one lock per shard) and bounded in keys: the least recently used key is
 * evicted, and a key idle long enough to be full again holds nothing worth keeping.
 *
 * GCRA with emission interval T = period / count and capacity burst: a request at now is
 * admitted when max(tat, now) + T - now <= burst * T, and then tat becomes max(tat, now) + T.
 * This is a token bucket of burst tokens refilled one per T, without a timer.
 */
#ifndef JG_RATELIMIT_H
#define JG_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_MAX_BURST 1000000

struct ratelimit_rule {
	uint32_t id;                    /* keys of different rules never share a bucket */
	uint32_t burst;                 /* capacity: requests admitted at once */
	uint64_t interval_ns;           /* one request's worth of refill */
};

/* What the answer's headers say: RateLimit-Limit (limit), RateLimit-Remaining, RateLimit-Reset
 * (seconds until the bucket is full again) and, when refused, Retry-After (whole seconds until
 * one request would be admitted, at least 1).  Seconds are rounded up. */
struct ratelimit_answer {
	int admitted;
	uint32_t limit;
	uint32_t remaining;
	uint32_t reset;
	uint32_t retry_after;           /* 0 when admitted */
};

/* count requests per period_ns, burst at once: 0, or -1 when a number is 0, the interval is
 * under 1 ns, or burst is over RATELIMIT_MAX_BURST or burst intervals exceed 2^62 ns. */
int ratelimit_rule_init(struct ratelimit_rule *rule, uint32_t id, uint64_t count,
    uint64_t period_ns, uint32_t burst);
/* "100/s", "10/m", "5/h", "1/d" (a positive whole count): 0, or -1. */
int ratelimit_rate_parse(const char *s, uint64_t *count, uint64_t *period_ns);

/* One GCRA decision on a bucket's tat (0 for a new bucket): fills ans, and moves *tat when
 * admitted.  The per-daemon table and tests use it; the shared limits run the same steps in
 * Redis. */
void ratelimit_gcra(uint64_t *tat, const struct ratelimit_rule *rule, uint64_t now_ns,
    struct ratelimit_answer *ans);

struct ratelimit;

/* A table of at most max_keys buckets, spread over 16 shards (at least one each). */
struct ratelimit *ratelimit_new(size_t max_keys);
void ratelimit_free(struct ratelimit *rl);
/* One request for key[0..len) under rule at now_ns (ratelimit_now()). */
void ratelimit_take(struct ratelimit *rl, const struct ratelimit_rule *rule, const void *key,
    size_t len, uint64_t now_ns, struct ratelimit_answer *ans);
size_t ratelimit_count(struct ratelimit *rl);
/* The monotonic clock in nanoseconds. */
uint64_t ratelimit_now(void);

#endif
