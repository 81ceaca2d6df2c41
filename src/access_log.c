#include "config.h"
#include "access_log.h"
#include "jstr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/*
 * A line goes out in one write(2), so that lines of several workers never mix.  Each string
 * value has a budget of escaped bytes, chosen so that every value at its budget and the rest
 * of the line still fit in ACCESS_LINE_MAX: a longer value is cut short (never inside an
 * escape), and the line always ends as it began.  The lists (an aggregated request's
 * backends, log.json_fields) are written whole, the line growing past ACCESS_LINE_MAX when
 * they need it; only without memory for that are backends left out, and the line says how
 * many.
 */
#define ACCESS_LINE_MAX 8192
#define ACCESS_TARGET_MAX 2048          /* the request-target */
#define ACCESS_HEADER_MAX 512           /* User-Agent, Referer */
#define ACCESS_FIELD_MAX 256            /* any other string */
#define ACCESS_FIXED_MAX 512            /* keys, punctuation, time, numbers, newline */
#define ACCESS_TAIL_MAX 64              /* what may follow a list: closing brackets, the
                                         * count of backends left out, the newline */

/* With a JSON-RPC method (a sixth field in JSON, a third in combined). */
_Static_assert(ACCESS_TARGET_MAX + 6 * ACCESS_FIELD_MAX + ACCESS_FIXED_MAX <= ACCESS_LINE_MAX,
    "the JSON format fits in a line");
_Static_assert(ACCESS_TARGET_MAX + 2 * ACCESS_HEADER_MAX + 3 * ACCESS_FIELD_MAX +
    ACCESS_FIXED_MAX <= ACCESS_LINE_MAX, "the combined format fits in a line");

struct access_line {
	char *buf;                      /* stack, or on the heap once a list grew the line */
	size_t cap, n;
	char stack[ACCESS_LINE_MAX];
};

/* Room for n more bytes and what may follow them: 0, or -1 without memory (what is written
 * then stays within the room there is). */
static int
access_reserve(struct access_line *l, size_t n)
{
	size_t cap = l->cap;
	char *p;

	n += ACCESS_TAIL_MAX;
	if (cap - l->n >= n)
		return 0;
	while (cap - l->n < n)
		cap *= 2;
	if (l->buf == l->stack) {
		if ((p = malloc(cap)) != NULL)
			memcpy(p, l->buf, l->n);
	} else {
		p = realloc(l->buf, cap);
	}
	if (p == NULL)
		return -1;
	l->buf = p;
	l->cap = cap;
	return 0;
}

static void
access_lit(struct access_line *l, const char *s)
{
	size_t len = strlen(s);

	if (len > l->cap - 1 - l->n)
		len = l->cap - 1 - l->n;
	memcpy(l->buf + l->n, s, len);
	l->n += len;
}

static void __attribute__((format(printf, 2, 3)))
access_printf(struct access_line *l, const char *fmt, ...)
{
	size_t room = l->cap - 1 - l->n;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vsnprintf(l->buf + l->n, room + 1, fmt, ap);
	va_end(ap);
	if (r > 0)
		l->n += (size_t)r < room ? (size_t)r : room;
}

/* s[0..len) as the inside of a JSON string, at most max bytes (jstr.h: valid UTF-8 as it is,
 * other bytes as U+FFFD, so a line is valid JSON and UTF-8 whatever the request held). */
static void
access_json_n(struct access_line *l, const char *s, size_t len, size_t max)
{
	if (max > l->cap - 1 - l->n)
		max = l->cap - 1 - l->n;
	l->n += jstr_escape_max(l->buf + l->n, s, len, max, NULL);
}

static void
access_json(struct access_line *l, const char *s, size_t max)
{
	access_json_n(l, s, strlen(s), max);
}

