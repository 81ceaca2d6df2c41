/*
 * Resolver: lookups, watches and server names in the configuration, against a DNS server of
 * this test's own (libevent's evdns server port on 127.0.0.1, in a thread with its own event
 * loop so that the synchronous lookup of configuration load can ask it too).  Waits are for
 * events (an answer, a query counted), each with a deadline; nothing is timed.
 */
#include <check.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "config.h"
#include "metrics.h"
#include "resolver.h"

#define DEADLINE_S      10      /* for anything awaited; a pass takes a few seconds at most */
#define MAX_RECORDS     8
#define MAX_NAMES       4

/* ------------------------------------------------------------------ the test DNS server */

enum dns_mode { DNS_ANSWER, DNS_SERVFAIL, DNS_REFUSED, DNS_DROP };

struct dns_name {
	char name[64];
	struct { int type; char addr[16]; int ttl; } rec[MAX_RECORDS];
	int nrec;
	int queries;
};

static struct {
	pthread_mutex_t lock;
	pthread_t thread;
	struct event_base *base;
	struct evdns_server_port *port;
	struct sockaddr_in sin;
	char address[32];               /* "127.0.0.1:PORT" */
	enum dns_mode mode;
	int refuse_aaaa;                /* answer A, refuse AAAA */
	struct dns_name names[MAX_NAMES];
	int nnames;
} dns;

static struct dns_name *
dns_find(const char *name)
{
	int i;

	for (i = 0; i < dns.nnames; i++)
		if (strcasecmp(dns.names[i].name, name) == 0)
			return &dns.names[i];
	return NULL;
}

static void
dns_request_cb(struct evdns_server_request *req, void *arg)
{
	struct evdns_server_question *q = req->questions[0];
	struct dns_name *n;
	int i, err = DNS_ERR_NONE;

	(void)arg;
	pthread_mutex_lock(&dns.lock);
	n = dns_find(q->name);
	if (n != NULL)
		n->queries++;
	if (dns.mode == DNS_DROP) {
		pthread_mutex_unlock(&dns.lock);
		evdns_server_request_drop(req);
		return;
	}
	if (dns.mode == DNS_SERVFAIL)
		err = DNS_ERR_SERVERFAILED;
	else if (dns.mode == DNS_REFUSED || (dns.refuse_aaaa && q->type == EVDNS_TYPE_AAAA))
		err = DNS_ERR_REFUSED;
	else if (n == NULL || n->nrec < 0)
		err = DNS_ERR_NOTEXIST;
	else
		for (i = 0; i < n->nrec; i++) {
			if (n->rec[i].type != q->type)
				continue;
			if (q->type == EVDNS_TYPE_A)
				evdns_server_request_add_a_reply(req, q->name, 1, n->rec[i].addr,
				    n->rec[i].ttl);
			else
				evdns_server_request_add_aaaa_reply(req, q->name, 1, n->rec[i].addr,
				    n->rec[i].ttl);
		}
	pthread_mutex_unlock(&dns.lock);
	evdns_server_request_respond(req, err);
}

static void *
dns_thread(void *arg)
{
	(void)arg;
	event_base_dispatch(dns.base);
	return NULL;
}

static void
dns_start(void)
{
	socklen_t len = sizeof(dns.sin);
	int fd;

	memset(&dns, 0, sizeof(dns));
	pthread_mutex_init(&dns.lock, NULL);
	ck_assert_int_eq(evthread_use_pthreads(), 0);
	ck_assert_ptr_nonnull(dns.base = event_base_new());
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	ck_assert_int_ge(fd, 0);
	dns.sin.sin_family = AF_INET;
	dns.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&dns.sin, sizeof(dns.sin)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&dns.sin, &len), 0);
	evutil_make_socket_nonblocking(fd);
	snprintf(dns.address, sizeof(dns.address), "127.0.0.1:%u", ntohs(dns.sin.sin_port));
	dns.port = evdns_add_server_port_with_base(dns.base, fd, 0, dns_request_cb, NULL);
	ck_assert_ptr_nonnull(dns.port);
	ck_assert_int_eq(pthread_create(&dns.thread, NULL, dns_thread, NULL), 0);
}

static void
dns_stop(void)
{
	event_base_loopbreak(dns.base);
	pthread_join(dns.thread, NULL);
	evdns_close_server_port(dns.port);
	event_base_free(dns.base);
}

/* Records of name: "A 10.0.0.1 30", "AAAA ::1 10", ...; none at all: NODATA. */
static void
dns_set(const char *name, int n, const char *const *records)
{
	struct dns_name *dn;
	char type[8], addr[64];
	int i, ttl;

	pthread_mutex_lock(&dns.lock);
	if ((dn = dns_find(name)) == NULL) {
		ck_assert_int_lt(dns.nnames, MAX_NAMES);
		dn = &dns.names[dns.nnames++];
		snprintf(dn->name, sizeof(dn->name), "%s", name);
	}
	dn->nrec = n;
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(sscanf(records[i], "%7s %63s %d", type, addr, &ttl), 3);
		dn->rec[i].type = strcmp(type, "A") == 0 ? EVDNS_TYPE_A : EVDNS_TYPE_AAAA;
		dn->rec[i].ttl = ttl;
		ck_assert_int_eq(inet_pton(strcmp(type, "A") == 0 ? AF_INET : AF_INET6, addr,
		    dn->rec[i].addr), 1);
	}
	pthread_mutex_unlock(&dns.lock);
}

static void
dns_set_mode(enum dns_mode mode)
{
	pthread_mutex_lock(&dns.lock);
	dns.mode = mode;
	pthread_mutex_unlock(&dns.lock);
}

