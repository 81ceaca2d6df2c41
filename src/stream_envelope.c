/*
 * The body is scanned a byte at a time by one state machine.  The objects the buffered
 * engine tokenizes (those unwrap walks through, and the target the member ops edit) are read
 * with its checks: RFC 8259 structure, jsmn's strict strings and envelope_is_primitive; the
 * values below them only as jscan_skip does (strings and brackets balance, depth).  Each
 * member of the target is decided when its value begins, from its key alone, by running it
 * through the ops in order as rewrite.c would; set members that no key met are appended at
 * the closing brace.  The output follows rewrite_emit: a member kept next to the one before
 * it keeps the bytes between them, any other starts with a bare comma, and a changed object
 * loses the whitespace inside its braces and around the body.
 */
#include "stream_envelope.h"
#include "grow.h"
#include "envelope.h"
#include "jcond.h"
#include "jscan.h"
#include "jvalid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum senv_state {
	SE_BEFORE,                      /* whitespace before the body's value */
	SE_OBJ_START,                   /* after '{' of a tokenized object */
	SE_KEY,                         /* in a key */
	SE_COLON,                       /* after a key */
	SE_VALUE,                       /* after a key's colon */
	SE_AFTER_VALUE,                 /* after a member's value */
	SE_NEXT_KEY,                    /* after a comma */
	SE_STRING,                      /* in a string value */
	SE_PRIM,                        /* in a number or literal */
	SE_CONT,                        /* in an array or object not tokenized */
	SE_TRAIL,                       /* after the body's value */
	SE_BOM,                         /* what may be a byte order mark */
	SE_NOT_OBJECT,                  /* validate: full goes on to the end of a body that is
	                                 * not an object: invalid JSON is the error it gives */
	SE_ERROR
};

/* A member of the target object as the ops see it. */
struct senv_member {
	const char *key;                /* quoted key: the held input key or a program key */
	size_t keylen;
	int input_key;                  /* the key is the input's */
	const char *lit;                /* the value set ops put, NULL: the input's */
	size_t litlen;
	unsigned renamed;               /* op number + 1 that renamed it */
	int removed;
};

/* validate: full, as jvalid_check reads a whole body, a byte at a time. */
enum jv_state {
	JV_VALUE, JV_VALUE_OR_CLOSE, JV_KEY_OR_CLOSE, JV_KEY, JV_COLON, JV_AFTER, JV_STR,
	JV_ESC, JV_HEX, JV_UTF8, JV_NUM, JV_LIT
};

enum jv_num { JN_MINUS, JN_ZERO, JN_INT, JN_DOT, JN_FRAC, JN_E, JN_ESIGN, JN_EXP };

struct jv {
	enum jv_state state;
	int key;                        /* the string is a key */
	unsigned depth, max_depth;
	uint64_t kinds[JVALID_MAX_DEPTH / 64 + 1];  /* bit set: that level is an object */
	int hex, need;
	unsigned char lo, hi;           /* the next UTF-8 continuation byte's range */
	enum jv_num num;
	const char *lit;
	int lit_i;
};

static void
jv_init(struct jv *v, unsigned max_depth)
{
	v->state = JV_VALUE;
	v->depth = 0;
	v->max_depth = max_depth > JVALID_MAX_DEPTH ? JVALID_MAX_DEPTH : max_depth;
}

/* 1 when a number may end in this state. */
static int
jv_num_done(enum jv_num n)
{
	return n == JN_ZERO || n == JN_INT || n == JN_FRAC || n == JN_EXP;
}

