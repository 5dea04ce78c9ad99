//! SQLite's memory on the admin port is capped by admin-memory_limit_bytes and given back when
//! rows are deleted. The cap and the measure are process-wide (SQLite's heap), so this test has a
//! process of its own.

mod common;

use common::*;
use testkit::MariaDb;

#[test]
fn admin_statements_cannot_grow_sqlite_beyond_the_limit() {
    let db = MariaDb::start().expect("MariaDB starts");
    let text = "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"127.0.0.1:0\"\nadmin_memory_limit_bytes = 33554432\n\
                [tls]\nenabled = false\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {BACKEND_PORT}\n\
                [[mysql_users]]\nusername = \"root\"\npassword = \"\"\n";
    let proxy = Proxy::start(toml_config(text, &db));
    let a = proxy.admin_port();
    let admin = |sql: &str| mariadb_cli(a, "admin", Some("admin"), sql);
    // About 100 MB of rows in an in-memory table.
    let big = "CREATE TABLE big AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) \
               SELECT x, randomblob(1000) AS b FROM c";
    let e = admin(big).unwrap_err();
    assert!(e.contains("ERROR 1105") && e.contains("more memory than admin-memory_limit_bytes allows (33554432 bytes)"), "{e}");
    // Nothing was kept, and the admin port works on.
    assert!(admin("SELECT COUNT(*) FROM big").unwrap_err().contains("no such table"));
    admin("INSERT INTO mysql_query_rules (rule_id,active,match_pattern,apply) VALUES (1,1,'^SELECT',0); LOAD MYSQL QUERY RULES TO RUNTIME")
        .unwrap();
    assert_eq!(admin("SELECT COUNT(*) FROM runtime_mysql_query_rules").unwrap(), "1");
    // Raising the limit lets the same statement through.
    admin("UPDATE global_variables SET variable_value = '536870912' WHERE variable_name = 'admin-memory_limit_bytes'; LOAD ADMIN VARIABLES TO RUNTIME")
        .unwrap();
    admin(big).expect("fits under 512 MiB");
    let full = sqlite_memory();
    assert!(full > 80 << 20, "{full}");
    // Deleted rows give their memory back (the store vacuums as it deletes).
    admin("DELETE FROM big").unwrap();
    let emptied = sqlite_memory();
    assert!(emptied < 16 << 20, "SQLite still holds {emptied} bytes after the DELETE");
    admin("DROP TABLE big").unwrap();
}

/// What SQLite holds now, in this process (the admin store is its only user).
fn sqlite_memory() -> i64 {
    // SAFETY: a thread-safe SQLite function without arguments.
    unsafe { rusqlite::ffi::sqlite3_memory_used() }
}
