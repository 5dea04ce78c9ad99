#!/usr/bin/env bash
# bench/compare.sh: sysbench against a private MariaDB, directly and through sluice (and
# HAProxy in TCP mode), alternated A B A B, with each proxy's CPU per query read from
# /proc/<pid>/stat and, with SYSCALLS=1, its system calls per query from a separate strace pass.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/compare.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --mode ab|haproxy|floor|runtime|stats|builds MODE ab: direct vs sluice (default).
                                      haproxy: direct vs sluice vs HAProxy (mode tcp, nbthread =
                                      sluice's worker threads), alternated A B C A B C.
                                      floor: the same plus bench/l4floor, a bare forwarder, on
                                      tokio (epoll) and on io_uring: what moving the bytes alone
                                      costs with each I/O engine (L4FLOOR_BIN, else built;
                                      FLOOR_ENGINES picks the engines).
                                      runtime: sluice --runtime steal vs --runtime per-core,
                                      with a direct run as reference in each round.
                                      stats: sluice with digest statistics on vs off, switched
                                      live through the admin port every WINDOW seconds within one
                                      long sysbench run per cell (see below), and a direct run.
                                      builds: two sluice binaries, SLUICE_BIN_BEFORE and the
                                      usual one (SLUICE_BIN or a fresh build), with a direct run
                                      as reference in each round: a change's cost, same run.
  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads "N ..."       THREADS     sysbench thread counts [ab: "1 4 16 64", runtime: "16 64"]
  --workloads "W ..."     WORKLOADS   sysbench workloads
                                      [ab: "oltp_point_select oltp_read_only", runtime: "oltp_point_select"]
  --tables N              TABLES      sysbench tables [4]
  --table-size N          TABLE_SIZE  rows per table [10000]
  --rounds N              ROUNDS      A/B alternations per cell; medians are taken over them [2]
                                      (stats mode: on/off window pairs per cell [6])
  --window SECONDS        WINDOW      stats mode: seconds per on or off window, the first half
                                      second of which is not measured (the switch settling) [3]
  --rate N                RATE        sysbench --rate: transactions per second in all, instead of
                                      as many as possible. Below saturation both sides of a
                                      comparison do the same work, so CPU per query compares
                                      cleanly (throughput then shows nothing). [unset]
  --sluice-args "ARGS"    SLUICE_ARGS extra arguments for sluice, e.g. "--workers 2"
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
  --db-ps-mode MODE       DB_PS_MODE  sysbench --db-ps-mode: disable (text protocol) or auto [disable]
  --warmup SECONDS        WARMUP      direct point-select warm-up before measuring, 0 = none [5]
  --syscalls 0|1          SYSCALLS    1: after the timed rounds, one separate strace -f pass per
                                      proxy and cell (ab and haproxy modes), reported as system
                                      calls per query by kind. strace slows the proxy, so these
                                      passes are never timed. [0]
  --syscall-duration S    SYSCALL_DURATION  seconds of each strace pass [5]
                          SLUICE_BIN  command to run instead of target/release/sluice (same flags;
                                      it must exec so that its pid is the proxy's). When unset,
                                      `cargo build --release -p sluice` is run first.
                          SLUICE_BIN_BEFORE  builds mode: the binary to compare against
                          L4FLOOR_BIN floor mode: the l4floor binary [a fresh release build]
                          FLOOR_ENGINES floor mode: l4floor's engines to run, of tokio,
                                      tokio-per-core, tokio-uring, uring, uring-multishot, and
                                      uring-unlinked / uring-coop / uring-poll-first (uring with
                                      that flag), or a second sluice:
                                      sluice-per-core (--runtime per-core: io_uring where
                                      available), sluice-per-core-epoll, or a proxy whose
                                      backend leg is MariaDB's Unix socket instead of TCP:
                                      sluice-socket, sluice-per-core-socket (both legs
                                      on the ring), haproxy-socket ["tokio uring"]
                          DISTURBED   a cell in which one endpoint's QPS or CPU per statement differs
                                      between rounds by this factor or more is named under the table
                                      as disturbed (something else took the CPUs for part of it):
                                      its medians may mix disturbed and clean rounds; rerun it
                                      before quoting it [2]
                          KEEP_TMP    1 = keep the temp dir (datadir, logs, sysbench outputs)

Stats mode, why one long run: run-to-run throughput on these shared machines moves by ±10%,
five times the 2% to resolve. Within one sysbench run the windows alternate on off off on
on off off on …, so each pair's order alternates and slow drift cancels; each window's QPS and
CPU per query come from sluice's own Questions counter (admin port) and its threads' schedstat.

Smoke test:  DURATION=2 THREADS=4 ROUNDS=1 bench/compare.sh
EOF
}

PROG=compare.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # die log shq alive stop_proc run_bounded free_port cpu_ticks median ratio disturbed_spread parse_options pick_sluice sysbench_figures cpu_per_query report_problems publish_report

# --- options --------------------------------------------------------------------------
OPT_VARS=(MODE DURATION THREADS WORKLOADS TABLES TABLE_SIZE ROUNDS WINDOW RATE SLUICE_ARGS OUT DB_PS_MODE WARMUP SYSCALLS SYSCALL_DURATION SLUICE_BIN SLUICE_BIN_BEFORE HAPROXY_BIN L4FLOOR_BIN FLOOR_ENGINES DISTURBED)
FLAG_VARS=(MODE DURATION THREADS WORKLOADS TABLES TABLE_SIZE ROUNDS WINDOW RATE SLUICE_ARGS OUT DB_PS_MODE WARMUP SYSCALLS SYSCALL_DURATION) # settable as --name too
parse_options "$@"

MODE=${MODE:-ab}
case "$MODE" in
ab | haproxy | floor)
	THREADS=${THREADS:-1 4 16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only}
	;;
runtime | builds)
	THREADS=${THREADS:-16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select}
	;;
stats)
	THREADS=${THREADS:-16 64}
	WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only}
	;;
