//! A backend reached through its Unix socket (`hostname` = the socket's path, as ProxySQL reads
//! it): sessions, pooling, KILL and live reconfiguration work as over TCP, and the server sees
//! sluice's connections arrive on its socket.

mod common;

use common::*;
use mysql_async::prelude::*;
use sluice::config::RuntimeKind;
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// The quick-start config with `db`'s socket as the backend.
fn socket_config(db: &MariaDb) -> sluice::config::Config {
    let socket = db.socket_path().to_str().expect("a UTF-8 path").to_string();
    let mut c = sluice::config::quick_start(vec!["127.0.0.1:0".into()], &socket, "root", "").expect("valid quick-start config");
    c.workers = 2;
    c
}

/// The `HOST` column the server shows for the connection running a statement that holds
/// `marker`: `localhost` for its Unix socket, `addr:port` for TCP.
fn host_running(db: &MariaDb, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let host = db
            .sql(&format!("SELECT HOST FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()"))
            .unwrap();
        if !host.trim().is_empty() || Instant::now() > deadline {
            return host.trim().to_string();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `SELECT SLEEP(secs)` with `marker` through `port` in the background.
fn sleeper(port: u16, marker: &str, secs: u32) -> tokio::task::JoinHandle<Result<Option<u32>, mysql_async::Error>> {
    let sql = format!("SELECT SLEEP({secs}) /* {marker} */");
    tokio::spawn(async move {
        let mut c = connect(port).await;
        c.query_first::<u32, _>(sql).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_over_the_servers_unix_socket() {
    let db = MariaDb::start().unwrap();
    db.sql("CREATE TABLE test.u (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB").unwrap();
    for runtime in [RuntimeKind::Steal, RuntimeKind::PerCore] {
        let mut cfg = socket_config(&db);
        cfg.proxy.runtime = runtime;
        let proxy = Proxy::start_exact(cfg);
        let marker = unique("over-the-socket");
        let running = sleeper(proxy.port, &marker, 1);
        assert_eq!(host_running(&db, &marker), "localhost", "{runtime:?}: the server sees sluice on its socket, not on TCP");
        assert_eq!(running.await.unwrap().unwrap(), Some(0));

        // Session state, a transaction and a prepared statement, over pooled socket connections.
        let mut c = connect(proxy.port).await;
        c.query_drop("DELETE FROM test.u").await.unwrap();
        c.query_drop("SET @who = 'socket'").await.unwrap();
        c.query_drop("BEGIN").await.unwrap();
        c.exec_drop("INSERT INTO test.u VALUES (?, @who)", (1,)).await.unwrap();
        c.query_drop("COMMIT").await.unwrap();
        let v: Option<String> = c.exec_first("SELECT v FROM test.u WHERE id = ?", (1,)).await.unwrap();
        assert_eq!(v.as_deref(), Some("socket"), "{runtime:?}");
        // Many sessions at once share the pool.
        let mut tasks = Vec::new();
        for i in 0..20u32 {
            let port = proxy.port;
            tasks.push(tokio::spawn(async move {
                let mut c = connect(port).await;
                let mut sum = 0u64;
                for j in 0..20u32 {
                    sum += c.query_first::<u64, _>(format!("SELECT {i} * 100 + {j}")).await.unwrap().unwrap();
                }
                c.disconnect().await.unwrap();
                sum
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let i = i as u64;
            assert_eq!(t.await.unwrap(), (0..20).map(|j| i * 100 + j).sum::<u64>(), "{runtime:?}");
        }

        // KILL QUERY reaches the statement's backend connection (sluice's KILL goes over the
        // socket too).
        let marker = unique("killed-over-the-socket");
        let victim = sleeper(proxy.port, &marker, 30);
        host_running(&db, &marker);
        let mut killer = connect(proxy.port).await;
        let ids: Vec<u32> = killer
            .query(format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND INFO NOT LIKE '%PROCESSLIST%'"))
            .await
            .unwrap();
        assert_eq!(ids.len(), 1, "{runtime:?}: sluice lists the sleeping session");
        let started = Instant::now();
        killer.query_drop(format!("KILL QUERY {}", ids[0])).await.unwrap();
        // MariaDB fails an interrupted SLEEP with 1317 (MySQL returns 1).
        let e = victim.await.unwrap().expect_err("the statement was killed");
        assert_eq!(server_code(&e), Some(1317), "{runtime:?}: {e}");
        assert!(started.elapsed() < Duration::from_secs(20), "{runtime:?}: the KILL stopped the statement");
        drop(proxy);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_move_from_tcp_to_the_socket() {
    let db = MariaDb::start().unwrap();
    let proxy = Proxy::start(quick_config(&db));
    let mut held = connect(proxy.port).await;
    held.query_drop("SET @kept = 7").await.unwrap();
    let marker = unique("before-the-move");
    let running = sleeper(proxy.port, &marker, 1);
    let before = host_running(&db, &marker);
    assert!(before.contains(':'), "over TCP the server shows addr:port, not {before:?}");
    running.await.unwrap().unwrap();

    let socket = db.socket_path().display().to_string();
    let out = mariadb_cli(
        proxy.admin_port(),
        "admin",
        Some("admin"),
        &format!(
            "UPDATE mysql_servers SET hostname = '{socket}', port = 0; LOAD MYSQL SERVERS TO RUNTIME; \
             SELECT hostname, port FROM runtime_mysql_servers"
        ),
    )
    .unwrap();
    assert_eq!(out.trim(), format!("{socket}\t0"));

    let marker = unique("after-the-move");
    let running = sleeper(proxy.port, &marker, 1);
    assert_eq!(host_running(&db, &marker), "localhost", "new statements go over the socket");
    running.await.unwrap().unwrap();
    // The session open across the move kept its state.
    assert_eq!(held.query_first::<u32, _>("SELECT @kept").await.unwrap(), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_is_not_there_is_named_in_the_error() {
    let db = MariaDb::start().unwrap();
    let missing = db.socket_path().with_file_name("no-such.sock").display().to_string();
    let mut cfg = quick_config(&db);
    // Logins are checked against the config's user, not the (unreachable) server's accounts.
    cfg.proxy.backend_users = false;
    cfg.servers[0].hostname = missing.clone();
    cfg.servers[0].port = 0;
    let proxy = Proxy::start(cfg);
    // The login needs a backend connection: it fails as a direct client's would (1927).
    let e = mysql_async::Conn::new(opts(proxy.port, "root", "")).await.expect_err("no server behind the socket");
    assert_eq!(server_code(&e), Some(1927), "{e}");
    let text = e.to_string();
    assert!(text.contains(&missing), "the error names the socket: {text}");
    assert!(text.contains("No such file"), "and says why: {text}");
}
