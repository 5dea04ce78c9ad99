//! Query rules end to end: three private MariaDB servers as hostgroups 0, 1 and 2; each
//! statement asks `@@port` to show where it landed.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// Hostgroup i is `dbs[i]`.
struct Trio {
    dbs: Vec<MariaDb>,
}

impl Trio {
    fn start() -> Trio {
        Trio { dbs: (0..3).map(|_| MariaDb::start().expect("MariaDB starts")).collect() }
    }

    fn port(&self, hostgroup: usize) -> u16 {
        self.dbs[hostgroup].port()
    }

    /// Runs `sql` on every server (accounts and schemas the backends must share).
    fn everywhere(&self, sql: &str) {
        for db in &self.dbs {
            db.sql(sql).expect("setup statement");
        }
    }

    fn toml(&self, rules: &str) -> String {
        let mut t = String::from(
            "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"\"\nhttp_listen = \"\"\n[tls]\nenabled = false\n",
        );
        for (hg, db) in self.dbs.iter().enumerate() {
            t += &format!("[[mysql_servers]]\nhostgroup_id = {hg}\nhostname = \"127.0.0.1\"\nport = {}\n", db.port());
        }
        t += "[[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n";
        t += "[[mysql_users]]\nusername = \"app\"\npassword = \"apppw\"\ndefault_hostgroup = 0\n";
        t + rules
    }

    fn proxy(&self, rules: &str) -> Proxy {
        let text = self.toml(rules);
        let fc = sluice::config::FileConfig::parse(&text).expect("test TOML parses");
        Proxy::start(fc.validate(None, Some(&text)).expect("test TOML is valid"))
    }
}

fn shard_rules() -> String {
    (0..200)
        .map(|i| {
            format!(
                "[[mysql_query_rules]]\nrule_id = {}\nactive = 1\nmatch_pattern = '^/\\* {i:03}'\ndestination_hostgroup = {}\napply = 1\n",
                i + 1,
                i % 3
            )
        })
        .collect()
}

/// Seed 000's binary tree over 200 shards: hundreds digit, then tens, then the leaf. Rule ids
/// grow along every path, because the scan continues forward after a flagOUT jump.
fn tree_rules() -> String {
    let mut t = String::new();
    let mut id = 0;
    let mut rule = |flag_in: u32, pattern: String, flag_out: Option<u32>, hg: Option<u32>| {
        id += 1;
        t += &format!("[[mysql_query_rules]]\nrule_id = {id}\nflagIN = {flag_in}\nmatch_pattern = '{pattern}'\n");
        match (flag_out, hg) {
            (Some(f), _) => t += &format!("flagOUT = {f}\napply = 0\n"),
            (None, Some(hg)) => t += &format!("destination_hostgroup = {hg}\napply = 1\n"),
            (None, None) => {}
        }
    };
    for h in 0..2 {
        rule(0, format!("^/\\* {h}"), Some(100 + h), None);
    }
    for h in 0..2 {
        for d in 0..10 {
            rule(100 + h, format!("^/\\* {h}{d}"), Some(1000 + h * 10 + d), None);
        }
    }
    for s in 0..200u32 {
        rule(1000 + s / 10, format!("^/\\* {s:03}"), None, Some(s % 3));
    }
    t
}

async fn port_of(c: &mut mysql_async::Conn, sql: &str) -> u16 {
    c.query_first::<u16, _>(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).expect("one row")
}

#[tokio::test]
async fn each_shard_lands_on_its_hostgroup() {
    let trio = Trio::start();
    for rules in [shard_rules(), tree_rules()] {
        let proxy = trio.proxy(&rules);
        let mut c = connect(proxy.port).await;
        for shard in [0usize, 1, 2, 100, 101, 137, 198, 199] {
            let got = port_of(&mut c, &format!("/* {shard:03} */ SELECT @@port")).await;
            assert_eq!(got, trio.port(shard % 3), "shard {shard}");
        }
        assert_eq!(port_of(&mut c, "SELECT @@port").await, trio.port(0), "no rule: the user's default hostgroup");
        // Counters: one hit for each shard rule used (and, for the tree, its two jumps).
        let hits: u64 = proxy.server().data.snapshot().config.rules.hits().iter().map(|h| h.1).sum();
        assert!(hits >= 8, "hits counted: {hits}");
    }
}

