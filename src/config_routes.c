/* Configuration: routes (match, ops, header ops), the backends of aggregated routes, JSON-RPC
 * routes. */
#include "config.h"
#include "config_parse.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "header_ops.h"
#include "headers.h"
#include "route.h"

/* A path-like string that must start with '/'; NULL after an error. */
char *
config_path_value(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *text = config_string(ctx, node);

	if (text == NULL)
		return NULL;
	if (text[0] != '/') {
		config_error(ctx, node, "must start with '/', got \"%s\"", text);
		return NULL;
	}
	return config_xstrdup(text);
}

void
config_parse_route_name(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *text;

	if (node != NULL && (text = config_string(ctx, node)) != NULL)
		route->name = config_xstrdup(text);
}

void
config_parse_route_host(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *text, *colon;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	colon = strrchr(text, ':');
	if (colon != NULL && (text[0] != '[' || strchr(colon, ']') == NULL)) {
		config_error(ctx, node, "must be a host name without a port, got \"%s\"", text);
		return;
	}
	route->host = config_xstrdup(text);
	for (i = 0; route->host[i] != '\0'; i++)
		route->host[i] = (char)tolower((unsigned char)route->host[i]);
	/* "example.com." and "example.com" are the same host */
	if (i > 1 && route->host[i - 1] == '.')
		route->host[i - 1] = '\0';
}

/* An exact path, or with a segment in braces a path template. */
void
config_parse_route_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const char *why;

	if (node == NULL || (route->path = config_path_value(ctx, node)) == NULL ||
	    strpbrk(route->path, "{}") == NULL)
		return;
	if ((route->pattern = route_pattern_new(route->path, &why)) == NULL)
		config_error(ctx, node, "%s, got \"%s\"", why, route->path);
}

void
config_parse_route_path_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node != NULL)
		route->path_prefix = config_path_value(ctx, node);
}

void
config_parse_route_strip(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node != NULL)
		route->strip_prefix = config_path_value(ctx, node);
}

/* match.json: one condition (jcond.h), or a list of conditions that must all hold. */
void
config_parse_route_json(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	struct jcond *c;
	size_t i, n = 1;

	if (node == NULL)
		return;
	if (node->type == YAML_SEQUENCE_NODE && (n = config_list_len(node)) == 0) {
		config_error(ctx, node, "expected a condition or a non-empty list of conditions");
		return;
	}
	route->json_match = config_xcalloc(n, sizeof(*route->json_match));
	for (i = 0; i < n; i++) {
		item = node->type == YAML_SEQUENCE_NODE ? config_list_item(ctx, node, i) : node;
		if ((c = jcond_parse(ctx, ctx->doc, (yaml_node_t *)item)) == NULL)
			continue;
		if (jcond_uses_status(c)) {
			config_error(ctx, item, "a request has no status: match.json tests fields");
			jcond_free(c);
			continue;
		}
		route->json_match[route->njson_match++] = c;
	}
}

void
config_parse_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text;
	char upper[16];
	size_t i, j, n, len;
	unsigned bit;

	route->methods = METHOD_ANY;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "an empty list allows no method; omit it to allow all");
		return;
	}
	route->methods = 0;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		/* names are case-sensitive on the wire, but get GET is clearly meant */
		len = strlen(text);
		for (j = 0; j < len && j < sizeof(upper); j++)
			upper[j] = (char)toupper((unsigned char)text[j]);
		bit = len < sizeof(upper) ? config_method_bit(upper, len) : METHOD_OTHER;
		if (bit == METHOD_OTHER) {
			config_error(ctx, item, "unknown method \"%s\"; expected one of: GET, HEAD, "
			    "POST, PUT, DELETE, OPTIONS, PATCH, TRACE, CONNECT", text);
			continue;
		}
		route->methods |= bit;
		/* as in nginx: allowing GET allows HEAD */
		if (bit == METHOD_GET)
			route->methods |= METHOD_HEAD;
	}
	if (route->methods == 0)
		route->methods = METHOD_ANY;
}

