/* The admin endpoint.  evhttp is fine here: it is off the data path and sees one scraper. */
#include "config.h"
#include "admin.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http.h"
#include "log.h"
#include "metrics.h"

static struct evhttp *admin_http;
static struct evhttp_bound_socket *admin_handle;
static int admin_fd = -1;               /* bound, not yet served */
static struct sockaddr_storage admin_ss;
static socklen_t admin_sslen;
static char *admin_text;
static int admin_draining;

static int
admin_bind(const struct config_addr *addr)
{
	int fd, one = 1;

	fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&addr->ss, addr->sslen) < 0 || listen(fd, 64) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static void
admin_remember(const struct config_addr *addr)
{
	free(admin_text);
	admin_text = NULL;
	admin_sslen = 0;
	if (addr == NULL)
		return;
	admin_text = strdup(addr->text);
	memcpy(&admin_ss, &addr->ss, sizeof(admin_ss));
	admin_sslen = addr->sslen;
}

int
admin_open(const struct config *cfg)
{
	if (cfg->admin_listen == NULL)
		return 0;
	if ((admin_fd = admin_bind(cfg->admin_listen)) < 0) {
		log_error("admin: cannot listen on %s", cfg->admin_listen->text);
		return -1;
	}
	admin_remember(cfg->admin_listen);
	return 0;
}

/* The reason phrase of RFC 9110 for code, the one jsongate's other answers carry. */
static const char *
admin_reason(int code)
{
	return http_reason(code).p;
}

static void
admin_reply(struct evhttp_request *req, int code, const char *type, struct evbuffer *body)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply(req, code, admin_reason(code), body);
}

static void
admin_json(struct evhttp_request *req, int code, const char *json)
{
	struct evbuffer *body = evbuffer_new();

	if (body == NULL) {
		evhttp_send_error(req, 500, admin_reason(500));
		return;
	}
	evbuffer_add_printf(body, "%s\n", json);
	admin_reply(req, code, "application/json", body);
	evbuffer_free(body);
}

static void
admin_request_cb(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	struct evbuffer *body;

	(void)arg;
	if (path == NULL)
		path = "";
	if (strcmp(path, "/healthz") != 0 && strcmp(path, "/metrics") != 0) {
		admin_json(req, 404, "{\"error\":{\"status\":404,\"code\":\"not_found\","
		    "\"message\":\"the admin endpoint serves GET /healthz and GET /metrics\"}}");
		return;
	}
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		admin_json(req, 405, "{\"error\":{\"status\":405,"
		    "\"code\":\"method_not_allowed\",\"message\":\"only GET and HEAD\"}}");
		return;
	}
	if (strcmp(path, "/healthz") == 0) {
		if (admin_draining)
			admin_json(req, 503, "{\"status\":\"draining\"}");
		else
			admin_json(req, 200, "{\"status\":\"ok\"}");
		return;
	}
	if ((body = evbuffer_new()) == NULL) {
		evhttp_send_error(req, 500, admin_reason(500));
		return;
	}
	metrics_write(body);
	admin_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", body);
	evbuffer_free(body);
}

int
admin_start(struct event_base *base)
{
	if ((admin_http = evhttp_new(base)) == NULL)
		return -1;
	evhttp_set_timeout(admin_http, 10);
	evhttp_set_allowed_methods(admin_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
	    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(admin_http, admin_request_cb, NULL);
	if (admin_fd >= 0) {
		if ((admin_handle = evhttp_accept_socket_with_handle(admin_http, admin_fd)) == NULL)
			return -1;
		admin_fd = -1;  /* the listener owns it now */
		log_info("admin endpoint on %s", admin_text);
	}
	return 0;
}

int
admin_reconfigure(const struct config *cfg)
{
	const struct config_addr *addr = cfg->admin_listen;
	int fd;

	if (admin_http == NULL || (addr == NULL && admin_handle == NULL))
		return 0;
	if (addr != NULL && admin_handle != NULL && addr->sslen == admin_sslen &&
	    memcmp(&addr->ss, &admin_ss, admin_sslen) == 0)
		return 0;
	fd = -1;
	if (addr != NULL && (fd = admin_bind(addr)) < 0) {
		log_error("admin: cannot listen on %s, keeping %s", addr->text,
		    admin_text != NULL ? admin_text : "none");
		return -1;
	}
	if (admin_handle != NULL) {
		evhttp_del_accept_socket(admin_http, admin_handle);
		admin_handle = NULL;
		log_info("admin endpoint on %s closed", admin_text);
	}
	admin_remember(addr);
	if (fd >= 0) {
		if ((admin_handle = evhttp_accept_socket_with_handle(admin_http, fd)) == NULL) {
			close(fd);
			log_errorx("admin: cannot serve %s", addr->text);
			admin_remember(NULL);
			return -1;
		}
		log_info("admin endpoint on %s", addr->text);
	}
	return 0;
}

void
admin_set_draining(void)
{
	admin_draining = 1;
}

void
admin_close(void)
{
	if (admin_http != NULL)
		evhttp_free(admin_http);
	admin_http = NULL;
	admin_handle = NULL;
	if (admin_fd >= 0)
		close(admin_fd);
	admin_fd = -1;
	admin_remember(NULL);
}
