/* Reference-counted contiguous blocks for bodies, from per-worker free lists. */
#include "block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "body_pool.h"
#include "mempool.h"
#include "timers.h"

void
body_pool_drop_large(struct body_pool *pool)
{
	struct body_block *b;

	while ((b = pool->large) != NULL) {
		pool->large = b->next;
		free(b);
	}
	pool->large_bytes = 0;
}

static void
body_pool_trim_cb(struct deadline *d, void *arg)
{
	(void)d;
	body_pool_drop_large(arg);
	mempool_trim();
}

void
body_pool_set_timers(struct body_pool *pool, struct timers *t)
{
	deadline_init(&pool->trim, t, body_pool_trim_cb, pool);
	pool->has_timers = 1;
}

/* A large body is done: its memory stays for the next one, and goes back to the system
 * once none has come for a while. */
void
body_pool_large_done(struct body_pool *pool)
{
	if (!pool->has_timers || deadline_start(&pool->trim, BODY_LARGE_DELAY_MS) != 0) {
		body_pool_drop_large(pool);
		mempool_trim();
	}
}

/* Give the pool's free blocks back to the heap. */
void
body_pool_drain(struct body_pool *pool)
{
	struct body_block *b;

	while ((b = pool->free) != NULL) {
		pool->free = b->next;
		free(b);
	}
	pool->free_bytes = 0;
}

struct body_block *
body_block_get(struct body_pool *pool, size_t len)
{
	struct body_block **pp, *b;
	size_t cap = 64 * 1024;

	for (pp = &pool->free; (b = *pp) != NULL; pp = &b->next)
		if (b->cap >= len) {
			*pp = b->next;
			pool->free_bytes -= b->cap;
			b->refs = 1;
			return b;
		}
	while (cap < len)
		cap *= 2;
	if (cap >= BODY_POOL_BLOCK) {
		for (pp = &pool->large; (b = *pp) != NULL; pp = &b->next)
			if (b->cap >= len) {
				*pp = b->next;
				pool->large_bytes -= b->cap;
				b->refs = 1;
				return b;
			}
		/* None fits: the memory the kept blocks hold is better spent on this one. */
		body_pool_drain(pool);
		body_pool_drop_large(pool);
	}
	if ((b = malloc(sizeof(*b) + cap)) == NULL)
		return NULL;
	b->pool = pool;
	b->cap = cap;
	b->refs = 1;
	return b;
}

void
body_block_unref(struct body_block *b)
{
	struct body_pool *pool;

	if (b == NULL || --b->refs != 0)
		return;
	pool = b->pool;
	if (b->cap >= BODY_POOL_BLOCK) {
		if (pool->has_timers && pool->large_bytes + b->cap <= BODY_LARGE_KEEP) {
			b->next = pool->large;
			pool->large = b;
			pool->large_bytes += b->cap;
		} else {
			free(b);
		}
		body_pool_large_done(pool);
	} else if (pool->free_bytes + b->cap <= BODY_POOL_BYTES) {
		b->next = pool->free;
		pool->free = b;
		pool->free_bytes += b->cap;
	} else {
		free(b);
	}
}

void
body_block_cleanup_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	body_block_unref(arg);
}

struct body_block *
body_block_new(struct body_pool *pool, size_t len)
{
	return body_block_get(pool, len);
}

char *
body_block_data(struct body_block *b)
{
	return b->data;
}

int
body_block_reserve(struct body_block **b, size_t len)
{
	struct body_block *grown;
	size_t cap = (*b)->cap;

	if (cap >= len)
		return 0;
	while (cap < len) {
		if (cap > SIZE_MAX / 2 - sizeof(**b))
			return -1;
		cap *= 2;
	}
	if ((*b)->refs != 1)
		return -1;
	if (cap >= BODY_POOL_BLOCK) {
		body_pool_drain((*b)->pool);
		body_pool_drop_large((*b)->pool);
	}
	if ((grown = realloc(*b, sizeof(*grown) + cap)) == NULL)
		return -1;
	grown->cap = cap;
	*b = grown;
	return 0;
}

void
body_block_release(struct body_block *b)
{
	body_block_unref(b);
}

void
body_block_ref(struct body_block *b)
{
	b->refs++;
}

int
body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len)
{
	b->refs++;
	if (evbuffer_add_reference(out, b->data, len, body_block_cleanup_cb, b) < 0) {
		b->refs--;
		return evbuffer_add(out, b->data, len);
	}
	return 0;
}

int
body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len)
{
	if (len >= BODY_REFERENCE_MIN) {
		b->refs++;
		if (evbuffer_add_reference(out, p, len, body_block_cleanup_cb, b) == 0)
			return 0;
		b->refs--;
	}
	return body_add_copy(out, p, len);
}

int
body_add_copy(struct evbuffer *out, const void *p, size_t len)
{
	struct evbuffer_iovec v;

	if (len == 0)
		return 0;
	if (evbuffer_reserve_space(out, (ev_ssize_t)len, &v, 1) != 1)
		return -1;
	memcpy(v.iov_base, p, len);
	v.iov_len = len;
	return evbuffer_commit_space(out, &v, 1);
}

struct body_block *
body_block_copy(struct body_pool *pool, struct evbuffer *src)
{
	size_t len = evbuffer_get_length(src);
	struct body_block *b;

	if ((b = body_block_get(pool, len)) != NULL)
		evbuffer_copyout(src, b->data, len);
	return b;
}
