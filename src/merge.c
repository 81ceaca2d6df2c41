#include "merge.h"
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"

/* What one merge may keep of its arrays for the next (more is freed by merge_release). */
#define MERGE_WARM_BYTES (256 * 1024)

/* A top-level member of an object: 24 bytes, as each answer may have max_members. */
struct merge_member {
	const char *key;                /* the key as written, quotes included ... */
	const char *end;                /* ... to the end of its value */
	uint32_t keylen;                /* 0 once merge_decide left the member out */
	uint32_t hash;                  /* of the decoded key */
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

static int merge_member_cb(void *arg, const struct envelope_member *em);

struct merge *
merge_new(void)
{
	struct merge *m = calloc(1, sizeof(*m));

	if (m != NULL) {
		envelope_init(&m->env);
		m->env.member_cb = merge_member_cb;
		m->env.member_arg = m;
	}
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

/* Free *arrp when it holds more than MERGE_WARM_BYTES. */
static void
merge_shrink(void *arrp, size_t *cap, size_t size)
{
	if (*cap * size <= MERGE_WARM_BYTES)
		return;
	free(*(void **)arrp);
	*(void **)arrp = NULL;
	*cap = 0;
}

void
merge_release(struct merge *m)
{
	merge_shrink(&m->members, &m->cap, sizeof(*m->members));
	merge_shrink(&m->table, &m->table_cap, sizeof(*m->table));
	merge_shrink(&m->scratch, &m->scratch_cap, 1);
	m->n = 0;
}

int
merge_reset(struct merge *m, size_t nsources)
{
	if (grow_array(&m->sources, &m->sources_cap, nsources, sizeof(*m->sources), 16) < 0)
		return -1;
	memset(m->sources, 0, nsources * sizeof(*m->sources));
	m->nsources = nsources;
	m->n = 0;
	m->reserved = 0;
	return 0;
}

static int
merge_escaped(const struct merge_member *mb)
{
	return memchr(mb->key, '\\', mb->keylen) != NULL;
}

/* A hash of the key's decoded text (escapes never change it). */
static int
merge_hash(struct merge *m, struct merge_member *mb)
{
	const unsigned char *p = (const unsigned char *)mb->key + 1;
	uint32_t h = 2166136261u;
	size_t n = mb->keylen - 2, i;

	if (merge_escaped(mb)) {
		if (grow_array(&m->scratch, &m->scratch_cap, mb->keylen, 1, 16) < 0 ||
		    envelope_string_decode(mb->key, mb->keylen, m->scratch, &n) < 0)
			return -1;
		p = (const unsigned char *)m->scratch;
	}
	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	mb->hash = h;
	return 0;
}

/* A top-level member of the object being added: 0, or 1 (the parse stops) without memory
 * (a key of 4 GB or more counts as that). */
static int
merge_member_cb(void *arg, const struct envelope_member *em)
{
	struct merge *m = arg;
	struct merge_member *mb;

	if (em->keylen > UINT32_MAX ||
	    grow_array(&m->members, &m->cap, m->n + 1, sizeof(*m->members), 16) < 0)
		return 1;
	mb = &m->members[m->n];
	mb->key = em->key;
	mb->keylen = (uint32_t)em->keylen;
	mb->end = em->val + em->vallen;
	if (merge_hash(m, mb) < 0)
		return 1;
	m->n++;
	return 0;
}

int
merge_add(struct merge *m, size_t source, const char *obj, size_t len, unsigned max_depth,
    size_t max_members)
{
	size_t first = m->n, end;
	int r;

	if (len == 0 || obj[0] != '{')
		return MERGE_ERR_NOT_OBJECT;
	m->env.max_members = max_members;
	r = envelope_parse(&m->env, obj, len, 0, max_depth, &end);
	if (r == 0 && end != len)
		r = ENVELOPE_ERR_SYNTAX;
	if (r != 0) {
		m->n = first;           /* the members of this object go */
		return r == ENVELOPE_ERR_MEMBERS ? MERGE_ERR_MEMBERS :
		    r == ENVELOPE_ERR_NOMEM || r > 0 ? MERGE_ERR_MEMORY : MERGE_ERR_NOT_OBJECT;
	}
	m->sources[source].first = first;
	m->sources[source].n = m->n - first;
	m->sources[source].added = 1;
	return 0;
}

int
merge_reserve(struct merge *m, const char *key, size_t len)
{
	struct merge_member *mb;

	if (len > UINT32_MAX ||
	    grow_array(&m->members, &m->cap, m->n + 1, sizeof(*m->members), 16) < 0)
		return -1;
	mb = &m->members[m->n];
	mb->key = key;
	mb->keylen = (uint32_t)len;
	mb->end = key + len;
	m->reserved = 1;
	return merge_hash(m, mb);
}

/* Two members' keys decode to the same text. */
static int
merge_key_eq(struct merge *m, const struct merge_member *x, const struct merge_member *y)
{
	const struct merge_member *t;
	int xe = merge_escaped(x), ye = merge_escaped(y);
	size_t n;

	if (!xe && !ye)
		return x->keylen == y->keylen && memcmp(x->key, y->key, x->keylen) == 0;
	if (!xe) {
		t = x;
		x = y;
		y = t;
		ye = 0;
	}
	/* x holds escapes: compare it with y's decoded text */
	if (!ye)
		return envelope_string_eq(x->key, x->keylen, y->key + 1, y->keylen - 2);
	if (grow_array(&m->scratch, &m->scratch_cap, y->keylen, 1, 16) < 0)
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

/* Walk from the last member back: the first of each key met is the one that stays, the
 * others are left out (their keylen set to 0). */
static int
merge_decide(struct merge *m)
{
	size_t cap = 16, s, k;
	struct merge_source *src;

	while (cap < 2 * (m->n + 1))
		cap *= 2;
	if (grow_array(&m->table, &m->table_cap, cap, sizeof(*m->table), 16) < 0)
		return -1;
	memset(m->table, 0, cap * sizeof(*m->table));
	if (m->reserved)
		merge_insert(m, m->n, cap - 1);
	for (s = m->nsources; s-- > 0;) {
		src = &m->sources[s];
		for (k = src->n; src->added && k-- > 0;)
			if (!merge_insert(m, src->first + k, cap - 1))
				m->members[src->first + k].keylen = 0;
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
			for (j = k; j < end && mb[j].keylen != 0; j++)
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
