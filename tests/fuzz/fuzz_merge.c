/*
 * libFuzzer target for the flat merge of backend answers (merge.h): untrusted JSON objects
 * side by side, a key present more than once kept where it comes last.
 *
 * Input: one control byte, then the sources separated by 0xff bytes (a byte no JSON text
 * holds).
 *   bits 0-2: sources added are those below (bits + 1), of up to 8; the others are skipped,
 *             as a backend that failed is;
 *   bit 3:    reserve the key "errors", as a partial answer does;
 *   bits 4-7: max_depth, 1 to 16.
 * Each input is merged twice on one struct merge (reused arrays must give the same answer).
 * Checked on every input, against a model that decodes every key and compares them pairwise:
 *   - merge_add accepts exactly the texts that are one JSON object to their end;
 *   - the spans come in order of source, then of position, each inside its source's object,
 *     never from a source that was not added;
 *   - the merged object holds, in order, each member whose decoded key comes neither later
 *     nor as the reserved key, with its bytes as received;
 *   - when every source added is valid JSON (RFC 8259), so is the merged object.
 * FUZZ_MERGE_SHOW=1 in the environment prints the merged object.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "jvalid.h"
#include "merge.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

#define FUZZ_SOURCES 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char reserved[] = "\"errors\"";

struct fuzz_source {
	const char *p;
	size_t len;
	int added;
};

/* The merged object as the caller writes it: braces around the spans, commas between. */
struct fuzz_out {
	const struct fuzz_source *src;
	size_t nsrc;
	char *buf;
	size_t len;
	size_t last_source;
	const char *last_end;           /* where the previous span of last_source ended */
	long spans;
};

static void
fuzz_emit_cb(void *arg, size_t source, const char *p, size_t len)
{
	struct fuzz_out *o = arg;
	const struct fuzz_source *s;

	FUZZ_CHECK(source < o->nsrc && len > 0);
	s = &o->src[source];
	FUZZ_CHECK(s->added);
	/* Inside the object, between its braces. */
	FUZZ_CHECK(p > s->p && p + len < s->p + s->len);
	if (o->spans > 0) {
		FUZZ_CHECK(source >= o->last_source);
		FUZZ_CHECK(source > o->last_source || p > o->last_end);
	}
	o->last_source = source;
	o->last_end = p + len;
	o->buf[o->len++] = o->spans++ == 0 ? '{' : ',';
	memcpy(o->buf + o->len, p, len);
	o->len += len;
}

/* A member of the model: its decoded key and its bytes as received. */
struct fuzz_member {
	char *key;
	size_t keylen;
	const char *p;                  /* from the key's opening quote ... */
	size_t len;                     /* ... to the end of the value */
};

static size_t
fuzz_members(const char *obj, size_t len, unsigned depth, struct fuzz_member **out,
    size_t *n, size_t *cap)
{
	struct envelope env;
	size_t end, i, before = *n;
	struct fuzz_member *m;

	envelope_init(&env);
	FUZZ_CHECK(envelope_parse(&env, obj, len, 0, depth, &end) == 0 && end == len);
	for (i = 0; i < env.nmembers; i++) {
		if (*n == *cap) {
			*cap = *cap * 2 + 8;
			FUZZ_CHECK((*out = realloc(*out, *cap * sizeof(**out))) != NULL);
		}
		m = &(*out)[(*n)++];
		FUZZ_CHECK((m->key = malloc(env.members[i].keylen)) != NULL);
		FUZZ_CHECK(envelope_string_decode(env.members[i].key, env.members[i].keylen, m->key,
		    &m->keylen) == 0);
		m->p = env.members[i].key;
		m->len = (size_t)(env.members[i].val + env.members[i].vallen - m->p);
	}
	envelope_free(&env);
	return *n - before;
}

static int
fuzz_same_key(const struct fuzz_member *a, const struct fuzz_member *b)
{
	return a->keylen == b->keylen && memcmp(a->key, b->key, a->keylen) == 0;
}

/* The merged object the model expects, written as the caller writes it. */
static size_t
fuzz_expected(const struct fuzz_member *m, size_t n, int reserve, char *buf)
{
	const struct fuzz_member r = { "errors", 6, NULL, 0 };
	size_t i, j, len = 0, kept = 0;

	for (i = 0; i < n; i++) {
		for (j = i + 1; j < n && !fuzz_same_key(&m[i], &m[j]); j++)
			;
		if (j < n || (reserve && fuzz_same_key(&m[i], &r)))
			continue;
		buf[len++] = kept++ == 0 ? '{' : ',';
		memcpy(buf + len, m[i].p, m[i].len);
		len += m[i].len;
	}
	return len;
}