*) die "MODE must be ab, haproxy, floor, runtime, stats or builds, not '$MODE'" ;;
esac
DURATION=${DURATION:-20}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
if [ "$MODE" = stats ]; then ROUNDS=${ROUNDS:-40}; else ROUNDS=${ROUNDS:-2}; fi
WINDOW=${WINDOW:-3}
RATE=${RATE:-}
SLUICE_ARGS=${SLUICE_ARGS:-}
OUT=${OUT:-}
DB_PS_MODE=${DB_PS_MODE:-disable}
WARMUP=${WARMUP:-5}
SLUICE_BIN=${SLUICE_BIN:-}
HAPROXY_BIN=${HAPROXY_BIN:-haproxy}
SYSCALLS=${SYSCALLS:-0}
SYSCALL_DURATION=${SYSCALL_DURATION:-5}
KEEP_TMP=${KEEP_TMP:-0}
DISTURBED=${DISTURBED:-2}

for v in DURATION TABLES TABLE_SIZE ROUNDS WINDOW WARMUP SYSCALL_DURATION; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
if [ "$DURATION" -eq 0 ] || [ "$ROUNDS" -eq 0 ] || [ "$TABLES" -eq 0 ] || [ "$TABLE_SIZE" -eq 0 ]; then
	die "DURATION, ROUNDS, TABLES and TABLE_SIZE must be > 0"
fi
[ "$WINDOW" -ge 2 ] || die "WINDOW must be at least 2 seconds"
[[ $DISTURBED =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v d="$DISTURBED" 'BEGIN { exit !(d > 1) }' ||
	die "DISTURBED must be a factor above 1, not '$DISTURBED'"
[[ -z $RATE || $RATE =~ ^[1-9][0-9]*$ ]] || die "RATE must be a positive whole number, not '$RATE'"
read -ra THREAD_LIST <<<"$THREADS"
read -ra WORKLOAD_LIST <<<"$WORKLOADS"
read -ra SLUICE_EXTRA <<<"$SLUICE_ARGS"
[ ${#THREAD_LIST[@]} -gt 0 ] || die "THREADS is empty"
[ ${#WORKLOAD_LIST[@]} -gt 0 ] || die "WORKLOADS is empty"
for t in "${THREAD_LIST[@]}"; do
	[[ $t =~ ^[1-9][0-9]*$ ]] || die "THREADS must be positive whole numbers, not '$t'"
done
case "$DB_PS_MODE" in disable | auto) ;; *) die "DB_PS_MODE must be disable or auto" ;; esac
case "$SYSCALLS" in 0 | 1) ;; *) die "SYSCALLS must be 0 or 1, not '$SYSCALLS'" ;; esac
if [ "$SYSCALLS" = 1 ]; then
	[ "$MODE" = ab ] || [ "$MODE" = haproxy ] || [ "$MODE" = floor ] || die "SYSCALLS=1 works in the ab, haproxy and floor modes only"
	[ "$SYSCALL_DURATION" -gt 0 ] || die "SYSCALL_DURATION must be > 0"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- tools ----------------------------------------------------------------------------
require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)
if [ "$MODE" = haproxy ] || [ "$MODE" = floor ]; then
	command -v "$HAPROXY_BIN" >/dev/null || die "$HAPROXY_BIN not found (Debian: apt-get install -y haproxy)"
fi
if [ "$SYSCALLS" = 1 ]; then
	command -v strace >/dev/null || die "strace not found (Debian: apt-get install -y strace)"
fi

# --- estimate -------------------------------------------------------------------------
case "$MODE" in
ab) VARIANTS=(direct sluice) ;;
haproxy) VARIANTS=(direct sluice haproxy) ;;
floor)
	read -ra FLOOR_ENGINE_LIST <<<"${FLOOR_ENGINES:-tokio uring}"
	[ ${#FLOOR_ENGINE_LIST[@]} -gt 0 ] || die "FLOOR_ENGINES is empty"
	VARIANTS=(direct sluice haproxy)
	for e in "${FLOOR_ENGINE_LIST[@]}"; do
		case "$e" in
		tokio | tokio-per-core | tokio-uring | uring | uring-multishot | uring-unlinked | uring-coop | uring-poll-first) VARIANTS+=("l4-$e") ;;
		sluice-per-core | sluice-per-core-epoll | sluice-socket | sluice-per-core-socket | haproxy-socket) VARIANTS+=("$e") ;;
		*) die "FLOOR_ENGINES: '$e' is not tokio, tokio-per-core, tokio-uring, uring, uring-multishot, uring-unlinked, uring-coop, uring-poll-first, sluice-per-core, sluice-per-core-epoll, sluice-socket, sluice-per-core-socket or haproxy-socket" ;;
		esac
	done
	;;
