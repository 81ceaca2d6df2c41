#include "config.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

static volatile enum log_level log_level = LOG_LEVEL_INFO;

static const char *const level_names[] = {
	[LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
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

/* One write per line so lines from several workers never interleave. */
static void
log_vwrite(enum log_level level, int with_errno, const char *fmt, va_list ap)
{
	char line[2048];
	int saved = errno;
	struct timespec ts;
	struct tm tm;
	size_t n;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ ", &tm);
	n += snprintf(line + n, sizeof(line) - n, "[%s] ", level_names[level]);
	if (n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (with_errno && n < sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, ": %s", strerror(saved));
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, n, stderr);
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
