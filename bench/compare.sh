#!/usr/bin/env bash
# bench/compare.sh: sysbench against a private MariaDB, directly and through sluice,
# alternated A B A B, with sluice's own CPU per query read from /proc/<pid>/stat.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/compare.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --mode ab|runtime|stats MODE        ab: direct vs sluice (default).
                                      runtime: sluice --runtime steal vs --runtime per-core,
                                      with a direct run as reference in each round.
                                      stats: sluice with digest statistics on vs off (switched
                                      live through the admin port), a direct run in each round.
  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [ab: "1 4 16 64", runtime: "16 64"]
  --workloads "W ..."     WORKLOADS   sysbench workloads
                                      [ab: "oltp_point_select oltp_read_only", runtime: "oltp_point_select"]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --rounds N              ROUNDS      A/B alternations per cell; medians are taken over them [2]
  --sluice-args "ARGS"    SLUICE_ARGS extra arguments for sluice, e.g. "--workers 2"
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
  --db-ps-mode MODE       DB_PS_MODE  sysbench --db-ps-mode: disable (text protocol) or auto [disable]
  --warmup SECONDS        WARMUP      direct point-select warm-up before measuring, 0 = none [5]
                          SLUICE_BIN  command to run instead of target/release/sluice (same flags;
                                      it must exec so that its pid is the proxy's). When unset,
                                      `cargo build --release -p sluice` is run first.
                          KEEP_TMP    1 = keep the temp dir (datadir, logs, sysbench outputs)

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/compare.sh
EOF
}

PROG=compare.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # die log shq alive stop_proc run_bounded free_port cpu_ticks median ratio parse_options pick_sluice sysbench_figures cpu_per_query report_problems publish_report

# --- options --------------------------------------------------------------------------
OPT_VARS=(MODE DURATION THREADS WORKLOADS TABLES TABLE_SIZE ROUNDS SLUICE_ARGS OUT DB_PS_MODE WARMUP SLUICE_BIN)
FLAG_VARS=(MODE DURATION THREADS WORKLOADS TABLES TABLE_SIZE ROUNDS SLUICE_ARGS OUT DB_PS_MODE WARMUP) # settable as --name too
parse_options "$@"

MODE=${MODE:-ab}
case "$MODE" in
ab)
	THREADS=${THREADS:-1 4 16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only}
	;;
runtime)
	THREADS=${THREADS:-16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select}
	;;
stats)
	THREADS=${THREADS:-16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only}
	;;
*) die "MODE must be ab, runtime or stats, not '$MODE'" ;;
esac
DURATION=${DURATION:-20}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
ROUNDS=${ROUNDS:-2}
SLUICE_ARGS=${SLUICE_ARGS:-}
OUT=${OUT:-}
DB_PS_MODE=${DB_PS_MODE:-disable}
WARMUP=${WARMUP:-5}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}

for v in DURATION TABLES TABLE_SIZE ROUNDS WARMUP; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
if [ "$DURATION" -eq 0 ] || [ "$ROUNDS" -eq 0 ] || [ "$TABLES" -eq 0 ] || [ "$TABLE_SIZE" -eq 0 ]; then
	die "DURATION, ROUNDS, TABLES and TABLE_SIZE must be > 0"
