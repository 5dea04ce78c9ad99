#!/usr/bin/env bash
# bench/probe.sh: the server-time probe's overhead, measured as seed 001 measured its eBPF
# agent: sysbench read-only, read-write and write-only at 1 to 64 threads through sluice in
# front of a private MariaDB, the probe switched off and on by each method (socket, dispatch)
# live (admin port) in alternated windows of one sysbench run per cell; per window the QPS and
# the CPU of mariadbd and of sluice; medians over the rounds. Needs root (the probe). See
# bench/README.md; run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/probe.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --workloads "W ..."     WORKLOADS   sysbench workloads [oltp_read_only oltp_read_write oltp_write_only]
  --threads "N ..."       THREADS     sysbench thread counts [1 4 16 64]
  --methods "M ..."       METHODS     the probe's methods measured against it off [socket dispatch]
  --rounds N              ROUNDS      rounds per cell, each one window off and one per method, the
                                      order rotated each round (A B C, B C A, …); medians are
                                      taken over the rounds [6]
  --window SECONDS        WINDOW      seconds per window, its first half second not measured [3]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
  --direct 0|1            DIRECT      1: sysbench connects to MariaDB itself, not through sluice
                                      (sluice only holds the probe): the server's and the
                                      client's share of the probe's cost alone; QPS from the
                                      server's Questions counter [0]
                          KEEP_TMP    1 = keep the temp dir (datadir, logs, sysbench outputs)

Defaults take about 15 minutes (3 workloads × 4 thread counts × 18 windows of 3 s, plus set-up).
Smoke test:  WORKLOADS=oltp_read_only THREADS=4 ROUNDS=1 bench/probe.sh
EOF
}

PROG=probe.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(WORKLOADS THREADS METHODS ROUNDS WINDOW TABLES TABLE_SIZE DIRECT OUT SLUICE_BIN)
FLAG_VARS=(WORKLOADS THREADS METHODS ROUNDS WINDOW TABLES TABLE_SIZE DIRECT OUT)
parse_options "$@"

WORKLOADS=${WORKLOADS:-oltp_read_only oltp_read_write oltp_write_only}
THREADS=${THREADS:-1 4 16 64}
METHODS=${METHODS:-socket dispatch}
ROUNDS=${ROUNDS:-6}
WINDOW=${WINDOW:-3}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}
DIRECT=${DIRECT:-0}
[[ $DIRECT == 0 || $DIRECT == 1 ]] || die "DIRECT must be 0 or 1, not '$DIRECT'"
for v in ROUNDS WINDOW TABLES TABLE_SIZE; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[ "$WINDOW" -ge 2 ] || die "WINDOW must be at least 2 seconds"
read -ra WORKLOAD_LIST <<<"$WORKLOADS"
read -ra THREAD_LIST <<<"$THREADS"
read -ra METHOD_LIST <<<"$METHODS"
for m in "${METHOD_LIST[@]}"; do [[ $m == socket || $m == dispatch ]] || die "METHODS: socket or dispatch, not '$m'"; done
[ ${#METHOD_LIST[@]} -gt 0 ] || die "METHODS must not be empty"
STATES=(off "${METHOD_LIST[@]}")
NSTATES=${#STATES[@]}
[ ${#WORKLOAD_LIST[@]} -gt 0 ] && [ ${#THREAD_LIST[@]} -gt 0 ] || die "WORKLOADS and THREADS must not be empty"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || die "the probe needs root (loading BPF programs, attaching uprobes)"

TOOL_PACKAGES="mariadb-server mariadb-client sysbench curl" require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench curl timeout awk
NCELLS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]}))
NRUNS=$NCELLS
log "$NCELLS cell(s), each one sysbench run of $((NSTATES * ROUNDS)) windows of ${WINDOW}s: the probe ${STATES[*]}"

pick_sluice

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
DB_PID="" DB_PORT="" SLUICE_PID="" SLUICE_PORT="" ADMIN_PORT="" HTTP_PORT="" RUN_PID=""
SOCK=$WORK/mysqld.sock
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	[ -z "$RUN_PID" ] || kill "$RUN_PID" 2>/dev/null
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
	fi
	[ -z "$SLUICE_PID" ] || stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	stop_mariadbs
	finish_work "$rc"
}
trap_cleanup

