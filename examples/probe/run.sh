#!/usr/bin/env bash
# examples/probe: the server-time probe. eBPF programs in the kernel time each statement on the
# server itself (the kernel's socket tracepoints in the server's process, or uprobes on
# MariaDB's dispatch_command); sluice times its own part; together they split every digest's
# latency into sluice, network/queue and server time. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# skip WHY: this machine does not allow the probe; the example stops, successfully.
skip() {
	printf '\nSKIPPED [%s]: %s\n' "$EXAMPLE" "$1"
	exit 0
}
[ "$(id -u)" = 0 ] || skip "loading BPF programs needs root (or CAP_BPF and CAP_PERFMON)"

step "one MariaDB server with a shop.products table"
start_shop_mariadb primary
db primary -e "CREATE TABLE shop.products (id INT PRIMARY KEY, price INT);
	INSERT INTO shop.products VALUES (1, 100), (2, 250);"

step "sluice with [probe] enabled = true (sluice.toml)"
start_sluice
probe_line() { grep -oE 'probe: (attached|not) .*' "$WORK/sluice.log" | tail -n 1; }
wait_until 20 probe_line >/dev/null || die "sluice logged nothing about the probe within 20 s"
line=$(probe_line)
show "sluice's log: $line"
[[ $line == "probe: attached"* ]] || skip "the probe cannot attach here: $line"
# method = "auto": the socket method where the kernel has its tracepoints (Linux 6.3+), else
# the dispatch method.
check_match "attached to the process that listens on the server's port, by one method" \
	"probe: attached to (the sockets of pid ${DB_PID[primary]} |_Z16dispatch_command.* in pid ${DB_PID[primary]} )" "$line"

step "statements: three that sleep 200 ms on the server, fifty quick ones"
app() { sql app app-secret "$@"; }
for _ in 1 2 3; do app -e "SELECT SLEEP(0.2)" >/dev/null; done
for i in $(seq 1 50); do echo "SELECT price FROM products WHERE id = $((i % 2 + 1));"; done | app >/dev/null

step "the split, per digest (stats_mysql_query_digest: server_* and proxy_* columns)"
split() {
	admin --table --column-names -e "SELECT digest_text, count_star,
		sum_time / count_star AS avg_total_us,
		server_time_us / server_count AS avg_server_us,
		proxy_time_us / proxy_count AS avg_sluice_us,
		(sum_time - server_time_us - proxy_time_us) / count_star AS avg_network_queue_us,
		server_p50_us, server_p99_us
		FROM stats_mysql_query_digest WHERE digest_text IN ('SELECT SLEEP(?)', 'SELECT price FROM products WHERE id = ?')
		ORDER BY digest_text"
}
col() { admin -e "SELECT CAST($1 AS INT) FROM stats_mysql_query_digest WHERE digest_text = '$2'"; }
# A statement is counted once its reply has reached the client: wait for the last one.
wait_until 5 test "$(col count_star 'SELECT price FROM products WHERE id = ?')" = 50 || true
show "$(split)"
sleep_q='SELECT SLEEP(?)'
check "every sleep got its server time" 3 "$(col server_count "$sleep_q")"
check_between "server time per sleep, µs (200 ms on the server)" 199000 400000 "$(col "server_time_us / server_count" "$sleep_q")"
check_between "sluice's own time per sleep, µs" 0 20000 "$(col "proxy_time_us / proxy_count" "$sleep_q")"
check_between "…which is within the whole" "$(col "server_time_us / 3" "$sleep_q")" 10000000 "$(col "sum_time / 3" "$sleep_q")"
quick='SELECT price FROM products WHERE id = ?'
check "every quick read got its server time" 50 "$(col server_count "$quick")"
check_between "server time per quick read, µs" 1 20000 "$(col "server_time_us / server_count" "$quick")"

step "the same on /metrics and in the JSON (/api/stats/probe)"
metrics=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")
show "$(grep -E '^sluice_(probe_attached|probe_server_seconds|digest_server_seconds_total|digest_proxy_seconds_total)' <<<"$metrics" | head -n 8)"
check_match "/metrics: attached" '^sluice_probe_attached 1$' "$metrics"
check_match "/metrics: per-digest server time" '^sluice_digest_server_seconds_total\{hostgroup="0",digest="0x[0-9A-F]{16}"\} (0\.[6-9]|1\.[01])' "$metrics"
probe=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/stats/probe")
check_match "/api/stats/probe: the server threads' totals from the BPF map" '"threads":\[\{"busy_us":[0-9]+,"calls":[0-9]+' "$probe"

step "the other method, switched live on the admin port (sluice-probe_method)"
if [[ $line == *"the sockets of pid"* ]]; then other=dispatch want="_Z16dispatch_command.* in pid ${DB_PID[primary]} "; else other=socket want="the sockets of pid ${DB_PID[primary]} "; fi
admin -e "UPDATE global_variables SET variable_value = '$other' WHERE variable_name = 'sluice-probe_method'; LOAD MYSQL VARIABLES TO RUNTIME"
switched() { probe_line | grep -qE "probe: attached to $want|probe: not attached"; }
wait_until 10 switched || die "the probe did not follow the new method within 10 s: $(probe_line)"
line=$(probe_line)
show "sluice's log: $line"
if [[ $line == "probe: attached"* ]]; then
	check_match "attached by the $other method" "probe: attached to $want" "$line"
	before=$(col server_count "$sleep_q")
	app -e "SELECT SLEEP(0.2)" >/dev/null
	wait_until 5 test "$(col server_count "$sleep_q")" = $((before + 1)) || true
	check "the next sleep got its server time by the $other method" $((before + 1)) "$(col server_count "$sleep_q")"
else
	show "(this kernel does not allow the $other method; the line says why)"
fi
show "dashboard: http://127.0.0.1:$HTTP_PORT/ (\"Where the time goes\")"
