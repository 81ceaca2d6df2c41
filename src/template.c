#include "config.h"
#include "template.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http.h"
#include "route.h"

#define TEMPLATE_VARS_HELP "expected ${path.NAME}, ${query.NAME}, ${header.NAME}, " \
	"${backend.NAME.FIELD}, ${request_id}, ${remote_addr}, ${jwt.CLAIM} or ${api_key}; " \
	"$$ for a literal $"

static void
template_err(char *err, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void
template_err(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
}

static struct template_piece *
template_add(struct template *t, enum template_var var, const char *text, size_t len)
{
	struct template_piece *grown, *pc;
	char *more;

	/* Text after text ($$ splits a run): one piece. */
	if (var == TEMPLATE_TEXT && t->npieces > 0 && t->pieces[t->npieces - 1].var == var) {
		pc = &t->pieces[t->npieces - 1];
		if ((more = realloc(pc->text, pc->len + len + 1)) == NULL)
			return NULL;
		memcpy(more + pc->len, text, len);
		pc->text = more;
		pc->len += len;
		pc->text[pc->len] = '\0';
		return pc;
	}
	if ((grown = realloc(t->pieces, (t->npieces + 1) * sizeof(*grown))) == NULL)
		return NULL;
	t->pieces = grown;
	pc = &t->pieces[t->npieces];
	memset(pc, 0, sizeof(*pc));
	if ((pc->text = malloc(len + 1)) == NULL)
		return NULL;
	memcpy(pc->text, text, len);
	pc->text[len] = '\0';
	pc->len = len;
	pc->var = var;
	t->npieces++;
	t->vars |= 1u << var;
	return pc;
}

static int
template_token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Which backend of the scope ${backend.NAME.FIELD} names: the longest name followed by a
 * dot and a field; -1 if none. */
static int
template_backend(const struct template_scope *scope, const char *s, size_t len, size_t *off)
{
	size_t i, n, best = 0;
	int found = -1;

	for (i = 0; i < scope->nbackends; i++) {
		n = strlen(scope->backends[i]);
		if (n + 1 < len && n >= best && memcmp(s, scope->backends[i], n) == 0 &&
		    s[n] == '.') {
			best = n;
			found = (int)i;
		}
	}
	*off = best + 1;
	return found;
}

/* The variable name[0..len) (what is inside ${}) as a piece. */
static int
template_var(struct template *t, const char *name, size_t len, int in_query,
    const struct template_scope *scope, char *err, size_t cap)
{
	struct template_piece *pc;
	enum template_var var;
	size_t off = 0, i;
	int capture = 0, rest = 0, b;

	if (len == 10 && memcmp(name, "request_id", 10) == 0) {
		var = TEMPLATE_REQUEST_ID;
	} else if (len == 11 && memcmp(name, "remote_addr", 11) == 0) {
		var = TEMPLATE_REMOTE_ADDR;
	} else if (len == 7 && memcmp(name, "api_key", 7) == 0) {
		var = TEMPLATE_API_KEY;
	} else if (len > 4 && memcmp(name, "jwt.", 4) == 0) {
		var = TEMPLATE_JWT;
		off = 4;
	} else if (len > 5 && memcmp(name, "path.", 5) == 0) {
		var = TEMPLATE_PATH;
		off = 5;
		if (scope->pattern == NULL) {
			template_err(err, cap, "${%.*s}: the route's match.path is not a path "
			    "template", (int)len, name);
			return -1;
		}
		if ((capture = route_pattern_capture(scope->pattern, name + 5, len - 5, &rest)) < 0) {
			template_err(err, cap, "${%.*s}: the route's path template has no {%.*s}",
			    (int)len, name, (int)(len - 5), name + 5);
			return -1;
		}
	} else if (len > 6 && memcmp(name, "query.", 6) == 0) {
		var = TEMPLATE_QUERY;
		off = 6;
	} else if (len > 7 && memcmp(name, "header.", 7) == 0) {
		var = TEMPLATE_HEADER;
		off = 7;
		for (i = off; i < len && template_token_char(name[i]); i++)
			;
		if (i < len) {
			template_err(err, cap, "${%.*s}: not a header name", (int)len, name);
			return -1;
		}
	} else if (len > 8 && memcmp(name, "backend.", 8) == 0) {
		var = TEMPLATE_BACKEND;
		if ((b = template_backend(scope, name + 8, len - 8, &off)) < 0) {
			template_err(err, cap, "${%.*s}: only the answer of a backend named in after "
			    "can be read, as ${backend.NAME.FIELD}", (int)len, name);
			return -1;
		}
		off += 8;
		for (i = off; i < len; i++)
			if (name[i] == '.' && (i == off || i + 1 == len || name[i + 1] == '.'))
				break;
		if (i < len) {
			template_err(err, cap, "${%.*s}: a field is names joined by dots",
			    (int)len, name);
			return -1;
		}
		capture = (int)scope->backend_index[b];
	} else {
		template_err(err, cap, "unknown variable ${%.*s} (" TEMPLATE_VARS_HELP ")",
		    (int)len, name);
		return -1;
	}
	if ((pc = template_add(t, var, name, len)) == NULL) {
		template_err(err, cap, "out of memory");
		return -1;
	}
	pc->off = off;
	pc->index = (unsigned)capture;
	pc->rest = rest != 0;
	pc->in_query = in_query != 0;
	if (var == TEMPLATE_HEADER)
		for (i = off; i < len; i++)
			if (pc->text[i] >= 'A' && pc->text[i] <= 'Z')
				pc->text[i] = (char)(pc->text[i] | 0x20);
	return 0;
}

int
template_parse(struct template *t, const char *text, int target,
    const struct template_scope *scope, char *err, size_t cap)
{
	const char *p = text, *lit = text, *close;
	int in_query = 0;

	memset(t, 0, sizeof(*t));
	t->target = target != 0;
	while (*p != '\0') {
		if (*p == '$') {
			if (p > lit && template_add(t, TEMPLATE_TEXT, lit, (size_t)(p - lit)) == NULL)
				goto oom;
			if (p[1] == '$') {
				/* The second $ starts the next literal run. */
				lit = p + 1;
				p += 2;
				continue;
			}
			if (p[1] != '{') {
				template_err(err, cap, "a '$' starts ${NAME} or $$ (a literal $)");
				goto fail;
			}
			if ((close = strchr(p + 2, '}')) == NULL) {
				template_err(err, cap, "'${' without its '}'");
				goto fail;
			}
			if (template_var(t, p + 2, (size_t)(close - p - 2), in_query, scope, err,
			    cap) < 0)
				goto fail;
			p = lit = close + 1;
			continue;
		}
		if (target && ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '#')) {
			template_err(err, cap, "a request-target holds visible ASCII characters "
			    "only, without '#'");
			goto fail;
		}
		if (!target && (*p == '\r' || *p == '\n')) {
			template_err(err, cap, "a header value cannot hold a line break");
			goto fail;
		}
		in_query |= target && *p == '?';
		p++;
	}
	if (p > lit && template_add(t, TEMPLATE_TEXT, lit, (size_t)(p - lit)) == NULL)
		goto oom;
	return 0;
oom:
	template_err(err, cap, "out of memory");
fail:
	template_free(t);
	return -1;
}

