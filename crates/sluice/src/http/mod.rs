//! Beside the data path: the HTTP side. `/metrics` (Prometheus text), `/healthz`, `/readyz`,
//! read-only JSON for the statistics and the runtime config, and the dashboard page. The
//! listener hands each accepted connection to `serve`; every request reads the live counters
//! (merged from the workers on demand), nothing is cached.
//!
//! When `http_listen` is not a loopback address, every path but `/healthz` and `/readyz` needs
//! an admin login (HTTP Basic, one of `admin_credentials`), whatever the client's address: a
//! local peer may be a proxy or tunnel forwarding someone else.

pub mod dashboard;
mod metrics;
pub mod prometheus;

use crate::admin::stats_rows;
use crate::datapath::DataPath;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

/// Serves one HTTP connection (keep-alive included) until the client or shutdown ends it.
pub async fn serve(data: Arc<DataPath>, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let shutdown = data.shutdown.clone();
    let service = hyper_util::service::TowerToHyperService::new(router(data));
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            tracing::debug!(%peer, "http connection ended: {e}");
        },
        _ = shutdown.cancelled() => conn.as_mut().graceful_shutdown(),
    }
}

fn router(data: Arc<DataPath>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/dashboard", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/api/stats/global", get(global))
        .route("/api/stats/rates", get(rates))
        .route("/api/stats/latency", get(latency))
        .route("/api/stats/digests", get(digests))
        .route("/api/stats/probe", get(probe))
        .route("/api/stats/commands", get(commands))
        .route("/api/stats/pools", get(pools))
        .route("/api/stats/rules", get(rules))
        .route("/api/config", get(config))
        .layer(axum::middleware::from_fn_with_state(data.clone(), require_login))
        .with_state(data)
}

/// Off loopback, everything but the health checks needs an admin login.
async fn require_login(State(data): S, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" || !login_required(&data) {
        return next.run(request).await;
    }
    match logged_in(&data, request.headers()) {
        Some(true) => next.run(request).await,
        answer => {
            if answer == Some(false) {
                data.stats.add(crate::stats::Counter::AdminAccessDenied, 1);
            }
            let challenge = [(header::WWW_AUTHENTICATE, "Basic realm=\"sluice\", charset=\"UTF-8\"")];
            (StatusCode::UNAUTHORIZED, challenge, "an admin login is needed (HTTP Basic, one of admin_credentials)\n").into_response()
        }
    }
}

/// True when the HTTP port listens on an address other than loopback (one that does not parse
/// counts as such).
fn login_required(data: &DataPath) -> bool {
    !data.snapshot().config.proxy.http_listen.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
}

/// Whether the request's Basic credentials are one of `admin_credentials`; `None` when it has none.
fn logged_in(data: &DataPath, headers: &HeaderMap) -> Option<bool> {
    use base64::Engine;
    let value = headers.get(header::AUTHORIZATION)?;
    let login = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, b64)| base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok())
        .and_then(|raw| String::from_utf8(raw).ok());
    let Some((user, password)) = login.as_deref().and_then(|l| l.split_once(':')) else { return Some(false) };
    let snapshot = data.snapshot();
    let logins = crate::config::admin_logins(&snapshot.config.proxy.admin_credentials).unwrap_or_default();
    // Every login is checked, and passwords compared as digests: the time taken says nothing
    // about which part matched.
    let matched = logins.iter().fold(false, |found, (u, p)| found | (*u == user) & password_matches(p, password));
    Some(matched)
}

/// `given` against an admin_credentials password (plain, or a `*…` mysql_native_password hash).
fn password_matches(configured: &str, given: &str) -> bool {
    match proto::auth::parse_native_hash(configured) {
        Some(stage2) => proto::auth::native_stage2(&proto::auth::native_stage1(given.as_bytes())) == stage2,
        None => proto::auth::sha2_digest(configured.as_bytes()) == proto::auth::sha2_digest(given.as_bytes()),
    }
}

type S = State<Arc<DataPath>>;

async fn page() -> Html<&'static str> {
    Html(dashboard::DASHBOARD_HTML)
}

async fn metrics(State(data): S) -> Response {
    ([(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)], metrics::render(&data)).into_response()
}

/// Ready: not shutting down, and every hostgroup has a server that takes new statements.
async fn ready(State(data): S) -> Response {
    if data.closing() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    let snapshot = data.snapshot();
    let servers = snapshot.hostgroups.servers();
    let mut down: Vec<u32> =
        servers.iter().map(|s| s.hostgroup).filter(|&hg| !servers.iter().any(|s| s.hostgroup == hg && s.accepts_new())).collect();
    down.dedup();
    if down.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("no ONLINE server in hostgroup(s) {down:?}\n")).into_response()
    }
}

