/*
 * Configuration: YAML file -> struct config.
 *
 * The file is loaded with libyaml's document API so that every node keeps its position; the
 * schema (config_schema.c, one table per mapping) drives key checking, parsing and defaults.
 * Every error is collected with its position and the key path being parsed, and all of them
 * are reported at the end in file order, so one run of `jsongate -t` shows everything that is
 * wrong.  The other pieces: config_yaml.c (errors, YAML nodes, scalars), config_tls.c,
 * config_resolve.c (server names resolved at load), config_upstreams.c, config_routes.c and
 * config_check.c (the files the configuration writes).
 */
#include "config.h"
#include "config_parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "header_ops.h"
#include "jprefix.h"
#include "route.h"
#include "tls.h"

/* ------------------------------------------------------------------ generic parsing */

static size_t
config_levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, prev, cur, tmp;
	size_t row[64];

	if (la >= 64 || lb >= 64)
		return 64;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			cur = prev + (tolower((unsigned char)a[i - 1]) !=
			    tolower((unsigned char)b[j - 1]));
			if (row[j] + 1 < cur)
				cur = row[j] + 1;
			if (row[j - 1] + 1 < cur)
				cur = row[j - 1] + 1;
			tmp = row[j];
			row[j] = cur;
			prev = tmp;
		}
	}
	return row[lb];
}

static void
config_unknown_key(struct config_parse *ctx, const yaml_node_t *node, const char *key,
    const struct config_section *sec)
{
	size_t i, d, best = SIZE_MAX, besti = 0, len = 0;
	char list[512];

	for (i = 0; i < sec->nfields; i++) {
		d = config_levenshtein(key, sec->fields[i].key);
		if (d < best) {
			best = d;
			besti = i;
		}
	}
	/* Close enough to be a typo: at most 2 edits, and fewer than half the word. */
	if (best <= 2 && best * 2 < strlen(key)) {
		config_error(ctx, node, "unknown key '%s'; did you mean '%s'?", key,
		    sec->fields[besti].key);
		return;
	}
	list[0] = '\0';
	for (i = 0; i < sec->nfields && len < sizeof(list); i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "",
		    sec->fields[i].key);
	config_error(ctx, node, "unknown key '%s'; expected one of: %s", key, list);
}

static void *
config_at(void *obj, size_t offset)
{
	return (char *)obj + offset;
}

static void
config_bad_uint(struct config_parse *ctx, const yaml_node_t *node, const struct config_field *f,
    const char *text)
{
	config_error(ctx, node, "expected an integer from %llu to %llu, got \"%s\"",
	    (unsigned long long)f->min, (unsigned long long)f->max, text);
}

/* Format a size for messages the way a user would write it. */
static void
config_size_text(uint64_t v, char *buf, size_t cap)
{
	if (v >= (1ULL << 30) && v % (1ULL << 30) == 0)
		snprintf(buf, cap, "%llug", (unsigned long long)(v >> 30));
	else if (v >= (1ULL << 20) && v % (1ULL << 20) == 0)
		snprintf(buf, cap, "%llum", (unsigned long long)(v >> 20));
	else if (v >= 1024 && v % 1024 == 0)
		snprintf(buf, cap, "%lluk", (unsigned long long)(v >> 10));
	else
		snprintf(buf, cap, "%llu", (unsigned long long)v);
}

