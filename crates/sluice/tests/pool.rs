//! Pooling and multiplexing against a private MariaDB: many client sessions, each with its
//! own session state, share a few backend connections without noticing.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use testkit::MariaDb;

/// Connections MariaDB has open for clients other than the one asking.
/// The connections of sluice's pool to `db`: its client logins are root's; the monitor's own
/// connections (health checks, accounts) log in as `monitor` (`monitor_apart`).
fn backend_connections(db: &MariaDb) -> u32 {
    db.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'root' AND COMMAND <> 'Daemon' AND ID <> CONNECTION_ID()")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The quick-start config with the monitor's connections under a login of their own, so the
/// pool's connections can be told from them on the server.
fn monitor_apart(db: &MariaDb) -> sluice::config::Config {
    db.sql("CREATE USER monitor@'%' IDENTIFIED BY 'monitor'; GRANT ALL ON *.* TO monitor@'%'").unwrap();
    let mut cfg = quick_config(db);
    let monitor = cfg.monitor.as_mut().expect("the quick start has a monitor login");
    monitor.username = "monitor".into();
    monitor.password = "monitor".into();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_sessions_with_their_own_state_share_four_connections() {
    let db = Arc::new(MariaDb::start().unwrap());
    db.sql(
        "CREATE DATABASE s0; CREATE DATABASE s1; \
         CREATE TABLE s0.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; CREATE TABLE s1.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
    )
    .unwrap();
    let mut cfg = monitor_apart(&db);
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

/// A global status counter of the backend.
fn global_status(db: &MariaDb, name: &str) -> u64 {
    db.sql(&format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}'"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no global status {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_once_runs_from_many_sessions_on_any_connection() {
    let db = MariaDb::start().unwrap();
    // The backend connection's own id: sluice answers CONNECTION_ID() and @@pseudo_thread_id
    // in a statement with the session's id, not inside a stored function.
    db.sql("CREATE TABLE test.kv (k INT PRIMARY KEY, v VARCHAR(20)); CREATE FUNCTION test.backend_thread() RETURNS BIGINT RETURN CONNECTION_ID()").unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 4;
    cfg.pool.checkout_timeout_ms = 60_000;
    let proxy = Proxy::start(cfg);
    let port = proxy.port;
    let prepares_before = global_status(&db, "Com_stmt_prepare");
    let sessions: Vec<_> = (0..40u32)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = connect(port).await;
                // Prepared once per session (mysql_async caches statements), executed 25 times.
                let insert = c.prep("INSERT INTO kv VALUES (?, ?)").await.unwrap();
                let select = c.prep("SELECT v, backend_thread() FROM kv WHERE k = ?").await.unwrap();
                let mut threads = std::collections::HashSet::new();
                for round in 0..25u32 {
                    let k = i * 100 + round;
                    c.exec_drop(&insert, (k, format!("v{k}"))).await.unwrap();
                    let (v, thread): (String, u64) = c.exec_first(&select, (k,)).await.unwrap().expect("the row just inserted");
                    assert_eq!(v, format!("v{k}"));
                    threads.insert(thread);
                }
                c.disconnect().await.unwrap();
                threads
            })
        })
        .collect();
    let mut all = std::collections::HashSet::new();
    let mut moved = 0;
    for s in sessions {
        let threads = s.await.expect("every execute returned the session's own row");
        moved += (threads.len() > 1) as u32;
        all.extend(threads);
    }
    // More than 4 distinct ids: connections were closed and replaced under contention.
    assert!(all.len() > 1 && all.len() <= 4, "backend connections used: {all:?}");
    assert!(moved > 0, "no session's statement ran on more than one backend connection");
    // 80 client prepares; at most one more per statement and connection was needed.
    let prepares = global_status(&db, "Com_stmt_prepare") - prepares_before;
    assert!(prepares <= 80 + 2 * 4, "the backend prepared {prepares} times");
    assert_eq!(proxy.server().data.statements.len(), 2, "two distinct statements in the registry");
    let rows: u32 = connect(port).await.query_first("SELECT COUNT(*) FROM kv").await.unwrap().unwrap();
    assert_eq!(rows, 1000, "every insert landed exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hundred_thousand_distinct_statements_prepared_and_closed_keep_memory_flat() {
    let db = MariaDb::start().unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 4;
    cfg.pool.max_statements = 2_000;
    cfg.pool.max_statements_per_connection = 64;
    let proxy = Proxy::start(cfg);
    let port = proxy.port;
    let run = |from: u32, to: u32| async move {
        let per_client = (to - from) / 4;
        let clients: Vec<_> = (0..4u32)
            .map(|c| {
                tokio::spawn(async move {
                    let mut conn = mysql_async::Conn::new(opts(port, "root", "").stmt_cache_size(0)).await.unwrap();
                    let start = from + c * per_client;
                    for n in start..start + per_client {
                        let stmt = conn.prep(format!("SELECT {n} + ?")).await.unwrap();
                        if n % 1000 == 0 {
                            let v: i64 = conn.exec_first(&stmt, (1,)).await.unwrap().unwrap();
                            assert_eq!(v, n as i64 + 1);
                        }
                        conn.close(stmt).await.unwrap();
                    }
                    conn.disconnect().await.unwrap();
                })
            })
            .collect();
        for c in clients {
            c.await.unwrap();
        }
    };
    run(0, 20_000).await;
    let rss_warm = rss_kib();
    run(20_000, 100_000).await;
    let rss_end = rss_kib();
    let statements = proxy.server().data.statements.len();
    assert!(statements <= 2_000, "registry holds {statements} statements");
    let open = global_status(&db, "Prepared_stmt_count");
    assert!(open <= 64 * 4, "the backend holds {open} prepared statements");
    // The test client shares this process; both sides must stay flat.
    eprintln!("RSS after 20,000 statements: {rss_warm} KiB; after 100,000: {rss_end} KiB");
    assert!(rss_end < rss_warm + 16 * 1024, "RSS grew from {rss_warm} KiB to {rss_end} KiB");
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap()
}

