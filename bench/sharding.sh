#!/usr/bin/env bash
# bench/sharding.sh: sharding's cost (issue 17). Two private MariaDB servers; sysbench's tables
# once unsharded on server A (`sbtest`) and once split over 4 shards (`sbshard`: ds_0, ds_1 on
# A, ds_2, ds_3 on B, `range` on id, loaded by `sysbench prepare` through sluice). sysbench
# runs alternate: direct to A, HAProxy (mode tcp) to A, sluice to the unsharded tables (the
# fast path with a shard map configured), sluice to the sharded ones. QPS, p95 and the proxy's
# CPU per query. Then a cross-shard `ORDER BY k LIMIT 10 OFFSET m` (deep pagination): latency
# through sluice vs the same statement direct on the unsharded table, and sluice's peak RSS.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/sharding.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [4 16]
  --workloads "W ..."     WORKLOADS   sysbench workloads [oltp_point_select oltp_read_only oltp_read_write]
  --db-ps-mode MODE       DB_PS_MODE  sysbench --db-ps-mode: disable (text) or auto (prepared) [disable]
  --tables N              TABLES      sysbench tables [2]
  --table-size N          TABLE_SIZE  rows per table [100000]
  --offset N              OFFSET      the deep-pagination offset [TABLE_SIZE / 2]
  --rounds N              ROUNDS      alternations per cell; medians are taken over them [2]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
                          HAPROXY_BIN HAProxy [haproxy]; none found: its runs are left out
                          KEEP_TMP    1 = keep the temp dir (datadirs, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 TABLE_SIZE=10000 bench/sharding.sh
EOF
}

