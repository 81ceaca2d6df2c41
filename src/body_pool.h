/* The per-worker body pool, shared by the body files: its blocks, its zlib states and its
 * rewrite context. */
#ifndef JG_BODY_POOL_H
#define JG_BODY_POOL_H

#include <zlib.h>

#include "body.h"

struct body_pool {
	struct rewrite_ctx *rw;
	unsigned rw_depth, rw_members;  /* the limits rw was made for */
	struct body_block_pool *blocks;
	z_stream gz;                    /* deflate state, reset per body: no allocation per use */
	int gz_ready;
	z_stream inf;                   /* inflate state, likewise */
	int inf_ready;
	enum body_coding inf_coding;
	int inf_ended;                  /* the compressed data ended (a gzip member may follow) */
	unsigned inf_magic;             /* magic bytes of the next gzip member seen so far */
	char *inf_out;                  /* where a prefix's output starts */
	struct evbuffer *gz_out;
};

/* Free the pool's zlib states (body_coding.c). */
void body_coding_pool_end(struct body_pool *pool);

#endif
