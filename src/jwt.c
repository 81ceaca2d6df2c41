#include "jwt.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/rsa.h>

#include "base64url.h"

#define JWT_HEADER_TOKENS 64
#define JWT_CLAIMS_TOKENS 2048
#define JWT_MAX_SIG (JWK_RSA_MAX_BITS / 8)
#define JWT_MAX_KID 256
#define JWT_MAX_SEGMENT 256             /* one segment of a claim path */

static const char *const jwt_outcome_names[] = {
#define JWT_OUTCOME_NAME(id, name) name,
	JWT_OUTCOMES(JWT_OUTCOME_NAME)
#undef JWT_OUTCOME_NAME
};

const char *
jwt_outcome_name(enum jwt_outcome outcome)
{
	return (unsigned)outcome < JWT_OUTCOME_N ? jwt_outcome_names[outcome] : "?";
}

/* ES256 signatures are r||s, 32 bytes each (RFC 7518 section 3.4); OpenSSL verifies DER. */
static int
jwt_es256_der(const unsigned char *sig, unsigned char *der, size_t cap)
{
	ECDSA_SIG *es;
	BIGNUM *r, *s;
	unsigned char *p = der;
	int n;

	if ((es = ECDSA_SIG_new()) == NULL)
		return -1;
	r = BN_bin2bn(sig, 32, NULL);
	s = BN_bin2bn(sig + 32, 32, NULL);
	if (r == NULL || s == NULL || ECDSA_SIG_set0(es, r, s) != 1) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return -1;
	}
	n = i2d_ECDSA_SIG(es, NULL);
	if (n <= 0 || (size_t)n > cap)
		n = -1;
	else
		n = i2d_ECDSA_SIG(es, &p);
	ECDSA_SIG_free(es);
	return n;
}

/* 1 when sig is alg's signature of msg by key. */
static int
jwt_sig_ok(const struct jwk_key *key, enum jwk_alg alg, const char *msg, size_t mlen,
    const unsigned char *sig, size_t slen)
{
	EVP_MD_CTX *ctx;
	EVP_PKEY_CTX *pctx = NULL;
	unsigned char der[80];
	int n, ok = 0;

	switch (alg) {
	case JWK_ALG_RS256:
	case JWK_ALG_PS256:
		if (slen != (size_t)EVP_PKEY_get_size(key->pkey))
			return 0;
		break;
	case JWK_ALG_ES256:
		if (slen != 64 || (n = jwt_es256_der(sig, der, sizeof(der))) < 0)
			return 0;
		sig = der;
		slen = (size_t)n;
		break;
	case JWK_ALG_EDDSA:
		if (slen != 64)
			return 0;
		break;
	default:
		return 0;
	}
	if ((ctx = EVP_MD_CTX_new()) == NULL)
		return 0;
	if (EVP_DigestVerifyInit_ex(ctx, &pctx, alg == JWK_ALG_EDDSA ? NULL : "SHA256", NULL,
	    NULL, key->pkey, NULL) != 1)
		goto out;
	if (alg == JWK_ALG_PS256 &&
	    (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
	    EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1))
		goto out;
	if (alg == JWK_ALG_RS256 && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1)
		goto out;
	ok = EVP_DigestVerify(ctx, sig, slen, (const unsigned char *)msg, mlen) == 1;
out:
	EVP_MD_CTX_free(ctx);
	return ok;
}

/* Decode a base64url segment into a fresh NUL-terminated buffer. */
static char *
jwt_b64_dup(const char *s, size_t len, size_t *outlen)
{
	char *buf;
	ssize_t n;

	if ((buf = malloc(BASE64URL_DECODED_MAX(len) + 1)) == NULL)
		return NULL;
	if ((n = base64url_decode((unsigned char *)buf, BASE64URL_DECODED_MAX(len), s, len)) < 0) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*outlen = (size_t)n;
	return buf;
}

