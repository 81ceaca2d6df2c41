/*
 * Configuration: servers given by host name, resolved at load (every name at once, with the
 * configured resolver), and the servers a name's answer stands for.
 */
#include "config.h"
#include "config_parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ servers by name */

/*
 * A DNS host name: dot-separated labels of 1 to 63 letters, digits, '-' or '_', 253
 * characters at most, and not only digits and dots (that is a bad IPv4 address).
 */
static int
config_host_is_name(const char *s, size_t len)
{
	size_t i, label = 0;
	int alpha = 0;

	if (len == 0 || len > 253)
		return 0;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '.') {
			if (label == 0)
				return 0;
			label = 0;
			continue;
		}
		if (!isalnum(c) && c != '-' && c != '_')
			return 0;
		alpha |= !isdigit(c);
		if (++label > 63)
			return 0;
	}
	return label > 0 && alpha;
}

/*
 * A server's address: as config_addr_parse, or NAME:PORT with a host name other than
 * localhost, left unresolved (out->name set, out->sslen 0).  NULL, or the reason it is
 * neither.
 */
static const char *
config_server_addr_parse(const char *text, struct config_addr *out)
{
	const char *colon = strrchr(text, ':'), *why;
	size_t i, len = colon != NULL ? (size_t)(colon - text) : 0;
	uint16_t port;

	/* "api.internal.": the final dot only says the name is complete */
	if (len > 1 && text[len - 1] == '.' && text[len - 2] != '.')
		len--;
	if (colon != NULL && config_host_is_name(text, len) &&
	    !(len == 9 && strncasecmp(text, "localhost", 9) == 0)) {
		memset(out, 0, sizeof(*out));
		if ((why = config_port_parse(colon + 1, &port)) != NULL)
			return why;
		out->port = port;
		out->text = config_xstrdup(text);
		out->name = config_xcalloc(1, len + 1);
		for (i = 0; i < len; i++)
			out->name[i] = (char)tolower((unsigned char)text[i]);
		return NULL;
	}
	why = config_addr_parse(text, out);
	return why == config_addr_not_numeric ?
	    "host must be an IPv4 address, [IPv6], localhost or a host name" : why;
}

/* Parse a server's address into srv; a name is queued for the lookups after the parse. */
void
config_server_address(struct config_parse *ctx, const yaml_node_t *node,
    struct config_server *srv, const char *expected)
{
	struct config_pending_name *p;
	const char *text, *why;

	if ((text = config_scalar(ctx, node, expected)) == NULL)
		return;
	if ((why = config_server_addr_parse(text, &srv->addr)) != NULL) {
		config_error(ctx, node, "invalid address \"%s\": %s", text, why);
		return;
	}
	if (srv->addr.name == NULL) {
		if (config_addr_is_any(&srv->addr))
			config_error(ctx, node, "%s is a wildcard address, not a server",
			    srv->addr.text);
		return;
	}
	if (ctx->npending == ctx->pendingcap) {
		ctx->pendingcap = ctx->pendingcap ? ctx->pendingcap * 2 : 8;
		ctx->pending = config_xreallocarray(ctx->pending, ctx->pendingcap,
		    sizeof(*ctx->pending));
	}
	p = &ctx->pending[ctx->npending++];
	p->srv = srv;
	p->node = node;
	p->where = config_xstrdup(ctx->where);
}

void
config_parse_server_address(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	if (node != NULL)
		config_server_address(ctx, node, obj, "an address");
}

size_t
config_servers_from_name(const struct config_server_name *entry,
    const struct resolver_answer *ans, struct config_server **out)
{
	struct config_server *servers = config_xcalloc(ans->naddrs, sizeof(*servers));
	char host[INET6_ADDRSTRLEN];
	size_t i;

	for (i = 0; i < ans->naddrs; i++) {
		struct config_addr *a = &servers[i].addr;
		const struct resolver_addr *ra = &ans->addrs[i];

		servers[i] = entry->settings;
		memset(a, 0, sizeof(*a));
		resolver_addr_text(ra, host, sizeof(host));
		if (ra->family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;
			sin->sin_family = AF_INET;
			sin->sin_port = htons(entry->port);
			memcpy(&sin->sin_addr, ra->ip, 4);
			a->sslen = sizeof(*sin);
			a->text = config_xasprintf("%s:%u", host, (unsigned)entry->port);
		} else {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;
			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons(entry->port);
			memcpy(&sin6->sin6_addr, ra->ip, 16);
			a->sslen = sizeof(*sin6);
			a->text = config_xasprintf("[%s]:%u", host, (unsigned)entry->port);
		}
		a->host = config_xstrdup(host);
		a->port = entry->port;
		a->name = config_xstrdup(entry->host);
	}
	*out = servers;
	return ans->naddrs;
}

