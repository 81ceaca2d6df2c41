/*
 * Linear-time skip scanner: from the first byte of a JSON string, object or array, find the
 * byte after its end without tokenizing anything.  Strings and brackets must balance ({ with },
 * [ with ]); nothing else is checked.  No recursion, no allocation.
 */
#ifndef JG_JSCAN_H
#define JG_JSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JSCAN_MAX_DEPTH 16384           /* larger depth limits are clamped to this */

enum jscan_err {
	JSCAN_ERR_SYNTAX = -1,          /* unterminated, unbalanced, or not a string/container */
	JSCAN_ERR_DEPTH = -2            /* nesting deeper than max_depth */
};

enum jscan_impl { JSCAN_SCALAR, JSCAN_SSE2, JSCAN_AVX2, JSCAN_AVX512, JSCAN_NIMPL };

/*
 * Skip the string or container starting at buf[pos] (a '"', '{' or '[').  The value itself
 * counts as depth 1.  Returns the offset one past its last byte, or a JSCAN_ERR_*.
 */
ssize_t jscan_skip(const char *buf, size_t len, size_t pos, unsigned max_depth);

/* The same with a chosen implementation (tests, benchmarks); -1 if the CPU lacks it. */
ssize_t jscan_skip_impl(enum jscan_impl impl, const char *buf, size_t len, size_t pos,
    unsigned max_depth);

/*
 * jscan_skip for a value that must lie within one line (an SSE data line read before its
 * end is known): a CR or LF before the value's end makes it JSCAN_ERR_SYNTAX, found in the
 * same pass.  Bytes after the end are not looked at.
 */
ssize_t jscan_skip_line(const char *buf, size_t len, size_t pos, unsigned max_depth);
ssize_t jscan_skip_line_impl(enum jscan_impl impl, const char *buf, size_t len, size_t pos,
    unsigned max_depth);
int jscan_impl_available(enum jscan_impl impl);
/* Make jscan_skip use impl from now on, in every thread (tests, fuzzers); -1 if the CPU
 * lacks it.  By default it uses jscan_impl_best(). */
int jscan_use(enum jscan_impl impl);
/* The implementation jscan_skip uses on this CPU, and its name. */
enum jscan_impl jscan_impl_best(void);
const char *jscan_impl_name(enum jscan_impl impl);

/*
 * The same skip over a value that comes in pieces (a body as it streams): the state carried
 * from piece to piece.  Each piece is scanned in 64-byte blocks like jscan_skip and its last
 * bytes one by one, with the same rules.
 */
struct jscan_stream {
	uint64_t esc_carry;             /* 1: the next byte is escaped */
	uint64_t in_string;             /* all ones while inside a string */
	unsigned depth;
	unsigned max_depth;
	int squares;                    /* ']' minus '[' so far */
};

#define JSCAN_MORE (-3)                 /* the value goes on past the piece */

/* The value began with c ('"', '{' or '[', taken already).  0, or JSCAN_ERR_DEPTH. */
int jscan_stream_start(struct jscan_stream *st, char c, unsigned max_depth);
/* The next piece of the value: the offset one past its end in buf, JSCAN_MORE, or a
 * JSCAN_ERR_*. */
ssize_t jscan_stream_feed(struct jscan_stream *st, const char *buf, size_t len);

#endif
