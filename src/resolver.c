/*
 * Resolver: A and AAAA lookups with evdns, merged into one sorted answer; a synchronous
 * variant for configuration load; watches that re-resolve names and report changes.
 *
 * evdns always calls back from the event loop (deferred), exactly once per request, even for
 * a cancelled one or when its base is freed with fail_requests set.  A lookup therefore stays
 * allocated until both of its requests have called back, and a cancelled lookup or one whose
 * resolver is gone just drops its answer.
 */
#include "config.h"
#include "resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "log.h"
#include "metrics.h"

#define RESOLVER_RESOLV_CONF    "/etc/resolv.conf"
/* Per try and tries per nameserver, unless resolv.conf says otherwise (glibc: 5s, 2). */
#define RESOLVER_TRY_TIMEOUT    "2"
#define RESOLVER_ATTEMPTS       "2"
/* The longest a configuration load waits for its names. */
#define RESOLVER_SYNC_TIMEOUT_MS 5000

LIST_HEAD(resolver_lookup_list, resolver_lookup);

struct resolver {
	struct event_base *base;
	struct evdns_base *dns;
	struct resolver_lookup_list lookups;    /* in flight, cancelled ones included */
};

/* One family's request of a lookup. */
struct resolver_query {
	struct resolver_lookup *l;
	struct evdns_request *req;      /* NULL once it called back */
	int error;
};

struct resolver_lookup {
	struct resolver *r;             /* NULL once the resolver is freed */
	LIST_ENTRY(resolver_lookup) entry;
	resolver_cb cb;                 /* NULL once cancelled */
	void *arg;
	struct resolver_query q[2];     /* A, AAAA */
	unsigned pending;               /* queries that have not called back */
	struct resolver_answer ans;     /* addresses of both families, as they come */
	uint32_t ttl;                   /* smallest TTL of the families with addresses */
};

/* ------------------------------------------------------------------ answers */

static int
resolver_addr_cmp(const void *a, const void *b)
{
	const struct resolver_addr *x = a, *y = b;

	if (x->family != y->family)
		return x->family == AF_INET ? -1 : 1;
	return memcmp(x->ip, y->ip, sizeof(x->ip));
}

/* Sort and drop duplicates. */
static void
resolver_answer_sort(struct resolver_answer *ans)
{
	size_t i, n = 0;

	if (ans->naddrs == 0)
		return;
	qsort(ans->addrs, ans->naddrs, sizeof(*ans->addrs), resolver_addr_cmp);
	for (i = 1; i < ans->naddrs; i++)
		if (resolver_addr_cmp(&ans->addrs[n], &ans->addrs[i]) != 0)
			ans->addrs[++n] = ans->addrs[i];
	ans->naddrs = n + 1;
}

void
resolver_answer_free(struct resolver_answer *ans)
{
	free(ans->addrs);
	memset(ans, 0, sizeof(*ans));
}

int
resolver_answer_copy(struct resolver_answer *dst, const struct resolver_answer *src)
{
	struct resolver_addr *addrs = NULL;

	if (src->naddrs > 0) {
		if ((addrs = calloc(src->naddrs, sizeof(*addrs))) == NULL)
			return -1;
		memcpy(addrs, src->addrs, src->naddrs * sizeof(*addrs));
	}
	free(dst->addrs);
	dst->addrs = addrs;
	dst->naddrs = src->naddrs;
	dst->ttl = src->ttl;
	return 0;
}

int
resolver_answer_same(const struct resolver_answer *a, const struct resolver_answer *b)
{
	return a->naddrs == b->naddrs &&
	    (a->naddrs == 0 || memcmp(a->addrs, b->addrs, a->naddrs * sizeof(*a->addrs)) == 0);
}

const char *
resolver_addr_text(const struct resolver_addr *addr, char *buf, size_t cap)
{
	if (inet_ntop(addr->family, addr->ip, buf, (socklen_t)cap) == NULL)
		snprintf(buf, cap, "?");
	return buf;
}

/* "10.0.0.1, 10.0.0.2" (cut short with "..." when buf is too small), or "no address". */
static const char *
resolver_answer_text(const struct resolver_answer *ans, char *buf, size_t cap)
{
	char one[INET6_ADDRSTRLEN];
	size_t i, len = 0;
	int n;

	if (ans->naddrs == 0)
		return "no address";
	buf[0] = '\0';
	for (i = 0; i < ans->naddrs; i++) {
		n = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
		    resolver_addr_text(&ans->addrs[i], one, sizeof(one)));
		if (n < 0 || (size_t)n >= cap - len) {
			snprintf(buf + (cap > 4 ? cap - 4 : 0), cap > 4 ? 4 : cap, "...");
			break;
		}
		len += (size_t)n;
	}
	return buf;
}

