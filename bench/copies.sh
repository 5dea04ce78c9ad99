#!/usr/bin/env bash
# bench/copies.sh: how many bytes sluice copies with memmove/memcpy per statement, and where.
# Counted, not timed: uprobes on glibc's memmove (every memcpy of Rust's moves lands there) and
# on sluice::plan::plan (once per COM_QUERY), recorded for a window of a sysbench run through
# sluice in front of a private MariaDB; each build in turn, ROUNDS times. Needs root and perf.
# See bench/README.md ("Copies per statement"); run with --help for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/copies.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --workload W            WORKLOAD          sysbench workload [oltp_point_select]
  --threads N             THREADS           sysbench threads [16]
  --rounds N              ROUNDS            rounds, the builds alternated in each [2]
  --window SECONDS        WINDOW            seconds recorded per run, after 3 s of warm-up [2]
  --runtime R             RUNTIME           sluice --runtime (steal, per-core…) [per-core]
  --sites N               SITES             call sites listed per build (by bytes) [8]
                          SLUICE_BIN        the sluice measured ("after"); when unset, `cargo
                                            build --release -p sluice` is run first
                          SLUICE_BIN_BEFORE a second build ("before"), measured in turn with it
                          KEEP_TMP          1 = keep the temp dir

The binaries need their symbol table (the release profile keeps debug info). The uprobes slow
sluice down several times over: the figures are counts per statement, not speeds.
Example: SLUICE_BIN=target/release/sluice SLUICE_BIN_BEFORE=/tmp/sluice-old bench/copies.sh
EOF
}

PROG=copies.sh
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # die log alive stop_proc take_port parse_options pick_sluice spawn_supervised stop_supervised run_bounded require_tools start_mariadb stop_mariadbs start_quick_sluice finish_work trap_cleanup failed_by_itself machine_line

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OPT_VARS=(WORKLOAD THREADS ROUNDS WINDOW RUNTIME SITES SLUICE_BIN SLUICE_BIN_BEFORE KEEP_TMP)
FLAG_VARS=(WORKLOAD THREADS ROUNDS WINDOW RUNTIME SITES)
WORKLOAD=${WORKLOAD:-oltp_point_select}
THREADS=${THREADS:-16}
ROUNDS=${ROUNDS:-2}
WINDOW=${WINDOW:-2}
RUNTIME=${RUNTIME:-per-core}
SITES=${SITES:-8}
SLUICE_BIN=${SLUICE_BIN:-}
SLUICE_BIN_BEFORE=${SLUICE_BIN_BEFORE:-}
KEEP_TMP=${KEEP_TMP:-0}
parse_options "$@"
for v in THREADS ROUNDS WINDOW SITES; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[ "$(id -u)" = 0 ] || die "needs root (uprobes)"
require_tools mariadbd mariadb-install-db mariadb sysbench perf nm

PROBES=() # the perf probe events this script added, removed on exit
cleanup() {
	local rc=$?
	set +e
	[ -n "${RUN_PID:-}" ] && kill "$RUN_PID" 2>/dev/null
	[ -n "${SLUICE_PID:-}" ] && stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	for p in ${PROBES[@]+"${PROBES[@]}"}; do perf probe -q -d "$p" 2>/dev/null; done
	stop_mariadbs
	if failed_by_itself "$rc" && [ -s "$WORK/sluice.log" ]; then tail -n 20 "$WORK/sluice.log" >&2; fi
	finish_work "$rc"
}
WORK=$(mktemp -d /tmp/sluice-copies.XXXXXX)
trap_cleanup

# The memmove glibc picked for this CPU is one of its IFUNC variants (memcpy shares them):
# every variant present gets a probe, with its length argument.
LIBC=$(ldd "$(command -v sysbench)" | awk '/libc\.so\.6/ && !found { print $3; found = 1 }')
[ -n "$LIBC" ] || die "cannot find glibc"
GROUP=copies
MEMMOVES=()
for variant in avx512_unaligned_erms evex_unaligned_erms avx_unaligned_erms sse2_unaligned_erms; do
	ev="mm_${variant%%_*}"
	if perf probe -q -x "$LIBC" -a "${GROUP}:$ev=__memmove_$variant len=%dx:u64" >/dev/null 2>&1; then
		PROBES+=("${GROUP}:$ev")
		MEMMOVES+=("${GROUP}:$ev")
	fi