void
template_free(struct template *t)
{
	size_t i;

	for (i = 0; i < t->npieces; i++)
		free(t->pieces[i].text);
	free(t->pieces);
	memset(t, 0, sizeof(*t));
}

/* --- rendering --------------------------------------------------------------------------- */

/* Output goes through a small buffer: values are written a byte at a time. */
struct template_out {
	struct evbuffer *out;
	size_t n;
	char buf[512];
};

static void
template_flush(struct template_out *o)
{
	evbuffer_add(o->out, o->buf, o->n);
	o->n = 0;
}

static inline void
template_put(struct template_out *o, char c)
{
	if (o->n == sizeof(o->buf))
		template_flush(o);
	o->buf[o->n++] = c;
}

/* The byte at s[*i] of a percent-encoded value (form: '+' is a space), advancing *i. */
static unsigned char
template_decoded(const char *s, size_t len, size_t *i, int form)
{
	int hi, lo;

	if (s[*i] == '%' && *i + 2 < len &&
	    (hi = http_hex_value(s[*i + 1])) >= 0 && (lo = http_hex_value(s[*i + 2])) >= 0) {
		*i += 3;
		return (unsigned char)(hi << 4 | lo);
	}
	if (form && s[*i] == '+') {
		(*i)++;
		return ' ';
	}
	return (unsigned char)s[(*i)++];
}

