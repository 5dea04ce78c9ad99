//! The firewall against a real MariaDB, driven through the admin port as a DBA would: learning
//! a user's digests from stats_mysql_query_digest in DETECTING mode, PROTECTING (an error, nothing
//! sent, the session goes on), the SQL-injection heuristic and its fingerprint allowlist, bad
//! rows refused with the running config kept, and the false-positive runs: sysbench
//! oltp_read_write in PROTECTING mode after learning, and the project's own client suites with
//! the heuristic on.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use std::process::Command;
use testkit::MariaDb;

/// sluice in front of `db`, root's login and `extra` TOML (sections, firewall rows).
fn proxy(db: &MariaDb, extra: &str) -> Proxy {
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{extra}\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {{BACKEND_PORT}}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n"
    );
    // The log capture must be in place before any sluice of this binary logs.
    captured_logs();
    Proxy::start(toml_config(&text, db))
}

/// root in DETECTING mode with the allowlist on, and `sqli` for the heuristic.
fn detecting(sqli: bool) -> String {
    format!(
        "[firewall]\nenabled = true\nsqli = {sqli}\n\
         [[mysql_firewall_whitelist_users]]\nusername = \"root\"\nmode = \"DETECTING\"\n"
    )
}

fn admin(port: u16, sql: &str) -> Result<String, String> {
    mariadb_cli(port, "admin", Some("admin"), sql)
}

/// ProxySQL's recipe: every digest `user` ran becomes an allowlist rule, and the user is
/// switched to PROTECTING.
const LEARN: &str = "INSERT OR IGNORE INTO mysql_firewall_whitelist_rules \
     (active, username, client_address, schemaname, flagIN, digest, comment) \
     SELECT DISTINCT 1, username, '', schemaname, 0, digest, 'learned' FROM stats_mysql_query_digest WHERE username = 'root' AND errors < count_star; \
     UPDATE mysql_firewall_whitelist_users SET mode = 'PROTECTING' WHERE username = 'root'; \
     LOAD MYSQL FIREWALL TO RUNTIME";

/// A fresh table `test.<name>` with rows 1 and 2.
fn table(db: &MariaDb, prefix: &str) -> String {
    let name = unique(prefix);
    db.sql(&format!("CREATE TABLE test.{name} (id INT PRIMARY KEY, v INT); INSERT INTO test.{name} VALUES (1, 1), (2, 2);")).unwrap();
    name
}

fn rows(db: &MariaDb, t: &str) -> String {
    db.sql(&format!("SELECT COUNT(*) FROM test.{t}")).unwrap().trim().to_string()
}

/// What the application runs: text and prepared statements.
async fn workload(c: &mut Conn, t: &str, round: i32) {
    let v: Option<i64> = c.query_first(format!("SELECT v FROM {t} WHERE id = {}", 1 + round % 2)).await.unwrap();
    assert!(v.is_some());
    c.query_drop(format!("UPDATE {t} SET v = v + 1 WHERE id = {}", 1 + round % 2)).await.unwrap();
    let n: Option<i64> = c.exec_first(format!("SELECT COUNT(*) FROM {t} WHERE v > ?"), (round,)).await.unwrap();
    assert!(n.is_some());
}

fn blocked_code(e: &mysql_async::Error) -> (Option<u16>, String) {
    (server_code(e), e.to_string())
}