fi
read -ra THREAD_LIST <<<"$THREADS"
read -ra WORKLOAD_LIST <<<"$WORKLOADS"
read -ra SLUICE_EXTRA <<<"$SLUICE_ARGS"
[ ${#THREAD_LIST[@]} -gt 0 ] || die "THREADS is empty"
[ ${#WORKLOAD_LIST[@]} -gt 0 ] || die "WORKLOADS is empty"
for t in "${THREAD_LIST[@]}"; do
	[[ $t =~ ^[1-9][0-9]*$ ]] || die "THREADS must be positive whole numbers, not '$t'"
done
case "$DB_PS_MODE" in disable | auto) ;; *) die "DB_PS_MODE must be disable or auto" ;; esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- tools ----------------------------------------------------------------------------
PATH=$PATH:/usr/sbin:/sbin
for tool in mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk; do
	command -v "$tool" >/dev/null ||
		die "$tool not found (Debian: apt-get install -y mariadb-server mariadb-client sysbench)"
done
CLK_TCK=$(getconf CLK_TCK)

# --- estimate -------------------------------------------------------------------------
case "$MODE" in
ab) VARIANTS=(direct sluice) ;;
runtime) VARIANTS=(direct steal per-core) ;;
stats) VARIANTS=(direct stats-on stats-off) ;;
esac
NRUNS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]} * ROUNDS * ${#VARIANTS[@]}))
# estimate RUNS SECONDS: ~0.5 s per run to connect and settle (+0.5 s per sluice restart in
# runtime mode), ~5 s of set-up, prepare at roughly 50k rows/s, the warm-up. Excludes the build.
estimate() {
	local e=$(($1 * (2 * $2 + 1) / 2 + 5 + WARMUP + TABLES * TABLE_SIZE / 50000))
	if [ "$MODE" = runtime ]; then e=$((e + $1 / 3)); fi
	echo "~$((e / 60)) min $((e % 60)) s"
}
log "mode $MODE: ${#WORKLOAD_LIST[@]} workload(s) × ${#THREAD_LIST[@]} thread count(s) × $ROUNDS round(s) × ${#VARIANTS[@]} variants = $NRUNS runs of ${DURATION}s"
case "$MODE" in ab) DEF_RUNS=32 ;; runtime) DEF_RUNS=12 ;; stats) DEF_RUNS=24 ;; esac
log "estimated run time: $(estimate "$NRUNS" "$DURATION") (with the default settings of this mode: $DEF_RUNS runs of 20 s, $(estimate "$DEF_RUNS" 20))"

# --- sluice binary --------------------------------------------------------------------
pick_sluice

# --- processes and teardown -----------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
DB_PID="" DB_PORT="" SLUICE_PID="" SLUICE_PORT="" SLUICE_RUNTIME="" RUN_PID="" ADMIN_PORT=""
SOCK=$WORK/mysqld.sock

stop_sluice() {
	stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	SLUICE_PID=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
		[ -s "$WORK/mysqld.err" ] && { echo "--- last lines of mariadbd's log:" >&2; tail -n 10 "$WORK/mysqld.err" >&2; }
	fi
	if [ -n "$RUN_PID" ]; then
		stop_proc "$RUN_PID" sysbench 15 # timeout passes SIGTERM on to sysbench
		RUN_PID=""
	fi
	stop_sluice
	if [ -n "$DB_PID" ]; then
		stop_proc "$DB_PID" mariadbd 60
		DB_PID=""
	fi
	finish_work "$rc"
}
trap_cleanup

sql() { mariadb --no-defaults -S "$SOCK" -uroot -N -B "$@"; }

start_mariadb() {
	log "initialising a private MariaDB in $WORK"
	mariadb-install-db --no-defaults --datadir="$WORK/data" --auth-root-authentication-method=normal \
		--skip-test-db --user=root >"$WORK/install.log" 2>&1 ||
		{ tail -n 20 "$WORK/install.log" >&2; die "mariadb-install-db failed"; }
	DB_PORT=$(free_port)
	mariadbd --no-defaults --datadir="$WORK/data" --bind-address=127.0.0.1 --port="$DB_PORT" \
		--socket="$SOCK" --pid-file="$WORK/mysqld.pid" --log-error="$WORK/mysqld.err" --user=root \
		--skip-name-resolve --max-connections=1000 --innodb-buffer-pool-size=256M --skip-log-bin \
		</dev/null >/dev/null 2>&1 &
	DB_PID=$!
	local i
	for ((i = 0; i < 600; i++)); do
		alive "$DB_PID" || die "mariadbd exited during start-up"
		mariadb-admin --no-defaults -S "$SOCK" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	((i < 600)) || die "mariadbd not ready after 60 s"
	sql -e "CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;
		CREATE DATABASE IF NOT EXISTS sbtest;"
	DB_VERSION=$(sql -e 'SELECT VERSION()')
	log "mariadbd $DB_VERSION on 127.0.0.1:$DB_PORT (pid $DB_PID)"
}

