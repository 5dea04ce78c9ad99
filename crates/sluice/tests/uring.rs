//! The io_uring data path (`runtime = "per-core"` with `io = "auto"`: docs/architecture.md,
//! "Threads"): real clients through it must see what they see through epoll; a TLS client
//! and a TLS backend are handed to epoll; a close on either side is seen as promptly as on
//! epoll; `io = "epoll"` (and a kernel without io_uring) keeps every worker on epoll.
//! `SLUICE_TEST_RUNTIME=per-core cargo test -p sluice --tests` runs the whole suite this way
//! (the test harness puts every in-process sluice on per-core workers); the tests here name
//! their runtime and engine themselves (`Proxy::start_exact`), whatever that variable says.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::SslOpts;
use sluice::config::{Config, IoEngine, RuntimeKind};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use testkit::MariaDb;

fn per_core(mut cfg: Config, io: IoEngine) -> Config {
    cfg.proxy.runtime = RuntimeKind::PerCore;
    cfg.proxy.io = io;
    cfg
}

/// io_uring is usable on this machine; when not, the tests check the fallback instead.
fn uring_here() -> bool {
    sluice::net::uring::check().is_ok()
}

fn completions(proxy: &Proxy) -> u64 {
    proxy.server().data.io_uring.completions.load(Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_large_packets_and_prepared_statements_go_through_the_ring() {
    let db = MariaDb::start().unwrap();
    db.sql("CREATE DATABASE u; CREATE TABLE u.blobs (id INT PRIMARY KEY, b LONGBLOB)").unwrap();
    let mut cfg = per_core(quick_config(&db), IoEngine::Auto);
    // Room for both workers' sessions without lending each other connections.
    cfg.servers[0].max_connections = 32;
    let proxy = Proxy::start_exact(cfg);
    // The workers make their rings as they start, which `start` does not wait for.
    let deadline = Instant::now() + Duration::from_secs(5);
    while uring_here() && proxy.server().data.io_uring.rings.load(Relaxed) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rings = proxy.server().data.io_uring.rings.load(Relaxed);
    assert_eq!(rings, if uring_here() { 2 } else { 0 }, "one ring per worker where io_uring is available");
    let before = completions(&proxy);
    let port = proxy.port;
    // 16 sessions at once on 2 workers: each writes and reads back
    // a 3 MiB value (many sends and receives per packet, in order), runs prepared statements
    // and a 20,000-row text result.
    let sessions: Vec<_> = (0..16u32)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = connect(port).await;
                let blob: Vec<u8> = (0..3 << 20).map(|k: u32| (k.wrapping_mul(31).wrapping_add(i) % 251) as u8).collect();
                c.exec_drop("INSERT INTO u.blobs VALUES (?, ?)", (i, blob.clone())).await.unwrap();
                let back: Vec<u8> = c.exec_first("SELECT b FROM u.blobs WHERE id = ?", (i,)).await.unwrap().unwrap();
                assert!(back == blob, "session {i}: the value came back changed");
                let rows: Vec<(u32, String)> = c.query("SELECT seq, REPEAT('x', seq % 50) FROM seq_1_to_20000").await.unwrap();
                assert_eq!(rows.len(), 20_000);
                assert!(rows.iter().all(|(n, s)| s.len() == (*n % 50) as usize), "session {i}: rows intact");
                let me: u32 = c.exec_first("SELECT ? + 1", (i,)).await.unwrap().unwrap();
                assert_eq!(me, i + 1);
                c.disconnect().await.unwrap();
            })
        })
        .collect();
    for s in sessions {
        s.await.expect("session ran as on a direct connection");
    }
    // The mariadb CLI (libmariadb) too.
    assert_eq!(mariadb_cli(port, "root", None, "SELECT 1, 'two'").unwrap().trim_end(), "1\ttwo");
    let done = completions(&proxy) - before;
    if uring_here() {
        assert!(done > 16 * 50, "the sessions' reads and writes completed on the rings ({done} completions)");
    } else {
        assert_eq!(done, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_and_tls_backends_are_handed_to_epoll() {
    let certs = testkit::TestCerts::generate().unwrap();
    let db = MariaDb::start_with(testkit::MariaDbOptions { tls: Some(certs), ..Default::default() }).unwrap();
    let mut cfg = per_core(quick_config(&db), IoEngine::Auto);
    cfg.servers[0].use_ssl = true;
    let proxy = Proxy::start_exact(cfg);
    // TLS both ways: the greeting and the SSLRequest went through the ring, the handshake and
    // everything after it through epoll, on the same sockets.
    let o = opts(proxy.port, "root", "").ssl_opts(Some(SslOpts::default().with_danger_accept_invalid_certs(true)));
    let mut c = mysql_async::Conn::new(o).await.expect("TLS login through a per-core worker");
    let cipher: Option<(String, String)> = c.query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'").await.unwrap();
    assert!(!cipher.map(|(_, v)| v).unwrap_or_default().is_empty(), "the backend connection is TLS");
    let big: String = c.query_first("SELECT REPEAT('t', 1000000)").await.unwrap().unwrap();
    assert_eq!(big.len(), 1_000_000);
    // A plain client beside it stays on the ring.
    let mut plain = connect(proxy.port).await;
    let v: i64 = plain.query_first("SELECT 7").await.unwrap().unwrap();
    assert_eq!(v, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closes_are_seen_at_once_on_both_sides() {
    let mut db = MariaDb::start().unwrap();
    let proxy = Proxy::start_exact(per_core(quick_config(&db), IoEngine::Auto));
    // A client gone in the middle of a statement: its statement is killed on the server at
    // once, not when it would have ended.
    let mut raw = RawClient::connect(proxy.port, "root", "");
    raw.send(b"\x03SELECT SLEEP(20) /* uring-gone */");
    std::thread::sleep(Duration::from_millis(300));
    drop(raw);
    let running = || db.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%uring-gone%' AND ID <> CONNECTION_ID()");
    let deadline = Instant::now() + Duration::from_secs(5);
    while running().unwrap().trim() != "0" {
        assert!(Instant::now() < deadline, "the statement of a client that left still runs after 5 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A KILL is answered once its target's connection is closed, as on the server.
    assert_kill_closes_its_target_first(proxy.port, 5);
    // The server closing idle pooled connections (a restart): the next statements get fresh
    // connections, with the session's state replayed.
    assert_a_restart_under_idle_pooled_connections_is_noticed(&mut db, proxy.port, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_epoll_keeps_every_worker_on_epoll() {
    let db = MariaDb::start().unwrap();
    let proxy = Proxy::start_exact(per_core(quick_config(&db), IoEngine::Epoll));
    let mut c = connect(proxy.port).await;
    let v: i64 = c.query_first("SELECT 5").await.unwrap().unwrap();
    assert_eq!(v, 5);
    let totals = &proxy.server().data.io_uring;
    assert_eq!((totals.rings.load(Relaxed), totals.completions.load(Relaxed)), (0, 0));
    // The work-stealing runtime never uses the ring either.
    let mut steal = quick_config(&db);
    steal.proxy.runtime = RuntimeKind::Steal;
    let proxy = Proxy::start_exact(steal);
    let mut c = connect(proxy.port).await;
    let v: i64 = c.query_first("SELECT 6").await.unwrap().unwrap();
    assert_eq!(v, 6);
    assert_eq!(proxy.server().data.runtime, RuntimeKind::Steal);
    assert_eq!(proxy.server().data.io_uring.rings.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_on_the_ring_get_errors_and_the_others_go_on() {
    let db = MariaDb::start().unwrap();
    db.sql("SET GLOBAL max_allowed_packet = 16777216").unwrap();
    let proxy = Proxy::start_exact(per_core(quick_config(&db), IoEngine::Auto));
    let mut bystander = connect(proxy.port).await;
    // Unknown and empty commands: an error each, the session goes on.
    let mut raw = RawClient::connect(proxy.port, "root", "");
    for payload in [&[0x7F][..], &[][..]] {
        raw.send(payload);
        let (_, err) = raw.read_packet().unwrap();
        assert_eq!(proto::packet::parse_err(&err).expect("an ERR packet").code, proto::errors::ER_UNKNOWN_COM_ERROR, "{payload:?}");
    }
    raw.send(&[proto::command::COM_PING]);
    assert_eq!(raw.read_packet().unwrap().1[0], 0, "the session goes on");
    // A statement larger than max_allowed_packet (16 MiB here): the server's error, 1153.
    let mut big = vec![proto::command::COM_QUERY];
    big.extend_from_slice(b"SELECT '");
    big.resize(80 << 20, b'x');
    let mut framed = Vec::new();
    proto::frame::write_packet(&mut framed, &mut 0, &big);
    // Written from a thread of its own, whose write may fail: sluice answers and closes before
    // taking all of it.
    let mut writer = raw.stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || drop(std::io::Write::write_all(&mut writer, &framed)));
    let (_, err) = raw.read_packet().unwrap();
    // The connection is closed with the answer, as on the server: the rest of the write fails
    // at once, not when a timer lets the socket go.
    let started = Instant::now();
    sending.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "the writer was held {:?} after the answer", started.elapsed());
    assert_eq!(proto::packet::parse_err(&err).expect("an ERR packet").code, proto::errors::ER_NET_PACKET_TOO_LARGE);
    // A header announcing 16 MiB, then the client goes: nothing is kept for it.
    let mut half = RawClient::connect(proxy.port, "root", "");
    std::io::Write::write_all(&mut half.stream, &[0xFF, 0xFF, 0xFF, 0, proto::command::COM_QUERY]).unwrap();
    drop(half);
    // Wrong passwords: 1045 each (throttled per address and user: tests/accounts.rs).
    for _ in 0..5 {
        let e = mysql_async::Conn::new(opts(proxy.port, "root", "wrong")).await.expect_err("a wrong password is refused");
        assert_eq!(server_code(&e), Some(1045), "{e}");
    }
    let v: i64 = bystander.query_first("SELECT 9").await.unwrap().unwrap();
    assert_eq!(v, 9, "the other session carries on");
}

/// Ring completions per statement through `proxy` (one session, 200 statements).
async fn completions_per_statement(proxy: &Proxy) -> f64 {
    let mut c = connect(proxy.port).await;
    c.query_drop("SELECT 1").await.unwrap();
    let before = completions(proxy);
    for i in 0..200u32 {
        let v: Option<u32> = c.query_first(format!("SELECT {i}")).await.unwrap();
        assert_eq!(v, Some(i));
    }
    let per = (completions(proxy) - before) as f64 / 200.0;
    c.disconnect().await.unwrap();
    per
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_unix_socket_goes_through_the_ring_too() {
    if !uring_here() {
        eprintln!("io_uring is not available here: nothing to compare");
        return;
    }
    let db = MariaDb::start().unwrap();
    let socket = db.socket_path().display().to_string();
    let tcp = Proxy::start_exact(per_core(quick_config(&db), IoEngine::Auto));
    let mut over_socket = quick_config(&db);
    over_socket.servers[0].hostname = socket;
    over_socket.servers[0].port = 0;
    let unix = Proxy::start_exact(per_core(over_socket, IoEngine::Auto));
    let (t, u) = (completions_per_statement(&tcp).await, completions_per_statement(&unix).await);
    // Both legs on the ring: a receive and a send on each per statement. With the server's leg
    // on epoll the socket backend would show the client's leg alone (about half).
    assert!(t >= 3.5, "a TCP backend: both legs through the ring ({t} completions per statement)");
    assert!(u >= 0.8 * t, "a socket backend's leg goes through the ring as TCP's does ({u} vs {t} completions per statement)");
}
