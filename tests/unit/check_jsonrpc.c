/* JSON-RPC 2.0 spans: bodies split into calls (the specification's examples among them), method
 * rules, ids by value, rounds of duplicate ids, and answers matched back to their calls. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "jsonrpc.h"

static struct jsonrpc J;

static void
setup(void)
{
	jsonrpc_init(&J);
}

static void
teardown(void)
{
	jsonrpc_free(&J);
}

static int
split(const char *body)
{
	return jsonrpc_split(&J, body, strlen(body), 100, 1000, 0);
}

/* The kinds of the calls, as letters: c(all), n(otification), i(nvalid). */
static const char *
kinds(void)
{
	static char out[64];
	size_t i;

	for (i = 0; i < J.ncalls && i < sizeof(out) - 1; i++)
		out[i] = "cni"[J.calls[i].kind];
	out[i] = '\0';
	return out;
}

static void
ck_span(const char *p, size_t len, const char *want)
{
	ck_assert_msg(p != NULL, "no span, want %s", want);
	ck_assert_msg(len == strlen(want) && memcmp(p, want, len) == 0, "got %.*s, want %s",
	    (int)len, p, want);
}

START_TEST(single_call)
{
	const char *b = " {\"jsonrpc\": \"2.0\", \"method\": \"subtract\", \"params\": [42, 23], "
	    "\"id\": 1}\n";

	ck_assert_int_eq(split(b), JSONRPC_SINGLE);
	ck_assert_str_eq(kinds(), "c");
	ck_assert(J.calls[0].val == b + 1 && J.calls[0].len == strlen(b) - 2);
	ck_span(J.calls[0].method, J.calls[0].method_len, "\"subtract\"");
	ck_span(J.calls[0].id, J.calls[0].id_len, "1");
	ck_assert_int_eq(J.calls[0].target, JSONRPC_NO_TARGET);
	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"update\",\"params\":[1,2,3,4,5]}"),
	    JSONRPC_SINGLE);
	ck_assert_str_eq(kinds(), "n");
	ck_assert_ptr_null(J.calls[0].id);
	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"foobar\"}"), JSONRPC_SINGLE);
	ck_assert_str_eq(kinds(), "n");
	/* params may be left out; named params; an id of null is still a call */
	ck_assert_int_eq(split("{\"id\":null,\"method\":\"m\",\"jsonrpc\":\"2.0\"}"), JSONRPC_SINGLE);
	ck_assert_str_eq(kinds(), "c");
	ck_span(J.calls[0].id, J.calls[0].id_len, "null");
	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"a\":[1]},"
	    "\"id\":\"x\\\"y\"}"), JSONRPC_SINGLE);
	ck_assert_str_eq(kinds(), "c");
	ck_span(J.calls[0].id, J.calls[0].id_len, "\"x\\\"y\"");
}
END_TEST