/* Take byte c: 0, or a JVALID_ERR_*. */
static int
jv_byte(struct jv *v, unsigned char c)
{
	int obj;

again:
	switch (v->state) {
	case JV_VALUE_OR_CLOSE:
		if (c == ']') {
			v->depth--;
			v->state = JV_AFTER;
			return 0;
		}
		/* fall through */
	case JV_VALUE:
		switch (c) {
		case ' ': case '\t': case '\n': case '\r':
			return 0;
		case '{':
		case '[':
			obj = c == '{';
			if (++v->depth > v->max_depth)
				return JVALID_ERR_DEPTH;
			if (obj)
				v->kinds[v->depth >> 6] |= 1ULL << (v->depth & 63);
			else
				v->kinds[v->depth >> 6] &= ~(1ULL << (v->depth & 63));
			v->state = obj ? JV_KEY_OR_CLOSE : JV_VALUE_OR_CLOSE;
			return 0;
		case '"':
			v->key = 0;
			v->state = JV_STR;
			return 0;
		case 't':
			v->lit = "true";
			break;
		case 'f':
			v->lit = "false";
			break;
		case 'n':
			v->lit = "null";
			break;
		case '-':
			v->num = JN_MINUS;
			v->state = JV_NUM;
			return 0;
		case '0':
			v->num = JN_ZERO;
			v->state = JV_NUM;
			return 0;
		default:
			if (c < '1' || c > '9')
				return JVALID_ERR_SYNTAX;
			v->num = JN_INT;
			v->state = JV_NUM;
			return 0;
		}
		v->lit_i = 1;
		v->state = JV_LIT;
		return 0;
	case JV_KEY_OR_CLOSE:
		if (c == '}') {
			v->depth--;
			v->state = JV_AFTER;
			return 0;
		}
		/* fall through */
	case JV_KEY:
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			return 0;
		if (c != '"')
			return JVALID_ERR_SYNTAX;
		v->key = 1;
		v->state = JV_STR;
		return 0;
	case JV_COLON:
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			return 0;
		if (c != ':')
			return JVALID_ERR_SYNTAX;
		v->state = JV_VALUE;
		return 0;
	case JV_AFTER:
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			return 0;
		if (v->depth == 0)
			return JVALID_ERR_SYNTAX;
		obj = (v->kinds[v->depth >> 6] >> (v->depth & 63)) & 1;
		if (c == ',') {
			v->state = obj ? JV_KEY : JV_VALUE;
			return 0;
		}
		if (c != (obj ? '}' : ']'))
			return JVALID_ERR_SYNTAX;
		v->depth--;
		return 0;
	case JV_STR:
		if (c == '"') {
			v->state = v->key ? JV_COLON : JV_AFTER;
			return 0;
		}
		if (c == '\\') {
			v->state = JV_ESC;
			return 0;
		}
		if (c < 0x20)
			return JVALID_ERR_SYNTAX;
		if (c < 0x80)
			return 0;
		v->lo = 0x80;
		v->hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			v->need = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			v->need = 2;
			if (c == 0xe0)
				v->lo = 0xa0;   /* overlong */
			if (c == 0xed)
				v->hi = 0x9f;   /* a surrogate */
		} else if (c >= 0xf0 && c <= 0xf4) {
			v->need = 3;
			if (c == 0xf0)
				v->lo = 0x90;   /* overlong */
			if (c == 0xf4)
				v->hi = 0x8f;   /* above U+10FFFF */
		} else
			return JVALID_ERR_SYNTAX;
		v->state = JV_UTF8;
		return 0;
	case JV_UTF8:
		if (c < v->lo || c > v->hi)
			return JVALID_ERR_SYNTAX;
		v->lo = 0x80;
		v->hi = 0xbf;
		if (--v->need == 0)
			v->state = JV_STR;
		return 0;
	case JV_ESC:
		switch (c) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			v->state = JV_STR;
			return 0;
		case 'u':
			v->hex = 4;
			v->state = JV_HEX;
			return 0;
		}
		return JVALID_ERR_SYNTAX;
	case JV_HEX:
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return JVALID_ERR_SYNTAX;
		if (--v->hex == 0)
			v->state = JV_STR;
		return 0;
	case JV_LIT:
		if (c != (unsigned char)v->lit[v->lit_i])
			return JVALID_ERR_SYNTAX;
		if (v->lit[++v->lit_i] == '\0')
			v->state = JV_AFTER;
		return 0;
	case JV_NUM:
		if (c >= '0' && c <= '9') {
			switch (v->num) {
			case JN_MINUS: v->num = c == '0' ? JN_ZERO : JN_INT; return 0;
			case JN_ZERO: return JVALID_ERR_SYNTAX;
			case JN_DOT: v->num = JN_FRAC; return 0;
			case JN_E: case JN_ESIGN: v->num = JN_EXP; return 0;
			default: return 0;
			}
		}
		if (c == '.' && (v->num == JN_ZERO || v->num == JN_INT)) {
			v->num = JN_DOT;
			return 0;
		}
		if ((c == 'e' || c == 'E') && (v->num == JN_ZERO || v->num == JN_INT ||
		    v->num == JN_FRAC)) {
			v->num = JN_E;
			return 0;
		}
		if ((c == '+' || c == '-') && v->num == JN_E) {
			v->num = JN_ESIGN;
			return 0;
		}
		if (!jv_num_done(v->num))
			return JVALID_ERR_SYNTAX;
		v->state = JV_AFTER;
		goto again;
	}
	return JVALID_ERR_SYNTAX;
}

/* The body has ended: 0 when it was one whole JSON text. */
static int
jv_finish(const struct jv *v)
{
	if (v->depth != 0)
		return JVALID_ERR_SYNTAX;
	if (v->state == JV_AFTER || (v->state == JV_NUM && jv_num_done(v->num)))
		return 0;
	return JVALID_ERR_SYNTAX;
}

struct stream_envelope {
	size_t max_hold;
	const struct rewrite_program *prog;
	unsigned max_depth;
	size_t max_members, nmembers;
	stream_envelope_write_fn write;
	void *arg;
	size_t written;
	const char *error;
	int err;
	int full;                       /* validate: full */
	size_t fed;                     /* bytes of the body before this chunk */
	char bom[3];
	size_t bomlen;
	struct jv jv;

	/* the program, laid out */
	struct {
		const struct rewrite_key **useg;    /* unwrap path */
		size_t nuseg, useg_cap;
		size_t ops_from, ops_to;        /* member ops: prog->ops[ops_from..ops_to) */
		size_t wraps_from;              /* wrap ops: prog->ops[wraps_from..nops) */
		unsigned char *active;          /* per op: its when: holds (or it has none) */
		size_t active_cap;
		int wrapped;                    /* an active wrap op */
		int always_dirty;               /* a set op: the target always changes */
		size_t *base;                   /* per op: its first item's index in the flags */
		size_t base_cap;
		unsigned char *reached;         /* set item met by a member */
		unsigned char *renamed_any;     /* rename item renamed a member */
		unsigned char *assumed;         /* rename item: a member called its new name was
		                                 * kept before any was renamed to it */
		size_t nflags, reached_cap, renamed_cap, assumed_cap;
		struct rewrite_str *vals;       /* set values per item index, then scratch */
		size_t vals_cap;
		struct rewrite_ctx *rw;         /* their storage */
		struct senv_member *app;        /* members set ops append */
		size_t napp, app_cap;
	} layout;

	/* the scan */
	enum senv_state state;
	size_t level;                   /* tokenized object being read: 0 the body */
	int target_obj;                 /* the object at level nuseg is the target */
	int target_done;                /* the target has been read or passed */
	int committed;                  /* the target was chosen: output has begun or may */
	int not_object;                 /* an unwrap key's value was not an object */
	int value_kind;                 /* of the value being read: 0 a member of a tokenized
	                                 * object, 1 the body itself */
	int emit;                       /* the value's bytes go out */
	int passthrough;                /* the value is the target passed whole */
	int descend;                    /* the value being started is an unwrap step */
	size_t run;                     /* start of the value's bytes in this chunk */
	/* strings */
	int strict, esc, uhex;
	/* containers, skipped as they come */
	struct jscan_stream scan;
	/* a key or a primitive */
	char *key;
	size_t keylen, key_cap;
	char *prim;
	size_t primlen, prim_cap;

