# examples/lib.sh: what every examples/*/run.sh shares. Sourced, not run.
#
# Sourcing it makes a private work directory ($WORK), installs a trap that stops everything the
# example started and removes $WORK on any exit (success, failure, Ctrl-C), and provides:
#
#   start_mariadb NAME [mariadbd args]   a private MariaDB on a free 127.0.0.1 port; sets NAME_PORT
#   db NAME [mariadb args]               the mariadb client as root on that server (unix socket)
#   start_primary NAME / start_replica NAME PRIMARY / sync_replicas PRIMARY REPLICA...
#                                        GTID replication between such servers
#   start_sluice [TEMPLATE [sluice args]] fills the template's @PLACEHOLDERS@ into $WORK/sluice.toml
#                                        and starts sluice on it; sets SLUICE_PORT ADMIN_PORT HTTP_PORT
#   stop_sluice                          SIGTERM, wait for it to exit
#   sql USER PASSWORD [mariadb args]     the mariadb client through sluice, batch mode (-N -B)
#   admin [mariadb args]                 the mariadb client on sluice's admin port
#   session_open / session_sql / session_close   one client connection kept open across steps
#   check / check_match / check_between / check_error   compare, and stop with a message naming what differed
#   wait_until SECONDS COMMAND...        poll
#   step TEXT, show TEXT                 narrate
#
# Environment: SLUICE_BIN (the sluice binary; else target/release/sluice, target/debug/sluice,
# else `cargo build -p sluice`), KEEP_TMP=1 (keep $WORK: configs, logs, datadirs).
# shellcheck shell=bash

set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true # bash 5.2: `&` in ${x//p/r} stays literal
PATH=$PATH:/usr/sbin:/sbin

EXAMPLE_DIR=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
EXAMPLE=$(basename "$EXAMPLE_DIR")
ROOT=$(cd "$EXAMPLE_DIR/../.." && pwd)
KEEP_TMP=${KEEP_TMP:-0}
CLIENT_TIMEOUT=20 # seconds any one client command may take

if [ -t 1 ]; then
	BOLD=$'\033[1m' RED=$'\033[31m' GREEN=$'\033[32m' RESET=$'\033[0m'
else
	BOLD="" RED="" GREEN="" RESET=""
fi
step() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$RESET"; }
indent() { sed 's/^/    /'; }
# show TEXT: output of a demonstration, indented.
show() { [ -z "$1" ] || indent <<<"$1"; }
die() {
	printf '%sFAIL [%s]: %s%s\n' "$RED" "$EXAMPLE" "$*" "$RESET" >&2
	exit 1
}

for tool in mariadbd mariadb-install-db mariadb mariadb-admin timeout; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install mariadb-server mariadb-client; or scripts/install-deps)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-example-$EXAMPLE.XXXXXX")
CHECKS=0
SLUICE_PID=""
SLUICE_FOUND=""
declare -A DB_PID=() SESSION_PID=() SESSION_FD=()

# --- checks ---------------------------------------------------------------------------

# check WHAT EXPECTED ACTUAL: ACTUAL must equal EXPECTED.
check() {
	if [ "$3" != "$2" ]; then
		if [[ $2$3 == *$'\n'* ]]; then
			die "$1"$'\n'"  expected:"$'\n'"$(indent <<<"$2")"$'\n'"  got:"$'\n'"$(indent <<<"$3")"
		fi
		die "$1"$'\n'"  expected: $2"$'\n'"  got:      $3"
	fi
	CHECKS=$((CHECKS + 1))
	printf '  %sok%s %s\n' "$GREEN" "$RESET" "$1"
}

# check_match WHAT REGEX ACTUAL: some line of ACTUAL must match the extended regex REGEX.
check_match() {
	if ! grep -qE -- "$2" <<<"$3"; then
		die "$1"$'\n'"  expected a line matching: $2"$'\n'"  got:"$'\n'"$(indent <<<"$3")"
	fi
	CHECKS=$((CHECKS + 1))
	printf '  %sok%s %s\n' "$GREEN" "$RESET" "$1"
}

# check_between WHAT MIN MAX ACTUAL: ACTUAL must be a whole number from MIN to MAX.
check_between() {
	if ! [[ $4 =~ ^[0-9]+$ ]] || (($4 < $2 || $4 > $3)); then
		die "$1"$'\n'"  expected a number from $2 to $3"$'\n'"  got: $4"
	fi
	CHECKS=$((CHECKS + 1))
	printf '  %sok%s %s\n' "$GREEN" "$RESET" "$1"
}

