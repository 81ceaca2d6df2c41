/*
 * Envelope ops on a JSON body while it streams, for bodies larger than memory.  The ops that
 * can stream are: `unwrap` (first), then `drop`, `rename`, `keep` and `set` of top-level
 * keys, then `wrap` (last), with no `when:` but on the status (decided at the start).
 * `validate: full` is checked as the body streams, each chunk before any of it goes out.
 * The outer object is scanned as it comes, keeping only the current key and the whitespace
 * before it: inner values pass through as they stream, however large, and the output is
 * exactly the bytes the buffered engine (rewrite_apply) gives for the same body, or an
 * error where it fails.
 *
 * What needs a later part of the body fails as a look-ahead error: a duplicate of the key
 * `unwrap` took (the buffered engine takes the last), a key that `rename` replaces coming
 * before the one renamed to it.  Whether an object with whitespace inside its braces is
 * changed at all (unchanged, it keeps that whitespace) is looked ahead for within max_hold
 * bytes; past that it goes out as it came, and a change found later is a look-ahead error.
 */
#ifndef JG_STREAM_ENVELOPE_H
#define JG_STREAM_ENVELOPE_H

#include <stddef.h>

#include "rewrite.h"

enum stream_envelope_err {
	STREAM_ENVELOPE_INVALID = -1,   /* the body is not JSON (as the buffered engine checks) */
	STREAM_ENVELOPE_OPS = -2,       /* the ops cannot apply: unwrap key not found, a body
	                                 * that is not an object */
	STREAM_ENVELOPE_LOOKAHEAD = -3, /* needs more of the body than max_hold to decide */
	STREAM_ENVELOPE_DEPTH = -4,     /* nesting over max_depth */
	STREAM_ENVELOPE_MEMBERS = -5,   /* more members than max_members */
	STREAM_ENVELOPE_NOMEM = -6,
	STREAM_ENVELOPE_WRITE = -7      /* the write function failed */
};

struct stream_envelope;

/* Where the output goes: 0, or nonzero to fail the stream (STREAM_ENVELOPE_WRITE). */
typedef int (*stream_envelope_write_fn)(void *arg, const char *p, size_t len);

/*
 * 1 when prog can be applied while the body streams in mode (either); else 0 and *why says
 * which op cannot (a static string).  A NULL or empty program streams (the body passes,
 * checked).
 */
int stream_envelope_can(const struct rewrite_program *prog, enum validate_mode mode,
    const char **why);

/* Per worker; max_hold bounds what one body may hold back (keys, whitespace, a number). */
struct stream_envelope *stream_envelope_new(size_t max_hold);
void stream_envelope_free(struct stream_envelope *se);

/*
 * Start a body: prog (which stream_envelope_can accepts), the route's validate mode and the
 * limits of the buffered engine, the request's variables for set values (read now) and where
 * the output goes.  Returns 0, or an enum stream_envelope_err.
 */
int stream_envelope_start(struct stream_envelope *se, const struct rewrite_program *prog,
    enum validate_mode mode, unsigned max_depth, size_t max_members,
    const struct rewrite_vars *vars, stream_envelope_write_fn write, void *arg);
/*
 * Take p[0..n) of the body.  Returns 0, or an enum stream_envelope_err, after which the
 * body's answer must be aborted if stream_envelope_written says output has gone out (else
 * the caller may still follow on_error with the body it kept).
 */
int stream_envelope_feed(struct stream_envelope *se, const char *p, size_t n);
/* The body has ended: the last of the output, or the error of a body cut short. */
int stream_envelope_finish(struct stream_envelope *se);

/* Bytes written so far. */
size_t stream_envelope_written(const struct stream_envelope *se);
/* Why the last error happened (a static string), NULL when none. */
const char *stream_envelope_error(const struct stream_envelope *se);

#endif
