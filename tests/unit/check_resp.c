/* The Redis client and the shared rate limits against a real redis-server on a free port. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "ratelimit_redis.h"
#include "resp.h"

#define S 1000000000ULL

static struct event_base *base;

static long
ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* A port nobody listens on (for a moment). */
static int
free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* redis-server on 127.0.0.1:port, ready when it accepts connections. */
static pid_t
redis_start(int port)
{
	char p[16];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timespec t0;
	pid_t pid;
	int fd, null;

	snprintf(p, sizeof(p), "%d", port);
	if ((pid = fork()) == 0) {
		/* Gone with the test, whatever happens to it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1",
		    "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel",
		    "warning", (char *)NULL);
		fprintf(stderr, "redis-server: %s (install the redis-server package)\n",
		    strerror(errno));
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			return pid;
		}
		close(fd);
		ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "redis-server exited");
		ck_assert_msg(ms_since(&t0) < 10000, "redis-server not listening after 10 s");
		sleep_ms(10);
	}
}

static void
redis_stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static struct resp_client *
client(int port, uint32_t timeout_ms, uint32_t retry_ms)
{
	char addr[32];
	struct resp_client *c;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	ck_assert_ptr_nonnull(c = resp_new(base, addr, timeout_ms, retry_ms));
	return c;
}

/* What a command got: its status and the reply written out ("+PONG", ":3", "$1:v", "nil",
 * "*2[$1:a,$1:b]", "-ERR ..."). */
struct got {
	int done;
	enum resp_status status;
	char text[256];
};

static void
reply_text(const struct resp_reply *r, char *out, size_t cap)
{
	size_t i, n;

	switch (r->type) {
	case RESP_STATUS:
		snprintf(out, cap, "+%.*s", (int)r->len, r->str);
		break;
	case RESP_ERROR:
		snprintf(out, cap, "-%.*s", (int)r->len, r->str);
		break;
	case RESP_INTEGER:
		snprintf(out, cap, ":%lld", r->integer);
		break;
	case RESP_BULK:
		snprintf(out, cap, "$%zu:%.*s", r->len, (int)r->len, r->str);
		break;
	case RESP_NIL:
		snprintf(out, cap, "nil");
		break;
	case RESP_ARRAY:
		n = (size_t)snprintf(out, cap, "*%zu[", r->n);
		for (i = 0; i < r->n && n < cap; i++) {
			if (i > 0)
				out[n++] = ',';
			reply_text(&r->elems[i], out + n, cap - n);
			n += strlen(out + n);
		}
		snprintf(out + n, cap - n, "]");
		break;
	}
}

static void
got_cb(void *arg, enum resp_status st, const struct resp_reply *r)
{
	struct got *g = arg;

	g->done = 1;
	g->status = st;
	g->text[0] = '\0';
	if (r != NULL)
		reply_text(r, g->text, sizeof(g->text));
}

static void
run_until(const int *done)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!*done) {
		ck_assert_msg(ms_since(&t0) < 10000, "no answer in 10 s");
		event_base_loop(base, EVLOOP_ONCE);
	}
}

/* Send a command of space-separated words and wait for it. */
static struct got
cmd(struct resp_client *c, const char *line)
{
	char buf[256], *argv[16], *save;
	size_t lens[16];
	int argc = 0;
	struct got g = { 0 };
	enum resp_status st;

	snprintf(buf, sizeof(buf), "%s", line);
	for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
		argv[argc] = w;
		lens[argc++] = strlen(w);
	}
	st = resp_command(c, argc, (const char *const *)argv, lens, got_cb, &g);
	if (st != RESP_OK) {
		g.status = st;
		return g;
	}
	run_until(&g.done);
	return g;
}

#define ASSERT_REPLY(c, line, want) do { \
	struct got g_ = cmd(c, line); \
	ck_assert_msg(g_.status == RESP_OK, "%s: %s", line, resp_status_name(g_.status)); \
	ck_assert_str_eq(g_.text, want); \
} while (0)

