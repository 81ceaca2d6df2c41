/*
 * Micro-benchmark of the envelope engine: `unwrap: data` and a reshape (drop, rename, set),
 * also with a when: condition on each op, on 1 KB, 16 KB, 256 KB and 1 MB envelopes, against memcpy of the same bytes and, when
 * libjansson is installed, a jansson decode + encode.  Prints ns/byte and TSC cycles/byte,
 * and counts heap allocations per request once warm.
 *
 *   micro_envelope                    the table
 *   micro_envelope -c CASE SIZE N     run one case N times with callgrind collection toggled
 *                                     around the loop, for instructions/byte:
 *     valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=/dev/null \
 *         bench/micro_envelope -c unwrap 1048576 20
 *   (CASE: memcpy, unwrap, reshape, reshape-when, unwrap-full, jansson)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#define RUNNING_ON_VALGRIND 0
#endif

#include "rewrite.h"

/* Allocation counter: every malloc family call of the process goes through here. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static unsigned long bench_allocs;

void *
malloc(size_t n)
{
	bench_allocs++;
	return __libc_malloc(n);
}

void *
calloc(size_t n, size_t m)
{
	bench_allocs++;
	return __libc_calloc(n, m);
}

void *
realloc(void *p, size_t n)
{
	bench_allocs++;
	return __libc_realloc(p, n);
}

/* jansson through dlopen: no build dependency, used only when installed. */
static void *(*bench_json_loadb)(const char *, size_t, size_t, void *);
static size_t (*bench_json_dumpb)(const void *, char *, size_t, size_t);
static void (*bench_json_delete)(void *);

static void
bench_jansson_open(void)
{
	void *h = dlopen("libjansson.so.4", RTLD_NOW);

	if (h == NULL)
		return;
	bench_json_loadb = (void *(*)(const char *, size_t, size_t, void *))dlsym(h, "json_loadb");
	bench_json_dumpb = (size_t (*)(const void *, char *, size_t, size_t))dlsym(h, "json_dumpb");
	bench_json_delete = (void (*)(void *))dlsym(h, "json_delete");
	if (!bench_json_loadb || !bench_json_dumpb || !bench_json_delete)
		bench_json_loadb = NULL;
}

/* {"code":0,"msg":"ok","data":{"items":[...]},"debug":{...}} of about size bytes. */
static char *
bench_envelope(size_t size, size_t *len)
{
	char *b = malloc(size + 512);
	size_t n = 0, i = 0;

	n += (size_t)sprintf(b, "{\"code\":0,\"msg\":\"ok\",\"data\":{\"total\":%zu,\"items\":[", size);
	while (n + 200 < size)
		n += (size_t)sprintf(b + n, "%s{\"id\":%zu,\"name\":\"item \\\"%zu\\\"\",\"tags\":[\"a\",\"b\"],"
		    "\"price\":%zu.25,\"active\":true,\"note\":null}", i ? "," : "", i, i, i % 1000), i++;
	n += (size_t)sprintf(b + n, "]},\"debug\":{\"trace\":\"abcdef\",\"ms\":[1,2,3]}}");
	*len = n;
	return b;
}

static double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

enum bench_case { B_MEMCPY, B_UNWRAP, B_RESHAPE, B_RESHAPE_WHEN, B_UNWRAP_FULL, B_JANSSON,
	B_NCASES };
static const char *const bench_names[] = { "memcpy", "unwrap", "reshape", "reshape-when",
    "unwrap-full", "jansson" };

static struct rewrite_program *prog_unwrap, *prog_reshape, *prog_reshape_when;
static struct rewrite_vars vars_200 = { .status = 200 };
static struct rewrite_ctx *ctx;
static char *dst;

