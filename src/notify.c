/* The notify protocol written out (as sd_notify(3) describes it), so that jsongate needs no
 * libsystemd: one datagram per message, lines of VARIABLE=value. */
#include "config.h"
#include "notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;

int
notify_init(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	size_t len;

	if (path == NULL || *path == '\0')
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(notify_addr.sun_path)) {
		log_warnx("NOTIFY_SOCKET %s: not a socket path", path);
		return -1;
	}
	memset(&notify_addr, 0, sizeof(notify_addr));
	notify_addr.sun_family = AF_UNIX;
	memcpy(notify_addr.sun_path, path, len);
	/* An abstract address starts with a NUL byte and has no terminator. */
	if (path[0] == '@')
		notify_addr.sun_path[0] = '\0';
	notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
	    (path[0] == '/' ? 1 : 0));
	if ((notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
		log_warn("notify socket");
		return -1;
	}
	return 0;
}

void
notify_send(const char *state)
{
	if (notify_fd < 0)
		return;
	if (sendto(notify_fd, state, strlen(state), MSG_NOSIGNAL,
	    (struct sockaddr *)&notify_addr, notify_len) < 0)
		log_warn("notify %s", state);
}

void
notify_reloading(void)
{
	struct timespec ts;
	char msg[64];

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
	    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
	notify_send(msg);
}

void
notify_close(void)
{
	if (notify_fd >= 0)
		close(notify_fd);
	notify_fd = -1;
}
