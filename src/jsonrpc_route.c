/*
 * A JSON-RPC request's life: start -> split (jsonrpc.c) -> route each call by its method ->
 * a single routed call goes back to the caller to forward (an answer it does not stream
 * comes back to be judged as a unit of that one call would be); otherwise group the calls into
 * units (one per upstream and round of duplicate ids, or one per call with split: single) ->
 * send the units, at most jsonrpc.parallel at once, each a fetch -> match each answer to its
 * unit's calls by id -> answer in the order of the request: each call's answer spliced from
 * the block it was read into, or the gateway's own error object in its place.
 *
 * Units start and the answer is given from an event of the request's own, never from inside
 * a fetch's callback: a fetch is reused only once its callback has returned, and the client's
 * next request (which may take this object again) never starts while a fetch of this one is
 * on the stack.
 */
#include "config.h"
#include "jsonrpc_route.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "body.h"
#include "exchange.h"
#include "fetch.h"
#include "jsonrpc.h"
#include "log.h"
#include "metrics.h"
#include "respond.h"
#include "server.h"
#include "upstream.h"

#define RPC_NONE UINT32_MAX

/* What became of a call before any upstream saw it. */
enum rpc_fate {
	FATE_ROUTED,                    /* it has a target */
	FATE_INVALID,                   /* not a Request object: -32600 */
	FATE_NOT_FOUND,                 /* no upstream takes its method: -32601 */
	FATE_DENIED                     /* allow or deny: -32601 */
};

/* Per call, beside its struct jsonrpc_call. */
struct rpc_info {
	uint32_t unit;
	uint32_t label;                 /* its method's metrics label */
	unsigned char fate;
};

enum rpc_unit_state { UNIT_WAITING, UNIT_RUNNING, UNIT_DONE, UNIT_FAILED };

/* One upstream request: calls of one target and round, or one call (split: single). */
struct rpc_unit {
	uint32_t target, round;
	uint32_t next_round;            /* the unit of the target's next round, or RPC_NONE */
	size_t first, n;                /* its calls: order[first .. first + n) */
	size_t ncalls;                  /* of them, calls (with an id) */
	size_t body_len;                /* its request body's length */
	int status;                     /* its answer's HTTP status, 0 before one */
	enum rpc_unit_state state;
	struct body_block *blk;         /* its answer's bytes (a reference) */
	enum gateway_error error;       /* failed: why */
	char message[384];              /* as long as a fetch's */
};

/* An upstream the request's calls go to. */
struct rpc_target {
	const struct config_upstream *up;
	struct evbuffer *head;          /* the head of its requests, without framing */
	char hash_key[256];
	size_t hash_key_len;
	uint32_t first_unit, last_unit; /* its units, round 0 first */
};

/* A fetch, running one unit at a time. */
struct rpc_slot {
	struct fetch f;
	struct jsonrpc_route *r;
	size_t unit;
	unsigned busy : 1;
};

struct jsonrpc_route {
	struct jsonrpc_route *next;     /* among the worker's idle ones */
	struct worker *w;
	struct worker_runtime *wr;
	const struct config_route *route;
	const struct config_jsonrpc *jc;
	struct jsonrpc j;
	struct body_block *body;        /* the body (a reference), or its inflated copy */
	const char *data;
	size_t len;
	int split;                      /* what jsonrpc_split said */
	struct rpc_info *info;
	size_t info_cap;
	uint32_t *order;                /* calls by unit */
	size_t order_cap;
	struct rpc_unit *units;
	size_t nunits, units_cap;
	struct rpc_target *targets;
	size_t ntargets, targets_cap;
	uint32_t *rule_target;          /* per methods: entry (and default, last), or RPC_NONE */
	size_t rule_cap;
	struct rpc_slot **slots;
	size_t nslots;
	size_t next_unit;               /* the first unit not started */
	size_t pending;                 /* units not settled */
	struct event *step_ev;
	struct event *timer;
	jsonrpc_done_cb cb;
	void *arg;
	struct evbuffer *answer;
	char request_id[136];
	char remote_addr[64];
	int idempotent;
	char method[128];               /* a single call's method, for the log */
	size_t method_len;
	unsigned forwarded : 1;         /* a single call the caller forwards */
	unsigned answered : 1;
	unsigned counted : 1;           /* its calls are in the metrics */
	unsigned stepping : 1;
};

static void rpc_step_cb(evutil_socket_t fd, short what, void *arg);
static void rpc_timeout_cb(evutil_socket_t fd, short what, void *arg);
static void rpc_fetch_done_cb(struct fetch *f, void *arg);

static const struct config *
rpc_cfg(const struct jsonrpc_route *r)
{
	return r->wr->rt->cfg;
}

static void
rpc_free(struct jsonrpc_route *r)
{
	size_t i;

	for (i = 0; i < r->nslots; i++) {
		fetch_free(&r->slots[i]->f);
		free(r->slots[i]);
	}
	free(r->slots);
	for (i = 0; i < r->targets_cap; i++)
		if (r->targets[i].head != NULL)
			evbuffer_free(r->targets[i].head);
	free(r->targets);
	jsonrpc_free(&r->j);
	free(r->info);
	free(r->order);
	free(r->units);
	free(r->rule_target);
	if (r->step_ev != NULL)
		event_free(r->step_ev);
	if (r->timer != NULL)
		event_free(r->timer);
	if (r->answer != NULL)
		evbuffer_free(r->answer);
	free(r);
}

