/*
 * Resolver: host names of upstream servers -> their A and AAAA addresses, with libevent's
 * asynchronous evdns.  Everything here runs on the main thread, never on a worker: a
 * synchronous lookup at configuration load, and watches that re-resolve a name periodically
 * and report when its addresses change.
 */
#ifndef JG_RESOLVER_H
#define JG_RESOLVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct config;
struct config_upstream;
struct config_server_name;
struct event_base;

/* One IP address, without a port. */
struct resolver_addr {
	sa_family_t family;             /* AF_INET or AF_INET6 */
	unsigned char ip[16];           /* network order; AF_INET uses the first 4 bytes */
};

/* What a name resolves to: its addresses sorted (IPv4 before IPv6, each in ascending byte
 * order) without duplicates, and the smallest TTL of the records, in seconds (UINT32_MAX for
 * an answer from the hosts file, which has none). */
struct resolver_answer {
	struct resolver_addr *addrs;
	size_t naddrs;
	uint32_t ttl;
	/* A lookup's answer whose A or AAAA query failed (an error, not "no record") while the
	 * other family gave addresses: that family (AF_INET or AF_INET6) and its error; the
	 * answer holds the other family's addresses only.  0 and 0 otherwise. */
	sa_family_t partial;
	int partial_error;
};

/* Errors besides evdns's DNS_ERR_* codes (event2/dns.h). */
#define RESOLVER_ERR_NOADDR     1000    /* the name exists but has no A or AAAA record */
#define RESOLVER_ERR_NOMEM      1001

/* A lookup's outcome: error 0 and the answer, or an error and NULL. */
typedef void (*resolver_cb)(int error, const struct resolver_answer *ans, void *arg);

struct resolver;
struct resolver_lookup;

/*
 * A resolver on base asking the nameserver at ns (a numeric address with its port), or the
 * nameservers, search list and options of /etc/resolv.conf when ns is NULL.  Either way a
 * name the hosts file lists (RESOLVER_HOSTS, or the file RESOLVER_HOSTS_ENV names when set)
 * resolves from that file alone, as getaddrinfo(3) does with "hosts: files dns".  NULL on
 * error, with the reason in err.
 */
#define RESOLVER_HOSTS          "/etc/hosts"
#define RESOLVER_HOSTS_ENV      "JSONGATE_HOSTS_FILE"

struct resolver *resolver_new(struct event_base *base, const struct sockaddr *ns,
    socklen_t nslen, char *err, size_t errlen);
/* Lookups still in flight end without calling back; their memory goes when base's loop
 * runs next (after the loop's end, one more EVLOOP_NONBLOCK run releases it). */
void resolver_free(struct resolver *r);

/* Look name up (in the hosts file, else A and AAAA at once) and call cb, always from base's
 * loop, with the merged answer.  The answer counts as good when it has at least one address:
 * a family whose query failed while the other gave addresses is left out (ans->partial says
 * so); only when neither gives an address does the lookup fail.  NULL when the lookup cannot
 * start (cb is not called). */
struct resolver_lookup *resolver_lookup(struct resolver *r, const char *name, resolver_cb cb,
    void *arg);
/* Forget a lookup in flight: its callback will not be called. */
void resolver_lookup_cancel(struct resolver_lookup *l);

/* Text for an error passed to a resolver_cb. */
const char *resolver_strerror(int error);

/*
 * At configuration load, on the main thread only: look the n names up at once on a private
 * event loop, waiting at most a few seconds.  For each name, errors[i] is 0 and answers[i]
 * filled, or an error code (answers[i] then stays empty).  Returns 0, or -1 when no resolver
 * could be set up (reason in err).
 */
int resolver_lookup_sync(const struct sockaddr *ns, socklen_t nslen, const char *const *names,
    size_t n, struct resolver_answer *answers, int *errors, char *err, size_t errlen);

/* Answers: free the addresses; copy (0, or -1 out of memory); same addresses (TTL aside). */
void resolver_answer_free(struct resolver_answer *ans);
int resolver_answer_copy(struct resolver_answer *dst, const struct resolver_answer *src);
int resolver_answer_same(const struct resolver_answer *a, const struct resolver_answer *b);
/* "10.0.0.1" or "fd00::1" into buf. */
const char *resolver_addr_text(const struct resolver_addr *addr, char *buf, size_t cap);

/*
 * Compare the sorted address lists of two answers: old_to_new[i] is the index in new of old's
 * address i, or -1 when it was removed; new_to_old[j] the index in old of new's address j, or
 * -1 when it was added.  The arrays hold old->naddrs and new->naddrs entries.
 */
void resolver_diff(const struct resolver_answer *old, const struct resolver_answer *new,
    long *old_to_new, long *new_to_old);

/* The wait before looking a name up again: the interval, or the answer's TTL when shorter,
 * but never less than RESOLVER_MIN_DELAY_MS. */
#define RESOLVER_MIN_DELAY_MS   1000
uint64_t resolver_delay(uint64_t interval_ms, uint32_t ttl);

/*
 * A watch looks name up again and again (resolver_delay after each answer, from the last good
 * one) and calls cb with the new answer only when the addresses changed.  A failing lookup
 * keeps the last good answer, and a partial one (ans->partial) the last good addresses of the
 * family that failed: it is logged once per streak of failures, and every lookup is
 * counted in jsongate_resolver_lookups_total{name,result}.  initial (may be NULL) is the
 * answer already known, from the configuration's load; without one the first lookup starts
 * at once.
 */
struct resolver_watch;
typedef void (*resolver_watch_cb)(struct resolver_watch *w, const struct resolver_answer *ans,
    void *arg);
struct resolver_watch *resolver_watch_new(struct resolver *r, const char *name,
    uint64_t interval_ms, const struct resolver_answer *initial, resolver_watch_cb cb,
    void *arg);
void resolver_watch_free(struct resolver_watch *w);
/* The last good answer (empty before the first one). */
const struct resolver_answer *resolver_watch_answer(const struct resolver_watch *w);

/*
 * Watch every server entry of cfg given by host name (cfg->upstreams[i].names) with a
 * resolver of its own on base (cfg->resolver, or /etc/resolv.conf): one watch per distinct
 * name, at the shortest resolve_interval of the upstreams using it.  A change is logged, and
 * cb (may be NULL) called once for each entry with that name, on base's thread; cfg itself is
 * never changed.  NULL when cfg has no named entry, or on error (logged).
 */
typedef void (*resolver_servers_cb)(struct config_upstream *up,
    struct config_server_name *entry, const struct resolver_answer *ans, void *arg);
struct resolver_watches;
struct resolver_watches *resolver_watch_config(struct event_base *base, struct config *cfg,
    resolver_servers_cb cb, void *arg);
/* Stop them; as resolver_free, lookups in flight end when base's loop runs next. */
void resolver_watches_free(struct resolver_watches *ws);

#endif
