//! The admin and HTTP ports against hostile input, end to end (a real sluice in front of a real
//! MariaDB, the mariadb CLI and mysql_async on the admin port): no file access through SQLite, a
//! time limit per admin statement that neither reload nor shutdown waits on, bounded LOADs and
//! results, logins off loopback on the HTTP port, and the small things (comments in admin
//! commands, statistics names in strings, discoverable stats tables, mysql-threads, counters).

mod common;

use common::*;
use mysql_async::prelude::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// The password whose mysql_native_password hash is `*BC27…`.
const DBA_PASSWORD: &str = "pw-for-dba";

/// A statement that never ends by itself.
const FOREVER: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";

fn admin(port: u16, sql: &str) -> Result<String, String> {
    mariadb_cli(port, "admin", Some("admin"), sql)
}

fn proxy_from(db: &MariaDb, extra_proxy: &str, datadir: Option<&std::path::Path>) -> Proxy {
    let mut t = format!("[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"127.0.0.1:0\"\n{extra_proxy}\n");
    if let Some(d) = datadir {
        t += &format!("datadir = \"{}\"\n", d.display());
    }
    t += "[tls]\nenabled = false\n";
    t += "[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {BACKEND_PORT}\n";
    t += "[[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n";
    Proxy::start(toml_config(&t, db))
}

/// Runs `f` on a thread; its result, or a panic naming `what` if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} took longer than {limit:?}"))
}

/// ATTACH and VACUUM INTO cannot create files; SAVE … TO DISK still writes sluice.db.
#[test]
fn admin_sql_cannot_touch_files() {
    let db = MariaDb::start().expect("MariaDB starts");
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_from(&db, "", Some(dir.path()));
    let a = proxy.admin_port();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("planted.db");
    let t = target.display();
    for sql in [
        format!("ATTACH '{t}' AS planted"),
        format!("ATTACH DATABASE 'file:{t}?mode=rwc' AS planted"),
        format!("VACUUM INTO '{t}'"),
        format!("VACUUM disk INTO '{t}'"),
        "PRAGMA disk.journal_mode = WAL".into(),
        "DETACH DATABASE disk".into(),
        "SELECT load_extension('/tmp/nothing.so')".into(),
        "DROP TABLE mysql_servers".into(),
    ] {
        let e = admin(a, &sql).expect_err(&sql);
        assert!(e.contains("ERROR 1105") && e.contains("not allowed") || e.contains("sluice's own tables"), "{sql}: {e}");
    }
    assert!(!target.exists(), "no file was created");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    let e = admin(a, &format!("VACUUM INTO '{t}'")).unwrap_err();
    assert!(e.contains("ATTACH, DETACH and VACUUM are not allowed on the admin port"), "{e}");
    // The admin's own tables, schema reads, and sluice's own disk layer still work.
    admin(a, "CREATE TABLE notes (n TEXT); INSERT INTO notes VALUES ('kept'); PRAGMA table_info(mysql_servers)").unwrap();
    admin(a, "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,apply) VALUES (9,1,'^SELECT',0); SAVE MYSQL QUERY RULES TO DISK")
        .unwrap();
    assert_eq!(admin(a, "SELECT rule_id FROM disk.mysql_query_rules").unwrap(), "9");
    assert!(dir.path().join("sluice.db").exists());
}

/// A runaway statement is stopped at admin-statement_timeout_ms; other admin sessions get their
/// turn right after; a reload and a shutdown never wait for it.
#[test]
fn runaway_statements_are_stopped_and_block_neither_reload_nor_shutdown() {
    let db = MariaDb::start().expect("MariaDB starts");
    let proxy = proxy_from(&db, "admin_statement_timeout_ms = 1500", None);
    let a = proxy.admin_port();
    assert_eq!(
        admin(a, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='admin-statement_timeout_ms'").unwrap(),
        "1500"
    );

    let started = Instant::now();
    let runaway = std::thread::spawn(move || admin(a, FOREVER));
    std::thread::sleep(Duration::from_millis(300));
    // Another admin session is served once the runaway is cut off, not after it ends by itself.
    let other = within(Duration::from_secs(10), "another admin session", move || admin(a, "SELECT COUNT(*) FROM mysql_servers"));
    assert_eq!(other.unwrap(), "1");
    let e = runaway.join().unwrap().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(e.contains("ERROR 1105") && e.contains("admin-statement_timeout_ms (1500 ms)"), "{e}");

    // Without a limit, a reload (SIGHUP) and a shutdown still go through.
    admin(
        a,
        "UPDATE global_variables SET variable_value='0' WHERE variable_name='admin-statement_timeout_ms'; LOAD ADMIN VARIABLES TO RUNTIME",
    )
    .unwrap();
    let runaway = std::thread::spawn(move || admin(a, FOREVER));
    std::thread::sleep(Duration::from_millis(500));
    let server = proxy.server();
    let mut config = server.data.snapshot().config.clone();
    config.proxy.admin_statement_timeout_ms = 0;
    config.pool.min_idle = 1;
    // `Shared` is not 'static here: run the reload on a scoped thread and time it.
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = tx.send(sluice::admin::startup::apply_file(&server.admin, config).map(|_| ()));
        });
        let applied = rx.recv_timeout(Duration::from_secs(5)).expect("the reload does not wait for the running admin statement");
        assert!(applied.is_ok(), "{applied:?}");
    });
    assert_eq!(server.data.snapshot().config.pool.min_idle, 1, "the reload is in force");
    let stopping = Instant::now();
    within(Duration::from_secs(10), "shutdown with a runaway admin statement", move || drop(proxy));
    assert!(stopping.elapsed() < Duration::from_secs(10));
    let e = runaway.join().unwrap().unwrap_err();
    assert!(e.contains("shutting down") || e.contains("Lost connection") || e.contains("server has gone away"), "{e}");
}

