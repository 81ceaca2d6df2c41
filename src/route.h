/* Route matching: first route in file order whose host, path and method match. */
#ifndef JG_ROUTE_H
#define JG_ROUTE_H

#include <stddef.h>
#include "config.h"

/*
 * Return the first matching route, or NULL.  When no route matches but some route matched on
 * host and path and only the method differed, *method_mismatch is set to 1 (-> 405), else 0.
 * host may carry a ":port" suffix, which is ignored; path excludes the query string.
 */
const struct config_route *route_match(const struct config *cfg,
    const char *host, size_t host_len, const char *path, size_t path_len,
    unsigned method_bit, int *method_mismatch);

/*
 * Write into out (capacity cap) the path to send upstream: path with route->strip_prefix removed
 * ("/api/orders/1" with strip "/api" -> "/orders/1"; an empty result becomes "/").
 * query (may be empty) is appended verbatim with its leading '?'.  Returns the length, or -1 if
 * cap is too small.
 */
int route_rewrite_target(const struct config_route *route, const char *path, size_t path_len,
    const char *query, size_t query_len, char *out, size_t cap);

#endif