/* The header's alg and kid (kidlen -1 when it has none). */
static enum jwt_outcome
jwt_header(const char *s, size_t len, int *alg, char *kid, int *kidlen)
{
	struct jdoc d;
	char *json, name[16];
	size_t jlen;
	int a, k, n;
	enum jwt_outcome r = JWT_MALFORMED;

	if ((json = jwt_b64_dup(s, len, &jlen)) == NULL)
		return JWT_MALFORMED;
	if (jdoc_parse(&d, json, jlen, JWT_HEADER_TOKENS) != 0 || !jdoc_keys_unique(&d, 0)) {
		jdoc_free(&d);
		free(json);
		return JWT_MALFORMED;
	}
	*kidlen = -1;
	/* crit names extensions that must be understood: none are. */
	if ((a = jdoc_member(&d, 0, "alg")) < 0 || jdoc_member(&d, 0, "crit") != -1 ||
	    (k = jdoc_member(&d, 0, "kid")) == -2)
		goto out;
	if (k >= 0 && (*kidlen = jdoc_str(&d, k, kid, JWT_MAX_KID)) < 0)
		goto out;
	if ((n = jdoc_str(&d, a, name, sizeof(name))) < 0) {
		r = d.toks[a].type == JDOC_STRING ? JWT_ALG_NOT_ALLOWED : JWT_MALFORMED;
		goto out;
	}
	/* none, HS256 and the rest are no algorithm of ours. */
	r = (*alg = jwk_alg_parse(name, (size_t)n)) < 0 ? JWT_ALG_NOT_ALLOWED : JWT_OK;
out:
	jdoc_free(&d);
	free(json);
	return r;
}

static enum jwt_outcome
jwt_claims_new(const char *s, size_t len, enum jwk_alg alg, struct jwt_claims **out)
{
	struct jwt_claims *c;
	int i;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return JWT_MALFORMED;
	c->refs = 1;
	c->alg = alg;
	if ((c->json = jwt_b64_dup(s, len, &c->len)) == NULL ||
	    jdoc_parse(&c->doc, c->json, c->len, JWT_CLAIMS_TOKENS) != 0 ||
	    !jdoc_keys_unique(&c->doc, 0))
		goto bad;
	if ((i = jdoc_member(&c->doc, 0, "exp")) == -2 || (i >= 0 &&
	    jdoc_int(&c->doc, i, &c->exp) != 0))
		goto bad;
	c->has_exp = i >= 0;
	if ((i = jdoc_member(&c->doc, 0, "nbf")) == -2 || (i >= 0 &&
	    jdoc_int(&c->doc, i, &c->nbf) != 0))
		goto bad;
	c->has_nbf = i >= 0;
	*out = c;
	return JWT_OK;
bad:
	jwt_claims_unref(c);
	return JWT_MALFORMED;
}

