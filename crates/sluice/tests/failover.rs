//! Failover through sluice over real MariaDB servers: a dead server that is still ONLINE does
//! not fail statements another server can serve; writes wait (bounded by `[pool]
//! writer_wait_ms`) for a promoted writer; an autocommit read lost before its reply runs again
//! elsewhere while a lost write is never sent again; and under load, while the primary is
//! killed and a replica promoted, every acknowledged row is on the new primary exactly once.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice::config::{self, Config};
use std::time::{Duration, Instant};
use testkit::{MariaDb, Replication};

/// The primary in writer hostgroup 10, the replicas in reader hostgroup 20, the role monitor on
/// (root), causal reads off (the tests look at failover alone).
fn failover_config(t: &Replication, writer_wait_ms: u64) -> Config {
    let sections = format!("[pool]\nwriter_wait_ms = {writer_wait_ms}\n[monitor]\nusername = \"root\"\npassword = \"\"");
    replication_config(t, "causal_reads = \"off\"", &sections, |_| String::new())
}

/// Two unrelated servers in hostgroup 0, no monitor: nothing marks a dead one.
fn two_server_config(a: &MariaDb, b: &MariaDb) -> Config {
    let text = format!(
        r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 0
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {}
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {}
"#,
        a.port(),
        b.port()
    );
    let fc = config::FileConfig::parse(&text).expect("test TOML parses");
    fc.validate(None, Some(&text)).expect("test TOML is valid")
}

async fn port_of(c: &mut Conn, sql: &str) -> u16 {
    c.query_first::<u16, _>(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).unwrap()
}

