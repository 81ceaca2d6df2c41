/*
 * The event-stream parser: events and their lines as the WHATWG rules read them, the same
 * events whatever the chunks, byte-exact pass-through of everything, events over the limit
 * never held, and an event rebuilt with new data.  Then the event ops on SSE answers
 * (stream_event.c), chunked at every byte.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite.h"
#include "sse.h"
#include "stream_event.h"

#define S(lit) lit, sizeof(lit) - 1

/* What the callbacks saw, as text: "E{data}[kinds]raw" per event, "O(raw)" per event over
 * the limit (its pieces joined), "R(raw)" for bytes of no event (adjacent ones joined). */
struct log {
	char *s;
	size_t len, cap;
	char *all;                      /* every raw byte, in order */
	size_t all_len, all_cap;
	int in_over;
	int in_raw;
	int ended_cr;                   /* the last event ended with a CR */
	int close_over;                 /* an event over the limit ended: ")" still to log */
	int overs;
};

static void
log_add(char **s, size_t *len, size_t *cap, const char *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		ck_assert_ptr_nonnull(*s = realloc(*s, *cap));
	}
	memcpy(*s + *len, p, n);
	*len += n;
	(*s)[*len] = '\0';
}

static void
log_str(struct log *lg, const char *p, size_t n)
{
	log_add(&lg->s, &lg->len, &lg->cap, p, n);
}

static int
log_cb(void *arg, const struct sse_event *ev)
{
	static const char kinds[] = "deirco";
	struct log *lg = arg;
	struct sse_event ev_rest;
	size_t i;
	char k;

	log_add(&lg->all, &lg->all_len, &lg->all_cap, ev->raw, ev->raw_len);
	if (ev->kind == SSE_RAW && lg->ended_cr && !lg->in_raw && ev->raw_len > 0 &&
	    ev->raw[0] == '\n') {
		/* The LF of a CRLF cut after its CR, which ended the last event: log it as if the
		 * chunks had not been cut there. */
		lg->ended_cr = 0;
		log_str(lg, S("\n"));
		if (ev->raw_len == 1)
			return 0;
		ev_rest = *ev;
		ev_rest.raw++;
		ev_rest.raw_len--;
		ev = &ev_rest;
	}
	if (lg->close_over) {
		log_str(lg, S(")"));
		lg->close_over = 0;
	}
	if (ev->raw_len > 0)
		lg->ended_cr = ev->raw[ev->raw_len - 1] == '\r';
	if (ev->kind != SSE_RAW && lg->in_raw) {
		log_str(lg, S(")"));
		lg->in_raw = 0;
	}
	switch (ev->kind) {
	case SSE_EVENT:
		ck_assert(!lg->in_over);
		log_str(lg, S("E{"));
		if (ev->data != NULL)
			log_str(lg, ev->data, ev->data_len);
		else
			log_str(lg, S("-"));
		log_str(lg, S("}["));
		for (i = 0; i < ev->nlines; i++) {
			k = kinds[ev->lines[i].kind];
			log_str(lg, &k, 1);
			/* the value as the line's offsets give it */
			log_str(lg, S("="));
			log_str(lg, ev->raw + ev->lines[i].off + ev->lines[i].value,
			    ev->lines[i].len - ev->lines[i].value);
			log_str(lg, ev->lines[i].term == 2 ? "/2," : "/1,", 3);
		}
		log_str(lg, S("]"));
		log_str(lg, ev->raw, ev->raw_len);
		break;
	case SSE_OVER:
		if (ev->first) {
			ck_assert(!lg->in_over);
			lg->in_over = 1;
			lg->overs++;
			log_str(lg, S("O("));
		}
		ck_assert(lg->in_over);
		log_str(lg, ev->raw, ev->raw_len);
		if (ev->last) {
			lg->in_over = 0;
			lg->close_over = 1;
		}
		break;
	case SSE_RAW:
		if (!lg->in_raw)
			log_str(lg, S("R("));
		lg->in_raw = 1;
		log_str(lg, ev->raw, ev->raw_len);
		break;
	}
	return 0;
}

static void
log_free(struct log *lg)
{
	free(lg->s);
	free(lg->all);
	memset(lg, 0, sizeof(*lg));
}

/* Parse in[0..len) cut at the given offsets (sorted, ncuts of them) into lg. */
static void
parse_cut(struct sse_parser *sp, const char *in, size_t len, const size_t *cuts, size_t ncuts,
    struct log *lg)
{
	size_t i, at = 0;

	sse_parser_reset(sp);
	for (i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : len;

		ck_assert_int_eq(sse_feed(sp, in + at, end - at, log_cb, lg), 0);
		at = end;
	}
	ck_assert_int_eq(sse_finish(sp, log_cb, lg), 0);
	if (lg->close_over)
		log_str(lg, S(")"));
	lg->close_over = 0;
	if (lg->in_raw) {
		log_str(lg, S(")"));
		lg->in_raw = 0;
	}
	ck_assert(!lg->in_over);
	/* Everything went on, byte for byte. */
	ck_assert_uint_eq(lg->all_len, len);
	ck_assert(len == 0 || memcmp(lg->all, in, len) == 0);
}