/* Parse one value (node NULL: apply the field's default). */
static void
config_parse_field(struct config_parse *ctx, const struct config_field *f,
    const yaml_node_t *node, void *obj)
{
	const char *text = NULL;
	const char *why;
	char buf[32];
	size_t size;
	uint64_t ms;
	unsigned u;
	int i;

	switch (f->type) {
	case CONFIG_SECTION:
		config_parse_map(ctx, node, f->section, obj);
		return;
	case CONFIG_CUSTOM:
		f->fn(ctx, node, obj);
		return;
	default:
		break;
	}
	if (node == NULL) {
		text = f->def;
		if (text == NULL)
			return;         /* no default: the field stays zero / NULL */
	}

	switch (f->type) {
	case CONFIG_UINT:
		if (node != NULL && (text = config_scalar(ctx, node, "an integer")) == NULL)
			return;
		if (config_parse_uint_text(text, f->min, f->max, &u) == -1) {
			config_bad_uint(ctx, node, f, text);
			return;
		}
		*(unsigned *)config_at(obj, f->offset) = u;
		break;
	case CONFIG_SIZE:
		if (node != NULL && (text = config_scalar(ctx, node, "a size like 16k")) == NULL)
			return;
		if (config_parse_size(text, &size) == -1) {
			config_error(ctx, node, "expected a size like 512, 16k or 8m, got \"%s\"",
			    text);
			return;
		}
		if (size < f->min) {
			config_size_text(f->min, buf, sizeof(buf));
			config_error(ctx, node, "must be at least %s", buf);
			return;
		}
		if (size > f->max) {
			config_size_text(f->max, buf, sizeof(buf));
			config_error(ctx, node, "must be at most %s", buf);
			return;
		}
		*(size_t *)config_at(obj, f->offset) = size;
		break;
	case CONFIG_DURATION:
		if (node != NULL && (text = config_scalar(ctx, node, "a duration like 10s")) == NULL)
			return;
		if (config_parse_duration(text, &ms) == -1) {
			config_error(ctx, node,
			    "expected a duration like 10s, 250ms or 2m, got \"%s\"", text);
			return;
		}
		if (ms < f->min) {
			config_error(ctx, node, "must be at least %llums", (unsigned long long)f->min);
			return;
		}
		*(uint64_t *)config_at(obj, f->offset) = ms;
		break;
	case CONFIG_STRING:
		if (node != NULL && (text = config_string(ctx, node)) == NULL)
			return;
		free(*(char **)config_at(obj, f->offset));
		*(char **)config_at(obj, f->offset) = config_xstrdup(text);
		break;
	case CONFIG_ENUM:
		if (node != NULL && (text = config_scalar(ctx, node, "a name")) == NULL)
			return;
		for (i = 0; f->choices[i] != NULL; i++) {
			if (strcmp(text, f->choices[i]) == 0) {
				*(int *)config_at(obj, f->offset) = i;
				return;
			}
		}
		{
			char list[256];
			size_t len = 0;

			list[0] = '\0';
			for (i = 0; f->choices[i] != NULL && len < sizeof(list); i++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
				    i ? ", " : "", f->choices[i]);
			config_error(ctx, node, "expected one of %s; got \"%s\"", list, text);
		}
		break;
	case CONFIG_ADDR:
	case CONFIG_ADDR_PTR: {
		struct config_addr addr, *dst;

		if (node != NULL && (text = config_scalar(ctx, node, "an address")) == NULL)
			return;
		if ((why = config_addr_parse(text, &addr)) != NULL) {
			config_error(ctx, node, "invalid address \"%s\": %s", text, why);
			return;
		}
		if (f->type == CONFIG_ADDR)
			dst = config_at(obj, f->offset);
		else {
			dst = *(struct config_addr **)config_at(obj, f->offset);
			if (dst == NULL) {
				dst = config_xcalloc(1, sizeof(*dst));
				*(struct config_addr **)config_at(obj, f->offset) = dst;
			}
		}
		config_addr_free(dst);
		*dst = addr;
		break;
	}
	default:
		break;
	}
}

/*
 * Check a mapping's keys against its section table, then parse each field in table order,
 * applying defaults for absent ones.  map NULL: the section is absent, all defaults.
 */
void
config_parse_map(struct config_parse *ctx, const yaml_node_t *map,
    const struct config_section *sec, void *obj)
{
	const yaml_node_t *vals[CONFIG_MAX_FIELDS] = { 0 }, *keys[CONFIG_MAX_FIELDS] = { 0 };
	const yaml_node_pair_t *pair;
	const yaml_node_t *k, *v;
	const char *key;
	size_t i, saved;

	if (map != NULL && map->type != YAML_MAPPING_NODE && !config_is_null(map)) {
		config_error(ctx, map, "expected a mapping, got %s", config_node_kind(map));
		map = NULL;
	} else if (config_is_null(map))
		map = NULL;

	for (pair = map ? map->data.mapping.pairs.start : NULL;
	    map != NULL && pair < map->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		v = config_node(ctx, pair->value);
		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			config_error(ctx, k, "keys must be strings, got %s", config_node_kind(k));
			continue;
		}
		key = (const char *)k->data.scalar.value;
		for (i = 0; i < sec->nfields; i++)
			if (strcmp(sec->fields[i].key, key) == 0)
				break;
		if (i == sec->nfields)
			config_unknown_key(ctx, k, key, sec);
		else if (keys[i] != NULL)
			config_error(ctx, k, "duplicate key '%s' (first at line %zu)", key,
			    keys[i]->start_mark.line + 1);
		else {
			keys[i] = k;
			vals[i] = v;
		}
	}

	for (i = 0; i < sec->nfields; i++) {
		const struct config_field *f = &sec->fields[i];
		int absent = config_is_null(vals[i]) &&
		    !(vals[i] != NULL && (f->flags & CONFIG_NULL_VALUE));

		if (absent && map != NULL && (f->flags & CONFIG_REQUIRED)) {
			if (vals[i] != NULL) {
				saved = config_where_key(ctx, f->key);
				config_error(ctx, keys[i], "missing value");
				config_where_pop(ctx, saved);
			} else
				config_error(ctx, map, "missing required key '%s'", f->key);
			continue;
		}
		saved = f->type == CONFIG_SECTION && absent ? ctx->wherelen :
		    config_where_key(ctx, f->key);
		ctx->key = keys[i];
		config_parse_field(ctx, f, absent ? NULL : vals[i], obj);
		config_where_pop(ctx, saved);
	}
}