runtime) VARIANTS=(direct steal per-core) ;;
builds) VARIANTS=(direct before after) ;;
stats) VARIANTS=(direct stats-on stats-off) ;;
esac
NRUNS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]} * ROUNDS * ${#VARIANTS[@]}))
# estimate RUNS SECONDS: ~0.5 s per run to connect and settle (+0.5 s per sluice restart in
# runtime mode), ~5 s of set-up, prepare at roughly 50k rows/s, the warm-up. Excludes the build.
estimate() {
	local e=$(($1 * (2 * $2 + 1) / 2 + 5 + WARMUP + TABLES * TABLE_SIZE / 50000))
	if [ "$MODE" = runtime ] || [ "$MODE" = builds ]; then e=$((e + $1 / 3)); fi
	echo "~$((e / 60)) min $((e % 60)) s"
}
CELLS=$((${#WORKLOAD_LIST[@]} * ${#THREAD_LIST[@]}))
if [ "$MODE" = stats ]; then
	# a direct run and one interleaved run per cell
	NRUNS=$((CELLS * 2))
	e=$((CELLS * (DURATION + 2 * ROUNDS * (WINDOW + 1) + 9) + 5 + WARMUP + TABLES * TABLE_SIZE / 50000))
	log "mode stats: $CELLS cell(s), each a ${DURATION}s direct run and one run of $((2 * ROUNDS)) windows of ${WINDOW}s through sluice"
	log "estimated run time: ~$((e / 60)) min $((e % 60)) s"
else
	if [ "$SYSCALLS" = 1 ]; then
		# one untimed strace pass per proxy and cell, ~2 s each to attach and detach
		e=$((CELLS * (${#VARIANTS[@]} - 1) * (SYSCALL_DURATION + 2)))
		log "plus $((CELLS * (${#VARIANTS[@]} - 1))) strace pass(es) of ${SYSCALL_DURATION}s: ~$((e / 60)) min $((e % 60)) s"
	fi
	log "mode $MODE: ${#WORKLOAD_LIST[@]} workload(s) × ${#THREAD_LIST[@]} thread count(s) × $ROUNDS round(s) × ${#VARIANTS[@]} variants = $NRUNS runs of ${DURATION}s"
	case "$MODE" in ab) DEF_RUNS=32 ;; haproxy) DEF_RUNS=48 ;; floor) DEF_RUNS=$((16 * ${#VARIANTS[@]})) ;; runtime | builds) DEF_RUNS=12 ;; esac
	log "estimated run time: $(estimate "$NRUNS" "$DURATION") (with the default settings of this mode: $DEF_RUNS runs of 20 s, $(estimate "$DEF_RUNS" 20))"
fi

# --- sluice binary --------------------------------------------------------------------
pick_sluice
AFTER_CMD=("${SLUICE_CMD[@]}")
if [ "$MODE" = builds ]; then
	[ -n "${SLUICE_BIN_BEFORE:-}" ] || die "builds mode needs SLUICE_BIN_BEFORE (the binary to compare against)"
	read -ra BEFORE_CMD <<<"$SLUICE_BIN_BEFORE"
	[ -x "${BEFORE_CMD[0]}" ] || die "SLUICE_BIN_BEFORE: '${BEFORE_CMD[0]}' is not executable"
fi
if [ "$MODE" = floor ]; then
	if [ -z "${L4FLOOR_BIN:-}" ]; then
		log "building l4floor (cargo build --release -p sluice-l4floor)"
		(cd "$ROOT" && cargo build --release -p sluice-l4floor) >&2 || die "cargo build --release -p sluice-l4floor failed"
		L4FLOOR_BIN=$ROOT/target/release/l4floor
	fi
	[ -x "$L4FLOOR_BIN" ] || die "L4FLOOR_BIN: '$L4FLOOR_BIN' is not executable"
fi

# --- processes and teardown -----------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
DB_PID="" DB_PORT="" SLUICE_PID="" SLUICE_PORT="" SLUICE_RUNTIME="" RUN_PID="" ADMIN_PORT=""
HAPROXY_PID="" HAPROXY_PORT="" HAPROXY_THREADS="" STRACE_PID="" QCLIENT_OWN_PID=""
declare -A FLOOR_PID FLOOR_PORT # floor mode, by engine (tokio, tokio-per-core, uring)
SOCK=$WORK/mysqld.sock

stop_sluice() {
	stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	SLUICE_PID=""
}

stop_haproxy() {
	stop_supervised "$HAPROXY_PID" "$WORK/haproxy" haproxy
	HAPROXY_PID=""
}

# start_floor ENGINE: bench/l4floor with that engine (one of FLOOR_ENGINES) on a fresh port, with
# as many threads as sluice's workers, or for sluice-per-core[-epoll] a second sluice with
# --runtime per-core (--io epoll), for sluice-socket (sluice-per-core-socket) one (on per-core)
# whose backend is MariaDB's Unix socket, for haproxy-socket a second HAProxy to that socket;
# waits until SELECT 1 works through it.
start_floor() {
	local port name=l4-$1 cmd
	port=$(free_port)
	case "$1" in
	haproxy-socket)
		local main_pid=$HAPROXY_PID main_port=$HAPROXY_PORT
		start_haproxy_tcp "$SOCK" "$(sluice_workers)" haproxy-socket
		FLOOR_PID[$1]=$HAPROXY_PID FLOOR_PORT[$1]=$HAPROXY_PORT
		HAPROXY_PID=$main_pid HAPROXY_PORT=$main_port
		return
		;;
	sluice-per-core | sluice-per-core-epoll | sluice-socket | sluice-per-core-socket)
		name=$1
		case "$1" in
		sluice-per-core) sluice_argv "$port" "$(free_port)" --runtime per-core ;;
		sluice-per-core-epoll) sluice_argv "$port" "$(free_port)" --runtime per-core --io epoll ;;
		sluice-socket) BACKEND_ADDR=$SOCK sluice_argv "$port" "$(free_port)" ;;
		sluice-per-core-socket) BACKEND_ADDR=$SOCK sluice_argv "$port" "$(free_port)" --runtime per-core ;;
		esac
		cmd=("${SLUICE_ARGV[@]}")
		;;
	*)
		# uring-unlinked, uring-coop, uring-poll-first: the uring engine with that flag.
		local engine=("$1")
		case "$1" in uring-unlinked | uring-coop | uring-poll-first) engine=(uring "--$1") ;; esac
		cmd=("$L4FLOOR_BIN" --engine "${engine[@]}" --listen "127.0.0.1:$port" --backend "127.0.0.1:$DB_PORT" --threads "$(sluice_workers)")
		;;
	esac
	echo "=== $(date +%T) start: ${cmd[*]}" >>"$WORK/$name.log"
	spawn_supervised "$WORK/$name" "$WORK/$name.log" "${cmd[@]}"
	FLOOR_PID[$1]=$SPAWNED_PID FLOOR_PORT[$1]=$port
	await_answer "$name" "$SPAWNED_PID" "$port"
	log "$name listening on 127.0.0.1:$port (pid $SPAWNED_PID)"
}

# stop_floor [ENGINE]: stops that l4floor, or every one running.
stop_floor() {
	local e engines=("$@")
	[ $# -gt 0 ] || engines=("${!FLOOR_PID[@]}")
	for e in ${engines[@]+"${engines[@]}"}; do
		[ -n "${FLOOR_PID[$e]:-}" ] || continue
		case "$e" in sluice-* | haproxy-*) stop_supervised "${FLOOR_PID[$e]}" "$WORK/$e" "$e" ;; *) stop_supervised "${FLOOR_PID[$e]}" "$WORK/l4-$e" "l4floor --engine $e" ;; esac
		unset "FLOOR_PID[$e]"
	done
}

