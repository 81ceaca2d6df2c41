/*
 * Lines end with CRLF, LF or CR; a CR at the end of a chunk ends its line at once, and an LF
 * that then begins the next chunk belongs to it.  An event is referenced in the chunk while
 * it lies there whole; only an event cut by a chunk end is copied, up to the limit.
 */
#include "sse.h"
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SSE_X86 1
#include <immintrin.h>
#endif

/* Where the next LF and the next CR of a chunk are, so that neither is searched for again
 * over the same bytes: a chunk with no CR at all is searched for one once. */
struct sse_lf {
	const char *p;
	size_t n, at;
	size_t cr;                      /* the next CR at or after where it was last sought */
	size_t from;                    /* with one search for both: at is the first CR or LF
	                                 * at or after from */
};

struct sse_parser {
	size_t max_event;
	char *buf;                      /* the bytes of an event cut by a chunk end */
	size_t len, cap;
	struct sse_line *lines;
	size_t nlines, lines_cap;
	char *data;                     /* joined data of an event with several data lines */
	size_t data_cap;
	size_t line_off;                /* the current line's start in the event */
	int cr;                         /* the last byte was a CR that ended a line */
	int cr_event;                   /* ... and the event is still open (its line was not
	                                 * the blank one) */
	int over;                       /* passing an event over the limit */
	int over_blank;                 /* ... whose current line is still empty */
	int first_line;                 /* the stream's first line is still to come */
	struct sse_lf lf;
	sse_data_line_fn data_line;     /* takes one-line data events whole, or NULL */
};

struct sse_parser *
sse_parser_new(size_t max_event)
{
	struct sse_parser *sp;

	if ((sp = calloc(1, sizeof(*sp))) == NULL)
		return NULL;
	sp->max_event = max_event;
	sse_parser_reset(sp);
	return sp;
}

void
sse_parser_free(struct sse_parser *sp)
{
	if (sp == NULL)
		return;
	free(sp->buf);
	free(sp->lines);
	free(sp->data);
	free(sp);
}

void
sse_parser_reset(struct sse_parser *sp)
{
	sp->len = sp->nlines = sp->line_off = 0;
	sp->cr = sp->cr_event = sp->over = sp->over_blank = 0;
	sp->first_line = 1;
	sp->lf.p = NULL;
}

void
sse_parser_data_line(struct sse_parser *sp, sse_data_line_fn fn)
{
	sp->data_line = fn;
}

/* Offer the event at ev (avail bytes of the chunk) to the data-line hook: the bytes it took
 * (0: none), or (size_t)-1 with *r set on a stop. */
static size_t
sse_offer_data_line(struct sse_parser *sp, const char *ev, size_t avail, void *arg, int *r)
{
	size_t taken = 0;

	if (avail < 7 || memcmp(ev, "data:", 5) != 0)
		return 0;
	if (avail - 1 > sp->max_event)
		avail = sp->max_event + 1;
	if ((*r = sp->data_line(arg, ev, 5 + (ev[5] == ' '), avail, &taken)) != 0)
		return (size_t)-1;
	return taken;
}

/* Record the line ev[off..off+len) ended by term bytes. */
static int
sse_line_add(struct sse_parser *sp, const char *ev, size_t off, size_t len, unsigned term)
{
	struct sse_line *l;
	const char *s = ev + off, *colon;
	size_t name;

	if (grow_array(&sp->lines, &sp->lines_cap, sp->nlines + 1, sizeof(*l), 64) != 0)
		return -1;
	l = &sp->lines[sp->nlines++];
	if (sp->first_line && len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) {
		/* A byte order mark opens the stream: the rules skip it. */
		s += 3;
		off += 3;
		len -= 3;
	}
	sp->first_line = 0;
	l->off = off;
	l->len = len;
	l->term = (unsigned char)term;
	l->colon = 0;
	l->value = len;
	if (len > 0 && s[0] == ':') {
		l->kind = SSE_LINE_COMMENT;
		return 0;
	}
	if ((colon = memchr(s, ':', len)) != NULL) {
		name = (size_t)(colon - s);
		l->colon = 1;
		l->value = name + 1 + (name + 1 < len && s[name + 1] == ' ');
	} else
		name = len;
#define SSE_NAME(lit) (name == sizeof(lit) - 1 && memcmp(s, lit, name) == 0)
	if (SSE_NAME("data"))
		l->kind = SSE_LINE_DATA;
	else if (SSE_NAME("event"))
		l->kind = SSE_LINE_EVENT;
	else if (SSE_NAME("id"))
		l->kind = SSE_LINE_ID;
	else if (SSE_NAME("retry"))
		l->kind = SSE_LINE_RETRY;
	else
		l->kind = SSE_LINE_OTHER;
#undef SSE_NAME
	return 0;
}

