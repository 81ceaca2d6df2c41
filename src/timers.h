/*
 * The deadlines of one event loop (a worker's, or the main thread's): connection inactivity
 * timeouts and the like.  Every deadline jsongate runs is one of a few durations (the
 * configured timeouts), so deadlines are kept in one list per duration: a deadline (re)started
 * goes to the tail of its duration's list, which keeps each list in expiry order, and one
 * libevent timer wakes the loop for the earliest head.  Restarting a running deadline on
 * activity is a list move, where a libevent timeout per connection costs an event_add (and
 * a persistent event re-adds its timeout on every read and write edge).
 */
#ifndef JG_TIMERS_H
#define JG_TIMERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct timers;
struct timer_list;
struct deadline;

typedef void (*deadline_cb)(struct deadline *d, void *arg);

struct deadline {
	TAILQ_ENTRY(deadline) entry;
	struct timers *timers;
	struct timer_list *list;        /* the list it runs in; NULL: not running */
	uint64_t at;                    /* when it expires, ms of timers_now() */
	uint64_t ms;                    /* the duration it was started with */
	deadline_cb cb;
	void *arg;
};

/* The deadlines of base; NULL without memory.  Free them before the base. */
struct timers *timers_new(struct event_base *base);
void timers_free(struct timers *t);
struct event_base *timers_base(const struct timers *t);
/* How many duration lists t has made (tests). */
size_t timers_lists(const struct timers *t);
/* Milliseconds of a monotonic clock (the coarse one: a few ms of resolution). */
uint64_t timers_now(void);

/* Once per deadline, before its first start. */
void deadline_init(struct deadline *d, struct timers *t, deadline_cb cb, void *arg);
/* (Re)start: cb runs ms (> 0) from now, from the loop, unless stopped or started again.
 * 0, or -1 without memory (a first use of a duration). */
int deadline_start(struct deadline *d, uint64_t ms);
void deadline_stop(struct deadline *d);

static inline int
deadline_running(const struct deadline *d)
{
	return d->list != NULL;
}

#endif
