/*
 * What every worker knows about an upstream's servers, kept across reloads: requests in
 * flight, passive health (failures in a row, ejections with a growing backoff, the one trial
 * request that ends an ejection), active check results, Retry-After, and the retry budget.
 *
 * Entries are keyed by upstream name and server address.  The main thread creates them when a
 * configuration is bound, before any worker sees it, and frees them at exit; workers and the
 * health checker only touch the atomics.
 */
#ifndef JG_UPSTREAM_STATE_H
#define JG_UPSTREAM_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "config.h"

/* Why a request was tried again, for jsongate_upstream_retries_total{reason}. */
#define UPSTREAM_RETRY_REASONS(X) \
	X(CONNECT_ERROR, "connect_error") \
	X(TIMEOUT, "timeout") \
	X(RESET, "reset") \
	X(INVALID, "invalid") \
	X(STALE, "stale")               /* a reused pooled connection closed without answering */ \
	X(STATUS_429, "429")            /* answers whose status is in retry_on, one each */ \
	X(STATUS_500, "500") \
	X(STATUS_502, "502") \
	X(STATUS_503, "503") \
	X(STATUS_504, "504")

enum upstream_retry_reason {
#define X(id, name) UPSTREAM_RETRY_##id,
	UPSTREAM_RETRY_REASONS(X)
#undef X
	UPSTREAM_RETRY__COUNT
};

extern const char *const upstream_retry_reason_names[UPSTREAM_RETRY__COUNT];

struct upstream_server_state {
	char *upstream;
	char *address;
	int configured;                 /* main thread: in the configuration bound last */
	atomic_uint in_flight;          /* requests sent or being sent to it, all workers */
	atomic_uint fails;              /* failures in a row */
	atomic_uint_least64_t fail_since;   /* ms: first failure of that run */
	atomic_uint last_fail;          /* FAIL_* bit of the latest failure */
	atomic_uint_least64_t ejected_until;   /* ms; 0: in service; past: a trial may go */
	atomic_uint ejections;          /* ejections in a row: the backoff's multiplier */
	atomic_int eject_refused;       /* 1 once max_ejected_percent kept it in (logged) */
	atomic_int trial;               /* 1 while the trial request is out */
	atomic_int check_down;          /* 1: failing active health checks */
	atomic_uint_least64_t not_before;   /* ms: Retry-After */
	atomic_uint_least64_t ejections_total;
	atomic_uint_least64_t checks_total[2];  /* passed, failed */
};

struct upstream_group_state {
	char *name;
	atomic_uint requests;           /* requests in flight, all workers */
	atomic_uint retries;            /* of those, retries */
	atomic_uint pending;            /* waiting for a server under max_connections */
	atomic_uint_least64_t retries_total[UPSTREAM_RETRY__COUNT];
	atomic_uint_least64_t budget_exhausted_total;
	atomic_uint_least64_t overloaded_total;
};

/* Main thread: point every upstream and server of cfg at its state, creating what is new;
 * states of names seen before are kept, so health survives a reload.  0 or -1. */
int upstream_state_bind(struct config *cfg);
/* The same for servers made at run time; then upstream_state_configured. */
int upstream_state_bind_servers(struct config_upstream *up, struct config_server *servers,
    size_t n);
/* Main thread: the servers of the current versions of cfg's upstreams are the configured
 * ones (jsongate_upstream_server_up lists those). */
void upstream_state_configured(const struct config *cfg);
void upstream_state_free_all(void);
/* Every state, for /metrics (main thread). */
size_t upstream_state_servers(struct upstream_server_state ***out);
size_t upstream_state_groups(struct upstream_group_state ***out);

/* A monotonic clock in milliseconds, cheap enough to read per request, as coarse as the
 * kernel's tick (up to 4 ms): for ejection, Retry-After and health windows. */
uint64_t upstream_state_now(void);
/* The monotonic clock in microseconds, read at the moment: for the durations reported. */
uint64_t upstream_state_now_us(void);

enum upstream_availability {
	UPSTREAM_IN_SERVICE,
	UPSTREAM_TRIAL,                 /* ejection over: the next request decides */
	UPSTREAM_OUT                    /* ejected, failing checks, Retry-After, or a trial out */
};
enum upstream_availability upstream_server_availability(struct upstream_server_state *st,
    uint64_t now);
/* Take the trial request of a server whose ejection is over: 1 when this caller got it. */
int upstream_server_claim_trial(struct upstream_server_state *st);

/* How a try with srv ended, for passive health.  trial: it was the trial request. */
void upstream_server_succeeded(const struct config_upstream *up, const struct config_server *srv,
    int trial);
void upstream_server_failed(const struct config_upstream *up, const struct config_server *srv,
    unsigned fail, int trial, uint64_t now, size_t ejected, size_t nservers);
/* The try ended with no verdict on the server (the client went away): free the trial. */
void upstream_server_no_verdict(const struct config_server *srv, int trial);
/* No request to srv before until (Retry-After). */
void upstream_server_not_before(const struct config_server *srv, uint64_t until);
/* Active checks: the server passed `passes` checks in a row (up_now 1), or failed `fails`
 * in a row, the last for why. */
void upstream_server_check_verdict(const struct config_upstream *up,
    const struct config_server *srv, int up_now, const char *why);
/* The upstream has no health checks (any more): what the last ones said is forgotten. */
void upstream_server_unchecked(const struct config_upstream *up,
    const struct config_server *srv);

/* The retry budget: 1 when one more retry may start (and counts it in flight).  A retry
 * that adds no load (a failover, the extra try after a stale pooled connection) is only
 * counted in retries_total (budgeted 0). */
int upstream_retry_begin(const struct config_upstream *up, enum upstream_retry_reason why,
    int budgeted);
void upstream_retry_end(const struct config_upstream *up);

#endif