static void
dns_refuse_aaaa(int on)
{
	pthread_mutex_lock(&dns.lock);
	dns.refuse_aaaa = on;
	pthread_mutex_unlock(&dns.lock);
}

/* name gets NXDOMAIN from now on (its queries still counted). */
static void
dns_remove(const char *name)
{
	dns_set(name, 0, NULL);
	pthread_mutex_lock(&dns.lock);
	dns_find(name)->nrec = -1;
	pthread_mutex_unlock(&dns.lock);
}

static int
dns_queries(const char *name)
{
	struct dns_name *dn;
	int n;

	pthread_mutex_lock(&dns.lock);
	dn = dns_find(name);
	n = dn ? dn->queries : 0;
	pthread_mutex_unlock(&dns.lock);
	return n;
}

/* ------------------------------------------------------------------ helpers */

static struct event_base *base;
static struct resolver *res;

static void
setup(void)
{
	char err[128];

	dns_start();
	ck_assert_ptr_nonnull(base = event_base_new());
	res = resolver_new(base, (struct sockaddr *)&dns.sin, sizeof(dns.sin), err, sizeof(err));
	ck_assert_msg(res != NULL, "%s", err);
}

static void
teardown(void)
{
	resolver_free(res);
	event_base_loop(base, EVLOOP_NONBLOCK);     /* the requests' last callbacks */
	event_base_free(base);
	dns_stop();
}

/* Run the loop until cond holds; fail after the deadline. */
#define RUN_UNTIL(cond, what) do { \
	time_t end_ = time(NULL) + DEADLINE_S; \
	while (!(cond)) { \
		ck_assert_msg(time(NULL) < end_, "no %s within %ds", (what), DEADLINE_S); \
		event_base_loop(base, EVLOOP_ONCE); \
	} \
} while (0)

/* "10.0.0.1 ::1" */
static char *
answer_text(const struct resolver_answer *ans, char *buf, size_t cap)
{
	char one[INET6_ADDRSTRLEN];
	size_t i, len = 0;

	buf[0] = '\0';
	for (i = 0; i < ans->naddrs; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "",
		    resolver_addr_text(&ans->addrs[i], one, sizeof(one)));
	return buf;
}

struct result {
	int done;
	int error;
	char text[256];
	uint32_t ttl;
};

static void
result_cb(int error, const struct resolver_answer *ans, void *arg)
{
	struct result *r = arg;

	r->done = 1;
	r->error = error;
	if (error == 0) {
		answer_text(ans, r->text, sizeof(r->text));
		r->ttl = ans->ttl;
	}
}

static struct result
lookup(const char *name)
{
	struct result r;

	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(resolver_lookup(res, name, result_cb, &r));
	RUN_UNTIL(r.done, "answer");
	return r;
}

