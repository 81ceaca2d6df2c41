#include "jwt_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#define JWT_CACHE_SHARDS 16

struct jwt_cache_entry {
	struct jwt_cache_key key;
	int64_t expires;
	struct jwt_claims *claims;
	struct jwt_cache_entry *hnext;          /* hash chain */
	struct jwt_cache_entry *prev, *next;    /* recency: head most recent */
};

struct jwt_cache_shard {
	pthread_mutex_t lock;
	struct jwt_cache_entry **buckets;
	size_t mask;
	size_t count, max;
	struct jwt_cache_entry *head, *tail;
};

struct jwt_cache {
	struct jwt_cache_shard shards[JWT_CACHE_SHARDS];
	int64_t max_ttl;
};

/* The digest is uniform: its bytes pick the shard and the bucket. */
static struct jwt_cache_shard *
jwt_cache_shard(struct jwt_cache *c, const struct jwt_cache_key *key)
{
	return &c->shards[key->digest[31] % JWT_CACHE_SHARDS];
}

static size_t
jwt_cache_bucket(const struct jwt_cache_shard *s, const struct jwt_cache_key *key)
{
	size_t h;

	memcpy(&h, key->digest, sizeof(h));
	return h & s->mask;
}

struct jwt_cache *
jwt_cache_new(size_t max_entries, int64_t max_ttl)
{
	struct jwt_cache *c;
	struct jwt_cache_shard *s;
	size_t i, per, nb;

	if (max_entries == 0 || (c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->max_ttl = max_ttl;
	per = (max_entries + JWT_CACHE_SHARDS - 1) / JWT_CACHE_SHARDS;
	for (nb = 4; nb < per * 2; nb *= 2)
		;
	for (i = 0; i < JWT_CACHE_SHARDS; i++)
		pthread_mutex_init(&c->shards[i].lock, NULL);
	for (i = 0; i < JWT_CACHE_SHARDS; i++) {
		s = &c->shards[i];
		/* The total stays at most max_entries. */
		s->max = max_entries / JWT_CACHE_SHARDS + (i < max_entries % JWT_CACHE_SHARDS);
		s->mask = nb - 1;
		if ((s->buckets = calloc(nb, sizeof(*s->buckets))) == NULL) {
			jwt_cache_free(c);
			return NULL;
		}
	}
	return c;
}

static void
jwt_cache_unlink(struct jwt_cache_shard *s, struct jwt_cache_entry *e)
{
	struct jwt_cache_entry **pp = &s->buckets[jwt_cache_bucket(s, &e->key)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		s->head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		s->tail = e->prev;
	s->count--;
}

static void
jwt_cache_drop(struct jwt_cache_shard *s, struct jwt_cache_entry *e)
{
	jwt_cache_unlink(s, e);
	jwt_claims_unref(e->claims);
	free(e);
}

static void
jwt_cache_to_front(struct jwt_cache_shard *s, struct jwt_cache_entry *e)
{
	if (s->head == e)
		return;
	e->prev->next = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		s->tail = e->prev;
	e->prev = NULL;
	e->next = s->head;
	s->head->prev = e;
	s->head = e;
}

static struct jwt_cache_entry *
jwt_cache_find(struct jwt_cache_shard *s, const struct jwt_cache_key *key)
{
	struct jwt_cache_entry *e;

	for (e = s->buckets[jwt_cache_bucket(s, key)]; e != NULL; e = e->hnext)
		if (memcmp(e->key.digest, key->digest, sizeof(key->digest)) == 0)
			return e;
	return NULL;
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
	struct jwt_cache_shard *s = jwt_cache_shard(c, key);
	struct jwt_cache_entry *e;
	struct jwt_claims *claims = NULL;

	pthread_mutex_lock(&s->lock);
	if ((e = jwt_cache_find(s, key)) != NULL) {
		if (now >= e->expires) {
			jwt_cache_drop(s, e);
		} else {
			jwt_cache_to_front(s, e);
			claims = jwt_claims_ref(e->claims);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return claims;
}

void
jwt_cache_put(struct jwt_cache *c, const struct jwt_cache_key *key, struct jwt_claims *claims,
    int64_t now)
{
	struct jwt_cache_shard *s = jwt_cache_shard(c, key);
	struct jwt_cache_entry *e;
	int64_t expires = now + c->max_ttl;
	size_t b;

	if (claims->has_exp && claims->exp < expires)
		expires = claims->exp;
	if (expires <= now || s->max == 0)
		return;
	pthread_mutex_lock(&s->lock);
	if ((e = jwt_cache_find(s, key)) != NULL) {
		jwt_cache_to_front(s, e);
		e->expires = expires;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (s->count >= s->max)
		jwt_cache_drop(s, s->tail);
	if ((e = calloc(1, sizeof(*e))) != NULL) {
		e->key = *key;
		e->expires = expires;
		e->claims = jwt_claims_ref(claims);
		b = jwt_cache_bucket(s, key);
		e->hnext = s->buckets[b];
		s->buckets[b] = e;
		e->next = s->head;
		if (s->head != NULL)
			s->head->prev = e;
		s->head = e;
		if (s->tail == NULL)
			s->tail = e;
		s->count++;
	}
	pthread_mutex_unlock(&s->lock);
}

void
jwt_cache_clear(struct jwt_cache *c)
{
	struct jwt_cache_shard *s;
	size_t i;

	for (i = 0; i < JWT_CACHE_SHARDS; i++) {
		s = &c->shards[i];
		pthread_mutex_lock(&s->lock);
		while (s->head != NULL)
			jwt_cache_drop(s, s->head);
		pthread_mutex_unlock(&s->lock);
	}
}

size_t
jwt_cache_count(struct jwt_cache *c)
{
	size_t i, n = 0;

	for (i = 0; i < JWT_CACHE_SHARDS; i++) {
		pthread_mutex_lock(&c->shards[i].lock);
		n += c->shards[i].count;
		pthread_mutex_unlock(&c->shards[i].lock);
	}
	return n;
}

void
jwt_cache_free(struct jwt_cache *c)
{
	struct jwt_cache_shard *s;
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < JWT_CACHE_SHARDS; i++) {
		s = &c->shards[i];
		while (s->head != NULL)
			jwt_cache_drop(s, s->head);
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(c);
}