START_TEST(request_objects)
{
	static const struct {
		const char *body;
		const char *kinds;
	} cases[] = {
		/* the specification's invalid Request object */
		{ "{\"jsonrpc\": \"2.0\", \"method\": 1, \"params\": \"bar\"}", "i" },
		{ "{\"foo\": \"boo\"}", "i" },
		{ "{}", "i" },
		{ "{\"method\":\"m\",\"id\":1}", "i" },                      /* no jsonrpc */
		{ "{\"jsonrpc\":\"1.0\",\"method\":\"m\",\"id\":1}", "i" },
		{ "{\"jsonrpc\":2.0,\"method\":\"m\",\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2\\u002e0\",\"method\":\"m\",\"id\":1}", "c" },    /* decoded */
		{ "{\"jsonrpc\":\"2.0\",\"id\":1}", "i" },                  /* no method */
		{ "{\"jsonrpc\":\"2.0\",\"method\":null,\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":\"x\",\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":null,\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":7}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":true}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":{\"a\":1}}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":[1]}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":-1.5e3}", "c" },
		/* a member of the protocol twice is ambiguous: which one would the upstream read? */
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"method\":\"b\",\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1,\"id\":2}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"m\\u0065thod\":\"a\",\"method\":\"b\",\"id\":1}", "i" },
		{ "{\"jsonrpc\":\"2.0\",\"jsonrpc\":\"2.0\",\"method\":\"a\"}", "i" },
		/* escaped keys are the same keys; other members are the upstream's business */
		{ "{\"\\u006asonrpc\":\"2.0\",\"m\\u0065thod\":\"a\",\"\\u0069d\":3}", "c" },
		{ "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"ext\":{\"x\":[1,2]},\"idx\":1}", "n" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_msg(split(cases[i].body) == JSONRPC_SINGLE, "%s", cases[i].body);
		ck_assert_msg(strcmp(kinds(), cases[i].kinds) == 0, "%s: %s, want %s",
		    cases[i].body, kinds(), cases[i].kinds);
	}
	/* an invalid call keeps an id it could read, for its answer */
	split("{\"jsonrpc\":\"2.0\",\"method\":1,\"id\":\"k\"}");
	ck_span(J.calls[0].id, J.calls[0].id_len, "\"k\"");
	split("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":true}");
	ck_assert_ptr_null(J.calls[0].id);
}
END_TEST

