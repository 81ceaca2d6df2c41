/*
 * libFuzzer target over the envelope engine and its ops.
 *
 * Input: thirteen control bytes, then the body.
 *   0: the program: one of programs[] (below NPROGRAMS), else the input carries its own: a
 *      length byte and that many bytes of YAML right after the control bytes (a program
 *      that does not load falls back to programs[0]);
 *   1: the scanner the engine runs on (jscan_use), modulo the variants;
 *   2: low four bits: a start offset: the scanner and the tokenizer look from there, and the
 *      ops run on the body from there on (a body at an odd address); high four bits:
 *      limits.max_members, from member_limits[];
 *   3: max_depth, 1 to 64;
 *   4: the upstream's status (for when: status and status_from), from statuses[];
 *   5-12: the time for $time_iso8601, a signed 64-bit little-endian number.
 * Programs load for a route whose path template is FUZZ_TEMPLATE, so they may use its
 * captures.  Every variable has a value: $json.PATH and $path.NAME read bytes of the body
 * itself (a path starting with m is absent; an empty body has no captures), so the values
 * escaped into the output are as arbitrary as the body.
 * Checked on every input:
 *   - the scanner variants agree with the scalar one, at the start offset too;
 *   - envelope_parse from the start offset gives members inside the object it reports;
 *   - a body valid by RFC 8259 yields valid output (never less valid than the input);
 *   - validate: full accepting a body implies envelope mode gives the same bytes and status;
 *   - what passes under max_members comes out the same without the limit;
 *   - every span pointing into the body lies inside it, and the spans add up to total_len;
 *   - a sink receives exactly the bytes of the collected spans.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "jscan.h"
#include "jvalid.h"
#include "rewrite.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const programs[] = {
	"[unwrap: data]",
	"[unwrap: data.result]",
	"[wrap: result]",
	"[wrap: r, unwrap: r]",
	"[rename: {msg: message, a: b, b: a}]",
	"[rename: {a: b}, rename: {data.x: y}]",
	"[drop: [debug, data.x, \"d\\\"q\"]]",
	"[keep: [code, data.id, data.x.y]]",
	"[set: {gateway: jsongate, v: 2, data.rid: $request_id, h: $header.x, m: {a: [1, $route]}}]",
	("[set: {u: $upstream, r: $remote_addr, t: $time_iso8601, dn: $ssl_client_s_dn, "
	    "v: $ssl_client_verify, h: $header.missing}]"),
	"[status_from: {field: code, map: {0: 200, \"0\": 201, true: 202}, default: 502}]",
	"[drop: [debug], rename: {msg: message}, set: {gateway: bench}]",
	"[unwrap: data, wrap: result, set: {x: 1}, keep: [x, result.a]]",
	"[set: {a.b: 1}, rename: {a.b: c}, drop: [a.c], unwrap: a]",
	("[status_from: {field: code, map: {0: 200, 1001: 401, 5xx: 502}, strings: true}, "
	    "{unwrap: data, when: {field: code, equals: 0}}]"),
	("[{set: {x: 1}, when: {any: [{status: [200, 5xx]}, {field: a.b, in: [1, x, null]}]}}, "
	    "{drop: [a], when: {not: {field: a, type: object}}}, "
	    "{rename: {m: n, data.m: data.n}, when: {field: m, prefix: ab}}]"),
	("[set: {m: {k: v}}, {wrap: w, when: {field: m.k, exists: true}}, "
	    "{unwrap: w, when: {field: w.m.k, equals: v}}]"),
	"[set: {j: $json.user, k: [$json.a.b, {x: $json.data.id}], n: $json.missing}]",
	"[unwrap: data, set: {data.user: $json.user, id: $json.id}, rename: {id: i}]",
	("[set: {id: $path.id, rest: $path.rest, at: {t: $time_iso8601, id: [$path.id]}}, "
	    "rename: {id: user}]"),
	"[{unwrap: data, when: {status: 2xx}}, set: {data.path: $path.rest, s: $json.s}]",
};
#define NPROGRAMS (sizeof(programs) / sizeof(programs[0]))

/* The route's path template: programs may set $path.id and $path.rest. */
#define FUZZ_TEMPLATE "/users/{id}/files/{rest...}"

#define FUZZ_CONTROL 13

static const size_t member_limits[16] = {
	64, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 100, 1000, 100000, SIZE_MAX
};

static const int statuses[16] = {
	503, 200, 0, 201, 204, 302, 400, 401, 404, 429, 500, 502, 504, 599, 100, 299
};

static struct rewrite_program *progs[NPROGRAMS];

static int
fuzz_header_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	(void)arg;
	if (len != 1 || (name[0] != 'x' && name[0] != 'X'))
		return 0;
	*value = (struct rewrite_str){ "\"\\\x01\xff", 4 };
	return 1;
}

