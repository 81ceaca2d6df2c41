/* The skip scanner (every variant against the scalar one) and the envelope tokenizer. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "jscan.h"

static const struct {
	const char *in;
	ssize_t end;                    /* from offset 0, max_depth 4 */
} skip_cases[] = {
	{ "\"\"", 2 }, { "\"abc\"xyz", 5 }, { "\"a\\\"b\"", 6 }, { "\"a\\\\\"b", 5 },
	{ "\"\\\\\\\"\"", 6 }, { "{}", 2 }, { "[]", 2 }, { "[[]]", 4 }, { "{\"a\":[1,{}]} ", 12 },
	{ "[\"]\"]", 5 }, { "[\"\\\"]\"]", 7 }, { "{\"}\":\"{\"}", 9 }, { "[1,]", 4 },
	{ "[[[[]]]]", 8 }, { "[[[[[]]]]]", JSCAN_ERR_DEPTH }, { "[", JSCAN_ERR_SYNTAX },
	{ "\"abc", JSCAN_ERR_SYNTAX }, { "\"abc\\\"", JSCAN_ERR_SYNTAX }, { "[}", JSCAN_ERR_SYNTAX },
	{ "{]", JSCAN_ERR_SYNTAX }, { "[[]}", JSCAN_ERR_SYNTAX }, { "1", JSCAN_ERR_SYNTAX },
	{ "[\"]", JSCAN_ERR_SYNTAX }, { "{\"a\":\"\\\"}", JSCAN_ERR_SYNTAX },
};

START_TEST(test_skip_table)
{
	const char *in = skip_cases[_i].in;
	int impl;

	for (impl = 0; impl < JSCAN_NIMPL; impl++) {
		if (!jscan_impl_available((enum jscan_impl)impl))
			continue;
		ck_assert_msg(jscan_skip_impl((enum jscan_impl)impl, in, strlen(in), 0, 4) ==
		    skip_cases[_i].end, "case %d (%s) with %s", _i, in,
		    jscan_impl_name((enum jscan_impl)impl));
	}
	ck_assert_int_eq(jscan_skip(in, strlen(in), 0, 4), skip_cases[_i].end);
}
END_TEST

/* What jscan_skip must return, a byte at a time. */
static ssize_t
skip_reference(const char *buf, size_t len, size_t pos, unsigned max_depth)
{
	unsigned depth = 0;
	int objects = 0, in_string = buf[pos] == '"', escaped = 0;

	if (!in_string) {
		if (max_depth < 1)
			return JSCAN_ERR_DEPTH;
		depth = 1;
		objects = buf[pos] == '{';
	}
	for (size_t i = pos + 1; i < len; i++) {
		char c = buf[i];
		int was_escaped = escaped;

		/* A backslash escapes the next byte anywhere; only a quote cares. */
		escaped = c == '\\' && !was_escaped;
		if (c == '"' && !was_escaped) {
			in_string = !in_string;
			if (!in_string && depth == 0)
				return (ssize_t)i + 1;
		} else if (!in_string && (c == '{' || c == '[')) {
			if (++depth > max_depth)
				return JSCAN_ERR_DEPTH;
			objects += c == '{';
		} else if (!in_string && (c == '}' || c == ']')) {
			objects -= c == '}';
			if (--depth == 0)
				return objects != 0 ? JSCAN_ERR_SYNTAX : (ssize_t)i + 1;
		}
	}
	return JSCAN_ERR_SYNTAX;
}

/* The streaming skip over buf[start + 1..len) in pieces that end at the cut positions
 * (every step bytes, the last piece shorter): what jscan_skip would return. */
static ssize_t
skip_streamed(const char *buf, size_t len, size_t start, unsigned max_depth, size_t step)
{
	struct jscan_stream st;
	size_t at = start + 1, n;
	ssize_t r;

	if (jscan_stream_start(&st, buf[start], max_depth) != 0)
		return JSCAN_ERR_DEPTH;
	while (at < len) {
		n = len - at < step ? len - at : step;
		if ((r = jscan_stream_feed(&st, buf + at, n)) != JSCAN_MORE)
			return r < 0 ? r : (ssize_t)at + r;
		at += n;
	}
	return JSCAN_ERR_SYNTAX;
}

