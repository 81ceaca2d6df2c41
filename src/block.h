/* Reference-counted contiguous blocks for bodies, from per-worker free lists. */
#ifndef JG_BLOCK_H
#define JG_BLOCK_H

#include <stddef.h>

#include "mempool.h"

struct evbuffer;
struct timers;

/* Spans at least this long go out as references to their block; shorter ones are copied
 * (a reference costs a chain of its own). */
#define BODY_REFERENCE_MIN 2048
/* A block of this size or more is a large body's: its memory goes back to the system a
 * while after the last large body (see body_block_pool_set_timers). */
#define BODY_POOL_BLOCK MEMPOOL_LARGE_BLOCK

/* One worker's blocks: free lists that serve the next bodies without new page faults. */
struct body_block_pool;
struct body_block_pool *body_block_pool_new(void);
/* The worker's deadlines: memory left by large bodies then goes back to the system a while
 * after the last one, not after each (without: after each). */
void body_block_pool_set_timers(struct body_block_pool *pool, struct timers *t);
void body_block_pool_free(struct body_block_pool *pool);
/* A large body is done (a block of BODY_POOL_BLOCK or more was freed, or memory as large
 * elsewhere): what it left goes back to the system, now or after a while. */
void body_block_pool_large_done(struct body_block_pool *pool);

/*
 * A body received straight into one contiguous block (a Content-Length body read by the
 * socket layer without an evbuffer in between): get (one reference, len bytes of room),
 * its memory, release.  Output chains that reference it keep it alive.
 */
struct body_block;
struct body_block *body_block_pool_get(struct body_block_pool *pool, size_t len);
char *body_block_data(struct body_block *b);
/* The bytes of room the block has: at least what it was asked for. */
size_t body_block_size(const struct body_block *b);
/* Make room for len bytes in a block nobody else references yet, keeping its contents; a
 * large block grows in place (mremap), so collecting a body of unknown size needs no second
 * copy.  0 or -1 (the block is unchanged). */
int body_block_reserve(struct body_block **b, size_t len);
/* Drop a reference (b may be NULL); the last one gives the block back to its pool. */
void body_block_release(struct body_block *b);
/* One more reference to b (released with body_block_release). */
void body_block_ref(struct body_block *b);
/* Append the block's first len bytes to out by reference. */
int body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len);
/* Append p[0..len), which lies in the block, to out by reference, however short; 0, or -1
 * with nothing added. */
int body_block_add_ref(struct evbuffer *out, struct body_block *b, const char *p, size_t len);
/* Append p[0..len), which lies in the block, to out: by reference when it is long enough to
 * be worth a chain of its own, else copied. */
int body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len);
/* Append a copy of p[0..len) to out, in a chain sized for it: after a reference, where
 * evbuffer_add would take a chain as large as the referenced span (libevent sizes a new
 * chain after the last one), a 1 MB allocation for a closing brace.  0 or -1. */
int body_add_copy(struct evbuffer *out, const void *p, size_t len);
/* A new block (one reference) holding a copy of src's bytes; NULL when out of memory. */
struct body_block *body_block_pool_copy(struct body_block_pool *pool, struct evbuffer *src);

#endif
