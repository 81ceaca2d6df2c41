/*
 * A request's life on an aggregated route: start -> one fetch per backend (a backend with
 * after: once the answers it waits for are in) -> settle each answer (a 2xx status, one
 * JSON value, inflated, put through its ops) -> merge (keyed or flat) -> the route's ops ->
 * answer.  The merged body is the backends' bytes spliced: every value stays a reference
 * into the block its answer was read into (or inflated into), nothing is re-encoded.
 *
 * The answer is given from an event of its own, never from inside a backend's callback, so
 * that the client's next request (which may take this aggregate again) never starts while
 * a fetch of this one is still on the stack.
 */
#include "config.h"
#include "aggregate.h"
#include "jwt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "body.h"
#include "envelope.h"
#include "exchange.h"
#include "fetch.h"
#include "header_ops.h"
#include "jvalid.h"
#include "log.h"
#include "merge.h"
#include "metrics.h"
#include "path_vars.h"
#include "respond.h"
#include "rewrite.h"
#include "route.h"
#include "server.h"
#include "template.h"
#include "upstream.h"
#include "upstream_state.h"

/* The most a decoded field kept for the next request may hold. */
#define AGG_WARM_BYTES (64 * 1024)

enum agg_state { AGG_IDLE, AGG_RUNNING, AGG_OK, AGG_FAILED };

struct agg_backend {
	struct fetch f;
	struct aggregate *a;
	const struct config_backend *cfg;
	enum agg_state state;
	struct body_block *vblk;        /* the block its answer's value lies in ... */
	const char *val;                /* ... and the value: one JSON value, no whitespace */
	size_t len;
	struct body_block *own;         /* a block of its own: the answer inflated, or its ops'
	                                 * output gathered; NULL: vblk is the fetch's */
	struct evbuffer *out;           /* or (not empty): the value as its ops wrote it */
	char hash_key[256];             /* the upstream's hash balancing key for it */
	size_t hash_key_len;
	unsigned sent : 1;              /* its request went out (a fetch started) */
	unsigned skipped : 1;           /* not sent: a backend it waits for failed */
	unsigned mapped : 1;            /* failed on the status its status_from chose: out
	                                 * holds its answer as its ops left it */
	uint64_t ended_us;              /* when it answered, failed or was given up
	                                 * (upstream_state_now_us); 0: not yet */
	int status;                     /* its answer's status (as status_from set it), 0
	                                 * when none */
};

struct aggregate {
	struct aggregate *next;         /* among the worker's idle aggregates */
	struct worker *w;
	struct worker_runtime *wr;
	const struct config_route *route;
	struct agg_backend **b;         /* allocated once each, kept with their buffers */
	size_t nb, cap;
	size_t pending;                 /* backends whose answer is not settled */
	struct agg_backend *failed;     /* the required backend whose failure is the answer */
	struct agg_backend *first_failed;   /* the first backend to fail, in time */
	unsigned refused : 1;           /* the request cannot go to the backends: 400 (message) */
	struct event *finish_ev;
	struct event *timer;            /* the route's timeout */
	aggregate_done_cb cb;
	void *arg;
	struct evbuffer *merged;
	struct evbuffer *head;          /* the client's request head, for backends started later */
	struct http_str captures[ROUTE_MAX_CAPTURES];
	char request_id[136];
	char remote_addr[64];
	const struct conn *client;      /* for the TLS variables of ops */
	const struct path_vars *path;   /* and $path.NAME */
	const struct jwt_claims *claims;    /* ${jwt.CLAIM}, or NULL */
	const char *api_key;            /* ${api_key}, or NULL */
	char claim[256];                /* a claim decoded for a template */
	int tls;
	struct envelope env;            /* reads the fields of answers for ${backend...} */
	char *scratch;                  /* a decoded field */
	size_t scratch_cap;
	struct merge *flat;             /* merge: flat */
	char why[160];
	char message[512];
	struct access_backend *log;     /* what the access log says of each backend */
	size_t log_cap;
	unsigned finishing : 1;
};

static void agg_fetch_done_cb(struct fetch *f, void *arg);
static void agg_finish_cb(evutil_socket_t fd, short what, void *arg);
static void agg_timeout_cb(evutil_socket_t fd, short what, void *arg);

static const struct config *
agg_cfg(const struct aggregate *a)
{
	return a->wr->rt->cfg;
}

static void
agg_backend_free(struct agg_backend *b)
{
	fetch_free(&b->f);
	if (b->out != NULL)
		evbuffer_free(b->out);
	free(b);
}

static void
agg_free(struct aggregate *a)
{
	size_t i;

	for (i = 0; i < a->cap; i++)
		agg_backend_free(a->b[i]);
	free(a->b);
	if (a->finish_ev != NULL)
		event_free(a->finish_ev);
	if (a->timer != NULL)
		event_free(a->timer);
	if (a->merged != NULL)
		evbuffer_free(a->merged);
	if (a->head != NULL)
		evbuffer_free(a->head);
	envelope_free(&a->env);
	free(a->scratch);
	merge_free(a->flat);
	free(a->log);
	free(a);
}

/* The idle aggregates of this thread's worker, kept for its next aggregated requests: the
 * route kind's own, which the worker knows nothing of. */
static _Thread_local struct aggregate *agg_idle;

