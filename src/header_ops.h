/*
 * A route's header ops (request_headers: and response_headers:): set, add and remove headers
 * after jsongate's own header rules.  Built at load, where every name and value is checked;
 * at run time they classify the headers passed on and write the new ones into the head being
 * built, without allocating.
 */
#ifndef JG_HEADER_OPS_H
#define JG_HEADER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"
#include "rewrite.h"

enum header_op_kind { HEADER_OP_SET, HEADER_OP_ADD, HEADER_OP_REMOVE };

/* jsongate's own headers that a set or remove takes over (struct header_ops.own). */
#define HEADER_OPS_XFF          0x1     /* X-Forwarded-For */
#define HEADER_OPS_XFP          0x2     /* X-Forwarded-Proto */
#define HEADER_OPS_REQUEST_ID   0x4     /* X-Request-Id */

struct header_op {
	char *name;                     /* as written: what goes out */
	char *lower;                    /* lowercase: what received names are compared to */
	size_t len;
	enum rewrite_var var;           /* REWRITE_VAR_NONE: value is the text to send */
	char *value;                    /* the text, or the NAME of $header.NAME, $json.NAME or
	                                 * $path.NAME */
	size_t value_len;
	char *line;                     /* out: "Name: value\r\n" for a text, "Name: " for a */
	size_t line_len;                /* variable, made at load */
};

struct header_ops {
	struct header_op *drop;         /* set and remove: received headers of these names go */
	size_t ndrop;
	uint64_t drop_bits;             /* a bit of each name: most others need no compare */
	struct header_op *out;          /* set, then add: written after the headers passed on */
	size_t nout;
	size_t out_fixed;               /* bytes of the out lines but the variables' values */
	unsigned own;                   /* HEADER_OPS_* */
	unsigned vars;                  /* 1 << REWRITE_VAR_* for each variable a value uses */
};

/* A name's bit in drop_bits: its length and last letter, so that few names need a compare. */
#define HEADER_OPS_BIT(name, len) \
	(1ULL << (((len) * 7 + http_lc((unsigned char)(name)[(len) - 1])) & 63))

struct route_pattern;

/*
 * Add one op to *ops (allocated on first use) for the request (request != 0) or the response
 * headers of a route with path template pattern (or NULL); value is NULL for remove.  Returns
 * NULL, or why the op cannot be, for the configuration error at it (*in_value set when the
 * value is wrong, not the name): a name jsongate manages (hop-by-hop headers, Content-Length,
 * Host), a name given twice, a value with control characters, an unknown variable.
 */
const char *header_ops_add(struct header_ops **ops, int request, enum header_op_kind kind,
    const char *name, const char *value, const struct route_pattern *pattern, int *in_value);
/* Call fn with the name of each $header.NAME, $json.PATH or $path.NAME (as var says) of the
 * values of ops (may be NULL). */
void header_ops_names(const struct header_ops *ops, enum rewrite_var var,
    void (*fn)(void *arg, const char *name, size_t len), void *arg);
void header_ops_free(struct header_ops *ops);

/* 1 when ops drop a received header of this name (set or removed); see header_ops_drops. */
int header_ops_drops_named(const struct header_ops *ops, struct http_str name);

/* 1 when a received header of this name is not passed on (set or removed).  Called for every
 * header passed on: most names are told apart by their bit, without a call. */
static inline int
header_ops_drops(const struct header_ops *ops, struct http_str name)
{
	return name.len != 0 && (ops->drop_bits & HEADER_OPS_BIT(name.p, name.len)) != 0 &&
	    header_ops_drops_named(ops, name);
}

/* Bytes header_ops_put may write at most with these variables. */
size_t header_ops_size(const struct header_ops *ops, const struct rewrite_vars *vars);
/* Write the set and add headers ("Name: value\r\n" each) at w; returns the end. */
char *header_ops_put(char *w, const struct header_ops *ops, const struct rewrite_vars *vars);

#endif
