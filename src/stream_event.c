/* Envelope ops per event: the buffered engine on each event, or the fast path for the ops
 * events mostly get (drop and set of top-level keys, stream_fast.c), with the parsers in
 * sse.c and ndjson.c around them. */
#include "stream_event.h"
#include "grow.h"
#include "ndjson.h"
#include "sse.h"
#include "stream_fast.h"

#include <stdlib.h>
#include <string.h>

/* Output is gathered up to this much before it goes to the write function; a piece this
 * large goes on by itself. */
#define STREAM_EVENTS_BATCH (64 * 1024)
#define STREAM_EVENTS_PIECE 4096

int
stream_event_apply(struct rewrite_ctx *ctx, const struct rewrite_program *prog,
    enum validate_mode mode, const char *json, size_t len, const struct rewrite_vars *vars,
    struct rewrite_result *out)
{
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	while (i < len && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' ||
	    json[i] == '\r'))
		i++;
	if (i == len || json[i] != '{')
		return 0;
	if (rewrite_apply(ctx, prog, mode, json, len, vars, out) != 0)
		return out->invalid ? 0 : -1;
	if (out->nspans == 1 && out->spans[0].p == json && out->spans[0].len == len)
		return 0;
	return 1;
}

int
stream_events_format_of(const char *ct, size_t len, enum stream_events_format *format)
{
	static const struct {
		const char *type;
		enum stream_events_format format;
	} types[] = {
		{ "text/event-stream", STREAM_EVENTS_SSE },
		{ "application/x-ndjson", STREAM_EVENTS_NDJSON },
		{ "application/jsonl", STREAM_EVENTS_NDJSON },
		{ "application/json-seq", STREAM_EVENTS_JSON_SEQ },
	};
	size_t i, j, n = 0;

	while (n < len && ct[n] != ';' && ct[n] != ' ' && ct[n] != '\t')
		n++;
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strlen(types[i].type) != n)
			continue;
		for (j = 0; j < n; j++)
			if ((ct[j] >= 'A' && ct[j] <= 'Z' ? ct[j] + 32 : ct[j]) != types[i].type[j])
				break;
		if (j == n) {
			*format = types[i].format;
			return 1;
		}
	}
	return 0;
}

struct stream_events {
	enum stream_events_format format;
	struct rewrite_ctx *rw;
	unsigned max_depth;
	size_t max_members;
	struct stream_fast *fast;
	int fast_off;                   /* every event to the engine (tests) */
	uint64_t fast_events;           /* events the fast path decided */
	char *obuf;                     /* output gathered for the write function */
	size_t olen, ocap;
	struct sse_parser *sse;
	struct ndjson_parser *lines, *seq;
	const struct rewrite_program *prog;
	enum validate_mode mode;
	const struct rewrite_vars *vars;
	struct stream_events_counts counts;
	stream_events_write_fn write;
	stream_events_take_fn take;
	void *arg;
};

static int stream_events_sse_line(void *arg, const char *raw, size_t value, size_t avail,
    size_t *taken);

struct stream_events *
stream_events_new(size_t max_event, unsigned max_depth, size_t max_members)
{
	struct stream_events *se;

	if ((se = calloc(1, sizeof(*se))) == NULL)
		return NULL;
	se->max_depth = max_depth;
	se->max_members = max_members;
	if ((se->rw = rewrite_ctx_new(max_depth, max_members)) == NULL ||
	    (se->fast = stream_fast_new()) == NULL ||
	    (se->sse = sse_parser_new(max_event)) == NULL ||
	    (se->lines = ndjson_parser_new(NDJSON_LINES, max_event)) == NULL ||
	    (se->seq = ndjson_parser_new(NDJSON_SEQ, max_event)) == NULL) {
		stream_events_free(se);
		return NULL;
	}
	sse_parser_data_line(se->sse, stream_events_sse_line);
	return se;
}

void
stream_events_free(struct stream_events *se)
{
	if (se == NULL)
		return;
	rewrite_ctx_free(se->rw);
	sse_parser_free(se->sse);
	ndjson_parser_free(se->lines);
	ndjson_parser_free(se->seq);
	stream_fast_free(se->fast);
	free(se->obuf);
	free(se);
}

void
stream_events_start(struct stream_events *se, enum stream_events_format format,
    const struct rewrite_program *prog, enum validate_mode mode,
    const struct rewrite_vars *vars)
{
	se->format = format;
	se->prog = prog;
	se->mode = mode;
	se->vars = vars;
	memset(&se->counts, 0, sizeof(se->counts));
	se->fast_events = 0;
	se->olen = 0;
	stream_fast_plan(se->fast, prog, mode, se->rw, vars);
	sse_parser_reset(se->sse);
	ndjson_parser_reset(se->lines);
	ndjson_parser_reset(se->seq);
}

