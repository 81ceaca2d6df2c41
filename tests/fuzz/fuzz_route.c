/*
 * libFuzzer target for path normalisation, route matching and the path sent upstream
 * (strip_prefix).  The routes are a fixed configuration; the input is a control byte (the
 * method), a Host line ending in '\n', then the request path with an optional query.  The path
 * is normalised first, as a worker does.  Checked: the normal path is no longer, normal (a
 * second pass leaves it), the same when made in place; a match satisfies its route's host,
 * path and method, no match names methods without the request's; the rewritten target starts
 * with '/', is the path without the strip prefix (or "/") followed by the query, and too small
 * an output buffer gives -1, never a write past it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "http.h"
#include "path_norm.h"
#include "route.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char routes_yaml[] =
	"listeners: [ { listen: 127.0.0.1:1 } ]\n"
	"upstreams: { a: { servers: [ 127.0.0.1:2 ] } }\n"
	"routes:\n"
	"  - { match: { host: api.example.com, path_prefix: /api/ }, strip_prefix: /api, upstream: a }\n"
	"  - { match: { path: /exact, methods: [ POST ] }, strip_prefix: /exact, upstream: a }\n"
	"  - { match: { path_prefix: /v2, methods: [ GET, PUT ] }, strip_prefix: /v2, upstream: a }\n"
	"  - { match: { path_prefix: /x/y/ }, strip_prefix: /x/y/, upstream: a }\n"
	"  - { match: { host: API.example.com, path_prefix: /any }, upstream: a }\n"
	"  - { match: { path_prefix: / , methods: [ DELETE ] }, strip_prefix: /, upstream: a }\n";

static struct config *cfg;

static void
fuzz_load(void)
{
	char dir[] = "/tmp/fuzz-route-XXXXXX", path[64], *errors = NULL;
	FILE *fp;

	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/routes.yaml", dir);
	FUZZ_CHECK((fp = fopen(path, "w")) != NULL);
	fputs(routes_yaml, fp);
	fclose(fp);
	cfg = config_load(path, &errors);
	if (cfg == NULL)
		fprintf(stderr, "%s", errors);
	FUZZ_CHECK(cfg != NULL);
	unlink(path);
	rmdir(dir);
}

static void
fuzz_target(const struct config_route *r, const char *path, size_t plen, const char *query,
    size_t qlen)
{
	char out[512], small[8];
	size_t sl = r->strip_prefix != NULL ? strlen(r->strip_prefix) : 0;
	const char *rest = path;
	size_t rlen = plen;
	int n;

	if (plen + qlen + 2 > sizeof(out))
		return;
	n = route_rewrite_target(r, path, plen, query, qlen, out, sizeof(out));
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(out) && out[0] == '/');
	if (sl > 0 && plen >= sl && memcmp(path, r->strip_prefix, sl) == 0) {
		rest = path + sl;
		rlen = plen - sl;
	}
	if (rest != path && (rlen == 0 || rest[0] != '/')) {
		/* What is left must be an origin-form path: "" -> "/", "x" -> "/x". */
		FUZZ_CHECK((size_t)n == 1 + rlen + qlen && memcmp(out + 1, rest, rlen) == 0);
	} else {
		FUZZ_CHECK((size_t)n == rlen + qlen && memcmp(out, rest, rlen) == 0);
	}
	FUZZ_CHECK(memcmp(out + n - qlen, query, qlen) == 0);
	memset(small, 'Z', sizeof(small));
	n = route_rewrite_target(r, path, plen, query, qlen, small, 4);
	FUZZ_CHECK(n == -1 || n <= 4);
	FUZZ_CHECK(memcmp(small + 4, "ZZZZ", 4) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct config_route *r;
	const char *host, *path, *nl, *q;
	size_t hlen, plen, qlen;
	unsigned method;
	unsigned allowed;
	char norm[1024], again[1024];
	size_t nlen, alen;
	int n;

	if (cfg == NULL)
		fuzz_load();
	if (size < 1)
		return 0;
	method = 1u << (data[0] % 10);
	host = (const char *)data + 1;
	if ((nl = memchr(host, '\n', size - 1)) == NULL)
		return 0;
	hlen = (size_t)(nl - host);
	path = nl + 1;
	plen = size - 1 - hlen - 1;
	if ((q = memchr(path, '?', plen)) != NULL) {
		qlen = plen - (size_t)(q - path);
		plen = (size_t)(q - path);
	} else {
		q = path + plen;
		qlen = 0;
	}
	if (plen > sizeof(norm) || (n = path_norm(path, plen, norm, &nlen)) == PATH_NORM_ABOVE_ROOT)
		return 0;
	if (n == PATH_NORM_DONE) {
		FUZZ_CHECK(nlen <= plen && nlen > 0 && norm[0] == '/');
		FUZZ_CHECK(path_norm(norm, nlen, again, &alen) == PATH_NORM_ASIS);
		memcpy(again, path, plen);
		FUZZ_CHECK(path_norm(again, plen, again, &alen) == PATH_NORM_DONE && alen == nlen &&
		    memcmp(again, norm, nlen) == 0);
		path = norm;
		plen = nlen;
	}
	r = route_match(cfg, host, hlen, path, plen, method, &allowed);
	if (r == NULL) {
		FUZZ_CHECK((allowed & method) == 0);
		return 0;
	}
	FUZZ_CHECK(allowed == 0);
	FUZZ_CHECK(r->methods & method);
	if (r->path != NULL)
		FUZZ_CHECK(strlen(r->path) == plen && memcmp(r->path, path, plen) == 0);
	if (r->path_prefix != NULL)
		FUZZ_CHECK(plen >= strlen(r->path_prefix) &&
		    memcmp(r->path_prefix, path, strlen(r->path_prefix)) == 0);
	if (r->host != NULL)
		FUZZ_CHECK(hlen >= strlen(r->host) && strncasecmp(r->host, host, strlen(r->host)) == 0);
	fuzz_target(r, path, plen, q, qlen);
	return 0;
}