static const struct {
	const char *name;
	const char *in;
	size_t max;
	const char *want;
} cases[] = {
	{ "one event", "data: {\"a\":1}\n\n", 1024,
	  "E{{\"a\":1}}[d={\"a\":1}/1,]data: {\"a\":1}\n\n" },
	{ "CRLF", "data: x\r\n\r\n", 1024, "E{x}[d=x/2,]data: x\r\n\r\n" },
	{ "CR", "data: x\r\r", 1024, "E{x}[d=x/1,]data: x\r\r" },
	{ "multi-line data", "id: 7\ndata: a\nevent: e\ndata:b\ndata\n\n", 1024,
	  "E{a\nb\n}[i=7/1,d=a/1,e=e/1,d=b/1,d=/1,]id: 7\ndata: a\nevent: e\ndata:b\ndata\n\n" },
	{ "one space only", "data:  x\n\n", 1024, "E{ x}[d= x/1,]data:  x\n\n" },
	{ "comments and retry", ": hi\nretry: 10\nfoo: bar\n\n", 1024,
	  "E{-}[c=/1,r=10/1,o=bar/1,]: hi\nretry: 10\nfoo: bar\n\n" },
	{ "blank lines alone", "\n\n", 1024, "E{-}[]\nE{-}[]\n" },
	{ "BOM", "\xef\xbb\xbf" "data: 1\n\n", 1024, "E{1}[d=1/1,]\xef\xbb\xbf" "data: 1\n\n" },
	{ "[DONE]", "data: [DONE]\n\n", 1024, "E{[DONE]}[d=[DONE]/1,]data: [DONE]\n\n" },
	{ "unfinished at the end", "data: 1\n\ndata: 2\n", 1024,
	  "E{1}[d=1/1,]data: 1\n\nR(data: 2\n)" },
	{ "over the limit", "data: 1\n\ndata: 0123456789abcdef\ndata: x\n\ndata: 2\n\n", 16,
	  "E{1}[d=1/1,]data: 1\n\nO(data: 0123456789abcdef\ndata: x\n\n)E{2}[d=2/1,]data: 2\n\n" },
	{ "over the limit at the end", "data: 0123456789abcdef", 16,
	  "O(data: 0123456789abcdef)" },
};

START_TEST(test_cases_every_cut)
{
	const char *in = cases[_i].in;
	size_t len = strlen(in), a, b, cuts[2];
	struct sse_parser *sp = sse_parser_new(cases[_i].max);
	struct log lg = { 0 };

	parse_cut(sp, in, len, NULL, 0, &lg);
	ck_assert_msg(strcmp(lg.s, cases[_i].want) == 0, "%s: got\n%s", cases[_i].name, lg.s);
	log_free(&lg);
	/* Every one and two cuts: the same events. */
	for (a = 0; a <= len; a++)
		for (b = a; b <= len; b++) {
			cuts[0] = a;
			cuts[1] = b;
			parse_cut(sp, in, len, cuts, 2, &lg);
			ck_assert_msg(strcmp(lg.s, cases[_i].want) == 0, "%s cut at %zu,%zu: got\n%s",
			    cases[_i].name, a, b, lg.s);
			log_free(&lg);
		}
	sse_parser_free(sp);
}
END_TEST

/* Random streams of line pieces and line ends, cut at every byte and at random pairs: the
 * same events as in one piece. */
START_TEST(test_random_every_cut)
{
	static const char *const parts[] = { "data", ":", " ", "\r", "\n", "\r\n", "x", "id",
	    "event", "{\"a\":1}", "\xef\xbb\xbf", "retry:", "0123456789" };
	struct sse_parser *sp;
	struct log ref = { 0 }, lg = { 0 };
	char in[256];
	size_t len, k, cuts[2], max;
	int iter;

	srandom(28);
	for (iter = 0; iter < 300; iter++) {
		max = 8 + (size_t)random() % 40;
		sp = sse_parser_new(max);
		len = 0;
		while (len < 150) {
			const char *pt = parts[random() % (sizeof(parts) / sizeof(parts[0]))];

			memcpy(in + len, pt, strlen(pt));
			len += strlen(pt);
		}
		parse_cut(sp, in, len, NULL, 0, &ref);
		for (k = 0; k <= len; k++) {
			cuts[0] = k;
			cuts[1] = k + (size_t)random() % (len - k + 1);
			parse_cut(sp, in, len, cuts, 2, &lg);
			ck_assert_msg(strcmp(lg.s, ref.s) == 0, "iter %d max %zu cut %zu,%zu:\n%s\nvs\n%s", iter, max,
			    cuts[0], cuts[1], lg.s, ref.s);
			log_free(&lg);
		}
		log_free(&ref);
		sse_parser_free(sp);
	}
}
END_TEST

/* A CR at a chunk end then LF: one line end, the event dispatched at the CR. */
START_TEST(test_cr_then_lf)
{
	struct sse_parser *sp = sse_parser_new(1024);
	struct log lg = { 0 };

	ck_assert_int_eq(sse_feed(sp, S("data: a\r\n\r"), log_cb, &lg), 0);
	ck_assert_str_eq(lg.s, "E{a}[d=a/2,]data: a\r\n\r");
	ck_assert_int_eq(sse_feed(sp, S("\ndata: b\r"), log_cb, &lg), 0);
	ck_assert_int_eq(sse_feed(sp, S("\n\n"), log_cb, &lg), 0);
	ck_assert_int_eq(sse_finish(sp, log_cb, &lg), 0);
	/* (the log puts the LF, passed as bytes of no event, after the event it ends) */
	ck_assert_str_eq(lg.s, "E{a}[d=a/2,]data: a\r\n\r\nE{b}[d=b/2,]data: b\r\n\n");
	ck_assert_uint_eq(lg.all_len, 21);
	log_free(&lg);
	sse_parser_free(sp);
}
END_TEST

