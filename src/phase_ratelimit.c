/* The rate limit phase: a route's requests admitted per key (a GCRA bucket of burst
 * requests, refilled at the rate), one bucket per key for the whole daemon; every answer of
 * the route says how much is left, a refused request gets 429 with Retry-After. */
#include "config.h"
#include "request.h"

#include <ctype.h>

#include "auth.h"
#include "jwt.h"

static int
phase_ratelimit_applies(const struct config_route *route)
{
	return route->rate_limit != NULL;
}

static int
phase_ratelimit_in(const struct config_cidr *cidr, int family, const unsigned char *a)
{
	unsigned bits = cidr->bits, i;

	if (cidr->family != family)
		return 0;
	for (i = 0; bits >= 8; i++, bits -= 8)
		if (a[i] != cidr->addr[i])
			return 0;
	return bits == 0 || ((a[i] ^ cidr->addr[i]) & (0xff00 >> bits) & 0xff) == 0;
}

static int
phase_ratelimit_trusted(const struct config *cfg, const char *addr, size_t len)
{
	unsigned char a[16];
	char text[INET6_ADDRSTRLEN];
	int family;

	if (len == 0 || len >= sizeof(text))
		return 0;
	memcpy(text, addr, len);
	text[len] = '\0';
	if (inet_pton(AF_INET, text, a) == 1)
		family = AF_INET;
	else if (inet_pton(AF_INET6, text, a) == 1)
		family = AF_INET6;
	else
		return 0;
	for (size_t i = 0; i < cfg->ntrusted_proxies; i++)
		if (phase_ratelimit_in(&cfg->trusted_proxies[i], family, a))
			return 1;
	return 0;
}

/* $client_addr: the peer, or when the peer is a trusted proxy the last address of
 * X-Forwarded-For that is not one. */
void
request_client_addr(struct client *c, const struct http_request *req, struct http_str *out)
{
	const struct config *cfg = client_cfg(c);
	struct http_str xff;
	size_t end, start;

	out->p = c->addr;
	out->len = strlen(c->addr);
	if (cfg->ntrusted_proxies == 0 || !phase_ratelimit_trusted(cfg, out->p, out->len))
		return;
	xff = http_find_header(req->headers, req->nheaders, "x-forwarded-for");
	end = xff.len;
	while (end > 0) {
		start = end;
		while (start > 0 && xff.p[start - 1] != ',')
			start--;
		struct http_str item = { xff.p + start, end - start };
		while (item.len > 0 && (item.p[0] == ' ' || item.p[0] == '\t')) {
			item.p++;
			item.len--;
		}
		while (item.len > 0 && (item.p[item.len - 1] == ' ' || item.p[item.len - 1] == '\t'))
			item.len--;
		if (item.len == 0)
			return;
		*out = item;
		if (!phase_ratelimit_trusted(cfg, item.p, item.len))
			return;
		end = start > 0 ? start - 1 : 0;
	}
}

/* The key of the request: its variable's value, or $client_addr when it has none. */
static struct http_str
phase_ratelimit_key(struct client *c, const struct http_request *req, const char *var)
{
	struct http_str v = { NULL, 0 };
	const char *val;
	size_t len;

	if (var == NULL || strcmp(var, "$client_addr") == 0)
		;
	else if (strcmp(var, "$remote_addr") == 0) {
		v.p = c->addr;
		v.len = strlen(c->addr);
	} else if (strcmp(var, "$api_key") == 0) {
		if (c->rq->api_key != NULL) {
			v.p = c->rq->api_key;
			v.len = strlen(v.p);
		}
	} else if (strncmp(var, "$jwt.", 5) == 0) {
		if (c->rq->claims != NULL && jwt_claim(c->rq->claims, var + 5, &val, &len) !=
		    JWT_CLAIM_MISSING) {
			v.p = val;
			v.len = len;
		}
	} else if (strncmp(var, "$header.", 8) == 0) {
		char lower[128];
		size_t i;

		for (i = 0; var[8 + i] != '\0' && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)var[8 + i]);
		lower[i] = '\0';
		v = http_find_header(req->headers, req->nheaders, lower);
	}
	if (v.len == 0)
		request_client_addr(c, req, &v);
	return v;
}

static void
phase_ratelimit_lines(struct client *c, const struct ratelimit_answer *ans)
{
	size_t room = sizeof(c->rq->answer_headers) - c->rq->answer_headers_len;
	int n;

	n = snprintf(c->rq->answer_headers + c->rq->answer_headers_len, room,
	    "RateLimit-Limit: %u\r\nRateLimit-Remaining: %u\r\nRateLimit-Reset: %u\r\n",
	    ans->limit, ans->remaining, ans->reset);
	if (n > 0 && (size_t)n < room)
		c->rq->answer_headers_len += (size_t)n;
	if (ans->admitted)
		return;
	room = sizeof(c->rq->answer_headers) - c->rq->answer_headers_len;
	n = snprintf(c->rq->answer_headers + c->rq->answer_headers_len, room,
	    "Retry-After: %u\r\n", ans->retry_after);
	if (n > 0 && (size_t)n < room)
		c->rq->answer_headers_len += (size_t)n;
}

static enum phase_result
phase_ratelimit_run(struct client *c, struct http_request *req, size_t head_len)
{
	const struct config_route *route = c->rq->route;
	const struct route_rate_limit *rl = route->rate_limit;
	struct ratelimit_answer ans;
	struct http_str key = phase_ratelimit_key(c, req, rl->key);

	ratelimit_take(auth_ratelimit_table(), &rl->rule, key.p, key.len, ratelimit_now(), &ans);
	phase_ratelimit_lines(c, &ans);
	atomic_fetch_add_explicit(&route->rate_counter->n[ans.admitted ? RL_ALLOWED :
	    RL_LIMITED], 1, memory_order_relaxed);
	if (ans.admitted)
		return PHASE_NEXT;
	evbuffer_drain(client_input(c), head_len);
	client_error(c, GW_RATE_LIMITED, NULL, 0);
	return PHASE_ANSWERED;
}

const struct request_phase phase_ratelimit = { phase_ratelimit_applies, phase_ratelimit_run };