#[tokio::test]
async fn learning_then_detecting_then_protecting() {
    captured_logs();
    let db = testkit::shared();
    let t = table(db, "fw_learn");
    let proxy = proxy(db, &detecting(false));
    let a = proxy.admin_port();
    let mut c = connect(proxy.port).await;

    // DETECTING: everything runs; each new digest is logged once and counted each time.
    for round in 0..4 {
        workload(&mut c, &t, round).await;
    }
    // Prepared now, never executed, so never learned.
    let unlearned = c.prep(format!("SELECT v FROM {t} WHERE id = ? AND v > 0")).await.unwrap();
    let detected = proxy.counter("Firewall_detected");
    assert!(detected >= 12, "every statement was unlisted: {detected}");
    assert_eq!(proxy.counter("Firewall_blocked"), 0);
    let select_digest =
        admin(a, &format!("SELECT digest FROM stats_mysql_query_digest WHERE digest_text LIKE 'SELECT v FROM {t}%'")).unwrap();
    let select_digest = select_digest.trim();
    assert!(select_digest.starts_with("0x"), "{select_digest}");
    let lines = captured_logs().lines().filter(|l| l.contains("(DETECTING)") && l.contains(select_digest)).count();
    assert_eq!(lines, 1, "one line per new digest:\n{}", captured_logs());

    // Learning, as ProxySQL documents it: from stats_mysql_query_digest.
    admin(a, LEARN).unwrap();
    let learned = admin(a, "SELECT COUNT(*) FROM runtime_mysql_firewall_whitelist_rules WHERE username = 'root'").unwrap();
    assert!(learned.trim().parse::<u32>().unwrap() >= 3, "{learned}");
    assert_eq!(admin(a, "SELECT mode FROM runtime_mysql_firewall_whitelist_users").unwrap().trim(), "PROTECTING");

    // PROTECTING: what was learned runs, on a new connection too.
    let allowed = proxy.counter("Firewall_allowed");
    let mut c2 = connect(proxy.port).await;
    for round in 0..4 {
        workload(&mut c, &t, round).await;
        workload(&mut c2, &t, round).await;
    }
    assert_eq!(proxy.counter("Firewall_blocked"), 0, "the learned workload is never blocked");
    assert!(proxy.counter("Firewall_allowed") >= allowed + 24);

    // Anything else gets ProxySQL's error; nothing reaches the server; the session goes on.
    let e = c.query_drop(format!("DELETE FROM {t}")).await.unwrap_err();
    assert_eq!(blocked_code(&e).0, Some(1148), "{e}");
    assert!(e.to_string().contains("Firewall blocked this query"), "{e}");
    assert_eq!(rows(db, &t), "2", "the DELETE never ran");
    assert_eq!(proxy.counter("Firewall_blocked"), 1);
    workload(&mut c, &t, 9).await;
    // A prepared statement is checked at its prepare.
    let e = c.exec_drop(format!("DELETE FROM {t} WHERE id = ?"), (1,)).await.unwrap_err();
    assert_eq!(blocked_code(&e).0, Some(1148), "{e}");
    assert_eq!(rows(db, &t), "2");
    // And at each execute: a statement prepared before the switch meets the list in force.
    let e = c.exec_drop(&unlearned, (1,)).await.unwrap_err();
    assert_eq!(blocked_code(&e).0, Some(1148), "{e}");
    workload(&mut c, &t, 10).await;

    // The error message is ProxySQL's variable; turning the firewall off lets everything through.
    admin(a, "SET mysql-firewall_whitelist_errormsg = 'not on the list'; LOAD MYSQL VARIABLES TO RUNTIME").unwrap();
    let e = c.query_drop("SELECT 42").await.unwrap_err();
    assert!(e.to_string().contains("not on the list"), "{e}");
    let blocked = proxy.counter("Firewall_blocked");
    assert_eq!(blocked, 4);
    admin(a, "SET mysql-firewall_whitelist_enabled = 0; LOAD MYSQL VARIABLES TO RUNTIME").unwrap();
    c.query_drop("SELECT 42").await.unwrap();
    assert_eq!(proxy.counter("Firewall_blocked"), blocked);

    // The counters are in stats_mysql_global and /metrics.
    let global = admin(a, "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Firewall_blocked'").unwrap();
    assert_eq!(global.trim(), "4");
    let metrics = http_get(proxy.http_port(), "/metrics", None).body;
    assert!(metrics.contains("sluice_firewall_blocked_total 4"), "{metrics}");
    assert!(metrics.contains("sluice_firewall_detected_total"), "{metrics}");

    // SAVE … TO DISK and LOAD … FROM DISK carry the tables.
    admin(a, "SAVE MYSQL FIREWALL TO DISK; DELETE FROM mysql_firewall_whitelist_rules; LOAD MYSQL FIREWALL FROM DISK").unwrap();
    assert_eq!(admin(a, "SELECT COUNT(*) FROM mysql_firewall_whitelist_rules").unwrap().trim(), learned.trim());
}

