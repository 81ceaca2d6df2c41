"""Every piece of configuration a user may copy from the documentation loads with
`jsongate -t`: each ```yaml block of README.md and bench/README.md (and each route kind
of the README's tour has one), each ready configuration of conf/examples/ (whole files, as
they are; each one installed), and in jsongate.yaml(5) each key's example (the `.Dl` lines
after "Example:" in the key list) and each `.Bd -literal` block that is configuration (it
starts with `KEY:` or `- `; JSON bodies, HTTP exchanges and shell sessions are left alone).
The page's SYNOPSIS names the top-level keys of its KEYS section, in their order.

A block that has `listeners:` is a whole configuration and loads as it is.  Anything else is
a fragment, wrapped mechanically in a minimal configuration (SKELETONS below) at its place:

- a key's example goes where its key lives: `timeouts.queue`'s example into `timeouts:`,
  `routes[].backends.NAME.path`'s into a backend of an aggregated route; an example that is a
  list item (`- { address: ... }`) goes into the list (`upstreams.NAME.servers`);
- a block's place is the first one (in SKELETONS' order) whose keys, as jsongate.yaml(5)
  lists them, include all of the block's own top keys (a list item: the keys of the item);
  a block that fits nowhere fails;
- the fragment's top keys replace the skeleton's lines with the same keys at that place; a
  place may have several skeletons (a route with `upstream:`, `backends:` or `jsonrpc:`), and
  the fragment must load in one of them.

The skeleton defines the upstreams the examples name (STUB_UPSTREAMS).  Files the examples
name exist for the check: paths under /etc/jsongate/, /var/log/jsongate/ and /run/jsongate/
are taken under a scratch directory (certificates and keys are copies of the configuration
tests' own, tests/config/certs), relative ones are in the working directory, and the host
names of servers come from a hosts file of the check's own (JSONGATE_HOSTS_FILE).  The user
an example drops privileges to (`user: jsongate`, which -t checks exists) is the user running
the check.  A block
that still cannot be checked must be listed in NOT_STANDALONE with the reason: there is none.

Prints one line per check and "N passed, M failed"; exit 0 only when nothing failed."""

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs'))
from checks import SRCDIR, check, read, finish  # noqa: E402
JSONGATE = os.environ.get('JSONGATE', 'jsongate')

# Blocks that cannot be checked alone: a unique piece of their text -> why.
NOT_STANDALONE = {}

# Directories examples name, taken under the scratch directory.
MAPPED_DIRS = ('/etc/jsongate/', '/var/log/jsongate/', '/run/jsongate/')
# Server host names examples use, resolved from the check's hosts file.
HOST_NAMES = ('api.internal', 'orders.internal', 'payments.internal')

STUB_UPSTREAMS = ('orders', 'users', 'archive', 'nodes', 'premium', 'general', 'billing',
                  'legacy', 'demo', 'app')

LISTENERS = 'listeners: [ { listen: 127.0.0.1:8080 } ]\n'
UPSTREAMS = 'upstreams:\n' + ''.join('  %s: { servers: [ 127.0.0.1:9001 ] }\n' % n
                                     for n in STUB_UPSTREAMS)
ROUTES = 'routes: [ { upstream: orders } ]\n'
BASE = LISTENERS + UPSTREAMS + ROUTES


def upstream_with(inner):
    """The upstream orders in block style, inner (indented by 4) in it."""
    return (LISTENERS + ROUTES + 'upstreams:\n  orders:\n    servers: [ 127.0.0.1:9001 ]\n' +
            inner + ''.join('  %s: { servers: [ 127.0.0.1:9001 ] }\n' % n
                            for n in STUB_UPSTREAMS if n != 'orders'))


def route_with(inner, head='  -\n    upstream: orders\n'):
    """One route (head), inner (indented by 4) in it."""
    return LISTENERS + UPSTREAMS + 'routes:\n' + head + inner


AGGREGATED = ('  -\n    match: { path: "/users/{id}" }\n'
              '    backends:\n'
              '      user: { upstream: users, path: /users/1 }\n')