/* Every variant against the reference on buf[0..len) from start, whole, and every fourth
 * body in pieces too (of a size that changes from body to body). */
static void
skip_agrees(const char *buf, size_t len, size_t start, unsigned max_depth)
{
	static const size_t steps[] = { 1, 3, 63, 64, 65, 130 };
	static unsigned calls;
	ssize_t ref = skip_reference(buf, len, start, max_depth), got;
	size_t step = steps[(calls / 4) % (sizeof(steps) / sizeof(steps[0]))];
	int pieces = calls++ % 4 == 0;

	/* The line variant: the same end when no CR or LF comes before it, else a failure. */
	int line_ok = ref >= 0 && memchr(buf + start, '\n', (size_t)ref - start) == NULL &&
	    memchr(buf + start, '\r', (size_t)ref - start) == NULL;

	for (int impl = 0; impl < JSCAN_NIMPL; impl++) {
		if (!jscan_impl_available((enum jscan_impl)impl))
			continue;
		got = jscan_skip_impl((enum jscan_impl)impl, buf, len, start, max_depth);
		ck_assert_msg(got == ref, "%s: %zd, reference %zd on %.*s",
		    jscan_impl_name((enum jscan_impl)impl), got, ref, (int)len, buf);
		got = jscan_skip_line_impl((enum jscan_impl)impl, buf, len, start, max_depth);
		ck_assert_msg(line_ok ? got == ref : got < 0, "%s line: %zd, reference %zd on %.*s",
		    jscan_impl_name((enum jscan_impl)impl), got, ref, (int)len, buf);
		if (!pieces)
			continue;
		ck_assert_int_eq(jscan_use((enum jscan_impl)impl), 0);
		got = skip_streamed(buf, len, start, max_depth, step);
		ck_assert_msg(got == ref, "%s streamed in %zu: %zd, reference %zd on %.*s",
		    jscan_impl_name((enum jscan_impl)impl), step, got, ref, (int)len, buf);
	}
	if (pieces)
		ck_assert_int_eq(jscan_use(jscan_impl_best()), 0);
	got = jscan_skip_line(buf, len, start, max_depth);
	ck_assert(line_ok ? got == ref : got < 0);
}

/* Random bodies over alphabet, each from every variant against the reference. */
static void
skip_random_bodies(const char *alphabet, unsigned seed, int rounds)
{
	size_t nalpha = strlen(alphabet), len, i, start;
	char buf[400];

	for (int round = 0; round < rounds; round++) {
		len = 1 + rand_r(&seed) % (sizeof(buf) - 1);
		for (i = 0; i < len; i++)
			buf[i] = alphabet[rand_r(&seed) % nalpha];
		start = rand_r(&seed) % 3 < 2 ? 0 : rand_r(&seed) % len;
		buf[start] = "[{\""[rand_r(&seed) % 3];
		skip_agrees(buf, len, start, 5);
	}
}

/* A small alphabet, so block edges, escapes and quotes all meet. */
START_TEST(test_skip_variants_agree)
{
	skip_random_bodies("[]{}\"\\\\\"a, ", 12345, 200000);
}
END_TEST

/* Line ends among the rest, a few per body: the line variants stop at the first one before
 * the value's end, wherever it falls in a block, in a string or not. */
START_TEST(test_skip_line_ends)
{
	skip_random_bodies("[]{}\"\\\\\"a, aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n\r\t", 2626,
	    200000);
}
END_TEST

/* Long strings of many lengths, so that they end anywhere in a block, with one escape, quote
 * or line end put at every place in them: the line variants fail at the line end, wherever
 * a plain block would have passed it. */