static void
setup(void)
{
	base = event_base_new();
}

static void
teardown(void)
{
	event_base_free(base);
}

START_TEST(test_commands)
{
	int port = free_port();
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 1000, 100);
	struct got g;

	ASSERT_REPLY(c, "PING", "+PONG");
	ASSERT_REPLY(c, "SET k v", "+OK");
	ASSERT_REPLY(c, "GET k", "$1:v");
	ASSERT_REPLY(c, "GET missing", "nil");
	ASSERT_REPLY(c, "INCR n", ":1");
	ASSERT_REPLY(c, "RPUSH l a bc", ":2");
	ASSERT_REPLY(c, "LRANGE l 0 -1", "*2[$1:a,$2:bc]");
	ASSERT_REPLY(c, "LRANGE none 0 -1", "*0[]");
	g = cmd(c, "NOSUCHCOMMAND x");
	ck_assert_int_eq(g.status, RESP_OK);
	ck_assert_msg(strncmp(g.text, "-ERR unknown command", 20) == 0, "%s", g.text);
	resp_free(c);
	redis_stop(pid);
}
END_TEST

static int pipelined_next, pipelined_bad;

static void
pipelined_cb(void *arg, enum resp_status st, const struct resp_reply *r)
{
	int *done = arg;

	if (st != RESP_OK || r->type != RESP_INTEGER || r->integer != ++pipelined_next)
		pipelined_bad++;
	if (pipelined_next == 500)
		*done = 1;
}

START_TEST(test_pipelined_in_order)
{
	int port = free_port(), i, done = 0;
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 2000, 100);
	const char *argv[] = { "INCR", "counter" };
	size_t lens[] = { 4, 7 };
	struct resp_stats st;

	for (i = 0; i < 500; i++)
		ck_assert_int_eq(resp_command(c, 2, argv, lens, pipelined_cb, &done), RESP_OK);
	run_until(&done);
	ck_assert_int_eq(pipelined_bad, 0);
	resp_stats(c, &st);
	ck_assert_uint_eq(st.connects, 1);
	ck_assert_uint_eq(st.replies, 500);
	resp_free(c);
	redis_stop(pid);
}
END_TEST

/* A server that accepts (the kernel's backlog does) and never answers. */
START_TEST(test_timeout)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct resp_client *c;
	struct timespec t0;
	struct got g;
	struct resp_stats st;
	long ms;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	c = client(ntohs(sa.sin_port), 50, 300);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	g = cmd(c, "PING");
	ms = ms_since(&t0);
	ck_assert_str_eq(resp_status_name(g.status), "timeout");
	ck_assert_msg(ms >= 45 && ms < 1000, "timed out after %ld ms", ms);
	/* Within retry_ms: refused at once, no callback. */
	g = cmd(c, "PING");
	ck_assert_str_eq(resp_status_name(g.status), "down");
	sleep_ms(320);
	g = cmd(c, "PING");
	ck_assert_str_eq(resp_status_name(g.status), "timeout");
	resp_stats(c, &st);
	ck_assert_uint_eq(st.connects, 2);
	ck_assert_uint_eq(st.timeouts, 2);
	resp_free(c);
	close(fd);
}
END_TEST

START_TEST(test_refused_then_back)
{
	int port = free_port();
	struct resp_client *c = client(port, 1000, 200);
	struct got g;
	pid_t pid;

	g = cmd(c, "PING");
	ck_assert_str_eq(resp_status_name(g.status), "connection");
	g = cmd(c, "PING");
	ck_assert_str_eq(resp_status_name(g.status), "down");
	pid = redis_start(port);
	sleep_ms(220);
	ASSERT_REPLY(c, "PING", "+PONG");
	/* Killed in the middle, then back: one failure, then answers again without a new
	 * client. */
	redis_stop(pid);
	g = cmd(c, "PING");
	ck_assert_str_eq(resp_status_name(g.status), "connection");
	pid = redis_start(port);
	sleep_ms(220);
	ASSERT_REPLY(c, "PING", "+PONG");
	resp_free(c);
	redis_stop(pid);
}
END_TEST