void
config_servers_free(struct config_server *servers, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		config_addr_free(&servers[i].addr);
	free(servers);
}

/* Replace each named server of up by the servers of its name's answer (hosts[h] answered
 * answers[h]; a name that failed leaves none). */
static void
config_expand_names(struct config_upstream *up, const char *const *hosts, size_t nhosts,
    const struct resolver_answer *answers)
{
	struct config_server *servers, *made;
	struct config_server_name *e;
	size_t i, h, k, n = 0, total = 0, nnames = 0;

	for (i = 0; i < up->nservers; i++) {
		if (up->servers[i].addr.name == NULL) {
			total++;
			continue;
		}
		for (h = 0; h < nhosts && strcmp(hosts[h], up->servers[i].addr.name) != 0; h++)
			;
		total += h < nhosts ? answers[h].naddrs : 0;
		nnames++;
	}
	if (nnames == 0)
		return;
	servers = config_xcalloc(total, sizeof(*servers));
	up->names = config_xcalloc(nnames, sizeof(*up->names));
	for (i = 0; i < up->nservers; i++) {
		struct config_server *srv = &up->servers[i];

		if (srv->addr.name == NULL) {
			servers[n++] = *srv;
			continue;
		}
		e = &up->names[up->nnames++];
		e->host = srv->addr.name;
		e->port = srv->addr.port;
		e->entry = i;
		e->settings = *srv;
		memset(&e->settings.addr, 0, sizeof(e->settings.addr));
		free(srv->addr.text);
		for (h = 0; h < nhosts && strcmp(hosts[h], e->host) != 0; h++)
			;
		if (h == nhosts)
			continue;
		if (resolver_answer_copy(&e->answer, &answers[h]) < 0)
			config_oom();
		e->first = n;
		e->count = config_servers_from_name(e, &e->answer, &made);
		for (k = 0; k < e->count; k++)
			servers[n++] = made[k];
		free(made);
	}
	free(up->servers);
	up->servers = servers;
	up->nservers = n;
}

/*
 * Resolve every server name at once with the configured resolver, reporting each one that
 * does not resolve at the place it is written, and expand the named servers.
 */
void
config_resolve_names(struct config_parse *ctx, const yaml_node_t *root)
{
	struct config *cfg = ctx->cfg;
	const yaml_node_t *rnode = config_map_get(ctx, root, "resolver");
	const struct config_addr *ns = cfg->resolver;
	struct resolver_answer *answers;
	const char **hosts;
	char err[256];
	size_t i, h, nhosts = 0, saved;
	int *errors;

	if (ns != NULL && config_addr_is_any(ns)) {
		saved = config_where_key(ctx, "resolver");
		config_error(ctx, rnode, "%s is a wildcard address, not a nameserver", ns->text);
		config_where_pop(ctx, saved);
		return;
	}
	/* without the nameserver the user meant, the lookups would say nothing true */
	if (ctx->npending == 0 || (ns == NULL && !config_is_null(rnode)))
		return;
	hosts = config_xcalloc(ctx->npending, sizeof(*hosts));
	for (i = 0; i < ctx->npending; i++) {
		for (h = 0; h < nhosts && strcmp(hosts[h], ctx->pending[i].srv->addr.name); h++)
			;
		if (h == nhosts)
			hosts[nhosts++] = ctx->pending[i].srv->addr.name;
	}
	answers = config_xcalloc(nhosts, sizeof(*answers));
	errors = config_xcalloc(nhosts, sizeof(*errors));
	if (resolver_lookup_sync(ns ? (const struct sockaddr *)&ns->ss : NULL, ns ? ns->sslen : 0,
	    hosts, nhosts, answers, errors, err, sizeof(err)) < 0) {
		saved = config_where_key(ctx, "resolver");
		config_error(ctx, rnode, "cannot set up the resolver: %s", err);
		config_where_pop(ctx, saved);
	} else {
		for (i = 0; i < ctx->npending; i++) {
			for (h = 0; strcmp(hosts[h], ctx->pending[i].srv->addr.name) != 0; h++)
				;
			if (errors[h] == 0)
				continue;
			saved = config_where_push(ctx, "%s", ctx->pending[i].where);
			config_error(ctx, ctx->pending[i].node, "cannot resolve \"%s\": %s",
			    hosts[h], resolver_strerror(errors[h]));
			config_where_pop(ctx, saved);
		}
		for (i = 0; i < cfg->nupstreams; i++)
			config_expand_names(&cfg->upstreams[i], hosts, nhosts, answers);
	}
	for (h = 0; h < nhosts; h++)
		resolver_answer_free(&answers[h]);
	free(answers);
	free(errors);
	free(hosts);
}
