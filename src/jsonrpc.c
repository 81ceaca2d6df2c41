/*
 * A batch is walked element by element: each element's end is found by the skip scanner, and
 * an object element is tokenized by the envelope down to its members, which is all a Request
 * object (jsonrpc, method, params, id) or a Response object (jsonrpc, result or error, id) is
 * made of; params and results stay unread spans.  Ids are hashed by value (a string by its
 * decoded text, a number as jcond compares numbers), which numbers duplicate ids into rounds
 * and finds the call an answer is for when the upstream answers out of order.
 */
#include "jsonrpc.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "jcond.h"
#include "jvalid.h"

#define JSONRPC_MIN_BUCKETS 16

/* Mixed into an id's hash per target, so that equal ids to other targets rarely collide. */
#define JSONRPC_TARGET_MIX 0x9e3779b97f4a7c15ULL

static const struct {
	const char *text;
	size_t len;
} jsonrpc_errors[JSONRPC_E__COUNT] = {
#define X(id, code, message) { "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": " #code \
	", \"message\": \"" message "\"", \
	sizeof("{\"jsonrpc\": \"2.0\", \"error\": {\"code\": " #code ", \"message\": \"" \
	message "\"") - 1 },
	JSONRPC_ERRORS(X)
#undef X
};

const char *
jsonrpc_error_open(enum jsonrpc_error e, size_t *len)
{
	*len = jsonrpc_errors[e].len;
	return jsonrpc_errors[e].text;
}

void
jsonrpc_init(struct jsonrpc *j)
{
	memset(j, 0, sizeof(*j));
	envelope_init(&j->env);
	j->max_members = SIZE_MAX;
}

void
jsonrpc_free(struct jsonrpc *j)
{
	envelope_free(&j->env);
	free(j->calls);
	free(j->buckets);
	free(j->scratch[0]);
	free(j->scratch[1]);
	memset(j, 0, sizeof(*j));
}

/* Room for n bytes in scratch k, or NULL. */
static char *
jsonrpc_scratch(struct jsonrpc *j, int k, size_t n)
{
	char *grown;

	if (j->scratch_cap[k] < n) {
		if ((grown = realloc(j->scratch[k], n)) == NULL)
			return NULL;
		j->scratch[k] = grown;
		j->scratch_cap[k] = n;
	}
	return j->scratch[k];
}

/* The text of the JSON string s[0..len): in place when it has no escape, else decoded into
 * scratch k.  0, or -1 (a bad escape, no memory). */
static int
jsonrpc_text(struct jsonrpc *j, int k, const char *s, size_t len, const char **text,
    size_t *tlen)
{
	char *buf;

	if (memchr(s + 1, '\\', len - 2) == NULL) {
		*text = s + 1;
		*tlen = len - 2;
		return 0;
	}
	if ((buf = jsonrpc_scratch(j, k, len)) == NULL ||
	    envelope_string_decode(s, len, buf, tlen) < 0)
		return -1;
	*text = buf;
	return 0;
}

/* 1 when the key (a JSON string with its quotes) is name. */
static int
jsonrpc_key_is(const struct envelope_member *m, const char *name, size_t nlen)
{
	if (m->keylen == nlen + 2 && memcmp(m->key + 1, name, nlen) == 0)
		return 1;
	return m->keylen > nlen + 2 && memchr(m->key + 1, '\\', m->keylen - 2) != NULL &&
	    envelope_string_eq(m->key, m->keylen, name, nlen);
}

/* An id is a string, a number or null. */
static int
jsonrpc_id_type_ok(const struct envelope_member *m)
{
	return m->type == ENVELOPE_STRING ||
	    (m->type == ENVELOPE_PRIMITIVE && m->val[0] != 't' && m->val[0] != 'f');
}

enum { SEEN_JSONRPC = 1, SEEN_METHOD = 2, SEEN_PARAMS = 4, SEEN_ID = 8, SEEN_RESULT = 16,
    SEEN_ERROR = 32 };

