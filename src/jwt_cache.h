/*
 * Tokens whose signature was verified, by the SHA-256 of the token, so that a repeated token
 * costs a hash and a lookup rather than a signature check.  Shared by the worker threads
 * (sharded, one lock per shard), bounded in entries (least recently used evicted), an entry
 * gone at the token's exp or after max_ttl.  One cache per key set: a token verified with one
 * policy's keys says nothing of another's; clear it when the key set changes.  Only the
 * signature is cached: jwt_check_claims still runs per request, so time, issuer, audience and
 * scopes stay exact.
 */
#ifndef JG_JWT_CACHE_H
#define JG_JWT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "jwt.h"

struct jwt_cache;

struct jwt_cache_key {
	unsigned char digest[32];
};

/* max_entries at least 1, spread over 16 shards (each keeps its share, so use at least 16);
 * max_ttl (seconds) bounds the life of every entry, and is the life
 * of a token without exp. */
struct jwt_cache *jwt_cache_new(size_t max_entries, int64_t max_ttl);
void jwt_cache_free(struct jwt_cache *cache);

void jwt_cache_key(const char *token, size_t len, struct jwt_cache_key *key);
/* A thread that made keys ends: what it kept for them goes. */
void jwt_cache_thread_end(void);
/* The claims of a token verified before and not expired at now (seconds since the epoch): a
 * new reference (jwt_claims_unref it), or NULL. */
struct jwt_claims *jwt_cache_get(struct jwt_cache *cache, const struct jwt_cache_key *key,
    int64_t now);
/* Keep claims (the cache takes its own reference) until its exp or now + max_ttl, the earlier
 * one; a token already expired is not kept. */
void jwt_cache_put(struct jwt_cache *cache, const struct jwt_cache_key *key,
    struct jwt_claims *claims, int64_t now);
void jwt_cache_clear(struct jwt_cache *cache);
size_t jwt_cache_count(struct jwt_cache *cache);

#endif
