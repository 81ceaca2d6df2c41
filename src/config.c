/*
 * Configuration: YAML file -> struct config.
 *
 * The file is loaded with libyaml's document API so that every node keeps its position; the
 * schema below (one table per mapping) drives key checking, parsing and defaults.  Every error
 * is collected with its position and the key path being parsed, and all of them are reported
 * at the end in file order, so one run of `jsongate -t` shows everything that is wrong.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "rewrite.h"
#include "tls.h"

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
};

/* ------------------------------------------------------------------ allocation */

static void *
config_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL) {
		fputs("jsongate: out of memory loading the configuration\n", stderr);
		abort();
	}
	return p;
}

static char *
config_xstrdup(const char *s)
{
	size_t len = strlen(s);
	char *p = config_xcalloc(1, len + 1);

	memcpy(p, s, len);
	return p;
}

static char *
config_xvasprintf(const char *fmt, va_list ap)
{
	va_list ap2;
	char *s;
	int n;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		abort();
	s = config_xcalloc(1, (size_t)n + 1);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	return s;
}

static char *
config_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *
config_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = config_xvasprintf(fmt, ap);
	va_end(ap);
	return s;
}

/* ------------------------------------------------------------------ errors */

void
config_error(struct config_parse *ctx, const yaml_node_t *node, const char *fmt, ...)
{
	struct config_err *e;
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = config_xvasprintf(fmt, ap);
	va_end(ap);

	if (ctx->nerrs == ctx->errcap) {
		ctx->errcap = ctx->errcap ? ctx->errcap * 2 : 8;
		ctx->errs = realloc(ctx->errs, ctx->errcap * sizeof(*ctx->errs));
		if (ctx->errs == NULL) {
			fputs("jsongate: out of memory loading the configuration\n", stderr);
			abort();
		}
	}
	e = &ctx->errs[ctx->nerrs];
	e->seq = ctx->nerrs++;
	e->line = node ? node->start_mark.line + 1 : 0;
	e->col = node ? node->start_mark.column + 1 : 0;
	if (node == NULL)
		e->text = config_xasprintf("%s: %s", ctx->file, msg);
	else if (ctx->wherelen > 0)
		e->text = config_xasprintf("%s:%zu:%zu: %s: %s", ctx->file, e->line, e->col,
		    ctx->where, msg);
	else
		e->text = config_xasprintf("%s:%zu:%zu: %s", ctx->file, e->line, e->col, msg);
	free(msg);
}

