#!/bin/sh
# The envelope engine is pure: none of its files may include, even through another header,
# anything of the HTTP layer, libevent or OpenSSL.
: "${CC:=cc}" "${TESTS_SRCDIR:?}" "${TOP_BUILDDIR:?}"
src=$TESTS_SRCDIR/../src
status=0
for f in jscan envelope jvalid jcond jprefix rewrite rewrite_config merge; do
	deps=$($CC -M -I"$src" -include "$TOP_BUILDDIR/autoconf.h" "$src/$f.c") || exit 1
	bad=$(printf '%s\n' $deps | grep -E '/(http|headers|conn|proxy|body|respond)\.h$|/event2/|/openssl/')
	if [ -n "$bad" ]; then
		echo "FAIL: src/$f.c includes" $bad
		status=1
	else
		echo "ok: src/$f.c"
	fi
done
exit $status
