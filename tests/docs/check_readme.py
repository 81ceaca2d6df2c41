"""README.md tells a new user the truth: its Quick start is the two
quickstart.sh commands, and CI runs its test command; its dependency list
names every package quickstart.sh installs; its demo upstream section names
every endpoint tests/upstream/demo_upstream.c serves.

Prints one line per check and "N passed, M failed"; exit 0 only when nothing
failed."""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs'))
from checks import check, read, finish  # noqa: E402

def section(text, title):
    """The text of a '## title' section, up to the next heading of that level."""
    m = re.search(r'^## %s\n(.*?)(?=^## |\Z)' % re.escape(title), text, re.M | re.S)
    return m.group(1) if m else ''


def main():
    readme = read('README.md')
    quick = section(readme, 'Quick start')
    commands = re.findall(r'^    (\S.*?)(?:\s+#.*)?$', quick, re.M)
    check('Quick start: exactly the two quickstart.sh commands', commands ==
          ['./quickstart.sh run', './quickstart.sh check'], commands)
    ci = read('.ci', 'run')
    check('.ci/run runs the README\'s test command', re.search(r'^(exec )?\./quickstart\.sh check$',
                                                              ci, re.M), ci)

    script = read('quickstart.sh')
    m = re.search(r'^packages="([^"]*)"', script, re.M)
    packages = m.group(1).split() if m else []
    check('quickstart.sh lists its packages', len(packages) > 5, packages)
    m = re.search(r'^Dependencies \(Debian packages[^)]*\): (.*?)\n\n', readme, re.M | re.S)
    listed = set(re.findall(r'[a-z0-9][a-z0-9.+-]+', m.group(1))) if m else set()
    for p in packages:
        check('README lists %s, which quickstart.sh installs' % p, p in listed)

    demo = read('tests', 'upstream', 'demo_upstream.c')
    documented = section(readme, 'The demo upstream')
    served = re.findall(r'str(?:n)?cmp\(t, "(/[a-z/]*)"', demo)
    served += re.findall(r'^\t\{ "(/api/[^"]*)"', demo, re.M)
    check('the demo upstream serves endpoints', len(served) >= 8, served)
    for path in served:
        check('README documents the demo upstream\'s %s' % path,
              re.search(r'`(GET |POST |any method, |or )?%s(N|MS)?[`, ]' % re.escape(path),
                        documented) or '%s`' % path in documented, path)
    finish()


main()
