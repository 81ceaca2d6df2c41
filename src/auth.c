/* What the authentication and rate limit phases keep for the daemon's life: their counters,
 * by route and policy name, and the rate limit table every worker and every load shares. */
#include "auth.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "config.h"
#include "config_parse.h"
#include "metrics.h"

static pthread_mutex_t auth_lock = PTHREAD_MUTEX_INITIALIZER;
static struct auth_counter *auth_counters;
static _Atomic(struct ratelimit *) auth_table;   /* made once, kept until exit */
static atomic_uint_fast64_t auth_jwks_fetches[AUTH_JWKS_N];
static atomic_uint_fast64_t auth_redis_errors;

static const char *const auth_outcome_names[] = {
#define AUTH_OUTCOME_NAME(id, name) name,
	AUTH_OUTCOMES(AUTH_OUTCOME_NAME)
#undef AUTH_OUTCOME_NAME
};
static const char *const auth_rl_names[] = {
#define AUTH_NAME(id, name) name,
	RL_OUTCOMES(AUTH_NAME)
};
static const char *const auth_jwks_names[] = {
	AUTH_JWKS_OUTCOMES(AUTH_NAME)
#undef AUTH_NAME
};

static int
auth_same(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

struct auth_counter *
auth_counter_get(const char *route, const char *policy)
{
	struct auth_counter *c, **tail;

	pthread_mutex_lock(&auth_lock);
	for (tail = &auth_counters; (c = *tail) != NULL; tail = &c->next)
		if (strcmp(c->route, route) == 0 && auth_same(c->policy, policy))
			break;
	if (c == NULL && (c = calloc(1, sizeof(*c))) != NULL) {
		c->route = strdup(route);
		c->policy = policy != NULL ? strdup(policy) : NULL;
		if (c->route == NULL || (policy != NULL && c->policy == NULL))
			config_oom();
		*tail = c;
	}
	pthread_mutex_unlock(&auth_lock);
	if (c == NULL)
		config_oom();
	return c;
}

struct ratelimit *
auth_ratelimit_table(void)
{
	struct ratelimit *t = atomic_load_explicit(&auth_table, memory_order_acquire);

	if (t != NULL)
		return t;
	pthread_mutex_lock(&auth_lock);
	if ((t = atomic_load(&auth_table)) == NULL) {
		if ((t = ratelimit_new(AUTH_RATELIMIT_KEYS)) == NULL)
			config_oom();
		atomic_store_explicit(&auth_table, t, memory_order_release);
	}
	pthread_mutex_unlock(&auth_lock);
	return t;
}

void
auth_jwks_fetched(enum auth_jwks_outcome outcome)
{
	atomic_fetch_add_explicit(&auth_jwks_fetches[outcome], 1, memory_order_relaxed);
}

void
auth_redis_error(void)
{
	atomic_fetch_add_explicit(&auth_redis_errors, 1, memory_order_relaxed);
}

static unsigned long long
auth_read(atomic_uint_fast64_t *n)
{
	return (unsigned long long)atomic_load_explicit(n, memory_order_relaxed);
}

void
auth_metrics_write(struct evbuffer *out)
{
	const char *name;
	struct auth_counter *c;
	unsigned i;

	pthread_mutex_lock(&auth_lock);
	metrics_write_head(out, METRIC_AUTH_REQUESTS);
	name = metrics_name(METRIC_AUTH_REQUESTS);
	for (c = auth_counters; c != NULL; c = c->next)
		for (i = 0; c->policy != NULL && i < AUTH_OUTCOME_N; i++) {
			evbuffer_add_printf(out, "%s{route=\"", name);
			metrics_write_label(out, c->route);
			evbuffer_add_printf(out, "\",policy=\"");
			metrics_write_label(out, c->policy);
			evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", auth_outcome_names[i],
			    auth_read(&c->n[i]));
		}
	metrics_write_head(out, METRIC_RATELIMIT_REQUESTS);
	name = metrics_name(METRIC_RATELIMIT_REQUESTS);
	for (c = auth_counters; c != NULL; c = c->next)
		for (i = 0; c->policy == NULL && i < RL_OUTCOME_N; i++) {
			evbuffer_add_printf(out, "%s{route=\"", name);
			metrics_write_label(out, c->route);
			evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", auth_rl_names[i],
			    auth_read(&c->n[i]));
		}
	pthread_mutex_unlock(&auth_lock);
	metrics_write_head(out, METRIC_JWKS_FETCHES);
	for (i = 0; i < AUTH_JWKS_N; i++)
		evbuffer_add_printf(out, "%s{outcome=\"%s\"} %llu\n",
		    metrics_name(METRIC_JWKS_FETCHES), auth_jwks_names[i],
		    auth_read(&auth_jwks_fetches[i]));
	metrics_write_head(out, METRIC_REDIS_ERRORS);
	evbuffer_add_printf(out, "%s %llu\n", metrics_name(METRIC_REDIS_ERRORS),
	    auth_read(&auth_redis_errors));
}
