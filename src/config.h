/* Configuration: YAML file -> struct config, with every error reported as FILE:LINE:COL. */
#ifndef JG_CONFIG_H
#define JG_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <yaml.h>

#include "cors.h"
#include "http_method.h"
#include "log.h"
#include "resolver.h"
#include "rewrite.h"
#include "template.h"

struct rewrite_program;                 /* rewrite.h: a compiled list of envelope ops */
struct header_ops;                      /* header_ops.h: a route's header ops */
struct jcond;                           /* jcond.h: a compiled condition on JSON fields */
struct route_pattern;                   /* route.h: a path template */
struct tls_server;                      /* tls.h: a listener's TLS contexts */
struct tls_client;                      /* tls.h: an upstream's TLS context */
struct auth_policy;                     /* auth.h: a named authentication policy */
struct auth_counter;                    /* auth.h */
struct route_rate_limit;                /* auth.h */

enum access_format { ACCESS_JSON, ACCESS_COMBINED };
enum balance { BALANCE_ROUND_ROBIN, BALANCE_LEAST_CONN, BALANCE_HASH };
enum on_error { ON_ERROR_PASS, ON_ERROR_FAIL };
enum compress_mode { COMPRESS_OFF, COMPRESS_GZIP };
enum verify_client { VERIFY_CLIENT_OFF, VERIFY_CLIENT_ON, VERIFY_CLIENT_OPTIONAL };
enum merge_mode { MERGE_KEYED, MERGE_FLAT };
enum missing_mode { MISSING_OMIT, MISSING_NULL };

/* Most request body fields ($json.PATH) in an access log line. */
#define CONFIG_MAX_JSON_FIELDS 16
/* Most path template captures ($path.NAME) in an access log line. */
#define CONFIG_MAX_PATH_FIELDS 16
/* Most backends of one aggregated route (limits.max_backends is at most this). */
#define CONFIG_MAX_BACKENDS 256
/* Most tries of one request (the first included), and the most failures counted. */
#define CONFIG_MAX_TRIES 16
#define CONFIG_MAX_FAILS 1000
/* A per-server setting left out (it takes the upstream's). */
#define CONFIG_UNSET UINT32_MAX

/* A set of HTTP status codes 100..599: bit (code - 100). */
#define CONFIG_STATUS_WORDS 8

static inline int
config_status_in(const uint64_t *set, int status)
{
	return status >= 100 && status <= 599 &&
	    (set[(status - 100) / 64] & (1ULL << ((status - 100) % 64))) != 0;
}

/*
 * A status text of a status set: one status ("200"), a class ("2xx", "2XX") or a range
 * ("200..299"), all within 100..599: the statuses *first to *last.  0; -1 when text is none
 * of those; -2 for a range that runs backwards.
 */
int config_status_range(const char *text, unsigned *first, unsigned *last);
/* What a status set takes, for messages. */
#define CONFIG_STATUS_FORMS "a status from 100 to 599, a class like 2xx or a range like 200..299"

/* Where log.error: syslog sends its lines. */
#define CONFIG_SYSLOG_SOCKET "/dev/log"

/* TLS protocol versions, as bits. */
#define CONFIG_TLS_V1_2 0x1
#define CONFIG_TLS_V1_3 0x2

/* A resolved socket address plus the text the user wrote (for logs and errors). */
struct config_addr {
	char *text;                     /* "127.0.0.1:9001", "[::1]:8080" */
	char *host;                     /* "127.0.0.1", "::1" (no brackets) */
	uint16_t port;
	struct sockaddr_storage ss;
	socklen_t sslen;
	char *name;                     /* the host name it was resolved from (TLS verifies and
	                                 * sends it), lowercase; NULL: written as a number */
};

struct upstream_server_state;          /* upstream_state.h: shared by workers, kept on reload */
struct upstream_set;                    /* upstream_set.h: one version of an upstream's servers */
struct upstream_group_state;
struct route_kind;

struct config_server {
	struct config_addr addr;
	unsigned weight;                /* >= 1, default 1 */
	int backup;                     /* 1: takes requests only while no primary can */
	unsigned max_fails;             /* the upstream's unless given */
	unsigned max_connections;       /* requests in flight at once, 0: no limit; the
	                                 * upstream's unless given */
	unsigned metrics_id;            /* its series in metrics.c, set by metrics_bind */
	struct upstream_server_state *state;    /* set by upstream_state_bind */
};

/* File names here are as resolved at load: relative ones against the configuration's
 * directory. */
struct config_tls_cert {
	char *cert;                     /* PEM: the certificate, then its chain */
	char *key;                      /* PEM private key */
};

