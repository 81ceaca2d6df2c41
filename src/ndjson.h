/*
 * An incremental record splitter for newline-delimited JSON (NDJSON, JSON Lines: one text a
 * line) and JSON text sequences (application/json-seq, RFC 7464: each text after an RS byte,
 * followed by LF, a text possibly over several lines).  Fed chunks cut anywhere, it hands on
 * each record once complete, with its bytes as received and the span of its JSON text.  A
 * record over the size limit is never held: its bytes go on as they come, marked over the
 * limit.  The buffers are reused from record to record.
 */
#ifndef JG_NDJSON_H
#define JG_NDJSON_H

#include <stddef.h>

#include "rewrite.h"

enum ndjson_format {
	NDJSON_LINES,                   /* application/x-ndjson, application/jsonl */
	NDJSON_SEQ                      /* application/json-seq */
};

enum ndjson_kind {
	NDJSON_RECORD,                  /* a whole record (a line, blank ones too) */
	NDJSON_OVER,                    /* a piece of a record over the limit: pass it on */
	NDJSON_RAW                      /* bytes outside records (json-seq): pass them on */
};

struct ndjson_record {
	enum ndjson_kind kind;
	const char *raw;                /* the bytes as received */
	size_t raw_len;
	/* NDJSON_RECORD: the JSON text inside raw, without the RS before it and the line end
	 * (LF, or CRLF for lines) after it */
	const char *json;
	size_t json_len;
	/* NDJSON_OVER: */
	int first;                      /* the first piece of this record: count it once */
	int last;                       /* the piece that ends it */
};

struct ndjson_parser;

/* Called for each record or piece; a nonzero return stops the feed with that value. */
typedef int (*ndjson_cb)(void *arg, const struct ndjson_record *rec);

/* A splitter holding records of up to max_record bytes, RS and line end included. */
struct ndjson_parser *ndjson_parser_new(enum ndjson_format format, size_t max_record);
void ndjson_parser_free(struct ndjson_parser *np);
/* Start a new stream, keeping the buffers. */
void ndjson_parser_reset(struct ndjson_parser *np);

/* Split p[0..n).  Returns 0, -1 when out of memory, or what cb returned. */
int ndjson_feed(struct ndjson_parser *np, const char *p, size_t n, ndjson_cb cb, void *arg);
/* The stream has ended: a last line without its LF is a record; a json-seq text cut short is
 * one too (its ops will not apply to it). */
int ndjson_finish(struct ndjson_parser *np, ndjson_cb cb, void *arg);

typedef int (*ndjson_write_fn)(void *arg, const char *p, size_t len);

/* Write the NDJSON_RECORD rec with new JSON text (the spans) in place of its own: its RS and
 * line end kept.  Returns 0 or what write returned. */
int ndjson_record_write(const struct ndjson_record *rec, const struct rewrite_span *json,
    size_t n, ndjson_write_fn write, void *arg);

#endif