/* An event over the limit is never held: its pieces go on as the chunks come. */
START_TEST(test_over_not_held)
{
	struct sse_parser *sp = sse_parser_new(64);
	struct log lg = { 0 };
	char chunk[1000];
	int i;

	memset(chunk, 'x', sizeof(chunk));
	ck_assert_int_eq(sse_feed(sp, S("data: "), log_cb, &lg), 0);
	for (i = 0; i < 1000; i++) {
		size_t before = lg.all_len;

		ck_assert_int_eq(sse_feed(sp, chunk, sizeof(chunk), log_cb, &lg), 0);
		if (i > 0)
			ck_assert_uint_eq(lg.all_len, before + sizeof(chunk));
	}
	ck_assert_int_eq(sse_feed(sp, S("\n\ndata: 1\n\n"), log_cb, &lg), 0);
	ck_assert_int_eq(lg.overs, 1);
	ck_assert_uint_eq(lg.all_len, 6 + 1000 * sizeof(chunk) + 11);
	ck_assert_ptr_nonnull(strstr(lg.s, ")E{1}"));
	log_free(&lg);
	sse_parser_free(sp);
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

	log_add(&o->s, &o->len, &o->cap, p, n);
	return 0;
}

static int
rebuild_cb(void *arg, const struct sse_event *ev)
{
	struct rewrite_span spans[2] = { { S("{\"b\":") }, { S("\r\n2}") } };

	if (ev->kind != SSE_EVENT)
		return out_write(arg, ev->raw, ev->raw_len);
	return sse_event_write(ev, spans, 2, out_write, arg);
}

/* New data: one data line where the first was, other lines kept in order, a line end in the
 * value starting another data line. */
START_TEST(test_event_write)
{
	struct sse_parser *sp = sse_parser_new(1024);
	struct out o = { 0 };

	ck_assert_int_eq(sse_feed(sp, S("id: 1\r\ndata: {\"a\":\r\nevent: x\r\ndata: 1}\r\n"
	    ": c\r\n\r\n"), rebuild_cb, &o), 0);
	ck_assert_str_eq(o.s, "id: 1\r\ndata: {\"b\":\r\ndata: 2}\r\nevent: x\r\n: c\r\n\r\n");
	free(o.s);
	sse_parser_free(sp);
}
END_TEST

/* The event ops on an SSE answer of an LLM API, cut at every byte. */
static const char llm_in[] =
    ": keep-alive\n\n"
    "id: 1\nevent: chunk\ndata: {\"id\":\"c1\",\"system_fingerprint\":\"fp\",\"choices\":"
    "[{\"delta\":{\"content\":\"Hi \\\"x\\\"\"}}]}\n\n"
    "data: {\"id\":\"c2\",\n"
    "data:  \"n\": 1.50e3}\r\n\r\n"
    "retry: 100\ndata: [DONE]\n\n";
static const char llm_want[] =
    ": keep-alive\n\n"
    "id: 1\nevent: chunk\ndata: {\"id\":\"c1\",\"choices\":"
    "[{\"delta\":{\"content\":\"Hi \\\"x\\\"\"}}],\"gateway\":\"jsongate\",\"rid\":\"r-1\"}\n\n"
    "data: {\"id\":\"c2\",\n"
    "data:  \"n\": 1.50e3,\"gateway\":\"jsongate\",\"rid\":\"r-1\"}\n\r\n"
    "retry: 100\ndata: [DONE]\n\n";

START_TEST(test_events_sse_every_cut)
{
	static const char yaml[] =
	    "[ { drop: [ system_fingerprint ] }, { set: { gateway: jsongate, rid: $request_id } } ]";
	struct rewrite_vars vars = { .request_id = { S("r-1") } };
	struct rewrite_program *prog;
	struct stream_events *se;
	const struct stream_events_counts *c;
	char err[200];
	size_t len = sizeof(llm_in) - 1, cut;
	struct out o = { 0 };

	ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(S(yaml), err, sizeof(err)));
	ck_assert_ptr_nonnull(se = stream_events_new(1 << 20, 64, 1000));
	for (cut = 0; cut <= len; cut++) {
		stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, &vars);
		ck_assert_int_eq(stream_events_feed(se, llm_in, cut, out_write, &o), 0);
		ck_assert_int_eq(stream_events_feed(se, llm_in + cut, len - cut, out_write, &o), 0);
		ck_assert_int_eq(stream_events_finish(se, out_write, &o), 0);
		ck_assert_msg(o.len == sizeof(llm_want) - 1 && memcmp(o.s, llm_want, o.len) == 0,
		    "cut %zu: got\n%s", cut, o.s);
		c = stream_events_counts(se);
		ck_assert_uint_eq(c->rewritten, 2);
		ck_assert_uint_eq(c->passed, 1);       /* [DONE]: events without data are not counted */
		ck_assert_uint_eq(c->over, 0);
		o.len = 0;
	}
	/* The first event goes on before the rest has come. */
	stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, &vars);
	ck_assert_int_eq(stream_events_feed(se, llm_in, 16, out_write, &o), 0);
	ck_assert_uint_eq(o.len, 14);
	free(o.s);
	stream_events_free(se);
	rewrite_program_free(prog);
}
END_TEST

