/*
 * demo-upstream: a small HTTP/1.1 server behind jsongate for the quick start
 * and the scenario tests.
 *
 *   demo-upstream [-l ADDR:PORT] [-p PORTFILE]
 *
 * Port 0 picks an ephemeral port; the bound port is written to PORTFILE
 * before serving and "listening on ADDR:PORT" is printed to stderr.
 *
 *   GET /api/...        sample JSON envelopes {"code":0,"msg":"ok","data":{...}}
 *   GET /bytes/N        N bytes of the pattern below, with Content-Length
 *   GET /chunked/N      the same bytes with Transfer-Encoding: chunked
 *                       (close-delimited for HTTP/1.0 clients)
 *   POST|PUT /sink      reads any body, answers {"bytes":N,"crc32":C}
 *   ANY /echo           {"method","target","version","headers":[[n,v]..],"body"}
 *   ANY /status/N       status N with {"status":N}
 *   ANY /delay/MS       answers {"delay_ms":MS} after MS milliseconds
 *
 * Pattern: byte i of /bytes and /chunked is (i * 31 + 7) & 0xff.
 *
 * Bodies are streamed both ways with flow control (never held whole), so N
 * may be several gigabytes. libevent's evhttp reads whole request bodies
 * before calling a handler, hence the small parser here.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#define MAX_HEAD	(64 * 1024)	/* larger request heads get 431 */
#define MAX_ECHO	(1024 * 1024)	/* /echo keeps at most this much body */
#define BLOCK		(64 * 1024)	/* a multiple of the pattern period */
#define HIGH_WATER	(256 * 1024)	/* output kept queued while streaming */

enum state { S_HEAD, S_BODY, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_CRLF,
    S_TRAILER, S_WAIT, S_STREAM, S_CLOSING };

struct conn {
	struct bufferevent	*bev;
	struct event		*timer;
	enum state		 state;
	char			*head;		/* request head, NUL-terminated */
	char			 method[32];
	char			 target[2048];
	int			 minor;		/* HTTP/1.minor */
	int			 keepalive;
	int			 chunked_in;
	uint64_t		 left;		/* body or chunk bytes to read */
	uint64_t		 body_bytes;
	uLong			 crc;
	struct evbuffer		*echo;		/* body kept for /echo */
	uint64_t		 out_left;	/* streamed body bytes to send */
	int			 out_chunked;
};

static struct event_base *base;
static unsigned char pattern[BLOCK];

static const char *
reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 301: return "Moved Permanently";
	case 304: return "Not Modified";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Content Too Large";
	case 418: return "I'm a teapot";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default:  return "Unknown";
	}
}

/* Sample envelopes: nested data, unicode escapes, numbers past 2^53. */
static const struct sample {
	const char	*path;
	int		 status;
	const char	*body;
} samples[] = {
	{ "/api/orders/1", 200,
	  "{\"code\":0,\"msg\":\"ok\",\"data\":{\"id\":1,\"customer\":"
	  "{\"id\":42,\"name\":\"Ada Lovelace\"},\"items\":[{\"sku\":\"A-1\","
	  "\"qty\":2,\"price\":9.5},{\"sku\":\"B-7\",\"qty\":1,\"price\":120}],"
	  "\"total\":139.0,\"paid\":true,\"note\":null}}" },
	{ "/api/orders/2", 200,
	  "{\"code\":0,\"msg\":\"ok\",\"data\":{\"id\":2,\"customer\":"
	  "{\"id\":7,\"name\":\"Jos\\u00e9 \\u00c1lvarez \\u2603\"},"
	  "\"items\":[],\"total\":0,\"paid\":false,\"note\":\"line\\nbreak "
	  "\\\"quoted\\\" \\ud83d\\ude00\"}}" },
	{ "/api/orders/404", 404,
	  "{\"code\":404,\"msg\":\"order not found\",\"data\":{\"error\":"
	  "{\"kind\":\"not_found\",\"details\":{\"order_id\":404,"
	  "\"checked\":[\"primary\",\"archive\"]}}}}" },
	{ "/api/stats", 200,
	  "{\"code\":0,\"msg\":\"ok\",\"data\":{\"requests\":18446744073709551615,"
	  "\"bytes\":123456789012345678901234567890,\"ratio\":1.5e-300,"
	  "\"neg\":-9007199254740993,\"empty\":{},\"list\":[[],[{}]]}}" },
	{ "/api/orders", 200,
	  "{\"code\":0,\"msg\":\"ok\",\"data\":{\"orders\":[1,2],\"next\":null}}" },
};

