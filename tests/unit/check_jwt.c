#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64url.h"
#include "jose_keys.h"
#include "jwk.h"
#include "jwt.h"
#include "jwt_cache.h"

#define NOW 1700000000

static EVP_PKEY *rsa, *rsa_ps, *rsa_small, *ec, *ed, *attacker;
static struct jwk_set *keys;

static const char *const issuers[] = { "https://idp.example/", "https://other.example/" };
static const char *const audiences[] = { "api", "admin" };
static const char *const scopes[] = { "orders:read", "orders:write" };

/* Issuer, audience, leeway 30 s; no scopes required. */
static struct jwt_policy
policy(void)
{
	struct jwt_policy p = {
		.issuers = issuers, .n_issuers = 1,
		.audiences = audiences, .n_audiences = 1,
		.leeway = 30, .now = NOW,
	};

	return p;
}

static const char claims_ok[] = "{\"iss\":\"https://idp.example/\",\"aud\":\"api\","
    "\"sub\":\"alice\",\"exp\":1700000600,\"nbf\":1699999000}";

/* Verify with the default policy; the claims are dropped. */
static enum jwt_outcome
check(const char *token)
{
	struct jwt_policy p = policy();
	struct jwt_claims *c;
	enum jwt_outcome r = jwt_verify(token, strlen(token), keys, &p, &c);

	ck_assert(r == JWT_OK ? c != NULL : c == NULL);
	jwt_claims_unref(c);
	return r;
}

#define ASSERT_OUTCOME(token, want) do { \
	char *tok_ = (token); \
	enum jwt_outcome got_ = check(tok_); \
	ck_assert_msg(got_ == (want), "%s: got %s, want %s", tok_, jwt_outcome_name(got_), \
	    jwt_outcome_name(want)); \
	free(tok_); \
} while (0)

START_TEST(test_valid_each_algorithm)
{
	ASSERT_OUTCOME(tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_OK);
	/* The same RSA key without alg in its JWK verifies PS256 as well. */
	ASSERT_OUTCOME(tk_token(rsa, "PS256", "{\"alg\":\"PS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_OK);
	ASSERT_OUTCOME(tk_token(rsa_ps, "PS256", "{\"alg\":\"PS256\",\"kid\":\"ps\"}", claims_ok),
	    JWT_OK);
	ASSERT_OUTCOME(tk_token(ec, "ES256", "{\"alg\":\"ES256\",\"kid\":\"ec\",\"typ\":\"JWT\"}",
	    claims_ok), JWT_OK);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", claims_ok),
	    JWT_OK);
	/* No kid: every key that allows the alg is tried. */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\"}", claims_ok), JWT_OK);
	ASSERT_OUTCOME(tk_token(ec, "ES256", "{\"alg\":\"ES256\"}", claims_ok), JWT_OK);
}
END_TEST

START_TEST(test_alg_none)
{
	char tok[512];
	size_t n;

	n = base64url_encode(tok, (const unsigned char *)"{\"alg\":\"none\",\"kid\":\"rsa\"}", 26);
	tok[n++] = '.';
	n += base64url_encode(tok + n, (const unsigned char *)claims_ok, strlen(claims_ok));
	tok[n++] = '.';
	tok[n] = '\0';
	ASSERT_OUTCOME(strdup(tok), JWT_ALG_NOT_ALLOWED);
	/* Without a kid, and with a signature made up of anything. */
	n = base64url_encode(tok, (const unsigned char *)"{\"alg\":\"none\"}", 14);
	tok[n++] = '.';
	n += base64url_encode(tok + n, (const unsigned char *)claims_ok, strlen(claims_ok));
	memcpy(tok + n, ".AAAA", 6);
	ASSERT_OUTCOME(strdup(tok), JWT_ALG_NOT_ALLOWED);
}
END_TEST

