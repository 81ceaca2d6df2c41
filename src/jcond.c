/*
 * Conditions: the tree jcond_config.c compiles from YAML, evaluated against a JSON object
 * through a lookup of the fields it names.  Over a byte span the lookup tokenizes only the objects on each path, with
 * a member callback that keeps the last occurrence of the key (as JSON parsers do).
 */
#include "jcond.h"
#include "envelope.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct jcond_scratch {
	struct envelope env;
	unsigned max_depth;
	const struct jcond_seg *want;   /* the key the member callback looks for */
	const struct envelope_member *found;
	struct envelope_member last;
};

/* ------------------------------------------------------------------ values */

/* An RFC 8259 number split into its parts, for comparison by value. */
struct jcond_num {
	int neg;
	const char *ip, *fp;            /* integer and fraction digits */
	size_t ilen, flen;
	long long exp;                  /* the exponent as written */
	int huge;                       /* the exponent did not fit: compare the text */
};

static void
jcond_num_split(const char *s, size_t len, struct jcond_num *n)
{
	size_t i = 0;
	int eneg = 0;

	memset(n, 0, sizeof(*n));
	if (i < len && s[i] == '-') {
		n->neg = 1;
		i++;
	}
	n->ip = s + i;
	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++;
	n->ilen = (size_t)(s + i - n->ip);
	if (i < len && s[i] == '.') {
		n->fp = s + ++i;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
		n->flen = (size_t)(s + i - n->fp);
	}
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < len && (s[i] == '+' || s[i] == '-'))
			eneg = s[i++] == '-';
		for (; i < len; i++) {
			if (n->exp > 100000000) {
				n->huge = 1;
				break;
			}
			n->exp = n->exp * 10 + (s[i] - '0');
		}
		if (eneg)
			n->exp = -n->exp;
	}
}

/* Digit k of the integer digits followed by the fraction digits. */
static char
jcond_num_digit(const struct jcond_num *n, size_t k)
{
	return k < n->ilen ? n->ip[k] : n->fp[k - n->ilen];
}

char *
jcond_memdup(const char *p, size_t len)
{
	char *s = malloc(len + 1);

	if (s != NULL) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

/*
 * The significant digits [first, last) and the decimal exponent of the first one, so that
 * 1, 1.0, 10e-1 and 0.001e3 all come out as "1" at exponent 0.  Returns 0 for zero.
 */
static int
jcond_num_norm(const struct jcond_num *n, size_t *first, size_t *last, long long *exp)
{
	size_t total = n->ilen + n->flen, a = 0, b = total;

	while (a < total && jcond_num_digit(n, a) == '0')
		a++;
	if (a == total)
		return 0;
	while (b > a && jcond_num_digit(n, b - 1) == '0')
		b--;
	*first = a;
	*last = b;
	*exp = n->exp + (long long)n->ilen - (long long)a - 1;
	return 1;
}

int
jcond_number_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	struct jcond_num x, y;
	size_t xa, xb, ya, yb, k;
	long long xe, ye;
	int xz, yz;

	if (alen == blen && memcmp(a, b, alen) == 0)
		return 1;               /* the common case: written the same way */
	jcond_num_split(a, alen, &x);
	jcond_num_split(b, blen, &y);
	if (x.huge || y.huge)
		return alen == blen && memcmp(a, b, alen) == 0;
	xz = jcond_num_norm(&x, &xa, &xb, &xe);
	yz = jcond_num_norm(&y, &ya, &yb, &ye);
	if (!xz || !yz)
		return !xz && !yz;      /* 0 == -0.0 */
	if (x.neg != y.neg || xe != ye || xb - xa != yb - ya)
		return 0;
	for (k = 0; k < xb - xa; k++)
		if (jcond_num_digit(&x, xa + k) != jcond_num_digit(&y, ya + k))
			return 0;
	return 1;
}

/* FNV-1a, one byte at a time. */
static uint64_t
jcond_fnv(uint64_t h, unsigned char c)
{
	return (h ^ c) * 1099511628211ULL;
}

uint64_t
jcond_number_hash(const char *s, size_t len)
{
	struct jcond_num n;
	uint64_t h = 14695981039346656037ULL;
	size_t a, b, k;
	long long e;

	jcond_num_split(s, len, &n);
	if (n.huge) {
		/* jcond_number_eq compares these as text */
		for (k = 0; k < len; k++)
			h = jcond_fnv(h, (unsigned char)s[k]);
		return h;
	}
	if (!jcond_num_norm(&n, &a, &b, &e))
		return h;               /* every zero */
	h = jcond_fnv(h, n.neg ? '-' : '+');
	for (k = a; k < b; k++)
		h = jcond_fnv(h, (unsigned char)jcond_num_digit(&n, k));
	for (k = 0; k < sizeof(e); k++)
		h = jcond_fnv(h, (unsigned char)((unsigned long long)e >> (8 * k)));
	return h;
}