JSONRPC = '  -\n    match: { path: /rpc }\n    jsonrpc:\n      default: nodes\n'

# Routes whose examples name policies or shared limits get these at the top level.
AUTH_TOP = ('auth:\n  users: { jwt: { jwks_file: /etc/jsongate/jwks.json } }\n'
            '  partners: { keys: { keys_file: /etc/jsongate/api-keys.txt } }\n'
            'rate_limits: { redis: { address: 127.0.0.1:6379 } }\n')
# Place -> skeletons; "#>" marks where the fragment goes (at that indentation).
SKELETONS = {
    '': [BASE + '#>\n'],
    'log': [BASE + 'log:\n  #>\n'],
    'admin': [BASE + 'admin:\n  #>\n'],
    'limits': [BASE + 'limits:\n  #>\n'],
    'timeouts': [BASE + 'timeouts:\n  #>\n'],
    'http2': [BASE + 'http2:\n  #>\n'],
    'listeners': [UPSTREAMS + ROUTES + 'listeners:\n  #>\n'],
    'listeners[]': [UPSTREAMS + ROUTES + 'listeners:\n  -\n    listen: 127.0.0.1:8443\n'
                    '    #>\n'],
    'listeners[].tls': [UPSTREAMS + ROUTES + 'listeners:\n  -\n    listen: 127.0.0.1:8443\n'
                        '    tls:\n      certificates: [ { cert: api.crt, key: api.key } ]\n'
                        + ca + '      #>\n' for ca in ('', '      client_ca: clients-ca.pem\n')],
    'listeners[].tls.certificates': [UPSTREAMS + ROUTES + 'listeners:\n'
                                     '  - listen: 127.0.0.1:8443\n    tls:\n'
                                     '      certificates:\n        #>\n'],
    'listeners[].tls.certificates[]': [UPSTREAMS + ROUTES + 'listeners:\n'
                                       '  - listen: 127.0.0.1:8443\n    tls:\n'
                                       '      certificates:\n        -\n'
                                       '          cert: api.crt\n          key: api.key\n'
                                       '          #>\n'],
    'upstreams': [LISTENERS + ROUTES + UPSTREAMS + '  #>\n'],
    'upstreams.NAME': [upstream_with('    #>\n'),
                       upstream_with('    balance: hash\n    #>\n')],
    'upstreams.NAME.servers': [LISTENERS + ROUTES + 'upstreams:\n  orders:\n    servers:\n'
                               '      - 127.0.0.1:9001\n      #>\n'],
    'upstreams.NAME.health': [upstream_with('    health:\n      path: /health\n      #>\n')],
    'upstreams.NAME.health.expect': [upstream_with('    health:\n      path: /health\n'
                                                   '      expect:\n        #>\n')],
    'upstreams.NAME.tls': [upstream_with('    tls:\n      #>\n'),
                           upstream_with('    tls:\n      cert: gateway.crt\n'
                                         '      key: gateway.key\n      #>\n')],
    'routes': [LISTENERS + UPSTREAMS + 'routes:\n  #>\n'],
    'routes[]': [route_with('    #>\n'), route_with('    #>\n', AGGREGATED),
                 route_with('    #>\n', JSONRPC)],
    'routes[].match': [route_with('    match:\n      #>\n')],
    'routes[].backends.NAME': [route_with('      orders:\n        upstream: orders\n'
                                          '        path: /orders\n        #>\n', AGGREGATED)],
    'routes[].jsonrpc': [route_with('      #>\n', JSONRPC)],
    'routes[].jsonrpc.methods': [route_with('      methods:\n        #>\n', JSONRPC)],
    'routes[].jsonrpc.methods[]': [
        route_with('      methods:\n        -\n          upstream: archive\n          #>\n',
                   JSONRPC),
        route_with('      methods:\n        -\n          match: eth_call\n'
                   '          upstream: archive\n          #>\n', JSONRPC)],
    'routes[].timeouts': [route_with('    timeouts:\n      #>\n')],
    'routes[].limits': [route_with('    limits:\n      #>\n')],
    'routes[].request_headers': [route_with('    request_headers:\n      #>\n')],
    'routes[].response_headers': [route_with('    response_headers:\n      #>\n')],
    'routes[].cors': [route_with('    cors:\n      origins: [https://app.example]\n      #>\n')],
    'auth': [BASE + 'auth:\n  #>\n'],
    'auth.NAME': [BASE + 'auth:\n  users:\n    #>\n'],
    'auth.NAME.jwt': [BASE + 'auth:\n  users:\n    jwt:\n' + j + '      #>\n'
                      for j in ('      jwks_file: /etc/jsongate/jwks.json\n',
                                '      jwks: https://idp.example/jwks.json\n')],
    'auth.NAME.keys': [BASE + 'auth:\n  partners:\n    keys:\n'
                       '      keys_file: /etc/jsongate/api-keys.txt\n      #>\n'],
    'rate_limits': [BASE + 'rate_limits:\n  #>\n'],
    'rate_limits.redis': [BASE + 'rate_limits:\n  redis:\n    address: 127.0.0.1:6379\n'
                          '    #>\n'],
    'routes[].rate_limit': [AUTH_TOP + route_with('    rate_limit:\n      rate: 10/s\n'
                                                  '      #>\n')],
}
SKELETONS['routes[]'].append(AUTH_TOP + route_with('    #>\n'))