/* The upstream named by node, or NULL after reporting it unknown. */
static struct config_upstream *
config_find_upstream(struct config_parse *ctx, const yaml_node_t *node)
{
	const char *text;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return NULL;
	for (i = 0; i < ctx->cfg->nupstreams; i++)
		if (strcmp(ctx->cfg->upstreams[i].name, text) == 0)
			return &ctx->cfg->upstreams[i];
	config_error(ctx, node, "unknown upstream '%s'", text);
	return NULL;
}

void
config_parse_route_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_route *)obj)->upstream = config_find_upstream(ctx, node);
}

void
config_parse_backend_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_backend *)obj)->upstream = config_find_upstream(ctx, node);
}

/* The names a backend's templates may use: the route's captures, the answers it waits for. */
static void
config_backend_scope(struct config_parse *ctx, const struct config_backend *b,
    struct template_scope *scope, const char **names, unsigned *index)
{
	size_t i;

	memset(scope, 0, sizeof(*scope));
	scope->pattern = ctx->route->pattern;
	for (i = 0; i < b->nafter; i++) {
		names[i] = ctx->route->backends[b->after[i]].name;
		index[i] = (unsigned)b->after[i];
	}
	scope->backends = names;
	scope->backend_index = index;
	scope->nbackends = b->nafter;
}

static int
config_template(struct config_parse *ctx, const yaml_node_t *node, const char *text,
    int target, const struct config_backend *b, struct template *t)
{
	const char *names[CONFIG_MAX_BACKENDS];
	unsigned index[CONFIG_MAX_BACKENDS];
	struct template_scope scope;
	char err[512];

	config_backend_scope(ctx, b, &scope, names, index);
	if (template_parse(t, text, target, &scope, err, sizeof(err)) < 0) {
		config_error(ctx, node, "%s", err);
		return -1;
	}
	return 0;
}

/* A request-target with ${variables}: '/' first, then visible ASCII without a fragment. */
void
config_parse_backend_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;

	if (node == NULL || (b->path = config_path_value(ctx, node)) == NULL)
		return;
	config_template(ctx, node, b->path, 1, b, &b->target);
}

/* `after: user` or `after: [ user, account ]`: other backends of the route. */
void
config_parse_backend_after(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const struct config_route *route = ctx->route;
	const yaml_node_t *item;
	const char *text;
	size_t i, j, n;

	if (node == NULL)
		return;
	n = node->type == YAML_SEQUENCE_NODE ? config_list_len(node) : 1;
	b->after = config_xcalloc(n, sizeof(*b->after));
	for (i = 0; i < n; i++) {
		item = node->type == YAML_SEQUENCE_NODE ? config_list_item(ctx, node, i) : node;
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		for (j = 0; j < route->nbackends && strcmp(route->backends[j].name, text); j++)
			;
		if (j == route->nbackends)
			config_error(ctx, item, "no backend '%s' in this route", text);
		else if (&route->backends[j] == b)
			config_error(ctx, item, "a backend cannot wait for itself");
		else
			b->after[b->nafter++] = j;
	}
}

/* Headers of a backend request: the ones jsongate frames or that are hop-by-hop are not
 * the configuration's to set. */
void
config_parse_backend_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k, *v;
	const char *name, *value;
	struct http_str hn;
	size_t i, n;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of header name -> value, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	b->headers = config_xcalloc(n ? n : 1, sizeof(*b->headers));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		v = config_node(ctx, pair->value);
		if ((name = config_string(ctx, k)) == NULL)
			continue;
		hn.p = name;
		hn.len = strlen(name);
		if (!http_is_token(hn.p, hn.len)) {
			config_error(ctx, k, "\"%s\" is not a header name", name);
			continue;
		}
		/* Expect too: jsongate sends the body at once. */
		if (headers_is_hop_by_hop(hn) || HTTP_IEQ(hn.p, hn.len, "expect")) {
			config_error(ctx, k, "%s is set by jsongate itself (hop-by-hop or framing)",
			    name);
			continue;
		}
		for (i = 0; i < b->nheaders && !(strlen(b->headers[i].name) == hn.len &&
		    http_ieq(b->headers[i].name, name, hn.len)); i++)
			;
		if (i < b->nheaders) {
			config_error(ctx, k, "duplicate header '%s'", name);
			continue;
		}
		if ((value = config_scalar(ctx, v, "a header value")) == NULL ||
		    config_template(ctx, v, value, 0, b, &b->headers[b->nheaders].value) < 0)
			continue;
		b->headers[b->nheaders++].name = config_xstrdup(name);
	}
}