	/* the target object's output */
	struct {
		int dirty;                      /* decided changed */
		int opened;                     /* the wrap openings and '{' have gone out */
		int clean_sent;                 /* unchanged past max_hold, it went out as it
		                                 * came: a change now cannot be written exactly */
		int pending;                    /* output held back until dirty or not is known */
		char *pend;                     /* held output: the input's bytes so far */
		size_t pendlen, pend_cap;
		size_t prefix;                  /* of pend: whitespace, '{', whitespace */
		char *hold;                     /* bytes since the last value: separators and key */
		size_t holdlen, hold_cap;
		size_t key_off;                 /* the key in hold */
		int first;                      /* no member written yet */
		size_t idx;                     /* members of the target so far */
		size_t last_kept;               /* idx + 1 of the last member written pristine,
		                                 * 0: none */
		struct senv_member cur;
	} target;
};

/* 1 when the condition tests the status only, which is known before the body. */
static int
senv_status_only(const struct jcond *c)
{
	size_t i;

	if (c->kind == JC_STATUS)
		return 1;
	if (c->kind != JC_ALL && c->kind != JC_ANY && c->kind != JC_NOT)
		return 0;
	for (i = 0; i < c->nsub; i++)
		if (!senv_status_only(c->sub[i]))
			return 0;
	return 1;
}

/* A status-only condition never looks a field up. */
static int
senv_no_lookup(void *arg, const struct jcond_seg *path, size_t nseg, const char **json,
    size_t *len, unsigned char *type)
{
	(void)arg;
	(void)path;
	(void)nseg;
	(void)json;
	(void)len;
	*type = 0;
	return -1;
}

int
stream_envelope_can(const struct rewrite_program *prog, enum validate_mode mode,
    const char **why)
{
	const struct rewrite_op *op;
	size_t i, j;
	int phase = 0;                  /* 0 unwraps, 1 member ops, 2 wraps */

	(void)mode;                     /* validate: full is checked as the body streams */
	*why = NULL;
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		op = &prog->ops[i];
		if (op->when != NULL && !senv_status_only(op->when)) {
			*why = "when: tests a field that may come later in the body";
			return 0;
		}
		switch (op->kind) {
		case REWRITE_STATUS_FROM:
			*why = "status_from sets the status, which goes out before the body";
			return 0;
		case REWRITE_UNWRAP:
			if (phase != 0) {
				*why = "unwrap after another op";
				return 0;
			}
			break;
		case REWRITE_WRAP:
			phase = 2;
			break;
		default:
			if (phase == 2) {
				*why = "an op after wrap";
				return 0;
			}
			phase = 1;
			for (j = 0; j < op->nitems; j++)
				if (op->items[j].path.nseg != 1) {
					*why = "a path below the top level of the object edited";
					return 0;
				}
		}
	}
	return 1;
}

struct stream_envelope *
stream_envelope_new(size_t max_hold)
{
	struct stream_envelope *se;

	if ((se = calloc(1, sizeof(*se))) == NULL)
		return NULL;
	se->max_hold = max_hold;
	if ((se->layout.rw = rewrite_ctx_new(1, 1)) == NULL) {
		free(se);
		return NULL;
	}
	return se;
}

void
stream_envelope_free(struct stream_envelope *se)
{
	if (se == NULL)
		return;
	rewrite_ctx_free(se->layout.rw);
	free(se->layout.useg);
	free(se->layout.active);
	free(se->layout.base);
	free(se->layout.reached);
	free(se->layout.renamed_any);
	free(se->layout.assumed);
	free(se->layout.vals);
	free(se->layout.app);
	free(se->key);
	free(se->prim);
	free(se->target.pend);
	free(se->target.hold);
	free(se);
}

static int
senv_fail(struct stream_envelope *se, int err, const char *why)
{
	if (se->err == 0) {
		se->err = err;
		se->error = why;
	}
	se->state = SE_ERROR;
	return se->err;
}

static int
senv_invalid(struct stream_envelope *se)
{
	return senv_fail(se, STREAM_ENVELOPE_INVALID, "invalid JSON");
}

/* Append p[0..len) to a held buffer of at most max_hold bytes. */
static int
senv_keep(struct stream_envelope *se, char **buf, size_t *len, size_t *cap, const char *p,
    size_t n)
{
	if (*len + n > se->max_hold)
		return senv_fail(se, STREAM_ENVELOPE_LOOKAHEAD,
		    "needs more of the body than the streaming look-ahead holds");
	if (grow_array(buf, cap, *len + n, 1, 16) != 0)
		return senv_fail(se, STREAM_ENVELOPE_NOMEM, "out of memory");
	memcpy(*buf + *len, p, n);
	*len += n;
	return 0;
}

static int senv_wrap_open(struct stream_envelope *se);
static int senv_out(struct stream_envelope *se, const char *p, size_t n);

/*
 * The target, unchanged so far, has more held back than max_hold: it goes out as it came,
 * betting that it stays unchanged (most bodies a drop or rename finds nothing in do); a
 * change after this is a look-ahead error, the output then cut short.
 */
static int
senv_send_clean(struct stream_envelope *se)
{
	se->target.pending = 0;
	se->target.clean_sent = 1;
	if (!se->target.opened) {
		se->target.opened = 1;
		if (senv_wrap_open(se) != 0)
			return se->err;
	}
	if (senv_out(se, se->target.pend, se->target.pendlen) != 0)
		return se->err;
	se->target.pendlen = 0;
	return 0;
}

/* Output: held back while the target's change is undecided, else written. */
static int
senv_out(struct stream_envelope *se, const char *p, size_t n)
{
	if (n == 0)
		return 0;
	if (se->target.pending) {
		if (se->target.pendlen + n <= se->max_hold)
			return senv_keep(se, &se->target.pend, &se->target.pendlen,
			    &se->target.pend_cap, p, n);
		if (senv_send_clean(se) != 0)
			return se->err;
	}
	if (se->write(se->arg, p, n) != 0)
		return senv_fail(se, STREAM_ENVELOPE_WRITE, "cannot write the output");
	se->written += n;
	return 0;
}

