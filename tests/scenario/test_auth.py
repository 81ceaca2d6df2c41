"""Authentication (auth: policies, a route's auth:): API keys known by their SHA-256
(missing: 401 with the bare challenge; wrong: 401 invalid_token; right: admitted, the key
still sent upstream unless forward_credentials: false); JSON Web Tokens made by python3-jwt
with RSA, P-256 and Ed25519 keys of a key set file (alg none, HMAC with the RSA public key as
secret, a tampered payload, a wrong iss or aud, exp past and nbf ahead of the leeway, a token
over 8 KB: 401; a missing scope: 403 insufficient_scope; cookie and query sources), a list of
policies (any one admits; 403 over 401), the key set file read again on SIGHUP (rotation);
a key set fetched over HTTPS from a server of the test's own (its own CA; RSA, P-256 and
Ed25519; rotation: a new kid waits for one fetch and is admitted, a key gone is refused, 50
random kids make no fetch; a failing server keeps the last good set; a server not trusted
gives no set); the counters of /metrics; configuration errors at FILE:LINE:COL, and -t
without the JWKS server."""

import base64
import datetime
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import random
import re
import signal
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403
from harness import REASONS  # noqa: E402

try:
    import jwt
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.x509.oid import NameOID
except ImportError:     # Debian's python3-jwt under another python3
    sys.path.append('/usr/lib/python3/dist-packages')
    import jwt
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.x509.oid import NameOID

T = Suite(__file__)
REASONS.update({401: 'Unauthorized', 403: 'Forbidden', 429: 'Too Many Requests'})

CHALLENGE = 'Bearer realm="jsongate"'
ISS = 'https://idp.example/'

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_KEY2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()


def jwk_of(key, kid, alg=None):
    pub = key.public_key()
    if isinstance(key, rsa.RSAPrivateKey):
        d = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(pub))
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        d = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(pub))
    else:
        d = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(pub))
    d['kid'] = kid
    if alg:
        d['alg'] = alg
    return d


def jwks(*keys):
    return json.dumps({'keys': list(keys)})


def token(key, alg, kid, **claims):
    payload = {'iss': ISS, 'aud': 'api', 'sub': 'alice', 'exp': int(time.time()) + 300}
    payload.update(claims)
    for k in [k for k, v in payload.items() if v is None]:
        del payload[k]
    return jwt.encode(payload, key, algorithm=alg, headers={'kid': kid})


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b'=').decode()


def unsigned(header, payload, sig=b''):
    return '%s.%s.%s' % (b64(json.dumps(header).encode()), b64(json.dumps(payload).encode()),
                         b64(sig))


def upstream_ok():
    return answer(lambda req: http_response(200, b'{"ok":true}'))


def auth_config(env, up, policies, route_auth, route_extra=None, **top):
    route = {'name': 'api', 'match': {'path_prefix': '/api/'}, 'upstream': 'app',
             'auth': route_auth}
    route.update(route_extra or {})
    return upstream_config(up.address, routes=[
        route, {'name': 'open', 'match': {'path_prefix': '/'}, 'upstream': 'app'}],
        auth=policies, **top)


def keys_file(env, entries, name='keys.txt'):
    path = os.path.join(env.tmp, name)
    with open(path, 'w') as f:
        f.write('# name sha256\n')
        for who, key in entries:
            f.write('%s %s\n' % (who, hashlib.sha256(key.encode()).hexdigest()))
    return path


def jwks_file(env, text, name='jwks.json'):
    path = os.path.join(env.tmp, name)
    with open(path, 'w') as f:
        f.write(text)
    return path


def get(c, target, rid, headers=()):
    return c.request('GET', target, [('Host', 'h'), ('X-Request-Id', rid)] + list(headers))


metrics = metrics_text


def sample(text, line_start):
    for line in text.splitlines():
        if line.startswith(line_start + ' '):
            return float(line.split()[-1])
    return None


