/* A request on a client connection, whatever its route kind: from the head to the
 * end of its answer, the route chosen, its variables, its gateway errors and its access log line. */
#include "config.h"
#include "request.h"

#include "h2.h"
#include "jwt.h"
#include "path_norm.h"

/*
 * A body the ops cannot take, for why: counted as passed or failed, as on_error decides.
 * Under fail the client gets err with message (NULL: its default text): 1, the request is
 * answered.  0: the body goes on untouched.
 */
int
proxy_unrewritten(struct client *c, enum metrics_direction direction,
    enum metrics_envelope_reason why, enum gateway_error err, const char *message,
    int must_close)
{
	int fail = c->rq->route->on_error == ON_ERROR_FAIL;

	metrics_envelope(c->w, c->rq->route, direction, fail ? METRICS_FAILED : METRICS_PASSED, why);
	if (!fail)
		return 0;
	/* An answer over our limit or in a coding we do not decode is still a good answer. */
	c->rq->ans.refused = direction == METRICS_RESPONSE &&
	    (why == METRICS_REASON_OVER_LIMIT || why == METRICS_REASON_ENCODING);
	client_error(c, err, message, must_close);
	return 1;
}

int
request_body_too_large(struct client *c, uint64_t n)
{
	uint64_t max = c->rq->route->limits.max_request_body;

	if (max == 0 || c->rq->up.seen + n <= max) {
		c->rq->up.seen += n;
		return 0;
	}
	log_warnx("route %s: request body exceeds limits.max_request_body (request %s)",
	    c->rq->route->name, c->rq->request_id);
	c->rq->ans.up_close = 1;
	client_error(c, GW_PAYLOAD_TOO_LARGE, "request body exceeds limits.max_request_body", 1);
	return 1;
}

/* Why the ops could not rewrite a body, for jsongate_envelope_total. */
enum metrics_envelope_reason
proxy_unrewritten_reason(const struct body_result *res)
{
	return res->encoding ? METRICS_REASON_ENCODING : res->invalid ?
	    METRICS_REASON_INVALID_JSON : METRICS_REASON_OP_ERROR;
}

static void
proxy_drop(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_drain(b, evbuffer_get_length(b));
}

/* Empty the buffers a request keeps for the next one: however the request ended, none of
 * what it read or wrote may go out with the next request that takes them. */
void
request_drain(struct request *rq)
{
	proxy_drop(rq->up_head);
	proxy_drop(rq->req_body);
	proxy_drop(rq->req_copy);
	proxy_drop(rq->resp_head);
	proxy_drop(rq->body);
}

static void
proxy_free_buffer(struct evbuffer *b)
{
	if (b != NULL)
		evbuffer_free(b);
}

/* --- route kinds ------------------------------------------------------------------------- */

/* Every route kind, asked in turn whether a route is its own. */
/* A preflight comes before any credentials: CORS goes first; a rate limit may count by
 * who the credentials say the client is. */
static const struct request_phase *const request_phases[] = {
	&phase_cors, &phase_auth, &phase_ratelimit
};

static const struct route_kind *const route_kinds[] = {
	&kind_aggregate, &kind_jsonrpc, &kind_proxy
};

#define REQUEST_NPHASES (sizeof(request_phases) / sizeof(request_phases[0]))

const struct route_kind *
route_kind_of(const struct config_route *route)
{
	size_t i;

	if (route->plan.kind != NULL)
		return route->plan.kind;
	for (i = 0; i < sizeof(route_kinds) / sizeof(route_kinds[0]); i++)
		if (route_kinds[i]->takes(route))
			return route_kinds[i];
	return &kind_proxy;     /* never: the loader gives every route one of them */
}

/* Bit i: request_phases[i] applies to the route. */
static unsigned
request_route_phases(const struct config_route *route)
{
	unsigned phases = 0;

	for (unsigned i = 0; i < REQUEST_NPHASES; i++)
		if (request_phases[i]->applies(route))
			phases |= 1u << i;
	return phases;
}

