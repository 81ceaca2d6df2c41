/*
 * HTTP/1.1 heads (RFC 9112) parsed in place, an incremental chunked decoder, and the reason
 * phrases of RFC 9110.
 *
 * Strictness follows nginx and HAProxy where they are strict, and is stricter on line endings:
 * every line of a head and of the chunked framing must end in CRLF.  A bare LF is an error
 * everywhere, not only in the request line: the proxy re-serialises every head it forwards, so
 * conforming peers never notice, and a message is never framed one way here and another way
 * by the next hop.
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "http.h"

#define C_TCHAR  0x01   /* token character (RFC 9110 5.6.2) */
#define C_VALUE  0x02   /* field-value byte: HTAB, SP, VCHAR, obs-text */
#define C_TARGET 0x04   /* request-target byte: VCHAR or obs-text */
#define C_HEX    0x08
#define C_HOST   0x10   /* uri-host / port: unreserved, sub-delims, pct-encoded, ':' '[' ']' */
#define C_DIGIT  0x20
#define C_SCHEME 0x40   /* scheme character after the first: ALPHA DIGIT + - . */

#define C_VT (C_VALUE | C_TARGET)
#define C_TVT (C_TCHAR | C_VALUE | C_TARGET)

static const unsigned char http_ctype[256] = {
	['\t'] = C_VALUE,
	[' '] = C_VALUE,
	['!'] = C_TVT | C_HOST, ['"'] = C_VT, ['#'] = C_TVT, ['$'] = C_TVT | C_HOST,
	['%'] = C_TVT | C_HOST, ['&'] = C_TVT | C_HOST, ['\''] = C_TVT | C_HOST,
	['('] = C_VT | C_HOST, [')'] = C_VT | C_HOST, ['*'] = C_TVT | C_HOST,
	['+'] = C_TVT | C_HOST | C_SCHEME, [','] = C_VT | C_HOST,
	['-'] = C_TVT | C_HOST | C_SCHEME, ['.'] = C_TVT | C_HOST | C_SCHEME, ['/'] = C_VT,
	['0' ... '9'] = C_TVT | C_HEX | C_HOST | C_DIGIT | C_SCHEME,
	[':'] = C_VT | C_HOST, [';'] = C_VT | C_HOST, ['<'] = C_VT, ['='] = C_VT | C_HOST,
	['>'] = C_VT, ['?'] = C_VT, ['@'] = C_VT,
	['A' ... 'F'] = C_TVT | C_HEX | C_HOST | C_SCHEME,
	['G' ... 'Z'] = C_TVT | C_HOST | C_SCHEME,
	['['] = C_VT | C_HOST, ['\\'] = C_VT, [']'] = C_VT | C_HOST, ['^'] = C_TVT,
	['_'] = C_TVT | C_HOST, ['`'] = C_TVT,
	['a' ... 'f'] = C_TVT | C_HEX | C_HOST | C_SCHEME,
	['g' ... 'z'] = C_TVT | C_HOST | C_SCHEME,
	['{'] = C_VT, ['|'] = C_TVT, ['}'] = C_VT, ['~'] = C_TVT | C_HOST,
	[0x80 ... 0xff] = C_VT,
};

#define HTTP_ONES  0x0101010101010101ULL
#define HTTP_HIGHS 0x8080808080808080ULL

/* Nonzero when some byte of w is below n (n <= 128). */
static inline uint64_t
http_has_less(uint64_t w, unsigned n)
{
	return (w - HTTP_ONES * n) & ~w & HTTP_HIGHS;
}

/* Nonzero when some byte of w equals b. */
static inline uint64_t
http_has_byte(uint64_t w, unsigned b)
{
	uint64_t x = w ^ (HTTP_ONES * b);

	return (x - HTTP_ONES) & ~x & HTTP_HIGHS;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HTTP_SWAR_FIRST 1       /* the lowest set bit of a mask is the first byte in memory */
#endif

/*
 * First byte at or after p that is not in class cls.  Eight bytes at a time while no byte is
 * below lo or DEL (the common case of plain ASCII); a block with such a byte goes straight
 * to it, and the class decides there (a value may hold HTAB).
 */
static inline const char *
http_scan(const char *p, const char *end, unsigned cls, unsigned lo)
{
#ifdef __SSE2__
	/* Sixteen bytes at a time while every byte is at least lo and not DEL. */
	while (end - p >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		__m128i low = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8((char)(lo - 1))),
		    _mm_set1_epi8((char)(lo - 1)));
		unsigned m = (unsigned)_mm_movemask_epi8(
		    _mm_or_si128(low, _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f))));

		if (m == 0) {
			p += 16;
			continue;
		}
		p += __builtin_ctz(m);
		if (!(http_ctype[(unsigned char)*p] & cls))
			return p;
		p++;
	}
