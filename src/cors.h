/* Cross-origin resource sharing (the Fetch standard's CORS protocol) for a route: which
 * origins may read its answers, and the header lines that tell a browser so. */
#ifndef JG_CORS_H
#define JG_CORS_H

#include <stddef.h>
#include <stdint.h>

/* A route's cors: key.  origins NULL: the route does no CORS. */
struct cors_policy {
	char **origins;                 /* NULL-terminated, lowercase: "*", an origin
	                                 * (scheme, host and port), or a wildcard host
	                                 * "*.domain" with or without a scheme */
	unsigned methods;               /* METHOD_* bits a preflight allows */
	char *headers;                  /* request headers a preflight allows, "A, B", or NULL:
	                                 * the ones it asks for */
	int credentials;                /* Access-Control-Allow-Credentials: true */
	uint64_t max_age;               /* ms a preflight's answer may be cached; 0: not said */
};

/* Longest Origin value the gateway answers to (a scheme, a host and a port fit). */
#define CORS_ORIGIN_MAX 256

/* 1 when a pattern of origins is well-formed (see struct cors_policy); else 0 and *why. */
int cors_pattern_valid(const char *pattern, const char **why);
/* 1 when origin (an Origin header's value, len bytes) is one the policy admits. */
int cors_origin_allowed(const struct cors_policy *p, const char *origin, size_t len);
/*
 * The header lines (each ending in CRLF) that go with every answer to an admitted origin:
 * Access-Control-Allow-Origin (the origin itself, or * when every origin is admitted
 * without credentials), Access-Control-Allow-Credentials, Vary: Origin.  Their length, or 0
 * when they do not fit in cap.
 */
size_t cors_answer_lines(const struct cors_policy *p, const char *origin, size_t len,
    char *out, size_t cap);
/* The lines of a preflight's answer: the answer lines and Access-Control-Allow-Methods,
 * -Allow-Headers (asked: the request's Access-Control-Request-Headers) and -Max-Age.  Their
 * length, or 0 when they do not fit in cap. */
size_t cors_preflight_lines(const struct cors_policy *p, const char *origin, size_t len,
    const char *asked, size_t asked_len, char *out, size_t cap);
void cors_policy_free(struct cors_policy *p);

#endif
