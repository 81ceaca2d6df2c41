/*
 * Envelope ops while the body streams (stream_envelope.c) against the buffered engine
 * (rewrite_apply): exact bytes for each op, then a differential run over the envelope fuzz
 * corpus, JSONTestSuite (tests/data, read through TESTS_SRCDIR), hand-made bodies and random
 * envelopes, every program that streams in both validate modes, the body cut at every byte
 * (small bodies), fed a
 * byte at a time and cut at random: identical bytes, or the same error.  The one difference
 * allowed is a look-ahead failure where the buffered engine needed a later part of the body
 * (a duplicate of the key unwrap took, a key rename replaces before the one renamed to it),
 * and those are counted against the bodies that can cause them.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite.h"
#include "stream_envelope.h"

#define S(lit) lit, sizeof(lit) - 1
#define MAX_DEPTH 64
#define MAX_MEMBERS 1000

struct out {
	char *s;
	size_t len, cap;
	int fail_at;                    /* write number that fails, 0: none */
	int writes;
};

static int
out_write(void *arg, const char *p, size_t n)
{
	struct out *o = arg;

	if (o->fail_at != 0 && ++o->writes >= o->fail_at)
		return -1;
	if (o->len + n + 1 > o->cap) {
		o->cap = (o->len + n + 1) * 2;
		ck_assert_ptr_nonnull(o->s = realloc(o->s, o->cap));
	}
	memcpy(o->s + o->len, p, n);
	o->len += n;
	o->s[o->len] = '\0';
	return 0;
}

static struct rewrite_program *
load(const char *yaml)
{
	struct rewrite_program *prog;
	char err[256];

	prog = rewrite_program_from_yaml(yaml, strlen(yaml), err, sizeof(err));
	ck_assert_msg(prog != NULL, "%s: %s", yaml, err);
	return prog;
}

/* (the random runs change the status, for when: on it) */
static struct rewrite_vars vars = { .request_id = { S("r-1") }, .route = { S("rt") },
    .status = 200 };

/* The buffered engine: 0 and its bytes in o, or its error as the streaming path's code. */
static int
buffered(struct rewrite_ctx *ctx, const struct rewrite_program *prog, enum validate_mode mode,
    const char *body, size_t len, struct out *o)
{
	struct rewrite_result rr;
	size_t i;

	o->len = 0;
	if (rewrite_apply(ctx, prog, mode, body, len, &vars, &rr) != 0) {
		if (rr.invalid)
			return STREAM_ENVELOPE_INVALID;
		if (strstr(rr.error, "too deep") != NULL)
			return STREAM_ENVELOPE_DEPTH;
		if (strstr(rr.error, "max_members") != NULL)
			return STREAM_ENVELOPE_MEMBERS;
		return STREAM_ENVELOPE_OPS;
	}
	for (i = 0; i < rr.nspans; i++)
		out_write(o, rr.spans[i].p, rr.spans[i].len);
	return 0;
}

/* The streaming path, the body cut at cuts[0..ncuts) (sorted): 0 or the error. */
static int
streamed(struct stream_envelope *se, const struct rewrite_program *prog, enum validate_mode mode,
    const char *body, size_t len, const size_t *cuts, size_t ncuts, struct out *o)
{
	size_t i, at = 0, end;
	int r;

	o->len = 0;
	if ((r = stream_envelope_start(se, prog, mode, MAX_DEPTH, MAX_MEMBERS, &vars, out_write,
	    o)) != 0)
		return r;
	for (i = 0; i <= ncuts; i++) {
		end = i < ncuts ? cuts[i] : len;
		if ((r = stream_envelope_feed(se, body + at, end - at)) != 0)
			return r;
		at = end;
	}
	return stream_envelope_finish(se);
}

/* ---- exact bytes ---- */

