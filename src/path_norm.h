/*
 * Request paths normalised before routing: the route a request takes is chosen on, and the
 * upstream receives, the same path.  Pure code, no I/O.
 *
 * Dot segments are removed as RFC 3986 5.2.4 does, a segment "%2e" (either case) counting
 * as "."; a ".." above "/" is an error rather than dropped.  Empty segments ("//") are
 * merged, as nginx's merge_slashes does: an upstream that merges them itself would otherwise
 * serve "//admin" as "/admin" through a route meant for other paths.  Nothing is decoded:
 * "%2F" stays as sent, a byte of a segment and no separator, and so do all other escapes.
 */
#ifndef JG_PATH_NORM_H
#define JG_PATH_NORM_H

#include <stddef.h>
#include <sys/types.h>

struct http_request;

enum path_norm_result {
	PATH_NORM_ABOVE_ROOT = -1,      /* a ".." climbs above "/": the request is refused */
	PATH_NORM_ASIS = 0,             /* already normal: out is untouched */
	PATH_NORM_DONE = 1              /* the normal path is out[0..*out_len) */
};

/*
 * Normalise the origin-form path[0..len) (without its query) into out, which has room for
 * len bytes and may be path itself.  A path that does not start with '/' is left as is.
 * Returns an enum path_norm_result.
 */
int path_norm(const char *path, size_t len, char *out, size_t *out_len);

/*
 * Normalise in place the path of the request head head[0..len) that req was parsed from.
 * The normal path ends where the old one ended, and the bytes of the head before it move
 * right by as many bytes as the path lost: the normal head is head[shift..len), to be parsed
 * again.  Returns shift (0: nothing changed), or PATH_NORM_ABOVE_ROOT.
 */
ssize_t path_norm_head(char *head, size_t len, const struct http_request *req);

#endif
