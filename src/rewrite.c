/*
 * Envelope ops applied to one JSON body.  The body is never decoded: the document is a small
 * tree of objects whose members point into the input, built lazily from envelope.c, and the
 * output is a list of spans: untouched input ranges plus short generated literals.
 */
#include "rewrite.h"
#include "grow.h"
#include "envelope.h"
#include "jvalid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Arrays kept between bodies up to this size each; larger ones are one large body's. */
#define REWRITE_WARM_BYTES (256 * 1024)
/* Spans handed to a sink at once. */
#define REWRITE_SINK_BATCH 256

enum rw_kind {
	RW_RAW,                         /* an input value not looked into */
	RW_OBJ,                         /* an object with a member list */
	RW_LIT,                         /* program-owned JSON text */
	RW_CTXLIT                       /* JSON text in ctx->lit (resolved $variables) */
};

struct rw_node {
	unsigned char kind;
	unsigned char type;             /* RAW: enum envelope_type */
	unsigned char dirty;            /* OBJ: output differs from its input span */
	unsigned char checked;          /* RAW: known to be balanced, span exact */
	unsigned depth;                 /* input nesting: the body's value is 1 */
	int parent;
	const char *p;                  /* RAW, parsed OBJ, LIT */
	size_t len;
	size_t off;                     /* CTXLIT */
	int head, tail;                 /* OBJ members */
};

/* A member costs this much and no node while it is the input's: nodes are made on use. */
struct rw_member {
	const char *key;                /* quoted key: input span or program literal */
	const char *vsrc;               /* input: the original value, or NULL once replaced */
	uint32_t keylen;
	uint32_t vlen;                  /* of vsrc */
	int value;                      /* node of the value; -1 while it is the input's vsrc */
	int next;
	unsigned seq;                   /* consecutive in one input object: may splice as one */
	unsigned renamed;               /* op number that renamed it */
	unsigned char vtype;            /* enum envelope_type of vsrc */
	unsigned char input_key;        /* the key is the input's: the member starts there */
};

struct rw_work {
	int node;
	unsigned level;
	size_t lo, hi;
};

struct rw_frame {
	int node;
	int cursor;                     /* next member, -1 at the end */
	int started;
	int first;
	unsigned last_seq;              /* last member emitted as a pristine input span */
	const char *last_end;
};

struct rewrite_ctx {
	unsigned max_depth;
	size_t max_members;             /* tokenized in one body, all objects together */
	size_t tokenized;
	struct envelope env;
	struct jcond_scratch *scratch;  /* when: inside set literals */
	int (*sink)(void *arg, const struct rewrite_span *spans, size_t n);
	void *sink_arg;
	size_t total;                   /* output bytes so far */
	const char *body;
	size_t len;
	const char *error;
	int invalid;                    /* error says the body is not JSON */
	unsigned seq;
	struct rw_node *nodes;
	size_t nnodes, nodes_cap;
	struct rw_member *members;
	size_t nmembers, members_cap;
	char *lit;
	size_t litlen, lit_cap;
	struct rewrite_span *spans;
	size_t nspans, spans_cap;
	struct rw_work *work;
	size_t nwork, work_cap;
	int *targets;
	size_t ntargets, targets_cap;
	struct rw_frame *frames;
	size_t frames_cap;
};

static int rewrite_member_cb(void *arg, const struct envelope_member *em);

struct rewrite_ctx *
rewrite_ctx_new(unsigned max_depth, size_t max_members)
{
	struct rewrite_ctx *ctx;

	if ((ctx = calloc(1, sizeof(*ctx))) == NULL)
		return NULL;
	ctx->max_depth = max_depth;
	ctx->max_members = max_members;
	envelope_init(&ctx->env);
	ctx->env.member_cb = rewrite_member_cb;
	ctx->env.member_arg = ctx;
	return ctx;
}

void
rewrite_ctx_sink(struct rewrite_ctx *ctx,
    int (*cb)(void *arg, const struct rewrite_span *spans, size_t n), void *arg)
{
	ctx->sink = cb;
	ctx->sink_arg = arg;
}

/* Free *arr when it holds more than REWRITE_WARM_BYTES. */
static void
rewrite_shrink(void *arrp, size_t *cap, size_t elsize)
{
	void **arr = arrp;

	if (*cap * elsize <= REWRITE_WARM_BYTES)
		return;
	free(*arr);
	*arr = NULL;
	*cap = 0;
}

void
rewrite_ctx_release(struct rewrite_ctx *ctx)
{
	rewrite_shrink(&ctx->nodes, &ctx->nodes_cap, sizeof(*ctx->nodes));
	rewrite_shrink(&ctx->members, &ctx->members_cap, sizeof(*ctx->members));
	rewrite_shrink(&ctx->lit, &ctx->lit_cap, 1);
	rewrite_shrink(&ctx->spans, &ctx->spans_cap, sizeof(*ctx->spans));
	rewrite_shrink(&ctx->work, &ctx->work_cap, sizeof(*ctx->work));
	rewrite_shrink(&ctx->targets, &ctx->targets_cap, sizeof(*ctx->targets));
	rewrite_shrink(&ctx->frames, &ctx->frames_cap, sizeof(*ctx->frames));
	ctx->nnodes = ctx->nmembers = ctx->litlen = ctx->nspans = 0;
}

void
rewrite_ctx_free(struct rewrite_ctx *ctx)
{
	if (ctx == NULL)
		return;
	envelope_free(&ctx->env);
	jcond_scratch_free(ctx->scratch);
	free(ctx->nodes);
	free(ctx->members);
	free(ctx->lit);
	free(ctx->spans);
	free(ctx->work);
	free(ctx->targets);
	free(ctx->frames);
	free(ctx);
}