/// The memory and runtime tables show a reload made while an admin statement ran, once it is done.
#[test]
fn a_reload_during_an_admin_statement_shows_in_the_tables_after_it() {
    let db = MariaDb::start().expect("MariaDB starts");
    let proxy = proxy_from(&db, "admin_statement_timeout_ms = 1000", None);
    let a = proxy.admin_port();
    let runaway = std::thread::spawn(move || admin(a, FOREVER));
    std::thread::sleep(Duration::from_millis(300));
    let mut config = proxy.server().data.snapshot().config.clone();
    config.pool.min_idle = 4;
    sluice::admin::startup::apply_file(&proxy.server().admin, config).expect("reload");
    assert!(runaway.join().unwrap().is_err());
    let sql = "SELECT variable_value FROM global_variables WHERE variable_name='sluice-pool_min_idle' \
               UNION ALL SELECT variable_value FROM runtime_global_variables WHERE variable_name='sluice-pool_min_idle'";
    assert_eq!(admin(a, sql).unwrap(), "4\n4");
}

/// LOAD … TO RUNTIME refuses a table beyond admin-max_rows_per_table, naming both; the running
/// rules stay. A result beyond admin-memory_limit_bytes is refused too.
#[tokio::test]
async fn loads_and_results_are_bounded() {
    let db = MariaDb::start().expect("MariaDB starts");
    let proxy = proxy_from(&db, "admin_max_rows_per_table = 100\nadmin_memory_limit_bytes = 33554432", None);
    let a = proxy.admin_port();
    admin(a, "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,error_msg,apply) VALUES (1,1,'^DO ','rule 1 in force',1); LOAD MYSQL QUERY RULES TO RUNTIME").unwrap();
    let many = "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,apply) \
                WITH RECURSIVE c(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM c WHERE x < 101) SELECT x, 1, '^SELECT ' || x, 0 FROM c";
    admin(a, many).unwrap();
    let e = admin(a, "LOAD MYSQL QUERY RULES TO RUNTIME").unwrap_err();
    assert!(e.contains("ERROR 1105"), "{e}");
    assert!(
        e.contains(
            "LOAD MYSQL QUERY RULES TO RUNTIME refused: mysql_query_rules holds 101 rows, more than admin-max_rows_per_table allows (100)"
        ),
        "{e}"
    );
    assert_eq!(admin(a, "SELECT COUNT(*) FROM runtime_mysql_query_rules").unwrap(), "1", "the runtime tables are unchanged");
    let mut c = connect(proxy.port).await;
    let e = c.query_drop("DO 1").await.unwrap_err();
    assert!(e.to_string().contains("rule 1 in force"), "the running rules stay: {e}");
    // At the limit, it loads.
    admin(a, "DELETE FROM mysql_query_rules WHERE rule_id = 101; LOAD MYSQL QUERY RULES TO RUNTIME").unwrap();
    assert_eq!(admin(a, "SELECT COUNT(*) FROM runtime_mysql_query_rules").unwrap(), "100");

    let e = admin(
        a,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT x, printf('%.1000c', 'x') FROM c",
    )
    .unwrap_err();
    assert!(e.contains("the result is larger than admin-memory_limit_bytes allows (33554432 bytes)"), "{e}");
    assert_eq!(admin(a, "SELECT 1").unwrap(), "1", "the admin port goes on");
}

