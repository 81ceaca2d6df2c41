#include "config.h"
#include "body.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <zlib.h>

#include "conn.h"
#include "mempool.h"
#include "timers.h"
#include "tls.h"

/* Spans at least this long go out as references to the input block; shorter ones are copied
 * (a reference costs a chain of its own). */
#define BODY_REFERENCE_MIN 2048
/* Freed blocks kept per worker for the next bodies: fresh memory for a 1 MB body costs more
 * in page faults (257) than scanning it.  Blocks below BODY_POOL_BLOCK are kept up to
 * BODY_POOL_BYTES for good.  Larger ones are large bodies': malloc maps each on its own, so
 * they are kept apart, up to BODY_LARGE_KEEP, while large bodies keep coming, and given back
 * to the system BODY_LARGE_DELAY_MS after the last one; the kept blocks make room for a
 * large body none of them fits. */
#define BODY_POOL_BYTES (4 * MEMPOOL_LARGE_BLOCK)
#define BODY_POOL_BLOCK MEMPOOL_LARGE_BLOCK
#define BODY_LARGE_KEEP (32 * 1024 * 1024)
#define BODY_LARGE_DELAY_MS 1000
/* Where a large body's copied output goes, a block at a time: a large block itself. */
#define BODY_COPY_BLOCK (2 * BODY_POOL_BLOCK)

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
	unsigned rw_depth, rw_members;  /* the limits rw was made for */
	z_stream gz;                    /* deflate state, reset per body: no allocation per use */
	int gz_ready;
	z_stream inf;                   /* inflate state, likewise */
	int inf_ready;
	enum body_coding inf_coding;
	int inf_ended;                  /* the compressed data ended (a gzip member may follow) */
	unsigned inf_magic;             /* magic bytes of the next gzip member seen so far */
	char *inf_out;                  /* where a prefix's output starts */
	struct evbuffer *gz_out;
	struct body_block *free;
	size_t free_bytes;
	struct body_block *large;       /* large blocks kept (with timers only) */
	size_t large_bytes;
	/* Runs BODY_LARGE_DELAY_MS after the last large body: then the large blocks kept and
	 * what large bodies left free go back to the system (without timers, as in tests: at
	 * once, and none is kept). */
	struct deadline trim;
	int has_timers;
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