/* The merge's members, parsed back out of what the spans made, as the model's are. */
static void
fuzz_check_merged(const char *got, size_t got_len, const char *want, size_t want_len,
    unsigned depth)
{
	struct fuzz_member *a = NULL, *b = NULL;
	size_t na = 0, nb = 0, ca = 0, cb = 0, i;

	fuzz_members(got, got_len, depth, &a, &na, &ca);
	fuzz_members(want, want_len, depth, &b, &nb, &cb);
	FUZZ_CHECK(na == nb);
	for (i = 0; i < na; i++) {
		FUZZ_CHECK(fuzz_same_key(&a[i], &b[i]));
		FUZZ_CHECK(a[i].len == b[i].len && memcmp(a[i].p, b[i].p, a[i].len) == 0);
		free(a[i].key);
		free(b[i].key);
	}
	free(a);
	free(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct merge *merge;
	struct fuzz_source src[FUZZ_SOURCES];
	struct fuzz_member *model = NULL;
	struct fuzz_out o;
	const char *p, *end, *sep;
	char *want;
	size_t nsrc = 0, added, n = 0, cap = 0, want_len, i;
	unsigned depth;
	size_t max_members;
	int reserve, round, all_valid = 1, ok;
	long spans;

	if (merge == NULL)
		FUZZ_CHECK((merge = merge_new()) != NULL);
	if (size < 1)
		return 0;
	added = (size_t)(data[0] & 7) + 1;
	reserve = (data[0] & 8) != 0;
	depth = 1 + (data[0] >> 4);
	/* Odd sizes bound the members of each answer, to a few: the limit is met often. */
	max_members = (size & 1) ? 1 + size % 16 : SIZE_MAX;
	p = (const char *)data + 1;
	end = (const char *)data + size;
	while (nsrc < FUZZ_SOURCES && p <= end) {
		sep = memchr(p, 0xff, (size_t)(end - p));
		if (sep == NULL)
			sep = end;
		src[nsrc].p = p;
		src[nsrc].len = (size_t)(sep - p);
		src[nsrc++].added = 0;
		p = sep + 1;
	}
	if (added > nsrc)
		added = nsrc;

	for (round = 0; round < 2; round++) {
		FUZZ_CHECK(merge_reset(merge, nsrc) == 0);
		for (i = 0; i < added; i++) {
			size_t e;
			struct envelope env;

			ok = merge_add(merge, i, src[i].p, src[i].len, depth, max_members) == 0;
			envelope_init(&env);
			env.max_members = max_members;
			FUZZ_CHECK(ok == (src[i].len > 0 && src[i].p[0] == '{' &&
			    envelope_parse(&env, src[i].p, src[i].len, 0, depth, &e) == 0 &&
			    e == src[i].len));
			envelope_free(&env);
			src[i].added = ok;
			if (ok && round == 0) {
				fuzz_members(src[i].p, src[i].len, depth, &model, &n, &cap);
				all_valid &= jvalid_check(src[i].p, src[i].len, depth, NULL) ==
				    JVALID_OK;
			}
		}
		if (reserve)
			FUZZ_CHECK(merge_reserve(merge, reserved, sizeof(reserved) - 1) == 0);
		memset(&o, 0, sizeof(o));
		o.src = src;
		o.nsrc = nsrc;
		FUZZ_CHECK((o.buf = malloc(size + 2)) != NULL);
		spans = merge_spans(merge, fuzz_emit_cb, &o);
		FUZZ_CHECK(spans == o.spans);
		if (spans == 0)
			o.buf[o.len++] = '{';
		o.buf[o.len++] = '}';
		if (round == 0 && getenv("FUZZ_MERGE_SHOW") != NULL)
			fprintf(stderr, "%ld spans: %.*s\n", spans, (int)o.len, o.buf);

		FUZZ_CHECK((want = malloc(size + 2)) != NULL);
		want_len = fuzz_expected(model, n, reserve, want);
		if (want_len == 0)
			want[want_len++] = '{';
		want[want_len++] = '}';
		/* The merge keeps runs of members with the bytes between them: compare members. */
		fuzz_check_merged(o.buf, o.len, want, want_len, depth + 1);
		if (all_valid)
			FUZZ_CHECK(jvalid_check(o.buf, o.len, depth + 1, NULL) == JVALID_OK);
		free(want);
		free(o.buf);
	}
	for (i = 0; i < n; i++)
		free(model[i].key);
	free(model);
	return 0;
}
