/*
 * A hash table shared by threads and bounded in entries, the least recently used entry
 * evicted: 16 shards, one lock each.  The caller's entries embed a struct lru_node and carry
 * their key; the caller hashes keys (uniformly: the top 4 bits pick the shard, the low bits
 * the bucket) and says when two are equal.  The table takes an entry once added and frees it
 * with free_entry when it goes.
 *
 * Every call on a shard but lru_shard and lru_max is made with its lock held (lru_lock);
 * lru_count and lru_clear take each shard's lock themselves.
 */
#ifndef JG_LRU_H
#define JG_LRU_H

#include <stddef.h>
#include <stdint.h>

#define LRU_SHARDS 16

struct lru_node {
	struct lru_node *hnext;                 /* hash chain */
	struct lru_node *prev, *next;           /* recency: head most recent */
	uint64_t hash;
};

/* The entry of type holding node as its member. */
#define LRU_ENTRY(node, type, member) \
	((type *)(void *)((char *)(node) - offsetof(type, member)))

struct lru;
struct lru_shard;

typedef void (*lru_free_fn)(struct lru_node *n);
/* 1 when the entry at n has key (whose hash is n's). */
typedef int (*lru_eq_fn)(const struct lru_node *n, const void *key);

/* At most max_entries, each shard keeping its share (max_entries / 16, the first ones one
 * more): a shard keeps none when max_entries < 16.  NULL when max_entries is 0 or without
 * memory. */
struct lru *lru_new(size_t max_entries, lru_free_fn free_entry);
/* Frees every entry too; no other thread may use the table. */
void lru_free(struct lru *t);

/* The shard of hash, and its lock. */
struct lru_shard *lru_shard(struct lru *t, uint64_t hash);
void lru_lock(struct lru_shard *s);
void lru_unlock(struct lru_shard *s);
/* How many entries the shard keeps at most (set by lru_new: no lock needed). */
size_t lru_max(const struct lru_shard *s);

/* The entry of key, or NULL; its recency is unchanged. */
struct lru_node *lru_find(struct lru_shard *s, uint64_t hash, lru_eq_fn eq, const void *key);
/* n becomes the most recently used. */
void lru_use(struct lru_shard *s, struct lru_node *n);
/* The least recently used entry, or NULL. */
struct lru_node *lru_oldest(struct lru_shard *s);
/* n goes: out of the table, freed. */
void lru_drop(struct lru_shard *s, struct lru_node *n);
/* A full shard drops its least recently used entry, so that one more fits. */
void lru_make_room(struct lru_shard *s);
/* n (not in the table, its key not either) is added as the most recently used, hash its
 * key's; the shard has room (lru_make_room) and keeps at least one. */
void lru_add(struct lru_shard *s, struct lru_node *n, uint64_t hash);

/* Entries in the whole table. */
size_t lru_count(struct lru *t);
/* Every entry goes. */
void lru_clear(struct lru *t);

#endif
