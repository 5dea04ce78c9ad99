//! The read/write split over a real replication topology (a private MariaDB primary and two
//! GTID replicas): reads to the readers, writes, locking reads, transactions and session-bound
//! state to the writer, hints and rules first, the writer when no reader can serve.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice::config::{self, Config};
use testkit::Replication;

/// The writer in hostgroup 10, the replicas in 20; root's default hostgroup is the writer's.
fn split_config(t: &Replication, reader_status: &str) -> Config {
    let mut text = String::from(
        r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 10
[[mysql_replication_hostgroups]]
writer_hostgroup = 10
reader_hostgroup = 20
[[mysql_query_rules]]
rule_id = 1
active = 1
match_pattern = "to the writer by rule"
destination_hostgroup = 10
apply = 1
"#,
    );
    text.push_str(&format!("[[mysql_servers]]\nhostgroup_id = 10\nhostname = \"127.0.0.1\"\nport = {}\n", t.primary.port()));
    for r in &t.replicas {
        text.push_str(&format!(
            "[[mysql_servers]]\nhostgroup_id = 20\nhostname = \"127.0.0.1\"\nport = {}\nstatus = \"{reader_status}\"\n",
            r.port()
        ));
    }
    let fc = config::FileConfig::parse(&text).expect("test TOML parses");
    fc.validate(None, Some(&text)).expect("test TOML is valid")
}

async fn port_of(c: &mut Conn, sql: &str) -> u16 {
    c.query_first::<u16, _>(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).unwrap()
}

#[tokio::test]
async fn reads_go_to_replicas_and_everything_else_to_the_primary() {
    let t = Replication::start(2).unwrap();
    let primary = t.primary.port();
    let replicas: Vec<u16> = t.replicas.iter().map(|r| r.port()).collect();
    t.primary.sql("CREATE TABLE test.split (id INT PRIMARY KEY, v INT); INSERT INTO test.split VALUES (1, 1);").unwrap();
    t.sync().unwrap();
    let proxy = Proxy::start(split_config(&t, "ONLINE"));
    let mut c = connect(proxy.port).await;

    // Reads: the replicas (both, over a few statements: least-loaded or weighted choice).
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let p = port_of(&mut c, "SELECT @@port").await;
        assert!(replicas.contains(&p), "a read went to {p}, not a replica {replicas:?}");
        seen.insert(p);
    }
    assert_eq!(seen.len(), 2, "both replicas serve reads: {seen:?}");
    let p = port_of(&mut c, "SELECT @@port FROM test.split WHERE id = 1").await;
    assert!(replicas.contains(&p), "reads of tables too: {p}");
    // Writes and what must see the primary's session: the primary.
    for sql in [
        "SELECT @@port FROM test.split WHERE id = 1 FOR UPDATE",
        "SELECT @@port FROM test.split LOCK IN SHARE MODE",
        "SELECT @@port /* sluice:route=writer */",
        "SELECT @@port -- to the writer by rule",
        "SELECT @@port + 0 * GET_LOCK('split', 0)",
        "SELECT @@port + 0 * RELEASE_LOCK('split')",
        "SELECT @@port + 0 * LAST_INSERT_ID()",
    ] {
        assert_eq!(port_of(&mut c, sql).await, primary, "{sql}");
    }
    c.query_drop("UPDATE test.split SET v = v + 1 WHERE id = 1").await.unwrap();
    assert_eq!(t.primary.sql("SELECT v FROM test.split WHERE id = 1").unwrap(), "2\n", "the write reached the primary");
    // A hint to the readers wins over the split's class.
    assert!(replicas.contains(&port_of(&mut c, "SELECT @@port FROM test.split FOR UPDATE /* sluice:route=reader */").await));

    // A transaction stays on the primary from its first statement; after it, reads split again.
    c.query_drop("BEGIN").await.unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, primary);
    c.query_drop("COMMIT").await.unwrap();
    assert!(replicas.contains(&port_of(&mut c, "SELECT @@port").await));
    // autocommit=0: every statement may be part of a transaction.
    c.query_drop("SET autocommit = 0").await.unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, primary);
    c.query_drop("SET autocommit = 1").await.unwrap();
    // START TRANSACTION READ ONLY may run on a reader, and the transaction stays there.
    c.query_drop("START TRANSACTION READ ONLY").await.unwrap();
    let ro = port_of(&mut c, "SELECT @@port").await;
    assert!(replicas.contains(&ro), "a read-only transaction on {ro}");
    assert_eq!(port_of(&mut c, "SELECT @@port FROM test.split").await, ro, "the same connection");
    c.query_drop("COMMIT").await.unwrap();

    // A temporary table lives on the primary's connection: reads of it follow it there.
    c.query_drop("CREATE TEMPORARY TABLE test.tmp_split (a INT)").await.unwrap();
    c.query_drop("INSERT INTO test.tmp_split VALUES (7)").await.unwrap();
    assert_eq!(c.query_first::<i32, _>("SELECT a FROM test.tmp_split").await.unwrap(), Some(7));
    assert_eq!(port_of(&mut c, "SELECT @@port").await, primary, "the session keeps the primary's connection");
    c.query_drop("DROP TEMPORARY TABLE test.tmp_split").await.unwrap();
}

#[tokio::test]
async fn without_a_usable_reader_the_writer_answers_reads() {
    let t = Replication::start(1).unwrap();
    let proxy = Proxy::start(split_config(&t, "OFFLINE_HARD"));
    let mut c = connect(proxy.port).await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, t.primary.port());
}
