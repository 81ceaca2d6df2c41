/* Metrics: one table of names, types and help text; counters owned by the worker that counts.
 *
 * Every worker has its own counters and is the only thread writing them, so counting takes
 * no lock and no atomic read-modify-write.  The main thread reads them to answer /metrics.
 * Label values are bounded: route names and upstream servers of the configurations loaded
 * (each gets a series id when its configuration is bound, before any worker sees it), status
 * codes 100-599, and the fixed sets below. */
#ifndef JG_METRICS_H
#define JG_METRICS_H

#include <stdint.h>
#include <time.h>

struct config;
struct config_route;
struct config_server;
struct evbuffer;
struct worker;

/* name, type, help, labels */
#define METRICS_TABLE(X) \
	X(REQUESTS, "jsongate_requests_total", "counter", \
	    "Requests answered, by route and HTTP status code.", "route,code") \
	X(REQUEST_DURATION, "jsongate_request_duration_seconds", "histogram", \
	    "Time from the start of a request to the end of its response, by route.", "route") \
	X(UPSTREAM_REQUESTS, "jsongate_upstream_requests_total", "counter", \
	    "Requests sent to upstream servers, by how the exchange ended.", \
	    "upstream,server,outcome") \
	X(UPSTREAM_CONNECTIONS, "jsongate_upstream_connections", "gauge", \
	    "Upstream connections: active (serving a request) or idle (pooled).", \
	    "upstream,state") \
	X(ENVELOPE, "jsongate_envelope_total", "counter", \
	    "JSON bodies given to envelope ops, by route, direction and result.", \
	    "route,direction,result") \
	X(BYTES_SPLICED, "jsongate_bytes_spliced_total", "counter", \
	    "Rewritten body bytes sent as references to the received bytes.", "") \
	X(BYTES_COPIED, "jsongate_bytes_copied_total", "counter", \
	    "Rewritten body bytes that had to be copied.", "") \
	X(CONNECTIONS, "jsongate_connections", "gauge", \
	    "Client connections: active (serving a request) or idle (keep-alive).", "state") \
	X(CONFIG_RELOADS, "jsongate_config_reloads_total", "counter", \
	    "Configuration reloads, by result.", "result") \
	X(PROCESS_CPU, "process_cpu_seconds_total", "counter", \
	    "Total user and system CPU time spent in seconds.", "") \
	X(PROCESS_RSS, "process_resident_memory_bytes", "gauge", \
	    "Resident memory size in bytes.", "") \
	X(PROCESS_VSIZE, "process_virtual_memory_bytes", "gauge", \
	    "Virtual memory size in bytes.", "") \
	X(PROCESS_FDS, "process_open_fds", "gauge", \
	    "Number of open file descriptors.", "") \
	X(PROCESS_MAX_FDS, "process_max_fds", "gauge", \
	    "Maximum number of open file descriptors.", "") \
	X(PROCESS_START, "process_start_time_seconds", "gauge", \
	    "Start time of the process since unix epoch in seconds.", "")

enum metrics_id {
#define X(id, name, type, help, labels) METRIC_##id,
	METRICS_TABLE(X)
#undef X
	METRIC__COUNT
};

/* How an exchange with an upstream server ended (transport level: a 500 answer is "ok"). */
#define METRICS_OUTCOMES(X) \
	X(OK, "ok") \
	X(UNAVAILABLE, "unavailable")   /* refused, reset, closed before or while answering */ \
	X(INVALID, "invalid")           /* malformed response */ \
	X(TIMEOUT, "timeout")           /* connect or response timeout */ \
	X(TLS, "tls_error") \
	X(CLIENT_ABORT, "client_abort") /* the client went away first */ \
	X(ERROR, "error")               /* another gateway error after the server was chosen */

enum metrics_outcome {
#define X(id, name) METRICS_OUTCOME_##id,
	METRICS_OUTCOMES(X)
#undef X
	METRICS_OUTCOME__COUNT
};

enum metrics_direction { METRICS_REQUEST, METRICS_RESPONSE };
enum metrics_envelope_result { METRICS_APPLIED, METRICS_PASSED, METRICS_FAILED };

/* Main thread, before the workers start: counters for n workers. */
int metrics_init(unsigned nworkers);
void metrics_free(void);
/* Main thread: give every route and upstream server of cfg its series id.  Call before the
 * configuration reaches a worker; ids of names seen before are kept (counters never reset). */
int metrics_bind(struct config *cfg);

/* Worker threads.  A request ended: its route (NULL: none matched), the server it went to
 * (NULL: none), the status sent, the gateway error answered (-1: none), when it started. */
void metrics_request(struct worker *w, const struct config_route *route,
    const struct config_server *server, int status, int gateway_error,
    const struct timespec *start, const struct timespec *now);
/* Upstream connections to server: d_active and d_idle are +1, -1 or 0. */
void metrics_upstream_conns(struct worker *w, const struct config_server *server, int d_active,
    int d_idle);
/* A client connection opened (+1) or closed (-1). */
void metrics_client(struct worker *w, int delta);
/* A client connection starts (+1) or ends (-1) serving a request; the rest are idle. */
void metrics_client_active(struct worker *w, int delta);
/* The envelope engine handled a body of route. */
void metrics_envelope(struct worker *w, const struct config_route *route,
    enum metrics_direction direction, enum metrics_envelope_result result);
/* Rewritten body bytes: sent as references (spliced) and copied. */
void metrics_bytes(struct worker *w, uint64_t spliced, uint64_t copied);

/* Main thread. */
void metrics_reload(int ok);
/* Append every metric in Prometheus text format 0.0.4. */
void metrics_write(struct evbuffer *out);

#endif
