/* Keys, JWKs and signed tokens made at test time with OpenSSL, for the JWK and JWT tests. */
#ifndef JG_TEST_JOSE_KEYS_H
#define JG_TEST_JOSE_KEYS_H

#include <stddef.h>

#include <openssl/evp.h>

EVP_PKEY *tk_rsa(int bits);
EVP_PKEY *tk_ec(const char *group);     /* "P-256", "P-384" */
EVP_PKEY *tk_ed25519(void);

/* The public key as a JWK object; extra (may be NULL) is spliced in as more members, such as
 * "\"alg\":\"RS256\"".  malloc'd. */
char *tk_jwk(EVP_PKEY *key, const char *kid, const char *extra);
/* The public key as PEM (SubjectPublicKeyInfo).  malloc'd. */
char *tk_pem(EVP_PKEY *key, size_t *len);

/* A compact JWS of header and payload (JSON texts) signed with key by alg ("RS256", "PS256",
 * "ES256", "EdDSA"); ES256 signatures are raw r||s unless der is set.  malloc'd. */
char *tk_token(EVP_PKEY *key, const char *alg, const char *header, const char *payload);
char *tk_token_der(EVP_PKEY *key, const char *header, const char *payload);
/* The same signed with HMAC-SHA256 over secret. */
char *tk_token_hs256(const void *secret, size_t len, const char *header, const char *payload);

#endif
