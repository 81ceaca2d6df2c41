#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Instructions per request of jsongate on given configurations, counted by callgrind: the
# daemon runs under valgrind in front of a static nginx upstream, takes warm-up requests, then
# N requests on one keep-alive connection between a zeroing and a dump of its counters.
# Deterministic to a few instructions, so it compares configurations on a busy machine where
# wall-clock CPU cannot.  See bench/README.md.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/instructions.sh TEMPLATE...

TEMPLATE is a jsongate configuration template of bench/conf/ (jsongate-reshape.yaml.in, or
its name without the .yaml.in), with the placeholders bench/run.sh fills in.  For each
template and size, prints the instructions per request of the whole daemon (all threads,
user space), as counted by callgrind.

Environment:
  SIZES="1k 16k"       body sizes (bytes, k or m suffix): GET /SIZE.json
  REQUESTS=2000        measured requests, one after the other on one keep-alive connection
  WARMUP=400           requests before the counters are zeroed
  JSONGATE=build/src/jsongate   daemon binary
  NGINX=nginx          nginx binary (the upstream)
  KEEP=1               keep the temporary directory, with each run's callgrind dump
                       (callgrind_annotate FILE shows where the instructions go)
  H2=1                 HTTP/2 streams instead: the listener gets http2: true and h2load
                       sends the requests over one h2c connection, 10 streams at a time
                       (h2load -c 1 -m 10), warm-up and measured run each on a new one
  H2LOAD=h2load        h2load binary (H2=1)
EOF
}

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
	usage
	exit 0
fi
if [ $# -eq 0 ]; then
	usage >&2
	exit 2
fi

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT_DIR=$(dirname "$BENCH_DIR")
SIZES=${SIZES:-1k 16k}
REQUESTS=${REQUESTS:-2000}
WARMUP=${WARMUP:-400}
JSONGATE=${JSONGATE:-$ROOT_DIR/build/src/jsongate}
NGINX=${NGINX:-nginx}
KEEP=${KEEP:-0}
H2=${H2:-0}
H2LOAD=${H2LOAD:-h2load}

# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"

missing=
for tool in valgrind callgrind_control python3 "$NGINX"; do
	command -v "$tool" >/dev/null || missing="$missing $tool"
done
[ -x "$JSONGATE" ] || missing="$missing $JSONGATE"
if [ "$H2" = 1 ]; then
	command -v "$H2LOAD" >/dev/null || missing="$missing $H2LOAD"
fi
[ -z "$missing" ] || die "missing:$missing"

templates=()
for t in "$@"; do
	case "$t" in *.in) ;; *) t=$t.yaml.in ;; esac
	[ -e "$BENCH_DIR/conf/$t" ] || die "no template bench/conf/$t"
	templates+=("$t")
