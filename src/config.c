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
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envelope.h"
#include "header_ops.h"
#include "headers.h"
#include "jcond.h"
#include "jprefix.h"
#include "rewrite.h"
#include "route.h"
#include "template.h"
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

/* ------------------------------------------------------------------ allocation */

static void __attribute__((noreturn))
config_oom(void)
{
	fputs("jsongate: out of memory loading the configuration\n", stderr);
	abort();
}

static void *
config_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		config_oom();
	return p;
}

static void *
config_xreallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		config_oom();
	if ((p = realloc(p, n * size)) == NULL)
		config_oom();
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

/* A message quotes what the file holds: control bytes (a multi-line scalar) become escapes,
 * so that every error stays one line. */
static char *
config_error_line(char *msg)
{
	size_t i, n = 0;
	char *out, *p;

	for (i = 0; msg[i] != '\0'; i++)
		n += (unsigned char)msg[i] < 0x20 ? 4 : 1;
	if (n == i)
		return msg;
	p = out = config_xcalloc(1, n + 1);
	for (i = 0; msg[i] != '\0'; i++) {
		unsigned char c = (unsigned char)msg[i];

		if (c >= 0x20)
			*p++ = (char)c;
		else if (c == '\n' || c == '\t' || c == '\r') {
			*p++ = '\\';
			*p++ = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
		} else
			p += snprintf(p, 5, "\\x%02x", c);
	}
	free(msg);
	return out;
}

