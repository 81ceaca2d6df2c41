/*
 * API keys, known only by their SHA-256: a keys file holds lines "NAME SHA256HEX" (# starts a
 * comment, blank lines are skipped), so the file never holds a usable key.  A presented key
 * is hashed and compared with every entry in constant time; the answer is the entry's NAME
 * (the $api_key variable), never the key.
 */
#ifndef JG_API_KEYS_H
#define JG_API_KEYS_H

#include <stddef.h>

#define API_KEYS_MAX_NAME 64

struct api_keys;

/*
 * Read the keys of text[0..len); file names it in errors.  NULL with err holding every error,
 * one "FILE:LINE: what" per line (as many as fit): a NAME not of [A-Za-z0-9._-] or longer
 * than 64, a hash not of 64 hex digits, a field too many, the same hash twice.  One NAME may
 * have several hashes (a client's old and new key during a rotation).
 */
struct api_keys *api_keys_parse(const char *text, size_t len, const char *file, char *err,
    size_t errlen);
/* The same from the file at path (an unreadable file is one error). */
struct api_keys *api_keys_load(const char *path, char *err, size_t errlen);
void api_keys_free(struct api_keys *keys);
size_t api_keys_count(const struct api_keys *keys);

/* The NAME of the key key[0..len), or NULL.  Every entry is compared, whatever matches. */
const char *api_keys_lookup(const struct api_keys *keys, const char *key, size_t len);

#endif
