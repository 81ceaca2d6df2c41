/* Reference-counted contiguous blocks for bodies, from per-worker free lists. */
#ifndef JG_BLOCK_H
#define JG_BLOCK_H

#include <stddef.h>

struct evbuffer;
struct body_pool;

/*
 * A body received straight into one contiguous block (a Content-Length body read by the
 * socket layer without an evbuffer in between): new (one reference, len bytes of room),
 * its memory, release.  Output chains that reference it keep it alive.
 */
struct body_block;
struct body_block *body_block_new(struct body_pool *pool, size_t len);
char *body_block_data(struct body_block *b);
/* Make room for len bytes in a block nobody else references yet, keeping its contents; a
 * large block grows in place (mremap), so collecting a body of unknown size needs no second
 * copy.  0 or -1 (the block is unchanged). */
int body_block_reserve(struct body_block **b, size_t len);
void body_block_release(struct body_block *b);
/* One more reference to b (released with body_block_release). */
void body_block_ref(struct body_block *b);
/* Append the block's first len bytes to out by reference. */
int body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len);
/* Append p[0..len), which lies in the block, to out: by reference when it is long enough to
 * be worth a chain of its own, else copied. */
int body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len);
/* Append a copy of p[0..len) to out, in a chain sized for it: after a reference, where
 * evbuffer_add would take a chain as large as the referenced span (libevent sizes a new
 * chain after the last one), a 1 MB allocation for a closing brace.  0 or -1. */
int body_add_copy(struct evbuffer *out, const void *p, size_t len);
/* A new block (one reference) holding a copy of src's bytes; NULL when out of memory. */
struct body_block *body_block_copy(struct body_pool *pool, struct evbuffer *src);

#endif