static int
rewrite_fail(struct rewrite_ctx *ctx, const char *why)
{
	if (ctx->error == NULL)
		ctx->error = why;
	return -1;
}

/* Like rewrite_fail, for a body that is not JSON. */
static int
rewrite_invalid(struct rewrite_ctx *ctx)
{
	if (ctx->error == NULL) {
		ctx->error = "invalid JSON";
		ctx->invalid = 1;
	}
	return -1;
}

static int
rewrite_node_new(struct rewrite_ctx *ctx, enum rw_kind kind)
{
	struct rw_node *n;

	if (grow_array(&ctx->nodes, &ctx->nodes_cap, ctx->nnodes + 1, sizeof(*n), 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	n = &ctx->nodes[ctx->nnodes];
	memset(n, 0, sizeof(*n));
	n->kind = (unsigned char)kind;
	n->parent = -1;
	n->head = n->tail = -1;
	if (kind == RW_OBJ) {
		n->type = ENVELOPE_OBJECT;
		n->dirty = 1;
	}
	return (int)ctx->nnodes++;
}

static void
rewrite_dirty(struct rewrite_ctx *ctx, int idx)
{
	while (idx >= 0 && !ctx->nodes[idx].dirty) {
		ctx->nodes[idx].dirty = 1;
		idx = ctx->nodes[idx].parent;
	}
}

/* Append a member to object obj; key is a quoted JSON key owned by the program. */
static int
rewrite_member_add(struct rewrite_ctx *ctx, int obj, const char *key, size_t keylen, int value)
{
	struct rw_member *m;
	struct rw_node *n;
	int idx;

	if (grow_array(&ctx->members, &ctx->members_cap, ctx->nmembers + 1, sizeof(*m), 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	idx = (int)ctx->nmembers++;
	m = &ctx->members[idx];
	memset(m, 0, sizeof(*m));
	m->key = key;
	m->keylen = (uint32_t)keylen;
	m->value = value;
	m->next = -1;
	n = &ctx->nodes[obj];
	if (n->tail < 0)
		n->head = idx;
	else
		ctx->members[n->tail].next = idx;
	n->tail = idx;
	ctx->nodes[value].parent = obj;
	rewrite_dirty(ctx, obj);
	return 0;
}

/* The node of member mi's value (mi is in object obj), made on first use. */
static int
rewrite_member_node(struct rewrite_ctx *ctx, int obj, int mi)
{
	struct rw_node *n;
	int v;

	if (ctx->members[mi].value >= 0)
		return ctx->members[mi].value;
	if ((v = rewrite_node_new(ctx, RW_RAW)) < 0)
		return -1;
	n = &ctx->nodes[v];
	n->type = ctx->members[mi].vtype;
	n->checked = 1;
	n->depth = ctx->nodes[obj].depth + 1;
	n->parent = obj;
	n->p = ctx->members[mi].vsrc;
	n->len = ctx->members[mi].vlen;
	ctx->members[mi].value = v;
	return v;
}

static int
rewrite_envelope_err(struct rewrite_ctx *ctx, int r)
{
	switch (r) {
	case ENVELOPE_ERR_DEPTH:
		return rewrite_fail(ctx, "JSON nested too deep");
	case ENVELOPE_ERR_NOMEM:
		return rewrite_fail(ctx, "out of memory");
	case ENVELOPE_ERR_MEMBERS:
		return rewrite_fail(ctx, "more members to edit than limits.max_members");
	default:
		return rewrite_invalid(ctx);
	}
}

/* Members of the object being tokenized go straight into the ctx's member list. */
static int
rewrite_member_cb(void *arg, const struct envelope_member *em)
{
	struct rewrite_ctx *ctx = arg;

	if (grow_array(&ctx->members, &ctx->members_cap, ctx->nmembers + 1,
	    sizeof(*ctx->members), 16) != 0)
		return ENVELOPE_ERR_NOMEM;
	ctx->members[ctx->nmembers] = (struct rw_member){
		.key = em->key, .keylen = (uint32_t)em->keylen, .vsrc = em->val,
		.vlen = (uint32_t)em->vallen, .value = -1, .next = (int)ctx->nmembers + 1,
		.seq = ctx->seq++, .vtype = em->type, .input_key = 1,
	};
	ctx->nmembers++;
	return 0;
}

/*
 * Make node idx an object with members, tokenizing it on first use.  Returns 0 for an object,
 * 1 for any other value, -1 on invalid input.
 */
static int
rewrite_object(struct rewrite_ctx *ctx, int idx)
{
	struct rw_node *n = &ctx->nodes[idx];
	size_t start, end, first;
	int r;

	if (n->kind == RW_OBJ)
		return 0;
	if (n->kind != RW_RAW || n->type != ENVELOPE_OBJECT)
		return 1;
	start = (size_t)(n->p - ctx->body);
	if (n->depth > ctx->max_depth)
		return rewrite_fail(ctx, "JSON nested too deep");
	first = ctx->nmembers;
	ctx->env.max_members = ctx->max_members - ctx->tokenized;
	r = envelope_parse(&ctx->env, ctx->body, n->checked ? start + n->len : ctx->len, start,
	    ctx->max_depth - n->depth + 1, &end);
	if (r != 0)
		return rewrite_envelope_err(ctx, r);
	ctx->tokenized += ctx->env.nmembers;
	n = &ctx->nodes[idx];
	if (!n->checked) {
		/* The body's own value: only whitespace may follow it. */
		if (envelope_skip_ws(ctx->body, ctx->len, end) != ctx->len)
			return rewrite_invalid(ctx);
		n->len = end - start;
		n->checked = 1;
	}
	n->kind = RW_OBJ;
	n->dirty = 0;
	ctx->seq++;                     /* members of different objects are never consecutive */
	if (ctx->nmembers == first) {
		n->head = n->tail = -1;
		return 0;
	}
	ctx->members[ctx->nmembers - 1].next = -1;
	n->head = (int)first;
	n->tail = (int)ctx->nmembers - 1;
	return 0;
}

/*
 * A quoted key against a name, as envelope_string_eq, the common cases first: an escape only
 * makes a key longer than the text it spells, and a key without one is that text, so most
 * keys are told apart by their length or first byte.
 */
static inline int
rewrite_key_eq(const char *key, size_t keylen, const char *name, size_t len)
{
	size_t i;

	if (keylen < len + 2)
		return 0;
	if (len > 0 && key[1] != name[0] && key[1] != '\\')
		return 0;
	if (keylen > len + 2)
		return envelope_string_eq(key, keylen, name, len);
	/* Keys are short: a loop beats two library calls. */
	for (i = 0; i < len; i++)
		if (key[i + 1] != name[i] || name[i] == '\\')
			return 0;
	return 1;
}

static int
rewrite_key_is(const struct rw_member *m, const struct rewrite_key *k)
{
	return rewrite_key_eq(m->key, m->keylen, k->name, k->len);
}

/* The member of object node called name, the last of duplicate keys as JSON parsers take;
 * -1 when there is none. */
static int
rewrite_member_named(const struct rewrite_ctx *ctx, int node, const char *name, size_t len)
{
	int m, found = -1;

	for (m = ctx->nodes[node].head; m >= 0; m = ctx->members[m].next)
		if (rewrite_key_eq(ctx->members[m].key, ctx->members[m].keylen, name, len))
			found = m;
	return found;
}

/*
 * The value at path, taking the last occurrence of a duplicate key as JSON parsers do.
 * Returns the node, -1 on invalid input, -2 when absent or below a non-object.
 */
static int
rewrite_child(struct rewrite_ctx *ctx, int node, const char *name, size_t len)
{
	int found, r;

	if ((r = rewrite_object(ctx, node)) != 0)
		return r < 0 ? -1 : -2;
	if ((found = rewrite_member_named(ctx, node, name, len)) < 0)
		return -2;
	return rewrite_member_node(ctx, node, found) < 0 ? -1 : ctx->members[found].value;
}

static int
rewrite_find(struct rewrite_ctx *ctx, int node, const struct rewrite_path *path)
{
	size_t level;

	for (level = 0; level < path->nseg && node >= 0; level++)
		node = rewrite_child(ctx, node, path->seg[level].name, path->seg[level].len);
	return node;
}

/* A node's JSON text and type; the text is NULL for an object edited since it was read. */
static const char *
rewrite_node_json(struct rewrite_ctx *ctx, int v, size_t *len, unsigned char *type)
{
	const struct rw_node *n = &ctx->nodes[v];
	const char *p = n->kind == RW_CTXLIT ? ctx->lit + n->off : n->p;

	*len = n->len;
	switch (n->kind) {
	case RW_RAW:
		*type = n->type;
		return p;
	case RW_OBJ:
		*type = ENVELOPE_OBJECT;
		return n->dirty ? NULL : p;
	default:
		*type = p[0] == '{' || p[0] == '[' || p[0] == '"' ? (unsigned char)p[0] :
		    ENVELOPE_PRIMITIVE;
		return p;
	}
}

struct rewrite_look {
	struct rewrite_ctx *ctx;
	int root;
};

/* when: reads the envelope as the ops before have left it. */
static int
rewrite_lookup_cb(void *arg, const struct jcond_seg *path, size_t nseg, const char **json,
    size_t *len, unsigned char *type)
{
	struct rewrite_look *lk = arg;
	struct rewrite_ctx *ctx = lk->ctx;
	const struct rw_member *m;
	int node = lk->root, mi, r;
	size_t i;

	*type = 0;
	for (i = 0; i < nseg; i++) {
		if ((r = rewrite_object(ctx, node)) < 0)
			return -1;
		if (r == 0) {
			if ((mi = rewrite_member_named(ctx, node, path[i].name, path[i].len)) < 0)
				return 0;
			m = &ctx->members[mi];
			if (m->value < 0 && i + 1 == nseg) {
				/* The input's value: read in place, no node made for it. */
				*json = m->vsrc;
				*len = m->vlen;
				*type = m->vtype;
				return 0;
			}
			if (m->value < 0 && m->vtype != ENVELOPE_OBJECT)
				return 0;       /* nothing to look into */
			if ((node = rewrite_member_node(ctx, node, mi)) < 0)
				return -1;
			continue;
		}
		/* Not an object: a literal a set op put there holds the rest, or nothing. */
		if (ctx->nodes[node].kind != RW_LIT && ctx->nodes[node].kind != RW_CTXLIT)
			return 0;
		if (ctx->scratch == NULL &&
		    (ctx->scratch = jcond_scratch_new(ctx->max_depth, ctx->max_members)) == NULL)
			return rewrite_fail(ctx, "out of memory");
		*json = rewrite_node_json(ctx, node, len, type);
		return jcond_find(ctx->scratch, *json, *len, path + i, nseg - i, json, len, type);
	}
	*json = rewrite_node_json(ctx, node, len, type);
	return 0;
}

static int
rewrite_push(struct rewrite_ctx *ctx, int node, unsigned level, size_t lo, size_t hi)
{
	if (grow_array(&ctx->work, &ctx->work_cap, ctx->nwork + 1, sizeof(*ctx->work), 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	ctx->work[ctx->nwork++] = (struct rw_work){ node, level, lo, hi };
	return 0;
}

/*
 * Collect in ctx->targets every object holding the last key of path: every occurrence of a
 * duplicate key is followed.  With create, missing objects on the way are added (set).
 */
static int
rewrite_parents(struct rewrite_ctx *ctx, int root, const struct rewrite_path *path, int create)
{
	struct rw_work w;
	const struct rewrite_key *seg;
	int m, r, child, any;

	ctx->ntargets = 0;
	ctx->nwork = 0;
	if (rewrite_push(ctx, root, 0, 0, 0) != 0)
		return -1;
	while (ctx->nwork > 0) {
		w = ctx->work[--ctx->nwork];
		if (w.level + 1 == path->nseg) {
			if (grow_array(&ctx->targets, &ctx->targets_cap, ctx->ntargets + 1,
			    sizeof(int), 16) != 0)
				return rewrite_fail(ctx, "out of memory");
			ctx->targets[ctx->ntargets++] = w.node;
			continue;
		}
		seg = &path->seg[w.level];
		any = 0;
		for (m = ctx->nodes[w.node].head; m >= 0; m = ctx->members[m].next) {
			if (!rewrite_key_is(&ctx->members[m], seg))
				continue;
			any = 1;
			if ((child = rewrite_member_node(ctx, w.node, m)) < 0 ||
			    (r = rewrite_object(ctx, child)) < 0)
				return -1;
			if (r > 0) {
				if (create)
					return rewrite_fail(ctx, "set: path crosses a non-object");
				continue;
			}
			if (rewrite_push(ctx, child, w.level + 1, 0, 0) != 0)
				return -1;
		}
		if (!any && create) {
			if ((child = rewrite_node_new(ctx, RW_OBJ)) < 0 ||
			    rewrite_member_add(ctx, w.node, seg->json, seg->json_len, child) != 0 ||
			    rewrite_push(ctx, child, w.level + 1, 0, 0) != 0)
				return -1;
		}
	}
	return 0;
}

static int
rewrite_need_object(struct rewrite_ctx *ctx, int root, const char *op)
{
	int r = rewrite_object(ctx, root);

	if (r > 0)
		return rewrite_fail(ctx, op);
	return r;
}

static void rewrite_unlink_matching(struct rewrite_ctx *ctx, int obj,
    const struct rewrite_key *key, unsigned keep_op);

static int
rewrite_op_rename(struct rewrite_ctx *ctx, int root, const struct rewrite_op *op, unsigned opno)
{
	const struct rewrite_item *it;
	struct rw_member *m;
	size_t i, t;
	int mi, obj, any;

	if (rewrite_need_object(ctx, root, "rename: body is not an object") != 0)
		return -1;
	for (i = 0; i < op->nitems; i++) {
		it = &op->items[i];
		if (rewrite_parents(ctx, root, &it->path, 0) != 0)
			return -1;
		for (t = 0; t < ctx->ntargets; t++) {
			obj = ctx->targets[t];
			any = 0;
			for (mi = ctx->nodes[obj].head; mi >= 0; mi = m->next) {
				m = &ctx->members[mi];
				/* A key renamed by this op keeps its new name: {a: b, b: a} swaps. */
				if (m->renamed == opno ||
				    !rewrite_key_is(m, &it->path.seg[it->path.nseg - 1]))
					continue;
				m->key = it->to.json;
				m->keylen = (uint32_t)it->to.json_len;
				m->input_key = 0;
				m->renamed = opno;
				any = 1;
				rewrite_dirty(ctx, obj);
			}
			/* The renamed member replaces one already called so, as Kong's rename does:
			 * a valid object never gets a duplicate key. */
			if (any && it->replaces)
				rewrite_unlink_matching(ctx, obj, &it->to, opno);
		}
	}
	return 0;
}

/* Unlink obj's members called key, except those op keep_op renamed (0: none). */
static void
rewrite_unlink_matching(struct rewrite_ctx *ctx, int obj, const struct rewrite_key *key,
    unsigned keep_op)
{
	struct rw_node *n = &ctx->nodes[obj];
	int mi, prev = -1, next;

	for (mi = n->head; mi >= 0; mi = next) {
		next = ctx->members[mi].next;
		if ((keep_op != 0 && ctx->members[mi].renamed == keep_op) ||
		    !rewrite_key_is(&ctx->members[mi], key)) {
			prev = mi;
			continue;
		}
		if (prev < 0)
			n->head = next;
		else
			ctx->members[prev].next = next;
		if (n->tail == mi)
			n->tail = prev;
		rewrite_dirty(ctx, obj);
	}
}

static int
rewrite_op_drop(struct rewrite_ctx *ctx, int root, const struct rewrite_op *op)
{
	const struct rewrite_item *it;
	size_t i, t;

	if (rewrite_need_object(ctx, root, "drop: body is not an object") != 0)
		return -1;
	for (i = 0; i < op->nitems; i++) {
		it = &op->items[i];
		if (rewrite_parents(ctx, root, &it->path, 0) != 0)
			return -1;
		for (t = 0; t < ctx->ntargets; t++)
			rewrite_unlink_matching(ctx, ctx->targets[t], &it->path.seg[it->path.nseg - 1],
			    0);
	}
	return 0;
}

/*
 * keep: items are sorted by path, so the paths under one prefix are a contiguous range and
 * each object is filtered against the keys at its level.
 */
static int
rewrite_op_keep(struct rewrite_ctx *ctx, int root, const struct rewrite_op *op)
{
	const struct rewrite_item *items = op->items;
	struct rw_work w;
	struct rw_node *n;
	size_t a, b;
	int mi, prev, next, child, r;

	if (rewrite_need_object(ctx, root, "keep: body is not an object") != 0)
		return -1;
	ctx->nwork = 0;
	if (rewrite_push(ctx, root, 0, 0, op->nitems) != 0)
		return -1;
	while (ctx->nwork > 0) {
		w = ctx->work[--ctx->nwork];
		prev = -1;
		for (mi = ctx->nodes[w.node].head; mi >= 0; mi = next) {
			next = ctx->members[mi].next;
			for (a = w.lo; a < w.hi; a++)
				if (rewrite_key_is(&ctx->members[mi], &items[a].path.seg[w.level]))
					break;
			if (a == w.hi) {
				n = &ctx->nodes[w.node];
				if (prev < 0)
					n->head = next;
				else
					ctx->members[prev].next = next;
				if (n->tail == mi)
					n->tail = prev;
				rewrite_dirty(ctx, w.node);
				continue;
			}
			prev = mi;
			for (b = a + 1; b < w.hi; b++)
				if (!rewrite_key_is(&ctx->members[mi], &items[b].path.seg[w.level]))
					break;
			if (items[a].path.nseg == w.level + 1)
				continue;       /* kept whole */
			if ((child = rewrite_member_node(ctx, w.node, mi)) < 0 ||
			    (r = rewrite_object(ctx, child)) < 0)
				return -1;
			if (r == 0 && rewrite_push(ctx, child, w.level + 1, a, b) != 0)
				return -1;
		}
	}
	return 0;
}

static void
rewrite_lit_add(struct rewrite_ctx *ctx, const char *p, size_t len)
{
	memcpy(ctx->lit + ctx->litlen, p, len);
	ctx->litlen += len;
}

static void
rewrite_lit_string(struct rewrite_ctx *ctx, const char *p, size_t len)
{
	ctx->lit[ctx->litlen++] = '"';
	ctx->litlen += rewrite_json_escape(ctx->lit + ctx->litlen, p, len);
	ctx->lit[ctx->litlen++] = '"';
}

static const struct rewrite_str *
rewrite_header(const struct rewrite_vars *vars, const char *name, size_t len,
    struct rewrite_str *value)
{
	if (vars == NULL || vars->header_cb == NULL ||
	    !vars->header_cb(vars->header_arg, name, len, value))
		return NULL;
	return value;
}

static const struct rewrite_str *
rewrite_json_field(const struct rewrite_vars *vars, const char *path, size_t len,
    struct rewrite_str *value)
{
	if (vars == NULL || vars->json_cb == NULL || !vars->json_cb(vars->json_arg, path, len,
	    value))
		return NULL;
	return value;
}

static const struct rewrite_str *
rewrite_path_capture(const struct rewrite_vars *vars, const char *name, size_t len,
    struct rewrite_str *value)
{
	if (vars == NULL || vars->path_cb == NULL || !vars->path_cb(vars->path_arg, name, len,
	    value))
		return NULL;
	return value;
}

/* Resolve a set value into ctx->lit; returns a node for it. */
static const struct rewrite_str *
rewrite_jwt_claim(const struct rewrite_vars *vars, const char *path, size_t len,
    struct rewrite_str *value)
{
	if (vars == NULL || vars->jwt_cb == NULL || !vars->jwt_cb(vars->jwt_arg, path, len, value))
		return NULL;
	return value;
}

static int
rewrite_value(struct rewrite_ctx *ctx, const struct rewrite_item *it,
    const struct rewrite_vars *vars)
{
	static const struct rewrite_str empty = { "", 0 };
	const struct rewrite_piece *pc;
	const struct rewrite_str *s;
	struct rewrite_str hv;
	char tbuf[40];
	struct tm tm;
	time_t t;
	size_t i, need = 0, off;
	int v;

	if (it->nval == 1 && it->val[0].var == REWRITE_VAR_NONE) {
		if ((v = rewrite_node_new(ctx, RW_LIT)) < 0)
			return -1;
		ctx->nodes[v].p = it->val[0].s;
		ctx->nodes[v].len = it->val[0].len;
		return v;
	}
	for (i = 0; i < it->nval; i++) {
		pc = &it->val[i];
		switch (pc->var) {
		case REWRITE_VAR_NONE:
			need += pc->len;
			break;
		case REWRITE_VAR_REQUEST_ID: need += 6 * (vars ? vars->request_id.len : 0) + 2; break;
		case REWRITE_VAR_ROUTE: need += 6 * (vars ? vars->route.len : 0) + 2; break;
		case REWRITE_VAR_UPSTREAM: need += 6 * (vars ? vars->upstream.len : 0) + 2; break;
		case REWRITE_VAR_REMOTE_ADDR: need += 6 * (vars ? vars->remote_addr.len : 0) + 2; break;
		case REWRITE_VAR_SSL_CLIENT_S_DN:
			need += 6 * (vars ? vars->ssl_client_s_dn.len : 0) + 2;
			break;
		case REWRITE_VAR_SSL_CLIENT_VERIFY:
			need += 6 * (vars ? vars->ssl_client_verify.len : 0) + 2;
			break;
		case REWRITE_VAR_TIME_ISO8601: need += sizeof(tbuf) + 2; break;
		case REWRITE_VAR_HEADER:
			s = rewrite_header(vars, pc->s, pc->len, &hv);
			need += s ? 6 * s->len + 2 : 4;
			break;
		case REWRITE_VAR_JSON:
			s = rewrite_json_field(vars, pc->s, pc->len, &hv);
			need += s ? 6 * s->len + 2 : 4;
			break;
		case REWRITE_VAR_PATH:
			s = rewrite_path_capture(vars, pc->s, pc->len, &hv);
			need += s ? 6 * s->len + 2 : 4;
			break;
		case REWRITE_VAR_JWT:
			s = rewrite_jwt_claim(vars, pc->s, pc->len, &hv);
			need += s ? 6 * s->len + 2 : 4;
			break;
		case REWRITE_VAR_API_KEY: need += 6 * (vars ? vars->api_key.len : 0) + 2; break;
		case REWRITE_VAR_CLIENT_ADDR: need += 6 * (vars ? vars->client_addr.len : 0) + 2; break;
		}
	}
	if (grow_array(&ctx->lit, &ctx->lit_cap, ctx->litlen + need, 1, 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	off = ctx->litlen;
	for (i = 0; i < it->nval; i++) {
		pc = &it->val[i];
		s = &empty;
		switch (pc->var) {
		case REWRITE_VAR_NONE:
			rewrite_lit_add(ctx, pc->s, pc->len);
			continue;
		case REWRITE_VAR_REQUEST_ID: if (vars) s = &vars->request_id; break;
		case REWRITE_VAR_ROUTE: if (vars) s = &vars->route; break;
		case REWRITE_VAR_UPSTREAM: if (vars) s = &vars->upstream; break;
		case REWRITE_VAR_REMOTE_ADDR: if (vars) s = &vars->remote_addr; break;
		case REWRITE_VAR_SSL_CLIENT_S_DN: if (vars) s = &vars->ssl_client_s_dn; break;
		case REWRITE_VAR_SSL_CLIENT_VERIFY: if (vars) s = &vars->ssl_client_verify; break;
		case REWRITE_VAR_TIME_ISO8601:
			t = vars ? (time_t)vars->now : 0;
			if (gmtime_r(&t, &tm) == NULL) {
				rewrite_lit_add(ctx, "null", 4);    /* no year that fits an int */
				continue;
			}
			rewrite_lit_string(ctx, tbuf,
			    strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S+00:00", &tm));
			continue;
		case REWRITE_VAR_HEADER:
			if ((s = rewrite_header(vars, pc->s, pc->len, &hv)) == NULL) {
				rewrite_lit_add(ctx, "null", 4);    /* header absent */
				continue;
			}
			break;
		case REWRITE_VAR_JSON:
			if ((s = rewrite_json_field(vars, pc->s, pc->len, &hv)) == NULL) {
				rewrite_lit_add(ctx, "null", 4);    /* field absent */
				continue;
			}
			break;
		case REWRITE_VAR_PATH:
			if ((s = rewrite_path_capture(vars, pc->s, pc->len, &hv)) == NULL) {
				rewrite_lit_add(ctx, "null", 4);    /* no captures */
				continue;
			}
			break;
		case REWRITE_VAR_JWT:
			if ((s = rewrite_jwt_claim(vars, pc->s, pc->len, &hv)) == NULL) {
				rewrite_lit_add(ctx, "null", 4);    /* no token, or no claim */
				continue;
			}
			break;
		case REWRITE_VAR_API_KEY:
			if (vars == NULL || vars->api_key.len == 0) {
				rewrite_lit_add(ctx, "null", 4);    /* no key */
				continue;
			}
			s = &vars->api_key;
			break;
		case REWRITE_VAR_CLIENT_ADDR: if (vars) s = &vars->client_addr; break;
		}
		rewrite_lit_string(ctx, s->p, s->len);
	}
	if ((v = rewrite_node_new(ctx, RW_CTXLIT)) < 0)
		return -1;
	ctx->nodes[v].off = off;
	ctx->nodes[v].len = ctx->litlen - off;
	return v;
}

static int
rewrite_op_set(struct rewrite_ctx *ctx, int root, const struct rewrite_op *op,
    const struct rewrite_vars *vars)
{
	const struct rewrite_item *it;
	const struct rewrite_key *key;
	struct rw_member *m;
	size_t i, t;
	int mi, obj, v, any;

	if (rewrite_need_object(ctx, root, "set: body is not an object") != 0)
		return -1;
	for (i = 0; i < op->nitems; i++) {
		it = &op->items[i];
		key = &it->path.seg[it->path.nseg - 1];
		if (rewrite_parents(ctx, root, &it->path, 1) != 0 ||
		    (v = rewrite_value(ctx, it, vars)) < 0)
			return -1;
		for (t = 0; t < ctx->ntargets; t++) {
			obj = ctx->targets[t];
			any = 0;
			for (mi = ctx->nodes[obj].head; mi >= 0; mi = m->next) {
				m = &ctx->members[mi];
				if (!rewrite_key_is(m, key))
					continue;
				/* Every occurrence gets the value, in place (nodes can be shared). */
				m->value = v;
				m->vsrc = NULL;
				any = 1;
			}
			if (any)
				rewrite_dirty(ctx, obj);
			else if (rewrite_member_add(ctx, obj, key->json, key->json_len, v) != 0)
				return -1;
		}
	}
	return 0;
}

/* Does map entry m take the JSON value json[0..len)? */
static int
rewrite_status_match(const struct rewrite_op *op, const struct rewrite_status_map *m,
    const char *json, size_t len)
{
	const char *num = json;
	size_t nlen = len;
	long long v;

	if (m->hi == 0)
		return jcond_scalar_eq(&m->key, json, len, op->strings);
	if (json[0] == '"' && (!op->strings || (num = jcond_numeric_string(json, len, &nlen)) ==
	    NULL))
		return 0;
	return envelope_is_number(num, nlen) && jcond_number_int(num, nlen, &v) &&
	    v >= m->lo && v <= m->hi;
}

/* The map's status for the field's value: exact keys first, then ranges; else the default,
 * else the status stays as it is. */
static int
rewrite_op_status(struct rewrite_ctx *ctx, int root, const struct rewrite_op *op, int *status)
{
	const char *json = NULL;
	size_t i, len = 0;
	unsigned char type = 0;
	int v, pass;

	if (rewrite_need_object(ctx, root, "status_from: body is not an object") != 0)
		return -1;
	if ((v = rewrite_find(ctx, root, &op->path)) == -1)
		return -1;
	if (v >= 0)
		json = rewrite_node_json(ctx, v, &len, &type);
	if (json != NULL && type != ENVELOPE_OBJECT && type != ENVELOPE_ARRAY)
		for (pass = 0; pass < 2; pass++)
			for (i = 0; i < op->nmap; i++)
				if ((op->map[i].hi != 0) == pass &&
				    rewrite_status_match(op, &op->map[i], json, len)) {
					*status = op->map[i].status;
					return 0;
				}
	if (op->def_status != 0)
		*status = op->def_status;
	return 0;
}

static int
rewrite_op_wrap(struct rewrite_ctx *ctx, int *root, const struct rewrite_op *op)
{
	size_t i = op->path.nseg;
	int obj, child = *root;

	while (i-- > 0) {
		if ((obj = rewrite_node_new(ctx, RW_OBJ)) < 0 ||
		    rewrite_member_add(ctx, obj, op->path.seg[i].json, op->path.seg[i].json_len,
		    child) != 0)
			return -1;
		child = obj;
	}
	*root = child;
	return 0;
}

static int
rewrite_op_unwrap(struct rewrite_ctx *ctx, int *root, const struct rewrite_op *op)
{
	int v;

	if (rewrite_need_object(ctx, *root, "unwrap: body is not an object") != 0)
		return -1;
	if ((v = rewrite_find(ctx, *root, &op->path)) == -1)
		return -1;
	if (v < 0)
		return rewrite_fail(ctx, "unwrap: key not found");
	ctx->nodes[v].parent = -1;
	*root = v;
	return 0;
}

/* Hand the spans before the last to the sink: the last may still grow. */
static int
rewrite_sink_flush(struct rewrite_ctx *ctx, size_t n)
{
	if (ctx->sink(ctx->sink_arg, ctx->spans, n) != 0)
		return rewrite_fail(ctx, "cannot write the output");
	memmove(ctx->spans, ctx->spans + n, (ctx->nspans - n) * sizeof(*ctx->spans));
	ctx->nspans -= n;
	return 0;
}

static int
rewrite_span(struct rewrite_ctx *ctx, const char *p, size_t len)
{
	struct rewrite_span *last;

	if (len == 0)
		return 0;
	ctx->total += len;
	if (ctx->nspans > 0) {
		last = &ctx->spans[ctx->nspans - 1];
		if (last->p + last->len == p) {
			last->len += len;
			return 0;
		}
	}
	if (ctx->sink != NULL && ctx->nspans == REWRITE_SINK_BATCH &&
	    rewrite_sink_flush(ctx, ctx->nspans - 1) != 0)
		return -1;
	if (grow_array(&ctx->spans, &ctx->spans_cap, ctx->nspans + 1, sizeof(*ctx->spans), 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	ctx->spans[ctx->nspans++] = (struct rewrite_span){ p, len };
	return 0;
}

/* A node emitted as one piece, or NULL when it is an object to walk. */
static const char *
rewrite_flat(struct rewrite_ctx *ctx, const struct rw_node *n)
{
	switch (n->kind) {
	case RW_RAW:
	case RW_LIT:
		return n->p;
	case RW_CTXLIT:
		return ctx->lit + n->off;
	default:
		return n->dirty ? NULL : n->p;
	}
}

/* Turn the tree under root into spans, with an explicit stack instead of recursion. */
static int
rewrite_emit(struct rewrite_ctx *ctx, int root)
{
	struct rw_frame *f;
	const struct rw_member *m;
	const char *flat, *src;
	size_t depth = 0, flen;
	int pristine;

	if (grow_array(&ctx->frames, &ctx->frames_cap, 1, sizeof(*f), 16) != 0)
		return rewrite_fail(ctx, "out of memory");
	ctx->frames[depth++] = (struct rw_frame){ .node = root };
	while (depth > 0) {
		f = &ctx->frames[depth - 1];
		if (!f->started) {
			if ((flat = rewrite_flat(ctx, &ctx->nodes[f->node])) != NULL) {
				if (rewrite_span(ctx, flat, ctx->nodes[f->node].len) != 0)
					return -1;
				depth--;
				continue;
			}
			f->started = 1;
			f->first = 1;
			f->cursor = ctx->nodes[f->node].head;
			if (rewrite_span(ctx, "{", 1) != 0)
				return -1;
		}
		if (f->cursor < 0) {
			if (rewrite_span(ctx, "}", 1) != 0)
				return -1;
			depth--;
			continue;
		}
		m = &ctx->members[f->cursor];
		f->cursor = m->next;
		if (m->value < 0) {
			flat = m->vsrc;
			flen = m->vlen;
		} else {
			flat = rewrite_flat(ctx, &ctx->nodes[m->value]);
			flen = ctx->nodes[m->value].len;
		}
		src = m->input_key ? m->key : NULL;
		pristine = src != NULL && m->vsrc != NULL && flat == m->vsrc;
		if (pristine && !f->first && f->last_end != NULL && m->seq == f->last_seq + 1) {
			/* Neighbours in the input: splice the comma between them too. */
			if (rewrite_span(ctx, f->last_end, (size_t)(flat + flen - f->last_end)) != 0)
				return -1;
			f->last_seq = m->seq;
			f->last_end = flat + flen;
			continue;
		}
		if (!f->first && src != NULL && rewrite_span(ctx, ",", 1) != 0)
			return -1;
		f->last_end = NULL;
		if (pristine) {
			f->first = 0;
			if (rewrite_span(ctx, src, (size_t)(flat + flen - src)) != 0)
				return -1;
			f->last_seq = m->seq;
			f->last_end = flat + flen;
			continue;
		}
		if (src != NULL && m->vsrc != NULL) {
			if (rewrite_span(ctx, src, (size_t)(m->vsrc - src)) != 0)
				return -1;
		} else if (src != NULL) {
			/* An input key whose value was replaced: the key, then a colon. */
			if (rewrite_span(ctx, src, m->keylen) != 0 || rewrite_span(ctx, ":", 1) != 0)
				return -1;
		} else if (rewrite_span(ctx, m->key - !f->first, m->keylen + 1 + !f->first) != 0)
			return -1;      /* program keys come as ,"key": */
		f->first = 0;
		if (flat != NULL) {
			if (rewrite_span(ctx, flat, flen) != 0)
				return -1;
			continue;
		}
		if (grow_array(&ctx->frames, &ctx->frames_cap, depth + 1, sizeof(*f), 16) != 0)
			return rewrite_fail(ctx, "out of memory");
		ctx->frames[depth++] = (struct rw_frame){ .node = m->value };
	}
	return 0;
}

int
rewrite_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *body, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out)
{
	const struct rewrite_op *op;
	struct rewrite_look look = { ctx, 0 };
	struct rw_node *n;
	size_t vs, end, i;
	int root, orig, r = 0, status = 0;
	unsigned char type;

	memset(out, 0, sizeof(*out));
	ctx->body = body;
	ctx->len = len;
	ctx->error = NULL;
	ctx->invalid = 0;
	ctx->nnodes = ctx->nmembers = ctx->litlen = ctx->nspans = 0;
	ctx->seq = 0;
	ctx->tokenized = 0;
	ctx->total = 0;
	if (len >= 3 && memcmp(body, "\xef\xbb\xbf", 3) == 0) {
		out->error = "body starts with a UTF-8 byte order mark (RFC 8259 forbids it)";
		out->invalid = 1;
		return -1;
	}
	vs = envelope_skip_ws(body, len, 0);
	if (vs >= len) {
		out->error = "empty body";
		out->invalid = 1;
		return -1;
	}
	if (mode == VALIDATE_FULL) {
		if ((r = jvalid_check(body, len, ctx->max_depth, NULL)) != 0) {
			out->error = r == JVALID_ERR_DEPTH ? "JSON nested too deep" : "invalid JSON";
			out->invalid = r != JVALID_ERR_DEPTH;
			return -1;
		}
	}
	if ((orig = root = rewrite_node_new(ctx, RW_RAW)) < 0)
		goto fail;
	n = &ctx->nodes[root];
	n->p = body + vs;
	n->len = len - vs;
	n->depth = 1;
	switch (body[vs]) {
	case '{': case '[': case '"':
		n->type = (unsigned char)body[vs];
		break;
	default:
		n->type = ENVELOPE_PRIMITIVE;
	}
	if (mode == VALIDATE_FULL) {
		/* Already proven valid: only the trailing whitespace needs trimming. */
		end = len;
		while (end > vs && (body[end - 1] == ' ' || body[end - 1] == '\n' ||
		    body[end - 1] == '\r' || body[end - 1] == '\t'))
			end--;
		n->len = end - vs;
		n->checked = 1;
	}
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		op = &prog->ops[i];
		if (op->when != NULL) {
			/* The status as the ops before left it: status_from may have set it. */
			look.root = root;
			r = jcond_eval_lookup(op->when, rewrite_lookup_cb, &look,
			    status != 0 ? status : vars != NULL ? vars->status : 0);
			if (r < 0)
				goto fail;
			if (r == 0)
				continue;
		}
		switch (op->kind) {
		case REWRITE_UNWRAP: r = rewrite_op_unwrap(ctx, &root, op); break;
		case REWRITE_WRAP: r = rewrite_op_wrap(ctx, &root, op); break;
		case REWRITE_RENAME: r = rewrite_op_rename(ctx, root, op, (unsigned)i + 1); break;
		case REWRITE_DROP: r = rewrite_op_drop(ctx, root, op); break;
		case REWRITE_KEEP: r = rewrite_op_keep(ctx, root, op); break;
		case REWRITE_SET: r = rewrite_op_set(ctx, root, op, vars); break;
		case REWRITE_STATUS_FROM: r = rewrite_op_status(ctx, root, op, &status); break;
		}
		if (r != 0)
			goto fail;
	}
	n = &ctx->nodes[orig];
	if (!n->checked) {
		/* The body was never looked into: it must still be one balanced value. */
		if ((r = envelope_value_end(body, len, vs, ctx->max_depth, &end, &type)) != 0) {
			rewrite_envelope_err(ctx, r);
			goto fail;
		}
		if (envelope_skip_ws(body, len, end) != len) {
			rewrite_invalid(ctx);
			goto fail;
		}
		n->len = end - vs;
		n->checked = 1;
	}
	if (root == orig && rewrite_flat(ctx, n) != NULL) {
		/* Unchanged: the body as received, surrounding whitespace included. */
		if (rewrite_span(ctx, body, len) != 0)
			goto fail;
	} else if (rewrite_emit(ctx, root) != 0)
		goto fail;
	if (ctx->sink != NULL && ctx->nspans > 0 && rewrite_sink_flush(ctx, ctx->nspans) != 0)
		goto fail;
	out->status = status;
	out->spans = ctx->spans;
	out->nspans = ctx->nspans;
	out->total_len = ctx->total;
	return 0;
fail:
	if (ctx->error == NULL)
		rewrite_invalid(ctx);
	out->error = ctx->error;
	out->invalid = ctx->invalid;
	return -1;
}

int
rewrite_set_values(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    const struct rewrite_vars *vars, struct rewrite_str *vals, size_t nvals)
{
	size_t i, j, k = 0;
	unsigned char type;
	int v;

	ctx->nnodes = ctx->nmembers = ctx->litlen = ctx->nspans = 0;
	ctx->error = NULL;
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		if (prog->ops[i].kind != REWRITE_SET)
			continue;
		for (j = 0; j < prog->ops[i].nitems; j++) {
			if (k == nvals || (v = rewrite_value(ctx, &prog->ops[i].items[j], vars)) < 0)
				return -1;
			vals[k++].len = (size_t)v;      /* the node, until ctx->lit stops moving */
		}
	}
	for (i = 0; i < k; i++)
		vals[i].p = rewrite_node_json(ctx, (int)vals[i].len, &vals[i].len, &type);
	return 0;
}