/* The idle JSON-RPC routes of this thread's worker, kept for its next JSON-RPC requests:
 * the route kind's own, which the worker knows nothing of. */
static _Thread_local struct jsonrpc_route *rpc_idle;

static struct jsonrpc_route *
rpc_get(struct worker *w)
{
	struct jsonrpc_route *r;

	if ((r = rpc_idle) != NULL) {
		rpc_idle = r->next;
		return r;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	r->w = w;
	jsonrpc_init(&r->j);
	r->step_ev = event_new(w->base, -1, 0, rpc_step_cb, r);
	r->timer = evtimer_new(w->base, rpc_timeout_cb, r);
	r->answer = evbuffer_new();
	if (r->step_ev == NULL || r->timer == NULL || r->answer == NULL) {
		rpc_free(r);
		return NULL;
	}
	return r;
}

/* p (of *cap elements of size) with room for n: p itself, or it grown; NULL when out of
 * memory (p is left as it was). */
static void *
rpc_grow(void *p, size_t *cap, size_t n, size_t size)
{
	size_t c = *cap ? *cap : 8;

	if (n <= *cap)
		return p;
	while (c < n)
		c *= 2;
	if ((p = realloc(p, c * size)) != NULL)
		*cap = c;
	return p;
}

/* Room for n elements in the array field (its capacity field cap); 0 or -1. */
#define RPC_RESERVE(field, cap, n) __extension__ ({ \
	void *grown_ = rpc_grow((field), &(cap), (n), sizeof(*(field))); \
	grown_ != NULL ? ((field) = grown_, 0) : -1; })

/* The target of calls routed by methods: entry rule (-1: default) to up; RPC_NONE when out
 * of memory. */
static uint32_t
rpc_target(struct jsonrpc_route *r, int rule, const struct config_upstream *up)
{
	size_t k = rule < 0 ? r->jc->nmethods : (size_t)rule, i;
	struct rpc_target *t;

	if (r->rule_target[k] != RPC_NONE)
		return r->rule_target[k];
	for (i = 0; i < r->ntargets && r->targets[i].up != up; i++)
		;
	if (i == r->ntargets) {
		if (r->ntargets == r->targets_cap) {
			size_t cap = r->targets_cap;

			if (RPC_RESERVE(r->targets, cap, r->ntargets + 1) < 0)
				return RPC_NONE;
			memset(r->targets + r->targets_cap, 0,
			    (cap - r->targets_cap) * sizeof(*r->targets));
			r->targets_cap = cap;
		}
		t = &r->targets[r->ntargets++];
		t->up = up;
		t->first_unit = t->last_unit = RPC_NONE;
	}
	return r->rule_target[k] = (uint32_t)i;
}

/* Route every call by its method.  0, or -1 when out of memory. */
static int
rpc_route_calls(struct jsonrpc_route *r)
{
	const struct config_jsonrpc *jc = r->jc;
	const struct config_upstream *up;
	struct jsonrpc_call *c;
	struct rpc_info *inf;
	const char *name;
	size_t i, len;
	int rule;

	if (RPC_RESERVE(r->info, r->info_cap, r->j.ncalls) < 0 ||
	    RPC_RESERVE(r->rule_target, r->rule_cap, jc->nmethods + 1) < 0)
		return -1;
	for (i = 0; i <= jc->nmethods; i++)
		r->rule_target[i] = RPC_NONE;
	r->ntargets = 0;
	for (i = 0; i < r->j.ncalls; i++) {
		c = &r->j.calls[i];
		inf = &r->info[i];
		inf->label = (uint32_t)jc->nlabels;
		inf->unit = RPC_NONE;
		if (c->kind == JSONRPC_INVALID ||
		    jsonrpc_method_name(&r->j, c, &name, &len) < 0) {
			inf->fate = FATE_INVALID;
			continue;
		}
		if (r->split == JSONRPC_SINGLE) {
			r->method_len = len < sizeof(r->method) ? len : sizeof(r->method);
			memcpy(r->method, name, r->method_len);
		}
		rule = jsonrpc_method_rule(jc, name, len);
		if (rule >= 0)
			inf->label = jc->methods[rule].label;
		if (!jsonrpc_method_allowed(jc, name, len)) {
			inf->fate = FATE_DENIED;
			continue;
		}
		up = rule >= 0 ? jc->methods[rule].upstream : jc->default_upstream;
		if (up == NULL) {
			inf->fate = FATE_NOT_FOUND;
			continue;
		}
		if ((c->target = rpc_target(r, rule, up)) == RPC_NONE)
			return -1;
		inf->fate = FATE_ROUTED;
	}
	return 0;
}