/* The opening of the wrap ops, outermost first: {"a":{"b": */
static int
senv_wrap_open(struct stream_envelope *se)
{
	const struct rewrite_op *op;
	size_t i, j;

	for (i = se->prog ? se->prog->nops : 0; i-- > se->layout.wraps_from;) {
		op = &se->prog->ops[i];
		if (!se->layout.active[i])
			continue;
		for (j = 0; j < op->path.nseg; j++)
			if (senv_out(se, "{", 1) != 0 ||
			    senv_out(se, op->path.seg[j].json, op->path.seg[j].json_len + 1) != 0)
				return se->err;
	}
	return 0;
}

static int
senv_wrap_close(struct stream_envelope *se)
{
	size_t i, j;

	for (i = se->layout.wraps_from; se->prog != NULL && i < se->prog->nops; i++)
		for (j = 0; se->layout.active[i] && j < se->prog->ops[i].path.nseg; j++)
			if (senv_out(se, "}", 1) != 0)
				return se->err;
	return 0;
}

int
stream_envelope_start(struct stream_envelope *se, const struct rewrite_program *prog,
    enum validate_mode mode, unsigned max_depth, size_t max_members,
    const struct rewrite_vars *vars, stream_envelope_write_fn write, void *arg)
{
	const struct rewrite_op *op;
	size_t i, j, nitems = 0, nset = 0;
	const char *why;

	se->prog = prog;
	se->max_depth = max_depth;
	se->max_members = max_members;
	se->nmembers = 0;
	se->write = write;
	se->arg = arg;
	se->written = 0;
	se->error = NULL;
	se->err = 0;
	se->state = SE_BEFORE;
	se->fed = 0;
	se->full = mode == VALIDATE_FULL;
	if (se->full)
		jv_init(&se->jv, max_depth);
	se->level = 0;
	se->target_done = se->committed = se->not_object = 0;
	se->target.dirty = se->target.pending = se->target.clean_sent = 0;
	se->target.pendlen = se->target.holdlen = se->keylen = se->primlen = 0;
	se->layout.napp = 0;
	se->layout.nuseg = 0;
	se->layout.ops_from = se->layout.ops_to = se->layout.wraps_from = 0;
	se->layout.always_dirty = 0;
	if (!stream_envelope_can(prog, VALIDATE_ENVELOPE, &why))
		return senv_fail(se, STREAM_ENVELOPE_OPS, why);
	if (grow_array(&se->layout.active, &se->layout.active_cap, (prog ? prog->nops : 0) + 1,
	    1, 16) != 0)
		return senv_fail(se, STREAM_ENVELOPE_NOMEM, "out of memory");
	se->layout.wrapped = 0;
	se->target_obj = 0;
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		op = &prog->ops[i];
		/* when: on the status is decided now; ops it turns off are left out. */
		se->layout.active[i] = op->when == NULL ||
		    jcond_eval_lookup(op->when, senv_no_lookup, NULL, vars ? vars->status : 0) > 0;
		if (op->kind == REWRITE_UNWRAP)
			se->layout.ops_from = i + 1;
		if (!se->layout.active[i])
			continue;
		if (op->kind == REWRITE_WRAP)
			se->layout.wrapped = 1;
		if (op->kind == REWRITE_UNWRAP) {
			if (grow_array(&se->layout.useg, &se->layout.useg_cap,
			    se->layout.nuseg + op->path.nseg,
			    sizeof(*se->layout.useg), 16) != 0)
				return senv_fail(se, STREAM_ENVELOPE_NOMEM, "out of memory");
			for (j = 0; j < op->path.nseg; j++)
				se->layout.useg[se->layout.nuseg++] = &op->path.seg[j];
		}
		if (op->kind == REWRITE_SET && op->nitems > 0)
			se->layout.always_dirty = 1;
		if (op->kind != REWRITE_UNWRAP && op->kind != REWRITE_WRAP)
			se->target_obj = 1;
	}
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		if (prog->ops[i].kind == REWRITE_SET)
			nset += prog->ops[i].nitems;
		nitems += prog->ops[i].nitems;
	}
	se->layout.ops_to = se->layout.ops_from;
	while (prog != NULL && se->layout.ops_to < prog->nops &&
	    prog->ops[se->layout.ops_to].kind != REWRITE_WRAP)
		se->layout.ops_to++;
	se->layout.wraps_from = se->layout.ops_to;
	if (grow_array(&se->layout.base, &se->layout.base_cap, (prog ? prog->nops : 0) + 1,
	    sizeof(*se->layout.base), 16) ||
	    grow_array(&se->layout.reached, &se->layout.reached_cap, nitems + 1, 1, 16) ||
	    grow_array(&se->layout.renamed_any, &se->layout.renamed_cap, nitems + 1, 1, 16) ||
	    grow_array(&se->layout.assumed, &se->layout.assumed_cap, nitems + 1, 1, 16) ||
	    grow_array(&se->layout.vals, &se->layout.vals_cap, nitems + nset + 1,
	    sizeof(*se->layout.vals), 16) ||
	    grow_array(&se->layout.app, &se->layout.app_cap, nset + 1, sizeof(*se->layout.app), 16))
		return senv_fail(se, STREAM_ENVELOPE_NOMEM, "out of memory");
	memset(se->layout.reached, 0, nitems + 1);
	memset(se->layout.renamed_any, 0, nitems + 1);
	memset(se->layout.assumed, 0, nitems + 1);
	se->layout.nflags = 0;
	for (i = 0; prog != NULL && i < prog->nops; i++) {
		se->layout.base[i] = se->layout.nflags;
		se->layout.nflags += prog->ops[i].nitems;
	}
	if (nset > 0) {
		/* The values in op and item order, then spread to their items' indexes. */
		struct rewrite_str *tmp = se->layout.vals + nitems;
		size_t k = 0;

		if (rewrite_set_values(se->layout.rw, prog, vars, tmp, nset) != 0)
			return senv_fail(se, STREAM_ENVELOPE_NOMEM, "out of memory");
		for (i = 0; i < prog->nops; i++)
			if (prog->ops[i].kind == REWRITE_SET)
				for (j = 0; j < prog->ops[i].nitems; j++, k++)
					se->layout.vals[se->layout.base[i] + j] = tmp[k];
	}
	return 0;
}

