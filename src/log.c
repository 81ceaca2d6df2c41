#include "config.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#define LOG_LINE_MAX 2048
/* syslog(3)'s facility daemon, as the PRI part of a message counts it. */
#define LOG_FACILITY_DAEMON (3 << 3)

enum log_kind { LOG_TO_STDERR, LOG_TO_FILE, LOG_TO_SYSLOG };

static volatile enum log_level log_level = LOG_LEVEL_INFO;
/* Set while the main thread starts, before any worker exists; read-only afterwards. */
static enum log_kind log_kind = LOG_TO_STDERR;
static int log_fd = STDERR_FILENO;      /* stderr or the file */
static char *log_path;                  /* the file, to open again after a rotation */
static int log_stderr_too;              /* starting: errors and warnings to stderr as well */

/* The syslog socket: (re)connected under the lock, as the syslog daemon may restart. */
static pthread_mutex_t log_syslog_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_un log_syslog_addr;
static int log_syslog_fd = -1;
static int log_syslog_down_at_open;     /* it could not be reached when the log was opened */
static int log_syslog_said;             /* the line saying lines go to stderr was written */

static int log_syslog_connect(void);
static void log_syslog_fallback(int err, enum log_level level, const char *text, size_t len);

static const char *const level_names[] = {
	[LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
};
/* syslog(3) severities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG. */
static const int level_severities[] = {
	[LOG_LEVEL_ERROR] = 3, [LOG_LEVEL_WARN] = 4, [LOG_LEVEL_INFO] = 6, [LOG_LEVEL_DEBUG] = 7,
};

void
log_init(enum log_level level)
{
	log_level = level;
}

void
log_set_level(enum log_level level)
{
	log_level = level;
}

int
log_open(const char *target)
{
	const char *socket_path = NULL;
	char *path = NULL;
	int fd = STDERR_FILENO;

	if (strcmp(target, "syslog") == 0)
		socket_path = CONFIG_SYSLOG_SOCKET;
	else if (strncmp(target, "syslog:", 7) == 0)
		socket_path = target + 7;
	else if (strcmp(target, "stderr") != 0) {
		if ((path = strdup(target)) == NULL)
			return -1;
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (fd < 0) {
			int saved = errno;
			free(path);
			errno = saved;
			return -1;
		}
	}
	if (socket_path != NULL && strlen(socket_path) >= sizeof(log_syslog_addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (log_fd != STDERR_FILENO)
		close(log_fd);
	free(log_path);
	log_fd = fd;
	log_path = path;
	log_kind = socket_path != NULL ? LOG_TO_SYSLOG : path != NULL ? LOG_TO_FILE :
	    LOG_TO_STDERR;
	if (socket_path != NULL) {
		tzset();                /* syslog time stamps are local time */
		/* Reached now, or its lines go to stderr from the start, which says so. */
		pthread_mutex_lock(&log_syslog_lock);
		if (log_syslog_fd >= 0)
			close(log_syslog_fd);
		log_syslog_fd = -1;
		log_syslog_addr.sun_family = AF_UNIX;
		strcpy(log_syslog_addr.sun_path, socket_path);
		log_syslog_down_at_open = log_syslog_connect() < 0;
		if (log_syslog_down_at_open)
			log_syslog_fallback(errno, LOG_LEVEL_WARN, NULL, 0);
		pthread_mutex_unlock(&log_syslog_lock);
	}
	log_stderr_too = log_kind != LOG_TO_STDERR;
	return 0;
}

int
log_syslog_down(void)
{
	return log_kind == LOG_TO_SYSLOG && log_syslog_down_at_open;
}

void
log_started(void)
{
	log_stderr_too = 0;
}

int
log_reopen(void)
{
	int fd;

	if (log_kind != LOG_TO_FILE)
		return 0;
	if ((fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0)
		return -1;
	/* dup2 swaps the file under the same number: a concurrent line goes to one or the
	 * other, never to a closed descriptor. */
	if (dup2(fd, log_fd) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	close(fd);
	fcntl(log_fd, F_SETFD, FD_CLOEXEC);
	return 1;
}

/* One write per line so lines from several workers never interleave. */
static void
log_line(int fd, enum log_level level, const char *text, size_t len)
{
	char line[LOG_LINE_MAX + 64];
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ ", &tm);
	n += (size_t)snprintf(line + n, sizeof(line) - n, "[%s] %.*s\n", level_names[level],
	    (int)len, text);
	if (write(fd, line, n < sizeof(line) ? n : sizeof(line) - 1) < 0)
		return;         /* nowhere left to say it */
}

/* Under the lock: 0, or -1 with errno. */
static int
log_syslog_connect(void)
{
	int saved;

	if (log_syslog_fd < 0 &&
	    (log_syslog_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(log_syslog_fd, (struct sockaddr *)&log_syslog_addr,
	    sizeof(log_syslog_addr)) < 0) {
		saved = errno;
		close(log_syslog_fd);
		log_syslog_fd = -1;
		errno = saved;
		return -1;
	}
	return 0;
}

/* Under the lock: one datagram, connecting first if need be, and once more after a failed
 * send (the syslog daemon went away or restarted).  0 when sent or dropped for want of room,
 * or -1 with errno when syslog cannot be reached. */
static int
log_syslog_send(const char *msg, size_t n)
{
	if (log_syslog_fd < 0 && log_syslog_connect() < 0)
		return -1;
	if (send(log_syslog_fd, msg, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n ||
	    errno == EAGAIN)
		return 0;
	close(log_syslog_fd);
	log_syslog_fd = -1;
	if (log_syslog_connect() < 0)
		return -1;
	if (send(log_syslog_fd, msg, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n ||
	    errno == EAGAIN)
		return 0;
	return -1;
}

/* Under the lock: syslog cannot be reached, so the line (if any) goes to stderr, after one
 * line saying so, the first time only: lines are never silently lost where nothing listens
 * on the socket (a container without /dev/log). */
static void
log_syslog_fallback(int err, enum log_level level, const char *text, size_t len)
{
	char notice[256 + sizeof(log_syslog_addr.sun_path)];
	int n;

	if (!log_syslog_said) {
		log_syslog_said = 1;
		n = snprintf(notice, sizeof(notice), "syslog at %s cannot be reached (%s): error "
		    "lines go to stderr", log_syslog_addr.sun_path, strerror(err));
		if (n > 0)
			log_line(STDERR_FILENO, LOG_LEVEL_WARN, notice,
			    (size_t)n < sizeof(notice) ? (size_t)n : sizeof(notice) - 1);
	}
	if (text != NULL)
		log_line(STDERR_FILENO, level, text, len);
}

/* An RFC 3164 message as syslog(3) sends it: "<PRI>Mmm dd hh:mm:ss jsongate[PID]: text".
 * Never waits: a line the syslog daemon has no room for is lost, not the event loop.  0, or
 * 1 when syslog could not be reached and the line went to stderr. */
static int
log_syslog(enum log_level level, const char *text, size_t len)
{
	char msg[LOG_LINE_MAX + 64];
	time_t now = time(NULL);
	struct tm tm;
	size_t n;
	int sent;

	localtime_r(&now, &tm);
	n = (size_t)snprintf(msg, sizeof(msg), "<%d>",
	    LOG_FACILITY_DAEMON | level_severities[level]);
	n += strftime(msg + n, sizeof(msg) - n, "%b %e %H:%M:%S ", &tm);
	n += (size_t)snprintf(msg + n, sizeof(msg) - n, "jsongate[%ld]: %.*s", (long)getpid(),
	    (int)len, text);
	if (n >= sizeof(msg))
		n = sizeof(msg) - 1;
	pthread_mutex_lock(&log_syslog_lock);
	sent = log_syslog_send(msg, n) == 0;
	if (!sent)
		log_syslog_fallback(errno, level, text, len);
	pthread_mutex_unlock(&log_syslog_lock);
	return !sent;
}

static void
log_vwrite(enum log_level level, int with_errno, const char *fmt, va_list ap)
{
	char text[LOG_LINE_MAX];
	int saved = errno, on_stderr = 0;
	size_t n;
	int r;

	if (level > log_level)
		return;
	r = vsnprintf(text, sizeof(text), fmt, ap);
	n = r < 0 ? 0 : (size_t)r;
	if (with_errno && n < sizeof(text) && (r = snprintf(text + n, sizeof(text) - n, ": %s",
	    strerror(saved))) > 0)
		n += (size_t)r;
	if (n >= sizeof(text))
		n = sizeof(text) - 1;
	if (log_kind != LOG_TO_SYSLOG)
		log_line(log_fd, level, text, n);
	else if (log_syslog(level, text, n) != 0)
		on_stderr = 1;
	if (log_stderr_too && !on_stderr && level <= LOG_LEVEL_WARN)
		log_line(STDERR_FILENO, level, text, n);
	errno = saved;
}

#define LOG_FN(fn, level, with_errno) \
	void fn(const char *fmt, ...) { va_list ap; va_start(ap, fmt); \
		log_vwrite(level, with_errno, fmt, ap); va_end(ap); }
LOG_FN(log_error, LOG_LEVEL_ERROR, 1)
LOG_FN(log_errorx, LOG_LEVEL_ERROR, 0)
LOG_FN(log_warn, LOG_LEVEL_WARN, 1)
LOG_FN(log_warnx, LOG_LEVEL_WARN, 0)
LOG_FN(log_info, LOG_LEVEL_INFO, 0)
LOG_FN(log_debug, LOG_LEVEL_DEBUG, 0)

void
fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, 1, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, 0, fmt, ap);
	va_end(ap);
	exit(1);
}

static void
log_libevent_cb(int severity, const char *msg)
{
	switch (severity) {
	case EVENT_LOG_DEBUG: log_debug("libevent: %s", msg); break;
	case EVENT_LOG_MSG: log_info("libevent: %s", msg); break;
	case EVENT_LOG_WARN: log_warnx("libevent: %s", msg); break;
	default: log_errorx("libevent: %s", msg); break;
	}
}

void
log_hook_libevent(void)
{
	event_set_log_callback(log_libevent_cb);
}
