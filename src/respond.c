#include "config.h"
#include "respond.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

void
respond_json_escape(struct evbuffer *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, run = 0;

	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[6];

		if (ch >= 0x20 && ch != '"' && ch != '\\')
			continue;
		evbuffer_add(out, s + run, i - run);
		run = i + 1;
		if (ch == '"' || ch == '\\') {
			esc[0] = '\\';
			esc[1] = (char)ch;
			evbuffer_add(out, esc, 2);
		} else {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[ch >> 4];
			esc[5] = hex[ch & 15];
			evbuffer_add(out, esc, 6);
		}
	}
	evbuffer_add(out, s + run, len - run);
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

	evbuffer_add_printf(out, "HTTP/1.1 %d %.*s\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\nX-Request-Id: %.*s\r\n%s%s\r\n",
	    info->status, (int)reason.len, reason.p, body_len,
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