int
jcond_number_int(const char *s, size_t len, long long *out)
{
	struct jcond_num n;
	size_t a, b, k;
	long long e, v = 0;

	jcond_num_split(s, len, &n);
	if (n.huge)
		return 0;
	if (!jcond_num_norm(&n, &a, &b, &e)) {
		*out = 0;
		return 1;
	}
	/* An integer has no significant digit after the point; keep to 18 digits. */
	if (e < (long long)(b - a) - 1 || e > 17)
		return 0;
	for (k = a; k < b; k++)
		v = v * 10 + (jcond_num_digit(&n, k) - '0');
	for (; (long long)(k - a) <= e; k++)
		v *= 10;
	*out = n.neg ? -v : v;
	return 1;
}

static enum jcond_type
jcond_type_of(unsigned char type, const char *json)
{
	switch (type) {
	case ENVELOPE_OBJECT: return JT_OBJECT;
	case ENVELOPE_ARRAY: return JT_ARRAY;
	case ENVELOPE_STRING: return JT_STRING;
	case ENVELOPE_PRIMITIVE:
		return json[0] == 't' || json[0] == 'f' ? JT_BOOL : json[0] == 'n' ? JT_NULL :
		    JT_NUMBER;
	default:
		return JT_NONE;
	}
}

const char *
jcond_numeric_string(const char *json, size_t len, size_t *nlen)
{
	if (len < 3 || json[0] != '"' || memchr(json + 1, '\\', len - 2) != NULL ||
	    !envelope_is_number(json + 1, len - 2))
		return NULL;
	*nlen = len - 2;
	return json + 1;
}

int
jcond_scalar_eq(const struct jcond_scalar *s, const char *json, size_t len, int strings)
{
	const char *num;
	size_t nlen;

	if (len == 0)
		return 0;
	if (s->text == NULL && s->len == len && memcmp(s->json, json, len) == 0)
		return 1;               /* the common case: written the same way */
	if (s->text != NULL) {
		if (json[0] == '"')
			return envelope_string_eq(json, len, s->text, s->text_len);
		return strings && envelope_is_number(json, len) &&
		    envelope_is_number(s->text, s->text_len) &&
		    jcond_number_eq(s->text, s->text_len, json, len);
	}
	if (s->json[0] == 't' || s->json[0] == 'f' || s->json[0] == 'n')
		return s->len == len && memcmp(s->json, json, len) == 0;
	if (envelope_is_number(json, len))
		return jcond_number_eq(s->json, s->len, json, len);
	if (strings && (num = jcond_numeric_string(json, len, &nlen)) != NULL)
		return jcond_number_eq(s->json, s->len, num, nlen);
	return 0;
}

void
jcond_scalar_free(struct jcond_scalar *s)
{
	free(s->json);
	free(s->text);
	memset(s, 0, sizeof(*s));
}

int
jcond_path_split(const char *s, size_t len, struct jcond_seg **segs, size_t *nseg)
{
	const char *dot, *end = s + len;
	size_t n = 1, i;

	*segs = NULL;
	*nseg = 0;
	for (i = 0; i < len; i++) {
		if (s[i] != '.')
			continue;
		if (i == 0 || i + 1 == len || s[i + 1] == '.')
			return -1;
		n++;
	}
	if (len == 0)
		return -1;
	if ((*segs = calloc(n, sizeof(**segs))) == NULL)
		return -2;
	for (i = 0; i < n; i++) {
		if ((dot = memchr(s, '.', (size_t)(end - s))) == NULL)
			dot = end;
		if (((*segs)[i].name = jcond_memdup(s, (size_t)(dot - s))) == NULL) {
			jcond_path_free(*segs, i);
			*segs = NULL;
			return -2;
		}
		(*segs)[i].len = (size_t)(dot - s);
		s = dot + 1;
	}
	*nseg = n;
	return 0;
}

void
jcond_path_free(struct jcond_seg *segs, size_t nseg)
{
	size_t i;

	for (i = 0; i < nseg; i++)
		free(segs[i].name);
	free(segs);
}

void
jcond_free(struct jcond *c)
{
	size_t i;

	if (c == NULL)
		return;
	jcond_path_free(c->path, c->nseg);
	for (i = 0; i < c->nvalues; i++)
		jcond_scalar_free(&c->values[i]);
	free(c->values);
	free(c->ranges);
	jcond_scalar_free(&c->prefix);
	for (i = 0; i < c->nsub; i++)
		jcond_free(c->sub[i]);
	free(c->sub);
	free(c);
}

