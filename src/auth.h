/*
 * Authentication policies (top-level auth:) and a route's rate limit (rate_limit:), as the
 * configuration holds them, and what the request phases keep of them while the daemon runs:
 * a policy's key set, its verified tokens, its API keys; the daemon's rate limit table.
 */
#ifndef JG_AUTH_H
#define JG_AUTH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

struct api_keys;
struct jcond;
struct jwk_set;
struct jwt_cache;

/* Where a policy looks for a token. */
enum auth_token_where { AUTH_TOKEN_HEADER, AUTH_TOKEN_COOKIE, AUTH_TOKEN_QUERY };

struct auth_token_source {
	enum auth_token_where where;
	char *name;                     /* a header name (lowercase), cookie or query name */
};

/* What a policy decided of a request, for jsongate_auth_requests_total. */
#define AUTH_OUTCOMES(X) \
	X(OK, "ok") \
	X(MISSING, "missing") \
	X(INVALID, "invalid") \
	X(FORBIDDEN, "forbidden")

enum auth_outcome {
#define AUTH_OUTCOME_ENUM(id, name) AUTH_##id,
	AUTH_OUTCOMES(AUTH_OUTCOME_ENUM)
#undef AUTH_OUTCOME_ENUM
	AUTH_OUTCOME_N
};

enum auth_kind { AUTH_KIND_NONE, AUTH_KIND_JWT, AUTH_KIND_KEYS };

struct auth_jwt {
	char *jwks;                     /* https URL of the key set, or NULL */
	char *jwks_file;                /* or a file, read at every load */
	char *ca;                       /* CA bundle for the JWKS server, NULL: the system's */
	char **issuers;                 /* NULL-terminated, or NULL: iss not checked */
	size_t n_issuers;
	char **audiences;
	size_t n_audiences;
	char **scopes;
	size_t n_scopes;
	struct jcond *require;          /* a condition the claims must meet, or NULL */
	unsigned algs;                  /* JWK_ALG_BIT()s */
	uint64_t leeway;                /* ms */
	uint64_t refresh;               /* ms */
	struct auth_token_source *tokens;
	size_t ntokens;
	struct jwk_set *keys;           /* jwks_file: the set read at load */
	struct jwt_cache *cache;        /* tokens verified against keys */
	struct auth_jwks *remote;       /* jwks: the set fetched, shared by every load */
	atomic_uint cache_gen;          /* jwks: the generation of the set cache holds tokens of */
};

struct auth_keys_policy {
	char *header;                   /* lowercase */
	char *keys_file;
	struct api_keys *keys;          /* read at every load */
};

struct auth_policy {
	char *name;
	uint64_t epoch;                 /* unique among every load's policies */
	enum auth_kind kind;
	int forward_credentials;        /* 1: the credential goes upstream as it came */
	struct auth_jwt jwt;
	struct auth_keys_policy keys;
};

/* A route's rate_limit (count 0: none). */
struct route_rate_limit {
	char *key;                      /* a variable: $jwt.CLAIM, $api_key, $remote_addr,
	                                 * $client_addr, $header.NAME; NULL: $client_addr */
	uint64_t count, period_ns;
	unsigned burst;                 /* 0 until parsed: the count */
	int shared;                     /* through Redis */
	struct ratelimit_rule rule;
};

/* Counters kept by name for the daemon's life (a reload does not reset them): a route's
 * outcomes under one policy, and a route's rate limit decisions. */
#define RL_OUTCOMES(X) \
	X(ALLOWED, "allowed") \
	X(LIMITED, "limited") \
	X(ERROR, "error")               /* Redis did not decide */

enum ratelimit_outcome {
#define RL_OUTCOME_ENUM(id, name) RL_##id,
	RL_OUTCOMES(RL_OUTCOME_ENUM)
#undef RL_OUTCOME_ENUM
	RL_OUTCOME_N
};

struct auth_counter {
	char *route, *policy;           /* policy NULL: the route's rate limit decisions */
	atomic_uint_fast64_t n[4];           /* AUTH_OUTCOME_N, or RL_OUTCOME_N */
	struct auth_counter *next;
};

_Static_assert(AUTH_OUTCOME_N <= 4 && RL_OUTCOME_N <= 4, "raise auth_counter.n");

/* The counter of (route, policy), made on first use (main thread, at load). */
struct auth_counter *auth_counter_get(const char *route, const char *policy);
/* jsongate_auth_requests_total, jsongate_ratelimit_requests_total, JWKS fetches, Redis errors. */
struct evbuffer;
void auth_metrics_write(struct evbuffer *out);

/* JWKS fetches by outcome, and Redis errors, for the metrics. */
#define AUTH_JWKS_OUTCOMES(X) \
	X(OK, "ok") \
	X(ERROR, "error")

enum auth_jwks_outcome {
#define AUTH_JWKS_ENUM(id, name) AUTH_JWKS_##id,
	AUTH_JWKS_OUTCOMES(AUTH_JWKS_ENUM)
#undef AUTH_JWKS_ENUM
	AUTH_JWKS_N
};
void auth_jwks_fetched(enum auth_jwks_outcome outcome);
void auth_redis_error(void);

/* Buckets of the daemon's rate limit table. */
#define AUTH_RATELIMIT_KEYS 1000000

/* The daemon's rate limit table (one for every worker and every load). */
struct ratelimit *auth_ratelimit_table(void);

#endif
