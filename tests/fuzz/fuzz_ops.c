/*
 * libFuzzer target for the rewrite-program parser: the input is the YAML of a route's op
 * list, loaded for a route whose path template is FUZZ_TEMPLATE (its captures may be set as
 * $path.NAME).  A program that loads is applied to a few bodies in both validation modes,
 * every variable given a value; one that does not must say where, as "LINE:COL: message".
 * Checked: a valid body never gives invalid output, validate: full accepting implies the
 * envelope mode gives the same bytes, a loaded program reports every variable it uses, and
 * a program that loads for a plain path loads for the template too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jvalid.h"
#include "rewrite.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

#define FUZZ_TEMPLATE "/users/{id}/files/{rest...}"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const bodies[] = {
	"{\"code\":0,\"msg\":\"ok\",\"data\":{\"id\":1,\"x\":{\"y\":[1,2]},\"a\":null},\"debug\":{}}",
	"{\"a\":1,\"b\":2,\"a\":{\"b\":\"\\u0062\"},\"c\":[{\"d\":1}]}",
	"[1,{\"a\":2}]",
	"\"text\"",
	"{}",
	" {\"data\" : {\"result\" : {\"k\" : true}} } ",
	"{\"code\":\"0\",\"status\":404,\"ok\":false,\"e\":1e400}",
};

static int
fuzz_header_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	(void)arg;
	(void)name;
	*value = (struct rewrite_str){ "v\xff", len % 3 };
	return len % 2;
}

static int
fuzz_json_cb(const void *arg, const char *path, size_t len, struct rewrite_str *value)
{
	(void)arg;
	*value = (struct rewrite_str){ path, len };
	return path[0] != 'm';
}

static int
fuzz_path_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	(void)arg;
	(void)name;
	*value = (struct rewrite_str){ len == 2 ? "\"\x00\xc3" : "a/b%2F\r\n", len == 2 ? 3 : 9 };
	return 1;
}

static char *
fuzz_join(const struct rewrite_result *r)
{
	char *out = malloc(r->total_len + 1);
	size_t i, k = 0;

	for (i = 0; i < r->nspans; i++) {
		FUZZ_CHECK(r->spans[i].len > 0);
		memcpy(out + k, r->spans[i].p, r->spans[i].len);
		k += r->spans[i].len;
	}
	FUZZ_CHECK(k == r->total_len);
	return out;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rewrite_ctx *ctx;
	struct rewrite_program *prog;
	struct rewrite_result re, rf;
	struct rewrite_vars vars;
	char err[512], *oe, *of;
	unsigned line, col;
	size_t i, len;
	int e, f, valid, loaded;

	if (ctx == NULL)
		ctx = rewrite_ctx_new(32, 1000);
	prog = rewrite_program_from_yaml((const char *)data, size, err, sizeof(err));
	if (prog == NULL)
		FUZZ_CHECK(sscanf(err, "%u:%u: ", &line, &col) == 2 && line >= 1 && col >= 1);
	rewrite_program_free(prog);
	loaded = prog != NULL;
	prog = rewrite_program_from_yaml_route((const char *)data, size, FUZZ_TEMPLATE, err,
	    sizeof(err));
	if (prog == NULL) {
		FUZZ_CHECK(!loaded);
		FUZZ_CHECK(sscanf(err, "%u:%u: ", &line, &col) == 2 && line >= 1 && col >= 1);
		FUZZ_CHECK(strstr(err, ": ") != NULL);
		return 0;
	}
	for (i = 0; i < prog->nops; i++)
		for (size_t j = 0; j < prog->ops[i].nitems; j++)
			for (size_t k = 0; k < prog->ops[i].items[j].nval; k++)
				FUZZ_CHECK(rewrite_program_uses(prog, prog->ops[i].items[j].val[k].var) ||
				    prog->ops[i].items[j].val[k].var == REWRITE_VAR_NONE);
	memset(&vars, 0, sizeof(vars));
	vars.request_id = (struct rewrite_str){ "r\"", 2 };
	vars.route = (struct rewrite_str){ "\xff", 1 };
	vars.upstream = (struct rewrite_str){ "10.0.0.1:80", 11 };
	vars.remote_addr = (struct rewrite_str){ "::1", 3 };
	vars.ssl_client_s_dn = (struct rewrite_str){ "CN=\"a\"", 7 };
	vars.ssl_client_verify = (struct rewrite_str){ "FAILED:x\x01", 9 };
	vars.now = (long long)size * 100000007 - 5000000000LL;
	vars.status = 200;
	vars.header_cb = fuzz_header_cb;
	vars.json_cb = fuzz_json_cb;
	vars.path_cb = fuzz_path_cb;
	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		len = strlen(bodies[i]);
		valid = jvalid_check(bodies[i], len, 32, NULL) == JVALID_OK;
		e = rewrite_apply(ctx, prog, VALIDATE_ENVELOPE, bodies[i], len, &vars, &re);
		oe = e == 0 ? fuzz_join(&re) : NULL;
		/* Paths of set and wrap may nest the output as deep as the program says. */
		if (e == 0 && valid)
			FUZZ_CHECK(jvalid_check(oe, re.total_len, JVALID_MAX_DEPTH, NULL) == JVALID_OK);
		f = rewrite_apply(ctx, prog, VALIDATE_FULL, bodies[i], len, &vars, &rf);
		if (f == 0) {
			FUZZ_CHECK(valid && e == 0 && rf.total_len == re.total_len &&
			    rf.status == re.status);
			of = fuzz_join(&rf);
			FUZZ_CHECK(memcmp(of, oe, rf.total_len) == 0);
			free(of);
		}
		free(oe);
	}
	rewrite_program_free(prog);
	return 0;
}
