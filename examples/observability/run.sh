#!/usr/bin/env bash
# examples/observability: a few statements through sluice, then what sluice recorded about
# them: digests and counters on the admin port, Prometheus metrics and JSON over HTTP, and one
# JSON line per statement in the query log. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
for tool in curl python3; do command -v "$tool" >/dev/null || die "$tool not found"; done

step "one MariaDB server and sluice"
start_mariadb primary
db primary -e "
	CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
	GRANT ALL ON shop.* TO app@'127.0.0.1';
	CREATE DATABASE shop;
	CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20));
	INSERT INTO shop.items VALUES (1, 'pen'), (2, 'ink');"
start_sluice

step "five statements: one shape with three values, one error, one slow"
for id in 1 2 3; do
	show "SELECT name FROM items WHERE id = $id -> $(sql app app-secret -e "SELECT name FROM items WHERE id = $id")"
done
sql app app-secret -e "SELECT name FROM no_such_table" 2>/dev/null && die "SELECT from a missing table succeeded"
show "SELECT name FROM no_such_table -> error 1146"
sql app app-secret -e "SELECT SLEEP(0.2)" >/dev/null
show "SELECT SLEEP(0.2)"

step "the admin port: stats_mysql_query_digest, stats_mysql_global"
# A statement is counted just after its reply has gone out: give the last one a moment.
all_counted() { [ "$(admin -e "SELECT SUM(count_star) FROM stats_mysql_query_digest")" = 5 ]; }
wait_until 5 all_counted || true
digests=$(admin -e "SELECT digest, digest_text, count_star, sum_rows_sent, errors, p99_us
	FROM stats_mysql_query_digest ORDER BY digest_text")
show "$digests"
items=$(awk -F'\t' '$2 == "SELECT name FROM items WHERE id = ?"' <<<"$digests")
check "the three SELECTs are one digest: 3 runs, 2 rows sent (id 3 has none), no error" \
	"3	2	0" "$(cut -f3-5 <<<"$items")"
items_digest=$(cut -f1 <<<"$items")
check "the failed statement has its digest, with errors = 1" "1	0	1" \
	"$(awk -F'\t' '$2 == "SELECT name FROM no_such_table" { print $3 "\t" $4 "\t" $5 }' <<<"$digests")"
sleep_p99=$(awk -F'\t' '$2 == "SELECT SLEEP(?)" { print $6 }' <<<"$digests")
check_between "SELECT SLEEP(?) took 0.2 s (p99_us)" 200000 5000000 "$sleep_p99"
check "Slow_queries counts it (long_query_time_ms = 100)" 1 \
	"$(admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Slow_queries'")"

step "HTTP: Prometheus /metrics, /readyz, /api/stats/digests"
metrics=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")
show "$(grep -E '^sluice_(questions_total|slow_queries_total|commands_total\{command="SELECT"\}|query_duration_seconds_count|pool_queries_total|querylog_written_total)' <<<"$metrics")"
check_match "sluice_commands_total counts the five SELECTs" '^sluice_commands_total\{command="SELECT"\} 5$' "$metrics"
check_match "sluice_slow_queries_total counts the slow one" '^sluice_slow_queries_total 1$' "$metrics"
check_match "in Prometheus text format, with # TYPE lines" '^# TYPE sluice_questions_total counter$' "$metrics"
check "/readyz: every hostgroup has an ONLINE server" ready "$(curl -fsS "http://127.0.0.1:$HTTP_PORT/readyz")"
json=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/stats/digests?limit=10")
check "/api/stats/digests has the digest, in JSON" "3" "$(python3 -c '
import json, sys
rows = json.loads(sys.argv[1])
print(next(r["count_star"] for r in rows if r["digest"] == sys.argv[2]))' "$json" "$items_digest")"

step "the query log: $WORK/queries.log"
# The log is written by a thread of its own: wait for the five lines.
all_logged() { [ "$(wc -l <"$WORK/queries.log" 2>/dev/null || echo 0)" -ge 5 ]; }
wait_until 5 all_logged || true
show "$(cat "$WORK/queries.log")"
check "five lines, one per statement" 5 "$(wc -l <"$WORK/queries.log")"
# Each line is a JSON object; print a few fields of each to compare.
fields=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    print(e["user"], e["schema"], e["hostgroup"], e["digest"], e["rows_sent"], (e["error"] or {}).get("code"), e["query"], sep="|")
' "$WORK/queries.log")
check "the line of 'id = 3': user, schema, hostgroup, the digest of the admin port, rows sent" \
	"app|shop|0|$items_digest|0|None|SELECT name FROM items WHERE id = 3" "$(grep 'id = 3$' <<<"$fields")"
check_match "the failed statement's line has its error code" '\|1146\|SELECT name FROM no_such_table$' "$fields"
check_between "the slow statement's duration_us" 200000 5000000 \
	"$(python3 -c 'import json, sys; print([json.loads(l)["duration_us"] for l in open(sys.argv[1]) if "SLEEP" in l][0])' "$WORK/queries.log")"