START_TEST(test_free_fails_pending)
{
	int port = free_port();
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 1000, 100);
	const char *argv[] = { "PING" };
	size_t lens[] = { 4 };
	struct got g = { 0 };

	ck_assert_int_eq(resp_command(c, 1, argv, lens, got_cb, &g), RESP_OK);
	resp_free(c);
	ck_assert_int_eq(g.done, 1);
	ck_assert_str_eq(resp_status_name(g.status), "closed");
	redis_stop(pid);
}
END_TEST

/* A scripted server: once a client connects, it sends chunks at 10 ms apart, splitting
 * replies anywhere, then garbage. */
static const char *const chunks[] = {
	":1\r\n$5\r\nhel",
	"lo\r\n*2\r\n$-1\r\n*-",
	"1\r\n+still fine\r\n",
	"?garbage\r\n",
};
static struct bufferevent *scripted_bev;
static struct event *scripted_timer;
static size_t scripted_next;

static void
scripted_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct timeval tv = { 0, 10000 };

	(void)fd;
	(void)what;
	(void)arg;
	bufferevent_write(scripted_bev, chunks[scripted_next], strlen(chunks[scripted_next]));
	if (++scripted_next < sizeof(chunks) / sizeof(chunks[0]))
		evtimer_add(scripted_timer, &tv);
}

static void
scripted_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
    void *arg)
{
	struct timeval tv = { 0, 10000 };

	(void)l;
	(void)sa;
	(void)len;
	(void)arg;
	scripted_bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_enable(scripted_bev, EV_READ | EV_WRITE);
	scripted_timer = evtimer_new(base, scripted_timer_cb, NULL);
	evtimer_add(scripted_timer, &tv);
}

START_TEST(test_replies_split_anywhere_then_garbage)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	struct evconnlistener *l;
	struct resp_client *c;
	const char *argv[] = { "PING" };
	size_t lens[] = { 4 };
	struct got g[5] = { { 0 } };
	int i;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_ptr_nonnull(l = evconnlistener_new_bind(base, scripted_accept_cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE, 8, (struct sockaddr *)&sa, sizeof(sa)));
	ck_assert_int_eq(getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sa, &len), 0);
	c = client(ntohs(sa.sin_port), 2000, 100);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(resp_command(c, 1, argv, lens, got_cb, &g[i]), RESP_OK);
	run_until(&g[4].done);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g[i].status, RESP_OK);
	ck_assert_str_eq(g[0].text, ":1");
	ck_assert_str_eq(g[1].text, "$5:hello");
	ck_assert_str_eq(g[2].text, "*2[nil,nil]");
	ck_assert_str_eq(g[3].text, "+still fine");
	ck_assert_str_eq(resp_status_name(g[4].status), "protocol");
	resp_free(c);
	bufferevent_free(scripted_bev);
	event_free(scripted_timer);
	evconnlistener_free(l);
}
END_TEST

struct decision {
	int done;
	enum resp_status status;
	struct ratelimit_answer ans;
};

static void
decision_cb(void *arg, enum resp_status st, const struct ratelimit_answer *ans)
{
	struct decision *d = arg;

	d->done = 1;
	d->status = st;
	if (ans != NULL)
		d->ans = *ans;
}

/* n decisions sent at once on c (pipelined), then waited for. */
static void
take_n(struct resp_client *c, const char *scope, const struct ratelimit_rule *r,
    const char *key, struct decision *d, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		d[i] = (struct decision){ 0 };
		ck_assert_int_eq(ratelimit_redis_take(c, scope, r, key, strlen(key), decision_cb,
		    &d[i]), RESP_OK);
	}
	for (i = 0; i < n; i++)
		run_until(&d[i].done);
}

