/*
 * Configuration: the tls: sections of listeners and upstreams.  Their OpenSSL contexts are built
 * at load, so that a certificate that does not load is an error at its key.
 */
#include "config.h"
#include "config_parse.h"

#include <string.h>

#include "tls.h"

/* ------------------------------------------------------------------ TLS */

void
config_parse_certificates(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener_tls *tls = obj;
	size_t i, n, saved;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	if (n == 0) {
		config_error(ctx, node, "at least one certificate is required");
		return;
	}
	tls->certs = config_xcalloc(n, sizeof(*tls->certs));
	tls->ncerts = n;
	for (i = 0; i < n; i++) {
		saved = config_where_push(ctx, "[%zu]", i);
		config_parse_object(ctx, config_list_item(ctx, node, i), &config_tls_cert_section,
		    &tls->certs[i]);
		config_where_pop(ctx, saved);
		config_resolve_path(ctx, &tls->certs[i].cert);
		config_resolve_path(ctx, &tls->certs[i].key);
	}
}

void
config_parse_protocols(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener_tls *tls = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;

	tls->protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	if ((n = config_list_len(node)) == 0) {
		config_error(ctx, node, "an empty list allows no protocol; omit it for the default");
		return;
	}
	tls->protocols = 0;
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if (strcmp(text, "TLSv1.2") == 0)
			tls->protocols |= CONFIG_TLS_V1_2;
		else if (strcmp(text, "TLSv1.3") == 0)
			tls->protocols |= CONFIG_TLS_V1_3;
		else if (strcmp(text, "TLSv1") == 0 || strcmp(text, "TLSv1.1") == 0 ||
		    strcmp(text, "SSLv3") == 0)
			config_error(ctx, item, "%s is not supported: it is insecure", text);
		else
			config_error(ctx, item, "unknown protocol \"%s\"; expected TLSv1.2 or TLSv1.3",
			    text);
	}
	if (tls->protocols == 0)
		tls->protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3;
}

/* msg with file names as the configuration wrote them, without the directory prepended. */
static const char *
config_tls_unresolve(struct config_parse *ctx, const char *msg, char *buf, size_t cap)
{
	const char *slash = strrchr(ctx->file, '/'), *p;
	size_t dirlen, len = 0, n;

	if (slash == NULL)
		return msg;
	dirlen = (size_t)(slash - ctx->file) + 1;
	for (;;) {
		for (p = msg; *p != '\0' && strncmp(p, ctx->file, dirlen) != 0; p++)
			;
		n = (size_t)(p - msg);
		if (len + n >= cap)
			return msg;
		memcpy(buf + len, msg, n);
		len += n;
		if (*p == '\0')
			break;
		msg = p + dirlen;
	}
	buf[len] = '\0';
	return buf;
}

/* Where TLS load errors go: the node of the setting they are about. */
struct config_tls_where {
	struct config_parse *ctx;
	const yaml_node_t *tls;         /* the tls mapping */
	int listener;
};

static void
config_tls_error(void *arg, enum tls_setting at, size_t index, const char *msg)
{
	struct config_tls_where *tw = arg;
	struct config_parse *ctx = tw->ctx;
	const yaml_node_t *node = tw->tls, *list;
	const char *key = NULL;
	size_t saved = ctx->wherelen;
	char text[1024];

	switch (at) {
	case TLS_AT_CERT:
	case TLS_AT_KEY:
		key = at == TLS_AT_CERT ? "cert" : "key";
		if (tw->listener) {
			list = config_map_get(ctx, tw->tls, "certificates");
			if (list != NULL && list->type == YAML_SEQUENCE_NODE &&
			    index < config_list_len(list)) {
				config_where_push(ctx, ".certificates[%zu]", index);
				node = config_list_item(ctx, list, index);
			}
		}
		break;
	case TLS_AT_CLIENT_CA:
		key = "client_ca";
		break;
	case TLS_AT_CA:
		key = "ca";
		break;
	case TLS_AT_CIPHERS:
		key = "ciphers";
		break;
	case TLS_AT_NONE:
		break;
	}
	if (key != NULL && config_map_get(ctx, node, key) != NULL) {
		node = config_map_get(ctx, node, key);
		config_where_key(ctx, key);
	}
	config_error(ctx, node, "%s", config_tls_unresolve(ctx, msg, text, sizeof(text)));
	config_where_pop(ctx, saved);
}

void
config_parse_listener_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_listener *l = obj;
	struct config_listener_tls *tls;
	struct config_tls_where tw = { ctx, node, 1 };
	size_t before = ctx->nerrs;

	if (node == NULL)
		return;
	tls = l->tls = config_xcalloc(1, sizeof(*tls));
	tls->http2 = l->http2 != 0;     /* unset (-1): with TLS, HTTP/2 is offered */
	config_parse_object(ctx, node, &config_listener_tls_section, tls);
	config_resolve_path(ctx, &tls->client_ca);
	if (tls->verify_client != VERIFY_CLIENT_OFF && tls->client_ca == NULL) {
		config_error(ctx, config_map_get(ctx, node, "verify_client") ?
		    config_map_get(ctx, node, "verify_client") : node,
		    "verify_client needs client_ca");
	}
	/* Build the contexts now: bad certificate files are configuration errors. */
	if (ctx->nerrs == before)
		tls->ctx = tls_server_new(tls, config_tls_error, &tw);
}

void
config_parse_upstream_tls(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_upstream *up = obj;
	struct config_upstream_tls *tls;
	struct config_tls_where tw = { ctx, node, 0 };
	size_t before = ctx->nerrs;

	if (node == NULL)
		return;
	tls = up->tls = config_xcalloc(1, sizeof(*tls));
	tls->verify = 1;
	config_parse_object(ctx, node, &config_upstream_tls_section, tls);
	config_resolve_path(ctx, &tls->ca);
	config_resolve_path(ctx, &tls->cert);
	config_resolve_path(ctx, &tls->key);
	if ((tls->cert == NULL) != (tls->key == NULL)) {
		size_t saved = config_where_key(ctx, tls->cert ? "cert" : "key");

		config_error(ctx, config_map_get(ctx, node, tls->cert ? "cert" : "key"),
		    "cert and key go together");
		config_where_pop(ctx, saved);
	}
	if (ctx->nerrs == before)
		tls->ctx = tls_client_new(tls, config_tls_error, &tw);
}