void
route_plan(struct config_route *route)
{
	route->plan.kind = NULL;
	route->plan.phases = request_route_phases(route);
	route->plan.kind = route_kind_of(route);
}

static void
request_kind_end(struct client *c)
{
	if (c->rq->kind != NULL && c->rq->kind->end != NULL)
		c->rq->kind->end(c);
}

void
request_body_in(struct client *c)
{
	if (c->rq->scan.waiting)
		client_scan_more(c);
	else if (c->rq->kind != NULL && c->rq->kind->body != NULL)
		c->rq->kind->body(c);
	else
		c->down->read_body(c, BODY_PAUSED);     /* pipelined: wait our turn */
}

void
request_abort(struct client *c)
{
	/* A tunnel cut short writes its line while its tries are still known. */
	if (c->rq->tunnel != NULL)
		tunnel_free(c);
	proxy_drop_block(c);
	exchange_end(&c->rq->t.ex, 0);
	tries_forget(&c->rq->t);
	request_kind_end(c);
	request_drain(c->rq);
	phase_auth_end(c->rq);
	phase_ratelimit_end(c->rq);
	if (c->rq->wr != NULL) {
		worker_runtime_unref(c->rq->wr);
		c->rq->wr = NULL;
	}
}

void
proxy_worker_end(void)
{
	size_t i;

	h2_worker_end();
	for (i = 0; i < sizeof(route_kinds) / sizeof(route_kinds[0]); i++)
		if (route_kinds[i]->worker_end != NULL)
			route_kinds[i]->worker_end();
	phase_ratelimit_worker_end();
	phase_auth_worker_end();
}

/* --- requests ---------------------------------------------------------------------------- */

static void
request_free(struct request *rq)
{
	tries_free(&rq->t);
	proxy_free_buffer(rq->resp_head);
	proxy_free_buffer(rq->body);
	proxy_free_buffer(rq->req_copy);
	proxy_free_buffer(rq->up_head);
	proxy_free_buffer(rq->req_body);
	route_scan_free(&rq->scan);
	path_vars_free(&rq->pathv);
	if (rq->phase_timer != NULL)
		event_free(rq->phase_timer);
	free(rq->auth_buf);
	free(rq);
}

/* c's head is here: it gets a request, from the worker's free list when one is there, with
 * its per-request state zeroed.  0, or -1 without memory. */
int
client_request_attach(struct client *c)
{
	struct worker *w = c->w;
	struct request *rq = w->free_requests;

	if (rq != NULL) {
		w->free_requests = rq->next_free;
		w->nfree_requests--;
		rq->t.ex.arg = rq->t.owner = c;
	} else if ((rq = calloc(1, sizeof(*rq))) == NULL ||
	    tries_init(&rq->t, w, proxy_exchange_cb, &proxy_tries_ops, c) < 0) {
		free(rq);
		return -1;
	}
	memset((char *)rq + REQUEST_STATE, 0, sizeof(*rq) - REQUEST_STATE);
	rq->method[0] = rq->target[0] = rq->user_agent[0] = rq->referer[0] = '\0';
	c->rq = rq;
	return 0;
}

/* c's request is over (buffers drained, tries ended): back to the free list, or freed when
 * the worker keeps enough. */
void
client_request_detach(struct client *c)
{
	struct request *rq = c->rq;
	struct worker *w = c->w;

	if (rq == NULL)
		return;
	c->rq = NULL;
	route_scan_done(&rq->scan);
	path_vars_clear(&rq->pathv);
	if (w->nfree_requests >= REQUESTS_KEPT) {
		request_free(rq);
		return;
	}
	rq->next_free = w->free_requests;
	w->free_requests = rq;
	w->nfree_requests++;
}