#[tokio::test]
async fn the_sqli_heuristic_blocks_injections_and_honours_its_fingerprint_allowlist() {
    let db = testkit::shared();
    let t = table(db, "fw_sqli");
    let proxy = proxy(db, "[firewall]\nsqli = 1\n");
    let a = proxy.admin_port();
    let mut c = connect(proxy.port).await;
    c.query_drop(format!("SELECT v FROM {t} WHERE id = 1")).await.unwrap();
    for bad in [
        format!("DELETE FROM {t} WHERE id = 7 OR 1=1"),
        format!("DELETE FROM {t} WHERE id = '' OR 'a'='a'"),
        format!("SELECT v FROM {t} WHERE id = 1 UNION SELECT user()"),
        format!("DELETE FROM {t} WHERE id = 1 /* unterminated"),
        format!("SELECT v FROM {t} WHERE id = 1 AND SLEEP(3)"),
    ] {
        let e = c.query_drop(&bad).await.unwrap_err();
        assert_eq!(server_code(&e), Some(1148), "{bad}: {e}");
        assert!(e.to_string().contains("SQL injection detected"), "{bad}: {e}");
    }
    assert_eq!(rows(db, &t), "2", "no injected DELETE ran");
    assert_eq!(proxy.counter("Firewall_sqli_blocked"), 5);
    // The session goes on; prepared statements are checked too.
    c.query_drop(format!("UPDATE {t} SET v = 5 WHERE id = 1")).await.unwrap();
    let e = c.exec_drop(format!("DELETE FROM {t} WHERE id = ? OR 1=1"), (1,)).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1148), "{e}");
    assert_eq!(rows(db, &t), "2");

    // A fingerprint on the allowlist is not flagged (ProxySQL's table).
    admin(
        a,
        "INSERT INTO mysql_firewall_whitelist_sqli_fingerprints (active, fingerprint) VALUES (1, 'T&1o1'); LOAD MYSQL FIREWALL TO RUNTIME",
    )
    .unwrap();
    let n: Option<i64> = c.query_first(format!("SELECT COUNT(*) FROM {t} WHERE id = 7 OR 1=1")).await.unwrap();
    assert_eq!(n, Some(2));
    let e = c.query_drop(format!("DELETE FROM {t} WHERE id = '' OR 'a'='a'")).await.unwrap_err();
    assert!(e.to_string().contains("fingerprint 'T&sos'"), "{e}");
    // The heuristic off (ProxySQL's variable): nothing is checked.
    admin(a, "SET mysql-automatic_detect_sqli = 0; LOAD MYSQL VARIABLES TO RUNTIME").unwrap();
    c.query_drop(format!("SELECT v FROM {t} WHERE id = 1 UNION SELECT user()")).await.unwrap();
}

#[tokio::test]
async fn bad_rows_are_refused_by_name_and_the_running_firewall_stays() {
    let db = testkit::shared();
    let t = table(db, "fw_bad");
    let proxy = proxy(
        db,
        "[firewall]\nenabled = 1\n\
         [[mysql_firewall_whitelist_users]]\nusername = \"root\"\nmode = \"PROTECTING\"\n",
    );
    let a = proxy.admin_port();
    // PROTECTING with an empty list: even a driver's set-up statements are refused.
    let refused = |sql: &str| mariadb_cli(proxy.port, "root", None, sql).unwrap_err();
    assert!(refused(&format!("SELECT v FROM test.{t}")).contains("Firewall blocked this query"));

    // SQLite's CHECK refuses a mode at once.
    let e = admin(a, "INSERT INTO mysql_firewall_whitelist_users (username, mode) VALUES ('app', 'LEARNING')").unwrap_err();
    assert!(e.contains("CHECK constraint failed"), "{e}");
    // Values only sluice can judge are refused at LOAD, named by row and column.
    let cases = [
        (
            "INSERT INTO mysql_firewall_whitelist_rules (username, schemaname, digest) VALUES ('root', 'test', 'not-a-digest')",
            "mysql_firewall_whitelist_rules (username='root', client_address='', schemaname='test', flagIN=0, digest='not-a-digest'): digest: `not-a-digest` is not a digest",
        ),
        (
            "INSERT INTO mysql_firewall_whitelist_users (username, client_address, mode) VALUES ('app', '10.0.%', 'OFF')",
            "mysql_firewall_whitelist_users (username='app', client_address='10.0.%'): client_address: `10.0.%` is not an IP address or ''",
        ),
        (
            "INSERT INTO mysql_firewall_whitelist_sqli_fingerprints (fingerprint) VALUES ('far too long a fingerprint')",
            "mysql_firewall_whitelist_sqli_fingerprints fingerprint='far too long a fingerprint': fingerprint:",
        ),
        ("UPDATE mysql_firewall_whitelist_users SET active = 7", "CHECK constraint failed"),
    ];
    for (sql, message) in cases {
        let e = admin(a, &format!("{sql}; LOAD MYSQL FIREWALL TO RUNTIME")).unwrap_err();
        assert!(e.contains(message), "{sql}:\n{e}");
        // Back to what runs, for the next case.
        admin(a, "SAVE MYSQL FIREWALL FROM RUNTIME").unwrap();
    }
    // Still PROTECTING with an empty list; the runtime tables unchanged.
    assert!(refused(&format!("SELECT v FROM test.{t}")).contains("ERROR 1148"));
    assert_eq!(admin(a, "SELECT COUNT(*) FROM runtime_mysql_firewall_whitelist_rules").unwrap().trim(), "0");
    assert_eq!(admin(a, "SELECT username, mode FROM runtime_mysql_firewall_whitelist_users").unwrap().trim(), "root\tPROTECTING");
    // An empty error message is refused as a variable.
    let e = admin(a, "SET mysql-firewall_whitelist_errormsg = ''; LOAD MYSQL VARIABLES TO RUNTIME").unwrap_err();
    assert!(e.contains("mysql-firewall_whitelist_errormsg") && e.contains("must not be empty"), "{e}");

    // The TOML file's rows are located by line and field.
    let bad = |rows: &str| {
        let text = format!("[proxy]\nlisten = [\"127.0.0.1:0\"]\n[[mysql_users]]\nusername = \"root\"\npassword = \"\"\n{rows}");
        sluice::config::FileConfig::parse(&text)
            .map_err(|e| e.to_string())
            .and_then(|f| f.validate(None, Some(&text)).map(|_| ()).map_err(|e| e.to_string()))
    };
    let e = bad("[[mysql_firewall_whitelist_rules]]\nusername = \"app\"\ndigest = \"0xZZ\"\n").unwrap_err();
    assert!(e.contains("mysql_firewall_whitelist_rules[0].digest") && e.contains("`0xZZ` is not a digest"), "{e}");
    let e = bad("[[mysql_firewall_whitelist_users]]\nusername = \"app\"\nmode = \"LEARNING\"\n").unwrap_err();
    assert!(e.contains("unknown variant `LEARNING`"), "{e}");
    let e = bad("[firewall]\nenabeld = true\n").unwrap_err();
    assert!(e.contains("unknown field `enabeld`"), "{e}");
    let e = bad("[[mysql_firewall_whitelist_users]]\nusername = \"app\"\n[[mysql_firewall_whitelist_users]]\nusername = \"app\"\n")
        .unwrap_err();
    assert!(e.contains("mysql_firewall_whitelist_users[1].username") && e.contains("listed twice"), "{e}");
}