#endif
	for (;;) {
		while (end - p >= 8) {
			uint64_t w, m;

			memcpy(&w, p, 8);
			m = http_has_less(w, lo) | http_has_byte(w, 0x7f);
			if (m != 0) {
#ifdef HTTP_SWAR_FIRST
				p += __builtin_ctzll(m) >> 3;      /* exact: see http_scan_name */
#endif
				break;
			}
			p += 8;
		}
		const char *stop = end - p > 8 ? p + 8 : end;
		while (p < stop && (http_ctype[(unsigned char)*p] & cls))
			p++;
		if (p < stop || p == end)
			return p;
	}
}

/* High bit set in each byte of w (all of them ASCII above space) that is a letter, a digit
 * or '-': what header names are made of nearly always. */
static inline uint64_t
http_name_bytes(uint64_t w)
{
	uint64_t t = w | (HTTP_ONES * 0x20);    /* case folded; digits and '-' stay */
	uint64_t letter = (t + HTTP_ONES * (0x80 - 'a')) & ~(t + HTTP_ONES * (0x7f - 'z'));
	uint64_t digit = (t + HTTP_ONES * (0x80 - '0')) & ~(t + HTTP_ONES * (0x7f - '9'));
	uint64_t x = t ^ (HTTP_ONES * '-');
	uint64_t dash = ~((x + HTTP_ONES * 0x7f) | x);

	return (letter | digit | dash) & HTTP_HIGHS;
}

/* First byte at or after p that is not a tchar (RFC 9110 5.6.2). */
static inline const char *
http_scan_name(const char *p, const char *end)
{
#ifdef __SSE2__
	/* Sixteen bytes at a time: letters (either case), digits and '-', what names are made
	 * of nearly always; the first other byte is looked at alone. */
	while (end - p >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		__m128i letter = _mm_sub_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
		__m128i digit = _mm_sub_epi8(v, _mm_set1_epi8('0'));
		__m128i ok = _mm_or_si128(
		    _mm_cmpeq_epi8(_mm_min_epu8(letter, _mm_set1_epi8(25)), letter),
		    _mm_cmpeq_epi8(_mm_min_epu8(digit, _mm_set1_epi8(9)), digit));
		unsigned m;

		ok = _mm_or_si128(ok, _mm_cmpeq_epi8(v, _mm_set1_epi8('-')));
		m = ~(unsigned)_mm_movemask_epi8(ok) & 0xffff;
		if (m == 0) {
			p += 16;
			continue;
		}
		p += __builtin_ctz(m);
		if (!(http_ctype[(unsigned char)*p] & C_TCHAR))
			return p;
		p++;
	}
#endif
	for (;;) {
#ifdef HTTP_SWAR_FIRST
		while (end - p >= 8) {
			uint64_t w, other;

			memcpy(&w, p, 8);
			/* The first byte that is not a letter, digit or '-' is told exactly: bytes
			 * before it carry nothing into it. */
			other = (w & HTTP_HIGHS) | http_has_less(w, 0x21) |
			    (~http_name_bytes(w) & HTTP_HIGHS);
			if (other != 0) {
				p += __builtin_ctzll(other) >> 3;
				break;
			}
			p += 8;
		}
#endif
		if (p == end || !(http_ctype[(unsigned char)*p] & C_TCHAR))
			return p;
		p++;
	}
}

struct http_str
http_find_header(const struct http_header *h, size_t n, const char *lower_name)
{
	struct http_str none = { "", 0 };
	size_t i;

	for (i = 0; i < n; i++)
		if (http_header_is(&h[i], lower_name))
			return h[i].value;
	return none;
}

int
http_header_is(const struct http_header *h, const char *lower_name)
{
	size_t n = strlen(lower_name);

	return h->name.len == n && http_ieq(h->name.p, lower_name, n);
}

int
http_is_token(const char *s, size_t len)
{
	return len > 0 && http_scan_name(s, s + len) == s + len;
}

unsigned
http_method_bit(const char *m, size_t len)
{
	switch (len) {
	case 3:
		if (memcmp(m, "GET", 3) == 0)
			return METHOD_GET;
		if (memcmp(m, "PUT", 3) == 0)
			return METHOD_PUT;
		break;
	case 4:
		if (memcmp(m, "POST", 4) == 0)
			return METHOD_POST;
		if (memcmp(m, "HEAD", 4) == 0)
			return METHOD_HEAD;
		break;
	case 5:
		if (memcmp(m, "PATCH", 5) == 0)
			return METHOD_PATCH;
		if (memcmp(m, "TRACE", 5) == 0)
			return METHOD_TRACE;
		break;
	case 6:
		if (memcmp(m, "DELETE", 6) == 0)
			return METHOD_DELETE;
		break;
	case 7:
		if (memcmp(m, "OPTIONS", 7) == 0)
			return METHOD_OPTIONS;
		if (memcmp(m, "CONNECT", 7) == 0)
			return METHOD_CONNECT;
		break;
	}
	return METHOD_OTHER;
}

