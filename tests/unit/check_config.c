/*
 * Configuration loader: the scalar parsers, defaults, every file of tests/config/good (must
 * load) and tests/config/bad (must fail with exactly the lines of its NAME.expected, where
 * @FILE@ stands for the path given to config_load).
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* By path: the build directory's autoconf header is also named config.h. */
#include "../../src/config.h"
#include "../../src/header_ops.h"
#include "../../src/rewrite.h"

static const char *srcdir;
static char **good_files, **bad_files;
static size_t ngood, nbad;

static char *
read_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	char *buf;
	long len;

	ck_assert_msg(fp != NULL, "cannot open %s", path);
	fseek(fp, 0, SEEK_END);
	len = ftell(fp);
	rewind(fp);
	buf = malloc((size_t)len + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)len, fp), (size_t)len);
	buf[len] = '\0';
	fclose(fp);
	return buf;
}

/* text with every @FILE@ replaced by file */
static char *
subst_file(const char *text, const char *file)
{
	size_t flen = strlen(file), n = 0;
	const char *p, *q;
	char *out, *o;

	for (p = text; (q = strstr(p, "@FILE@")) != NULL; p = q + 6)
		n++;
	out = o = malloc(strlen(text) + n * flen + 1);
	ck_assert_ptr_nonnull(out);
	for (p = text; (q = strstr(p, "@FILE@")) != NULL; p = q + 6) {
		memcpy(o, p, (size_t)(q - p));
		o += q - p;
		memcpy(o, file, flen);
		o += flen;
	}
	strcpy(o, p);
	return out;
}