PROG=sharding.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(DURATION THREADS WORKLOADS DB_PS_MODE TABLES TABLE_SIZE OFFSET ROUNDS OUT SLUICE_BIN HAPROXY_BIN)
FLAG_VARS=(DURATION THREADS WORKLOADS DB_PS_MODE TABLES TABLE_SIZE OFFSET ROUNDS OUT)
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-4 16}
WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only oltp_read_write}
DB_PS_MODE=${DB_PS_MODE:-disable}
TABLES=${TABLES:-2}
TABLE_SIZE=${TABLE_SIZE:-100000}
OFFSET=${OFFSET:-$((TABLE_SIZE / 2))}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
HAPROXY_BIN=${HAPROXY_BIN:-haproxy}
KEEP_TMP=${KEEP_TMP:-0}
for v in DURATION TABLES TABLE_SIZE OFFSET ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[ "$TABLE_SIZE" -ge 8 ] || die "TABLE_SIZE must be at least 8 (4 shards of ranges)"
[[ $DB_PS_MODE =~ ^(disable|auto)$ ]] || die "DB_PS_MODE must be disable or auto, not '$DB_PS_MODE'"
read -ra THREAD_LIST <<<"$THREADS"
read -ra WORKLOAD_LIST <<<"$WORKLOADS"
[ ${#THREAD_LIST[@]} -gt 0 ] || die "THREADS is empty"
[ ${#WORKLOAD_LIST[@]} -gt 0 ] || die "WORKLOADS is empty"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

require_tools mariadbd mariadb-install-db mariadb mariadb-admin mariadb-dump sysbench getconf timeout awk md5sum
CLK_TCK=$(getconf CLK_TCK)
VARIANTS=(direct)
command -v "$HAPROXY_BIN" >/dev/null && VARIANTS+=(haproxy) || log "no $HAPROXY_BIN: its runs are left out"
VARIANTS+=(unsharded sharded)
NRUNS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]} * ROUNDS * ${#VARIANTS[@]}))
log "${#WORKLOAD_LIST[@]} workload(s) × ${#THREAD_LIST[@]} thread count(s) × $ROUNDS round(s) × ${#VARIANTS[@]} variants = $NRUNS runs of ${DURATION}s"

pick_sluice

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
A_PORT="" B_PORT="" SLUICE_PID="" SLUICE_PORT="" HAPROXY_PID="" HAPROXY_PORT=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
	fi
	[ -z "$SLUICE_PID" ] || stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	[ -z "$HAPROXY_PID" ] || stop_supervised "$HAPROXY_PID" "$WORK/haproxy" haproxy
	stop_mariadbs
	finish_work "$rc"
}
trap_cleanup

sql_on() { # NAME SQL
	mariadb --no-defaults -S "$WORK/$1/mysqld.sock" -uroot -N -B -e "$2"
}

log "starting two private MariaDB servers in $WORK"
start_mariadb "$WORK/a"
A_PORT=$MARIADB_PORT
start_mariadb "$WORK/b"
B_PORT=$MARIADB_PORT
sql_on a "CREATE DATABASE sbshard; CREATE DATABASE ds_0; CREATE DATABASE ds_1;"
sql_on b "CREATE DATABASE sbshard; CREATE DATABASE ds_2; CREATE DATABASE ds_3;"
DB_VERSION=$(sql_on a 'SELECT VERSION()')

# The shard map: each sysbench table over 4 shards by id ranges of equal size.
take_port SLUICE_PORT
take_port ADMIN_PORT
Q=$((TABLE_SIZE / 4))
{
	cat <<-TOML
		[proxy]
		listen = ["127.0.0.1:$SLUICE_PORT"]
		[[mysql_servers]]
		hostgroup_id = 1
		hostname = "127.0.0.1"
		port = $A_PORT
		[[mysql_servers]]
		hostgroup_id = 2
		hostname = "127.0.0.1"
		port = $B_PORT
		[[mysql_users]]
		username = "root"
		password = ""
		default_hostgroup = 1
		[monitor]
		username = "root"
		password = ""
		[[shard_databases]]
		name = "sbshard"
		xa_log = "$WORK/xa-sbshard.log"
		nodes = [{ hostgroup = 1, database = "ds_0" }, { hostgroup = 1, database = "ds_1" },
		         { hostgroup = 2, database = "ds_2" }, { hostgroup = 2, database = "ds_3" }]
	TOML
	for ((t = 1; t <= TABLES; t++)); do
		printf '[[sharded_tables]]\ndatabase = "sbshard"\ntable = "sbtest%d"\nsharding_column = "id"\nalgorithm = "range"\nboundaries = [%d, %d, %d]\n' \
			"$t" $((Q + 1)) $((2 * Q + 1)) $((3 * Q + 1))
	done
} >"$WORK/sluice.toml"

spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --config "$WORK/sluice.toml" \
	--admin-listen "127.0.0.1:$ADMIN_PORT" --http-listen ''
SLUICE_PID=$SPAWNED_PID
await_answer sluice "$SLUICE_PID" "$SLUICE_PORT"

if [[ " ${VARIANTS[*]} " == *" haproxy "* ]]; then
	start_haproxy_tcp "$A_PORT" "$(nproc)"
fi

sb_args() { # WORKLOAD THREADS PORT DB SECONDS
	SB=(sysbench "$1" --mysql-host=127.0.0.1 --mysql-port="$3" --mysql-user=root --mysql-db="$4"
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$2" --time="$5" --report-interval=0
		--percentile=95 --db-ps-mode="$DB_PS_MODE" --auto_inc=off)
}
log "sysbench prepare: $TABLES tables × $TABLE_SIZE rows through sluice into sbshard, then the same rows copied into sbtest on A"
sb_args oltp_read_write 4 "$SLUICE_PORT" sbshard 1
run_bounded 3600 "$WORK/prepare-sharded.log" "${SB[@]}" prepare ||
	die "sysbench prepare through sluice failed (see $WORK/prepare-sharded.log): $(grep -m1 -E 'FATAL|ERROR' "$WORK/prepare-sharded.log")"
for ((t = 1; t <= TABLES; t++)); do
	sql_on a "CREATE TABLE sbtest.sbtest$t LIKE ds_0.sbtest$t"
	for s in 0 1 2 3; do
		n=a
		((s < 2)) || n=b
		[ "$(sql_on "$n" "SELECT COUNT(*) FROM ds_$s.sbtest$t")" -gt 0 ] || die "shard ds_$s got no rows of sbtest$t"
		mariadb-dump --no-defaults -S "$WORK/$n/mysqld.sock" -uroot --no-create-info --skip-triggers "ds_$s" "sbtest$t" |
			mariadb --no-defaults -S "$WORK/a/mysqld.sock" -uroot sbtest || die "copying ds_$s.sbtest$t into sbtest failed"
	done
done
[ "$(sql_on a "SELECT COUNT(*) FROM sbtest.sbtest1")" = "$TABLE_SIZE" ] || die "sbtest.sbtest1 does not have $TABLE_SIZE rows"

FAILURES=() NOTES=() RUN_NO=0

# Deep pagination, before the write workloads change the two copies apart: each shard sends
# OFFSET + 10 rows, merged as they stream.
DEEP="SELECT id, k FROM sbtest1 ORDER BY k, id LIMIT 10 OFFSET $OFFSET"
deep() { # PORT DB -> seconds, result checksum
	local t0 t1 out
	t0=$(date +%s.%N)
	out=$(mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$1" -uroot -D"$2" -N -B -e "$DEEP") || die "$DEEP failed on port $1"
	t1=$(date +%s.%N)
	echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $(printf '%s' "$out" | md5sum | cut -c1-12)"
}
HWM0=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SLUICE_PID/status")
DEEP_DIRECT="" DEEP_SHARDED=""
for ((r = 1; r <= 3; r++)); do
	read -r td sd <<<"$(deep "$A_PORT" sbtest)"
	read -r ts ss <<<"$(deep "$SLUICE_PORT" sbshard)"
	[ "$sd" = "$ss" ] || FAILURES+=("deep pagination: the sharded result differs from the unsharded one")
	DEEP_DIRECT+="$td " DEEP_SHARDED+="$ts "
	log "deep pagination, round $r: direct ${td}s, sharded ${ts}s"
done
HWM1=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SLUICE_PID/status")

declare -A QPS P95 CPU
measure() { # WORKLOAD THREADS VARIANT ROUND
	local wl=$1 thr=$2 variant=$3 round=$4 port db=sbtest pid="" t0="" t1="" rc=0 logf
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$wl-$thr-$variant-$round.log
	case $variant in
	direct) port=$A_PORT ;;
	haproxy) port=$HAPROXY_PORT pid=$HAPROXY_PID ;;
	unsharded) port=$SLUICE_PORT pid=$SLUICE_PID ;;
	sharded) port=$SLUICE_PORT pid=$SLUICE_PID db=sbshard ;;
	esac
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid") || t0=""
	sb_args "$wl" "$thr" "$port" "$db" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	if [ -n "$pid" ]; then
		sleep 0.3
		t1=$(cpu_ticks "$pid") || t1=""
	fi
	sysbench_figures "$logf" "$rc" "$wl, $thr threads, $variant, round $round" p95 || return 0
	local key="$wl|$thr|$variant"
	QPS[$key]+="$SB_QPS " P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q" "$variant"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	log "[$RUN_NO/$NRUNS] $wl, $thr threads, $variant, round $round: $SB_QPS qps, p95 $SB_P95 ms$CPU_TXT"
}

