/* Error log: leveled, thread-safe lines to stderr or a file. */
#ifndef JG_LOG_H
#define JG_LOG_H

#include "config.h"

void log_init(enum log_level level);
void log_set_level(enum log_level level);
/* Route libevent's own messages into this log. */
void log_hook_libevent(void);

/* log_warn and log_error append strerror(errno); the ...x variants do not. */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_errorx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Log and exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