/* Hand on the event raw[0..len) whose lines are recorded. */
static int
sse_dispatch(struct sse_parser *sp, const char *raw, size_t len, sse_cb cb, void *arg)
{
	struct sse_event ev = { .kind = SSE_EVENT, .raw = raw, .raw_len = len };
	const struct sse_line *l;
	size_t i, n, at = 0;

	ev.lines = sp->lines;
	ev.nlines = sp->nlines;
	for (i = 0; i < sp->nlines; i++) {
		l = &sp->lines[i];
		if (l->kind != SSE_LINE_DATA)
			continue;
		if (ev.ndata++ == 0) {
			ev.data = raw + l->off + l->value;
			ev.data_len = l->len - l->value;
			continue;
		}
		if (ev.ndata == 2) {
			/* Several data lines: joined in the parser's own buffer (never larger than
			 * the event). */
			if (grow_array(&sp->data, &sp->data_cap, len, 1, 64) != 0)
				return -1;
			memmove(sp->data, ev.data, ev.data_len);
			ev.data = sp->data;
			at = ev.data_len;
		}
		n = l->len - l->value;
		sp->data[at++] = '\n';
		memcpy(sp->data + at, raw + l->off + l->value, n);
		at += n;
		ev.data_len = at;
	}
	sp->nlines = 0;
	sp->line_off = 0;
	sp->len = 0;
	sp->first_line = 0;
	return cb(arg, &ev);
}

static int
sse_over_piece(sse_cb cb, void *arg, const char *p, size_t len, int first, int last)
{
	struct sse_event ev = { .kind = SSE_OVER, .raw = p, .raw_len = len, .first = first,
	    .last = last };

	if (len == 0 && !first && !last)
		return 0;
	return cb(arg, &ev);
}

static int
sse_raw(sse_cb cb, void *arg, const char *p, size_t len)
{
	struct sse_event ev = { .kind = SSE_RAW, .raw = p, .raw_len = len };

	return len == 0 ? 0 : cb(arg, &ev);
}

/* Find the first CR or LF in p[i..n), n if none: LF first, then a CR before it (most
 * streams end lines with LF alone, and memchr is fast). */
static size_t
sse_eol_cached(struct sse_lf *c, const char *p, size_t i, size_t n)
{
	const char *lf, *cr;
	size_t end;

	if (c == NULL) {
		lf = memchr(p + i, '\n', n - i);
		end = lf != NULL ? (size_t)(lf - p) : n;
		cr = memchr(p + i, '\r', end - i);
		return cr != NULL ? (size_t)(cr - p) : end;
	}
	if (c->p != p || c->n != n) {
		c->p = p;
		c->n = n;
		c->at = c->cr = 0;
	}
	if (c->at < i || c->at == 0) {
		lf = memchr(p + i, '\n', n - i);
		c->at = lf != NULL ? (size_t)(lf - p) : n;
	}
	if (c->cr < i || c->cr == 0) {
		cr = memchr(p + i, '\r', n - i);
		c->cr = cr != NULL ? (size_t)(cr - p) : n;
	}
	return c->cr < c->at ? c->cr : c->at;
}

#ifdef SSE_X86
/* The first CR or LF of p[0..n), n if none, in one pass: 64 bytes a step, the last ones by
 * a masked load (which reads nothing past them). */