START_TEST(test_hs256_key_confusion)
{
	size_t len;
	char *pem = tk_pem(rsa, &len);

	/* HMAC with the RSA public key (as PEM, with and without its newline) as the secret. */
	ASSERT_OUTCOME(tk_token_hs256(pem, len, "{\"alg\":\"HS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_ALG_NOT_ALLOWED);
	ASSERT_OUTCOME(tk_token_hs256(pem, len - 1, "{\"alg\":\"HS256\"}", claims_ok),
	    JWT_ALG_NOT_ALLOWED);
	free(pem);
}
END_TEST

START_TEST(test_tampered_payload)
{
	char *tok = tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}", claims_ok);
	char *evil = tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"sub\":\"admin\"}");
	char *d1 = strchr(tok, '.'), *d2 = strrchr(tok, '.'), *e1 = strchr(evil, '.'),
	    *e2 = strrchr(evil, '.');
	char mixed[4096];

	/* The header and signature of one token around the payload of another. */
	snprintf(mixed, sizeof(mixed), "%.*s%.*s%s", (int)(d1 - tok), tok, (int)(e2 - e1), e1, d2);
	ASSERT_OUTCOME(strdup(mixed), JWT_BAD_SIGNATURE);
	/* One bit of the payload flipped in each algorithm. */
	free(tok);
	tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", claims_ok);
	tok[strchr(tok, '.') - tok + 5] ^= 1;
	ASSERT_OUTCOME(tok, JWT_BAD_SIGNATURE);
	tok = tk_token(ec, "ES256", "{\"alg\":\"ES256\",\"kid\":\"ec\"}", claims_ok);
	tok[strchr(tok, '.') - tok + 5] ^= 1;
	ASSERT_OUTCOME(tok, JWT_BAD_SIGNATURE);
	tok = tk_token(rsa, "PS256", "{\"alg\":\"PS256\",\"kid\":\"rsa\"}", claims_ok);
	tok[strchr(tok, '.') - tok + 5] ^= 1;
	ASSERT_OUTCOME(tok, JWT_BAD_SIGNATURE);
	free(evil);
}
END_TEST

START_TEST(test_signed_by_another_key)
{
	ASSERT_OUTCOME(tk_token(attacker, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_BAD_SIGNATURE);
	ASSERT_OUTCOME(tk_token(attacker, "RS256", "{\"alg\":\"RS256\"}", claims_ok),
	    JWT_BAD_SIGNATURE);
	/* PSS signed, claimed as PKCS#1 v1.5, and the other way round. */
	ASSERT_OUTCOME(tk_token(rsa, "PS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_BAD_SIGNATURE);
	ASSERT_OUTCOME(tk_token(rsa, "RS256", "{\"alg\":\"PS256\",\"kid\":\"rsa\"}", claims_ok),
	    JWT_BAD_SIGNATURE);
	/* An ES256 signature in DER rather than r||s. */
	ASSERT_OUTCOME(tk_token_der(ec, "{\"alg\":\"ES256\",\"kid\":\"ec\"}", claims_ok),
	    JWT_BAD_SIGNATURE);
}
END_TEST

START_TEST(test_alg_from_the_key)
{
	struct jwt_policy p = policy();
	struct jwt_claims *c;
	char *tok;

	/* The key "ps" has alg PS256 in its JWK: RS256 by it is refused before any check. */
	ASSERT_OUTCOME(tk_token(rsa_ps, "RS256", "{\"alg\":\"RS256\",\"kid\":\"ps\"}", claims_ok),
	    JWT_ALG_NOT_ALLOWED);
	/* An RSA algorithm naming the EC key. */
	ASSERT_OUTCOME(tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"ec\"}", claims_ok),
	    JWT_ALG_NOT_ALLOWED);
	ASSERT_OUTCOME(tk_token(ec, "ES256", "{\"alg\":\"RS512\",\"kid\":\"ec\"}", claims_ok),
	    JWT_ALG_NOT_ALLOWED);
	/* The policy allows RS256 only. */
	p.algs = JWK_ALG_BIT(JWK_ALG_RS256);
	tok = tk_token(ec, "ES256", "{\"alg\":\"ES256\",\"kid\":\"ec\"}", claims_ok);
	ck_assert_int_eq(jwt_verify(tok, strlen(tok), keys, &p, &c), JWT_ALG_NOT_ALLOWED);
	free(tok);
	tok = tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\"}", claims_ok);
	ck_assert_int_eq(jwt_verify(tok, strlen(tok), keys, &p, &c), JWT_OK);
	ck_assert_int_eq(c->alg, JWK_ALG_RS256);
	jwt_claims_unref(c);
	free(tok);
}
END_TEST

START_TEST(test_issuer_audience)
{
	struct jwt_policy p = policy();
	struct jwt_claims *c;
	char *tok;

	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://evil.example/\",\"aud\":\"api\"}"), JWT_WRONG_ISSUER);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"aud\":\"api\"}"), JWT_WRONG_ISSUER);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":[\"https://idp.example/\"],\"aud\":\"api\"}"), JWT_WRONG_ISSUER);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"web\"}"), JWT_WRONG_AUDIENCE);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":[\"web\",\"mobile\"]}"), JWT_WRONG_AUDIENCE);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\"}"), JWT_WRONG_AUDIENCE);
	/* aud an array holding one; the issuer written with escapes. */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https:\\/\\/idp.example\\/\",\"aud\":[\"web\",\"api\"]}"), JWT_OK);
	/* Lists in the policy: any one. */
	p.n_issuers = 2;
	p.n_audiences = 2;
	tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://other.example/\",\"aud\":\"admin\"}");
	ck_assert_int_eq(jwt_verify(tok, strlen(tok), keys, &p, &c), JWT_OK);
	jwt_claims_unref(c);
	free(tok);
}
END_TEST

