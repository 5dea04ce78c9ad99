//! The HTTP side and the query log end to end: a real sluice in front of a real MariaDB, driven
//! through the client port, read back through `/metrics`, `/healthz`, `/readyz`, the JSON API,
//! the dashboard in headless Chromium, the admin port and the query-log file.
//!
//! The dashboard test needs Chromium (`scripts/install-deps`); without one it fails, unless
//! `SLUICE_SKIP_BROWSER=1` (then it skips).

mod common;

use common::*;
use mysql_async::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use testkit::{chromium, prometheus, MariaDb};

/// How long anything that happens in the background (rate samples, the log writer) may take.
const PATIENCE: Duration = Duration::from_secs(15);

fn get(port: u16, path: &str) -> HttpResponse {
    http_get(port, path, None)
}

/// Runs `sql` on the admin port with the mariadb CLI as admin/admin; its tab-separated output.
fn admin(port: u16, sql: &str) -> String {
    mariadb_cli(port, "admin", Some("admin"), sql).unwrap_or_else(|e| panic!("admin `{sql}`: {e}"))
}

/// Runs each statement through sluice.
async fn run(c: &mut mysql_async::Conn, statements: &[String]) {
    for s in statements {
        c.query_drop(s).await.unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}

/// Statements of one heavy digest, `SELECT ?, SLEEP(?)` (heavy, so it sorts first by total time).
fn sleepers(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("SELECT {i}, SLEEP(0.02)")).collect()
}
const SLEEPER_DIGEST: &str = "SELECT ?, SLEEP(?)";

/// The samples named `name` (with its suffix: `_total`, `_count`…) in any family.
fn samples<'a>(families: &'a [prometheus::Family], name: &str) -> Vec<&'a prometheus::Sample> {
    families.iter().flat_map(|f| &f.samples).filter(|s| s.name == name).collect()
}

fn one_value(families: &[prometheus::Family], name: &str, text: &str) -> f64 {
    match samples(families, name).as_slice() {
        [s] => s.value,
        other => panic!("{name}: expected one sample, got {other:?}\n{text}"),
    }
}