static void conn_free(struct conn *);
static void conn_read_cb(struct bufferevent *, void *);

static void
reply_head(struct conn *c, int status, const char *ctype, int64_t length,
    int chunked)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nServer: demo-upstream\r\n",
	    status, reason(status));
	if (ctype != NULL)
		evbuffer_add_printf(out, "Content-Type: %s\r\n", ctype);
	if (length >= 0)
		evbuffer_add_printf(out, "Content-Length: %" PRId64 "\r\n", length);
	if (chunked)
		evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n");
	if (!c->keepalive)
		evbuffer_add_printf(out, "Connection: close\r\n");
	else if (c->minor == 0)
		evbuffer_add_printf(out, "Connection: keep-alive\r\n");
	evbuffer_add(out, "\r\n", 2);
}

/* The response is queued: close, or read the next request. */
static void
reply_done(struct conn *c)
{
	free(c->head);
	c->head = NULL;
	if (c->echo != NULL)
		evbuffer_free(c->echo);
	c->echo = NULL;
	if (!c->keepalive) {
		c->state = S_CLOSING;
		bufferevent_disable(c->bev, EV_READ);
		return;
	}
	c->state = S_HEAD;
	bufferevent_enable(c->bev, EV_READ);
}

static void
reply_json(struct conn *c, int status, const char *body)
{
	int bodyless = status == 204 || status == 304;

	reply_head(c, status, bodyless ? NULL : "application/json",
	    bodyless ? -1 : (int64_t)strlen(body), 0);
	if (!bodyless && strcmp(c->method, "HEAD") != 0)
		evbuffer_add(bufferevent_get_output(c->bev), body, strlen(body));
	reply_done(c);
}

/* Tops the output up to HIGH_WATER; the write callback calls it again. */
static void
stream_fill(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	while (c->out_left > 0 && evbuffer_get_length(out) < HIGH_WATER) {
		size_t n = c->out_left < BLOCK ? (size_t)c->out_left : BLOCK;

		if (c->out_chunked)
			evbuffer_add_printf(out, "%zx\r\n", n);
		evbuffer_add_reference(out, pattern, n, NULL, NULL);
		if (c->out_chunked)
			evbuffer_add(out, "\r\n", 2);
		c->out_left -= n;
	}
	if (c->out_left == 0) {
		if (c->out_chunked)
			evbuffer_add(out, "0\r\n\r\n", 5);
		reply_done(c);
	}
}

static void
stream_start(struct conn *c, uint64_t n, int chunked)
{
	int close_delimited = chunked && c->minor == 0;

	if (close_delimited)
		c->keepalive = 0;
	reply_head(c, 200, "application/octet-stream",
	    chunked ? -1 : (int64_t)n, chunked && !close_delimited);
	if (strcmp(c->method, "HEAD") == 0) {
		reply_done(c);
		return;
	}
	c->out_left = n;
	c->out_chunked = chunked && !close_delimited;
	c->state = S_STREAM;
	bufferevent_disable(c->bev, EV_READ);
	stream_fill(c);
}

