#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64url.h"
#include "jdoc.h"
#include "jose_keys.h"
#include "jwk.h"

static EVP_PKEY *rsa2048, *rsa1024, *ec256, *ec384, *ed;

/* The reasons keys were skipped, one line each. */
static char skipped[4096];

static void
skip_cb(void *arg, size_t index, const char *kid, const char *reason)
{
	size_t n = strlen(skipped);

	(void)arg;
	snprintf(skipped + n, sizeof(skipped) - n, "%zu %s: %s\n", index,
	    kid != NULL ? kid : "-", reason);
}

/* Parse {"keys":[one]} and return the set (the reasons are in skipped). */
static struct jwk_set *
parse_one(const char *jwk)
{
	char doc[8192], err[128];
	struct jwk_set *set;

	snprintf(doc, sizeof(doc), "{\"keys\":[%s]}", jwk);
	skipped[0] = '\0';
	set = jwk_set_parse(doc, strlen(doc), skip_cb, NULL, err, sizeof(err));
	ck_assert_msg(set != NULL, "%s", err);
	return set;
}

static void
assert_skipped(const char *jwk, const char *why)
{
	struct jwk_set *set = parse_one(jwk);

	ck_assert_uint_eq(set->n, 0);
	ck_assert_uint_eq(set->skipped, 1);
	ck_assert_str_eq(skipped, why);
	jwk_set_unref(set);
}

START_TEST(test_base64url_vectors)
{
	/* RFC 4648 section 10, without the padding. */
	static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	static const char *const enc[] = { "", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy" };
	unsigned char out[16];
	char e[16];
	size_t i;

	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		ck_assert_int_eq(base64url_decode(out, sizeof(out), enc[i], strlen(enc[i])),
		    (ssize_t)strlen(plain[i]));
		ck_assert_int_eq(memcmp(out, plain[i], strlen(plain[i])), 0);
		ck_assert_uint_eq(base64url_encode(e, (const unsigned char *)plain[i],
		    strlen(plain[i])), strlen(enc[i]));
		ck_assert_int_eq(memcmp(e, enc[i], strlen(enc[i])), 0);
	}
	/* The URL alphabet: 0xfb 0xff -> "-_8". */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "-_8", 3), 2);
	ck_assert_uint_eq(out[0], 0xfb);
	ck_assert_uint_eq(out[1], 0xff);
}
END_TEST

START_TEST(test_base64url_strict)
{
	unsigned char out[16];

	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zg==", 4), -1);     /* padding */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zm9v+/8", 7), -1);  /* base64 */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zm9vY", 5), -1);    /* 4k+1 */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zh", 2), -1);       /* bits left */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zm9", 3), -1);      /* bits left */
	ck_assert_int_eq(base64url_decode(out, sizeof(out), "Zm 9v", 5), -1);    /* space */
	ck_assert_int_eq(base64url_decode(out, 2, "Zm9v", 4), -1);               /* no room */
	ck_assert_int_eq(base64url_decode(out, 3, "Zm9v", 4), 3);
}
END_TEST

START_TEST(test_jdoc)
{
	static const char json[] = "{\"a\":{\"b\":[1,\"x\\u00e9\\ud83d\\ude00\"]},\"a2\":2,"
	    "\"d\":1,\"d\":2,\"n\":1.7e9,\"s\":\"1\"}";
	struct jdoc d;
	char buf[16];
	int64_t v;
	int a, b, e;

	ck_assert_int_eq(jdoc_parse(&d, json, strlen(json), 64), 0);
	ck_assert_int_ge(a = jdoc_member(&d, 0, "a"), 0);
	ck_assert_int_ge(b = jdoc_member(&d, a, "b"), 0);
	ck_assert_int_ge(e = jdoc_element(&d, b, 1), 0);
	ck_assert_int_eq(jdoc_str(&d, e, buf, sizeof(buf)), 7);
	ck_assert_int_eq(memcmp(buf, "x\xc3\xa9\xf0\x9f\x98\x80", 7), 0);
	ck_assert_int_eq(jdoc_element(&d, b, 2), -1);
	ck_assert_int_eq(jdoc_member(&d, 0, "d"), -2);
	ck_assert_int_eq(jdoc_member(&d, 0, "zz"), -1);
	ck_assert_int_eq(jdoc_int(&d, jdoc_member(&d, 0, "a2"), &v), 0);
	ck_assert_int_eq(v, 2);
	ck_assert_int_eq(jdoc_int(&d, jdoc_member(&d, 0, "n"), &v), 0);
	ck_assert_int_eq(v, 1700000000);
	ck_assert_int_eq(jdoc_int(&d, jdoc_member(&d, 0, "s"), &v), -1);
	ck_assert_int_eq(jdoc_keys_unique(&d, 0), 0);
	ck_assert_int_eq(jdoc_keys_unique(&d, a), 1);
	jdoc_free(&d);
	ck_assert_int_eq(jdoc_parse(&d, "[1]", 3, 64), -1);
	ck_assert_int_eq(jdoc_parse(&d, "{\"a\":01}", 8, 64), -1);
	ck_assert_int_eq(jdoc_parse(&d, "{\"a\":[1,2,3]}", 13, 4), -1);
}
END_TEST

