/* The top-level auth: policies, rate_limits: and trusted_proxies:, and a route's auth: and
 * rate_limit: keys. */
#include "config.h"
#include "config_parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api_keys.h"
#include "auth.h"
#include "auth_jwks.h"
#include "jcond.h"
#include "jwk.h"
#include "jwt_cache.h"

/* Verified tokens a policy keeps, and the longest it keeps one without exp. */
#define AUTH_JWT_CACHE_ENTRIES 65536
#define AUTH_JWT_CACHE_TTL 3600

static atomic_uint_fast64_t config_auth_epoch;
static const char *const config_auth_booleans[] = { "false", "true", NULL };
static const char *const config_auth_on_errors[] = { "allow", "deny", NULL };

/* A string, or a list of strings: a NULL-terminated array. */
static char **
config_auth_strings(struct config_parse *ctx, const yaml_node_t *node, size_t *n)
{
	const yaml_node_t *item;
	const char *text;
	char **out;
	size_t i, len;

	*n = 0;
	if (node->type == YAML_SCALAR_NODE) {
		if ((text = config_string(ctx, node)) == NULL)
			return NULL;
		out = config_xcalloc(2, sizeof(char *));
		out[(*n)++] = config_xstrdup(text);
		return out;
	}
	if (config_list(ctx, node) == NULL)
		return NULL;
	len = config_list_len(node);
	out = config_xcalloc(len + 1, sizeof(char *));
	for (i = 0; i < len; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) != NULL)
			out[(*n)++] = config_xstrdup(text);
	}
	return out;
}

static void
config_auth_strings_free(char **s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; s[i] != NULL; i++)
		free(s[i]);
	free(s);
}

static void
config_parse_jwt_issuer(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;

	if (node != NULL)
		p->jwt.issuers = config_auth_strings(ctx, node, &p->jwt.n_issuers);
}

static void
config_parse_jwt_audience(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;

	if (node != NULL)
		p->jwt.audiences = config_auth_strings(ctx, node, &p->jwt.n_audiences);
}

static void
config_parse_jwt_scopes(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;

	if (node != NULL)
		p->jwt.scopes = config_auth_strings(ctx, node, &p->jwt.n_scopes);
}

static void
config_parse_jwt_require(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;

	if (node != NULL)
		p->jwt.require = jcond_parse(ctx, ctx->doc, (yaml_node_t *)node);
}

static void
config_parse_jwt_algorithms(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n;
	int alg;

	p->jwt.algs = JWK_ALGS_ALL;
	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	p->jwt.algs = 0;
	n = config_list_len(node);
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if ((alg = jwk_alg_parse(text, strlen(text))) < 0) {
			config_error(ctx, item, "unknown algorithm \"%s\"; expected RS256, PS256, "
			    "ES256 or EdDSA", text);
			continue;
		}
		p->jwt.algs |= JWK_ALG_BIT(alg);
	}
	if (p->jwt.algs == 0 && ctx->nerrs == 0)
		config_error(ctx, node, "an empty list allows no token");
}

static void
config_parse_jwt_token(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;
	static const struct { const char *prefix; enum auth_token_where where; } kinds[] = {
		{ "header:", AUTH_TOKEN_HEADER }, { "cookie:", AUTH_TOKEN_COOKIE },
		{ "query:", AUTH_TOKEN_QUERY },
	};
	const yaml_node_t *item;
	const char *text;
	size_t i, k, n;

	if (node == NULL) {
		p->jwt.tokens = config_xcalloc(1, sizeof(*p->jwt.tokens));
		p->jwt.tokens[0].where = AUTH_TOKEN_HEADER;
		p->jwt.tokens[0].name = config_xstrdup("authorization");
		p->jwt.ntokens = 1;
		return;
	}
	if (config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	p->jwt.tokens = config_xcalloc(n + 1, sizeof(*p->jwt.tokens));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
			if (strncmp(text, kinds[k].prefix, strlen(kinds[k].prefix)) == 0 &&
			    text[strlen(kinds[k].prefix)] != '\0')
				break;
		if (k == sizeof(kinds) / sizeof(kinds[0])) {
			config_error(ctx, item, "expected header:NAME, cookie:NAME or query:NAME, "
			    "got \"%s\"", text);
			continue;
		}
		p->jwt.tokens[p->jwt.ntokens].where = kinds[k].where;
		p->jwt.tokens[p->jwt.ntokens].name = config_xstrdup(text + strlen(kinds[k].prefix));
		if (kinds[k].where == AUTH_TOKEN_HEADER)
			for (char *c = p->jwt.tokens[p->jwt.ntokens].name; *c != '\0'; c++)
				*c = (char)tolower((unsigned char)*c);
		p->jwt.ntokens++;
	}
}

