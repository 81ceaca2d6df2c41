/* Print every configuration key the loader accepts, as config_schema_write lists them. */
#include <stdio.h>

#include "config.h"

int
main(void)
{
	config_schema_write(stdout);
	return ferror(stdout) ? 1 : 0;
}
