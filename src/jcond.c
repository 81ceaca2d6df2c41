/*
 * Conditions: YAML -> a small tree, evaluated against a JSON object through a lookup of the
 * fields it names.  Over a byte span the lookup tokenizes only the objects on each path, with
 * a member callback that keeps the last occurrence of the key (as JSON parsers do).
 */
#include "jcond.h"
#include "envelope.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JCOND_MAX_NESTING 32            /* all/any/not inside each other */

enum jcond_kind {
	JC_STATUS, JC_EQUALS, JC_IN, JC_PREFIX, JC_EXISTS, JC_TYPE, JC_ALL, JC_ANY, JC_NOT
};

/* What `type:` tests, from a JSON value's first byte. */
enum jcond_type { JT_NONE, JT_OBJECT, JT_ARRAY, JT_STRING, JT_NUMBER, JT_BOOL, JT_NULL };

static const char *const jcond_type_names[] = {
	[JT_OBJECT] = "object", [JT_ARRAY] = "array", [JT_STRING] = "string",
	[JT_NUMBER] = "number", [JT_BOOL] = "bool", [JT_NULL] = "null",
};

struct jcond_range {
	int lo, hi;                     /* 200: 200..200; 2xx: 200..299 */
};

struct jcond {
	enum jcond_kind kind;
	struct jcond_seg *path;         /* field tests */
	size_t nseg;
	struct jcond_scalar *values;    /* equals (one), in */
	size_t nvalues;
	struct jcond_range *ranges;     /* status */
	size_t nranges;
	struct jcond_scalar prefix;     /* prefix: its text */
	int exists;
	enum jcond_type type;
	struct jcond **sub;             /* all, any, not (one) */
	size_t nsub;
};

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

static char *
jcond_memdup(const char *p, size_t len)
{
	char *s = malloc(len + 1);

	if (s != NULL) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

static int
jcond_is_one_of(const char *s, size_t len, const char *const *words)
{
	for (; *words != NULL; words++)
		if (strlen(*words) == len && memcmp(s, *words, len) == 0)
			return 1;
	return 0;
}

int
jcond_scalar_parse(const yaml_node_t *node, struct jcond_scalar *out)
{
	static const char *const nulls[] = { "null", "Null", "NULL", "~", "", NULL };
	static const char *const trues[] = { "true", "True", "TRUE", NULL };
	static const char *const falses[] = { "false", "False", "FALSE", NULL };
	const char *s = (const char *)node->data.scalar.value, *lit = NULL;
	size_t len = node->data.scalar.length, n;

	memset(out, 0, sizeof(*out));
	out->type = ENVELOPE_PRIMITIVE;
	if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
		if (jcond_is_one_of(s, len, nulls))
			lit = "null";
		else if (jcond_is_one_of(s, len, trues))
			lit = "true";
		else if (jcond_is_one_of(s, len, falses))
			lit = "false";
		else if (envelope_is_number(s, len))
			lit = s;
	}
	if (lit != NULL) {
		n = lit == s ? len : strlen(lit);
		out->json = jcond_memdup(lit, n);
		out->len = n;
		return out->json != NULL ? 0 : -1;
	}
	/* A string: decoded JSON strings are compared with its text. */
	out->type = ENVELOPE_STRING;
	if ((out->text = jcond_memdup(s, len)) == NULL)
		return -1;
	out->text_len = len;
	return 0;
}