# stop_strace: detaches a running strace (SIGINT makes it print its summary and let go).
stop_strace() {
	[ -n "$STRACE_PID" ] || return 0
	kill -INT "$STRACE_PID" 2>/dev/null || true
	local i
	for ((i = 0; i < 100; i++)); do
		alive "$STRACE_PID" || break
		sleep 0.1
	done
	alive "$STRACE_PID" && stop_proc "$STRACE_PID" strace 5
	wait "$STRACE_PID" 2>/dev/null || true
	STRACE_PID=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
		[ -s "$WORK/mysqld.err" ] && { echo "--- last lines of mariadbd's log:" >&2; tail -n 10 "$WORK/mysqld.err" >&2; }
		[ -s "$WORK/haproxy.log" ] && { echo "--- last lines of haproxy's log:" >&2; tail -n 10 "$WORK/haproxy.log" >&2; }
	fi
	if [ -n "$RUN_PID" ]; then
		stop_proc "$RUN_PID" sysbench 15 # timeout passes SIGTERM on to sysbench
		RUN_PID=""
	fi
	stop_strace
	[ -z "$QCLIENT_OWN_PID" ] || stop_proc "$QCLIENT_OWN_PID" mariadb 5
	stop_sluice
	stop_haproxy
	stop_floor
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

# sluice_argv PORT ADMIN_PORT [extra args...]: sets SLUICE_ARGV to the command line of a sluice
# on PORT in front of the private MariaDB, over TCP or at BACKEND_ADDR when set (SLUICE_ARGS last).
sluice_argv() {
	SLUICE_ARGV=("${SLUICE_CMD[@]}" --listen "127.0.0.1:$1" --backend "${BACKEND_ADDR:-127.0.0.1:$DB_PORT}" --user root --password ''
		--admin-listen "127.0.0.1:$2" --http-listen '' "${@:3}" ${SLUICE_EXTRA[@]+"${SLUICE_EXTRA[@]}"})
}

# start_sluice [extra args...]: starts sluice on a fresh port, waits until SELECT 1 works.
start_sluice() {
	SLUICE_PORT=$(free_port)
	ADMIN_PORT=$(free_port)
	sluice_argv "$SLUICE_PORT" "$ADMIN_PORT" "$@"
	echo "=== $(date +%T) start: ${SLUICE_ARGV[*]}" >>"$WORK/sluice.log"
	spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_ARGV[@]}"
	SLUICE_PID=$SPAWNED_PID
	await_answer sluice "$SLUICE_PID" "$SLUICE_PORT"
	log "sluice listening on 127.0.0.1:$SLUICE_PORT (pid $SLUICE_PID)${*:+ $*}"
}

# sluice_workers: the worker threads sluice runs with: --workers in SLUICE_ARGS, else one
# per CPU (sluice's default). HAProxy gets as many threads (nbthread), as issue 18 compares.
sluice_workers() {
	local i n
	n=$(nproc)
	for ((i = 0; i < ${#SLUICE_EXTRA[@]}; i++)); do
		case "${SLUICE_EXTRA[i]}" in
		--workers) n=${SLUICE_EXTRA[i + 1]:-$n} ;;
		--workers=*) n=${SLUICE_EXTRA[i]#--workers=} ;;
		esac
	done
	[[ $n =~ ^[1-9][0-9]*$ ]] || die "cannot read sluice's worker count from SLUICE_ARGS ('$n')"
	echo "$n"
}

# start_haproxy: HAProxy as a plain TCP forwarder (mode tcp, one server: the private MariaDB)
# with nbthread = sluice's workers, in the foreground (-db) so that its pid is the one process
# whose CPU is read. Waits until SELECT 1 works through it.
start_haproxy() {
	HAPROXY_THREADS=$(sluice_workers)
	start_haproxy_tcp "$DB_PORT" "$HAPROXY_THREADS"
}

# endpoint VARIANT: sets EP_PORT and EP_PID (empty for direct) of the variant's endpoint.
endpoint() {
	case "$1" in
	direct) EP_PORT=$DB_PORT EP_PID="" ;;
	haproxy) EP_PORT=$HAPROXY_PORT EP_PID=$HAPROXY_PID ;;
	l4-*) EP_PORT=${FLOOR_PORT[${1#l4-}]} EP_PID=${FLOOR_PID[${1#l4-}]} ;;
	sluice-* | haproxy-*) EP_PORT=${FLOOR_PORT[$1]} EP_PID=${FLOOR_PID[$1]} ;;
	*) EP_PORT=$SLUICE_PORT EP_PID=$SLUICE_PID ;;
	esac
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
		--percentile=95 --db-ps-mode="$DB_PS_MODE" ${RATE:+--rate="$RATE"})
}

# --- results --------------------------------------------------------------------------
declare -A QPS P95 CPU # key "workload|threads|variant" -> space-separated values, one per good run
declare -A SYS SYS_TOTAL SYS_QPS # SYSCALLS=1, key "workload|threads|variant" -> its strace pass's figures
declare -A WQPS WCPU WSTATE # stats mode, key "workload|threads|window" -> that window's figures
FAILURES=()
NOTES=()
RUN_NO=0

