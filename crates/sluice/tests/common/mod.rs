//! Shared test harness: sluice in-process in front of a private MariaDB (from testkit), option
//! builders for mysql_async, and a raw protocol client for what drivers cannot send.
#![allow(dead_code)]

use sluice::config::{self, Config};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use testkit::MariaDb;

/// sluice running in this process; shut down on drop.
pub struct Proxy {
    server: Option<sluice::Server>,
    pub port: u16,
}

impl Proxy {
    /// Starts sluice in this process, on the runtime `SLUICE_TEST_RUNTIME` names if set.
    pub fn start(mut config: Config) -> Proxy {
        // SLUICE_TEST_RUNTIME=per-core runs every in-process sluice on per-core workers, and so
        // over the io_uring data path where the kernel allows it (docs/architecture.md).
        match std::env::var("SLUICE_TEST_RUNTIME").as_deref() {
            Ok("per-core") => config.proxy.runtime = config::RuntimeKind::PerCore,
            Ok("per-core-epoll") => {
                config.proxy.runtime = config::RuntimeKind::PerCore;
                config.proxy.io = config::IoEngine::Epoll;
            }
            Ok("steal") | Err(_) => {}
            Ok(other) => panic!("SLUICE_TEST_RUNTIME={other}: per-core, per-core-epoll or steal"),
        }
        Proxy::start_exact(config)
    }

    /// Starts sluice on the runtime and I/O engine its config names, whatever
    /// `SLUICE_TEST_RUNTIME` says: for a test of one runtime's own behaviour.
    pub fn start_exact(mut config: Config) -> Proxy {
        init_logs();
        // Tests run side by side: the admin and HTTP ports take a free port unless a test chose one.
        for addr in [&mut config.proxy.admin_listen, &mut config.proxy.http_listen] {
            if addr.ends_with(":6032") || addr.ends_with(":6070") {
                *addr = "127.0.0.1:0".into();
            }
        }
        let server = sluice::Server::start(config).expect("sluice starts");
        let port = server.local_addr().port();
        Proxy { server: Some(server), port }
    }

    /// Quick-start config: root with an empty password, in front of `db`.
    pub fn quick(db: &MariaDb) -> Proxy {
        Proxy::start(quick_config(db))
    }

    /// The admin port (the test's config must not turn it off).
    pub fn admin_port(&self) -> u16 {
        self.server().control.listeners.addrs(sluice::listener::Kind::Admin)[0].port()
    }

    /// The HTTP port.
    pub fn http_port(&self) -> u16 {
        self.server().control.listeners.addrs(sluice::listener::Kind::Http)[0].port()
    }

    pub fn server(&self) -> &sluice::Server {
        self.server.as_ref().expect("running")
    }

    /// A global counter by its stats_mysql_global name (0 when unknown).
    #[allow(dead_code)]
    pub fn counter(&self, name: &str) -> u64 {
        self.server().data.stats.counters().into_iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

pub fn quick_config(db: &MariaDb) -> Config {
    let mut c = config::quick_start(vec!["127.0.0.1:0".into()], &db.addr(), "root", "").expect("valid quick-start config");
    c.workers = 2;
    c
}

/// sluice over a replication topology: the primary in writer hostgroup 10, the replicas in
/// reader hostgroup 20 (replica `i` with the `[[mysql_servers]]` fields `reader_fields(i)`),
/// root's default hostgroup the writer's, and the pair's `[[mysql_replication_hostgroups]]`
/// row with `pair_fields`. `sections` is TOML placed right after `[proxy]`'s keys: more of
/// them, then other sections (`[pool]`, `[monitor]`, rules…).
pub fn replication_config(t: &testkit::Replication, pair_fields: &str, sections: &str, reader_fields: impl Fn(usize) -> String) -> Config {
    let mut text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{sections}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 10\n\
         [[mysql_replication_hostgroups]]\nwriter_hostgroup = 10\nreader_hostgroup = 20\n{pair_fields}\n\
         [[mysql_servers]]\nhostgroup_id = 10\nhostname = \"127.0.0.1\"\nport = {}\n",
        t.primary.port()
    );
    for (i, r) in t.replicas.iter().enumerate() {
        text.push_str(&format!(
            "[[mysql_servers]]\nhostgroup_id = 20\nhostname = \"127.0.0.1\"\nport = {}\n{}\n",
            r.port(),
            reader_fields(i)
        ));
    }
    let fc = config::FileConfig::parse(&text).expect("test TOML parses");
    fc.validate(None, Some(&text)).expect("test TOML is valid")
}

/// A config from TOML text, with `{BACKEND_PORT}` replaced.
pub fn toml_config(text: &str, db: &MariaDb) -> Config {
    let text = text.replace("{BACKEND_PORT}", &db.port().to_string());
    let fc = config::FileConfig::parse(&text).expect("test TOML parses");
    fc.validate(None, Some(&text)).expect("test TOML is valid")
}

pub fn opts(port: u16, user: &str, password: &str) -> mysql_async::OptsBuilder {
    mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(user))
        .pass(Some(password))
        .db_name(Some("test"))
        .prefer_socket(false)
}

