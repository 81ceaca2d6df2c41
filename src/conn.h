/* A non-blocking TCP socket with an input and an output evbuffer, driven by edge-triggered
 * events registered once: no epoll_ctl per read or write, reads as large as the data waiting
 * (libevent's bufferevents read 4 KB at a time), writes attempted at once. */
#ifndef JG_CONN_H
#define JG_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "timers.h"

struct event;
struct event_base;
struct evbuffer;
struct conn;
struct timeval;
struct ssl_st;

/* What a callback is told; several may be set at once (data, then EOF). */
enum conn_what {
	CONN_READ = 1 << 0,             /* input grew */
	CONN_EOF = 1 << 1,              /* the peer closed its side */
	CONN_ERROR = 1 << 2,            /* socket error: conn->error holds errno */
	CONN_TIMEOUT = 1 << 3,          /* read or write inactivity timeout */
	CONN_DRAINED = 1 << 4,          /* output fell to write_low (when asked for) */
	CONN_CONNECTED = 1 << 5         /* non-blocking connect completed */
};

typedef void (*conn_cb)(struct conn *c, int what, void *arg);

/* A connection's read_max unless its owner sets another. */
#define CONN_READ_MAX (256 * 1024)

struct conn {
	int fd;
	struct event *ev;               /* both directions, edge-triggered, one registration */
	int *alive;                     /* while an edge of both directions is handled: cleared
	                                 * by conn_close, so the second half is not run */
	struct evbuffer *in;
	struct evbuffer *out;
	conn_cb cb;
	void *arg;
	size_t read_max;                /* stop reading while input holds this much */
	size_t write_low;               /* CONN_DRAINED threshold */
	uint64_t read_timeout_ms;       /* 0: none */
	uint64_t write_timeout_ms;      /* 0: none */
	struct deadline rtimer, wtimer; /* the inactivity timeouts, running while they apply */
	char *sink;                     /* when set (plain TCP only), reads go here, not to in */
	size_t sink_left;               /* room left at sink; reaching 0 clears sink */
	int error;
	unsigned readable : 1;          /* an edge was seen and not read to the end */
	unsigned reading : 1;           /* the owner wants input */
	unsigned writable : 1;
	unsigned connecting : 1;
	unsigned eof : 1;
	unsigned want_drained : 1;
	unsigned peer_closed : 1;       /* the peer's FIN was signalled: read until end of stream */
	unsigned recheck : 1;           /* conn_read_again asked for one more read */
	/* TLS (ssl non-NULL): the same flags as above, plus what a stalled SSL call waits for. */
	struct conn_tls_state {
		unsigned handshaking : 1;
		unsigned read_wants_write : 1;  /* SSL_read must write first: retry when writable */
		unsigned write_wants_read : 1;  /* SSL_write must read first: retry when readable */
		unsigned failed : 1;    /* the handshake failed, or a TLS alert or protocol error
		                         * ended the connection (tls_conn_error says why) */
		unsigned fatal : 1;     /* a fatal TLS or socket error: no close_notify */
		unsigned holding : 1;   /* TLS records written now are held for the next ones;
		                         * held while not holding: what a full socket did not
		                         * take, sent on its next edge */
		unsigned sniffed : 1;   /* server side: the client's first byte was looked at */
		unsigned plain : 1;     /* a TLS server whose client spoke plain HTTP: TLS is
		                         * dropped (ssl is NULL) so that the owner can answer it in
		                         * clear text */
	} tls;
	struct ssl_st *ssl;             /* NULL: plain TCP */
	unsigned long tls_err;          /* OpenSSL error code of a fatal TLS error, or 0 */
	char *tls_held;                 /* records held back to go out with the next ones */
	size_t tls_held_len, tls_held_cap;
};

/* Take fd (non-blocking), on the loop of t; 0, or -1 on allocation failure (fd is then not
 * closed). */
int conn_init(struct conn *c, struct timers *t, int fd, conn_cb cb, void *arg);
/* Close the socket and free the buffers and events. */
void conn_close(struct conn *c);
void conn_set_cb(struct conn *c, conn_cb cb, void *arg);
/* Start a non-blocking connect; 0 (in progress or done) or -1 with errno. */
int conn_connect(struct conn *c, const struct sockaddr *sa, unsigned salen);

/*
 * Run TLS over the connection from now on; ssl (owned by the connection from here, freed by
 * conn_close) is set up for the server or the client side.  The handshake runs on the socket
 * events; on the client side its end is reported as CONN_CONNECTED (after the TCP connect),
 * a failure as CONN_ERROR with tls.failed set.  Output queued meanwhile waits for it.
 */
int conn_start_tls(struct conn *c, struct ssl_st *ssl);

/* Start or stop taking input.  Input already buffered is the owner's to look at; data that
 * reached the socket while stopped is read and reported from the loop. */
void conn_read_start(struct conn *c);
void conn_read_stop(struct conn *c);
/* Let the input hold max bytes: when that is more than before and the connection reads,
 * what the old limit held back is read from the loop (no new edge would say it is there). */
void conn_set_read_max(struct conn *c, size_t max);
/*
 * The owner took the input and still waits for more: read once more from the loop.  A peer
 * that sends data and resets at once gets one EPOLLERR edge, which libevent reports as a
 * plain read (no EV_CLOSED): without a second read the reset would show only when the read
 * timeout runs out.  Plain TCP only.
 */
void conn_read_again(struct conn *c);
/* Write as much of the output as the socket takes now; the rest goes when it is writable. */
void conn_flush(struct conn *c);
/* Output given to c and not yet in its socket: the buffer, and over TLS the records a
 * full socket left (what is 0 only once everything went out). */
size_t conn_out_left(const struct conn *c);
/* Ask (on) or stop asking for CONN_DRAINED once the output holds at most low bytes. */
void conn_notify_drained(struct conn *c, int on, size_t low);
void conn_set_timeouts(struct conn *c, uint64_t read_ms, uint64_t write_ms);
/* A timeval for ms to pass to event_add on ev: a common-timeout one where libevent allows
 * (constant-time queues), else tv filled in. */
const struct timeval *conn_timeout_tv(struct event *ev, uint64_t ms, struct timeval *tv);

#endif