__attribute__((target("avx512f,avx512bw,bmi")))
static size_t
sse_eol_avx512(const char *p, size_t n)
{
	const __m512i lf = _mm512_set1_epi8('\n'), cr = _mm512_set1_epi8('\r');
	__m512i x;
	uint64_t m;
	size_t i;

	for (i = 0; i + 64 <= n; i += 64) {
		x = _mm512_loadu_si512((const void *)(p + i));
		m = _mm512_cmpeq_epi8_mask(x, lf) | _mm512_cmpeq_epi8_mask(x, cr);
		if (m != 0)
			return i + (size_t)__builtin_ctzll(m);
	}
	if (i < n) {
		x = _mm512_maskz_loadu_epi8((__mmask64)((1ULL << (n - i)) - 1), (const void *)(p + i));
		m = _mm512_cmpeq_epi8_mask(x, lf) | _mm512_cmpeq_epi8_mask(x, cr);
		if (m != 0)
			return i + (size_t)__builtin_ctzll(m);
	}
	return n;
}
#endif

/* 1: line ends are sought with sse_eol_avx512, 0: with memchr, -1: not chosen yet. */
static int sse_simd = -1;

void
sse_parser_simd(int on)
{
#ifdef SSE_X86
	if (on && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("bmi")))
		on = 0;
#else
	on = 0;
#endif
	__atomic_store_n(&sse_simd, on, __ATOMIC_RELAXED);
}

static size_t
sse_eol(struct sse_parser *sp, const char *p, size_t i, size_t n)
{
	struct sse_lf *c = &sp->lf;
	int simd = __atomic_load_n(&sse_simd, __ATOMIC_RELAXED);

	if (simd < 0) {
		sse_parser_simd(1);
		simd = __atomic_load_n(&sse_simd, __ATOMIC_RELAXED);
	}
#ifdef SSE_X86
	if (simd) {
		if (c->p == p && c->n == n && c->from <= i && i <= c->at)
			return c->at;   /* nothing between from and at: asked again */
		c->p = p;
		c->n = n;
		c->from = i;
		c->at = i + sse_eol_avx512(p + i, n - i);
		return c->at;
	}
#endif
	return sse_eol_cached(c, p, i, n);
}

/* Go on with an event over the limit from p[i]; returns where the next event starts
 * (n when it goes on past the chunk), or (size_t)-1 with *r set on a stop. */
static size_t
sse_feed_over(struct sse_parser *sp, const char *p, size_t i, size_t n, sse_cb cb, void *arg,
    int *r)
{
	size_t start = i, j;

	while (i < n) {
		j = sse_eol(sp, p, i, n);
		if (j == n) {
			sp->over_blank = 0;
			break;
		}
		if (j > i)
			sp->over_blank = 0;
		i = j + 1;
		if (p[j] == '\r') {
			if (i < n && p[i] == '\n')
				i++;
			else if (i == n)
				sp->cr = 1;
		}
		if (sp->over_blank) {
			/* The blank line: the event ends here. */
			sp->over = 0;
			sp->cr_event = 0;
			if ((*r = sse_over_piece(cb, arg, p + start, i - start, 0, 1)) != 0)
				return (size_t)-1;
			sp->first_line = 0;
			return i;
		}
		sp->over_blank = 1;
		sp->cr_event = 1;
	}
	if ((*r = sse_over_piece(cb, arg, p + start, n - start, 0, 0)) != 0)
		return (size_t)-1;
	return n;
}

/* The event grew past the limit: pass on what it holds and go on passing it. */
static int
sse_go_over(struct sse_parser *sp, const char *ev, size_t evlen, int line_empty, sse_cb cb,
    void *arg)
{
	sp->over = 1;
	sp->over_blank = line_empty;
	sp->nlines = 0;
	sp->line_off = 0;
	sp->len = 0;
	return sse_over_piece(cb, arg, ev, evlen, 1, 0);
}

