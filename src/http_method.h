/* HTTP methods as bits, for route matching without string compares. */
#ifndef JG_HTTP_METHOD_H
#define JG_HTTP_METHOD_H

#include <stddef.h>

enum http_method_bit {
	METHOD_GET = 1 << 0, METHOD_HEAD = 1 << 1, METHOD_POST = 1 << 2, METHOD_PUT = 1 << 3,
	METHOD_DELETE = 1 << 4, METHOD_OPTIONS = 1 << 5, METHOD_PATCH = 1 << 6,
	METHOD_TRACE = 1 << 7, METHOD_CONNECT = 1 << 8, METHOD_OTHER = 1 << 9,
	METHOD_ANY = (1 << 10) - 1
};

/* A method token (case-sensitive) -> its METHOD_* bit, METHOD_OTHER for any other token. */
unsigned http_method_bit(const char *name, size_t len);

#endif
