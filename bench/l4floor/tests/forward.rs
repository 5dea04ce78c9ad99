//! The forwarder the floor is measured with must forward: through each engine, a real MariaDB
//! answers exactly as it does directly, replies larger than its 16 KiB buffers arrive whole,
//! and many sessions at once (each engine's threads shared among them) each get their own rows.
//! If a figure in BENCHMARKS.md came from a forwarder that dropped or mixed bytes, it would say
//! nothing; these checks are what makes the floor a floor.

use mysql_async::prelude::*;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use testkit::MariaDb;

struct Forwarder(Child);

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts l4floor with `engine` (its name, then any of its flags) in front of `db`; returns it
/// and its port once it accepts.
fn start(engine: &str, db: &MariaDb) -> (Forwarder, u16) {
    let port = testkit::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_l4floor"))
        .arg("--engine")
        .args(engine.split(' '))
        .args(["--threads", "2", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--backend")
        .arg(db.addr())
        .spawn()
        .expect("l4floor starts");
    let mut fwd = Forwarder(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = fwd.0.try_wait().unwrap() {
            panic!("l4floor --engine {engine} exited: {status}");
        }
        assert!(Instant::now() < deadline, "l4floor --engine {engine} not listening after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    (fwd, port)
}

fn opts(port: u16) -> mysql_async::Opts {
    mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some("root"))
        .pass(Some(""))
        .db_name(Some("floor"))
        // Else mysql_async moves to the server's unix socket once it learns it, around the forwarder.
        .prefer_socket(false)
        .into()
}

/// What one session sees: a large reply (about 1 MiB over many 16 KiB reads), a prepared
/// statement's binary rows, and the server's own error for a bad statement.
async fn session(port: u16, tag: u32) -> (Vec<(u32, String)>, Vec<u32>, u16) {
    // A forwarder that loses bytes leaves the client waiting: a bound turns that into a failure.
    tokio::time::timeout(Duration::from_secs(60), session_unbounded(port, tag)).await.expect("the session ends within 60 s")
}

async fn session_unbounded(port: u16, tag: u32) -> (Vec<(u32, String)>, Vec<u32>, u16) {
    let mut c = mysql_async::Conn::new(opts(port)).await.expect("connects");
    let rows: Vec<(u32, String)> = c.query("SELECT id, body FROM t ORDER BY id").await.expect("large select");
    let ids: Vec<u32> = c.exec("SELECT id + ? FROM t WHERE id < 5 ORDER BY id", (tag,)).await.expect("prepared select");
    let code = match c.query_drop("SELECT * FROM no_such_table").await {
        Err(mysql_async::Error::Server(e)) => e.code,
        other => panic!("expected the server's error, got {other:?}"),
    };
    c.disconnect().await.expect("quits");
    (rows, ids, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_engine_forwards_what_the_server_says() {
    let db = MariaDb::start().expect("MariaDB starts");
    db.sql(
        "CREATE DATABASE floor; CREATE TABLE floor.t (id INT PRIMARY KEY, body TEXT);
         INSERT INTO floor.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 1000) FROM floor.seq_1_to_1000;",
    )
    .expect("table");
    let direct = session(db.port(), 7).await;
    assert_eq!(direct.0.len(), 1000);
    assert_eq!(direct.1, vec![8, 9, 10, 11]);
    assert_eq!(direct.2, 1146);
    let engines =
        ["tokio", "tokio-per-core", "tokio-uring", "uring", "uring --uring-unlinked --uring-coop --uring-poll-first", "uring-multishot"];
    for engine in engines {
        let (_fwd, port) = start(engine, &db);
        assert_eq!(session(port, 7).await, direct, "one session through --engine {engine}");
        // 16 sessions at once, each with its own parameter: no bytes cross between them.
        let many: Vec<_> = (0..16u32).map(|tag| tokio::spawn(session(port, tag))).collect();
        for (tag, h) in many.into_iter().enumerate() {
            let (rows, ids, code) = h.await.expect("session task");
            assert_eq!(rows, direct.0, "session {tag} through --engine {engine}: rows");
            assert_eq!(ids, (1..5).map(|i| i + tag as u32).collect::<Vec<_>>(), "session {tag}: its own parameter");
            assert_eq!(code, 1146);
        }
    }
}