void
proxy_worker_free(struct worker *w)
{
	struct request *rq;

	while ((rq = w->free_requests) != NULL) {
		w->free_requests = rq->next_free;
		request_free(rq);
	}
	w->nfree_requests = 0;
}

void
client_now(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
}

/* We refused the client's own request (a 4xx of ours, as invalid JSON) before it went to the
 * server of the try in progress. */
static int
client_refused_unsent(const struct client *c)
{
	return !c->rq->t.sent && c->rq->gw_error >= 0 && gateway_errors[c->rq->gw_error].status < 500;
}

/* The server a request counts for in the upstream metrics. */
static const struct config_server *
client_counted_server(const struct client *c)
{
	return client_refused_unsent(c) ? NULL : tries_server(&c->rq->t);
}

/* The servers tried, as nginx's $upstream_addr: "10.0.0.1:80, 10.0.0.2:80"; "-" for none.
 * The server of a try that never sent the request we refused is none of them. */
static void
client_servers_tried(const struct client *c, char *buf, size_t cap)
{
	size_t i, len = 0, n = c->rq->t.ntried;

	if (n > 0 && c->rq->t.noted && client_refused_unsent(c))
		n--;
	strcpy(buf, "-");
	for (i = 0; i < n && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
		    c->rq->t.tried[i]->srv->addr.text);
}

/* log.jwt_fields: each claim of the verified token, a string decoded (128 bytes at most), a
 * number or a boolean as written; anything else, or no token, null. */
static size_t
request_log_claims(struct client *c, const struct config *cfg, struct access_field *out,
    char text[][128])
{
	const struct jwt_claims *claims = c->rq->auth.claims;
	const char *p;
	size_t i, n;
	int r;

	for (i = 0; i < cfg->njwt_fields; i++) {
		out[i].name = cfg->jwt_fields[i];
		out[i].value = NULL;
		if (claims == NULL)
			continue;
		switch (jwt_claim(claims, cfg->jwt_fields[i], &p, &n)) {
		case JWT_CLAIM_STRING:
			if ((r = jwt_claim_str(claims, cfg->jwt_fields[i], text[i], 128)) >= 0) {
				out[i].value = text[i];
				out[i].len = (size_t)r;
			}
			break;
		case JWT_CLAIM_NUMBER:
		case JWT_CLAIM_BOOL:
			out[i].value = p;
			out[i].len = n;
			break;
		default:
			break;
		}
	}
	return cfg->njwt_fields;
}

void
client_log(struct client *c)
{
	const struct runtime *rt = (c->rq->wr != NULL ? c->rq->wr : c->w->cur)->rt;
	struct access_entry e;
	struct access_field json[CONFIG_MAX_JSON_FIELDS];
	struct access_field path[CONFIG_MAX_PATH_FIELDS];
	struct access_field claims[CONFIG_MAX_PATH_FIELDS];
	char claim_text[CONFIG_MAX_PATH_FIELDS][128];
	struct timespec now;
	char upstream[256];

	client_now(&now);
	metrics_request(c->w, c->rq->route, client_counted_server(c), c->rq->status,
	    c->rq->ans.refused ? -1 : c->rq->gw_error, &c->rq->start, &now);
	e.rpc_method = NULL;
	e.rpc_batch = -1;
	e.backends = NULL;
	e.nbackends = 0;
	e.tunnel_outcome = NULL;
	e.tunnel_received = 0;
	e.principal = c->rq->auth.principal_len != 0 ? c->rq->auth.principal : NULL;
	e.principal_len = c->rq->auth.principal_len;
	if (c->rq->kind != NULL && c->rq->kind->log != NULL)
		c->rq->kind->log(c, &e);
	if (rt->access.fd < 0) {
		route_scan_done(&c->rq->scan);
		path_vars_clear(&c->rq->pathv);
		return;
	}
	client_servers_tried(c, upstream, sizeof(upstream));
	e.remote_addr = c->addr;
	e.method = c->rq->method;
	e.path = c->rq->target;
	e.status = c->rq->status;
	e.bytes_sent = c->rq->bytes_sent;
	e.body_bytes_sent = c->rq->bytes_sent - c->rq->head_sent;
	e.upstream = upstream;
	e.route = c->rq->route != NULL ? c->rq->route->name : "-";
	e.duration_ms = (double)(now.tv_sec - c->rq->start.tv_sec) * 1e3 +
	    (double)(now.tv_nsec - c->rq->start.tv_nsec) / 1e6;
	e.request_id = c->rq->request_id;
	e.user_agent = c->rq->user_agent;
	e.referer = c->rq->referer;
	e.protocol = c->h2_stream ? "HTTP/2.0" : c->http_minor == 0 ? "HTTP/1.0" : "HTTP/1.1";
	e.json = json;
	e.njson = route_scan_log(&c->rq->scan, rt->cfg, json);
	e.path_fields = path;
	e.npath = path_vars_log(&c->rq->pathv, rt->cfg, path);
	e.jwt_fields = claims;
	e.njwt = request_log_claims(c, rt->cfg, claims, claim_text);
	access_log_write(&rt->access, &e);
	route_scan_done(&c->rq->scan);
	path_vars_clear(&c->rq->pathv);
}

