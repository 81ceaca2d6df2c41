/*
 * jsmn is stepped over the envelope only.  Before each step the scanner finds the next
 * bracket outside strings; jsmn is given the bytes up to it (keys and scalar values), and a
 * container found there is skipped by the scanner and handed to jsmn as a finished token.
 * jsmn's parser state is public and resumable, which is what makes this possible.  When the
 * token window is full, the complete key/value pairs in it become members and leave it
 * (jsmn scans its whole token array on every call: a growing array made many containers
 * quadratic).  jsmn accepts a lot that is not JSON, so each pair and the bytes between tokens
 * are checked as they leave: '{' key ':' value (',' key ':' value)* '}'.
 */
#include "envelope.h"
#include "jscan.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JSMN_STATIC
#define JSMN_STRICT
#define JSMN_PARENT_LINKS               /* keeps jsmn linear: no backward search per ',' */
#include <jsmn.h>

#define ENVELOPE_WINDOW 64              /* jsmn tokens at once: room for 31 members */
#define ENVELOPE_LONG_STRING 64         /* a string value this long is skipped by the scanner
                                         * and becomes a finished token, as containers do */

void
envelope_init(struct envelope *env)
{
	memset(env, 0, sizeof(*env));
	env->max_members = SIZE_MAX;
}

void
envelope_free(struct envelope *env)
{
	free(env->toks);
	free(env->members);
	memset(env, 0, sizeof(*env));
}

