#!/usr/bin/env bash
# bench/cache.sh: the result cache. sysbench oltp_point_select (text protocol) directly against
# a private MariaDB, through sluice without a cache rule, and through sluice with a rule giving
# the point select a cache_ttl (switched live on the admin port), alternated per round; sluice's
# CPU per query from /proc/<pid>/stat and the cache's hit ratio from its counters.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/cache.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [16 64]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000] (tables × size distinct statements)
  --cache-ttl MS          CACHE_TTL   the rule's cache_ttl [60000]
  --rounds N              ROUNDS      alternations per cell; medians are taken over them [2]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
                          KEEP_TMP    1 = keep the temp dir (datadir, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/cache.sh
EOF
}

PROG=cache.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(DURATION THREADS TABLES TABLE_SIZE CACHE_TTL ROUNDS OUT SLUICE_BIN)
FLAG_VARS=(DURATION THREADS TABLES TABLE_SIZE CACHE_TTL ROUNDS OUT)
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-16 64}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
CACHE_TTL=${CACHE_TTL:-60000}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}
for v in DURATION TABLES TABLE_SIZE CACHE_TTL ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
read -ra THREAD_LIST <<<"$THREADS"
[ ${#THREAD_LIST[@]} -gt 0 ] || die "THREADS is empty"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)
VARIANTS=(direct uncached cached)
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

# rule on|off: the point select's cache rule, switched live.
rule() {
	local rows="DELETE FROM mysql_query_rules;"
	[ "$1" = on ] && rows+=" INSERT INTO mysql_query_rules (rule_id, active, match_digest, cache_ttl, apply)
		VALUES (1, 1, '^SELECT c FROM sbtest', $CACHE_TTL, 1);"
	admin "$rows LOAD MYSQL QUERY RULES TO RUNTIME" || die "cannot switch the cache rule $1"
}

declare -A QPS P95 CPU HIT
FAILURES=() NOTES=() RUN_NO=0
measure() { # THREADS VARIANT ROUND
	local thr=$1 variant=$2 round=$3 port=$SLUICE_PORT t0="" t1="" g0 g1 ok0 ok1 rc=0 logf
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$thr-$variant-$round.log
	[ "$variant" = direct ] && port=$DB_PORT
	[ "$variant" = cached ] && rule on
	[ "$variant" = uncached ] && rule off
	g0=$(counter Query_Cache_count_GET) ok0=$(counter Query_Cache_count_GET_OK)
	[ "$variant" = direct ] || t0=$(cpu_ticks "$SLUICE_PID") || t0=""
	sb_args "$thr" "$port" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	if [ "$variant" != direct ]; then
		sleep 0.3
		t1=$(cpu_ticks "$SLUICE_PID") || t1=""
	fi
	g1=$(counter Query_Cache_count_GET) ok1=$(counter Query_Cache_count_GET_OK)
	sysbench_figures "$logf" "$rc" "$thr threads, $variant, round $round" p95 || return 0
	local key="$thr|$variant" hit=""
	QPS[$key]+="$SB_QPS " P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	if [ "$variant" = cached ] && [ "$g1" -gt "$g0" ]; then
		hit=$(awk -v h=$((ok1 - ok0)) -v g=$((g1 - g0)) 'BEGIN { printf "%.1f", 100 * h / g }')
		HIT[$key]+="$hit "
	fi
	log "[$RUN_NO/$NRUNS] $thr threads, $variant, round $round: $SB_QPS qps, p95 $SB_P95 ms$CPU_TXT${hit:+, hits $hit%}"
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
	echo "### result cache: cached vs uncached point selects, $START_TS"
	echo
	machine_line "sysbench, mariadbd and sluice"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV"
	echo "- command: \`$INVOCATION\`"
	sb_args '<N>' '<port>' "$DURATION"
	echo "- each run: \`${SB[*]} run\`; cached = a rule \`match_digest '^SELECT c FROM sbtest'\`, \`cache_ttl = $CACHE_TTL\` (switched live on the admin port, the cache kept warm across rounds); $ROUNDS round(s) alternated direct, uncached, cached; medians shown; total ${ELAPSED}s"
	echo
	echo "| threads | direct QPS | uncached QPS | cached QPS | cached/uncached | cached/direct | p95 ms direct / uncached / cached | sluice CPU µs/query uncached / cached | hit ratio |"
	echo "|---:|---:|---:|---:|---:|---:|---|---|---:|"
	for thr in "${THREAD_LIST[@]}"; do
		d=$(median "${QPS[$thr|direct]:-}" "%.0f") u=$(median "${QPS[$thr|uncached]:-}" "%.0f") c=$(median "${QPS[$thr|cached]:-}" "%.0f")
		echo "| $thr | $d | $u | $c | $(ratio "$c" "$u") | $(ratio "$c" "$d") |" \
			"$(median "${P95[$thr|direct]:-}" %.2f) / $(median "${P95[$thr|uncached]:-}" %.2f) / $(median "${P95[$thr|cached]:-}" %.2f) |" \
			"$(median "${CPU[$thr|uncached]:-}" %.1f) / $(median "${CPU[$thr|cached]:-}" %.1f) | $(median "${HIT[$thr|cached]:-}" "%.1f")% |"
	done
	report_problems
} >"$REPORT"
publish_report "$REPORT"