START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
for wl in "${WORKLOAD_LIST[@]}"; do
	for thr in "${THREAD_LIST[@]}"; do
		for ((r = 1; r <= ROUNDS; r++)); do
			for v in "${VARIANTS[@]}"; do measure "$wl" "$thr" "$v" "$r"; done
		done
	done
done

ELAPSED=$((SECONDS - START_S))

REPORT=$WORK/report.md
{
	echo
	echo "### sharding: 4 shards vs one server, $START_TS"
	echo
	machine_line "sysbench, both mariadbd, HAProxy and sluice"
	echo "- mariadbd $DB_VERSION (two private instances, buffer pool 256M each); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV"
	echo "- command: \`$INVOCATION\`"
	sb_args '<workload>' '<N>' '<port>' '<db>' "$DURATION"
	echo "- each run: \`${SB[*]} run\`; direct and HAProxy (mode tcp, nbthread $(nproc)) reach server A's unsharded \`sbtest\`; sluice \`unsharded\` the same tables through sluice (a shard map configured, these tables not in it); sluice \`sharded\` the \`sbshard\` tables, each over 4 shards by \`range\` on id (ds_0, ds_1 on A, ds_2, ds_3 on B; loaded by \`sysbench prepare\` through sluice, and copied into \`sbtest\` from there, so both hold the same rows); $ROUNDS round(s) alternated ${VARIANTS[*]}; medians shown; proxy CPU = utime+stime from /proc/PID/stat ÷ the run's queries; total ${ELAPSED}s"
	echo
	echo "| workload | threads | direct QPS | $(for v in "${VARIANTS[@]:1}"; do printf '%s QPS (× direct) | ' "$v"; done)p95 ms $(
		IFS=/
		echo "${VARIANTS[*]}"
	) | proxy CPU µs/query $(
		IFS=/
		echo "${VARIANTS[*]:1}"
	) |"
	printf '|---|---:|---:|'
	for _ in "${VARIANTS[@]:1}"; do printf -- '---:|'; done
	echo '---|---|'
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			d=$(median "${QPS[$wl|$thr|direct]:-}" "%.0f")
			line="| $wl | $thr | $d |"
			for v in "${VARIANTS[@]:1}"; do
				q=$(median "${QPS[$wl|$thr|$v]:-}" "%.0f")
				line+=" $q ($(ratio "$q" "$d")) |"
			done
			p="" c=""
			for v in "${VARIANTS[@]}"; do p+="$(median "${P95[$wl|$thr|$v]:-}" %.2f) / "; done
			for v in "${VARIANTS[@]:1}"; do c+="$(median "${CPU[$wl|$thr|$v]:-}" %.1f) / "; done
			echo "$line ${p% / } | ${c% / } |"
		done
	done
	echo
	echo "Deep pagination, \`$DEEP\` ($TABLE_SIZE rows; each shard sends up to $((OFFSET + 10)) rows), 3 runs, medians: direct on the unsharded table $(median "$DEEP_DIRECT" %.3f) s, through sluice over 4 shards $(median "$DEEP_SHARDED" %.3f) s (same rows); sluice's peak RSS (VmHWM) $((HWM0 / 1024)) MiB before these queries, $((HWM1 / 1024)) MiB after."
	report_problems
} >"$REPORT"
publish_report "$REPORT"
