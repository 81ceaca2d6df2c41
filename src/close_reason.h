/* Why a client connection closed: one table for the reasons, their metrics label and the
 * text the debug log gives. */
#ifndef JG_CLOSE_REASON_H
#define JG_CLOSE_REASON_H

#define CLIENT_CLOSE_REASONS(X) \
	X(CLIENT_CLOSED,     "client_closed",     "the client closed the connection") \
	X(CLIENT_ERROR,      "client_error",      "the connection failed (reset, TLS error)") \
	X(KEEPALIVE_TIMEOUT, "keepalive_timeout", "idle for timeouts.keepalive") \
	X(HEADER_TIMEOUT,    "header_timeout",    "no whole request head within timeouts.client_header") \
	X(CLIENT_TIMEOUT,    "client_timeout",    "the client sent or read nothing for timeouts.client_body") \
	X(NOT_KEEPALIVE,     "not_keepalive",     "the request or the configuration ends the connection after its answer") \
	X(BAD_REQUEST,       "bad_request",       "a request that cannot be read or framed") \
	X(LIMIT,             "limit",             "a request over a limit") \
	X(UNREAD_BODY,       "unread_body",       "answered before its request body was read") \
	X(UPSTREAM_ERROR,    "upstream_error",    "the answer was cut short by its upstream") \
	X(SHUTDOWN,          "shutdown",          "the gateway is stopping") \
	X(RELOAD,            "reload",            "a new configuration: HTTP/2 clients told to go (GOAWAY)") \
	X(OUT_OF_MEMORY,     "out_of_memory",     "no memory for the request") \
	X(TUNNEL_ENDED,      "tunnel_ended",      "a tunnel over it ended (jsongate_tunnels_total says how)")

enum client_close {
	CLIENT_CLOSE_NONE = -1,         /* not decided yet */
#define X(name, label, text) CLIENT_CLOSE_##name,
	CLIENT_CLOSE_REASONS(X)
#undef X
	CLIENT_CLOSE__COUNT
};

struct client_close_info {
	const char *label;
	const char *text;
};

extern const struct client_close_info client_closes[CLIENT_CLOSE__COUNT];

/* How a tunnel (an upgraded connection, tunnel.c) ended: the outcome label of
 * jsongate_tunnels_total and of its access log line. */
#define TUNNEL_CLOSE_REASONS(X) \
	X(CLIENT_CLOSED,     "client_closed",     "the client closed its side first") \
	X(UPSTREAM_CLOSED,   "upstream_closed",   "the upstream closed its side first") \
	X(CLIENT_ERROR,      "client_error",      "the client connection failed (reset, TLS error)") \
	X(UPSTREAM_ERROR,    "upstream_error",    "the upstream connection failed") \
	X(IDLE_TIMEOUT,      "idle_timeout",      "no byte either way for timeouts.tunnel") \
	X(SHUTDOWN,          "shutdown",          "the gateway stopped (shutdown_grace over)")

enum tunnel_close {
	TUNNEL_CLOSE_NONE = -1,
#define X(name, label, text) TUNNEL_CLOSE_##name,
	TUNNEL_CLOSE_REASONS(X)
#undef X
	TUNNEL_CLOSE__COUNT
};

extern const struct client_close_info tunnel_closes[TUNNEL_CLOSE__COUNT];

#endif