static int
senv_key_is(const struct senv_member *m, const struct rewrite_key *k)
{
	return envelope_string_eq(m->key, m->keylen, k->name, k->len);
}

static int
senv_lookahead(struct stream_envelope *se)
{
	return senv_fail(se, STREAM_ENVELOPE_LOOKAHEAD,
	    "rename replaces a key that came before the one renamed to it");
}

/*
 * Member m through item `item` of member op number opi, as rewrite.c's op does to every
 * member of the object; for a rename item, after its renames (the last argument says
 * whether to rename or to unlink).
 */
static int
senv_item(struct stream_envelope *se, struct senv_member *m, size_t opi, size_t item,
    int unlink)
{
	const struct rewrite_op *op = &se->prog->ops[opi];
	const struct rewrite_item *it = &op->items[item];
	size_t f = se->layout.base[opi] + item;

	switch (op->kind) {
	case REWRITE_DROP:
		if (senv_key_is(m, &it->path.seg[0]))
			m->removed = 1;
		break;
	case REWRITE_RENAME:
		if (m->renamed == opi + 1)
			break;
		if (!unlink) {
			if (!senv_key_is(m, &it->path.seg[0]))
				break;
			if (se->layout.assumed[f])
				return senv_lookahead(se);
			m->key = it->to.json;
			m->keylen = it->to.json_len;
			m->input_key = 0;
			m->renamed = (unsigned)opi + 1;
			se->layout.renamed_any[f] = 1;
		} else if (it->replaces && senv_key_is(m, &it->to)) {
			if (se->layout.renamed_any[f])
				m->removed = 1;
			else
				se->layout.assumed[f] = 1;
		}
		break;
	case REWRITE_SET:
		if (senv_key_is(m, &it->path.seg[0])) {
			m->lit = se->layout.vals[f].p;
			m->litlen = se->layout.vals[f].len;
			se->layout.reached[f] = 1;
		}
		break;
	default:
		break;
	}
	return 0;
}

/* An input member of the target through all the member ops. */
static int
senv_pipeline(struct stream_envelope *se, struct senv_member *m)
{
	const struct rewrite_op *op;
	size_t i, j;

	for (i = se->layout.ops_from; i < se->layout.ops_to && !m->removed; i++) {
		op = &se->prog->ops[i];
		if (!se->layout.active[i])
			continue;
		if (op->kind == REWRITE_KEEP) {
			for (j = 0; j < op->nitems; j++)
				if (senv_key_is(m, &op->items[j].path.seg[0]))
					break;
			if (j == op->nitems)
				m->removed = 1;
			continue;
		}
		for (j = 0; j < op->nitems && !m->removed; j++)
			if (senv_item(se, m, i, j, 0) != 0 ||
			    (op->kind == REWRITE_RENAME && senv_item(se, m, i, j, 1) != 0))
				return se->err;
	}
	return 0;
}

/* The members set ops append, once every input member is known. */
static int
senv_appended(struct stream_envelope *se)
{
	const struct rewrite_op *op;
	struct senv_member *m;
	size_t i, j, a, f;

	se->layout.napp = 0;
	for (i = se->layout.ops_from; i < se->layout.ops_to; i++) {
		op = &se->prog->ops[i];
		if (!se->layout.active[i])
			continue;
		if (op->kind == REWRITE_KEEP) {
			for (a = 0; a < se->layout.napp; a++) {
				m = &se->layout.app[a];
				for (j = 0; j < op->nitems; j++)
					if (senv_key_is(m, &op->items[j].path.seg[0]))
						break;
				if (j == op->nitems)
					m->removed = 1;
			}
			continue;
		}
		for (j = 0; j < op->nitems; j++) {
			for (a = 0; a < se->layout.napp; a++)
				if (!se->layout.app[a].removed &&
				    senv_item(se, &se->layout.app[a], i, j, 0) != 0)
					return se->err;
			for (a = 0; op->kind == REWRITE_RENAME && a < se->layout.napp; a++)
				if (!se->layout.app[a].removed &&
				    senv_item(se, &se->layout.app[a], i, j, 1) != 0)
					return se->err;
			f = se->layout.base[i] + j;
			if (op->kind != REWRITE_SET || se->layout.reached[f])
				continue;
			/* No member is called so: the value goes in a new one at the end. */
			m = &se->layout.app[se->layout.napp++];
			memset(m, 0, sizeof(*m));
			m->key = op->items[j].path.seg[0].json;
			m->keylen = op->items[j].path.seg[0].json_len;
			m->lit = se->layout.vals[f].p;
			m->litlen = se->layout.vals[f].len;
			se->layout.reached[f] = 1;
		}
	}
	for (a = 0; a < se->layout.napp; a++) {
		m = &se->layout.app[a];
		if (m->removed)
			continue;
		if (senv_out(se, m->key - !se->target.first,
		    m->keylen + 1 + !se->target.first) != 0 ||
		    senv_out(se, m->lit, m->litlen) != 0)
			return se->err;
		se->target.first = 0;
	}
	return 0;
}

/* The target changes: what was held back goes out without its whitespace. */
static int
senv_dirty(struct stream_envelope *se)
{
	int held = se->target.pending;

	if (se->target.dirty)
		return 0;
	if (se->target.clean_sent)
		return senv_fail(se, STREAM_ENVELOPE_LOOKAHEAD,
		    "the body changed after more than the look-ahead of it went out unchanged");
	se->target.dirty = 1;
	se->target.pending = 0;
	if (!se->target.opened) {
		se->target.opened = 1;
		if (senv_wrap_open(se) != 0 || senv_out(se, "{", 1) != 0)
			return se->err;
		if (held && se->target.idx > 0 &&
		    senv_out(se, se->target.pend + se->target.prefix,
		    se->target.pendlen - se->target.prefix) != 0)
			return se->err;
	}
	se->target.pendlen = 0;
	return 0;
}

/* A member of the target whose value begins: decide it, write what goes before the value.
 * Sets se->emit when the input value goes out. */