/* An idle aggregate of the worker with room for n backends, or a new one. */
static struct aggregate *
agg_get(struct worker *w, size_t n)
{
	struct aggregate *a;
	struct agg_backend **grown, *b;
	struct access_backend *log;

	if ((a = agg_idle) != NULL) {
		agg_idle = a->next;
	} else {
		if ((a = calloc(1, sizeof(*a))) == NULL)
			return NULL;
		a->w = w;
		envelope_init(&a->env);
		a->finish_ev = event_new(w->base, -1, 0, agg_finish_cb, a);
		a->timer = evtimer_new(w->base, agg_timeout_cb, a);
		a->merged = evbuffer_new();
		a->head = evbuffer_new();
		a->flat = merge_new();
		if (a->finish_ev == NULL || a->timer == NULL || a->merged == NULL ||
		    a->head == NULL || a->flat == NULL) {
			agg_free(a);
			return NULL;
		}
	}
	if (a->log_cap < n) {
		if ((log = realloc(a->log, n * sizeof(*log))) == NULL)
			goto fail;
		a->log = log;
		a->log_cap = n;
	}
	if (a->cap < n) {
		if ((grown = realloc(a->b, n * sizeof(*grown))) == NULL)
			goto fail;
		a->b = grown;
		while (a->cap < n) {
			if ((b = calloc(1, sizeof(*b))) == NULL)
				goto fail;
			if (fetch_init(&b->f, w, agg_fetch_done_cb, b) < 0) {
				free(b);
				goto fail;
			}
			if ((b->out = evbuffer_new()) == NULL) {
				agg_backend_free(b);
				goto fail;
			}
			b->a = a;
			a->b[a->cap++] = b;
		}
	}
	a->nb = n;
	return a;
fail:
	a->nb = 0;
	a->next = agg_idle;
	agg_idle = a;
	return NULL;
}

/* Nothing more will change the answer: give it from the loop. */
static void
agg_finish(struct aggregate *a)
{
	size_t i;

	if (a->finishing)
		return;
	a->finishing = 1;
	evtimer_del(a->timer);
	for (i = 0; i < a->nb; i++)
		if (a->b[i]->state == AGG_RUNNING) {
			fetch_cancel(&a->b[i]->f);
			a->b[i]->ended_us = upstream_state_now_us();
		}
	event_active(a->finish_ev, EV_TIMEOUT, 0);
}

/* The backend failed (its fetch's error and message say how): a required one fails the
 * route, an optional one makes the answer partial. */
static void
agg_failed(struct agg_backend *b)
{
	struct aggregate *a = b->a;

	b->state = AGG_FAILED;
	if (a->first_failed == NULL)
		a->first_failed = b;
	if (!b->cfg->required)
		return;
	if (a->failed == NULL)
		a->failed = b;
	agg_finish(a);
}

/* The client's request cannot be put to a backend (message says why): a bad request,
 * whatever required says. */
static void
agg_refuse(struct aggregate *a, const char *backend, const char *why)
{
	if (!a->refused)
		snprintf(a->message, sizeof(a->message), "backend %s: %s", backend, why);
	a->refused = 1;
	agg_finish(a);
}

