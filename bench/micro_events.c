/*
 * Micro-benchmark of the events ops alone: an SSE stream of chat-completion chunks, as
 * bench/stream.py writes them, fed in 64 KB pieces through
 * events: [ { drop: [system_fingerprint] }, { set: { gateway: jsongate } } ], without the
 * daemon or the kernel, and a copy of the same stream for scale.  Prints ns per event, the
 * best of many loops over the same events (held in cache unless there are many).
 *
 *   micro_events [SIZE [EVENTS [LOOPS]]]   events of SIZE bytes (1024), EVENTS of them (16)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stream_event.h"

#define BENCH_PIECE 65536

static size_t bench_sink;

static int
bench_write(void *arg, const char *p, size_t len)
{
	(void)arg;
	bench_sink += len + (unsigned char)p[len - 1];
	return 0;
}

static double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Event n of size bytes, its blank line included, at p: bench/stream.py's shape. */
static size_t
bench_event(char *p, size_t size, size_t n)
{
	static const char tail[] = "\"},\"finish_reason\":null}]}";
	char head[256];
	size_t h, pad, i, len;

	h = (size_t)snprintf(head, sizeof(head), "{\"id\":%zu,\"object\":\"chat.completion.chunk\","
	    "\"created\":1700000000,\"model\":\"gpt-x\",\"system_fingerprint\":\"fp_x\","
	    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"", n);
	pad = size > h + sizeof(tail) + 7 ? size - h - (sizeof(tail) - 1) - 8 : 1;
	len = (size_t)sprintf(p, "data: %s", head);
	for (i = 0; i < pad; i++)
		p[len++] = (char)('a' + (n + i) % 26);
	len += (size_t)sprintf(p + len, "%s\n\n", tail);
	return len;
}

/* The best ns per event of loops runs of the stream through prog. */
static double
bench_run(const struct rewrite_program *prog, const char *stream, size_t len, size_t events,
    int loops)
{
	struct stream_events *se = stream_events_new(1 << 20, 64, 1000);
	double best = 1e30, t;
	size_t i;
	int k;

	if (se == NULL)
		exit(1);
	stream_events_start(se, STREAM_EVENTS_SSE, prog, VALIDATE_ENVELOPE, NULL);
	for (k = 0; k < loops; k++) {
		t = bench_now();
		for (i = 0; i < len; i += BENCH_PIECE)
			stream_events_feed(se, stream + i, len - i < BENCH_PIECE ? len - i :
			    BENCH_PIECE, bench_write, NULL);
		t = bench_now() - t;
		if (t < best)
			best = t;
	}
	stream_events_free(se);
	return best / (double)events;
}

/* The same for copying the stream, piece by piece, into a buffer. */
static double
bench_copy(const char *stream, size_t len, size_t events, int loops)
{
	char *dst = malloc(BENCH_PIECE);
	double best = 1e30, t;
	size_t i, n;
	int k;

	if (dst == NULL)
		exit(1);
	for (k = 0; k < loops; k++) {
		t = bench_now();
		for (i = 0; i < len; i += BENCH_PIECE) {
			n = len - i < BENCH_PIECE ? len - i : BENCH_PIECE;
			memcpy(dst, stream + i, n);
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		t = bench_now() - t;
		if (t < best)
			best = t;
	}
	free(dst);
	return best / (double)events;
}

int
main(int argc, char **argv)
{
	static const char ops[] = "[ { drop: [ system_fingerprint ] }, "
	    "{ set: { gateway: jsongate } } ]";
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
	size_t events = argc > 2 ? strtoul(argv[2], NULL, 10) : 16;
	int loops = argc > 3 ? atoi(argv[3]) : (int)(300000000 / (size * events) + 10);
	struct rewrite_program *prog;
	char err[256], *stream;
	size_t len = 0, i;

	if (size < 200 || size > 65536 || events == 0 || loops <= 0) {
		fprintf(stderr, "usage: micro_events [SIZE (200..65536) [EVENTS [LOOPS]]]\n");
		return 2;
	}
	if ((prog = rewrite_program_from_yaml(ops, sizeof(ops) - 1, err, sizeof(err))) == NULL) {
		fprintf(stderr, "micro_events: %s\n", err);
		return 1;
	}
	if ((stream = malloc(events * (size + 64))) == NULL)
		return 1;
	for (i = 0; i < events; i++)
		len += bench_event(stream + len, size, i);
	printf("%zu events of %zu bytes, best of %d loops\n", events, len / events, loops);
	printf("drop and set: %.1f ns/event\n", bench_run(prog, stream, len, events, loops));
	printf("memcpy:       %.1f ns/event\n", bench_copy(stream, len, events, loops));
	rewrite_program_free(prog);
	free(stream);
	return bench_sink == 0;
}
