/*
 * A field of a JSON object whose text may be cut short.  Routing reads only the first bytes of
 * a request body, and must tell a field that is there (found), one that is not (its object
 * closed without it) and one it cannot know yet (the bytes end first).  Members are walked
 * with the envelope engine's pieces: each value off the path is skipped whole by the scanner,
 * nothing is tokenized, so a look costs one linear pass over the bytes it reads.
 *
 * The first occurrence of a key decides: a later duplicate may lie beyond any bytes a decision
 * can wait for (jcond_find, which sees whole texts, keeps the last).
 */
#ifndef JG_JPREFIX_H
#define JG_JPREFIX_H

#include <stddef.h>

#include "jcond.h"

/* Most keys in a dotted path read from a prefix (the segments live on the stack). */
#define JPREFIX_MAX_PATH 32

enum jprefix_result {
	JPREFIX_FOUND = 1,
	JPREFIX_ABSENT = 0,             /* an object on the path closed without its key, a value
	                                 * on the path is no object, or the text is no object */
	JPREFIX_MORE = -1,              /* the bytes end before it is known */
	JPREFIX_INVALID = -2            /* not JSON where it was read */
};

/*
 * Look up the nseg keys of path in buf[0..len), the start of a JSON text; complete says the
 * text ends there (MORE is then never returned).  FOUND sets *json, *vlen and *type (an enum
 * envelope_type) to the value, which is complete; with whole 0 an object or array is found as
 * soon as its first byte is there, and *vlen is then 1.
 */
int jprefix_find(const char *buf, size_t len, int complete, unsigned max_depth, int whole,
    const struct jcond_seg *path, size_t nseg, const char **json, size_t *vlen,
    unsigned char *type);

/*
 * "user.id" -> its keys, pointing into s (nothing is copied).  Returns the number of keys, or
 * 0 for an empty key or more than JPREFIX_MAX_PATH of them.
 */
size_t jprefix_path(const char *s, size_t len, struct jcond_seg segs[JPREFIX_MAX_PATH]);

/*
 * Evaluate c (without status tests) on the prefix buf[0..len): 1 or 0 when the bytes decide
 * it, JPREFIX_MORE when they do not yet, JPREFIX_INVALID when a field it reads lies past
 * bytes that are not JSON.  No test reads more of an object or array than its first byte.
 */
int jprefix_eval(const struct jcond *c, const char *buf, size_t len, int complete,
    unsigned max_depth);

#endif