/* The answer is not one the merge can take: say why in the fetch's error. */
static void
agg_invalid(struct agg_backend *b, enum gateway_error err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void
agg_invalid(struct agg_backend *b, enum gateway_error err, const char *fmt, ...)
{
	struct fetch *f = &b->f;
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	f->status = 0;
	f->error = err;
	snprintf(f->message, sizeof(f->message), "the answer of upstream %s %s",
	    b->cfg->upstream->name, why);
	log_warnx("route %s: backend %s: %s (request %s)", b->a->route->name, b->cfg->name,
	    f->message, b->a->request_id);
	agg_failed(b);
}

static int
agg_is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Where the one JSON value of data[0..len) lies, checked as the route's validate says. */
static int
agg_json_value(const struct aggregate *a, const char *data, size_t len, size_t *vs,
    size_t *end)
{
	unsigned max_depth = agg_cfg(a)->limits.max_depth;
	unsigned char type;
	int r;

	*vs = envelope_skip_ws(data, len, 0);
	if (*vs == len)
		return ENVELOPE_ERR_SYNTAX;
	if (a->route->validate == VALIDATE_FULL) {
		if ((r = jvalid_check(data, len, max_depth, NULL)) != 0)
			return r == JVALID_ERR_DEPTH ? ENVELOPE_ERR_DEPTH : ENVELOPE_ERR_SYNTAX;
		for (*end = len; agg_is_ws(data[*end - 1]); (*end)--)
			;
		return 0;
	}
	if ((r = envelope_value_end(data, len, *vs, max_depth, end, &type)) == 0 &&
	    envelope_skip_ws(data, len, *end) != len)
		r = ENVELOPE_ERR_SYNTAX;
	return r;
}

/* An answer that is not JSON, passed: its text as a JSON string (invalid UTF-8 becomes
 * U+FFFD), escaped a piece at a time between characters. */
static void
agg_as_string(struct evbuffer *out, const char *data, size_t len)
{
	char esc[6 * 1024];
	size_t off = 0, n;

	evbuffer_add(out, "\"", 1);
	while (off < len) {
		n = len - off < 1024 ? len - off : 1024;
		/* Never split a UTF-8 sequence: back up over (at most 3) continuation bytes. */
		while (off + n < len && n > 1021 && ((unsigned char)data[off + n] & 0xc0) == 0x80)
			n--;
		evbuffer_add(out, esc, rewrite_json_escape(esc, data + off, n));
		off += n;
	}
	evbuffer_add(out, "\"", 1);
}

/* The variables (1 << REWRITE_VAR_* in uses) of ops for this request; $upstream is the
 * server that answered, if any; $header.NAME reads req, or the request head kept when req is
 * NULL. */
static void
agg_vars(struct aggregate *a, unsigned uses, const struct config_server *srv,
    const struct http_request *req, struct rewrite_vars *vars, struct body_tls_text *tls_text)
{
	size_t len;

	memset(vars, 0, sizeof(*vars));
	vars->request_id = (struct rewrite_str){ a->request_id, strlen(a->request_id) };
	vars->route = (struct rewrite_str){ a->route->name, strlen(a->route->name) };
	vars->upstream.p = srv != NULL ? srv->addr.text : "";
	vars->upstream.len = strlen(vars->upstream.p);
	vars->remote_addr = (struct rewrite_str){ a->remote_addr, strlen(a->remote_addr) };
	vars->now = (long long)time(NULL);
	body_tls_vars(uses, a->client, vars, tls_text);
	path_vars_vars(a->path, vars);
	if (req == NULL && (uses & (1u << REWRITE_VAR_HEADER)) &&
	    (len = evbuffer_get_length(a->head)) != 0 &&
	    http_parse_request((const char *)evbuffer_pullup(a->head, (ev_ssize_t)len), len,
	    &a->w->req) > 0)
		req = &a->w->req;
	if (req != NULL)
		body_vars_headers(vars, req);
}

static unsigned
agg_prog_vars(const struct rewrite_program *prog)
{
	return prog != NULL ? prog->vars : 0;
}

/* The value in one block of its own (a flat merge or a field read needs it whole): what
 * its ops wrote, gathered with one copy. */
static int
agg_contiguous(struct agg_backend *b)
{
	struct body_block *nb;
	const char *data;
	size_t len = evbuffer_get_length(b->out), vs = 0;

	if (len == 0)
		return 0;
	if ((nb = body_block_copy(b->a->w->bodies, b->out)) == NULL)
		return -1;
	evbuffer_drain(b->out, len);
	if (b->own != NULL)
		body_block_release(b->own);
	b->own = b->vblk = nb;
	data = body_block_data(nb);
	while (vs < len && agg_is_ws(data[vs]))
		vs++;
	while (len > vs && agg_is_ws(data[len - 1]))
		len--;
	b->val = data + vs;
	b->len = len - vs;
	return 0;
}

/* 1 when another backend of the route reads this one's answer. */
static int
agg_read_later(const struct agg_backend *b)
{
	const struct config_route *route = b->a->route;
	size_t i, j, me = (size_t)(b->cfg - route->backends);

	for (i = 0; i < route->nbackends; i++)
		for (j = 0; j < route->backends[i].nafter; j++)
			if (route->backends[i].after[j] == me)
				return 1;
	return 0;
}

/*
 * A 2xx answer: inflated when it is compressed, checked to be one JSON value, put through
 * the backend's ops (into out, referencing the answer); not JSON or not rewritable, it
 * follows the backend's on_error.
 */
static void
agg_settle(struct agg_backend *b)
{
	struct aggregate *a = b->a;
	const struct config *cfg = agg_cfg(a);
	const struct config_backend *bc = b->cfg;
	struct fetch *f = &b->f;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	struct body_block *blk;
	const char *data, *why;
	size_t len, vs, end;
	int r;

	if (f->status < 200 || f->status > 299) {
		agg_invalid(b, GW_UPSTREAM_STATUS, "is status %d", f->status);
		return;
	}
	if (fetch_body(f, &blk, &len) < 0) {
		agg_invalid(b, GW_UPSTREAM_INVALID, "does not fit in memory");
		return;
	}
	b->vblk = blk;
	if (f->coding == BODY_CODING_OTHER) {
		agg_invalid(b, GW_UPSTREAM_INVALID, "has a content coding other than gzip and "
		    "deflate");
		return;
	}
	if (f->coding != BODY_CODING_IDENTITY && len != 0) {
		b->own = body_inflate(a->w->bodies, body_block_data(blk), len, f->coding,
		    cfg->limits.max_body, &len, &why);
		if (b->own == NULL) {
			agg_invalid(b, GW_UPSTREAM_INVALID, "cannot be inflated: %s", why);
			return;
		}
		b->vblk = b->own;
	}
	data = b->vblk != NULL ? body_block_data(b->vblk) : "";
	if ((r = agg_json_value(a, data, len, &vs, &end)) != 0) {
		if (bc->on_error == ON_ERROR_FAIL) {
			agg_invalid(b, GW_UPSTREAM_INVALID, len == 0 ? "is empty, not JSON" :
			    r == ENVELOPE_ERR_DEPTH ? "is JSON nested too deep" :
			    "is not one JSON value");
			return;
		}
		agg_as_string(b->out, data, len);
	} else {
		b->val = data + vs;
		b->len = end - vs;
		if (bc->response != NULL) {
			agg_vars(a, agg_prog_vars(bc->response), fetch_server(f), NULL, &vars,
			    &tls_text);
			vars.status = f->status;        /* for when: { status: ... } */
			if (body_apply_block(a->w->bodies, cfg, a->route, bc->response,
			    BODY_CODING_IDENTITY, b->vblk, len, &vars, b->out, &res) == 0) {
				metrics_bytes(a->w, res.spliced, res.copied);
				if (res.status != 0)
					b->status = res.status;
				if (b->status < 200 || b->status > 299) {
					/* An error envelope: the backend failed, its answer kept
					 * for a route that answers with it. */
					b->mapped = 1;
					agg_invalid(b, GW_UPSTREAM_STATUS, "is status %d by "
					    "status_from", b->status);
					return;
				}
			} else {
				evbuffer_drain(b->out, evbuffer_get_length(b->out));
				if (bc->on_error == ON_ERROR_FAIL) {
					agg_invalid(b, GW_UPSTREAM_INVALID, "cannot be rewritten: %s",
					    res.error);
					return;
				}
			}
		}
	}
	if ((a->route->merge == MERGE_FLAT || agg_read_later(b)) && agg_contiguous(b) < 0) {
		agg_invalid(b, GW_UPSTREAM_INVALID, "does not fit in memory");
		return;
	}
	if (a->route->merge == MERGE_FLAT && (r = merge_add(a->flat,
	    (size_t)(bc - a->route->backends), b->val, b->len, cfg->limits.max_depth,
	    cfg->limits.max_members)) != 0) {
		agg_invalid(b, GW_UPSTREAM_INVALID, "%s", r == MERGE_ERR_MEMBERS ? "has more members "
		    "than limits.max_members, which a flat merge takes" : r == MERGE_ERR_MEMORY ?
		    "does not fit in memory" : "is not an object, which a flat merge takes");
		return;
	}
	b->state = AGG_OK;
}

static void agg_progress(struct aggregate *a);

static void
agg_fetch_done_cb(struct fetch *f, void *arg)
{
	struct agg_backend *b = arg;
	struct aggregate *a = b->a;

	a->pending--;
	b->status = f->status;
	b->ended_us = f->ended_us;
	metrics_upstream_request(a->w, fetch_server(f), f->status, f->status != 0 ? -1 :
	    (int)f->error);
	if (f->status == 0)
		agg_failed(b);
	else
		agg_settle(b);
	agg_progress(a);
}

/* The backend never went out: why is in its fetch's error. */
static void
agg_not_sent(struct agg_backend *b, enum gateway_error err, const char *message)
{
	struct aggregate *a = b->a;

	b->f.status = 0;
	b->f.error = err;
	snprintf(b->f.message, sizeof(b->f.message), "%s", message);
	log_warnx("route %s: backend %s: %s (request %s)", a->route->name, b->cfg->name,
	    message, a->request_id);
	a->pending--;
	agg_failed(b);
}

/* A key looked for in an answer's object, and its member: the last of duplicate keys wins,
 * as in most JSON parsers. */
struct agg_lookup {
	const char *key;
	size_t len;
	struct envelope_member found;
	int hit;
};

static int
agg_lookup_cb(void *arg, const struct envelope_member *m)
{
	struct agg_lookup *l = arg;

	if (envelope_string_eq(m->key, m->keylen, l->key, l->len)) {
		l->found = *m;
		l->hit = 1;
	}
	return 0;
}

/* ${backend.NAME.FIELD}: a member (dotted path) of the answer of a backend waited for, as
 * text: a string decoded, a number or literal as it stands. */
static int
agg_field_cb(void *arg, unsigned backend, const char *field, size_t len, struct http_str *value,
    const char **why)
{
	struct aggregate *a = arg;
	const struct agg_backend *b = a->b[backend];
	struct agg_lookup l;
	const char *data = b->val, *dot, *end = field + len;
	size_t n = b->len, vend;
	unsigned char type = data[0] == '{' ? ENVELOPE_OBJECT : ENVELOPE_PRIMITIVE;
	size_t dl;
	int r = 0;

	*why = a->why;
	a->env.member_cb = agg_lookup_cb;
	a->env.member_arg = &l;
	a->env.max_members = agg_cfg(a)->limits.max_members;
	for (;;) {
		dot = memchr(field, '.', (size_t)(end - field));
		if (dot == NULL)
			dot = end;
		l.key = field;
		l.len = (size_t)(dot - field);
		l.hit = 0;
		if (type != ENVELOPE_OBJECT || (r = envelope_parse(&a->env, data, n, 0,
		    agg_cfg(a)->limits.max_depth, &vend)) != 0) {
			snprintf(a->why, sizeof(a->why), r == ENVELOPE_ERR_MEMBERS ? "the answer of "
			    "backend %s has more members than limits.max_members (looking for %.*s)" :
			    "the answer of backend %s has no object where %.*s is", b->cfg->name,
			    (int)l.len, field);
			return -1;
		}
		if (!l.hit) {
			snprintf(a->why, sizeof(a->why), "the answer of backend %s has no %.*s",
			    b->cfg->name, (int)l.len, field);
			return -1;
		}
		data = l.found.val;
		n = l.found.vallen;
		type = l.found.type;
		if (dot == end)
			break;
		field = dot + 1;
	}
	if (type == ENVELOPE_OBJECT || type == ENVELOPE_ARRAY) {
		snprintf(a->why, sizeof(a->why), "in the answer of backend %s it is %s, not a "
		    "value", b->cfg->name, type == ENVELOPE_OBJECT ? "an object" : "an array");
		return -1;
	}
	if (type == ENVELOPE_PRIMITIVE) {
		*value = (struct http_str){ data, n };
		return 0;
	}
	if (a->scratch_cap < n) {
		char *grown = realloc(a->scratch, n);
		if (grown == NULL) {
			snprintf(a->why, sizeof(a->why), "out of memory");
			return -1;
		}
		a->scratch = grown;
		a->scratch_cap = n;
	}
	if (envelope_string_decode(data, n, a->scratch, &dl) < 0) {
		snprintf(a->why, sizeof(a->why), "a bad escape in the answer of backend %s",
		    b->cfg->name);
		return -1;
	}
	*value = (struct http_str){ a->scratch, dl };
	return 0;
}

static void
agg_add_str(struct evbuffer *out, struct http_str s)
{
	evbuffer_add(out, s.p, s.len);
}

#define agg_add_lit(out, lit) evbuffer_add((out), (lit), sizeof(lit) - 1)

/* 1 when the backend's configuration sets the header lower_name itself. */
static int
agg_sets_header(const struct config_backend *cfg, const char *lower_name)
{
	size_t i;

	for (i = 0; i < cfg->nheaders; i++)
		if (strcasecmp(cfg->headers[i].name, lower_name) == 0)
			return 1;
	return 0;
}

/* ${jwt.CLAIM}: a string decoded, a number or a boolean as written; anything else, or a
 * path longer than a claim's name can be, is no value. */
static int
agg_claim_cb(void *arg, const char *path, size_t len, struct http_str *value)
{
	struct aggregate *a = arg;
	char name[128];
	const char *p;
	size_t n;
	int r;

	if (a->claims == NULL || len >= sizeof(name))
		return -1;
	memcpy(name, path, len);
	name[len] = '\0';
	switch (jwt_claim(a->claims, name, &p, &n)) {
	case JWT_CLAIM_STRING:
		if ((r = jwt_claim_str(a->claims, name, a->claim, sizeof(a->claim))) < 0)
			return -1;
		*value = (struct http_str){ a->claim, (size_t)r };
		return 0;
	case JWT_CLAIM_NUMBER:
	case JWT_CLAIM_BOOL:
		*value = (struct http_str){ p, n };
		return 0;
	default:
		return -1;
	}
}

/* The values of the backends' templates for the client's request req. */
static struct template_values
agg_values(struct aggregate *a, const struct http_request *req)
{
	struct template_values v = {
		req, a->captures, a->request_id, a->remote_addr, agg_field_cb, a, agg_claim_cb, a,
		a->api_key
	};

	return v;
}

/*
 * The route's request_headers set and add, but for the names the backend's headers give:
 * a backend's own headers are the more specific.
 */
static void
agg_put_route_headers(struct aggregate *a, const struct config_backend *cfg,
    const struct http_request *req, struct evbuffer *out)
{
	const struct header_ops *ops = a->route->request_headers;
	struct header_ops one;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct evbuffer_iovec v;
	size_t i;

	if (ops == NULL || ops->nout == 0)
		return;
	agg_vars(a, ops->vars, NULL, req, &vars, &tls_text);
	one = *ops;
	one.nout = 1;
	for (i = 0; i < ops->nout; i++) {
		if (agg_sets_header(cfg, ops->out[i].lower))
			continue;
		one.out = &ops->out[i];
		if (evbuffer_reserve_space(out, (ev_ssize_t)header_ops_size(&one, &vars), &v, 1) < 1)
			return;
		v.iov_len = (size_t)(header_ops_put(v.iov_base, &one, &vars) - (char *)v.iov_base);
		evbuffer_commit_space(out, &v, 1);
	}
}

/*
 * The backend's request: its method and target, Host (the upstream's host_header, else the
 * client's), the gateway's own headers, the route's request_headers and the backend's
 * headers (a name in the backend's headers is theirs alone).  Returns 0, or a
 * template_error with the reason in err.  *target_len is the target's length.
 */
static int
agg_build_request(struct aggregate *a, struct agg_backend *b, const struct http_request *req,
    size_t *target_len, char *err, size_t errcap)
{
	const struct config_backend *cfg = b->cfg;
	const struct header_ops *ops = a->route->request_headers;
	unsigned taken = ops != NULL ? ops->own : 0;    /* own headers the route's ops set */
	struct evbuffer *out = b->f.request;
	struct http_str host = req->host, xff;
	struct template_values v = agg_values(a, req);
	size_t i, before;
	int r;

	evbuffer_drain(out, evbuffer_get_length(out));
	evbuffer_add(out, cfg->method, strlen(cfg->method));
	agg_add_lit(out, " ");
	before = evbuffer_get_length(out);
	if ((r = template_render(&cfg->target, &v, out, err, errcap)) != 0)
		return r;
	*target_len = evbuffer_get_length(out) - before;
	agg_add_lit(out, " HTTP/1.1\r\n");
	if (!agg_sets_header(cfg, "host")) {
		if (cfg->upstream->host_header != NULL) {
			host.p = cfg->upstream->host_header;
			host.len = strlen(host.p);
		} else if (host.len == 0) {
			host.p = cfg->upstream->name;
			host.len = strlen(host.p);
		}
		agg_add_lit(out, "Host: ");
		agg_add_str(out, host);
		agg_add_lit(out, "\r\n");
	}
	if (!agg_sets_header(cfg, "x-request-id") && !(taken & HEADER_OPS_REQUEST_ID)) {
		agg_add_lit(out, "X-Request-Id: ");
		evbuffer_add(out, a->request_id, strlen(a->request_id));
		agg_add_lit(out, "\r\n");
	}
	if (!agg_sets_header(cfg, "x-forwarded-for") && !(taken & HEADER_OPS_XFF)) {
		agg_add_lit(out, "X-Forwarded-For: ");
		xff = http_find_header(req->headers, req->nheaders, "x-forwarded-for");
		if (xff.len != 0) {
			agg_add_str(out, xff);
			agg_add_lit(out, ", ");
		}
		evbuffer_add(out, a->remote_addr, strlen(a->remote_addr));
		agg_add_lit(out, "\r\n");
	}
	if (!agg_sets_header(cfg, "x-forwarded-proto") && !(taken & HEADER_OPS_XFP)) {
		if (a->tls)
			agg_add_lit(out, "X-Forwarded-Proto: https\r\n");
		else
			agg_add_lit(out, "X-Forwarded-Proto: http\r\n");
	}
	agg_put_route_headers(a, cfg, req, out);
	for (i = 0; i < cfg->nheaders; i++) {
		evbuffer_add(out, cfg->headers[i].name, strlen(cfg->headers[i].name));
		agg_add_lit(out, ": ");
		if ((r = template_render(&cfg->headers[i].value, &v, out, err, errcap)) != 0)
			return r;
		agg_add_lit(out, "\r\n");
	}
	if (cfg->method_bit & (METHOD_POST | METHOD_PUT | METHOD_PATCH))
		agg_add_lit(out, "Content-Length: 0\r\n");
	agg_add_lit(out, "\r\n");
	return 0;
}

static void
agg_backend_start(struct aggregate *a, struct agg_backend *b, const struct http_request *req)
{
	const struct config_backend *cfg = b->cfg;
	struct upstream_pool *up = &a->wr->pools[cfg->upstream - agg_cfg(a)->upstreams];
	struct http_str target, path;
	size_t mlen = strlen(cfg->method), tlen = 0;
	const char *q;
	char err[384];
	int r;

	if ((r = agg_build_request(a, b, req, &tlen, err, sizeof(err))) != 0) {
		agg_not_sent(b, r == TEMPLATE_BAD_VALUE ? GW_BAD_REQUEST : GW_UPSTREAM_INVALID, err);
		if (r == TEMPLATE_BAD_VALUE)
			agg_refuse(a, cfg->name, err);
		return;
	}
	target.p = (const char *)evbuffer_pullup(b->f.request, (ev_ssize_t)(mlen + 1 + tlen)) +
	    mlen + 1;
	target.len = tlen;
	path = target;
	if ((q = memchr(target.p, '?', target.len)) != NULL)
		path.len = (size_t)(q - target.p);
	b->hash_key_len = exchange_hash_key(cfg->upstream, a->remote_addr, req, target, path,
	    b->hash_key, sizeof(b->hash_key));
	b->state = AGG_RUNNING;
	b->sent = 1;
	fetch_start(&b->f, up, b->hash_key, b->hash_key_len,
	    (cfg->method_bit & (METHOD_GET | METHOD_PUT | METHOD_DELETE | METHOD_OPTIONS)) != 0,
	    agg_cfg(a)->limits.max_body, &a->route->timeouts, cfg->timeout);
}

/* The client's request again, for backends that start once others answered. */
static const struct http_request *
agg_request(struct aggregate *a)
{
	struct http_request *req = &a->w->req;
	size_t len = evbuffer_get_length(a->head);

	http_parse_request((const char *)evbuffer_pullup(a->head, (ev_ssize_t)len), len, req);
	route_captures(a->route, req->path.p, req->path.len, a->captures);
	return req;
}

/* A backend waits for others: 1 while one of them has no answer yet; -1 when one failed
 * (*which). */
static int
agg_waiting(const struct aggregate *a, const struct agg_backend *b, size_t *which)
{
	size_t i;
	int waiting = 0;

	for (i = 0; i < b->cfg->nafter; i++) {
		enum agg_state st = a->b[b->cfg->after[i]]->state;
		if (st == AGG_FAILED) {
			*which = b->cfg->after[i];
			return -1;
		}
		waiting |= st != AGG_OK;
	}
	return waiting;
}

/* An answer came in: start the backends that waited for it, and finish when nothing is
 * left to come. */
static void
agg_progress(struct aggregate *a)
{
	const struct http_request *req = NULL;
	struct agg_backend *b;
	size_t i, dep;
	char msg[384];
	int again = 1, w;

	while (again && !a->finishing) {
		again = 0;
		for (i = 0; i < a->nb && !a->finishing; i++) {
			b = a->b[i];
			/* The others were started with the aggregate. */
			if (b->cfg->nafter == 0 || b->state != AGG_IDLE ||
			    (w = agg_waiting(a, b, &dep)) > 0)
				continue;
			if (w < 0) {
				snprintf(msg, sizeof(msg), "backend %s, whose answer it waits for, "
				    "failed", a->b[dep]->cfg->name);
				b->skipped = 1;
				agg_not_sent(b, a->b[dep]->f.error, msg);
				again = 1;
				continue;
			}
			if (req == NULL)
				req = agg_request(a);
			agg_backend_start(a, b, req);
		}
	}
	if (a->pending == 0)
		agg_finish(a);
}

/* The route's timeout: every backend without an answer fails. */
static void
agg_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct aggregate *a = arg;
	struct agg_backend *b;
	size_t i;

	(void)fd;
	(void)what;
	log_warnx("route %s: not every backend answered within the route's timeout (request %s)",
	    a->route->name, a->request_id);
	for (i = 0; i < a->nb; i++) {
		b = a->b[i];
		if (b->state != AGG_IDLE && b->state != AGG_RUNNING)
			continue;
		if (b->state == AGG_RUNNING)
			metrics_upstream_request(a->w, fetch_server(&b->f), 0, GW_UPSTREAM_TIMEOUT);
		fetch_cancel(&b->f);
		b->f.status = 0;
		b->f.error = GW_UPSTREAM_TIMEOUT;
		snprintf(b->f.message, sizeof(b->f.message), "no answer within the route's "
		    "timeout");
		b->state = AGG_FAILED;
		b->ended_us = upstream_state_now_us();
		if (a->first_failed == NULL)
			a->first_failed = b;
		if (b->cfg->required && a->failed == NULL)
			a->failed = b;
	}
	a->pending = 0;
	agg_finish(a);
}

