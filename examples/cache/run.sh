#!/usr/bin/env bash
# examples/cache: a query rule's cache_ttl caches a SELECT's result; the second read is served
# by sluice without the server, a write through sluice drops the result before its OK returns,
# and the Query_Cache_* counters show it all. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server with a shop.products table"
start_shop_mariadb primary
db primary -e "CREATE TABLE shop.products (id INT PRIMARY KEY, price INT);
	INSERT INTO shop.products VALUES (1, 100), (2, 250);"

step "sluice with a rule caching SELECTs of products for 60 s (sluice.toml)"
start_sluice

app() { sql app app-secret "$@"; }
counter() { admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = '$1'"; }
queries_on_server() { db primary -e "SHOW GLOBAL STATUS LIKE 'Com_select'" | cut -f2; }
read_price="SELECT price FROM products WHERE id = 1"

step "a miss, then a hit"
out=$(app -e "$read_price")
show "$read_price -> $out   (from the server: stored)"
check "the first read is the server's" 100 "$out"
before=$(queries_on_server)
out=$(app -e "$read_price")
show "$read_price -> $out   (from the cache)"
check "the second read has the same answer" 100 "$out"
check "…and the server ran no SELECT for it" "$before" "$(queries_on_server)"
check "Query_Cache_count_GET_OK" 1 "$(counter Query_Cache_count_GET_OK)"
check "Query_Cache_Entries" 1 "$(counter Query_Cache_Entries)"

step "a write through sluice invalidates the table's results before its OK returns"
app -e "UPDATE products SET price = 120 WHERE id = 1"
out=$(app -e "$read_price")
show "UPDATE products SET price = 120 WHERE id = 1; $read_price -> $out"
check "the next read sees the write" 120 "$out"
check "Query_Cache_Invalidations" 1 "$(counter Query_Cache_Invalidations)"

step "a write made on the server directly (sluice cannot see it): the cached result stays, up to cache_ttl"
db primary -e "UPDATE shop.products SET price = 130 WHERE id = 1"
out=$(app -e "$read_price")
show "on the server: price = 130; through sluice -> $out (cached, up to cache_ttl)"
check "within the TTL the cached result is served" 120 "$out"

step "what is never cached: NOW(), locking reads, transactions that wrote"
now1=$(app -e "SELECT NOW(6) FROM products LIMIT 1")
now2=$(app -e "SELECT NOW(6) FROM products LIMIT 1")
show "SELECT NOW(6) FROM products LIMIT 1 -> $now1, then $now2"
[ "$now1" != "$now2" ] || die "NOW(6) answered twice the same: $now1"
out=$(app -e "SELECT price FROM products WHERE id = 1 FOR UPDATE")
check "SELECT … FOR UPDATE reads the server" 130 "$out"
out=$(app -e "BEGIN; UPDATE products SET price = price WHERE id = 2; $read_price; COMMIT")
check "a transaction that wrote reads the server" 130 "$out"

step "the counters (stats_mysql_global; /metrics has them too)"
counters=$(admin -e "SELECT Variable_Name, Variable_Value FROM stats_mysql_global WHERE Variable_Name LIKE 'Query_Cache%' ORDER BY Variable_Name")
show "$counters"
check "Query_Cache_count_GET: four lookups (FOR UPDATE and the transaction's read skip the cache)" 4 "$(counter Query_Cache_count_GET)"
check "Query_Cache_count_SET: the first read, and the one after the write" 2 "$(counter Query_Cache_count_SET)"
check_match "/metrics" '^sluice_query_cache_count_get_ok_total 2$' "$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")"