# start_sluice [extra args...]: starts sluice on a fresh port, waits until SELECT 1 works.
start_sluice() {
	SLUICE_PORT=$(free_port)
	ADMIN_PORT=$(free_port)
	echo "=== $(date +%T) start: ${SLUICE_CMD[*]} $* ${SLUICE_EXTRA[*]:-}" >>"$WORK/sluice.log"
	spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --listen "127.0.0.1:$SLUICE_PORT" \
		--backend "127.0.0.1:$DB_PORT" --user root --password '' --admin-listen "127.0.0.1:$ADMIN_PORT" --http-listen '' \
		"$@" ${SLUICE_EXTRA[@]+"${SLUICE_EXTRA[@]}"}
	SLUICE_PID=$SPAWNED_PID
	local i err=""
	for ((i = 0; i < 300; i++)); do
		alive "$SLUICE_PID" || { SLUICE_PID=""; die "sluice exited during start-up"; }
		if err=$(timeout 5 mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$SLUICE_PORT" -uroot \
			--connect-timeout=2 -N -B -e 'SELECT 1' 2>&1); then
			log "sluice listening on 127.0.0.1:$SLUICE_PORT (pid $SLUICE_PID)${*:+ $*}"
			return 0
		fi
		sleep 0.1
	done
	die "SELECT 1 through sluice still fails after 30 s: $err"
}

# admin SQL...: runs statements on the running sluice's admin port.
admin() { mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$ADMIN_PORT" -uadmin -padmin -N -B -e "$*"; }

# digests on|off: switches digest statistics live (stats mode).
digests() {
	local v=false
	[ "$1" = on ] && v=true
	admin "UPDATE global_variables SET variable_value='$v' WHERE variable_name='mysql-query_digests'; LOAD MYSQL VARIABLES TO RUNTIME" ||
		die "cannot switch digests $1 through the admin port"
}

# sb_args WORKLOAD THREADS PORT SECONDS: sets SB to the sysbench command line (without the command).
sb_args() {
	SB=(sysbench "$1" --mysql-host=127.0.0.1 --mysql-port="$3" --mysql-user=root --mysql-db=sbtest
		--tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$2" --time="$4" --report-interval=0
		--percentile=95 --db-ps-mode="$DB_PS_MODE")
}

# --- results --------------------------------------------------------------------------
declare -A QPS P95 CPU # key "workload|threads|variant" -> space-separated values, one per good run
declare -A RQPS RCPU   # key "workload|threads|variant|round" -> that run's QPS and CPU µs/query
FAILURES=()
NOTES=()
RUN_NO=0

# measure WORKLOAD THREADS VARIANT ROUND: one sysbench run, direct or through the running sluice.
measure() {
	local wl=$1 thr=$2 variant=$3 round=$4 port t0="" t1="" logf rc=0
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$wl-$thr-$variant-$round.log
	if [ "$variant" = direct ]; then
		port=$DB_PORT
	else
		case "$variant" in stats-on) digests on ;; stats-off) digests off ;; esac
		port=$SLUICE_PORT
		t0=$(cpu_ticks "$SLUICE_PID") || t0=""
	fi
	sb_args "$wl" "$thr" "$port" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	local what="$wl, $thr threads, $variant, round $round"
	if [ "$variant" != direct ]; then
		sleep 0.3 # let the proxy finish closing the sessions
		if ! alive "$SLUICE_PID"; then
			FAILURES+=("$what: sluice died (see its log)")
			log "[$RUN_NO/$NRUNS] $what: FAILED, sluice died; last lines of its log:"
			tail -n 20 "$WORK/sluice.log" >&2
			stop_sluice
			start_sluice ${SLUICE_RUNTIME:+--runtime "$SLUICE_RUNTIME"}
			return 0
		fi
		t1=$(cpu_ticks "$SLUICE_PID") || t1=""
	fi
	sysbench_figures "$logf" "$rc" "$what" p95 || return 0
	local key="$wl|$thr|$variant"
	QPS[$key]+="$SB_QPS "
	RQPS[$key|$round]=$SB_QPS
	P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || { CPU[$key]+="$CPU_US "; RCPU[$key|$round]=$CPU_US; }
	log "[$RUN_NO/$NRUNS] $what: $SB_QPS qps, p95 $SB_P95 ms, $SB_Q queries$CPU_TXT"
}


