/*
 * The `request:` / `response:` op lists of a route: YAML nodes -> struct rewrite_program.
 * Everything a request needs is decided here, at load time: paths are split, keys are
 * escaped once, `set` values become JSON text with $variables marked for per-request splicing.
 */
#include "config.h"
#include "envelope.h"
#include "jprefix.h"
#include "rewrite.h"
#include "route.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RC_MAX_NESTING 64               /* YAML nesting accepted in a `set` value */
#define RC_MAX_LITERAL (64 * 1024)      /* bytes of one `set` value, aliases expanded */

struct rc {
	struct config_parse *cfg;
	yaml_document_t *doc;
	enum rewrite_direction direction;
	const struct route_pattern *pattern;    /* the route's path template, or NULL */
	int nerr;
};

/* A growable byte buffer used while building literals. */
struct rc_buf {
	char *p;
	size_t len, cap;
	int oom;
};

static const char *const rc_op_names[] = {
	[REWRITE_UNWRAP] = "unwrap", [REWRITE_WRAP] = "wrap", [REWRITE_RENAME] = "rename",
	[REWRITE_DROP] = "drop", [REWRITE_KEEP] = "keep", [REWRITE_SET] = "set",
	[REWRITE_STATUS_FROM] = "status_from",
};
#define RC_NOPS (sizeof(rc_op_names) / sizeof(rc_op_names[0]))

static const struct {
	const char *name;
	enum rewrite_var var;
} rc_vars[] = {
	{ "request_id", REWRITE_VAR_REQUEST_ID }, { "route", REWRITE_VAR_ROUTE },
	{ "upstream", REWRITE_VAR_UPSTREAM }, { "remote_addr", REWRITE_VAR_REMOTE_ADDR },
	{ "time_iso8601", REWRITE_VAR_TIME_ISO8601 },
	{ "ssl_client_s_dn", REWRITE_VAR_SSL_CLIENT_S_DN },
	{ "ssl_client_verify", REWRITE_VAR_SSL_CLIENT_VERIFY },
	{ "api_key", REWRITE_VAR_API_KEY }, { "client_addr", REWRITE_VAR_CLIENT_ADDR },
};

