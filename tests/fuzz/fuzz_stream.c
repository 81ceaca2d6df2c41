/*
 * libFuzzer target for the streaming parsers and the streaming envelope ops.
 *
 * Input: two control bytes, then the bytes.
 *   0: the program, one of programs[] (modulo their number), and the validate mode (full
 *      when the number's high bit is set);
 *   1: the chunking: a seed for where the bytes are cut (0: a byte at a time).
 * Checked on every input:
 *   - the bytes as an SSE stream, as NDJSON and as json-seq: the same events cut as in one
 *     piece, and every byte passed on exactly once, in order;
 *   - the bytes as an SSE stream through event ops of drop and set: the fast path, in one
 *     piece and cut, writes what the engine writes, with the same counts;
 *   - the bytes as a JSON body: stream_envelope gives exactly the buffered engine's bytes
 *     (rewrite_apply), or its error, or fails for look-ahead only where a later
 *     key decides; it never writes after an error.  With an 8-byte look-ahead: the same
 *     bytes, or a look-ahead error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite.h"
#include "ndjson.h"
#include "sse.h"
#include "stream_envelope.h"
#include "stream_event.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const programs[] = {
	"[]",
	"[unwrap: data]",
	"[unwrap: data.result]",
	"[{drop: [debug, a]}]",
	"[{rename: {msg: message, a: b}}]",
	"[{rename: {a: b, b: a}}]",
	"[{keep: [data, id]}]",
	"[set: {gateway: jsongate, a: {x: [1]}}]",
	"[{wrap: a.b}, {wrap: c}]",
	"[unwrap: data, {drop: [x]}, {set: {ok: true}}, {wrap: r}]",
	"[{rename: {a: b}}, {set: {b: 2}}, {keep: [b, c]}]",
	"[{set: {b: 1}}, {rename: {a: b}}, {drop: [c]}]",
	"[{drop: [a], when: {status: 200}}, {set: {b: 1}, when: {not: {status: 200}}}]",
};
#define NPROGRAMS (sizeof(programs) / sizeof(programs[0]))

struct buf {
	char *p;
	size_t len, cap;
};

static int
buf_add(void *arg, const char *p, size_t n)
{
	struct buf *b = arg;

	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		FUZZ_CHECK((b->p = realloc(b->p, b->cap)) != NULL);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

/* An event as text, so that two parses can be compared; the raw bytes go to all. */
struct sse_log {
	struct buf text, all;
};

static int
sse_log_cb(void *arg, const struct sse_event *ev)
{
	struct sse_log *lg = arg;
	char k = (char)('0' + ev->kind);

	buf_add(&lg->all, ev->raw, ev->raw_len);
	if (ev->kind == SSE_EVENT) {
		buf_add(&lg->text, &k, 1);
		if (ev->data != NULL)
			buf_add(&lg->text, ev->data, ev->data_len);
		buf_add(&lg->text, "\0", 1);
	}
	return 0;
}

static int
nd_log_cb(void *arg, const struct ndjson_record *rec)
{
	struct sse_log *lg = arg;
	char k = (char)('0' + rec->kind);

	buf_add(&lg->all, rec->raw, rec->raw_len);
	if (rec->kind == NDJSON_RECORD) {
		FUZZ_CHECK(rec->json >= rec->raw &&
		    rec->json + rec->json_len <= rec->raw + rec->raw_len);
		buf_add(&lg->text, &k, 1);
		buf_add(&lg->text, rec->raw, rec->raw_len);
		buf_add(&lg->text, "\0", 1);
	}
	return 0;
}

static size_t next_cut(unsigned *seed, size_t at, size_t len);

/* The SSE stream through the event ops, fast or not, cut by seed (none: one piece). */
static void
events_run(struct stream_events *ev, const struct rewrite_program *prog, int fast,
    const char *body, size_t len, unsigned seed, int cut, struct buf *out,
    struct stream_events_counts *counts)
{
	size_t at, end;