# ------------------------------------------------------------------ extraction

def unroff(text):
    """The text an mdoc line shows."""
    text = text.replace('\\(dq', '"').replace('\\e', '\\').replace('\\&', '').replace('\\-', '-')
    return text


def readme_blocks(text, name='README.md'):
    for m in re.finditer(r'^```yaml\n(.*?)^```', text, re.M | re.S):
        yield '%s:%d' % (name, text.count('\n', 0, m.start()) + 1), m.group(1)


# The route kinds the README's tour shows, each with a configuration.
TOUR = ('Pass-through', 'Envelope ops', 'Routing by a request field', 'JSON-RPC', 'Aggregation')

# The ready configurations conf/examples/ must hold, one per common case.
EXAMPLES = ('envelope-api.yaml', 'jsonrpc-pool.yaml', 'bff-aggregation.yaml',
            'tls-termination.yaml')


def examples():
    """(where, text) of each file of conf/examples/."""
    folder = os.path.join(os.path.dirname(SRCDIR), 'conf', 'examples')
    names = sorted(x for x in os.listdir(folder) if x.endswith('.yaml'))
    for name in EXAMPLES:
        check('conf/examples/%s exists' % name, name in names, names)
    makefile = read('Makefile.am')
    for name in names:
        check('conf/examples/%s is installed (Makefile.am, dist_examples_DATA)' % name,
              'conf/examples/%s' % name in makefile)
        yield 'conf/examples/%s' % name, read('conf', 'examples', name)


def is_configuration(block):
    return re.match(r'(- )?[A-Za-z_][\w-]*:\s', block.lstrip(' ')) is not None


def man_examples(text):
    """(where, text, key path or None) of every key's example and configuration block."""
    lines = text.split('\n')
    path, prev, i = None, '', 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('.Sh '):
            path = None
        elif line.startswith('.It Ic '):
            path = line.split()[2]
        elif line.startswith('.Dl ') and path and prev in ('Example:', 'Examples:'):
            yield 'man/jsongate.yaml.5:%d' % (i + 1), unroff(line[4:]) + '\n', path
            i += 1
            continue
        elif line.startswith('.Bd -literal'):
            j = i + 1
            while j < len(lines) and not lines[j].startswith('.Ed'):
                j += 1
            block = '\n'.join(unroff(x) for x in lines[i + 1:j]) + '\n'
            if is_configuration(block):
                yield 'man/jsongate.yaml.5:%d' % (i + 1), block, None
            i = j
        prev = line
        i += 1


def key_places(text):
    """Place -> the keys jsongate.yaml(5) lists there: routes[].match.path is path of
    routes[].match."""
    places = {}
    for path in re.findall(r'^\.It Ic (\S+)', text, re.M):
        parent, _, key = path.rpartition('.')
        if key.endswith('[]'):
            key = key[:-2]
        places.setdefault(parent, set()).add(key)
    return places


