#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Load benchmark: CPU per request of jsongate and nginx in front of the same static upstream.
# See bench/README.md. Installs nothing; names the missing tools.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/run.sh [-h]

Starts an nginx upstream serving static JSON envelopes, then each proxy variant in turn in
front of it, pinned alone on one CPU, drives it with wrk from another CPU and prints a
markdown table (also written to bench/results/latest.md).

Environment:
  DURATION=10          seconds of each measured wrk run
  ROUNDS=3             measured runs of each row, taken in turns (A B A B ...); the table
                       shows the median run of each row and the spread of CPU per request
  WARMUP=3             seconds of wrk warm-up before each measured run (0: none)
  SIZES="1k 16k 256k 1m"  body sizes (bytes, k or m suffix)
  CONNECTIONS=16       wrk connections (one wrk thread)
                       (the *-tls variants speak TLS 1.3 with an ECDSA P-256 certificate made
                       for the run; the *-tls-close ones send Connection: close, so every
                       request opens a connection and does a handshake, which resumes the
                       session of the one before (wrk keeps it); the *-tls-full ones do the
                       same against proxies with session resumption off: every handshake is
                       a full one)
  IDLE_CLIENTS=10000   idle keep-alive connections for the idle-RSS test (0: skip it)
  PROXIES="..."        variants to run (default: all; see VARIANTS in this script)
  JSONGATE=build/src/jsongate   daemon binary
  JSONGATE_BASE=...    another jsongate binary (an earlier build): adds the rows jsongate-base
                       (pass-through as the jsongate row), jsongate-base-unwrap and
                       jsongate-base-reshape (as jsongate-unwrap and jsongate-reshape), and
                       the ratios of each jsongate row to its base row, so that two builds
                       are measured in turns in one run
  NGINX=nginx          nginx binary
  HAPROXY=haproxy      HAProxy binary (the haproxy row)
  H2O=h2o              h2o binary (the h2o-h2c and h2o-h2 rows; without it those rows are
                       left out with a note)
  H2_CIPHERS=TLS_AES_128_GCM_SHA256   the one TLS 1.3 cipher h2load offers in the h2 rows, so
                       that every proxy encrypts alike whatever order it prefers (each run's
                       negotiated cipher is checked against it)
  COUNT_SECONDS=3      seconds of an extra wrk run per row (first round) during which perf
                       counts the proxy's system calls and malloc/calloc/realloc calls, shown
                       per request (0: skip; needs perf, and root for the malloc uprobes)
  NGINX_MODULES=...    directory of the nginx Lua module (nginx-lua-* variants; default: the
                       first of /usr/lib/nginx/modules, /usr/share/nginx/modules that has it)
  PROXY_CPU=0 LOAD_CPU=1        CPU of the proxy; CPU shared by wrk and the upstream
  RESULTS=bench/results/latest.md   where the report is written
  KEEP=1               keep the temporary directory (configs, logs, wrk output)
EOF
}

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
	usage
	exit 0
fi
if [ $# -ne 0 ]; then
	usage >&2
	exit 2
fi

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT_DIR=$(dirname "$BENCH_DIR")

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-1k 16k 256k 1m}
CONNECTIONS=${CONNECTIONS:-16}
IDLE_CLIENTS=${IDLE_CLIENTS:-10000}
JSONGATE=${JSONGATE:-$ROOT_DIR/build/src/jsongate}
NGINX=${NGINX:-nginx}
HAPROXY=${HAPROXY:-haproxy}
H2O=${H2O:-h2o}
COUNT_SECONDS=${COUNT_SECONDS:-3}
H2_CIPHERS=${H2_CIPHERS:-TLS_AES_128_GCM_SHA256}
NGINX_MODULES=${NGINX_MODULES:-}
if [ -z "$NGINX_MODULES" ]; then
	for NGINX_MODULES in /usr/lib/nginx/modules /usr/share/nginx/modules; do
		[ -e "$NGINX_MODULES/ngx_http_lua_module.so" ] && break
	done
fi
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RESULTS=${RESULTS:-$BENCH_DIR/results/latest.md}
KEEP=${KEEP:-0}

# max_connections / worker_connections for the load runs and for the idle-clients test. The
# load runs use a modest value so neither proxy pays for tables it does not need.
LOAD_MAX_CONNECTIONS=1024
IDLE_MAX_CONNECTIONS=$((IDLE_CLIENTS * 2 > 20000 ? IDLE_CLIENTS * 2 : 20000))

