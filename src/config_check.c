/*
 * Configuration: what a start needs outside the file, checked after loading (by -t, at the start
 * and on reload) so that -t refuses what the start would: the user, the files it writes, the
 * syslog socket.
 */
#include "config.h"
#include "config_parse.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>


/* An error about the file a key names, at the key's value: "FILE:LINE:COL: KEY: message". */
static void
config_file_error(struct config_parse *ctx, yaml_mark_t mark, const char *key, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));
static void
config_file_error(struct config_parse *ctx, yaml_mark_t mark, const char *key, const char *fmt,
    ...)
{
	yaml_node_t at;
	size_t saved = config_where_key(ctx, key);
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = config_xvasprintf(fmt, ap);
	va_end(ap);
	memset(&at, 0, sizeof(at));
	at.start_mark = mark;
	config_error(ctx, &at, "%s", msg);
	config_where_pop(ctx, saved);
	free(msg);
}

/* A log file must open for appending (created if absent, as it will be at the start). */
static void
config_check_log(struct config_parse *ctx, const char *path, yaml_mark_t mark, const char *key)
{
	int fd;

	if (path == NULL || strcmp(path, "stderr") == 0)
		return;
	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0) {
		config_file_error(ctx, mark, key, "cannot open %s: %s", path, strerror(errno));
		return;
	}
	close(fd);
}

/*
 * Whether user (NULL: ourselves) may create and remove files in dir: 0, or -1 with errno.  Run
 * as root for another user, the check runs in a child that becomes that user (*as_user set),
 * so that the kernel decides as it will for the daemon (modes, ACLs, the directories on the
 * way); otherwise it is our own rights that count.
 */
static int
config_may_write_dir(const char *dir, const char *user, int *as_user)
{
	struct passwd *pw;
	pid_t pid;
	int status;

	*as_user = 0;
	if (user == NULL || geteuid() != 0 || (pw = getpwnam(user)) == NULL || pw->pw_uid == 0)
		return access(dir, W_OK | X_OK);
	*as_user = 1;
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		if (setgroups(1, &pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
		    setuid(pw->pw_uid) < 0)
			_exit(EPERM);
		_exit(access(dir, W_OK | X_OK) < 0 ? errno & 0xff : 0);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	errno = WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
	return -1;
}

/* The pid file is written, and removed at exit, in its directory, as the user. */
static void
config_check_pid_file(struct config_parse *ctx, const char *path, const char *user,
    yaml_mark_t mark)
{
	const char *slash;
	char dir[PATH_MAX];
	int as_user;

	if (path == NULL)
		return;
	/* On the stack: a check as the user runs in a child that leaves by _exit, and must
	 * leave no heap block behind it (valgrind counts the child's too). */
	slash = strrchr(path, '/');
	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else {
		config_file_error(ctx, mark, "pid_file", "the path is too long");
		return;
	}
	if (config_may_write_dir(dir, user, &as_user) < 0) {
		if (as_user)
			config_file_error(ctx, mark, "pid_file", "user %s cannot create files in %s: "
			    "%s", user, dir, strerror(errno));
		else
			config_file_error(ctx, mark, "pid_file", "cannot create files in %s: %s", dir,
			    strerror(errno));
	}
}

/* The user to switch to must exist: the start looks it up before it detaches. */
static void
config_check_user(struct config_parse *ctx, const char *user, yaml_mark_t mark)
{
	if (user == NULL)
		return;
	errno = 0;
	if (getpwnam(user) != NULL)
		return;
	if (errno == 0 || errno == ENOENT || errno == ESRCH || errno == EBADF || errno == EPERM)
		config_file_error(ctx, mark, "user", "user %s not found", user);
	else
		config_file_error(ctx, mark, "user", "cannot look up user %s: %s", user,
		    strerror(errno));
}

/*
 * A syslog socket log.error names must be there, as a socket whose name fits an address.  One
 * that nobody listens on is not an error: a syslog daemon may be restarting, and lines go to
 * stderr while it cannot be reached (log.c).
 */
static void
config_check_syslog(struct config_parse *ctx, const char *path, yaml_mark_t mark)
{
	struct sockaddr_un sun;
	struct stat st;

	if (strlen(path) >= sizeof(sun.sun_path))
		config_file_error(ctx, mark, "log.error", "the socket name %s is longer than %zu "
		    "bytes", path, sizeof(sun.sun_path) - 1);
	else if (stat(path, &st) < 0)
		config_file_error(ctx, mark, "log.error", "no syslog socket %s: %s", path,
		    strerror(errno));
	else if (!S_ISSOCK(st.st_mode))
		config_file_error(ctx, mark, "log.error", "%s is not a socket", path);
}

int
config_check_files(const struct config *cfg, char **errors)
{
	struct config_parse *ctx = config_parse_new(cfg->path);

	config_check_user(ctx, cfg->user, cfg->user_mark);
	config_check_pid_file(ctx, cfg->pid_file, cfg->user, cfg->pid_file_mark);
	/* Not the default syslog of a start without -f: where it cannot be reached, the error
	 * log is stderr instead. */
	if (cfg->error_log != NULL && strcmp(cfg->error_log, "syslog") == 0)
		config_check_syslog(ctx, CONFIG_SYSLOG_SOCKET, cfg->error_log_mark);
	else if (cfg->error_log != NULL && strncmp(cfg->error_log, "syslog:", 7) == 0)
		config_check_syslog(ctx, cfg->error_log + 7, cfg->error_log_mark);
	else
		config_check_log(ctx, cfg->error_log, cfg->error_log_mark, "log.error");
	config_check_log(ctx, cfg->access_log, cfg->access_log_mark, "log.access");
	*errors = config_parse_errors(ctx);
	config_parse_free(ctx);
	return *errors == NULL ? 0 : -1;
}
