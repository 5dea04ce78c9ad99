//! Side path, monitor: each server's health — a watcher per server (hostname:port) connects,
//! pings and, for the readers of replication hostgroups, reads the replication lag, each at
//! its `[monitor]` interval, and gives every pool of that server its verdict
//! (`ServerPool::set_health`): SHUNNED after `ping_max_failures` failed connects or pings in
//! a row, SHUNNED_REPLICATION_LAG while lagging more than its `max_replication_lag`, healthy
//! again after a successful check.

use super::{ask, open, settings, Reach};
use crate::config::MonitorSection;
use crate::datapath::DataPath;
use crate::health::{now_us, Check, Findings, LogRow};
use crate::pool::{Backend, Health, Server};
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the set of servers is looked at (new ones get a watcher).
const SERVERS_EVERY: Duration = Duration::from_millis(100);

/// Starts a watcher for every server of the config in force, until shutdown. A watcher ends
/// when its server leaves the config.
pub async fn watch_servers(data: Arc<DataPath>) {
    let mut watchers: HashMap<Arc<str>, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let snapshot = data.live.load_full();
        let mut names: Vec<&Arc<str>> = snapshot.hostgroups.servers().iter().map(|s| &s.name).collect();
        names.sort();
        names.dedup();
        data.health.retain(&names.iter().map(|n| &***n).collect::<Vec<_>>());
        watchers.retain(|_, w| !w.is_finished());
        for name in names {
            if !watchers.contains_key(name) {
                watchers.insert(name.clone(), tokio::spawn(watch(data.clone(), name.clone())));
            }
        }
        drop(snapshot);
        tokio::select! {
            _ = data.shutdown.cancelled() => break,
            _ = tokio::time::sleep(SERVERS_EVERY) => {}
        }
    }
    for (_, w) in watchers {
        let _ = w.await;
    }
}

/// A replica's replication lag, as its last check read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lag {
    Seconds(i64),
    /// Seconds_Behind_Master is NULL: its IO or SQL thread is stopped.
    Null,
    /// It replicates from nothing (no SHOW REPLICA STATUS row): it cannot lag.
    NotReplica,
}

/// One server's watcher state.
struct Watch {
    name: Arc<str>,
    /// The monitor's kept connection (pings, lag queries).
    link: Option<Backend>,
    /// Connects or pings failed in a row (no answer from the server), and the last error.
    failures: u32,
    last_error: String,
    /// `None`: not read yet, or not a reader of a replication hostgroup.
    lag: Option<Lag>,
    next_connect: Instant,
    next_ping: Instant,
    next_lag: Instant,
}