/* A list item or named object: unlike an optional section, it must be a mapping. */
void
config_parse_object(struct config_parse *ctx, const yaml_node_t *node,
    const struct config_section *sec, void *obj)
{
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping, got %s",
		    config_is_null(node) ? "nothing" : config_node_kind(node));
		return;
	}
	config_parse_map(ctx, node, sec, obj);
}

/* ------------------------------------------------------------------ custom fields */

void
config_parse_workers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text = "auto";
	long n;

	if (node != NULL && (text = config_scalar(ctx, node, "auto or a number")) == NULL)
		return;
	if (strcmp(text, "auto") == 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->workers = n < 1 ? 1 : n > CONFIG_MAX_WORKERS ? CONFIG_MAX_WORKERS : (unsigned)n;
		return;
	}
	if (config_parse_uint_text(text, 1, CONFIG_MAX_WORKERS, &cfg->workers) == -1)
		config_error(ctx, node, "expected auto or an integer from 1 to %d, got \"%s\"",
		    CONFIG_MAX_WORKERS, text);
}

/* Make a relative file name relative to the configuration file's directory: every file the
 * configuration names is found the same way, whatever the working directory. */
void
config_resolve_path(struct config_parse *ctx, char **path)
{
	const char *slash = strrchr(ctx->file, '/');
	char *p;

	if (*path == NULL || (*path)[0] == '/' || slash == NULL)
		return;
	p = config_xasprintf("%.*s/%s", (int)(slash - ctx->file), ctx->file, *path);
	free(*path);
	*path = p;
}

void
config_parse_error_log(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text;
	char *socket_path;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->error_log);
	cfg->error_log = NULL;
	cfg->error_log_mark = node->start_mark;
	if (strcmp(text, "stderr") == 0 || strcmp(text, "syslog") == 0) {
		cfg->error_log = config_xstrdup(text);
	} else if (strncmp(text, "syslog:", 7) == 0) {
		if (text[7] == '\0') {
			config_error(ctx, node, "syslog: needs the socket after the colon, "
			    "as in syslog:/dev/log");
			return;
		}
		socket_path = config_xstrdup(text + 7);
		config_resolve_path(ctx, &socket_path);
		cfg->error_log = config_xasprintf("syslog:%s", socket_path);
		free(socket_path);
	} else {
		cfg->error_log = config_xstrdup(text);
		config_resolve_path(ctx, &cfg->error_log);
	}
}

/* user: kept with its position, for config_check_files. */
void
config_parse_user(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->user);
	cfg->user = config_xstrdup(text);
	cfg->user_mark = node->start_mark;
}

void
config_parse_pid_file(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->pid_file);
	cfg->pid_file = config_xstrdup(text);
	config_resolve_path(ctx, &cfg->pid_file);
	cfg->pid_file_mark = node->start_mark;
}

void
config_parse_access(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const char *text = "stderr";

	if (node != NULL && (text = config_string(ctx, node)) == NULL)
		return;
	free(cfg->access_log);
	cfg->access_log = strcmp(text, "off") == 0 ? NULL : config_xstrdup(text);
	if (cfg->access_log != NULL && strcmp(cfg->access_log, "stderr") != 0) {
		config_resolve_path(ctx, &cfg->access_log);
		cfg->access_log_mark = node->start_mark;
	}
}

