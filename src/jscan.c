/*
 * The skip scanner works on 64-byte blocks.  A variant only builds five bit masks per block
 * (quotes, backslashes, opening and closing brackets, '{' and ']'); the shared code then
 * removes escaped quotes and computes which bytes are inside strings with a prefix XOR.  A
 * block whose closing brackets cannot bring the depth to zero is settled with population
 * counts; only the block where the value may end is walked bracket by bracket.  Balance is
 * kept as the total depth plus ']' minus '[' (counted as '{' and ']' minus all openings, one
 * population count); when the total balances, squares balancing means curlies balance too.
 * So a value whose brackets balance per kind is accepted even if pairs cross ("[{]}");
 * strict validation rejects those.  The work per block is bound by integer instructions, so
 * each one saved there counts: a block wholly inside a string is passed after two compares.
 * The line variants (jscan_skip_line) also mark CR and LF, and fail a value with one before
 * its end: a value read before the end of its line is known.
 */
#include "jscan.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define JSCAN_X86 1
#include <immintrin.h>
#endif

struct jscan_masks {
	uint64_t quote, bslash, open, close, sqb;   /* sqb: '{' and ']' */
	uint64_t eol;                   /* CR and LF (the line variants; else 0) */
};

/* Scan state carried from block to block. */
struct jscan_state {
	uint64_t esc_carry;             /* 1: the next block's first byte is escaped */
	uint64_t in_string;             /* all ones while inside a string */
	unsigned depth;
	unsigned max_depth;
	int squares;                    /* ']' minus '[' so far */
};

/* Bytes escaped by a backslash: after an odd run of backslashes.  Most backslashes stand
 * alone (\" \n \u); runs of two or more, and a run carried in, take a plain loop. */
static inline __attribute__((always_inline)) uint64_t
jscan_escaped(uint64_t bs, uint64_t *carry)
{
	uint64_t esc = *carry, bit;

	if ((bs & (bs << 1)) == 0 && esc == 0) {
		/* No run longer than one: each backslash escapes the byte after it. */
		*carry = bs >> 63;
		return bs << 1;
	}
	bs &= ~*carry;
	*carry = 0;
	while (bs != 0) {
		bit = bs & -bs;
		if (bit == (1ULL << 63)) {
			*carry = 1;
			break;
		}
		esc |= bit << 1;
		bs &= ~(bit | (bit << 1));
	}
	return esc;
}

static inline __attribute__((always_inline)) uint64_t
jscan_prefix_xor(uint64_t x)
{
	x ^= x << 1;
	x ^= x << 2;
	x ^= x << 4;
	x ^= x << 8;
	x ^= x << 16;
	x ^= x << 32;
	return x;
}

#ifdef JSCAN_X86
/* The same by multiplying with all ones without carries: bit i is the XOR of bits 0..i. */
/* Not forced inline: only the variants built with pclmul keep a call to it, and inline it. */
__attribute__((target("pclmul,sse2")))
static inline uint64_t
jscan_prefix_xor_clmul(uint64_t x)
{
	__m128i v = _mm_clmulepi64_si128(_mm_set_epi64x(0, (long long)x),
	    _mm_set1_epi8((char)0xff), 0);

	return (uint64_t)_mm_cvtsi128_si64(v);
}
#else
#define jscan_prefix_xor_clmul jscan_prefix_xor
#endif

/*
 * Process one block whose masks are m and bytes are p[0..64).  Returns the index one past the
 * end of the value inside the block, 64 + 1 + ... never: -1 to continue, or a JSCAN_ERR_*.
 */
/* Always inlined, so each variant compiles it for its own target (popcnt with AVX2);
 * clmul (a constant) says whether the prefix XOR is one carry-less multiply. */
