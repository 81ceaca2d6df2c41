#include "config.h"
#include "metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "auth.h"
#include "close_reason.h"
#include "errors.h"
#include "server.h"
#include "upstream_state.h"

/* A worker is the only writer of its counters: a relaxed load and store (a plain add on
 * x86-64, no lock prefix) keeps the main thread's concurrent reads well defined. */
#define COUNT(p, n) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (n), \
	__ATOMIC_RELAXED)
#define READ(p) __atomic_load_n((p), __ATOMIC_RELAXED)

#define CODE_MIN 100
#define NCODES 500                      /* 100..599 */
static const uint64_t bucket_us[] = {
	5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000
};
#define NBUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]) + 1)    /* the last is +Inf */
static const uint64_t batch_bounds[] = { 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000 };
#define NBATCH (sizeof(batch_bounds) / sizeof(batch_bounds[0]) + 1)

struct metrics_route {
	uint64_t codes[NCODES];
	uint64_t buckets[NBUCKETS];     /* not cumulative */
	uint64_t duration_us;
	uint64_t envelope[2][METRICS_ENVELOPE__COUNT][METRICS_REASON__COUNT];    /* direction, result, reason */
	uint64_t events[METRICS_EVENTS__COUNT];  /* events of streamed answers, by result */
	uint64_t streamed[METRICS_STREAMED__COUNT];     /* bodies rewritten as they streamed */
	uint64_t batch_buckets[NBATCH]; /* JSON-RPC batch sizes, not cumulative */
	uint64_t batch_sum;
};

struct metrics_server {
	uint64_t outcomes[METRICS_OUTCOME__COUNT];
	int64_t active, idle;
};

struct metrics_backend {
	uint64_t outcomes[METRICS_BACKEND__COUNT];
	uint64_t buckets[NBUCKETS];     /* not cumulative */
	uint64_t duration_us;
};

/* A method of a JSON-RPC route. */
struct metrics_rpc {
	uint64_t outcomes[METRICS_JSONRPC__COUNT];
};

/* Series live in blocks the main thread allocates before publishing the ids they hold. */
#define ROUTE_BLOCK 16
#define SERVER_BLOCK 64
#define BACKEND_BLOCK 64
#define RPC_BLOCK 64
#define MAX_BLOCKS 1024

struct metrics_worker {
	int64_t clients;                /* open client connections */
	uint64_t accepted;              /* client connections accepted */
	uint64_t closes[CLIENT_CLOSE__COUNT];   /* client connections closed, by reason */
	uint64_t h2[METRICS_H2__COUNT];
	int64_t clients_active;         /* of those, serving a request */
	int64_t tunnels;                /* open tunnels */
	uint64_t tunnel_closes[TUNNEL_CLOSE__COUNT];
	uint64_t tunnel_bytes[2];       /* to the upstream, to the client */
	uint64_t bytes_spliced, bytes_copied;
	struct metrics_route *routes[MAX_BLOCKS];
	struct metrics_server *servers[MAX_BLOCKS];
	struct metrics_backend *backends[MAX_BLOCKS];
	struct metrics_rpc *rpcs[MAX_BLOCKS];
};

struct series_server {
	char *upstream;
	char *address;
};

struct series_backend {
	char *route;
	char *backend;
};

struct series_rpc {
	char *route;
	char *method;
};

static struct metrics_worker *workers;
static unsigned nworkers;
/* Main thread only: the label values behind each series id.  Route id 0 is "no route". */
static char **route_names;
static unsigned char *route_rpc;        /* 1: a JSON-RPC route (it has a batch histogram) */
static unsigned nroutes, route_cap;
static struct series_server *servers;
static unsigned nservers, server_cap;
static struct series_backend *backends;
static unsigned nbackends, backend_cap;
static struct series_rpc *rpcs;
static unsigned nrpcs, rpc_cap;
static uint64_t reloads[2];             /* failed, ok */
/* Main thread only: lookups of server names, by name. */
struct series_name {
	char *name;
	uint64_t lookups[2];            /* success, failure */
};
static struct series_name *names;
static unsigned nnames, name_cap;
static double start_time;

static const char *const reason_names[] = {
#define X(id, name) name,
	METRICS_ENVELOPE_REASONS(X)
#undef X
};

static const char *const outcome_names[] = {
#define X(id, name) name,
	METRICS_OUTCOMES(X)
#undef X
};

const char *const metrics_backend_outcome_names[METRICS_BACKEND__COUNT] = {
#define X(id, name) name,
	METRICS_BACKEND_OUTCOMES(X)
#undef X
};

static const char *const rpc_outcome_names[METRICS_JSONRPC__COUNT] = {
#define X(id, name) name,
	METRICS_JSONRPC_OUTCOMES(X)
#undef X
};

int
metrics_init(unsigned n)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	start_time = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
	if ((workers = calloc(n ? n : 1, sizeof(*workers))) == NULL)
		return -1;
	nworkers = n ? n : 1;
	return 0;
}

void
metrics_free(void)
{
	unsigned i, b;

	for (i = 0; i < nworkers; i++)
		for (b = 0; b < MAX_BLOCKS; b++) {
			free(workers[i].routes[b]);
			free(workers[i].servers[b]);
			free(workers[i].backends[b]);
			free(workers[i].rpcs[b]);
		}
	free(workers);
	workers = NULL;
	nworkers = 0;
	for (i = 0; i < nroutes; i++)
		free(route_names[i]);
	free(route_names);
	route_names = NULL;
	free(route_rpc);
	route_rpc = NULL;
	nroutes = route_cap = 0;
	for (i = 0; i < nservers; i++) {
		free(servers[i].upstream);
		free(servers[i].address);
	}
	free(servers);
	servers = NULL;
	nservers = server_cap = 0;
	for (i = 0; i < nbackends; i++) {
		free(backends[i].route);
		free(backends[i].backend);
	}
	free(backends);
	backends = NULL;
	nbackends = backend_cap = 0;
	for (i = 0; i < nrpcs; i++) {
		free(rpcs[i].route);
		free(rpcs[i].method);
	}
	free(rpcs);
	rpcs = NULL;
	nrpcs = rpc_cap = 0;
	for (i = 0; i < nnames; i++)
		free(names[i].name);
	free(names);
	names = NULL;
	nnames = name_cap = 0;
}

