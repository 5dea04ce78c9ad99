//! Faults between the two ends: a client that leaves while its statement runs, a client that
//! stops reading a large result, and SIGTERM while a statement runs — against real MariaDB
//! servers, with raw sockets where a driver would hide what happens.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb, MariaDbOptions};

/// Backend threads whose statement text contains `marker`, as (ID, INFO).
async fn running(direct: &mut mysql_async::Conn, marker: &str) -> Vec<(u64, String)> {
    direct
        .query(format!("SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()"))
        .await
        .unwrap()
}

/// Waits until exactly one backend thread runs the statement marked `marker`; its id.
async fn wait_running(direct: &mut mysql_async::Conn, marker: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let [(id, _)] = running(direct, marker).await[..] {
            return id;
        }
        assert!(Instant::now() < deadline, "the statement never started on the backend");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether backend thread `id` still exists.
async fn thread_exists(direct: &mut mysql_async::Conn, id: u64) -> bool {
    let n: u64 = direct.query_first(format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}")).await.unwrap().unwrap();
    n > 0
}

/// Polls until neither the statement marked `marker` nor its thread `id` is on the backend;
/// how long that took.
async fn wait_gone(direct: &mut mysql_async::Conn, marker: &str, id: u64, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let statement = !running(direct, marker).await.is_empty();
        let thread = thread_exists(direct, id).await;
        if !statement && !thread {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "after {within:?} the backend still has {}",
            if statement { "the statement running" } else { "the connection open (it could be pooled again)" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One COM_QUERY packet (sequence 0).
fn query_packet(sql: &str) -> Vec<u8> {
    let mut out = Vec::new();
    proto::frame::write_packet(&mut out, &mut 0, &[&[proto::command::COM_QUERY][..], sql.as_bytes()].concat());
    out
}

#[tokio::test]
async fn a_client_leaving_mid_statement_kills_it_and_its_connection_is_not_reused() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut direct = connect(db.port()).await;
    for how in ["close", "reset"] {
        let marker = unique("gone");
        let mut raw = RawClient::connect(proxy.port, "root", "");
        raw.send(format!("\x03SELECT SLEEP(30), '{marker}'").as_bytes());
        let thread = wait_running(&mut direct, &marker).await;
        if how == "reset" {
            // SO_LINGER 0: the close sends a reset.
            socket2::SockRef::from(&raw.stream).set_linger(Some(Duration::ZERO)).unwrap();
        }
        drop(raw);
        let took = wait_gone(&mut direct, &marker, thread, Duration::from_secs(3)).await;
        eprintln!("{how}: statement killed and connection closed after {took:?}");
    }
    // The proxy still serves.
    let mut c = connect(proxy.port).await;
    assert_eq!(c.query_first::<i64, _>("SELECT 7").await.unwrap(), Some(7));
}

#[tokio::test]
async fn a_client_whose_login_cannot_kill_has_the_monitor_kill_its_statement() {
    let db = shared();
    let user = unique("oneconn");
    // Its one connection runs the statement: a second one, to kill it, is refused.
    db.sql(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 1")).unwrap();
    let text = format!(
        r#"
[proxy]
listen = ["127.0.0.1:0"]
[monitor]
username = "root"
password = ""
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {{BACKEND_PORT}}
[[mysql_users]]
username = "{user}"
password = "pw"
"#
    );
    let proxy = Proxy::start(toml_config(&text, db));
    let mut direct = connect(db.port()).await;
    let marker = unique("monitorkill");
    let mut raw = RawClient::connect(proxy.port, &user, "pw");
    raw.send(format!("\x03SELECT SLEEP(30), '{marker}'").as_bytes());
    let thread = wait_running(&mut direct, &marker).await;
    drop(raw);
    wait_gone(&mut direct, &marker, thread, Duration::from_secs(3)).await;
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn a_client_sending_ahead_is_not_taken_for_gone() {
    let db = shared();
    let proxy = Proxy::quick(db);
    // The next command arrives while the first statement runs: both are answered, in order.
    let mut raw = RawClient::connect(proxy.port, "root", "");
    let mut both = query_packet("SELECT SLEEP(1), 'first'");
    both.extend(query_packet("SELECT 'second'"));
    raw.stream.write_all(&both).unwrap();
    let [first, second] = read_replies(&mut raw);
    assert!(first.windows(5).any(|w| w == b"first"), "the first reply: {first:?}");
    assert!(second.windows(6).any(|w| w == b"second"), "the second reply: {second:?}");

    // A statement, COM_QUIT and the end of the connection, all at once: the statement still
    // runs to its end, as it does on the server itself.
    let table = unique("ahead");
    let mut direct = connect(db.port()).await;
    direct.query_drop(format!("CREATE TABLE test.{table} (a INT)")).await.unwrap();
    let mut raw = RawClient::connect(proxy.port, "root", "");
    let mut bytes = query_packet(&format!("INSERT INTO test.{table} SELECT SLEEP(1) + 5"));
    proto::frame::write_packet(&mut bytes, &mut 0, &[proto::command::COM_QUIT]);
    raw.stream.write_all(&bytes).unwrap();
    raw.stream.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = raw.stream.read_to_end(&mut rest);
    let rows: Vec<i64> = direct.query(format!("SELECT a FROM test.{table}")).await.unwrap();
    assert_eq!(rows, vec![5], "the statement completed");
    direct.query_drop(format!("DROP TABLE test.{table}")).await.unwrap();
}

/// Reads `N` whole COM_QUERY replies, which may arrive in the same reads.
fn read_replies<const N: usize>(raw: &mut RawClient) -> [Vec<u8>; N] {
    let mut replies: [Vec<u8>; N] = std::array::from_fn(|_| Vec::new());
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    for reply in replies.iter_mut() {
        let mut scanner = proto::response::Scanner::new(proto::response::Reply::Query, true);
        loop {
            if !pending.is_empty() {
                let (used, event) = scanner.feed(&pending).unwrap();
                reply.extend(pending.drain(..used));
                if event != proto::response::Event::More {
                    break;
                }
            }
            let n = raw.stream.read(&mut buf).unwrap();
            assert!(n > 0, "the connection ended before the reply did");
            pending.extend_from_slice(&buf[..n]);
        }
    }
    replies
}

/// Reads packets until an ERR packet; returns its code and how many packets came before.
fn read_until_error(raw: &mut RawClient) -> (u16, u64) {
    let mut packets = 0;
    loop {
        let (_, p) = raw.read_packet().expect("an error packet before the end of the connection");
        if p.as_slice().first() == Some(&0xFF) {
            return (u16::from_le_bytes([p[1], p[2]]), packets);
        }
        packets += 1;
    }
}

/// Two clients that stop reading a large result hold the only two connections sluice may open.
/// Returns them, once both statements are stuck writing on the server.
async fn two_stalled_clients(proxy_port: u16, db: &MariaDb, setup: Option<&str>) -> (RawClient, RawClient, String) {
    let marker = unique("stalled");
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut raw = RawClient::connect(proxy_port, "root", "");
        if let Some(sql) = setup {
            raw.send(format!("\x03{sql}").as_bytes());
            raw.read_reply(proto::response::Reply::Query).unwrap();
        }
        raw.send(format!("\x03SELECT seq, REPEAT('x', 1000), '{marker}' FROM test.seq_1_to_100000000").as_bytes());
        stalled.push(raw);
    }
    let mut direct = connect(db.port()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&mut direct, &marker).await.len() < 2 {
        assert!(Instant::now() < deadline, "both statements run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = stalled.pop().unwrap();
    (stalled.pop().unwrap(), b, marker)
}

/// sluice in front of `db` with room for two backend connections, and a long checkout wait (so
/// that a slot freed late shows as a slow answer, not an error).
fn two_slot_proxy(db: &MariaDb) -> Proxy {
    let mut cfg = quick_config(db);
    cfg.servers[0].max_connections = 2;
    cfg.pool.checkout_timeout_ms = 30_000;
    Proxy::start(cfg)
}

#[tokio::test]
async fn connections_the_server_drops_under_stalled_clients_free_their_slots_at_once() {
    // The server gives up on a client that reads nothing for 2 s, and resets the connection.
    let db = MariaDb::start_with(MariaDbOptions { extra_args: vec!["--net-write-timeout=2".into()], ..Default::default() }).unwrap();
    let proxy = two_slot_proxy(&db);
    let (mut a, mut b, marker) = two_stalled_clients(proxy.port, &db, None).await;
    let started = Instant::now();
    let mut c = connect(proxy.port).await;
    assert_eq!(c.query_first::<i64, _>("SELECT 1").await.unwrap(), Some(1));
    let took = started.elapsed();
    eprintln!("a third client was served after {took:?}");
    assert!(took < Duration::from_secs(6), "served {took:?} after the stall; the server dropped the stalled connections at ~2 s");
    // Both of them (the third client needed only the first).
    let mut direct = connect(db.port()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !running(&mut direct, &marker).await.is_empty() {
        assert!(Instant::now() < deadline, "the server dropped both stalled connections");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The stalled clients get the whole rows sluice held, then the error, when they read again.
    for raw in [&mut a, &mut b] {
        let (code, packets) = read_until_error(raw);
        assert_eq!(code, proto::errors::ER_CONNECTION_KILLED);
        assert!(packets > 100, "rows came before the error ({packets} packets)");
    }
}

#[tokio::test]
async fn a_client_stalled_past_its_net_write_timeout_is_given_up() {
    // The server's own net_write_timeout is long; the session set a short one. When the
    // server's side of a stalled connection goes without a reset (KILL CONNECTION: the close
    // waits behind the unread data), sluice gives up at the session's net_write_timeout.
    let db = MariaDb::start().unwrap();
    let proxy = two_slot_proxy(&db);
    let (mut a, mut b, marker) = two_stalled_clients(proxy.port, &db, Some("SET SESSION net_write_timeout = 3")).await;
    let started = Instant::now();
    // Once the server is blocked writing to sluice (whose buffer is full), it stops them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut direct = connect(db.port()).await;
    for (id, _) in running(&mut direct, &marker).await {
        direct.query_drop(format!("KILL CONNECTION {id}")).await.unwrap();
    }
    let mut c = connect(proxy.port).await;
    assert_eq!(c.query_first::<i64, _>("SELECT 1").await.unwrap(), Some(1));
    let took = started.elapsed();
    eprintln!("a third client was served after {took:?}");
    assert!(took < Duration::from_secs(7), "served {took:?} after the stall; the stall bound is 3 s");
    // Given up as the server gives up: the connection ends.
    for raw in [&mut a, &mut b] {
        raw.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        let end = loop {
            match raw.stream.read(&mut sink) {
                Ok(0) => break Ok(()),
                Ok(_) => continue,
                Err(e) => break Err(e),
            }
        };
        assert!(end.is_ok() || end.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "{end:?}");
    }
}

/// Runs the `sluice` binary with `config` (TOML) and `--runtime runtime`; waits until it listens.
fn spawn_sluice(config: &str, port: u16, runtime: &str) -> (std::process::Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--config")
        .arg(&path)
        .args(["--admin-listen", "", "--http-listen", "", "--workers", "2", "--runtime", runtime])
        .stdout(Stdio::null())
        .env("SLUICE_LOG", "warn")
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sluice binary runs");
    wait_until_listening(port);
    (child, dir)
}

async fn sigterm_past_the_timeout(runtime: &str) {
    let db = shared();
    let port = testkit::free_port();
    let config = format!(
        "[proxy]\nlisten = [\"127.0.0.1:{port}\"]\nshutdown_timeout_ms = 1000\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\n",
        db.port()
    );
    let (mut child, _dir) = spawn_sluice(&config, port, runtime);
    let marker = unique("sigterm");
    let mut c = connect(port).await;
    let sql = format!("SELECT SLEEP(60), '{marker}'");
    let statement = tokio::spawn(async move { c.query_drop(sql).await });
    let mut direct = connect(db.port()).await;
    let thread = wait_running(&mut direct, &marker).await;
    let signalled = Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if signalled.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("sluice did not exit within 20 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = signalled.elapsed();
    eprintln!("{runtime}: exited {status} after {took:?}");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_millis(1000 + 2500), "exit took {took:?} with shutdown_timeout_ms = 1000");
    // The statement was killed on the backend, and the client's connection ended.
    wait_gone(&mut direct, &marker, thread, Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(5), statement).await.expect("the client's statement ended").unwrap().ok();
}

#[tokio::test]
async fn sigterm_kills_what_still_runs_after_the_shutdown_timeout_and_exits() {
    sigterm_past_the_timeout("steal").await;
}

#[tokio::test]
async fn sigterm_kills_what_still_runs_after_the_shutdown_timeout_and_exits_per_core() {
    sigterm_past_the_timeout("per-core").await;
}
