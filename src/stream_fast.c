/* The fast path of event ops: see stream_fast.h. */
#include "stream_fast.h"
#include "envelope.h"
#include "grow.h"
#include "jscan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Drop and set items of a program the fast path takes, and members of an event's object. */
#define STREAM_FAST_ITEMS 32
#define STREAM_FAST_MEMBERS 64

struct stream_fast_item {
	unsigned key;                   /* its key: keys[key] */
	int set;                        /* set, to vals[val]; else drop */
	size_t val;
};

/* What the ops do to an input member with a given key, whatever else the event holds. */
enum stream_fast_fate { FAST_KEEP, FAST_DROP, FAST_REPLACE };

struct stream_fast_key {
	const struct rewrite_key *key;  /* its name has no byte that JSON escapes */
	enum stream_fast_fate fate;     /* of an input member with this key */
	size_t val;                     /* FAST_REPLACE: to vals[val] */
};

/*
 * The head of an event walked whole: its bytes up to the value of the first member that is
 * an object or an array, and the walk's state there.  The events of a stream mostly share
 * their head (an LLM's chunks: the same id, object, created and model; at most a counter
 * grows): an event whose first bytes differ from it only inside string values and in
 * integers' digits (no quote, backslash or control in a string, no leading zero) has its
 * members in the same places, so the walk resumes there after a vector compare of the head
 * instead of member by member.
 */
#define STREAM_FAST_MEMO 256            /* longest head kept */
#define STREAM_FAST_MEMO_SPANS 32

/* Where the walk is between members: what those before made of the output. */
struct stream_fast_at {
	size_t n;                       /* members read */
	uint32_t seen;                  /* program keys among them (bit k: keys[k]) */
	int first;                      /* nothing written after the '{' yet */
	int joined;                     /* the last span ends at the last kept value: it grows */
	int dirty;                      /* the output differs from the input */
};

/* A span of the head: the event's bytes at off, a set value (vals[off]), or a constant. */
enum stream_fast_memo_kind { MEMO_EVENT, MEMO_VALUE, MEMO_CONST };

struct stream_fast_memo {
	size_t head;                    /* bytes[0..head) kept; 0: none */
	int line;                       /* kept by a walk within one line */
	unsigned misses;                /* events in a row walked whole */
	uint64_t hits;                  /* events it described, since the plan */
	unsigned char bytes[STREAM_FAST_MEMO];
	uint64_t text[STREAM_FAST_MEMO / 64];   /* bit k: byte k lies inside a string value */
	/* Integers: bit k of digits, byte k may be any digit (a later digit, or the only one);
	 * of lead, any but 0 (the first of several). */
	uint64_t digits[STREAM_FAST_MEMO / 64], lead[STREAM_FAST_MEMO / 64];
	/* The walk's state at bytes[head], the value of the member whose key is bytes[ks..ke). */
	struct stream_fast_at at;
	size_t ks, ke, nspans;
	struct {
		const char *p;          /* MEMO_CONST */
		size_t off, len;
		enum stream_fast_memo_kind kind;
	} spans[STREAM_FAST_MEMO_SPANS];
};

struct stream_fast {
	struct stream_fast_item items[STREAM_FAST_ITEMS];
	size_t nitems;
	struct stream_fast_key keys[STREAM_FAST_ITEMS];         /* the items' keys, each once */
	size_t nkeys;
	uint64_t key_lens;              /* bit n: a key is n bytes long (63: 63 or more) */
	uint64_t key_firsts[4];         /* bit c: a key begins with byte c */
	size_t nvals;                   /* set items */
	struct rewrite_str vals[STREAM_FAST_ITEMS];     /* their JSON text, in valbuf */
	char *valbuf;
	size_t valcap;
	const struct rewrite_program *prog;
	struct rewrite_ctx *ctx;        /* the engine's, for the set values */
	const struct rewrite_vars *vars;
	int usable;                     /* the program is one the fast path takes */
	int ready;                      /* vals resolved for this feed */
	int vals_eol;                   /* a value holds a CR or LF (JSON whitespace) */
	/* The members the ops add at the end, for the keys an event had (bit k: keys[k]):
	 * the same from event to event of a stream, so kept for the last set of keys. */
	uint32_t added_for;
	int added_valid;
	size_t nadded;
	struct { unsigned key; size_t val; } added[STREAM_FAST_ITEMS];
	struct rewrite_span spans[4 * (STREAM_FAST_MEMBERS + STREAM_FAST_ITEMS) + 2];
	struct stream_fast_memo memo;
};