static void rc_error(struct rc *rc, const yaml_node_t *node, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
rc_error(struct rc *rc, const yaml_node_t *node, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	config_error(rc->cfg, node, "%s", msg);
	rc->nerr++;
}

static void
rc_buf_add(struct rc_buf *b, const void *p, size_t len)
{
	char *np;
	size_t ncap;

	if (b->oom)
		return;
	if (b->len + len > RC_MAX_LITERAL) {
		b->oom = 1;
		return;
	}
	if (b->len + len > b->cap) {
		ncap = b->cap ? b->cap * 2 : 64;
		while (ncap < b->len + len)
			ncap *= 2;
		if ((np = realloc(b->p, ncap)) == NULL) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
	memcpy(b->p + b->len, p, len);
	b->len += len;
}

static char *
rc_memdup(const char *p, size_t len)
{
	char *s;

	if ((s = malloc(len + 1)) == NULL)
		return NULL;
	memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

static const char *
rc_scalar(const yaml_node_t *node, size_t *len)
{
	*len = node->data.scalar.length;
	return (const char *)node->data.scalar.value;
}

/* Append text as a quoted JSON string. */
static void
rc_buf_add_string(struct rc_buf *b, const char *s, size_t len)
{
	char *tmp;

	if (len > RC_MAX_LITERAL) {
		b->oom = 1;
		return;
	}
	if ((tmp = malloc(6 * len + 1)) == NULL) {
		b->oom = 1;
		return;
	}
	rc_buf_add(b, "\"", 1);
	rc_buf_add(b, tmp, rewrite_json_escape(tmp, s, len));
	rc_buf_add(b, "\"", 1);
	free(tmp);
}

static int
rc_is_one_of(const char *s, size_t len, const char *const *words)
{
	for (; *words != NULL; words++)
		if (strlen(*words) == len && memcmp(s, *words, len) == 0)
			return 1;
	return 0;
}

/*
 * A YAML scalar as a JSON literal: plain scalars keep their YAML 1.2 core type (null, booleans,
 * numbers), everything else is a string.
 */
static void
rc_scalar_json(const yaml_node_t *node, struct rc_buf *b)
{
	struct jcond_scalar v;

	if (jcond_scalar_parse(node, &v) != 0) {
		b->oom = 1;
		return;
	}
	if (v.text != NULL)
		rc_buf_add_string(b, v.text, v.text_len);
	else
		rc_buf_add(b, v.json, v.len);
	jcond_scalar_free(&v);
}

static void
rc_pieces_flush(struct rc_buf *lit, struct rewrite_piece **pieces, size_t *npieces, int *oom)
{
	struct rewrite_piece *np;

	if (lit->len == 0 || *oom)
		return;
	if ((np = realloc(*pieces, (*npieces + 1) * sizeof(*np))) == NULL) {
		*oom = 1;
		return;
	}
	*pieces = np;
	np[*npieces].var = REWRITE_VAR_NONE;
	if ((np[*npieces].s = rc_memdup(lit->p, lit->len)) == NULL) {
		*oom = 1;
		return;
	}
	np[*npieces].len = lit->len;
	(*npieces)++;
	lit->len = 0;
}

static void
rc_pieces_var(struct rc_buf *lit, struct rewrite_piece **pieces, size_t *npieces, int *oom,
    enum rewrite_var var, const char *name, size_t len)
{
	struct rewrite_piece *np;

	rc_pieces_flush(lit, pieces, npieces, oom);
	if (*oom)
		return;
	if ((np = realloc(*pieces, (*npieces + 1) * sizeof(*np))) == NULL) {
		*oom = 1;
		return;
	}
	*pieces = np;
	np[*npieces].var = var;
	np[*npieces].s = NULL;
	np[*npieces].len = len;
	if (name != NULL && (np[*npieces].s = rc_memdup(name, len)) == NULL) {
		*oom = 1;
		return;
	}
	(*npieces)++;
}

static int
rc_is_token(const char *s, size_t len)
{
	size_t i;

	if (len == 0)
		return 0;
	for (i = 0; i < len; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f ||
		    strchr("\"(),/:;<=>?@[\\]{}", s[i]) != NULL)
			return 0;
	return 1;
}

/* A `set` value (any YAML) -> pieces of JSON text and $variables. */
static int
rc_set_value(struct rc *rc, yaml_node_t *node, struct rc_buf *lit, struct rewrite_piece **pieces,
    size_t *npieces, int *oom, int nesting)
{
	yaml_node_item_t *it;
	yaml_node_pair_t *pair;
	yaml_node_t *k, *v;
	const char *s;
	size_t len, i;
	int first = 1;

	if (nesting > RC_MAX_NESTING) {
		rc_error(rc, node, "set value nested deeper than %d levels", RC_MAX_NESTING);
		return -1;
	}
	switch (node->type) {
	case YAML_SCALAR_NODE:
		s = rc_scalar(node, &len);
		if (len >= 2 && s[0] == '$' && s[1] == '$') {
			rc_buf_add_string(lit, s + 1, len - 1);
			return 0;
		}
		if (len == 0 || s[0] != '$') {
			rc_scalar_json(node, lit);
			return 0;
		}
		for (i = 0; i < sizeof(rc_vars) / sizeof(rc_vars[0]); i++)
			if (strlen(rc_vars[i].name) == len - 1 &&
			    memcmp(rc_vars[i].name, s + 1, len - 1) == 0) {
				rc_pieces_var(lit, pieces, npieces, oom, rc_vars[i].var, NULL, 0);
				return 0;
			}
		if (len > 8 && memcmp(s, "$header.", 8) == 0) {
			if (!rc_is_token(s + 8, len - 8)) {
				rc_error(rc, node, "bad header name in variable '%.*s'", (int)len, s);
				return -1;
			}
			rc_pieces_var(lit, pieces, npieces, oom, REWRITE_VAR_HEADER, s + 8, len - 8);
			return 0;
		}
		if (len > 6 && memcmp(s, "$json.", 6) == 0) {
			struct jcond_seg segs[JPREFIX_MAX_PATH];

			if (jprefix_path(s + 6, len - 6, segs) == 0) {
				rc_error(rc, node, "bad path in variable '%.*s': an empty key or more "
				    "than %d keys", (int)len, s, JPREFIX_MAX_PATH);
				return -1;
			}
			rc_pieces_var(lit, pieces, npieces, oom, REWRITE_VAR_JSON, s + 6, len - 6);
			return 0;
		}
		if (len > 5 && memcmp(s, "$jwt.", 5) == 0) {
			struct jcond_seg segs[JPREFIX_MAX_PATH];

			if (jprefix_path(s + 5, len - 5, segs) == 0) {
				rc_error(rc, node, "bad path in variable '%.*s': an empty key or more "
				    "than %d keys", (int)len, s, JPREFIX_MAX_PATH);
				return -1;
			}
			rc_pieces_var(lit, pieces, npieces, oom, REWRITE_VAR_JWT, s + 5, len - 5);
			return 0;
		}
		if (len > 6 && memcmp(s, "$path.", 6) == 0) {
			const char *why = route_path_var_why(rc->pattern, s + 6, len - 6);

			if (why != NULL) {
				rc_error(rc, node, "variable '%.*s': %s", (int)len, s, why);
				return -1;
			}
			rc_pieces_var(lit, pieces, npieces, oom, REWRITE_VAR_PATH, s + 6, len - 6);
			return 0;
		}
		rc_error(rc, node, "unknown variable '%.*s' (expected $request_id, $route, "
		    "$upstream, $remote_addr, $client_addr, $time_iso8601, $header.NAME, $json.PATH, "
		    "$path.NAME, $jwt.CLAIM, $api_key, $ssl_client_s_dn, $ssl_client_verify; $$ for "
		    "a literal $)", (int)len, s);
		return -1;
	case YAML_SEQUENCE_NODE:
		rc_buf_add(lit, "[", 1);
		for (it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
			if (!first)
				rc_buf_add(lit, ",", 1);
			first = 0;
			if (rc_set_value(rc, yaml_document_get_node(rc->doc, *it), lit, pieces,
			    npieces, oom, nesting + 1) != 0)
				return -1;
		}
		rc_buf_add(lit, "]", 1);
		return 0;
	case YAML_MAPPING_NODE:
		rc_buf_add(lit, "{", 1);
		for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top;
		    pair++) {
			k = yaml_document_get_node(rc->doc, pair->key);
			v = yaml_document_get_node(rc->doc, pair->value);
			if (k->type != YAML_SCALAR_NODE) {
				rc_error(rc, k, "object keys in a set value must be scalars");
				return -1;
			}
			if (!first)
				rc_buf_add(lit, ",", 1);
			first = 0;
			s = rc_scalar(k, &len);
			rc_buf_add_string(lit, s, len);
			rc_buf_add(lit, ":", 1);
			if (rc_set_value(rc, v, lit, pieces, npieces, oom, nesting + 1) != 0)
				return -1;
		}
		rc_buf_add(lit, "}", 1);
		return 0;
	default:
		rc_error(rc, node, "empty set value");
		return -1;
	}
}

/* The JSON form is stored as ,"key": so one span emits separator, key and colon. */
static int
rc_key_init(struct rewrite_key *key, const char *s, size_t len)
{
	struct rc_buf b = { 0 };

	rc_buf_add(&b, ",", 1);
	rc_buf_add_string(&b, s, len);
	rc_buf_add(&b, ":", 1);
	key->name = rc_memdup(s, len);
	key->len = len;
	if (b.oom || key->name == NULL || b.p == NULL) {
		free(b.p);
		key->json = NULL;
		return -1;
	}
	key->json = b.p + 1;
	key->json_len = b.len - 2;
	return 0;
}

static void
rc_key_free(struct rewrite_key *key)
{
	free(key->name);
	if (key->json != NULL)
		free(key->json - 1);
}

static void
rc_path_free(struct rewrite_path *path)
{
	size_t i;

	for (i = 0; i < path->nseg; i++)
		rc_key_free(&path->seg[i]);
	free(path->seg);
	path->seg = NULL;
	path->nseg = 0;
}

/* "data.result" -> segments; every segment must be non-empty. */
static int
rc_path(struct rc *rc, yaml_node_t *node, const char *what, struct rewrite_path *path)
{
	struct jcond_seg *segs;
	size_t n, i;
	int r;

	memset(path, 0, sizeof(*path));
	if (node->type != YAML_SCALAR_NODE) {
		rc_error(rc, node, "%s must be a key or a dotted path such as data.result", what);
		return -1;
	}
	r = jcond_path_split((const char *)node->data.scalar.value, node->data.scalar.length,
	    &segs, &n);
	if (r == -1) {
		rc_error(rc, node, "%s: empty key in path '%s'", what,
		    (const char *)node->data.scalar.value);
		return -1;
	}
	if (r == 0 && (path->seg = calloc(n, sizeof(*path->seg))) != NULL)
		for (i = 0; i < n && r == 0; i++, path->nseg++)
			r = rc_key_init(&path->seg[i], segs[i].name, segs[i].len);
	jcond_path_free(segs, n);
	if (r != 0 || path->seg == NULL) {
		rc_path_free(path);
		rc_error(rc, node, "out of memory");
		return -1;
	}
	return 0;
}

static void
rc_item_free(struct rewrite_item *item)
{
	size_t i;

	rc_path_free(&item->path);
	rc_key_free(&item->to);
	for (i = 0; i < item->nval; i++)
		free(item->val[i].s);
	free(item->val);
}

static void
rc_op_free(struct rewrite_op *op)
{
	size_t i;

	rc_path_free(&op->path);
	for (i = 0; i < op->nitems; i++)
		rc_item_free(&op->items[i]);
	free(op->items);
	for (i = 0; i < op->nmap; i++)
		jcond_scalar_free(&op->map[i].key);
	free(op->map);
	jcond_free(op->when);
}

static struct rewrite_item *
rc_item_new(struct rc *rc, yaml_node_t *at, struct rewrite_op *op)
{
	struct rewrite_item *items;

	if ((items = realloc(op->items, (op->nitems + 1) * sizeof(*items))) == NULL) {
		rc_error(rc, at, "out of memory");
		return NULL;
	}
	op->items = items;
	memset(&items[op->nitems], 0, sizeof(*items));
	return &items[op->nitems++];
}

static int
rc_path_cmp(const struct rewrite_path *a, const struct rewrite_path *b)
{
	size_t i, n = a->nseg < b->nseg ? a->nseg : b->nseg;
	int c;

	for (i = 0; i < n; i++) {
		c = memcmp(a->seg[i].name, b->seg[i].name,
		    a->seg[i].len < b->seg[i].len ? a->seg[i].len : b->seg[i].len);
		if (c == 0 && a->seg[i].len != b->seg[i].len)
			c = a->seg[i].len < b->seg[i].len ? -1 : 1;
		if (c != 0)
			return c;
	}
	return a->nseg < b->nseg ? -1 : a->nseg > b->nseg;
}

static int
rc_item_cmp(const void *a, const void *b)
{
	return rc_path_cmp(&((const struct rewrite_item *)a)->path,
	    &((const struct rewrite_item *)b)->path);
}

/* drop / keep: a list of paths (a single path is accepted too). */
static int
rc_paths(struct rc *rc, yaml_node_t *arg, struct rewrite_op *op)
{
	yaml_node_item_t *it;
	yaml_node_t *n;
	struct rewrite_item *item;
	int bad = 0;

	if (arg->type == YAML_SCALAR_NODE) {
		if ((item = rc_item_new(rc, arg, op)) == NULL)
			return -1;
		return rc_path(rc, arg, rc_op_names[op->kind], &item->path);
	}
	if (arg->type != YAML_SEQUENCE_NODE ||
	    arg->data.sequence.items.start == arg->data.sequence.items.top) {
		rc_error(rc, arg, "%s expects a non-empty list of keys, e.g. [ debug, data.trace ]",
		    rc_op_names[op->kind]);
		return -1;
	}
	for (it = arg->data.sequence.items.start; it < arg->data.sequence.items.top; it++) {
		n = yaml_document_get_node(rc->doc, *it);
		if ((item = rc_item_new(rc, n, op)) == NULL)
			return -1;
		if (rc_path(rc, n, rc_op_names[op->kind], &item->path) != 0)
			bad = 1;
	}
	if (bad)
		return -1;
	if (op->kind == REWRITE_KEEP)
		qsort(op->items, op->nitems, sizeof(*op->items), rc_item_cmp);
	return 0;
}

/* YAML allows a key twice in a mapping; an op's mapping does not, as the top level does not. */
static int
rc_unique_keys(struct rc *rc, yaml_node_t *map)
{
	yaml_node_pair_t *a, *b;
	yaml_node_t *ka, *kb;
	int bad = 0;

	for (b = map->data.mapping.pairs.start; b < map->data.mapping.pairs.top; b++) {
		kb = yaml_document_get_node(rc->doc, b->key);
		if (kb->type != YAML_SCALAR_NODE)
			continue;
		for (a = map->data.mapping.pairs.start; a < b; a++) {
			ka = yaml_document_get_node(rc->doc, a->key);
			if (ka->type == YAML_SCALAR_NODE &&
			    ka->data.scalar.length == kb->data.scalar.length &&
			    memcmp(ka->data.scalar.value, kb->data.scalar.value,
			    ka->data.scalar.length) == 0) {
				rc_error(rc, kb, "duplicate key '%s' (first at line %zu)",
				    (const char *)kb->data.scalar.value, ka->start_mark.line + 1);
				bad = 1;
				break;
			}
		}
	}
	return bad ? -1 : 0;
}

static int
rc_mapping_nonempty(struct rc *rc, yaml_node_t *arg, const char *op, const char *example)
{
	if (arg->type != YAML_MAPPING_NODE ||
	    arg->data.mapping.pairs.start == arg->data.mapping.pairs.top) {
		rc_error(rc, arg, "%s expects a non-empty mapping, e.g. %s", op, example);
		return -1;
	}
	return rc_unique_keys(rc, arg);
}

/* 1 when a and b name keys of the same objects: the same path but for the last key. */
static int
rc_same_parent(const struct rewrite_path *a, const struct rewrite_path *b)
{
	size_t i;

	if (a->nseg != b->nseg)
		return 0;
	for (i = 0; i + 1 < a->nseg; i++)
		if (a->seg[i].len != b->seg[i].len ||
		    memcmp(a->seg[i].name, b->seg[i].name, a->seg[i].len) != 0)
			return 0;
	return 1;
}

static int
rc_key_eq(const struct rewrite_key *a, const struct rewrite_key *b)
{
	return a->len == b->len && memcmp(a->name, b->name, a->len) == 0;
}

/*
 * Two keys renamed to one name would make duplicate keys: an error.  A new name that another
 * item renames away ({a: b, b: a}) is free by the time this op ends; any other replaces.
 */
static int
rc_rename_targets(struct rc *rc, yaml_node_t *arg, struct rewrite_op *op)
{
	struct rewrite_item *a, *b;
	size_t i, j;

	for (i = 0; i < op->nitems; i++) {
		a = &op->items[i];
		a->replaces = 1;
		for (j = 0; j < op->nitems; j++) {
			b = &op->items[j];
			if (!rc_same_parent(&a->path, &b->path))
				continue;
			if (j < i && rc_key_eq(&a->to, &b->to)) {
				rc_error(rc, arg, "rename: '%s' and '%s' both become '%s'", b->path.seg[
				    b->path.nseg - 1].name, a->path.seg[a->path.nseg - 1].name, a->to.name);
				return -1;
			}
			if (rc_key_eq(&a->to, &b->path.seg[b->path.nseg - 1]))
				a->replaces = 0;
		}
	}
	return 0;
}

/*
 * rename: { OLD: NEW }.  NEW is a key of OLD's object: alone (msg: message, data.name: title)
 * or as a path to the same object (data.name: data.title); a key cannot move elsewhere.
 */
static int
rc_rename(struct rc *rc, yaml_node_t *arg, struct rewrite_op *op)
{
	yaml_node_pair_t *pair;
	yaml_node_t *k, *v;
	struct rewrite_item *item;
	struct rewrite_path to;
	int bad = 0;

	if (rc_mapping_nonempty(rc, arg, "rename", "{ msg: message }") != 0)
		return -1;
	for (pair = arg->data.mapping.pairs.start; pair < arg->data.mapping.pairs.top; pair++) {
		k = yaml_document_get_node(rc->doc, pair->key);
		v = yaml_document_get_node(rc->doc, pair->value);
		if ((item = rc_item_new(rc, k, op)) == NULL)
			return -1;
		if (rc_path(rc, k, "rename", &item->path) != 0) {
			bad = 1;
			continue;
		}
		if (v->type != YAML_SCALAR_NODE || v->data.scalar.length == 0) {
			rc_error(rc, v, "rename: the new name of '%s' must be a non-empty string",
			    (const char *)k->data.scalar.value);
			bad = 1;
			continue;
		}
		if (rc_path(rc, v, "rename", &to) != 0) {
			bad = 1;
			continue;
		}
		if (to.nseg > 1 && !rc_same_parent(&item->path, &to)) {
			rc_error(rc, v, "rename: '%s' to '%s' would move the key to another object; "
			    "name the new key alone or in the same object",
			    (const char *)k->data.scalar.value, (const char *)v->data.scalar.value);
			rc_path_free(&to);
			bad = 1;
			continue;
		}
		item->to = to.seg[--to.nseg];   /* the new key; its parents are the old key's */
		rc_path_free(&to);
	}
	if (bad)
		return -1;
	return rc_rename_targets(rc, arg, op);
}

static int
rc_set(struct rc *rc, yaml_node_t *arg, struct rewrite_op *op)
{
	yaml_node_pair_t *pair;
	yaml_node_t *k, *v;
	struct rewrite_item *item;
	struct rc_buf lit = { 0 };
	int bad = 0, oom = 0;

	if (rc_mapping_nonempty(rc, arg, "set", "{ gateway: jsongate }") != 0)
		return -1;
	for (pair = arg->data.mapping.pairs.start; pair < arg->data.mapping.pairs.top; pair++) {
		k = yaml_document_get_node(rc->doc, pair->key);
		v = yaml_document_get_node(rc->doc, pair->value);
		if ((item = rc_item_new(rc, k, op)) == NULL) {
			free(lit.p);
			return -1;
		}
		if (rc_path(rc, k, "set", &item->path) != 0) {
			bad = 1;
			continue;
		}
		lit.len = 0;
		if (rc_set_value(rc, v, &lit, &item->val, &item->nval, &oom, 0) != 0) {
			bad = 1;
			continue;
		}
		rc_pieces_flush(&lit, &item->val, &item->nval, &oom);
		if (lit.oom) {
			rc_error(rc, v, "set value longer than %d bytes", RC_MAX_LITERAL);
			bad = 1;
		} else if (oom) {
			rc_error(rc, v, "out of memory");
			bad = 1;
		}
	}
	free(lit.p);
	return bad ? -1 : 0;
}

static int
rc_status(struct rc *rc, yaml_node_t *node, int *status)
{
	const char *s;
	size_t len, i;
	int v = 0;

	if (node->type == YAML_SCALAR_NODE) {
		s = rc_scalar(node, &len);
		for (i = 0; i < len && s[i] >= '0' && s[i] <= '9' && i < 4; i++)
			v = v * 10 + (s[i] - '0');
		if (len > 0 && i == len && v >= 100 && v <= 599) {
			*status = v;
			return 0;
		}
	}
	rc_error(rc, node, "status must be an HTTP status code between 100 and 599");
	return -1;
}

/* A map key Nxx: the range N00..N99. */
static int
rc_status_range(const yaml_node_t *k, struct rewrite_status_map *m)
{
	const char *s = (const char *)k->data.scalar.value;

	if (k->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || k->data.scalar.length != 3 ||
	    s[0] < '1' || s[0] > '9' || (s[1] != 'x' && s[1] != 'X') || (s[2] != 'x' && s[2] != 'X'))
		return 0;
	m->lo = (s[0] - '0') * 100;
	m->hi = m->lo + 99;
	return 1;
}

/* Two map keys that would match the same values. */
static int
rc_status_same(const struct rewrite_status_map *a, const struct rewrite_status_map *b)
{
	if (a->hi != 0 || b->hi != 0)
		return a->lo == b->lo && a->hi == b->hi;
	if (a->key.text != NULL || b->key.text != NULL)
		return a->key.text != NULL && b->key.text != NULL &&
		    a->key.text_len == b->key.text_len &&
		    memcmp(a->key.text, b->key.text, a->key.text_len) == 0;
	return jcond_scalar_eq(&a->key, b->key.json, b->key.len, 0);
}

static int
rc_status_map(struct rc *rc, yaml_node_t *v, struct rewrite_op *op)
{
	yaml_node_pair_t *mp;
	yaml_node_t *mk, *mv;
	struct rewrite_status_map *m;
	size_t i;
	int bad = 0;

	if (v->type != YAML_MAPPING_NODE || v->data.mapping.pairs.start == v->data.mapping.pairs.top) {
		rc_error(rc, v, "status_from map must be a mapping of field values to status codes, "
		    "e.g. { 0: 200, 404: 404, 5xx: 502 }");
		return -1;
	}
	if ((op->map = calloc((size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start),
	    sizeof(*op->map))) == NULL) {
		rc_error(rc, v, "out of memory");
		return -1;
	}
	for (mp = v->data.mapping.pairs.start; mp < v->data.mapping.pairs.top; mp++) {
		mk = yaml_document_get_node(rc->doc, mp->key);
		mv = yaml_document_get_node(rc->doc, mp->value);
		if (mk->type != YAML_SCALAR_NODE) {
			rc_error(rc, mk, "status_from map keys must be scalars");
			bad = 1;
			continue;
		}
		m = &op->map[op->nmap];
		if (!rc_status_range(mk, m) && jcond_scalar_parse(mk, &m->key) != 0) {
			rc_error(rc, mk, "out of memory");
			return -1;
		}
		op->nmap++;
		for (i = 0; i + 1 < op->nmap; i++)
			if (rc_status_same(&op->map[i], m)) {
				rc_error(rc, mk, "duplicate key '%s' in status_from map",
				    (const char *)mk->data.scalar.value);
				bad = 1;
				break;
			}
		if (rc_status(rc, mv, &m->status) != 0)
			bad = 1;
	}
	return bad ? -1 : 0;
}

/*
 * status_from: { field: PATH, map: { VALUE: STATUS, Nxx: STATUS }, default: STATUS,
 * strings: BOOL }.  Without default an unmapped value keeps the status.
 */
static int
rc_status_from(struct rc *rc, yaml_node_t *arg, struct rewrite_op *op)
{
	static const char *const bools[] = { "true", "false", NULL };
	yaml_node_pair_t *pair;
	yaml_node_t *k, *v;
	const char *name;
	int bad = 0, have_field = 0, have_map = 0;

	if (rc_mapping_nonempty(rc, arg, "status_from",
	    "{ field: code, map: { 0: 200, 1001: 401 } }") != 0)
		return -1;
	for (pair = arg->data.mapping.pairs.start; pair < arg->data.mapping.pairs.top; pair++) {
		k = yaml_document_get_node(rc->doc, pair->key);
		v = yaml_document_get_node(rc->doc, pair->value);
		name = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
		if (strcmp(name, "field") == 0) {
			have_field = 1;
			if (rc_path(rc, v, "status_from field", &op->path) != 0)
				bad = 1;
		} else if (strcmp(name, "default") == 0) {
			if (rc_status(rc, v, &op->def_status) != 0)
				bad = 1;
		} else if (strcmp(name, "map") == 0) {
			have_map = 1;
			if (rc_status_map(rc, v, op) != 0)
				bad = 1;
		} else if (strcmp(name, "strings") == 0) {
			if (v->type != YAML_SCALAR_NODE || !rc_is_one_of((const char *)
			    v->data.scalar.value, v->data.scalar.length, bools)) {
				rc_error(rc, v, "status_from strings expects true or false");
				bad = 1;
			}
			op->strings = v->type == YAML_SCALAR_NODE && v->data.scalar.value[0] == 't';
		} else {
			rc_error(rc, k, "unknown key '%s' in status_from (expected field, map, default, "
			    "strings)", name);
			bad = 1;
		}
	}
	/* What is missing, once what is there is right. */
	if (!bad && !have_field) {
		rc_error(rc, arg, "status_from needs a field, e.g. { field: code, map: { 0: 200 } }");
		bad = 1;
	}
	if (!bad && !have_map) {
		rc_error(rc, arg, "status_from needs a map of field values to statuses, e.g. "
		    "{ field: code, map: { 0: 200, 1001: 401 } }");
		bad = 1;
	}
	return bad ? -1 : 0;
}

/* One list item: a mapping with one op key, and when: optionally. */
static int
rc_op(struct rc *rc, yaml_node_t *node, struct rewrite_op *op)
{
	yaml_node_pair_t *pair;
	yaml_node_t *k, *key = NULL, *arg = NULL, *when = NULL;
	const char *name = "";
	size_t i;
	int r;

	if (node->type == YAML_MAPPING_NODE && rc_unique_keys(rc, node) != 0)
		return -1;
	for (pair = node->type == YAML_MAPPING_NODE ? node->data.mapping.pairs.start : NULL;
	    pair != NULL && pair < node->data.mapping.pairs.top; pair++) {
		k = yaml_document_get_node(rc->doc, pair->key);
		if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value,
		    "when") == 0)
			when = yaml_document_get_node(rc->doc, pair->value);
		else if (key == NULL) {
			key = k;
			arg = yaml_document_get_node(rc->doc, pair->value);
		} else {
			key = NULL;
			break;
		}
	}
	if (key == NULL) {
		rc_error(rc, node, "each op must be a mapping with one op key and, optionally, "
		    "when, e.g. '- unwrap: data'");
		return -1;
	}
	name = key->type == YAML_SCALAR_NODE ? (const char *)key->data.scalar.value : "";
	for (i = 0; i < RC_NOPS; i++)
		if (strcmp(name, rc_op_names[i]) == 0)
			break;
	if (i == RC_NOPS) {
		rc_error(rc, key, "unknown op '%s' (expected unwrap, wrap, rename, drop, keep, set, "
		    "status_from)", name);
		return -1;
	}
	op->kind = (enum rewrite_op_kind)i;
	switch (op->kind) {
	case REWRITE_UNWRAP:
	case REWRITE_WRAP:
		r = rc_path(rc, arg, name, &op->path);
		break;
	case REWRITE_RENAME:
		r = rc_rename(rc, arg, op);
		break;
	case REWRITE_DROP:
	case REWRITE_KEEP:
		r = rc_paths(rc, arg, op);
		break;
	case REWRITE_SET:
		r = rc_set(rc, arg, op);
		break;
	default:
		r = rc_status_from(rc, arg, op);
		if (r == 0 && rc->direction == REWRITE_REQUEST) {
			rc_error(rc, key, "status_from works on responses only");
			r = -1;
		}
		break;
	}
	if (when == NULL)
		return r;
	if ((op->when = jcond_parse(rc->cfg, rc->doc, when)) == NULL) {
		rc->nerr++;
		return -1;
	}
	if (rc->direction == REWRITE_REQUEST && jcond_uses_status(op->when)) {
		rc_error(rc, when, "when: a request has no status to test");
		return -1;
	}
	return r;
}

