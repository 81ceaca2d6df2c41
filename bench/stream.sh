#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Streaming benchmark: CPU per SSE event and per MB of a large JSON body, of jsongate's
# `events:` and streamed response ops against its own pass-through, nginx's and nginx +
# lua-cjson doing the same edits. See bench/README.md. Installs nothing; names the missing
# tools.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/stream.sh [-h]

Starts an nginx upstream serving two files (bench/stream.py writes them): an SSE stream of
EVENTS chat-completion chunks of 1 KB and a JSON envelope of JSON_MB MB. Then, for each row in
turn, starts the proxy pinned alone on PROXY_CPU, checks one answer (bytes, or each event's
JSON for nginx + lua-cjson), and fetches the file REQUESTS times more with curl (on LOAD_CPU,
with the upstream), one request after the other: the proxy's CPU time (all its processes and
threads, /proc/PID/task/*/schedstat) over those requests, per event or per MB of the
upstream's body. ROUNDS rounds taken in turns; the median round of each row is shown, with
the highest peak RSS (VmHWM).

  sse rows:  jsongate-pass (a route without events:), jsongate-events (events: [ { drop:
             [system_fingerprint] }, { set: { gateway: jsongate } } ]), nginx (proxy_pass,
             proxy_buffering off), nginx-lua-events (a body filter doing the same edits with
             lua-cjson, event by event)
  json rows: jsongate-pass, jsongate-unwrap (unwrap: data), jsongate-drop (drop: [debug]),
             nginx (proxy_pass), nginx-lua-unwrap (the whole body buffered, decoded, the
             value of "data" encoded again); limits.max_body at its default, smaller than
             the body: a jsongate row whose answer is not the rewritten body (size, SHA-256
             and first bytes) is marked NOT REWRITTEN

Environment:
  PARTS="sse json"     which tables to make
  SSE_ROWS="..." JSON_ROWS="..."   rows of each (default: all of the above)
  EVENTS=100000        events of the SSE stream (1 KB each)
  JSON_MB=256          size of the JSON body
  ROUNDS=5             rounds (QUICK=1: 2)
  REQUESTS=3           measured requests per row and round, SSE (QUICK=1: 1)
  JSON_REQUESTS=2      the same for the JSON body (QUICK=1: 1)
  QUICK=1              a smoke run: fewer rounds and requests
  JSONGATE=build/src/jsongate   daemon binary
  NGINX=nginx          nginx binary
  NGINX_MODULES=...    directory of the nginx Lua module (default: the first of
                       /usr/lib/nginx/modules, /usr/share/nginx/modules that has it)
  PROXY_CPU=0 LOAD_CPU=1        CPU of the proxy; CPU shared by curl and the upstream
  RESULTS=bench/results/stream.md   where the report is written
  KEEP=1               keep the temporary directory (configs, logs, the two bodies)
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

QUICK=${QUICK:-0}
PARTS=${PARTS:-sse json}
SSE_ROWS=${SSE_ROWS:-jsongate-pass jsongate-events nginx nginx-lua-events}
JSON_ROWS=${JSON_ROWS:-jsongate-pass jsongate-unwrap jsongate-drop nginx nginx-lua-unwrap}
EVENTS=${EVENTS:-100000}
JSON_MB=${JSON_MB:-256}
if [ "$QUICK" = 1 ]; then
	ROUNDS=${ROUNDS:-2} REQUESTS=${REQUESTS:-1} JSON_REQUESTS=${JSON_REQUESTS:-1}
else
	ROUNDS=${ROUNDS:-5} REQUESTS=${REQUESTS:-3} JSON_REQUESTS=${JSON_REQUESTS:-2}
fi
JSONGATE=${JSONGATE:-$ROOT_DIR/build/src/jsongate}
NGINX=${NGINX:-nginx}
NGINX_MODULES=${NGINX_MODULES:-}
if [ -z "$NGINX_MODULES" ]; then
	for NGINX_MODULES in /usr/lib/nginx/modules /usr/share/nginx/modules; do
		[ -e "$NGINX_MODULES/ngx_http_lua_module.so" ] && break
	done
fi
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RESULTS=${RESULTS:-$BENCH_DIR/results/stream.md}
KEEP=${KEEP:-0}

# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"

for v in EVENTS JSON_MB ROUNDS REQUESTS JSON_REQUESTS; do
	{ is_uint "${!v}" && [ "${!v}" -gt 0 ]; } || die "$v must be a positive integer"
done

# Rows, one per line: part, name, kind (jsongate, nginx or nginx_lua), config template (in
# bench/conf/), path asked for, and what the answer must be: pass (the upstream's bytes),
# events (each event edited; checked as JSON), unwrap or drop (the rewritten body's bytes;
# "unwrap json": its size and first byte, for a proxy that writes members in another order).
ROWS=(
	"sse  jsongate-pass    jsongate  stream-jsongate.yaml.in  /pass/stream.sse    pass"
	"sse  jsongate-events  jsongate  stream-jsongate.yaml.in  /events/stream.sse  events"
	"sse  nginx            nginx     stream-nginx.conf.in     /sse/stream.sse     pass"
	"sse  nginx-lua-events nginx_lua stream-nginx-lua.conf.in /events/stream.sse  events"
	"json jsongate-pass    jsongate  stream-jsongate.yaml.in  /pass/body.json     pass"
	"json jsongate-unwrap  jsongate  stream-jsongate.yaml.in  /unwrap/body.json   unwrap"
	"json jsongate-drop    jsongate  stream-jsongate.yaml.in  /drop/body.json     drop"
	"json nginx            nginx     stream-nginx.conf.in     /json/body.json     pass"
	"json nginx-lua-unwrap nginx_lua stream-nginx-lua.conf.in /unwrap/body.json   unwrap json"
)
row_field() { # row_field PART NAME FIELD (1: kind, 2: template, 3: path, 4 and 5: the check)
	local line f
	for line in "${ROWS[@]}"; do
		read -ra f <<<"$line"
		if [ "${f[0]}" = "$1" ] && [ "${f[1]}" = "$2" ]; then
			printf '%s\n' "${f[$(($3 + 1))]:-}"
			return 0
		fi
	done
	return 1
}
rows_of() { if [ "$1" = sse ]; then printf '%s\n' "$SSE_ROWS"; else printf '%s\n' "$JSON_ROWS"; fi; }

# ---------------------------------------------------------------------------------------------
# Tools

missing=""
need_lua=0 need_jsongate=0
for part in $PARTS; do
	case $part in sse | json) ;; *) die "unknown part $part (sse, json)" ;; esac
	for name in $(rows_of "$part"); do
		row_field "$part" "$name" 1 >/dev/null || die "unknown $part row: $name"
		case $(row_field "$part" "$name" 1) in
		jsongate) need_jsongate=1 ;;
		nginx_lua) need_lua=1 ;;
		esac
	done
done
[ "$need_jsongate" = 0 ] || [ -x "$JSONGATE" ] || missing="$missing
  jsongate binary $JSONGATE (build it, or set JSONGATE)"
command -v "$NGINX" >/dev/null || missing="$missing
  nginx (Debian: nginx-light)"
for tool in curl taskset python3; do
	command -v "$tool" >/dev/null || missing="$missing
  $tool"
done
if [ "$need_lua" = 1 ]; then
	for so in ndk_http_module ngx_http_lua_module; do
		[ -e "$NGINX_MODULES/$so.so" ] || missing="$missing
  $NGINX_MODULES/$so.so (Debian: libnginx-mod-http-lua; or set NGINX_MODULES)"
	done
	cjson=
	for so in /usr/lib/*/lua/5.1/cjson.so /usr/lib/lua/5.1/cjson.so /usr/local/lib/lua/5.1/cjson.so; do
		[ -e "$so" ] && cjson=$so
	done
	[ -n "$cjson" ] || missing="$missing
  lua-cjson for Lua 5.1 / LuaJIT (Debian: lua-cjson)"
