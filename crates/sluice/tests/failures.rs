//! Failure handling: a backend that is down or dies mid-reply, a client that vanishes or reads
//! slowly, garbage input, SIGTERM and bad configuration. The process-level checks run the real
//! `sluice` binary so its memory and exit code can be measured.

mod common;

use common::*;
use mysql_async::prelude::*;
use proto::response::Reply;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb};

#[tokio::test]
async fn backend_down_at_connect_names_the_backend() {
    let port = testkit::free_port();
    let mut cfg = sluice::config::quick_start(vec!["127.0.0.1:0".into()], &format!("127.0.0.1:{port}"), "root", "").unwrap();
    cfg.workers = 1;
    let proxy = Proxy::start(cfg);
    let Err(e) = mysql_async::Conn::new(opts(proxy.port, "root", "")).await else { panic!("login must fail") };
    assert_eq!(server_code(&e), Some(proto::errors::ER_CONNECTION_KILLED), "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "names the backend: {e}");
}

#[tokio::test]
async fn backend_dying_mid_result_is_an_error_not_a_short_result() {
    let mut db = MariaDb::start().unwrap();
    let proxy = Proxy::quick(&db);
    let mut c = connect(proxy.port).await;
    let mut other = connect(shared_proxy_port()).await;
    let mut result = c.query_iter("SELECT seq, REPEAT('x', 1000) FROM seq_1_to_100000000").await.unwrap();
    let mut rows = 0u64;
    let outcome = loop {
        match result.next().await {
            Ok(Some(_)) => {
                rows += 1;
                if rows == 1000 {
                    db.kill();
                }
            }
            Ok(None) => break Ok(rows),
            Err(e) => break Err(e),
        }
    };
    let e = outcome.expect_err("the reply must end in an error, never look complete");
    assert!(rows >= 1000);
    if let Some(code) = server_code(&e) {
        assert_eq!(code, proto::errors::ER_CONNECTION_KILLED, "{e}");
        assert!(e.to_string().contains(&db.addr()), "names the backend: {e}");
    }
    drop(result);
    // The broken session ends; sessions on other backends are untouched.
    other.ping().await.unwrap();
}

/// A proxy in front of the shared MariaDB, kept for the whole test binary.
fn shared_proxy_port() -> u16 {
    static P: std::sync::OnceLock<Proxy> = std::sync::OnceLock::new();
    P.get_or_init(|| Proxy::quick(shared())).port
}

#[tokio::test]
async fn client_vanishing_mid_result_frees_the_backend_connection() {
    let db = shared();
    let port = shared_proxy_port();
    let marker = unique("vanish");
    let mut raw = RawClient::connect(port, "root", "");
    raw.send(format!("\x03SELECT '{marker}', seq, REPEAT('x', 1000) FROM test.seq_1_to_100000000").as_bytes());
    let mut buf = vec![0u8; 1 << 20];
    raw.stream.read_exact(&mut buf).unwrap();
    drop(raw);
    let mut direct = connect(db.port()).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n: u64 = direct
            .query_first(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()"
            ))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the backend connection still runs the query");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn garbage_from_one_client_does_not_disturb_others() {
    let port = shared_proxy_port();
    let mut good = RawClient::connect(port, "root", "");
    for junk in [&b"\x00\x00\x00\x01"[..], b"GET / HTTP/1.1\r\n\r\n", &[0xFF; 64], &[3, 0, 0, 1, 0, 0, 0]] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut g = [0u8; 256];
        let _ = s.read(&mut g);
        let _ = s.write_all(junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    good.send(b"\x03SELECT 1");
    good.read_reply(Reply::Query).expect("the good session still works");
}

fn sluice_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn spawn_quick(db: &MariaDb, port: u16, extra: &[&str]) -> Child {
    let child = sluice_bin()
        .args(["--listen", &format!("127.0.0.1:{port}"), "--backend", &db.addr(), "--user", "root", "--password", ""])
        .args(["--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice binary runs");
    wait_until_listening(port);
    child
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap()
}

/// Reads a whole reply slowly (a pause every 256 KiB); returns the bytes received.
fn read_slowly(raw: &mut RawClient) -> u64 {
    let mut scanner = proto::response::Scanner::new(Reply::Query, true);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    let mut since_pause = 0;
    loop {
        let n = raw.stream.read(&mut buf).expect("reply keeps coming");
        assert!(n > 0, "connection closed before the end of the reply");
        total += n as u64;
        since_pause += n;
        if since_pause >= 256 << 10 {
            since_pause = 0;
            std::thread::sleep(Duration::from_millis(1));
        }
        match scanner.feed(&buf[..n]).unwrap() {
            (_, proto::response::Event::Done { error }) => {
                assert!(!error);
                return total;
            }
            _ => continue,
        }
    }
}

#[test]
fn two_slow_clients_reading_1gib_each_keep_rss_under_64mib() {
    let db = shared();
    let port = testkit::free_port();
    let mut child = spawn_quick(db, port, &["--workers", "2"]);
    let readers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut raw = RawClient::connect(port, "root", "");
                raw.send(b"\x03SELECT REPEAT('x', 1048576) FROM test.seq_1_to_1024");
                read_slowly(&mut raw)
            })
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap() >= 1 << 30, "each client got its 1 GiB");
    }
    let hwm = vm_hwm_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("sluice peak RSS (VmHWM) after 2 × 1 GiB: {hwm} KiB");
    assert!(hwm < 64 * 1024, "peak RSS {hwm} KiB is over 64 MiB");
}