/* An event over max_event passes untouched and is counted. */
START_TEST(test_events_over)
{
	static const char in[] = "data: {\"a\":1,\"drop\":2,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}\n\n"
	    "data: {\"drop\":1}\n\n";
	struct rewrite_program *prog;
	struct stream_events *se;
	char err[200];
	struct out o = { 0 };

	ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(S("[ { drop: [ drop ] } ]"), err,
	    sizeof(err)));
	ck_assert_ptr_nonnull(se = stream_events_new(32, 64, 1000));
	stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
	ck_assert_int_eq(stream_events_feed(se, S(in), out_write, &o), 0);
	ck_assert_int_eq(stream_events_finish(se, out_write, &o), 0);
	ck_assert_str_eq(o.s, "data: {\"a\":1,\"drop\":2,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}\n\n"
	    "data: {}\n\n");
	ck_assert_uint_eq(stream_events_counts(se)->over, 1);
	ck_assert_uint_eq(stream_events_counts(se)->rewritten, 1);
	free(o.s);
	stream_events_free(se);
	rewrite_program_free(prog);
}
END_TEST

/* The limit holds however an event is found: one of exactly max_event bytes (its data line
 * and that line's end) is rewritten, one byte more passes untouched, also between events
 * the fast path takes on its own, in one piece and byte by byte. */
START_TEST(test_events_over_between)
{
	static const char in[] = "data: {\"drop\":1}\n\n"
	    "data: {\"drop\":1234}\n\n"
	    "data: {\"drop\":12345}\n\n"
	    "data: {\"drop\":1}\n\n";
	static const char want[] = "data: {}\n\ndata: {}\n\ndata: {\"drop\":12345}\n\ndata: {}\n\n";
	struct rewrite_program *prog;
	struct stream_events *se;
	char err[200];
	size_t at, step;
	int fast;

	ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(S("[ { drop: [ drop ] } ]"), err,
	    sizeof(err)));
	for (fast = 0; fast <= 1; fast++) {
		for (step = 1; step <= sizeof(in); step += sizeof(in) - 1) {
			struct out o = { 0 };

			ck_assert_ptr_nonnull(se = stream_events_new(20, 64, 1000));
			stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
			stream_events_fast(se, fast);
			for (at = 0; at < sizeof(in) - 1; at += step)
				ck_assert_int_eq(stream_events_feed(se, in + at,
				    sizeof(in) - 1 - at < step ? sizeof(in) - 1 - at : step, out_write,
				    &o), 0);
			ck_assert_int_eq(stream_events_finish(se, out_write, &o), 0);
			ck_assert_uint_eq(o.len, sizeof(want) - 1);
			ck_assert_mem_eq(o.s, want, o.len);
			ck_assert_uint_eq(stream_events_counts(se)->over, 1);
			ck_assert_uint_eq(stream_events_counts(se)->rewritten, 3);
			ck_assert_uint_eq(stream_events_fast_events(se), fast ? 3 : 0);
			free(o.s);
			stream_events_free(se);
		}
	}
	rewrite_program_free(prog);
}
END_TEST

/* Event texts for the fast path of drop and set against the engine: plain ones it takes,
 * and every kind it must leave to the engine (escapes, NUL, bad syntax, depth, members). */
static const char *const fast_texts[] = {
	"{\"a\":1,\"drop\":2,\"b\":\"x\"}",
	"{\"drop\":1}",
	"{}",
	" { }",
	" { \"a\" : 1 , \"drop\" : [1,{\"x\":\"]\"}] ,\t\"c\" : true } ",
	"{\"a\":1,\"a\":2,\"drop\":3,\"drop\":4,\"gw\":0,\"gw\":\"x\"}",
	"{\"gw\":\"old\",\"a\":{\"gw\":1},\"drop\":{}}",
	"{\"a\":\"es\\\"c\",\"drop\":1}",
	"{\"d\\u0072op\":1,\"b\":2}",
	"{\"drop\":\"\\ud800\",\"b\":2}",
	"{\"a\":1,}",
	"{\"a\":1",
	"{\"a\" 1}",
	"{\"a\":01}",
	"{\"a\":-1.5e+3,\"b\":null,\"c\":false,\"drop\":0.5}",
	"{\"a\":tru}",
	"{\"a\":1}x",
	"{\"a\":[1,2}",
	"{\"a\":[1]]}",
	/* a line end inside: the event's data is its first line only */
	"{\"a\":[1,\n2],\"drop\":1}",
	"{\"drop\":{\"x\":\r1},\"b\":2}",
	"{\"drop\":1,\n\"b\":2}",
	"{\"drop\":\"x\ny\"}",
	"{\"drop\":[\"0123456789012345678901234567890123456789012345678901234567890123\",\n1]}",
	"{\"a\":1,\"drop\":2} ",
	"{\"a\":1]",
	"{\"a\":[[[[[[1]]]]]],\"drop\":1}",
	"{\"a\":{\"b\":{\"c\":{\"d\":1}}},\"drop\":1}",
	"[1,2]",
	"\"str\"",
	"1",
	"{\"a\":\"\",\"\":1,\"drop\":\"\"}",
	"{\"a\"::1}",
	"{\"a\":1,,\"b\":2}",
	"{'a':1}",
	"{\"a\":\"x\ty\xc3\xa9\",\"drop\":1}",
	"{\"a\":1:2}",
	"{\"a\":\"0123456789012345678901234567890123456789\\\",\"drop\":1}",
	"{\"a\":1{}}",
	"{\"a\":\"0123456789012345678901234567890123456789012345678901234567890123456789\","
	    "\"drop\":\"0123456789012345678901234567890123456789012345678901234567890123456789\"}",
	"{\"k01\":1,\"k02\":1,\"k03\":1,\"k04\":1,\"k05\":1,\"k06\":1,\"k07\":1,\"k08\":1,\"k09\":1,"
	    "\"k10\":1,\"k11\":1,\"k12\":1,\"k13\":1,\"k14\":1,\"k15\":1,\"k16\":1,\"k17\":1,"
	    "\"k18\":1,\"k19\":1,\"k20\":1,\"k21\":1,\"drop\":1}",
};

