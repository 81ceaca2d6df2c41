#include "config.h"
#include "upstream_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "upstream_set.h"

/* Ejections grow by fail_timeout each time a server fails its trial, up to this (or
 * fail_timeout when that is longer), as Envoy's max_ejection_time. */
#define EJECTION_MAX_MS (300 * 1000)

const char *const upstream_retry_reason_names[UPSTREAM_RETRY__COUNT] = {
#define X(id, name) name,
	UPSTREAM_RETRY_REASONS(X)
#undef X
};

/* Main thread only; entries live until exit so that pointers handed out stay valid. */
static struct upstream_server_state **servers;
static size_t nservers, servers_cap;
static struct upstream_group_state **groups;
static size_t ngroups, groups_cap;

static int
grow(void *arrayp, size_t n, size_t *cap)
{
	void **array = arrayp, *p;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	if ((p = realloc(*array, ncap * sizeof(void *))) == NULL)
		return -1;
	*array = p;
	*cap = ncap;
	return 0;
}

static struct upstream_group_state *
group_of(const char *name)
{
	struct upstream_group_state *g;
	size_t i;

	for (i = 0; i < ngroups; i++)
		if (strcmp(groups[i]->name, name) == 0)
			return groups[i];
	if (grow(&groups, ngroups, &groups_cap) < 0 || (g = calloc(1, sizeof(*g))) == NULL)
		return NULL;
	if ((g->name = strdup(name)) == NULL) {
		free(g);
		return NULL;
	}
	return groups[ngroups++] = g;
}