/* Let go of the body blocks; the socket layer must not write into them any more. */
void
proxy_drop_block(struct client *c)
{
	body_block_release(c->rq->up.block);
	c->rq->up.block = NULL;
	if (c->rq->ans.block == NULL)
		return;
	if (c->rq->t.ex.uc != NULL)
		upconn(c)->sink = NULL;
	c->rq->ans.sinking = 0;
	body_block_release(c->rq->ans.block);
	c->rq->ans.block = NULL;
}

/* The answer started: what was kept for another try can go. */
void
proxy_drop_replay(struct client *c)
{
	if (c->rq->up.replay_len != 0) {
		evbuffer_drain(client_input(c), c->rq->up.replay_len);
		c->rq->up.replay_len = 0;
	}
	proxy_drop(c->rq->req_body);
	c->rq->t.replayable = 0;
}

/* The response is complete (or the request ended in an error): log, reset, go on. */
void
client_request_end(struct client *c)
{
	c->down->finish(c);
	client_log(c);
	/* A body kept for ops goes now, not at the next request: idle clients hold nothing. */
	request_drain(c->rq);
	proxy_drop_block(c);
	if (c->rq->t.ex.stage != EXCHANGE_IDLE) {
		/* The whole answer came: the server did well (unless its status said otherwise). */
		exchange_verdict(&c->rq->t.ex, 0);
		exchange_end(&c->rq->t.ex, !c->rq->ans.up_close && c->rq->up.done && c->rq->t.sent);
	}
	proxy_drop_replay(c);
	tries_forget(&c->rq->t);
	request_kind_end(c);
	phase_auth_end(c->rq);
	phase_ratelimit_end(c->rq);
	if (c->rq->wr != NULL) {
		worker_runtime_unref(c->rq->wr);
		c->rq->wr = NULL;
	}
	c->rq->route = NULL;
	c->rq->upool = NULL;
	c->down->end(c);
}

/* Answer with a gateway error; a request that cannot be framed any more closes after. */
void
client_error(struct client *c, enum gateway_error err, const char *message, int must_close)
{
	char allow[ROUTE_ALLOW_MAX];

	c->rq->gw_error = (int)err;
	if (c->rq->ans.started) {
		c->rq->ans.up_close = 1;
		c->rq->status = c->rq->status ? c->rq->status : gateway_errors[err].status;
		client_log(c);
		exchange_end(&c->rq->t.ex, 0);
		c->down->abort(c, CLIENT_CLOSE_UPSTREAM_ERROR);
		return;
	}
	exchange_end(&c->rq->t.ex, 0);
	/* A forwarded JSON-RPC call that got no answer: its error object answers it. */
	if (c->rq->rpc != NULL && proxy_jsonrpc_failed(c, err, message))
		return;
	c->rq->status = gateway_errors[err].status;
	route_allow_header(err == GW_METHOD_NOT_ALLOWED ? c->rq->allow : 0, allow);
	c->down->error(c, err, message, allow, must_close);
	c->rq->ans.started = 1;
	client_request_end(c);
}