enum jwt_outcome
jwt_verify_signature(const char *token, size_t len, const struct jwk_set *keys,
    const struct jwt_policy *policy, struct jwt_claims **out)
{
	const char *dot1, *dot2;
	char kid[JWT_MAX_KID];
	unsigned char sig[JWT_MAX_SIG];
	unsigned allowed = policy->algs != 0 ? policy->algs : JWK_ALGS_ALL;
	int alg, kidlen, found = 0;
	size_t i, with_kid = 0, with_alg = 0, siglen;
	ssize_t n;
	const struct jwk_key *key;
	enum jwt_outcome r;

	*out = NULL;
	if (len > JWT_MAX_TOKEN)
		return JWT_TOO_LARGE;
	/* Exactly three segments: a JWE (five) or anything else is not ours. */
	if ((dot1 = memchr(token, '.', len)) == NULL ||
	    (dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token))) == NULL ||
	    memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)) != NULL)
		return JWT_MALFORMED;
	if ((r = jwt_header(token, (size_t)(dot1 - token), &alg, kid, &kidlen)) != JWT_OK)
		return r;
	if ((allowed & JWK_ALG_BIT(alg)) == 0)
		return JWT_ALG_NOT_ALLOWED;
	siglen = len - (size_t)(dot2 + 1 - token);
	if ((n = base64url_decode(sig, sizeof(sig), dot2 + 1, siglen)) <= 0)
		return JWT_MALFORMED;
	for (i = 0; keys != NULL && i < keys->n && !found; i++) {
		key = &keys->keys[i];
		if (kidlen >= 0) {
			if (key->kid == NULL || strlen(key->kid) != (size_t)kidlen ||
			    memcmp(key->kid, kid, (size_t)kidlen) != 0)
				continue;
			with_kid++;
		}
		if ((key->algs & JWK_ALG_BIT(alg)) == 0)
			continue;
		with_alg++;
		found = jwt_sig_ok(key, (enum jwk_alg)alg, token, (size_t)(dot2 - token), sig,
		    (size_t)n);
	}
	if (!found) {
		if (kidlen >= 0 && with_kid == 0)
			return JWT_UNKNOWN_KID;
		if (with_alg == 0)
			return kidlen >= 0 ? JWT_ALG_NOT_ALLOWED : JWT_UNKNOWN_KID;
		return JWT_BAD_SIGNATURE;
	}
	return jwt_claims_new(dot1 + 1, (size_t)(dot2 - dot1 - 1), (enum jwk_alg)alg, out);
}

/* 1 when the string at i equals one of list. */
static int
jwt_str_in(const struct jdoc *d, int i, const char *const *list, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (jdoc_str_eq(d, i, list[k], strlen(list[k])))
			return 1;
	return 0;
}

/* 1 when the space-separated string at i holds scope. */
static int
jwt_scope_in_string(const struct jdoc *d, int i, const char *scope)
{
	size_t cap = (size_t)(d->toks[i].end - d->toks[i].start), slen = strlen(scope), k, w;
	char *buf;
	int n, hit = 0;

	if ((buf = malloc(cap + 1)) == NULL || (n = jdoc_str(d, i, buf, cap)) < 0) {
		free(buf);
		return 0;
	}
	for (k = 0; k < (size_t)n && !hit; k = w + 1) {
		for (w = k; w < (size_t)n && buf[w] != ' '; w++)
			;
		hit = w - k == slen && memcmp(buf + k, scope, slen) == 0;
	}
	free(buf);
	return hit;
}

static int
jwt_has_scope(const struct jdoc *d, int scope, int scp, const char *want)
{
	size_t k;
	int e;

	if (scope >= 0 && d->toks[scope].type == JDOC_STRING && jwt_scope_in_string(d, scope, want))
		return 1;
	if (scp >= 0 && d->toks[scp].type == JDOC_STRING && jwt_scope_in_string(d, scp, want))
		return 1;
	if (scp >= 0 && d->toks[scp].type == JDOC_ARRAY)
		for (k = 0; (e = jdoc_element(d, scp, k)) >= 0; k++)
			if (jdoc_str_eq(d, e, want, strlen(want)))
				return 1;
	return 0;
}