# measure WORKLOAD THREADS VARIANT ROUND: one sysbench run, direct or through the running
# sluice or HAProxy.
measure() {
	local wl=$1 thr=$2 variant=$3 round=$4 t0="" t1="" logf rc=0 name=sluice
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$wl-$thr-$variant-$round.log
	endpoint "$variant"
	case "$variant" in haproxy | haproxy-* | l4-* | sluice-*) name=$variant ;; esac
	if [ -n "$EP_PID" ]; then
		t0=$(cpu_ticks "$EP_PID") || t0=""
	fi
	sb_args "$wl" "$thr" "$EP_PORT" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	local what="$wl, $thr threads, $variant, round $round"
	if [ -n "$EP_PID" ]; then
		sleep 0.3 # let the proxy finish closing the sessions
		if ! alive "$EP_PID"; then
			FAILURES+=("$what: $name died (see its log)")
			log "[$RUN_NO/$NRUNS] $what: FAILED, $name died; last lines of its log:"
			tail -n 20 "$WORK/$name.log" >&2
			if [ "$name" = haproxy ]; then
				stop_haproxy
				start_haproxy
			elif [ "$name" != sluice ]; then
				stop_floor "${name#l4-}"
				start_floor "${name#l4-}"
			else
				stop_sluice
				start_sluice ${SLUICE_RUNTIME:+--runtime "$SLUICE_RUNTIME"}
			fi
			return 0
		fi
		t1=$(cpu_ticks "$EP_PID") || t1=""
	fi
	sysbench_figures "$logf" "$rc" "$what" p95 || return 0
	local key="$wl|$thr|$variant"
	QPS[$key]+="$SB_QPS "
	P95[$key]+="$SB_P95 "
	cpu_per_query "$t0" "$t1" "$SB_Q" "$name"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	log "[$RUN_NO/$NRUNS] $what: $SB_QPS qps, p95 $SB_P95 ms, $SB_Q queries$CPU_TXT"
}

# start_questions_client: one client session kept open (the QCLIENT coprocess) through which
# read_questions reads the server's counter: starting a client per reading takes long enough
# on a loaded machine to blur an strace pass's window.
start_questions_client() {
	coproc QCLIENT { exec mariadb --no-defaults -S "$SOCK" -uroot -N -B --unbuffered 2>/dev/null; }
	QCLIENT_OWN_PID=$QCLIENT_PID
}

# timed_questions: read_questions, and in QUESTIONS_AT the time of the reading (seconds since
# the epoch, the midpoint of its round trip), to compare with strace's timestamps.
timed_questions() {
	local before after
	before=$(date +%s.%N)
	read_questions
	after=$(date +%s.%N)
	QUESTIONS_AT=$(awk -v a="$before" -v b="$after" 'BEGIN { printf "%.6f", (a + b) / 2 }')
}