START_TEST(test_three_types)
{
	char *r = tk_jwk(rsa2048, "r1", NULL), *e = tk_jwk(ec256, "e1", NULL),
	    *o = tk_jwk(ed, "d1", NULL), *p = tk_jwk(rsa2048, "r2", "\"alg\":\"PS256\",\"use\":\"sig\"");
	char doc[16384], err[128];
	struct jwk_set *set;

	snprintf(doc, sizeof(doc), "{\"keys\":[%s,%s,%s,%s]}", r, e, o, p);
	set = jwk_set_parse(doc, strlen(doc), NULL, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(set);
	ck_assert_uint_eq(set->n, 4);
	ck_assert_uint_eq(set->skipped, 0);
	ck_assert_str_eq(set->keys[0].kid, "r1");
	ck_assert_int_eq(set->keys[0].kty, JWK_KTY_RSA);
	ck_assert_int_eq(set->keys[0].bits, 2048);
	ck_assert_uint_eq(set->keys[0].algs, JWK_ALG_BIT(JWK_ALG_RS256) | JWK_ALG_BIT(JWK_ALG_PS256));
	ck_assert_str_eq(set->keys[1].kid, "e1");
	ck_assert_int_eq(set->keys[1].kty, JWK_KTY_EC_P256);
	ck_assert_uint_eq(set->keys[1].algs, JWK_ALG_BIT(JWK_ALG_ES256));
	ck_assert_str_eq(set->keys[2].kid, "d1");
	ck_assert_int_eq(set->keys[2].kty, JWK_KTY_ED25519);
	ck_assert_uint_eq(set->keys[2].algs, JWK_ALG_BIT(JWK_ALG_EDDSA));
	ck_assert_uint_eq(set->keys[3].algs, JWK_ALG_BIT(JWK_ALG_PS256));
	ck_assert_int_eq(EVP_PKEY_eq(set->keys[0].pkey, rsa2048), 1);
	ck_assert_int_eq(EVP_PKEY_eq(set->keys[1].pkey, ec256), 1);
	ck_assert_int_eq(EVP_PKEY_eq(set->keys[2].pkey, ed), 1);
	jwk_set_ref(set);
	jwk_set_unref(set);
	ck_assert_ptr_nonnull(set->keys[0].pkey);       /* still held */
	jwk_set_unref(set);
	free(r);
	free(e);
	free(o);
	free(p);
}
END_TEST

/* A coordinate written without its leading zero byte (31 bytes): the point as meant. */
START_TEST(test_ec_short_coordinate)
{
	static const char *x31 = "aE9uQkuFfeAO8M5JIts7S9xBzz7nx5-43nntIihN-g";
	static const char *x32 = "AGhPbkJLhX3gDvDOSSLbO0vcQc8-58efuN557SIoTfo";
	static const char *y = "In0Ww0NvXst0haND7Q7veL3fesYSZ4bNvBe839kSPOo";
	char jwk[256];
	struct jwk_set *a, *b;

	snprintf(jwk, sizeof(jwk), "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}",
	    x31, y);
	a = parse_one(jwk);
	snprintf(jwk, sizeof(jwk), "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}",
	    x32, y);
	b = parse_one(jwk);
	ck_assert_uint_eq(a->n, 1);
	ck_assert_uint_eq(b->n, 1);
	ck_assert_int_eq(EVP_PKEY_eq(a->keys[0].pkey, b->keys[0].pkey), 1);
	jwk_set_unref(a);
	jwk_set_unref(b);
	/* longer than 32 bytes (35 here): no P-256 coordinate */
	snprintf(jwk, sizeof(jwk), "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AAAA%s\",\"y\":\"%s\"}",
	    x32, y);
	assert_skipped(jwk, "0 -: EC key without a valid x and y\n");
}
END_TEST

START_TEST(test_skipped_with_reason)
{
	char *k;

	k = tk_jwk(rsa1024, "small", NULL);
	assert_skipped(k, "0 small: RSA key under 2048 bits\n");
	free(k);
	k = tk_jwk(ec384, "p384", NULL);
	assert_skipped(k, "0 p384: EC key on a curve other than P-256\n");
	free(k);
	k = tk_jwk(ec256, "ec-rs", "\"alg\":\"RS256\"");
	assert_skipped(k, "0 ec-rs: alg does not fit the key's type\n");
	free(k);
	k = tk_jwk(rsa2048, "hs", "\"alg\":\"HS256\"");
	assert_skipped(k, "0 hs: alg not one of RS256, PS256, ES256, EdDSA\n");
	free(k);
	k = tk_jwk(rsa2048, "enc", "\"use\":\"enc\"");
	assert_skipped(k, "0 enc: use is not sig\n");
	free(k);
	k = tk_jwk(ed, "ops", "\"key_ops\":[\"encrypt\"]");
	assert_skipped(k, "0 ops: key_ops without verify\n");
	free(k);
	assert_skipped("{\"kty\":\"oct\",\"kid\":\"s\",\"k\":\"c2VjcmV0\"}",
	    "0 s: symmetric keys (kty oct) are never accepted\n");
	assert_skipped("{\"kty\":\"XYZ\"}", "0 -: kty not RSA, EC or OKP\n");
	assert_skipped("{\"kid\":\"none\"}", "0 none: no kty\n");
	assert_skipped("[1]", "0 -: not an object\n");
	assert_skipped("{\"kty\":\"RSA\",\"kid\":\"pad\",\"n\":\"AQAB==\",\"e\":\"AQAB\"}",
	    "0 pad: RSA key without a valid n (or over 8192 bits)\n");
	assert_skipped("{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"short\",\"x\":\"AQAB\"}",
	    "0 short: Ed25519 key without a valid x\n");
	assert_skipped("{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"off\","
	    "\"x\":\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
	    "\"y\":\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}",
	    "0 off: EC key not a point on P-256\n");
}
END_TEST

START_TEST(test_skip_keeps_the_rest)
{
	char *small = tk_jwk(rsa1024, "small", NULL), *good = tk_jwk(ed, "good", NULL);
	char doc[8192], err[128];
	struct jwk_set *set;

	snprintf(doc, sizeof(doc), "{\"keys\":[%s,{\"kty\":\"oct\"},%s]}", small, good);
	skipped[0] = '\0';
	set = jwk_set_parse(doc, strlen(doc), skip_cb, NULL, err, sizeof(err));
	ck_assert_ptr_nonnull(set);
	ck_assert_uint_eq(set->n, 1);
	ck_assert_uint_eq(set->skipped, 2);
	ck_assert_str_eq(set->keys[0].kid, "good");
	ck_assert_str_eq(skipped, "0 small: RSA key under 2048 bits\n"
	    "1 -: symmetric keys (kty oct) are never accepted\n");
	jwk_set_unref(set);
	free(small);
	free(good);
}
END_TEST

START_TEST(test_not_a_jwks)
{
	static const struct { const char *doc, *err; } cases[] = {
		{ "[]", "JWKS not a JSON object (or over 8192 tokens)" },
		{ "{\"keys\":[}", "JWKS not a JSON object (or over 8192 tokens)" },
		{ "{}", "JWKS without a \"keys\" array" },
		{ "{\"keys\":{}}", "JWKS without a \"keys\" array" },
		{ "{\"keys\":[],\"keys\":[]}", "JWKS without a \"keys\" array" },
	};
	char err[128];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_ptr_null(jwk_set_parse(cases[i].doc, strlen(cases[i].doc), NULL, NULL,
		    err, sizeof(err)));
		ck_assert_str_eq(err, cases[i].err);
	}
}
END_TEST

