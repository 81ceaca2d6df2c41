/*
 * validate: full against JSONTestSuite (tests/data/JSONTestSuite, read through TESTS_SRCDIR),
 * the envelope mode on the same files, and the transform files through wrap then unwrap.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jvalid.h"
#include "rewrite.h"

/*
 * The implementation-defined i_ files and what validate: full does with them.  Numbers are
 * grammar only (no range), escaped lone surrogates are grammar too; raw bytes must be UTF-8,
 * so invalid, overlong, surrogate-encoded and UTF-16 text is rejected, as is a BOM.  The 500
 * nested arrays fit the default depth limit of 1000.
 */
static const struct {
	const char *file;
	int accept;
} i_outcomes[] = {
	{ "i_number_double_huge_neg_exp.json", 1 },
	{ "i_number_huge_exp.json", 1 },
	{ "i_number_neg_int_huge_exp.json", 1 },
	{ "i_number_pos_double_huge_exp.json", 1 },
	{ "i_number_real_neg_overflow.json", 1 },
	{ "i_number_real_pos_overflow.json", 1 },
	{ "i_number_real_underflow.json", 1 },
	{ "i_number_too_big_neg_int.json", 1 },
	{ "i_number_too_big_pos_int.json", 1 },
	{ "i_number_very_big_negative_int.json", 1 },
	{ "i_object_key_lone_2nd_surrogate.json", 1 },
	{ "i_string_1st_surrogate_but_2nd_missing.json", 1 },
	{ "i_string_1st_valid_surrogate_2nd_invalid.json", 1 },
	{ "i_string_UTF-16LE_with_BOM.json", 0 },
	{ "i_string_UTF-8_invalid_sequence.json", 0 },
	{ "i_string_UTF8_surrogate_U+D800.json", 0 },
	{ "i_string_incomplete_surrogate_and_escape_valid.json", 1 },
	{ "i_string_incomplete_surrogate_pair.json", 1 },
	{ "i_string_incomplete_surrogates_escape_valid.json", 1 },
	{ "i_string_invalid_lonely_surrogate.json", 1 },
	{ "i_string_invalid_surrogate.json", 1 },
	{ "i_string_invalid_utf-8.json", 0 },
	{ "i_string_inverted_surrogates_U+1D11E.json", 1 },
	{ "i_string_iso_latin_1.json", 0 },
	{ "i_string_lone_second_surrogate.json", 1 },
	{ "i_string_lone_utf8_continuation_byte.json", 0 },
	{ "i_string_not_in_unicode_range.json", 0 },
	{ "i_string_overlong_sequence_2_bytes.json", 0 },
	{ "i_string_overlong_sequence_6_bytes.json", 0 },
	{ "i_string_overlong_sequence_6_bytes_null.json", 0 },
	{ "i_string_truncated-utf-8.json", 0 },
	{ "i_string_utf16BE_no_BOM.json", 0 },
	{ "i_string_utf16LE_no_BOM.json", 0 },
	{ "i_structure_500_nested_arrays.json", 1 },
	{ "i_structure_UTF-8_BOM_empty_object.json", 0 },
};

static char *
suite_dir(const char *sub)
{
	const char *base = getenv("TESTS_SRCDIR");
	char *p;

	ck_assert_msg(base != NULL, "TESTS_SRCDIR is not set (run through make check)");
	ck_assert_int_ge(asprintf(&p, "%s/data/JSONTestSuite/%s", base, sub), 0);
	return p;
}

static char *
slurp(const char *dir, const char *name, size_t *len)
{
	char path[4096], *buf;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "rb"));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	/* Exactly sized so reading past the end shows up under ASan and valgrind. */
	buf = malloc(n > 0 ? (size_t)n : 1);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static struct rewrite_program *
program(const char *yaml)
{
	char err[256];
	struct rewrite_program *p = rewrite_program_from_yaml(yaml, strlen(yaml), err,
	    sizeof(err));

	ck_assert_msg(p != NULL, "%s", err);
	return p;
}

