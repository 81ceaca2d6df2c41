/*
 * A line ends at LF.  A json-seq record ends at the LF that follows a complete text (the
 * nesting back at zero outside a string), so that a one-line record goes on at once; an RS
 * before that ends it cut short.  A record is referenced in the chunk while it lies there
 * whole; only one cut by a chunk end is copied, up to the limit.
 */
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

#define NDJSON_RS '\x1e'

struct ndjson_parser {
	enum ndjson_format format;
	size_t max_record;
	char *buf;                      /* a record cut by a chunk end */
	size_t len, cap;
	int in_rec;                     /* json-seq: inside a record (its RS seen) */
	int over;                       /* passing a record over the limit */
	/* json-seq text state */
	unsigned long depth;
	int in_str, esc, seen;
};

struct ndjson_parser *
ndjson_parser_new(enum ndjson_format format, size_t max_record)
{
	struct ndjson_parser *np;

	if ((np = calloc(1, sizeof(*np))) == NULL)
		return NULL;
	np->format = format;
	np->max_record = max_record;
	return np;
}

void
ndjson_parser_free(struct ndjson_parser *np)
{
	if (np == NULL)
		return;
	free(np->buf);
	free(np);
}

void
ndjson_parser_reset(struct ndjson_parser *np)
{
	np->len = 0;
	np->in_rec = np->over = 0;
	np->depth = 0;
	np->in_str = np->esc = np->seen = 0;
}

/*
 * Where the record that goes on at p[i] ends: one past its LF, or the offset of an RS that
 * cuts it short (*cut 1); *done says whether it ends in the chunk (else n).
 */
static size_t
ndjson_end(struct ndjson_parser *np, const char *p, size_t i, size_t n, int *cut, int *done)
{
	const char *q;
	unsigned char c;

	*cut = 0;
	*done = 1;
	if (np->format == NDJSON_LINES) {
		if ((q = memchr(p + i, '\n', n - i)) != NULL)
			return (size_t)(q - p) + 1;
		*done = 0;
		return n;
	}
	for (; i < n; i++) {
		c = (unsigned char)p[i];
		if (c == NDJSON_RS) {
			*cut = 1;
			return i;
		}
		if (np->esc) {
			np->esc = 0;
			continue;
		}
		if (np->in_str) {
			if (c == '\\')
				np->esc = 1;
			else if (c == '"')
				np->in_str = 0;
			continue;
		}
		switch (c) {
		case '\n':
			if (np->seen && np->depth == 0)
				return i + 1;
			break;
		case ' ': case '\t': case '\r':
			break;
		case '"':
			np->in_str = 1;
			np->seen = 1;
			break;
		case '{': case '[':
			np->depth++;
			np->seen = 1;
			break;
		case '}': case ']':
			if (np->depth > 0)
				np->depth--;
			np->seen = 1;
			break;
		default:
			np->seen = 1;
		}
	}
	*done = 0;
	return n;
}

static int
ndjson_deliver(struct ndjson_parser *np, const char *raw, size_t len, int cut, ndjson_cb cb,
    void *arg)
{
	struct ndjson_record rec = { .kind = NDJSON_RECORD, .raw = raw, .raw_len = len };
	size_t lead = 0, tail = 0;

	if (np->format == NDJSON_SEQ) {
		lead = len > 0 && raw[0] == NDJSON_RS;
		tail = !cut && len > lead && raw[len - 1] == '\n';
	} else if (len > 0 && raw[len - 1] == '\n') {
		tail = 1 + (len > 1 && raw[len - 2] == '\r');
	}
	rec.json = raw + lead;
	rec.json_len = len - lead - tail;
	np->len = 0;
	np->in_rec = 0;
	np->depth = 0;
	np->in_str = np->esc = np->seen = 0;
	return cb(arg, &rec);
}

static int
ndjson_piece(ndjson_cb cb, void *arg, enum ndjson_kind kind, const char *p, size_t len,
    int first, int last)
{
	struct ndjson_record rec = { .kind = kind, .raw = p, .raw_len = len, .first = first,
	    .last = last };

	if (len == 0 && !first && !last)
		return 0;
	return cb(arg, &rec);
}

