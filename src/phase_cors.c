/* The CORS phase: a preflight answered by the gateway (never sent upstream), and the
 * headers that let an admitted origin's page read every answer of the route. */
#include "config.h"
#include "request.h"

#include "cors.h"

static int
phase_cors_applies(const struct config_route *route)
{
	return route->cors.origins != NULL;
}

/* An OPTIONS request that says which method will follow is the browser's question. */
static int
phase_cors_preflight(const struct http_request *req)
{
	return req->method_bit == METHOD_OPTIONS && http_find_header(req->headers, req->nheaders,
	    "access-control-request-method").len != 0;
}

static enum phase_result
phase_cors_run(struct client *c, struct http_request *req, size_t head_len)
{
	const struct cors_policy *p = &c->rq->route->cors;
	struct http_str origin = http_find_header(req->headers, req->nheaders, "origin");
	struct http_response *resp = &c->w->resp;
	struct http_str asked;
	char lines[1024];
	size_t n;

	/* Another origin's requests go on as they are; their answers say nothing of CORS. */
	if (!cors_origin_allowed(p, origin.p, origin.len))
		return PHASE_NEXT;
	if (!phase_cors_preflight(req)) {
		c->rq->answer_headers_len = cors_answer_lines(p, origin.p, origin.len,
		    c->rq->answer_headers, sizeof(c->rq->answer_headers));
		return PHASE_NEXT;
	}
	asked = http_find_header(req->headers, req->nheaders, "access-control-request-headers");
	n = cors_preflight_lines(p, origin.p, origin.len, asked.p, asked.len, lines,
	    sizeof(lines));
	if (n == 0)
		return PHASE_NEXT;      /* asks for more headers than an answer carries */
	evbuffer_drain(client_input(c), head_len);
	memset(resp, 0, sizeof(*resp));
	resp->status = 204;
	proxy_write_response_head(c, resp, ANSWER_BODYLESS, 0, lines);
	client_request_end(c);
	return PHASE_ANSWERED;
}

const struct request_phase phase_cors = { phase_cors_applies, phase_cors_run };