/* Like config_error but at a raw position, for libyaml's syntax errors. */
static void
config_error_at(struct config_parse *ctx, yaml_mark_t mark, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void
config_error_at(struct config_parse *ctx, yaml_mark_t mark, const char *fmt, ...)
{
	yaml_node_t fake;
	size_t saved = ctx->wherelen;
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = config_xvasprintf(fmt, ap);
	va_end(ap);
	memset(&fake, 0, sizeof(fake));
	fake.start_mark = mark;
	ctx->wherelen = 0;
	config_error(ctx, &fake, "%s", msg);
	ctx->wherelen = saved;
	free(msg);
}

static int
config_err_cmp(const void *a, const void *b)
{
	const struct config_err *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

struct config_parse *
config_parse_new(const char *file)
{
	struct config_parse *ctx = config_xcalloc(1, sizeof(*ctx));

	ctx->file = file;
	return ctx;
}

size_t
config_parse_nerrors(const struct config_parse *ctx)
{
	return ctx->nerrs;
}

char *
config_parse_errors(struct config_parse *ctx)
{
	size_t i, len = 0;
	char *out, *p;

	if (ctx->nerrs == 0)
		return NULL;
	qsort(ctx->errs, ctx->nerrs, sizeof(*ctx->errs), config_err_cmp);
	for (i = 0; i < ctx->nerrs; i++)
		len += strlen(ctx->errs[i].text) + 1;
	out = p = config_xcalloc(1, len + 1);
	for (i = 0; i < ctx->nerrs; i++) {
		len = strlen(ctx->errs[i].text);
		memcpy(p, ctx->errs[i].text, len);
		p[len] = '\n';
		p += len + 1;
	}
	*p = '\0';
	return out;
}

void
config_parse_free(struct config_parse *ctx)
{
	size_t i;

	if (ctx == NULL)
		return;
	for (i = 0; i < ctx->nerrs; i++)
		free(ctx->errs[i].text);
	free(ctx->errs);
	free(ctx);
}

/* The key path shown before each message; push returns the length to pop back to. */
static size_t
config_where_push(struct config_parse *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static size_t
config_where_push(struct config_parse *ctx, const char *fmt, ...)
{
	size_t saved = ctx->wherelen;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(ctx->where + saved, sizeof(ctx->where) - saved, fmt, ap);
	va_end(ap);
	if (n > 0)
		ctx->wherelen += (size_t)n;
	if (ctx->wherelen >= sizeof(ctx->where))
		ctx->wherelen = sizeof(ctx->where) - 1;
	return saved;
}

static size_t
config_where_key(struct config_parse *ctx, const char *key)
{
	return config_where_push(ctx, ctx->wherelen ? ".%s" : "%s", key);
}

static void
config_where_pop(struct config_parse *ctx, size_t saved)
{
	ctx->wherelen = saved;
	ctx->where[saved] = '\0';
}

const char *
config_where(const struct config_parse *ctx)
{
	return ctx->where;
}

/* ------------------------------------------------------------------ YAML helpers */

static const char *
config_node_kind(const yaml_node_t *node)
{
	switch (node->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	default:
		return "a scalar";
	}
}

/* A plain empty, ~ or null scalar: YAML's null, treated as if the key were absent. */
static int
config_is_null(const yaml_node_t *node)
{
	const char *v;

	if (node == NULL)
		return 1;
	if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	v = (const char *)node->data.scalar.value;
	return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
	    strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* The text of a scalar node, or NULL after reporting what was expected instead. */
static const char *
config_scalar(struct config_parse *ctx, const yaml_node_t *node, const char *expected)
{
	if (node->type != YAML_SCALAR_NODE) {
		config_error(ctx, node, "expected %s, got %s", expected, config_node_kind(node));
		return NULL;
	}
	if (strlen((const char *)node->data.scalar.value) != node->data.scalar.length) {
		config_error(ctx, node, "value contains a NUL byte");
		return NULL;
	}
	return (const char *)node->data.scalar.value;
}

static const char *
config_string(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *s = config_scalar(ctx, node, "a string");

	if (s != NULL && s[0] == '\0') {
		config_error(ctx, node, "must not be empty");
		return NULL;
	}
	return s;
}

#define config_node(ctx, id)    yaml_document_get_node((ctx)->doc, (id))

/* The value node for key in a mapping, or NULL. */
static yaml_node_t *
config_map_get(struct config_parse *ctx, const yaml_node_t *map, const char *key)
{
	yaml_node_pair_t *pair;
	yaml_node_t *k;

	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		if (k != NULL && k->type == YAML_SCALAR_NODE &&
		    strcmp((const char *)k->data.scalar.value, key) == 0)
			return config_node(ctx, pair->value);
	}
	return NULL;
}

/* ------------------------------------------------------------------ scalar parsers */

/* Digits with an optional fraction: whole part and the fraction as num/scale. */
static const char *
config_parse_number(const char *p, uint64_t *whole, uint64_t *frac, uint64_t *scale)
{
	*whole = 0;
	*frac = 0;
	*scale = 1;
	if (!isdigit((unsigned char)*p))
		return NULL;
	for (; isdigit((unsigned char)*p); p++) {
		if (*whole > (UINT64_MAX - 9) / 10)
			return NULL;
		*whole = *whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return NULL;
		for (; isdigit((unsigned char)*p); p++) {
			/* nine digits are more precision than any unit here needs */
			if (*scale < 1000000000) {
				*frac = *frac * 10 + (uint64_t)(*p - '0');
				*scale *= 10;
			}
		}
	}
	return p;
}

/* whole.frac * mult, checking overflow; the fraction is rounded down. */
static int
config_scale(uint64_t whole, uint64_t frac, uint64_t scale, uint64_t mult, uint64_t *out)
{
	uint64_t v, f;

	if (mult != 0 && whole > UINT64_MAX / mult)
		return -1;
	v = whole * mult;
	f = frac * mult / scale;        /* frac < scale <= 1e9, mult <= 2^30: no overflow */
	if (v > UINT64_MAX - f)
		return -1;
	*out = v + f;
	return 0;
}

int
config_parse_size(const char *text, size_t *out)
{
	uint64_t whole, frac, scale, mult = 1, v;
	const char *p;

	p = config_parse_number(text, &whole, &frac, &scale);
	if (p == NULL)
		return -1;
	switch (*p) {
	case 'k': case 'K':
		mult = 1ULL << 10;
		p++;
		break;
	case 'm': case 'M':
		mult = 1ULL << 20;
		p++;
		break;
	case 'g': case 'G':
		mult = 1ULL << 30;
		p++;
		break;
	}
	if (*p != '\0' || (scale > 1 && mult == 1))
		return -1;
	if (config_scale(whole, frac, scale, mult, &v) == -1 || v > SIZE_MAX)
		return -1;
	*out = (size_t)v;
	return 0;
}

int
config_parse_duration(const char *text, uint64_t *out_ms)
{
	uint64_t whole, frac, scale, unit, v, total = 0;
	const char *p = text;

	/* A bare 0 is unambiguous; any other number needs its unit. */
	if (strcmp(text, "0") == 0) {
		*out_ms = 0;
		return 0;
	}
	if (*p == '\0')
		return -1;
	while (*p != '\0') {
		p = config_parse_number(p, &whole, &frac, &scale);
		if (p == NULL)
			return -1;
		if (p[0] == 'm' && p[1] == 's') {
			unit = 1;
			p += 2;
		} else if (p[0] == 's') {
			unit = 1000;
			p++;
		} else if (p[0] == 'm') {
			unit = 60 * 1000;
			p++;
		} else if (p[0] == 'h') {
			unit = 60 * 60 * 1000;
			p++;
		} else
			return -1;
		if (config_scale(whole, frac, scale, unit, &v) == -1 || total > UINT64_MAX - v)
			return -1;
		total += v;
	}
	*out_ms = total;
	return 0;
}

/* As config_parse_addr, with the reason for a failure. */
static const char *
config_addr_parse(const char *text, struct config_addr *out)
{
	char host[INET6_ADDRSTRLEN + 1], canon[INET6_ADDRSTRLEN];
	const char *colon, *port_text, *end;
	struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;
	size_t hostlen;
	unsigned long port;
	int v6 = 0;

	memset(out, 0, sizeof(*out));
	if (text[0] == '[') {
		end = strchr(text, ']');
		if (end == NULL)
			return "missing ']' after the IPv6 address";
		if (end[1] != ':')
			return "expected [IPv6]:PORT";
		hostlen = (size_t)(end - text - 1);
		memcpy(host, text + 1, hostlen < sizeof(host) ? hostlen : 0);
		colon = end + 1;
		v6 = 1;
	} else {
		colon = strrchr(text, ':');
		if (colon == NULL)
			return "expected HOST:PORT";
		if (memchr(text, ':', (size_t)(colon - text)) != NULL)
			return "IPv6 addresses need brackets, as in [::1]:8080";
		hostlen = (size_t)(colon - text);
		memcpy(host, text, hostlen < sizeof(host) ? hostlen : 0);
	}
	if (hostlen >= sizeof(host))
		return "host must be a numeric IPv4 address, [IPv6], * or localhost";
	host[hostlen] = '\0';
	if (hostlen == 0)
		return "missing host (use *:PORT for all addresses)";

	port_text = colon + 1;
	if (*port_text == '\0')
		return "missing port";
	for (end = port_text; isdigit((unsigned char)*end); end++)
		;
	if (*end != '\0')
		return "the port must be a number";
	if (end - port_text > 5 || (port = strtoul(port_text, NULL, 10)) == 0 || port > 65535)
		return "the port must be from 1 to 65535";

	if (!v6 && strcmp(host, "*") == 0)
		strcpy(host, "0.0.0.0");
	else if (!v6 && strcasecmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (v6) {
		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
			return "invalid IPv6 address";
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		out->sslen = sizeof(*sin6);
		inet_ntop(AF_INET6, &sin6->sin6_addr, canon, sizeof(canon));
	} else {
		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
			return "host must be a numeric IPv4 address, [IPv6], * or localhost "
			    "(names are not resolved)";
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		out->sslen = sizeof(*sin);
		inet_ntop(AF_INET, &sin->sin_addr, canon, sizeof(canon));
	}
	out->port = (uint16_t)port;
	out->host = config_xstrdup(canon);
	out->text = config_xstrdup(text);
	return NULL;
}

int
config_parse_addr(const char *text, struct config_addr *out)
{
	return config_addr_parse(text, out) == NULL ? 0 : -1;
}

void
config_addr_free(struct config_addr *addr)
{
	if (addr == NULL)
		return;
	free(addr->text);
	free(addr->host);
	addr->text = addr->host = NULL;
}

static int
config_addr_same(const struct config_addr *a, const struct config_addr *b)
{
	const struct sockaddr_in *a4 = (const void *)&a->ss, *b4 = (const void *)&b->ss;
	const struct sockaddr_in6 *a6 = (const void *)&a->ss, *b6 = (const void *)&b->ss;

	if (a->ss.ss_family != b->ss.ss_family || a->port != b->port)
		return 0;
	if (a->ss.ss_family == AF_INET)
		return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	if (a->ss.ss_family == AF_INET6)
		return memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
	return 0;
}

static int
config_addr_is_any(const struct config_addr *a)
{
	const struct sockaddr_in *a4 = (const void *)&a->ss;
	const struct sockaddr_in6 *a6 = (const void *)&a->ss;

	if (a->ss.ss_family == AF_INET)
		return a4->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
}

#define CONFIG_METHODS(X) \
	X(GET) X(HEAD) X(POST) X(PUT) X(DELETE) X(OPTIONS) X(PATCH) X(TRACE) X(CONNECT)

unsigned
config_method_bit(const char *name, size_t len)
{
#define X(m) if (len == sizeof(#m) - 1 && memcmp(name, #m, len) == 0) return METHOD_##m;
	CONFIG_METHODS(X)
#undef X
	return METHOD_OTHER;
}

/* ------------------------------------------------------------------ the schema */

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
#define CONFIG_MAX_FIELDS       16

static const char *const config_log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const config_access_formats[] = { "json", "combined", NULL };
static const char *const config_balances[] = { "round_robin", "least_conn", "hash", NULL };
static const char *const config_on_errors[] = { "pass", "fail", NULL };
static const char *const config_validates[] = { "envelope", "full", NULL };
static const char *const config_compresses[] = { "off", "gzip", NULL };
static const char *const config_verify_clients[] = { "off", "on", "optional", NULL };
static const char *const config_booleans[] = { "false", "true", NULL };

_Static_assert(sizeof(enum log_level) == sizeof(int) && sizeof(enum balance) == sizeof(int) &&
    sizeof(enum on_error) == sizeof(int) && sizeof(enum access_format) == sizeof(int) &&
    sizeof(enum validate_mode) == sizeof(int) && sizeof(enum compress_mode) == sizeof(int) &&
    sizeof(enum verify_client) == sizeof(int),
    "CONFIG_ENUM stores enums as int");

static void config_parse_workers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_access(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_listener_tls(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_upstream_tls(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_certificates(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_protocols(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_listeners(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_upstreams(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_servers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_routes(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_name(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_host(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_path(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_path_prefix(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_strip(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_methods(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_upstream(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_json_types(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_request_ops(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_response_ops(struct config_parse *, const yaml_node_t *, void *);

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

static const struct config_field config_log_fields[] = {
	F_ENUM("level", struct config, log_level, "info", config_log_levels,
	    "error log level: error, warn, info or debug"),
	F_CUSTOM("access", config_parse_access, "path|stderr|off", "stderr", 0,
	    "access log: a file path, stderr, or off"),
	F_ENUM("format", struct config, access_format, "json", config_access_formats,
	    "access log format: json (one object per line) or combined"),
};
static const struct config_section config_log_section = CONFIG_SECTION_OF(config_log_fields);

static const struct config_field config_admin_fields[] = {
	{ "listen", CONFIG_ADDR_PTR, C_OFF(admin_listen), NULL, 0, 0, NULL, NULL, NULL,
	    CONFIG_REQUIRED, "address of the admin endpoint (GET /metrics, GET /healthz)", NULL },
};
static const struct config_section config_admin_section = CONFIG_SECTION_OF(config_admin_fields);

static const struct config_field config_limits_fields[] = {
	F_SIZE("max_header", struct config, limits.max_header, "16k", 1024,
	    "largest request head; larger requests get 431"),
	F_SIZE("max_body", struct config, limits.max_body, "8m", 0,
	    "largest JSON body buffered for ops; larger requests get 413"),
	F_UINT("max_connections", struct config, limits.max_connections, "10000", 1, UINT32_MAX,
	    "client connections accepted at once"),
	F_UINT("max_depth", struct config, limits.max_depth, "1000", 1, UINT32_MAX,
	    "deepest JSON nesting the envelope engine accepts"),
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
	F_DURATION("shutdown_grace", struct config, timeouts.shutdown_grace, "30s", 0,
	    "time in-flight requests get to finish on SIGTERM"),
};
static const struct config_section config_timeouts_section =
    CONFIG_SECTION_OF(config_timeouts_fields);

static const struct config_field config_tls_cert_fields[] = {
	F_STRING_REQ("cert", struct config_tls_cert, cert,
	    "PEM file: the certificate, then its chain"),
	F_STRING_REQ("key", struct config_tls_cert, key, "PEM file: its private key"),
};
static const struct config_section config_tls_cert_section =
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
};
static const struct config_section config_listener_tls_section =
    CONFIG_SECTION_OF(config_listener_tls_fields);

static const struct config_field config_listener_fields[] = {
	F_ADDR("listen", struct config_listener, addr, CONFIG_REQUIRED,
	    "address to accept clients on: IPv4:PORT, [IPv6]:PORT, *:PORT or localhost:PORT"),
	F_CUSTOM("tls", config_parse_listener_tls, "mapping", NULL, 0,
	    "TLS for clients; none: plain HTTP"),
};
static const struct config_section config_listener_section =
    CONFIG_SECTION_OF(config_listener_fields);

static const struct config_field config_server_fields[] = {
	F_ADDR("address", struct config_server, addr, CONFIG_REQUIRED,
	    "server address: IPv4:PORT, [IPv6]:PORT or localhost:PORT"),
	F_UINT("weight", struct config_server, weight, "1", 1, CONFIG_MAX_WEIGHT,
	    "share of requests relative to the other servers"),
};
static const struct config_section config_server_section = CONFIG_SECTION_OF(config_server_fields);

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
static const struct config_section config_upstream_tls_section =
    CONFIG_SECTION_OF(config_upstream_tls_fields);

static const struct config_field config_upstream_fields[] = {
	F_CUSTOM("servers", config_parse_servers, "list", NULL, CONFIG_REQUIRED,
	    "list of ADDRESS or { address: ADDRESS, weight: N }"),
	F_ENUM("balance", struct config_upstream, balance, "round_robin", config_balances,
	    "server selection: round_robin, least_conn or hash"),
	F_UINT("keepalive", struct config_upstream, keepalive, "32", 0, 65535,
	    "idle pooled connections kept per worker"),
	F_STRING("host_header", struct config_upstream, host_header, NULL,
	    "Host header sent upstream instead of the client's"),
	F_CUSTOM("tls", config_parse_upstream_tls, "mapping", NULL, 0,
	    "TLS to the servers; none: plain HTTP"),
};
static const struct config_section config_upstream_section =
    CONFIG_SECTION_OF(config_upstream_fields);

static const struct config_field config_match_fields[] = {
	F_CUSTOM("host", config_parse_route_host, "string", NULL, 0,
	    "Host the request must carry; case-insensitive, any :port ignored"),
	F_CUSTOM("path", config_parse_route_path, "path", NULL, 0, "exact path"),
	F_CUSTOM("path_prefix", config_parse_route_path_prefix, "path", NULL, 0,
	    "path prefix, compared as a plain string (/api matches /api, /api/x and /apix)"),
	F_CUSTOM("methods", config_parse_methods, "list", NULL, 0,
	    "allowed methods (GET implies HEAD); others get 405"),
};
static const struct config_section config_match_section = CONFIG_SECTION_OF(config_match_fields);

static const struct config_field config_route_fields[] = {
	F_CUSTOM("name", config_parse_route_name, "string", NULL, 0,
	    "name for logs and metrics; default routes[N]"),
	F_SECTION("match", config_match_section, "what requests the route takes; none: all"),
	F_CUSTOM("upstream", config_parse_route_upstream, "string", NULL, CONFIG_REQUIRED,
	    "name of the upstream requests are sent to"),
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
};
static const struct config_section config_route_section = CONFIG_SECTION_OF(config_route_fields);

static const struct config_field config_top_fields[] = {
	F_CUSTOM("workers", config_parse_workers, "integer|auto", "auto", 0,
	    "event-loop threads; auto = number of CPUs"),
	F_STRING("user", struct config, user, NULL, "user to switch to after binding"),
	F_SECTION("log", config_log_section, "logging"),
	F_SECTION("admin", config_admin_section, "admin endpoint; none when absent"),
	F_SECTION("limits", config_limits_section, "size and count limits"),
	F_SECTION("timeouts", config_timeouts_section, "timeouts"),
	F_CUSTOM("listeners", config_parse_listeners, "list", NULL, CONFIG_REQUIRED,
	    "list of { listen: ADDRESS }"),
	/* upstreams before routes: routes refer to them by name */
	F_CUSTOM("upstreams", config_parse_upstreams, "mapping", NULL, 0, "map of name -> upstream"),
	F_CUSTOM("routes", config_parse_routes, "list", NULL, 0, "list of routes; the first match wins"),
};
static const struct config_section config_top_section = CONFIG_SECTION_OF(config_top_fields);

_Static_assert(CONFIG_NFIELDS(config_route_fields) <= CONFIG_MAX_FIELDS &&
    CONFIG_NFIELDS(config_top_fields) <= CONFIG_MAX_FIELDS, "raise CONFIG_MAX_FIELDS");

/* ------------------------------------------------------------------ generic parsing */

static size_t
config_levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, prev, cur, tmp;
	size_t row[64];

	if (la >= 64 || lb >= 64)
		return 64;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			cur = prev + (tolower((unsigned char)a[i - 1]) !=
			    tolower((unsigned char)b[j - 1]));
			if (row[j] + 1 < cur)
				cur = row[j] + 1;
			if (row[j - 1] + 1 < cur)
				cur = row[j - 1] + 1;
			tmp = row[j];
			row[j] = cur;
			prev = tmp;
		}
	}
	return row[lb];
}

static void
config_unknown_key(struct config_parse *ctx, const yaml_node_t *node, const char *key,
    const struct config_section *sec)
{
	size_t i, d, best = SIZE_MAX, besti = 0, len = 0;
	char list[512];

	for (i = 0; i < sec->nfields; i++) {
		d = config_levenshtein(key, sec->fields[i].key);
		if (d < best) {
			best = d;
			besti = i;
		}
	}
	/* Close enough to be a typo: at most 2 edits, and fewer than half the word. */
	if (best <= 2 && best * 2 < strlen(key)) {
		config_error(ctx, node, "unknown key '%s'; did you mean '%s'?", key,
		    sec->fields[besti].key);
		return;
	}
	list[0] = '\0';
	for (i = 0; i < sec->nfields && len < sizeof(list); i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "",
		    sec->fields[i].key);
	config_error(ctx, node, "unknown key '%s'; expected one of: %s", key, list);
}

static void *
config_at(void *obj, size_t offset)
{
	return (char *)obj + offset;
}

static void
config_bad_uint(struct config_parse *ctx, const yaml_node_t *node, const struct config_field *f,
    const char *text)
{
	config_error(ctx, node, "expected an integer from %llu to %llu, got \"%s\"",
	    (unsigned long long)f->min, (unsigned long long)f->max, text);
}

static int
config_parse_uint_text(const char *text, uint64_t min, uint64_t max, unsigned *out)
{
	unsigned long long v;
	const char *p;
	char *end;

	for (p = text; isdigit((unsigned char)*p); p++)
		;
	if (p == text || *p != '\0')
		return -1;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno != 0 || v < min || v > max)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* Format a size for messages the way a user would write it. */
static void
config_size_text(uint64_t v, char *buf, size_t cap)
{
	if (v >= (1ULL << 30) && v % (1ULL << 30) == 0)
		snprintf(buf, cap, "%llug", (unsigned long long)(v >> 30));
	else if (v >= (1ULL << 20) && v % (1ULL << 20) == 0)
		snprintf(buf, cap, "%llum", (unsigned long long)(v >> 20));
	else if (v >= 1024 && v % 1024 == 0)
		snprintf(buf, cap, "%lluk", (unsigned long long)(v >> 10));
	else
		snprintf(buf, cap, "%llu", (unsigned long long)v);
}

static void config_parse_map(struct config_parse *, const yaml_node_t *,
    const struct config_section *, void *);

/* Parse one value (node NULL: apply the field's default). */
static void
config_parse_field(struct config_parse *ctx, const struct config_field *f,
    const yaml_node_t *node, void *obj)
{
	const char *text = NULL;
	const char *why;
	char buf[32];
	size_t size;
	uint64_t ms;
	unsigned u;
	int i;

	switch (f->type) {
	case CONFIG_SECTION:
		config_parse_map(ctx, node, f->section, obj);
		return;
	case CONFIG_CUSTOM:
		f->fn(ctx, node, obj);
		return;
	default:
		break;
	}
	if (node == NULL) {
		text = f->def;
		if (text == NULL)
			return;         /* no default: the field stays zero / NULL */
	}

	switch (f->type) {
	case CONFIG_UINT:
		if (node != NULL && (text = config_scalar(ctx, node, "an integer")) == NULL)
			return;
		if (config_parse_uint_text(text, f->min, f->max, &u) == -1) {
			config_bad_uint(ctx, node, f, text);
			return;
		}
		*(unsigned *)config_at(obj, f->offset) = u;
		break;
	case CONFIG_SIZE:
		if (node != NULL && (text = config_scalar(ctx, node, "a size like 16k")) == NULL)
			return;
		if (config_parse_size(text, &size) == -1) {
			config_error(ctx, node, "expected a size like 512, 16k or 8m, got \"%s\"",
			    text);
			return;
		}
		if (size < f->min) {
			config_size_text(f->min, buf, sizeof(buf));
			config_error(ctx, node, "must be at least %s", buf);
			return;
		}
		*(size_t *)config_at(obj, f->offset) = size;
		break;
	case CONFIG_DURATION:
		if (node != NULL && (text = config_scalar(ctx, node, "a duration like 10s")) == NULL)
			return;
		if (config_parse_duration(text, &ms) == -1) {
			config_error(ctx, node,
			    "expected a duration like 10s, 250ms or 2m, got \"%s\"", text);
			return;
		}
		if (ms < f->min) {
			config_error(ctx, node, "must be at least %llums", (unsigned long long)f->min);
			return;
		}
		*(uint64_t *)config_at(obj, f->offset) = ms;
		break;
	case CONFIG_STRING:
		if (node != NULL && (text = config_string(ctx, node)) == NULL)
			return;
		free(*(char **)config_at(obj, f->offset));
		*(char **)config_at(obj, f->offset) = config_xstrdup(text);
		break;
	case CONFIG_ENUM:
		if (node != NULL && (text = config_scalar(ctx, node, "a name")) == NULL)
			return;
		for (i = 0; f->choices[i] != NULL; i++) {
			if (strcmp(text, f->choices[i]) == 0) {
				*(int *)config_at(obj, f->offset) = i;
				return;
			}
		}
		{
			char list[256];
			size_t len = 0;

			list[0] = '\0';
			for (i = 0; f->choices[i] != NULL && len < sizeof(list); i++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
				    i ? ", " : "", f->choices[i]);
			config_error(ctx, node, "expected one of %s; got \"%s\"", list, text);
		}
		break;
	case CONFIG_ADDR:
	case CONFIG_ADDR_PTR: {
		struct config_addr addr, *dst;

		if (node != NULL && (text = config_scalar(ctx, node, "an address")) == NULL)
			return;
		if ((why = config_addr_parse(text, &addr)) != NULL) {
			config_error(ctx, node, "invalid address \"%s\": %s", text, why);
			return;
		}
		if (f->type == CONFIG_ADDR)
			dst = config_at(obj, f->offset);
		else {
			dst = *(struct config_addr **)config_at(obj, f->offset);
			if (dst == NULL) {
				dst = config_xcalloc(1, sizeof(*dst));
				*(struct config_addr **)config_at(obj, f->offset) = dst;
			}
		}
		config_addr_free(dst);
		*dst = addr;
		break;
	}
	default:
		break;
	}
}

/*
 * Check a mapping's keys against its section table, then parse each field in table order,
 * applying defaults for absent ones.  map NULL: the section is absent, all defaults.
 */
static void
config_parse_map(struct config_parse *ctx, const yaml_node_t *map,
    const struct config_section *sec, void *obj)
{
	const yaml_node_t *vals[CONFIG_MAX_FIELDS] = { 0 }, *keys[CONFIG_MAX_FIELDS] = { 0 };
	const yaml_node_pair_t *pair;
	const yaml_node_t *k, *v;
	const char *key;
	size_t i, saved;

	if (map != NULL && map->type != YAML_MAPPING_NODE && !config_is_null(map)) {
		config_error(ctx, map, "expected a mapping, got %s", config_node_kind(map));
		map = NULL;
	} else if (config_is_null(map))
		map = NULL;

	for (pair = map ? map->data.mapping.pairs.start : NULL;
	    map != NULL && pair < map->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		v = config_node(ctx, pair->value);
		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			config_error(ctx, k, "keys must be strings, got %s", config_node_kind(k));
			continue;
		}
		key = (const char *)k->data.scalar.value;
		for (i = 0; i < sec->nfields; i++)
			if (strcmp(sec->fields[i].key, key) == 0)
				break;
		if (i == sec->nfields)
			config_unknown_key(ctx, k, key, sec);
		else if (keys[i] != NULL)
			config_error(ctx, k, "duplicate key '%s' (first at line %zu)", key,
			    keys[i]->start_mark.line + 1);
		else {
			keys[i] = k;
			vals[i] = v;
		}
	}

	for (i = 0; i < sec->nfields; i++) {
		const struct config_field *f = &sec->fields[i];
		int absent = config_is_null(vals[i]);

		if (absent && map != NULL && (f->flags & CONFIG_REQUIRED)) {
			if (vals[i] != NULL) {
				saved = config_where_key(ctx, f->key);
				config_error(ctx, keys[i], "missing value");
				config_where_pop(ctx, saved);
			} else
				config_error(ctx, map, "missing required key '%s'", f->key);
			continue;
		}
		saved = f->type == CONFIG_SECTION && absent ? ctx->wherelen :
		    config_where_key(ctx, f->key);
		ctx->key = keys[i];
		config_parse_field(ctx, f, absent ? NULL : vals[i], obj);
		config_where_pop(ctx, saved);
	}
}

/* A list item or named object: unlike an optional section, it must be a mapping. */
static void
config_parse_object(struct config_parse *ctx, const yaml_node_t *node,
    const struct config_section *sec, void *obj)
{
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping, got %s",
		    config_is_null(node) ? "nothing" : config_node_kind(node));
		return;
	}
	config_parse_map(ctx, node, sec, obj);
}

/* ------------------------------------------------------------------ custom fields */

static void
config_parse_workers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text = "auto";
	long n;

	if (node != NULL && (text = config_scalar(ctx, node, "auto or a number")) == NULL)
		return;
	if (strcmp(text, "auto") == 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->workers = n < 1 ? 1 : n > CONFIG_MAX_WORKERS ? CONFIG_MAX_WORKERS : (unsigned)n;
		return;
	}
	if (config_parse_uint_text(text, 1, CONFIG_MAX_WORKERS, &cfg->workers) == -1)
		config_error(ctx, node, "expected auto or an integer from 1 to %d, got \"%s\"",
		    CONFIG_MAX_WORKERS, text);
}

static void
config_parse_access(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text = "stderr";

	if (node != NULL && (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->access_log);
	cfg->access_log = strcmp(text, "off") == 0 ? NULL : config_xstrdup(text);
}


/* A list node, or NULL after an error. */
static const yaml_node_t *
config_list(struct config_parse *ctx, const yaml_node_t *node)
{
	if (node->type != YAML_SEQUENCE_NODE) {
		config_error(ctx, node, "expected a list, got %s", config_node_kind(node));
		return NULL;
	}
	return node;
}

#define config_list_len(n) \
	((size_t)((n)->data.sequence.items.top - (n)->data.sequence.items.start))
#define config_list_item(ctx, n, i) config_node((ctx), (n)->data.sequence.items.start[(i)])

/* ------------------------------------------------------------------ TLS */

/* Make a relative file name relative to the configuration file's directory. */
static void
config_tls_path(struct config_parse *ctx, char **path)
{
	const char *slash = strrchr(ctx->file, '/');
	char *p;

	if (*path == NULL || (*path)[0] == '/' || slash == NULL)
		return;
	p = config_xasprintf("%.*s/%s", (int)(slash - ctx->file), ctx->file, *path);
	free(*path);
	*path = p;
}

static void
config_parse_certificates(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener_tls *tls = obj;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "at least one certificate is required");
		return;
	}
	tls->certs = config_xcalloc(n, sizeof(*tls->certs));
	tls->ncerts = n;
	for (i = 0; i < n; i++) {
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, config_list_item(ctx, node, i), &config_tls_cert_section,
		    &tls->certs[i]);
		config_where_pop(ctx, saved);
		config_tls_path(ctx, &tls->certs[i].cert);
		config_tls_path(ctx, &tls->certs[i].key);
	}
}

static void
config_parse_protocols(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener_tls *tls = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;

	tls->protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) == 0) {
		config_error(ctx, node, "an empty list allows no protocol; omit it for the default");
		return;
	}
	tls->protocols = 0;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if (strcmp(text, "TLSv1.2") == 0)
			tls->protocols |= CONFIG_TLS_V1_2;
		else if (strcmp(text, "TLSv1.3") == 0)
			tls->protocols |= CONFIG_TLS_V1_3;
		else if (strcmp(text, "TLSv1") == 0 || strcmp(text, "TLSv1.1") == 0 ||
		    strcmp(text, "SSLv3") == 0)
			config_error(ctx, item, "%s is not supported: it is insecure", text);
		else
			config_error(ctx, item, "unknown protocol \"%s\"; expected TLSv1.2 or TLSv1.3",
			    text);
	}
	if (tls->protocols == 0)
		tls->protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3;
}

/* msg with file names as the configuration wrote them, without the directory prepended. */
static const char *
config_tls_unresolve(struct config_parse *ctx, const char *msg, char *buf, size_t cap)
{
	const char *slash = strrchr(ctx->file, '/'), *p;
	size_t dirlen, len = 0, n;

	if (slash == NULL)
		return msg;
	dirlen = (size_t)(slash - ctx->file) + 1;
	for (;;) {
		for (p = msg; *p != '\0' && strncmp(p, ctx->file, dirlen) != 0; p++)
			;
		n = (size_t)(p - msg);
		if (len + n >= cap)
			return msg;
		memcpy(buf + len, msg, n);
		len += n;
		if (*p == '\0')
			break;
		msg = p + dirlen;
	}
	buf[len] = '\0';
	return buf;
}

/* Where TLS load errors go: the node of the setting they are about. */
struct config_tls_where {
	struct config_parse *ctx;
	const yaml_node_t *tls;         /* the tls mapping */
	int listener;
};

static void
config_tls_error(void *arg, enum tls_setting at, size_t index, const char *msg)
{
	struct config_tls_where *tw = arg;
	struct config_parse *ctx = tw->ctx;
	const yaml_node_t *node = tw->tls, *list;
	const char *key = NULL;
	size_t saved = ctx->wherelen;
	char text[1024];

	switch (at) {
	case TLS_AT_CERT:
	case TLS_AT_KEY:
		key = at == TLS_AT_CERT ? "cert" : "key";
		if (tw->listener) {
			list = config_map_get(ctx, tw->tls, "certificates");
			if (list != NULL && list->type == YAML_SEQUENCE_NODE &&
			    index < config_list_len(list)) {
				config_where_push(ctx, ".certificates[%zu]", index);
				node = config_list_item(ctx, list, index);
			}
		}
		break;
	case TLS_AT_CLIENT_CA:
		key = "client_ca";
		break;
	case TLS_AT_CA:
		key = "ca";
		break;
	case TLS_AT_CIPHERS:
		key = "ciphers";
		break;
	case TLS_AT_NONE:
		break;
	}
	if (key != NULL && config_map_get(ctx, node, key) != NULL) {
		node = config_map_get(ctx, node, key);
		config_where_key(ctx, key);
	}
	config_error(ctx, node, "%s", config_tls_unresolve(ctx, msg, text, sizeof(text)));
	config_where_pop(ctx, saved);
}

static void
config_parse_listener_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener *l = obj;
	struct config_listener_tls *tls;
	struct config_tls_where tw = { ctx, node, 1 };
	size_t before = ctx->nerrs;

	if (node == NULL)
		return;
	tls = l->tls = config_xcalloc(1, sizeof(*tls));
	config_parse_object(ctx, node, &config_listener_tls_section, tls);
	config_tls_path(ctx, &tls->client_ca);
	if (tls->verify_client != VERIFY_CLIENT_OFF && tls->client_ca == NULL) {
		config_error(ctx, config_map_get(ctx, node, "verify_client") ?
		    config_map_get(ctx, node, "verify_client") : node,
		    "verify_client needs client_ca");
	}
	/* Build the contexts now: bad certificate files are configuration errors. */
	if (ctx->nerrs == before)
		tls->ctx = tls_server_new(tls, config_tls_error, &tw);
}

static void
config_parse_upstream_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;
	struct config_upstream_tls *tls;
	struct config_tls_where tw = { ctx, node, 0 };
	size_t before = ctx->nerrs;

	if (node == NULL)
		return;
	tls = up->tls = config_xcalloc(1, sizeof(*tls));
	tls->verify = 1;
	config_parse_object(ctx, node, &config_upstream_tls_section, tls);
	config_tls_path(ctx, &tls->ca);
	config_tls_path(ctx, &tls->cert);
	config_tls_path(ctx, &tls->key);
	if ((tls->cert == NULL) != (tls->key == NULL)) {
		size_t saved = config_where_key(ctx, tls->cert ? "cert" : "key");

		config_error(ctx, config_map_get(ctx, node, tls->cert ? "cert" : "key"),
		    "cert and key go together");
		config_where_pop(ctx, saved);
	}
	if (ctx->nerrs == before)
		tls->ctx = tls_client_new(tls, config_tls_error, &tw);
}

static void
config_parse_listeners(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item, *addr_node;
	size_t i, j, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "at least one listener is required");
		return;
	}
	cfg->listeners = config_xcalloc(n, sizeof(*cfg->listeners));
	cfg->nlisteners = n;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, item, &config_listener_section, &cfg->listeners[i]);
		config_where_pop(ctx, saved);
		if (cfg->listeners[i].addr.text == NULL)
			continue;
		for (j = 0; j < i; j++) {
			if (cfg->listeners[j].addr.text == NULL ||
			    !config_addr_same(&cfg->listeners[i].addr, &cfg->listeners[j].addr))
				continue;
			addr_node = config_map_get(ctx, item, "listen");
			saved = config_where_push(ctx, "[%zu].listen", i);
			config_error(ctx, addr_node, "duplicate listener address %s (first at line %zu)",
			    cfg->listeners[i].addr.text,
			    config_map_get(ctx, config_list_item(ctx, node, j),
			    "listen")->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
	}
}

static void
config_parse_servers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;
	struct config_server *srv;
	const yaml_node_t *item;
	const char *text, *why;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "an upstream needs at least one server");
		return;
	}
	up->servers = config_xcalloc(n, sizeof(*up->servers));
	up->nservers = n;
	for (i = 0; i < n; i++) {
		srv = &up->servers[i];
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		if (item->type == YAML_MAPPING_NODE) {
			config_parse_map(ctx, item, &config_server_section, srv);
			item = config_map_get(ctx, item, "address");
		} else if ((text = config_scalar(ctx, item, "an address or a mapping")) != NULL) {
			srv->weight = 1;
			if ((why = config_addr_parse(text, &srv->addr)) != NULL)
				config_error(ctx, item, "invalid address \"%s\": %s", text, why);
		}
		if (srv->addr.text != NULL && config_addr_is_any(&srv->addr))
			config_error(ctx, item, "%s is a wildcard address, not a server",
			    srv->addr.text);
		config_where_pop(ctx, saved);
	}
}

static void
config_parse_upstreams(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k;
	const char *name;
	size_t i, n, saved;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of name -> upstream, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	cfg->upstreams = config_xcalloc(n, sizeof(*cfg->upstreams));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		if ((name = config_scalar(ctx, k, "an upstream name")) == NULL)
			continue;
		if (name[0] == '\0') {
			config_error(ctx, k, "an upstream name must not be empty");
			continue;
		}
		for (i = 0; i < cfg->nupstreams; i++)
			if (strcmp(cfg->upstreams[i].name, name) == 0)
				break;
		if (i < cfg->nupstreams) {
			config_error(ctx, k, "duplicate upstream '%s'", name);
			continue;
		}
		cfg->upstreams[cfg->nupstreams].name = config_xstrdup(name);
		saved = config_where_push(ctx, ".%s", name);
		config_parse_object(ctx, config_node(ctx, pair->value), &config_upstream_section,
		    &cfg->upstreams[cfg->nupstreams]);
		config_where_pop(ctx, saved);
		cfg->nupstreams++;
	}
}