void
resolver_diff(const struct resolver_answer *old, const struct resolver_answer *new,
    long *old_to_new, long *new_to_old)
{
	size_t i = 0, j = 0;
	int c;

	while (i < old->naddrs || j < new->naddrs) {
		if (i == old->naddrs)
			c = 1;
		else if (j == new->naddrs)
			c = -1;
		else
			c = resolver_addr_cmp(&old->addrs[i], &new->addrs[j]);
		if (c == 0) {
			old_to_new[i] = (long)j;
			new_to_old[j] = (long)i;
			i++;
			j++;
		} else if (c < 0)
			old_to_new[i++] = -1;
		else
			new_to_old[j++] = -1;
	}
}

uint64_t
resolver_delay(uint64_t interval_ms, uint32_t ttl)
{
	uint64_t ms = (uint64_t)ttl * 1000;

	if (ms > interval_ms)
		ms = interval_ms;
	return ms < RESOLVER_MIN_DELAY_MS ? RESOLVER_MIN_DELAY_MS : ms;
}

const char *
resolver_strerror(int error)
{
	switch (error) {
	case RESOLVER_ERR_NOADDR:
		return "no A or AAAA record";
	case RESOLVER_ERR_NOMEM:
		return "out of memory";
	default:
		return evdns_err_to_string(error);
	}
}

/* ------------------------------------------------------------------ the resolver */

struct resolver *
resolver_new(struct event_base *base, const struct sockaddr *ns, socklen_t nslen, char *err,
    size_t errlen)
{
	struct resolver *r = calloc(1, sizeof(*r));
	int rc;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->base = base;
	LIST_INIT(&r->lookups);
	if ((r->dns = evdns_base_new(base, 0)) == NULL) {
		snprintf(err, errlen, "cannot create the DNS resolver");
		free(r);
		return NULL;
	}
	evdns_base_set_option(r->dns, "timeout:", RESOLVER_TRY_TIMEOUT);
	evdns_base_set_option(r->dns, "attempts:", RESOLVER_ATTEMPTS);
	if (ns != NULL)
		rc = evdns_base_nameserver_sockaddr_add(r->dns, ns, nslen, 0);
	else {
		/* Without the file, or without a nameserver in it, libevent asks 127.0.0.1, as
		 * the C library does. */
		rc = evdns_base_resolv_conf_parse(r->dns, DNS_OPTIONS_ALL, RESOLVER_RESOLV_CONF);
		rc = rc == 4 ? -1 : 0;
	}
	if (rc != 0) {
		snprintf(err, errlen, ns != NULL ? "cannot use the nameserver" :
		    "cannot read " RESOLVER_RESOLV_CONF);
		evdns_base_free(r->dns, 0);
		free(r);
		return NULL;
	}
	return r;
}

void
resolver_free(struct resolver *r)
{
	struct resolver_lookup *l;

	if (r == NULL)
		return;
	/* Every request in flight calls back with DNS_ERR_SHUTDOWN: the lookups free
	 * themselves then. */
	while ((l = LIST_FIRST(&r->lookups)) != NULL) {
		LIST_REMOVE(l, entry);
		l->r = NULL;
		l->cb = NULL;
	}
	evdns_base_free(r->dns, 1);
	free(r);
}

/* Both families answered: the lookup's result. */
static int
resolver_lookup_result(struct resolver_lookup *l)
{
	int e4 = l->q[0].error, e6 = l->q[1].error, i;

	/* A family without records is no failure; any other error is. */
	for (i = 0; i < 2; i++) {
		int e = l->q[i].error;
		if (e != DNS_ERR_NONE && e != DNS_ERR_NODATA && e != DNS_ERR_NOTEXIST)
			return e;
	}
	if (l->ans.naddrs > 0)
		return 0;
	return e4 == DNS_ERR_NOTEXIST || e6 == DNS_ERR_NOTEXIST ? DNS_ERR_NOTEXIST :
	    RESOLVER_ERR_NOADDR;
}

