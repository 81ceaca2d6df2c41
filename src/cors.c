/* CORS: origins matched against a route's patterns, and the header lines of its answers. */
#include "cors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "http_method.h"

/* a[0..alen) and b[0..blen) are equal but for ASCII case. */
static int
cors_lower_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && http_ieq(a, b, alen);
}

int
cors_pattern_valid(const char *pattern, const char **why)
{
	const char *host = strstr(pattern, "://");
	size_t i;

	if (strcmp(pattern, "*") == 0)
		return 1;
	host = host != NULL ? host + 3 : pattern;
	if (host == pattern && strncmp(pattern, "*.", 2) != 0) {
		*why = "an origin is scheme://host[:port], *.domain or *";
		return 0;
	}
	if (strncmp(host, "*.", 2) == 0)
		host += 2;
	if (*host == '\0') {
		*why = "no host";
		return 0;
	}
	for (i = 0; host[i] != '\0'; i++) {
		char ch = host[i];
		if (ch == '/' || ch == '*' || ch == ' ' || ch == '?' || ch == '#') {
			*why = "an origin has no path, query or second wildcard";
			return 0;
		}
	}
	return 1;
}

/* A wildcard host, "*.example.com" with or without a scheme: a subdomain of example.com. */
static int
cors_wildcard_match(const char *pattern, const char *o, size_t olen)
{
	struct { const char *p; size_t len; } origin = { o, olen };
	const char *sep = strstr(pattern, "://");
	const char *suffix;
	size_t start = 0, end = origin.len, slen, i;

	if (sep != NULL) {
		size_t plen = (size_t)(sep - pattern) + 3;
		if (origin.len < plen || !cors_lower_eq(pattern, plen, origin.p, plen))
			return 0;
		start = plen;
		suffix = sep + 3 + 1;           /* ".domain" */
	} else {
		for (i = 0; i + 3 <= origin.len; i++)
			if (memcmp(origin.p + i, "://", 3) == 0)
				break;
		if (i + 3 > origin.len)
			return 0;
		start = i + 3;
		suffix = pattern + 1;
	}
	/* The host without its port. */
	for (i = start; i < origin.len; i++)
		if (origin.p[i] == ':')
			break;
	if (strchr(suffix, ':') == NULL)
		end = i;
	slen = strlen(suffix);
	return end > start + slen && cors_lower_eq(origin.p + end - slen, slen, suffix, slen);
}

int
cors_origin_allowed(const struct cors_policy *p, const char *origin, size_t len)
{
	size_t i;

	if (p->origins == NULL || len == 0 || len > CORS_ORIGIN_MAX)
		return 0;
	for (i = 0; p->origins[i] != NULL; i++) {
		const char *o = p->origins[i];
		if (strcmp(o, "*") == 0)
			return 1;
		if (strstr(o, "*.") != NULL) {
			if (cors_wildcard_match(o, origin, len))
				return 1;
		} else if (cors_lower_eq(o, strlen(o), origin, len)) {
			return 1;
		}
	}
	return 0;
}

/* Every origin admitted, and no credentials: "*" says it and lets caches share answers. */
static int
cors_any_origin(const struct cors_policy *p)
{
	size_t i;

	if (p->credentials)
		return 0;
	for (i = 0; p->origins[i] != NULL; i++)
		if (strcmp(p->origins[i], "*") == 0)
			return 1;
	return 0;
}

size_t
cors_answer_lines(const struct cors_policy *p, const char *origin, size_t len, char *out,
    size_t cap)
{
	int n;

	if (cors_any_origin(p))
		n = snprintf(out, cap, "Access-Control-Allow-Origin: *\r\n");
	else
		n = snprintf(out, cap, "Access-Control-Allow-Origin: %.*s\r\n%sVary: Origin\r\n",
		    (int)len, origin,
		    p->credentials ? "Access-Control-Allow-Credentials: true\r\n" : "");
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static const struct { unsigned bit; const char *name; } cors_methods[] = {
	{ METHOD_GET, "GET" }, { METHOD_HEAD, "HEAD" }, { METHOD_POST, "POST" },
	{ METHOD_PUT, "PUT" }, { METHOD_PATCH, "PATCH" }, { METHOD_DELETE, "DELETE" },
	{ METHOD_OPTIONS, "OPTIONS" }, { METHOD_TRACE, "TRACE" }, { METHOD_CONNECT, "CONNECT" },
};

size_t
cors_preflight_lines(const struct cors_policy *p, const char *origin, size_t origin_len,
    const char *asked, size_t asked_len, char *out, size_t cap)
{
	size_t len = cors_answer_lines(p, origin, origin_len, out, cap), i;
	const char *sep = "";
	int n;

	if (len == 0)
		return 0;
#define CORS_PUT(...) do { \
		n = snprintf(out + len, cap - len, __VA_ARGS__); \
		if (n < 0 || (size_t)n >= cap - len) \
			return 0; \
		len += (size_t)n; \
	} while (0)
	CORS_PUT("Access-Control-Allow-Methods: ");
	for (i = 0; i < sizeof(cors_methods) / sizeof(cors_methods[0]); i++) {
		if (p->methods & cors_methods[i].bit) {
			CORS_PUT("%s%s", sep, cors_methods[i].name);
			sep = ", ";
		}
	}
	CORS_PUT("\r\n");
	if (p->headers != NULL)
		CORS_PUT("Access-Control-Allow-Headers: %s\r\n", p->headers);
	else if (asked_len != 0)
		CORS_PUT("Access-Control-Allow-Headers: %.*s\r\n", (int)asked_len, asked);
	if (p->max_age != 0)
		CORS_PUT("Access-Control-Max-Age: %llu\r\n",
		    (unsigned long long)(p->max_age / 1000));
	if (p->headers == NULL && asked_len != 0)
		CORS_PUT("Vary: Access-Control-Request-Headers\r\n");
#undef CORS_PUT
	return len;
}

void
cors_policy_free(struct cors_policy *p)
{
	size_t i;

	if (p->origins != NULL)
		for (i = 0; p->origins[i] != NULL; i++)
			free(p->origins[i]);
	free(p->origins);
	free(p->headers);
	p->origins = NULL;
	p->headers = NULL;
}