/// sysbench oltp_read_write for `secs` seconds against `port`; its output, after checking it
/// had no errors.
fn sysbench(port: u16, schema: &str, secs: u32) -> String {
    let mut bench = Command::new("sysbench");
    bench.args(sysbench_args(port, schema)).args([
        // One thread: no deadlocks between sysbench's own transactions to tell apart.
        "--threads=1".to_string(),
        format!("--time={secs}"),
        "--report-interval=0".into(),
        "--db-ps-mode=auto".into(),
        "run".into(),
    ]);
    let text = run_tool(bench, "sysbench oltp_read_write through sluice");
    assert_sysbench_clean(&text);
    text
}

fn sysbench_args(port: u16, schema: &str) -> Vec<String> {
    vec![
        "oltp_read_write".to_string(),
        "--mysql-host=127.0.0.1".into(),
        format!("--mysql-port={port}"),
        "--mysql-user=root".into(),
        format!("--mysql-db={schema}"),
        "--tables=2".into(),
        "--table-size=1000".into(),
        "--mysql-ssl=off".into(),
    ]
}

#[test]
fn sysbench_runs_clean_in_protecting_mode_after_learning_with_the_heuristic_on() {
    let db = testkit::shared();
    let schema = unique("fw_sbtest");
    db.sql(&format!("CREATE DATABASE {schema}")).unwrap();
    let mut prepare = Command::new("sysbench");
    prepare.args(sysbench_args(db.port(), &schema)).arg("prepare");
    run_tool(prepare, "sysbench prepare (direct)");
    let proxy = proxy(db, &detecting(true));
    sysbench(proxy.port, &schema, 3);
    assert!(proxy.counter("Firewall_detected") > 0);
    admin(proxy.admin_port(), LEARN).unwrap();
    let allowed = proxy.counter("Firewall_allowed");
    sysbench(proxy.port, &schema, 3);
    assert_eq!(proxy.counter("Firewall_blocked"), 0, "a learned sysbench statement was blocked");
    assert_eq!(proxy.counter("Firewall_sqli_blocked"), 0, "the heuristic flagged sysbench");
    assert!(proxy.counter("Firewall_allowed") > allowed + 1000);
    db.sql(&format!("DROP DATABASE {schema}")).unwrap();
}