/* ,"MEMBER":{"NAME":"value",...}: each name and value at most ACCESS_FIELD_MAX bytes. */
static void
access_fields(struct access_line *l, const char *member, const struct access_field *f,
    size_t n)
{
	size_t i, name, value;

	access_lit(l, member);
	for (i = 0; i < n; i++) {
		name = jstr_escape_max(NULL, f[i].name, strlen(f[i].name), ACCESS_FIELD_MAX, NULL);
		value = f[i].value == NULL ? 4 :
		    jstr_escape_max(NULL, f[i].value, f[i].len, ACCESS_FIELD_MAX, NULL) + 2;
		if (access_reserve(l, 4 + name + value) < 0)
			break;          /* no memory: the rest left out */
		if (i != 0)
			access_lit(l, ",");
		access_lit(l, "\"");
		access_json(l, f[i].name, ACCESS_FIELD_MAX);
		access_lit(l, "\":");
		if (f[i].value == NULL) {
			access_lit(l, "null");
			continue;
		}
		access_lit(l, "\"");
		access_json_n(l, f[i].value, f[i].len, ACCESS_FIELD_MAX);
		access_lit(l, "\"");
	}
	access_lit(l, "}");
}

/* Combined format quotes fields: quotes, backslashes, controls and non-ASCII as nginx
 * writes them (\xHH), at most max bytes. */
static void
access_combined_n(struct access_line *l, const char *s, size_t len, size_t max)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = l->buf + l->n;
	size_t n = 0, i;

	if (max > l->cap - 1 - l->n)
		max = l->cap - 1 - l->n;
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f) {
			if (n + 4 > max)
				break;
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		} else {
			if (n + 1 > max)
				break;
			out[n++] = (char)ch;
		}
	}
	l->n += n;
}

static void
access_combined(struct access_line *l, const char *s, size_t max)
{
	access_combined_n(l, s, strlen(s), max);
}

/* Combined format: the bytes access_combined writes for s, at most max. */
static size_t
access_combined_len(const char *s, size_t max)
{
	size_t n = 0, w;

	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		w = ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f ? 4 : 1;
		if (n + w > max)
			break;
		n += w;
	}
	return n;
}

/*
 * The backends of an aggregated request, every one of them: as a JSON object of name ->
 * { status, outcome, duration_ms }, or for the combined format as one quoted field of
 * "name:status:outcome:ms" words.  Without memory to grow the line, those that do not fit
 * are left out and counted: "backends_omitted":N, or a last word "+N".
 */
static void
access_backends(struct access_line *l, const struct access_entry *e, int json)
{
	char tail[128];
	size_t i, name;
	int n;

	access_lit(l, json ? ",\"backends\":{" : " \"");
	for (i = 0; i < e->nbackends; i++) {
		const struct access_backend *b = &e->backends[i];

		if (json)
			n = snprintf(tail, sizeof(tail), "\":{\"status\":%d,\"outcome\":\"%s\","
			    "\"duration_ms\":%.3f}", b->status, b->outcome, b->duration_ms);
		else
			n = snprintf(tail, sizeof(tail), ":%d:%s:%.3f", b->status, b->outcome,
			    b->duration_ms);
		name = json ?
		    jstr_escape_max(NULL, b->name, strlen(b->name), ACCESS_FIELD_MAX, NULL) :
		    access_combined_len(b->name, ACCESS_FIELD_MAX);
		if (n < 0 || (size_t)n >= sizeof(tail) || access_reserve(l, 2 + name + (size_t)n) < 0)
			break;
		if (i != 0)
			access_lit(l, json ? "," : " ");
		if (json) {
			access_lit(l, "\"");
			access_json(l, b->name, ACCESS_FIELD_MAX);
		} else {
			access_combined(l, b->name, ACCESS_FIELD_MAX);
		}
		access_lit(l, tail);
	}
	if (json) {
		access_lit(l, "}");
		if (i < e->nbackends)
			access_printf(l, ",\"backends_omitted\":%zu", e->nbackends - i);
	} else {
		if (i < e->nbackends)
			access_printf(l, "%s+%zu", i != 0 ? " " : "", e->nbackends - i);
		access_lit(l, "\"");
	}
}