START_TEST(test_alg_names)
{
	ck_assert_int_eq(jwk_alg_parse("RS256", 5), JWK_ALG_RS256);
	ck_assert_int_eq(jwk_alg_parse("EdDSA", 5), JWK_ALG_EDDSA);
	ck_assert_int_eq(jwk_alg_parse("none", 4), -1);
	ck_assert_int_eq(jwk_alg_parse("HS256", 5), -1);
	ck_assert_int_eq(jwk_alg_parse("RS25", 4), -1);
	ck_assert_str_eq(jwk_alg_name(JWK_ALG_PS256), "PS256");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("jwk");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	rsa2048 = tk_rsa(2048);
	rsa1024 = tk_rsa(1024);
	ec256 = tk_ec("P-256");
	ec384 = tk_ec("P-384");
	ed = tk_ed25519();
	tcase_add_test(tc, test_base64url_vectors);
	tcase_add_test(tc, test_base64url_strict);
	tcase_add_test(tc, test_jdoc);
	tcase_add_test(tc, test_three_types);
	tcase_add_test(tc, test_ec_short_coordinate);
	tcase_add_test(tc, test_skipped_with_reason);
	tcase_add_test(tc, test_skip_keeps_the_rest);
	tcase_add_test(tc, test_not_a_jwks);
	tcase_add_test(tc, test_alg_names);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
