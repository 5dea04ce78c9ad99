//! Side path, admin port: the rows of each statistics table, read from the live counters when
//! a statement names the table (workers' data merged on demand; nothing kept in SQLite).

use super::{Cell, StatsTable};
use crate::datapath::DataPath;
use crate::health::Check;
use std::sync::atomic::Ordering::Relaxed;

pub fn rows(data: &DataPath, table: StatsTable) -> Vec<Vec<Cell>> {
    match table {
        StatsTable::QueryDigest => digest_rows(data.stats.digests()),
        StatsTable::QueryDigestReset => digest_rows(data.stats.take_digests()),
        StatsTable::ConnectionPool => pool_rows(data),
        StatsTable::CommandsCounters => data
            .stats
            .commands()
            .into_iter()
            .map(|c| {
                let mut row = vec![Cell::Text(c.command.into()), c.total_time_us.into(), c.total_cnt.into()];
                row.extend(c.buckets.iter().map(|&n| Cell::from(n)));
                row
            })
            .collect(),
        StatsTable::QueryRules => {
            data.snapshot().config.rules.hits().into_iter().map(|(rule, hits)| vec![rule.into(), hits.into()]).collect()
        }
        StatsTable::Global => global(data).into_iter().map(|(name, v)| vec![Cell::Text(name.into()), Cell::Text(v.to_string())]).collect(),
        StatsTable::Rates => data
            .stats
            .rates()
            .into_iter()
            .map(|r| {
                vec![Cell::Text(r.name.into()), Cell::Real(r.per_second_1s), Cell::Real(r.per_second_10s), Cell::Real(r.per_second_60s)]
            })
            .collect(),
        StatsTable::MultiplexPins => {
            crate::session::pin_counts::by_reason().into_iter().map(|(reason, n)| vec![Cell::Text(reason.into()), n.into()]).collect()
        }
        StatsTable::ConnectLog => log_rows(data, Check::Connect),
        StatsTable::PingLog => log_rows(data, Check::Ping),
        StatsTable::ReadOnlyLog => log_rows(data, Check::ReadOnly),
        StatsTable::ReplicationLagLog => log_rows(data, Check::ReplicationLag),
    }
}

/// A monitor log: hostname, port, time_start_us, success time, then read_only / repl_lag,
/// the error, and the lag log's GTID position.
fn log_rows(data: &DataPath, check: Check) -> Vec<Vec<Cell>> {
    let or_null = |v: Option<String>| v.map_or(Cell::Null, Cell::Text);
    data.health
        .log(check)
        .into_iter()
        .map(|r| {
            let mut row = vec![Cell::Text(r.hostname), u32::from(r.port).into(), r.time_start_us.into(), r.success_time_us.into()];
            if matches!(check, Check::ReadOnly | Check::ReplicationLag) {
                row.push(r.value.map_or(Cell::Null, Cell::Int));
            }
            row.push(or_null(r.error));
            if check == Check::ReplicationLag {
                row.push(or_null(r.gtid));
            }
            row
        })
        .collect()
}

fn digest_rows(rows: Vec<crate::stats::DigestRow>) -> Vec<Vec<Cell>> {
    rows.into_iter()
        .map(|d| {
            vec![
                d.hostgroup.into(),
                Cell::Text(d.schemaname),
                Cell::Text(d.username),
                Cell::Text(String::new()),
                Cell::Text(sql::digest::format_id(d.digest)),
                Cell::Text(d.digest_text),
                d.count_star.into(),
                d.first_seen.into(),
                d.last_seen.into(),
                d.sum_time_us.into(),
                d.min_time_us.into(),
                d.max_time_us.into(),
                d.sum_rows_affected.into(),
                d.sum_rows_sent.into(),
                d.p50_us.into(),
                d.p95_us.into(),
                d.p99_us.into(),
                d.errors.into(),
                d.server_count.into(),
                d.server_time_us.into(),
                d.server_p50_us.into(),
                d.server_p99_us.into(),
                d.proxy_count.into(),
                d.proxy_time_us.into(),
            ]
        })
        .collect()
}

