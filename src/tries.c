#include "config.h"
#include "tries.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "log.h"
#include "tls.h"
#include "upstream.h"

int
tries_init(struct tries *t, struct worker *w, exchange_cb cb, const struct tries_ops *ops,
    void *owner)
{
	t->ops = ops;
	t->owner = owner;
	tries_reset(t);
	return exchange_init(&t->ex, w, cb, owner);
}

void
tries_free(struct tries *t)
{
	tries_forget(t);
	exchange_free(&t->ex);
}

void
tries_reset(struct tries *t)
{
	t->up = NULL;
	t->request_id = "-";
	t->ntried = 0;
	t->retries = 0;
	t->error = GW_UPSTREAM_UNAVAILABLE;
	t->message[0] = '\0';
	t->noted = t->stale_retried = t->idempotent = t->replayable = t->sent = 0;
}

void
tries_begin(struct tries *t, struct upstream_pool *up, const char *request_id)
{
	t->up = up;
	t->request_id = request_id;
}

void
tries_note_server(struct tries *t)
{
	if (t->noted || t->ex.sp == NULL || t->ntried == CONFIG_MAX_TRIES)
		return;
	upstream_server_ref(t->ex.sp);
	t->tried[t->ntried++] = t->ex.sp;
	t->noted = 1;
}

void
tries_forget(struct tries *t)
{
	while (t->ntried > 0)
		upstream_server_unref(t->tried[--t->ntried]);
}

void
tries_start(struct tries *t, int fresh)
{
	int r;

	t->sent = 0;
	t->noted = 0;
	if (t->ops->begin != NULL)
		t->ops->begin(t->owner);
	t->ex.tried = t->tried;
	t->ex.ntried = t->ntried;
	r = exchange_start(&t->ex, t->up, fresh);
	tries_note_server(t);
	if (r < 0)
		t->ex.cb(&t->ex, EXCHANGE_FAILED, t->ex.arg);
	else if (r > 0)
		t->ex.cb(&t->ex, EXCHANGE_READY, t->ex.arg);
}

void
tries_error(struct tries *t, enum gateway_error err, const char *fmt, const char *detail)
{
	t->error = err;
	snprintf(t->message, sizeof(t->message), fmt, t->up->cfg->name, detail);
}

int
tries_may_retry(struct tries *t, unsigned fail, enum upstream_retry_reason why)
{
	return exchange_may_retry(&t->ex, fail, why, t->ntried, &t->retries, t->idempotent,
	    t->replayable, t->request_id);
}

/* The try ends without its answer: the connection is not used again. */
static void
tries_end(struct tries *t)
{
	if (t->ops->end != NULL)
		t->ops->end(t->owner);
	exchange_end(&t->ex, 0);
}

void
tries_next(struct tries *t, unsigned fail, enum upstream_retry_reason why)
{
	exchange_verdict(&t->ex, fail);
	tries_end(t);
	if (!tries_may_retry(t, fail, why)) {
		t->ops->failed(t->owner);
		return;
	}
	tries_start(t, 0);
}

