/* Metrics: one table of names, types and help text; counters owned by the worker that counts.
 *
 * Every worker has its own counters and is the only thread writing them, so counting takes
 * no lock and no atomic read-modify-write.  The main thread reads them to answer /metrics.
 * Label values are bounded: route, backend and upstream server names of the configurations loaded
 * (each gets a series id when its configuration is bound, before any worker sees it), the
 * server names they resolve, status codes 100-599, and the fixed sets below. */
#ifndef JG_METRICS_H
#define JG_METRICS_H

#include <stdint.h>
#include <time.h>

struct config;
struct config_backend;
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
	X(UPSTREAM_SERVER_UP, "jsongate_upstream_server_up", "gauge", \
	    "1 while a configured server is in service: not ejected, not failing health checks.", \
	    "upstream,server") \
	X(UPSTREAM_IN_FLIGHT, "jsongate_upstream_requests_in_flight", "gauge", \
	    "Requests in flight to a configured server, over all workers.", "upstream,server") \
	X(UPSTREAM_EJECTIONS, "jsongate_upstream_ejections_total", "counter", \
	    "Times a server was ejected by passive health checks.", "upstream,server") \
	X(UPSTREAM_HEALTH_CHECKS, "jsongate_upstream_health_checks_total", "counter", \
	    "Active health checks of a server, by result.", "upstream,server,result") \
	X(UPSTREAM_RETRIES, "jsongate_upstream_retries_total", "counter", \
	    "Requests tried again on another server, by the failure of the try before.", \
	    "upstream,reason") \
	X(UPSTREAM_RETRY_BUDGET_EXHAUSTED, "jsongate_upstream_retry_budget_exhausted_total", \
	    "counter", "Retries not made because the retry budget was used up.", "upstream") \
	X(UPSTREAM_OVERLOADED, "jsongate_upstream_overloaded_total", "counter", \
	    "Requests answered 503 upstream_overloaded (max_connections, max_pending).", \
	    "upstream") \
	X(BACKEND_REQUESTS, "jsongate_backend_requests_total", "counter", \
	    "Backend requests of aggregated routes, by route, backend and how they ended.", \
	    "route,backend,outcome") \
	X(BACKEND_DURATION, "jsongate_backend_duration_seconds", "histogram", \
	    "Time from the start of a backend request to its answer, by route and backend.", \
	    "route,backend") \
	X(JSONRPC_CALLS, "jsongate_jsonrpc_calls_total", "counter", \
	    "JSON-RPC calls and notifications, by route, method (the names of jsonrpc.methods; " \
	    "other for the rest) and outcome.", "route,method,outcome") \
	X(JSONRPC_BATCH_SIZE, "jsongate_jsonrpc_batch_size", "histogram", \
	    "Elements of the JSON-RPC batches a route received.", "route") \
	X(ENVELOPE, "jsongate_envelope_total", "counter", \
	    "Bodies on routes with envelope ops, by route, direction, result and (unless applied) " \
	    "reason.", "route,direction,result,reason") \
	X(EVENTS, "jsongate_events_total", "counter", \
	    "Events of SSE and NDJSON answers on routes with events: ops, by route and result.", \
	    "route,result") \
	X(STREAMED_BODIES, "jsongate_streamed_bodies_total", "counter", \
	    "Answers over limits.max_body rewritten by envelope ops while they were forwarded, by " \
	    "route and outcome.", "route,outcome") \
	X(BYTES_SPLICED, "jsongate_bytes_spliced_total", "counter", \
	    "Bytes of bodies rewritten by envelope ops that are the received body's, passed on " \
	    "unchanged (after inflating).", "") \
	X(BYTES_COPIED, "jsongate_bytes_copied_total", "counter", \
	    "Bytes of bodies rewritten by envelope ops that the ops wrote: new keys and values, " \
	    "separators.", "") \
	X(CONNECTIONS, "jsongate_connections", "gauge", \
	    "Client connections: active (serving a request) or idle (keep-alive).", "state") \
	X(CONNECTIONS_ACCEPTED, "jsongate_connections_accepted_total", "counter", \
	    "Client connections accepted, by worker thread.", "worker") \
	X(CLIENT_CLOSES, "jsongate_client_closes_total", "counter", \
	    "Client connections closed, by the reason they closed.", "reason") \
	X(HTTP2_CONNECTIONS, "jsongate_http2_connections_total", "counter", \
	    "Client connections that chose HTTP/2 (ALPN h2, or the h2c preface).", "") \
	X(HTTP2_STREAMS, "jsongate_http2_streams_total", "counter", \
	    "Requests over HTTP/2: the streams clients opened.", "") \
	X(HTTP2_RESETS, "jsongate_http2_resets_total", "counter", \
	    "RST_STREAM frames, by direction (sent by jsongate, received from clients).", \
	    "direction") \
	X(HTTP2_GOAWAYS, "jsongate_http2_goaways_total", "counter", \
	    "GOAWAY frames, by direction.", "direction") \
	X(TUNNELS_ACTIVE, "jsongate_tunnels_active", "gauge", \
	    "Tunnels open: upgraded connections (WebSocket) passing bytes both ways.", "") \
	X(TUNNELS, "jsongate_tunnels_total", "counter", \
	    "Tunnels ended, by outcome.", "outcome") \
	X(TUNNEL_BYTES, "jsongate_tunnel_bytes_total", "counter", \
	    "Bytes passed through tunnels, by direction: to_upstream (from clients) or " \
	    "to_client.", "direction") \
	X(CONFIG_RELOADS, "jsongate_config_reloads_total", "counter", \
	    "Configuration reloads, by result.", "result") \
	X(RESOLVER_LOOKUPS, "jsongate_resolver_lookups_total", "counter", \
	    "Lookups of upstream server names after the load, by name and result.", \
	    "name,result") \
	X(AUTH_REQUESTS, "jsongate_auth_requests_total", "counter", \
	    "Requests of routes with auth, by route, policy and what the policy decided.", \
	    "route,policy,outcome") \
	X(RATELIMIT_REQUESTS, "jsongate_ratelimit_requests_total", "counter", \
	    "Requests of routes with a rate_limit, by route and decision (error: Redis out).", \
	    "route,outcome") \
	X(JWKS_FETCHES, "jsongate_jwks_fetches_total", "counter", \
	    "Fetches of JSON Web Key Sets, by outcome.", "outcome") \
	X(REDIS_ERRORS, "jsongate_redis_errors_total", "counter", \
	    "Shared rate limit decisions Redis did not give in time (down, late, an error).", "") \
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