/* Output goes into the batch; a large piece goes on by itself, after it. */
static int
stream_events_flush(struct stream_events *se)
{
	size_t n = se->olen;
	char *p = se->obuf;

	if (n == 0)
		return 0;
	se->olen = 0;
	if (se->take == NULL)
		return se->write(se->arg, p, n);
	se->obuf = NULL;                /* the taker's now; the next batch gets another */
	se->ocap = 0;
	return se->take(se->arg, p, n);
}

static int
stream_events_out(void *arg, const char *p, size_t len)
{
	struct stream_events *se = arg;
	int r;

	if (len == 0)
		return 0;       /* nothing to add, and obuf may not exist yet */
	if (len >= STREAM_EVENTS_PIECE) {
		if ((r = stream_events_flush(se)) != 0)
			return r;
		return se->write(se->arg, p, len);
	}
	if (se->olen + len > se->ocap && grow_array(&se->obuf, &se->ocap, se->olen + len, 1,
	    STREAM_EVENTS_BATCH + STREAM_EVENTS_PIECE) != 0)
		return -1;
	memcpy(se->obuf + se->olen, p, len);
	se->olen += len;
	return 0;
}

/* After an event: a full batch goes on. */
static int
stream_events_batch(struct stream_events *se, int r)
{
	if (r == 0 && se->olen >= STREAM_EVENTS_BATCH)
		r = stream_events_flush(se);
	return r;
}

/* The ops on one event's JSON: rewritten, spans in *rr, by the engine (1) or the fast path
 * (2); else (0) it passes. */
static int
stream_events_apply(struct stream_events *se, const char *json, size_t len,
    struct rewrite_result *rr)
{
	int r = -2, fast = 0;

	if (!se->fast_off && (r = stream_fast_apply(se->fast, json, len,
	    se->max_depth, se->max_members, &rr->spans, &rr->nspans)) != -2) {
		se->fast_events++;
		fast = 1;
	}
	if (r == -2)
		r = stream_event_apply(se->rw, se->prog, se->mode, json, len, se->vars, rr);
	if (r > 0) {
		se->counts.rewritten++;
		return fast ? 2 : 1;
	}
	se->counts.passed++;
	se->counts.failed += r < 0;
	return 0;
}

/* Copy n bytes: most pieces of an edited event are a few bytes long (a brace, a comma, a
 * key), where a library call would cost more than the copy. */
