#!/usr/bin/env bash
# examples/read-write-split: [[mysql_replication_hostgroups]] splits one user's statements over a
# primary and two GTID replicas, without query rules: reads to the replicas, writes, locking
# reads and transactions to the primary, a hint to override, causal reads on and off, and the
# admin port's tables. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "a primary and two replicas (GTID replication)"
start_primary primary
start_replica replica1 primary
start_replica replica2 primary
# Written on the primary only; the replicas get it by replication.
db primary -e "
	CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
	GRANT ALL ON shop.* TO app@'127.0.0.1';
	CREATE DATABASE shop;
	CREATE TABLE shop.items (id INT PRIMARY KEY, item VARCHAR(20), written_on INT);
	INSERT INTO shop.items VALUES (1, 'book', @@port);"
sync_replicas primary replica1 replica2
for server in primary replica1 replica2; do
	# Asked alone: MariaDB 10.11 answers @@read_only as 0 in a statement that reads a table.
	show "$server: @@read_only = $(db "$server" -e 'SELECT @@read_only'), shop.items: $(db "$server" -e 'SELECT COUNT(*) FROM shop.items') row"
done
check "the replicas have the primary's row" "1 1" \
	"$(db replica1 -e 'SELECT COUNT(*) FROM shop.items') $(db replica2 -e 'SELECT COUNT(*) FROM shop.items')"

step "sluice: primary in hostgroup 10 (writer), replicas in 20 (readers), no query rules"
start_sluice
# --comments: the client keeps /* … */, where a routing hint goes.
app() { sql app app-secret --comments "$@"; }
# who PORT: the server's name for a port sluice answered with.
who() {
	case $1 in
	"$PRIMARY_PORT") echo primary ;;
	"$REPLICA1_PORT") echo replica1 ;;
	"$REPLICA2_PORT") echo replica2 ;;
	*) echo "unknown port $1" ;;
	esac
}
# answered_by SQL: runs SQL (ending in @@port, or leading with it) through sluice on one
# connection and names the server of each line's first column.
answered_by() {
	local port
	app -e "$1" | while read -r port _; do who "$port"; done
}

step "reads go to the replicas"
# 20 reads on one client connection: each picks a reader anew.
out=$(for ((i = 0; i < 20; i++)); do echo 'SELECT @@port;'; done | app | while read -r port; do who "$port"; done |
	sort | uniq -c | awk '{ printf "%s%s %d", sep, $2, $1; sep = ", " }')
show "20 x SELECT @@port -> $out"
check_match "all 20 answered by the replicas, both of them" '^replica1 [0-9]+, replica2 [0-9]+$' "$out"
out=$(answered_by "SELECT @@port, item FROM items WHERE id = 1")
show "SELECT @@port, item FROM items WHERE id = 1 -> $out"
check_match "a read of a table: a replica" '^replica[12]$' "$out"

step "writes, locking reads and transactions go to the primary"
app -e "INSERT INTO items VALUES (2, 'pen', @@port)"
out=$(who "$(db replica1 -e 'SELECT written_on FROM shop.items WHERE id = 2')")
show "INSERT INTO items VALUES (2, 'pen', @@port) -> written on $out"
check "the INSERT ran on the primary (written_on = its port; replicated in row format)" primary "$out"
out=$(answered_by "SELECT @@port FROM items WHERE id = 1 FOR UPDATE")
show "SELECT @@port FROM items WHERE id = 1 FOR UPDATE -> $out"
check "SELECT … FOR UPDATE: the primary" primary "$out"
out=$(answered_by "BEGIN; SELECT @@port FROM items WHERE id = 1; COMMIT; SELECT @@port")
show "BEGIN; SELECT @@port FROM items …; COMMIT; SELECT @@port -> $(tr '\n' ' ' <<<"$out")"
check_match "inside a transaction: the primary; after COMMIT: a replica again" $'^primary\nreplica[12]$' "$out"
out=$(answered_by "SET autocommit = 0; SELECT @@port; COMMIT; SET autocommit = 1; SELECT @@port")
show "SET autocommit = 0; SELECT @@port; COMMIT; SET autocommit = 1; SELECT @@port -> $(tr '\n' ' ' <<<"$out")"
check_match "under autocommit = 0: the primary; with autocommit back on: a replica" $'^primary\nreplica[12]$' "$out"

