#!/usr/bin/env bash
# bench/split.sh: the read/write split end to end. A private MariaDB primary and two GTID
# replicas; sysbench directly against the primary vs through sluice's split (reads to the
# replicas), alternated A B A B, with sluice's CPU per query from /proc/<pid>/stat; then the
# cost of causal reads: a read right after a write (bench/causal_read.lua) through sluice with
# causal_reads off, local and global, switched live on the admin port.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/split.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [16 64]
  --workloads "W ..."     WORKLOADS   sysbench workloads [oltp_read_only oltp_read_write]
  --skip-trx on|off       SKIP_TRX    sysbench --skip_trx: on runs every statement in
                                      autocommit, so reads split; off wraps each event in
                                      BEGIN … COMMIT, which the split keeps on the primary [on]
  --causal-threads N      CAUSAL_THREADS  sysbench threads of the causal-read runs [4]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --rounds N              ROUNDS      A/B alternations per cell; medians are taken over them [2]
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  the sluice binary; when unset, `cargo build --release
                                      -p sluice` is run first
                          KEEP_TMP    1 = keep the temp dir (datadirs, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/split.sh
EOF
}

PROG=split.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OPT_VARS=(DURATION THREADS WORKLOADS SKIP_TRX CAUSAL_THREADS TABLES TABLE_SIZE ROUNDS OUT SLUICE_BIN)
FLAG_VARS=(DURATION THREADS WORKLOADS SKIP_TRX CAUSAL_THREADS TABLES TABLE_SIZE ROUNDS OUT)
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-16 64}
WORKLOADS=${WORKLOADS:-oltp_read_only oltp_read_write}
SKIP_TRX=${SKIP_TRX:-on}
CAUSAL_THREADS=${CAUSAL_THREADS:-4}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}
for v in DURATION CAUSAL_THREADS TABLES TABLE_SIZE ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
case "$SKIP_TRX" in on | off) ;; *) die "SKIP_TRX must be on or off" ;; esac
read -ra THREAD_LIST <<<"$THREADS"
read -ra WORKLOAD_LIST <<<"$WORKLOADS"
[ ${#THREAD_LIST[@]} -gt 0 ] && [ ${#WORKLOAD_LIST[@]} -gt 0 ] || die "THREADS and WORKLOADS must not be empty"
for t in "${THREAD_LIST[@]}"; do
	[[ $t =~ ^[1-9][0-9]*$ ]] || die "THREADS must be positive whole numbers, not '$t'"
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)
CAUSAL_MODES=(off local global)
NRUNS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]} * ROUNDS * 2 + ROUNDS * ${#CAUSAL_MODES[@]}))
e=$((NRUNS * (DURATION + 1) + 30 + TABLES * TABLE_SIZE / 20000))
log "$NRUNS runs of ${DURATION}s; estimated run time ~$((e / 60)) min $((e % 60)) s (without the build)"

pick_sluice

# --- processes and teardown -----------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-split-bench.XXXXXX)
SERVERS=(primary replica1 replica2)
declare -A DB_PID DB_PORT
SLUICE_PID="" SLUICE_PORT="" ADMIN_PORT="" RUN_PID=""

cleanup() {
	local rc=$? s
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc" && [ -s "$WORK/sluice.log" ]; then
		echo "--- last lines of sluice's log:" >&2
		tail -n 20 "$WORK/sluice.log" >&2
	fi
	[ -z "$RUN_PID" ] || stop_proc "$RUN_PID" sysbench 15
	stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	for s in "${SERVERS[@]}"; do
		[ -z "${DB_PID[$s]:-}" ] || stop_proc "${DB_PID[$s]}" "mariadbd $s" 60
	done
	finish_work "$rc"
}
trap_cleanup

db() {
	local name=$1
	shift
	timeout 60 mariadb --no-defaults -S "$WORK/$name.sock" -uroot -N -B "$@"
}

# start_server NAME SERVER_ID [mariadbd args]: a private MariaDB with a binary log and GTIDs
# (as testkit's replication members), root@127.0.0.1 without a password, 127.0.0.1 only.
start_server() {
	local name=$1 id=$2 i
	shift 2
	mariadb-install-db --no-defaults --datadir="$WORK/$name" --auth-root-authentication-method=normal \
		--skip-test-db --user=root >"$WORK/$name-install.log" 2>&1 ||
		{ tail -n 20 "$WORK/$name-install.log" >&2; die "mariadb-install-db failed for $name"; }
	take_port "DB_PORT[$name]"
	mariadbd --no-defaults --datadir="$WORK/$name" --bind-address=127.0.0.1 --port="${DB_PORT[$name]}" \
		--socket="$WORK/$name.sock" --pid-file="$WORK/$name.pid" --log-error="$WORK/$name.err" --user=root \
		--skip-name-resolve --max-connections=1000 --innodb-buffer-pool-size=128M \
		--log-bin=mariadb-bin --log-slave-updates --binlog-format=ROW --gtid-strict-mode=1 \
		--server-id="$id" "$@" </dev/null >/dev/null 2>&1 &
	DB_PID[$name]=$!
	for ((i = 0; i < 600; i++)); do
		alive "${DB_PID[$name]}" || die "mariadbd $name exited during start-up (see $WORK/$name.err)"
		mariadb-admin --no-defaults -S "$WORK/$name.sock" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	((i < 600)) || die "mariadbd $name not ready after 60 s"
	# Not in the binary log: each server creates its own login (gtid_strict_mode).
	db "$name" -e "SET sql_log_bin = 0; CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;"
	log "mariadbd $name on 127.0.0.1:${DB_PORT[$name]} (pid ${DB_PID[$name]})"
}

# sync_replicas: waits until both replicas applied what the primary has written.
sync_replicas() {
	local pos r
	pos=$(db primary -e "SELECT @@gtid_binlog_pos")
	for r in replica1 replica2; do
		[ "$(db "$r" -e "SELECT MASTER_GTID_WAIT('$pos', 300)")" = 0 ] || die "$r did not reach $pos within 300 s"
	done
}

start_sluice() {
	take_port SLUICE_PORT
	take_port ADMIN_PORT
	cat >"$WORK/sluice.toml" <<TOML
[proxy]
listen = ["127.0.0.1:$SLUICE_PORT"]
admin_listen = "127.0.0.1:$ADMIN_PORT"
http_listen = ""

[[mysql_servers]]
hostgroup_id = 10
hostname = "127.0.0.1"
port = ${DB_PORT[primary]}
max_connections = 500

[[mysql_servers]]
hostgroup_id = 20
hostname = "127.0.0.1"
port = ${DB_PORT[replica1]}
max_connections = 500

[[mysql_servers]]
hostgroup_id = 20
hostname = "127.0.0.1"
port = ${DB_PORT[replica2]}
max_connections = 500

[[mysql_replication_hostgroups]]
writer_hostgroup = 10
reader_hostgroup = 20
causal_reads = "local"

[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 10
TOML
	spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --config "$WORK/sluice.toml"
	SLUICE_PID=$SPAWNED_PID
	await_answer sluice "$SLUICE_PID" "$SLUICE_PORT"
	log "sluice on 127.0.0.1:$SLUICE_PORT (pid $SLUICE_PID), admin port $ADMIN_PORT"
}

admin() { timeout 30 mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$ADMIN_PORT" -uadmin -padmin -N -B -e "$*"; }

# causal MODE: causal_reads switched live on the admin port.
causal() {
	admin "UPDATE mysql_replication_hostgroups SET causal_reads = '$1'; LOAD MYSQL SERVERS TO RUNTIME" ||
		die "cannot set causal_reads = $1 on the admin port"
}

# primary_queries: client statements sluice forwarded to the primary so far (its pool's Queries).
primary_queries() { admin "SELECT COALESCE(SUM(Queries), 0) FROM stats_mysql_connection_pool WHERE srv_port = ${DB_PORT[primary]}"; }
all_queries() { admin "SELECT COALESCE(SUM(Queries), 0) FROM stats_mysql_connection_pool"; }

# sb_args WORKLOAD THREADS PORT: the sysbench command line into SB (without the command).
sb_args() {
	SB=(sysbench "$1" --mysql-host=127.0.0.1 --mysql-port="$3" --mysql-user=root --mysql-db=sbtest
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$2" --time="$DURATION" --report-interval=0
		--percentile=95 --db-ps-mode=disable)
	[[ $1 == oltp_* ]] && SB+=(--skip_trx="$SKIP_TRX")
	# Without transactions, oltp_read_write's DELETE and re-INSERT of a row race between
	# threads (duplicate key, deadlock; direct as through sluice): counted as ignored errors.
	[[ $1 == oltp_read_write && $SKIP_TRX == on ]] && SB+=(--mysql-ignore-errors=1062,1213)
	return 0
}

# --- results --------------------------------------------------------------------------
declare -A QPS P95 AVG CPU PRIMARY_SHARE # key "workload|threads|variant" -> values, one per good run
FAILURES=()
NOTES=()
RUN_NO=0

# measure WORKLOAD THREADS VARIANT ROUND: one run, direct to the primary or through sluice.
measure() {
	local wl=$1 thr=$2 variant=$3 round=$4 port t0="" t1="" p0="" a0="" logf rc=0 what
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-${wl##*/}-$thr-$variant-$round.log
	what="${wl##*/}, $thr threads, $variant, round $round"
	if [ "$variant" = direct ]; then
		port=${DB_PORT[primary]}
	else
		port=$SLUICE_PORT
		t0=$(cpu_ticks "$SLUICE_PID") || t0=""
		p0=$(primary_queries) a0=$(all_queries)
	fi
	sb_args "$wl" "$thr" "$port"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	if [ "$variant" != direct ]; then
		sleep 0.3
		alive "$SLUICE_PID" || die "sluice died during $what (see $WORK/sluice.log)"
		t1=$(cpu_ticks "$SLUICE_PID") || t1=""
	fi
	sysbench_figures "$logf" "$rc" "$what" p95 || return 0
	local key="${wl##*/}|$thr|$variant" share=""
	QPS[$key]+="$SB_QPS "
	P95[$key]+="$SB_P95 "
	AVG[$key]+="$(awk '/^ *avg:/ { print $2; exit }' "$logf") "
	if [ "$variant" != direct ]; then
		cpu_per_query "$t0" "$t1" "$SB_Q"
		[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
		share=$(awk -v p=$(($(primary_queries) - p0)) -v a=$(($(all_queries) - a0)) 'BEGIN { if (a > 0) printf "%.1f", 100 * p / a }')
		[ -z "$share" ] || PRIMARY_SHARE[$key]+="$share "
	fi
	log "[$RUN_NO/$NRUNS] $what: $SB_QPS qps, p95 $SB_P95 ms, $SB_Q queries${CPU_TXT:-}${share:+, ${share}% of the statements on the primary}"
	CPU_TXT=""
}

# --- run ------------------------------------------------------------------------------
START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
start_server primary 1
start_server replica1 2 --read-only=1
start_server replica2 3 --read-only=1
for r in replica1 replica2; do
	db "$r" -e "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${DB_PORT[primary]}, MASTER_USER='root',
		MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
done
db primary -e "CREATE DATABASE sbtest"
DB_VERSION=$(db primary -e 'SELECT VERSION()')
log "sysbench prepare on the primary: $TABLES tables × $TABLE_SIZE rows"
sb_args oltp_read_only 4 "${DB_PORT[primary]}"
run_bounded 3600 "$WORK/prepare.log" "${SB[@]}" prepare || { tail -n 20 "$WORK/prepare.log" >&2; die "sysbench prepare failed"; }
sync_replicas
start_sluice

for wl in "${WORKLOAD_LIST[@]}"; do
	for thr in "${THREAD_LIST[@]}"; do
		for ((r = 1; r <= ROUNDS; r++)); do
			# alternate which goes first, so neither always follows the other
			if ((r % 2)); then order=(direct sluice); else order=(sluice direct); fi
			for v in "${order[@]}"; do
				# No run inherits the replicas' lag from the one before (causal reads would wait).
				sync_replicas
				measure "$wl" "$thr" "$v" "$r"
			done
		done
	done
done

LUA=$ROOT/bench/causal_read.lua
for ((r = 1; r <= ROUNDS; r++)); do
	# rotate the order of the modes from round to round
	for ((m = 0; m < ${#CAUSAL_MODES[@]}; m++)); do
		mode=${CAUSAL_MODES[$(((m + r - 1) % ${#CAUSAL_MODES[@]}))]}
		causal "$mode"
		sync_replicas
		measure "$LUA" "$CAUSAL_THREADS" "causal-$mode" "$r"
	done
done
ELAPSED=$((SECONDS - START_S))

# --- report ---------------------------------------------------------------------------
CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
{
	echo
	echo "### read/write split vs direct to the primary, $START_TS"
	echo
	echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-$(uname -m)}, Linux $(uname -r); sysbench, three mariadbd and sluice share these CPUs"
	echo "- mariadbd $DB_VERSION: a primary and two GTID replicas (private instances, buffer pool 128M each, binlog ROW); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV; \`[[mysql_replication_hostgroups]]\` writer 10 (the primary), reader 20 (both replicas)"
	echo "- command: \`$INVOCATION\`"
	sb_args '<workload>' '<N>' '<port>'
	echo "- each run: \`${SB[*]} run\`; direct = to the primary; $ROUNDS round(s) alternated, medians shown; replicas synced before each run; causal_reads = local (the default) in the split runs;" \
		"sluice CPU = utime+stime of its process (/proc/PID/stat) per query; primary share = the primary's" \
		"part of the client statements sluice forwarded (stats_mysql_connection_pool.Queries); total ${ELAPSED}s"
	echo
	echo "| workload | threads | direct QPS | split QPS | split/direct | direct p95 ms | split p95 ms | sluice CPU µs/query | primary share % |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			d=$(median "${QPS[$wl|$thr|direct]:-}")
			s=$(median "${QPS[$wl|$thr|sluice]:-}")
			echo "| $wl | $thr | $d | $s | $(ratio "$s" "$d") | $(median "${P95[$wl|$thr|direct]:-}" %.2f)" \
				"| $(median "${P95[$wl|$thr|sluice]:-}" %.2f) | $(median "${CPU[$wl|$thr|sluice]:-}" %.1f) | $(median "${PRIMARY_SHARE[$wl|$thr|sluice]:-}" %.1f) |"
		done
	done
	echo
	echo "Causal reads: \`bench/causal_read.lua\`, $CAUSAL_THREADS threads, each event an autocommit UPDATE of a random row and then a"
	echo "SELECT of it, through sluice with causal_reads switched live (order rotated per round). Extra = the event's mean latency"
	echo "minus causal_reads = off's: what causal reads add to a read right after a write."
	echo
	echo "| causal_reads | events/s | mean ms | p95 ms | extra mean ms | sluice CPU µs/query | primary share % |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	off=$(median "${AVG[causal_read.lua|$CAUSAL_THREADS|causal-off]:-}" %.3f)
	for mode in "${CAUSAL_MODES[@]}"; do
		key="causal_read.lua|$CAUSAL_THREADS|causal-$mode"
		mean=$(median "${AVG[$key]:-}" %.3f)
		extra=$(awk -v a="$mean" -v b="$off" 'BEGIN { if (a == "FAIL" || b == "FAIL") print "n/a"; else printf "%.3f", a - b }')
		# sysbench's qps counts both statements of an event
		events=$(awk -v q="$(median "${QPS[$key]:-}" %.1f)" 'BEGIN { if (q == "FAIL") print "FAIL"; else printf "%.0f", q / 2 }')
		echo "| $mode | $events | $mean | $(median "${P95[$key]:-}" %.2f) | $extra | $(median "${CPU[$key]:-}" %.1f) | $(median "${PRIMARY_SHARE[$key]:-}" %.1f) |"
	done
	report_problems
} >"$WORK/report.md"
publish_report "$WORK/report.md"