struct aggregate *
aggregate_start(struct worker_runtime *wr, const struct config_route *route,
    const struct aggregate_request *r, aggregate_done_cb cb, void *arg)
{
	struct aggregate *a;
	struct agg_backend *b;
	struct template_values v;
	struct timeval tv;
	char err[256];
	size_t i;
	int waits = 0;

	if ((a = agg_get(wr->w, route->nbackends)) == NULL)
		return NULL;
	if (route->merge == MERGE_FLAT && merge_reset(a->flat, a->nb) < 0) {
		a->next = agg_idle;
		agg_idle = a;
		return NULL;
	}
	a->wr = wr;
	a->route = route;
	a->cb = cb;
	a->arg = arg;
	a->failed = a->first_failed = NULL;
	a->refused = a->finishing = 0;
	a->pending = a->nb;
	a->tls = r->tls;
	a->claims = r->claims;
	a->api_key = r->api_key;
	snprintf(a->request_id, sizeof(a->request_id), "%s", r->request_id);
	snprintf(a->remote_addr, sizeof(a->remote_addr), "%s", r->remote_addr);
	route_captures(route, r->req->path.p, r->req->path.len, a->captures);
	for (i = 0; i < a->nb; i++) {
		b = a->b[i];
		b->cfg = &route->backends[i];
		b->state = AGG_IDLE;
		b->sent = b->skipped = b->mapped = 0;
		b->status = 0;
		b->ended_us = 0;
		b->f.request_id = a->request_id;
		waits |= b->cfg->nafter != 0 || body_needs_headers(b->cfg->response);
	}
	a->client = r->client;
	a->path = r->path;
	if (waits || body_needs_headers(route->response))
		evbuffer_add(a->head, r->head, r->head_len);
	/* No backend request goes out for a path that would climb out of a backend's. */
	v = agg_values(a, r->req);
	for (i = 0; i < a->nb && !a->finishing; i++)
		if (template_dot_segment(&route->backends[i].target, &v, err, sizeof(err)) != 0)
			agg_refuse(a, route->backends[i].name, err);
	if (route->timeout != 0 && !a->finishing)
		evtimer_add(a->timer, conn_timeout_tv(a->timer, route->timeout, &tv));
	for (i = 0; i < a->nb && !a->finishing; i++)
		if (a->b[i]->cfg->nafter == 0)
			agg_backend_start(a, a->b[i], r->req);
	/* Only failures so far (and nothing waits): the answer is known. */
	if (a->pending == 0)
		agg_finish(a);
	return a;
}