START_TEST(test_redis_gcra)
{
	int port = free_port(), i;
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 1000, 100);
	struct ratelimit_rule r;
	struct decision d[10];

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 5, S, 5), 0);
	take_n(c, "orders", &r, "alice", d, 10);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(d[i].status, RESP_OK);
		ck_assert_int_eq(d[i].ans.admitted, 1);
		ck_assert_uint_eq(d[i].ans.limit, 5);
		ck_assert_uint_eq(d[i].ans.remaining, 4 - (uint32_t)i);
		ck_assert_uint_eq(d[i].ans.reset, 1);
		ck_assert_uint_eq(d[i].ans.retry_after, 0);
	}
	/* Sent in the same few milliseconds: the rest refused (one may slip in if 200 ms
	 * passed, which they did not on any machine running this). */
	for (i = 5; i < 10; i++) {
		ck_assert_int_eq(d[i].status, RESP_OK);
		ck_assert_int_eq(d[i].ans.admitted, 0);
		ck_assert_uint_eq(d[i].ans.remaining, 0);
		ck_assert_uint_eq(d[i].ans.retry_after, 1);
		ck_assert_uint_eq(d[i].ans.reset, 1);
	}
	/* Another key and another scope have buckets of their own. */
	take_n(c, "orders", &r, "bob", d, 1);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	take_n(c, "users", &r, "alice", d, 1);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	ASSERT_REPLY(c, "EXISTS jsongate:rl:orders:alice", ":1");
	/* After one interval one more. */
	sleep_ms(210);
	take_n(c, "orders", &r, "alice", d, 2);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	ck_assert_int_eq(d[1].ans.admitted, 0);
	resp_free(c);
	redis_stop(pid);
}
END_TEST

START_TEST(test_redis_script_reloaded)
{
	int port = free_port();
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 1000, 100);
	struct ratelimit_rule r;
	struct decision d[1];
	char want[64], line[128];

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 5, S, 5), 0);
	snprintf(line, sizeof(line), "SCRIPT EXISTS %s", ratelimit_redis_sha1());
	ASSERT_REPLY(c, line, "*1[:0]");
	take_n(c, "orders", &r, "alice", d, 1);       /* NOSCRIPT, then EVAL */
	ck_assert_int_eq(d[0].status, RESP_OK);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	ASSERT_REPLY(c, line, "*1[:1]");
	ASSERT_REPLY(c, "SCRIPT FLUSH", "+OK");
	take_n(c, "orders", &r, "alice", d, 1);
	ck_assert_int_eq(d[0].status, RESP_OK);
	ck_assert_uint_eq(d[0].ans.remaining, 3);
	snprintf(want, sizeof(want), "*1[:1]");
	ASSERT_REPLY(c, line, want);
	resp_free(c);
	redis_stop(pid);
}
END_TEST

/* Two instances (two clients) and one Redis admit what one would: rate 5/s, burst 10, 40
 * requests within a second -> at most 16. */
START_TEST(test_redis_two_instances)
{
	int port = free_port(), i, admitted = 0;
	pid_t pid = redis_start(port);
	struct resp_client *a = client(port, 1000, 100), *b = client(port, 1000, 100);
	struct ratelimit_rule r;
	struct decision d[40];

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 5, S, 10), 0);
	for (i = 0; i < 40; i++) {
		d[i] = (struct decision){ 0 };
		ck_assert_int_eq(ratelimit_redis_take(i % 2 ? a : b, "orders", &r, "k", 1,
		    decision_cb, &d[i]), RESP_OK);
	}
	for (i = 0; i < 40; i++) {
		run_until(&d[i].done);
		ck_assert_int_eq(d[i].status, RESP_OK);
		admitted += d[i].ans.admitted;
	}
	ck_assert_msg(admitted >= 10 && admitted <= 16, "admitted %d", admitted);
	resp_free(a);
	resp_free(b);
	redis_stop(pid);
}
END_TEST