static inline __attribute__((always_inline)) int
jscan_block(struct jscan_state *st, const char *p, struct jscan_masks *m, int *end, int clmul)
{
	uint64_t quote, inside, brackets, open, close;
	unsigned bit, nopen, nclose;
	unsigned char c;

	quote = m->quote & ~jscan_escaped(m->bslash, &st->esc_carry);
	inside = (clmul ? jscan_prefix_xor_clmul(quote) : jscan_prefix_xor(quote)) ^ st->in_string;
	st->in_string = (uint64_t)((int64_t)inside >> 63);
	if (st->depth == 0) {
		/* Skipping a string: its closing quote is the first quote not escaped. */
		if (quote != 0) {
			*end = __builtin_ctzll(quote) + 1;
			return 1;
		}
		return 0;
	}
	open = m->open & ~inside;
	close = m->close & ~inside;
	nopen = (unsigned)__builtin_popcountll(open);
	nclose = (unsigned)__builtin_popcountll(close);
	if (st->depth > nclose && st->depth + nopen <= st->max_depth) {
		/* The value cannot end or get too deep inside this block: counts suffice. */
		st->depth += nopen - nclose;
		st->squares += (int)__builtin_popcountll(m->sqb & ~inside) - (int)nopen;
		return 0;
	}
	brackets = open | close;
	while (brackets != 0) {
		bit = (unsigned)__builtin_ctzll(brackets);
		brackets &= brackets - 1;
		c = (unsigned char)p[bit];
		if ((c & 0x04) == 0) {          /* '{' or '[' */
			if (++st->depth > st->max_depth)
				return JSCAN_ERR_DEPTH;
			st->squares -= c == '[';
		} else {
			st->squares += c == ']';
			if (--st->depth == 0) {
				/* Balanced in total and in squares: balanced in curlies too. */
				if (st->squares != 0)
					return JSCAN_ERR_SYNTAX;
				*end = (int)bit + 1;
				return 1;
			}
		}
	}
	return 0;
}

/*
 * The masks of a block.  With eol (the line variants, jscan_skip_line) CR and LF too; eol
 * is a constant at every call, so the other variants do not pay for it.
 */
static inline void
jscan_masks_scalar(const char *p, struct jscan_masks *m, int eol)
{
	uint64_t q = 0, b = 0, o = 0, c = 0, k = 0, e = 0, bit;
	unsigned char x;
	int i;

	for (i = 0; i < 64; i++) {
		x = (unsigned char)p[i];
		bit = 1ULL << i;
		q |= x == '"' ? bit : 0;
		b |= x == '\\' ? bit : 0;
		k |= x == '{' || x == ']' ? bit : 0;
		if (eol)
			e |= x == '\n' || x == '\r' ? bit : 0;
		x &= 0xdf;
		o |= x == 0x5b ? bit : 0;
		c |= x == 0x5d ? bit : 0;
	}
	m->quote = q;
	m->bslash = b;
	m->open = o;
	m->close = c;
	m->sqb = k;
	m->eol = e;
}

#ifdef JSCAN_X86
__attribute__((target("sse2")))
static inline void
jscan_masks_sse2(const char *p, struct jscan_masks *m, int eol)
{
	const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\');
	const __m128i vdf = _mm_set1_epi8((char)0xdf);
	const __m128i vo = _mm_set1_epi8(0x5b), vc = _mm_set1_epi8(0x5d);
	const __m128i vlc = _mm_set1_epi8('{'), vrs = _mm_set1_epi8(']');
	const __m128i lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
	uint64_t q = 0, b = 0, o = 0, c = 0, k = 0, e = 0;
	__m128i x, y;
	int i;

	for (i = 0; i < 4; i++) {
		x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
		y = _mm_and_si128(x, vdf);
		q |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vq)) << (16 * i);
		b |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vb)) << (16 * i);
		o |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(y, vo)) << (16 * i);
		c |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(y, vc)) << (16 * i);
		k |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, vlc),
		    _mm_cmpeq_epi8(x, vrs))) << (16 * i);
		if (eol)
			e |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(
			    _mm_cmpeq_epi8(x, lf), _mm_cmpeq_epi8(x, cr))) << (16 * i);
	}
	m->quote = q;
	m->bslash = b;
	m->open = o;
	m->close = c;
	m->sqb = k;
	m->eol = e;
}

