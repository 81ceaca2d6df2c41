/* Active health checks: one checker per upstream server for the whole daemon, run on the
 * main thread's event loop; the results go to the state every worker reads. */
#ifndef JG_HEALTH_H
#define JG_HEALTH_H

#include <stddef.h>

struct event_base;
struct config;
struct config_health;

struct health;
struct jcond_scratch;

/* Check every server of every upstream of cfg that has `health:`; NULL when there is none
 * (or without memory, logged).  cfg must outlive the checks.  Servers of upstreams without
 * `health:` are no longer out of service for checks they failed before a reload. */
struct health *health_start(struct event_base *base, const struct config *cfg);
/*
 * cfg's servers changed (a name resolved anew, cfg's upstreams being those of old): the
 * checks of servers that stay carry on with their counts and timers, new servers get checks
 * of their own, those of servers gone stop.  The checks in place now, old no longer.
 */
struct health *health_update(struct health *old, struct event_base *base,
    const struct config *cfg);
/* Stop all checks (checks in progress are dropped without a verdict). */
void health_stop(struct health *h);

/* 1 when an answer passes cfg's expectations: its status, and the JSON condition when set
 * (read with scratch); else 0 and *why. */
int health_expect(const struct config_health *cfg, int status, const char *body, size_t len,
    struct jcond_scratch *scratch, const char **why);

#endif