int
jcond_uses_status(const struct jcond *c)
{
	size_t i;

	if (c == NULL)
		return 0;
	if (c->kind == JC_STATUS)
		return 1;
	for (i = 0; i < c->nsub; i++)
		if (jcond_uses_status(c->sub[i]))
			return 1;
	return 0;
}

/* ------------------------------------------------------------------ evaluation */

static int
jcond_run(const struct jcond *c, jcond_lookup_fn lookup, void *arg, int status)
{
	const char *json = NULL;
	size_t i, len = 0;
	unsigned char type = 0;
	int r;

	switch (c->kind) {
	case JC_STATUS:
		for (i = 0; i < c->nranges; i++)
			if (status >= c->ranges[i].lo && status <= c->ranges[i].hi)
				return 1;
		return 0;
	case JC_ALL:
	case JC_ANY:
		for (i = 0; i < c->nsub; i++)
			if ((r = jcond_run(c->sub[i], lookup, arg, status)) != (c->kind == JC_ALL))
				return r;
		return c->kind == JC_ALL;
	case JC_NOT:
		r = jcond_run(c->sub[0], lookup, arg, status);
		return r < 0 ? r : !r;
	default:
		break;
	}
	if (lookup(arg, c->path, c->nseg, &json, &len, &type) != 0)
		return -1;
	if (c->kind == JC_EXISTS)
		return (type != 0) == c->exists;
	if (type == 0)
		return 0;
	switch (c->kind) {
	case JC_TYPE:
		return jcond_type_of(type, json) == c->type;
	case JC_PREFIX:
		return type == ENVELOPE_STRING && json != NULL &&
		    envelope_string_prefix(json, len, c->prefix.text, c->prefix.text_len);
	default:
		/* Objects and arrays never equal a scalar. */
		if (json == NULL || type == ENVELOPE_OBJECT || type == ENVELOPE_ARRAY)
			return 0;
		for (i = 0; i < c->nvalues; i++)
			if (jcond_scalar_eq(&c->values[i], json, len, 0))
				return 1;
		return 0;
	}
}

int
jcond_eval_lookup(const struct jcond *c, jcond_lookup_fn lookup, void *arg, int status)
{
	return jcond_run(c, lookup, arg, status);
}

struct jcond_scratch *
jcond_scratch_new(unsigned max_depth, size_t max_members)
{
	struct jcond_scratch *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	envelope_init(&s->env);
	s->env.max_members = max_members;
	s->max_depth = max_depth;
	return s;
}

void
jcond_scratch_free(struct jcond_scratch *s)
{
	if (s == NULL)
		return;
	envelope_free(&s->env);
	free(s);
}

/* Keep the last member called s->want: later duplicates win, as in JSON parsers. */
static int
jcond_member_cb(void *arg, const struct envelope_member *m)
{
	struct jcond_scratch *s = arg;

	if (envelope_string_eq(m->key, m->keylen, s->want->name, s->want->len)) {
		s->last = *m;
		s->found = &s->last;
	}
	return 0;
}

int
jcond_find(struct jcond_scratch *s, const char *body, size_t len, const struct jcond_seg *path,
    size_t nseg, const char **json, size_t *vlen, unsigned char *type)
{
	size_t pos = envelope_skip_ws(body, len, 0), end = len, oend, i;
	unsigned depth = s->max_depth;

	*type = 0;
	if (nseg == 0)
		return 0;
	s->env.member_cb = jcond_member_cb;
	s->env.member_arg = s;
	for (i = 0; i < nseg; i++) {
		if (pos >= end || body[pos] != '{')
			return 0;       /* not an object: no such field */
		if (depth < 1)
			return -1;
		s->want = &path[i];
		s->found = NULL;
		if (envelope_parse(&s->env, body, end, pos, depth, &oend) != 0)
			return -1;
		/* The text's own value: only whitespace may follow it. */
		if (i == 0 && envelope_skip_ws(body, len, oend) != len)
			return -1;
		if (s->found == NULL)
			return 0;
		pos = (size_t)(s->found->val - body);
		end = pos + s->found->vallen;
		depth--;
	}
	*json = body + pos;
	*vlen = end - pos;
	*type = s->found->type;
	return 0;
}

struct jcond_span {
	struct jcond_scratch *s;
	const char *body;
	size_t len;
};

static int
jcond_span_lookup(void *arg, const struct jcond_seg *path, size_t nseg, const char **json,
    size_t *len, unsigned char *type)
{
	struct jcond_span *sp = arg;

	return jcond_find(sp->s, sp->body, sp->len, path, nseg, json, len, type);
}

int
jcond_eval(const struct jcond *c, const char *body, size_t len, int status,
    struct jcond_scratch *s)
{
	struct jcond_span sp = { s, body, len };

	return jcond_run(c, jcond_span_lookup, &sp, status);
}
