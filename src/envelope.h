/*
 * The envelope: one JSON object tokenized with jsmn down to its members (key span, value span,
 * value type).  Containers below it are skipped with the scanner and become single spans, so
 * a 1 MB "data" value costs one linear scan and one token.
 */
#ifndef JG_ENVELOPE_H
#define JG_ENVELOPE_H

#include <stddef.h>

enum envelope_type {
	ENVELOPE_OBJECT = '{', ENVELOPE_ARRAY = '[', ENVELOPE_STRING = '"',
	ENVELOPE_PRIMITIVE = 'p'        /* number, true, false, null */
};

enum envelope_err {
	ENVELOPE_ERR_SYNTAX = -1,       /* not a valid object at this level, or unbalanced below */
	ENVELOPE_ERR_DEPTH = -2,        /* nesting over max_depth */
	ENVELOPE_ERR_NOMEM = -3
};

struct envelope_member {
	const char *key;                /* the key with its quotes, as in the input */
	size_t keylen;
	const char *val;                /* the value, as in the input */
	size_t vallen;
	unsigned char type;             /* enum envelope_type */
};

/* Reusable per worker: token and member arrays grow and are kept between parses. */
struct envelope {
	void *toks;                     /* jsmntok_t[] */
	size_t ntoks;
	struct envelope_member *members;    /* of the last parse */
	size_t nmembers;
	size_t members_cap;
};

void envelope_init(struct envelope *env);
void envelope_free(struct envelope *env);

/*
 * Tokenize the object starting at buf[pos] ('{') and ending before len.  max_depth counts the
 * object itself.  Fills env->members and *end (one past the '}').  Returns 0 or ENVELOPE_ERR_*.
 */
int envelope_parse(struct envelope *env, const char *buf, size_t len, size_t pos,
    unsigned max_depth, size_t *end);

/*
 * Find the end of the value (any type) starting at buf[pos]: containers and strings are
 * skipped (balanced), numbers and literals checked.  Returns 0 or ENVELOPE_ERR_*.
 */
int envelope_value_end(const char *buf, size_t len, size_t pos, unsigned max_depth,
    size_t *end, unsigned char *type);

/* First offset at or after pos that is not JSON whitespace. */
size_t envelope_skip_ws(const char *buf, size_t len, size_t pos);

/* 1 when the JSON string s[0..len) (quotes included) decodes to name[0..nlen). */
int envelope_string_eq(const char *s, size_t len, const char *name, size_t nlen);

/* 1 when s[0..len) is a JSON number, true, false or null. */
int envelope_is_primitive(const char *s, size_t len);
/* RFC 8259 number grammar over the whole of s[0..len). */
int envelope_is_number(const char *s, size_t len);

#endif