step "a routing hint overrides the split"
out=$(answered_by "/* sluice:route=writer */ SELECT @@port, item FROM items WHERE id = 1")
show "/* sluice:route=writer */ SELECT @@port, item FROM items WHERE id = 1 -> $out"
check "a read hinted to the writer: the primary" primary "$out"

step "the admin port: mysql_replication_hostgroups and runtime_mysql_replication_hostgroups"
columns="writer_hostgroup, reader_hostgroup, check_type, causal_reads, comment"
out=$(admin -e "SELECT $columns FROM mysql_replication_hostgroups")
show "mysql_replication_hostgroups:         $out"
check "as configured (check_type defaults to read_only)" $'10\t20\tread_only\tlocal\tshop' "$out"
runtime=$(admin -e "SELECT $columns FROM runtime_mysql_replication_hostgroups")
show "runtime_mysql_replication_hostgroups: $runtime"
check "the runtime table: the same, in force" "$out" "$runtime"

step "causal reads: the replicas stop applying (STOP SLAVE SQL_THREAD), a session writes and reads back"
for server in replica1 replica2; do db "$server" -e "STOP SLAVE SQL_THREAD"; done
# write_then_read ID: one client connection inserts row ID and reads it back at once. Prints
# the server that answered the read, what it saw of the row (NULL: nothing) and how long the
# connection took, in ms.
write_then_read() {
	local start out port item
	start=$EPOCHREALTIME
	out=$(app -e "INSERT INTO items VALUES ($1, 'fresh', @@port);
		SELECT @@port, (SELECT item FROM items WHERE id = $1)")
	read -r port item <<<"$out"
	echo "$(who "$port") $item $(((${EPOCHREALTIME/./} - ${start/./}) / 1000))"
}
read -r server item ms <<<"$(write_then_read 100)"
show "causal_reads = local: INSERT row 100; SELECT it -> $server saw '$item' (${ms} ms)"
check "the row is seen" fresh "$item"
check "the primary answered: no replica applied the write within the wait" primary "$server"
check_between "after the bounded wait (2 s on a replica), in ms" 1900 15000 "$ms"

admin -e "UPDATE mysql_replication_hostgroups SET causal_reads = 'off'; LOAD MYSQL SERVERS TO RUNTIME"
show "admin: UPDATE mysql_replication_hostgroups SET causal_reads = 'off'; LOAD MYSQL SERVERS TO RUNTIME"
check "runtime_mysql_replication_hostgroups shows it" off \
	"$(admin -e "SELECT causal_reads FROM runtime_mysql_replication_hostgroups")"
read -r server item ms <<<"$(write_then_read 101)"
show "causal_reads = off:   INSERT row 101; SELECT it -> $server saw '$item' (${ms} ms)"
check_match "a replica answered at once" '^replica[12]$' "$server"
check "…without the session's own write: a stale read" NULL "$item"

step "the replicas catch up (START SLAVE SQL_THREAD), causal_reads back to local"
for server in replica1 replica2; do db "$server" -e "START SLAVE SQL_THREAD"; done
sync_replicas primary replica1 replica2
admin -e "UPDATE mysql_replication_hostgroups SET causal_reads = 'local'; LOAD MYSQL SERVERS TO RUNTIME"
read -r server item ms <<<"$(write_then_read 102)"
show "causal_reads = local: INSERT row 102; SELECT it -> $server saw '$item' (${ms} ms)"
check "the row is seen" fresh "$item"
check_match "by a replica that applied the write: the read stays on the readers" '^replica[12]$' "$server"