/* Its items, in order, and their keys, each once with what the ops do to an input member
 * of that key: dropped by a drop (a later set adds the key anew at the end), else given the
 * last set's value. */
void
stream_fast_plan(struct stream_fast *f, const struct rewrite_program *prog,
    enum validate_mode mode, struct rewrite_ctx *ctx, const struct rewrite_vars *vars)
{
	const struct rewrite_op *op;
	const struct rewrite_key *key;
	struct stream_fast_key *fk;
	size_t i, j, k;

	f->nitems = f->nvals = f->nkeys = 0;
	f->key_lens = 0;
	memset(f->key_firsts, 0, sizeof(f->key_firsts));
	f->prog = prog;
	f->ctx = ctx;
	f->vars = vars;
	f->usable = 0;
	f->ready = 0;
	f->added_valid = 0;
	f->memo.head = 0;
	f->memo.misses = 0;
	f->memo.hits = 0;
	if (prog == NULL || mode != VALIDATE_ENVELOPE)
		return;
	for (i = 0; i < prog->nops; i++) {
		op = &prog->ops[i];
		if (op->when != NULL || (op->kind != REWRITE_DROP && op->kind != REWRITE_SET))
			return;
		for (j = 0; j < op->nitems; j++) {
			key = &op->items[j].path.seg[0];
			if (op->items[j].path.nseg != 1 || key->json_len != key->len + 2 ||
			    f->nitems == STREAM_FAST_ITEMS)
				return;
			for (k = 0; k < f->nkeys; k++)
				if (f->keys[k].key->len == key->len &&
				    memcmp(f->keys[k].key->name, key->name, key->len) == 0)
					break;
			fk = &f->keys[k];
			if (k == f->nkeys) {
				*fk = (struct stream_fast_key){ .key = key, .fate = FAST_KEEP };
				f->key_lens |= 1ULL << (key->len < 63 ? key->len : 63);
				if (key->len > 0)
					f->key_firsts[(unsigned char)key->name[0] >> 6] |=
					    1ULL << ((unsigned char)key->name[0] & 63);
				f->nkeys++;
			}
			f->items[f->nitems].key = (unsigned)k;
			f->items[f->nitems].set = op->kind == REWRITE_SET;
			f->items[f->nitems].val = op->kind == REWRITE_SET ? f->nvals++ : 0;
			if (op->kind == REWRITE_DROP) {
				fk->fate = FAST_DROP;
			} else if (fk->fate != FAST_DROP) {
				fk->fate = FAST_REPLACE;
				fk->val = f->items[f->nitems].val;
			}
			f->nitems++;
		}
	}
	f->usable = 1;
}

/* The set values with the answer's variables, kept apart from the engine's scratch (which
 * an event the engine takes reuses).  0, or -1 without memory. */
static int
stream_fast_values(struct stream_fast *f)
{
	size_t i, need = 0, at = 0;

	if (f->nvals != 0) {
		if (rewrite_set_values(f->ctx, f->prog, f->vars, f->vals, f->nvals) != 0)
			return -1;
		for (i = 0; i < f->nvals; i++)
			need += f->vals[i].len;
		if (grow_array(&f->valbuf, &f->valcap, need + 1, 1, 256) != 0)
			return -1;
		for (i = 0; i < f->nvals; i++) {
			memcpy(f->valbuf + at, f->vals[i].p, f->vals[i].len);
			f->vals[i].p = f->valbuf + at;
			at += f->vals[i].len;
		}
	}
	f->vals_eol = at != 0 && (memchr(f->valbuf, '\n', at) != NULL ||
	    memchr(f->valbuf, '\r', at) != NULL);
	f->ready = 1;
	return 0;
}