static const char *const fast_programs[] = {
	"[ { drop: [ drop ] } ]",
	"[ { set: { gw: jsongate } } ]",
	"[ { drop: [ drop ] }, { set: { gw: jsongate, rid: $request_id } } ]",
	"[ { set: { gw: 1 } }, { drop: [ gw ] } ]",
	"[ { set: { a: { x: [1, 2] } } }, { set: { a: 2, gw: \"a\\nb\" } } ]",
	"[ { drop: [ absent ] } ]",
	"[ { drop: [ a, drop ] }, { set: { a: 3 } }, { drop: [ b ] } ]",
	"[ { set: { c: 0, b: null } }, { drop: [ c ] } ]",
	/* not taken by the fast path: the engine on both sides */
	"[ { drop: [ a.b ] } ]",
	"[ { rename: { a: b } } ]",
};

/* The stream through prog with the fast path on or off: output, counts, fast events. */
static void
fast_run(const struct rewrite_program *prog, const char *in, size_t len, int fast,
    unsigned depth, size_t members, struct out *o, struct stream_events_counts *c,
    uint64_t *nfast, enum stream_events_format format, size_t piece)
{
	struct rewrite_vars vars = { .request_id = { S("r-\"1") } };
	struct stream_events *se;
	size_t at, k;

	ck_assert_ptr_nonnull(se = stream_events_new(1 << 16, depth, members));
	stream_events_start(se, format, prog, VALIDATE_ENVELOPE, &vars);
	stream_events_fast(se, fast);
	o->len = 0;
	/* cut in pieces: events held across feeds too, or many in one */
	for (at = 0; at < len; at += k) {
		k = len - at < piece ? len - at : piece;
		ck_assert_int_eq(stream_events_feed(se, in + at, k, out_write, o), 0);
	}
	ck_assert_int_eq(stream_events_finish(se, out_write, o), 0);
	*c = *stream_events_counts(se);
	*nfast = stream_events_fast_events(se);
	stream_events_free(se);
}

/* One stream through prog both ways: the same bytes and counts; returns the fast events. */
static uint64_t
fast_compare(const struct rewrite_program *prog, const char *in, size_t len, unsigned depth,
    size_t members, enum stream_events_format format, const char *what)
{
	/* the fast path in pieces of 7 bytes, 61, and whole (SSE: with and without its lane) */
	static const size_t pieces[] = { 7, 61, SIZE_MAX };
	struct out a = { 0 }, b = { 0 };
	struct stream_events_counts ca, cb;
	uint64_t fa, fb, first = 0;
	size_t i, at;

	fast_run(prog, in, len, 0, depth, members, &b, &cb, &fb, format, 7);
	ck_assert_uint_eq(fb, 0);
	for (i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		fast_run(prog, in, len, 1, depth, members, &a, &ca, &fa, format, pieces[i]);
		if (a.len != b.len || memcmp(a.s, b.s, a.len) != 0) {
			/* where they part, with some bytes before: check's messages are short */
			for (at = 0; at < a.len && at < b.len && a.s[at] == b.s[at]; at++)
				continue;
			at = at > 120 ? at - 120 : 0;
			ck_abort_msg("%.300s (pieces of %zu), from byte %zu: fast\n%.*s\nengine\n%.*s",
			    what, pieces[i], at, (int)(a.len - at < 400 ? a.len - at : 400),
			    a.s + at, (int)(b.len - at < 400 ? b.len - at : 400), b.s + at);
		}
		ck_assert_uint_eq(ca.rewritten, cb.rewritten);
		ck_assert_uint_eq(ca.passed, cb.passed);
		ck_assert_uint_eq(ca.failed, cb.failed);
		ck_assert_uint_eq(ca.over, cb.over);
		/* the same events taken the fast way however the stream is cut */
		if (i == 0)
			first = fa;
		ck_assert_uint_eq(fa, first);
	}
	free(a.s);
	free(b.s);
	return first;
}

/* Every text under every program, as SSE events and as NDJSON lines, with tight and loose
 * limits: the fast path writes what the engine writes, and takes the plain events. */
