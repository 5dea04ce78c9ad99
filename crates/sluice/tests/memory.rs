//! Memory per connection stays bounded before login and after: large client packets are
//! relayed as they arrive, handshakes in progress are limited apart from logged-in clients (in
//! all and per client address), and memory returns after a burst of half-open connections.
//!
//! sluice runs as its own process here (the `sluice` binary, with its own allocator), so its
//! resident memory is read from /proc without the test's own allocations in it.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The `sluice` binary in front of `db`, with `proxy` lines added to `[proxy]`.
struct ProxyProcess {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl ProxyProcess {
    fn start(db: &testkit::MariaDb, proxy: &str) -> ProxyProcess {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let port = testkit::free_port();
            let text = format!(
                "[proxy]\nlisten = [\"127.0.0.1:{port}\"]\nworkers = 2\nadmin_listen = \"\"\nhttp_listen = \"\"\n{proxy}\n\
                 [tls]\nenabled = false\n\
                 [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {}\n\
                 [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n",
                db.port()
            );
            let path = dir.path().join("sluice.toml");
            std::fs::write(&path, text).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .arg("--config")
                .arg(&path)
                .env("SLUICE_LOG", std::env::var("SLUICE_LOG").unwrap_or_else(|_| "warn".into()))
                .stdin(Stdio::null())
                .spawn()
                .expect("sluice starts");
            let mut p = ProxyProcess { child, port, _dir: tempfile::tempdir().unwrap() };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = p.child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    p._dir = dir;
                    return p;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = p.child.kill();
        }
        panic!("sluice did not start");
    }

    /// A field of /proc/PID/status, in bytes (VmRSS: resident now; VmHWM: the peak).
    fn status_bytes(&self, field: &str) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    }

    fn rss(&self) -> usize {
        self.status_bytes("VmRSS:")
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes one logical packet of `len` payload bytes, made by `byte_at`, without holding it:
/// chunks of 16 MiB as the protocol splits it, written from a small buffer.
fn write_streamed(stream: &mut TcpStream, len: usize, byte_at: impl Fn(usize) -> u8) {
    let mut buf = vec![0u8; MIB];
    let mut pos = 0;
    let mut seq = 0u8;
    loop {
        let n = (len - pos).min(proto::frame::MAX_CHUNK);
        stream.write_all(&proto::frame::encode_header(n, seq)).unwrap();
        seq = seq.wrapping_add(1);
        let end = pos + n;
        while pos < end {
            let m = (end - pos).min(buf.len());
            for (i, b) in buf[..m].iter_mut().enumerate() {
                *b = byte_at(pos + i);
            }
            stream.write_all(&buf[..m]).unwrap();
            pos += m;
        }
        if n < proto::frame::MAX_CHUNK {
            return;
        }
    }
}

/// `SELECT LENGTH('xxx…')` as a COM_QUERY payload of exactly `len` bytes, byte by byte.
fn big_select(len: usize) -> (impl Fn(usize) -> u8, usize) {
    const HEAD: &[u8] = b"\x03SELECT LENGTH('";
    const TAIL: &[u8] = b"')";
    let xs = len - HEAD.len() - TAIL.len();
    let byte_at = move |i: usize| {
        if i < HEAD.len() {
            HEAD[i]
        } else if i < HEAD.len() + xs {
            b'x'
        } else {
            TAIL[i - HEAD.len() - xs]
        }
    };
    (byte_at, xs)
}

/// The text of the single value of a one-row text result.
fn single_value(reply: &[u8]) -> String {
    // Column count, column definition, row (DEPRECATE_EOF: no EOF between), OK.
    let mut pos = 0;
    let mut packets = Vec::new();
    while pos + 4 <= reply.len() {
        let (len, _) = proto::frame::header(&reply[pos..]).unwrap();
        packets.push(&reply[pos + 4..pos + 4 + len]);
        pos += 4 + len;
    }
    assert!(packets.len() >= 3 && packets[0][0] != 0xFF, "a result set, got {:?}", &reply[..reply.len().min(200)]);
    let row = packets[2];
    String::from_utf8_lossy(&row[1..1 + row[0] as usize]).into_owned()
}

#[test]
fn a_200_mib_statement_is_relayed_with_bounded_memory() {
    let db = testkit::shared();
    let proxy = ProxyProcess::start(db, "");
    let mut c = RawClient::connect(proxy.port, "root", "");
    c.stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    c.send(b"\x03SELECT 1");
    c.read_reply(proto::response::Reply::Query).unwrap();
    let baseline = proxy.rss();

    let (byte_at, xs) = big_select(200 * MIB);
    let t = Instant::now();
    write_streamed(&mut c.stream, 200 * MIB, byte_at);
    let reply = c.read_reply(proto::response::Reply::Query).unwrap();
    assert_eq!(single_value(&reply), xs.to_string(), "the server got the whole statement");
    let peak = proxy.status_bytes("VmHWM:");
    eprintln!("200 MiB statement in {:?}: sluice RSS baseline {} MiB, peak {} MiB", t.elapsed(), baseline / MIB, peak / MIB);
    assert!(peak < baseline + 64 * MIB, "sluice's peak RSS {} MiB, baseline {} MiB", peak / MIB, baseline / MIB);

    // The session goes on, in step.
    c.send(b"\x03SELECT 'after'");
    assert_eq!(single_value(&c.read_reply(proto::response::Reply::Query).unwrap()), "after");
}

#[tokio::test]
async fn a_large_execute_parameter_is_relayed_with_bounded_memory() {
    use mysql_async::prelude::*;
    let db = testkit::shared();
    let proxy = ProxyProcess::start(db, "");
    let mut c = connect(proxy.port).await;
    c.query_drop("SELECT 1").await.unwrap();
    let baseline = proxy.rss();
    let blob = vec![b'y'; 120 * MIB];
    let stmt = c.prep("SELECT LENGTH(?), ? = REPEAT('y', 120 * 1048576)").await.unwrap();
    let row: (u64, i64) = c.exec_first(&stmt, (&blob, &blob)).await.unwrap().unwrap();
    assert_eq!(row, (120 * MIB as u64, 1));
    let peak = proxy.status_bytes("VmHWM:");
    eprintln!("240 MiB execute: sluice RSS baseline {} MiB, peak {} MiB", baseline / MIB, peak / MIB);
    assert!(peak < baseline + 64 * MIB, "sluice's peak RSS {} MiB, baseline {} MiB", peak / MIB, baseline / MIB);
    drop(blob);
    let n: u64 = c.exec_first(&stmt, (vec![b'z'; 10], "z")).await.unwrap().map(|r: (u64, i64)| r.0).unwrap();
    assert_eq!(n, 10);
}

/// A TCP connection to sluice from `from` (another loopback address than the client's).
fn connect_from(from: &str, port: u16) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&from.parse::<SocketAddr>().unwrap().into())?;
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    Ok(s.into())
}

