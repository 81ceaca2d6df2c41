#include "config.h"
#include "body.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <zlib.h>

#include "tls.h"

/* Spans at least this long go out as references to the input block; shorter ones are copied
 * (a reference costs a chain of its own). */
#define BODY_REFERENCE_MIN 2048
/* Freed blocks kept per worker for the next bodies: fresh memory for a 1 MB body costs more
 * in page faults than scanning it. */
#define BODY_POOL_BYTES (32 * 1024 * 1024)

/* A contiguous copy of a body; output chains reference it until the last one is written. */
struct body_block {
	struct body_block *next;        /* in the pool's free list */
	struct body_pool *pool;
	unsigned refs;
	size_t cap;
	char data[];
};

struct body_pool {
	struct rewrite_ctx *rw;
	z_stream gz;                    /* deflate state, reset per body: no allocation per use */
	int gz_ready;
	struct evbuffer *gz_out;
	unsigned rw_depth;
	struct body_block *free;
	size_t free_bytes;
};

int
body_needs_headers(const struct rewrite_program *prog)
{
	return rewrite_program_uses(prog, REWRITE_VAR_HEADER);
}

void
body_tls_vars(const struct rewrite_program *prog, const struct conn *client,
    struct rewrite_vars *vars, struct body_tls_text *text)
{
	if (prog == NULL || (prog->vars & (1u << REWRITE_VAR_SSL_CLIENT_S_DN |
	    1u << REWRITE_VAR_SSL_CLIENT_VERIFY)) == 0)
		return;
	vars->ssl_client_s_dn.p = text->s_dn;
	vars->ssl_client_s_dn.len = tls_client_s_dn(client, text->s_dn, sizeof(text->s_dn));
	vars->ssl_client_verify.p = text->verify;
	vars->ssl_client_verify.len = tls_client_verify(client, text->verify,
	    sizeof(text->verify));
}

struct body_pool *
body_pool_new(void)
{
	return calloc(1, sizeof(struct body_pool));
}

void
body_pool_free(struct body_pool *pool)
{
	struct body_block *b;

	if (pool == NULL)
		return;
	if (pool->gz_ready)
		deflateEnd(&pool->gz);
	if (pool->gz_out != NULL)
		evbuffer_free(pool->gz_out);
	while ((b = pool->free) != NULL) {
		pool->free = b->next;
		free(b);
	}
	rewrite_ctx_free(pool->rw);
	free(pool);
}

static struct body_block *
body_block_get(struct body_pool *pool, size_t len)
{
	struct body_block **pp, *b;
	size_t cap = 64 * 1024;

	for (pp = &pool->free; (b = *pp) != NULL; pp = &b->next)
		if (b->cap >= len) {
			*pp = b->next;
			pool->free_bytes -= b->cap;
			b->refs = 1;
			return b;
		}
	while (cap < len)
		cap *= 2;
	if ((b = malloc(sizeof(*b) + cap)) == NULL)
		return NULL;
	b->pool = pool;
	b->cap = cap;
	b->refs = 1;
	return b;
}

static void
body_block_unref(struct body_block *b)
{
	struct body_pool *pool;

	if (b == NULL || --b->refs != 0)
		return;
	pool = b->pool;
	if (pool->free_bytes + b->cap <= BODY_POOL_BYTES) {
		b->next = pool->free;
		pool->free = b;
		pool->free_bytes += b->cap;
	} else {
		free(b);
	}
}

static void
body_block_cleanup_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	body_block_unref(arg);
}

/* Compare a media type (no parameters, any case) with a pattern: "*" or "*+json" parts. */
static int
body_media_match(const char *pattern, const char *type, size_t type_len, size_t slash)
{
	const char *pslash = strchr(pattern, '/');
	size_t plen;

	if (pslash == NULL)
		return 0;
	plen = (size_t)(pslash - pattern);
	if (!(plen == 1 && pattern[0] == '*') &&
	    (plen != slash || strncasecmp(pattern, type, slash) != 0))
		return 0;
	pattern = pslash + 1;
	type += slash + 1;
	type_len -= slash + 1;
	if (strcmp(pattern, "*") == 0)
		return 1;
	if (pattern[0] == '*') {
		size_t suffix = strlen(pattern + 1);
		return type_len > suffix &&
		    strncasecmp(type + type_len - suffix, pattern + 1, suffix) == 0;
	}
	return strlen(pattern) == type_len && strncasecmp(pattern, type, type_len) == 0;
}

