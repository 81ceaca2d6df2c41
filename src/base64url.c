#include "base64url.h"

#include <stdint.h>

static const char base64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* The value of one character, or -1. */
static int
base64url_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

ssize_t
base64url_decode(unsigned char *dst, size_t cap, const char *src, size_t len)
{
	uint32_t acc = 0;
	size_t i, n = 0;
	unsigned bits = 0;
	int v;

	if (len % 4 == 1 || len / 4 * 3 + (len % 4 == 0 ? 0 : len % 4 - 1) > cap)
		return -1;
	for (i = 0; i < len; i++) {
		if ((v = base64url_value((unsigned char)src[i])) < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			dst[n++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	/* 2 or 4 bits left over: they must be zero. */
	if (acc != 0)
		return -1;
	return (ssize_t)n;
}

size_t
base64url_encode(char *dst, const unsigned char *src, size_t len)
{
	size_t i, n = 0;
	uint32_t v;

	for (i = 0; i + 3 <= len; i += 3) {
		v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
		dst[n++] = base64url_alphabet[v >> 18];
		dst[n++] = base64url_alphabet[(v >> 12) & 63];
		dst[n++] = base64url_alphabet[(v >> 6) & 63];
		dst[n++] = base64url_alphabet[v & 63];
	}
	if (len - i == 1) {
		v = (uint32_t)src[i] << 16;
		dst[n++] = base64url_alphabet[v >> 18];
		dst[n++] = base64url_alphabet[(v >> 12) & 63];
	} else if (len - i == 2) {
		v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8;
		dst[n++] = base64url_alphabet[v >> 18];
		dst[n++] = base64url_alphabet[(v >> 12) & 63];
		dst[n++] = base64url_alphabet[(v >> 6) & 63];
	}
	return n;
}
