/*
 * The tries of one upstream request, for every route kind: a try per server (exchange.c
 * picks it and connects), failover and retries under the replay rules (exchange_may_retry),
 * and the failures of a try, each logged here once, with the error the request gets when no
 * try is left.  What goes over a try's connection is the owner's: proxied requests
 * (proxy.c) stream it, the requests jsongate makes itself (fetch.c) collect it.  The
 * exchange's callback is the owner's too; it hands what it does not handle to the
 * functions below.
 */
#ifndef JG_TRIES_H
#define JG_TRIES_H

#include <stddef.h>

#include "config.h"
#include "errors.h"
#include "exchange.h"
#include "http.h"
#include "upstream.h"
#include "upstream_state.h"

struct worker;

struct tries_ops {
	/* A try is about to start: reset what the owner keeps per try (NULL: nothing). */
	void (*begin)(void *owner);
	/* A try ends before its answer was taken: let go of what reads from its connection
	 * (NULL: nothing). */
	void (*end)(void *owner);
	/* No try is left: the request fails with the tries' error and message. */
	void (*failed)(void *owner);
};

struct tries {
	struct exchange ex;             /* the try in progress */
	struct upstream_pool *up;
	const struct tries_ops *ops;
	void *owner;
	const char *request_id;         /* for logs */
	struct server_pool *tried[CONFIG_MAX_TRIES];
	size_t ntried;
	unsigned retries;               /* retries of retry_on (not connect failovers) */
	enum gateway_error error;       /* what the latest failed try would answer */
	char message[384];
	unsigned noted : 1;             /* this try's server is in tried[] */
	unsigned stale_retried : 1;     /* a stale pooled connection was replaced once */
	unsigned idempotent : 1;        /* safe to send twice (method, or Idempotency-Key) */
	unsigned replayable : 1;        /* still in hand: it can be sent again */
	unsigned sent : 1;              /* this try's request bytes went out */
};

/* Once per owner: cb (with the owner as its argument) hears the exchange. 0 or -1. */
int tries_init(struct tries *t, struct worker *w, exchange_cb cb, const struct tries_ops *ops,
    void *owner);
void tries_free(struct tries *t);
/* A request begins: no server tried, no error yet (it may go nowhere: tries_begin is for
 * the ones that go upstream). */
void tries_reset(struct tries *t);
/* Its tries go to up (idempotent and replayable are the owner's to set). */
void tries_begin(struct tries *t, struct upstream_pool *up, const char *request_id);
/* Start a try on a server not tried yet (fresh: on a new connection); the owner's callback
 * hears at once when it is ready or failed. */
void tries_start(struct tries *t, int fresh);
/* The server of the try in progress joins the servers tried (once). */
void tries_note_server(struct tries *t);
/* The request is over: the servers it tried may go. */
void tries_forget(struct tries *t);
/* The server of the latest try, or NULL. */
static inline const struct config_server *
tries_server(const struct tries *t)
{
	return t->ntried != 0 ? t->tried[t->ntried - 1]->srv : NULL;
}
/* Remember why this try failed (fmt has the upstream's name, then detail): what the request
 * gets if no other try succeeds. */
void tries_error(struct tries *t, enum gateway_error err, const char *fmt, const char *detail);
/* Whether a try that failed with fail (FAIL_*) may be followed by another. */
int tries_may_retry(struct tries *t, unsigned fail, enum upstream_retry_reason why);
/* The try failed with fail: end it, then try another server or fail (ops->failed). */
void tries_next(struct tries *t, unsigned fail, enum upstream_retry_reason why);
/* The exchange could not give a connection (EXCHANGE_FAILED): no server left, overloaded,
 * or a failed connect. */
void tries_connect_failed(struct tries *t);
/* The final head of an answer is here: a failing status is the server's verdict, and when
 * it is in retry_on and another try may go, the answer is dropped for a try elsewhere (1).
 * Any other is judged at its end (0). */
int tries_retry_status(struct tries *t, const struct http_response *resp);
/* A malformed answer: logged, the error set; another try (tries_next) or the error is the
 * owner's to say (not once the client has part of the answer). */
void tries_invalid(struct tries *t);
/* The chunked framing of an answer's body is broken: logged, the error set and the server's
 * verdict given; whether another try may go is the owner's to say (not once the client has
 * part of the answer). */
void tries_bad_framing(struct tries *t);
/*
 * The try's connection ended, failed or timed out (what: CONN_*) before the answer was
 * taken (head_seen: its head was, not its body): a TLS failure, a pooled connection the
 * server had closed, a timeout or a reset, each logged; another try or the error.
 */
void tries_connection_failed(struct tries *t, int what, int head_seen);

#endif