async fn global(State(data): S) -> Json<Value> {
    Json(stats_rows::global(&data).into_iter().map(|(name, value)| json!({ "name": name, "value": value })).collect())
}

async fn rates(State(data): S) -> Json<Value> {
    Json(
        data
            .stats
            .rates()
            .into_iter()
            .map(|r| json!({ "name": r.name, "per_second_1s": r.per_second_1s, "per_second_10s": r.per_second_10s, "per_second_60s": r.per_second_60s }))
            .collect(),
    )
}

async fn latency(State(data): S) -> Json<Value> {
    let p = data.stats.latency();
    Json(json!({ "count": p.count, "p50_us": p.p50_us, "p95_us": p.p95_us, "p99_us": p.p99_us, "max_us": p.max_us }))
}

#[derive(serde::Deserialize)]
struct Limit {
    limit: Option<usize>,
}

/// Digests by total time, the heaviest first.
async fn digests(State(data): S, Query(q): Query<Limit>) -> Json<Value> {
    let mut rows = data.stats.digests();
    rows.sort_by_key(|d| std::cmp::Reverse(d.sum_time_us));
    rows.truncate(q.limit.unwrap_or(100));
    Json(
        rows.into_iter()
            .map(|d| {
                json!({
                    "hostgroup": d.hostgroup, "schemaname": d.schemaname, "username": d.username,
                    "digest": sql::digest::format_id(d.digest), "digest_text": d.digest_text,
                    "count_star": d.count_star, "first_seen": d.first_seen, "last_seen": d.last_seen,
                    "sum_time_us": d.sum_time_us, "min_time_us": d.min_time_us, "max_time_us": d.max_time_us,
                    "p50_us": d.p50_us, "p95_us": d.p95_us, "p99_us": d.p99_us,
                    "sum_rows_sent": d.sum_rows_sent, "sum_rows_affected": d.sum_rows_affected, "errors": d.errors,
                    "server_count": d.server_count, "server_time_us": d.server_time_us,
                    "server_p50_us": d.server_p50_us, "server_p99_us": d.server_p99_us,
                    "proxy_count": d.proxy_count, "proxy_time_us": d.proxy_time_us,
                })
            })
            .collect(),
    )
}

/// The server-time probe: its state, the time splits over all statements, and the server
/// threads' totals from the BPF map.
async fn probe(State(data): S) -> Json<Value> {
    let status = data.probe.status();
    let totals = data.stats.split_totals();
    let threads = tokio::task::spawn_blocking({
        let data = data.clone();
        move || data.probe.threads()
    })
    .await
    .unwrap_or_default();
    Json(json!({
        "enabled": status.enabled, "attached": status.attached, "state": status.state, "pids": status.pids,
        "timed": totals.proxy_count, "proxy_time_us": totals.proxy_sum_us,
        "server_count": totals.server.count, "server_time_us": totals.server_sum_us,
        "server_p50_us": totals.server.p50_us, "server_p99_us": totals.server.p99_us,
        "misses": data.probe.misses(), "threads": threads,
    }))
}

async fn commands(State(data): S) -> Json<Value> {
    let names = crate::stats::BUCKET_COLUMNS;
    Json(
        data.stats
            .commands()
            .into_iter()
            .map(|c| {
                let buckets: serde_json::Map<String, Value> = names.iter().zip(c.buckets).map(|(n, v)| (n.to_string(), json!(v))).collect();
                json!({ "command": c.command, "total_time_us": c.total_time_us, "total_cnt": c.total_cnt, "buckets": buckets })
            })
            .collect(),
    )
}

async fn pools(State(data): S) -> Json<Value> {
    Json(serde_json::to_value(stats_rows::pools(&data)).unwrap_or_default())
}

async fn rules(State(data): S) -> Json<Value> {
    let hits = data.snapshot().config.rules.hits();
    Json(hits.into_iter().map(|(rule_id, hits)| json!({ "rule_id": rule_id, "hits": hits })).collect())
}

/// The configuration in force, as the file spells it; passwords are masked.
async fn config(State(data): S) -> Json<Value> {
    let mut file = data.snapshot().config.to_file();
    let mask = |s: &mut String| {
        if !s.is_empty() {
            *s = "********".into();
        }
    };
    for u in &mut file.mysql_users {
        mask(&mut u.password);
        if let Some(p) = u.backend_password.as_mut() {
            mask(p);
        }
    }
    if let Some(m) = file.monitor.as_mut() {
        mask(&mut m.password);
    }
    file.proxy.admin_credentials = crate::config::admin_logins(&file.proxy.admin_credentials)
        .map(|l| l.iter().map(|(u, _)| format!("{u}:********")).collect::<Vec<_>>().join(";"))
        .unwrap_or_default();
    Json(serde_json::to_value(file).unwrap_or_default())
}