/* A new unit of target and round; its index, or RPC_NONE when out of memory. */
static uint32_t
rpc_unit_new(struct jsonrpc_route *r, uint32_t target, uint32_t round)
{
	struct rpc_unit *u;

	if (RPC_RESERVE(r->units, r->units_cap, r->nunits + 1) < 0)
		return RPC_NONE;
	u = &r->units[r->nunits];
	memset(u, 0, sizeof(*u));
	u->target = target;
	u->round = round;
	u->next_round = RPC_NONE;
	return (uint32_t)r->nunits++;
}

/* The unit of call i (batch: its target's unit of its round, made when it is the first). */
static uint32_t
rpc_unit_of(struct jsonrpc_route *r, size_t i)
{
	const struct jsonrpc_call *c = &r->j.calls[i];
	struct rpc_target *t = &r->targets[c->target];
	uint32_t u;

	if (r->jc->split == JSONRPC_SPLIT_SINGLE)
		return rpc_unit_new(r, c->target, c->round);
	/* A target's rounds are made in order: round k only follows a call of round k - 1. */
	for (u = t->first_unit; u != RPC_NONE && r->units[u].round != c->round;
	    u = r->units[u].next_round)
		;
	if (u != RPC_NONE)
		return u;
	if ((u = rpc_unit_new(r, c->target, c->round)) == RPC_NONE)
		return RPC_NONE;
	if (t->last_unit == RPC_NONE)
		t->first_unit = u;
	else
		r->units[t->last_unit].next_round = u;
	t->last_unit = u;
	return u;
}

/* Group the routed calls into units, their calls in request order.  0 or -1. */
static int
rpc_units(struct jsonrpc_route *r)
{
	struct jsonrpc_call *c;
	struct rpc_unit *u;
	size_t i, at;
	uint32_t k;

	r->nunits = 0;
	if (jsonrpc_rounds(&r->j) < 0 ||
	    RPC_RESERVE(r->order, r->order_cap, r->j.ncalls) < 0)
		return -1;
	for (i = 0; i < r->j.ncalls; i++) {
		if (r->info[i].fate != FATE_ROUTED)
			continue;
		c = &r->j.calls[i];
		if ((k = rpc_unit_of(r, i)) == RPC_NONE)
			return -1;
		r->info[i].unit = k;
		u = &r->units[k];
		u->body_len += c->len + (u->n != 0);
		u->n++;
		u->ncalls += c->kind == JSONRPC_CALL;
	}
	for (k = 0, at = 0; k < r->nunits; k++) {
		u = &r->units[k];
		u->first = at;
		at += u->n;
		u->n = 0;
		if (r->jc->split == JSONRPC_SPLIT_BATCH)
			u->body_len += 2;
	}
	for (i = 0; i < r->j.ncalls; i++) {
		if ((k = r->info[i].unit) == RPC_NONE)
			continue;
		u = &r->units[k];
		r->order[u->first + u->n++] = (uint32_t)i;
	}
	return 0;
}

/* The heads and hash keys of the targets' requests. */
static int
rpc_heads(struct jsonrpc_route *r, const struct jsonrpc_request *q)
{
	struct rpc_target *t;
	size_t i;

	for (i = 0; i < r->ntargets; i++) {
		t = &r->targets[i];
		if (t->head == NULL && (t->head = evbuffer_new()) == NULL)
			return -1;
		evbuffer_drain(t->head, evbuffer_get_length(t->head));
		if (q->head(q->head_arg, t->up, t->head) < 0)
			return -1;
		t->hash_key_len = exchange_hash_key(t->up, r->remote_addr, q->req, q->req->target,
		    q->req->path, t->hash_key, sizeof(t->hash_key));
	}
	return 0;
}

/* A free slot, or a new one while fewer than parallel are; NULL if none. */
static struct rpc_slot *
rpc_slot(struct jsonrpc_route *r)
{
	struct rpc_slot **grown, *s;
	size_t i;

	for (i = 0; i < r->nslots && i < r->jc->parallel; i++)
		if (!r->slots[i]->busy)
			return r->slots[i];
	if (r->nslots >= r->jc->parallel)
		return NULL;
	if ((grown = realloc(r->slots, (r->nslots + 1) * sizeof(*grown))) == NULL)
		return NULL;
	r->slots = grown;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	if (fetch_init(&s->f, r->w, rpc_fetch_done_cb, s) < 0) {
		free(s);
		return NULL;
	}
	s->r = r;
	r->slots[r->nslots++] = s;
	return s;
}

static void
rpc_unit_failed(struct jsonrpc_route *r, struct rpc_unit *u, enum gateway_error err,
    const char *message)
{
	size_t n = strlen(message);

	u->state = UNIT_FAILED;
	u->error = err;
	if (n >= sizeof(u->message))
		n = sizeof(u->message) - 1;
	memcpy(u->message, message, n);
	u->message[n] = '\0';
	log_warnx("route %s: %s (request %s)", r->route->name, message, r->request_id);
}

