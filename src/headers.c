/*
 * Header rules of a proxied message.  Each head is written with one evbuffer reservation:
 * a first pass classifies the headers and sizes the output, a second copies.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <event2/buffer.h>

#include "headers.h"
#include "header_ops.h"

enum headers_kind {
	HK_KEEP,                /* end-to-end: forwarded unless Connection lists it */
	HK_DROP,                /* hop-by-hop, framing, or replaced by the proxy */
	HK_HOST,
	HK_XFF,
	HK_REQUEST_ID,
	HK_ETAG_WEAK                    /* a strong ETag of a body jsongate changed: W/ added */
};

#define HEADERS_MAX_LISTED 32   /* Connection tokens remembered; beyond, rescan */

/* Two names equal but for ASCII case. */
static int
headers_same_name(struct http_str a, struct http_str b)
{
	return a.len == b.len && http_ieq(a.p, b.p, a.len);
}

/* Hop-by-hop (RFC 9110 7.6.1), or framing the proxy writes itself. */
static int
headers_kind_is_hop_by_hop(enum http_name k)
{
	switch (k) {
	case HN_TE:
	case HN_TRAILER:
	case HN_UPGRADE:
	case HN_CONNECTION:
	case HN_KEEP_ALIVE:
	case HN_CONTENT_LENGTH:
	case HN_TRANSFER_ENCODING:
	case HN_PROXY:
		return 1;
	default:
		return 0;
	}
}

int
headers_is_hop_by_hop(struct http_str n)
{
	return headers_kind_is_hop_by_hop(http_name_of(n.p, n.len));
}

static enum headers_kind
headers_request_kind(const struct http_header *h)
{
	enum http_name k = http_header_kind(h);

	if (headers_kind_is_hop_by_hop(k) || k == HN_XFP)
		return HK_DROP;
	switch (k) {
	case HN_HOST:
		return HK_HOST;
	case HN_REQUEST_ID:
		return HK_REQUEST_ID;
	case HN_XFF:
		return HK_XFF;
	default:
		return HK_KEEP;
	}
}

static enum headers_kind
headers_response_kind(enum http_name k)
{
	if (headers_kind_is_hop_by_hop(k))
		return HK_DROP;
	return k == HN_REQUEST_ID ? HK_REQUEST_ID : HK_KEEP;
}

/* Names listed in Connection headers (RFC 9110 7.6.1): they are hop-by-hop too. */
struct headers_listed {
	size_t n;
	int overflow;                   /* more than HEADERS_MAX_LISTED: rescan the headers */
	const struct http_header *hs;
	size_t nhs;
	struct http_str names[HEADERS_MAX_LISTED];
};

static int
headers_connection_lists(const struct http_header *h, struct http_str name)
{
	const char *p = h->value.p, *end = p + h->value.len;
	struct http_str tok;

	do {
		p = http_list_next(p, end, &tok);
		if (headers_same_name(tok, name))
			return 1;
	} while (p != NULL);
	return 0;
}

static void
headers_listed_collect(struct headers_listed *l, const struct http_header *hs, size_t nhs,
    const struct http_framing *f)
{
	l->n = 0;
	l->overflow = 0;
	l->hs = hs;
	l->nhs = nhs;
	if (f->lists_known && !f->conn_lists)
		return;         /* the parser saw no name listed: most heads */
	for (size_t i = 0; i < nhs; i++) {
		if (http_header_kind(&hs[i]) != HN_CONNECTION)
			continue;
		const char *p = hs[i].value.p, *end = p + hs[i].value.len;
		struct http_str tok;

		do {
			p = http_list_next(p, end, &tok);
			/* The usual options name no field to drop: "close" is a reserved field
			 * name (RFC 9110 18.4) and Keep-Alive is dropped anyway. */
			if (tok.len == 0 || HTTP_IEQ(tok.p, tok.len, "close") ||
			    HTTP_IEQ(tok.p, tok.len, "keep-alive"))
				continue;
			if (l->n == HEADERS_MAX_LISTED) {
				l->overflow = 1;
				return;
			}
			l->names[l->n++] = tok;
		} while (p != NULL);
	}
}

