#include "config.h"
#include "mempool.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

/*
 * Size classes: 2^k + 128 bytes for k = 6..19.  libevent sizes a buffer chain as a power of
 * two plus its chain header, so each chain fits one class with little waste; larger blocks
 * go straight to malloc.
 */
#define MEMPOOL_MIN_SHIFT 6
#define MEMPOOL_CLASSES 14
#define MEMPOOL_SLACK 128
#define MEMPOOL_LARGE 0xffffu
/* What one thread keeps: the buffers of a few dozen requests in flight; more would show in
 * the peak memory of large bodies. */
#define MEMPOOL_KEEP_BYTES (1u << 20)
#define MEMPOOL_KEEP_BLOCKS 512

/* In front of every block; 16 bytes keep the caller's pointer aligned as malloc's. */
struct mempool_head {
	uint32_t cls;
	uint32_t pad;
	union {
		struct mempool_head *next;  /* while on a free list */
		uint64_t align;
	};
};

struct mempool_cache {
	struct mempool_head *free[MEMPOOL_CLASSES];
	unsigned count[MEMPOOL_CLASSES];
	size_t bytes;
};

static __thread struct mempool_cache cache;

static size_t
mempool_class_size(unsigned cls)
{
	return ((size_t)1 << (cls + MEMPOOL_MIN_SHIFT)) + MEMPOOL_SLACK;
}

/* The smallest class holding n bytes (header included), or MEMPOOL_LARGE. */
static unsigned
mempool_class_of(size_t n)
{
	unsigned shift;

	if (n <= mempool_class_size(0))
		return 0;
	/* The smallest 2^shift with 2^shift + MEMPOOL_SLACK >= n. */
	shift = 64 - (unsigned)__builtin_clzll((unsigned long long)(n - MEMPOOL_SLACK - 1));
	if (shift - MEMPOOL_MIN_SHIFT >= MEMPOOL_CLASSES)
		return MEMPOOL_LARGE;
	return shift - MEMPOOL_MIN_SHIFT;
}

void *
mempool_malloc(size_t n)
{
	size_t total = n + sizeof(struct mempool_head);
	unsigned cls = mempool_class_of(total);
	struct mempool_head *h;

	if (total < n)
		return NULL;
	if (cls != MEMPOOL_LARGE && (h = cache.free[cls]) != NULL) {
		cache.free[cls] = h->next;
		cache.count[cls]--;
		cache.bytes -= mempool_class_size(cls);
	} else if ((h = malloc(cls == MEMPOOL_LARGE ? total : mempool_class_size(cls))) == NULL) {
		return NULL;
	}
	h->cls = cls;
	return h + 1;
}

void
mempool_free(void *p)
{
	struct mempool_head *h;
	size_t size;

	if (p == NULL)
		return;
	h = (struct mempool_head *)p - 1;
	if (h->cls == MEMPOOL_LARGE) {
		free(h);
		return;
	}
	size = mempool_class_size(h->cls);
	if (cache.count[h->cls] >= MEMPOOL_KEEP_BLOCKS || cache.bytes + size > MEMPOOL_KEEP_BYTES) {
		free(h);
		return;
	}
	h->next = cache.free[h->cls];
	cache.free[h->cls] = h;
	cache.count[h->cls]++;
	cache.bytes += size;
}

void *
mempool_realloc(void *p, size_t n)
{
	struct mempool_head *h;
	size_t have;
	void *q;

	if (p == NULL)
		return mempool_malloc(n);
	h = (struct mempool_head *)p - 1;
	if (h->cls == MEMPOOL_LARGE) {
		if ((h = realloc(h, n + sizeof(*h))) == NULL)
			return NULL;
		return h + 1;
	}
	have = mempool_class_size(h->cls) - sizeof(*h);
	if (n <= have)
		return p;
	if ((q = mempool_malloc(n)) == NULL)
		return NULL;
	memcpy(q, p, have);
	mempool_free(p);
	return q;
}

void
mempool_thread_release(void)
{
	struct mempool_head *h;
	unsigned cls;

	for (cls = 0; cls < MEMPOOL_CLASSES; cls++) {
		while ((h = cache.free[cls]) != NULL) {
			cache.free[cls] = h->next;
			free(h);
		}
		cache.count[cls] = 0;
	}
	cache.bytes = 0;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMPOOL_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MEMPOOL_UNDER_ASAN 1
#endif

void
mempool_trim(void)
{
	malloc_trim(0);
}

void
mempool_init(void)
{
	/* glibc moves its thresholds up to the largest block freed so far: after one 8 MB body
	 * it would keep 16 MB free per arena for good.  Fixed, a large body's blocks are mapped
	 * and go back when freed, and at most MEMPOOL_LARGE_BLOCK stays free at a heap's top:
	 * enough for the buffers of small requests, which mostly come from the lists above
	 * (no page fault per request, plain or TLS, keep-alive or not). */
	mallopt(M_MMAP_THRESHOLD, MEMPOOL_LARGE_BLOCK);
	mallopt(M_TRIM_THRESHOLD, MEMPOOL_LARGE_BLOCK);
#ifndef MEMPOOL_UNDER_ASAN
	/* Under AddressSanitizer every buffer stays a heap block of its own, so that a use after
	 * free is still caught. */
	event_set_mem_functions(mempool_malloc, mempool_realloc, mempool_free);
#endif
}
