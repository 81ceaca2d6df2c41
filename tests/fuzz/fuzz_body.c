/*
 * libFuzzer target for the body path around the engine: media-type matching, inflating
 * gzip and deflate, body_apply on an evbuffer, compress: gzip, and the Accept-Encoding sent
 * upstream.
 *
 * Input: a control byte, a Content-Type / Accept-Encoding line ending in '\n', then the body.
 * Control bits: 0-1 the coding (identity, gzip, deflate, another); 2 validate: full;
 * 3 the body is taken as compressed bytes as they are, else it is compressed here (gzip as
 * two members when bit 4 is set, bit 5 appends a stray byte); 6-7 pick the program.
 * Checked: a failed body_apply leaves the received bytes in place; a valid body's output is
 * valid JSON; body_gzip output inflates back to its input; the Accept-Encoding list keeps
 * only codings the body path can decode.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <zlib.h>

#include "body.h"
#include "jvalid.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const programs[] = {
	"[unwrap: data]", "[wrap: r, set: {a: $header.x}]", "[rename: {a: b}, drop: [c]]",
	"[keep: [a, data.x]]",
};

static struct rewrite_program *progs[4];
static struct body_pool *pool;
static char *types[] = { "application/json", "application/*+json", "text/*", NULL };

/* Compress src as a zlib (deflate) or gzip stream, appended to out. */
static void
fuzz_deflate(const char *src, size_t len, int gzip, struct evbuffer *out)
{
	z_stream zs;
	unsigned char buf[4096];
	int r;

	memset(&zs, 0, sizeof(zs));
	FUZZ_CHECK(deflateInit2(&zs, 1, Z_DEFLATED, gzip ? 15 + 16 : 15, 8,
	    Z_DEFAULT_STRATEGY) == Z_OK);
	zs.next_in = (Bytef *)(uintptr_t)src;
	zs.avail_in = (uInt)len;
	do {
		zs.next_out = buf;
		zs.avail_out = sizeof(buf);
		r = deflate(&zs, Z_FINISH);
		evbuffer_add(out, buf, sizeof(buf) - zs.avail_out);
	} while (r == Z_OK);
	FUZZ_CHECK(r == Z_STREAM_END);
	deflateEnd(&zs);
}

/* Inflate a gzip stream whole; returns its length, or -1. */
static ssize_t
fuzz_gunzip(const unsigned char *src, size_t len, char *dst, size_t cap)
{
	z_stream zs;
	int r;

	memset(&zs, 0, sizeof(zs));
	FUZZ_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK);
	zs.next_in = (Bytef *)(uintptr_t)src;
	zs.avail_in = (uInt)len;
	zs.next_out = (Bytef *)dst;
	zs.avail_out = (uInt)cap;
	r = inflate(&zs, Z_FINISH);
	inflateEnd(&zs);
	return r == Z_STREAM_END && zs.avail_in == 0 ? (ssize_t)(cap - zs.avail_out) : -1;
}

