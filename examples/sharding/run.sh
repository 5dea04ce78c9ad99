#!/usr/bin/env bash
# examples/sharding: `shop.orders` split over 4 shards (2 MariaDB servers x 2 databases) by
# user_id % 4, through one sluice: DDL reaching every shard, a multi-row INSERT split per shard,
# reads routed by the key or merged across shards (ORDER BY + LIMIT, aggregates), a binding
# join and a broadcast table, a single table on one node, a transaction across shards (XA), a table sharded live through
# the admin tables by an inline expression, and what sluice refuses. See docs/sharding.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "two MariaDB servers, two shard databases on each"
for server in shards_a shards_b; do
	start_mariadb "$server"
	# `shop` exists on both (pooled connections follow the client's schema; it stays empty on
	# shards_b); the shards are ds_0..ds_3.
	db "$server" -e "
		CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
		GRANT ALL ON shop.* TO app@'127.0.0.1';
		GRANT ALL ON \`ds\\_%\`.* TO app@'127.0.0.1';
		CREATE DATABASE shop;"
done
db shards_a -e "CREATE DATABASE ds_0; CREATE DATABASE ds_1"
db shards_b -e "CREATE DATABASE ds_2; CREATE DATABASE ds_3"

step "sluice: [[shard_databases]] shop on 4 nodes, [[sharded_tables]] orders and order_items by user_id"
start_sluice
app() { sql app app-secret "$@"; }

step "DDL on a logical table reaches every physical table"
app -e "CREATE TABLE orders (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, amount DECIMAL(10,2), region INT)"
app -e "CREATE TABLE order_items (order_id BIGINT, user_id BIGINT NOT NULL, sku VARCHAR(10))"
app -e "CREATE TABLE regions (id INT PRIMARY KEY, name VARCHAR(10))"
out=$(for s in "shards_a ds_0" "shards_a ds_1" "shards_b ds_2" "shards_b ds_3"; do
	set -- $s
	db "$1" -e "SELECT CONCAT('$2: ', GROUP_CONCAT(table_name ORDER BY table_name)) FROM information_schema.tables WHERE table_schema = '$2'"
done)
show "$out"
check "each shard has orders, order_items and regions" \
	$'ds_0: orders,order_items,regions\nds_1: orders,order_items,regions\nds_2: orders,order_items,regions\nds_3: orders,order_items,regions' "$out"

step "one multi-row INSERT, split per shard by user_id % 4"
app -e "INSERT INTO orders (id, user_id, amount, region) VALUES
	(1, 1, 10.00, 1), (2, 2, 20.00, 2), (3, 3, 30.00, 1), (4, 4, 40.00, 2),
	(5, 5, 50.00, 1), (6, 6, 60.00, 2), (7, 7, 70.00, 1), (8, 8, 80.00, 2)"
app -e "INSERT INTO order_items (order_id, user_id, sku) VALUES (1, 1, 'pen'), (5, 5, 'ink'), (5, 5, 'pad'), (2, 2, 'cup')"
app -e "INSERT INTO regions VALUES (1, 'north'), (2, 'south')"
out=$(for s in "shards_a ds_0" "shards_a ds_1" "shards_b ds_2" "shards_b ds_3"; do
	set -- $s
	db "$1" -e "SELECT CONCAT('$2: users ', GROUP_CONCAT(user_id ORDER BY user_id)) FROM $2.orders"
done)
show "$out"
check "each row on its key's shard" $'ds_0: users 4,8\nds_1: users 1,5\nds_2: users 2,6\nds_3: users 3,7' "$out"

step "reads: by the key to one shard, or merged across all of them"
out=$(app -e "SELECT id, amount FROM orders WHERE user_id = 5")
show "SELECT id, amount FROM orders WHERE user_id = 5 -> $out"
check "one shard (ds_1) answers" $'5\t50.00' "$out"
out=$(app -e "SELECT id FROM orders ORDER BY amount DESC LIMIT 2, 3" | tr '\n' ' ')
show "SELECT id FROM orders ORDER BY amount DESC LIMIT 2, 3 -> $out"
check "a k-way merge of the 4 shards, the offset applied in the merge" "6 5 4 " "$out"
out=$(app -e "SELECT COUNT(*), SUM(amount), MIN(amount), MAX(user_id) FROM orders")
show "SELECT COUNT(*), SUM(amount), MIN(amount), MAX(user_id) FROM orders -> $out"
check "aggregates combined across shards" $'8\t360.00\t10.00\t8' "$out"
out=$(app -e "SELECT region, COUNT(*), SUM(amount), AVG(amount) FROM orders GROUP BY region")
show "SELECT region, COUNT(*), SUM(amount), AVG(amount) FROM orders GROUP BY region -> $(tr '\n' ' ' <<<"$out")"
check "groups merged across shards (AVG from each shard's SUM and COUNT)" $'1\t4\t160.00\t40.000000\n2\t4\t200.00\t50.000000' "$out"
out=$(app -e "SELECT region, SUM(amount) AS total FROM orders GROUP BY region HAVING total > 180")
show "… GROUP BY region HAVING total > 180 -> $out"
check "HAVING tested on the merged groups" $'2\t200.00' "$out"
out=$(app -e "SELECT o.id, i.sku, r.name FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id
	JOIN regions r ON r.id = o.region WHERE o.user_id = 5 ORDER BY i.sku")
show "orders JOIN order_items (binding group) JOIN regions (broadcast) WHERE user_id = 5 -> $(tr '\n' ' ' <<<"$out")"
check "a join that stays on one shard" $'5\tink\tnorth\n5\tpad\tnorth' "$out"

step "EXPLAIN SHARDING: where a statement goes, and how its replies merge"
out=$(app -e "EXPLAIN SHARDING SELECT region, COUNT(*) FROM orders WHERE user_id IN (1, 2, 5) GROUP BY region")
show "$out"
check "two shards, groups merged by key" \
	$'ds_1\t1\tSELECT region, COUNT(*) FROM `ds_1`.`orders` WHERE user_id IN (1, 2, 5) GROUP BY region ORDER BY region ASC\tgroups merged by key, by #1\nds_2\t2\tSELECT region, COUNT(*) FROM `ds_2`.`orders` WHERE user_id IN (1, 2, 5) GROUP BY region ORDER BY region ASC\tgroups merged by key, by #1' \
	"$out"

step "writes by the key, or on every shard"
out=$(app -vvv -e "UPDATE orders SET amount = amount + 1 WHERE user_id IN (1, 2)" | grep -o 'Query OK, [0-9]* rows affected')
show "UPDATE orders SET amount = amount + 1 WHERE user_id IN (1, 2) -> $out"
check "two shards, affected rows summed" "Query OK, 2 rows affected" "$out"
out=$(app -vvv -e "DELETE FROM orders WHERE amount > 65" | grep -o 'Query OK, [0-9]* rows affected')
show "DELETE FROM orders WHERE amount > 65 -> $out"
check "every shard, affected rows summed" "Query OK, 2 rows affected" "$out"
check "what is left" $'6\t212.00' "$(app -e "SELECT COUNT(*), SUM(amount) FROM orders")"

step "a transaction across shards: an XA branch on each, committed in two phases (xa_log)"
out=$(app -e "BEGIN; INSERT INTO orders (id, user_id, amount, region) VALUES (20, 1, 5.00, 1), (21, 2, 6.00, 2);
	SELECT COUNT(*) FROM orders WHERE id IN (20, 21); COMMIT")
check "the transaction reads its own writes" 2 "$out"
check "committed on both shards" $'ds_1\t1\nds_2\t1' "$(db shards_a -e "SELECT 'ds_1', COUNT(*) FROM ds_1.orders WHERE id = 20"; db shards_b -e "SELECT 'ds_2', COUNT(*) FROM ds_2.orders WHERE id = 21")"
check "the commit decision was logged before the XA COMMITs" 1 "$(grep -c '^C ' "$WORK/xa-shop.log")"
app -e "START TRANSACTION; INSERT INTO orders (id, user_id, amount, region) VALUES (22, 3, 1.00, 1), (23, 0, 1.00, 1); ROLLBACK"
check "rolled back on every shard" 0 "$(app -e "SELECT COUNT(*) FROM orders WHERE id IN (22, 23)")"

step "a single table: audit_log is whole on ds_1 (single_tables), every statement runs there"
app -e "CREATE TABLE audit_log (id INT PRIMARY KEY, user_id BIGINT, what VARCHAR(20))"
app -e "INSERT INTO audit_log VALUES (1, 5, 'login'), (2, 5, 'pay'), (3, 6, 'login')"
app -e "INSERT INTO audit_log (id, user_id, what) SELECT id + 10, user_id, CONCAT(what, '-copy') FROM audit_log WHERE user_id = 5"
app -e "UPDATE audit_log SET what = 'logout' ORDER BY id DESC LIMIT 1"
where_is() { db "$1" -e "SELECT CONCAT('$1: ', IFNULL(GROUP_CONCAT(table_schema), 'none')) FROM information_schema.tables WHERE table_name = 'audit_log'"; }
out=$(where_is shards_a; where_is shards_b)
show "$out"
check "created on ds_1 only" $'shards_a: ds_1\nshards_b: none' "$out"
check "its 5 rows there" 5 "$(db shards_a -e "SELECT COUNT(*) FROM ds_1.audit_log")"
out=$(app -e "SELECT id, what FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE user_id = 5) ORDER BY id" | tr '\n' ' ')
show "SELECT id, what FROM audit_log WHERE id IN (SELECT … FROM audit_log …) -> $out"
check "a subquery runs as on one server" $'1\tlogin 2\tpay 11\tlogin-copy 12\tlogout ' "$out"
out=$(app -e "SELECT o.id, a.what FROM orders o JOIN audit_log a ON a.user_id = o.user_id WHERE o.user_id = 5 ORDER BY a.id" | tr '\n' ' ')
show "orders JOIN audit_log WHERE o.user_id = 5 (shard ds_1) -> $out"
check "joined with a sharded table narrowed to a shard on ds_1" $'5\tlogin 5\tpay 5\tlogin-copy 5\tlogout ' "$out"
out=$(app -e "EXPLAIN SHARDING SELECT COUNT(*) FROM audit_log")
show "$out"
check "EXPLAIN SHARDING: one target" $'ds_1\t1\tSELECT COUNT(*) FROM `ds_1`.`audit_log`\tone shard: forwarded' "$out"
check_error "a join reaching shards on other nodes is refused" "would not see \`audit_log\`" \
	app -e "SELECT o.id, a.what FROM orders o JOIN audit_log a ON a.user_id = o.user_id WHERE o.user_id = 6"
show "$OUTPUT"

step "the shard map in admin tables: a table sharded live by an inline expression"
# shellcheck disable=SC2016 # ${user_id % 4} is sluice's expression, not the shell's
expression='ds_${user_id % 4}'
admin -e "INSERT INTO sharded_tables (database, table_name, sharding_column, algorithm, database_expression)
	VALUES ('shop', 'payments', 'user_id', 'inline', '$expression'); LOAD SHARDING TO RUNTIME"
show "$(admin -e "SELECT table_name, algorithm, database_expression FROM runtime_sharded_tables WHERE table_name = 'payments'")"
app -e "CREATE TABLE payments (user_id BIGINT NOT NULL, amount DECIMAL(10,2))"
app -e "INSERT INTO payments (user_id, amount) VALUES (6, 1.00), (7, 2.00)"
check "user 6 on ds_2, user 7 on ds_3 (user_id % 4)" $'6\n7' "$(db shards_b -e "SELECT user_id FROM ds_2.payments UNION ALL SELECT user_id FROM ds_3.payments")"
# shellcheck disable=SC2016
expression='ds_${user_id % 5}'
check_error "a bad row is refused, naming it (user_id % 5 can name ds_4, no node), and the running map stays" "is no node" \
	admin -e "UPDATE sharded_tables SET database_expression = '$expression' WHERE table_name = 'payments'; LOAD SHARDING TO RUNTIME"
show "$OUTPUT"
admin -e "SAVE SHARDING FROM RUNTIME" # the admin tables back to what runs
app -e "INSERT INTO payments (user_id, amount) VALUES (5, 3.00)"
check "the running map still sends user 5 to ds_1" 5 "$(db shards_a -e "SELECT user_id FROM ds_1.payments")"

step "generated keys: an INSERT without the key gets one per row, which picks the shard"
app -e "CREATE TABLE events (id BIGINT PRIMARY KEY, what VARCHAR(10))"
app -e "INSERT INTO events (what) VALUES ('a'), ('b'), ('c'), ('d'), ('e'), ('f'), ('g'), ('h'), ('i'), ('j'), ('k'), ('l')"
check "12 rows" 12 "$(app -e "SELECT COUNT(*) FROM events")"
check "12 distinct keys (SELECT DISTINCT merged across shards)" 12 "$(app -e "SELECT DISTINCT id FROM events" | wc -l)"
spread=$(for s in "shards_a ds_0" "shards_a ds_1" "shards_b ds_2" "shards_b ds_3"; do
	set -- $s
	db "$1" -e "SELECT COUNT(*) FROM $2.events"
done | grep -vc '^0$' || true)
show "shards holding events: $spread of 4"
check_between "the generated keys spread the rows over several shards" 2 4 "$spread"
out=$(app -e "INSERT INTO events (what) VALUES ('m'); SELECT LAST_INSERT_ID(); SELECT id FROM events WHERE what = 'm'")
show "LAST_INSERT_ID() and the row's key: $(echo $out)"
check "LAST_INSERT_ID() is the generated key, as with AUTO_INCREMENT" "$(sed -n 2p <<<"$out")" "$(sed -n 1p <<<"$out")"

step "what sluice refuses (docs/sharding.md says why)"
check_error "UPDATE of the sharding key" "ERROR 1235" app -e "UPDATE orders SET user_id = 9 WHERE id = 1"
show "$OUTPUT"
check_error "a join not on the sharding keys" "only on their sharding keys" app -e "SELECT * FROM orders o JOIN order_items i ON i.order_id = o.id"
show "$OUTPUT"
check_error "an INSERT without the sharding column" "sharding column" app -e "INSERT INTO orders (id, amount) VALUES (99, 1)"
show "$OUTPUT"
