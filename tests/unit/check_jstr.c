#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jstr.h"
#include "respond.h"

#define FFFD "\xef\xbf\xbd"
/* A literal and its length, NUL bytes included. */
#define S(lit) lit, sizeof(lit) - 1

static const struct {
	const char *name;
	const char *in;
	size_t len;
	const char *out;
} cases[] = {
	{ "empty", S(""), "" },
	{ "ASCII", S("plain text, 0-9 ~{}[]/"), "plain text, 0-9 ~{}[]/" },
	{ "quote and backslash", S("a\"b\\c"), "a\\\"b\\\\c" },
	{ "short escapes", S("\n\r\t\b\f"), "\\n\\r\\t\\b\\f" },
	{ "other controls", S("\x01\x1f\x00\x0b"), "\\u0001\\u001f\\u0000\\u000b" },
	{ "DEL copied", S("a\x7f" "b"), "a\x7f" "b" },
	{ "slash copied", S("/"), "/" },
	{ "2-byte (e acute)", S("caf\xc3\xa9"), "caf\xc3\xa9" },
	{ "3-byte (euro)", S("\xe2\x82\xac"), "\xe2\x82\xac" },
	{ "4-byte (emoji)", S("\xf0\x9f\x98\x80!"), "\xf0\x9f\x98\x80!" },
	{ "highest code point", S("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf" },
	{ "last before surrogates", S("\xed\x9f\xbf"), "\xed\x9f\xbf" },
	{ "0xff", S("a\xff" "b"), "a" FFFD "b" },
	{ "0xfe 0xc0 0xc1 0xf5", S("\xfe\xc0\xc1\xf5"), FFFD FFFD FFFD FFFD },
	{ "stray continuation", S("\x80\xbf"), FFFD FFFD },
	{ "overlong 2-byte /", S("\xc0\xaf"), FFFD FFFD },
	{ "overlong 3-byte", S("\xe0\x9f\xbf"), FFFD FFFD FFFD },
	{ "overlong 4-byte", S("\xf0\x8f\xbf\xbf"), FFFD FFFD FFFD FFFD },
	{ "surrogate", S("\xed\xa0\x80"), FFFD FFFD FFFD },
	{ "above U+10FFFF", S("\xf4\x90\x80\x80"), FFFD FFFD FFFD FFFD },
	{ "truncated 2-byte at the end", S("x\xc3"), "x" FFFD },
	{ "truncated 3-byte before ASCII", S("\xe2\x82("), FFFD FFFD "(" },
	{ "truncated 4-byte at the end", S("\xf0\x9f\x98"), FFFD FFFD FFFD },
	{ "lead then quote", S("\xc3\""), FFFD "\\\"" },
	{ "everything in a long run", S("0123456789abcdef\"\xc3\xa9\x01\xffghijklmnopqrstuv\n"),
	    "0123456789abcdef\\\"\xc3\xa9\\u0001" FFFD "ghijklmnopqrstuv\\n" },
};

START_TEST(test_table)
{
	char out[6 * 64 + 1];
	size_t n, used;

	n = jstr_escape(out, cases[_i].in, cases[_i].len);
	ck_assert_msg(n == strlen(cases[_i].out) && memcmp(out, cases[_i].out, n) == 0,
	    "%s: got %.*s", cases[_i].name, (int)n, out);
	n = jstr_escape_max(out, cases[_i].in, cases[_i].len, sizeof(out), &used);
	ck_assert_uint_eq(n, strlen(cases[_i].out));
	ck_assert_int_eq(memcmp(out, cases[_i].out, n), 0);
	ck_assert_uint_eq(used, cases[_i].len);
	ck_assert_uint_eq(jstr_escape_max(NULL, cases[_i].in, cases[_i].len, SIZE_MAX, NULL), n);
}
END_TEST

/* The escape of one byte or sequence, as the policy says, for a reference escaper. */
static size_t
ref_one(char *d, const unsigned char *s, size_t len, size_t *take)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char c = s[0];
	unsigned cp = 0, n, k, min;

	*take = 1;
	if (c == '"' || c == '\\') {
		d[0] = '\\';
		d[1] = (char)c;
		return 2;
	}
	if (c < 0x20) {
		const char *short_esc = c == '\n' ? "n" : c == '\r' ? "r" : c == '\t' ? "t" :
		    c == '\b' ? "b" : c == '\f' ? "f" : NULL;

		d[0] = '\\';
		if (short_esc != NULL) {
			d[1] = short_esc[0];
			return 2;
		}
		memcpy(d + 1, "u00", 3);
		d[4] = hex[c >> 4];
		d[5] = hex[c & 15];
		return 6;
	}
	if (c < 0x80) {
		d[0] = (char)c;
		return 1;
	}
	/* Decode by the numbers, then judge the code point. */
	n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
	min = n == 4 ? 0x10000 : n == 3 ? 0x800 : 0x80;
	if (n == 0 || n > len || c >= 0xf8)
		goto bad;
	cp = c & (0x7f >> n);
	for (k = 1; k < n; k++) {
		if ((s[k] & 0xc0) != 0x80)
			goto bad;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		goto bad;
	memcpy(d, s, n);
	*take = n;
	return n;
bad:
	memcpy(d, FFFD, 3);
	return 3;
}

/* Random bytes from a small palette that holds every class, across the 8-byte blocks the
 * escaper copies at once: the same output as a byte-at-a-time reference. */
START_TEST(test_random_against_reference)
{
	static const unsigned char palette[] = "ab/~ \x7f\"\\\n\x01\x1f\xc3\xa9\xe2\x82\xac"
	    "\xf0\x9f\x98\x80\xed\xa0\xc0\xff\x80\xf4\x90";
	unsigned char in[200];
	char out[6 * 200], ref[6 * 200];
	size_t len, n, r, i, take;
	unsigned seed = 12345, round;

	for (round = 0; round < 20000; round++) {
		len = (seed = seed * 1103515245 + 12345) % sizeof(in);
		for (i = 0; i < len; i++) {
			seed = seed * 1103515245 + 12345;
			/* mostly plain runs, so that whole blocks pass too */
			in[i] = (seed >> 16) % 4 != 0 ? (unsigned char)('a' + (seed >> 20) % 26) :
			    palette[(seed >> 20) % (sizeof(palette) - 1)];
		}
		for (r = 0, i = 0; i < len; i += take)
			r += ref_one(ref + r, in + i, len - i, &take);
		n = jstr_escape(out, (const char *)in, len);
		ck_assert_uint_eq(n, r);
		ck_assert_int_eq(memcmp(out, ref, n), 0);
	}
}
END_TEST

/* A budget cuts before a character that does not fit, never inside an escape or sequence. */
START_TEST(test_max_cuts_whole_characters)
{
	static const char in[] = "ab\"\xc3\xa9\x01\xf0\x9f\x98\x80\xff";
	/* the output, character by character: a b \" é \u0001 😀 U+FFFD */
	static const size_t ends[] = { 0, 1, 2, 4, 6, 12, 16, 19 };
	static const size_t took[] = { 0, 1, 2, 3, 5, 6, 10, 11 };
	char out[64];
	size_t max, n, used, k;

	for (max = 0; max <= 19; max++) {
		n = jstr_escape_max(out, in, sizeof(in) - 1, max, &used);
		for (k = 0; k + 1 < sizeof(ends) / sizeof(ends[0]) && ends[k + 1] <= max; k++)
			;
		ck_assert_msg(n == ends[k], "max %zu: %zu bytes, expected %zu", max, n, ends[k]);
		ck_assert_uint_eq(used, took[k]);
		ck_assert_uint_eq(jstr_escape_max(NULL, in, sizeof(in) - 1, max, NULL), n);
	}
	n = jstr_escape_max(out, in, sizeof(in) - 1, 19, NULL);
	ck_assert_int_eq(memcmp(out, "ab\\\"\xc3\xa9\\u0001\xf0\x9f\x98\x80" FFFD, n), 0);
}
END_TEST

/* The gateway's error bodies escape through the same function, a piece at a time. */
START_TEST(test_respond_adapter)
{
	struct evbuffer *b = evbuffer_new();
	char *in = malloc(3000), *ref = malloc(6 * 3000), *got;
	size_t i, n;

	ck_assert_ptr_nonnull(b);
	for (i = 0; i < 3000; i += 3)
		memcpy(in + i, i % 2 == 0 ? "\xc3\xa9\"" : "\xff\x01" "a", 3);
	n = jstr_escape(ref, in, 3000);
	respond_json_escape(b, in, 3000);
	ck_assert_uint_eq(evbuffer_get_length(b), n);
	got = (char *)evbuffer_pullup(b, -1);
	ck_assert_int_eq(memcmp(got, ref, n), 0);
	evbuffer_drain(b, n);
	respond_json_escape(b, "caf\xc3\xa9 \xe2\x82", 8);
	ck_assert_uint_eq(evbuffer_get_length(b), 12);
	ck_assert_int_eq(memcmp(evbuffer_pullup(b, -1), "caf\xc3\xa9 " FFFD FFFD, 12), 0);
	evbuffer_free(b);
	free(in);
	free(ref);
}
END_TEST

static Suite *
jstr_suite(void)
{
	Suite *s = suite_create("jstr");
	TCase *tc = tcase_create("jstr");

	tcase_add_loop_test(tc, test_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_random_against_reference);
	tcase_add_test(tc, test_max_cuts_whole_characters);
	tcase_add_test(tc, test_respond_adapter);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(jstr_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