static void
fuzz_accept_encoding(const char *line, size_t len)
{
	struct http_request req;
	char buf[256];
	const char *p, *end;

	memset(&req, 0, sizeof(req));
	req.headers[0].name = (struct http_str){ "Accept-Encoding", 15 };
	req.headers[0].value = (struct http_str){ line, len };
	req.headers[1].name = (struct http_str){ "accept-encoding", 15 };
	req.headers[1].value = (struct http_str){ line, len / 2 };
	req.nheaders = 2;
	body_limit_accept_encoding(&req, buf, sizeof(buf));
	FUZZ_CHECK(req.nheaders == 1 && req.headers[0].value.p == buf);
	/* Every item, up to its parameters, names gzip, x-gzip, deflate or identity. */
	p = buf;
	end = buf + req.headers[0].value.len;
	while (p < end) {
		struct http_str c = { p, 0 };

		while (p + c.len < end && p[c.len] != ';' && p[c.len] != ',')
			c.len++;
		while (c.len > 0 && (c.p[c.len - 1] == ' ' || c.p[c.len - 1] == '\t'))
			c.len--;
		FUZZ_CHECK(c.len > 0 && body_coding(c) != BODY_CODING_OTHER);
		p = memchr(p, ',', (size_t)(end - p));
		if (p == NULL)
			break;
		FUZZ_CHECK(p + 2 < end && p[1] == ' ');
		p += 2;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum body_coding codings[] = { BODY_CODING_IDENTITY, BODY_CODING_GZIP,
	    BODY_CODING_DEFLATE, BODY_CODING_OTHER };
	struct config cfg;
	struct config_route route;
	struct rewrite_vars vars;
	struct body_result res;
	struct evbuffer *raw, *out, *before;
	const char *line, *body, *nl;
	enum body_coding coding;
	size_t len, llen, n;
	char *plain;
	ssize_t got;
	int r, valid;
	unsigned ctl;

	if (pool == NULL) {
		pool = body_pool_new();
		for (size_t i = 0; i < 4; i++)
			FUZZ_CHECK((progs[i] = rewrite_program_from_yaml(programs[i],
			    strlen(programs[i]), NULL, 0)) != NULL);
	}
	if (size < 1)
		return 0;
	ctl = data[0];
	line = (const char *)data + 1;
	if ((nl = memchr(line, '\n', size - 1)) == NULL)
		return 0;
	llen = (size_t)(nl - line);
	body = nl + 1;
	len = size - 1 - llen - 1;

	memset(&route, 0, sizeof(route));
	route.name = "fuzz";
	route.json_types = types;
	route.validate = ctl & 4 ? VALIDATE_FULL : VALIDATE_ENVELOPE;
	memset(&cfg, 0, sizeof(cfg));
	cfg.limits.max_body = 64 * 1024;
	cfg.limits.max_depth = 32;
	cfg.limits.max_members = 500;
	(void)body_is_json(&route, (struct http_str){ line, llen });
	(void)body_coding((struct http_str){ line, llen });
	fuzz_accept_encoding(line, llen);

	coding = codings[ctl & 3];
	raw = evbuffer_new();
	out = evbuffer_new();
	before = evbuffer_new();
	if (ctl & 8 || coding == BODY_CODING_IDENTITY || coding == BODY_CODING_OTHER) {
		evbuffer_add(raw, body, len);
	} else {
		fuzz_deflate(body, len / 2, coding == BODY_CODING_GZIP, raw);
		if (ctl & 16 && coding == BODY_CODING_GZIP)
			fuzz_deflate(body + len / 2, len - len / 2, 1, raw);
		else
			fuzz_deflate(body + len / 2, len - len / 2, coding == BODY_CODING_GZIP, raw);
		if (ctl & 32)
			evbuffer_add(raw, "x", 1);
	}
	evbuffer_add(before, evbuffer_pullup(raw, -1), evbuffer_get_length(raw));
	memset(&vars, 0, sizeof(vars));
	r = body_apply(pool, &cfg, &route, progs[ctl >> 6], coding, raw, &vars, out, &res);
	if (r != 0) {
		/* on_error goes on with the bytes as received. */
		FUZZ_CHECK(res.error != NULL);
		n = evbuffer_get_length(raw);
		FUZZ_CHECK(n == evbuffer_get_length(before));
		FUZZ_CHECK(n == 0 || memcmp(evbuffer_pullup(raw, -1), evbuffer_pullup(before, -1),
		    n) == 0);
		FUZZ_CHECK(res.encoding == (coding == BODY_CODING_OTHER));
	} else {
		FUZZ_CHECK(evbuffer_get_length(raw) == 0);
		n = evbuffer_get_length(out);
		FUZZ_CHECK(res.spliced + res.copied == n);
		if (coding == BODY_CODING_IDENTITY) {
			valid = jvalid_check(body, len, 32, NULL) == JVALID_OK;
			if (valid)
				FUZZ_CHECK(jvalid_check((const char *)evbuffer_pullup(out, -1), n, 40,
				    NULL) == JVALID_OK);
		}
		/* compress: gzip inflates back to what it compressed. */
		plain = malloc(n + 1);
		evbuffer_copyout(out, plain, n);
		if (body_gzip(pool, out) == 0) {
			char *back = malloc(n + 1);
			size_t zlen = evbuffer_get_length(out);

			got = fuzz_gunzip(evbuffer_pullup(out, -1), zlen, back, n + 1);
			FUZZ_CHECK(got == (ssize_t)n && memcmp(back, plain, n) == 0);
			free(back);
		}
		free(plain);
	}
	evbuffer_free(before);
	evbuffer_free(raw);
	evbuffer_free(out);
	return 0;
}
