#!/bin/sh
# Where `make install` puts the logrotate file: in /etc/logrotate.d, the one directory logrotate
# reads, with the default prefix and sysconfdir; under SYSCONFDIR when --sysconfdir is given;
# in DIR with --with-logrotatedir=DIR, nowhere with =no.  Each case configures a scratch build
# directory and runs `make install-data DESTDIR=...` (nothing is compiled); jsongate(8) names
# the same file.
: "${TESTS_SRCDIR:?}"
top=$(cd "$TESTS_SRCDIR/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_install.XXXXXX") || exit 1
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
status=0
n=0

# try_install CASE WANT [configure arguments...]: the logrotate file is at WANT under DESTDIR
# (WANT "none": no logrotate file at all).
try_install() {
	name=$1 want=$2
	shift 2
	n=$((n + 1))
	build=$tmp/build$n dest=$tmp/dest$n
	mkdir "$build"
	if ! (cd "$build" && "$top/configure" -C --cache-file="$tmp/config.cache" \
	    --with-systemdsystemunitdir=no --with-sysusersdir=no "$@" >configure.out 2>&1); then
		echo "FAIL: $name: configure $*"
		tail -20 "$build/configure.out"
		status=1
		return
	fi
	if ! make -s -C "$build" install-data DESTDIR="$dest" >"$build/install.out" 2>&1; then
		echo "FAIL: $name: make install-data"
		tail -20 "$build/install.out"
		status=1
		return
	fi
	found=$(cd "$dest" && find . -type f -name jsongate \
	    -exec cmp -s "$top/contrib/logrotate/jsongate" {} \; -print | sed 's|^\.||')
	if [ "$want" = none ]; then
		expect=
	else
		expect=$want
	fi
	if [ "$found" = "$expect" ]; then
		echo "ok: $name: ${found:-no logrotate file}"
	else
		echo "FAIL: $name: logrotate file at '${found}', want '${expect}'"
		status=1
	fi
	if [ "$want" != none ] && ! grep -q "^\.It Pa $want\$" "$build/man/jsongate.8"; then
		echo "FAIL: $name: jsongate(8) does not name $want:"
		grep -n logrotate "$build/man/jsongate.8"
		status=1
	fi
}

try_install 'default prefix' /etc/logrotate.d/jsongate
try_install '--prefix=/usr --sysconfdir=/etc' /etc/logrotate.d/jsongate --prefix=/usr --sysconfdir=/etc
try_install '--prefix=/opt/jg' /etc/logrotate.d/jsongate --prefix=/opt/jg
try_install '--sysconfdir=/opt/jg/etc' /opt/jg/etc/logrotate.d/jsongate --sysconfdir=/opt/jg/etc
try_install '--with-logrotatedir=/srv/lr' /srv/lr/jsongate --with-logrotatedir=/srv/lr
try_install '--with-logrotatedir=no' none --with-logrotatedir=no
exit $status