static inline int
envelope_is_ws(unsigned char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t
envelope_skip_ws(const char *buf, size_t len, size_t pos)
{
	while (pos < len && envelope_is_ws((unsigned char)buf[pos]))
		pos++;
	return pos;
}

int
envelope_is_number(const char *s, size_t len)
{
	size_t i = 0;

	if (i < len && s[i] == '-')
		i++;
	if (i >= len)
		return 0;
	if (s[i] == '0')
		i++;
	else if (s[i] >= '1' && s[i] <= '9')
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
	else
		return 0;
	if (i < len && s[i] == '.') {
		if (++i >= len || s[i] < '0' || s[i] > '9')
			return 0;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < len && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= len || s[i] < '0' || s[i] > '9')
			return 0;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return i == len;
}

int
envelope_is_primitive(const char *s, size_t len)
{
	switch (s[0]) {
	case 't':
		return len == 4 && memcmp(s, "true", 4) == 0;
	case 'f':
		return len == 5 && memcmp(s, "false", 5) == 0;
	case 'n':
		return len == 4 && memcmp(s, "null", 4) == 0;
	}
	return envelope_is_number(s, len);
}

/* End of the string at buf[pos]: short strings inline, long ones with the SIMD scanner. */
static ssize_t
envelope_string_end(const char *buf, size_t len, size_t pos)
{
	size_t i, lim = pos + 48 < len ? pos + 48 : len;

	for (i = pos + 1; i < lim; i++) {
		if (buf[i] == '"')
			return (ssize_t)i + 1;
		if (buf[i] == '\\')
			break;
	}
	return jscan_skip(buf, len, pos, 1);
}

/*
 * Next '{' '[' '}' ']' outside strings at or after pos, or the '"' of a long string (*send
 * then one past its end); len if none; -1 on a bad string.
 */
static ssize_t
envelope_next_bracket(const char *buf, size_t len, size_t pos, size_t *send)
{
	ssize_t e;

	while (pos < len) {
		switch (buf[pos]) {
		case '"':
			if ((e = envelope_string_end(buf, len, pos)) < 0)
				return -1;
			if ((size_t)e - pos >= ENVELOPE_LONG_STRING) {
				*send = (size_t)e;
				return (ssize_t)pos;
			}
			pos = (size_t)e;
			continue;
		case '{': case '[': case '}': case ']':
			return (ssize_t)pos;
		}
		pos++;
	}
	return (ssize_t)len;
}

/* Bytes between two tokens: whitespace around at most one expected separator. */
static int
envelope_gap(const char *buf, size_t from, size_t to, char sep)
{
	from = envelope_skip_ws(buf, to, from);
	if (sep != 0) {
		if (from >= to || buf[from] != sep)
			return -1;
		from = envelope_skip_ws(buf, to, from + 1);
	}
	return from == to ? 0 : -1;
}

static int
envelope_add_member(struct envelope *env, const struct envelope_member *m)
{
	struct envelope_member *grown;
	size_t n;

	if (env->nmembers >= env->max_members)
		return ENVELOPE_ERR_MEMBERS;
	env->nmembers++;
	if (env->member_cb != NULL)
		return env->member_cb(env->member_arg, m);
	if (env->nmembers > env->members_cap) {
		n = env->members_cap ? env->members_cap * 2 : 32;
		if ((grown = realloc(env->members, n * sizeof(*grown))) == NULL)
			return ENVELOPE_ERR_NOMEM;
		env->members = grown;
		env->members_cap = n;
	}
	env->members[env->nmembers - 1] = *m;
	return 0;
}

/*
 * Check the complete key/value pairs of the window and hand them on as members; what is left
 * (a key still waiting for its value) moves to the front.  *prev is where the last member's
 * value ended; at the closing brace (last) nothing may be left.
 */
static int
envelope_flush(struct envelope *env, const char *buf, jsmn_parser *p, size_t *prev, int last)
{
	jsmntok_t *toks = env->toks;
	const jsmntok_t *k, *v;
	struct envelope_member m;
	size_t vstart, vend;
	unsigned i;
	int r;

	for (i = 1; i + 1 < p->toknext; i += 2) {
		k = &toks[i];
		v = &toks[i + 1];
		if (k->type != JSMN_STRING || k->parent != 0 || k->size != 1 ||
		    v->parent != (int)i)
			return ENVELOPE_ERR_SYNTAX;
		if (envelope_gap(buf, *prev, (size_t)k->start - 1, env->nmembers == 0 ? 0 : ',') != 0)
			return ENVELOPE_ERR_SYNTAX;
		switch (v->type) {
		case JSMN_STRING:
			vstart = (size_t)v->start - 1;
			vend = (size_t)v->end + 1;
			m.type = ENVELOPE_STRING;
			break;
		case JSMN_PRIMITIVE:
			vstart = (size_t)v->start;
			vend = (size_t)v->end;
			m.type = ENVELOPE_PRIMITIVE;
			if (!envelope_is_primitive(buf + vstart, vend - vstart))
				return ENVELOPE_ERR_SYNTAX;
			break;
		case JSMN_OBJECT:
		case JSMN_ARRAY:
			vstart = (size_t)v->start;
			vend = (size_t)v->end;
			m.type = v->type == JSMN_OBJECT ? ENVELOPE_OBJECT : ENVELOPE_ARRAY;
			break;
		default:
			return ENVELOPE_ERR_SYNTAX;
		}
		if (envelope_gap(buf, (size_t)k->end + 1, vstart, ':') != 0)
			return ENVELOPE_ERR_SYNTAX;
		m.key = buf + k->start - 1;
		m.keylen = (size_t)(k->end - k->start) + 2;
		m.val = buf + vstart;
		m.vallen = vend - vstart;
		if ((r = envelope_add_member(env, &m)) != 0)
			return r;
		*prev = vend;
	}
	/* jsmn's current parent must be the object or the key that stays. */
	if (p->toksuper > 0 && (unsigned)p->toksuper != i)
		return ENVELOPE_ERR_SYNTAX;
	if (i < p->toknext) {
		if (last)
			return ENVELOPE_ERR_SYNTAX;
		toks[1] = toks[i];
		if (p->toksuper > 0)
			p->toksuper = 1;
	}
	p->toknext = 1 + (p->toknext - i);
	return 0;
}

/* The string s[0..n) (quotes included) as jsmn's strict mode checks one: only the escapes
 * of RFC 8259, and no NUL byte (where jsmn stops). */
static int
envelope_string_ok(const char *s, size_t n)
{
	const char *p = s + 1, *e = s + n - 1, *b;
	int i;

	if (memchr(p, '\0', (size_t)(e - p)) != NULL)
		return 0;
	while ((b = memchr(p, '\\', (size_t)(e - p))) != NULL) {
		switch (b[1]) {
		case '"': case '/': case '\\': case 'b': case 'f': case 'r': case 'n': case 't':
			p = b + 2;
			continue;
		case 'u':
			if (e - b < 6)
				return 0;
			for (i = 2; i < 6; i++)
				if (!((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f') ||
				    (b[i] >= 'A' && b[i] <= 'F')))
					return 0;
			p = b + 6;
			continue;
		default:
			return 0;
		}
	}
	return 1;
}

/* jsmn over buf up to jlen, the window flushed whenever it fills. */
static int
envelope_jsmn(struct envelope *env, const char *buf, jsmn_parser *p, size_t jlen, size_t *prev)
{
	int r;

	/* jsmn gives back NOMEM before taking the token: it resumes at that token. */
	while ((r = jsmn_parse(p, buf, jlen, env->toks, ENVELOPE_WINDOW)) == JSMN_ERROR_NOMEM)
		if ((r = envelope_flush(env, buf, p, prev, 0)) != 0)
			return r;
	if (r == JSMN_ERROR_INVAL || p->pos != jlen)
		return ENVELOPE_ERR_SYNTAX;
	return 0;
}

/* Hand jsmn the value [start, end) (a container or long string skipped by the scanner) as
 * one finished token of the member whose key it follows. */
static int
envelope_finished_token(struct envelope *env, const char *buf, jsmn_parser *p, jsmntype_t type,
    size_t start, size_t end, size_t *prev)
{
	jsmntok_t *t;
	int r;

	if (p->toknext >= ENVELOPE_WINDOW && (r = envelope_flush(env, buf, p, prev, 0)) != 0)
		return r;
	t = &((jsmntok_t *)env->toks)[p->toknext];
	t->type = type;
	/* jsmn's strings start and end inside their quotes */
	t->start = (int)start + (type == JSMN_STRING);
	t->end = (int)end - (type == JSMN_STRING);
	t->size = 0;
	t->parent = p->toksuper;
	((jsmntok_t *)env->toks)[p->toksuper].size++;
	p->toknext++;
	p->pos = (unsigned)end;
	return 0;
}

int
envelope_parse(struct envelope *env, const char *buf, size_t len, size_t pos,
    unsigned max_depth, size_t *end)
{
	jsmn_parser p;
	jsmntok_t *t;
	ssize_t stop, e;
	size_t jlen, send = 0, prev = pos + 1;
	int r, value;

	env->nmembers = 0;
	if (len > INT_MAX - 1 || pos >= len || buf[pos] != '{')
		return ENVELOPE_ERR_SYNTAX;
	if (max_depth < 1)
		return ENVELOPE_ERR_DEPTH;
	if (env->toks == NULL &&
	    (env->toks = malloc(ENVELOPE_WINDOW * sizeof(jsmntok_t))) == NULL)
		return ENVELOPE_ERR_NOMEM;
	jsmn_init(&p);
	p.pos = (unsigned)pos;
	stop = (ssize_t)pos;
	for (;;) {
		if ((stop = envelope_next_bracket(buf, len, (size_t)stop + 1, &send)) < 0 ||
		    (size_t)stop >= len)
			return ENVELOPE_ERR_SYNTAX;
		if (buf[stop] == '}' || buf[stop] == ']')
			jlen = (size_t)stop + 1;
		else if ((size_t)stop == pos)
			continue;
		else
			jlen = (size_t)stop;
		if ((r = envelope_jsmn(env, buf, &p, jlen, &prev)) != 0)
			return r;
		if (jlen == (size_t)stop + 1)
			break;
		/* What follows a key and its colon: jsmn's parent is that key, still alone. */
		t = env->toks;
		value = p.toksuper > 0 && t[p.toksuper].type == JSMN_STRING &&
		    t[p.toksuper].size == 0;
		if (buf[stop] == '"') {
			/* A long string: a value is skipped; anything else jsmn reads. */
			if (!value) {
				if ((r = envelope_jsmn(env, buf, &p, send, &prev)) != 0)
					return r;
			} else if (!envelope_string_ok(buf + stop, send - (size_t)stop) ||
			    (r = envelope_finished_token(env, buf, &p, JSMN_STRING, (size_t)stop,
			    send, &prev)) != 0) {
				return r != 0 ? r : ENVELOPE_ERR_SYNTAX;
			}
			stop = (ssize_t)send - 1;
			continue;
		}
		/* A container as a member's value: skip it, give jsmn one finished token. */
		if (!value)
			return ENVELOPE_ERR_SYNTAX;
		if ((e = jscan_skip(buf, len, (size_t)stop, max_depth - 1)) < 0)
			return e == JSCAN_ERR_DEPTH ? ENVELOPE_ERR_DEPTH : ENVELOPE_ERR_SYNTAX;
		if ((r = envelope_finished_token(env, buf, &p, buf[stop] == '{' ? JSMN_OBJECT :
		    JSMN_ARRAY, (size_t)stop, (size_t)e, &prev)) != 0)
			return r;
		stop = e - 1;
	}
	t = env->toks;
	if (p.toknext < 1 || t[0].type != JSMN_OBJECT || t[0].end != stop + 1)
		return ENVELOPE_ERR_SYNTAX;
	if ((r = envelope_flush(env, buf, &p, &prev, 1)) != 0)
		return r;
	if (envelope_gap(buf, prev, (size_t)stop, 0) != 0)
		return ENVELOPE_ERR_SYNTAX;
	*end = (size_t)stop + 1;
	return 0;
}

int
envelope_value_end(const char *buf, size_t len, size_t pos, unsigned max_depth,
    size_t *end, unsigned char *type)
{
	ssize_t e;
	size_t i;

	if (pos >= len)
		return ENVELOPE_ERR_SYNTAX;
	switch (buf[pos]) {
	case '{':
	case '[':
	case '"':
		if ((e = jscan_skip(buf, len, pos, max_depth)) < 0)
			return e == JSCAN_ERR_DEPTH ? ENVELOPE_ERR_DEPTH : ENVELOPE_ERR_SYNTAX;
		*end = (size_t)e;
		*type = (unsigned char)buf[pos];
		return 0;
	}
	for (i = pos; i < len; i++)
		if (envelope_is_ws((unsigned char)buf[i]) || buf[i] == ',' || buf[i] == ']' ||
		    buf[i] == '}')
			break;
	if (!envelope_is_primitive(buf + pos, i - pos))
		return ENVELOPE_ERR_SYNTAX;
	*end = i;
	*type = ENVELOPE_PRIMITIVE;
	return 0;
}

static int
envelope_hex4(const char *s, unsigned *out)
{
	unsigned v = 0, d;
	int i;

	for (i = 0; i < 4; i++) {
		char c = s[i];

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return -1;
		v = v << 4 | d;
	}
	*out = v;
	return 0;
}

/*
 * Decode the character or escape at *pp (before e) into tmp[0..*n) and step past it: a
 * surrogate pair is one character, a lone surrogate its own three bytes.  -1 on a bad escape.
 */
static int
envelope_string_unit(const char **pp, const char *e, unsigned char tmp[4], size_t *n)
{
	const char *p = *pp;
	unsigned cp, lo;

	if (*p != '\\') {
		tmp[0] = (unsigned char)*p;
		*n = 1;
		*pp = p + 1;
		return 0;
	}
	if (e - p < 2)
		return -1;
	*n = 1;
	switch (p[1]) {
	case '"': case '\\': case '/':
		tmp[0] = (unsigned char)p[1]; *pp = p + 2; return 0;
	case 'b': tmp[0] = '\b'; *pp = p + 2; return 0;
	case 'f': tmp[0] = '\f'; *pp = p + 2; return 0;
	case 'n': tmp[0] = '\n'; *pp = p + 2; return 0;
	case 'r': tmp[0] = '\r'; *pp = p + 2; return 0;
	case 't': tmp[0] = '\t'; *pp = p + 2; return 0;
	case 'u':
		break;
	default:
		return -1;
	}
	if (e - p < 6 || envelope_hex4(p + 2, &cp) != 0)
		return -1;
	p += 6;
	if (cp >= 0xd800 && cp <= 0xdbff && e - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
	    envelope_hex4(p + 2, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		p += 6;
	}
	*pp = p;
	if (cp < 0x80) {
		tmp[0] = (unsigned char)cp;
	} else if (cp < 0x800) {
		tmp[0] = (unsigned char)(0xc0 | cp >> 6);
		tmp[1] = (unsigned char)(0x80 | (cp & 0x3f)); *n = 2;
	} else if (cp < 0x10000) {
		tmp[0] = (unsigned char)(0xe0 | cp >> 12);
		tmp[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[2] = (unsigned char)(0x80 | (cp & 0x3f)); *n = 3;
	} else {
		tmp[0] = (unsigned char)(0xf0 | cp >> 18);
		tmp[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		tmp[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[3] = (unsigned char)(0x80 | (cp & 0x3f)); *n = 4;
	}
	return 0;
}

/* name[0..nlen) equals the decoded string s, or with prefix only begins it. */
static int
envelope_string_match(const char *s, size_t len, const char *name, size_t nlen, int prefix)
{
	const char *p = s + 1, *e = s + len - 1;
	unsigned char tmp[4];
	size_t j = 0, n;

	if (len < 2)
		return 0;
	if (memchr(p, '\\', (size_t)(e - p)) == NULL) {
		if (prefix)
			return (size_t)(e - p) >= nlen && memcmp(p, name, nlen) == 0;
		return (size_t)(e - p) == nlen && memcmp(p, name, nlen) == 0;
	}
	while (p < e) {
		if (prefix && j == nlen)
			return 1;
		if (envelope_string_unit(&p, e, tmp, &n) != 0 || j + n > nlen ||
		    memcmp(name + j, tmp, n) != 0)
			return 0;
		j += n;
	}
	return j == nlen;
}

int
envelope_string_decode(const char *s, size_t len, char *out, size_t *out_len)
{
	const char *p = s + 1, *e = s + len - 1;
	unsigned char tmp[4];
	size_t j = 0, n;

	if (len < 2)
		return -1;
	while (p < e) {
		if (envelope_string_unit(&p, e, tmp, &n) != 0)
			return -1;
		memcpy(out + j, tmp, n);
		j += n;
	}
	*out_len = j;
	return 0;
}

int
envelope_string_eq(const char *s, size_t len, const char *name, size_t nlen)
{
	return envelope_string_match(s, len, name, nlen, 0);
}

int
envelope_string_prefix(const char *s, size_t len, const char *prefix, size_t plen)
{
	return envelope_string_match(s, len, prefix, plen, 1);
}
