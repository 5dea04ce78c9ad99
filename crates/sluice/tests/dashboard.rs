//! The dashboard page in a real browser: headless Chromium loads `DASHBOARD_HTML` from a stub
//! HTTP server that answers the page's JSON endpoints, and the DOM after its scripts ran is
//! checked (values shown, data inserted as text, the error banner when an endpoint fails).
//!
//! Needs Chromium (`scripts/install-deps`); without one these tests fail, unless
//! `SLUICE_SKIP_BROWSER=1` (then they skip).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use sluice::http::dashboard::DASHBOARD_HTML;
use testkit::chromium;

/// Virtual time the page gets: the first refresh and one more poll (every 2 s).
const BUDGET_MS: u64 = 3000;

const RATES: &str = r#"[
  {"name": "Com_select", "per_second_1s": 7.0, "per_second_10s": 6.0, "per_second_60s": 5.0},
  {"name": "Questions", "per_second_1s": 123.4, "per_second_10s": 100.25, "per_second_60s": 90.0}
]"#;
const LATENCY: &str = r#"{"p50_us": 250, "p95_us": 1500, "p99_us": 12000, "max_us": 2500000, "count": 1000}"#;
const DIGESTS: &str = r#"[
  {"hostgroup": 1, "schemaname": "shop", "username": "app", "digest": "0x1234ABCD",
   "digest_text": "SELECT <b>bold</b> FROM t WHERE id = ?", "count_star": 4242, "sum_time_us": 123456,
   "p50_us": 100, "p95_us": 200, "p99_us": 300, "sum_rows_sent": 4242, "errors": 3}
]"#;
const POOLS: &str = r#"[
  {"hostgroup": 1, "srv_host": "db1.example", "srv_port": 3306, "status": "ONLINE", "conn_used": 3,
   "conn_free": 5, "queries": 1234, "bytes_sent": 2048, "bytes_recv": 1048576, "latency_us": 850}
]"#;

type Routes = HashMap<&'static str, (u16, &'static str, &'static str)>;

fn routes() -> Routes {
    let json = "application/json";
    HashMap::from([
        ("/dashboard", (200, "text/html; charset=utf-8", DASHBOARD_HTML)),
        ("/api/stats/rates", (200, json, RATES)),
        ("/api/stats/latency", (200, json, LATENCY)),
        ("/api/stats/digests?limit=10", (200, json, DIGESTS)),
        ("/api/stats/pools", (200, json, POOLS)),
    ])
}

/// Serves `routes` on 127.0.0.1 (one thread per connection, `Connection: close`, 404 for
/// anything else) for the rest of the process; returns the dashboard's URL.
fn serve(routes: Routes) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let routes = Arc::new(routes);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let routes = Arc::clone(&routes);
            // Chromium opens speculative connections that may never carry a request.
            std::thread::spawn(move || answer(stream, &routes));
        }
    });
    format!("http://{addr}/dashboard")
}

fn answer(mut stream: TcpStream, routes: &Routes) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&request);
    let path = head.lines().next().and_then(|line| line.split(' ').nth(1)).unwrap_or("");
    let (status, content_type, body) = routes.get(path).copied().unwrap_or((404, "text/plain", "not found"));
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// Whether to run: panics when no browser is installed, unless SLUICE_SKIP_BROWSER=1.
fn browser() -> bool {
    chromium::require().unwrap_or_else(|e| panic!("{e:#}"))
}