struct fuzz_body {
	const char *p;
	size_t len;
};

static int
fuzz_json_cb(const void *arg, const char *path, size_t len, struct rewrite_str *value)
{
	const struct fuzz_body *b = arg;
	size_t n = len * 7 % 32;

	if (len == 0 || path[0] == 'm')
		return 0;
	*value = (struct rewrite_str){ b->p, n < b->len ? n : b->len };
	return 1;
}

/* A capture of a matched path, percent-decoded: any bytes.  id is a piece of the body, rest
 * all of it. */
static int
fuzz_path_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	const struct fuzz_body *b = arg;

	if (b->len == 0)
		return 0;
	if (len == 2 && memcmp(name, "id", 2) == 0)
		*value = (struct rewrite_str){ b->p + b->len / 2, b->len - b->len / 2 > 24 ? 24 :
		    b->len - b->len / 2 };
	else
		*value = (struct rewrite_str){ b->p, b->len };
	return 1;
}

static void
fuzz_vars(struct rewrite_vars *vars, const struct fuzz_body *body, int status,
    long long now)
{
	memset(vars, 0, sizeof(*vars));
	vars->request_id = (struct rewrite_str){ "id\"\\", 4 };
	vars->route = (struct rewrite_str){ "\xc3\x28", 2 };
	vars->upstream = (struct rewrite_str){ "127.0.0.1:9\x00" "1", 12 };
	vars->remote_addr = (struct rewrite_str){ "::1", 3 };
	vars->ssl_client_s_dn = (struct rewrite_str){ "CN=a\\, \"b\"", 11 };
	vars->ssl_client_verify = (struct rewrite_str){ "FAILED:\xe2\x82", 9 };
	vars->now = now;
	vars->status = status;
	vars->header_cb = fuzz_header_cb;
	vars->json_cb = fuzz_json_cb;
	vars->json_arg = body;
	vars->path_cb = fuzz_path_cb;
	vars->path_arg = body;
}

static char *
fuzz_join(const struct rewrite_result *r, const char *body, size_t len)
{
	char *out = malloc(r->total_len + 1);
	size_t i, k = 0;

	for (i = 0; i < r->nspans; i++) {
		const char *p = r->spans[i].p;

		FUZZ_CHECK(r->spans[i].len > 0);
		/* A span starting inside the body must end inside it. */
		FUZZ_CHECK(!(p >= body && p < body + len && p + r->spans[i].len > body + len));
		memcpy(out + k, p, r->spans[i].len);
		k += r->spans[i].len;
	}
	FUZZ_CHECK(k == r->total_len);
	return out;
}

struct fuzz_sunk {
	char *buf;
	size_t len, cap;
};

static int
fuzz_sink_cb(void *arg, const struct rewrite_span *spans, size_t n)
{
	struct fuzz_sunk *k = arg;
	size_t i;

	for (i = 0; i < n; i++) {
		FUZZ_CHECK(spans[i].len > 0);
		if (k->len + spans[i].len > k->cap) {
			k->cap = (k->len + spans[i].len) * 2;
			k->buf = realloc(k->buf, k->cap);
		}
		memcpy(k->buf + k->len, spans[i].p, spans[i].len);
		k->len += spans[i].len;
	}
	return 0;
}

/* The scanners agree, and the tokenizer keeps its members inside the object it found. */
static void
fuzz_scan(const char *body, size_t len, size_t pos, unsigned depth)
{
	struct envelope env;
	ssize_t ref, got;
	size_t end, i;
	int impl, r;

	ref = jscan_skip_impl(JSCAN_SCALAR, body, len, pos, depth);
	for (impl = 1; impl < JSCAN_NIMPL; impl++) {
		if (!jscan_impl_available((enum jscan_impl)impl))
			continue;
		got = jscan_skip_impl((enum jscan_impl)impl, body, len, pos, depth);
		FUZZ_CHECK(got == ref);
	}
	envelope_init(&env);
	r = envelope_parse(&env, body, len, pos, depth, &end);
	if (r == 0) {
		FUZZ_CHECK(end > pos && end <= len && body[end - 1] == '}');
		for (i = 0; i < env.nmembers; i++) {
			FUZZ_CHECK(env.members[i].key > body + pos);
			FUZZ_CHECK(env.members[i].val + env.members[i].vallen < body + end);
		}
	}
	envelope_free(&env);
}

