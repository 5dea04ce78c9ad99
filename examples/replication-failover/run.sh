#!/usr/bin/env bash
# examples/replication-failover: what sluice does when the servers of a replication pair change
# under it. The monitor takes a lagging replica out of the read set and puts it back; the admin
# port's SWITCHOVER moves the writer role to a replica with no acknowledged write lost; when the
# writer then dies, a write waits for the replica an operator promotes instead of failing.
# See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "a primary and two replicas (GTID replication)"
start_primary primary
start_replica replica1 primary
start_replica replica2 primary
# Written on the primary only; the replicas get it by replication. The monitor's login reads
# read_only and replication status, and SWITCHOVER uses it to change them.
db primary -e "
	CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
	GRANT ALL ON shop.* TO app@'127.0.0.1';
	CREATE USER monitor@'127.0.0.1' IDENTIFIED BY 'monitor-secret';
	GRANT SUPER, READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, SLAVE MONITOR, BINLOG MONITOR,
		REPLICATION CLIENT ON *.* TO monitor@'127.0.0.1';
	CREATE DATABASE shop;
	CREATE TABLE shop.items (id INT PRIMARY KEY, written_on INT);"
sync_replicas primary replica1 replica2

step "sluice: primary in hostgroup 10 (writer), replicas in 20 (readers, max_replication_lag = 2)"
start_sluice
app() { sql app app-secret "$@"; }
who() {
	case $1 in
	"$PRIMARY_PORT") echo primary ;;
	"$REPLICA1_PORT") echo replica1 ;;
	"$REPLICA2_PORT") echo replica2 ;;
	*) echo "unknown port $1" ;;
	esac
}
# readers_seen N: which servers answered N reads through sluice, as "name count, …".
readers_seen() {
	for ((i = 0; i < $1; i++)); do echo 'SELECT @@port;'; done | app | while read -r port; do who "$port"; done |
		sort | uniq -c | awk '{ printf "%s%s %d", sep, $2, $1; sep = ", " }'
}
# status_of PORT: the server's status in runtime_mysql_servers (its hostgroup too).
status_of() { admin -e "SELECT hostgroup_id, status FROM runtime_mysql_servers WHERE port = $1"; }
stats_status_of() { admin -e "SELECT status FROM stats_mysql_connection_pool WHERE srv_port = $1"; }
# status_is PORT STATUS: for wait_until, which expands its arguments once.
status_is() { [ "$(stats_status_of "$1")" = "$2" ]; }
pings_of() { [ "$(admin -e "SELECT COUNT(*) FROM monitor.mysql_server_ping_log WHERE port = $1")" -ge "$2" ]; }

out=$(readers_seen 20)
show "20 x SELECT @@port -> $out"
check_match "reads: both replicas" '^replica1 [0-9]+, replica2 [0-9]+$' "$out"

step "the monitor's logs (admin port, database monitor, as in ProxySQL)"
wait_until 10 pings_of "$REPLICA1_PORT" 3 ||
	die "no pings of replica1 logged"