static void
resolver_query_cb(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	struct resolver_query *q = arg;
	struct resolver_lookup *l = q->l;
	struct resolver_addr *more;
	size_t i, size = type == DNS_IPv4_A ? 4 : 16;
	resolver_cb cb;
	int error;

	q->req = NULL;
	q->error = result;
	if (result == DNS_ERR_NONE && count > 0 && l->cb != NULL &&
	    (type == DNS_IPv4_A || type == DNS_IPv6_AAAA)) {
		more = realloc(l->ans.addrs, (l->ans.naddrs + (size_t)count) * sizeof(*more));
		if (more == NULL)
			q->error = RESOLVER_ERR_NOMEM;
		else {
			l->ans.addrs = more;
			for (i = 0; i < (size_t)count; i++) {
				struct resolver_addr *a = &l->ans.addrs[l->ans.naddrs++];
				memset(a, 0, sizeof(*a));
				a->family = type == DNS_IPv4_A ? AF_INET : AF_INET6;
				memcpy(a->ip, (const unsigned char *)addresses + i * size, size);
			}
			/* RFC 2181: a TTL with the top bit set means zero */
			if ((ttl < 0 ? 0 : (uint32_t)ttl) < l->ttl)
				l->ttl = ttl < 0 ? 0 : (uint32_t)ttl;
		}
	}
	if (--l->pending > 0)
		return;

	if (l->r != NULL)
		LIST_REMOVE(l, entry);
	cb = l->cb;
	if (cb != NULL) {
		error = resolver_lookup_result(l);
		resolver_answer_sort(&l->ans);
		l->ans.ttl = l->ttl;
		cb(error, error == 0 ? &l->ans : NULL, l->arg);
	}
	resolver_answer_free(&l->ans);
	free(l);
}

struct resolver_lookup *
resolver_lookup(struct resolver *r, const char *name, resolver_cb cb, void *arg)
{
	struct resolver_lookup *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->r = r;
	l->cb = cb;
	l->arg = arg;
	l->ttl = UINT32_MAX;
	l->q[0].l = l->q[1].l = l;
	LIST_INSERT_HEAD(&r->lookups, l, entry);
	if ((l->q[0].req = evdns_base_resolve_ipv4(r->dns, name, 0, resolver_query_cb,
	    &l->q[0])) != NULL)
		l->pending++;
	if (l->q[0].req == NULL ||
	    (l->q[1].req = evdns_base_resolve_ipv6(r->dns, name, 0, resolver_query_cb,
	    &l->q[1])) == NULL) {
		if (l->pending == 0) {
			LIST_REMOVE(l, entry);
			free(l);
		} else
			resolver_lookup_cancel(l);
		return NULL;
	}
	l->pending++;
	return l;
}

void
resolver_lookup_cancel(struct resolver_lookup *l)
{
	int i;

	l->cb = NULL;
	if (l->r == NULL)
		return;
	/* Stop the retransmissions; each request still calls back once, with DNS_ERR_CANCEL. */
	for (i = 0; i < 2; i++)
		if (l->q[i].req != NULL)
			evdns_cancel_request(l->r->dns, l->q[i].req);
}

/* ------------------------------------------------------------------ at load */

struct resolver_sync {
	struct resolver_answer *answers;
	int *errors;
	size_t left;
};

struct resolver_sync_one {
	struct resolver_sync *s;
	size_t i;
};

static void
resolver_sync_cb(int error, const struct resolver_answer *ans, void *arg)
{
	struct resolver_sync_one *one = arg;
	struct resolver_sync *s = one->s;

	s->errors[one->i] = error;
	if (error == 0 && resolver_answer_copy(&s->answers[one->i], ans) < 0)
		s->errors[one->i] = RESOLVER_ERR_NOMEM;
	s->left--;
}

/* evdns's own warnings ("nameserver ... has failed") would go to stderr before the log is
 * set up; the errors of the lookups say what matters. */
static void
resolver_quiet_cb(int severity, const char *msg)
{
	(void)severity;
	(void)msg;
}

