/* Header rules of a proxied message: hop-by-hop stripping, X-Forwarded-*, request ids. */
#ifndef JG_HEADERS_H
#define JG_HEADERS_H

#include <stddef.h>
#include "http.h"

struct evbuffer;
struct header_ops;
struct rewrite_vars;

#define REQUEST_ID_LEN 32               /* generated ids: 128 random bits as lowercase hex */

/* What the proxy adds to or changes in a request on its way upstream. */
struct headers_forward {
	const char *client_addr;        /* peer IP as text, appended to X-Forwarded-For */
	int tls;                        /* 1 when the client connection is TLS: X-Forwarded-Proto https */
	struct http_str request_id;     /* the id to send in X-Request-Id (kept or generated) */
	const char *host_override;      /* upstream host_header, or NULL to pass Host through */
	struct http_str target;         /* request-target to send (after strip_prefix) */
	struct http_str method;         /* method to send instead of the request's, or empty */
	const struct header_ops *ops;   /* the route's request_headers, or NULL */
	const struct rewrite_vars *vars;    /* their variables' values (ops only) */
};

/*
 * Append "METHOD target HTTP/1.1\r\n" and the end-to-end request headers to out: hop-by-hop
 * headers (Connection and the names it lists, Keep-Alive, TE, Trailer, Transfer-Encoding,
 * Upgrade, Proxy-*) and Content-Length are dropped, X-Forwarded-For is extended (or added),
 * X-Forwarded-Proto and X-Request-Id are replaced (or added), Host is passed or overridden.
 * Then the route's header ops: the headers they set or remove (ours included) are left out,
 * and the ones they set or add are written last.
 * The caller appends framing (Content-Length or Transfer-Encoding), Connection, and "\r\n".
 * Returns 0, or -1 on allocation failure.
 */
int headers_request_out(struct evbuffer *out, const struct http_request *req,
    const struct headers_forward *fw);

/*
 * Append "HTTP/1.1 STATUS REASON\r\n" and the end-to-end response headers (hop-by-hop and
 * Content-Length dropped as above); when request_id is not empty and the upstream did not send
 * X-Request-Id, it is added.  A Date is added (first, as the current time) when the upstream
 * sent none.  Then ops (the route's response_headers, or NULL) as for requests, with the
 * values of vars.
 * added is NULL when the body goes out as the upstream sent it; otherwise jsongate made or
 * changed it, and added holds the header lines (each ending in CR LF; "" for none) that
 * jsongate adds for it, written last: the upstream's strong ETag goes out weak ("abc" as
 * W/"abc", RFC 9110 8.8.1; a weak one as it is, one that is no entity-tag dropped), and a
 * Vary line of added is left out when the upstream's Vary lines list each of its elements
 * already (or "*").
 * The caller appends framing, Connection, and "\r\n".
 */
int headers_response_out(struct evbuffer *out, const struct http_response *resp,
    struct http_str request_id, const struct header_ops *ops, const struct rewrite_vars *vars,
    const char *added);

/* A field of an answer's head: its name as written, its value. */
struct headers_field {
	struct http_str name;
	struct http_str value;
};

/* An answer's head as fields, for a protocol that does not write it as HTTP/1.1 text.  The
 * spans point into the response, the request id, added, lines given to
 * headers_fields_lines, the thread's Date text, or store: valid until the next call.  Kept
 * from one answer to the next (no allocation once warm); zeroed to start. */
struct headers_fields {
	int status;
	size_t n;                       /* fields in f */
	size_t text_len;                /* bytes of the same head as HTTP/1.1 text, from its
	                                 * status line to the last field's CR LF */
	struct headers_field *f;
	size_t cap;
	char *store;                    /* values made here: weak ETags, the ops' values */
	size_t store_size;
};

/*
 * The status and the fields of the head headers_response_out writes, decided by the same
 * rules, in the same order, each as a name and a value instead of a line: the reason phrase
 * is not kept (text_len counts it).  Returns 0, or -1 on allocation failure.
 */
int headers_response_fields(struct headers_fields *hf, const struct http_response *resp,
    struct http_str request_id, const struct header_ops *ops, const struct rewrite_vars *vars,
    const char *added);
/* Append the fields of lines, header lines of jsongate's own ("Name: value" each ending in
 * CR LF, as request.answer_headers), the hop-by-hop ones and Content-Length left out.
 * Returns 0, or -1 on allocation failure. */
int headers_fields_lines(struct headers_fields *hf, const char *lines, size_t len);
void headers_fields_free(struct headers_fields *hf);

/* The current time as an HTTP-date (RFC 9110 5.6.7), "Sat, 05 Dec 2026 11:00:00 GMT",
 * HEADERS_DATE_LEN bytes and a NUL: formatted once a second per thread. */
#define HEADERS_DATE_LEN 29
const char *headers_date(void);

/* 1 for the headers every message loses on its way through: hop-by-hop ones (RFC 9110 7.6.1)
 * and Content-Length (jsongate frames each message itself). */
int headers_is_hop_by_hop(struct http_str name);

/* Fill out[0..REQUEST_ID_LEN) with a fresh random id (no NUL written).  Thread-safe. */
void headers_request_id_generate(char out[REQUEST_ID_LEN]);

/* A client-supplied X-Request-Id is kept only when it is 1..128 visible ASCII characters. */
int headers_request_id_acceptable(struct http_str id);

#endif
