#include "lru.h"

#include <pthread.h>
#include <stdlib.h>

/* The top 4 bits of a hash pick its shard. */
_Static_assert(LRU_SHARDS == 16, "the shard is the hash's top 4 bits");

struct lru_shard {
	pthread_mutex_t lock;
	struct lru_node **buckets;
	size_t mask;
	size_t count, max;
	struct lru_node *head, *tail;
	lru_free_fn free_entry;
};

struct lru {
	struct lru_shard shards[LRU_SHARDS];
};

struct lru *
lru_new(size_t max_entries, lru_free_fn free_entry)
{
	struct lru *t;
	struct lru_shard *s;
	size_t i, per, nb;

	if (max_entries == 0 || (t = calloc(1, sizeof(*t))) == NULL)
		return NULL;
	/* Buckets: a power of two, at least twice a shard's share. */
	per = (max_entries + LRU_SHARDS - 1) / LRU_SHARDS;
	for (nb = 4; nb < per * 2; nb *= 2)
		;
	for (i = 0; i < LRU_SHARDS; i++) {
		pthread_mutex_init(&t->shards[i].lock, NULL);
		t->shards[i].free_entry = free_entry;
	}
	for (i = 0; i < LRU_SHARDS; i++) {
		s = &t->shards[i];
		/* The total stays at most max_entries. */
		s->max = max_entries / LRU_SHARDS + (i < max_entries % LRU_SHARDS);
		s->mask = nb - 1;
		if ((s->buckets = calloc(nb, sizeof(*s->buckets))) == NULL) {
			lru_free(t);
			return NULL;
		}
	}
	return t;
}

void
lru_free(struct lru *t)
{
	struct lru_shard *s;
	size_t i;

	if (t == NULL)
		return;
	for (i = 0; i < LRU_SHARDS; i++) {
		s = &t->shards[i];
		while (s->head != NULL)
			lru_drop(s, s->head);
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(t);
}

struct lru_shard *
lru_shard(struct lru *t, uint64_t hash)
{
	return &t->shards[hash >> 60];
}

void
lru_lock(struct lru_shard *s)
{
	pthread_mutex_lock(&s->lock);
}

void
lru_unlock(struct lru_shard *s)
{
	pthread_mutex_unlock(&s->lock);
}

size_t
lru_max(const struct lru_shard *s)
{
	return s->max;
}

struct lru_node *
lru_find(struct lru_shard *s, uint64_t hash, lru_eq_fn eq, const void *key)
{
	struct lru_node *n;

	for (n = s->buckets[hash & s->mask]; n != NULL; n = n->hnext)
		if (n->hash == hash && eq(n, key))
			return n;
	return NULL;
}

static void
lru_push_front(struct lru_shard *s, struct lru_node *n)
{
	n->prev = NULL;
	n->next = s->head;
	if (s->head != NULL)
		s->head->prev = n;
	s->head = n;
	if (s->tail == NULL)
		s->tail = n;
}

/* Out of the recency list. */
static void
lru_unlist(struct lru_shard *s, struct lru_node *n)
{
	if (n->prev != NULL)
		n->prev->next = n->next;
	else
		s->head = n->next;
	if (n->next != NULL)
		n->next->prev = n->prev;
	else
		s->tail = n->prev;
}

void
lru_use(struct lru_shard *s, struct lru_node *n)
{
	if (s->head == n)
		return;
	lru_unlist(s, n);
	lru_push_front(s, n);
}

struct lru_node *
lru_oldest(struct lru_shard *s)
{
	return s->tail;
}

void
lru_drop(struct lru_shard *s, struct lru_node *n)
{
	struct lru_node **pp = &s->buckets[n->hash & s->mask];

	while (*pp != n)
		pp = &(*pp)->hnext;
	*pp = n->hnext;
	lru_unlist(s, n);
	s->count--;
	s->free_entry(n);
}

void
lru_make_room(struct lru_shard *s)
{
	if (s->count >= s->max && s->tail != NULL)
		lru_drop(s, s->tail);
}

void
lru_add(struct lru_shard *s, struct lru_node *n, uint64_t hash)
{
	size_t b = hash & s->mask;

	n->hash = hash;
	n->hnext = s->buckets[b];
	s->buckets[b] = n;
	lru_push_front(s, n);
	s->count++;
}

size_t
lru_count(struct lru *t)
{
	size_t i, n = 0;

	for (i = 0; i < LRU_SHARDS; i++) {
		pthread_mutex_lock(&t->shards[i].lock);
		n += t->shards[i].count;
		pthread_mutex_unlock(&t->shards[i].lock);
	}
	return n;
}

void
lru_clear(struct lru *t)
{
	struct lru_shard *s;
	size_t i;

	for (i = 0; i < LRU_SHARDS; i++) {
		s = &t->shards[i];
		pthread_mutex_lock(&s->lock);
		while (s->head != NULL)
			lru_drop(s, s->head);
		pthread_mutex_unlock(&s->lock);
	}
}