# Proxy variants, one per line: name, kind, config template (in bench/conf/), and how wrk
# talks to it: http (the default), tls (https, keep-alive), tls-close (https, a new
# connection and handshake per request), rpc (POST of one JSON-RPC call of the size to
# /rpc-SIZE.json, answered with a SIZE answer), rpc-batch (POST of a batch of 100 calls of
# the size each, their methods going to three upstreams, to /rpcb-SIZE.json; see rpc.py),
# h2c and h2 (HTTP/2 by prior knowledge or over TLS, driven by h2load) or auth (http with the
# bearer token of conf/jsongate-auth.headers on every request).
# Two optional fields say what the correctness check before each run expects: what the proxy
# does to the body (pass, the default: nothing; unwrap; reshape; see client.py) and how it is
# compared (bytes, the default: exactly; json: the same JSON value, for proxies that decode
# and re-encode). A kind K is a set of functions
# K_require, K_version and K_start (see below). Adding a proxy to the table is one line here
# plus its template; a new kind is three functions.
VARIANTS=(
	"nginx               nginx     nginx-proxy.conf.in      http"
	"jsongate            jsongate  jsongate-pass.yaml.in    http"
	"jsongate-base       jsongate_base jsongate-pass.yaml.in http"
	"jsongate-base-unwrap jsongate_base jsongate-unwrap.yaml.in http unwrap bytes"
	"jsongate-base-reshape jsongate_base jsongate-reshape.yaml.in http reshape bytes"
	"haproxy             haproxy   haproxy-proxy.cfg.in     http"
	"nginx-tls           nginx     nginx-proxy-tls.conf.in  tls"
	"jsongate-tls        jsongate  jsongate-tls.yaml.in     tls"
	"nginx-tls-close     nginx     nginx-proxy-tls.conf.in  tls-close"
	"jsongate-tls-close  jsongate  jsongate-tls.yaml.in     tls-close"
	"nginx-tls-full      nginx     nginx-proxy-tls-full.conf.in  tls-close"
	"jsongate-tls-full   jsongate  jsongate-tls-full.yaml.in     tls-close"
	"jsongate-unwrap     jsongate  jsongate-unwrap.yaml.in  http  unwrap   bytes"
	"jsongate-reshape    jsongate  jsongate-reshape.yaml.in http  reshape  bytes"
	"jsongate-headers    jsongate  jsongate-headers.yaml.in http"
	"jsongate-reshape-headers jsongate jsongate-reshape-headers.yaml.in http reshape bytes"
	"jsongate-reshape-when jsongate jsongate-reshape-when.yaml.in http reshape bytes"
	"nginx-lua-unwrap    nginx_lua nginx-lua-unwrap.conf.in http  unwrap   json"
	"nginx-lua-reshape   nginx_lua nginx-lua-reshape.conf.in http reshape  json"
	"jsongate-agg        jsongate  jsongate-agg.yaml.in     http  aggregate bytes"
	"go-agg              go        -                        http  aggregate json"
	"jsongate-rpc-pass   jsongate  jsongate-pass.yaml.in    rpc"
	"jsongate-rpc        jsongate  jsongate-rpc.yaml.in     rpc"
	"jsongate-rpc-batch  jsongate  jsongate-rpc.yaml.in     rpc-batch"
	"go-rpc              gorpc     -                        rpc-batch  pass  json"
	"nginx-h2c           nginx     nginx-proxy-h2c.conf.in  h2c"
	"jsongate-h2c        jsongate  jsongate-h2c.yaml.in     h2c"
	"haproxy-h2c         haproxy   haproxy-proxy-h2c.cfg.in h2c"
	"nginx-h2            nginx     nginx-proxy-h2.conf.in   h2"
	"jsongate-h2         jsongate  jsongate-h2.yaml.in      h2"
	"jsongate-auth       jsongate  jsongate-auth.yaml.in    auth"
	"haproxy-h2          haproxy   haproxy-proxy-h2.cfg.in  h2"
	"h2o-h2c             h2o       h2o-proxy-h2c.conf.in    h2c"
	"h2o-h2              h2o       h2o-proxy-h2.conf.in     h2"
)
# Kinds whose absence leaves their rows out (with a note) instead of stopping the run.
OPTIONAL_KINDS=" h2o "
# Ratio lines printed per size: CPU per request of A divided by CPU per request of B (B*N:
# by N times B's, e.g. an aggregated request against the N plain requests it stands for).
RATIOS=(
	"jsongate/jsongate-base"
	"jsongate-unwrap/jsongate-base-unwrap"
	"jsongate-reshape/jsongate-base-reshape"
	"jsongate/nginx"
	"jsongate/haproxy"
	"jsongate-tls/nginx-tls"
	"jsongate-tls-close/nginx-tls-close"
	"jsongate-tls-full/nginx-tls-full"
	"jsongate-unwrap/jsongate"
	"jsongate-reshape/jsongate"
	"jsongate-headers/jsongate"
	"jsongate-reshape-headers/jsongate-reshape"
	"jsongate-reshape-when/jsongate-reshape"
	"nginx-lua-unwrap/jsongate-unwrap"
	"nginx-lua-reshape/jsongate-reshape"
	"jsongate-agg/jsongate*3"
	"go-agg/jsongate-agg"
	"jsongate-rpc/jsongate-rpc-pass"
	"jsongate-rpc-batch/jsongate-rpc*100"
	"go-rpc/jsongate-rpc-batch"
	"jsongate-h2c/nginx-h2c"
	"jsongate-h2c/haproxy-h2c"
	"jsongate-h2/nginx-h2"
	"jsongate-h2/haproxy-h2"
	"jsongate-h2c/h2o-h2c"
	"jsongate-h2/h2o-h2"
	"jsongate-auth/jsongate"
)
JSONGATE_BASE=${JSONGATE_BASE:-}
# Every variant by default; the jsongate-base rows only when there is a second build to run.
PROXIES=${PROXIES:-$(for v in "${VARIANTS[@]}"; do
	case "${v%% *}:$JSONGATE_BASE" in jsongate-base*:) ;; *) printf '%s ' "${v%% *}" ;; esac
done)}

# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"

render() {
	local template=$1 out=$2 name=$3 port=$4 maxconn=$5
	sed -e "s|@RUNDIR@|$RUNDIR|g" -e "s|@DATADIR@|$DATADIR|g" \
		-e "s|@NAME@|$name|g" -e "s|@PORT@|$port|g" \
		-e "s|@UPSTREAM_PORT@|$UPSTREAM_PORT|g" \
		-e "s|@UPSTREAM_PORT2@|$UPSTREAM_PORT2|g" -e "s|@UPSTREAM_PORT3@|$UPSTREAM_PORT3|g" \
		-e "s|@MAX_CONNECTIONS@|$maxconn|g" -e "s|@NOFILE@|$((maxconn + 1024))|g" \
		-e "s|@CERT@|$RUNDIR/tls.crt|g" -e "s|@KEY@|$RUNDIR/tls.key|g" \
		-e "s|@CERTKEY@|$RUNDIR/tls.pem|g" -e "s|@BENCH_DIR@|$BENCH_DIR|g" \
		-e "s|@NGINX_MODULES@|$NGINX_MODULES|g" \
		"$BENCH_DIR/conf/$template" >"$out"
}

# ---------------------------------------------------------------------------------------------
# Proxy kinds. K_start NAME TEMPLATE MAX_CONNECTIONS starts the proxy pinned on PROXY_CPU and
# sets PROXY_PORT, PROXY_MAIN (the pid to stop), PROXY_CPU_PIDS (pids whose CPU time is summed)
# and PROXY_MEM_PID (the process whose memory is reported).

PROXY_PORT='' PROXY_MAIN='' PROXY_CPU_PIDS='' PROXY_MEM_PID=''