int
body_is_json(const struct config_route *route, struct http_str ct)
{
	size_t len = 0, slash = 0;
	char *const *t;

	while (len < ct.len && ct.p[len] != ';' && ct.p[len] != ' ' && ct.p[len] != '\t')
		len++;
	while (slash < len && ct.p[slash] != '/')
		slash++;
	if (slash == 0 || slash >= len - 1)
		return 0;
	for (t = route->json_types; *t != NULL; t++)
		if (body_media_match(*t, ct.p, len, slash))
			return 1;
	return 0;
}

enum body_coding
body_coding(struct http_str ce)
{
	if (ce.len == 0 || (ce.len == 8 && strncasecmp(ce.p, "identity", 8) == 0))
		return BODY_CODING_IDENTITY;
	if ((ce.len == 4 && strncasecmp(ce.p, "gzip", 4) == 0) ||
	    (ce.len == 6 && strncasecmp(ce.p, "x-gzip", 6) == 0))
		return BODY_CODING_GZIP;
	if (ce.len == 7 && strncasecmp(ce.p, "deflate", 7) == 0)
		return BODY_CODING_DEFLATE;
	return BODY_CODING_OTHER;
}

/* Inflate src into a new block, bounded by max; NULL with *error set on failure. */
static struct body_block *
body_inflate(struct body_pool *pool, const char *src, size_t len, enum body_coding coding,
    size_t max, size_t *out_len, const char **error)
{
	struct body_block *b = body_block_get(pool, len * 4 < max ? len * 4 : max), *nb;
	z_stream zs;
	int r;

	*error = "cannot inflate the body";
	if (b == NULL)
		return NULL;
	memset(&zs, 0, sizeof(zs));
	/* gzip: 15 + 16; deflate: 15 + 32 detects a zlib (or gzip) header. */
	if (inflateInit2(&zs, coding == BODY_CODING_GZIP ? 15 + 16 : 15 + 32) != Z_OK) {
		body_block_unref(b);
		return NULL;
	}
	zs.next_in = (Bytef *)(uintptr_t)src;
	zs.avail_in = (uInt)len;
	zs.next_out = (Bytef *)b->data;
	zs.avail_out = (uInt)b->cap;
	for (;;) {
		r = inflate(&zs, Z_NO_FLUSH);
		if (r == Z_STREAM_END)
			break;
		if (r != Z_OK && r != Z_BUF_ERROR)
			goto fail;
		if (zs.avail_out != 0)
			goto fail;      /* input ended before the stream did */
		if (zs.total_out >= max) {
			*error = "inflated body exceeds limits.max_body";
			goto fail;
		}
		if ((nb = body_block_get(pool, b->cap * 2)) == NULL)
			goto fail;
		memcpy(nb->data, b->data, zs.total_out);
		body_block_unref(b);
		b = nb;
		zs.next_out = (Bytef *)b->data + zs.total_out;
		zs.avail_out = (uInt)(b->cap - zs.total_out);
	}
	if (zs.total_out > max) {
		*error = "inflated body exceeds limits.max_body";
		goto fail;
	}
	*out_len = zs.total_out;
	inflateEnd(&zs);
	return b;
fail:
	inflateEnd(&zs);
	body_block_unref(b);
	return NULL;
}