fi
[ -z "$missing" ] || die "missing:$missing"
[ -r "/proc/$$/schedstat" ] || die "/proc/PID/schedstat is missing (a kernel without CONFIG_SCHED_INFO)"

# ---------------------------------------------------------------------------------------------
# The bodies and the upstream

RUNDIR=$(mktemp -d /tmp/jsongate-bench-stream.XXXXXX)
DATADIR=$RUNDIR/data
mkdir "$DATADIR"
# nginx workers run as an unprivileged user when started as root: they must read the data.
chmod 755 "$RUNDIR" "$DATADIR"
log "writing the bodies: $EVENTS events, $JSON_MB MB of JSON"
case " $PARTS " in *" sse "*) python3 "$BENCH_DIR/stream.py" sse "$DATADIR/stream.sse" "$EVENTS" ;; esac
case " $PARTS " in *" json "*) python3 "$BENCH_DIR/stream.py" json "$DATADIR/body.json" "$JSON_MB" ;; esac
chmod 644 "$DATADIR"/*

render() { # render TEMPLATE OUT NAME PORT
	sed -e "s|@RUNDIR@|$RUNDIR|g" -e "s|@DATADIR@|$DATADIR|g" -e "s|@NAME@|$3|g" \
		-e "s|@PORT@|$4|g" -e "s|@UPSTREAM_PORT@|$UPSTREAM_PORT|g" \
		-e "s|@NGINX_MODULES@|$NGINX_MODULES|g" "$BENCH_DIR/conf/$1" >"$2"
}

UPSTREAM_PORT=$(pick_port)
render stream-upstream.conf.in "$RUNDIR/upstream.conf" upstream "$UPSTREAM_PORT"
"$NGINX" -q -t -p "$RUNDIR/" -c "$RUNDIR/upstream.conf" >"$RUNDIR/upstream.test.log" 2>&1 ||
	die "nginx rejects the upstream config: $(cat "$RUNDIR/upstream.test.log")"
start_bg "$RUNDIR/upstream.out" taskset -c "$LOAD_CPU" "$NGINX" -p "$RUNDIR/" -c "$RUNDIR/upstream.conf"
wait_port "$UPSTREAM_PORT" "$BG_PID" "$RUNDIR/upstream.out"

# ---------------------------------------------------------------------------------------------
# Proxies: PROXY_PORT, PROXY_MAIN (the pid to stop), PROXY_PIDS (whose CPU is summed),
# PROXY_MEM_PID (whose peak RSS is reported: the nginx worker, the jsongate process).

PROXY_PORT='' PROXY_MAIN='' PROXY_PIDS='' PROXY_MEM_PID=''

proxy_start() { # proxy_start PART NAME
	local name=$2 kind template conf pid workers=''
	kind=$(row_field "$1" "$2" 1)
	template=$(row_field "$1" "$2" 2)
	PROXY_PORT=$(pick_port)
	case $kind in
	jsongate)
		conf=$RUNDIR/$name.yaml
		render "$template" "$conf" "$name" "$PROXY_PORT"
		"$JSONGATE" -t -c "$conf" >"$RUNDIR/$name.test.log" 2>&1 ||
			die "jsongate rejects $conf: $(cat "$RUNDIR/$name.test.log")"
		start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$JSONGATE" -f -c "$conf"
		pid=$BG_PID workers=$BG_PID
		;;
	nginx | nginx_lua)
		conf=$RUNDIR/$name.conf
		render "$template" "$conf" "$name" "$PROXY_PORT"
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
		;;
	esac
	wait_port "$PROXY_PORT" "$pid" "$RUNDIR/$name.out"
	PROXY_MAIN=$pid
	PROXY_PIDS=$pid
	[ "$workers" = "$pid" ] || PROXY_PIDS="$pid $workers"
	PROXY_MEM_PID=$workers
}

proxy_version() {
	case $1 in
	jsongate) printf '%s (%s)\n' "$("$JSONGATE" -V 2>&1 | head -n 1)" "$JSONGATE" ;;
	nginx) "$NGINX" -v 2>&1 | sed 's|^nginx version: ||' ;;
	nginx_lua)
		local pkg versions=""
		for pkg in libnginx-mod-http-lua lua-cjson; do
			versions="$versions${versions:+, }$pkg $(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || echo unknown)"
		done
		printf '%s\n' "$versions"
		;;
	esac
}

# CPU time of the given processes, all their threads, in nanoseconds (the scheduler's
# runtime, not rounded to clock ticks: a 100 MB pass-through costs only tens of ms).
cpu_ns() {
	local pid total=0 ns rest
	for pid in "$@"; do
		for f in /proc/"$pid"/task/*/schedstat; do
			read -r ns rest <"$f" 2>/dev/null || continue
			total=$((total + ns))
		done
	done
	printf '%s\n' "$total"
}

