#!/usr/bin/env bash
# bench/firewall.sh: the firewall's cost. sysbench oltp_point_select (text protocol) through
# sluice with the firewall off, with the allowlist on (root PROTECTING, its digests learned from
# stats_mysql_query_digest first), and with the SQL-injection heuristic alone,
# switched live on the admin port and alternated per round; sluice's CPU per query from
# /proc/<pid>/stat. See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/firewall.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [16 64]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --rounds N              ROUNDS      alternations per cell; medians are taken over them [2]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
                          KEEP_TMP    1 = keep the temp dir (datadir, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/firewall.sh
EOF
}

PROG=firewall.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(DURATION THREADS TABLES TABLE_SIZE ROUNDS OUT SLUICE_BIN)
FLAG_VARS=(DURATION THREADS TABLES TABLE_SIZE ROUNDS OUT)
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-16 64}
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
VARIANTS=(off protecting sqli)
NRUNS=$((${#THREAD_LIST[@]} * ROUNDS * ${#VARIANTS[@]}))
log "${#THREAD_LIST[@]} thread count(s) × $ROUNDS round(s) × ${#VARIANTS[@]} variants = $NRUNS runs of ${DURATION}s"

pick_sluice

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
DB_PORT="" SLUICE_PID="" SLUICE_PORT="" ADMIN_PORT=""
SOCK=$WORK/mysqld.sock
cleanup() {
	local rc=$?
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

sql() { mariadb --no-defaults -S "$SOCK" -uroot -N -B "$@"; }

log "initialising a private MariaDB in $WORK"
start_mariadb "$WORK"
DB_PORT=$MARIADB_PORT
DB_VERSION=$(sql -e 'SELECT VERSION()')

sb_args() { # THREADS PORT SECONDS
	SB=(sysbench oltp_point_select --mysql-host=127.0.0.1 --mysql-port="$2" --mysql-user=root --mysql-db=sbtest
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$1" --time="$3" --report-interval=0
		--percentile=95 --db-ps-mode=disable)
}
log "sysbench prepare: $TABLES tables × $TABLE_SIZE rows"
sb_args 4 "$DB_PORT" 1
run_bounded 3600 "$WORK/prepare.log" "${SB[@]}" prepare || die "sysbench prepare failed (see $WORK/prepare.log)"

start_quick_sluice "$DB_PORT"

# firewall off|protecting|sqli: switched live (variables only; the allowlist stays loaded).
firewall() {
	local enabled=1 sqli=0
	[ "$1" = off ] && enabled=0
	# The heuristic alone: with the allowlist on, a listed statement is not scanned.
	[ "$1" = sqli ] && enabled=0 sqli=1
	admin "SET mysql-firewall_whitelist_enabled = $enabled; SET mysql-automatic_detect_sqli = $sqli;
		LOAD MYSQL VARIABLES TO RUNTIME" || die "cannot switch the firewall to $1"
}

log "learning: root DETECTING for a short run, its digests into the allowlist, then PROTECTING"
admin "INSERT INTO mysql_firewall_whitelist_users (username, client_address, mode) VALUES ('root', '', 'DETECTING');
	LOAD MYSQL FIREWALL TO RUNTIME" || die "cannot add root to the firewall"
firewall protecting
sb_args 4 "$SLUICE_PORT" 3
run_bounded 60 "$WORK/learn.log" "${SB[@]}" run || die "the learning run failed (see $WORK/learn.log)"
admin "INSERT OR IGNORE INTO mysql_firewall_whitelist_rules (active, username, client_address, schemaname, flagIN, digest, comment)
	SELECT DISTINCT 1, username, '', schemaname, 0, digest, '' FROM stats_mysql_query_digest WHERE username = 'root' AND errors < count_star;
	UPDATE mysql_firewall_whitelist_users SET mode = 'PROTECTING'; LOAD MYSQL FIREWALL TO RUNTIME" || die "learning failed"
LEARNED=$(admin "SELECT COUNT(*) FROM runtime_mysql_firewall_whitelist_rules")
log "learned $LEARNED digests"

declare -A QPS P95 CPU
FAILURES=() NOTES=() RUN_NO=0
measure() { # THREADS VARIANT ROUND
	local thr=$1 variant=$2 round=$3 t0="" t1="" b0 b1 rc=0 logf
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$thr-$variant-$round.log
	firewall "$variant"
	b0=$(($(counter Firewall_blocked) + $(counter Firewall_sqli_blocked)))
	t0=$(cpu_ticks "$SLUICE_PID") || t0=""
	sb_args "$thr" "$SLUICE_PORT" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	sleep 0.3
	t1=$(cpu_ticks "$SLUICE_PID") || t1=""
	b1=$(($(counter Firewall_blocked) + $(counter Firewall_sqli_blocked)))
	[ "$b1" = "$b0" ] || NOTES+=("$thr threads, $variant, round $round: the firewall refused $((b1 - b0)) statements")
	sysbench_figures "$logf" "$rc" "$thr threads, $variant, round $round" p95 || return 0
	local key="$thr|$variant"
	QPS[$key]+="$SB_QPS " P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	log "[$RUN_NO/$NRUNS] $thr threads, $variant, round $round: $SB_QPS qps, p95 $SB_P95 ms$CPU_TXT"
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
	echo "### firewall: off vs allowlist (PROTECTING) vs SQL-injection heuristic, point selects, $START_TS"
	echo
	machine_line "sysbench, mariadbd and sluice"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV"
	echo "- command: \`$INVOCATION\`"
	sb_args '<N>' '<port>' "$DURATION"
	echo "- each run: \`${SB[*]} run\` through sluice; root's $LEARNED digests learned from a 3 s DETECTING run; off = \`mysql-firewall_whitelist_enabled = 0\`, protecting = 1 (root PROTECTING: a digest lookup per statement), sqli = the heuristic alone (\`mysql-firewall_whitelist_enabled = 0\`, \`mysql-automatic_detect_sqli = 1\`: a lexer pass per statement; with the allowlist on, listed statements are not scanned) (switched live on the admin port); $ROUNDS round(s) alternated; medians shown; total ${ELAPSED}s"
	echo
	echo "| threads | off QPS | protecting QPS | sqli QPS | protecting/off | sqli/off | p95 ms off / protecting / sqli | sluice CPU µs/query off / protecting / sqli |"
	echo "|---:|---:|---:|---:|---:|---:|---|---|"
	for thr in "${THREAD_LIST[@]}"; do
		o=$(median "${QPS[$thr|off]:-}" "%.0f") p=$(median "${QPS[$thr|protecting]:-}" "%.0f") q=$(median "${QPS[$thr|sqli]:-}" "%.0f")
		echo "| $thr | $o | $p | $q | $(ratio "$p" "$o") | $(ratio "$q" "$o") |" \
			"$(median "${P95[$thr|off]:-}" %.2f) / $(median "${P95[$thr|protecting]:-}" %.2f) / $(median "${P95[$thr|sqli]:-}" %.2f) |" \
			"$(median "${CPU[$thr|off]:-}" %.1f) / $(median "${CPU[$thr|protecting]:-}" %.1f) / $(median "${CPU[$thr|sqli]:-}" %.1f) |"
	done
	report_problems
} >"$REPORT"
publish_report "$REPORT"
