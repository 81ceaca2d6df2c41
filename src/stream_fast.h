/*
 * The fast path of event ops.  A program whose ops are all drop and set of top-level keys,
 * without when:, needs of an event only its outer object's members: they are found with the
 * scanner skipping the values, the ops are applied to a flat list of them, and the output is
 * made as the engine's emit makes it, byte for byte.  It takes only what is plainly valid
 * (keys and string values at the top without escapes or NUL, strict separators); anything
 * else goes to the engine, which then decides as it always did.  The head of the last event
 * (its members before the first object or array) is kept: a next event laid out the same
 * way is read from there on.
 */
#ifndef JG_STREAM_FAST_H
#define JG_STREAM_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "rewrite.h"

struct stream_fast;

/* NULL without memory. */
struct stream_fast *stream_fast_new(void);
void stream_fast_free(struct stream_fast *f);
/* The program of an answer's events (NULL: none), taken if the fast path can; its set
 * values are resolved with vars in ctx's scratch (the engine's) and then kept apart, at the
 * first event after stream_fast_unready (a new feed: the variables may have moved). */
void stream_fast_plan(struct stream_fast *f, const struct rewrite_program *prog,
    enum validate_mode mode, struct rewrite_ctx *ctx, const struct rewrite_vars *vars);
void stream_fast_unready(struct stream_fast *f);
/* Whether a set value holds a CR or LF (JSON whitespace that would end an SSE line). */
int stream_fast_values_eol(const struct stream_fast *f);
/*
 * The ops on the object that is the whole of json[0..len): 1 with the new text in *spans
 * (*nspans of them, valid until the next call), 0 when the event passes as it came, -2 when
 * the engine must decide (also: a program the fast path does not take, no memory).
 */
int stream_fast_apply(struct stream_fast *f, const char *json, size_t len, unsigned max_depth,
    size_t max_members, const struct rewrite_span **spans, size_t *nspans);
/* The same on an object at the start of json[0..len), which goes on past it: *end is one
 * past its '}', and a CR or LF before that is a -2 (the object lies within one line), as is
 * a set value with one. */
int stream_fast_apply_line(struct stream_fast *f, const char *json, size_t len,
    unsigned max_depth, size_t max_members, const struct rewrite_span **spans, size_t *nspans,
    size_t *end);
/* Events since the plan whose head was laid out as the last one's. */
uint64_t stream_fast_heads(const struct stream_fast *f);

#endif