/* 1 when the percent-encoded (form) s[0..len) decodes to name[0..nlen). */
static int
template_decoded_eq(const char *s, size_t len, const char *name, size_t nlen)
{
	size_t i = 0, j = 0;

	while (i < len)
		if (j == nlen || template_decoded(s, len, &i, 1) != (unsigned char)name[j++])
			return 0;
	return j == nlen;
}

/* The value of the first query parameter named name, as sent, or an empty string. */
static struct http_str
template_query(struct http_str q, const char *name, size_t nlen)
{
	const char *p = q.p, *end = q.p + q.len, *amp, *eq, *kend;

	if (p < end && *p == '?')
		p++;
	while (p < end) {
		amp = memchr(p, '&', (size_t)(end - p));
		if (amp == NULL)
			amp = end;
		eq = memchr(p, '=', (size_t)(amp - p));
		kend = eq != NULL ? eq : amp;
		if (template_decoded_eq(p, (size_t)(kend - p), name, nlen))
			return eq != NULL ? (struct http_str){ eq + 1, (size_t)(amp - eq - 1) } :
			    (struct http_str){ "", 0 };
		p = amp + 1;
	}
	return (struct http_str){ "", 0 };
}

static int
template_unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    c == '-' || c == '.' || c == '_' || c == '~';
}

/* Write one byte of a value: percent-encoded in a request-target (but a slash the client
 * wrote between the segments of a {NAME...} capture in the path: sep), refused in a header
 * when it would end the line.  0 or -1. */
static int
template_value_byte(struct template_out *o, const struct template *t,
    const struct template_piece *pc, unsigned char c, int sep)
{
	static const char hex[] = "0123456789ABCDEF";

	if (!t->target) {
		if (c == '\r' || c == '\n' || c == '\0')
			return -1;
		template_put(o, (char)c);
	} else if (template_unreserved(c) || (sep && !pc->in_query)) {
		template_put(o, (char)c);
	} else {
		template_put(o, '%');
		template_put(o, hex[c >> 4]);
		template_put(o, hex[c & 15]);
	}
	return 0;
}

/* How a value is written: percent-encoded (a query parameter's '+' a space too), or as it
 * is. */
enum template_coding { TEMPLATE_AS_IS, TEMPLATE_PERCENT, TEMPLATE_FORM };

/* The value of the variable pc for the request v: 0, or -1 with *why (a backend's field). */
static int
template_value(const struct template_piece *pc, const struct template_values *v,
    struct http_str *val, enum template_coding *coding, const char **why)
{
	*coding = TEMPLATE_AS_IS;
	switch (pc->var) {
	case TEMPLATE_PATH:
		*val = v->captures[pc->index];
		*coding = TEMPLATE_PERCENT;
		return 0;
	case TEMPLATE_QUERY:
		*val = template_query(v->req->query, pc->text + pc->off, pc->len - pc->off);
		*coding = TEMPLATE_FORM;
		return 0;
	case TEMPLATE_HEADER:
		*val = http_find_header(v->req->headers, v->req->nheaders, pc->text + pc->off);
		return 0;
	case TEMPLATE_BACKEND:
		return v->backend(v->backend_arg, pc->index, pc->text + pc->off, pc->len - pc->off,
		    val, why);
	case TEMPLATE_REQUEST_ID:
		val->p = v->request_id;
		val->len = strlen(v->request_id);
		return 0;
	case TEMPLATE_JWT:
		if (v->claim == NULL ||
		    v->claim(v->claim_arg, pc->text + pc->off, pc->len - pc->off, val) < 0)
			*val = (struct http_str){ "", 0 };
		return 0;
	case TEMPLATE_API_KEY:
		*val = (struct http_str){ v->api_key != NULL ? v->api_key : "",
			v->api_key != NULL ? strlen(v->api_key) : 0 };
		return 0;
	default:
		val->p = v->remote_addr;
		val->len = strlen(v->remote_addr);
		return 0;
	}
}

