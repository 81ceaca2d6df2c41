/*
 * Conditions on a JSON object and an HTTP status: the `when:` of envelope ops, and the one
 * evaluator for anything else that tests a JSON field (routing on a request field, health
 * checks expecting a field).  A condition is compiled once from YAML:
 *
 *   { status: [ 200, 2xx ] }
 *   { field: PATH, equals: V | in: [ V, ... ] | prefix: S | exists: BOOL |
 *     type: object|array|string|number|bool|null }
 *   { all: [ C, ... ] }   { any: [ C, ... ] }   { not: C }
 *
 * and evaluated against a JSON object, reading only the fields it names with the envelope
 * engine.  Values compare as decoded JSON: strings after unescaping ("a\u0062" equals "ab"),
 * numbers by value, exactly (1, 1.0, 1e0 and 10e-1 are equal; 9007199254740993 is not
 * 9007199254740992), true, false and null as themselves; a string never equals a number.
 */
#ifndef JG_JCOND_H
#define JG_JCOND_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

struct config_parse;                    /* config.h: where parse errors go */
struct jcond;                           /* a compiled condition */
struct jcond_scratch;                   /* per-worker state for jcond_eval */

/* A key of a dotted path, as text. */
struct jcond_seg {
	char *name;
	size_t len;
};

/* A scalar from the configuration (equals, in, a status_from map key). */
struct jcond_scalar {
	unsigned char type;             /* enum envelope_type: '"' or 'p' */
	char *json;                     /* others than strings, as JSON: 0, 1.5e3, true, null */
	size_t len;
	char *text;                     /* strings: the text itself, else NULL */
	size_t text_len;
};

/*
 * Compile the condition at node (jcond_config.c); errors go to config_error at the offending
 * node.  Returns NULL when there was one.
 */
struct jcond *jcond_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node);
void jcond_free(struct jcond *c);
/* 1 when c tests the status somewhere. */
int jcond_uses_status(const struct jcond *c);

/* A YAML scalar as a jcond_scalar (jcond_config.c): plain null, booleans and RFC 8259 numbers keep their type,
 * anything else is a string.  0, or -1 when out of memory. */
int jcond_scalar_parse(const yaml_node_t *node, struct jcond_scalar *out);
void jcond_scalar_free(struct jcond_scalar *s);
/*
 * 1 when the JSON value json[0..len) equals s by value.  With strings, a JSON string whose
 * text is an RFC 8259 number also equals that number, and a numeric string scalar equals a
 * JSON number.
 */
int jcond_scalar_eq(const struct jcond_scalar *s, const char *json, size_t len, int strings);
/* A NUL-terminated copy of p[0..len), which may hold NULs (a YAML "\0"), or NULL. */
char *jcond_memdup(const char *p, size_t len);
/* 1 when the JSON numbers (RFC 8259) a and b have the same value. */
int jcond_number_eq(const char *a, size_t alen, const char *b, size_t blen);
/* A hash of the JSON number s[0..len) by value: numbers jcond_number_eq finds equal hash
 * the same. */
uint64_t jcond_number_hash(const char *s, size_t len);
/* 1 and *out set when the JSON number s[0..len) is an integer of at most 18 digits (2, 2.0,
 * 2e0, 200e-2), else 0. */
int jcond_number_int(const char *s, size_t len, long long *out);
/* A JSON string holding an RFC 8259 number without escapes ("0", "1.5"): its inside (and
 * *nlen), else NULL. */
const char *jcond_numeric_string(const char *json, size_t len, size_t *nlen);

/* "data.result" -> its keys.  0, -1 for an empty key, -2 when out of memory. */
int jcond_path_split(const char *s, size_t len, struct jcond_seg **segs, size_t *nseg);
void jcond_path_free(struct jcond_seg *segs, size_t nseg);

struct jcond_scratch *jcond_scratch_new(unsigned max_depth, size_t max_members);
void jcond_scratch_free(struct jcond_scratch *s);

/*
 * Evaluate c on the JSON value body[0..len) (field tests need an object) and status (the
 * HTTP status, 0 when there is none: every status test is then false).  Returns 1 (true),
 * 0 (false), or -1 when the body is not valid JSON where the condition reads it.
 */
int jcond_eval(const struct jcond *c, const char *body, size_t len, int status,
    struct jcond_scratch *s);

/*
 * The value at the nseg keys of path in the JSON text body[0..len), the last occurrence of a
 * duplicate key, as jcond_eval reads fields: *json, *vlen and *type (an enum envelope_type),
 * or *type 0 when there is none.  Returns 0, or -1 when the text is invalid where read.
 */
int jcond_find(struct jcond_scratch *s, const char *body, size_t len,
    const struct jcond_seg *path, size_t nseg, const char **json, size_t *vlen,
    unsigned char *type);

/*
 * The same over another representation of the object (the rewrite engine's edited tree):
 * lookup finds the value at the nseg keys of path and sets *json and *len to its JSON text and
 * *type to its enum envelope_type, or *type to 0 when there is none; *json may be NULL for
 * an object whose text does not exist yet.  It returns 0, or -1 on invalid input.
 */
typedef int (*jcond_lookup_fn)(void *arg, const struct jcond_seg *path, size_t nseg,
    const char **json, size_t *len, unsigned char *type);
int jcond_eval_lookup(const struct jcond *c, jcond_lookup_fn lookup, void *arg, int status);

/* ---- compiled conditions: built by jcond_config.c, run by jcond.c ---- */

enum jcond_kind {
	JC_STATUS, JC_EQUALS, JC_IN, JC_PREFIX, JC_EXISTS, JC_TYPE, JC_ALL, JC_ANY, JC_NOT
};

/* What `type:` tests, from a JSON value's first byte. */
enum jcond_type { JT_NONE, JT_OBJECT, JT_ARRAY, JT_STRING, JT_NUMBER, JT_BOOL, JT_NULL };

struct jcond_range {
	int lo, hi;                     /* 200: 200..200; 2xx: 200..299 */
};

struct jcond {
	enum jcond_kind kind;
	struct jcond_seg *path;         /* field tests */
	size_t nseg;
	struct jcond_scalar *values;    /* equals (one), in */
	size_t nvalues;
	struct jcond_range *ranges;     /* status */
	size_t nranges;
	struct jcond_scalar prefix;     /* prefix: its text */
	int exists;
	enum jcond_type type;
	struct jcond **sub;             /* all, any, not (one) */
	size_t nsub;
};

#endif