static const struct {
	const char *yaml;
	const char *body;
	const char *want;               /* NULL: an error */
} exact[] = {
	{ "[]", " {\"a\" : 1} \n", " {\"a\" : 1} \n" },
	{ "[unwrap: data]", "{\"code\":0,\"data\": {\"id\": 1} ,\"x\":[]}", "{\"id\": 1}" },
	{ "[unwrap: data]", "{\"code\":0}", NULL },
	{ "[unwrap: data]", "{\"data\":1,\"data\":2}", NULL },      /* look-ahead */
	{ "[unwrap: data.items]", "{\"data\":{\"items\":[1, 2]},\"n\":1}", "[1, 2]" },
	{ "[{drop: [debug]}]", " { \"a\" : 1 , \"debug\" : {\"x\":1}, \"b\":2 } ",
	  "{\"a\" : 1,\"b\":2}" },
	{ "[{drop: [debug]}]", " { \"a\" : 1 , \"b\":2 } ", " { \"a\" : 1 , \"b\":2 } " },
	{ "[{drop: [a]}]", "{\"a\":1,\"b\":2,  \"c\":3}", "{\"b\":2,  \"c\":3}" },
	{ "[{rename: {msg: message}}]", "{\"a\":1, \"msg\" : \"hi\", \"b\":2}",
	  "{\"a\":1,\"message\":\"hi\",\"b\":2}" },
	{ "[{rename: {a: b}}]", "{\"a\":1,\"b\":2}", "{\"b\":1}" },
	{ "[{rename: {a: b}}]", "{\"b\":2,\"a\":1}", NULL },        /* look-ahead */
	{ "[{rename: {a: b, b: a}}]", "{\"b\":2,\"a\":1}", "{\"a\":2,\"b\":1}" },
	{ "[{keep: [data]}]", "{\"code\":0,\"data\":{\"k\":[1]},\"msg\":\"\"}",
	  "{\"data\":{\"k\":[1]}}" },
	{ "[set: {gateway: jsongate}]", "\n{\"a\":1}\n", "{\"a\":1,\"gateway\":\"jsongate\"}" },
	{ "[set: {a: 2}]", "{\"a\" :1,\"b\":0}", "{\"a\":2,\"b\":0}" },
	{ "[set: {rid: $request_id}]", "{}", "{\"rid\":\"r-1\"}" },
	{ "[{wrap: data}]", " [1, 2] ", "{\"data\":[1, 2]}" },
	{ "[{wrap: a.b}, {wrap: c}]", "1", "{\"c\":{\"a\":{\"b\":1}}}" },
	{ "[unwrap: data, {drop: [x]}, {wrap: result}]", "{\"data\":{\"x\":1,\"y\":2}}",
	  "{\"result\":{\"y\":2}}" },
	{ "[unwrap: data, {drop: [z]}, {wrap: result}]", "{\"data\":{ \"x\":1 }}",
	  "{\"result\":{ \"x\":1 }}" },
	{ "[{drop: [a]}, {set: {a: [1]}}]", "{\"a\":0,\"b\":1}", "{\"b\":1,\"a\":[1]}" },
	{ "[{set: {a: 1}}, {rename: {a: b}}]", "{\"c\":0}", "{\"c\":0,\"b\":1}" },
	{ "[{drop: [debug]}]", "{\"a\":1,\"debug\":2", NULL },
	{ "[{drop: [debug]}]", "[1]", NULL },
	{ "[{drop: [debug]}]", "", NULL },
	{ "[{drop: [debug]}]", "{\"a\":01}", NULL },
	/* below the object edited, only balance is checked, as jscan_skip does */
	{ "[{drop: [debug]}]", "{\"a\":[1 2 {]},\"debug\":1}", "{\"a\":[1 2 {]}}" },
	{ "[{drop: [debug]}]", "{\"a\":[1 2 {]}]}", NULL },
	{ "[{drop: [debug]}]", "{\"a\":\"\\x\"}", NULL },
	{ "[{wrap: w}]", "\"\\x\"", "{\"w\":\"\\x\"}" },
};

