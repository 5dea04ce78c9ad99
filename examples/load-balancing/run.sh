#!/usr/bin/env bash
# examples/load-balancing: statements of one hostgroup shared out by server weight (3:1), and a
# server drained (OFFLINE_SOFT) and brought back live, while a transaction open on it finishes
# there. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "two MariaDB servers, 'big' (weight 3) and 'small' (weight 1), both in hostgroup 0"
for server in big small; do
	start_shop_mariadb "$server"
done
start_sluice

# share N: runs N statements on one connection (each picks a server anew: multiplexing) and
# prints how many each server answered, e.g. "big 301 small 99".
share() {
	for ((i = 0; i < $1; i++)); do echo 'SELECT who FROM marker;'; done | sql app app-secret | sort | uniq -c |
		awk '{ n[$2] = $1 } END { printf "big %d small %d\n", n["big"], n["small"] }'
}

step "400 statements from one client"
out=$(share 400)
show "$out"
read -r _ big _ small <<<"$out"
check "all 400 answered" 400 $((big + small))
check_between "big answered about 3/4 of them (300)" 260 340 "$big"
show "stats_mysql_connection_pool (srv_port, status, Queries):"
show "$(admin -e "SELECT srv_port, status, Queries FROM stats_mysql_connection_pool ORDER BY srv_port")"

step "a transaction open on 'small' while 'small' is drained"
session_open tx app app-secret
for ((i = 0; i < 50; i++)); do # BEGIN until the transaction's first statement lands on small
	[ "$(session_sql tx "BEGIN; SELECT who FROM marker;")" = small ] && break
	session_sql tx "COMMIT;" >/dev/null
done
((i < 50)) || die "no transaction landed on 'small' in 50 tries"
show "session tx: BEGIN; SELECT who FROM marker -> small"
admin -e "UPDATE mysql_servers SET status = 'OFFLINE_SOFT' WHERE port = $SMALL_PORT; LOAD MYSQL SERVERS TO RUNTIME"
show "admin: UPDATE mysql_servers SET status = 'OFFLINE_SOFT' WHERE port = $SMALL_PORT; LOAD MYSQL SERVERS TO RUNTIME"
check "runtime_mysql_servers shows it" OFFLINE_SOFT \
	"$(admin -e "SELECT status FROM runtime_mysql_servers WHERE port = $SMALL_PORT")"
out=$(share 100)
show "100 new statements: $out"
check "new statements all go to big" "big 100 small 0" "$out"
check "the open transaction stays on small" small "$(session_sql tx "SELECT who FROM marker;")"
session_sql tx "COMMIT;" >/dev/null
check "after COMMIT the session moves to big too" big "$(session_sql tx "SELECT who FROM marker;")"
session_close tx

step "'small' back ONLINE"
admin -e "UPDATE mysql_servers SET status = 'ONLINE' WHERE port = $SMALL_PORT; LOAD MYSQL SERVERS TO RUNTIME"
out=$(share 400)
show "400 statements: $out"
read -r _ big _ small <<<"$out"
check_between "small gets its share again at once (about 100)" 60 140 "$small"