/*
 * n[0..len) (tchars, as parsed) is lit (lowercase letters and '-', len bytes), ignoring
 * case: http_ieq for the parser's name lookups, which it makes 7 % of a head's parse cheaper.  Setting bit 5 lowercases a
 * letter and leaves '-' as it is; no other tchar becomes a lowercase letter or '-' that way.
 * Compared a word at a time, overlapping at the end.
 */
static inline int
http_name_is(const char *n, const char *lit, size_t len)
{
	uint64_t a, b;
	uint32_t c, d;

	if (len >= 8) {
		for (size_t i = 0; i + 8 < len; i += 8) {
			memcpy(&a, n + i, 8);
			memcpy(&b, lit + i, 8);
			if ((a | HTTP_ONES * 0x20) != b)
				return 0;
		}
		memcpy(&a, n + len - 8, 8);
		memcpy(&b, lit + len - 8, 8);
		return (a | HTTP_ONES * 0x20) == b;
	}
	if (len >= 4) {
		memcpy(&c, n, 4);
		memcpy(&d, lit, 4);
		if ((c | 0x20202020U) != d)
			return 0;
		memcpy(&c, n + len - 4, 4);
		memcpy(&d, lit + len - 4, 4);
		return (c | 0x20202020U) == d;
	}
	for (size_t i = 0; i < len; i++)
		if (((unsigned char)n[i] | 0x20) != (unsigned char)lit[i])
			return 0;
	return 1;
}

#define HTTP_NAME_IS(n, lit) http_name_is((n), (lit), sizeof(lit) - 1)

enum http_name
http_name_of(const char *n, size_t len)
{
	/* The length and the first letter rule out nearly every other name at once. */
	switch (len) {
	case 2:
		if (HTTP_NAME_IS(n, "te"))
			return HN_TE;
		break;
	case 4:
		if (HTTP_NAME_IS(n, "host"))
			return HN_HOST;
		if (HTTP_NAME_IS(n, "date"))
			return HN_DATE;
		if (HTTP_NAME_IS(n, "etag"))
			return HN_ETAG;
		break;
	case 6:
		if (HTTP_NAME_IS(n, "expect"))
			return HN_EXPECT;
		break;
	case 7:
		if (HTTP_NAME_IS(n, "upgrade"))
			return HN_UPGRADE;
		if (HTTP_NAME_IS(n, "trailer"))
			return HN_TRAILER;
		break;
	case 10:
		if (HTTP_NAME_IS(n, "connection"))
			return HN_CONNECTION;
		if (HTTP_NAME_IS(n, "keep-alive"))
			return HN_KEEP_ALIVE;
		break;
	case 12:
		if (HTTP_NAME_IS(n, "x-request-id"))
			return HN_REQUEST_ID;
		break;
	case 14:
		if (HTTP_NAME_IS(n, "content-length"))
			return HN_CONTENT_LENGTH;
		break;
	case 15:
		if (HTTP_NAME_IS(n, "x-forwarded-for"))
			return HN_XFF;
		break;
	case 17:
		if (HTTP_NAME_IS(n, "transfer-encoding"))
			return HN_TRANSFER_ENCODING;
		if (HTTP_NAME_IS(n, "x-forwarded-proto"))
			return HN_XFP;
		break;
	}
	if (len > 6 && ((unsigned char)n[0] | 0x20) == 'p' && http_name_is(n, "proxy-", 6))
		return HN_PROXY;
	return HN_OTHER;
}

/* What the header loop learns; turned into struct http_framing once the head is complete. */
struct http_acc {
	int64_t cl;                     /* -1 until a valid Content-Length is seen */
	unsigned cl_seen : 1;
	unsigned cl_bad : 1;            /* unparsable, or values that disagree */
	unsigned te_seen : 1;
	unsigned te_only_chunked : 1;   /* one Transfer-Encoding line, and it says "chunked" */
	unsigned te_last_chunked : 1;   /* the last coding listed so far is chunked */
	unsigned te_bad : 1;            /* chunked listed more than once */
	unsigned host_count : 2;
	struct http_str host;
	struct http_str request_id;
};

const char *
http_list_next(const char *p, const char *end, struct http_str *elem)
{
	const char *comma = memchr(p, ',', (size_t)(end - p));
	const char *e = comma ? comma : end;
	const char *s = p;

	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	const char *t = e;
	while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
		t--;
	elem->p = s;
	elem->len = (size_t)(t - s);
	return comma ? comma + 1 : NULL;
}

void
http_elements_start(struct http_elements *it, const struct http_header *h, size_t n,
    const char *lower_name)
{
	it->h = h;
	it->end = h + n;
	it->name = lower_name;
	it->p = NULL;
}

