#include "ratelimit_redis.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#define US 1000000ULL

/*
 * Lua numbers are doubles: microseconds since the epoch (about 2^51) stay exact.  A number
 * handed to redis.call becomes "%.14g" text, so the stored tat is formatted with %d.
 * redis.replicate_commands lets Redis before 5 replicate the writes of a script that read TIME.
 */
const char ratelimit_redis_script[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local interval = tonumber(ARGV[1])\n"
    "local burst = tonumber(ARGV[2])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local tat = tonumber(redis.call('GET', KEYS[1])) or now\n"
    "if tat < now then tat = now end\n"
    "local window = burst * interval\n"
    "local nxt = tat + interval\n"
    "if nxt - now > window then\n"
    "  return {0, 0, tat - now, nxt - now - window}\n"
    "end\n"
    "redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX',\n"
    "  string.format('%d', math.ceil((nxt - now) / 1000) + 1))\n"
    "return {1, math.floor((window - (nxt - now)) / interval), nxt - now, 0}\n";

static char ratelimit_redis_sha[41];
static pthread_once_t ratelimit_redis_once = PTHREAD_ONCE_INIT;

static void
ratelimit_redis_sha_init(void)
{
	unsigned char h[SHA_DIGEST_LENGTH];
	int i;

	SHA1((const unsigned char *)ratelimit_redis_script, sizeof(ratelimit_redis_script) - 1, h);
	for (i = 0; i < SHA_DIGEST_LENGTH; i++)
		snprintf(ratelimit_redis_sha + 2 * i, 3, "%02x", h[i]);
}

const char *
ratelimit_redis_sha1(void)
{
	pthread_once(&ratelimit_redis_once, ratelimit_redis_sha_init);
	return ratelimit_redis_sha;
}

int
ratelimit_redis_build(struct ratelimit_redis_cmd *cmd, int eval, const char *scope,
    const struct ratelimit_rule *rule, const void *key, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char h[SHA256_DIGEST_LENGTH];
	size_t n, slen = strlen(scope), i;
	uint64_t interval_us = rule->interval_ns / 1000;

	if (slen > 64)
		return -1;
	n = (size_t)snprintf(cmd->key, sizeof(cmd->key), "jsongate:rl:%s:", scope);
	if (len <= RATELIMIT_REDIS_MAX_KEY) {
		memcpy(cmd->key + n, key, len);
		n += len;
	} else {
		SHA256(key, len, h);
		memcpy(cmd->key + n, "sha256:", 7);
		n += 7;
		for (i = 0; i < sizeof(h); i++) {
			cmd->key[n++] = hex[h[i] >> 4];
			cmd->key[n++] = hex[h[i] & 15];
		}
	}
	snprintf(cmd->interval, sizeof(cmd->interval), "%llu",
	    (unsigned long long)(interval_us > 0 ? interval_us : 1));
	snprintf(cmd->burst, sizeof(cmd->burst), "%u", rule->burst);
	cmd->argc = 6;
	cmd->argv[0] = eval ? "EVAL" : "EVALSHA";
	cmd->argv[1] = eval ? ratelimit_redis_script : ratelimit_redis_sha1();
	cmd->argvlen[1] = eval ? sizeof(ratelimit_redis_script) - 1 : 40;
	cmd->argv[2] = "1";
	cmd->argv[3] = cmd->key;
	cmd->argvlen[3] = n;
	cmd->argv[4] = cmd->interval;
	cmd->argv[5] = cmd->burst;
	cmd->argvlen[0] = strlen(cmd->argv[0]);
	cmd->argvlen[2] = 1;
	cmd->argvlen[4] = strlen(cmd->interval);
	cmd->argvlen[5] = strlen(cmd->burst);
	return 0;
}

/* One decision in flight: what the NOSCRIPT retry needs. */
struct ratelimit_redis_req {
	struct resp_client *c;
	struct ratelimit_redis_cmd cmd;
	uint32_t burst;
	int evaled;
	ratelimit_redis_cb cb;
	void *arg;
};

/* Microseconds as whole seconds, rounded up. */
static uint32_t
ratelimit_redis_secs(long long us)
{
	uint64_t s = us <= 0 ? 0 : ((uint64_t)us + US - 1) / US;

	return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

static void
ratelimit_redis_reply_cb(void *arg, enum resp_status st, const struct resp_reply *r)
{
	struct ratelimit_redis_req *req = arg;
	struct ratelimit_answer ans;
	size_t i;

	if (st == RESP_OK && r->type == RESP_ERROR && !req->evaled && r->len >= 8 &&
	    memcmp(r->str, "NOSCRIPT", 8) == 0) {
		/* The script is not loaded (a restart, SCRIPT FLUSH): EVAL loads it. */
		req->evaled = 1;
		req->cmd.argv[0] = "EVAL";
		req->cmd.argvlen[0] = 4;
		req->cmd.argv[1] = ratelimit_redis_script;
		req->cmd.argvlen[1] = sizeof(ratelimit_redis_script) - 1;
		st = resp_command(req->c, req->cmd.argc, req->cmd.argv, req->cmd.argvlen,
		    ratelimit_redis_reply_cb, req);
		if (st == RESP_OK)
			return;
		req->cb(req->arg, st, NULL);
		free(req);
		return;
	}
	if (st == RESP_OK) {
		if (r->type != RESP_ARRAY || r->n != 4) {
			st = RESP_PROTOCOL;
		} else {
			for (i = 0; i < 4; i++)
				if (r->elems[i].type != RESP_INTEGER || r->elems[i].integer < 0)
					st = RESP_PROTOCOL;
		}
	}
	if (st != RESP_OK) {
		req->cb(req->arg, st, NULL);
		free(req);
		return;
	}
	ans.admitted = r->elems[0].integer == 1;
	ans.limit = req->burst;
	ans.remaining = r->elems[1].integer > UINT32_MAX ? UINT32_MAX :
	    (uint32_t)r->elems[1].integer;
	ans.reset = ratelimit_redis_secs(r->elems[2].integer);
	ans.retry_after = ratelimit_redis_secs(r->elems[3].integer);
	if (!ans.admitted && ans.retry_after == 0)
		ans.retry_after = 1;
	req->cb(req->arg, RESP_OK, &ans);
	free(req);
}

enum resp_status
ratelimit_redis_take(struct resp_client *c, const char *scope, const struct ratelimit_rule *rule,
    const void *key, size_t len, ratelimit_redis_cb cb, void *arg)
{
	struct ratelimit_redis_req *req;
	enum resp_status st;

	if ((req = calloc(1, sizeof(*req))) == NULL)
		return RESP_CONNECTION;
	if (ratelimit_redis_build(&req->cmd, 0, scope, rule, key, len) != 0) {
		free(req);
		return RESP_PROTOCOL;
	}
	req->c = c;
	req->burst = rule->burst;
	req->cb = cb;
	req->arg = arg;
	st = resp_command(c, req->cmd.argc, req->cmd.argv, req->cmd.argvlen,
	    ratelimit_redis_reply_cb, req);
	if (st != RESP_OK)
		free(req);
	return st;
}