static const struct config_field config_auth_jwt_fields[] = {
	F_STRING("jwks", struct auth_policy, jwt.jwks, NULL,
	    "https URL of the JSON Web Key Set the tokens are verified with (or jwks_file)"),
	F_STRING("jwks_file", struct auth_policy, jwt.jwks_file, NULL,
	    "a JSON Web Key Set file instead of jwks; read again on SIGHUP"),
	F_STRING("ca", struct auth_policy, jwt.ca, NULL,
	    "PEM file of the CAs the JWKS server is verified against; default the system store"),
	F_CUSTOM("issuer", config_parse_jwt_issuer, "string|list", NULL, 0,
	    "the token's iss must be this one (or one of the list)"),
	F_CUSTOM("audience", config_parse_jwt_audience, "string|list", NULL, 0,
	    "the token's aud (a string or an array) must hold this one (or one of the list)"),
	F_CUSTOM("algorithms", config_parse_jwt_algorithms, "list", "[RS256, PS256, ES256, EdDSA]",
	    0, "signature algorithms allowed (a key's own type or alg must allow it too)"),
	F_DURATION("leeway", struct auth_policy, jwt.leeway, "30s", 0,
	    "clock skew allowed on exp and nbf"),
	F_DURATION("refresh", struct auth_policy, jwt.refresh, "10m", 1000,
	    "how often the key set is fetched again (a Cache-Control max-age within 1m..1d wins)"),
	F_CUSTOM("scopes", config_parse_jwt_scopes, "list", NULL, 0,
	    "scopes the token must have, each in its space-separated scope claim or scp array; "
	    "missing: 403"),
	F_CUSTOM("require", config_parse_jwt_require, "mapping", NULL, 0,
	    "a condition on the claims (see CONDITIONS); not met: 403"),
	F_CUSTOM("token", config_parse_jwt_token, "list", "[header:Authorization]", 0,
	    "where the token is looked for, in order: header:NAME (Bearer), cookie:NAME, query:NAME"),
	F_ENUM("forward_credentials", struct auth_policy, forward_credentials, "true",
	    config_auth_booleans, "false: the header, cookie or query that carried the token is "
	    "removed from the request sent upstream"),
};
const struct config_section config_auth_jwt_section = CONFIG_SECTION_OF(config_auth_jwt_fields);

static const struct config_field config_auth_keys_fields[] = {
	F_STRING("header", struct auth_policy, keys.header, "X-API-Key",
	    "request header that carries the API key"),
	F_STRING_REQ("keys_file", struct auth_policy, keys.keys_file,
	    "file of lines NAME SHA256HEX (hashes of the keys only); read again on SIGHUP"),
	F_ENUM("forward_credentials", struct auth_policy, forward_credentials, "true",
	    config_auth_booleans, "false: the key's header is removed from the request sent "
	    "upstream"),
};
const struct config_section config_auth_keys_section = CONFIG_SECTION_OF(config_auth_keys_fields);

static void
config_auth_skip(void *arg, size_t index, const char *kid, const char *reason)
{
	const struct auth_policy *p = arg;

	log_warnx("auth %s: key %zu%s%s%s of %s skipped: %s", p->name, index,
	    kid != NULL ? " (kid " : "", kid != NULL ? kid : "", kid != NULL ? ")" : "",
	    p->jwt.jwks_file, reason);
}

