/* Envelope ops applied to buffered JSON bodies, and the per-worker pool they use. */
#include "config.h"
#include "body.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "conn.h"

/* Where a large body's copied output goes, a block at a time: a large block itself. */
#define BODY_COPY_BLOCK (2 * BODY_POOL_BLOCK)

struct body_pool {
	struct rewrite_ctx *rw;
	unsigned rw_depth, rw_members;  /* the limits rw was made for */
	struct body_block_pool *blocks;
	struct body_coding_state *coding;
};

int
body_needs_headers(const struct rewrite_program *prog)
{
	return rewrite_program_uses(prog, REWRITE_VAR_HEADER);
}

static int
body_header_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	const struct http_request *req = arg;
	size_t i;

	for (i = 0; i < req->nheaders; i++)
		if (req->headers[i].name.len == len && http_ieq(req->headers[i].name.p, name, len)) {
			value->p = req->headers[i].value.p;
			value->len = req->headers[i].value.len;
			return 1;
		}
	return 0;
}

void
body_vars_headers(struct rewrite_vars *vars, const struct http_request *req)
{
	vars->header_cb = body_header_cb;
	vars->header_arg = req;
}

struct body_pool *
body_pool_new(void)
{
	struct body_pool *pool;

	if ((pool = calloc(1, sizeof(*pool))) == NULL)
		return NULL;
	if ((pool->blocks = body_block_pool_new()) == NULL ||
	    (pool->coding = body_coding_state_new()) == NULL) {
		body_pool_free(pool);
		return NULL;
	}
	return pool;
}

void
body_pool_set_timers(struct body_pool *pool, struct timers *t)
{
	body_block_pool_set_timers(pool->blocks, t);
}

struct body_block_pool *
body_pool_blocks(struct body_pool *pool)
{
	return pool->blocks;
}

struct body_coding_state *
body_pool_coding(struct body_pool *pool)
{
	return pool->coding;
}

void
body_pool_free(struct body_pool *pool)
{
	if (pool == NULL)
		return;
	body_coding_state_free(pool->coding);
	body_block_pool_free(pool->blocks);
	rewrite_ctx_free(pool->rw);
	free(pool);
}

struct body_block *
body_block_new(struct body_pool *pool, size_t len)
{
	return body_block_pool_get(pool->blocks, len);
}

struct body_block *
body_block_copy(struct body_pool *pool, struct evbuffer *src)
{
	return body_block_pool_copy(pool->blocks, src);
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
	    (plen != slash || !http_ieq(pattern, type, slash)))
		return 0;
	pattern = pslash + 1;
	type += slash + 1;
	type_len -= slash + 1;
	if (strcmp(pattern, "*") == 0)
		return 1;
	if (pattern[0] == '*') {
		size_t suffix = strlen(pattern + 1);
		return type_len > suffix &&
		    http_ieq(type + type_len - suffix, pattern + 1, suffix);
	}
	return strlen(pattern) == type_len && http_ieq(pattern, type, type_len);
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

/*
 * Where the rewritten spans go: long spans of the input by reference, the rest copied.  The
 * counters say where the bytes come from, not how they go out: spliced, the input's bytes
 * passed on as they are; copied, the bytes the ops wrote.  A large body's copies go into
 * blocks of their own (copy), added to out by reference run by run: the body's whole output
 * then lives in blocks, given back as soon as it is written.  Other bodies' copies go into
 * out's own buffers.
 */
struct body_out {
	struct evbuffer *out;
	struct body_block *in;
	size_t len;
	struct body_result *res;
	struct body_pool *pool;
	int large;
	struct body_block *copy;        /* NULL until a large body copies a span */
	size_t copy_used;               /* bytes written into copy */
	size_t copy_run;                /* of them, the last ones not yet added to out */
};

/* Append a large body's copied bytes not yet in out, by reference to their block. */
static int
body_out_flush(struct body_out *o)
{
	size_t run = o->copy_run;

	if (run == 0)
		return 0;
	if (body_block_add_ref(o->out, o->copy, body_block_data(o->copy) + o->copy_used - run,
	    run) != 0)
		return -1;
	o->copy_run = 0;
	return 0;
}

/* Copy p[0..len) after a large body's output so far, into its copy blocks. */
static int
body_out_copy(struct body_out *o, const char *p, size_t len)
{
	size_t n;

	while (len > 0) {
		if (o->copy == NULL || o->copy_used == body_block_size(o->copy)) {
			if (body_out_flush(o) != 0)
				return -1;
			body_block_release(o->copy);
			if ((o->copy = body_block_pool_get(o->pool->blocks, BODY_COPY_BLOCK)) == NULL)
				return -1;
			o->copy_used = 0;
		}
		n = body_block_size(o->copy) - o->copy_used;
		if (n > len)
			n = len;
		memcpy(body_block_data(o->copy) + o->copy_used, p, n);
		o->copy_used += n;
		o->copy_run += n;
		p += n;
		len -= n;
	}
	return 0;
}