nginx_require() { command -v "$NGINX" >/dev/null || printf '%s\n' "nginx (Debian: nginx-light or nginx)"; }
nginx_version() { "$NGINX" -v 2>&1 | sed 's|^nginx version: ||'; }

nginx_start() {
	local name=$1 template=$2 maxconn=$3 conf pid workers
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.conf
	render "$template" "$conf" "$name" "$PROXY_PORT" "$maxconn"
	"$NGINX" -q -t -p "$RUNDIR/" -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "nginx rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$NGINX" -p "$RUNDIR/" -c "$conf"
	pid=$BG_PID
	wait_port "$PROXY_PORT" "$pid" "$RUNDIR/$name.out"
	for _ in $(seq 50); do
		workers=$(children_of "$pid")
		[ -n "$workers" ] && break
		sleep 0.1
	done
	[ "$(printf '%s\n' "$workers" | grep -c .)" = 1 ] || die "$name: expected one nginx worker, found: $workers"
	PROXY_MAIN=$pid
	PROXY_CPU_PIDS="$pid $workers"
	PROXY_MEM_PID=$workers
}

jsongate_require() {
	[ -x "$JSONGATE" ] || printf '%s\n' "jsongate binary $JSONGATE (build it, or set JSONGATE)"
}
jsongate_version() { printf '%s (%s)\n' "$("$JSONGATE" -V 2>&1 | head -n 1)" "$JSONGATE"; }

jsongate_start() {
	local name=$1 template=$2 maxconn=$3 conf
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.yaml
	render "$template" "$conf" "$name" "$PROXY_PORT" "$maxconn"
	"$JSONGATE" -t -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "jsongate rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$JSONGATE" -f -c "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
	PROXY_CPU_PIDS=$BG_PID
	PROXY_MEM_PID=$BG_PID
}

# The same daemon from another build, to tell two builds apart on a noisy machine.
jsongate_base_require() {
	[ -n "$JSONGATE_BASE" ] && [ -x "$JSONGATE_BASE" ] ||
		printf '%s\n' "a second jsongate binary in JSONGATE_BASE (the jsongate-base row)"
}
jsongate_base_version() { JSONGATE=$JSONGATE_BASE jsongate_version; }
jsongate_base_start() { JSONGATE=$JSONGATE_BASE jsongate_start "$@"; }

