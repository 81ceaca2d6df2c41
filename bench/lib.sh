# Helpers shared by the benchmark scripts: logging, processes started in the background and
# stopped at exit, ports, CPU time from /proc, formatting.
# Sourced, not run. Each script sets KEEP (1: keep RUNDIR) before it starts anything.
# shellcheck shell=bash disable=SC2153

log() { printf '%s\n' "$*" >&2; }
die() {
	printf 'bench: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------------------------
# Processes, ports, /proc

RUNDIR=
PIDS=()

cleanup() {
	local pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ -n "$RUNDIR" ]; then
		if [ "$KEEP" = 1 ]; then
			log "kept $RUNDIR"
		else
			rm -rf "$RUNDIR"
		fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Start a command in the background, remember its pid for cleanup; the pid is in BG_PID.
BG_PID=
start_bg() {
	local logfile=$1
	shift
	"$@" >"$logfile" 2>&1 </dev/null &
	BG_PID=$!
	PIDS+=("$BG_PID")
}

# Stop one process started with start_bg (and, for nginx, its workers with it), with SIGTERM
# or the signal given (KILL: at once, as a crash would).
stop_pid() {
	local pid=$1 sig=${2:-TERM}
	# stderr: bash would report a job ended by a signal ("Killed").
	{
		kill -"$sig" "$pid" || true
		for _ in $(seq 100); do
			kill -0 "$pid" || break
			sleep 0.1
		done
		kill -KILL "$pid" || true
		wait "$pid" || true
	} 2>/dev/null
	forget_pid "$pid"
}

# Wait for a process started with start_bg to end by itself; its exit status is returned.
wait_pid() {
	local rc=0
	wait "$1" || rc=$?
	forget_pid "$1"
	return "$rc"
}

forget_pid() {
	local keep=() p
	for p in "${PIDS[@]}"; do
		[ "$p" = "$1" ] || keep+=("$p")
	done
	PIDS=("${keep[@]}")
}

port_open() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A free port on 127.0.0.1 outside the usual ephemeral range (so 10k client sockets never
# collide with it).
USED_PORTS=" "
pick_port() {
	local port
	for _ in $(seq 200); do
		port=$((20000 + (RANDOM % 12000)))
		case "$USED_PORTS" in *" $port "*) continue ;; esac
		if ! port_open "$port"; then
			USED_PORTS="$USED_PORTS$port "
			printf '%s\n' "$port"
			return 0
		fi
	done
	die "no free port found on 127.0.0.1"
}

# Wait until PORT accepts connections while PID lives; LOGFILE is shown on failure.
wait_port() {
	local port=$1 pid=$2 logfile=$3
	for _ in $(seq 100); do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "--- $logfile"
			cat "$logfile" >&2 || true
			die "process $pid exited before listening on port $port"
		fi
		port_open "$port" && return 0
		sleep 0.1
	done
	die "nothing listens on port $port after 10 s (see $logfile)"
}

children_of() {
	local parent=$1 f stat rest fields
	if cat /proc/"$parent"/task/*/children 2>/dev/null | grep -q .; then
		cat /proc/"$parent"/task/*/children | tr ' ' '\n' | grep .
		return 0
	fi
	for f in /proc/[0-9]*/stat; do
		stat=$(cat "$f" 2>/dev/null) || continue
		rest=${stat##*) }
		read -ra fields <<<"$rest"
		[ "${fields[1]}" = "$parent" ] && basename "$(dirname "$f")"
	done
	return 0
}

CLK_TCK=$(getconf CLK_TCK)

# "utime stime", in clock ticks, of the given processes (all their threads).
cpu_ticks_split() {
	local user=0 system=0 pid stat rest fields
	for pid in "$@"; do
		stat=$(cat /proc/"$pid"/stat) || die "process $pid is gone"
		rest=${stat##*) }
		read -ra fields <<<"$rest"
		user=$((user + fields[11]))
		system=$((system + fields[12]))
	done
	printf '%s %s\n' "$user" "$system"
}

# CPU clock ticks spread over requests, in µs per request with three decimals.
ticks_per_request_us() { # ticks_per_request_us TICKS REQUESTS
	awk -v t="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN { printf "%.3f\n", t / hz * 1e6 / n }'
}

# utime + stime, in clock ticks, of the given processes (all their threads).
cpu_ticks() {
	local user system
	read -r user system <<<"$(cpu_ticks_split "$@")"
	printf '%s\n' $((user + system))
}

# A field of /proc/PID/status in kB (VmRSS, VmHWM).
status_kb() {
	awk -v k="$2:" '$1 == k { print $2 }' /proc/"$1"/status
}

# VmRSS summed over processes (nginx: master and worker), in kB.
rss_kb_sum() {
	local pid total=0 kb
	for pid in "$@"; do
		kb=$(status_kb "$pid" VmRSS)
		total=$((total + ${kb:-0}))
	done
	printf '%s\n' "$total"
}

is_uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

# wrk's latency (e.g. 312.00us, 1.23ms, 2.01s) in microseconds.
to_us() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") f = 1; else if (u == "ms") f = 1000; else if (u == "s") f = 1000000
		else if (u == "m") f = 60000000; else f = -1
		if (f < 0) print "?"; else printf "%.0f\n", n * f
	}'
}

fmt_us() { # microseconds -> "312 µs" / "1.23 ms"
	awk -v v="$1" 'BEGIN {
		if (v == "?" || v == "") print "?"
		else if (v < 1000) printf "%.0f µs\n", v
		else if (v < 1000000) printf "%.2f ms\n", v / 1000
		else printf "%.2f s\n", v / 1000000
	}'
}
fmt_cpu() { awk -v v="$1" 'BEGIN { printf (v < 100 ? "%.1f\n" : "%.0f\n"), v }'; }
fmt_mb() { awk -v v="$1" 'BEGIN { printf "%.1f MB\n", v / 1024 }'; }

# The commit of the working tree (marked when src/ has changes), or nothing outside git.
source_commit() {
	local commit
	command -v git >/dev/null || return 0
	[ "$(git -C "$ROOT_DIR" rev-parse --show-toplevel 2>/dev/null)" = "$ROOT_DIR" ] || return 0
	commit=$(git -C "$ROOT_DIR" rev-parse --short HEAD 2>/dev/null) || return 0
	git -C "$ROOT_DIR" diff --quiet HEAD -- src 2>/dev/null || commit="$commit (src modified)"
	printf '%s\n' "$commit"
}