/* What the members of one element say. */
struct jsonrpc_scan {
	unsigned seen;
	int bad;                        /* a member of the protocol twice, or of the wrong type */
	const char *method;
	size_t method_len;
	const char *id;
	size_t id_len;
	int id_ok;
};

/* Note a member of the protocol; 1 when it came before (the element is then invalid). */
static int
jsonrpc_seen(struct jsonrpc_scan *s, unsigned bit)
{
	if (s->seen & bit) {
		s->bad = 1;
		return 1;
	}
	s->seen |= bit;
	return 0;
}

static void
jsonrpc_scan_id(struct jsonrpc_scan *s, const struct envelope_member *m)
{
	if (jsonrpc_seen(s, SEEN_ID))
		return;
	s->id = m->val;
	s->id_len = m->vallen;
	s->id_ok = jsonrpc_id_type_ok(m);
	if (!s->id_ok)
		s->bad = 1;
}

static int
jsonrpc_version_ok(const struct envelope_member *m)
{
	return m->type == ENVELOPE_STRING && envelope_string_eq(m->val, m->vallen, "2.0", 3);
}

/* A member of a Request object. */
static int
jsonrpc_request_cb(void *arg, const struct envelope_member *m)
{
	struct jsonrpc_scan *s = arg;

	switch (m->key[1]) {
	case 'j': case 'm': case 'p': case 'i': case '\\':
		break;
	default:
		return 0;               /* not a member of the protocol: left to the upstream */
	}
	if (jsonrpc_key_is(m, "jsonrpc", 7)) {
		if (!jsonrpc_seen(s, SEEN_JSONRPC) && !jsonrpc_version_ok(m))
			s->bad = 1;
	} else if (jsonrpc_key_is(m, "method", 6)) {
		if (!jsonrpc_seen(s, SEEN_METHOD)) {
			s->method = m->val;
			s->method_len = m->vallen;
			if (m->type != ENVELOPE_STRING)
				s->bad = 1;
		}
	} else if (jsonrpc_key_is(m, "params", 6)) {
		if (!jsonrpc_seen(s, SEEN_PARAMS) && m->type != ENVELOPE_OBJECT &&
		    m->type != ENVELOPE_ARRAY)
			s->bad = 1;
	} else if (jsonrpc_key_is(m, "id", 2)) {
		jsonrpc_scan_id(s, m);
	}
	return 0;
}

/* A member of a Response object. */
static int
jsonrpc_answer_cb(void *arg, const struct envelope_member *m)
{
	struct jsonrpc_scan *s = arg;

	switch (m->key[1]) {
	case 'j': case 'r': case 'e': case 'i': case '\\':
		break;
	default:
		return 0;
	}
	if (jsonrpc_key_is(m, "jsonrpc", 7)) {
		if (!jsonrpc_seen(s, SEEN_JSONRPC) && !jsonrpc_version_ok(m))
			s->bad = 1;
	} else if (jsonrpc_key_is(m, "result", 6)) {
		jsonrpc_seen(s, SEEN_RESULT);
	} else if (jsonrpc_key_is(m, "error", 5)) {
		if (!jsonrpc_seen(s, SEEN_ERROR) && m->type != ENVELOPE_OBJECT)
			s->bad = 1;
	} else if (jsonrpc_key_is(m, "id", 2)) {
		jsonrpc_scan_id(s, m);
	}
	return 0;
}

/* Tokenize the object at body[pos] with cb into s; *end past it.  An enum envelope_err. */
static int
jsonrpc_parse(struct jsonrpc *j, const char *body, size_t len, size_t pos, unsigned depth,
    int (*cb)(void *, const struct envelope_member *), struct jsonrpc_scan *s, size_t *end)
{
	memset(s, 0, sizeof(*s));
	j->env.member_cb = cb;
	j->env.member_arg = s;
	j->env.max_members = j->max_members;
	return envelope_parse(&j->env, body, len, pos, depth, end);
}

