/*
 * Envelope ops per event of a streamed answer: each SSE event whose data is one JSON object,
 * each NDJSON line or json-seq record, goes through a route's `events:` ops as the buffered
 * engine applies them to a whole body (rewrite_apply), and goes on as soon as it is complete.
 * Everything else passes byte for byte: comments, events without data, non-JSON data such as
 * [DONE], events over the size limit (never held), and events the ops leave as they were.
 */
#ifndef JG_STREAM_EVENT_H
#define JG_STREAM_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "rewrite.h"

/*
 * One event's JSON text through prog.  Returns 1 with the new text in *out (its spans valid
 * until the next call on ctx), 0 when the event passes as it came (not a JSON object, or the
 * ops changed nothing), or -1 when the ops could not apply (out->error): the event then
 * passes as it came too, counted as failed.  ctx must have no sink.
 */
int stream_event_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *json, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out);

enum stream_events_format {
	STREAM_EVENTS_SSE,              /* text/event-stream */
	STREAM_EVENTS_NDJSON,           /* application/x-ndjson, application/jsonl */
	STREAM_EVENTS_JSON_SEQ          /* application/json-seq */
};

/*
 * The format of an answer by its Content-Type value (case and parameters aside):
 * text/event-stream, application/x-ndjson or application/jsonl, application/json-seq.
 * Returns 1 and sets *format, or 0 for any other type.
 */
int stream_events_format_of(const char *content_type, size_t len,
    enum stream_events_format *format);

struct stream_events_counts {
	uint64_t rewritten;             /* events the ops changed */
	uint64_t passed;                /* events that went on as they came */
	uint64_t failed;                /* of those, events whose ops could not apply */
	uint64_t over;                  /* events over the size limit (passed, not held) */
};

struct stream_events;

/* Where the output goes: 0, or nonzero to stop (the feed returns it). */
typedef int (*stream_events_write_fn)(void *arg, const char *p, size_t len);

/* The output gathered per feed (up to 64 KB, a piece of 4 KB or more on its own), handed
 * over whole: p is from malloc and the taker's to free, even when it returns nonzero. */
typedef int (*stream_events_take_fn)(void *arg, char *p, size_t len);

/* Per worker: events of up to max_event bytes, ops within max_depth and max_members. */
struct stream_events *stream_events_new(size_t max_event, unsigned max_depth,
    size_t max_members);
void stream_events_free(struct stream_events *se);
/* Start an answer: its format, the route's events: ops and the request's variables (which
 * must outlive the answer).  The counts start at zero. */
void stream_events_start(struct stream_events *se, enum stream_events_format format,
    const struct rewrite_program *prog, enum validate_mode mode,
    const struct rewrite_vars *vars);
/* Take p[0..n) of the answer's body, writing every complete event.  Returns 0, -1 when out
 * of memory, or what write returned. */
int stream_events_feed(struct stream_events *se, const char *p, size_t n,
    stream_events_write_fn write, void *arg);
/* The answer's body has ended: write what is left as it came. */
int stream_events_finish(struct stream_events *se, stream_events_write_fn write, void *arg);
const struct stream_events_counts *stream_events_counts(const struct stream_events *se);
/* Batches of output go to take (with the feed's arg) rather than to the feed's write, which
 * still gets the large pieces; NULL: all to write.  Saves the copy of a batch. */
void stream_events_take_batches(struct stream_events *se, stream_events_take_fn take);
/* Events whose ops are all drop and set of top-level keys, without when:, are rewritten
 * without the engine when they are plainly valid, to the same bytes; off, every event goes
 * to the engine (tests compare the two).  On by default. */
void stream_events_fast(struct stream_events *se, int on);
/* Events of this answer the fast path decided. */
uint64_t stream_events_fast_events(const struct stream_events *se);
/* Of those, events whose head (the members before the first object or array) was laid out
 * as the last one's: read with one compare, not member by member. */
uint64_t stream_events_fast_heads(const struct stream_events *se);

#endif