struct config_listener_tls {
	struct config_tls_cert *certs;  /* chosen by SNI; the first is the default */
	size_t ncerts;
	unsigned protocols;             /* CONFIG_TLS_* bits; default 1.2 and 1.3 */
	char *ciphers;                  /* TLS 1.2 cipher list; NULL: OpenSSL's default */
	char *client_ca;                /* PEM CAs client certificates are checked against */
	enum verify_client verify_client;   /* default off */
	int session_tickets;            /* 1 (default): resumption by tickets; 0: none */
	int prefer_server_ciphers;      /* 1: the server's order picks the cipher; 0 (default):
	                                 * the client's */
	int http2;                      /* ALPN offers h2 before http/1.1 */
	struct tls_server *ctx;         /* built at load, so that certificate errors show */
};

struct config_upstream_tls {
	int verify;                     /* 1 (default): check the certificate and the name */
	char *ca;                       /* NULL: the system store */
	char *server_name;              /* SNI and verified name; NULL: the server's host */
	char *cert;                     /* client certificate and key for mutual TLS, or NULL */
	char *key;
	struct tls_client *ctx;         /* built at load */
};

/* What makes a try fail: for passive health (fail_on) and for retries (retry_on). */
enum config_failure {
	FAIL_CONNECT = 1 << 0,          /* refused, unreachable, connect timeout, TLS handshake */
	FAIL_TIMEOUT = 1 << 1,          /* no (complete) answer within the response timeouts */
	FAIL_RESET = 1 << 2,            /* reset or closed before the answer was complete */
	FAIL_INVALID = 1 << 3,          /* a malformed answer */
	FAIL_429 = 1 << 4,
	FAIL_500 = 1 << 5,
	FAIL_502 = 1 << 6,
	FAIL_503 = 1 << 7,
	FAIL_504 = 1 << 8,
	FAIL_5XX = FAIL_500 | FAIL_502 | FAIL_503 | FAIL_504
};

/* Active health checks of an upstream's servers. */
struct config_health {
	char *path;                     /* GET path */
	char *host;                     /* Host header; NULL: the server's host */
	uint64_t interval;              /* ms between checks of one server, default 5s */
	uint64_t timeout;               /* ms for one check, default 2s */
	unsigned fails;                 /* failed checks in a row that take a server out (3) */
	unsigned passes;                /* passed checks in a row that bring it back (2) */
	uint64_t status[CONFIG_STATUS_WORDS];   /* accepted statuses (config_status_in) */
	struct jcond *json;             /* expect.json: a condition on the answer, or NULL */
};

/*
 * A servers: entry given by host name ("api.internal:8080").  At load it becomes one server
 * per address of the name, in address order, each with the entry's settings; at run time the
 * name is watched (resolver.h) and config_servers_from_name makes the new servers.
 */
struct config_server_name {
	char *host;                     /* lowercase, as looked up */
	uint16_t port;
	size_t entry;                   /* its position in the servers: list as written */
	struct config_server settings;  /* the entry's settings; addr unset */
	struct resolver_answer answer;  /* what the name resolved to at load, with its TTL */
	size_t first;                   /* its servers at load: servers[first..first+count) */
	size_t count;
};

struct config_upstream {
	char *name;
	struct config_server *servers;
	size_t nservers;
	struct config_server_name *names;   /* the entries of servers: given by host name */
	size_t nnames;
	uint64_t resolve_interval;      /* ms between lookups of those names; default 30s */
	enum balance balance;           /* default round_robin */
	char *hash_key;                 /* balance hash: a request variable, e.g. $remote_addr or
	                                 * $json.user_id */
	unsigned keepalive;             /* idle pooled connections kept per worker, default 32 */
	char *host_header;              /* NULL: pass the client's Host through */
	struct config_upstream_tls *tls;    /* NULL: plain TCP */
	unsigned max_fails;             /* failures in a row that eject a server, 0: never (1) */
	uint64_t fail_timeout;          /* ms: window of those failures and the base ejection
	                                 * time (10s) */
	unsigned fail_on;               /* FAIL_* bits that count as failures */
	unsigned max_ejected_percent;   /* share of servers that may be ejected at once (50) */
	unsigned retries;               /* extra tries after a failed one (1) */
	unsigned retry_on;              /* FAIL_* bits a request is tried again for */
	unsigned retry_budget;          /* retries in flight: at most this % of requests (20) */
	unsigned retry_budget_min;      /* ... but always this many (3) */
	size_t retry_body;              /* largest request body kept for another try (64k) */
	unsigned max_connections;       /* per server requests in flight, 0: no limit */
	unsigned max_pending;           /* requests waiting for a server under max_connections */
	struct config_health *health;   /* NULL: no active checks */
	struct upstream_group_state *state;    /* set by upstream_state_bind */
	struct upstream_set *initial;   /* its servers as loaded: what workers start from */
	struct upstream_set *current;   /* main thread: the newest version (names resolved
	                                 * again), which workers are given */
};