#[tokio::test]
async fn metrics_are_valid_prometheus_with_the_traffic() {
    let db = testkit::shared();
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    let sent: Vec<String> = (0..12).map(|i| format!("SELECT {i} + 1")).collect();
    run(&mut c, &sent).await;

    let r = get(proxy.http_port(), "/metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    prometheus::validate(&r.body).unwrap_or_else(|e| panic!("invalid exposition: {e}\n{}", r.body));
    let families = prometheus::parse(&r.body).unwrap();

    let questions = one_value(&families, "sluice_questions_total", &r.body);
    assert!(questions >= sent.len() as f64, "Questions {questions} < {} statements sent", sent.len());
    let selects: Vec<_> = samples(&families, "sluice_commands_total")
        .into_iter()
        .filter(|s| s.labels.get("command").map(String::as_str) == Some("SELECT"))
        .collect();
    assert!(matches!(selects.as_slice(), [s] if s.value >= sent.len() as f64), "SELECT count: {selects:?}\n{}", r.body);

    let server = format!("127.0.0.1:{}", db.port());
    let pool: Vec<_> = samples(&families, "sluice_pool_queries_total")
        .into_iter()
        .filter(|s| s.labels.get("server") == Some(&server) && s.labels.get("hostgroup").map(String::as_str) == Some("0"))
        .collect();
    assert!(matches!(pool.as_slice(), [s] if s.value >= sent.len() as f64), "pool queries for {server}: {pool:?}\n{}", r.body);

    let duration = families.iter().find(|f| f.name == "sluice_query_duration_seconds").expect("the latency summary");
    assert_eq!(duration.kind, "summary");
    let mut quantiles: Vec<(f64, f64)> =
        duration.samples.iter().filter_map(|s| Some((s.labels.get("quantile")?.parse::<f64>().ok()?, s.value))).collect();
    quantiles.sort_by(|a, b| a.0.total_cmp(&b.0));
    let qs: Vec<f64> = quantiles.iter().map(|q| q.0).collect();
    assert_eq!(qs, [0.5, 0.95, 0.99], "{}", r.body);
    assert!(quantiles.windows(2).all(|w| w[0].1 <= w[1].1) && quantiles[0].1 > 0.0, "quantiles {quantiles:?}");
    let count = one_value(&families, "sluice_query_duration_seconds_count", &r.body);
    assert!(count >= sent.len() as f64, "summary count {count}");
    assert!(one_value(&families, "sluice_query_duration_seconds_sum", &r.body) > 0.0);
}

#[tokio::test]
async fn healthz_and_readyz_follow_the_servers() {
    let db = testkit::shared();
    // Hostgroup 7, so that the 503 has something specific to name.
    let text = r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[[mysql_servers]]
hostgroup_id = 7
hostname = "127.0.0.1"
port = {BACKEND_PORT}
[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 7
"#;
    let proxy = Proxy::start(toml_config(text, db));
    let (http, a) = (proxy.http_port(), proxy.admin_port());

    let h = get(http, "/healthz");
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    let r = get(http, "/readyz");
    assert_eq!(r.status, 200, "{}", r.body);

    admin(a, "UPDATE mysql_servers SET status='OFFLINE_SOFT'; LOAD MYSQL SERVERS TO RUNTIME");
    let r = get(http, "/readyz");
    assert_eq!(r.status, 503, "OFFLINE_SOFT: {}", r.body);
    assert!(r.body.contains("hostgroup") && r.body.contains('7'), "the reason names hostgroup 7: {}", r.body);
    assert_eq!(get(http, "/healthz").status, 200, "still alive while not ready");

    admin(a, "UPDATE mysql_servers SET status='ONLINE'; LOAD MYSQL SERVERS TO RUNTIME");
    let r = get(http, "/readyz");
    assert_eq!(r.status, 200, "back ONLINE: {}", r.body);
}

#[tokio::test]
async fn json_endpoints_show_digests_pools_latency_rates_and_masked_config() {
    let db = testkit::shared();
    let secret = "obs-Secret-771";
    let text = r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {BACKEND_PORT}
[[mysql_users]]
username = "root"
password = ""
[[mysql_users]]
username = "masked"
password = "SECRET"
backend_username = "root"
backend_password = "SECRET-backend"
"#
    .replace("SECRET", secret);
    let proxy = Proxy::start(toml_config(&text, db));
    let http = proxy.http_port();
    let mut c = connect(proxy.port).await;
    run(&mut c, &sleepers(5)).await;
    // More shapes than the limit, each lighter than the sleepers.
    let shapes: Vec<String> =
        ["SELECT 1", "SELECT 1, 2", "SELECT 1, 2, 3", "SELECT 'a' = 'b'", "SELECT 1 + 1", "SELECT NOW()"].map(String::from).to_vec();
    run(&mut c, &shapes).await;

    // Digests: at most `limit`, the heaviest (the sleepers) first, normalized and counted.
    let d = get(http, "/api/stats/digests?limit=5");
    assert_eq!(d.status, 200, "{}", d.body);
    let rows = d.json();
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 5, "limit=5 with more digests than that: {rows:?}");
    let top = &rows[0];
    assert_eq!(top["digest_text"], SLEEPER_DIGEST, "the heaviest digest first: {rows:?}");
    assert_eq!(top["count_star"], 5, "{top}");
    assert_eq!((top["username"].as_str(), top["schemaname"].as_str(), top["hostgroup"].as_u64()), (Some("root"), Some("test"), Some(0)));
    let mut id_text = Vec::new();
    let id = sql::digest::digest_into(b"SELECT 3, SLEEP(0.02)", &mut id_text).id;
    assert_eq!(top["digest"], sql::digest::format_id(id));
    assert!(top["sum_time_us"].as_u64().unwrap() >= 5 * 20_000, "five 20 ms sleeps: {top}");
    assert_eq!(top["sum_rows_sent"], 5);
    assert_eq!(top["errors"], 0);

    // Pools: the backend, with the traffic.
    let p = get(http, "/api/stats/pools").json();
    let pools = p.as_array().expect("an array");
    assert_eq!(pools.len(), 1, "{p}");
    let pool = &pools[0];
    assert_eq!((pool["srv_host"].as_str(), pool["srv_port"].as_u64()), (Some("127.0.0.1"), Some(u64::from(db.port()))), "{pool}");
    assert_eq!(pool["status"], "ONLINE");
    assert!(pool["queries"].as_u64().unwrap() >= 11, "{pool}");
    assert!(pool["conn_ok"].as_u64().unwrap() >= 1 && pool["bytes_recv"].as_u64().unwrap() > 0, "{pool}");

    // Latency over every statement: ordered percentiles, and the sleeps at the top.
    let l = get(http, "/api/stats/latency").json();
    let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k} in {l}"));
    assert!(n("count") >= 11, "{l}");
    assert!(n("p50_us") <= n("p95_us") && n("p95_us") <= n("p99_us") && n("p99_us") <= n("max_us"), "{l}");
    assert!(n("max_us") >= 20_000, "a 20 ms sleep is the max at least: {l}");

    // Rates: samples are taken once a second; keep the traffic going until one shows it.
    let deadline = Instant::now() + PATIENCE;
    let questions_rate = loop {
        c.query_drop("SELECT 1").await.unwrap();
        let r = get(http, "/api/stats/rates").json();
        let q = r.as_array().expect("an array").iter().find(|row| row["name"] == "Questions").cloned().expect("a Questions row");
        let rate = q["per_second_1s"].as_f64().unwrap();
        if rate > 0.0 {
            break q;
        }
        assert!(Instant::now() < deadline, "Questions rate still 0 after {PATIENCE:?}: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(questions_rate["per_second_10s"].as_f64().unwrap() > 0.0, "{questions_rate}");

    // Config: the servers, and no password in clear.
    let cfg = get(http, "/api/config");
    assert_eq!(cfg.status, 200);
    assert!(!cfg.body.contains(secret), "a password shows: {}", cfg.body);
    assert!(!cfg.body.contains("admin:admin"), "the admin password shows: {}", cfg.body);
    let cfg = cfg.json();
    let servers = cfg["mysql_servers"].as_array().expect("mysql_servers");
    assert!(servers.iter().any(|s| s["port"].as_u64() == Some(u64::from(db.port())) && s["hostgroup_id"] == 0), "{cfg}");
    let users = cfg["mysql_users"].as_array().expect("mysql_users");
    let user = |name: &str| users.iter().find(|u| u["username"] == name).unwrap_or_else(|| panic!("user {name} in {cfg}"));
    assert_eq!(user("masked")["password"], "********");
    assert_eq!(user("masked")["backend_password"], "********");
    assert_eq!(user("root")["password"], "", "an empty password stays empty");
    assert_eq!(cfg["proxy"]["admin_credentials"], "admin:********");
}

#[tokio::test]
async fn dashboard_shows_the_live_sluice() {
    if !chromium::require().unwrap_or_else(|e| panic!("{e:#}")) {
        return;
    }
    let db = testkit::shared();
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    run(&mut c, &sleepers(3)).await;
    let url = format!("http://127.0.0.1:{}/dashboard", proxy.http_port());
    let dom = tokio::task::spawn_blocking(move || chromium::dump_dom(&url, 3000)).await.unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    let has = |needle: &str| assert!(dom.contains(needle), "missing {needle:?} in the DOM:\n{dom}");
    has(r#"<body data-loaded="1">"#);
    has(r#"<div id="error" hidden="">"#);
    has(&format!(r#"<td class="l mono">127.0.0.1:{}</td><td class="l ONLINE">ONLINE</td>"#, db.port()));
    has(&format!(r#"<td class="l sql" title="{SLEEPER_DIGEST}">{SLEEPER_DIGEST}</td><td>3</td>"#));
}

/// Polls `path` until it has a line for which `want` holds; returns all its lines as JSON.
async fn wait_for_line(path: &Path, want: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let lines: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
            .collect();
        if lines.iter().any(&want) {
            return lines;
        }
        assert!(Instant::now() < deadline, "no such line in {} after {PATIENCE:?}: {lines:?}", path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn query_log_follows_rules_and_the_live_switch() {
    let db: &MariaDb = testkit::shared();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("q.log");
    let text = format!(
        r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[querylog]
path = "{}"
enabled = false
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {{BACKEND_PORT}}
[[mysql_users]]
username = "root"
password = ""
[[mysql_query_rules]]
rule_id = 1
match_pattern = '^SELECT 42'
log = 1
apply = 0
"#,
        log.display()
    );
    let proxy = Proxy::start(toml_config(&text, db));
    let mut c = connect(proxy.port).await;
    assert_eq!(c.query_first::<i64, _>("SELECT 42").await.unwrap(), Some(42));
    assert_eq!(c.query_first::<i64, _>("SELECT 7").await.unwrap(), Some(7));

    let lines = wait_for_line(&log, |l| l["query"] == "SELECT 42").await;
    let l = &lines[0];
    assert_eq!(lines.len(), 1, "only the statement rule 1 asked for: {lines:?}");
    assert_eq!((l["user"].as_str(), l["schema"].as_str()), (Some("root"), Some("test")), "{l}");
    let client: std::net::SocketAddr = l["client"].as_str().expect("client").parse().expect("client is ip:port");
    assert!(client.ip().is_loopback(), "{l}");
    assert_eq!(l["hostgroup"], 0, "{l}");
    assert_eq!(l["server"], format!("127.0.0.1:{}", db.port()), "{l}");
    let mut digest_text = Vec::new();
    let digest = sql::digest::digest_into(b"SELECT 42", &mut digest_text).id;
    assert_eq!(l["digest"], sql::digest::format_id(digest), "{l}");
    assert!(l["digest"].as_str().unwrap().starts_with("0x"));
    assert!(l["duration_us"].is_u64(), "{l}");
    assert_eq!((l["rows_sent"].as_u64(), l["rows_affected"].as_u64()), (Some(1), Some(0)), "{l}");
    assert_eq!(l["rule"], 1, "{l}");
    assert!(l["error"].is_null(), "{l}");
    assert!(l["time"].as_str().is_some_and(|t| t.ends_with('Z') && t.contains('T')), "{l}");

    // Everything, live, from the admin port.
    let a = proxy.admin_port();
    admin(a, "UPDATE global_variables SET variable_value='true' WHERE variable_name='mysql-eventslog_default_log'; LOAD MYSQL VARIABLES TO RUNTIME");
    let e = c.query_drop("SELECT * FROM no_such_table").await.expect_err("no such table");
    assert_eq!(server_code(&e), Some(1146), "{e}");
    let lines = wait_for_line(&log, |l| l["query"] == "SELECT * FROM no_such_table").await;
    let bad = lines.iter().find(|l| l["query"] == "SELECT * FROM no_such_table").unwrap();
    assert_eq!(bad["error"]["code"], 1146, "{bad}");
    assert!(bad["rule"].is_null(), "the global switch logged it, not a rule: {bad}");
    assert_eq!(bad["server"], format!("127.0.0.1:{}", db.port()), "{bad}");
    assert!(!lines.iter().any(|l| l["query"] == "SELECT 7"), "SELECT 7 ran before the switch: {lines:?}");

    let written: u64 = admin(a, "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Query_Log_written'")
        .parse()
        .expect("Query_Log_written is a number");
    assert!(written >= lines.len() as u64 && written >= 2, "Query_Log_written {written}, lines {}", lines.len());
    let dropped = admin(a, "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Query_Log_dropped'");
    assert_eq!(dropped, "0");
}
