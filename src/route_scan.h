/*
 * Routing by fields of a JSON request body (match.json), and the $json.PATH values a request
 * uses.
 *
 * The first limits.route_scan bytes of the body (the window), de-chunked and inflated, are
 * read where they lie in the client's input, without consuming them: once the route is
 * decided the request goes on as any other, its body streaming upstream as received.  Each
 * look, when bytes arrive, decides the routes in file order over one window: a route whose
 * field is not decided yet makes the request wait for more of the body; a field absent, not
 * found within the window, or a body that is not JSON, makes its route not match.
 *
 * The look that decides the route also captures the value of every $json.PATH the chosen
 * route reads (its ops' set values, its upstream's hash_key, log.json_fields): the decoded
 * text of a string, the bytes of any other value.  Ops, the hash key and the access log all
 * read these captures; nothing scans the body for them again.
 *
 * A route whose request ops take the body whole is the exception: its values are taken
 * once the body is in, from the whole of it as the ops read it (de-chunked, inflated), so
 * that the ops and the values they use read the same text; the window decides its route
 * only.  A body the ops end up not taking (chunked, past limits.max_body) gives the values
 * of its window.
 */
#ifndef JG_ROUTE_SCAN_H
#define JG_ROUTE_SCAN_H

#include <stddef.h>

#include "body.h"
#include "config.h"
#include "http.h"
#include "http_body.h"

struct access_field;
struct body_pool;
struct evbuffer;
struct rewrite_vars;

/* A captured $json.PATH. */
struct route_scan_value {
	const char *path;               /* as the configuration holds it */
	size_t path_len;
	size_t off, len;                /* its text in the captures' buffer */
	int found;
};

/* Per client connection: its request's route scan. */
struct route_scan {
	size_t head_len;                /* the request head ahead of the body in the input */
	size_t seen;                    /* body bytes in the input at the last look */
	uint64_t payload;               /* without a length: payload bytes followed so far */
	struct body_cursor follow;      /* how far, to know when it ends */
	unsigned waiting : 1;           /* the route waits for more of the body */
	unsigned body_ended : 1;        /* the whole body is in the input */
	unsigned framing_bad : 1;
	char *text;                     /* the captured values' text */
	size_t text_len, text_cap;
	struct route_scan_value *vals;
	size_t nvals, vals_cap;
};

enum route_scan_result {
	ROUTE_SCAN_DONE,                /* *route is chosen (NULL: none matched) */
	ROUTE_SCAN_WAIT                 /* call again when the input grew */
};

/*
 * The route of the request whose head req (head_len bytes, parsed from the front of in)
 * comes before its body in in: the first route in file order whose host, path, methods and
 * match.json hold, with its $json.PATH values.  Routes that read no field never wait.
 * *allowed as route_match sets it.  A body with a Content-Length is read in in; one
 * without is read through peek (its session's, arg), which hands its payload over.
 * Returns an enum route_scan_result.
 */
int route_scan_match(struct route_scan *rs, struct body_pool *pool, const struct config *cfg,
    const struct http_request *req, struct evbuffer *in, size_t head_len, body_peek_fn peek,
    void *arg, const struct config_route **route, unsigned *allowed);

/* How much input to hold while waiting: the head and enough body to fill the window. */
size_t route_scan_input_max(const struct config *cfg, size_t head_len);

/* 1 when the route's request ops take this request's body whole (a JSON body in a coding
 * they read, within limits.max_body or chunked): route_scan_match leaves its values to
 * route_scan_read_body. */
int route_scan_collects(const struct config *cfg, const struct config_route *route,
    const struct http_request *req);
/* 1 when the route reads $json values (ops, header ops, its upstream's hash key, the log). */
int route_scan_reads_values(const struct config *cfg, const struct config_route *route);
/* The route's values from its whole request body[0..len), identity-coded. */
void route_scan_read_body(struct route_scan *rs, const struct config *cfg,
    const struct config_route *route, const char *body, size_t len);
/* The route's values from the window of body[0..len), the first bytes (de-chunked, in
 * coding) of a body longer than that. */
void route_scan_read_prefix(struct route_scan *rs, struct body_pool *pool,
    const struct config *cfg, const struct config_route *route, enum body_coding coding,
    const char *body, size_t len);

/* The captured text of $json.PATH: 1, or 0 when the field is absent (or was not read). */
int route_scan_value(const struct route_scan *rs, const char *path, size_t len,
    const char **text, size_t *text_len);
/* Let $json.PATH in ops read the captures. */
void route_scan_vars(const struct route_scan *rs, struct rewrite_vars *vars);
/* The log.json_fields of cfg with their values, into out[CONFIG_MAX_JSON_FIELDS]. */
size_t route_scan_log(const struct route_scan *rs, const struct config *cfg,
    struct access_field *out);
/* The request is over: its captures go (an idle connection keeps little). */
void route_scan_done(struct route_scan *rs);
void route_scan_free(struct route_scan *rs);

#endif