/* Send unit k on slot s. */
static void
rpc_unit_start(struct jsonrpc_route *r, size_t k, struct rpc_slot *s)
{
	const struct config *cfg = rpc_cfg(r);
	struct rpc_unit *u = &r->units[k];
	struct rpc_target *t = &r->targets[u->target];
	struct evbuffer *out = s->f.request;
	const struct jsonrpc_call *c;
	char framing[48];
	size_t i;
	int n;

	evbuffer_drain(out, evbuffer_get_length(out));
	n = snprintf(framing, sizeof(framing), "Content-Length: %zu\r\n\r\n", u->body_len);
	/* One piece of memory: the fetch sends it (pulled up) without another copy. */
	evbuffer_expand(out, evbuffer_get_length(t->head) + (size_t)n + u->body_len);
	evbuffer_add(out, evbuffer_pullup(t->head, -1), evbuffer_get_length(t->head));
	evbuffer_add(out, framing, (size_t)n);
	if (r->jc->split == JSONRPC_SPLIT_BATCH)
		evbuffer_add(out, "[", 1);
	for (i = 0; i < u->n; i++) {
		c = &r->j.calls[r->order[u->first + i]];
		if (i != 0)
			evbuffer_add(out, ",", 1);
		evbuffer_add(out, c->val, c->len);
	}
	if (r->jc->split == JSONRPC_SPLIT_BATCH)
		evbuffer_add(out, "]", 1);
	u->state = UNIT_RUNNING;
	s->unit = k;
	s->busy = 1;
	s->f.request_id = r->request_id;
	fetch_start(&s->f, &r->wr->pools[t->up - cfg->upstreams], t->hash_key, t->hash_key_len,
	    r->idempotent, cfg->limits.max_body, &r->route->timeouts, 0);
}

/* The calls of u its answer leaves without a Response object. */
static size_t
rpc_unanswered(const struct jsonrpc_route *r, const struct rpc_unit *u)
{
	const struct jsonrpc_call *c;
	size_t i, n = 0;

	for (i = 0; i < u->n; i++) {
		c = &r->j.calls[r->order[u->first + i]];
		n += c->kind == JSONRPC_CALL && c->state != JSONRPC_RESULT &&
		    c->state != JSONRPC_ERROR;
	}
	return n;
}

/*
 * The answer of u's upstream: status, and its body blk[0..len) (NULL: none) in coding.  Its
 * Response objects are matched to u's calls whatever the status (many servers answer an
 * error object with a 500); the calls a status other than 2xx leaves unanswered get
 * upstream_status.  An answer that is not JSON-RPC, or notifications answered other than
 * 2xx, fail the unit.
 */
static void
rpc_read_answer(struct jsonrpc_route *r, struct rpc_unit *u, int status,
    enum body_coding coding, struct body_block *blk, size_t len)
{
	const struct config *cfg = rpc_cfg(r);
	const char *name = r->targets[u->target].up->name, *why = NULL, *error, *data;
	int ok = status >= 200 && status <= 299;
	char msg[256], status_msg[160];

	u->status = status;
	snprintf(status_msg, sizeof(status_msg), "upstream %s answered %d", name, status);
	if (!ok && u->ncalls == 0) {
		rpc_unit_failed(r, u, GW_UPSTREAM_STATUS, status_msg);
		return;
	}
	u->state = UNIT_DONE;
	if (u->ncalls == 0)
		return;                 /* notifications: no answer to read */
	if (coding == BODY_CODING_OTHER) {
		snprintf(msg, sizeof(msg), "the answer of upstream %s has a content coding other "
		    "than gzip and deflate", name);
		why = msg;
	} else if (coding != BODY_CODING_IDENTITY && len != 0) {
		u->blk = body_inflate(r->w->bodies, body_block_data(blk), len, coding,
		    cfg->limits.max_body, &len, &error);
		if (u->blk == NULL) {
			snprintf(msg, sizeof(msg), "the answer of upstream %s cannot be inflated: %s",
			    name, error);
			why = msg;
		}
	} else if (blk != NULL) {
		body_block_ref(blk);
		u->blk = blk;
	}
	if (why == NULL) {
		data = u->blk != NULL ? body_block_data(u->blk) : "";
		if (jsonrpc_match(&r->j, r->order + u->first, u->n, data, len,
		    cfg->limits.max_depth) < 0) {
			snprintf(msg, sizeof(msg), "the answer of upstream %s is not JSON-RPC", name);
			why = msg;
		}
	}
	if (why != NULL)
		rpc_unit_failed(r, u, ok ? GW_UPSTREAM_INVALID : GW_UPSTREAM_STATUS,
		    ok ? why : status_msg);
	else if (!ok && rpc_unanswered(r, u) != 0)
		log_warnx("route %s: %s (request %s)", r->route->name, status_msg, r->request_id);
}

/* The unit's fetch ended: its answer matched to its calls, or the unit failed. */
static void
rpc_settle(struct jsonrpc_route *r, struct rpc_unit *u, struct fetch *f)
{
	const char *name = r->targets[u->target].up->name;
	struct body_block *blk;
	char msg[256];
	size_t len;

	if (f->status == 0) {
		rpc_unit_failed(r, u, f->error, f->message);
		return;
	}
	if (u->ncalls == 0) {
		rpc_read_answer(r, u, f->status, BODY_CODING_IDENTITY, NULL, 0);
		return;
	}
	if (fetch_body(f, &blk, &len) < 0) {
		snprintf(msg, sizeof(msg), "the answer of upstream %s does not fit in memory", name);
		rpc_unit_failed(r, u, GW_UPSTREAM_INVALID, msg);
		return;
	}
	rpc_read_answer(r, u, f->status, f->coding, blk, len);
}

