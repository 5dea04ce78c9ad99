# bench/lib.sh: helpers shared by bench/compare.sh and bench/rules.sh. Sourced, not run.
# The sourcing script sets PROG (its name, used in messages) first. run_bounded sets the
# global RUN_PID while its command runs, so that the script's cleanup can stop it.
# shellcheck shell=bash

PROG=${PROG:-$(basename "$0")}

die() {
	echo "$PROG: $*" >&2
	exit 1
}
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
# shq VALUE: VALUE quoted for a shell command line, only when it needs it.
shq() {
	if [[ $1 =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then
		printf '%s' "$1"
	else
		printf "'%s'" "${1//\'/\'\\\'\'}"
	fi
}

# A process is alive if /proc/<pid> exists and it is not a zombie.
alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st%% *}" != Z ]
}

# stop_proc PID NAME TIMEOUT: SIGTERM, then SIGKILL after TIMEOUT seconds. It polls /proc
# rather than using `wait`: bash 5.2 can hang in `wait PID` run from a trap when PID was
# reaped meanwhile (seen here after Ctrl-C). Exit statuses come from sluice's supervisor.
stop_proc() {
	local pid=$1 name=$2 limit=$3 i
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < limit * 10; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		echo "$PROG: $name (pid $pid) ignored SIGTERM for ${limit}s, killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
	fi
}

# run_bounded LIMIT LOGFILE COMMAND...: runs COMMAND under `timeout LIMIT` in the background
# and waits for it, so that Ctrl-C or SIGTERM interrupts the wait at once (cleanup then stops
# COMMAND). Returns COMMAND's exit status.
run_bounded() {
	local limit=$1 logf=$2 rc=0
	shift 2
	timeout --kill-after=10 "$limit" "$@" </dev/null >"$logf" 2>&1 &
	RUN_PID=$!
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	return "$rc"
}

# free_port: prints a TCP port nobody listens on (and not taken with take_port before).
PORTS_GIVEN=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 40000))
		[[ $PORTS_GIVEN == *" $p "* ]] && continue
		if command -v ss >/dev/null; then
			[ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ] && { echo "$p"; return 0; }
		elif ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}
# take_port VAR: sets VAR to a free port and remembers it, so that ports picked before their
# servers listen on them are never handed out twice.
take_port() {
	local p
	p=$(free_port) || exit 1
	PORTS_GIVEN+="$p "
	printf -v "$1" '%s' "$p"
}

# Clock ticks of CPU used by PID: utime + stime (fields 14, 15) plus cutime + cstime
# (16, 17: reaped children; always 0 for sluice, but counts a forking stand-in like socat).
cpu_ticks() {
	local st f
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) } # fields from 3 on; comm (field 2) may contain spaces
	read -ra f <<<"$st"
	echo $((f[11] + f[12] + f[13] + f[14]))
}

# median "v1 v2 ..." [printf format] -> formatted median, or "FAIL" when there are no values.
median() {
	local fmt=${2:-%.0f}
	# shellcheck disable=SC2086 # word splitting of the value list is intended
	printf '%s\n' $1 | sort -g | awk -v fmt="$fmt" 'NF { v[++n] = $1 }
		END {
			if (n == 0) { print "FAIL"; exit }
			m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			printf fmt "\n", m
		}'
}
ratio() { # a b -> a/b with 3 decimals
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "FAIL" || b == "FAIL" || b == 0) print "n/a"; else printf "%.3f\n", a / b }'
}
