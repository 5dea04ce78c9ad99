//! The server-time probe (`[probe]`, docs/probe.md) against a real MariaDB, by both methods
//! (the kernel's socket tracepoints and uprobes on `dispatch_command`): a statement that
//! sleeps 200 ms on the server shows about 200 ms of server time and little proxy time, in the
//! admin table, the JSON and /metrics, also for a server sluice reaches through its Unix
//! socket; an idle backend shows no samples; switched live it joins every statement again;
//! with the probe off nothing is timed. The tests that need the probe attached are skipped,
//! with a message saying why, where the kernel or privileges do not allow it (not root, no
//! BPF program built, a kernel before 6.3 for the socket method); a probe that does not find
//! the test's own server fails the test.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// How sluice reaches the server.
#[derive(Clone, Copy)]
enum Leg {
    Tcp,
    /// The server's Unix socket (`hostname` a path): found by the process listening on it.
    UnixSocket,
}

fn probe_proxy(db: &MariaDb, probe: &str, leg: Leg) -> Proxy {
    let server = match leg {
        Leg::Tcp => "hostname = \"127.0.0.1\"\nport = {BACKEND_PORT}".to_string(),
        Leg::UnixSocket => format!("hostname = \"{}\"\nport = 0", db.socket_path().display()),
    };
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n\
         [probe]\n{probe}\n\
         [[mysql_servers]]\nhostgroup_id = 0\n{server}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n"
    );
    Proxy::start(toml_config(&text, db))
}

/// Whether this process may load BPF programs and attach uprobes.
fn permitted() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: loading BPF programs and attaching uprobes needs root (or CAP_BPF and CAP_PERFMON)".into());
    }
    Ok(())
}

/// The `[probe]` section switched on with `method`.
fn enabled(method: &str) -> String {
    format!("enabled = true\nmethod = \"{method}\"")
}

/// How each method's state line names an attached server.
fn attached_line(method: &str, db: &MariaDb) -> String {
    match method {
        "socket" => format!("the sockets of pid {}", db.pid()),
        _ => format!("in pid {}", db.pid()),
    }
}

/// Waits for the probe to attach to `db`'s process by `method`; `Err` with the probe's own
/// reason (its log line) when it cannot here; a failure when it does not find that process.
fn attached(proxy: &Proxy, db: &MariaDb, method: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = proxy.server().data.probe.status();
        if status.pids.contains(&db.pid()) {
            let line = attached_line(method, db);
            assert!(status.state.contains(&line), "attached by the {method} method ({line}): {}", status.state);
            return Ok(());
        }
        if status.state.contains("not running") || status.state.contains(&format!("pid {}:", db.pid())) {
            return Err(status.state);
        }
        if Instant::now() > deadline {
            // The test's own server runs on this machine: not finding it is a fault, not a limit.
            assert!(!status.state.contains("no process on this machine listens"), "the probe did not find the server: {}", status.state);
            return Err(status.state);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn skip(test: &str, why: &str) {
    println!("SKIPPED {test}: the probe cannot attach here: {why}");
}

/// A MariaDB of its own (no other test's statements share its threads' totals) and a sluice
/// whose probe is attached to it by `method`; `None`, after saying why, where the probe cannot
/// attach here.
fn probed(test: &str, method: &str, leg: Leg) -> Option<(MariaDb, Proxy)> {
    if let Err(why) = permitted() {
        skip(test, &why);
        return None;
    }
    let db = MariaDb::start().expect("MariaDB starts");
    let proxy = probe_proxy(&db, &enabled(method), leg);
    if let Err(why) = attached(&proxy, &db, method) {
        skip(test, &why);
        return None;
    }
    Some((db, proxy))
}

/// The digests once `text`'s has `count` statements (a statement is counted just after its
/// reply reached the client).
fn digests_with(proxy: &Proxy, text: &str, count: u64) -> Vec<sluice::stats::DigestRow> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows = proxy.server().data.stats.digests();
        if rows.iter().any(|d| d.digest_text == text && d.count_star >= count) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn digest<'a>(rows: &'a [sluice::stats::DigestRow], text: &str) -> &'a sluice::stats::DigestRow {
    rows.iter().find(|d| d.digest_text == text).unwrap_or_else(|| panic!("no digest {text}: {rows:?}"))
}

#[tokio::test]
async fn socket_method_a_statement_sleeping_200ms_on_the_server_shows_200ms_of_server_time() {
    sleeping_200ms("socket", Leg::Tcp).await
}