/* JSON whitespace; within one line (line nonzero) CR and LF are not: they end it. */
#define STREAM_FAST_WS(c, line) ((c) == ' ' || (c) == '\t' || \
	(!(line) && ((c) == '\n' || (c) == '\r')))

static inline size_t
stream_fast_ws(const char *p, size_t len, size_t i, int line)
{
	while (i < len && STREAM_FAST_WS(p[i], line))
		i++;
	return i;
}

/*
 * Quotes, backslashes and control bytes of a 64-byte window of the event: the end of each
 * string is found in the mask of the window it lies in, so the walk from member to member
 * waits on a shift and a bit count rather than on a load and compares per string.  A string
 * with a control byte (NUL, a line end: invalid JSON) is left to the engine.
 */
struct stream_fast_win {
	size_t at;                      /* the window is p[at..at + 64) (SIZE_MAX - 63: none) */
	uint64_t special;               /* bit k: p[at + k] is '"', '\\' or below 0x20 */
};

static inline uint64_t
stream_fast_special_mask(const char *p)
{
	uint64_t m = 0;
#ifdef __SSE2__
	const __m128i q = _mm_set1_epi8('"'), b = _mm_set1_epi8('\\');
	const __m128i ctl = _mm_set1_epi8(0x1f);
	__m128i x;
	int k;

	for (k = 0; k < 4; k++) {
		x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
		m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, q),
		    _mm_or_si128(_mm_cmpeq_epi8(x, b),
		    _mm_cmpeq_epi8(_mm_min_epu8(x, ctl), x)))) << (16 * k);
	}
#else
	int k;

	for (k = 0; k < 64; k++)
		m |= (uint64_t)(p[k] == '"' || p[k] == '\\' || (unsigned char)p[k] < 0x20) << k;
#endif
	return m;
}

/* The first '"', '\\' or control byte at or after p[i], or len.  A new window starts at i,
 * or, near the end, is the last 64 bytes (overlapping the one before): only an event shorter
 * than a window is looked at byte by byte. */
static inline size_t
stream_fast_special(struct stream_fast_win *w, const char *p, size_t len, size_t i)
{
	uint64_t r;

	for (;;) {
		if (i - w->at < 64) {   /* i below at wraps to a large number */
			r = w->special >> (i - w->at);
			if (r != 0)
				return i + (size_t)__builtin_ctzll(r);
			i = w->at + 64;
		}
		if (len - i >= 64)
			w->at = i;
		else if (i < len && len >= 64)
			w->at = len - 64;
		else
			break;
		w->special = stream_fast_special_mask(p + w->at);
	}
	for (; i < len; i++)
		if (p[i] == '"' || p[i] == '\\' || (unsigned char)p[i] < 0x20)
			return i;
	return len;
}

/* The end of the string at p[i] ('"'), or 0 when it has an escape or a control byte, or no
 * end. */
static inline size_t
stream_fast_string(struct stream_fast_win *w, const char *p, size_t len, size_t i)
{
	i = stream_fast_special(w, p, len, i + 1);
	return i < len && p[i] == '"' ? i + 1 : 0;
}

/* Whether a[0..n) and b[0..n) are the same: keys are short, so 8 bytes a compare (the last
 * two overlapping) rather than a library call or a byte at a time. */
static inline int
stream_fast_same(const char *a, const char *b, size_t n)
{
	uint64_t x, y;
	size_t i;

	if (n < 8) {
		for (i = 0; i < n; i++)
			if (a[i] != b[i])
				return 0;
		return 1;
	}
	for (i = 0; i + 8 < n; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		if (x != y)
			return 0;
	}
	memcpy(&x, a + n - 8, 8);
	memcpy(&y, b + n - 8, 8);
	return x == y;
}

/* The end of the run of digits at p[i..len): 8 bytes a step where bytes are in little-endian
 * order, so that a number's length costs no branch per digit.  A byte b is a digit when
 * both b and b + 6 lie in 0x30..0x3f; a carry out of a byte that is no digit reaches only
 * the bytes after it. */