/* The output's bytes under a limit of SIZE_MAX members: the same as under a lower one. */
static void
fuzz_unlimited(const struct rewrite_program *prog, unsigned depth, const char *body,
    size_t len, const struct rewrite_vars *vars, const struct rewrite_result *limited,
    const char *out)
{
	struct rewrite_ctx *ctx = rewrite_ctx_new(depth, SIZE_MAX);
	struct rewrite_result r;
	char *o;

	FUZZ_CHECK(rewrite_apply(ctx, prog, VALIDATE_ENVELOPE, body, len, vars, &r) == 0);
	FUZZ_CHECK(r.total_len == limited->total_len && r.status == limited->status);
	o = fuzz_join(&r, body, len);
	FUZZ_CHECK(memcmp(o, out, r.total_len) == 0);
	free(o);
	rewrite_ctx_free(ctx);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rewrite_vars vars;
	struct rewrite_result re, rf;
	struct rewrite_program *own = NULL;
	const struct rewrite_program *prog;
	struct rewrite_ctx *ctx_env, *ctx_full;
	struct fuzz_sunk sunk = { NULL, 0, 0 };
	struct fuzz_body fb;
	const char *body;
	char *oe = NULL, *of;
	size_t len, pos, plen, members;
	unsigned depth;
	uint64_t now = 0;
	int valid, e, f, impl, i;

	if (progs[0] == NULL)
		for (size_t k = 0; k < NPROGRAMS; k++)
			FUZZ_CHECK((progs[k] = rewrite_program_from_yaml_route(programs[k],
			    strlen(programs[k]), FUZZ_TEMPLATE, NULL, 0)) != NULL);
	if (size < FUZZ_CONTROL)
		return 0;
	body = (const char *)data + FUZZ_CONTROL;
	len = size - FUZZ_CONTROL;
	if (data[0] < NPROGRAMS) {
		prog = progs[data[0]];
	} else {
		plen = len > 0 ? (uint8_t)body[0] : 0;
		if (plen + 1 > len)
			return 0;
		own = rewrite_program_from_yaml_route(body + 1, plen, FUZZ_TEMPLATE, NULL, 0);
		prog = own != NULL ? own : progs[0];
		body += plen + 1;
		len -= plen + 1;
	}
	impl = data[1] % JSCAN_NIMPL;
	if (jscan_use((enum jscan_impl)impl) != 0)
		jscan_use(jscan_impl_best());
	pos = data[2] & 15;
	members = member_limits[data[2] >> 4];
	depth = 1 + data[3] % 64;
	for (i = 7; i >= 0; i--)
		now = now << 8 | data[5 + i];

	if (pos < len)
		fuzz_scan(body, len, pos, depth);
	/* The ops see the body from the start offset on. */
	if (pos > len)
		pos = len;
	body += pos;
	len -= pos;

	fb = (struct fuzz_body){ body, len };
	fuzz_vars(&vars, &fb, statuses[data[4] & 15], (long long)now);
	ctx_env = rewrite_ctx_new(depth, members);
	ctx_full = rewrite_ctx_new(depth, members);
	valid = jvalid_check(body, len, depth, NULL) == JVALID_OK;
	e = rewrite_apply(ctx_env, prog, VALIDATE_ENVELOPE, body, len, &vars, &re);
	if (e == 0) {
		oe = fuzz_join(&re, body, len);
		/* Ops add at most a few levels (wrap, set of nested values). */
		if (valid)
			FUZZ_CHECK(jvalid_check(oe, re.total_len, depth + 8, NULL) == JVALID_OK);
		if (members != SIZE_MAX)
			fuzz_unlimited(prog, depth, body, len, &vars, &re, oe);
	} else {
		FUZZ_CHECK(re.error != NULL);
	}
	f = rewrite_apply(ctx_full, prog, VALIDATE_FULL, body, len, &vars, &rf);
	FUZZ_CHECK(f != 0 || valid);
	if (f == 0) {
		FUZZ_CHECK(e == 0 && rf.total_len == re.total_len && rf.status == re.status);
		of = fuzz_join(&rf, body, len);
		FUZZ_CHECK(memcmp(of, oe, rf.total_len) == 0);
		free(of);
	}
	/* The same through a sink, on a context released in between. */
	rewrite_ctx_release(ctx_env);
	rewrite_ctx_sink(ctx_env, fuzz_sink_cb, &sunk);
	FUZZ_CHECK(rewrite_apply(ctx_env, prog, VALIDATE_ENVELOPE, body, len, &vars, &re) == e);
	if (e == 0) {
		FUZZ_CHECK(re.nspans == 0 && sunk.len == re.total_len);
		FUZZ_CHECK(sunk.len == 0 || memcmp(sunk.buf, oe, sunk.len) == 0);
	}
	free(sunk.buf);
	free(oe);
	rewrite_ctx_free(ctx_env);
	rewrite_ctx_free(ctx_full);
	rewrite_program_free(own);
	return 0;
}
