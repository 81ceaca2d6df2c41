/*
 * Rate limits shared by every jsongate instance through Redis: the same GCRA as ratelimit.c,
 * run by one Lua script per decision (one round trip, atomic, on Redis's clock so that the
 * instances' clocks do not matter).  The script is sent by its SHA-1 (EVALSHA); after a Redis
 * restart or SCRIPT FLUSH the NOSCRIPT answer makes the one EVAL that loads it again.
 */
#ifndef JG_RATELIMIT_REDIS_H
#define JG_RATELIMIT_REDIS_H

#include <stddef.h>

#include "ratelimit.h"
#include "resp.h"

/* KEYS[1] the bucket; ARGV[1] the interval in microseconds, ARGV[2] the burst.  Answers
 * {admitted 0|1, remaining, microseconds until full, microseconds until one more}. */
extern const char ratelimit_redis_script[];

#define RATELIMIT_REDIS_MAX_KEY 1024    /* longer keys are hashed (SHA-256) into the bucket name */

/* The arguments of one decision, pointing into this struct and the script. */
struct ratelimit_redis_cmd {
	int argc;
	const char *argv[6];
	size_t argvlen[6];
	char key[64 + RATELIMIT_REDIS_MAX_KEY];
	char interval[24], burst[16];
};

/*
 * Build EVALSHA sha 1 KEY interval burst (or EVAL script ... when eval is set) for key[0..len)
 * of the limit named scope (the route's name: the same on every instance), the bucket named
 * "jsongate:rl:" scope ":" key.  0, or -1 when scope is over 64 bytes.
 */
int ratelimit_redis_build(struct ratelimit_redis_cmd *cmd, int eval, const char *scope,
    const struct ratelimit_rule *rule, const void *key, size_t len);

/* The script's SHA-1 in hex. */
const char *ratelimit_redis_sha1(void);

/* status RESP_OK with ans filled, or why Redis did not decide (the caller applies on_error:
 * allow or deny); RESP_PROTOCOL also for an error reply or an answer of the wrong shape. */
typedef void (*ratelimit_redis_cb)(void *arg, enum resp_status status,
    const struct ratelimit_answer *ans);

/*
 * One decision through c.  RESP_OK: cb is called once, later; else cb is not called and the
 * status says why (Redis down: apply on_error now).
 */
enum resp_status ratelimit_redis_take(struct resp_client *c, const char *scope,
    const struct ratelimit_rule *rule, const void *key, size_t len, ratelimit_redis_cb cb,
    void *arg);

#endif
