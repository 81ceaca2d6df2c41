/*
 * Key sets fetched over HTTPS (a policy's jwks:), one per URL and CA for the whole daemon and
 * every load: fetched on the main thread's event loop (a connection of conn.c with the
 * verified TLS of tls.c, as the health checks do), so that no worker ever blocks on one.  The
 * workers read the last good set under a lock (a reference each); a token whose kid the set
 * lacks asks for one fetch now, at most once every AUTH_JWKS_KID_INTERVAL for the daemon,
 * through an eventfd the main loop reads.  A failing fetch keeps the last good set.
 */
#include "auth_jwks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "auth.h"
#include "config.h"
#include "conn.h"
#include "http.h"
#include "jwk.h"
#include "log.h"
#include "resolver.h"
#include "timers.h"
#include "tls.h"

#define AUTH_JWKS_TIMEOUT_MS 5000       /* one fetch, connect to the answer's end */
#define AUTH_JWKS_RETRY_MS 30000        /* after a failure, at the latest */
#define AUTH_JWKS_MIN_AGE_MS 60000      /* a max-age outside these bounds is not taken */
#define AUTH_JWKS_MAX_AGE_MS 86400000

struct auth_jwks {
	char *url, *ca;
	char *host;                     /* as written (brackets taken off an IPv6 address) */
	char *hostport;                 /* for the Host header */
	char *path;
	uint16_t port;

	pthread_mutex_t lock;           /* guards set */
	struct jwk_set *set;            /* the last good one, or NULL */
	atomic_uint generation;         /* bumped at every new set */
	atomic_int fetching;            /* a fetch is asked for or running */
	atomic_uint_fast64_t kid_asked_ms;  /* when a worker last asked for one */
	atomic_int wake_fd;             /* eventfd: a worker asks for a fetch now */

	/* The main thread's. */
	uint64_t refresh_ms;
	struct event_base *base;
	struct timers *timers;
	struct event *wake_ev, *timer;
	struct tls_client *tls;
	void *session;
	struct resolver *resolver;
	struct resolver_lookup *lookup;
	struct conn conn;
	int running;                    /* conn is open */
	struct auth_jwks *next;
};

static pthread_mutex_t auth_jwks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct auth_jwks *auth_jwks_all;