# check_error WHAT EXPECTED COMMAND...: COMMAND must fail and print EXPECTED (a fixed string,
# e.g. "ERROR 1148 (42000)") on stdout or stderr. Sets OUTPUT to what it printed.
check_error() {
	local what=$1 expected=$2 rc=0
	shift 2
	OUTPUT=$("$@" 2>&1) || rc=$?
	if [ "$rc" = 0 ]; then
		die "$what"$'\n'"  expected it to fail with: $expected"$'\n'"  but it succeeded, printing: $OUTPUT"
	fi
	if [[ $OUTPUT != *"$expected"* ]]; then
		die "$what"$'\n'"  expected an error containing: $expected"$'\n'"  got: $OUTPUT"
	fi
	CHECKS=$((CHECKS + 1))
	printf '  %sok%s %s\n' "$GREEN" "$RESET" "$what"
}

# --- processes ------------------------------------------------------------------------

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st%% *}" != Z ]
}

# stop_pids SECONDS PID...: SIGTERM, then SIGKILL to those still running after SECONDS. Polls
# /proc rather than `wait`, which can hang in a trap when the process was reaped meanwhile.
stop_pids() {
	local limit=$1 pid i left
	shift
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
	for ((i = 0; i < limit * 10; i++)); do
		left=0
		for pid in "$@"; do alive "$pid" && left=1; done
		((left)) || return 0
		sleep 0.1
	done
	for pid in "$@"; do
		alive "$pid" && { echo "[$EXAMPLE] pid $pid ignored SIGTERM for ${limit}s, killing it" >&2; kill -KILL "$pid" 2>/dev/null; }
	done
	return 0
}

