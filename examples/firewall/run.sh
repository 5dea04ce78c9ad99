#!/usr/bin/env bash
# examples/firewall: a user's statements learned in DETECTING mode from
# stats_mysql_query_digest, then PROTECTING (anything else gets an error and never reaches the
# server), and the SQL-injection heuristic with its fingerprint allowlist. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server with a shop.products table"
start_shop_mariadb primary
db primary -e "CREATE TABLE shop.products (id INT PRIMARY KEY, price INT);
	INSERT INTO shop.products VALUES (1, 100), (2, 250);"

step "sluice with the firewall on; user app in DETECTING mode (sluice.toml)"
start_sluice

app() { sql app app-secret "$@"; }
counter() { admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = '$1'"; }
products() { db primary -e "SELECT COUNT(*) FROM shop.products"; }
# What the application runs.
workload() {
	app -e "SELECT price FROM products WHERE id = $1" >/dev/null
	app -e "UPDATE products SET price = price + 1 WHERE id = $1"
}

step "DETECTING: the application runs; each new digest is logged once"
for id in 1 2 1 2; do workload "$id"; done
show "$(grep -F '(DETECTING)' "$WORK/sluice.log" | sed 's/.*digest_text=/digest_text=/')"
check "one log line per new digest (SELECT and UPDATE)" 2 "$(grep -cF '(DETECTING)' "$WORK/sluice.log")"
check "Firewall_detected counts each statement" 8 "$(counter Firewall_detected)"

step "the SQL-injection heuristic: statements it flags get an error, even in DETECTING mode"
check_error "OR 1=1 in a value" "SQL injection detected (tautology, fingerprint 'T&1o1')" \
	app -e "DELETE FROM products WHERE id = 1 OR 1=1"
show "$OUTPUT"
check_error "a trailing comment cutting the statement short" "fingerprint 'Csc'" \
	app --comments -e "SELECT price FROM products WHERE id = '1'-- ' AND price > 0"
show "$OUTPUT"
check "the DELETE never ran" 2 "$(products)"
check "Firewall_sqli_blocked" 2 "$(counter Firewall_sqli_blocked)"

step "learning: the digests app ran (not only refused), from stats_mysql_query_digest, into the allowlist"
# Statements the firewall refused are in stats_mysql_query_digest too, as errors: a digest that
# never ran without one is left out.
admin -e "INSERT INTO mysql_firewall_whitelist_rules (active, username, client_address, schemaname, flagIN, digest, comment)
	SELECT DISTINCT 1, username, '', schemaname, 0, digest, digest_text FROM stats_mysql_query_digest
	WHERE username = 'app' AND errors < count_star;
	UPDATE mysql_firewall_whitelist_users SET mode = 'PROTECTING', comment = '' WHERE username = 'app';
	LOAD MYSQL FIREWALL TO RUNTIME; SAVE MYSQL FIREWALL TO DISK;"
show "$(admin -e "SELECT username, schemaname, digest, comment FROM runtime_mysql_firewall_whitelist_rules ORDER BY comment")"
check "two rules learned" 2 "$(admin -e "SELECT COUNT(*) FROM runtime_mysql_firewall_whitelist_rules")"
check "app is PROTECTING" PROTECTING "$(admin -e "SELECT mode FROM runtime_mysql_firewall_whitelist_users")"

step "PROTECTING: what was learned runs (any values); anything else gets an error and never reaches the server"
workload 2
check "the learned SELECT, with another id" 102 "$(app -e "SELECT price FROM products WHERE id = 1")"
check_error "DELETE is not on the list" "ERROR 1148 (42000)" app -e "DELETE FROM products"
show "$OUTPUT"
check "the DELETE never ran" 2 "$(products)"
# One connection, two statements: the refused one, then a learned one.
out=$(printf 'DELETE FROM products;\nSELECT price FROM products WHERE id = 2;\n' | app --force 2>&1 || true)
show "$out"
check_match "the session goes on after the error" '^253$' "$out"
check "Firewall_blocked" 2 "$(counter Firewall_blocked)"

step "a bad row is refused by name; the running firewall stays"
check_error "a digest that is not one" "digest: \`0xNOPE\` is not a digest" \
	admin -e "INSERT INTO mysql_firewall_whitelist_rules (username, digest) VALUES ('app', '0xNOPE'); LOAD MYSQL FIREWALL TO RUNTIME"
show "$OUTPUT"
check_error "still PROTECTING" "ERROR 1148" app -e "DELETE FROM products"
admin -e "LOAD MYSQL FIREWALL FROM DISK"
check "the bad row gone again (LOAD MYSQL FIREWALL FROM DISK)" 2 "$(admin -e "SELECT COUNT(*) FROM mysql_firewall_whitelist_rules")"

step "the heuristic alone (allowlist off), and a fingerprint it must not flag"
admin -e "SET mysql-firewall_whitelist_enabled = 0; LOAD MYSQL VARIABLES TO RUNTIME"
check_error "flagged" "fingerprint 'T&1o1'" app -e "SELECT price FROM products WHERE id = 1 OR 1=1"
admin -e "INSERT INTO mysql_firewall_whitelist_sqli_fingerprints (active, fingerprint) VALUES (1, 'T&1o1'); LOAD MYSQL FIREWALL TO RUNTIME"
check "on mysql_firewall_whitelist_sqli_fingerprints: it runs (both rows)" 2 "$(app -e "SELECT price FROM products WHERE id = 1 OR 1=1" | wc -l)"

step "the counters (stats_mysql_global; /metrics has them too)"
show "$(admin -e "SELECT Variable_Name, Variable_Value FROM stats_mysql_global WHERE Variable_Name LIKE 'Firewall%' ORDER BY Variable_Name")"
check "Firewall_blocked" 3 "$(counter Firewall_blocked)"
check "Firewall_sqli_blocked" 3 "$(counter Firewall_sqli_blocked)"
check_match "/metrics" '^sluice_firewall_blocked_total 3$' "$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")"