static int
body_spans_cb(void *arg, const struct rewrite_span *spans, size_t n)
{
	struct body_out *o = arg;
	const char *in = body_block_data(o->in);
	size_t i;

	for (i = 0; i < n; i++) {
		const struct rewrite_span *s = &spans[i];
		int inside = s->p >= in && s->p + s->len <= in + o->len;

		if (inside)
			o->res->spliced += s->len;
		else
			o->res->copied += s->len;
		if (inside && s->len >= BODY_REFERENCE_MIN) {
			if (body_out_flush(o) != 0)
				return -1;
			if (body_block_add_ref(o->out, o->in, s->p, s->len) == 0)
				continue;
		}
		if (o->large ? body_out_copy(o, s->p, s->len) : body_add_copy(o->out, s->p, s->len))
			return -1;
	}
	return 0;
}

void
body_block_fill(struct body_block *b, size_t len, uint64_t *left, int *sinking,
    struct conn *c)
{
	size_t n;

	if (*sinking)
		*left = c->sink_left;
	n = evbuffer_get_length(c->in);
	if (n > *left)
		n = (size_t)*left;
	if (n != 0) {
		evbuffer_remove(c->in, body_block_data(b) + len - *left, n);
		*left -= n;
	}
	if (*left == 0) {
		c->sink = NULL;
		*sinking = 0;
	} else if (!*sinking) {
		c->sink = body_block_data(b) + len - *left;
		c->sink_left = (size_t)*left;
		*sinking = 1;
	}
}

int
body_apply_block(struct body_pool *pool, const struct config *cfg,
    const struct config_route *route, const struct rewrite_program *prog,
    enum body_coding coding, struct body_block *raw, size_t len,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res)
{
	struct body_out o = { .out = out, .in = raw, .len = len, .res = res, .pool = pool };
	struct rewrite_result rr;
	int r;

	memset(res, 0, sizeof(*res));
	if (pool->rw == NULL || pool->rw_depth != cfg->limits.max_depth ||
	    pool->rw_members != cfg->limits.max_members) {
		rewrite_ctx_free(pool->rw);
		pool->rw_depth = cfg->limits.max_depth;
		pool->rw_members = cfg->limits.max_members;
		if ((pool->rw = rewrite_ctx_new(pool->rw_depth, pool->rw_members)) == NULL) {
			res->error = "out of memory";
			return -1;
		}
	}
	if (coding == BODY_CODING_OTHER) {
		res->error = "Content-Encoding that cannot be decoded";
		res->encoding = 1;
		return -1;
	}
	body_block_ref(raw);
	if (coding == BODY_CODING_GZIP || coding == BODY_CODING_DEFLATE) {
		o.in = body_inflate(pool, body_block_data(raw), len, coding, cfg->limits.max_body, &o.len,
		    &res->error);
		body_block_release(raw);
		if (o.in == NULL)
			return -1;
		res->inflated = 1;
	}
	o.large = body_block_size(o.in) > BODY_POOL_BLOCK;
	rewrite_ctx_sink(pool->rw, body_spans_cb, &o);
	r = rewrite_apply(pool->rw, prog, route->validate, body_block_data(o.in), o.len, vars, &rr);
	rewrite_ctx_sink(pool->rw, NULL, NULL);
	if (r == 0 && body_out_flush(&o) != 0) {
		r = -1;
		rr.error = "out of memory";
		rr.invalid = 0;
	}
	body_block_release(o.copy);
	if (r < 0) {
		res->error = rr.error != NULL ? rr.error : "the body cannot be rewritten";
		res->invalid = rr.invalid;
	} else
		res->status = rr.status;
	rewrite_ctx_release(pool->rw);
	body_block_release(o.in);
	return r < 0 ? -1 : 0;
}

int
body_apply(struct body_pool *pool, const struct config *cfg, const struct config_route *route,
    const struct rewrite_program *prog, enum body_coding coding, struct evbuffer *raw,
    const struct rewrite_vars *vars, struct evbuffer *out, struct body_result *res)
{
	size_t len = evbuffer_get_length(raw), off = 0;
	struct evbuffer_iovec v;
	struct body_block *b;
	int r;

	/* The one copy: the received chains into a contiguous block the engine can scan, each
	 * chain freed once copied so that the body is never held twice. */
	if ((b = body_block_pool_get(pool->blocks, len)) == NULL) {
		memset(res, 0, sizeof(*res));
		res->error = "out of memory";
		return -1;
	}
	while (evbuffer_peek(raw, -1, NULL, &v, 1) > 0 && v.iov_len > 0) {
		memcpy(body_block_data(b) + off, v.iov_base, v.iov_len);
		off += v.iov_len;
		evbuffer_drain(raw, v.iov_len);
	}
	r = body_apply_block(pool, cfg, route, prog, coding, b, len, vars, out, res);
	/* on_error goes on with the received bytes: raw holds them again. */
	if (r != 0 && len > 0 && body_block_add_to(raw, b, len) != 0)
		res->error = "out of memory";
	body_block_release(b);
	return r;
}