START_TEST(test_skip_long_string_ends)
{
	static const char marks[] = "\\\"\n";
	char buf[700];
	size_t n, at, k, len;

	for (n = 120; n < 420; n += 7) {
		for (at = 0; at < n; at++) {
			for (k = 0; k < sizeof(marks) - 1; k++) {
				len = n + 2;
				buf[0] = '[';
				buf[1] = '"';
				memset(buf + 2, 'a', n - 2);
				buf[n] = '"';
				buf[n + 1] = ']';
				if (at >= 2 && at < n)
					buf[at] = marks[k];
				skip_agrees(buf, len, 0, 5);
				skip_agrees(buf, len, 1, 5);
			}
		}
	}
}
END_TEST

/* Runs of backslashes of every length across block edges: the variants share their escape
 * logic, so agreeing with one another is not enough. */
START_TEST(test_skip_reference)
{
	skip_random_bodies("\\\\\\\"\"[]{}a ", 777, 100000);
}
END_TEST

/*
 * Deep random values against the reference: a run of openings, a middle, and the closings in
 * reverse, sometimes of the other kind.  Whole blocks then pass on counts alone (the depth
 * exceeds their closings), so the balance kept there, not only the one kept bracket by
 * bracket, is checked (test_skip_counted_blocks does it on fixed bodies).
 */
START_TEST(test_skip_deep)
{
	static const char middle[] = "ab, :\"\\\\[]{}";
	char buf[700], opens[100];
	unsigned seed = 4242;
	size_t len, i, n;

	for (int round = 0; round < 50000; round++) {
		n = 1 + rand_r(&seed) % sizeof(opens);
		len = 0;
		for (i = 0; i < n; i++)
			buf[len++] = opens[i] = "[{"[rand_r(&seed) % 2];
		for (i = rand_r(&seed) % 300; i > 0; i--)
			buf[len++] = middle[rand_r(&seed) % (sizeof(middle) - 1)];
		while (n > 0) {
			n--;
			buf[len++] = opens[n] == '[' ? ']' : '}';
			if (rand_r(&seed) % 64 == 0)
				buf[len - 1] ^= ']' ^ '}';
		}
		skip_agrees(buf, len, 0, 1000);
	}
}
END_TEST

/* Long values cross many 64-byte blocks, with escapes landing on block boundaries. */
START_TEST(test_skip_long)
{
	size_t n = 1 << 16, i;
	char *buf = malloc(n);
	int impl;

	for (int shift = 0; shift < 70; shift++) {
		buf[0] = '[';
		for (i = 1; i < n - 1; i++)
			buf[i] = ' ';
		/* A string holding \" and \\ placed so its backslash hits byte 63 of a block. */
		memcpy(buf + 1 + shift, "\"x\\\"]\\\\\"", 8);
		memcpy(buf + 200 + shift, "{\"k\":[\"}\"]}", 11);
		buf[n - 1] = ']';
		for (impl = 0; impl < JSCAN_NIMPL; impl++)
			if (jscan_impl_available((enum jscan_impl)impl))
				ck_assert_int_eq(jscan_skip_impl((enum jscan_impl)impl, buf, n, 0, 10),
				    (ssize_t)n);
	}
	/* One unbalanced quote far away makes it unterminated. */
	buf[n / 2] = '"';
	for (impl = 0; impl < JSCAN_NIMPL; impl++)
		if (jscan_impl_available((enum jscan_impl)impl))
			ck_assert_int_eq(jscan_skip_impl((enum jscan_impl)impl, buf, n, 0, 10),
			    JSCAN_ERR_SYNTAX);
	free(buf);
}
END_TEST

/* Many objects in blocks where the value cannot end: settled by counts, which must still
 * tell objects from arrays. */