START_TEST(test_times)
{
	/* Leeway 30 s at NOW. */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"exp\":1699999970}"), JWT_EXPIRED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"exp\":1699999971}"), JWT_OK);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"nbf\":1700000031}"),
	    JWT_NOT_YET_VALID);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"nbf\":1700000030}"), JWT_OK);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"exp\":\"1800000000\"}"),
	    JWT_MALFORMED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"exp\":1800000000.5}"), JWT_OK);
}
END_TEST

START_TEST(test_unknown_kid)
{
	ASSERT_OUTCOME(tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"nope\"}", claims_ok),
	    JWT_UNKNOWN_KID);
	/* The 1024-bit key was skipped when the set was read: its kid is unknown. */
	ASSERT_OUTCOME(tk_token(rsa_small, "RS256", "{\"alg\":\"RS256\",\"kid\":\"small\"}",
	    claims_ok), JWT_UNKNOWN_KID);
}
END_TEST

START_TEST(test_too_large)
{
	char payload[JWT_MAX_TOKEN], *tok;
	size_t n;

	n = (size_t)snprintf(payload, sizeof(payload), "{\"iss\":\"https://idp.example/\","
	    "\"aud\":\"api\",\"pad\":\"");
	memset(payload + n, 'x', 6100 - n);
	strcpy(payload + 6100, "\"}");
	tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", payload);
	ck_assert_uint_gt(strlen(tok), JWT_MAX_TOKEN);
	ASSERT_OUTCOME(tok, JWT_TOO_LARGE);
	/* Just under the limit it is verified. */
	payload[6000] = '\0';
	strcat(payload, "\"}");
	tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", payload);
	ck_assert_uint_le(strlen(tok), JWT_MAX_TOKEN);
	ASSERT_OUTCOME(tok, JWT_OK);
}
END_TEST

START_TEST(test_key_headers_ignored)
{
	char hdr[2048], *jwk = tk_jwk(attacker, "rsa", NULL);

	/* Honest tokens with jku and x5u still verify with the configured key. */
	ASSERT_OUTCOME(tk_token(rsa, "RS256", "{\"alg\":\"RS256\",\"kid\":\"rsa\","
	    "\"jku\":\"https://evil.example/jwks.json\",\"x5u\":\"https://evil.example/c.pem\"}",
	    claims_ok), JWT_OK);
	/* A token carrying its own key (jwk) or pointing at one (jku) gets no further. */
	snprintf(hdr, sizeof(hdr), "{\"alg\":\"RS256\",\"kid\":\"rsa\",\"jwk\":%s}", jwk);
	ASSERT_OUTCOME(tk_token(attacker, "RS256", hdr, claims_ok), JWT_BAD_SIGNATURE);
	ASSERT_OUTCOME(tk_token(attacker, "RS256", "{\"alg\":\"RS256\",\"kid\":\"attacker\","
	    "\"jku\":\"https://evil.example/jwks.json\"}", claims_ok), JWT_UNKNOWN_KID);
	free(jwk);
}
END_TEST

