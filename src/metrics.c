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

#include "errors.h"
#include "server.h"

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

struct metrics_route {
	uint64_t codes[NCODES];
	uint64_t buckets[NBUCKETS];     /* not cumulative */
	uint64_t duration_us;
	uint64_t envelope[2][3];        /* direction, result */
};

struct metrics_server {
	uint64_t outcomes[METRICS_OUTCOME__COUNT];
	int64_t active, idle;
};

/* Series live in blocks the main thread allocates before publishing the ids they hold. */
#define ROUTE_BLOCK 16
#define SERVER_BLOCK 64
#define MAX_BLOCKS 1024

struct metrics_worker {
	int64_t clients;                /* open client connections */
	int64_t clients_active;         /* of those, serving a request */
	uint64_t bytes_spliced, bytes_copied;
	struct metrics_route *routes[MAX_BLOCKS];
	struct metrics_server *servers[MAX_BLOCKS];
};

struct series_server {
	char *upstream;
	char *address;
};

static struct metrics_worker *workers;
static unsigned nworkers;
/* Main thread only: the label values behind each series id.  Route id 0 is "no route". */
static char **route_names;
static unsigned nroutes, route_cap;
static struct series_server *servers;
static unsigned nservers, server_cap;
static uint64_t reloads[2];             /* failed, ok */
static double start_time;

static const char *const outcome_names[] = {
#define X(id, name) name,
	METRICS_OUTCOMES(X)
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
		}
	free(workers);
	workers = NULL;
	nworkers = 0;
	for (i = 0; i < nroutes; i++)
		free(route_names[i]);
	free(route_names);
	route_names = NULL;
	nroutes = route_cap = 0;
	for (i = 0; i < nservers; i++) {
		free(servers[i].upstream);
		free(servers[i].address);
	}
	free(servers);
	servers = NULL;
	nservers = server_cap = 0;
}

/* Make sure every worker has the block holding series id. */
static int
metrics_blocks(unsigned id, int route)
{
	unsigned b = id / (route ? ROUTE_BLOCK : SERVER_BLOCK), i;

	if (b >= MAX_BLOCKS)
		return -1;
	for (i = 0; i < nworkers; i++) {
		if (route && workers[i].routes[b] == NULL &&
		    (workers[i].routes[b] = calloc(ROUTE_BLOCK, sizeof(struct metrics_route))) == NULL)
			return -1;
		if (!route && workers[i].servers[b] == NULL &&
		    (workers[i].servers[b] = calloc(SERVER_BLOCK,
		    sizeof(struct metrics_server))) == NULL)
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
		route_cap = route_cap ? route_cap * 2 : 16;
		if ((p = realloc(route_names, route_cap * sizeof(*p))) == NULL)
			return -1;
		route_names = p;
	}
	if (metrics_blocks(nroutes, 1) < 0 || (route_names[nroutes] = strdup(name)) == NULL)
		return -1;
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
	if (metrics_blocks(nservers, 0) < 0)
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

int
metrics_bind(struct config *cfg)
{
	unsigned none;
	size_t i, j;

	if (workers == NULL)
		return 0;
	if (metrics_route_id("-", &none) < 0)
		return -1;
	for (i = 0; i < cfg->nroutes; i++)
		if (metrics_route_id(cfg->routes[i].name, &cfg->routes[i].metrics_id) < 0)
			return -1;
	for (i = 0; i < cfg->nupstreams; i++) {
		struct config_upstream *up = &cfg->upstreams[i];
		for (j = 0; j < up->nservers; j++)
			if (metrics_server_id(up->name, up->servers[j].addr.text,
			    &up->servers[j].metrics_id) < 0)
				return -1;
	}
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

void
metrics_request(struct worker *w, const struct config_route *route,
    const struct config_server *server, int status, int gateway_error,
    const struct timespec *start, const struct timespec *now)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;
	struct metrics_server *ms;
	int64_t us;
	size_t b;

	if (mw == NULL)
		return;
	if ((mr = metrics_route_of(mw, route)) != NULL) {
		us = (int64_t)(now->tv_sec - start->tv_sec) * 1000000 +
		    (now->tv_nsec - start->tv_nsec) / 1000;
		if (us < 0)
			us = 0;
		for (b = 0; b < NBUCKETS - 1 && (uint64_t)us > bucket_us[b]; b++)
			;
		COUNT(&mr->buckets[b], 1);
		COUNT(&mr->duration_us, (uint64_t)us);
		if (status >= CODE_MIN && status < CODE_MIN + NCODES)
			COUNT(&mr->codes[status - CODE_MIN], 1);
	}
	if (server != NULL && (ms = metrics_server_of(mw, server)) != NULL)
		COUNT(&ms->outcomes[metrics_outcome(status, gateway_error)], 1);
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

	if (mw != NULL)
		COUNT(&mw->clients, delta);
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
    enum metrics_direction direction, enum metrics_envelope_result result)
{
	struct metrics_worker *mw = metrics_of(w);
	struct metrics_route *mr;

	if (mw != NULL && (mr = metrics_route_of(mw, route)) != NULL)
		COUNT(&mr->envelope[direction & 1][result % 3], 1);
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

#define ROUTE_OFF(field) offsetof(struct metrics_route, field)
#define SERVER_OFF(field) offsetof(struct metrics_server, field)

static void
metrics_write_requests(struct evbuffer *out)
{
	static const char *const dirs[] = { "request", "response" };
	static const char *const results[] = { "applied", "passed", "failed" };
	uint64_t n, cum;
	unsigned r, k, d;

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

	metrics_head(out, METRIC_ENVELOPE);
	for (r = 0; r < nroutes; r++)
		for (d = 0; d < 2; d++)
			for (k = 0; k < 3; k++) {
				if ((n = sum_route(r, ROUTE_OFF(envelope[d][k]))) == 0)
					continue;
				evbuffer_add_printf(out, "%s{route=\"", metric_names[METRIC_ENVELOPE]);
				metrics_label(out, route_names[r]);
				evbuffer_add_printf(out, "\",direction=\"%s\",result=\"%s\"} %llu\n",
				    dirs[d], results[k], (unsigned long long)n);
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

void
metrics_write(struct evbuffer *out)
{
	uint64_t spliced = 0, copied = 0;
	int64_t clients = 0, active = 0;
	unsigned i;

	for (i = 0; i < nworkers; i++) {
		spliced += READ(&workers[i].bytes_spliced);
		copied += READ(&workers[i].bytes_copied);
		clients += READ(&workers[i].clients);
		active += READ(&workers[i].clients_active);
	}
	metrics_write_requests(out);
	metrics_write_upstreams(out);
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
	metrics_head(out, METRIC_CONFIG_RELOADS);
	evbuffer_add_printf(out, "%s{result=\"success\"} %llu\n",
	    metric_names[METRIC_CONFIG_RELOADS], (unsigned long long)reloads[1]);
	evbuffer_add_printf(out, "%s{result=\"failure\"} %llu\n",
	    metric_names[METRIC_CONFIG_RELOADS], (unsigned long long)reloads[0]);
	metrics_write_process(out);
}
