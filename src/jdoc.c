#include "jdoc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSMN_STATIC
#define JSMN_STRICT
#define JSMN_PARENT_LINKS
#include <jsmn.h>

#include "jvalid.h"

#define JDOC_MAX_DEPTH 64

int
jdoc_parse(struct jdoc *d, const char *buf, size_t len, int max_tokens)
{
	jsmn_parser p;
	jsmntok_t *t;
	int i, n;

	memset(d, 0, sizeof(*d));
	if (len == 0 || len > INT32_MAX || max_tokens < 1 ||
	    jvalid_check(buf, len, JDOC_MAX_DEPTH, NULL) != JVALID_OK)
		return -1;
	jsmn_init(&p);
	if ((n = jsmn_parse(&p, buf, len, NULL, 0)) < 1 || n > max_tokens)
		return -1;
	if ((t = calloc((size_t)n, sizeof(*t))) == NULL)
		return -1;
	jsmn_init(&p);
	if (jsmn_parse(&p, buf, len, t, (unsigned)n) != n || t[0].type != JSMN_OBJECT ||
	    (d->toks = calloc((size_t)n, sizeof(*d->toks))) == NULL) {
		free(t);
		return -1;
	}
	for (i = 0; i < n; i++) {
		d->toks[i].type = t[i].type == JSMN_OBJECT ? JDOC_OBJECT :
		    t[i].type == JSMN_ARRAY ? JDOC_ARRAY :
		    t[i].type == JSMN_STRING ? JDOC_STRING : JDOC_PRIMITIVE;
		d->toks[i].start = t[i].start;
		d->toks[i].end = t[i].end;
		d->toks[i].size = t[i].size;
	}
	free(t);
	d->buf = buf;
	d->len = len;
	d->ntoks = n;
	return 0;
}

void
jdoc_free(struct jdoc *d)
{
	free(d->toks);
	memset(d, 0, sizeof(*d));
}

int
jdoc_skip(const struct jdoc *d, int i)
{
	int end = d->toks[i].end;

	/* Tokens come in the order they start: the next one starting past the end is the
	 * next sibling.  A string's end is inside its closing quote. */
	for (i++; i < d->ntoks && d->toks[i].start < end; i++)
		;
	return i;
}

int
jdoc_member(const struct jdoc *d, int obj, const char *key)
{
	int i, k, found = -1;
	size_t klen = strlen(key);

	if (obj < 0 || obj >= d->ntoks || d->toks[obj].type != JDOC_OBJECT)
		return -1;
	for (i = obj + 1, k = 0; k < d->toks[obj].size && i + 1 < d->ntoks; k++) {
		if (jdoc_str_eq(d, i, key, klen)) {
			if (found >= 0)
				return -2;
			found = i + 1;
		}
		i = jdoc_skip(d, i + 1);
	}
	return found;
}

/* 1 when the strings at i and j are equal once unescaped. */
static int
jdoc_str_eq_tok(const struct jdoc *d, int i, int j)
{
	const struct jdoc_tok *t = &d->toks[j];
	size_t len = (size_t)(t->end - t->start);
	char *buf;
	int n, eq;

	if (memchr(d->buf + t->start, '\\', len) == NULL)
		return jdoc_str_eq(d, i, d->buf + t->start, len);
	if ((buf = malloc(len)) == NULL)
		return 1;               /* cannot tell: count it as a duplicate */
	n = jdoc_str(d, j, buf, len);
	eq = n < 0 || jdoc_str_eq(d, i, buf, (size_t)n);
	free(buf);
	return eq;
}

int
jdoc_keys_unique(const struct jdoc *d, int obj)
{
	int i, j, a, b;

	if (obj < 0 || obj >= d->ntoks || d->toks[obj].type != JDOC_OBJECT)
		return 0;
	for (i = obj + 1, a = 0; a < d->toks[obj].size; a++, i = jdoc_skip(d, i + 1))
		for (j = jdoc_skip(d, i + 1), b = a + 1; b < d->toks[obj].size;
		    b++, j = jdoc_skip(d, j + 1))
			if (jdoc_str_eq_tok(d, i, j))
				return 0;
	return 1;
}

int
jdoc_element(const struct jdoc *d, int arr, size_t n)
{
	int i;
	size_t k;

	if (arr < 0 || arr >= d->ntoks || d->toks[arr].type != JDOC_ARRAY ||
	    n >= (size_t)d->toks[arr].size)
		return -1;
	for (i = arr + 1, k = 0; k < n; k++)
		i = jdoc_skip(d, i);
	return i;
}