static int
senv_member(struct stream_envelope *se)
{
	struct senv_member *m = &se->target.cur;
	size_t k = se->target.key_off;

	memset(m, 0, sizeof(*m));
	m->key = se->target.hold + k;
	m->keylen = se->keylen;
	m->input_key = 1;
	if (senv_pipeline(se, m) != 0)
		return se->err;
	se->emit = 0;
	if (m->removed || !m->input_key || m->lit != NULL) {
		if (senv_dirty(se) != 0)
			return se->err;
	}
	if (m->removed)
		return 0;
	if (!se->target.dirty) {
		/* Unchanged so far: the input's bytes. */
		if (se->target.idx == 0) {
			if (se->target.pendlen == 1 && k == 0) {
				/* No whitespace that a change would drop: nothing to hold back. */
				se->target.pending = 0;
				se->target.pendlen = 0;
				se->target.opened = 1;
				if (senv_wrap_open(se) != 0 || senv_out(se, "{", 1) != 0)
					return se->err;
			} else
				se->target.prefix = se->target.pendlen + k;
		}
		se->emit = 1;
		se->target.last_kept = se->target.idx + 1;
		se->target.first = 0;
		return senv_out(se, se->target.hold, se->target.holdlen);
	}
	if (m->input_key && m->lit == NULL) {
		se->emit = 1;
		if (!se->target.first && se->target.last_kept == se->target.idx) {
			/* Next to the last member kept: the bytes between them too. */
			se->target.first = 0;
			se->target.last_kept = se->target.idx + 1;
			return senv_out(se, se->target.hold, se->target.holdlen);
		}
		if (!se->target.first && senv_out(se, ",", 1) != 0)
			return se->err;
		se->target.first = 0;
		se->target.last_kept = se->target.idx + 1;
		return senv_out(se, se->target.hold + k, se->target.holdlen - k);
	}
	se->target.last_kept = 0;
	if (m->input_key) {
		if ((!se->target.first && senv_out(se, ",", 1) != 0) ||
		    senv_out(se, m->key, m->keylen) != 0 || senv_out(se, ":", 1) != 0)
			return se->err;
	} else if (senv_out(se, m->key - !se->target.first, m->keylen + 1 + !se->target.first) != 0)
		return se->err;
	se->target.first = 0;
	if (m->lit != NULL)
		return senv_out(se, m->lit, m->litlen);
	se->emit = 1;
	return 0;
}

/* Bytes that matter inside a string. */
static const unsigned char senv_string_special[256] = { ['"'] = 1, ['\\'] = 1, [0] = 1 };

