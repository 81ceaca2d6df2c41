/*
 * The envelope: one JSON object tokenized with jsmn down to its members (key span, value span,
 * value type).  Containers below it are skipped with the scanner and become single spans, so
 * a 1 MB "data" value costs one linear scan and one token.  jsmn works in a fixed window of
 * tokens: members leave it as soon as they are complete, so an object of any size costs the
 * same token memory and every jsmn call stays short.
 */
#ifndef JG_ENVELOPE_H
#define JG_ENVELOPE_H

#include <stddef.h>
#include <sys/types.h>

enum envelope_type {
	ENVELOPE_OBJECT = '{', ENVELOPE_ARRAY = '[', ENVELOPE_STRING = '"',
	ENVELOPE_PRIMITIVE = 'p'        /* number, true, false, null */
};

enum envelope_err {
	ENVELOPE_ERR_SYNTAX = -1,       /* not a valid object at this level, or unbalanced below */
	ENVELOPE_ERR_DEPTH = -2,        /* nesting over max_depth */
	ENVELOPE_ERR_NOMEM = -3,
	ENVELOPE_ERR_MEMBERS = -4       /* more members than max_members */
};

struct envelope_member {
	const char *key;                /* the key with its quotes, as in the input */
	size_t keylen;
	const char *val;                /* the value, as in the input */
	size_t vallen;
	unsigned char type;             /* enum envelope_type */
};

/*
 * Reusable per worker.  Members of a parse go to member_cb when it is set (a nonzero return
 * stops the parse with that value), else into members[], which grows and is kept.
 */
struct envelope {
	void *toks;                     /* jsmntok_t[ENVELOPE_WINDOW] */
	struct envelope_member *members;    /* of the last parse, without member_cb */
	size_t nmembers;                /* members of the last parse, with or without member_cb */
	size_t members_cap;
	size_t max_members;             /* a parse stops at more members; SIZE_MAX by default */
	int (*member_cb)(void *arg, const struct envelope_member *m);
	void *member_arg;
};

void envelope_init(struct envelope *env);
void envelope_free(struct envelope *env);

/*
 * Tokenize the object starting at buf[pos] ('{') and ending before len.  max_depth counts the
 * object itself.  Delivers the members and sets *end (one past the '}').  Returns 0,
 * ENVELOPE_ERR_*, or what member_cb returned.
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
/* 1 when the JSON string s[0..len) decodes to text that begins with prefix[0..plen). */
int envelope_string_prefix(const char *s, size_t len, const char *prefix, size_t plen);
/* The text the JSON string s[0..len) (quotes included) stands for, into out (room for len
 * bytes: never longer than the string); a lone surrogate escape becomes its three bytes.
 * 0, or -1 on a bad escape. */
int envelope_string_decode(const char *s, size_t len, char *out, size_t *out_len);

/* 1 when s[0..len) is a JSON number, true, false or null. */
int envelope_is_primitive(const char *s, size_t len);
/* RFC 8259 number grammar over the whole of s[0..len). */
int envelope_is_number(const char *s, size_t len);

#endif
