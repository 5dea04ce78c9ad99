#!/usr/bin/env bash
# bench/rules.sh: the cost of sluice's query rules, end to end. 200 shard-routing rules
# (`/* NNN */` → hostgroup NNN % 3) over three private MariaDB instances: a query for the
# last shard (199) should cost what one for the first (000) costs, and about what no rules
# cost. Also a flagIN/flagOUT binary-tree rule set for the same shards, and a routing check.
# See bench/README.md. Run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/rules.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --duration SECONDS      DURATION    seconds per sysbench run [20]
  --threads N             THREADS     sysbench client threads [16]
  --rounds N              ROUNDS      rounds of every run; medians are taken over them [2]
  --configs "C ..."       CONFIGS     sluice configurations to run, of: flat tree none
                                      [flat tree none]
                                        flat: 200 rules, one per shard, rule_id 1..200
                                        tree: flagIN/flagOUT binary tree over the same shards
                                        none: no rules, everything to hostgroup 0
  --warmup SECONDS        WARMUP      warm-up through each sluice before measuring, 0 = none [3]
  --sluice-args "ARGS"    SLUICE_ARGS extra arguments for sluice, e.g. "--workers 2"
  --out FILE              OUT         also append the markdown result to FILE (e.g. BENCHMARKS.md)
                          SLUICE_BIN  command to run instead of target/release/sluice (it gets
                                      `--config FILE`, and must exec so that its pid is the
                                      proxy's). When unset, `cargo build --release -p sluice`
                                      is run first.
                          KEEP_TMP    1 = keep the temp dir (datadirs, configs, logs, outputs)

Each round runs, in this order: direct to hostgroup 0's MariaDB (the reference), then
flat shard 000, flat shard 199, none shard 000, tree shard 000, tree shard 199. One sluice
process per configuration is started once, on its own port; each run reads the CPU of the
process it used.

Smoke test:  DURATION=2 ROUNDS=1 bench/rules.sh
EOF
}

PROG=rules.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # die log shq alive stop_proc run_bounded free_port take_port cpu_ticks median ratio parse_options pick_sluice sysbench_figures cpu_per_query report_problems publish_report

# --- options --------------------------------------------------------------------------
OPT_VARS=(DURATION THREADS ROUNDS CONFIGS WARMUP SLUICE_ARGS OUT SLUICE_BIN KEEP_TMP)
FLAG_VARS=(DURATION THREADS ROUNDS CONFIGS WARMUP SLUICE_ARGS OUT) # settable as --name too
parse_options "$@"

DURATION=${DURATION:-20}
THREADS=${THREADS:-16}
ROUNDS=${ROUNDS:-2}
CONFIGS=${CONFIGS:-flat tree none}
WARMUP=${WARMUP:-3}
SLUICE_ARGS=${SLUICE_ARGS:-}
OUT=${OUT:-}
SLUICE_BIN=${SLUICE_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}

for v in DURATION THREADS ROUNDS WARMUP; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
if [ "$DURATION" -eq 0 ] || [ "$ROUNDS" -eq 0 ] || [ "$THREADS" -eq 0 ]; then
	die "DURATION, THREADS and ROUNDS must be > 0"
fi
read -ra CONFIG_ARGS <<<"$CONFIGS"
read -ra SLUICE_EXTRA <<<"$SLUICE_ARGS"
CONFIG_LIST=()
for c in flat none tree; do # fixed order, whatever order they were given in
	for a in ${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}; do
		[ "$a" = "$c" ] && { CONFIG_LIST+=("$c"); break; }
	done
done
for a in ${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}; do
	case "$a" in flat | tree | none) ;; *) die "CONFIGS: unknown configuration '$a' (flat, tree, none)" ;; esac
