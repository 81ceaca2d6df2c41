/*
 * The configuration schema: one table per mapping (key, type, default, bounds, one line of
 * documentation), which drives key checking, parsing and defaults, and config_schema_write, the
 * listing the man page is checked against.
 */
#include "config.h"
#include "config_parse.h"

#include <stdio.h>
#include <string.h>

static const char *const config_log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const config_access_formats[] = { "json", "combined", NULL };
static const char *const config_balances[] = { "round_robin", "least_conn", "hash", NULL };
static const char *const config_on_errors[] = { "pass", "fail", NULL };
static const char *const config_validates[] = { "envelope", "full", NULL };
static const char *const config_compresses[] = { "off", "gzip", NULL };
static const char *const config_verify_clients[] = { "off", "on", "optional", NULL };
static const char *const config_booleans[] = { "false", "true", NULL };
static const char *const config_merges[] = { "keyed", "flat", NULL };
static const char *const config_splits[] = { "batch", "single", NULL };

/* The names of enum config_failure bits, in bit order; "5xx" is all the 5xx ones. */
const char *const config_failure_names[] = {
	"connect_error", "timeout", "reset", "invalid", "429", "500", "502", "503", "504", NULL
};

_Static_assert(sizeof(enum log_level) == sizeof(int) && sizeof(enum balance) == sizeof(int) &&
    sizeof(enum on_error) == sizeof(int) && sizeof(enum access_format) == sizeof(int) &&
    sizeof(enum validate_mode) == sizeof(int) && sizeof(enum compress_mode) == sizeof(int) &&
    sizeof(enum verify_client) == sizeof(int) && sizeof(enum merge_mode) == sizeof(int) &&
    sizeof(enum missing_mode) == sizeof(int) && sizeof(enum jsonrpc_split_mode) == sizeof(int),
    "CONFIG_ENUM stores enums as int");

static const struct config_field config_log_fields[] = {
	F_ENUM("level", struct config, log_level, "info", config_log_levels,
	    "error log level: error, warn, info or debug"),
	F_CUSTOM("error", config_parse_error_log, "file|stderr|syslog", NULL, 0,
	    "error log: a file, stderr, syslog (facility daemon) or syslog:SOCKET; "
	    "default stderr with -f, syslog without"),
	F_CUSTOM("access", config_parse_access, "file|stderr|off", "stderr", 0,
	    "access log: a file, stderr, or off"),
	F_ENUM("format", struct config, access_format, "json", config_access_formats,
	    "access log format: json (one object per line) or combined"),
	F_CUSTOM("json_fields", config_parse_json_fields, "list", NULL, 0,
	    "request body fields ($json.PATH) added to json access log lines"),
	F_CUSTOM("path_fields", config_parse_path_fields, "list", NULL, 0,
	    "path template captures ($path.NAME) added to json access log lines"),
	F_CUSTOM("jwt_fields", config_parse_jwt_fields, "list", NULL, 0,
	    "claims of the verified token ($jwt.CLAIM) added to json access log lines"),
};
static const struct config_section config_log_section = CONFIG_SECTION_OF(config_log_fields);

static const struct config_field config_admin_fields[] = {
	{ "listen", CONFIG_ADDR_PTR, C_OFF(admin_listen), NULL, 0, 0, NULL, NULL, NULL,
	    CONFIG_REQUIRED, "address of the admin endpoint (GET /metrics, GET /healthz)", NULL },
};
static const struct config_section config_admin_section = CONFIG_SECTION_OF(config_admin_fields);

