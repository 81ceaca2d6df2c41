/*
 * libFuzzer target for the configuration loader: the input is a jsongate.yaml, written to a
 * file in a private directory and loaded with config_load.  Checked: it either loads or
 * reports errors, every error line is "FILE:LINE:COL: message" or "FILE: message", and a
 * loaded configuration has what the daemon relies on (listeners, routes with an upstream,
 * JSON media types).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void
fuzz_check_errors(const char *errors)
{
	const char *line = errors, *nl;
	size_t plen = strlen(path);
	unsigned l, c;

	FUZZ_CHECK(*errors != '\0');
	for (; *line != '\0'; line = nl + 1) {
		FUZZ_CHECK((nl = strchr(line, '\n')) != NULL);
		FUZZ_CHECK(strncmp(line, path, plen) == 0 && line[plen] == ':');
		if (sscanf(line + plen, ":%u:%u: ", &l, &c) == 2)
			FUZZ_CHECK(l >= 1 && c >= 1);
		else
			FUZZ_CHECK(line[plen + 1] == ' ');
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *cfg;
	char *errors = NULL;
	FILE *fp;
	size_t i;

	if (path[0] == '\0') {
		char dir[] = "/tmp/fuzz-config-XXXXXX";

		FUZZ_CHECK(mkdtemp(dir) != NULL);
		snprintf(path, sizeof(path), "%s/jsongate.yaml", dir);
	}
	FUZZ_CHECK((fp = fopen(path, "wb")) != NULL);
	FUZZ_CHECK(fwrite(data, 1, size, fp) == size);
	fclose(fp);
	cfg = config_load(path, &errors);
	FUZZ_CHECK((cfg == NULL) != (errors == NULL));
	if (cfg == NULL) {
		fuzz_check_errors(errors);
		free(errors);
		return 0;
	}
	FUZZ_CHECK(cfg->nlisteners > 0 && cfg->workers > 0);
	for (i = 0; i < cfg->nroutes; i++) {
		FUZZ_CHECK(cfg->routes[i].name != NULL && cfg->routes[i].upstream != NULL);
		FUZZ_CHECK(cfg->routes[i].json_types != NULL);
	}
	config_free(cfg);
	return 0;
}
