/*
 * A policy's jwks: the key set at an https URL, fetched by the daemon's main thread for all
 * workers, refreshed, and fetched again for a token whose kid it lacks (at most once every
 * AUTH_JWKS_KID_INTERVAL_MS for the daemon).  See auth_jwks.c.
 */
#ifndef JG_AUTH_JWKS_H
#define JG_AUTH_JWKS_H

struct auth_jwks;
struct config;
struct event_base;
struct jwk_set;

#define AUTH_JWKS_KID_INTERVAL_MS 10000
/* How long a token whose kid is unknown waits for the fetch it asked for. */
#define AUTH_JWKS_WAIT_MS 2000

/* The key set of url verified with ca (NULL: the system's), one for the daemon's life: made
 * at the first load naming it, not fetched until auth_jwks_start.  NULL with *why for a URL
 * that is not https://HOST[:PORT][/PATH]. */
struct auth_jwks *auth_jwks_get(const char *url, const char *ca, const char **why);
/* Main thread: fetch the key sets of cfg's policies (those not fetched yet start now). */
void auth_jwks_start(struct event_base *base, const struct config *cfg);
/* Main thread, at exit. */
void auth_jwks_stop_all(void);

/* Workers: the last good set (a reference, or NULL: none yet) and its generation. */
struct jwk_set *auth_jwks_keys(struct auth_jwks *j, unsigned *generation);
unsigned auth_jwks_generation(struct auth_jwks *j);
/* A fetch is asked for or running. */
int auth_jwks_fetching(struct auth_jwks *j);
/* A token's kid is not in the set: 1 when a fetch is running or was asked for now (wait for
 * it), 0 when one was asked for less than AUTH_JWKS_KID_INTERVAL_MS ago (refuse now). */
int auth_jwks_refetch(struct auth_jwks *j);

#endif