static void
rpc_fetch_done_cb(struct fetch *f, void *arg)
{
	struct rpc_slot *s = arg;
	struct jsonrpc_route *r = s->r;

	metrics_upstream_request(r->w, fetch_server(f), f->status, f->status != 0 ? -1 :
	    (int)f->error);
	rpc_settle(r, &r->units[s->unit], f);
	/* The fetch is started again (which lets go of this answer) from the loop. */
	s->busy = 0;
	r->pending--;
	event_active(r->step_ev, EV_TIMEOUT, 0);
}

/* Count every call of the request in the metrics, as its answer says (or cancelled). */
static void
rpc_count(struct jsonrpc_route *r, int cancelled)
{
	const struct jsonrpc_call *c;
	const struct rpc_unit *u;
	enum metrics_jsonrpc_outcome o;
	size_t i;

	if (r->counted || r->forwarded)
		return;
	r->counted = 1;
	if (r->split < 0) {
		metrics_jsonrpc(r->w, r->route, (unsigned)r->jc->nlabels, cancelled ?
		    METRICS_JSONRPC_CANCELLED : r->split == JSONRPC_PARSE_ERROR ?
		    METRICS_JSONRPC_PARSE_ERROR : METRICS_JSONRPC_INVALID, 1);
		return;
	}
	for (i = 0; i < r->j.ncalls; i++) {
		c = &r->j.calls[i];
		switch (r->info[i].fate) {
		case FATE_INVALID: o = METRICS_JSONRPC_INVALID; break;
		case FATE_NOT_FOUND: o = METRICS_JSONRPC_NOT_FOUND; break;
		case FATE_DENIED: o = METRICS_JSONRPC_DENIED; break;
		default:
			u = &r->units[r->info[i].unit];
			if (cancelled)
				o = METRICS_JSONRPC_CANCELLED;
			else if (u->state != UNIT_DONE)
				o = METRICS_JSONRPC_UPSTREAM_ERROR;
			else if (c->kind == JSONRPC_NOTIFICATION)
				o = u->status >= 200 && u->status <= 299 ? METRICS_JSONRPC_NOTIFIED :
				    METRICS_JSONRPC_UPSTREAM_ERROR;
			else if (c->state == JSONRPC_RESULT || c->state == JSONRPC_ERROR)
				o = METRICS_JSONRPC_ANSWERED;
			else
				o = METRICS_JSONRPC_UPSTREAM_ERROR;
		}
		metrics_jsonrpc(r->w, r->route, r->info[i].label, o, 1);
	}
}

/* An error Response object for the call with id (NULL: null); with data when code is set:
 * {"error": CODE, "message": TEXT}. */
static void
rpc_error(struct evbuffer *out, enum jsonrpc_error e, const char *id, size_t id_len,
    const char *code, const char *message)
{
	const char *open;
	size_t len;

	open = jsonrpc_error_open(e, &len);
	evbuffer_add(out, open, len);
	if (code != NULL) {
		evbuffer_add_printf(out, ", \"data\": {\"error\": \"%s\", \"message\": \"", code);
		respond_json_escape(out, message, strlen(message));
		evbuffer_add(out, "\"}", 2);
	}
	evbuffer_add(out, JSONRPC_ERROR_CLOSE, sizeof(JSONRPC_ERROR_CLOSE) - 1);
	if (id != NULL)
		evbuffer_add(out, id, id_len);
	else
		evbuffer_add(out, "null", 4);
	evbuffer_add(out, "}", 1);
}

/* 1 when call i has an element in the answer: not a notification (an element that is no
 * Request object is answered, whatever it holds). */
static int
rpc_has_element(const struct jsonrpc_route *r, size_t i)
{
	return r->info[i].fate == FATE_INVALID || r->j.calls[i].kind == JSONRPC_CALL;
}

/* Call i's element of the answer, into out; the gateway error of a routed call that did not
 * get its answer, or -1. */