int
sse_feed(struct sse_parser *sp, const char *p, size_t n, sse_cb cb, void *arg)
{
	size_t i = 0, ev0 = 0, j, evlen, lstart;
	const char *ev;
	unsigned term;
	int r = 0;

	if (n == 0)
		return 0;
	sp->lf.p = NULL;                /* a new chunk, maybe in the same memory */
	if (sp->cr) {
		sp->cr = 0;
		if (p[0] == '\n') {
			if (sp->over && sp->cr_event) {
				/* Part of the passing event's line end. */
				if ((r = sse_over_piece(cb, arg, p, 1, 0, 0)) != 0)
					return r;
				i = ev0 = 1;
			} else if (sp->over || !sp->cr_event) {
				/* The LF of the CRLF that ended the last event. */
				if ((r = sse_raw(cb, arg, p, 1)) != 0)
					return r;
				i = ev0 = 1;
			} else {
				/* The LF of the line end the event's last line got. */
				sp->lines[sp->nlines - 1].term = 2;
				sp->line_off++;
				i = 1;
			}
		}
	}
	for (;;) {
		if (sp->over) {
			if ((i = sse_feed_over(sp, p, i, n, cb, arg, &r)) == (size_t)-1)
				return r;
			ev0 = i;
			if (i >= n)
				return 0;
		}
		/* The event so far: in buf when it began in an earlier chunk, else in p. */
		if (sp->len > 0) {
			j = sse_eol(sp, p, i, n);
			if (j == n) {
				evlen = sp->len + (n - ev0);
				if (evlen > sp->max_event) {
					if (sse_over_piece(cb, arg, sp->buf, sp->len, 1, 0) != 0 ||
					    (r = sse_over_piece(cb, arg, p + ev0, n - ev0, 0, 0)) != 0)
						return r != 0 ? r : -1;
					sp->over = 1;
					sp->over_blank = sp->line_off == evlen;
					sp->nlines = sp->line_off = sp->len = 0;
					return 0;
				}
				if (grow_array(&sp->buf, &sp->cap, evlen, 1, 64) != 0)
					return -1;
				memcpy(sp->buf + sp->len, p + ev0, n - ev0);
				sp->len = evlen;
				return 0;
			}
			/* Take this chunk's bytes up to the line end into buf. */
			term = 1 + (p[j] == '\r' && j + 1 < n && p[j + 1] == '\n');
			evlen = sp->len + (j + term - ev0);
			if (evlen - term > sp->max_event) {
				int blank = sp->line_off == sp->len + (j - ev0);

				if ((r = sse_over_piece(cb, arg, sp->buf, sp->len, 1, 0)) != 0)
					return r;
				sp->over = 1;
				sp->over_blank = blank;
				sp->nlines = sp->line_off = sp->len = 0;
				/* Resume in over mode at this line's end. */
				if ((r = sse_over_piece(cb, arg, p + ev0, j - ev0, 0, 0)) != 0)
					return r;
				i = ev0 = j;
				sp->over_blank = blank;
				continue;
			}
			if (grow_array(&sp->buf, &sp->cap, evlen, 1, 64) != 0)
				return -1;
			memcpy(sp->buf + sp->len, p + ev0, j + term - ev0);
			lstart = sp->line_off;
			sp->len = evlen;
			i = ev0 = j + term;
			if (p[j] == '\r' && term == 1 && i == n)
				sp->cr = 1;
			if (evlen - term == lstart) {
				sp->cr_event = 0;
				if ((r = sse_dispatch(sp, sp->buf, evlen, cb, arg)) != 0)
					return r;
				continue;
			}
			if (sse_line_add(sp, sp->buf, lstart, evlen - term - lstart, term) != 0)
				return -1;
			sp->line_off = evlen;
			sp->cr_event = 1;
			continue;
		}
		/* An event that begins in this chunk: its lines are found in place. */
		ev = p + ev0;
		while (i < n) {
			if (i == ev0 && sp->data_line != NULL && sp->nlines == 0 && !sp->first_line) {
				if ((j = sse_offer_data_line(sp, ev, n - ev0, arg, &r)) == (size_t)-1)
					return r;
				if (j > 0) {
					i = ev0 = ev0 + j;
					ev = p + ev0;
					continue;
				}
			}
			j = sse_eol(sp, p, i, n);
			if (j == n)
				break;
			term = 1 + (p[j] == '\r' && j + 1 < n && p[j + 1] == '\n');
			if (j - ev0 > sp->max_event)
				break;
			lstart = sp->line_off;
			i = j + term;
			if (p[j] == '\r' && term == 1 && i == n)
				sp->cr = 1;
			if (j - ev0 == lstart) {
				sp->cr_event = 0;
				if ((r = sse_dispatch(sp, ev, i - ev0, cb, arg)) != 0)
					return r;
				ev0 = i;
				ev = p + ev0;
				continue;
			}
			if (sse_line_add(sp, ev, lstart, j - ev0 - lstart, term) != 0)
				return -1;
			sp->line_off = i - ev0;
			sp->cr_event = 1;
		}
		if (ev0 == n)
			return 0;
		j = sse_eol(sp, p, i, n);
		if (j < n || n - ev0 > sp->max_event) {
			/* Over the limit: what came of it goes on now, the rest as it comes. */
			int blank = sp->line_off == j - ev0;

			if ((r = sse_go_over(sp, ev, j - ev0, blank, cb, arg)) != 0)
				return r;
			i = ev0 = j;
			if (i >= n)
				return 0;
			continue;
		}
		/* The chunk ends inside the event: keep it for the next chunk. */
		if (grow_array(&sp->buf, &sp->cap, n - ev0, 1, 64) != 0)
			return -1;
		memcpy(sp->buf, ev, n - ev0);
		sp->len = n - ev0;
		return 0;
	}
}