static const struct config_field config_limits_fields[] = {
	{ "max_header", CONFIG_SIZE, offsetof(struct config, limits.max_header), "16k", 1024,
	    1024 * 1024, NULL, NULL, NULL, 0, "largest request head (at most 1m); larger "
	    "requests get 431", NULL },
	F_SIZE("max_body", struct config, limits.max_body, "8m", 0,
	    "largest JSON body buffered for ops; larger requests get 413"),
	F_UINT("max_connections", struct config, limits.max_connections, "10000", 1, UINT32_MAX,
	    "client connections open at once, all workers together"),
	F_UINT("max_depth", struct config, limits.max_depth, "1000", 1, UINT32_MAX,
	    "deepest JSON nesting the envelope engine accepts"),
	F_UINT("max_members", struct config, limits.max_members, "100000", 1, UINT32_MAX,
	    "most object members the envelope engine tokenizes in one body; more: on_error"),
	{ "route_scan", CONFIG_SIZE, offsetof(struct config, limits.route_scan), "64k", 1024,
	    16 * 1024 * 1024, NULL, NULL, NULL, 0,
	    "request body bytes read for the fields of match.json and $json.PATH", NULL },
	F_UINT("max_backends", struct config, limits.max_backends, "16", 1, CONFIG_MAX_BACKENDS,
	    "most backends one aggregated route may have"),
	F_SIZE("max_request_body", struct config, limits.max_request_body, "0", 0,
	    "largest request body, streamed or buffered; larger requests get 413; 0: no limit"),
	{ "max_event", CONFIG_SIZE, offsetof(struct config, limits.max_event), "1m", 64,
	    (size_t)1 << 30, NULL, NULL, NULL, 0,
	    "largest SSE event or NDJSON line the events: ops take; larger ones pass untouched",
	    NULL },
};
static const struct config_section config_limits_section = CONFIG_SECTION_OF(config_limits_fields);

static const struct config_field config_timeouts_fields[] = {
	F_DURATION("client_header", struct config, timeouts.client_header, "10s", 1,
	    "time allowed to receive a request head"),
	F_DURATION("client_body", struct config, timeouts.client_body, "30s", 1,
	    "longest pause while receiving a request body"),
	F_DURATION("keepalive", struct config, timeouts.keepalive, "60s", 0,
	    "idle time before a client connection is closed; 0 disables keep-alive"),
	F_DURATION("upstream_connect", struct config, timeouts.upstream_connect, "2s", 1,
	    "time allowed to connect to an upstream server"),
	F_DURATION("upstream_response", struct config, timeouts.upstream_response, "30s", 1,
	    "longest wait for upstream response bytes"),
	F_DURATION("upstream_try", struct config, timeouts.upstream_try, "0", 0,
	    "limit of one try, from its start to the answer's head; 0: none"),
	F_DURATION("queue", struct config, timeouts.queue, "5s", 1,
	    "longest wait for a server when every one is at max_connections"),
	F_DURATION("shutdown_grace", struct config, timeouts.shutdown_grace, "30s", 0,
	    "time in-flight requests get to finish on SIGTERM"),
	F_DURATION("tunnel", struct config, timeouts.tunnel, "1h", 1,
	    "idle time (no byte either way) after which a tunnel (WebSocket) is closed"),
};
static const struct config_section config_timeouts_section =
    CONFIG_SECTION_OF(config_timeouts_fields);

static const struct config_field config_tls_cert_fields[] = {
	F_STRING_REQ("cert", struct config_tls_cert, cert,
	    "PEM file: the certificate, then its chain"),
	F_STRING_REQ("key", struct config_tls_cert, key, "PEM file: its private key"),
};
const struct config_section config_tls_cert_section =
    CONFIG_SECTION_OF(config_tls_cert_fields);

static const struct config_field config_listener_tls_fields[] = {
	F_CUSTOM("certificates", config_parse_certificates, "list", NULL, CONFIG_REQUIRED,
	    "list of { cert: FILE, key: FILE }; chosen by SNI, the first is the default"),
	F_CUSTOM("protocols", config_parse_protocols, "list", "[TLSv1.2, TLSv1.3]", 0,
	    "TLS versions accepted: TLSv1.2, TLSv1.3"),
	F_STRING("ciphers", struct config_listener_tls, ciphers, NULL,
	    "TLS 1.2 cipher list in OpenSSL's syntax; default OpenSSL's"),
	F_STRING("client_ca", struct config_listener_tls, client_ca, NULL,
	    "PEM file of the CAs client certificates are verified against"),
	F_ENUM("verify_client", struct config_listener_tls, verify_client, "off",
	    config_verify_clients, "client certificates: off, on (required) or optional"),
	F_ENUM("session_tickets", struct config_listener_tls, session_tickets, "true",
	    config_booleans, "resume sessions with tickets (keys shared by the workers, "
	    "rotated hourly): true or false (every handshake a full one)"),
	F_ENUM("prefer_server_ciphers", struct config_listener_tls, prefer_server_ciphers,
	    "false", config_booleans, "which order of ciphers picks the one a connection uses: "
	    "the server's (true) or the client's (false)"),
};
const struct config_section config_listener_tls_section =
    CONFIG_SECTION_OF(config_listener_tls_fields);