#[tokio::test]
async fn open_statements_beyond_the_cap_are_refused_like_the_server_does() {
    let db = MariaDb::start().unwrap();
    let mut cfg = quick_config(&db);
    cfg.pool.max_statements = 10;
    let proxy = Proxy::start(cfg);
    let mut c = mysql_async::Conn::new(opts(proxy.port, "root", "").stmt_cache_size(0)).await.unwrap();
    let mut open = Vec::new();
    for n in 0..10 {
        open.push(c.prep(format!("SELECT {n}")).await.unwrap());
    }
    let e = c.prep("SELECT 10").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1461), "{e}");
    assert!(e.to_string().contains("max_statements"), "{e}");
    c.close(open.pop().unwrap()).await.unwrap();
    let stmt = c.prep("SELECT 10").await.unwrap();
    let v: i64 = c.exec_first(&stmt, ()).await.unwrap().unwrap();
    assert_eq!(v, 10);
}

#[tokio::test]
async fn an_exhausted_pool_makes_statements_wait_then_fail_naming_the_hostgroup() {
    let db = MariaDb::start().unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 1;
    cfg.pool.checkout_timeout_ms = 500;
    let proxy = Proxy::start(cfg);
    let mut a = connect(proxy.port).await;
    let mut b = connect(proxy.port).await;
    // An open transaction keeps the only connection.
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("SELECT 1").await.unwrap();
    let started = std::time::Instant::now();
    let e = b.query_drop("SELECT 2").await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(server_code(&e), Some(9001), "{e}");
    assert!(e.to_string().contains("hostgroup 0"), "{e}");
    assert!(waited >= std::time::Duration::from_millis(450), "failed after {waited:?}, before the timeout");
    // The waiting session gets the connection as soon as it is free.
    let waiter = tokio::spawn(async move {
        let v: i64 = b.query_first("SELECT 3").await.unwrap().unwrap();
        v
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    a.query_drop("COMMIT").await.unwrap();
    assert_eq!(waiter.await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_restarted_under_idle_pooled_connections_is_noticed() {
    let mut db = MariaDb::start().unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 8;
    cfg.pool.min_idle = 2;
    let proxy = Proxy::start(cfg);
    assert_a_restart_under_idle_pooled_connections_is_noticed(&mut db, proxy.port, 6).await;
    let mut fresh = connect(proxy.port).await;
    let v: i64 = fresh.query_first("SELECT 42").await.unwrap().unwrap();
    assert_eq!(v, 42);
}

#[test]
fn sysbench_prepared_statements_run_on_any_of_two_connections() {
    let db = MariaDb::start().unwrap();
    db.sql("CREATE DATABASE sb").unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 2;
    cfg.pool.checkout_timeout_ms = 60_000;
    let proxy = Proxy::start(cfg);
    let args = |port: u16| {
        [
            "oltp_read_only".to_string(),
            "--mysql-host=127.0.0.1".into(),
            format!("--mysql-port={port}"),
            "--mysql-user=root".into(),
            "--mysql-db=sb".into(),
            "--tables=2".into(),
            "--table-size=1000".into(),
            "--mysql-ssl=off".into(),
        ]
    };
    let out = std::process::Command::new("sysbench").args(args(db.port())).arg("prepare").output().expect("sysbench is installed");
    assert!(out.status.success(), "sysbench prepare: {}", String::from_utf8_lossy(&out.stderr));
    let executes_before = global_status(&db, "Com_stmt_execute");
    // Without transactions, each statement may run on either connection; types are sent on
    // each statement's first execute only (libmysqlclient/libmariadb).
    let out = std::process::Command::new("sysbench")
        .args(args(proxy.port))
        .args(["--threads=8", "--time=4", "--report-interval=0", "--skip-trx=on", "--db-ps-mode=auto", "run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let field = |name: &str| sysbench_figure(&text, name);
    assert_eq!(field("ignored errors"), 0.0, "{text}");
    assert!(field("queries") > 100.0, "{text}");
    let executes = global_status(&db, "Com_stmt_execute") - executes_before;
    assert!(executes as f64 >= field("queries") * 0.9, "the backend ran {executes} executes for {} queries", field("queries"));
    // 8 clients × 5 statement shapes × 2 tables, on 2 connections: each keeps one of each.
    let open = global_status(&db, "Prepared_stmt_count");
    assert!(open <= 2 * 10, "the backend holds {open} prepared statements");
}

/// PyMySQL and mysqlclient default to autocommit=0, and ORMs then issue SAVEPOINT with no
/// BEGIN: the server keeps the savepoint before its status flags show a transaction. The
/// session must keep that connection until COMMIT/ROLLBACK, or a later ROLLBACK TO lands on
/// another connection (1305 SAVEPOINT … does not exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_savepoint_under_autocommit_off_keeps_its_connection() {
    let db = MariaDb::start().unwrap();
    db.sql("CREATE DATABASE sp; CREATE TABLE sp.t (id INT PRIMARY KEY) ENGINE=InnoDB").unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].max_connections = 2;
    let proxy = Proxy::start(cfg);
    let mut a = mysql_async::Conn::new(opts(proxy.port, "root", "").db_name(Some("sp"))).await.expect("connects");
    let mut b = mysql_async::Conn::new(opts(proxy.port, "root", "").db_name(Some("sp"))).await.expect("connects");
    a.query_drop("SET autocommit = 0").await.unwrap();
    a.query_drop("SAVEPOINT sa_savepoint_1").await.unwrap();
    // B's transaction takes whichever connection is idle: it must not be A's.
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("SELECT COUNT(*) FROM t").await.unwrap();
    a.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    a.query_drop("ROLLBACK TO SAVEPOINT sa_savepoint_1").await.expect("the savepoint is where A left it");
    a.query_drop("RELEASE SAVEPOINT sa_savepoint_1").await.unwrap();
    a.query_drop("COMMIT").await.unwrap();
    b.query_drop("COMMIT").await.unwrap();
    let n: u32 = b.query_first("SELECT COUNT(*) FROM t").await.unwrap().unwrap();
    assert_eq!(n, 0, "the insert was rolled back to the savepoint");
    // After COMMIT the connection goes back to the pool: B can use both connections.
    a.query_drop("SET autocommit = 1").await.unwrap();
    let mut tx = b.start_transaction(Default::default()).await.unwrap();
    tx.query_drop("INSERT INTO t VALUES (2)").await.unwrap();
    tx.commit().await.unwrap();
    // With autocommit on, a SAVEPOINT outside a transaction keeps nothing and pins nothing.
    a.query_drop("SAVEPOINT s2").await.unwrap();
    let err = a.query_drop("ROLLBACK TO SAVEPOINT s2").await.expect_err("as on the server: no savepoint outside a transaction");
    assert!(err.to_string().contains("1305") || err.to_string().contains("does not exist"), "{err}");
}

/// What a session observes about its own statements — SHOW PROFILES, SHOW WARNINGS — is the
/// same through sluice as directly: sluice's read-back of changed variables must not show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluices_own_statements_do_not_show_in_profiles_or_warnings() {
    let db = MariaDb::start().unwrap();
    let proxy = Proxy::quick(&db);
    async fn observe(port: u16) -> (Vec<String>, Vec<(String, u32)>, Vec<String>) {
        let mut c = mysql_async::Conn::new(opts(port, "root", "")).await.expect("connects");
        c.query_drop("SET profiling = 1").await.unwrap();
        c.query_drop("SELECT 1").await.unwrap();
        c.query_drop("SET @x = 5").await.unwrap();
        let profiles: Vec<(u32, f64, String)> = c.query("SHOW PROFILES").await.unwrap();
        let queries = profiles.into_iter().map(|p| p.2).collect();
        // Another session, without profiling: a user variable set with a warning, which
        // SHOW WARNINGS must still see.
        let mut c = mysql_async::Conn::new(opts(port, "root", "")).await.expect("connects");
        c.query_drop("SET @x = 5").await.unwrap();
        c.query_drop("SET @y = CAST('12abc' AS SIGNED)").await.unwrap();
        let warnings: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.unwrap();
        let warnings = warnings.into_iter().map(|w| (w.0, w.1)).collect();
        let values: Vec<(Option<String>, Option<String>)> = c.query("SELECT @x, @y").await.unwrap();
        let values = values.into_iter().flat_map(|(x, y)| [x.unwrap_or_default(), y.unwrap_or_default()]).collect();
        (queries, warnings, values)
    }
    let direct = observe(db.port()).await;
    let through = observe(proxy.port).await;
    assert_eq!(through, direct, "what the session observes through sluice (left) and directly (right)");
    assert!(direct.0.iter().any(|q| q == "SELECT 1"), "profiles recorded: {:?}", direct.0);
    assert_eq!(direct.1.len(), 1, "one warning: {:?}", direct.1);
}

/// Per-core workers each pool the connections they open, and a worker whose own are all busy
/// borrows the other's idle one rather than wait for its own or close the other's to open one:
/// 16 sessions (on both workers) share one connection, which is never closed and reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_core_workers_lend_each_other_idle_connections() {
    let db = MariaDb::start().unwrap();
    let mut cfg = monitor_apart(&db);
    cfg.proxy.runtime = sluice::config::RuntimeKind::PerCore;
    cfg.servers[0].max_connections = 1;
    cfg.pool.checkout_timeout_ms = 3000;
    let proxy = Proxy::start(cfg);
    let port = proxy.port;
    let sessions: Vec<_> = (0..16i64)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = connect(port).await;
                for k in 0..20i64 {
                    let v: i64 = c.query_first(format!("SELECT {i} * 100 + {k}")).await.unwrap().unwrap();
                    assert_eq!(v, i * 100 + k);
                }
                c.disconnect().await.unwrap();
            })
        })
        .collect();
    for s in sessions {
        s.await.unwrap();
    }
    // The acceptor hands connections to the workers in turn, so both have sessions; without
    // lending, the worker that did not open the one connection would wait out the checkout
    // timeout and fail its sessions' statements.
    assert_eq!(backend_connections(&db), 1);
    assert_eq!(proxy.counter("Server_Connections_created"), 1, "one pooled connection, never closed and reopened");
}