#[tokio::test]
async fn rewrite_block_ok_negate_and_filters() {
    let trio = Trio::start();
    trio.everywhere(
        "CREATE USER app@'%' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO app@'%'; CREATE DATABASE shop; CREATE TABLE test.keep (a INT)",
    );
    let rules = r#"
[[mysql_query_rules]]
rule_id = 10
match_pattern = "^SELECT 'original'"
replace_pattern = "SELECT 'rewritten'"
[[mysql_query_rules]]
rule_id = 11
match_pattern = "'rewritten'"
destination_hostgroup = 1
apply = 1
[[mysql_query_rules]]
rule_id = 20
match_digest = "^DROP TABLE"
error_msg = "DROP is not allowed through sluice"
apply = 1
[[mysql_query_rules]]
rule_id = 30
match_pattern = "^SET @ignored"
OK_msg = "ignored by a rule"
apply = 1
[[mysql_query_rules]]
rule_id = 40
username = "app"
match_pattern = "^SELECT @@port"
destination_hostgroup = 2
apply = 1
[[mysql_query_rules]]
rule_id = 50
schemaname = "shop"
destination_hostgroup = 1
apply = 1
[[mysql_query_rules]]
rule_id = 60
match_pattern = "^SELECT"
negate_match_pattern = 1
destination_hostgroup = 2
apply = 1
"#;
    let proxy = trio.proxy(rules);
    let mut c = connect(proxy.port).await;
    // replace_pattern: the backend runs the rewritten text, and later rules see it.
    let row: (String, u16) = c.query_first("SELECT 'original', @@port").await.unwrap().unwrap();
    assert_eq!(row, ("rewritten".to_string(), trio.port(1)));
    // error_msg: the client gets the error, the backend never sees the statement.
    let e = c.query_drop("drop   table test.keep").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1148), "{e}");
    assert!(e.to_string().contains("DROP is not allowed through sluice"), "{e}");
    // …and a prepared statement cannot get around it.
    let e = c.prep("DROP TABLE test.keep").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1148), "{e}");
    assert!(trio.dbs[0].sql("SHOW TABLES FROM test LIKE 'keep'").unwrap().contains("keep"));
    // OK_msg: an OK with the message, nothing sent.
    c.query_drop("SET @ignored = 1").await.unwrap();
    let info = c.info().into_owned();
    assert_eq!(c.query_first::<Option<i64>, _>("SELECT @ignored").await.unwrap(), Some(None));
    assert_eq!(info, "ignored by a rule");
    // negate_match_pattern: what is not a SELECT goes to hostgroup 2 (VALUES is MariaDB's
    // table value constructor).
    assert_eq!(port_of(&mut c, "VALUES (@@port)").await, trio.port(2));
    assert_eq!(port_of(&mut c, "SELECT @@port").await, trio.port(0));
    // username: app's SELECT @@port goes to hostgroup 2, root's did not.
    let mut app = mysql_async::Conn::new(opts(proxy.port, "app", "apppw")).await.unwrap();
    assert_eq!(port_of(&mut app, "SELECT @@port").await, trio.port(2));
    // schemaname: after USE shop (which the server accepted), hostgroup 1 — on the schema.
    c.query_drop("USE shop").await.unwrap();
    let (port, db): (u16, String) = c.query_first("SELECT @@port, DATABASE()").await.unwrap().unwrap();
    assert_eq!((port, db.as_str()), (trio.port(1), "shop"));
}

#[tokio::test]
async fn a_transaction_keeps_its_backend() {
    let trio = Trio::start();
    let proxy = trio.proxy(&shard_rules());
    let mut c = connect(proxy.port).await;
    c.query_drop("BEGIN").await.unwrap();
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(0), "inside the transaction");
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(1), "after it");
    // With autocommit off, the statement that opens the implicit transaction decides where
    // it lives (the server reports it open); statements before it touched no table.
    for db in &trio.dbs {
        db.sql("CREATE TABLE IF NOT EXISTS test.ac (a INT) ENGINE=InnoDB; INSERT INTO test.ac VALUES (1)").unwrap();
    }
    c.query_drop("SET autocommit = 0").await.unwrap();
    assert_eq!(port_of(&mut c, "/* 002 */ SELECT @@port FROM test.ac").await, trio.port(2), "opens a transaction");
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(2), "which keeps its backend");
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(1), "until it ends");
    let autocommit: u8 = c.query_first("/* 001 */ SELECT @@autocommit").await.unwrap().unwrap();
    assert_eq!(autocommit, 0, "the session's autocommit follows it to every backend");
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_eq!(port_of(&mut c, "/* 002 */ SELECT @@port").await, trio.port(2));
    // CONNECTION_ID() stays the session's own wherever the statement runs.
    let id0: u32 = c.query_first("/* 000 */ SELECT CONNECTION_ID()").await.unwrap().unwrap();
    let id1: u32 = c.query_first("/* 001 */ SELECT CONNECTION_ID()").await.unwrap().unwrap();
    assert_eq!(id0, id1);
}

