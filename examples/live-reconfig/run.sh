#!/usr/bin/env bash
# examples/live-reconfig: change servers, users and rules while a client stays connected: on the
# admin port (LOAD … TO RUNTIME, SAVE … TO DISK, a bad LOAD refused), by SIGHUP (the edited
# file in force; a bad file rejected and the running configuration kept), and at a restart
# (what was saved to disk wins over the file; --initial reseeds from it). See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "two MariaDB servers, 'primary' and 'replica'; sluice knows only primary"
for server in primary replica; do
	start_shop_mariadb "$server"
	db "$server" -e "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(20));"
done
mkdir "$WORK/sluice-data"
start_sluice

# reload_and_wait: SIGHUP, then the log line that says how the reload went.
reload_and_wait() {
	local start i line
	start=$(wc -l <"$WORK/sluice.log")
	kill -HUP "$SLUICE_PID"
	for ((i = 0; i < 100; i++)); do
		line=$(tail -n "+$((start + 1))" "$WORK/sluice.log" | grep -m1 -E 'reload: configuration in force|reload rejected' || true)
		[ -n "$line" ] && { echo "$line"; return 0; }
		sleep 0.1
	done
	die "no reload line in sluice's log 10 s after SIGHUP"
}

step "a client session that stays connected through every change below"
session_open client app app-secret
out=$(session_sql client "SELECT CONNECTION_ID(); SET @kept = 'still here'; SELECT who FROM marker;")
show "$out"
session_id=$(head -n 1 <<<"$out")
check "the session reads primary" primary "$(tail -n 1 <<<"$out")"
# same_session WHEN: the session is the one opened above, with its user variable.
same_session() {
	check "$1: same connection, user variable kept" "$session_id	still here" \
		"$(session_sql client "SELECT CONNECTION_ID(), @kept;")"
}

step "admin port: add a server, a rule and a user, LOAD … TO RUNTIME, SAVE … TO DISK"
admin -v -e "
	INSERT INTO mysql_servers (hostgroup_id, hostname, port, comment) VALUES (1, '127.0.0.1', $REPLICA_PORT, 'added live');
	INSERT INTO mysql_query_rules (rule_id, active, match_digest, destination_hostgroup, apply)
		VALUES (10, 1, '^SELECT', 1, 1);
	INSERT INTO mysql_users (username, password, default_hostgroup, default_schema, backend_username, backend_password)
		VALUES ('reporting', 'report-secret', 1, 'shop', 'app', 'app-secret');
	LOAD MYSQL SERVERS TO RUNTIME;
	LOAD MYSQL USERS TO RUNTIME;
	LOAD MYSQL QUERY RULES TO RUNTIME;
	SAVE MYSQL SERVERS TO DISK;
	SAVE MYSQL USERS TO DISK;
	SAVE MYSQL QUERY RULES TO DISK;" | sed 's/^/    /'
check "runtime_mysql_servers shows both servers" "0	$PRIMARY_PORT
1	$REPLICA_PORT" "$(admin -e 'SELECT hostgroup_id, port FROM runtime_mysql_servers ORDER BY hostgroup_id')"
check "the disk layer holds the new rule" "10	^SELECT" "$(admin -e 'SELECT rule_id, match_digest FROM disk.mysql_query_rules')"
check "the session's next SELECT follows the new rule to replica" replica "$(session_sql client "SELECT who FROM marker;")"
same_session "after LOAD … TO RUNTIME"
out=$(sql reporting report-secret -e "SELECT CURRENT_USER(), who FROM marker")
show "reporting: SELECT CURRENT_USER(), who FROM marker -> $out"
check "the new user logs in (to the backend as app, through backend_username)" "app@127.0.0.1	replica" "$out"

