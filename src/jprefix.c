/*
 * The walk keeps one position and the level on the path.  At each member the key is compared
 * decoded; a value off the path is skipped with envelope_value_end (containers and strings by
 * the SIMD scanner), the path's next object is entered without skipping it, so a field is
 * found however large the rest of its object is.
 */
#include "jprefix.h"
#include "envelope.h"

#include <stdint.h>
#include <string.h>

/* What running out of bytes means: more may come, or the text is cut short. */
static int
jprefix_short(int complete)
{
	return complete ? JPREFIX_INVALID : JPREFIX_MORE;
}

/*
 * The end of the value at buf[pos] (pos < len): 1 with *end and *type when it is complete in
 * buf, or a jprefix_result.  A scanner failure is a value cut short unless the text is
 * complete (the scanner does not say which); a number or literal running to the end of the
 * bytes may go on in the next ones.
 */
static int
jprefix_value(const char *buf, size_t len, size_t pos, int complete, unsigned depth,
    size_t *end, unsigned char *type)
{
	size_t i;
	int r;

	if (buf[pos] == '{' || buf[pos] == '[' || buf[pos] == '"') {
		r = envelope_value_end(buf, len, pos, depth, end, type);
		if (r == ENVELOPE_ERR_DEPTH)
			return JPREFIX_INVALID;
		return r == 0 ? 1 : jprefix_short(complete);
	}
	for (i = pos; i < len; i++)
		if (memchr(" \t\r\n,]}", buf[i], 7) != NULL)
			break;
	if (i == len && !complete)
		return JPREFIX_MORE;
	if (!envelope_is_primitive(buf + pos, i - pos))
		return JPREFIX_INVALID;
	*end = i;
	*type = ENVELOPE_PRIMITIVE;
	return 1;
}

int
jprefix_find(const char *buf, size_t len, int complete, unsigned max_depth, int whole,
    const struct jcond_seg *path, size_t nseg, const char **json, size_t *vlen,
    unsigned char *type)
{
	size_t pos = envelope_skip_ws(buf, len, 0), key, end;
	unsigned level = 0;
	unsigned char t;
	int r;

	*type = 0;
	if (pos == len)
		return jprefix_short(complete);
	if (buf[pos] != '{')
		return memchr("[\"-0123456789tfn", buf[pos], 16) != NULL ? JPREFIX_ABSENT :
		    JPREFIX_INVALID;
	if (nseg == 0)
		return JPREFIX_ABSENT;
	for (;;) {
		/* buf[pos] opens the object at this level of the path. */
		if (level >= max_depth)
			return JPREFIX_INVALID;
		if ((pos = envelope_skip_ws(buf, len, pos + 1)) == len)
			return jprefix_short(complete);
		if (buf[pos] == '}')
			return JPREFIX_ABSENT;
		for (;;) {
			if (buf[pos] != '"')
				return JPREFIX_INVALID;
			if ((r = jprefix_value(buf, len, pos, complete, 1, &end, &t)) != 1)
				return r;
			key = pos;
			if ((pos = envelope_skip_ws(buf, len, end)) == len)
				return jprefix_short(complete);
			if (buf[pos] != ':')
				return JPREFIX_INVALID;
			if ((pos = envelope_skip_ws(buf, len, pos + 1)) == len)
				return jprefix_short(complete);
			if (envelope_string_eq(buf + key, end - key, path[level].name,
			    path[level].len))
				break;
			if ((r = jprefix_value(buf, len, pos, complete, max_depth - level - 1,
			    &end, &t)) != 1)
				return r;
			if ((pos = envelope_skip_ws(buf, len, end)) == len)
				return jprefix_short(complete);
			if (buf[pos] == '}')
				return JPREFIX_ABSENT;
			if (buf[pos] != ',')
				return JPREFIX_INVALID;
			if ((pos = envelope_skip_ws(buf, len, pos + 1)) == len)
				return jprefix_short(complete);
		}
		/* The key is on the path: its first occurrence decides. */
		if (++level < nseg) {
			if (buf[pos] != '{')
				return memchr("[\"-0123456789tfn", buf[pos], 16) != NULL ?
				    JPREFIX_ABSENT : JPREFIX_INVALID;
			continue;
		}
		if (!whole && (buf[pos] == '{' || buf[pos] == '[')) {
			end = pos + 1;
			t = (unsigned char)buf[pos];
		} else if ((r = jprefix_value(buf, len, pos, complete, max_depth - level, &end,
		    &t)) != 1) {
			return r;
		}
		*json = buf + pos;
		*vlen = end - pos;
		*type = t;
		return JPREFIX_FOUND;
	}
}

size_t
jprefix_path(const char *s, size_t len, struct jcond_seg segs[JPREFIX_MAX_PATH])
{
	const char *end = s + len, *dot;
	size_t n = 0;

	for (;;) {
		if ((dot = memchr(s, '.', (size_t)(end - s))) == NULL)
			dot = end;
		if (dot == s || n == JPREFIX_MAX_PATH)
			return 0;
		segs[n].name = (char *)(uintptr_t)s;
		segs[n++].len = (size_t)(dot - s);
		if (dot == end)
			return n;
		s = dot + 1;
	}
}

struct jprefix_text {
	const char *buf;
	size_t len;
	int complete;
	unsigned max_depth;
	int result;                     /* the first lookup that could not answer */
};

static int
jprefix_lookup(void *arg, const struct jcond_seg *path, size_t nseg, const char **json,
    size_t *len, unsigned char *type)
{
	struct jprefix_text *t = arg;
	int r = jprefix_find(t->buf, t->len, t->complete, t->max_depth, 0, path, nseg, json,
	    len, type);

	if (r >= 0)
		return 0;
	t->result = r;
	return -1;
}

int
jprefix_eval(const struct jcond *c, const char *buf, size_t len, int complete,
    unsigned max_depth)
{
	struct jprefix_text t = { buf, len, complete, max_depth, JPREFIX_INVALID };
	int r = jcond_eval_lookup(c, jprefix_lookup, &t, 0);

	return r < 0 ? t.result : r;
}
