/*
 * The NDJSON / json-seq splitter: records as the formats define them, the same records
 * whatever the chunks, byte-exact pass-through, records over the limit never held.  Then the
 * event ops on NDJSON and json-seq answers, chunked at every byte.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ndjson.h"
#include "rewrite.h"
#include "stream_event.h"

#define S(lit) lit, sizeof(lit) - 1

/* What the callback saw: "J{json}raw|" per record, "O(raw)" per record over the limit (its
 * pieces joined), "R(raw)" for bytes outside records (adjacent ones joined). */
struct log {
	char *s;
	size_t len, cap;
	size_t all;                     /* raw bytes seen */
	int in_over, in_raw, overs;
};

static void
log_str(struct log *lg, const char *p, size_t n)
{
	if (lg->len + n + 1 > lg->cap) {
		lg->cap = (lg->len + n + 1) * 2;
		ck_assert_ptr_nonnull(lg->s = realloc(lg->s, lg->cap));
	}
	memcpy(lg->s + lg->len, p, n);
	lg->len += n;
	lg->s[lg->len] = '\0';
}

static int
log_cb(void *arg, const struct ndjson_record *rec)
{
	struct log *lg = arg;

	lg->all += rec->raw_len;
	if (rec->kind != NDJSON_RAW && lg->in_raw) {
		log_str(lg, S(")"));
		lg->in_raw = 0;
	}
	switch (rec->kind) {
	case NDJSON_RECORD:
		ck_assert(rec->json >= rec->raw && rec->json + rec->json_len <= rec->raw + rec->raw_len);
		log_str(lg, S("J{"));
		log_str(lg, rec->json, rec->json_len);
		log_str(lg, S("}"));
		log_str(lg, rec->raw, rec->raw_len);
		log_str(lg, S("|"));
		break;
	case NDJSON_OVER:
		if (rec->first) {
			ck_assert(!lg->in_over);
			lg->in_over = 1;
			lg->overs++;
			log_str(lg, S("O("));
		}
		ck_assert(lg->in_over);
		log_str(lg, rec->raw, rec->raw_len);
		if (rec->last) {
			lg->in_over = 0;
			log_str(lg, S(")"));
		}
		break;
	case NDJSON_RAW:
		if (!lg->in_raw)
			log_str(lg, S("R("));
		lg->in_raw = 1;
		log_str(lg, rec->raw, rec->raw_len);
		break;
	}
	return 0;
}

static void
parse_cut(struct ndjson_parser *np, const char *in, size_t len, size_t a, size_t b,
    struct log *lg)
{
	ndjson_parser_reset(np);
	memset(lg, 0, sizeof(*lg));
	ck_assert_int_eq(ndjson_feed(np, in, a, log_cb, lg), 0);
	ck_assert_int_eq(ndjson_feed(np, in + a, b - a, log_cb, lg), 0);
	ck_assert_int_eq(ndjson_feed(np, in + b, len - b, log_cb, lg), 0);
	ck_assert_int_eq(ndjson_finish(np, log_cb, lg), 0);
	if (lg->in_raw)
		log_str(lg, S(")"));
	ck_assert(!lg->in_over);
	ck_assert_uint_eq(lg->all, len);
}

static const struct {
	const char *name;
	enum ndjson_format format;
	const char *in;
	size_t max;
	const char *want;
} cases[] = {
	{ "lines", NDJSON_LINES, "{\"a\":1}\n{\"b\":2}\r\n\nnot json\n[1]", 1024,
	  "J{{\"a\":1}}{\"a\":1}\n|J{{\"b\":2}}{\"b\":2}\r\n|J{}\n|J{not json}not json\n|"
	  "J{[1]}[1]|" },
	{ "lines over", NDJSON_LINES, "{\"a\":1}\n{\"long\":\"0123456789\"}\n{}\n", 16,
	  "J{{\"a\":1}}{\"a\":1}\n|O({\"long\":\"0123456789\"}\n)J{{}}{}\n|" },
	{ "seq", NDJSON_SEQ, "\x1e{\"a\":1}\n\x1e{\n \"b\": \"}\\\"\\n\"\n}\n\x1e" "3\n", 1024,
	  "J{{\"a\":1}}\x1e{\"a\":1}\n|J{{\n \"b\": \"}\\\"\\n\"\n}}\x1e{\n \"b\": \"}\\\"\\n\"\n}\n|"
	  "J{3}\x1e" "3\n|" },
	{ "seq cut short and stray bytes", NDJSON_SEQ, "x\n\x1e{\"a\":\x1e{}\n\n\x1e[", 1024,
	  "R(x\n)J{{\"a\":}\x1e{\"a\":|J{{}}\x1e{}\n|R(\n)J{[}\x1e[|" },
	{ "seq over", NDJSON_SEQ, "\x1e{\"a\":\"0123456789abcdef\"}\n\x1e{}\n", 16,
	  "O(\x1e{\"a\":\"0123456789abcdef\"}\n)J{{}}\x1e{}\n|" },
};

START_TEST(test_cases_every_cut)
{
	const char *in = cases[_i].in;
	size_t len = strlen(in), a, b;
	struct ndjson_parser *np = ndjson_parser_new(cases[_i].format, cases[_i].max);
	struct log lg;

	for (a = 0; a <= len; a++)
		for (b = a; b <= len; b++) {
			parse_cut(np, in, len, a, b, &lg);
			ck_assert_msg(strcmp(lg.s, cases[_i].want) == 0, "%s cut at %zu,%zu: got\n%s",
			    cases[_i].name, a, b, lg.s);
			free(lg.s);
		}
	ndjson_parser_free(np);
}
END_TEST