/* The upstream's hash_key for this request, kept for every try. */
void
client_hash_key(struct client *c, const struct http_request *req)
{
	const char *var = c->rq->upool->cfg->hash_key;
	struct http_str v = { "", 0 };

	if (var == NULL) {
		c->rq->hash_key_len = 0;        /* an upstream that does not hash: none */
		return;
	}
	if (strncmp(var, "$jwt.", 5) == 0 || strcmp(var, "$api_key") == 0 ||
	    strcmp(var, "$client_addr") == 0) {
		struct rewrite_vars vars;
		struct rewrite_str s = { "", 0 };

		proxy_vars(c, 0, &vars, NULL);
		if (var[1] == 'a')
			s = vars.api_key;
		else if (var[1] == 'c')
			s = vars.client_addr;
		else if (vars.jwt_cb != NULL && !vars.jwt_cb(vars.jwt_arg, var + 5, strlen(var + 5),
		    &s))
			s.len = 0;
		c->rq->hash_key_len = s.len < sizeof(c->rq->hash_key) ? s.len :
		    sizeof(c->rq->hash_key);
		memcpy(c->rq->hash_key, s.p, c->rq->hash_key_len);
		return;
	}
	if (strncmp(var, "$json.", 6) == 0) {
		/* A body field: only a proxied request has read one. */
		route_scan_value(&c->rq->scan, var + 6, strlen(var + 6), &v.p, &v.len);
		c->rq->hash_key_len = v.len < sizeof(c->rq->hash_key) ? v.len : sizeof(c->rq->hash_key);
		memcpy(c->rq->hash_key, v.p, c->rq->hash_key_len);
		return;
	}
	c->rq->hash_key_len = exchange_hash_key(c->rq->upool->cfg, c->addr, req, req->target, req->path,
	    c->rq->hash_key, sizeof(c->rq->hash_key));
}

#define PROXY_USES(uses, var) (((uses) & (1u << REWRITE_VAR_##var)) != 0)

/* The $variables of this request that ops using the ones in uses (1 << REWRITE_VAR_*) need;
 * request headers are the caller's to add. */
void
proxy_vars(struct client *c, unsigned uses, struct rewrite_vars *vars,
    struct body_tls_text *tls_text)
{
	const struct config_server *srv = tries_server(&c->rq->t);

	memset(vars, 0, sizeof(*vars));
	vars->request_id.p = c->rq->request_id;
	vars->request_id.len = c->rq->request_id_len;
	vars->route.p = vars->upstream.p = vars->remote_addr.p = "";
	if (PROXY_USES(uses, ROUTE)) {
		vars->route.p = c->rq->route->name;
		vars->route.len = strlen(c->rq->route->name);
	}
	if (PROXY_USES(uses, UPSTREAM) && srv != NULL) {
		vars->upstream.p = srv->addr.text;
		vars->upstream.len = strlen(srv->addr.text);
	}
	if (PROXY_USES(uses, REMOTE_ADDR)) {
		vars->remote_addr.p = c->addr;
		vars->remote_addr.len = strlen(c->addr);
	}
	if (PROXY_USES(uses, TIME_ISO8601))
		vars->now = (long long)time(NULL);
	if (c->rq->auth.claims != NULL) {
		vars->jwt_cb = request_jwt_var;
		vars->jwt_arg = c->rq->auth.claims;
	}
	vars->api_key.p = c->rq->auth.api_key != NULL ? c->rq->auth.api_key : "";
	vars->api_key.len = strlen(vars->api_key.p);
	vars->client_addr.p = c->rq->auth.client_addr_len != 0 ? c->rq->auth.client_addr : c->addr;
	vars->client_addr.len = c->rq->auth.client_addr_len != 0 ? c->rq->auth.client_addr_len :
	    strlen(c->addr);
	body_tls_vars(uses, c->down->transport(c), vars, tls_text);
	route_scan_vars(&c->rq->scan, vars);
	path_vars_vars(&c->rq->pathv, vars);
}