START_TEST(test_events_fast_same)
{
	struct rewrite_program *prog;
	char err[200], in[16384];
	size_t i, k, len, nlen;
	uint64_t nfast;

	for (k = 0; k < sizeof(fast_programs) / sizeof(fast_programs[0]); k++) {
		prog = rewrite_program_from_yaml(fast_programs[k], strlen(fast_programs[k]), err,
		    sizeof(err));
		ck_assert_msg(prog != NULL, "%s: %s", fast_programs[k], err);
		len = nlen = 0;
		for (i = 0; i < sizeof(fast_texts) / sizeof(fast_texts[0]); i++)
			len += (size_t)snprintf(in + len, sizeof(in) - len, "data: %s\n\n",
			    fast_texts[i]);
		/* data over several lines, CRLF, other lines kept */
		len += (size_t)snprintf(in + len, sizeof(in) - len,
		    "id: 1\r\ndata: {\"a\":1,\r\ndata: \"drop\":2}\r\n\r\n"
		    "event: e\ndata:{\"drop\":[\"\\n\"],\"b\":2}\n: c\n\n"
		    "data: {\"drop\":1}\nid: 7\n\ndata:{\"drop\":1}\ndata: {\"b\":2}\n\n"
		    "data: {\"drop\":1}\n\n\ndata: {\"drop\":1}\r\n\n");
		/* NUL in a key or a string: never taken as it is */
		memcpy(in + len, S("data: {\"a\":\"x\0y\",\"drop\":1}\n\n"
		    "data: {\"drop\":1,\"k\0\":1}\n\ndata: {\"drop\":1,\"k\":1\0}\n\n"));
		len += sizeof("data: {\"a\":\"x\0y\",\"drop\":1}\n\n"
		    "data: {\"drop\":1,\"k\0\":1}\n\ndata: {\"drop\":1,\"k\":1\0}\n\n") - 1;
		nfast = fast_compare(prog, in, len, 5, 20, STREAM_EVENTS_SSE, fast_programs[k]);
		ck_assert(k >= 8 ? nfast == 0 : nfast >= 10);
		nfast = fast_compare(prog, in, len, 64, 1000, STREAM_EVENTS_SSE, fast_programs[k]);
		ck_assert(k >= 8 ? nfast == 0 : nfast >= 10);
		for (i = 0; i < sizeof(fast_texts) / sizeof(fast_texts[0]); i++)
			nlen += (size_t)snprintf(in + nlen, sizeof(in) - nlen, "%s\n", fast_texts[i]);
		fast_compare(prog, in, nlen, 5, 20, STREAM_EVENTS_NDJSON, fast_programs[k]);
		fast_compare(prog, in, nlen, 64, 1000, STREAM_EVENTS_NDJSON, fast_programs[k]);
		rewrite_program_free(prog);
	}
}
END_TEST

/*
 * Events the parser offers whole to the fast path, which reads each object and its line end
 * in one pass: what must follow the object (LF and the blank line's LF) and what it must
 * leave to the parser (another line, CRLF, a space after the object, a line end inside it, a
 * comment between, the chunk's end anywhere), with the stream cut in two at every byte.
 */
START_TEST(test_events_fast_line_cuts)
{
	static const char in[] =
	    "data: {\"a\":1}\n\n"
	    "data: {\"a\":1,\"drop\":{\"x\":[\"}\"]},\"b\":\"s\"}\n\n"
	    "data: {\"drop\":1}\nid: 4\n\n"
	    "data: {\"drop\":1}\r\n\r\n"
	    "data: {\"drop\":1} \n\n"
	    "data: {\"drop\":\n1}\n\n"
	    "data: {\"drop\":[1,\n2]}\n\n"
	    "data: {\"drop\":[1,\r2]}\n\n"
	    "data: {\"drop\":\"a\rb\"}\n\n"
	    "data:{\"drop\":2,\"c\":[\"\\n\"]}\n\n"
	    ": comment\n\n"
	    "data: {\"drop\":3}\ndata: {\"drop\":4}\n\n"
	    "data: [DONE]\n\n"
	    "data: {\"drop\":5}\n\n";
	static const char *const progs[] = { "[ { drop: [ drop ] } ]",
	    "[ { drop: [ drop ] }, { set: { gw: jsongate } } ]", "[ { drop: [ absent ] } ]" };
	struct rewrite_program *prog;
	struct stream_events *se;
	struct stream_events_counts want;
	struct out a = { 0 }, b = { 0 };
	char err[200];
	size_t cut, p;

	for (p = 0; p < sizeof(progs) / sizeof(progs[0]); p++) {
		ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(progs[p], strlen(progs[p]),
		    err, sizeof(err)));
		ck_assert_ptr_nonnull(se = stream_events_new(1 << 16, 64, 1000));
		/* the engine alone, byte by byte */
		stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
		stream_events_fast(se, 0);
		b.len = 0;
		for (cut = 0; cut < sizeof(in) - 1; cut++)
			ck_assert_int_eq(stream_events_feed(se, in + cut, 1, out_write, &b), 0);
		ck_assert_int_eq(stream_events_finish(se, out_write, &b), 0);
		want = *stream_events_counts(se);
		stream_events_fast(se, 1);
		for (cut = 0; cut < sizeof(in); cut++) {
			stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
			a.len = 0;
			ck_assert_int_eq(stream_events_feed(se, in, cut, out_write, &a), 0);
			ck_assert_int_eq(stream_events_feed(se, in + cut, sizeof(in) - 1 - cut,
			    out_write, &a), 0);
			ck_assert_int_eq(stream_events_finish(se, out_write, &a), 0);
			ck_assert_msg(a.len == b.len && memcmp(a.s, b.s, a.len) == 0,
			    "%s, cut at %zu:\n%.*s\nengine:\n%.*s", progs[p], cut, (int)a.len, a.s,
			    (int)b.len, b.s);
			ck_assert_uint_eq(stream_events_counts(se)->rewritten, want.rewritten);
			ck_assert_uint_eq(stream_events_counts(se)->passed, want.passed);
			ck_assert_uint_eq(stream_events_counts(se)->failed, want.failed);
			/* most events are whole on one side of the cut: the fast path took them */
			ck_assert_uint_ge(stream_events_fast_events(se), 8);
		}
		stream_events_free(se);
		rewrite_program_free(prog);
	}
	free(a.s);
	free(b.s);
}
END_TEST

