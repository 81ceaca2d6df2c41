/* placeholder until the op parser lands: any op is an error, an empty list is accepted */
#include <stdlib.h>
#include "rewrite.h"

int
rewrite_program_parse(struct config_parse *ctx, yaml_document_t *doc, yaml_node_t *node,
    struct rewrite_program **out)
{
	(void)doc;
	*out = NULL;
	if (node->type == YAML_SEQUENCE_NODE &&
	    node->data.sequence.items.top == node->data.sequence.items.start)
		return 0;
	config_error(ctx, node, "envelope ops are not supported yet");
	return -1;
}

void
rewrite_program_free(struct rewrite_program *prog)
{
	(void)prog;
}