int
sse_finish(struct sse_parser *sp, sse_cb cb, void *arg)
{
	int r = 0;

	if (sp->over)
		r = sse_over_piece(cb, arg, "", 0, 0, 1);
	else if (sp->len > 0)
		r = sse_raw(cb, arg, sp->buf, sp->len);
	sse_parser_reset(sp);
	return r;
}

/* The first CR or LF of p[0..n), n if none: a short span (a key, a set value) by a loop. */
static size_t
sse_eol_span(const char *p, size_t n)
{
	size_t i;

	if (n >= 64)
		return sse_eol_cached(NULL, p, 0, n);
	for (i = 0; i < n && p[i] != '\r' && p[i] != '\n'; i++)
		continue;
	return i;
}

/* The spans, each CR, LF or CRLF in them starting a new data line.  A span of the value of
 * the event's one data line has none: a line holds no line end. */
static int
sse_write_data(const struct sse_event *ev, const struct rewrite_span *data, size_t n,
    const char *prefix, size_t plen, const char *term, size_t tlen, sse_write_fn write,
    void *arg)
{
	const char *p, *e, *q;
	int r, cr = 0;
	size_t i;

	if ((r = write(arg, prefix, plen)) != 0)
		return r;
	for (i = 0; i < n; i++) {
		p = data[i].p;
		e = p + data[i].len;
		if (ev->ndata == 1 && p >= ev->data && e <= ev->data + ev->data_len) {
			if (p == e)
				continue;
			if ((r = write(arg, p, data[i].len)) != 0)
				return r;
			cr = 0;
			continue;
		}
		while (p < e) {
			if (cr && *p == '\n') {
				p++;            /* the LF of a CRLF already written */
				cr = 0;
				continue;
			}
			cr = 0;
			q = p + sse_eol_span(p, (size_t)(e - p));
			if (q > p && (r = write(arg, p, (size_t)(q - p))) != 0)
				return r;
			if (q == e)
				break;
			cr = *q == '\r';
			if ((r = write(arg, term, tlen)) != 0 || (r = write(arg, prefix, plen)) != 0)
				return r;
			p = q + 1;
		}
	}
	return write(arg, term, tlen);
}

int
sse_event_write(const struct sse_event *ev, const struct rewrite_span *data, size_t n,
    sse_write_fn write, void *arg)
{
	const struct sse_line *l;
	size_t i, end;
	int r, done = 0;

	if (ev->nlines == 0)
		return write(arg, ev->raw, ev->raw_len);
	if ((r = write(arg, ev->raw, ev->lines[0].off)) != 0)
		return r;
	for (i = 0; i < ev->nlines; i++) {
		l = &ev->lines[i];
		if (l->kind != SSE_LINE_DATA) {
			if ((r = write(arg, ev->raw + l->off, l->len + l->term)) != 0)
				return r;
			continue;
		}
		if (done++)
			continue;
		if ((r = sse_write_data(ev, data, n, l->colon ? ev->raw + l->off : "data:",
		    l->colon ? l->value : 5, ev->raw + l->off + l->len, l->term, write, arg)) != 0)
			return r;
	}
	l = &ev->lines[ev->nlines - 1];
	end = l->off + l->len + l->term;
	return write(arg, ev->raw + end, ev->raw_len - end);
}