# ------------------------------------------------------------------ wrapping

def dedent(block):
    lines = block.rstrip('\n').split('\n')
    indent = min(len(x) - len(x.lstrip(' ')) for x in lines if x.strip())
    return [x[indent:] for x in lines]


def top_keys(lines):
    """The keys at indentation 0 (of a list item: its keys)."""
    if lines and lines[0].startswith('- '):
        first = lines[0][2:]
        keys = set(re.findall(r'([A-Za-z_][\w-]*):', first)) if first.startswith('{') else \
            set(re.findall(r'^([A-Za-z_][\w-]*):', first))
        return keys | {m.group(1) for x in lines[1:]
                       for m in [re.match(r'  ([A-Za-z_][\w-]*):', x)] if m}
    return {m.group(1) for x in lines for m in [re.match(r'([A-Za-z_][\w-]*):', x)] if m}


def indent_of(line):
    return len(line) - len(line.lstrip(' '))


def wrap(skeleton, lines):
    """The skeleton with the fragment's lines at its marker; skeleton lines of the marker's
    block with one of the fragment's top keys go, with what they hold."""
    sk = skeleton.rstrip('\n').split('\n')
    m = next(i for i, x in enumerate(sk) if x.strip() == '#>')
    ind = indent_of(sk[m])
    keys = set() if lines[0].startswith('- ') else top_keys(lines)
    start = m
    while start > 0 and indent_of(sk[start - 1]) >= ind:
        start -= 1
    out, i = [], 0
    while i < len(sk):
        x = sk[i]
        km = re.match(r' {%d}([A-Za-z_][\w-]*):' % ind, x)
        if start <= i < m and km and km.group(1) in keys and indent_of(x) == ind:
            i += 1
            while i < m and indent_of(sk[i]) > ind:
                i += 1
            continue
        if i == m:
            out += [(' ' * ind + y) if y else y for y in lines]
        else:
            out.append(x)
        i += 1
    return '\n'.join(out) + '\n'


def list_place(path):
    """The list a list-item example of path goes into: upstreams.NAME.servers[].weight ->
    upstreams.NAME.servers."""
    return path.rsplit('[]', 1)[0]


def infer_place(lines, places):
    keys = top_keys(lines)
    if lines[0].startswith('- '):
        for place in SKELETONS:
            if place + '[]' in places and keys <= places[place + '[]']:
                return place
        return None
    for place in SKELETONS:
        if keys and keys <= places.get(place, set()):
            return place
    return None


# ------------------------------------------------------------------ loading

def setup(tmp):
    """Files and names the examples use."""
    certs = os.path.join(SRCDIR, 'config', 'certs')
    for d in MAPPED_DIRS:
        os.makedirs(os.path.join(tmp, 'root', d.strip('/'), 'tls'), exist_ok=True)
    for name in ('api.crt', 'api.key', 'gateway.crt', 'gateway.key', 'clients-ca.pem'):
        src = os.path.join(certs, 'api.key' if name.endswith('.key') else 'api.crt')
        shutil.copy(src, os.path.join(tmp, name))
        shutil.copy(src, os.path.join(tmp, 'root', 'etc', 'jsongate', 'tls', name))
    # A key set (one P-256 key) and an API keys file, for the auth examples.
    with open(os.path.join(tmp, 'root', 'etc', 'jsongate', 'jwks.json'), 'w') as f:
        f.write('{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",'
                '"x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",'
                '"y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}\n')
    with open(os.path.join(tmp, 'root', 'etc', 'jsongate', 'api-keys.txt'), 'w') as f:
        f.write('partner %s\n' % ('0' * 64))
    hosts = os.path.join(tmp, 'hosts')
    with open(hosts, 'w') as f:
        f.write('127.0.0.1 %s\n' % ' '.join(HOST_NAMES))
    return hosts