struct config_listener {
	struct config_addr addr;
	int http2;                      /* 1: HTTP/2 too (ALPN h2, or h2c by its preface);
	                                 * default: with TLS */
	struct config_listener_tls *tls;    /* NULL: plain TCP */
};

/* A header a backend request carries, its value a template. */
struct config_backend_header {
	char *name;
	struct template value;
};

/* One backend of an aggregated route: a request of its own, whose answer goes into the
 * merged body under its name. */
struct config_backend {
	char *name;                     /* the key of its answer in the merged body */
	char *key_json;                 /* the name as a JSON string and a colon: "name": */
	size_t key_json_len;
	struct config_upstream *upstream;
	size_t *after;                  /* the backends whose answers it waits for (indexes) */
	size_t nafter;
	char *path;                     /* the request-target as written ... */
	struct template target;         /* ... and compiled */
	char *method;                   /* default GET */
	unsigned method_bit;
	struct config_backend_header *headers;
	size_t nheaders;
	uint64_t timeout;               /* ms for the whole backend request, 0: the upstream's */
	struct rewrite_program *response;   /* ops on its answer, or NULL */
	enum on_error on_error;         /* an answer that is not JSON or that its ops cannot
	                                 * take: fail (default), or pass (as a JSON string, or
	                                 * untouched) */
	int required;                   /* 1 (default): its failure fails the route */
	enum missing_mode missing;      /* an optional one that failed: its key left out
	                                 * (default) or null */
	unsigned metrics_id;            /* its series in metrics.c, set by metrics_bind */
};

/* A method name or prefix of a JSON-RPC route (methods, allow, deny). */
struct config_jsonrpc_name {
	char *text;
	size_t len;
	int prefix;                     /* 1: names that begin with text */
};

/* A methods: entry of a JSON-RPC route. */
struct config_jsonrpc_method {
	struct config_jsonrpc_name name;
	struct config_upstream *upstream;
	unsigned label;                 /* its method label in metrics: an index of labels[] (an
	                                 * exact name), or nlabels ("other") */
};

enum jsonrpc_split_mode { JSONRPC_SPLIT_BATCH, JSONRPC_SPLIT_SINGLE };

/* jsonrpc: a route taking JSON-RPC 2.0 calls, routed by method. */
struct config_jsonrpc {
	struct config_jsonrpc_method *methods;  /* the first that matches a call's method wins */
	size_t nmethods;
	struct config_upstream *default_upstream;   /* the others; NULL: none (-32601) */
	enum jsonrpc_split_mode split;  /* default batch */
	unsigned max_batch;             /* most calls in one batch (1000) */
	unsigned parallel;              /* upstream requests of one client request at once (16) */
	struct config_jsonrpc_name *allow;  /* NULL: every method may be called */
	size_t nallow;
	struct config_jsonrpc_name *deny;
	size_t ndeny;
	char **labels;                  /* the exact names of methods, each once: their metrics
	                                 * series; every other method counts as "other" */
	size_t nlabels;
	unsigned *metrics_ids;          /* nlabels + 1 series ids, "other" last; metrics_bind */
};

