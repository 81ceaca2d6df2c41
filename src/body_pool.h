/* The parts of the per-worker body pool the body files share: its blocks' free lists and
 * trim timer, its zlib states and its rewrite context. */
#ifndef JG_BODY_POOL_H
#define JG_BODY_POOL_H

#include <stddef.h>

#include <zlib.h>

#include "body.h"
#include "mempool.h"
#include "timers.h"

/* Spans at least this long go out as references to the input block; shorter ones are copied
 * (a reference costs a chain of its own). */
#define BODY_REFERENCE_MIN 2048
/* Freed blocks kept per worker for the next bodies: fresh memory for a 1 MB body costs more
 * in page faults (257) than scanning it.  Blocks below BODY_POOL_BLOCK are kept up to
 * BODY_POOL_BYTES for good.  Larger ones are large bodies': malloc maps each on its own, so
 * they are kept apart, up to BODY_LARGE_KEEP, while large bodies keep coming, and given back
 * to the system BODY_LARGE_DELAY_MS after the last one; the kept blocks make room for a
 * large body none of them fits. */
#define BODY_POOL_BYTES (4 * MEMPOOL_LARGE_BLOCK)
#define BODY_POOL_BLOCK MEMPOOL_LARGE_BLOCK
#define BODY_LARGE_KEEP (32 * 1024 * 1024)
#define BODY_LARGE_DELAY_MS 1000
/* Where a large body's copied output goes, a block at a time: a large block itself. */
#define BODY_COPY_BLOCK (2 * BODY_POOL_BLOCK)

/* A contiguous copy of a body; output chains reference it until the last one is written. */
struct body_block {
	struct body_block *next;        /* in the pool's free list */
	struct body_pool *pool;
	unsigned refs;
	size_t cap;
	char data[];
};

struct body_pool {
	struct rewrite_ctx *rw;
	unsigned rw_depth, rw_members;  /* the limits rw was made for */
	z_stream gz;                    /* deflate state, reset per body: no allocation per use */
	int gz_ready;
	z_stream inf;                   /* inflate state, likewise */
	int inf_ready;
	enum body_coding inf_coding;
	int inf_ended;                  /* the compressed data ended (a gzip member may follow) */
	unsigned inf_magic;             /* magic bytes of the next gzip member seen so far */
	char *inf_out;                  /* where a prefix's output starts */
	struct evbuffer *gz_out;
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

void body_pool_drop_large(struct body_pool *pool);
void body_pool_large_done(struct body_pool *pool);
void body_pool_drain(struct body_pool *pool);
struct body_block *body_block_get(struct body_pool *pool, size_t len);
void body_block_unref(struct body_block *b);
void body_block_cleanup_cb(const void *data, size_t len, void *arg);

#endif