int
http_elements_next(struct http_elements *it, struct http_str *elem)
{
	for (;;) {
		while (it->p == NULL) {
			if (it->h == it->end)
				return 0;
			if (http_header_is(it->h, it->name)) {
				it->p = it->h->value.p;
				it->vend = it->p + it->h->value.len;
			}
			it->h++;
		}
		it->p = http_list_next(it->p, it->vend, elem);
		if (elem->len != 0)
			return 1;
	}
}

/* A qvalue (RFC 9110 12.4.2) in thousandths, or -1. */
static int
http_qvalue(struct http_str v)
{
	int q, scale = 100;
	size_t i;

	if (v.len == 0 || (v.p[0] != '0' && v.p[0] != '1') || v.len > 5 ||
	    (v.len > 1 && v.p[1] != '.'))
		return -1;
	q = (v.p[0] - '0') * 1000;
	for (i = 2; i < v.len; i++, scale /= 10) {
		if (v.p[i] < '0' || v.p[i] > '9')
			return -1;
		q += (v.p[i] - '0') * scale;
	}
	return q <= 1000 ? q : -1;
}

int
http_weight(struct http_str elem, struct http_str *token)
{
	const char *p = elem.p, *end = elem.p + elem.len, *semi, *eq;
	struct http_str param, name, value;
	int weight = 1000;

	semi = memchr(p, ';', elem.len);
	token->p = p;
	token->len = (size_t)((semi != NULL ? semi : end) - p);
	while (token->len > 0 && (p[token->len - 1] == ' ' || p[token->len - 1] == '\t'))
		token->len--;
	while (semi != NULL) {
		p = semi + 1;
		semi = memchr(p, ';', (size_t)(end - p));
		/* One parameter, its name and value trimmed of OWS: the list tokenizer does that. */
		http_list_next(p, semi != NULL ? semi : end, &param);
		if ((eq = memchr(param.p, '=', param.len)) == NULL)
			continue;
		http_list_next(param.p, eq, &name);
		http_list_next(eq + 1, param.p + param.len, &value);
		if (HTTP_IEQ(name.p, name.len, "q"))
			weight = http_qvalue(value);
	}
	return weight;
}

/* Content-Length: 1*DIGIT, or a list of identical values ("42, 42"), each below 2^62. */
static void
http_acc_cl(struct http_acc *a, const char *v, size_t len)
{
	const char *p = v, *end = v + len;
	struct http_str e;

	a->cl_seen = 1;
	do {
		p = http_list_next(p, end, &e);
		if (e.len == 0) {
			a->cl_bad = 1;
			return;
		}
		int64_t x = 0;
		for (size_t i = 0; i < e.len; i++) {
			unsigned d = (unsigned char)e.p[i] - '0';
			/* x * 10 + d must stay below 2^62 */
			if (d > 9 || x > ((((int64_t)1 << 62) - 1 - (int64_t)d) / 10)) {
				a->cl_bad = 1;
				return;
			}
			x = x * 10 + d;
		}
		if (a->cl >= 0 && a->cl != x) {
			a->cl_bad = 1;
			return;
		}
		a->cl = x;
	} while (p != NULL);
}

static void
http_acc_te(struct http_acc *a, const char *v, size_t len)
{
	const char *p = v, *end = v + len;
	struct http_str e;

	a->te_only_chunked = !a->te_seen && HTTP_IEQ(v, len, "chunked");
	a->te_seen = 1;
	do {
		p = http_list_next(p, end, &e);
		if (e.len == 0)
			continue;       /* empty list elements are allowed and mean nothing */
		if (HTTP_IEQ(e.p, e.len, "chunked")) {
			if (a->te_last_chunked)
				a->te_bad = 1;
			a->te_last_chunked = 1;
			/* chunked applied twice with something in between */
		} else {
			a->te_last_chunked = 0;
		}
	} while (p != NULL);
}

static void
http_acc_connection(struct http_framing *f, const char *v, size_t len)
{
	const char *p = v, *end = v + len;
	struct http_str e;

	do {
		p = http_list_next(p, end, &e);
		if (HTTP_IEQ(e.p, e.len, "close")) {
			f->conn_close = 1;
		} else if (HTTP_IEQ(e.p, e.len, "keep-alive")) {
			f->conn_keepalive = 1;
		} else if (e.len != 0) {
			f->conn_lists = 1;
			if (HTTP_IEQ(e.p, e.len, "upgrade"))
				f->upgrade = 1;
		}
	} while (p != NULL);
}

/*
 * Header lines from p up to and including the empty line.  Returns the head length, or
 * HTTP_INCOMPLETE / an error.  An error is reported as soon as the bytes seen prove it, so a
 * prefix of a valid head is always HTTP_INCOMPLETE.
 */
