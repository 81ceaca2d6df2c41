/*
 * libFuzzer target for the JSON-RPC batch splitter and answer matcher.
 *
 * Input: a control byte, then a request body, optionally a NUL byte and an upstream's answer.
 * The control byte's low bit asks for strict validation, the next three choose max_batch (1
 * to 8, or 1000), the high bits max_depth (1 to 16).  Checked on every input:
 *   - every call, method and id lies inside the body, a call's method and id inside the call;
 *     a batch has at most max_batch calls; strict splitting never accepts what the envelope
 *     splitting does not, and agrees with it on the calls;
 *   - the answer given, matched to the calls of each round (all to one target), answers a
 *     call only with an answer that lies inside the answer body and carries that call's id;
 *   - answers made for the calls (in reverse order, ids as written) answer every call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "jsonrpc.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
fuzz_inside(const char *p, size_t n, const char *base, size_t len)
{
	return p >= base && n <= len && (size_t)(p - base) <= len - n;
}

/* The first id member of an answer object, as jsonrpc_match reads it. */
static int
fuzz_id_cb(void *arg, const struct envelope_member *m)
{
	struct envelope_member *id = arg;

	if (id->key == NULL && envelope_string_eq(m->key, m->keylen, "id", 2))
		*id = *m;
	return 0;
}

/* The call's answer carries the call's id. */
static void
fuzz_answer_is_for(struct jsonrpc *j, const struct jsonrpc_call *c)
{
	static struct envelope env;
	struct envelope_member id;
	size_t end;

	memset(&id, 0, sizeof(id));
	env.member_cb = fuzz_id_cb;
	env.member_arg = &id;
	env.max_members = SIZE_MAX;
	FUZZ_CHECK(envelope_parse(&env, c->answer, c->answer_len, 0, 64, &end) == 0 &&
	    end == c->answer_len && id.key != NULL);
	FUZZ_CHECK(jsonrpc_id_eq(j, c->id, c->id_len, id.val, id.vallen));
}

/* Answers for the calls idx[0..n), last call first. */
static char *
fuzz_answers(const struct jsonrpc *j, const uint32_t *idx, size_t n, size_t *len)
{
	size_t cap = 16, i, o = 0;
	char *out;

	for (i = 0; i < n; i++)
		cap += j->calls[idx[i]].id_len + 48;
	out = malloc(cap);
	out[o++] = '[';
	for (i = n; i-- > 0;) {
		const struct jsonrpc_call *c = &j->calls[idx[i]];

		if (c->kind != JSONRPC_CALL)
			continue;
		if (o > 1)
			out[o++] = ',';
		o += (size_t)snprintf(out + o, cap - o, "{\"jsonrpc\":\"2.0\",\"result\":0,\"id\":");
		memcpy(out + o, c->id, c->id_len);
		o += c->id_len;
		out[o++] = '}';
	}
	out[o++] = ']';
	*len = o;
	return out;
}

/* Match answer (NULL: answers made for them) to each round of the calls of target 0; check
 * what was paired. */