/* Append the backend's value to m: the chains its ops wrote, or a span of its block. */
static void
agg_add_value(struct evbuffer *m, struct agg_backend *b)
{
	if (evbuffer_get_length(b->out) != 0)
		evbuffer_add_buffer(m, b->out);
	else
		body_block_add_span(m, b->vblk, b->val, b->len);
}

/* A partial answer says what failed: ,"errors":{"orders":{"error":CODE,"message":TEXT}}
 * (first: no comma before it). */
static void
agg_add_errors(struct aggregate *a, int first)
{
	const struct gateway_error_info *e;
	struct evbuffer *m = a->merged;
	struct agg_backend *b;
	size_t i;
	int n = 0;

	if (!first)
		body_add_copy(m, ",", 1);
	body_add_copy(m, a->route->errors_key_json, a->route->errors_key_json_len);
	body_add_copy(m, "{", 1);
	for (i = 0; i < a->nb; i++) {
		b = a->b[i];
		if (b->state != AGG_FAILED)
			continue;
		e = &gateway_errors[b->f.error];
		if (n++ != 0)
			body_add_copy(m, ",", 1);
		body_add_copy(m, b->cfg->key_json, b->cfg->key_json_len);
		evbuffer_add_printf(m, "{\"error\":\"%s\",\"message\":\"", e->code);
		respond_json_escape(m, b->f.message, strlen(b->f.message));
		body_add_copy(m, "\"}", 2);
	}
	body_add_copy(m, "}", 1);
}