# HAProxy, the other pass-through peer (the resilience benchmark's too).
haproxy_require() { command -v "$HAPROXY" >/dev/null || printf '%s\n' "haproxy (Debian: haproxy)"; }
haproxy_version() { "$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $1, $2, $3 }'; }

haproxy_start() {
	local name=$1 template=$2 maxconn=$3 conf
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.cfg
	render "$template" "$conf" "$name" "$PROXY_PORT" "$maxconn"
	"$HAPROXY" -c -q -f "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "haproxy rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
	PROXY_CPU_PIDS=$BG_PID
	PROXY_MEM_PID=$BG_PID
}

# h2o, an HTTP/2 peer of the h2c and h2 rows (h2o 2.2 takes HTTP/2 by prior knowledge on a
# plain port).  Run as root it serves as nobody, as nginx's workers do.  One process: its
# worker thread (num-threads: 1) and its helper threads are counted together.
h2o_require() { command -v "$H2O" >/dev/null || printf '%s\n' "h2o (Debian: h2o)"; }
h2o_version() { "$H2O" --version 2>&1 | awk 'NR == 1 { print $3 }'; }

h2o_start() {
	local name=$1 template=$2 maxconn=$3 conf
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.conf
	render "$template" "$conf" "$name" "$PROXY_PORT" "$maxconn"
	"$H2O" -t -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "h2o rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$H2O" -c "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
	PROXY_CPU_PIDS=$BG_PID
	PROXY_MEM_PID=$BG_PID
}

# nginx with the Lua module (OpenResty's lua-nginx-module) and lua-cjson: body filters that
# decode, edit and re-encode JSON, as Kong's response-transformer does.
nginx_lua_require() {
	local so cjson=
	nginx_require
	for so in ndk_http_module ngx_http_lua_module; do
		[ -e "$NGINX_MODULES/$so.so" ] ||
			printf '%s\n' "$NGINX_MODULES/$so.so (Debian: libnginx-mod-http-lua; or set NGINX_MODULES)"
	done
	for so in /usr/lib/*/lua/5.1/cjson.so /usr/lib/lua/5.1/cjson.so /usr/local/lib/lua/5.1/cjson.so; do
		[ -e "$so" ] && cjson=$so
	done
	[ -n "$cjson" ] || printf '%s\n' "lua-cjson for Lua 5.1 / LuaJIT (Debian: lua-cjson)"
}
nginx_lua_version() {
	local pkg versions=""
	for pkg in libnginx-mod-http-lua lua-cjson; do
		versions="$versions, $pkg $(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || echo unknown)"
	done
	printf '%s%s\n' "$(nginx_version)" "$versions"
}
nginx_lua_start() { nginx_start "$@"; }

# The peer of the aggregated rows: bench/goagg, a Go program doing what KrakenD's merger does
# with its JSON encoding (decode each answer into map[string]any, merge, encode), built for
# the run.  GOMAXPROCS=1: it runs on one CPU, as the other proxies do.
go_require() { command -v go >/dev/null || printf '%s\n' "go (Debian: golang)"; }
go_version() { go version | sed 's|^go version ||'; }

go_start() {
	local name=$1 bin=$RUNDIR/goagg
	if [ ! -x "$bin" ]; then
		(cd "$BENCH_DIR/goagg" && GOFLAGS=-mod=mod go build -o "$bin" .) \
			>"$RUNDIR/goagg.build.log" 2>&1 || die "cannot build goagg: $(cat "$RUNDIR/goagg.build.log")"
	fi
	PROXY_PORT=$(pick_port)
	start_bg "$RUNDIR/$name.out" env GOMAXPROCS=1 taskset -c "$PROXY_CPU" "$bin" \
		-listen "127.0.0.1:$PROXY_PORT" -upstream "127.0.0.1:$UPSTREAM_PORT"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
	PROXY_CPU_PIDS=$BG_PID
	PROXY_MEM_PID=$BG_PID
}

# The peer of the JSON-RPC batch row: bench/gorpc, a Go program splitting and merging batches
# with encoding/json (decode every call and answer, encode every group and the result), built
# for the run, on one CPU.
gorpc_require() { go_require; }
gorpc_version() { go_version; }

gorpc_start() {
	local name=$1 bin=$RUNDIR/gorpc
	if [ ! -x "$bin" ]; then
		(cd "$BENCH_DIR/gorpc" && GOFLAGS=-mod=mod go build -o "$bin" .) \
			>"$RUNDIR/gorpc.build.log" 2>&1 || die "cannot build gorpc: $(cat "$RUNDIR/gorpc.build.log")"
	fi
	PROXY_PORT=$(pick_port)
	start_bg "$RUNDIR/$name.out" env GOMAXPROCS=1 taskset -c "$PROXY_CPU" "$bin" \
		-listen "127.0.0.1:$PROXY_PORT" -default "127.0.0.1:$UPSTREAM_PORT" \
		-route "eth_getBalance=127.0.0.1:$UPSTREAM_PORT2" \
		-route "eth_getLogs=127.0.0.1:$UPSTREAM_PORT3"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
	PROXY_CPU_PIDS=$BG_PID
	PROXY_MEM_PID=$BG_PID
}

variant_field() { # variant_field NAME INDEX [DEFAULT]
	local v f
	for v in "${VARIANTS[@]}"; do
		read -ra f <<<"$v"
		if [ "${f[0]}" = "$1" ]; then
			printf '%s\n' "${f[$2]:-${3:-http}}"
			return 0
		fi
	done
	die "unknown proxy variant '$1' (known: $(for v in "${VARIANTS[@]}"; do read -ra f <<<"$v"; printf '%s ' "${f[0]}"; done))"
}

proxy_start() { # proxy_start NAME MAX_CONNECTIONS
	local kind template
	kind=$(variant_field "$1" 1)
	template=$(variant_field "$1" 2)
	"${kind}_start" "$1" "$template" "$2"
}

# ---------------------------------------------------------------------------------------------
# Checks

for knob in DURATION WARMUP ROUNDS CONNECTIONS IDLE_CLIENTS PROXY_CPU LOAD_CPU COUNT_SECONDS; do
	is_uint "${!knob}" || die "$knob must be a non-negative integer (got '${!knob}')"
done
{ [ "$DURATION" -ge 1 ] && [ "$DURATION" -le 600 ]; } || die "DURATION must be 1..600 seconds"
[ "$WARMUP" -le 600 ] || die "WARMUP must be 0..600 seconds"
{ [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 99 ]; } || die "ROUNDS must be 1..99"
[ "$CONNECTIONS" -ge 1 ] || die "CONNECTIONS must be at least 1"
[ "$PROXY_CPU" != "$LOAD_CPU" ] || die "PROXY_CPU and LOAD_CPU must differ"
for size in $SIZES; do
	[[ $size =~ ^[1-9][0-9]*[km]?$ ]] || die "bad size '$size' in SIZES (examples: 512, 1k, 16k, 1m)"
done
[ -n "${SIZES// /}" ] || die "SIZES is empty"

missing=()
command -v wrk >/dev/null || missing+=("wrk (Debian: wrk)")
command -v taskset >/dev/null || missing+=("taskset (Debian: util-linux)")
command -v python3 >/dev/null || missing+=("python3 (Debian: python3)")
command -v timeout >/dev/null || missing+=("timeout (Debian: coreutils)")
for name in $PROXIES; do
	case $(variant_field "$name" 3) in
	h2*)
		command -v h2load >/dev/null || missing+=("h2load (Debian: nghttp2-client)")
		command -v curl >/dev/null || missing+=("curl (Debian: curl)")
		break
		;;
	esac
done
for name in $PROXIES; do
	case $(variant_field "$name" 3) in
	tls* | h2)
		command -v openssl >/dev/null || missing+=("openssl (Debian: openssl)")
		command -v curl >/dev/null || missing+=("curl (Debian: curl)")
		break
		;;
	esac
done
kinds=" nginx "
for name in $PROXIES; do
	kind=$(variant_field "$name" 1)
	case "$kinds" in *" $kind "*) ;; *) kinds="$kinds$kind " ;; esac
done
DROPPED=""
for kind in $kinds; do
	kind_missing=()
	while IFS= read -r m; do
		[ -n "$m" ] && kind_missing+=("$m")
	done < <("${kind}_require")
	[ ${#kind_missing[@]} -gt 0 ] || continue
	case "$OPTIONAL_KINDS" in
	*" $kind "*)
		rows="" kept=""
		for name in $PROXIES; do
			if [ "$(variant_field "$name" 1)" = "$kind" ]; then
				rows="$rows $name"
			else
				kept="$kept$name "
			fi
		done
		PROXIES=$kept
		kinds=${kinds/ $kind / }
		DROPPED="$DROPPED- left out:$rows (missing: ${kind_missing[*]})"$'\n'
		log "bench: left out:$rows (missing: ${kind_missing[*]})"
		;;
	*) missing+=("${kind_missing[@]}") ;;
	esac
done
[ -n "${PROXIES// /}" ] || die "no proxy variant left to run"
if [ ${#missing[@]} -gt 0 ]; then
	log "bench: missing tools:"
	for m in "${missing[@]}"; do log "  - $m"; done
	die "install them (Debian: apt-get install -y nginx-light wrk util-linux python3), build jsongate, and retry"
fi
{ taskset -c "$PROXY_CPU" true 2>/dev/null && taskset -c "$LOAD_CPU" true 2>/dev/null; } ||
	die "CPUs $PROXY_CPU and $LOAD_CPU must both be usable (this machine has $(nproc --all 2>/dev/null || echo '?'))"

if [ "$IDLE_CLIENTS" -gt 0 ]; then
	need=$((IDLE_MAX_CONNECTIONS + 1024))
	ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $((IDLE_CLIENTS + 256)) ] ||
		die "open files limit $(ulimit -n) is too low for IDLE_CLIENTS=$IDLE_CLIENTS (raise ulimit -Hn, or lower IDLE_CLIENTS)"
fi

# ---------------------------------------------------------------------------------------------
# Counting system calls and allocations: perf's syscall tracepoint, and uprobes on libc's
# allocator (made here when missing; the same probes serve every proxy, all linking that
# libc).  Counted in a run of their own, since uprobes cost the proxy CPU.

COUNT_EVENTS=''
if [ "$COUNT_SECONDS" -gt 0 ] && command -v perf >/dev/null; then
	if perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
		COUNT_EVENTS=raw_syscalls:sys_enter
		libc=$(ldd "$JSONGATE" 2>/dev/null | awk '$1 ~ /^libc\.so/ { print $3 }')
		for fn in malloc calloc realloc; do
			perf probe -l 2>/dev/null | grep -q "probe_libc:$fn " ||
				perf probe -q -x "$libc" -a "$fn" >/dev/null 2>&1 || true
		done
		if perf stat -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc true >/dev/null 2>&1; then
			COUNT_EVENTS="$COUNT_EVENTS,probe_libc:malloc,probe_libc:calloc,probe_libc:realloc"
		fi
	fi
fi
[ -n "$COUNT_EVENTS" ] || [ "$COUNT_SECONDS" -eq 0 ] ||
	log "bench: perf cannot count system calls here: no syscall or malloc columns"

# ---------------------------------------------------------------------------------------------
# Upstream

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/jsongate-bench.XXXXXX")
DATADIR=$RUNDIR/data
mkdir "$DATADIR"
# nginx workers run as an unprivileged user when started as root: they must read the data.
chmod 755 "$RUNDIR" "$DATADIR"
# shellcheck disable=SC2086 # SIZES is a word list
python3 "$BENCH_DIR/envelopes.py" "$DATADIR" $SIZES
# shellcheck disable=SC2086
python3 "$BENCH_DIR/rpc.py" "$DATADIR" $SIZES
chmod 755 "$DATADIR"/u2 "$DATADIR"/u3
chmod 644 "$DATADIR"/*.json "$DATADIR"/*/*.json
# The wrk scripts of the rpc rows: POST the call (or the batch) of the size.
for size in $SIZES; do
	for kind in rpc rpcb; do
		printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n%s\n' \
			"local f = io.open(\"$DATADIR/$kind-call-$size.json\", \"rb\") wrk.body = f:read(\"*a\") f:close()" \
			>"$RUNDIR/wrk-$kind-$size.lua"
	done
done
# The certificate of the TLS variants: ECDSA P-256, self-signed, for this run only.
if command -v openssl >/dev/null; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
		-keyout "$RUNDIR/tls.key" -out "$RUNDIR/tls.crt" >"$RUNDIR/openssl.log" 2>&1 ||
		die "openssl cannot make a certificate: $(cat "$RUNDIR/openssl.log")"
	cat "$RUNDIR/tls.crt" "$RUNDIR/tls.key" >"$RUNDIR/tls.pem"  # HAProxy's crt: both in one
	chmod 644 "$RUNDIR/tls.key" "$RUNDIR/tls.crt" "$RUNDIR/tls.pem"
fi

UPSTREAM_PORT=$(pick_port)
UPSTREAM_PORT2=$(pick_port)
UPSTREAM_PORT3=$(pick_port)
render nginx-upstream.conf.in "$RUNDIR/upstream.conf" upstream "$UPSTREAM_PORT" 4096
"$NGINX" -q -t -p "$RUNDIR/" -c "$RUNDIR/upstream.conf" >"$RUNDIR/upstream.test.log" 2>&1 ||
	die "nginx rejects the upstream config: $(cat "$RUNDIR/upstream.test.log")"
start_bg "$RUNDIR/upstream.out" taskset -c "$LOAD_CPU" "$NGINX" -p "$RUNDIR/" -c "$RUNDIR/upstream.conf"
wait_port "$UPSTREAM_PORT" "$BG_PID" "$RUNDIR/upstream.out"
for size in $SIZES; do
	python3 "$BENCH_DIR/client.py" verify "$UPSTREAM_PORT" "/$size.json" "$DATADIR/$size.json" ||
		die "the upstream does not serve $size.json"
done

# ---------------------------------------------------------------------------------------------
# Load runs

# Per row (SIZE|NAME): the median run's figures, the spread of CPU per request over the runs,
# the highest peak RSS and every run's wrk errors. Per run (SIZE|NAME|ROUND): RUN_*.
declare -A CPU_US USER_US RPS P50 P99 HWM CONN_KB NOTE SPREAD SYSCALLS MALLOCS
declare -A RUN_CPU RUN_USER RUN_RPS RUN_P50 RUN_P99 RUN_HWM RUN_BASE RUN_NOTE

CLIENT_MODE=http
# HTTP/2 rows: h2load, CONNECTIONS connections of 10 streams each, its figures written as the
# lines of wrk's output this script reads (no latency percentiles: h2load gives none).
run_h2load() { # run_h2load SECONDS PORT SIZE OUTPUT
	local secs=$1 port=$2 size=$3 out=$4 scheme=http cipher
	[ "$CLIENT_MODE" = h2 ] && scheme=https
	timeout $((secs + 60)) taskset -c "$LOAD_CPU" \
		h2load -t1 -c"$CONNECTIONS" -m10 -D "$secs" --tls13-ciphers="$H2_CIPHERS" \
		"$scheme://127.0.0.1:$port/$size.json" \
		>"$out.h2load" 2>&1 || die "h2load failed against port $port: $(cat "$out.h2load")"
	if [ "$scheme" = https ]; then
		cipher=$(awk '/^Cipher: / { print $2 }' "$out.h2load")
		[ "$cipher" = "$H2_CIPHERS" ] ||
			die "h2load against port $port negotiated ${cipher:-no cipher}, not $H2_CIPHERS"
	fi
	awk -v secs="$secs" '
		/^requests: / { done = $6; ok = $8 }
		/^finished in / { rps = $4 }
		END {
			printf "  %d requests in %ss\nRequests/sec: %s\n", ok, secs, rps
			if (done != ok) printf "  Non-2xx or 3xx responses: %d\n", done - ok
		}' "$out.h2load" >"$out"
}

run_wrk() { # run_wrk SECONDS PORT SIZE OUTPUT [--latency]
	local secs=$1 port=$2 size=$3 out=$4 scheme=http path=$3.json
	shift 4
	case $CLIENT_MODE in
	h2c | h2) run_h2load "$secs" "$port" "$size" "$out" && return 0 ;;
	auth) set -- "$@" -H "$(tr -d '\r\n' <"$BENCH_DIR/conf/jsongate-auth.headers")" ;;
	tls) scheme=https ;;
	tls-close) scheme=https && set -- "$@" -H "Connection: close" ;;
	rpc) path=rpc-$size.json && set -- "$@" -s "$RUNDIR/wrk-rpc-$size.lua" ;;
	rpc-batch) path=rpcb-$size.json && set -- "$@" -s "$RUNDIR/wrk-rpcb-$size.lua" ;;
	esac
	timeout $((secs + 60)) taskset -c "$LOAD_CPU" \
		wrk -t1 -c"$CONNECTIONS" -d"${secs}s" --timeout 10s "$@" \
		"$scheme://127.0.0.1:$port/$path" >"$out" 2>&1 ||
		die "wrk failed against port $port: $(cat "$out")"
}