/* The key set of a jwks_file, read now: a bad file is a configuration error. */
static void
config_auth_jwks_file(struct config_parse *ctx, const yaml_node_t *at, struct auth_policy *p)
{
	char err[256];
	char *text = NULL;
	size_t len = 0, cap = 0, n;
	FILE *fp;

	if ((fp = fopen(p->jwt.jwks_file, "rb")) == NULL) {
		config_error(ctx, at, "cannot open %s: %s", p->jwt.jwks_file, strerror(errno));
		return;
	}
	for (;;) {
		if (len + 4096 > cap)
			text = config_xreallocarray(text, cap = cap * 2 + 4096, 1);
		if ((n = fread(text + len, 1, cap - len, fp)) == 0)
			break;
		len += n;
		if (len > JWK_MAX_DOC)
			break;
	}
	fclose(fp);
	if (len > JWK_MAX_DOC)
		config_error(ctx, at, "%s: larger than %d bytes", p->jwt.jwks_file, JWK_MAX_DOC);
	else if ((p->jwt.keys = jwk_set_parse(text, len, config_auth_skip, p, err,
	    sizeof(err))) == NULL)
		config_error(ctx, at, "%s: %s", p->jwt.jwks_file, err);
	free(text);
}

static void
config_parse_auth_jwt(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;
	const yaml_node_t *at;
	const char *why = NULL;
	size_t before = ctx->nerrs;

	if (node == NULL)
		return;
	if (p->kind != AUTH_KIND_NONE) {
		config_error(ctx, node, "a policy is jwt or keys, not both");
		return;
	}
	p->kind = AUTH_KIND_JWT;
	config_parse_object(ctx, node, &config_auth_jwt_section, p);
	if (ctx->nerrs != before)
		return;
	if (p->jwt.jwks != NULL && p->jwt.jwks_file != NULL) {
		config_error(ctx, config_map_get(ctx, node, "jwks_file"),
		    "jwks and jwks_file are exclusive: give one");
		return;
	}
	if (p->jwt.jwks == NULL && p->jwt.jwks_file == NULL) {
		config_error(ctx, node, "jwks or jwks_file is required");
		return;
	}
	if (p->jwt.jwks != NULL && strncmp(p->jwt.jwks, "https://", 8) != 0) {
		config_error(ctx, config_map_get(ctx, node, "jwks"),
		    "jwks must be an https:// URL, got \"%s\"", p->jwt.jwks);
		return;
	}
	config_resolve_path(ctx, &p->jwt.ca);
	if (p->jwt.jwks != NULL &&
	    (p->jwt.remote = auth_jwks_get(p->jwt.jwks, p->jwt.ca, &why)) == NULL) {
		config_error(ctx, config_map_get(ctx, node, "jwks"), "%s: %s", p->jwt.jwks, why);
		return;
	}
	if (p->jwt.jwks_file != NULL) {
		at = config_map_get(ctx, node, "jwks_file");
		config_resolve_path(ctx, &p->jwt.jwks_file);
		config_auth_jwks_file(ctx, at, p);
	}
	p->jwt.cache = jwt_cache_new(AUTH_JWT_CACHE_ENTRIES, AUTH_JWT_CACHE_TTL);
	if (p->jwt.cache == NULL)
		config_oom();
}

static void
config_parse_auth_keys(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct auth_policy *p = obj;
	size_t before = ctx->nerrs;
	char err[1024];

	if (node == NULL)
		return;
	if (p->kind != AUTH_KIND_NONE) {
		config_error(ctx, node, "a policy is jwt or keys, not both");
		return;
	}
	p->kind = AUTH_KIND_KEYS;
	config_parse_object(ctx, node, &config_auth_keys_section, p);
	if (ctx->nerrs != before)
		return;
	for (char *c = p->keys.header; *c != '\0'; c++)
		*c = (char)tolower((unsigned char)*c);
	config_resolve_path(ctx, &p->keys.keys_file);
	if ((p->keys.keys = api_keys_load(p->keys.keys_file, err, sizeof(err))) == NULL) {
		err[strcspn(err, "\n")] = '\0';
		config_error(ctx, config_map_get(ctx, node, "keys_file"), "%s", err);
	}
}

static const struct config_field config_auth_policy_fields[] = {
	F_CUSTOM("jwt", config_parse_auth_jwt, "mapping", NULL, 0,
	    "JSON Web Tokens verified with a key set: { jwks | jwks_file, issuer, audience, ... }"),
	F_CUSTOM("keys", config_parse_auth_keys, "mapping", NULL, 0,
	    "API keys known by their SHA-256: { header, keys_file }"),
};
const struct config_section config_auth_policy_section =
    CONFIG_SECTION_OF(config_auth_policy_fields);