static int
bench_once(enum bench_case c, const char *body, size_t len)
{
	struct rewrite_result res;
	void *j;
	int r = 0;

	switch (c) {
	case B_MEMCPY:
		memcpy(dst, body, len);
		__asm__ volatile("" : : "r"(dst) : "memory");
		break;
	case B_UNWRAP:
		r = rewrite_apply(ctx, prog_unwrap, VALIDATE_ENVELOPE, body, len, NULL, &res);
		break;
	case B_RESHAPE:
		r = rewrite_apply(ctx, prog_reshape, VALIDATE_ENVELOPE, body, len, NULL, &res);
		break;
	case B_RESHAPE_WHEN:
		r = rewrite_apply(ctx, prog_reshape_when, VALIDATE_ENVELOPE, body, len, &vars_200,
		    &res);
		break;
	case B_UNWRAP_FULL:
		r = rewrite_apply(ctx, prog_unwrap, VALIDATE_FULL, body, len, NULL, &res);
		break;
	case B_JANSSON: {
		char err[512];

		if ((j = bench_json_loadb(body, len, 0, err)) == NULL)
			return -1;
		bench_json_dumpb(j, dst, 2 * len + 1024, 0x20 /* JSON_COMPACT */);
		bench_json_delete(j);
		break;
	}
	default:
		break;
	}
	return r;
}

static void
bench_setup(void)
{
	static const char u[] = "[unwrap: data]";
	static const char s[] = "[drop: [debug], rename: {msg: message}, set: {gateway: bench}]";
	/* The same ops, each under a condition that holds. */
	static const char w[] = "[{drop: [debug], when: {field: code, equals: 0}}, "
	    "{rename: {msg: message}, when: {status: 2xx}}, "
	    "{set: {gateway: bench}, when: {field: message, exists: true}}]";

	prog_unwrap = rewrite_program_from_yaml(u, strlen(u), NULL, 0);
	prog_reshape = rewrite_program_from_yaml(s, strlen(s), NULL, 0);
	prog_reshape_when = rewrite_program_from_yaml(w, strlen(w), NULL, 0);
	ctx = rewrite_ctx_new(1000, 100000);
	dst = malloc(2 * (1 << 20) + 4096);
	bench_jansson_open();
	if (prog_unwrap == NULL || prog_reshape == NULL || prog_reshape_when == NULL ||
	    ctx == NULL) {
		fprintf(stderr, "setup failed\n");
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	static const size_t sizes[] = { 1024, 16 * 1024, 256 * 1024, 1024 * 1024 };
	size_t si, len, iters, i;
	unsigned long allocs;
	double t0, t1, ns;
	uint64_t c0, c1;
	char *body;
	int c;

	bench_setup();
	if (argc == 5 && strcmp(argv[1], "-c") == 0) {
		for (c = 0; c < B_NCASES; c++)
			if (strcmp(argv[2], bench_names[c]) == 0)
				break;
		if (c == B_NCASES || (c == B_JANSSON && bench_json_loadb == NULL))
			return 2;
		body = bench_envelope(strtoul(argv[3], NULL, 10), &len);
		iters = strtoul(argv[4], NULL, 10);
		bench_once((enum bench_case)c, body, len);  /* warm */
		CALLGRIND_TOGGLE_COLLECT;
		for (i = 0; i < iters; i++)
			bench_once((enum bench_case)c, body, len);
		CALLGRIND_TOGGLE_COLLECT;
		printf("%s %zu bytes x %zu\n", bench_names[c], len, iters);
		return 0;
	}
	printf("%-12s %9s %9s %10s %12s\n", "case", "bytes", "ns/byte", "cyc/byte", "allocs/req");
	for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		body = bench_envelope(sizes[si], &len);
		iters = (64u << 20) / len;
		for (c = 0; c < B_NCASES; c++) {
			if (c == B_JANSSON && bench_json_loadb == NULL)
				continue;
			if (bench_once((enum bench_case)c, body, len) != 0) {
				printf("%-12s failed\n", bench_names[c]);
				continue;
			}
			if (c == B_JANSSON)
				iters /= 50;
			allocs = bench_allocs;
			bench_once((enum bench_case)c, body, len);
			allocs = bench_allocs - allocs;
			t0 = bench_now();
			c0 = __rdtsc();
			for (i = 0; i < iters; i++)
				bench_once((enum bench_case)c, body, len);
			c1 = __rdtsc();
			t1 = bench_now();
			ns = (t1 - t0) / (double)iters / (double)len;
			printf("%-12s %9zu %9.3f %10.3f %12lu\n", bench_names[c], len, ns,
			    (double)(c1 - c0) / (double)iters / (double)len, allocs);
			if (c == B_JANSSON)
				iters *= 50;
		}
		free(body);
	}
	return 0;
}