void
access_log_write(const struct access_log *al, const struct access_entry *e)
{
	struct access_line l;
	char when[64];
	struct timespec ts;
	struct tm tm;

	if (al->fd < 0)
		return;
	l.buf = l.stack;
	l.cap = sizeof(l.stack);
	l.n = 0;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (al->format == ACCESS_JSON) {
		gmtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		access_printf(&l, "{\"time\":\"%s.%03ldZ\",\"remote_addr\":\"", when,
		    ts.tv_nsec / 1000000);
		access_json(&l, e->remote_addr, ACCESS_FIELD_MAX);
		access_lit(&l, "\",\"method\":\"");
		access_json(&l, e->method, ACCESS_FIELD_MAX);
		access_lit(&l, "\",\"path\":\"");
		access_json(&l, e->path, ACCESS_TARGET_MAX);
		access_printf(&l, "\",\"status\":%d,\"bytes_sent\":%llu,\"body_bytes_sent\":%llu,"
		    "\"upstream\":\"", e->status, (unsigned long long)e->bytes_sent,
		    (unsigned long long)e->body_bytes_sent);
		access_json(&l, e->upstream, ACCESS_FIELD_MAX);
		access_lit(&l, "\",\"route\":\"");
		access_json(&l, e->route, ACCESS_FIELD_MAX);
		access_printf(&l, "\",\"duration_ms\":%.3f,\"request_id\":\"", e->duration_ms);
		access_json(&l, e->request_id, ACCESS_FIELD_MAX);
		access_lit(&l, "\"");
		if (e->principal != NULL) {
			access_lit(&l, ",\"principal\":\"");
			access_json_n(&l, e->principal, e->principal_len, ACCESS_FIELD_MAX);
			access_lit(&l, "\"");
		}
		/* Before the lists, which may grow the line. */
		if (e->rpc_method != NULL) {
			access_lit(&l, ",\"rpc_method\":\"");
			access_json_n(&l, e->rpc_method, e->rpc_method_len, ACCESS_FIELD_MAX);
			access_lit(&l, "\"");
		} else if (e->rpc_batch >= 0) {
			access_printf(&l, ",\"rpc_batch\":%ld", e->rpc_batch);
		}
		if (e->tunnel_outcome != NULL)
			access_printf(&l, ",\"tunnel\":\"%s\",\"bytes_received\":%llu",
			    e->tunnel_outcome, (unsigned long long)e->tunnel_received);
		if (e->njson != 0)
			access_fields(&l, ",\"json\":{", e->json, e->njson);
		if (e->npath != 0)
			access_fields(&l, ",\"path_fields\":{", e->path_fields, e->npath);
		if (e->njwt != 0)
			access_fields(&l, ",\"jwt_fields\":{", e->jwt_fields, e->njwt);
		if (e->backends != NULL)
			access_backends(&l, e, 1);
		access_lit(&l, "}");
	} else {
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S %z", &tm);
		access_combined(&l, e->remote_addr, ACCESS_FIELD_MAX);
		/* nginx's $remote_user: the principal */
		access_lit(&l, " - ");
		if (e->principal != NULL)
			access_combined_n(&l, e->principal, e->principal_len, ACCESS_FIELD_MAX);
		else
			access_lit(&l, "-");
		access_printf(&l, " [%s] \"", when);
		access_combined(&l, e->method, ACCESS_FIELD_MAX);
		access_lit(&l, " ");
		access_combined(&l, e->path, ACCESS_TARGET_MAX);
		access_printf(&l, " %s\" %d %llu \"", e->protocol, e->status,
		    (unsigned long long)e->body_bytes_sent);
		access_combined(&l, e->referer != NULL && *e->referer ? e->referer : "-",
		    ACCESS_HEADER_MAX);
		access_lit(&l, "\" \"");
		access_combined(&l, e->user_agent != NULL && *e->user_agent ? e->user_agent : "-",
		    ACCESS_HEADER_MAX);
		access_lit(&l, "\"");
		/* A JSON-RPC route has no backends: the line has room for it. */
		if (e->rpc_method != NULL) {
			access_lit(&l, " \"rpc:");
			access_combined_n(&l, e->rpc_method, e->rpc_method_len, ACCESS_FIELD_MAX);
			access_lit(&l, "\"");
		} else if (e->rpc_batch >= 0) {
			access_printf(&l, " \"rpc_batch:%ld\"", e->rpc_batch);
		}
		if (e->tunnel_outcome != NULL)
			access_printf(&l, " \"tunnel:%s received:%llu\"", e->tunnel_outcome,
			    (unsigned long long)e->tunnel_received);
		if (e->backends != NULL)
			access_backends(&l, e, 0);
	}
	l.buf[l.n++] = '\n';
	/* One write per line: O_APPEND keeps lines from several workers whole. */
	if (write(al->fd, l.buf, l.n) < 0) {
		/* nothing sensible to do: the error log may be the same descriptor */
	}
	if (l.buf != l.stack)
		free(l.buf);
}
