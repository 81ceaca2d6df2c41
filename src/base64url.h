/* base64url (RFC 4648 section 5) as JWS uses it (RFC 7515 section 2): no padding, no spaces. */
#ifndef JG_BASE64URL_H
#define JG_BASE64URL_H

#include <stddef.h>
#include <sys/types.h>

/* The most bytes base64url_decode writes for len characters. */
#define BASE64URL_DECODED_MAX(len) ((len) / 4 * 3 + 2)
/* The characters base64url_encode writes for len bytes. */
#define BASE64URL_ENCODED_LEN(len) ((len) / 3 * 4 + ((len) % 3 == 0 ? 0 : (len) % 3 + 1))

/*
 * Decode src[0..len) into dst (cap bytes).  Strict: only A-Z a-z 0-9 - _, no '=' padding, no
 * length of the form 4k+1, and the unused low bits of the last character must be zero, so
 * that every byte string has exactly one encoding.  Returns the length decoded, or -1.
 */
ssize_t base64url_decode(unsigned char *dst, size_t cap, const char *src, size_t len);

/* Encode src[0..len) into dst, which holds BASE64URL_ENCODED_LEN(len) bytes; returns that. */
size_t base64url_encode(char *dst, const unsigned char *src, size_t len);

#endif
