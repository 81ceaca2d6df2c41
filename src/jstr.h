/* The one JSON string escaper: rewrite's `set` values, the access log, the gateway's bodies. */
#ifndef JG_JSTR_H
#define JG_JSTR_H

#include <stddef.h>

/*
 * Write src[0..len) as the inside of a JSON string (no quotes) into dst, which must hold
 * 6 * len bytes; returns the length written.  One UTF-8 policy for every output: a valid
 * UTF-8 sequence (RFC 3629) is copied as it is; `"` and `\` are escaped; a control byte below
 * 0x20 becomes \n, \r, \t, \b, \f or \u00XX; DEL (0x7f) is copied, as JSON allows; every
 * byte that is not part of a valid sequence (a stray continuation byte, an overlong form, an
 * encoded surrogate, anything above U+10FFFF, a sequence cut short, 0xc0, 0xc1, 0xf5-0xff)
 * becomes U+FFFD (its three UTF-8 bytes).  So the output is valid JSON and valid UTF-8
 * whatever src holds.
 */
size_t jstr_escape(char *dst, const char *src, size_t len);

/*
 * The same, writing at most max bytes: it stops before the first character whose escape or
 * sequence would not fit, never inside one.  dst NULL only counts.  *used (if not NULL) is set
 * to the bytes of src taken.
 */
size_t jstr_escape_max(char *dst, const char *src, size_t len, size_t max, size_t *used);

#endif