static inline size_t
stream_fast_digits(const char *p, size_t i, size_t len)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	const uint64_t hi = 0xf0f0f0f0f0f0f0f0ULL, d = 0x3030303030303030ULL;
	uint64_t x, other;

	for (; len - i >= 8; i += 8) {
		memcpy(&x, p + i, 8);
		other = ((x & hi) ^ d) | (((x + 0x0606060606060606ULL) & hi) ^ d);
		if (other != 0)
			return i + (size_t)__builtin_ctzll(other) / 8;
	}
#endif
	while (i < len && p[i] >= '0' && p[i] <= '9')
		i++;
	return i;
}

/* The index of the program key that name[0..len) is, or -1. */
static inline int
stream_fast_key_of(const struct stream_fast *f, const char *name, size_t len)
{
	unsigned char c = len > 0 ? (unsigned char)name[0] : 0;
	size_t k;

	/* Most members are no key of the program: their length or first byte tells. */
	if (((f->key_lens >> (len < 63 ? len : 63)) & 1) == 0 ||
	    (len > 0 && ((f->key_firsts[c >> 6] >> (c & 63)) & 1) == 0))
		return -1;
	for (k = 0; k < f->nkeys; k++)
		if (f->keys[k].key->len == len && stream_fast_same(name, f->keys[k].key->name, len))
			return (int)k;
	return -1;
}

/*
 * The members the ops add at the end of an event that had the keys of mask (bit k: keys[k]),
 * in order, as the engine adds them: a set of a key the event no longer has appends it, or
 * gives the one it appended before the new value; a drop takes an appended one away again.
 */
static void
stream_fast_added(struct stream_fast *f, uint32_t mask)
{
	const struct stream_fast_item *it;
	uint32_t input = mask;
	size_t i, j;

	f->nadded = 0;
	for (i = 0; i < f->nitems; i++) {
		it = &f->items[i];
		for (j = 0; j < f->nadded && f->added[j].key != it->key; j++)
			continue;
		if (!it->set) {
			input &= ~(1U << it->key);
			if (j < f->nadded) {
				memmove(&f->added[j], &f->added[j + 1],
				    (f->nadded - j - 1) * sizeof(f->added[0]));
				f->nadded--;
			}
		} else if ((input >> it->key) & 1) {
			continue;       /* the input's members of that key take the value */
		} else if (j < f->nadded) {
			f->added[j].val = it->val;
		} else {
			f->added[f->nadded].key = it->key;
			f->added[f->nadded++].val = it->val;
		}
	}
	f->added_for = mask;
	f->added_valid = 1;
}

static inline void
stream_fast_span(struct rewrite_span *s, size_t *n, const char *p, size_t len)
{
	s[*n].p = p;
	s[(*n)++].len = len;
}

/* Bits a..b-1 (b <= STREAM_FAST_MEMO) of one of the memo's masks. */
static void
stream_fast_mark(uint64_t *m, size_t a, size_t b)
{
	size_t w;

	for (w = a / 64; w * 64 < b; w++)
		m[w] |= (a > w * 64 ? ~0ULL << (a - w * 64) : ~0ULL) &
		    (b < w * 64 + 64 ? (1ULL << (b - w * 64)) - 1 : ~0ULL);
}

/* Whether c may stand at byte k of the memo's head: the same byte, or one that leaves the
 * value it lies in the same kind and length. */
static inline int
stream_fast_memo_byte(const struct stream_fast_memo *m, size_t k, unsigned char c)
{
	uint64_t bit = 1ULL << (k % 64);

	if (c == m->bytes[k])
		return 1;
	if (m->text[k / 64] & bit)
		return c != '"' && c != '\\' && c >= 0x20;
	if (m->digits[k / 64] & bit)
		return c >= '0' && c <= '9';
	return (m->lead[k / 64] & bit) != 0 && c >= '1' && c <= '9';
}

/* Whether the memo describes p[0..len) too: every byte of its head the same, but for bytes
 * inside string values that are no quote, backslash or control, and integers' digits that
 * are digits (no leading zero).  16 bytes a compare; the last few past len one by one. */