/* A dotted path of a request body field ($json.PATH); 0, or -1 after an error. */
int
config_json_path(struct config_parse *ctx, const yaml_node_t *node, const char *text)
{
	struct jcond_seg segs[JPREFIX_MAX_PATH];

	if (jprefix_path(text, strlen(text), segs) != 0)
		return 0;
	config_error(ctx, node, "expected a field or a dotted path of at most %d keys such as "
	    "user.id, got \"%s\"", JPREFIX_MAX_PATH, text);
	return -1;
}

/* log.json_fields: paths of body fields for the access log; its json format only. */
void
config_parse_json_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) > CONFIG_MAX_JSON_FIELDS) {
		config_error(ctx, node, "at most %d fields", CONFIG_MAX_JSON_FIELDS);
		return;
	}
	if (n != 0 && cfg->access_format != ACCESS_JSON) {
		config_error(ctx, node, "only the json access log format has body fields");
		return;
	}
	cfg->json_fields = config_xcalloc(n, sizeof(*cfg->json_fields));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) != NULL &&
		    config_json_path(ctx, item, text) == 0)
			cfg->json_fields[cfg->njson_fields++] = config_xstrdup(text);
	}
}

/* log.path_fields: names of path template captures for the access log; json format only. */
void
config_parse_path_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, j, n;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) > CONFIG_MAX_PATH_FIELDS) {
		config_error(ctx, node, "at most %d captures", CONFIG_MAX_PATH_FIELDS);
		return;
	}
	if (n != 0 && cfg->access_format != ACCESS_JSON) {
		config_error(ctx, node, "only the json access log format has path captures");
		return;
	}
	cfg->path_fields = config_xcalloc(n, sizeof(*cfg->path_fields));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		j = strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
		if (text[0] == '\0' || text[j] != '\0')
			config_error(ctx, item, "expected the name of a capture ({NAME} of a path "
			    "template: letters, digits, '_' and '-'), got \"%s\"", text);
		else
			cfg->path_fields[cfg->npath_fields++] = config_xstrdup(text);
	}
}

/* log.jwt_fields: claims of the verified token (dotted paths) for the access log; json
 * format only. */
void
config_parse_jwt_fields(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) > CONFIG_MAX_PATH_FIELDS) {
		config_error(ctx, node, "at most %d claims", CONFIG_MAX_PATH_FIELDS);
		return;
	}
	if (n != 0 && cfg->access_format != ACCESS_JSON) {
		config_error(ctx, node, "only the json access log format has token claims");
		return;
	}
	cfg->jwt_fields = config_xcalloc(n, sizeof(*cfg->jwt_fields));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if (text[0] == '\0' || text[0] == '.' || text[strlen(text) - 1] == '.' ||
		    strstr(text, "..") != NULL || strlen(text) >= 128)
			config_error(ctx, item, "expected a claim, a dotted path such as sub or "
			    "org.id, got \"%s\"", text);
		else
			cfg->jwt_fields[cfg->njwt_fields++] = config_xstrdup(text);
	}
}

void
config_parse_listeners(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item, *addr_node;
	size_t i, j, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "at least one listener is required");
		return;
	}
	cfg->listeners = config_xcalloc(n, sizeof(*cfg->listeners));
	cfg->nlisteners = n;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, item, &config_listener_section, &cfg->listeners[i]);
		config_where_pop(ctx, saved);
		if (cfg->listeners[i].addr.text == NULL)
			continue;
		for (j = 0; j < i; j++) {
			if (cfg->listeners[j].addr.text == NULL ||
			    !config_addr_same(&cfg->listeners[i].addr, &cfg->listeners[j].addr))
				continue;
			addr_node = config_map_get(ctx, item, "listen");
			saved = config_where_push(ctx, "[%zu].listen", i);
			config_error(ctx, addr_node, "duplicate listener address %s (first at line %zu)",
			    cfg->listeners[i].addr.text,
			    config_map_get(ctx, config_list_item(ctx, node, j),
			    "listen")->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
	}
	/* Unset: HTTP/2 with TLS (offered by ALPN), not on a plain port. */
	for (i = 0; i < n; i++)
		if (cfg->listeners[i].http2 < 0)
			cfg->listeners[i].http2 = cfg->listeners[i].tls != NULL;
}

