#include "config.h"
#include "path_vars.h"

#include <stdlib.h>
#include <string.h>

#include "access_log.h"
#include "http.h"
#include "rewrite.h"

#define PATH_VARS_KEEP 1024             /* bytes of values kept between requests */

/* s[0..len) percent-decoded into out (room for len bytes); a '%' not followed by two hex
 * digits stays as it is.  Returns the length. */
static size_t
path_vars_decode(const char *s, size_t len, char *out)
{
	size_t i = 0, n = 0;
	int hi, lo;

	while (i < len) {
		if (s[i] == '%' && i + 2 < len && (hi = http_hex_value(s[i + 1])) >= 0 &&
		    (lo = http_hex_value(s[i + 2])) >= 0) {
			out[n++] = (char)(hi << 4 | lo);
			i += 3;
		} else {
			out[n++] = s[i++];
		}
	}
	return n;
}

int
path_vars_set(struct path_vars *pv, const struct config_route *route, const char *path,
    size_t len)
{
	struct http_str caps[ROUTE_MAX_CAPTURES];
	size_t i, n, at = 0;
	char *grown;

	pv->pattern = NULL;
	if (route->pattern == NULL || (n = route_captures(route, path, len, caps)) == 0)
		return 0;
	/* The captures are pieces of path, and decoding never lengthens them. */
	if (pv->text_cap < len) {
		if ((grown = realloc(pv->text, len)) == NULL)
			return -1;
		pv->text = grown;
		pv->text_cap = len;
	}
	for (i = 0; i < n; i++) {
		pv->off[i] = at;
		pv->len[i] = path_vars_decode(caps[i].p, caps[i].len, pv->text + at);
		at += pv->len[i];
	}
	pv->pattern = route->pattern;
	return 0;
}

int
path_vars_get(const struct path_vars *pv, const char *name, size_t len, const char **value,
    size_t *value_len)
{
	int i, rest;

	if (pv == NULL || pv->pattern == NULL ||
	    (i = route_pattern_capture(pv->pattern, name, len, &rest)) < 0)
		return 0;
	*value = pv->text + pv->off[i];
	*value_len = pv->len[i];
	return 1;
}

static int
path_vars_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	return path_vars_get(arg, name, len, &value->p, &value->len);
}

void
path_vars_vars(const struct path_vars *pv, struct rewrite_vars *vars)
{
	vars->path_cb = path_vars_cb;
	vars->path_arg = pv;
}

size_t
path_vars_log(const struct path_vars *pv, const struct config *cfg, struct access_field *out)
{
	size_t i;

	for (i = 0; i < cfg->npath_fields; i++) {
		out[i].name = cfg->path_fields[i];
		if (!path_vars_get(pv, cfg->path_fields[i], strlen(cfg->path_fields[i]),
		    &out[i].value, &out[i].len))
			out[i].value = NULL;
	}
	return cfg->npath_fields;
}

void
path_vars_clear(struct path_vars *pv)
{
	pv->pattern = NULL;
	/* An idle connection keeps little: the values of a long path go. */
	if (pv->text_cap > PATH_VARS_KEEP) {
		free(pv->text);
		pv->text = NULL;
		pv->text_cap = 0;
	}
}

void
path_vars_free(struct path_vars *pv)
{
	free(pv->text);
	memset(pv, 0, sizeof(*pv));
}