/* The methods a backend answer comes with a body to: not HEAD, CONNECT or TRACE. */
void
config_parse_backend_method(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const unsigned allowed = METHOD_GET | METHOD_POST | METHOD_PUT | METHOD_PATCH |
	    METHOD_DELETE | METHOD_OPTIONS;
	struct config_backend *b = obj;
	const char *text = "GET";
	char upper[16];
	size_t i, len;

	if (node != NULL && (text = config_string(ctx, node)) == NULL)
		return;
	len = strlen(text);
	for (i = 0; i < len && i < sizeof(upper); i++)
		upper[i] = (char)toupper((unsigned char)text[i]);
	b->method_bit = len < sizeof(upper) ? config_method_bit(upper, len) : METHOD_OTHER;
	if ((b->method_bit & allowed) == 0) {
		config_error(ctx, node, "expected GET, POST, PUT, PATCH, DELETE or OPTIONS, got "
		    "\"%s\" (a backend's answer must have a body to merge)", text);
		return;
	}
	free(b->method);
	b->method = config_xcalloc(1, len + 1);
	memcpy(b->method, upper, len);
}

/* The name as the key of a JSON member, with its colon: "name": */
static void
config_backend_key(struct config_backend *b)
{
	size_t len = strlen(b->name);
	char *p = config_xcalloc(1, 6 * len + 4);

	p[0] = '"';
	len = 1 + rewrite_json_escape(p + 1, b->name, len);
	p[len++] = '"';
	p[len++] = ':';
	b->key_json = p;
	b->key_json_len = len;
}

/* Report a backend that waits, through after, for itself. */
static void
config_check_after(struct config_parse *ctx, const yaml_node_t *node,
    const struct config_route *route)
{
	size_t reach[CONFIG_MAX_BACKENDS], seen[CONFIG_MAX_BACKENDS];
	const struct config_backend *b;
	size_t i, j, k, n, saved;

	for (i = 0; i < route->nbackends; i++) {
		memset(seen, 0, sizeof(seen));
		n = 0;
		for (j = 0; j < route->backends[i].nafter; j++)
			if (!seen[route->backends[i].after[j]]++)
				reach[n++] = route->backends[i].after[j];
		for (k = 0; k < n && !seen[i]; k++) {
			b = &route->backends[reach[k]];
			for (j = 0; j < b->nafter; j++)
				if (!seen[b->after[j]]++)
					reach[n++] = b->after[j];
		}
		if (!seen[i])
			continue;
		saved = config_where_push(ctx, ".%s.after", route->backends[i].name);
		config_error(ctx, config_map_get(ctx, config_map_get(ctx, node,
		    route->backends[i].name), "after"), "backend %s waits for itself, through "
		    "the backends it waits for", route->backends[i].name);
		config_where_pop(ctx, saved);
	}
}

/* backends: a mapping of output key -> backend, in output order.  Every name is known
 * before any backend is parsed: after may name a later one. */