/// One server of the running config, as stats_mysql_connection_pool and `/api/stats/pools`
/// show it.
#[derive(serde::Serialize)]
pub struct PoolRow {
    pub hostgroup: u32,
    pub srv_host: String,
    pub srv_port: u16,
    pub status: &'static str,
    pub conn_used: u64,
    pub conn_free: u64,
    pub conn_ok: u64,
    pub conn_err: u64,
    pub max_conn_used: u32,
    pub queries: u64,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    /// The monitor's last ping round trip (ProxySQL's Latency_us); without one yet, the mean
    /// time of the statements this server answered.
    pub latency_us: u64,
}

pub fn pools(data: &DataPath) -> Vec<PoolRow> {
    let snapshot = data.snapshot();
    let traffic = data.stats.servers();
    let pings: Vec<_> = data.health.servers();
    let ping = |s: &crate::pool::Server| pings.iter().find(|f| f.hostname == s.hostname && f.port == s.port).and_then(|f| f.last_ping_us);
    snapshot
        .hostgroups
        .servers()
        .iter()
        .map(|s| {
            let p = &s.pool;
            let idle = p.idle() as u64;
            let t = traffic.get(&p.id).cloned().unwrap_or_default();
            PoolRow {
                hostgroup: s.hostgroup,
                srv_host: s.hostname.clone(),
                srv_port: s.port,
                status: p.status_name(),
                conn_used: u64::from(p.open()).saturating_sub(idle),
                conn_free: idle,
                conn_ok: p.connects_ok.load(Relaxed),
                conn_err: p.connects_failed.load(Relaxed),
                max_conn_used: p.max_used.load(Relaxed),
                queries: t.queries,
                bytes_sent: t.bytes_sent,
                bytes_recv: t.bytes_recv,
                latency_us: ping(s).unwrap_or_else(|| t.latency_sum_us.checked_div(t.queries).unwrap_or(0)),
            }
        })
        .collect()
}

fn pool_rows(data: &DataPath) -> Vec<Vec<Cell>> {
    pools(data)
        .into_iter()
        .map(|p| {
            vec![
                p.hostgroup.into(),
                Cell::Text(p.srv_host),
                u32::from(p.srv_port).into(),
                Cell::Text(p.status.into()),
                p.conn_used.into(),
                p.conn_free.into(),
                p.conn_ok.into(),
                p.conn_err.into(),
                p.max_conn_used.into(),
                p.queries.into(),
                0u64.into(),
                p.bytes_sent.into(),
                p.bytes_recv.into(),
                p.latency_us.into(),
            ]
        })
        .collect()
}

/// stats_mysql_global: the counters, and gauges read now.
pub fn global(data: &DataPath) -> Vec<(&'static str, u64)> {
    let snapshot = data.snapshot();
    let servers = snapshot.hostgroups.servers();
    let mut out = data.stats.counters();
    out.extend([
        ("Client_Connections_connected", data.clients.load(Relaxed) as u64),
        ("Server_Connections_connected", servers.iter().map(|s| u64::from(s.pool.open())).sum()),
        ("Server_Connections_free", servers.iter().map(|s| s.pool.idle() as u64).sum()),
        ("Stmt_Cached", data.statements.len() as u64),
        ("Query_Cache_Entries", data.cache.entries() as u64),
        ("Query_Cache_Memory_bytes", data.cache.memory_bytes() as u64),
        ("Mirror_pending", data.mirror.pending() as u64),
        ("Io_uring_rings", data.io_uring.rings.load(Relaxed)),
        ("Io_uring_enters", data.io_uring.enters.load(Relaxed)),
        ("Io_uring_completions", data.io_uring.completions.load(Relaxed)),
    ]);
    if let Some(log) = &snapshot.query_log {
        out.extend([("Query_Log_written", log.written()), ("Query_Log_dropped", log.dropped())]);
    }
    out
}