/* A path-like string that must start with '/'; NULL after an error. */
static char *
config_path_value(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *text = config_string(ctx, node);

	if (text == NULL)
		return NULL;
	if (text[0] != '/') {
		config_error(ctx, node, "must start with '/', got \"%s\"", text);
		return NULL;
	}
	return config_xstrdup(text);
}

static void
config_parse_route_name(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *text;

	if (node != NULL && (text = config_string(ctx, node)) != NULL)
		route->name = config_xstrdup(text);
}

static void
config_parse_route_host(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *text, *colon;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	colon = strrchr(text, ':');
	if (colon != NULL && (text[0] != '[' || strchr(colon, ']') == NULL)) {
		config_error(ctx, node, "must be a host name without a port, got \"%s\"", text);
		return;
	}
	route->host = config_xstrdup(text);
	for (i = 0; route->host[i] != '\0'; i++)
		route->host[i] = (char)tolower((unsigned char)route->host[i]);
	/* "example.com." and "example.com" are the same host */
	if (i > 1 && route->host[i - 1] == '.')
		route->host[i - 1] = '\0';
}

static void
config_parse_route_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node != NULL)
		route->path = config_path_value(ctx, node);
}

static void
config_parse_route_path_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node != NULL)
		route->path_prefix = config_path_value(ctx, node);
}

