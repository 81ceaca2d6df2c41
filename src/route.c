/*
 * Route matching: the first route in file order whose host, path and methods match.
 *
 * Paths are compared as the worker hands them over, normalised by path_norm (no dot
 * segments, no empty ones) but not percent-decoded; path_prefix as a plain string prefix like
 * nginx's prefix locations.
 */
#include "http.h"
#include "route.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum route_seg_kind { SEG_LITERAL, SEG_CAPTURE, SEG_REST };

struct route_seg {
	enum route_seg_kind kind;
	const char *text;               /* the literal, or the capture's name (in pattern->text) */
	size_t len;
	unsigned capture;               /* its index */
};

struct route_pattern {
	char *text;                     /* a copy of the template, segments point into it */
	struct route_seg *segs;         /* the segments after the leading '/' */
	size_t nsegs;
	size_t ncaptures;
};

static int
route_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    c == '_' || c == '-';
}

struct route_pattern *
route_pattern_new(const char *text, const char **why)
{
	struct route_pattern *p;
	struct route_seg *seg;
	const char *s, *end, *close;
	size_t n = 1, i, j;

	*why = "out of memory";
	if (text[0] != '/') {
		*why = "a path template must start with '/'";
		return NULL;
	}
	for (s = text; *s != '\0'; s++)
		n += *s == '/';
	if ((p = calloc(1, sizeof(*p))) == NULL || (p->text = strdup(text)) == NULL ||
	    (p->segs = calloc(n, sizeof(*p->segs))) == NULL)
		goto fail;
	for (s = p->text + 1;; s = end + 1) {
		end = strchr(s, '/');
		if (end == NULL)
			end = s + strlen(s);
		seg = &p->segs[p->nsegs++];
		seg->text = s;
		seg->len = (size_t)(end - s);
		close = memchr(s, '}', seg->len);
		if (s[0] != '{' && close == NULL && memchr(s, '{', seg->len) == NULL) {
			seg->kind = SEG_LITERAL;
		} else {
			if (s[0] != '{' || close != end - 1) {
				*why = "a capture in braces must be a whole segment, as in /users/{id}";
				goto fail;
			}
			seg->kind = SEG_CAPTURE;
			seg->text = s + 1;
			seg->len -= 2;
			if (seg->len > 3 && memcmp(seg->text + seg->len - 3, "...", 3) == 0) {
				seg->kind = SEG_REST;
				seg->len -= 3;
				if (*end != '\0') {
					*why = "a {NAME...} capture must be the last segment";
					goto fail;
				}
			}
			for (i = 0; i < seg->len && route_name_char(seg->text[i]); i++)
				;
			if (seg->len == 0 || i < seg->len) {
				*why = "a capture's name is letters, digits, '_' and '-'";
				goto fail;
			}
			for (j = 0; j + 1 < p->nsegs; j++)
				if (p->segs[j].kind != SEG_LITERAL && p->segs[j].len == seg->len &&
				    memcmp(p->segs[j].text, seg->text, seg->len) == 0) {
					*why = "two captures have the same name";
					goto fail;
				}
			if (p->ncaptures == ROUTE_MAX_CAPTURES) {
				*why = "more than 16 captures";
				goto fail;
			}
			seg->capture = (unsigned)p->ncaptures++;
		}
		if (*end == '\0')
			break;
	}
	return p;
fail:
	route_pattern_free(p);
	return NULL;
}

void
route_pattern_free(struct route_pattern *p)
{
	if (p == NULL)
		return;
	free(p->text);
	free(p->segs);
	free(p);
}

size_t
route_pattern_ncaptures(const struct route_pattern *p)
{
	return p->ncaptures;
}

int
route_pattern_capture(const struct route_pattern *p, const char *name, size_t len, int *rest)
{
	size_t i;

	for (i = 0; i < p->nsegs; i++)
		if (p->segs[i].kind != SEG_LITERAL && p->segs[i].len == len &&
		    memcmp(p->segs[i].text, name, len) == 0) {
			*rest = p->segs[i].kind == SEG_REST;
			return (int)p->segs[i].capture;
		}
	return -1;
}