#[tokio::test]
async fn unavailable_hostgroup_and_timeout() {
    let trio = Trio::start();
    let mut text = trio.toml(
        r#"
[[mysql_query_rules]]
rule_id = 1
match_pattern = "^/\\* offline"
destination_hostgroup = 7
apply = 1
[[mysql_query_rules]]
rule_id = 2
match_pattern = "SLEEP"
timeout = 300
"#,
    );
    text += &format!("[[mysql_servers]]\nhostgroup_id = 7\nhostname = \"127.0.0.1\"\nport = {}\nstatus = \"OFFLINE_HARD\"\n", trio.port(2));
    let fc = sluice::config::FileConfig::parse(&text).unwrap();
    let proxy = Proxy::start(fc.validate(None, Some(&text)).unwrap());
    let mut c = connect(proxy.port).await;
    let e = c.query_drop("/* offline */ SELECT 1").await.unwrap_err();
    assert_eq!(server_code(&e), Some(9001), "{e}");
    assert!(e.to_string().contains("hostgroup 7"), "{e}");
    assert_eq!(port_of(&mut c, "SELECT @@port").await, trio.port(0), "the session goes on");
    // timeout: the statement is killed on the server after 300 ms.
    let t = Instant::now();
    let r = c.query_first::<i64, _>("SELECT SLEEP(10)").await;
    assert!(t.elapsed() < Duration::from_secs(5), "interrupted: {:?}", t.elapsed());
    match r {
        Ok(v) => assert_eq!(v, Some(1), "SLEEP returns 1 when interrupted"),
        Err(e) => assert_eq!(server_code(&e), Some(1317), "{e}"),
    }
    assert_eq!(port_of(&mut c, "SELECT @@port").await, trio.port(0));
}

/// The real binary: SIGHUP with an invalid regex is rejected naming the rule, the running rules
/// stay; a valid file then takes effect without dropping the connection.
#[tokio::test]
async fn reload_rejects_a_bad_regex_and_keeps_the_rules() {
    let trio = Trio::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    let port = testkit::free_port();
    let write = |rules: &str| {
        let text = trio.toml(rules).replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
        std::fs::write(&path, text).unwrap();
    };
    let rule = |hg: u32, pattern: &str| {
        format!("[[mysql_query_rules]]\nrule_id = 7\nmatch_pattern = '{pattern}'\ndestination_hostgroup = {hg}\napply = 1\n")
    };
    write(&rule(1, "^/\\* shard"));
    let log = dir.path().join("sluice.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--config", path.to_str().unwrap()])
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sluice did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = connect(port).await;
    assert_eq!(port_of(&mut c, "/* shard */ SELECT @@port").await, trio.port(1));
    let hup = || {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    };
    write(&rule(2, "^/\\* shard ("));
    hup();
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("reload rejected") {
            break text;
        }
        assert!(Instant::now() < deadline, "no rejection logged:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(text.contains("rule_id 7") && text.contains("match_pattern"), "{text}");
    assert_eq!(port_of(&mut c, "/* shard */ SELECT @@port").await, trio.port(1), "previous rules in force");
    write(&rule(2, "^/\\* shard"));
    hup();
    let deadline = Instant::now() + Duration::from_secs(10);
    while port_of(&mut c, "/* shard */ SELECT @@port").await != trio.port(2) {
        assert!(Instant::now() < deadline, "new rules never took effect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::io::stderr().flush();
}

/// A session's idle connection to another hostgroup that the server closed meanwhile is
/// noticed when the session goes back to that hostgroup, and replaced (nothing was sent on it).
#[tokio::test]
async fn a_parked_connection_closed_by_the_server_is_replaced() {
    let trio = Trio::start();
    let proxy = trio.proxy(&shard_rules());
    let mut c = connect(proxy.port).await;
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(1));
    assert_eq!(port_of(&mut c, "/* 000 */ SELECT @@port").await, trio.port(0));
    let sleeping = trio.dbs[1].sql("SELECT GROUP_CONCAT(ID) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Sleep'").unwrap();
    let ids: Vec<&str> = sleeping.split(',').map(str::trim).filter(|s| !s.is_empty() && *s != "NULL").collect();
    assert!(!ids.is_empty(), "the parked connection shows in hostgroup 1's processlist");
    for id in ids {
        trio.dbs[1].sql(&format!("KILL {id}")).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(port_of(&mut c, "/* 001 */ SELECT @@port").await, trio.port(1), "a fresh connection serves it");
    let db: Option<String> = c.query_first("/* 001 */ SELECT DATABASE()").await.unwrap().unwrap();
    assert_eq!(db.as_deref(), Some("test"), "on the session's schema");
}