static const struct config_field config_http2_fields[] = {
	F_UINT("max_concurrent_streams", struct config, http2.max_concurrent_streams, "100", 1,
	    1000000, "streams one HTTP/2 connection may have open at once"),
	{ "stream_window", CONFIG_SIZE, offsetof(struct config, http2.stream_window), "256k",
	    65535, 0x7fffffff, NULL, NULL, NULL, 0,
	    "request body bytes one stream may send before its request reads them", NULL },
	{ "connection_window", CONFIG_SIZE, offsetof(struct config, http2.connection_window),
	    "1m", 65535, 0x7fffffff, NULL, NULL, NULL, 0,
	    "the same for all the streams of a connection together", NULL },
};
static const struct config_section config_http2_section = CONFIG_SECTION_OF(config_http2_fields);

static const struct config_field config_listener_fields[] = {
	F_ADDR("listen", struct config_listener, addr, CONFIG_REQUIRED,
	    "address to accept clients on: IPv4:PORT, [IPv6]:PORT, *:PORT or localhost:PORT"),
	F_CUSTOM("http2", config_parse_listener_http2, "enum", "true with tls, else false", 0,
	    "HTTP/2 next to HTTP/1.1: offered by ALPN with TLS, by prior knowledge (h2c) without"),
	F_CUSTOM("tls", config_parse_listener_tls, "mapping", NULL, 0,
	    "TLS for clients; none: plain HTTP"),
};
const struct config_section config_listener_section =
    CONFIG_SECTION_OF(config_listener_fields);

static const struct config_field config_server_fields[] = {
	F_CUSTOM("address", config_parse_server_address, "address", NULL, CONFIG_REQUIRED,
	    "server address: IPv4:PORT, [IPv6]:PORT, localhost:PORT or NAME:PORT (resolved)"),
	F_UINT("weight", struct config_server, weight, "1", 1, CONFIG_MAX_WEIGHT,
	    "share of requests relative to the other servers"),
	F_ENUM("backup", struct config_server, backup, "false", config_booleans,
	    "true: takes requests only while no primary server can"),
	F_UINT("max_fails", struct config_server, max_fails, NULL, 0, CONFIG_MAX_FAILS,
	    "the upstream's max_fails for this server"),
	F_UINT("max_connections", struct config_server, max_connections, NULL, 0, UINT32_MAX,
	    "the upstream's max_connections for this server"),
};
const struct config_section config_server_section = CONFIG_SECTION_OF(config_server_fields);

static const struct config_field config_upstream_tls_fields[] = {
	F_ENUM("verify", struct config_upstream_tls, verify, "true", config_booleans,
	    "verify the server's certificate and name"),
	F_STRING("ca", struct config_upstream_tls, ca, NULL,
	    "PEM file of the CAs servers are verified against; default the system store"),
	F_STRING("server_name", struct config_upstream_tls, server_name, NULL,
	    "name sent as SNI and verified; default the server's host"),
	F_STRING("cert", struct config_upstream_tls, cert, NULL,
	    "PEM client certificate (and chain) for mutual TLS"),
	F_STRING("key", struct config_upstream_tls, key, NULL, "PEM private key of cert"),
};
const struct config_section config_upstream_tls_section =
    CONFIG_SECTION_OF(config_upstream_tls_fields);

static const struct config_field config_health_expect_fields[] = {
	F_CUSTOM("status", config_parse_health_status, "list", "[2xx]", 0,
	    "statuses, classes (2xx) or ranges (200..299) of a passed check"),
	F_CUSTOM("json", config_parse_health_json, "mapping", NULL, 0,
	    "a condition on the JSON answer, e.g. { field: status, equals: ok }"),
};
static const struct config_section config_health_expect_section =
    CONFIG_SECTION_OF(config_health_expect_fields);

static const struct config_field config_health_fields[] = {
	F_CUSTOM("path", config_parse_health_path, "path", NULL, CONFIG_REQUIRED,
	    "path checked with GET, query allowed"),
	F_STRING("host", struct config_health, host, NULL,
	    "Host header of checks; default the upstream's host_header, else the server's host"),
	F_DURATION("interval", struct config_health, interval, "5s", 10,
	    "time between two checks of a server"),
	F_DURATION("timeout", struct config_health, timeout, "2s", 1,
	    "time allowed for one check, connect included"),
	F_UINT("fails", struct config_health, fails, "3", 1, 1000,
	    "failed checks in a row that take a server out of service"),
	F_UINT("passes", struct config_health, passes, "2", 1, 1000,
	    "passed checks in a row that bring it back"),
	F_SECTION("expect", config_health_expect_section, "what a passed check answers"),
};
const struct config_section config_health_section =
    CONFIG_SECTION_OF(config_health_fields);

