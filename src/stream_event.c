/* Envelope ops per event: the buffered engine on each event, the parsers in sse.c and
 * ndjson.c around it. */
#include "stream_event.h"
#include "ndjson.h"
#include "sse.h"

#include <stdlib.h>
#include <string.h>

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
	struct sse_parser *sse;
	struct ndjson_parser *lines, *seq;
	const struct rewrite_program *prog;
	enum validate_mode mode;
	const struct rewrite_vars *vars;
	struct stream_events_counts counts;
	stream_events_write_fn write;
	void *arg;
};

struct stream_events *
stream_events_new(size_t max_event, unsigned max_depth, size_t max_members)
{
	struct stream_events *se;

	if ((se = calloc(1, sizeof(*se))) == NULL)
		return NULL;
	if ((se->rw = rewrite_ctx_new(max_depth, max_members)) == NULL ||
	    (se->sse = sse_parser_new(max_event)) == NULL ||
	    (se->lines = ndjson_parser_new(NDJSON_LINES, max_event)) == NULL ||
	    (se->seq = ndjson_parser_new(NDJSON_SEQ, max_event)) == NULL) {
		stream_events_free(se);
		return NULL;
	}
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
	sse_parser_reset(se->sse);
	ndjson_parser_reset(se->lines);
	ndjson_parser_reset(se->seq);
}

/* The ops on one event's JSON: 1 rewritten (spans in *rr), else it passes. */
static int
stream_events_apply(struct stream_events *se, const char *json, size_t len,
    struct rewrite_result *rr)
{
	int r = stream_event_apply(se->rw, se->prog, se->mode, json, len, se->vars, rr);

	if (r > 0) {
		se->counts.rewritten++;
		return 1;
	}
	se->counts.passed++;
	se->counts.failed += r < 0;
	return 0;
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
		return ev->raw_len == 0 ? 0 : se->write(se->arg, ev->raw, ev->raw_len);
	if (!stream_events_apply(se, ev->data, ev->data_len, &rr))
		return se->write(se->arg, ev->raw, ev->raw_len);
	r = sse_event_write(ev, rr.spans, rr.nspans, se->write, se->arg);
	rewrite_ctx_release(se->rw);
	return r;
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
		return rec->raw_len == 0 ? 0 : se->write(se->arg, rec->raw, rec->raw_len);
	if (!stream_events_apply(se, rec->json, rec->json_len, &rr))
		return se->write(se->arg, rec->raw, rec->raw_len);
	r = ndjson_record_write(rec, rr.spans, rr.nspans, se->write, se->arg);
	rewrite_ctx_release(se->rw);
	return r;
}

int
stream_events_feed(struct stream_events *se, const char *p, size_t n,
    stream_events_write_fn write, void *arg)
{
	se->write = write;
	se->arg = arg;
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		return sse_feed(se->sse, p, n, stream_events_sse_cb, se);
	case STREAM_EVENTS_NDJSON:
		return ndjson_feed(se->lines, p, n, stream_events_ndjson_cb, se);
	default:
		return ndjson_feed(se->seq, p, n, stream_events_ndjson_cb, se);
	}
}

int
stream_events_finish(struct stream_events *se, stream_events_write_fn write, void *arg)
{
	se->write = write;
	se->arg = arg;
	switch (se->format) {
	case STREAM_EVENTS_SSE:
		return sse_finish(se->sse, stream_events_sse_cb, se);
	case STREAM_EVENTS_NDJSON:
		return ndjson_finish(se->lines, stream_events_ndjson_cb, se);
	default:
		return ndjson_finish(se->seq, stream_events_ndjson_cb, se);
	}
}

const struct stream_events_counts *
stream_events_counts(const struct stream_events *se)
{
	return &se->counts;
}
