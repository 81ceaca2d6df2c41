/*
 * `validate: full`: strict RFC 8259 over a whole body, UTF-8 included (no overlongs, no
 * encoded surrogates, nothing above U+10FFFF).  Iterative, one pass, no allocation.
 */
#ifndef JG_JVALID_H
#define JG_JVALID_H

#include <stddef.h>

#define JVALID_MAX_DEPTH 16384          /* larger depth limits are clamped to this */

enum jvalid_result {
	JVALID_OK = 0,
	JVALID_ERR_SYNTAX = -1,
	JVALID_ERR_DEPTH = -2           /* nesting deeper than max_depth */
};

/*
 * Check that buf[0..len) is exactly one JSON text (whitespace allowed around it).  Escaped
 * lone surrogates (\ud800) are accepted, as RFC 8259 grammar allows them.  On error *where
 * (if not NULL) is the offset of the first offending byte.
 */
int jvalid_check(const char *buf, size_t len, unsigned max_depth, size_t *where);

/*
 * Length of the valid UTF-8 sequence at s[0..len) (RFC 3629: no overlongs, no encoded
 * surrogates, nothing above U+10FFFF), or 0.  len must be at least 1.
 */
size_t jvalid_utf8_len(const unsigned char *s, size_t len);

#endif
