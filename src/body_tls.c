/* The TLS variables of a request ($ssl_client_*), from its client connection. */
#include "body_tls.h"

#include "rewrite.h"
#include "tls.h"

void
body_tls_vars(unsigned uses, const struct conn *client, struct rewrite_vars *vars,
    struct body_tls_text *text)
{
	if ((uses & (1u << REWRITE_VAR_SSL_CLIENT_S_DN | 1u << REWRITE_VAR_SSL_CLIENT_VERIFY)) == 0)
		return;
	vars->ssl_client_s_dn.p = text->s_dn;
	vars->ssl_client_s_dn.len = tls_client_s_dn(client, text->s_dn, sizeof(text->s_dn));
	vars->ssl_client_verify.p = text->verify;
	vars->ssl_client_verify.len = tls_client_verify(client, text->verify,
	    sizeof(text->verify));
}