START_TEST(specification_examples)
{
	/* Section 7, in order. */
	ck_assert_int_eq(split("{\"jsonrpc\": \"2.0\", \"method\": \"foobar, \"params\": \"bar\", "
	    "\"baz]"), JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(split("[\n  {\"jsonrpc\": \"2.0\", \"method\": \"sum\", \"params\": "
	    "[1,2,4], \"id\": \"1\"},\n  {\"jsonrpc\": \"2.0\", \"method\"\n]"), JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(split("[]"), JSONRPC_NOT_REQUEST);
	ck_assert_int_eq(split("[1]"), JSONRPC_BATCH);
	ck_assert_str_eq(kinds(), "i");
	ck_assert_int_eq(split("[1,2,3]"), JSONRPC_BATCH);
	ck_assert_str_eq(kinds(), "iii");
	ck_assert_int_eq(split("[\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"sum\", \"params\": [1,2,4], \"id\": \"1\"},\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"notify_hello\", \"params\": [7]},\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"subtract\", \"params\": [42,23], \"id\": \"2\"},\n"
	    "        {\"foo\": \"boo\"},\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"foo.get\", \"params\": {\"name\": \"myself\"}, "
	    "\"id\": \"5\"},\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"get_data\", \"id\": \"9\"} \n"
	    "    ]"), JSONRPC_BATCH);
	ck_assert_str_eq(kinds(), "cncicc");
	ck_span(J.calls[3].val, J.calls[3].len, "{\"foo\": \"boo\"}");
	ck_span(J.calls[4].method, J.calls[4].method_len, "\"foo.get\"");
	ck_span(J.calls[5].id, J.calls[5].id_len, "\"9\"");
	ck_assert_int_eq(split("[\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"notify_sum\", \"params\": [1,2,4]},\n"
	    "        {\"jsonrpc\": \"2.0\", \"method\": \"notify_hello\", \"params\": [7]}\n"
	    "    ]"), JSONRPC_BATCH);
	ck_assert_str_eq(kinds(), "nn");
}
END_TEST

START_TEST(bodies_that_are_not_batches)
{
	static const struct {
		const char *body;
		int result;
	} cases[] = {
		{ "", JSONRPC_PARSE_ERROR },
		{ " \r\n\t", JSONRPC_PARSE_ERROR },
		{ "1", JSONRPC_NOT_REQUEST },
		{ " \"call\" ", JSONRPC_NOT_REQUEST },
		{ "null", JSONRPC_NOT_REQUEST },
		{ "nul", JSONRPC_PARSE_ERROR },
		{ "[ ]", JSONRPC_NOT_REQUEST },
		{ "[] []", JSONRPC_PARSE_ERROR },
		{ "{} x", JSONRPC_PARSE_ERROR },
		{ "{}{}", JSONRPC_PARSE_ERROR },
		{ "{", JSONRPC_PARSE_ERROR },
		{ "{\"a\":1,}", JSONRPC_PARSE_ERROR },
		{ "[1,]", JSONRPC_PARSE_ERROR },
		{ "[,1]", JSONRPC_PARSE_ERROR },
		{ "[1 2]", JSONRPC_PARSE_ERROR },
		{ "[1", JSONRPC_PARSE_ERROR },
		{ "[{\"a\" 1}]", JSONRPC_PARSE_ERROR },
		{ "[tru]", JSONRPC_PARSE_ERROR },
		{ "\xef\xbb\xbf{}", JSONRPC_PARSE_ERROR },
		{ "[[],{},\"x\",null]", JSONRPC_BATCH },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(split(cases[i].body) == cases[i].result, "%s: %d, want %d",
		    cases[i].body, split(cases[i].body), cases[i].result);
	ck_assert_str_eq(kinds(), "iiii");
}
END_TEST

START_TEST(limits)
{
	const char *three = "[{\"jsonrpc\":\"2.0\",\"method\":\"a\"},2,3]";

	ck_assert_int_eq(jsonrpc_split(&J, three, strlen(three), 100, 3, 0), JSONRPC_BATCH);
	ck_assert_int_eq(jsonrpc_split(&J, three, strlen(three), 100, 2, 0), JSONRPC_TOO_MANY);
	ck_assert_int_eq(J.ncalls, 2);
	/* past max_batch the body must still be JSON */
	ck_assert_int_eq(jsonrpc_split(&J, "[1,2,3,{]", 9, 100, 2, 0), JSONRPC_PARSE_ERROR);
	/* depth: the batch is level 1, its elements 2 */
	ck_assert_int_eq(jsonrpc_split(&J, "[[[1]]]", 7, 3, 10, 0), JSONRPC_BATCH);
	ck_assert_int_eq(jsonrpc_split(&J, "[[[1]]]", 7, 2, 10, 0), JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(jsonrpc_split(&J, "[1]", 3, 1, 10, 0), JSONRPC_PARSE_ERROR);
	/* too many members to read: not a call, but the batch goes on */
	J.max_members = 3;
	ck_assert_int_eq(split("[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1,\"x\":1},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1}]"), JSONRPC_BATCH);
	ck_assert_str_eq(kinds(), "ic");
	ck_assert_ptr_null(J.calls[0].id);
}
END_TEST

START_TEST(strict_validation)
{
	const char *b = "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":[1,],\"id\":1}";
	const char *u = "{\"jsonrpc\":\"2.0\",\"method\":\"\xc3\x28\",\"id\":1}";

	/* validate: envelope reads the members; what lies below them is only balanced */
	ck_assert_int_eq(jsonrpc_split(&J, b, strlen(b), 100, 10, 0), JSONRPC_SINGLE);
	ck_assert_int_eq(jsonrpc_split(&J, b, strlen(b), 100, 10, 1), JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(jsonrpc_split(&J, u, strlen(u), 100, 10, 1), JSONRPC_PARSE_ERROR);
	b = "[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":[\"\\u00e9\"],\"id\":1}]";
	ck_assert_int_eq(jsonrpc_split(&J, b, strlen(b), 100, 10, 1), JSONRPC_BATCH);
}
END_TEST

START_TEST(method_names_and_rules)
{
	struct config_jsonrpc_method methods[] = {
		{ { "eth_call", 8, 0 }, NULL, 0 },
		{ { "eth_", 4, 1 }, NULL, 1 },
		{ { "", 0, 1 }, NULL, 1 },
	};
	struct config_jsonrpc_name deny[] = { { "debug_", 6, 1 }, { "admin", 5, 0 } };
	struct config_jsonrpc_name allow[] = { { "eth_", 4, 1 }, { "admin", 5, 0 } };
	struct config_jsonrpc jc;
	const char *name;
	size_t len;

	memset(&jc, 0, sizeof(jc));
	jc.methods = methods;
	jc.nmethods = 2;
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "eth_call", 8), 0);
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "eth_calls", 9), 1);
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "eth_", 4), 1);
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "eth", 3), -1);
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "net_version", 11), -1);
	jc.nmethods = 3;
	ck_assert_int_eq(jsonrpc_method_rule(&jc, "net_version", 11), 2);
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "anything", 8), 1);
	jc.deny = deny;
	jc.ndeny = 2;
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "debug_trace", 11), 0);
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "admin", 5), 0);
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "admins", 6), 1);
	jc.allow = allow;
	jc.nallow = 2;
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "eth_x", 5), 1);
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "admin", 5), 0);      /* deny wins */
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "net_version", 11), 0);
	jc.nallow = 0;
	ck_assert_int_eq(jsonrpc_method_allowed(&jc, "eth_x", 5), 0);      /* allow: [] */

	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"eth_\\u0063all\",\"id\":1}"),
	    JSONRPC_SINGLE);
	ck_assert_int_eq(jsonrpc_method_name(&J, &J.calls[0], &name, &len), 0);
	ck_assert_int_eq(len, 8);
	ck_assert(memcmp(name, "eth_call", 8) == 0);
	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"plain\",\"id\":1}"), JSONRPC_SINGLE);
	ck_assert_int_eq(jsonrpc_method_name(&J, &J.calls[0], &name, &len), 0);
	ck_assert(len == 5 && name == J.calls[0].method + 1);          /* in place */
	/* a bad escape is no JSON */
	ck_assert_int_eq(split("{\"jsonrpc\":\"2.0\",\"method\":\"bad\\x\",\"id\":1}"),
	    JSONRPC_PARSE_ERROR);
}
END_TEST

