/*
 * The servers of an upstream, one version at a time: the list as loaded, then a new list each
 * time a server given by host name resolves to other addresses.  The main thread makes the
 * versions and hands each worker its own reference (server_publish_set); a worker's pools follow
 * the newest, keeping the pooled connections of the addresses that stay.  A version is freed
 * when its last reference goes, on whichever thread that is.
 */
#ifndef JG_UPSTREAM_SET_H
#define JG_UPSTREAM_SET_H

#include <stdatomic.h>
#include <stddef.h>

#include "config.h"
#include "resolver.h"

struct upstream_set {
	atomic_uint refs;
	const struct config *cfg;       /* the configuration it belongs to */
	size_t upstream;                /* its index in cfg->upstreams */
	struct config_server *servers;  /* copies of the configured servers, plus those made
	                                 * from answers (their addresses are the set's) */
	size_t nservers;
	unsigned char *owned;           /* per server: 1 when its address is the set's to free */
	struct resolver_answer *answers;    /* per named entry of the upstream: its addresses in
	                                     * this version */
};

/* Main thread: the first version of every upstream of cfg (its servers as loaded), bound to
 * metrics and shared state by the caller before workers see them.  0 or -1. */
int upstream_sets_init(struct config *cfg);
/* Main thread: drop the configuration's own references (before config_free). */
void upstream_sets_release(struct config *cfg);

/*
 * Main thread: entry (a named server of up) now resolves to ans.  Returns the upstream's next
 * version, with one reference for the caller, or NULL when it is the same as the current one
 * or memory ran out (logged).  The caller binds it, makes it up->current and publishes it.
 */
struct upstream_set *upstream_set_renamed(struct config_upstream *up,
    const struct config_server_name *entry, const struct resolver_answer *ans);

void upstream_set_ref(struct upstream_set *set);
void upstream_set_unref(struct upstream_set *set);

#endif