static int
rpc_element(struct jsonrpc_route *r, size_t i, struct evbuffer *out)
{
	const struct jsonrpc_call *c = &r->j.calls[i];
	const struct rpc_unit *u;
	const char *why, *up;
	char msg[256];

	switch (r->info[i].fate) {
	case FATE_INVALID:
		rpc_error(out, JSONRPC_E_INVALID, c->id, c->id_len, NULL, NULL);
		return -1;
	case FATE_NOT_FOUND:
		rpc_error(out, JSONRPC_E_METHOD, c->id, c->id_len, NULL, NULL);
		return -1;
	case FATE_DENIED:
		rpc_error(out, JSONRPC_E_METHOD, c->id, c->id_len, "method_not_allowed",
		    "the route does not allow this method");
		return -1;
	}
	u = &r->units[r->info[i].unit];
	up = r->targets[u->target].up->name;
	if (u->state != UNIT_DONE) {
		rpc_error(out, JSONRPC_E_INTERNAL, c->id, c->id_len, gateway_errors[u->error].code,
		    u->message);
		return (int)u->error;
	}
	switch (c->state) {
	case JSONRPC_RESULT:
	case JSONRPC_ERROR:
		body_block_add_span(out, u->blk, c->answer, c->answer_len);
		return -1;
	default:
		break;
	}
	if (u->status < 200 || u->status > 299) {
		/* Whatever else is wrong with the answer, its status says it first. */
		snprintf(msg, sizeof(msg), "upstream %s answered %d", up, u->status);
		rpc_error(out, JSONRPC_E_INTERNAL, c->id, c->id_len,
		    gateway_errors[GW_UPSTREAM_STATUS].code, msg);
		return GW_UPSTREAM_STATUS;
	}
	switch (c->state) {
	case JSONRPC_BAD_ANSWER:
		why = "answers this call with something that is not a JSON-RPC response";
		break;
	case JSONRPC_TWICE:
		why = "answers this call's id more than once";
		break;
	default:
		why = "has no answer for this call";
	}
	snprintf(msg, sizeof(msg), "the answer of upstream %s %s", up, why);
	rpc_error(out, JSONRPC_E_INTERNAL, c->id, c->id_len,
	    gateway_errors[GW_UPSTREAM_INVALID].code, msg);
	return GW_UPSTREAM_INVALID;
}

/* Log once per unit what its answer lacked. */
static void
rpc_log_mismatches(struct jsonrpc_route *r)
{
	const struct rpc_unit *u;
	size_t k, bad;

	for (k = 0; k < r->nunits; k++) {
		u = &r->units[k];
		if (u->state != UNIT_DONE || u->ncalls == 0 || u->status < 200 || u->status > 299)
			continue;       /* a status other than 2xx is logged as such */
		if ((bad = rpc_unanswered(r, u)) != 0)
			log_warnx("route %s: the answer of upstream %s does not answer %zu of its "
			    "%zu calls (request %s)", r->route->name, r->targets[u->target].up->name,
			    bad, u->ncalls, r->request_id);
	}
}

/* Everything is settled: the answer, to the caller.  Nothing may touch r after cb. */
static void
rpc_answer(struct jsonrpc_route *r)
{
	struct evbuffer *out = r->answer;
	struct jsonrpc_answer ans;
	size_t i, n = 0;
	int batch = r->split == JSONRPC_BATCH;

	r->answered = 1;
	evtimer_del(r->timer);
	memset(&ans, 0, sizeof(ans));
	ans.status = 200;
	ans.body = out;
	switch (r->split) {
	case JSONRPC_PARSE_ERROR:
		rpc_error(out, JSONRPC_E_PARSE, NULL, 0, NULL, NULL);
		break;
	case JSONRPC_NOT_REQUEST:
		rpc_error(out, JSONRPC_E_INVALID, NULL, 0, NULL, NULL);
		break;
	case JSONRPC_TOO_MANY: {
		char msg[96];

		snprintf(msg, sizeof(msg), "a batch of more than %u calls (jsonrpc.max_batch)",
		    r->jc->max_batch);
		rpc_error(out, JSONRPC_E_INVALID, NULL, 0, "too_many_calls", msg);
		break;
	}
	default:
		rpc_log_mismatches(r);
		if (batch) {
			metrics_jsonrpc_batch(r->w, r->route, r->j.ncalls);
			evbuffer_add(out, "[", 1);
		}
		for (i = 0; i < r->j.ncalls; i++) {
			if (!rpc_has_element(r, i))
				continue;
			if (n++ != 0)
				evbuffer_add(out, ",", 1);
			rpc_element(r, i, out);
		}
		if (batch)
			evbuffer_add(out, "]", 1);
		if (n == 0) {
			/* Nothing to answer: no body at all, as the specification asks. */
			evbuffer_drain(out, evbuffer_get_length(out));
			ans.status = 204;
		}
	}
	rpc_count(r, 0);
	r->cb(&ans, r->arg);
}

/* Start the units there is room for; answer once every unit is settled. */
static void
rpc_step_cb(evutil_socket_t fd, short what, void *arg)
{
	struct jsonrpc_route *r = arg;
	struct rpc_slot *s;

	(void)fd;
	(void)what;
	if (r->answered)
		return;
	while (r->next_unit < r->nunits && (s = rpc_slot(r)) != NULL)
		rpc_unit_start(r, r->next_unit++, s);
	if (r->pending == 0)
		rpc_answer(r);
}

/* The route's timeout: the units without an answer fail. */
static void
rpc_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct jsonrpc_route *r = arg;
	struct rpc_unit *u;
	size_t i;

	(void)fd;
	(void)what;
	log_warnx("route %s: not every upstream answered within the route's timeout (request %s)",
	    r->route->name, r->request_id);
	for (i = 0; i < r->nslots; i++)
		if (r->slots[i]->busy) {
			metrics_upstream_request(r->w, fetch_server(&r->slots[i]->f), 0,
			    GW_UPSTREAM_TIMEOUT);
			fetch_cancel(&r->slots[i]->f);
			r->slots[i]->busy = 0;
		}
	for (i = 0; i < r->nunits; i++) {
		u = &r->units[i];
		if (u->state != UNIT_WAITING && u->state != UNIT_RUNNING)
			continue;
		u->state = UNIT_FAILED;
		u->error = GW_UPSTREAM_TIMEOUT;
		snprintf(u->message, sizeof(u->message), "upstream %s: no answer within the route's "
		    "timeout", r->targets[u->target].up->name);
	}
	r->next_unit = r->nunits;
	r->pending = 0;
	rpc_answer(r);
}

