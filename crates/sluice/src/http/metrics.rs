//! Beside the data path: `/metrics`, the statistics in Prometheus text format. Names are
//! `sluice_*`; per-digest series are left out (unbounded cardinality: the JSON and the admin
//! tables have them), but for the server-time probe's split of the `PROBE_DIGESTS` digests
//! with the most server time, while `[probe] enabled`.

use super::prometheus::{Exposition, Kind};
use crate::admin::stats_rows;
use crate::datapath::DataPath;

pub fn render(data: &DataPath) -> String {
    let mut e = Exposition::new();
    for (name, value) in data.stats.counters() {
        let metric = format!("sluice_{}_total", name.to_ascii_lowercase());
        e.family(&metric, &format!("stats_mysql_global {name}"), Kind::Counter).sample("", &[], value as f64);
    }
    let snapshot = data.snapshot();
    let servers = snapshot.hostgroups.servers();
    e.family("sluice_client_connections", "Client connections open now", Kind::Gauge).sample(
        "",
        &[],
        data.clients.load(std::sync::atomic::Ordering::Relaxed) as f64,
    );
    e.family("sluice_prepared_statements_cached", "Distinct prepared statements sluice keeps", Kind::Gauge).sample(
        "",
        &[],
        data.statements.len() as f64,
    );
    e.family("sluice_query_cache_entries", "Results in the result cache", Kind::Gauge).sample("", &[], data.cache.entries() as f64);
    e.family("sluice_query_cache_memory_bytes", "Bytes the result cache holds", Kind::Gauge).sample(
        "",
        &[],
        data.cache.memory_bytes() as f64,
    );
    e.family("sluice_mirror_pending", "Mirrored statements waiting or running now", Kind::Gauge).sample(
        "",
        &[],
        data.mirror.pending() as f64,
    );
    let uring = &data.io_uring;
    let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed) as f64;
    e.family("sluice_io_uring_rings", "io_uring rings of the per-core workers (0: every worker on epoll)", Kind::Gauge).sample(
        "",
        &[],
        load(&uring.rings),
    );
    e.family("sluice_io_uring_enters_total", "io_uring_enter calls that handed socket reads and writes to the kernel", Kind::Counter)
        .sample("", &[], load(&uring.enters));
    e.family("sluice_io_uring_completions_total", "Socket reads and writes completed through io_uring", Kind::Counter).sample(
        "",
        &[],
        load(&uring.completions),
    );
    e.family("sluice_config_servers", "Backend servers in the running config", Kind::Gauge).sample("", &[], servers.len() as f64);

    let commands = data.stats.commands();
    let latency = data.stats.latency();
    let us = |v: u64| v as f64 / 1e6;
    let total = us(commands.iter().map(|c| c.total_time_us).sum());
    e.family("sluice_query_duration_seconds", "Statement latency through sluice (HDR histogram, all statements)", Kind::Summary).summary(
        &[],
        &[(0.5, us(latency.p50_us)), (0.95, us(latency.p95_us)), (0.99, us(latency.p99_us))],
        total,
        latency.count,
    );

    e.family("sluice_commands_total", "Statements by command (stats_mysql_commands_counters)", Kind::Counter);
    for c in &commands {
        e.sample("", &[("command", c.command)], c.total_cnt as f64);
    }
    e.family("sluice_commands_seconds_total", "Time spent in statements by command", Kind::Counter);
    for c in &commands {
        e.sample("", &[("command", c.command)], us(c.total_time_us));
    }

    let pools = stats_rows::pools(data);
    let label = |p: &stats_rows::PoolRow| (p.hostgroup.to_string(), crate::config::server_address(&p.srv_host, p.srv_port));
    type Value = fn(&stats_rows::PoolRow) -> f64;
    let families: [(&str, &str, Kind, Value); 7] = [
        ("sluice_pool_connections_used", "Backend connections in use", Kind::Gauge, |p| p.conn_used as f64),
        ("sluice_pool_connections_free", "Idle pooled backend connections", Kind::Gauge, |p| p.conn_free as f64),
        ("sluice_pool_connects_total", "Backend connections opened", Kind::Counter, |p| p.conn_ok as f64),
        ("sluice_pool_connect_errors_total", "Backend connections that failed to open", Kind::Counter, |p| p.conn_err as f64),
        ("sluice_pool_queries_total", "Statements sent to the server", Kind::Counter, |p| p.queries as f64),
        ("sluice_pool_sent_bytes_total", "Bytes of requests sent to the server", Kind::Counter, |p| p.bytes_sent as f64),
        ("sluice_pool_received_bytes_total", "Bytes of replies received from the server", Kind::Counter, |p| p.bytes_recv as f64),
    ];
    for (name, help, kind, value) in families {
        e.family(name, help, kind);
        for p in &pools {
            let (hg, server) = label(p);
            e.sample("", &[("hostgroup", &hg), ("server", &server), ("status", p.status)], value(p));
        }
    }

    e.family(
        "sluice_server_shunned",
        "1 while the monitor keeps new statements off the server (SHUNNED or SHUNNED_REPLICATION_LAG)",
        Kind::Gauge,
    );
    for p in &pools {
        let (hg, server) = label(p);
        let shunned = p.status.starts_with("SHUNNED");
        e.sample("", &[("hostgroup", &hg), ("server", &server), ("status", p.status)], f64::from(u8::from(shunned)));
    }
    monitor(&mut e, data);

    probe(&mut e, data);

    e.family("sluice_rule_hits_total", "Statements each query rule matched (since its last LOAD)", Kind::Counter);
    for (rule, hits) in snapshot.config.rules.hits() {
        e.sample("", &[("rule_id", &rule.to_string())], hits as f64);
    }
    e.family("sluice_multiplex_pins_total", "Times a session kept its backend connection, by reason", Kind::Counter);
    for (reason, n) in crate::session::pin_counts::by_reason() {
        e.sample("", &[("reason", reason)], n as f64);
    }
    if let Some(log) = &snapshot.query_log {
        e.family("sluice_querylog_written_total", "Query log lines written", Kind::Counter).sample("", &[], log.written() as f64);
        e.family("sluice_querylog_dropped_total", "Query log events dropped (queue full)", Kind::Counter).sample(
            "",
            &[],
            log.dropped() as f64,
        );
    }
    e.finish()
}

