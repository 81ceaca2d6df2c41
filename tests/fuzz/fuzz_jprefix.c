/*
 * libFuzzer target for finding a field in a JSON text cut short (routing by a request field).
 *
 * Input: a control byte, then the text.  Its low three bits choose the path (paths[]), the
 * next bit whole, the high bits max_depth (1 to 16).
 * Checked on every input:
 *   - a prefix of the text either waits (MORE) or says what the whole text says, and when both
 *     find the value they find the same bytes;
 *   - the complete text never waits;
 *   - a value found lies inside the bytes given, and with whole it is a complete value there;
 *   - without whole, an object or array is found at its first byte, anything else as with it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "jprefix.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const paths[] = {
	"type", "a.b", "data.result.id", "t\xc3\xa9", "a", "x.y.z.w", "\"", "b",
};

struct found {
	int r;
	const char *json;
	size_t len;
	unsigned char type;
};

static struct found
fuzz_find(const char *text, size_t len, int complete, unsigned depth, int whole,
    const char *path)
{
	struct jcond_seg segs[JPREFIX_MAX_PATH];
	size_t nseg = jprefix_path(path, strlen(path), segs);
	struct found f = { 0, NULL, 0, 0 };

	FUZZ_CHECK(nseg != 0);
	f.r = jprefix_find(text, len, complete, depth, whole, segs, nseg, &f.json, &f.len,
	    &f.type);
	FUZZ_CHECK(f.r >= JPREFIX_INVALID && f.r <= JPREFIX_FOUND);
	FUZZ_CHECK(!complete || f.r != JPREFIX_MORE);
	if (f.r == JPREFIX_FOUND)
		FUZZ_CHECK(f.json >= text && f.len >= 1 && f.json + f.len <= text + len &&
		    f.type != 0);
	return f;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path, *text;
	struct found full, part, shallow;
	unsigned depth;
	size_t len, k, step, end;
	unsigned char vt;
	int whole;

	if (size < 1)
		return 0;
	path = paths[data[0] & 7];
	whole = (data[0] >> 3) & 1;
	depth = 1 + (data[0] >> 4);
	/* A copy of exactly the text: reading past it shows as an error. */
	len = size - 1;
	text = len ? memcpy(malloc(len), data + 1, len) : "";
	full = fuzz_find(text, len, 1, depth, whole, path);
	if (full.r == JPREFIX_FOUND && whole && (full.type == ENVELOPE_OBJECT ||
	    full.type == ENVELOPE_ARRAY || full.type == ENVELOPE_STRING))
		FUZZ_CHECK(envelope_value_end(text, len, (size_t)(full.json - text), depth, &end,
		    &vt) == 0 && end == (size_t)(full.json - text) + full.len);
	shallow = fuzz_find(text, len, 1, depth, !whole, path);
	if (whole && full.r == JPREFIX_FOUND)
		FUZZ_CHECK(shallow.r == JPREFIX_FOUND);
	if (full.r == JPREFIX_FOUND && shallow.r == JPREFIX_FOUND)
		FUZZ_CHECK(full.json == shallow.json && full.type == shallow.type);
	step = len <= 512 ? 1 : len / 256;
	for (k = 0; k < len; k += step) {
		part = fuzz_find(text, k, 0, depth, whole, path);
		if (part.r == JPREFIX_MORE)
			continue;
		FUZZ_CHECK(part.r == full.r);
		if (part.r == JPREFIX_FOUND)
			FUZZ_CHECK(part.json == full.json && part.len == full.len &&
			    part.type == full.type);
	}
	if (len)
		free((void *)text);
	return 0;
}
