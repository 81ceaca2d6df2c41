/* The TLS variables of a request ($ssl_client_*), from its client connection. */
#ifndef JG_BODY_TLS_H
#define JG_BODY_TLS_H

struct conn;
struct rewrite_vars;

/* Room for the TLS variables of one request. */
struct body_tls_text {
	char s_dn[1024];
	char verify[160];
};

/* Set vars' $ssl_client_s_dn and $ssl_client_verify from the client connection when uses
 * (bits 1 << REWRITE_VAR_*) has them (text holds their bytes); without them it costs one
 * test. */
void body_tls_vars(unsigned uses, const struct conn *client, struct rewrite_vars *vars,
    struct body_tls_text *text);

#endif