__attribute__((target("avx2,popcnt,bmi")))
static inline void
jscan_masks_avx2(const char *p, struct jscan_masks *m, int eol)
{
	const __m256i vq = _mm256_set1_epi8('"'), vb = _mm256_set1_epi8('\\');
	const __m256i vdf = _mm256_set1_epi8((char)0xdf);
	const __m256i vo = _mm256_set1_epi8(0x5b), vc = _mm256_set1_epi8(0x5d);
	const __m256i vlc = _mm256_set1_epi8('{'), vrs = _mm256_set1_epi8(']');
	const __m256i lf = _mm256_set1_epi8('\n'), cr = _mm256_set1_epi8('\r');
	__m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
	__m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
	__m256i lo2 = _mm256_and_si256(lo, vdf), hi2 = _mm256_and_si256(hi, vdf);

#define JSCAN_MM(a, b, v) ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, v)) | \
	    (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, v)) << 32)
	m->quote = JSCAN_MM(lo, hi, vq);
	m->bslash = JSCAN_MM(lo, hi, vb);
	m->open = JSCAN_MM(lo2, hi2, vo);
	m->close = JSCAN_MM(lo2, hi2, vc);
	m->sqb = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(
	    _mm256_cmpeq_epi8(lo, vlc), _mm256_cmpeq_epi8(lo, vrs))) |
	    (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(
	    _mm256_cmpeq_epi8(hi, vlc), _mm256_cmpeq_epi8(hi, vrs))) << 32;
	m->eol = eol ? JSCAN_MM(lo, hi, lf) | JSCAN_MM(lo, hi, cr) : 0;
#undef JSCAN_MM
}

/* The masks of the block in x: compares yield the 64-bit masks directly, no movemask. */
__attribute__((target("avx512f,avx512bw,popcnt,bmi")))
static inline __attribute__((always_inline)) void
jscan_masks_of_avx512(__m512i x, struct jscan_masks *m, int eol)
{
	__m512i y = _mm512_and_si512(x, _mm512_set1_epi8((char)0xdf));

	m->quote = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('"'));
	m->bslash = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('\\'));
	m->open = _mm512_cmpeq_epi8_mask(y, _mm512_set1_epi8(0x5b));
	m->close = _mm512_cmpeq_epi8_mask(y, _mm512_set1_epi8(0x5d));
	m->sqb = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('{')) |
	    _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(']'));
	m->eol = eol ? _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('\n')) |
	    _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('\r')) : 0;
}

/* One load per block. */
__attribute__((target("avx512f,avx512bw,popcnt,bmi")))
static inline void
jscan_masks_avx512(const char *p, struct jscan_masks *m, int eol)
{
	jscan_masks_of_avx512(_mm512_loadu_si512((const void *)p), m, eol);
}

/* The last n (< 64) bytes, the rest of the block spaces: a masked load reads only those n
 * (and cannot fault past them), so no copy into a padded buffer. */
__attribute__((target("avx512f,avx512bw,popcnt,bmi")))
static inline void
jscan_tail_avx512(const char *p, size_t n, struct jscan_masks *m, int eol)
{
	jscan_masks_of_avx512(_mm512_mask_loadu_epi8(_mm512_set1_epi8(' '),
	    (__mmask64)((1ULL << n) - 1), (const void *)p), m, eol);
}
#endif

/*
 * Whether a whole block holds no quote and no backslash.  Inside a string such a block
 * changes nothing (no quote ends the string, no bracket counts), so the loops pass it after
 * two compares: long strings (text, encoded blobs) are most of many values' bytes.  With eol
 * (the line variants, which must see every CR and LF) no byte up to CR either: a control,
 * invalid inside a string, makes the block be looked at whole.
 */
