/*
 * JSON-RPC 2.0 as byte spans.  A request body is split into its calls (one call, or the
 * elements of a batch), each one classified (call, notification, not a Request object) with
 * its method and id found; an upstream's answer is matched back to the calls it answers by
 * their ids, compared by value (1 and 1.0 are the same id, "a" and "\u0061" too).  Calls and
 * answers stay spans of the bodies: nothing is decoded but methods and ids, nothing is
 * copied.  Pure: no I/O.
 */
#ifndef JG_JSONRPC_H
#define JG_JSONRPC_H

#include <stddef.h>
#include <stdint.h>

#include "envelope.h"

struct config_jsonrpc;

/* The errors the gateway answers itself: code, message. */
#define JSONRPC_ERRORS(X) \
	X(PARSE, -32700, "Parse error") \
	X(INVALID, -32600, "Invalid Request") \
	X(METHOD, -32601, "Method not found") \
	X(INTERNAL, -32603, "Internal error")

enum jsonrpc_error {
#define X(id, code, message) JSONRPC_E_##id,
	JSONRPC_ERRORS(X)
#undef X
	JSONRPC_E__COUNT
};

/*
 * An error Response object is written as the text of jsonrpc_error_open, optionally
 * ", \"data\": VALUE", then the text of jsonrpc_error_close, the id (or null), and "}":
 *   {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"}
 * (spaced as the specification writes its examples).
 */
const char *jsonrpc_error_open(enum jsonrpc_error e, size_t *len);
#define JSONRPC_ERROR_CLOSE "}, \"id\": "

#define JSONRPC_NO_TARGET UINT32_MAX

enum jsonrpc_kind {
	JSONRPC_CALL,                   /* a Request object with an id: it gets an answer */
	JSONRPC_NOTIFICATION,           /* one without: it gets none */
	JSONRPC_INVALID                 /* not a Request object: -32600 */
};

/* What an upstream answered for a call. */
enum jsonrpc_state {
	JSONRPC_UNANSWERED,             /* nothing (yet) */
	JSONRPC_RESULT,                 /* a Response object with a result */
	JSONRPC_ERROR,                  /* a Response object with an error */
	JSONRPC_BAD_ANSWER,             /* something with its id that is not a Response object */
	JSONRPC_TWICE                   /* its id was answered more than once */
};

struct jsonrpc_call {
	const char *val;                /* the element, as in the body */
	size_t len;
	const char *method;             /* its method: a JSON string with its quotes, or NULL */
	size_t method_len;
	const char *id;                 /* its id (string, number or null) as written, or NULL */
	size_t id_len;
	unsigned char kind;             /* enum jsonrpc_kind */
	unsigned char state;            /* enum jsonrpc_state, set by jsonrpc_match */
	uint32_t target;                /* the caller's: where it goes, or JSONRPC_NO_TARGET */
	uint32_t round;                 /* set by jsonrpc_rounds */
	const char *answer;             /* the answer (RESULT, ERROR, BAD_ANSWER), as received */
	size_t answer_len;
	/* private */
	uint64_t hash;                  /* of the id's value */
	uint32_t next;                  /* in its hash bucket */
	uint32_t dup;                   /* the next call with the same target and id */
	uint32_t tail;                  /* of a chain of dup: its last call */
	uint32_t mark;                  /* in the unit being matched */
};

enum jsonrpc_split_result {
	JSONRPC_SINGLE = 0,             /* one Request object (valid or not): calls[0] */
	JSONRPC_BATCH = 1,              /* an array of ncalls elements */
	JSONRPC_PARSE_ERROR = -1,       /* not JSON (or nested over max_depth): -32700 */
	JSONRPC_NOT_REQUEST = -2,       /* JSON, but not an object or a non-empty array: -32600 */
	JSONRPC_TOO_MANY = -3,          /* a batch of more than max_batch elements */
	JSONRPC_NOMEM = -4
};

/* Per worker; reused by every request. */
struct jsonrpc {
	struct jsonrpc_call *calls;
	size_t ncalls, cap;
	struct envelope env;
	size_t max_members;             /* members of one element or answer (SIZE_MAX) */
	uint32_t *buckets;              /* hash table of calls: index + 1, 0 empty */
	size_t nbuckets;
	char *scratch[2];               /* decoded strings */
	size_t scratch_cap[2];
	uint32_t stamp;                 /* marks the calls of the unit being matched */
};

void jsonrpc_init(struct jsonrpc *j);
void jsonrpc_free(struct jsonrpc *j);

/*
 * Split body[0..len) into calls.  max_depth counts the outermost value; strict (validate:
 * full) checks the whole body as RFC 8259 JSON, else only the members of each Request object
 * are, the values below them only for balance.  Returns an enum jsonrpc_split_result; calls
 * have target JSONRPC_NO_TARGET.
 */
int jsonrpc_split(struct jsonrpc *j, const char *body, size_t len, unsigned max_depth,
    size_t max_batch, int strict);

/*
 * The decoded name of a call's method: *name, *len (in the body, or in scratch until the
 * next call).  0, or -1 for a method with a bad escape.
 */
int jsonrpc_method_name(struct jsonrpc *j, const struct jsonrpc_call *c, const char **name,
    size_t *len);

/* The methods: entry of jc that takes the method name[0..len), or -1. */
int jsonrpc_method_rule(const struct config_jsonrpc *jc, const char *name, size_t len);
/* 1 when jc's allow and deny lists let the method be called. */
int jsonrpc_method_allowed(const struct config_jsonrpc *jc, const char *name, size_t len);

/*
 * Once every call has its target: give calls (with an id and a target) their round, so that
 * the k-th call with the same target and the same id (by value) is in round k.  Within one
 * target and round no two calls share an id, so answers match without ambiguity; notifications
 * are in round 0.  Returns the number of rounds (at least 1), or -1 when out of memory.
 */
int jsonrpc_rounds(struct jsonrpc *j);

/*
 * The answer body[0..len) of an upstream to the calls idx[0..n) (of one target and round): a
 * Response object or an array of them.  Each answer is given to the call of idx whose id it
 * carries (by value): its state and answer are set; an id answered twice makes that call
 * JSONRPC_TWICE; answers to no call of idx are ignored.  max_depth counts the body's
 * outermost value.  Returns 0, or -1 when the body is not JSON-RPC answers (no call's state
 * changes then).
 */
int jsonrpc_match(struct jsonrpc *j, const uint32_t *idx, size_t n, const char *body,
    size_t len, unsigned max_depth);

/* 1 when the ids a[0..alen) and b[0..blen) (JSON strings, numbers or null) are equal by value. */
int jsonrpc_id_eq(struct jsonrpc *j, const char *a, size_t alen, const char *b, size_t blen);

#endif