static void
json_string(struct evbuffer *out, const unsigned char *s, size_t len)
{
	evbuffer_add(out, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '"' || s[i] == '\\')
			evbuffer_add_printf(out, "\\%c", s[i]);
		else if (s[i] < 0x20 || s[i] >= 0x7f)
			evbuffer_add_printf(out, "\\u%04x", s[i]);
		else
			evbuffer_add(out, &s[i], 1);
	}
	evbuffer_add(out, "\"", 1);
}

static void
reply_echo(struct conn *c)
{
	struct evbuffer *b = evbuffer_new();
	char *line, *next, *colon;
	const char *sep = "";

	evbuffer_add_printf(b, "{\"method\":");
	json_string(b, (unsigned char *)c->method, strlen(c->method));
	evbuffer_add_printf(b, ",\"target\":");
	json_string(b, (unsigned char *)c->target, strlen(c->target));
	evbuffer_add_printf(b, ",\"version\":\"HTTP/1.%d\",\"headers\":[", c->minor);
	line = strchr(c->head, '\n') + 1;
	for (; *line != '\0' && *line != '\r' && *line != '\n'; line = next) {
		next = strchr(line, '\n');
		next = next != NULL ? next + 1 : line + strlen(line);
		if ((colon = memchr(line, ':', next - line)) == NULL)
			continue;
		char *v = colon + 1, *e = next;
		while (*v == ' ' || *v == '\t')
			v++;
		while (e > v && (e[-1] == '\n' || e[-1] == '\r' ||
		    e[-1] == ' ' || e[-1] == '\t'))
			e--;
		evbuffer_add_printf(b, "%s[", sep);
		json_string(b, (unsigned char *)line, colon - line);
		evbuffer_add(b, ",", 1);
		json_string(b, (unsigned char *)v, e - v);
		evbuffer_add(b, "]", 1);
		sep = ",";
	}
	evbuffer_add_printf(b, "],\"body_bytes\":%" PRIu64 ",\"body\":",
	    c->body_bytes);
	json_string(b, evbuffer_pullup(c->echo, -1), evbuffer_get_length(c->echo));
	evbuffer_add(b, "}", 2);		/* with the NUL */
	reply_json(c, 200, (char *)evbuffer_pullup(b, -1));
	evbuffer_free(b);
}

static void
delay_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	char body[64];

	(void)fd;
	(void)what;
	snprintf(body, sizeof(body), "{\"delay_ms\":%s}", c->target + 7);
	reply_json(c, 200, body);
	conn_read_cb(c->bev, c);	/* pipelined requests already read */
}

static void
dispatch(struct conn *c)
{
	const char *t = c->target;
	char body[96];
	unsigned long long n;

	if (strncmp(t, "/bytes/", 7) == 0 || strncmp(t, "/chunked/", 9) == 0) {
		n = strtoull(strchr(t + 1, '/') + 1, NULL, 10);
		stream_start(c, n, t[1] == 'c');
	} else if (strcmp(t, "/sink") == 0) {
		snprintf(body, sizeof(body), "{\"bytes\":%" PRIu64 ",\"crc32\":%lu}",
		    c->body_bytes, c->crc);
		reply_json(c, 200, body);
	} else if (strncmp(t, "/echo", 5) == 0) {
		reply_echo(c);
	} else if (strncmp(t, "/status/", 8) == 0) {
		int status = atoi(t + 8);
		snprintf(body, sizeof(body), "{\"status\":%d}", status);
		reply_json(c, status >= 200 && status <= 999 ? status : 400, body);
	} else if (strncmp(t, "/delay/", 7) == 0) {
		struct timeval tv;
		n = strtoull(t + 7, NULL, 10);
		tv.tv_sec = n / 1000;
		tv.tv_usec = (n % 1000) * 1000;
		c->state = S_WAIT;
		bufferevent_disable(c->bev, EV_READ);
		evtimer_add(c->timer, &tv);
	} else {
		for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
			if (strcmp(t, samples[i].path) == 0) {
				reply_json(c, samples[i].status, samples[i].body);
				return;
			}
		reply_json(c, 404,
		    "{\"code\":404,\"msg\":\"not found\",\"data\":null}");
	}
}