pub async fn connect(port: u16) -> mysql_async::Conn {
    mysql_async::Conn::new(opts(port, "root", "")).await.expect("connects")
}

/// A unique name for tables and users, so tests can share one backend.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Speaks the protocol by hand (mysql_native_password, no TLS) to send what no driver sends.
pub struct RawClient {
    pub stream: TcpStream,
    pub connection_id: u32,
}

impl RawClient {
    pub fn connect(port: u16, user: &str, password: &str) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut c = RawClient { stream, connection_id: 0 };
        let (_, greeting) = c.read_packet().expect("greeting");
        let g = proto::handshake::parse_greeting(&greeting).expect("valid greeting");
        c.connection_id = g.connection_id;
        let caps = proto::CapabilityFlags::CLIENT_PROTOCOL_41
            | proto::CapabilityFlags::CLIENT_SECURE_CONNECTION
            | proto::CapabilityFlags::CLIENT_PLUGIN_AUTH
            | proto::CapabilityFlags::CLIENT_MULTI_RESULTS
            | proto::CapabilityFlags::CLIENT_DEPRECATE_EOF;
        let reply = if password.is_empty() {
            vec![]
        } else {
            proto::auth::native_scramble(&proto::auth::native_stage1(password.as_bytes()), &g.nonce).to_vec()
        };
        let hello = proto::handshake::ClientHello {
            capabilities: caps,
            max_packet: 1 << 30,
            collation: 45,
            user: user.into(),
            auth_response: reply,
            database: None,
            auth_plugin: Some("mysql_native_password".into()),
            attrs: vec![],
            mariadb_caps: 0,
        };
        let mut out = Vec::new();
        proto::handshake::write_client_hello(&mut out, &mut 1, &hello);
        c.stream.write_all(&out).unwrap();
        let (_, ok) = c.read_packet().expect("login reply");
        assert_eq!(ok[0], 0, "login OK, got {ok:?}");
        c
    }

    pub fn send(&mut self, payload: &[u8]) {
        let mut out = Vec::new();
        proto::frame::write_packet(&mut out, &mut 0, payload);
        self.stream.write_all(&out).unwrap();
    }

    /// One packet: (sequence id, payload). Joins split packets.
    pub fn read_packet(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        let mut payload = Vec::new();
        loop {
            let mut h = [0u8; 4];
            self.stream.read_exact(&mut h)?;
            let (len, seq) = proto::frame::header(&h).unwrap();
            let start = payload.len();
            payload.resize(start + len, 0);
            self.stream.read_exact(&mut payload[start..])?;
            if len < proto::frame::MAX_CHUNK {
                return Ok((seq, payload));
            }
        }
    }

    /// Reads a whole reply with the proxy's own scanner; returns its bytes.
    pub fn read_reply(&mut self, reply: proto::response::Reply) -> std::io::Result<Vec<u8>> {
        let mut scanner = proto::response::Scanner::new(reply, true);
        let mut all = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = self.stream.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
            }
            all.extend_from_slice(&buf[..n]);
            match scanner.feed(&buf[..n]) {
                Ok((_, proto::response::Event::Done { .. })) => return Ok(all),
                Ok(_) => {}
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            }
        }
    }
}

