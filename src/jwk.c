#include "jwk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>

#include "base64url.h"
#include "jdoc.h"

#define JWK_MAX_TOKENS 8192
#define JWK_MAX_KID 256

static const char *const jwk_alg_names[] = {
#define JWK_ALG_NAME(id, name) name,
	JWK_ALGS(JWK_ALG_NAME)
#undef JWK_ALG_NAME
};

const char *
jwk_alg_name(enum jwk_alg alg)
{
	return (unsigned)alg < JWK_ALG_N ? jwk_alg_names[alg] : "?";
}

int
jwk_alg_parse(const char *s, size_t len)
{
	int i;

	for (i = 0; i < JWK_ALG_N; i++)
		if (strlen(jwk_alg_names[i]) == len && memcmp(jwk_alg_names[i], s, len) == 0)
			return i;
	return -1;
}

/* A base64url member of key k decoded into out (exactly want bytes unless want is 0, then up
 * to cap): its length, or -1. */
static int
jwk_b64_member(const struct jdoc *d, int k, const char *name, unsigned char *out, size_t cap,
    size_t want)
{
	int v = jdoc_member(d, k, name);
	ssize_t n;

	if (v < 0 || d->toks[v].type != JDOC_STRING)
		return -1;
	n = base64url_decode(out, cap, d->buf + d->toks[v].start,
	    (size_t)(d->toks[v].end - d->toks[v].start));
	if (n <= 0 || (want != 0 && (size_t)n != want))
		return -1;
	return (int)n;
}

/*
 * A P-256 coordinate of key k into out[0..32), big-endian.  RFC 7518 wants all 32 bytes, but
 * some producers (PyJWT's to_jwk among them) leave out leading zero bytes, one key in 128:
 * they are put back.  0, or -1 when it is missing, empty or longer.
 */
static int
jwk_coordinate(const struct jdoc *d, int k, const char *name, unsigned char *out)
{
	int n = jwk_b64_member(d, k, name, out, 32, 0);

	if (n < 0)
		return -1;
	memmove(out + 32 - n, out, (size_t)n);
	memset(out, 0, 32 - (size_t)n);
	return 0;
}

static EVP_PKEY *
jwk_fromdata(const char *type, OSSL_PARAM *params)
{
	EVP_PKEY_CTX *ctx;
	EVP_PKEY *pkey = NULL;

	if ((ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL)) == NULL)
		return NULL;
	if (EVP_PKEY_fromdata_init(ctx) <= 0 ||
	    EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		pkey = NULL;
	EVP_PKEY_CTX_free(ctx);
	return pkey;
}

