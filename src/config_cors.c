/* A route's cors: key: its origins, methods and headers. */
#include "config.h"
#include "config_parse.h"
#include "cors.h"
#include "http.h"

#include <ctype.h>
#include <string.h>

void
config_parse_cors_origins(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text, *why = NULL;
	size_t i, n, count = 0;
	char *o;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) == 0) {
		config_error(ctx, node, "an empty list admits no origin; leave cors out instead");
		return;
	}
	route->cors.origins = config_xcalloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if (!cors_pattern_valid(text, &why)) {
			config_error(ctx, item, "origin \"%s\": %s", text, why);
			continue;
		}
		o = config_xstrdup(text);
		for (size_t j = 0; o[j] != '\0'; j++)
			o[j] = (char)tolower((unsigned char)o[j]);
		route->cors.origins[count++] = o;
	}
}

void
config_parse_cors_methods(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;
	unsigned bit;

	route->cors.methods = METHOD_GET | METHOD_HEAD | METHOD_POST | METHOD_PUT |
	    METHOD_PATCH | METHOD_DELETE;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	route->cors.methods = 0;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		bit = config_method_bit(text, strlen(text));
		if (bit == METHOD_OTHER) {
			config_error(ctx, item, "unknown method \"%s\"; expected one of: GET, HEAD, "
			    "POST, PUT, DELETE, OPTIONS, PATCH, TRACE, CONNECT", text);
			continue;
		}
		route->cors.methods |= bit;
	}
}

void
config_parse_cors_headers(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;
	char *all = NULL, *next;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if (!http_is_token(text, strlen(text))) {
			config_error(ctx, item, "\"%s\" is not a header name", text);
			continue;
		}
		next = all == NULL ? config_xstrdup(text) : config_xasprintf("%s, %s", all, text);
		free(all);
		all = next;
	}
	/* An empty list allows no header beyond the ones browsers always send. */
	route->cors.headers = all != NULL ? all : config_xstrdup("");
}