done

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/jsongate-instr.XXXXXX")
DATADIR=$RUNDIR/data
mkdir -p "$DATADIR/u2" "$DATADIR/u3" "$RUNDIR/upstream-body"
# shellcheck disable=SC2086 # SIZES is a list
python3 "$BENCH_DIR/envelopes.py" "$DATADIR" $SIZES
# nginx's worker may run as another user.
chmod 755 "$RUNDIR" "$DATADIR"
chmod 644 "$DATADIR"/*.json

UPSTREAM_PORT=$(pick_port)
UPSTREAM_PORT2=$(pick_port)
UPSTREAM_PORT3=$(pick_port)

render() {
	local template=$1 out=$2 port=$3
	sed -e "s|@RUNDIR@|$RUNDIR|g" -e "s|@DATADIR@|$DATADIR|g" \
		-e "s|@NAME@|jsongate|g" -e "s|@PORT@|$port|g" \
		-e "s|@UPSTREAM_PORT@|$UPSTREAM_PORT|g" \
		-e "s|@UPSTREAM_PORT2@|$UPSTREAM_PORT2|g" -e "s|@UPSTREAM_PORT3@|$UPSTREAM_PORT3|g" \
		-e "s|@MAX_CONNECTIONS@|1024|g" -e "s|@NOFILE@|2048|g" -e "s|@BENCH_DIR@|$BENCH_DIR|g" \
		"$BENCH_DIR/conf/$template" >"$out"
}

render nginx-upstream.conf.in "$RUNDIR/upstream.conf" "$UPSTREAM_PORT"
start_bg "$RUNDIR/upstream.out" "$NGINX" -p "$RUNDIR/" -c "$RUNDIR/upstream.conf"
wait_port "$UPSTREAM_PORT" "$BG_PID" "$RUNDIR/upstream.out"

# COUNT GETs of PATH on one keep-alive connection to PORT, each a 200 read to its end; the
# header lines of HEADERS (a file, or "") are added to each.
send() {
	python3 - "$BENCH_DIR" "$1" "$2" "$3" "${4:-}" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from client import connect, read_response, request

port, path, count = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sock = connect(port)
sock.settimeout(60)
req = request(path)
if sys.argv[5]:
    with open(sys.argv[5], 'rb') as f:
        req = req[:-2] + f.read() + b'\r\n'

for _ in range(count):
    sock.sendall(req)
    status, _ = read_response(sock)
    if status != 200:
        sys.exit("status %d for %s" % (status, path))
EOF
}

# COUNT GETs of PATH as HTTP/2 streams over one h2c connection to PORT, 10 at a time; all
# must be answered 2xx.
send_h2() {
	local out
	out=$("$H2LOAD" -n "$3" -c 1 -m 10 "http://127.0.0.1:$1$2" 2>&1) ||
		die "h2load failed: $out"
	grep -q "status codes: $3 2xx" <<<"$out" || die "not all $3 streams 2xx: $out"
}

printf '%-36s %6s %14s\n' "configuration" "size" "instr/request"
for t in "${templates[@]}"; do
	for size in $SIZES; do
		name=${t%.yaml.in}-$size
		port=$(pick_port)
		render "$t" "$RUNDIR/$name.yaml" "$port"
		if [ "$H2" = 1 ] && ! grep -q 'http2: true' "$RUNDIR/$name.yaml"; then
			# The listener (the first) speaks HTTP/2 by prior knowledge too.
			sed -i "s|^\(  - listen: 127.0.0.1:$port\)\$|\1\n    http2: true|" \
				"$RUNDIR/$name.yaml"
			grep -q 'http2: true' "$RUNDIR/$name.yaml" ||
				die "no listener line to add http2: true to in $t"
		fi
		"$JSONGATE" -t -c "$RUNDIR/$name.yaml" >"$RUNDIR/$name.test.log" 2>&1 ||
			die "jsongate rejects $t: $(cat "$RUNDIR/$name.test.log")"
		start_bg "$RUNDIR/$name.out" valgrind --tool=callgrind \
			--callgrind-out-file="$RUNDIR/$name.callgrind" \
			"$JSONGATE" -f -c "$RUNDIR/$name.yaml"
		pid=$BG_PID
		for _ in $(seq 300); do # valgrind starts slowly
			port_open "$port" && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		wait_port "$port" "$pid" "$RUNDIR/$name.out"
		headers=$BENCH_DIR/conf/${t%.yaml.in}.headers
		[ -f "$headers" ] || headers=
		if [ "$H2" = 1 ]; then
			[ -z "$headers" ] || die "H2=1 sends no extra headers ($headers)"
			send_h2 "$port" "/$size.json" "$WARMUP"
			callgrind_control -z "$pid" >/dev/null 2>&1 || die "callgrind_control -z failed"
			send_h2 "$port" "/$size.json" "$REQUESTS"
		else
			send "$port" "/$size.json" "$WARMUP" "$headers"
			callgrind_control -z "$pid" >/dev/null 2>&1 || die "callgrind_control -z failed"
			send "$port" "/$size.json" "$REQUESTS" "$headers"
		fi
		callgrind_control -d "$pid" >/dev/null 2>&1 || die "callgrind_control -d failed"
		stop_pid "$pid"
		# The dump of -d is the first one; the file without a number is the one at exit.
		total=$(awk '/^(summary|totals):/ { print $2; exit }' "$RUNDIR/$name.callgrind.1")
		label=${t%.yaml.in}
		[ "$H2" = 1 ] && label="$label (h2)"
		printf '%-36s %6s %14s\n' "$label" "$size" \
			"$(awk -v t="$total" -v n="$REQUESTS" 'BEGIN { printf "%.0f", t / n }')"
	done
done
