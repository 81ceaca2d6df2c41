/* Content codings of bodies: which a message has and a client accepts, inflating, gzip. */
#include "body_coding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <zlib.h>

#include "body.h"

/* A worker's zlib states, reset per body: no allocation per use. */
struct body_coding_state {
	z_stream gz;                    /* deflate state */
	int gz_ready;
	struct evbuffer *gz_out;
	z_stream inf;                   /* inflate state */
	int inf_ready;
	enum body_coding inf_coding;
	int inf_ended;                  /* the compressed data ended (a gzip member may follow) */
	unsigned inf_magic;             /* magic bytes of the next gzip member seen so far */
	char *inf_out;                  /* where a prefix's output starts */
};

struct body_coding_state *
body_coding_state_new(void)
{
	return calloc(1, sizeof(struct body_coding_state));
}

enum body_coding
body_coding(struct http_str ce)
{
	if (ce.len == 0 || HTTP_IEQ(ce.p, ce.len, "identity"))
		return BODY_CODING_IDENTITY;
	if (HTTP_IEQ(ce.p, ce.len, "gzip") || HTTP_IEQ(ce.p, ce.len, "x-gzip"))
		return BODY_CODING_GZIP;
	if (HTTP_IEQ(ce.p, ce.len, "deflate"))
		return BODY_CODING_DEFLATE;
	return BODY_CODING_OTHER;
}

/* Make the pool's inflate state ready for a body in coding. */
static int
body_inflate_begin(struct body_coding_state *z, enum body_coding coding)
{
	/* gzip: 15 + 16; deflate: 15 + 32 detects a zlib (or gzip) header. */
	int bits = coding == BODY_CODING_GZIP ? 15 + 16 : 15 + 32;

	z->inf_coding = coding;
	z->inf_ended = 0;
	z->inf_magic = 0;
	if (z->inf_ready)
		return inflateReset2(&z->inf, bits) == Z_OK ? 0 : -1;
	memset(&z->inf, 0, sizeof(z->inf));
	if (inflateInit2(&z->inf, bits) != Z_OK)
		return -1;
	z->inf_ready = 1;
	return 0;
}

/*
 * After the end of a gzip member only another member may follow (RFC 1952 2.2).  Its two
 * magic bytes may come in separate feeds: they are taken from the input here and given to
 * zlib together once both are seen.  Returns 0 when zlib holds the start of the next member,
 * BODY_INFLATE_SHORT when the input ended within the magic bytes, or BODY_INFLATE_ERROR.
 */
static int
body_inflate_next_member(struct body_coding_state *z, const char **error)
{
	static const Bytef magic[2] = { 0x1f, 0x8b };
	z_stream *zs = &z->inf;
	Bytef *next;
	uInt avail;
	int r;

	for (; z->inf_magic < 2 && zs->avail_in > 0; z->inf_magic++) {
		if (z->inf_coding != BODY_CODING_GZIP || zs->next_in[0] != magic[z->inf_magic]) {
			*error = "bytes after the end of the compressed body";
			return BODY_INFLATE_ERROR;
		}
		zs->next_in++;
		zs->avail_in--;
	}
	if (z->inf_magic < 2)
		return BODY_INFLATE_SHORT;
	if (inflateReset(zs) != Z_OK)
		return BODY_INFLATE_ERROR;
	next = zs->next_in;
	avail = zs->avail_in;
	zs->next_in = (Bytef *)(uintptr_t)magic;
	zs->avail_in = 2;
	r = inflate(zs, Z_NO_FLUSH);
	r = zs->avail_in == 0 && (r == Z_OK || r == Z_BUF_ERROR) ? 0 : BODY_INFLATE_ERROR;
	zs->next_in = next;
	zs->avail_in = avail;
	z->inf_magic = 0;
	z->inf_ended = 0;
	return r;
}

/*
 * Inflate what the pool's stream holds until its output is full, its input is used up or the
 * compressed data ends.  A gzip body may be several members one after the other; any other
 * byte after the end of the compressed data makes the body invalid.
 */
