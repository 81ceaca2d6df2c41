/* Configuration: upstreams, their servers, what counts as a failure, retries and health checks. */
#include "config.h"
#include "config_parse.h"

#include <ctype.h>
#include <string.h>


void
config_parse_servers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;
	struct config_server *srv;
	const yaml_node_t *item;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "an upstream needs at least one server");
		return;
	}
	up->servers = config_xcalloc(n, sizeof(*up->servers));
	up->nservers = n;
	for (i = 0; i < n; i++) {
		srv = &up->servers[i];
		srv->max_fails = srv->max_connections = CONFIG_UNSET;
		item = config_list_item(ctx, node, i);
		saved = config_where_push(ctx, "[%zu]", i);
		if (item->type == YAML_MAPPING_NODE)
			config_parse_map(ctx, item, &config_server_section, srv);
		else {
			srv->weight = 1;
			config_server_address(ctx, item, srv, "an address or a mapping");
		}
		config_where_pop(ctx, saved);
	}
}

/* A list of failure names into FAIL_* bits; node NULL: the default, connect_error, timeout
 * and reset. */
static void
config_parse_failures(struct config_parse *ctx, const yaml_node_t *node, unsigned *out)
{
	const yaml_node_t *item;
	const char *text;
	size_t i, n;
	unsigned k;

	*out = FAIL_CONNECT | FAIL_TIMEOUT | FAIL_RESET;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	*out = 0;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_scalar(ctx, item, "a failure name")) == NULL)
			continue;
		if (strcmp(text, "5xx") == 0) {
			*out |= FAIL_5XX;
			continue;
		}
		for (k = 0; config_failure_names[k] != NULL; k++)
			if (strcmp(text, config_failure_names[k]) == 0)
				break;
		if (config_failure_names[k] == NULL) {
			config_error(ctx, item, "unknown failure \"%s\"; expected connect_error, "
			    "timeout, reset, invalid, 429, 500, 502, 503, 504 or 5xx", text);
			continue;
		}
		*out |= 1u << k;
	}
}

void
config_parse_fail_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_failures(ctx, node, &((struct config_upstream *)obj)->fail_on);
}

void
config_parse_retry_on(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_failures(ctx, node, &((struct config_upstream *)obj)->retry_on);
}

/* `retry_budget: 20` or `retry_budget: { percent: 20, min: 3 }`. */
void
config_parse_retry_budget(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const struct config_field fields[] = {
		F_UINT("percent", struct config_upstream, retry_budget, "20", 0, 100,
		    "retries in flight as a percent of the requests in flight"),
		F_UINT("min", struct config_upstream, retry_budget_min, "3", 0, UINT32_MAX,
		    "retries in flight always allowed"),
	};
	static const struct config_section section = CONFIG_SECTION_OF(fields);
	struct config_upstream *up = obj;
	const char *text;

	if (node != NULL && node->type == YAML_MAPPING_NODE) {
		config_parse_map(ctx, node, &section, up);
		return;
	}
	up->retry_budget = 20;
	up->retry_budget_min = 3;
	if (node != NULL && (text = config_scalar(ctx, node, "a percent")) != NULL &&
	    config_parse_uint_text(text, 0, 100, &up->retry_budget) == -1)
		config_error(ctx, node, "expected a percent from 0 to 100 or "
		    "{ percent: P, min: N }, got \"%s\"", text);
}

/* A request variable the hash balancer can read. */
void
config_parse_hash_key(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	static const char *const plain[] = {
		"$remote_addr", "$request_uri", "$path", "$host", "$api_key", "$client_addr", NULL
	};
	struct config_upstream *up = obj;
	const char *text, *p;
	size_t i;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	for (i = 0; plain[i] != NULL; i++)
		if (strcmp(text, plain[i]) == 0)
			break;
	if (plain[i] == NULL && strncmp(text, "$header.", 8) == 0 && text[8] != '\0') {
		for (p = text + 8; *p != '\0' && (isalnum((unsigned char)*p) || *p == '-' ||
		    *p == '_'); p++)
			;
		if (*p == '\0')
			i = 0;
	}
	if (plain[i] == NULL && strncmp(text, "$jwt.", 5) == 0 && text[5] != '\0' &&
	    text[strlen(text) - 1] != '.' && strstr(text, "..") == NULL)
		i = 0;
	if (plain[i] == NULL && strncmp(text, "$json.", 6) == 0) {
		if (config_json_path(ctx, node, text + 6) != 0)
			return;
		i = 0;
	}
	if (plain[i] == NULL && i != 0) {
		config_error(ctx, node, "expected $remote_addr, $client_addr, $request_uri, $path, "
		    "$host, $header.NAME, $json.PATH, $jwt.CLAIM or $api_key, got \"%s\"", text);
		return;
	}
	up->hash_key = config_xstrdup(text);
}

