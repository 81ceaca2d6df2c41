/*
 * Micro-benchmark of the authentication and rate limit pieces, one thread: a token verified
 * without the cache (RS256, PS256, ES256, EdDSA), the same token through the cache (SHA-256,
 * lookup, claims checks), an API key lookup among 100 keys, and a per-daemon rate limit
 * decision.  Prints ns per operation.
 *
 *   micro_auth [N]        N iterations of the cheap rows (the signature rows run N / 100)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>

#include "api_keys.h"
#include "jose_keys.h"
#include "jwk.h"
#include "jwt.h"
#include "jwt_cache.h"
#include "ratelimit.h"

static const char claims[] = "{\"iss\":\"https://idp.example/\",\"aud\":\"api\","
    "\"sub\":\"user-1234567890\",\"exp\":4000000000,\"iat\":1700000000,"
    "\"scope\":\"orders:read orders:write profile\",\"email\":\"someone@example.com\"}";
static const char *const issuers[] = { "https://idp.example/" };
static const char *const audiences[] = { "api" };
static const char *const scopes[] = { "orders:read" };

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000, i, slow;
	EVP_PKEY *rsa = tk_rsa(2048), *ec = tk_ec("P-256"), *ed = tk_ed25519();
	char *j1 = tk_jwk(rsa, "rsa", NULL), *j2 = tk_jwk(ec, "ec", NULL), *j3 = tk_jwk(ed, "ed", NULL);
	char doc[8192], err[128], keytext[100 * 90], name[32], hex[65];
	struct jwk_set *keys;
	struct jwt_policy p = {
		.issuers = issuers, .n_issuers = 1, .audiences = audiences, .n_audiences = 1,
		.scopes = scopes, .n_scopes = 1, .leeway = 30, .now = 1700000000,
	};
	static const char *const algs[] = { "RS256", "PS256", "ES256", "EdDSA" };
	EVP_PKEY *signers[4];
	const char *kids[4] = { "rsa", "rsa", "ec", "ed" };
	struct jwt_claims *c;
	struct jwt_cache *cache = jwt_cache_new(10000, 3600);
	struct jwt_cache_key ck;
	struct api_keys *ak;
	struct ratelimit *rl = ratelimit_new(100000);
	struct ratelimit_rule rule;
	struct ratelimit_answer ans;
	unsigned char h[32];
	char *tok, hdr[64];
	double t0;
	size_t kt = 0;
	int k, b, ok = 0;

	signers[0] = signers[1] = rsa;
	signers[2] = ec;
	signers[3] = ed;
	snprintf(doc, sizeof(doc), "{\"keys\":[%s,%s,%s]}", j1, j2, j3);
	if ((keys = jwk_set_parse(doc, strlen(doc), NULL, NULL, err, sizeof(err))) == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	slow = n / 100 > 0 ? n / 100 : 1;
	printf("%-34s %12s\n", "operation", "ns/op");
	for (k = 0; k < 4; k++) {
		snprintf(hdr, sizeof(hdr), "{\"alg\":\"%s\",\"kid\":\"%s\"}", algs[k], kids[k]);
		tok = tk_token(signers[k], algs[k], hdr, claims);
		t0 = now_ns();
		for (i = 0; i < slow; i++) {
			ok += jwt_verify(tok, strlen(tok), keys, &p, &c) == JWT_OK;
			jwt_claims_unref(c);
		}
		printf("verify %-5s, uncached (%4zu B)    %12.0f\n", algs[k], strlen(tok),
		    (now_ns() - t0) / (double)slow);
		if (k == 0) {
			jwt_verify_signature(tok, strlen(tok), keys, &p, &c);
			jwt_cache_key(tok, strlen(tok), &ck);
			jwt_cache_put(cache, &ck, c, p.now);
			jwt_claims_unref(c);
			t0 = now_ns();
			for (i = 0; i < n; i++) {
				jwt_cache_key(tok, strlen(tok), &ck);
				c = jwt_cache_get(cache, &ck, p.now);
				ok += jwt_check_claims(c, &p) == JWT_OK;
				jwt_claims_unref(c);
			}
			printf("verify RS256, cached               %12.0f\n",
			    (now_ns() - t0) / (double)n);
		}
		free(tok);
	}
	for (i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "key-%ld", i);
		SHA256((unsigned char *)name, strlen(name), h);
		for (b = 0; b < 32; b++)
			sprintf(hex + 2 * b, "%02x", h[b]);
		kt += (size_t)snprintf(keytext + kt, sizeof(keytext) - kt, "client%ld %s\n", i, hex);
	}
	if ((ak = api_keys_parse(keytext, kt, "bench", err, sizeof(err))) == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	t0 = now_ns();
	for (i = 0; i < n; i++)
		ok += api_keys_lookup(ak, "key-57", 6) != NULL;
	printf("API key lookup, 100 keys           %12.0f\n", (now_ns() - t0) / (double)n);
	ratelimit_rule_init(&rule, 1, 1000000, 1000000000ULL, 1000000);
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		ratelimit_take(rl, &rule, "user-1234567890", 15, ratelimit_now(), &ans);
		ok += ans.admitted;
	}
	printf("rate limit decision, one key       %12.0f\n", (now_ns() - t0) / (double)n);
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "user-%ld", i % 50000);
		ratelimit_take(rl, &rule, name, strlen(name), ratelimit_now(), &ans);
		ok += ans.admitted;
	}
	printf("rate limit decision, 50,000 keys   %12.0f\n", (now_ns() - t0) / (double)n);
	fprintf(stderr, "(%d ok)\n", ok);
	return 0;
}