enum metrics_series { SERIES_ROUTE, SERIES_SERVER, SERIES_BACKEND, SERIES_RPC };

/* Make sure every worker has the block holding series id of its kind. */
static int
metrics_blocks(unsigned id, enum metrics_series kind)
{
	static const unsigned per[] = { ROUTE_BLOCK, SERVER_BLOCK, BACKEND_BLOCK, RPC_BLOCK };
	static const size_t size[] = { sizeof(struct metrics_route),
	    sizeof(struct metrics_server), sizeof(struct metrics_backend),
	    sizeof(struct metrics_rpc) };
	unsigned b = id / per[kind], i;
	void **block;

	if (b >= MAX_BLOCKS)
		return -1;
	for (i = 0; i < nworkers; i++) {
		block = kind == SERIES_ROUTE ? (void **)&workers[i].routes[b] :
		    kind == SERIES_SERVER ? (void **)&workers[i].servers[b] :
		    kind == SERIES_BACKEND ? (void **)&workers[i].backends[b] :
		    (void **)&workers[i].rpcs[b];
		if (*block == NULL && (*block = calloc(per[kind], size[kind])) == NULL)
			return -1;
	}
	return 0;
}

static int
metrics_route_id(const char *name, unsigned *id)
{
	char **p;
	unsigned i;

	for (i = 0; i < nroutes; i++)
		if (strcmp(route_names[i], name) == 0) {
			*id = i;
			return 0;
		}
	if (nroutes == route_cap) {
		unsigned char *rp;

		if ((p = realloc(route_names, (route_cap ? route_cap * 2 : 16) * sizeof(*p))) == NULL)
			return -1;
		route_names = p;
		if ((rp = realloc(route_rpc, route_cap ? route_cap * 2 : 16)) == NULL)
			return -1;
		route_rpc = rp;
		route_cap = route_cap ? route_cap * 2 : 16;
	}
	if (metrics_blocks(nroutes, SERIES_ROUTE) < 0 ||
	    (route_names[nroutes] = strdup(name)) == NULL)
		return -1;
	route_rpc[nroutes] = 0;
	*id = nroutes++;
	return 0;
}

static int
metrics_server_id(const char *upstream, const char *address, unsigned *id)
{
	struct series_server *p;
	unsigned i;

	for (i = 0; i < nservers; i++)
		if (strcmp(servers[i].upstream, upstream) == 0 &&
		    strcmp(servers[i].address, address) == 0) {
			*id = i;
			return 0;
		}
	if (nservers == server_cap) {
		server_cap = server_cap ? server_cap * 2 : 16;
		if ((p = realloc(servers, server_cap * sizeof(*p))) == NULL)
			return -1;
		servers = p;
	}
	if (metrics_blocks(nservers, SERIES_SERVER) < 0)
		return -1;
	servers[nservers].upstream = strdup(upstream);
	servers[nservers].address = strdup(address);
	if (servers[nservers].upstream == NULL || servers[nservers].address == NULL) {
		free(servers[nservers].upstream);
		free(servers[nservers].address);
		return -1;
	}
	*id = nservers++;
	return 0;
}

static int
metrics_backend_id(const char *route, const char *backend, unsigned *id)
{
	struct series_backend *p;
	unsigned i;

	for (i = 0; i < nbackends; i++)
		if (strcmp(backends[i].route, route) == 0 &&
		    strcmp(backends[i].backend, backend) == 0) {
			*id = i;
			return 0;
		}
	if (nbackends == backend_cap) {
		backend_cap = backend_cap ? backend_cap * 2 : 16;
		if ((p = realloc(backends, backend_cap * sizeof(*p))) == NULL)
			return -1;
		backends = p;
	}
	if (metrics_blocks(nbackends, SERIES_BACKEND) < 0)
		return -1;
	backends[nbackends].route = strdup(route);
	backends[nbackends].backend = strdup(backend);
	if (backends[nbackends].route == NULL || backends[nbackends].backend == NULL) {
		free(backends[nbackends].route);
		free(backends[nbackends].backend);
		return -1;
	}
	*id = nbackends++;
	return 0;
}

static int
metrics_rpc_id(const char *route, const char *method, unsigned *id)
{
	struct series_rpc *p;
	unsigned i;

	for (i = 0; i < nrpcs; i++)
		if (strcmp(rpcs[i].route, route) == 0 && strcmp(rpcs[i].method, method) == 0) {
			*id = i;
			return 0;
		}
	if (nrpcs == rpc_cap) {
		rpc_cap = rpc_cap ? rpc_cap * 2 : 16;
		if ((p = realloc(rpcs, rpc_cap * sizeof(*p))) == NULL)
			return -1;
		rpcs = p;
	}
	if (metrics_blocks(nrpcs, SERIES_RPC) < 0)
		return -1;
	rpcs[nrpcs].route = strdup(route);
	rpcs[nrpcs].method = strdup(method);
	if (rpcs[nrpcs].route == NULL || rpcs[nrpcs].method == NULL) {
		free(rpcs[nrpcs].route);
		free(rpcs[nrpcs].method);
		return -1;
	}
	*id = nrpcs++;
	return 0;
}

/* The series of a JSON-RPC route's method labels, "other" last. */
static int
metrics_bind_jsonrpc(struct config_route *route)
{
	struct config_jsonrpc *jc = route->jsonrpc;
	size_t i;

	route_rpc[route->metrics_id] = 1;
	for (i = 0; i <= jc->nlabels; i++)
		if (metrics_rpc_id(route->name, i < jc->nlabels ? jc->labels[i] : "other",
		    &jc->metrics_ids[i]) < 0)
			return -1;
	return 0;
}