/* How a backend of an aggregated route ended. */
#define METRICS_BACKEND_OUTCOMES(X) \
	X(OK, "ok")                     /* its answer is in the merged body */ \
	X(STATUS, "status")             /* an answer with a status other than 2xx */ \
	X(INVALID, "invalid")           /* not JSON, too large, malformed, ops failed */ \
	X(TIMEOUT, "timeout") \
	X(UNAVAILABLE, "unavailable")   /* no connection, reset, closed, TLS */ \
	X(OVERLOADED, "overloaded")     /* max_connections, max_pending */ \
	X(SKIPPED, "skipped")           /* a backend it waits for failed */ \
	X(CANCELLED, "cancelled")       /* the request ended first (a required backend
	                                 * failed, the client went away) */

enum metrics_backend_outcome {
#define X(id, name) METRICS_BACKEND_##id,
	METRICS_BACKEND_OUTCOMES(X)
#undef X
	METRICS_BACKEND__COUNT
};

extern const char *const metrics_backend_outcome_names[METRICS_BACKEND__COUNT];

/* How a JSON-RPC call (or notification, or element that is neither) ended. */
#define METRICS_JSONRPC_OUTCOMES(X) \
	X(ANSWERED, "answered")         /* its upstream's answer went to the client */ \
	X(NOTIFIED, "notified")         /* a notification its upstream took */ \
	X(PARSE_ERROR, "parse_error")   /* -32700: a body that is not JSON */ \
	X(INVALID, "invalid")           /* -32600: not a Request object, a batch too large */ \
	X(NOT_FOUND, "not_found")       /* -32601: no upstream takes its method */ \
	X(DENIED, "denied")             /* -32601: allow or deny keep its method out */ \
	X(UPSTREAM_ERROR, "upstream_error") /* -32603, or a forwarded call's failed answer */ \
	X(CANCELLED, "cancelled")       /* the client went away first */