#[tokio::test]
async fn dispatch_method_a_statement_sleeping_200ms_on_the_server_shows_200ms_of_server_time() {
    sleeping_200ms("dispatch", Leg::Tcp).await
}

// A server sluice reaches through its Unix socket is found by the process listening on that
// path; the socket tracepoints follow that process whatever its sockets' family.
#[tokio::test]
async fn socket_method_a_server_reached_through_its_unix_socket_shows_its_server_time() {
    sleeping_200ms("socket", Leg::UnixSocket).await
}

#[tokio::test]
async fn dispatch_method_a_server_reached_through_its_unix_socket_shows_its_server_time() {
    sleeping_200ms("dispatch", Leg::UnixSocket).await
}

async fn sleeping_200ms(method: &str, leg: Leg) {
    let test = match leg {
        Leg::Tcp => format!("{method}_method_a_statement_sleeping_200ms_on_the_server_shows_200ms_of_server_time"),
        Leg::UnixSocket => format!("{method}_method_a_server_reached_through_its_unix_socket_shows_its_server_time"),
    };
    let Some((db, proxy)) = probed(&test, method, leg) else { return };
    let mut c = connect(proxy.port).await;
    for _ in 0..3 {
        c.query_drop("SELECT SLEEP(0.2)").await.unwrap();
    }
    c.query_drop("SELECT 1").await.unwrap();
    // Asked of the server itself (through sluice the processlist is sluice's): it sees a Unix
    // socket's client as `localhost`, a TCP client with its port.
    let hosts = db.sql("SELECT HOST FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = 'root'").unwrap();
    assert!(!hosts.is_empty() && hosts.lines().all(|h| h.contains(':') == matches!(leg, Leg::Tcp)), "sluice's connections: {hosts}");
    digests_with(&proxy, "SELECT SLEEP(?)", 3);
    let rows = digests_with(&proxy, "SELECT ?", 1);
    let sleep = digest(&rows, "SELECT SLEEP(?)");
    assert_eq!((sleep.count_star, sleep.server_count, sleep.proxy_count), (3, 3, 3), "{sleep:?}");
    let server_ms = sleep.server_time_us as f64 / 3_000.0;
    let total_ms = sleep.sum_time_us as f64 / 3_000.0;
    let proxy_ms = sleep.proxy_time_us as f64 / 3_000.0;
    // 200 ms asleep, plus parsing and sending; a loaded machine may wake the thread late.
    assert!((199.0..400.0).contains(&server_ms), "server time per statement: {server_ms} ms ({sleep:?})");
    assert!(server_ms <= total_ms, "the server's part is within the whole: {server_ms} of {total_ms} ms");
    assert!(proxy_ms < 20.0, "sluice's own time per statement: {proxy_ms} ms");
    // Within the histogram's precision (~6%).
    for p in [sleep.server_p50_us, sleep.server_p99_us] {
        assert!((185_000..=400_000).contains(&p), "server percentile {p} µs");
    }
    let quick = digest(&rows, "SELECT ?");
    assert_eq!(quick.server_count, 1);
    assert!(quick.server_time_us < 20_000, "SELECT 1 on the server: {} µs", quick.server_time_us);

    // The admin table has the columns.
    let admin = mariadb_cli(
        proxy.admin_port(),
        "admin",
        Some("admin"),
        "SELECT server_count, server_time_us, server_p50_us, server_p99_us, proxy_count, proxy_time_us \
         FROM stats_mysql_query_digest WHERE digest_text = 'SELECT SLEEP(?)'",
    )
    .unwrap();
    let cells: Vec<u64> = admin.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(cells.len(), 6, "{admin}");
    assert_eq!(cells[0], 3);
    assert!(cells[1] >= 597_000, "{admin}");
    assert_eq!(cells[4], 3);

    // The JSON and /metrics.
    let json = http_get(proxy.http_port(), "/api/stats/digests", None).json();
    let row = json.as_array().unwrap().iter().find(|d| d["digest_text"] == "SELECT SLEEP(?)").unwrap().clone();
    assert_eq!(row["server_count"], 3);
    assert!(row["server_time_us"].as_u64().unwrap() >= 597_000, "{row}");
    let probe = http_get(proxy.http_port(), "/api/stats/probe", None).json();
    assert_eq!((probe["enabled"].as_bool(), probe["attached"].as_bool()), (Some(true), Some(true)), "{probe}");
    assert!(probe["server_count"].as_u64().unwrap() >= 4, "{probe}");
    assert!(probe["threads"].as_array().is_some_and(|t| !t.is_empty()), "the BPF map's per-thread totals: {probe}");
    let metrics = http_get(proxy.http_port(), "/metrics", None).body;
    testkit::prometheus::validate(&metrics).unwrap();
    for family in ["sluice_probe_attached 1", "sluice_probe_server_seconds_count", "sluice_digest_server_seconds_total{"] {
        assert!(metrics.contains(family), "{family} in /metrics:\n{metrics}");
    }
    let line = metrics
        .lines()
        .find(|l| l.starts_with("sluice_digest_server_seconds_total{") && l.contains(&sql_digest_id(&rows, "SELECT SLEEP(?)")))
        .unwrap();
    let seconds: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.59..1.2).contains(&seconds), "{line}");
}

