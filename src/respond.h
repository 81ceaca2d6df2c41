/* Responses the gateway writes itself: JSON error bodies of DESIGN.md. */
#ifndef JG_RESPOND_H
#define JG_RESPOND_H

#include <stddef.h>
#include "errors.h"
#include "http.h"

struct evbuffer;

enum respond_connection {
	RESPOND_CONN_NONE,              /* HTTP/1.1 keep-alive: no Connection header */
	RESPOND_CONN_KEEPALIVE,         /* HTTP/1.0 client that asked for keep-alive */
	RESPOND_CONN_CLOSE
};

/* Append a complete error response to out (head_only: its head, for a HEAD request), with a
 * Date of now; message NULL uses the table's text; extra (NULL: none) are header lines, each
 * ending in CRLF, to add (a 405's Allow).  Returns the number of bytes appended, or 0 on
 * allocation failure; *head_len is set to those of the head (the rest is the body). */
size_t respond_error(struct evbuffer *out, enum gateway_error err, const char *message,
    struct http_str request_id, enum respond_connection conn, const char *extra, int head_only,
    size_t *head_len);

/* Append s to out as the inside of a JSON string (quotes not included), by jstr_escape's
 * policy. */
void respond_json_escape(struct evbuffer *out, const char *s, size_t len);

#endif