START_TEST(test_exact)
{
	struct rewrite_program *prog = load(exact[_i].yaml);
	struct stream_envelope *se = stream_envelope_new(1 << 16);
	struct rewrite_ctx *ctx = rewrite_ctx_new(MAX_DEPTH, MAX_MEMBERS);
	const char *body = exact[_i].body;
	size_t len = strlen(body), cut;
	struct out o = { 0 }, b = { 0 };
	const char *why;
	int r, rb;

	ck_assert_msg(stream_envelope_can(prog, VALIDATE_ENVELOPE, &why), "%s: %s", exact[_i].yaml,
	    why);
	rb = buffered(ctx, prog, VALIDATE_ENVELOPE, body, len, &b);
	for (cut = 0; cut <= len; cut++) {
		r = streamed(se, prog, VALIDATE_ENVELOPE, body, len, &cut, 1, &o);
		if (exact[_i].want == NULL) {
			ck_assert_msg(r != 0, "%s on %s cut %zu: gave %s", exact[_i].yaml, body, cut, o.s);
			continue;
		}
		ck_assert_msg(r == 0, "%s on %s cut %zu: %s", exact[_i].yaml, body, cut,
		    stream_envelope_error(se));
		ck_assert_msg(o.len == strlen(exact[_i].want) && memcmp(o.s, exact[_i].want, o.len) == 0,
		    "%s on %s cut %zu: %s", exact[_i].yaml, body, cut, o.s);
	}
	/* The expectations are the buffered engine's (a look-ahead case aside). */
	if (exact[_i].want != NULL)
		ck_assert_msg(rb == 0 && b.len == o.len && memcmp(b.s, o.s, o.len) == 0,
		    "buffered: %s", rb == 0 ? b.s : "error");
	free(o.s);
	free(b.s);
	rewrite_ctx_free(ctx);
	stream_envelope_free(se);
	rewrite_program_free(prog);
}
END_TEST

START_TEST(test_can)
{
	static const struct {
		const char *yaml;
		int can;
	} cases[] = {
		{ "[]", 1 },
		{ "[unwrap: a, unwrap: b, {drop: [x]}, {rename: {a: b}}, {keep: [b]}, "
		  "{set: {c: 1}}, {wrap: w}, {wrap: v}]", 1 },
		{ "[{drop: [a.b]}]", 0 },
		{ "[{set: {a.b: 1}}]", 0 },
		{ "[{drop: [a]}, unwrap: data]", 0 },
		{ "[{wrap: w}, {drop: [a]}]", 0 },
		{ "[{status_from: {field: code, map: {0: 200}}}]", 0 },
		{ "[{drop: [a], when: {status: 200}}]", 1 },
		{ "[{drop: [a], when: {any: [{status: 404}, {not: {status: 2xx}}]}}]", 1 },
		{ "[{drop: [a], when: {field: a, exists: true}}]", 0 },
		{ "[{drop: [a], when: {all: [{status: 200}, {field: a, equals: 1}]}}]", 0 },
	};
	struct rewrite_program *prog;
	const char *why;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		prog = load(cases[i].yaml);
		ck_assert_msg(stream_envelope_can(prog, VALIDATE_ENVELOPE, &why) == cases[i].can,
		    "%s", cases[i].yaml);
		ck_assert(cases[i].can ? why == NULL : why != NULL);
		ck_assert(stream_envelope_can(prog, VALIDATE_FULL, &why) == cases[i].can);
		rewrite_program_free(prog);
	}
}
END_TEST

