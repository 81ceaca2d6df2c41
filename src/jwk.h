/*
 * A JSON Web Key Set (RFC 7517) read into OpenSSL public keys.  Each key fixes the signature
 * algorithms it may verify: its `alg` when it has one, else by its type (RSA: RS256 and
 * PS256; EC P-256: ES256; OKP Ed25519: EdDSA).  A token never chooses the algorithm.  Keys
 * that cannot be used (a symmetric key, RSA under 2048 bits, another curve, `use` other than
 * sig, bad members) are skipped with a reason; only a document that is not a JWKS fails.
 */
#ifndef JG_JWK_H
#define JG_JWK_H

#include <stddef.h>

#include <openssl/evp.h>

/* The signature algorithms jsongate verifies: its enum, its JOSE name. */
#define JWK_ALGS(X) \
	X(RS256, "RS256") \
	X(PS256, "PS256") \
	X(ES256, "ES256") \
	X(EDDSA, "EdDSA")

enum jwk_alg {
#define JWK_ALG_ENUM(id, name) JWK_ALG_##id,
	JWK_ALGS(JWK_ALG_ENUM)
#undef JWK_ALG_ENUM
	JWK_ALG_N
};

#define JWK_ALG_BIT(alg) (1u << (alg))
#define JWK_ALGS_ALL ((1u << JWK_ALG_N) - 1)

enum jwk_kty { JWK_KTY_RSA, JWK_KTY_EC_P256, JWK_KTY_ED25519 };

#define JWK_MAX_KEYS 64                 /* keys kept from one document; the rest are skipped */
#define JWK_MAX_DOC (256 * 1024)        /* larger documents are refused */
#define JWK_RSA_MIN_BITS 2048
#define JWK_RSA_MAX_BITS 8192

struct jwk_key {
	char *kid;                      /* NULL when the key has none */
	enum jwk_kty kty;
	unsigned algs;                  /* JWK_ALG_BIT()s this key may verify */
	int bits;
	EVP_PKEY *pkey;
};

/* Immutable once parsed, so workers share one; reference counted for a refresh that
 * replaces the set while tokens are being checked against the old one. */
struct jwk_set {
	struct jwk_key *keys;
	size_t n;
	size_t skipped;                 /* keys of the document not kept */
	int refs;
};

/* Called for each key skipped: its index in "keys", its kid (or NULL), why. */
typedef void (*jwk_skip_cb)(void *arg, size_t index, const char *kid, const char *reason);

/*
 * Read a JWKS document ({"keys": [...]}).  Returns a set holding one reference (possibly with
 * no keys), or NULL with err set when the document is not a JWKS.
 */
struct jwk_set *jwk_set_parse(const char *json, size_t len, jwk_skip_cb skip, void *arg,
    char *err, size_t errlen);
struct jwk_set *jwk_set_ref(struct jwk_set *set);
void jwk_set_unref(struct jwk_set *set);

/* The JOSE name of alg, and the algorithm named s[0..len) (-1 for any other: none, HS256,
 * RS512...). */
const char *jwk_alg_name(enum jwk_alg alg);
int jwk_alg_parse(const char *s, size_t len);

#endif
