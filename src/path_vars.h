/*
 * The $path.NAME variables of a request: the captures of its route's path template,
 * percent-decoded and copied, so that ops, header ops and the access log read them after the
 * request head is gone.
 */
#ifndef JG_PATH_VARS_H
#define JG_PATH_VARS_H

#include <stddef.h>

#include "config.h"
#include "route.h"

struct access_field;
struct rewrite_vars;

struct path_vars {
	const struct route_pattern *pattern;    /* the request's route's, or NULL: none */
	char *text;                     /* the values, decoded, one after another */
	size_t text_cap;
	size_t off[ROUTE_MAX_CAPTURES];
	size_t len[ROUTE_MAX_CAPTURES];
};

/* Take the captures of route's path template (if it has one) in path, which it matched: 0,
 * or -1 without memory (then there are none). */
int path_vars_set(struct path_vars *pv, const struct config_route *route, const char *path,
    size_t len);
/* The value of $path.name[0..len): 1, or 0 when the route has no such capture. */
int path_vars_get(const struct path_vars *pv, const char *name, size_t len, const char **value,
    size_t *value_len);
/* Let $path.NAME in ops and header ops read them. */
void path_vars_vars(const struct path_vars *pv, struct rewrite_vars *vars);
/* The log.path_fields of cfg with their values, into out[CONFIG_MAX_PATH_FIELDS]. */
size_t path_vars_log(const struct path_vars *pv, const struct config *cfg,
    struct access_field *out);
/* The request is over: no captures until the next one's route is known. */
void path_vars_clear(struct path_vars *pv);
void path_vars_free(struct path_vars *pv);

#endif
