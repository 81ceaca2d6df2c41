#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "api_keys.h"

/* The hex SHA-256 of s, as sha256sum prints it. */
static const char *
hex_sha256(const char *s, char out[65])
{
	unsigned char h[32];
	int i;

	SHA256((const unsigned char *)s, strlen(s), h);
	for (i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
	return out;
}

START_TEST(test_lookup)
{
	char text[1024], h1[65], h2[65], h3[65], err[256];
	struct api_keys *keys;
	size_t i;

	/* Comments, blank lines, tabs, CRLF, an upper-case hash, a name with two keys. */
	snprintf(text, sizeof(text),
	    "# clients of the orders API\n"
	    "\n"
	    "alice %s\n"
	    "  bob\t%s   # rotated in May\r\n"
	    "bob %s", hex_sha256("alice-key", h1), hex_sha256("bob-old", h2),
	    hex_sha256("bob-new", h3));
	for (i = 0; i < 64; i++)
		if (text[i + strlen(text) - 64] >= 'a')
			text[i + strlen(text) - 64] -= 'a' - 'A';
	keys = api_keys_parse(text, strlen(text), "keys", err, sizeof(err));
	ck_assert_msg(keys != NULL, "%s", err);
	ck_assert_uint_eq(api_keys_count(keys), 3);
	ck_assert_str_eq(api_keys_lookup(keys, "alice-key", 9), "alice");
	ck_assert_str_eq(api_keys_lookup(keys, "bob-old", 7), "bob");
	ck_assert_str_eq(api_keys_lookup(keys, "bob-new", 7), "bob");
	ck_assert_ptr_null(api_keys_lookup(keys, "alice-key ", 10));
	ck_assert_ptr_null(api_keys_lookup(keys, "alice-ke", 8));
	ck_assert_ptr_null(api_keys_lookup(keys, "", 0));
	/* The hash itself is not a key. */
	ck_assert_ptr_null(api_keys_lookup(keys, h1, 64));
	api_keys_free(keys);
}
END_TEST

START_TEST(test_errors_all_with_lines)
{
	char text[1024], h[65], err[1024];

	hex_sha256("k", h);
	snprintf(text, sizeof(text),
	    "ok %s\n"                   /* 1 */
	    "only-a-name\n"             /* 2 */
	    "bad/name %s\n"             /* 3 */
	    "short abcdef\n"            /* 4 */
	    "again %s\n"                /* 5: the same key as ok */
	    "extra %.63sx field\n"      /* 6 */
	    "nothex %.63sg\n",          /* 7 */
	    h, h, h, h, h);
	ck_assert_ptr_null(api_keys_parse(text, strlen(text), "/etc/keys", err, sizeof(err)));
	ck_assert_str_eq(err,
	    "/etc/keys:2: want \"NAME SHA256HEX\"\n"
	    "/etc/keys:3: a NAME is 1 to 64 of A-Z a-z 0-9 . _ -\n"
	    "/etc/keys:4: the key's SHA-256 is 64 hex digits (sha256sum prints it)\n"
	    "/etc/keys:5: the same key as ok\n"
	    "/etc/keys:6: want \"NAME SHA256HEX\"\n"
	    "/etc/keys:7: the key's SHA-256 is 64 hex digits (sha256sum prints it)");
}
END_TEST

START_TEST(test_empty_file_is_no_keys)
{
	char err[64];
	struct api_keys *keys = api_keys_parse("# none yet\n\n", 12, "k", err, sizeof(err));

	ck_assert_ptr_nonnull(keys);
	ck_assert_uint_eq(api_keys_count(keys), 0);
	ck_assert_ptr_null(api_keys_lookup(keys, "x", 1));
	api_keys_free(keys);
}
END_TEST

START_TEST(test_load)
{
	char path[] = "/tmp/check_api_keysXXXXXX", h[65], err[256], want[300];
	struct api_keys *keys;
	FILE *f;
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(f = fdopen(fd, "w"));
	fprintf(f, "carol %s\n", hex_sha256("carol-key", h));
	fclose(f);
	keys = api_keys_load(path, err, sizeof(err));
	ck_assert_msg(keys != NULL, "%s", err);
	ck_assert_str_eq(api_keys_lookup(keys, "carol-key", 9), "carol");
	api_keys_free(keys);
	ck_assert_ptr_nonnull(f = fopen(path, "a"));
	fprintf(f, "dave nothex\n");
	fclose(f);
	ck_assert_ptr_null(api_keys_load(path, err, sizeof(err)));
	snprintf(want, sizeof(want), "%s:2: the key's SHA-256 is 64 hex digits (sha256sum "
	    "prints it)", path);
	ck_assert_str_eq(err, want);
	unlink(path);
	ck_assert_ptr_null(api_keys_load(path, err, sizeof(err)));
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	ck_assert_str_eq(err, want);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("api_keys");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_lookup);
	tcase_add_test(tc, test_errors_all_with_lines);
	tcase_add_test(tc, test_empty_file_is_no_keys);
	tcase_add_test(tc, test_load);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
