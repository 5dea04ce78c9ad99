# bench/lib.sh: helpers shared by the bench scripts. Sourced, not run.
# The sourcing script sets PROG (its name, used in messages) first. run_bounded sets the
# global RUN_PID while its command runs, so that the script's cleanup can stop it.
# shellcheck shell=bash
# shellcheck disable=SC2034 # globals set here (SLUICE_DESC, SB_*, CPU_*) are read by the sourcing script

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

# await_answer NAME PID PORT [USER [PASSWORD]]: waits up to 30 s for `SELECT 1` on
# 127.0.0.1:PORT (as USER, root by default) to answer; dies naming NAME if PID exits first or
# the statement still fails then.
await_answer() {
	local name=$1 pid=$2 port=$3 user=${4:-root} pass=${5:-} i err=""
	for ((i = 0; i < 300; i++)); do
		alive "$pid" || die "$name exited during start-up"
		if err=$(timeout 5 mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$port" -u"$user" ${pass:+-p"$pass"} \
			--connect-timeout=2 -N -B -e 'SELECT 1' 2>&1); then
			return 0
		fi
		sleep 0.1
	done
	die "SELECT 1 through $name still fails after 30 s: $err"
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

# disturbed_spread "VALUES" FACTOR: "ranged MIN–MAX (×R)" when the largest of the values is
# FACTOR times the smallest or more, else nothing (also for fewer than two values).
disturbed_spread() {
	# shellcheck disable=SC2086 # word splitting of the value list is intended
	printf '%s\n' $1 | awk -v f="$2" 'NF { n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1 }
		END { if (n > 1 && lo > 0 && hi / lo >= f) printf "ranged %.0f–%.0f (×%.1f)\n", lo, hi, hi / lo }'
}

# parse_options ARGS...: sets INVOCATION (the exact command line, with the OPT_VARS the caller
# set in the environment) and, for each `--name VALUE` or `--name=VALUE`, the variable NAME
# (upper case, `-` as `_`), which must be listed in FLAG_VARS. `-h`/`--help` runs `usage`.
parse_options() {
	local v a opt val var
	INVOCATION=""
	for v in "${OPT_VARS[@]}"; do
		if [[ -v $v ]]; then INVOCATION+="$v=$(shq "${!v}") "; fi
	done
	INVOCATION+=$(shq "$0")
	for a in "$@"; do INVOCATION+=" $(shq "$a")"; done
	while [ $# -gt 0 ]; do
		opt=$1
		case "$opt" in
		-h | --help)
			usage
			exit 0
			;;
		--*=*)
			val=${opt#*=}
			opt=${opt%%=*}
			shift
			;;
		--*)
			[ $# -ge 2 ] || die "$opt needs a value (see --help)"
			val=$2
			shift 2
			;;
		*) die "unknown argument: $opt (see --help)" ;;
		esac
		var=${opt#--}
		var=${var//-/_}
		var=${var^^}
		[[ " ${FLAG_VARS[*]} " == *" $var "* ]] || die "unknown option: $opt (see --help)"
		printf -v "$var" '%s' "$val"
	done
}

# pick_sluice: the sluice to measure, into SLUICE_CMD (array) and SLUICE_DESC: SLUICE_BIN if
# set, else a fresh `cargo build --release -p sluice` in ROOT. Also GIT_REV for the report.
pick_sluice() {
	if [ -n "$SLUICE_BIN" ]; then
		read -ra SLUICE_CMD <<<"$SLUICE_BIN"
		command -v "${SLUICE_CMD[0]}" >/dev/null || die "SLUICE_BIN: '${SLUICE_CMD[0]}' not found"
		# The real binary reports its name; anything else is a stand-in (e.g. socat for testing).
		if "${SLUICE_CMD[0]}" --version 2>/dev/null | grep -q '^sluice '; then
			SLUICE_DESC="\`$SLUICE_BIN\` ($("${SLUICE_CMD[0]}" --version))"
		else
			SLUICE_DESC="stand-in \`$SLUICE_BIN\` (not the real sluice)"
		fi
	else
		log "building sluice (cargo build --release -p sluice)"
		(cd "$ROOT" && cargo build --release -p sluice) >&2 ||
			die "cargo build --release -p sluice failed (SLUICE_BIN=target/release/sluice uses an existing binary as is)"
		SLUICE_CMD=("$ROOT/target/release/sluice")
		SLUICE_DESC="target/release/sluice"
	fi
	[ -x "${SLUICE_CMD[0]}" ] || command -v "${SLUICE_CMD[0]}" >/dev/null || die "${SLUICE_CMD[0]} is not executable"
	GIT_REV=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo "no commit")
	if [ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null)" ]; then
		GIT_REV+=" (+ uncommitted changes)"
	fi
}

# sysbench_figures LOGFILE EXIT_STATUS WHAT [p95]: reads a sysbench run's figures into SB_Q
# (queries), SB_QPS and SB_P95 (ms; with `p95` a run that reports none counts as failed);
# notes ignored errors and reconnects in NOTES. Returns 1, after recording the run in
# FAILURES, when the run failed.
sysbench_figures() {
	local logf=$1 rc=$2 what=$3 need_p95=${4:-} parsed errs reconn last
	parsed=$(awk -v need="$need_p95" '
		/^ *queries:/ { q = $2; qps = $3; gsub(/[(]/, "", qps) }
		/95th percentile:/ { p = $3 }
		/ignored errors:/ { e = $3 }
		/reconnects:/ { r = $2 }
		END { if (q != "" && (need == "" || p != "")) print q, qps, e + 0, r + 0, p }' "$logf")
	if [ "$rc" -ne 0 ] || [ -z "$parsed" ]; then
		last=$(grep -m1 -E 'FATAL|ERROR|error' "$logf" || tail -n 1 "$logf")
		FAILURES+=("$what: sysbench exit $rc: $last")
		log "[$RUN_NO/$NRUNS] $what: FAILED (sysbench exit $rc); last lines of its output:"
		tail -n 15 "$logf" >&2
		return 1
	fi
	read -r SB_Q SB_QPS errs reconn SB_P95 <<<"$parsed"
	if [ "$errs" != 0 ] || [ "$reconn" != 0 ]; then
		NOTES+=("$what: $errs ignored errors, $reconn reconnects")
	fi
}

# cpu_per_query T0 T1 QUERIES [NAME]: the proxy's (NAME, default sluice) CPU per query (µs)
# from two cpu_ticks readings into CPU_US, and CPU_TXT for the run's log line; both empty when
# a reading is missing.
cpu_per_query() {
	CPU_US="" CPU_TXT=""
	[ -n "$1" ] && [ -n "$2" ] || return 0
	CPU_US=$(awk -v d=$(($2 - $1)) -v hz="$CLK_TCK" -v q="$3" 'BEGIN { printf "%.2f", d / hz * 1e6 / q }')
	CPU_TXT=", ${4:-sluice} CPU $(awk -v d=$(($2 - $1)) -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", d / hz }') s = $CPU_US µs/query"
}

# report_problems: the failed runs and notes, as markdown list items (nothing when none).
report_problems() {
	if [ ${#FAILURES[@]} -gt 0 ] || [ ${#NOTES[@]} -gt 0 ]; then
		echo
		for f in ${FAILURES[@]+"${FAILURES[@]}"}; do echo "- FAILED: $f"; done
		for n in ${NOTES[@]+"${NOTES[@]}"}; do echo "- note: $n"; done
	fi
}

# publish_report FILE: prints the report, appends it to OUT when set, and exits 1 when a run
# failed.
publish_report() {
	cat "$1"
	if [ -n "$OUT" ]; then
		cat "$1" >>"$OUT"
		log "appended to $OUT"
	fi
	if [ ${#FAILURES[@]} -gt 0 ]; then
		log "${#FAILURES[@]} run(s) failed"
		exit 1
	fi
}

# spawn_supervised PREFIX LOGFILE CMD...: starts CMD (stdout and stderr appended to LOGFILE)
# under a supervisor subshell that writes its pid to PREFIX.pid and, when it ends, its exit
# status to PREFIX.rc. Sets SPAWNED_PID once the pid is known.
spawn_supervised() {
	local prefix=$1 logf=$2 i
	shift 2
	rm -f "$prefix.pid" "$prefix.rc"
	(
		"$@" </dev/null >>"$logf" 2>&1 &
		echo $! >"$prefix.pid"
		rc=0
		wait $! || rc=$?
		echo "$rc" >"$prefix.rc.tmp"
		mv "$prefix.rc.tmp" "$prefix.rc"
	) &
	for ((i = 0; i < 50; i++)); do
		[ -s "$prefix.pid" ] && break
		sleep 0.1
	done
	SPAWNED_PID=$(cat "$prefix.pid")
}

# exit_status PREFIX: the exit status its supervisor wrote (waits up to 5 s for it).
exit_status() {
	local i
	for ((i = 0; i < 50; i++)); do
		[ -s "$1.rc" ] && break
		sleep 0.1
	done
	cat "$1.rc" 2>/dev/null || echo unknown
}

# stop_supervised PID PREFIX NAME: SIGTERM (see stop_proc) to a process started with
# spawn_supervised, logging its exit status unless it is the expected 0.
stop_supervised() {
	local pid=$1 prefix=$2 name=$3 st
	[ -n "$pid" ] || return 0
	if alive "$pid"; then
		stop_proc "$pid" "$name" 10
		st=$(exit_status "$prefix")
		[ "$st" = 0 ] || log "note: $name exited with status $st on SIGTERM (expected 0)"
	else
		log "$name had exited by itself, with status $(exit_status "$prefix")"
	fi
}

# The end of every script's `cleanup` (which it installs with trap_cleanup):
# failed_by_itself RC: true when RC is a failure, not success nor an interrupt (INT/TERM), so
# logs are worth showing.
failed_by_itself() { [ "$1" -ne 0 ] && [ "$1" -ne 130 ] && [ "$1" -ne 143 ]; }

# finish_work RC: keeps $WORK when KEEP_TMP=1 (saying where) or removes it, then exits RC.
finish_work() {
	if [ "$KEEP_TMP" = 1 ]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$1"
}

# trap_cleanup: `cleanup` runs on exit; INT and TERM become exits 130 and 143 that run it.
trap_cleanup() {
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# vmrss_kib PID: the process's resident set size in KiB (VmRSS in /proc/PID/status).
vmrss_kib() {
	awk '/^VmRSS:/ { print $2; found = 1 } END { exit !found }' "/proc/$1/status" 2>/dev/null
}

# start_mariadb DIR [MARIADBD_ARGS...]: a private MariaDB initialised in DIR (datadir DIR/data,
# socket DIR/mysqld.sock, logs DIR/install.log and DIR/mysqld.err) on a free 127.0.0.1 port:
# 256M buffer pool, no binlog, root@127.0.0.1 without a password, database sbtest. Extra
# mariadbd arguments come last (they win). Sets MARIADB_PID and MARIADB_PORT, and adds the pid
# to MARIADB_PIDS, which stop_mariadbs stops (call it from the script's cleanup).
MARIADB_PIDS=()
start_mariadb() {
	local dir=$1 i
	shift
	mkdir -p "$dir"
	mariadb-install-db --no-defaults --datadir="$dir/data" --auth-root-authentication-method=normal \
		--skip-test-db --user=root >"$dir/install.log" 2>&1 || die "mariadb-install-db failed (see $dir/install.log)"
	take_port MARIADB_PORT
	mariadbd --no-defaults --datadir="$dir/data" --bind-address=127.0.0.1 --port="$MARIADB_PORT" \
		--socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/mysqld.err" --user=root \
		--skip-name-resolve --max-connections=1000 --innodb-buffer-pool-size=256M --skip-log-bin "$@" \
		</dev/null >/dev/null 2>&1 &
	MARIADB_PID=$!
	MARIADB_PIDS+=("$MARIADB_PID")
	for ((i = 0; i < 600; i++)); do
		alive "$MARIADB_PID" || die "mariadbd in $dir exited during start-up (see $dir/mysqld.err)"
		mariadb-admin --no-defaults -S "$dir/mysqld.sock" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	mariadb --no-defaults -S "$dir/mysqld.sock" -uroot -e "CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS sbtest;" ||
		die "cannot set up the MariaDB in $dir"
}
stop_mariadbs() {
	local p
	for p in ${MARIADB_PIDS[@]+"${MARIADB_PIDS[@]}"}; do stop_proc "$p" mariadbd 60; done
}

# start_haproxy_tcp BACKEND THREADS [NAME]: HAProxy ($HAPROXY_BIN, default haproxy) as a plain TCP
# forwarder (mode tcp, nbthread THREADS) to BACKEND: a port on 127.0.0.1, or the absolute path of
# a Unix socket. In the foreground (-db) so that its pid is the one process whose CPU is read;
# config and log in $WORK/NAME.cfg and .log (NAME: haproxy). Sets HAPROXY_PID and HAPROXY_PORT
# once SELECT 1 works through it.
start_haproxy_tcp() {
	local bin=${HAPROXY_BIN:-haproxy} name=${3:-haproxy} server=$1
	[[ $server == /* ]] || server=127.0.0.1:$server
	take_port HAPROXY_PORT
	cat >"$WORK/$name.cfg" <<-CFG
		global
		    nbthread $2
		    maxconn 4096
		defaults
		    mode tcp
		    timeout connect 5s
		    timeout client 1h
		    timeout server 1h
		listen mysql
		    bind 127.0.0.1:$HAPROXY_PORT
		    server db $server
	CFG
	"$bin" -c -q -f "$WORK/$name.cfg" >>"$WORK/$name.log" 2>&1 ||
		{ tail -n 20 "$WORK/$name.log" >&2; die "haproxy rejects its config ($WORK/$name.cfg)"; }
	echo "=== $(date +%T) start: $bin -db -f $WORK/$name.cfg" >>"$WORK/$name.log"
	spawn_supervised "$WORK/$name" "$WORK/$name.log" "$bin" -db -f "$WORK/$name.cfg"
	HAPROXY_PID=$SPAWNED_PID
	await_answer "$name" "$HAPROXY_PID" "$HAPROXY_PORT"
	log "$name listening on 127.0.0.1:$HAPROXY_PORT (pid $HAPROXY_PID, nbthread $2, server $server)"
}

# require_tools TOOL...: dies naming the first one not on PATH (with /usr/sbin), and the Debian
# packages that bring them (TOOL_PACKAGES, default mariadb-server mariadb-client sysbench).
require_tools() {
	local tool
	PATH=$PATH:/usr/sbin:/sbin
	for tool in "$@"; do
		command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install -y ${TOOL_PACKAGES:-mariadb-server mariadb-client sysbench})"
	done
}

# admin SQL...: the statements on sluice's admin port (ADMIN_PORT) as admin:admin, batch mode.
admin() { mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$ADMIN_PORT" -uadmin -padmin -N -B -e "$*"; }
# counter NAME: a stats_mysql_global value.
counter() { admin "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = '$1'"; }

# start_quick_sluice BACKEND_PORT: sluice in quick-start mode (--backend, user root without a
# password) on free client and admin ports, no HTTP; sets SLUICE_PID, SLUICE_PORT and
# ADMIN_PORT once the admin port answers.
start_quick_sluice() {
	take_port SLUICE_PORT
	take_port ADMIN_PORT
	spawn_supervised "$WORK/sluice" "$WORK/sluice.log" "${SLUICE_CMD[@]}" --listen "127.0.0.1:$SLUICE_PORT" \
		--backend "127.0.0.1:$1" --user root --password '' --admin-listen "127.0.0.1:$ADMIN_PORT" --http-listen ''
	SLUICE_PID=$SPAWNED_PID
	await_answer "sluice's admin port" "$SLUICE_PID" "$ADMIN_PORT" admin admin
}

# machine_line SHARING: the report's machine bullet; SHARING names what runs on its CPUs
# ("sysbench, mariadbd and sluice").
machine_line() {
	local model
	model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	echo "- machine: $(nproc) CPUs, ${model:-$(uname -m)}, Linux $(uname -r); $1 share these CPUs; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
}
