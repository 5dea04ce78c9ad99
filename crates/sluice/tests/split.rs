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
    let statuses: Vec<&str> = t.replicas.iter().map(|_| reader_status).collect();
    split_config_full(t, &statuses, causal_reads, 2000)
}

/// Each replica with its own status, and the causal wait's timeout.
fn split_config_full(t: &Replication, reader_statuses: &[&str], causal_reads: &str, causal_timeout_ms: u32) -> Config {
    let pair = format!("causal_reads = \"{causal_reads}\"\ncausal_reads_timeout_ms = {causal_timeout_ms}");
    let rule =
        "[[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_pattern = \"to the writer by rule\"\ndestination_hostgroup = 10\napply = 1";
    replication_config(t, &pair, rule, |i| format!("status = \"{}\"", reader_statuses[i]))
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
    assert_eq!(local.counter("Causal_reads_on_writer"), 50, "each read timed out on a replica and went to the writer");
    assert!(local.counter("Causal_read_waits") >= 50);
    assert_eq!(off.counter("Causal_read_waits"), 0);

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

/// Prepared statements under the split: each execute goes where its text would as a COM_QUERY
/// (read at prepare: hint and class), a read prepared on the primary is prepared again on the
/// replica that runs it, and a transaction keeps them all on the primary.
#[tokio::test]
async fn prepared_statements_run_where_their_class_goes() {
    let t = Replication::start(2).unwrap();
    let primary = t.primary.port();
    let replicas: Vec<u16> = t.replicas.iter().map(|r| r.port()).collect();
    t.primary.sql("CREATE TABLE test.ps (id INT PRIMARY KEY, v INT); INSERT INTO test.ps VALUES (1, 0);").unwrap();
    t.sync().unwrap();
    let proxy = Proxy::start(split_config(&t, "ONLINE"));
    let mut c = connect(proxy.port).await;

    // A prepared read (mysql_async prepares once, then executes): both replicas, by class.
    let read = "SELECT @@port FROM test.ps WHERE id = ?";
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let p: u16 = c.exec_first(read, (1,)).await.unwrap().unwrap();
        assert!(replicas.contains(&p), "a prepared read ran on {p}, not a replica {replicas:?}");
        seen.insert(p);
    }
    assert_eq!(seen.len(), 2, "both replicas run prepared reads: {seen:?}");
    // Writes and locking reads: the primary (each row records the server that wrote it).
    c.exec_drop("INSERT INTO test.ps (id, v) SELECT ?, @@port", (2,)).await.unwrap();
    c.exec_drop("UPDATE test.ps SET v = @@port WHERE id = ?", (1,)).await.unwrap();
    assert_eq!(t.primary.sql("SELECT v FROM test.ps ORDER BY id").unwrap(), format!("{primary}\n{primary}\n"));
    let locking: u16 = c.exec_first("SELECT @@port FROM test.ps WHERE id = ? FOR UPDATE", (1,)).await.unwrap().unwrap();
    assert_eq!(locking, primary, "SELECT … FOR UPDATE");
    let hinted: u16 = c.exec_first("SELECT /* sluice:route=writer */ @@port FROM test.ps WHERE id = ?", (1,)).await.unwrap().unwrap();
    assert_eq!(hinted, primary, "a hint in the prepared text");
    // The same prepared read inside a transaction: the primary; after it, the replicas again.
    c.query_drop("BEGIN").await.unwrap();
    let p: u16 = c.exec_first(read, (1,)).await.unwrap().unwrap();
    assert_eq!(p, primary, "a prepared read in a transaction");
    c.query_drop("COMMIT").await.unwrap();
    let p: u16 = c.exec_first(read, (1,)).await.unwrap().unwrap();
    assert!(replicas.contains(&p), "after the transaction: {p}");
}

/// A session reads back what it wrote with prepared statements while the replicas apply
/// nothing: with causal reads the read waits for a replica (up to causal_reads_timeout_ms),
/// then the primary answers; without, a replica answers without the row.
#[tokio::test]
async fn prepared_reads_see_prepared_writes_under_causal_reads() {
    let t = Replication::start(2).unwrap();
    t.primary.sql("CREATE TABLE test.ps_causal (id INT PRIMARY KEY)").unwrap();
    t.sync().unwrap();
    for r in &t.replicas {
        r.sql("STOP SLAVE SQL_THREAD").unwrap();
    }
    let online = ["ONLINE", "ONLINE"];
    for (causal, expect_stale) in [("local", 0), ("off", 10)] {
        let proxy = Proxy::start(split_config_full(&t, &online, causal, 200));
        let mut c = connect(proxy.port).await;
        let mut stale = 0;
        for i in 0..10 {
            let id = if causal == "off" { 100 + i } else { i };
            c.exec_drop("INSERT INTO test.ps_causal VALUES (?)", (id,)).await.unwrap();
            let started = std::time::Instant::now();
            let seen: Option<i32> = c.exec_first("SELECT id FROM test.ps_causal WHERE id = ?", (id,)).await.unwrap();
            assert!(started.elapsed() < std::time::Duration::from_millis(1500), "the 200 ms timeout bounds the wait");
            stale += seen.is_none() as usize;
        }
        assert_eq!(stale, expect_stale, "causal_reads = {causal}: reads that missed their own write");
    }
    for r in &t.replicas {
        r.sql("START SLAVE SQL_THREAD").unwrap();
    }
}