static struct rewrite_program *
rc_program(struct rc *rc, yaml_node_t *node)
{
	struct rewrite_program *prog;
	const struct rewrite_op *op;
	yaml_node_item_t *it;
	size_t n, i, j;

	if (node->type != YAML_SEQUENCE_NODE) {
		rc_error(rc, node, "expected a list of ops, e.g. [ { unwrap: data } ]");
		return NULL;
	}
	n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	if ((prog = calloc(1, sizeof(*prog))) == NULL ||
	    (n > 0 && (prog->ops = calloc(n, sizeof(*prog->ops))) == NULL)) {
		free(prog);
		rc_error(rc, node, "out of memory");
		return NULL;
	}
	for (it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
		op = &prog->ops[prog->nops];
		rc_op(rc, yaml_document_get_node(rc->doc, *it), &prog->ops[prog->nops]);
		for (i = 0; i < op->nitems; i++)
			for (j = 0; j < op->items[i].nval; j++)
				prog->vars |= 1u << op->items[i].val[j].var;
		prog->nops++;
	}
	if (rc->nerr > 0) {
		rewrite_program_free(prog);
		return NULL;
	}
	return prog;
}

int
rewrite_program_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node,
    enum rewrite_direction direction, struct rewrite_program **out)
{
	struct rc rc = { .cfg = ctx, .doc = doc, .direction = direction,
		.pattern = config_parse_pattern(ctx) };

