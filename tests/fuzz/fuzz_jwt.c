/*
 * libFuzzer target for what comes from outside in authentication: a JWKS document, a token, a
 * token's claims, base64url.
 *
 * Input: a control byte, then the bytes.  The control byte's low two bits choose:
 *   0  a JWKS: NULL or at most JWK_MAX_KEYS keys, each with a public key and algorithms;
 *   1  a token, verified against keys made at start: never ok (nobody here holds their
 *      private keys), always one of the outcomes;
 *   2  claims: looked up by path (a value found lies inside the claims; a string unescapes to
 *      no more bytes than it has) and checked against a policy;
 *   3  base64url: what decodes encodes back to the same characters (one encoding per value).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ec.h>
#include <openssl/rsa.h>

#include "base64url.h"
#include "jdoc.h"
#include "jwk.h"
#include "jwt.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct jwk_set *fuzz_keys;

static const char *const paths[] = {
	"sub", "iss", "aud", "realm.roles", "realm.roles.0", "a.b.c", "scope", "scp.1", "x",
};
static const char *const issuers[] = { "https://idp.example/" };
static const char *const audiences[] = { "api", "admin" };
static const char *const scopes[] = { "orders:read" };

/* The key set once: an RSA, a P-256 and an Ed25519 key of this process. */
static void
fuzz_init_keys(void)
{
	EVP_PKEY *k[3] = { EVP_RSA_gen(2048), EVP_EC_gen("P-256"),
	    EVP_PKEY_Q_keygen(NULL, NULL, "ED25519") };
	struct jwk_key *keys = calloc(3, sizeof(*keys));
	int i;

	FUZZ_CHECK(keys != NULL && k[0] != NULL && k[1] != NULL && k[2] != NULL);
	fuzz_keys = calloc(1, sizeof(*fuzz_keys));
	FUZZ_CHECK(fuzz_keys != NULL);
	for (i = 0; i < 3; i++) {
		keys[i].pkey = k[i];
		keys[i].kid = strdup(i == 0 ? "rsa" : i == 1 ? "ec" : "ed");
	}
	keys[0].kty = JWK_KTY_RSA;
	keys[0].algs = JWK_ALG_BIT(JWK_ALG_RS256) | JWK_ALG_BIT(JWK_ALG_PS256);
	keys[1].kty = JWK_KTY_EC_P256;
	keys[1].algs = JWK_ALG_BIT(JWK_ALG_ES256);
	keys[2].kty = JWK_KTY_ED25519;
	keys[2].algs = JWK_ALG_BIT(JWK_ALG_EDDSA);
	fuzz_keys->keys = keys;
	fuzz_keys->n = 3;
	fuzz_keys->refs = 1;
}

static void
fuzz_jwks(const char *s, size_t n)
{
	char err[128];
	struct jwk_set *set = jwk_set_parse(s, n, NULL, NULL, err, sizeof(err));
	size_t i;

	if (set == NULL)
		return;
	FUZZ_CHECK(set->n <= JWK_MAX_KEYS);
	for (i = 0; i < set->n; i++)
		FUZZ_CHECK(set->keys[i].pkey != NULL && set->keys[i].algs != 0 &&
		    (set->keys[i].algs & ~JWK_ALGS_ALL) == 0);
	jwk_set_unref(set);
}

static void
fuzz_token(const char *s, size_t n)
{
	struct jwt_policy p = { .leeway = 30, .now = 1700000000 };
	struct jwt_claims *c;
	enum jwt_outcome r;

	if (fuzz_keys == NULL)
		fuzz_init_keys();
	r = jwt_verify(s, n, fuzz_keys, &p, &c);
	FUZZ_CHECK(r != JWT_OK && r < JWT_OUTCOME_N && c == NULL);
}

static void
fuzz_claims(const char *s, size_t n)
{
	struct jwt_claims c = { .json = (char *)s, .len = n, .refs = 1 };
	struct jwt_policy p = {
		.issuers = issuers, .n_issuers = 1, .audiences = audiences, .n_audiences = 2,
		.scopes = scopes, .n_scopes = 1, .leeway = 30, .now = 1700000000,
	};
	const char *v;
	size_t len, i;
	char buf[8192];
	int k;

	if (jdoc_parse(&c.doc, s, n, 2048) != 0)
		return;
	(void)jdoc_keys_unique(&c.doc, 0);
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (jwt_claim(&c, paths[i], &v, &len) == JWT_CLAIM_MISSING)
			continue;
		FUZZ_CHECK(v >= s && v + len <= s + n);
		k = jwt_claim_str(&c, paths[i], buf, sizeof(buf));
		FUZZ_CHECK(k <= (int)len);
	}
	FUZZ_CHECK(jwt_check_claims(&c, &p) < JWT_OUTCOME_N);
	jdoc_free(&c.doc);
}

static void
fuzz_base64url(const char *s, size_t n)
{
	unsigned char *out = malloc(BASE64URL_DECODED_MAX(n) + 1);
	char *back;
	ssize_t k;

	FUZZ_CHECK(out != NULL);
	if ((k = base64url_decode(out, BASE64URL_DECODED_MAX(n), s, n)) >= 0) {
		back = malloc(BASE64URL_ENCODED_LEN((size_t)k) + 1);
		FUZZ_CHECK(back != NULL);
		FUZZ_CHECK(base64url_encode(back, out, (size_t)k) == n);
		FUZZ_CHECK(memcmp(back, s, n) == 0);
		free(back);
	}
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data + 1;
	size_t n = size - 1;

	if (size == 0 || size > 64 * 1024)
		return 0;
	switch (data[0] & 3) {
	case 0:
		fuzz_jwks(s, n);
		break;
	case 1:
		fuzz_token(s, n);
		break;
	case 2:
		fuzz_claims(s, n);
		break;
	case 3:
		fuzz_base64url(s, n);
		break;
	}
	return 0;
}
