#!/usr/bin/env bash
# bench/pool.sh: sluice's connection pool against a private MariaDB, directly and through
# sluice, alternated A B A B. Two scenarios: "burst" (thousands of mostly idle client
# connections, a hundred busy at a time, through a pool of 8 backend connections: QPS, latency,
# backend connections used, sluice's memory per idle client) and "ps64" (sysbench
# oltp_read_only with prepared statements, 64 threads, through a pool of 4).
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/pool.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --scenarios "S ..."     SCENARIOS   scenarios to run, of: burst ps64 [burst ps64]
  --duration SECONDS      DURATION    measured seconds per run [20]
  --rounds N              ROUNDS      A/B alternations per scenario; medians are taken over them [2]
  --clients N             CLIENTS     burst: client connections, opened up front [2000]
  --active N              ACTIVE      burst: clients running a burst at any moment [100]
  --burst N               BURST       burst: queries per burst [20]
  --burst-ps 0|1          BURST_PS    burst: 1 = server-side prepared statements, 0 = text
                                      protocol with interpolateParams=true [0]
  --pool N                POOL        burst: the backend's max_connections in sluice (pool size) [8]
  --ps-pool N             PS_POOL     ps64: the backend's max_connections in sluice [4]
  --ps-threads N          PS_THREADS  ps64: sysbench threads [64]
  --pool-section 0|1      POOL_SECTION  1: write `[pool] multiplexing = true` and the pool sizes
                                      above into sluice's config; 0: no [pool] section and a
                                      max_connections that fits one backend connection per
                                      client (for a sluice without a pool) [1]
  --hold SECONDS          HOLD        burst: idle time after all clients connected, when
                                      sluice's RSS is read [3]
  --warmup SECONDS        WARMUP      burst: unmeasured load before each run; ps64: one direct
                                      sysbench warm-up before the rounds [3]
  --rows N                ROWS        burst: rows in burst_t [10000]
  --tables N              TABLES      ps64: sysbench tables [4]
  --table-size N          TABLE_SIZE  ps64: rows per table [10000]
  --sluice-args "ARGS"    SLUICE_ARGS extra arguments for sluice, e.g. "--workers 2"
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  command to run instead of target/release/sluice (it gets
                                      `--config FILE`, and must exec so that its pid is the
                                      proxy's). When unset, `cargo build --release -p sluice`
                                      is run first.
                          KEEP_TMP    1 = keep the temp dir (datadir, configs, logs, outputs)

The load generator bench/burst (Go) is built with `go build` into target/bench/ when missing
or older than its sources. Sluice is restarted for every sluice run, so that each run's
memory and backend-connection figures start from a fresh process.

Smoke test:  DURATION=5 ROUNDS=1 CLIENTS=300 ACTIVE=30 bench/pool.sh
EOF
}

PROG=pool.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # die log shq alive stop_proc free_port take_port cpu_ticks median ratio parse_options pick_sluice sysbench_figures cpu_per_query report_problems publish_report spawn_supervised stop_supervised run_bounded vmrss_kib

# --- options --------------------------------------------------------------------------
OPT_VARS=(SCENARIOS DURATION ROUNDS CLIENTS ACTIVE BURST BURST_PS POOL PS_POOL PS_THREADS POOL_SECTION
	HOLD WARMUP ROWS TABLES TABLE_SIZE SLUICE_ARGS OUT SLUICE_BIN KEEP_TMP)
FLAG_VARS=(SCENARIOS DURATION ROUNDS CLIENTS ACTIVE BURST BURST_PS POOL PS_POOL PS_THREADS POOL_SECTION
	HOLD WARMUP ROWS TABLES TABLE_SIZE SLUICE_ARGS OUT) # settable as --name too
parse_options "$@"

SCENARIOS=${SCENARIOS:-burst ps64}
DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-2000}
ACTIVE=${ACTIVE:-100}
BURST=${BURST:-20}
BURST_PS=${BURST_PS:-0}
POOL=${POOL:-8}
PS_POOL=${PS_POOL:-4}
PS_THREADS=${PS_THREADS:-64}
POOL_SECTION=${POOL_SECTION:-1}
HOLD=${HOLD:-3}
WARMUP=${WARMUP:-3}
ROWS=${ROWS:-10000}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-10000}
SLUICE_ARGS=${SLUICE_ARGS:-}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}