void
config_parse_backends(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k;
	const yaml_node_t *vals[CONFIG_MAX_BACKENDS];
	const char *name;
	size_t i, n, saved;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of output key -> backend, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	if (n == 0) {
		config_error(ctx, node, "an aggregated route needs at least one backend");
		return;
	}
	if (n > ctx->cfg->limits.max_backends) {
		config_error(ctx, node, "%zu backends; limits.max_backends allows %u", n,
		    ctx->cfg->limits.max_backends);
		return;
	}
	route->backends = config_xcalloc(n, sizeof(*route->backends));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		if ((name = config_string(ctx, k)) == NULL)
			continue;
		for (i = 0; i < route->nbackends; i++)
			if (strcmp(route->backends[i].name, name) == 0)
				break;
		if (i < route->nbackends) {
			config_error(ctx, k, "duplicate backend '%s'", name);
			continue;
		}
		vals[route->nbackends] = config_node(ctx, pair->value);
		route->backends[route->nbackends].name = config_xstrdup(name);
		config_backend_key(&route->backends[route->nbackends++]);
	}
	ctx->route = route;
	for (i = 0; i < route->nbackends; i++) {
		saved = config_where_push(ctx, ".%s", route->backends[i].name);
		config_parse_object(ctx, vals[i], &config_backend_section, &route->backends[i]);
		config_where_pop(ctx, saved);
	}
	ctx->route = NULL;
	config_check_after(ctx, node, route);
}

/* ------------------------------------------------------------------ JSON-RPC routes */

/* A method name or prefix: the text of node. */
static void
config_jsonrpc_name_set(struct config_parse *ctx, const yaml_node_t *node,
    struct config_jsonrpc_name *n, int prefix)
{
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	if (n->text != NULL) {
		config_error(ctx, node, "match and prefix cannot both be set");
		return;
	}
	n->text = config_xstrdup(text);
	n->len = strlen(text);
	n->prefix = prefix;
}

void
config_parse_jsonrpc_match(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, &((struct config_jsonrpc_method *)obj)->name, 0);
}

void
config_parse_jsonrpc_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, &((struct config_jsonrpc_method *)obj)->name, 1);
}

void
config_parse_jsonrpc_name_prefix(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_jsonrpc_name_set(ctx, node, obj, 1);
}

void
config_parse_jsonrpc_upstream(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	((struct config_jsonrpc_method *)obj)->upstream = config_find_upstream(ctx, node);
}

/* The label (an index of labels) of an exact method name, added when it is new. */
static unsigned
config_jsonrpc_label(struct config_jsonrpc *jc, const char *name)
{
	size_t i;

	for (i = 0; i < jc->nlabels; i++)
		if (strcmp(jc->labels[i], name) == 0)
			return (unsigned)i;
	jc->labels = config_xreallocarray(jc->labels, jc->nlabels + 1, sizeof(*jc->labels));
	jc->labels[jc->nlabels] = config_xstrdup(name);
	return (unsigned)jc->nlabels++;
}

/* methods: entries in order; an entry after one that takes all its methods never applies. */
void
config_parse_jsonrpc_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;
	struct config_jsonrpc_method *m, *o;
	const yaml_node_t *item;
	size_t i, j, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	jc->methods = config_xcalloc(n, sizeof(*jc->methods));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		m = &jc->methods[jc->nmethods];
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, item, &config_jsonrpc_method_section, m);
		if (item->type == YAML_MAPPING_NODE && m->name.text == NULL &&
		    config_map_get(ctx, item, "match") == NULL &&
		    config_map_get(ctx, item, "prefix") == NULL)
			config_error(ctx, item, "expected match: NAME or prefix: PREFIX");
		config_where_pop(ctx, saved);
		if (m->name.text == NULL)
			continue;
		for (j = 0; j < jc->nmethods; j++) {
			o = &jc->methods[j];
			if (!(o->name.prefix ? m->name.len >= o->name.len && memcmp(m->name.text,
			    o->name.text, o->name.len) == 0 : !m->name.prefix &&
			    strcmp(m->name.text, o->name.text) == 0))
				continue;
			saved = config_where_push(ctx, "[%zu]", i);
			config_error(ctx, config_map_get(ctx, item, m->name.prefix ? "prefix" :
			    "match"), "the entry at line %zu takes every method this one would",
			    config_list_item(ctx, node, j)->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
		if (j < jc->nmethods) {
			free(m->name.text);
			memset(m, 0, sizeof(*m));
			continue;
		}
		m->label = m->name.prefix ? UINT32_MAX : config_jsonrpc_label(jc, m->name.text);
		jc->nmethods++;
	}
	/* "other" is the label after the names */
	for (i = 0; i < jc->nmethods; i++)
		if (jc->methods[i].label == UINT32_MAX)
			jc->methods[i].label = (unsigned)jc->nlabels;
}