struct config_route {
	char *name;                     /* never NULL: unnamed routes are called "routes[N]" */
	char *host;                     /* NULL: any host; lowercase, compared case-insensitively,
	                                 * the request's :port ignored */
	char *path;                     /* exact path match or path template, or NULL */
	struct route_pattern *pattern;  /* path as a template ({NAME} captures), or NULL */
	char *path_prefix;              /* plain string prefix match (as nginx's location prefix:
	                                 * "/api" matches "/api", "/api/x" and "/apix"), or NULL;
	                                 * neither set: matches every path */
	unsigned methods;               /* METHOD_* bits; METHOD_ANY when not given; GET implies HEAD */
	struct jcond **json_match;      /* match.json: conditions on the request body that must
	                                 * all hold (route_scan.h), or NULL */
	size_t njson_match;
	struct config_upstream *upstream;   /* NULL for a route with backends or jsonrpc */
	struct config_jsonrpc *jsonrpc;     /* a JSON-RPC route, or NULL */
	struct config_backend *backends;    /* an aggregated route: its backends, in output
	                                     * order; NULL otherwise */
	size_t nbackends;
	enum merge_mode merge;          /* default keyed */
	uint64_t timeout;               /* ms for all the backends (or JSON-RPC upstream requests)
	                                 * together, 0: none */
	char *errors_key;               /* the member of a partial answer that says what failed */
	char *errors_key_json;          /* as a JSON string and a colon */
	size_t errors_key_json_len;
	char *strip_prefix;             /* NULL or a prefix removed from the path before forwarding */
	enum on_error on_error;         /* default pass */
	enum validate_mode validate;    /* default envelope */
	enum compress_mode compress;    /* default off */
	char **json_types;              /* media types treated as JSON, lowercase, without parameters;
	                                 * "*" may stand for a type or subtype, and "*+json" for any
	                                 * subtype ending in +json.  NULL-terminated, never NULL;
	                                 * default: application/json and application/ *+json
	                                 * (without the space) */
	struct rewrite_program *request;   /* NULL when no request ops */
	struct rewrite_program *response;  /* NULL when no response ops */
	uint64_t response_on[CONFIG_STATUS_WORDS];  /* statuses `response` takes (2xx) */
	struct rewrite_program *error_response;  /* ops for the other statuses, or NULL */
	struct rewrite_program *events;    /* ops per event of SSE and NDJSON answers, or NULL */
	struct header_ops *request_headers;     /* NULL when none */
	struct header_ops *response_headers;    /* NULL when none */
	struct route_timeouts {         /* ms; the global timeouts unless the route sets them */
		uint64_t upstream_connect;
		uint64_t upstream_response;
		uint64_t upstream_try;      /* 0: none */
	} timeouts;
	struct route_limits {           /* the global limits unless the route sets them */
		size_t max_request_body;    /* 0: none */
	} limits;
	struct cors_policy cors;        /* origins NULL: no CORS */
	const struct auth_policy **auth;    /* any one admits; NULL: none */
	struct auth_counter **auth_counters;    /* one per policy of auth */
	size_t nauth;
	struct route_rate_limit *rate_limit;    /* NULL: none */
	struct auth_counter *rate_counter;
	unsigned metrics_id;            /* its series in metrics.c, set by metrics_bind */
	/* What a request on it runs, decided once when it is loaded (route_plan, route.h) rather
	 * than for every request. */
	struct route_plan {
		const struct route_kind *kind;  /* its kind; NULL: not decided */
		unsigned phases;                /* bit i: the i'th request phase applies */
	} plan;
};

struct config {
	char *path;                     /* file it was loaded from */
	unsigned workers;               /* resolved: "auto" becomes the CPU count */
	char *user;                     /* NULL: do not drop privileges */
	yaml_mark_t user_mark;
	char *pid_file;                 /* NULL: none */
	yaml_mark_t pid_file_mark;

	enum log_level log_level;       /* default info */
	char *error_log;                /* "stderr", "syslog", "syslog:SOCKET" or a file; NULL:
	                                 * stderr with -f, syslog without (stderr when syslog
	                                 * cannot be reached) */
	yaml_mark_t error_log_mark;
	char *access_log;               /* file, "stderr", or NULL for off; default stderr */
	yaml_mark_t access_log_mark;    /* where the file is named, for config_check_files */
	enum access_format access_format;   /* default json */
	char **json_fields;             /* log.json_fields: dotted paths of request body fields
	                                 * in access log lines, or NULL */
	size_t njson_fields;
	char **path_fields;             /* log.path_fields: names of path template captures in
	                                 * access log lines, or NULL */
	size_t npath_fields;
	char **jwt_fields;              /* log.jwt_fields: claims (dotted paths) of the verified
	                                 * token in access log lines, or NULL */
	size_t njwt_fields;

	struct config_addr *admin_listen;   /* NULL when no admin listener */
	struct config_addr *resolver;   /* nameserver for server names; NULL: /etc/resolv.conf */

	struct {
		size_t max_header;      /* default 16k */
		size_t max_body;        /* default 8m */
		unsigned max_connections;   /* default 10000 */
		unsigned max_depth;     /* default 1000 */
		unsigned max_members;   /* default 100000 */
		size_t route_scan;      /* default 64k: body bytes read to route by a field */
		size_t max_request_body;    /* default 0: no limit; any request body, streamed
		                             * or not: over it 413 */
		unsigned max_backends;  /* default 16 */
		size_t max_event;       /* default 1m: largest SSE event or NDJSON line the
		                         * events: ops take */
	} limits;