# The proxy passes the file through unchanged (over TLS: checked with curl), or answers what
# its body ops must make of it.
verify_proxy() { # verify_proxy NAME SIZE
	if [ "$CLIENT_MODE" = rpc ] || [ "$CLIENT_MODE" = rpc-batch ]; then
		local kind=rpc expected
		[ "$CLIENT_MODE" = rpc ] || kind=rpcb
		expected=$DATADIR/$kind-$2.json
		[ "$kind" = rpc ] || expected=$DATADIR/$kind-$2.expected
		python3 "$BENCH_DIR/client.py" post "$PROXY_PORT" "/$kind-$2.json" \
			"$DATADIR/$kind-call-$2.json" "$expected" "$(variant_field "$1" 5 bytes)"
	elif [ "$CLIENT_MODE" = auth ]; then
		curl -sS -H "$(tr -d '\r\n' <"$BENCH_DIR/conf/jsongate-auth.headers")" \
			"http://127.0.0.1:$PROXY_PORT/$2.json" | cmp -s - "$DATADIR/$2.json"
	elif [ "$CLIENT_MODE" = h2c ]; then
		curl -sS --http2-prior-knowledge "http://127.0.0.1:$PROXY_PORT/$2.json" |
			cmp -s - "$DATADIR/$2.json"
	elif [ "$CLIENT_MODE" = h2 ]; then
		curl -sS --http2 --cacert "$RUNDIR/tls.crt" "https://127.0.0.1:$PROXY_PORT/$2.json" |
			cmp -s - "$DATADIR/$2.json"
	elif [ "$CLIENT_MODE" = http ]; then
		python3 "$BENCH_DIR/client.py" verify "$PROXY_PORT" "/$2.json" "$DATADIR/$2.json" \
			"$(variant_field "$1" 4 pass)" "$(variant_field "$1" 5 bytes)"
	else
		curl -sS --cacert "$RUNDIR/tls.crt" "https://127.0.0.1:$PROXY_PORT/$2.json" |
			cmp -s - "$DATADIR/$2.json"
	fi || die "$1 does not answer $2.json as expected ($(variant_field "$1" 4 pass))"
}

