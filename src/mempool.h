/*
 * libevent's memory (buffer chains, events) from per-thread free lists: a request's buffers
 * are taken from and given back to its worker's lists instead of malloc and free, so that a
 * warm worker makes no heap allocation per request.  Each thread keeps a bounded amount.
 */
#ifndef JG_MEMPOOL_H
#define JG_MEMPOOL_H

#include <stddef.h>

/*
 * A block of this size or more is one large body's: malloc maps it on its own, so that
 * freeing it gives it back to the system, and the heap keeps at most this much free memory
 * at its top.  Smaller blocks are reused from the heap without new page faults.
 */
#define MEMPOOL_LARGE_BLOCK (1024 * 1024)

/* Before any other libevent call: route libevent's allocations through the lists and set
 * malloc's thresholds to MEMPOOL_LARGE_BLOCK. */
void mempool_init(void);
/* A large body is done: give the free memory it left in the heap's middle back to the
 * system (its top and its mapped blocks went back when freed).  Costs a walk of the
 * heap's free lists: for large bodies only. */
void mempool_trim(void);
/* The calling thread is ending: give its free lists back to the heap. */
void mempool_thread_release(void);

/* The allocator itself, for tests. */
void *mempool_malloc(size_t n);
void *mempool_realloc(void *p, size_t n);
void mempool_free(void *p);

#endif
