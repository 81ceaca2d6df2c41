/* A JSON-RPC route's request: its body collected, handed to jsonrpc_route.c, a
 * single call forwarded as a proxied request, the answer judged before it goes. */
#include "config.h"
#include "request.h"

#include "jsonrpc_route.h"

/* Answer with a body the gateway made: 200 with the JSON in body, or 204 with none. */
static void
proxy_jsonrpc_answer(struct client *c, int status, struct evbuffer *body)
{
	struct http_response *resp = &c->w->resp;
	size_t len = evbuffer_get_length(body);
	const char *extra = NULL;

	memset(resp, 0, sizeof(*resp));
	resp->status = status;
	if (status == 204) {
		proxy_write_response_head(c, resp, ANSWER_BODYLESS, 0, NULL);
	} else {
		resp->nheaders = 1;
		resp->headers[0].name = (struct http_str){ "Content-Type", 12 };
		resp->headers[0].value = (struct http_str){ "application/json", 16 };
		if (c->rq->accept_gzip && body_gzip(c->w->bodies, body) == 0) {
			extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
			len = evbuffer_get_length(body);
		}
		proxy_write_response_head(c, resp, ANSWER_LENGTH, len, extra);
		c->down->body(c, body, len);
	}
	client_request_end(c);
}

/* The answer of a batch (or an error the gateway gives itself) is in. */
static void
proxy_jsonrpc_done_cb(const struct jsonrpc_answer *ans, void *arg)
{
	struct client *c = arg;

	if (ans->status == 0)
		client_error(c, ans->error, ans->message, 0);
	else
		proxy_jsonrpc_answer(c, ans->status, ans->body);
	proxy_flush(c);
}

/* A forwarded call failed before an answer came: 1 when it is answered as a batch element
 * would be (its JSON-RPC error, or 204 for a notification), 0 when the gateway error goes
 * out instead. */
int
proxy_jsonrpc_failed(struct client *c, enum gateway_error err, const char *message)
{
	struct evbuffer *out = c->w->rewritten;
	int status;

	evbuffer_drain(out, evbuffer_get_length(out));
	if ((status = jsonrpc_route_failed(c->rq->rpc, err, message, out)) == 0)
		return 0;
	proxy_jsonrpc_answer(c, status, out);
	return 1;
}

/* A forwarded call's answer that is judged before the client gets any of it: read whole,
 * up to limits.max_body.  0 while it is read, -1 once answered. */
int
proxy_jsonrpc_hold_answer(struct client *c, size_t head_len)
{
	if (c->rq->ans.mode == BODY_LENGTH && c->rq->ans.left > client_cfg(c)->limits.max_body) {
		proxy_jsonrpc_too_large(c);
		return -1;
	}
	if (proxy_hold_response(c, head_len) < 0)
		return -1;
	if (c->rq->ans.mode != BODY_NONE)
		return 0;
	proxy_jsonrpc_judge(c);
	return -1;
}

/* The answer to judge is larger than limits.max_body: the call fails as a batch's would. */
void
proxy_jsonrpc_too_large(struct client *c)
{
	tries_error(&c->rq->t, GW_UPSTREAM_INVALID, "the answer of upstream %s is over its size "
	    "limit%s", "");
	client_error(c, c->rq->t.error, c->rq->t.message, 0);
}

/* The whole answer of a forwarded call is in: it goes as the upstream sent it when it answers
 * the call, else the call gets what a batch element would. */
void
proxy_jsonrpc_judge(struct client *c)
{
	struct worker *w = c->w;
	struct http_response *resp = &w->resp;
	struct evbuffer *out = w->rewritten;
	struct body_block *b = c->rq->ans.block;
	size_t hl = evbuffer_get_length(c->rq->resp_head), len = c->rq->ans.block_len;
	int status, err;

	http_parse_response((const char *)evbuffer_pullup(c->rq->resp_head, (ev_ssize_t)hl), hl,
	    resp);
	c->rq->ans.collecting = 0;
	if (b != NULL) {
		body_block_ref(b);
	} else if ((len = evbuffer_get_length(c->rq->body)) != 0 &&
	    (b = body_block_copy(w->bodies, c->rq->body)) == NULL) {
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
		return;
	}
	evbuffer_drain(out, evbuffer_get_length(out));
	status = jsonrpc_route_answered(c->rq->rpc, resp->status,
	    body_content_coding(resp->headers, resp->nheaders), b, len, out, &err);
	body_block_release(b);
	if (c->rq->t.ex.uc != NULL && evbuffer_get_length(upconn(c)->in) != 0)
		c->rq->ans.up_close = 1;        /* bytes past the answer: never reuse */
	if (status != 0) {
		c->rq->gw_error = err;
		proxy_jsonrpc_answer(c, status, out);
		return;
	}
	if (c->rq->ans.block != NULL)
		body_block_add_to(c->rq->body, c->rq->ans.block, c->rq->ans.block_len);
	len = evbuffer_get_length(c->rq->body);
	proxy_write_response_head(c, resp, ANSWER_LENGTH, len, NULL);
	proxy_send_body(c, c->rq->body, len);
	client_request_end(c);
}

/* The head of a request to up for a group of calls: the client's, as a proxied request's,
 * its body's framing and coding left to the caller. */