static const struct config_field config_upstream_fields[] = {
	F_CUSTOM("servers", config_parse_servers, "list", NULL, CONFIG_REQUIRED,
	    "list of ADDRESS or { address: ADDRESS, weight: N, backup: B, max_fails: N, "
	    "max_connections: N }"),
	F_ENUM("balance", struct config_upstream, balance, "round_robin", config_balances,
	    "server selection: round_robin, least_conn or hash"),
	F_CUSTOM("hash_key", config_parse_hash_key, "variable", NULL, 0,
	    "balance: hash key: $remote_addr, $client_addr, $request_uri, $path, $host, "
	    "$header.NAME, $json.PATH, $jwt.CLAIM or $api_key"),
	F_UINT("max_fails", struct config_upstream, max_fails, "1", 0, CONFIG_MAX_FAILS,
	    "failures in a row within fail_timeout that eject a server; 0: never"),
	F_DURATION("fail_timeout", struct config_upstream, fail_timeout, "10s", 1,
	    "window of max_fails, and the first ejection's length"),
	F_CUSTOM("fail_on", config_parse_fail_on, "list", "[connect_error, timeout, reset]", 0,
	    "what counts as a failure: connect_error, timeout, reset, invalid, 429, 500, 502, "
	    "503, 504, 5xx"),
	F_UINT("max_ejected_percent", struct config_upstream, max_ejected_percent, "50", 0, 100,
	    "most servers ejected at once, in percent (one may always be)"),
	F_UINT("retries", struct config_upstream, retries, "1", 0, CONFIG_MAX_TRIES - 1,
	    "extra tries on other servers after a failed one"),
	F_CUSTOM("retry_on", config_parse_retry_on, "list", "[connect_error, timeout, reset]", 0,
	    "failures a request is tried again for: connect_error, timeout, reset, invalid, "
	    "429, 500, 502, 503, 504, 5xx"),
	F_CUSTOM("retry_budget", config_parse_retry_budget, "integer|mapping", "20", 0,
	    "retries in flight as a percent of requests in flight, or { percent: P, min: N }"),
	F_SIZE("retry_body", struct config_upstream, retry_body, "64k", 0,
	    "largest request body kept to be sent again; larger ones are not retried once sent"),
	F_UINT("max_connections", struct config_upstream, max_connections, "0", 0, UINT32_MAX,
	    "requests in flight to one server at once; 0: no limit"),
	F_UINT("max_pending", struct config_upstream, max_pending, "1024", 0, UINT32_MAX,
	    "requests waiting for a server at max_connections; more get 503"),
	F_CUSTOM("health", config_parse_health, "mapping", NULL, 0,
	    "active health checks; none: only passive"),
	F_UINT("keepalive", struct config_upstream, keepalive, "32", 0, 65535,
	    "idle pooled connections kept per worker"),
	F_STRING("host_header", struct config_upstream, host_header, NULL,
	    "Host header sent upstream instead of the client's"),
	F_CUSTOM("tls", config_parse_upstream_tls, "mapping", NULL, 0,
	    "TLS to the servers; none: plain HTTP"),
	F_DURATION("resolve_interval", struct config_upstream, resolve_interval, "30s", 1000,
	    "time between lookups of the server names; shorter when their TTL is"),
};
const struct config_section config_upstream_section =
    CONFIG_SECTION_OF(config_upstream_fields);

static const struct config_field config_match_fields[] = {
	F_CUSTOM("host", config_parse_route_host, "string", NULL, 0,
	    "Host the request must carry; case-insensitive, any :port ignored"),
	F_CUSTOM("path", config_parse_route_path, "path", NULL, 0,
	    "exact path, or a path template: /users/{id}/dashboard, /files/{rest...}"),
	F_CUSTOM("path_prefix", config_parse_route_path_prefix, "path", NULL, 0,
	    "path prefix, compared as a plain string (/api matches /api, /api/x and /apix)"),
	F_CUSTOM("methods", config_parse_methods, "list", NULL, 0,
	    "allowed methods (GET implies HEAD); others go on to later routes, 405 if none"),
	F_CUSTOM("json", config_parse_route_json, "mapping|list", NULL, 0,
	    "a condition on fields of the JSON request body, or a list that must all hold"),
};
static const struct config_section config_match_section = CONFIG_SECTION_OF(config_match_fields);