static ssize_t
http_parse_fields(const char *buf, const char *p, const char *end, struct http_header *hs,
    size_t *nheaders, struct http_acc *a, struct http_framing *f)
{
	size_t n = 0;

	f->lists_known = 1;
	for (;;) {
		if (p == end)
			return HTTP_INCOMPLETE;
		if (*p == '\r') {
			if (p + 1 == end)
				return HTTP_INCOMPLETE;
			if (p[1] != '\n')
				return HTTP_ERR_MALFORMED;
			*nheaders = n;
			return p + 2 - buf;
		}

		/* A line starting with SP/HTAB (obs-fold) or ':' has an empty name. */
		const char *name = p;
		p = http_scan_name(p, end);
		if (p == end)
			return HTTP_INCOMPLETE;
		if (*p != ':' || p == name)
			return HTTP_ERR_MALFORMED;
		if (n == HTTP_MAX_HEADERS)
			return HTTP_ERR_TOO_MANY_HEADERS;
		size_t nlen = (size_t)(p - name);

		p++;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		const char *val = p;
		p = http_scan(p, end, C_VALUE, 0x20);
		if (p == end)
			return HTTP_INCOMPLETE;
		if (*p != '\r')
			return HTTP_ERR_MALFORMED;      /* bare LF, NUL, other controls */
		if (p + 1 == end)
			return HTTP_INCOMPLETE;
		if (p[1] != '\n')
			return HTTP_ERR_MALFORMED;
		const char *vend = p;
		while (vend > val && (vend[-1] == ' ' || vend[-1] == '\t'))
			vend--;
		size_t vlen = (size_t)(vend - val);
		p += 2;

		struct http_header *h = &hs[n++];
		h->name.p = name;
		h->name.len = nlen;
		h->value.p = val;
		h->value.len = vlen;
		h->kind = (unsigned char)http_name_of(name, nlen);

		switch (h->kind) {
		case HN_CONTENT_LENGTH:
			http_acc_cl(a, val, vlen);
			break;
		case HN_TRANSFER_ENCODING:
			http_acc_te(a, val, vlen);
			break;
		case HN_CONNECTION:
			http_acc_connection(f, val, vlen);
			break;
		case HN_EXPECT:
			if (HTTP_IEQ(val, vlen, "100-continue"))
				f->expect_continue = 1;
			break;
		case HN_HOST:
			if (a->host_count < 2)
				a->host_count++;
			if (a->host_count == 1) {
				a->host.p = val;
				a->host.len = vlen;
			}
			break;
		case HN_REQUEST_ID:
			if (a->request_id.p == NULL) {
				a->request_id.p = val;
				a->request_id.len = vlen;
			}
			break;
		case HN_UPGRADE:
			f->upgrade = 1;
			break;
		}
	}
}

/* "HTTP/1.0" or "HTTP/1.1".  Returns 8, HTTP_INCOMPLETE or an error. */
static ssize_t
http_parse_version(const char *p, const char *end, int *minor)
{
	size_t avail = (size_t)(end - p);

	/* Five compares, not a call to memcmp. */
	if (avail >= 5 ? p[0] != 'H' || p[1] != 'T' || p[2] != 'T' || p[3] != 'P' || p[4] != '/' :
	    memcmp(p, "HTTP/", avail) != 0)
		return HTTP_ERR_MALFORMED;
	if (avail > 5 && !(http_ctype[(unsigned char)p[5]] & C_DIGIT))
		return HTTP_ERR_MALFORMED;
	if (avail > 6 && p[6] != '.')
		return HTTP_ERR_MALFORMED;
	if (avail < 8)
		return HTTP_INCOMPLETE;
	if (!(http_ctype[(unsigned char)p[7]] & C_DIGIT))
		return HTTP_ERR_MALFORMED;
	/* "HTTP/1.10" is malformed: the caller requires CR or SP right after. */
	if (p[5] != '1' || (p[7] != '0' && p[7] != '1'))
		return HTTP_ERR_VERSION;
	*minor = p[7] - '0';
	return 8;
}

/* CRLF at p: 2, HTTP_INCOMPLETE, or HTTP_ERR_MALFORMED (bare LF or anything else). */
static inline ssize_t
http_crlf(const char *p, const char *end)
{
	if (p == end)
		return HTTP_INCOMPLETE;
	if (*p != '\r')
		return HTTP_ERR_MALFORMED;
	if (p + 1 == end)
		return HTTP_INCOMPLETE;
	return p[1] == '\n' ? 2 : HTTP_ERR_MALFORMED;
}

static const char http_slash[] = "/";