/* A value of 64 MB passes through in chunks: nothing of it is held. */
START_TEST(test_large_value_not_held)
{
	struct rewrite_program *prog = load("[unwrap: data]");
	struct stream_envelope *se = stream_envelope_new(1 << 10);
	static char chunk[1 << 16];
	struct out o = { 0 };
	size_t total = 0, i;

	memset(chunk, 'x', sizeof(chunk));
	ck_assert_int_eq(stream_envelope_start(se, prog, VALIDATE_ENVELOPE, MAX_DEPTH, MAX_MEMBERS,
	    &vars, out_write,
	    &o), 0);
	ck_assert_int_eq(stream_envelope_feed(se, S("{\"debug\":1,\"data\":\"")), 0);
	ck_assert_uint_eq(o.len, 1);
	total = o.len;
	for (i = 0; i < 1024; i++) {
		o.len = 0;
		ck_assert_int_eq(stream_envelope_feed(se, chunk, sizeof(chunk)), 0);
		/* each chunk goes on at once */
		ck_assert_uint_eq(o.len, sizeof(chunk));
		total += o.len;
	}
	o.len = 0;
	ck_assert_int_eq(stream_envelope_feed(se, S("\",\"z\":[]}")), 0);
	ck_assert_int_eq(stream_envelope_finish(se), 0);
	ck_assert_uint_eq(total + o.len, 2 + 1024 * sizeof(chunk));
	ck_assert_uint_eq(stream_envelope_written(se), 2 + 1024 * sizeof(chunk));
	free(o.s);
	stream_envelope_free(se);
	rewrite_program_free(prog);
}
END_TEST

/* A malformed body found after output started is an error, never a complete answer; and a
 * failing write stops the stream. */
START_TEST(test_error_after_output)
{
	struct rewrite_program *prog = load("[unwrap: data]");
	struct stream_envelope *se = stream_envelope_new(1 << 10);
	struct out o = { 0 };

	ck_assert_int_eq(stream_envelope_start(se, prog, VALIDATE_ENVELOPE, MAX_DEPTH, MAX_MEMBERS,
	    &vars, out_write,
	    &o), 0);
	ck_assert_int_eq(stream_envelope_feed(se, S("{\"data\":[1,2]")), 0);
	ck_assert_str_eq(o.s, "[1,2]");
	ck_assert_int_eq(stream_envelope_feed(se, S(",\"x\" 1}")), STREAM_ENVELOPE_INVALID);
	ck_assert_uint_eq(stream_envelope_written(se), 5);
	ck_assert_int_eq(stream_envelope_finish(se), STREAM_ENVELOPE_INVALID);
	ck_assert_int_eq(stream_envelope_start(se, prog, VALIDATE_ENVELOPE, MAX_DEPTH, MAX_MEMBERS,
	    &vars, out_write,
	    &o), 0);
	ck_assert_int_eq(stream_envelope_feed(se, S("{\"data\":[1,2]}")), 0);
	ck_assert_int_eq(stream_envelope_finish(se), 0);
	o.fail_at = 1;
	o.writes = 0;
	ck_assert_int_eq(stream_envelope_start(se, prog, VALIDATE_ENVELOPE, MAX_DEPTH, MAX_MEMBERS,
	    &vars, out_write,
	    &o), 0);
	ck_assert_int_eq(stream_envelope_feed(se, S("{\"data\":[1,2]}")), STREAM_ENVELOPE_WRITE);
	free(o.s);
	stream_envelope_free(se);
	rewrite_program_free(prog);
}
END_TEST

/* A pretty-printed body whose change is undecided past max_hold goes out as it came: exact
 * when it stays unchanged, a look-ahead error (output cut short) when a change comes later;
 * with room, the exact bytes either way. */
START_TEST(test_lookahead_bound)
{
	struct rewrite_program *prog = load("[{drop: [debug]}]");
	struct stream_envelope *se = stream_envelope_new(64);
	struct out o = { 0 };
	char body[300], same[300];
	int n, m;

	n = snprintf(body, sizeof(body), "{\n  \"a\": \"%0100d\",\n  \"debug\": 1\n}\n", 0);
	ck_assert_int_eq(streamed(se, prog, VALIDATE_ENVELOPE, body, (size_t)n, NULL, 0, &o),
	    STREAM_ENVELOPE_LOOKAHEAD);
	ck_assert_uint_gt(stream_envelope_written(se), 64);
	ck_assert(memcmp(o.s, body, o.len) == 0);
	m = snprintf(same, sizeof(same), " {\n  \"a\": \"%0100d\",\n  \"b\": 1\n}\n", 0);
	ck_assert_int_eq(streamed(se, prog, VALIDATE_ENVELOPE, same, (size_t)m, NULL, 0, &o), 0);
	ck_assert(o.len == (size_t)m && memcmp(o.s, same, o.len) == 0);
	stream_envelope_free(se);
	se = stream_envelope_new(1024);
	ck_assert_int_eq(streamed(se, prog, VALIDATE_ENVELOPE, body, (size_t)n, NULL, 0, &o), 0);
	ck_assert_uint_eq(o.len, 109);
	ck_assert(memcmp(o.s, "{\"a\": \"000", 10) == 0);
	ck_assert(memcmp(o.s + 106, "0\"}", 3) == 0);
	free(o.s);
	stream_envelope_free(se);
	rewrite_program_free(prog);
}
END_TEST