/* The keyed merge: {"key":answer,...} in the backends' order, values spliced; an optional
 * backend that failed is left out or null. */
static void
agg_merge_keyed(struct aggregate *a, int partial)
{
	struct evbuffer *m = a->merged;
	struct agg_backend *b;
	size_t i;
	int first = 1;

	body_add_copy(m, "{", 1);
	for (i = 0; i < a->nb; i++) {
		b = a->b[i];
		if (b->state != AGG_OK && b->cfg->missing == MISSING_OMIT)
			continue;
		if (!first)
			body_add_copy(m, ",", 1);
		first = 0;
		body_add_copy(m, b->cfg->key_json, b->cfg->key_json_len);
		if (b->state == AGG_OK)
			agg_add_value(m, b);
		else
			body_add_copy(m, "null", 4);
	}
	if (partial)
		agg_add_errors(a, first);
	body_add_copy(m, "}", 1);
}

/* A run of members of a flat merge. */
static void
agg_flat_span_cb(void *arg, size_t source, const char *p, size_t len)
{
	struct aggregate *a = arg;

	if (evbuffer_get_length(a->merged) > 1)
		body_add_copy(a->merged, ",", 1);
	body_block_add_span(a->merged, a->b[source]->vblk, p, len);
}

/* The flat merge: the members of every object answer side by side, in the backends'
 * order, a later one's key winning; a partial answer's errors member last of all. */