static int
headers_listed_has(const struct headers_listed *l, struct http_str name)
{
	if (l->overflow) {
		for (size_t i = 0; i < l->nhs; i++)
			if (http_header_kind(&l->hs[i]) == HN_CONNECTION &&
			    headers_connection_lists(&l->hs[i], name))
				return 1;
		return 0;
	}
	for (size_t i = 0; i < l->n; i++)
		if (headers_same_name(l->names[i], name))
			return 1;
	return 0;
}

/* 1 when a Connection header lists name: asked of every header, mostly of a head with no
 * Connection list, so without a call then. */
static inline int
headers_is_listed(const struct headers_listed *l, struct http_str name)
{
	return l->n != 0 && headers_listed_has(l, name);
}

static inline char *
headers_put(char *w, const void *s, size_t n)
{
	memcpy(w, s, n);
	return w + n;
}

#define HEADERS_PUT_LIT(w, lit) headers_put((w), (lit), sizeof(lit) - 1)

static inline char *
headers_put_field(char *w, struct http_str name, struct http_str value)
{
	w = headers_put(w, name.p, name.len);
	*w++ = ':';
	*w++ = ' ';
	w = headers_put(w, value.p, value.len);
	*w++ = '\r';
	*w++ = '\n';
	return w;
}

/* Reserve size bytes as one extent; *vec receives it. */
static char *
headers_reserve(struct evbuffer *out, size_t size, struct evbuffer_iovec *vec)
{
	if (evbuffer_reserve_space(out, (ev_ssize_t)size, vec, 1) < 1)
		return NULL;
	return vec->iov_base;
}

static int
headers_commit(struct evbuffer *out, struct evbuffer_iovec *vec, char *start, char *w,
    size_t size)
{
	assert((size_t)(w - start) <= size);    /* the sizing pass covered every byte */
	vec->iov_len = (size_t)(w - start);
	return evbuffer_commit_space(out, vec, 1) == 0 ? 0 : -1;
}

int
headers_request_out(struct evbuffer *out, const struct http_request *req,
    const struct headers_forward *fw)
{
	unsigned char kind[HTTP_MAX_HEADERS];
	struct headers_listed listed;
	struct http_str target1, target2, host, method = fw->method.len ? fw->method : req->method;
	size_t size, nxff = 0;
	size_t n = req->nheaders < HTTP_MAX_HEADERS ? req->nheaders : HTTP_MAX_HEADERS;
	size_t clen = fw->client_addr != NULL ? strlen(fw->client_addr) : 0;
	const struct header_ops *ops = fw->ops;
	unsigned own = ops != NULL ? ops->own : 0;

	/* Without a rewritten target, send the origin-form of the received one. */
	if (fw->target.p != NULL) {
		target1 = fw->target;
		target2.p = NULL;
		target2.len = 0;
	} else {
		target1 = req->path;
		target2 = req->query;
	}
	if (fw->host_override != NULL) {
		host.p = fw->host_override;
		host.len = strlen(fw->host_override);
	} else
		host = req->host;

	size = method.len + 1 + target1.len + target2.len + sizeof(" HTTP/1.1\r\n") +
	    sizeof("Host: \r\n") + host.len;
	headers_listed_collect(&listed, req->headers, n, &req->framing);
	for (size_t i = 0; i < n; i++) {
		const struct http_header *h = &req->headers[i];

		kind[i] = (unsigned char)headers_request_kind(h);
		if (kind[i] == HK_KEEP && headers_is_listed(&listed, h->name))
			kind[i] = HK_DROP;
		if ((kind[i] == HK_KEEP && ops != NULL && header_ops_drops(ops, h->name)) ||
		    (kind[i] == HK_XFF && (own & HEADER_OPS_XFF)))
			kind[i] = HK_DROP;
		if (kind[i] == HK_KEEP)
			size += h->name.len + h->value.len + 4;
		else if (kind[i] == HK_XFF && h->value.len > 0) {
			size += h->value.len + 2;
			nxff++;
		}
	}
	if ((nxff > 0 || clen > 0) && !(own & HEADER_OPS_XFF))
		size += sizeof("X-Forwarded-For: \r\n") + clen;
	size += sizeof("X-Forwarded-Proto: https\r\n");
	if (fw->request_id.len > 0)
		size += sizeof("X-Request-Id: \r\n") + fw->request_id.len;
	if (ops != NULL)
		size += header_ops_size(ops, fw->vars);

	struct evbuffer_iovec vec;
	char *start = headers_reserve(out, size, &vec), *w = start;
	if (start == NULL)
		return -1;

	w = headers_put(w, method.p, method.len);
	*w++ = ' ';
	w = headers_put(w, target1.p, target1.len);
	if (target2.len > 0)
		w = headers_put(w, target2.p, target2.len);
	w = HEADERS_PUT_LIT(w, " HTTP/1.1\r\nHost: ");
	w = headers_put(w, host.p, host.len);
	*w++ = '\r';
	*w++ = '\n';

	for (size_t i = 0; i < n; i++) {
		const struct http_header *h = &req->headers[i];

		if (kind[i] == HK_KEEP)
			w = headers_put_field(w, h->name, h->value);
	}

	/* Every X-Forwarded-For received, in order, merged into one, then the client. */
	if ((nxff > 0 || clen > 0) && !(own & HEADER_OPS_XFF)) {
		const char *sep = "";

		w = HEADERS_PUT_LIT(w, "X-Forwarded-For: ");
		for (size_t i = 0; i < n; i++) {
			const struct http_header *h = &req->headers[i];

			if (kind[i] != HK_XFF || h->value.len == 0)
				continue;
			w = headers_put(w, sep, strlen(sep));
			w = headers_put(w, h->value.p, h->value.len);
			sep = ", ";
		}
		if (clen > 0) {
			w = headers_put(w, sep, strlen(sep));
			w = headers_put(w, fw->client_addr, clen);
		}
		*w++ = '\r';
		*w++ = '\n';
	}
	if (!(own & HEADER_OPS_XFP) && fw->tls)
		w = HEADERS_PUT_LIT(w, "X-Forwarded-Proto: https\r\n");
	else if (!(own & HEADER_OPS_XFP))
		w = HEADERS_PUT_LIT(w, "X-Forwarded-Proto: http\r\n");
	if (fw->request_id.len > 0 && !(own & HEADER_OPS_REQUEST_ID)) {
		w = HEADERS_PUT_LIT(w, "X-Request-Id: ");
		w = headers_put(w, fw->request_id.p, fw->request_id.len);
		*w++ = '\r';
		*w++ = '\n';
	}
	if (ops != NULL)
		w = header_ops_put(w, ops, fw->vars);
	return headers_commit(out, &vec, start, w, size);
}

