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
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The `sluice` binary in front of `db`, with `proxy` lines added to `[proxy]`, and client-side
/// TLS offered (a self-signed certificate made at start-up) or not.
fn start_tls(db: &testkit::MariaDb, proxy: &str, tls: bool) -> ProxyProcess {
    ProxyProcess::spawn(|port| {
        format!(
            "[proxy]\nlisten = [\"127.0.0.1:{port}\"]\nworkers = 2\nadmin_listen = \"\"\nhttp_listen = \"\"\n{proxy}\n\
             [tls]\nenabled = {tls}\n\
             [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {}\n\
             [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n",
            db.port()
        )
    })
}

fn start(db: &testkit::MariaDb, proxy: &str) -> ProxyProcess {
    start_tls(db, proxy, false)
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
    let proxy = start(db, "");
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

/// Reads packets up to the end of a binary result of one row and one integer: its value.
fn binary_integer(c: &mut RawClient) -> u64 {
    let (_, count) = c.read_packet().unwrap();
    assert_eq!(count, [1], "one column, got {}", String::from_utf8_lossy(&count));
    c.read_packet().unwrap(); // column definition
    let (_, row) = c.read_packet().unwrap();
    let (_, end) = c.read_packet().unwrap();
    assert_eq!(end[0], 0xFE);
    assert_eq!(row[0], 0);
    // INT or BIGINT, little-endian after the header byte and the NULL bitmap.
    row[2..].iter().rev().fold(0u64, |n, &b| n << 8 | b as u64)
}

#[test]
fn large_execute_and_long_data_packets_are_relayed_with_bounded_memory() {
    let db = testkit::shared();
    let proxy = start(db, "");
    let mut c = RawClient::connect(proxy.port, "root", "");
    c.stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    c.send(b"\x16SELECT LENGTH(?)");
    let (_, ok) = c.read_packet().unwrap();
    assert_eq!(ok[0], 0, "{}", String::from_utf8_lossy(&ok));
    let id = &ok[1..5];
    c.read_packet().unwrap(); // the parameter
    c.read_packet().unwrap(); // the column
    let baseline = proxy.rss();

    // COM_STMT_EXECUTE, one LONG_BLOB parameter sent inline: 150 MiB.
    let mut head = vec![0x17];
    head.extend_from_slice(id);
    head.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 0xFB, 0, 0xFE]);
    let value = 150 * MIB;
    head.extend_from_slice(&(value as u64).to_le_bytes());
    let len = head.len() + value;
    write_streamed(&mut c.stream, len, |i| head.get(i).copied().unwrap_or(b'e'));
    assert_eq!(binary_integer(&mut c), value as u64);

    // COM_STMT_SEND_LONG_DATA of 100 MiB (no reply), then an execute naming the type only.
    let mut head = vec![0x18];
    head.extend_from_slice(id);
    head.extend_from_slice(&[0, 0]);
    let data = 100 * MIB;
    write_streamed(&mut c.stream, head.len() + data, |i| head.get(i).copied().unwrap_or(b'l'));
    let mut exec = vec![0x17];
    exec.extend_from_slice(id);
    exec.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 0xFB, 0]);
    c.send(&exec);
    assert_eq!(binary_integer(&mut c), data as u64);

    let peak = proxy.status_bytes("VmHWM:");
    eprintln!("150 MiB execute and 100 MiB long data: sluice RSS baseline {} MiB, peak {} MiB", baseline / MIB, peak / MIB);
    assert!(peak < baseline + 64 * MIB, "sluice's peak RSS {} MiB, baseline {} MiB", peak / MIB, baseline / MIB);
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
    // Without separate limits these 3000 sockets would count toward max_connections. The
    // handshake limits are the defaults: 1000 in all, 100 per client address.
    let proxy = start(db, "max_connections = 500\n");
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
    // Of the half-open ones, 100 got a greeting; the rest waited 2 s for a slot (the greeted
    // ones hold theirs for client_connect_timeout, 5 s) and were told 1040.
    let firsts = tokio::task::spawn_blocking(move || idle.iter_mut().map(first_packet).collect::<Vec<_>>()).await.unwrap();
    let greeted = firsts.iter().filter(|&&(first, _)| first == 10).count();
    let refused = firsts.iter().filter(|&&(first, code)| first == 0xFF && code == 1040).count();
    assert_eq!((greeted, refused), (100, 2900), "greetings and ER_CON_COUNT_ERROR");
}

