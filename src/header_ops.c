/*
 * Header ops of a route: what they may name, and how they change a head being written.
 */
#include "config.h"
#include "header_ops.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "headers.h"
#include "jprefix.h"
#include "route.h"

#define HEADER_OPS_TIME_LEN (sizeof("1970-01-01T00:00:00+00:00") - 1)

/* The request variables a value may be, as `set` of the envelope ops knows them. */
static const struct {
	const char *name;
	enum rewrite_var var;
} header_ops_vars[] = {
	{ "$request_id", REWRITE_VAR_REQUEST_ID }, { "$route", REWRITE_VAR_ROUTE },
	{ "$upstream", REWRITE_VAR_UPSTREAM }, { "$remote_addr", REWRITE_VAR_REMOTE_ADDR },
	{ "$time_iso8601", REWRITE_VAR_TIME_ISO8601 },
	{ "$ssl_client_s_dn", REWRITE_VAR_SSL_CLIENT_S_DN },
	{ "$ssl_client_verify", REWRITE_VAR_SSL_CLIENT_VERIFY },
	{ "$api_key", REWRITE_VAR_API_KEY }, { "$client_addr", REWRITE_VAR_CLIENT_ADDR },
};

/* Why jsongate keeps a header name to itself, or NULL. */
static const char *
header_ops_reserved(const char *name, size_t len)
{
	struct http_str n = { name, len };

	if (HTTP_IEQ(name, len, "content-length") || HTTP_IEQ(name, len, "transfer-encoding"))
		return "message framing, which jsongate writes itself";
	if (headers_is_hop_by_hop(n))
		return "a hop-by-hop header, which jsongate removes and manages itself";
	if (HTTP_IEQ(name, len, "host"))
		return "the Host sent upstream is the client's, or upstreams.NAME.host_header";
	return NULL;
}

/* Parse value into op: literal text or one variable ($path.NAME of pattern's captures).
 * NULL or why not. */
static const char *
header_ops_value(struct header_op *op, const char *value, int request,
    const struct route_pattern *pattern)
{
	struct jcond_seg segs[JPREFIX_MAX_PATH];
	size_t len = strlen(value), i;
	const char *why;

	op->var = REWRITE_VAR_NONE;
	if (len >= 2 && value[0] == '$' && value[1] == '$') {
		value++;
		len--;
	} else if (len > 0 && value[0] == '$') {
		for (i = 0; i < sizeof(header_ops_vars) / sizeof(header_ops_vars[0]); i++)
			if (strcmp(value, header_ops_vars[i].name) == 0)
				op->var = header_ops_vars[i].var;
		if (op->var == REWRITE_VAR_UPSTREAM && request)
			return "$upstream is not known yet when the request head is written "
			    "(once for every try)";
		if (op->var == REWRITE_VAR_NONE && strncmp(value, "$header.", 8) == 0) {
			if (!http_is_token(value + 8, len - 8))
				return "bad header name in $header.NAME";
			op->var = REWRITE_VAR_HEADER;
			value += 8;
			len -= 8;
		} else if (op->var == REWRITE_VAR_NONE && strncmp(value, "$json.", 6) == 0) {
			if (jprefix_path(value + 6, len - 6, segs) == 0)
				return "bad path in $json.PATH: an empty key or too many keys";
			op->var = REWRITE_VAR_JSON;
			value += 6;
			len -= 6;
		} else if (op->var == REWRITE_VAR_NONE && strncmp(value, "$jwt.", 5) == 0) {
			if (jprefix_path(value + 5, len - 5, segs) == 0)
				return "bad path in $jwt.CLAIM: an empty key or too many keys";
			op->var = REWRITE_VAR_JWT;
			value += 5;
			len -= 5;
		} else if (op->var == REWRITE_VAR_NONE && strncmp(value, "$path.", 6) == 0) {
			if ((why = route_path_var_why(pattern, value + 6, len - 6)) != NULL)
				return why;
			op->var = REWRITE_VAR_PATH;
			value += 6;
			len -= 6;
		}
		if (op->var == REWRITE_VAR_NONE)
			return "unknown variable (expected $request_id, $route, $upstream, "
			    "$remote_addr, $client_addr, $time_iso8601, $header.NAME, $json.PATH, "
			    "$path.NAME, $jwt.CLAIM, $api_key, $ssl_client_s_dn, $ssl_client_verify; "
			    "$$ for a literal $)";
		if (op->var != REWRITE_VAR_HEADER && op->var != REWRITE_VAR_JSON &&
		    op->var != REWRITE_VAR_PATH && op->var != REWRITE_VAR_JWT)
			len = 0;
	}
	for (i = 0; op->var == REWRITE_VAR_NONE && i < len; i++)
		if (((unsigned char)value[i] < 0x20 && value[i] != '\t') || value[i] == 0x7f)
			return "the value has a control character";
	if ((op->value = malloc(len + 1)) == NULL)
		return "out of memory";
	memcpy(op->value, value, len);
	op->value[len] = '\0';
	op->value_len = len;
	return NULL;
}

