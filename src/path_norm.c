/*
 * Dot-segment removal (RFC 3986 5.2.4) and slash merging for request paths, in one pass
 * over the segments, each written at most once.
 */
#include "http.h"
#include "path_norm.h"

#include <stdint.h>
#include <string.h>

/* 1 for ".", 2 for "..", 0 for any other segment s[0..n); "%2e" is a dot. */
static int
path_norm_dots(const char *s, size_t n)
{
	int dots = 0;
	size_t i = 0;

	while (i < n && dots < 3) {
		if (s[i] == '.') {
			i++;
		} else if (n - i >= 3 && s[i] == '%' && s[i + 1] == '2' &&
		    (s[i + 2] == 'e' || s[i + 2] == 'E')) {
			i += 3;
		} else {
			return 0;
		}
		dots++;
	}
	return dots <= 2 ? dots : 0;
}

/* 1 when some segment of path[0..len) is a dot segment or an empty one before another. */
static int
path_norm_needed(const char *path, size_t len)
{
	const char *s = path + 1, *end = path + len, *slash;
	size_t n;

	for (;;) {
		slash = memchr(s, '/', (size_t)(end - s));
		n = (size_t)((slash != NULL ? slash : end) - s);
		if ((n == 0 && slash != NULL) || (n <= 6 && path_norm_dots(s, n) != 0))
			return 1;
		if (slash == NULL)
			return 0;
		s = slash + 1;
	}
}

int
path_norm(const char *path, size_t len, char *out, size_t *out_len)
{
	const char *s = path + 1, *end = path + len, *slash;
	size_t n, o = 0;
	int dots;

	if (len == 0 || path[0] != '/' || !path_norm_needed(path, len))
		return PATH_NORM_ASIS;
	/*
	 * out[0..o) holds "/seg" for each segment kept.  Writing never overtakes reading: each
	 * "/seg" written was read at or after the place it goes.
	 */
	for (;;) {
		slash = memchr(s, '/', (size_t)(end - s));
		n = (size_t)((slash != NULL ? slash : end) - s);
		dots = n <= 6 ? path_norm_dots(s, n) : 0;
		if (dots == 2) {
			if (o == 0)
				return PATH_NORM_ABOVE_ROOT;
			while (out[--o] != '/')
				;
		} else if (dots == 0 && n > 0) {
			out[o] = '/';
			memmove(out + o + 1, s, n);
			o += n + 1;
		}
		if (slash == NULL) {
			/* "/a/." and "/a/.." are the directory "/a/" and "/", as is "/a/" */
			if (dots != 0 || n == 0)
				out[o++] = '/';
			break;
		}
		s = slash + 1;
	}
	*out_len = o;
	return PATH_NORM_DONE;
}

ssize_t
path_norm_head(char *head, size_t len, const struct http_request *req)
{
	uintptr_t at = (uintptr_t)req->path.p, start = (uintptr_t)head;
	size_t before, n;
	char *path;
	int r;

	/* The path of "http://host" is a static "/", not in the head. */
	if (at < start || at + req->path.len > start + len)
		return 0;
	before = (size_t)(at - start);
	path = head + before;
	if ((r = path_norm(path, req->path.len, path, &n)) != PATH_NORM_DONE)
		return r;
	memmove(path + (req->path.len - n), path, n);
	memmove(head + (req->path.len - n), head, before);
	return (ssize_t)(req->path.len - n);
}