/* Accounts body bytes: crc32 and, for /echo, a bounded copy. */
static void
body_take(struct conn *c, struct evbuffer *in, size_t n)
{
	struct evbuffer_iovec v;

	while (n > 0 && evbuffer_peek(in, n, NULL, &v, 1) > 0) {
		size_t len = v.iov_len < n ? v.iov_len : n;
		c->crc = crc32(c->crc, v.iov_base, len);
		if (c->echo != NULL && evbuffer_get_length(c->echo) < MAX_ECHO)
			evbuffer_add(c->echo, v.iov_base, len);
		evbuffer_drain(in, len);
		c->body_bytes += len;
		c->left -= len;
		n -= len;
	}
}

static int
header_is(const char *name, const char *line)
{
	size_t len = strlen(name);
	return strncasecmp(line, name, len) == 0 && line[len] == ':';
}

/* Parses the head; returns the status to fail with, or 0. */
static int
parse_head(struct conn *c)
{
	char *line = c->head, *v;
	int have_close = 0, have_keepalive = 0, expect = 0;

	if (sscanf(line, "%31s %2047s HTTP/1.%d", c->method, c->target,
	    &c->minor) != 3)
		return 400;
	c->left = 0;
	c->chunked_in = 0;
	while ((line = strchr(line, '\n')) != NULL && *++line != '\0') {
		if ((v = strchr(line, ':')) == NULL)
			continue;
		for (v++; *v == ' ' || *v == '\t'; v++)
			;
		if (header_is("Content-Length", line))
			c->left = strtoull(v, NULL, 10);
		else if (header_is("Transfer-Encoding", line))
			c->chunked_in = strncasecmp(v, "chunked", 7) == 0;
		else if (header_is("Connection", line)) {
			have_close |= strncasecmp(v, "close", 5) == 0;
			have_keepalive |= strncasecmp(v, "keep-alive", 10) == 0;
		} else if (header_is("Expect", line))
			expect = strncasecmp(v, "100-continue", 12) == 0;
	}
	c->keepalive = c->minor >= 1 ? !have_close : have_keepalive;
	if (expect && c->minor >= 1)
		evbuffer_add_printf(bufferevent_get_output(c->bev),
		    "HTTP/1.1 100 Continue\r\n\r\n");
	return 0;
}

static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr p;
	char *line;
	size_t len;

	for (;;) {
		switch (c->state) {
		case S_HEAD:
			p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
			if (p.pos < 0) {
				if (evbuffer_get_length(in) > MAX_HEAD) {
					c->keepalive = 0;
					strcpy(c->method, "GET");
					reply_json(c, 431, "{\"status\":431}");
				}
				return;
			}
			c->head = malloc(p.pos + 5);
			evbuffer_remove(in, c->head, p.pos + 4);
			c->head[p.pos + 4] = '\0';
			c->body_bytes = 0;
			c->crc = crc32(0L, Z_NULL, 0);
			if (parse_head(c) != 0) {
				c->keepalive = 0;
				reply_json(c, 400, "{\"status\":400}");
				return;
			}
			if (strncmp(c->target, "/echo", 5) == 0)
				c->echo = evbuffer_new();
			c->state = c->chunked_in ? S_CHUNK_SIZE : S_BODY;
			break;
		case S_BODY:
		case S_CHUNK_DATA:
			len = evbuffer_get_length(in);
			body_take(c, in, c->left < len ? c->left : len);
			if (c->left > 0)
				return;
			if (c->state == S_CHUNK_DATA) {
				c->state = S_CHUNK_CRLF;
				break;
			}
			dispatch(c);
			if (c->state != S_HEAD)
				return;
			break;
		case S_CHUNK_CRLF:
		case S_CHUNK_SIZE:
		case S_TRAILER:
			if ((line = evbuffer_readln(in, NULL, EVBUFFER_EOL_CRLF)) == NULL)
				return;
			if (c->state == S_CHUNK_CRLF)
				c->state = S_CHUNK_SIZE;
			else if (c->state == S_CHUNK_SIZE) {
				c->left = strtoull(line, NULL, 16);
				c->state = c->left > 0 ? S_CHUNK_DATA : S_TRAILER;
			} else if (*line == '\0') {
				free(line);
				dispatch(c);
				if (c->state != S_HEAD)
					return;
				break;
			}
			free(line);
			break;
		default:
			return;
		}
	}
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->state == S_STREAM) {
		stream_fill(c);
		if (c->state == S_HEAD)
			conn_read_cb(bev, c);	/* pipelined requests */
	} else if (c->state == S_CLOSING &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_free(c);
}