void
config_parse_auth(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_pair_t *pair;
	const yaml_node_t *k, *v;
	struct auth_policy *p;
	const char *name;
	size_t i, n, saved;

	if (node == NULL)
		return;
	if (node->type != YAML_MAPPING_NODE) {
		config_error(ctx, node, "expected a mapping of name -> policy, got %s",
		    config_node_kind(node));
		return;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	cfg->auth = config_xcalloc(n, sizeof(*cfg->auth));
	for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
		k = config_node(ctx, pair->key);
		v = config_node(ctx, pair->value);
		if ((name = config_scalar(ctx, k, "a policy name")) == NULL)
			continue;
		if (name[0] == '\0') {
			config_error(ctx, k, "a policy name must not be empty");
			continue;
		}
		for (i = 0; i < cfg->nauth; i++)
			if (strcmp(cfg->auth[i].name, name) == 0)
				break;
		if (i < cfg->nauth) {
			config_error(ctx, k, "duplicate policy '%s'", name);
			continue;
		}
		p = &cfg->auth[cfg->nauth++];
		p->name = config_xstrdup(name);
		p->epoch = atomic_fetch_add(&config_auth_epoch, 1) + 1;
		saved = config_where_push(ctx, ".%s", name);
		config_parse_object(ctx, v, &config_auth_policy_section, p);
		if (v->type == YAML_MAPPING_NODE && p->kind == AUTH_KIND_NONE)
			config_error(ctx, v, "a policy needs jwt or keys");
		config_where_pop(ctx, saved);
	}
}

static void
config_auth_policy_free(struct auth_policy *p)
{
	free(p->name);
	free(p->jwt.jwks);
	free(p->jwt.jwks_file);
	free(p->jwt.ca);
	config_auth_strings_free(p->jwt.issuers);
	config_auth_strings_free(p->jwt.audiences);
	config_auth_strings_free(p->jwt.scopes);
	jcond_free(p->jwt.require);
	for (size_t i = 0; i < p->jwt.ntokens; i++)
		free(p->jwt.tokens[i].name);
	free(p->jwt.tokens);
	if (p->jwt.keys != NULL)
		jwk_set_unref(p->jwt.keys);
	if (p->jwt.cache != NULL)
		jwt_cache_free(p->jwt.cache);
	free(p->keys.header);
	free(p->keys.keys_file);
	if (p->keys.keys != NULL)
		api_keys_free(p->keys.keys);
}

void
config_auth_free(struct config *cfg)
{
	for (size_t i = 0; i < cfg->nauth; i++)
		config_auth_policy_free(&cfg->auth[i]);
	free(cfg->auth);
	free(cfg->rate_limits.redis);
	free(cfg->trusted_proxies);
}

void
config_route_auth_free(struct config_route *route)
{
	free(route->auth);
	free(route->auth_counters);
	if (route->rate_limit != NULL)
		free(route->rate_limit->key);
	free(route->rate_limit);
}

static const struct auth_policy *
config_auth_policy(const struct config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->nauth; i++)
		if (strcmp(cfg->auth[i].name, name) == 0)
			return &cfg->auth[i];
	return NULL;
}

void
config_parse_route_auth(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;
	const yaml_node_t *item;
	const char *text;
	size_t i, n = 1;

	if (node == NULL)
		return;
	if (node->type != YAML_SCALAR_NODE) {
		if (config_list(ctx, node) == NULL)
			return;
		if ((n = config_list_len(node)) == 0) {
			config_error(ctx, node, "an empty list admits nobody; leave auth out instead");
			return;
		}
	}
	route->auth = config_xcalloc(n, sizeof(*route->auth));
	for (i = 0; i < n; i++) {
		item = node->type == YAML_SCALAR_NODE ? node : config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		if ((route->auth[route->nauth] = config_auth_policy(ctx->cfg, text)) == NULL) {
			config_error(ctx, item, "unknown auth policy '%s'%s", text,
			    ctx->cfg->nauth == 0 ? " (there is no top-level auth:)" : "");
			continue;
		}
		route->nauth++;
	}
}