enum jwt_outcome
jwt_check_claims(const struct jwt_claims *c, const struct jwt_policy *policy)
{
	const struct jdoc *d = &c->doc;
	int i, e, scope, scp;
	size_t k;

	if (c->has_exp && policy->now >= c->exp + policy->leeway)
		return JWT_EXPIRED;
	if (c->has_nbf && policy->now + policy->leeway < c->nbf)
		return JWT_NOT_YET_VALID;
	if (policy->n_issuers > 0 && ((i = jdoc_member(d, 0, "iss")) < 0 ||
	    !jwt_str_in(d, i, policy->issuers, policy->n_issuers)))
		return JWT_WRONG_ISSUER;
	if (policy->n_audiences > 0) {
		if ((i = jdoc_member(d, 0, "aud")) < 0)
			return JWT_WRONG_AUDIENCE;
		if (d->toks[i].type == JDOC_ARRAY) {
			for (k = 0; (e = jdoc_element(d, i, k)) >= 0; k++)
				if (jwt_str_in(d, e, policy->audiences, policy->n_audiences))
					break;
			if (e < 0)
				return JWT_WRONG_AUDIENCE;
		} else if (!jwt_str_in(d, i, policy->audiences, policy->n_audiences)) {
			return JWT_WRONG_AUDIENCE;
		}
	}
	if (policy->n_scopes > 0) {
		scope = jdoc_member(d, 0, "scope");
		scp = jdoc_member(d, 0, "scp");
		for (k = 0; k < policy->n_scopes; k++)
			if (!jwt_has_scope(d, scope, scp, policy->scopes[k]))
				return JWT_INSUFFICIENT_SCOPE;
	}
	return JWT_OK;
}

enum jwt_outcome
jwt_verify(const char *token, size_t len, const struct jwk_set *keys,
    const struct jwt_policy *policy, struct jwt_claims **out)
{
	enum jwt_outcome r;

	if ((r = jwt_verify_signature(token, len, keys, policy, out)) != JWT_OK)
		return r;
	if ((r = jwt_check_claims(*out, policy)) != JWT_OK) {
		jwt_claims_unref(*out);
		*out = NULL;
	}
	return r;
}

struct jwt_claims *
jwt_claims_ref(struct jwt_claims *c)
{
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void
jwt_claims_unref(struct jwt_claims *c)
{
	if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	jdoc_free(&c->doc);
	free(c->json);
	free(c);
}

/* The token at a dotted path, or -1. */
static int
jwt_claim_tok(const struct jwt_claims *c, const char *path)
{
	const struct jdoc *d = &c->doc;
	char seg[JWT_MAX_SEGMENT];
	const char *p = path, *q;
	size_t n, k;
	int i = 0;

	if (d->ntoks == 0)
		return -1;
	for (;;) {
		q = strchr(p, '.');
		n = q != NULL ? (size_t)(q - p) : strlen(p);
		if (n == 0 || n >= sizeof(seg))
			return -1;
		memcpy(seg, p, n);
		seg[n] = '\0';
		if (d->toks[i].type == JDOC_OBJECT) {
			i = jdoc_member(d, i, seg);
		} else if (d->toks[i].type == JDOC_ARRAY && strspn(seg, "0123456789") == n &&
		    n < 10) {
			k = (size_t)strtoul(seg, NULL, 10);
			i = jdoc_element(d, i, k);
		} else {
			return -1;
		}
		if (i < 0)
			return -1;
		if (q == NULL)
			return i;
		p = q + 1;
	}
}

enum jwt_claim_type
jwt_claim(const struct jwt_claims *c, const char *path, const char **val, size_t *len)
{
	const struct jdoc_tok *t;
	int i;

	if ((i = jwt_claim_tok(c, path)) < 0)
		return JWT_CLAIM_MISSING;
	t = &c->doc.toks[i];
	*val = c->json + t->start;
	*len = (size_t)(t->end - t->start);
	switch (t->type) {
	case JDOC_STRING:
		return JWT_CLAIM_STRING;
	case JDOC_OBJECT:
		return JWT_CLAIM_OBJECT;
	case JDOC_ARRAY:
		return JWT_CLAIM_ARRAY;
	case JDOC_PRIMITIVE:
		break;
	}
	return **val == 't' || **val == 'f' ? JWT_CLAIM_BOOL : **val == 'n' ? JWT_CLAIM_NULL :
	    JWT_CLAIM_NUMBER;
}

int
jwt_claim_str(const struct jwt_claims *c, const char *path, char *dst, size_t cap)
{
	int i;

	if ((i = jwt_claim_tok(c, path)) < 0)
		return -1;
	return jdoc_str(&c->doc, i, dst, cap);
}