/* ------------------------------------------------------------------ Date */

/*
 * The current time as an HTTP-date, formatted when the second changes: a worker writes
 * thousands of heads a second, each with the same text.
 */
static _Thread_local char headers_date_text[HEADERS_DATE_LEN + 1];
static _Thread_local time_t headers_date_second = -1;

const char *
headers_date(void)
{
	static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul",
	    "Aug", "Sep", "Oct", "Nov", "Dec" };
	struct timespec ts;
	struct tm tm;
	char *w = headers_date_text;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	if (ts.tv_sec == headers_date_second)
		return headers_date_text;
	if (gmtime_r(&ts.tv_sec, &tm) == NULL || tm.tm_year + 1900 > 9999 || tm.tm_year < 0)
		memset(&tm, 0, sizeof(tm));     /* never: a clock outside 1900-9999 */
	w = headers_put(w, days[tm.tm_wday], 3);
	*w++ = ',';
	*w++ = ' ';
	*w++ = (char)('0' + tm.tm_mday / 10);
	*w++ = (char)('0' + tm.tm_mday % 10);
	*w++ = ' ';
	w = headers_put(w, months[tm.tm_mon], 3);
	*w++ = ' ';
	*w++ = (char)('0' + (tm.tm_year + 1900) / 1000);
	*w++ = (char)('0' + (tm.tm_year + 1900) / 100 % 10);
	*w++ = (char)('0' + (tm.tm_year + 1900) / 10 % 10);
	*w++ = (char)('0' + (tm.tm_year + 1900) % 10);
	*w++ = ' ';
	*w++ = (char)('0' + tm.tm_hour / 10);
	*w++ = (char)('0' + tm.tm_hour % 10);
	*w++ = ':';
	*w++ = (char)('0' + tm.tm_min / 10);
	*w++ = (char)('0' + tm.tm_min % 10);
	*w++ = ':';
	*w++ = (char)('0' + tm.tm_sec / 10);
	*w++ = (char)('0' + tm.tm_sec % 10);
	w = HEADERS_PUT_LIT(w, " GMT");
	*w = '\0';
	headers_date_second = ts.tv_sec;
	return headers_date_text;
}