fn sql_digest_id(rows: &[sluice::stats::DigestRow], text: &str) -> String {
    format!("0x{:016X}", digest(rows, text).digest)
}

#[tokio::test]
async fn socket_method_an_idle_backend_shows_no_samples() {
    idle_backend("socket").await
}

#[tokio::test]
async fn dispatch_method_an_idle_backend_shows_no_samples() {
    idle_backend("dispatch").await
}

async fn idle_backend(method: &str) {
    let test = format!("{method}_method_an_idle_backend_shows_no_samples");
    // Its backend is its own: nothing but this test reaches it.
    let Some((_db, proxy)) = probed(&test, method, Leg::Tcp) else { return };
    std::thread::sleep(Duration::from_millis(1_500));
    let probe = &proxy.server().data.probe;
    assert!(probe.threads().is_empty(), "no command ran on the server: {:?}", probe.threads());
    assert_eq!(proxy.server().data.stats.split_totals(), Default::default());
    assert!(proxy.server().data.stats.digests().is_empty());

    // A client: its backend connection's thread shows its statements (the driver's own first,
    // and the lookup of which thread it is).
    let mut c = connect(proxy.port).await;
    c.query_drop("SELECT 1").await.unwrap();
    digests_with(&proxy, "SELECT ?", 1);
    let threads = probe.threads();
    assert_eq!(threads.len(), 1, "{threads:?}");
    let timed = proxy.server().data.stats.split_totals().server.count;
    assert!(timed >= 1 && threads[0].calls > timed, "{threads:?}, {timed} timed");

    // The thread's totals are its commands' time, not its idle time: a client gone, its thread
    // waits in the server's cache, and a new connection's greeting on it (a send with no
    // command before it) starts nothing.
    drop(c);
    std::thread::sleep(Duration::from_millis(1_000));
    let mut c = connect(proxy.port).await;
    c.query_drop("SELECT 1").await.unwrap();
    let busy_us: u64 = probe.threads().iter().map(|t| t.busy_us).sum();
    assert!(busy_us < 500_000, "the threads' time in commands: {busy_us} µs ({:?})", probe.threads());
}

