#!/usr/bin/env bash
# bench/pgo.sh: a profile-guided (PGO) release build of sluice. An instrumented build is trained
# on sysbench through it (in front of a private MariaDB), its profile merged, and the release
# build that uses the profile is made in its own target directory. Run with --help for options.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: bench/pgo.sh [options]

Every option is also an environment variable (in CAPS); flags win over the environment.

  --train-seconds S        TRAIN_SECONDS   seconds of each training run [15]
  --threads "N ..."        THREADS         sysbench thread counts of the training [1 16]
  --workloads "W ..."      WORKLOADS       training workloads, each run with the text protocol and
                                           prepared statements
                                           [oltp_point_select oltp_read_only oltp_read_write]
  --frame-pointers 0|1     FRAME_POINTERS  1: both builds keep frame pointers
                                           (-Cforce-frame-pointers=yes), as every other build
                                           does (.cargo/config.toml) [1]
                           KEEP_TMP        1 = keep the temp dir (datadir, logs, raw profiles)

It builds target/pgo-train/release/sluice (instrumented, -Cprofile-generate), trains it, merges
the profile into target/pgo/sluice.profdata (llvm-profdata from rustup's llvm-tools component:
`rustup component add llvm-tools`), and builds target/pgo/release/sluice (-Cprofile-use). Both
target directories are separate from target/release, so a plain build stays as it was. The last
line it prints is the PGO binary's path. Measure what it gains, in one alternated run:

  MODE=builds SLUICE_BIN_BEFORE=target/release/sluice SLUICE_BIN=target/pgo/release/sluice bench/compare.sh

Smoke test:  TRAIN_SECONDS=2 THREADS=4 WORKLOADS=oltp_point_select bench/pgo.sh
EOF
}

PROG=pgo.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

OPT_VARS=(TRAIN_SECONDS THREADS WORKLOADS FRAME_POINTERS KEEP_TMP)
FLAG_VARS=(TRAIN_SECONDS THREADS WORKLOADS FRAME_POINTERS)
parse_options "$@"
TRAIN_SECONDS=${TRAIN_SECONDS:-15}
THREADS=${THREADS:-1 16}
WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_only oltp_read_write}
FRAME_POINTERS=${FRAME_POINTERS:-1}
KEEP_TMP=${KEEP_TMP:-0}

require_tools cargo rustc sysbench mariadb mariadbd mariadb-install-db
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"
[ -x "$PROFDATA" ] || die "no llvm-profdata at $PROFDATA: run \`rustup component add llvm-tools\`"

WORK=$(mktemp -d /tmp/sluice-pgo.XXXXXX)
SLUICE_PID=""
cleanup() {
	local rc=$?
	trap - EXIT
	stop_supervised "$SLUICE_PID" "$WORK/sluice" sluice
	stop_mariadbs
	if failed_by_itself "$rc" && [ -f "$WORK/sluice.log" ]; then
		tail -n 20 "$WORK/sluice.log" >&2
	fi
	finish_work "$rc"
}
trap_cleanup

EXTRA=""
[ "$FRAME_POINTERS" = 1 ] && EXTRA="-Cforce-frame-pointers=yes"

log "instrumented build (target/pgo-train)"
(cd "$ROOT" && RUSTFLAGS="-Cprofile-generate=$WORK/profiles $EXTRA" cargo build --release -p sluice --target-dir target/pgo-train) >&2 ||
	die "the instrumented build failed"

start_mariadb "$WORK/db"
sb=(--mysql-host=127.0.0.1 --mysql-user=root --mysql-db=sbtest --tables=4 --table-size=10000)
sysbench oltp_read_write "${sb[@]}" --mysql-port="$MARIADB_PORT" prepare >"$WORK/prepare.log" 2>&1 ||
	die "sysbench prepare failed (see $WORK/prepare.log)"
SLUICE_CMD=("$ROOT/target/pgo-train/release/sluice")
start_quick_sluice "$MARIADB_PORT"
for w in $WORKLOADS; do
	for t in $THREADS; do
		for ps in disable auto; do
			log "training: $w, $t threads, --db-ps-mode=$ps, ${TRAIN_SECONDS}s"
			run_bounded $((TRAIN_SECONDS + 60)) "$WORK/train.log" sysbench "$w" "${sb[@]}" --mysql-port="$SLUICE_PORT" \
				--threads="$t" --time="$TRAIN_SECONDS" --report-interval=0 --db-ps-mode="$ps" run ||
				die "training run $w/$t/$ps failed: $(tail -n 3 "$WORK/train.log")"
		done
	done
done
# The profile is written when the process exits normally (SIGTERM: sluice's orderly stop).
stop_supervised "$SLUICE_PID" "$WORK/sluice" "instrumented sluice"
SLUICE_PID=""
compgen -G "$WORK/profiles/*.profraw" >/dev/null || die "the instrumented sluice wrote no profile in $WORK/profiles"

mkdir -p "$ROOT/target/pgo"
"$PROFDATA" merge -o "$ROOT/target/pgo/sluice.profdata" "$WORK/profiles" || die "llvm-profdata merge failed"
log "PGO build (target/pgo), profile target/pgo/sluice.profdata"
(cd "$ROOT" && RUSTFLAGS="-Cprofile-use=$ROOT/target/pgo/sluice.profdata $EXTRA" cargo build --release -p sluice --target-dir target/pgo) >&2 ||
	die "the PGO build failed"
echo "$ROOT/target/pgo/release/sluice"
