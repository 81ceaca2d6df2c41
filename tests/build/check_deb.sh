#!/bin/sh
# The Debian package as an operator gets it: built from the committed tree (git archive HEAD,
# in a scratch directory, with DEB_BUILD_OPTIONS=nocheck: the suite runs elsewhere in CI),
# checked by lintian (no error, no warning), then installed on this machine with dpkg -i:
# jsongate -t passes on the installed sample (as root and as the jsongate user the unit runs
# as), the files are where Debian puts them, the two conffiles are the package's only ones, a
# changed conffile survives a reinstall and an upgrade and a remove, systemd-analyze verify
# accepts the installed unit, and dpkg --purge leaves nothing named jsongate but the system
# user and group (Debian never removes those; this script removes them afterwards when it
# created them, so that the machine is left as it was).
#
# Not tested here: the service under a running systemd (start, Type=notify readiness, reload,
# stop; where systemd is not PID 1, deb-systemd-invoke starts nothing), the hardening at run
# time, and logrotate running the installed file (its syntax is checked with logrotate -d when
# logrotate is installed).
#
# It installs packages and changes the machine: it runs as root, from CI (.ci/run), never from
# make check.  It stops at once when a jsongate package is installed already.  Missing
# build tools (debhelper, dpkg-dev, lintian, fakeroot) are installed with apt-get.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
started=$(date +%s)
phase_start=$started
status=0
n=0