static struct jsonrpc_call *
jsonrpc_add(struct jsonrpc *j)
{
	struct jsonrpc_call *grown;
	size_t n;

	if (j->ncalls == j->cap) {
		n = j->cap ? j->cap * 2 : 16;
		if ((grown = realloc(j->calls, n * sizeof(*grown))) == NULL)
			return NULL;
		j->calls = grown;
		j->cap = n;
	}
	return memset(&j->calls[j->ncalls++], 0, sizeof(*j->calls));
}

/* One element: a Request object or something else; its end in *end.  An enum
 * jsonrpc_split_result (0 when it was taken). */
static int
jsonrpc_element(struct jsonrpc *j, const char *body, size_t len, size_t pos, unsigned depth,
    size_t *end)
{
	struct jsonrpc_call *c;
	struct jsonrpc_scan s;
	unsigned char type;
	int r;

	if (body[pos] != '{') {
		if (envelope_value_end(body, len, pos, depth, end, &type) != 0)
			return JSONRPC_PARSE_ERROR;
		if ((c = jsonrpc_add(j)) == NULL)
			return JSONRPC_NOMEM;
		c->kind = JSONRPC_INVALID;
	} else {
		r = jsonrpc_parse(j, body, len, pos, depth, jsonrpc_request_cb, &s, end);
		if (r == ENVELOPE_ERR_NOMEM)
			return JSONRPC_NOMEM;
		if (r != 0 && r != ENVELOPE_ERR_MEMBERS)
			return JSONRPC_PARSE_ERROR;
		if (r == ENVELOPE_ERR_MEMBERS) {
			/* Too many members to read: its end is found without them. */
			if (envelope_value_end(body, len, pos, depth, end, &type) != 0)
				return JSONRPC_PARSE_ERROR;
			s.bad = 1;
			s.id_ok = 0;
		}
		if ((c = jsonrpc_add(j)) == NULL)
			return JSONRPC_NOMEM;
		if (s.id_ok) {
			c->id = s.id;
			c->id_len = s.id_len;
		}
		if (s.bad || (s.seen & (SEEN_JSONRPC | SEEN_METHOD)) != (SEEN_JSONRPC | SEEN_METHOD)) {
			c->kind = JSONRPC_INVALID;
		} else {
			c->kind = s.seen & SEEN_ID ? JSONRPC_CALL : JSONRPC_NOTIFICATION;
			c->method = s.method;
			c->method_len = s.method_len;
		}
	}
	c->val = body + pos;
	c->len = *end - pos;
	c->target = JSONRPC_NO_TARGET;
	return 0;
}

int
jsonrpc_split(struct jsonrpc *j, const char *body, size_t len, unsigned max_depth,
    size_t max_batch, int strict)
{
	unsigned char type;
	size_t pos, end, n = 0;
	int r;

	j->ncalls = 0;
	pos = envelope_skip_ws(body, len, 0);
	if (pos == len || max_depth < 1)
		return JSONRPC_PARSE_ERROR;
	if (strict && jvalid_check(body, len, max_depth, NULL) != JVALID_OK)
		return JSONRPC_PARSE_ERROR;
	if (body[pos] == '{') {
		if ((r = jsonrpc_element(j, body, len, pos, max_depth, &end)) != 0)
			return r;
		return envelope_skip_ws(body, len, end) == len ? JSONRPC_SINGLE :
		    JSONRPC_PARSE_ERROR;
	}
	if (body[pos] != '[') {
		if (envelope_value_end(body, len, pos, max_depth, &end, &type) != 0 ||
		    envelope_skip_ws(body, len, end) != len)
			return JSONRPC_PARSE_ERROR;
		return JSONRPC_NOT_REQUEST;
	}
	if (max_depth < 2)
		return JSONRPC_PARSE_ERROR;
	pos = envelope_skip_ws(body, len, pos + 1);
	if (pos < len && body[pos] == ']') {
		if (envelope_skip_ws(body, len, pos + 1) != len)
			return JSONRPC_PARSE_ERROR;
		return JSONRPC_NOT_REQUEST;
	}
	for (;;) {
		if (pos >= len)
			return JSONRPC_PARSE_ERROR;
		if (n < max_batch) {
			if ((r = jsonrpc_element(j, body, len, pos, max_depth - 1, &end)) != 0)
				return r;
		} else if (envelope_value_end(body, len, pos, max_depth - 1, &end, &type) != 0) {
			/* Past max_batch the elements are only walked: is it JSON at all? */
			return JSONRPC_PARSE_ERROR;
		}
		n++;
		pos = envelope_skip_ws(body, len, end);
		if (pos < len && body[pos] == ',') {
			pos = envelope_skip_ws(body, len, pos + 1);
			continue;
		}
		if (pos < len && body[pos] == ']')
			break;
		return JSONRPC_PARSE_ERROR;
	}
	if (envelope_skip_ws(body, len, pos + 1) != len)
		return JSONRPC_PARSE_ERROR;
	return n > max_batch ? JSONRPC_TOO_MANY : JSONRPC_BATCH;
}

