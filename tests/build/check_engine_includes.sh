#!/bin/sh
# The envelope engine is pure: none of its files may include, even through another header,
# anything of the HTTP layer, libevent or OpenSSL, nor the configuration (config.h): what the
# engine parses from YAML lives in its *_config.c files, which are the configuration's side and
# may include config.h.  The HTTP/1.1 parser does not include config.h either.  The block
# allocator is a base facility: libevent's buffers and the deadlines, nothing of HTTP, TLS,
# configuration or the engine.
: "${CC:=cc}" "${TESTS_SRCDIR:?}" "${TOP_BUILDDIR:?}"
src=$TESTS_SRCDIR/../src
status=0
http_layer='/(http|headers|conn|proxy|body|body_[a-z]+|respond)\.h$|/event2/|/openssl/'
config='/config(_parse)?\.h$'

# check FILE PATTERN: FILE's includes, direct or not, must not match PATTERN
check() {
	deps=$($CC -M -I"$src" -include "$TOP_BUILDDIR/autoconf.h" "$src/$1.c") || exit 1
	bad=$(printf '%s\n' $deps | grep -E "$2")
	if [ -n "$bad" ]; then
		echo "FAIL: src/$1.c includes" $bad
		status=1
	else
		echo "ok: src/$1.c"
	fi
}

for f in jscan envelope jvalid jstr jcond jprefix rewrite merge sse ndjson stream_event stream_fast stream_envelope; do
	check $f "$http_layer|$config"
done
for f in jcond_config rewrite_config; do
	check $f "$http_layer"
done
check http "$config"
check block '/(http|headers|conn|proxy|body|body_[a-z]+|respond|config|route|rewrite|envelope|jscan|tls)\.h$|/openssl/|/(zlib|yaml)\.h$'
exit $status