ok() { n=$((n + 1)); echo "ok $n - $*"; }
fail() { n=$((n + 1)); echo "FAIL $n - $*"; status=1; }
# expect WHAT COMMAND...: ok when COMMAND succeeds.
expect() {
	what=$1
	shift
	if "$@"; then ok "$what"; else fail "$what"; fi
}
expect_quiet() {
	what=$1
	shift
	if "$@" >/dev/null 2>&1; then ok "$what"; else fail "$what"; fi
}
phase() {
	now=$(date +%s)
	echo "# $1 ($((now - phase_start)) s)"
	phase_start=$now
}
# Everything named jsongate where a package or its scripts may write (dpkg's own database and
# the temporary directories, where other programs come and go, left out).
leftovers() {
	find /etc /usr /lib /var /run /opt /srv \( -path /var/lib/dpkg -o -path /var/tmp \) -prune \
	    -o -name '*jsongate*' -print 2>/dev/null | sort
}
die() {
	echo "check_deb: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root: it installs the package with dpkg -i"
if dpkg-query -W -f='${Status}\n' jsongate 2>/dev/null | grep -q ' installed$\|config-files$'; then
	die "a jsongate package is installed already: purge it first (dpkg --purge jsongate)"
fi
git -C "$top" rev-parse --verify -q HEAD >/dev/null || die "$top is not a git checkout"

# ---------------------------------------------------------------- tools
tools="debhelper dpkg-dev lintian fakeroot"
missing=""
for p in $tools; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	apt-get -o DPkg::Lock::Timeout=300 update -q
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
	    --no-install-recommends $missing
fi
phase "tools"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_deb.XXXXXX")
user_existed=no
getent passwd jsongate >/dev/null && user_existed=yes
group_existed=no
getent group jsongate >/dev/null && group_existed=yes
cleanup() {
	if dpkg-query -W -f='${Status}\n' jsongate 2>/dev/null | grep -q ' installed$\|config-files$'; then
		dpkg --purge jsongate >/dev/null 2>&1 || echo "check_deb: dpkg --purge jsongate failed" >&2
	fi
	if [ $user_existed = no ] && getent passwd jsongate >/dev/null; then
		userdel jsongate || true
	fi
	if [ $group_existed = no ] && getent group jsongate >/dev/null; then
		groupdel jsongate || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---------------------------------------------------------------- the source package's promises
# Build-Depends: exactly what quickstart.sh installs, less build-essential (implied by policy).
want=$(sed -n '/^packages="/,/"$/p' "$top/quickstart.sh" | sed 's/^packages="//; s/"$//' |
    tr -s ' ' '\n' | grep . | grep -v '^build-essential$' | sort)
have=$(sed -n '/^Build-Depends:/,/^[A-Z]/p' "$top/debian/control" | sed '$d' |
    sed 's/^Build-Depends://' | tr ',' '\n' | sed 's/[(<].*//; s/[[:space:]]//g' | grep . |
    grep -v '^debhelper-compat$' | sort)
if [ -n "$want" ] && [ "$want" = "$have" ]; then
	ok "Build-Depends: the packages quickstart.sh installs, less build-essential"
else
	fail "Build-Depends: the packages quickstart.sh installs, less build-essential"
	echo "$want" >"$tmp/want"
	echo "$have" >"$tmp/have"
	diff "$tmp/want" "$tmp/have" || true
fi
version=$(cd "$top" && dpkg-parsechangelog -S Version)
upstream=$(sed -n 's/^AC_INIT(\[jsongate\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")
expect "debian/changelog's version $version is configure.ac's $upstream" test "$version" = "$upstream"

# ---------------------------------------------------------------- build
mkdir "$tmp/src"
git -C "$top" archive HEAD | tar -x -C "$tmp/src"
jobs=$(nproc 2>/dev/null || echo 2)
if (cd "$tmp/src" && DEB_BUILD_OPTIONS="nocheck noautodbgsym" \
    dpkg-buildpackage -us -uc -b -Pnocheck -J"$jobs") >"$tmp/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b"
else
	fail "dpkg-buildpackage -us -uc -b"
	tail -40 "$tmp/build.log"
	exit 1
fi
deb=$tmp/jsongate_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || die "no $deb after the build"
phase "build"

# lintian warns when run as root; the tags are what matter.
if lintian --fail-on error,warning --pedantic -I "$tmp"/jsongate_*.changes >"$tmp/lintian.out" 2>&1; then
	ok "lintian: no error, no warning"
else
	fail "lintian: no error, no warning"
fi
grep -v '^running with root privileges' "$tmp/lintian.out" | sed 's/^/# lintian: /' || true
phase "lintian"

# ---------------------------------------------------------------- install
leftovers >"$tmp/before"
if dpkg -i "$deb" >"$tmp/install.log" 2>&1; then
	ok "dpkg -i"
else
	fail "dpkg -i"
	cat "$tmp/install.log"
	exit 1
fi

for f in /usr/sbin/jsongate /etc/jsongate/jsongate.yaml /etc/logrotate.d/jsongate \
    /usr/share/man/man8/jsongate.8.gz /usr/share/man/man5/jsongate.yaml.5.gz \
    /usr/lib/sysusers.d/jsongate.conf /usr/share/doc/jsongate/copyright \
    /usr/share/doc/jsongate/README.md.gz; do
	expect "installed: $f" test -f "$f"
done
expect "installed: the examples in /usr/share/doc/jsongate/examples" \
    test -n "$(find /usr/share/doc/jsongate/examples -name '*.yaml' 2>/dev/null)"
unit=
for d in /lib/systemd/system /usr/lib/systemd/system; do
	[ -f $d/jsongate.service ] && unit=$d/jsongate.service
done
expect "installed: the unit in /lib/systemd/system or /usr/lib/systemd/system" test -n "$unit"
expect "/usr/sbin/jsongate is executable" test -x /usr/sbin/jsongate
# Every file of the package is under a directory Debian puts such files in.
dpkg -L jsongate | while read -r f; do
	[ -d "$f" ] && continue
	case $f in
	/usr/sbin/jsongate | /etc/jsongate/* | /etc/logrotate.d/jsongate | /usr/share/man/man[58]/* | \
	    /usr/share/doc/jsongate/* | /lib/systemd/system/* | /usr/lib/systemd/system/* | \
	    /usr/lib/sysusers.d/jsongate.conf) ;;
	*) echo "$f" ;;
	esac
done >"$tmp/stray"
expect "no file of the package elsewhere" test ! -s "$tmp/stray"
sed 's/^/# elsewhere: /' "$tmp/stray"
conffiles=$(dpkg-query -W -f='${Conffiles}\n' jsongate | awk 'NF { print $1 }' | sort | tr '\n' ' ')
expect "conffiles: /etc/jsongate/jsongate.yaml and /etc/logrotate.d/jsongate ($conffiles)" \
    test "$conffiles" = "/etc/jsongate/jsongate.yaml /etc/logrotate.d/jsongate "

expect_quiet "the jsongate system user exists" getent passwd jsongate
uid=$(getent passwd jsongate | cut -d: -f3)
expect "jsongate is a system user (uid ${uid:-none} < 1000)" test "${uid:-1000}" -lt 1000
expect_quiet "the jsongate group exists" getent group jsongate

out=$(/usr/sbin/jsongate -t -c /etc/jsongate/jsongate.yaml 2>&1) && rc=0 || rc=$?
expect "jsongate -t -c /etc/jsongate/jsongate.yaml: configuration ok" \
    test "$rc $out" = "0 configuration ok"
out=$(/usr/sbin/jsongate -t 2>&1) && rc=0 || rc=$?
expect "jsongate -t (the default file is /etc/jsongate/jsongate.yaml): configuration ok" \
    test "$rc $out" = "0 configuration ok"
# ExecStartPre= runs the same check as the service user.
if command -v setpriv >/dev/null; then
	out=$(setpriv --reuid=jsongate --regid=jsongate --clear-groups \
	    /usr/sbin/jsongate -t -c /etc/jsongate/jsongate.yaml 2>&1) && rc=0 || rc=$?
	expect "jsongate -t as the jsongate user: configuration ok" test "$rc $out" = "0 configuration ok"
else
	echo "# not tested: jsongate -t as the jsongate user (no setpriv)"
fi
expect "jsongate(8) names /etc/jsongate/jsongate.yaml" \
    sh -c 'zcat /usr/share/man/man8/jsongate.8.gz | grep -q "/etc/jsongate/jsongate.yaml"'
expect "the unit runs /usr/sbin/jsongate on /etc/jsongate/jsongate.yaml" \
    grep -qx 'ExecStart=/usr/sbin/jsongate -f -c /etc/jsongate/jsongate.yaml' "$unit"
expect "the unit is enabled (multi-user.target.wants)" \
    test -L /etc/systemd/system/multi-user.target.wants/jsongate.service
if command -v systemd-analyze >/dev/null; then
	man=yes
	command -v man >/dev/null || man=no
	if systemd-analyze verify --man=$man "$unit" >"$tmp/verify.out" 2>&1 && [ ! -s "$tmp/verify.out" ]; then
		ok "systemd-analyze verify --man=$man $unit"
	else
		fail "systemd-analyze verify --man=$man $unit"
		cat "$tmp/verify.out"
	fi
else
	echo "# not tested: systemd-analyze verify (no systemd-analyze)"
fi
if command -v logrotate >/dev/null; then
	expect "logrotate -d /etc/logrotate.d/jsongate" \
	    sh -c 'logrotate -d /etc/logrotate.d/jsongate >/dev/null 2>&1'
else
	echo "# not tested: logrotate -d /etc/logrotate.d/jsongate (no logrotate)"
fi
phase "install"

# ---------------------------------------------------------------- the conffile is the operator's
printf '\n# changed by the operator\n' >>/etc/jsongate/jsongate.yaml
cp /etc/jsongate/jsongate.yaml "$tmp/changed.yaml"
expect "reinstall (dpkg -i again)" sh -c "dpkg -i '$deb' >'$tmp/install.log' 2>&1"
expect "the changed conffile survives a reinstall" cmp -s "$tmp/changed.yaml" /etc/jsongate/jsongate.yaml
# An upgrade: the same package under a higher version (its sample unchanged, so dpkg keeps
# the changed file without asking).
dpkg-deb -R "$deb" "$tmp/next"
sed -i "s/^Version: .*/Version: $version+check1/" "$tmp/next/DEBIAN/control"
dpkg-deb -b "$tmp/next" "$tmp/next.deb" >/dev/null
expect "upgrade to $version+check1" sh -c "dpkg -i '$tmp/next.deb' >'$tmp/install.log' 2>&1"
expect "installed version is $version+check1" \
    test "$(dpkg-query -W -f='${Version}' jsongate)" = "$version+check1"
expect "the changed conffile survives an upgrade" cmp -s "$tmp/changed.yaml" /etc/jsongate/jsongate.yaml
out=$(/usr/sbin/jsongate -t -c /etc/jsongate/jsongate.yaml 2>&1) && rc=0 || rc=$?
expect "jsongate -t on the changed file after the upgrade" test "$rc $out" = "0 configuration ok"

expect "dpkg -r" sh -c "dpkg -r jsongate >'$tmp/remove.log' 2>&1"
expect "removed: /usr/sbin/jsongate" test ! -e /usr/sbin/jsongate
expect "removed, not purged: the changed conffile is kept" \
    cmp -s "$tmp/changed.yaml" /etc/jsongate/jsongate.yaml
phase "conffiles"

# ---------------------------------------------------------------- purge
# What the service would have written (systemd's LogsDirectory=jsongate).
mkdir -p /var/log/jsongate
echo '{}' >/var/log/jsongate/access.log
expect "dpkg --purge" sh -c "dpkg --purge jsongate >'$tmp/purge.log' 2>&1"
expect "purged: dpkg knows no jsongate" \
    sh -c '! dpkg-query -W -f="\${Status}" jsongate 2>/dev/null | grep -q "installed\|config-files"'
leftovers >"$tmp/after"
comm -13 "$tmp/before" "$tmp/after" >"$tmp/new"
# man-db's cache of formatted pages is filled by reading them (systemd-analyze checks the
# unit's Documentation=): not the package's; removed to leave the machine as it was.
grep '^/var/cache/man/' "$tmp/new" | xargs -r rm -f
grep -v '^/var/cache/man/' "$tmp/new" >"$tmp/left" || true
expect "purged: no file or directory named jsongate is left" test ! -s "$tmp/left"
sed 's/^/# left: /' "$tmp/left"
expect "purged: /var/log/jsongate is gone" test ! -e /var/log/jsongate
if [ $user_existed = no ]; then
	expect_quiet "purged: the jsongate system user stays, as policy wants" getent passwd jsongate
fi
phase "purge"

echo "# $n checks in $(($(date +%s) - started)) s"
if [ $status -eq 0 ]; then
	echo "check_deb: all passed"
else
	echo "check_deb: FAILED"
fi
exit $status