static const struct header_op *
header_ops_find(const struct header_op *list, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (list[i].len == len && http_ieq(name, list[i].lower, len))
			return &list[i];
	return NULL;
}

static int
header_ops_append(struct header_op **list, size_t *n, const struct header_op *op)
{
	struct header_op *grown = realloc(*list, (*n + 1) * sizeof(**list));

	if (grown == NULL)
		return -1;
	*list = grown;
	grown[(*n)++] = *op;
	return 0;
}

static void
header_ops_op_free(struct header_op *op)
{
	free(op->name);
	free(op->lower);
	free(op->value);
	free(op->line);
}

/* The op's line: all of it for a text, the name and ": " before a variable's value. */
static int
header_ops_line(struct header_op *op)
{
	size_t n = op->len + 2;

	if (op->var == REWRITE_VAR_NONE)
		n += op->value_len + 2;
	if ((op->line = malloc(n)) == NULL)
		return -1;
	memcpy(op->line, op->name, op->len);
	memcpy(op->line + op->len, ": ", 2);
	if (op->var == REWRITE_VAR_NONE) {
		memcpy(op->line + op->len + 2, op->value, op->value_len);
		memcpy(op->line + n - 2, "\r\n", 2);
	}
	op->line_len = n;
	return 0;
}

const char *
header_ops_add(struct header_ops **opsp, int request, enum header_op_kind kind,
    const char *name, const char *value, const struct route_pattern *pattern, int *in_value)
{
	struct header_ops *ops = *opsp;
	struct header_op op = { 0 }, drop;
	size_t len = strlen(name), i;
	const char *why;

	*in_value = 0;
	if (!http_is_token(name, len))
		return "not a header name (letters, digits and !#$%&'*+-.^_`|~)";
	if ((why = header_ops_reserved(name, len)) != NULL)
		return why;
	if (ops == NULL && (ops = *opsp = calloc(1, sizeof(*ops))) == NULL)
		return "out of memory";
	if (header_ops_find(ops->drop, ops->ndrop, name, len) != NULL ||
	    header_ops_find(ops->out, ops->nout, name, len) != NULL)
		return "named twice (names are case-insensitive)";
	op.len = len;
	if ((op.name = strdup(name)) == NULL || (op.lower = strdup(name)) == NULL) {
		header_ops_op_free(&op);
		return "out of memory";
	}
	for (i = 0; i < len; i++)
		op.lower[i] = (char)http_lc((unsigned char)op.lower[i]);
	if (kind != HEADER_OP_REMOVE &&
	    (why = header_ops_value(&op, value, request, pattern)) != NULL) {
		header_ops_op_free(&op);
		*in_value = 1;
		return why;
	}
	if (kind != HEADER_OP_ADD) {
		/* The drop list shares nothing with out: its own copies. */
		drop = (struct header_op){ strdup(name), strdup(op.lower), len, REWRITE_VAR_NONE,
		    NULL, 0, NULL, 0 };
		if (drop.name == NULL || drop.lower == NULL ||
		    header_ops_append(&ops->drop, &ops->ndrop, &drop) < 0) {
			header_ops_op_free(&drop);
			header_ops_op_free(&op);
			return "out of memory";
		}
		ops->drop_bits |= HEADER_OPS_BIT(name, len);
		if (HTTP_IEQ(name, len, "x-forwarded-for"))
			ops->own |= HEADER_OPS_XFF;
		else if (HTTP_IEQ(name, len, "x-forwarded-proto"))
			ops->own |= HEADER_OPS_XFP;
		else if (HTTP_IEQ(name, len, "x-request-id"))
			ops->own |= HEADER_OPS_REQUEST_ID;
	}
	if (kind == HEADER_OP_REMOVE) {
		header_ops_op_free(&op);
		return NULL;
	}
	ops->vars |= 1u << op.var;
	if (header_ops_line(&op) < 0 || header_ops_append(&ops->out, &ops->nout, &op) < 0) {
		header_ops_op_free(&op);
		return "out of memory";
	}
	ops->out_fixed += op.line_len + (op.var != REWRITE_VAR_NONE ? 2 : 0);
	return NULL;
}

void
header_ops_names(const struct header_ops *ops, enum rewrite_var var,
    void (*fn)(void *arg, const char *name, size_t len), void *arg)
{
	size_t i;

	for (i = 0; ops != NULL && i < ops->nout; i++)
		if (ops->out[i].var == var)
			fn(arg, ops->out[i].value, ops->out[i].value_len);
}