void
config_parse_jsonrpc_default(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	if (node == NULL || (node->type == YAML_SCALAR_NODE &&
	    strcmp((const char *)node->data.scalar.value, "none") == 0))
		return;
	jc->default_upstream = config_find_upstream(ctx, node);
}

/* allow and deny: NAME or { prefix: P } items. */
static void
config_parse_jsonrpc_names(struct config_parse *ctx, const yaml_node_t *node,
    struct config_jsonrpc_name **out, size_t *nout)
{
	struct config_jsonrpc_name *names;
	const yaml_node_t *item;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	names = *out = config_xcalloc(n, sizeof(*names));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		if (item->type == YAML_MAPPING_NODE)
			config_parse_map(ctx, item, &config_jsonrpc_name_section, &names[*nout]);
		else
			config_jsonrpc_name_set(ctx, item, &names[*nout], 0);
		config_where_pop(ctx, saved);
		if (names[*nout].text != NULL)
			(*nout)++;
	}
}

void
config_parse_jsonrpc_allow(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	config_parse_jsonrpc_names(ctx, node, &jc->allow, &jc->nallow);
}

void
config_parse_jsonrpc_deny(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_jsonrpc *jc = obj;

	config_parse_jsonrpc_names(ctx, node, &jc->deny, &jc->ndeny);
}

void
config_parse_route_jsonrpc(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	struct config_jsonrpc *jc;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping, got %s", config_node_kind(node));
		return;
	}
	jc = route->jsonrpc = config_xcalloc(1, sizeof(*jc));
	config_parse_map(ctx, node, &config_jsonrpc_section, jc);
	jc->metrics_ids = config_xcalloc(jc->nlabels + 1, sizeof(*jc->metrics_ids));
	if (jc->nmethods == 0 && jc->default_upstream == NULL &&
	    config_map_get(ctx, node, "methods") == NULL &&
	    config_is_null(config_map_get(ctx, node, "default")))
		config_error(ctx, node, "a JSON-RPC route needs methods or a default upstream");
}

static void
config_jsonrpc_names_free(struct config_jsonrpc_name *names, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(names[i].text);
	free(names);
}

void
config_jsonrpc_free(struct config_jsonrpc *jc)
{
	size_t i;

	if (jc == NULL)
		return;
	for (i = 0; i < jc->nmethods; i++)
		free(jc->methods[i].name.text);
	free(jc->methods);
	config_jsonrpc_names_free(jc->allow, jc->nallow);
	config_jsonrpc_names_free(jc->deny, jc->ndeny);
	for (i = 0; i < jc->nlabels; i++)
		free(jc->labels[i]);
	free(jc->labels);
	free(jc->metrics_ids);
	free(jc);
}

void
config_json_types_free(char **types)
{
	size_t i;

	if (types == NULL)
		return;
	for (i = 0; types[i] != NULL; i++)
		free(types[i]);
	free(types);
}

void
config_parse_json_types(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text, *slash;
	size_t i, j, n, count = 0;
	char *t;

	if (node == NULL) {
		route->json_types = config_xcalloc(3, sizeof(char *));
		route->json_types[0] = config_xstrdup("application/json");
		route->json_types[1] = config_xstrdup("application/*+json");
		return;
	}
	if (config_list(ctx, node) == NULL) {
		route->json_types = config_xcalloc(1, sizeof(char *));
		return;
	}
	n = config_list_len(node);
	route->json_types = config_xcalloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		slash = strchr(text, '/');
		if (slash == NULL || slash == text || slash[1] == '\0' ||
		    strchr(slash + 1, '/') != NULL || strpbrk(text, " \t;,") != NULL) {
			config_error(ctx, item, "expected a media type like application/json, "
			    "got \"%s\"", text);
			continue;
		}
		t = config_xstrdup(text);
		for (j = 0; t[j] != '\0'; j++)
			t[j] = (char)tolower((unsigned char)t[j]);
		route->json_types[count++] = t;
	}
}