/// The first packet a server sends on `s`: greeting (10) or ERR (0xFF), with its error code.
fn first_packet(s: &mut TcpStream) -> (u8, u16) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let (len, _) = proto::frame::header(&h).unwrap();
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    let code = if p[0] == 0xFF { u16::from_le_bytes([p[1], p[2]]) } else { 0 };
    (p[0], code)
}

#[tokio::test(flavor = "multi_thread")]
async fn half_open_handshakes_do_not_keep_clients_out() {
    let db = testkit::shared();
    // Without separate limits these 3000 sockets would count toward max_connections.
    let proxy = ProxyProcess::start(db, "max_connections = 500\nmax_handshakes = 1000\nmax_handshakes_per_host = 100\n");
    let port = proxy.port;
    let mut idle: Vec<TcpStream> = tokio::task::spawn_blocking(move || {
        (0..3000).map(|_| connect_from("127.0.0.2:0", port).expect("connects (the kernel accepts; sluice answers)")).collect()
    })
    .await
    .unwrap();
    // A client from another address logs in at once, and works.
    let t = Instant::now();
    let mut c = connect(port).await;
    let one: i64 = mysql_async::prelude::Queryable::query_first(&mut c, "SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);
    assert!(t.elapsed() < Duration::from_secs(3), "logged in after {:?}", t.elapsed());
    // Of the half-open ones, 100 got a greeting; the rest were told 1040 at once.
    let firsts = tokio::task::spawn_blocking(move || idle.iter_mut().map(first_packet).collect::<Vec<_>>()).await.unwrap();
    let greeted = firsts.iter().filter(|&&(first, _)| first == 10).count();
    let refused = firsts.iter().filter(|&&(first, code)| first == 0xFF && code == 1040).count();
    assert_eq!((greeted, refused), (100, 2900), "greetings and ER_CON_COUNT_ERROR");
}

#[test]
fn memory_returns_after_a_burst_of_half_open_handshakes() {
    let db = testkit::shared();
    let proxy = ProxyProcess::start(db, "max_handshakes = 20000\nmax_handshakes_per_host = 20000\n");
    let mut c = RawClient::connect(proxy.port, "root", "");
    c.send(b"\x03SELECT 1");
    c.read_reply(proto::response::Reply::Query).unwrap();
    let baseline = proxy.rss();
    const N: usize = 10_000;
    let mut idle = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = connect_from("127.0.0.3:0", proxy.port).unwrap();
        // Half a handshake: the greeting read, a partial response sent.
        idle.push({
            let _ = first_packet(&mut s);
            s.write_all(&[0x40, 0, 0, 1, 0x0d, 0xa2]).unwrap();
            s
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = proxy.rss();
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = proxy.rss();
    while after > baseline + 32 * MIB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = proxy.rss();
    }
    eprintln!(
        "{N} half-open handshakes: sluice RSS baseline {} MiB, with them {} MiB, after they closed {} MiB",
        baseline / MIB,
        during / MIB,
        after / MIB
    );
    assert!(after < baseline + 32 * MIB, "RSS {} MiB after the burst, baseline {} MiB", after / MIB, baseline / MIB);
    // Still serving.
    c.send(b"\x03SELECT 1");
    c.read_reply(proto::response::Reply::Query).unwrap();
}
