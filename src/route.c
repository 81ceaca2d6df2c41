/*
 * Route matching: the first route in file order whose host, path and methods match.
 *
 * Paths are compared as the client sent them (no percent-decoding, no dot-segment removal),
 * path_prefix as a plain string prefix like nginx's prefix locations.
 */
#include "route.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

/* The host without its ":port" suffix or a trailing dot ("[::1]:80" -> "[::1]"). */
static size_t
route_host_len(const char *host, size_t len)
{
	const char *end;
	size_t i;

	if (len > 0 && host[0] == '[') {
		end = memchr(host, ']', len);
		return end ? (size_t)(end - host) + 1 : len;
	}
	for (i = 0; i < len; i++)
		if (host[i] == ':')
			break;
	if (i > 1 && host[i - 1] == '.')
		i--;
	return i;
}

static int
route_host_matches(const struct config_route *route, const char *host, size_t host_len)
{
	size_t len;

	if (route->host == NULL)
		return 1;
	len = route_host_len(host, host_len);
	return len == strlen(route->host) && strncasecmp(route->host, host, len) == 0;
}

static int
route_path_matches(const struct config_route *route, const char *path, size_t path_len)
{
	size_t len;

	if (route->path != NULL) {
		len = strlen(route->path);
		return len == path_len && memcmp(route->path, path, len) == 0;
	}
	if (route->path_prefix != NULL) {
		len = strlen(route->path_prefix);
		return len <= path_len && memcmp(route->path_prefix, path, len) == 0;
	}
	return 1;
}

const struct config_route *
route_match(const struct config *cfg, const char *host, size_t host_len, const char *path,
    size_t path_len, unsigned method_bit, int *method_mismatch)
{
	const struct config_route *route;
	size_t i;
	int mismatch = 0;

	for (i = 0; i < cfg->nroutes; i++) {
		route = &cfg->routes[i];
		if (!route_host_matches(route, host, host_len) ||
		    !route_path_matches(route, path, path_len))
			continue;
		if ((route->methods & method_bit) == 0) {
			/* a later route may still take this method */
			mismatch = 1;
			continue;
		}
		if (method_mismatch != NULL)
			*method_mismatch = 0;
		return route;
	}
	if (method_mismatch != NULL)
		*method_mismatch = mismatch;
	return NULL;
}

int
route_rewrite_target(const struct config_route *route, const char *path, size_t path_len,
    const char *query, size_t query_len, char *out, size_t cap)
{
	size_t strip = 0, rest, len;
	int slash = 0;

	if (route->strip_prefix != NULL) {
		strip = strlen(route->strip_prefix);
		if (strip > path_len || memcmp(route->strip_prefix, path, strip) != 0)
			strip = 0;
	}
	rest = path_len - strip;
	/* what remains must still be an origin-form path: "" -> "/", "x" -> "/x" */
	if (strip > 0 && (rest == 0 || path[strip] != '/'))
		slash = 1;
	len = (size_t)slash + rest + query_len;
	if (len > cap || len > (size_t)INT_MAX)
		return -1;
	if (slash)
		out[0] = '/';
	memcpy(out + slash, path + strip, rest);
	if (query_len > 0)
		memcpy(out + slash + rest, query, query_len);
	if (len < cap)
		out[len] = '\0';       /* a convenience when there is room; not counted */
	return (int)len;
}