static void
config_parse_ops(struct config_parse *ctx, const yaml_node_t *node,
    enum rewrite_direction direction, struct rewrite_program **out)
{
	if (node == NULL)
		return;
	if (config_list(ctx, node) == NULL)
		return;
	rewrite_program_parse(ctx, ctx->doc, (yaml_node_t *)node, direction, out);
}

/* missing: omit, or null: YAML's null (as written in `missing: null`) is the value here. */
void
config_parse_backend_missing(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_backend *b = obj;
	const char *text;

	b->missing = MISSING_OMIT;
	if (node == NULL)
		return;
	if (config_is_null(node)) {
		b->missing = MISSING_NULL;
		return;
	}
	if ((text = config_scalar(ctx, node, "omit or null")) == NULL)
		return;
	if (strcmp(text, "null") == 0)
		b->missing = MISSING_NULL;
	else if (strcmp(text, "omit") != 0)
		config_error(ctx, node, "expected one of omit, null; got \"%s\"", text);
}

/* A backend's ops: status_from there says whether the backend answered (2xx) or failed. */
void
config_parse_backend_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_backend *)obj)->response);
}

void
config_parse_request_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_REQUEST, &((struct config_route *)obj)->request);
}

void
config_parse_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_route *)obj)->response);
}

void
config_parse_response_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_status_set(ctx, node, ((struct config_route *)obj)->response_on);
}

void
config_parse_error_response_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_route *)obj)->error_response);
}

/* events: the same op list as response, applied to each event of a streamed answer. */
void
config_parse_events_ops(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_ops(ctx, node, REWRITE_RESPONSE, &((struct config_route *)obj)->events);
}

/* The header ops being parsed, for the fields of config_header_ops_section. */
struct config_headers {
	struct header_ops **ops;
	int request;
};

static void
config_header_op(struct config_parse *ctx, struct config_headers *h, enum header_op_kind kind,
    const yaml_node_t *name_node, const yaml_node_t *value_node)
{
	static const char *const verbs[] = { "set", "add", "remove" };
	const char *name, *value = NULL, *why;
	int in_value;

	if ((name = config_string(ctx, name_node)) == NULL)
		return;
	if (value_node != NULL) {
		if (config_is_null(value_node)) {
			config_error(ctx, value_node, "'%s' needs a value ('' for an empty one)", name);
			return;
		}
		if ((value = config_scalar(ctx, value_node, "a header value")) == NULL)
			return;
	}
	why = header_ops_add(h->ops, h->request, kind, name, value, config_parse_pattern(ctx),
	    &in_value);
	if (why != NULL)
		config_error(ctx, in_value ? value_node : name_node, "cannot %s '%s': %s",
		    verbs[kind], name, why);
}

static void
config_parse_header_map(struct config_parse *ctx, const yaml_node_t *node, void *obj,
    enum header_op_kind kind)
{
	const yaml_node_pair_t *pair;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of NAME: VALUE, got %s",
		    config_node_kind(node));
		return;
	}
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++)
		config_header_op(ctx, obj, kind, config_node(ctx, pair->key),
		    config_node(ctx, pair->value));
}

void
config_parse_header_set(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_header_map(ctx, node, obj, HEADER_OP_SET);
}

void
config_parse_header_add(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_header_map(ctx, node, obj, HEADER_OP_ADD);
}

void
config_parse_header_remove(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	size_t i;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	for (i = 0; i < config_list_len(node); i++)
		config_header_op(ctx, obj, HEADER_OP_REMOVE, config_list_item(ctx, node, i), NULL);
}

void
config_parse_request_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_headers h = { &((struct config_route *)obj)->request_headers, 1 };

	if (node != NULL)
		config_parse_map(ctx, node, &config_header_ops_section, &h);
}

void
config_parse_response_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_headers h = { &((struct config_route *)obj)->response_headers, 0 };

	if (node != NULL)
		config_parse_map(ctx, node, &config_header_ops_section, &h);
}