START_TEST(test_skip_counted_blocks)
{
	size_t n = 0, i;
	char *buf = malloc(64 * 1024);
	int impl;

	buf[n++] = '[';
	for (i = 0; i < 2000; i++) {
		memcpy(buf + n, "{\"a\":[1,{\"b\":[]}]},", 19);
		n += 19;
	}
	buf[n - 1] = ']';
	for (impl = 0; impl < JSCAN_NIMPL; impl++)
		if (jscan_impl_available((enum jscan_impl)impl))
			ck_assert_int_eq(jscan_skip_impl((enum jscan_impl)impl, buf, n, 0, 10),
			    (ssize_t)n);
	/* An object closed by a bracket deep inside, and the array closed by a brace. */
	buf[1 + 10 * 19 + 15] = ']';
	for (impl = 0; impl < JSCAN_NIMPL; impl++)
		if (jscan_impl_available((enum jscan_impl)impl))
			ck_assert_int_eq(jscan_skip_impl((enum jscan_impl)impl, buf, n, 0, 10),
			    JSCAN_ERR_SYNTAX);
	buf[1 + 10 * 19 + 15] = '}';
	buf[n - 1] = '}';
	for (impl = 0; impl < JSCAN_NIMPL; impl++)
		if (jscan_impl_available((enum jscan_impl)impl))
			ck_assert_int_eq(jscan_skip_impl((enum jscan_impl)impl, buf, n, 0, 10),
			    JSCAN_ERR_SYNTAX);
	free(buf);
}
END_TEST

/* Long strings whose blocks hold no quote or backslash are passed whole: brackets in them
 * never count, and a quote, an escape or an escape carried over a block's end anywhere in
 * them is still seen, by every variant, whole and in pieces. */
START_TEST(test_skip_long_strings)
{
	static const char *marks[] = { "\\\"", "\\\\", "\"", "\\u0022" };
	char buf[420];
	size_t n, i, at;

	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++) {
		for (at = 2; at < 200; at++) {
			n = 0;
			buf[n++] = '[';
			buf[n++] = '"';
			for (i = 0; i < 380; i++)
				buf[n++] = "ab[c{d]e}f"[i % 10];
			memcpy(buf + at, marks[k], strlen(marks[k]));
			buf[n++] = '"';
			buf[n++] = ']';
			skip_agrees(buf, n, 0, 4);
			skip_agrees(buf, n, 1, 4);
		}
	}
}
END_TEST

START_TEST(test_skip_depth_clamp)
{
	size_t n = 2 * (JSCAN_MAX_DEPTH + 1), i;
	char *buf = malloc(n);

	for (i = 0; i < n / 2; i++)
		buf[i] = '[';
	memset(buf + n / 2, ']', n / 2);
	ck_assert_int_eq(jscan_skip(buf, n, 0, 1000000), JSCAN_ERR_DEPTH);
	/* From the second bracket the depth is exactly the clamp. */
	ck_assert_int_eq(jscan_skip(buf, n, 1, 1000000), (ssize_t)n - 1);
	ck_assert_int_eq(jscan_skip(buf, n - 2, 1, 1000000), JSCAN_ERR_SYNTAX);
	free(buf);
}
END_TEST

