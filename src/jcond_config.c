/*
 * Conditions from the configuration: YAML -> the tree jcond.c evaluates.  Errors go to the
 * configuration's parse context, at the offending node.
 */
#include "jcond.h"
#include "config.h"
#include "envelope.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JCOND_MAX_NESTING 32            /* all/any/not inside each other */

static const char *const jcond_type_names[] = {
	[JT_OBJECT] = "object", [JT_ARRAY] = "array", [JT_STRING] = "string",
	[JT_NUMBER] = "number", [JT_BOOL] = "bool", [JT_NULL] = "null",
};

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

static const char *
jcond_key(const yaml_node_t *k)
{
	return k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
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

