/*
 * An incremental text/event-stream parser (the WHATWG event-stream rules): fed chunks cut
 * anywhere, it hands on each event once its blank line has come, with its bytes as received,
 * its lines and its data joined with "\n".  An event over the size limit is never held: its
 * bytes go on as they come, marked over the limit.  The parser's buffers are reused from
 * event to event.
 */
#ifndef JG_SSE_H
#define JG_SSE_H

#include <stddef.h>

#include "rewrite.h"

enum sse_line_kind {
	SSE_LINE_DATA, SSE_LINE_EVENT, SSE_LINE_ID, SSE_LINE_RETRY, SSE_LINE_COMMENT,
	SSE_LINE_OTHER                  /* a field the rules ignore */
};

/* One line of an event; offsets are into the event's raw bytes. */
struct sse_line {
	size_t off;                     /* first byte (after a stream's byte order mark) */
	size_t len;                     /* without its line end */
	size_t value;                   /* where the value starts in the line (after "name:" and
	                                 * one space); len when there is none */
	unsigned char term;             /* bytes of its line end: 1 (CR or LF) or 2 (CRLF) */
	unsigned char kind;             /* enum sse_line_kind */
	unsigned char colon;            /* the line has a colon after its field name */
};

enum sse_kind {
	SSE_EVENT,                      /* a whole event, its blank line included */
	SSE_OVER,                       /* a piece of an event over the limit: pass it on */
	SSE_RAW                         /* bytes of no event (the LF of a CRLF cut after its CR,
	                                 * an unfinished event at the end): pass them on */
};

struct sse_event {
	enum sse_kind kind;
	const char *raw;                /* the bytes as received */
	size_t raw_len;
	/* SSE_EVENT: */
	const struct sse_line *lines;   /* in order; the blank line that ends it is not one */
	size_t nlines;
	const char *data;               /* the data lines' values joined with "\n"; NULL when
	                                 * the event has no data line */
	size_t data_len;
	size_t ndata;                   /* data lines */
	/* SSE_OVER: */
	int first;                      /* the first piece of this event: count it once */
	int last;                       /* the piece that ends it */
};

struct sse_parser;

/* Called for each event or piece; a nonzero return stops sse_feed with that value. */
typedef int (*sse_cb)(void *arg, const struct sse_event *ev);

/* A parser holding events of up to max_event bytes, the line end of their blank line not
 * counted (so that where a CRLF is cut does not matter). */
struct sse_parser *sse_parser_new(size_t max_event);
void sse_parser_free(struct sse_parser *sp);
/* Start a new stream, keeping the buffers. */
void sse_parser_reset(struct sse_parser *sp);

/* Look for line ends with AVX-512 where the CPU has it (on, the default) or with memchr
 * (off), in every thread (tests compare the two). */
void sse_parser_simd(int on);

/*
 * An event that is one "data:" line and its blank line, with LF line ends, may be taken
 * whole before its line ends are sought, by a hook that finds them in the same pass as it
 * reads the value.  It is called at the start of such an event in the chunk, the parser
 * between events, with the bytes from the event's start (avail of them: no more than the
 * chunk holds, nor than max_event + 1) and the offset of the value (after "data:" and one
 * space).  It takes the event, setting *taken to its length with both LFs and having passed
 * it on itself, or leaves it (*taken 0) to the parser; it returns 0, or nonzero to stop the
 * feed with that value.  cb's arg is its arg.
 */
typedef int (*sse_data_line_fn)(void *arg, const char *raw, size_t value, size_t avail,
    size_t *taken);
void sse_parser_data_line(struct sse_parser *sp, sse_data_line_fn fn);

/* Parse p[0..n).  Returns 0, -1 when out of memory, or what cb returned. */
int sse_feed(struct sse_parser *sp, const char *p, size_t n, sse_cb cb, void *arg);
/* The stream has ended: what is left of an unfinished event goes to cb as SSE_RAW (the rules
 * drop an event without its blank line; a proxy passes the bytes on). */
int sse_finish(struct sse_parser *sp, sse_cb cb, void *arg);

/* Where sse_event_write puts its bytes: 0, or nonzero to stop. */
typedef int (*sse_write_fn)(void *arg, const char *p, size_t len);

/*
 * Write the SSE_EVENT ev with a new data value (the spans, in order) in place of its data
 * lines: every other line as it came, in order, and the data as one "data:" line where the
 * first data line was (its "data:" or "data: " kept).  A line end inside the value (only
 * whitespace of JSON can hold one) starts another data line, so that the data still joins to
 * the value.  Returns 0 or what write returned.
 */
int sse_event_write(const struct sse_event *ev, const struct rewrite_span *data, size_t n,
    sse_write_fn write, void *arg);

#endif
