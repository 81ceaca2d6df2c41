#include "close_reason.h"

const struct client_close_info client_closes[CLIENT_CLOSE__COUNT] = {
#define X(name, label, text) [CLIENT_CLOSE_##name] = { label, text },
	CLIENT_CLOSE_REASONS(X)
#undef X
};

const struct client_close_info tunnel_closes[TUNNEL_CLOSE__COUNT] = {
#define X(name, label, text) [TUNNEL_CLOSE_##name] = { label, text },
	TUNNEL_CLOSE_REASONS(X)
#undef X
};