static void
fuzz_match(struct jsonrpc *j, int rounds, const char *given, size_t glen, unsigned depth)
{
	uint32_t *idx = malloc((j->ncalls + 1) * sizeof(*idx));
	struct jsonrpc_call *c;
	const char *answer;
	char *made = NULL;
	size_t i, n, alen;
	int r, m;

	for (r = 0; r < rounds; r++) {
		for (i = n = 0; i < j->ncalls; i++)
			if (j->calls[i].target == 0 && j->calls[i].round == (uint32_t)r)
				idx[n++] = (uint32_t)i;
		if (n == 0)
			continue;
		answer = given;
		alen = glen;
		if (given == NULL)
			answer = made = fuzz_answers(j, idx, n, &alen);
		m = jsonrpc_match(j, idx, n, answer, alen, depth);
		FUZZ_CHECK(m == 0 || m == -1);
		for (i = 0; i < n; i++) {
			c = &j->calls[idx[i]];
			if (c->kind != JSONRPC_CALL || m < 0)
				FUZZ_CHECK(c->state == JSONRPC_UNANSWERED);
			if (given == NULL && c->kind == JSONRPC_CALL)
				FUZZ_CHECK(c->state == JSONRPC_RESULT);
			if (c->state == JSONRPC_RESULT || c->state == JSONRPC_ERROR ||
			    c->state == JSONRPC_BAD_ANSWER) {
				FUZZ_CHECK(fuzz_inside(c->answer, c->answer_len, answer, alen));
				fuzz_answer_is_for(j, c);
			} else {
				FUZZ_CHECK(c->answer == NULL);
			}
			c->state = JSONRPC_UNANSWERED;
			c->answer = NULL;
		}
		free(made);
		made = NULL;
	}
	free(idx);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct jsonrpc j, k;
	static int ready;
	const uint8_t *nul;
	const struct jsonrpc_call *c;
	char *body, *answer;
	size_t len, alen, max_batch, i;
	unsigned depth;
	int strict, r, rs, rounds;

	if (!ready) {
		jsonrpc_init(&j);
		jsonrpc_init(&k);
		ready = 1;
	}
	if (size < 1)
		return 0;
	strict = data[0] & 1;
	max_batch = ((data[0] >> 1) & 7) == 7 ? 1000 : 1 + ((data[0] >> 1) & 7);
	depth = 1 + (data[0] >> 4);
	data++;
	size--;
	nul = memchr(data, 0, size);
	len = nul != NULL ? (size_t)(nul - data) : size;
	alen = nul != NULL ? size - len - 1 : 0;
	/* Copies of exactly the bytes: reading past them shows as an error. */
	body = malloc(len + 1);
	answer = malloc(alen + 1);
	memcpy(body, data, len);
	memcpy(answer, data + len + (nul != NULL), alen);

	r = jsonrpc_split(&j, body, len, depth, max_batch, 0);
	FUZZ_CHECK(r >= JSONRPC_NOMEM && r <= JSONRPC_BATCH && r != JSONRPC_NOMEM);
	if (strict) {
		rs = jsonrpc_split(&k, body, len, depth, max_batch, 1);
		if (rs == JSONRPC_SINGLE || rs == JSONRPC_BATCH) {
			FUZZ_CHECK(rs == r && k.ncalls == j.ncalls);
			for (i = 0; i < j.ncalls; i++)
				FUZZ_CHECK(k.calls[i].kind == j.calls[i].kind &&
				    k.calls[i].val == j.calls[i].val);
		}
	}
	if (r == JSONRPC_SINGLE)
		FUZZ_CHECK(j.ncalls == 1);
	if (r == JSONRPC_BATCH)
		FUZZ_CHECK(j.ncalls >= 1 && j.ncalls <= max_batch);
	if (r != JSONRPC_SINGLE && r != JSONRPC_BATCH)
		goto out;
	for (i = 0; i < j.ncalls; i++) {
		c = &j.calls[i];
		FUZZ_CHECK(fuzz_inside(c->val, c->len, body, len) && c->len >= 1);
		FUZZ_CHECK(c->kind <= JSONRPC_INVALID);
		if (c->kind != JSONRPC_INVALID)
			FUZZ_CHECK(c->method != NULL && fuzz_inside(c->method, c->method_len, c->val,
			    c->len) && c->method[0] == '"');
		FUZZ_CHECK((c->kind == JSONRPC_CALL) <= (c->id != NULL));
		if (c->id != NULL)
			FUZZ_CHECK(fuzz_inside(c->id, c->id_len, c->val, c->len));
		if (c->kind == JSONRPC_NOTIFICATION)
			FUZZ_CHECK(c->id == NULL);
		j.calls[i].target = c->kind == JSONRPC_CALL && (i & 3) == 3 ? 1 : 0;
	}
	rounds = jsonrpc_rounds(&j);
	FUZZ_CHECK(rounds >= 1 && (size_t)rounds <= j.ncalls);
	fuzz_match(&j, rounds, answer, alen, depth);
	fuzz_match(&j, rounds, NULL, 0, 3);
out:
	free(body);
	free(answer);
	return 0;
}