static int
agg_merge_flat(struct aggregate *a, int partial)
{
	long spans;

	body_add_copy(a->merged, "{", 1);
	if (partial && merge_reserve(a->flat, a->route->errors_key_json,
	    a->route->errors_key_json_len - 1) < 0)
		return -1;
	if ((spans = merge_spans(a->flat, agg_flat_span_cb, a)) < 0)
		return -1;
	if (partial)
		agg_add_errors(a, spans == 0);
	body_add_copy(a->merged, "}", 1);
	return 0;
}

/*
 * The route's response ops on the merged envelope: 0 with the body to send in *body and
 * *status, or -1 after filling in the error.  A merged body over limits.max_body, as a
 * body the ops cannot take, follows on_error: pass sends it as merged, without the ops (as
 * a proxied route sends an answer over the limit untouched), fail answers 502.
 */
static int
agg_route_ops(struct aggregate *a, struct evbuffer **body, int *status)
{
	const struct config *cfg = agg_cfg(a);
	const struct config_route *route = a->route;
	struct evbuffer *out = a->w->rewritten;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	struct body_result res;
	int fail = route->on_error == ON_ERROR_FAIL;

	*body = a->merged;
	*status = 200;
	if (evbuffer_get_length(a->merged) > cfg->limits.max_body) {
		snprintf(a->message, sizeof(a->message), "the merged body exceeds limits.max_body");
		log_warnx("route %s: %s (request %s)", route->name, a->message, a->request_id);
		if (route->response != NULL)
			metrics_envelope(a->w, route, METRICS_RESPONSE,
			    fail ? METRICS_FAILED : METRICS_PASSED, METRICS_REASON_OVER_LIMIT);
		return fail ? -1 : 0;
	}
	if (route->response == NULL)
		return 0;
	agg_vars(a, agg_prog_vars(route->response), NULL, NULL, &vars, &tls_text);
	if (body_apply(a->w->bodies, cfg, route, route->response, BODY_CODING_IDENTITY,
	    a->merged, &vars, out, &res) == 0) {
		metrics_envelope(a->w, route, METRICS_RESPONSE, METRICS_APPLIED,
		    METRICS_REASON_NONE);
		metrics_bytes(a->w, res.spliced, res.copied);
		*body = out;
		if (res.status != 0)
			*status = res.status;
		return 0;
	}
	evbuffer_drain(out, evbuffer_get_length(out));
	snprintf(a->message, sizeof(a->message), "merged body not rewritten: %s", res.error);
	log_warnx("route %s: %s (request %s)", route->name, a->message, a->request_id);
	metrics_envelope(a->w, route, METRICS_RESPONSE, fail ? METRICS_FAILED : METRICS_PASSED,
	    METRICS_REASON_OP_ERROR);
	return fail ? -1 : 0;
}

