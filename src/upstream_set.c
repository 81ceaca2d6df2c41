#include "config.h"
#include "upstream_set.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

static struct upstream_set *
upstream_set_new(const struct config *cfg, size_t upstream, size_t nservers, size_t nnames)
{
	struct upstream_set *set = calloc(1, sizeof(*set));

	if (set == NULL)
		return NULL;
	set->servers = calloc(nservers ? nservers : 1, sizeof(*set->servers));
	set->owned = calloc(nservers ? nservers : 1, 1);
	set->answers = calloc(nnames ? nnames : 1, sizeof(*set->answers));
	if (set->servers == NULL || set->owned == NULL || set->answers == NULL) {
		free(set->servers);
		free(set->owned);
		free(set->answers);
		free(set);
		return NULL;
	}
	atomic_init(&set->refs, 1);
	set->cfg = cfg;
	set->upstream = upstream;
	return set;
}

void
upstream_set_ref(struct upstream_set *set)
{
	atomic_fetch_add(&set->refs, 1);
}

void
upstream_set_unref(struct upstream_set *set)
{
	const struct config_upstream *up;
	size_t i;

	if (set == NULL || atomic_fetch_sub(&set->refs, 1) != 1)
		return;
	up = &set->cfg->upstreams[set->upstream];
	for (i = 0; i < set->nservers; i++)
		if (set->owned[i])
			config_addr_free(&set->servers[i].addr);
	for (i = 0; i < up->nnames; i++)
		resolver_answer_free(&set->answers[i]);
	free(set->servers);
	free(set->owned);
	free(set->answers);
	free(set);
}

int
upstream_sets_init(struct config *cfg)
{
	size_t i, j;

	for (i = 0; i < cfg->nupstreams; i++) {
		struct config_upstream *up = &cfg->upstreams[i];
		struct upstream_set *set = upstream_set_new(cfg, i, up->nservers, up->nnames);

		if (set == NULL)
			return -1;
		/* Shallow copies: the configuration outlives every version of its servers. */
		memcpy(set->servers, up->servers, up->nservers * sizeof(*up->servers));
		set->nservers = up->nservers;
		for (j = 0; j < up->nnames; j++)
			if (resolver_answer_copy(&set->answers[j], &up->names[j].answer) < 0) {
				upstream_set_unref(set);
				return -1;
			}
		up->initial = up->current = set;
	}
	return 0;
}

void
upstream_sets_release(struct config *cfg)
{
	size_t i;

	for (i = 0; i < cfg->nupstreams; i++) {
		upstream_set_unref(cfg->upstreams[i].current);
		cfg->upstreams[i].initial = cfg->upstreams[i].current = NULL;
	}
}

/* The named entry whose servers start at position i of the configured list, or NULL. */
static const struct config_server_name *
upstream_set_entry_at(const struct config_upstream *up, size_t i, size_t *k)
{
	for (*k = 0; *k < up->nnames; (*k)++)
		if (up->names[*k].first == i)
			return &up->names[*k];
	return NULL;
}

struct upstream_set *
upstream_set_renamed(struct config_upstream *up, const struct config_server_name *entry,
    const struct resolver_answer *ans)
{
	struct upstream_set *cur = up->current, *set;
	const struct resolver_answer *use;
	const struct config_server_name *e;
	struct config_server *made;
	size_t i, k, n, total = 0, at = (size_t)(entry - up->names);

	if (resolver_answer_same(&cur->answers[at], ans))
		return NULL;
	/* Servers written as addresses keep their place; each name brings its addresses. */
	for (i = 0; i < up->nservers; i++) {
		if ((e = upstream_set_entry_at(up, i, &k)) == NULL) {
			total += !up->servers[i].addr.name;
			continue;
		}
		total += (k == at ? ans : &cur->answers[k])->naddrs;
	}
	if ((set = upstream_set_new(up->current->cfg, cur->upstream, total, up->nnames)) == NULL)
		goto oom;
	for (i = 0; i < up->nservers; i++) {
		if ((e = upstream_set_entry_at(up, i, &k)) == NULL) {
			if (up->servers[i].addr.name == NULL)
				set->servers[set->nservers++] = up->servers[i];
			continue;
		}
		use = k == at ? ans : &cur->answers[k];
		if (resolver_answer_copy(&set->answers[k], use) < 0)
			goto oom;
		n = config_servers_from_name(e, use, &made);
		memcpy(set->servers + set->nservers, made, n * sizeof(*made));
		memset(set->owned + set->nservers, 1, n);
		set->nservers += n;
		free(made);
	}
	return set;
oom:
	log_errorx("upstream %s: out of memory for its new servers: keeping the old ones",
	    up->name);
	upstream_set_unref(set);
	return NULL;
}