/* Random objects, valid or not, through random programs: fast path and engine agree. */
START_TEST(test_events_fast_random)
{
	static const char *const keys[] = { "\"a\"", "\"drop\"", "\"gw\"", "\"b\"", "\"\"",
	    "\"dr\\u006fp\"", "\"a\\\"\"", "a",
	    "\"a long key that goes on past the end of one window of sixty-four bytes\"" };
	static const char *const vals[] = { "1", "-0.5e3", "true", "null", "\"x\"", "\"\"",
	    "[1,{\"a\":[]}]", "{\"drop\":1}", "\"\\\"\"", "01", "tru", "[", "}", "\"\\u00e9\"",
	    "[[[[[1]]]]]", "{\"x\":\"}\"}", "1e", "\"\xc3\xa9\"", "",
	    "\"a long string that goes on past the end of one window of sixty-four bytes\"",
	    "\"a long string \\\" with an escape past the end of a window of sixty-four\"",
	    "[\"a long array that goes on past the end of one window of sixty-four bytes\"]",
	    "1234567890123456789012345678901234567890123456789012345678901234567890",
	    "\"0123456789012345678901234567890123456789\\\"x\"" };
	static const char *const ws[] = { "", "", "", " ", "\t", "\r", "\n", "  ",
	    "                                                                   " };
	static const char *const progs[] = {
	    "[ { drop: [ drop, b ] }, { set: { gw: jsongate } } ]",
	    "[ { set: { a: 1, drop: [2] } }, { drop: [ gw ] }, { set: { gw: {} } } ]",
	    "[ { drop: [ a ] } ]",
	};
	struct rewrite_program *prog[3];
	char err[200], in[8192];
	size_t len, i, n, p;
	int iter;

	for (p = 0; p < 3; p++)
		ck_assert_ptr_nonnull(prog[p] = rewrite_program_from_yaml(progs[p],
		    strlen(progs[p]), err, sizeof(err)));
	srandom(2828);
#define PICK(arr) arr[(size_t)random() % (sizeof(arr) / sizeof(arr[0]))]
#define PUT(str) do { const char *s_ = (str); size_t l_ = strlen(s_); \
	memcpy(in + len, s_, l_); len += l_; } while (0)
	for (iter = 0; iter < 4000; iter++) {
		len = 0;
		PUT("data: ");
		PUT(PICK(ws));
		PUT("{");
		n = (size_t)random() % 7;
		for (i = 0; i < n; i++) {
			if (i > 0 || random() % 20 == 0) {
				PUT(PICK(ws));
				PUT(random() % 30 == 0 ? "" : ",");
			}
			PUT(PICK(ws));
			PUT(PICK(keys));
			PUT(PICK(ws));
			PUT(random() % 30 == 0 ? "" : ":");
			PUT(PICK(ws));
			PUT(PICK(vals));
		}
		PUT(PICK(ws));
		PUT(random() % 30 == 0 ? "]" : "}");
		PUT(PICK(ws));
		if (random() % 30 == 0)
			PUT("x");
		if (random() % 10 == 0 && len > 7) {
			/* one byte changed anywhere in the text */
			static const char bytes[] = "{}[]\",:\\ 0a\x01";

			in[6 + (size_t)random() % (len - 6)] = bytes[(size_t)random() % 13];
		}
		PUT("\n\n");
		if (memchr(in, '\0', len) != NULL)
			continue;
		p = (size_t)random() % 3;
		fast_compare(prog[p], in, len, 4, 5, STREAM_EVENTS_SSE, in);
		fast_compare(prog[p], in, len, 64, 1000, STREAM_EVENTS_SSE, in);
	}
#undef PUT
#undef PICK
	for (p = 0; p < 3; p++)
		rewrite_program_free(prog[p]);
}
END_TEST

/*
 * Events that share a head: the fast path keeps the first one's and lays the next ones out
 * from it when their bytes differ only inside string values and in integers' digits.  Each
 * byte of a head (up to the first object or array, and the first bytes of that) changed to
 * each of many bytes, between two copies of the head as it was:
 * the fast path writes what the engine writes, in SSE (the head read within one line) and
 * NDJSON, cut anywhere, and lays out the unchanged events from the kept head.
 */
static void
head_kept_run(const struct rewrite_program *prog, const char *base,
    enum stream_events_format format, const char *progtext)
{
	static const char bytes[] = "019a\"\\\x01\r\n \t{}[],:-.e\x7f\xc3";
	const char *pre = format == STREAM_EVENTS_SSE ? "data: " : "";
	const char *post = format == STREAM_EVENTS_SSE ? "\n\n" : "\n";
	size_t blen = strlen(base), head = (size_t)(strrchr(base, '[') - base), len, pos, b;
	struct stream_events *se;
	struct out o = { 0 };
	char in[16384], what[300];

	for (pos = 0; pos < head + 3; pos++) {
		/* the head, the head with byte pos changed, the head: for each byte */
		len = 0;
		for (b = 0; b < sizeof(bytes) - 1; b++) {
			len += (size_t)snprintf(in + len, sizeof(in) - len, "%s%s%s%s", pre, base,
			    post, pre);
			memcpy(in + len, base, blen);
			in[len + pos] = bytes[b];
			len += blen;
			len += (size_t)snprintf(in + len, sizeof(in) - len, "%s%s%s%s", post, pre,
			    base, post);
		}
		ck_assert_uint_lt(len, sizeof(in) - 1);
		snprintf(what, sizeof(what), "%s, %s, byte %zu of %s changed", progtext,
		    format == STREAM_EVENTS_SSE ? "SSE" : "NDJSON", pos, base);
		fast_compare(prog, in, len, 64, 1000, format, what);
		/* A head after its own copy: laid out from the one kept. */
		ck_assert_ptr_nonnull(se = stream_events_new(1 << 16, 64, 1000));
		stream_events_start(se, format, prog, VALIDATE_ENVELOPE, NULL);
		ck_assert_int_eq(stream_events_feed(se, in, len, out_write, &o), 0);
		ck_assert_int_eq(stream_events_finish(se, out_write, &o), 0);
		ck_assert_uint_ge(stream_events_fast_heads(se), sizeof(bytes) - 2);
		stream_events_free(se);
		o.len = 0;
	}
	free(o.s);
}