static void
config_parse_route_strip(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node != NULL)
		route->strip_prefix = config_path_value(ctx, node);
}

static void
config_parse_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text;
	char upper[16];
	size_t i, j, n, len;
	unsigned bit;

	route->methods = METHOD_ANY;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "an empty list allows no method; omit it to allow all");
		return;
	}
	route->methods = 0;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		/* names are case-sensitive on the wire, but get GET is clearly meant */
		len = strlen(text);
		for (j = 0; j < len && j < sizeof(upper); j++)
			upper[j] = (char)toupper((unsigned char)text[j]);
		bit = len < sizeof(upper) ? config_method_bit(upper, len) : METHOD_OTHER;
		if (bit == METHOD_OTHER) {
			config_error(ctx, item, "unknown method \"%s\"; expected one of: GET, HEAD, "
			    "POST, PUT, DELETE, OPTIONS, PATCH, TRACE, CONNECT", text);
			continue;
		}
		route->methods |= bit;
		/* as in nginx: allowing GET allows HEAD */
		if (bit == METHOD_GET)
			route->methods |= METHOD_HEAD;
	}
	if (route->methods == 0)
		route->methods = METHOD_ANY;
}

static void
config_parse_route_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *text;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	for (i = 0; i < ctx->cfg->nupstreams; i++) {
		if (strcmp(ctx->cfg->upstreams[i].name, text) == 0) {
			route->upstream = &ctx->cfg->upstreams[i];
			return;
		}
	}
	config_error(ctx, node, "unknown upstream '%s'", text);
}