/* ------------------------------------------------------------------ responses */

/* 1 when a kept Vary line of the response lists elem (or "*", which stands for all). */
static int
headers_vary_lists(const struct http_response *resp, const unsigned char *kind, size_t n,
    struct http_str elem)
{
	for (size_t i = 0; i < n; i++) {
		const struct http_header *h = &resp->headers[i];
		const char *p = h->value.p, *end = p + h->value.len;
		struct http_str tok;

		if (kind[i] == HK_DROP || !HTTP_IEQ(h->name.p, h->name.len, "vary"))
			continue;
		do {
			p = http_list_next(p, end, &tok);
			if (headers_same_name(tok, elem) || HTTP_IEQ(tok.p, tok.len, "*"))
				return 1;
		} while (p != NULL);
	}
	return 0;
}

/* 1 when line (a header line of added, CR LF included) is a Vary whose every element the
 * response's own Vary lines list already: it would say nothing new. */
static int
headers_vary_said(const struct http_response *resp, const unsigned char *kind, size_t n,
    const char *line, size_t len)
{
	const char *p, *end = line + len - 2;
	struct http_str tok;

	if (len < 7 || !http_ieq(line, "vary:", 5))
		return 0;
	p = line + 5;
	do {
		p = http_list_next(p, end, &tok);
		if (tok.len != 0 && !headers_vary_lists(resp, kind, n, tok))
			return 0;
	} while (p != NULL);
	return 1;
}

/*
 * What an answer's head carries, decided once for both of its forms: HTTP/1.1 text
 * (headers_response_out) and fields (headers_response_fields).
 */
struct headers_answer {
	unsigned char kind[HTTP_MAX_HEADERS];   /* of each received header */
	size_t n;                       /* received headers looked at */
	int status;
	struct http_str reason;
	int has_id;                     /* 1: no X-Request-Id of ours (the upstream's, the ops', or
	                                 * no id) */
	int has_date;                   /* 1: no Date of ours (the upstream's, or the ops') */
	size_t size;                    /* bytes of the head as text, at most */
	size_t weak;                    /* bytes of the ETags that go out weak, W/ included */
};

/* Inlined into both forms: the HTTP/1.1 one is every answer's. */
static inline __attribute__((always_inline)) void
headers_answer_decide(struct headers_answer *a, const struct http_response *resp,
    struct http_str request_id, const struct header_ops *ops, const struct rewrite_vars *vars,
    const char *added)
{
	struct headers_listed listed;
	size_t n = resp->nheaders < HTTP_MAX_HEADERS ? resp->nheaders : HTTP_MAX_HEADERS;
	int status = resp->status;

	if (status < 100 || status > 999)
		status = 502;   /* never produced by the parser */
	a->n = n;
	a->status = status;
	a->reason = resp->reason;
	if (a->reason.len == 0)
		a->reason = http_reason(status);        /* the upstream sent none */
	/* Counted in locals: a's kind[] keeps it in memory. */
	int has_id = 0, has_date = 0;
	size_t size = sizeof("HTTP/1.1 000 \r\n") + a->reason.len, weak = 0;

	headers_listed_collect(&listed, resp->headers, n, &resp->framing);
	for (size_t i = 0; i < n; i++) {
		const struct http_header *h = &resp->headers[i];
		enum http_name k = http_header_kind(h);
		unsigned char kind = (unsigned char)headers_response_kind(k);

		if (kind != HK_DROP && headers_is_listed(&listed, h->name))
			kind = HK_DROP;
		if (kind != HK_DROP && ops != NULL && header_ops_drops(ops, h->name))
			kind = HK_DROP;
		if (kind != HK_DROP && k == HN_DATE) {
			has_date = 1;
		} else if (kind != HK_DROP && added != NULL && k == HN_ETAG) {
			/* RFC 9110 8.8.1: a strong validator promises these very bytes. */
			if (h->value.len >= 1 && h->value.p[0] == '"') {
				kind = HK_ETAG_WEAK;
				weak += h->value.len + 2;
			} else if (h->value.len < 2 || h->value.p[0] != 'W' || h->value.p[1] != '/') {
				kind = HK_DROP;         /* no entity-tag at all: not passed on */
			}
		}
		a->kind[i] = kind;
		if (kind == HK_DROP)
			continue;
		if (kind == HK_REQUEST_ID)
			has_id = 1;
		size += h->name.len + h->value.len + 6;
	}
	if (ops != NULL && (ops->own & HEADER_OPS_REQUEST_ID))
		has_id = 1;     /* the ops set or remove it */
	if (request_id.len == 0)
		has_id = 1;
	if (!has_id)
		size += sizeof("X-Request-Id: \r\n") + request_id.len;
	if (!has_date && (ops == NULL || !header_ops_drops(ops, (struct http_str){ "Date", 4 })))
		size += sizeof("Date: \r\n") + HEADERS_DATE_LEN;
	else
		has_date = 1;   /* the upstream's, or the ops' own */
	if (ops != NULL)
		size += header_ops_size(ops, vars);
	if (added != NULL)
		size += strlen(added);
	a->has_id = has_id;
	a->has_date = has_date;
	a->size = size;
	a->weak = weak;
}