step "admin port: a LOAD with a bad rule is refused, naming it; nothing changes"
check_error "LOAD MYSQL QUERY RULES TO RUNTIME with an invalid regex" \
	"LOAD MYSQL QUERY RULES TO RUNTIME refused: mysql_query_rules rule_id=11: match_pattern" \
	admin -e "INSERT INTO mysql_query_rules (rule_id, active, match_pattern, destination_hostgroup, apply)
		VALUES (11, 1, '(unclosed', 0, 1);
		LOAD MYSQL QUERY RULES TO RUNTIME"
show "$(grep ERROR <<<"$OUTPUT")"
check "runtime_mysql_query_rules still holds rule 10 only" 10 "$(admin -e 'SELECT rule_id FROM runtime_mysql_query_rules')"
admin -e "DELETE FROM mysql_query_rules WHERE rule_id = 11"
check "the session still reads replica" replica "$(session_sql client "SELECT who FROM marker;")"

step "SIGHUP: the edited file goes in force as a whole"
cat >>"$WORK/sluice.toml" <<'TOML'

[[mysql_query_rules]]
rule_id = 1
match_digest = '^INSERT'
error_msg = 'writes are paused for maintenance'
apply = 1
TOML
show "appended to $WORK/sluice.toml: rule 1, INSERT -> error 'writes are paused for maintenance'"
line=$(reload_and_wait)
show "log: ${line#*INFO }"
check_match "sluice logs the reload" 'reload: configuration in force' "$line"
out=$(session_sql client "INSERT INTO orders (item) VALUES ('pen');")
show "INSERT INTO orders … -> $out"
check_match "the session's INSERT is blocked by the file's new rule" \
	'^ERROR 1148 \(42000\).*writes are paused for maintenance$' "$out"
check "the file has no replica nor rule 10: the admin changes are replaced, SELECT reads primary" \
	primary "$(session_sql client "SELECT who FROM marker;")"
check "runtime_mysql_query_rules shows the file's rule" 1 "$(admin -e 'SELECT rule_id FROM runtime_mysql_query_rules')"
same_session "after SIGHUP"

step "SIGHUP with a bad file: rejected, the running configuration stays"
cat >>"$WORK/sluice.toml" <<'TOML'

[[mysql_query_rules]]
rule_id = 2
match_pattern = '(unclosed'
apply = 1
TOML
show "appended to $WORK/sluice.toml: rule 2 with match_pattern '(unclosed'"
line=$(reload_and_wait)
show "log: ${line#*ERROR }"
check_match "sluice logs the rejection with file, line, field and reason" \
	'reload rejected, running configuration kept: .*sluice\.toml:[0-9]+: mysql_query_rules\[[0-9]+\]\.match_pattern: rule_id 2' "$line"
out=$(session_sql client "INSERT INTO orders (item) VALUES ('pen');")
check_match "the INSERT is still blocked by the previous file's rule" 'writes are paused for maintenance' "$out"
check "runtime_mysql_query_rules is unchanged" 1 "$(admin -e 'SELECT rule_id FROM runtime_mysql_query_rules')"
same_session "after the rejected SIGHUP"
session_close client

step "restart: the configuration saved to disk wins over the file"
stop_sluice
start_sluice # the template again: primary only, no rules
check "after a restart, the saved rule and server route SELECT to replica" replica "$(sql app app-secret -e 'SELECT who FROM marker')"
check "the saved user logs in" replica "$(sql reporting report-secret -e 'SELECT who FROM marker')"
stop_sluice
start_sluice "$EXAMPLE_DIR/sluice.toml" --initial
check "with --initial the file replaces the saved configuration: SELECT reads primary" primary \
	"$(sql app app-secret -e 'SELECT who FROM marker')"
check_error "…and the user added on the admin port is gone" "ERROR 1045 (28000)" \
	sql reporting report-secret -e 'SELECT 1'
check "--initial saved the file's configuration to disk too" "0	$PRIMARY_PORT" \
	"$(admin -e 'SELECT hostgroup_id, port FROM disk.mysql_servers')"
