/* jsongate: options, signals, reload and shutdown around the worker threads. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/crypto.h>
#include <yaml.h>
#include <zlib.h>

#include "admin.h"
#include "auth_jwks.h"
#include "health.h"
#include "log.h"
#include "mempool.h"
#include "metrics.h"
#include "notify.h"
#include "resolver.h"
#include "server.h"
#include "upstream_set.h"
#include "upstream_state.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif
#define DEFAULT_CONFIG SYSCONFDIR "/jsongate/jsongate.yaml"

static const char *config_path = DEFAULT_CONFIG;
static int foreground;
static char *error_log;                 /* where the error log goes, as opened at the start */
static char *pid_file;                  /* as written at the start, or NULL */
static struct runtime *current;
static struct event_base *main_base;
static struct event *grace_timer;
static struct health *health;
static struct resolver_watches *names;  /* the server names of the current configuration */
static unsigned workers_ended;
static int draining;

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: jsongate [-c FILE] [-t] [-f] [-V] [-h]\n"
	    "  -c FILE   configuration (default: %s)\n"
	    "  -t        check the configuration and exit\n"
	    "  -f        stay in the foreground; errors to stderr unless log.error is set\n"
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
	printf("zlib %s\n", zlibVersion());
	/* jsmn is a header compiled in: it has no version to report. */
	printf("jsmn header-only\n");
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

/* A server name resolves to other addresses: every worker follows the upstream's new servers,
 * keeping the connections to addresses that stay, and the new ones get health checks. */
static void
names_changed_cb(struct config_upstream *up, struct config_server_name *entry,
    const struct resolver_answer *ans, void *arg)
{
	struct upstream_set *set, *old = up->current;

	(void)arg;
	if ((set = upstream_set_renamed(up, entry, ans)) == NULL)
		return;
	if (metrics_bind_servers(up->name, set->servers, set->nservers) < 0 ||
	    upstream_state_bind_servers(up, set->servers, set->nservers) < 0) {
		log_errorx("upstream %s: out of memory for its new servers: keeping the old ones",
		    up->name);
		upstream_set_unref(set);
		return;
	}
	up->current = set;
	upstream_state_configured(current->cfg);
	server_publish_set(set);
	health = health_update(health, main_base, current->cfg);
	upstream_set_unref(old);
	log_info("upstream %s: now %zu server%s", up->name, set->nservers,
	    set->nservers == 1 ? "" : "s");
}

static void
pid_file_remove(void)
{
	if (pid_file != NULL && unlink(pid_file) < 0)
		log_warn("cannot remove the pid file %s", pid_file);
}

/* Written once the listeners are bound, jsongate detached and privileges dropped, so it holds
 * the pid that stays, under another name first so that no reader sees it empty; removed at
 * every exit after that, fatal ones included. */
static void
pid_file_write(const char *path)
{
	char tmp[4096];
	FILE *fp;

	if (path == NULL)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((fp = fopen(tmp, "we")) == NULL ||
	    fprintf(fp, "%ld\n", (long)getpid()) < 0 || fclose(fp) != 0 || rename(tmp, path) < 0) {
		log_error("cannot write the pid file %s", path);
		unlink(tmp);
		exit(1);
	}
	if ((pid_file = strdup(path)) == NULL)
		fatal("pid file");
	atexit(pid_file_remove);
}

/* log.error, else stderr in the foreground and syslog in the background, as nginx and
 * HAProxy users expect. */
static const char *
error_log_target(const struct config *cfg)
{
	return cfg->error_log != NULL ? cfg->error_log : foreground ? "stderr" : "syslog";
}

/* The configuration, with the files it names checked: NULL and *errors on failure. */
static struct config *
load_config(char **errors)
{
	struct config *cfg = config_load(config_path, errors);

	if (cfg != NULL && config_check_files(cfg, errors) < 0) {
		config_free(cfg);
		cfg = NULL;
	}
	return cfg;
}

