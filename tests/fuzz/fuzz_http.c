/*
 * libFuzzer target for the HTTP/1.1 head parsers and the chunked decoder.
 *
 * Input: one control byte whose low three bits give a number of split lengths, those
 * lengths (one byte each), then the message.  The message goes to http_parse_request,
 * http_parse_response and http_chunked_feed; the decoder is fed whole, in the pieces the
 * split lengths describe, and byte by byte, and must give the same result every time.
 * Parsed heads also go through the header rules, whose output must be a well-formed head.
 * A request head with its path normalised in place (path_norm_head) parses again, to the
 * same head but for a normal path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "headers.h"
#include "http.h"
#include "path_norm.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

static int
fuzz_inside(struct http_str s, const char *buf, size_t len)
{
	return s.len == 0 || (s.p >= buf && s.p + s.len <= buf + len);
}

static void
fuzz_headers(const struct http_header *hs, size_t n, const char *buf, size_t len)
{
	FUZZ_CHECK(n <= HTTP_MAX_HEADERS);
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(hs[i].name.len > 0 && fuzz_inside(hs[i].name, buf, len));
		FUZZ_CHECK(fuzz_inside(hs[i].value, buf, len));
		for (size_t j = 0; j < hs[i].value.len; j++)
			FUZZ_CHECK(hs[i].value.p[j] != '\r' && hs[i].value.p[j] != '\n');
	}
}

/* Output of the header rules: CRLF-terminated lines, no bare CR or LF, no empty line. */
static void
fuzz_check_out(struct evbuffer *out)
{
	size_t len = evbuffer_get_length(out);
	const char *p = (const char *)evbuffer_pullup(out, -1);

	FUZZ_CHECK(len >= 2 && p[len - 2] == '\r' && p[len - 1] == '\n');
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\r')
			FUZZ_CHECK(i + 1 < len && p[i + 1] == '\n' && i > 0 && p[i - 1] != '\n');
		else if (p[i] == '\n')
			FUZZ_CHECK(i > 0 && p[i - 1] == '\r');
	}
	evbuffer_drain(out, len);
}

static void
fuzz_rules_request(const struct http_request *req)
{
	static struct evbuffer *out;
	struct headers_forward fw = {
		.client_addr = "192.0.2.1",
		.request_id = { "0123456789abcdef0123456789abcdef", 32 },
		.target = { NULL, 0 },
	};

	if (out == NULL)
		out = evbuffer_new();
	FUZZ_CHECK(headers_request_out(out, req, &fw) == 0);
	fuzz_check_out(out);
	fw.host_override = "upstream.internal";
	fw.target = req->target.p[0] == '/' ? req->target : req->path;
	fw.tls = 1;
	FUZZ_CHECK(headers_request_out(out, req, &fw) == 0);
	fuzz_check_out(out);
}

static void
fuzz_rules_response(const struct http_response *resp)
{
	static struct evbuffer *out;
	struct http_str id = { "abc", 3 };

	if (out == NULL)
		out = evbuffer_new();
	FUZZ_CHECK(headers_response_out(out, resp, id, NULL, NULL, NULL) == 0);
	fuzz_check_out(out);
}

static void
fuzz_norm_head(const char *buf, size_t len, const struct http_request *req)
{
	static struct http_request in, again;
	char *copy, *out;
	size_t n, end;
	ssize_t shift;

	if ((copy = malloc(len)) == NULL || (out = malloc(len)) == NULL) {
		free(copy);
		return;
	}
	memcpy(copy, buf, len);
	FUZZ_CHECK(http_parse_request(copy, len, &in) == (ssize_t)len);
	shift = path_norm_head(copy, len, &in);
	FUZZ_CHECK(shift >= PATH_NORM_ABOVE_ROOT && shift < (ssize_t)len);
	if (shift > 0) {
		FUZZ_CHECK(http_parse_request(copy + shift, len - (size_t)shift, &again) ==
		    (ssize_t)len - shift);
		FUZZ_CHECK(again.path.len + (size_t)shift == req->path.len);
		FUZZ_CHECK(path_norm(again.path.p, again.path.len, out, &n) == PATH_NORM_ASIS);
		FUZZ_CHECK(again.query.len == req->query.len &&
		    memcmp(again.query.p, req->query.p, req->query.len) == 0);
		FUZZ_CHECK(again.method_bit == req->method_bit && again.nheaders == req->nheaders);
		/* what follows the target stays where it was */
		end = (size_t)(req->target.p + req->target.len - buf);
		FUZZ_CHECK(memcmp(copy + end, buf + end, len - end) == 0);
	} else if (shift == 0) {
		FUZZ_CHECK(memcmp(copy, buf, len) == 0);
	}
	free(copy);
	free(out);
}

