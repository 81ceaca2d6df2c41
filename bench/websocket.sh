#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# WebSocket benchmark: jsongate, nginx and HAProxy in front of the same echo upstream, side by
# side: CPU per message under an echo load, and memory per idle tunnel. See bench/README.md.
# Installs nothing; names the missing tools.
set -euo pipefail

usage() {
	cat <<'EOF2'
usage: bench/websocket.sh [-h]

For each proxy in turn (pinned alone on PROXY_CPU; the load and the echo upstream on
LOAD_CPU), in front of the same echo upstream (bench/ws_load.py server):

  load  CONNECTIONS tunnels, each sending a SIZE-byte binary frame and reading its echo, over
        and over, for DURATION s (after WARMUP s): the proxy's CPU (utime + stime) per message
        echoed, and messages per second; ROUNDS rounds taken in turns, the median shown
  idle  IDLE tunnels opened and left idle: the proxy's RSS grown, per tunnel

Environment:
  PROXIES="jsongate nginx haproxy"   SIZES="1024 65536"   CONNECTIONS=16
  DURATION=10 WARMUP=2 ROUNDS=3 IDLE=1000
  JSONGATE=build/src/jsongate  NGINX=nginx  HAPROXY=haproxy
  PROXY_CPU=0 LOAD_CPU=1
  RESULTS=bench/results/websocket.md   where the report is written
  KEEP=1                      keep the temporary directory
EOF2
}

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
	usage
	exit 0
fi
[ $# -eq 0 ] || { usage >&2; exit 2; }

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT_DIR=$(dirname "$BENCH_DIR")
# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"

PROXIES=${PROXIES:-jsongate nginx haproxy}
SIZES=${SIZES:-1024 65536}
CONNECTIONS=${CONNECTIONS:-16}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
IDLE=${IDLE:-1000}
JSONGATE=${JSONGATE:-$ROOT_DIR/build/src/jsongate}
NGINX=${NGINX:-nginx}
HAPROXY=${HAPROXY:-haproxy}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RESULTS=${RESULTS:-$BENCH_DIR/results/websocket.md}
KEEP=${KEEP:-0}
MAXCONN=$((IDLE * 2 + 256))

missing=""
for p in $PROXIES; do
	case $p in
	jsongate) [ -x "$JSONGATE" ] || missing="$missing jsongate ($JSONGATE: build it or set JSONGATE)" ;;
	nginx) command -v "$NGINX" >/dev/null || missing="$missing nginx (Debian: nginx-light)" ;;
	haproxy) command -v "$HAPROXY" >/dev/null || missing="$missing haproxy (Debian: haproxy)" ;;
	*) die "unknown proxy $p" ;;
	esac
done
command -v taskset >/dev/null || missing="$missing taskset (Debian: util-linux)"
[ -z "$missing" ] || die "missing:$missing"

RUNDIR=$(mktemp -d /tmp/jsongate-bench-ws.XXXXXX)
UPSTREAM_PORT=$(pick_port)
start_bg "$RUNDIR/upstream.out" taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/ws_load.py" server "$UPSTREAM_PORT"
wait_port "$UPSTREAM_PORT" "$BG_PID" "$RUNDIR/upstream.out"

render() { # render TEMPLATE OUT NAME PORT
	sed -e "s|@RUNDIR@|$RUNDIR|g" -e "s|@NAME@|$3|g" -e "s|@PORT@|$4|g" \
		-e "s|@UPSTREAM_PORT@|$UPSTREAM_PORT|g" -e "s|@MAX_CONNECTIONS@|$MAXCONN|g" \
		-e "s|@NOFILE@|$((MAXCONN * 2))|g" "$BENCH_DIR/conf/$1" >"$2"
}

PORT='' CPU_PIDS='' MEM_PIDS='' MAIN=''
proxy_start() {
	local name=$1 conf pid workers
	PORT=$(pick_port)
	case $name in
	jsongate)
		conf=$RUNDIR/jsongate.yaml
		render ws-jsongate.yaml.in "$conf" "$name" "$PORT"
		start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$JSONGATE" -f -c "$conf"
		pid=$BG_PID workers=$BG_PID
		;;
	nginx)
		conf=$RUNDIR/nginx.conf
		render ws-nginx.conf.in "$conf" "$name" "$PORT"
		start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$NGINX" -p "$RUNDIR/" -c "$conf"
		pid=$BG_PID
		wait_port "$PORT" "$pid" "$RUNDIR/$name.out"
		for _ in $(seq 50); do
			workers=$(children_of "$pid")
			[ -n "$workers" ] && break
			sleep 0.1
		done
		;;
	haproxy)
		conf=$RUNDIR/haproxy.cfg
		render ws-haproxy.cfg.in "$conf" "$name" "$PORT"
		start_bg "$RUNDIR/$name.out" taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$conf"
		pid=$BG_PID workers=$BG_PID
		;;
	esac
	wait_port "$PORT" "$pid" "$RUNDIR/$name.out"
	MAIN=$pid
	CPU_PIDS="$pid"
	[ "$workers" = "$pid" ] || CPU_PIDS="$pid $workers"
	MEM_PIDS=$workers
}

