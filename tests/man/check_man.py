"""The man pages agree with the configuration loader: every key it accepts
(schema-dump, from config_schema_write) has an entry in the KEYS section of
jsongate.yaml.5 with the same type, its default (or "Required") and an
example, and every entry there is a key the loader accepts.  jsongate.8, built
from its template with the configured paths, names the default configuration
file that `jsongate -h` prints, and every gateway error of src/errors.h with
its status.  Both pages are also checked with mandoc -Tlint at warning level.

Prints one line per check and "N passed, M failed"; exit 0 only when nothing
failed."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs'))
from checks import TOP, check, finish  # noqa: E402
DUMP = os.environ.get('SCHEMA_DUMP', os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get('JSONGATE', 'src/jsongate'))), 'tests', 'man', 'schema-dump'))
JSONGATE = os.environ.get('JSONGATE', 'src/jsongate')
MAN5 = os.path.join(TOP, 'man', 'jsongate.yaml.5')
MAN8 = os.path.join(os.environ.get('MAN_BUILDDIR', os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(JSONGATE))), 'man')), 'jsongate.8')

def schema():
    out = subprocess.run([DUMP], capture_output=True, check=True).stdout.decode()
    keys = {}
    for line in out.splitlines():
        key, typ, default, _doc = line.split('\t', 3)
        keys[key] = (typ, default)
    return keys


def text_of(lines):
    """The words of mdoc lines, macros and escapes removed."""
    words = []
    for line in lines:
        if line.startswith('.'):
            parts = line.split()[1:]
            words.extend(p for p in parts if p not in ('Li', 'Ns', 'Ar', 'Cm', 'Ic', 'Ql',
                                                       'Dv', 'Pa', 'Dl'))
        else:
            words.extend(line.split())
    return re.sub(r'\s*\\&\s*', '', ' '.join(words))


def man_keys():
    with open(MAN5) as f:
        lines = f.read().splitlines()
    start = lines.index('.Sh KEYS')
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith('.Sh '))
    entries = {}
    current = None
    for line in lines[start + 1:end]:
        m = re.match(r'\.It Ic (\S+) Ar (\S+)$', line)
        if m:
            current = m.group(1)
            check('%s has one entry' % current, current not in entries)
            entries[current] = (m.group(2), [])
        elif line.startswith('.It '):
            check('KEYS entry written as ".It Ic KEY Ar TYPE"', False, line)
            current = None
        elif current is not None and line != '.El':
            entries[current][1].append(line)
    return entries


def main():
    keys = schema()
    entries = man_keys()
    check('the loader lists keys', len(keys) > 20, len(keys))
    for key in keys:
        check('%s is documented in jsongate.yaml.5' % key, key in entries)
    for key in entries:
        check('%s in jsongate.yaml.5 is a key the loader accepts' % key, key in keys)
    for key, (typ, default) in keys.items():
        if key not in entries:
            continue
        mtype, body = entries[key]
        text = text_of(body)
        check('%s: type %s' % (key, typ), mtype == typ, 'page says %s' % mtype)
        if default == '(required)':
            check('%s: says it is required' % key, 'Required' in text, text)
        elif default == '-':
            check('%s: says what happens without it' % key, 'Default: ' in text, text)
        else:
            check('%s: default %s' % (key, default), 'Default: %s' % default in text, text)
        check('%s: has an example' % key, 'Example:' in text and any(
            l.startswith('.Dl ') for l in body), text)
    usage = subprocess.run([JSONGATE, '-h'], capture_output=True).stdout.decode()
    m = re.search(r'-c FILE .*\(default: (\S+)\)', usage)
    default = m.group(1) if m else None
    with open(MAN8) as f:
        man8 = f.read()
    files = man8[man8.index('.Sh FILES'):man8.index('.Sh EXIT STATUS')]
    check('jsongate.8 FILES names the default configuration of -h, %s' % default,
          default is not None and '.It Pa %s\nDefault configuration file.' % default in files,
          files[:300])
    check('jsongate.8 -c names it too', default is not None and
          'instead of\n.Pa %s .' % default in man8)
    check('jsongate.8 has no template variable left', not re.search(r'@[a-z_]+@', man8),
          re.findall(r'.*@[a-z_]+@.*', man8))
    # Every gateway error of src/errors.h, with its status, in jsongate(8).
    with open(os.path.join(TOP, 'src', 'errors.h')) as f:
        errors = re.findall(r'X\(\w+,\s*(\d+),\s*"(\w+)"', f.read())
    check('errors.h lists the gateway errors', len(errors) >= 10, errors)
    for status, code in errors:
        check('gateway error %s (%s) is documented in jsongate.8' % (code, status),
              '.It Cm %s No (%s)' % (code, status) in man8.splitlines())
    for page in (MAN8, MAN5):
        p = subprocess.run(['mandoc', '-Tlint', '-W', 'warning', page], capture_output=True)
        check('mandoc -Tlint -W warning %s' % os.path.basename(page),
              p.returncode == 0 and not p.stdout and not p.stderr,
              (p.stdout + p.stderr).decode())
    finish()


main()