static inline int
stream_fast_memo_fits(const struct stream_fast_memo *m, const char *p, size_t len)
{
	size_t k = 0;

	if (len < m->head)
		return 0;
#ifdef __SSE2__
	for (; k < m->head && k + 16 <= len; k += 16) {
		const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + k));
		const __m128i d = _mm_sub_epi8(x, _mm_set1_epi8('0'));
		uint32_t diff, special, digit, zero, ok;

		diff = 0xffffu ^ (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x,
		    _mm_loadu_si128((const __m128i *)(const void *)(m->bytes + k))));
		if (m->head - k < 16)
			diff &= (1U << (m->head - k)) - 1;
		if (diff == 0)
			continue;
		special = (uint32_t)_mm_movemask_epi8(_mm_or_si128(
		    _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
		    _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
		    _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x)));
		digit = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d,
		    _mm_set1_epi8(9)), d));
		zero = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('0')));
		ok = ((uint32_t)(m->text[k / 64] >> (k % 64)) & ~special) |
		    ((uint32_t)(m->digits[k / 64] >> (k % 64)) & digit) |
		    ((uint32_t)(m->lead[k / 64] >> (k % 64)) & digit & ~zero);
		if ((diff & ~ok) != 0)
			return 0;
	}
#endif
	for (; k < m->head; k++)
		if (!stream_fast_memo_byte(m, k, (unsigned char)p[k]))
			return 0;
	return 1;
}

/* Keep json[0..head) and its spans, the walk being at (*at) the value of the member whose
 * key is json[ks..ke); not when the head is too long or the spans do not fit. */
static void
stream_fast_memo_keep(struct stream_fast *f, const char *json, size_t head,
    const struct rewrite_span *s, size_t ns, int line, const struct stream_fast_at *at,
    size_t ks, size_t ke)
{
	struct stream_fast_memo *m = &f->memo;
	uintptr_t off;
	size_t j, v;

	if (head > STREAM_FAST_MEMO || ns > STREAM_FAST_MEMO_SPANS)
		return;
	for (j = 0; j < ns; j++) {
		off = (uintptr_t)s[j].p - (uintptr_t)json;
		m->spans[j].len = s[j].len;
		m->spans[j].p = s[j].p;
		if ((uintptr_t)s[j].p >= (uintptr_t)json && off < head) {
			m->spans[j].kind = MEMO_EVENT;
			m->spans[j].off = off;
			continue;
		}
		m->spans[j].kind = MEMO_CONST;
		for (v = 0; v < f->nvals; v++)
			if (s[j].p == f->vals[v].p) {
				m->spans[j].kind = MEMO_VALUE;
				m->spans[j].off = v;
			}
	}
	memcpy(m->bytes, json, head);
	m->nspans = ns;
	m->line = line;
	m->at = *at;
	m->ks = ks;
	m->ke = ke;
	m->head = head;
}

/* The head's spans for the event at json. */
static inline size_t
stream_fast_memo_spans(const struct stream_fast *f, const char *json, struct rewrite_span *s)
{
	const struct stream_fast_memo *m = &f->memo;
	size_t j;

	for (j = 0; j < m->nspans; j++) {
		s[j].len = m->spans[j].len;
		s[j].p = m->spans[j].kind == MEMO_EVENT ? json + m->spans[j].off :
		    m->spans[j].kind == MEMO_VALUE ? f->vals[m->spans[j].off].p : m->spans[j].p;
	}
	return m->nspans;
}

/*
 * The ops on the object json[0..len) the fast way, in one walk over its members: 1 with the
 * new text in f->spans (*nspans), 0 when the event passes as it came, -2 when the engine
 * must decide.  The output is made as rewrite_emit makes an edited object, byte for byte:
 * input members that were neighbours as one span with what lay between them, a comma
 * before any other, a replaced member as its key, ':' and the new value, then the members
 * the ops add.  Compact JSON is the common case: each separator is looked for first where
 * it would be without whitespace.
 *
 * With line nonzero the object is the start of json[0..len), which goes on past it: the
 * walk stops after its '}', *end, and a CR or LF before that is a -2, so that the object is
 * known to lie within one line without the line's end being sought first.  Not an object
 * is a -2 too.
 */