/* request_headers and response_headers (their fields parse into a struct config_headers). */
static const struct config_field config_header_ops_fields[] = {
	F_CUSTOM("set", config_parse_header_set, "mapping", NULL, 0,
	    "headers replaced or added, NAME: VALUE; a value may be a request variable"),
	F_CUSTOM("add", config_parse_header_add, "mapping", NULL, 0,
	    "headers added after those of the same name, NAME: VALUE"),
	F_CUSTOM("remove", config_parse_header_remove, "list", NULL, 0, "names of headers removed"),
};
const struct config_section config_header_ops_section =
    CONFIG_SECTION_OF(config_header_ops_fields);

/* Defaults: the global timeouts, copied into the route before its keys are parsed. */
static const struct config_field config_route_timeouts_fields[] = {
	F_DURATION("upstream_connect", struct config_route, timeouts.upstream_connect, NULL, 1,
	    "time allowed to connect to a server of the route's upstream"),
	F_DURATION("upstream_response", struct config_route, timeouts.upstream_response, NULL, 1,
	    "longest wait for response bytes of the route's requests"),
	F_DURATION("upstream_try", struct config_route, timeouts.upstream_try, NULL, 0,
	    "limit of one try of the route's requests, to the answer's head; 0: none"),
};
static const struct config_section config_route_timeouts_section =
    CONFIG_SECTION_OF(config_route_timeouts_fields);

/* Defaults: the global limits, copied into the route before its keys are parsed. */
static const struct config_field config_route_limits_fields[] = {
	F_SIZE("max_request_body", struct config_route, limits.max_request_body, NULL, 0,
	    "largest request body of the route's requests; larger get 413; 0: no limit"),
};
static const struct config_section config_route_limits_section =
    CONFIG_SECTION_OF(config_route_limits_fields);

static const struct config_field config_route_cors_fields[] = {
	F_CUSTOM("origins", config_parse_cors_origins, "list", NULL, CONFIG_REQUIRED,
	    "origins whose pages may read the route's answers: scheme://host[:port], "
	    "*.domain, scheme://*.domain, or *"),
	F_CUSTOM("methods", config_parse_cors_methods, "list",
	    "[GET, HEAD, POST, PUT, PATCH, DELETE]", 0,
	    "methods a preflight allows"),
	F_CUSTOM("headers", config_parse_cors_headers, "list", NULL, 0,
	    "request headers a preflight allows; default: the ones it asks for"),
	F_ENUM("credentials", struct config_route, cors.credentials, "false", config_booleans,
	    "answers say Access-Control-Allow-Credentials: true (the origin, never *)"),
	F_DURATION("max_age", struct config_route, cors.max_age, "0", 0,
	    "how long a browser may cache a preflight's answer; 0: not said"),
};
static const struct config_section config_route_cors_section =
    CONFIG_SECTION_OF(config_route_cors_fields);

