#!/bin/sh
# Set up a fresh Debian machine, build jsongate, then run it (run) or test it (check).
set -eu

usage() {
	echo "usage: ./quickstart.sh run|check" >&2
	exit 2
}
[ $# -eq 1 ] || usage
case "$1" in run|check) ;; *) usage ;; esac

cd "$(dirname "$0")"
top=$(pwd)

packages="build-essential autoconf automake libtool pkg-config libevent-dev libssl-dev
libyaml-dev libjsmn-dev check zlib1g-dev python3 curl openssl python3-prometheus-client mandoc
redis-server libnghttp2-dev nghttp2-client python3-h2 python3-websockets
python3-jwt"
missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -q
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
fi

[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure --enable-werror
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs"

if [ "$1" = check ]; then
	exec make -j"$jobs" check VERBOSE=1
fi

# The demo upstream writes its port file once it listens, or exits: wait for one or the other.
portdir=$(mktemp -d)
./tests/upstream/demo-upstream -l 127.0.0.1:9000 -p "$portdir/port" &
upstream=$!
trap 'kill $upstream 2>/dev/null; rm -rf "$portdir"' EXIT INT TERM
while [ ! -s "$portdir/port" ] && kill -0 $upstream 2>/dev/null; do
	sleep 0.1
done
if [ ! -s "$portdir/port" ]; then
	cat >&2 <<MSG

quickstart: the demo upstream cannot listen on 127.0.0.1:9000 (see above).
Free port 9000 (\`ss -ltnp 'sport = :9000'\` shows what holds it) and run ./quickstart.sh run again.
MSG
	exit 1
fi
cat <<MSG

jsongate runs in the foreground on $top/conf/jsongate.yaml (Ctrl-C stops it).
The demo upstream listens on 127.0.0.1:9000. Try, in another terminal:

    curl -i http://127.0.0.1:8080/api/orders/1        # passed through untouched
    curl -i http://127.0.0.1:8080/v2/api/orders/1     # envelope unwrapped to its data
    curl -i http://127.0.0.1:8080/v2/api/orders/404   # envelope code 404 -> HTTP 404, envelope kept
    curl -i http://127.0.0.1:8080/v2/overview/1       # three answers merged into one

MSG
./src/jsongate -f -c "$top/conf/jsongate.yaml"