static int
body_inflate_run(struct body_coding_state *z, const char **error)
{
	z_stream *zs = &z->inf;
	int r;

	*error = "cannot inflate the body";
	for (;;) {
		if (z->inf_ended) {
			if (zs->avail_in == 0 && z->inf_magic == 0)
				return BODY_INFLATE_END;
			if ((r = body_inflate_next_member(z, error)) != 0)
				return r;
		}
		r = inflate(zs, Z_NO_FLUSH);
		if (r == Z_STREAM_END) {
			z->inf_ended = 1;
			continue;
		}
		if (r != Z_OK && r != Z_BUF_ERROR)
			return BODY_INFLATE_ERROR;
		if (zs->avail_out == 0)
			return BODY_INFLATE_FULL;
		if (zs->avail_in == 0)
			return BODY_INFLATE_SHORT;
	}
}

/* Inflate src into a new block, bounded by max; NULL with *error set on failure. */
struct body_block *
body_inflate(struct body_pool *pool, const char *src, size_t len, enum body_coding coding,
    size_t max, size_t *out_len, const char **error)
{
	struct body_coding_state *z = body_pool_coding(pool);
	struct body_block *b;
	z_stream *zs = &z->inf;
	size_t done;
	int r;

	*error = "cannot inflate the body";
	if ((b = body_block_pool_get(body_pool_blocks(pool), len * 4 < max ? len * 4 : max)) == NULL)
		return NULL;
	if (body_inflate_begin(z, coding) != 0) {
		body_block_release(b);
		return NULL;
	}
	zs->next_in = (Bytef *)(uintptr_t)src;
	zs->avail_in = (uInt)len;
	zs->next_out = (Bytef *)body_block_data(b);
	zs->avail_out = (uInt)body_block_size(b);
	while ((r = body_inflate_run(z, error)) == BODY_INFLATE_FULL) {
		done = body_block_size(b);
		if (done >= max) {
			*error = "inflated body exceeds limits.max_body";
			goto fail;
		}
		if (body_block_reserve(&b, body_block_size(b) * 2) != 0)
			goto fail;
		zs->next_out = (Bytef *)body_block_data(b) + done;
		zs->avail_out = (uInt)(body_block_size(b) - done);
	}
	if (r != BODY_INFLATE_END)
		goto fail;      /* invalid, or the input ended before the stream did */
	done = (size_t)((char *)zs->next_out - body_block_data(b));
	if (done > max) {
		*error = "inflated body exceeds limits.max_body";
		goto fail;
	}
	*out_len = done;
	return b;
fail:
	body_block_release(b);
	return NULL;
}

int
body_prefix_inflate_start(struct body_pool *pool, enum body_coding coding, char *out,
    size_t cap)
{
	struct body_coding_state *z = body_pool_coding(pool);

	if (body_inflate_begin(z, coding) != 0)
		return -1;
	z->inf_out = out;
	z->inf.next_out = (Bytef *)out;
	z->inf.avail_out = (uInt)cap;
	return 0;
}

int
body_prefix_inflate(struct body_pool *pool, const char *src, size_t len, size_t *out_len)
{
	struct body_coding_state *z = body_pool_coding(pool);
	const char *error;
	int r;

	z->inf.next_in = (Bytef *)(uintptr_t)src;
	z->inf.avail_in = (uInt)len;
	r = body_inflate_run(z, &error);
	*out_len = (size_t)((char *)z->inf.next_out - z->inf_out);
	return r;
}

enum body_coding
body_content_coding(const struct http_header *h, size_t n)
{
	enum body_coding coding = BODY_CODING_IDENTITY, one;
	struct http_elements it;
	struct http_str e;

	http_elements_start(&it, h, n, "content-encoding");
	while (http_elements_next(&it, &e)) {
		if ((one = body_coding(e)) == BODY_CODING_IDENTITY)
			continue;
		if (coding != BODY_CODING_IDENTITY)
			return BODY_CODING_OTHER;       /* one coding over another */
		coding = one;
	}
	return coding;
}

int
body_accepts_gzip(const struct http_header *h, size_t n)
{
	int gzip = -1, any = -1, w;
	struct http_elements it;
	struct http_str e, coding;

	http_elements_start(&it, h, n, "accept-encoding");
	while (http_elements_next(&it, &e)) {
		if ((w = http_weight(e, &coding)) < 0)
			w = 0;          /* not a qvalue: not a preference to act on */
		if (HTTP_IEQ(coding.p, coding.len, "gzip") || HTTP_IEQ(coding.p, coding.len, "x-gzip"))
			gzip = gzip > w ? gzip : w;
		else if (HTTP_IEQ(coding.p, coding.len, "*"))
			any = any > w ? any : w;
	}
	/* gzip by name, else "*" for any coding not named (RFC 9110 12.5.3). */
	return gzip >= 0 ? gzip > 0 : any > 0;
}