void
config_parse_listener_http2(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener *l = obj;
	const char *text;

	l->http2 = -1;
	if (node == NULL || (text = config_scalar(ctx, node, "true or false")) == NULL)
		return;
	if (strcmp(text, "true") == 0)
		l->http2 = 1;
	else if (strcmp(text, "false") == 0)
		l->http2 = 0;
	else
		config_error(ctx, node, "expected true or false, got \"%s\"", text);
}

/* ------------------------------------------------------------------ load and free */

static void
config_upstream_free(struct config_upstream *up)
{
	size_t i;

	config_servers_free(up->servers, up->nservers);
	for (i = 0; i < up->nnames; i++) {
		free(up->names[i].host);
		resolver_answer_free(&up->names[i].answer);
	}
	free(up->names);
	free(up->name);
	free(up->host_header);
	free(up->hash_key);
	if (up->health != NULL) {
		free(up->health->path);
		free(up->health->host);
		jcond_free(up->health->json);
		free(up->health);
	}
	if (up->tls != NULL) {
		tls_client_free(up->tls->ctx);
		free(up->tls->ca);
		free(up->tls->server_name);
		free(up->tls->cert);
		free(up->tls->key);
		free(up->tls);
	}
}

static void
config_listener_free(struct config_listener *l)
{
	size_t i;

	config_addr_free(&l->addr);
	if (l->tls == NULL)
		return;
	tls_server_free(l->tls->ctx);
	for (i = 0; i < l->tls->ncerts; i++) {
		free(l->tls->certs[i].cert);
		free(l->tls->certs[i].key);
	}
	free(l->tls->certs);
	free(l->tls->ciphers);
	free(l->tls->client_ca);
	free(l->tls);
}

static void
config_route_free(struct config_route *route)
{
	size_t i;

	for (i = 0; i < route->nbackends; i++) {
		struct config_backend *b = &route->backends[i];
		free(b->name);
		free(b->key_json);
		free(b->after);
		free(b->path);
		template_free(&b->target);
		free(b->method);
		for (size_t j = 0; j < b->nheaders; j++) {
			free(b->headers[j].name);
			template_free(&b->headers[j].value);
		}
		free(b->headers);
		rewrite_program_free(b->response);
	}
	free(route->backends);
	config_jsonrpc_free(route->jsonrpc);
	free(route->errors_key);
	free(route->errors_key_json);
	free(route->name);
	free(route->host);
	free(route->path);
	route_pattern_free(route->pattern);
	free(route->path_prefix);
	free(route->strip_prefix);
	for (i = 0; i < route->njson_match; i++)
		jcond_free(route->json_match[i]);
	free(route->json_match);
	config_json_types_free(route->json_types);
	cors_policy_free(&route->cors);
	config_route_auth_free(route);
	rewrite_program_free(route->request);
	rewrite_program_free(route->response);
	rewrite_program_free(route->error_response);
	rewrite_program_free(route->events);
	header_ops_free(route->request_headers);
	header_ops_free(route->response_headers);
}

void
config_free(struct config *cfg)
{
	size_t i;

	if (cfg == NULL)
		return;
	free(cfg->path);
	free(cfg->user);
	free(cfg->pid_file);
	free(cfg->access_log);
	for (i = 0; i < cfg->njson_fields; i++)
		free(cfg->json_fields[i]);
	free(cfg->json_fields);
	for (i = 0; i < cfg->npath_fields; i++)
		free(cfg->path_fields[i]);
	free(cfg->path_fields);
	for (i = 0; i < cfg->njwt_fields; i++)
		free(cfg->jwt_fields[i]);
	free(cfg->jwt_fields);
	free(cfg->error_log);
	config_addr_free(cfg->admin_listen);
	free(cfg->admin_listen);
	config_addr_free(cfg->resolver);
	free(cfg->resolver);
	for (i = 0; i < cfg->nlisteners; i++)
		config_listener_free(&cfg->listeners[i]);
	free(cfg->listeners);
	/* upstreams array may be partly filled after errors: free every slot allocated */
	for (i = 0; i < cfg->nupstreams; i++)
		config_upstream_free(&cfg->upstreams[i]);
	free(cfg->upstreams);
	for (i = 0; i < cfg->nroutes; i++)
		config_route_free(&cfg->routes[i]);
	free(cfg->routes);
	config_auth_free(cfg);
	free(cfg);
}