/// Sets `[probe] <field>` to `value` on the admin port and waits until the probe's status
/// says it has followed.
fn set_probe(proxy: &Proxy, field: &str, value: &str, followed: impl Fn(&sluice::probe::Status) -> bool) {
    let sql = format!(
        "UPDATE global_variables SET variable_value = '{value}' WHERE variable_name = 'sluice-probe_{field}'; LOAD MYSQL VARIABLES TO RUNTIME"
    );
    mariadb_cli(proxy.admin_port(), "admin", Some("admin"), &sql).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !followed(&proxy.server().data.probe.status()) {
        assert!(Instant::now() < deadline, "the probe did not follow {field} = {value}: {:?}", proxy.server().data.probe.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Switches the probe on or off and waits until it is attached, or detached.
fn switch(proxy: &Proxy, on: bool) {
    set_probe(proxy, "enabled", &on.to_string(), |s| s.attached == on);
}

/// Sets the probe's method and waits until it is attached by it.
fn switch_method(proxy: &Proxy, db: &MariaDb, method: &str) {
    let line = attached_line(method, db);
    set_probe(proxy, "method", method, |s| s.state.contains(&line));
}

#[tokio::test]
async fn socket_method_switched_off_and_on_under_load_it_joins_every_statement_again() {
    switched_under_load("socket", false).await
}

#[tokio::test]
async fn dispatch_method_switched_off_and_on_under_load_it_joins_every_statement_again() {
    switched_under_load("dispatch", false).await
}

#[tokio::test]
async fn switched_between_methods_under_load_it_joins_every_statement_again() {
    switched_under_load("socket", true).await
}

/// Under load, switches the probe off and on (or, `methods`, from one method to the other and
/// back) four times; then every statement is joined again.
async fn switched_under_load(method: &str, methods: bool) {
    let test = if methods {
        "switched_between_methods_under_load_it_joins_every_statement_again".to_string()
    } else {
        format!("{method}_method_switched_off_and_on_under_load_it_joins_every_statement_again")
    };
    let Some((db, proxy)) = probed(&test, method, Leg::Tcp) else { return };
    // Clients busy in their statements while the programs come and go: some of the server's
    // calls lose their end (detached mid-call), which must not stick to their threads.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (port, stop) = (proxy.port, stop.clone());
        load.push(tokio::spawn(async move {
            let mut c = connect(port).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.query_drop("SELECT SLEEP(0.001)").await.unwrap();
            }
            c
        }));
    }
    // Home is the probe on by `method`; away is the other method (`methods`), or off.
    let switch_to = |home: bool| match (methods, home) {
        (true, false) => switch_method(&proxy, &db, "dispatch"),
        (true, true) => switch_method(&proxy, &db, method),
        (false, home) => switch(&proxy, home),
    };
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(150));
        switch_to(false);
        std::thread::sleep(Duration::from_millis(150));
        switch_to(true);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut clients = Vec::new();
    for l in load {
        clients.push(l.await.unwrap());
    }
    // A session records a statement just after its reply went out: the load's last statements
    // may still be counting when their clients have them. Settled first.
    let mut before = proxy.server().data.stats.split_totals();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = proxy.server().data.stats.split_totals();
        if (now.proxy_count, now.server.count) == (before.proxy_count, before.server.count) {
            break;
        }
        before = now;
    }
    // Then every statement is joined, by each method when they were switched: a slot the
    // other method left must not hold a thread's commands back.
    let finals: &[&str] = if methods { &["dispatch", "socket"] } else { &[method] };
    for (i, &last) in finals.iter().enumerate() {
        if methods {
            switch_method(&proxy, &db, last);
        }
        let before = proxy.server().data.stats.split_totals();
        let misses = proxy.server().data.probe.misses();
        for c in &mut clients {
            for _ in 0..10 {
                c.query_drop("SELECT 2").await.unwrap();
            }
        }
        digests_with(&proxy, "SELECT ?", 40 * (i as u64 + 1));
        let after = proxy.server().data.stats.split_totals();
        let joined = (after.proxy_count - before.proxy_count, after.server.count - before.server.count);
        assert_eq!(joined, (40, 40), "every statement joined by the {last} method");
        assert_eq!(proxy.server().data.probe.misses(), misses, "{last}");
    }
}

#[tokio::test]
async fn with_the_probe_off_nothing_is_timed() {
    let db = testkit::shared();
    let proxy = probe_proxy(db, "enabled = false", Leg::Tcp);
    let mut c = connect(proxy.port).await;
    c.query_drop("SELECT SLEEP(0.01)").await.unwrap();
    let rows = digests_with(&proxy, "SELECT SLEEP(?)", 1);
    let d = digest(&rows, "SELECT SLEEP(?)");
    assert_eq!((d.count_star, d.server_count, d.proxy_count, d.server_time_us, d.proxy_time_us), (1, 0, 0, 0, 0));
    let probe = proxy.server().data.probe.status();
    assert!(!probe.enabled && !probe.attached, "{probe:?}");
    assert!(!http_get(proxy.http_port(), "/metrics", None).body.contains("sluice_digest_server_seconds_total{"));
}

#[tokio::test]
async fn a_backend_not_on_this_machine_is_named_in_one_line() {
    // TEST-NET-1: no process here listens for it.
    let text = "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n[probe]\nenabled = true\n\
                [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"192.0.2.1\"\nport = 3306\n\
                [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n";
    let fc = sluice::config::FileConfig::parse(text).unwrap();
    let proxy = Proxy::start(fc.validate(None, Some(text)).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let state = loop {
        let state = proxy.server().data.probe.status().state;
        if !state.is_empty() || Instant::now() > deadline {
            break state;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("the probe's log line: {state}");
    assert!(state.starts_with("probe: not"), "{state}");
    // Where BPF works, the reason is the address; elsewhere, why it does not.
    if state.starts_with("probe: not attached") {
        assert!(state.contains("no process on this machine listens for 192.0.2.1:3306"), "{state}");
    }
}