# Wait until the proxy's CPU time stops growing (the checked answer's last bytes).
wait_idle() {
	local before after
	for _ in $(seq 50); do
		before=$(cpu_ns "$@")
		sleep 0.2
		after=$(cpu_ns "$@")
		[ $((after - before)) -lt 1000000 ] && return 0
	done
	log "  (the proxy was still busy 10 s after the checked request)"
}

# ---------------------------------------------------------------------------------------------
# One row, one round

# Per run (PART|NAME|ROUND): CPU ns per request, MB/s, peak RSS; per row (PART|NAME): the
# check's verdict, the answer's size, and user and all clock ticks over every round (the
# user-space share: ticks are 10 ms, too coarse for one round of a cheap row).
declare -A RUN_NS RUN_MBS RUN_HWM CHECK SIZE USER_TICKS ALL_TICKS

upstream_bytes() { # upstream_bytes PART
	if [ "$1" = sse ]; then stat -c %s "$DATADIR/stream.sse"; else stat -c %s "$DATADIR/body.json"; fi
}

# Fetch the row's path once and check the answer: "ok ..." or what is wrong.
check_answer() { # check_answer PART NAME
	local part=$1 name=$2 path mode how out
	path=$(row_field "$part" "$name" 3)
	mode=$(row_field "$part" "$name" 4)
	how=$(row_field "$part" "$name" 5)
	if [ "$part" = sse ]; then
		out=$(taskset -c "$LOAD_CPU" curl -sS -D "$RUNDIR/check.head" "http://127.0.0.1:$PROXY_PORT$path" |
			taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/stream.py" check-sse "$EVENTS" "$mode") || true
	else
		out=$(taskset -c "$LOAD_CPU" curl -sS -D "$RUNDIR/check.head" "http://127.0.0.1:$PROXY_PORT$path" |
			taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/stream.py" check-json "$DATADIR/body.json.expect" "$mode" "${how:-bytes}") || true
	fi
	local status
	status=$(awk 'NR == 1 { print $2 }' "$RUNDIR/check.head" 2>/dev/null)
	[ "$status" = 200 ] || out="status ${status:-none}; $out"
	printf '%s\n' "$out"
}

measure() { # measure PART NAME ROUND
	local part=$1 name=$2 key="$1|$2|$3" verdict n path u0 s0 u1 s1 c0 c1 t0 t1 got bytes
	path=$(row_field "$part" "$name" 3)
	n=$REQUESTS
	[ "$part" = sse ] || n=$JSON_REQUESTS
	proxy_start "$part" "$name"
	verdict=$(check_answer "$part" "$name")
	case $verdict in
	ok*) ;;
	*)
		# A proxy that should only pass bytes, or nginx + Lua, answering wrong: the bench
		# itself is wrong. A jsongate op row not rewriting: a finding, shown in the table.
		if [ "$(row_field "$part" "$name" 1)" != jsongate ] || [ "$(row_field "$part" "$name" 4)" = pass ]; then
			die "$part $name answers wrong: $verdict"
		fi
		verdict="NOT REWRITTEN: $verdict"
		;;
	esac
	[ "$3" != 1 ] || CHECK[$part|$name]=$verdict
	# shellcheck disable=SC2086 # pid lists
	wait_idle $PROXY_PIDS
	# shellcheck disable=SC2086
	read -r u0 s0 <<<"$(cpu_ticks_split $PROXY_PIDS)"
	# shellcheck disable=SC2086
	c0=$(cpu_ns $PROXY_PIDS)
	t0=$(date +%s%N)
	bytes=0
	for _ in $(seq "$n"); do
		got=$(taskset -c "$LOAD_CPU" curl -sS -o /dev/null -w '%{http_code} %{size_download}' \
			"http://127.0.0.1:$PROXY_PORT$path") || die "$part $name: curl failed"
		[ "${got% *}" = 200 ] || die "$part $name: status ${got% *}"
		bytes=$((bytes + ${got#* }))
	done
	t1=$(date +%s%N)
	# shellcheck disable=SC2086
	c1=$(cpu_ns $PROXY_PIDS)
	# shellcheck disable=SC2086
	read -r u1 s1 <<<"$(cpu_ticks_split $PROXY_PIDS)"
	RUN_HWM[$key]=$(status_kb "$PROXY_MEM_PID" VmHWM)
	stop_pid "$PROXY_MAIN"
	SIZE[$part|$name]=$((bytes / n))
	RUN_NS[$key]=$(((c1 - c0) / n))
	USER_TICKS[$part|$name]=$((${USER_TICKS[$part|$name]:-0} + u1 - u0))
	ALL_TICKS[$part|$name]=$((${ALL_TICKS[$part|$name]:-0} + u1 + s1 - u0 - s0))
	RUN_MBS[$key]=$(awk -v b="$(upstream_bytes "$part")" -v n="$n" -v t=$((t1 - t0)) \
		'BEGIN { printf "%.0f\n", b * n / 1048576 / (t / 1e9) }')
	log "  $part $name (round $3): $(awk -v ns="${RUN_NS[$key]}" 'BEGIN { printf "%.1f ms", ns / 1e6 }') CPU a request, ${RUN_MBS[$key]} MB/s, peak RSS $(fmt_mb "${RUN_HWM[$key]}")${verdict:+; $verdict}"
}

# ---------------------------------------------------------------------------------------------
# Run: per part, every row in turn, round after round.

STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for part in $PARTS; do
	log "$part"
	for round in $(seq "$ROUNDS"); do
		for name in $(rows_of "$part"); do
			measure "$part" "$name" "$round"
		done
	done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# Report

median_round() { # median_round PART NAME: the round with the median CPU (lower middle)
	local round
	for round in $(seq "$ROUNDS"); do
		printf '%s %s\n' "${RUN_NS[$1|$2|$round]}" "$round"
	done | sort -g | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2) { print $2 }'
}

# CPU of one run in the part's unit: µs per event (sse) or ms per MB of the upstream body.
per_unit() { # per_unit PART NS
	if [ "$1" = sse ]; then
		awk -v ns="$2" -v n="$EVENTS" 'BEGIN { printf "%.3f\n", ns / 1000 / n }'
	else
		awk -v ns="$2" -v b="$(upstream_bytes json)" 'BEGIN { printf "%.3f\n", ns / 1e6 / (b / 1048576) }'
	fi
}
per_mb() { awk -v ns="$2" -v b="$(upstream_bytes "$1")" 'BEGIN { printf "%.3f\n", ns / 1e6 / (b / 1048576) }'; }
fmt_val() { awk -v v="$1" 'BEGIN { printf (v < 10 ? "%.2f\n" : (v < 100 ? "%.1f\n" : "%.0f\n")), v }'; }

# The user-space share of the row's CPU over all its rounds, or "–" below 20 clock ticks.
user_share() { # user_share PART NAME
	awk -v u="${USER_TICKS[$1|$2]}" -v a="${ALL_TICKS[$1|$2]}" \
		'BEGIN { if (a < 20) print "–"; else printf "%.0f %%\n", u * 100 / a }'
}

row_line() { # row_line PART NAME
	local part=$1 name=$2 r lo hi hwm=0 round ns
	r=$(median_round "$part" "$name")
	ns=${RUN_NS[$part|$name|$r]}
	read -r lo hi <<<"$(for round in $(seq "$ROUNDS"); do per_unit "$part" "${RUN_NS[$part|$name|$round]}"; done |
		sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo, hi }')"
	for round in $(seq "$ROUNDS"); do
		[ "${RUN_HWM[$part|$name|$round]}" -gt "$hwm" ] && hwm=${RUN_HWM[$part|$name|$round]}
	done
	if [ "$part" = sse ]; then
		printf '| %s | %s | %s–%s | %s | %s | %s | %s | %s | %s |\n' "$name" \
			"$(fmt_val "$(per_unit sse "$ns")")" "$(fmt_val "$lo")" "$(fmt_val "$hi")" \
			"$(user_share "$part" "$name")" \
			"$(fmt_val "$(per_mb sse "$ns")")" "${RUN_MBS[$part|$name|$r]}" "$(fmt_mb "$hwm")" \
			"${SIZE[$part|$name]}" "${CHECK[$part|$name]}"
	else
		printf '| %s | %s | %s–%s | %s | %s | %s | %s | %s |\n' "$name" \
			"$(fmt_val "$(per_unit json "$ns")")" "$(fmt_val "$lo")" "$(fmt_val "$hi")" \
			"$(user_share "$part" "$name")" \
			"${RUN_MBS[$part|$name|$r]}" "$(fmt_mb "$hwm")" "${SIZE[$part|$name]}" "${CHECK[$part|$name]}"
	fi
}

# "A / B = ratio of the medians; per round: median (lowest-highest)", and the goal if any.
ratio_line() { # ratio_line PART A B [GOAL]
	local part=$1 a=$2 b=$3 goal=${4:-} ra rb med round verdict=''
	case " $(rows_of "$part") " in *" $a "*) ;; *) return 0 ;; esac
	case " $(rows_of "$part") " in *" $b "*) ;; *) return 0 ;; esac
	ra=${RUN_NS[$part|$a|$(median_round "$part" "$a")]}
	rb=${RUN_NS[$part|$b|$(median_round "$part" "$b")]}
	med=$(awk -v a="$ra" -v b="$rb" 'BEGIN { printf "%.2f", a / b }')
	if [ -n "$goal" ]; then
		verdict=$(awk -v r="$med" -v g="$goal" 'BEGIN { print (r <= g) ? "met" : "not met" }')
		verdict=" (goal ≤ $goal: $verdict)"
	fi
	case ${CHECK[$part|$a]}${CHECK[$part|$b]} in
	*"NOT REWRITTEN"*) verdict="$verdict (NOT REWRITTEN: the op row passed the body on untouched)" ;;
	esac
	printf -- '- %s / %s = %s%s' "$a" "$b" "$med" "$verdict"
	if [ "$ROUNDS" -gt 1 ]; then
		for round in $(seq "$ROUNDS"); do
			awk -v a="${RUN_NS[$part|$a|$round]}" -v b="${RUN_NS[$part|$b|$round]}" 'BEGIN { printf "%.4f\n", a / b }'
		done | sort -n | awk '{ r[NR] = $1 } END {
			printf "; per round: %.2f (%.2f–%.2f)", r[int((NR + 1) / 2)], r[1], r[NR] }'
	fi
	printf '\n'
}