/// Digests given per-digest series by the probe: those with the most server time.
const PROBE_DIGESTS: usize = 20;

/// The server-time probe: its state, the split over all statements, and per digest (the
/// `PROBE_DIGESTS` with the most server time) total, server and proxy time.
fn probe(e: &mut Exposition, data: &DataPath) {
    let status = data.probe.status();
    let flag = |b: bool| f64::from(u8::from(b));
    e.family("sluice_probe_enabled", "1 while [probe] enabled: statements are timed", Kind::Gauge).sample("", &[], flag(status.enabled));
    e.family("sluice_probe_attached", "1 while the probe is attached to a backend server process", Kind::Gauge).sample(
        "",
        &[],
        flag(status.attached),
    );
    if !status.enabled {
        return;
    }
    let us = |v: u64| v as f64 / 1e6;
    let t = data.stats.split_totals();
    e.family("sluice_probe_server_seconds", "Server time per statement, from the probe (HDR histogram)", Kind::Summary).summary(
        &[],
        &[(0.5, us(t.server.p50_us)), (0.99, us(t.server.p99_us))],
        us(t.server_sum_us),
        t.server.count,
    );
    e.family("sluice_probe_proxy_seconds_total", "sluice's own time in the statements timed", Kind::Counter).sample(
        "",
        &[],
        us(t.proxy_sum_us),
    );
    e.family("sluice_probe_timed_total", "Statements timed while the probe was enabled", Kind::Counter).sample(
        "",
        &[],
        t.proxy_count as f64,
    );
    e.family("sluice_probe_misses_total", "Timed statements whose server time the probe did not see", Kind::Counter).sample(
        "",
        &[],
        data.probe.misses() as f64,
    );
    let mut digests = data.stats.digests();
    digests.retain(|d| d.proxy_count > 0);
    digests.sort_by_key(|d| std::cmp::Reverse(d.server_time_us));
    digests.truncate(PROBE_DIGESTS);
    type Value = fn(&crate::stats::DigestRow) -> f64;
    let families: [(&str, &str, Kind, Value); 6] = [
        ("sluice_digest_statements_total", "Statements of the digest", Kind::Counter, |d| d.count_star as f64),
        ("sluice_digest_seconds_total", "Total time of the digest's statements through sluice", Kind::Counter, |d| {
            d.sum_time_us as f64 / 1e6
        }),
        ("sluice_digest_server_seconds_total", "Server time of the digest's statements (probe)", Kind::Counter, |d| {
            d.server_time_us as f64 / 1e6
        }),
        ("sluice_digest_server_p50_seconds", "Median server time of the digest's statements", Kind::Gauge, |d| {
            d.server_p50_us as f64 / 1e6
        }),
        ("sluice_digest_server_p99_seconds", "99th percentile server time of the digest's statements", Kind::Gauge, |d| {
            d.server_p99_us as f64 / 1e6
        }),
        ("sluice_digest_proxy_seconds_total", "sluice's own time in the digest's statements", Kind::Counter, |d| {
            d.proxy_time_us as f64 / 1e6
        }),
    ];
    for (name, help, kind, value) in families {
        e.family(name, help, kind);
        for d in &digests {
            let (hg, id) = (d.hostgroup.to_string(), sql::digest::format_id(d.digest));
            e.sample("", &[("hostgroup", &hg), ("digest", &id)], value(d));
        }
    }
}

/// What the monitor found, per server (hostname:port).
fn monitor(e: &mut Exposition, data: &DataPath) {
    let found = data.health.servers();
    let name = |f: &crate::health::ServerFindings| crate::config::server_address(&f.hostname, f.port);
    e.family("sluice_monitor_ping_seconds", "The monitor's last successful ping round trip", Kind::Gauge);
    for f in &found {
        if let Some(us) = f.last_ping_us {
            e.sample("", &[("server", &name(f))], us as f64 / 1e6);
        }
    }
    e.family("sluice_monitor_connect_errors_total", "Monitor connects the server did not answer or refused", Kind::Counter);
    for f in &found {
        e.sample("", &[("server", &name(f))], f.connect_errors as f64);
    }
    e.family("sluice_monitor_ping_errors_total", "Monitor pings that failed", Kind::Counter);
    for f in &found {
        e.sample("", &[("server", &name(f))], f.ping_errors as f64);
    }
    e.family("sluice_monitor_replication_lag_seconds", "A replica's last replication lag read (absent: unknown or NULL)", Kind::Gauge);
    for f in &found {
        if let Some(lag) = f.replication_lag {
            e.sample("", &[("server", &name(f))], lag as f64);
        }
    }
}