# A proxy may still be working on requests the warm-up's wrk gave up waiting for (a slow
# peer at large sizes): that CPU belongs to no measured request.  Wait until its CPU time
# stops growing (at most 30 s).
wait_idle() { # wait_idle PID...
	local before after
	for _ in $(seq 60); do
		before=$(cpu_ticks "$@")
		sleep 0.5
		after=$(cpu_ticks "$@")
		[ "$before" = "$after" ] && return 0
	done
	log "  (the proxy was still busy 30 s after the warm-up)"
}

measure() { # measure NAME SIZE ROUND
	local name=$1 size=$2 key="$2|$1|$3" out u0 s0 u1 s1 requests errors
	CLIENT_MODE=$(variant_field "$name" 3)
	proxy_start "$name" "$LOAD_MAX_CONNECTIONS"
	# The process before any client: what the peak grows from.
	RUN_BASE[$key]=$(status_kb "$PROXY_MEM_PID" VmRSS)
	verify_proxy "$name" "$size"
	if [ "$WARMUP" -gt 0 ]; then
		run_wrk "$WARMUP" "$PROXY_PORT" "$size" "$RUNDIR/wrk-$name-$size-warmup.txt"
		# shellcheck disable=SC2086 # pid lists
		wait_idle $PROXY_CPU_PIDS
	fi
	out=$RUNDIR/wrk-$name-$size-$3.txt
	# shellcheck disable=SC2086 # pid lists
	read -r u0 s0 <<<"$(cpu_ticks_split $PROXY_CPU_PIDS)"
	run_wrk "$DURATION" "$PROXY_PORT" "$size" "$out" --latency
	# shellcheck disable=SC2086
	read -r u1 s1 <<<"$(cpu_ticks_split $PROXY_CPU_PIDS)"
	RUN_HWM[$key]=$(status_kb "$PROXY_MEM_PID" VmHWM)
	[ "$3" != 1 ] || count_calls "$name" "$size"
	stop_pid "$PROXY_MAIN"

	requests=$(awk '/ requests in / { print $1 }' "$out")
	{ is_uint "$requests" && [ "$requests" -gt 0 ]; } || die "no requests completed by $name at $size: $(cat "$out")"
	RUN_CPU[$key]=$(ticks_per_request_us $((u1 + s1 - u0 - s0)) "$requests")
	RUN_USER[$key]=$(ticks_per_request_us $((u1 - u0)) "$requests")
	RUN_RPS[$key]=$(awk '/^Requests\/sec:/ { printf "%.0f\n", $2 }' "$out")
	RUN_P50[$key]=$(to_us "$(awk '$1 == "50%" { print $2 }' "$out")")
	RUN_P99[$key]=$(to_us "$(awk '$1 == "99%" { print $2 }' "$out")")
	errors=$(awk '/Socket errors:|Non-2xx/ { sub(/^ +/, ""); printf "%s; ", $0 }' "$out")
	RUN_NOTE[$key]=$errors
	log "  $size $name (round $3): ${RUN_CPU[$key]} µs/req, ${RUN_RPS[$key]} req/s${errors:+ ($errors)}"
}