START_TEST(test_redis_down_is_reported)
{
	int port = free_port();
	pid_t pid = redis_start(port);
	struct resp_client *c = client(port, 1000, 200);
	struct ratelimit_rule r;
	struct decision d[1];

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 5, S, 5), 0);
	take_n(c, "orders", &r, "alice", d, 1);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	redis_stop(pid);
	/* The caller hears it (and applies on_error), first from the lost connection, then at
	 * once while the client waits to retry. */
	take_n(c, "orders", &r, "alice", d, 1);
	ck_assert_str_eq(resp_status_name(d[0].status), "connection");
	ck_assert_int_eq(ratelimit_redis_take(c, "orders", &r, "alice", 5, decision_cb, d),
	    RESP_DOWN);
	/* Back: limiting resumes without a new client (the bucket went with the server). */
	pid = redis_start(port);
	sleep_ms(220);
	take_n(c, "orders", &r, "alice", d, 1);
	ck_assert_int_eq(d[0].status, RESP_OK);
	ck_assert_int_eq(d[0].ans.admitted, 1);
	ck_assert_uint_eq(d[0].ans.remaining, 4);
	resp_free(c);
	redis_stop(pid);
}
END_TEST

START_TEST(test_command_build)
{
	struct ratelimit_redis_cmd cmd;
	struct ratelimit_rule r;
	char longkey[2000];

	ck_assert_int_eq(ratelimit_rule_init(&r, 1, 100, S, 200), 0);
	ck_assert_int_eq(ratelimit_redis_build(&cmd, 0, "orders", &r, "a\0b", 3), 0);
	ck_assert_int_eq(cmd.argc, 6);
	ck_assert_str_eq(cmd.argv[0], "EVALSHA");
	ck_assert_uint_eq(cmd.argvlen[1], 40);
	ck_assert_int_eq(memcmp(cmd.argv[1], ratelimit_redis_sha1(), 40), 0);
	ck_assert_str_eq(cmd.argv[2], "1");
	ck_assert_uint_eq(cmd.argvlen[3], 22);
	ck_assert_int_eq(memcmp(cmd.argv[3], "jsongate:rl:orders:a\0b", 22), 0);
	ck_assert_str_eq(cmd.argv[4], "10000");         /* microseconds */
	ck_assert_str_eq(cmd.argv[5], "200");
	ck_assert_int_eq(ratelimit_redis_build(&cmd, 1, "orders", &r, "a", 1), 0);
	ck_assert_str_eq(cmd.argv[0], "EVAL");
	ck_assert_uint_eq(cmd.argvlen[1], strlen(ratelimit_redis_script));
	memset(longkey, 'x', sizeof(longkey));
	ck_assert_int_eq(ratelimit_redis_build(&cmd, 0, "orders", &r, longkey, sizeof(longkey)), 0);
	ck_assert_uint_eq(cmd.argvlen[3], strlen("jsongate:rl:orders:sha256:") + 64);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("resp");
	TCase *tc = tcase_create("redis");
	SRunner *sr;
	int failed;

	signal(SIGPIPE, SIG_IGN);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_command_build);
	tcase_add_test(tc, test_commands);
	tcase_add_test(tc, test_pipelined_in_order);
	tcase_add_test(tc, test_timeout);
	tcase_add_test(tc, test_refused_then_back);
	tcase_add_test(tc, test_free_fails_pending);
	tcase_add_test(tc, test_replies_split_anywhere_then_garbage);
	tcase_add_test(tc, test_redis_gcra);
	tcase_add_test(tc, test_redis_script_reloaded);
	tcase_add_test(tc, test_redis_two_instances);
	tcase_add_test(tc, test_redis_down_is_reported);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