def load(tmp, hosts, text):
    for d in MAPPED_DIRS:
        text = text.replace(d, os.path.join(tmp, 'root', d.strip('/')) + '/')
    text = re.sub(r'^(\s*user: )jsongate\b', r'\g<1>' + pwd.getpwuid(os.getuid()).pw_name, text,
                  flags=re.M)
    path = os.path.join(tmp, 'example.yaml')
    with open(path, 'w') as f:
        f.write(text)
    env = dict(os.environ, JSONGATE_HOSTS_FILE=hosts)
    p = subprocess.run([JSONGATE, '-t', '-c', path], cwd=tmp, env=env, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    return p.returncode == 0 and p.stdout == b'configuration ok\n', \
        (p.stdout + p.stderr).decode(errors='replace')


def check_block(tmp, hosts, where, block, path, places):
    for piece, why in NOT_STANDALONE.items():
        if piece in block:
            print('# %s: not checked: %s' % (where, why))
            return
    lines = dedent(block)
    if path is None and not lines[0].startswith('- ') and 'listeners' in top_keys(lines):
        ok, out = load(tmp, hosts, '\n'.join(lines) + '\n')
        check('%s loads as it is' % where, ok, out + '\n' + block)
        return
    if path is not None:
        place = list_place(path) if lines[0].startswith('- ') else path.rpartition('.')[0]
    else:
        place = infer_place(lines, places)
    if place not in SKELETONS:
        check('%s has a place to be wrapped in' % where, False,
              'no skeleton for %r (keys %s):\n%s' % (place, sorted(top_keys(lines)), block))
        return
    errors = []
    for skeleton in SKELETONS[place]:
        text = wrap(skeleton, lines)
        ok, out = load(tmp, hosts, text)
        if ok:
            break
        errors.append(out + '--- in:\n' + text)
    check('%s loads as part of %s' % (where, place or 'the top level'), ok,
          '\n'.join(errors))


def main():
    readme = read('README.md')
    man = read('man', 'jsongate.yaml.5')
    places = key_places(man)
    blocks = [(w, b, None) for w, b in readme_blocks(readme)] + \
        [(w, b, None) for w, b in readme_blocks(read('bench', 'README.md'), 'bench/README.md')] + \
        list(man_examples(man))
    check('README.md has yaml blocks', sum(w.startswith('README') for w, _, _ in blocks) >= 5)
    tour = re.search(r'^## A tour of the route kinds\n(.*?)(?=^## |\Z)', readme, re.M | re.S)
    for kind in TOUR:
        part = re.search(r'^### %s[^\n]*\n(.*?)(?=^##|\Z)' % re.escape(kind),
                         tour.group(1) if tour else '', re.M | re.S)
        check('README.md, A tour of the route kinds: %s has a yaml block' % kind,
              part is not None and '```yaml\n' in part.group(1))
    check('jsongate.yaml(5) has key examples', sum(p is not None for _, _, p in blocks) >= 100)
    check('jsongate.yaml(5) has configuration blocks',
          sum(p is None and w.startswith('man') for w, _, p in blocks) >= 5)
    synopsis = re.search(r'^\.Sh SYNOPSIS\n(.*?)^\.Sh ', man, re.M | re.S)
    keys = re.search(r'^\.Sh KEYS\n(.*?)^\.Sh ', man, re.M | re.S)
    listed = re.findall(r'^\.It Ic (\S+)$', synopsis.group(1), re.M) if synopsis else []
    top = [k for k in re.findall(r'^\.It Ic (\S+) Ar ', keys.group(1), re.M) if '.' not in k] \
        if keys else []
    check('jsongate.yaml(5) SYNOPSIS: the top-level keys of KEYS, in their order',
          listed == top and len(top) > 5, '%s against %s' % (listed, top))
    tmp = tempfile.mkdtemp(prefix='check_yaml_blocks.')
    try:
        hosts = setup(tmp)
        for where, block, path in blocks:
            check_block(tmp, hosts, where, block, path, places)
        for where, text in examples():
            ok, out = load(tmp, hosts, text)
            check('%s loads as it is' % where, ok, out)
    finally:
        shutil.rmtree(tmp)
    finish()


main()