/* $jwt.CLAIM, $api_key, $remote_addr, $client_addr or $header.NAME. */
static int
config_rate_limit_key_valid(const char *text)
{
	const char *p;

	if (strcmp(text, "$api_key") == 0 || strcmp(text, "$remote_addr") == 0 ||
	    strcmp(text, "$client_addr") == 0)
		return 1;
	if (strncmp(text, "$jwt.", 5) == 0 && text[5] != '\0') {
		for (p = text + 5; *p != '\0'; p++)
			if (*p == '.' && (p[1] == '.' || p[1] == '\0'))
				return 0;
		return 1;
	}
	if (strncmp(text, "$header.", 8) == 0 && text[8] != '\0') {
		for (p = text + 8; *p != '\0'; p++)
			if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
				return 0;
		return 1;
	}
	return 0;
}

static void
config_parse_rate_limit_key(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct route_rate_limit *rl = obj;
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	if (!config_rate_limit_key_valid(text)) {
		config_error(ctx, node, "expected $jwt.CLAIM, $api_key, $remote_addr, $client_addr "
		    "or $header.NAME, got \"%s\"", text);
		return;
	}
	rl->key = config_xstrdup(text);
}

static void
config_parse_rate_limit_rate(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct route_rate_limit *rl = obj;
	const char *text;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	if (ratelimit_rate_parse(text, &rl->count, &rl->period_ns) < 0 ||
	    rl->count > RATELIMIT_MAX_BURST) {
		config_error(ctx, node, "expected COUNT/s, COUNT/m, COUNT/h or COUNT/d (a count "
		    "from 1 to %d), got \"%s\"", RATELIMIT_MAX_BURST, text);
		rl->count = 0;
	}
}

static void
config_parse_rate_limit_burst(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct route_rate_limit *rl = obj;
	const char *text;

	rl->burst = (unsigned)rl->count;        /* default: one period's worth */
	if (node == NULL || (text = config_scalar(ctx, node, "an integer")) == NULL)
		return;
	if (config_parse_uint_text(text, 1, RATELIMIT_MAX_BURST, &rl->burst) == -1)
		config_error(ctx, node, "expected an integer from 1 to %d, got \"%s\"",
		    RATELIMIT_MAX_BURST, text);
}

static const struct config_field config_route_rate_limit_fields[] = {
	F_CUSTOM("rate", config_parse_rate_limit_rate, "rate", NULL, CONFIG_REQUIRED,
	    "requests admitted per second, minute, hour or day: 100/s, 10/m, 5/h, 1/d"),
	F_CUSTOM("burst", config_parse_rate_limit_burst, "integer", "the rate's count", 0,
	    "requests admitted at once (the bucket's capacity)"),
	F_CUSTOM("key", config_parse_rate_limit_key, "variable", "$client_addr", 0,
	    "what is limited: $jwt.CLAIM, $api_key, $remote_addr, $client_addr or $header.NAME; "
	    "a request without it is limited by $client_addr"),
	F_ENUM("shared", struct route_rate_limit, shared, "false", config_auth_booleans,
	    "true: one limit for every instance, kept in rate_limits.redis"),
};
const struct config_section config_route_rate_limit_section =
    CONFIG_SECTION_OF(config_route_rate_limit_fields);

void
config_parse_route_rate_limit(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config_route *route = obj;

	if (node == NULL)
		return;
	route->rate_limit = config_xcalloc(1, sizeof(*route->rate_limit));
	config_parse_object(ctx, node, &config_route_rate_limit_section, route->rate_limit);
	if (route->rate_limit->shared && ctx->cfg->rate_limits.redis == NULL)
		config_error(ctx, config_map_get(ctx, node, "shared"),
		    "shared: true needs rate_limits.redis");
}

static void
config_parse_redis_address(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	struct config_addr addr;
	const char *text, *why;

	if (node == NULL || (text = config_string(ctx, node)) == NULL)
		return;
	memset(&addr, 0, sizeof(addr));
	if ((why = config_addr_parse(text, &addr)) != NULL) {
		config_error(ctx, node, "%s", why);
		return;
	}
	config_addr_free(&addr);
	cfg->rate_limits.redis = config_xstrdup(text);
}

static const struct config_field config_rate_limits_redis_fields[] = {
	F_CUSTOM("address", config_parse_redis_address, "address", NULL, CONFIG_REQUIRED,
	    "the Redis server of shared limits: IPv4:PORT or [IPv6]:PORT"),
	F_DURATION("timeout", struct config, rate_limits.redis_timeout, "20ms", 1,
	    "longest wait for one decision"),
	F_ENUM("on_error", struct config, rate_limits.redis_on_error, "allow",
	    config_auth_on_errors, "Redis out or late: allow the request (counted) or deny it "
	    "(503 rate_limit_unavailable)"),
};
static const struct config_section config_rate_limits_redis_section =
    CONFIG_SECTION_OF(config_rate_limits_redis_fields);