#ifdef JSCAN_X86
__attribute__((target("sse2")))
static inline int
jscan_plain_sse2(const char *p, int eol)
{
	const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\');
	const __m128i vcr = _mm_set1_epi8('\r');
	__m128i x, acc = _mm_setzero_si128();
	int i;

	for (i = 0; i < 4; i++) {
		x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
		acc = _mm_or_si128(acc, _mm_or_si128(_mm_cmpeq_epi8(x, vq), _mm_cmpeq_epi8(x, vb)));
		if (eol)
			acc = _mm_or_si128(acc, _mm_cmpeq_epi8(_mm_min_epu8(x, vcr), x));
	}
	return _mm_movemask_epi8(acc) == 0;
}

__attribute__((target("avx2")))
static inline int
jscan_plain_avx2(const char *p, int eol)
{
	const __m256i vq = _mm256_set1_epi8('"'), vb = _mm256_set1_epi8('\\');
	const __m256i vcr = _mm256_set1_epi8('\r');
	__m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
	__m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
	__m256i acc = _mm256_or_si256(
	    _mm256_or_si256(_mm256_cmpeq_epi8(lo, vq), _mm256_cmpeq_epi8(lo, vb)),
	    _mm256_or_si256(_mm256_cmpeq_epi8(hi, vq), _mm256_cmpeq_epi8(hi, vb)));

	if (eol)
		acc = _mm256_or_si256(acc, _mm256_or_si256(
		    _mm256_cmpeq_epi8(_mm256_min_epu8(lo, vcr), lo),
		    _mm256_cmpeq_epi8(_mm256_min_epu8(hi, vcr), hi)));
	return _mm256_testz_si256(acc, _mm256_set1_epi8(-1));
}

__attribute__((target("avx512f,avx512bw")))
static inline int
jscan_plain_avx512(const char *p, int eol)
{
	__m512i x = _mm512_loadu_si512((const void *)p);
	uint64_t m = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('"')) |
	    _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('\\'));

	if (eol)
		m |= _mm512_cmple_epu8_mask(x, _mm512_set1_epi8('\r'));
	return m == 0;
}
#endif

/* The scalar variant looks at every block. */
static inline int
jscan_plain_none(const char *p, int eol)
{
	(void)p;
	(void)eol;
	return 0;
}

/* The variants without masked loads copy the last bytes into a block of spaces. */
static inline void
jscan_tail_none(const char *p, size_t n, struct jscan_masks *m, int eol)
{
	(void)p;
	(void)n;
	(void)m;
	(void)eol;
}

/* The bytes of a block before index end (1..64). */
static inline uint64_t
jscan_below(int end)
{
	return end >= 64 ? ~0ULL : (1ULL << end) - 1;
}

/*
 * The block loop, instantiated once per variant so each is compiled for its own target.  The
 * last partial block is read as if padded with spaces, which carry no structure: copied into
 * such a buffer, or (tail_fn, when the variant has one) loaded masked.  With line, a CR or LF
 * before the value's end fails it (a line variant).
 */