struct jsonrpc_route *
jsonrpc_route_start(struct worker_runtime *wr, const struct config_route *route,
    const struct jsonrpc_request *q, jsonrpc_done_cb cb, void *arg,
    const struct config_upstream **forward)
{
	const struct config *cfg = wr->rt->cfg;
	struct jsonrpc_route *r;
	struct body_block *inflated;
	struct timeval tv;
	const char *why;
	size_t len;

	*forward = NULL;
	if ((r = rpc_get(wr->w)) == NULL)
		return NULL;
	r->wr = wr;
	r->route = route;
	r->jc = route->jsonrpc;
	r->cb = cb;
	r->arg = arg;
	r->forwarded = r->answered = r->counted = 0;
	r->nunits = r->ntargets = r->next_unit = r->pending = 0;
	r->method_len = 0;
	r->j.ncalls = 0;
	r->idempotent = q->idempotent;
	snprintf(r->request_id, sizeof(r->request_id), "%s", q->request_id);
	snprintf(r->remote_addr, sizeof(r->remote_addr), "%s", q->remote_addr);
	r->body = q->body;
	body_block_ref(r->body);
	r->data = body_block_data(r->body);
	r->len = q->len;
	if (q->coding != BODY_CODING_IDENTITY && q->len != 0) {
		inflated = body_inflate(wr->w->bodies, r->data, r->len, q->coding,
		    cfg->limits.max_body, &len, &why);
		if (inflated == NULL) {
			/* Not JSON that can be read. */
			r->split = JSONRPC_PARSE_ERROR;
			log_warnx("route %s: the request body cannot be inflated: %s (request %s)",
			    route->name, why, r->request_id);
			event_active(r->step_ev, EV_TIMEOUT, 0);
			return r;
		}
		body_block_release(r->body);
		r->body = inflated;
		r->data = body_block_data(inflated);
		r->len = len;
	}
	r->j.max_members = cfg->limits.max_members;
	r->split = jsonrpc_split(&r->j, r->data, r->len, cfg->limits.max_depth,
	    r->jc->max_batch, route->validate == VALIDATE_FULL);
	if (r->split == JSONRPC_NOMEM || (r->split >= 0 && rpc_route_calls(r) < 0))
		goto fail;
	if (r->split == JSONRPC_SINGLE && r->info[0].fate == FATE_ROUTED) {
		r->forwarded = 1;
		*forward = r->targets[r->j.calls[0].target].up;
		return r;
	}
	if (r->split >= 0 && (rpc_units(r) < 0 || rpc_heads(r, q) < 0))
		goto fail;
	r->pending = r->nunits;
	if (route->timeout != 0 && r->nunits != 0)
		evtimer_add(r->timer, conn_timeout_tv(r->timer, route->timeout, &tv));
	event_active(r->step_ev, EV_TIMEOUT, 0);
	return r;
fail:
	r->counted = 1;
	jsonrpc_route_end(r);
	return NULL;
}

/* A forwarded call's upstream failed (err): 1 when the failure is the upstream's, which the
 * call answers as a batch element would. */
static int
rpc_upstream_failure(enum gateway_error err)
{
	switch (err) {
	case GW_UPSTREAM_UNAVAILABLE:
	case GW_UPSTREAM_INVALID:
	case GW_UPSTREAM_TLS:
	case GW_UPSTREAM_STATUS:
	case GW_UPSTREAM_OVERLOADED:
	case GW_UPSTREAM_TIMEOUT:
		return 1;
	default:
		return 0;
	}
}

int
jsonrpc_route_failed(struct jsonrpc_route *r, enum gateway_error err, const char *message,
    struct evbuffer *out)
{
	const struct jsonrpc_call *c = &r->j.calls[0];

	if (!r->forwarded || !rpc_upstream_failure(err))
		return 0;
	if (c->kind != JSONRPC_CALL)
		return 204;
	rpc_error(out, JSONRPC_E_INTERNAL, c->id, c->id_len, gateway_errors[err].code,
	    message != NULL ? message : gateway_errors[err].text);
	return 200;
}

/*
 * p[0..n) (n a multiple of 4) equals lower, a lowercase literal of letters, digits, '-' and
 * '/', in any case: compared a word at a time, each byte with its 0x20 bit set (which only
 * control characters, which a head cannot hold, would also pass for '-' or '/').
 */
static int
rpc_ci_eq(const char *p, const char *lower, size_t n)
{
	uint64_t a, b;
	uint32_t x, y;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&a, p + i, 8);
		memcpy(&b, lower + i, 8);
		if ((a | 0x2020202020202020ULL) != b)
			return 0;
	}
	if (i < n) {
		memcpy(&x, p + i, 4);
		memcpy(&y, lower + i, 4);
		return (x | 0x20202020U) == y;
	}
	return 1;
}