static int
id_eq(const char *a, const char *b)
{
	return jsonrpc_id_eq(&J, a, strlen(a), b, strlen(b));
}

START_TEST(ids_by_value)
{
	ck_assert(id_eq("1", "1"));
	ck_assert(id_eq("1", "1.0"));
	ck_assert(id_eq("1", "1e0"));
	ck_assert(id_eq("10e-1", "1"));
	ck_assert(id_eq("0", "-0.0"));
	ck_assert(!id_eq("1", "2"));
	ck_assert(!id_eq("9007199254740993", "9007199254740992"));
	ck_assert(!id_eq("1", "\"1\""));
	ck_assert(!id_eq("\"1\"", "1"));
	ck_assert(id_eq("\"a\"", "\"\\u0061\""));
	ck_assert(id_eq("\"\\u0061\"", "\"a\""));
	ck_assert(id_eq("\"\\u00e9\"", "\"\xc3\xa9\""));
	ck_assert(!id_eq("\"a\"", "\"b\""));
	ck_assert(!id_eq("\"a\"", "\"a \""));
	ck_assert(id_eq("null", "null"));
	ck_assert(!id_eq("null", "\"null\""));
	ck_assert(!id_eq("null", "0"));
}
END_TEST

/* Split body and give call i the target targets[i] (-1: none). */
static void
targets(const char *body, const int *t)
{
	size_t i;

	ck_assert_int_eq(split(body), JSONRPC_BATCH);
	for (i = 0; i < J.ncalls; i++)
		J.calls[i].target = t[i] < 0 ? JSONRPC_NO_TARGET : (uint32_t)t[i];
}

