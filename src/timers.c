/* Deadlines in one list per duration, woken by one libevent timer (see timers.h). */
#include <stdlib.h>
#include <time.h>

#include <event2/event.h>

#include "timers.h"

TAILQ_HEAD(deadline_queue, deadline);

struct timer_list {
	uint64_t ms;                    /* the duration every deadline in it was started with */
	struct deadline_queue queue;    /* earliest first */
};

struct timers {
	struct event_base *base;
	struct event *wake;
	uint64_t wake_at;               /* when the wake timer fires, 0: not pending */
	struct timer_list *lists;
	size_t nlists, cap;
};

static void timers_wake_cb(evutil_socket_t fd, short what, void *arg);

uint64_t
timers_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct timers *
timers_new(struct event_base *base)
{
	struct timers *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->base = base;
	if ((t->wake = evtimer_new(base, timers_wake_cb, t)) == NULL) {
		free(t);
		return NULL;
	}
	return t;
}

void
timers_free(struct timers *t)
{
	if (t == NULL)
		return;
	event_free(t->wake);
	free(t->lists);
	free(t);
}

struct event_base *
timers_base(const struct timers *t)
{
	return t->base;
}

size_t
timers_lists(const struct timers *t)
{
	return t->nlists;
}

/* Wake the loop at `at` unless it wakes earlier already. */
static void
timers_wake_at(struct timers *t, uint64_t at, uint64_t now)
{
	uint64_t ms = at > now ? at - now : 1;
	struct timeval tv;

	if (t->wake_at != 0 && t->wake_at <= at)
		return;
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	evtimer_add(t->wake, &tv);
	t->wake_at = now + ms;
}

/* Lists are few (one per configured timeout) and looked for on every start; an empty one
 * serves a new duration, so durations a reload dropped do not pile up. */
static struct timer_list *
timers_list(struct timers *t, uint64_t ms)
{
	struct timer_list *l, *empty = NULL;
	size_t i, j;

	for (i = 0; i < t->nlists; i++) {
		if (t->lists[i].ms == ms)
			return &t->lists[i];
		if (empty == NULL && TAILQ_EMPTY(&t->lists[i].queue))
			empty = &t->lists[i];
	}
	if (empty != NULL) {
		empty->ms = ms;
		return empty;
	}
	if (t->nlists == t->cap) {
		size_t cap = t->cap != 0 ? t->cap * 2 : 8;

		if ((l = malloc(cap * sizeof(*l))) == NULL)
			return NULL;
		/* Deadlines point at their list: move every queue head to the new array. */
		for (j = 0; j < t->nlists; j++) {
			struct deadline *d;

			l[j].ms = t->lists[j].ms;
			TAILQ_INIT(&l[j].queue);
			while ((d = TAILQ_FIRST(&t->lists[j].queue)) != NULL) {
				TAILQ_REMOVE(&t->lists[j].queue, d, entry);
				TAILQ_INSERT_TAIL(&l[j].queue, d, entry);
				d->list = &l[j];
			}
		}
		free(t->lists);
		t->lists = l;
		t->cap = cap;
	}
	l = &t->lists[t->nlists++];
	l->ms = ms;
	TAILQ_INIT(&l->queue);
	return l;
}

void
deadline_init(struct deadline *d, struct timers *t, deadline_cb cb, void *arg)
{
	d->timers = t;
	d->list = NULL;
	d->at = d->ms = 0;
	d->cb = cb;
	d->arg = arg;
}

int
deadline_start(struct deadline *d, uint64_t ms)
{
	struct timers *t = d->timers;
	uint64_t now = timers_now(), at = now + ms;
	struct timer_list *l = d->list;

	if (l != NULL && l->ms == ms) {
		if (d->at == at)
			return 0;       /* started again within the clock's resolution */
		TAILQ_REMOVE(&l->queue, d, entry);
	} else {
		deadline_stop(d);
		if ((l = timers_list(t, ms)) == NULL)
			return -1;
	}
	d->list = l;
	d->at = at;
	d->ms = ms;
	TAILQ_INSERT_TAIL(&l->queue, d, entry);
	/* Later than the list's head: the wake-up for the head comes first anyway. */
	if (TAILQ_FIRST(&l->queue) == d)
		timers_wake_at(t, at, now);
	return 0;
}

void
deadline_stop(struct deadline *d)
{
	if (d->list == NULL)
		return;
	TAILQ_REMOVE(&d->list->queue, d, entry);
	d->list = NULL;
}

/* The list whose head is due first, or NULL when no head is due by now. */
static struct timer_list *
timers_first_due(struct timers *t, uint64_t now)
{
	struct timer_list *first = NULL;
	struct deadline *d;
	size_t i;

	for (i = 0; i < t->nlists; i++)
		if ((d = TAILQ_FIRST(&t->lists[i].queue)) != NULL && d->at <= now &&
		    (first == NULL || d->at < TAILQ_FIRST(&first->queue)->at))
			first = &t->lists[i];
	return first;
}

/* Run every deadline that is due, earliest first, then sleep until the earliest one left. */
static void
timers_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct timers *t = arg;
	uint64_t now = timers_now(), next = 0;
	struct timer_list *l;
	struct deadline *d;
	size_t i;

	(void)fd;
	(void)what;
	t->wake_at = 0;
	/* A callback may start or stop any deadline: look for the next one afresh each time. */
	while ((l = timers_first_due(t, now)) != NULL) {
		d = TAILQ_FIRST(&l->queue);
		deadline_stop(d);
		d->cb(d, d->arg);
	}
	for (i = 0; i < t->nlists; i++)
		if ((d = TAILQ_FIRST(&t->lists[i].queue)) != NULL && (next == 0 || d->at < next))
			next = d->at;
	if (next != 0 && (t->wake_at == 0 || next < t->wake_at))
		timers_wake_at(t, next, now);
}