const char *
route_path_var_why(const struct route_pattern *p, const char *name, size_t len)
{
	int rest;

	if (p == NULL)
		return "the route's match.path is not a path template";
	if (route_pattern_capture(p, name, len, &rest) < 0)
		return "the route's path template has no such capture";
	return NULL;
}

int
route_pattern_match(const struct route_pattern *p, const char *path, size_t len,
    struct http_str *caps)
{
	const char *s = path + 1, *end = path + len, *slash;
	size_t i, n;

	if (len == 0 || path[0] != '/')
		return 0;
	for (i = 0; i < p->nsegs; i++) {
		const struct route_seg *seg = &p->segs[i];

		if (s > end)
			return 0;       /* the path has fewer segments */
		if (seg->kind == SEG_REST) {
			if (caps != NULL)
				caps[seg->capture] = (struct http_str){ s, (size_t)(end - s) };
			return 1;
		}
		slash = memchr(s, '/', (size_t)(end - s));
		n = (size_t)((slash != NULL ? slash : end) - s);
		if (seg->kind == SEG_LITERAL) {
			if (n != seg->len || memcmp(s, seg->text, n) != 0)
				return 0;
		} else if (n == 0) {
			return 0;
		} else if (caps != NULL) {
			caps[seg->capture] = (struct http_str){ s, n };
		}
		s += n + 1;     /* past the '/' (or one past the end after the last segment) */
	}
	return s == end + 1;
}

size_t
route_captures(const struct config_route *route, const char *path, size_t path_len,
    struct http_str *caps)
{
	if (route->pattern == NULL || !route_pattern_match(route->pattern, path, path_len, caps))
		return 0;
	return route->pattern->ncaptures;
}

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
	return len == strlen(route->host) && http_ieq(route->host, host, len);
}

static int
route_path_matches(const struct config_route *route, const char *path, size_t path_len)
{
	size_t len;

	if (route->pattern != NULL)
		return route_pattern_match(route->pattern, path, path_len, NULL);
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
    size_t path_len, unsigned method_bit, unsigned *allowed)
{
	return route_match_from(cfg, 0, host, host_len, path, path_len, method_bit, allowed);
}

const struct config_route *
route_match_from(const struct config *cfg, size_t first, const char *host, size_t host_len,
    const char *path, size_t path_len, unsigned method_bit, unsigned *allowed)
{
	const struct config_route *route;
	size_t i;
	unsigned others = 0;

	for (i = first; i < cfg->nroutes; i++) {
		route = &cfg->routes[i];
		if (!route_host_matches(route, host, host_len) ||
		    !route_path_matches(route, path, path_len))
			continue;
		if ((route->methods & method_bit) == 0) {
			/* a later route may still take this method */
			others |= route->methods;
			continue;
		}
		if (allowed != NULL)
			*allowed = 0;
		return route;
	}
	if (allowed != NULL)
		*allowed = others;
	return NULL;
}

size_t
route_allow_header(unsigned methods, char *out)
{
	static const struct { unsigned bit; const char *name; } order[] = {
		{ METHOD_GET, "GET" }, { METHOD_HEAD, "HEAD" }, { METHOD_POST, "POST" },
		{ METHOD_PUT, "PUT" }, { METHOD_DELETE, "DELETE" }, { METHOD_OPTIONS, "OPTIONS" },
		{ METHOD_PATCH, "PATCH" }, { METHOD_TRACE, "TRACE" }, { METHOD_CONNECT, "CONNECT" }
	};
	size_t i, n, len = 0;

	for (i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		if ((methods & order[i].bit) == 0)
			continue;
		memcpy(out + len, len == 0 ? "Allow: " : ", ", len == 0 ? 7 : 2);
		len += len == 0 ? 7 : 2;
		n = strlen(order[i].name);
		memcpy(out + len, order[i].name, n);
		len += n;
	}
	if (len > 0) {
		memcpy(out + len, "\r\n", 2);
		len += 2;
	}
	out[len] = '\0';
	return len;
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