static struct upstream_server_state *
server_of(const char *upstream, const char *address)
{
	struct upstream_server_state *st;
	size_t i;

	for (i = 0; i < nservers; i++)
		if (strcmp(servers[i]->upstream, upstream) == 0 &&
		    strcmp(servers[i]->address, address) == 0)
			return servers[i];
	if (grow(&servers, nservers, &servers_cap) < 0 || (st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	st->upstream = strdup(upstream);
	st->address = strdup(address);
	if (st->upstream == NULL || st->address == NULL) {
		free(st->upstream);
		free(st->address);
		free(st);
		return NULL;
	}
	return servers[nservers++] = st;
}

int
upstream_state_bind(struct config *cfg)
{
	size_t i;

	for (i = 0; i < nservers; i++)
		servers[i]->configured = 0;
	for (i = 0; i < cfg->nupstreams; i++) {
		struct config_upstream *up = &cfg->upstreams[i];
		if ((up->state = group_of(up->name)) == NULL ||
		    upstream_state_bind_servers(up, up->servers, up->nservers) < 0)
			return -1;
	}
	return 0;
}

int
upstream_state_bind_servers(struct config_upstream *up, struct config_server *list, size_t n)
{
	size_t j;

	for (j = 0; j < n; j++) {
		if ((list[j].state = server_of(up->name, list[j].addr.text)) == NULL)
			return -1;
		list[j].state->configured = 1;
	}
	return 0;
}

void
upstream_state_configured(const struct config *cfg)
{
	const struct upstream_set *set;
	size_t i, j;

	for (i = 0; i < nservers; i++)
		servers[i]->configured = 0;
	for (i = 0; i < cfg->nupstreams; i++) {
		set = cfg->upstreams[i].current;
		for (j = 0; set != NULL && j < set->nservers; j++)
			set->servers[j].state->configured = 1;
	}
}

void
upstream_state_free_all(void)
{
	size_t i;

	for (i = 0; i < nservers; i++) {
		free(servers[i]->upstream);
		free(servers[i]->address);
		free(servers[i]);
	}
	for (i = 0; i < ngroups; i++) {
		free(groups[i]->name);
		free(groups[i]);
	}
	free(servers);
	free(groups);
	servers = NULL;
	groups = NULL;
	nservers = servers_cap = ngroups = groups_cap = 0;
}

size_t
upstream_state_servers(struct upstream_server_state ***out)
{
	*out = servers;
	return nservers;
}

size_t
upstream_state_groups(struct upstream_group_state ***out)
{
	*out = groups;
	return ngroups;
}

uint64_t
upstream_state_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
upstream_state_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

enum upstream_availability
upstream_server_availability(struct upstream_server_state *st, uint64_t now)
{
	uint64_t until = atomic_load_explicit(&st->ejected_until, memory_order_relaxed);
	uint64_t not_before = atomic_load_explicit(&st->not_before, memory_order_relaxed);

	if (atomic_load_explicit(&st->check_down, memory_order_relaxed) ||
	    (not_before != 0 && now < not_before))
		return UPSTREAM_OUT;
	if (until == 0)
		return UPSTREAM_IN_SERVICE;
	if (now < until || atomic_load_explicit(&st->trial, memory_order_relaxed))
		return UPSTREAM_OUT;
	return UPSTREAM_TRIAL;
}

int
upstream_server_claim_trial(struct upstream_server_state *st)
{
	int expected = 0;

	return atomic_compare_exchange_strong(&st->trial, &expected, 1);
}

static void
server_back_in_service(const struct config_upstream *up, const struct config_server *srv,
    const char *why)
{
	struct upstream_server_state *st = srv->state;

	atomic_store(&st->fails, 0);
	atomic_store(&st->ejections, 0);
	if (atomic_exchange(&st->ejected_until, 0) != 0)
		log_info("upstream %s: server %s back in service %s", up->name, srv->addr.text, why);
}

void
upstream_server_succeeded(const struct config_upstream *up, const struct config_server *srv,
    int trial)
{
	struct upstream_server_state *st = srv->state;

	if (atomic_load_explicit(&st->fails, memory_order_relaxed) != 0) {
		atomic_store_explicit(&st->fails, 0, memory_order_relaxed);
		atomic_store_explicit(&st->eject_refused, 0, memory_order_relaxed);
	}
	if (trial) {
		server_back_in_service(up, srv, "after a successful trial request");
		atomic_store(&st->trial, 0);
	}
}

/* A duration as the configuration writes it: "10s", or "1500ms" when not whole seconds. */
static const char *
duration_text(uint64_t ms, char text[32])
{
	if (ms % 1000 == 0)
		snprintf(text, 32, "%llus", (unsigned long long)(ms / 1000));
	else
		snprintf(text, 32, "%llums", (unsigned long long)ms);
	return text;
}

static const char *
fail_name(unsigned fail, unsigned n)
{
	switch (fail) {
	case FAIL_CONNECT: return n == 1 ? "connect error" : "connect errors";
	case FAIL_TIMEOUT: return n == 1 ? "timeout" : "timeouts";
	case FAIL_RESET: return n == 1 ? "reset" : "resets";
	case FAIL_INVALID: return n == 1 ? "invalid answer" : "invalid answers";
	default: return n == 1 ? "error status" : "error statuses";
	}
}

static void
server_eject(const struct config_upstream *up, const struct config_server *srv, unsigned fails,
    unsigned fail, int trial, uint64_t now, size_t ejected, size_t total)
{
	struct upstream_server_state *st = srv->state;
	uint64_t cap = up->fail_timeout > EJECTION_MAX_MS ? up->fail_timeout : EJECTION_MAX_MS;
	uint64_t expected = 0, ms;
	unsigned n;
	char text[32];

	/* max_ejected_percent keeps a share in service; one server may always go.  Said once
	 * for a run of failures: each further failure would say it again. */
	if (!trial && ejected != 0 &&
	    (ejected + 1) * 100 > (size_t)up->max_ejected_percent * total) {
		if (!atomic_exchange(&st->eject_refused, 1))
			log_warnx("upstream %s: server %s not ejected after %u %s: "
			    "max_ejected_percent %u keeps it in service", up->name, srv->addr.text,
			    fails, fail_name(fail, fails), up->max_ejected_percent);
		return;
	}
	atomic_store(&st->eject_refused, 0);
	n = atomic_fetch_add(&st->ejections, 1) + 1;
	ms = up->fail_timeout * n < cap ? up->fail_timeout * n : cap;
	if (trial) {
		atomic_store(&st->ejected_until, now + ms);
		atomic_store(&st->trial, 0);
		log_warnx("upstream %s: server %s failed its trial request (%s): ejected for %s",
		    up->name, srv->addr.text, fail_name(fail, 1), duration_text(ms, text));
	} else if (atomic_compare_exchange_strong(&st->ejected_until, &expected, now + ms)) {
		log_warnx("upstream %s: server %s ejected for %s after %u %s", up->name,
		    srv->addr.text, duration_text(ms, text), fails, fail_name(fail, fails));
	} else {
		atomic_fetch_sub(&st->ejections, 1);   /* another worker ejected it first */
		return;
	}
	atomic_fetch_add_explicit(&st->ejections_total, 1, memory_order_relaxed);
	atomic_store(&st->fails, 0);
}

void
upstream_server_failed(const struct config_upstream *up, const struct config_server *srv,
    unsigned fail, int trial, uint64_t now, size_t ejected, size_t total)
{
	struct upstream_server_state *st = srv->state;
	unsigned fails;

	if (!(up->fail_on & fail)) {
		upstream_server_no_verdict(srv, trial);
		return;
	}
	atomic_store_explicit(&st->last_fail, fail, memory_order_relaxed);
	if (trial) {
		server_eject(up, srv, 1, fail, 1, now, ejected, total);
		return;
	}
	if (srv->max_fails == 0)
		return;
	/* A run of failures counts only within fail_timeout of its first. */
	fails = atomic_fetch_add(&st->fails, 1) + 1;
	if (fails == 1 || now - atomic_load(&st->fail_since) > up->fail_timeout) {
		atomic_store(&st->fail_since, now);
		atomic_store(&st->fails, 1);
		fails = 1;
	}
	if (fails >= srv->max_fails)
		server_eject(up, srv, fails, fail, 0, now, ejected, total);
}

void
upstream_server_no_verdict(const struct config_server *srv, int trial)
{
	if (trial)
		atomic_store(&srv->state->trial, 0);
}

void
upstream_server_not_before(const struct config_server *srv, uint64_t until)
{
	atomic_store_explicit(&srv->state->not_before, until, memory_order_relaxed);
}

void
upstream_server_check_verdict(const struct config_upstream *up, const struct config_server *srv,
    int up_now, const char *why)
{
	struct upstream_server_state *st = srv->state;

	if (up_now) {
		if (atomic_exchange(&st->check_down, 0))
			log_info("upstream %s: server %s passed %u health check%s: back in service",
			    up->name, srv->addr.text, up->health->passes,
			    up->health->passes == 1 ? "" : "s");
		/* Passing checks also end an ejection, as Envoy does. */
		server_back_in_service(up, srv, "after passing health checks");
	} else if (!atomic_exchange(&st->check_down, 1)) {
		log_warnx("upstream %s: server %s failed %u health check%s (%s): out of service",
		    up->name, srv->addr.text, up->health->fails, up->health->fails == 1 ? "" : "s",
		    why);
	}
}

void
upstream_server_unchecked(const struct config_upstream *up, const struct config_server *srv)
{
	if (atomic_exchange(&srv->state->check_down, 0))
		log_info("upstream %s: server %s back in service: no health checks any more",
		    up->name, srv->addr.text);
}

int
upstream_retry_begin(const struct config_upstream *up, enum upstream_retry_reason why,
    int budgeted)
{
	struct upstream_group_state *g = up->state;
	unsigned requests = atomic_load_explicit(&g->requests, memory_order_relaxed);
	unsigned allowed = (unsigned)((uint64_t)requests * up->retry_budget / 100);

	if (!budgeted) {
		atomic_fetch_add_explicit(&g->retries_total[why], 1, memory_order_relaxed);
		return 1;
	}
	if (allowed < up->retry_budget_min)
		allowed = up->retry_budget_min;
	if (atomic_fetch_add(&g->retries, 1) >= allowed) {
		atomic_fetch_sub(&g->retries, 1);
		atomic_fetch_add_explicit(&g->budget_exhausted_total, 1, memory_order_relaxed);
		return 0;
	}
	atomic_fetch_add_explicit(&g->retries_total[why], 1, memory_order_relaxed);
	return 1;
}

void
upstream_retry_end(const struct config_upstream *up)
{
	atomic_fetch_sub(&up->state->retries, 1);
}