/* For $header.NAME in response ops: the request head kept in req_copy, parsed again. */
void
proxy_kept_request_headers(struct client *c, struct rewrite_vars *vars)
{
	struct http_request *req = &c->w->req;
	size_t ql = c->rq->req_copy != NULL ? evbuffer_get_length(c->rq->req_copy) : 0;

	if (ql != 0 && http_parse_request((const char *)evbuffer_pullup(c->rq->req_copy,
	    (ev_ssize_t)ql), ql, req) > 0)
		body_vars_headers(vars, req);
}

/* The route needs more of the body to decide: read it (its window, no more), within
 * client_body, the runtime kept for when it is decided. */
static void
client_scan_wait(struct client *c, size_t head_len)
{
	const struct config *cfg = client_cfg(c);

	if (c->rq->wr == NULL) {
		c->rq->wr = c->w->cur;
		worker_runtime_ref(c->rq->wr);
	}
	c->down->continue_(c);
	c->down->input_room(c, route_scan_input_max(cfg, head_len));
	c->down->read_body(c, BODY_READING);
}

/* More of the body came while the route waits for it. */
void
client_scan_more(struct client *c)
{
	struct http_request *req = &c->w->req;
	size_t hl = c->rq->scan.head_len;

	http_parse_request((const char *)evbuffer_pullup(client_input(c), (ev_ssize_t)hl), hl, req);
	c->down->input_room(c, 0);
	client_route(c, req, (ssize_t)hl);
}

static void
request_body_framing(struct client *c, const struct http_request *req)
{
	if (req->framing.chunked) {
		c->rq->up.mode = BODY_CHUNKED;
	} else if (req->framing.content_length > 0) {
		c->rq->up.mode = BODY_LENGTH;
		c->rq->up.left = (uint64_t)req->framing.content_length;
	} else {
		c->rq->up.mode = BODY_NONE;
	}
	c->rq->up.done = c->rq->up.mode == BODY_NONE;
}

static void
request_new_id(struct client *c, const struct http_request *req)
{
	if (headers_request_id_acceptable(req->request_id)) {
		memcpy(c->rq->request_id, req->request_id.p, req->request_id.len);
		c->rq->request_id_len = req->request_id.len;
	} else {
		headers_request_id_generate(c->rq->request_id);
		c->rq->request_id_len = REQUEST_ID_LEN;
	}
	c->rq->request_id[c->rq->request_id_len] = '\0';
}

static void
copy_str(char *dst, size_t cap, struct http_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	memcpy(dst, s.p, n);
	dst[n] = '\0';
}

static void
request_remember_for_log(struct client *c, const struct http_request *req)
{
	size_t i;

	copy_str(c->rq->method, sizeof(c->rq->method), req->method);
	copy_str(c->rq->target, sizeof(c->rq->target), req->target);
	c->rq->user_agent[0] = c->rq->referer[0] = '\0';
	if (c->w->cur->rt->access.format != ACCESS_COMBINED)
		return;
	for (i = 0; i < req->nheaders; i++) {
		if (http_header_is(&req->headers[i], "user-agent"))
			copy_str(c->rq->user_agent, sizeof(c->rq->user_agent), req->headers[i].value);
		else if (http_header_is(&req->headers[i], "referer"))
			copy_str(c->rq->referer, sizeof(c->rq->referer), req->headers[i].value);
	}
}