void
jcond_scalar_free(struct jcond_scalar *s)
{
	free(s->json);
	free(s->text);
	memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------ parsing */

static const char *
jcond_key(const yaml_node_t *k)
{
	return k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
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

static int
jcond_path(struct config_parse *ctx, const yaml_node_t *node, struct jcond *c)
{
	int r;

	if (node->type != YAML_SCALAR_NODE) {
		config_error(ctx, node, "field must be a key or a dotted path such as data.code");
		return -1;
	}
	r = jcond_path_split((const char *)node->data.scalar.value, node->data.scalar.length,
	    &c->path, &c->nseg);
	if (r == -1)
		config_error(ctx, node, "field: empty key in path '%s'",
		    (const char *)node->data.scalar.value);
	else if (r != 0)
		config_error(ctx, node, "out of memory");
	return r;
}

static int
jcond_scalar_node(struct config_parse *ctx, const yaml_node_t *node, const char *what,
    struct jcond_scalar *out)
{
	if (node->type != YAML_SCALAR_NODE) {
		config_error(ctx, node, "%s expects a scalar (a string, number, true, false or "
		    "null)", what);
		return -1;
	}
	if (jcond_scalar_parse(node, out) != 0) {
		config_error(ctx, node, "out of memory");
		return -1;
	}
	return 0;
}

/* 200, "404", 2xx, 200..299: one status, a class or a range of them (config_status_range). */
static int
jcond_range(const yaml_node_t *node, struct jcond_range *r)
{
	unsigned first, last;

	if (node->type != YAML_SCALAR_NODE ||
	    config_status_range((const char *)node->data.scalar.value, &first, &last) != 0)
		return -1;
	r->lo = (int)first;
	r->hi = (int)last;
	return 0;
}

static int
jcond_status(struct config_parse *ctx, yaml_document_t *doc, const yaml_node_t *node,
    struct jcond *c)
{
	const yaml_node_item_t *it, *start = NULL, *top = NULL;
	const yaml_node_t *item;
	size_t n = 1;

	if (node->type == YAML_SEQUENCE_NODE) {
		start = node->data.sequence.items.start;
		top = node->data.sequence.items.top;
		n = (size_t)(top - start);
	}
	if (n == 0 || node->type == YAML_MAPPING_NODE)
		goto bad;
	if ((c->ranges = calloc(n, sizeof(*c->ranges))) == NULL) {
		config_error(ctx, node, "out of memory");
		return -1;
	}
	if (start == NULL) {
		if (jcond_range(node, &c->ranges[0]) != 0)
			goto bad;
		c->nranges = 1;
		return 0;
	}
	for (it = start; it < top; it++) {
		item = yaml_document_get_node(doc, *it);
		if (jcond_range(item, &c->ranges[c->nranges]) != 0) {
			node = item;
			goto bad;
		}
		c->nranges++;
	}
	return 0;
bad:
	config_error(ctx, node, "status expects a status, a class or a range, or a list of them, "
	    "e.g. [ 200, 3xx, 400..403 ]");
	return -1;
}

static struct jcond *jcond_node(struct config_parse *ctx, yaml_document_t *doc,
    yaml_node_t *node, int nesting);

/* all: / any: a non-empty list of conditions; not: one. */
static int
jcond_subs(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node, struct jcond *c,
    int nesting)
{
	yaml_node_item_t *it;
	size_t n;
	int bad = 0;

	if (c->kind == JC_NOT) {
		if ((c->sub = calloc(1, sizeof(*c->sub))) == NULL) {
			config_error(ctx, node, "out of memory");
			return -1;
		}
		c->nsub = 1;
		return (c->sub[0] = jcond_node(ctx, doc, node, nesting + 1)) == NULL ? -1 : 0;
	}
	if (node->type != YAML_SEQUENCE_NODE ||
	    node->data.sequence.items.start == node->data.sequence.items.top) {
		config_error(ctx, node, "%s expects a non-empty list of conditions",
		    c->kind == JC_ALL ? "all" : "any");
		return -1;
	}
	n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	if ((c->sub = calloc(n, sizeof(*c->sub))) == NULL) {
		config_error(ctx, node, "out of memory");
		return -1;
	}
	for (it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++)
		if ((c->sub[c->nsub++] = jcond_node(ctx, doc, yaml_document_get_node(doc, *it),
		    nesting + 1)) == NULL)
			bad = 1;
	return bad ? -1 : 0;
}

/* The test that goes with field: */
static int
jcond_test(struct config_parse *ctx, yaml_document_t *doc, const char *name,
    const yaml_node_t *v, struct jcond *c)
{
	static const char *const bools[] = { "true", "false", NULL };
	const yaml_node_item_t *it;
	size_t i;

	if (strcmp(name, "equals") == 0) {
		c->kind = JC_EQUALS;
		if ((c->values = calloc(1, sizeof(*c->values))) == NULL)
			goto oom;
		c->nvalues = 1;
		return jcond_scalar_node(ctx, v, "equals", &c->values[0]);
	}
	if (strcmp(name, "in") == 0) {
		c->kind = JC_IN;
		if (v->type != YAML_SEQUENCE_NODE ||
		    v->data.sequence.items.start == v->data.sequence.items.top) {
			config_error(ctx, v, "in expects a non-empty list of values, e.g. [ 0, 200 ]");
			return -1;
		}
		if ((c->values = calloc((size_t)(v->data.sequence.items.top -
		    v->data.sequence.items.start), sizeof(*c->values))) == NULL)
			goto oom;
		for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
			if (jcond_scalar_node(ctx, yaml_document_get_node(doc, *it), "in",
			    &c->values[c->nvalues++]) != 0)
				return -1;
		return 0;
	}
	if (strcmp(name, "prefix") == 0) {
		c->kind = JC_PREFIX;
		if (v->type != YAML_SCALAR_NODE) {
			config_error(ctx, v, "prefix expects a string");
			return -1;
		}
		c->prefix.text = jcond_memdup((const char *)v->data.scalar.value,
		    v->data.scalar.length);
		c->prefix.text_len = v->data.scalar.length;
		if (c->prefix.text == NULL)
			goto oom;
		return 0;
	}
	if (strcmp(name, "exists") == 0) {
		c->kind = JC_EXISTS;
		if (v->type != YAML_SCALAR_NODE || !jcond_is_one_of((const char *)v->data.scalar.value,
		    v->data.scalar.length, bools)) {
			config_error(ctx, v, "exists expects true or false");
			return -1;
		}
		c->exists = v->data.scalar.value[0] == 't';
		return 0;
	}
	c->kind = JC_TYPE;
	for (i = JT_OBJECT; i <= JT_NULL; i++)
		if (v->type == YAML_SCALAR_NODE &&
		    strcmp((const char *)v->data.scalar.value, jcond_type_names[i]) == 0)
			c->type = (enum jcond_type)i;
	if (c->type == JT_NONE) {
		config_error(ctx, v, "type expects object, array, string, number, bool or null");
		return -1;
	}
	return 0;
oom:
	config_error(ctx, v, "out of memory");
	return -1;
}

static struct jcond *
jcond_node(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node, int nesting)
{
	static const char *const tests[] = { "equals", "in", "prefix", "exists", "type", NULL };
	static const char *const alone[] = { "status", "all", "any", "not", NULL };
	yaml_node_pair_t *pair;
	yaml_node_t *k, *v, *field = NULL, *test = NULL, *only = NULL;
	const char *name, *tname = NULL;
	struct jcond *c;
	int bad = 0;

	if (nesting > JCOND_MAX_NESTING) {
		config_error(ctx, node, "condition nested deeper than %d levels", JCOND_MAX_NESTING);
		return NULL;
	}
	if (node->type != YAML_MAPPING_NODE ||
	    node->data.mapping.pairs.start == node->data.mapping.pairs.top) {
		config_error(ctx, node, "a condition is a mapping such as { field: code, equals: 0 }, "
		    "{ status: [ 2xx ] }, or all:, any:, not: of conditions");
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		config_error(ctx, node, "out of memory");
		return NULL;
	}
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = yaml_document_get_node(doc, pair->key);
		v = yaml_document_get_node(doc, pair->value);
		name = jcond_key(k);
		if (strcmp(name, "field") == 0 && field == NULL) {
			field = v;
		} else if (jcond_is_one_of(name, strlen(name), tests) && test == NULL) {
			test = v;
			tname = name;
		} else if (jcond_is_one_of(name, strlen(name), alone) && only == NULL) {
			only = k;
		} else {
			config_error(ctx, k, "%s in a condition: each condition tests one thing "
			    "(status; field with one of equals, in, prefix, exists, type; all; any; "
			    "not)", field != NULL || test != NULL || only != NULL ?
			    "unexpected key" : "unknown key");
			jcond_free(c);
			return NULL;
		}
	}
	if (only != NULL && (field != NULL || test != NULL || node->data.mapping.pairs.top -
	    node->data.mapping.pairs.start != 1)) {
		config_error(ctx, only, "'%s' stands alone in its condition: combine with all:",
		    jcond_key(only));
		bad = 1;
	} else if (only != NULL) {
		v = yaml_document_get_node(doc, node->data.mapping.pairs.start->value);
		name = jcond_key(only);
		c->kind = strcmp(name, "status") == 0 ? JC_STATUS : strcmp(name, "all") == 0 ?
		    JC_ALL : strcmp(name, "any") == 0 ? JC_ANY : JC_NOT;
		if (c->kind == JC_STATUS)
			bad = jcond_status(ctx, doc, v, c) != 0;
		else
			bad = jcond_subs(ctx, doc, v, c, nesting) != 0;
	} else if (field == NULL) {
		config_error(ctx, node, "%s needs a field, e.g. { field: code, %s: ... }", tname,
		    tname);
		bad = 1;
	} else if (test == NULL) {
		config_error(ctx, node, "field needs one test: equals, in, prefix, exists or type");
		bad = 1;
	} else {
		bad = jcond_path(ctx, field, c) != 0 || jcond_test(ctx, doc, tname, test, c) != 0;
	}
	if (bad) {
		jcond_free(c);
		return NULL;
	}
	return c;
}

struct jcond *
jcond_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node)
{
	return jcond_node(ctx, doc, node, 0);
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
