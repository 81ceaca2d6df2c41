#include "api_keys.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#define API_KEYS_MAX_FILE (16 * 1024 * 1024)

struct api_key {
	unsigned char hash[32];
	char name[API_KEYS_MAX_NAME + 1];
};

struct api_keys {
	struct api_key *keys;
	size_t n, cap;
};

/* Append one error line to err (what fits). */
static void
api_keys_error(char *err, size_t errlen, int *nerr, const char *fmt, ...)
{
	size_t used = strlen(err);
	va_list ap;

	(*nerr)++;
	if (used + 1 >= errlen)
		return;
	if (used > 0)
		err[used++] = '\n';
	va_start(ap, fmt);
	vsnprintf(err + used, errlen - used, fmt, ap);
	va_end(ap);
}

static int
api_keys_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int
api_keys_name_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > API_KEYS_MAX_NAME)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

/* Split line[0..n) at blanks into at most 3 fields; the count of fields (3 means more). */
static int
api_keys_fields(const char *line, size_t n, const char **f, size_t *flen)
{
	size_t i = 0, start;
	int k = 0;

	while (k < 3) {
		while (i < n && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i == n)
			break;
		start = i;
		while (i < n && line[i] != ' ' && line[i] != '\t')
			i++;
		f[k] = line + start;
		flen[k++] = i - start;
	}
	return k;
}

struct api_keys *
api_keys_parse(const char *text, size_t len, const char *file, char *err, size_t errlen)
{
	struct api_keys *keys;
	struct api_key *k, *grown;
	const char *line = text, *eol, *f[3], *hash;
	size_t n, flen[3], i, j, lineno = 0;
	int nerr = 0, nf, hi, lo;

	if (errlen > 0)
		err[0] = '\0';
	if ((keys = calloc(1, sizeof(*keys))) == NULL) {
		api_keys_error(err, errlen, &nerr, "%s: out of memory", file);
		return NULL;
	}
	while (line < text + len) {
		lineno++;
		eol = memchr(line, '\n', (size_t)(text + len - line));
		n = (eol != NULL ? eol : text + len) - line;
		if (n > 0 && line[n - 1] == '\r')
			n--;
		/* A comment runs to the end of the line. */
		for (i = 0; i < n && line[i] != '#'; i++)
			;
		nf = api_keys_fields(line, i, f, flen);
		line = eol != NULL ? eol + 1 : text + len;
		if (nf == 0)
			continue;
		if (nf != 2) {
			api_keys_error(err, errlen, &nerr, "%s:%zu: want \"NAME SHA256HEX\"", file,
			    lineno);
			continue;
		}
		if (!api_keys_name_ok(f[0], flen[0])) {
			api_keys_error(err, errlen, &nerr, "%s:%zu: a NAME is 1 to %d of A-Z a-z "
			    "0-9 . _ -", file, lineno, API_KEYS_MAX_NAME);
			continue;
		}
		hash = f[1];
		for (j = 0; j < flen[1] && api_keys_hexval(hash[j]) >= 0; j++)
			;
		if (flen[1] != 64 || j != 64) {
			api_keys_error(err, errlen, &nerr, "%s:%zu: the key's SHA-256 is 64 hex "
			    "digits (sha256sum prints it)", file, lineno);
			continue;
		}
		if (keys->n == keys->cap) {
			keys->cap = keys->cap == 0 ? 16 : keys->cap * 2;
			if ((grown = realloc(keys->keys, keys->cap * sizeof(*grown))) == NULL) {
				api_keys_error(err, errlen, &nerr, "%s: out of memory", file);
				break;
			}
			keys->keys = grown;
		}
		k = &keys->keys[keys->n];
		for (j = 0; j < 32; j++) {
			hi = api_keys_hexval(hash[2 * j]);
			lo = api_keys_hexval(hash[2 * j + 1]);
			k->hash[j] = (unsigned char)(hi << 4 | lo);
		}
		memcpy(k->name, f[0], flen[0]);
		k->name[flen[0]] = '\0';
		for (j = 0; j < keys->n; j++)
			if (memcmp(keys->keys[j].hash, k->hash, 32) == 0)
				break;
		if (j < keys->n) {
			api_keys_error(err, errlen, &nerr, "%s:%zu: the same key as %s", file,
			    lineno, keys->keys[j].name);
			continue;
		}
		keys->n++;
	}
	if (nerr > 0) {
		api_keys_free(keys);
		return NULL;
	}
	return keys;
}

struct api_keys *
api_keys_load(const char *path, char *err, size_t errlen)
{
	FILE *f;
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	struct api_keys *keys = NULL;

	if ((f = fopen(path, "r")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0)
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	else if (st.st_size > API_KEYS_MAX_FILE)
		snprintf(err, errlen, "%s: larger than 16 MB", path);
	else if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
		snprintf(err, errlen, "%s: out of memory", path);
	else if ((n = fread(buf, 1, (size_t)st.st_size + 1, f)) > (size_t)st.st_size ||
	    ferror(f))
		snprintf(err, errlen, "%s: %s", path, ferror(f) ? strerror(errno) :
		    "changed while read");
	else
		keys = api_keys_parse(buf, n, path, err, errlen);
	fclose(f);
	free(buf);
	return keys;
}

void
api_keys_free(struct api_keys *keys)
{
	if (keys == NULL)
		return;
	OPENSSL_cleanse(keys->keys, keys->cap * sizeof(*keys->keys));
	free(keys->keys);
	free(keys);
}

size_t
api_keys_count(const struct api_keys *keys)
{
	return keys->n;
}

const char *
api_keys_lookup(const struct api_keys *keys, const char *key, size_t len)
{
	unsigned char hash[32];
	size_t i, found = SIZE_MAX;
	uintptr_t eq;

	SHA256((const unsigned char *)key, len, hash);
	for (i = 0; i < keys->n; i++) {
		/* All ones when equal, else zero: the index is picked without a branch. */
		eq = (uintptr_t)0 - (uintptr_t)(CRYPTO_memcmp(keys->keys[i].hash, hash, 32) == 0);
		found = (found & ~eq) | (i & eq);
	}
	OPENSSL_cleanse(hash, sizeof(hash));
	return found != SIZE_MAX ? keys->keys[found].name : NULL;
}