void
config_error(struct config_parse *ctx, const yaml_node_t *node, const char *fmt, ...)
{
	struct config_err *e;
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = config_error_line(config_xvasprintf(fmt, ap));
	va_end(ap);

	if (ctx->nerrs == ctx->errcap) {
		ctx->errcap = ctx->errcap ? ctx->errcap * 2 : 8;
		ctx->errs = config_xreallocarray(ctx->errs, ctx->errcap, sizeof(*ctx->errs));
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
	for (i = 0; i < ctx->npending; i++)
		free(ctx->pending[i].where);
	free(ctx->pending);
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

const struct route_pattern *
config_parse_pattern(const struct config_parse *ctx)
{
	return ctx->current != NULL ? ctx->current->pattern : NULL;
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

/* The reason config_addr_parse gives for a host that is neither a number nor localhost. */
static const char config_addr_not_numeric[] =
    "host must be a numeric IPv4 address, [IPv6], * or localhost (names are not resolved)";

/* "8080" -> 8080; NULL, or the reason it is not a port. */
static const char *
config_port_parse(const char *text, uint16_t *port)
{
	const char *end;
	unsigned long v;

	if (*text == '\0')
		return "missing port";
	for (end = text; isdigit((unsigned char)*end); end++)
		;
	if (*end != '\0')
		return "the port must be a number";
	if (end - text > 5 || (v = strtoul(text, NULL, 10)) == 0 || v > 65535)
		return "the port must be from 1 to 65535";
	*port = (uint16_t)v;
	return NULL;
}

/* As config_parse_addr, with the reason for a failure. */
static const char *
config_addr_parse(const char *text, struct config_addr *out)
{
	char host[INET6_ADDRSTRLEN + 1], canon[INET6_ADDRSTRLEN];
	const char *colon, *end, *why;
	struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;
	size_t hostlen;
	uint16_t port;
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

	if ((why = config_port_parse(colon + 1, &port)) != NULL)
		return why;

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
			return config_addr_not_numeric;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		out->sslen = sizeof(*sin);
		inet_ntop(AF_INET, &sin->sin_addr, canon, sizeof(canon));
	}
	out->port = port;
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
	free(addr->name);
	addr->text = addr->host = addr->name = NULL;
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
static const char *const config_failure_names[] = {
	"connect_error", "timeout", "reset", "invalid", "429", "500", "502", "503", "504", NULL
};

_Static_assert(sizeof(enum log_level) == sizeof(int) && sizeof(enum balance) == sizeof(int) &&
    sizeof(enum on_error) == sizeof(int) && sizeof(enum access_format) == sizeof(int) &&
    sizeof(enum validate_mode) == sizeof(int) && sizeof(enum compress_mode) == sizeof(int) &&
    sizeof(enum verify_client) == sizeof(int) && sizeof(enum merge_mode) == sizeof(int) &&
    sizeof(enum missing_mode) == sizeof(int) && sizeof(enum jsonrpc_split_mode) == sizeof(int),
    "CONFIG_ENUM stores enums as int");

static void config_parse_workers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_access(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_json_fields(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_path_fields(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_error_log(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_pid_file(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_listener_tls(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_upstream_tls(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_certificates(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_protocols(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_listeners(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_upstreams(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_servers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_hash_key(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_fail_on(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_retry_on(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_retry_budget(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_health(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_health_status(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_health_json(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_health_path(struct config_parse *, const yaml_node_t *, void *);
static char *config_path_value(struct config_parse *, const yaml_node_t *);
static void config_parse_server_address(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_routes(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_name(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_host(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_path(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_path_prefix(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_strip(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_methods(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_json(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_upstream(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backends(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_upstream(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_path(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_method(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_after(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_headers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_ops(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_backend_missing(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_route_jsonrpc(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_methods(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_default(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_allow(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_deny(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_match(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_prefix(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_name_prefix(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_jsonrpc_upstream(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_json_types(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_request_ops(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_response_ops(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_response_on(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_error_response_ops(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_request_headers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_response_headers(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_header_set(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_header_add(struct config_parse *, const yaml_node_t *, void *);
static void config_parse_header_remove(struct config_parse *, const yaml_node_t *, void *);

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
static const struct config_section config_health_section =
    CONFIG_SECTION_OF(config_health_fields);

static const struct config_field config_upstream_fields[] = {
	F_CUSTOM("servers", config_parse_servers, "list", NULL, CONFIG_REQUIRED,
	    "list of ADDRESS or { address: ADDRESS, weight: N, backup: B, max_fails: N, "
	    "max_connections: N }"),
	F_ENUM("balance", struct config_upstream, balance, "round_robin", config_balances,
	    "server selection: round_robin, least_conn or hash"),
	F_CUSTOM("hash_key", config_parse_hash_key, "variable", NULL, 0,
	    "balance: hash key: $remote_addr, $request_uri, $path, $host, $header.NAME or "
	    "$json.PATH"),
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
static const struct config_section config_upstream_section =
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
static const struct config_section config_header_ops_section =
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
	F_SECTION("timeouts", config_route_timeouts_section,
	    "upstream timeouts of the route instead of the global ones"),
	F_CUSTOM("request_headers", config_parse_request_headers, "mapping", NULL, 0,
	    "headers set, added or removed on requests: { set, add, remove }"),
	F_CUSTOM("response_headers", config_parse_response_headers, "mapping", NULL, 0,
	    "headers set, added or removed on upstream answers: { set, add, remove }"),
};
static const struct config_section config_route_section = CONFIG_SECTION_OF(config_route_fields);

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
static const struct config_section config_backend_section =
    CONFIG_SECTION_OF(config_backend_fields);

static const struct config_field config_jsonrpc_method_fields[] = {
	F_CUSTOM("match", config_parse_jsonrpc_match, "string", NULL, 0,
	    "the method's name (match or prefix is required)"),
	F_CUSTOM("prefix", config_parse_jsonrpc_prefix, "string", NULL, 0,
	    "the start of the names of the methods it takes"),
	F_CUSTOM("upstream", config_parse_jsonrpc_upstream, "string", NULL, CONFIG_REQUIRED,
	    "name of the upstream the calls go to"),
};
static const struct config_section config_jsonrpc_method_section =
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
static const struct config_section config_jsonrpc_section =
    CONFIG_SECTION_OF(config_jsonrpc_fields);

/* allow and deny items written as { prefix: P } */
static const struct config_field config_jsonrpc_name_fields[] = {
	F_CUSTOM("prefix", config_parse_jsonrpc_name_prefix, "string", NULL, CONFIG_REQUIRED,
	    "the start of the method names"),
};
static const struct config_section config_jsonrpc_name_section =
    CONFIG_SECTION_OF(config_jsonrpc_name_fields);

static const struct config_field config_top_fields[] = {
	F_CUSTOM("workers", config_parse_workers, "integer|auto", "auto", 0,
	    "event-loop threads; auto = number of CPUs"),
	F_STRING("user", struct config, user, NULL, "user to switch to after binding"),
	F_CUSTOM("pid_file", config_parse_pid_file, "file", NULL, 0,
	    "file the process id is written to once the listeners are bound; removed at exit"),
	F_SECTION("log", config_log_section, "logging"),
	F_SECTION("admin", config_admin_section, "admin endpoint; none when absent"),
	F_SECTION("limits", config_limits_section, "size and count limits"),
	F_SECTION("timeouts", config_timeouts_section, "timeouts"),
	F_ADDR_PTR("resolver", struct config, resolver,
	    "nameserver for server names, IPv4:PORT or [IPv6]:PORT; default /etc/resolv.conf's"),
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
		if (size > f->max) {
			config_size_text(f->max, buf, sizeof(buf));
			config_error(ctx, node, "must be at most %s", buf);
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
		int absent = config_is_null(vals[i]) &&
		    !(vals[i] != NULL && (f->flags & CONFIG_NULL_VALUE));

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

/* Make a relative file name relative to the configuration file's directory: every file the
 * configuration names is found the same way, whatever the working directory. */
static void
config_resolve_path(struct config_parse *ctx, char **path)
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
config_parse_error_log(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text;
	char *socket_path;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->error_log);
	cfg->error_log = NULL;
	if (strcmp(text, "stderr") == 0 || strcmp(text, "syslog") == 0) {
		cfg->error_log = config_xstrdup(text);
	} else if (strncmp(text, "syslog:", 7) == 0) {
		if (text[7] == '\0') {
			config_error(ctx, node, "syslog: needs the socket after the colon, "
			    "as in syslog:/dev/log");
			return;
		}
		socket_path = config_xstrdup(text + 7);
		config_resolve_path(ctx, &socket_path);
		cfg->error_log = config_xasprintf("syslog:%s", socket_path);
		free(socket_path);
	} else {
		cfg->error_log = config_xstrdup(text);
		config_resolve_path(ctx, &cfg->error_log);
		cfg->error_log_mark = node->start_mark;
	}
}

static void
config_parse_pid_file(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->pid_file);
	cfg->pid_file = config_xstrdup(text);
	config_resolve_path(ctx, &cfg->pid_file);
	cfg->pid_file_mark = node->start_mark;
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
	if (cfg->access_log != NULL && strcmp(cfg->access_log, "stderr") != 0) {
		config_resolve_path(ctx, &cfg->access_log);
		cfg->access_log_mark = node->start_mark;
	}
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

/* A dotted path of a request body field ($json.PATH); 0, or -1 after an error. */
static int
config_json_path(struct config_parse *ctx, const yaml_node_t *node, const char *text)
{
	struct jcond_seg segs[JPREFIX_MAX_PATH];

	if (jprefix_path(text, strlen(text), segs) != 0)
		return 0;
	config_error(ctx, node, "expected a field or a dotted path of at most %d keys such as "
	    "user.id, got \"%s\"", JPREFIX_MAX_PATH, text);
	return -1;
}

/* log.json_fields: paths of body fields for the access log; its json format only. */
static void
config_parse_json_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) > CONFIG_MAX_JSON_FIELDS) {
		config_error(ctx, node, "at most %d fields", CONFIG_MAX_JSON_FIELDS);
		return;
	}
	if (n != 0 && cfg->access_format != ACCESS_JSON) {
		config_error(ctx, node, "only the json access log format has body fields");
		return;
	}
	cfg->json_fields = config_xcalloc(n, sizeof(*cfg->json_fields));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) != NULL &&
		    config_json_path(ctx, item, text) == 0)
			cfg->json_fields[cfg->njson_fields++] = config_xstrdup(text);
	}
}

/* log.path_fields: names of path template captures for the access log; json format only. */
static void
config_parse_path_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, j, n;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) > CONFIG_MAX_PATH_FIELDS) {
		config_error(ctx, node, "at most %d captures", CONFIG_MAX_PATH_FIELDS);
		return;
	}
	if (n != 0 && cfg->access_format != ACCESS_JSON) {
		config_error(ctx, node, "only the json access log format has path captures");
		return;
	}
	cfg->path_fields = config_xcalloc(n, sizeof(*cfg->path_fields));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		j = strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
		if (text[0] == '\0' || text[j] != '\0')
			config_error(ctx, item, "expected the name of a capture ({NAME} of a path "
			    "template: letters, digits, '_' and '-'), got \"%s\"", text);
		else
			cfg->path_fields[cfg->npath_fields++] = config_xstrdup(text);
	}
}

/* ------------------------------------------------------------------ TLS */

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
		config_resolve_path(ctx, &tls->certs[i].cert);
		config_resolve_path(ctx, &tls->certs[i].key);
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
	config_resolve_path(ctx, &tls->client_ca);
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
	config_resolve_path(ctx, &tls->ca);
	config_resolve_path(ctx, &tls->cert);
	config_resolve_path(ctx, &tls->key);
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

/* ------------------------------------------------------------------ servers by name */

/*
 * A DNS host name: dot-separated labels of 1 to 63 letters, digits, '-' or '_', 253
 * characters at most, and not only digits and dots (that is a bad IPv4 address).
 */
static int
config_host_is_name(const char *s, size_t len)
{
	size_t i, label = 0;
	int alpha = 0;

	if (len == 0 || len > 253)
		return 0;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '.') {
			if (label == 0)
				return 0;
			label = 0;
			continue;
		}
		if (!isalnum(c) && c != '-' && c != '_')
			return 0;
		alpha |= !isdigit(c);
		if (++label > 63)
			return 0;
	}
	return label > 0 && alpha;
}

/*
 * A server's address: as config_addr_parse, or NAME:PORT with a host name other than
 * localhost, left unresolved (out->name set, out->sslen 0).  NULL, or the reason it is
 * neither.
 */
static const char *
config_server_addr_parse(const char *text, struct config_addr *out)
{
	const char *colon = strrchr(text, ':'), *why;
	size_t i, len = colon != NULL ? (size_t)(colon - text) : 0;
	uint16_t port;

	/* "api.internal.": the final dot only says the name is complete */
	if (len > 1 && text[len - 1] == '.' && text[len - 2] != '.')
		len--;
	if (colon != NULL && config_host_is_name(text, len) &&
	    !(len == 9 && strncasecmp(text, "localhost", 9) == 0)) {
		memset(out, 0, sizeof(*out));
		if ((why = config_port_parse(colon + 1, &port)) != NULL)
			return why;
		out->port = port;
		out->text = config_xstrdup(text);
		out->name = config_xcalloc(1, len + 1);
		for (i = 0; i < len; i++)
			out->name[i] = (char)tolower((unsigned char)text[i]);
		return NULL;
	}
	why = config_addr_parse(text, out);
	return why == config_addr_not_numeric ?
	    "host must be an IPv4 address, [IPv6], localhost or a host name" : why;
}

/* Parse a server's address into srv; a name is queued for the lookups after the parse. */
static void
config_server_address(struct config_parse *ctx, const yaml_node_t *node,
    struct config_server *srv, const char *expected)
{
	struct config_pending_name *p;
	const char *text, *why;

	if ((text = config_scalar(ctx, node, expected)) == NULL)
		return;
	if ((why = config_server_addr_parse(text, &srv->addr)) != NULL) {
		config_error(ctx, node, "invalid address \"%s\": %s", text, why);
		return;
	}
	if (srv->addr.name == NULL) {
		if (config_addr_is_any(&srv->addr))
			config_error(ctx, node, "%s is a wildcard address, not a server",
			    srv->addr.text);
		return;
	}
	if (ctx->npending == ctx->pendingcap) {
		ctx->pendingcap = ctx->pendingcap ? ctx->pendingcap * 2 : 8;
		ctx->pending = config_xreallocarray(ctx->pending, ctx->pendingcap,
		    sizeof(*ctx->pending));
	}
	p = &ctx->pending[ctx->npending++];
	p->srv = srv;
	p->node = node;
	p->where = config_xstrdup(ctx->where);
}

static void
config_parse_server_address(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	if (node != NULL)
		config_server_address(ctx, node, obj, "an address");
}

size_t
config_servers_from_name(const struct config_server_name *entry,
    const struct resolver_answer *ans, struct config_server **out)
{
	struct config_server *servers = config_xcalloc(ans->naddrs, sizeof(*servers));
	char host[INET6_ADDRSTRLEN];
	size_t i;

	for (i = 0; i < ans->naddrs; i++) {
		struct config_addr *a = &servers[i].addr;
		const struct resolver_addr *ra = &ans->addrs[i];

		servers[i] = entry->settings;
		memset(a, 0, sizeof(*a));
		resolver_addr_text(ra, host, sizeof(host));
		if (ra->family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;
			sin->sin_family = AF_INET;
			sin->sin_port = htons(entry->port);
			memcpy(&sin->sin_addr, ra->ip, 4);
			a->sslen = sizeof(*sin);
			a->text = config_xasprintf("%s:%u", host, (unsigned)entry->port);
		} else {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;
			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons(entry->port);
			memcpy(&sin6->sin6_addr, ra->ip, 16);
			a->sslen = sizeof(*sin6);
			a->text = config_xasprintf("[%s]:%u", host, (unsigned)entry->port);
		}
		a->host = config_xstrdup(host);
		a->port = entry->port;
		a->name = config_xstrdup(entry->host);
	}
	*out = servers;
	return ans->naddrs;
}

void
config_servers_free(struct config_server *servers, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		config_addr_free(&servers[i].addr);
	free(servers);
}

/* Replace each named server of up by the servers of its name's answer (hosts[h] answered
 * answers[h]; a name that failed leaves none). */
static void
config_expand_names(struct config_upstream *up, const char *const *hosts, size_t nhosts,
    const struct resolver_answer *answers)
{
	struct config_server *servers, *made;
	struct config_server_name *e;
	size_t i, h, k, n = 0, total = 0, nnames = 0;

	for (i = 0; i < up->nservers; i++) {
		if (up->servers[i].addr.name == NULL) {
			total++;
			continue;
		}
		for (h = 0; h < nhosts && strcmp(hosts[h], up->servers[i].addr.name) != 0; h++)
			;
		total += h < nhosts ? answers[h].naddrs : 0;
		nnames++;
	}
	if (nnames == 0)
		return;
	servers = config_xcalloc(total, sizeof(*servers));
	up->names = config_xcalloc(nnames, sizeof(*up->names));
	for (i = 0; i < up->nservers; i++) {
		struct config_server *srv = &up->servers[i];

		if (srv->addr.name == NULL) {
			servers[n++] = *srv;
			continue;
		}
		e = &up->names[up->nnames++];
		e->host = srv->addr.name;
		e->port = srv->addr.port;
		e->entry = i;
		e->settings = *srv;
		memset(&e->settings.addr, 0, sizeof(e->settings.addr));
		free(srv->addr.text);
		for (h = 0; h < nhosts && strcmp(hosts[h], e->host) != 0; h++)
			;
		if (h == nhosts)
			continue;
		if (resolver_answer_copy(&e->answer, &answers[h]) < 0)
			config_oom();
		e->first = n;
		e->count = config_servers_from_name(e, &e->answer, &made);
		for (k = 0; k < e->count; k++)
			servers[n++] = made[k];
		free(made);
	}
	free(up->servers);
	up->servers = servers;
	up->nservers = n;
}

/*
 * Resolve every server name at once with the configured resolver, reporting each one that
 * does not resolve at the place it is written, and expand the named servers.
 */
static void
config_resolve_names(struct config_parse *ctx, const yaml_node_t *root)
{
	struct config *cfg = ctx->cfg;
	const yaml_node_t *rnode = config_map_get(ctx, root, "resolver");
	const struct config_addr *ns = cfg->resolver;
	struct resolver_answer *answers;
	const char **hosts;
	char err[256];
	size_t i, h, nhosts = 0, saved;
	int *errors;

	if (ns != NULL && config_addr_is_any(ns)) {
		saved = config_where_key(ctx, "resolver");
		config_error(ctx, rnode, "%s is a wildcard address, not a nameserver", ns->text);
		config_where_pop(ctx, saved);
		return;
	}
	/* without the nameserver the user meant, the lookups would say nothing true */
	if (ctx->npending == 0 || (ns == NULL && !config_is_null(rnode)))
		return;
	hosts = config_xcalloc(ctx->npending, sizeof(*hosts));
	for (i = 0; i < ctx->npending; i++) {
		for (h = 0; h < nhosts && strcmp(hosts[h], ctx->pending[i].srv->addr.name); h++)
			;
		if (h == nhosts)
			hosts[nhosts++] = ctx->pending[i].srv->addr.name;
	}
	answers = config_xcalloc(nhosts, sizeof(*answers));
	errors = config_xcalloc(nhosts, sizeof(*errors));
	if (resolver_lookup_sync(ns ? (const struct sockaddr *)&ns->ss : NULL, ns ? ns->sslen : 0,
	    hosts, nhosts, answers, errors, err, sizeof(err)) < 0) {
		saved = config_where_key(ctx, "resolver");
		config_error(ctx, rnode, "cannot set up the resolver: %s", err);
		config_where_pop(ctx, saved);
	} else {
		for (i = 0; i < ctx->npending; i++) {
			for (h = 0; strcmp(hosts[h], ctx->pending[i].srv->addr.name) != 0; h++)
				;
			if (errors[h] == 0)
				continue;
			saved = config_where_push(ctx, "%s", ctx->pending[i].where);
			config_error(ctx, ctx->pending[i].node, "cannot resolve \"%s\": %s",
			    hosts[h], resolver_strerror(errors[h]));
			config_where_pop(ctx, saved);
		}
		for (i = 0; i < cfg->nupstreams; i++)
			config_expand_names(&cfg->upstreams[i], hosts, nhosts, answers);
	}
	for (h = 0; h < nhosts; h++)
		resolver_answer_free(&answers[h]);
	free(answers);
	free(errors);
	free(hosts);
}

static void
config_parse_servers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;
	struct config_server *srv;
	const yaml_node_t *item;
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
		srv->max_fails = srv->max_connections = CONFIG_UNSET;
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		if (item->type == YAML_MAPPING_NODE)
			config_parse_map(ctx, item, &config_server_section, srv);
		else {
			srv->weight = 1;
			config_server_address(ctx, item, srv, "an address or a mapping");
		}
		config_where_pop(ctx, saved);
	}
}

/* A list of failure names into FAIL_* bits; node NULL: the default, connect_error, timeout
 * and reset. */
static void
config_parse_failures(struct config_parse *ctx, const yaml_node_t *node, unsigned *out)
{
	const yaml_node_t *item;
	const char *text;
	size_t i, n;
	unsigned k;

	*out = FAIL_CONNECT | FAIL_TIMEOUT | FAIL_RESET;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	*out = 0;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_scalar(ctx, item, "a failure name")) == NULL)
			continue;
		if (strcmp(text, "5xx") == 0) {
			*out |= FAIL_5XX;
			continue;
		}
		for (k = 0; config_failure_names[k] != NULL; k++)
			if (strcmp(text, config_failure_names[k]) == 0)
				break;
		if (config_failure_names[k] == NULL) {
			config_error(ctx, item, "unknown failure \"%s\"; expected connect_error, "
			    "timeout, reset, invalid, 429, 500, 502, 503, 504 or 5xx", text);
			continue;
		}
		*out |= 1u << k;
	}
}

static void
config_parse_fail_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_failures(ctx, node, &((struct config_upstream *)obj)->fail_on);
}

static void
config_parse_retry_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_failures(ctx, node, &((struct config_upstream *)obj)->retry_on);
}

/* `retry_budget: 20` or `retry_budget: { percent: 20, min: 3 }`. */
static void
config_parse_retry_budget(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const struct config_field fields[] = {
		F_UINT("percent", struct config_upstream, retry_budget, "20", 0, 100,
		    "retries in flight as a percent of the requests in flight"),
		F_UINT("min", struct config_upstream, retry_budget_min, "3", 0, UINT32_MAX,
		    "retries in flight always allowed"),
	};
	static const struct config_section section = CONFIG_SECTION_OF(fields);
	struct config_upstream *up = obj;
	const char *text;

	if (node != NULL && node->type == YAML_MAPPING_NODE) {
		config_parse_map(ctx, node, &section, up);
		return;
	}
	up->retry_budget = 20;
	up->retry_budget_min = 3;
	if (node != NULL && (text = config_scalar(ctx, node, "a percent")) != NULL &&
	    config_parse_uint_text(text, 0, 100, &up->retry_budget) == -1)
		config_error(ctx, node, "expected a percent from 0 to 100 or "
		    "{ percent: P, min: N }, got \"%s\"", text);
}

/* A request variable the hash balancer can read. */
static void
config_parse_hash_key(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const char *const plain[] = {
		"$remote_addr", "$request_uri", "$path", "$host", NULL
	};
	struct config_upstream *up = obj;
	const char *text, *p;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	for (i = 0; plain[i] != NULL; i++)
		if (strcmp(text, plain[i]) == 0)
			break;
	if (plain[i] == NULL && strncmp(text, "$header.", 8) == 0 && text[8] != '\0') {
		for (p = text + 8; *p != '\0' && (isalnum((unsigned char)*p) || *p == '-' ||
		    *p == '_'); p++)
			;
		if (*p == '\0')
			i = 0;
	}
	if (plain[i] == NULL && strncmp(text, "$json.", 6) == 0) {
		if (config_json_path(ctx, node, text + 6) != 0)
			return;
		i = 0;
	}
	if (plain[i] == NULL && i != 0) {
		config_error(ctx, node, "expected $remote_addr, $request_uri, $path, $host, "
		    "$header.NAME or $json.PATH, got \"%s\"", text);
		return;
	}
	up->hash_key = config_xstrdup(text);
}

static void
config_parse_health_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_health *h = obj;

	if (node != NULL)
		h->path = config_path_value(ctx, node);
}

int
config_status_range(const char *text, unsigned *first, unsigned *last)
{
	const char *dots = strstr(text, "..");
	char lo[4];

	if (strlen(text) == 3 && text[0] >= '1' && text[0] <= '5' &&
	    (text[1] == 'x' || text[1] == 'X') && (text[2] == 'x' || text[2] == 'X')) {
		*first = (unsigned)(text[0] - '0') * 100;
		*last = *first + 99;
		return 0;
	}
	if (dots == NULL) {
		if (config_parse_uint_text(text, 100, 599, first) == -1)
			return -1;
		*last = *first;
		return 0;
	}
	if (dots - text != 3)
		return -1;
	memcpy(lo, text, 3);
	lo[3] = '\0';
	if (config_parse_uint_text(lo, 100, 599, first) == -1 ||
	    config_parse_uint_text(dots + 2, 100, 599, last) == -1)
		return -1;
	return *first <= *last ? 0 : -2;
}

/* A list of statuses, classes (2xx) and ranges (200..299) into set (bit code - 100); absent:
 * all of 2xx. */
static void
config_parse_status_set(struct config_parse *ctx, const yaml_node_t *node, uint64_t *set)
{
	const yaml_node_t *item;
	const char *text;
	unsigned c, first, last;
	size_t i, n;
	int r;

	memset(set, 0, CONFIG_STATUS_WORDS * sizeof(*set));
	if (node == NULL) {
		for (c = 200; c < 300; c++)
			set[(c - 100) / 64] |= 1ULL << ((c - 100) % 64);
		return;
	}
	if (config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_scalar(ctx, item, "a status")) == NULL)
			continue;
		if ((r = config_status_range(text, &first, &last)) != 0) {
			if (r == -2)
				config_error(ctx, item, "status range \"%s\" runs backwards: its "
				    "first status must not be above its last", text);
			else
				config_error(ctx, item, "expected " CONFIG_STATUS_FORMS ", got \"%s\"",
				    text);
			continue;
		}
		for (c = first; c <= last; c++)
			set[(c - 100) / 64] |= 1ULL << ((c - 100) % 64);
	}
}

static void
config_parse_health_status(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_status_set(ctx, node, ((struct config_health *)obj)->status);
}

/* expect.json: a condition on the JSON answer, as match.json and when: have (jcond.h). */
static void
config_parse_health_json(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	if (node != NULL)
		((struct config_health *)obj)->json = jcond_parse(ctx, ctx->doc, (yaml_node_t *)node);
}

static void
config_parse_health(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;

	if (node == NULL || config_is_null(node))
		return;
	up->health = config_xcalloc(1, sizeof(*up->health));
	config_parse_object(ctx, node, &config_health_section, up->health);
}

/* Per-server settings left out take the upstream's; checks that need the whole upstream. */
static void
config_check_upstream(struct config_parse *ctx, const yaml_node_t *node,
    struct config_upstream *up)
{
	size_t i, saved, primaries = 0;

	for (i = 0; i < up->nservers; i++) {
		struct config_server *srv = &up->servers[i];
		if (srv->max_fails == CONFIG_UNSET)
			srv->max_fails = up->max_fails;
		if (srv->max_connections == CONFIG_UNSET)
			srv->max_connections = up->max_connections;
		primaries += !srv->backup;
	}
	if (up->nservers != 0 && primaries == 0) {
		saved = config_where_key(ctx, "servers");
		config_error(ctx, config_map_get(ctx, node, "servers"),
		    "every server is a backup: at least one must not be");
		config_where_pop(ctx, saved);
	}
	if (up->balance == BALANCE_HASH && up->hash_key == NULL) {
		saved = config_where_key(ctx, "balance");
		config_error(ctx, config_map_get(ctx, node, "balance"),
		    "balance: hash needs hash_key");
		config_where_pop(ctx, saved);
	} else if (up->balance != BALANCE_HASH && up->hash_key != NULL) {
		saved = config_where_key(ctx, "hash_key");
		config_error(ctx, config_map_get(ctx, node, "hash_key"),
		    "hash_key is used only with balance: hash");
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
		if (config_node(ctx, pair->value)->type == YAML_MAPPING_NODE)
			config_check_upstream(ctx, config_node(ctx, pair->value),
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

/* An exact path, or with a segment in braces a path template. */
static void
config_parse_route_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *why;

	if (node == NULL || (route->path = config_path_value(ctx, node)) == NULL ||
	    strpbrk(route->path, "{}") == NULL)
		return;
	if ((route->pattern = route_pattern_new(route->path, &why)) == NULL)
		config_error(ctx, node, "%s, got \"%s\"", why, route->path);
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

/* match.json: one condition (jcond.h), or a list of conditions that must all hold. */
static void
config_parse_route_json(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	struct jcond *c;
	size_t i, n = 1;

	if (node == NULL)
		return;
	if (node->type == YAML_SEQUENCE_NODE && (n = config_list_len(node)) == 0) {
		config_error(ctx, node, "expected a condition or a non-empty list of conditions");
		return;
	}
	route->json_match = config_xcalloc(n, sizeof(*route->json_match));
	for (i = 0; i < n; i++) {
		item = node->type == YAML_SEQUENCE_NODE ? config_list_item(ctx, node, i) : node;
		if ((c = jcond_parse(ctx, ctx->doc, (yaml_node_t *)item)) == NULL)
			continue;
		if (jcond_uses_status(c)) {
			config_error(ctx, item, "a request has no status: match.json tests fields");
			jcond_free(c);
			continue;
		}
		route->json_match[route->njson_match++] = c;
	}
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

/* The upstream named by node, or NULL after reporting it unknown. */
static struct config_upstream *
config_find_upstream(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *text;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return NULL;
	for (i = 0; i < ctx->cfg->nupstreams; i++)
		if (strcmp(ctx->cfg->upstreams[i].name, text) == 0)
			return &ctx->cfg->upstreams[i];
	config_error(ctx, node, "unknown upstream '%s'", text);
	return NULL;
}

static void
config_parse_route_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_route *)obj)->upstream = config_find_upstream(ctx, node);
}

static void
config_parse_backend_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_backend *)obj)->upstream = config_find_upstream(ctx, node);
}

/* The names a backend's templates may use: the route's captures, the answers it waits for. */
static void
config_backend_scope(struct config_parse *ctx, const struct config_backend *b,
    struct template_scope *scope, const char **names, unsigned *index)
{
	size_t i;

	memset(scope, 0, sizeof(*scope));
	scope->pattern = ctx->route->pattern;
	for (i = 0; i < b->nafter; i++) {
		names[i] = ctx->route->backends[b->after[i]].name;
		index[i] = (unsigned)b->after[i];
	}
	scope->backends = names;
	scope->backend_index = index;
	scope->nbackends = b->nafter;
}

static int
config_template(struct config_parse *ctx, const yaml_node_t *node, const char *text,
    int target, const struct config_backend *b, struct template *t)
{
	const char *names[CONFIG_MAX_BACKENDS];
	unsigned index[CONFIG_MAX_BACKENDS];
	struct template_scope scope;
	char err[512];

	config_backend_scope(ctx, b, &scope, names, index);
	if (template_parse(t, text, target, &scope, err, sizeof(err)) < 0) {
		config_error(ctx, node, "%s", err);
		return -1;
	}
	return 0;
}

/* A request-target with ${variables}: '/' first, then visible ASCII without a fragment. */
static void
config_parse_backend_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;

	if (node == NULL || (b->path = config_path_value(ctx, node)) == NULL)
		return;
	config_template(ctx, node, b->path, 1, b, &b->target);
}

/* `after: user` or `after: [ user, account ]`: other backends of the route. */
static void
config_parse_backend_after(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const struct config_route *route = ctx->route;
	const yaml_node_t *item;
	const char *text;
	size_t i, j, n;

	if (node == NULL)
		return;
	n = node->type == YAML_SEQUENCE_NODE ? config_list_len(node) : 1;
	b->after = config_xcalloc(n, sizeof(*b->after));
	for (i = 0; i < n; i++) {
		item = node->type == YAML_SEQUENCE_NODE ? config_list_item(ctx, node, i) : node;
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		for (j = 0; j < route->nbackends && strcmp(route->backends[j].name, text); j++)
			;
		if (j == route->nbackends)
			config_error(ctx, item, "no backend '%s' in this route", text);
		else if (&route->backends[j] == b)
			config_error(ctx, item, "a backend cannot wait for itself");
		else
			b->after[b->nafter++] = j;
	}
}

/* Headers of a backend request: the ones jsongate frames or that are hop-by-hop are not
 * the configuration's to set. */
static void
config_parse_backend_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k, *v;
	const char *name, *value;
	struct http_str hn;
	size_t i, n;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of header name -> value, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	b->headers = config_xcalloc(n ? n : 1, sizeof(*b->headers));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		v = config_node(ctx, pair->value);
		if ((name = config_string(ctx, k)) == NULL)
			continue;
		hn.p = name;
		hn.len = strlen(name);
		if (!http_is_token(hn.p, hn.len)) {
			config_error(ctx, k, "\"%s\" is not a header name", name);
			continue;
		}
		/* Expect too: jsongate sends the body at once. */
		if (headers_is_hop_by_hop(hn) || HTTP_IEQ(hn.p, hn.len, "expect")) {
			config_error(ctx, k, "%s is set by jsongate itself (hop-by-hop or framing)",
			    name);
			continue;
		}
		for (i = 0; i < b->nheaders && !(strlen(b->headers[i].name) == hn.len &&
		    http_ieq(b->headers[i].name, name, hn.len)); i++)
			;
		if (i < b->nheaders) {
			config_error(ctx, k, "duplicate header '%s'", name);
			continue;
		}
		if ((value = config_scalar(ctx, v, "a header value")) == NULL ||
		    config_template(ctx, v, value, 0, b, &b->headers[b->nheaders].value) < 0)
			continue;
		b->headers[b->nheaders++].name = config_xstrdup(name);
	}
}

/* The methods a backend answer comes with a body to: not HEAD, CONNECT or TRACE. */
static void
config_parse_backend_method(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const unsigned allowed = METHOD_GET | METHOD_POST | METHOD_PUT | METHOD_PATCH |
	    METHOD_DELETE | METHOD_OPTIONS;
	struct config_backend *b = obj;
	const char *text = "GET";
	char upper[16];
	size_t i, len;

	if (node != NULL && (text = config_string(ctx, node)) == NULL)
		return;
	len = strlen(text);
	for (i = 0; i < len && i < sizeof(upper); i++)
		upper[i] = (char)toupper((unsigned char)text[i]);
	b->method_bit = len < sizeof(upper) ? config_method_bit(upper, len) : METHOD_OTHER;
	if ((b->method_bit & allowed) == 0) {
		config_error(ctx, node, "expected GET, POST, PUT, PATCH, DELETE or OPTIONS, got "
		    "\"%s\" (a backend's answer must have a body to merge)", text);
		return;
	}
	free(b->method);
	b->method = config_xcalloc(1, len + 1);
	memcpy(b->method, upper, len);
}

/* The name as the key of a JSON member, with its colon: "name": */
static void
config_backend_key(struct config_backend *b)
{
	size_t len = strlen(b->name);
	char *p = config_xcalloc(1, 6 * len + 4);

	p[0] = '"';
	len = 1 + rewrite_json_escape(p + 1, b->name, len);
	p[len++] = '"';
	p[len++] = ':';
	b->key_json = p;
	b->key_json_len = len;
}

/* Report a backend that waits, through after, for itself. */
static void
config_check_after(struct config_parse *ctx, const yaml_node_t *node,
    const struct config_route *route)
{
	size_t reach[CONFIG_MAX_BACKENDS], seen[CONFIG_MAX_BACKENDS];
	const struct config_backend *b;
	size_t i, j, k, n, saved;

	for (i = 0; i < route->nbackends; i++) {
		memset(seen, 0, sizeof(seen));
		n = 0;
		for (j = 0; j < route->backends[i].nafter; j++)
			if (!seen[route->backends[i].after[j]]++)
				reach[n++] = route->backends[i].after[j];
		for (k = 0; k < n && !seen[i]; k++) {
			b = &route->backends[reach[k]];
			for (j = 0; j < b->nafter; j++)
				if (!seen[b->after[j]]++)
					reach[n++] = b->after[j];
		}
		if (!seen[i])
			continue;
		saved = config_where_push(ctx, ".%s.after", route->backends[i].name);
		config_error(ctx, config_map_get(ctx, config_map_get(ctx, node,
		    route->backends[i].name), "after"), "backend %s waits for itself, through "
		    "the backends it waits for", route->backends[i].name);
		config_where_pop(ctx, saved);
	}
}

/* backends: a mapping of output key -> backend, in output order.  Every name is known
 * before any backend is parsed: after may name a later one. */
static void
config_parse_backends(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k;
	const yaml_node_t *vals[CONFIG_MAX_BACKENDS];
	const char *name;
	size_t i, n, saved;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of output key -> backend, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	if (n == 0) {
		config_error(ctx, node, "an aggregated route needs at least one backend");
		return;
	}
	if (n > ctx->cfg->limits.max_backends) {
		config_error(ctx, node, "%zu backends; limits.max_backends allows %u", n,
		    ctx->cfg->limits.max_backends);
		return;
	}
	route->backends = config_xcalloc(n, sizeof(*route->backends));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		if ((name = config_string(ctx, k)) == NULL)
			continue;
		for (i = 0; i < route->nbackends; i++)
			if (strcmp(route->backends[i].name, name) == 0)
				break;
		if (i < route->nbackends) {
			config_error(ctx, k, "duplicate backend '%s'", name);
			continue;
		}
		vals[route->nbackends] = config_node(ctx, pair->value);
		route->backends[route->nbackends].name = config_xstrdup(name);
		config_backend_key(&route->backends[route->nbackends++]);
	}
	ctx->route = route;
	for (i = 0; i < route->nbackends; i++) {
		saved = config_where_push(ctx, ".%s", route->backends[i].name);
		config_parse_object(ctx, vals[i], &config_backend_section, &route->backends[i]);
		config_where_pop(ctx, saved);
	}
	ctx->route = NULL;
	config_check_after(ctx, node, route);
}

/* ------------------------------------------------------------------ JSON-RPC routes */

/* A method name or prefix: the text of node. */
static void
config_jsonrpc_name_set(struct config_parse *ctx, const yaml_node_t *node,
    struct config_jsonrpc_name *n, int prefix)
{
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	if (n->text != NULL) {
		config_error(ctx, node, "match and prefix cannot both be set");
		return;
	}
	n->text = config_xstrdup(text);
	n->len = strlen(text);
	n->prefix = prefix;
}

static void
config_parse_jsonrpc_match(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, &((struct config_jsonrpc_method *)obj)->name, 0);
}

static void
config_parse_jsonrpc_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, &((struct config_jsonrpc_method *)obj)->name, 1);
}

static void
config_parse_jsonrpc_name_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, obj, 1);
}

static void
config_parse_jsonrpc_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_jsonrpc_method *)obj)->upstream = config_find_upstream(ctx, node);
}

/* The label (an index of labels) of an exact method name, added when it is new. */
static unsigned
config_jsonrpc_label(struct config_jsonrpc *jc, const char *name)
{
	size_t i;

	for (i = 0; i < jc->nlabels; i++)
		if (strcmp(jc->labels[i], name) == 0)
			return (unsigned)i;
	jc->labels = config_xreallocarray(jc->labels, jc->nlabels + 1, sizeof(*jc->labels));
	jc->labels[jc->nlabels] = config_xstrdup(name);
	return (unsigned)jc->nlabels++;
}

/* methods: entries in order; an entry after one that takes all its methods never applies. */
static void
config_parse_jsonrpc_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;
	struct config_jsonrpc_method *m, *o;
	const yaml_node_t *item;
	size_t i, j, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	jc->methods = config_xcalloc(n, sizeof(*jc->methods));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		m = &jc->methods[jc->nmethods];
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, item, &config_jsonrpc_method_section, m);
		if (item->type == YAML_MAPPING_NODE && m->name.text == NULL &&
		    config_map_get(ctx, item, "match") == NULL &&
		    config_map_get(ctx, item, "prefix") == NULL)
			config_error(ctx, item, "expected match: NAME or prefix: PREFIX");
		config_where_pop(ctx, saved);
		if (m->name.text == NULL)
			continue;
		for (j = 0; j < jc->nmethods; j++) {
			o = &jc->methods[j];
			if (!(o->name.prefix ? m->name.len >= o->name.len && memcmp(m->name.text,
			    o->name.text, o->name.len) == 0 : !m->name.prefix &&
			    strcmp(m->name.text, o->name.text) == 0))
				continue;
			saved = config_where_push(ctx, "[%zu]", i);
			config_error(ctx, config_map_get(ctx, item, m->name.prefix ? "prefix" :
			    "match"), "the entry at line %zu takes every method this one would",
			    config_list_item(ctx, node, j)->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
		if (j < jc->nmethods) {
			free(m->name.text);
			memset(m, 0, sizeof(*m));
			continue;
		}
		m->label = m->name.prefix ? UINT32_MAX : config_jsonrpc_label(jc, m->name.text);
		jc->nmethods++;
	}
	/* "other" is the label after the names */
	for (i = 0; i < jc->nmethods; i++)
		if (jc->methods[i].label == UINT32_MAX)
			jc->methods[i].label = (unsigned)jc->nlabels;
}

static void
config_parse_jsonrpc_default(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	if (node == NULL || (node->type == YAML_SCALAR_NODE &&
	    strcmp((const char *)node->data.scalar.value, "none") == 0))
		return;
	jc->default_upstream = config_find_upstream(ctx, node);
}

/* allow and deny: NAME or { prefix: P } items. */
static void
config_parse_jsonrpc_names(struct config_parse *ctx, const yaml_node_t *node,
    struct config_jsonrpc_name **out, size_t *nout)
{
	struct config_jsonrpc_name *names;
	const yaml_node_t *item;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	names = *out = config_xcalloc(n, sizeof(*names));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		if (item->type == YAML_MAPPING_NODE)
			config_parse_map(ctx, item, &config_jsonrpc_name_section, &names[*nout]);
		else
			config_jsonrpc_name_set(ctx, item, &names[*nout], 0);
		config_where_pop(ctx, saved);
		if (names[*nout].text != NULL)
			(*nout)++;
	}
}

static void
config_parse_jsonrpc_allow(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	config_parse_jsonrpc_names(ctx, node, &jc->allow, &jc->nallow);
}

static void
config_parse_jsonrpc_deny(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	config_parse_jsonrpc_names(ctx, node, &jc->deny, &jc->ndeny);
}

static void
config_parse_route_jsonrpc(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	struct config_jsonrpc *jc;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping, got %s", config_node_kind(node));
		return;
	}
	jc = route->jsonrpc = config_xcalloc(1, sizeof(*jc));
	config_parse_map(ctx, node, &config_jsonrpc_section, jc);
	jc->metrics_ids = config_xcalloc(jc->nlabels + 1, sizeof(*jc->metrics_ids));
	if (jc->nmethods == 0 && jc->default_upstream == NULL &&
	    config_map_get(ctx, node, "methods") == NULL &&
	    config_is_null(config_map_get(ctx, node, "default")))
		config_error(ctx, node, "a JSON-RPC route needs methods or a default upstream");
}

static void
config_jsonrpc_names_free(struct config_jsonrpc_name *names, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(names[i].text);
	free(names);
}

static void
config_jsonrpc_free(struct config_jsonrpc *jc)
{
	size_t i;

	if (jc == NULL)
		return;
	for (i = 0; i < jc->nmethods; i++)
		free(jc->methods[i].name.text);
	free(jc->methods);
	config_jsonrpc_names_free(jc->allow, jc->nallow);
	config_jsonrpc_names_free(jc->deny, jc->ndeny);
	for (i = 0; i < jc->nlabels; i++)
		free(jc->labels[i]);
	free(jc->labels);
	free(jc->metrics_ids);
	free(jc);
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
    enum rewrite_direction direction, struct rewrite_program **out)
{
	if (node == NULL)
		return;
	if (config_list(ctx, node) == NULL)
		return;
	rewrite_program_parse(ctx, ctx->doc, (yaml_node_t *)node, direction, out);
}

/* missing: omit, or null: YAML's null (as written in `missing: null`) is the value here. */
static void
config_parse_backend_missing(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const char *text;

	b->missing = MISSING_OMIT;
	if (node == NULL)
		return;
	if (config_is_null(node)) {
		b->missing = MISSING_NULL;
		return;
	}
	if ((text = config_scalar(ctx, node, "omit or null")) == NULL)
		return;
	if (strcmp(text, "null") == 0)
		b->missing = MISSING_NULL;
	else if (strcmp(text, "omit") != 0)
		config_error(ctx, node, "expected one of omit, null; got \"%s\"", text);
}

/* A backend's ops: status_from there says whether the backend answered (2xx) or failed. */
static void
config_parse_backend_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_backend *)obj)->response);
}

static void
config_parse_request_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_REQUEST, &((struct config_route *)obj)->request);
}

static void
config_parse_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_route *)obj)->response);
}

static void
config_parse_response_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_status_set(ctx, node, ((struct config_route *)obj)->response_on);
}

static void
config_parse_error_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_route *)obj)->error_response);
}

/* The header ops being parsed, for the fields of config_header_ops_section. */
struct config_headers {
	struct header_ops **ops;
	int request;
};

static void
config_header_op(struct config_parse *ctx, struct config_headers *h, enum header_op_kind kind,
    const yaml_node_t *name_node, const yaml_node_t *value_node)
{
	static const char *const verbs[] = { "set", "add", "remove" };
	const char *name, *value = NULL, *why;
	int in_value;

	if ((name = config_string(ctx, name_node)) == NULL)
		return;
	if (value_node != NULL) {
		if (config_is_null(value_node)) {
			config_error(ctx, value_node, "'%s' needs a value ('' for an empty one)", name);
			return;
		}
		if ((value = config_scalar(ctx, value_node, "a header value")) == NULL)
			return;
	}
	why = header_ops_add(h->ops, h->request, kind, name, value, config_parse_pattern(ctx),
	    &in_value);
	if (why != NULL)
		config_error(ctx, in_value ? value_node : name_node, "cannot %s '%s': %s",
		    verbs[kind], name, why);
}

static void
config_parse_header_map(struct config_parse *ctx, const yaml_node_t *node, void *obj,
    enum header_op_kind kind)
{
	const yaml_node_pair_t *pair;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of NAME: VALUE, got %s",
		    config_node_kind(node));
		return;
	}
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++)
		config_header_op(ctx, obj, kind, config_node(ctx, pair->key),
		    config_node(ctx, pair->value));
}