START_TEST(test_events_fast_head_kept)
{
	/* the second shorter than 32 bytes: an NDJSON line's last head bytes read one by one */
	static const char *const bases[] = {
	    "{\"id\":\"chat-1\",\"n\":12345,\"z\":0,\"m\":7,\"drop\":\"fp\",\"a\":\"x y\","
	    "\"neg\":-1,\"f\":1.5,\"t\":true,\"e\":\"\",\"choices\":[{\"c\":\"ab\"}],\"tail\":1}",
	    "{\"a\":17,\"x\":\"abcdefgh\",\"c\":[]}",
	};
	static const char *const progs[] = {
	    "[ { drop: [ drop ] }, { set: { gw: jsongate } } ]",
	    "[ { set: { a: 1, n: 2 } }, { drop: [ tail ] } ]",
	    "[ { drop: [ absent ] } ]",
	};
	struct rewrite_program *prog;
	char err[200];
	size_t b, p;

	for (p = 0; p < sizeof(progs) / sizeof(progs[0]); p++) {
		ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(progs[p], strlen(progs[p]),
		    err, sizeof(err)));
		for (b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
			head_kept_run(prog, bases[b], STREAM_EVENTS_SSE, progs[p]);
			head_kept_run(prog, bases[b], STREAM_EVENTS_NDJSON, progs[p]);
		}
		rewrite_program_free(prog);
	}
}
END_TEST

static int
take_batch(void *arg, char *p, size_t n)
{
	struct out *o = arg;

	log_add(&o->s, &o->len, &o->cap, p, n);
	free(p);
	return 0;
}

/* Batches handed over whole: the same bytes as written, large pieces still written. */
START_TEST(test_events_take_batches)
{
	struct rewrite_program *prog;
	struct stream_events *se;
	struct out a = { 0 }, b = { 0 };
	char err[200], *in;
	size_t len = 0, i, at, k;
	int take;

	ck_assert_ptr_nonnull(prog = rewrite_program_from_yaml(S("[ { drop: [ drop ] } ]"), err,
	    sizeof(err)));
	ck_assert_ptr_nonnull(in = malloc(300000));
	for (i = 0; i < 2000; i++)
		len += (size_t)sprintf(in + len, "data: {\"n\":%zu,\"drop\":1,\"pad\":\"%0*d\"}\n\n",
		    i, (int)(i % 200), 0);
	/* an event larger than a piece, and one over the limit */
	len += (size_t)sprintf(in + len, "data: {\"drop\":1,\"pad\":\"%06000d\"}\n\n", 0);
	len += (size_t)sprintf(in + len, "data: {\"drop\":1,\"pad\":\"%020000d\"}\n\n", 0);
	ck_assert_ptr_nonnull(se = stream_events_new(16384, 64, 1000));
	for (take = 0; take < 2; take++) {
		struct out *o = take ? &b : &a;

		stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
		stream_events_take_batches(se, take ? take_batch : NULL);
		for (at = 0; at < len; at += k) {
			k = len - at < 70000 ? len - at : 70000;
			ck_assert_int_eq(stream_events_feed(se, in + at, k, out_write, o), 0);
		}
		ck_assert_int_eq(stream_events_finish(se, out_write, o), 0);
		ck_assert_uint_eq(stream_events_counts(se)->rewritten, 2001);
		ck_assert_uint_eq(stream_events_counts(se)->over, 1);
	}
	ck_assert(a.len == b.len && memcmp(a.s, b.s, a.len) == 0);
	ck_assert_uint_lt(a.len, len);
	free(a.s);
	free(b.s);
	free(in);
	stream_events_free(se);
	rewrite_program_free(prog);
}
END_TEST

static Suite *
sse_suite(void)
{
	Suite *s = suite_create("sse");
	TCase *tc = tcase_create("sse");

	tcase_add_loop_test(tc, test_cases_every_cut, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_random_every_cut);
	tcase_add_test(tc, test_cr_then_lf);
	tcase_add_test(tc, test_over_not_held);
	tcase_add_test(tc, test_event_write);
	tcase_add_test(tc, test_events_sse_every_cut);
	tcase_add_test(tc, test_events_over);
	tcase_add_test(tc, test_events_over_between);
	tcase_add_test(tc, test_events_fast_same);
	tcase_add_test(tc, test_events_fast_random);
	tcase_add_test(tc, test_events_fast_line_cuts);
	tcase_add_test(tc, test_events_fast_head_kept);
	tcase_add_test(tc, test_events_take_batches);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(sse_suite());
	int failed = 0, simd;

	/* line ends sought with AVX-512 (where the CPU has it), then with memchr */
	for (simd = 1; simd >= 0; simd--) {
		sse_parser_simd(simd);
		srunner_run_all(sr, CK_NORMAL);
		failed += srunner_ntests_failed(sr);
	}
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
