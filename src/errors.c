#include "errors.h"

const struct gateway_error_info gateway_errors[GW__COUNT] = {
#define X(name, status, code, text) [GW_##name] = { status, code, text },
	GATEWAY_ERRORS(X)
#undef X
};