int
resolver_lookup_sync(const struct sockaddr *ns, socklen_t nslen, const char *const *names,
    size_t n, struct resolver_answer *answers, int *errors, char *err, size_t errlen)
{
	struct resolver_sync s = { answers, errors, 0 };
	struct resolver_sync_one *ones;
	struct resolver_lookup **lookups;
	struct event_base *base;
	struct resolver *r;
	struct timeval tv = { RESOLVER_SYNC_TIMEOUT_MS / 1000,
	    RESOLVER_SYNC_TIMEOUT_MS % 1000 * 1000 };
	size_t i;

	if ((base = event_base_new()) == NULL) {
		snprintf(err, errlen, "cannot create an event loop");
		return -1;
	}
	if ((r = resolver_new(base, ns, nslen, err, errlen)) == NULL) {
		event_base_free(base);
		return -1;
	}
	ones = calloc(n ? n : 1, sizeof(*ones));
	lookups = calloc(n ? n : 1, sizeof(*lookups));
	evdns_set_log_fn(resolver_quiet_cb);
	for (i = 0; i < n; i++) {
		memset(&answers[i], 0, sizeof(answers[i]));
		errors[i] = DNS_ERR_TIMEOUT;
		if (ones == NULL || lookups == NULL) {
			errors[i] = RESOLVER_ERR_NOMEM;
			continue;
		}
		ones[i].s = &s;
		ones[i].i = i;
		if ((lookups[i] = resolver_lookup(r, names[i], resolver_sync_cb, &ones[i])) == NULL)
			errors[i] = RESOLVER_ERR_NOMEM;
		else
			s.left++;
	}
	event_base_loopexit(base, &tv);
	while (s.left > 0 && event_base_loop(base, EVLOOP_ONCE) == 0 &&
	    !event_base_got_exit(base))
		;
	/* Names still unanswered keep DNS_ERR_TIMEOUT; let their requests call back. */
	for (i = 0; s.left > 0 && i < n; i++)
		if (lookups[i] != NULL)
			resolver_lookup_cancel(lookups[i]);
	resolver_free(r);
	event_base_loop(base, EVLOOP_NONBLOCK);
	evdns_set_log_fn(NULL);
	event_base_free(base);
	free(ones);
	free(lookups);
	return 0;
}

/* ------------------------------------------------------------------ watches */

struct resolver_watch {
	struct resolver *r;
	char *name;
	uint64_t interval_ms;
	struct resolver_answer good;    /* the last good answer */
	struct resolver_lookup *lookup; /* in flight, or NULL */
	struct event *timer;
	unsigned failures;              /* lookups failed in a row */
	resolver_watch_cb cb;
	void *arg;
};

static void
resolver_watch_arm(struct resolver_watch *w)
{
	uint64_t ms = w->good.naddrs > 0 ? resolver_delay(w->interval_ms, w->good.ttl) :
	    w->interval_ms;
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(w->timer, &tv);
}

static void
resolver_watch_answer_cb(int error, const struct resolver_answer *ans, void *arg)
{
	struct resolver_watch *w = arg;
	char text[512];
	int changed;

	w->lookup = NULL;
	metrics_resolver_lookup(w->name, error == 0);
	if (error != 0) {
		if (w->failures++ == 0)
			log_warnx("resolver: cannot resolve %s: %s; keeping %s", w->name,
			    resolver_strerror(error), resolver_answer_text(&w->good, text,
			    sizeof(text)));
		resolver_watch_arm(w);
		return;
	}
	if (w->failures > 0)
		log_info("resolver: %s resolves again after %u failed lookup%s", w->name,
		    w->failures, w->failures == 1 ? "" : "s");
	w->failures = 0;
	changed = !resolver_answer_same(&w->good, ans);
	if (changed && resolver_answer_copy(&w->good, ans) < 0)
		changed = 0;            /* keep the last good answer */
	w->good.ttl = ans->ttl;
	resolver_watch_arm(w);
	/* last: the callback may free the watch */
	if (changed)
		w->cb(w, &w->good, w->arg);
}

static void
resolver_watch_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolver_watch *w = arg;

	(void)fd;
	(void)what;
	w->lookup = resolver_lookup(w->r, w->name, resolver_watch_answer_cb, w);
	if (w->lookup == NULL)
		resolver_watch_answer_cb(RESOLVER_ERR_NOMEM, NULL, w);
}

struct resolver_watch *
resolver_watch_new(struct resolver *r, const char *name, uint64_t interval_ms,
    const struct resolver_answer *initial, resolver_watch_cb cb, void *arg)
{
	struct resolver_watch *w = calloc(1, sizeof(*w));
	struct timeval now = { 0, 0 };

	if (w == NULL)
		return NULL;
	w->r = r;
	w->interval_ms = interval_ms;
	w->cb = cb;
	w->arg = arg;
	w->name = strdup(name);
	w->timer = evtimer_new(r->base, resolver_watch_timer_cb, w);
	if (w->name == NULL || w->timer == NULL ||
	    (initial != NULL && resolver_answer_copy(&w->good, initial) < 0)) {
		resolver_watch_free(w);
		return NULL;
	}
	if (initial != NULL)
		resolver_watch_arm(w);
	else
		evtimer_add(w->timer, &now);
	return w;
}

void
resolver_watch_free(struct resolver_watch *w)
{
	if (w == NULL)
		return;
	if (w->lookup != NULL)
		resolver_lookup_cancel(w->lookup);
	if (w->timer != NULL)
		event_free(w->timer);
	resolver_answer_free(&w->good);
	free(w->name);
	free(w);
}

