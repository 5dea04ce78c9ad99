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
    split_config_with(t, reader_status, "local")
}

fn split_config_with(t: &Replication, reader_status: &str, causal_reads: &str) -> Config {
    let text = String::from(
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
causal_reads = "{CAUSAL}"
[[mysql_query_rules]]
rule_id = 1
active = 1
match_pattern = "to the writer by rule"
destination_hostgroup = 10
apply = 1
"#,
    );
    let mut text = text.replace("{CAUSAL}", causal_reads);
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

/// 50 sessions each write a row and read it back at once, while the replicas apply nothing
/// (SQL threads stopped): how many reads missed their own write.
async fn stale_reads(proxy: &Proxy, table: &str) -> usize {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let port = proxy.port;
            let table = table.to_string();
            tokio::spawn(async move {
                let mut c = connect(port).await;
                c.query_drop(format!("INSERT INTO test.{table} VALUES ({i})")).await.unwrap();
                let seen: Option<i32> = c.query_first(format!("SELECT id FROM test.{table} WHERE id = {i}")).await.unwrap();
                seen.is_none()
            })
        })
        .collect();
    let mut stale = 0;
    for t in tasks {
        stale += t.await.unwrap() as usize;
    }
    stale
}

#[tokio::test]
async fn causal_reads_see_the_sessions_own_writes() {
    let t = Replication::start(2).unwrap();
    t.primary.sql("CREATE TABLE test.causal_on (id INT PRIMARY KEY); CREATE TABLE test.causal_off (id INT PRIMARY KEY);").unwrap();
    t.sync().unwrap();
    for r in &t.replicas {
        r.sql("STOP SLAVE SQL_THREAD").unwrap();
    }
    // Off: the replicas answer without the write (the test can fail).
    let off = Proxy::start(split_config_with(&t, "ONLINE", "off"));
    assert_eq!(stale_reads(&off, "causal_off").await, 50, "with causal reads off, every read misses its write");
    // Local (the default): each read waits for a replica to apply the write, then the writer answers.
    let local = Proxy::start(split_config(&t, "ONLINE"));
    let started = std::time::Instant::now();
    assert_eq!(stale_reads(&local, "causal_on").await, 0, "with causal reads on, no read misses its write");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "bounded by the causal wait: {:?}", started.elapsed());

    // Replicas that catch up serve the reads again, after a write too.
    for r in &t.replicas {
        r.sql("START SLAVE SQL_THREAD").unwrap();
    }
    let mut c = connect(local.port).await;
    c.query_drop("INSERT INTO test.causal_on VALUES (1000)").await.unwrap();
    let replicas: Vec<u16> = t.replicas.iter().map(|r| r.port()).collect();
    let (id, port): (Option<i32>, u16) =
        c.query_first("SELECT (SELECT id FROM test.causal_on WHERE id = 1000), @@port").await.unwrap().unwrap();
    assert_eq!(id, Some(1000));
    assert!(replicas.contains(&port), "a replica that applied the write answered ({port})");
}

/// The monitor follows roles (`read_only`): after a switchover done by hand on the servers (the
/// primary turned read-only, a replica promoted), writes go to the new primary and the old one
/// serves reads, with no reload by an admin.
#[tokio::test]
async fn the_monitor_moves_servers_by_their_read_only_flag() {
    let t = Replication::start(1).unwrap();
    let (old_primary, replica) = (t.primary.port(), t.replicas[0].port());
    let mut config = split_config(&t, "ONLINE");
    config.monitor = Some(config::MonitorSection::login("root", ""));
    let proxy = Proxy::start(config);
    let mut c = connect(proxy.port).await;
    assert_eq!(port_of(&mut c, "SELECT @@port /* sluice:route=writer */").await, old_primary);

    t.primary.sql("SET GLOBAL read_only = 1").unwrap();
    t.promote(0).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let writer = port_of(&mut c, "SELECT @@port /* sluice:route=writer */").await;
        let reader = port_of(&mut c, "SELECT @@port").await;
        if writer == replica && reader == old_primary {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "roles not followed: writer {writer}, reader {reader}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    c.query_drop("CREATE TABLE test.after_switchover (id INT)").await.unwrap();
    assert_eq!(t.replicas[0].sql("SHOW TABLES FROM test LIKE 'after_switchover'").unwrap(), "after_switchover\n");
}