/* An aggregated route makes requests of its own: keys about forwarding the client's
 * request have nothing to act on. */
static void
config_check_aggregated(struct config_parse *ctx, const yaml_node_t *item,
    struct config_route *route)
{
	static const char *const forwarding[] = { "upstream", "strip_prefix", "request", NULL };
	size_t i, saved;

	for (i = 0; forwarding[i] != NULL; i++) {
		if (config_map_get(ctx, item, forwarding[i]) == NULL)
			continue;
		saved = config_where_key(ctx, forwarding[i]);
		config_error(ctx, config_map_get(ctx, item, forwarding[i]),
		    "%s cannot go with backends: an aggregated route forwards nothing of the "
		    "client's request", forwarding[i]);
		config_where_pop(ctx, saved);
	}
	if (config_map_get(ctx, item, "events") != NULL) {
		saved = config_where_key(ctx, "events");
		config_error(ctx, config_map_get(ctx, item, "events"), "events cannot go with "
		    "backends: an aggregated route answers with one merged JSON body");
		config_where_pop(ctx, saved);
	}
	if (route->request_headers != NULL &&
	    (route->request_headers->vars & (1u << REWRITE_VAR_JSON))) {
		saved = config_where_key(ctx, "request_headers");
		config_error(ctx, config_map_get(ctx, item, "request_headers"), "$json.PATH cannot "
		    "go with backends: an aggregated route reads no request body");
		config_where_pop(ctx, saved);
	}
	if (route->errors_key != NULL) {
		struct config_backend key = { .name = route->errors_key };

		config_backend_key(&key);
		route->errors_key_json = key.key_json;
		route->errors_key_json_len = key.key_json_len;
	}
	for (i = 0; route->errors_key != NULL && i < route->nbackends; i++) {
		if (route->merge == MERGE_KEYED && strcmp(route->backends[i].name,
		    route->errors_key) == 0) {
			saved = config_where_key(ctx, "errors_key");
			config_error(ctx, config_map_get(ctx, item, "errors_key") != NULL ?
			    config_map_get(ctx, item, "errors_key") : item, "'%s' is the key of a "
			    "backend and of the errors of a partial answer: name one differently",
			    route->errors_key);
			config_where_pop(ctx, saved);
		}
		if (route->merge == MERGE_FLAT && route->backends[i].missing == MISSING_NULL) {
			saved = config_where_push(ctx, ".backends.%s.missing",
			    route->backends[i].name);
			config_error(ctx, config_map_get(ctx, config_map_get(ctx, config_map_get(ctx,
			    item, "backends"), route->backends[i].name), "missing"),
			    "a flat merge has no key to set to null");
			config_where_pop(ctx, saved);
		}
	}
}

/* A JSON-RPC route routes each call itself and forwards it as it came: keys that name one
 * upstream or edit bodies have nothing to act on. */
static void
config_check_jsonrpc(struct config_parse *ctx, const yaml_node_t *item)
{
	static const char *const conflicting[] = { "upstream", "backends", "request", "response",
	    "response_on", "error_response", "events", NULL };
	const yaml_node_t *at;
	size_t i, saved;

	for (i = 0; conflicting[i] != NULL; i++) {
		if ((at = config_map_get(ctx, item, conflicting[i])) == NULL)
			continue;
		saved = config_where_key(ctx, conflicting[i]);
		if (i == 0)
			config_error(ctx, at, "upstream cannot go with jsonrpc: calls go where "
			    "jsonrpc.methods and jsonrpc.default say");
		else if (i == 1)
			config_error(ctx, at, "backends cannot go with jsonrpc");
		else
			config_error(ctx, at, "%s cannot go with jsonrpc: calls and answers pass "
			    "byte for byte", conflicting[i]);
		config_where_pop(ctx, saved);
	}
}

