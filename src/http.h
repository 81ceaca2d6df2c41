/* HTTP/1.1 message heads and chunked framing, parsed in place: every string points into the
 * caller's buffer, nothing is copied or allocated. */
#ifndef JG_HTTP_H
#define JG_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "http_method.h"

#define HTTP_MAX_HEADERS 100

struct http_str {
	const char *p;
	size_t len;
};

/* The header names jsongate's own header handling looks for, told apart once, by the parser
 * (http_name_of). */
enum http_name {
	HN_UNKNOWN,                     /* not looked at yet (a header made by hand): 0 */
	HN_OTHER,
	HN_HOST,
	HN_CONTENT_LENGTH,
	HN_TRANSFER_ENCODING,
	HN_CONNECTION,
	HN_KEEP_ALIVE,
	HN_TE,
	HN_TRAILER,
	HN_UPGRADE,
	HN_PROXY,                       /* Proxy-*: hop-by-hop */
	HN_EXPECT,
	HN_REQUEST_ID,
	HN_XFF,                         /* X-Forwarded-For */
	HN_XFP,                         /* X-Forwarded-Proto */
	HN_DATE,
	HN_ETAG
};

struct http_header {
	struct http_str name;
	struct http_str value;          /* leading/trailing OWS removed */
	unsigned char kind;             /* enum http_name */
};

/* Which of enum http_name a name is. */
enum http_name http_name_of(const char *name, size_t len);

/* The header's enum http_name, from the parser or from its name. */
static inline enum http_name
http_header_kind(const struct http_header *h)
{
	return h->kind != HN_UNKNOWN ? (enum http_name)h->kind :
	    http_name_of(h->name.p, h->name.len);
}

/* Fields common to requests and responses, derived from the headers while parsing. */
struct http_framing {
	int64_t content_length;         /* -1 when absent */
	unsigned chunked : 1;           /* Transfer-Encoding: chunked (a response's: ends in it) */
	unsigned conn_close : 1;        /* Connection: close; also set for a response framed by
					 * both TE and CL, and for TE in HTTP/1.0: do not reuse */
	unsigned conn_keepalive : 1;    /* Connection: keep-alive (matters for HTTP/1.0) */
	unsigned expect_continue : 1;   /* Expect: 100-continue */
	unsigned upgrade : 1;           /* Connection: upgrade / Upgrade header present */
	unsigned until_close : 1;       /* response only: neither Content-Length nor a final
					 * chunked coding, so a body (if the status and method
					 * allow one) runs until the connection closes */
	unsigned lists_known : 1;       /* parsed: conn_lists says what the head's Connection
					 * headers list (0: a head made by hand, not known) */
	unsigned conn_lists : 1;        /* a Connection header names something besides close
					 * and keep-alive: a field to drop (RFC 9110 7.6.1) */
};

struct http_request {
	struct http_str method;
	unsigned method_bit;            /* METHOD_* of http_method.h */
	struct http_str target;         /* request-target as sent */
	struct http_str path;           /* target up to '?' (origin-form), or the path of an absolute-form */
	struct http_str query;          /* from '?' inclusive, or empty */
	int version_minor;              /* 0 or 1 (HTTP/1.x only) */
	struct http_str host;           /* Host header value (the authority of an absolute-form
					 * target, RFC 9112 3.2.2), or empty */
	struct http_str request_id;     /* X-Request-Id header value, or empty */
	struct http_framing framing;
	size_t nheaders;
	struct http_header headers[HTTP_MAX_HEADERS];
};

struct http_response {
	int status;
	struct http_str reason;
	int version_minor;
	struct http_framing framing;
	size_t nheaders;
	struct http_header headers[HTTP_MAX_HEADERS];
};

/* Results of the head parsers: > 0 is the head length in bytes (through the blank line). */
enum http_parse_result {
	HTTP_INCOMPLETE = 0,            /* need more bytes */
	HTTP_ERR_MALFORMED = -1,        /* 400: syntax, bare LF in the request line, obs-fold, ... */
	HTTP_ERR_TOO_MANY_HEADERS = -2, /* 431 */
	HTTP_ERR_FRAMING = -3,          /* 400: CL with TE (request), conflicting CLs, bad CL,
					 * chunked applied twice (response) */
	HTTP_ERR_VERSION = -4,          /* 505: not HTTP/1.x */
	HTTP_ERR_NOT_IMPLEMENTED = -5   /* 501: request Transfer-Encoding other than "chunked" */
};

/* Parse a request head from buf[0..len).  Does not look past the blank line. */
ssize_t http_parse_request(const char *buf, size_t len, struct http_request *req);
/* Parse a response head.  1xx responses are returned like any other; the caller skips them. */
ssize_t http_parse_response(const char *buf, size_t len, struct http_response *resp);

/*
 * The case-insensitive compares of names, tokens and values (ASCII only, no locale): a byte,
 * eight bytes at once, and two strings a word at a time.
 */
static inline unsigned char
http_lc(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? (unsigned char)(c | 0x20) : c;
}

