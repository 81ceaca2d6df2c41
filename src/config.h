/* Configuration: YAML file -> struct config, with every error reported as FILE:LINE:COL. */
#ifndef JG_CONFIG_H
#define JG_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <yaml.h>

struct rewrite_program;                 /* rewrite.h: a compiled list of envelope ops */
struct tls_server;                      /* tls.h: a listener's TLS contexts */
struct tls_client;                      /* tls.h: an upstream's TLS context */

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
enum access_format { ACCESS_JSON, ACCESS_COMBINED };
enum balance { BALANCE_ROUND_ROBIN, BALANCE_LEAST_CONN, BALANCE_HASH };
enum on_error { ON_ERROR_PASS, ON_ERROR_FAIL };
enum validate_mode { VALIDATE_ENVELOPE, VALIDATE_FULL };
enum compress_mode { COMPRESS_OFF, COMPRESS_GZIP };
enum verify_client { VERIFY_CLIENT_OFF, VERIFY_CLIENT_ON, VERIFY_CLIENT_OPTIONAL };

/* TLS protocol versions, as bits. */
#define CONFIG_TLS_V1_2 0x1
#define CONFIG_TLS_V1_3 0x2

/* Bit per method, for route matching without string compares. */
enum http_method_bit {
	METHOD_GET = 1 << 0, METHOD_HEAD = 1 << 1, METHOD_POST = 1 << 2, METHOD_PUT = 1 << 3,
	METHOD_DELETE = 1 << 4, METHOD_OPTIONS = 1 << 5, METHOD_PATCH = 1 << 6,
	METHOD_TRACE = 1 << 7, METHOD_CONNECT = 1 << 8, METHOD_OTHER = 1 << 9,
	METHOD_ANY = (1 << 10) - 1
};

/* A resolved socket address plus the text the user wrote (for logs and errors). */
struct config_addr {
	char *text;                     /* "127.0.0.1:9001", "[::1]:8080" */
	char *host;                     /* "127.0.0.1", "::1" (no brackets) */
	uint16_t port;
	struct sockaddr_storage ss;
	socklen_t sslen;
};

struct config_server {
	struct config_addr addr;
	unsigned weight;                /* >= 1, default 1 */
	unsigned metrics_id;            /* its series in metrics.c, set by metrics_bind */
};

/* File paths below are as resolved at load: relative ones against the configuration's
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

struct config_upstream {
	char *name;
	struct config_server *servers;
	size_t nservers;
	enum balance balance;           /* default round_robin */
	unsigned keepalive;             /* idle pooled connections kept per worker, default 32 */
	char *host_header;              /* NULL: pass the client's Host through */
	struct config_upstream_tls *tls;    /* NULL: plain TCP */
};

struct config_listener {
	struct config_addr addr;
	struct config_listener_tls *tls;    /* NULL: plain TCP */
};

struct config_route {
	char *name;                     /* never NULL: unnamed routes are called "routes[N]" */
	char *host;                     /* NULL: any host; lowercase, compared case-insensitively,
	                                 * the request's :port ignored */
	char *path;                     /* exact path match, or NULL */
	char *path_prefix;              /* plain string prefix match (as nginx's location prefix:
	                                 * "/api" matches "/api", "/api/x" and "/apix"), or NULL;
	                                 * neither set: matches every path */
	unsigned methods;               /* METHOD_* bits; METHOD_ANY when not given; GET implies HEAD */
	struct config_upstream *upstream;
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
	unsigned metrics_id;            /* its series in metrics.c, set by metrics_bind */
};

struct config {
	char *path;                     /* file it was loaded from */
	unsigned workers;               /* resolved: "auto" becomes the CPU count */
	char *user;                     /* NULL: do not drop privileges */

	enum log_level log_level;       /* default info */
	char *access_log;               /* path, "stderr", or NULL for off; default stderr */
	enum access_format access_format;   /* default json */

	struct config_addr *admin_listen;   /* NULL when no admin listener */

	struct {
		size_t max_header;      /* default 16k */
		size_t max_body;        /* default 8m */
		unsigned max_connections;   /* default 10000 */
		unsigned max_depth;     /* default 1000 */
	} limits;

	struct {                        /* all in milliseconds */
		uint64_t client_header;     /* 10s */
		uint64_t client_body;       /* 30s */
		uint64_t keepalive;         /* 60s */
		uint64_t upstream_connect;  /* 2s */
		uint64_t upstream_response; /* 30s */
		uint64_t shutdown_grace;    /* 30s */
	} timeouts;

	struct config_listener *listeners;
	size_t nlisteners;
	struct config_upstream *upstreams;
	size_t nupstreams;
	struct config_route *routes;    /* in file order: the first match wins */
	size_t nroutes;
};

/*
 * Load and validate a configuration file.  On success returns the config and sets *errors to
 * NULL.  On failure returns NULL and sets *errors to a malloc'd string of one or more lines,
 * each "FILE:LINE:COL: message\n" (all errors found, in file order); the caller frees it.
 */
struct config *config_load(const char *path, char **errors);
void config_free(struct config *cfg);

/* Parse "1.5k"-style sizes and "250ms"/"10s"/"2m" durations; 0 on success, -1 on bad input. */
int config_parse_size(const char *text, size_t *out);
int config_parse_duration(const char *text, uint64_t *out_ms);
/* Parse "host:port", "[v6]:port" into addr (numeric hosts only); 0 on success, -1 on error. */
int config_parse_addr(const char *text, struct config_addr *out);
void config_addr_free(struct config_addr *addr);

/* Method name -> METHOD_* bit (METHOD_OTHER for unknown tokens). */
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

/* A standalone context, for testing other modules' parsers alone. */
struct config_parse *config_parse_new(const char *file);
size_t config_parse_nerrors(const struct config_parse *ctx);
/* All errors so far as config_load reports them (sorted by position), or NULL; caller frees. */
char *config_parse_errors(struct config_parse *ctx);
void config_parse_free(struct config_parse *ctx);

/* One line per key: "path<TAB>type<TAB>default<TAB>doc" (for the man page check). */
void config_schema_write(FILE *fp);

#endif