/* Checks across sections: the admin endpoint cannot share a listener's address. */
static void
config_check_top(struct config_parse *ctx, const yaml_node_t *root)
{
	const struct config *cfg = ctx->cfg;
	size_t i, saved;

	if (cfg->admin_listen == NULL)
		return;
	for (i = 0; i < cfg->nlisteners; i++) {
		if (cfg->listeners[i].addr.text == NULL ||
		    !config_addr_same(cfg->admin_listen, &cfg->listeners[i].addr))
			continue;
		saved = config_where_key(ctx, "admin.listen");
		config_error(ctx, config_map_get(ctx, config_map_get(ctx, root, "admin"), "listen"),
		    "%s is already used by listeners[%zu]", cfg->admin_listen->text, i);
		config_where_pop(ctx, saved);
		break;
	}
}

/*
 * libyaml's problem at its position, with where the construct it was reading began.  Reader
 * errors (bad UTF-8, control bytes) carry only a byte offset: count lines up to it.
 */
static void
config_syntax_error(struct config_parse *ctx, const yaml_parser_t *parser, FILE *fp)
{
	const char *problem = parser->problem ? parser->problem : "YAML syntax error";
	yaml_mark_t mark;
	size_t off;
	int c, err = errno;

	if (parser->error == YAML_READER_ERROR) {
		if (ferror(fp)) {
			config_error(ctx, NULL, "cannot read: %s", strerror(err));
			return;
		}
		memset(&mark, 0, sizeof(mark));
		rewind(fp);
		for (off = 0; off < parser->problem_offset && (c = getc(fp)) != EOF; off++) {
			if (c == '\n') {
				mark.line++;
				mark.column = 0;
			} else if ((c & 0xc0) != 0x80)
				mark.column++;  /* count characters, not UTF-8 continuation bytes */
		}
		config_error_at(ctx, mark, "%s (byte 0x%02x)", problem,
		    (unsigned)parser->problem_value & 0xff);
		return;
	}
	if (parser->context != NULL)
		config_error_at(ctx, parser->problem_mark, "%s (%s at %zu:%zu)",
		    problem, parser->context, parser->context_mark.line + 1,
		    parser->context_mark.column + 1);
	else
		config_error_at(ctx, parser->problem_mark, "%s", problem);
}

static void
config_load_doc(struct config_parse *ctx, FILE *fp)
{
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	yaml_node_t *root;

	if (!yaml_parser_initialize(&parser)) {
		config_error(ctx, NULL, "cannot initialise the YAML parser");
		return;
	}
	yaml_parser_set_input_file(&parser, fp);
	if (!yaml_parser_load(&parser, &doc)) {
		config_syntax_error(ctx, &parser, fp);
		yaml_parser_delete(&parser);
		return;
	}
	ctx->doc = &doc;
	root = yaml_document_get_root_node(&doc);
	/* A document of just ~ or null is as empty as no document: no listeners, nothing to do. */
	if (root == NULL || config_is_null(root))
		config_error(ctx, NULL, "the configuration is empty");
	else {
		config_parse_map(ctx, root, &config_top_section, ctx->cfg);
		config_check_top(ctx, root);
		config_auth_finish(ctx);
		config_resolve_names(ctx, root);
	}

	/* A second document would be silently ignored: say so instead. */
	if (root != NULL) {
		if (!yaml_parser_load(&parser, &extra))
			config_syntax_error(ctx, &parser, fp);
		else {
			if (yaml_document_get_root_node(&extra) != NULL)
				config_error(ctx, yaml_document_get_root_node(&extra),
				    "only one YAML document is allowed");
			yaml_document_delete(&extra);
		}
	}
	ctx->doc = NULL;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
}

struct config *
config_load(const char *path, char **errors)
{
	struct config_parse *ctx;
	struct config *cfg;
	FILE *fp;

	*errors = NULL;
	ctx = config_parse_new(path);
	cfg = config_xcalloc(1, sizeof(*cfg));
	cfg->path = config_xstrdup(path);
	ctx->cfg = cfg;
	if ((fp = fopen(path, "rb")) == NULL)
		config_error(ctx, NULL, "cannot open: %s", strerror(errno));
	else {
		config_load_doc(ctx, fp);
		fclose(fp);
	}
	if (ctx->nerrs > 0) {
		*errors = config_parse_errors(ctx);
		config_free(cfg);
		cfg = NULL;
	}
	config_parse_free(ctx);
	return cfg;
}