#define JSCAN_DEFINE(name, masks_fn, plain_fn, tail_fn, clmul, line, attr)			\
attr static ssize_t									\
name(const char *buf, size_t len, size_t pos, unsigned max_depth)			\
{											\
	struct jscan_state st;								\
	struct jscan_masks m;								\
	char tail[64];									\
	size_t i;									\
	int end = 0, r;									\
											\
	st.esc_carry = 0;								\
	st.max_depth = max_depth > JSCAN_MAX_DEPTH ? JSCAN_MAX_DEPTH : max_depth;	\
	if (buf[pos] == '"') {								\
		st.depth = 0;								\
		st.squares = 0;								\
		st.in_string = ~0ULL;							\
	} else {									\
		if (st.max_depth < 1)							\
			return JSCAN_ERR_DEPTH;						\
		st.depth = 1;								\
		st.in_string = 0;							\
		st.squares = -(buf[pos] == '[');					\
	}										\
	for (i = pos + 1; i + 64 <= len; i += 64) {					\
		if (st.in_string != 0 && st.esc_carry == 0 && plain_fn(buf + i, line))	\
			continue;							\
		masks_fn(buf + i, &m, line);						\
		r = jscan_block(&st, buf + i, &m, &end, clmul);				\
		if (line && r >= 0 && (m.eol & jscan_below(r > 0 ? end : 64)) != 0)	\
			return JSCAN_ERR_SYNTAX;					\
		if (r != 0)								\
			return r < 0 ? r : (ssize_t)(i + (size_t)end);			\
	}										\
	if (i < len) {									\
		const char *tp = tail;							\
											\
		if (tail_fn != jscan_tail_none) {					\
			tail_fn(buf + i, len - i, &m, line);				\
			tp = buf + i;							\
		} else {								\
			memset(tail, ' ', sizeof(tail));				\
			memcpy(tail, buf + i, len - i);					\
			masks_fn(tail, &m, line);					\
		}									\
		r = jscan_block(&st, tp, &m, &end, clmul);				\
		if (line && r >= 0 && (m.eol & jscan_below(r > 0 ? end : 64)) != 0)	\
			return JSCAN_ERR_SYNTAX;					\
		if (r != 0) {								\
			if (r < 0)							\
				return r;						\
			if (i + (size_t)end <= len)					\
				return (ssize_t)(i + (size_t)end);			\
		}									\
	}										\
	return JSCAN_ERR_SYNTAX;							\
}

JSCAN_DEFINE(jscan_skip_scalar, jscan_masks_scalar, jscan_plain_none, jscan_tail_none, 0, 0, )
JSCAN_DEFINE(jscan_line_scalar, jscan_masks_scalar, jscan_plain_none, jscan_tail_none, 0, 1, )
#ifdef JSCAN_X86
JSCAN_DEFINE(jscan_skip_sse2, jscan_masks_sse2, jscan_plain_sse2, jscan_tail_none, 0, 0,
    __attribute__((target("sse2"))))
JSCAN_DEFINE(jscan_skip_avx2, jscan_masks_avx2, jscan_plain_avx2, jscan_tail_none, 1, 0,
    __attribute__((target("avx2,popcnt,bmi,pclmul"))))
JSCAN_DEFINE(jscan_skip_avx512, jscan_masks_avx512, jscan_plain_avx512, jscan_tail_avx512, 1,
    0, __attribute__((target("avx512f,avx512bw,popcnt,bmi,pclmul"))))
JSCAN_DEFINE(jscan_line_sse2, jscan_masks_sse2, jscan_plain_sse2, jscan_tail_none, 0, 1,
    __attribute__((target("sse2"))))
JSCAN_DEFINE(jscan_line_avx2, jscan_masks_avx2, jscan_plain_avx2, jscan_tail_none, 1, 1,
    __attribute__((target("avx2,popcnt,bmi,pclmul"))))
JSCAN_DEFINE(jscan_line_avx512, jscan_masks_avx512, jscan_plain_avx512, jscan_tail_avx512, 1,
    1, __attribute__((target("avx512f,avx512bw,popcnt,bmi,pclmul"))))
#endif

/* The bytes of a piece after its last whole block, one by one, with jscan_block's rules. */
static ssize_t
jscan_stream_bytes(struct jscan_state *st, const char *buf, size_t i, size_t len)
{
	unsigned char c;

	for (; i < len; i++) {
		c = (unsigned char)buf[i];
		if (st->esc_carry) {
			/* An escaped quote or backslash means nothing; a bracket still counts. */
			st->esc_carry = 0;
			if (c == '"' || c == '\\')
				continue;
		} else if (c == '\\') {
			st->esc_carry = 1;
			continue;
		}
		if (c == '"') {
			st->in_string = ~st->in_string;
			if (st->depth == 0)
				return (ssize_t)i + 1;  /* a string value ends */
			continue;
		}
		if (st->in_string)
			continue;
		if (c == '{' || c == '[') {
			if (++st->depth > st->max_depth)
				return JSCAN_ERR_DEPTH;
			st->squares -= c == '[';
		} else if (c == '}' || c == ']') {
			st->squares += c == ']';
			if (--st->depth == 0)
				return st->squares != 0 ? JSCAN_ERR_SYNTAX : (ssize_t)i + 1;
		}
	}
	return JSCAN_MORE;
}

