#!/usr/bin/env bash
# examples/backend-accounts: with backend_users = true, an account created on the server logs
# in through sluice at once, with the server's privileges; a changed password, a lock or a
# DROP USER is refused at once, with the server's own error. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

step "one MariaDB server (with a monitor login for sluice) and sluice with backend_users = true"
start_mariadb primary
db primary -e "
	CREATE USER monitor@'127.0.0.1' IDENTIFIED BY 'monitor-secret';
	GRANT SELECT ON mysql.global_priv TO monitor@'127.0.0.1';
	CREATE DATABASE shop;
	CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20));
	INSERT INTO shop.items VALUES (1, 'pen');"
start_sluice

# direct USER PASSWORD [mariadb args]: the same client, straight to the server (to compare).
direct() { client "$PRIMARY_PORT" "$@"; }
# same_refusal WHAT EXPECTED USER PASSWORD: the login fails through sluice with EXPECTED, and
# with the same message as on the server itself.
same_refusal() {
	local what=$1 expected=$2 via_sluice
	check_error "$what" "$expected" sql "$3" "$4" -e "SELECT 1"
	via_sluice=$OUTPUT
	show "$via_sluice"
	check_error "…the server itself answers the same" "$expected" direct "$3" "$4" -e "SELECT 1"
	check "…word for word" "$via_sluice" "$OUTPUT"
}

step "alice has no account yet"
same_refusal "alice cannot log in through sluice" "ERROR 1045 (28000)" alice alice-secret

step "CREATE USER on the server: alice logs in through sluice at once"
db primary -e "CREATE USER alice@'127.0.0.1' IDENTIFIED BY 'alice-secret'; GRANT SELECT ON shop.* TO alice@'127.0.0.1';"
show "server: CREATE USER alice@'127.0.0.1' IDENTIFIED BY 'alice-secret'; GRANT SELECT ON shop.* TO alice@'127.0.0.1'"
out=$(sql alice alice-secret -e "SELECT CURRENT_USER(), name FROM shop.items")
show "alice: SELECT CURRENT_USER(), name FROM shop.items -> $out"
check "alice logs in, as herself on the server" "alice@127.0.0.1	pen" "$out"
check_error "the server's privileges apply: no INSERT for alice" "ERROR 1142 (42000)" \
	sql alice alice-secret -e "INSERT INTO shop.items VALUES (2, 'ink')"
show "$(grep ERROR <<<"$OUTPUT")"

step "the password changes on the server: the old one is refused at once"
db primary -e "ALTER USER alice@'127.0.0.1' IDENTIFIED BY 'alice-new-secret'"
show "server: ALTER USER alice@'127.0.0.1' IDENTIFIED BY 'alice-new-secret'"
same_refusal "the old password is refused" "ERROR 1045 (28000)" alice alice-secret
check "the new one works" "alice@127.0.0.1" "$(sql alice alice-new-secret -e 'SELECT CURRENT_USER()')"

step "the account is locked, then unlocked"
db primary -e "ALTER USER alice@'127.0.0.1' ACCOUNT LOCK"
same_refusal "a locked account is refused with the server's message" "ERROR 4151 (HY000)" alice alice-new-secret
db primary -e "ALTER USER alice@'127.0.0.1' ACCOUNT UNLOCK"
check "unlocked, alice logs in again" "alice@127.0.0.1" "$(sql alice alice-new-secret -e 'SELECT CURRENT_USER()')"

step "DROP USER on the server: alice is refused at once"
db primary -e "DROP USER alice@'127.0.0.1'"
show "server: DROP USER alice@'127.0.0.1'"
same_refusal "alice cannot log in any more" "ERROR 1045 (28000)" alice alice-new-secret