static void
config_json_types_free(char **types)
{
	size_t i;

	if (types == NULL)
		return;
	for (i = 0; types[i] != NULL; i++)
		free(types[i]);
	free(types);
}

static void
config_parse_json_types(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text, *slash;
	size_t i, j, n, count = 0;
	char *t;

	if (node == NULL) {
		route->json_types = config_xcalloc(3, sizeof(char *));
		route->json_types[0] = config_xstrdup("application/json");
		route->json_types[1] = config_xstrdup("application/*+json");
		return;
	}
	if (config_list(ctx, node) == NULL) {
		route->json_types = config_xcalloc(1, sizeof(char *));
		return;
	}
	n = config_list_len(node);
	route->json_types = config_xcalloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		slash = strchr(text, '/');
		if (slash == NULL || slash == text || slash[1] == '\0' ||
		    strchr(slash + 1, '/') != NULL || strpbrk(text, " \t;,") != NULL) {
			config_error(ctx, item, "expected a media type like application/json, "
			    "got \"%s\"", text);
			continue;
		}
		t = config_xstrdup(text);
		for (j = 0; t[j] != '\0'; j++)
			t[j] = (char)tolower((unsigned char)t[j]);
		route->json_types[count++] = t;
	}
}

static void
config_parse_ops(struct config_parse *ctx, const yaml_node_t *node,
    struct rewrite_program **out)
{
	if (node == NULL)
		return;
	if (config_list(ctx, node) == NULL)
		return;
	rewrite_program_parse(ctx, ctx->doc, (yaml_node_t *)node, out);
}

