/*
 * What the pieces of the configuration loader (config*.c) share: the parse context, the
 * schema's types and tables, YAML helpers and the parsers of custom fields.  Private to them.
 */
#ifndef JG_CONFIG_PARSE_H
#define JG_CONFIG_PARSE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config.h"

#define CONFIG_MAX_WORKERS      1024
#define CONFIG_MAX_WEIGHT       1000
#define CONFIG_WHERE_MAX        256

/* One collected error; sorted by position before being reported. */
struct config_err {
	size_t line, col;               /* 1-based; 0 when the error has no position */
	size_t seq;                     /* keeps errors at the same position in report order */
	char *text;                     /* "FILE:LINE:COL: message" without newline */
};

struct config_parse {
	const char *file;
	yaml_document_t *doc;
	struct config *cfg;
	struct config_err *errs;
	size_t nerrs, errcap;
	char where[CONFIG_WHERE_MAX];   /* key path being parsed: "routes[1].match" */
	size_t wherelen;
	const yaml_node_t *key;         /* key node of the value being parsed, for positions */
	struct config_pending_name *pending;    /* server names to resolve after the parse */
	size_t npending, pendingcap;
	struct config_route *route;     /* the aggregated route whose backends are parsed */
	const struct config_route *current; /* the route being parsed */
};

/* A server written as HOST:PORT with a host name, waiting for the lookups after the parse. */
struct config_pending_name {
	struct config_server *srv;      /* its place in the upstream's servers, addr.name set */
	const yaml_node_t *node;        /* where the name is written */
	char *where;                    /* and the key path there */
};

/* ---- the schema: one table per mapping, in config_schema.c ---- */

enum config_type {
	CONFIG_UINT,            /* unsigned within [min, max] */
	CONFIG_SIZE,            /* size_t: 512, 16k, 8m, 1g */
	CONFIG_DURATION,        /* uint64_t milliseconds: 250ms, 10s, 2m, 1h */
	CONFIG_STRING,          /* char *, not empty */
	CONFIG_ENUM,            /* enum stored as int; choices[i] is the name of value i */
	CONFIG_ADDR,            /* struct config_addr, embedded */
	CONFIG_ADDR_PTR,        /* struct config_addr *, allocated when given */
	CONFIG_SECTION,         /* nested mapping whose fields live in the same struct */
	CONFIG_CUSTOM,          /* fn parses the value node (NULL: apply the default) */
};

#define CONFIG_REQUIRED 0x1
#define CONFIG_NULL_VALUE 0x2   /* CUSTOM: a null value is a value (fn gets its node) */

struct config_section;

struct config_field {
	const char *key;
	enum config_type type;
	size_t offset;
	const char *def;                /* default as one would write it; NULL when none */
	uint64_t min, max;              /* bounds for UINT, SIZE and DURATION */
	const char *const *choices;     /* ENUM: names in enum order, NULL-terminated */
	const struct config_section *section;
	void (*fn)(struct config_parse *, const yaml_node_t *, void *obj);
	unsigned flags;
	const char *doc;                /* one line for the documentation */
	const char *tname;              /* CUSTOM: the value's type, for the documentation */
};

struct config_section {
	const struct config_field *fields;
	size_t nfields;
};

#define CONFIG_NFIELDS(a)       (sizeof(a) / sizeof((a)[0]))
#define CONFIG_SECTION_OF(a)    { (a), CONFIG_NFIELDS(a) }
#define CONFIG_MAX_FIELDS       32

#define C_OFF(field)            offsetof(struct config, field)
#define F_UINT(k, st, f, d, lo, hi, doc) \
	{ k, CONFIG_UINT, offsetof(st, f), d, lo, hi, NULL, NULL, NULL, 0, doc, NULL }
#define F_SIZE(k, st, f, d, lo, doc) \
	{ k, CONFIG_SIZE, offsetof(st, f), d, lo, SIZE_MAX, NULL, NULL, NULL, 0, doc, NULL }
#define F_DURATION(k, st, f, d, lo, doc) \
	{ k, CONFIG_DURATION, offsetof(st, f), d, lo, UINT64_MAX, NULL, NULL, NULL, 0, doc, NULL }
#define F_STRING(k, st, f, d, doc) \
	{ k, CONFIG_STRING, offsetof(st, f), d, 0, 0, NULL, NULL, NULL, 0, doc, NULL }
#define F_ENUM(k, st, f, d, ch, doc) \
	{ k, CONFIG_ENUM, offsetof(st, f), d, 0, 0, ch, NULL, NULL, 0, doc, NULL }
#define F_ADDR(k, st, f, fl, doc) \
	{ k, CONFIG_ADDR, offsetof(st, f), NULL, 0, 0, NULL, NULL, NULL, fl, doc, NULL }
#define F_ADDR_PTR(k, st, f, doc) \
	{ k, CONFIG_ADDR_PTR, offsetof(st, f), NULL, 0, 0, NULL, NULL, NULL, 0, doc, NULL }
#define F_SECTION(k, sec, doc) \
	{ k, CONFIG_SECTION, 0, NULL, 0, 0, NULL, &sec, NULL, 0, doc, NULL }
#define F_CUSTOM(k, fn, t, d, fl, doc) \
	{ k, CONFIG_CUSTOM, 0, d, 0, 0, NULL, NULL, fn, fl, doc, t }
#define F_STRING_REQ(k, st, f, doc) \
	{ k, CONFIG_STRING, offsetof(st, f), NULL, 0, 0, NULL, NULL, NULL, CONFIG_REQUIRED, doc, NULL }