fn dump(url: &str) -> String {
    chromium::dump_dom(url, BUDGET_MS).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn dashboard_shows_the_stats() {
    if !browser() {
        return;
    }
    let dom = dump(&serve(routes()));
    let has = |needle: &str| assert!(dom.contains(needle), "missing {needle:?} in the DOM:\n{dom}");

    has(r#"<body data-loaded="1">"#);
    has(r#"<div id="error" hidden="">"#);
    has(r#"id="qps" data-value="123.4">123.4</div>"#);
    has("10 s: 100.3 · 60 s: 90.0");
    has(r#"id="p50" data-value="250">250 µs</div>"#);
    has(r#"id="p95" data-value="1500">1.50 ms</div>"#);
    has(r#"id="p99" data-value="12000">12.0 ms</div>"#);
    has("max 2.50 s · 1,000 samples");
    // The digest text arrives as text: escaped in the serialization, never a <b> element.
    has(concat!(
        r#"<tr><td>1</td><td class="l">shop</td><td class="l">app</td><td class="l mono">0x1234ABCD</td>"#,
        r#"<td class="l sql" title="SELECT &lt;b&gt;bold&lt;/b&gt; FROM t WHERE id = ?">"#,
        "SELECT &lt;b&gt;bold&lt;/b&gt; FROM t WHERE id = ?</td>",
        "<td>4,242</td><td>123.5 ms</td><td>100 µs</td><td>200 µs</td><td>300 µs</td><td>4,242</td><td>3</td></tr>",
    ));
    assert!(!dom.contains("<b>"), "digest text became markup:\n{dom}");
    has(concat!(
        r#"<tr><td>1</td><td class="l mono">db1.example:3306</td><td class="l ONLINE">ONLINE</td>"#,
        "<td>3</td><td>5</td><td>1,234</td><td>2.0 KiB</td><td>1.0 MiB</td><td>850 µs</td></tr>",
    ));
}

/// A digest timed by the server-time probe: 210 ms a statement, of which 200 ms on the server
/// and 100 µs in sluice.
const DIGESTS_SPLIT: &str = r#"[
  {"hostgroup": 0, "schemaname": "shop", "username": "app", "digest": "0xAB", "digest_text": "SELECT SLEEP(?)",
   "count_star": 10, "sum_time_us": 2100000, "p50_us": 210000, "p95_us": 210000, "p99_us": 210000,
   "sum_rows_sent": 10, "errors": 0, "server_count": 10, "server_time_us": 2000000, "server_p50_us": 201000,
   "server_p99_us": 202000, "proxy_count": 10, "proxy_time_us": 1000}
]"#;
const PROBE: &str = r#"{"enabled": true, "attached": true, "state": "probe: attached to dispatch_command in pid 7 (/usr/sbin/mariadbd)"}"#;

#[test]
fn dashboard_shows_the_time_split() {
    if !browser() {
        return;
    }
    let mut routes = routes();
    routes.insert("/api/stats/digests?limit=10", (200, "application/json", DIGESTS_SPLIT));
    routes.insert("/api/stats/probe", (200, "application/json", PROBE));
    let dom = dump(&serve(routes));
    let has = |needle: &str| assert!(dom.contains(needle), "missing {needle:?} in the DOM:\n{dom}");
    has(r#"<body data-loaded="1">"#);
    has(r#"<section id="split-section">"#);
    has("probe: attached to dispatch_command in pid 7 (/usr/sbin/mariadbd)");
    has(concat!(
        r#"<tr><td class="l sql" title="SELECT SLEEP(?)">SELECT SLEEP(?)</td><td>10</td><td>210.0 ms</td>"#,
        "<td>100 µs</td><td>9.90 ms</td><td>200.0 ms</td><td>201.0 ms</td><td>202.0 ms</td>",
        r#"<td class="l"><div class="bar" title="sluice 100 µs · network/queue 9.90 ms · server 200.0 ms">"#,
    ));
    has(r#"<span class="k-server" style="width: 95.24%;"></span>"#);
}

#[test]
fn dashboard_shows_the_split_only_with_the_probe() {
    if !browser() {
        return;
    }
    let dom = dump(&serve(routes()));
    assert!(dom.contains(r#"<section id="split-section" hidden="">"#), "{dom}");
}

#[test]
fn dashboard_shows_an_endpoint_failure() {
    if !browser() {
        return;
    }
    let mut routes = routes();
    routes.insert("/api/stats/latency", (500, "text/plain", "boom"));
    let dom = dump(&serve(routes));

    assert!(dom.contains(r#"<div id="error">Cannot refresh: api/stats/latency: HTTP 500</div>"#), "no visible error banner:\n{dom}");
    assert!(!dom.contains("data-loaded"), "the page claims to have loaded:\n{dom}");
    assert!(dom.contains(r#"id="qps">–</div>"#), "QPS shown despite the failed refresh:\n{dom}");
}