static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(arg);
}

static void
conn_free(struct conn *c)
{
	bufferevent_free(c->bev);
	event_free(c->timer);
	free(c->head);
	if (c->echo != NULL)
		evbuffer_free(c->echo);
	free(c);
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct conn *c = calloc(1, sizeof(*c));

	(void)l;
	(void)sa;
	(void)salen;
	(void)arg;
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(base, delay_cb, c);
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, HIGH_WATER / 4, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	(void)arg;
	event_base_loopbreak(base);
}

int
main(int argc, char **argv)
{
	const char *listen_on = "127.0.0.1:9001", *portfile = NULL;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	int salen = sizeof(ss), ch, ephemeral = 0;
	struct evconnlistener *l;
	char addr[INET6_ADDRSTRLEN], addr_port[256], *colon;
	unsigned port;
	FILE *f;

	while ((ch = getopt(argc, argv, "l:p:h")) != -1) {
		switch (ch) {
		case 'l': listen_on = optarg; break;
		case 'p': portfile = optarg; break;
		default:
			fprintf(stderr, "usage: demo-upstream [-l ADDR:PORT] [-p PORTFILE]\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (unsigned char)((i * 31 + 7) & 0xff);
	signal(SIGPIPE, SIG_IGN);
	/* libevent refuses port 0: parse ADDR:1, then ask for an ephemeral port. */
	snprintf(addr_port, sizeof(addr_port), "%s", listen_on);
	if ((colon = strrchr(addr_port, ':')) != NULL && strcmp(colon, ":0") == 0) {
		strcpy(colon, ":1");
		ephemeral = 1;
	}
	if (evutil_parse_sockaddr_port(addr_port, (struct sockaddr *)&ss, &salen) < 0) {
		fprintf(stderr, "demo-upstream: bad address %s\n", listen_on);
		return 2;
	}
	if (ephemeral && ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	else if (ephemeral)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	base = event_base_new();
	l = evconnlistener_new_bind(base, accept_cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
	    (struct sockaddr *)&ss, salen);
	if (l == NULL) {
		perror("demo-upstream: listen");
		return 1;
	}
	getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &sslen);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
		port = ntohs(s6->sin6_port);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
		port = ntohs(s4->sin_port);
	}
	if (portfile != NULL) {
		/* Written whole under a temporary name: readers never see half. */
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
		if ((f = fopen(tmp, "w")) == NULL || fprintf(f, "%u\n", port) < 0 ||
		    fclose(f) != 0 || rename(tmp, portfile) != 0) {
			perror("demo-upstream: port file");
			return 1;
		}
	}
	fprintf(stderr, ss.ss_family == AF_INET6 ? "listening on [%s]:%u\n" :
	    "listening on %s:%u\n", addr, port);
	evsignal_add(evsignal_new(base, SIGTERM, signal_cb, NULL), NULL);
	evsignal_add(evsignal_new(base, SIGINT, signal_cb, NULL), NULL);
	event_base_dispatch(base);
	evconnlistener_free(l);
	event_base_free(base);
	return 0;
}