#define JSCAN_STREAM_DEFINE(name, masks_fn, plain_fn, clmul, attr)				\
attr static ssize_t									\
name(struct jscan_state *st, const char *buf, size_t len)				\
{											\
	struct jscan_masks m;								\
	size_t i;									\
	int end = 0, r;									\
											\
	for (i = 0; i + 64 <= len; i += 64) {						\
		if (st->in_string != 0 && st->esc_carry == 0 && plain_fn(buf + i, 0))	\
			continue;							\
		masks_fn(buf + i, &m, 0);						\
		if ((r = jscan_block(st, buf + i, &m, &end, clmul)) != 0)			\
			return r < 0 ? r : (ssize_t)(i + (size_t)end);			\
	}										\
	return jscan_stream_bytes(st, buf, i, len);					\
}

JSCAN_STREAM_DEFINE(jscan_stream_scalar, jscan_masks_scalar, jscan_plain_none, 0, )
#ifdef JSCAN_X86
JSCAN_STREAM_DEFINE(jscan_stream_sse2, jscan_masks_sse2, jscan_plain_sse2, 0,
    __attribute__((target("sse2"))))
JSCAN_STREAM_DEFINE(jscan_stream_avx2, jscan_masks_avx2, jscan_plain_avx2, 1,
    __attribute__((target("avx2,popcnt,bmi,pclmul"))))
JSCAN_STREAM_DEFINE(jscan_stream_avx512, jscan_masks_avx512, jscan_plain_avx512, 1,
    __attribute__((target("avx512f,avx512bw,popcnt,bmi,pclmul"))))
#endif

typedef ssize_t (*jscan_fn)(const char *, size_t, size_t, unsigned);
typedef ssize_t (*jscan_stream_fn)(struct jscan_state *, const char *, size_t);

int
jscan_impl_available(enum jscan_impl impl)
{
	switch (impl) {
	case JSCAN_SCALAR:
		return 1;
#ifdef JSCAN_X86
	case JSCAN_SSE2:
		return __builtin_cpu_supports("sse2");
	case JSCAN_AVX2:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") &&
		    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("pclmul");
	case JSCAN_AVX512:
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") &&
		    __builtin_cpu_supports("pclmul");
#endif
	default:
		return 0;
	}
}

enum jscan_impl
jscan_impl_best(void)
{
	if (jscan_impl_available(JSCAN_AVX512))
		return JSCAN_AVX512;
	if (jscan_impl_available(JSCAN_AVX2))
		return JSCAN_AVX2;
	if (jscan_impl_available(JSCAN_SSE2))
		return JSCAN_SSE2;
	return JSCAN_SCALAR;
}

const char *
jscan_impl_name(enum jscan_impl impl)
{
	static const char *const names[] = { "scalar", "sse2", "avx2", "avx512" };

	return impl < JSCAN_NIMPL ? names[impl] : "none";
}

/* An implementation's skip, or its line variant. */
static jscan_fn
jscan_impl_fn(enum jscan_impl impl, int line)
{
	switch (impl) {
#ifdef JSCAN_X86
	case JSCAN_SSE2:
		return line ? jscan_line_sse2 : jscan_skip_sse2;
	case JSCAN_AVX2:
		return line ? jscan_line_avx2 : jscan_skip_avx2;
	case JSCAN_AVX512:
		return line ? jscan_line_avx512 : jscan_skip_avx512;
#endif
	default:
		return line ? jscan_line_scalar : jscan_skip_scalar;
	}
}

/* fn on buf[pos..len) once pos is known to start a string or a container. */
static ssize_t
jscan_run(jscan_fn fn, const char *buf, size_t len, size_t pos, unsigned max_depth)
{
	if (pos >= len || (buf[pos] != '"' && buf[pos] != '{' && buf[pos] != '['))
		return JSCAN_ERR_SYNTAX;
	return fn(buf, len, pos, max_depth);
}