int
metrics_bind(struct config *cfg)
{
	unsigned none;
	size_t i, j;

	if (workers == NULL)
		return 0;
	if (metrics_route_id("-", &none) < 0)
		return -1;
	for (i = 0; i < cfg->nroutes; i++) {
		if (metrics_route_id(cfg->routes[i].name, &cfg->routes[i].metrics_id) < 0)
			return -1;
		if (cfg->routes[i].jsonrpc != NULL && metrics_bind_jsonrpc(&cfg->routes[i]) < 0)
			return -1;
		for (j = 0; j < cfg->routes[i].nbackends; j++)
			if (metrics_backend_id(cfg->routes[i].name, cfg->routes[i].backends[j].name,
			    &cfg->routes[i].backends[j].metrics_id) < 0)
				return -1;
	}
	for (i = 0; i < cfg->nupstreams; i++)
		if (metrics_bind_servers(cfg->upstreams[i].name, cfg->upstreams[i].servers,
		    cfg->upstreams[i].nservers) < 0)
			return -1;
	return 0;
}

int
metrics_bind_servers(const char *upstream, struct config_server *list, size_t n)
{
	size_t j;

	for (j = 0; workers != NULL && j < n; j++)
		if (metrics_server_id(upstream, list[j].addr.text, &list[j].metrics_id) < 0)
			return -1;
	return 0;
}

/* --- worker side ----------------------------------------------------------------------- */

static struct metrics_worker *
metrics_of(const struct worker *w)
{
	return workers != NULL && w->id < nworkers ? &workers[w->id] : NULL;
}

static struct metrics_route *
metrics_route_of(struct metrics_worker *mw, const struct config_route *route)
{
	unsigned id = route != NULL ? route->metrics_id : 0;

	if (mw->routes[id / ROUTE_BLOCK] == NULL)
		return NULL;
	return &mw->routes[id / ROUTE_BLOCK][id % ROUTE_BLOCK];
}

static struct metrics_server *
metrics_server_of(struct metrics_worker *mw, const struct config_server *server)
{
	unsigned id = server->metrics_id;

	if (mw->servers[id / SERVER_BLOCK] == NULL)
		return NULL;
	return &mw->servers[id / SERVER_BLOCK][id % SERVER_BLOCK];
}

static enum metrics_outcome
metrics_outcome(int status, int gateway_error)
{
	switch (gateway_error) {
	case -1:
		return status == 499 ? METRICS_OUTCOME_CLIENT_ABORT : METRICS_OUTCOME_OK;
	case GW_UPSTREAM_UNAVAILABLE: return METRICS_OUTCOME_UNAVAILABLE;
	case GW_UPSTREAM_INVALID: return METRICS_OUTCOME_INVALID;
	case GW_UPSTREAM_TIMEOUT: return METRICS_OUTCOME_TIMEOUT;
	case GW_UPSTREAM_TLS: return METRICS_OUTCOME_TLS;
	default: return METRICS_OUTCOME_ERROR;
	}
}

static size_t
metrics_bucket(uint64_t us)
{
	size_t b;

	for (b = 0; b < NBUCKETS - 1 && us > bucket_us[b]; b++)
		;
	return b;
}

void
metrics_upstream_request(struct worker *w, const struct config_server *server, int status,
    int gateway_error)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_server *ms;

	if (mw != NULL && server != NULL && (ms = metrics_server_of(mw, server)) != NULL)
		COUNT(&ms->outcomes[metrics_outcome(status, gateway_error)], 1);
}

void
metrics_request(struct worker *w, const struct config_route *route,
    const struct config_server *server, int status, int gateway_error,
    const struct timespec *start, const struct timespec *now)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;
	int64_t us;

	if (mw == NULL)
		return;
	if ((mr = metrics_route_of(mw, route)) != NULL) {
		us = (int64_t)(now->tv_sec - start->tv_sec) * 1000000 +
		    (now->tv_nsec - start->tv_nsec) / 1000;
		if (us < 0)
			us = 0;
		COUNT(&mr->buckets[metrics_bucket((uint64_t)us)], 1);
		COUNT(&mr->duration_us, (uint64_t)us);
		if (status >= CODE_MIN && status < CODE_MIN + NCODES)
			COUNT(&mr->codes[status - CODE_MIN], 1);
	}
	metrics_upstream_request(w, server, status, gateway_error);
}

void
metrics_backend(struct worker *w, const struct config_backend *backend,
    enum metrics_backend_outcome outcome, int sent, uint64_t us)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_backend *mb;
	unsigned id = backend->metrics_id;

	if (mw == NULL || mw->backends[id / BACKEND_BLOCK] == NULL)
		return;
	mb = &mw->backends[id / BACKEND_BLOCK][id % BACKEND_BLOCK];
	COUNT(&mb->outcomes[outcome], 1);
	if (sent) {
		COUNT(&mb->buckets[metrics_bucket(us)], 1);
		COUNT(&mb->duration_us, us);
	}
}

void
metrics_jsonrpc(struct worker *w, const struct config_route *route, unsigned label,
    enum metrics_jsonrpc_outcome outcome, uint64_t n)
{
	struct metrics_worker *mw = metrics_of(w);
	unsigned id;

	if (mw == NULL || label > route->jsonrpc->nlabels)
		return;
	id = route->jsonrpc->metrics_ids[label];
	if (mw->rpcs[id / RPC_BLOCK] != NULL)
		COUNT(&mw->rpcs[id / RPC_BLOCK][id % RPC_BLOCK].outcomes[outcome], n);
}

void
metrics_jsonrpc_batch(struct worker *w, const struct config_route *route, uint64_t n)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;
	size_t b;

	if (mw == NULL || (mr = metrics_route_of(mw, route)) == NULL)
		return;
	for (b = 0; b < NBATCH - 1 && n > batch_bounds[b]; b++)
		;
	COUNT(&mr->batch_buckets[b], 1);
	COUNT(&mr->batch_sum, n);
}