# System calls and allocator calls per request of the running proxy, over a wrk run of
# COUNT_SECONDS (all its processes and threads; nginx: master and worker).
count_calls() { # count_calls NAME SIZE
	local name=$1 size=$2 out=$RUNDIR/count-$1-$2 pids requests
	[ -n "$COUNT_EVENTS" ] || return 0
	pids=$(printf '%s' "$PROXY_CPU_PIDS" | tr ' ' ,)
	perf stat -x, -e "$COUNT_EVENTS" -p "$pids" -o "$out.perf" -- sleep $((COUNT_SECONDS + 2)) &
	local perf_pid=$!
	sleep 0.5
	run_wrk "$COUNT_SECONDS" "$PROXY_PORT" "$size" "$out.wrk"
	wait "$perf_pid" || true
	requests=$(awk '/ requests in / { print $1 }' "$out.wrk")
	is_uint "$requests" && [ "$requests" -gt 0 ] || return 0
	SYSCALLS[$size|$name]=$(awk -F, -v n="$requests" '$3 == "raw_syscalls:sys_enter" { printf "%.2f", $1 / n }' "$out.perf")
	MALLOCS[$size|$name]=$(awk -F, -v n="$requests" '$3 ~ /^probe_libc:/ { m += $1; seen = 1 }
		END { if (seen) printf "%.2f", m / n }' "$out.perf")
}

# A row's figures are those of its run with the median CPU per request (of an even number of
# runs, the lower middle one): one noisy run, either way, does not move the table.
pick_median() { # pick_median NAME SIZE
	local row="$2|$1" round median notes="" hwm=0 grown=0
	median=$(for round in $(seq "$ROUNDS"); do
		printf '%s %s\n' "${RUN_CPU[$row|$round]}" "$round"
	done | sort -g | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2) { print $2 }')
	CPU_US[$row]=${RUN_CPU[$row|$median]}
	USER_US[$row]=${RUN_USER[$row|$median]}
	RPS[$row]=${RUN_RPS[$row|$median]}
	P50[$row]=${RUN_P50[$row|$median]}
	P99[$row]=${RUN_P99[$row|$median]}
	SPREAD[$row]=$(for round in $(seq "$ROUNDS"); do echo "${RUN_CPU[$row|$round]}"; done |
		sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf (hi < 100 ? "%.1f–%.1f\n" : "%.0f–%.0f\n"), lo, hi }')
	for round in $(seq "$ROUNDS"); do
		[ "${RUN_HWM[$row|$round]}" -gt "$hwm" ] && hwm=${RUN_HWM[$row|$round]}
		[ $((RUN_HWM[$row|$round] - RUN_BASE[$row|$round])) -gt "$grown" ] &&
			grown=$((RUN_HWM[$row|$round] - RUN_BASE[$row|$round]))
		[ -z "${RUN_NOTE[$row|$round]}" ] || notes="$notes${RUN_NOTE[$row|$round]}"
	done
	HWM[$row]=$hwm
	# Per client connection: how far the peak rose above the process before any client.
	CONN_KB[$row]=$(awk -v g="$grown" -v n="$CONNECTIONS" 'BEGIN { printf "%.1f kB\n", g / n }')
	NOTE[$row]=$notes
}

# ---------------------------------------------------------------------------------------------
# Idle keep-alive clients

declare -A IDLE_BASE IDLE_RSS IDLE_FDS
IDLE_ROWS=0  # proxies measured (only the http rows are)

idle_test() { # idle_test NAME
	local name=$1 out size pid ready=
	size=${SIZES%% *}
	proxy_start "$name" "$IDLE_MAX_CONNECTIONS"
	python3 "$BENCH_DIR/client.py" verify "$PROXY_PORT" "/$size.json" "$DATADIR/$size.json" \
		"$(variant_field "$name" 4 pass)" "$(variant_field "$name" 5 bytes)" ||
		die "$name does not answer $size.json as expected"
	# Every process of the proxy counts (nginx: master and worker), as it does for CPU.
	IDLE_BASE[$name]=$(rss_kb_sum $PROXY_CPU_PIDS)
	out=$RUNDIR/idle-$name.txt
	start_bg "$out" taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/client.py" idle \
		"$PROXY_PORT" "/$size.json" "$IDLE_CLIENTS" 300
	pid=$BG_PID
	for _ in $(seq 1200); do
		if grep -q '^ready' "$out"; then
			ready=1
			break
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$ready" ] || die "$name: $IDLE_CLIENTS idle clients could not connect: $(cat "$out")"
	# Let the proxy finish any deferred work on the last connections.
	sleep 1
	kill -0 "$pid" 2>/dev/null || die "$name closed idle connections: $(cat "$out")"
	IDLE_RSS[$name]=$(rss_kb_sum $PROXY_CPU_PIDS)
	IDLE_ROWS=$((IDLE_ROWS + 1))
	IDLE_FDS[$name]=$(find /proc/"$PROXY_MEM_PID"/fd -mindepth 1 -maxdepth 1 | wc -l)
	stop_pid "$pid"
	stop_pid "$PROXY_MAIN"
	log "  idle $name: VmRSS ${IDLE_BASE[$name]} kB -> ${IDLE_RSS[$name]} kB, ${IDLE_FDS[$name]} fds"
}

# ---------------------------------------------------------------------------------------------
# Run: per size, every proxy in turn, so the rows compared were measured close together.

STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for size in $SIZES; do
	log "size $size"
	for round in $(seq "$ROUNDS"); do
		for name in $PROXIES; do
			measure "$name" "$size" "$round"
		done
	done
	for name in $PROXIES; do
		pick_median "$name" "$size"
	done
done
if [ "$IDLE_CLIENTS" -gt 0 ]; then
	log "idle clients: $IDLE_CLIENTS"
	for name in $PROXIES; do
		[ "$(variant_field "$name" 3)" = http ] || continue
		# HAProxy wants two descriptors per connection it accepts, more than the open files
		# limit of most machines allows for 10,000 clients: the idle test compares nginx.
		[ "$(variant_field "$name" 1)" != haproxy ] || continue
		idle_test "$name"
	done
fi

# ---------------------------------------------------------------------------------------------
# Report

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
versions=""
for kind in $kinds; do
	versions="$versions${versions:+; }$kind $("${kind}_version" 2>/dev/null || echo unknown)"
done
commit=$(source_commit)
[ -z "$commit" ] || versions="$versions; working tree $commit"

# "; per round: median (lowest-highest)" of A's run divided by N times B's run of the same
# round: runs of one round are minutes apart at most, so load that drifts over the whole
# benchmark moves both alike.  Steadier than the ratio of the medians when differences are
# small.
round_ratios() { # round_ratios SIZE A B N
	local round
	[ "$ROUNDS" -gt 1 ] || return 0
	for round in $(seq "$ROUNDS"); do
		awk -v a="${RUN_CPU[$1|$2|$round]}" -v b="${RUN_CPU[$1|$3|$round]}" -v n="$4" \
			'BEGIN { printf "%.4f\n", a / (b * n) }'
	done | sort -n | awk '{ r[NR] = $1 } END {
		printf "; per round: %.2f (%.2f–%.2f)", r[int((NR + 1) / 2)], r[1], r[NR] }'
}