void
header_ops_free(struct header_ops *ops)
{
	size_t i;

	if (ops == NULL)
		return;
	for (i = 0; i < ops->ndrop; i++)
		header_ops_op_free(&ops->drop[i]);
	for (i = 0; i < ops->nout; i++)
		header_ops_op_free(&ops->out[i]);
	free(ops->drop);
	free(ops->out);
	free(ops);
}

int
header_ops_drops_named(const struct header_ops *ops, struct http_str name)
{
	return header_ops_find(ops->drop, ops->ndrop, name.p, name.len) != NULL;
}

/* The value of a variable for this request into *v; 0: a request header it does not carry. */
static inline int
header_ops_var(const struct header_op *op, const struct rewrite_vars *vars,
    struct rewrite_str *v)
{
	switch (op->var) {
	case REWRITE_VAR_REQUEST_ID: *v = vars->request_id; return 1;
	case REWRITE_VAR_ROUTE: *v = vars->route; return 1;
	case REWRITE_VAR_UPSTREAM: *v = vars->upstream; return 1;
	case REWRITE_VAR_REMOTE_ADDR: *v = vars->remote_addr; return 1;
	case REWRITE_VAR_SSL_CLIENT_S_DN: *v = vars->ssl_client_s_dn; return 1;
	case REWRITE_VAR_SSL_CLIENT_VERIFY: *v = vars->ssl_client_verify; return 1;
	case REWRITE_VAR_HEADER:
		return vars->header_cb != NULL &&
		    vars->header_cb(vars->header_arg, op->value, op->value_len, v);
	case REWRITE_VAR_JSON:
		return vars->json_cb != NULL &&
		    vars->json_cb(vars->json_arg, op->value, op->value_len, v);
	case REWRITE_VAR_PATH:
		return vars->path_cb != NULL &&
		    vars->path_cb(vars->path_arg, op->value, op->value_len, v);
	case REWRITE_VAR_JWT:
		return vars->jwt_cb != NULL &&
		    vars->jwt_cb(vars->jwt_arg, op->value, op->value_len, v);
	case REWRITE_VAR_API_KEY: *v = vars->api_key; return v->len != 0;
	case REWRITE_VAR_CLIENT_ADDR: *v = vars->client_addr; return 1;
	default:
		return 0;
	}
}

size_t
header_ops_size(const struct header_ops *ops, const struct rewrite_vars *vars)
{
	struct rewrite_str v;
	size_t i, size = ops->out_fixed;

	if (ops->vars == 1u << REWRITE_VAR_NONE)
		return size;
	for (i = 0; i < ops->nout; i++) {
		const struct header_op *op = &ops->out[i];

		if (op->var == REWRITE_VAR_TIME_ISO8601)
			size += HEADER_OPS_TIME_LEN;
		else if (op->var != REWRITE_VAR_NONE && header_ops_var(op, vars, &v))
			size += v.len;
	}
	return size;
}

char *
header_ops_put(char *w, const struct header_ops *ops, const struct rewrite_vars *vars)
{
	struct rewrite_str v;
	char tbuf[HEADER_OPS_TIME_LEN + 1];
	struct http_str text;
	struct tm tm;
	time_t t;
	size_t i, j;

	for (i = 0; i < ops->nout; i++) {
		const struct header_op *op = &ops->out[i];
		/* A route's name may hold any byte its YAML can, a body field or a decoded
		 * path capture any byte the client sent; the other values are checked where
		 * they come from (here at load, the request parser, the certificate's printer
		 * in RFC 2253 form, ours). */
		int checked = op->var != REWRITE_VAR_ROUTE && op->var != REWRITE_VAR_JSON &&
		    op->var != REWRITE_VAR_PATH && op->var != REWRITE_VAR_JWT;

		if (op->var == REWRITE_VAR_NONE) {
			memcpy(w, op->line, op->line_len);
			w += op->line_len;
			continue;
		}
		if (op->var == REWRITE_VAR_TIME_ISO8601) {
			t = (time_t)vars->now;
			gmtime_r(&t, &tm);
			text.len = strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S+00:00", &tm);
			text.p = tbuf;
		} else if (header_ops_var(op, vars, &v)) {
			text.p = v.p;
			text.len = v.len;
		} else {
			continue;       /* a header, field or capture the request does not have */
		}
		memcpy(w, op->line, op->line_len);
		w += op->line_len;
		if (checked) {
			memcpy(w, text.p, text.len);
			w += text.len;
		} else {
			/* A variable's bytes: control characters would break the head. */
			for (j = 0; j < text.len; j++) {
				unsigned char c = (unsigned char)text.p[j];
				if ((c >= 0x20 && c != 0x7f) || c == '\t')
					*w++ = (char)c;
			}
		}
		*w++ = '\r';
		*w++ = '\n';
	}
	return w;
}