/* ---- differential ---- */

static const char *const programs[] = {
	"[]",
	"[unwrap: data]",
	"[unwrap: data.result]",
	"[unwrap: a]",
	"[{drop: [debug]}]",
	"[{drop: [debug, a, msg]}]",
	"[{rename: {msg: message}}]",
	"[{rename: {a: b}}]",
	"[{rename: {a: b, b: a}}]",
	"[{keep: [data]}]",
	"[{keep: [a, id, data]}]",
	"[set: {gateway: jsongate}]",
	"[set: {a: 1, b: {x: [true]}}]",
	"[set: {rid: $request_id, route: $route}]",
	"[{wrap: data}]",
	"[{wrap: a.b}, {wrap: c}]",
	"[unwrap: data, {drop: [x, debug]}]",
	"[unwrap: data, {wrap: result}]",
	"[unwrap: data, {keep: [id]}, {set: {ok: true}}, {wrap: r}]",
	"[{drop: [a]}, {set: {a: 1}}]",
	"[{set: {a: 1}}, {drop: [a]}]",
	"[{set: {a: 1}}, {rename: {a: b}}]",
	"[{set: {b: 1}}, {rename: {a: b}}]",
	"[{rename: {a: b}}, {set: {b: 2}}, {drop: [c]}, {wrap: w}]",
	"[{rename: {a: x}}, {keep: [x, b]}]",
	"[{keep: [a]}, {set: {z: 0}}]",
	"[set: {a: 1}, set: {a: 2}]",
	"[{unwrap: data, when: {status: 200}}, {drop: [x], when: {status: 404}}, "
	"{set: {s: 1}, when: {not: {status: 200}}}, {wrap: w, when: {status: 2xx}}]",
	"[{unwrap: data, when: {status: 404}}, {keep: [data], when: {status: 200}}]",
};
#define NPROGRAMS (sizeof(programs) / sizeof(programs[0]))

struct diff {
	struct rewrite_program *prog[NPROGRAMS];
	struct rewrite_ctx *ctx;
	struct stream_envelope *se;
	struct stream_envelope *small;  /* a look-ahead of 16 bytes */
	struct out b, o;
	unsigned long runs, lookahead, bodies, small_lookahead;
};

static void
diff_init(struct diff *d)
{
	size_t i;

	memset(d, 0, sizeof(*d));
	for (i = 0; i < NPROGRAMS; i++)
		d->prog[i] = load(programs[i]);
	ck_assert_ptr_nonnull(d->ctx = rewrite_ctx_new(MAX_DEPTH, MAX_MEMBERS));
	ck_assert_ptr_nonnull(d->se = stream_envelope_new(1 << 20));
	ck_assert_ptr_nonnull(d->small = stream_envelope_new(16));
}

static void
diff_free(struct diff *d)
{
	size_t i;

	for (i = 0; i < NPROGRAMS; i++)
		rewrite_program_free(d->prog[i]);
	rewrite_ctx_free(d->ctx);
	stream_envelope_free(d->se);
	stream_envelope_free(d->small);
	free(d->b.s);
	free(d->o.s);
}