START_TEST(test_parsing)
{
	char *dir = suite_dir("test_parsing"), *buf, *out;
	struct rewrite_program *wrap = program("[wrap: r]"), *unwrap = program("[wrap: r, unwrap: r]");
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;
	struct dirent *e;
	size_t len, i, k, ny = 0, nn = 0, ni = 0;
	int full, env;
	DIR *d;

	ck_assert_ptr_nonnull(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		if (strlen(e->d_name) < 3 || e->d_name[1] != '_')
			continue;
		buf = slurp(dir, e->d_name, &len);
		full = jvalid_check(buf, len, 1000, NULL) == 0;
		ck_assert_int_eq(rewrite_apply(ctx, wrap, VALIDATE_FULL, buf, len, NULL, &res) == 0,
		    full);
		env = rewrite_apply(ctx, wrap, VALIDATE_ENVELOPE, buf, len, NULL, &res) == 0;
		if (env) {
			/* Whatever envelope mode accepts comes out whole, inside the wrapper. */
			out = malloc(res.total_len);
			for (i = 0, k = 0; i < res.nspans; k += res.spans[i].len, i++)
				memcpy(out + k, res.spans[i].p, res.spans[i].len);
			ck_assert_int_eq(memcmp(out, "{\"r\":", 5), 0);
			if (full)
				ck_assert_int_eq(jvalid_check(out, res.total_len, 1001, NULL), 0);
			free(out);
			ck_assert_int_eq(rewrite_apply(ctx, unwrap, VALIDATE_ENVELOPE, buf, len, NULL,
			    &res), 0);
			ck_assert_uint_eq(res.total_len, len);
		}
		switch (e->d_name[0]) {
		case 'y':
			ck_assert_msg(full, "%s rejected by validate: full", e->d_name);
			ck_assert_msg(env, "%s rejected by validate: envelope", e->d_name);
			ny++;
			break;
		case 'n':
			ck_assert_msg(!full, "%s accepted by validate: full", e->d_name);
			nn++;
			break;
		case 'i':
			for (i = 0; i < sizeof(i_outcomes) / sizeof(i_outcomes[0]); i++)
				if (strcmp(i_outcomes[i].file, e->d_name) == 0)
					break;
			ck_assert_msg(i < sizeof(i_outcomes) / sizeof(i_outcomes[0]),
			    "%s: outcome not documented", e->d_name);
			ck_assert_msg(full == i_outcomes[i].accept, "%s: %s", e->d_name,
			    full ? "accepted" : "rejected");
			ni++;
			break;
		}
		free(buf);
	}
	closedir(d);
	ck_assert_uint_eq(ny, 95);
	ck_assert_uint_eq(nn, 188);
	ck_assert_uint_eq(ni, sizeof(i_outcomes) / sizeof(i_outcomes[0]));
	rewrite_ctx_free(ctx);
	rewrite_program_free(wrap);
	rewrite_program_free(unwrap);
	free(dir);
}
END_TEST

/* Fidelity: numbers, escapes, duplicates and whitespace survive wrap then unwrap. */
START_TEST(test_transform)
{
	char *dir = suite_dir("test_transform"), *buf, *out;
	struct rewrite_program *p = program("[wrap: result, unwrap: result]");
	struct rewrite_program *inner = program("[wrap: a, wrap: b, unwrap: b.a, wrap: c]");
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;
	struct dirent *e;
	size_t len, i, k, n = 0;
	DIR *d;

	ck_assert_ptr_nonnull(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		buf = slurp(dir, e->d_name, &len);
		ck_assert_msg(rewrite_apply(ctx, p, VALIDATE_ENVELOPE, buf, len, NULL, &res) == 0,
		    "%s: %s", e->d_name, res.error);
		ck_assert_uint_eq(res.total_len, len);
		ck_assert_uint_eq(res.nspans, 1);
		ck_assert_int_eq(memcmp(res.spans[0].p, buf, len), 0);
		ck_assert_int_eq(rewrite_apply(ctx, inner, VALIDATE_ENVELOPE, buf, len, NULL, &res), 0);
		out = malloc(res.total_len);
		for (i = 0, k = 0; i < res.nspans; k += res.spans[i].len, i++)
			memcpy(out + k, res.spans[i].p, res.spans[i].len);
		/* {"c":VALUE}: the value spliced byte for byte, outer whitespace trimmed. */
		ck_assert_int_eq(memcmp(out, "{\"c\":", 5), 0);
		ck_assert_int_eq(out[res.total_len - 1], '}');
		ck_assert_ptr_nonnull(memmem(buf, len, out + 5, res.total_len - 6));
		free(out);
		free(buf);
		n++;
	}
	closedir(d);
	ck_assert_uint_gt(n, 20);
	rewrite_ctx_free(ctx);
	rewrite_program_free(p);
	rewrite_program_free(inner);
	free(dir);
}
END_TEST