static const struct config_field config_rate_limits_fields[] = {
	F_SECTION("redis", config_rate_limits_redis_section,
	    "Redis for the limits of routes with shared: true"),
};
const struct config_section config_rate_limits_section =
    CONFIG_SECTION_OF(config_rate_limits_fields);

void
config_parse_trusted_proxies(struct config_parse *ctx, const yaml_node_t *node, void *obj)
{
	struct config *cfg = obj;
	const yaml_node_t *item;
	struct config_cidr *cidr;
	const char *text, *slash;
	char host[INET6_ADDRSTRLEN];
	size_t i, n;
	unsigned max;
	char *end;
	unsigned long bits;

	if (node == NULL || config_list(ctx, node) == NULL)
		return;
	n = config_list_len(node);
	cfg->trusted_proxies = config_xcalloc(n + 1, sizeof(*cfg->trusted_proxies));
	for (i = 0; i < n; i++) {
		item = config_list_item(ctx, node, i);
		if ((text = config_string(ctx, item)) == NULL)
			continue;
		cidr = &cfg->trusted_proxies[cfg->ntrusted_proxies];
		slash = strchr(text, '/');
		snprintf(host, sizeof(host), "%.*s", (int)(slash ? (size_t)(slash - text) :
		    strlen(text)), text);
		if (inet_pton(AF_INET, host, cidr->addr) == 1) {
			cidr->family = AF_INET;
			max = 32;
		} else if (inet_pton(AF_INET6, host, cidr->addr) == 1) {
			cidr->family = AF_INET6;
			max = 128;
		} else {
			config_error(ctx, item, "expected an address or ADDRESS/BITS, got \"%s\"", text);
			continue;
		}
		bits = max;
		if (slash != NULL) {
			errno = 0;
			bits = strtoul(slash + 1, &end, 10);
			if (slash[1] == '\0' || *end != '\0' || errno != 0 || bits > max) {
				config_error(ctx, item, "expected a prefix length from 0 to %u, got \"%s\"",
				    max, text);
				continue;
			}
		}
		cidr->bits = (unsigned)bits;
		cfg->ntrusted_proxies++;
	}
}

/* An id for a route's rule that stays the same across reloads while the route's name and
 * limit do: its buckets are kept. */
static uint32_t
config_rate_limit_id(const struct config_route *route)
{
	const struct route_rate_limit *rl = route->rate_limit;
	char text[512];
	uint32_t h = 2166136261u;
	int n;

	n = snprintf(text, sizeof(text), "%s|%s|%llu|%llu|%u", route->name,
	    rl->key != NULL ? rl->key : "", (unsigned long long)rl->count,
	    (unsigned long long)rl->period_ns, rl->burst);
	for (int i = 0; i < n && i < (int)sizeof(text); i++)
		h = (h ^ (unsigned char)text[i]) * 16777619u;
	return h;
}

/* After the parse: every route's counters and rate limit rule (its name is final now). */
void
config_auth_finish(struct config_parse *ctx)
{
	struct config *cfg = ctx->cfg;
	struct config_route *route;

	if (ctx->nerrs != 0)
		return;
	for (size_t i = 0; i < cfg->nroutes; i++) {
		route = &cfg->routes[i];
		if (route->nauth != 0) {
			route->auth_counters = config_xcalloc(route->nauth,
			    sizeof(*route->auth_counters));
			for (size_t j = 0; j < route->nauth; j++)
				route->auth_counters[j] = auth_counter_get(route->name,
				    route->auth[j]->name);
		}
		if (route->rate_limit == NULL)
			continue;
		route->rate_counter = auth_counter_get(route->name, NULL);
		if (ratelimit_rule_init(&route->rate_limit->rule, config_rate_limit_id(route),
		    route->rate_limit->count, route->rate_limit->period_ns,
		    route->rate_limit->burst) < 0)
			config_error(ctx, NULL, "routes %s: rate_limit: rate and burst out of range",
			    route->name);
	}
}