version_of() {
	case $1 in
	jsongate) "$JSONGATE" -V 2>&1 | head -n 1 ;;
	nginx) "$NGINX" -v 2>&1 | sed 's|^nginx version: ||' ;;
	haproxy) "$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $1, $2, $3 }' ;;
	esac
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# CPU µs per message, of it user space, and messages per second of one measured run:
# "cpu_us user_us msgs_per_s".
measure() { # measure SIZE
	local msgs user0 sys0 user1 sys1
	taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/ws_load.py" load "$PORT" "$CONNECTIONS" "$1" "$WARMUP" >/dev/null
	# shellcheck disable=SC2086
	read -r user0 sys0 <<<"$(cpu_ticks_split $CPU_PIDS)"
	msgs=$(taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/ws_load.py" load "$PORT" "$CONNECTIONS" "$1" "$DURATION")
	# shellcheck disable=SC2086
	read -r user1 sys1 <<<"$(cpu_ticks_split $CPU_PIDS)"
	awk -v t=$((user1 + sys1 - user0 - sys0)) -v u=$((user1 - user0)) -v hz="$CLK_TCK" \
		-v n="$msgs" -v d="$DURATION" \
		'BEGIN { printf "%.2f %.2f %.0f\n", t / hz * 1e6 / n, u / hz * 1e6 / n, n / d }'
}

declare -A CPU USER RATE MEM
for round in $(seq "$ROUNDS"); do
	for p in $PROXIES; do
		proxy_start "$p"
		for size in $SIZES; do
			read -r cpu user rate <<<"$(measure "$size")"
			log "round $round $p $size: $cpu µs/msg ($user user), $rate msg/s"
			CPU[$p,$size]="${CPU[$p,$size]:-} $cpu"
			USER[$p,$size]="${USER[$p,$size]:-} $user"
			RATE[$p,$size]="${RATE[$p,$size]:-} $rate"
		done
		if [ "$round" = 1 ]; then
			# shellcheck disable=SC2086
			base=$(rss_kb_sum $MEM_PIDS)
			start_bg "$RUNDIR/idle.out" taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/ws_load.py" idle "$PORT" "$IDLE"
			idler=$BG_PID
			for _ in $(seq 600); do
				grep -q ready "$RUNDIR/idle.out" && break
				kill -0 "$idler" 2>/dev/null || die "$p: idle tunnels: $(cat "$RUNDIR/idle.out")"
				sleep 0.1
			done
			grep -q ready "$RUNDIR/idle.out" || die "$p: $IDLE idle tunnels not open after 60 s"
			sleep 1
			# shellcheck disable=SC2086
			full=$(rss_kb_sum $MEM_PIDS)
			MEM[$p]=$(awk -v a="$base" -v b="$full" -v n="$IDLE" 'BEGIN { printf "%.1f", (b - a) / n }')
			MEM[$p,base]=$base
			stop_pid "$idler"
			log "$p: $IDLE idle tunnels: RSS $base kB -> $full kB"
		fi
		stop_pid "$MAIN"
	done
done

mkdir -p "$(dirname "$RESULTS")"
{
	printf '# WebSocket tunnels: jsongate, nginx, HAProxy\n\n'
	printf '%s UTC, commit %s; %s; %s connections, %s s measured after %s s warm-up, %s rounds\n' \
		"$(date -u '+%Y-%m-%d %H:%M')" "$(source_commit)" "$(uname -sr)" "$CONNECTIONS" \
		"$DURATION" "$WARMUP" "$ROUNDS"
	printf '(median shown); proxy alone on CPU %s, load and echo upstream on CPU %s.\n\n' \
		"$PROXY_CPU" "$LOAD_CPU"
	for p in $PROXIES; do printf -- '- %s: %s\n' "$p" "$(version_of "$p")"; done
	printf '\n| size | proxy | CPU µs/msg | of it user | msg/s | RSS idle | KB per idle tunnel (%s) |\n' "$IDLE"
	printf '|---|---|---:|---:|---:|---:|---:|\n'
	for size in $SIZES; do
		for p in $PROXIES; do
			printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$p" \
				"$(tr ' ' '\n' <<<"${CPU[$p,$size]}" | grep . | median)" \
				"$(tr ' ' '\n' <<<"${USER[$p,$size]}" | grep . | median)" \
				"$(tr ' ' '\n' <<<"${RATE[$p,$size]}" | grep . | median)" \
				"$(fmt_mb "${MEM[$p,base]}")" "${MEM[$p]}"
		done
	done
	# shellcheck disable=SC2086
	printf '\n| CPU per message | %s |\n|---|%s\n' "$(printf '%s\n' $SIZES | paste -sd '|' | sed 's/|/ | /g')" \
		"$(for _ in $SIZES; do printf -- '---:|'; done)"
	for p in $PROXIES; do
		[ "$p" = jsongate ] && continue
		printf '| jsongate / %s |' "$p"
		for size in $SIZES; do
			a=$(tr ' ' '\n' <<<"${CPU[jsongate,$size]:-}" | grep . | median)
			b=$(tr ' ' '\n' <<<"${CPU[$p,$size]}" | grep . | median)
			printf ' %s |' "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
		done
		printf '\n'
	done
	# The rounds ran in turns, so round k of two proxies saw much the same machine.
	if [ "$ROUNDS" -gt 1 ] && [ -n "${CPU[jsongate,${SIZES%% *}]:-}" ]; then
		printf '\nThe same ratio per round (round k of jsongate over round k of the other), median\n'
		printf '(lowest–highest):\n\n'
		for p in $PROXIES; do
			[ "$p" = jsongate ] && continue
			for size in $SIZES; do
				paste <(tr ' ' '\n' <<<"${CPU[jsongate,$size]}" | grep .) \
					<(tr ' ' '\n' <<<"${CPU[$p,$size]}" | grep .) |
					awk '{ printf "%.4f\n", $1 / $2 }' | sort -g |
					awk -v p="$p" -v s="$size" '{ r[NR] = $1 } END {
						printf "- %s: jsongate / %s per round: %.2f (%.2f–%.2f)\n", s, p,
						    r[int((NR + 1) / 2)], r[1], r[NR] }'
			done
		done
	fi
} >"$RESULTS"
cat "$RESULTS"