static const struct config_field config_route_fields[] = {
	F_CUSTOM("name", config_parse_route_name, "string", NULL, 0,
	    "name for logs and metrics; default routes[N]"),
	F_SECTION("match", config_match_section, "what requests the route takes; none: all"),
	F_CUSTOM("upstream", config_parse_route_upstream, "string", NULL, 0,
	    "name of the upstream requests are sent to; required unless backends is given"),
	F_CUSTOM("backends", config_parse_backends, "mapping", NULL, 0,
	    "map of output key -> backend: an aggregated route, whose backends are requested "
	    "concurrently and their answers merged into one JSON body"),
	F_CUSTOM("jsonrpc", config_parse_route_jsonrpc, "mapping", NULL, 0,
	    "a JSON-RPC 2.0 route: POSTed calls routed by method to upstreams, batches split "
	    "by upstream and answered in the order of the request"),
	F_ENUM("merge", struct config_route, merge, "keyed", config_merges,
	    "how backend answers are merged: keyed (each under its key) or flat (the members "
	    "of object answers side by side, a later backend's key winning)"),
	F_DURATION("timeout", struct config_route, timeout, "0", 0,
	    "aggregated or JSON-RPC route: time allowed for all its upstream requests together; "
	    "0: none"),
	F_STRING("errors_key", struct config_route, errors_key, "errors",
	    "aggregated route: the member of a partial answer that says which backends failed"),
	F_CUSTOM("strip_prefix", config_parse_route_strip, "path", NULL, 0,
	    "prefix removed from the path before forwarding"),
	F_ENUM("on_error", struct config_route, on_error, "pass", config_on_errors,
	    "body that ops cannot handle: pass it untouched or fail with 502"),
	F_ENUM("validate", struct config_route, validate, "envelope", config_validates,
	    "JSON checking: envelope (edited object) or full (strict RFC 8259)"),
	F_ENUM("compress", struct config_route, compress, "off", config_compresses,
	    "re-compress rewritten bodies: off or gzip"),
	F_CUSTOM("json_types", config_parse_json_types, "list",
	    "[application/json, application/*+json]", 0,
	    "media types treated as JSON"),
	F_CUSTOM("request", config_parse_request_ops, "list", NULL, 0, "ops on JSON request bodies"),
	F_CUSTOM("response", config_parse_response_ops, "list", NULL, 0, "ops on JSON response bodies"),
	F_CUSTOM("response_on", config_parse_response_on, "list", "[2xx]", 0,
	    "statuses, classes (2xx) or ranges (200..299) whose answers response takes; others "
	    "pass untouched"),
	F_CUSTOM("error_response", config_parse_error_response_ops, "list", NULL, 0,
	    "ops on JSON response bodies whose status is not in response_on"),
	F_CUSTOM("events", config_parse_events_ops, "list", NULL, 0,
	    "ops on each event of text/event-stream and NDJSON answers"),
	F_SECTION("timeouts", config_route_timeouts_section,
	    "upstream timeouts of the route instead of the global ones"),
	F_SECTION("limits", config_route_limits_section,
	    "limits of the route instead of the global ones"),
	F_CUSTOM("request_headers", config_parse_request_headers, "mapping", NULL, 0,
	    "headers set, added or removed on requests: { set, add, remove }"),
	F_CUSTOM("response_headers", config_parse_response_headers, "mapping", NULL, 0,
	    "headers set, added or removed on upstream answers: { set, add, remove }"),
	F_SECTION("cors", config_route_cors_section,
	    "cross-origin requests from browsers: preflights answered, answers marked"),
	F_CUSTOM("auth", config_parse_route_auth, "string|list", NULL, 0,
	    "the auth policy requests must satisfy, or a list of them (any one admits)"),
	F_CUSTOM("rate_limit", config_parse_route_rate_limit, "mapping", NULL, 0,
	    "requests admitted per key: { key, rate, burst, shared }; the rest get 429"),
};
const struct config_section config_route_section = CONFIG_SECTION_OF(config_route_fields);

static const struct config_field config_backend_fields[] = {
	F_CUSTOM("upstream", config_parse_backend_upstream, "string", NULL, CONFIG_REQUIRED,
	    "name of the upstream the backend request goes to"),
	/* after before path and headers: they may read the answers it names */
	F_CUSTOM("after", config_parse_backend_after, "string|list", NULL, 0,
	    "backends whose answers this one waits for; its path and headers may read them"),
	F_CUSTOM("path", config_parse_backend_path, "template", NULL, CONFIG_REQUIRED,
	    "request-target of the backend request, query allowed, with ${variables}"),
	F_CUSTOM("method", config_parse_backend_method, "string", "GET", 0,
	    "method of the backend request: GET, POST, PUT, PATCH, DELETE or OPTIONS"),
	F_CUSTOM("headers", config_parse_backend_headers, "mapping", NULL, 0,
	    "headers of the backend request: name -> value with ${variables}"),
	F_DURATION("timeout", struct config_backend, timeout, "0", 0,
	    "time allowed for the backend request, tries included; 0: the upstream's timeouts"),
	F_CUSTOM("response", config_parse_backend_ops, "list", NULL, 0,
	    "envelope ops on the backend's answer before the merge"),
	F_ENUM("on_error", struct config_backend, on_error, "fail", config_on_errors,
	    "an answer that is not JSON or its ops cannot take: fail the backend, or pass it "
	    "(not JSON: as a JSON string; else untouched)"),
	F_ENUM("required", struct config_backend, required, "true", config_booleans,
	    "true: its failure fails the route; false: the answer goes out without it, partial"),
	F_CUSTOM("missing", config_parse_backend_missing, "enum", "omit", CONFIG_NULL_VALUE,
	    "an optional backend that failed: its key left out (omit) or set to null"),
};
const struct config_section config_backend_section =
    CONFIG_SECTION_OF(config_backend_fields);