static inline __attribute__((always_inline)) int
stream_fast_walk(struct stream_fast *f, const char *json, size_t len, unsigned max_depth,
    size_t max_members, int line, size_t *nspans, size_t *end)
{
	struct stream_fast_win w = { SIZE_MAX - 63, 0 };
	struct stream_fast_memo *m = &f->memo;
	struct rewrite_span *s = f->spans;
	const struct stream_fast_key *fk;
	const struct rewrite_key *key;
	struct stream_fast_at at = { .n = 0, .seen = 0, .first = 1, .joined = 0,
	    .dirty = f->nvals != 0 };
	size_t i, ks, ke, vs, ns = 0, j;
	ssize_t e;
	int k, record = 0;

	if (max_members > STREAM_FAST_MEMBERS)
		max_members = STREAM_FAST_MEMBERS;
	if (m->head != 0 && m->line == line && len <= INT_MAX - 1 && max_depth >= 1 &&
	    stream_fast_memo_fits(m, json, len)) {
		/* The head is the last one's: on from its first object or array (into the loop,
		 * where the member's value is read). */
		m->misses = 0;
		m->hits++;
		ns = stream_fast_memo_spans(f, json, s);
		at = m->at;
		ks = m->ks;
		ke = m->ke;
		i = m->head;
		goto value;
	} else {
		/* Kept again while events share heads; tried now and then when they do not. */
		m->head = 0;
		if (++m->misses <= 8 || m->misses % 64 == 0) {
			record = 1;
			memset(m->text, 0, sizeof(m->text));
			memset(m->digits, 0, sizeof(m->digits));
			memset(m->lead, 0, sizeof(m->lead));
		}
		i = stream_fast_ws(json, len, 0, line);
		if (i == len || json[i] != '{')
			return line ? -2 : 0;
		if (len > INT_MAX - 1 || max_depth < 1)
			return -2;
		stream_fast_span(s, &ns, "{", 1);
		i = stream_fast_ws(json, len, i + 1, line);
		if (i < len && json[i] == '}') {
			i++;
			goto end;
		}
	}
	for (;;) {
		if (i < len && json[i] != '"')
			i = stream_fast_ws(json, len, i, line);
		if (i == len || json[i] != '"' ||
		    (i = stream_fast_string(&w, json, len, ks = i)) == 0)
			return -2;
		ke = i;
		if (i < len && json[i] != ':')
			i = stream_fast_ws(json, len, i, line);
		if (i == len || json[i] != ':')
			return -2;
		if (++i < len && STREAM_FAST_WS(json[i], line))
			i = stream_fast_ws(json, len, i, line);
value:
		if (i == len)
			return -2;
		vs = i;
		switch (json[i]) {
		case '"':
			if ((i = stream_fast_string(&w, json, len, i)) == 0)
				return -2;
			if (record && i <= STREAM_FAST_MEMO)
				stream_fast_mark(m->text, vs + 1, i - 1);
			break;
		case '{':
		case '[':
			if (record) {
				/* The head ends at the first value that is no string or number. */
				record = 0;
				stream_fast_memo_keep(f, json, vs, s, ns, line, &at, ks, ke);
			}
			e = line ? jscan_skip_line(json, len, i, max_depth - 1) :
			    jscan_skip(json, len, i, max_depth - 1);
			if (e < 0)
				return -2;
			i = (size_t)e;
			break;
		case '0':
			/* 0 alone; anything longer (0.5, 01) is for the check below. */
			if (i + 1 < len && (json[i + 1] == ',' || json[i + 1] == '}')) {
				i++;
				if (record && i <= STREAM_FAST_MEMO)
					stream_fast_mark(m->digits, vs, i);
				break;
			}
			goto primitive;
		case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8':
		case '9':
			/* An integer that a separator ends: nothing more to check.  A second digit
			 * is looked for first: a one-digit number then waits on no wider read. */
			if (++i < len && json[i] >= '0' && json[i] <= '9')
				i = stream_fast_digits(json, i + 1, len);
			if (i < len && (json[i] == ',' || json[i] == '}')) {
				if (record && i <= STREAM_FAST_MEMO) {
					stream_fast_mark(i - vs == 1 ? m->digits : m->lead, vs, vs + 1);
					stream_fast_mark(m->digits, vs + 1, i);
				}
				break;
			}
			i = vs;
			/* FALLTHROUGH */
		default:
primitive:
			while (i < len && json[i] != ',' && json[i] != '}' && json[i] != ']' &&
			    !STREAM_FAST_WS(json[i], line))
				i++;
			if (!envelope_is_primitive(json + vs, i - vs))
				return -2;
		}
		if (++at.n > max_members)
			return -2;
		k = stream_fast_key_of(f, json + ks + 1, ke - ks - 2);
		fk = k < 0 ? NULL : &f->keys[k];
		if (k >= 0)
			at.seen |= 1U << k;
		if (fk == NULL || fk->fate == FAST_KEEP) {
			if (at.joined) {
				/* the last span ends at its neighbour's value: it grows */
				s[ns - 1].len = (size_t)(json + i - s[ns - 1].p);
			} else {
				if (!at.first)
					stream_fast_span(s, &ns, ",", 1);
				stream_fast_span(s, &ns, json + ks, i - ks);
			}
			at.first = 0;
			at.joined = 1;
		} else if (fk->fate == FAST_DROP) {
			at.dirty = 1;
			at.joined = 0;
		} else {
			if (!at.first)
				stream_fast_span(s, &ns, ",", 1);
			stream_fast_span(s, &ns, json + ks, ke - ks);
			stream_fast_span(s, &ns, ":", 1);
			stream_fast_span(s, &ns, f->vals[fk->val].p, f->vals[fk->val].len);
			at.first = 0;
			at.joined = 0;
		}
		if (i < len && json[i] != ',' && json[i] != '}')
			i = stream_fast_ws(json, len, i, line);
		if (i < len && json[i] == ',') {
			i++;
			continue;
		}
		if (i < len && json[i] == '}') {
			i++;
			break;
		}
		return -2;
	}
end:
	if (line)
		*end = i;
	else if (stream_fast_ws(json, len, i, 0) != len)
		return -2;
	if (!at.dirty)
		return 0;
	if (!f->added_valid || f->added_for != at.seen)
		stream_fast_added(f, at.seen);
	for (j = 0; j < f->nadded; j++) {
		/* A program key: ,"key": */
		key = f->keys[f->added[j].key].key;
		stream_fast_span(s, &ns, key->json - !at.first, key->json_len + 1 + !at.first);
		stream_fast_span(s, &ns, f->vals[f->added[j].val].p, f->vals[f->added[j].val].len);
		at.first = 0;
	}
	stream_fast_span(s, &ns, "}", 1);
	*nspans = ns;
	return 1;
}

