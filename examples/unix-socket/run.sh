#!/usr/bin/env bash
# examples/unix-socket: sluice on the same machine as MariaDB, its backend connections going
# through the server's Unix socket (no TCP stack on that leg: less CPU per statement). See
# README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server, and sluice with [[mysql_servers]] hostname = its socket's path"
start_shop_mariadb primary
# Over its socket the server sees the client as localhost: the account is app@localhost.
db primary -e "
	CREATE USER app@localhost IDENTIFIED BY 'app-secret';
	GRANT ALL ON shop.* TO app@localhost;"
start_sluice
show "$(grep -A3 'mysql_servers' "$WORK/sluice.toml")"

step "clients connect to sluice over TCP as always; sluice forwards over the socket"
out=$(sql app app-secret -e "SELECT who FROM marker")
show "SELECT who FROM marker -> $out"
check "the server answered" primary "$out"
out=$(sql app app-secret -e "SELECT CURRENT_USER()")
show "SELECT CURRENT_USER() -> $out"
check "the server matched the socket's account" "app@localhost" "$out"
# While a statement runs, the server's PROCESSLIST shows where its connection came from:
# `localhost` for the socket, `127.0.0.1:port` for TCP.
host_running() { db primary -e "SELECT HOST FROM information_schema.PROCESSLIST WHERE INFO LIKE '%over-the-socket%' AND ID <> CONNECTION_ID()"; }
sql app app-secret -e "SELECT SLEEP(2), 'over-the-socket'" >/dev/null &
sleeper=$!
running() { [ -n "$(host_running)" ]; }
wait_until 5 running || die "the statement did not start on the server"
host=$(host_running)
show "the server's PROCESSLIST: HOST = $host"
check "sluice's connection came through the socket" localhost "$host"
wait "$sleeper"

step "the admin port and /metrics name the server by its path"
pool=$(admin -e "SELECT srv_host, srv_port, ConnOK FROM stats_mysql_connection_pool")
show "stats_mysql_connection_pool (srv_host, srv_port, ConnOK): $pool"
check_match "the socket's path, port 0" "^$WORK/primary/sock	0	[1-9]" "$pool"
metrics=$(curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | grep -F "server=\"$WORK/primary/sock\"" | head -n 1)
show "$metrics"
check_match "a pool metric labelled with the path" "hostgroup=\"0\"" "$metrics"

step "a bad server row is refused with the field named, and the running config stays"
sed 's|^port = 0 .*|port = 0\nuse_ssl = 1|' "$WORK/sluice.toml" >"$WORK/bad.toml"
out=$("$SLUICE_BIN" --check --config "$WORK/bad.toml" 2>&1) && die "--check accepted TLS over a socket"
show "$out"
check_match "TLS over a socket is refused" "mysql_servers\[0\]\.use_ssl: .*is a Unix socket" "$out"
out=$(admin -e "UPDATE mysql_servers SET use_ssl = 1; LOAD MYSQL SERVERS TO RUNTIME" 2>&1) && die "LOAD accepted TLS over a socket"
show "$out"
check_match "LOAD MYSQL SERVERS TO RUNTIME refuses it too" "use_ssl.*Unix socket" "$out"
check "and statements still go through" primary "$(sql app app-secret -e "SELECT who FROM marker")"