static const struct config_field config_jsonrpc_method_fields[] = {
	F_CUSTOM("match", config_parse_jsonrpc_match, "string", NULL, 0,
	    "the method's name (match or prefix is required)"),
	F_CUSTOM("prefix", config_parse_jsonrpc_prefix, "string", NULL, 0,
	    "the start of the names of the methods it takes"),
	F_CUSTOM("upstream", config_parse_jsonrpc_upstream, "string", NULL, CONFIG_REQUIRED,
	    "name of the upstream the calls go to"),
};
const struct config_section config_jsonrpc_method_section =
    CONFIG_SECTION_OF(config_jsonrpc_method_fields);

static const struct config_field config_jsonrpc_fields[] = {
	F_CUSTOM("methods", config_parse_jsonrpc_methods, "list", NULL, 0,
	    "list of { match: NAME | prefix: P, upstream: U }; the first that takes a call's "
	    "method routes it"),
	F_CUSTOM("default", config_parse_jsonrpc_default, "string", "none", 0,
	    "upstream of the methods no entry takes, or none: they are answered -32601"),
	F_ENUM("split", struct config_jsonrpc, split, "batch", config_splits,
	    "how a batch goes upstream: batch (one batch per upstream) or single (one request "
	    "per call)"),
	F_UINT("max_batch", struct config_jsonrpc, max_batch, "1000", 1, 1000000,
	    "most elements of a batch; a larger one is answered -32600"),
	F_UINT("parallel", struct config_jsonrpc, parallel, "16", 1, 1024,
	    "upstream requests of one client request in flight at once"),
	F_CUSTOM("allow", config_parse_jsonrpc_allow, "list", NULL, 0,
	    "the only methods that may be called: NAME or { prefix: P }; default all"),
	F_CUSTOM("deny", config_parse_jsonrpc_deny, "list", NULL, 0,
	    "methods that may not be called, over allow: NAME or { prefix: P }"),
};
const struct config_section config_jsonrpc_section =
    CONFIG_SECTION_OF(config_jsonrpc_fields);

/* allow and deny items written as { prefix: P } */
static const struct config_field config_jsonrpc_name_fields[] = {
	F_CUSTOM("prefix", config_parse_jsonrpc_name_prefix, "string", NULL, CONFIG_REQUIRED,
	    "the start of the method names"),
};
const struct config_section config_jsonrpc_name_section =
    CONFIG_SECTION_OF(config_jsonrpc_name_fields);

static const struct config_field config_top_fields[] = {
	F_CUSTOM("workers", config_parse_workers, "integer|auto", "auto", 0,
	    "event-loop threads; auto = number of CPUs"),
	F_CUSTOM("user", config_parse_user, "string", NULL, 0, "user to switch to after binding"),
	F_CUSTOM("pid_file", config_parse_pid_file, "file", NULL, 0,
	    "file the process id is written to once the listeners are bound; removed at exit"),
	F_SECTION("log", config_log_section, "logging"),
	F_SECTION("admin", config_admin_section, "admin endpoint; none when absent"),
	F_SECTION("limits", config_limits_section, "size and count limits"),
	F_SECTION("timeouts", config_timeouts_section, "timeouts"),
	F_SECTION("http2", config_http2_section, "HTTP/2 connections from clients"),
	F_ADDR_PTR("resolver", struct config, resolver,
	    "nameserver for server names, IPv4:PORT or [IPv6]:PORT; default /etc/resolv.conf's"),
	F_CUSTOM("listeners", config_parse_listeners, "list", NULL, CONFIG_REQUIRED,
	    "list of { listen: ADDRESS }"),
	F_CUSTOM("trusted_proxies", config_parse_trusted_proxies, "list", NULL, 0,
	    "peers (ADDRESS or ADDRESS/BITS) whose X-Forwarded-For gives $client_addr"),
	/* auth and rate_limits before routes: routes refer to them */
	F_CUSTOM("auth", config_parse_auth, "mapping", NULL, 0,
	    "map of name -> authentication policy: { jwt: {...} } or { keys: {...} }"),
	F_SECTION("rate_limits", config_rate_limits_section, "what rate limits share"),
	/* upstreams before routes: routes refer to them by name */
	F_CUSTOM("upstreams", config_parse_upstreams, "mapping", NULL, 0, "map of name -> upstream"),
	F_CUSTOM("routes", config_parse_routes, "list", NULL, 0, "list of routes; the first match wins"),
};
const struct config_section config_top_section = CONFIG_SECTION_OF(config_top_fields);