int
body_gzip(struct body_pool *pool, struct evbuffer *data)
{
	struct evbuffer_iovec in, out[1];
	int r, flush;

	if (!pool->gz_ready) {
		memset(&pool->gz, 0, sizeof(pool->gz));
		if (deflateInit2(&pool->gz, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
			return -1;
		pool->gz_ready = 1;
	} else if (deflateReset(&pool->gz) != Z_OK) {
		return -1;
	}
	if (pool->gz_out == NULL && (pool->gz_out = evbuffer_new()) == NULL)
		return -1;
	/* Level 1: the point is fewer bytes on the wire for little CPU, as nginx's default. */
	do {
		if (evbuffer_peek(data, -1, NULL, &in, 1) < 1)
			in.iov_len = 0;
		pool->gz.next_in = in.iov_base;
		pool->gz.avail_in = (uInt)in.iov_len;
		flush = evbuffer_get_length(data) == in.iov_len ? Z_FINISH : Z_NO_FLUSH;
		do {
			if (evbuffer_reserve_space(pool->gz_out, 16384, out, 1) < 1)
				return -1;
			pool->gz.next_out = out[0].iov_base;
			pool->gz.avail_out = (uInt)out[0].iov_len;
			r = deflate(&pool->gz, flush);
			out[0].iov_len -= pool->gz.avail_out;
			evbuffer_commit_space(pool->gz_out, out, 1);
			if (r == Z_STREAM_ERROR)
				return -1;
		} while (pool->gz.avail_out == 0);
		evbuffer_drain(data, in.iov_len);
	} while (flush != Z_FINISH);
	return evbuffer_add_buffer(data, pool->gz_out);
}

struct body_block *
body_block_new(struct body_pool *pool, size_t len)
{
	return body_block_get(pool, len);
}

char *
body_block_data(struct body_block *b)
{
	return b->data;
}

void
body_block_release(struct body_block *b)
{
	body_block_unref(b);
}

int
body_block_add_to(struct evbuffer *out, struct body_block *b, size_t len)
{
	b->refs++;
	if (evbuffer_add_reference(out, b->data, len, body_block_cleanup_cb, b) < 0) {
		b->refs--;
		return evbuffer_add(out, b->data, len);
	}
	return 0;
}

int
body_apply_block(struct body_pool *pool, const struct config *cfg,
    const struct config_route *route, const struct rewrite_program *prog,
    enum body_coding coding, struct body_block *raw, size_t len,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res)
{
	struct body_block *in = raw;
	struct rewrite_result rr;
	size_t i;

	memset(res, 0, sizeof(*res));
	if (pool->rw == NULL || pool->rw_depth != cfg->limits.max_depth) {
		rewrite_ctx_free(pool->rw);
		pool->rw_depth = cfg->limits.max_depth;
		if ((pool->rw = rewrite_ctx_new(pool->rw_depth)) == NULL) {
			res->error = "out of memory";
			return -1;
		}
	}
	raw->refs++;
	if (coding == BODY_CODING_GZIP || coding == BODY_CODING_DEFLATE) {
		in = body_inflate(pool, raw->data, len, coding, cfg->limits.max_body, &len,
		    &res->error);
		body_block_unref(raw);
		if (in == NULL)
			return -1;
		res->inflated = 1;
	}
	if (rewrite_apply(pool->rw, prog, route->validate, in->data, len, vars, &rr) < 0) {
		res->error = rr.error != NULL ? rr.error : "the body cannot be rewritten";
		body_block_unref(in);
		return -1;
	}
	res->status = rr.status;
	for (i = 0; i < rr.nspans; i++) {
		const struct rewrite_span *s = &rr.spans[i];
		int inside = s->p >= in->data && s->p + s->len <= in->data + len;

		if (inside && s->len >= BODY_REFERENCE_MIN) {
			in->refs++;
			if (evbuffer_add_reference(out, s->p, s->len, body_block_cleanup_cb, in) < 0) {
				in->refs--;
				evbuffer_add(out, s->p, s->len);
				res->copied += s->len;
			} else {
				res->spliced += s->len;
			}
		} else {
			evbuffer_add(out, s->p, s->len);
			res->copied += s->len;
		}
	}
	body_block_unref(in);
	return 0;
}

int
body_apply(struct body_pool *pool, const struct config *cfg, const struct config_route *route,
    const struct rewrite_program *prog, enum body_coding coding, struct evbuffer *raw,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res)
{
	size_t len = evbuffer_get_length(raw);
	struct body_block *b;
	int r;

	/* The one copy: the received chains into a contiguous block the engine can scan. */
	if ((b = body_block_get(pool, len)) == NULL) {
		memset(res, 0, sizeof(*res));
		res->error = "out of memory";
		return -1;
	}
	evbuffer_copyout(raw, b->data, len);
	r = body_apply_block(pool, cfg, route, prog, coding, b, len, vars, out, res);
	body_block_unref(b);
	return r;
}
