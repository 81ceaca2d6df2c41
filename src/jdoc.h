/*
 * A small JSON document tokenized whole with jsmn (a JWKS, a token's header and claims), and
 * lookups in it.  The text is validated strictly (RFC 8259, UTF-8) before jsmn sees it, and
 * tokens are bounded, so a document costs at most max_tokens tokens.
 */
#ifndef JG_JDOC_H
#define JG_JDOC_H

#include <stddef.h>
#include <stdint.h>

enum jdoc_type { JDOC_OBJECT = 1, JDOC_ARRAY, JDOC_STRING, JDOC_PRIMITIVE };

struct jdoc_tok {
	enum jdoc_type type;
	int start, end;                 /* strings: inside the quotes */
	int size;                       /* members of an object, elements of an array */
};

struct jdoc {
	const char *buf;                /* not owned */
	size_t len;
	struct jdoc_tok *toks;
	int ntoks;
};

/* Tokenize buf[0..len), which must be one JSON object.  0, or -1 (invalid, not an object,
 * deeper than 64, more than max_tokens tokens, out of memory). */
int jdoc_parse(struct jdoc *d, const char *buf, size_t len, int max_tokens);
void jdoc_free(struct jdoc *d);

/* The token after the value at i and everything inside it. */
int jdoc_skip(const struct jdoc *d, int i);
/* The value of member key in the object at obj: its index, -1 when absent, -2 when the key
 * appears more than once (which callers refuse rather than guess). */
int jdoc_member(const struct jdoc *d, int obj, const char *key);
/* 1 when no key appears twice among the members of the object at obj (escapes decoded). */
int jdoc_keys_unique(const struct jdoc *d, int obj);
/* The element at index n of the array at arr, or -1. */
int jdoc_element(const struct jdoc *d, int arr, size_t n);

/* 1 when the string at i, unescaped, equals s[0..len). */
int jdoc_str_eq(const struct jdoc *d, int i, const char *s, size_t len);
/* Unescape the string at i into dst (cap bytes, not NUL-terminated); its length, or -1 when
 * it does not fit or i is not a string. */
int jdoc_str(const struct jdoc *d, int i, char *dst, size_t cap);
/* The same over any raw string content span (between the quotes, escapes kept). */
int jdoc_unescape(const char *s, size_t len, char *dst, size_t cap);
/* The number at i as whole seconds (a fraction is dropped): 0, or -1 when it is not a
 * number or out of range. */
int jdoc_int(const struct jdoc *d, int i, int64_t *v);

#endif