/* c's head is here: it gets a request, from the worker's free list when one is there, with
 * the state every request starts from.  0, or -1 without memory. */
int
request_begin(struct client *c)
{
	if (client_request_attach(c) < 0)
		return -1;
	/* What is not 0: the rest was zeroed by client_request_attach. */
	client_now(&c->rq->start);
	c->rq->gw_error = -1;
	c->rq->up.out_len = -1;
	c->rq->up.done = 1;
	tries_reset(&c->rq->t);
	return 0;
}

/* 1 when path has no "//", no "/." and no "/%" ("%2e" is a dot): no dot segment and no empty
 * one, nothing for path_norm to do; most paths are told so with a look at their slashes. */
static int
request_path_plain(struct http_str path)
{
	const char *p = path.p, *end = p + path.len;

	while (p < end && (p = memchr(p, '/', (size_t)(end - p))) != NULL && ++p < end)
		if (*p == '/' || *p == '.' || *p == '%')
			return 0;
	return 1;
}

void
request_take_head(struct client *c, struct http_request *req, unsigned char *head, size_t len)
{
	struct worker *w = c->w;
	struct evbuffer *in = client_input(c);
	ssize_t shift;

	c->rq->up.expect_continue = req->framing.expect_continue;
	c->rq->head_request = req->method_bit == METHOD_HEAD;
	c->rq->head_as_get = 0;
	c->rq->t.idempotent = (req->method_bit & (METHOD_GET | METHOD_HEAD | METHOD_PUT |
	    METHOD_DELETE | METHOD_OPTIONS | METHOD_TRACE)) != 0 ||
	    http_find_header(req->headers, req->nheaders, "idempotency-key").len != 0;
	request_body_framing(c, req);
	request_new_id(c, req);
	c->rq->accept_gzip = 0;
	if (w->cur->rt->access.fd >= 0)
		request_remember_for_log(c, req);
	if (w->draining) {
		evbuffer_drain(in, len);
		client_error(c, GW_SHUTTING_DOWN, NULL, 1);
		return;
	}
	if (c->down->transport(c)->tls.plain) {
		client_error(c, GW_BAD_REQUEST, "plain HTTP request sent to HTTPS port", 1);
		return;
	}
	/* Routes match, and the upstream gets, the normal path: the head is rewritten. */
	if (request_path_plain(req->path))
		shift = 0;
	else if ((shift = path_norm_head((char *)head, len, req)) < 0) {
		evbuffer_drain(in, len);
		client_error(c, GW_BAD_REQUEST, "the path climbs above /", 0);
		return;
	} else if (shift > 0) {
		evbuffer_drain(in, (size_t)shift);
		len -= (size_t)shift;
		http_parse_request((const char *)evbuffer_pullup(in, (ev_ssize_t)len), len, req);
	}
	client_route(c, req, (ssize_t)len);
}

/* The route scan reads a body without a length as its session hands it over. */
static int
request_body_peek(void *arg, struct body_cursor *cur, const char **p, size_t *n)
{
	struct client *c = arg;

	return c->down->body_peek(c, cur, p, n);
}

/* A CORS preflight asks with OPTIONS about the method that follows: a route that takes that
 * method and admits the origin answers it, though OPTIONS is not one of its methods. */
static void
client_route_preflight(struct client *c, struct http_request *req, size_t head_len)
{
	struct http_str m = http_find_header(req->headers, req->nheaders,
	    "access-control-request-method");
	struct http_str origin;
	const struct config_route *route = NULL;
	unsigned saved = req->method_bit, allow = 0;

	if (saved != METHOD_OPTIONS || m.len == 0)
		return;
	req->method_bit = http_method_bit(m.p, m.len);
	if (route_scan_match(&c->rq->scan, c->w->bodies, client_cfg(c), req, client_input(c),
	    head_len, request_body_peek, c, &route, &allow) == ROUTE_SCAN_WAIT) {
		c->rq->scan.waiting = 0;        /* a preflight has no body to wait for */
		route = NULL;
	}
	req->method_bit = saved;
	origin = http_find_header(req->headers, req->nheaders, "origin");
	if (route != NULL && cors_origin_allowed(&route->cors, origin.p, origin.len))
		c->rq->route = route;
}

