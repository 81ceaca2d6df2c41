#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Resilience benchmark: jsongate, nginx and HAProxy in front of the same servers, under the same
# faults, in one run. See bench/README.md. Installs nothing; names the missing tools.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/resilience.sh [-h]

Runs, side by side for each proxy, with the proxy pinned alone on one CPU and wrk and the
servers on another, and prints a markdown report (also written to bench/results/resilience.md):

  kill  two servers; wrk for KILL_DURATION s; one server is killed (SIGKILL) at KILL_AT s and
        started again at RESTART_AT s: failed requests, and when the restarted server gets
        requests again
  slow  two servers, one answering in FAST_MS, the other in SLOW_MS: the fast server's share
        of the requests under round robin and under least connections
  cost  jsongate alone in front of four servers: CPU per request of round_robin, least_conn
        and hash (ROUNDS runs each, taken in turns; medians)

Environment:
  TESTS="kill slow cost"      tests to run
  PROXIES="jsongate nginx haproxy"   proxies of the kill and slow tests
  CONNECTIONS=16              wrk connections (one wrk thread)
  KILL_DURATION=20 KILL_AT=5 RESTART_AT=12   the kill test's timeline, in seconds
  KILL_MS=2                   answer time of the kill test's servers, in ms (0: at once)
  SLOW_DURATION=10 FAST_MS=2 SLOW_MS=20      the slow test
  COST_DURATION=10 WARMUP=3 ROUNDS=7         the cost test
  JSONGATE=build/src/jsongate  NGINX=nginx  HAPROXY=haproxy
  NGINX_MODULES=...           directory of ngx_http_echo_module.so (slow test; default: the
                              first of /usr/lib/nginx/modules, /usr/share/nginx/modules)
  PROXY_CPU=0 LOAD_CPU=1      CPU of the proxy; CPU shared by wrk and the servers
  RESULTS=bench/results/resilience.md   where the report is written
  KEEP=1                      keep the temporary directory (configs, logs, wrk output)
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
# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"

TESTS=${TESTS:-kill slow cost}
PROXIES=${PROXIES:-jsongate nginx haproxy}
CONNECTIONS=${CONNECTIONS:-16}
KILL_DURATION=${KILL_DURATION:-20}
KILL_MS=${KILL_MS:-2}
KILL_AT=${KILL_AT:-5}
RESTART_AT=${RESTART_AT:-12}
SLOW_DURATION=${SLOW_DURATION:-10}
FAST_MS=${FAST_MS:-2}
SLOW_MS=${SLOW_MS:-20}
COST_DURATION=${COST_DURATION:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-7}
JSONGATE=${JSONGATE:-$ROOT_DIR/build/src/jsongate}
NGINX=${NGINX:-nginx}
HAPROXY=${HAPROXY:-haproxy}
NGINX_MODULES=${NGINX_MODULES:-}
if [ -z "$NGINX_MODULES" ]; then
	for NGINX_MODULES in /usr/lib/nginx/modules /usr/share/nginx/modules; do
		[ -e "$NGINX_MODULES/ngx_http_echo_module.so" ] && break
	done
fi
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RESULTS=${RESULTS:-$BENCH_DIR/results/resilience.md}
KEEP=${KEEP:-0}

# What every server answers, and jsongate's active health checks in the kill and slow tests.
BODY='{"code":0,"msg":"ok","data":{"id":1}}'
HEALTH_INTERVAL=1
HEALTH_PASSES=2
HEALTH="{ path: /health, interval: ${HEALTH_INTERVAL}s, passes: $HEALTH_PASSES, fails: 2 }"
POLICIES="round_robin least_conn hash"

# ---------------------------------------------------------------------------------------------
# Checks

for knob in CONNECTIONS KILL_DURATION KILL_MS KILL_AT RESTART_AT SLOW_DURATION FAST_MS SLOW_MS \
	COST_DURATION WARMUP ROUNDS PROXY_CPU LOAD_CPU; do
	is_uint "${!knob}" || die "$knob must be a non-negative integer (got '${!knob}')"
done
for t in $TESTS; do
	case $t in kill | slow | cost) ;; *) die "unknown test '$t' in TESTS (known: kill slow cost)" ;; esac
done
for p in $PROXIES; do
	case $p in jsongate | nginx | haproxy) ;; *) die "unknown proxy '$p' in PROXIES (known: jsongate nginx haproxy)" ;; esac