/* The next line of added that goes out (CR LF included, *len bytes), or NULL; *at walks
 * added. */
static inline const char *
headers_added_next(const struct headers_answer *a, const struct http_response *resp,
    const char **at, size_t *len)
{
	const char *line, *eol;

	while ((line = *at) != NULL && *line != '\0') {
		eol = strstr(line, "\r\n");
		eol = eol != NULL ? eol + 2 : line + strlen(line);
		*at = eol;
		*len = (size_t)(eol - line);
		if (!headers_vary_said(resp, a->kind, a->n, line, *len))
			return line;
	}
	return NULL;
}

int
headers_response_out(struct evbuffer *out, const struct http_response *resp,
    struct http_str request_id, const struct header_ops *ops, const struct rewrite_vars *vars,
    const char *added)
{
	struct headers_answer a;
	const char *line;
	size_t len;

	headers_answer_decide(&a, resp, request_id, ops, vars, added);

	struct evbuffer_iovec vec;
	char *start = headers_reserve(out, a.size, &vec), *w = start;
	if (start == NULL)
		return -1;

	w = HEADERS_PUT_LIT(w, "HTTP/1.1 ");
	*w++ = (char)('0' + a.status / 100);
	*w++ = (char)('0' + a.status / 10 % 10);
	*w++ = (char)('0' + a.status % 10);
	*w++ = ' ';
	w = headers_put(w, a.reason.p, a.reason.len);
	*w++ = '\r';
	*w++ = '\n';
	if (!a.has_date) {
		w = HEADERS_PUT_LIT(w, "Date: ");
		w = headers_put(w, headers_date(), HEADERS_DATE_LEN);
		*w++ = '\r';
		*w++ = '\n';
	}
	for (size_t i = 0; i < a.n; i++) {
		const struct http_header *h = &resp->headers[i];

		if (a.kind[i] == HK_ETAG_WEAK) {
			w = headers_put(w, h->name.p, h->name.len);
			w = HEADERS_PUT_LIT(w, ": W/");
			w = headers_put(w, h->value.p, h->value.len);
			*w++ = '\r';
			*w++ = '\n';
		} else if (a.kind[i] != HK_DROP) {
			w = headers_put_field(w, h->name, h->value);
		}
	}
	if (!a.has_id) {
		w = HEADERS_PUT_LIT(w, "X-Request-Id: ");
		w = headers_put(w, request_id.p, request_id.len);
		*w++ = '\r';
		*w++ = '\n';
	}
	if (ops != NULL)
		w = header_ops_put(w, ops, vars);
	while (added != NULL && (line = headers_added_next(&a, resp, &added, &len)) != NULL)
		w = headers_put(w, line, len);
	return headers_commit(out, &vec, start, w, a.size);
}

/* Room for n more fields in hf. */
static int
headers_fields_room(struct headers_fields *hf, size_t n)
{
	size_t cap = hf->cap != 0 ? hf->cap : 32;
	struct headers_field *f;

	if (hf->n + n <= hf->cap)
		return 0;
	while (cap < hf->n + n)
		cap *= 2;
	if ((f = realloc(hf->f, cap * sizeof(*f))) == NULL)
		return -1;
	hf->f = f;
	hf->cap = cap;
	return 0;
}