static void
agg_finish_cb(evutil_socket_t fd, short what, void *arg)
{
	struct aggregate *a = arg;
	struct agg_backend *failed = a->failed;
	struct aggregate_answer ans;
	size_t i, ok = 0;

	(void)fd;
	(void)what;
	for (i = 0; i < a->nb; i++)
		ok += a->b[i]->state == AGG_OK;
	if (failed == NULL && ok == 0)
		failed = a->first_failed;       /* every backend failed: nothing to merge */
	memset(&ans, 0, sizeof(ans));
	ans.error = GW_UPSTREAM_INVALID;
	ans.message = a->message;
	ans.partial = ok < a->nb;
	if (a->refused) {
		ans.error = GW_BAD_REQUEST;
	} else if (failed != NULL && failed->mapped && failed->status >= 400) {
		/* Its status_from said it failed: its status and answer, as on a route of its
		 * own (a 1xx or 3xx, which would not carry the answer, is a gateway error). */
		ans.status = failed->status;
		ans.body = failed->out;
		ans.partial = 0;
	} else if (failed != NULL) {
		/* The failure that decided answers: a required backend's, or the first of all. */
		ans.error = failed->f.error;
		snprintf(a->message, sizeof(a->message), "backend %s: %s", failed->cfg->name,
		    failed->f.message);
	} else if (a->route->merge == MERGE_FLAT && agg_merge_flat(a, ans.partial) < 0) {
		snprintf(a->message, sizeof(a->message), "out of memory");
	} else {
		if (a->route->merge == MERGE_KEYED)
			agg_merge_keyed(a, ans.partial);
		if (agg_route_ops(a, &ans.body, &ans.status) < 0)
			ans.status = 0;
	}
	a->cb(&ans, a->arg);
}

/* How the backend ended (or: it is still out, so the request ended first). */
static enum metrics_backend_outcome
agg_outcome(const struct agg_backend *b)
{
	switch (b->state) {
	case AGG_OK:
		return METRICS_BACKEND_OK;
	case AGG_FAILED:
		break;
	default:
		return METRICS_BACKEND_CANCELLED;
	}
	if (b->skipped)
		return METRICS_BACKEND_SKIPPED;
	switch (b->f.error) {
	case GW_UPSTREAM_STATUS: return METRICS_BACKEND_STATUS;
	case GW_UPSTREAM_TIMEOUT: return METRICS_BACKEND_TIMEOUT;
	case GW_UPSTREAM_OVERLOADED: return METRICS_BACKEND_OVERLOADED;
	case GW_UPSTREAM_UNAVAILABLE:
	case GW_UPSTREAM_TLS: return METRICS_BACKEND_UNAVAILABLE;
	default: return METRICS_BACKEND_INVALID;
	}
}

/* Microseconds from its request's start to its end; 0 when never sent.  Still out (the
 * client went away first), it ends now, once, so that the log and the histogram agree. */
static uint64_t
agg_duration_us(struct agg_backend *b)
{
	if (!b->sent)
		return 0;
	if (b->ended_us == 0)
		b->ended_us = upstream_state_now_us();
	return b->ended_us > b->f.started_us ? b->ended_us - b->f.started_us : 0;
}

const struct access_backend *
aggregate_log(struct aggregate *a, size_t *n)
{
	struct agg_backend *b;
	size_t i;

	for (i = 0; i < a->nb; i++) {
		b = a->b[i];
		a->log[i].name = b->cfg->name;
		a->log[i].status = b->status;
		a->log[i].outcome = metrics_backend_outcome_names[agg_outcome(b)];
		a->log[i].duration_ms = (double)agg_duration_us(b) / 1000;
	}
	*n = a->nb;
	return a->log;
}

void
aggregate_end(struct aggregate *a)
{
	struct worker *w = a->w;
	size_t i;

	for (i = 0; i < a->nb; i++) {
		struct agg_backend *b = a->b[i];

		metrics_backend(w, b->cfg, agg_outcome(b), b->sent, agg_duration_us(b));
		if (b->state == AGG_RUNNING)
			metrics_upstream_request(w, fetch_server(&b->f), 499, -1);
		fetch_cancel(&b->f);
		if (b->own != NULL)
			body_block_release(b->own);
		b->own = b->vblk = NULL;
		evbuffer_drain(b->out, evbuffer_get_length(b->out));
		b->state = AGG_IDLE;
	}

	event_del(a->finish_ev);
	evtimer_del(a->timer);
	/* What one large answer grew is given back, not kept for the next request. */
	merge_release(a->flat);
	if (a->scratch_cap > AGG_WARM_BYTES) {
		free(a->scratch);
		a->scratch = NULL;
		a->scratch_cap = 0;
	}
	evbuffer_drain(a->merged, evbuffer_get_length(a->merged));
	evbuffer_drain(a->head, evbuffer_get_length(a->head));
	a->wr = NULL;
	a->route = NULL;
	a->next = agg_idle;
	agg_idle = a;
}

void
aggregate_free_idle(void)
{
	struct aggregate *a;

	while ((a = agg_idle) != NULL) {
		agg_idle = a->next;
		agg_free(a);
	}
}