static int
senv_ws(unsigned char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static int
senv_depth_err(struct stream_envelope *se)
{
	return senv_fail(se, STREAM_ENVELOPE_DEPTH, "JSON nested too deep");
}

/* A tokenized object begins at level se->level. */
static int
senv_object(struct stream_envelope *se)
{
	if (se->level + 1 > se->max_depth)
		return senv_depth_err(se);
	se->state = SE_OBJ_START;
	if (se->level < se->layout.nuseg)
		return 0;
	/* The target. */
	se->committed = 1;
	se->target.first = 1;
	se->target.idx = 0;
	se->target.last_kept = 0;
	se->target.holdlen = 0;
	se->target.dirty = 0;
	se->target.opened = 0;
	if (se->layout.always_dirty)
		return senv_dirty(se);
	if (se->target.clean_sent) {
		/* The body's whitespace went out already (no wrap op then). */
		se->target.opened = 1;
		return senv_out(se, "{", 1);
	}
	/* Undecided: held back from here (the body's leading whitespace is there already). */
	se->target.pending = 1;
	return senv_keep(se, &se->target.pend, &se->target.pendlen, &se->target.pend_cap, "{", 1);
}

/* A value begins with c at p[i] (c is not whitespace). */
static int
senv_value(struct stream_envelope *se, unsigned char c, size_t i)
{
	int member = se->value_kind == 0;

	se->passthrough = 0;
	if (!member)
		se->emit = 1;
	else if (se->level < se->layout.nuseg) {
		/* In an object unwrap walks through. */
		se->emit = 0;
		if (se->descend) {
			if (se->level + 1 < se->layout.nuseg || se->target_obj) {
				if (c == '{') {
					se->level++;
					return senv_object(se);
				}
				se->not_object = 1;
			} else {
				/* The target, passed whole. */
				se->committed = 1;
				se->passthrough = 1;
				se->emit = 1;
				if (senv_wrap_open(se) != 0)
					return se->err;
			}
		}
	} else {
		/* A member of the target. */
		if (senv_member(se) != 0)
			return se->err;
	}
	se->run = i;
	switch (c) {
	case '{':
	case '[':
		se->state = SE_CONT;
		if (se->max_depth < se->level + 1 + (unsigned)member ||
		    jscan_stream_start(&se->scan, (char)c, member ? se->max_depth -
		    (unsigned)se->level - 1 : se->max_depth) != 0)
			return senv_depth_err(se);
		return 0;
	case '"':
		se->state = SE_STRING;
		se->strict = member;
		se->esc = se->uhex = 0;
		return 0;
	default:
		se->state = SE_PRIM;
		se->primlen = 0;
		return 0;
	}
}

/* The value that ended just before p[i] (i may be the chunk's end). */
static int
senv_value_end(struct stream_envelope *se, const char *p, size_t i)
{
	if (se->emit && se->state != SE_PRIM && senv_out(se, p + se->run, i - se->run) != 0)
		return se->err;
	if (se->emit && se->state == SE_PRIM && senv_out(se, se->prim, se->primlen) != 0)
		return se->err;
	if (se->value_kind == 1) {
		se->state = SE_TRAIL;
		se->target_done = 1;
		return senv_wrap_close(se);
	}
	se->state = SE_AFTER_VALUE;
	if (se->level == se->layout.nuseg && se->target_obj) {
		se->target.holdlen = 0;
		se->target.idx++;
	}
	if (se->passthrough) {
		se->passthrough = 0;
		se->target_done = 1;
		return senv_wrap_close(se);
	}
	return 0;
}

/* The closing brace of the object at se->level. */
static int
senv_close(struct stream_envelope *se)
{
	if (se->level == se->layout.nuseg && se->target_obj) {
		if (!se->target.dirty) {
			/* Unchanged: as it came (what is held back, the whitespace, the brace). */
			se->target.pending = 0;
			if (!se->target.opened) {
				/* The wrap openings before the held bytes: there is no whitespace
				 * around the body to hold when there are any. */
				se->target.opened = 1;
				if (senv_wrap_open(se) != 0 ||
				    senv_out(se, se->target.pend, se->target.pendlen) != 0)
					return se->err;
			}
			se->target.pendlen = 0;
			if (senv_out(se, se->target.hold, se->target.holdlen) != 0 ||
			    senv_out(se, "}", 1) != 0)
				return se->err;
		} else if (senv_appended(se) != 0 || senv_out(se, "}", 1) != 0)
			return se->err;
		se->target.holdlen = 0;
		se->target_done = 1;
		if (senv_wrap_close(se) != 0)
			return se->err;
	}
	if (se->level == 0) {
		se->state = SE_TRAIL;
		return 0;
	}
	se->level--;
	se->state = SE_AFTER_VALUE;
	return 0;
}

/* A key of a tokenized object is complete: is it a step of unwrap? */
static int
senv_key_done(struct stream_envelope *se)
{
	const struct rewrite_key *k;

	if (++se->nmembers > se->max_members)
		return senv_fail(se, STREAM_ENVELOPE_MEMBERS,
		    "more members to edit than limits.max_members");
	se->descend = 0;
	if (se->level >= se->layout.nuseg)
		return 0;
	k = se->layout.useg[se->level];
	if (!envelope_string_eq(se->key, se->keylen, k->name, k->len))
		return 0;
	if (se->committed)
		return senv_fail(se, STREAM_ENVELOPE_LOOKAHEAD,
		    "the key unwrap takes comes again after the first was sent");
	se->descend = 1;
	return 0;
}

/* A byte of a string a tokenized object holds: jsmn's strict checks. */
static int
senv_strict_byte(struct stream_envelope *se, unsigned char c)
{
	if (se->uhex > 0) {
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return senv_invalid(se);
		se->uhex--;
		return 0;
	}
	if (se->esc) {
		se->esc = 0;
		switch (c) {
		case '"': case '/': case '\\': case 'b': case 'f': case 'r': case 'n': case 't':
			return 0;
		case 'u':
			se->uhex = 4;
			return 0;
		}
		return senv_invalid(se);
	}
	if (c == '\\')
		se->esc = 1;
	else if (c == '\0')
		return senv_invalid(se);
	return 0;
}

/* Bytes of the target's separators and key are held; other objects' are not. */
static int
senv_hold(struct stream_envelope *se, const char *p, size_t n)
{
	if (se->level != se->layout.nuseg || !se->target_obj)
		return 0;
	return senv_keep(se, &se->target.hold, &se->target.holdlen, &se->target.hold_cap, p, n);
}

/* The ops need an object and the body is not one.  validate: full reads on: the buffered
 * engine checks the whole body first, so invalid JSON is the error then. */
static int
senv_not_object(struct stream_envelope *se)
{
	if (!se->full)
		return senv_fail(se, STREAM_ENVELOPE_OPS, "body is not an object");
	se->state = SE_NOT_OBJECT;
	return 0;
}

/* The body's own whitespace (before and after its value): kept where the body goes out as
 * it came, held back where that is not known yet, else dropped. */
static int
senv_outer_ws(struct stream_envelope *se, const char *p, size_t n)
{
	if (se->layout.wrapped || se->layout.nuseg > 0)
		return 0;
	if (!se->target_obj)
		return senv_out(se, p, n);
	if (se->state == SE_TRAIL)
		return se->target.dirty ? 0 : senv_out(se, p, n);
	if (se->layout.always_dirty)
		return 0;
	if (se->target.pendlen + n <= se->max_hold)
		return senv_keep(se, &se->target.pend, &se->target.pendlen,
		    &se->target.pend_cap, p, n);
	se->target.clean_sent = 1;
	if (senv_out(se, se->target.pend, se->target.pendlen) != 0)
		return se->err;
	se->target.pendlen = 0;
	return senv_out(se, p, n);
}

int
stream_envelope_feed(struct stream_envelope *se, const char *p, size_t n)
{
	size_t i = 0, j;
	ssize_t skipped;
	unsigned char c;
	int r;

	if (se->state == SE_ERROR)
		return se->err;
	/* validate: full: the chunk is checked before any of it goes out. */
	for (j = 0; se->full && j < n; j++)
		if ((r = jv_byte(&se->jv, (unsigned char)p[j])) != 0)
			return r == JVALID_ERR_DEPTH ? senv_depth_err(se) : senv_invalid(se);
	se->run = 0;
	while (i < n) {
		c = (unsigned char)p[i];
		switch (se->state) {
		case SE_ERROR:
			return se->err;
		case SE_NOT_OBJECT:
			i = n;
			break;
		case SE_BOM:
			se->bom[se->bomlen++] = (char)c;
			i++;
			if (se->bomlen < 3)
				break;
			if (memcmp(se->bom, "\xef\xbb\xbf", 3) == 0)
				return senv_fail(se, STREAM_ENVELOPE_INVALID,
				    "body starts with a UTF-8 byte order mark");
			if (senv_not_object(se) != 0)
				return se->err;
			break;
		case SE_BEFORE:
		case SE_TRAIL:
			for (j = i; j < n && senv_ws((unsigned char)p[j]); j++)
				;
			if (j > i && senv_outer_ws(se, p + i, j - i) != 0)
				return se->err;
			i = j;
			if (i == n)
				break;
			if (se->state == SE_TRAIL)
				return senv_invalid(se);
			c = (unsigned char)p[i];
			if (se->layout.nuseg > 0 || se->target_obj) {
				if (c == 0xef && se->fed + i == 0) {
					/* A byte order mark is invalid JSON, not a body that is not an
					 * object, as the buffered engine tells them apart. */
					se->state = SE_BOM;
					se->bomlen = 0;
					break;
				}
				if (c != '{') {
					if (senv_not_object(se) != 0)
						return se->err;
					break;
				}
				se->level = 0;
				if (senv_object(se) != 0)
					return se->err;
				i++;
				break;
			}
			se->value_kind = 1;
			if (senv_wrap_open(se) != 0 || senv_value(se, c, i) != 0)
				return se->err;
			i += se->state != SE_PRIM;
			break;
		case SE_OBJ_START:
		case SE_NEXT_KEY:
		case SE_COLON:
		case SE_VALUE:
		case SE_AFTER_VALUE:
			if (senv_ws(c)) {
				if (senv_hold(se, p + i, 1) != 0)
					return se->err;
				i++;
				break;
			}
			if (se->state == SE_VALUE) {
				se->value_kind = 0;
				if (senv_value(se, c, i) != 0)
					return se->err;
				i += se->state != SE_PRIM;
				break;
			}
			if (c == '"' && (se->state == SE_OBJ_START || se->state == SE_NEXT_KEY)) {
				se->target.key_off = se->target.holdlen;
				se->keylen = 0;
				se->esc = se->uhex = 0;
				se->state = SE_KEY;
				if (senv_keep(se, &se->key, &se->keylen, &se->key_cap, p + i, 1) != 0 ||
				    senv_hold(se, p + i, 1) != 0)
					return se->err;
				i++;
				break;
			}
			if (c == '}' && (se->state == SE_OBJ_START || se->state == SE_AFTER_VALUE)) {
				if (senv_close(se) != 0)
					return se->err;
				i++;
				break;
			}
			if ((c == ':' && se->state == SE_COLON) || (c == ',' && se->state ==
			    SE_AFTER_VALUE)) {
				se->state = c == ':' ? SE_VALUE : SE_NEXT_KEY;
				if (senv_hold(se, p + i, 1) != 0)
					return se->err;
				i++;
				break;
			}
			return senv_invalid(se);
		case SE_KEY:
			for (j = i; j < n; j++) {
				c = (unsigned char)p[j];
				if (c == '"' && !se->esc && !se->uhex)
					break;
				if (senv_strict_byte(se, c) != 0)
					return se->err;
			}
			if (senv_keep(se, &se->key, &se->keylen, &se->key_cap, p + i, j - i + (j < n)) ||
			    senv_hold(se, p + i, j - i + (j < n)) != 0)
				return se->err;
			if (j == n) {
				i = n;
				break;
			}
			i = j + 1;
			se->state = SE_COLON;
			if (senv_key_done(se) != 0)
				return se->err;
			break;
		case SE_STRING:
			for (; i < n; i++) {
				if (!se->esc && !se->uhex)
					while (i < n && !senv_string_special[(unsigned char)p[i]])
						i++;
				if (i == n)
					break;
				c = (unsigned char)p[i];
				if (se->strict && (se->uhex || se->esc)) {
					if (senv_strict_byte(se, c) != 0)
						return se->err;
					continue;
				}
				if (se->esc) {
					se->esc = 0;
					continue;
				}
				if (c == '"')
					break;
				if (c == '\\')
					se->esc = 1;
				else if (c == '\0' && se->strict)
					return senv_invalid(se);
			}
			if (i == n)
				break;
			if (senv_value_end(se, p, ++i) != 0)
				return se->err;
			break;
		case SE_PRIM:
			if (senv_ws(c) || c == ',' || c == '}' || c == ']') {
				if (se->primlen == 0 || !envelope_is_primitive(se->prim, se->primlen))
					return senv_invalid(se);
				if (senv_value_end(se, p, i) != 0)
					return se->err;
				break;
			}
			if (senv_keep(se, &se->prim, &se->primlen, &se->prim_cap, p + i, 1) != 0)
				return se->err;
			i++;
			break;
		case SE_CONT:
			/* Most bytes mean nothing here: skipped a block at a time. */
			if ((skipped = jscan_stream_feed(&se->scan, p + i, n - i)) == JSCAN_MORE) {
				i = n;
				break;
			}
			if (skipped < 0)
				return skipped == JSCAN_ERR_DEPTH ? senv_depth_err(se) :
				    senv_invalid(se);
			i += (size_t)skipped;
			if (senv_value_end(se, p, i) != 0)
				return se->err;
			break;
		}
	}
	if (se->state == SE_ERROR)
		return se->err;
	se->fed += n;
	/* A value that goes on in the next chunk: what came of it goes out now. */
	if ((se->state == SE_STRING || se->state == SE_CONT) && se->emit &&
	    senv_out(se, p + se->run, n - se->run) != 0)
		return se->err;
	return 0;
}

int
stream_envelope_finish(struct stream_envelope *se)
{
	if (se->state != SE_ERROR && se->full && jv_finish(&se->jv) != 0)
		return senv_invalid(se);
	switch (se->state) {
	case SE_ERROR:
		return se->err;
	case SE_BEFORE:
		return senv_fail(se, STREAM_ENVELOPE_INVALID, "empty body");
	case SE_BOM:
	case SE_NOT_OBJECT:
		return senv_fail(se, STREAM_ENVELOPE_OPS, "body is not an object");
	case SE_PRIM:
		if (se->value_kind != 1 || se->primlen == 0 ||
		    !envelope_is_primitive(se->prim, se->primlen))
			return senv_invalid(se);
		if (senv_value_end(se, "", 0) != 0)
			return se->err;
		return 0;
	case SE_TRAIL:
		if (!se->target_done)
			return senv_fail(se, STREAM_ENVELOPE_OPS, se->not_object ?
			    "the value unwrap takes is not an object" : "unwrap: key not found");
		return 0;
	default:
		return senv_invalid(se);
	}
}

size_t
stream_envelope_written(const struct stream_envelope *se)
{
	return se->written;
}

const char *
stream_envelope_error(const struct stream_envelope *se)
{
	return se->error;
}
