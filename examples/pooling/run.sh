#!/usr/bin/env bash
# examples/pooling: many client sessions served by few backend connections, each session's
# state (variables, schema, temporary tables, prepared statements) kept as if it had a
# connection of its own. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
python3 -c 'import mysql.connector' 2>/dev/null ||
	die "the binary-protocol part needs python3 with mysql-connector-python (scripts/install-deps, or: pip install mysql-connector-python)"

SESSIONS=20

step "one MariaDB server and sluice (multiplexing on, the default)"
start_mariadb primary
db primary -e "
	CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
	GRANT ALL ON shop.* TO app@'127.0.0.1';
	GRANT ALL ON test.* TO app@'127.0.0.1';
	CREATE DATABASE shop;
	CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20));
	INSERT INTO shop.items VALUES (1, 'pen'), (2, 'ink');"
start_sluice

# backend_connections: the server's own count of connections logged in as app.
backend_connections() { db primary -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app'"; }

step "$SESSIONS client sessions stay connected, each runs statements"
for ((i = 1; i <= SESSIONS; i++)); do
	session_open "s$i" app app-secret
	session_sql "s$i" "SET @me = 'session $i'; SELECT name FROM items WHERE id = 1;" >/dev/null
done
sessions=$(sql app app-secret -e "SHOW PROCESSLIST" | awk -F'\t' '$2 == "app"' | wc -l)
backends=$(backend_connections)
show "sluice's SHOW PROCESSLIST: $sessions sessions of app (the $SESSIONS above and the one asking)"
show "the server's PROCESSLIST:  $backends connections of app"
check "sluice holds $SESSIONS + 1 client sessions" $((SESSIONS + 1)) "$sessions"
# Statements ran one at a time, so one connection could serve them all; one per worker at most.
check_between "the server sees 1 or 2 connections for them" 1 2 "$backends"
pool=$(admin -e "SELECT srv_port, ConnUsed, ConnFree, ConnOK FROM stats_mysql_connection_pool")
show "stats_mysql_connection_pool (srv_port, ConnUsed, ConnFree, ConnOK): $pool"
read -r _ used free _ <<<"$pool"
check "between statements no session holds a connection (ConnUsed)" 0 "$used"
check "the pool's idle connections are the server's connections (ConnFree)" "$backends" "$free"

step "session state is replayed on whichever connection serves the next statement"
session_sql s1 "SET SESSION sql_mode = 'ANSI_QUOTES'; USE test;" >/dev/null
session_sql s2 "SET @me = 'changed by s2';" >/dev/null
default_mode=$(db primary -e "SELECT @@GLOBAL.sql_mode")
out=$(session_sql s1 "SELECT @me, @@sql_mode, DATABASE();")
show "s1: SELECT @me, @@sql_mode, DATABASE()  -> $out"
check "s1 keeps its user variable, sql_mode and schema" "session 1	ANSI_QUOTES	test" "$out"
out=$(session_sql s2 "SELECT @me, @@sql_mode, DATABASE();")
show "s2: SELECT @me, @@sql_mode, DATABASE()  -> $out"
check "s2 has its own variable and the defaults, not s1's" "changed by s2	$default_mode	shop" "$out"
out=$(session_sql s3 "SELECT @me;")
check "s3 still has its own" "session 3" "$out"

step "a temporary table pins its session to one backend connection"
session_sql s4 "CREATE TEMPORARY TABLE cart (item VARCHAR(20)); INSERT INTO cart VALUES ('pen');" >/dev/null
for ((i = 5; i <= SESSIONS; i++)); do session_sql "s$i" "SELECT COUNT(*) FROM items;" >/dev/null; done
check "s4 reads its temporary table" pen "$(session_sql s4 "SELECT item FROM cart;")"
check_match "s5 does not see it (as on a server, temporary tables are per session)" \
	"ERROR 1146 \(42S02\).*cart' doesn't exist" "$(session_sql s5 "SELECT item FROM cart;")"
pins=$(admin -e "SELECT reason, count FROM stats_mysql_multiplex_pins WHERE reason = 'temporary_table'")
show "stats_mysql_multiplex_pins: $pins"
check_match "the pin is counted" '^temporary_table	[1-9]' "$pins"

step "prepared statements: text PREPARE (pins), and the binary protocol (multiplexed)"
session_sql s6 "PREPARE add_one FROM 'SELECT ? + 1'; SET @x = 41;" >/dev/null
for ((i = 7; i <= SESSIONS; i++)); do session_sql "s$i" "SELECT COUNT(*) FROM items;" >/dev/null; done
check "s6's text-protocol statement is still there" 42 "$(session_sql s6 "EXECUTE add_one USING @x;")"
# Ten connections of mysql-connector-python prepare the same statement (COM_STMT_PREPARE) and
# execute it in turns. sluice's statement ids are its own: a backend connection prepares the
# statement once, whichever session runs it there.
stmts_before=$(db primary -e "SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'" | cut -f2)
out=$(timeout 30 python3 - "$SLUICE_PORT" <<'PY'
import sys, mysql.connector
# autocommit: mysql-connector-python turns it off by default, and a session with a transaction
# open keeps its connection (as it must).
conns = [mysql.connector.connect(host="127.0.0.1", port=int(sys.argv[1]), user="app",
                                 password="app-secret", database="shop", autocommit=True)
         for _ in range(10)]
cursors = [c.cursor(prepared=True) for c in conns]
executes = wrong = 0
for round in range(3):
    for n, cur in enumerate(cursors):
        item = 1 + (n + round) % 2
        cur.execute("SELECT ?, name FROM items WHERE id = ?", (n, item))
        executes += 1
        if cur.fetchall() != [(n, ("pen", "ink")[item - 1])]:
            wrong += 1
print(executes, "executes,", wrong, "wrong")
PY
)
show "python (10 sessions, prepared cursors): $out"
check "every execute returned its own session's row" "30 executes, 0 wrong" "$out"
stmts=$(($(db primary -e "SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'" | cut -f2) - stmts_before))
backends=$(backend_connections)
show "the server: $backends connections of app, $stmts copies of the statement the 10 sessions prepared"
check_between "the server holds one copy per backend connection that ran it, not one per session" 1 "$backends" "$stmts"