/* One body through every program, cut in every way the size allows. */
static void
diff_body(struct diff *d, const char *name, const char *body, size_t len)
{
	size_t p, k, c, *cuts, ncuts;
	int rb, r;

	ck_assert_ptr_nonnull(cuts = malloc((len + 1) * sizeof(*cuts)));
	d->bodies++;
	for (p = 0; p < 2 * NPROGRAMS; p++) {
		enum validate_mode mode = p < NPROGRAMS ? VALIDATE_ENVELOPE : VALIDATE_FULL;

		rb = buffered(d->ctx, d->prog[p % NPROGRAMS], mode, body, len, &d->b);
		/* A small look-ahead: the same bytes, or a look-ahead error. */
		r = streamed(d->small, d->prog[p % NPROGRAMS], mode, body, len, NULL, 0, &d->o);
		if (rb != 0)
			ck_assert(r != 0);
		else if (r == STREAM_ENVELOPE_LOOKAHEAD)
			d->small_lookahead++;
		else
			ck_assert_msg(r == 0 && d->o.len == d->b.len &&
			    memcmp(d->o.s, d->b.s, d->b.len) == 0, "%s, %s, small look-ahead: %s",
			    name, programs[p % NPROGRAMS], r == 0 ? d->o.s : stream_envelope_error(d->small));
		for (k = 0; k < len + 4; k++) {
			if (k <= len && len > 256 && k > 0)
				continue;
			if (k < len + 1) {
				/* no cut (k == 0), or one at k */
				cuts[0] = k;
				ncuts = k > 0;
			} else if (k == len + 1) {
				/* a byte at a time */
				for (c = 0; c + 1 < len && c < len; c++)
					cuts[c] = c + 1;
				ncuts = len > 0 ? len - 1 : 0;
			} else {
				/* random cuts */
				ncuts = 0;
				for (c = 1; c < len; c++)
					if (random() % 7 == 0)
						cuts[ncuts++] = c;
			}
			r = streamed(d->se, d->prog[p % NPROGRAMS], mode, body, len, cuts, ncuts, &d->o);
			d->runs++;
			if (rb != 0) {
				/* The same error, or one that needs more look-ahead.  A body both invalid
				 * and too deep (or with too many members) may be refused for either:
				 * jsmn's window checks the bytes between members later than the
				 * streaming scanner does. */
				ck_assert_msg(r == rb || r == STREAM_ENVELOPE_LOOKAHEAD ||
				    (rb != STREAM_ENVELOPE_OPS && (r == STREAM_ENVELOPE_INVALID ||
				    r == STREAM_ENVELOPE_DEPTH || r == STREAM_ENVELOPE_MEMBERS)),
				    "%s, %s: the buffered path fails with %d, streaming gave %d (%s)", name,
				    programs[p % NPROGRAMS], rb, r, r ? stream_envelope_error(d->se) : d->o.s);
				if (r != rb)
					d->lookahead++;
				continue;
			}
			if (r == STREAM_ENVELOPE_LOOKAHEAD) {
				/* only where a later key decides, never for want of room */
				ck_assert_msg(strncmp(stream_envelope_error(d->se), "needs more", 10) != 0,
				    "%s, %s: %s", name, programs[p % NPROGRAMS], stream_envelope_error(d->se));
				d->lookahead++;
				continue;
			}
			ck_assert_msg(r == 0, "%s, %s, cuts %zu: streaming fails (%s), buffered gave %.*s",
			    name, programs[p % NPROGRAMS], ncuts, stream_envelope_error(d->se), (int)d->b.len, d->b.s);
			ck_assert_msg(d->o.len == d->b.len && memcmp(d->o.s, d->b.s, d->b.len) == 0,
			    "%s, %s, %zu cuts (first %zu): streamed\n%.*s\nbuffered\n%.*s", name, programs[p % NPROGRAMS],
			    ncuts, ncuts ? cuts[0] : 0, (int)d->o.len, d->o.s, (int)d->b.len, d->b.s);
		}
	}
	free(cuts);
}

