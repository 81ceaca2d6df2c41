#include "close_reason.h"

const struct client_close_info client_closes[CLIENT_CLOSE__COUNT] = {
#define X(name, label, text) [CLIENT_CLOSE_##name] = { label, text },
	CLIENT_CLOSE_REASONS(X)
#undef X
};