/* Checks that need the whole route: exclusive keys, a strip_prefix that can apply. */
static void
config_check_route(struct config_parse *ctx, const yaml_node_t *item, struct config_route *route)
{
	const yaml_node_t *match = config_map_get(ctx, item, "match");
	const char *path = route->path ? route->path : route->path_prefix;
	size_t saved;

	if (route->upstream == NULL && route->backends == NULL &&
	    config_map_get(ctx, item, "upstream") == NULL &&
	    config_map_get(ctx, item, "backends") == NULL &&
	    config_map_get(ctx, item, "jsonrpc") == NULL)
		config_error(ctx, item, "missing required key 'upstream' (or 'backends', or "
		    "'jsonrpc')");
	if (config_map_get(ctx, item, "jsonrpc") != NULL)
		config_check_jsonrpc(ctx, item);
	if (config_map_get(ctx, item, "backends") != NULL) {
		config_check_aggregated(ctx, item, route);
	} else {
		static const char *const aggregating[] = { "merge", "timeout", "errors_key", NULL };
		size_t i;

		for (i = 0; aggregating[i] != NULL; i++) {
			if (config_map_get(ctx, item, aggregating[i]) == NULL ||
			    (i == 1 && config_map_get(ctx, item, "jsonrpc") != NULL))
				continue;
			saved = config_where_key(ctx, aggregating[i]);
			config_error(ctx, config_map_get(ctx, item, aggregating[i]),
			    "%s is for routes with backends", aggregating[i]);
			config_where_pop(ctx, saved);
		}
	}
	if (route->path != NULL && route->path_prefix != NULL) {
		saved = config_where_key(ctx, "match");
		config_error(ctx, config_map_get(ctx, match, "path_prefix"),
		    "path and path_prefix cannot both be set");
		config_where_pop(ctx, saved);
		return;
	}
	if (route->strip_prefix != NULL && path != NULL &&
	    strncmp(path, route->strip_prefix, strlen(route->strip_prefix)) != 0) {
		saved = config_where_key(ctx, "strip_prefix");
		config_error(ctx, config_map_get(ctx, item, "strip_prefix"),
		    "'%s' is not a prefix of the matched path '%s', so it would never apply",
		    route->strip_prefix, path);
		config_where_pop(ctx, saved);
	}
}

void
config_parse_routes(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	struct config_route *route;
	const yaml_node_t *item;
	size_t i, j, n, saved, rsaved;
	char name[32];

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	cfg->routes = config_xcalloc(n, sizeof(*cfg->routes));
	cfg->nroutes = n;
	for (i = 0; i < n; i++) {
		route = &cfg->routes[i];
		item = config_list_item(ctx, node, i);
		rsaved = config_where_push(ctx, "[%zu]", i);
		route->timeouts.upstream_connect = cfg->timeouts.upstream_connect;
		route->timeouts.upstream_response = cfg->timeouts.upstream_response;
		route->timeouts.upstream_try = cfg->timeouts.upstream_try;
		route->limits.max_request_body = cfg->limits.max_request_body;
		/* match is parsed first: the ops after it know the route's path template. */
		ctx->current = route;
		config_parse_object(ctx, item, &config_route_section, route);
		ctx->current = NULL;
		if (route->methods == 0)
			route->methods = METHOD_ANY;
		if (item->type == YAML_MAPPING_NODE)
			config_check_route(ctx, item, route);
		route_plan(route);
		for (j = 0; route->name != NULL && j < i; j++) {
			if (cfg->routes[j].name == NULL || strcmp(cfg->routes[j].name, route->name))
				continue;
			saved = config_where_key(ctx, "name");
			config_error(ctx, config_map_get(ctx, item, "name"),
			    "duplicate route name '%s' (first at line %zu)", route->name,
			    config_map_get(ctx, config_list_item(ctx, node, j),
			    "name")->start_mark.line + 1);
			config_where_pop(ctx, saved);
			break;
		}
		config_where_pop(ctx, rsaved);
	}
	/* unnamed routes are named after their position, as in error messages */
	for (i = 0; i < n; i++) {
		if (cfg->routes[i].name == NULL) {
			snprintf(name, sizeof(name), "routes[%zu]", i);
			cfg->routes[i].name = config_xstrdup(name);
		}
	}
}