/* Split the request-target into path and query; absolute-form also yields the authority. */
static int
http_split_target(struct http_request *req, struct http_str *authority)
{
	const char *t = req->target.p, *end = t + req->target.len;
	const char *s;

	authority->p = NULL;
	authority->len = 0;
	if (t[0] == '/') {
		s = t;
	} else if (t[0] == '*' && req->target.len == 1) {
		if (req->method_bit != METHOD_OPTIONS)
			return -1;
		req->path = req->target;
		req->query.p = end;
		req->query.len = 0;
		return 0;
	} else if (req->method_bit == METHOD_CONNECT) {
		/* authority-form: the target is host:port and has no path */
		req->path = req->target;
		req->query.p = end;
		req->query.len = 0;
		return 0;
	} else {
		/* absolute-form: scheme "://" authority [path-abempty] ["?" query] */
		const char *p = t;

		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			return -1;
		while (p < end && (http_ctype[(unsigned char)*p] & C_SCHEME))
			p++;
		if (end - p < 3 || memcmp(p, "://", 3) != 0)
			return -1;
		p += 3;
		const char *auth = p;
		while (p < end && *p != '/' && *p != '?') {
			if (!(http_ctype[(unsigned char)*p] & C_HOST))
				return -1;      /* userinfo ('@') included: deprecated, refused */
			p++;
		}
		if (p == auth)
			return -1;
		authority->p = auth;
		authority->len = (size_t)(p - auth);
		s = p;
	}

	const char *q = memchr(s, '?', (size_t)(end - s));
	if (q == NULL)
		q = end;
	if (q == s) {
		/* "http://host" or "http://host?x": the path is "/" */
		req->path.p = http_slash;
		req->path.len = 1;
	} else {
		req->path.p = s;
		req->path.len = (size_t)(q - s);
	}
	req->query.p = q;
	req->query.len = (size_t)(end - q);
	return 0;
}

static int
http_host_valid(struct http_str h)
{
	for (size_t i = 0; i < h.len; i++)
		if (!(http_ctype[(unsigned char)h.p[i]] & C_HOST))
			return 0;
	return 1;
}

ssize_t
http_parse_request(const char *buf, size_t len, struct http_request *req)
{
	const char *p = buf, *end = buf + len;
	struct http_acc a;
	struct http_str authority;
	ssize_t r;

	/* RFC 9112 2.2: empty lines before the request-line are ignored (CRLF only). */
	while (p < end && *p == '\r') {
		if ((r = http_crlf(p, end)) <= 0)
			return r;
		p += 2;
	}

	const char *m = p;
	while (p < end && (http_ctype[(unsigned char)*p] & C_TCHAR))
		p++;
	if (p == end)
		return HTTP_INCOMPLETE;
	if (*p != ' ' || p == m)
		return HTTP_ERR_MALFORMED;
	req->method.p = m;
	req->method.len = (size_t)(p - m);
	p++;

	const char *t = p;
	p = http_scan(p, end, C_TARGET, 0x21);
	if (p == end)
		return HTTP_INCOMPLETE;
	if (*p != ' ' || p == t)
		return HTTP_ERR_MALFORMED;
	req->target.p = t;
	req->target.len = (size_t)(p - t);
	p++;

	if ((r = http_parse_version(p, end, &req->version_minor)) <= 0)
		return r;
	p += r;
	if ((r = http_crlf(p, end)) <= 0)
		return r;
	p += r;

	req->method_bit = http_method_bit(req->method.p, req->method.len);
	if (http_split_target(req, &authority) < 0)
		return HTTP_ERR_MALFORMED;

	memset(&a, 0, sizeof(a));
	a.cl = -1;
	memset(&req->framing, 0, sizeof(req->framing));
	r = http_parse_fields(buf, p, end, req->headers, &req->nheaders, &a, &req->framing);
	if (r <= 0)
		return r;

	/* RFC 9112 3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0, and a valid one. */
	if (a.host_count > 1 || (a.host_count == 0 && req->version_minor == 1) ||
	    !http_host_valid(a.host))
		return HTTP_ERR_MALFORMED;
	/* RFC 9112 3.2.2: the authority of an absolute-form target replaces Host. */
	if (authority.p != NULL)
		req->host = authority;
	else if (a.host.p != NULL)
		req->host = a.host;
	else {
		req->host.p = buf;
		req->host.len = 0;
	}
	if (a.request_id.p != NULL)
		req->request_id = a.request_id;
	else {
		req->request_id.p = buf;
		req->request_id.len = 0;
	}

	/* RFC 9112 6.1 and 6.3: smuggling defences. */
	struct http_framing *f = &req->framing;
	f->content_length = -1;
	if (a.te_seen) {
		if (a.cl_seen)
			return HTTP_ERR_FRAMING;
		/* Another coding would reach the upstream undecoded and unannounced (nginx: 501). */
		if (!a.te_only_chunked)
			return HTTP_ERR_NOT_IMPLEMENTED;
		f->chunked = 1;
		if (req->version_minor == 0)
			f->conn_close = 1;      /* TE in HTTP/1.0: serve it, then close */
	} else if (a.cl_seen) {
		if (a.cl_bad)
			return HTTP_ERR_FRAMING;
		f->content_length = a.cl;
	}
	return r;
}

