#include "http_body.h"

#include <event2/buffer.h>

int
http_chunked_next(struct http_chunked *ch, struct evbuffer *in, size_t off, size_t max,
    struct http_chunk_piece *piece)
{
	struct evbuffer_ptr pos;
	struct evbuffer_iovec v;
	size_t n;
	int r;

	piece->consumed = piece->data_off = piece->data_len = 0;
	piece->data = NULL;
	if (max == 0 || evbuffer_ptr_set(in, &pos, off, EVBUFFER_PTR_SET) != 0 ||
	    evbuffer_peek(in, -1, &pos, &v, 1) < 1 || v.iov_len == 0)
		return HTTP_CHUNKED_NONE;
	n = v.iov_len < max ? v.iov_len : max;
	r = http_chunked_feed(ch, v.iov_base, n, &piece->consumed, &piece->data_off,
	    &piece->data_len);
	if (r == HTTP_CHUNKED_DATA)
		piece->data = (const char *)v.iov_base + piece->data_off;
	return r;
}

int
http_chunked_take(struct http_chunked *ch, struct evbuffer *in, struct evbuffer *dst)
{
	struct http_chunk_piece p;
	int r;

	if ((r = http_chunked_next(ch, in, 0, (size_t)-1, &p)) == HTTP_CHUNKED_ERROR ||
	    r == HTTP_CHUNKED_NONE)
		return r;
	evbuffer_drain(in, p.data_off);
	if (dst != NULL)
		evbuffer_remove_buffer(in, dst, p.data_len);
	else
		evbuffer_drain(in, p.data_len);
	evbuffer_drain(in, p.consumed - p.data_off - p.data_len);
	return r;
}