START_TEST(rounds_of_duplicate_ids)
{
	static const int t[] = { 0, 0, 0, 0, 0, 1, 0, -1, 0 };
	size_t i;

	targets("[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":2},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1.0},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1e0},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":\"1\"},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\"},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":\"\\u0031\"}]", t);
	ck_assert_int_eq(jsonrpc_rounds(&J), 3);
	{
		static const uint32_t want[] = { 0, 0, 1, 2, 0, 0, 0, 0, 1 };

		for (i = 0; i < J.ncalls; i++)
			ck_assert_msg(J.calls[i].round == want[i], "call %zu: round %u, want %u", i,
			    J.calls[i].round, want[i]);
	}
	/* no duplicates: one round */
	targets("[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":2}]", t);
	ck_assert_int_eq(jsonrpc_rounds(&J), 1);
}
END_TEST

/* Calls with ids 1, "two", 3, a notification, 4.5 to target 0; the unit is all of them. */
static const char *five = "[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":\"two\"},"
    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":3},"
    "{\"jsonrpc\":\"2.0\",\"method\":\"a\"},"
    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":4.5}]";
static const int zeros[] = { 0, 0, 0, 0, 0, 0, 0, 0 };
static const uint32_t all[] = { 0, 1, 2, 3, 4 };

static int
match(const char *answer)
{
	return jsonrpc_match(&J, all, 5, answer, strlen(answer), 100);
}

/* The states of the five calls, as letters: -(unanswered) r(esult) e(rror) b(ad) t(wice). */
static const char *
states(void)
{
	static char out[8];
	size_t i;

	for (i = 0; i < 5; i++)
		out[i] = "-rebt"[J.calls[i].state];
	out[5] = '\0';
	return out;
}

START_TEST(answers_in_order_and_out_of_it)
{
	const char *in_order = "[{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-1,\"message\":\"x\"},\"id\":\"two\"},"
	    "{\"jsonrpc\":\"2.0\",\"result\":[3],\"id\":3},"
	    "{\"jsonrpc\":\"2.0\",\"result\":{\"v\":4},\"id\":4.5}]";
	const char *reordered = " [ {\"id\":4.50,\"jsonrpc\":\"2.0\",\"result\":null} ,"
	    "{\"jsonrpc\":\"2.0\",\"result\":3,\"id\":3e0},"
	    "{\"jsonrpc\":\"2.0\",\"result\":\"a\",\"id\":\"t\\u0077o\"},"
	    "{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1.0} ] ";

	targets(five, zeros);
	ck_assert_int_eq(jsonrpc_rounds(&J), 1);
	ck_assert_int_eq(match(in_order), 0);
	ck_assert_str_eq(states(), "rer-r");
	ck_span(J.calls[2].answer, J.calls[2].answer_len, "{\"jsonrpc\":\"2.0\",\"result\":[3],\"id\":3}");
	ck_assert_ptr_null(J.calls[3].answer);
	targets(five, zeros);
	jsonrpc_rounds(&J);
	ck_assert_int_eq(match(reordered), 0);
	ck_assert_str_eq(states(), "rrr-r");
	ck_span(J.calls[0].answer, J.calls[0].answer_len, "{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1.0}");
	ck_span(J.calls[4].answer, J.calls[4].answer_len,
	    "{\"id\":4.50,\"jsonrpc\":\"2.0\",\"result\":null}");
}
END_TEST

