/*
 * jsmn is stepped over the envelope only.  Before each step the scanner finds the next
 * bracket outside strings; jsmn is given the bytes up to it (keys and scalar values), and a
 * container found there is skipped by the scanner and handed to jsmn as a finished token.
 * jsmn's parser state is public and resumable, which is what makes this possible.  jsmn
 * accepts a lot that is not JSON, so the token sequence and the bytes between tokens are
 * checked afterwards: '{' key ':' value (',' key ':' value)* '}'.
 */
#include "envelope.h"
#include "jscan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define JSMN_STATIC
#define JSMN_STRICT
#define JSMN_PARENT_LINKS               /* keeps jsmn linear: no backward search per ',' */
#include <jsmn.h>

void
envelope_init(struct envelope *env)
{
	memset(env, 0, sizeof(*env));
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

/* Next '{' '[' '}' ']' outside strings at or after pos; len if none; -1 on a bad string. */
static ssize_t
envelope_next_bracket(const char *buf, size_t len, size_t pos)
{
	ssize_t e;

	while (pos < len) {
		switch (buf[pos]) {
		case '"':
			if ((e = envelope_string_end(buf, len, pos)) < 0)
				return -1;
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
envelope_grow_toks(struct envelope *env, size_t need)
{
	size_t n = env->ntoks ? env->ntoks : 64;
	void *p;

	while (n < need)
		n *= 2;
	if (n == env->ntoks)
		return 0;
	if ((p = realloc(env->toks, n * sizeof(jsmntok_t))) == NULL)
		return -1;
	env->toks = p;
	env->ntoks = n;
	return 0;
}

static int
envelope_add_member(struct envelope *env, const char *buf, const jsmntok_t *k,
    size_t vstart, size_t vend, unsigned char type)
{
	struct envelope_member *m;
	size_t n;

	if (env->nmembers == env->members_cap) {
		n = env->members_cap ? env->members_cap * 2 : 32;
		if ((m = realloc(env->members, n * sizeof(*m))) == NULL)
			return -1;
		env->members = m;
		env->members_cap = n;
	}
	m = &env->members[env->nmembers++];
	m->key = buf + k->start - 1;
	m->keylen = (size_t)(k->end - k->start) + 2;
	m->val = buf + vstart;
	m->vallen = vend - vstart;
	m->type = type;
	return 0;
}

/* Check the token sequence and the separators between tokens; fill the member list. */
static int
envelope_members(struct envelope *env, const char *buf, size_t pos, size_t close,
    unsigned ntok)
{
	const jsmntok_t *toks = env->toks, *k, *v;
	size_t prev = pos + 1, vstart, vend;
	unsigned i;
	unsigned char type;

	env->nmembers = 0;
	for (i = 1; i < ntok; i += 2) {
		k = &toks[i];
		if (k->type != JSMN_STRING || k->parent != 0 || k->size != 1 || i + 1 >= ntok)
			return ENVELOPE_ERR_SYNTAX;
		if (envelope_gap(buf, prev, (size_t)k->start - 1, i == 1 ? 0 : ',') != 0)
			return ENVELOPE_ERR_SYNTAX;
		v = &toks[i + 1];
		if (v->parent != (int)i)
			return ENVELOPE_ERR_SYNTAX;
		switch (v->type) {
		case JSMN_STRING:
			vstart = (size_t)v->start - 1;
			vend = (size_t)v->end + 1;
			type = ENVELOPE_STRING;
			break;
		case JSMN_PRIMITIVE:
			vstart = (size_t)v->start;
			vend = (size_t)v->end;
			type = ENVELOPE_PRIMITIVE;
			if (!envelope_is_primitive(buf + vstart, vend - vstart))
				return ENVELOPE_ERR_SYNTAX;
			break;
		case JSMN_OBJECT:
		case JSMN_ARRAY:
			vstart = (size_t)v->start;
			vend = (size_t)v->end;
			type = v->type == JSMN_OBJECT ? ENVELOPE_OBJECT : ENVELOPE_ARRAY;
			break;
		default:
			return ENVELOPE_ERR_SYNTAX;
		}
		if (envelope_gap(buf, (size_t)k->end + 1, vstart, ':') != 0)
			return ENVELOPE_ERR_SYNTAX;
		if (envelope_add_member(env, buf, k, vstart, vend, type) != 0)
			return ENVELOPE_ERR_NOMEM;
		prev = vend;
	}
	if (envelope_gap(buf, prev, close, 0) != 0)
		return ENVELOPE_ERR_SYNTAX;
	return 0;
}

int
envelope_parse(struct envelope *env, const char *buf, size_t len, size_t pos,
    unsigned max_depth, size_t *end)
{
	jsmn_parser p;
	jsmntok_t *t;
	ssize_t stop, e;
	size_t jlen;
	int r;

	env->nmembers = 0;
	if (len > INT_MAX - 1 || pos >= len || buf[pos] != '{')
		return ENVELOPE_ERR_SYNTAX;
	if (max_depth < 1)
		return ENVELOPE_ERR_DEPTH;
	if (env->ntoks < 2 && envelope_grow_toks(env, 64) != 0)
		return ENVELOPE_ERR_NOMEM;
	jsmn_init(&p);
	p.pos = (unsigned)pos;
	stop = (ssize_t)pos;
	for (;;) {
		if ((stop = envelope_next_bracket(buf, len, (size_t)stop + 1)) < 0 ||
		    (size_t)stop >= len)
			return ENVELOPE_ERR_SYNTAX;
		if (buf[stop] == '}' || buf[stop] == ']')
			jlen = (size_t)stop + 1;
		else if ((size_t)stop == pos)
			continue;
		else
			jlen = (size_t)stop;
		while ((r = jsmn_parse(&p, buf, jlen, env->toks, (unsigned)env->ntoks)) ==
		    JSMN_ERROR_NOMEM)
			if (envelope_grow_toks(env, env->ntoks * 2) != 0)
				return ENVELOPE_ERR_NOMEM;
		if (r == JSMN_ERROR_INVAL || p.pos != jlen)
			return ENVELOPE_ERR_SYNTAX;
		if (jlen == (size_t)stop + 1)
			break;
		/* A container as a member's value: skip it, give jsmn one finished token. */
		t = env->toks;
		if (p.toksuper <= 0 || t[p.toksuper].type != JSMN_STRING ||
		    t[p.toksuper].size != 0)
			return ENVELOPE_ERR_SYNTAX;
		if ((e = jscan_skip(buf, len, (size_t)stop, max_depth - 1)) < 0)
			return e == JSCAN_ERR_DEPTH ? ENVELOPE_ERR_DEPTH : ENVELOPE_ERR_SYNTAX;
		if (p.toknext >= env->ntoks && envelope_grow_toks(env, env->ntoks * 2) != 0)
			return ENVELOPE_ERR_NOMEM;
		t = &((jsmntok_t *)env->toks)[p.toknext];
		t->type = buf[stop] == '{' ? JSMN_OBJECT : JSMN_ARRAY;
		t->start = (int)stop;
		t->end = (int)e;
		t->size = 0;
		t->parent = p.toksuper;
		((jsmntok_t *)env->toks)[p.toksuper].size++;
		p.toknext++;
		p.pos = (unsigned)e;
		stop = e - 1;
	}
	t = env->toks;
	if (p.toknext < 1 || t[0].type != JSMN_OBJECT || t[0].end != stop + 1)
		return ENVELOPE_ERR_SYNTAX;
	*end = (size_t)stop + 1;
	return envelope_members(env, buf, pos, (size_t)stop, p.toknext);
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

int
envelope_string_eq(const char *s, size_t len, const char *name, size_t nlen)
{
	const char *p = s + 1, *e = s + len - 1;
	unsigned char tmp[4];
	unsigned cp, lo;
	size_t j = 0, n;

	if (len < 2)
		return 0;
	if (memchr(p, '\\', (size_t)(e - p)) == NULL)
		return (size_t)(e - p) == nlen && memcmp(p, name, nlen) == 0;
	while (p < e) {
		if (*p != '\\') {
			if (j >= nlen || name[j++] != *p++)
				return 0;
			continue;
		}
		if (e - p < 2)
			return 0;
		switch (p[1]) {
		case '"': case '\\': case '/':
			tmp[0] = (unsigned char)p[1]; n = 1; p += 2; break;
		case 'b': tmp[0] = '\b'; n = 1; p += 2; break;
		case 'f': tmp[0] = '\f'; n = 1; p += 2; break;
		case 'n': tmp[0] = '\n'; n = 1; p += 2; break;
		case 'r': tmp[0] = '\r'; n = 1; p += 2; break;
		case 't': tmp[0] = '\t'; n = 1; p += 2; break;
		case 'u':
			if (e - p < 6 || envelope_hex4(p + 2, &cp) != 0)
				return 0;
			p += 6;
			if (cp >= 0xd800 && cp <= 0xdbff && e - p >= 6 && p[0] == '\\' &&
			    p[1] == 'u' && envelope_hex4(p + 2, &lo) == 0 &&
			    lo >= 0xdc00 && lo <= 0xdfff) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				p += 6;
			}
			if (cp < 0x80) {
				tmp[0] = (unsigned char)cp; n = 1;
			} else if (cp < 0x800) {
				tmp[0] = (unsigned char)(0xc0 | cp >> 6);
				tmp[1] = (unsigned char)(0x80 | (cp & 0x3f)); n = 2;
			} else if (cp < 0x10000) {
				tmp[0] = (unsigned char)(0xe0 | cp >> 12);
				tmp[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
				tmp[2] = (unsigned char)(0x80 | (cp & 0x3f)); n = 3;
			} else {
				tmp[0] = (unsigned char)(0xf0 | cp >> 18);
				tmp[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
				tmp[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
				tmp[3] = (unsigned char)(0x80 | (cp & 0x3f)); n = 4;
			}
			break;
		default:
			return 0;
		}
		if (j + n > nlen || memcmp(name + j, tmp, n) != 0)
			return 0;
		j += n;
	}
	return j == nlen;
}
