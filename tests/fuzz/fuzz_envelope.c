/*
 * libFuzzer target over the envelope engine and its ops.  The first input byte picks a
 * program, the rest is the body.  Checked on every input:
 *   - the scanner variants agree with the scalar one;
 *   - a body valid by RFC 8259 yields valid output (never less valid than the input);
 *   - validate: full accepting a body implies envelope mode gives the same bytes;
 *   - every span pointing into the body lies inside it (spliced bytes are input bytes),
 *     and the spans add up to total_len.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "jvalid.h"
#include "rewrite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const programs[] = {
	"[unwrap: data]",
	"[unwrap: data.result]",
	"[wrap: result]",
	"[wrap: r, unwrap: r]",
	"[rename: {msg: message, a: b, b: a}]",
	"[drop: [debug, data.x, \"d\\\"q\"]]",
	"[keep: [code, data.id, data.x.y]]",
	"[set: {gateway: jsongate, v: 2, data.rid: $request_id, h: $header.x, m: {a: [1, $route]}}]",
	"[status_from: {field: code, map: {0: 200, \"0\": 201, true: 202}, default: 502}]",
	"[drop: [debug], rename: {msg: message}, set: {gateway: bench}]",
	"[unwrap: data, wrap: result, set: {x: 1}, keep: [x, result.a]]",
	"[set: {a.b: 1}, rename: {a.b: c}, drop: [a.c], unwrap: a]",
};
#define NPROGRAMS (sizeof(programs) / sizeof(programs[0]))

static struct rewrite_program *progs[NPROGRAMS];
static struct rewrite_ctx *ctx_env, *ctx_full;

static void
fuzz_init(void)
{
	size_t i;

	for (i = 0; i < NPROGRAMS; i++)
		if ((progs[i] = rewrite_program_from_yaml(programs[i], strlen(programs[i]), NULL,
		    0)) == NULL)
			abort();
	ctx_env = rewrite_ctx_new(64);
	ctx_full = rewrite_ctx_new(64);
}

static char *
fuzz_join(const struct rewrite_result *r, const char *body, size_t len)
{
	char *out = malloc(r->total_len + 1);
	size_t i, k = 0;

	for (i = 0; i < r->nspans; i++) {
		const char *p = r->spans[i].p;

		if (r->spans[i].len == 0)
			abort();
		/* A span starting inside the body must end inside it. */
		if (p >= body && p < body + len && p + r->spans[i].len > body + len)
			abort();
		memcpy(out + k, p, r->spans[i].len);
		k += r->spans[i].len;
	}
	if (k != r->total_len)
		abort();
	return out;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rewrite_vars vars;
	struct http_header hdr = { { "X", 1 }, { "\"\\\x01\xff", 4 } };
	struct rewrite_result re, rf;
	const struct rewrite_program *prog;
	const char *body;
	char *oe = NULL, *of;
	size_t len, pos;
	ssize_t ref, got;
	int valid, e, f, impl;

	if (progs[0] == NULL)
		fuzz_init();
	if (size < 1)
		return 0;
	prog = progs[data[0] % NPROGRAMS];
	body = (const char *)data + 1;
	len = size - 1;

	for (pos = 0; pos < len && pos < 4; pos++) {
		ref = jscan_skip_impl(JSCAN_SCALAR, body, len, pos, 64);
		for (impl = 1; impl < JSCAN_NIMPL; impl++) {
			if (!jscan_impl_available((enum jscan_impl)impl))
				continue;
			got = jscan_skip_impl((enum jscan_impl)impl, body, len, pos, 64);
			if (got != ref)
				abort();
		}
	}

	memset(&vars, 0, sizeof(vars));
	vars.request_id = (struct http_str){ "id\"\\", 4 };
	vars.route = (struct http_str){ "\xc3\x28", 2 };
	vars.headers = &hdr;
	vars.nheaders = 1;
	valid = jvalid_check(body, len, 64, NULL) == JVALID_OK;
	e = rewrite_apply(ctx_env, prog, VALIDATE_ENVELOPE, body, len, &vars, &re);
	if (e == 0) {
		oe = fuzz_join(&re, body, len);
		/* Ops add at most a few levels (wrap, set of nested values). */
		if (valid && jvalid_check(oe, re.total_len, 64 + 8, NULL) != JVALID_OK)
			abort();
	}
	f = rewrite_apply(ctx_full, prog, VALIDATE_FULL, body, len, &vars, &rf);
	if (f == 0 && !valid)
		abort();
	if (f == 0) {
		if (e != 0 || rf.total_len != re.total_len || rf.status != re.status)
			abort();
		of = fuzz_join(&rf, body, len);
		if (memcmp(of, oe, rf.total_len) != 0)
			abort();
		free(of);
	}
	free(oe);
	return 0;
}
