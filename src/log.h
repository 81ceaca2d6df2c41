/* Error log: leveled, thread-safe lines to stderr, a file or syslog. */
#ifndef JG_LOG_H
#define JG_LOG_H

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_init(enum log_level level);
void log_set_level(enum log_level level);
/* Send the lines to target: "stderr", "syslog" (/dev/log), "syslog:SOCKET", or a file opened
 * for appending.  0, or -1 with errno (the log stays where it was).  Until log_started(),
 * errors and warnings go to stderr as well, so that whoever starts jsongate sees why it
 * could not start.  Lines syslog cannot take because nothing listens on its socket go to
 * stderr, after one line saying so (the first time only). */
int log_open(const char *target);
/* 1 when the log is syslog and its socket could not be reached when opened: its lines go to
 * stderr instead (after one line saying so), so stderr must stay open. */
int log_syslog_down(void);
/* The start is over (or stderr is about to be /dev/null): stderr only if it is the target. */
void log_started(void);
/* Open the log file again after a rotation renamed it: 1, or -1 with errno (the old file
 * stays in use); 0 for stderr and syslog. */
int log_reopen(void);
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