START_TEST(test_malformed)
{
	char *tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", claims_ok);
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s.AAAA.AAAA", tok);        /* five segments */
	ASSERT_OUTCOME(strdup(buf), JWT_MALFORMED);
	*strrchr(tok, '.') = '\0';                              /* two */
	ASSERT_OUTCOME(strdup(tok), JWT_MALFORMED);
	free(tok);
	ASSERT_OUTCOME(strdup(""), JWT_MALFORMED);
	ASSERT_OUTCOME(strdup(".."), JWT_MALFORMED);
	ASSERT_OUTCOME(strdup("eyJhbGciOiJFZERTQSJ9==.e30.AAAA"), JWT_MALFORMED);
	/* A header that is not JSON, or a crit extension nobody here understands. */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{alg:EdDSA}", claims_ok), JWT_MALFORMED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"crit\":[\"b64\"],\"b64\":false}",
	    claims_ok), JWT_MALFORMED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"alg\":\"none\"}", claims_ok),
	    JWT_MALFORMED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"kid\":\"ed\"}", claims_ok), JWT_MALFORMED);
	/* Claims that are signed but not a JSON object. */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", "[1,2]"),
	    JWT_MALFORMED);
	/* A claim twice (RFC 7519 section 4: reject, or take the last; we reject). */
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"sub\":\"a\",\"sub\":\"b\"}"),
	    JWT_MALFORMED);
	ASSERT_OUTCOME(tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"s\\u0075b\":\"a\",\"sub\":\"b\"}"),
	    JWT_MALFORMED);
}
END_TEST

START_TEST(test_scopes)
{
	struct jwt_policy p = policy();
	static const struct { const char *claims; enum jwt_outcome want; } cases[] = {
		{ "{\"scope\":\"orders:read orders:write\"}", JWT_OK },
		{ "{\"scope\":\"orders:write profile orders:read\"}", JWT_OK },
		{ "{\"scope\":\"orders:read\"}", JWT_INSUFFICIENT_SCOPE },
		{ "{\"scope\":\"orders:readorders:write\"}", JWT_INSUFFICIENT_SCOPE },
		{ "{\"scp\":[\"orders:write\",\"orders:read\"]}", JWT_OK },
		{ "{\"scp\":\"orders:read orders:write\"}", JWT_OK },
		{ "{\"scope\":\"orders:read\",\"scp\":[\"orders:write\"]}", JWT_OK },
		{ "{\"scp\":[\"orders:read orders:write\"]}", JWT_INSUFFICIENT_SCOPE },
		{ "{\"scope\":[\"orders:read\",\"orders:write\"]}", JWT_INSUFFICIENT_SCOPE },
		{ "{}", JWT_INSUFFICIENT_SCOPE },
	};
	struct jwt_claims *c;
	size_t i;
	char *tok;

	p.n_issuers = p.n_audiences = 0;
	p.scopes = scopes;
	p.n_scopes = 2;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", cases[i].claims);
		ck_assert_int_eq(jwt_verify_signature(tok, strlen(tok), keys, &p, &c), JWT_OK);
		ck_assert_msg(jwt_check_claims(c, &p) == cases[i].want, "%s: got %s",
		    cases[i].claims, jwt_outcome_name(jwt_check_claims(c, &p)));
		jwt_claims_unref(c);
		free(tok);
	}
}
END_TEST

START_TEST(test_claim_lookup)
{
	struct jwt_policy p = policy();
	struct jwt_claims *c;
	const char *v;
	size_t n;
	char buf[32];
	char *tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}",
	    "{\"iss\":\"https://idp.example/\",\"aud\":\"api\",\"sub\":\"al\\\"ice\\u00e9\","
	    "\"n\":42,\"ok\":true,\"none\":null,\"realm\":{\"roles\":[\"a\",\"b\"],"
	    "\"deep\":{\"x\":\"y\"}}}");

	p.n_issuers = p.n_audiences = 0;
	ck_assert_int_eq(jwt_verify(tok, strlen(tok), keys, &p, &c), JWT_OK);
	ck_assert_int_eq(jwt_claim(c, "sub", &v, &n), JWT_CLAIM_STRING);
	ck_assert_int_eq((int)n, 13);
	ck_assert_int_eq(memcmp(v, "al\\\"ice\\u00e9", n), 0);
	ck_assert_int_eq(jwt_claim_str(c, "sub", buf, sizeof(buf)), 8);
	ck_assert_int_eq(memcmp(buf, "al\"ice\xc3\xa9", 8), 0);
	ck_assert_int_eq(jwt_claim_str(c, "sub", buf, 7), -1);
	ck_assert_int_eq(jwt_claim(c, "n", &v, &n), JWT_CLAIM_NUMBER);
	ck_assert_int_eq(memcmp(v, "42", n), 0);
	ck_assert_int_eq(jwt_claim(c, "ok", &v, &n), JWT_CLAIM_BOOL);
	ck_assert_int_eq(jwt_claim(c, "none", &v, &n), JWT_CLAIM_NULL);
	ck_assert_int_eq(jwt_claim(c, "realm.roles", &v, &n), JWT_CLAIM_ARRAY);
	ck_assert_int_eq((int)n, 9);
	ck_assert_int_eq(memcmp(v, "[\"a\",\"b\"]", n), 0);
	ck_assert_int_eq(jwt_claim(c, "realm.roles.1", &v, &n), JWT_CLAIM_STRING);
	ck_assert_int_eq(memcmp(v, "b", n), 0);
	ck_assert_int_eq(jwt_claim(c, "realm.deep", &v, &n), JWT_CLAIM_OBJECT);
	ck_assert_int_eq(jwt_claim_str(c, "realm.deep.x", buf, sizeof(buf)), 1);
	ck_assert_int_eq(jwt_claim(c, "realm.roles.2", &v, &n), JWT_CLAIM_MISSING);
	ck_assert_int_eq(jwt_claim(c, "sub.x", &v, &n), JWT_CLAIM_MISSING);
	ck_assert_int_eq(jwt_claim(c, "realm.", &v, &n), JWT_CLAIM_MISSING);
	ck_assert_int_eq(jwt_claim(c, "", &v, &n), JWT_CLAIM_MISSING);
	ck_assert_int_eq(jwt_claim(c, "missing", &v, &n), JWT_CLAIM_MISSING);
	ck_assert_int_eq(jwt_claim_str(c, "n", buf, sizeof(buf)), -1);
	jwt_claims_unref(c);
	free(tok);
}
END_TEST