/* Set f; the bytes its "Name: value" line takes. */
static inline size_t
headers_field_set(struct headers_field *f, struct http_str name, struct http_str value)
{
	f->name = name;
	f->value = value;
	return name.len + value.len + 4;
}

/* A "Name: value" line we made (CR LF excluded): its name and its value without the
 * whitespace around it, as a parser of the text would read them.  0, or -1 without a name. */
static int
headers_line_split(const char *p, size_t len, struct http_str *name, struct http_str *value)
{
	const char *colon = memchr(p, ':', len), *v, *end = p + len;

	if (colon == NULL || colon == p)
		return -1;
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*name = (struct http_str){ p, (size_t)(colon - p) };
	*value = (struct http_str){ v, (size_t)(end - v) };
	return 0;
}

/* The lines of p..end (each ending in CR LF) as fields; the hop-by-hop ones left out when
 * drop_hop. */
static int
headers_fields_split(struct headers_fields *hf, const char *p, const char *end, int drop_hop)
{
	struct http_str name, value;
	const char *eol;

	for (; p < end; p = eol + 2) {
		if ((eol = memchr(p, '\r', (size_t)(end - p))) == NULL)
			eol = end;
		if (headers_line_split(p, (size_t)(eol - p), &name, &value) < 0 ||
		    (drop_hop && headers_is_hop_by_hop(name)))
			continue;
		if (headers_fields_room(hf, 1) < 0)
			return -1;
		headers_field_set(&hf->f[hf->n++], name, value);
		hf->text_len += (size_t)(eol - p) + 2;
	}
	return 0;
}

int
headers_response_fields(struct headers_fields *hf, const struct http_response *resp,
    struct http_str request_id, const struct header_ops *ops, const struct rewrite_vars *vars,
    const char *added)
{
	struct headers_answer a;
	size_t store = 0, len;
	const char *line;
	char *w;

	headers_answer_decide(&a, resp, request_id, ops, vars, added);
	hf->status = a.status;
	hf->n = 0;
	hf->text_len = sizeof("HTTP/1.1 000 \r\n") - 1 + a.reason.len;
	/* The received headers kept and ours; lines (ops, added) make room for themselves. */
	if (headers_fields_room(hf, a.n + 2) < 0)
		return -1;
	/* Values made here: the weak ETags, the ops' lines. */
	store = a.weak + (ops != NULL ? header_ops_size(ops, vars) : 0);
	if (store > hf->store_size) {
		char *p = realloc(hf->store, store);

		if (p == NULL)
			return -1;
		hf->store = p;
		hf->store_size = store;
	}
	w = hf->store;
	/* Counted in locals (f is hf's): the fields pass is every h2 answer's. */
	struct headers_field *f = hf->f;
	size_t n = 0, text = hf->text_len;

	if (!a.has_date)
		text += headers_field_set(&f[n++], (struct http_str){ "Date", 4 },
		    (struct http_str){ headers_date(), HEADERS_DATE_LEN });
	for (size_t i = 0; i < a.n; i++) {
		const struct http_header *h = &resp->headers[i];

		if (a.kind[i] == HK_ETAG_WEAK) {
			char *v = w;

			w = HEADERS_PUT_LIT(w, "W/");
			w = headers_put(w, h->value.p, h->value.len);
			text += headers_field_set(&f[n++], h->name,
			    (struct http_str){ v, (size_t)(w - v) });
		} else if (a.kind[i] != HK_DROP) {
			text += headers_field_set(&f[n++], h->name, h->value);
		}
	}
	if (!a.has_id)
		text += headers_field_set(&f[n++], (struct http_str){ "X-Request-Id", 12 },
		    request_id);
	hf->n = n;
	hf->text_len = text;
	if (ops != NULL) {
		char *lines = w;

		w = header_ops_put(w, ops, vars);
		assert((size_t)(w - hf->store) <= store);
		if (headers_fields_split(hf, lines, w, 0) < 0)
			return -1;
	}
	while (added != NULL && (line = headers_added_next(&a, resp, &added, &len)) != NULL) {
		if (headers_fields_split(hf, line, line + len, 0) < 0)
			return -1;
	}
	return 0;
}

int
headers_fields_lines(struct headers_fields *hf, const char *lines, size_t len)
{
	return headers_fields_split(hf, lines, lines + len, 1);
}

void
headers_fields_free(struct headers_fields *hf)
{
	free(hf->f);
	free(hf->store);
	memset(hf, 0, sizeof(*hf));
}