static inline char *
stream_events_copy(char *o, const char *p, size_t n)
{
	uint64_t a, b;
	uint32_t c, d;

	if (n >= 8 && n <= 16) {
		memcpy(&a, p, 8);
		memcpy(&b, p + n - 8, 8);
		memcpy(o, &a, 8);
		memcpy(o + n - 8, &b, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(&c, p, 4);
		memcpy(&d, p + n - 4, 4);
		memcpy(o, &c, 4);
		memcpy(o + n - 4, &d, 4);
	} else if (n < 4) {
		while (n-- > 0)
			*o++ = *p++;
		return o;
	} else {
		memcpy(o, p, n);
	}
	return o + n;
}

/*
 * An event of one data line that the fast path rewrote: its bytes up to the value
 * (raw[0..a)), the new value, its bytes from the line end on (raw[b..len)), as
 * sse_event_write writes them.  Nothing in the new value ends a line: the input's spans lie
 * in a line, the program's keys have no escapes and the values no CR or LF (else
 * sse_event_write).
 */
static int
stream_events_sse_direct(struct stream_events *se, const char *raw, size_t a, size_t b,
    size_t len, const struct rewrite_span *spans, size_t n)
{
	size_t need, i;
	char *o;

	need = a + (len - b);
	for (i = 0; i < n; i++)
		need += spans[i].len;
	if (se->olen + need > se->ocap && grow_array(&se->obuf, &se->ocap, se->olen + need, 1,
	    STREAM_EVENTS_BATCH + STREAM_EVENTS_PIECE) != 0)
		return -1;
	o = se->obuf + se->olen;
	o = stream_events_copy(o, raw, a);
	for (i = 0; i < n; i++)
		o = stream_events_copy(o, spans[i].p, spans[i].len);
	stream_events_copy(o, raw + b, len - b);
	se->olen += need;
	return 0;
}

/*
 * The parser's hook for an event that is one data line (sse_data_line_fn): the fast walk
 * reads the object from the value on and finds where it ends in the same pass, so the line
 * end is not sought first; what follows must be the LF of the line and the blank line's.
 * Anything else (not an object, an object the walk leaves to the engine, another line
 * after it, the chunk's end) is left to the parser, which gives the event to
 * stream_events_sse_cb as before: the same bytes either way.
 */
static int
stream_events_sse_line(void *arg, const char *raw, size_t value, size_t avail, size_t *taken)
{
	struct stream_events *se = arg;
	const struct rewrite_span *spans;
	size_t ns, end;
	int r;

	if (se->fast_off)
		return 0;
	r = stream_fast_apply_line(se->fast, raw + value, avail - value, se->max_depth,
	    se->max_members, &spans, &ns, &end);
	if (r == -2)
		return 0;
	end += value;
	if (avail - end < 2 || raw[end] != '\n' || raw[end + 1] != '\n')
		return 0;
	*taken = end + 2;
	se->fast_events++;
	if (r == 0) {
		se->counts.passed++;
		return stream_events_batch(se, stream_events_out(se, raw, end + 2));
	}
	se->counts.rewritten++;
	return stream_events_batch(se, stream_events_sse_direct(se, raw, value, end, end + 2,
	    spans, ns));
}

static int
stream_events_sse_cb(void *arg, const struct sse_event *ev)
{
	struct stream_events *se = arg;
	struct rewrite_result rr;
	int r;

	if (ev->kind == SSE_OVER && ev->first) {
		se->counts.over++;
		se->counts.passed++;
	}
	if (ev->kind != SSE_EVENT || ev->data == NULL)
		return ev->raw_len == 0 ? 0 : stream_events_out(se, ev->raw, ev->raw_len);
	if ((r = stream_events_apply(se, ev->data, ev->data_len, &rr)) == 0)
		return stream_events_batch(se, stream_events_out(se, ev->raw, ev->raw_len));
	if (r == 2 && ev->nlines == 1 && ev->ndata == 1 && ev->lines[0].colon &&
	    !stream_fast_values_eol(se->fast))
		return stream_events_batch(se, stream_events_sse_direct(se, ev->raw,
		    ev->lines[0].off + ev->lines[0].value, ev->lines[0].off + ev->lines[0].len,
		    ev->raw_len, rr.spans, rr.nspans));
	r = sse_event_write(ev, rr.spans, rr.nspans, stream_events_out, se);
	rewrite_ctx_release(se->rw);
	return stream_events_batch(se, r);
}

static int
stream_events_ndjson_cb(void *arg, const struct ndjson_record *rec)
{
	struct stream_events *se = arg;
	struct rewrite_result rr;
	int r;

	if (rec->kind == NDJSON_OVER && rec->first) {
		se->counts.over++;
		se->counts.passed++;
	}
	if (rec->kind != NDJSON_RECORD)
		return rec->raw_len == 0 ? 0 : stream_events_out(se, rec->raw, rec->raw_len);
	if (!stream_events_apply(se, rec->json, rec->json_len, &rr))
		return stream_events_batch(se, stream_events_out(se, rec->raw, rec->raw_len));
	r = ndjson_record_write(rec, rr.spans, rr.nspans, stream_events_out, se);
	rewrite_ctx_release(se->rw);
	return stream_events_batch(se, r);
}

int
stream_events_feed(struct stream_events *se, const char *p, size_t n,
    stream_events_write_fn write, void *arg)
{
	int r, f;

	se->write = write;
	se->arg = arg;
	stream_fast_unready(se->fast);  /* the variables may have moved since the last feed */
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		r = sse_feed(se->sse, p, n, stream_events_sse_cb, se);
		break;
	case STREAM_EVENTS_NDJSON:
		r = ndjson_feed(se->lines, p, n, stream_events_ndjson_cb, se);
		break;
	default:
		r = ndjson_feed(se->seq, p, n, stream_events_ndjson_cb, se);
		break;
	}
	f = stream_events_flush(se);
	return r != 0 ? r : f;
}

int
stream_events_finish(struct stream_events *se, stream_events_write_fn write, void *arg)
{
	int r, f;

	se->write = write;
	se->arg = arg;
	stream_fast_unready(se->fast);
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		r = sse_finish(se->sse, stream_events_sse_cb, se);
		break;
	case STREAM_EVENTS_NDJSON:
		r = ndjson_finish(se->lines, stream_events_ndjson_cb, se);
		break;
	default:
		r = ndjson_finish(se->seq, stream_events_ndjson_cb, se);
		break;
	}
	f = stream_events_flush(se);
	return r != 0 ? r : f;
}

const struct stream_events_counts *
stream_events_counts(const struct stream_events *se)
{
	return &se->counts;
}

void
stream_events_fast(struct stream_events *se, int on)
{
	se->fast_off = !on;
}

uint64_t
stream_events_fast_events(const struct stream_events *se)
{
	return se->fast_events;
}

void
stream_events_take_batches(struct stream_events *se, stream_events_take_fn take)
{
	se->take = take;
}

uint64_t
stream_events_fast_heads(const struct stream_events *se)
{
	return stream_fast_heads(se->fast);
}