static const char *
jwk_rsa(const struct jdoc *d, int k, struct jwk_key *key)
{
	unsigned char n[JWK_RSA_MAX_BITS / 8 + 1], e[8];
	int nlen, elen;
	BIGNUM *bn_n = NULL, *bn_e = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	const char *why = NULL;

	if ((nlen = jwk_b64_member(d, k, "n", n, sizeof(n), 0)) < 0)
		return "RSA key without a valid n (or over 8192 bits)";
	if ((elen = jwk_b64_member(d, k, "e", e, sizeof(e), 0)) < 0)
		return "RSA key without a valid e";
	if ((bn_n = BN_bin2bn(n, nlen, NULL)) == NULL || (bn_e = BN_bin2bn(e, elen, NULL)) == NULL)
		why = "out of memory";
	else if (BN_num_bits(bn_n) < JWK_RSA_MIN_BITS)
		why = "RSA key under 2048 bits";
	else if (BN_num_bits(bn_n) > JWK_RSA_MAX_BITS)
		why = "RSA key over 8192 bits";
	else if (!BN_is_odd(bn_e) || BN_is_one(bn_e))
		why = "RSA key with a bad exponent";
	else if ((bld = OSSL_PARAM_BLD_new()) == NULL ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) ||
	    (params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
		why = "out of memory";
	else if ((key->pkey = jwk_fromdata("RSA", params)) == NULL)
		why = "RSA key refused by the crypto library";
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(bn_n);
	BN_free(bn_e);
	if (why != NULL)
		return why;
	key->kty = JWK_KTY_RSA;
	key->bits = EVP_PKEY_get_bits(key->pkey);
	key->algs = JWK_ALG_BIT(JWK_ALG_RS256) | JWK_ALG_BIT(JWK_ALG_PS256);
	return NULL;
}

static const char *
jwk_ec(const struct jdoc *d, int k, struct jwk_key *key)
{
	unsigned char pub[65];
	char group[] = "prime256v1";
	OSSL_PARAM params[3];
	EVP_PKEY_CTX *ctx;
	int crv = jdoc_member(d, k, "crv"), ok;

	if (crv < 0 || d->toks[crv].type != JDOC_STRING)
		return "EC key without crv";
	if (!jdoc_str_eq(d, crv, "P-256", 5))
		return "EC key on a curve other than P-256";
	pub[0] = 0x04;                  /* uncompressed point: x then y */
	if (jwk_coordinate(d, k, "x", pub + 1) < 0 || jwk_coordinate(d, k, "y", pub + 33) < 0)
		return "EC key without a valid x and y";
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub));
	params[2] = OSSL_PARAM_construct_end();
	if ((key->pkey = jwk_fromdata("EC", params)) == NULL)
		return "EC key not a point on P-256";
	/* The point must be on the curve: an invalid one opens invalid-curve attacks. */
	ctx = EVP_PKEY_CTX_new_from_pkey(NULL, key->pkey, NULL);
	ok = ctx != NULL && EVP_PKEY_public_check(ctx) == 1;
	EVP_PKEY_CTX_free(ctx);
	if (!ok)
		return "EC key not a point on P-256";
	key->kty = JWK_KTY_EC_P256;
	key->bits = 256;
	key->algs = JWK_ALG_BIT(JWK_ALG_ES256);
	return NULL;
}

static const char *
jwk_okp(const struct jdoc *d, int k, struct jwk_key *key)
{
	unsigned char pub[32];
	OSSL_PARAM params[2];
	int crv = jdoc_member(d, k, "crv");

	if (crv < 0 || d->toks[crv].type != JDOC_STRING)
		return "OKP key without crv";
	if (!jdoc_str_eq(d, crv, "Ed25519", 7))
		return "OKP key on a curve other than Ed25519";
	if (jwk_b64_member(d, k, "x", pub, sizeof(pub), sizeof(pub)) < 0)
		return "Ed25519 key without a valid x";
	params[0] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub));
	params[1] = OSSL_PARAM_construct_end();
	if ((key->pkey = jwk_fromdata("ED25519", params)) == NULL)
		return "Ed25519 key refused by the crypto library";
	key->kty = JWK_KTY_ED25519;
	key->bits = 256;
	key->algs = JWK_ALG_BIT(JWK_ALG_EDDSA);
	return NULL;
}

/* 1 when the array at arr holds the string s. */
static int
jwk_array_has(const struct jdoc *d, int arr, const char *s)
{
	int i;
	size_t k;

	for (k = 0; (i = jdoc_element(d, arr, k)) >= 0; k++)
		if (jdoc_str_eq(d, i, s, strlen(s)))
			return 1;
	return 0;
}

