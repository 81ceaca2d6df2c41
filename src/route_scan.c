/*
 * A look builds the window once, from the input as it is: an identity body whose window lies
 * in one piece of the input is read in place; one without a length comes through its
 * session's peek (payload only: de-chunked there), a compressed one is inflated, into a
 * block of the worker's body pool given back after the look.  The input itself is never
 * changed, so the request head parsed from it stays valid.
 */
#include "config.h"
#include "route_scan.h"
#include "http_body.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "access_log.h"
#include "body.h"
#include "envelope.h"
#include "header_ops.h"
#include "jprefix.h"
#include "rewrite.h"
#include "route.h"

/*
 * While the body is this short every arrival is looked at; afterwards once it grew by an
 * eighth since the last look, so that a body trickling in byte by byte costs a bounded
 * multiple of its window to scan.  Its end, a full window and a full input always are.
 */
#define ROUTE_SCAN_EAGER 4096
/* Captured text kept between requests; a connection that needed more gives it back. */
#define ROUTE_SCAN_KEEP 4096

struct route_scan_window {
	int built;
	const char *p;
	size_t len;
	int complete;                   /* the JSON text ends at len */
	int can_wait;                   /* more of the window may still come */
	int bad;                        /* framing or coding that cannot be read: not JSON */
	int dropped;                    /* payload past a full window */
	int inflated;                   /* enum body_inflate_result of the last piece */
	struct body_block *block;       /* holds p when it is a copy */
};

size_t
route_scan_input_max(const struct config *cfg, size_t head_len)
{
	/* Chunk framing and compressed data may take more bytes than they decode to. */
	return head_len + 2 * cfg->limits.route_scan;
}

/* 1 when the request has a body the route takes as JSON, in a coding that can be read. */
static int
route_scan_json_body(const struct config_route *route, const struct http_request *req)
{
	if (!req->framing.chunked && req->framing.content_length <= 0)
		return 0;
	if (body_content_coding(req->headers, req->nheaders) == BODY_CODING_OTHER)
		return 0;
	return body_is_json(route, http_find_header(req->headers, req->nheaders, "content-type"));
}

int
route_scan_collects(const struct config *cfg, const struct config_route *route,
    const struct http_request *req)
{
	return route->request != NULL && route_scan_json_body(route, req) &&
	    (req->framing.chunked || (uint64_t)req->framing.content_length <= cfg->limits.max_body);
}

/* Follow the body over the bytes that arrived since: is all of it here, and how much
 * payload is (cheap: nothing is copied). */
static void
route_scan_follow(struct route_scan *rs, const struct http_request *req, struct evbuffer *in,
    body_peek_fn peek, void *arg)
{
	size_t avail = evbuffer_get_length(in) - rs->head_len, n;
	const char *p;
	int r;

	if (!req->framing.chunked) {
		rs->body_ended = avail >= (uint64_t)req->framing.content_length;
		rs->payload = avail;
		return;
	}
	while (!rs->body_ended && !rs->framing_bad &&
	    (r = peek(arg, &rs->follow, &p, &n)) != BODY_RUN_NONE) {
		if (r == BODY_RUN_BAD) {
			rs->framing_bad = 1;
			break;
		}
		if (r == BODY_RUN_DATA)
			rs->payload += n;
		rs->body_ended = r == BODY_RUN_END;
	}
}

/* Whether the body grew enough, or ended, since the last look for another one. */
static int
route_scan_worth(struct route_scan *rs, const struct config *cfg,
    const struct http_request *req, struct evbuffer *in, body_peek_fn peek, void *arg)
{
	size_t avail = evbuffer_get_length(in) - rs->head_len;
	unsigned ended = rs->body_ended;

	/* A session may say that a body without a length ended with no byte more. */
	route_scan_follow(rs, req, in, peek, arg);
	if (avail <= rs->seen && (ended || !rs->body_ended))
		return 0;
	return rs->body_ended || rs->framing_bad || rs->payload >= cfg->limits.route_scan ||
	    evbuffer_get_length(in) >= route_scan_input_max(cfg, rs->head_len) ||
	    rs->seen < ROUTE_SCAN_EAGER || avail - rs->seen >= rs->seen / 8;
}

