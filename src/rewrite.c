/*
 * Envelope ops applied to one JSON body.  The body is never decoded: the document is a small
 * tree of objects whose members point into the input, built lazily from envelope.c, and the
 * output is a list of spans: untouched input ranges plus short generated literals.
 */
#include "rewrite.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates), or 0. */
static size_t
rewrite_utf8_len(const unsigned char *s, size_t len)
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
			return 0;
		return 3;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		if (len < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
		    (s[3] & 0xc0) != 0x80)
			return 0;
		if ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
			return 0;
		return 4;
	}
	return 0;
}

size_t
rewrite_json_escape(char *dst, const char *src, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)src;
	char *d = dst;
	size_t i = 0, n;

	while (i < len) {
		unsigned char c = s[i];

		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			*d++ = (char)c;
			i++;
			continue;
		}
		if (c == '"' || c == '\\') {
			*d++ = '\\';
			*d++ = (char)c;
			i++;
			continue;
		}
		if (c < 0x20) {
			*d++ = '\\';
			switch (c) {
			case '\n': *d++ = 'n'; break;
			case '\r': *d++ = 'r'; break;
			case '\t': *d++ = 't'; break;
			case '\b': *d++ = 'b'; break;
			case '\f': *d++ = 'f'; break;
			default:
				*d++ = 'u'; *d++ = '0'; *d++ = '0';
				*d++ = hex[c >> 4]; *d++ = hex[c & 15];
			}
			i++;
			continue;
		}
		if ((n = rewrite_utf8_len(s + i, len - i)) == 0) {
			/* An invalid byte becomes U+FFFD so the output stays valid UTF-8. */
			memcpy(d, "\xef\xbf\xbd", 3);
			d += 3;
			i++;
			continue;
		}
		memcpy(d, s + i, n);
		d += n;
		i += n;
	}
	return (size_t)(d - dst);
}