static void
config_parse_request_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, &((struct config_route *)obj)->request);
}

static void
config_parse_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, &((struct config_route *)obj)->response);
}

/* Checks that need the whole route: exclusive keys, a strip_prefix that can apply. */
static void
config_check_route(struct config_parse *ctx, const yaml_node_t *item, struct config_route *route)
{
	const yaml_node_t *match = config_map_get(ctx, item, "match");
	const char *path = route->path ? route->path : route->path_prefix;
	size_t saved;

	if (route->path != NULL && route->path_prefix != NULL) {
		saved = config_where_key(ctx, "match");
		config_error(ctx, config_map_get(ctx, match, "path_prefix"),
		    "path and path_prefix cannot both be set");
		config_where_pop(ctx, saved);
		return;
	}
	if (route->strip_prefix != NULL && path != NULL &&
	    strncmp(path, route->strip_prefix, strlen(route->strip_prefix)) != 0) {
		saved = config_where_key(ctx, "strip_prefix");
		config_error(ctx, config_map_get(ctx, item, "strip_prefix"),
		    "'%s' is not a prefix of the matched path '%s', so it would never apply",
		    route->strip_prefix, path);
		config_where_pop(ctx, saved);
	}
}

static void
config_parse_routes(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	struct config_route *route;
	const yaml_node_t *item;
	size_t i, j, n, saved, rsaved;
	char name[32];

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	cfg->routes = config_xcalloc(n, sizeof(*cfg->routes));
	cfg->nroutes = n;
	for (i = 0; i < n; i++) {
		route = &cfg->routes[i];
		item = config_list_item(ctx, node, i);
		rsaved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, item, &config_route_section, route);
		if (route->methods == 0)
			route->methods = METHOD_ANY;
		if (item->type == YAML_MAPPING_NODE)
			config_check_route(ctx, item, route);
		for (j = 0; route->name != NULL && j < i; j++) {
			if (cfg->routes[j].name == NULL || strcmp(cfg->routes[j].name, route->name))
				continue;
			saved = config_where_key(ctx, "name");
			config_error(ctx, config_map_get(ctx, item, "name"),
			    "duplicate route name '%s' (first at line %zu)", route->name,
			    config_map_get(ctx, config_list_item(ctx, node, j),
			    "name")->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
		config_where_pop(ctx, rsaved);
	}
	/* unnamed routes are named after their position, as in error messages */
	for (i = 0; i < n; i++) {
		if (cfg->routes[i].name == NULL) {
			snprintf(name, sizeof(name), "routes[%zu]", i);
			cfg->routes[i].name = config_xstrdup(name);
		}
	}
}

/* ------------------------------------------------------------------ load and free */

static void
config_upstream_free(struct config_upstream *up)
{
	size_t i;

	for (i = 0; i < up->nservers; i++)
		config_addr_free(&up->servers[i].addr);
	free(up->servers);
	free(up->name);
	free(up->host_header);
	if (up->tls != NULL) {
		tls_client_free(up->tls->ctx);
		free(up->tls->ca);
		free(up->tls->server_name);
		free(up->tls->cert);
		free(up->tls->key);
		free(up->tls);
	}
}

static void
config_listener_free(struct config_listener *l)
{
	size_t i;

	config_addr_free(&l->addr);
	if (l->tls == NULL)
		return;
	tls_server_free(l->tls->ctx);
	for (i = 0; i < l->tls->ncerts; i++) {
		free(l->tls->certs[i].cert);
		free(l->tls->certs[i].key);
	}
	free(l->tls->certs);
	free(l->tls->ciphers);
	free(l->tls->client_ca);
	free(l->tls);
}

static void
config_route_free(struct config_route *route)
{
	free(route->name);
	free(route->host);
	free(route->path);
	free(route->path_prefix);
	free(route->strip_prefix);
	config_json_types_free(route->json_types);
	rewrite_program_free(route->request);
	rewrite_program_free(route->response);
}

void
config_free(struct config *cfg)
{
	size_t i;

	if (cfg == NULL)
		return;
	free(cfg->path);
	free(cfg->user);
	free(cfg->access_log);
	config_addr_free(cfg->admin_listen);
	free(cfg->admin_listen);
	for (i = 0; i < cfg->nlisteners; i++)
		config_listener_free(&cfg->listeners[i]);
	free(cfg->listeners);
	/* upstreams array may be partly filled after errors: free every slot allocated */
	for (i = 0; i < cfg->nupstreams; i++)
		config_upstream_free(&cfg->upstreams[i]);
	free(cfg->upstreams);
	for (i = 0; i < cfg->nroutes; i++)
		config_route_free(&cfg->routes[i]);
	free(cfg->routes);
	free(cfg);
}

/* Checks across sections: the admin endpoint cannot share a listener's address. */
static void
config_check_top(struct config_parse *ctx, const yaml_node_t *root)
{
	const struct config *cfg = ctx->cfg;
	size_t i, saved;

	if (cfg->admin_listen == NULL)
		return;
	for (i = 0; i < cfg->nlisteners; i++) {
		if (cfg->listeners[i].addr.text == NULL ||
		    !config_addr_same(cfg->admin_listen, &cfg->listeners[i].addr))
			continue;
		saved = config_where_key(ctx, "admin.listen");
		config_error(ctx, config_map_get(ctx, config_map_get(ctx, root, "admin"), "listen"),
		    "%s is already used by listeners[%zu]", cfg->admin_listen->text, i);
		config_where_pop(ctx, saved);
		break;
	}
}

/*
 * libyaml's problem at its position, with where the construct it was reading began.  Reader
 * errors (bad UTF-8, control bytes) carry only a byte offset: count lines up to it.
 */
static void
config_syntax_error(struct config_parse *ctx, const yaml_parser_t *parser, FILE *fp)
{
	const char *problem = parser->problem ? parser->problem : "YAML syntax error";
	yaml_mark_t mark;
	size_t off;
	int c, err = errno;

	if (parser->error == YAML_READER_ERROR) {
		if (ferror(fp)) {
			config_error(ctx, NULL, "cannot read: %s", strerror(err));
			return;
		}
		memset(&mark, 0, sizeof(mark));
		rewind(fp);
		for (off = 0; off < parser->problem_offset && (c = getc(fp)) != EOF; off++) {
			if (c == '\n') {
				mark.line++;
				mark.column = 0;
			} else if ((c & 0xc0) != 0x80)
				mark.column++;  /* count characters, not UTF-8 continuation bytes */
		}
		config_error_at(ctx, mark, "%s (byte 0x%02x)", problem,
		    (unsigned)parser->problem_value & 0xff);
		return;
	}
	if (parser->context != NULL)
		config_error_at(ctx, parser->problem_mark, "%s (%s at %zu:%zu)",
		    problem, parser->context, parser->context_mark.line + 1,
		    parser->context_mark.column + 1);
	else
		config_error_at(ctx, parser->problem_mark, "%s", problem);
}

static void
config_load_doc(struct config_parse *ctx, FILE *fp)
{
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	yaml_node_t *root;

	if (!yaml_parser_initialize(&parser)) {
		config_error(ctx, NULL, "cannot initialise the YAML parser");
		return;
	}
	yaml_parser_set_input_file(&parser, fp);
	if (!yaml_parser_load(&parser, &doc)) {
		config_syntax_error(ctx, &parser, fp);
		yaml_parser_delete(&parser);
		return;
	}
	ctx->doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root == NULL)
		config_error(ctx, NULL, "the configuration is empty");
	else {
		config_parse_map(ctx, root, &config_top_section, ctx->cfg);
		config_check_top(ctx, root);
	}

	/* A second document would be silently ignored: say so instead. */
	if (root != NULL) {
		if (!yaml_parser_load(&parser, &extra))
			config_syntax_error(ctx, &parser, fp);
		else {
			if (yaml_document_get_root_node(&extra) != NULL)
				config_error(ctx, yaml_document_get_root_node(&extra),
				    "only one YAML document is allowed");
			yaml_document_delete(&extra);
		}
	}
	ctx->doc = NULL;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
}

