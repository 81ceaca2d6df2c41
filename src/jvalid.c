#include "jvalid.h"

#include <stdint.h>

static inline int
jvalid_is_ws(unsigned char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline int
jvalid_is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static inline int
jvalid_is_hex(unsigned char c)
{
	return jvalid_is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

size_t
jvalid_utf8_len(const unsigned char *s, size_t len)
{
	unsigned char c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return len >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c >= 0xe0 && c <= 0xef) {
		if (len < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return 0;
		if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))
			return 0;               /* overlong, or a surrogate */
		return 3;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		if (len < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
		    (s[3] & 0xc0) != 0x80)
			return 0;
		if ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
			return 0;               /* overlong, or above U+10FFFF */
		return 4;
	}
	return 0;
}

/* A string starting at s[*i] == '"'; on success *i is one past the closing quote. */
static int
jvalid_string(const unsigned char *s, size_t len, size_t *i)
{
	size_t p = *i + 1, n;
	unsigned char c;

	for (;;) {
		/* The common case: printable ASCII. */
		while (p < len && s[p] >= 0x20 && s[p] < 0x80 && s[p] != '"' && s[p] != '\\')
			p++;
		if (p >= len)
			break;
		c = s[p];
		if (c == '"') {
			*i = p + 1;
			return 0;
		}
		if (c == '\\') {
			if (p + 1 >= len)
				break;
			switch (s[p + 1]) {
			case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
				p += 2;
				continue;
			case 'u':
				if (p + 5 >= len || !jvalid_is_hex(s[p + 2]) || !jvalid_is_hex(s[p + 3]) ||
				    !jvalid_is_hex(s[p + 4]) || !jvalid_is_hex(s[p + 5]))
					break;
				p += 6;
				continue;
			}
			break;
		}
		if (c < 0x20 || (n = jvalid_utf8_len(s + p, len - p)) == 0)
			break;
		p += n;
	}
	*i = p;
	return -1;
}

static int
jvalid_number(const unsigned char *s, size_t len, size_t *i)
{
	size_t p = *i;

	if (p < len && s[p] == '-')
		p++;
	if (p >= len)
		goto bad;
	if (s[p] == '0')
		p++;
	else if (s[p] >= '1' && s[p] <= '9')
		while (p < len && jvalid_is_digit(s[p]))
			p++;
	else
		goto bad;
	if (p < len && s[p] == '.') {
		if (++p >= len || !jvalid_is_digit(s[p]))
			goto bad;
		while (p < len && jvalid_is_digit(s[p]))
			p++;
	}
	if (p < len && (s[p] == 'e' || s[p] == 'E')) {
		p++;
		if (p < len && (s[p] == '+' || s[p] == '-'))
			p++;
		if (p >= len || !jvalid_is_digit(s[p]))
			goto bad;
		while (p < len && jvalid_is_digit(s[p]))
			p++;
	}
	*i = p;
	return 0;
bad:
	*i = p;
	return -1;
}

static int
jvalid_literal(const unsigned char *s, size_t len, size_t *i, const char *word, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (*i + k >= len || s[*i + k] != (unsigned char)word[k]) {
			*i += k;
			return -1;
		}
	*i += n;
	return 0;
}

int
jvalid_check(const char *buf, size_t len, unsigned max_depth, size_t *where)
{
	const unsigned char *s = (const unsigned char *)buf;
	uint64_t kinds[JVALID_MAX_DEPTH / 64 + 1];     /* bit set: that level is an object */
	unsigned depth = 0, obj;
	size_t i = 0;
	int r = JVALID_ERR_SYNTAX;

	if (max_depth > JVALID_MAX_DEPTH)
		max_depth = JVALID_MAX_DEPTH;
	while (i < len && jvalid_is_ws(s[i]))
		i++;
value:
	if (i >= len)
		goto fail;
	switch (s[i]) {
	case '{':
	case '[':
		obj = s[i] == '{';
		if (++depth > max_depth) {
			r = JVALID_ERR_DEPTH;
			goto fail;
		}
		if (obj)
			kinds[depth >> 6] |= 1ULL << (depth & 63);
		else
			kinds[depth >> 6] &= ~(1ULL << (depth & 63));
		i++;
		while (i < len && jvalid_is_ws(s[i]))
			i++;
		if (i < len && s[i] == (obj ? '}' : ']')) {
			depth--;
			i++;
			goto after;
		}
		if (obj)
			goto key;
		goto value;
	case '"':
		if (jvalid_string(s, len, &i) != 0)
			goto fail;
		goto after;
	case 't':
		if (jvalid_literal(s, len, &i, "true", 4) != 0)
			goto fail;
		goto after;
	case 'f':
		if (jvalid_literal(s, len, &i, "false", 5) != 0)
			goto fail;
		goto after;
	case 'n':
		if (jvalid_literal(s, len, &i, "null", 4) != 0)
			goto fail;
		goto after;
	default:
		if (jvalid_number(s, len, &i) != 0)
			goto fail;
		goto after;
	}
key:
	if (i >= len || s[i] != '"' || jvalid_string(s, len, &i) != 0)
		goto fail;
	while (i < len && jvalid_is_ws(s[i]))
		i++;
	if (i >= len || s[i] != ':')
		goto fail;
	i++;
	while (i < len && jvalid_is_ws(s[i]))
		i++;
	goto value;
after:
	while (i < len && jvalid_is_ws(s[i]))
		i++;
	if (depth == 0) {
		if (i == len)
			return JVALID_OK;
		goto fail;
	}
	if (i >= len)
		goto fail;
	obj = (kinds[depth >> 6] >> (depth & 63)) & 1;
	if (s[i] == ',') {
		i++;
		while (i < len && jvalid_is_ws(s[i]))
			i++;
		if (obj)
			goto key;
		goto value;
	}
	if (s[i] == (obj ? '}' : ']')) {
		depth--;
		i++;
		goto after;
	}
fail:
	if (where != NULL)
		*where = i;
	return r;
}
