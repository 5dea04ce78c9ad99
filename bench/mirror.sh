#!/usr/bin/env bash
# bench/mirror.sh: mirroring's cost to the client. sysbench oltp_point_select (text protocol)
# through sluice with no mirror rule, with a rule mirroring every point select to a second
# private MariaDB, and with the rule mirroring to a dead server (a port nothing listens on),
# switched live on the admin port and alternated per round; p95 latency and QPS of the
# client, and what the mirror did from sluice's Mirror_* counters.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/mirror.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [4 16]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --rounds N              ROUNDS      alternations per cell; medians are taken over them [2]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
                          KEEP_TMP    1 = keep the temp dir (datadirs, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/mirror.sh
EOF
}

PROG=mirror.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(DURATION THREADS TABLES TABLE_SIZE ROUNDS OUT SLUICE_BIN)
FLAG_VARS=(DURATION THREADS TABLES TABLE_SIZE ROUNDS OUT)
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-4 16}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}
for v in DURATION TABLES TABLE_SIZE ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
read -ra THREAD_LIST <<<"$THREADS"
[ ${#THREAD_LIST[@]} -gt 0 ] || die "THREADS is empty"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)
VARIANTS=(plain mirrored dead)
NRUNS=$((${#THREAD_LIST[@]} * ROUNDS * ${#VARIANTS[@]}))
log "${#THREAD_LIST[@]} thread count(s) × $ROUNDS round(s) × ${#VARIANTS[@]} variants = $NRUNS runs of ${DURATION}s"

pick_sluice

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
SLUICE_PID="" SLUICE_PORT="" ADMIN_PORT=""
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
	fi
	[ -z "$SLUICE_PID" ] || stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	stop_mariadbs
	finish_work "$rc"
}
trap_cleanup

sql() { mariadb --no-defaults -S "$WORK/$1/mysqld.sock" -uroot -N -B "${@:2}"; }

# start_db NAME: a private MariaDB in $WORK/NAME; sets DB_PORT.
start_db() {
	start_mariadb "$WORK/$1" --innodb-buffer-pool-size=128M
	DB_PORT=$MARIADB_PORT
}

log "initialising two private MariaDBs (primary, mirror) in $WORK"
start_db primary
PRIMARY_PORT=$DB_PORT
start_db mirror
MIRROR_PORT=$DB_PORT
DEAD_PORT=$(free_port)
DB_VERSION=$(sql primary -e 'SELECT VERSION()')

sb_args() { # THREADS PORT SECONDS
	SB=(sysbench oltp_point_select --mysql-host=127.0.0.1 --mysql-port="$2" --mysql-user=root --mysql-db=sbtest
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$1" --time="$3" --report-interval=0
		--percentile=95 --db-ps-mode=disable)
}
log "sysbench prepare on both: $TABLES tables × $TABLE_SIZE rows"
for port in "$PRIMARY_PORT" "$MIRROR_PORT"; do
	sb_args 4 "$port" 1
	run_bounded 3600 "$WORK/prepare-$port.log" "${SB[@]}" prepare || die "sysbench prepare failed (see $WORK/prepare-$port.log)"
done

start_quick_sluice "$PRIMARY_PORT"
admin "INSERT INTO mysql_servers (hostgroup_id, hostname, port) VALUES (1, '127.0.0.1', $MIRROR_PORT), (2, '127.0.0.1', $DEAD_PORT);
	LOAD MYSQL SERVERS TO RUNTIME" || die "cannot add the mirror hostgroups"

# rule none|1|2: the point select's mirror rule (to hostgroup 1, the mirror; 2, the dead one).
rule() {
	local rows="DELETE FROM mysql_query_rules;"
	[ "$1" = none ] || rows+=" INSERT INTO mysql_query_rules (rule_id, active, match_digest, mirror_hostgroup, apply)
		VALUES (1, 1, '^SELECT c FROM sbtest', $1, 1);"
	admin "$rows LOAD MYSQL QUERY RULES TO RUNTIME" || die "cannot switch the mirror rule to $1"
}

declare -A QPS P95 CPU MIR
FAILURES=() NOTES=() RUN_NO=0
measure() { # THREADS VARIANT ROUND
	local thr=$1 variant=$2 round=$3 t0="" t1="" rc=0 logf c0 c1 d0 d1 f0 f1 mir=""
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$thr-$variant-$round.log
	case $variant in plain) rule none ;; mirrored) rule 1 ;; dead) rule 2 ;; esac
	c0=$(counter Mirror_completed) d0=$(counter Mirror_dropped) f0=$(counter Mirror_failed)
	t0=$(cpu_ticks "$SLUICE_PID") || t0=""
	sb_args "$thr" "$SLUICE_PORT" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	sleep 0.3
	t1=$(cpu_ticks "$SLUICE_PID") || t1=""
	c1=$(counter Mirror_completed) d1=$(counter Mirror_dropped) f1=$(counter Mirror_failed)
	sysbench_figures "$logf" "$rc" "$thr threads, $variant, round $round" p95 || return 0
	local key="$thr|$variant"
	QPS[$key]+="$SB_QPS " P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	[ "$variant" = plain ] || mir="completed $((c1 - c0)), dropped $((d1 - d0)), failed $((f1 - f0))"
	[ -z "$mir" ] || MIR[$key]+="$mir; "
	log "[$RUN_NO/$NRUNS] $thr threads, $variant, round $round: $SB_QPS qps, p95 $SB_P95 ms$CPU_TXT${mir:+, mirror: $mir}"
}

START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
for thr in "${THREAD_LIST[@]}"; do
	for ((r = 1; r <= ROUNDS; r++)); do
		for v in "${VARIANTS[@]}"; do measure "$thr" "$v" "$r"; done
	done
done
ELAPSED=$((SECONDS - START_S))

REPORT=$WORK/report.md
{
	echo
	echo "### mirroring: the client's latency with and without a mirror, $START_TS"
	echo
	machine_line "sysbench, both mariadbd and sluice"
	echo "- mariadbd $DB_VERSION (two private instances, buffer pool 128M each); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV, \`[mirror]\` defaults (queue_size 1024, concurrency 8)"
	echo "- command: \`$INVOCATION\`"
	sb_args '<N>' '<port>' "$DURATION"
	echo "- each run: \`${SB[*]} run\` through sluice; plain = no rule; mirrored = a rule \`match_digest '^SELECT c FROM sbtest'\`, \`mirror_hostgroup = 1\` (the second MariaDB); dead = the same rule to hostgroup 2, a port nothing listens on; switched live on the admin port; $ROUNDS round(s) alternated plain, mirrored, dead; medians shown; total ${ELAPSED}s"
	echo
	echo "| threads | QPS plain / mirrored / dead | mirrored/plain | p95 ms plain / mirrored / dead | sluice CPU µs/query plain / mirrored / dead | mirror (per run: mirrored; dead) |"
	echo "|---:|---|---:|---|---|---|"
	for thr in "${THREAD_LIST[@]}"; do
		p=$(median "${QPS[$thr|plain]:-}" "%.0f") m=$(median "${QPS[$thr|mirrored]:-}" "%.0f") d=$(median "${QPS[$thr|dead]:-}" "%.0f")
		echo "| $thr | $p / $m / $d | $(ratio "$m" "$p") |" \
			"$(median "${P95[$thr|plain]:-}" %.2f) / $(median "${P95[$thr|mirrored]:-}" %.2f) / $(median "${P95[$thr|dead]:-}" %.2f) |" \
			"$(median "${CPU[$thr|plain]:-}" %.1f) / $(median "${CPU[$thr|mirrored]:-}" %.1f) / $(median "${CPU[$thr|dead]:-}" %.1f) |" \
			"${MIR[$thr|mirrored]:-} ${MIR[$thr|dead]:-} |"
	done
	report_problems
} >"$REPORT"
publish_report "$REPORT"