# --- run ------------------------------------------------------------------------------
START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
start_mariadb

log "sysbench prepare: $TABLES tables × $TABLE_SIZE rows"
sb_args oltp_read_only $((TABLES < 8 ? TABLES : 8)) "$DB_PORT" 1
run_bounded 3600 "$WORK/prepare.log" "${SB[@]}" prepare || { tail -n 20 "$WORK/prepare.log" >&2; die "sysbench prepare failed"; }

if [ "$WARMUP" -gt 0 ]; then
	log "warm-up: ${WARMUP}s of direct oltp_point_select"
	sb_args oltp_point_select 4 "$DB_PORT" "$WARMUP"
	run_bounded $((WARMUP + 60)) "$WORK/warmup.log" "${SB[@]}" run || { tail -n 20 "$WORK/warmup.log" >&2; die "warm-up run failed"; }
fi

if [ "$MODE" = ab ]; then
	start_sluice
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for ((r = 1; r <= ROUNDS; r++)); do
				measure "$wl" "$thr" direct "$r"
				measure "$wl" "$thr" sluice "$r"
			done
		done
	done
	stop_sluice
elif [ "$MODE" = stats ]; then
	start_sluice
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for ((r = 1; r <= ROUNDS; r++)); do
				measure "$wl" "$thr" direct "$r"
				# alternate which goes first, so neither always follows the direct run
				if ((r % 2)); then order=(stats-on stats-off); else order=(stats-off stats-on); fi
				for v in "${order[@]}"; do measure "$wl" "$thr" "$v" "$r"; done
			done
		done
	done
	DIGESTS_SEEN=$(admin "SELECT COUNT(*) FROM stats_mysql_query_digest") || DIGESTS_SEEN="?"
	stop_sluice
else
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for ((r = 1; r <= ROUNDS; r++)); do
				measure "$wl" "$thr" direct "$r"
				# alternate which runtime goes first, so neither always follows the direct run
				if ((r % 2)); then order=(steal per-core); else order=(per-core steal); fi
				for rt in "${order[@]}"; do
					SLUICE_RUNTIME=$rt
					start_sluice --runtime "$rt"
					measure "$wl" "$thr" "$rt" "$r"
					stop_sluice
				done
			done
		done
	done
fi
ELAPSED=$((SECONDS - START_S))

# --- report ---------------------------------------------------------------------------
CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -n "$CPU_MODEL" ] || CPU_MODEL=$(uname -m)
PARAMS="MODE=$MODE DURATION=$DURATION THREADS=$(shq "$THREADS") WORKLOADS=$(shq "$WORKLOADS")"
PARAMS+=" TABLES=$TABLES TABLE_SIZE=$TABLE_SIZE ROUNDS=$ROUNDS DB_PS_MODE=$DB_PS_MODE WARMUP=$WARMUP"
[ -n "$SLUICE_ARGS" ] && PARAMS+=" SLUICE_ARGS=$(shq "$SLUICE_ARGS")"
[ -n "$SLUICE_BIN" ] && PARAMS+=" SLUICE_BIN=$(shq "$SLUICE_BIN")"