void
metrics_upstream_conns(struct worker *w, const struct config_server *server, int d_active,
    int d_idle)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_server *ms;

	if (mw == NULL || (ms = metrics_server_of(mw, server)) == NULL)
		return;
	COUNT(&ms->active, d_active);
	COUNT(&ms->idle, d_idle);
}

void
metrics_client(struct worker *w, int delta)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw == NULL)
		return;
	COUNT(&mw->clients, delta);
	if (delta > 0)
		COUNT(&mw->accepted, 1);
}

void
metrics_client_closed(struct worker *w, int why)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL && why >= 0 && why < CLIENT_CLOSE__COUNT)
		COUNT(&mw->closes[why], 1);
}

void
metrics_h2(struct worker *w, enum metrics_h2 what)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL)
		COUNT(&mw->h2[what], 1);
}

void
metrics_tunnel(struct worker *w, int delta)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL)
		COUNT(&mw->tunnels, delta);
}

void
metrics_tunnel_closed(struct worker *w, int why)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL && why >= 0 && why < TUNNEL_CLOSE__COUNT)
		COUNT(&mw->tunnel_closes[why], 1);
}

void
metrics_tunnel_bytes(struct worker *w, int to_client, uint64_t n)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL)
		COUNT(&mw->tunnel_bytes[to_client != 0], n);
}

void
metrics_client_active(struct worker *w, int delta)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw != NULL)
		COUNT(&mw->clients_active, delta);
}

void
metrics_envelope(struct worker *w, const struct config_route *route,
    enum metrics_direction direction, enum metrics_envelope_result result,
    enum metrics_envelope_reason reason)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;

	if (mw != NULL && (mr = metrics_route_of(mw, route)) != NULL)
		COUNT(&mr->envelope[direction & 1][result % METRICS_ENVELOPE__COUNT][reason % METRICS_REASON__COUNT], 1);
}

void
metrics_events(struct worker *w, const struct config_route *route,
    enum metrics_events_result result, uint64_t n)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;

	if (n != 0 && mw != NULL && (mr = metrics_route_of(mw, route)) != NULL)
		COUNT(&mr->events[result % METRICS_EVENTS__COUNT], n);
}

void
metrics_streamed(struct worker *w, const struct config_route *route,
    enum metrics_streamed_outcome outcome)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;

	if (mw != NULL && (mr = metrics_route_of(mw, route)) != NULL)
		COUNT(&mr->streamed[outcome % METRICS_STREAMED__COUNT], 1);
}

void
metrics_bytes(struct worker *w, uint64_t spliced, uint64_t copied)
{
	struct metrics_worker *mw = metrics_of(w);

	if (mw == NULL)
		return;
	COUNT(&mw->bytes_spliced, spliced);
	COUNT(&mw->bytes_copied, copied);
}

/* --- main thread side ------------------------------------------------------------------- */

void
metrics_reload(int ok)
{
	reloads[ok ? 1 : 0]++;
}

void
metrics_resolver_lookup(const char *name, int ok)
{
	struct series_name *p;
	unsigned i;

	for (i = 0; i < nnames; i++)
		if (strcmp(names[i].name, name) == 0)
			break;
	if (i == nnames) {
		if (nnames == name_cap) {
			if ((p = realloc(names, (name_cap ? name_cap * 2 : 8) * sizeof(*p))) == NULL)
				return;
			names = p;
			name_cap = name_cap ? name_cap * 2 : 8;
		}
		if ((names[i].name = strdup(name)) == NULL)
			return;
		names[i].lookups[0] = names[i].lookups[1] = 0;
		nnames++;
	}
	names[i].lookups[ok ? 0 : 1]++;
}

static const char *const metric_names[] = {
#define X(id, name, type, help, labels) name,
	METRICS_TABLE(X)
#undef X
};

static void
metrics_head(struct evbuffer *out, enum metrics_id id)
{
	static const char *const types[] = {
#define X(id, name, type, help, labels) type,
		METRICS_TABLE(X)
#undef X
	};
	static const char *const helps[] = {
#define X(id, name, type, help, labels) help,
		METRICS_TABLE(X)
#undef X
	};

	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", metric_names[id], helps[id],
	    metric_names[id], types[id]);
}

/* A label value: backslash, double quote and line feed escaped. */
static void
metrics_label(struct evbuffer *out, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\')
			evbuffer_add(out, "\\\\", 2);
		else if (*s == '"')
			evbuffer_add(out, "\\\"", 2);
		else if (*s == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, s, 1);
	}
}

static uint64_t
sum_route(unsigned id, size_t off)
{
	uint64_t n = 0;
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		const struct metrics_route *mr = &workers[i].routes[id / ROUTE_BLOCK][id % ROUTE_BLOCK];
		n += READ((const uint64_t *)((const char *)mr + off));
	}
	return n;
}

static int64_t
sum_server(unsigned id, size_t off)
{
	int64_t n = 0;
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		const struct metrics_server *ms =
		    &workers[i].servers[id / SERVER_BLOCK][id % SERVER_BLOCK];
		n += READ((const int64_t *)((const char *)ms + off));
	}
	return n;
}

static uint64_t
sum_backend(unsigned id, size_t off)
{
	uint64_t n = 0;
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		const struct metrics_backend *mb =
		    &workers[i].backends[id / BACKEND_BLOCK][id % BACKEND_BLOCK];
		n += READ((const uint64_t *)((const char *)mb + off));
	}
	return n;
}

#define ROUTE_OFF(field) offsetof(struct metrics_route, field)
#define SERVER_OFF(field) offsetof(struct metrics_server, field)
#define BACKEND_OFF(field) offsetof(struct metrics_backend, field)

