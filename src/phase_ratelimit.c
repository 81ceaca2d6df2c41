/* The rate limit phase: a route's requests admitted per key (a GCRA bucket of burst
 * requests, refilled at the rate), one bucket per key for the whole daemon; every answer of
 * the route says how much is left, a refused request gets 429 with Retry-After. */
#include "config.h"
#include "request.h"

#include <ctype.h>

#include "auth.h"
#include "jwt.h"
#include "ratelimit_redis.h"
#include "resp.h"

/* A worker's connections to Redis, one per address and timeout its loads named. */
#define RL_REDIS_CLIENTS 4
#define RL_REDIS_RETRY_MS 1000

struct rl_redis {
	char *address;
	uint64_t timeout;
	struct resp_client *client;
};

static __thread struct rl_redis rl_redis[RL_REDIS_CLIENTS];

/* A decision asked of Redis for a request: the request, or NULL once it ended. */
struct ratelimit_wait {
	struct request *rq;
};

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
		if (c->rq->auth.api_key != NULL) {
			v.p = c->rq->auth.api_key;
			v.len = strlen(v.p);
		}
	} else if (strncmp(var, "$jwt.", 5) == 0) {
		if (c->rq->auth.claims != NULL && jwt_claim(c->rq->auth.claims, var + 5, &val, &len) !=
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

static struct resp_client *
phase_ratelimit_redis(struct client *c, const struct config *cfg)
{
	struct rl_redis *r;
	size_t i;

	for (i = 0; i < RL_REDIS_CLIENTS && rl_redis[i].address != NULL; i++)
		if (strcmp(rl_redis[i].address, cfg->rate_limits.redis) == 0 &&
		    rl_redis[i].timeout == cfg->rate_limits.redis_timeout)
			return rl_redis[i].client;
	if (i == RL_REDIS_CLIENTS) {    /* the oldest goes */
		r = &rl_redis[0];
		resp_free(r->client);
		free(r->address);
		memmove(&rl_redis[0], &rl_redis[1], sizeof(rl_redis[0]) * (RL_REDIS_CLIENTS - 1));
		i = RL_REDIS_CLIENTS - 1;
	}
	r = &rl_redis[i];
	memset(r, 0, sizeof(*r));
	r->timeout = cfg->rate_limits.redis_timeout;
	if ((r->address = strdup(cfg->rate_limits.redis)) == NULL ||
	    (r->client = resp_new(c->w->base, r->address, (uint32_t)r->timeout,
	    RL_REDIS_RETRY_MS)) == NULL) {
		free(r->address);
		r->address = NULL;
		return NULL;
	}
	return r->client;
}

static void
phase_ratelimit_redis_cb(void *arg, enum resp_status status, const struct ratelimit_answer *ans)
{
	struct ratelimit_wait *wait = arg;
	struct request *rq = wait->rq;
	struct client *c;

	free(wait);
	if (rq == NULL)
		return;         /* the request ended meanwhile */
	rq->rl.wait = NULL;
	rq->rl.decided = 1;
	rq->rl.status = (int)status;
	if (status == RESP_OK)
		rq->rl.ans = *ans;
	c = rq->t.owner;
	request_phase_resume(c);
	proxy_flush(c);
}

/* The bucket's answer: admitted (PHASE_NEXT), or refused with 429. */
static enum phase_result
phase_ratelimit_decided(struct client *c, const struct ratelimit_answer *ans, size_t head_len)
{
	const struct config_route *route = c->rq->route;

	phase_ratelimit_lines(c, ans);
	atomic_fetch_add_explicit(&route->rate_counter->n[ans->admitted ? RL_ALLOWED :
	    RL_LIMITED], 1, memory_order_relaxed);
	if (ans->admitted)
		return PHASE_NEXT;
	evbuffer_drain(client_input(c), head_len);
	client_error(c, GW_RATE_LIMITED, NULL, 0);
	return PHASE_ANSWERED;
}

/* Redis did not decide: on_error allows the request or answers 503. */
static enum phase_result
phase_ratelimit_failed(struct client *c, enum resp_status status, size_t head_len)
{
	const struct config *cfg = client_cfg(c);

	auth_redis_error();
	atomic_fetch_add_explicit(&c->rq->route->rate_counter->n[RL_ERROR], 1,
	    memory_order_relaxed);
	log_debug("route %s: rate_limit: Redis %s: %s (request %s)", c->rq->route->name,
	    cfg->rate_limits.redis, resp_status_name(status), c->rq->request_id);
	if (cfg->rate_limits.redis_on_error == 0)
		return PHASE_NEXT;
	evbuffer_drain(client_input(c), head_len);
	client_error(c, GW_RATE_LIMIT_UNAVAILABLE, NULL, 0);
	return PHASE_ANSWERED;
}

static enum phase_result
phase_ratelimit_run(struct client *c, struct http_request *req, size_t head_len)
{
	const struct config_route *route = c->rq->route;
	const struct route_rate_limit *rl = route->rate_limit;
	struct ratelimit_answer ans;
	struct ratelimit_wait *wait;
	struct resp_client *redis;
	struct http_str key;
	enum resp_status st;
	char scope[32];

	if (c->rq->rl.decided) {
		c->rq->rl.decided = 0;
		if (c->rq->rl.status != RESP_OK)
			return phase_ratelimit_failed(c, (enum resp_status)c->rq->rl.status, head_len);
		ans = c->rq->rl.ans;
		return phase_ratelimit_decided(c, &ans, head_len);
	}
	key = phase_ratelimit_key(c, req, rl->key);
	if (!rl->shared) {
		ratelimit_take(auth_ratelimit_table(), &rl->rule, key.p, key.len, ratelimit_now(),
		    &ans);
		return phase_ratelimit_decided(c, &ans, head_len);
	}
	if ((redis = phase_ratelimit_redis(c, client_cfg(c))) == NULL ||
	    (wait = malloc(sizeof(*wait))) == NULL)
		return phase_ratelimit_failed(c, RESP_CONNECTION, head_len);
	wait->rq = c->rq;
	/* The bucket's name holds the route's name (the same on every instance), or for a
	 * long one its limit's id. */
	if (strlen(route->name) > 64)
		snprintf(scope, sizeof(scope), "id:%08x", (unsigned)rl->rule.id);
	st = ratelimit_redis_take(redis, strlen(route->name) > 64 ? scope : route->name,
	    &rl->rule, key.p, key.len, phase_ratelimit_redis_cb, wait);
	if (st != RESP_OK) {
		free(wait);
		return phase_ratelimit_failed(c, st, head_len);
	}
	c->rq->rl.wait = wait;
	return PHASE_WAIT;
}

void
phase_ratelimit_end(struct request *rq)
{
	if (rq->rl.wait != NULL) {
		rq->rl.wait->rq = NULL;
		rq->rl.wait = NULL;
	}
	rq->rl.decided = 0;
}

void
phase_ratelimit_worker_end(void)
{
	for (size_t i = 0; i < RL_REDIS_CLIENTS; i++) {
		if (rl_redis[i].address == NULL)
			continue;
		resp_free(rl_redis[i].client);
		free(rl_redis[i].address);
		rl_redis[i].address = NULL;
	}
}

const struct request_phase phase_ratelimit = { phase_ratelimit_applies, phase_ratelimit_run };