@T.case
def api_keys(env):
    up = env.scripted(default=upstream_ok())
    kf = keys_file(env, [('mobile-app', 'k-123456'), ('partner', 'p-999')])
    aport = free_port()
    log = os.path.join(env.tmp, 'access.log')
    conf = auth_config(env, up, {'keys': {'keys': {'keys_file': kf}}}, 'keys',
                       admin={'listen': '127.0.0.1:%d' % aport},
                       log={'level': 'info', 'access': log, 'format': 'json'})
    gw = env.daemon(conf)
    c = env.client(gw.port)

    r = get(c, '/api/orders', 'k-1')
    env.gateway_error('no key', r, 401, 'unauthorized', 'no valid credentials', close=False,
                      request_id='k-1', headers=[('WWW-Authenticate', CHALLENGE)])
    r = get(c, '/api/orders', 'k-2', [('X-API-Key', 'k-12345')])
    env.gateway_error('a wrong key', r, 401, 'unauthorized', 'no valid credentials',
                      close=False, request_id='k-2', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="invalid_token"')])
    env.eq('no refused request reached the upstream', len(up.requests), 0)
    r = get(c, '/api/orders', 'k-3', [('X-API-Key', 'k-123456')])
    env.eq('the right key: the upstream answer', (r.status, r.body), (200, b'{"ok":true}'))
    env.eq('the key still goes upstream', up.requests[-1].header('X-API-Key'), 'k-123456')
    r = get(c, '/api/orders', 'k-4', [('x-api-key', 'p-999')])
    env.eq('the other key (header name in any case)', r.status, 200)
    r = get(c, '/other', 'k-5')
    env.eq('a route without auth: open', r.status, 200)

    wait_until(lambda: open(log).read().count('\n') >= 5, 5)
    lines = {j['request_id']: j for j in map(json.loads, open(log).read().splitlines())}
    env.eq('the access log: the key\'s name as the principal, never the key',
           [lines[r].get('principal') for r in ('k-1', 'k-2', 'k-3', 'k-4', 'k-5')],
           [None, None, 'mobile-app', 'partner', None])
    m = metrics(aport)
    for outcome, n in [('ok', 2), ('missing', 1), ('invalid', 1), ('forbidden', 0)]:
        env.eq('jsongate_auth_requests_total %s' % outcome, sample(
            m, 'jsongate_auth_requests_total{route="api",policy="keys",outcome="%s"}'
            % outcome), n)


@T.case
def api_keys_not_forwarded(env):
    up = env.scripted(default=upstream_ok())
    kf = keys_file(env, [('mobile-app', 'k-123456')])
    log = os.path.join(env.tmp, 'access.log')
    conf = auth_config(env, up, {'keys': {'keys': {
        'keys_file': kf, 'header': 'Api-Token', 'forward_credentials': False}}}, 'keys',
        log={'level': 'info', 'access': log, 'format': 'combined'})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    r = get(c, '/api/x', 'nf-1', [('Api-Token', 'k-123456'), ('X-Other', 'kept')])
    env.eq('admitted', r.status, 200)
    env.eq('the key header is not sent upstream', up.requests[0].header('Api-Token'), None)
    env.eq('the other headers are', up.requests[0].header('X-Other'), 'kept')
    r = get(c, '/api/x', 'nf-2')
    env.eq('no key', r.status, 401)
    wait_until(lambda: open(log).read().count('\n') >= 2, 5)
    lines = open(log).read().splitlines()
    env.eq('combined: the principal as the remote user, "-" without one',
           [l.split(' ')[1:3] for l in lines], [['-', 'mobile-app'], ['-', '-']])


def jwt_policy(path, **more):
    p = {'jwks_file': path, 'issuer': ISS, 'audience': 'api', 'leeway': '30s'}
    p.update(more)
    return {'users': {'jwt': p}}


@T.case
def jwt_algorithms(env):
    up = env.scripted(default=upstream_ok())
    path = jwks_file(env, jwks(jwk_of(RSA_KEY, 'rsa1'), jwk_of(EC_KEY, 'ec1'),
                               jwk_of(ED_KEY, 'ed1')))
    gw = env.daemon(auth_config(env, up, jwt_policy(path), 'users'))
    c = env.client(gw.port)
    for n, (key, alg, kid) in enumerate([(RSA_KEY, 'RS256', 'rsa1'), (RSA_KEY, 'PS256', 'rsa1'),
                                         (EC_KEY, 'ES256', 'ec1'), (ED_KEY, 'EdDSA', 'ed1')]):
        t = token(key, alg, kid)
        r = get(c, '/api/orders', 'a-%d' % n, [('Authorization', 'Bearer ' + t)])
        env.eq('%s admitted' % alg, r.status, 200)
        env.eq('%s: Authorization goes upstream' % alg, up.requests[-1].header('Authorization'),
               'Bearer ' + t)
    # The same token again: from the cache, still admitted.
    r = get(c, '/api/orders', 'a-again', [('Authorization', 'Bearer ' + t)])
    env.eq('a repeated token admitted', r.status, 200)

    r = get(c, '/api/orders', 'a-none')
    env.gateway_error('no token', r, 401, 'unauthorized', 'no valid credentials', close=False,
                      request_id='a-none', headers=[('WWW-Authenticate', CHALLENGE)])
    r = get(c, '/api/orders', 'a-basic', [('Authorization', 'Basic YTpi')])
    env.gateway_error('another scheme is no token', r, 401, 'unauthorized',
                      'no valid credentials', close=False, request_id='a-basic',
                      headers=[('WWW-Authenticate', CHALLENGE)])

    now = int(time.time())
    good = {'iss': ISS, 'aud': 'api', 'sub': 'alice', 'exp': now + 300}
    pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    confused = unsigned({'alg': 'HS256', 'kid': 'rsa1', 'typ': 'JWT'}, good)
    h, p, _ = confused.split('.')
    confused = '%s.%s.%s' % (h, p, b64(hmac.new(pem, ('%s.%s' % (h, p)).encode(),
                                                hashlib.sha256).digest()))
    rs = token(RSA_KEY, 'RS256', 'rsa1')
    h, p, s = rs.split('.')
    tampered = '%s.%s.%s' % (h, b64(json.dumps(dict(good, sub='admin')).encode()), s)
    bad = [
        ('alg none', unsigned({'alg': 'none', 'kid': 'rsa1'}, good)),
        ('HS256 with the RSA public key as secret', confused),
        ('a tampered payload', tampered),
        ('a wrong iss', token(RSA_KEY, 'RS256', 'rsa1', iss='https://evil.example/')),
        ('a wrong aud', token(RSA_KEY, 'RS256', 'rsa1', aud='other')),
        ('exp past the leeway', token(RSA_KEY, 'RS256', 'rsa1', exp=now - 60)),
        ('nbf ahead of the leeway', token(RSA_KEY, 'RS256', 'rsa1', nbf=now + 120)),
        ('a key not in the set', token(RSA_KEY2, 'RS256', 'rsa2')),
        ('signed by another key with a known kid', token(RSA_KEY2, 'RS256', 'rsa1')),
        ('ES256 claimed for an RSA key', token(EC_KEY, 'ES256', 'rsa1')),
        ('a token over 8 KB', token(RSA_KEY, 'RS256', 'rsa1', pad='x' * 9000)),
        ('not a token', 'abc.def'),
    ]
    for n, (what, t) in enumerate(bad):
        r = get(c, '/api/orders', 'bad-%d' % n, [('Authorization', 'Bearer ' + t)])
        env.gateway_error(what, r, 401, 'unauthorized', 'no valid credentials', close=False,
                          request_id='bad-%d' % n, headers=[
                              ('WWW-Authenticate', CHALLENGE + ', error="invalid_token"')])
    # Within the leeway: still good.
    r = get(c, '/api/orders', 'lee', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', exp=now - 5, nbf=now + 5))])
    env.eq('exp and nbf within the leeway', r.status, 200)
    env.eq('only the admitted requests reached the upstream', len(up.requests), 6)


@T.case
def cached_token_expires(env):
    """A token admitted (and kept by the worker) is refused once its exp passes."""
    up = env.scripted(default=upstream_ok())
    path = jwks_file(env, jwks(jwk_of(EC_KEY, 'ec1')))
    gw = env.daemon(auth_config(env, up, jwt_policy(path, leeway='0s'), 'users'))
    c = env.client(gw.port)
    t = [('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1', exp=int(time.time()) + 2))]
    env.eq('admitted', get(c, '/api/x', 'x-1', t).status, 200)
    env.eq('admitted again (kept)', get(c, '/api/x', 'x-2', t).status, 200)
    time.sleep(3)
    r = get(c, '/api/x', 'x-3', t)
    env.gateway_error('expired meanwhile', r, 401, 'unauthorized', 'no valid credentials',
                      close=False, request_id='x-3', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="invalid_token"')])


@T.case
def jwt_scopes_sources_and_lists(env):
    up = env.scripted(default=upstream_ok())
    path = jwks_file(env, jwks(jwk_of(RSA_KEY, 'rsa1', 'RS256')))
    kf = keys_file(env, [('svc', 'svc-key')])
    policies = jwt_policy(path, scopes=['orders:read'], algorithms=['RS256'],
                          require={'any': [{'field': 'tenant', 'equals': 'acme'},
                                           {'field': 'tenant', 'exists': False}]},
                          token=['header:Authorization', 'cookie:session', 'query:access_token'],
                          forward_credentials=False)
    policies['keys'] = {'keys': {'keys_file': kf}}
    gw = env.daemon(auth_config(env, up, policies, ['users', 'keys']))
    c = env.client(gw.port)

    r = get(c, '/api/o', 's-1', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scope='profile orders:read'))])
    env.eq('the scope in scope', r.status, 200)
    env.eq('forward_credentials: false: no Authorization upstream',
           up.requests[-1].header('Authorization'), None)
    r = get(c, '/api/o', 's-2', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scp=['orders:read']))])
    env.eq('the scope in scp', r.status, 200)
    r = get(c, '/api/o', 's-3', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scope='orders:write'))])
    env.gateway_error('a missing scope', r, 403, 'forbidden',
                      'the credentials do not allow this request', close=False,
                      request_id='s-3', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="insufficient_scope"')])
    r = get(c, '/api/o', 's-4', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scope='orders:write')), ('X-API-Key', 'wrong')])
    env.eq('403 over 401 in a list', r.status, 403)
    r = get(c, '/api/o', 's-5', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scope='orders:write')), ('X-API-Key', 'svc-key')])
    env.eq('another policy of the list admits', r.status, 200)
    r = get(c, '/api/o', 's-r', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'RS256', 'rsa1', scope='orders:read', tenant='other'))])
    env.gateway_error('require not met', r, 403, 'forbidden',
                      'the credentials do not allow this request', close=False,
                      request_id='s-r', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="insufficient_scope"')])
    r = get(c, '/api/o', 's-6', [('Authorization', 'Bearer ' + token(
        RSA_KEY, 'PS256', 'rsa1', scope='orders:read'))])
    env.eq('an algorithm the key (alg RS256) does not allow', r.status, 401)

    t = token(RSA_KEY, 'RS256', 'rsa1', scope='orders:read')
    r = get(c, '/api/o', 's-7', [('Cookie', 'theme=dark; session=%s; x=y' % t)])
    env.eq('a token in a cookie', r.status, 200)
    env.eq('the other cookies go upstream, not the token\'s',
           up.requests[-1].header('Cookie'), 'theme=dark; x=y')
    r = get(c, '/api/o', 's-7b', [('Cookie', 'session=%s' % t)])
    env.eq('the token\'s cookie alone: no Cookie upstream',
           (r.status, up.requests[-1].header('Cookie')), (200, None))
    r = get(c, '/api/o?a=1&access_token=%s&b=2' % t, 's-8')
    env.eq('a token in the query', r.status, 200)
    env.eq('the query goes upstream without it', up.requests[-1].target, '/api/o?a=1&b=2')
    r = get(c, '/api/o?access_token=%s' % t, 's-8b')
    env.eq('the token alone in the query: no query upstream',
           (r.status, up.requests[-1].target), (200, '/api/o'))
    r = get(c, '/api/o?access_token=nope', 's-9')
    env.gateway_error('a bad token in the query', r, 401, 'unauthorized',
                      'no valid credentials', close=False, request_id='s-9', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="invalid_token"')])


@T.case
def jwks_file_rotation(env):
    up = env.scripted(default=upstream_ok())
    path = jwks_file(env, jwks(jwk_of(RSA_KEY, 'old')))
    gw = env.daemon(auth_config(env, up, jwt_policy(path), 'users'))
    c = env.client(gw.port)
    old = token(RSA_KEY, 'RS256', 'old')
    new = token(EC_KEY, 'ES256', 'new')
    env.eq('the old key admits', get(c, '/api/x', 'r-1', [
        ('Authorization', 'Bearer ' + old)]).status, 200)
    env.eq('the new key is not known yet', get(c, '/api/x', 'r-2', [
        ('Authorization', 'Bearer ' + new)]).status, 401)
    jwks_file(env, jwks(jwk_of(EC_KEY, 'new')))
    mark = len(gw.log())
    gw.signal(signal.SIGHUP)
    gw.wait_log('reload', start=mark)
    c = env.client(gw.port)
    deadline = time.time() + 5 * SLOW
    status = None
    while time.time() < deadline:
        status = get(c, '/api/x', 'r-3', [('Authorization', 'Bearer ' + new)]).status
        if status == 200:
            break
        time.sleep(0.05)
    env.eq('after SIGHUP the new key admits', status, 200)
    env.eq('and the old one no longer (a cached token too)', get(c, '/api/x', 'r-4', [
        ('Authorization', 'Bearer ' + old)]).status, 401)


@T.case
def variables(env):
    """$jwt.CLAIM and $api_key in header ops and set, $client_addr."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{"ok":true}')))
    path = jwks_file(env, jwks(jwk_of(EC_KEY, 'ec1')))
    kf = keys_file(env, [('mobile-app', 'k-1')])
    policies = {'users': {'jwt': {'jwks_file': path}}, 'keys': {'keys': {'keys_file': kf}}}
    route_extra = {
        'request_headers': {'set': {'X-User': '$jwt.sub', 'X-Org': '$jwt.org.name',
                                    'X-Missing': '$jwt.nope', 'X-Key': '$api_key',
                                    'X-Client': '$client_addr'}},
        'response': [{'set': {'user': '$jwt.sub', 'roles': '$jwt.roles', 'key': '$api_key'}}]}
    gw = env.daemon(auth_config(env, up, policies, ['users', 'keys'], route_extra,
                                trusted_proxies=['127.0.0.1']))
    c = env.client(gw.port)
    t = jwt.encode({'sub': 'al\u00efce "x"', 'org': {'name': 'acme'}, 'roles': ['a', 'b'],
                    'exp': int(time.time()) + 300}, EC_KEY, algorithm='ES256',
                   headers={'kid': 'ec1'})
    r = get(c, '/api/v', 'v-1', [('Authorization', 'Bearer ' + t),
                                 ('X-Forwarded-For', '198.51.100.7')])
    env.eq('set from the claims', r.json(), {'ok': True, 'user': 'al\u00efce "x"',
                                            'roles': '["a","b"]', 'key': None})
    q = up.requests[-1]
    env.eq('request headers from the claims',
           [q.header(n) for n in ('X-User', 'X-Org', 'X-Missing', 'X-Key', 'X-Client')],
           ['al\u00efce "x"'.encode().decode('latin-1'), 'acme', None, None, '198.51.100.7'])
    r = get(c, '/api/v', 'v-2', [('X-API-Key', 'k-1')])
    env.eq('$api_key in set', r.json(), {'ok': True, 'user': None, 'roles': None,
                                         'key': 'mobile-app'})
    q = up.requests[-1]
    env.eq('$api_key in a header, no claim headers',
           [q.header(n) for n in ('X-User', 'X-Key', 'X-Client')],
           [None, 'mobile-app', '127.0.0.1'])


@T.case
def claims_in_the_access_log(env):
    """log.jwt_fields: the claims of the verified token in each json line."""
    up = env.scripted(default=upstream_ok())
    path = jwks_file(env, jwks(jwk_of(EC_KEY, 'ec1')))
    log = os.path.join(env.tmp, 'access.log')
    conf = auth_config(env, up, {'users': {'jwt': {'jwks_file': path}}}, 'users',
                       log={'level': 'info', 'access': log, 'format': 'json',
                            'jwt_fields': ['sub', 'org.id', 'org.name', 'admin', 'roles',
                                           'nope']})
    gw = env.daemon(conf)
    c = env.client(gw.port)
    t = jwt.encode({'sub': 'ann "b"', 'org': {'id': 42, 'name': 'acme\u00e9'}, 'admin': True,
                    'roles': ['a'], 'exp': int(time.time()) + 300}, EC_KEY, algorithm='ES256',
                   headers={'kid': 'ec1'})
    env.eq('admitted', get(c, '/api/x', 'c-1', [('Authorization', 'Bearer ' + t)]).status, 200)
    env.eq('refused', get(c, '/api/x', 'c-2').status, 401)
    wait_until(lambda: open(log).read().count('\n') >= 2, 5)
    lines = {j['request_id']: j for j in map(json.loads, open(log).read().splitlines())}
    env.eq('the claims: strings decoded, a number and a boolean as written, the rest null',
           lines['c-1'].get('jwt_fields'), {'sub': 'ann "b"', 'org.id': '42',
                                            'org.name': 'acme\u00e9', 'admin': 'true',
                                            'roles': None, 'nope': None})
    env.eq('no token: every claim null', lines['c-2'].get('jwt_fields'),
           {'sub': None, 'org.id': None, 'org.name': None, 'admin': None, 'roles': None,
            'nope': None})


@T.case
def variables_in_backend_templates(env):
    """${jwt.CLAIM} and ${api_key} in an aggregated route's backend paths and headers."""
    up = env.scripted(default=answer(lambda req: http_response(200, b'{"a":1}')))
    path = jwks_file(env, jwks(jwk_of(EC_KEY, 'ec1')))
    kf = keys_file(env, [('mobile-app', 'k-1')])
    policies = {'users': {'jwt': {'jwks_file': path}}, 'keys': {'keys': {'keys_file': kf}}}
    conf = upstream_config(up.address, routes=[
        {'name': 'bff', 'match': {'path': '/bff'}, 'auth': ['users', 'keys'],
         'backends': {'me': {'upstream': 'app', 'path': '/u/${jwt.sub}?org=${jwt.org.id}',
                             'headers': {'X-Key': '${api_key}', 'X-Tier': '${jwt.tier}'}}}}],
        auth=policies)
    gw = env.daemon(conf)
    c = env.client(gw.port)
    t = jwt.encode({'sub': 'ann b', 'org': {'id': 42}, 'exp': int(time.time()) + 300},
                   EC_KEY, algorithm='ES256', headers={'kid': 'ec1'})
    r = get(c, '/bff', 'b-1', [('Authorization', 'Bearer ' + t)])
    env.eq('answered', (r.status, r.body), (200, b'{"me":{"a":1}}'))
    q = up.requests[-1]
    env.eq('the backend request from the claims: percent-encoded, a number as written, a '
           'missing claim empty', (q.target, q.header('X-Key'), q.header('X-Tier')),
           ('/u/ann%20b?org=42', '', ''))
    r = get(c, '/bff', 'b-2', [('X-API-Key', 'k-1')])
    q = up.requests[-1]
    env.eq('${api_key}: the key\'s name, no claims', (r.status, q.target, q.header('X-Key')),
           (200, '/u/?org=', 'mobile-app'))


# ------------------------------------------------------------------ a JWKS server over HTTPS

def make_ca_and_cert(tmp):
    """A CA of the test's own and a certificate for 127.0.0.1 it signed: (ca.pem, crt, key)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'jwks test CA')])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, '127.0.0.1')]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [os.path.join(tmp, n) for n in ('ca.pem', 'jwks.crt', 'jwks.key')]
    with open(paths[0], 'wb') as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], 'wb') as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[2], 'wb') as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


class JwksServer:
    """The key set over HTTPS: body and status may change; fetches are counted."""

    def __init__(self, env, body, port=0, ca=None):
        if ca is None:
            ca = make_ca_and_cert(env.tmp)
        self.ca, crt, key = ca
        self.body = body
        self.status = 200
        self.delay = 0
        self.fetches = 0
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                with server.lock:
                    server.fetches += 1
                    status, body = server.status, server.body.encode()
                    delay = server.delay
                time.sleep(delay)
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = 'https://127.0.0.1:%d/.well-known/jwks.json' % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        env.procs.append(self)

    def set(self, body=None, status=None, delay=None):
        with self.lock:
            if delay is not None:
                self.delay = delay
            if body is not None:
                self.body = body
            if status is not None:
                self.status = status

    def count(self):
        with self.lock:
            return self.fetches

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_status(c, want, rid, headers, timeout=5):
    deadline = time.time() + timeout * SLOW
    status = None
    while time.time() < deadline:
        status = get(c, '/api/x', rid, headers).status
        if status == want:
            break
        time.sleep(0.05)
    return status


@T.case
def jwks_over_https(env):
    srv = JwksServer(env, jwks(jwk_of(RSA_KEY, 'rsa1'), jwk_of(EC_KEY, 'ec1'),
                               jwk_of(ED_KEY, 'ed1')))
    up = env.scripted(default=upstream_ok())
    aport = free_port()
    policies = {'users': {'jwt': {'jwks': srv.url, 'ca': srv.ca, 'issuer': ISS}}}
    gw = env.daemon(auth_config(env, up, policies, 'users', workers=2,
                                admin={'listen': '127.0.0.1:%d' % aport}))
    c = env.client(gw.port)
    bearer = lambda t: [('Authorization', 'Bearer ' + t)]  # noqa: E731
    env.eq('an RS256 token once the set is fetched', wait_status(
        c, 200, 'h-1', bearer(token(RSA_KEY, 'RS256', 'rsa1'))), 200)
    env.check('the fetch logged', gw.wait_log(re.escape('key set %s fetched: 3 keys' % srv.url)))
    for key, alg, kid in [(EC_KEY, 'ES256', 'ec1'), (ED_KEY, 'EdDSA', 'ed1')]:
        env.eq('%s admitted' % alg, get(c, '/api/x', 'h-' + alg, bearer(
            token(key, alg, kid))).status, 200)
    env.eq('one fetch at the start', srv.count(), 1)

    # Rotation: a token of a key the set gets later waits for one fetch and is admitted.
    srv.set(jwks(jwk_of(RSA_KEY2, 'rsa2'), jwk_of(EC_KEY, 'ec1')))
    t0 = time.time()
    r = get(c, '/api/x', 'h-new', bearer(token(RSA_KEY2, 'RS256', 'rsa2')))
    env.eq('a new kid: fetched again, then admitted', (r.status, srv.count()), (200, 2))
    env.check('within the wait', time.time() - t0 < 2 * SLOW, time.time() - t0)
    env.eq('a key gone from the set: refused', get(c, '/api/x', 'h-old', bearer(
        token(RSA_KEY, 'RS256', 'rsa1'))).status, 401)

    # 50 tokens with random kids within 10 s: no fetch at all (the last was just now).
    kids = ['rnd-%d' % random.randrange(10 ** 9) for _ in range(50)]
    statuses = [get(c, '/api/x', 'h-r%d' % n, bearer(token(RSA_KEY2, 'RS256', k))).status
                for n, k in enumerate(kids)]
    env.eq('50 unknown kids: all refused', set(statuses), {401})
    env.eq('and no fetch for them', srv.count(), 2)

    m = metrics(aport)
    env.eq('fetches counted', sample(m, 'jsongate_jwks_fetches_total{outcome="ok"}'), 2)
    env.eq('no failed fetch', sample(m, 'jsongate_jwks_fetches_total{outcome="error"}'), 0)


@T.case
def jwks_slow_refetch_bounded(env):
    """A token with a new kid waits for the fetch it asked for at most 2 s."""
    srv = JwksServer(env, jwks(jwk_of(EC_KEY, 'ec1')))
    up = env.scripted(default=upstream_ok())
    policies = {'users': {'jwt': {'jwks': srv.url, 'ca': srv.ca}}}
    gw = env.daemon(auth_config(env, up, policies, 'users'))
    c = env.client(gw.port)
    env.eq('admitted once fetched', wait_status(c, 200, 'w-1', [
        ('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1'))]), 200)
    srv.set(body=jwks(jwk_of(EC_KEY, 'ec1'), jwk_of(ED_KEY, 'ed1')), delay=2.6)
    c2 = env.client(gw.port)
    t0 = time.time()
    c2.send(build_request('GET', '/api/x', [
        ('Host', 'h'), ('X-Request-Id', 'w-2'),
        ('Authorization', 'Bearer ' + token(ED_KEY, 'EdDSA', 'ed1'))]))
    time.sleep(0.2)
    t1 = time.time()
    r = get(c, '/api/x', 'w-3', [('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1'))])
    env.check('meanwhile another client on the worker is answered at once (%.2fs)' % (
        time.time() - t1), r.status == 200 and time.time() - t1 < 1.0 * SLOW)
    r = c2.read_response()
    took = time.time() - t0
    env.eq('the fetch too slow: refused', r.status, 401)
    env.check('after the 2 s wait (took %.2fs)' % took, 1.9 <= took <= 3.0 * SLOW, took)
    env.check('the slow fetch lands and the key admits', gw.wait_log(
        re.escape('key set %s fetched: 2 keys' % srv.url), timeout=5))
    env.eq('admitted now', get(c2, '/api/x', 'w-4', [
        ('Authorization', 'Bearer ' + token(ED_KEY, 'EdDSA', 'ed1'))]).status, 200)


@T.case
def jwks_failing_keeps_the_last_set(env):
    srv = JwksServer(env, jwks(jwk_of(EC_KEY, 'ec1')))
    up = env.scripted(default=upstream_ok())
    aport = free_port()
    policies = {'users': {'jwt': {'jwks': srv.url, 'ca': srv.ca, 'refresh': '1s'}}}
    gw = env.daemon(auth_config(env, up, policies, 'users',
                                admin={'listen': '127.0.0.1:%d' % aport}))
    c = env.client(gw.port)
    t = [('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1'))]
    env.eq('admitted', wait_status(c, 200, 'f-1', t), 200)
    srv.set(status=500)
    env.check('the failure logged', gw.wait_log(re.escape(
        'key set %s: answered 500; keeping the last one' % srv.url), timeout=5))
    env.eq('the last good set still admits', get(c, '/api/x', 'f-2', t).status, 200)
    env.check('a failed fetch counted', sample(
        metrics(aport), 'jsongate_jwks_fetches_total{outcome="error"}') >= 1)
    srv.set(body=jwks(jwk_of(ED_KEY, 'ed1')), status=200)
    te = [('Authorization', 'Bearer ' + token(ED_KEY, 'EdDSA', 'ed1'))]
    env.eq('the server back: its new set', wait_status(c, 200, 'f-3', te), 200)


@T.case
def jwks_server_down_at_start(env):
    """The daemon starts while the key set cannot be fetched; tokens get 401 until it can."""
    port = free_port()
    ca = make_ca_and_cert(env.tmp)
    url = 'https://127.0.0.1:%d/.well-known/jwks.json' % port
    up = env.scripted(default=upstream_ok())
    policies = {'users': {'jwt': {'jwks': url, 'ca': ca[0], 'refresh': '1s'}}}
    gw = env.daemon(auth_config(env, up, policies, 'users'))
    c = env.client(gw.port)
    t = [('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1'))]
    env.check('the failure logged', gw.wait_log(re.escape('key set %s: ' % url) +
                                                '.*tokens are refused until one is fetched'))
    env.eq('no key set yet: 401', get(c, '/api/x', 'd-1', t).status, 401)
    JwksServer(env, jwks(jwk_of(EC_KEY, 'ec1')), port=port, ca=ca)
    env.eq('the server up: admitted within seconds', wait_status(c, 200, 'd-2', t, 10), 200)


@T.case
def jwks_server_not_trusted(env):
    """Without ca: the system's store, which does not know the test's CA: no set."""
    srv = JwksServer(env, jwks(jwk_of(EC_KEY, 'ec1')))
    up = env.scripted(default=upstream_ok())
    gw = env.daemon(auth_config(env, up, {'users': {'jwt': {'jwks': srv.url}}}, 'users'))
    env.check('the failure logged', gw.wait_log(re.escape('key set %s: ' % srv.url) +
                                                '.*certificate verify failed.*tokens are refused'),
              gw.log()[-2000:])
    c = env.client(gw.port)
    r = get(c, '/api/x', 'n-1', [('Authorization', 'Bearer ' + token(EC_KEY, 'ES256', 'ec1'))])
    env.gateway_error('refused', r, 401, 'unauthorized', 'no valid credentials', close=False,
                      request_id='n-1', headers=[
                          ('WWW-Authenticate', CHALLENGE + ', error="invalid_token"')])
    env.eq('no answer was taken from it', srv.count() >= 0, True)


BAD = """\
listeners: [{ listen: "127.0.0.1:%(port)d" }]
auth:
  users:
    jwt: { jwks: "https://idp.example/jwks.json", jwks_file: /nonexistent, issuer: x }
  algs:
    jwt: { jwks: "https://idp.example/jwks.json", algorithms: [RS256, HS256] }
upstreams: { app: { servers: ["127.0.0.1:%(up)d"] } }
routes:
  - { upstream: app, auth: nobody }
  - { upstream: app, auth: [algs, ghost], rate_limit: { rate: 10/x } }
"""


@T.case
def config_errors(env):
    path = os.path.join(env.tmp, 'bad.yaml')
    with open(path, 'w') as f:
        f.write(BAD % {'port': free_port(), 'up': free_port()})
    p = env.run([JSONGATE, '-t', '-c', path])
    env.eq('-t exit status', p.returncode, 1)
    err = p.stderr.decode()
    for where, words in [('4:62', 'jwks and jwks_file are exclusive'),
                         ('6:71', 'unknown algorithm "HS256"'),
                         ('9:28', "unknown auth policy 'nobody'"),
                         ('10:35', "unknown auth policy 'ghost'"),
                         ('10:63', 'expected COUNT/s')]:
        env.check('%s: %s' % (where, words), ('%s:%s: ' % (path, where)) in err and words in err,
                  err)

    # -t does not need the JWKS server (nothing listens at its address).
    good = os.path.join(env.tmp, 'good.yaml')
    with open(good, 'w') as f:
        f.write(to_yaml(dict(upstream_config('127.0.0.1:%d' % free_port(), routes=[
            {'upstream': 'app', 'auth': 'users'}],
            auth={'users': {'jwt': {'jwks': 'https://127.0.0.1:%d/jwks' % free_port()}}}),
            listeners=[{'listen': '127.0.0.1:%d' % free_port()}])))
    p = env.run([JSONGATE, '-t', '-c', good])
    env.eq('-t with an unreachable JWKS server', (p.returncode, p.stdout + p.stderr),
           (0, b'configuration ok\n'))


T.run()