done
[ ${#MEMMOVES[@]} -gt 0 ] || die "perf probe could not attach to any of glibc's memmove variants in $LIBC"

BUILDS=(after)
pick_sluice
AFTER_CMD=("${SLUICE_CMD[@]}")
AFTER_DESC=$SLUICE_DESC
if [ -n "$SLUICE_BIN_BEFORE" ]; then
	BUILDS+=(before)
	[ -x "$SLUICE_BIN_BEFORE" ] || die "SLUICE_BIN_BEFORE: $SLUICE_BIN_BEFORE is not executable"
fi
# plan_probe NAME BIN: a probe on BIN's sluice::plan::plan, once per COM_QUERY.
plan_probe() {
	local sym
	sym=$(nm "$2" | awk '$3 ~ /^_ZN6sluice4plan4plan17h/ && !found { print $3; found = 1 }')
	[ -n "$sym" ] || die "$2 has no symbol sluice::plan::plan (stripped?)"
	perf probe -q -x "$2" -a "${GROUP}:plan_$1=$sym" >/dev/null 2>&1 || die "perf probe could not attach to sluice::plan::plan in $2"
	PROBES+=("${GROUP}:plan_$1")
}
plan_probe after "${AFTER_CMD[0]}"
[ -n "$SLUICE_BIN_BEFORE" ] && plan_probe before "$SLUICE_BIN_BEFORE"

start_mariadb "$WORK/db"
SB=(sysbench "$WORKLOAD" --mysql-user=root --mysql-db=sbtest --tables=4 --table-size=10000 --db-ps-mode=disable)
log "sysbench prepare"
"${SB[@]}" --mysql-host=127.0.0.1 --mysql-port="$MARIADB_PORT" prepare >"$WORK/prepare.log" 2>&1 || die "sysbench prepare failed"

events=""
for e in "${MEMMOVES[@]}"; do events+=" -e $e"; done
printf '| build | round | statements recorded | memmove calls per statement | bytes per statement |\n|---|---:|---:|---:|---:|\n' >"$WORK/table.md"
for ((r = 1; r <= ROUNDS; r++)); do
	for b in "${BUILDS[@]}"; do
		if [ "$b" = after ]; then SLUICE_CMD=("${AFTER_CMD[@]}"); else SLUICE_CMD=("$SLUICE_BIN_BEFORE"); fi
		SLUICE_CMD+=(--runtime "$RUNTIME")
		start_quick_sluice "$MARIADB_PORT"
		timeout --kill-after=10 $((WINDOW + 20)) "${SB[@]}" --mysql-host=127.0.0.1 --mysql-port="$SLUICE_PORT" \
			--threads="$THREADS" --time=$((WINDOW + 5)) --report-interval=0 run >"$WORK/sb-$b-$r.log" 2>&1 &
		RUN_PID=$!
		sleep 3
		# shellcheck disable=SC2086 # $events is a list of -e options
		perf record -q -m 1024 -g $events -e "${GROUP}:plan_$b" -o "$WORK/$b-$r.data" -p "$SLUICE_PID" -- sleep "$WINDOW" >/dev/null 2>&1 ||
			die "perf record failed"
		wait "$RUN_PID" || die "sysbench through sluice failed (see $WORK/sb-$b-$r.log)"
		RUN_PID=""
		stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
		SLUICE_PID=""
		# Per event: its length (memmove) and the frame that called it (the line after the
		# sample's first frame, which is memmove itself).
		perf script -i "$WORK/$b-$r.data" 2>/dev/null | awk -v b="$b" -v r="$r" -v sites="$WORK/sites-$b.tsv" '
			/:plan_/ { plans++; next }
			/:mm_/ { match($0, /len=[0-9]+/); len = substr($0, RSTART + 4, RLENGTH - 4); calls++; bytes += len; want = 2; next }
			want == 2 { want = 1; next }
			want == 1 { sub(/^[ \t]*[0-9a-f]+ /, ""); sub(/ \(.*\)$/, ""); n[$0]++; s[$0] += len; want = 0 }
			END {
				if (plans == 0) { print "no statement recorded" > "/dev/stderr"; exit 1 }
				printf "| %s | %d | %d | %.1f | %.0f |\n", b, r, plans, calls / plans, bytes / plans
				for (k in n) printf "%.0f\t%.2f\t%s\n", s[k] / plans, n[k] / plans, k > sites
			}' >>"$WORK/table.md" || die "no statement recorded for $b in round $r (see $WORK/sluice.log)"
		log "$b, round $r: $(tail -n 1 "$WORK/table.md")"
	done
done

{
	echo "### memmove per statement, $(date -u '+%Y-%m-%d %H:%M') UTC"
	echo
	machine_line "sysbench, mariadbd and sluice"
	echo "- sluice (after): $AFTER_DESC, git $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo '?'), \`--runtime $RUNTIME\`"
	[ -n "$SLUICE_BIN_BEFORE" ] && echo "- before: \`$SLUICE_BIN_BEFORE\`"
	echo "- $WORKLOAD, $THREADS threads, $WINDOW s recorded per run after 3 s, $ROUNDS round(s); probes: ${MEMMOVES[*]} in $LIBC, sluice::plan::plan"
	echo
	cat "$WORK/table.md"
	for b in "${BUILDS[@]}"; do
		echo
		echo "Call sites of the last round's $b (bytes and calls per statement, the $SITES largest):"
		echo
		echo '| bytes | calls | caller |'
		echo '|---:|---:|---|'
		sort -t$'\t' -k1,1nr "$WORK/sites-$b.tsv" | head -n "$SITES" | awk -F'\t' '{ printf "| %s | %s | `%s` |\n", $1, $2, $3 }'
	done
}
