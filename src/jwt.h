/*
 * JSON Web Tokens (RFC 7519) in JWS compact form (RFC 7515), verified against a key set.  The
 * algorithm is the key's, never the token's: the token's `alg` must be one the key allows and
 * the policy allows; `none` and HMAC are always refused (a public key used as an HMAC secret
 * is the classic key confusion).  `jku`, `x5u`, `jwk` and `x5c` headers are ignored: keys
 * come only from the configured set.
 *
 * Verification is two steps so that a cache can keep the first: jwt_verify_signature (the
 * costly part: parse, pick a key, check the signature; the claims come out) and
 * jwt_check_claims (time, issuer, audience, scopes: cheap, per policy, per request).
 */
#ifndef JG_JWT_H
#define JG_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "jdoc.h"
#include "jwk.h"

#define JWT_MAX_TOKEN 8192              /* longer tokens are refused (too_large) */

/* Outcomes: enum, name (for logs and metrics). */
#define JWT_OUTCOMES(X) \
	X(OK, "ok") \
	X(MALFORMED, "malformed") \
	X(BAD_SIGNATURE, "bad_signature") \
	X(UNKNOWN_KID, "unknown_kid") \
	X(EXPIRED, "expired") \
	X(NOT_YET_VALID, "not_yet_valid") \
	X(WRONG_ISSUER, "wrong_issuer") \
	X(WRONG_AUDIENCE, "wrong_audience") \
	X(INSUFFICIENT_SCOPE, "insufficient_scope") \
	X(ALG_NOT_ALLOWED, "alg_not_allowed") \
	X(TOO_LARGE, "too_large")

enum jwt_outcome {
#define JWT_OUTCOME_ENUM(id, name) JWT_##id,
	JWT_OUTCOMES(JWT_OUTCOME_ENUM)
#undef JWT_OUTCOME_ENUM
	JWT_OUTCOME_N
};

const char *jwt_outcome_name(enum jwt_outcome outcome);

/* What a token must satisfy.  Lists with n 0 are not checked. */
struct jwt_policy {
	const char *const *issuers;     /* iss must equal one */
	size_t n_issuers;
	const char *const *audiences;   /* aud (a string, or an array) must hold one */
	size_t n_audiences;
	const char *const *scopes;      /* each in `scope` (space-separated) or `scp` */
	size_t n_scopes;
	unsigned algs;                  /* JWK_ALG_BIT()s allowed; 0: all four */
	int64_t leeway;                 /* seconds of clock skew allowed on exp and nbf */
	int64_t now;                    /* seconds since the epoch */
};

/* The claims of a token whose signature was verified: immutable and reference counted, so a
 * cache and the requests using them share one copy. */
struct jwt_claims {
	char *json;                     /* the decoded payload, NUL-terminated */
	size_t len;
	struct jdoc doc;                /* tokens over json */
	int64_t exp, nbf;
	unsigned has_exp : 1, has_nbf : 1;
	enum jwk_alg alg;               /* the algorithm the signature was checked with */
	int refs;
};

/*
 * Parse token[0..len) and verify its signature with a key of keys.  The key: those with the
 * token's kid, or when it has none every key; of those only keys allowing the token's alg.
 * On JWT_OK *out holds one reference to the claims.  Outcomes: TOO_LARGE, MALFORMED,
 * ALG_NOT_ALLOWED (none, HMAC, unknown, not in policy->algs, or no key with the kid allows
 * it), UNKNOWN_KID (no key with that kid; without a kid, no key for the alg), BAD_SIGNATURE,
 * then MALFORMED for claims that are not a JSON object or an exp or nbf that is not a number.
 * Only policy->algs is read here.
 */
enum jwt_outcome jwt_verify_signature(const char *token, size_t len, const struct jwk_set *keys,
    const struct jwt_policy *policy, struct jwt_claims **out);

/* The policy's checks in this order: EXPIRED (now >= exp + leeway), NOT_YET_VALID
 * (now + leeway < nbf), WRONG_ISSUER, WRONG_AUDIENCE, INSUFFICIENT_SCOPE.  An iss, aud,
 * scope or scp of the wrong type counts as not matching; exp and nbf are optional (one that is
 * not a number made jwt_verify_signature answer MALFORMED). */
enum jwt_outcome jwt_check_claims(const struct jwt_claims *claims,
    const struct jwt_policy *policy);

/* Both; on JWT_OK *out holds one reference, else it is NULL. */
enum jwt_outcome jwt_verify(const char *token, size_t len, const struct jwk_set *keys,
    const struct jwt_policy *policy, struct jwt_claims **out);

struct jwt_claims *jwt_claims_ref(struct jwt_claims *claims);
void jwt_claims_unref(struct jwt_claims *claims);

enum jwt_claim_type {
	JWT_CLAIM_MISSING = 0,
	JWT_CLAIM_STRING, JWT_CLAIM_NUMBER, JWT_CLAIM_BOOL, JWT_CLAIM_NULL,
	JWT_CLAIM_OBJECT, JWT_CLAIM_ARRAY
};

/*
 * The claim at a dotted path ("sub", "realm_access.roles", "roles.0": a segment of digits
 * indexes an array).  *val, *len: its raw span in claims->json: for a string the bytes
 * between the quotes, escapes as they are (jwt_claim_str unescapes); for the others the JSON
 * text (a number as written, true, an object with its braces).  Returns its type, or
 * JWT_CLAIM_MISSING (also for a path through a non-object, or a key that appears twice).
 */
enum jwt_claim_type jwt_claim(const struct jwt_claims *claims, const char *dotted_path,
    const char **val, size_t *len);

/* A string claim unescaped into dst (cap bytes, not NUL-terminated): its length; -1 when
 * missing, not a string, or longer than cap. */
int jwt_claim_str(const struct jwt_claims *claims, const char *dotted_path, char *dst,
    size_t cap);

#endif
