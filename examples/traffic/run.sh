#!/usr/bin/env bash
# examples/traffic: a rule mirrors reads to a second server (results discarded, the client
# unaware); a user's max_connections (1203), a user's and a rule's statement limits (1226),
# and an idle client closed after wait_timeout_ms, with their counters. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "two MariaDB servers with a shop.products table: the primary (price 100) and a mirror (price 999)"
for name in primary mirror; do
	start_shop_mariadb "$name"
	db "$name" -e "CREATE USER report@'127.0.0.1' IDENTIFIED BY 'report-secret';
		GRANT ALL ON shop.* TO report@'127.0.0.1';
		CREATE TABLE shop.products (id INT PRIMARY KEY, price INT);"
done
db primary -e "INSERT INTO shop.products VALUES (1, 100)"
db mirror -e "INSERT INTO shop.products VALUES (1, 999)"

step "sluice with a mirror rule, user limits and wait_timeout_ms (sluice.toml)"
start_sluice

app() { sql app app-secret "$@"; }
counter() { admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = '$1'"; }
selects_on() { db "$1" -e "SHOW GLOBAL STATUS LIKE 'Com_select'" | cut -f2; }

step "mirroring: reads of products also run on the mirror; the client gets the primary's answer"
before=$(selects_on mirror)
for _ in 1 2 3 4 5; do out=$(app -e "SELECT price FROM products WHERE id = 1"); done
show "SELECT price FROM products WHERE id = 1 -> $out (five times)"
check "the client gets the primary's price" 100 "$out"
mirrored() { [ "$(counter Mirror_completed)" -ge 5 ]; }
wait_until 10 mirrored || die "the mirror did not run the five reads (Mirror_completed: $(counter Mirror_completed))"
check_between "the mirror ran them too (its Com_select)" $((before + 5)) $((before + 50)) "$(selects_on mirror)"
app -e "INSERT INTO products VALUES (2, 50)"
check "writes are not mirrored by default: the mirror has no row 2" 0 "$(db mirror -e 'SELECT COUNT(*) FROM shop.products WHERE id = 2')"
check "Mirror_queued: the five reads only" 5 "$(counter Mirror_queued)"
counters=$(admin -e "SELECT Variable_Name, Variable_Value FROM stats_mysql_global WHERE Variable_Name LIKE 'Mirror%' ORDER BY Variable_Name")
show "$counters"
check_match "/metrics" '^sluice_mirror_completed_total 5$' "$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")"

step "a dead mirror: the client does not notice"
free_port DEAD_PORT
admin -e "UPDATE mysql_servers SET port = $DEAD_PORT WHERE hostgroup_id = 9; LOAD MYSQL SERVERS TO RUNTIME"
session_open m app app-secret
started=$(date +%s%N)
out=$(session_sql m "$(printf 'SELECT price FROM products WHERE id = 1; %.0s' $(seq 20))")
took=$((($(date +%s%N) - started) / 1000000))
session_close m
show "20 reads on one connection with the mirror down: $took ms in all"
check "the client still gets its answers" "$(printf '100\n%.0s' $(seq 20) | head -c -1)" "$out"
failed() { [ "$(counter Mirror_failed)" -ge 20 ]; }
wait_until 10 failed || die "Mirror_failed: $(counter Mirror_failed)"
check "Mirror_failed counts the mirror's failures, not the client's" 20 "$(counter Mirror_failed)"

step "max_connections = 3 for app: a fourth session is refused with the server's 1203"
for i in 1 2 3; do
	session_open "a$i" app app-secret
	session_sql "a$i" "SELECT 1;" >/dev/null
done
check_error "app's fourth login" "ERROR 1203 (42000): User app already has more than 'max_user_connections' active connections" \
	app -e "SELECT 1"
show "$OUTPUT"
check "Access_Denied_Max_User_Connections" 1 "$(counter Access_Denied_Max_User_Connections)"
check "another user is not affected" 1 "$(sql report report-secret -e 'SELECT 1')"
for i in 1 2 3; do session_close "a$i"; done

step "statement limits: report may run one statement at a time, five per second"
sleep 1.1 # the rate's burst back to full
session_open r1 report report-secret
session_sql r1 "SELECT SLEEP(5);" >/dev/null &
busy=$!
report_running() { [ "$(db primary -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP%'")" -ge 1 ]; }
wait_until 5 report_running || die "the SLEEP did not start"
check_error "a second statement of report while one runs" \
	"User 'report' has exceeded the 'max_concurrent_queries' resource (current value: 1)" \
	sql report report-secret -e "SELECT 1"
show "$OUTPUT"
check_match "…with the server's resource-limit error" "^ERROR 1226 \(42000\)" "$OUTPUT"
check_error "a SLEEP of app while report's runs: the rule's limit (one SLEEP at a time)" \
	"Query rule 2 has exceeded the 'max_concurrent_queries' resource (current value: 1)" \
	app -e "SELECT SLEEP(1)"
show "$OUTPUT"
check "app's other statements are not limited" 1 "$(app -e 'SELECT 1')"
wait "$busy"
session_close r1
sleep 1.1
# From stdin: with --force the client goes on after an error (with -e it would stop).
burst=$(sql report report-secret --force <<<"$(printf 'SELECT 1;\n%.0s' $(seq 8))" 2>&1 || true)
admitted=$(grep -cx 1 <<<"$burst" || true)
refused=$(grep -c "^ERROR 1226 (42000) at line [0-9]*: User 'report' has exceeded the 'max_queries_per_second' resource (current value: 5)$" <<<"$burst" || true)
show "8 statements back to back: $admitted admitted, $refused refused with 1226 'max_queries_per_second'"
check_between "a second's worth (five) admitted" 5 6 "$admitted"
check "the others refused" 8 $((admitted + refused))
check_between "Query_limit_rate_refused" 2 3 "$(counter Query_limit_rate_refused)"
check "Query_limit_concurrent_refused" 2 "$(counter Query_limit_concurrent_refused)"

step "wait_timeout_ms (mysql-wait_timeout) set to 1 s on the admin port: an idle client is disconnected"
admin -e "UPDATE global_variables SET variable_value = '1000' WHERE variable_name = 'mysql-wait_timeout'; LOAD MYSQL VARIABLES TO RUNTIME"
before=$(counter Client_Connections_idle_timeout)
session_open idle app app-secret
session_sql idle "SELECT 1;" >/dev/null
sleep 1.5
closed() { [ "$(counter Client_Connections_idle_timeout)" -gt "$before" ]; }
wait_until 5 closed || die "the idle session was not closed"
session_close idle
check "Client_Connections_idle_timeout grew by one" $((before + 1)) "$(counter Client_Connections_idle_timeout)"
