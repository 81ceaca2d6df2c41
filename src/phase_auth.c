/* The authentication phase: a route's policies (any one admits) check the request's API key
 * or JSON Web Token; a request none admits is answered 401 (403 when a valid token lacked a
 * scope) with WWW-Authenticate, and never reaches the upstream. */
#include "config.h"
#include "request.h"

#include <ctype.h>
#include <strings.h>

#include "api_keys.h"
#include "auth.h"
#include "auth_jwks.h"
#include "jwt.h"
#include "jcond.h"
#include "jwt_cache.h"

#define AUTH_CHALLENGE "WWW-Authenticate: Bearer realm=\"jsongate\""
/* Not an outcome: the token waits for its key set to be fetched again. */
#define AUTH_WAITING AUTH_OUTCOME_N
/* How often a waiting token looks whether its fetch ended. */
#define AUTH_WAIT_POLL_MS 20

static int
phase_auth_applies(const struct config_route *route)
{
	return route->nauth != 0;
}

static struct http_str
phase_auth_trim(struct http_str s)
{
	while (s.len > 0 && (s.p[0] == ' ' || s.p[0] == '\t')) {
		s.p++;
		s.len--;
	}
	while (s.len > 0 && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t'))
		s.len--;
	return s;
}

/* name=value in a list split by sep (a Cookie header, a query). */
static struct http_str
phase_auth_pair(struct http_str list, char sep, const char *name)
{
	struct http_str none = { NULL, 0 }, item;
	size_t nlen = strlen(name), i, start = 0;

	for (i = 0; i <= list.len; i++) {
		if (i < list.len && list.p[i] != sep)
			continue;
		item.p = list.p + start;
		item.len = i - start;
		item = phase_auth_trim(item);
		if (item.len > nlen && memcmp(item.p, name, nlen) == 0 && item.p[nlen] == '=') {
			item.p += nlen + 1;
			item.len -= nlen + 1;
			return item;
		}
		start = i + 1;
	}
	return none;
}

/* The token of the first source that has one; *given: a source carried something. */
static struct http_str
phase_auth_token(const struct auth_jwt *jwt, const struct http_request *req, size_t *which)
{
	struct http_str v, none = { NULL, 0 };

	for (size_t i = 0; i < jwt->ntokens; i++) {
		const struct auth_token_source *s = &jwt->tokens[i];

		*which = i;
		if (s->where == AUTH_TOKEN_HEADER) {
			v = phase_auth_trim(http_find_header(req->headers, req->nheaders, s->name));
			if (v.len >= 7 && strncasecmp(v.p, "bearer ", 7) == 0) {
				v.p += 7;
				v.len -= 7;
				v = phase_auth_trim(v);
			} else if (strcmp(s->name, "authorization") == 0)
				v.len = 0;      /* another scheme is not ours */
		} else if (s->where == AUTH_TOKEN_COOKIE)
			v = phase_auth_pair(http_find_header(req->headers, req->nheaders, "cookie"),
			    ';', s->name);
		else {
			v = req->query;
			if (v.len > 0) {
				v.p++;
				v.len--;
			}
			v = phase_auth_pair(v, '&', s->name);
		}
		if (v.len != 0)
			return v;
	}
	return none;
}

static __thread struct jcond_scratch *phase_auth_scratch;
static void phase_auth_l1_free(void);

/* The policy's require on the claims: 1 met, 0 not, -1 not to be read. */
static int
phase_auth_require(struct client *c, const struct jcond *require,
    const struct jwt_claims *claims)
{
	const struct config *cfg = client_cfg(c);

	if (phase_auth_scratch == NULL &&
	    (phase_auth_scratch = jcond_scratch_new(cfg->limits.max_depth,
	    cfg->limits.max_members)) == NULL)
		return -1;
	return jcond_eval(require, claims->json, claims->len, 0, phase_auth_scratch);
}

void
phase_auth_worker_end(void)
{
	jwt_cache_thread_end();
	phase_auth_l1_free();
	if (phase_auth_scratch != NULL) {
		jcond_scratch_free(phase_auth_scratch);
		phase_auth_scratch = NULL;
	}
}

/*
 * Each worker keeps the tokens it admitted last (a slot chosen by the signature's last bytes,
 * the token compared whole), with what the policy checked of them once and for all: the
 * signature, issuer, audience, scopes and require.  A repeated token costs a comparison and
 * the exp and nbf checks, not a SHA-256 and the shared cache's lock.  An entry holds for its
 * policy (by its epoch, never reused by a reload) and key set generation only.
 */
#define AUTH_L1_SLOTS 256
#define AUTH_L1_MAX_TOKEN 2048

struct auth_l1 {
	const struct auth_policy *policy;
	uint64_t epoch;
	unsigned gen;
	size_t len;
	char tok[AUTH_L1_MAX_TOKEN];
	struct jwt_claims *claims;
	char principal[128];
	size_t principal_len;
};

static __thread struct auth_l1 *auth_l1;

static struct auth_l1 *
phase_auth_l1_slot(const struct auth_policy *p, struct http_str tok)
{
	uint64_t h = (uint64_t)(uintptr_t)p;

	if (tok.len > AUTH_L1_MAX_TOKEN || tok.len < 8)
		return NULL;
	if (auth_l1 == NULL && (auth_l1 = calloc(AUTH_L1_SLOTS, sizeof(*auth_l1))) == NULL)
		return NULL;
	for (size_t i = tok.len - 8; i < tok.len; i++)
		h = (h ^ (unsigned char)tok.p[i]) * 0x100000001b3ULL;
	return &auth_l1[(h ^ (h >> 29)) % AUTH_L1_SLOTS];
}

/* The claims of a token the worker admitted before for p (a new reference, the principal
 * copied into the request), or NULL: *o is then JWT_OK (not known) or why its time is out. */
static struct jwt_claims *
phase_auth_l1_get(struct client *c, const struct auth_policy *p, unsigned gen,
    struct http_str tok, int64_t now, int64_t leeway, enum jwt_outcome *o)
{
	struct auth_l1 *e = phase_auth_l1_slot(p, tok);

	*o = JWT_OK;
	if (e == NULL || e->claims == NULL || e->policy != p || e->epoch != p->epoch ||
	    e->gen != gen || e->len != tok.len || memcmp(e->tok, tok.p, tok.len) != 0)
		return NULL;
	if (e->claims->has_exp && now >= e->claims->exp + leeway)
		*o = JWT_EXPIRED;
	else if (e->claims->has_nbf && now + leeway < e->claims->nbf)
		*o = JWT_NOT_YET_VALID;
	if (*o != JWT_OK)
		return NULL;
	memcpy(c->rq->auth.principal, e->principal, e->principal_len);
	c->rq->auth.principal_len = e->principal_len;
	return jwt_claims_ref(e->claims);
}

static void
phase_auth_l1_put(struct client *c, const struct auth_policy *p, unsigned gen,
    struct http_str tok, struct jwt_claims *claims)
{
	struct auth_l1 *e = phase_auth_l1_slot(p, tok);

	if (e == NULL)
		return;
	if (e->claims != NULL)
		jwt_claims_unref(e->claims);
	e->policy = p;
	e->epoch = p->epoch;
	e->gen = gen;
	e->len = tok.len;
	memcpy(e->tok, tok.p, tok.len);
	e->claims = jwt_claims_ref(claims);
	memcpy(e->principal, c->rq->auth.principal, c->rq->auth.principal_len);
	e->principal_len = c->rq->auth.principal_len;
}

static void
phase_auth_l1_free(void)
{
	if (auth_l1 == NULL)
		return;
	for (size_t i = 0; i < AUTH_L1_SLOTS; i++)
		if (auth_l1[i].claims != NULL)
			jwt_claims_unref(auth_l1[i].claims);
	free(auth_l1);
	auth_l1 = NULL;
}

static unsigned
phase_auth_jwt(struct client *c, struct http_request *req, const struct auth_policy *p)
{
	const struct auth_jwt *jwt = &p->jwt;
	struct auth_jwt *pjwt = (struct auth_jwt *)&p->jwt;    /* its cache's generation */
	unsigned gen = 0;
	struct jwt_policy pol;
	struct jwt_cache_key key;
	struct jwt_claims *claims;
	struct jwk_set *keys;
	enum jwt_outcome o;
	struct http_str tok;
	size_t which = 0;
	int n;
	int64_t now = (int64_t)time(NULL);

	tok = phase_auth_token(jwt, req, &which);
	if (tok.len == 0)
		return AUTH_MISSING;
	memset(&pol, 0, sizeof(pol));
	pol.issuers = (const char *const *)jwt->issuers;
	pol.n_issuers = jwt->n_issuers;
	pol.audiences = (const char *const *)jwt->audiences;
	pol.n_audiences = jwt->n_audiences;
	pol.scopes = (const char *const *)jwt->scopes;
	pol.n_scopes = jwt->n_scopes;
	pol.algs = jwt->algs;
	pol.leeway = (int64_t)(jwt->leeway / 1000);
	pol.now = now;
	if (tok.len > JWT_MAX_TOKEN) {
		o = JWT_TOO_LARGE;
		goto refused;
	}
	gen = jwt->remote != NULL ? auth_jwks_generation(jwt->remote) : 0;
	if ((claims = phase_auth_l1_get(c, p, gen, tok, now, pol.leeway, &o)) != NULL)
		goto admitted;
	if (o != JWT_OK)
		goto refused;
	keys = jwt->keys;
	if (jwt->remote != NULL) {
		/* A new key set: the tokens verified with the old one are verified again. */
		keys = auth_jwks_keys(jwt->remote, &gen);
		if (atomic_load(&pjwt->cache_gen) != gen) {
			jwt_cache_clear(jwt->cache);
			atomic_store(&pjwt->cache_gen, gen);
		}
	}
	jwt_cache_key(tok.p, tok.len, &key);
	if ((claims = jwt_cache_get(jwt->cache, &key, now)) == NULL) {
		o = keys == NULL ? JWT_UNKNOWN_KID :
		    jwt_verify_signature(tok.p, tok.len, keys, &pol, &claims);
		if (jwt->remote != NULL && keys != NULL)
			jwk_set_unref(keys);
		if (o == JWT_UNKNOWN_KID && jwt->remote != NULL && !c->rq->auth.resumed &&
		    auth_jwks_refetch(jwt->remote)) {
			c->rq->auth.gen = gen;
			return AUTH_WAITING;
		}
		if (o != JWT_OK)
			goto refused;
		if (jwt->remote == NULL || atomic_load(&pjwt->cache_gen) == gen)
			jwt_cache_put(jwt->cache, &key, claims, now);
	} else if (jwt->remote != NULL && keys != NULL)
		jwk_set_unref(keys);
	if ((o = jwt_check_claims(claims, &pol)) == JWT_OK && jwt->require != NULL &&
	    phase_auth_require(c, jwt->require, claims) != 1)
		o = JWT_INSUFFICIENT_SCOPE;     /* refused as a missing scope is: 403 */
	if (o != JWT_OK) {
		jwt_claims_unref(claims);
		goto refused;
	}
	n = jwt_claim_str(claims, "sub", c->rq->auth.principal, sizeof(c->rq->auth.principal));
	c->rq->auth.principal_len = n > 0 ? (size_t)n : 0;
	phase_auth_l1_put(c, p, gen, tok, claims);
admitted:
	if (c->rq->auth.claims != NULL)
		jwt_claims_unref(c->rq->auth.claims);
	c->rq->auth.claims = claims;
	if (!p->forward_credentials) {
		c->rq->auth.strip = jwt->tokens[which].name;
		c->rq->auth.strip_where = (int)jwt->tokens[which].where;
		phase_auth_strip(c, req);
	}
	return AUTH_OK;
refused:
	log_debug("route %s: auth %s: token refused: %s (request %s)", c->rq->route->name,
	    p->name, jwt_outcome_name(o), c->rq->request_id);
	return o == JWT_INSUFFICIENT_SCOPE ? AUTH_FORBIDDEN : AUTH_INVALID;
}

static enum auth_outcome
phase_auth_keys(struct client *c, struct http_request *req, const struct auth_policy *p)
{
	struct http_str v = phase_auth_trim(http_find_header(req->headers, req->nheaders,
	    p->keys.header));
	const char *name;
	size_t n;

	if (v.len == 0)
		return AUTH_MISSING;
	if ((name = api_keys_lookup(p->keys.keys, v.p, v.len)) == NULL)
		return AUTH_INVALID;
	c->rq->auth.api_key = name;
	n = strlen(name);
	if (n > sizeof(c->rq->auth.principal))
		n = sizeof(c->rq->auth.principal);
	memcpy(c->rq->auth.principal, name, n);
	c->rq->auth.principal_len = n;
	if (!p->forward_credentials) {
		c->rq->auth.strip = p->keys.header;
		c->rq->auth.strip_where = AUTH_TOKEN_HEADER;
		phase_auth_strip(c, req);
	}
	return AUTH_OK;
}

/* list (items split by sep) without its name=... items, into the request's buffer. */
static int
phase_auth_without(struct client *c, struct http_str list, char sep, const char *name,
    struct http_str *out)
{
	struct request *rq = c->rq;
	size_t nlen = strlen(name), i, start = 0, n = 0;
	struct http_str item;
	char *grown;

	if (rq->auth_buf_cap < list.len + 1) {
		if ((grown = realloc(rq->auth_buf, list.len + 1)) == NULL)
			return -1;
		rq->auth_buf = grown;
		rq->auth_buf_cap = list.len + 1;
	}
	for (i = 0; i <= list.len; i++) {
		if (i < list.len && list.p[i] != sep)
			continue;
		item.p = list.p + start;
		item.len = i - start;
		item = phase_auth_trim(item);
		start = i + 1;
		if (item.len == 0 || (item.len > nlen && memcmp(item.p, name, nlen) == 0 &&
		    item.p[nlen] == '='))
			continue;
		if (n != 0) {
			rq->auth_buf[n++] = sep;
			if (sep == ';')
				rq->auth_buf[n++] = ' ';
		}
		memcpy(rq->auth_buf + n, item.p, item.len);
		n += item.len;
	}
	out->p = rq->auth_buf;
	out->len = n;
	return 0;
}

void
phase_auth_strip(struct client *c, struct http_request *req)
{
	const char *name = c->rq->auth.strip;
	struct http_str v;
	size_t i;

	switch ((enum auth_token_where)c->rq->auth.strip_where) {
	case AUTH_TOKEN_HEADER:
		proxy_remove_header(req->headers, &req->nheaders, name);
		break;
	case AUTH_TOKEN_COOKIE:
		for (i = 0; i < req->nheaders; i++)
			if (req->headers[i].name.len == 6 &&
			    strncasecmp(req->headers[i].name.p, "cookie", 6) == 0)
				break;
		if (i == req->nheaders ||
		    phase_auth_without(c, req->headers[i].value, ';', name, &v) < 0)
			break;
		if (v.len == 0)
			proxy_remove_header(req->headers, &req->nheaders, "cookie");
		else
			req->headers[i].value = v;
		break;
	case AUTH_TOKEN_QUERY:
		if (req->query.len < 2)
			break;
		v.p = req->query.p + 1;
		v.len = req->query.len - 1;
		if (phase_auth_without(c, v, '&', name, &v) < 0)
			break;
		/* the buffer holds "?" and what is left, or nothing */
		if (v.len != 0) {
			memmove(c->rq->auth_buf + 1, c->rq->auth_buf, v.len);
			c->rq->auth_buf[0] = '?';
			v.len++;
		}
		req->query.p = c->rq->auth_buf;
		req->query.len = v.len;
		break;
	}
}

/* Header lines for the answer: room permitting (the buffer holds the longest of them all). */
static void
phase_auth_line(struct client *c, const char *line)
{
	size_t n = strlen(line);

	if (c->rq->answer_headers_len + n <= sizeof(c->rq->answer_headers)) {
		memcpy(c->rq->answer_headers + c->rq->answer_headers_len, line, n);
		c->rq->answer_headers_len += n;
	}
}

static void phase_auth_wait_cb(evutil_socket_t fd, short what, void *arg);

static void
phase_auth_wait_poll(struct client *c)
{
	struct timeval tv = { 0, AUTH_WAIT_POLL_MS * 1000 };

	if (c->rq->phase_timer == NULL &&
	    (c->rq->phase_timer = evtimer_new(c->w->base, phase_auth_wait_cb, c->rq)) == NULL)
		return;
	evtimer_add(c->rq->phase_timer, &tv);
}

/* A token waits for its key set: go on once the fetch ended or the wait is over. */
static void
phase_auth_wait_cb(evutil_socket_t fd, short what, void *arg)
{
	struct request *rq = arg;
	struct client *c = rq->t.owner;
	struct auth_jwks *j = rq->route->auth[rq->auth.next]->jwt.remote;
	struct timespec now;

	(void)fd;
	(void)what;
	client_now(&now);
	if (auth_jwks_generation(j) == rq->auth.gen && auth_jwks_fetching(j) &&
	    (now.tv_sec - rq->auth.wait.tv_sec) * 1000 +
	    (now.tv_nsec - rq->auth.wait.tv_nsec) / 1000000 < AUTH_JWKS_WAIT_MS) {
		phase_auth_wait_poll(c);
		return;
	}
	rq->auth.resumed = 1;
	request_phase_resume(c);
	proxy_flush(c);
}

static enum phase_result
phase_auth_run(struct client *c, struct http_request *req, size_t head_len)
{
	const struct config_route *route = c->rq->route;
	enum auth_outcome worst = c->rq->auth.resumed ? (enum auth_outcome)c->rq->auth.worst :
	    AUTH_MISSING;
	unsigned o;
	size_t i;

	for (i = c->rq->auth.next; i < route->nauth; i++) {
		const struct auth_policy *p = route->auth[i];

		o = p->kind == AUTH_KIND_JWT ? phase_auth_jwt(c, req, p) :
		    phase_auth_keys(c, req, p);
		if (o == AUTH_WAITING) {
			c->rq->auth.next = (unsigned)i;
			c->rq->auth.worst = (int)worst;
			client_now(&c->rq->auth.wait);
			phase_auth_wait_poll(c);
			return PHASE_WAIT;
		}
		atomic_fetch_add_explicit(&route->auth_counters[i]->n[o], 1, memory_order_relaxed);
		if (o == AUTH_OK)
			return PHASE_NEXT;
		/* forbidden over invalid over missing */
		if (o == AUTH_FORBIDDEN || (o == AUTH_INVALID && worst == AUTH_MISSING))
			worst = (enum auth_outcome)o;
	}
	evbuffer_drain(client_input(c), head_len);
	if (worst == AUTH_FORBIDDEN) {
		phase_auth_line(c, AUTH_CHALLENGE ", error=\"insufficient_scope\"\r\n");
		client_error(c, GW_FORBIDDEN, NULL, 0);
	} else {
		phase_auth_line(c, worst == AUTH_INVALID ? AUTH_CHALLENGE
		    ", error=\"invalid_token\"\r\n" : AUTH_CHALLENGE "\r\n");
		client_error(c, GW_UNAUTHORIZED, NULL, 0);
	}
	return PHASE_ANSWERED;
}

int
request_jwt_var(const void *arg, const char *path, size_t len, struct rewrite_str *value)
{
	static __thread char buf[JWT_MAX_TOKEN];
	const struct jwt_claims *claims = arg;
	char name[256];
	const char *val;
	size_t vlen;
	int n;

	if (len >= sizeof(name))
		return 0;
	memcpy(name, path, len);
	name[len] = '\0';
	switch (jwt_claim(claims, name, &val, &vlen)) {
	case JWT_CLAIM_MISSING:
		return 0;
	case JWT_CLAIM_STRING:
		if (memchr(val, '\\', vlen) == NULL)
			break;
		if ((n = jwt_claim_str(claims, name, buf, sizeof(buf))) < 0)
			return 0;
		val = buf;
		vlen = (size_t)n;
		break;
	default:
		break;
	}
	value->p = val;
	value->len = vlen;
	return 1;
}

/* The request ends: its claims go. */
void
phase_auth_end(struct request *rq)
{
	if (rq->phase_timer != NULL)
		evtimer_del(rq->phase_timer);
	if (rq->auth.claims != NULL) {
		jwt_claims_unref(rq->auth.claims);
		rq->auth.claims = NULL;
	}
}

const struct request_phase phase_auth = { phase_auth_applies, phase_auth_run };