struct config *
config_load(const char *path, char **errors)
{
	struct config_parse *ctx;
	struct config *cfg;
	FILE *fp;

	*errors = NULL;
	ctx = config_parse_new(path);
	cfg = config_xcalloc(1, sizeof(*cfg));
	cfg->path = config_xstrdup(path);
	ctx->cfg = cfg;
	if ((fp = fopen(path, "rb")) == NULL)
		config_error(ctx, NULL, "cannot open: %s", strerror(errno));
	else {
		config_load_doc(ctx, fp);
		fclose(fp);
	}
	if (ctx->nerrs > 0) {
		*errors = config_parse_errors(ctx);
		config_free(cfg);
		cfg = NULL;
	}
	config_parse_free(ctx);
	return cfg;
}

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
		else if (strcmp(path, "upstreams.") == 0)
			config_schema_write_section(fp, "upstreams.NAME.", &config_upstream_section);
		else if (strcmp(path, "upstreams.NAME.servers.") == 0)
			config_schema_write_section(fp, "upstreams.NAME.servers[].",
			    &config_server_section);
		else if (strcmp(path, "routes.") == 0)
			config_schema_write_section(fp, "routes[].", &config_route_section);
	}
}

void
config_schema_write(FILE *fp)
{
	config_schema_write_section(fp, "", &config_top_section);
}
