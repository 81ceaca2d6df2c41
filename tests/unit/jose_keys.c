#include "jose_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "base64url.h"

static void
tk_die(const char *what)
{
	fprintf(stderr, "test keys: %s failed\n", what);
	abort();
}

EVP_PKEY *
tk_rsa(int bits)
{
	EVP_PKEY *k = EVP_RSA_gen((unsigned)bits);

	if (k == NULL)
		tk_die("RSA key generation");
	return k;
}

EVP_PKEY *
tk_ec(const char *group)
{
	EVP_PKEY *k = EVP_EC_gen(group);

	if (k == NULL)
		tk_die("EC key generation");
	return k;
}

EVP_PKEY *
tk_ed25519(void)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");

	if (k == NULL)
		tk_die("Ed25519 key generation");
	return k;
}

/* base64url of bytes into a fresh string. */
static char *
tk_b64(const unsigned char *b, size_t n)
{
	char *s = malloc(BASE64URL_ENCODED_LEN(n) + 1);

	s[base64url_encode(s, b, n)] = '\0';
	return s;
}

static char *
tk_b64_bn(EVP_PKEY *key, const char *param, int pad)
{
	BIGNUM *bn = NULL;
	unsigned char buf[1024];
	int n;

	if (EVP_PKEY_get_bn_param(key, param, &bn) != 1)
		tk_die("EVP_PKEY_get_bn_param");
	n = pad > 0 ? BN_bn2binpad(bn, buf, pad) : BN_bn2bin(bn, buf);
	BN_free(bn);
	return tk_b64(buf, (size_t)n);
}

char *
tk_jwk(EVP_PKEY *key, const char *kid, const char *extra)
{
	char *out = malloc(4096), *a, *b = NULL;
	const char *sep = extra != NULL ? "," : "";
	unsigned char raw[32];
	size_t rawlen = sizeof(raw);
	char group[32];

	extra = extra != NULL ? extra : "";
	if (EVP_PKEY_is_a(key, "RSA")) {
		a = tk_b64_bn(key, OSSL_PKEY_PARAM_RSA_N, 0);
		b = tk_b64_bn(key, OSSL_PKEY_PARAM_RSA_E, 0);
		snprintf(out, 4096, "{\"kty\":\"RSA\",\"kid\":\"%s\",\"n\":\"%s\",\"e\":\"%s\"%s%s}",
		    kid, a, b, sep, extra);
	} else if (EVP_PKEY_is_a(key, "EC")) {
		if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group,
		    sizeof(group), NULL) != 1)
			tk_die("group name");
		a = tk_b64_bn(key, OSSL_PKEY_PARAM_EC_PUB_X, strcmp(group, "prime256v1") == 0 ? 32 : 48);
		b = tk_b64_bn(key, OSSL_PKEY_PARAM_EC_PUB_Y, strcmp(group, "prime256v1") == 0 ? 32 : 48);
		snprintf(out, 4096, "{\"kty\":\"EC\",\"crv\":\"%s\",\"kid\":\"%s\",\"x\":\"%s\","
		    "\"y\":\"%s\"%s%s}", strcmp(group, "prime256v1") == 0 ? "P-256" : "P-384", kid,
		    a, b, sep, extra);
	} else {
		if (EVP_PKEY_get_raw_public_key(key, raw, &rawlen) != 1)
			tk_die("raw public key");
		a = tk_b64(raw, rawlen);
		snprintf(out, 4096, "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"%s\",\"x\":\"%s\""
		    "%s%s}", kid, a, sep, extra);
	}
	free(a);
	free(b);
	return out;
}

char *
tk_pem(EVP_PKEY *key, size_t *len)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *out;
	long n;

	if (bio == NULL || PEM_write_bio_PUBKEY(bio, key) != 1)
		tk_die("PEM");
	n = BIO_get_mem_data(bio, &data);
	out = malloc((size_t)n + 1);
	memcpy(out, data, (size_t)n);
	out[n] = '\0';
	*len = (size_t)n;
	BIO_free(bio);
	return out;
}

/* header.payload, base64url, into a fresh buffer with room for a signature. */
static char *
tk_input(const char *header, const char *payload, size_t *len)
{
	size_t hl = strlen(header), pl = strlen(payload);
	char *s = malloc(BASE64URL_ENCODED_LEN(hl) + BASE64URL_ENCODED_LEN(pl) + 2 + 2048);
	size_t n;

	n = base64url_encode(s, (const unsigned char *)header, hl);
	s[n++] = '.';
	n += base64url_encode(s + n, (const unsigned char *)payload, pl);
	s[n] = '\0';
	*len = n;
	return s;
}

static char *
tk_sign(EVP_PKEY *key, const char *alg, const char *header, const char *payload, int der)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	unsigned char sig[1024], raw[64];
	const unsigned char *p = sig;
	size_t siglen = sizeof(sig), n;
	char *s = tk_input(header, payload, &n);
	int eddsa = strcmp(alg, "EdDSA") == 0;
	ECDSA_SIG *es;

	if (EVP_DigestSignInit_ex(ctx, &pctx, eddsa ? NULL : "SHA256", NULL, NULL, key, NULL) != 1)
		tk_die("DigestSignInit");
	if (strcmp(alg, "PS256") == 0 &&
	    (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
	    EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1))
		tk_die("PSS");
	if (EVP_DigestSign(ctx, sig, &siglen, (unsigned char *)s, n) != 1)
		tk_die("DigestSign");
	EVP_MD_CTX_free(ctx);
	if (strcmp(alg, "ES256") == 0 && !der) {
		if ((es = d2i_ECDSA_SIG(NULL, &p, (long)siglen)) == NULL)
			tk_die("d2i_ECDSA_SIG");
		BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32);
		BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32);
		ECDSA_SIG_free(es);
		memcpy(sig, raw, 64);
		siglen = 64;
	}
	s[n++] = '.';
	n += base64url_encode(s + n, sig, siglen);
	s[n] = '\0';
	return s;
}

char *
tk_token(EVP_PKEY *key, const char *alg, const char *header, const char *payload)
{
	return tk_sign(key, alg, header, payload, 0);
}

char *
tk_token_der(EVP_PKEY *key, const char *header, const char *payload)
{
	return tk_sign(key, "ES256", header, payload, 1);
}

char *
tk_token_hs256(const void *secret, size_t len, const char *header, const char *payload)
{
	unsigned char mac[32];
	unsigned maclen = sizeof(mac);
	size_t n;
	char *s = tk_input(header, payload, &n);

	if (HMAC(EVP_sha256(), secret, (int)len, (unsigned char *)s, n, mac, &maclen) == NULL)
		tk_die("HMAC");
	s[n++] = '.';
	n += base64url_encode(s + n, mac, maclen);
	s[n] = '\0';
	return s;
}