static int
ndjson_grow(struct ndjson_parser *np, size_t need)
{
	size_t n = np->cap ? np->cap : 256;
	char *p;

	if (need <= np->cap)
		return 0;
	while (n < need)
		n *= 2;
	if ((p = realloc(np->buf, n)) == NULL)
		return -1;
	np->buf = p;
	np->cap = n;
	return 0;
}

int
ndjson_feed(struct ndjson_parser *np, const char *p, size_t n, ndjson_cb cb, void *arg)
{
	size_t i = 0, e;
	const char *q;
	int cut, done, r;

	while (i < n) {
		if (np->format == NDJSON_SEQ && !np->in_rec && !np->over) {
			/* Outside records: up to the next RS the bytes are no one's. */
			q = memchr(p + i, NDJSON_RS, n - i);
			e = q == NULL ? n : (size_t)(q - p);
			if ((r = ndjson_piece(cb, arg, NDJSON_RAW, p + i, e - i, 0, 0)) != 0)
				return r;
			if (e == n)
				return 0;
			np->in_rec = 1;
			/* The RS is the record's first byte: scanning starts after it. */
			e = ndjson_end(np, p, e + 1, n, &cut, &done);
			i = (size_t)(q - p);
		} else
			e = ndjson_end(np, p, i, n, &cut, &done);
		if (np->over) {
			if ((r = ndjson_piece(cb, arg, NDJSON_OVER, p + i, e - i, 0, done)) != 0)
				return r;
			if (done) {
				np->over = 0;
				np->in_rec = 0;
				np->depth = 0;
				np->in_str = np->esc = np->seen = 0;
			}
			i = e;
			continue;
		}
		if (done) {
			if (np->len == 0) {
				if (e - i <= np->max_record) {
					if ((r = ndjson_deliver(np, p + i, e - i, cut, cb, arg)) != 0)
						return r;
					i = e;
					continue;
				}
			} else if (np->len + (e - i) <= np->max_record) {
				if (ndjson_grow(np, np->len + (e - i)) != 0)
					return -1;
				memcpy(np->buf + np->len, p + i, e - i);
				if ((r = ndjson_deliver(np, np->buf, np->len + (e - i), cut, cb, arg)) != 0)
					return r;
				i = e;
				continue;
			}
			/* Complete but over the limit: passed on as one. */
			if ((np->len > 0 && (r = ndjson_piece(cb, arg, NDJSON_OVER, np->buf, np->len, 1,
			    0)) != 0) || (r = ndjson_piece(cb, arg, NDJSON_OVER, p + i, e - i,
			    np->len == 0, 1)) != 0)
				return r;
			np->len = 0;
			np->in_rec = 0;
			np->depth = 0;
			np->in_str = np->esc = np->seen = 0;
			i = e;
			continue;
		}
		/* The chunk ends inside the record. */
		if (np->len + (n - i) > np->max_record) {
			if ((np->len > 0 && (r = ndjson_piece(cb, arg, NDJSON_OVER, np->buf, np->len, 1,
			    0)) != 0) || (r = ndjson_piece(cb, arg, NDJSON_OVER, p + i, n - i,
			    np->len == 0, 0)) != 0)
				return r;
			np->len = 0;
			np->over = 1;
			return 0;
		}
		if (ndjson_grow(np, np->len + (n - i)) != 0)
			return -1;
		memcpy(np->buf + np->len, p + i, n - i);
		np->len += n - i;
		return 0;
	}
	return 0;
}

int
ndjson_finish(struct ndjson_parser *np, ndjson_cb cb, void *arg)
{
	int r = 0;

	if (np->over)
		r = ndjson_piece(cb, arg, NDJSON_OVER, "", 0, 0, 1);
	else if (np->len > 0)
		r = ndjson_deliver(np, np->buf, np->len, 1, cb, arg);
	ndjson_parser_reset(np);
	return r;
}

int
ndjson_record_write(const struct ndjson_record *rec, const struct rewrite_span *json,
    size_t n, ndjson_write_fn write, void *arg)
{
	size_t i, end = (size_t)(rec->json - rec->raw) + rec->json_len;
	int r;

	if ((r = write(arg, rec->raw, (size_t)(rec->json - rec->raw))) != 0)
		return r;
	for (i = 0; i < n; i++)
		if (json[i].len > 0 && (r = write(arg, json[i].p, json[i].len)) != 0)
			return r;
	return write(arg, rec->raw + end, rec->raw_len - end);
}
