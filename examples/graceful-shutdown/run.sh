#!/usr/bin/env bash
# examples/graceful-shutdown: on SIGTERM sluice stops taking connections, lets a statement in
# flight finish and exits 0; a statement still running after shutdown_timeout_ms is killed on
# the server (KILL QUERY) and sluice exits 0 all the same. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server and sluice (shutdown_timeout_ms = 3000)"
start_mariadb primary
db primary -e "CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret'"
start_sluice

# sleeping: how many SELECT SLEEP statements the server is running.
sleeping() { db primary -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP%'"; }
running() { [ "$(sleeping)" = 1 ]; }
# in_flight SQL: runs SQL through sluice in the background, its output to $WORK/in-flight.out,
# and waits until the server runs it.
in_flight() {
	(sql app app-secret -e "$1" >"$WORK/in-flight.out" 2>&1 || true) &
	CLIENT_PID=$!
	wait_until 5 running || die "the statement did not start on the server: $(cat "$WORK/in-flight.out")"
}
# sigterm: SIGTERM to sluice; sets STARTED (ns) for `exited`.
sigterm() {
	kill -TERM "$SLUICE_PID"
	STARTED=$(date +%s%N)
}
# exited: waits for sluice to exit; sets RC (its exit status) and TOOK (ms since sigterm).
exited() {
	RC=0
	wait "$SLUICE_PID" || RC=$?
	TOOK=$((($(date +%s%N) - STARTED) / 1000000))
	SLUICE_PID=""
	wait "$CLIENT_PID" || true
}

step "SIGTERM while a 2-second statement runs: it finishes, then sluice exits"
in_flight "SELECT SLEEP(2), 'finished'"
sigterm
refused() { ! sql app app-secret -e "SELECT 1" >/dev/null 2>&1; }
wait_until 1 refused || true
check_error "a new client is refused at once: sluice no longer listens" "ERROR 2002" sql app app-secret -e "SELECT 1"
check "…while the statement in flight still runs on the server" 1 "$(sleeping)"
exited
show "the statement's client printed: $(cat "$WORK/in-flight.out")"
check "the statement in flight got its whole result" "0	finished" "$(cat "$WORK/in-flight.out")"
check "sluice exited 0" 0 "$RC"
show "sluice exited $TOOK ms after SIGTERM"
show "log: $(grep -o 'shutting down.*\|stopped$' "$WORK/sluice.log" | tr '\n' ' ')"

step "SIGTERM while a 30-second statement runs: killed on the server after shutdown_timeout_ms"
start_sluice
in_flight "SELECT SLEEP(30), 'finished'"
sigterm
exited
show "sluice exited $RC, $TOOK ms after SIGTERM"
show "log: $(grep -o 'shutdown timeout reached.*' "$WORK/sluice.log")"
# The client's connection was closed under its statement: it reports a lost connection.
show "the statement's client printed: $(grep ERROR "$WORK/in-flight.out")"
check "sluice exited 0" 0 "$RC"
check_between "it waited shutdown_timeout_ms (3 s), not the statement's 30 s (ms)" 2900 10000 "$TOOK"
gone() { [ "$(sleeping)" = 0 ]; }
wait_until 2 gone || true # the server ends a killed statement a moment after KILL QUERY
check "the statement is no longer running on the server" 0 "$(sleeping)"