static void
config_parse_header_set(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_header_map(ctx, node, obj, HEADER_OP_SET);
}

static void
config_parse_header_add(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_header_map(ctx, node, obj, HEADER_OP_ADD);
}

static void
config_parse_header_remove(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	size_t i;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	for (i = 0; i < config_list_len(node); i++)
		config_header_op(ctx, obj, HEADER_OP_REMOVE, config_list_item(ctx, node, i), NULL);
}

static void
config_parse_request_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_headers h = { &((struct config_route *)obj)->request_headers, 1 };

	if (node != NULL)
		config_parse_map(ctx, node, &config_header_ops_section, &h);
}

static void
config_parse_response_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_headers h = { &((struct config_route *)obj)->response_headers, 0 };

	if (node != NULL)
		config_parse_map(ctx, node, &config_header_ops_section, &h);
}

/* An aggregated route makes requests of its own: keys about forwarding the client's
 * request have nothing to act on. */
static void
config_check_aggregated(struct config_parse *ctx, const yaml_node_t *item,
    struct config_route *route)
{
	static const char *const forwarding[] = { "upstream", "strip_prefix", "request", NULL };
	size_t i, saved;

	for (i = 0; forwarding[i] != NULL; i++) {
		if (config_map_get(ctx, item, forwarding[i]) == NULL)
			continue;
		saved = config_where_key(ctx, forwarding[i]);
		config_error(ctx, config_map_get(ctx, item, forwarding[i]),
		    "%s cannot go with backends: an aggregated route forwards nothing of the "
		    "client's request", forwarding[i]);
		config_where_pop(ctx, saved);
	}
	if (route->request_headers != NULL &&
	    (route->request_headers->vars & (1u << REWRITE_VAR_JSON))) {
		saved = config_where_key(ctx, "request_headers");
		config_error(ctx, config_map_get(ctx, item, "request_headers"), "$json.PATH cannot "
		    "go with backends: an aggregated route reads no request body");
		config_where_pop(ctx, saved);
	}
	if (route->errors_key != NULL) {
		struct config_backend key = { .name = route->errors_key };

		config_backend_key(&key);
		route->errors_key_json = key.key_json;
		route->errors_key_json_len = key.key_json_len;
	}
	for (i = 0; route->errors_key != NULL && i < route->nbackends; i++) {
		if (route->merge == MERGE_KEYED && strcmp(route->backends[i].name,
		    route->errors_key) == 0) {
			saved = config_where_key(ctx, "errors_key");
			config_error(ctx, config_map_get(ctx, item, "errors_key") != NULL ?
			    config_map_get(ctx, item, "errors_key") : item, "'%s' is the key of a "
			    "backend and of the errors of a partial answer: name one differently",
			    route->errors_key);
			config_where_pop(ctx, saved);
		}
		if (route->merge == MERGE_FLAT && route->backends[i].missing == MISSING_NULL) {
			saved = config_where_push(ctx, ".backends.%s.missing",
			    route->backends[i].name);
			config_error(ctx, config_map_get(ctx, config_map_get(ctx, config_map_get(ctx,
			    item, "backends"), route->backends[i].name), "missing"),
			    "a flat merge has no key to set to null");
			config_where_pop(ctx, saved);
		}
	}
}

