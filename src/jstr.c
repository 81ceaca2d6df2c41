#include "jstr.h"
#include "jvalid.h"

#include <stdint.h>
#include <string.h>

/* Eight bytes at once: 0 when none needs more than a copy (each is ASCII, not a control,
 * not `"`, not `\`).  A byte below 0x80 keeps the subtractions from borrowing across bytes
 * unless an earlier byte already matched, so the answer is exact. */
static inline int
jstr_block_plain(uint64_t x)
{
	const uint64_t lo = 0x0101010101010101ULL, hi = 0x8080808080808080ULL;

	return ((x | (x - lo * 0x20) | ((x ^ lo * '"') - lo) | ((x ^ lo * '\\') - lo)) & hi) == 0;
}

static inline int
jstr_byte_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The length of the run of plain bytes at s[0..len). */
static inline size_t
jstr_plain_run(const unsigned char *s, size_t len)
{
	size_t i = 0;
	uint64_t x;

	while (len - i >= 8) {
		memcpy(&x, s + i, 8);
		if (!jstr_block_plain(x))
			break;
		i += 8;
	}
	while (i < len && jstr_byte_plain(s[i]))
		i++;
	return i;
}

/* Everything but a run of plain bytes: one character's escape or sequence into e, its
 * length returned; *take is set to the bytes of s it stands for. */
static inline size_t
jstr_one(char e[6], const unsigned char *s, size_t len, size_t *take)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char c = s[0];
	size_t n;

	*take = 1;
	if (c == '"' || c == '\\') {
		e[0] = '\\';
		e[1] = (char)c;
		return 2;
	}
	if (c < 0x20) {
		e[0] = '\\';
		switch (c) {
		case '\n': e[1] = 'n'; return 2;
		case '\r': e[1] = 'r'; return 2;
		case '\t': e[1] = 't'; return 2;
		case '\b': e[1] = 'b'; return 2;
		case '\f': e[1] = 'f'; return 2;
		}
		memcpy(e + 1, "u00", 3);
		e[4] = hex[c >> 4];
		e[5] = hex[c & 15];
		return 6;
	}
	if ((n = jvalid_utf8_len(s, len)) == 0) {
		memcpy(e, "\xef\xbf\xbd", 3);   /* U+FFFD for the one byte */
		return 3;
	}
	e[0] = (char)c;
	e[1] = (char)s[1];              /* n is 2 to 4 */
	if (n > 2)
		e[2] = (char)s[2];
	if (n > 3)
		e[3] = (char)s[3];
	*take = n;
	return n;
}

size_t
jstr_escape(char *dst, const char *src, size_t len)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0, take;
	char *d = dst;
	uint64_t x;

	while (i < len) {
		/* Plain text eight bytes a store at a time, then a byte at a time. */
		while (len - i >= 8) {
			memcpy(&x, s + i, 8);
			if (!jstr_block_plain(x))
				break;
			memcpy(d, &x, 8);
			d += 8;
			i += 8;
		}
		while (i < len && jstr_byte_plain(s[i]))
			*d++ = (char)s[i++];
		if (i == len)
			break;
		d += jstr_one(d, s + i, len - i, &take);
		i += take;
	}
	return (size_t)(d - dst);
}

size_t
jstr_escape_max(char *dst, const char *src, size_t len, size_t max, size_t *used)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0, n = 0, run, take, w;
	char e[6];

	while (i < len && n < max) {
		run = jstr_plain_run(s + i, len - i);
		if (run > max - n)
			run = max - n;
		if (dst != NULL)
			memcpy(dst + n, s + i, run);
		n += run;
		i += run;
		if (i == len || n == max)
			break;
		w = jstr_one(e, s + i, len - i, &take);
		if (w > max - n)
			break;
		if (dst != NULL)
			memcpy(dst + n, e, w);
		n += w;
		i += take;
	}
	if (used != NULL)
		*used = i;
	return n;
}
