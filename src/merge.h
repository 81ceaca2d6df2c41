/*
 * The flat merge of JSON objects: their top-level members side by side, and a key present
 * more than once (compared as decoded text: "a\/" equals "a/") kept only where it comes
 * last.  Pure: objects are given as byte spans and the merge is a list of spans of them,
 * runs of neighbouring members as one; linear time (members are found by a hash of their
 * decoded key).  Reused: nothing is allocated once it has grown to the largest merge, and
 * merge_release gives back what a large one grew.
 */
#ifndef JG_MERGE_H
#define JG_MERGE_H

#include <stddef.h>

struct merge;

struct merge *merge_new(void);
void merge_free(struct merge *m);

/* Start a merge of the objects of sources 0..nsources-1 (a source not added is skipped).
 * 0, or -1 when out of memory. */
int merge_reset(struct merge *m, size_t nsources);
/* The merge is done with: arrays grown past a warm size are freed. */
void merge_release(struct merge *m);

enum merge_error {
	MERGE_ERR_NOT_OBJECT = -1,      /* not one JSON object */
	MERGE_ERR_MEMBERS = -2,         /* more than max_members top-level members */
	MERGE_ERR_MEMORY = -3
};

/* The object obj[0..len) is that of source: 0, or a merge_error (its members left out).
 * obj must stay in place until the spans are taken. */
int merge_add(struct merge *m, size_t source, const char *obj, size_t len,
    unsigned max_depth, size_t max_members);
/* A member the caller writes after the merged ones, with the key key[0..len) (a JSON string,
 * quotes included): members with an equal key are left out.  0 or -1. */
int merge_reserve(struct merge *m, const char *key, size_t len);

typedef void (*merge_emit_fn)(void *arg, size_t source, const char *p, size_t len);
/* Decide which members stay, and give the merge in order of source, then of position:
 * emit(arg, source, p, len) for each run of neighbouring members that stay (the caller
 * writes the braces and a comma between spans).  The number of spans, or -1. */
long merge_spans(struct merge *m, merge_emit_fn emit, void *arg);

#endif