#[test]
fn client_suites_run_clean_with_the_heuristic_on() {
    let db = testkit::shared();
    let proxy = proxy(db, &detecting(true));
    // PyMySQL and mysql-connector (pure Python): a bounded subset (no 100k-row result, no waits
    // for timeouts). The C extension is left out: in this binary it crashed now and then in its
    // own close() at a test's teardown (a segfault, with no statement refused by the firewall);
    // real_clients.rs runs it.
    let mut py = client_suite_command(proxy.port, "python3");
    py.args([
        "-m",
        "pytest",
        "tests/python",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "not large_result and not wait_timeout and not kill_other and not tls and not large_value and not connector_cext",
    ]);
    let text = run_tool(py, "Python suite with the firewall's heuristic on");
    assert!(text.contains(" passed"), "{text}");
    println!("Python suite: {}", text.lines().last().unwrap_or_default());
    let mut cli = client_suite_command(proxy.port, "bash");
    cli.arg("tests/cli/run.sh");
    let text = run_tool(cli, "mariadb CLI suite with the firewall's heuristic on");
    assert!(text.contains(" passed, 0 failed"), "{text}");
    println!("CLI suite: {}", text.lines().last().unwrap_or_default());
    assert_eq!(proxy.counter("Firewall_sqli_blocked"), 0, "the heuristic flagged a client suite's statement");
    assert_eq!(proxy.counter("Firewall_blocked"), 0);
    assert!(proxy.counter("Firewall_detected") > 100);
}

/// ProxySQL's flagIN: an allowlist rule matches the flag the query rules left the statement
/// with, for text statements and for executes of statements prepared before the rule.
#[tokio::test]
async fn allowlist_rules_match_the_flag_the_query_rules_left() {
    captured_logs();
    let db = testkit::shared();
    let digest = |text: &str| sql::digest::format_id(sql::digest::digest_into(text.as_bytes(), &mut Vec::new()).id);
    let (tagged, plain) = (digest("SELECT ABS(?)"), digest("SELECT SIGN(?)"));
    // Statements with a `/* tagged */` comment leave the rules with flag 5.
    let extra = format!(
        "{}[[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_pattern = \"tagged\"\nflag_out = 5\napply = 0\n\
         [[mysql_firewall_whitelist_rules]]\nusername = \"root\"\nschemaname = \"test\"\nflagIN = 5\ndigest = \"{tagged}\"\n\
         [[mysql_firewall_whitelist_rules]]\nusername = \"root\"\nschemaname = \"test\"\nflagIN = 0\ndigest = \"{plain}\"\n",
        detecting(false)
    );
    let proxy = proxy(db, &extra);
    // Connected (the driver's own statements run) in DETECTING, then PROTECTING.
    let mut c = connect(proxy.port).await;
    admin(proxy.admin_port(), "UPDATE mysql_firewall_whitelist_users SET mode = 'PROTECTING'; LOAD MYSQL FIREWALL TO RUNTIME").unwrap();
    let tagged_stmt = c.prep("SELECT /* tagged */ ABS(?)").await.expect("flag 5 and its flagIN = 5 rule");
    c.exec_drop(&tagged_stmt, (1,)).await.expect("its execute too");
    c.query_drop("SELECT /* tagged */ ABS(1)").await.expect("the text statement with flag 5");
    c.query_drop("SELECT SIGN(1)").await.expect("flag 0 and its flagIN = 0 rule");
    // The same digests with the other flag are not on the list.
    let e = c.query_drop("SELECT ABS(1)").await.expect_err("flag 0: only a flagIN = 5 rule lists it");
    assert_eq!(server_code(&e), Some(1148), "{e}");
    let e = c.query_drop("SELECT /* tagged */ SIGN(1)").await.expect_err("flag 5: only a flagIN = 0 rule lists it");
    assert_eq!(server_code(&e), Some(1148), "{e}");

    // A reload that drops the query rule: the statement prepared under it now has flag 0.
    admin(proxy.admin_port(), "DELETE FROM mysql_query_rules; LOAD MYSQL QUERY RULES TO RUNTIME").unwrap();
    let e = c.exec_drop(&tagged_stmt, (1,)).await.expect_err("flag 0 now");
    assert_eq!(server_code(&e), Some(1148), "{e}");
    c.query_drop("SELECT SIGN(2)").await.expect("the session goes on");
}
