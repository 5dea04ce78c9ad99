#!/usr/bin/env bash
# sluice real-client suite: the mariadb command-line tools.
#
# Runs the same scripts and commands through the endpoint under test (SLUICE_*)
# and directly against the backend (DIRECT_*) and requires identical output
# (stdout, stderr and exit status, with host/port/timing text normalised), plus
# concrete expected output for a few batch-mode commands.
#
# Environment (defaults in brackets):
#   SLUICE_HOST [127.0.0.1] SLUICE_PORT [3306] SLUICE_USER [root] SLUICE_PASSWORD [] SLUICE_DB [test]
#   DIRECT_HOST [127.0.0.1] DIRECT_PORT [3306] DIRECT_USER [root] DIRECT_PASSWORD []
#   SLUICE_TLS=1 also checks --ssl through the endpoint (SLUICE_TLS_CA=path verifies the certificate)
#   MARIADB (mariadb), MARIADB_DUMP (mariadb-dump), MARIADB_ADMIN (mariadb-admin): client binaries
# Prints `ok NAME` / `FAIL NAME: why` per check and a final `N passed, M failed`.
set -euo pipefail

SLUICE_HOST=${SLUICE_HOST:-127.0.0.1}
SLUICE_PORT=${SLUICE_PORT:-3306}
SLUICE_USER=${SLUICE_USER:-root}
SLUICE_PASSWORD=${SLUICE_PASSWORD:-}
SLUICE_DB=${SLUICE_DB:-test}
DIRECT_HOST=${DIRECT_HOST:-127.0.0.1}
DIRECT_PORT=${DIRECT_PORT:-3306}
DIRECT_USER=${DIRECT_USER:-root}
DIRECT_PASSWORD=${DIRECT_PASSWORD:-}
MARIADB=${MARIADB:-mariadb}
MARIADB_DUMP=${MARIADB_DUMP:-mariadb-dump}
MARIADB_ADMIN=${MARIADB_ADMIN:-mariadb-admin}
T=${CLI_TIMEOUT:-30}               # seconds allowed for any one client invocation
SUITE_T=${CLI_SUITE_TIMEOUT:-240}  # after this many seconds every further invocation fails at once

PASSED=0
FAILED=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cli.XXXXXX")
DB="cli_db_$$"

ok() { PASSED=$((PASSED + 1)); echo "ok $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1: $2"; }

# common client options for an endpoint: sluice | direct
opts() {
    local host port user pass
    if [[ $1 == sluice ]]; then
        host=$SLUICE_HOST port=$SLUICE_PORT user=$SLUICE_USER pass=$SLUICE_PASSWORD
    else
        host=$DIRECT_HOST port=$DIRECT_PORT user=$DIRECT_USER pass=$DIRECT_PASSWORD
    fi
    printf '%s\n' --protocol=TCP "--host=$host" "--port=$port" "--user=$user" --default-character-set=utf8mb4 \
        --connect-timeout=10
    if [[ -n $pass ]]; then printf '%s\n' "--password=$pass"; fi
}

# cli ENDPOINT ARGS... : run the mariadb client (no option files) with a time limit
cli() {
    local ep=$1
    shift
    local -a copts
    mapfile -t copts < <(opts "$ep")
    if ((SECONDS > SUITE_T)); then
        echo "suite time limit of ${SUITE_T}s exceeded" >&2
        return 124
    fi
    timeout "$T" "$MARIADB" --no-defaults "${copts[@]}" "$@"
}

tool() {  # tool BINARY ENDPOINT ARGS...  (mariadb-dump has no --connect-timeout)
    local bin=$1 ep=$2
    shift 2
    local -a copts
    mapfile -t copts < <(opts "$ep" | grep -v '^--connect-timeout=')
    if ((SECONDS > SUITE_T)); then
        echo "suite time limit of ${SUITE_T}s exceeded" >&2
        return 124
    fi
    timeout "$T" "$bin" --no-defaults "${copts[@]}" "$@"
}