/// The error code of a mysql_async error from the server, if it is one.
pub fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// sluice's logs in test output (SLUICE_LOG=debug to see more).
/// sluice's log lines (info and up) from every test of this binary, for tests that assert what
/// sluice logs. The first call installs the capture; call it before any `Proxy::start`, whose
/// own `init_logs` then finds it in place.
pub fn captured_logs() -> String {
    static LOGS: std::sync::OnceLock<std::sync::Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    let buf = LOGS.get_or_init(|| {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ =
            tracing_subscriber::fmt().with_env_filter("sluice=info").with_ansi(false).with_writer(move || LogSink(sink.clone())).try_init();
        buf
    });
    String::from_utf8_lossy(&buf.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

struct LogSink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for LogSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// Runs `sql` with the `mariadb` CLI on 127.0.0.1:`port` as `user`/`password` (`None`: no
/// password); its tab-separated output, or its error text.
pub fn mariadb_cli(port: u16, user: &str, password: Option<&str>, sql: &str) -> Result<String, String> {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.args(["--no-defaults", "--protocol=TCP", "-h127.0.0.1", "-N", "-B"]).arg(format!("-P{port}")).arg(format!("-u{user}"));
    if let Some(p) = password {
        cmd.arg(format!("-p{p}"));
    }
    let out = cmd.args(["-e", sql]).output().expect("the mariadb CLI runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// One HTTP/1.1 response.
pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// GET `path` from 127.0.0.1:`port` (`Connection: close`, chunked bodies decoded).
/// GET `path` from 127.0.0.1:`port`, with an Authorization header when given.
pub fn http_get(port: u16, path: &str, authorization: Option<&str>) -> HttpResponse {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects to the HTTP port");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reads the response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no header end: {raw:?}"));
    let head = String::from_utf8(raw[..split].to_vec()).expect("ASCII headers");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string())).collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    HttpResponse { status, headers, body: String::from_utf8(body).expect("UTF-8 body") }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size_text = std::str::from_utf8(&b[..eol]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).expect("hex chunk size");
        b = &b[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Waits (up to 10 s) until a sluice started as a child process listens on 127.0.0.1:`port`.
pub fn wait_until_listening(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "sluice did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Runs a tool to its end: its output (stdout, then stderr), after asserting it succeeded.
pub fn run_tool(mut cmd: std::process::Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run ({e}); .ci/run installs the tools"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed through sluice:\n{text}");
    text
}

/// A figure of sysbench's summary (`transactions:`, `ignored errors:`, `queries:`…).
pub fn sysbench_figure(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(name)?.trim_start().strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{name}` in sysbench output:\n{text}"))
}

/// sysbench's summary: transactions ran, none with an ignored error or a reconnect.
pub fn assert_sysbench_clean(text: &str) {
    assert_eq!(sysbench_figure(text, "ignored errors"), 0.0, "{text}");
    assert_eq!(sysbench_figure(text, "reconnects"), 0.0, "{text}");
    assert!(sysbench_figure(text, "transactions") > 0.0, "{text}");
}

/// `assert_sysbench_clean` for a workload of concurrent writing transactions (oltp_read_write):
/// sysbench's "ignored errors" are deadlocks and lock wait timeouts (1213, 1205, 1020), which
/// InnoDB gives such a workload now and then on its own (a run direct to the server has them
/// too). A lock wait timeout takes 50 s, longer than these runs: what is counted is deadlocks,
/// and they must stay as rare as the server makes them (under 1 in 200 transactions), while
/// any other error fails the run itself.
pub fn assert_sysbench_clean_writes(text: &str) {
    let transactions = sysbench_figure(text, "transactions");
    assert!(transactions > 0.0, "{text}");
    assert!(sysbench_figure(text, "ignored errors") <= transactions / 200.0, "{text}");
    assert_eq!(sysbench_figure(text, "reconnects"), 0.0, "{text}");
}

/// A client suite (tests/python, tests/cli) pointed at sluice on `port` and at the shared
/// MariaDB directly, as root, through the environment the suites read.
pub fn client_suite_command(port: u16, program: &str) -> std::process::Command {
    let db = testkit::shared();
    let mut c = std::process::Command::new(program);
    c.current_dir(repo())
        .env("SLUICE_HOST", "127.0.0.1")
        .env("SLUICE_PORT", port.to_string())
        .env("SLUICE_USER", "root")
        .env("SLUICE_PASSWORD", "")
        .env("SLUICE_DB", "test")
        .env("DIRECT_HOST", "127.0.0.1")
        .env("DIRECT_PORT", db.port().to_string())
        .env("DIRECT_USER", "root")
        .env("DIRECT_PASSWORD", "");
    c
}

/// The `sluice` binary as its own process (its own allocator), so that its resident memory is
/// read from /proc without the test's allocations in it. Killed on drop.
pub struct ProxyProcess {
    pub child: std::process::Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl ProxyProcess {
    /// Starts it with the configuration `config(port)` makes for a free listen port (another
    /// port is tried when that one was taken meanwhile).
    pub fn spawn(config: impl Fn(u16) -> String) -> ProxyProcess {
        use std::time::Instant;
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = testkit::free_port();
            let path = dir.path().join("sluice.toml");
            std::fs::write(&path, config(port)).unwrap();
            // SLUICE_TEST_BIN runs another build (an allocator or version to compare).
            let bin = std::env::var_os("SLUICE_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_sluice").into());
            let child = std::process::Command::new(bin)
                .arg("--config")
                .arg(&path)
                .env("SLUICE_LOG", std::env::var("SLUICE_LOG").unwrap_or_else(|_| "warn".into()))
                .stdin(std::process::Stdio::null())
                .spawn()
                .expect("sluice starts");
            let mut p = ProxyProcess { child, port, _dir: dir };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = p.child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = p.child.kill();
        }
        panic!("sluice did not start");
    }

    /// A field of /proc/PID/status, in bytes (VmRSS: resident now; VmHWM: the peak).
    pub fn status_bytes(&self, field: &str) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    }

    pub fn rss(&self) -> usize {
        self.status_bytes("VmRSS:")
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sharding tests' two servers and user, as TOML: hostgroup 1 on `a` (the root user's
/// default: unsharded tables live there), hostgroup 2 on `b`. Follows a `[proxy]` section.
pub fn two_hostgroups(a: &MariaDb, b: &MariaDb) -> String {
    format!(
        "[[mysql_servers]]\nhostgroup_id = 1\nhostname = \"127.0.0.1\"\nport = {}\n\
         [[mysql_servers]]\nhostgroup_id = 2\nhostname = \"127.0.0.1\"\nport = {}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 1\n",
        a.port(),
        b.port()
    )
}

/// The logical database `shop`'s four nodes on `two_hostgroups`: ds_0 and ds_1 on `a`, ds_2 and
/// ds_3 on `b` (a `[[shard_databases]]` line).
pub const SHOP_NODES: &str = "nodes = [{ hostgroup = 1, database = \"ds_0\" }, { hostgroup = 1, database = \"ds_1\" }, \
                              { hostgroup = 2, database = \"ds_2\" }, { hostgroup = 2, database = \"ds_3\" }]\n";

/// Creates `shop` (pooled connections follow the session's schema, so it must exist on both)
/// and the node databases of `SHOP_NODES`, where missing.
pub fn create_shop_databases(a: &MariaDb, b: &MariaDb) {
    for (db, names) in [(a, ["ds_0", "ds_1"]), (b, ["ds_2", "ds_3"])] {
        db.sql(&format!(
            "CREATE DATABASE IF NOT EXISTS shop; CREATE DATABASE IF NOT EXISTS {}; CREATE DATABASE IF NOT EXISTS {};",
            names[0], names[1]
        ))
        .expect("the shard databases are created");
    }
}

/// A test's configuration text, parsed and validated.
pub fn valid_config(text: &str) -> Config {
    config::FileConfig::parse(text).expect("test TOML parses").validate(None, Some(text)).expect("test TOML is valid")
}

/// A client of sluice on `port` in the logical database `shop` (the sharding tests').
pub async fn connect_shop(port: u16) -> mysql_async::Conn {
    mysql_async::Conn::new(opts(port, "root", "").db_name(Some("shop"))).await.expect("connects")
}

/// What the sharding oracles compare a result by: each column's metadata (`column_metadata`),
/// and the rows.
pub type Outcome = (Vec<String>, Vec<Vec<mysql_async::Value>>);

/// `sql`'s result as an `Outcome`.
pub async fn result_of(c: &mut mysql_async::Conn, sql: &str) -> Result<Outcome, mysql_async::Error> {
    use mysql_async::prelude::Queryable;
    let mut r = c.query_iter(sql).await?;
    let columns = r.columns().map(|cs| cs.iter().map(column_metadata).collect()).unwrap_or_default();
    let rows: Vec<mysql_async::Row> = r.collect().await?;
    Ok((columns, rows.into_iter().map(mysql_async::Row::unwrap).collect()))
}

/// A column's metadata as the sharding oracles compare it: everything but the schema (each shard
/// reports its own database).
pub fn column_metadata(c: &mysql_async::Column) -> String {
    format!(
        "{} {} {} {} {} {:?} {:?} {} {} {}",
        c.schema_str(),
        c.name_str(),
        c.org_name_str(),
        c.table_str(),
        c.org_table_str(),
        c.column_type(),
        c.flags(),
        c.decimals(),
        c.character_set(),
        c.column_length()
    )
}

/// As on the server, a KILL's target connection is already closed when the KILL is answered:
/// `rounds` times, a raw client KILLs another and finds it closed at once.
pub fn assert_kill_closes_its_target_first(port: u16, rounds: usize) {
    for _ in 0..rounds {
        let mut target = RawClient::connect(port, "root", "");
        let mut killer = RawClient::connect(port, "root", "");
        let mut kill = vec![proto::command::COM_QUERY];
        kill.extend_from_slice(format!("KILL {}", target.connection_id).as_bytes());
        killer.send(&kill);
        let (_, ok) = killer.read_packet().unwrap();
        assert_eq!(ok[0], 0, "KILL answered OK");
        target.stream.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        match std::io::Read::read(&mut target.stream, &mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the killed connection must be closed before the OK: {other:?}"),
        }
    }
}

/// `clients` sessions each leave a variable and their connection idle in the pool; the server
/// restarts under them; each session's next statement runs on a fresh connection with its
/// variable replayed.
pub async fn assert_a_restart_under_idle_pooled_connections_is_noticed(db: &mut MariaDb, port: u16, clients: usize) {
    use mysql_async::prelude::Queryable;
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let mut c = connect(port).await;
        c.query_drop("SET @mine = CONNECTION_ID()").await.unwrap();
        // Answered only once sluice has read the variable back after the SET.
        c.query_drop("SELECT 1").await.unwrap();
        sessions.push(c);
    }
    // Every client's statements are done: their connections sit idle in the pool.
    db.restart().unwrap();
    for c in sessions.iter_mut() {
        let (one, mine, id): (i64, Option<u64>, u64) = c.query_first("SELECT 1, @mine, CONNECTION_ID()").await.unwrap().unwrap();
        assert_eq!(one, 1);
        assert_eq!(mine, Some(id), "the session's own variable was replayed on a fresh connection");
    }
}