static void
metrics_backend_labels(struct evbuffer *out, const char *suffix, enum metrics_id id, unsigned s)
{
	evbuffer_add_printf(out, "%s%s{route=\"", metric_names[id], suffix);
	metrics_label(out, backends[s].route);
	evbuffer_add(out, "\",backend=\"", 11);
	metrics_label(out, backends[s].backend);
	evbuffer_add(out, "\"", 1);
}

static void
metrics_write_backends(struct evbuffer *out)
{
	uint64_t n, cum;
	unsigned s, k;

	metrics_head(out, METRIC_BACKEND_REQUESTS);
	for (s = 0; s < nbackends; s++)
		for (k = 0; k < METRICS_BACKEND__COUNT; k++) {
			if ((n = sum_backend(s, BACKEND_OFF(outcomes[k]))) == 0)
				continue;
			metrics_backend_labels(out, "", METRIC_BACKEND_REQUESTS, s);
			evbuffer_add_printf(out, ",outcome=\"%s\"} %llu\n",
			    metrics_backend_outcome_names[k], (unsigned long long)n);
		}
	metrics_head(out, METRIC_BACKEND_DURATION);
	for (s = 0; s < nbackends; s++) {
		cum = 0;
		for (k = 0; k < NBUCKETS; k++) {
			cum += sum_backend(s, BACKEND_OFF(buckets[k]));
			metrics_backend_labels(out, "_bucket", METRIC_BACKEND_DURATION, s);
			if (k < NBUCKETS - 1)
				evbuffer_add_printf(out, ",le=\"%g\"} %llu\n",
				    (double)bucket_us[k] / 1e6, (unsigned long long)cum);
			else
				evbuffer_add_printf(out, ",le=\"+Inf\"} %llu\n",
				    (unsigned long long)cum);
		}
		metrics_backend_labels(out, "_sum", METRIC_BACKEND_DURATION, s);
		evbuffer_add_printf(out, "} %.6f\n",
		    (double)sum_backend(s, BACKEND_OFF(duration_us)) / 1e6);
		metrics_backend_labels(out, "_count", METRIC_BACKEND_DURATION, s);
		evbuffer_add_printf(out, "} %llu\n", (unsigned long long)cum);
	}
}

static uint64_t
sum_rpc(unsigned id, unsigned outcome)
{
	uint64_t n = 0;
	unsigned i;

	for (i = 0; i < nworkers; i++)
		n += READ(&workers[i].rpcs[id / RPC_BLOCK][id % RPC_BLOCK].outcomes[outcome]);
	return n;
}

static void
metrics_write_jsonrpc(struct evbuffer *out)
{
	uint64_t n, cum;
	unsigned s, k, r;

	metrics_head(out, METRIC_JSONRPC_CALLS);
	for (s = 0; s < nrpcs; s++)
		for (k = 0; k < METRICS_JSONRPC__COUNT; k++) {
			if ((n = sum_rpc(s, k)) == 0)
				continue;
			evbuffer_add_printf(out, "%s{route=\"", metric_names[METRIC_JSONRPC_CALLS]);
			metrics_label(out, rpcs[s].route);
			evbuffer_add(out, "\",method=\"", 10);
			metrics_label(out, rpcs[s].method);
			evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", rpc_outcome_names[k],
			    (unsigned long long)n);
		}
	metrics_head(out, METRIC_JSONRPC_BATCH_SIZE);
	for (r = 0; r < nroutes; r++) {
		if (!route_rpc[r])
			continue;
		cum = 0;
		for (k = 0; k < NBATCH; k++) {
			cum += sum_route(r, ROUTE_OFF(batch_buckets[k]));
			evbuffer_add_printf(out, "%s_bucket{route=\"",
			    metric_names[METRIC_JSONRPC_BATCH_SIZE]);
			metrics_label(out, route_names[r]);
			if (k < NBATCH - 1)
				evbuffer_add_printf(out, "\",le=\"%llu\"} %llu\n",
				    (unsigned long long)batch_bounds[k], (unsigned long long)cum);
			else
				evbuffer_add_printf(out, "\",le=\"+Inf\"} %llu\n",
				    (unsigned long long)cum);
		}
		evbuffer_add_printf(out, "%s_sum{route=\"", metric_names[METRIC_JSONRPC_BATCH_SIZE]);
		metrics_label(out, route_names[r]);
		evbuffer_add_printf(out, "\"} %llu\n",
		    (unsigned long long)sum_route(r, ROUTE_OFF(batch_sum)));
		evbuffer_add_printf(out, "%s_count{route=\"",
		    metric_names[METRIC_JSONRPC_BATCH_SIZE]);
		metrics_label(out, route_names[r]);
		evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)cum);
	}
}