	*out = NULL;
	if (node->type == YAML_SEQUENCE_NODE &&
	    node->data.sequence.items.top == node->data.sequence.items.start)
		return 0;
	*out = rc_program(&rc, node);
	return rc.nerr > 0 ? -1 : 0;
}

struct rewrite_program *
rewrite_program_from_yaml(const char *yaml, size_t len, char *errbuf, size_t errlen)
{
	return rewrite_program_from_yaml_route(yaml, len, NULL, errbuf, errlen);
}

struct rewrite_program *
rewrite_program_from_yaml_route(const char *yaml, size_t len, const char *path_template,
    char *errbuf, size_t errlen)
{
	struct rc rc = { .direction = REWRITE_RESPONSE };
	struct route_pattern *pattern = NULL;
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *root;
	struct rewrite_program *prog = NULL;
	const char *why;
	char *errors, *nl;

	if (errlen > 0)
		errbuf[0] = '\0';
	if (path_template != NULL &&
	    (pattern = route_pattern_new(path_template, &why)) == NULL) {
		snprintf(errbuf, errlen, "path template: %s", why);
		return NULL;
	}
	rc.pattern = pattern;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(errbuf, errlen, "out of memory");
		route_pattern_free(pattern);
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(errbuf, errlen, "%zu:%zu: %s", parser.problem_mark.line + 1,
		    parser.problem_mark.column + 1, parser.problem ? parser.problem : "bad YAML");
		yaml_parser_delete(&parser);
		route_pattern_free(pattern);
		return NULL;
	}
	rc.doc = &doc;
	rc.cfg = config_parse_new("");
	if ((root = yaml_document_get_root_node(&doc)) == NULL)
		snprintf(errbuf, errlen, "1:1: empty document");
	else
		prog = rc_program(&rc, root);
	/* The first error by position, without the (empty) file name: "LINE:COL: message". */
	if ((errors = config_parse_errors(rc.cfg)) != NULL) {
		if ((nl = strchr(errors, '\n')) != NULL)
			*nl = '\0';
		snprintf(errbuf, errlen, "%s", errors + 1);
		free(errors);
	}
	config_parse_free(rc.cfg);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	route_pattern_free(pattern);
	return prog;
}

void
rewrite_program_free(struct rewrite_program *prog)
{
	size_t i;

	if (prog == NULL)
		return;
	for (i = 0; i < prog->nops; i++)
		rc_op_free(&prog->ops[i]);
	free(prog->ops);
	free(prog);
}

int
rewrite_program_uses(const struct rewrite_program *prog, enum rewrite_var var)
{
	return prog != NULL && (prog->vars & (1u << var)) != 0;
}

void
rewrite_program_names(const struct rewrite_program *prog, enum rewrite_var var,
    void (*fn)(void *arg, const char *name, size_t len), void *arg)
{
	const struct rewrite_item *it;
	size_t i, j, k;

	if (!rewrite_program_uses(prog, var))
		return;
	for (i = 0; i < prog->nops; i++)
		for (j = 0; j < prog->ops[i].nitems; j++) {
			it = &prog->ops[i].items[j];
			for (k = 0; k < it->nval; k++)
				if (it->val[k].var == var)
					fn(arg, it->val[k].s, it->val[k].len);
		}
}
