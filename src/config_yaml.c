/*
 * Configuration: the parse context (every error collected with its position and the key path
 * being parsed), YAML node helpers and the scalar parsers: integers, sizes, durations, addresses,
 * methods, status sets.
 */
#include "config.h"
#include "config_parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ allocation */

void __attribute__((noreturn))
config_oom(void)
{
	fputs("jsongate: out of memory loading the configuration\n", stderr);
	abort();
}

void *
config_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		config_oom();
	return p;
}

void *
config_xreallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		config_oom();
	if ((p = realloc(p, n * size)) == NULL)
		config_oom();
	return p;
}

char *
config_xstrdup(const char *s)
{
	size_t len = strlen(s);
	char *p = config_xcalloc(1, len + 1);

	memcpy(p, s, len);
	return p;
}

char *
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

char *
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
void
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
size_t
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

size_t
config_where_key(struct config_parse *ctx, const char *key)
{
	return config_where_push(ctx, ctx->wherelen ? ".%s" : "%s", key);
}

void
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

const char *
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
int
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
const char *
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

const char *
config_string(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *s = config_scalar(ctx, node, "a string");

	if (s != NULL && s[0] == '\0') {
		config_error(ctx, node, "must not be empty");
		return NULL;
	}
	return s;
}

/* The value node for key in a mapping, or NULL. */
yaml_node_t *
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

/* A list node, or NULL after an error. */
const yaml_node_t *
config_list(struct config_parse *ctx, const yaml_node_t *node)
{
	if (node->type != YAML_SEQUENCE_NODE) {
		config_error(ctx, node, "expected a list, got %s", config_node_kind(node));
		return NULL;
	}
	return node;
}

/* ------------------------------------------------------------------ scalar parsers */

/* Digits only, within [min, max]: 0, or -1. */
int
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
const char config_addr_not_numeric[] =
    "host must be a numeric IPv4 address, [IPv6], * or localhost (names are not resolved)";

/* "8080" -> 8080; NULL, or the reason it is not a port. */
const char *
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
const char *
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

int
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

int
config_addr_is_any(const struct config_addr *a)
{
	const struct sockaddr_in *a4 = (const void *)&a->ss;
	const struct sockaddr_in6 *a6 = (const void *)&a->ss;

	if (a->ss.ss_family == AF_INET)
		return a4->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
}

unsigned
config_method_bit(const char *name, size_t len)
{
	return http_method_bit(name, len);
}

/* ------------------------------------------------------------------ status sets */

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
void
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