START_TEST(answers_missing_twice_stray_and_bad)
{
	targets(five, zeros);
	jsonrpc_rounds(&J);
	/* 1 answered twice, "two" missing, 3 not a Response object, an answer to nobody, one
	 * to the notification's absent id (null), and a non-object */
	ck_assert_int_eq(match("[{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"result\":2,\"id\":1},"
	    "{\"result\":3,\"id\":3},"
	    "{\"jsonrpc\":\"2.0\",\"result\":9,\"id\":99},"
	    "{\"jsonrpc\":\"2.0\",\"result\":9,\"id\":null},"
	    "7,"
	    "{\"jsonrpc\":\"2.0\",\"result\":1,\"error\":{},\"id\":4.5}]"), 0);
	ck_assert_str_eq(states(), "t-b-b");
	ck_assert_ptr_null(J.calls[0].answer);
	ck_span(J.calls[2].answer, J.calls[2].answer_len, "{\"result\":3,\"id\":3}");
	/* neither a result nor an error, an error that is not an object, a string id for a number */
	targets(five, zeros);
	jsonrpc_rounds(&J);
	ck_assert_int_eq(match("[{\"jsonrpc\":\"2.0\",\"id\":1},"
	    "{\"jsonrpc\":\"2.0\",\"error\":\"no\",\"id\":\"two\"},"
	    "{\"jsonrpc\":\"2.0\",\"result\":3,\"id\":\"3\"},"
	    "{\"jsonrpc\":\"1.0\",\"result\":4,\"id\":4.5}]"), 0);
	ck_assert_str_eq(states(), "bb--b");
}
END_TEST

START_TEST(answers_that_are_not_answers)
{
	static const char *bad[] = {
		"", " ", "<html>", "null", "1", "\"x\"", "[1,", "[{\"a\" 1}]", "{\"a\":1} {}",
		"[{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1}", "[] x",
	};
	size_t i;

	targets(five, zeros);
	jsonrpc_rounds(&J);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* a good answer first: a bad body leaves no state behind */
		size_t n = strlen(bad[i]);
		char *body = malloc(n + 64);

		snprintf(body, n + 64, "[{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":1},%s", bad[i]);
		ck_assert_msg(match(bad[i]) == -1, "%s", bad[i]);
		ck_assert_str_eq(states(), "-----");
		if (strcmp(bad[i], "") != 0 && strcmp(bad[i], " ") != 0) {
			ck_assert_msg(match(body) == -1, "%s", body);
			ck_assert_str_eq(states(), "-----");
		}
		free(body);
	}
	ck_assert_int_eq(match("[]"), 0);
	ck_assert_str_eq(states(), "-----");
	/* one Response object for a unit of calls */
	ck_assert_int_eq(match(" {\"jsonrpc\":\"2.0\",\"result\":1,\"id\":3}\n"), 0);
	ck_assert_str_eq(states(), "--r--");
	ck_span(J.calls[2].answer, J.calls[2].answer_len, "{\"jsonrpc\":\"2.0\",\"result\":1,\"id\":3}");
}
END_TEST

START_TEST(units_of_one_round_or_one_call)
{
	static const int t[] = { 0, 0, 0, 1 };
	static const uint32_t round0[] = { 0, 1 }, round1[] = { 2 }, other[] = { 3 };
	static const uint32_t just_first[] = { 0 };
	const char *body = "[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":7},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":8},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":7},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":7}]";
	const char *a7 = "[{\"jsonrpc\":\"2.0\",\"result\":\"x\",\"id\":7}]";
	const char *a8 = "{\"jsonrpc\":\"2.0\",\"result\":\"y\",\"id\":8}";

	targets(body, t);
	ck_assert_int_eq(jsonrpc_rounds(&J), 2);
	/* each unit's answer goes to its own calls only */
	ck_assert_int_eq(jsonrpc_match(&J, round1, 1, a7, strlen(a7), 100), 0);
	ck_assert_int_eq(J.calls[2].state, JSONRPC_RESULT);
	ck_assert_int_eq(J.calls[0].state, JSONRPC_UNANSWERED);
	ck_assert_int_eq(J.calls[3].state, JSONRPC_UNANSWERED);
	ck_assert_int_eq(jsonrpc_match(&J, other, 1, a7, strlen(a7), 100), 0);
	ck_assert_int_eq(J.calls[3].state, JSONRPC_RESULT);
	ck_assert_int_eq(J.calls[0].state, JSONRPC_UNANSWERED);
	/* split: single, a unit of one call: the answer for another call is nobody's */
	ck_assert_int_eq(jsonrpc_match(&J, just_first, 1, a8, strlen(a8), 100), 0);
	ck_assert_int_eq(J.calls[0].state, JSONRPC_UNANSWERED);
	ck_assert_int_eq(J.calls[1].state, JSONRPC_UNANSWERED);
	ck_assert_int_eq(jsonrpc_match(&J, round0, 2, a8, strlen(a8), 100), 0);
	ck_assert_int_eq(J.calls[1].state, JSONRPC_RESULT);
}
END_TEST