report() {
	local size name key ratio a b n
	printf '# jsongate load benchmark\n\n'
	printf -- '- date: %s\n' "$STARTED"
	printf -- '- machine: %s; CPU: %s (%s CPUs)\n' "$(uname -srm)" "${cpu_model:-unknown}" "$(nproc --all 2>/dev/null || echo '?')"
	printf -- '- versions: %s\n' "$versions"
	printf -- '- load average (1, 5, 15 min): %s before, %s after (other processes add noise)\n' "$LOAD_BEFORE" "$LOAD_AFTER"
	printf -- '- settings: DURATION=%s WARMUP=%s ROUNDS=%s CONNECTIONS=%s (wrk, 1 thread); proxy on CPU %s, wrk and upstream nginx on CPU %s\n' \
		"$DURATION" "$WARMUP" "$ROUNDS" "$CONNECTIONS" "$PROXY_CPU" "$LOAD_CPU"
	case " $PROXIES " in
	*-h2\ *) printf -- '- HTTP/2 over TLS: h2load offers one TLS 1.3 cipher, %s, which every proxy negotiated\n' "$H2_CIPHERS" ;;
	esac
	printf -- '- each row: the median of %s runs taken in turns with the other rows of its size; CPU range: lowest and highest of those runs; of it user: the median run'"'"'s user-space share (the rest is system time, mostly TCP over loopback); peak RSS: the highest VmHWM of the runs (nginx: its worker); per conn: the most it rose above the VmRSS of the process before any client, over the %s client connections\n' "$ROUNDS" "$CONNECTIONS"
	printf '%s' "$DROPPED"
	printf '\n| size | proxy | CPU µs/req | CPU range | of it user | req/s | p50 | p99 | peak RSS | per conn | syscalls/req | mallocs/req |\n'
	printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
	for size in $SIZES; do
		for name in $PROXIES; do
			key="$size|$name"
			printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$name" \
				"$(fmt_cpu "${CPU_US[$key]}")" "${SPREAD[$key]}" "$(fmt_cpu "${USER_US[$key]}")" \
				"${RPS[$key]}" "$(fmt_us "${P50[$key]}")" \
				"$(fmt_us "${P99[$key]}")" "$(fmt_mb "${HWM[$key]}")" "${CONN_KB[$key]}" \
				"${SYSCALLS[$key]:-–}" "${MALLOCS[$key]:-–}"
		done
	done
	local ratios=""
	for size in $SIZES; do
		for ratio in "${RATIOS[@]}"; do
			a=${ratio%/*} b=${ratio#*/} n=1
			case $b in *'*'*) n=${b#*\*} b=${b%\**} ;; esac
			if [ -z "${CPU_US[$size|$a]:-}" ] || [ -z "${CPU_US[$size|$b]:-}" ]; then
				continue
			fi
			ratios="$ratios- $size: $ratio = $(awk -v a="${CPU_US[$size|$a]}" -v b="${CPU_US[$size|$b]}" \
				-v n="$n" 'BEGIN { printf "%.2f", a / (b * n) }')$(round_ratios "$size" "$a" "$b" "$n")"$'\n'
		done
	done
	if [ -n "$ratios" ]; then
		printf '\nCPU per request, ratio of the medians (below 1.0: the first uses less CPU), and the\n'
		printf 'median and range of the ratios of the two rows'"'"' runs of the same round:\n\n%s' "$ratios"
	fi
	if [ "$IDLE_ROWS" -gt 0 ]; then
		printf '\nRSS of all the proxy'"'"'s processes with %s idle keep-alive clients (each did one request):\n\n' "$IDLE_CLIENTS"
		for name in $PROXIES; do
			[ -n "${IDLE_RSS[$name]:-}" ] || continue
			printf -- '- %s: %s (%s before the clients, %s per client; %s open fds)\n' "$name" \
				"$(fmt_mb "${IDLE_RSS[$name]}")" "$(fmt_mb "${IDLE_BASE[$name]}")" \
				"$(awk -v a="${IDLE_RSS[$name]}" -v b="${IDLE_BASE[$name]}" -v n="$IDLE_CLIENTS" \
					'BEGIN { printf "%.2f kB", (a - b) / n }')" "${IDLE_FDS[$name]}"
		done
	fi
	local notes=""
	for size in $SIZES; do
		for name in $PROXIES; do
			[ -z "${NOTE[$size|$name]}" ] || notes="$notes- $size $name: ${NOTE[$size|$name]%; }"$'\n'
		done
	done
	if [ -n "$notes" ]; then
		printf '\nwrk reported errors (those rows are not comparable):\n\n%s' "$notes"
	fi
}

mkdir -p "$(dirname "$RESULTS")"
report | tee "$RESULTS"
log "written to $RESULTS"