/// Checks the server named `name` at the monitor's intervals until it leaves the config or
/// sluice stops.
async fn watch(data: Arc<DataPath>, name: Arc<str>) {
    let now = Instant::now();
    let mut w =
        Watch { name, link: None, failures: 0, last_error: String::new(), lag: None, next_connect: now, next_ping: now, next_lag: now };
    loop {
        let snapshot = data.live.load_full();
        let Some(server) = snapshot.hostgroups.servers().iter().find(|s| s.name == w.name).cloned() else {
            return;
        };
        let next = match settings(&snapshot.config) {
            Some(monitor) => {
                w.check_due(&snapshot, &server, monitor, &data.health).await;
                w.give_verdicts(&snapshot, monitor, &data.health);
                w.next_connect.min(w.next_ping).min(w.next_lag)
            }
            None => {
                // No monitor login: nothing is checked, nothing is shunned.
                (w.link, w.failures, w.lag) = (None, 0, None);
                w.give_verdicts(&snapshot, &MonitorSection::default(), &data.health);
                Instant::now() + Duration::from_secs(1)
            }
        };
        drop(snapshot);
        tokio::select! {
            _ = data.shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
    }
}

/// A log row for a check of `server` started at `started`: a success when `error` is `None`.
fn log_row(server: &Server, started: (u64, Instant), value: Option<i64>, error: Option<String>) -> LogRow {
    LogRow {
        hostname: server.hostname.clone(),
        port: server.port,
        time_start_us: started.0,
        success_time_us: if error.is_none() { started.1.elapsed().as_micros().max(1) as u64 } else { 0 },
        value,
        gtid: None,
        error,
    }
}

impl Watch {
    /// Runs the checks whose time has come.
    async fn check_due(&mut self, snapshot: &Snapshot, server: &Server, monitor: &MonitorSection, health: &Findings) {
        let history = monitor.history_rows as usize;
        let every = |ms: u64| Duration::from_millis(ms);
        if Instant::now() >= self.next_connect {
            let started = (now_us(), Instant::now());
            let error = match open(server, monitor, health).await {
                Reach::Up(b) => {
                    self.failures = 0;
                    // Kept as the link when there is none; else closed, as a connect check is.
                    if self.link.is_none() {
                        self.link = Some(*b);
                    } else {
                        b.close();
                    }
                    None
                }
                Reach::Refused(e) => {
                    self.failures = 0;
                    Some(e)
                }
                Reach::Down(e) => {
                    self.failed(&e);
                    Some(e)
                }
            };
            health.record(Check::Connect, log_row(server, started, None, error), history);
            self.next_connect = Instant::now() + every(monitor.connect_interval_ms);
        }
        if Instant::now() >= self.next_ping {
            let started = (now_us(), Instant::now());
            let error = self.ping(server, monitor, health).await;
            health.record(Check::Ping, log_row(server, started, None, error), history);
            self.next_ping = Instant::now() + every(monitor.ping_interval_ms);
        }
        if !is_reader(snapshot, &self.name) {
            self.lag = None;
            self.next_lag = Instant::now() + every(monitor.replication_lag_interval_ms);
        } else if Instant::now() >= self.next_lag {
            let started = (now_us(), Instant::now());
            let row = match self.read_lag(monitor).await {
                Ok((lag, gtid)) => {
                    self.lag = Some(lag);
                    let mut row = log_row(server, started, if let Lag::Seconds(s) = lag { Some(s) } else { None }, None);
                    row.gtid = gtid;
                    row
                }
                Err(e) => log_row(server, started, None, Some(e)),
            };
            health.record(Check::ReplicationLag, row, history);
            self.next_lag = Instant::now() + every(monitor.replication_lag_interval_ms);
        }
    }

    /// A connect or ping the server did not answer.
    fn failed(&mut self, error: &str) {
        self.failures = self.failures.saturating_add(1);
        self.last_error = error.to_string();
        self.link = None;
    }

    /// Pings on the kept connection (opened first if needed); the error if it failed.
    async fn ping(&mut self, server: &Server, monitor: &MonitorSection, health: &Findings) -> Option<String> {
        let link = match &mut self.link {
            Some(link) => link,
            None => match open(server, monitor, health).await {
                Reach::Up(b) => self.link.insert(*b),
                Reach::Refused(e) => {
                    // It answered: alive, whatever it thinks of the monitor login.
                    self.failures = 0;
                    return Some(e);
                }
                Reach::Down(e) => {
                    self.failed(&e);
                    return Some(e);
                }
            },
        };
        match ask(link, "DO 1", Duration::from_millis(monitor.ping_timeout_ms)).await {
            Ok(_) => {
                self.failures = 0;
                None
            }
            Err(e) => {
                self.failed(&e);
                Some(e)
            }
        }
    }

    /// The replication lag and GTID position, on the kept connection (`SHOW ALL SLAVES STATUS`
    /// on MariaDB, `SHOW REPLICA STATUS` on MySQL 8.0.22 and later).
    async fn read_lag(&mut self, monitor: &MonitorSection) -> Result<(Lag, Option<String>), String> {
        let Some(link) = self.link.as_mut() else { return Err("no monitor connection to the server".into()) };
        let timeout = Duration::from_millis(monitor.ping_timeout_ms);
        let dialect = Dialect::of(&link.greeting.server_version);
        let answer = match ask(link, dialect.status_sql(), timeout).await {
            Ok((names, rows)) => lag_of(&names, &rows),
            Err(e) => {
                self.link = None;
                return Err(e);
            }
        };
        let lag = answer?;
        let gtid = match ask(link, dialect.gtid_sql(), timeout).await {
            Ok((_, rows)) => rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()),
            Err(_) => None,
        };
        Ok((lag, gtid))
    }

    /// Gives each pool of this server its verdict, saying what changed and why.
    fn give_verdicts(&self, snapshot: &Snapshot, monitor: &MonitorSection, health: &Findings) {
        for s in snapshot.hostgroups.servers().iter().filter(|s| s.name == self.name) {
            let lag = self.effective_lag(monitor);
            let lagging = s.max_replication_lag > 0
                && is_reader_group(snapshot, s.hostgroup)
                && lag.is_some_and(|l| l > i64::from(s.max_replication_lag));
            let verdict = if self.failures >= monitor.ping_max_failures {
                Health::Shunned
            } else if lagging {
                Health::ShunnedReplicationLag
            } else {
                Health::Healthy
            };
            if !s.pool.set_health(verdict) {
                continue;
            }
            health.verdict_changed();
            let (name, hg) = (&self.name, s.hostgroup);
            match verdict {
                Health::Shunned => tracing::warn!(
                    "monitor: {name} (hostgroup {hg}) is SHUNNED: {} connects or pings in a row failed (last: {}); \
                     no new statements go to it until a check succeeds",
                    self.failures,
                    self.last_error
                ),
                Health::ShunnedReplicationLag => tracing::warn!(
                    "monitor: {name} (hostgroup {hg}) is SHUNNED_REPLICATION_LAG: {} behind, over its max_replication_lag of {} s; \
                     out of the read set until it catches up",
                    match self.lag {
                        Some(Lag::Null) => "replication stopped (lag NULL, counted as [monitor] slave_lag_when_null)".to_string(),
                        _ => format!("{} s", lag.unwrap_or_default()),
                    },
                    s.max_replication_lag
                ),
                Health::Healthy => tracing::warn!("monitor: {name} (hostgroup {hg}) is ONLINE again"),
            }
        }
    }

    /// The lag its max_replication_lag is compared with: NULL counts as `slave_lag_when_null`
    /// (-1: not at all); not a replica, or not read, is no lag.
    fn effective_lag(&self, monitor: &MonitorSection) -> Option<i64> {
        match self.lag? {
            Lag::Seconds(s) => Some(s),
            Lag::Null => (monitor.slave_lag_when_null >= 0).then_some(monitor.slave_lag_when_null),
            Lag::NotReplica => None,
        }
    }
}