/* Members of the top object: key and value spans exactly as in the input. */
#define LONG "0x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct {
	const char *in;
	int result;
	const char *members;            /* key=value|key=value... with the spans' bytes */
} env_cases[] = {
	{ "{}", 0, "" },
	{ " {\n} ", 0, "" },
	{ "{\"a\":1}", 0, "\"a\"=1" },
	{ "{ \"a\" : 1 , \"b\" :\"x\" }", 0, "\"a\"=1|\"b\"=\"x\"" },
	{ "{\"a\":{\"b\":[1,2]},\"c\":[]}", 0, "\"a\"={\"b\":[1,2]}|\"c\"=[]" },
	{ "{\"a\":true,\"b\":false,\"c\":null,\"d\":-1.5e+3}", 0, "\"a\"=true|\"b\"=false|\"c\"=null|\"d\"=-1.5e+3" },
	{ "{\"a\\\"b\":\"c\\\\\"}", 0, "\"a\\\"b\"=\"c\\\\\"" },
	{ "{\"a\":1,\"a\":2}", 0, "\"a\"=1|\"a\"=2" },
	{ "{\"a\":\"{[\",\"b\":{\"c\":\"]}\"}}", 0, "\"a\"=\"{[\"|\"b\"={\"c\":\"]}\"}" },
	{ "{\"\":0}", 0, "\"\"=0" },
	{ "{\"a\":1,}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{,}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\"::1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1:2}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1 \"b\":2}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":{} \"b\":2}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1 {}}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{{}:1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{[]:1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{1:1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{a:1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":x}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":truex}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"\\q\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":[}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1]", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":[[[[1]]]]}", ENVELOPE_ERR_DEPTH, NULL },
	{ "{\"a\":[[[1]]]}", 0, "\"a\"=[[[1]]]" },
	{ "[1]", ENVELOPE_ERR_SYNTAX, NULL },
	/* long strings: a value is skipped as one token, checked as jsmn checks strings */
	{ "{\"a\":\"" LONG "\",\"b\":1}", 0, "\"a\"=\"" LONG "\"|\"b\"=1" },
	{ "{\"" LONG "\":\"" LONG "\\u00e9\\n\"}", 0, "\"" LONG "\"=\"" LONG "\\u00e9\\n\"" },
	{ "{\"a\":[\"" LONG "\"],\"b\" : \"" LONG "\" }", 0,
	    "\"a\"=[\"" LONG "\"]|\"b\"=\"" LONG "\"" },
	{ "{\"a\":\"" LONG "\\q\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"" LONG "\\u12\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"" LONG "\\u12g4\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":1 \"" LONG "\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"" LONG "\" \"b\":1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"" LONG "\":1}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"" LONG "\"}", ENVELOPE_ERR_SYNTAX, NULL },
	{ "{\"a\":\"" LONG "}", ENVELOPE_ERR_SYNTAX, NULL },
};

START_TEST(test_envelope_members)
{
	struct envelope env;
	const char *in = env_cases[_i].in;
	char got[1024] = "";
	size_t end, i, pos;
	int r;

	envelope_init(&env);
	pos = envelope_skip_ws(in, strlen(in), 0);
	r = envelope_parse(&env, in, strlen(in), pos, 4, &end);
	ck_assert_msg(r == env_cases[_i].result, "case %d (%s): %d", _i, in, r);
	if (r == 0) {
		for (i = 0; i < env.nmembers; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%.*s=%.*s",
			    i ? "|" : "", (int)env.members[i].keylen, env.members[i].key,
			    (int)env.members[i].vallen, env.members[i].val);
		ck_assert_str_eq(got, env_cases[_i].members);
		ck_assert_int_eq(in[end - 1], '}');
	}
	envelope_free(&env);
}
END_TEST

/* Many members pass through the token window many times; the member array grows. */
START_TEST(test_envelope_grow)
{
	struct envelope env;
	size_t n = 5000, i, len = 0, end;
	char *buf = malloc(n * 24 + 2);

	buf[len++] = '{';
	for (i = 0; i < n; i++)
		len += (size_t)sprintf(buf + len, "%s\"k%zu\":%s", i ? "," : "", i,
		    i % 3 == 0 ? "[1,{}]" : i % 3 == 1 ? "\"s\"" : "12");
	buf[len++] = '}';
	envelope_init(&env);
	ck_assert_int_eq(envelope_parse(&env, buf, len, 0, 1000, &end), 0);
	ck_assert_uint_eq(env.nmembers, n);
	ck_assert_uint_eq(end, len);
	ck_assert_int_eq(memcmp(env.members[n - 1].key, "\"k4999\"", 7), 0);
	envelope_free(&env);
	free(buf);
}
END_TEST

static int
count_cb(void *arg, const struct envelope_member *m)
{
	size_t *n = arg;

	ck_assert_int_eq(m->key[0], '"');
	return ++*n == 1000 ? 7 : 0;    /* stop at the 1000th member with our own value */
}

