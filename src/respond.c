#include "config.h"
#include "respond.h"
#include "headers.h"
#include "jstr.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

void
respond_json_escape(struct evbuffer *out, const char *s, size_t len)
{
	struct evbuffer_iovec v;
	size_t used;

	/* A piece at a time, so that a long text needs no room six times its size at once. */
	while (len != 0) {
		if (evbuffer_reserve_space(out, 6 * 256 < 6 * len ? 6 * 256 : 6 * len, &v, 1) < 1)
			return;
		v.iov_len = jstr_escape_max(v.iov_base, s, len, v.iov_len, &used);
		evbuffer_commit_space(out, &v, 1);
		s += used;
		len -= used;
	}
}

size_t
respond_error(struct evbuffer *out, enum gateway_error err, const char *message,
    struct http_str request_id, enum respond_connection conn, const char *extra, int head_only,
    size_t *head_len)
{
	const struct gateway_error_info *info = &gateway_errors[err];
	struct http_str reason = http_reason(info->status);
	struct evbuffer *body = evbuffer_new();
	size_t before = evbuffer_get_length(out), body_len;

	*head_len = 0;
	if (body == NULL)
		return 0;
	if (message == NULL)
		message = info->text;
	evbuffer_add_printf(body, "{\"error\":{\"status\":%d,\"code\":\"%s\",\"message\":\"",
	    info->status, info->code);
	respond_json_escape(body, message, strlen(message));
	evbuffer_add(body, "\",\"request_id\":\"", 16);
	respond_json_escape(body, request_id.p, request_id.len);
	evbuffer_add(body, "\"}}", 3);
	body_len = evbuffer_get_length(body);

	evbuffer_add_printf(out, "HTTP/1.1 %d %.*s\r\nDate: %s\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\nX-Request-Id: %.*s\r\n%s%s\r\n",
	    info->status, (int)reason.len, reason.p, headers_date(), body_len,
	    (int)request_id.len, request_id.p,
	    conn == RESPOND_CONN_CLOSE ? "Connection: close\r\n" :
	    conn == RESPOND_CONN_KEEPALIVE ? "Connection: keep-alive\r\n" : "",
	    extra != NULL ? extra : "");
	*head_len = evbuffer_get_length(out) - before;
	if (!head_only)
		evbuffer_add_buffer(out, body);
	evbuffer_free(body);
	return evbuffer_get_length(out) - before;
}