#define config_node(ctx, id)    yaml_document_get_node((ctx)->doc, (id))
#define config_list_len(n) \
	((size_t)((n)->data.sequence.items.top - (n)->data.sequence.items.start))
#define config_list_item(ctx, n, i) config_node((ctx), (n)->data.sequence.items.start[(i)])

/* config.c: generic parsing by the schema, the top-level custom fields, the listeners */
void config_parse_map(struct config_parse *ctx, const yaml_node_t *map,
    const struct config_section *sec, void *obj);
void config_parse_object(struct config_parse *ctx, const yaml_node_t *node,
    const struct config_section *sec, void *obj);
void config_parse_workers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_resolve_path(struct config_parse *ctx, char **path);
void config_parse_error_log(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_pid_file(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_user(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_access(struct config_parse *ctx, const yaml_node_t *node, void *obj);
int config_json_path(struct config_parse *ctx, const yaml_node_t *node, const char *text);
void config_parse_json_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_path_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_listeners(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_listener_http2(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jwt_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj);

/* config_yaml.c: allocation, errors and key paths, YAML nodes, scalars */
void __attribute__((noreturn)) config_oom(void);
void *config_xcalloc(size_t n, size_t size);
void *config_xreallocarray(void *p, size_t n, size_t size);
char *config_xstrdup(const char *s);
char *config_xvasprintf(const char *fmt, va_list ap);
char *config_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void config_error_at(struct config_parse *ctx, yaml_mark_t mark, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
size_t config_where_push(struct config_parse *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
size_t config_where_key(struct config_parse *ctx, const char *key);
void config_where_pop(struct config_parse *ctx, size_t saved);
const char *config_node_kind(const yaml_node_t *node);
int config_is_null(const yaml_node_t *node);
const char *config_scalar(struct config_parse *ctx, const yaml_node_t *node, const char *expected);
const char *config_string(struct config_parse *ctx, const yaml_node_t *node);
yaml_node_t *config_map_get(struct config_parse *ctx, const yaml_node_t *map, const char *key);
const yaml_node_t *config_list(struct config_parse *ctx, const yaml_node_t *node);
int config_parse_uint_text(const char *text, uint64_t min, uint64_t max, unsigned *out);
extern const char config_addr_not_numeric[];
const char *config_port_parse(const char *text, uint16_t *port);
const char *config_addr_parse(const char *text, struct config_addr *out);
int config_addr_same(const struct config_addr *a, const struct config_addr *b);
int config_addr_is_any(const struct config_addr *a);
void config_parse_status_set(struct config_parse *ctx, const yaml_node_t *node, uint64_t *set);

/* config_schema.c: the tables other pieces parse with */
extern const char *const config_failure_names[];
extern const struct config_section config_tls_cert_section;
extern const struct config_section config_listener_tls_section;
extern const struct config_section config_listener_section;
extern const struct config_section config_server_section;
extern const struct config_section config_upstream_tls_section;
extern const struct config_section config_health_section;
extern const struct config_section config_upstream_section;
extern const struct config_section config_header_ops_section;
extern const struct config_section config_route_section;
extern const struct config_section config_backend_section;
extern const struct config_section config_jsonrpc_method_section;
extern const struct config_section config_jsonrpc_section;
extern const struct config_section config_jsonrpc_name_section;
extern const struct config_section config_top_section;

/* config_tls.c: tls: sections, their contexts built at load */
void config_parse_certificates(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_protocols(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_listener_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_upstream_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj);

/* config_resolve.c: servers by host name, resolved at load */
void config_server_address(struct config_parse *ctx, const yaml_node_t *node,
    struct config_server *srv, const char *expected);
void config_parse_server_address(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_resolve_names(struct config_parse *ctx, const yaml_node_t *root);

/* config_upstreams.c: upstreams, failures, retries, health checks */
void config_parse_servers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_fail_on(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_retry_on(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_retry_budget(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_hash_key(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_health_path(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_health_status(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_health_json(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_health(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_upstreams(struct config_parse *ctx, const yaml_node_t *node, void *obj);

/* config_routes.c: routes, backends, JSON-RPC routes */
char *config_path_value(struct config_parse *ctx, const yaml_node_t *node);
void config_parse_route_name(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_host(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_path(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_path_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_strip(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_json(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_path(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_after(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_method(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backends(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_match(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_name_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_default(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_allow(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_jsonrpc_deny(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_jsonrpc(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_jsonrpc_free(struct config_jsonrpc *jc);
void config_json_types_free(char **types);
void config_parse_json_types(struct config_parse *ctx, const yaml_node_t *node, void *obj);

/* config_auth.c: auth:, rate_limits:, trusted_proxies:, a route's auth: and rate_limit: */
extern const struct config_section config_auth_policy_section;
extern const struct config_section config_auth_jwt_section;
extern const struct config_section config_auth_keys_section;
extern const struct config_section config_route_rate_limit_section;
extern const struct config_section config_rate_limits_section;
void config_parse_auth(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_auth(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_route_rate_limit(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_trusted_proxies(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_auth_finish(struct config_parse *ctx);
void config_auth_free(struct config *cfg);
void config_route_auth_free(struct config_route *route);

/* config_cors.c: a route's cors: key */
void config_parse_cors_origins(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_cors_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_cors_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_missing(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_backend_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_request_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_response_on(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_error_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_events_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_header_set(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_header_add(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_header_remove(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_request_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_response_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj);
void config_parse_routes(struct config_parse *ctx, const yaml_node_t *node, void *obj);

#endif
