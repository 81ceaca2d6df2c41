/*
 * Server choice for one upstream: round robin, least connections and a consistent hash ring.
 * Pure functions over an array of servers the caller keeps per worker and updates in place
 * before each pick; no I/O, no clock, no locking.  Every policy chooses among the usable
 * primaries, and among the usable backups only when no primary is usable.  A pick allocates
 * nothing and costs O(n) (the ring adds O(log points) and a walk past unusable servers).
 */
#ifndef JG_BALANCE_H
#define JG_BALANCE_H

#include <stddef.h>
#include <stdint.h>

/* Points a server of weight 1 places on the hash ring (ketama's figure). */
#define BALANCE_RING_POINTS 160

struct balance_server {
	const char *id;                 /* stable identity on the hash ring: "10.0.0.8:9001" */
	unsigned weight;                /* >= 1 */
	unsigned in_flight;             /* requests in flight to it now (least_conn) */
	unsigned usable : 1;            /* may take this request now: not ejected, not failing
	                                   checks, not tried by this request, under its limits */
	unsigned backup : 1;            /* takes traffic only while no primary is usable */
	int rr_current;                 /* round robin state: 0 when the array is built */
};

/*
 * nginx's smooth weighted round robin over the usable servers: weights {5,1,1} give
 * a a b a c a a.  An unusable server neither gains weight nor is picked.  Returns the index
 * chosen, or -1 when no server is usable.
 */
int balance_round_robin(struct balance_server *servers, size_t n);

/*
 * The usable server with the fewest requests in flight relative to its weight.  Ties are
 * broken at random, never by position: one of the tied servers is drawn in proportion to its
 * weight, so that idle servers take traffic in the proportion of their weights (between two
 * equal servers, as Envoy's two random choices would).  rng is the worker's random state:
 * any seed, advanced only when there is a tie.  Returns the index chosen, or -1.
 */
int balance_least_conn(const struct balance_server *servers, size_t n, uint64_t *rng);

struct balance_ring;

/*
 * The consistent hash ring of a server set: BALANCE_RING_POINTS x weight points per server,
 * placed by hashing its id, primaries and backups on rings of their own.  Built when the
 * server set changes, read-only afterwards (one ring may serve every worker).  NULL when out
 * of memory.
 */
struct balance_ring *balance_ring_build(const struct balance_server *servers, size_t n);
void balance_ring_free(struct balance_ring *ring);

/*
 * The server owning key on the ring, or when it is not usable the next usable server
 * clockwise, so that the keys of other servers never move.  servers is the array the ring was
 * built from (same order and length), with usable up to date.  Returns the index, or -1.
 */
int balance_hash(const struct balance_ring *ring, const struct balance_server *servers,
    const void *key, size_t keylen);

#endif