void
tries_connect_failed(struct tries *t)
{
	struct exchange *ex = &t->ex;
	char logmsg[384];

	if (ex->fail == EXCHANGE_OVERLOADED) {
		tries_end(t);
		log_warnx("upstream %s: every server is at max_connections and the queue is full "
		    "or the wait ran out (request %s)", t->up->cfg->name, t->request_id);
		t->error = GW_UPSTREAM_OVERLOADED;
		snprintf(t->message, sizeof(t->message), "%s", gateway_errors[t->error].text);
		t->ops->failed(t->owner);
		return;
	}
	if (ex->fail == EXCHANGE_NO_SERVER) {
		tries_end(t);
		if (t->ntried == 0)
			tries_error(t, GW_UPSTREAM_UNAVAILABLE, "upstream %s has no server%s", "");
		t->ops->failed(t->owner);       /* else the last try's error stands */
		return;
	}
	t->error = exchange_describe_connect(ex, t->message, sizeof(t->message), logmsg,
	    sizeof(logmsg));
	log_warnx("%s (request %s)", logmsg, t->request_id);
	tries_next(t, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
}

int
tries_retry_status(struct tries *t, const struct http_response *resp)
{
	unsigned fail = exchange_status_failure(resp->status);
	char status[8];

	if (fail == 0)
		return 0;
	exchange_verdict(&t->ex, fail);
	exchange_note_retry_after(&t->ex, resp);
	if (!(t->up->cfg->retry_on & fail) ||
	    !tries_may_retry(t, fail, exchange_status_reason(resp->status)))
		return 0;
	log_info("upstream %s server %s answered %d: trying another server (request %s)",
	    t->up->cfg->name, t->ex.sp->srv->addr.text, resp->status, t->request_id);
	snprintf(status, sizeof(status), "%d", resp->status);
	tries_error(t, exchange_status_error(resp->status), "upstream %s answered %s", status);
	tries_end(t);
	tries_start(t, 0);
	return 1;
}

void
tries_invalid(struct tries *t)
{
	log_warnx("malformed response from upstream %s server %s (request %s)",
	    t->up->cfg->name, tries_server(t)->addr.text, t->request_id);
	tries_error(t, GW_UPSTREAM_INVALID, "malformed response from upstream %s%s", "");
}

void
tries_bad_framing(struct tries *t)
{
	log_warnx("invalid chunked framing from upstream %s server %s (request %s)",
	    t->up->cfg->name, tries_server(t)->addr.text, t->request_id);
	tries_error(t, GW_UPSTREAM_INVALID, "malformed response from upstream %s%s", "");
	exchange_verdict(&t->ex, FAIL_INVALID);
}

/* A pooled connection may have been closed by the server while it sat idle, the request
 * crossing the close: no server failure.  As nginx, the request gets one extra try on a new
 * connection when a reset may be retried, which uses up no retries; else its error. */
static int
tries_stale_retry(struct tries *t, int head_seen)
{
	struct upconn *uc = t->ex.uc;

	if (!uc->reused || t->stale_retried || head_seen || evbuffer_get_length(uc->conn.in) != 0)
		return 0;
	if (!tries_may_retry(t, FAIL_RESET, UPSTREAM_RETRY_STALE)) {
		log_warnx("upstream %s server %s closed a pooled connection before answering "
		    "(request %s)", t->up->cfg->name, tries_server(t)->addr.text, t->request_id);
		tries_error(t, GW_UPSTREAM_UNAVAILABLE,
		    "upstream %s closed the connection before answering%s", "");
		tries_end(t);
		t->ops->failed(t->owner);
		return 1;
	}
	t->stale_retried = 1;
	tries_end(t);
	if (t->noted)
		upstream_server_unref(t->tried[--t->ntried]);  /* the same server may take it */
	tries_start(t, 1);
	return 1;
}

void
tries_connection_failed(struct tries *t, int what, int head_seen)
{
	const char *name = t->up->cfg->name, *addr = tries_server(t)->addr.text;
	char reason[160];

	if (t->ex.uc->conn.tls.failed && !head_seen) {
		/* A TLS 1.3 server refuses a client certificate after our side of the handshake:
		 * the request never reached the application, and may go elsewhere.  But its bytes
		 * went out: one that is not safe to send twice goes to no other server, whatever
		 * the alert was for. */
		tls_conn_error(&t->ex.uc->conn, reason, sizeof(reason));
		log_warnx("TLS with upstream %s server %s failed: %s (request %s)", name, addr,
		    reason, t->request_id);
		tries_error(t, GW_UPSTREAM_TLS, "TLS handshake with upstream %s failed: %s", reason);
		if (t->sent && !t->idempotent) {
			exchange_verdict(&t->ex, FAIL_CONNECT);
			tries_end(t);
			t->ops->failed(t->owner);
			return;
		}
		tries_next(t, FAIL_CONNECT, UPSTREAM_RETRY_CONNECT_ERROR);
		return;
	}
	if (!(what & CONN_TIMEOUT) && tries_stale_retry(t, head_seen))
		return;
	if (what & CONN_TIMEOUT) {
		log_warnx("upstream %s server %s did not answer in time (request %s)", name, addr,
		    t->request_id);
		tries_error(t, GW_UPSTREAM_TIMEOUT, "upstream %s did not answer in time%s", "");
		tries_next(t, FAIL_TIMEOUT, UPSTREAM_RETRY_TIMEOUT);
		return;
	}
	log_warnx("upstream %s server %s closed the connection before %s (request %s)", name,
	    addr, head_seen ? "the answer was complete" : "answering", t->request_id);
	tries_error(t, GW_UPSTREAM_UNAVAILABLE,
	    "upstream %s closed the connection before answering%s", "");
	tries_next(t, FAIL_RESET, UPSTREAM_RETRY_RESET);
}