/* An answer from "10.0.0.1 ::1"-style text, sorted as the resolver sorts. */
static struct resolver_answer
answer_of(const char *text, uint32_t ttl)
{
	struct resolver_answer ans = { NULL, 0, ttl, 0, 0 };
	char buf[256], *tok, *save;

	snprintf(buf, sizeof(buf), "%s", text);
	ans.addrs = calloc(8, sizeof(*ans.addrs));
	for (tok = strtok_r(buf, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
		struct resolver_addr *a = &ans.addrs[ans.naddrs++];
		a->family = strchr(tok, ':') ? AF_INET6 : AF_INET;
		ck_assert_int_eq(inet_pton(a->family, tok, a->ip), 1);
	}
	return ans;
}

/* ------------------------------------------------------------------ lookups */

START_TEST(test_a_and_aaaa_merged_sorted)
{
	static const char *const recs[] = {
		"AAAA fd00::2 60", "A 10.0.0.3 30", "A 10.0.0.1 45", "AAAA fd00::1 12",
		"A 10.0.0.3 30",
	};
	struct result r;

	dns_set("api.test", 5, recs);
	r = lookup("api.test");
	ck_assert_int_eq(r.error, 0);
	ck_assert_str_eq(r.text, "10.0.0.1 10.0.0.3 fd00::1 fd00::2");
	ck_assert_uint_eq(r.ttl, 12);
	ck_assert_int_eq(dns_queries("api.test"), 2);
	/* names are case-insensitive */
	r = lookup("API.Test");
	ck_assert_str_eq(r.text, "10.0.0.1 10.0.0.3 fd00::1 fd00::2");
}
END_TEST

START_TEST(test_one_family)
{
	static const char *const v4[] = { "A 10.0.0.7 300" };
	static const char *const v6[] = { "AAAA ::1 5" };
	struct result r;

	dns_set("v4.test", 1, v4);
	dns_set("v6.test", 1, v6);
	r = lookup("v4.test");
	ck_assert_int_eq(r.error, 0);
	ck_assert_str_eq(r.text, "10.0.0.7");
	ck_assert_uint_eq(r.ttl, 300);
	r = lookup("v6.test");
	ck_assert_int_eq(r.error, 0);
	ck_assert_str_eq(r.text, "::1");
	ck_assert_uint_eq(r.ttl, 5);
}
END_TEST

START_TEST(test_errors)
{
	static const char *const v4[] = { "A 10.0.0.7 300" };
	struct result r;

	r = lookup("unknown.test");
	ck_assert_int_eq(r.error, DNS_ERR_NOTEXIST);
	ck_assert_str_eq(resolver_strerror(r.error), "name does not exist");

	dns_set("empty.test", 0, NULL);
	r = lookup("empty.test");
	ck_assert_int_eq(r.error, RESOLVER_ERR_NOADDR);
	ck_assert_str_eq(resolver_strerror(r.error), "no A or AAAA record");

	/* both refused: the error */
	dns_set("half.test", 1, v4);
	dns_set_mode(DNS_REFUSED);
	r = lookup("half.test");
	ck_assert_int_eq(r.error, DNS_ERR_REFUSED);

	dns_set_mode(DNS_SERVFAIL);
	r = lookup("half.test");
	ck_assert_int_ne(r.error, 0);

	/* AAAA refused, no A record either */
	dns_set_mode(DNS_ANSWER);
	dns_refuse_aaaa(1);
	r = lookup("empty.test");
	ck_assert_int_eq(r.error, DNS_ERR_REFUSED);
}
END_TEST

struct partial {
	int done, error;
	char text[256];
	sa_family_t family;
	int family_error;
};

static void
partial_cb(int error, const struct resolver_answer *ans, void *arg)
{
	struct partial *p = arg;

	p->done = 1;
	p->error = error;
	if (error == 0) {
		answer_text(ans, p->text, sizeof(p->text));
		p->family = ans->partial;
		p->family_error = ans->partial_error;
	}
}

/* A resolver that answers A but refuses AAAA: the A addresses, the answer marked partial. */
START_TEST(test_a_without_aaaa)
{
	static const char *const v4[] = { "A 10.0.0.7 300", "AAAA fd00::7 300" };
	static const char *const v6[] = { "AAAA fd00::8 300" };
	const char *names[] = { "half.test" };
	struct resolver_answer answers[1];
	struct partial p = { 0, 0, "", 0, 0 };
	char err[128], text[128];
	int errors[1];

	dns_set("half.test", 2, v4);
	dns_set("v6only.test", 1, v6);
	dns_refuse_aaaa(1);
	ck_assert_ptr_nonnull(resolver_lookup(res, "half.test", partial_cb, &p));
	RUN_UNTIL(p.done, "answer");
	ck_assert_int_eq(p.error, 0);
	ck_assert_str_eq(p.text, "10.0.0.7");
	ck_assert_int_eq(p.family, AF_INET6);
	ck_assert_int_eq(p.family_error, DNS_ERR_REFUSED);

	/* at load too */
	ck_assert_int_eq(resolver_lookup_sync((struct sockaddr *)&dns.sin, sizeof(dns.sin), names,
	    1, answers, errors, err, sizeof(err)), 0);
	ck_assert_int_eq(errors[0], 0);
	ck_assert_str_eq(answer_text(&answers[0], text, sizeof(text)), "10.0.0.7");
	resolver_answer_free(&answers[0]);

	/* the refused family was the only one with addresses: the name fails */
	memset(&p, 0, sizeof(p));
	ck_assert_ptr_nonnull(resolver_lookup(res, "v6only.test", partial_cb, &p));
	RUN_UNTIL(p.done, "answer");
	ck_assert_int_eq(p.error, DNS_ERR_REFUSED);

	/* a whole answer is not partial */
	dns_refuse_aaaa(0);
	memset(&p, 0, sizeof(p));
	ck_assert_ptr_nonnull(resolver_lookup(res, "half.test", partial_cb, &p));
	RUN_UNTIL(p.done, "answer");
	ck_assert_str_eq(p.text, "10.0.0.7 fd00::7");
	ck_assert_int_eq(p.family, 0);
}
END_TEST

/* ------------------------------------------------------------------ the hosts file */

static char hosts_path[64];

static void
hosts_write(const char *text)
{
	FILE *f;

	ck_assert_ptr_nonnull(f = fopen(hosts_path, "w"));
	fputs(text, f);
	fclose(f);
}

/* A hosts file of the test's own, named by the environment, and a resolver reading it. */
static struct resolver *
hosts_resolver(const char *text)
{
	struct resolver *r;
	char err[128];
	int fd;

	snprintf(hosts_path, sizeof(hosts_path), "/tmp/check_resolver_hosts.XXXXXX");
	ck_assert_int_ge(fd = mkstemp(hosts_path), 0);
	close(fd);
	hosts_write(text);
	ck_assert_int_eq(setenv(RESOLVER_HOSTS_ENV, hosts_path, 1), 0);
	r = resolver_new(base, (struct sockaddr *)&dns.sin, sizeof(dns.sin), err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	return r;
}

static struct result
lookup_with(struct resolver *r, const char *name)
{
	struct result res_;

	memset(&res_, 0, sizeof(res_));
	ck_assert_ptr_nonnull(resolver_lookup(r, name, result_cb, &res_));
	/* never called back before the loop runs */
	ck_assert_int_eq(res_.done, 0);
	RUN_UNTIL(res_.done, "answer");
	return res_;
}

static const char hosts_text[] =
    "# extra_hosts\n"
    "127.0.0.1\tlocalhost\n"
    "10.1.0.1   alpha.test alias.test   # the first line naming it\n"
    "fd00::a alpha.test\n"
    "10.1.0.2 other.test ALPHA.TEST.\n"
    "10.1.0.2 alpha.test\n"
    "not-an-address beta.test\n"
    "10.1.0.9 #beta.test\n"
    "10.1.0.3 gamma.test";               /* no final newline */

/* Names the hosts file lists resolve from it, as getaddrinfo gives them; DNS is not asked. */
START_TEST(test_hosts_file)
{
	static const char *const dnsrecs[] = { "A 10.9.9.9 30" };
	struct resolver *r;
	struct result got;

	dns_set("alpha.test", 1, dnsrecs);
	dns_set("beta.test", 1, dnsrecs);
	r = hosts_resolver(hosts_text);
	got = lookup_with(r, "alpha.test");
	ck_assert_int_eq(got.error, 0);
	ck_assert_str_eq(got.text, "10.1.0.1 10.1.0.2 fd00::a");
	ck_assert_uint_eq(got.ttl, UINT32_MAX);
	got = lookup_with(r, "Alias.Test.");
	ck_assert_str_eq(got.text, "10.1.0.1");
	got = lookup_with(r, "gamma.test");
	ck_assert_str_eq(got.text, "10.1.0.3");
	ck_assert_int_eq(dns_queries("alpha.test"), 0);
	/* not in the file (a bad address, a comment): DNS */
	got = lookup_with(r, "beta.test");
	ck_assert_str_eq(got.text, "10.9.9.9");
	ck_assert_int_eq(dns_queries("beta.test"), 2);
	got = lookup_with(r, "delta.test");
	ck_assert_int_eq(got.error, DNS_ERR_NOTEXIST);

	/* the file is read again when it changes */
	hosts_write("10.1.0.77 alpha.test\n");
	got = lookup_with(r, "alpha.test");
	ck_assert_str_eq(got.text, "10.1.0.77");
	/* and without it, DNS */
	unlink(hosts_path);
	got = lookup_with(r, "alpha.test");
	ck_assert_str_eq(got.text, "10.9.9.9");
	resolver_free(r);
}
END_TEST

/* A lookup from the file, cancelled or in flight when its resolver goes, ends quietly. */
START_TEST(test_hosts_cancel_and_free)
{
	struct resolver *r = hosts_resolver(hosts_text);
	struct resolver_lookup *l;
	struct result got;

	memset(&got, 0, sizeof(got));
	ck_assert_ptr_nonnull(l = resolver_lookup(r, "alpha.test", result_cb, &got));
	resolver_lookup_cancel(l);
	ck_assert_ptr_nonnull(resolver_lookup(r, "gamma.test", result_cb, &got));
	resolver_free(r);
	event_base_loop(base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(got.done, 0);
	unlink(hosts_path);
}
END_TEST

/* At load: the file first, DNS for the rest. */
START_TEST(test_hosts_sync)
{
	static const char *const dnsrecs[] = { "AAAA fd00::99 30" };
	const char *names[] = { "alpha.test", "dns.test" };
	struct resolver_answer answers[2];
	char err[128], text[128];
	int errors[2];

	dns_set("dns.test", 1, dnsrecs);
	resolver_free(hosts_resolver(hosts_text));
	ck_assert_int_eq(resolver_lookup_sync((struct sockaddr *)&dns.sin, sizeof(dns.sin), names,
	    2, answers, errors, err, sizeof(err)), 0);
	ck_assert_int_eq(errors[0], 0);
	ck_assert_str_eq(answer_text(&answers[0], text, sizeof(text)), "10.1.0.1 10.1.0.2 fd00::a");
	ck_assert_int_eq(errors[1], 0);
	ck_assert_str_eq(answer_text(&answers[1], text, sizeof(text)), "fd00::99");
	resolver_answer_free(&answers[0]);
	resolver_answer_free(&answers[1]);
	unlink(hosts_path);
}
END_TEST

START_TEST(test_cancel)
{
	static const char *const v4[] = { "A 10.0.0.7 300" };
	struct result r, other;
	struct resolver_lookup *l;

	dns_set("a.test", 1, v4);
	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(l = resolver_lookup(res, "a.test", result_cb, &r));
	resolver_lookup_cancel(l);
	other = lookup("a.test");
	ck_assert_int_eq(other.error, 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(r.done, 0);
}
END_TEST

START_TEST(test_free_with_lookups_in_flight)
{
	struct result r;

	memset(&r, 0, sizeof(r));
	dns_set("a.test", 0, NULL);
	dns_set_mode(DNS_DROP);
	ck_assert_ptr_nonnull(resolver_lookup(res, "a.test", result_cb, &r));
	RUN_UNTIL(dns_queries("a.test") >= 2, "queries");
	resolver_free(res);
	res = NULL;
	event_base_loop(base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(r.done, 0);
}
END_TEST

START_TEST(test_sync)
{
	static const char *const recs[] = { "A 10.0.0.2 20", "A 10.0.0.1 40" };
	const char *names[] = { "s.test", "nothing.test" };
	struct resolver_answer answers[2];
	char err[128], text[128];
	int errors[2];

	dns_set("s.test", 2, recs);
	ck_assert_int_eq(resolver_lookup_sync((struct sockaddr *)&dns.sin, sizeof(dns.sin), names,
	    2, answers, errors, err, sizeof(err)), 0);
	ck_assert_int_eq(errors[0], 0);
	ck_assert_str_eq(answer_text(&answers[0], text, sizeof(text)), "10.0.0.1 10.0.0.2");
	ck_assert_uint_eq(answers[0].ttl, 20);
	ck_assert_int_eq(errors[1], DNS_ERR_NOTEXIST);
	ck_assert_uint_eq(answers[1].naddrs, 0);
	resolver_answer_free(&answers[0]);
}
END_TEST

/* ------------------------------------------------------------------ pure helpers */

START_TEST(test_delay)
{
	ck_assert_uint_eq(resolver_delay(30000, 3600), 30000);     /* the interval */
	ck_assert_uint_eq(resolver_delay(30000, 5), 5000);         /* a shorter TTL */
	ck_assert_uint_eq(resolver_delay(30000, 0), RESOLVER_MIN_DELAY_MS);
	ck_assert_uint_eq(resolver_delay(30000, UINT32_MAX), 30000);
	ck_assert_uint_eq(resolver_delay(1000, 1), 1000);
}
END_TEST

/* Answers compare by their addresses; a copy is the same. */
START_TEST(test_answer_same)
{
	struct resolver_answer a = answer_of("10.0.0.1 ::1", 5);
	struct resolver_answer b = answer_of("10.0.0.1 ::2", 5);
	struct resolver_answer c = { NULL, 0, 0, 0, 0 }, none = { NULL, 0, 0, 0, 0 };

	ck_assert(resolver_answer_same(&a, &a));
	ck_assert(!resolver_answer_same(&a, &b));
	ck_assert(!resolver_answer_same(&a, &none));
	ck_assert(resolver_answer_same(&none, &c));
	ck_assert_int_eq(resolver_answer_copy(&c, &b), 0);
	ck_assert(resolver_answer_same(&c, &b));
	ck_assert_uint_eq(c.ttl, 5);
	c.ttl = 60;                     /* the TTL does not count */
	ck_assert(resolver_answer_same(&c, &b));
	resolver_answer_free(&a);
	resolver_answer_free(&b);
	resolver_answer_free(&c);
}
END_TEST

/* Which addresses were kept, removed and added, by index. */
START_TEST(test_diff)
{
	struct resolver_answer old = answer_of("10.0.0.1 10.0.0.2 10.0.0.4 ::1", 0);
	struct resolver_answer new = answer_of("10.0.0.2 10.0.0.3 10.0.0.4 fd00::1 fd00::2", 0);
	struct resolver_answer none = { NULL, 0, 0, 0, 0 };
	long o2n[4], n2o[5];

	resolver_diff(&old, &new, o2n, n2o);
	ck_assert_int_eq(o2n[0], -1);           /* 10.0.0.1 removed */
	ck_assert_int_eq(o2n[1], 0);            /* 10.0.0.2 kept, now first */
	ck_assert_int_eq(o2n[2], 2);            /* 10.0.0.4 kept */
	ck_assert_int_eq(o2n[3], -1);           /* ::1 removed */
	ck_assert_int_eq(n2o[0], 1);
	ck_assert_int_eq(n2o[1], -1);           /* 10.0.0.3 added */
	ck_assert_int_eq(n2o[2], 2);
	ck_assert_int_eq(n2o[3], -1);           /* fd00::1 and fd00::2 added */
	ck_assert_int_eq(n2o[4], -1);

	resolver_diff(&none, &new, NULL, n2o);
	ck_assert_int_eq(n2o[0] + n2o[1] + n2o[2] + n2o[3] + n2o[4], -5);
	resolver_diff(&old, &none, o2n, NULL);
	ck_assert_int_eq(o2n[0] + o2n[1] + o2n[2] + o2n[3], -4);
	resolver_diff(&old, &old, o2n, o2n);
	ck_assert_int_eq(o2n[3], 3);
	resolver_answer_free(&old);
	resolver_answer_free(&new);
}
END_TEST

/* ------------------------------------------------------------------ watches */

struct changes {
	int n;
	char last[256];
};

static void
watch_cb(struct resolver_watch *w, const struct resolver_answer *ans, void *arg)
{
	struct changes *c = arg;

	(void)w;
	c->n++;
	answer_text(ans, c->last, sizeof(c->last));
}

static char *
metrics_text(void)
{
	struct evbuffer *out = evbuffer_new();
	size_t len;
	char *text;

	metrics_write(out);
	len = evbuffer_get_length(out);
	text = malloc(len + 1);
	evbuffer_remove(out, text, len);
	text[len] = '\0';
	evbuffer_free(out);
	return text;
}

/* jsongate_resolver_lookups_total of name with result "success" or "failure". */
static unsigned
lookups(const char *name, const char *result)
{
	char want[256], *text = metrics_text(), *p;
	unsigned n = 0;

	snprintf(want, sizeof(want), "jsongate_resolver_lookups_total{name=\"%s\","
	    "result=\"%s\"} ", name, result);
	if ((p = strstr(text, want)) != NULL)
		n = (unsigned)strtoul(p + strlen(want), NULL, 10);
	free(text);
	return n;
}

/* stderr into a file, to read the log lines written meanwhile. */
static char log_path[64];
static int saved_stderr = -1;

static void
log_capture(void)
{
	int fd;

	snprintf(log_path, sizeof(log_path), "/tmp/check_resolver_log.XXXXXX");
	ck_assert_int_ge(fd = mkstemp(log_path), 0);
	fflush(stderr);
	saved_stderr = dup(2);
	dup2(fd, 2);
	close(fd);
}

/* How many captured lines contain text. */
static int
log_count(const char *text)
{
	char line[1024];
	FILE *f;
	int n = 0;

	fflush(stderr);
	ck_assert_ptr_nonnull(f = fopen(log_path, "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

static void
log_release(void)
{
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	unlink(log_path);
}

/* Calls back only when the addresses change. */
START_TEST(test_watch_reports_changes_only)
{
	static const char *const one[] = { "A 10.0.0.1 1" };
	static const char *const two[] = { "A 10.0.0.2 1", "A 10.0.0.1 1" };
	struct resolver_answer initial = answer_of("10.0.0.1", 1);
	struct changes c = { 0, "" };
	struct resolver_watch *w;
	char text[128];

	dns_set("w.test", 1, one);
	ck_assert_ptr_nonnull(w = resolver_watch_new(res, "w.test", 60000, &initial, watch_cb,
	    &c));
	RUN_UNTIL(lookups("w.test", "success") == 2, "two lookups");
	ck_assert_int_eq(c.n, 0);
	dns_set("w.test", 2, two);
	RUN_UNTIL(c.n > 0, "change");
	ck_assert_uint_eq(lookups("w.test", "success"), 3);
	ck_assert_str_eq(c.last, "10.0.0.1 10.0.0.2");
	ck_assert_str_eq(answer_text(resolver_watch_answer(w), text, sizeof(text)),
	    "10.0.0.1 10.0.0.2");
	RUN_UNTIL(lookups("w.test", "success") == 4, "a fourth lookup");
	ck_assert_int_eq(c.n, 1);
	ck_assert_uint_eq(lookups("w.test", "failure"), 0);
	resolver_watch_free(w);
	resolver_answer_free(&initial);
}
END_TEST

/* With the interval at a minute, a TTL of 1 s brings the next lookup well before. */
START_TEST(test_watch_honours_short_ttl)
{
	static const char *const recs[] = { "A 10.0.0.1 1" };
	struct resolver_answer initial = answer_of("10.0.0.1", 1);
	struct changes c = { 0, "" };
	struct resolver_watch *w;

	dns_set("ttl.test", 1, recs);
	ck_assert_ptr_nonnull(w = resolver_watch_new(res, "ttl.test", 60000, &initial,
	    watch_cb, &c));
	ck_assert_int_eq(dns_queries("ttl.test"), 0);
	RUN_UNTIL(lookups("ttl.test", "success") == 2, "two lookups");
	ck_assert_int_eq(c.n, 0);
	resolver_watch_free(w);
	resolver_answer_free(&initial);
}
END_TEST

/* Without an initial answer the first lookup starts at once and reports the addresses. */
START_TEST(test_watch_without_initial)
{
	static const char *const recs[] = { "AAAA ::1 300" };
	struct changes c = { 0, "" };
	struct resolver_watch *w;

	dns_set("new.test", 1, recs);
	ck_assert_ptr_nonnull(w = resolver_watch_new(res, "new.test", 60000, NULL, watch_cb,
	    &c));
	ck_assert_uint_eq(resolver_watch_answer(w)->naddrs, 0);
	RUN_UNTIL(c.n > 0, "first answer");
	ck_assert_str_eq(c.last, "::1");
	resolver_watch_free(w);
}
END_TEST

/*
 * Failing lookups keep the last good answer: logged once for the streak, each counted; the
 * first good answer after them is logged and reported when it differs.
 */
START_TEST(test_watch_keeps_last_good_answer)
{
	static const char *const recs[] = { "A 10.0.0.9 1" };
	struct resolver_answer initial = answer_of("10.0.0.1 10.0.0.2", 1);
	struct changes c = { 0, "" };
	struct resolver_watch *w;
	char text[128];

	log_capture();
	dns_set("f.test", 1, recs);
	dns_set_mode(DNS_REFUSED);
	ck_assert_ptr_nonnull(w = resolver_watch_new(res, "f.test", 60000, &initial, watch_cb,
	    &c));
	RUN_UNTIL(lookups("f.test", "failure") == 3, "three failed lookups");
	ck_assert_int_eq(c.n, 0);
	ck_assert_str_eq(answer_text(resolver_watch_answer(w), text, sizeof(text)),
	    "10.0.0.1 10.0.0.2");
	ck_assert_int_eq(log_count("resolver: cannot resolve f.test: refused; keeping "
	    "10.0.0.1, 10.0.0.2"), 1);

	dns_set_mode(DNS_ANSWER);
	RUN_UNTIL(c.n > 0, "recovery");
	ck_assert_str_eq(c.last, "10.0.0.9");
	ck_assert_str_eq(answer_text(resolver_watch_answer(w), text, sizeof(text)), "10.0.0.9");
	ck_assert_uint_eq(lookups("f.test", "success"), 1);
	ck_assert_uint_eq(lookups("f.test", "failure"), 3);
	ck_assert_int_eq(log_count("resolver: f.test resolves again after 3 failed lookups"), 1);

	/* a new streak is logged again */
	dns_remove("f.test");
	RUN_UNTIL(lookups("f.test", "failure") == 4, "a failed lookup");
	ck_assert_int_eq(log_count("resolver: cannot resolve f.test: name does not exist; "
	    "keeping 10.0.0.9"), 1);
	ck_assert_int_eq(c.n, 1);
	resolver_watch_free(w);
	resolver_answer_free(&initial);
	log_release();
}
END_TEST

/*
 * AAAA refused while A answers: the new A addresses are used, the last good AAAA ones kept
 * (logged once for the streak); a whole answer again is logged and used as it is.
 */
START_TEST(test_watch_partial_keeps_failed_family)
{
	static const char *const recs[] = { "A 10.0.0.2 1", "AAAA fd00::2 1" };
	struct resolver_answer initial = answer_of("10.0.0.1 fd00::1", 1);
	struct changes c = { 0, "" };
	struct resolver_watch *w;

	log_capture();
	dns_set("p.test", 2, recs);
	dns_refuse_aaaa(1);
	ck_assert_ptr_nonnull(w = resolver_watch_new(res, "p.test", 60000, &initial, watch_cb,
	    &c));
	RUN_UNTIL(c.n > 0, "change");
	ck_assert_str_eq(c.last, "10.0.0.2 fd00::1");
	RUN_UNTIL(lookups("p.test", "success") == 2, "a second lookup");
	ck_assert_int_eq(c.n, 1);
	ck_assert_uint_eq(lookups("p.test", "failure"), 0);
	ck_assert_int_eq(log_count("resolver: cannot resolve p.test (AAAA): refused; keeping "
	    "fd00::1"), 1);

	dns_refuse_aaaa(0);
	RUN_UNTIL(c.n > 1, "recovery");
	ck_assert_str_eq(c.last, "10.0.0.2 fd00::2");
	ck_assert_int_eq(log_count("resolver: p.test resolves again in full after 2 partial "
	    "answers"), 1);
	resolver_watch_free(w);
	resolver_answer_free(&initial);
	log_release();
}
END_TEST

/* ------------------------------------------------------------------ the configuration */

static char conf_path[64];

static struct config *
load(const char *fmt, char **errors)
{
	char text[4096];
	FILE *f;
	int fd;

	snprintf(conf_path, sizeof(conf_path), "/tmp/check_resolver.XXXXXX");
	ck_assert_int_ge(fd = mkstemp(conf_path), 0);
	close(fd);
	snprintf(text, sizeof(text), fmt, dns.address);
	ck_assert_ptr_nonnull(f = fopen(conf_path, "w"));
	fputs(text, f);
	fclose(f);
	return config_load(conf_path, errors);
}

static const char config_names[] =
    "listeners: [ { listen: 127.0.0.1:8080 } ]\n"
    "resolver: %s\n"
    "upstreams:\n"
    "  app:\n"
    "    servers: [ API.test.:9000, 127.0.0.1:9002, { address: api.test:9001, weight: 3 },"
    " v6.test:9003, localhost:9004 ]\n"
    "    resolve_interval: 60s\n"
    "  other:\n"
    "    servers: [ api.test:80 ]\n"
    "routes: [ { upstream: app } ]\n";

START_TEST(test_config_expands_names)
{
	static const char *const api[] = { "A 127.0.0.3 20", "A 127.0.0.2 20", "AAAA ::1 7" };
	static const char *const v6[] = { "AAAA fd00::5 300" };
	static const char *const texts[] = {
		"127.0.0.2:9000", "127.0.0.3:9000", "[::1]:9000", "127.0.0.1:9002",
		"127.0.0.2:9001", "127.0.0.3:9001", "[::1]:9001", "[fd00::5]:9003",
		"localhost:9004",
	};
	static const unsigned weights[] = { 1, 1, 1, 1, 3, 3, 3, 1, 1 };
	static const char *const names[] = {
		"api.test", "api.test", "api.test", NULL, "api.test", "api.test", "api.test",
		"v6.test", NULL,
	};
	struct config_upstream *up;
	struct config *cfg;
	char *errors = NULL, text[128];
	size_t i;

	dns_set("api.test", 3, api);
	dns_set("v6.test", 1, v6);
	cfg = load(config_names, &errors);
	ck_assert_msg(cfg != NULL, "%s", errors);
	ck_assert_str_eq(cfg->resolver->text, dns.address);
	/* one lookup per distinct name */
	ck_assert_int_eq(dns_queries("api.test"), 2);
	up = &cfg->upstreams[0];
	ck_assert_uint_eq(up->resolve_interval, 60000);
	ck_assert_uint_eq(cfg->upstreams[1].resolve_interval, 30000);
	ck_assert_uint_eq(up->nservers, 9);
	for (i = 0; i < up->nservers; i++) {
		const struct config_server *s = &up->servers[i];
		ck_assert_str_eq(s->addr.text, texts[i]);
		ck_assert_uint_eq(s->weight, weights[i]);
		if (names[i] == NULL)
			ck_assert_ptr_null(s->addr.name);
		else
			ck_assert_str_eq(s->addr.name, names[i]);
	}
	ck_assert_str_eq(up->servers[2].addr.host, "::1");
	ck_assert_uint_eq(up->servers[2].addr.ss.ss_family, AF_INET6);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in6 *)&up->servers[2].addr.ss)->sin6_port),
	    9000);

	ck_assert_uint_eq(up->nnames, 3);
	ck_assert_str_eq(up->names[0].host, "api.test");
	ck_assert_uint_eq(up->names[0].port, 9000);
	ck_assert_uint_eq(up->names[0].entry, 0);
	ck_assert_uint_eq(up->names[0].first, 0);
	ck_assert_uint_eq(up->names[0].count, 3);
	ck_assert_uint_eq(up->names[0].answer.ttl, 7);
	ck_assert_str_eq(answer_text(&up->names[0].answer, text, sizeof(text)),
	    "127.0.0.2 127.0.0.3 ::1");
	ck_assert_uint_eq(up->names[1].entry, 2);
	ck_assert_uint_eq(up->names[1].first, 4);
	ck_assert_uint_eq(up->names[1].settings.weight, 3);
	ck_assert_ptr_null(up->names[1].settings.addr.text);
	ck_assert_uint_eq(up->names[2].entry, 3);
	ck_assert_uint_eq(up->names[2].first, 7);
	ck_assert_uint_eq(up->names[2].count, 1);
	ck_assert_uint_eq(cfg->upstreams[1].nservers, 3);
	ck_assert_uint_eq(cfg->upstreams[1].nnames, 1);
	config_free(cfg);
	unlink(conf_path);
}
END_TEST

START_TEST(test_config_servers_from_name)
{
	static const char *const api[] = { "A 127.0.0.2 20" };
	struct resolver_answer ans = answer_of("10.1.0.1 fd00::7", 9);
	struct config_server *servers;
	struct config *cfg;
	char *errors = NULL;

	dns_set("api.test", 1, api);
	dns_set("v6.test", 1, api);
	cfg = load(config_names, &errors);
	ck_assert_msg(cfg != NULL, "%s", errors);
	ck_assert_uint_eq(config_servers_from_name(&cfg->upstreams[0].names[1], &ans, &servers),
	    2);
	ck_assert_str_eq(servers[0].addr.text, "10.1.0.1:9001");
	ck_assert_str_eq(servers[0].addr.host, "10.1.0.1");
	ck_assert_str_eq(servers[0].addr.name, "api.test");
	ck_assert_uint_eq(servers[0].weight, 3);
	ck_assert_str_eq(servers[1].addr.text, "[fd00::7]:9001");
	ck_assert_uint_eq(servers[1].addr.port, 9001);
	ck_assert_uint_eq(servers[1].weight, 3);
	config_servers_free(servers, 2);
	resolver_answer_free(&ans);
	config_free(cfg);
	unlink(conf_path);
}
END_TEST

START_TEST(test_config_name_errors)
{
	struct config *cfg;
	char *errors = NULL, want[1024];

	cfg = load("listeners: [ { listen: 127.0.0.1:8080 } ]\n"
	    "resolver: %s\n"
	    "upstreams:\n"
	    "  app:\n"
	    "    servers: [ nowhere.test:9000, { address: nowhere.test:9001 }, empty.test:1 ]\n"
	    "routes: [ { upstream: app } ]\n", &errors);
	ck_assert_ptr_null(cfg);
	snprintf(want, sizeof(want),
	    "%s:5:16: upstreams.app.servers[0]: cannot resolve \"nowhere.test\": "
	    "name does not exist\n"
	    "%s:5:46: upstreams.app.servers[1].address: cannot resolve \"nowhere.test\": "
	    "name does not exist\n"
	    "%s:5:67: upstreams.app.servers[2]: cannot resolve \"empty.test\": "
	    "name does not exist\n", conf_path, conf_path, conf_path);
	ck_assert_str_eq(errors, want);
	free(errors);
	unlink(conf_path);

	/* the nameserver does not answer: the load gives up after a few seconds */
	dns_set_mode(DNS_DROP);
	cfg = load("listeners: [ { listen: 127.0.0.1:8080 } ]\n"
	    "resolver: %s\n"
	    "upstreams: { app: { servers: [ slow.test:9000 ] } }\n", &errors);
	ck_assert_ptr_null(cfg);
	snprintf(want, sizeof(want), "%s:3:32: upstreams.app.servers[0]: cannot resolve "
	    "\"slow.test\": request timed out\n", conf_path);
	ck_assert_str_eq(errors, want);
	free(errors);
	unlink(conf_path);
}
END_TEST

struct entry_changes {
	int n;
	char seen[512];
};

static void
servers_cb(struct config_upstream *up, struct config_server_name *entry,
    const struct resolver_answer *ans, void *arg)
{
	struct entry_changes *c = arg;
	char text[128];
	size_t len = strlen(c->seen);

	c->n++;
	snprintf(c->seen + len, sizeof(c->seen) - len, "%s%s %s:%u -> %s", len ? "; " : "",
	    up->name, entry->host, entry->port, answer_text(ans, text, sizeof(text)));
}

/* One watch per distinct name; a change is reported for every entry with that name. */
START_TEST(test_watch_config)
{
	static const char *const api[] = { "A 127.0.0.2 1" };
	static const char *const api2[] = { "A 127.0.0.4 1" };
	static const char *const v6[] = { "AAAA fd00::5 300" };
	struct entry_changes c;
	struct resolver_watches *ws;
	struct config *cfg;
	char *errors = NULL;

	memset(&c, 0, sizeof(c));
	dns_set("api.test", 1, api);
	dns_set("v6.test", 1, v6);
	cfg = load(config_names, &errors);
	ck_assert_msg(cfg != NULL, "%s", errors);
	ck_assert_int_eq(dns_queries("api.test"), 2);
	ck_assert_ptr_nonnull(ws = resolver_watch_config(base, cfg, servers_cb, &c));
	RUN_UNTIL(lookups("api.test", "success") == 1, "a lookup");
	ck_assert_int_eq(c.n, 0);
	dns_set("api.test", 1, api2);
	RUN_UNTIL(c.n > 0, "change");
	ck_assert_int_eq(c.n, 3);
	ck_assert_str_eq(c.seen, "app api.test:9000 -> 127.0.0.4; app api.test:9001 -> "
	    "127.0.0.4; other api.test:80 -> 127.0.0.4");
	/* the configuration stays as loaded */
	ck_assert_str_eq(cfg->upstreams[0].servers[0].addr.text, "127.0.0.2:9000");
	/* v6.test: TTL 300 and the interval 60s: no second lookup yet */
	ck_assert_int_eq(dns_queries("v6.test"), 2);
	resolver_watches_free(ws);
	config_free(cfg);
	unlink(conf_path);

	cfg = load("listeners: [ { listen: 127.0.0.1:8080 } ]\n"
	    "upstreams: { app: { servers: [ 127.0.0.1:80 ] } }\n", &errors);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_null(resolver_watch_config(base, cfg, servers_cb, &c));
	config_free(cfg);
	unlink(conf_path);
}
END_TEST

static Suite *
resolver_suite(void)
{
	Suite *s = suite_create("resolver");
	TCase *tc;

	tc = tcase_create("pure");
	tcase_add_test(tc, test_delay);
	tcase_add_test(tc, test_answer_same);
	tcase_add_test(tc, test_diff);
	suite_add_tcase(s, tc);

	tc = tcase_create("lookups");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_a_and_aaaa_merged_sorted);
	tcase_add_test(tc, test_one_family);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_a_without_aaaa);
	tcase_add_test(tc, test_hosts_file);
	tcase_add_test(tc, test_hosts_cancel_and_free);
	tcase_add_test(tc, test_hosts_sync);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_free_with_lookups_in_flight);
	tcase_add_test(tc, test_sync);
	suite_add_tcase(s, tc);

	tc = tcase_create("watches");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_watch_reports_changes_only);
	tcase_add_test(tc, test_watch_honours_short_ttl);
	tcase_add_test(tc, test_watch_without_initial);
	tcase_add_test(tc, test_watch_keeps_last_good_answer);
	tcase_add_test(tc, test_watch_partial_keeps_failed_family);
	suite_add_tcase(s, tc);

	tc = tcase_create("config");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_config_expands_names);
	tcase_add_test(tc, test_config_servers_from_name);
	tcase_add_test(tc, test_config_name_errors);
	tcase_add_test(tc, test_watch_config);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(resolver_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
