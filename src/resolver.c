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
#include <sys/stat.h>

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
/* A hosts file larger than this is not read (nor is it one). */
#define RESOLVER_HOSTS_MAX      (64 * 1024 * 1024)

LIST_HEAD(resolver_lookup_list, resolver_lookup);

struct resolver {
	struct event_base *base;
	struct evdns_base *dns;
	struct resolver_lookup_list lookups;    /* in flight, cancelled ones included */
	char *hosts_path;
	char *hosts;                    /* its text as last read, or NULL */
	struct stat hosts_st;           /* the file that text was read from */
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
	struct event *hosts_ev;         /* an answer from the hosts file, to call back with */
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
	dst->partial = src->partial;
	dst->partial_error = src->partial_error;
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

/* Add n addresses to ans (0, or -1 out of memory). */
static int
resolver_answer_add(struct resolver_answer *ans, const struct resolver_addr *addrs, size_t n)
{
	struct resolver_addr *more;

	if (n == 0)
		return 0;
	if ((more = realloc(ans->addrs, (ans->naddrs + n) * sizeof(*more))) == NULL)
		return -1;
	ans->addrs = more;
	memcpy(&ans->addrs[ans->naddrs], addrs, n * sizeof(*addrs));
	ans->naddrs += n;
	return 0;
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

/* ------------------------------------------------------------------ the hosts file */

/*
 * The hosts file's text, read again only when the file changed (another inode, size or
 * modification time); NULL when there is none or it cannot be read: then names go to DNS,
 * as the C library's "files" source lets them.
 */
static const char *
resolver_hosts_text(struct resolver *r)
{
	struct stat st;
	char *text;
	FILE *f;
	size_t n;

	if (stat(r->hosts_path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > RESOLVER_HOSTS_MAX) {
		free(r->hosts);
		r->hosts = NULL;
		return NULL;
	}
	if (r->hosts != NULL && st.st_dev == r->hosts_st.st_dev &&
	    st.st_ino == r->hosts_st.st_ino && st.st_size == r->hosts_st.st_size &&
	    st.st_mtim.tv_sec == r->hosts_st.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == r->hosts_st.st_mtim.tv_nsec)
		return r->hosts;
	free(r->hosts);
	r->hosts = NULL;
	if ((f = fopen(r->hosts_path, "r")) == NULL)
		return NULL;
	if ((text = malloc((size_t)st.st_size + 1)) != NULL) {
		n = fread(text, 1, (size_t)st.st_size, f);
		text[n] = '\0';
		r->hosts = text;
		r->hosts_st = st;
	}
	fclose(f);
	return r->hosts;
}

/* The next field of a line (blanks between fields, stop at its end): its length, 0 at the end. */
static size_t
resolver_hosts_field(const char **p, const char *stop)
{
	const char *s = *p, *e;

	while (s < stop && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f'))
		s++;
	for (e = s; e < stop && *e != ' ' && *e != '\t' && *e != '\r' && *e != '\v' &&
	    *e != '\f'; e++)
		;
	*p = s;
	return (size_t)(e - s);
}

/*
 * Add to ans the address of every line of text that names name, as its canonical name or an
 * alias, compared without case and without a final dot, as getaddrinfo(3) gives them: the
 * lines of both families, all of them when several name it.  A line whose first field is no
 * numeric IPv4 or IPv6 address is skipped; "#" starts a comment.  Returns the addresses
 * added, or -1 out of memory.
 */
static int
resolver_hosts_find(const char *text, const char *name, struct resolver_answer *ans)
{
	const char *line, *end, *stop, *p, *hash;
	size_t namelen = strlen(name), len, found = 0;
	char field[INET6_ADDRSTRLEN];
	struct resolver_addr a;

	if (namelen > 0 && name[namelen - 1] == '.')
		namelen--;
	if (namelen == 0)
		return 0;
	for (line = text; *line != '\0'; line = *end != '\0' ? end + 1 : end) {
		end = line + strcspn(line, "\n");
		hash = memchr(line, '#', (size_t)(end - line));
		stop = hash != NULL ? hash : end;
		p = line;
		if ((len = resolver_hosts_field(&p, stop)) == 0 || len >= sizeof(field))
			continue;
		memcpy(field, p, len);
		field[len] = '\0';
		p += len;
		memset(&a, 0, sizeof(a));
		a.family = strchr(field, ':') != NULL ? AF_INET6 : AF_INET;
		if (inet_pton(a.family, field, a.ip) != 1)
			continue;
		while ((len = resolver_hosts_field(&p, stop)) > 0) {
			if (len - (p[len - 1] == '.' && len > 1) == namelen &&
			    strncasecmp(p, name, namelen) == 0) {
				if (resolver_answer_add(ans, &a, 1) < 0)
					return -1;
				found++;
				break;
			}
			p += len;
		}
	}
	return (int)found;
}

/* ------------------------------------------------------------------ the resolver */

struct resolver *
resolver_new(struct event_base *base, const struct sockaddr *ns, socklen_t nslen, char *err,
    size_t errlen)
{
	struct resolver *r = calloc(1, sizeof(*r));
	const char *env;
	int rc;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->base = base;
	LIST_INIT(&r->lookups);
	if ((env = getenv(RESOLVER_HOSTS_ENV)) == NULL || *env == '\0')
		env = RESOLVER_HOSTS;
	if ((r->hosts_path = strdup(env)) == NULL) {
		snprintf(err, errlen, "out of memory");
		free(r);
		return NULL;
	}
	if ((r->dns = evdns_base_new(base, 0)) == NULL) {
		snprintf(err, errlen, "cannot create the DNS resolver");
		free(r->hosts_path);
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
		rc = evdns_base_resolv_conf_parse(r->dns, DNS_OPTIONS_ALL & ~DNS_OPTION_HOSTSFILE,
		    RESOLVER_RESOLV_CONF);
		rc = rc == 4 ? -1 : 0;
	}
	if (rc != 0) {
		snprintf(err, errlen, ns != NULL ? "cannot use the nameserver" :
		    "cannot read " RESOLVER_RESOLV_CONF);
		evdns_base_free(r->dns, 0);
		free(r->hosts_path);
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
	free(r->hosts_path);
	free(r->hosts);
	free(r);
}

/* A family's query failed: not answered, or not with "no such record". */
static int
resolver_query_failed(int error)
{
	return error != DNS_ERR_NONE && error != DNS_ERR_NODATA && error != DNS_ERR_NOTEXIST;
}

/*
 * Both families answered: the lookup's result.  Addresses of either family make a good
 * answer, marked partial when the other family's query failed; without any, the first
 * failure is the error, else the name does not exist or has no address.
 */
static int
resolver_lookup_result(struct resolver_lookup *l)
{
	int e4 = l->q[0].error, e6 = l->q[1].error, i;

	if (e4 == RESOLVER_ERR_NOMEM || e6 == RESOLVER_ERR_NOMEM)
		return RESOLVER_ERR_NOMEM;
	if (l->ans.naddrs > 0) {
		for (i = 0; i < 2; i++)
			if (resolver_query_failed(l->q[i].error)) {
				l->ans.partial = i == 0 ? AF_INET : AF_INET6;
				l->ans.partial_error = l->q[i].error;
			}
		return 0;
	}
	for (i = 0; i < 2; i++)
		if (resolver_query_failed(l->q[i].error))
			return l->q[i].error;
	return e4 == DNS_ERR_NOTEXIST || e6 == DNS_ERR_NOTEXIST ? DNS_ERR_NOTEXIST :
	    RESOLVER_ERR_NOADDR;
}

/* Both queries (or the hosts file) answered: call back, and free the lookup. */
static void
resolver_lookup_done(struct resolver_lookup *l)
{
	resolver_cb cb;
	int error;

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

static void
resolver_hosts_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolver_lookup *l = arg;

	(void)fd;
	(void)what;
	event_free(l->hosts_ev);
	l->hosts_ev = NULL;
	resolver_lookup_done(l);
}

static void
resolver_query_cb(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	struct resolver_query *q = arg;
	struct resolver_lookup *l = q->l;
	struct resolver_addr *more;
	size_t i, size = type == DNS_IPv4_A ? 4 : 16;

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
	resolver_lookup_done(l);
}

struct resolver_lookup *
resolver_lookup(struct resolver *r, const char *name, resolver_cb cb, void *arg)
{
	struct resolver_lookup *l = calloc(1, sizeof(*l));
	const char *hosts;
	int found;

	if (l == NULL)
		return NULL;
	l->r = r;
	l->cb = cb;
	l->arg = arg;
	l->ttl = UINT32_MAX;
	l->q[0].l = l->q[1].l = l;
	if ((hosts = resolver_hosts_text(r)) != NULL &&
	    (found = resolver_hosts_find(hosts, name, &l->ans)) != 0) {
		/* called back from the loop, as evdns does */
		if (found < 0 ||
		    (l->hosts_ev = event_new(r->base, -1, 0, resolver_hosts_cb, l)) == NULL) {
			resolver_answer_free(&l->ans);
			free(l);
			return NULL;
		}
		LIST_INSERT_HEAD(&r->lookups, l, entry);
		event_active(l->hosts_ev, EV_TIMEOUT, 0);
		return l;
	}
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
	unsigned partial;               /* partial answers in a row that kept addresses */
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

/*
 * A partial answer: into out, its addresses and those of the family that failed from the
 * last good answer, which kept (those kept only) tells.  0, or -1 out of memory.
 */
static int
resolver_watch_keep(struct resolver_watch *w, const struct resolver_answer *ans,
    struct resolver_answer *out, struct resolver_answer *kept)
{
	size_t i;

	memset(out, 0, sizeof(*out));
	memset(kept, 0, sizeof(*kept));
	for (i = 0; i < w->good.naddrs; i++)
		if (w->good.addrs[i].family == ans->partial &&
		    resolver_answer_add(kept, &w->good.addrs[i], 1) < 0)
			goto nomem;
	if (resolver_answer_add(out, ans->addrs, ans->naddrs) < 0 ||
	    resolver_answer_add(out, kept->addrs, kept->naddrs) < 0)
		goto nomem;
	resolver_answer_sort(out);
	out->ttl = ans->ttl;
	return 0;
nomem:
	resolver_answer_free(out);
	resolver_answer_free(kept);
	return -1;
}

/* A lookup failed: keep the last good answer, and say so once for a streak. */
static void
resolver_watch_fail(struct resolver_watch *w, int error)
{
	char text[512];

	metrics_resolver_lookup(w->name, 0);
	if (w->failures++ == 0)
		log_warnx("resolver: cannot resolve %s: %s; keeping %s", w->name,
		    resolver_strerror(error), resolver_answer_text(&w->good, text, sizeof(text)));
	resolver_watch_arm(w);
}

/* A good answer: report it when the addresses changed. */
static void
resolver_watch_use(struct resolver_watch *w, const struct resolver_answer *ans)
{
	int changed;

	metrics_resolver_lookup(w->name, 1);
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
resolver_watch_answer_cb(int error, const struct resolver_answer *ans, void *arg)
{
	struct resolver_watch *w = arg;
	struct resolver_answer merged, kept;
	char text[512];

	w->lookup = NULL;
	if (error == 0 && ans->partial != 0) {
		/* keep the last good addresses of the family whose query failed */
		if (resolver_watch_keep(w, ans, &merged, &kept) < 0)
			error = RESOLVER_ERR_NOMEM;
		else {
			if (kept.naddrs > 0 && w->partial++ == 0)
				log_warnx("resolver: cannot resolve %s (%s): %s; keeping %s",
				    w->name, ans->partial == AF_INET ? "A" : "AAAA",
				    resolver_strerror(ans->partial_error),
				    resolver_answer_text(&kept, text, sizeof(text)));
			resolver_answer_free(&kept);
			resolver_watch_use(w, &merged);
			resolver_answer_free(&merged);
			return;
		}
	}
	if (error == 0 && w->partial > 0) {
		log_info("resolver: %s resolves again in full after %u partial answer%s",
		    w->name, w->partial, w->partial == 1 ? "" : "s");
		w->partial = 0;
	}
	if (error != 0)
		resolver_watch_fail(w, error);
	else
		resolver_watch_use(w, ans);
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
