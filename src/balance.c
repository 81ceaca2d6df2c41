#include "balance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BALANCE_FNV_BASIS 0xcbf29ce484222325ULL
#define BALANCE_FNV_PRIME 0x100000001b3ULL
#define BALANCE_GOLDEN    0x9e3779b97f4a7c15ULL

struct balance_point {
	uint64_t hash;
	uint32_t server;
};

/* Primaries at points[0..nprimary), backups at points[nprimary..npoints), each sorted. */
struct balance_ring {
	size_t nservers;
	size_t nprimary;
	size_t npoints;
	struct balance_point points[];
};

/* splitmix64's finaliser: FNV-1a alone spreads short, similar keys poorly over 64 bits. */
static uint64_t
balance_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t
balance_fnv(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	while (len-- > 0) {
		h ^= *p++;
		h *= BALANCE_FNV_PRIME;
	}
	return h;
}

/* A number below bound (>= 1), from the worker's splitmix64 sequence. */
static uint32_t
balance_random_below(uint64_t *rng, uint32_t bound)
{
	*rng += BALANCE_GOLDEN;
	return (uint32_t)(((balance_mix(*rng) >> 32) * bound) >> 32);
}

/* Which servers a pick considers: 0 the primaries, 1 the backups, -1 none is usable. */
static int
balance_tier(const struct balance_server *servers, size_t n)
{
	int backups = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!servers[i].usable)
			continue;
		if (!servers[i].backup)
			return 0;
		backups = 1;
	}
	return backups ? 1 : -1;
}

int
balance_round_robin(struct balance_server *servers, size_t n)
{
	int tier = balance_tier(servers, n), best = -1, total = 0;
	size_t i;

	for (i = 0; i < n && tier >= 0; i++) {
		struct balance_server *s = &servers[i];
		if (!s->usable || s->backup != (unsigned)tier)
			continue;
		s->rr_current += (int)s->weight;
		total += (int)s->weight;
		if (best < 0 || s->rr_current > servers[best].rr_current)
			best = (int)i;
	}
	if (best >= 0)
		servers[best].rr_current -= total;
	return best;
}

/* in_flight / weight of a against b: <0, 0 or >0, compared without division. */
static int
balance_load_cmp(const struct balance_server *a, const struct balance_server *b)
{
	uint64_t mine = (uint64_t)a->in_flight * b->weight;
	uint64_t theirs = (uint64_t)b->in_flight * a->weight;

	return mine < theirs ? -1 : mine > theirs;
}

/* A server of tier loaded as servers[best], drawn in proportion to weight: r is below the
 * sum of their weights. */
static int
balance_tied(const struct balance_server *servers, size_t n, int tier, int best, uint64_t r)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const struct balance_server *s = &servers[i];
		if (!s->usable || s->backup != (unsigned)tier ||
		    balance_load_cmp(s, &servers[best]) != 0)
			continue;
		if (r < s->weight)
			return (int)i;
		r -= s->weight;
	}
	return best;
}

int
balance_least_conn(const struct balance_server *servers, size_t n, uint64_t *rng)
{
	int tier = balance_tier(servers, n), best = -1;
	uint64_t tied_weight = 0;
	uint32_t tied = 0;
	size_t i;
	int c = 0;

	for (i = 0; i < n && tier >= 0; i++) {
		const struct balance_server *s = &servers[i];
		if (!s->usable || s->backup != (unsigned)tier)
			continue;
		if (best < 0 || (c = balance_load_cmp(s, &servers[best])) < 0) {
			best = (int)i;
			tied = 1;
			tied_weight = s->weight;
		} else if (c == 0) {
			tied++;
			tied_weight += s->weight;
		}
	}
	if (tied < 2)
		return best;
	/* Equally loaded (per weight): a random one, in proportion to its weight, never the
	 * first in the list as such.  Between two equal servers this picks as Envoy's two
	 * random choices would; with weights it keeps idle traffic in their proportion. */
	return balance_tied(servers, n, tier, best,
	    balance_random_below(rng, (uint32_t)tied_weight));
}

static int
balance_point_cmp(const void *a, const void *b)
{
	const struct balance_point *pa = a, *pb = b;

	if (pa->hash != pb->hash)
		return pa->hash < pb->hash ? -1 : 1;
	return pa->server < pb->server ? -1 : pa->server > pb->server;
}

/* Append the points of every server of one tier; returns the new count. */
static size_t
balance_ring_place(struct balance_ring *ring, size_t at, const struct balance_server *servers,
    unsigned backup)
{
	char number[16];
	size_t i, start = at;
	unsigned p;

	for (i = 0; i < ring->nservers; i++) {
		uint64_t base;
		if (servers[i].backup != backup)
			continue;
		base = balance_fnv(BALANCE_FNV_BASIS, servers[i].id, strlen(servers[i].id));
		for (p = 0; p < BALANCE_RING_POINTS * servers[i].weight; p++) {
			int len = snprintf(number, sizeof(number), "#%u", p);
			ring->points[at].hash = balance_mix(balance_fnv(base, number, (size_t)len));
			ring->points[at].server = (uint32_t)i;
			at++;
		}
	}
	qsort(ring->points + start, at - start, sizeof(ring->points[0]), balance_point_cmp);
	return at;
}

struct balance_ring *
balance_ring_build(const struct balance_server *servers, size_t n)
{
	struct balance_ring *ring;
	size_t i, npoints = 0;

	for (i = 0; i < n; i++)
		npoints += (size_t)BALANCE_RING_POINTS * servers[i].weight;
	ring = malloc(sizeof(*ring) + npoints * sizeof(ring->points[0]));
	if (ring == NULL)
		return NULL;
	ring->nservers = n;
	ring->npoints = npoints;
	ring->nprimary = balance_ring_place(ring, 0, servers, 0);
	balance_ring_place(ring, ring->nprimary, servers, 1);
	return ring;
}

void
balance_ring_free(struct balance_ring *ring)
{
	free(ring);
}

/* Index in points[0..count) of the first point at or after hash, wrapping to 0. */
static size_t
balance_ring_find(const struct balance_point *points, size_t count, uint64_t hash)
{
	size_t lo = 0, hi = count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (points[mid].hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == count ? 0 : lo;
}

int
balance_hash(const struct balance_ring *ring, const struct balance_server *servers,
    const void *key, size_t keylen)
{
	int tier = balance_tier(servers, ring->nservers);
	const struct balance_point *points;
	size_t count, at, walked;

	if (tier < 0)
		return -1;
	points = ring->points + (tier ? ring->nprimary : 0);
	count = tier ? ring->npoints - ring->nprimary : ring->nprimary;
	if (count == 0)
		return -1;
	at = balance_ring_find(points, count,
	    balance_mix(balance_fnv(BALANCE_FNV_BASIS, key, keylen)));
	for (walked = 0; walked < count; walked++) {
		if (servers[points[at].server].usable)
			return (int)points[at].server;
		if (++at == count)
			at = 0;
	}
	return -1;
}
