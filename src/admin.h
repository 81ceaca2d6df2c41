/* The admin endpoint (admin.listen): GET /healthz and GET /metrics on the main thread. */
#ifndef JG_ADMIN_H
#define JG_ADMIN_H

struct config;
struct event_base;

/* Bind the admin address of cfg, if it has one (before privileges are dropped); 0 or -1. */
int admin_open(const struct config *cfg);
/* Serve the bound socket from base. */
int admin_start(struct event_base *base);
/* A new configuration: move to its address (or stop) when it changed; 0 or -1 (the old
 * address keeps serving). */
int admin_reconfigure(const struct config *cfg);
/* From now on /healthz answers 503. */
void admin_set_draining(void);
void admin_close(void);

#endif