/// Whether `hostgroup` is the reader hostgroup of a replication pair.
fn is_reader_group(snapshot: &Snapshot, hostgroup: u32) -> bool {
    snapshot.config.replication_hostgroups.iter().any(|p| p.reader_hostgroup == hostgroup)
}

/// Whether the server named `name` is in the reader hostgroup of a replication pair.
fn is_reader(snapshot: &Snapshot, name: &str) -> bool {
    snapshot.hostgroups.servers().iter().any(|s| &*s.name == name && is_reader_group(snapshot, s.hostgroup))
}

/// Which statements read a server's replication state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    MariaDb,
    /// MySQL 8.0.22 and later: `SHOW REPLICA STATUS`, `Seconds_Behind_Source`.
    MySqlReplica,
    MySqlSlave,
}

impl Dialect {
    /// By the server's version string (`10.11.6-MariaDB`, `8.0.36`).
    fn of(version: &str) -> Dialect {
        if version.contains("MariaDB") {
            return Dialect::MariaDb;
        }
        let mut parts = version.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
        let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if v >= (8, 0, 22) {
            Dialect::MySqlReplica
        } else {
            Dialect::MySqlSlave
        }
    }

    fn status_sql(self) -> &'static str {
        match self {
            Dialect::MariaDb => "SHOW ALL SLAVES STATUS",
            Dialect::MySqlReplica => "SHOW REPLICA STATUS",
            Dialect::MySqlSlave => "SHOW SLAVE STATUS",
        }
    }

    fn gtid_sql(self) -> &'static str {
        match self {
            Dialect::MariaDb => "SELECT @@global.gtid_current_pos",
            _ => "SELECT @@global.gtid_executed",
        }
    }
}