/* Claims of an Ed25519 token with these claims, signature verified. */
static struct jwt_claims *
claims_of(const char *payload)
{
	struct jwt_policy p = policy();
	struct jwt_claims *c;
	char *tok = tk_token(ed, "EdDSA", "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}", payload);

	ck_assert_int_eq(jwt_verify_signature(tok, strlen(tok), keys, &p, &c), JWT_OK);
	free(tok);
	return c;
}

START_TEST(test_cache_until_exp)
{
	struct jwt_cache *cache = jwt_cache_new(64, 600);
	struct jwt_cache_key k1, k2, k3;
	struct jwt_claims *c = claims_of("{\"sub\":\"a\",\"exp\":1700000100}"), *got;
	struct jwt_claims *noexp = claims_of("{\"sub\":\"b\"}");
	struct jwt_claims *old = claims_of("{\"sub\":\"c\",\"exp\":1699999999}");

	jwt_cache_key("token-a", 7, &k1);
	jwt_cache_key("token-b", 7, &k2);
	jwt_cache_key("token-c", 7, &k3);
	ck_assert_ptr_null(jwt_cache_get(cache, &k1, NOW));
	jwt_cache_put(cache, &k1, c, NOW);
	jwt_cache_put(cache, &k2, noexp, NOW);
	jwt_cache_put(cache, &k3, old, NOW);            /* expired: not kept */
	ck_assert_uint_eq(jwt_cache_count(cache), 2);
	ck_assert_int_eq(c->refs, 2);
	got = jwt_cache_get(cache, &k1, NOW + 99);
	ck_assert_ptr_eq(got, c);
	ck_assert_int_eq(c->refs, 3);
	jwt_claims_unref(got);
	ck_assert_ptr_null(jwt_cache_get(cache, &k3, NOW));
	/* Gone at exp; the one without exp after max_ttl. */
	ck_assert_ptr_null(jwt_cache_get(cache, &k1, NOW + 100));
	ck_assert_int_eq(c->refs, 1);
	got = jwt_cache_get(cache, &k2, NOW + 599);
	ck_assert_ptr_eq(got, noexp);
	jwt_claims_unref(got);
	ck_assert_ptr_null(jwt_cache_get(cache, &k2, NOW + 600));
	ck_assert_uint_eq(jwt_cache_count(cache), 0);
	jwt_cache_put(cache, &k1, c, NOW);
	jwt_cache_clear(cache);
	ck_assert_uint_eq(jwt_cache_count(cache), 0);
	ck_assert_int_eq(c->refs, 1);
	jwt_cache_free(cache);
	jwt_claims_unref(c);
	jwt_claims_unref(noexp);
	jwt_claims_unref(old);
}
END_TEST

