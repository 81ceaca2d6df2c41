/* Reference-counted body blocks from per-worker free lists: a base facility, nothing of HTTP. */
#include "block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "mempool.h"
#include "timers.h"

/* Freed blocks kept per worker for the next bodies: fresh memory for a 1 MB body costs more
 * in page faults (257) than scanning it.  Blocks below BODY_POOL_BLOCK are kept up to
 * BODY_POOL_BYTES for good.  Larger ones are large bodies': malloc maps each on its own, so
 * they are kept apart, up to BODY_LARGE_KEEP, while large bodies keep coming, and given back
 * to the system BODY_LARGE_DELAY_MS after the last one; the kept blocks make room for a
 * large body none of them fits. */
#define BODY_POOL_BYTES (4 * MEMPOOL_LARGE_BLOCK)
#define BODY_LARGE_KEEP (32 * 1024 * 1024)
#define BODY_LARGE_DELAY_MS 1000

/* A contiguous copy of a body; output chains reference it until the last one is written. */
struct body_block {
	struct body_block *next;        /* in the pool's free list */
	struct body_block_pool *pool;
	unsigned refs;
	size_t cap;
	char data[];
};

struct body_block_pool {
	struct body_block *free;
	size_t free_bytes;
	struct body_block *large;       /* large blocks kept (with timers only) */
	size_t large_bytes;
	/* Runs BODY_LARGE_DELAY_MS after the last large body: then the large blocks kept and
	 * what large bodies left free go back to the system (without timers, as in tests: at
	 * once, and none is kept). */
	struct deadline trim;
	int has_timers;
};

struct body_block_pool *
body_block_pool_new(void)
{
	return calloc(1, sizeof(struct body_block_pool));
}

static void
body_block_pool_drop_large(struct body_block_pool *pool)
{
	struct body_block *b;

	while ((b = pool->large) != NULL) {
		pool->large = b->next;
		free(b);
	}
	pool->large_bytes = 0;
}

static void
body_block_pool_trim_cb(struct deadline *d, void *arg)
{
	(void)d;
	body_block_pool_drop_large(arg);
	mempool_trim();
}

void
body_block_pool_set_timers(struct body_block_pool *pool, struct timers *t)
{
	deadline_init(&pool->trim, t, body_block_pool_trim_cb, pool);
	pool->has_timers = 1;
}

/* A large body is done: its memory stays for the next one, and goes back to the system
 * once none has come for a while. */
void
body_block_pool_large_done(struct body_block_pool *pool)
{
	if (!pool->has_timers || deadline_start(&pool->trim, BODY_LARGE_DELAY_MS) != 0) {
		body_block_pool_drop_large(pool);
		mempool_trim();
	}
}

/* Give the pool's free blocks back to the heap. */
static void
body_block_pool_drain(struct body_block_pool *pool)
{
	struct body_block *b;

	while ((b = pool->free) != NULL) {
		pool->free = b->next;
		free(b);
	}
	pool->free_bytes = 0;
}

void
body_block_pool_free(struct body_block_pool *pool)
{
	if (pool == NULL)
		return;
	if (pool->has_timers)
		deadline_stop(&pool->trim);
	body_block_pool_drop_large(pool);
	body_block_pool_drain(pool);
	free(pool);
}

struct body_block *
body_block_pool_get(struct body_block_pool *pool, size_t len)
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
		body_block_pool_drain(pool);
		body_block_pool_drop_large(pool);
	}
	if ((b = malloc(sizeof(*b) + cap)) == NULL)
		return NULL;
	b->pool = pool;
	b->cap = cap;
	b->refs = 1;
	return b;
}

static void
body_block_unref(struct body_block *b)
{
	struct body_block_pool *pool;

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
		body_block_pool_large_done(pool);
	} else if (pool->free_bytes + b->cap <= BODY_POOL_BYTES) {
		b->next = pool->free;
		pool->free = b;
		pool->free_bytes += b->cap;
	} else {
		free(b);
	}
}

static void
body_block_cleanup_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	body_block_unref(arg);
}

char *
body_block_data(struct body_block *b)
{
	return b->data;
}

size_t
body_block_size(const struct body_block *b)
{
	return b->cap;
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
		body_block_pool_drain((*b)->pool);
		body_block_pool_drop_large((*b)->pool);
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
body_block_add_ref(struct evbuffer *out, struct body_block *b, const char *p, size_t len)
{
	b->refs++;
	if (evbuffer_add_reference(out, p, len, body_block_cleanup_cb, b) != 0) {
		b->refs--;
		return -1;
	}
	return 0;
}

int
body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len)
{
	if (len >= BODY_REFERENCE_MIN && body_block_add_ref(out, b, p, len) == 0)
		return 0;
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
body_block_pool_copy(struct body_block_pool *pool, struct evbuffer *src)
{
	size_t len = evbuffer_get_length(src);
	struct body_block *b;

	if ((b = body_block_pool_get(pool, len)) != NULL)
		evbuffer_copyout(src, b->data, len);
	return b;
}
