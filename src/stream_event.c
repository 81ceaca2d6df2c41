/* Envelope ops per event: the buffered engine on each event, the parsers in sse.c and
 * ndjson.c around it, and a fast path for the ops events mostly get: drop and set of
 * top-level keys. */
#include "stream_event.h"
#include "envelope.h"
#include "grow.h"
#include "jscan.h"
#include "ndjson.h"
#include "sse.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Drop and set items of a program the fast path takes, and members of an event's object. */
#define STREAM_FAST_ITEMS 32
#define STREAM_FAST_MEMBERS 64
/* Output is gathered up to this much before it goes to the write function; a piece this
 * large goes on by itself. */
#define STREAM_EVENTS_BATCH (64 * 1024)
#define STREAM_EVENTS_PIECE 4096

int
stream_event_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *json, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out)
{
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	while (i < len && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' ||
	    json[i] == '\r'))
		i++;
	if (i == len || json[i] != '{')
		return 0;
	if (rewrite_apply(ctx, prog, mode, json, len, vars, out) != 0)
		return out->invalid ? 0 : -1;
	if (out->nspans == 1 && out->spans[0].p == json && out->spans[0].len == len)
		return 0;
	return 1;
}

/*
 * The fast path.  A program whose ops are all drop and set of top-level keys, without when:,
 * needs of an event only its outer object's members: they are found here with the scanner
 * skipping the values, the ops are applied to a flat list of them, and the output is made as
 * the engine's emit makes it, byte for byte.  It takes only what is plainly valid (keys and
 * string values at the top without escapes or NUL, strict separators); anything else goes to
 * the engine, which then decides as it always did.
 */
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
 * The head of an event walked whole: its bytes up to the key of the first member whose value
 * is an object or an array, and the walk's state there.  The events of a stream mostly share
 * their head (an LLM's chunks: the same id, object, created and model; at most a counter
 * grows): an event whose first bytes differ from it only inside string values and in
 * integers' later digits has its members in the same places, so the walk resumes there after
 * a vector compare of the head instead of member by member.
 */
#define STREAM_FAST_MEMO 256            /* longest head kept */
#define STREAM_FAST_MEMO_SPANS 32

/* What a span of the head is: the event's bytes at off, a set value (vals[off]), a constant. */
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
	/* The walk's state at bytes[head]. */
	size_t n, nspans;
	uint32_t seen;
	int first, joined, dirty;
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

/* Take prog if the fast path can: its items, in order, and their keys, each once with what
 * the ops do to an input member of that key: dropped by a drop (a later set adds the key
 * anew at the end), else given the last set's value. */
static void
stream_fast_plan(struct stream_fast *f, const struct rewrite_program *prog,
    enum validate_mode mode)
{
	const struct rewrite_op *op;
	const struct rewrite_key *key;
	struct stream_fast_key *fk;
	size_t i, j, k;

