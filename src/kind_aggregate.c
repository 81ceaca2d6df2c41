/* An aggregated route's request: handed to aggregate.c, its merged answer sent. */
#include "config.h"
#include "request.h"

#include "aggregate.h"

/* The merged answer (or the gateway error) of an aggregated route. */
static void
proxy_aggregate_done_cb(const struct aggregate_answer *ans, void *arg)
{
	struct client *c = arg;
	struct http_response *resp = &c->w->resp;
	char extra[96];
	size_t len;

	if (ans->status == 0) {
		client_error(c, ans->error, ans->message, 0);
		proxy_flush(c);
		return;
	}
	memset(resp, 0, sizeof(*resp));
	resp->status = ans->status;
	resp->nheaders = 1;
	resp->headers[0].name = (struct http_str){ "Content-Type", 12 };
	resp->headers[0].value = (struct http_str){ "application/json", 16 };
	/* The client can always tell a complete answer from a partial one. */
	snprintf(extra, sizeof(extra), "%s%s", ans->partial ? "X-Jsongate-Partial: true\r\n" : "",
	    c->rq->accept_gzip && body_gzip(c->w->bodies, ans->body) == 0 ?
	    "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n" : "");
	len = evbuffer_get_length(ans->body);
	proxy_write_response_head(c, resp, ANSWER_LENGTH, len, extra);
	if (c->rq->head_request)
		evbuffer_drain(ans->body, len);
	else
		c->down->body(c, ans->body, len);
	client_request_end(c);
	proxy_flush(c);
}

/* The request goes to the route's backends, not upstream: nothing of it is forwarded but
 * what the backends' configuration takes from it. */
static void
proxy_aggregate(struct client *c, struct http_request *req, size_t head_len)
{
	struct aggregate_request ar = {
		req, (const char *)evbuffer_pullup(client_input(c), (ev_ssize_t)head_len), head_len,
		c->rq->request_id, c->addr, c->down->transport(c)->ssl != NULL,
		c->down->transport(c), &c->rq->pathv, c->rq->auth.claims, c->rq->auth.api_key
	};

	c->rq->accept_gzip = c->rq->route->compress == COMPRESS_GZIP &&
	    body_accepts_gzip(req->headers, req->nheaders);
	/* A request body is not read. */
	c->down->read_body(c, BODY_IGNORED);
	c->rq->agg = aggregate_start(c->rq->wr, c->rq->route, &ar, proxy_aggregate_done_cb, c);
	evbuffer_drain(client_input(c), head_len);
	if (c->rq->agg == NULL)
		client_error(c, GW_INTERNAL_ERROR, NULL, 0);
}

static void
proxy_end_aggregate(struct client *c)
{
	if (c->rq->agg != NULL) {
		aggregate_end(c->rq->agg);
		c->rq->agg = NULL;
	}
}

/* Each backend's status, outcome and time in the access log line. */
static void
proxy_aggregate_log(struct client *c, struct access_entry *e)
{
	if (c->rq->agg != NULL)
		e->backends = aggregate_log(c->rq->agg, &e->nbackends);
}

static int
proxy_aggregate_takes(const struct config_route *route)
{
	return route->backends != NULL;
}

/* A route with backends: their answers merged into one. */
const struct route_kind kind_aggregate = {
	proxy_aggregate_takes, proxy_aggregate, NULL, proxy_end_aggregate, proxy_aggregate_log,
	aggregate_free_idle
};
