#!/usr/bin/env bash
# examples/login-limits: max_connections refuses the client beyond the limit; wrong passwords
# slow down the next attempt of that address and user, then block it (1129) until FLUSH HOSTS
# on the admin port, without affecting other users. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server and sluice (max_connections = 3, max_connect_errors = 3)"
start_mariadb primary
db primary -e "
	CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret';
	CREATE USER report@'127.0.0.1' IDENTIFIED BY 'report-secret';"
start_sluice

step "max_connections: three clients stay connected, a fourth is refused"
for i in 1 2 3; do
	session_open "c$i" app app-secret
	session_sql "c$i" "SELECT 1;" >/dev/null
done
# --skip-ssl: sluice refuses before the handshake, in clear; a client that wants TLS (this
# mariadb client by default) reports that refusal as its own error 2002 ("Received error packet
# before completion of TLS handshake … 1040 - Too many connections").
check_error "the fourth client gets the server's 'Too many connections'" "ERROR 1040 (08004): Too many connections" \
	sql report report-secret --skip-ssl -e "SELECT 1"
show "$OUTPUT"
session_close c3
logs_in() { sql report report-secret -e "SELECT 1" >/dev/null 2>&1; }
wait_until 5 logs_in || true # the closed session is gone once sluice has read the client's quit
check "with one client gone, a new one gets in" 1 "$(sql report report-secret -e "SELECT 1")"
session_close c1
session_close c2

step "wrong passwords: each failure doubles the wait before the next attempt, the fourth is blocked"
for attempt in 1 2 3; do
	started=$(date +%s%N)
	check_error "wrong password, attempt $attempt: access denied" "ERROR 1045 (28000)" sql app wrong -e "SELECT 1"
	took[attempt]=$((($(date +%s%N) - started) / 1000000))
	show "$OUTPUT  (${took[attempt]} ms)"
done
# The delay counts from the previous failure: 200 ms before attempt 2, 400 ms before attempt 3.
check_between "attempt 2 was answered after about 200 ms" 150 5000 "${took[2]}"
check_between "attempt 3 after about 400 ms" 300 5000 "${took[3]}"
check_error "the right password is now refused too: the address is blocked for app" "ERROR 1129" \
	sql app app-secret -e "SELECT 1"
show "$OUTPUT"
check "another user from the same address is not affected" 1 "$(sql report report-secret -e "SELECT 1")"
check "stats_mysql_global counts the wrong passwords" 3 \
	"$(admin -e "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Access_Denied_Wrong_Password'")"

step "FLUSH HOSTS on the admin port unblocks it"
admin -e "FLUSH HOSTS"
check "app logs in again" 1 "$(sql app app-secret -e "SELECT 1")"
