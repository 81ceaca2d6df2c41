/* jsongate: options, signals, reload and shutdown around the worker threads. */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/crypto.h>
#include <yaml.h>

#include "admin.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "server.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif
#define DEFAULT_CONFIG SYSCONFDIR "/jsongate/jsongate.yaml"

static const char *config_path = DEFAULT_CONFIG;
static struct runtime *current;
static struct event_base *main_base;
static struct event *grace_timer;
static unsigned workers_ended;
static int draining;

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: jsongate [-c FILE] [-t] [-f] [-V] [-h]\n"
	    "  -c FILE   configuration (default: %s)\n"
	    "  -t        check the configuration and exit\n"
	    "  -f        stay in the foreground, log to stderr\n"
	    "  -V        print version and library versions\n"
	    "  -h        print this help\n", DEFAULT_CONFIG);
}

static void
print_version(void)
{
	printf("jsongate %s\n", PACKAGE_VERSION);
	printf("libevent %s\n", event_get_version());
	printf("%s\n", OpenSSL_version(OPENSSL_VERSION));
	printf("libyaml %s\n", yaml_get_version_string());
}

/* Print each "FILE:LINE:COL: message" line of errors to stderr or the log. */
static void
report_errors(const char *errors, int to_log)
{
	const char *line = errors, *nl;

	for (; line != NULL && *line != '\0'; line = nl + 1) {
		nl = strchr(line, '\n');
		if (nl == NULL)
			nl = line + strlen(line) - 1;
		if (to_log)
			log_errorx("%.*s", (int)(nl - line + (*nl != '\n')), line);
		else
			fprintf(stderr, "%.*s\n", (int)(nl - line + (*nl != '\n')), line);
	}
}

static void
reload(void)
{
	struct config *cfg;
	struct runtime *rt;
	char *errors = NULL;

	log_info("reloading %s", config_path);
	notify_reloading();
	if ((cfg = config_load(config_path, &errors)) == NULL) {
		report_errors(errors, 1);
		log_errorx("reload failed: keeping the running configuration");
		free(errors);
		metrics_reload(0);
		notify_send("READY=1\nSTATUS=reload failed: keeping the running configuration");
		return;
	}
	if ((rt = runtime_new(cfg, current, &errors)) == NULL || metrics_bind(cfg) < 0) {
		report_errors(errors, 1);
		log_errorx("reload failed: keeping the running configuration");
		free(errors);
		if (rt != NULL)
			runtime_release(rt);    /* frees cfg */
		else
			config_free(cfg);
		metrics_reload(0);
		notify_send("READY=1\nSTATUS=reload failed: keeping the running configuration");
		return;
	}
	if (cfg->workers != server_nworkers())
		log_warnx("workers: %u takes effect at restart; running %u", cfg->workers,
		    server_nworkers());
	log_set_level(cfg->log_level);
	server_swap(rt);
	runtime_release(current);
	current = rt;
	admin_reconfigure(cfg);
	metrics_reload(1);
	log_info("configuration reloaded");
	notify_send("READY=1\nSTATUS=serving");
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	log_warnx("shutdown grace period over: closing the remaining connections");
	server_stop_now();
}

static void
shutdown_begin(void)
{
	struct timeval tv;
	uint64_t ms = current->cfg->timeouts.shutdown_grace;

	if (draining) {
		log_info("second stop signal: closing connections now");
		server_stop_now();
		return;
	}
	draining = 1;
	notify_send("STOPPING=1");
	admin_set_draining();
	log_info("shutting down: finishing requests in flight");
	server_drain();
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	grace_timer = evtimer_new(main_base, grace_cb, NULL);
	evtimer_add(grace_timer, &tv);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	switch (sig) {
	case SIGHUP:
		if (!draining)
			reload();
		break;
	case SIGTERM:
	case SIGINT:
		shutdown_begin();
		break;
	case SIGUSR1:
		if (current->access.owned) {
			if (access_log_reopen(&current->access, current->cfg->access_log) < 0)
				log_error("cannot reopen access log %s", current->cfg->access_log);
			else
				log_info("access log %s reopened", current->cfg->access_log);
		}
		break;
	}
}

