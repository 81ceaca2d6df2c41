/* Route matching: first route in file order whose host, path and method match. */
#ifndef JG_ROUTE_H
#define JG_ROUTE_H

#include <stddef.h>
#include "config.h"

/* No http.h: the envelope engine's op parser (rewrite_config.c) checks $path.NAME here. */
struct http_str;

/* Most captures of one path template. */
#define ROUTE_MAX_CAPTURES 16

/*
 * A path template: "/users/{id}/dashboard" (a segment in braces captures it, never empty),
 * "/files/{rest...}" (the last segment may capture the remainder, slashes and all, maybe
 * empty).  Literal segments compare as sent, like plain paths.
 */
struct route_pattern;

/* Compile text (which holds a '{' or '}'); NULL with *why (a static string) when it is not a
 * template. */
struct route_pattern *route_pattern_new(const char *text, const char **why);
void route_pattern_free(struct route_pattern *p);
size_t route_pattern_ncaptures(const struct route_pattern *p);
/* The index of the capture named name[0..len), or -1; *rest: a {NAME...} capture. */
int route_pattern_capture(const struct route_pattern *p, const char *name, size_t len,
    int *rest);
/* Why $path.name[0..len) cannot be a variable of a route with path template p (NULL: none),
 * or NULL when it can. */
const char *route_path_var_why(const struct route_pattern *p, const char *name, size_t len);
/* 1 when path matches, with the captures' values (as sent) in caps (NULL: not wanted). */
int route_pattern_match(const struct route_pattern *p, const char *path, size_t len,
    struct http_str *caps);

/*
 * Return the first matching route, or NULL.  A route that matches on host and path but not
 * on the method lets later routes take the request.  When none does, *allowed (may be NULL)
 * is set to the methods of those routes, METHOD_* bits (-> 405 with Allow); when no route
 * matched the host and path, or one took the request, to 0.  host may carry a ":port"
 * suffix, which is ignored; path excludes the query string and is normalised (path_norm).
 */
const struct config_route *route_match(const struct config *cfg,
    const char *host, size_t host_len, const char *path, size_t path_len,
    unsigned method_bit, unsigned *allowed);
/* The same from cfg->routes[first] on: the routes before it were looked at already. */
const struct config_route *route_match_from(const struct config *cfg, size_t first,
    const char *host, size_t host_len, const char *path, size_t path_len,
    unsigned method_bit, unsigned *allowed);

/* What a request on route runs (request.c): route->plan, decided once the loader has the
 * whole route, so that a request does not ask every phase and every kind again. */
void route_plan(struct config_route *route);

/* Longest line route_allow_header writes, its NUL included. */
#define ROUTE_ALLOW_MAX \
	sizeof("Allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE, CONNECT\r\n")

/* The Allow header line naming the methods in METHOD_* bits, in a fixed order
 * ("Allow: GET, HEAD, POST\r\n"; "" for none), NUL-terminated in out[ROUTE_ALLOW_MAX]: its
 * length. */
size_t route_allow_header(unsigned methods, char *out);

/* The captures of route's path template in path, which route matched: their number. */
size_t route_captures(const struct config_route *route, const char *path, size_t path_len,
    struct http_str *caps /* [ROUTE_MAX_CAPTURES] */);

/*
 * Write into out (capacity cap) the path to send upstream: path with route->strip_prefix removed
 * ("/api/orders/1" with strip "/api" -> "/orders/1"; an empty result becomes "/").
 * query (may be empty) is appended verbatim with its leading '?'.  Returns the length, or -1 if
 * cap is too small.
 */
int route_rewrite_target(const struct config_route *route, const char *path, size_t path_len,
    const char *query, size_t query_len, char *out, size_t cap);

#endif