cleanup() {
    cli direct -e "DROP DATABASE IF EXISTS \`$DB\`" >/dev/null 2>&1 || true
    if [[ ${CLI_KEEP:-} == 1 ]]; then echo "# outputs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# host/port/timing-specific text is replaced before comparing
normalise() {
    sed -E \
        -e "s/\b(${SLUICE_PORT}|${DIRECT_PORT})\b/<PORT>/g" \
        -e "s/\b(${SLUICE_HOST//./\\.}|${DIRECT_HOST//./\\.})\b/<HOST>/g" \
        -e 's/\([0-9]+\.[0-9]+ sec\)/(<T> sec)/g' \
        -e 's/^-- Dump completed on .*/-- Dump completed on <DATE>/' \
        "$1"
}

# run_both NAME ARGS... : same client invocation through both endpoints, outputs kept in $WORK/NAME.{sluice,direct}.*
run_both() {
    local name=$1 ep rc
    shift
    for ep in sluice direct; do
        rc=0
        cli "$ep" "$@" >"$WORK/$name.$ep.out" 2>"$WORK/$name.$ep.err" || rc=$?
        echo "$rc" >"$WORK/$name.$ep.rc"
    done
}

# same_output NAME : compare normalised stdout, stderr and exit status; print a diff on mismatch
same_output() {
    local name=$1 kind mismatch=0
    for kind in out err rc; do
        normalise "$WORK/$name.sluice.$kind" >"$WORK/$name.sluice.$kind.n"
        normalise "$WORK/$name.direct.$kind" >"$WORK/$name.direct.$kind.n"
        if ! cmp -s "$WORK/$name.sluice.$kind.n" "$WORK/$name.direct.$kind.n"; then
            echo "# $name: $kind differs (--- endpoint, +++ direct):"
            diff -u --label endpoint --label direct "$WORK/$name.sluice.$kind.n" "$WORK/$name.direct.$kind.n" |
                head -60 | sed 's/^/#   /' || true
            mismatch=1
        fi
    done
    return $mismatch
}

# expect_file NAME FILE EXPECTED_TEXT : exact content check, diff on mismatch
expect_text() {
    local name=$1 file=$2 want=$3
    if [[ "$(cat "$file")" == "$want" ]]; then
        return 0
    fi
    echo "# $name: unexpected output (--- got, +++ want):"
    diff -u --label got --label want "$file" <(printf '%s\n' "$want") | head -40 | sed 's/^/#   /' || true
    return 1
}

# ---------------------------------------------------------------------------
# preflight

if ! command -v "$MARIADB" >/dev/null; then
    fail preflight "no $MARIADB client"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi
if ! cli sluice -N -B -e "SELECT 1" >"$WORK/pre.out" 2>&1 || [[ $(cat "$WORK/pre.out") != 1 ]]; then
    fail connect "cannot query through $SLUICE_HOST:$SLUICE_PORT: $(head -c 300 "$WORK/pre.out")"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi
ok connect

# ---------------------------------------------------------------------------
# (a) a multi-statement script run with `source`, through both endpoints

SQL="$WORK/script.sql"
cat >"$SQL" <<EOF
-- sluice CLI transparency script
DROP DATABASE IF EXISTS \`$DB\`;
CREATE DATABASE \`$DB\` CHARACTER SET utf8mb4;
USE \`$DB\`;
SET SESSION sql_mode = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO';
CREATE TABLE items (
  id INT PRIMARY KEY AUTO_INCREMENT,
  name VARCHAR(20) NOT NULL,
  price DECIMAL(8,2),
  created DATE,
  note TEXT
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO items (name, price, created, note) VALUES
  ('apple', 1.25, '2024-01-02', 'red'),
  ('banana', 0.50, '2024-02-03', NULL),
  ('cherry', 12.00, '2024-03-04', 'tab\there'),
  ('dürüm 🌯', 7.50, '2024-04-05', 'line1\nline2');
SELECT * FROM items ORDER BY id;
SELECT LAST_INSERT_ID(), ROW_COUNT();

DELIMITER //
CREATE PROCEDURE report(IN minp DECIMAL(8,2), OUT n INT)
BEGIN
  SELECT name, price FROM items WHERE price >= minp ORDER BY price;
  SELECT COUNT(*) AS cnt, SUM(price) AS total, MAX(created) AS latest FROM items;
  SELECT COUNT(*) INTO n FROM items WHERE price >= minp;
END //
CREATE FUNCTION twice(x INT) RETURNS INT DETERMINISTIC
BEGIN
  RETURN x * 2;
END //
DELIMITER ;

CALL report(1.00, @n);
SELECT @n AS n_from_out_param, twice(21) AS fn;
SELECT 'first' AS a; SELECT 'second' AS b, 2 AS c;

-- warnings
SELECT 1/0 AS div_zero;
SHOW WARNINGS;
SET SESSION sql_mode = '';
INSERT INTO items (name, price) VALUES ('a-name-that-is-far-too-long', 123456789.99);
SHOW WARNINGS;
SELECT id, name, price FROM items WHERE id = LAST_INSERT_ID();
SET SESSION sql_mode = 'STRICT_TRANS_TABLES';

-- intentional errors (the script goes on with --force)
SELECT * FROM no_such_table;
INSERT INTO items (id, name) VALUES (1, 'duplicate');
SELEKT 1;
SHOW WARNINGS;
SELECT 'after errors' AS status;

-- transactions
START TRANSACTION;
UPDATE items SET price = price * 2 WHERE id <= 2;
SELECT id, price FROM items WHERE id <= 2 ORDER BY id;
ROLLBACK;
SELECT id, price FROM items WHERE id <= 2 ORDER BY id;

-- vertical output and NULLs
SELECT id, name, note, NULL AS nothing FROM items WHERE id = 2\G
SELECT name, HEX(name), CHAR_LENGTH(name), LENGTH(name) FROM items WHERE id = 4;
SHOW CREATE TABLE items;
SELECT ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY 1;
EOF

check_source() {  # NAME EXTRA-OPTIONS...
    local name=$1 ep rc
    shift
    for ep in sluice direct; do
        # both runs start from the same state: no database yet
        cli direct -e "DROP DATABASE IF EXISTS \`$DB\`" >/dev/null 2>&1 || true
        rc=0
        cli "$ep" "$@" --force --comments -e "source $SQL" >"$WORK/$name.$ep.out" 2>"$WORK/$name.$ep.err" || rc=$?
        echo "$rc" >"$WORK/$name.$ep.rc"
    done
    if same_output "$name"; then ok "$name"; else fail "$name" "output through the endpoint differs from direct"; fi
}

# batch (tab-separated) output
check_source source_batch --batch
# table format, echoing statements and the server's OK/info/warning counts (-vvv), automatic SHOW WARNINGS
check_source source_verbose --table -vvv --show-warnings

# concrete expectations on the endpoint's batch run
name=source_content
o="$WORK/source_batch.sluice.out" e="$WORK/source_batch.sluice.err"
problems=()
grep -qx $'apple\t1.25' "$o" || problems+=("no 'apple 1.25' row from the procedure")
grep -qx $'cnt\ttotal\tlatest' "$o" || problems+=("no procedure summary header")
grep -qx $'4\t21.25\t2024-04-05' "$o" || problems+=("procedure summary row not '4 21.25 2024-04-05'")
grep -qx $'n_from_out_param\tfn' "$o" || problems+=("no OUT param header")
grep -qx $'3\t42' "$o" || problems+=("OUT param / function result not '3 42'")
grep -qx 'second' <(cut -f1 "$o") || problems+=("second result set of a one-line multi-statement missing")
grep -qx $'Warning\t1365\tDivision by 0' "$o" || problems+=("SHOW WARNINGS lacks 1365")
grep -qx $'Warning\t1265\tData truncated for column \'name\' at row 1' "$o" || problems+=("SHOW WARNINGS lacks 1265")
grep -qx $'Error\t1064\tYou have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near \'SELEKT 1\' at line 1' "$o" ||
    problems+=("SHOW WARNINGS after the syntax error lacks the 1064 row")
grep -qx 'after errors' "$o" || problems+=("--force did not go on after errors")
at="at line [0-9]* in file: '$SQL'"
grep -q "^ERROR 1146 (42S02) $at: Table '$DB.no_such_table' doesn't exist$" "$e" || problems+=("stderr lacks ERROR 1146")
grep -q "^ERROR 1062 (23000) $at: Duplicate entry '1' for key 'PRIMARY'$" "$e" || problems+=("stderr lacks ERROR 1062")
grep -q "^ERROR 1064 (42000) $at: You have an error in your SQL syntax" "$e" || problems+=("stderr lacks ERROR 1064")
grep -q $'^d\xc3\xbcr\xc3\xbcm \xf0\x9f\x8c\xaf\t' "$o" || problems+=("utf8mb4 row not returned intact")
grep -qx 'nothing: NULL' <(sed 's/^ *//' "$o") || problems+=("\\G vertical output lacks 'nothing: NULL'")
if ((${#problems[@]} == 0)); then ok $name; else fail $name "$(IFS=';'; echo "${problems[*]}")"; fi

name=source_verbose_content
o="$WORK/source_verbose.sluice.out"
problems=()
grep -q '^Query OK, 4 rows affected' "$o" || problems+=("no 'Query OK, 4 rows affected'")
grep -q '^Records: 4  Duplicates: 0  Warnings: 0' "$o" || problems+=("no INSERT info line")
grep -q '^Query OK, 1 row affected, 2 warnings' "$o" || problems+=("no 'Query OK, 1 row affected, 2 warnings'")
grep -q '^| Warning | 1265 | Data truncated for column .name. at row 1 *|$' "$o" || problems+=("--show-warnings table lacks 1265")
grep -q '^+----' "$o" || problems+=("no table borders")
if ((${#problems[@]} == 0)); then ok $name; else fail $name "$(IFS=';'; echo "${problems[*]}")"; fi

# mariadb-dump of the database the script built (many SHOW/SET/LOCK commands)
name=dump
if command -v "$MARIADB_DUMP" >/dev/null; then
    for ep in sluice direct; do
        rc=0
        tool "$MARIADB_DUMP" "$ep" --skip-dump-date --routines --single-transaction --hex-blob "$DB" \
            >"$WORK/$name.$ep.out" 2>"$WORK/$name.$ep.err" || rc=$?
        echo "$rc" >"$WORK/$name.$ep.rc"
    done
    if ! same_output $name; then
        fail $name "mariadb-dump output through the endpoint differs from direct"
    elif [[ $(cat "$WORK/$name.sluice.rc") != 0 ]] || ! grep -q '^CREATE TABLE `items`' "$WORK/$name.sluice.out" ||
        ! grep -q 'CREATE DEFINER=.* PROCEDURE `report`' "$WORK/$name.sluice.out" ||
        ! grep -q '^INSERT INTO `items` VALUES' "$WORK/$name.sluice.out"; then
        fail $name "dump incomplete (exit $(cat "$WORK/$name.sluice.rc")): $(head -c 300 "$WORK/$name.sluice.err")"
    else
        ok $name
    fi
else
    fail $name "no $MARIADB_DUMP"
fi

# ---------------------------------------------------------------------------
# (b) batch-mode output of simple commands

check_exact() {  # NAME EXPECTED-STDOUT ARGS... : exact stdout through the endpoint, and identical to direct
    local name=$1 want=$2
    shift 2
    run_both "$name" "$@"
    if ! same_output "$name"; then
        fail "$name" "differs from direct"
    elif [[ $(cat "$WORK/$name.sluice.rc") != 0 ]]; then
        fail "$name" "exit status $(cat "$WORK/$name.sluice.rc"): $(head -c 300 "$WORK/$name.sluice.err")"
    elif ! expect_text "$name" "$WORK/$name.sluice.out" "$want"; then
        fail "$name" "unexpected output"
    else
        ok "$name"
    fi
}

check_exact batch_escaped $'1\na\\tb' --batch -N -e "SELECT 1; SELECT 'a\\tb'"
check_exact batch_raw $'1\na\tb' --batch -N --raw -e "SELECT 1; SELECT 'a\\tb'"
check_exact batch_headers $'x\ty\n1\tNULL\nx\n\\\\ \\n' --batch -e "SELECT 1 AS x, NULL AS y; SELECT '\\\\ \\n' AS x"
check_exact batch_multi_rows $'1\n2\n3' --batch -N -e "SELECT seq FROM seq_1_to_3" "$SLUICE_DB"
check_exact batch_vertical $'*************************** 1. row ***************************\nx: 1\ny: two' \
    --batch -e "SELECT 1 AS x, 'two' AS y\\G"
check_exact batch_database "$SLUICE_DB" --batch -N -e "SELECT DATABASE()" "$SLUICE_DB"
check_exact batch_unicode $'\xf0\x9f\x98\x80\t4\t1' --batch -N --default-character-set=utf8mb4 \
    -e $'SELECT \'\xf0\x9f\x98\x80\', LENGTH(\'\xf0\x9f\x98\x80\'), CHAR_LENGTH(\'\xf0\x9f\x98\x80\')'
check_exact batch_xml "$(printf '%s\n' '<?xml version="1.0"?>' '' \
    '<resultset statement="SELECT 1 AS a, NULL AS b' '" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">' \
    '  <row>' '	<field name="a">1</field>' '	<field name="b" xsi:nil="true" />' '  </row>' '</resultset>')" \
    --xml -e "SELECT 1 AS a, NULL AS b"

# an error: exit status 1, the server's message on stderr, identical to direct
name=batch_error
run_both $name --batch -e "SELECT * FROM \`$SLUICE_DB\`.no_such_table_$$"
if ! same_output $name; then
    fail $name "differs from direct"
elif [[ $(cat "$WORK/$name.sluice.rc") != 1 ]]; then
    fail $name "exit status $(cat "$WORK/$name.sluice.rc"), want 1"
elif ! expect_text $name <(tail -n 1 "$WORK/$name.sluice.err") \
    "ERROR 1146 (42S02) at line 1: Table '$SLUICE_DB.no_such_table_$$' doesn't exist"; then
    fail $name "unexpected stderr"
else
    ok $name
fi

# mariadb-admin: COM_PING and COM_STATISTICS
name=admin_ping
if out=$(tool "$MARIADB_ADMIN" sluice ping 2>&1) && [[ $out == "mysqld is alive" ]]; then ok $name; else fail $name "got '$out'"; fi
name=admin_status
if out=$(tool "$MARIADB_ADMIN" sluice status 2>&1) && [[ $out =~ ^Uptime:\ [0-9]+\ +Threads:\ [0-9]+\ +Questions:\ [0-9]+ ]]; then
    ok $name
else
    fail $name "got '$out'"
fi

# ---------------------------------------------------------------------------
# (c) TLS through the endpoint

if [[ ${SLUICE_TLS:-} == 1 ]]; then
    name=tls
    tls_opts=(--ssl)
    if [[ -n ${SLUICE_TLS_CA:-} ]]; then tls_opts+=("--ssl-ca=$SLUICE_TLS_CA" --ssl-verify-server-cert); fi
    rc=0
    cli sluice "${tls_opts[@]}" -e "status" >"$WORK/tls.out" 2>"$WORK/tls.err" || rc=$?
    # `status` prints the client-side view: "SSL: Cipher in use is ..." (server status would show the backend's)
    if [[ $rc != 0 ]]; then
        fail $name "exit $rc: $(head -c 300 "$WORK/tls.err")"
    elif ! grep -Eq '^SSL:[[:space:]]+Cipher in use is [A-Za-z0-9_-]+' "$WORK/tls.out"; then
        fail $name "no cipher in use: $(grep '^SSL' "$WORK/tls.out" || true)"
    elif [[ $(cli sluice "${tls_opts[@]}" -N -B -e "SELECT REPEAT('s', 100000)" 2>&1 | wc -c) != 100001 ]]; then
        fail $name "100 kB value over TLS came back wrong"
    else
        ok $name
    fi
else
    echo "skip tls: SLUICE_TLS is not 1"
fi

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