/* ------------------------------------------------------------------ request ids */

/*
 * xoshiro256** per thread, seeded once from getrandom(2): ids must be unique and hard to
 * guess, not secret, and must not cost a system call each.
 */
static _Thread_local uint64_t headers_rng[4];
static _Thread_local int headers_rng_ready;

static inline uint64_t
headers_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
headers_splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void
headers_rng_seed(void)
{
	uint64_t seed[4];
	size_t got = 0;

	while (got < sizeof(seed)) {
		ssize_t r = getrandom((char *)seed + got, sizeof(seed) - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)r;
	}
	if (got < sizeof(seed)) {
		/* No getrandom: still distinct per thread and per start. */
		struct timespec ts;
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&headers_rng;
		for (int i = 0; i < 4; i++)
			seed[i] = headers_splitmix(&x);
	}
	/* Mixing through splitmix also rules out the all-zero state. */
	uint64_t m = seed[0] ^ seed[1] ^ seed[2] ^ seed[3];
	for (int i = 0; i < 4; i++)
		headers_rng[i] = seed[i] ^ headers_splitmix(&m);
	if ((headers_rng[0] | headers_rng[1] | headers_rng[2] | headers_rng[3]) == 0)
		headers_rng[0] = 1;
	headers_rng_ready = 1;
}

static inline uint64_t
headers_rng_next(void)
{
	uint64_t *s = headers_rng;
	uint64_t r = headers_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = headers_rotl(s[3], 45);
	return r;
}

#ifndef __SSE2__
/* The 16 hex digits of v, most significant first, eight at a time: each nibble spread to a
 * byte, then 0-9 and a-f told apart by a carry. */
static void
headers_hex16(char out[16], uint64_t v)
{
	for (int half = 0; half < 2; half++) {
		uint64_t x = (v >> (32 - 32 * half)) & 0xffffffffULL, digits;

		/* Nibbles of x, high first, one per byte of a little-endian word. */
		x = ((x & 0xffff0000ULL) >> 16) | ((x & 0x0000ffffULL) << 32);
		x = ((x & 0x0000ff000000ff00ULL) >> 8) | ((x & 0x000000ff000000ffULL) << 16);
		x = ((x & 0x00f000f000f000f0ULL) >> 4) | ((x & 0x000f000f000f000fULL) << 8);
		/* 0x06 added makes a nibble above 9 carry into bit 4. */
		digits = x + 0x3030303030303030ULL +
		    (((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL) * 0x27;
		memcpy(out + 8 * half, &digits, 8);
	}
}
#endif

void
headers_request_id_generate(char out[REQUEST_ID_LEN])
{
	if (!headers_rng_ready)
		headers_rng_seed();
	/* An id is written on every request: no per-digit table lookups. */
#ifdef __SSE2__
	/* The 32 nibbles of two numbers, each byte's high one first, all at once: any order of
	 * random bits is as random. */
	const __m128i low4 = _mm_set1_epi8(0x0f);
	__m128i bytes = _mm_set_epi64x((long long)headers_rng_next(),
	    (long long)headers_rng_next());
	__m128i lo = _mm_and_si128(bytes, low4);
	__m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
	__m128i d[2] = { _mm_unpacklo_epi8(hi, lo), _mm_unpackhi_epi8(hi, lo) };

	for (int i = 0; i < 2; i++) {
		/* '0' + n, and 'a' - '0' - 10 more for n above 9 */
		__m128i above9 = _mm_cmpgt_epi8(d[i], _mm_set1_epi8(9));

		d[i] = _mm_add_epi8(_mm_add_epi8(d[i], _mm_set1_epi8('0')),
		    _mm_and_si128(above9, _mm_set1_epi8('a' - '0' - 10)));
		_mm_storeu_si128((__m128i *)(void *)(out + 16 * i), d[i]);
	}
#else
	headers_hex16(out, headers_rng_next());
	headers_hex16(out + 16, headers_rng_next());
#endif
}

int
headers_request_id_acceptable(struct http_str id)
{
	if (id.len == 0 || id.len > 128)
		return 0;
	for (size_t i = 0; i < id.len; i++) {
		unsigned char c = (unsigned char)id.p[i];
		if (c < 0x21 || c > 0x7e)
			return 0;
	}
	return 1;
}