/* One piece of payload into the window: copied, or inflated.  1 when no more can go in. */
static int
route_scan_feed(struct route_scan_window *win, struct body_pool *pool,
    enum body_coding coding, size_t cap, const char *p, size_t n)
{
	size_t k;

	if (coding == BODY_CODING_IDENTITY) {
		k = n < cap - win->len ? n : cap - win->len;
		memcpy(body_block_data(win->block) + win->len, p, k);
		win->len += k;
		win->dropped |= k < n;
		return 0;       /* on to the end of the framing */
	}
	win->inflated = body_prefix_inflate(pool, p, n, &win->len);
	win->bad = win->inflated == BODY_INFLATE_ERROR;
	return win->inflated == BODY_INFLATE_FULL || win->bad;
}

/* The window of the body as the input holds it now. */
static void
route_scan_window(struct route_scan_window *win, const struct route_scan *rs,
    struct body_pool *pool, const struct config *cfg, const struct http_request *req,
    struct evbuffer *in, body_peek_fn peek, void *arg)
{
	size_t cap = cfg->limits.route_scan, left, n;
	enum body_coding coding = body_content_coding(req->headers, req->nheaders);
	struct body_cursor cur;
	const char *run;
	struct evbuffer_ptr pos;
	struct evbuffer_iovec v;
	int ended = 0, stop = 0, r;