{
	echo
	case "$MODE" in
	ab) echo "### sluice vs direct, $START_TS" ;;
	runtime) echo "### sluice runtimes: steal vs per-core, $START_TS" ;;
	stats) echo "### statistics overhead: digests on vs off, $START_TS" ;;
	esac
	echo
	echo "- machine: $(nproc) CPUs, $CPU_MODEL, Linux $(uname -r); sysbench, mariadbd and sluice share these CPUs"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV${SLUICE_ARGS:+, args \`$SLUICE_ARGS\`}"
	echo "- command: \`$INVOCATION\`"
	echo "- parameters: \`$PARAMS bench/compare.sh\`"
	sb_args '<workload>' '<N>' '<port>' "$DURATION"
	echo "- each run: \`${SB[*]} run\`;" \
		"$ROUNDS round(s) alternated, medians shown; sluice CPU = utime+stime (+cutime+cstime) of its process from /proc/PID/stat; total ${ELAPSED}s"
	echo
	if [ "$MODE" = ab ]; then
		echo "| workload | threads | direct QPS (median) | sluice QPS (median) | ratio sluice/direct | direct p95 ms | sluice p95 ms | sluice CPU µs/query (median) |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				s=$(median "${QPS[$wl|$thr|sluice]:-}")
				echo "| $wl | $thr | $d | $s | $(ratio "$s" "$d") | $(median "${P95[$wl|$thr|direct]:-}" %.2f)" \
					"| $(median "${P95[$wl|$thr|sluice]:-}" %.2f) | $(median "${CPU[$wl|$thr|sluice]:-}" %.1f) |"
			done
		done
	elif [ "$MODE" = stats ]; then
		echo "Paired: each round's digests-on run against the same round's digests-off run (the two"
		echo "run back to back, in alternating order), then the median over rounds; this cancels the"
		echo "machine's drift between rounds, which the medians of each column do not."
		echo
		echo "| workload | threads | direct QPS | digests on QPS | digests off QPS | on/off (paired) | on/direct | on CPU µs/query | off CPU µs/query | CPU on − off µs (paired) | per round: on/off, CPU on − off |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				on=$(median "${QPS[$wl|$thr|stats-on]:-}")
				off=$(median "${QPS[$wl|$thr|stats-off]:-}")
				con=$(median "${CPU[$wl|$thr|stats-on]:-}" %.2f)
				coff=$(median "${CPU[$wl|$thr|stats-off]:-}" %.2f)
				ratios="" diffs="" rounds=""
				for ((r = 1; r <= ROUNDS; r++)); do
					qa=${RQPS[$wl|$thr|stats-on|$r]:-} qb=${RQPS[$wl|$thr|stats-off|$r]:-}
					[ -n "$qa" ] && [ -n "$qb" ] || continue
					q=$(ratio "$qa" "$qb")
					ratios+="$q "
					ca=${RCPU[$wl|$thr|stats-on|$r]:-} cb=${RCPU[$wl|$thr|stats-off|$r]:-}
					c=-
					if [ -n "$ca" ] && [ -n "$cb" ]; then
						c=$(awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.2f", a - b }')
						diffs+="$c "
					fi
					rounds+="${rounds:+; }$q, $c"
				done
				echo "| $wl | $thr | $d | $on | $off | $(median "$ratios" %.3f) | $(ratio "$on" "$d")" \
					"| $con | $coff | $(median "$diffs" %.2f) | $rounds |"
			done
		done
		echo
		echo "Digest rows in stats_mysql_query_digest at the end: $DIGESTS_SEEN."
	else
		echo "| workload | threads | direct QPS | steal QPS | per-core QPS | steal/direct | per-core/direct | steal p95 ms | per-core p95 ms | steal CPU µs/query | per-core CPU µs/query |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				s=$(median "${QPS[$wl|$thr|steal]:-}")
				p=$(median "${QPS[$wl|$thr|per-core]:-}")
				echo "| $wl | $thr | $d | $s | $p | $(ratio "$s" "$d") | $(ratio "$p" "$d")" \
					"| $(median "${P95[$wl|$thr|steal]:-}" %.2f) | $(median "${P95[$wl|$thr|per-core]:-}" %.2f)" \
					"| $(median "${CPU[$wl|$thr|steal]:-}" %.1f) | $(median "${CPU[$wl|$thr|per-core]:-}" %.1f) |"
			done
		done
	fi
	report_problems
} >"$WORK/report.md"

publish_report "$WORK/report.md"