const struct resolver_answer *
resolver_watch_answer(const struct resolver_watch *w)
{
	return &w->good;
}

/* ------------------------------------------------------------------ a configuration's names */

/* One distinct name of a configuration and its watch. */
struct resolver_watched {
	struct resolver_watches *ws;
	const char *host;               /* the entries' own string */
	struct resolver_watch *w;
};

struct resolver_watches {
	struct config *cfg;
	struct resolver *r;
	resolver_servers_cb cb;
	void *arg;
	struct resolver_watched *names;
	size_t nnames;
};

static void
resolver_watches_cb(struct resolver_watch *w, const struct resolver_answer *ans, void *arg)
{
	struct resolver_watched *wd = arg;
	struct resolver_watches *ws = wd->ws;
	struct config *cfg = ws->cfg;
	char text[512];
	size_t i, j;

	(void)w;
	log_info("resolver: %s now resolves to %s", wd->host,
	    resolver_answer_text(ans, text, sizeof(text)));
	for (i = 0; ws->cb != NULL && i < cfg->nupstreams; i++) {
		struct config_upstream *up = &cfg->upstreams[i];
		for (j = 0; j < up->nnames; j++)
			if (strcmp(up->names[j].host, wd->host) == 0)
				ws->cb(up, &up->names[j], ans, ws->arg);
	}
}

/* The shortest interval asked for host, and its answer at load. */
static uint64_t
resolver_watches_interval(struct config *cfg, const char *host,
    const struct resolver_answer **initial)
{
	uint64_t interval = UINT64_MAX;
	size_t i, j;

	*initial = NULL;
	for (i = 0; i < cfg->nupstreams; i++) {
		struct config_upstream *up = &cfg->upstreams[i];
		for (j = 0; j < up->nnames; j++) {
			if (strcmp(up->names[j].host, host) != 0)
				continue;
			if (up->resolve_interval < interval)
				interval = up->resolve_interval;
			if (*initial == NULL)
				*initial = &up->names[j].answer;
		}
	}
	return interval;
}

struct resolver_watches *
resolver_watch_config(struct event_base *base, struct config *cfg, resolver_servers_cb cb,
    void *arg)
{
	const struct resolver_answer *initial;
	const struct config_addr *ns = cfg->resolver;
	struct resolver_watches *ws;
	struct config_server_name *e;
	size_t i, j, k, total = 0;
	uint64_t interval;
	char err[256];

	for (i = 0; i < cfg->nupstreams; i++)
		total += cfg->upstreams[i].nnames;
	if (total == 0)
		return NULL;
	if ((ws = calloc(1, sizeof(*ws))) == NULL ||
	    (ws->names = calloc(total, sizeof(*ws->names))) == NULL) {
		free(ws);
		log_warnx("resolver: out of memory: server names are not looked up again");
		return NULL;
	}
	ws->cfg = cfg;
	ws->cb = cb;
	ws->arg = arg;
	ws->r = resolver_new(base, ns ? (const struct sockaddr *)&ns->ss : NULL,
	    ns ? ns->sslen : 0, err, sizeof(err));
	if (ws->r == NULL) {
		log_warnx("resolver: %s: server names are not looked up again", err);
		resolver_watches_free(ws);
		return NULL;
	}
	for (i = 0; i < cfg->nupstreams; i++) {
		for (j = 0; j < cfg->upstreams[i].nnames; j++) {
			e = &cfg->upstreams[i].names[j];
			for (k = 0; k < ws->nnames; k++)
				if (strcmp(ws->names[k].host, e->host) == 0)
					break;
			if (k < ws->nnames)
				continue;
			ws->names[k].ws = ws;
			ws->names[k].host = e->host;
			ws->nnames++;
			interval = resolver_watches_interval(cfg, e->host, &initial);
			ws->names[k].w = resolver_watch_new(ws->r, e->host, interval, initial,
			    resolver_watches_cb, &ws->names[k]);
			if (ws->names[k].w == NULL) {
				log_warnx("resolver: out of memory: server names are not looked up "
				    "again");
				resolver_watches_free(ws);
				return NULL;
			}
		}
	}
	return ws;
}

void
resolver_watches_free(struct resolver_watches *ws)
{
	size_t k;

	if (ws == NULL)
		return;
	for (k = 0; k < ws->nnames; k++)
		resolver_watch_free(ws->names[k].w);
	resolver_free(ws->r);
	free(ws->names);
	free(ws);
}