/* A record over the limit is never held: its pieces go on as the chunks come. */
START_TEST(test_over_not_held)
{
	struct ndjson_parser *np = ndjson_parser_new(NDJSON_LINES, 64);
	struct log lg = { 0 };
	char chunk[1000];
	int i;

	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 1000; i++) {
		size_t before = lg.all;

		ck_assert_int_eq(ndjson_feed(np, chunk, sizeof(chunk), log_cb, &lg), 0);
		ck_assert_uint_eq(lg.all, before + sizeof(chunk));
	}
	ck_assert_int_eq(ndjson_feed(np, S("\n{}\n"), log_cb, &lg), 0);
	ck_assert_int_eq(lg.overs, 1);
	ck_assert_ptr_nonnull(strstr(lg.s, "\n)J{{}}{}\n|"));
	free(lg.s);
	ndjson_parser_free(np);
}
END_TEST

struct out {
	char *s;
	size_t len, cap;
};

static int
out_write(void *arg, const char *p, size_t n)
{
	struct out *o = arg;

	if (o->len + n + 1 > o->cap) {
		o->cap = (o->len + n + 1) * 2;
		ck_assert_ptr_nonnull(o->s = realloc(o->s, o->cap));
	}
	memcpy(o->s + o->len, p, n);
	o->len += n;
	o->s[o->len] = '\0';
	return 0;
}

static void
events_every_cut(enum stream_events_format format, const char *in, const char *want,
    uint64_t rewritten, uint64_t passed)
{
	struct rewrite_program *prog;
	struct stream_events *se;
	size_t len = strlen(in), cut;
	struct out o = { 0 };
	char err[200];

	ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(S(
	    "[ { drop: [ debug ] }, { rename: { msg: message } } ]"), err, sizeof(err)));
	ck_assert_ptr_nonnull(se = stream_events_new(1 << 20, 64, 1000));
	for (cut = 0; cut <= len; cut++) {
		o.len = 0;
		stream_events_start(se, format, prog, VALIDATE_ENVELOPE, NULL);
		ck_assert_int_eq(stream_events_feed(se, in, cut, out_write, &o), 0);
		ck_assert_int_eq(stream_events_feed(se, in + cut, len - cut, out_write, &o), 0);
		ck_assert_int_eq(stream_events_finish(se, out_write, &o), 0);
		ck_assert_msg(o.len == strlen(want) && memcmp(o.s, want, o.len) == 0,
		    "cut %zu: got\n%s", cut, o.s);
		ck_assert_uint_eq(stream_events_counts(se)->rewritten, rewritten);
		ck_assert_uint_eq(stream_events_counts(se)->passed, passed);
	}
	free(o.s);
	stream_events_free(se);
	rewrite_program_free(prog);
}

START_TEST(test_events_ndjson)
{
	events_every_cut(STREAM_EVENTS_NDJSON,
	    "{\"msg\":\"a\",\"debug\":{\"x\":[1]},\"n\":1.0e2}\r\n"
	    "\n"
	    "{\"keep\": \"\\u00e9\"}\n"
	    "garbage {\n"
	    "{\"msg\":2}",
	    "{\"message\":\"a\",\"n\":1.0e2}\r\n"
	    "\n"
	    "{\"keep\": \"\\u00e9\"}\n"
	    "garbage {\n"
	    "{\"message\":2}", 2, 3);
}
END_TEST

START_TEST(test_events_json_seq)
{
	events_every_cut(STREAM_EVENTS_JSON_SEQ,
	    "\x1e{\"msg\":\"a\",\n \"debug\":1}\n\x1e\"text\"\n\x1e{\"msg\":",
	    "\x1e{\"message\":\"a\"}\n\x1e\"text\"\n\x1e{\"msg\":", 1, 2);
}
END_TEST

START_TEST(test_format_of)
{
	enum stream_events_format f = STREAM_EVENTS_SSE;

	ck_assert(stream_events_format_of(S("text/event-stream; charset=utf-8"), &f));
	ck_assert_int_eq(f, STREAM_EVENTS_SSE);
	ck_assert(stream_events_format_of(S("Application/X-NDJSON"), &f));
	ck_assert_int_eq(f, STREAM_EVENTS_NDJSON);
	ck_assert(stream_events_format_of(S("application/jsonl"), &f));
	ck_assert_int_eq(f, STREAM_EVENTS_NDJSON);
	ck_assert(stream_events_format_of(S("application/json-seq"), &f));
	ck_assert_int_eq(f, STREAM_EVENTS_JSON_SEQ);
	ck_assert(!stream_events_format_of(S("application/json"), &f));
	ck_assert(!stream_events_format_of(S("application/jsonlines"), &f));
	ck_assert(!stream_events_format_of(S("text/event-stream-x"), &f));
	ck_assert(!stream_events_format_of(S(""), &f));
}
END_TEST

static Suite *
ndjson_suite(void)
{
	Suite *s = suite_create("ndjson");
	TCase *tc = tcase_create("ndjson");

	tcase_add_loop_test(tc, test_cases_every_cut, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_over_not_held);
	tcase_add_test(tc, test_events_ndjson);
	tcase_add_test(tc, test_events_json_seq);
	tcase_add_test(tc, test_format_of);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(ndjson_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
