/*
 * A small Redis client (RESP2) on a libevent bufferevent, for one event loop (a worker's):
 * commands are pipelined in order on one connection, each with a deadline.  A deadline missed
 * or a connection lost fails every pending command and closes the connection; the next
 * command after retry_ms connects again, and until then commands fail at once, so that a
 * caller applies its on_error policy without waiting on a dead server.
 */
#ifndef JG_RESP_H
#define JG_RESP_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct resp_client;

enum resp_type { RESP_STATUS, RESP_ERROR, RESP_INTEGER, RESP_BULK, RESP_NIL, RESP_ARRAY };

struct resp_reply {
	enum resp_type type;
	long long integer;              /* RESP_INTEGER */
	const char *str;                /* RESP_STATUS, RESP_ERROR, RESP_BULK: not NUL-terminated */
	size_t len;
	struct resp_reply *elems;       /* RESP_ARRAY */
	size_t n;
};

/* Why a command got no reply (name for logs and metrics). */
#define RESP_STATUSES(X) \
	X(OK, "ok") \
	X(TIMEOUT, "timeout") \
	X(CONNECTION, "connection") \
	X(DOWN, "down") \
	X(PROTOCOL, "protocol") \
	X(CLOSED, "closed")

enum resp_status {
#define RESP_STATUS_ENUM(id, name) RESP_##id,
	RESP_STATUSES(RESP_STATUS_ENUM)
#undef RESP_STATUS_ENUM
	RESP_STATUS_N
};

const char *resp_status_name(enum resp_status status);

/* The reply (only with RESP_OK; an error reply is RESP_OK with a RESP_ERROR reply) is valid
 * during the call.  A callback may send commands; it must not free the client. */
typedef void (*resp_cb)(void *arg, enum resp_status status, const struct resp_reply *reply);

/*
 * A client of the server at address ("127.0.0.1:6379", "[::1]:6379": numeric), with a deadline
 * of timeout_ms per command and retry_ms between a failure and the next connection attempt.
 * Nothing connects until the first command.  NULL when the address is not numeric.
 */
struct resp_client *resp_new(struct event_base *base, const char *address, uint32_t timeout_ms,
    uint32_t retry_ms);
/* Pending commands get RESP_CLOSED. */
void resp_free(struct resp_client *c);

/*
 * Send a command of argc arguments.  RESP_OK: cb will be called exactly once, later.  Else
 * (RESP_DOWN: within retry_ms of a failure; RESP_CONNECTION: cannot start a connection) cb is
 * not called and the caller acts on the status at once.
 */
enum resp_status resp_command(struct resp_client *c, int argc, const char *const *argv,
    const size_t *argvlen, resp_cb cb, void *arg);

/* Counters since resp_new. */
struct resp_stats {
	uint64_t connects, failures, timeouts, replies;
};
void resp_stats(const struct resp_client *c, struct resp_stats *st);

#endif