# wait_until SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (status 0) or
# SECONDS have passed (status 1).
wait_until() {
	local limit=$1 i
	shift
	for ((i = 0; i < limit * 10; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

# free_port VAR: sets VAR to a TCP port nobody listens on, never one handed out before.
PORTS_GIVEN=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 30000))
		[[ $PORTS_GIVEN == *" $p "* ]] && continue
		if command -v ss >/dev/null; then
			[ -n "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ] && continue
		elif (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			continue
		fi
		PORTS_GIVEN+="$p "
		printf -v "$1" '%s' "$p"
		return 0
	done
	die "no free TCP port found"
}

# --- MariaDB --------------------------------------------------------------------------

# Options as crates/testkit/src/mariadb.rs starts its servers (InnoDB smaller: these are demos).
INNODB_ARGS=(--innodb-buffer-pool-size=32M --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=2)
AS_ROOT_ARGS=()
[ "$(id -u)" = 0 ] && AS_ROOT_ARGS=(--user=root)

# Every server gets a tmpdir of its own: a starting mariadbd deletes the `#sql*` files in its
# tmpdir, which in a shared /tmp are other servers' temporary tables.

# The datadir every server of this example copies, made once by mariadb-install-db.
template_datadir() {
	[ -d "$WORK/template" ] && return 0
	mkdir -p "$WORK/template-tmp"
	if ! mariadb-install-db --no-defaults --auth-root-authentication-method=normal --skip-test-db \
		--skip-name-resolve --datadir="$WORK/template" --tmpdir="$WORK/template-tmp" \
		${AS_ROOT_ARGS[@]+"${AS_ROOT_ARGS[@]}"} "${INNODB_ARGS[@]}" \
		>"$WORK/install-db.log" 2>&1; then
		tail -n 20 "$WORK/install-db.log" >&2
		die "mariadb-install-db failed (log above)"
	fi
}

# start_mariadb NAME [mariadbd args]: a private server in $WORK/NAME, listening on 127.0.0.1 only.
# Sets NAME_PORT (upper case, e.g. PRIMARY_PORT). Root logs in over $WORK/NAME/sock without a
# password (see `db`); the database `test` exists.
start_mariadb() {
	local name=$1 dir=$WORK/$1 port var i
	shift
	var=${name^^}_PORT
	template_datadir
	mkdir -p "$dir/tmp"
	cp -a "$WORK/template" "$dir/data"
	for _ in 1 2 3; do
		free_port port
		mariadbd --no-defaults --datadir="$dir/data" --tmpdir="$dir/tmp" --port="$port" --bind-address=127.0.0.1 \
			--socket="$dir/sock" --pid-file="$dir/mariadbd.pid" --log-error="$dir/error.log" \
			${AS_ROOT_ARGS[@]+"${AS_ROOT_ARGS[@]}"} --skip-name-resolve --max-connections=1000 --skip-log-bin \
			"${INNODB_ARGS[@]}" "$@" </dev/null >"$dir/stderr.log" 2>&1 &
		DB_PID[$name]=$!
		for ((i = 0; i < 300; i++)); do
			alive "${DB_PID[$name]}" || break
			mariadb-admin --no-defaults -S "$dir/sock" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
			sleep 0.1
		done
		if alive "${DB_PID[$name]}" && ((i < 300)); then
			printf -v "$var" '%s' "$port"
			# Not in the binary log: on a replica it would be a GTID of its own (see start_replica).
			db "$name" -e "SET sql_log_bin = 0; CREATE DATABASE IF NOT EXISTS test"
			echo "  MariaDB '$name' on 127.0.0.1:$port (pid ${DB_PID[$name]}, datadir $dir/data)"
			return 0
		fi
		stop_pids 5 "${DB_PID[$name]}"
		grep -q 'Address already in use' "$dir/error.log" 2>/dev/null || break
	done
	tail -n 20 "$dir/error.log" >&2 2>/dev/null || true
	die "MariaDB '$name' did not start (error log above)"
}

# db NAME [mariadb args]: the mariadb client as root on server NAME, batch mode.
db() {
	local name=$1
	shift
	timeout "$CLIENT_TIMEOUT" mariadb --no-defaults -S "$WORK/$name/sock" -uroot -N -B "$@"
}

# start_shop_mariadb NAME: start_mariadb, with the examples' application account
# (app:app-secret from 127.0.0.1, all privileges on `shop`) and the table shop.marker holding
# NAME, so a query shows which server answered.
start_shop_mariadb() {
	start_mariadb "$1"
	db "$1" -e "
		CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
		GRANT ALL ON shop.* TO app@'127.0.0.1';
		CREATE DATABASE shop;
		CREATE TABLE shop.marker (who VARCHAR(20));
		INSERT INTO shop.marker VALUES ('$1');"
}

# --- replication ----------------------------------------------------------------------
# A primary and GTID replicas, started as crates/testkit/src/replication.rs starts them: every
# member writes a binary log with GTIDs and log_slave_updates (any replica could be promoted),
# in row format, in strict GTID mode, with a server_id of its own; replicas are read_only and
# apply in order. Replicas log in to the primary as repl:repl-secret over 127.0.0.1.

REPLICATION_ARGS=(--log-bin=mariadb-bin --log-slave-updates --binlog-format=ROW --gtid-strict-mode=1
	--slave-parallel-threads=0)
LAST_SERVER_ID=0

# start_primary NAME [mariadbd args]: start_mariadb with the replication options, and the
# account replicas log in with.
start_primary() {
	local name=$1
	shift
	LAST_SERVER_ID=$((LAST_SERVER_ID + 1))
	start_mariadb "$name" "${REPLICATION_ARGS[@]}" --server-id="$LAST_SERVER_ID" "$@"
	db "$name" -e "CREATE USER repl@'127.0.0.1' IDENTIFIED BY 'repl-secret';
		GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
}

# start_replica NAME PRIMARY [mariadbd args]: a read_only server replicating from server
# PRIMARY (from its first GTID: everything the primary wrote since it started), once both of
# its threads run. Nothing must have written to NAME's binary log before (gtid_strict_mode).
start_replica() {
	local name=$1 primary=$2 port_var=${2^^}_PORT
	shift 2
	LAST_SERVER_ID=$((LAST_SERVER_ID + 1))
	start_mariadb "$name" "${REPLICATION_ARGS[@]}" --server-id="$LAST_SERVER_ID" --read-only=1 "$@"
	db "$name" -e "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${!port_var},
		MASTER_USER='repl', MASTER_PASSWORD='repl-secret', MASTER_USE_GTID=slave_pos,
		MASTER_CONNECT_RETRY=1; START SLAVE;"
	wait_until 30 replicating "$name" ||
		die "replica '$name' did not start replicating from '$primary':"$'\n'"$(db "$name" --column-names -e 'SHOW SLAVE STATUS\G' | indent)"
	echo "  '$name' replicates from '$primary' (server_id $LAST_SERVER_ID, read_only)"
}

# replicating NAME: both replication threads of server NAME run.
replicating() {
	[ "$(db "$1" --column-names -e 'SHOW SLAVE STATUS\G' | grep -cE '^ *Slave_(IO|SQL)_Running: Yes$')" = 2 ]
}

# sync_replicas PRIMARY REPLICA...: waits until each REPLICA has applied everything server
# PRIMARY has written so far.
sync_replicas() {
	local primary=$1 pos name
	shift
	pos=$(db "$primary" -e "SELECT @@gtid_binlog_pos")
	for name in "$@"; do
		[ "$(db "$name" -e "SELECT MASTER_GTID_WAIT('$pos', 10)")" = 0 ] ||
			die "replica '$name' did not apply '$primary''s position $pos within 10 s"
	done
}

# --- sluice ---------------------------------------------------------------------------

# The binary: $SLUICE_BIN, else the repository's release or debug build, else a debug build.
find_sluice() {
	if [ -n "${SLUICE_BIN:-}" ]; then
		[ -x "$SLUICE_BIN" ] || die "SLUICE_BIN=$SLUICE_BIN is not an executable file"
	elif [ -x "$ROOT/target/release/sluice" ]; then
		SLUICE_BIN=$ROOT/target/release/sluice
	elif [ -x "$ROOT/target/debug/sluice" ]; then
		SLUICE_BIN=$ROOT/target/debug/sluice
	else
		command -v cargo >/dev/null || die "no sluice binary: set SLUICE_BIN, or install Rust (https://rustup.rs) to build one"
		echo "building sluice (cargo build -p sluice)"
		(cd "$ROOT" && cargo build -p sluice) || die "cargo build -p sluice failed"
		SLUICE_BIN=$ROOT/target/debug/sluice
	fi
	SLUICE_FOUND=1
	echo "  sluice binary: $SLUICE_BIN"
}

# render TEMPLATE OUT: copies TEMPLATE to OUT with every @NAME@ replaced by the shell variable
# NAME's value (WORK, SLUICE_PORT, PRIMARY_PORT…). A placeholder without a value is an error.
render() {
	local text name
	text=$(<"$1")
	while [[ $text =~ @([A-Z][A-Z0-9_]*)@ ]]; do
		name=${BASH_REMATCH[1]}
		[[ -v $name ]] || die "$1: placeholder @$name@ has no value"
		text=${text//"@$name@"/${!name}}
	done
	printf '%s\n' "$text" >"$2"
}

# start_sluice [TEMPLATE [sluice args]]: renders TEMPLATE (default: the example's sluice.toml)
# into $WORK/sluice.toml and runs sluice on it, logging to $WORK/sluice.log. Picks free ports for
# SLUICE_PORT, ADMIN_PORT and HTTP_PORT the first time (a restart keeps them).
start_sluice() {
	local template=${1:-$EXAMPLE_DIR/sluice.toml} i log_start
	[ $# -gt 0 ] && shift
	[ -n "$SLUICE_FOUND" ] || find_sluice
	for _ in 1 2 3; do
		[ -n "${SLUICE_PORT:-}" ] || free_port SLUICE_PORT
		[ -n "${ADMIN_PORT:-}" ] || free_port ADMIN_PORT
		[ -n "${HTTP_PORT:-}" ] || free_port HTTP_PORT
		render "$template" "$WORK/sluice.toml"
		touch "$WORK/sluice.log"
		log_start=$(wc -l <"$WORK/sluice.log")
		"$SLUICE_BIN" --config "$WORK/sluice.toml" "$@" </dev/null >>"$WORK/sluice.log" 2>&1 &
		SLUICE_PID=$!
		for ((i = 0; i < 200; i++)); do
			alive "$SLUICE_PID" || break
			tail -n "+$((log_start + 1))" "$WORK/sluice.log" | grep -q 'sluice started' && break
			sleep 0.1
		done
		if alive "$SLUICE_PID" && ((i < 200)); then
			echo "  sluice on 127.0.0.1:$SLUICE_PORT (admin $ADMIN_PORT, http $HTTP_PORT; pid $SLUICE_PID, log $WORK/sluice.log)"
			return 0
		fi
		stop_pids 5 "$SLUICE_PID"
		SLUICE_PID=""
		# Another process took a port between free_port and the bind: try new ones.
		tail -n "+$((log_start + 1))" "$WORK/sluice.log" | grep -q 'in use' || break
		SLUICE_PORT="" ADMIN_PORT="" HTTP_PORT=""
	done
	tail -n 20 "$WORK/sluice.log" >&2
	die "sluice did not start (its log above; the config is $WORK/sluice.toml)"
}

stop_sluice() {
	[ -n "$SLUICE_PID" ] || return 0
	stop_pids 10 "$SLUICE_PID"
	SLUICE_PID=""
}

# client PORT USER PASSWORD [mariadb args]: the mariadb client over TCP to 127.0.0.1:PORT, batch
# mode (-N -B).
client() {
	local port=$1 user=$2 password=$3
	shift 3
	timeout "$CLIENT_TIMEOUT" mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$port" \
		-u"$user" ${password:+"-p$password"} -N -B "$@"
}

# sql USER PASSWORD [mariadb args]: the client through sluice.
sql() { client "$SLUICE_PORT" "$@"; }

# admin [mariadb args]: the mariadb client on the admin port as admin:admin, batch mode.
admin() {
	timeout "$CLIENT_TIMEOUT" mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$ADMIN_PORT" \
		-uadmin -padmin -N -B "$@"
}

# --- a client connection that stays open ---------------------------------------------
# session_open NAME USER PASSWORD [mariadb args]: one `mariadb` process reading statements from
# a FIFO, so that later steps run on the same connection (--skip-reconnect: a dropped
# connection shows, rather than being silently replaced).
session_open() {
	local name=$1 user=$2 password=$3 fd
	shift 3
	mkfifo "$WORK/session-$name.in"
	: >"$WORK/session-$name.out"
	mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$SLUICE_PORT" -u"$user" ${password:+"-p$password"} \
		-N -B --unbuffered --force --skip-reconnect "$@" \
		<"$WORK/session-$name.in" >"$WORK/session-$name.out" 2>&1 &
	SESSION_PID[$name]=$!
	exec {fd}>"$WORK/session-$name.in"
	SESSION_FD[$name]=$fd
}

# session_sql NAME SQL: runs SQL (one or more statements, each ending in `;`) on the session
# and prints what it printed (errors included), once all of it has run: a SELECT of a marker
# follows SQL, and its line in the output ends the answer.
session_sql() {
	local name=$1 out=$WORK/session-$1.out start marker i
	# Unique without a counter: session_sql often runs in a $(…) subshell, which could not
	# update one.
	marker="-- end of step $EPOCHREALTIME $RANDOM --"
	start=$(wc -l <"$out")
	printf '%s\nSELECT '\''%s'\'';\n' "$2" "$marker" >&"${SESSION_FD[$name]}"
	for ((i = 0; i < CLIENT_TIMEOUT * 10; i++)); do
		grep -qxF -- "$marker" "$out" && break
		alive "${SESSION_PID[$name]}" || die "session '$name' ended (its client exited): $(tail -n 5 "$out")"
		sleep 0.1
	done
	grep -qxF -- "$marker" "$out" || die "session '$name': no answer to '$2' within ${CLIENT_TIMEOUT}s"
	awk -v m="$marker" -v s="$start" 'NR > s { if ($0 == m) exit; print }' "$out"
}

session_close() {
	local name=$1 fd
	fd=${SESSION_FD[$name]:-}
	[ -n "$fd" ] || return 0
	exec {fd}>&- # end of input: the client quits
	unset "SESSION_FD[$name]"
	stop_pids 5 "${SESSION_PID[$name]}"
	unset "SESSION_PID[$name]"
}

# --- teardown -------------------------------------------------------------------------
cleanup() {
	local rc=$? name
	trap - EXIT INT TERM HUP ERR
	set +e
	for name in "${!SESSION_FD[@]}"; do session_close "$name"; done
	if [ "$rc" != 0 ] && [ "$rc" != 130 ] && [ "$rc" != 143 ]; then
		[ -s "$WORK/sluice.log" ] && { echo "--- last lines of sluice's log ($WORK/sluice.log):" >&2; tail -n 15 "$WORK/sluice.log" >&2; }
		for name in "${!DB_PID[@]}"; do
			grep -q ERROR "$WORK/$name/error.log" 2>/dev/null &&
				{ echo "--- errors in MariaDB '$name''s log:" >&2; grep ERROR "$WORK/$name/error.log" | tail -n 5 >&2; }
		done
	fi
	stop_sluice
	[ ${#DB_PID[@]} = 0 ] || stop_pids 10 "${DB_PID[@]}"
	if [ "$KEEP_TMP" = 1 ]; then
		echo "kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	if [ "$rc" = 0 ]; then
		printf '\n%s%s: all %d checks passed%s\n' "$GREEN" "$EXAMPLE" "$CHECKS" "$RESET"
	fi
	exit "$rc"
}
# A command that fails outside a check (set -e) says which, before the script stops.
set -E
on_error() {
	[ "$BASH_SUBSHELL" = 0 ] || return 0 # reported once, by the main shell
	# shellcheck disable=SC2016 # the backquotes are text
	printf '%sFAIL [%s]: %s: `%s` failed (status %s)%s\n' "$RED" "$EXAMPLE" "$3" "$2" "$1" "$RESET" >&2
}
trap 'on_error $? "$BASH_COMMAND" "${BASH_SOURCE[0]}:$LINENO"' ERR
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP # the terminal closed
