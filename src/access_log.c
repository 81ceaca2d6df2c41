#include "config.h"
#include "access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int
access_log_open(struct access_log *al, const struct config *cfg)
{
	al->fd = -1;
	al->owned = 0;
	al->format = cfg->access_format;
	if (cfg->access_log == NULL)
		return 0;
	if (strcmp(cfg->access_log, "stderr") == 0) {
		al->fd = STDERR_FILENO;
		return 0;
	}
	al->fd = open(cfg->access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (al->fd < 0)
		return -1;
	al->owned = 1;
	return 0;
}

void
access_log_close(struct access_log *al)
{
	if (al->owned && al->fd >= 0)
		close(al->fd);
	al->fd = -1;
	al->owned = 0;
}

int
access_log_reopen(struct access_log *al, const char *path)
{
	int fd;

	if (!al->owned || al->fd < 0)
		return 0;
	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0)
		return -1;
	/* dup2 swaps the file under the same number: a concurrent write goes to one or the
	 * other, never to a closed descriptor. */
	if (dup2(fd, al->fd) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	close(fd);
	fcntl(al->fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

/* Append s as JSON string content, dropping nothing: control bytes and quotes escaped. */
static size_t
access_json_escape(char *out, size_t cap, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (; *s != '\0' && n + 6 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			out[n++] = '\\';
			out[n++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			memcpy(out + n, "\\u00", 4);
			out[n + 4] = hex[ch >> 4];
			out[n + 5] = hex[ch & 15];
			n += 6;
		} else {
			out[n++] = (char)ch;
		}
	}
	return n;
}

/* Combined format quotes fields: escape quotes and control bytes like nginx (\xHH). */
static size_t
access_combined_escape(char *out, size_t cap, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	for (; *s != '\0' && n + 4 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f) {
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		} else {
			out[n++] = (char)ch;
		}
	}
	return n;
}

#define ACCESS_ADD(lit) do { size_t l_ = strlen(lit); if (n + l_ < sizeof(line)) { \
	memcpy(line + n, lit, l_); n += l_; } } while (0)
#define ACCESS_JSON(s) (n += access_json_escape(line + n, sizeof(line) - n, (s)))
#define ACCESS_PRINTF(...) do { int r_ = snprintf(line + n, sizeof(line) - n, __VA_ARGS__); \
	if (r_ > 0) n = n + (size_t)r_ < sizeof(line) ? n + (size_t)r_ : sizeof(line) - 1; } while (0)

void
access_log_write(const struct access_log *al, const struct access_entry *e)
{
	char line[4096], when[64];
	struct timespec ts;
	struct tm tm;
	size_t n = 0;

	if (al->fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (al->format == ACCESS_JSON) {
		gmtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		ACCESS_PRINTF("{\"time\":\"%s.%03ldZ\",\"remote_addr\":\"", when,
		    ts.tv_nsec / 1000000);
		ACCESS_JSON(e->remote_addr);
		ACCESS_ADD("\",\"method\":\"");
		ACCESS_JSON(e->method);
		ACCESS_ADD("\",\"path\":\"");
		ACCESS_JSON(e->path);
		ACCESS_PRINTF("\",\"status\":%d,\"bytes_sent\":%llu,\"upstream\":\"", e->status,
		    (unsigned long long)e->bytes_sent);
		ACCESS_JSON(e->upstream);
		ACCESS_ADD("\",\"route\":\"");
		ACCESS_JSON(e->route);
		ACCESS_PRINTF("\",\"duration_ms\":%.3f,\"request_id\":\"", e->duration_ms);
		ACCESS_JSON(e->request_id);
		ACCESS_ADD("\"}");
	} else {
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S %z", &tm);
		n += access_combined_escape(line + n, sizeof(line) - n, e->remote_addr);
		ACCESS_PRINTF(" - - [%s] \"", when);
		n += access_combined_escape(line + n, sizeof(line) - n, e->method);
		ACCESS_ADD(" ");
		n += access_combined_escape(line + n, sizeof(line) - n, e->path);
		ACCESS_PRINTF(" HTTP/1.%d\" %d %llu \"", e->http_minor, e->status,
		    (unsigned long long)e->bytes_sent);
		n += access_combined_escape(line + n, sizeof(line) - n,
		    e->referer != NULL && *e->referer ? e->referer : "-");
		ACCESS_ADD("\" \"");
		n += access_combined_escape(line + n, sizeof(line) - n,
		    e->user_agent != NULL && *e->user_agent ? e->user_agent : "-");
		ACCESS_ADD("\"");
	}
	if (n >= sizeof(line))
		n = sizeof(line) - 1;
	line[n++] = '\n';
	/* One write per line: O_APPEND keeps lines from several workers whole. */
	if (write(al->fd, line, n) < 0) {
		/* nothing sensible to do: the error log may be the same descriptor */
	}
}
