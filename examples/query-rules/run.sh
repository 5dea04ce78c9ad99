#!/usr/bin/env bash
# examples/query-rules: query rules route by digest and by pattern to two hostgroups, rewrite a
# statement, block one with an error, and pick a hostgroup through a flagIN/flagOUT chain; the
# admin port counts each rule's hits. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "two MariaDB servers: 'primary' (hostgroup 0) and 'replica' (hostgroup 1)"
for server in primary replica; do
	start_shop_mariadb "$server"
	db "$server" -e "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(20));"
done

step "sluice with the rules of sluice.toml"
start_sluice

app() { sql app app-secret --comments "$@"; } # --comments: the client keeps /* tenant=… */

step "read/write split (rules 20 and 21, by digest)"
out=$(app -e "SELECT who, @@port FROM marker")
show "SELECT who, @@port FROM marker            -> $out"
check "a plain SELECT goes to the reader (rule 21)" "replica	$REPLICA_PORT" "$out"
out=$(app -e "SELECT who FROM marker FOR UPDATE")
show "SELECT who FROM marker FOR UPDATE         -> $out"
check "SELECT … FOR UPDATE goes to the writer (rule 20)" primary "$out"
app -e "INSERT INTO orders (item) VALUES ('book')"
check "an INSERT (no rule) goes to default_hostgroup 0: the row is on primary" 1 \
	"$(db primary -e 'SELECT COUNT(*) FROM shop.orders')"
check "…and not on replica" 0 "$(db replica -e 'SELECT COUNT(*) FROM shop.orders')"
out=$(app -e "BEGIN; SELECT who FROM marker; COMMIT")
show "BEGIN; SELECT who FROM marker; COMMIT     -> $out"
check "inside a transaction the SELECT stays on the transaction's server" primary "$out"

step "rewrite (rule 10): the old table name legacy_marker becomes marker"
check_error "legacy_marker does not exist on the server itself" "doesn't exist" \
	db replica -e "SELECT who FROM shop.legacy_marker"
out=$(app -e "SELECT who FROM legacy_marker")
show "SELECT who FROM legacy_marker             -> $out"
check "through sluice it is rewritten, then routed to the reader by rule 21" replica "$out"

step "blocking (rule 1, error_msg)"
check_error "DROP TABLE is refused by sluice with error 1148" \
	"ERROR 1148 (42000) at line 1: DDL is not allowed through this proxy" app -e "DROP TABLE orders"
show "$OUTPUT"
check "the table is still there on primary" orders "$(db primary -e "SHOW TABLES FROM shop LIKE 'orders'")"

step "flagIN/flagOUT chain (rule 2 jumps to chain 7; rules 3 and 4 pick the tenant's hostgroup)"
for tenant in blue green red; do
	out=$(app -e "/* tenant=$tenant */ SELECT who FROM marker")
	show "/* tenant=$tenant */ SELECT who FROM marker -> $out"
	case $tenant in
	blue) check "tenant blue goes to hostgroup 0 (rule 3)" primary "$out" ;;
	green) check "tenant green goes to hostgroup 1 (rule 4)" replica "$out" ;;
	red) check "an unknown tenant falls through chain 7 to default_hostgroup 0 (rule 21 is not consulted)" primary "$out" ;;
	esac
done

step "rule hits on the admin port: SELECT rule_id, hits FROM stats_mysql_query_rules"
hits=$(admin -e "SELECT rule_id, hits FROM stats_mysql_query_rules ORDER BY rule_id")
show "$hits"
# rule 1: the DROP. 2: three tagged statements, 3 and 4: one each. 10: the rewrite. 20: FOR
# UPDATE. 21: the plain SELECT, the rewritten one and the one inside the transaction.
expected=$(printf '%s\n' "1	1" "2	3" "3	1" "4	1" "10	1" "20	1" "21	3")
check "each rule's hits" "$expected" "$hits"