/* Whether the fast path takes this answer's events, its set values resolved for this feed. */
static inline int
stream_fast_ready(struct stream_fast *f)
{
	if (__builtin_expect(f->ready, 1))
		return 1;
	if (!f->usable)
		return 0;
	if (stream_fast_values(f) != 0) {
		f->usable = 0;          /* out of memory: the engine says so */
		return 0;
	}
	return 1;
}

int
stream_fast_apply(struct stream_fast *f, const char *json, size_t len, unsigned max_depth,
    size_t max_members, const struct rewrite_span **spans, size_t *nspans)
{
	if (!stream_fast_ready(f))
		return -2;
	*spans = f->spans;
	return stream_fast_walk(f, json, len, max_depth, max_members, 0, nspans, NULL);
}

int
stream_fast_apply_line(struct stream_fast *f, const char *json, size_t len,
    unsigned max_depth, size_t max_members, const struct rewrite_span **spans, size_t *nspans,
    size_t *end)
{
	if (!stream_fast_ready(f) || f->vals_eol)
		return -2;
	*spans = f->spans;
	return stream_fast_walk(f, json, len, max_depth, max_members, 1, nspans, end);
}

struct stream_fast *
stream_fast_new(void)
{
	return calloc(1, sizeof(struct stream_fast));
}

void
stream_fast_free(struct stream_fast *f)
{
	if (f == NULL)
		return;
	free(f->valbuf);
	free(f);
}

void
stream_fast_unready(struct stream_fast *f)
{
	f->ready = 0;
}

int
stream_fast_values_eol(const struct stream_fast *f)
{
	return f->vals_eol;
}

uint64_t
stream_fast_heads(const struct stream_fast *f)
{
	return f->memo.hits;
}

