/* Access log: one line per request, JSON or Apache combined. */
#ifndef JG_ACCESS_LOG_H
#define JG_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

struct access_log {
	int fd;                         /* -1 when off */
	int owned;                      /* 1 when we opened it (not stderr) */
	enum access_format format;
};

struct access_entry {
	const char *remote_addr;
	const char *method;
	const char *path;               /* request-target as received (may be truncated) */
	int status;
	uint64_t bytes_sent;
	const char *upstream;           /* server address, or "-" */
	const char *route;              /* route name, or "-" */
	double duration_ms;
	const char *request_id;
	const char *user_agent;         /* combined format only; may be NULL */
	const char *referer;            /* combined format only; may be NULL */
	int http_minor;
};

/* Open per cfg->access_log; 0 or -1 with errno. */
int access_log_open(struct access_log *al, const struct config *cfg);
void access_log_close(struct access_log *al);
/* Open path again (it was renamed away) and put it in place of the descriptor the workers
 * write to, atomically: 0, or -1 with errno (the old file stays in use). */
int access_log_reopen(struct access_log *al, const char *path);
void access_log_write(const struct access_log *al, const struct access_entry *e);

#endif
