/* The errors the gateway itself answers with: one table for code, status and default text. */
#ifndef JG_ERRORS_H
#define JG_ERRORS_H

#define GATEWAY_ERRORS(X) \
	X(BAD_REQUEST,          400, "bad_request",          "malformed request") \
	X(NO_ROUTE,             404, "no_route",             "no route matches the request") \
	X(UNAUTHORIZED,         401, "unauthorized",         "no valid credentials") \
	X(FORBIDDEN,            403, "forbidden",            "the credentials do not allow this request") \
	X(METHOD_NOT_ALLOWED,   405, "method_not_allowed",   "method not allowed on this route") \
	X(REQUEST_TIMEOUT,      408, "request_timeout", \
	    "request head not received within timeouts.client_header") \
	X(PAYLOAD_TOO_LARGE,    413, "payload_too_large",    "request body exceeds limits.max_body") \
	X(INVALID_JSON,         400, "invalid_json",         "request body is not valid JSON") \
	X(UNSUPPORTED_MEDIA_TYPE, 415, "unsupported_media_type", \
	    "request body has a Content-Encoding the gateway cannot decode") \
	X(RATE_LIMITED,         429, "rate_limited",         "too many requests") \
	X(HEADER_TOO_LARGE,     431, "header_too_large",     "request header exceeds limits.max_header") \
	X(INTERNAL_ERROR,       500, "internal_error",       "the gateway ran out of memory") \
	X(NOT_IMPLEMENTED,      501, "not_implemented",      "only the chunked transfer coding is implemented") \
	X(UPSTREAM_UNAVAILABLE, 502, "upstream_unavailable", "upstream unavailable") \
	X(UPSTREAM_INVALID,     502, "upstream_invalid",     "upstream response is invalid") \
	X(UPSTREAM_TLS,         502, "upstream_tls",         "upstream TLS handshake failed") \
	X(UPSTREAM_STATUS,      502, "upstream_status",      "upstream answered with an error status") \
	X(UPSTREAM_OVERLOADED,  503, "upstream_overloaded",  "every upstream server is at its limit") \
	X(RATE_LIMIT_UNAVAILABLE, 503, "rate_limit_unavailable", \
	    "the shared rate limit store cannot be reached") \
	X(SHUTTING_DOWN,        503, "shutting_down",        "gateway is shutting down") \
	X(UPSTREAM_TIMEOUT,     504, "upstream_timeout",     "upstream did not answer in time") \
	X(VERSION_NOT_SUPPORTED, 505, "version_not_supported", "only HTTP/1.0 and HTTP/1.1 are supported")

enum gateway_error {
#define X(name, status, code, text) GW_##name,
	GATEWAY_ERRORS(X)
#undef X
	GW__COUNT
};

struct gateway_error_info {
	int status;
	const char *code;
	const char *text;
};

extern const struct gateway_error_info gateway_errors[GW__COUNT];

#endif