START_TEST(a_thousand_reversed)
{
	char *body = malloc(100000), *answer = malloc(100000);
	uint32_t idx[1000];
	size_t n = 0, m = 0, i;

	n += (size_t)sprintf(body + n, "[");
	m += (size_t)sprintf(answer + m, "[");
	for (i = 0; i < 1000; i++) {
		n += (size_t)sprintf(body + n, "%s{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":%zu}",
		    i ? "," : "", i);
		m += (size_t)sprintf(answer + m, "%s{\"jsonrpc\":\"2.0\",\"result\":%zu,\"id\":%zu.0}",
		    i ? "," : "", 999 - i, 999 - i);
		idx[i] = (uint32_t)i;
	}
	sprintf(body + n, "]");
	sprintf(answer + m, "]");
	ck_assert_int_eq(split(body), JSONRPC_BATCH);
	for (i = 0; i < 1000; i++)
		J.calls[i].target = 2;
	ck_assert_int_eq(jsonrpc_rounds(&J), 1);
	ck_assert_int_eq(jsonrpc_match(&J, idx, 1000, answer, strlen(answer), 100), 0);
	for (i = 0; i < 1000; i++) {
		char want[64];

		ck_assert_int_eq(J.calls[i].state, JSONRPC_RESULT);
		snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"result\":%zu,\"id\":%zu.0}", i, i);
		ck_span(J.calls[i].answer, J.calls[i].answer_len, want);
	}
	free(body);
	free(answer);
}
END_TEST

START_TEST(error_texts)
{
	size_t len;
	const char *t = jsonrpc_error_open(JSONRPC_E_METHOD, &len);

	ck_assert_int_eq(len, strlen(t));
	ck_assert_str_eq(t, "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32601, \"message\": "
	    "\"Method not found\"");
	ck_assert_str_eq(jsonrpc_error_open(JSONRPC_E_PARSE, &len), "{\"jsonrpc\": \"2.0\", "
	    "\"error\": {\"code\": -32700, \"message\": \"Parse error\"");
	ck_assert_str_eq(jsonrpc_error_open(JSONRPC_E_INVALID, &len), "{\"jsonrpc\": \"2.0\", "
	    "\"error\": {\"code\": -32600, \"message\": \"Invalid Request\"");
	ck_assert_str_eq(jsonrpc_error_open(JSONRPC_E_INTERNAL, &len), "{\"jsonrpc\": \"2.0\", "
	    "\"error\": {\"code\": -32603, \"message\": \"Internal error\"");
}
END_TEST

static Suite *
jsonrpc_suite(void)
{
	Suite *s = suite_create("jsonrpc");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, single_call);
	tcase_add_test(tc, request_objects);
	tcase_add_test(tc, specification_examples);
	tcase_add_test(tc, bodies_that_are_not_batches);
	tcase_add_test(tc, limits);
	tcase_add_test(tc, strict_validation);
	tcase_add_test(tc, method_names_and_rules);
	tcase_add_test(tc, ids_by_value);
	tcase_add_test(tc, rounds_of_duplicate_ids);
	tcase_add_test(tc, answers_in_order_and_out_of_it);
	tcase_add_test(tc, answers_missing_twice_stray_and_bad);
	tcase_add_test(tc, answers_that_are_not_answers);
	tcase_add_test(tc, units_of_one_round_or_one_call);
	tcase_add_test(tc, a_thousand_reversed);
	tcase_add_test(tc, error_texts);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(jsonrpc_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