/// A burst of logins from one address beyond max_handshakes_per_host (a pool filling up) waits
/// for slots instead of being refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_logins_from_one_client_waits_for_handshake_slots() {
    let db = testkit::shared();
    let proxy = start(db, "max_handshakes_per_host = 2\n");
    let port = proxy.port;
    let logins: Vec<_> = (0..40)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = mysql_async::Conn::new(opts(port, "root", "")).await?;
                mysql_async::prelude::Queryable::query_drop(&mut c, "DO 1").await?;
                c.disconnect().await
            })
        })
        .collect();
    for login in logins {
        login.await.unwrap().expect("every login of the burst succeeds");
    }
}

/// A TLS ClientHello, as a client starting TLS after its SSLRequest sends it.
fn client_hello() -> Vec<u8> {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let mut tls = rustls::ClientConnection::new(std::sync::Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    tls.write_tls(&mut out).unwrap();
    out
}

#[test]
fn memory_returns_after_a_burst_of_half_open_handshakes() {
    let db = testkit::shared();
    let proxy = start_tls(db, "max_handshakes = 20000\nmax_handshakes_per_host = 20000\nclient_connect_timeout_ms = 120000\n", true);
    let mut c = RawClient::connect(proxy.port, "root", "");
    c.send(b"\x03SELECT 1");
    c.read_reply(proto::response::Reply::Query).unwrap();
    let baseline = proxy.rss();
    const N: usize = 10_000;
    // Each stops halfway through a TLS handshake: SSLRequest, ClientHello, then nothing.
    let mut start = Vec::new();
    let hello = proto::handshake::ClientHello {
        capabilities: proto::CapabilityFlags::CLIENT_PROTOCOL_41 | proto::CapabilityFlags::CLIENT_SSL,
        max_packet: 1 << 24,
        collation: 45,
        user: String::new(),
        auth_response: vec![],
        database: None,
        auth_plugin: None,
        attrs: vec![],
        mariadb_caps: 0,
    };
    proto::handshake::write_ssl_request(&mut start, &mut 1, &hello);
    start.extend_from_slice(&client_hello());
    let t = Instant::now();
    let mut idle = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = connect_from("127.0.0.3:0", proxy.port).unwrap();
        assert_eq!(first_packet(&mut s).0, 10, "greeted");
        s.write_all(&start).unwrap();
        idle.push(s);
    }
    // The last ones' ServerHello has come: sluice holds every handshake's state.
    let mut buf = [0u8; 5];
    idle.last_mut().unwrap().read_exact(&mut buf).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let during = proxy.rss();
    let opened = t.elapsed();
    drop(idle);
    let closed = Instant::now();
    let mut series = Vec::new();
    let mut after = proxy.rss();
    while closed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(500));
        after = proxy.rss();
        series.push(format!("{:.1}s {} MiB", closed.elapsed().as_secs_f32(), after / MIB));
        if after < baseline + 32 * MIB {
            break;
        }
    }
    eprintln!(
        "{N} half-open TLS handshakes (opened in {opened:?}): sluice RSS baseline {} MiB, with them {} MiB, after they closed: {}",
        baseline / MIB,
        during / MIB,
        series.join(", ")
    );
    assert!(after < baseline + 32 * MIB, "RSS {} MiB after the burst, baseline {} MiB", after / MIB, baseline / MIB);
    // Still serving.
    c.send(b"\x03SELECT 1");
    c.read_reply(proto::response::Reply::Query).unwrap();
}

#[tokio::test]
async fn max_allowed_packet_defaults_to_the_backends() {
    let opts = testkit::MariaDbOptions { extra_args: vec!["--max-allowed-packet=8M".into()], ..Default::default() };
    let db = testkit::MariaDb::start_with(opts).unwrap();
    let proxy = Proxy::quick(&db);
    let mut c = RawClient::connect(proxy.port, "root", "");
    assert_eq!(proxy.server().data.backend_max_packet.load(std::sync::atomic::Ordering::Relaxed), 8 * MIB, "learned at the first login");
    // Under the limit: served (relayed, being over max_buffered_packet).
    let (byte_at, xs) = big_select(7 * MIB);
    write_streamed(&mut c.stream, 7 * MIB, byte_at);
    assert_eq!(single_value(&c.read_reply(proto::response::Reply::Query).unwrap()), xs.to_string());
    // Over it: sluice answers as the server does, as soon as the packet's header says so.
    c.stream.write_all(&proto::frame::encode_header(9 * MIB, 0)).unwrap();
    let (_, err) = c.read_packet().unwrap();
    assert_eq!((err[0], u16::from_le_bytes([err[1], err[2]])), (0xFF, 1153), "{}", String::from_utf8_lossy(&err));
}