/// Off loopback, the HTTP port wants an admin login for everything but the health checks.
#[test]
fn http_off_loopback_needs_an_admin_login() {
    use base64::Engine;
    let db = MariaDb::start().expect("MariaDB starts");
    // Bound on every address, reached through 127.0.0.1 only.
    let proxy = proxy_from(
        &db,
        "http_listen = \"0.0.0.0:0\"\nadmin_credentials = \"ops:s3cret;dba:*BC27135E1445F763E9F177CC44949B0EE6660FEC\"",
        None,
    );
    let http = proxy.http_port();
    let basic = |login: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(login));
    for path in ["/api/config", "/metrics", "/api/stats/global", "/dashboard", "/", "/no/such/page"] {
        let r = request(http, path, None);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"sluice\", charset=\"UTF-8\""), "{path}");
        assert!(!r.body.contains("mysql_servers"), "{path}: nothing leaks");
    }
    assert_eq!(request(http, "/healthz", None).status, 200);
    assert_eq!(request(http, "/readyz", None).status, 200);
    let denied = |proxy: &Proxy| proxy.counter("Admin_Access_Denied_Wrong_Password");
    let before = denied(&proxy);
    for wrong in [basic("ops:wrong"), basic("nobody:s3cret"), basic("ops"), "Basic !!!".into(), "Bearer abc".into()] {
        assert_eq!(request(http, "/api/config", Some(&wrong)).status, 401, "{wrong}");
    }
    assert_eq!(denied(&proxy), before + 5);
    let ok = request(http, "/api/config", Some(&basic("ops:s3cret")));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("mysql_servers") && !ok.body.contains("s3cret"), "{}", ok.body);
    // A login given as a mysql_native_password hash takes the password it hashes.
    assert_eq!(request(http, "/metrics", Some(&basic(&format!("dba:{DBA_PASSWORD}")))).status, 200);
    assert_eq!(request(http, "/metrics", Some(&basic("dba:*BC27135E1445F763E9F177CC44949B0EE6660FEC"))).status, 401);

    // On loopback, no login is asked (as before).
    let local = proxy_from(&db, "http_listen = \"127.0.0.1:0\"", None);
    assert_eq!(request(local.http_port(), "/api/config", None).status, 200);
}

fn request(port: u16, path: &str, authorization: Option<&str>) -> HttpResponse {
    http_get(port, path, authorization)
}

/// Comments in admin commands; statistics names in strings; discoverable stats tables;
/// mysql-threads; admin login failures counted apart from clients'.
#[tokio::test]
async fn small_things() {
    let db = MariaDb::start().expect("MariaDB starts");
    // The quick-start config leaves the worker count to sluice (2 here).
    let proxy = Proxy::quick(&db);
    let a = proxy.admin_port();
    let mut adm = mysql_async::Conn::new(
        opts(a, "admin", "admin").db_name(None::<String>).max_allowed_packet(Some(1 << 24)).wait_timeout(Some(28800)),
    )
    .await
    .expect("admin login");
    // Commands with comments (the mariadb CLI would strip them; mysql_async sends them).
    adm.query_drop("/* deploy 42 */ LOAD MYSQL USERS /* all of them */ TO RUNTIME -- done").await.expect("LOAD with comments");
    adm.query_drop("# ticket 7\nSAVE MYSQL QUERY RULES TO DISK;").await.expect("SAVE after a comment");
    let threads: Option<(String, String)> = adm.query_first("/* cli */ SHOW VARIABLES LIKE 'mysql-threads'").await.unwrap();
    assert_eq!(threads.map(|t| t.1).as_deref(), Some("2"), "memory shows the worker count in force");
    assert_eq!(admin(a, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-threads'").unwrap(), "2");

    // A statistics table named in a string or a comment is not read: the digests stay.
    let mut c = connect(proxy.port).await;
    for i in 0..3 {
        let _: Option<u32> = c.query_first(format!("SELECT {i}")).await.unwrap();
    }
    let before = admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest").unwrap();
    assert_ne!(before, "0");
    adm.query_drop("SELECT 'stats_mysql_query_digest_reset' /* stats_mysql_query_digest_reset */").await.unwrap();
    adm.query_drop("SELECT 1 --stats_mysql_query_digest_reset").await.unwrap();
    assert_eq!(admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest").unwrap(), before, "nothing reset the digests");
    // count(*) alone reads the table too.
    assert_ne!(admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest_reset").unwrap(), "0");
    assert_eq!(admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest").unwrap(), "0", "reading _reset cleared them");

    // Where the statistics tables are, as ProxySQL shows it.
    let dbs = admin(a, "SHOW DATABASES").unwrap();
    assert!(dbs.lines().any(|l| l.split('\t').nth(1) == Some("stats")), "{dbs}");
    let stats = admin(a, "SHOW TABLES FROM stats").unwrap();
    assert!(stats.lines().any(|l| l == "stats_mysql_query_digest") && stats.lines().any(|l| l == "stats_mysql_global"), "{stats}");
    let main = admin(a, "SHOW TABLES").unwrap();
    assert!(main.lines().any(|l| l == "mysql_servers") && !main.contains("stats_mysql"), "main's only, as ProxySQL: {main}");
    assert_eq!(
        admin(a, "SHOW TABLES FROM stats LIKE 'stats_mysql_query_digest%'").unwrap(),
        "stats_mysql_query_digest\nstats_mysql_query_digest_reset"
    );

    // A failed admin login is not a client's.
    let global = |name: &str| format!("SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='{name}'");
    let clients_before = admin(a, &global("Access_Denied_Wrong_Password")).unwrap();
    assert!(mariadb_cli(a, "admin", Some("wrong"), "SELECT 1").unwrap_err().contains("1045"));
    assert_eq!(admin(a, &global("Access_Denied_Wrong_Password")).unwrap(), clients_before);
    assert_eq!(admin(a, &global("Admin_Access_Denied_Wrong_Password")).unwrap(), "1");
    assert!(mysql_async::Conn::new(opts(proxy.port, "root", "wrong")).await.is_err());
    assert_ne!(admin(a, &global("Access_Denied_Wrong_Password")).unwrap(), clients_before, "clients' failures still count there");
}