void
config_parse_health_path(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_health *h = obj;

	if (node != NULL)
		h->path = config_path_value(ctx, node);
}

void
config_parse_health_status(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	config_parse_status_set(ctx, node, ((struct config_health *)obj)->status);
}

/* expect.json: a condition on the JSON answer, as match.json and when: have (jcond.h). */
void
config_parse_health_json(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	if (node != NULL)
		((struct config_health *)obj)->json = jcond_parse(ctx, ctx->doc, (yaml_node_t *)node);
}

void
config_parse_health(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;

	if (node == NULL || config_is_null(node))
		return;
	up->health = config_xcalloc(1, sizeof(*up->health));
	config_parse_object(ctx, node, &config_health_section, up->health);
}

/* Per-server settings left out take the upstream's; checks that need the whole upstream. */
static void
config_check_upstream(struct config_parse *ctx, const yaml_node_t *node,
    struct config_upstream *up)
{
	size_t i, saved, primaries = 0;

	for (i = 0; i < up->nservers; i++) {
		struct config_server *srv = &up->servers[i];
		if (srv->max_fails == CONFIG_UNSET)
			srv->max_fails = up->max_fails;
		if (srv->max_connections == CONFIG_UNSET)
			srv->max_connections = up->max_connections;
		primaries += !srv->backup;
	}
	if (up->nservers != 0 && primaries == 0) {
		saved = config_where_key(ctx, "servers");
		config_error(ctx, config_map_get(ctx, node, "servers"),
		    "every server is a backup: at least one must not be");
		config_where_pop(ctx, saved);
	}
	if (up->balance == BALANCE_HASH && up->hash_key == NULL) {
		saved = config_where_key(ctx, "balance");
		config_error(ctx, config_map_get(ctx, node, "balance"),
		    "balance: hash needs hash_key");
		config_where_pop(ctx, saved);
	} else if (up->balance != BALANCE_HASH && up->hash_key != NULL) {
		saved = config_where_key(ctx, "hash_key");
		config_error(ctx, config_map_get(ctx, node, "hash_key"),
		    "hash_key is used only with balance: hash");
		config_where_pop(ctx, saved);
	}
}

void
config_parse_upstreams(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k;
	const char *name;
	size_t i, n, saved;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of name -> upstream, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	cfg->upstreams = config_xcalloc(n, sizeof(*cfg->upstreams));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		if ((name = config_scalar(ctx, k, "an upstream name")) == NULL)
			continue;
		if (name[0] == '\0') {
			config_error(ctx, k, "an upstream name must not be empty");
			continue;
		}
		for (i = 0; i < cfg->nupstreams; i++)
			if (strcmp(cfg->upstreams[i].name, name) == 0)
				break;
		if (i < cfg->nupstreams) {
			config_error(ctx, k, "duplicate upstream '%s'", name);
			continue;
		}
		cfg->upstreams[cfg->nupstreams].name = config_xstrdup(name);
		saved = config_where_push(ctx, ".%s", name);
		config_parse_object(ctx, config_node(ctx, pair->value), &config_upstream_section,
		    &cfg->upstreams[cfg->nupstreams]);
		if (config_node(ctx, pair->value)->type == YAML_MAPPING_NODE)
			config_check_upstream(ctx, config_node(ctx, pair->value),
			    &cfg->upstreams[cfg->nupstreams]);
		config_where_pop(ctx, saved);
		cfg->nupstreams++;
	}
}
