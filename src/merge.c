#include "config.h"
#include "merge.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"

/* A top-level member of an object. */
struct merge_member {
	const char *key;                /* the key as written, quotes included ... */
	size_t keylen;
	const char *end;                /* ... to the end of its value */
	uint64_t hash;                  /* of the decoded key */
	unsigned escaped : 1;           /* the key holds escapes */
	unsigned keep : 1;              /* no later member has an equal key */
};

struct merge_source {
	size_t first, n;                /* its members */
	int added;
};

struct merge {
	struct envelope env;
	struct merge_member *members;   /* every object's, then the reserved key's */
	size_t n, cap;
	struct merge_source *sources;
	size_t nsources, sources_cap;
	uint32_t *table;                /* members by hash of key: index + 1, 0 when free */
	size_t table_cap;
	char *scratch;                  /* a decoded key */
	size_t scratch_cap;
	int reserved;                   /* the last member is the reserved key */
};

struct merge *
merge_new(void)
{
	struct merge *m = calloc(1, sizeof(*m));

	if (m != NULL)
		envelope_init(&m->env);
	return m;
}

void
merge_free(struct merge *m)
{
	if (m == NULL)
		return;
	envelope_free(&m->env);
	free(m->members);
	free(m->sources);
	free(m->table);
	free(m->scratch);
	free(m);
}

static int
merge_grow(void *arrp, size_t *cap, size_t need, size_t size)
{
	void *grown;

	if (need <= *cap)
		return 0;
	if ((grown = realloc(*(void **)arrp, need * size)) == NULL)
		return -1;
	*(void **)arrp = grown;
	*cap = need;
	return 0;
}

int
merge_reset(struct merge *m, size_t nsources)
{
	if (merge_grow(&m->sources, &m->sources_cap, nsources, sizeof(*m->sources)) < 0)
		return -1;
	memset(m->sources, 0, nsources * sizeof(*m->sources));
	m->nsources = nsources;
	m->n = 0;
	m->reserved = 0;
	return 0;
}

/* A hash of the key's decoded text (escapes never change it). */
static int
merge_hash(struct merge *m, struct merge_member *mb)
{
	const unsigned char *p = (const unsigned char *)mb->key + 1;
	uint64_t h = 1469598103934665603ULL;
	size_t n = mb->keylen - 2, i;

	mb->escaped = memchr(mb->key, '\\', mb->keylen) != NULL;
	if (mb->escaped) {
		if (merge_grow(&m->scratch, &m->scratch_cap, mb->keylen, 1) < 0 ||
		    envelope_string_decode(mb->key, mb->keylen, m->scratch, &n) < 0)
			return -1;
		p = (const unsigned char *)m->scratch;
	}
	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	mb->hash = h;
	return 0;
}

int
merge_add(struct merge *m, size_t source, const char *obj, size_t len, unsigned max_depth)
{
	const struct envelope_member *em;
	struct merge_member *mb;
	size_t i, end;

	if (len == 0 || obj[0] != '{' || envelope_parse(&m->env, obj, len, 0, max_depth,
	    &end) != 0 || end != len)
		return -1;
	if (merge_grow(&m->members, &m->cap, m->n + m->env.nmembers + 1, sizeof(*m->members)) < 0)
		return -1;
	m->sources[source].first = m->n;
	m->sources[source].n = m->env.nmembers;
	m->sources[source].added = 1;
	for (i = 0; i < m->env.nmembers; i++) {
		em = &m->env.members[i];
		mb = &m->members[m->n++];
		mb->key = em->key;
		mb->keylen = em->keylen;
		mb->end = em->val + em->vallen;
		if (merge_hash(m, mb) < 0)
			return -1;
	}
	return 0;
}

int
merge_reserve(struct merge *m, const char *key, size_t len)
{
	struct merge_member *mb;

	if (merge_grow(&m->members, &m->cap, m->n + 1, sizeof(*m->members)) < 0)
		return -1;
	mb = &m->members[m->n];
	mb->key = key;
	mb->keylen = len;
	mb->end = key + len;
	m->reserved = 1;
	return merge_hash(m, mb);
}

/* Two members' keys decode to the same text. */
static int
merge_key_eq(struct merge *m, const struct merge_member *x, const struct merge_member *y)
{
	const struct merge_member *t;
	size_t n;

	if (!x->escaped && !y->escaped)
		return x->keylen == y->keylen && memcmp(x->key, y->key, x->keylen) == 0;
	if (!x->escaped) {
		t = x;
		x = y;
		y = t;
	}
	/* x holds escapes: compare it with y's decoded text */
	if (!y->escaped)
		return envelope_string_eq(x->key, x->keylen, y->key + 1, y->keylen - 2);
	if (merge_grow(&m->scratch, &m->scratch_cap, y->keylen, 1) < 0)
		return 0;
	return envelope_string_decode(y->key, y->keylen, m->scratch, &n) == 0 &&
	    envelope_string_eq(x->key, x->keylen, m->scratch, n);
}

/* Insert mb (index i) unless an equal key is in already: 1 when inserted. */
static int
merge_insert(struct merge *m, size_t i, size_t mask)
{
	const struct merge_member *mb = &m->members[i], *other;
	size_t slot;

	for (slot = mb->hash & mask; m->table[slot] != 0; slot = (slot + 1) & mask) {
		other = &m->members[m->table[slot] - 1];
		if (other->hash == mb->hash && merge_key_eq(m, other, mb))
			return 0;
	}
	m->table[slot] = (uint32_t)(i + 1);
	return 1;
}

/* Walk from the last member back: the first of each key met is the one that stays. */
static int
merge_decide(struct merge *m)
{
	size_t cap = 16, s, k;
	struct merge_source *src;

	while (cap < 2 * (m->n + 1))
		cap *= 2;
	if (merge_grow(&m->table, &m->table_cap, cap, sizeof(*m->table)) < 0)
		return -1;
	memset(m->table, 0, cap * sizeof(*m->table));
	if (m->reserved)
		merge_insert(m, m->n, cap - 1);
	for (s = m->nsources; s-- > 0;) {
		src = &m->sources[s];
		for (k = src->n; src->added && k-- > 0;)
			m->members[src->first + k].keep = merge_insert(m, src->first + k, cap - 1);
	}
	return 0;
}

long
merge_spans(struct merge *m, merge_emit_fn emit, void *arg)
{
	const struct merge_member *mb;
	const struct merge_source *src;
	size_t s, k, j, end;
	long spans = 0;

	if (merge_decide(m) < 0)
		return -1;
	mb = m->members;
	for (s = 0; s < m->nsources; s++) {
		src = &m->sources[s];
		end = src->added ? src->first + src->n : src->first;
		for (k = src->first; k < end; k = j) {
			for (j = k; j < end && mb[j].keep; j++)
				;
			if (j == k) {
				j++;
				continue;
			}
			emit(arg, s, mb[k].key, (size_t)(mb[j - 1].end - mb[k].key));
			spans++;
		}
	}
	return spans;
}