/* Read the key at k into key: NULL, or why it is skipped (key then holds nothing). */
static const char *
jwk_key_read(const struct jdoc *d, int k, struct jwk_key *key)
{
	int kty, alg, use, ops, kid, a = -1, len;
	const char *why;
	char kidbuf[JWK_MAX_KID];

	memset(key, 0, sizeof(*key));
	if (d->toks[k].type != JDOC_OBJECT)
		return "not an object";
	if ((kid = jdoc_member(d, k, "kid")) == -2 || (kid >= 0 &&
	    (len = jdoc_str(d, kid, kidbuf, sizeof(kidbuf))) < 0))
		return "kid not a string of at most 256 bytes";
	if (kid >= 0) {
		if ((key->kid = malloc((size_t)len + 1)) == NULL)
			return "out of memory";
		memcpy(key->kid, kidbuf, (size_t)len);
		key->kid[len] = '\0';
	}
	if ((use = jdoc_member(d, k, "use")) == -2 || (use >= 0 && !jdoc_str_eq(d, use, "sig", 3)))
		why = "use is not sig";
	else if ((ops = jdoc_member(d, k, "key_ops")) == -2 || (ops >= 0 &&
	    (d->toks[ops].type != JDOC_ARRAY || !jwk_array_has(d, ops, "verify"))))
		why = "key_ops without verify";
	else if ((alg = jdoc_member(d, k, "alg")) == -2 || (alg >= 0 &&
	    (d->toks[alg].type != JDOC_STRING || (a = jwk_alg_parse(d->buf + d->toks[alg].start,
	    (size_t)(d->toks[alg].end - d->toks[alg].start))) < 0)))
		why = "alg not one of RS256, PS256, ES256, EdDSA";
	else if ((kty = jdoc_member(d, k, "kty")) < 0 || d->toks[kty].type != JDOC_STRING)
		why = "no kty";
	else if (jdoc_str_eq(d, kty, "RSA", 3))
		why = jwk_rsa(d, k, key);
	else if (jdoc_str_eq(d, kty, "EC", 2))
		why = jwk_ec(d, k, key);
	else if (jdoc_str_eq(d, kty, "OKP", 3))
		why = jwk_okp(d, k, key);
	else if (jdoc_str_eq(d, kty, "oct", 3))
		why = "symmetric keys (kty oct) are never accepted";
	else
		why = "kty not RSA, EC or OKP";
	if (why == NULL && a >= 0) {
		if ((key->algs & JWK_ALG_BIT(a)) == 0)
			why = "alg does not fit the key's type";
		else
			key->algs = JWK_ALG_BIT(a);
	}
	if (why != NULL) {
		EVP_PKEY_free(key->pkey);
		key->pkey = NULL;
	}
	return why;
}

struct jwk_set *
jwk_set_parse(const char *json, size_t len, jwk_skip_cb skip, void *arg, char *err,
    size_t errlen)
{
	struct jwk_set *set;
	struct jdoc d;
	struct jwk_key key;
	const char *why;
	int keys, k;
	size_t i, nkeys;

	if (len > JWK_MAX_DOC) {
		snprintf(err, errlen, "JWKS over %d bytes", JWK_MAX_DOC);
		return NULL;
	}
	if (jdoc_parse(&d, json, len, JWK_MAX_TOKENS) != 0) {
		snprintf(err, errlen, "JWKS not a JSON object (or over %d tokens)", JWK_MAX_TOKENS);
		return NULL;
	}
	if ((keys = jdoc_member(&d, 0, "keys")) < 0 || d.toks[keys].type != JDOC_ARRAY) {
		snprintf(err, errlen, "JWKS without a \"keys\" array");
		jdoc_free(&d);
		return NULL;
	}
	nkeys = (size_t)d.toks[keys].size;
	if ((set = calloc(1, sizeof(*set))) == NULL || (nkeys > 0 &&
	    (set->keys = calloc(nkeys < JWK_MAX_KEYS ? nkeys : JWK_MAX_KEYS,
	    sizeof(*set->keys))) == NULL)) {
		free(set);
		snprintf(err, errlen, "out of memory");
		jdoc_free(&d);
		return NULL;
	}
	set->refs = 1;
	for (i = 0, k = keys + 1; i < nkeys; i++, k = jdoc_skip(&d, k)) {
		memset(&key, 0, sizeof(key));
		why = set->n == JWK_MAX_KEYS ? "more than 64 keys" : jwk_key_read(&d, k, &key);
		if (why == NULL) {
			set->keys[set->n++] = key;
			continue;
		}
		set->skipped++;
		if (skip != NULL)
			skip(arg, i, key.kid, why);
		free(key.kid);
		key.kid = NULL;
	}
	jdoc_free(&d);
	return set;
}

struct jwk_set *
jwk_set_ref(struct jwk_set *set)
{
	__atomic_add_fetch(&set->refs, 1, __ATOMIC_RELAXED);
	return set;
}

void
jwk_set_unref(struct jwk_set *set)
{
	size_t i;

	if (set == NULL || __atomic_sub_fetch(&set->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (i = 0; i < set->n; i++) {
		free(set->keys[i].kid);
		EVP_PKEY_free(set->keys[i].pkey);
	}
	free(set->keys);
	free(set);
}