static void
worker_exit_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;

	(void)what;
	(void)arg;
	if (read(fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		workers_ended += (unsigned)n;
	if (workers_ended >= server_nworkers())
		event_base_loopbreak(main_base);
}

static void
drop_privileges(const char *user)
{
	struct passwd *pw;

	if ((pw = getpwnam(user)) == NULL)
		fatalx("user %s not found", user);
	if (setgroups(1, &pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
		fatal("cannot drop privileges to %s", user);
	if (setuid(0) == 0)
		fatalx("privileges of root could be regained after dropping to %s", user);
}

int
main(int argc, char **argv)
{
	struct config *cfg;
	struct event *sigev[4], *exit_ev;
	static const int sigs[4] = { SIGHUP, SIGTERM, SIGINT, SIGUSR1 };
	char *errors = NULL;
	int ch, test_only = 0, foreground = 0, i;

	while ((ch = getopt(argc, argv, "c:tfVh")) != -1) {
		switch (ch) {
		case 'c': config_path = optarg; break;
		case 't': test_only = 1; break;
		case 'f': foreground = 1; break;
		case 'V': print_version(); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	if ((cfg = config_load(config_path, &errors)) == NULL) {
		report_errors(errors, 0);
		free(errors);
		return 1;
	}
	if (test_only) {
		printf("configuration ok\n");
		config_free(cfg);
		return 0;
	}

	log_init(cfg->log_level);
	log_hook_libevent();
	/* Read buffers are taken and given back every request.  glibc hands a freed 64 KB one
	 * back to the kernel (trim threshold 128 KB) and faults the pages in again on the next
	 * read, 0.8 page faults a request over TLS: keep up to 32 MB free per arena instead.
	 * Fixing one threshold stops glibc adjusting the other: 4 MB keeps large buffers on
	 * the heap, where glibc would have moved its threshold after the first free. */
	mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
	mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
	signal(SIGPIPE, SIG_IGN);
	if ((current = runtime_new(cfg, NULL, &errors)) == NULL) {
		report_errors(errors, 1);
		free(errors);
		config_free(cfg);
		return 1;
	}
	if (notify_init() < 0 || admin_open(cfg) < 0 || metrics_init(cfg->workers) < 0 ||
	    metrics_bind(cfg) < 0)
		fatalx("cannot set up the admin endpoint, metrics or notification socket");
	if (cfg->user != NULL)
		drop_privileges(cfg->user);
	if (!foreground && daemon(1, 1) < 0)
		fatal("daemon");

	if ((main_base = event_base_new()) == NULL)
		fatalx("cannot create the main event loop");
	for (i = 0; i < 4; i++) {
		sigev[i] = evsignal_new(main_base, sigs[i], signal_cb, NULL);
		evsignal_add(sigev[i], NULL);
	}
	if (server_start(current, cfg->workers) < 0)
		fatal("cannot start workers");
	if (admin_start(main_base) < 0)
		fatalx("cannot serve the admin endpoint");
	exit_ev = event_new(main_base, server_exit_fd(), EV_READ | EV_PERSIST, worker_exit_cb, NULL);
	event_add(exit_ev, NULL);
	for (i = 0; i < (int)cfg->nlisteners; i++)
		log_info("listening on %s", cfg->listeners[i].addr.text);
	log_info("jsongate %s ready with %u worker%s", PACKAGE_VERSION, server_nworkers(),
	    server_nworkers() == 1 ? "" : "s");
	notify_send("READY=1\nSTATUS=serving");

	event_base_dispatch(main_base);

	server_join();
	admin_close();
	log_info("stopped");
	for (i = 0; i < 4; i++)
		event_free(sigev[i]);
	event_free(exit_ev);
	if (grace_timer != NULL)
		event_free(grace_timer);
	runtime_release(current);
	metrics_free();
	notify_close();
	event_base_free(main_base);
	libevent_global_shutdown();
	return 0;
}