/* A member callback sees every member and can stop the parse; max_members stops it too. */
START_TEST(test_envelope_callback_and_limit)
{
	struct envelope env;
	size_t n = 3000, i, len = 0, end, seen = 0;
	char *buf = malloc(n * 16 + 2);

	buf[len++] = '{';
	for (i = 0; i < n; i++)
		len += (size_t)sprintf(buf + len, "%s\"k%zu\":[]", i ? "," : "", i);
	buf[len++] = '}';
	envelope_init(&env);
	env.max_members = n;
	ck_assert_int_eq(envelope_parse(&env, buf, len, 0, 1000, &end), 0);
	ck_assert_uint_eq(env.nmembers, n);
	env.max_members = n - 1;
	ck_assert_int_eq(envelope_parse(&env, buf, len, 0, 1000, &end), ENVELOPE_ERR_MEMBERS);
	ck_assert_uint_eq(env.nmembers, n - 1);
	envelope_free(&env);
	envelope_init(&env);
	env.member_cb = count_cb;
	env.member_arg = &seen;
	ck_assert_int_eq(envelope_parse(&env, buf, len, 0, 1000, &end), 7);
	ck_assert_uint_eq(seen, 1000);
	/* Members given to the callback are not stored. */
	ck_assert_ptr_null(env.members);
	envelope_free(&env);
	free(buf);
}
END_TEST

/* jscan_use picks the scanner the engine runs on; every one gives the same envelope. */
START_TEST(test_jscan_use)
{
	static const char in[] = "{\"a\":[1,{\"b\":\"]\\\"\"}],\"c\":\"x\",\"d\":{}}";
	struct envelope env;
	size_t end;
	int impl;

	envelope_init(&env);
	for (impl = 0; impl < JSCAN_NIMPL; impl++) {
		if (!jscan_impl_available((enum jscan_impl)impl)) {
			ck_assert_int_eq(jscan_use((enum jscan_impl)impl), -1);
			continue;
		}
		ck_assert_int_eq(jscan_use((enum jscan_impl)impl), 0);
		ck_assert_int_eq(envelope_parse(&env, in, strlen(in), 0, 10, &end), 0);
		ck_assert_uint_eq(env.nmembers, 3);
		ck_assert_uint_eq(env.members[0].vallen, 15);
		ck_assert_uint_eq(end, strlen(in));
		ck_assert_int_eq(jscan_skip(in, strlen(in), 5, 2), 20);
		ck_assert_int_eq(jscan_skip(in, strlen(in), 5, 1), JSCAN_ERR_DEPTH);
	}
	ck_assert_int_eq(jscan_use(JSCAN_NIMPL), -1);
	ck_assert_int_eq(jscan_use(jscan_impl_best()), 0);
	envelope_free(&env);
}
END_TEST

static const struct {
	const char *json;
	const char *name;
	int eq;
} str_cases[] = {
	{ "\"data\"", "data", 1 }, { "\"d\\u0061ta\"", "data", 1 }, { "\"data\"", "dat", 0 },
	{ "\"dat\"", "data", 0 }, { "\"\"", "", 1 }, { "\"\\n\\t\\r\\b\\f\\/\\\\\\\"\"", "\n\t\r\b\f/\\\"", 1 },
	{ "\"\\u00e9\"", "é", 1 }, { "\"\\u20AC\"", "€", 1 }, { "\"\\ud83d\\ude00\"", "😀", 1 },
	{ "\"\\ud83d\"", "\xed\xa0\xbd", 1 }, { "\"\\u0000\"", "", 0 }, { "\"a\\u00\"", "a", 0 },
	{ "\"\\x\"", "x", 0 }, { "\"é\"", "é", 1 }, { "\"\\u00e9\"", "e", 0 },
};

START_TEST(test_string_eq)
{
	ck_assert_int_eq(envelope_string_eq(str_cases[_i].json, strlen(str_cases[_i].json),
	    str_cases[_i].name, strlen(str_cases[_i].name)), str_cases[_i].eq);
}
END_TEST