enum metrics_jsonrpc_outcome {
#define X(id, name) METRICS_JSONRPC_##id,
	METRICS_JSONRPC_OUTCOMES(X)
#undef X
	METRICS_JSONRPC__COUNT
};

enum metrics_direction { METRICS_REQUEST, METRICS_RESPONSE };
/* What became of a body given to envelope ops. */
#define METRICS_ENVELOPE_RESULTS(X) \
	X(APPLIED, "applied") \
	X(PASSED, "passed")             /* on_error: pass */ \
	X(FAILED, "failed")             /* on_error: fail */

enum metrics_envelope_result {
#define X(id, name) METRICS_##id,
	METRICS_ENVELOPE_RESULTS(X)
#undef X
	METRICS_ENVELOPE__COUNT
};

/* Why a body went on untouched (passed) or was answered with an error (failed). */
#define METRICS_ENVELOPE_REASONS(X) \
	X(NONE, "")                     /* applied */ \
	X(EMPTY, "empty")               /* no body: HEAD, 204, 304, a length of 0 */ \
	X(NOT_JSON, "not_json")         /* a Content-Type not in json_types */ \
	X(ENCODING, "encoding")         /* a Content-Encoding other than gzip or deflate */ \
	X(STATUS, "status")             /* a status outside response_on, no error_response */ \
	X(OVER_LIMIT, "over_limit")     /* larger than limits.max_body */ \
	X(INVALID_JSON, "invalid_json") /* not JSON: a syntax error, a byte order mark, nothing \
	                                 * under validate: full */ \
	X(OP_ERROR, "op_error")         /* the ops could not apply: a missing key, not an object, \
	                                 * a limit of the engine, a body that does not inflate */

enum metrics_envelope_reason {
#define X(id, name) METRICS_REASON_##id,
	METRICS_ENVELOPE_REASONS(X)
#undef X
	METRICS_REASON__COUNT
};

/* What became of an event of a streamed answer given to events: ops (each counted once). */
#define METRICS_EVENTS_RESULTS(X) \
	X(REWRITTEN, "rewritten")       /* the ops changed it */ \
	X(PASSED, "passed")             /* it went on as it came: not a JSON object, or the \
	                                 * ops changed nothing */ \
	X(OVER_LIMIT, "over_limit")     /* larger than limits.max_event: passed, never held */ \
	X(FAILED, "failed")             /* the ops could not apply: passed as it came */

enum metrics_events_result {
#define X(id, name) METRICS_EVENTS_##id,
	METRICS_EVENTS_RESULTS(X)
#undef X
	METRICS_EVENTS__COUNT
};

/* What became of an answer rewritten while it was forwarded. */
#define METRICS_STREAMED_OUTCOMES(X) \
	X(REWRITTEN, "rewritten")       /* complete */ \
	X(ABORTED, "aborted")           /* cut after its answer started: found malformed, the \
	                                 * upstream failed, or the client went */

enum metrics_streamed_outcome {
#define X(id, name) METRICS_STREAMED_##id,
	METRICS_STREAMED_OUTCOMES(X)
#undef X
	METRICS_STREAMED__COUNT
};

/* Main thread, before the workers start: counters for n workers. */
int metrics_init(unsigned nworkers);
void metrics_free(void);
/* Main thread: give every route and upstream server of cfg its series id.  Call before the
 * configuration reaches a worker; ids of names seen before are kept (counters never reset). */
