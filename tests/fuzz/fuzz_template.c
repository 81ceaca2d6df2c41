/*
 * libFuzzer target for the templates of aggregated routes (template.h): a backend's
 * request-target or header value with ${variables}, parsed as the configuration gives it and
 * rendered with a request's values.
 *
 * Input: one control byte (bit 0: a request-target, else a header value), the template up to
 * the first LF, then a request head (its path matched against FUZZ_TEMPLATE for the
 * captures), then what ${backend.NAME.FIELD} reads (a field starting with m is missing).
 * Checked on every input:
 *   - a template that does not parse says why; one that does renders or says why;
 *   - a rendered request-target is visible ASCII without '#';
 *   - values never put a "." or ".." segment in the path (the literal text holding no '.'
 *     and no '%'), and template_dot_segment refusing a request means template_render does;
 *   - a rendered header value holds no CR, LF or NUL.
 * FUZZ_TEMPLATE_SHOW=1 in the environment prints what an input renders, or why not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http.h"
#include "route.h"
#include "template.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

#define FUZZ_TEMPLATE "/u/{id}/f/{rest...}"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const backend_names[] = { "a", "b.v2" };
static const unsigned backend_index[] = { 0, 3 };

static int
fuzz_backend_cb(void *arg, unsigned backend, const char *field, size_t len,
    struct http_str *value, const char **why)
{
	const struct http_str *answer = arg;

	FUZZ_CHECK(backend == 0 || backend == 3);
	if (len == 0 || field[0] == 'm') {
		*why = "no such field";
		return -1;
	}
	*value = *answer;
	return 0;
}

/* The path (up to '?') of a rendered target has no segment "." or "..", percent-decoded. */
static int
fuzz_has_dot_segment(const char *s, size_t len)
{
	size_t i, seg = 0, dots = 0;
	int hi, lo;
	char c;

	for (i = 0; i < len && s[i] != '?'; i++) {
		c = s[i];
		if (c == '%' && i + 2 < len && (hi = http_hex_value(s[i + 1])) >= 0 &&
		    (lo = http_hex_value(s[i + 2])) >= 0) {
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		if (c == '/') {
			if (seg != 0 && seg == dots && dots <= 2)
				return 1;
			seg = dots = 0;
			continue;
		}
		seg++;
		dots += c == '.';
	}
	return seg != 0 && seg == dots && dots <= 2;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct route_pattern *pattern;
	static struct http_request req;
	struct template_scope scope = { NULL, backend_names, backend_index, 2 };
	struct http_str caps[ROUTE_MAX_CAPTURES], answer;
	struct template_values v;
	struct template t;
	struct evbuffer *out;
	const char *p, *end, *nl;
	char *text, err[512], *got;
	size_t len, i;
	ssize_t head;
	int target, r, dots;

	if (pattern == NULL) {
		const char *why;

		FUZZ_CHECK((pattern = route_pattern_new(FUZZ_TEMPLATE, &why)) != NULL);
	}
	if (size < 1)
		return 0;
	target = data[0] & 1;
	p = (const char *)data + 1;
	end = (const char *)data + size;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (nl == NULL)
		nl = end;
	FUZZ_CHECK((text = malloc((size_t)(nl - p) + 1)) != NULL);
	memcpy(text, p, (size_t)(nl - p));
	text[nl - p] = '\0';
	scope.pattern = pattern;
	err[0] = '\0';
	if (template_parse(&t, text, target, &scope, err, sizeof(err)) != 0) {
		FUZZ_CHECK(err[0] != '\0');
		if (getenv("FUZZ_TEMPLATE_SHOW") != NULL)
			fprintf(stderr, "not parsed: %s\n", err);
		free(text);
		return 0;
	}
	/* The literal text holds neither a dot nor a percent: any dot segment is a value's. */
	dots = strpbrk(text, ".%") != NULL;
	free(text);

	p = nl < end ? nl + 1 : end;
	head = http_parse_request(p, (size_t)(end - p), &req);
	memset(caps, 0, sizeof(caps));
	if (head <= 0 || !route_pattern_match(pattern, req.path.p, req.path.len, caps)) {
		if (getenv("FUZZ_TEMPLATE_SHOW") != NULL)
			fprintf(stderr, "no request matching %s\n", FUZZ_TEMPLATE);
		template_free(&t);
		return 0;
	}
	answer = (struct http_str){ p + head, (size_t)(end - p - head) };
	v = (struct template_values){ .req = &req, .captures = caps, .request_id = "r-1",
		.remote_addr = "10.0.0.1", .backend = fuzz_backend_cb, .backend_arg = &answer };
	FUZZ_CHECK((out = evbuffer_new()) != NULL);
	err[0] = '\0';
	r = template_render(&t, &v, out, err, sizeof(err));
	if (getenv("FUZZ_TEMPLATE_SHOW") != NULL)
		fprintf(stderr, "%s: %.*s\n", r == 0 ? "rendered" : "refused",
		    r == 0 ? (int)evbuffer_get_length(out) : (int)strlen(err),
		    r == 0 ? (const char *)evbuffer_pullup(out, -1) : err);
	if (target && template_dot_segment(&t, &v, err, sizeof(err)) != 0)
		FUZZ_CHECK(r == TEMPLATE_BAD_VALUE || r == TEMPLATE_BAD_FIELD);
	if (r != 0) {
		FUZZ_CHECK(r == TEMPLATE_BAD_VALUE || r == TEMPLATE_BAD_FIELD);
		FUZZ_CHECK(err[0] != '\0');
	} else {
		len = evbuffer_get_length(out);
		got = (char *)evbuffer_pullup(out, -1);
		for (i = 0; i < len; i++) {
			unsigned char c = (unsigned char)got[i];

			if (target)
				FUZZ_CHECK(c > ' ' && c < 0x7f && c != '#');
			else
				FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0');
		}
		if (target && !dots)
			FUZZ_CHECK(!fuzz_has_dot_segment(got, len));
	}
	evbuffer_free(out);
	template_free(&t);
	return 0;
}