static char *
test_path(const char *rel)
{
	size_t len = strlen(srcdir) + strlen(rel) + 2;
	char *p = malloc(len);

	ck_assert_ptr_nonnull(p);
	snprintf(p, len, "%s/%s", srcdir, rel);
	return p;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted *.yaml names of a folder under tests/config. */
static char **
list_yaml(const char *sub, size_t *n)
{
	char path[4096], **names = NULL;
	struct dirent *de;
	size_t len;
	DIR *d;

	snprintf(path, sizeof(path), "%s/config/%s", srcdir, sub);
	*n = 0;
	if ((d = opendir(path)) == NULL)
		return NULL;
	while ((de = readdir(d)) != NULL) {
		len = strlen(de->d_name);
		if (len <= 5 || strcmp(de->d_name + len - 5, ".yaml") != 0)
			continue;
		names = realloc(names, (*n + 1) * sizeof(*names));
		names[(*n)++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, *n, sizeof(*names), cmp_str);
	return names;
}

static struct config *
load_ok(const char *rel)
{
	char *path = test_path(rel), *errors = NULL;
	struct config *cfg = config_load(path, &errors);

	ck_assert_msg(cfg != NULL, "%s should load, got:\n%s", rel, errors ? errors : "");
	ck_assert_ptr_null(errors);
	ck_assert_str_eq(cfg->path, path);
	free(path);
	return cfg;
}

/* ------------------------------------------------------------------ scalar parsers */

START_TEST(test_size)
{
	static const struct { const char *text; size_t v; } ok[] = {
		{ "0", 0 }, { "512", 512 }, { "1k", 1024 }, { "16k", 16384 }, { "16K", 16384 },
		{ "8m", 8 << 20 }, { "8M", 8 << 20 }, { "1g", 1UL << 30 }, { "1.5k", 1536 },
		{ "0.5m", 512 << 10 }, { "1.0001k", 1024 }, { "007", 7 },
	};
	static const char *const bad[] = {
		"", "k", "-1", "+1", " 1k", "1k ", "1 k", "1kb", "1.k", ".5k", "1.5", "1t", "1e3",
		"0x10", "99999999999999999999", "17179869184g", "1,5k",
	};
	size_t i, v;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 12345;
		ck_assert_msg(config_parse_size(ok[i].text, &v) == 0, "\"%s\"", ok[i].text);
		ck_assert_msg(v == ok[i].v, "\"%s\" -> %zu", ok[i].text, v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(config_parse_size(bad[i], &v) == -1, "\"%s\" accepted", bad[i]);
}
END_TEST

START_TEST(test_duration)
{
	static const struct { const char *text; uint64_t ms; } ok[] = {
		{ "0", 0 }, { "0s", 0 }, { "250ms", 250 }, { "10s", 10000 }, { "2m", 120000 },
		{ "1h", 3600000 }, { "1m30s", 90000 }, { "1h1m1s1ms", 3661001 }, { "1.5s", 1500 },
		{ "0.5m", 30000 }, { "1.5ms", 1 }, { "90s", 90000 },
	};
	static const char *const bad[] = {
		"", "10", "s", "ms", "10 s", " 10s", "10s ", "10S", "10M", "1d", "-1s", "1.s",
		"10x", "1m30", "99999999999999999999ms", "5124095576030432h",
	};
	uint64_t ms;
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ms = 12345;
		ck_assert_msg(config_parse_duration(ok[i].text, &ms) == 0, "\"%s\"", ok[i].text);
		ck_assert_msg(ms == ok[i].ms, "\"%s\" -> %llu", ok[i].text, (unsigned long long)ms);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(config_parse_duration(bad[i], &ms) == -1, "\"%s\" accepted", bad[i]);
}
END_TEST

START_TEST(test_addr)
{
	static const struct { const char *text, *host; int family; uint16_t port; } ok[] = {
		{ "127.0.0.1:8080", "127.0.0.1", AF_INET, 8080 },
		{ "0.0.0.0:1", "0.0.0.0", AF_INET, 1 },
		{ "*:65535", "0.0.0.0", AF_INET, 65535 },
		{ "localhost:9000", "127.0.0.1", AF_INET, 9000 },
		{ "LocalHost:9000", "127.0.0.1", AF_INET, 9000 },
		{ "[::1]:8443", "::1", AF_INET6, 8443 },
		{ "[::]:80", "::", AF_INET6, 80 },
		{ "[2001:DB8:0::1]:80", "2001:db8::1", AF_INET6, 80 },
		{ "10.0.0.1:00080", "10.0.0.1", AF_INET, 80 },
	};
	static const char *const bad[] = {
		"", "8080", ":8080", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
		"127.0.0.1:999999", "127.0.0.1:http", "127.0.0.1:-1", "127.0.0.1:80 ",
		"example.com:80", "::1:80", "[::1]", "[::1]80", "[::1:80", "[127.0.0.1]:80",
		"[*]:80", "256.1.1.1:80", "1.2.3:80", "[fe80::1%eth0]:80", "*:0",
	};
	struct config_addr a;
	const struct sockaddr_in *sin = (const void *)&a.ss;
	const struct sockaddr_in6 *sin6 = (const void *)&a.ss;
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(config_parse_addr(ok[i].text, &a) == 0, "\"%s\"", ok[i].text);
		ck_assert_str_eq(a.text, ok[i].text);
		ck_assert_str_eq(a.host, ok[i].host);
		ck_assert_uint_eq(a.port, ok[i].port);
		ck_assert_int_eq(a.ss.ss_family, ok[i].family);
		if (ok[i].family == AF_INET) {
			ck_assert_uint_eq(a.sslen, sizeof(struct sockaddr_in));
			ck_assert_uint_eq(ntohs(sin->sin_port), ok[i].port);
		} else {
			ck_assert_uint_eq(a.sslen, sizeof(struct sockaddr_in6));
			ck_assert_uint_eq(ntohs(sin6->sin6_port), ok[i].port);
		}
		config_addr_free(&a);
		ck_assert_ptr_null(a.text);
		config_addr_free(&a);   /* twice is harmless */
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(config_parse_addr(bad[i], &a) == -1, "\"%s\" accepted", bad[i]);
		ck_assert_ptr_null(a.text);     /* nothing to free after a failure */
	}
}
END_TEST

START_TEST(test_method_bit)
{
	ck_assert_uint_eq(config_method_bit("GET", 3), METHOD_GET);
	ck_assert_uint_eq(config_method_bit("HEAD", 4), METHOD_HEAD);
	ck_assert_uint_eq(config_method_bit("POST", 4), METHOD_POST);
	ck_assert_uint_eq(config_method_bit("PUT", 3), METHOD_PUT);
	ck_assert_uint_eq(config_method_bit("DELETE", 6), METHOD_DELETE);
	ck_assert_uint_eq(config_method_bit("OPTIONS", 7), METHOD_OPTIONS);
	ck_assert_uint_eq(config_method_bit("PATCH", 5), METHOD_PATCH);
	ck_assert_uint_eq(config_method_bit("TRACE", 5), METHOD_TRACE);
	ck_assert_uint_eq(config_method_bit("CONNECT", 7), METHOD_CONNECT);
	/* method names are case-sensitive on the wire */
	ck_assert_uint_eq(config_method_bit("get", 3), METHOD_OTHER);
	ck_assert_uint_eq(config_method_bit("GETX", 3), METHOD_GET);   /* length counts */
	ck_assert_uint_eq(config_method_bit("GETX", 4), METHOD_OTHER);
	ck_assert_uint_eq(config_method_bit("PROPFIND", 8), METHOD_OTHER);
	ck_assert_uint_eq(config_method_bit("", 0), METHOD_OTHER);
}
END_TEST

/* ------------------------------------------------------------------ errors API */

START_TEST(test_error_api)
{
	struct config_parse *ctx = config_parse_new("x.yaml");
	yaml_node_t a, b;
	char *errors;

	ck_assert_uint_eq(config_parse_nerrors(ctx), 0);
	ck_assert_ptr_null(config_parse_errors(ctx));
	ck_assert_str_eq(config_where(ctx), "");
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.start_mark.line = 4;          /* 0-based in libyaml: reported as line 5 */
	a.start_mark.column = 2;
	b.start_mark.line = 1;
	b.start_mark.column = 0;
	config_error(ctx, &a, "second %d", 2);
	config_error(ctx, &b, "first");
	config_error(ctx, &a, "third");
	config_error(ctx, NULL, "no position");
	ck_assert_uint_eq(config_parse_nerrors(ctx), 4);
	errors = config_parse_errors(ctx);
	ck_assert_str_eq(errors, "x.yaml: no position\nx.yaml:2:1: first\nx.yaml:5:3: second 2\n"
	    "x.yaml:5:3: third\n");
	free(errors);
	config_parse_free(ctx);
}
END_TEST

START_TEST(test_cannot_open)
{
	char *errors = NULL;
	struct config *cfg = config_load("/nonexistent/jsongate.yaml", &errors);

	ck_assert_ptr_null(cfg);
	ck_assert_str_eq(errors, "/nonexistent/jsongate.yaml: cannot open: "
	    "No such file or directory\n");
	free(errors);
}
END_TEST

START_TEST(test_cannot_read)
{
	char *path = test_path("config"), *errors = NULL, *expected;
	struct config *cfg = config_load(path, &errors);

	ck_assert_ptr_null(cfg);
	expected = subst_file("@FILE@: cannot read: Is a directory\n", path);
	ck_assert_str_eq(errors, expected);
	free(expected);
	free(errors);
	free(path);
}
END_TEST

/* ------------------------------------------------------------------ loading */

START_TEST(test_defaults)
{
	struct config *cfg = load_ok("config/good/minimal.yaml");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	ck_assert_uint_eq(cfg->workers, ncpu < 1 ? 1 : (unsigned)ncpu);
	ck_assert_ptr_null(cfg->user);
	ck_assert_int_eq(cfg->log_level, LOG_LEVEL_INFO);
	ck_assert_str_eq(cfg->access_log, "stderr");
	ck_assert_int_eq(cfg->access_format, ACCESS_JSON);
	ck_assert_uint_eq(cfg->njson_fields, 0);
	ck_assert_ptr_null(cfg->admin_listen);
	ck_assert_uint_eq(cfg->limits.max_header, 16 * 1024);
	ck_assert_uint_eq(cfg->limits.max_body, 8 * 1024 * 1024);
	ck_assert_uint_eq(cfg->limits.max_connections, 10000);
	ck_assert_uint_eq(cfg->limits.max_depth, 1000);
	ck_assert_uint_eq(cfg->limits.route_scan, 64 * 1024);
	ck_assert_uint_eq(cfg->limits.max_backends, 16);
	ck_assert_uint_eq(cfg->timeouts.client_header, 10000);
	ck_assert_uint_eq(cfg->timeouts.client_body, 30000);
	ck_assert_uint_eq(cfg->timeouts.keepalive, 60000);
	ck_assert_uint_eq(cfg->timeouts.upstream_connect, 2000);
	ck_assert_uint_eq(cfg->timeouts.upstream_response, 30000);
	ck_assert_uint_eq(cfg->timeouts.shutdown_grace, 30000);
	ck_assert_uint_eq(cfg->nlisteners, 1);
	ck_assert_str_eq(cfg->listeners[0].addr.text, "127.0.0.1:8080");
	ck_assert_uint_eq(cfg->nupstreams, 0);
	ck_assert_uint_eq(cfg->nroutes, 0);
	config_free(cfg);
}
END_TEST

START_TEST(test_nulls_are_defaults)
{
	struct config *cfg = load_ok("config/good/nulls.yaml");
	const struct config_route *r;

	ck_assert_uint_ge(cfg->workers, 1);
	ck_assert_ptr_null(cfg->user);
	ck_assert_str_eq(cfg->access_log, "stderr");
	ck_assert_ptr_null(cfg->admin_listen);
	ck_assert_uint_eq(cfg->limits.max_body, 8 * 1024 * 1024);
	ck_assert_uint_eq(cfg->timeouts.keepalive, 60000);
	ck_assert_ptr_null(cfg->upstreams[0].host_header);
	r = &cfg->routes[0];
	ck_assert_str_eq(r->name, "routes[0]");
	ck_assert_ptr_null(r->path_prefix);
	ck_assert_uint_eq(r->methods, METHOD_ANY);
	ck_assert_ptr_null(r->request);
	ck_assert_ptr_null(r->response);
	config_free(cfg);
}
END_TEST

START_TEST(test_full)
{
	struct config *cfg = load_ok("config/good/full.yaml");
	const struct config_upstream *u;
	const struct config_route *r;

	ck_assert_uint_eq(cfg->workers, 3);
	ck_assert_str_eq(cfg->user, "nobody");
	ck_assert_str_eq(cfg->pid_file, "/run/jsongate.pid");
	ck_assert_int_eq(cfg->log_level, LOG_LEVEL_DEBUG);
	ck_assert_str_eq(cfg->access_log, "/var/log/jsongate/access.log");
	ck_assert_str_eq(cfg->error_log, "/var/log/jsongate/error.log");
	ck_assert_int_eq(cfg->access_format, ACCESS_COMBINED);
	ck_assert_ptr_nonnull(cfg->admin_listen);
	ck_assert_str_eq(cfg->admin_listen->host, "127.0.0.1");
	ck_assert_uint_eq(cfg->admin_listen->port, 9901);
	ck_assert_uint_eq(cfg->limits.max_header, 32 * 1024);
	ck_assert_uint_eq(cfg->limits.max_body, 1536 * 1024);
	ck_assert_uint_eq(cfg->limits.max_connections, 500);
	ck_assert_uint_eq(cfg->limits.max_depth, 64);
	ck_assert_uint_eq(cfg->limits.route_scan, 128 * 1024);
	ck_assert_uint_eq(cfg->timeouts.client_header, 5000);
	ck_assert_uint_eq(cfg->timeouts.client_body, 90000);
	ck_assert_uint_eq(cfg->timeouts.keepalive, 0);
	ck_assert_uint_eq(cfg->timeouts.upstream_connect, 250);
	ck_assert_uint_eq(cfg->timeouts.upstream_response, 120000);
	ck_assert_uint_eq(cfg->timeouts.shutdown_grace, 3600000);

	ck_assert_uint_eq(cfg->nlisteners, 2);
	ck_assert_int_eq(cfg->listeners[0].addr.ss.ss_family, AF_INET);
	ck_assert_int_eq(cfg->listeners[1].addr.ss.ss_family, AF_INET6);
	ck_assert_uint_eq(cfg->listeners[1].addr.port, 8443);

	ck_assert_uint_eq(cfg->nupstreams, 2);
	u = &cfg->upstreams[0];
	ck_assert_str_eq(u->name, "orders");
	ck_assert_uint_eq(u->nservers, 2);
	ck_assert_str_eq(u->servers[0].addr.text, "127.0.0.1:9001");
	ck_assert_uint_eq(u->servers[0].weight, 1);
	ck_assert_str_eq(u->servers[1].addr.text, "127.0.0.1:9002");
	ck_assert_uint_eq(u->servers[1].weight, 2);
	ck_assert_int_eq(u->balance, BALANCE_LEAST_CONN);
	ck_assert_uint_eq(u->keepalive, 8);
	ck_assert_str_eq(u->host_header, "orders.internal");
	u = &cfg->upstreams[1];
	ck_assert_str_eq(u->name, "users");
	ck_assert_int_eq(u->balance, BALANCE_HASH);
	ck_assert_uint_eq(u->keepalive, 32);
	ck_assert_ptr_null(u->host_header);

	ck_assert_uint_eq(cfg->nroutes, 3);
	r = &cfg->routes[0];
	ck_assert_str_eq(r->name, "orders");
	ck_assert_str_eq(r->host, "api.example.com");          /* lowercased */
	ck_assert_ptr_null(r->path);
	ck_assert_str_eq(r->path_prefix, "/api/orders");
	ck_assert_uint_eq(r->methods, METHOD_GET | METHOD_HEAD | METHOD_POST);
	ck_assert_ptr_eq(r->upstream, &cfg->upstreams[0]);
	ck_assert_str_eq(r->strip_prefix, "/api");
	ck_assert_int_eq(r->on_error, ON_ERROR_FAIL);
	ck_assert_int_eq(r->validate, VALIDATE_FULL);
	ck_assert_int_eq(r->compress, COMPRESS_GZIP);
	ck_assert_str_eq(r->json_types[0], "application/json");
	ck_assert_str_eq(r->json_types[1], "application/vnd.api+json");
	ck_assert_ptr_null(r->json_types[2]);
	ck_assert(config_status_in(r->response_on, 200) && config_status_in(r->response_on, 404));
	ck_assert(!config_status_in(r->response_on, 201) && !config_status_in(r->response_on, 500));
	ck_assert_ptr_nonnull(r->error_response);
	ck_assert_uint_eq(r->timeouts.upstream_connect, 250);          /* the global one */
	ck_assert_uint_eq(r->timeouts.upstream_response, 5000);
	ck_assert_uint_eq(r->timeouts.upstream_try, 1000);
	ck_assert_uint_eq(r->request_headers->ndrop, 2);        /* X-Api, X-Debug */
	ck_assert_uint_eq(r->request_headers->nout, 2);         /* X-Api, X-Gw */
	ck_assert_str_eq(r->request_headers->out[1].name, "X-Gw");
	ck_assert_int_eq(r->request_headers->out[1].var, REWRITE_VAR_ROUTE);
	ck_assert_uint_eq(r->response_headers->ndrop, 1);
	ck_assert_uint_eq(r->response_headers->nout, 0);
	ck_assert_uint_eq(r->njson_match, 2);
	r = &cfg->routes[1];
	ck_assert_ptr_null(r->request_headers);
	ck_assert_ptr_null(r->response_headers);
	ck_assert_uint_eq(r->timeouts.upstream_connect, 250);
	ck_assert_uint_eq(r->timeouts.upstream_response, 120000);
	ck_assert_uint_eq(r->timeouts.upstream_try, 0);
	ck_assert(config_status_in(r->response_on, 299) && !config_status_in(r->response_on, 300));
	ck_assert_ptr_null(r->error_response);
	ck_assert_str_eq(r->path, "/healthz");
	ck_assert_uint_eq(r->njson_match, 1);
	ck_assert_ptr_null(r->host);
	ck_assert_ptr_eq(r->upstream, &cfg->upstreams[1]);
	r = &cfg->routes[2];
	ck_assert_str_eq(r->name, "routes[2]");
	ck_assert_ptr_null(r->json_match);
	ck_assert_ptr_null(r->path);
	ck_assert_ptr_null(r->path_prefix);
	ck_assert_uint_eq(r->methods, METHOD_ANY);
	ck_assert_ptr_null(r->strip_prefix);
	ck_assert_int_eq(r->on_error, ON_ERROR_PASS);
	ck_assert_int_eq(r->validate, VALIDATE_ENVELOPE);
	ck_assert_int_eq(r->compress, COMPRESS_OFF);
	ck_assert_str_eq(r->json_types[0], "application/json");
	ck_assert_str_eq(r->json_types[1], "application/*+json");
	ck_assert_ptr_null(r->json_types[2]);
	ck_assert_ptr_null(r->request);
	ck_assert_ptr_null(r->response);
	config_free(cfg);
}
END_TEST

/* Every status of set from 100 to 599, as ranges "lo-hi,lo-hi". */
static void
status_ranges(const uint64_t *set, char *out, size_t cap)
{
	int c, lo = -1;
	size_t n = 0;

	out[0] = '\0';
	for (c = 100; c <= 600; c++) {
		if (c <= 599 && config_status_in(set, c)) {
			if (lo < 0)
				lo = c;
		} else if (lo >= 0) {
			n += (size_t)snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", lo, c - 1);
			lo = -1;
		}
	}
}

/* Statuses, classes (2xx, 2XX) and ranges (200..299) wherever a status set is taken. */
START_TEST(test_status_sets)
{
	struct config *cfg = load_ok("config/good/status_sets.yaml");
	char got[256];

	status_ranges(cfg->upstreams[0].health->status, got, sizeof(got));
	ck_assert_str_eq(got, "200-299");
	status_ranges(cfg->upstreams[1].health->status, got, sizeof(got));
	ck_assert_str_eq(got, "204-204,300-403");
	status_ranges(cfg->routes[0].response_on, got, sizeof(got));
	ck_assert_str_eq(got, "200-299,404-409");
	config_free(cfg);
}
END_TEST

static const struct {
	const char *text;
	int result;
	unsigned first, last;
} status_range_cases[] = {
	{ "200", 0, 200, 200 }, { "2xx", 0, 200, 299 }, { "5XX", 0, 500, 599 },
	{ "1xX", 0, 100, 199 }, { "200..299", 0, 200, 299 }, { "404..404", 0, 404, 404 },
	{ "100..599", 0, 100, 599 }, { "300..200", -2, 0, 0 }, { "99", -1, 0, 0 },
	{ "600", -1, 0, 0 }, { "6xx", -1, 0, 0 }, { "2x", -1, 0, 0 }, { "200..", -1, 0, 0 },
	{ "..299", -1, 0, 0 }, { "200...299", -1, 0, 0 }, { "200..600", -1, 0, 0 },
	{ "20..299", -1, 0, 0 }, { "2xx..3xx", -1, 0, 0 }, { "", -1, 0, 0 }, { "2 00", -1, 0, 0 },
};

START_TEST(test_status_range)
{
	unsigned first = 0, last = 0;
	int r = config_status_range(status_range_cases[_i].text, &first, &last);

	ck_assert_msg(r == status_range_cases[_i].result, "\"%s\": %d", status_range_cases[_i].text,
	    r);
	if (r == 0) {
		ck_assert_uint_eq(first, status_range_cases[_i].first);
		ck_assert_uint_eq(last, status_range_cases[_i].last);
	}
}
END_TEST

START_TEST(test_addresses)
{
	struct config *cfg = load_ok("config/good/addresses.yaml");

	ck_assert_uint_eq(cfg->nlisteners, 5);
	ck_assert_str_eq(cfg->listeners[1].addr.host, "0.0.0.0");
	ck_assert_str_eq(cfg->listeners[2].addr.host, "127.0.0.1");
	ck_assert_str_eq(cfg->listeners[3].addr.host, "::1");
	ck_assert_uint_eq(cfg->listeners[3].addr.port, 65535);
	ck_assert_int_eq(cfg->admin_listen->ss.ss_family, AF_INET6);
	ck_assert_uint_eq(cfg->upstreams[0].servers[2].weight, 1000);
	config_free(cfg);
}
END_TEST

START_TEST(test_anchors)
{
	struct config *cfg = load_ok("config/good/anchors.yaml");

	ck_assert_uint_eq(cfg->upstreams[1].nservers, 2);
	ck_assert_str_eq(cfg->routes[1].path_prefix, "/api");
	ck_assert_uint_eq(cfg->routes[1].methods, METHOD_GET | METHOD_HEAD);
	ck_assert_ptr_eq(cfg->routes[1].upstream, &cfg->upstreams[1]);
	config_free(cfg);
}
END_TEST

/* Every file is named relative to the configuration's directory. */
START_TEST(test_files)
{
	struct config *cfg = load_ok("config/good/files.yaml");
	char *want;

	want = test_path("config/good/jsongate.pid");
	ck_assert_str_eq(cfg->pid_file, want);
	free(want);
	want = test_path("config/good/logs/access.log");
	ck_assert_str_eq(cfg->access_log, want);
	free(want);
	want = test_path("config/good/log.sock");
	ck_assert_str_eq(cfg->error_log + 7, want);
	ck_assert_mem_eq(cfg->error_log, "syslog:", 7);
	free(want);
	config_free(cfg);

	cfg = load_ok("config/good/minimal.yaml");
	ck_assert_ptr_null(cfg->error_log);
	ck_assert_ptr_null(cfg->pid_file);
	config_free(cfg);
}
END_TEST

START_TEST(test_aggregate)
{
	struct config *cfg = load_ok("config/good/aggregate.yaml");
	const struct config_route *r = &cfg->routes[0];

	ck_assert_uint_eq(cfg->limits.max_backends, 3);
	ck_assert_ptr_null(r->upstream);
	ck_assert_uint_eq(r->nbackends, 3);
	ck_assert_str_eq(r->backends[0].name, "user");
	ck_assert_str_eq(r->backends[0].key_json, "\"user\":");
	ck_assert_ptr_eq(r->backends[0].upstream, &cfg->upstreams[0]);
	ck_assert_str_eq(r->backends[0].method, "GET");
	ck_assert_uint_eq(r->backends[0].method_bit, METHOD_GET);
	ck_assert_uint_eq(r->backends[0].timeout, 0);
	ck_assert_int_eq(r->backends[0].required, 0);
	ck_assert_int_eq(r->backends[0].missing, MISSING_NULL);
	ck_assert_int_eq(r->backends[1].required, 1);
	ck_assert_int_eq(r->backends[1].missing, MISSING_OMIT);
	ck_assert_uint_eq(r->timeout, 3000);
	ck_assert_str_eq(r->errors_key_json, "\"_errors\":");
	ck_assert_str_eq(r->backends[1].path, "/orders?limit=10&sort=-date");
	ck_assert_str_eq(r->backends[1].method, "POST");
	ck_assert_uint_eq(r->backends[1].timeout, 2000);
	ck_assert_ptr_eq(r->backends[1].upstream, &cfg->upstreams[1]);
	ck_assert_str_eq(r->backends[2].key_json, "\"odd \\\"key\\\"\":");
	ck_assert_uint_eq(r->backends[2].key_json_len, strlen(r->backends[2].key_json));
	r = &cfg->routes[1];
	ck_assert_ptr_nonnull(r->pattern);
	ck_assert_uint_eq(r->backends[0].nafter, 1);
	ck_assert_uint_eq(r->backends[0].after[0], 1);
	ck_assert_uint_eq(r->backends[0].target.npieces, 7);
	ck_assert_int_eq(r->backends[0].target.pieces[1].var, TEMPLATE_BACKEND);
	ck_assert_uint_eq(r->backends[0].target.pieces[1].index, 1);
	ck_assert_str_eq(r->backends[0].target.pieces[1].text + r->backends[0].target.pieces[1].off,
	    "account.id");
	ck_assert_int_eq(r->backends[0].target.pieces[3].var, TEMPLATE_PATH);
	ck_assert(r->backends[0].target.pieces[3].rest);
	ck_assert(!r->backends[0].target.pieces[3].in_query);
	ck_assert(r->backends[0].target.pieces[5].in_query);
	ck_assert_str_eq(r->backends[0].target.pieces[6].text, "&c=$");
	ck_assert_uint_eq(r->backends[0].nheaders, 2);
	ck_assert_str_eq(r->backends[0].headers[1].name, "Host");
	ck_assert_uint_eq(r->backends[1].nafter, 0);
	ck_assert_int_eq(r->merge, MERGE_KEYED);
	ck_assert_int_eq(r->backends[1].on_error, ON_ERROR_FAIL);
	ck_assert_ptr_null(r->backends[1].response);
	r = &cfg->routes[2];
	ck_assert_int_eq(r->merge, MERGE_FLAT);
	ck_assert_str_eq(r->errors_key, "errors");
	ck_assert_uint_eq(r->timeout, 0);
	ck_assert_ptr_nonnull(r->response);
	ck_assert_ptr_nonnull(r->backends[0].response);
	ck_assert_int_eq(r->backends[0].on_error, ON_ERROR_PASS);
	ck_assert_ptr_null(cfg->routes[3].backends);
	config_free(cfg);
}
END_TEST

START_TEST(test_jsonrpc)
{
	struct config *cfg = load_ok("config/good/jsonrpc.yaml");
	const struct config_jsonrpc *jc = cfg->routes[0].jsonrpc;

	ck_assert_ptr_null(cfg->routes[0].upstream);
	ck_assert_uint_eq(cfg->routes[0].timeout, 10000);
	ck_assert_uint_eq(jc->nmethods, 3);
	ck_assert_str_eq(jc->methods[0].name.text, "eth_getLogs");
	ck_assert_int_eq(jc->methods[0].name.prefix, 0);
	ck_assert_ptr_eq(jc->methods[0].upstream, &cfg->upstreams[0]);
	ck_assert_str_eq(jc->methods[1].name.text, "trace_");
	ck_assert_uint_eq(jc->methods[1].name.len, 6);
	ck_assert_int_eq(jc->methods[1].name.prefix, 1);
	ck_assert_ptr_eq(jc->methods[2].upstream, &cfg->upstreams[1]);
	ck_assert_ptr_eq(jc->default_upstream, &cfg->upstreams[1]);
	/* metrics labels: the exact names; a prefix counts as "other" */
	ck_assert_uint_eq(jc->nlabels, 2);
	ck_assert_str_eq(jc->labels[0], "eth_getLogs");
	ck_assert_str_eq(jc->labels[1], "eth_call");
	ck_assert_uint_eq(jc->methods[0].label, 0);
	ck_assert_uint_eq(jc->methods[1].label, 2);
	ck_assert_uint_eq(jc->methods[2].label, 1);
	ck_assert_int_eq(jc->split, JSONRPC_SPLIT_BATCH);
	ck_assert_uint_eq(jc->max_batch, 500);
	ck_assert_uint_eq(jc->parallel, 4);
	ck_assert_uint_eq(jc->nallow, 3);
	ck_assert_int_eq(jc->allow[0].prefix, 1);
	ck_assert_str_eq(jc->allow[2].text, "net_version");
	ck_assert_int_eq(jc->allow[2].prefix, 0);
	ck_assert_uint_eq(jc->ndeny, 2);
	ck_assert_str_eq(jc->deny[1].text, "eth_send");
	ck_assert_int_eq(jc->deny[1].prefix, 1);
	/* the defaults */
	jc = cfg->routes[1].jsonrpc;
	ck_assert_uint_eq(jc->nmethods, 0);
	ck_assert_int_eq(jc->split, JSONRPC_SPLIT_SINGLE);
	ck_assert_uint_eq(jc->max_batch, 1000);
	ck_assert_uint_eq(jc->parallel, 16);
	ck_assert_ptr_null(jc->allow);
	ck_assert_uint_eq(jc->ndeny, 0);
	ck_assert_ptr_null(cfg->routes[1].upstream);
	config_free(cfg);
}
END_TEST

/* The sample the quick start runs. */
START_TEST(test_sample)
{
	struct config *cfg = load_ok("../conf/jsongate.yaml");

	ck_assert_uint_eq(cfg->nlisteners, 1);
	ck_assert_str_eq(cfg->listeners[0].addr.text, "127.0.0.1:8080");
	ck_assert_str_eq(cfg->access_log, "stderr");
	ck_assert_int_eq(cfg->access_format, ACCESS_JSON);
	ck_assert_uint_eq(cfg->nupstreams, 1);
	ck_assert_str_eq(cfg->upstreams[0].name, "demo");
	ck_assert_str_eq(cfg->upstreams[0].servers[0].addr.text, "127.0.0.1:9000");
	ck_assert_uint_eq(cfg->upstreams[0].keepalive, 32);
	ck_assert_uint_eq(cfg->nroutes, 4);
	ck_assert_ptr_nonnull(cfg->routes[0].pattern);
	ck_assert_uint_eq(cfg->routes[0].nbackends, 3);
	ck_assert_int_eq(cfg->routes[0].backends[2].required, 0);
	ck_assert_str_eq(cfg->routes[1].path_prefix, "/v2/");
	ck_assert_str_eq(cfg->routes[1].strip_prefix, "/v2");
	ck_assert_int_eq(cfg->routes[1].on_error, ON_ERROR_FAIL);
	ck_assert_ptr_nonnull(cfg->routes[1].response);
	ck_assert_uint_eq(cfg->routes[1].response->nops, 2);
	ck_assert_str_eq(cfg->routes[2].path_prefix, "/api/");
	ck_assert_ptr_null(cfg->routes[2].response);
	ck_assert_str_eq(cfg->routes[3].path_prefix, "/");
	config_free(cfg);
}
END_TEST

START_TEST(test_good_files)
{
	char rel[512];
	struct config *cfg;

	snprintf(rel, sizeof(rel), "config/good/%s", good_files[_i]);
	cfg = load_ok(rel);
	config_free(cfg);
}
END_TEST

START_TEST(test_bad_files)
{
	char rel[512], *path, *errors = NULL, *text, *expected;
	struct config *cfg;
	size_t len;

	snprintf(rel, sizeof(rel), "config/bad/%s", bad_files[_i]);
	path = test_path(rel);
	cfg = config_load(path, &errors);
	ck_assert_msg(cfg == NULL, "%s loaded but should fail", rel);
	ck_assert_ptr_nonnull(errors);

	len = strlen(rel);
	strcpy(rel + len - 5, ".expected");
	free(path);
	path = test_path(rel);
	text = read_file(path);
	free(path);
	snprintf(rel, sizeof(rel), "config/bad/%s", bad_files[_i]);
	path = test_path(rel);
	expected = subst_file(text, path);
	ck_assert_msg(strcmp(errors, expected) == 0, "%s:\nexpected:\n%s\ngot:\n%s", rel, expected,
	    errors);
	free(text);
	free(expected);
	free(errors);
	free(path);
}
END_TEST

START_TEST(test_schema)
{
	char *buf = NULL, *line, *save = NULL;
	size_t len = 0, n = 0;
	FILE *fp = open_memstream(&buf, &len);
	const char *p;
	int tabs;

	config_schema_write(fp);
	fclose(fp);
	ck_assert_ptr_nonnull(strstr(buf, "limits.max_body\tsize\t8m\t"));
	ck_assert_ptr_nonnull(strstr(buf, "routes[].match.path_prefix\tpath\t-\t"));
	ck_assert_ptr_nonnull(strstr(buf, "listeners\tlist\t(required)\t"));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		for (tabs = 0, p = line; *p; p++)
			tabs += *p == '\t';
		ck_assert_msg(tabs == 3, "bad schema line: %s", line);
		n++;
	}
	ck_assert_uint_ge(n, 40);
	free(buf);
}
END_TEST

static Suite *
config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("parsers");
	tcase_add_test(tc, test_size);
	tcase_add_test(tc, test_duration);
	tcase_add_test(tc, test_addr);
	tcase_add_test(tc, test_method_bit);
	tcase_add_test(tc, test_error_api);
	tcase_add_test(tc, test_schema);
	suite_add_tcase(s, tc);

	tc = tcase_create("load");
	tcase_add_test(tc, test_cannot_open);
	tcase_add_test(tc, test_cannot_read);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_nulls_are_defaults);
	tcase_add_test(tc, test_full);
	tcase_add_test(tc, test_status_sets);
	tcase_add_loop_test(tc, test_status_range, 0,
	    (int)(sizeof(status_range_cases) / sizeof(status_range_cases[0])));
	tcase_add_test(tc, test_addresses);
	tcase_add_test(tc, test_anchors);
	tcase_add_test(tc, test_aggregate);
	tcase_add_test(tc, test_jsonrpc);
	tcase_add_test(tc, test_sample);
	tcase_add_test(tc, test_files);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_loop_test(tc, test_good_files, 0, (int)ngood);
	tcase_add_loop_test(tc, test_bad_files, 0, (int)nbad);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr;
	size_t i;
	int failed;

	srcdir = getenv("TESTS_SRCDIR");
	if (srcdir == NULL)
		srcdir = "tests";
	good_files = list_yaml("good", &ngood);
	bad_files = list_yaml("bad", &nbad);
	if (ngood == 0 || nbad == 0) {
		fprintf(stderr, "no config files under %s/config (set TESTS_SRCDIR)\n", srcdir);
		return EXIT_FAILURE;
	}
	sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	for (i = 0; i < ngood; i++)
		free(good_files[i]);
	for (i = 0; i < nbad; i++)
		free(bad_files[i]);
	free(good_files);
	free(bad_files);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