static char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	ck_assert_ptr_nonnull(buf = malloc((size_t)n + 1));
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Every file of a test folder (skip bytes of each ignored): the number read. */
static int
diff_dir(struct diff *d, const char *sub, size_t skip)
{
	const char *base = getenv("TESTS_SRCDIR");
	struct dirent *de;
	char *dir, *path, *buf;
	size_t len;
	DIR *dp;
	int n = 0;

	ck_assert_msg(base != NULL, "TESTS_SRCDIR is not set (run through make check)");
	ck_assert_int_ge(asprintf(&dir, "%s/%s", base, sub), 0);
	ck_assert_ptr_nonnull(dp = opendir(dir));
	while ((de = readdir(dp)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		ck_assert_int_ge(asprintf(&path, "%s/%s", dir, de->d_name), 0);
		buf = read_file(path, &len);
		if (len >= skip)
			diff_body(d, de->d_name, buf + skip, len - skip);
		free(buf);
		free(path);
		n++;
	}
	closedir(dp);
	free(dir);
	return n;
}

START_TEST(test_diff_corpus)
{
	struct diff d;

	srandom(28);
	diff_init(&d);
	/* the envelope fuzzer's inputs: thirteen control bytes, then the body */
	ck_assert_int_gt(diff_dir(&d, "fuzz/envelope", 13), 20);
	ck_assert_int_gt(diff_dir(&d, "data/JSONTestSuite/test_parsing", 0), 300);
	ck_assert_int_gt(diff_dir(&d, "data/JSONTestSuite/test_transform", 0), 10);
	printf("corpus: %lu bodies, %lu runs, %lu look-ahead failures\n", d.bodies, d.runs,
	    d.lookahead);
	diff_free(&d);
}
END_TEST

static const char *const handmade[] = {
	"{\"code\":0,\"msg\":\"ok\",\"data\":{\"id\":1,\"x\":{\"y\":[1,2]},\"a\":null},\"debug\":{}}",
	"  {  \"data\" : { \"result\" : { \"k\" : true } , \"x\" : 1 } , \"b\" : 2  }  \n",
	"{\"a\":1,\"b\":2,\"a\":{\"b\":\"\\u0062\"},\"c\":[{\"d\":1}]}",
	"{\"\\u0061\":1,\"m\\u0073g\":\"x\",\"deb\\ug\":1}",
	"{\"data\":\"\\\"}\\\\\",\"debug\":[\"]\",\"\\\"\"]}",
	"{\"data\":[[[[]]]],\"e\":1e400,\"f\":-0.0E+1,\"t\":true,\"n\":null}",
	"{\"data\":{}}",
	"{\"data\":{ }}",
	"{}",
	"{ }",
	"\t{\r\n}\r\n",
	"{\"data\":{\"result\":\"r\"},\"data\":{\"result\":2}}",
	"{\"b\":0,\"a\":1}",
	"{\"a\":{\"x\":1},\"b\":{\"y\":2}}",
	"{\"data\":{\"id\":7,\"x\":0,\"debug\":\"d\"}, \"z\": [1,{\"a\":2}]}",
	"{\"data\":[1,2]}",
	"{\"a\":01}",
	"{\"a\":1,}",
	"{,\"a\":1}",
	"{\"a\":1 \"b\":2}",
	"{\"a\" 1}",
	"{\"a\":tru}",
	"{\"a\":\"\\x\"}",
	"{\"a\":[\"\\x\"]}",
	"{\"a\":\"\\u12\"}",
	"{\"a\":[1}",
	"{\"a\":[{]}]}",
	"{\"a\":1}x",
	"{\"a\":1} {}",
	"[1,2]",
	"\"str\"",
	"123",
	"123 ",
	"-",
	"nul",
	"",
	"   ",
	"\xef\xbb\xbf{}",
	"{\"a\":\"\x01\x02\"}",
	"{\"a\":\"\0\"}",
	"{\"data\":\"\\u00e9\\ud83d\\ude00\",\"msg\":\"caf\xc3\xa9\"}",
	"{\"msg\":1,\"message\":2}",
	"{\"message\":2,\"msg\":1}",
	"{\"x\":1,\"a\":2,\"b\":3}",
	"{\"data\":{\"id\":1,\"id\":2}}",
};

START_TEST(test_diff_handmade)
{
	struct diff d;
	size_t i;

	srandom(28);
	diff_init(&d);
	for (i = 0; i < sizeof(handmade) / sizeof(handmade[0]); i++)
		diff_body(&d, handmade[i], handmade[i], strlen(handmade[i]));
	/* the NUL byte case, with its length */
	diff_body(&d, "NUL", "{\"a\":\"\0\"}", 9);
	diff_body(&d, "NUL key", "{\"a\0\":1}", 8);
	printf("handmade: %lu runs, %lu look-ahead failures (%lu with 16 bytes)\n", d.runs,
	    d.lookahead, d.small_lookahead);
	diff_free(&d);
}
END_TEST

/* A random envelope: keys the programs name, every kind of value, random whitespace. */
static void
rnd_ws(char **p)
{
	static const char ws[] = " \t\r\n";

	while (random() % 4 == 0)
		*(*p)++ = ws[random() % 4];
}

static void
rnd_value(char **p, int depth)
{
	static const char *const keys[] = { "a", "b", "c", "x", "id", "msg", "data", "debug",
	    "result", "m\\u0073g", "message", "z" };
	static const char *const scalars[] = { "1", "-0.5e3", "true", "false", "null", "\"s\"",
	    "\"\\\"}]\"", "\"\\u0041\\n\"", "\"caf\xc3\xa9\"", "0", "\"{[\"" };
	int n, i, kind = (int)(random() % (depth > 3 ? 2 : 5));

	if (kind < 2) {
		const char *s = scalars[random() % (sizeof(scalars) / sizeof(scalars[0]))];

		memcpy(*p, s, strlen(s));
		*p += strlen(s);
		return;
	}
	n = (int)(random() % 5);
	*(*p)++ = kind == 2 ? '[' : '{';
	for (i = 0; i < n; i++) {
		if (i > 0)
			*(*p)++ = ',';
		rnd_ws(p);
		if (kind != 2) {
			const char *k = keys[random() % (sizeof(keys) / sizeof(keys[0]))];

			*(*p)++ = '"';
			memcpy(*p, k, strlen(k));
			*p += strlen(k);
			*(*p)++ = '"';
			rnd_ws(p);
			*(*p)++ = ':';
			rnd_ws(p);
		}
		rnd_value(p, depth + 1);
		rnd_ws(p);
	}
	*(*p)++ = kind == 2 ? ']' : '}';
}

START_TEST(test_diff_random)
{
	static char buf[1 << 16];
	struct diff d;
	char *p;
	size_t len;
	int iter;

	srandom(2800 + _i);
	vars.status = _i % 2 ? 404 : 200;
	diff_init(&d);
	for (iter = 0; iter < 400; iter++) {
		p = buf;
		rnd_ws(&p);
		if (random() % 8 == 0)
			rnd_value(&p, 0);
		else {
			/* mostly objects */
			do {
				p = buf;
				rnd_value(&p, 2);
			} while (buf[0] != '{');
		}
		rnd_ws(&p);
		len = (size_t)(p - buf);
		if (random() % 5 == 0 && len > 0) {
			/* a byte changed: mostly invalid */
			buf[random() % len] = "{}[]\",: x\\0"[random() % 11];
		}
		diff_body(&d, "random", buf, len);
	}
	printf("random %d: %lu runs, %lu look-ahead failures (%lu with 16 bytes)\n", _i, d.runs,
	    d.lookahead, d.small_lookahead);
	vars.status = 200;
	diff_free(&d);
}
END_TEST

static Suite *
stream_envelope_suite(void)
{
	Suite *s = suite_create("stream_envelope");
	TCase *tc = tcase_create("stream_envelope");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_exact, 0, (int)(sizeof(exact) / sizeof(exact[0])));
	tcase_add_test(tc, test_can);
	tcase_add_test(tc, test_large_value_not_held);
	tcase_add_test(tc, test_error_after_output);
	tcase_add_test(tc, test_lookahead_bound);
	tcase_add_test(tc, test_diff_handmade);
	tcase_add_test(tc, test_diff_corpus);
	tcase_add_loop_test(tc, test_diff_random, 0, 4);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(stream_envelope_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