	win->built = 1;
	win->inflated = BODY_INFLATE_SHORT;
	left = evbuffer_get_length(in) - rs->head_len;
	if (!req->framing.chunked && (uint64_t)req->framing.content_length <= left) {
		left = (size_t)req->framing.content_length;
		ended = 1;
	}
	if (evbuffer_ptr_set(in, &pos, rs->head_len, EVBUFFER_PTR_SET) != 0) {
		win->bad = 1;
		return;
	}
	n = left < cap ? left : cap;
	if (!req->framing.chunked && coding == BODY_CODING_IDENTITY && (n == 0 ||
	    (evbuffer_peek(in, (ev_ssize_t)n, &pos, &v, 1) > 0 && v.iov_len >= n))) {
		win->p = n == 0 ? "" : v.iov_base;
		win->len = n;
		win->dropped = left > n;
		goto flags;
	}
	if ((win->block = body_block_new(pool, cap)) == NULL ||
	    (coding != BODY_CODING_IDENTITY &&
	    body_prefix_inflate_start(pool, coding, body_block_data(win->block), cap) != 0)) {
		win->bad = 1;
		return;
	}
	win->p = body_block_data(win->block);
	body_cursor_init(&cur, rs->head_len);
	while (req->framing.chunked && !stop &&
	    (r = peek(arg, &cur, &run, &n)) != BODY_RUN_NONE) {
		if (r == BODY_RUN_BAD) {
			win->bad = 1;
			return;
		}
		if (r == BODY_RUN_DATA)
			stop = route_scan_feed(win, pool, coding, cap, run, n);
		if (r == BODY_RUN_END)
			ended = stop = 1;
	}
	while (!req->framing.chunked && !stop && left > 0 &&
	    evbuffer_peek(in, (ev_ssize_t)left, &pos, &v, 1) > 0) {
		n = v.iov_len < left ? v.iov_len : left;
		stop = route_scan_feed(win, pool, coding, cap, v.iov_base, n);
		left -= n;
		if (evbuffer_ptr_set(in, &pos, n, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	if (coding != BODY_CODING_IDENTITY) {
		/* A compressed body that ended before its compressed data did is cut short. */
		win->bad |= ended && win->inflated == BODY_INFLATE_SHORT;
		win->dropped = win->inflated == BODY_INFLATE_FULL;
		ended &= win->inflated == BODY_INFLATE_END;
	}
flags:
	win->complete = ended && !win->dropped;
	win->can_wait = !win->complete && !ended && !win->bad && win->len < cap &&
	    evbuffer_get_length(in) < route_scan_input_max(cfg, rs->head_len);
}

/* 1 when the route's match.json holds over the window, 0 when it does not, -1 when more of
 * the body may decide.  A field not decided within the window does not match. */
static int
route_scan_conds(const struct config_route *route, const struct config *cfg,
    const struct route_scan_window *win)
{
	size_t i;
	int r, more = 0;

	for (i = 0; i < route->njson_match; i++) {
		r = jprefix_eval(route->json_match[i], win->p, win->len, win->complete,
		    cfg->limits.max_depth);
		if (r == 0 || r == JPREFIX_INVALID || (r == JPREFIX_MORE && !win->can_wait))
			return 0;
		more |= r == JPREFIX_MORE;
	}
	return more ? -1 : 1;
}

/* The $json. hash key of the route's upstream, or NULL (an aggregated route has none). */
static const char *
route_scan_hash_key(const struct config_route *route)
{
	const char *key = route->upstream != NULL ? route->upstream->hash_key : NULL;

	return key != NULL && strncmp(key, "$json.", 6) == 0 ? key : NULL;
}

static int
route_scan_header_ops_read(const struct header_ops *ops)
{
	return ops != NULL && (ops->vars & (1u << REWRITE_VAR_JSON)) != 0;
}

int
route_scan_reads_values(const struct config *cfg, const struct config_route *route)
{
	return rewrite_program_uses(route->request, REWRITE_VAR_JSON) ||
	    rewrite_program_uses(route->response, REWRITE_VAR_JSON) ||
	    rewrite_program_uses(route->error_response, REWRITE_VAR_JSON) ||
	    rewrite_program_uses(route->events, REWRITE_VAR_JSON) ||
	    route_scan_header_ops_read(route->request_headers) ||
	    route_scan_header_ops_read(route->response_headers) ||
	    route_scan_hash_key(route) != NULL || cfg->njson_fields != 0;
}

struct route_scan_capture {
	struct route_scan *rs;
	const struct config *cfg;
	const struct route_scan_window *win;
	int more;                       /* a value not decided while more of the body may come */
};

/* Room for one more value and n more bytes of text; 0, or -1 without memory. */
static int
route_scan_grow(struct route_scan *rs, size_t n)
{
	size_t cap;
	void *p;

	if (rs->nvals == rs->vals_cap) {
		cap = rs->vals_cap ? 2 * rs->vals_cap : 4;
		if ((p = realloc(rs->vals, cap * sizeof(*rs->vals))) == NULL)
			return -1;
		rs->vals = p;
		rs->vals_cap = cap;
	}
	if (rs->text_len + n > rs->text_cap) {
		for (cap = rs->text_cap ? rs->text_cap : 256; cap < rs->text_len + n; cap *= 2)
			;
		if ((p = realloc(rs->text, cap)) == NULL)
			return -1;
		rs->text = p;
		rs->text_cap = cap;
	}
	return 0;
}

/* Capture $json.path from the window: a field absent, not decided or not JSON is absent. */
static void
route_scan_capture_cb(void *arg, const char *path, size_t len)
{
	struct route_scan_capture *cap = arg;
	struct route_scan *rs = cap->rs;
	struct jcond_seg segs[JPREFIX_MAX_PATH];
	struct route_scan_value *v;
	const char *json = NULL;
	size_t i, nseg, vlen = 0, tlen;
	unsigned char type = 0;
	int r = JPREFIX_ABSENT;

	for (i = 0; i < rs->nvals; i++)
		if (rs->vals[i].path_len == len && memcmp(rs->vals[i].path, path, len) == 0)
			return;         /* named twice */
	if ((nseg = jprefix_path(path, len, segs)) != 0)
		r = jprefix_find(cap->win->p, cap->win->len, cap->win->complete,
		    cap->cfg->limits.max_depth, 1, segs, nseg, &json, &vlen, &type);
	if (r == JPREFIX_MORE && cap->win->can_wait) {
		cap->more = 1;
		return;
	}
	if (route_scan_grow(rs, r == JPREFIX_FOUND ? vlen : 0) != 0)
		return;
	v = &rs->vals[rs->nvals++];
	v->path = path;
	v->path_len = len;
	v->found = r == JPREFIX_FOUND;
	if (!v->found)
		return;
	/* A string's text, decoded; any other value as its bytes. */
	if (type != ENVELOPE_STRING ||
	    envelope_string_decode(json, vlen, rs->text + rs->text_len, &tlen) != 0) {
		memcpy(rs->text + rs->text_len, json, vlen);
		tlen = vlen;
	}
	v->off = rs->text_len;
	v->len = tlen;
	rs->text_len += tlen;
}

/* Capture every $json value the route reads; -1 when one needs more of the body. */
static int
route_scan_capture(struct route_scan *rs, const struct config *cfg,
    const struct config_route *route, const struct route_scan_window *win)
{
	struct route_scan_capture cap = { rs, cfg, win, 0 };
	const char *key = route_scan_hash_key(route);
	size_t i;

	rewrite_program_names(route->request, REWRITE_VAR_JSON, route_scan_capture_cb, &cap);
	rewrite_program_names(route->response, REWRITE_VAR_JSON, route_scan_capture_cb, &cap);
	rewrite_program_names(route->error_response, REWRITE_VAR_JSON, route_scan_capture_cb,
	    &cap);
	rewrite_program_names(route->events, REWRITE_VAR_JSON, route_scan_capture_cb, &cap);
	header_ops_names(route->request_headers, REWRITE_VAR_JSON, route_scan_capture_cb, &cap);
	header_ops_names(route->response_headers, REWRITE_VAR_JSON, route_scan_capture_cb, &cap);
	if (key != NULL)
		route_scan_capture_cb(&cap, key + 6, strlen(key + 6));
	for (i = 0; i < cfg->njson_fields; i++)
		route_scan_capture_cb(&cap, cfg->json_fields[i], strlen(cfg->json_fields[i]));
	return cap.more ? -1 : 0;
}

int
route_scan_match(struct route_scan *rs, struct body_pool *pool, const struct config *cfg,
    const struct http_request *req, struct evbuffer *in, size_t head_len, body_peek_fn peek,
    void *arg, const struct config_route **out, unsigned *allowed)
{
	struct route_scan_window win;
	const struct config_route *route;
	size_t next = 0;
	unsigned mismatch = 0, m;
	int r = 1, json;

	if (!rs->waiting) {
		rs->head_len = head_len;
		rs->seen = 0;
		rs->payload = 0;
		rs->body_ended = rs->framing_bad = 0;
		body_cursor_init(&rs->follow, head_len);
	} else if (!route_scan_worth(rs, cfg, req, in, peek, arg)) {
		return ROUTE_SCAN_WAIT;
	}
	rs->nvals = rs->text_len = 0;
	memset(&win, 0, sizeof(win));
	for (;;) {
		route = route_match_from(cfg, next, req->host.p, req->host.len, req->path.p,
		    req->path.len, req->method_bit, &m);
		mismatch |= m;
		if (route == NULL)
			break;
		next = (size_t)(route - cfg->routes) + 1;
		/* Only a route that reads fields looks at the body's headers. */
		json = (route->njson_match != 0 || route_scan_reads_values(cfg, route)) &&
		    route_scan_json_body(route, req);
		if (route->njson_match != 0) {
			if (!json)
				continue;
			if (!win.built)
				route_scan_window(&win, rs, pool, cfg, req, in, peek, arg);
			if (win.bad || (r = route_scan_conds(route, cfg, &win)) == 0)
				continue;
			if (r < 0)
				break;
		}
		if (json && route_scan_reads_values(cfg, route) &&
		    !route_scan_collects(cfg, route, req)) {
			if (!win.built)
				route_scan_window(&win, rs, pool, cfg, req, in, peek, arg);
			if (!win.bad)
				r = route_scan_capture(rs, cfg, route, &win);
		}
		break;
	}
	if (win.block != NULL)
		body_block_release(win.block);
	if (route != NULL && r < 0) {
		rs->waiting = 1;
		rs->seen = evbuffer_get_length(in) - head_len;
		return ROUTE_SCAN_WAIT;
	}
	rs->waiting = 0;
	*out = route;
	*allowed = route == NULL ? mismatch : 0;
	return ROUTE_SCAN_DONE;
}

/* The route's values from win alone: any taken before go. */
static void
route_scan_capture_from(struct route_scan *rs, const struct config *cfg,
    const struct config_route *route, const struct route_scan_window *win)
{
	rs->nvals = rs->text_len = 0;
	if (!win->bad)
		route_scan_capture(rs, cfg, route, win);
}

void
route_scan_read_body(struct route_scan *rs, const struct config *cfg,
    const struct config_route *route, const char *body, size_t len)
{
	struct route_scan_window win;

	memset(&win, 0, sizeof(win));
	win.p = len != 0 ? body : "";
	win.len = len;
	win.complete = 1;
	route_scan_capture_from(rs, cfg, route, &win);
}

void
route_scan_read_prefix(struct route_scan *rs, struct body_pool *pool,
    const struct config *cfg, const struct config_route *route, enum body_coding coding,
    const char *body, size_t len)
{
	struct route_scan_window win;
	size_t cap = cfg->limits.route_scan;

	memset(&win, 0, sizeof(win));
	if (coding == BODY_CODING_IDENTITY) {
		win.p = body;
		win.len = len < cap ? len : cap;
	} else if (coding == BODY_CODING_OTHER || (win.block = body_block_new(pool, cap)) == NULL ||
	    body_prefix_inflate_start(pool, coding, body_block_data(win.block), cap) != 0) {
		win.bad = 1;
	} else {
		win.p = body_block_data(win.block);
		route_scan_feed(&win, pool, coding, cap, body, len);
	}
	route_scan_capture_from(rs, cfg, route, &win);
	if (win.block != NULL)
		body_block_release(win.block);
}

int
route_scan_value(const struct route_scan *rs, const char *path, size_t len, const char **text,
    size_t *text_len)
{
	size_t i;

	for (i = 0; i < rs->nvals; i++)
		if (rs->vals[i].path_len == len && memcmp(rs->vals[i].path, path, len) == 0) {
			if (!rs->vals[i].found)
				return 0;
			*text = rs->text + rs->vals[i].off;
			*text_len = rs->vals[i].len;
			return 1;
		}
	return 0;
}

static int
route_scan_json_cb(const void *arg, const char *path, size_t len, struct rewrite_str *value)
{
	return route_scan_value(arg, path, len, &value->p, &value->len);
}

void
route_scan_vars(const struct route_scan *rs, struct rewrite_vars *vars)
{
	vars->json_cb = route_scan_json_cb;
	vars->json_arg = rs;
}

size_t
route_scan_log(const struct route_scan *rs, const struct config *cfg, struct access_field *out)
{
	size_t i;

	for (i = 0; i < cfg->njson_fields; i++) {
		out[i].name = cfg->json_fields[i];
		if (!route_scan_value(rs, cfg->json_fields[i], strlen(cfg->json_fields[i]),
		    &out[i].value, &out[i].len))
			out[i].value = NULL;
	}
	return cfg->njson_fields;
}

void
route_scan_done(struct route_scan *rs)
{
	rs->waiting = 0;
	rs->nvals = rs->text_len = 0;
	if (rs->text_cap > ROUTE_SCAN_KEEP) {
		free(rs->text);
		rs->text = NULL;
		rs->text_cap = 0;
	}
}

void
route_scan_free(struct route_scan *rs)
{
	free(rs->text);
	free(rs->vals);
	memset(rs, 0, sizeof(*rs));
}