/// Whether a statement holding `needle` shows in `db`'s process list within `limit`.
fn shows_running(db: &MariaDb, needle: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if db.sql("SELECT INFO FROM information_schema.PROCESSLIST").unwrap_or_default().contains(needle) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn a_dead_server_still_online_does_not_fail_statements_another_can_serve() {
    let mut dead = MariaDb::start().unwrap();
    let alive = MariaDb::start().unwrap();
    let proxy = Proxy::start(two_server_config(&dead, &alive));
    let mut c = connect(proxy.port).await;
    // Both serve before the loss.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        seen.insert(port_of(&mut c, "SELECT @@port").await);
    }
    assert_eq!(seen.len(), 2, "both servers serve: {seen:?}");
    dead.kill();
    // Still ONLINE in sluice's eyes: every statement is served by the other one.
    for i in 0..30 {
        let p = port_of(&mut c, "SELECT @@port").await;
        assert_eq!(p, alive.port(), "statement {i} after the loss");
    }
    // New sessions too (their first connection proves the login).
    let mut fresh = connect(proxy.port).await;
    assert_eq!(port_of(&mut fresh, "SELECT @@port").await, alive.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autocommit_read_lost_before_its_reply_runs_again_and_a_lost_write_does_not() {
    let mut servers = [MariaDb::start().unwrap(), MariaDb::start().unwrap()];
    for db in &servers {
        db.sql("CREATE TABLE test.lost_write (v INT)").unwrap();
    }
    let proxy = Proxy::start(two_server_config(&servers[0], &servers[1]));

    // A read: whichever server runs it is killed before it answers; the other answers.
    let mut c = connect(proxy.port).await;
    let read = tokio::spawn(async move {
        let r = c.query_first::<(u16, i32), _>("SELECT @@port, SLEEP(3) AS lost_read").await;
        (r, c)
    });
    let victim = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = (0..2).find(|&i| shows_running(&servers[i], "lost_read", Duration::ZERO)) {
                return i;
            }
            assert!(Instant::now() < deadline, "the read never showed on a server");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    servers[victim].kill();
    let survivor = servers[1 - victim].port();
    let (r, mut c) = read.await.unwrap();
    let (port, _) = r.expect("the read is run again, with no error").unwrap();
    assert_eq!(port, survivor, "the other server answered it");
    assert_eq!(port_of(&mut c, "SELECT @@port").await, survivor, "the session goes on");
    assert_eq!(proxy.counter("Reads_run_again"), 1);

    // A write lost on its server: error 1927, and it is not run on the other one.
    tokio::task::block_in_place(|| servers[victim].restart().unwrap());
    for attempt in 0.. {
        assert!(attempt < 40, "no write landed on the server to kill");
        let mut w = connect(proxy.port).await;
        let write = tokio::spawn(async move { w.query_drop("INSERT INTO test.lost_write SELECT SLEEP(3) + 7 /* lost_write */").await });
        if !tokio::task::block_in_place(|| shows_running(&servers[victim], "lost_write", Duration::from_millis(1500))) {
            // It runs on the other server: let it end, and try again.
            write.await.unwrap().unwrap();
            servers[1 - victim].sql("DELETE FROM test.lost_write").unwrap();
            continue;
        }
        servers[victim].kill();
        let err = write.await.unwrap().expect_err("a write lost on its server is an error");
        assert_eq!(server_code(&err), Some(1927), "{err}");
        let elsewhere = servers[1 - victim].sql("SELECT COUNT(*) FROM test.lost_write").unwrap();
        assert_eq!(elsewhere.trim(), "0", "the lost write was not run on the other server");
        break;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_a_writer_within_the_window() {
    // Semi-synchronous: row 1, acknowledged just before the kill, is on the replica.
    let mut t = Replication::start_semi_sync(1).unwrap();
    t.primary.sql("CREATE TABLE test.waits (id INT PRIMARY KEY)").unwrap();
    t.sync().unwrap();
    let proxy = Proxy::start(failover_config(&t, 3000));
    let mut c = connect(proxy.port).await;
    c.query_drop("INSERT INTO test.waits VALUES (1)").await.unwrap();
    t.primary.kill();
    // A login while there is no writer is proven on a replica, and so are the commands that
    // are not routed statements: a prepare (its reads run on the replica), a ping.
    let mut w = connect(proxy.port).await;
    let started = Instant::now();
    let port: Option<u16> = w.exec_first("SELECT @@port", ()).await.expect("prepared on a replica");
    assert_eq!(port, Some(t.replicas[0].port()));
    w.ping().await.expect("a ping is answered by a replica");
    assert!(started.elapsed() < Duration::from_secs(2), "no wait for the writer: {:?}", started.elapsed());

    // No writer comes: the write fails after the window, with the error of a lost server.
    let started = Instant::now();
    let err = c.query_drop("INSERT INTO test.waits VALUES (2)").await.expect_err("no writer");
    let waited = started.elapsed();
    assert_eq!(server_code(&err), Some(1927), "{err}");
    assert!(waited >= Duration::from_millis(2800) && waited < Duration::from_secs(8), "waited {waited:?} for a 3 s window");
    assert_eq!((proxy.counter("Writer_waits"), proxy.counter("Writer_wait_timeouts")), (1, 1));
    // Reads go on on the replica meanwhile.
    assert_eq!(port_of(&mut c, "SELECT @@port").await, t.replicas[0].port());

    // A writer comes within the window: the write waits for it and runs there.
    let started = Instant::now();
    let write = tokio::spawn(async move {
        let r = w.query_drop("INSERT INTO test.waits VALUES (3)").await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    tokio::task::block_in_place(|| t.promote_after_loss(0).unwrap());
    let (r, waited) = write.await.unwrap();
    r.expect("the write ran on the promoted replica");
    assert!(waited >= Duration::from_millis(600) && waited < Duration::from_secs(4), "waited {waited:?}");
    assert_eq!((proxy.counter("Writer_waits"), proxy.counter("Writer_wait_timeouts")), (2, 1));
    let rows = t.replicas[0].sql("SELECT id FROM test.waits ORDER BY id").unwrap();
    assert_eq!(rows, "1\n3\n", "row 2 failed, row 3 is on the new primary once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_of_reads_is_replayed_on_the_new_writer_and_one_that_wrote_is_refused() {
    let mut t = Replication::start_semi_sync(1).unwrap();
    t.primary.sql("CREATE TABLE test.replay (id INT PRIMARY KEY, v INT); INSERT INTO test.replay VALUES (1, 10), (2, 20);").unwrap();
    t.sync().unwrap();
    let proxy = Proxy::start(failover_config(&t, 10_000));
    // Idle in a transaction of reads; idle in one that wrote; a read in flight in one of reads.
    let mut reads = connect(proxy.port).await;
    reads.query_drop("BEGIN").await.unwrap();
    assert_eq!(reads.query_first::<i32, _>("SELECT v FROM test.replay WHERE id = 1").await.unwrap(), Some(10));
    let mut wrote = connect(proxy.port).await;
    wrote.query_drop("BEGIN").await.unwrap();
    wrote.query_drop("INSERT INTO test.replay VALUES (100, 1)").await.unwrap();
    let mut in_flight = connect(proxy.port).await;
    in_flight.query_drop("START TRANSACTION").await.unwrap();
    // (Its reads must say the same on the new writer: no @@port here.)
    assert_eq!(in_flight.query_first::<i32, _>("SELECT v FROM test.replay WHERE id = 2").await.unwrap(), Some(20));
    let flying = tokio::spawn(async move {
        let r = in_flight.query_first::<(i32, i32), _>("SELECT SLEEP(2), v FROM test.replay WHERE id = 2 /* in_flight */").await;
        (r, in_flight)
    });
    assert!(tokio::task::block_in_place(|| shows_running(&t.primary, "in_flight", Duration::from_secs(10))));

    tokio::task::block_in_place(|| {
        t.primary.kill();
        std::thread::sleep(Duration::from_millis(500));
        t.promote_after_loss(0).unwrap();
    });
    let new_writer = t.replicas[0].port();

    // The read in flight: its transaction is replayed, then it runs; no error.
    let (r, mut in_flight) = flying.await.unwrap();
    assert_eq!(r.expect("the read in flight is answered after the replay"), Some((0, 20)));
    assert_eq!(port_of(&mut in_flight, "SELECT @@port FROM test.replay WHERE id = 1").await, new_writer);
    in_flight.query_drop("COMMIT").await.unwrap();
    // The idle transaction of reads goes on, on the new writer.
    assert_eq!(reads.query_first::<i32, _>("SELECT v FROM test.replay WHERE id = 2").await.unwrap(), Some(20));
    assert_eq!(port_of(&mut reads, "SELECT @@port").await, new_writer, "in the replayed transaction, on the new writer");
    reads.query_drop("COMMIT").await.unwrap();
    // The transaction that wrote: a clear error, rolled back, and the session out of it.
    let err = wrote.query_drop("INSERT INTO test.replay VALUES (101, 1)").await.expect_err("not replayed");
    assert_eq!(server_code(&err), Some(1927), "{err}");
    assert!(err.to_string().contains("rolled back") && err.to_string().contains("wrote"), "{err}");
    assert_eq!(t.replicas[0].sql("SELECT COUNT(*) FROM test.replay WHERE id >= 100").unwrap().trim(), "0", "its rows are absent");
    wrote.query_drop("INSERT INTO test.replay VALUES (102, 1)").await.unwrap();
    assert_eq!(t.replicas[0].sql("SELECT id FROM test.replay WHERE id >= 100").unwrap(), "102\n", "the session goes on in autocommit");
    assert_eq!((proxy.counter("Transactions_replayed"), proxy.counter("Transaction_replays_failed")), (2, 1));
}

/// What one load client did.
#[derive(Debug, Default)]
struct ClientLog {
    /// Units whose commit was acknowledged, how many rows each wrote, and when.
    acked: Vec<(i64, i64, Instant)>,
    /// Units the client got an error for (commit or statement), and how many rows each wrote.
    failed: Vec<(i64, i64)>,
    /// The longest a statement (or a connect) took.
    longest: Duration,
}

/// Inserts numbered units (a row in autocommit, or two rows in a small explicit transaction)
/// until `until`, logging every acknowledged commit; reconnects after an error.
async fn load_client(port: u16, client: i64, until: Instant) -> ClientLog {
    let mut log = ClientLog::default();
    let mut conn: Option<Conn> = None;
    let mut n = 0i64;
    while Instant::now() < until {
        let started = Instant::now();
        let mut c = match conn.take() {
            Some(c) => c,
            None => match tokio::time::timeout(Duration::from_secs(20), Conn::new(opts(port, "root", ""))).await {
                Ok(Ok(c)) => c,
                _ => {
                    log.longest = log.longest.max(started.elapsed());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        log.longest = log.longest.max(started.elapsed());
        n += 1;
        let rows = if n % 3 == 0 { 2 } else { 1 };
        let mut ok = true;
        let statements: Vec<String> = if rows == 1 {
            vec![format!("INSERT INTO test.load (client, n, part) VALUES ({client}, {n}, 0)")]
        } else {
            vec![
                "BEGIN".into(),
                format!("INSERT INTO test.load (client, n, part) VALUES ({client}, {n}, 0)"),
                format!("INSERT INTO test.load (client, n, part) VALUES ({client}, {n}, 1)"),
                "COMMIT".into(),
            ]
        };
        for sql in &statements {
            let s = Instant::now();
            let r = c.query_drop(sql.as_str()).await;
            log.longest = log.longest.max(s.elapsed());
            if r.is_err() {
                ok = false;
                break;
            }
        }
        if ok {
            log.acked.push((n, rows, Instant::now()));
            conn = Some(c);
        } else {
            log.failed.push((n, rows));
        }
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_load_every_acknowledged_write_is_on_the_new_primary_once() {
    let mut t = Replication::start_semi_sync(1).unwrap();
    t.primary.sql("CREATE TABLE test.load (id BIGINT AUTO_INCREMENT PRIMARY KEY, client INT, n INT, part INT)").unwrap();
    t.sync().unwrap();
    let window = Duration::from_millis(5000);
    let proxy = Proxy::start(failover_config(&t, window.as_millis() as u64));
    let until = Instant::now() + Duration::from_secs(6);
    let clients: Vec<_> = (0..4).map(|i| tokio::spawn(load_client(proxy.port, i, until))).collect();

    tokio::time::sleep(Duration::from_secs(1)).await;
    let rows_before = tokio::task::block_in_place(|| t.primary.sql("SELECT COUNT(*) FROM test.load").unwrap());
    assert_ne!(rows_before.trim(), "0", "the load ran before the kill");
    tokio::task::block_in_place(|| t.primary.kill());
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| t.promote_after_loss(0).unwrap());
    let promoted = Instant::now();

    let mut logs = Vec::new();
    for c in clients {
        logs.push(c.await.unwrap());
    }
    let new_primary = &t.replicas[0];
    let rows = new_primary.sql("SELECT client, n, part, COUNT(*) FROM test.load GROUP BY client, n, part").unwrap();
    let mut count = std::collections::HashMap::new();
    for line in rows.lines() {
        let f: Vec<i64> = line.split('\t').map(|v| v.parse().unwrap()).collect();
        count.insert((f[0], f[1], f[2]), f[3]);
    }
    let (mut acked, mut failed_present, mut failed_absent) = (0, 0, 0);
    for (client, log) in logs.iter().enumerate() {
        let client = client as i64;
        for &(n, parts, _) in &log.acked {
            for part in 0..parts {
                assert_eq!(count.get(&(client, n, part)), Some(&1), "acknowledged unit {n} part {part} of client {client} once");
            }
            acked += 1;
        }
        for &(n, parts) in &log.failed {
            let present: Vec<i64> = (0..parts).map(|p| *count.get(&(client, n, p)).unwrap_or(&0)).collect();
            assert!(present.iter().all(|&c| c <= 1), "failed unit {n} of client {client} written twice: {present:?}");
            assert!(present.iter().all(|&c| c == present[0]), "failed unit {n} of client {client} half written: {present:?}");
            if present[0] == 1 {
                failed_present += 1;
            } else {
                failed_absent += 1;
            }
        }
        assert!(
            log.longest <= window + Duration::from_secs(3),
            "client {client} was blocked {:?}, beyond the {window:?} window and a margin",
            log.longest
        );
    }
    let sent: i64 = logs.iter().flat_map(|l| l.acked.iter().map(|a| a.1).chain(l.failed.iter().map(|f| f.1))).sum();
    assert!(count.values().sum::<i64>() <= sent, "no row beyond what the clients sent");
    let after = logs.iter().flat_map(|l| &l.acked).filter(|a| a.2 > promoted).count();
    eprintln!(
        "failover under load: {acked} units acknowledged ({after} after the promotion; {} rows before the kill), \
         {failed_present} failed units present once, {failed_absent} absent; longest block {:?}",
        rows_before.trim(),
        logs.iter().map(|l| l.longest).max()
    );
    assert!(after > 0, "writes went on on the new primary");
    // Only what was in flight at the kill fails: later writes wait for the new writer.
    let failed = failed_present + failed_absent;
    assert!(failed <= 2 * logs.len(), "{failed} units failed: writes did not wait for the new writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switchover_swaps_roles_without_losing_an_acknowledged_write() {
    let t = Replication::start(2).unwrap();
    t.primary.sql("CREATE TABLE test.load (id BIGINT AUTO_INCREMENT PRIMARY KEY, client INT, n INT, part INT)").unwrap();
    t.sync().unwrap();
    let mut config = failover_config(&t, 10_000);
    if let Some(m) = config.monitor.as_mut() {
        m.replication_user = "root".into();
    }
    let proxy = Proxy::start(config);
    let (old, new, other) = (t.primary.port(), t.replicas[0].port(), t.replicas[1].port());
    let admin = proxy.admin_port();
    let run = |sql: String| tokio::task::block_in_place(|| mariadb_cli(admin, "admin", Some("admin"), &sql));

    // Refused: a server that is not a reader of the pair (the writer itself, an unknown one).
    for to in [old, 1] {
        let err = run(format!("SWITCHOVER TO '127.0.0.1:{to}'")).expect_err("refused");
        assert!(err.contains("SWITCHOVER refused") && err.contains(&format!("127.0.0.1:{to}")), "{err}");
    }
    let err = run(format!("SWITCHOVER TO '127.0.0.1:{new}' FOR HOSTGROUP 20")).expect_err("20 is no writer hostgroup");
    assert!(err.contains("hostgroup 20 is not the writer hostgroup"), "{err}");

    // Under a write load, the switchover.
    let until = Instant::now() + Duration::from_secs(4);
    let clients: Vec<_> = (0..2).map(|i| tokio::spawn(load_client(proxy.port, i, until))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let said = run(format!("SWITCHOVER TO '127.0.0.1:{new}'")).expect("the switchover runs");
    assert!(said.contains(&format!("127.0.0.1:{new} is the writer of hostgroup 10")), "{said}");
    assert!(said.contains("2 other server(s) replicate from it"), "{said}");
    let mut logs = Vec::new();
    for c in clients {
        logs.push(c.await.unwrap());
    }

    // The admin tables show the new roles, in memory and at runtime.
    for table in ["runtime_mysql_servers", "mysql_servers"] {
        let rows = run(format!("SELECT hostgroup_id, port, status FROM {table} ORDER BY hostgroup_id, port")).unwrap();
        let mut want = vec![format!("10\t{new}\tONLINE"), format!("20\t{old}\tONLINE"), format!("20\t{other}\tONLINE")];
        want[1..].sort();
        assert_eq!(rows.lines().collect::<Vec<_>>(), want, "{table}");
    }
    // Writes go to the new writer; the old one is read-only and replicates from it.
    let mut c = connect(proxy.port).await;
    assert_eq!(port_of(&mut c, "SELECT @@port /* sluice:route=writer */").await, new);
    c.query_drop("INSERT INTO test.load (client, n, part) VALUES (99, 1, 0)").await.unwrap();
    assert_eq!(t.primary.sql("SELECT @@read_only").unwrap().trim(), "1");
    let position = t.replicas[0].sql("SELECT @@gtid_binlog_pos").unwrap();
    for db in [&t.primary, &t.replicas[1]] {
        let waited = db.sql(&format!("SELECT MASTER_GTID_WAIT('{}', 20)", position.trim())).unwrap();
        assert_eq!(waited.trim(), "0", "port {} replicates from the new writer", db.port());
    }
    // Every acknowledged row is on the new writer once.
    let rows = t.replicas[0].sql("SELECT client, n, part, COUNT(*) FROM test.load WHERE client < 99 GROUP BY client, n, part").unwrap();
    let count: std::collections::HashMap<(i64, i64, i64), i64> = rows
        .lines()
        .map(|l| {
            let f: Vec<i64> = l.split('\t').map(|v| v.parse().unwrap()).collect();
            ((f[0], f[1], f[2]), f[3])
        })
        .collect();
    let mut acked = 0;
    for (client, log) in logs.iter().enumerate() {
        for &(n, parts, _) in &log.acked {
            for part in 0..parts {
                assert_eq!(count.get(&(client as i64, n, part)), Some(&1), "acknowledged unit {n} part {part} of client {client}");
            }
            acked += 1;
        }
        assert!(log.failed.len() <= 1, "client {client}: {} units failed during a planned switchover", log.failed.len());
    }
    assert!(acked > 0);
}