_Static_assert(CONFIG_NFIELDS(config_route_fields) <= CONFIG_MAX_FIELDS &&
    CONFIG_NFIELDS(config_top_fields) <= CONFIG_MAX_FIELDS, "raise CONFIG_MAX_FIELDS");

/* ------------------------------------------------------------------ schema listing */

static void
config_schema_write_section(FILE *fp, const char *prefix, const struct config_section *sec)
{
	static const char *const types[] = {
		[CONFIG_UINT] = "integer", [CONFIG_SIZE] = "size", [CONFIG_DURATION] = "duration",
		[CONFIG_STRING] = "string", [CONFIG_ENUM] = "enum", [CONFIG_ADDR] = "address",
		[CONFIG_ADDR_PTR] = "address", [CONFIG_SECTION] = "mapping",
		[CONFIG_CUSTOM] = "value",
	};
	const struct config_field *f;
	char path[128];
	size_t i;

	for (i = 0; i < sec->nfields; i++) {
		f = &sec->fields[i];
		snprintf(path, sizeof(path), "%s%s", prefix, f->key);
		fprintf(fp, "%s\t%s\t%s\t%s\n", path, f->tname ? f->tname : types[f->type],
		    f->flags & CONFIG_REQUIRED ? "(required)" : f->def ? f->def : "-", f->doc);
		snprintf(path, sizeof(path), "%s%s.", prefix, f->key);
		if (f->type == CONFIG_SECTION)
			config_schema_write_section(fp, path, f->section);
		else if (strcmp(path, "listeners.") == 0)
			config_schema_write_section(fp, "listeners[].", &config_listener_section);
		else if (strcmp(path, "listeners[].tls.") == 0)
			config_schema_write_section(fp, path, &config_listener_tls_section);
		else if (strcmp(path, "listeners[].tls.certificates.") == 0)
			config_schema_write_section(fp, "listeners[].tls.certificates[].",
			    &config_tls_cert_section);
		else if (strcmp(path, "upstreams.NAME.tls.") == 0)
			config_schema_write_section(fp, path, &config_upstream_tls_section);
		else if (strcmp(path, "upstreams.NAME.health.") == 0)
			config_schema_write_section(fp, path, &config_health_section);
		else if (strcmp(path, "upstreams.") == 0)
			config_schema_write_section(fp, "upstreams.NAME.", &config_upstream_section);
		else if (strcmp(path, "upstreams.NAME.servers.") == 0)
			config_schema_write_section(fp, "upstreams.NAME.servers[].",
			    &config_server_section);
		else if (strcmp(path, "routes.") == 0)
			config_schema_write_section(fp, "routes[].", &config_route_section);
		else if (strcmp(path, "routes[].request_headers.") == 0 ||
		    strcmp(path, "routes[].response_headers.") == 0)
			config_schema_write_section(fp, path, &config_header_ops_section);
		else if (strcmp(path, "routes[].backends.") == 0)
			config_schema_write_section(fp, "routes[].backends.NAME.",
			    &config_backend_section);
		else if (strcmp(path, "auth.") == 0)
			config_schema_write_section(fp, "auth.NAME.", &config_auth_policy_section);
		else if (strcmp(path, "auth.NAME.jwt.") == 0)
			config_schema_write_section(fp, path, &config_auth_jwt_section);
		else if (strcmp(path, "auth.NAME.keys.") == 0)
			config_schema_write_section(fp, path, &config_auth_keys_section);
		else if (strcmp(path, "routes[].rate_limit.") == 0)
			config_schema_write_section(fp, path, &config_route_rate_limit_section);
		else if (strcmp(path, "routes[].jsonrpc.") == 0)
			config_schema_write_section(fp, path, &config_jsonrpc_section);
		else if (strcmp(path, "routes[].jsonrpc.methods.") == 0)
			config_schema_write_section(fp, "routes[].jsonrpc.methods[].",
			    &config_jsonrpc_method_section);
	}
}

void
config_schema_write(FILE *fp)
{
	config_schema_write_section(fp, "", &config_top_section);
}