done
{ [ "$KILL_AT" -ge 1 ] && [ "$RESTART_AT" -gt "$KILL_AT" ] && [ "$KILL_DURATION" -gt "$RESTART_AT" ]; } ||
	die "the kill test needs 1 <= KILL_AT < RESTART_AT < KILL_DURATION"
{ [ "$SLOW_DURATION" -ge 1 ] && [ "$COST_DURATION" -ge 1 ] && [ "$ROUNDS" -ge 1 ] && [ "$CONNECTIONS" -ge 1 ]; } ||
	die "SLOW_DURATION, COST_DURATION, ROUNDS and CONNECTIONS must be at least 1"
{ [ "$FAST_MS" -ge 1 ] && [ "$SLOW_MS" -ge 1 ]; } || die "FAST_MS and SLOW_MS must be at least 1"
[ "$PROXY_CPU" != "$LOAD_CPU" ] || die "PROXY_CPU and LOAD_CPU must differ"
has_test() { case " $TESTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
has_proxy() { case " $PROXIES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

missing=()
command -v wrk >/dev/null || missing+=("wrk (Debian: wrk)")
command -v taskset >/dev/null || missing+=("taskset (Debian: util-linux)")
command -v curl >/dev/null || missing+=("curl (Debian: curl)")
command -v timeout >/dev/null || missing+=("timeout (Debian: coreutils)")
command -v "$NGINX" >/dev/null || missing+=("nginx (Debian: nginx-light or nginx)")
if has_test cost || { has_proxy jsongate && { has_test kill || has_test slow; }; }; then
	[ -x "$JSONGATE" ] || missing+=("jsongate binary $JSONGATE (build it, or set JSONGATE)")
fi
if has_proxy haproxy && { has_test kill || has_test slow; }; then
	command -v "$HAPROXY" >/dev/null || missing+=("haproxy (Debian: haproxy)")
fi
ECHO_MODULE=$NGINX_MODULES/ngx_http_echo_module.so
if { has_test slow || { has_test kill && [ "$KILL_MS" != 0 ]; }; } && [ ! -e "$ECHO_MODULE" ]; then
	missing+=("$ECHO_MODULE (Debian: libnginx-mod-http-echo; or set NGINX_MODULES)")
fi
if [ ${#missing[@]} -gt 0 ]; then
	log "bench: missing tools:"
	for m in "${missing[@]}"; do log "  - $m"; done
	die "install them (Debian: apt-get install -y nginx-light libnginx-mod-http-echo haproxy wrk util-linux curl), build jsongate, and retry"
fi
{ taskset -c "$PROXY_CPU" true 2>/dev/null && taskset -c "$LOAD_CPU" true 2>/dev/null; } ||
	die "CPUs $PROXY_CPU and $LOAD_CPU must both be usable (this machine has $(nproc --all 2>/dev/null || echo '?'))"

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/jsongate-resilience.XXXXXX")
chmod 755 "$RUNDIR"

# ---------------------------------------------------------------------------------------------
# Helpers

now_s() { date +%s.%3N; }
sleep_until() { # sleep_until EPOCH_SECONDS
	sleep "$(awk -v t="$1" -v n="$(date +%s.%N)" 'BEGIN { d = t - n; printf "%.3f\n", (d > 0 ? d : 0) }')"
}

# render TEMPLATE OUT KEY=VALUE...: the template of conf/ with each @KEY@ replaced (values may
# span lines); @RUNDIR@ is always known.
render() {
	local text kv left
	text=$(<"$BENCH_DIR/conf/$1")
	local out=$2
	shift 2
	for kv in "$@" "RUNDIR=$RUNDIR"; do
		text=${text//"@${kv%%=*}@"/"${kv#*=}"}
	done
	left=$(printf '%s\n' "$text" | grep -v '^#' | grep -o '@[A-Z_]*@' | sort -u | tr '\n' ' ' || true)
	[ -z "$left" ] || die "render $1: no value for $left"
	printf '%s\n' "$text" >"$out"
}

# ---------------------------------------------------------------------------------------------
# Servers: one nginx process each (master_process off: SIGKILL takes the server down at once).

# server_start NAME ANSWER_MS LOG PORT...: ANSWER_MS 0 answers at once; LOG is on (one line per
# request in RUNDIR/NAME.access.log) or off. Sets SERVER_PID, and SERVER_STARTED to the time
# the process started (epoch seconds).
SERVER_PID='' SERVER_STARTED=''
server_start() {
	local name=$1 ms=$2 logging=$3 listen="" answer module="" access=off port conf
	shift 3
	for port in "$@"; do
		listen="$listen${listen:+$'\n'}        listen 127.0.0.1:$port;"
	done
	if [ "$ms" = 0 ]; then
		answer="            return 200 '$BODY';"
	else
		module="load_module $ECHO_MODULE;"
		answer="            echo_sleep $(awk -v ms="$ms" 'BEGIN { printf "%.3f", ms / 1000 }');"
		answer="$answer"$'\n'"            echo '$BODY';"
	fi
	[ "$logging" = off ] || access="$RUNDIR/$name.access.log res"
	conf=$RUNDIR/$name.conf
	render res-server.conf.in "$conf" NAME="$name" LOAD_MODULE="$module" ACCESS_LOG="$access" \
		LISTEN="$listen" ANSWER="$answer"
	"$NGINX" -q -t -p "$RUNDIR/" -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "nginx rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	SERVER_STARTED=$(now_s)
	start_bg "$RUNDIR/$name.out" taskset -c "$LOAD_CPU" "$NGINX" -p "$RUNDIR/" -c "$conf"
	SERVER_PID=$BG_PID
	for port in "$@"; do
		wait_port "$port" "$SERVER_PID" "$RUNDIR/$name.out"
	done
}

# Requests of a server's access log, health checks left out, answered at or after EPOCH.
server_requests() { # server_requests NAME EPOCH
	awk -v t="$2" '$3 != "/health" && $1 >= t { n++ } END { print n + 0 }' "$RUNDIR/$1.access.log"
}

# ---------------------------------------------------------------------------------------------
# Proxies. K_start NAME POLICY HEALTH SERVER_PORT... starts proxy K pinned on PROXY_CPU with
# balance POLICY (round_robin or least_conn; for jsongate also hash, on X-User-Id) and active
# health checks when HEALTH is 1 (nginx has none). It sets PROXY_PORT and PROXY_MAIN, the pid
# to stop (for jsongate, its only process, whose CPU time counts), and for jsongate ADMIN_PORT
# (/metrics). K_version prints the proxy's version.

PROXY_PORT='' PROXY_MAIN='' ADMIN_PORT=''

jsongate_version() { "$JSONGATE" -V 2>&1 | awk 'NR == 1 { print $NF }'; }
jsongate_start() {
	local name=$1 policy=$2 health=$3 servers="" keys access conf port
	shift 3
	for port in "$@"; do servers="$servers${servers:+, }127.0.0.1:$port"; done
	keys="    balance: $policy"
	[ "$policy" != hash ] || keys="$keys"$'\n'"    hash_key: \$header.X-User-Id"
	[ "$health" = 0 ] || keys="$keys"$'\n'"    health: $HEALTH"
	# The access log costs CPU: on where failures are looked for, off where CPU is measured.
	access=off
	[ "$health" = 0 ] || access=$RUNDIR/$name.access.log
	PROXY_PORT=$(pick_port)
	ADMIN_PORT=$(pick_port)
	conf=$RUNDIR/$name.yaml
	render res-jsongate.yaml.in "$conf" PORT="$PROXY_PORT" ADMIN_PORT="$ADMIN_PORT" \
		ACCESS_LOG="$access" SERVERS="$servers" UPSTREAM_KEYS="$keys"
	"$JSONGATE" -t -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "jsongate rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$JSONGATE" -f -c "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
}

nginx_version() { "$NGINX" -v 2>&1 | sed 's|^nginx version: nginx/||'; }
nginx_start() {
	local name=$1 policy=$2 servers="" balance="" conf port
	shift 3
	for port in "$@"; do
		servers="$servers${servers:+$'\n'}        server 127.0.0.1:$port;"
	done
	[ "$policy" != least_conn ] || balance="        least_conn;"
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.conf
	render res-nginx.conf.in "$conf" NAME="$name" PORT="$PROXY_PORT" BALANCE="$balance" \
		SERVERS="$servers" ACCESS_LOG="$RUNDIR/$name.access.log unusual if=\$unusual"
	"$NGINX" -q -t -p "$RUNDIR/" -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "nginx rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$NGINX" -p "$RUNDIR/" -c "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
}

haproxy_version() { "$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $3 }'; }
haproxy_start() {
	local name=$1 policy=$2 servers="" balance=roundrobin conf port i=0
	shift 3
	for port in "$@"; do
		i=$((i + 1))
		servers="$servers${servers:+$'\n'}    server s$i 127.0.0.1:$port"
	done
	[ "$policy" != least_conn ] || balance=leastconn
	PROXY_PORT=$(pick_port)
	conf=$RUNDIR/$name.cfg
	render res-haproxy.cfg.in "$conf" PORT="$PROXY_PORT" BALANCE="$balance" SERVERS="$servers"
	"$HAPROXY" -c -q -f "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
		die "haproxy rejects $conf: $(cat "$RUNDIR/$name.test.log")"
	start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$conf"
	wait_port "$PROXY_PORT" "$BG_PID" "$RUNDIR/$name.out"
	PROXY_MAIN=$BG_PID
}

verify_proxy() { # verify_proxy NAME
	local body
	body=$(curl -sf --max-time 5 "http://127.0.0.1:$PROXY_PORT/api") ||
		die "$1 does not answer 200 (see $RUNDIR/$1.out)"
	[ "$body" = "$BODY" ] || die "$1 answers '$body', not '$BODY'"
}

# ---------------------------------------------------------------------------------------------
# wrk, with resilience.lua: statuses counted exactly, failures timed.

# wrk_command SECONDS: the wrk command line, in WRK.
WRK=()
wrk_command() {
	WRK=(timeout $(($1 + 60)) taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${1}s" --timeout 10s
		-s "$BENCH_DIR/resilience.lua" "http://127.0.0.1:$PROXY_PORT/api")
}

run_wrk() { # run_wrk SECONDS OUT: in the foreground
	wrk_command "$1"
	"${WRK[@]}" >"$2" 2>&1 || die "wrk failed: $(cat "$2")"
}

wrk_requests() { awk '/ requests in / { print $1 }' "$1"; }
wrk_socket_errors() {
	awk '/Socket errors:/ { gsub(/,/, ""); n = $4 + $6 + $8 + $10 } END { print n + 0 }' "$1"
}
wrk_non2xx() { awk '$1 == "status" && ($2 < 200 || $2 > 299) { n += $3 } END { print n + 0 }' "$1"; }
wrk_rps() { awk '/^Requests\/sec:/ { printf "%.0f\n", $2 }' "$1"; }
# Answers that were not 2xx, by status, with the span of times they came at, in seconds after
# EPOCH: "502 ×3 at 5.01–5.02 s".
wrk_failures() { # wrk_failures OUT EPOCH
	awk -v t0="$2" '
		$1 == "status" && ($2 < 200 || $2 > 299) { n[$2] += $3 }
		$1 == "fail" { s = $3 / 1000 - t0; if (!($2 in lo) || s < lo[$2]) lo[$2] = s; if (s > hi[$2]) hi[$2] = s }
		END {
			for (c in n) {
				printf "%s%s ×%d", sep, c, n[c]; sep = ", "
				if (c in lo) printf " at %.2f–%.2f s", lo[c], hi[c]
			}
		}' "$1"
}

# jsongate's counters of retries, ejections and the retry budget, from /metrics.
jsongate_counters() { # jsongate_counters METRICS_FILE
	awk '
		/^jsongate_upstream_retries_total/ { match($0, /reason="[a-z_0-9]*"/); r = substr($0, RSTART + 8, RLENGTH - 9); retries = retries sep r " " $NF; sep = ", " }
		/^jsongate_upstream_ejections_total/ { ej += $NF }
		/^jsongate_upstream_retry_budget_exhausted_total/ { bx += $NF }
		END { printf "retries: %s; ejections: %d; retry budget exhausted: %d", retries == "" ? "none" : retries, ej, bx }' "$1"
}

# ---------------------------------------------------------------------------------------------
# Test 1: kill one of two servers, then start it again.

# K_retried NAME: requests proxy K tried on more than one server, from its log: jsongate's and
# nginx's access logs list the servers tried ("a, b"); HAProxy logs the requests it retried
# (dontlog-normal), with the count in the last field of "16/16/2/2/+1" ("+": redispatched).
jsongate_retried() { grep -c '"upstream":"[^"]*, ' "$RUNDIR/$1.access.log" || true; }
nginx_retried() { grep -c ' upstream [^ ]*, ' "$RUNDIR/$1.access.log" || true; }
haproxy_retried() {
	awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\/[0-9]+\/[0-9]+\/[0-9]+\/\+?[0-9]+$/) {
		split($i, f, "/"); if (f[5] + 0 > 0) n++ } } END { print n + 0 }' "$RUNDIR/$1.out"
}

declare -A K_REQ K_NON2XX K_SOCK K_FAILED K_WHAT K_BACK K_AFTER K_EXTRA K_RETRIED

kill_test() { # kill_test PROXY
	local p=$1 name=kill-$1 port_a port_b a b wrk t0 t_restart first out
	port_a=$(pick_port)
	port_b=$(pick_port)
	server_start "$name-a" "$KILL_MS" on "$port_a"
	a=$SERVER_PID
	server_start "$name-b" "$KILL_MS" on "$port_b"
	b=$SERVER_PID
	"${p}_start" "$name" round_robin 1 "$port_a" "$port_b"
	verify_proxy "$name"
	out=$RUNDIR/$name.wrk
	t0=$(now_s)
	wrk_command "$KILL_DURATION"
	start_bg "$out" "${WRK[@]}"
	wrk=$BG_PID
	sleep_until "$(awk -v t="$t0" -v d="$KILL_AT" 'BEGIN { printf "%.3f", t + d }')"
	stop_pid "$b" KILL
	sleep_until "$(awk -v t="$t0" -v d="$RESTART_AT" 'BEGIN { printf "%.3f", t + d }')"
	server_start "$name-b-restarted" "$KILL_MS" on "$port_b"
	b=$SERVER_PID
	t_restart=$SERVER_STARTED
	wait_pid "$wrk" || die "wrk failed against $p: $(cat "$out")"
	K_EXTRA[$p]=
	if [ "$p" = jsongate ]; then
		curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$RUNDIR/$name.metrics" ||
			die "jsongate's /metrics does not answer"
		K_EXTRA[$p]=$(jsongate_counters "$RUNDIR/$name.metrics")
	fi
	stop_pid "$PROXY_MAIN"
	stop_pid "$a"
	stop_pid "$b"

	K_REQ[$p]=$(wrk_requests "$out")
	is_uint "${K_REQ[$p]}" || die "no wrk summary for $p: $(cat "$out")"
	K_NON2XX[$p]=$(wrk_non2xx "$out")
	K_SOCK[$p]=$(wrk_socket_errors "$out")
	K_FAILED[$p]=$((K_NON2XX[$p] + K_SOCK[$p]))
	K_WHAT[$p]=$(wrk_failures "$out" "$t0")
	K_RETRIED[$p]=$("${p}_retried" "$name")
	first=$(awk '$3 != "/health" { print $1; exit }' "$RUNDIR/$name-b-restarted.access.log")
	if [ -n "$first" ]; then
		K_BACK[$p]=$(awk -v f="$first" -v t="$t_restart" 'BEGIN { printf "%.2f s", f - t }')
	else
		K_BACK[$p]="not within the run"
	fi
	K_AFTER[$p]=$(server_requests "$name-b-restarted" 0)
	log "  kill $p: ${K_REQ[$p]} requests, ${K_FAILED[$p]} failed${K_WHAT[$p]:+ (${K_WHAT[$p]})}, restarted server back after: ${K_BACK[$p]}"
}

# ---------------------------------------------------------------------------------------------
# Test 2: one fast and one slow server.

declare -A S_REQ S_FAST S_SLOW S_RPS S_FAILED

slow_test() { # slow_test PROXY POLICY
	local p=$1 policy=$2 name=slow-$1-$2 port_f port_s f s out t0 key="$1|$2"
	port_f=$(pick_port)
	port_s=$(pick_port)
	server_start "$name-fast" "$FAST_MS" on "$port_f"
	f=$SERVER_PID
	server_start "$name-slow" "$SLOW_MS" on "$port_s"
	s=$SERVER_PID
	"${p}_start" "$name" "$policy" 1 "$port_f" "$port_s"
	verify_proxy "$name"
	out=$RUNDIR/$name.wrk
	t0=$(now_s)
	run_wrk "$SLOW_DURATION" "$out"
	stop_pid "$PROXY_MAIN"
	stop_pid "$f"
	stop_pid "$s"
	S_REQ[$key]=$(wrk_requests "$out")
	S_RPS[$key]=$(wrk_rps "$out")
	S_FAILED[$key]=$(($(wrk_non2xx "$out") + $(wrk_socket_errors "$out")))
	S_FAST[$key]=$(server_requests "$name-fast" "$t0")
	S_SLOW[$key]=$(server_requests "$name-slow" "$t0")
	log "  slow $p $policy: fast ${S_FAST[$key]}, slow ${S_SLOW[$key]}"
}

share() { # share PART OTHER: PART's percentage of the sum
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", (a + b > 0 ? 100 * a / (a + b) : 0) }'
}

# ---------------------------------------------------------------------------------------------
# Test 3: CPU per request of the balance policies, four servers (ports of one nginx).

declare -A C_CPU C_RPS C_SPREAD C_FAILED C_SHARES C_PAIRED RUN_CPU RUN_RPS RUN_SHARES

cost_run() { # cost_run POLICY ROUND PORT...
	local policy=$1 round=$2 name=cost-$1-$2 out t0 t1 requests key="$1|$2"
	shift 2
	jsongate_start "$name" "$policy" 0 "$@"
	verify_proxy "$name"
	[ "$WARMUP" = 0 ] || run_wrk "$WARMUP" "$RUNDIR/$name.warmup.wrk"
	out=$RUNDIR/$name.wrk
	t0=$(cpu_ticks "$PROXY_MAIN")
	run_wrk "$COST_DURATION" "$out"
	t1=$(cpu_ticks "$PROXY_MAIN")
	curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$RUNDIR/$name.metrics" ||
		die "jsongate's /metrics does not answer"
	stop_pid "$PROXY_MAIN"
	requests=$(wrk_requests "$out")
	{ is_uint "$requests" && [ "$requests" -gt 0 ]; } || die "no requests completed: $(cat "$out")"
	RUN_CPU[$key]=$(ticks_per_request_us $((t1 - t0)) "$requests")
	RUN_RPS[$key]=$(wrk_rps "$out")
	# Each server's share of the requests (warm-up included), in the order of the ports.
	RUN_SHARES[$key]=$(for port in "$@"; do
		awk -v s="server=\"127.0.0.1:$port\"" 'index($0, "jsongate_upstream_requests_total{") == 1 && index($0, s) { n += $NF } END { print n + 0 }' "$RUNDIR/$name.metrics"
	done | awk '{ v[NR] = $1; t += $1 } END { for (i = 1; i <= NR; i++) printf "%s%.0f", (i > 1 ? "/" : ""), t ? 100 * v[i] / t : 0 }')
	C_FAILED[$policy]=$((${C_FAILED[$policy]:-0} + $(wrk_non2xx "$out") + $(wrk_socket_errors "$out")))
	log "  cost $policy (round $round): ${RUN_CPU[$key]} µs/req, ${RUN_RPS[$key]} req/s, shares ${RUN_SHARES[$key]} %"
}

cost_median() { # cost_median POLICY: the run with the median CPU per request (lower middle)
	local policy=$1 round median
	median=$(for round in $(seq "$ROUNDS"); do
		printf '%s %s\n' "${RUN_CPU[$policy|$round]}" "$round"
	done | sort -g | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2) { print $2 }')
	C_CPU[$policy]=${RUN_CPU[$policy|$median]}
	C_RPS[$policy]=${RUN_RPS[$policy|$median]}
	C_SHARES[$policy]=${RUN_SHARES[$policy|$median]}
	C_SPREAD[$policy]=$(for round in $(seq "$ROUNDS"); do echo "${RUN_CPU[$policy|$round]}"; done |
		sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f–%.1f\n", lo, hi }')
	# Each round's ratio to round_robin's run of the same round (measured a minute apart at
	# most): their median (lower middle) and range.
	C_PAIRED[$policy]=$(for round in $(seq "$ROUNDS"); do
		awk -v a="${RUN_CPU[$policy|$round]}" -v b="${RUN_CPU[round_robin|$round]}" 'BEGIN { printf "%.3f\n", a / b }'
	done | sort -g | awk -v n="$ROUNDS" 'NR == 1 { lo = $1 } NR == int((n + 1) / 2) { m = $1 } { hi = $1 }
		END { printf "%.3f (%.3f–%.3f)\n", m, lo, hi }')
}

# ---------------------------------------------------------------------------------------------
# Run

STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if has_test kill; then
	log "kill: one of two servers killed at ${KILL_AT} s, started again at ${RESTART_AT} s"
	for p in $PROXIES; do kill_test "$p"; done
fi
if has_test slow; then
	log "slow: one server answers in $FAST_MS ms, the other in $SLOW_MS ms"
	for p in $PROXIES; do
		for policy in round_robin least_conn; do slow_test "$p" "$policy"; done
	done
fi
if has_test cost; then
	log "cost: jsongate in front of four servers, $ROUNDS rounds"
	cost_ports=()
	for _ in 1 2 3 4; do cost_ports+=("$(pick_port)"); done
	server_start cost-servers 0 off "${cost_ports[@]}"
	cost_servers=$SERVER_PID
	for round in $(seq "$ROUNDS"); do
		for policy in $POLICIES; do cost_run "$policy" "$round" "${cost_ports[@]}"; done
	done
	stop_pid "$cost_servers"
	for policy in $POLICIES; do cost_median "$policy"; done
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# Report

verdict() { if [ "$1" = 1 ]; then printf 'met'; else printf '**not met**%s' "${2:+ ($2)}"; fi; }

report() {
	local p policy key versions="" commit cpu_model ok window
	cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	{ has_test cost || has_proxy jsongate; } && versions="jsongate $(jsongate_version)"
	versions="$versions${versions:+; }nginx $(nginx_version)"
	has_proxy haproxy && versions="$versions; HAProxy $(haproxy_version)"
	versions="$versions; $({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $1, $2 }')"
	commit=$(source_commit)
	[ -z "$commit" ] || versions="$versions; working tree $commit"
	printf '# jsongate resilience benchmark\n\n'
	printf -- '- date: %s\n' "$STARTED"
	printf -- '- machine: %s; CPU: %s (%s CPUs)\n' "$(uname -srm)" "${cpu_model:-unknown}" "$(nproc --all 2>/dev/null || echo '?')"
	printf -- '- versions: %s\n' "$versions"
	printf -- '- load average (1, 5, 15 min): %s before, %s after (other processes add noise)\n' "$LOAD_BEFORE" "$LOAD_AFTER"
	printf -- '- proxy alone on CPU %s; wrk (1 thread, %s connections) and the servers on CPU %s\n' \
		"$PROXY_CPU" "$CONNECTIONS" "$LOAD_CPU"

	if has_test kill; then
		window=$((HEALTH_INTERVAL * HEALTH_PASSES + 1))
		printf '\n## Kill and restart\n\n'
		# shellcheck disable=SC2016 # markdown code spans
		printf 'Two servers answering in %s ms, round robin, `wrk -c%s` for %s s; one server killed (SIGKILL) at %s s, started again at %s s.\n' \
			"$KILL_MS" "$CONNECTIONS" "$KILL_DURATION" "$KILL_AT" "$RESTART_AT"
		printf 'Failed: non-2xx answers + socket errors. Retried: requests the proxy tried on more than one server (from its log). Back: first request the restarted server answered (health checks aside), in seconds after it was started.\n\n'
		printf '| proxy | requests | failed | non-2xx | socket errors | retried | back after | requests to the restarted server |\n'
		printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
		for p in $PROXIES; do
			printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$p" "${K_REQ[$p]}" "${K_FAILED[$p]}" \
				"${K_NON2XX[$p]}" "${K_SOCK[$p]}" "${K_RETRIED[$p]}" "${K_BACK[$p]}" "${K_AFTER[$p]}"
		done
		printf '\n'
		for p in $PROXIES; do
			[ -z "${K_WHAT[$p]}" ] || printf -- '- %s non-2xx: %s\n' "$p" "${K_WHAT[$p]}"
			[ -z "${K_EXTRA[$p]}" ] || printf -- '- %s /metrics: %s\n' "$p" "${K_EXTRA[$p]}"
		done
		if has_proxy jsongate; then
			printf '\nTargets:\n\n'
			printf -- '- 0 failed requests for jsongate (%s): %s\n' "${K_FAILED[jsongate]}" \
				"$(verdict "$([ "${K_FAILED[jsongate]}" = 0 ] && echo 1)")"
			for p in $PROXIES; do
				[ "$p" != jsongate ] || continue
				printf -- '- fewer failures than %s (%s against %s): %s\n' "$p" "${K_FAILED[jsongate]}" \
					"${K_FAILED[$p]}" "$(verdict "$([ "${K_FAILED[jsongate]}" -lt "${K_FAILED[$p]}" ] && echo 1)" \
					"$([ "${K_FAILED[jsongate]}" != "${K_FAILED[$p]}" ] || echo "as many")")"
			done
			ok=$(awk -v b="${K_BACK[jsongate]}" -v w="$window" 'BEGIN { print ((b ~ /^[0-9.]+ s$/ && b + 0 <= w) ? 1 : 0) }')
			printf -- '- restarted server back within interval × passes + 1 s = %s s (%s): %s\n' "$window" \
				"${K_BACK[jsongate]}" "$(verdict "$ok")"
		fi
	fi

	if has_test slow; then
		printf '\n## A slow server\n\n'
		# shellcheck disable=SC2016
		printf 'Two servers, one answering in %s ms, the other in %s ms; `wrk -c%s` for %s s.\n\n' \
			"$FAST_MS" "$SLOW_MS" "$CONNECTIONS" "$SLOW_DURATION"
		printf '| proxy | balance | requests | req/s | failed | to the fast server | to the slow one | fast share |\n'
		printf '|---|---|---:|---:|---:|---:|---:|---:|\n'
		for p in $PROXIES; do
			for policy in round_robin least_conn; do
				key="$p|$policy"
				printf '| %s | %s | %s | %s | %s | %s | %s | %s %% |\n' "$p" "$policy" "${S_REQ[$key]}" \
					"${S_RPS[$key]}" "${S_FAILED[$key]}" "${S_FAST[$key]}" "${S_SLOW[$key]}" \
					"$(share "${S_FAST[$key]}" "${S_SLOW[$key]}")"
			done
		done
		if has_proxy jsongate; then
			printf '\nTargets:\n\n'
			ok=$(awk -v s="$(share "${S_FAST[jsongate|least_conn]}" "${S_SLOW[jsongate|least_conn]}")" 'BEGIN { print (s >= 80 ? 1 : 0) }')
			printf -- '- jsongate least_conn: the fast server takes >= 80 %% (%s %%): %s\n' \
				"$(share "${S_FAST[jsongate|least_conn]}" "${S_SLOW[jsongate|least_conn]}")" "$(verdict "$ok")"
			ok=$(awk -v s="$(share "${S_FAST[jsongate|round_robin]}" "${S_SLOW[jsongate|round_robin]}")" 'BEGIN { print ((s >= 45 && s <= 55) ? 1 : 0) }')
			printf -- '- jsongate round_robin: about 50 %% (%s %%): %s\n' \
				"$(share "${S_FAST[jsongate|round_robin]}" "${S_SLOW[jsongate|round_robin]}")" "$(verdict "$ok")"
		fi
	fi

	if has_test cost; then
		printf '\n## Cost of balancing\n\n'
		# shellcheck disable=SC2016
		printf 'jsongate (`workers: 1`, access log off, no health checks) in front of four servers answering at once; `wrk -c%s`, %s s warm-up and %s s measured, %s rounds in turns; the median run of each policy. Requests carry `X-User-Id` (1024 values in turn), the key of `hash`.\n\n' \
			"$CONNECTIONS" "$WARMUP" "$COST_DURATION" "$ROUNDS"
		printf '| balance | CPU µs/req | CPU range | req/s | shares of the 4 servers | / round_robin | per-round ratios |\n'
		printf '|---|---:|---:|---:|---|---:|---:|\n'
		for policy in $POLICIES; do
			printf '| %s | %s | %s | %s | %s %% | %s | %s |\n' "$policy" "$(fmt_cpu "${C_CPU[$policy]}")" \
				"${C_SPREAD[$policy]}" "${C_RPS[$policy]}" "${C_SHARES[$policy]}" \
				"$(awk -v a="${C_CPU[$policy]}" -v b="${C_CPU[round_robin]}" 'BEGIN { printf "%.3f", a / b }')" \
				"${C_PAIRED[$policy]}"
		done
		printf '\nTargets:\n\n'
		for policy in least_conn hash; do
			ok=$(awk -v a="${C_CPU[$policy]}" -v b="${C_CPU[round_robin]}" 'BEGIN { print (a / b <= 1.03 ? 1 : 0) }')
			printf -- '- %s within 3 %% of round_robin (%s): %s\n' "$policy" \
				"$(awk -v a="${C_CPU[$policy]}" -v b="${C_CPU[round_robin]}" 'BEGIN { printf "%+.1f %%", 100 * (a / b - 1) }')" \
				"$(verdict "$ok")"
		done
		for policy in $POLICIES; do
			[ "${C_FAILED[$policy]:-0}" = 0 ] || printf -- '- %s: %s failed requests (wrk): the runs are not comparable\n' "$policy" "${C_FAILED[$policy]}"
		done
	fi
}

mkdir -p "$(dirname "$RESULTS")"
report | tee "$RESULTS"
log "written to $RESULTS"