/* The answer's Content-Type is one of the route's JSON types.  Most answers say
 * application/json, the first of the default types: that one is told without pattern
 * matching, so that a call whose answer streams pays next to nothing for the look. */
static int
rpc_json_answer(const struct config_route *route, const struct http_response *resp)
{
	struct http_str ct = { "", 0 };
	size_t i;

	for (i = 0; i < resp->nheaders; i++)
		if (resp->headers[i].name.len == 12 &&
		    rpc_ci_eq(resp->headers[i].name.p, "content-type", 12)) {
			ct = resp->headers[i].value;
			break;
		}
	if (ct.len >= 16 && rpc_ci_eq(ct.p, "application/json", 16) &&
	    (ct.len == 16 || ct.p[16] == ';' || ct.p[16] == ' ' || ct.p[16] == '\t') &&
	    route->json_types[0] != NULL && strcmp(route->json_types[0], "application/json") == 0)
		return 1;
	return body_is_json(route, ct);
}

int
jsonrpc_route_streams(const struct jsonrpc_route *r, const struct http_response *resp,
    int has_body)
{
	if (resp->status < 200 || resp->status > 299)
		return 0;
	if (r->j.calls[0].kind != JSONRPC_CALL)
		return 1;
	return has_body && rpc_json_answer(r->route, resp);
}

int
jsonrpc_route_answered(struct jsonrpc_route *r, int status, enum body_coding coding,
    struct body_block *body, size_t len, struct evbuffer *out, int *gateway_error)
{
	const struct jsonrpc_call *c = &r->j.calls[0];
	struct rpc_unit *u;

	*gateway_error = GW_INTERNAL_ERROR;
	if (rpc_units(r) < 0) {
		if (c->kind != JSONRPC_CALL)
			return 204;
		rpc_error(out, JSONRPC_E_INTERNAL, c->id, c->id_len,
		    gateway_errors[GW_INTERNAL_ERROR].code, "out of memory");
		return 200;
	}
	u = &r->units[r->info[0].unit];
	rpc_read_answer(r, u, status, coding, body, len);
	*gateway_error = u->state != UNIT_DONE ? (int)u->error : -1;
	if (c->kind != JSONRPC_CALL)
		return 204;
	if (u->state == UNIT_DONE && (c->state == JSONRPC_RESULT || c->state == JSONRPC_ERROR))
		return 0;
	*gateway_error = rpc_element(r, 0, out);
	return 200;
}

void
jsonrpc_route_log(struct jsonrpc_route *r, int status, int gateway_error,
    struct access_entry *e)
{
	enum metrics_jsonrpc_outcome o;

	e->rpc_method = r->split == JSONRPC_SINGLE && r->method_len != 0 ? r->method : NULL;
	e->rpc_method_len = r->method_len;
	e->rpc_batch = r->split == JSONRPC_BATCH ? (long)r->j.ncalls : -1;
	if (!r->forwarded || r->counted)
		return;
	r->counted = 1;
	/* What reached the client as the upstream sent it is its answer, whatever the status:
	 * the gateway answers for the upstream otherwise. */
	if (gateway_error >= 0)
		o = METRICS_JSONRPC_UPSTREAM_ERROR;
	else if (status == 499)
		o = METRICS_JSONRPC_CANCELLED;
	else
		o = r->j.calls[0].kind == JSONRPC_CALL ? METRICS_JSONRPC_ANSWERED :
		    METRICS_JSONRPC_NOTIFIED;
	metrics_jsonrpc(r->w, r->route, r->info[0].label, o, 1);
}

void
jsonrpc_route_end(struct jsonrpc_route *r)
{
	struct worker *w = r->w;
	struct rpc_slot *s;
	size_t i;

	if (!r->answered)
		rpc_count(r, 1);
	for (i = 0; i < r->nslots; i++) {
		s = r->slots[i];
		if (s->busy)
			metrics_upstream_request(w, fetch_server(&s->f), 499, -1);
		fetch_cancel(&s->f);
		/* An idle request keeps no body. */
		evbuffer_drain(s->f.request, evbuffer_get_length(s->f.request));
		s->busy = 0;
	}
	for (i = 0; i < r->nunits; i++)
		if (r->units[i].blk != NULL) {
			body_block_release(r->units[i].blk);
			r->units[i].blk = NULL;
		}
	r->nunits = 0;
	if (r->body != NULL) {
		body_block_release(r->body);
		r->body = NULL;
	}
	event_del(r->step_ev);
	evtimer_del(r->timer);
	evbuffer_drain(r->answer, evbuffer_get_length(r->answer));
	r->wr = NULL;
	r->route = NULL;
	r->next = rpc_idle;
	rpc_idle = r;
}

void
jsonrpc_route_free_idle(void)
{
	struct jsonrpc_route *r;

	while ((r = rpc_idle) != NULL) {
		rpc_idle = r->next;
		rpc_free(r);
	}
}