static void
metrics_write_requests(struct evbuffer *out)
{
	static const char *const dirs[] = { "request", "response" };
	static const char *const results[] = {
#define X(id, name) name,
		METRICS_ENVELOPE_RESULTS(X)
#undef X
	};
	uint64_t n, cum;
	unsigned r, k, d, why;

	metrics_head(out, METRIC_REQUESTS);
	for (r = 0; r < nroutes; r++)
		for (k = 0; k < NCODES; k++) {
			if ((n = sum_route(r, ROUTE_OFF(codes[k]))) == 0)
				continue;
			evbuffer_add_printf(out, "%s{route=\"", metric_names[METRIC_REQUESTS]);
			metrics_label(out, route_names[r]);
			evbuffer_add_printf(out, "\",code=\"%u\"} %llu\n", k + CODE_MIN,
			    (unsigned long long)n);
		}

	metrics_head(out, METRIC_REQUEST_DURATION);
	for (r = 0; r < nroutes; r++) {
		cum = 0;
		for (k = 0; k < NBUCKETS; k++) {
			cum += sum_route(r, ROUTE_OFF(buckets[k]));
			evbuffer_add_printf(out, "%s_bucket{route=\"",
			    metric_names[METRIC_REQUEST_DURATION]);
			metrics_label(out, route_names[r]);
			if (k < NBUCKETS - 1)
				evbuffer_add_printf(out, "\",le=\"%g\"} %llu\n",
				    (double)bucket_us[k] / 1e6, (unsigned long long)cum);
			else
				evbuffer_add_printf(out, "\",le=\"+Inf\"} %llu\n",
				    (unsigned long long)cum);
		}
		evbuffer_add_printf(out, "%s_sum{route=\"", metric_names[METRIC_REQUEST_DURATION]);
		metrics_label(out, route_names[r]);
		evbuffer_add_printf(out, "\"} %.6f\n",
		    (double)sum_route(r, ROUTE_OFF(duration_us)) / 1e6);
		evbuffer_add_printf(out, "%s_count{route=\"", metric_names[METRIC_REQUEST_DURATION]);
		metrics_label(out, route_names[r]);
		evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)cum);
	}

	metrics_write_backends(out);
	metrics_write_jsonrpc(out);

	/* An applied body has no reason label. */
	metrics_head(out, METRIC_ENVELOPE);
	for (r = 0; r < nroutes; r++)
		for (d = 0; d < 2; d++)
			for (k = 0; k < METRICS_ENVELOPE__COUNT; k++)
				for (why = 0; why < METRICS_REASON__COUNT; why++) {
					n = sum_route(r, ROUTE_OFF(envelope[d][k][why]));
					if (n == 0)
						continue;
					evbuffer_add_printf(out, "%s{route=\"",
					    metric_names[METRIC_ENVELOPE]);
					metrics_label(out, route_names[r]);
					evbuffer_add_printf(out, "\",direction=\"%s\",result=\"%s\"",
					    dirs[d], results[k]);
					if (why != METRICS_REASON_NONE)
						evbuffer_add_printf(out, ",reason=\"%s\"",
						    reason_names[why]);
					evbuffer_add_printf(out, "} %llu\n", (unsigned long long)n);
				}
}

/* Events of streamed answers: only the routes that had some. */
static void
metrics_write_events(struct evbuffer *out)
{
	static const char *const results[] = {
#define X(id, name) name,
		METRICS_EVENTS_RESULTS(X)
#undef X
	};
	uint64_t n;
	unsigned r, k;

	metrics_head(out, METRIC_EVENTS);
	for (r = 0; r < nroutes; r++)
		for (k = 0; k < METRICS_EVENTS__COUNT; k++) {
			if ((n = sum_route(r, ROUTE_OFF(events[k]))) == 0)
				continue;
			evbuffer_add_printf(out, "%s{route=\"", metric_names[METRIC_EVENTS]);
			metrics_label(out, route_names[r]);
			evbuffer_add_printf(out, "\",result=\"%s\"} %llu\n", results[k],
			    (unsigned long long)n);
		}
}

/* Bodies rewritten while they were forwarded: only the routes that had some. */
static void
metrics_write_streamed(struct evbuffer *out)
{
	static const char *const outcomes[] = {
#define X(id, name) name,
		METRICS_STREAMED_OUTCOMES(X)
#undef X
	};
	uint64_t n;
	unsigned r, k;

	metrics_head(out, METRIC_STREAMED_BODIES);
	for (r = 0; r < nroutes; r++)
		for (k = 0; k < METRICS_STREAMED__COUNT; k++) {
			if ((n = sum_route(r, ROUTE_OFF(streamed[k]))) == 0)
				continue;
			evbuffer_add_printf(out, "%s{route=\"", metric_names[METRIC_STREAMED_BODIES]);
			metrics_label(out, route_names[r]);
			evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", outcomes[k],
			    (unsigned long long)n);
		}
}

static void
metrics_write_upstreams(struct evbuffer *out)
{
	int64_t n;
	unsigned s, k, first;

	metrics_head(out, METRIC_UPSTREAM_REQUESTS);
	for (s = 0; s < nservers; s++)
		for (k = 0; k < METRICS_OUTCOME__COUNT; k++) {
			if ((n = sum_server(s, SERVER_OFF(outcomes[k]))) == 0)
				continue;
			evbuffer_add_printf(out, "%s{upstream=\"",
			    metric_names[METRIC_UPSTREAM_REQUESTS]);
			metrics_label(out, servers[s].upstream);
			evbuffer_add(out, "\",server=\"", 10);
			metrics_label(out, servers[s].address);
			evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", outcome_names[k],
			    (unsigned long long)n);
		}

	/* Summed over the servers of each upstream name. */
	metrics_head(out, METRIC_UPSTREAM_CONNECTIONS);
	for (first = 0; first < nservers; first++) {
		int64_t active = 0, idle = 0;
		for (s = 0; s < first; s++)
			if (strcmp(servers[s].upstream, servers[first].upstream) == 0)
				break;
		if (s < first)
			continue;       /* this name was written already */
		for (s = first; s < nservers; s++)
			if (strcmp(servers[s].upstream, servers[first].upstream) == 0) {
				active += sum_server(s, SERVER_OFF(active));
				idle += sum_server(s, SERVER_OFF(idle));
			}
		evbuffer_add_printf(out, "%s{upstream=\"", metric_names[METRIC_UPSTREAM_CONNECTIONS]);
		metrics_label(out, servers[first].upstream);
		evbuffer_add_printf(out, "\",state=\"active\"} %lld\n", (long long)active);
		evbuffer_add_printf(out, "%s{upstream=\"", metric_names[METRIC_UPSTREAM_CONNECTIONS]);
		metrics_label(out, servers[first].upstream);
		evbuffer_add_printf(out, "\",state=\"idle\"} %lld\n", (long long)idle);
	}
}

static void
metrics_server_labels(struct evbuffer *out, enum metrics_id id,
    const struct upstream_server_state *st)
{
	evbuffer_add_printf(out, "%s{upstream=\"", metric_names[id]);
	metrics_label(out, st->upstream);
	evbuffer_add(out, "\",server=\"", 10);
	metrics_label(out, st->address);
	evbuffer_add(out, "\"", 1);
}