int metrics_bind(struct config *cfg);
/* The same for servers made at run time (a name resolving to new addresses). */
int metrics_bind_servers(const char *upstream, struct config_server *servers, size_t n);

/* Worker threads.  A request ended: its route (NULL: none matched), the server it went to
 * (NULL: none), the status sent, the gateway error answered (-1: none), when it started. */
void metrics_request(struct worker *w, const struct config_route *route,
    const struct config_server *server, int status, int gateway_error,
    const struct timespec *start, const struct timespec *now);
/* A request to an upstream server ended (not the client's: a backend's): as
 * metrics_request counts the server of a client's request. */
void metrics_upstream_request(struct worker *w, const struct config_server *server, int status,
    int gateway_error);
/* A backend of an aggregated route ended; sent: it went out, taking us microseconds. */
void metrics_backend(struct worker *w, const struct config_backend *backend,
    enum metrics_backend_outcome outcome, int sent, uint64_t us);
/* n JSON-RPC calls of route with the method label (an index of jsonrpc->labels, or nlabels
 * for other) ended with outcome. */
void metrics_jsonrpc(struct worker *w, const struct config_route *route, unsigned label,
    enum metrics_jsonrpc_outcome outcome, uint64_t n);
/* A JSON-RPC batch of n elements came to route. */
void metrics_jsonrpc_batch(struct worker *w, const struct config_route *route, uint64_t n);
/* Upstream connections to server: d_active and d_idle are +1, -1 or 0. */
void metrics_upstream_conns(struct worker *w, const struct config_server *server, int d_active,
    int d_idle);
/* A client connection opened (+1: accepted) or closed (-1). */
void metrics_client(struct worker *w, int delta);
/* A client connection closed, for why (an enum client_close). */
void metrics_client_closed(struct worker *w, int why);

/* What HTTP/2 counts. */
enum metrics_h2 {
	METRICS_H2_CONNECTION, METRICS_H2_STREAM, METRICS_H2_RESET_SENT, METRICS_H2_RESET_RECEIVED,
	METRICS_H2_GOAWAY_SENT, METRICS_H2_GOAWAY_RECEIVED, METRICS_H2__COUNT
};
void metrics_h2(struct worker *w, enum metrics_h2 what);
/* A tunnel opened (+1) or closed (-1). */
void metrics_tunnel(struct worker *w, int delta);
/* A tunnel ended with why (an enum tunnel_close). */
void metrics_tunnel_closed(struct worker *w, int why);
/* n bytes went through a tunnel, to its client or (0) to its upstream. */
void metrics_tunnel_bytes(struct worker *w, int to_client, uint64_t n);
/* A client connection starts (+1) or ends (-1) serving a request; the rest are idle. */
void metrics_client_active(struct worker *w, int delta);
/* A body on a route with envelope ops: applied (reason NONE), or passed or failed and why. */
void metrics_envelope(struct worker *w, const struct config_route *route,
    enum metrics_direction direction, enum metrics_envelope_result result,
    enum metrics_envelope_reason reason);
/* n more events of an answer on route ended with result. */
void metrics_events(struct worker *w, const struct config_route *route,
    enum metrics_events_result result, uint64_t n);
void metrics_streamed(struct worker *w, const struct config_route *route,
    enum metrics_streamed_outcome outcome);
/* Bytes of a rewritten body: the received body's (spliced) and the ops' own (copied). */
void metrics_bytes(struct worker *w, uint64_t spliced, uint64_t copied);

/* Main thread. */
void metrics_reload(int ok);
/* A lookup of a configured server name ended (ok: a good answer, else a failure). */
void metrics_resolver_lookup(const char *name, int ok);
/* For the counters kept elsewhere (auth.c): a metric's HELP and TYPE lines, its name, a label
 * value escaped. */
void metrics_write_head(struct evbuffer *out, enum metrics_id id);
const char *metrics_name(enum metrics_id id);
void metrics_write_label(struct evbuffer *out, const char *s);
/* Append every metric in Prometheus text format 0.0.4. */
void metrics_write(struct evbuffer *out);

#endif
