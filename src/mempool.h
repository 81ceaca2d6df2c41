/*
 * libevent's memory (buffer chains, events) from per-thread free lists: a request's buffers
 * are taken from and given back to its worker's lists instead of malloc and free, so that a
 * warm worker makes no heap allocation per request.  Each thread keeps a bounded amount.
 */
#ifndef JG_MEMPOOL_H
#define JG_MEMPOOL_H

#include <stddef.h>

/* Before any other libevent call: route libevent's allocations through the lists. */
void mempool_init(void);
/* The calling thread is ending: give its free lists back to the heap. */
void mempool_thread_release(void);

/* The allocator itself, for tests. */
void *mempool_malloc(size_t n);
void *mempool_realloc(void *p, size_t n);
void mempool_free(void *p);

#endif