/* Decoding gives the text string_eq compares with; a bad escape is an error. */
START_TEST(test_string_decode)
{
	const char *json = str_cases[_i].json;
	char out[64];
	size_t n = 0;
	int r = envelope_string_decode(json, strlen(json), out, &n);

	if (str_cases[_i].eq) {
		ck_assert_int_eq(r, 0);
		ck_assert_uint_eq(n, strlen(str_cases[_i].name));
		ck_assert(memcmp(out, str_cases[_i].name, n) == 0);
	} else if (strstr(json, "\\x") != NULL || strstr(json, "\\u00\"") != NULL) {
		ck_assert_int_eq(r, -1);
	}
	ck_assert_int_eq(envelope_string_decode("\"a\\u0000b\"", 10, out, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert(memcmp(out, "a\0b", 3) == 0);
	ck_assert_int_eq(envelope_string_decode("\"a\\\"", 4, out, &n), -1);
}
END_TEST

START_TEST(test_string_decode_escapes)
{
	static const char json[] = "\"a\\\"b\\u00e9\\ud83d\\ude00\\ud800x\\n\\/\"";
	char out[sizeof(json)];
	size_t n = 0;

	ck_assert_int_eq(envelope_string_decode(json, sizeof(json) - 1, out, &n), 0);
	ck_assert_uint_eq(n, 15);
	ck_assert_int_eq(memcmp(out, "a\"b\xc3\xa9\xf0\x9f\x98\x80\xed\xa0\x80x\n/", 15), 0);
	ck_assert_int_eq(envelope_string_decode("\"\\q\"", 4, out, &n), -1);
	ck_assert_int_eq(envelope_string_decode("\"\\u12\"", 6, out, &n), -1);
}
END_TEST

START_TEST(test_value_end)
{
	size_t end;
	unsigned char type;

	ck_assert_int_eq(envelope_value_end("12 ", 3, 0, 10, &end, &type), 0);
	ck_assert_uint_eq(end, 2);
	ck_assert_int_eq(type, ENVELOPE_PRIMITIVE);
	ck_assert_int_eq(envelope_value_end("[1] ", 4, 0, 10, &end, &type), 0);
	ck_assert_uint_eq(end, 3);
	ck_assert_int_eq(type, ENVELOPE_ARRAY);
	ck_assert_int_eq(envelope_value_end("nul", 3, 0, 10, &end, &type), ENVELOPE_ERR_SYNTAX);
	ck_assert_int_eq(envelope_value_end("", 0, 0, 10, &end, &type), ENVELOPE_ERR_SYNTAX);
	ck_assert_int_eq(envelope_value_end("[[]]", 4, 0, 1, &end, &type), ENVELOPE_ERR_DEPTH);
}
END_TEST

static Suite *
envelope_suite(void)
{
	Suite *s = suite_create("envelope");
	TCase *tc = tcase_create("scan");

	tcase_add_loop_test(tc, test_skip_table, 0, (int)(sizeof(skip_cases) / sizeof(skip_cases[0])));
	tcase_add_test(tc, test_skip_variants_agree);
	tcase_add_test(tc, test_skip_reference);
	tcase_add_test(tc, test_skip_line_ends);
	tcase_add_test(tc, test_skip_long_string_ends);
	tcase_add_test(tc, test_skip_deep);
	tcase_add_test(tc, test_skip_long);
	tcase_add_test(tc, test_skip_counted_blocks);
	tcase_add_test(tc, test_skip_long_strings);
	tcase_add_test(tc, test_skip_depth_clamp);
	tcase_add_loop_test(tc, test_envelope_members, 0, (int)(sizeof(env_cases) / sizeof(env_cases[0])));
	tcase_add_test(tc, test_envelope_grow);
	tcase_add_test(tc, test_envelope_callback_and_limit);
	tcase_add_test(tc, test_jscan_use);
	tcase_add_loop_test(tc, test_string_eq, 0, (int)(sizeof(str_cases) / sizeof(str_cases[0])));
	tcase_add_loop_test(tc, test_string_decode, 0,
	    (int)(sizeof(str_cases) / sizeof(str_cases[0])));
	tcase_add_test(tc, test_string_decode_escapes);
	tcase_add_test(tc, test_value_end);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(envelope_suite());
	int failed;

	printf("scanner: %s\n", jscan_impl_name(jscan_impl_best()));
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