static inline uint64_t
http_lc8(uint64_t w)
{
	uint64_t seven = w & 0x7f7f7f7f7f7f7f7fULL;
	/* High bit of each byte that is 'A' to 'Z': >= 'A', not > 'Z', not above 0x7f. */
	uint64_t upper = (seven + 0x3f3f3f3f3f3f3f3fULL) & ~(seven + 0x2525252525252525ULL) &
	    ~w & 0x8080808080808080ULL;

	return w | upper >> 2;
}

/* a[0..n) and b[0..n) are equal but for ASCII case.  A literal side costs nothing: the
 * compiler folds its lowercasing. */
static inline int
http_ieq(const char *a, const char *b, size_t n)
{
	uint64_t x, y;
	uint32_t h[2];

	if (n >= 8) {
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (http_lc8(x) != http_lc8(y))
				return 0;
		}
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		return http_lc8(x) == http_lc8(y);
	}
	if (n >= 4) {
		/* The first and the last four bytes, overlapping when n < 8. */
		memcpy(&h[0], a, 4);
		memcpy(&h[1], a + n - 4, 4);
		memcpy(&x, h, 8);
		memcpy(&h[0], b, 4);
		memcpy(&h[1], b + n - 4, 4);
		memcpy(&y, h, 8);
		return http_lc8(x) == http_lc8(y);
	}
	for (size_t i = 0; i < n; i++)
		if (http_lc((unsigned char)a[i]) != http_lc((unsigned char)b[i]))
			return 0;
	return 1;
}

/* The value of a hex digit, or -1. */
static inline int
http_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* s[0..len) is the literal lit, ignoring case. */
#define HTTP_IEQ(s, len, lit) \
	((len) == sizeof(lit) - 1 && http_ieq((s), (lit), sizeof(lit) - 1))

/* s[0..len) is a token (RFC 9110 5.6.2): a header name, a coding, a parameter name. */
int http_is_token(const char *s, size_t len);

/*
 * Next element of a comma-separated list (RFC 9110 5.6.1) in p[0..end), OWS trimmed; empty
 * elements are returned as such.  Returns where the following element starts, or NULL after
 * the last one.
 */
const char *http_list_next(const char *p, const char *end, struct http_str *elem);

/*
 * The elements of every header line named lower_name, in order, as one list: repeated
 * lines of a list field are one comma-separated list (RFC 9110 5.3).  Empty elements are
 * skipped.  start, then next until it returns 0.
 */
struct http_elements {
	const struct http_header *h, *end;
	const char *name;
	const char *p, *vend;           /* the rest of the current line; p NULL between lines */
};
void http_elements_start(struct http_elements *it, const struct http_header *h, size_t n,
    const char *lower_name);
int http_elements_next(struct http_elements *it, struct http_str *elem);

/*
 * A list element "token;param;..." of Accept-Encoding, TE, Accept and the like: *token is
 * its first part, and the result its weight (RFC 9110 12.4.2) in thousandths, 1000 without
 * a q parameter ("q" in any case, as ABNF literals are), or -1 when q is not a qvalue
 * ("0" to "1" with at most three decimals).
 */
int http_weight(struct http_str elem, struct http_str *token);

/* The reason phrase of RFC 9110 for status ("Content Too Large"), or an empty string;
 * either is also NUL-terminated. */
struct http_str http_reason(int status);

/* Case-insensitive header name compare against a NUL-terminated lowercase name. */
int http_header_is(const struct http_header *h, const char *lower_name);
/* The value of the first header named lower_name, or an empty string. */
struct http_str http_find_header(const struct http_header *h, size_t n, const char *lower_name);

/*
 * Incremental chunked-body decoder.  Works on arbitrary fragments (bytes may arrive one at a
 * time) so the caller can feed evbuffer segments without pulling them up.  Chunk extensions are
 * skipped; trailers are parsed and discarded: the proxy sends a request's payload upstream in
 * chunks of its own, without either, as nginx does.  Sizes over 2^62 and malformed lines are
 * errors.
 */
struct http_chunked {
	int state;                      /* private */
	uint64_t remaining;             /* private: payload bytes left in the current chunk */
	unsigned line_len;              /* private: length of the size line / trailer line so far */
	unsigned char seen_digit;       /* private */
};

enum http_chunked_result {
	HTTP_CHUNKED_MORE = 0,          /* consumed everything given, message not finished */
	HTTP_CHUNKED_DATA = 1,          /* stopped after a payload run: see *data, *data_len */
	HTTP_CHUNKED_DONE = 2,          /* last chunk and trailers consumed: message complete */
	HTTP_CHUNKED_ERROR = -1         /* invalid framing */
};

#define HTTP_CHUNKED_MAX_LINE 4096     /* bytes of one chunk-size line (extensions included) */
#define HTTP_CHUNKED_MAX_TRAILER 16384 /* bytes of all trailer lines together */

void http_chunked_init(struct http_chunked *c);
/*
 * Consume bytes from p[0..n).  *consumed is set to the number of bytes used (framing and
 * payload alike).  On HTTP_CHUNKED_DATA, payload bytes are p[*data_off .. *data_off+*data_len)
 * and lie inside the consumed range; call again with the rest.  On DONE the message ended at
 * p + *consumed (bytes after it belong to the next message).
 */
int http_chunked_feed(struct http_chunked *c, const char *p, size_t n, size_t *consumed,
    size_t *data_off, size_t *data_len);

#endif