/// One backend and root, with statements over 256 KiB relayed beyond their head.
const RELAYING: &str = r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
admin_listen = ""
http_listen = ""
max_buffered_packet = 262144
[tls]
enabled = false
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {BACKEND_PORT}
[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 0
"#;

#[tokio::test]
async fn rules_see_the_head_of_a_relayed_statement() {
    let db = testkit::shared();
    let text = RELAYING.to_string()
        + r#"[[mysql_query_rules]]
rule_id = 1
active = true
match_pattern = "^SELECT LENGTH\\('b"
error_msg = "no b"
[[mysql_query_rules]]
rule_id = 2
active = true
match_pattern = "^SELECT LENGTH\\('c"
replace_pattern = "SELECT 1+LENGTH('d"
"#;
    let proxy = Proxy::start(toml_config(&text, db));
    let mut c = RawClient::connect(proxy.port, "root", "");
    let statement = |letter: u8, len: usize| {
        let mut p = b"\x03SELECT LENGTH('".to_vec();
        p.resize(len - 2, letter);
        p.extend_from_slice(b"')");
        p
    };
    // A block rule matches on the head; the whole statement is read and dropped, in step.
    c.send(&statement(b'b', 20 * MIB));
    let (seq, err) = c.read_packet().unwrap();
    assert_eq!((err[0], &err[9..]), (0xFF, &b"no b"[..]), "{}", String::from_utf8_lossy(&err));
    assert_eq!(seq, 2, "after the last of its two chunks");
    // A rewrite cannot apply to what sluice relays unread: refused, naming the rule.
    c.send(&statement(b'c', MIB));
    let (_, err) = c.read_packet().unwrap();
    assert_eq!((err[0], u16::from_le_bytes([err[1], err[2]])), (0xFF, 1235));
    assert!(String::from_utf8_lossy(&err).contains("rule_id 2"), "{}", String::from_utf8_lossy(&err));
    // Under max_buffered_packet it applies (1 + the length).
    c.send(&statement(b'c', 1000));
    assert_eq!(single_value(&c.read_reply(proto::response::Reply::Query).unwrap()), "983");
    // Others are relayed and answered by the server.
    c.send(&statement(b'a', 3 * MIB));
    assert_eq!(single_value(&c.read_reply(proto::response::Reply::Query).unwrap()), (3 * MIB - 18).to_string());
}

/// A statement relayed beyond its head cannot be lexed whole: where its rest could hold a KILL
/// (a compound statement, or anything with multi-statements on), the rest is watched for the
/// words sluice must see, and such a statement is refused before the backend has all of it.
#[tokio::test]
async fn a_kill_in_the_unread_rest_of_a_relayed_statement_never_runs() {
    let db = testkit::shared();
    let proxy = Proxy::start(toml_config(RELAYING, db));
    let filler = "x".repeat(MIB);
    // A plain SELECT with the word in its data, multi-statements off: relayed and run.
    let mut c = RawClient::connect(proxy.port, "root", "");
    let select = format!("\x03SELECT LENGTH('{filler} kill')").into_bytes();
    c.send(&select);
    assert_eq!(single_value(&c.read_reply(proto::response::Reply::Query).unwrap()), (MIB + 5).to_string());
    // A compound statement with a KILL past the head: refused, not run (the server would
    // answer 1094 for the unknown thread), and the session ends after the error.
    let compound = format!("\x03BEGIN NOT ATOMIC DO LENGTH('{filler}'); KILL 999999; END");
    c.send(compound.as_bytes());
    let (_, err) = c.read_packet().unwrap();
    assert_eq!((err[0], u16::from_le_bytes([err[1], err[2]])), (0xFF, 1235), "{}", String::from_utf8_lossy(&err));
    assert!(String::from_utf8_lossy(&err).contains("max_buffered_packet"), "{}", String::from_utf8_lossy(&err));
    assert!(c.read_packet().is_err(), "the session ends");
    // The same without the KILL runs.
    let mut c = RawClient::connect(proxy.port, "root", "");
    let compound = format!("\x03BEGIN NOT ATOMIC DO LENGTH('{filler}'); DO 1; END");
    c.send(compound.as_bytes());
    let (_, ok) = c.read_packet().unwrap();
    assert_eq!(ok[0], 0, "{}", String::from_utf8_lossy(&ok));
}