ssize_t
jscan_skip_impl(enum jscan_impl impl, const char *buf, size_t len, size_t pos,
    unsigned max_depth)
{
	if (!jscan_impl_available(impl))
		return -1;
	return jscan_run(jscan_impl_fn(impl, 0), buf, len, pos, max_depth);
}

ssize_t
jscan_skip_line_impl(enum jscan_impl impl, const char *buf, size_t len, size_t pos,
    unsigned max_depth)
{
	if (!jscan_impl_available(impl))
		return -1;
	return jscan_run(jscan_impl_fn(impl, 1), buf, len, pos, max_depth);
}

static jscan_stream_fn
jscan_stream_impl_fn(enum jscan_impl impl)
{
	switch (impl) {
#ifdef JSCAN_X86
	case JSCAN_SSE2:
		return jscan_stream_sse2;
	case JSCAN_AVX2:
		return jscan_stream_avx2;
	case JSCAN_AVX512:
		return jscan_stream_avx512;
#endif
	default:
		return jscan_stream_scalar;
	}
}

/* Resolved on first use; a racing first call stores the same value. */
static jscan_fn jscan_chosen[2];                /* [line] */
static jscan_stream_fn jscan_stream_chosen;

int
jscan_use(enum jscan_impl impl)
{
	if (!jscan_impl_available(impl))
		return -1;
	__atomic_store_n(&jscan_chosen[0], jscan_impl_fn(impl, 0), __ATOMIC_RELAXED);
	__atomic_store_n(&jscan_chosen[1], jscan_impl_fn(impl, 1), __ATOMIC_RELAXED);
	__atomic_store_n(&jscan_stream_chosen, jscan_stream_impl_fn(impl), __ATOMIC_RELAXED);
	return 0;
}

static jscan_fn
jscan_chosen_fn(int line)
{
	jscan_fn fn = __atomic_load_n(&jscan_chosen[line], __ATOMIC_RELAXED);

	if (fn == NULL) {
		fn = jscan_impl_fn(jscan_impl_best(), line);
		__atomic_store_n(&jscan_chosen[line], fn, __ATOMIC_RELAXED);
	}
	return fn;
}

ssize_t
jscan_skip(const char *buf, size_t len, size_t pos, unsigned max_depth)
{
	return jscan_run(jscan_chosen_fn(0), buf, len, pos, max_depth);
}

ssize_t
jscan_skip_line(const char *buf, size_t len, size_t pos, unsigned max_depth)
{
	return jscan_run(jscan_chosen_fn(1), buf, len, pos, max_depth);
}

int
jscan_stream_start(struct jscan_stream *st, char c, unsigned max_depth)
{
	st->esc_carry = 0;
	st->max_depth = max_depth > JSCAN_MAX_DEPTH ? JSCAN_MAX_DEPTH : max_depth;
	if (c == '"') {
		st->depth = 0;
		st->squares = 0;
		st->in_string = ~0ULL;
		return 0;
	}
	st->depth = 1;
	st->in_string = 0;
	st->squares = -(c == '[');
	return st->max_depth < 1 ? JSCAN_ERR_DEPTH : 0;
}

ssize_t
jscan_stream_feed(struct jscan_stream *st, const char *buf, size_t len)
{
	jscan_stream_fn fn = __atomic_load_n(&jscan_stream_chosen, __ATOMIC_RELAXED);
	struct jscan_state s = { st->esc_carry, st->in_string, st->depth, st->max_depth,
	    st->squares };
	ssize_t r;

	if (fn == NULL) {
		fn = jscan_stream_impl_fn(jscan_impl_best());
		__atomic_store_n(&jscan_stream_chosen, fn, __ATOMIC_RELAXED);
	}
	r = fn(&s, buf, len);
	st->esc_carry = s.esc_carry;
	st->in_string = s.in_string;
	st->depth = s.depth;
	st->squares = s.squares;
	return r;
}