static const struct {
	const char *in;
	int result;
} jv_cases[] = {
	{ "{}", 0 }, { "[]", 0 }, { "0", 0 }, { "-0", 0 }, { "-0.0e+0", 0 }, { "\"\"", 0 },
	{ " \t\r\n[ ] \n", 0 }, { "{\"a\":[1,{\"b\":null}],\"a\":true}", 0 },
	{ "\"\\u00e9\\ud83d\\ude00\\/\\b\"", 0 }, { "\"é€😀\"", 0 },
	{ "", -1 }, { " ", -1 }, { "[", -1 }, { "]", -1 }, { "{]", -1 }, { "[}", -1 },
	{ "[1,]", -1 }, { "[,1]", -1 }, { "{\"a\":1,}", -1 }, { "{\"a\"}", -1 },
	{ "{1:1}", -1 }, { "01", -1 }, { "1.", -1 }, { ".1", -1 }, { "1e", -1 }, { "+1", -1 },
	{ "-", -1 }, { "tru", -1 }, { "nul", -1 }, { "falsee", -1 }, { "[1 2]", -1 },
	{ "\"\\x\"", -1 }, { "\"\\u12\"", -1 }, { "\"\t\"", -1 }, { "\"\xc0\xaf\"", -1 },
	{ "\"\xed\xa0\x80\"", -1 }, { "\"\xf4\x90\x80\x80\"", -1 }, { "\"\xe2\x82\"", -1 },
	{ "\xef\xbb\xbf{}", -1 }, { "{} {}", -1 }, { "[\"a\" \"b\"]", -1 }, { "'a'", -1 },
	{ "NaN", -1 }, { "[Infinity]", -1 }, { "{\"a\" 1}", -1 }, { "[1]x", -1 },
};

START_TEST(test_table)
{
	ck_assert_msg(jvalid_check(jv_cases[_i].in, strlen(jv_cases[_i].in), 1000, NULL) ==
	    jv_cases[_i].result, "case %d: %s", _i, jv_cases[_i].in);
}
END_TEST

START_TEST(test_depth)
{
	char buf[2 * 1001];
	size_t where;

	memset(buf, '[', 1000);
	memset(buf + 1000, ']', 1000);
	ck_assert_int_eq(jvalid_check(buf, 2000, 1000, NULL), JVALID_OK);
	ck_assert_int_eq(jvalid_check(buf, 2000, 999, &where), JVALID_ERR_DEPTH);
	ck_assert_uint_eq(where, 999);
	ck_assert_int_eq(jvalid_check(buf, 1999, 1000, &where), JVALID_ERR_SYNTAX);
	ck_assert_uint_eq(where, 1999);
}
END_TEST

/* The one UTF-8 validator: validate: full and the escaping of $variables both use it. */
static const struct {
	const char *in;
	size_t len;
} utf8_cases[] = {
	{ "a", 1 }, { "\x7f", 1 }, { "\xc3\xa9", 2 }, { "\xe2\x82\xac", 3 },
	{ "\xf0\x9f\x98\x80", 4 }, { "\xf4\x8f\xbf\xbf", 4 }, { "\xc0\xaf", 0 },
	{ "\xc1\xbf", 0 }, { "\xe0\x9f\xbf", 0 }, { "\xed\xa0\x80", 0 }, { "\xed\x9f\xbf", 3 },
	{ "\xf0\x8f\xbf\xbf", 0 }, { "\xf4\x90\x80\x80", 0 }, { "\xf5\x80\x80\x80", 0 },
	{ "\x80", 0 }, { "\xe2\x82", 0 }, { "\xc3", 0 }, { "\xc3(", 0 },
};

START_TEST(test_utf8_len)
{
	const char *in = utf8_cases[_i].in;

	ck_assert_uint_eq(jvalid_utf8_len((const unsigned char *)in, strlen(in)),
	    utf8_cases[_i].len);
}
END_TEST

static Suite *
jvalid_suite(void)
{
	Suite *s = suite_create("jvalid");
	TCase *tc = tcase_create("jvalid");

	tcase_add_test(tc, test_parsing);
	tcase_add_test(tc, test_transform);
	tcase_add_loop_test(tc, test_table, 0, (int)(sizeof(jv_cases) / sizeof(jv_cases[0])));
	tcase_add_test(tc, test_depth);
	tcase_add_loop_test(tc, test_utf8_len, 0, (int)(sizeof(utf8_cases) / sizeof(utf8_cases[0])));
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(jvalid_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