/// The lag of a replica from its replication status rows (one per source): the largest, NULL
/// if any source's is.
fn lag_of(names: &[String], rows: &[Vec<Option<String>>]) -> Result<Lag, String> {
    let Some(col) =
        names.iter().position(|n| n.eq_ignore_ascii_case("Seconds_Behind_Master") || n.eq_ignore_ascii_case("Seconds_Behind_Source"))
    else {
        return if rows.is_empty() {
            Ok(Lag::NotReplica)
        } else {
            Err("the replication status has no Seconds_Behind_Master column".into())
        };
    };
    let mut lag = if rows.is_empty() { Lag::NotReplica } else { Lag::Seconds(0) };
    for row in rows {
        match row.get(col).cloned().flatten() {
            None => return Ok(Lag::Null),
            Some(v) => {
                let s: i64 = v.trim().parse().map_err(|_| format!("Seconds_Behind_Master `{v}` is not a number"))?;
                if let Lag::Seconds(max) = lag {
                    lag = Lag::Seconds(max.max(s));
                }
            }
        }
    }
    Ok(lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialect_by_version() {
        assert_eq!(Dialect::of("10.11.6-MariaDB-0+deb12u1"), Dialect::MariaDb);
        assert_eq!(Dialect::of("5.5.5-10.11.6-MariaDB"), Dialect::MariaDb);
        assert_eq!(Dialect::of("8.0.36"), Dialect::MySqlReplica);
        assert_eq!(Dialect::of("8.0.21-log"), Dialect::MySqlSlave);
        assert_eq!(Dialect::of("5.7.44"), Dialect::MySqlSlave);
    }

    #[test]
    fn a_null_lag_counts_as_slave_lag_when_null() {
        let now = Instant::now();
        let mut w = Watch {
            name: "db:1".into(),
            link: None,
            failures: 0,
            last_error: String::new(),
            lag: Some(Lag::Null),
            next_connect: now,
            next_ping: now,
            next_lag: now,
        };
        let mut m = MonitorSection::default();
        assert_eq!(w.effective_lag(&m), Some(60), "ProxySQL's default");
        m.slave_lag_when_null = -1;
        assert_eq!(w.effective_lag(&m), None, "-1 keeps a stopped replica in the read set");
        w.lag = Some(Lag::Seconds(4));
        assert_eq!(w.effective_lag(&m), Some(4));
        w.lag = Some(Lag::NotReplica);
        assert_eq!(w.effective_lag(&m), None, "a server that replicates from nothing cannot lag");
    }

    #[test]
    fn lag_from_status_rows() {
        let names: Vec<String> = ["Connection_name", "Seconds_Behind_Master"].map(String::from).to_vec();
        let row = |lag: Option<&str>| vec![Some(String::new()), lag.map(String::from)];
        assert_eq!(lag_of(&names, &[]), Ok(Lag::NotReplica));
        assert_eq!(lag_of(&[], &[]), Ok(Lag::NotReplica), "an empty result has no columns");
        assert_eq!(lag_of(&names, &[row(Some("3")), row(Some("7"))]), Ok(Lag::Seconds(7)));
        assert_eq!(lag_of(&names, &[row(Some("3")), row(None)]), Ok(Lag::Null));
        assert!(lag_of(&names, &[row(Some("x"))]).is_err());
    }
}
