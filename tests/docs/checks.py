"""What the document and build checks share: where the source tree is, one line per check,
and the closing line "N passed, M failed" with the exit status it calls for."""

import os
import sys

SRCDIR = os.environ.get('TESTS_SRCDIR',
                        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOP = os.path.dirname(SRCDIR)

_counts = {'passed': 0, 'failed': 0}


def check(what, ok, detail=''):
    """Prints "ok N - what" or "FAIL N - what: detail"; returns ok."""
    key = 'passed' if ok else 'failed'
    _counts[key] += 1
    n = _counts['passed'] + _counts['failed']
    if ok:
        print('ok %d - %s' % (n, what))
    else:
        print('FAIL %d - %s: %s' % (n, what, detail))
    return ok


def read(*path):
    """The text of a file of the source tree."""
    with open(os.path.join(TOP, *path)) as f:
        return f.read()


def finish(need_one=True):
    """The closing line; exits 0 only when nothing failed (and, with need_one, something
    was checked)."""
    print('%d passed, %d failed' % (_counts['passed'], _counts['failed']))
    ok = _counts['failed'] == 0 and (_counts['passed'] > 0 or not need_one)
    sys.exit(0 if ok else 1)