# read_questions: the private MariaDB's Questions counter (statements it received) into
# QUESTIONS (empty when it cannot be read). Not in a subshell: the coprocess is this shell's.
read_questions() {
	local line=""
	QUESTIONS=""
	echo "SHOW GLOBAL STATUS LIKE 'Questions';" >&"${QCLIENT[1]}" || return 0
	read -r -t 10 line <&"${QCLIENT[0]}" || return 0
	QUESTIONS=${line##*[[:space:]]}
}

# syscall_pass WORKLOAD THREADS VARIANT: an untimed sysbench run through the proxy with
# `strace -f -ttt` attached to every thread of it, once sysbench has connected. The calls made
# within a window of SYSCALL_DURATION seconds (by strace's timestamps) are divided by the
# statements the server received in that window (its Questions counter, each reading timed at
# the midpoint of its round trip, its own statement taken out): connecting, disconnecting and
# strace's attaching and detaching are left out, and both proxies forward each statement once.
# Stores "kind=calls/failed ..." per statement (most frequent first) in SYS, the total in
# SYS_TOTAL and the statements per second under strace in SYS_QPS.
syscall_pass() {
	local wl=$1 thr=$2 variant=$3 logf slog serr rc=0 q0 q1 t0 t1 i what="$1, $2 threads, $3, strace pass"
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/strace-$wl-$thr-$variant.log
	slog=$WORK/strace-$wl-$thr-$variant.trace
	serr=$WORK/strace-$wl-$thr-$variant.err
	endpoint "$variant"
	sb_args "$wl" "$thr" "$EP_PORT" $((SYSCALL_DURATION + 5))
	timeout --kill-after=10 $((SYSCALL_DURATION + 65)) "${SB[@]}" run </dev/null >"$logf" 2>&1 &
	RUN_PID=$!
	sleep 1.5 # sysbench connects
	strace -f -ttt -s 0 -p "$EP_PID" -o "$slog" 2>"$serr" &
	STRACE_PID=$!
	for ((i = 0; i < 500; i++)); do
		grep -q ' attached' "$serr" 2>/dev/null && break
		sleep 0.01
	done
	sleep 0.3
	timed_questions
	q0=$QUESTIONS t0=$QUESTIONS_AT
	sleep "$SYSCALL_DURATION"
	timed_questions
	q1=$QUESTIONS t1=$QUESTIONS_AT
	stop_strace
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	sysbench_figures "$logf" "$rc" "$what" || return 0
	if ! [[ $q0 =~ ^[0-9]+$ && $q1 =~ ^[0-9]+$ && $q1 -gt $((q0 + 1)) ]] || [ ! -s "$slog" ]; then
		FAILURES+=("$what: no strace output or no statements counted (see $serr)")
		return 0
	fi
	local q=$((q1 - q0 - 1)) key="$wl|$thr|$variant"
	# Lines: "TID SECONDS name(...) = result", or a call split in "name(... <unfinished ...>"
	# and "<... name resumed>...) = result" when threads interleave. A call counts at its
	# start; it failed when its result is -1 (EAGAIN, ETIMEDOUT, ...).
	SYS[$key]=$(awk -v q="$q" -v a="$t0" -v b="$t1" '
		$2 < a || $2 > b { next }
		$3 ~ /^[a-z_0-9]+\(/ { k = substr($3, 1, index($3, "(") - 1); n[k]++ }
		$3 == "<..." { k = $4 }
		/ = -1 / && k != "" { e[k]++ }
		{ k = "" }
		END { for (k in n) printf "%s %.3f %.3f\n", k, n[k] / q, e[k] / q }' "$slog" |
		sort -k2,2gr | awk '{ printf "%s=%s/%s ", $1, $2, $3 }')
	SYS_TOTAL[$key]=$(awk -v q="$q" -v a="$t0" -v b="$t1" '$2 >= a && $2 <= b && $3 ~ /^[a-z_0-9]+\(/ { n++ }
		END { printf "%.2f", n / q }' "$slog")
	SYS_QPS[$key]=$(awk -v q="$q" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", q / (b - a) }')
	log "[$RUN_NO] $what: $q statements, ${SYS_TOTAL[$key]} system calls per statement: ${SYS[$key]}"
	rm -f "$slog" # tens of MB; the sysbench output and strace's messages stay
}

# syscall_kinds "kind=calls/errors ...": the kinds of at least 0.005 calls per statement (0.01
# once rounded), as "kind 2.00, kind 0.50 (0.10 failed)".
syscall_kinds() {
	local kv out="" n e
	for kv in $1; do
		n=${kv#*=} e=${n#*/} n=${n%/*}
		n=$(printf %.2f "$n") e=$(printf %.2f "$e")
		[ "$n" != 0.00 ] || continue
		out+="${out:+, }${kv%%=*} $n"
		[ "$e" = 0.00 ] || out+=" ($e failed)"
	done
	echo "${out:-none}"
}


# cpu_ns PID: nanoseconds on CPU of every thread of PID so far.
cpu_ns() { awk '{ s += $1 } END { printf "%.0f\n", s }' /proc/"$1"/task/*/schedstat 2>/dev/null; }

# questions: sluice's Questions counter (statements from clients), through the admin port.
questions() { admin "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='Questions'"; }

# measure_interleaved WORKLOAD THREADS: stats mode's run through sluice: one sysbench run of
# 2 × ROUNDS windows, digests on and off in the order on off off on on off off on …; per
# window (its first half second not measured) sluice's QPS and CPU per query. CPU time here is
# the sum of every sluice thread's on-CPU nanoseconds (/proc/PID/task/*/schedstat): /proc/PID/stat
# counts 10 ms ticks, too coarse for windows of a few seconds.
measure_interleaved() {
	local wl=$1 thr=$2 nwin=$((2 * ROUNDS)) w state q0 q1 c0 c1 t0 t1 qps cpu logf rc=0
	local what="$wl, $thr threads, digests switched every ${WINDOW}s"
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$wl-$thr-interleaved.log
	digests on
	sb_args "$wl" "$thr" "$SLUICE_PORT" $((nwin * (WINDOW + 1) + 10))
	timeout --kill-after=10 $((nwin * (WINDOW + 1) + 70)) "${SB[@]}" run </dev/null >"$logf" 2>&1 &
	RUN_PID=$!
	sleep 2 # connect and ramp up
	for ((w = 0; w < nwin; w++)); do
		# pairs (0,1) (2,3) …: on first in even pairs, off first in odd ones
		if (((w / 2 + w) % 2 == 0)); then state=on; else state=off; fi
		digests "$state"
		sleep 0.5
		alive "$RUN_PID" || break
		t0=$(date +%s.%N) q0=$(questions) c0=$(cpu_ns "$SLUICE_PID")
		sleep "$((WINDOW - 1)).5"
		t1=$(date +%s.%N) q1=$(questions) c1=$(cpu_ns "$SLUICE_PID")
		[[ $q0 =~ ^[0-9]+$ && $q1 =~ ^[0-9]+$ && $q1 -gt $q0 ]] || break
		qps=$(awk -v q=$((q1 - q0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", q / (b - a) }')
		cpu=$(awk -v d=$((c1 - c0)) -v q=$((q1 - q0)) 'BEGIN { printf "%.3f", d / 1000 / q }')
		WQPS[$wl|$thr|$w]=$qps WCPU[$wl|$thr|$w]=$cpu WSTATE[$wl|$thr|$w]=$state
		log "[$RUN_NO/$NRUNS] $wl, $thr threads, window $((w + 1))/$nwin, digests $state: $qps qps, sluice CPU $cpu µs/query"
	done
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	if [ -z "${WQPS[$wl|$thr|$((nwin - 1))]:-}" ]; then
		FAILURES+=("$what: stopped before the last window (see $logf)")
	fi
	sysbench_figures "$logf" "$rc" "$what" || return 0
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

if [ "$MODE" = ab ] || [ "$MODE" = haproxy ] || [ "$MODE" = floor ]; then
	start_sluice
	[ "$MODE" = ab ] || start_haproxy
	if [ "$MODE" = floor ]; then
		for e in "${FLOOR_ENGINE_LIST[@]}"; do start_floor "$e"; done
	fi
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for ((r = 1; r <= ROUNDS; r++)); do
				for v in "${VARIANTS[@]}"; do
					measure "$wl" "$thr" "$v" "$r"
				done
			done
		done
	done
	if [ "$SYSCALLS" = 1 ]; then
		log "strace passes (not timed): ${SYSCALL_DURATION}s per proxy and cell"
		start_questions_client
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				for v in "${VARIANTS[@]:1}"; do
					syscall_pass "$wl" "$thr" "$v"
				done
			done
		done
	fi
	stop_sluice
	stop_haproxy
	stop_floor
elif [ "$MODE" = stats ]; then
	start_sluice
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			measure "$wl" "$thr" direct 1
			measure_interleaved "$wl" "$thr"
		done
	done
	DIGESTS_SEEN=$(admin "SELECT COUNT(*) FROM stats_mysql_query_digest") || DIGESTS_SEEN="?"
	stop_sluice
elif [ "$MODE" = builds ]; then
	for wl in "${WORKLOAD_LIST[@]}"; do
		for thr in "${THREAD_LIST[@]}"; do
			for ((r = 1; r <= ROUNDS; r++)); do
				measure "$wl" "$thr" direct "$r"
				# alternate which build goes first, so neither always follows the direct run
				if ((r % 2)); then order=(before after); else order=(after before); fi
				for b in "${order[@]}"; do
					if [ "$b" = before ]; then SLUICE_CMD=("${BEFORE_CMD[@]}"); else SLUICE_CMD=("${AFTER_CMD[@]}"); fi
					start_sluice
					measure "$wl" "$thr" "$b" "$r"
					stop_sluice
				done
			done
		done
	done
	SLUICE_CMD=("${AFTER_CMD[@]}")
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

# A cell whose runs of one endpoint differ by DISTURBED× or more between rounds (its QPS, or its
# CPU per statement) had the machine taken from it for part of the time: its medians may set a
# disturbed round of one endpoint beside a clean round of another. Say so beside the table.
# (Stats mode's windows are not rounds, so there only the direct runs are looked at.)
for wl in "${WORKLOAD_LIST[@]}"; do
	for thr in "${THREAD_LIST[@]}"; do
		found=""
		for v in "${VARIANTS[@]}"; do
			[ "$MODE" != stats ] || [ "$v" = direct ] || continue
			spread=$(disturbed_spread "${QPS[$wl|$thr|$v]:-}" "$DISTURBED")
			[ -z "$spread" ] || found+="${found:+, }$v QPS $spread"
			spread=$(disturbed_spread "${CPU[$wl|$thr|$v]:-}" "$DISTURBED")
			[ -z "$spread" ] || found+="${found:+, }$v CPU per statement $spread"
		done
		[ -z "$found" ] || NOTES+=("$wl at $thr threads: $found over the rounds: the machine was disturbed during this cell; rerun it (THREADS=$thr WORKLOADS=$wl) before quoting it")
	done
done

# --- report ---------------------------------------------------------------------------
CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -n "$CPU_MODEL" ] || CPU_MODEL=$(uname -m)
PARAMS="MODE=$MODE DURATION=$DURATION THREADS=$(shq "$THREADS") WORKLOADS=$(shq "$WORKLOADS")"
PARAMS+=" TABLES=$TABLES TABLE_SIZE=$TABLE_SIZE ROUNDS=$ROUNDS${WINDOW:+ WINDOW=$WINDOW}${RATE:+ RATE=$RATE} DB_PS_MODE=$DB_PS_MODE WARMUP=$WARMUP"
[ "$SYSCALLS" = 1 ] && PARAMS+=" SYSCALLS=1 SYSCALL_DURATION=$SYSCALL_DURATION"
[ -n "$SLUICE_ARGS" ] && PARAMS+=" SLUICE_ARGS=$(shq "$SLUICE_ARGS")"
[ -n "$SLUICE_BIN" ] && PARAMS+=" SLUICE_BIN=$(shq "$SLUICE_BIN")"
[ "$MODE" = floor ] && PARAMS+=" L4FLOOR_BIN=$(shq "$L4FLOOR_BIN") FLOOR_ENGINES=$(shq "${FLOOR_ENGINE_LIST[*]}")"

{
	echo
	case "$MODE" in
	ab) echo "### sluice vs direct, $START_TS" ;;
	haproxy) echo "### sluice vs HAProxy (mode tcp) vs direct, $START_TS" ;;
	floor) echo "### the L4 floor: sluice, HAProxy (mode tcp) and bare forwarders on epoll and io_uring, $START_TS" ;;
	runtime) echo "### sluice runtimes: steal vs per-core, $START_TS" ;;
	builds) echo "### sluice builds: before vs after, $START_TS" ;;
	stats) echo "### statistics overhead: digests on vs off, $START_TS" ;;
	esac
	echo
	echo "- machine: $(nproc) CPUs, $CPU_MODEL, Linux $(uname -r); sysbench, mariadbd and sluice share these CPUs"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV${SLUICE_ARGS:+, args \`$SLUICE_ARGS\`}"
	[ "$MODE" != floor ] || echo "- l4floor: \`$L4FLOOR_BIN\` (bench/l4floor), \`--threads $(sluice_workers)\`, engines: ${FLOOR_ENGINE_LIST[*]} (bench/README.md, \"The L4 floor\")"
	[ "$MODE" != haproxy ] && [ "$MODE" != floor ] || echo "- HAProxy: $("$HAPROXY_BIN" -v 2>/dev/null | head -n 1 | sed 's/ - https.*//'), \`mode tcp\`, \`nbthread $HAPROXY_THREADS\` (= sluice's workers), config: global nbthread/maxconn 4096, defaults mode tcp with 5 s connect and 1 h client/server timeouts, one listen section with the one server"
	[ "$MODE" != floor ] || [[ " ${FLOOR_ENGINE_LIST[*]} " != *-socket* ]] || echo "- backend leg: the -socket endpoints reach MariaDB over its Unix socket; sluice, HAProxy, the other endpoints and direct over TCP on 127.0.0.1"
	[ "$SYSCALLS" != 1 ] || echo "- system calls: \`strace -f -ttt -s 0 -p <proxy pid>\` attached to an untimed run after the timed rounds; the calls of a ${SYSCALL_DURATION}s window (by strace's timestamps) divided by the statements the server received in it (its Questions counter)"
	[ "$MODE" != builds ] || echo "- before: \`$SLUICE_BIN_BEFORE\` ($("${BEFORE_CMD[0]}" --version 2>/dev/null || echo '?'))"
	echo "- command: \`$INVOCATION\`"
	echo "- parameters: \`$PARAMS bench/compare.sh\`"
	sb_args '<workload>' '<N>' '<port>' "$DURATION"
	if [ "$MODE" = stats ]; then
		sb_args '<workload>' '<N>' '<port>' '<seconds>'
		echo "- each run: \`${SB[*]} run\`: direct for ${DURATION}s, through sluice for $((2 * ROUNDS)) windows of ${WINDOW}s;" \
			"sluice CPU per window = the run time of its threads from /proc/PID/task/*/schedstat; total ${ELAPSED}s"
	else echo "- each run: \`${SB[*]} run\`;" \
		"$ROUNDS round(s) alternated, medians shown; sluice CPU = utime+stime (+cutime+cstime) of its process from /proc/PID/stat; total ${ELAPSED}s"
	fi
	echo
	if [ "$MODE" = haproxy ]; then
		echo "| workload | threads | direct QPS | sluice QPS | HAProxy QPS | sluice/direct | HAProxy/direct | direct p95 ms | sluice p95 ms | HAProxy p95 ms | sluice CPU µs/query | HAProxy CPU µs/query | sluice ÷ HAProxy CPU |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				s=$(median "${QPS[$wl|$thr|sluice]:-}")
				h=$(median "${QPS[$wl|$thr|haproxy]:-}")
				cs=$(median "${CPU[$wl|$thr|sluice]:-}" %.1f)
				ch=$(median "${CPU[$wl|$thr|haproxy]:-}" %.1f)
				echo "| $wl | $thr | $d | $s | $h | $(ratio "$s" "$d") | $(ratio "$h" "$d")" \
					"| $(median "${P95[$wl|$thr|direct]:-}" %.2f) | $(median "${P95[$wl|$thr|sluice]:-}" %.2f)" \
					"| $(median "${P95[$wl|$thr|haproxy]:-}" %.2f) | $cs | $ch | $(ratio "$cs" "$ch") |"
			done
		done
	elif [ "$MODE" = floor ]; then
		echo "QPS and CPU µs per statement of each endpoint (medians); ÷ H: CPU per statement ÷ HAProxy's in the same cell."
		echo
		head="| workload | threads | direct QPS | sluice QPS | HAProxy QPS" rule="|---|---:|---:|---:|---:"
		# l4floor engines as "l4 ENGINE", the second sluices by their own names
		labels=()
		for e in "${FLOOR_ENGINE_LIST[@]}"; do case "$e" in sluice-* | haproxy-*) labels+=("$e") ;; *) labels+=("l4 $e") ;; esac; done
		for e in "${labels[@]}"; do head+=" | $e QPS" rule+="|---:"; done
		head+=" | sluice CPU | HAProxy CPU" rule+="|---:|---:"
		for e in "${labels[@]}"; do head+=" | $e CPU" rule+="|---:"; done
		head+=" | sluice ÷ H" rule+="|---:"
		for e in "${labels[@]}"; do head+=" | $e ÷ H" rule+="|---:"; done
		echo "$head |"
		echo "$rule|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				ch=$(median "${CPU[$wl|$thr|haproxy]:-}" %.1f)
				row="| $wl | $thr"
				for v in "${VARIANTS[@]}"; do row+=" | $(median "${QPS[$wl|$thr|$v]:-}")"; done
				for v in "${VARIANTS[@]:1}"; do row+=" | $(median "${CPU[$wl|$thr|$v]:-}" %.1f)"; done
				for v in sluice "${VARIANTS[@]:3}"; do row+=" | $(ratio "$(median "${CPU[$wl|$thr|$v]:-}" %.1f)" "$ch")"; done
				echo "$row |"
			done
		done
	elif [ "$MODE" = ab ]; then
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
		echo "One sysbench run per cell through sluice, digests switched every ${WINDOW}s (on off off on …);"
		echo "per window sluice's QPS (its Questions counter) and CPU per query (its threads' schedstat). \"Paired\": the median"
		echo "over the $ROUNDS window pairs of (on window ÷ off window) and (on − off)."
		echo
		echo "| workload | threads | direct QPS | digests on QPS | digests off QPS | on/off (paired) | on/direct | on CPU µs/query | off CPU µs/query | CPU on − off µs (paired) | per pair: on/off, CPU on − off |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				ons="" offs="" cons="" coffs="" ratios="" diffs="" pairs=""
				for ((p = 0; p < ROUNDS; p++)); do
					a="" b="" ca="" cb=""
					for w in $((2 * p)) $((2 * p + 1)); do
						[ -n "${WQPS[$wl|$thr|$w]:-}" ] || continue
						if [ "${WSTATE[$wl|$thr|$w]}" = on ]; then
							a=${WQPS[$wl|$thr|$w]} ca=${WCPU[$wl|$thr|$w]}
						else
							b=${WQPS[$wl|$thr|$w]} cb=${WCPU[$wl|$thr|$w]}
						fi
					done
					if [ -z "$a" ] || [ -z "$b" ]; then continue; fi
					ons+="$a " offs+="$b " cons+="$ca " coffs+="$cb "
					q=$(ratio "$a" "$b")
					c=$(awk -v x="$ca" -v y="$cb" 'BEGIN { printf "%.2f", x - y }')
					ratios+="$q " diffs+="$c "
					pairs+="${pairs:+; }$q, $c"
				done
				on=$(median "$ons")
				echo "| $wl | $thr | $d | $on | $(median "$offs") | $(median "$ratios" %.3f) | $(ratio "$on" "$d")" \
					"| $(median "$cons" %.2f) | $(median "$coffs" %.2f) | $(median "$diffs" %.2f) | $pairs |"
			done
		done
		echo
		echo "Digest rows in stats_mysql_query_digest at the end: $DIGESTS_SEEN."
	elif [ "$MODE" = builds ]; then
		echo "| workload | threads | direct QPS | before QPS | after QPS | before/direct | after/direct | after/before | before p95 ms | after p95 ms | before CPU µs/query | after CPU µs/query |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				d=$(median "${QPS[$wl|$thr|direct]:-}")
				b=$(median "${QPS[$wl|$thr|before]:-}")
				a=$(median "${QPS[$wl|$thr|after]:-}")
				echo "| $wl | $thr | $d | $b | $a | $(ratio "$b" "$d") | $(ratio "$a" "$d") | $(ratio "$a" "$b")" \
					"| $(median "${P95[$wl|$thr|before]:-}" %.2f) | $(median "${P95[$wl|$thr|after]:-}" %.2f)" \
					"| $(median "${CPU[$wl|$thr|before]:-}" %.1f) | $(median "${CPU[$wl|$thr|after]:-}" %.1f) |"
			done
		done
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
	if [ "$SYSCALLS" = 1 ]; then
		echo
		echo "System calls per statement (separate strace pass, not timed; direct makes none in a proxy):"
		echo
		echo "| workload | threads | endpoint | QPS under strace | system calls per statement | by kind (≥ 0.005 per statement) |"
		echo "|---|---:|---|---:|---:|---|"
		for wl in "${WORKLOAD_LIST[@]}"; do
			for thr in "${THREAD_LIST[@]}"; do
				for v in "${VARIANTS[@]:1}"; do
					k="$wl|$thr|$v"
					echo "| $wl | $thr | $v | ${SYS_QPS[$k]:-FAIL} | ${SYS_TOTAL[$k]:-FAIL} | $(syscall_kinds "${SYS[$k]:-}") |"
				done
			done
		done
	fi
	report_problems
} >"$WORK/report.md"

publish_report "$WORK/report.md"