out=$(admin -e "SELECT port, ping_success_time_us > 0, ping_error IS NULL FROM monitor.mysql_server_ping_log
	WHERE port = $REPLICA1_PORT ORDER BY time_start_us DESC LIMIT 1")
show "latest ping of replica1 (port, answered, no error): $out"
check "replica1 answered its last ping" "$REPLICA1_PORT"$'\t1\t1' "$out"
out=$(admin -e "SELECT repl_lag FROM monitor.mysql_server_replication_lag_log
	WHERE port = $REPLICA1_PORT ORDER BY time_start_us DESC LIMIT 1")
show "latest replication lag of replica1: $out s"
check "replica1 keeps up" 0 "$out"

step "replica1 stops applying (STOP SLAVE SQL_THREAD): its lag is unknown, counted as 60 s > 2 s"
db replica1 -e "STOP SLAVE SQL_THREAD"
wait_until 10 status_is "$REPLICA1_PORT" SHUNNED_REPLICATION_LAG ||
	die "replica1 was not shunned for lag: $(stats_status_of "$REPLICA1_PORT")"
show "stats_mysql_connection_pool: replica1 $(stats_status_of "$REPLICA1_PORT"); runtime_mysql_servers: $(status_of "$REPLICA1_PORT" | tr '\t' ' ')"
check "runtime_mysql_servers shows it SHUNNED, in hostgroup 20 still (ProxySQL's way)" $'20\tSHUNNED' "$(status_of "$REPLICA1_PORT")"
out=$(readers_seen 20)
show "20 x SELECT @@port -> $out"
check "reads: replica2 alone" "replica2 20" "$out"

db replica1 -e "START SLAVE SQL_THREAD"
wait_until 10 status_is "$REPLICA1_PORT" ONLINE || die "replica1 did not come back ONLINE"
show "START SLAVE SQL_THREAD on replica1 -> $(stats_status_of "$REPLICA1_PORT")"
out=$(readers_seen 20)
show "20 x SELECT @@port -> $out"
check_match "reads: both replicas again" '^replica1 [0-9]+, replica2 [0-9]+$' "$out"

step "a planned switchover to replica2, with writes going on"
# One client writes rows 1..N through sluice, one per statement, and records each row the
# server acknowledged; SWITCHOVER runs meanwhile.
(
	for ((id = 1; id <= 300; id++)); do
		app -e "INSERT INTO items VALUES ($id, @@port)" 2>/dev/null && echo "$id"
		sleep 0.01
	done >"$WORK/acked"
) &
writer=$!
sleep 0.5
out=$(admin -e "SWITCHOVER TO '127.0.0.1:$REPLICA2_PORT'")
show "SWITCHOVER TO '127.0.0.1:$REPLICA2_PORT' -> $out"
wait "$writer"
check "replica2 is the writer (hostgroup 10), the old primary a reader (20)" $'10\tONLINE 20\tONLINE' \
	"$(status_of "$REPLICA2_PORT") $(status_of "$PRIMARY_PORT")"
check "the old primary is read-only now" 1 "$(db primary -e 'SELECT @@read_only')"
wait_until 10 replicating primary || die "the old primary does not replicate from replica2"
show "the old primary replicates from replica2 (re-pointed with [monitor] replication_user)"
out=$(who "$(db replica2 -e 'SELECT written_on FROM shop.items WHERE id = 300')")
check "the client's last write (row 300) ran on replica2" replica2 "$out"
acked=$(wc -l <"$WORK/acked")
present=$(db replica2 -e "SELECT COUNT(*) FROM shop.items")
show "rows acknowledged to the client: $acked; rows on replica2, the new writer: $present"
check "the client's 300 writes were all acknowledged (they waited out the switchover)" 300 "$acked"
check "every acknowledged row is on the new writer, once" "$acked" "$present"

step "the writer (replica2) dies; an operator promotes the old primary 2 s later"
sync_replicas replica2 primary replica1
kill -KILL "${DB_PID[replica2]}"
wait "${DB_PID[replica2]}" 2>/dev/null || true # reaped here: no "Killed" notice from bash
show "kill -9 replica2"
start=$EPOCHREALTIME
(
	sleep 2
	db primary -e "STOP SLAVE; SET GLOBAL read_only = 0"
) &
promoter=$!
# A write sent while there is no writer: it waits (up to writer_wait_ms) instead of failing.
app -e "INSERT INTO items VALUES (1000, @@port)"
ms=$(((${EPOCHREALTIME/./} - ${start/./}) / 1000))
wait "$promoter"
out=$(who "$(db primary -e 'SELECT written_on FROM shop.items WHERE id = 1000')")
show "INSERT row 1000 through sluice -> acknowledged after ${ms} ms, written on $out"
check "the write waited for the promoted primary and ran there" primary "$out"
check_between "it waited for the promotion (2 s) but not the whole window (10 s), in ms" 1500 9500 "$ms"
wait_until 10 status_is "$REPLICA2_PORT" SHUNNED || die "the dead replica2 was not shunned"
show "stats_mysql_connection_pool: replica2 $(stats_status_of "$REPLICA2_PORT") (missed 3 pings); primary: $(status_of "$PRIMARY_PORT" | tr '\t' ' ')"
check "the promoted primary is in the writer hostgroup again" $'10\tONLINE' "$(status_of "$PRIMARY_PORT")"