ssize_t
http_parse_response(const char *buf, size_t len, struct http_response *resp)
{
	const char *p = buf, *end = buf + len;
	struct http_acc a;
	ssize_t r;

	if ((r = http_parse_version(p, end, &resp->version_minor)) <= 0)
		return r;
	p += r;
	if (p == end)
		return HTTP_INCOMPLETE;
	if (*p != ' ')
		return HTTP_ERR_MALFORMED;
	p++;

	int status = 0;
	for (int i = 0; i < 3; i++, p++) {
		if (p == end)
			return HTTP_INCOMPLETE;
		if (!(http_ctype[(unsigned char)*p] & C_DIGIT) || (i == 0 && *p == '0'))
			return HTTP_ERR_MALFORMED;
		status = status * 10 + (*p - '0');
	}
	resp->status = status;

	/* The SP before an empty reason is often omitted; accept both, as nginx does. */
	if (p == end)
		return HTTP_INCOMPLETE;
	if (*p == ' ') {
		p++;
		const char *rs = p;
		p = http_scan(p, end, C_VALUE, 0x20);
		resp->reason.p = rs;
		resp->reason.len = (size_t)(p - rs);
	} else {
		resp->reason.p = p;
		resp->reason.len = 0;
	}
	if ((r = http_crlf(p, end)) <= 0)
		return r;
	p += r;

	memset(&a, 0, sizeof(a));
	a.cl = -1;
	memset(&resp->framing, 0, sizeof(resp->framing));
	r = http_parse_fields(buf, p, end, resp->headers, &resp->nheaders, &a, &resp->framing);
	if (r <= 0)
		return r;

	/* RFC 9112 6.3: Transfer-Encoding overrides Content-Length in a response. */
	struct http_framing *f = &resp->framing;
	f->content_length = -1;
	if (a.te_seen) {
		if (a.te_bad)
			return HTTP_ERR_FRAMING;
		if (a.te_last_chunked)
			f->chunked = 1;
		else
			f->until_close = 1;
		/* Framing that had to be disambiguated: never reuse this connection. */
		if (a.cl_seen || resp->version_minor == 0)
			f->conn_close = 1;
	} else if (a.cl_seen) {
		if (a.cl_bad)
			return HTTP_ERR_FRAMING;
		f->content_length = a.cl;
	} else {
		f->until_close = 1;
	}
	return r;
}

/* Reason phrases of RFC 9110 15. */
#define HTTP_REASONS(X) \
	X(100, "Continue") X(101, "Switching Protocols") X(103, "Early Hints") \
	X(200, "OK") X(201, "Created") X(202, "Accepted") \
	X(203, "Non-Authoritative Information") X(204, "No Content") X(205, "Reset Content") \
	X(206, "Partial Content") X(300, "Multiple Choices") X(301, "Moved Permanently") \
	X(302, "Found") X(303, "See Other") X(304, "Not Modified") \
	X(307, "Temporary Redirect") X(308, "Permanent Redirect") X(400, "Bad Request") \
	X(401, "Unauthorized") X(402, "Payment Required") X(403, "Forbidden") \
	X(404, "Not Found") X(405, "Method Not Allowed") X(406, "Not Acceptable") \
	X(407, "Proxy Authentication Required") X(408, "Request Timeout") X(409, "Conflict") \
	X(410, "Gone") X(411, "Length Required") X(412, "Precondition Failed") \
	X(413, "Content Too Large") X(414, "URI Too Long") X(415, "Unsupported Media Type") \
	X(416, "Range Not Satisfiable") X(417, "Expectation Failed") \
	X(421, "Misdirected Request") X(422, "Unprocessable Content") \
	X(425, "Too Early") X(426, "Upgrade Required") X(428, "Precondition Required") \
	X(429, "Too Many Requests") X(431, "Request Header Fields Too Large") \
	X(451, "Unavailable For Legal Reasons") X(500, "Internal Server Error") \
	X(501, "Not Implemented") X(502, "Bad Gateway") X(503, "Service Unavailable") \
	X(504, "Gateway Timeout") X(505, "HTTP Version Not Supported")

struct http_str
http_reason(int status)
{
	struct http_str r = { "", 0 };

	switch (status) {
#define HTTP_REASON_CASE(code, text) \
	case code: r.p = text; r.len = sizeof(text) - 1; break;
	HTTP_REASONS(HTTP_REASON_CASE)
#undef HTTP_REASON_CASE
	}
	return r;
}

/* ------------------------------------------------------------------ chunked decoder */