/* The route's phases from the first'th on, then its kind. */
static void
request_run_phases(struct client *c, struct http_request *req, size_t head_len, unsigned first)
{
	const struct config_route *route = c->rq->route;
	unsigned phases = route->plan.kind != NULL ? route->plan.phases :
	    request_route_phases(route);

	for (unsigned i = first; (phases >> i) != 0; i++) {
		if ((phases & (1u << i)) == 0)
			continue;
		switch (request_phases[i]->run(c, req, head_len)) {
		case PHASE_NEXT:
			break;
		case PHASE_ANSWERED:
			return;
		case PHASE_WAIT:
			c->rq->ph.at = i;
			c->rq->ph.head_len = head_len;
			return;
		}
	}
	c->rq->kind = route_kind_of(route);
	c->rq->kind->start(c, req, head_len);
}

/* Choose the route of the request whose head (r bytes) leads the input, and start it. */
void
client_route(struct client *c, struct http_request *req, ssize_t r)
{
	struct worker *w = c->w;
	struct evbuffer *in = client_input(c);
	const struct config *cfg = client_cfg(c);

	if (route_scan_match(&c->rq->scan, w->bodies, cfg, req, in, (size_t)r, request_body_peek,
	    c, &c->rq->route, &c->rq->allow) == ROUTE_SCAN_WAIT) {
		client_scan_wait(c, (size_t)r);
		return;
	}
	if (c->rq->route == NULL && c->rq->allow != 0)
		client_route_preflight(c, req, (size_t)r);
	if (c->rq->route == NULL) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, c->rq->allow ? GW_METHOD_NOT_ALLOWED : GW_NO_ROUTE, NULL, 0);
		return;
	}
	if (c->rq->wr == NULL) {
		c->rq->wr = w->cur;
		worker_runtime_ref(c->rq->wr);
	}
	if (path_vars_set(&c->rq->pathv, c->rq->route, req->path.p, req->path.len) < 0) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_INTERNAL_ERROR, NULL, 1);
		return;
	}
	/* A body announced over the route's limit: refused before a byte of it goes anywhere
	 * (and before 100 Continue invites it). */
	if (c->rq->route->limits.max_request_body != 0 && req->framing.content_length >= 0 &&
	    (uint64_t)req->framing.content_length > c->rq->route->limits.max_request_body) {
		evbuffer_drain(in, (size_t)r);
		client_error(c, GW_PAYLOAD_TOO_LARGE, "request body exceeds limits.max_request_body",
		    1);
		return;
	}
	if (cfg->ntrusted_proxies != 0) {
		struct http_str ca;

		request_client_addr(c, req, &ca);
		c->rq->auth.client_addr_len = ca.len < sizeof(c->rq->auth.client_addr) ? ca.len :
		    sizeof(c->rq->auth.client_addr);
		memcpy(c->rq->auth.client_addr, ca.p, c->rq->auth.client_addr_len);
	}
	request_run_phases(c, req, (size_t)r, 0);
}

void
request_phase_resume(struct client *c)
{
	struct http_request *req = &c->w->req;
	size_t hl = c->rq->ph.head_len;

	http_parse_request((const char *)evbuffer_pullup(client_input(c), (ev_ssize_t)hl), hl, req);
	/* What the phases before took out of the head stays out. */
	if (c->rq->auth.strip != NULL)
		phase_auth_strip(c, req);
	request_run_phases(c, req, hl, c->rq->ph.at);
}