done
[ ${#CONFIG_LIST[@]} -gt 0 ] || die "CONFIGS is empty"
has_config() { [[ " ${CONFIG_LIST[*]} " == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA=$ROOT/bench/shard_select.lua
[ -r "$LUA" ] || die "$LUA not found"

# The runs of one round, as config:shard ("direct" is hostgroup 0's MariaDB without sluice).
RUNS=(direct:000)
has_config flat && RUNS+=(flat:000 flat:199)
has_config none && RUNS+=(none:000)
has_config tree && RUNS+=(tree:000 tree:199)

# --- tools ----------------------------------------------------------------------------
require_tools mariadbd mariadb-install-db mariadb mariadb-admin sysbench getconf timeout awk
CLK_TCK=$(getconf CLK_TCK)

# --- estimate -------------------------------------------------------------------------
NRUNS=$((${#RUNS[@]} * ROUNDS))
# estimate RUNS SECONDS CONFIGS: ~0.7 s per run to connect and settle, ~15 s of set-up and
# routing checks, the warm-ups. Excludes the build.
estimate() {
	local e=$(($1 * (10 * $2 + 7) / 10 + 15 + $3 * WARMUP))
	echo "~$((e / 60)) min $((e % 60)) s"
}
log "${#RUNS[@]} runs per round (${RUNS[*]}) × $ROUNDS round(s) = $NRUNS runs of ${DURATION}s, $THREADS threads"
log "estimated run time: $(estimate "$NRUNS" "$DURATION" ${#CONFIG_LIST[@]}) (default settings: 12 runs of 20 s, $(estimate 12 20 3))"

# --- sluice binary --------------------------------------------------------------------
pick_sluice

# --- processes and teardown -----------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-rules.XXXXXX)
DB_USER=sbtest
DB_PASS=sbtest-rules-bench
NHG=3                         # hostgroups 0..2, one MariaDB each
declare -a DB_PID=() DB_PORT=() # by hostgroup
declare -A S_PID=() S_PORT=()   # sluice by config name
RUN_PID=""

stop_sluice() {
	stop_supervised "${S_PID[$1]:-}" "$WORK/sluice-$1" "sluice ($1)"
	S_PID[$1]=""
}

# stop_hostgroup_mariadbs: SIGTERM to every mariadbd at once; after 2 s, `mariadb-admin shutdown` to any
# still running; SIGKILL after 10 s (their data is thrown away anyway). MariaDB 10.11 that gets
# SIGTERM in its first ~0.1 s of start-up (Ctrl-C early) hangs there and ignores every later
# SIGTERM; only SIGKILL ends it.
stop_hostgroup_mariadbs() {
	local hg i left admins=() a
	for hg in "${!DB_PID[@]}"; do kill -TERM "${DB_PID[$hg]}" 2>/dev/null || true; done
	for ((i = 1; i <= 100; i++)); do
		left=0
		for hg in "${!DB_PID[@]}"; do
			alive "${DB_PID[$hg]}" || continue
			left=1
			if [ "$i" = 20 ]; then
				timeout 10 mariadb-admin --no-defaults -S "$WORK/db$hg/mysqld.sock" -uroot --connect-timeout=2 \
					shutdown >/dev/null 2>&1 &
				admins+=($!)
			fi
		done
		((left)) || break
		sleep 0.1
	done
	for hg in "${!DB_PID[@]}"; do
		if alive "${DB_PID[$hg]}"; then
			echo "$PROG: mariadbd (hostgroup $hg, pid ${DB_PID[$hg]}) still running 10 s after SIGTERM, killing it" >&2
			kill -KILL "${DB_PID[$hg]}" 2>/dev/null || true
		fi
	done
	for a in ${admins[@]+"${admins[@]}"}; do # each bounded by its timeout
		while alive "$a"; do sleep 0.1; done
	done
	DB_PID=()
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	local n hg
	if failed_by_itself "$rc"; then
		for n in "${CONFIG_LIST[@]}"; do
			[ -s "$WORK/sluice-$n.log" ] && { echo "--- last lines of sluice ($n)'s log:" >&2; tail -n 10 "$WORK/sluice-$n.log" >&2; }
		done
		for ((hg = 0; hg < NHG; hg++)); do
			[ -s "$WORK/db$hg/mysqld.err" ] && grep -q ERROR "$WORK/db$hg/mysqld.err" &&
				{ echo "--- last lines of mariadbd (hostgroup $hg)'s log:" >&2; tail -n 5 "$WORK/db$hg/mysqld.err" >&2; }
		done
	fi
	if [ -n "$RUN_PID" ]; then
		# `timeout` leads its own process group (it and sysbench): signal both at once.
		kill -TERM -- "-$RUN_PID" 2>/dev/null
		stop_proc "$RUN_PID" sysbench 15
		RUN_PID=""
	fi
	for n in "${CONFIG_LIST[@]}"; do stop_sluice "$n"; done
	stop_hostgroup_mariadbs
	finish_work "$rc"
}
trap_cleanup

# sql HOSTGROUP ARGS...: the mariadb client as root on that instance's socket.
sql() {
	local hg=$1
	shift
	timeout 30 mariadb --no-defaults -S "$WORK/db$hg/mysqld.sock" -uroot -N -B "$@"
}

# start_mariadbs: one private instance per hostgroup, all from one mariadb-install-db.
start_mariadbs() {
	local db_opts=(--innodb-buffer-pool-size=32M --innodb-log-file-size=16M) hg i
	log "initialising $NHG private MariaDB instances in $WORK"
	mkdir -p "$WORK/db0"
	# Up to three tries: under load, mariadbd --bootstrap here sometimes reads its input garbled
	# ("ERROR: 1105 Bootstrap file error ... Nearest query: 'INSERT INTO help_topic ...").
	for ((i = 1; ; i++)); do
		timeout 300 mariadb-install-db --no-defaults --datadir="$WORK/db0/data" --auth-root-authentication-method=normal \
			--skip-test-db --user=root "${db_opts[@]}" >"$WORK/install.log" 2>&1 && break
		if [ "$i" -ge 3 ]; then
			tail -n 20 "$WORK/install.log" >&2
			die "mariadb-install-db failed $i times"
		fi
		log "mariadb-install-db failed ($(grep -m1 -o 'ERROR: [^.]*' "$WORK/install.log" | cut -c1-80)), trying again"
		rm -rf "$WORK/db0/data"
	done
	for ((hg = 1; hg < NHG; hg++)); do
		mkdir -p "$WORK/db$hg"
		cp -a "$WORK/db0/data" "$WORK/db$hg/data"
	done
	log "starting $NHG mariadbd"
	for ((hg = 0; hg < NHG; hg++)); do
		take_port "DB_PORT[$hg]"
		mariadbd --no-defaults --datadir="$WORK/db$hg/data" --bind-address=127.0.0.1 --port="${DB_PORT[$hg]}" \
			--socket="$WORK/db$hg/mysqld.sock" --pid-file="$WORK/db$hg/mysqld.pid" \
			--log-error="$WORK/db$hg/mysqld.err" --user=root --skip-name-resolve --max-connections=1000 \
			--skip-log-bin --performance-schema=OFF "${db_opts[@]}" </dev/null >/dev/null 2>&1 &
		DB_PID[hg]=$!
	done
	for ((hg = 0; hg < NHG; hg++)); do
		for ((i = 0; i < 600; i++)); do
			alive "${DB_PID[$hg]}" || die "mariadbd (hostgroup $hg) exited during start-up"
			mariadb-admin --no-defaults -S "$WORK/db$hg/mysqld.sock" -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
			sleep 0.1
		done
		((i < 600)) || die "mariadbd (hostgroup $hg) not ready after 60 s"
		sql "$hg" -e "CREATE USER IF NOT EXISTS $DB_USER@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
			GRANT ALL PRIVILEGES ON *.* TO $DB_USER@'127.0.0.1';
			CREATE DATABASE IF NOT EXISTS sbtest;"
		log "mariadbd hostgroup $hg on 127.0.0.1:${DB_PORT[$hg]} (pid ${DB_PID[$hg]})"
	done
	DB_VERSION=$(sql 0 -e 'SELECT VERSION()')
}

# --- sluice configurations ------------------------------------------------------------
# config_head NAME: the common part of every configuration (listener, servers, user).
config_head() {
	local hg
	cat <<EOF
# bench/rules.sh: configuration "$1"
[proxy]
listen = ["127.0.0.1:${S_PORT[$1]}"]
# Several sluices run at once: none opens the admin or HTTP port (their defaults would collide).
admin_listen = ""
http_listen = ""

[tls]
enabled = false

EOF
	for ((hg = 0; hg < NHG; hg++)); do
		cat <<EOF
[[mysql_servers]]
hostgroup_id = $hg
hostname = "127.0.0.1"
port = ${DB_PORT[$hg]}

EOF
	done
	cat <<EOF
[[mysql_users]]
username = "$DB_USER"
password = "$DB_PASS"
default_hostgroup = 0

EOF
}

# rule ID FLAGIN PATTERN FLAGOUT|- HOSTGROUP|- APPLY: one [[mysql_query_rules]] row.
rule() {
	echo "[[mysql_query_rules]]"
	echo "rule_id = $1"
	[ "$2" = 0 ] || echo "flagIN = $2"
	echo "match_pattern = '$3'"
	[ "$4" = - ] || echo "flagOUT = $4"
	[ "$5" = - ] || echo "destination_hostgroup = $5"
	echo "apply = $6"
	echo
}

# flat_rules: rule_id 1..200 = shard 000..199, each `^/\* NNN` → hostgroup NNN % 3. Shard 000
# matches the first rule, shard 199 only the last: a list scan walks all 200 for it.
flat_rules() {
	local s
	for ((s = 0; s < 200; s++)); do
		rule $((s + 1)) 0 "$(printf '^/\\* %03d' "$s")" - $((s % NHG)) 1
	done
}

# tree_rules: the same routing as a binary search in flagIN/flagOUT chains (the seed's
# "binary search" rule set). A node is a chain (flagIN) holding the rules for its two
# halves: a prefix and a range of next digits, e.g. `^/\* 0[0-4]`; a half that is one digit
# continues with the next digit's range (`^/\* 03` → chain over 030..039), and a full
# three-digit prefix is a leaf: `^/\* 037` → hostgroup 37 % 3, apply = 1. Chains are numbered
# and emitted breadth first, so a chain's rules always have larger rule_ids than the rule
# jumping into it (after a flagOUT switch ProxySQL scans on forward, it does not restart).
# Shards 000..199: the root splits the hundreds digit 0..1, below it tens and units 0..9.
tree_rules() {
	local -a queue=("0::0:1") # chain:prefix:lo:hi
	local head=0 next_chain=1 id=0 chain prefix lo hi mid a b p
	while [ "$head" -lt ${#queue[@]} ]; do
		IFS=: read -r chain prefix lo hi <<<"${queue[head]}"
		head=$((head + 1))
		mid=$(((lo + hi) / 2))
		for half in "$lo:$mid" "$((mid + 1)):$hi"; do
			a=${half%:*} b=${half#*:}
			id=$((id + 1))
			if [ "$a" = "$b" ]; then
				p=$prefix$a
				if [ ${#p} -eq 3 ]; then
					rule "$id" "$chain" "^/\\* $p" - $((10#$p % NHG)) 1
				else
					rule "$id" "$chain" "^/\\* $p" "$next_chain" - 0
					queue+=("$next_chain:$p:0:9")
					next_chain=$((next_chain + 1))
				fi
			else
				rule "$id" "$chain" "^/\\* ${prefix}[$a-$b]" "$next_chain" - 0
				queue+=("$next_chain:$prefix:$a:$b")
				next_chain=$((next_chain + 1))
			fi
		done
	done
}

declare -A CONFIG_DESC=()
write_configs() {
	local n f
	for n in "${CONFIG_LIST[@]}"; do
		take_port "S_PORT[$n]"
		f=$WORK/sluice-$n.toml
		{
			config_head "$n"
			case "$n" in
			flat) flat_rules ;;
			tree) tree_rules ;;
			none) ;;
			esac
		} >"$f"
	done
	has_config flat && CONFIG_DESC[flat]="flat: $(grep -c '^rule_id' "$WORK/sluice-flat.toml") rules \`^/\\* NNN\` → hostgroup NNN % 3, apply = 1, rule_id 1..200 in shard order (000 is the first rule, 199 the last)"
	has_config tree && CONFIG_DESC[tree]="tree: $(grep -c '^rule_id' "$WORK/sluice-tree.toml") rules, a flagIN/flagOUT binary search (root \`^/\\* 0\` / \`^/\\* 1\`, then halves like \`^/\\* 0[0-4]\`, leaves \`^/\\* NNN\` → hostgroup NNN % 3); the path of shard 000 matches 9 rules, that of 199 matches 7"
	has_config none && CONFIG_DESC[none]="none: no rules, every query to the user's default hostgroup 0"
	return 0
}

# check_configs: `sluice --check` every configuration before starting anything on it.
check_configs() {
	local n out
	for n in "${CONFIG_LIST[@]}"; do
		if ! out=$(timeout 30 "${SLUICE_CMD[@]}" --config "$WORK/sluice-$n.toml" --check 2>&1); then
			echo "$out" >&2
			if [[ $out == *mysql_query_rules* ]]; then
				die "this sluice rejects the [[mysql_query_rules]] of configuration '$n' (see above; CONFIGS=none runs without rules)"
			fi
			die "sluice --check rejects configuration '$n' ($WORK/sluice-$n.toml)"
		fi
	done
}

# through PORT ARGS...: the mariadb client through sluice, as the benchmark user, comments kept.
through() {
	local port=$1
	shift
	timeout 10 mariadb --no-defaults --comments --protocol=TCP -h127.0.0.1 -P"$port" -u"$DB_USER" \
		-p"$DB_PASS" --connect-timeout=5 -N -B "$@"
}

# start_sluice NAME: starts sluice with that configuration, waits until SELECT 1 works.
start_sluice() {
	local n=$1 logf=$WORK/sluice-$1.log
	echo "=== $(date +%T) start: ${SLUICE_CMD[*]} --config $WORK/sluice-$n.toml ${SLUICE_EXTRA[*]:-}" >>"$logf"
	spawn_supervised "$WORK/sluice-$n" "$logf" "${SLUICE_CMD[@]}" --config "$WORK/sluice-$n.toml" ${SLUICE_EXTRA[@]+"${SLUICE_EXTRA[@]}"}
	S_PID[$n]=$SPAWNED_PID
	local i err=""
	for ((i = 0; i < 300; i++)); do
		alive "${S_PID[$n]}" || { S_PID[$n]=""; die "sluice ($n) exited during start-up"; }
		if err=$(through "${S_PORT[$n]}" -e 'SELECT 1' 2>&1); then
			log "sluice ($n) listening on 127.0.0.1:${S_PORT[$n]} (pid ${S_PID[$n]})"
			return 0
		fi
		sleep 0.1
	done
	die "SELECT 1 through sluice ($n) still fails after 30 s: $err"
}

# hg_of_port PORT: the hostgroup whose MariaDB listens on PORT, or "?".
hg_of_port() {
	local hg
	for ((hg = 0; hg < NHG; hg++)); do
		[ "${DB_PORT[$hg]}" = "$1" ] && { echo "$hg"; return 0; }
	done
	echo "?"
}

# expected_hg CONFIG SHARD: where the configuration should send `/* SHARD */ ...`.
expected_hg() {
	case "$1" in
	direct | none) echo 0 ;;
	*) echo $((10#$2 % NHG)) ;;
	esac
}

# verify_routing: `/* NNN */ select @@port` through every sluice for a sample of shards; the
# answering port must be hostgroup NNN % 3's (0 for every shard with no rules). Writes the
# table to $WORK/routing.md and fails the script if any is wrong.
verify_routing() {
	local shards=(000 001 002 100 198 199) s n port got want cell bad=0 i r
	for ((i = 0; i < 4; i++)); do # four random ones besides
		for ((r = 0; r < 20; r++)); do
			s=$(printf %03d $((RANDOM % 200)))
			[[ " ${shards[*]} " == *" $s "* ]] || break
		done
		shards+=("$s")
	done
	mapfile -t shards < <(printf '%s\n' "${shards[@]}" | sort -u)
	{
		printf '| shard | NNN %% 3 |'
		for n in "${CONFIG_LIST[@]}"; do printf ' %s: hostgroup (port) |' "$n"; done
		echo
		printf '|---:|---:|'
		for n in "${CONFIG_LIST[@]}"; do printf -- '---|'; done
		echo
		for s in "${shards[@]}"; do
			printf '| %s | %d |' "$s" $((10#$s % NHG))
			for n in "${CONFIG_LIST[@]}"; do
				want=$(expected_hg "$n" "$s")
				if port=$(through "${S_PORT[$n]}" -e "/* $s */ select @@port" 2>&1); then
					got=$(hg_of_port "$port")
					cell="$got ($port)"
				else
					got=error
					cell="error: ${port//|/\\|}"
				fi
				if [ "$got" = "$want" ]; then
					printf ' %s ok |' "$cell"
				else
					printf ' **%s WRONG, expected %s** |' "$cell" "$want"
					bad=$((bad + 1))
				fi
			done
			echo
		done
	} >"$WORK/routing.md"
	ROUTING_SHARDS="${shards[*]}"
	local ports=""
	for ((i = 0; i < NHG; i++)); do ports+="${ports:+, }hostgroup $i = ${DB_PORT[$i]}"; done
	echo "routing check, \`/* NNN */ select @@port\` through each sluice ($ports):" >&2
	cat "$WORK/routing.md" >&2
	if [ "$bad" -gt 0 ]; then
		echo >&2
		die "ROUTING IS WRONG for $bad shard/configuration pair(s), see the table above; no benchmark run"
	fi
	log "routing correct for shards $ROUTING_SHARDS in every configuration"
}

# com_selects: "n0 n1 n2", each instance's Com_select counter.
com_selects() {
	local hg out=()
	for ((hg = 0; hg < NHG; hg++)); do
		out+=("$(sql "$hg" -e "SHOW GLOBAL STATUS LIKE 'Com_select'" | awk '{ print $2 }')")
	done
	echo "${out[*]}"
}

# sb_args SHARD PORT SECONDS: sets SB to the sysbench command line (without the command).
sb_args() {
	SB=(sysbench "$LUA" --shard="$1" --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$2"
		--mysql-user="$DB_USER" --mysql-password="$DB_PASS" --mysql-db=sbtest --threads="$THREADS"
		--time="$3" --report-interval=0)
}

# --- results --------------------------------------------------------------------------
declare -A QPS CPU # key "config|shard" -> space-separated values, one per good run
FAILURES=()
NOTES=()
RUN_NO=0

# measure CONFIG SHARD ROUND: one sysbench run, direct (CONFIG=direct) or through that sluice.
measure() {
	local cfg=$1 shard=$2 round=$3 port pid="" t0="" t1="" logf rc=0 c0 c1
	RUN_NO=$((RUN_NO + 1))
	logf=$WORK/run-$(printf %03d "$RUN_NO")-$cfg-$shard-$round.log
	if [ "$cfg" = direct ]; then
		port=${DB_PORT[0]}
	else
		port=${S_PORT[$cfg]}
		pid=${S_PID[$cfg]}
	fi
	c0=$(com_selects)
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid") || t0=""
	sb_args "$shard" "$port" "$DURATION"
	run_bounded $((DURATION + 60)) "$logf" "${SB[@]}" run || rc=$?
	local what="$cfg shard $shard, round $round"
	if [ -n "$pid" ]; then
		sleep 0.3 # let the proxy finish closing the sessions
		if ! alive "$pid"; then
			FAILURES+=("$what: sluice died (see its log)")
			log "[$RUN_NO/$NRUNS] $what: FAILED, sluice died; last lines of its log:"
			tail -n 20 "$WORK/sluice-$cfg.log" >&2
			stop_sluice "$cfg"
			start_sluice "$cfg"
			return 0
		fi
		t1=$(cpu_ticks "$pid") || t1=""
	fi
	c1=$(com_selects)
	sysbench_figures "$logf" "$rc" "$what" || return 0
	# Which instance executed the run's selects (Com_select deltas): all should be on the
	# expected hostgroup's.
	local want share served
	want=$(expected_hg "$cfg" "$shard")
	read -r share served < <(awk -v a="$c0" -v b="$c1" -v want="$want" 'BEGIN {
		n = split(a, x, " "); split(b, y, " ")
		for (i = 1; i <= n; i++) { d[i - 1] = y[i] - x[i]; t += d[i - 1] }
		s = t > 0 ? d[want] / t : 0
		printf "%.4f ", s
		for (i = 0; i < n; i++) printf "%shg%d %d", (i ? ", " : ""), i, d[i]
		print ""
	}')
	local key="$cfg|$shard"
	if awk -v s="$share" 'BEGIN { exit !(s < 0.99) }'; then
		FAILURES+=("$what: only $(awk -v s="$share" 'BEGIN { printf "%.1f", s * 100 }')% of the selects ran on hostgroup $want ($served)")
		log "[$RUN_NO/$NRUNS] $what: MISROUTED: selects executed per instance: $served (expected all on hostgroup $want)"
		return 0
	fi
	QPS[$key]+="$SB_QPS "
	cpu_per_query "$t0" "$t1" "$SB_Q"
	[ -z "$CPU_US" ] || CPU[$key]+="$CPU_US "
	log "[$RUN_NO/$NRUNS] $what: $SB_QPS qps, $SB_Q queries$CPU_TXT; selects executed: $served"
}

# --- run ------------------------------------------------------------------------------
START_TS=$(date -u '+%Y-%m-%d %H:%M UTC')
START_S=$SECONDS
start_mariadbs
write_configs
check_configs
for n in "${CONFIG_LIST[@]}"; do start_sluice "$n"; done
verify_routing

if [ "$WARMUP" -gt 0 ]; then
	for n in "${CONFIG_LIST[@]}"; do
		log "warm-up: ${WARMUP}s of shard 199 through sluice ($n)"
		sb_args 199 "${S_PORT[$n]}" "$WARMUP"
		run_bounded $((WARMUP + 60)) "$WORK/warmup-$n.log" "${SB[@]}" run ||
			{ tail -n 20 "$WORK/warmup-$n.log" >&2; die "warm-up through sluice ($n) failed"; }
	done
fi

for ((r = 1; r <= ROUNDS; r++)); do
	for run in "${RUNS[@]}"; do
		measure "${run%:*}" "${run#*:}" "$r"
	done
done
ELAPSED=$((SECONDS - START_S))

# --- report ---------------------------------------------------------------------------
CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -n "$CPU_MODEL" ] || CPU_MODEL=$(uname -m)
PARAMS="DURATION=$DURATION THREADS=$THREADS ROUNDS=$ROUNDS CONFIGS=$(shq "${CONFIG_LIST[*]}") WARMUP=$WARMUP"
[ -n "$SLUICE_ARGS" ] && PARAMS+=" SLUICE_ARGS=$(shq "$SLUICE_ARGS")"
[ -n "$SLUICE_BIN" ] && PARAMS+=" SLUICE_BIN=$(shq "$SLUICE_BIN")"

label() {
	case "$1" in
	direct) echo "direct (hostgroup 0's MariaDB)" ;;
	flat) echo "flat, $(grep -c '^rule_id' "$WORK/sluice-flat.toml") rules" ;;
	tree) echo "tree, $(grep -c '^rule_id' "$WORK/sluice-tree.toml") rules" ;;
	none) echo "no rules" ;;
	esac
}
# within A B PCT: "yes" when A/B is within PCT % of 1, "no" otherwise, "n/a" without data.
within() {
	awk -v a="$1" -v b="$2" -v p="$3" 'BEGIN {
		if (a == "FAIL" || b == "FAIL" || a == "" || b == "" || b == 0) { print "n/a"; exit }
		r = a / b; print ((r >= 1 - p / 100 && r <= 1 + p / 100) ? "yes" : "no")
	}'
}
# compare_row TEXT KEY_A KEY_B PCT: a row of the derived-figures table: A's medians relative
# to B's, and whether both ratios are within PCT % of 1.
compare_row() {
	local qa qb ca cb m1 m2 met
	qa=$(median "${QPS[$2]:-}" %.2f) qb=$(median "${QPS[$3]:-}" %.2f)
	ca=$(median "${CPU[$2]:-}" %.3f) cb=$(median "${CPU[$3]:-}" %.3f)
	m1=$(within "$qa" "$qb" "$4") m2=$(within "$ca" "$cb" "$4")
	if [ "$m1" = n/a ] || [ "$m2" = n/a ]; then
		met=n/a
	elif [ "$m1" = yes ] && [ "$m2" = yes ]; then
		met=yes
	elif [ "$m1" = no ] && [ "$m2" = no ]; then
		met="**no** (QPS and CPU)"
	elif [ "$m1" = no ]; then
		met="**no** (QPS)"
	else
		met="**no** (CPU)"
	fi
	echo "| $1 | $(ratio "$qa" "$qb") | $(ratio "$ca" "$cb") | within $4 % | $met |"
}

{
	echo
	echo "### sluice query rules: 200 shards, $START_TS"
	echo
	echo "- machine: $(nproc) CPUs, $CPU_MODEL, Linux $(uname -r); sysbench, the three mariadbd and sluice share these CPUs"
	echo "- mariadbd $DB_VERSION: three private instances, hostgroups 0, 1, 2 (buffer pool 32M each); $(sysbench --version)"
	echo "- sluice: $SLUICE_DESC, git $GIT_REV${SLUICE_ARGS:+, args \`$SLUICE_ARGS\`}; one process per configuration, started once, each on its own port"
	echo "- command: \`$INVOCATION\`"
	echo "- parameters: \`$PARAMS bench/rules.sh\`"
	sb_args '<NNN>' '<port>' "$DURATION"
	echo "- each run: \`${SB[*]/#--mysql-password=*/--mysql-password=…} run\` (bench/shard_select.lua: \`/* NNN */ select 'test' from dual\`, one per event, text protocol);" \
		"$ROUNDS round(s) of ${RUNS[*]}, medians shown; sluice CPU = utime+stime of its process from /proc/PID/stat over the run ÷ the run's queries; total ${ELAPSED}s"
	for n in "${CONFIG_LIST[@]}"; do echo "- ${CONFIG_DESC[$n]}"; done
	echo "- every run checked that all its selects executed on the expected instance (Com_select deltas)"
	echo
	echo "| config | shard | QPS (median) | ratio vs direct | sluice CPU µs/query (median) |"
	echo "|---|---:|---:|---:|---:|"
	d=$(median "${QPS[direct|000]:-}")
	for run in "${RUNS[@]}"; do
		cfg=${run%:*} shard=${run#*:}
		q=$(median "${QPS[$cfg|$shard]:-}")
		if [ "$cfg" = direct ]; then
			echo "| $(label "$cfg") | $shard | $q | 1.000 | – |"
		else
			echo "| $(label "$cfg") | $shard | $q | $(ratio "$q" "$d") | $(median "${CPU[$cfg|$shard]:-}" %.1f) |"
		fi
	done
	if has_config flat || has_config tree; then
		echo
		echo "| comparison (ratio of medians) | QPS ratio | CPU/query ratio | target | met |"
		echo "|---|---:|---:|---|---|"
		has_config flat && compare_row "flat rules: shard 199 vs shard 000" "flat|199" "flat|000" 3
		has_config flat && has_config none && compare_row "shard 199 (flat rules) vs no rules" "flat|199" "none|000" 5
		has_config tree && compare_row "tree rules: shard 199 vs shard 000" "tree|199" "tree|000" 3
		has_config tree && has_config none && compare_row "shard 199 (tree rules) vs no rules" "tree|199" "none|000" 5
	fi
	echo
	echo "Routing check before the runs: \`/* NNN */ select @@port\` through each sluice (mariadb client with --comments);" \
		"the port must be hostgroup NNN % 3's, or hostgroup 0's with no rules. All correct."
	echo
	cat "$WORK/routing.md"
	report_problems
} >"$WORK/report.md"

publish_report "$WORK/report.md"