static int
proxy_jsonrpc_head_cb(void *arg, const struct config_upstream *up, struct evbuffer *out)
{
	struct client *c = arg;
	struct worker *w = c->w;
	struct http_request *req = &w->req;
	struct headers_forward fw;
	struct rewrite_vars vars;
	struct body_tls_text tls_text;
	int n;

	/* The groups are sent identity-coded, their answers asked for as identity. */
	proxy_remove_header(req->headers, &req->nheaders, "content-encoding");
	proxy_remove_header(req->headers, &req->nheaders, "accept-encoding");
	proxy_remove_header(req->headers, &req->nheaders, "expect");
	if ((n = proxy_rewrite_target(c, req)) < 0)
		return -1;
	memset(&fw, 0, sizeof(fw));
	fw.client_addr = c->addr;
	fw.tls = c->down->transport(c)->ssl != NULL;
	fw.request_id.p = c->rq->request_id;
	fw.request_id.len = c->rq->request_id_len;
	fw.host_override = up->host_header;
	fw.target.p = w->target_buf;
	fw.target.len = (size_t)n;
	fw.ops = c->rq->route->request_headers;
	if (fw.ops != NULL) {
		proxy_vars(c, fw.ops->vars, &vars, &tls_text);
		body_vars_headers(&vars, req);
		fw.vars = &vars;
	}
	return headers_request_out(out, req, &fw);
}

/* The body is in: split it, and forward a single call or wait for the answer. */
void
proxy_jsonrpc_start(struct client *c, struct http_request *req)
{
	const struct config *cfg = client_cfg(c);
	const struct config_upstream *up;
	struct jsonrpc_request jr = {
		req, c->rq->request_id, c->addr, c->rq->up.block, c->rq->up.block_len,
		body_content_coding(req->headers, req->nheaders),
		c->rq->t.idempotent, proxy_jsonrpc_head_cb, c
	};

	if (jr.coding == BODY_CODING_OTHER) {
		client_error(c, GW_UNSUPPORTED_MEDIA_TYPE, NULL, 0);
		return;
	}
	c->rq->rpc = jsonrpc_route_start(c->rq->wr, c->rq->route, &jr, proxy_jsonrpc_done_cb, c, &up);
	if (c->rq->rpc == NULL) {
		client_error(c, GW_UPSTREAM_UNAVAILABLE, "out of memory", 0);
		return;
	}
	if (up == NULL) {
		proxy_drop_request_block(c);
		return;
	}
	/* One call: it goes to its upstream as it came, its answer back as it comes. */
	c->rq->upool = &c->rq->wr->pools[up - cfg->upstreams];
	tries_begin(&c->rq->t, c->rq->upool, c->rq->request_id);
	client_hash_key(c, req);
	if (c->rq->req_body == NULL && (c->rq->req_body = evbuffer_new()) == NULL) {
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	body_block_add_to(c->rq->req_body, c->rq->up.block, c->rq->up.block_len);
	c->rq->up.out_len = (int64_t)c->rq->up.block_len;
	proxy_drop_request_block(c);
	if (proxy_build_upstream_head(c, req) < 0) {
		client_error(c, GW_BAD_REQUEST, NULL, 1);
		return;
	}
	proxy_send_collected(c);
}

/* A JSON-RPC route takes POSTed bodies, read whole (up to limits.max_body) before anything
 * is sent. */
static void
proxy_jsonrpc(struct client *c, struct http_request *req, size_t head_len)
{
	const struct config *cfg = client_cfg(c);

	if (req->method_bit != METHOD_POST) {
		evbuffer_drain(client_input(c), head_len);
		c->rq->allow = METHOD_POST;
		client_error(c, GW_METHOD_NOT_ALLOWED, "a JSON-RPC route takes POST requests", 0);
		return;
	}
	if (c->rq->up.mode == BODY_LENGTH && c->rq->up.left > cfg->limits.max_body) {
		evbuffer_drain(client_input(c), head_len);
		client_error(c, GW_PAYLOAD_TOO_LARGE, NULL, 1);
		return;
	}
	if (proxy_keep_request_head(c, head_len) < 0) {
		evbuffer_drain(client_input(c), head_len);
		client_error(c, GW_BAD_REQUEST, "out of memory", 1);
		return;
	}
	c->rq->accept_gzip = c->rq->route->compress == COMPRESS_GZIP &&
	    body_accepts_gzip(req->headers, req->nheaders);
	evbuffer_drain(client_input(c), head_len);
	proxy_start_request_collect(c);
}

static void
proxy_end_jsonrpc(struct client *c)
{
	if (c->rq->rpc != NULL) {
		jsonrpc_route_end(c->rq->rpc);
		c->rq->rpc = NULL;
	}
}

/* The call's method and the batch's size in the access log line. */
static void
proxy_jsonrpc_log(struct client *c, struct access_entry *e)
{
	if (c->rq->rpc != NULL)
		jsonrpc_route_log(c->rq->rpc, c->rq->status, c->rq->gw_error, e);
}

static int
proxy_jsonrpc_takes(const struct config_route *route)
{
	return route->jsonrpc != NULL;
}

/* A JSON-RPC route: calls routed by method, batches split by upstream. */
const struct route_kind kind_jsonrpc = {
	proxy_jsonrpc_takes, proxy_jsonrpc, proxy_body_in, proxy_end_jsonrpc, proxy_jsonrpc_log,
	jsonrpc_route_free_idle
};