START_TEST(test_cache_bounded)
{
	struct jwt_cache *cache = jwt_cache_new(32, 600);
	struct jwt_cache_key k;
	struct jwt_claims *c = claims_of("{\"sub\":\"a\"}"), *got;
	char name[32];
	int i;

	for (i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "token-%d", i);
		jwt_cache_key(name, strlen(name), &k);
		jwt_cache_put(cache, &k, c, NOW);
		ck_assert_uint_le(jwt_cache_count(cache), 32);
	}
	ck_assert_uint_eq(jwt_cache_count(cache), 32);
	ck_assert_int_eq(c->refs, 33);
	/* The latest is there, the first long evicted. */
	ck_assert_ptr_nonnull(got = jwt_cache_get(cache, &k, NOW));
	jwt_claims_unref(got);
	jwt_cache_key("token-0", 7, &k);
	ck_assert_ptr_null(jwt_cache_get(cache, &k, NOW));
	jwt_cache_free(cache);
	ck_assert_int_eq(c->refs, 1);
	jwt_claims_unref(c);
}
END_TEST

struct cache_worker {
	struct jwt_cache *cache;
	struct jwt_claims *claims;
	unsigned seed;
	int hits;
};

static void *
cache_worker_main(void *arg)
{
	struct cache_worker *w = arg;
	struct jwt_cache_key k;
	struct jwt_claims *got;
	char name[32];
	int i;

	for (i = 0; i < 20000; i++) {
		snprintf(name, sizeof(name), "t%u", rand_r(&w->seed) % 200);
		jwt_cache_key(name, strlen(name), &k);
		if ((got = jwt_cache_get(w->cache, &k, NOW)) != NULL) {
			w->hits++;
			jwt_claims_unref(got);
		} else {
			jwt_cache_put(w->cache, &k, w->claims, NOW);
		}
	}
	jwt_cache_thread_end();         /* the digest context the thread kept */
	return NULL;
}

START_TEST(test_cache_threads)
{
	struct jwt_cache *cache = jwt_cache_new(64, 600);
	struct jwt_claims *c = claims_of("{\"sub\":\"a\"}");
	struct cache_worker w[4];
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++) {
		w[i] = (struct cache_worker){ .cache = cache, .claims = c, .seed = (unsigned)i + 1 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, cache_worker_main, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_gt(w[i].hits, 0);
	}
	ck_assert_uint_le(jwt_cache_count(cache), 64);
	/* Every reference taken was given back: the entries' and the caller's only. */
	ck_assert_int_eq(c->refs, 1 + (int)jwt_cache_count(cache));
	jwt_cache_free(cache);
	ck_assert_int_eq(c->refs, 1);
	jwt_claims_unref(c);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("jwt");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	char doc[16384], err[128];
	char *j1, *j2, *j3, *j4, *j5;
	int failed;

	rsa = tk_rsa(2048);
	rsa_ps = tk_rsa(2048);
	rsa_small = tk_rsa(1024);
	attacker = tk_rsa(2048);
	ec = tk_ec("P-256");
	ed = tk_ed25519();
	j1 = tk_jwk(rsa, "rsa", NULL);
	j2 = tk_jwk(rsa_ps, "ps", "\"alg\":\"PS256\"");
	j3 = tk_jwk(rsa_small, "small", NULL);
	j4 = tk_jwk(ec, "ec", "\"alg\":\"ES256\",\"use\":\"sig\"");
	j5 = tk_jwk(ed, "ed", NULL);
	snprintf(doc, sizeof(doc), "{\"keys\":[%s,%s,%s,%s,%s]}", j1, j2, j3, j4, j5);
	if ((keys = jwk_set_parse(doc, strlen(doc), NULL, NULL, err, sizeof(err))) == NULL ||
	    keys->n != 4) {
		fprintf(stderr, "key set: %s\n", err);
		return EXIT_FAILURE;
	}
	free(j1);
	free(j2);
	free(j3);
	free(j4);
	free(j5);
	tcase_add_test(tc, test_valid_each_algorithm);
	tcase_add_test(tc, test_alg_none);
	tcase_add_test(tc, test_hs256_key_confusion);
	tcase_add_test(tc, test_tampered_payload);
	tcase_add_test(tc, test_signed_by_another_key);
	tcase_add_test(tc, test_alg_from_the_key);
	tcase_add_test(tc, test_issuer_audience);
	tcase_add_test(tc, test_times);
	tcase_add_test(tc, test_unknown_kid);
	tcase_add_test(tc, test_too_large);
	tcase_add_test(tc, test_key_headers_ignored);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_scopes);
	tcase_add_test(tc, test_claim_lookup);
	tcase_add_test(tc, test_cache_until_exp);
	tcase_add_test(tc, test_cache_bounded);
	tcase_add_test(tc, test_cache_threads);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	jwk_set_unref(keys);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