sql() { mariadb --no-defaults -S "$SOCK" -uroot -N -B "$@"; }
if [ "$DIRECT" = 1 ]; then
	questions() { sql -e "SHOW GLOBAL STATUS LIKE 'Questions'" | awk '{ print $2 }'; }
else
	questions() { admin "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='Questions'"; }
fi
# joined: "timed server_count" from the probe's JSON (statements timed, and given a server time).
joined() {
	curl -fsS "http://127.0.0.1:$HTTP_PORT/api/stats/probe" |
		awk '{ t = s = "" } match($0, /"timed":[0-9]+/) { t = substr($0, RSTART + 8, RLENGTH - 8) }
			match($0, /"server_count":[0-9]+/) { s = substr($0, RSTART + 15, RLENGTH - 15) } END { print t, s }'
}
# cpu_ns PID: nanoseconds on CPU of every thread of PID so far.
cpu_ns() { awk '{ s += $1 } END { printf "%.0f\n", s }' /proc/"$1"/task/*/schedstat 2>/dev/null; }

log "initialising a private MariaDB in $WORK"
start_mariadb "$WORK" --innodb-flush-log-at-trx-commit=2
DB_PID=$MARIADB_PID DB_PORT=$MARIADB_PORT
DB_VERSION=$(sql -e 'SELECT VERSION()')

sb_args() { # WORKLOAD THREADS SECONDS [PORT]
	SB=(sysbench "$1" --mysql-host=127.0.0.1 --mysql-port="${4:-$SLUICE_PORT}" --mysql-user=root --mysql-db=sbtest
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$2" --time="$3" --report-interval=0
		--percentile=95 --db-ps-mode=disable)
}

SLUICE_PORT=$(free_port) ADMIN_PORT=$(free_port) HTTP_PORT=$(free_port)
cat >"$WORK/sluice.toml" <<EOF
[proxy]
listen = ["127.0.0.1:$SLUICE_PORT"]
admin_listen = "127.0.0.1:$ADMIN_PORT"
http_listen = "127.0.0.1:$HTTP_PORT"
max_connections = 2000

[probe]
enabled = false

[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = $DB_PORT
max_connections = 1000

[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 0
EOF
spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --config "$WORK/sluice.toml"
SLUICE_PID=$SPAWNED_PID
await_answer sluice "$SLUICE_PID" "$SLUICE_PORT"

log "sysbench prepare: $TABLES tables × $TABLE_SIZE rows"
sb_args oltp_read_only 4 1 "$DB_PORT"
run_bounded 3600 "$WORK/prepare.log" "${SB[@]}" prepare || die "sysbench prepare failed (see $WORK/prepare.log)"

# probe off|socket|dispatch: switches the probe off, or on by that method, live and waits (up
# to 5 s) until it is detached from mariadbd, or attached by that method.
probe() {
	local v=false want='"attached":false' i
	case $1 in
	socket) v=true want='"state":"probe: attached to the sockets of pid' ;;
	dispatch) v=true want='"state":"probe: attached to _Z16dispatch_command' ;;
	esac
	if [ "$1" = off ]; then
		admin "UPDATE global_variables SET variable_value='false' WHERE variable_name='sluice-probe_enabled'; LOAD MYSQL VARIABLES TO RUNTIME"
	else
		admin "UPDATE global_variables SET variable_value='$1' WHERE variable_name='sluice-probe_method';
			UPDATE global_variables SET variable_value='true' WHERE variable_name='sluice-probe_enabled'; LOAD MYSQL VARIABLES TO RUNTIME"
	fi || die "cannot switch the probe $1 through the admin port"
	for ((i = 0; i < 50; i++)); do
		curl -fsS "http://127.0.0.1:$HTTP_PORT/api/stats/probe" | grep -qF "$want" && return 0
		sleep 0.1
	done
	die "the probe did not switch $1 within 5 s: $(grep 'probe:' "$WORK/sluice.log" | tail -n 1)"
}
log "checking that the probe attaches by each method"
ATTACHED=()
for m in "${METHOD_LIST[@]}"; do
	probe "$m"
	ATTACHED+=("$(grep -o 'probe: attached.*' "$WORK/sluice.log" | tail -n 1)")
	log "${ATTACHED[-1]}"
done
probe off

declare -A WQPS WDB WSL WSTATE WJOIN # key "workload|threads|window"
FAILURES=() NOTES=() RUN_NO=0

# measure WORKLOAD THREADS: one sysbench run of NSTATES × ROUNDS windows, the probe off and on
# by each method, the order rotated each round; per window sluice's QPS (its Questions counter)
# and the CPU time of mariadbd's and sluice's threads (/proc/PID/task/*/schedstat).
measure() {
	local wl=$1 thr=$2 nwin=$((NSTATES * ROUNDS)) w state q0 q1 d0 d1 s0 s1 t0 t1 j0 j1 logf rc=0
	local what="$wl, $thr threads, the probe switched every ${WINDOW}s"
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$wl-$thr.log
	probe off
	sb_args "$wl" "$thr" $((nwin * (WINDOW + 3) + 10)) "$([ "$DIRECT" = 1 ] && echo "$DB_PORT" || echo "$SLUICE_PORT")"
	timeout --kill-after=10 $((nwin * (WINDOW + 3) + 70)) "${SB[@]}" run </dev/null >"$logf" 2>&1 &
	RUN_PID=$!
	sleep 2 # connect and ramp up
	for ((w = 0; w < nwin; w++)); do
		state=${STATES[$(((w % NSTATES + w / NSTATES) % NSTATES))]}
		probe "$state"
		sleep 0.5
		alive "$RUN_PID" || break
		t0=$(date +%s.%N) q0=$(questions) d0=$(cpu_ns "$DB_PID") s0=$(cpu_ns "$SLUICE_PID") j0=$(joined)
		sleep "$((WINDOW - 1)).5"
		t1=$(date +%s.%N) q1=$(questions) d1=$(cpu_ns "$DB_PID") s1=$(cpu_ns "$SLUICE_PID") j1=$(joined)
		[[ $q0 =~ ^[0-9]+$ && $q1 =~ ^[0-9]+$ && $q1 -gt $q0 ]] || break
		WQPS[$wl|$thr|$w]=$(awk -v q=$((q1 - q0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", q / (b - a) }')
		# cores (CPU seconds per second) per 10,000 QPS
		WDB[$wl|$thr|$w]=$(awk -v d=$((d1 - d0)) -v q=$((q1 - q0)) 'BEGIN { printf "%.4f", d / 1e9 / q * 1e4 }')
		WSL[$wl|$thr|$w]=$(awk -v d=$((s1 - s0)) -v q=$((q1 - q0)) 'BEGIN { printf "%.4f", d / 1e9 / q * 1e4 }')
		WSTATE[$wl|$thr|$w]=$state
		# statements timed in the window, and of those given a server time
		WJOIN[$wl|$thr|$w]="$((${j1% *} - ${j0% *})) $((${j1#* } - ${j0#* }))"
		log "[$RUN_NO/$NRUNS] $wl, $thr threads, window $((w + 1))/$nwin, probe $state: ${WQPS[$wl|$thr|$w]} qps," \
			"mariadbd ${WDB[$wl|$thr|$w]}, sluice ${WSL[$wl|$thr|$w]} cores per 10k QPS"
	done
	kill "$RUN_PID" 2>/dev/null || true
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	if [ -z "${WQPS[$wl|$thr|$((nwin - 1))]:-}" ]; then
		FAILURES+=("$what: stopped before the last window (see $logf)")
	fi
	return 0
}

START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
for wl in "${WORKLOAD_LIST[@]}"; do
	for thr in "${THREAD_LIST[@]}"; do measure "$wl" "$thr"; done
done
probe "${METHOD_LIST[0]}"
SAMPLES=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/stats/probe")
ELAPSED=$((SECONDS - START_S))

diff3() { awk -v x="$1" -v y="$2" 'BEGIN { printf "%.4f", x - y }'; }
REPORT=$WORK/report.md
{
	echo
	echo "### server-time probe: off vs ${METHOD_LIST[*]}, $START_TS"
	echo
	machine_line "sysbench, mariadbd and sluice"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M, flush at commit 2); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV; $(IFS=';'; echo "${ATTACHED[*]}")"
	echo "- command: \`$INVOCATION\`"
	sb_args '<workload>' '<N>' '<seconds>'
	if [ "$DIRECT" = 1 ]; then
		echo "- **direct**: sysbench connects to MariaDB itself (\`--mysql-port=$DB_PORT\`); sluice, idle, only holds the probe; QPS = the server's Questions counter"
	fi
	echo "- each cell: one \`${SB[*]} run\` through sluice, the probe switched live (\`sluice-probe_method\`, \`sluice-probe_enabled\`, LOAD MYSQL VARIABLES TO RUNTIME, waited for until attached by that method or detached) every ${WINDOW}s through ${STATES[*]}, the order rotated each round, $ROUNDS rounds; per window QPS = sluice's Questions counter, CPU = the run time of every thread of mariadbd and of sluice (/proc/PID/task/*/schedstat) over the window, in cores per 10,000 QPS; \"paired\" = the median over the rounds of (on ÷ off) or (on − off), each round's off window against its window of that method; total ${ELAPSED}s"
	echo
	echo "| workload | threads | method | QPS off | QPS on | on/off (paired) | mariadbd cores/10k QPS off → on | mariadbd on − off (paired) | sluice cores/10k QPS off → on | sluice on − off (paired) | on windows: statements timed, with server time | per round: on/off |"
	echo "|---|---:|---|---:|---:|---:|---|---:|---|---:|---|---|"
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for m in "${METHOD_LIST[@]}"; do
				ons="" offs="" dons="" doffs="" sons="" soffs="" ratios="" ddiffs="" sdiffs="" pairs="" timed=0 served=0
				for ((p = 0; p < ROUNDS; p++)); do
					a="" b="" da="" db="" sa="" sb=""
					for ((w = NSTATES * p; w < NSTATES * (p + 1); w++)); do
						[ -n "${WQPS[$wl|$thr|$w]:-}" ] || continue
						if [ "${WSTATE[$wl|$thr|$w]}" = "$m" ]; then
							a=${WQPS[$wl|$thr|$w]} da=${WDB[$wl|$thr|$w]} sa=${WSL[$wl|$thr|$w]}
							j=${WJOIN[$wl|$thr|$w]}
							timed=$((timed + ${j% *})) served=$((served + ${j#* }))
						elif [ "${WSTATE[$wl|$thr|$w]}" = off ]; then
							b=${WQPS[$wl|$thr|$w]} db=${WDB[$wl|$thr|$w]} sb=${WSL[$wl|$thr|$w]}
						fi
					done
					if [ -z "$a" ] || [ -z "$b" ]; then continue; fi
					ons+="$a " offs+="$b " dons+="$da " doffs+="$db " sons+="$sa " soffs+="$sb "
					q=$(ratio "$a" "$b")
					ratios+="$q " ddiffs+="$(diff3 "$da" "$db") " sdiffs+="$(diff3 "$sa" "$sb") "
					pairs+="${pairs:+, }$q"
				done
				echo "| $wl | $thr | $m | $(median "$offs") | $(median "$ons") | $(median "$ratios" %.3f)" \
					"| $(median "$doffs" %.3f) → $(median "$dons" %.3f) | $(median "$ddiffs" %+.3f)" \
					"| $(median "$soffs" %.3f) → $(median "$sons" %.3f) | $(median "$sdiffs" %+.3f) | $timed, $served | $pairs |"
			done
		done
	done
	echo
	echo "The probe at the end (\`/api/stats/probe\`, its totals since sluice started): $(sed -E 's/"threads":\[[^]]*\]/"threads":[…]/' <<<"$SAMPLES")"
	report_problems
} >"$REPORT"
publish_report "$REPORT"