for v in DURATION ROUNDS CLIENTS ACTIVE BURST POOL PS_POOL PS_THREADS HOLD WARMUP ROWS TABLES TABLE_SIZE; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
for v in DURATION ROUNDS CLIENTS ACTIVE BURST POOL PS_POOL PS_THREADS HOLD ROWS TABLES TABLE_SIZE; do
	[ "${!v}" -gt 0 ] || die "$v must be > 0"
done
[ "$ACTIVE" -le "$CLIENTS" ] || die "ACTIVE ($ACTIVE) must not exceed CLIENTS ($CLIENTS)"
case "$POOL_SECTION" in 0 | 1) ;; *) die "POOL_SECTION must be 0 or 1" ;; esac
case "$BURST_PS" in 0 | 1) ;; *) die "BURST_PS must be 0 or 1" ;; esac
read -ra SCENARIO_ARGS <<<"$SCENARIOS"
read -ra SLUICE_EXTRA <<<"$SLUICE_ARGS"
SCENARIO_LIST=()
for s in burst ps64; do # fixed order
	for a in ${SCENARIO_ARGS[@]+"${SCENARIO_ARGS[@]}"}; do
		[ "$a" = "$s" ] && { SCENARIO_LIST+=("$s"); break; }
	done
done
for a in ${SCENARIO_ARGS[@]+"${SCENARIO_ARGS[@]}"}; do
	case "$a" in burst | ps64) ;; *) die "SCENARIOS: unknown scenario '$a' (burst, ps64)" ;; esac