/// Reads go to the replica with the fewest statements running: with one replica busy with
/// long reads, new reads go to the other; plain weighted choice would send it half of them.
#[tokio::test]
async fn reads_go_to_the_least_busy_replica() {
    let t = Replication::start(2).unwrap();
    let (busy, free) = (t.replicas[0].port(), t.replicas[1].port());
    // The long reads can only land on the first replica while the second is OFFLINE_SOFT.
    let proxy = Proxy::start(split_config_full(&t, &["ONLINE", "OFFLINE_SOFT"], "local", 2000));
    let sleepers: Vec<_> = (0..3)
        .map(|_| {
            let port = proxy.port;
            tokio::spawn(async move {
                let mut c = connect(port).await;
                c.query_first::<(u16, i32), _>("SELECT @@port, SLEEP(4)").await.unwrap().unwrap().0
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let running = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT @@port, SLEEP%'";
    while t.replicas[0].sql(running).unwrap().trim() != "3" {
        assert!(std::time::Instant::now() < deadline, "the long reads did not start on {busy}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The second replica comes back (a reload keeps the first one's running count).
    let load = format!("UPDATE mysql_servers SET status = 'ONLINE' WHERE port = {free}; LOAD MYSQL SERVERS TO RUNTIME");
    mariadb_cli(proxy.admin_port(), "admin", Some("admin"), &load).unwrap();
    let mut c = connect(proxy.port).await;
    for _ in 0..20 {
        assert_eq!(port_of(&mut c, "SELECT @@port").await, free, "a new read went to the replica running 3 long ones");
    }
    for s in sleepers {
        assert_eq!(s.await.unwrap(), busy);
    }
    // Idle again: both share the reads.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        seen.insert(port_of(&mut c, "SELECT @@port").await);
    }
    assert_eq!(seen, [busy, free].into(), "both replicas serve reads once idle");
}

/// causal_reads = global: a session sees what another session's write the primary
/// acknowledged, though the replicas apply nothing (the primary answers after the wait);
/// with local, it reads stale (the test can fail). Replicas that catch up answer again.
#[tokio::test]
async fn global_causal_reads_see_every_sessions_acknowledged_writes() {
    let t = Replication::start(2).unwrap();
    let replicas: Vec<u16> = t.replicas.iter().map(|r| r.port()).collect();
    t.primary.sql("CREATE TABLE test.global_reads (id INT PRIMARY KEY)").unwrap();
    t.sync().unwrap();
    for r in &t.replicas {
        r.sql("STOP SLAVE SQL_THREAD").unwrap();
    }
    let online = ["ONLINE", "ONLINE"];
    for (causal, expect_stale) in [("global", 0), ("local", 10)] {
        let proxy = Proxy::start(split_config_full(&t, &online, causal, 200));
        let (mut writer, mut reader) = (connect(proxy.port).await, connect(proxy.port).await);
        let mut stale = 0;
        for i in 0..10 {
            let id = if causal == "local" { 100 + i } else { i };
            writer.query_drop(format!("INSERT INTO test.global_reads VALUES ({id})")).await.unwrap();
            let seen: Option<i32> = reader.query_first(format!("SELECT id FROM test.global_reads WHERE id = {id}")).await.unwrap();
            stale += seen.is_none() as usize;
        }
        assert_eq!(stale, expect_stale, "causal_reads = {causal}: reads that missed another session's write");
    }
    for r in &t.replicas {
        r.sql("START SLAVE SQL_THREAD").unwrap();
    }
    let proxy = Proxy::start(split_config_full(&t, &online, "global", 2000));
    let (mut writer, mut reader) = (connect(proxy.port).await, connect(proxy.port).await);
    writer.query_drop("INSERT INTO test.global_reads VALUES (1000)").await.unwrap();
    let (id, port): (Option<i32>, u16) =
        reader.query_first("SELECT (SELECT id FROM test.global_reads WHERE id = 1000), @@port").await.unwrap().unwrap();
    assert_eq!(id, Some(1000));
    assert!(replicas.contains(&port), "a replica that applied the write answered ({port})");
}

/// A prepared read with a cursor runs on a replica, and every fetch reads that replica's cursor
/// (the session keeps the connection holding it until the last row).
#[test]
fn a_cursor_is_fetched_from_the_replica_that_opened_it() {
    let t = Replication::start(2).unwrap();
    let replicas: Vec<u16> = t.replicas.iter().map(|r| r.port()).collect();
    let proxy = Proxy::start(split_config(&t, "ONLINE"));
    let mut raw = RawClient::connect(proxy.port, "root", "");
    let mut p = vec![proto::command::COM_STMT_PREPARE];
    p.extend_from_slice(b"SELECT CAST(@@port AS CHAR) FROM test.seq_1_to_10");
    raw.send(&p);
    let reply = raw.read_reply(proto::response::Reply::Prepare).unwrap();
    assert_eq!(reply[4], 0, "PREPARE_OK");
    let stmt = u32::from_le_bytes(reply[5..9].try_into().unwrap());
    let mut e = vec![proto::command::COM_STMT_EXECUTE];
    e.extend_from_slice(&stmt.to_le_bytes());
    e.push(proto::command::CURSOR_TYPE_READ_ONLY);
    e.extend_from_slice(&1u32.to_le_bytes());
    raw.send(&e);
    raw.read_reply(proto::response::Reply::Execute { cursor: true }).unwrap();
    let mut ports = Vec::new();
    for _fetch in 0..10 {
        let mut f = vec![proto::command::COM_STMT_FETCH];
        f.extend_from_slice(&stmt.to_le_bytes());
        f.extend_from_slice(&3u32.to_le_bytes());
        raw.send(&f);
        let bytes = raw.read_reply(proto::response::Reply::Fetch).unwrap();
        let mut pos = 0;
        let mut last = false;
        while pos < bytes.len() {
            let (len, _) = proto::frame::header(&bytes[pos..]).unwrap();
            let payload = &bytes[pos + 4..pos + 4 + len];
            match payload[0] {
                0x00 => {
                    // Binary row: header, 1-byte NULL bitmap, one length-prefixed string.
                    let n = payload[2] as usize;
                    ports.push(std::str::from_utf8(&payload[3..3 + n]).unwrap().parse::<u16>().unwrap());
                }
                0xFE => {
                    let ok = proto::packet::parse_ok(payload).unwrap();
                    last = ok.status & proto::StatusFlags::SERVER_STATUS_LAST_ROW_SENT.bits() != 0;
                }
                other => panic!("unexpected packet 0x{other:02x} in a fetch reply: {payload:?}"),
            }
            pos += 4 + len;
        }
        if last {
            break;
        }
    }
    assert_eq!(ports.len(), 10, "every row fetched: {ports:?}");
    assert!(replicas.contains(&ports[0]) && ports.iter().all(|&p| p == ports[0]), "one replica's cursor: {ports:?}");
}

/// A read that leaves state on a replica's connection (warnings, FOUND_ROWS()) keeps it for
/// what reads that state; a write or a BEGIN after it still goes to the primary. (A replica's
/// read_only does not stop an account with SUPER: a write sent there would be applied where
/// no one else sees it.)
#[tokio::test]
async fn state_kept_on_a_replica_never_takes_a_write() {
    let t = Replication::start(1).unwrap();
    let (primary, replica) = (t.primary.port(), t.replicas[0].port());
    t.primary.sql("CREATE TABLE test.kept (id INT PRIMARY KEY, port INT)").unwrap();
    t.sync().unwrap();
    let proxy = Proxy::start(split_config(&t, "ONLINE"));
    let mut c = connect(proxy.port).await;

    c.query_drop("SELECT CAST('x' AS SIGNED)").await.unwrap();
    let warnings: Vec<(String, u16, String)> = c.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(warnings.len(), 1, "the read's warning, from the replica's connection: {warnings:?}");
    c.query_drop("SELECT CAST('x' AS SIGNED)").await.unwrap();
    c.query_drop("INSERT INTO test.kept SELECT 1, @@port").await.unwrap();
    assert_eq!(t.primary.sql("SELECT port FROM test.kept").unwrap(), format!("{primary}\n"), "the write reached the primary");

    let found: Option<(u16, u16)> = c.query_first("SELECT SQL_CALC_FOUND_ROWS @@port, 1 FROM seq_1_to_5 LIMIT 2").await.unwrap();
    assert_eq!(found.map(|f| f.0), Some(replica));
    assert_eq!(c.query_first::<u32, _>("SELECT FOUND_ROWS()").await.unwrap(), Some(5), "FOUND_ROWS() where the read ran");
    c.query_drop("SELECT SQL_CALC_FOUND_ROWS 1").await.unwrap();
    c.query_drop("BEGIN").await.unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, primary, "the transaction runs on the primary");
    c.query_drop("COMMIT").await.unwrap();
}