/* A JSON-RPC route routes each call itself and forwards it as it came: keys that name one
 * upstream or edit bodies have nothing to act on. */
static void
config_check_jsonrpc(struct config_parse *ctx, const yaml_node_t *item)
{
	static const char *const conflicting[] = { "upstream", "backends", "request", "response",
	    "response_on", "error_response", NULL };
	const yaml_node_t *at;
	size_t i, saved;

	for (i = 0; conflicting[i] != NULL; i++) {
		if ((at = config_map_get(ctx, item, conflicting[i])) == NULL)
			continue;
		saved = config_where_key(ctx, conflicting[i]);
		if (i == 0)
			config_error(ctx, at, "upstream cannot go with jsonrpc: calls go where "
			    "jsonrpc.methods and jsonrpc.default say");
		else if (i == 1)
			config_error(ctx, at, "backends cannot go with jsonrpc");
		else
			config_error(ctx, at, "%s cannot go with jsonrpc: calls and answers pass "
			    "byte for byte", conflicting[i]);
		config_where_pop(ctx, saved);
	}
}

/* Checks that need the whole route: exclusive keys, a strip_prefix that can apply. */
static void
config_check_route(struct config_parse *ctx, const yaml_node_t *item, struct config_route *route)
{
	const yaml_node_t *match = config_map_get(ctx, item, "match");
	const char *path = route->path ? route->path : route->path_prefix;
	size_t saved;

	if (route->upstream == NULL && route->backends == NULL &&
	    config_map_get(ctx, item, "upstream") == NULL &&
	    config_map_get(ctx, item, "backends") == NULL &&
	    config_map_get(ctx, item, "jsonrpc") == NULL)
		config_error(ctx, item, "missing required key 'upstream' (or 'backends', or "
		    "'jsonrpc')");
	if (config_map_get(ctx, item, "jsonrpc") != NULL)
		config_check_jsonrpc(ctx, item);
	if (config_map_get(ctx, item, "backends") != NULL) {
		config_check_aggregated(ctx, item, route);
	} else {
		static const char *const aggregating[] = { "merge", "timeout", "errors_key", NULL };
		size_t i;

		for (i = 0; aggregating[i] != NULL; i++) {
			if (config_map_get(ctx, item, aggregating[i]) == NULL ||
			    (i == 1 && config_map_get(ctx, item, "jsonrpc") != NULL))
				continue;
			saved = config_where_key(ctx, aggregating[i]);
			config_error(ctx, config_map_get(ctx, item, aggregating[i]),
			    "%s is for routes with backends", aggregating[i]);
			config_where_pop(ctx, saved);
		}
	}
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
		route->timeouts.upstream_connect = cfg->timeouts.upstream_connect;
		route->timeouts.upstream_response = cfg->timeouts.upstream_response;
		route->timeouts.upstream_try = cfg->timeouts.upstream_try;
		/* match is parsed first: the ops after it know the route's path template. */
		ctx->current = route;
		config_parse_object(ctx, item, &config_route_section, route);
		ctx->current = NULL;
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

/* ------------------------------------------------------------------ files */

/* An error about the file a key names, at the key's value: "FILE:LINE:COL: KEY: message". */
static void
config_file_error(struct config_parse *ctx, yaml_mark_t mark, const char *key, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));
static void
config_file_error(struct config_parse *ctx, yaml_mark_t mark, const char *key, const char *fmt,
    ...)
{
	yaml_node_t at;
	size_t saved = config_where_key(ctx, key);
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = config_xvasprintf(fmt, ap);
	va_end(ap);
	memset(&at, 0, sizeof(at));
	at.start_mark = mark;
	config_error(ctx, &at, "%s", msg);
	config_where_pop(ctx, saved);
	free(msg);
}