done
[ ${#SCENARIO_LIST[@]} -gt 0 ] || die "SCENARIOS is empty"
has_scenario() { [[ " ${SCENARIO_LIST[*]} " == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- tools ----------------------------------------------------------------------------
PATH=$PATH:/usr/sbin:/sbin:/usr/local/go/bin
require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)

# Open files: the Go tool holds CLIENTS sockets, mariadbd as many in a direct run, sluice two
# per client when it does not multiplex. Every process started here inherits this limit.
NEED_FDS=$((2 * (CLIENTS > PS_THREADS ? CLIENTS : PS_THREADS) + 1024))
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FDS=$(ulimit -n)
if [ "$FDS" != unlimited ] && [ "$FDS" -lt "$NEED_FDS" ]; then
	die "the open-file limit is $FDS (hard limit $(ulimit -Hn)), CLIENTS=$CLIENTS needs at least $NEED_FDS:" \
		"raise the hard limit (as root: ulimit -Hn 65536, or LimitNOFILE= in a systemd unit) or lower CLIENTS"
fi
DB_MAX_CONN=$((CLIENTS + 100 > 2100 ? CLIENTS + 100 : 2100))
((DB_MAX_CONN >= PS_THREADS + 100)) || DB_MAX_CONN=$((PS_THREADS + 100))

# burst_bin: builds bench/burst into target/bench/burst when missing or older than its sources.
BURST_BIN=$ROOT/target/bench/burst
burst_bin() {
	local src=$ROOT/bench/burst f stale=0
	[ -x "$BURST_BIN" ] || stale=1
	for f in "$src"/*.go "$src/go.mod" "$src/go.sum"; do
		[ "$f" -nt "$BURST_BIN" ] && stale=1
	done
	[ "$stale" = 1 ] || return 0
	command -v go >/dev/null || die "go not found: it builds the load generator bench/burst (https://go.dev/dl/)"
	log "building bench/burst (go build -o $BURST_BIN)"
	mkdir -p "$(dirname "$BURST_BIN")"
	(cd "$src" && go build -o "$BURST_BIN.tmp" .) >&2 || die "go build of bench/burst failed"
	mv "$BURST_BIN.tmp" "$BURST_BIN"
}
has_scenario burst && burst_bin

# --- estimate -------------------------------------------------------------------------
NRUNS=$((${#SCENARIO_LIST[@]} * ROUNDS * 2))
# ~1 s per run to start sluice and settle; a burst run adds its connect phase (~1 ms per client
# at 2 cores), HOLD and WARMUP; ~10 s of set-up, prepare at ~50k rows/s, the ps64 warm-up.
estimate() { # DURATION CLIENTS
	local e=0 per
	if has_scenario burst; then
		per=$(($1 + 1 + HOLD + WARMUP + $2 / 1000))
		e=$((e + ROUNDS * 2 * per + ROWS / 50000))
	fi
	has_scenario ps64 && e=$((e + ROUNDS * 2 * ($1 + 1) + WARMUP + TABLES * TABLE_SIZE / 50000))
	e=$((e + 10))
	echo "~$((e / 60)) min $((e % 60)) s"
}
log "${SCENARIO_LIST[*]}: $ROUNDS round(s) × 2 variants (direct, sluice) = $NRUNS runs of ${DURATION}s"
log "estimated run time: $(estimate "$DURATION" "$CLIENTS") (defaults: 8 runs of 20 s, 2000 clients)"

# --- sluice binary --------------------------------------------------------------------
pick_sluice

# --- processes and teardown -----------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-pool.XXXXXX)
SOCK=$WORK/mysqld.sock
DB_USER=sbtest
DB_PASS=sbtest-pool-bench
DB_PID="" DB_PORT="" SLUICE_PID="" SLUICE_PORT="" RUN_PID="" SAMPLER_PID=""

stop_sluice() {
	stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	SLUICE_PID=""
}
stop_sampler() {
	[ -n "$SAMPLER_PID" ] || return 0
	kill -TERM "$SAMPLER_PID" 2>/dev/null || true
	stop_proc "$SAMPLER_PID" sampler 5
	SAMPLER_PID=""
}
stop_run() { # the load generator or sysbench: `timeout` leads its own process group
	[ -n "$RUN_PID" ] || return 0
	kill -TERM -- "-$RUN_PID" 2>/dev/null || true
	stop_proc "$RUN_PID" "load generator" 15
	RUN_PID=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if failed_by_itself "$rc"; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log:" >&2; tail -n 20 "$WORK/sluice.log" >&2; }
		[ -s "$WORK/mysqld.err" ] && grep -q ERROR "$WORK/mysqld.err" &&
			{ echo "--- last lines of mariadbd's log:" >&2; tail -n 10 "$WORK/mysqld.err" >&2; }
	fi
	stop_run
	stop_sampler
	stop_sluice
	if [ -n "$DB_PID" ]; then
		stop_proc "$DB_PID" mariadbd 60
		DB_PID=""
	fi
	finish_work "$rc"
}
trap_cleanup

sql() { timeout 30 mariadb --no-defaults -S "$SOCK" -uroot -N -B "$@"; }

start_mariadb() {
	log "initialising a private MariaDB in $WORK (max_connections $DB_MAX_CONN)"
	mariadb-install-db --no-defaults --datadir="$WORK/data" --auth-root-authentication-method=normal \
		--skip-test-db --user=root >"$WORK/install.log" 2>&1 ||
		{ tail -n 20 "$WORK/install.log" >&2; die "mariadb-install-db failed"; }
	take_port DB_PORT
	mariadbd --no-defaults --datadir="$WORK/data" --bind-address=127.0.0.1 --port="$DB_PORT" \
		--socket="$SOCK" --pid-file="$WORK/mysqld.pid" --log-error="$WORK/mysqld.err" --user=root \
		--skip-name-resolve --max-connections="$DB_MAX_CONN" --innodb-buffer-pool-size=256M --skip-log-bin \
		--performance-schema=OFF </dev/null >/dev/null 2>&1 &
	DB_PID=$!
	local i
	for ((i = 0; i < 600; i++)); do
		alive "$DB_PID" || die "mariadbd exited during start-up"
		mariadb-admin --no-defaults -S "$SOCK" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	((i < 600)) || die "mariadbd not ready after 60 s"
	sql -e "CREATE USER IF NOT EXISTS $DB_USER@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
		GRANT ALL PRIVILEGES ON *.* TO $DB_USER@'127.0.0.1';
		CREATE DATABASE IF NOT EXISTS sbtest;"
	DB_VERSION=$(sql -e 'SELECT VERSION()')
	local got
	got=$(sql -e 'SELECT @@max_connections')
	[ "$got" -ge "$DB_MAX_CONN" ] || die "mariadbd runs with max_connections $got, not $DB_MAX_CONN (open-file limit?)"
	log "mariadbd $DB_VERSION on 127.0.0.1:$DB_PORT (pid $DB_PID)"
}

# --- sluice ---------------------------------------------------------------------------
# backend_max SCENARIO: the server's max_connections in sluice's config: the pool size with
# [pool], else room for one backend connection per client.
backend_max() {
	if [ "$POOL_SECTION" = 1 ]; then
		case "$1" in burst) echo "$POOL" ;; ps64) echo "$PS_POOL" ;; esac
	else
		case "$1" in burst) echo $((CLIENTS + 100)) ;; ps64) echo $((PS_THREADS + 100)) ;; esac
	fi
}

# write_config SCENARIO PORT FILE
write_config() {
	local proxy_max=$((CLIENTS + 100 > 10000 ? CLIENTS + 100 : 10000))
	{
		cat <<EOF
# bench/pool.sh: scenario "$1"
[proxy]
listen = ["127.0.0.1:$2"]
max_connections = $proxy_max

[tls]
enabled = false

EOF
		if [ "$POOL_SECTION" = 1 ]; then
			cat <<EOF
[pool]
multiplexing = true
checkout_timeout_ms = 10000

EOF
		fi
		cat <<EOF
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = ${DB_PORT:-3306}
max_connections = $(backend_max "$1")

[[mysql_users]]
username = "$DB_USER"
password = "$DB_PASS"
default_hostgroup = 0
EOF
	} >"$3"
}

# check_configs: `sluice --check` on each scenario's configuration before anything runs.
check_configs() {
	local s out
	for s in "${SCENARIO_LIST[@]}"; do
		write_config "$s" 6033 "$WORK/check-$s.toml" # before MariaDB starts: DB_PORT unknown yet
		if ! out=$(timeout 30 "${SLUICE_CMD[@]}" --config "$WORK/check-$s.toml" --check 2>&1); then
			echo "$out" >&2
			if [ "$POOL_SECTION" = 1 ] && [[ $out == *pool* ]]; then
				die "this sluice rejects the [pool] section (see above); POOL_SECTION=0 runs without it"
			fi
			die "sluice --check rejects the configuration of scenario '$s' ($WORK/check-$s.toml)"
		fi
	done
}

# start_sluice SCENARIO: a fresh sluice on a fresh port with that scenario's configuration;
# waits until SELECT 1 through it works.
start_sluice() {
	local i err=""
	take_port SLUICE_PORT
	write_config "$1" "$SLUICE_PORT" "$WORK/sluice-$1.toml"
	echo "=== $(date +%T) start: ${SLUICE_CMD[*]} --config $WORK/sluice-$1.toml ${SLUICE_EXTRA[*]:-}" >>"$WORK/sluice.log"
	spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --config "$WORK/sluice-$1.toml" \
		${SLUICE_EXTRA[@]+"${SLUICE_EXTRA[@]}"}
	SLUICE_PID=$SPAWNED_PID
	await_answer sluice "$SLUICE_PID" "$SLUICE_PORT" "$DB_USER" "$DB_PASS"
}

# --- MariaDB's view of the connections ------------------------------------------------
# backend_conns: connections of the benchmark user MariaDB has now (the sampling session
# is root's, so it is not counted).
backend_conns() {
	sql -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '$DB_USER'" 2>/dev/null
}
# start_sampler FILE: backend_conns every 0.5 s into FILE until stop_sampler (or 1 h).
start_sampler() {
	local f=$1
	(
		end=$((SECONDS + 3600))
		while [ "$SECONDS" -lt "$end" ]; do
			backend_conns >>"$f" || true
			sleep 0.5
		done
	) &
	SAMPLER_PID=$!
}
# max_used: Max_used_connections since the FLUSH STATUS before the run (which resets it to the
# connections open then). It counts every session, so also the script's root session when one
# overlapped the peak (the idle count, the 0.5 s sampler): the true peak or one more.
max_used() {
	sql -e "SHOW GLOBAL STATUS LIKE 'Max_used_connections'" | awk '{ print $2 }'
}
max_of() { # FILE -> the largest number in it, or "?"
	awk 'NF && $1 + 0 > m { m = $1 + 0 } NF { n++ } END { print n ? m + 0 : "?" }' "$1" 2>/dev/null || echo "?"
}

# --- results --------------------------------------------------------------------------
declare -A QPS P50 P95 P99 CONN_MS BACKEND_PEAK BACKEND_IDLE MAX_USED CPU # key "scenario|variant"
RSS0=() RSSN=() RSS_PER=()
FAILURES=()
NOTES=()
RUN_NO=0

# kv LINE KEY: the value of KEY=value in LINE.
kv() { awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) { print substr($i, length(k) + 2); exit } }' <<<"$1"; }

# sluice_died WHAT: records a failure when sluice is not running any more.
sluice_died() {
	alive "$SLUICE_PID" && return 1
	FAILURES+=("$1: sluice died (see its log)")
	log "[$RUN_NO/$NRUNS] $1: FAILED, sluice died; last lines of its log:"
	tail -n 20 "$WORK/sluice.log" >&2
	stop_sluice
	return 0
}

burst_args() { # PORT: sets BURST_CMD to the load generator's command line
	BURST_CMD=("$BURST_BIN" -dsn "$DB_USER:$DB_PASS@tcp(127.0.0.1:$1)/sbtest" -clients "$CLIENTS"
		-active "$ACTIVE" -burst "$BURST" -rows "$ROWS" -duration "${DURATION}s" -warmup "${WARMUP}s"
		-hold "${HOLD}s")
	[ "$BURST_PS" = 0 ] || BURST_CMD+=(-ps)
}

# measure_burst VARIANT ROUND: one run of the load generator, direct or through a fresh sluice.
measure_burst() {
	local variant=$1 round=$2 port out err rc=0 i line rss0="" rssn="" idle="" per
	local what="burst, $variant, round $round" limit=$((HOLD + WARMUP + DURATION + 120))
	RUN_NO=$((RUN_NO + 1))
	out=$WORK/run-$(printf %03d "$RUN_NO")-burst-$variant-$round.out
	err=${out%.out}.err
	if [ "$variant" = direct ]; then
		port=$DB_PORT
	else
		start_sluice burst
		port=$SLUICE_PORT
		sleep 0.5
		rss0=$(vmrss_kib "$SLUICE_PID") || rss0=""
	fi
	sql -e 'FLUSH STATUS'
	[ "$variant" = direct ] || start_sampler "$out.samples"
	burst_args "$port"
	timeout --kill-after=10 "$limit" "${BURST_CMD[@]}" </dev/null >"$out" 2>"$err" &
	RUN_PID=$!
	# All clients connected and idle: sluice's RSS and MariaDB's connection count, during -hold.
	for ((i = 0; i < 1200; i++)); do
		grep -q '^connected' "$err" 2>/dev/null && break
		alive "$RUN_PID" || break
		sleep 0.1
	done
	if grep -q '^connected' "$err" 2>/dev/null; then
		[ "$variant" = direct ] || rssn=$(vmrss_kib "$SLUICE_PID") || rssn=""
		idle=$(backend_conns) || idle=""
	fi
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	stop_sampler
	if [ "$variant" != direct ] && sluice_died "$what"; then return 0; fi
	line=$(grep -m1 '^clients=' "$out" || true)
	if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
		FAILURES+=("$what: load generator exit $rc: $(grep -m1 -E 'burst:' "$err" || tail -n 1 "$err")")
		log "[$RUN_NO/$NRUNS] $what: FAILED (exit $rc); its output:"
		tail -n 15 "$err" >&2
		cat "$out" >&2
		[ "$variant" = direct ] || stop_sluice
		return 0
	fi
	local key="burst|$variant" mu peak
	QPS[$key]+="$(kv "$line" qps) "
	P50[$key]+="$(kv "$line" p50_us) "
	P95[$key]+="$(kv "$line" p95_us) "
	P99[$key]+="$(kv "$line" p99_us) "
	CONN_MS[$key]+="$(kv "$line" connect_ms) "
	mu=$(max_used)
	MAX_USED[$key]+="$mu "
	[ -z "$idle" ] || BACKEND_IDLE[$key]+="$idle "
	local txt
	txt="$(kv "$line" qps) qps, p50 $(kv "$line" p50_us) µs, p95 $(kv "$line" p95_us) µs, $(kv "$line" queries) queries, connect $(kv "$line" connect_ms) ms; MariaDB: ${idle:-?} connections with all clients idle, Max_used_connections $mu"
	if [ "$variant" != direct ]; then
		peak=$(max_of "$out.samples")
		BACKEND_PEAK[$key]+="$peak "
		txt+=", sampled peak $peak"
		if [ -n "$rss0" ] && [ -n "$rssn" ]; then
			per=$(awk -v a="$rss0" -v b="$rssn" -v n="$CLIENTS" 'BEGIN { printf "%.2f", (b - a) / n }')
			RSS0+=("$rss0") RSSN+=("$rssn") RSS_PER+=("$per")
			txt+="; sluice RSS $rss0 KiB → $rssn KiB with $CLIENTS idle clients = $per KiB/client"
		else
			NOTES+=("$what: sluice's RSS could not be read")
		fi
		stop_sluice
	fi
	log "[$RUN_NO/$NRUNS] $what: $txt"
}

sb_args() { # THREADS PORT SECONDS: sets SB to the sysbench command line (without the command)
	SB=(sysbench oltp_read_only --mysql-host=127.0.0.1 --mysql-port="$2" --mysql-user="$DB_USER"
		--mysql-password="$DB_PASS" --mysql-db=sbtest --tables="$TABLES" --table-size="$TABLE_SIZE"
		--threads="$1" --time="$3" --report-interval=0 --percentile=95 --db-ps-mode=auto)
}

# measure_ps64 VARIANT ROUND: one sysbench run, direct or through a fresh sluice.
measure_ps64() {
	local variant=$1 round=$2 port logf rc=0 t0="" t1="" peak="" mu
	local what="ps64, $variant, round $round"
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-ps64-$variant-$round.log
	if [ "$variant" = direct ]; then
		port=$DB_PORT
	else
		start_sluice ps64
		port=$SLUICE_PORT
		t0=$(cpu_ticks "$SLUICE_PID") || t0=""
	fi
	sql -e 'FLUSH STATUS'
	[ "$variant" = direct ] || start_sampler "$logf.samples"
	sb_args "$PS_THREADS" "$port" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	stop_sampler
	if [ "$variant" != direct ]; then
		sleep 0.3 # let the proxy finish closing the sessions
		sluice_died "$what" && return 0
		t1=$(cpu_ticks "$SLUICE_PID") || t1=""
		peak=$(max_of "$logf.samples")
		stop_sluice
	fi
	mu=$(max_used)
	sysbench_figures "$logf" "$rc" "$what" p95 || return 0
	local key="ps64|$variant"
	QPS[$key]+="$SB_QPS "
	P95[$key]+="$SB_P95 "
	MAX_USED[$key]+="$mu "
	[ -z "$peak" ] || BACKEND_PEAK[$key]+="$peak "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	log "[$RUN_NO/$NRUNS] $what: $SB_QPS qps, p95 $SB_P95 ms, $SB_Q queries$CPU_TXT; MariaDB: Max_used_connections $mu${peak:+, sampled peak $peak}"
}

# --- run ------------------------------------------------------------------------------
START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
check_configs
start_mariadb

if has_scenario burst; then
	log "burst_t: $ROWS rows"
	run_bounded 600 "$WORK/setup.log" "$BURST_BIN" -setup -rows "$ROWS" \
		-dsn "$DB_USER:$DB_PASS@tcp(127.0.0.1:$DB_PORT)/sbtest" || { cat "$WORK/setup.log" >&2; die "burst -setup failed"; }
fi
if has_scenario ps64; then
	log "sysbench prepare: $TABLES tables × $TABLE_SIZE rows"
	sb_args $((TABLES < 8 ? TABLES : 8)) "$DB_PORT" 1
	run_bounded 3600 "$WORK/prepare.log" "${SB[@]}" prepare || { tail -n 20 "$WORK/prepare.log" >&2; die "sysbench prepare failed"; }
	if [ "$WARMUP" -gt 0 ]; then
		log "warm-up: ${WARMUP}s of direct oltp_read_only"
		sb_args 4 "$DB_PORT" "$WARMUP"
		run_bounded $((WARMUP + 60)) "$WORK/warmup.log" "${SB[@]}" run || { tail -n 20 "$WORK/warmup.log" >&2; die "warm-up run failed"; }
	fi
fi

for s in "${SCENARIO_LIST[@]}"; do
	for ((r = 1; r <= ROUNDS; r++)); do
		"measure_$s" direct "$r"
		"measure_$s" sluice "$r"
	done
done
ELAPSED=$((SECONDS - START_S))

# --- report ---------------------------------------------------------------------------
CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -n "$CPU_MODEL" ] || CPU_MODEL=$(uname -m)
PARAMS="SCENARIOS=$(shq "${SCENARIO_LIST[*]}") DURATION=$DURATION ROUNDS=$ROUNDS CLIENTS=$CLIENTS ACTIVE=$ACTIVE BURST=$BURST"
PARAMS+=" BURST_PS=$BURST_PS POOL=$POOL PS_POOL=$PS_POOL PS_THREADS=$PS_THREADS POOL_SECTION=$POOL_SECTION HOLD=$HOLD"
PARAMS+=" WARMUP=$WARMUP ROWS=$ROWS TABLES=$TABLES TABLE_SIZE=$TABLE_SIZE"
[ -n "$SLUICE_ARGS" ] && PARAMS+=" SLUICE_ARGS=$(shq "$SLUICE_ARGS")"
[ -n "$SLUICE_BIN" ] && PARAMS+=" SLUICE_BIN=$(shq "$SLUICE_BIN")"
maxv() { # "v1 v2 ..." -> the largest, or "–"
	# shellcheck disable=SC2086 # word splitting of the value list is intended
	printf '%s\n' $1 | awk 'NF { if (n++ == 0 || $1 + 0 > m) m = $1 + 0 } END { print n ? m : "–" }'
}
ratio_row() { # LABEL ARRAY SCENARIO [FORMAT] -> "| LABEL | direct | sluice | sluice/direct |" from medians
	local -n values=$2
	local d s
	d=$(median "${values[$3|direct]:-}" "${4:-}") s=$(median "${values[$3|sluice]:-}" "${4:-}")
	echo "| $1 | $d | $s | $(ratio "$s" "$d") |"
}
pool_desc() { # SCENARIO
	if [ "$POOL_SECTION" = 1 ]; then
		echo "\`[pool] multiplexing = true\`, server \`max_connections = $(backend_max "$1")\` (the pool size)"
	else
		echo "**no \`[pool]\` section** (POOL_SECTION=0): one backend connection per client, server \`max_connections = $(backend_max "$1")\`"
	fi
}

{
	echo
	echo "### sluice connection pool, $START_TS"
	echo
	echo "- machine: $(nproc) CPUs, $CPU_MODEL, Linux $(uname -r); the load generator, mariadbd and sluice share these CPUs"
	echo "- mariadbd $DB_VERSION (private instance, buffer pool 256M, max_connections $DB_MAX_CONN, performance_schema off)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV${SLUICE_ARGS:+, args \`$SLUICE_ARGS\`}; a fresh sluice process for every sluice run"
	echo "- command: \`$INVOCATION\`"
	echo "- parameters: \`$PARAMS bench/pool.sh\`"
	echo "- $ROUNDS round(s) of direct then sluice per scenario, medians shown (MariaDB connection counts: the largest over the rounds); total ${ELAPSED}s"
	if has_scenario burst; then
		burst_args '<port>'
		BURST_CMD[0]=bench/burst
		BURST_CMD[2]="$DB_USER:…@tcp(127.0.0.1:<port>)/sbtest"
		echo
		echo "**burst**: \`${BURST_CMD[*]}\` (Go, go-sql-driver/mysql," \
			"$([ "$BURST_PS" = 1 ] && echo "server-side prepared statements, one per client" || echo "text protocol with interpolateParams=true"));" \
			"$CLIENTS connections opened and pinged up front, then $ACTIVE workers each take a random idle client," \
			"run $BURST \`SELECT c FROM burst_t WHERE id=?\` (random id, $ROWS rows) back to back and put it back;" \
			"latencies per query over the ${DURATION}s after the warm-up. Sluice: $(pool_desc burst)."
		echo
		echo "| burst | direct | sluice | sluice/direct |"
		echo "|---|---:|---:|---:|"
		ratio_row QPS QPS burst
		for m in P50 P95 P99; do
			ratio_row "${m,,} latency µs" "$m" burst
		done
		ratio_row "connect phase ms ($CLIENTS clients)" CONN_MS burst
		echo "| MariaDB connections, all clients idle | $(maxv "${BACKEND_IDLE[burst|direct]:-}") | $(maxv "${BACKEND_IDLE[burst|sluice]:-}") | |"
		echo "| MariaDB connections, peak sampled every 0.5 s during the run | – | $(maxv "${BACKEND_PEAK[burst|sluice]:-}") | |"
		echo "| MariaDB Max_used_connections over the run, connect phase included (+1 when a root sampling session overlapped the peak) | $(maxv "${MAX_USED[burst|direct]:-}") | $(maxv "${MAX_USED[burst|sluice]:-}") | |"
		echo
		if [ ${#RSS_PER[@]} -gt 0 ]; then
			per=$(median "${RSS_PER[*]}" %.2f)
			met=$(awk -v p="$per" 'BEGIN { print (p <= 32) ? "yes" : "**no**" }')
			echo "Sluice memory per idle client connection: VmRSS (/proc/PID/status) after start-up $(median "${RSS0[*]}") KiB," \
				"with $CLIENTS clients connected and idle $(median "${RSSN[*]}") KiB:" \
				"**$per KiB per idle client** (median; target ≤ 32 KiB: $met)."
		else
			echo "Sluice memory per idle client connection: not measured (no successful sluice run)."
		fi
	fi
	if has_scenario ps64; then
		sb_args "$PS_THREADS" '<port>' "$DURATION"
		echo
		echo "**ps64**: \`${SB[*]/#--mysql-password=*/--mysql-password=…} run\` (prepared statements);" \
			"sysbench's own QPS and p95. Sluice: $(pool_desc ps64)."
		echo
		echo "| ps64 | direct | sluice | sluice/direct |"
		echo "|---|---:|---:|---:|"
		ratio_row QPS QPS ps64
		ratio_row "p95 latency ms" P95 ps64 %.2f
		echo "| sluice CPU µs/query | – | $(median "${CPU[ps64|sluice]:-}" %.1f) | |"
		echo "| MariaDB connections, peak sampled every 0.5 s | – | $(maxv "${BACKEND_PEAK[ps64|sluice]:-}") | |"
		echo "| MariaDB Max_used_connections over the run (+1 when the root sampling session overlapped the peak) | $(maxv "${MAX_USED[ps64|direct]:-}") | $(maxv "${MAX_USED[ps64|sluice]:-}") | |"
	fi
	report_problems
} >"$WORK/report.md"

publish_report "$WORK/report.md"