void
body_limit_accept_encoding(struct http_request *req, char *buf, size_t size)
{
	size_t i, first, n = 0, out = 0;
	struct http_elements it;
	struct http_str e, coding;

	for (first = 0; first < req->nheaders; first++)
		if (http_header_is(&req->headers[first], "accept-encoding"))
			break;
	if (first == req->nheaders)
		return;         /* none sent: any coding goes, and upstreams answer identity */
	/* The codings jsongate decodes that the client does not refuse, as it sent them.  Its
	 * refusals (q=0) are not passed on: what comes back is decoded here, and what the
	 * client gets is identity or gzip for compress: gzip, as it accepts. */
	http_elements_start(&it, req->headers + first, req->nheaders - first, "accept-encoding");
	while (http_elements_next(&it, &e)) {
		if (http_weight(e, &coding) <= 0 || !http_is_token(coding.p, coding.len) ||
		    body_coding(coding) == BODY_CODING_OTHER)
			continue;
		if (n + 2 + e.len > size) {
			n = 0;
			break;
		}
		if (n > 0) {
			memcpy(buf + n, ", ", 2);
			n += 2;
		}
		memcpy(buf + n, e.p, e.len);
		n += e.len;
	}
	if (n == 0) {
		memcpy(buf, "identity", 8);
		n = 8;
	}
	req->headers[first].value.p = buf;
	req->headers[first].value.len = n;
	/* One header holds the whole list now. */
	for (i = 0; i < req->nheaders; i++)
		if (i <= first || !http_header_is(&req->headers[i], "accept-encoding"))
			req->headers[out++] = req->headers[i];
	req->nheaders = out;
}

int
body_gzip(struct body_pool *pool, struct evbuffer *data)
{
	struct body_coding_state *z = body_pool_coding(pool);
	struct evbuffer_iovec in, out[1];
	size_t len = evbuffer_get_length(data);
	int r, flush;

	if (!z->gz_ready) {
		memset(&z->gz, 0, sizeof(z->gz));
		if (deflateInit2(&z->gz, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
			return -1;
		z->gz_ready = 1;
	} else if (deflateReset(&z->gz) != Z_OK) {
		return -1;
	}
	if (z->gz_out == NULL && (z->gz_out = evbuffer_new()) == NULL)
		return -1;
	/* Level 1: the point is fewer bytes on the wire for little CPU, as nginx's default. */
	do {
		if (evbuffer_peek(data, -1, NULL, &in, 1) < 1)
			in.iov_len = 0;
		z->gz.next_in = in.iov_base;
		z->gz.avail_in = (uInt)in.iov_len;
		flush = evbuffer_get_length(data) == in.iov_len ? Z_FINISH : Z_NO_FLUSH;
		do {
			if (evbuffer_reserve_space(z->gz_out, 16384, out, 1) < 1)
				return -1;
			z->gz.next_out = out[0].iov_base;
			z->gz.avail_out = (uInt)out[0].iov_len;
			r = deflate(&z->gz, flush);
			out[0].iov_len -= z->gz.avail_out;
			evbuffer_commit_space(z->gz_out, out, 1);
			if (r == Z_STREAM_ERROR)
				return -1;
		} while (z->gz.avail_out == 0);
		evbuffer_drain(data, in.iov_len);
	} while (flush != Z_FINISH);
	/* A large body's buffers are free now, its compressed copy is small. */
	if (len > BODY_POOL_BLOCK)
		body_block_pool_large_done(body_pool_blocks(pool));
	return evbuffer_add_buffer(data, z->gz_out);
}

void
body_coding_state_free(struct body_coding_state *z)
{
	if (z == NULL)
		return;
	if (z->gz_ready)
		deflateEnd(&z->gz);
	if (z->inf_ready)
		inflateEnd(&z->inf);
	if (z->gz_out != NULL)
		evbuffer_free(z->gz_out);
	free(z);
}