static void
metrics_group_labels(struct evbuffer *out, enum metrics_id id,
    const struct upstream_group_state *g)
{
	evbuffer_add_printf(out, "%s{upstream=\"", metric_names[id]);
	metrics_label(out, g->name);
	evbuffer_add(out, "\"", 1);
}

#define LOAD(p) ((unsigned long long)atomic_load_explicit((p), memory_order_relaxed))

/* Health, ejections and retries, from the state the workers share. */
static void
metrics_write_upstream_health(struct evbuffer *out)
{
	static const char *const results[2] = { "passed", "failed" };
	struct upstream_server_state **st;
	struct upstream_group_state **g;
	size_t n = upstream_state_servers(&st), ng = upstream_state_groups(&g), i, k;

	metrics_head(out, METRIC_UPSTREAM_SERVER_UP);
	for (i = 0; i < n; i++) {
		if (!st[i]->configured)
			continue;
		metrics_server_labels(out, METRIC_UPSTREAM_SERVER_UP, st[i]);
		evbuffer_add_printf(out, "} %d\n", !LOAD(&st[i]->check_down) &&
		    !LOAD(&st[i]->ejected_until));
	}
	metrics_head(out, METRIC_UPSTREAM_IN_FLIGHT);
	for (i = 0; i < n; i++) {
		if (!st[i]->configured)
			continue;
		metrics_server_labels(out, METRIC_UPSTREAM_IN_FLIGHT, st[i]);
		evbuffer_add_printf(out, "} %llu\n", LOAD(&st[i]->in_flight));
	}
	metrics_head(out, METRIC_UPSTREAM_EJECTIONS);
	for (i = 0; i < n; i++) {
		metrics_server_labels(out, METRIC_UPSTREAM_EJECTIONS, st[i]);
		evbuffer_add_printf(out, "} %llu\n", LOAD(&st[i]->ejections_total));
	}
	metrics_head(out, METRIC_UPSTREAM_HEALTH_CHECKS);
	for (i = 0; i < n; i++)
		for (k = 0; k < 2; k++) {
			if (LOAD(&st[i]->checks_total[k]) == 0)
				continue;
			metrics_server_labels(out, METRIC_UPSTREAM_HEALTH_CHECKS, st[i]);
			evbuffer_add_printf(out, ",result=\"%s\"} %llu\n", results[k],
			    LOAD(&st[i]->checks_total[k]));
		}
	metrics_head(out, METRIC_UPSTREAM_RETRIES);
	for (i = 0; i < ng; i++)
		for (k = 0; k < UPSTREAM_RETRY__COUNT; k++) {
			if (LOAD(&g[i]->retries_total[k]) == 0)
				continue;
			metrics_group_labels(out, METRIC_UPSTREAM_RETRIES, g[i]);
			evbuffer_add_printf(out, ",reason=\"%s\"} %llu\n",
			    upstream_retry_reason_names[k], LOAD(&g[i]->retries_total[k]));
		}
	metrics_head(out, METRIC_UPSTREAM_RETRY_BUDGET_EXHAUSTED);
	for (i = 0; i < ng; i++) {
		metrics_group_labels(out, METRIC_UPSTREAM_RETRY_BUDGET_EXHAUSTED, g[i]);
		evbuffer_add_printf(out, "} %llu\n", LOAD(&g[i]->budget_exhausted_total));
	}
	metrics_head(out, METRIC_UPSTREAM_OVERLOADED);
	for (i = 0; i < ng; i++) {
		metrics_group_labels(out, METRIC_UPSTREAM_OVERLOADED, g[i]);
		evbuffer_add_printf(out, "} %llu\n", LOAD(&g[i]->overloaded_total));
	}
}

static int
metrics_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;           /* the directory's own descriptor */
}

static void
metrics_write_process(struct evbuffer *out)
{
	struct rusage ru;
	struct rlimit rl;
	unsigned long long vsize = 0, rss = 0;
	FILE *fp;

	getrusage(RUSAGE_SELF, &ru);
	metrics_head(out, METRIC_PROCESS_CPU);
	evbuffer_add_printf(out, "%s %.6f\n", metric_names[METRIC_PROCESS_CPU],
	    (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
	if ((fp = fopen("/proc/self/statm", "r")) != NULL) {
		if (fscanf(fp, "%llu %llu", &vsize, &rss) != 2)
			vsize = rss = 0;
		fclose(fp);
	}
	metrics_head(out, METRIC_PROCESS_RSS);
	evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_PROCESS_RSS],
	    rss * (unsigned long long)sysconf(_SC_PAGESIZE));
	metrics_head(out, METRIC_PROCESS_VSIZE);
	evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_PROCESS_VSIZE],
	    vsize * (unsigned long long)sysconf(_SC_PAGESIZE));
	metrics_head(out, METRIC_PROCESS_FDS);
	evbuffer_add_printf(out, "%s %d\n", metric_names[METRIC_PROCESS_FDS], metrics_open_fds());
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		metrics_head(out, METRIC_PROCESS_MAX_FDS);
		evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_PROCESS_MAX_FDS],
		    (unsigned long long)rl.rlim_cur);
	}
	metrics_head(out, METRIC_PROCESS_START);
	evbuffer_add_printf(out, "%s %.3f\n", metric_names[METRIC_PROCESS_START], start_time);
}