	struct {                        /* all in milliseconds */
		uint64_t client_header;     /* 10s */
		uint64_t client_body;       /* 30s */
		uint64_t keepalive;         /* 60s */
		uint64_t upstream_connect;  /* 2s */
		uint64_t upstream_response; /* 30s */
		uint64_t upstream_try;      /* 0 (off): one try's limit until the answer's head */
		uint64_t queue;             /* 5s: longest wait for a server under max_connections */
		uint64_t shutdown_grace;    /* 30s */
		uint64_t tunnel;            /* 1h: a tunnel idle both ways is closed */
	} timeouts;

	struct config_http2 {           /* HTTP/2 connections from clients */
		unsigned max_concurrent_streams;    /* 100 */
		size_t stream_window;       /* 256k: request body bytes a stream may send ahead */
		size_t connection_window;   /* 1m: the same, all streams of a connection */
	} http2;

	struct config_listener *listeners;
	size_t nlisteners;
	struct config_upstream *upstreams;
	size_t nupstreams;
	struct config_route *routes;    /* in file order: the first match wins */
	size_t nroutes;

	struct auth_policy *auth;       /* auth: named policies */
	size_t nauth;
	struct {
		char *redis;            /* address of the Redis server of shared limits, or NULL */
		uint64_t redis_timeout; /* ms a decision waits */
		int redis_on_error;     /* 0: allow, 1: deny */
	} rate_limits;
	struct config_cidr *trusted_proxies;    /* peers whose X-Forwarded-For is believed */
	size_t ntrusted_proxies;
};

/* An address block of trusted_proxies. */
struct config_cidr {
	int family;                     /* AF_INET or AF_INET6 */
	unsigned char addr[16];
	unsigned bits;
};

/*
 * Load and validate a configuration file.  On success returns the config and sets *errors to
 * NULL.  On failure returns NULL and sets *errors to a malloc'd string of one or more lines,
 * each "FILE:LINE:COL: message\n" (all errors found, in file order); the caller frees it.
 */
struct config *config_load(const char *path, char **errors);
void config_free(struct config *cfg);
/*
 * Check what a start needs outside the file: the user exists, the files the configuration
 * writes can be written (as the user where it writes them as the user), the syslog socket of
 * log.error exists.  0, or -1 and *errors as config_load sets them.  Separate from loading:
 * it creates the log files it opens.
 */
int config_check_files(const struct config *cfg, char **errors);

/* Parse "1.5k"-style sizes and "250ms"/"10s"/"2m" durations; 0 on success, -1 on bad input. */
int config_parse_size(const char *text, size_t *out);
int config_parse_duration(const char *text, uint64_t *out_ms);
/* Parse "host:port", "[v6]:port" into addr (numeric hosts only); 0 on success, -1 on error. */
int config_parse_addr(const char *text, struct config_addr *out);
void config_addr_free(struct config_addr *addr);

/*
 * The servers a named entry stands for when its name resolves to ans: one per address, in
 * the answer's order, each a copy of the entry's settings with the address, the port and
 * addr.name set.  Returns how many (ans->naddrs); *out is malloc'd, freed with
 * config_servers_free.
 */
size_t config_servers_from_name(const struct config_server_name *entry,
    const struct resolver_answer *ans, struct config_server **out);
void config_servers_free(struct config_server *servers, size_t n);

/* Method name -> METHOD_* bit (METHOD_OTHER for unknown tokens): http_method_bit. */
unsigned config_method_bit(const char *name, size_t len);

/*
 * Error reporting shared with the parsers of other modules (the envelope ops of rewrite).
 * A parse context collects errors; config_error records one at the node's position as
 * "FILE:LINE:COL: KEYPATH: message", KEYPATH being the key being parsed ("routes[1].response";
 * omitted when empty, as in a standalone context).  A NULL node gives "FILE: message".
 */
struct config_parse;
void config_error(struct config_parse *ctx, const yaml_node_t *node, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The key path being parsed, "" at the top level. */
const char *config_where(const struct config_parse *ctx);
/* The path template of the route being parsed (its $path.NAME variables), or NULL. */
const struct route_pattern *config_parse_pattern(const struct config_parse *ctx);

/* A standalone context, for testing other modules' parsers alone. */
struct config_parse *config_parse_new(const char *file);
size_t config_parse_nerrors(const struct config_parse *ctx);
/* All errors so far as config_load reports them (sorted by position), or NULL; caller frees. */
char *config_parse_errors(struct config_parse *ctx);
void config_parse_free(struct config_parse *ctx);

/* One line per key: "path<TAB>type<TAB>default<TAB>doc" (for the man page check). */
void config_schema_write(FILE *fp);

#endif
