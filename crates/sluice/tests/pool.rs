//! Pooling and multiplexing against a private MariaDB: many client sessions, each with its
//! own session state, share a few backend connections without noticing.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use testkit::MariaDb;

/// Connections MariaDB has open for clients other than the one asking.
fn backend_connections(db: &MariaDb) -> u32 {
    db.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon' AND ID <> CONNECTION_ID()")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_sessions_with_their_own_state_share_four_connections() {
    let db = Arc::new(MariaDb::start().unwrap());
    db.sql(
        "CREATE DATABASE s0; CREATE DATABASE s1; \
         CREATE TABLE s0.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; CREATE TABLE s1.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
    )
    .unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 4;
    cfg.pool.checkout_timeout_ms = 60_000;
    let proxy = Proxy::start(cfg);
    let port = proxy.port;

    // Watch MariaDB's side while the sessions run.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        let db = db.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(backend_connections(&db));
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            peak
        })
    };
    // Session i: schema s{i%2}, its own sql_mode, time zone, character set and user variables;
    // every other one sets @w, the rest must never see one.
    let sessions: Vec<_> = (0..500u32)
        .map(|i| {
            tokio::spawn(async move {
                let schema = format!("s{}", i % 2);
                let mut c = mysql_async::Conn::new(opts(port, "root", "").db_name(Some(schema.clone()))).await.expect("connects");
                let mode = if i % 3 == 0 { "ANSI_QUOTES" } else { "NO_ENGINE_SUBSTITUTION" };
                let zone = format!("+0{}:00", i % 10);
                let charset = if i % 4 == 0 { "latin1" } else { "utf8mb4" };
                c.query_drop(format!("SET SESSION sql_mode = '{mode}', time_zone = '{zone}'")).await.unwrap();
                c.query_drop(format!("SET NAMES {charset}")).await.unwrap();
                c.query_drop(format!("SET @v = {i}")).await.unwrap();
                if i % 2 == 0 {
                    c.query_drop(format!("SELECT @w := 'w{i}'")).await.unwrap();
                }
                for round in 0..3u32 {
                    let (v, m, z, d, cs): (u32, String, String, String, String) =
                        c.query_first("SELECT @v, @@sql_mode, @@time_zone, DATABASE(), @@character_set_client").await.unwrap().unwrap();
                    assert_eq!((v, m.as_str(), z.as_str(), d.as_str(), cs.as_str()), (i, mode, zone.as_str(), schema.as_str(), charset));
                    let w: Option<String> = c.query_first("SELECT @w").await.unwrap().unwrap();
                    assert_eq!(w, (i % 2 == 0).then(|| format!("w{i}")), "session {i} sees only its own @w");
                    let mut tx = c.start_transaction(Default::default()).await.unwrap();
                    tx.exec_drop("INSERT INTO t VALUES (?, ?)", (i * 10 + round, i)).await.unwrap();
                    let n: u32 = tx.exec_first("SELECT COUNT(*) FROM t WHERE v = ?", (i,)).await.unwrap().unwrap();
                    assert_eq!(n, round + 1);
                    tx.commit().await.unwrap();
                }
                if i % 250 == 7 {
                    // A temporary table pins the session; no one else sees it.
                    c.query_drop("CREATE TEMPORARY TABLE mine (a INT)").await.unwrap();
                    c.query_drop("INSERT INTO mine VALUES (1)").await.unwrap();
                    let n: u32 = c.query_first("SELECT COUNT(*) FROM mine").await.unwrap().unwrap();
                    assert_eq!(n, 1);
                }
                c.disconnect().await.unwrap();
            })
        })
        .collect();
    for s in sessions {
        s.await.expect("session ran as on a direct connection");
    }
    done.store(true, Ordering::Relaxed);
    let peak = watcher.join().unwrap();
    eprintln!("peak backend connections: {peak}");
    assert!(peak <= 4, "MariaDB saw {peak} connections from sluice; the pool allows 4");
    assert!(peak >= 1, "the watcher saw sluice's connections");
    // Nothing leaked: no temporary table is left anywhere, and every row landed once.
    let mut c = connect(port).await;
    let e = c.query_drop("SELECT * FROM mine").await.unwrap_err();
    assert!(e.to_string().contains("doesn't exist"), "{e}");
    let rows: u32 = c.query_first("SELECT (SELECT COUNT(*) FROM s0.t) + (SELECT COUNT(*) FROM s1.t)").await.unwrap().unwrap();
    assert_eq!(rows, 1500);
}

#[tokio::test]
async fn warnings_stay_readable_when_another_session_wants_the_connection() {
    let db = MariaDb::start().unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 1;
    let proxy = Proxy::start(cfg);
    let mut a = connect(proxy.port).await;
    let mut b = connect(proxy.port).await;
    a.query_drop("SELECT 1/0").await.unwrap();
    // The other session, whose statement has a warning of its own, is ready to take the one
    // connection the moment it is free.
    let other = tokio::spawn(async move {
        let n: i64 = b.query_first("SELECT CAST('7x' AS SIGNED)").await.unwrap().unwrap();
        n
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let warnings: Vec<(String, u32, String)> = a.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(warnings, vec![("Warning".to_string(), 1365, "Division by 0".to_string())]);
    assert_eq!(other.await.unwrap(), 7, "and the other session runs after");
}