/* Open tunnels, tunnels by outcome, bytes each way. */
static void
metrics_write_tunnels(struct evbuffer *out)
{
	static const char *const directions[2] = { "to_upstream", "to_client" };
	int64_t open = 0;
	unsigned i, k;

	for (i = 0; i < nworkers; i++)
		open += READ(&workers[i].tunnels);
	metrics_head(out, METRIC_TUNNELS_ACTIVE);
	evbuffer_add_printf(out, "%s %lld\n", metric_names[METRIC_TUNNELS_ACTIVE],
	    (long long)open);
	metrics_head(out, METRIC_TUNNELS);
	for (k = 0; k < TUNNEL_CLOSE__COUNT; k++) {
		uint64_t n = 0;
		for (i = 0; i < nworkers; i++)
			n += READ(&workers[i].tunnel_closes[k]);
		evbuffer_add_printf(out, "%s{outcome=\"%s\"} %llu\n", metric_names[METRIC_TUNNELS],
		    tunnel_closes[k].label, (unsigned long long)n);
	}
	metrics_head(out, METRIC_TUNNEL_BYTES);
	for (k = 0; k < 2; k++) {
		uint64_t n = 0;
		for (i = 0; i < nworkers; i++)
			n += READ(&workers[i].tunnel_bytes[k]);
		evbuffer_add_printf(out, "%s{direction=\"%s\"} %llu\n",
		    metric_names[METRIC_TUNNEL_BYTES], directions[k], (unsigned long long)n);
	}
}

void
metrics_write(struct evbuffer *out)
{
	uint64_t spliced = 0, copied = 0;
	int64_t clients = 0, active = 0;
	unsigned i, why;

	for (i = 0; i < nworkers; i++) {
		spliced += READ(&workers[i].bytes_spliced);
		copied += READ(&workers[i].bytes_copied);
		clients += READ(&workers[i].clients);
		active += READ(&workers[i].clients_active);
	}
	metrics_write_requests(out);
	metrics_write_events(out);
	metrics_write_streamed(out);
	metrics_write_upstreams(out);
	metrics_write_upstream_health(out);
	metrics_head(out, METRIC_BYTES_SPLICED);
	evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_BYTES_SPLICED],
	    (unsigned long long)spliced);
	metrics_head(out, METRIC_BYTES_COPIED);
	evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_BYTES_COPIED],
	    (unsigned long long)copied);
	metrics_head(out, METRIC_CONNECTIONS);
	evbuffer_add_printf(out, "%s{state=\"active\"} %lld\n%s{state=\"idle\"} %lld\n",
	    metric_names[METRIC_CONNECTIONS], (long long)active,
	    metric_names[METRIC_CONNECTIONS], (long long)(clients - active));
	metrics_head(out, METRIC_CONNECTIONS_ACCEPTED);
	for (i = 0; i < nworkers; i++)
		evbuffer_add_printf(out, "%s{worker=\"%u\"} %llu\n",
		    metric_names[METRIC_CONNECTIONS_ACCEPTED], i,
		    (unsigned long long)READ(&workers[i].accepted));
	metrics_head(out, METRIC_CLIENT_CLOSES);
	for (why = 0; why < CLIENT_CLOSE__COUNT; why++) {
		uint64_t n = 0;
		for (i = 0; i < nworkers; i++)
			n += READ(&workers[i].closes[why]);
		evbuffer_add_printf(out, "%s{reason=\"%s\"} %llu\n",
		    metric_names[METRIC_CLIENT_CLOSES], client_closes[why].label,
		    (unsigned long long)n);
	}
	{
		uint64_t h2[METRICS_H2__COUNT] = { 0 };
		int k;

		for (k = 0; k < METRICS_H2__COUNT; k++)
			for (i = 0; i < nworkers; i++)
				h2[k] += READ(&workers[i].h2[k]);
		metrics_head(out, METRIC_HTTP2_CONNECTIONS);
		evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_HTTP2_CONNECTIONS],
		    (unsigned long long)h2[METRICS_H2_CONNECTION]);
		metrics_head(out, METRIC_HTTP2_STREAMS);
		evbuffer_add_printf(out, "%s %llu\n", metric_names[METRIC_HTTP2_STREAMS],
		    (unsigned long long)h2[METRICS_H2_STREAM]);
		metrics_head(out, METRIC_HTTP2_RESETS);
		evbuffer_add_printf(out, "%s{direction=\"sent\"} %llu\n%s{direction=\"received\"} "
		    "%llu\n", metric_names[METRIC_HTTP2_RESETS],
		    (unsigned long long)h2[METRICS_H2_RESET_SENT], metric_names[METRIC_HTTP2_RESETS],
		    (unsigned long long)h2[METRICS_H2_RESET_RECEIVED]);
		metrics_head(out, METRIC_HTTP2_GOAWAYS);
		evbuffer_add_printf(out, "%s{direction=\"sent\"} %llu\n%s{direction=\"received\"} "
		    "%llu\n", metric_names[METRIC_HTTP2_GOAWAYS],
		    (unsigned long long)h2[METRICS_H2_GOAWAY_SENT], metric_names[METRIC_HTTP2_GOAWAYS],
		    (unsigned long long)h2[METRICS_H2_GOAWAY_RECEIVED]);
	}
	metrics_write_tunnels(out);
	metrics_head(out, METRIC_CONFIG_RELOADS);
	evbuffer_add_printf(out, "%s{result=\"success\"} %llu\n",
	    metric_names[METRIC_CONFIG_RELOADS], (unsigned long long)reloads[1]);
	evbuffer_add_printf(out, "%s{result=\"failure\"} %llu\n",
	    metric_names[METRIC_CONFIG_RELOADS], (unsigned long long)reloads[0]);
	metrics_head(out, METRIC_RESOLVER_LOOKUPS);
	for (i = 0; i < nnames; i++) {
		static const char *const results[] = { "success", "failure" };
		unsigned k;

		for (k = 0; k < 2; k++) {
			evbuffer_add_printf(out, "%s{name=\"",
			    metric_names[METRIC_RESOLVER_LOOKUPS]);
			metrics_label(out, names[i].name);
			evbuffer_add_printf(out, "\",result=\"%s\"} %llu\n", results[k],
			    (unsigned long long)names[i].lookups[k]);
		}
	}
	auth_metrics_write(out);
	metrics_write_process(out);
}

void
metrics_write_head(struct evbuffer *out, enum metrics_id id)
{
	metrics_head(out, id);
}

const char *
metrics_name(enum metrics_id id)
{
	return metric_names[id];
}

void
metrics_write_label(struct evbuffer *out, const char *s)
{
	metrics_label(out, s);
}