void
body_tls_vars(unsigned uses, const struct conn *client, struct rewrite_vars *vars,
    struct body_tls_text *text)
{
	if ((uses & (1u << REWRITE_VAR_SSL_CLIENT_S_DN | 1u << REWRITE_VAR_SSL_CLIENT_VERIFY)) == 0)
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

static void
body_pool_drop_large(struct body_pool *pool)
{
	struct body_block *b;

	while ((b = pool->large) != NULL) {
		pool->large = b->next;
		free(b);
	}
	pool->large_bytes = 0;
}

static void
body_pool_trim_cb(struct deadline *d, void *arg)
{
	(void)d;
	body_pool_drop_large(arg);
	mempool_trim();
}

void
body_pool_set_timers(struct body_pool *pool, struct timers *t)
{
	deadline_init(&pool->trim, t, body_pool_trim_cb, pool);
	pool->has_timers = 1;
}

/* A large body is done: its memory stays for the next one, and goes back to the system
 * once none has come for a while. */
static void
body_pool_large_done(struct body_pool *pool)
{
	if (!pool->has_timers || deadline_start(&pool->trim, BODY_LARGE_DELAY_MS) != 0) {
		body_pool_drop_large(pool);
		mempool_trim();
	}
}

/* Give the pool's free blocks back to the heap. */
static void
body_pool_drain(struct body_pool *pool)
{
	struct body_block *b;

	while ((b = pool->free) != NULL) {
		pool->free = b->next;
		free(b);
	}
	pool->free_bytes = 0;
}

void
body_pool_free(struct body_pool *pool)
{
	if (pool == NULL)
		return;
	if (pool->has_timers)
		deadline_stop(&pool->trim);
	body_pool_drop_large(pool);
	if (pool->gz_ready)
		deflateEnd(&pool->gz);
	if (pool->inf_ready)
		inflateEnd(&pool->inf);
	if (pool->gz_out != NULL)
		evbuffer_free(pool->gz_out);
	body_pool_drain(pool);
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
	if (cap >= BODY_POOL_BLOCK) {
		for (pp = &pool->large; (b = *pp) != NULL; pp = &b->next)
			if (b->cap >= len) {
				*pp = b->next;
				pool->large_bytes -= b->cap;
				b->refs = 1;
				return b;
			}
		/* None fits: the memory the kept blocks hold is better spent on this one. */
		body_pool_drain(pool);
		body_pool_drop_large(pool);
	}
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
	if (b->cap >= BODY_POOL_BLOCK) {
		if (pool->has_timers && pool->large_bytes + b->cap <= BODY_LARGE_KEEP) {
			b->next = pool->large;
			pool->large = b;
			pool->large_bytes += b->cap;
		} else {
			free(b);
		}
		body_pool_large_done(pool);
	} else if (pool->free_bytes + b->cap <= BODY_POOL_BYTES) {
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
body_inflate_begin(struct body_pool *pool, enum body_coding coding)
{
	/* gzip: 15 + 16; deflate: 15 + 32 detects a zlib (or gzip) header. */
	int bits = coding == BODY_CODING_GZIP ? 15 + 16 : 15 + 32;

	pool->inf_coding = coding;
	pool->inf_ended = 0;
	pool->inf_magic = 0;
	if (pool->inf_ready)
		return inflateReset2(&pool->inf, bits) == Z_OK ? 0 : -1;
	memset(&pool->inf, 0, sizeof(pool->inf));
	if (inflateInit2(&pool->inf, bits) != Z_OK)
		return -1;
	pool->inf_ready = 1;
	return 0;
}

/*
 * After the end of a gzip member only another member may follow (RFC 1952 2.2).  Its two
 * magic bytes may come in separate feeds: they are taken from the input here and given to
 * zlib together once both are seen.  Returns 0 when zlib holds the start of the next member,
 * BODY_INFLATE_SHORT when the input ended within the magic bytes, or BODY_INFLATE_ERROR.
 */
static int
body_inflate_next_member(struct body_pool *pool, const char **error)
{
	static const Bytef magic[2] = { 0x1f, 0x8b };
	z_stream *zs = &pool->inf;
	Bytef *next;
	uInt avail;
	int r;

	for (; pool->inf_magic < 2 && zs->avail_in > 0; pool->inf_magic++) {
		if (pool->inf_coding != BODY_CODING_GZIP || zs->next_in[0] != magic[pool->inf_magic]) {
			*error = "bytes after the end of the compressed body";
			return BODY_INFLATE_ERROR;
		}
		zs->next_in++;
		zs->avail_in--;
	}
	if (pool->inf_magic < 2)
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
	pool->inf_magic = 0;
	pool->inf_ended = 0;
	return r;
}

/*
 * Inflate what the pool's stream holds until its output is full, its input is used up or the
 * compressed data ends.  A gzip body may be several members one after the other; any other
 * byte after the end of the compressed data makes the body invalid.
 */
static int
body_inflate_run(struct body_pool *pool, const char **error)
{
	z_stream *zs = &pool->inf;
	int r;

	*error = "cannot inflate the body";
	for (;;) {
		if (pool->inf_ended) {
			if (zs->avail_in == 0 && pool->inf_magic == 0)
				return BODY_INFLATE_END;
			if ((r = body_inflate_next_member(pool, error)) != 0)
				return r;
		}
		r = inflate(zs, Z_NO_FLUSH);
		if (r == Z_STREAM_END) {
			pool->inf_ended = 1;
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
	struct body_block *b = body_block_get(pool, len * 4 < max ? len * 4 : max);
	z_stream *zs = &pool->inf;
	size_t done;
	int r;

	*error = "cannot inflate the body";
	if (b == NULL)
		return NULL;
	if (body_inflate_begin(pool, coding) != 0) {
		body_block_unref(b);
		return NULL;
	}
	zs->next_in = (Bytef *)(uintptr_t)src;
	zs->avail_in = (uInt)len;
	zs->next_out = (Bytef *)b->data;
	zs->avail_out = (uInt)b->cap;
	while ((r = body_inflate_run(pool, error)) == BODY_INFLATE_FULL) {
		done = b->cap;
		if (done >= max) {
			*error = "inflated body exceeds limits.max_body";
			goto fail;
		}
		if (body_block_reserve(&b, b->cap * 2) != 0)
			goto fail;
		zs->next_out = (Bytef *)b->data + done;
		zs->avail_out = (uInt)(b->cap - done);
	}
	if (r != BODY_INFLATE_END)
		goto fail;      /* invalid, or the input ended before the stream did */
	done = (size_t)((char *)zs->next_out - b->data);
	if (done > max) {
		*error = "inflated body exceeds limits.max_body";
		goto fail;
	}
	*out_len = done;
	return b;
fail:
	body_block_unref(b);
	return NULL;
}

int
body_prefix_inflate_start(struct body_pool *pool, enum body_coding coding, char *out,
    size_t cap)
{
	if (body_inflate_begin(pool, coding) != 0)
		return -1;
	pool->inf_out = out;
	pool->inf.next_out = (Bytef *)out;
	pool->inf.avail_out = (uInt)cap;
	return 0;
}

int
body_prefix_inflate(struct body_pool *pool, const char *src, size_t len, size_t *out_len)
{
	const char *error;
	int r;

	pool->inf.next_in = (Bytef *)(uintptr_t)src;
	pool->inf.avail_in = (uInt)len;
	r = body_inflate_run(pool, &error);
	*out_len = (size_t)((char *)pool->inf.next_out - pool->inf_out);
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
	struct evbuffer_iovec in, out[1];
	size_t len = evbuffer_get_length(data);
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
	/* A large body's buffers are free now, its compressed copy is small. */
	if (len > BODY_POOL_BLOCK)
		body_pool_large_done(pool);
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

int
body_block_reserve(struct body_block **b, size_t len)
{
	struct body_block *grown;
	size_t cap = (*b)->cap;

	if (cap >= len)
		return 0;
	while (cap < len) {
		if (cap > SIZE_MAX / 2 - sizeof(**b))
			return -1;
		cap *= 2;
	}
	if ((*b)->refs != 1)
		return -1;
	if (cap >= BODY_POOL_BLOCK) {
		body_pool_drain((*b)->pool);
		body_pool_drop_large((*b)->pool);
	}
	if ((grown = realloc(*b, sizeof(*grown) + cap)) == NULL)
		return -1;
	grown->cap = cap;
	*b = grown;
	return 0;
}

void
body_block_release(struct body_block *b)
{
	body_block_unref(b);
}

void
body_block_ref(struct body_block *b)
{
	b->refs++;
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
	o->copy->refs++;
	if (evbuffer_add_reference(o->out, o->copy->data + o->copy_used - run, run,
	    body_block_cleanup_cb, o->copy) != 0) {
		o->copy->refs--;
		return -1;
	}
	o->copy_run = 0;
	return 0;
}

/* Copy p[0..len) after a large body's output so far, into its copy blocks. */
static int
body_out_copy(struct body_out *o, const char *p, size_t len)
{
	size_t n;

	while (len > 0) {
		if (o->copy == NULL || o->copy_used == o->copy->cap) {
			if (body_out_flush(o) != 0)
				return -1;
			body_block_unref(o->copy);
			if ((o->copy = body_block_get(o->pool, BODY_COPY_BLOCK)) == NULL)
				return -1;
			o->copy_used = 0;
		}
		n = o->copy->cap - o->copy_used;
		if (n > len)
			n = len;
		memcpy(o->copy->data + o->copy_used, p, n);
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
	struct body_block *in = o->in;
	size_t i;

	for (i = 0; i < n; i++) {
		const struct rewrite_span *s = &spans[i];
		int inside = s->p >= in->data && s->p + s->len <= in->data + o->len;

		if (inside)
			o->res->spliced += s->len;
		else
			o->res->copied += s->len;
		if (inside && s->len >= BODY_REFERENCE_MIN) {
			if (body_out_flush(o) != 0)
				return -1;
			in->refs++;
			if (evbuffer_add_reference(o->out, s->p, s->len, body_block_cleanup_cb,
			    in) == 0)
				continue;
			in->refs--;
		}
		if (o->large ? body_out_copy(o, s->p, s->len) : body_add_copy(o->out, s->p, s->len))
			return -1;
	}
	return 0;
}

int
body_block_add_span(struct evbuffer *out, struct body_block *b, const char *p, size_t len)
{
	if (len >= BODY_REFERENCE_MIN) {
		b->refs++;
		if (evbuffer_add_reference(out, p, len, body_block_cleanup_cb, b) == 0)
			return 0;
		b->refs--;
	}
	return body_add_copy(out, p, len);
}

int
body_add_copy(struct evbuffer *out, const void *p, size_t len)
{
	struct evbuffer_iovec v;

	if (len == 0)
		return 0;
	if (evbuffer_reserve_space(out, (ev_ssize_t)len, &v, 1) != 1)
		return -1;
	memcpy(v.iov_base, p, len);
	v.iov_len = len;
	return evbuffer_commit_space(out, &v, 1);
}

struct body_block *
body_block_copy(struct body_pool *pool, struct evbuffer *src)
{
	size_t len = evbuffer_get_length(src);
	struct body_block *b;

	if ((b = body_block_get(pool, len)) != NULL)
		evbuffer_copyout(src, b->data, len);
	return b;
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
		evbuffer_remove(c->in, b->data + len - *left, n);
		*left -= n;
	}
	if (*left == 0) {
		c->sink = NULL;
		*sinking = 0;
	} else if (!*sinking) {
		c->sink = b->data + len - *left;
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
	raw->refs++;
	if (coding == BODY_CODING_GZIP || coding == BODY_CODING_DEFLATE) {
		o.in = body_inflate(pool, raw->data, len, coding, cfg->limits.max_body, &o.len,
		    &res->error);
		body_block_unref(raw);
		if (o.in == NULL)
			return -1;
		res->inflated = 1;
	}
	o.large = o.in->cap > BODY_POOL_BLOCK;
	rewrite_ctx_sink(pool->rw, body_spans_cb, &o);
	r = rewrite_apply(pool->rw, prog, route->validate, o.in->data, o.len, vars, &rr);
	rewrite_ctx_sink(pool->rw, NULL, NULL);
	if (r == 0 && body_out_flush(&o) != 0) {
		r = -1;
		rr.error = "out of memory";
		rr.invalid = 0;
	}
	body_block_unref(o.copy);
	if (r < 0) {
		res->error = rr.error != NULL ? rr.error : "the body cannot be rewritten";
		res->invalid = rr.invalid;
	} else
		res->status = rr.status;
	rewrite_ctx_release(pool->rw);
	body_block_unref(o.in);
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
	if ((b = body_block_get(pool, len)) == NULL) {
		memset(res, 0, sizeof(*res));
		res->error = "out of memory";
		return -1;
	}
	while (evbuffer_peek(raw, -1, NULL, &v, 1) > 0 && v.iov_len > 0) {
		memcpy(b->data + off, v.iov_base, v.iov_len);
		off += v.iov_len;
		evbuffer_drain(raw, v.iov_len);
	}
	r = body_apply_block(pool, cfg, route, prog, coding, b, len, vars, out, res);
	/* on_error goes on with the received bytes: raw holds them again. */
	if (r != 0 && len > 0 && body_block_add_to(raw, b, len) != 0)
		res->error = "out of memory";
	body_block_unref(b);
	return r;
}