	f->nitems = f->nvals = f->nkeys = 0;
	f->key_lens = 0;
	memset(f->key_firsts, 0, sizeof(f->key_firsts));
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
stream_fast_values(struct stream_fast *f, struct rewrite_ctx *ctx,
    const struct rewrite_program *prog, const struct rewrite_vars *vars)
{
	size_t i, need = 0, at = 0;

	if (f->nvals != 0) {
		if (rewrite_set_values(ctx, prog, vars, f->vals, f->nvals) != 0)
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

/* Keep json[0..head) and its spans, the walk being at the key of a member; not when the
 * spans do not fit. */
static void
stream_fast_memo_keep(struct stream_fast *f, const char *json, size_t head,
    const struct rewrite_span *s, size_t ns)
{
	struct stream_fast_memo *m = &f->memo;
	uintptr_t at;
	size_t j, v;

	if (ns > STREAM_FAST_MEMO_SPANS)
		return;
	for (j = 0; j < ns; j++) {
		at = (uintptr_t)s[j].p - (uintptr_t)json;
		m->spans[j].len = s[j].len;
		m->spans[j].p = s[j].p;
		if ((uintptr_t)s[j].p >= (uintptr_t)json && at < head) {
			m->spans[j].kind = MEMO_EVENT;
			m->spans[j].off = at;
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
	size_t i, ks, ke, vs, n = 0, ns = 0, j;
	ssize_t e;
	uint32_t seen = 0;
	int k, first = 1, joined = 0, dirty = f->nvals != 0, record = 0;

	if (max_members > STREAM_FAST_MEMBERS)
		max_members = STREAM_FAST_MEMBERS;
	if (m->head != 0 && m->line == line && len <= INT_MAX - 1 && max_depth >= 1 &&
	    stream_fast_memo_fits(m, json, len)) {
		/* The head is the last one's: on from its last member. */
		m->misses = 0;
		m->hits++;
		ns = stream_fast_memo_spans(f, json, s);
		n = m->n;
		seen = m->seen;
		first = m->first;
		joined = m->joined;
		dirty = m->dirty;
		i = m->head;
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
				m->line = line;
				m->n = n;
				m->seen = seen;
				m->first = first;
				m->joined = joined;
				m->dirty = dirty;
				if (ks <= STREAM_FAST_MEMO)
					stream_fast_memo_keep(f, json, ks, s, ns);
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
		if (++n > max_members)
			return -2;
		k = stream_fast_key_of(f, json + ks + 1, ke - ks - 2);
		fk = k < 0 ? NULL : &f->keys[k];
		if (k >= 0)
			seen |= 1U << k;
		if (fk == NULL || fk->fate == FAST_KEEP) {
			if (joined) {
				/* the last span ends at its neighbour's value: it grows */
				s[ns - 1].len = (size_t)(json + i - s[ns - 1].p);
			} else {
				if (!first)
					stream_fast_span(s, &ns, ",", 1);
				stream_fast_span(s, &ns, json + ks, i - ks);
			}
			first = 0;
			joined = 1;
		} else if (fk->fate == FAST_DROP) {
			dirty = 1;
			joined = 0;
		} else {
			if (!first)
				stream_fast_span(s, &ns, ",", 1);
			stream_fast_span(s, &ns, json + ks, ke - ks);
			stream_fast_span(s, &ns, ":", 1);
			stream_fast_span(s, &ns, f->vals[fk->val].p, f->vals[fk->val].len);
			first = 0;
			joined = 0;
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
	if (!dirty)
		return 0;
	if (!f->added_valid || f->added_for != seen)
		stream_fast_added(f, seen);
	for (j = 0; j < f->nadded; j++) {
		/* A program key: ,"key": */
		key = f->keys[f->added[j].key].key;
		stream_fast_span(s, &ns, key->json - !first, key->json_len + 1 + !first);
		stream_fast_span(s, &ns, f->vals[f->added[j].val].p, f->vals[f->added[j].val].len);
		first = 0;
	}
	stream_fast_span(s, &ns, "}", 1);
	*nspans = ns;
	return 1;
}

/* The ops on the object that is the whole of json[0..len): stream_fast_walk's results. */
static int
stream_fast_apply(struct stream_fast *f, const char *json, size_t len, unsigned max_depth,
    size_t max_members, size_t *nspans)
{
	return stream_fast_walk(f, json, len, max_depth, max_members, 0, nspans, NULL);
}

/* The same on an object at the start of json[0..len), within one line: see stream_fast_walk. */
static int
stream_fast_apply_line(struct stream_fast *f, const char *json, size_t len,
    unsigned max_depth, size_t max_members, size_t *nspans, size_t *end)
{
	return stream_fast_walk(f, json, len, max_depth, max_members, 1, nspans, end);
}

int
stream_events_format_of(const char *ct, size_t len, enum stream_events_format *format)
{
	static const struct {
		const char *type;
		enum stream_events_format format;
	} types[] = {
		{ "text/event-stream", STREAM_EVENTS_SSE },
		{ "application/x-ndjson", STREAM_EVENTS_NDJSON },
		{ "application/jsonl", STREAM_EVENTS_NDJSON },
		{ "application/json-seq", STREAM_EVENTS_JSON_SEQ },
	};
	size_t i, j, n = 0;

	while (n < len && ct[n] != ';' && ct[n] != ' ' && ct[n] != '\t')
		n++;
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strlen(types[i].type) != n)
			continue;
		for (j = 0; j < n; j++)
			if ((ct[j] >= 'A' && ct[j] <= 'Z' ? ct[j] + 32 : ct[j]) != types[i].type[j])
				break;
		if (j == n) {
			*format = types[i].format;
			return 1;
		}
	}
	return 0;
}

struct stream_events {
	enum stream_events_format format;
	struct rewrite_ctx *rw;
	unsigned max_depth;
	size_t max_members;
	struct stream_fast fast;
	int fast_off;                   /* every event to the engine (tests) */
	uint64_t fast_events;           /* events the fast path decided */
	char *obuf;                     /* output gathered for the write function */
	size_t olen, ocap;
	struct sse_parser *sse;
	struct ndjson_parser *lines, *seq;
	const struct rewrite_program *prog;
	enum validate_mode mode;
	const struct rewrite_vars *vars;
	struct stream_events_counts counts;
	stream_events_write_fn write;
	stream_events_take_fn take;
	void *arg;
};

static int stream_events_sse_line(void *arg, const char *raw, size_t value, size_t avail,
    size_t *taken);

struct stream_events *
stream_events_new(size_t max_event, unsigned max_depth, size_t max_members)
{
	struct stream_events *se;

	if ((se = calloc(1, sizeof(*se))) == NULL)
		return NULL;
	se->max_depth = max_depth;
	se->max_members = max_members;
	if ((se->rw = rewrite_ctx_new(max_depth, max_members)) == NULL ||
	    (se->sse = sse_parser_new(max_event)) == NULL ||
	    (se->lines = ndjson_parser_new(NDJSON_LINES, max_event)) == NULL ||
	    (se->seq = ndjson_parser_new(NDJSON_SEQ, max_event)) == NULL) {
		stream_events_free(se);
		return NULL;
	}
	sse_parser_data_line(se->sse, stream_events_sse_line);
	return se;
}

void
stream_events_free(struct stream_events *se)
{
	if (se == NULL)
		return;
	rewrite_ctx_free(se->rw);
	sse_parser_free(se->sse);
	ndjson_parser_free(se->lines);
	ndjson_parser_free(se->seq);
	free(se->fast.valbuf);
	free(se->obuf);
	free(se);
}

void
stream_events_start(struct stream_events *se, enum stream_events_format format,
    const struct rewrite_program *prog, enum validate_mode mode,
    const struct rewrite_vars *vars)
{
	se->format = format;
	se->prog = prog;
	se->mode = mode;
	se->vars = vars;
	memset(&se->counts, 0, sizeof(se->counts));
	se->fast_events = 0;
	se->olen = 0;
	stream_fast_plan(&se->fast, prog, mode);
	sse_parser_reset(se->sse);
	ndjson_parser_reset(se->lines);
	ndjson_parser_reset(se->seq);
}

/* Output goes into the batch; a large piece goes on by itself, after it. */
static int
stream_events_flush(struct stream_events *se)
{
	size_t n = se->olen;
	char *p = se->obuf;

	if (n == 0)
		return 0;
	se->olen = 0;
	if (se->take == NULL)
		return se->write(se->arg, p, n);
	se->obuf = NULL;                /* the taker's now; the next batch gets another */
	se->ocap = 0;
	return se->take(se->arg, p, n);
}

static int
stream_events_out(void *arg, const char *p, size_t len)
{
	struct stream_events *se = arg;
	int r;

	if (len == 0)
		return 0;       /* nothing to add, and obuf may not exist yet */
	if (len >= STREAM_EVENTS_PIECE) {
		if ((r = stream_events_flush(se)) != 0)
			return r;
		return se->write(se->arg, p, len);
	}
	if (se->olen + len > se->ocap && grow_array(&se->obuf, &se->ocap, se->olen + len, 1,
	    STREAM_EVENTS_BATCH + STREAM_EVENTS_PIECE) != 0)
		return -1;
	memcpy(se->obuf + se->olen, p, len);
	se->olen += len;
	return 0;
}

/* After an event: a full batch goes on. */
static int
stream_events_batch(struct stream_events *se, int r)
{
	if (r == 0 && se->olen >= STREAM_EVENTS_BATCH)
		r = stream_events_flush(se);
	return r;
}

/* Whether the fast path may take this answer's events, its values resolved for this feed. */
static int
stream_events_fast_ready(struct stream_events *se)
{
	if (!se->fast.usable || se->fast_off)
		return 0;
	if (!se->fast.ready && stream_fast_values(&se->fast, se->rw, se->prog, se->vars) != 0) {
		se->fast.usable = 0;    /* out of memory: the engine says so */
		return 0;
	}
	return 1;
}

/* The ops on one event's JSON: 1 rewritten (spans in *rr), else it passes. */
static int
stream_events_apply(struct stream_events *se, const char *json, size_t len,
    struct rewrite_result *rr)
{
	int r = -2;

	if (stream_events_fast_ready(se) && (r = stream_fast_apply(&se->fast, json, len,
	    se->max_depth, se->max_members, &rr->nspans)) != -2) {
		se->fast_events++;
		rr->spans = se->fast.spans;
	}
	if (r == -2)
		r = stream_event_apply(se->rw, se->prog, se->mode, json, len, se->vars, rr);
	if (r > 0) {
		se->counts.rewritten++;
		return 1;
	}
	se->counts.passed++;
	se->counts.failed += r < 0;
	return 0;
}

/* Copy n bytes: most pieces of an edited event are a few bytes long (a brace, a comma, a
 * key), where a library call would cost more than the copy. */
static inline char *
stream_events_copy(char *o, const char *p, size_t n)
{
	uint64_t a, b;
	uint32_t c, d;

	if (n >= 8 && n <= 16) {
		memcpy(&a, p, 8);
		memcpy(&b, p + n - 8, 8);
		memcpy(o, &a, 8);
		memcpy(o + n - 8, &b, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(&c, p, 4);
		memcpy(&d, p + n - 4, 4);
		memcpy(o, &c, 4);
		memcpy(o + n - 4, &d, 4);
	} else if (n < 4) {
		while (n-- > 0)
			*o++ = *p++;
		return o;
	} else {
		memcpy(o, p, n);
	}
	return o + n;
}

/*
 * An event of one data line that the fast path rewrote: its bytes up to the value
 * (raw[0..a)), the new value, its bytes from the line end on (raw[b..len)), as
 * sse_event_write writes them.  Nothing in the new value ends a line: the input's spans lie
 * in a line, the program's keys have no escapes and the values no CR or LF (else
 * sse_event_write).
 */
static int
stream_events_sse_direct(struct stream_events *se, const char *raw, size_t a, size_t b,
    size_t len, const struct rewrite_span *spans, size_t n)
{
	size_t need, i;
	char *o;

	need = a + (len - b);
	for (i = 0; i < n; i++)
		need += spans[i].len;
	if (se->olen + need > se->ocap && grow_array(&se->obuf, &se->ocap, se->olen + need, 1,
	    STREAM_EVENTS_BATCH + STREAM_EVENTS_PIECE) != 0)
		return -1;
	o = se->obuf + se->olen;
	o = stream_events_copy(o, raw, a);
	for (i = 0; i < n; i++)
		o = stream_events_copy(o, spans[i].p, spans[i].len);
	stream_events_copy(o, raw + b, len - b);
	se->olen += need;
	return 0;
}

/*
 * The parser's hook for an event that is one data line (sse_data_line_fn): the fast walk
 * reads the object from the value on and finds where it ends in the same pass, so the line
 * end is not sought first; what follows must be the LF of the line and the blank line's.
 * Anything else (not an object, an object the walk leaves to the engine, another line
 * after it, the chunk's end) is left to the parser, which gives the event to
 * stream_events_sse_cb as before: the same bytes either way.
 */
static int
stream_events_sse_line(void *arg, const char *raw, size_t value, size_t avail, size_t *taken)
{
	struct stream_events *se = arg;
	size_t ns, end;
	int r;

	if (!stream_events_fast_ready(se) || se->fast.vals_eol)
		return 0;
	r = stream_fast_apply_line(&se->fast, raw + value, avail - value, se->max_depth,
	    se->max_members, &ns, &end);
	if (r == -2)
		return 0;
	end += value;
	if (avail - end < 2 || raw[end] != '\n' || raw[end + 1] != '\n')
		return 0;
	*taken = end + 2;
	se->fast_events++;
	if (r == 0) {
		se->counts.passed++;
		return stream_events_batch(se, stream_events_out(se, raw, end + 2));
	}
	se->counts.rewritten++;
	return stream_events_batch(se, stream_events_sse_direct(se, raw, value, end, end + 2,
	    se->fast.spans, ns));
}

static int
stream_events_sse_cb(void *arg, const struct sse_event *ev)
{
	struct stream_events *se = arg;
	struct rewrite_result rr;
	int r;

	if (ev->kind == SSE_OVER && ev->first) {
		se->counts.over++;
		se->counts.passed++;
	}
	if (ev->kind != SSE_EVENT || ev->data == NULL)
		return ev->raw_len == 0 ? 0 : stream_events_out(se, ev->raw, ev->raw_len);
	if (!stream_events_apply(se, ev->data, ev->data_len, &rr))
		return stream_events_batch(se, stream_events_out(se, ev->raw, ev->raw_len));
	if (rr.spans == se->fast.spans && ev->nlines == 1 && ev->ndata == 1 && ev->lines[0].colon &&
	    !se->fast.vals_eol)
		return stream_events_batch(se, stream_events_sse_direct(se, ev->raw,
		    ev->lines[0].off + ev->lines[0].value, ev->lines[0].off + ev->lines[0].len,
		    ev->raw_len, rr.spans, rr.nspans));
	r = sse_event_write(ev, rr.spans, rr.nspans, stream_events_out, se);
	rewrite_ctx_release(se->rw);
	return stream_events_batch(se, r);
}

static int
stream_events_ndjson_cb(void *arg, const struct ndjson_record *rec)
{
	struct stream_events *se = arg;
	struct rewrite_result rr;
	int r;

	if (rec->kind == NDJSON_OVER && rec->first) {
		se->counts.over++;
		se->counts.passed++;
	}
	if (rec->kind != NDJSON_RECORD)
		return rec->raw_len == 0 ? 0 : stream_events_out(se, rec->raw, rec->raw_len);
	if (!stream_events_apply(se, rec->json, rec->json_len, &rr))
		return stream_events_batch(se, stream_events_out(se, rec->raw, rec->raw_len));
	r = ndjson_record_write(rec, rr.spans, rr.nspans, stream_events_out, se);
	rewrite_ctx_release(se->rw);
	return stream_events_batch(se, r);
}

int
stream_events_feed(struct stream_events *se, const char *p, size_t n,
    stream_events_write_fn write, void *arg)
{
	int r, f;

	se->write = write;
	se->arg = arg;
	se->fast.ready = 0;             /* the variables may have moved since the last feed */
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		r = sse_feed(se->sse, p, n, stream_events_sse_cb, se);
		break;
	case STREAM_EVENTS_NDJSON:
		r = ndjson_feed(se->lines, p, n, stream_events_ndjson_cb, se);
		break;
	default:
		r = ndjson_feed(se->seq, p, n, stream_events_ndjson_cb, se);
		break;
	}
	f = stream_events_flush(se);
	return r != 0 ? r : f;
}

int
stream_events_finish(struct stream_events *se, stream_events_write_fn write, void *arg)
{
	int r, f;

	se->write = write;
	se->arg = arg;
	se->fast.ready = 0;
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		r = sse_finish(se->sse, stream_events_sse_cb, se);
		break;
	case STREAM_EVENTS_NDJSON:
		r = ndjson_finish(se->lines, stream_events_ndjson_cb, se);
		break;
	default:
		r = ndjson_finish(se->seq, stream_events_ndjson_cb, se);
		break;
	}
	f = stream_events_flush(se);
	return r != 0 ? r : f;
}

const struct stream_events_counts *
stream_events_counts(const struct stream_events *se)
{
	return &se->counts;
}

void
stream_events_fast(struct stream_events *se, int on)
{
	se->fast_off = !on;
}

uint64_t
stream_events_fast_events(const struct stream_events *se)
{
	return se->fast_events;
}

void
stream_events_take_batches(struct stream_events *se, stream_events_take_fn take)
{
	se->take = take;
}

uint64_t
stream_events_fast_heads(const struct stream_events *se)
{
	return se->fast.memo.hits;
}
