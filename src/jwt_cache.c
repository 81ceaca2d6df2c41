#include "jwt_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "lru.h"

struct jwt_cache_entry {
	struct lru_node node;
	struct jwt_cache_key key;
	int64_t expires;
	struct jwt_claims *claims;
};

struct jwt_cache {
	struct lru *table;
	int64_t max_ttl;
};

/* The digest is uniform: its last byte picks the shard, its first bytes the bucket. */
static uint64_t
jwt_cache_hash(const struct jwt_cache_key *key)
{
	uint64_t h;

	memcpy(&h, key->digest, sizeof(h));
	return (h & ~(UINT64_C(0xf) << 60)) | (uint64_t)(key->digest[31] % LRU_SHARDS) << 60;
}

static int
jwt_cache_eq(const struct lru_node *n, const void *key)
{
	const struct jwt_cache_entry *e = LRU_ENTRY(n, const struct jwt_cache_entry, node);

	return memcmp(e->key.digest, ((const struct jwt_cache_key *)key)->digest,
	    sizeof(e->key.digest)) == 0;
}

static void
jwt_cache_entry_free(struct lru_node *n)
{
	struct jwt_cache_entry *e = LRU_ENTRY(n, struct jwt_cache_entry, node);

	jwt_claims_unref(e->claims);
	free(e);
}

struct jwt_cache *
jwt_cache_new(size_t max_entries, int64_t max_ttl)
{
	struct jwt_cache *c;

	if (max_entries == 0 || (c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->max_ttl = max_ttl;
	if ((c->table = lru_new(max_entries, jwt_cache_entry_free)) == NULL) {
		free(c);
		return NULL;
	}
	return c;
}

/* SHA256() looks the algorithm up and makes a context at every call: a thread keeps both,
 * which takes half the cost of a key off. */
static pthread_once_t jwt_cache_md_once = PTHREAD_ONCE_INIT;
static EVP_MD *jwt_cache_md;
static __thread EVP_MD_CTX *jwt_cache_md_ctx;

static void
jwt_cache_md_fetch(void)
{
	jwt_cache_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void
jwt_cache_key(const char *token, size_t len, struct jwt_cache_key *key)
{
	pthread_once(&jwt_cache_md_once, jwt_cache_md_fetch);
	if (jwt_cache_md != NULL && jwt_cache_md_ctx == NULL)
		jwt_cache_md_ctx = EVP_MD_CTX_new();
	if (jwt_cache_md_ctx == NULL || EVP_DigestInit_ex2(jwt_cache_md_ctx, jwt_cache_md,
	    NULL) != 1 || EVP_DigestUpdate(jwt_cache_md_ctx, token, len) != 1 ||
	    EVP_DigestFinal_ex(jwt_cache_md_ctx, key->digest, NULL) != 1)
		SHA256((const unsigned char *)token, len, key->digest);
}

void
jwt_cache_thread_end(void)
{
	EVP_MD_CTX_free(jwt_cache_md_ctx);
	jwt_cache_md_ctx = NULL;
}

struct jwt_claims *
jwt_cache_get(struct jwt_cache *c, const struct jwt_cache_key *key, int64_t now)
{
	uint64_t h = jwt_cache_hash(key);
	struct lru_shard *s = lru_shard(c->table, h);
	struct lru_node *n;
	struct jwt_cache_entry *e;
	struct jwt_claims *claims = NULL;

	lru_lock(s);
	if ((n = lru_find(s, h, jwt_cache_eq, key)) != NULL) {
		e = LRU_ENTRY(n, struct jwt_cache_entry, node);
		if (now >= e->expires) {
			lru_drop(s, n);
		} else {
			lru_use(s, n);
			claims = jwt_claims_ref(e->claims);
		}
	}
	lru_unlock(s);
	return claims;
}

void
jwt_cache_put(struct jwt_cache *c, const struct jwt_cache_key *key, struct jwt_claims *claims,
    int64_t now)
{
	uint64_t h = jwt_cache_hash(key);
	struct lru_shard *s = lru_shard(c->table, h);
	struct lru_node *n;
	struct jwt_cache_entry *e;
	int64_t expires = now + c->max_ttl;

	if (claims->has_exp && claims->exp < expires)
		expires = claims->exp;
	if (expires <= now || lru_max(s) == 0)
		return;
	lru_lock(s);
	if ((n = lru_find(s, h, jwt_cache_eq, key)) != NULL) {
		lru_use(s, n);
		LRU_ENTRY(n, struct jwt_cache_entry, node)->expires = expires;
		lru_unlock(s);
		return;
	}
	lru_make_room(s);
	if ((e = calloc(1, sizeof(*e))) != NULL) {
		e->key = *key;
		e->expires = expires;
		e->claims = jwt_claims_ref(claims);
		lru_add(s, &e->node, h);
	}
	lru_unlock(s);
}

void
jwt_cache_clear(struct jwt_cache *c)
{
	lru_clear(c->table);
}

size_t
jwt_cache_count(struct jwt_cache *c)
{
	return lru_count(c->table);
}

void
jwt_cache_free(struct jwt_cache *c)
{
	if (c == NULL)
		return;
	lru_free(c->table);
	free(c);
}