/* A log file must open for appending (created if absent, as it will be at the start). */
static void
config_check_log(struct config_parse *ctx, const char *path, yaml_mark_t mark, const char *key)
{
	int fd;

	if (path == NULL || strcmp(path, "stderr") == 0)
		return;
	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0) {
		config_file_error(ctx, mark, key, "cannot open %s: %s", path, strerror(errno));
		return;
	}
	close(fd);
}

/*
 * Whether user (NULL: ourselves) may create and remove files in dir: 0, or -1 with errno.  Run
 * as root for another user, the check runs in a child that becomes that user (*as_user set),
 * so that the kernel decides as it will for the daemon (modes, ACLs, the directories on the
 * way); otherwise it is our own rights that count.
 */
static int
config_may_write_dir(const char *dir, const char *user, int *as_user)
{
	struct passwd *pw;
	pid_t pid;
	int status;

	*as_user = 0;
	if (user == NULL || geteuid() != 0 || (pw = getpwnam(user)) == NULL || pw->pw_uid == 0)
		return access(dir, W_OK | X_OK);
	*as_user = 1;
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		if (setgroups(1, &pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
		    setuid(pw->pw_uid) < 0)
			_exit(EPERM);
		_exit(access(dir, W_OK | X_OK) < 0 ? errno & 0xff : 0);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	errno = WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
	return -1;
}

/* The pid file is written, and removed at exit, in its directory, as the user. */
static void
config_check_pid_file(struct config_parse *ctx, const char *path, const char *user,
    yaml_mark_t mark)
{
	const char *slash;
	char dir[PATH_MAX];
	int as_user;

	if (path == NULL)
		return;
	/* On the stack: a check as the user runs in a child that leaves by _exit, and must
	 * leave no heap block behind it (valgrind counts the child's too). */
	slash = strrchr(path, '/');
	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else {
		config_file_error(ctx, mark, "pid_file", "the path is too long");
		return;
	}
	if (config_may_write_dir(dir, user, &as_user) < 0) {
		if (as_user)
			config_file_error(ctx, mark, "pid_file", "user %s cannot create files in %s: "
			    "%s", user, dir, strerror(errno));
		else
			config_file_error(ctx, mark, "pid_file", "cannot create files in %s: %s", dir,
			    strerror(errno));
	}
}

int
config_check_files(const struct config *cfg, char **errors)
{
	struct config_parse *ctx = config_parse_new(cfg->path);

	config_check_pid_file(ctx, cfg->pid_file, cfg->user, cfg->pid_file_mark);

	if (cfg->error_log != NULL && strcmp(cfg->error_log, "syslog") != 0 &&
	    strncmp(cfg->error_log, "syslog:", 7) != 0)
		config_check_log(ctx, cfg->error_log, cfg->error_log_mark, "log.error");
	config_check_log(ctx, cfg->access_log, cfg->access_log_mark, "log.access");
	*errors = config_parse_errors(ctx);
	config_parse_free(ctx);
	return *errors == NULL ? 0 : -1;
}

/* ------------------------------------------------------------------ load and free */

static void
config_upstream_free(struct config_upstream *up)
{
	size_t i;

	config_servers_free(up->servers, up->nservers);
	for (i = 0; i < up->nnames; i++) {
		free(up->names[i].host);
		resolver_answer_free(&up->names[i].answer);
	}
	free(up->names);
	free(up->name);
	free(up->host_header);
	free(up->hash_key);
	if (up->health != NULL) {
		free(up->health->path);
		free(up->health->host);
		jcond_free(up->health->json);
		free(up->health);
	}
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
	size_t i;

	for (i = 0; i < route->nbackends; i++) {
		struct config_backend *b = &route->backends[i];
		free(b->name);
		free(b->key_json);
		free(b->after);
		free(b->path);
		template_free(&b->target);
		free(b->method);
		for (size_t j = 0; j < b->nheaders; j++) {
			free(b->headers[j].name);
			template_free(&b->headers[j].value);
		}
		free(b->headers);
		rewrite_program_free(b->response);
	}
	free(route->backends);
	config_jsonrpc_free(route->jsonrpc);
	free(route->errors_key);
	free(route->errors_key_json);
	free(route->name);
	free(route->host);
	free(route->path);
	route_pattern_free(route->pattern);
	free(route->path_prefix);
	free(route->strip_prefix);
	for (i = 0; i < route->njson_match; i++)
		jcond_free(route->json_match[i]);
	free(route->json_match);
	config_json_types_free(route->json_types);
	rewrite_program_free(route->request);
	rewrite_program_free(route->response);
	rewrite_program_free(route->error_response);
	header_ops_free(route->request_headers);
	header_ops_free(route->response_headers);
}

void
config_free(struct config *cfg)
{
	size_t i;

	if (cfg == NULL)
		return;
	free(cfg->path);
	free(cfg->user);
	free(cfg->pid_file);
	free(cfg->access_log);
	for (i = 0; i < cfg->njson_fields; i++)
		free(cfg->json_fields[i]);
	free(cfg->json_fields);
	for (i = 0; i < cfg->npath_fields; i++)
		free(cfg->path_fields[i]);
	free(cfg->path_fields);
	free(cfg->error_log);
	config_addr_free(cfg->admin_listen);
	free(cfg->admin_listen);
	config_addr_free(cfg->resolver);
	free(cfg->resolver);
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
	/* A document of just ~ or null is as empty as no document: no listeners, nothing to do. */
	if (root == NULL || config_is_null(root))
		config_error(ctx, NULL, "the configuration is empty");
	else {
		config_parse_map(ctx, root, &config_top_section, ctx->cfg);
		config_check_top(ctx, root);
		config_resolve_names(ctx, root);
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