report() {
	local part name kinds='' kind
	printf '# jsongate streaming benchmark\n\n'
	printf -- '- date: %s; working tree %s\n' "$STARTED" "$(source_commit)"
	printf -- '- machine: %s; CPU: %s (%s CPUs)\n' "$(uname -srm)" \
		"$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" "$(nproc --all 2>/dev/null || echo '?')"
	for part in $PARTS; do
		for name in $(rows_of "$part"); do
			kind=$(row_field "$part" "$name" 1)
			case " $kinds " in *" $kind "*) ;; *) kinds="$kinds $kind" ;; esac
		done
	done
	for kind in $kinds; do
		printf -- '- %s: %s\n' "${kind/_/ + }" "$(proxy_version "$kind")"
	done
	printf -- '- load average (1, 5, 15 min): %s before, %s after (other processes add noise)\n' "$LOAD_BEFORE" "$LOAD_AFTER"
	printf -- '- settings: ROUNDS=%s, REQUESTS=%s (SSE) and JSON_REQUESTS=%s measured requests per row and round, one at a time (curl); proxy alone on CPU %s, curl and the upstream nginx on CPU %s\n' \
		"$ROUNDS" "$REQUESTS" "$JSON_REQUESTS" "$PROXY_CPU" "$LOAD_CPU"
	printf -- '- each row: the round with the median CPU per request; CPU range: lowest and highest round; user: the user-space share of its CPU over all rounds (clock ticks); peak RSS: highest VmHWM of the rounds (nginx: the worker)\n'
	for part in $PARTS; do
		if [ "$part" = sse ]; then
			printf '\n## SSE: %s events of 1 KB (%s bytes) per request\n\n' "$EVENTS" "$(upstream_bytes sse)"
			printf '| proxy | CPU µs/event | range | user | CPU ms/MB | MB/s | peak RSS | bytes out | check |\n'
			printf '|---|---:|---:|---:|---:|---:|---:|---:|---|\n'
		else
			printf '\n## JSON: one body of %s bytes per request\n\n' "$(upstream_bytes json)"
			printf '| proxy | CPU ms/MB | range | user | MB/s | peak RSS | bytes out | check |\n'
			printf '|---|---:|---:|---:|---:|---:|---:|---|\n'
		fi
		for name in $(rows_of "$part"); do
			row_line "$part" "$name"
		done
		printf '\nCPU per request, ratio of the medians, and the median and range of the per-round ratios:\n\n'
		if [ "$part" = sse ]; then
			ratio_line sse jsongate-events jsongate-pass 1.3
			ratio_line sse jsongate-events nginx-lua-events 0.5
			ratio_line sse jsongate-pass nginx
			ratio_line sse nginx-lua-events nginx
		else
			ratio_line json jsongate-unwrap jsongate-pass
			ratio_line json jsongate-drop jsongate-pass
			ratio_line json jsongate-unwrap nginx-lua-unwrap
			ratio_line json jsongate-pass nginx
			ratio_line json nginx-lua-unwrap nginx
			case " $(rows_of json) " in *" nginx-lua-unwrap "*)
				printf '\nnginx-lua-unwrap buffers the whole body in Lua before it decodes it (its peak RSS).\n' ;;
			esac
		fi
	done
}

mkdir -p "$(dirname "$RESULTS")"
report | tee "$RESULTS"
log "written to $RESULTS"