static void
reload(void)
{
	struct config *cfg;
	struct runtime *rt;
	char *errors = NULL;

	log_info("reloading %s", config_path);
	notify_reloading();
	if ((cfg = load_config(&errors)) == NULL) {
		report_errors(errors, 1);
		log_errorx("reload failed: keeping the running configuration");
		free(errors);
		metrics_reload(0);
		notify_send("READY=1\nSTATUS=reload failed: keeping the running configuration");
		return;
	}
	if ((rt = runtime_new(cfg, current, server_nworkers(), &errors)) == NULL ||
	    metrics_bind(cfg) < 0 || upstream_state_bind(cfg) < 0 || upstream_sets_init(cfg) < 0) {
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
	if (strcmp(error_log_target(cfg), error_log) != 0)
		log_warnx("log.error: %s takes effect at restart; logging to %s",
		    error_log_target(cfg), error_log);
	if ((cfg->pid_file == NULL) != (pid_file == NULL) ||
	    (pid_file != NULL && strcmp(cfg->pid_file, pid_file) != 0))
		log_warnx("pid_file: %s takes effect at restart; the pid is in %s",
		    cfg->pid_file != NULL ? cfg->pid_file : "none",
		    pid_file != NULL ? pid_file : "no file");
	log_set_level(cfg->log_level);
	server_swap(rt);
	health_stop(health);
	health = health_start(main_base, cfg);
	auth_jwks_start(main_base, cfg);
	resolver_watches_free(names);
	/* A listener the new file removes refuses clients now, not when the last request
	 * on the old configuration ends. */
	runtime_stop_listening(current, rt);
	runtime_release(current);
	current = rt;
	names = resolver_watch_config(main_base, cfg, names_changed_cb, NULL);
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
	/* New clients are refused at once and go elsewhere, as with nginx. */
	runtime_stop_listening(current, NULL);
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
		switch (log_reopen()) {
		case -1:
			log_error("cannot reopen error log %s", error_log);
			break;
		case 1:
			log_info("error log %s reopened", error_log);
			break;
		}
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

/* Into the background with stdin and stdout on /dev/null, and stderr too unless it is where
 * the error log goes for want of syslog: then it stays where whoever started jsongate sent it,
 * rather than errors being lost. */
static void
detach(void)
{
	int keep_stderr = log_syslog_down(), fd;

	if (daemon(1, keep_stderr) < 0)
		fatal("daemon");
	if (!keep_stderr)
		return;
	if ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 || dup2(fd, STDIN_FILENO) < 0 ||
	    dup2(fd, STDOUT_FILENO) < 0)
		fatal("/dev/null");
	if (fd > STDERR_FILENO)
		close(fd);
}

static void
drop_privileges(const char *user, uid_t uid, gid_t gid)
{
	if (setgroups(1, &gid) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
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
	sigset_t handled;
	struct passwd *pw;
	uid_t uid = 0;
	gid_t gid = 0;
	char *errors = NULL;
	int ch, test_only = 0, i;

	mempool_init();
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

	if ((cfg = load_config(&errors)) == NULL) {
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
	if ((error_log = strdup(error_log_target(cfg))) == NULL || log_open(error_log) < 0) {
		fprintf(stderr, "jsongate: cannot open the error log %s: %s\n",
		    error_log_target(cfg), strerror(errno));
		return 1;
	}
	log_hook_libevent();
	/* Without syslog, stderr stays open in the background (detach) and takes both logs. */
	if (!foreground && !log_syslog_down() && cfg->access_log != NULL &&
	    strcmp(cfg->access_log, "stderr") == 0)
		log_warnx("log.access: stderr is /dev/null once in the background: "
		    "name a file, or use -f");
	if (!foreground && strcmp(error_log, "stderr") == 0)
		log_warnx("log.error: stderr is /dev/null once in the background: "
		    "name a file or syslog, or use -f");
	signal(SIGPIPE, SIG_IGN);
	/* The listeners accept from runtime_new() on, so a client can signal before the handlers
	 * exist: keep these signals pending until then.  Threads inherit the mask. */
	sigemptyset(&handled);
	for (i = 0; i < 4; i++)
		sigaddset(&handled, sigs[i]);
	sigprocmask(SIG_BLOCK, &handled, NULL);
	/* The admin endpoint first: whoever finds the listeners open finds it open too. */
	if (admin_open(cfg) < 0) {
		config_free(cfg);
		return 1;
	}
	if ((current = runtime_new(cfg, NULL, cfg->workers, &errors)) == NULL) {
		report_errors(errors, 1);
		free(errors);
		config_free(cfg);
		return 1;
	}
	if (notify_init() < 0 || metrics_init(cfg->workers) < 0 || metrics_bind(cfg) < 0 ||
	    upstream_state_bind(cfg) < 0 || upstream_sets_init(cfg) < 0)
		fatalx("cannot set up metrics, upstream state or the notification socket");
	/* Looked up before detaching, so that a wrong name is seen by whoever starts us. */
	if (cfg->user != NULL) {
		if ((pw = getpwnam(cfg->user)) == NULL)
			fatalx("user %s not found", cfg->user);
		uid = pw->pw_uid;
		gid = pw->pw_gid;
	}
	/* Started: from here on stderr is /dev/null (in the background, unless syslog could not
	 * be reached) or the log itself. */
	log_started();
	if (!foreground)
		detach();
	if (cfg->user != NULL)
		drop_privileges(cfg->user, uid, gid);
	/* As the user: it has to remove the file at exit, which needs the same rights. */
	pid_file_write(cfg->pid_file);

	if ((main_base = event_base_new()) == NULL)
		fatalx("cannot create the main event loop");
	for (i = 0; i < 4; i++) {
		sigev[i] = evsignal_new(main_base, sigs[i], signal_cb, NULL);
		evsignal_add(sigev[i], NULL);
	}
	sigprocmask(SIG_UNBLOCK, &handled, NULL);
	if (server_start(current, cfg->workers) < 0)
		fatal("cannot start workers");
	if (admin_start(main_base) < 0)
		fatalx("cannot serve the admin endpoint");
	health = health_start(main_base, cfg);
	auth_jwks_start(main_base, cfg);
	names = resolver_watch_config(main_base, cfg, names_changed_cb, NULL);
	exit_ev = event_new(main_base, server_exit_fd(), EV_READ | EV_PERSIST, worker_exit_cb, NULL);
	event_add(exit_ev, NULL);
	for (i = 0; i < (int)cfg->nlisteners; i++)
		log_info("listening on %s", cfg->listeners[i].addr.text);
	log_info("jsongate %s ready with %u worker%s", PACKAGE_VERSION, server_nworkers(),
	    server_nworkers() == 1 ? "" : "s");
	notify_send("READY=1\nSTATUS=serving");

	event_base_dispatch(main_base);

	health_stop(health);
	server_join();
	admin_close();
	log_info("stopped");
	for (i = 0; i < 4; i++)
		event_free(sigev[i]);
	event_free(exit_ev);
	if (grace_timer != NULL)
		event_free(grace_timer);
	resolver_watches_free(names);
	auth_jwks_stop_all();
	event_base_loop(main_base, EVLOOP_NONBLOCK);    /* the last lookups end */
	runtime_release(current);
	metrics_free();
	upstream_state_free_all();
	notify_close();
	event_base_free(main_base);
	libevent_global_shutdown();
	mempool_thread_release();
	free(error_log);
	return 0;
}