enum http_chunked_state {
	CH_SIZE,                /* chunk-size hex digits */
	CH_SIZE_WS,             /* BWS after the size: only an extension may follow */
	CH_EXT,                 /* chunk extensions, skipped up to CR */
	CH_SIZE_LF,             /* LF ending the size line */
	CH_DATA,
	CH_DATA_CR,             /* CRLF after chunk data */
	CH_DATA_LF,
	CH_TRAILER_START,       /* start of a trailer line, or the final CRLF */
	CH_TRAILER,             /* inside a trailer line */
	CH_TRAILER_LF,
	CH_FINAL_LF,
	CH_DONE,
	CH_ERROR
};

#define HTTP_CHUNK_MAX ((uint64_t)1 << 62)

void
http_chunked_init(struct http_chunked *c)
{
	memset(c, 0, sizeof(*c));
	c->state = CH_SIZE;
}

static inline int
http_hexval(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

int
http_chunked_feed(struct http_chunked *c, const char *p, size_t n, size_t *consumed,
    size_t *data_off, size_t *data_len)
{
	size_t i = 0;
	int hv;

	*data_off = 0;
	*data_len = 0;
	while (i < n) {
		unsigned char ch = (unsigned char)p[i];

		switch (c->state) {
		case CH_SIZE:
			if ((hv = http_hexval(ch)) >= 0) {
				if (c->remaining > (HTTP_CHUNK_MAX - (unsigned)hv) / 16)
					goto error;
				c->remaining = c->remaining * 16 + (unsigned)hv;
				c->seen_digit = 1;
				if (++c->line_len > HTTP_CHUNKED_MAX_LINE)
					goto error;     /* endless leading zeros */
				break;
			}
			if (!c->seen_digit)
				goto error;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (ch == ';')
				c->state = CH_EXT;
			else if (ch == ' ' || ch == '\t')
				c->state = CH_SIZE_WS;
			else
				goto error;
			break;
		case CH_SIZE_WS:
			/* RFC 9112 7.1.1: BWS belongs to a chunk-ext, so "5 \r\n" is malformed. */
			if (++c->line_len > HTTP_CHUNKED_MAX_LINE)
				goto error;
			if (ch == ';')
				c->state = CH_EXT;
			else if (ch != ' ' && ch != '\t')
				goto error;
			break;
		case CH_EXT:
			/* Extensions are ignored, but may not hide a line break or control byte. */
			if (++c->line_len > HTTP_CHUNKED_MAX_LINE)
				goto error;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (!(http_ctype[ch] & C_VALUE))
				goto error;
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				goto error;
			c->line_len = 0;
			c->state = c->remaining == 0 ? CH_TRAILER_START : CH_DATA;
			break;
		case CH_DATA: {
			size_t avail = n - i;
			size_t take = c->remaining < avail ? (size_t)c->remaining : avail;

			c->remaining -= take;
			if (c->remaining == 0)
				c->state = CH_DATA_CR;
			*data_off = i;
			*data_len = take;
			*consumed = i + take;
			return HTTP_CHUNKED_DATA;
		}
		case CH_DATA_CR:
			if (ch != '\r')
				goto error;
			c->state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				goto error;
			c->state = CH_SIZE;
			c->seen_digit = 0;
			c->line_len = 0;
			break;
		case CH_TRAILER_START:
			/* line_len now counts every trailer byte, against one total bound. */
			if (ch == '\r') {
				c->state = CH_FINAL_LF;
				break;
			}
			if (!(http_ctype[ch] & C_TCHAR))
				goto error;     /* obs-fold, bare LF, empty name */
			c->state = CH_TRAILER;
			if (++c->line_len > HTTP_CHUNKED_MAX_TRAILER)
				goto error;
			break;
		case CH_TRAILER:
			if (++c->line_len > HTTP_CHUNKED_MAX_TRAILER)
				goto error;
			if (ch == '\r')
				c->state = CH_TRAILER_LF;
			else if (!(http_ctype[ch] & C_VALUE))
				goto error;
			break;
		case CH_TRAILER_LF:
			if (ch != '\n')
				goto error;
			if (++c->line_len > HTTP_CHUNKED_MAX_TRAILER)
				goto error;
			c->state = CH_TRAILER_START;
			break;
		case CH_FINAL_LF:
			if (ch != '\n')
				goto error;
			c->state = CH_DONE;
			*consumed = i + 1;
			return HTTP_CHUNKED_DONE;
		case CH_DONE:
			*consumed = i;
			return HTTP_CHUNKED_DONE;
		default:
			goto error;
		}
		i++;
	}
	*consumed = i;
	if (c->state == CH_DONE)
		return HTTP_CHUNKED_DONE;
	return c->state == CH_ERROR ? HTTP_CHUNKED_ERROR : HTTP_CHUNKED_MORE;

error:
	c->state = CH_ERROR;
	*consumed = i;
	return HTTP_CHUNKED_ERROR;
}
