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

/* Drop the piece's framing and move its data to dst (NULL: drop it too). */
static void
http_piece_take(struct evbuffer *in, const struct http_chunk_piece *p, struct evbuffer *dst)
{
	evbuffer_drain(in, p->data_off);
	if (dst != NULL)
		evbuffer_remove_buffer(in, dst, p->data_len);
	else
		evbuffer_drain(in, p->data_len);
	evbuffer_drain(in, p->consumed - p->data_off - p->data_len);
}

int
http_answer_next(const struct http_answer_body *b, struct evbuffer *in, size_t off,
    size_t max, int eof, struct http_chunk_piece *piece)
{
	size_t len = evbuffer_get_length(in), n;

	if (b->framing == HTTP_ANSWER_CHUNKED)
		return http_chunked_next(b->ch, in, off, max, piece);
	piece->consumed = piece->data_off = piece->data_len = 0;
	piece->data = NULL;
	if (b->framing == HTTP_ANSWER_LENGTH && *b->left == 0)
		return HTTP_CHUNKED_DONE;
	n = len > off ? len - off : 0;
	if (n > max)
		n = max;
	if (b->framing == HTTP_ANSWER_LENGTH && n > *b->left)
		n = (size_t)*b->left;
	if (n == 0)
		return b->framing == HTTP_ANSWER_CLOSE && eof ? HTTP_CHUNKED_DONE : HTTP_CHUNKED_NONE;
	if (b->framing == HTTP_ANSWER_LENGTH)
		*b->left -= n;
	piece->consumed = piece->data_len = n;
	return HTTP_CHUNKED_DATA;
}

int
http_answer_take(const struct http_answer_body *b, struct evbuffer *in, int eof,
    struct evbuffer *dst)
{
	struct http_chunk_piece p;
	int r;

	if ((r = http_answer_next(b, in, 0, (size_t)-1, eof, &p)) == HTTP_CHUNKED_ERROR ||
	    r == HTTP_CHUNKED_NONE)
		return r;
	http_piece_take(in, &p, dst);
	return r;
}
