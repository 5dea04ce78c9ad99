#!/usr/bin/env bash
# examples/io-uring: sluice's per-core workers with io = "auto" do every plain TCP read and
# write of their sessions through an io_uring ring of their own, or stay on epoll (saying why
# in the log) where the kernel does not allow it. Clients see no difference; the Io_uring_*
# counters and the start-up log line show which it is. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server with a shop.items table"
start_shop_mariadb primary
db primary -e "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(64));
	INSERT INTO shop.items SELECT seq, CONCAT('item-', seq) FROM shop.seq_1_to_1000;"

step "sluice with runtime = \"per-core\" and io = \"auto\" (sluice.toml)"
start_sluice
started=$(grep 'sluice started' "$WORK/sluice.log" | tail -n 1)
show "$started"
counter() { admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = '$1'"; }
app() { sql app app-secret "$@"; }
if [[ $started == *'io="io_uring"'* ]]; then
	uring=1
	two_rings() { [ "$(counter Io_uring_rings)" = 2 ]; }
	wait_until 5 two_rings || true # each worker makes its ring as it starts
	check "one ring per worker (Io_uring_rings)" 2 "$(counter Io_uring_rings)"
	check_match "/metrics" '^sluice_io_uring_rings 2$' "$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")"
else
	uring=0
	show "$(grep 'io_uring is not available' "$WORK/sluice.log" | tail -n 1)"
	check "no ring where the kernel does not allow io_uring" 0 "$(counter Io_uring_rings)"
fi

step "clients see what they see on epoll: results, errors, a 1 MB value"
before=$(counter Io_uring_completions)
out=$(app -e "SELECT COUNT(*), MAX(name) FROM items")
show "SELECT COUNT(*), MAX(name) FROM items -> $out"
check "the rows" "$(printf '1000\titem-999')" "$out"
check_error "a statement the server refuses keeps its error" 1146 app -e "SELECT * FROM no_such_table"
out=$(app -e "SELECT LENGTH(REPEAT('x', 1000000)), MD5(REPEAT('x', 1000000)) = MD5(CONCAT(REPEAT('x', 999999), 'x'))")
check "a 1 MB value" "$(printf '1000000\t1')" "$out"
out=$(app -e "SELECT id, name FROM items ORDER BY id" | wc -l)
check "1000 rows in one result" 1000 "$out"
for i in $(seq 1 20); do app -e "SELECT name FROM items WHERE id = $i" >/dev/null; done
after=$(counter Io_uring_completions)
show "Io_uring_completions: $before -> $after; Io_uring_enters: $(counter Io_uring_enters)"
if [ "$uring" = 1 ]; then
	[ "$after" -gt "$((before + 40))" ] || die "the sessions' reads and writes did not go through the rings ($before -> $after completions)"
else
	check "no completions on epoll" 0 "$after"
fi

step "io = \"epoll\" (or --io epoll) keeps every worker on epoll"
stop_sluice
start_sluice "$EXAMPLE_DIR/sluice.toml" --io epoll
show "$(grep 'sluice started' "$WORK/sluice.log" | tail -n 1)"
out=$(app -e "SELECT COUNT(*) FROM items")
check "the same answer" 1000 "$out"
check "no ring" 0 "$(counter Io_uring_rings)"