int
jsonrpc_method_name(struct jsonrpc *j, const struct jsonrpc_call *c, const char **name,
    size_t *len)
{
	return jsonrpc_text(j, 1, c->method, c->method_len, name, len);
}

static int
jsonrpc_name_matches(const struct config_jsonrpc_name *n, const char *name, size_t len)
{
	if (n->prefix)
		return len >= n->len && memcmp(name, n->text, n->len) == 0;
	return len == n->len && memcmp(name, n->text, len) == 0;
}

int
jsonrpc_method_rule(const struct config_jsonrpc *jc, const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < jc->nmethods; i++)
		if (jsonrpc_name_matches(&jc->methods[i].name, name, len))
			return (int)i;
	return -1;
}

int
jsonrpc_method_allowed(const struct config_jsonrpc *jc, const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < jc->ndeny; i++)
		if (jsonrpc_name_matches(&jc->deny[i], name, len))
			return 0;
	if (jc->allow == NULL)
		return 1;
	for (i = 0; i < jc->nallow; i++)
		if (jsonrpc_name_matches(&jc->allow[i], name, len))
			return 1;
	return 0;
}

/* FNV-1a over text, after a type byte. */
static uint64_t
jsonrpc_fnv(unsigned char type, const char *s, size_t n)
{
	uint64_t h = (14695981039346656037ULL ^ type) * 1099511628211ULL;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

/* The hash of an id's value; ids equal by jsonrpc_id_eq hash the same.  A string with a bad
 * escape (it equals only itself) hashes its bytes. */
static uint64_t
jsonrpc_id_hash(struct jsonrpc *j, const char *id, size_t len)
{
	const char *text;
	size_t tlen;

	switch (id[0]) {
	case '"':
		if (jsonrpc_text(j, 0, id, len, &text, &tlen) < 0)
			return jsonrpc_fnv('x', id, len);
		return jsonrpc_fnv('s', text, tlen);
	case 'n':
		return jsonrpc_fnv('n', NULL, 0);
	default:
		return jcond_number_hash(id, len) * 31 + 'd';
	}
}

int
jsonrpc_id_eq(struct jsonrpc *j, const char *a, size_t alen, const char *b, size_t blen)
{
	const char *text;
	size_t tlen;

	if (alen == blen && memcmp(a, b, alen) == 0)
		return 1;
	if (a[0] == '"' || b[0] == '"') {
		if (a[0] != b[0] || (memchr(a + 1, '\\', alen - 2) == NULL &&
		    memchr(b + 1, '\\', blen - 2) == NULL))
			return 0;
		if (jsonrpc_text(j, 0, b, blen, &text, &tlen) < 0)
			return 0;
		return envelope_string_eq(a, alen, text, tlen);
	}
	if (a[0] == 'n' || b[0] == 'n')
		return 0;
	return jcond_number_eq(a, alen, b, blen);
}

/* Room for a hash table of n calls, emptied. */
static int
jsonrpc_table(struct jsonrpc *j, size_t n)
{
	size_t nb = JSONRPC_MIN_BUCKETS;
	uint32_t *grown;

	while (nb < 2 * n)
		nb *= 2;
	if (j->nbuckets < nb) {
		if ((grown = realloc(j->buckets, nb * sizeof(*grown))) == NULL)
			return -1;
		j->buckets = grown;
	}
	j->nbuckets = nb;
	memset(j->buckets, 0, nb * sizeof(*j->buckets));
	return 0;
}

/* The first call (in the table) with this target and an id equal to id, or NULL. */
static struct jsonrpc_call *
jsonrpc_lookup(struct jsonrpc *j, uint32_t target, const char *id, size_t len, uint64_t hash)
{
	struct jsonrpc_call *o;
	uint32_t k;

	for (k = j->buckets[hash & (j->nbuckets - 1)]; k != 0; k = o->next) {
		o = &j->calls[k - 1];
		if (o->hash == hash && o->target == target && jsonrpc_id_eq(j, o->id, o->id_len,
		    id, len))
			return o;
	}
	return NULL;
}

int
jsonrpc_rounds(struct jsonrpc *j)
{
	struct jsonrpc_call *c, *head, *tail;
	uint32_t rounds = 1;
	size_t i, b;

	if (jsonrpc_table(j, j->ncalls) < 0)
		return -1;
	for (i = 0; i < j->ncalls; i++) {
		c = &j->calls[i];
		c->round = 0;
		c->dup = 0;
		c->next = 0;
		if (c->kind != JSONRPC_CALL || c->target == JSONRPC_NO_TARGET)
			continue;
		c->hash = jsonrpc_id_hash(j, c->id, c->id_len) ^ (c->target * JSONRPC_TARGET_MIX);
		if ((head = jsonrpc_lookup(j, c->target, c->id, c->id_len, c->hash)) == NULL) {
			b = c->hash & (j->nbuckets - 1);
			c->next = j->buckets[b];
			j->buckets[b] = (uint32_t)i + 1;
			c->tail = (uint32_t)i;
			continue;
		}
		/* The chain of equal ids: its head keeps its tail. */
		tail = &j->calls[head->tail];
		tail->dup = (uint32_t)i + 1;
		c->round = tail->round + 1;
		head->tail = (uint32_t)i;
		if (c->round + 1 > rounds)
			rounds = c->round + 1;
	}
	return (int)rounds;
}

/* An answer for this unit's call: recorded, or the call answered twice. */
static void
jsonrpc_answered(struct jsonrpc_call *c, const struct jsonrpc_scan *s, const char *val,
    size_t len)
{
	if (c->state != JSONRPC_UNANSWERED) {
		c->state = JSONRPC_TWICE;
		c->answer = NULL;
		c->answer_len = 0;
		return;
	}
	if (s->bad || !(s->seen & SEEN_JSONRPC) ||
	    !(s->seen & SEEN_RESULT) == !(s->seen & SEEN_ERROR))
		c->state = JSONRPC_BAD_ANSWER;
	else
		c->state = s->seen & SEEN_RESULT ? JSONRPC_RESULT : JSONRPC_ERROR;
	c->answer = val;
	c->answer_len = len;
}

struct jsonrpc_unit {
	const uint32_t *idx;
	size_t n;
	size_t expect;                  /* the next call of idx in order: most upstreams answer
	                                 * in the order asked */
	uint32_t target, round;
};

/* The call of the unit with this id, or NULL. */
static struct jsonrpc_call *
jsonrpc_unit_call(struct jsonrpc *j, struct jsonrpc_unit *u, const char *id, size_t len)
{
	struct jsonrpc_call *c;

	while (u->expect < u->n && j->calls[u->idx[u->expect]].kind != JSONRPC_CALL)
		u->expect++;
	if (u->expect < u->n) {
		c = &j->calls[u->idx[u->expect]];
		if (jsonrpc_id_eq(j, c->id, c->id_len, id, len)) {
			u->expect++;
			return c;
		}
	}
	c = jsonrpc_lookup(j, u->target, id, len,
	    jsonrpc_id_hash(j, id, len) ^ (u->target * JSONRPC_TARGET_MIX));
	while (c != NULL && c->round != u->round)
		c = c->dup != 0 ? &j->calls[c->dup - 1] : NULL;
	/* A unit may hold only some of its round's calls (split: single). */
	return c != NULL && c->mark == j->stamp ? c : NULL;
}

/* One element of the answer.  0, or -1 when it is not JSON. */
static int
jsonrpc_answer(struct jsonrpc *j, struct jsonrpc_unit *u, const char *body, size_t len,
    size_t pos, unsigned depth, size_t *end)
{
	struct jsonrpc_call *c;
	struct jsonrpc_scan s;
	unsigned char type;
	int r;

	if (body[pos] != '{')
		return envelope_value_end(body, len, pos, depth, end, &type) == 0 ? 0 : -1;
	r = jsonrpc_parse(j, body, len, pos, depth, jsonrpc_answer_cb, &s, end);
	if (r == ENVELOPE_ERR_MEMBERS)
		return envelope_value_end(body, len, pos, depth, end, &type) == 0 ? 0 : -1;
	if (r != 0)
		return -1;
	if (!(s.seen & SEEN_ID) || !s.id_ok)
		return 0;               /* for no call we could name */
	if ((c = jsonrpc_unit_call(j, u, s.id, s.id_len)) != NULL)
		jsonrpc_answered(c, &s, body + pos, *end - pos);
	return 0;
}

static int
jsonrpc_walk_answers(struct jsonrpc *j, struct jsonrpc_unit *u, const char *body, size_t len,
    unsigned max_depth)
{
	size_t pos = envelope_skip_ws(body, len, 0), end;

	if (pos == len || max_depth < 1)
		return -1;
	if (body[pos] == '{')
		return jsonrpc_answer(j, u, body, len, pos, max_depth, &end) == 0 &&
		    envelope_skip_ws(body, len, end) == len ? 0 : -1;
	if (body[pos] != '[' || max_depth < 2)
		return -1;
	pos = envelope_skip_ws(body, len, pos + 1);
	if (pos < len && body[pos] == ']')
		return envelope_skip_ws(body, len, pos + 1) == len ? 0 : -1;
	for (;;) {
		if (pos >= len || jsonrpc_answer(j, u, body, len, pos, max_depth - 1, &end) < 0)
			return -1;
		pos = envelope_skip_ws(body, len, end);
		if (pos < len && body[pos] == ',') {
			pos = envelope_skip_ws(body, len, pos + 1);
			continue;
		}
		if (pos < len && body[pos] == ']')
			return envelope_skip_ws(body, len, pos + 1) == len ? 0 : -1;
		return -1;
	}
}

int
jsonrpc_match(struct jsonrpc *j, const uint32_t *idx, size_t n, const char *body,
    size_t len, unsigned max_depth)
{
	struct jsonrpc_unit u;
	size_t k;

	if (n == 0)
		return 0;
	u.idx = idx;
	u.n = n;
	u.expect = 0;
	u.target = j->calls[idx[0]].target;
	u.round = j->calls[idx[0]].round;
	if (++j->stamp == 0)
		j->stamp = 1;
	for (k = 0; k < n; k++)
		j->calls[idx[k]].mark = j->stamp;
	if (jsonrpc_walk_answers(j, &u, body, len, max_depth) == 0)
		return 0;
	for (k = 0; k < n; k++) {
		j->calls[idx[k]].state = JSONRPC_UNANSWERED;
		j->calls[idx[k]].answer = NULL;
		j->calls[idx[k]].answer_len = 0;
	}
	return -1;
}