/* 1 when the value holds a segment "." or "..", its dots percent-encoded or not, split at
 * every slash it decodes to: a backend that decodes %2F sees those too. */
static int
template_dot_segment_in(struct http_str v, enum template_coding coding)
{
	size_t i = 0, len = 0, dots = 0;
	unsigned char c;

	while (i < v.len) {
		c = coding == TEMPLATE_AS_IS ? (unsigned char)v.p[i++] :
		    template_decoded(v.p, v.len, &i, coding == TEMPLATE_FORM);
		if (c == '/') {
			if (len != 0 && len == dots && dots <= 2)
				return 1;
			len = dots = 0;
			continue;
		}
		len++;
		dots += c == '.';
	}
	return len != 0 && len == dots && dots <= 2;
}

static void
template_dot_segment_err(const struct template_piece *pc, char *err, size_t cap)
{
	template_err(err, cap, "${%s} holds a dot segment ('.' or '..'), which cannot go in a "
	    "path", pc->text);
}

int
template_dot_segment(const struct template *t, const struct template_values *v, char *err,
    size_t cap)
{
	const struct template_piece *pc;
	enum template_coding coding;
	struct http_str val;
	size_t i;

	for (i = 0; t->target && i < t->npieces; i++) {
		pc = &t->pieces[i];
		if (pc->var == TEMPLATE_TEXT || pc->var == TEMPLATE_BACKEND || pc->in_query)
			continue;
		template_value(pc, v, &val, &coding, NULL);
		if (template_dot_segment_in(val, coding)) {
			template_dot_segment_err(pc, err, cap);
			return TEMPLATE_BAD_VALUE;
		}
	}
	return 0;
}

int
template_render(const struct template *t, const struct template_values *v,
    struct evbuffer *out, char *err, size_t cap)
{
	struct template_out o = { out, 0, { 0 } };
	const struct template_piece *pc;
	enum template_coding coding;
	struct http_str val;
	const char *why;
	size_t i, j;
	int bad = TEMPLATE_BAD_VALUE;

	for (i = 0; i < t->npieces; i++) {
		pc = &t->pieces[i];
		if (pc->var == TEMPLATE_TEXT) {
			template_flush(&o);
			evbuffer_add(out, pc->text, pc->len);
			continue;
		}
		/* What an answer gave is the answer's fault, not the request's. */
		bad = pc->var == TEMPLATE_BACKEND ? TEMPLATE_BAD_FIELD : TEMPLATE_BAD_VALUE;
		if (template_value(pc, v, &val, &coding, &why) < 0) {
			template_err(err, cap, "${%s}: %s", pc->text, why);
			goto fail;
		}
		if (t->target && !pc->in_query && template_dot_segment_in(val, coding)) {
			template_dot_segment_err(pc, err, cap);
			goto fail;
		}
		for (j = 0; j < val.len;) {
			/* Only the slashes as sent separate segments: a %2F stays one. */
			int sep = pc->rest && val.p[j] == '/';
			unsigned char c = coding != TEMPLATE_AS_IS ? template_decoded(val.p, val.len,
			    &j, coding == TEMPLATE_FORM) : (unsigned char)val.p[j++];

			if (template_value_byte(&o, t, pc, c, sep) < 0) {
				template_err(err, cap, "the value of ${%s} holds a line break: it "
				    "cannot go in a header", pc->text);
				goto fail;
			}
		}
	}
	template_flush(&o);
	return 0;
fail:
	template_flush(&o);
	return bad;
}