#[tokio::test]
async fn sigterm_lets_the_running_statement_finish_then_exits_0() {
    let db = shared();
    let port = testkit::free_port();
    let mut child = spawn_quick(db, port, &[]);
    let mut c = connect(port).await;
    let idle = connect(port).await;
    let running = tokio::spawn(async move {
        let r: Result<Option<i64>, _> = c.query_first("SELECT SLEEP(2)").await;
        r
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "no new connections after SIGTERM");
    assert_eq!(running.await.unwrap().expect("the in-flight statement completes"), Some(0));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "sluice did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    drop(idle);
}

#[test]
fn bad_config_exits_2_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(
        &path,
        "[proxy]\nlisten = [\"127.0.0.1:6033\"]\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = \"3306x\"\n",
    )
    .unwrap();
    let out = sluice_bin().arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:6:", path.display())), "{err}");
    assert!(err.contains("`port`"), "{err}");
    // A semantic error: a user whose hostgroup has no server.
    std::fs::write(
        &path,
        "[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"h\"\n[[mysql_users]]\nusername = \"u\"\ndefault_hostgroup = 3\n",
    )
    .unwrap();
    let out = sluice_bin().arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":6: mysql_users[0].default_hostgroup: hostgroup 3"), "{err}");
    let out = sluice_bin().arg("--config").arg(dir.path().join("missing.toml")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_client_that_never_logs_in_is_disconnected() {
    let mut cfg = quick_config(shared());
    cfg.proxy.client_connect_timeout_ms = 300;
    let proxy = Proxy::start(cfg);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut greeting = [0u8; 512];
    assert!(s.read(&mut greeting).unwrap() > 0, "greeted");
    let started = Instant::now();
    let mut rest = [0u8; 16];
    assert_eq!(s.read(&mut rest).unwrap(), 0, "sluice closes the silent connection");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// What a client sees when the server's wait_timeout closes its idle session, through `port`.
async fn after_wait_timeout(port: u16) -> (bool, bool) {
    let mut c = connect(port).await;
    c.query_drop("SET SESSION wait_timeout = 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = c.query_drop("SELECT 1").await.expect_err("the session is gone");
    // Same shape as direct: the connection just ends, no error packet made up by a proxy.
    (matches!(e, mysql_async::Error::Server(_)), c.ping().await.is_err())
}

#[tokio::test]
async fn backend_closing_an_idle_session_looks_the_same_as_direct() {
    let db = shared();
    let direct = after_wait_timeout(db.port()).await;
    assert_eq!(after_wait_timeout(shared_proxy_port()).await, direct);
}