static void
fuzz_request(const char *buf, size_t len)
{
	static struct http_request req, again;
	ssize_t r = http_parse_request(buf, len, &req);

	FUZZ_CHECK(r >= HTTP_ERR_NOT_IMPLEMENTED && r <= (ssize_t)len);
	if (r <= 0)
		return;
	FUZZ_CHECK(r >= 4 && memcmp(buf + r - 4, "\r\n\r\n", 4) == 0);
	FUZZ_CHECK(req.method.len > 0 && fuzz_inside(req.method, buf, (size_t)r));
	FUZZ_CHECK(req.target.len > 0 && fuzz_inside(req.target, buf, (size_t)r));
	FUZZ_CHECK(req.path.len > 0);
	FUZZ_CHECK(fuzz_inside(req.query, buf, (size_t)r));
	FUZZ_CHECK(fuzz_inside(req.host, buf, (size_t)r));
	FUZZ_CHECK(fuzz_inside(req.request_id, buf, (size_t)r));
	FUZZ_CHECK(req.version_minor == 0 || req.version_minor == 1);
	FUZZ_CHECK(!(req.framing.chunked && req.framing.content_length >= 0));
	FUZZ_CHECK(req.framing.content_length < ((int64_t)1 << 62));
	fuzz_headers(req.headers, req.nheaders, buf, (size_t)r);
	/* The head ends where it ends: no look-ahead, and one byte less is incomplete. */
	FUZZ_CHECK(http_parse_request(buf, (size_t)r, &again) == r);
	FUZZ_CHECK(http_parse_request(buf, (size_t)r - 1, &again) == HTTP_INCOMPLETE);
	fuzz_rules_request(&req);
	fuzz_norm_head(buf, (size_t)r, &req);
}

static void
fuzz_response(const char *buf, size_t len)
{
	static struct http_response resp, again;
	ssize_t r = http_parse_response(buf, len, &resp);

	FUZZ_CHECK(r >= HTTP_ERR_VERSION && r <= (ssize_t)len);
	if (r <= 0)
		return;
	FUZZ_CHECK(resp.status >= 100 && resp.status <= 999);
	FUZZ_CHECK(fuzz_inside(resp.reason, buf, (size_t)r));
	FUZZ_CHECK(resp.framing.chunked + resp.framing.until_close +
	    (resp.framing.content_length >= 0) == 1);
	fuzz_headers(resp.headers, resp.nheaders, buf, (size_t)r);
	FUZZ_CHECK(http_parse_response(buf, (size_t)r, &again) == r);
	FUZZ_CHECK(http_parse_response(buf, (size_t)r - 1, &again) == HTTP_INCOMPLETE);
	fuzz_rules_response(&resp);
}

struct fuzz_chunked_out {
	int result;
	size_t end;             /* DONE: offset of the end of the message */
	size_t outlen;
};

/* Feed buf in pieces; lens[] (cycled) gives the piece sizes, 0 meaning "the rest". */
static void
fuzz_chunked_run(const char *buf, size_t len, const uint8_t *lens, size_t nlens, char *out,
    struct fuzz_chunked_out *res)
{
	struct http_chunked c;
	size_t pos = 0, li = 0;
	int r = HTTP_CHUNKED_MORE;

	http_chunked_init(&c);
	res->outlen = 0;
	res->end = 0;
	while (pos < len) {
		size_t n = len - pos;

		if (nlens > 0) {
			size_t want = lens[li++ % nlens];
			if (want > 0 && want < n)
				n = want;
		}
		size_t off = 0;
		while (off < n) {
			size_t consumed = (size_t)-1, doff = (size_t)-1, dlen = (size_t)-1;

			r = http_chunked_feed(&c, buf + pos + off, n - off, &consumed, &doff, &dlen);
			FUZZ_CHECK(consumed <= n - off);
			if (r == HTTP_CHUNKED_DATA) {
				FUZZ_CHECK(dlen > 0 && doff + dlen <= consumed);
				memcpy(out + res->outlen, buf + pos + off + doff, dlen);
				res->outlen += dlen;
			} else if (r == HTTP_CHUNKED_MORE) {
				FUZZ_CHECK(consumed == n - off);
			}
			off += consumed;
			if (r == HTTP_CHUNKED_DONE || r == HTTP_CHUNKED_ERROR) {
				res->result = r;
				res->end = r == HTTP_CHUNKED_DONE ? pos + off : 0;
				return;
			}
		}
		pos += n;
	}
	res->result = HTTP_CHUNKED_MORE;
}

static void
fuzz_chunked(const char *buf, size_t len, const uint8_t *lens, size_t nlens)
{
	static const uint8_t one = 1;
	struct fuzz_chunked_out whole, split, bytes;
	char *o1 = malloc(len + 1), *o2 = malloc(len + 1), *o3 = malloc(len + 1);

	fuzz_chunked_run(buf, len, NULL, 0, o1, &whole);
	fuzz_chunked_run(buf, len, lens, nlens, o2, &split);
	fuzz_chunked_run(buf, len, &one, 1, o3, &bytes);
	FUZZ_CHECK(whole.result == split.result && whole.result == bytes.result);
	FUZZ_CHECK(whole.end == split.end && whole.end == bytes.end);
	/* On an error, how much payload went out before it depends only on the bytes. */
	FUZZ_CHECK(whole.outlen == split.outlen && whole.outlen == bytes.outlen);
	FUZZ_CHECK(memcmp(o1, o2, whole.outlen) == 0 && memcmp(o1, o3, whole.outlen) == 0);
	FUZZ_CHECK(whole.outlen <= len);
	free(o1);
	free(o2);
	free(o3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t nlens = data[0] & 7;
	if (size < 1 + nlens)
		return 0;
	const uint8_t *lens = data + 1;
	const char *msg = (const char *)data + 1 + nlens;
	size_t len = size - 1 - nlens;

	fuzz_request(msg, len);
	fuzz_response(msg, len);
	fuzz_chunked(msg, len, lens, nlens);
	return 0;
}