static int
jdoc_hex4(const char *s, unsigned *v)
{
	int k;

	*v = 0;
	for (k = 0; k < 4; k++) {
		char c = s[k];

		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

/* The text was validated, so escapes are well formed; a lone surrogate becomes U+FFFD. */
int
jdoc_unescape(const char *s, size_t len, char *dst, size_t cap)
{
	size_t i = 0, n = 0;
	unsigned cp, lo;
	char u[4];
	size_t ulen;

	while (i < len) {
		if (s[i] != '\\') {
			if (n == cap)
				return -1;
			dst[n++] = s[i++];
			continue;
		}
		if (i + 1 >= len)
			return -1;
		switch (s[i + 1]) {
		case 'n': u[0] = '\n'; break;
		case 'r': u[0] = '\r'; break;
		case 't': u[0] = '\t'; break;
		case 'b': u[0] = '\b'; break;
		case 'f': u[0] = '\f'; break;
		case 'u': break;
		default: u[0] = s[i + 1]; break;
		}
		if (s[i + 1] != 'u') {
			ulen = 1;
			i += 2;
		} else {
			if (i + 6 > len || jdoc_hex4(s + i + 2, &cp) != 0)
				return -1;
			i += 6;
			if (cp >= 0xd800 && cp <= 0xdbff && i + 6 <= len && s[i] == '\\' &&
			    s[i + 1] == 'u' && jdoc_hex4(s + i + 2, &lo) == 0 &&
			    lo >= 0xdc00 && lo <= 0xdfff) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			} else if (cp >= 0xd800 && cp <= 0xdfff) {
				cp = 0xfffd;
			}
			if (cp < 0x80) {
				u[0] = (char)cp;
				ulen = 1;
			} else if (cp < 0x800) {
				u[0] = (char)(0xc0 | cp >> 6);
				u[1] = (char)(0x80 | (cp & 0x3f));
				ulen = 2;
			} else if (cp < 0x10000) {
				u[0] = (char)(0xe0 | cp >> 12);
				u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
				u[2] = (char)(0x80 | (cp & 0x3f));
				ulen = 3;
			} else {
				u[0] = (char)(0xf0 | cp >> 18);
				u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
				u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
				u[3] = (char)(0x80 | (cp & 0x3f));
				ulen = 4;
			}
		}
		if (cap - n < ulen)
			return -1;
		memcpy(dst + n, u, ulen);
		n += ulen;
	}
	return n > INT32_MAX ? -1 : (int)n;
}

int
jdoc_str(const struct jdoc *d, int i, char *dst, size_t cap)
{
	if (i < 0 || i >= d->ntoks || d->toks[i].type != JDOC_STRING)
		return -1;
	return jdoc_unescape(d->buf + d->toks[i].start,
	    (size_t)(d->toks[i].end - d->toks[i].start), dst, cap);
}

int
jdoc_str_eq(const struct jdoc *d, int i, const char *s, size_t len)
{
	const struct jdoc_tok *t;
	size_t tlen;
	char buf[256], *p;
	int n, eq;

	if (i < 0 || i >= d->ntoks || (t = &d->toks[i])->type != JDOC_STRING)
		return 0;
	tlen = (size_t)(t->end - t->start);
	if (memchr(d->buf + t->start, '\\', tlen) == NULL)
		return tlen == len && memcmp(d->buf + t->start, s, len) == 0;
	/* An escaped string is never longer unescaped. */
	if (len > tlen)
		return 0;
	if ((p = tlen <= sizeof(buf) ? buf : malloc(tlen)) == NULL)
		return 0;
	n = jdoc_str(d, i, p, tlen);
	eq = n >= 0 && (size_t)n == len && memcmp(p, s, len) == 0;
	if (p != buf)
		free(p);
	return eq;
}

int
jdoc_int(const struct jdoc *d, int i, int64_t *v)
{
	const struct jdoc_tok *t;
	char num[40], *end;
	size_t n;
	double x;

	if (i < 0 || i >= d->ntoks || (t = &d->toks[i])->type != JDOC_PRIMITIVE)
		return -1;
	n = (size_t)(t->end - t->start);
	if (n == 0 || n >= sizeof(num))
		return -1;
	memcpy(num, d->buf + t->start, n);
	num[n] = '\0';
	if (num[0] != '-' && (num[0] < '0' || num[0] > '9'))
		return -1;              /* true, false, null */
	x = strtod(num, &end);
	/* 2^53: seconds far beyond any date, still exact in a double. */
	if (*end != '\0' || !isfinite(x) || x > 9007199254740992.0 || x < -9007199254740992.0)
		return -1;
	*v = (int64_t)x;
	return 0;
}