static uint64_t
auth_jwks_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int
auth_jwks_same(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* https://HOST[:PORT]/PATH: 0, or -1 with *why. */
static int
auth_jwks_split(struct auth_jwks *j, const char *url, const char **why)
{
	const char *h = url + 8, *end, *colon, *hend;
	unsigned long port = 443;
	char *e;

	end = h + strcspn(h, "/?#");
	if (*h == '[') {
		if ((hend = memchr(h, ']', (size_t)(end - h))) == NULL) {
			*why = "an IPv6 address without its ]";
			return -1;
		}
		j->host = strndup(h + 1, (size_t)(hend - h - 1));
		colon = hend + 1 < end && hend[1] == ':' ? hend + 1 : NULL;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		hend = colon != NULL ? colon : end;
		j->host = strndup(h, (size_t)(hend - h));
	}
	if (j->host == NULL || j->host[0] == '\0') {
		*why = "no host";
		return -1;
	}
	if (colon != NULL) {
		errno = 0;
		port = strtoul(colon + 1, &e, 10);
		if (e != end || port == 0 || port > 65535 || errno != 0) {
			*why = "a bad port";
			return -1;
		}
	}
	j->port = (uint16_t)port;
	j->hostport = strndup(h, (size_t)(end - h));
	j->path = strdup(*end == '/' ? end : "/");
	if (*end == '?' && j->path != NULL) {
		free(j->path);
		j->path = NULL;
		if (asprintf(&j->path, "/%s", end) < 0)
			j->path = NULL;
	}
	if (j->hostport == NULL || j->path == NULL) {
		*why = "out of memory";
		return -1;
	}
	if (strpbrk(j->path, " \r\n") != NULL) {
		*why = "a space or a line break in the path";
		return -1;
	}
	return 0;
}

struct auth_jwks *
auth_jwks_get(const char *url, const char *ca, const char **why)
{
	struct auth_jwks *j;

	pthread_mutex_lock(&auth_jwks_lock);
	for (j = auth_jwks_all; j != NULL; j = j->next)
		if (strcmp(j->url, url) == 0 && auth_jwks_same(j->ca, ca))
			break;
	if (j == NULL && (j = calloc(1, sizeof(*j))) != NULL) {
		j->wake_fd = -1;
		pthread_mutex_init(&j->lock, NULL);
		if ((j->url = strdup(url)) == NULL || (ca != NULL && (j->ca = strdup(ca)) == NULL) ||
		    auth_jwks_split(j, url, why) < 0) {
			if (j->url == NULL)
				*why = "out of memory";
			free(j->url);
			free(j->ca);
			free(j->host);
			free(j->hostport);
			free(j->path);
			pthread_mutex_destroy(&j->lock);
			free(j);
			j = NULL;
		} else {
			j->next = auth_jwks_all;
			auth_jwks_all = j;
		}
	} else if (j == NULL)
		*why = "out of memory";
	pthread_mutex_unlock(&auth_jwks_lock);
	return j;
}

struct jwk_set *
auth_jwks_keys(struct auth_jwks *j, unsigned *generation)
{
	struct jwk_set *set;

	pthread_mutex_lock(&j->lock);
	set = j->set != NULL ? jwk_set_ref(j->set) : NULL;
	*generation = atomic_load(&j->generation);
	pthread_mutex_unlock(&j->lock);
	return set;
}

unsigned
auth_jwks_generation(struct auth_jwks *j)
{
	return atomic_load(&j->generation);
}

int
auth_jwks_fetching(struct auth_jwks *j)
{
	return atomic_load(&j->fetching);
}

int
auth_jwks_refetch(struct auth_jwks *j)
{
	uint64_t now = auth_jwks_now_ms(), last = atomic_load(&j->kid_asked_ms);
	uint64_t one = 1;
	int expected = 0;

	if (atomic_load(&j->fetching))
		return 1;
	if (j->wake_fd < 0 || (last != 0 && now - last < AUTH_JWKS_KID_INTERVAL_MS) ||
	    !atomic_compare_exchange_strong(&j->kid_asked_ms, &last, now))
		return 0;
	if (!atomic_compare_exchange_strong(&j->fetching, &expected, 1))
		return 1;
	if (write(j->wake_fd, &one, sizeof(one)) < 0) {
		atomic_store(&j->fetching, 0);
		return 0;
	}
	return 1;
}

/* ------------------------------------------------------------------ main thread */

static void auth_jwks_fetch(struct auth_jwks *j);

static void
auth_jwks_schedule(struct auth_jwks *j, uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(j->timer, &tv);
}

static void
auth_jwks_close(struct auth_jwks *j)
{
	if (j->lookup != NULL) {
		resolver_lookup_cancel(j->lookup);
		j->lookup = NULL;
	}
	if (j->running) {
		conn_close(&j->conn);
		j->running = 0;
	}
}

/* The fetch ended: a new set (its max-age, or 0), or a failure (why). */
static void
auth_jwks_done(struct auth_jwks *j, struct jwk_set *set, uint64_t max_age_ms, const char *why)
{
	struct jwk_set *old;
	uint64_t next = j->refresh_ms;

	auth_jwks_close(j);
	if (set != NULL) {
		pthread_mutex_lock(&j->lock);
		old = j->set;
		j->set = set;
		atomic_fetch_add(&j->generation, 1);
		pthread_mutex_unlock(&j->lock);
		if (old != NULL)
			jwk_set_unref(old);
		auth_jwks_fetched(AUTH_JWKS_OK);
		log_info("auth: key set %s fetched: %zu key%s", j->url, set->n,
		    set->n == 1 ? "" : "s");
		if (max_age_ms >= AUTH_JWKS_MIN_AGE_MS && max_age_ms <= AUTH_JWKS_MAX_AGE_MS)
			next = max_age_ms;
	} else {
		auth_jwks_fetched(AUTH_JWKS_ERROR);
		log_warnx("auth: key set %s: %s; %s", j->url, why, j->set != NULL ?
		    "keeping the last one" : "tokens are refused until one is fetched");
		if (next > AUTH_JWKS_RETRY_MS)
			next = AUTH_JWKS_RETRY_MS;
	}
	atomic_store(&j->fetching, 0);
	auth_jwks_schedule(j, next);
}

static void
auth_jwks_skip(void *arg, size_t index, const char *kid, const char *reason)
{
	const struct auth_jwks *j = arg;

	log_warnx("auth: key set %s: key %zu%s%s%s skipped: %s", j->url, index,
	    kid != NULL ? " (kid " : "", kid != NULL ? kid : "", kid != NULL ? ")" : "", reason);
}

/* max-age=N of Cache-Control, in ms, or 0. */
static uint64_t
auth_jwks_max_age(const struct http_response *resp)
{
	struct http_str cc = http_find_header(resp->headers, resp->nheaders, "cache-control");
	uint64_t n = 0;
	size_t i;

	for (i = 0; i + 8 <= cc.len; i++)
		if (strncasecmp(cc.p + i, "max-age=", 8) == 0) {
			for (i += 8; i < cc.len && cc.p[i] >= '0' && cc.p[i] <= '9'; i++)
				if ((n = n * 10 + (uint64_t)(cc.p[i] - '0')) > 100000000)
					return 0;
			return n * 1000;
		}
	return 0;
}

/* The whole answer is in (the server closed): its key set. */
static void
auth_jwks_answer(struct auth_jwks *j)
{
	struct evbuffer *in = j->conn.in;
	size_t len = evbuffer_get_length(in);
	const char *p = (const char *)evbuffer_pullup(in, -1);
	struct http_response resp;
	struct jwk_set *set;
	char err[256], why[320];
	ssize_t r;

	if (len == 0) {
		auth_jwks_done(j, NULL, 0, "closed before answering");
		return;
	}
	r = http_parse_response(p, len, &resp);
	if (r <= 0) {
		auth_jwks_done(j, NULL, 0, "a malformed answer");
		return;
	}
	if (resp.status != 200) {
		snprintf(why, sizeof(why), "answered %d", resp.status);
		auth_jwks_done(j, NULL, 0, why);
		return;
	}
	if (resp.framing.chunked) {
		auth_jwks_done(j, NULL, 0, "a chunked answer to HTTP/1.0");
		return;
	}
	p += r;
	len -= (size_t)r;
	if (resp.framing.content_length >= 0) {
		if ((uint64_t)resp.framing.content_length > len) {
			auth_jwks_done(j, NULL, 0, "an answer cut short");
			return;
		}
		len = (size_t)resp.framing.content_length;
	}
	if ((set = jwk_set_parse(p, len, auth_jwks_skip, j, err, sizeof(err))) == NULL) {
		snprintf(why, sizeof(why), "not a key set: %s", err);
		auth_jwks_done(j, NULL, 0, why);
		return;
	}
	auth_jwks_done(j, set, auth_jwks_max_age(&resp), NULL);
}

/* The answer has a length and all of it is in: no need to wait for the close. */
static int
auth_jwks_complete(struct evbuffer *in)
{
	struct http_response resp;
	size_t len = evbuffer_get_length(in);
	ssize_t r = http_parse_response((const char *)evbuffer_pullup(in, -1), len, &resp);

	return r > 0 && !resp.framing.chunked && resp.framing.content_length >= 0 &&
	    len - (size_t)r >= (uint64_t)resp.framing.content_length;
}

static void
auth_jwks_conn_cb(struct conn *conn, int what, void *arg)
{
	struct auth_jwks *j = arg;
	char reason[200];

	if ((what & CONN_READ) && evbuffer_get_length(conn->in) > JWK_MAX_DOC + 65536) {
		auth_jwks_done(j, NULL, 0, "an answer over 256 KB");
		return;
	}
	if ((what & CONN_READ) && auth_jwks_complete(conn->in)) {
		auth_jwks_answer(j);
		return;
	}
	if (what & CONN_READ)
		conn_read_again(conn);
	if (what & (CONN_EOF | CONN_ERROR | CONN_TIMEOUT)) {
		if (conn->tls.failed) {
			tls_conn_error(conn, reason, sizeof(reason));
			auth_jwks_done(j, NULL, 0, reason);
		} else if (what & CONN_EOF)
			auth_jwks_answer(j);
		else
			auth_jwks_done(j, NULL, 0, conn->error ? strerror(conn->error) : "timeout");
		return;
	}
	conn_flush(conn);
}

static void
auth_jwks_connect(struct auth_jwks *j, const struct sockaddr *sa, socklen_t salen)
{
	int fd, one = 1;

	if ((fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		auth_jwks_done(j, NULL, 0, strerror(errno));
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (conn_init(&j->conn, j->timers, fd, auth_jwks_conn_cb, j) < 0) {
		close(fd);
		auth_jwks_done(j, NULL, 0, "out of memory");
		return;
	}
	j->running = 1;
	if (conn_connect(&j->conn, sa, salen) < 0 ||
	    tls_connect(&j->conn, j->tls, j->host, &j->session) < 0) {
		auth_jwks_done(j, NULL, 0, strerror(errno));
		return;
	}
	evbuffer_add_printf(j->conn.out, "GET %s HTTP/1.0\r\nHost: %s\r\n"
	    "User-Agent: jsongate/%s\r\nAccept: application/json\r\n\r\n", j->path, j->hostport,
	    PACKAGE_VERSION);
	conn_set_timeouts(&j->conn, AUTH_JWKS_TIMEOUT_MS, AUTH_JWKS_TIMEOUT_MS);
	conn_read_start(&j->conn);
	conn_flush(&j->conn);
}

static void
auth_jwks_resolved(int error, const struct resolver_answer *ans, void *arg)
{
	struct auth_jwks *j = arg;
	struct sockaddr_storage ss;
	char why[200];

	j->lookup = NULL;
	if (error != 0 || ans->naddrs == 0) {
		snprintf(why, sizeof(why), "%s: %s", j->host, resolver_strerror(error));
		auth_jwks_done(j, NULL, 0, why);
		return;
	}
	memset(&ss, 0, sizeof(ss));
	if (ans->addrs[0].family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(j->port);
		memcpy(&in->sin_addr, ans->addrs[0].ip, 4);
		auth_jwks_connect(j, (struct sockaddr *)in, sizeof(*in));
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(j->port);
		memcpy(&in6->sin6_addr, ans->addrs[0].ip, 16);
		auth_jwks_connect(j, (struct sockaddr *)in6, sizeof(*in6));
	}
}

static void
auth_jwks_fetch(struct auth_jwks *j)
{
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
	char err[200];

	if (j->running || j->lookup != NULL)
		return;
	atomic_store(&j->fetching, 1);
	evtimer_del(j->timer);
	memset(&in, 0, sizeof(in));
	memset(&in6, 0, sizeof(in6));
	if (inet_pton(AF_INET, j->host, &in.sin_addr) == 1) {
		in.sin_family = AF_INET;
		in.sin_port = htons(j->port);
		auth_jwks_connect(j, (struct sockaddr *)&in, sizeof(in));
		return;
	}
	if (inet_pton(AF_INET6, j->host, &in6.sin6_addr) == 1) {
		in6.sin6_family = AF_INET6;
		in6.sin6_port = htons(j->port);
		auth_jwks_connect(j, (struct sockaddr *)&in6, sizeof(in6));
		return;
	}
	if (j->resolver == NULL &&
	    (j->resolver = resolver_new(j->base, NULL, 0, err, sizeof(err))) == NULL) {
		auth_jwks_done(j, NULL, 0, err);
		return;
	}
	if ((j->lookup = resolver_lookup(j->resolver, j->host, auth_jwks_resolved, j)) == NULL)
		auth_jwks_done(j, NULL, 0, "cannot look the host up");
}

static void
auth_jwks_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	auth_jwks_fetch(arg);
}

static void
auth_jwks_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;

	(void)what;
	if (read(fd, &n, sizeof(n)) < 0)
		return;
	auth_jwks_fetch(arg);
}

static void
auth_jwks_tls_error(void *arg, enum tls_setting at, size_t index, const char *msg)
{
	const struct auth_jwks *j = arg;

	(void)at;
	(void)index;
	log_warnx("auth: key set %s: %s", j->url, msg);
}

/* Start fetching j on base (once), every refresh_ms at the longest. */
static void
auth_jwks_begin(struct auth_jwks *j, struct event_base *base, uint64_t refresh_ms)
{
	struct config_upstream_tls tc;
	int wake_fd;

	if (j->base != NULL) {
		if (refresh_ms < j->refresh_ms)
			j->refresh_ms = refresh_ms;
		return;
	}
	memset(&tc, 0, sizeof(tc));
	tc.verify = 1;
	tc.ca = j->ca;
	j->refresh_ms = refresh_ms;
	wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	atomic_store(&j->wake_fd, wake_fd);
	if ((j->tls = tls_client_new(&tc, auth_jwks_tls_error, j)) == NULL ||
	    (j->timers = timers_new(base)) == NULL || wake_fd < 0 ||
	    (j->timer = evtimer_new(base, auth_jwks_timer_cb, j)) == NULL ||
	    (j->wake_ev = event_new(base, wake_fd, EV_READ | EV_PERSIST, auth_jwks_wake_cb,
	    j)) == NULL || event_add(j->wake_ev, NULL) < 0) {
		log_warnx("auth: key set %s: cannot start fetching it", j->url);
		return;
	}
	j->base = base;
	auth_jwks_fetch(j);
}

void
auth_jwks_start(struct event_base *base, const struct config *cfg)
{
	for (size_t i = 0; i < cfg->nauth; i++)
		if (cfg->auth[i].kind == AUTH_KIND_JWT && cfg->auth[i].jwt.remote != NULL)
			auth_jwks_begin(cfg->auth[i].jwt.remote, base, cfg->auth[i].jwt.refresh);
}

void
auth_jwks_stop_all(void)
{
	struct auth_jwks *j;

	pthread_mutex_lock(&auth_jwks_lock);
	while ((j = auth_jwks_all) != NULL) {
		auth_jwks_all = j->next;
		auth_jwks_close(j);
		if (j->resolver != NULL)
			resolver_free(j->resolver);
		if (j->timer != NULL)
			event_free(j->timer);
		if (j->wake_ev != NULL)
			event_free(j->wake_ev);
		if (j->wake_fd >= 0)
			close(j->wake_fd);
		if (j->timers != NULL)
			timers_free(j->timers);
		if (j->tls != NULL)
			tls_client_free(j->tls);
		tls_session_free(j->session);
		if (j->set != NULL)
			jwk_set_unref(j->set);
		pthread_mutex_destroy(&j->lock);
		free(j->url);
		free(j->ca);
		free(j->host);
		free(j->hostport);
		free(j->path);
		free(j);
	}
	pthread_mutex_unlock(&auth_jwks_lock);
}