	stream_events_start(ev, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
	stream_events_fast(ev, fast);
	for (at = 0; at < len; at = end) {
		end = cut ? next_cut(&seed, at, len) : len;
		FUZZ_CHECK(stream_events_feed(ev, body + at, end - at, buf_add, out) == 0);
	}
	FUZZ_CHECK(stream_events_finish(ev, buf_add, out) == 0);
	*counts = *stream_events_counts(ev);
}

static size_t
next_cut(unsigned *seed, size_t at, size_t len)
{
	if (*seed == 0)
		return at + 1 < len ? at + 1 : len;
	*seed = *seed * 1103515245 + 12345;
	return at + 1 + (*seed >> 16) % 17 < len ? at + 1 + (*seed >> 16) % 17 : len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rewrite_program *progs[NPROGRAMS];
	static struct rewrite_ctx *ctx;
	static struct stream_envelope *se, *small;
	static struct sse_parser *whole, *cut;
	static struct stream_events *ev;
	static struct rewrite_program *ev_prog;
	static struct ndjson_parser *nd[2][2];
	struct sse_log a = { 0 }, b = { 0 };
	struct buf want = { 0 }, got = { 0 };
	struct rewrite_result rr;
	const char *body, *why;
	enum validate_mode mode;
	size_t len, at, end, i, written = 0;
	unsigned seed;
	int rb, r = 0;
	char err[200];

	if (ctx == NULL) {
		for (i = 0; i < NPROGRAMS; i++)
			FUZZ_CHECK((progs[i] = rewrite_program_from_yaml(programs[i],
			    strlen(programs[i]), err, sizeof(err))) != NULL);
		ctx = rewrite_ctx_new(32, 256);
		se = stream_envelope_new(1 << 16);
		small = stream_envelope_new(8);
		ev = stream_events_new(256, 8, 64);
		FUZZ_CHECK((ev_prog = rewrite_program_from_yaml(
		    "[{drop: [drop, a]}, {set: {gw: jsongate}}]", 42, err, sizeof(err))) != NULL);
		whole = sse_parser_new(64);
		cut = sse_parser_new(64);
		for (i = 0; i < 2; i++) {
			nd[i][0] = ndjson_parser_new(i ? NDJSON_SEQ : NDJSON_LINES, 64);
			nd[i][1] = ndjson_parser_new(i ? NDJSON_SEQ : NDJSON_LINES, 64);
		}
	}
	if (size < 2)
		return 0;
	body = (const char *)data + 2;
	len = size - 2;

	/* SSE: the same events whatever the chunks, every byte passed on once. */
	sse_parser_reset(whole);
	sse_parser_reset(cut);
	FUZZ_CHECK(sse_feed(whole, body, len, sse_log_cb, &a) == 0);
	FUZZ_CHECK(sse_finish(whole, sse_log_cb, &a) == 0);
	seed = data[1];
	for (at = 0; at < len; at = end) {
		end = next_cut(&seed, at, len);
		FUZZ_CHECK(sse_feed(cut, body + at, end - at, sse_log_cb, &b) == 0);
	}
	FUZZ_CHECK(sse_finish(cut, sse_log_cb, &b) == 0);
	FUZZ_CHECK(a.all.len == len && (len == 0 || memcmp(a.all.p, body, len) == 0));
	FUZZ_CHECK(b.all.len == len && (len == 0 || memcmp(b.all.p, body, len) == 0));
	FUZZ_CHECK(a.text.len == b.text.len &&
	    (a.text.len == 0 || memcmp(a.text.p, b.text.p, a.text.len) == 0));

	/* Event ops: the fast path and its lane as the engine, in one piece and cut. */
	{
		struct buf e0 = { 0 }, e1 = { 0 }, e2 = { 0 };
		struct stream_events_counts c0, c1, c2;

		events_run(ev, ev_prog, 0, body, len, 0, 0, &e0, &c0);
		events_run(ev, ev_prog, 1, body, len, 0, 0, &e1, &c1);
		events_run(ev, ev_prog, 1, body, len, data[1], 1, &e2, &c2);
		FUZZ_CHECK(e1.len == e0.len && (e0.len == 0 || memcmp(e1.p, e0.p, e0.len) == 0));
		FUZZ_CHECK(e2.len == e0.len && (e0.len == 0 || memcmp(e2.p, e0.p, e0.len) == 0));
		FUZZ_CHECK(memcmp(&c1, &c0, sizeof(c0)) == 0 && memcmp(&c2, &c0, sizeof(c0)) == 0);
		free(e0.p);
		free(e1.p);
		free(e2.p);
	}

	/* NDJSON and json-seq: the same. */
	for (i = 0; i < 2; i++) {
		struct sse_log c = { 0 }, d = { 0 };

		ndjson_parser_reset(nd[i][0]);
		ndjson_parser_reset(nd[i][1]);
		FUZZ_CHECK(ndjson_feed(nd[i][0], body, len, nd_log_cb, &c) == 0);
		FUZZ_CHECK(ndjson_finish(nd[i][0], nd_log_cb, &c) == 0);
		seed = data[1];
		for (at = 0; at < len; at = end) {
			end = next_cut(&seed, at, len);
			FUZZ_CHECK(ndjson_feed(nd[i][1], body + at, end - at, nd_log_cb, &d) == 0);
		}
		FUZZ_CHECK(ndjson_finish(nd[i][1], nd_log_cb, &d) == 0);
		FUZZ_CHECK(c.all.len == len && (len == 0 || memcmp(c.all.p, body, len) == 0));
		FUZZ_CHECK(d.all.len == len && (len == 0 || memcmp(d.all.p, body, len) == 0));
		FUZZ_CHECK(c.text.len == d.text.len &&
		    (c.text.len == 0 || memcmp(c.text.p, d.text.p, c.text.len) == 0));
		free(c.text.p);
		free(c.all.p);
		free(d.text.p);
		free(d.all.p);
	}

	/* The envelope ops: streamed as buffered. */
	i = (data[0] & 0x7f) % NPROGRAMS;
	mode = data[0] & 0x80 ? VALIDATE_FULL : VALIDATE_ENVELOPE;
	FUZZ_CHECK(stream_envelope_can(progs[i], mode, &why));
	rb = rewrite_apply(ctx, progs[i], mode, body, len, NULL, &rr);
	for (at = 0; rb == 0 && at < rr.nspans; at++)
		buf_add(&want, rr.spans[at].p, rr.spans[at].len);
	FUZZ_CHECK(stream_envelope_start(se, progs[i], mode, 32, 256, NULL, buf_add, &got) == 0);
	seed = data[1];
	for (at = 0; at < len && r == 0; at = end) {
		end = next_cut(&seed, at, len);
		r = stream_envelope_feed(se, body + at, end - at);
		if (r != 0)
			written = got.len;
	}
	if (r == 0)
		r = stream_envelope_finish(se);
	else
		FUZZ_CHECK(stream_envelope_feed(se, "{}", 2) == r && got.len == written);
	if (rb != 0) {
		/* the same error, as the buffered engine names it, or a look-ahead one; a body
		 * both invalid and too deep (or with too many members) may be refused for either,
		 * as jsmn's window checks the bytes between members later than the scanner */
		rb = rr.invalid ? STREAM_ENVELOPE_INVALID :
		    strstr(rr.error, "too deep") ? STREAM_ENVELOPE_DEPTH :
		    strstr(rr.error, "max_members") ? STREAM_ENVELOPE_MEMBERS : STREAM_ENVELOPE_OPS;
		FUZZ_CHECK(r == rb || r == STREAM_ENVELOPE_LOOKAHEAD || (rb != STREAM_ENVELOPE_OPS &&
		    (r == STREAM_ENVELOPE_INVALID || r == STREAM_ENVELOPE_DEPTH ||
		    r == STREAM_ENVELOPE_MEMBERS)));
	} else if (r == STREAM_ENVELOPE_LOOKAHEAD)
		FUZZ_CHECK(strncmp(stream_envelope_error(se), "needs more", 10) != 0);
	else
		FUZZ_CHECK(r == 0 && got.len == want.len &&
		    (want.len == 0 || memcmp(got.p, want.p, want.len) == 0));
	FUZZ_CHECK(stream_envelope_written(se) == got.len);

	/* An 8-byte look-ahead: the same bytes, or a look-ahead error. */
	got.len = 0;
	FUZZ_CHECK(stream_envelope_start(small, progs[i], mode, 32, 256, NULL, buf_add, &got) == 0);
	r = stream_envelope_feed(small, body, len);
	if (r == 0)
		r = stream_envelope_finish(small);
	if (rb != 0)
		FUZZ_CHECK(r != 0);
	else
		FUZZ_CHECK(r == STREAM_ENVELOPE_LOOKAHEAD || (r == 0 && got.len == want.len &&
		    (want.len == 0 || memcmp(got.p, want.p, want.len) == 0)));
	rewrite_ctx_release(ctx);
	free(a.text.p);
	free(a.all.p);
	free(b.text.p);
	free(b.all.p);
	free(want.p);
	free(got.p);
	return 0;
}
