//! Side path: what the monitor found — each server's latest checks and the bounded logs of
//! its connect, ping, read_only and replication lag checks. The monitor writes them; the
//! admin port (the `monitor` schema) and `/metrics` read them. The data path never does: the
//! verdict it needs is the atomic in each `pool::ServerPool`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A kind of monitor check: one log each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Connect,
    Ping,
    ReadOnly,
    ReplicationLag,
}

impl Check {
    pub const ALL: [Check; 4] = [Check::Connect, Check::Ping, Check::ReadOnly, Check::ReplicationLag];

    fn index(self) -> usize {
        self as usize
    }
}

/// One check of one server, as its log keeps it (ProxySQL's monitor log columns).
#[derive(Debug, Clone)]
pub struct LogRow {
    pub hostname: String,
    pub port: u16,
    /// When the check started (µs since the epoch).
    pub time_start_us: u64,
    /// How long it took when it succeeded; 0 when it failed.
    pub success_time_us: u64,
    /// read_only (0/1) or the replication lag in seconds; `None` for connect and ping, or when
    /// unknown (a lag of NULL: a replication thread stopped).
    pub value: Option<i64>,
    /// The replica's GTID position (`@@gtid_current_pos`, MySQL's `@@gtid_executed`), lag only.
    pub gtid: Option<String>,
    pub error: Option<String>,
}

/// What the monitor knows of one server (hostname:port), whatever its hostgroups.
#[derive(Debug, Clone, Default)]
pub struct ServerFindings {
    pub hostname: String,
    pub port: u16,
    /// The last successful ping's round trip (µs).
    pub last_ping_us: Option<u64>,
    /// Failed monitor connects and pings (the server did not answer).
    pub connect_errors: u64,
    pub ping_errors: u64,
    /// The last replication lag read (seconds); `None`: unknown or NULL.
    pub replication_lag: Option<i64>,
    logs: [VecDeque<LogRow>; 4],
}

/// The monitor's findings, one place for every reader.
#[derive(Default)]
pub struct Findings {
    servers: Mutex<BTreeMap<String, ServerFindings>>,
    /// Bumped when a server's verdict (shunned or not) changes: the admin port's runtime table
    /// is rewritten when it sees a new value.
    verdicts: AtomicU64,
    /// When each server's refusal of the monitor login was last warned about.
    login_warned: Mutex<BTreeMap<String, Instant>>,
}

/// How often a server's refusal of the monitor login is warned about at most.
pub const LOGIN_WARN_EVERY: Duration = Duration::from_secs(60);

impl Findings {
    /// Adds `row` to `check`'s log of its server, keeping the latest `history` rows, and
    /// updates the server's summary.
    pub fn record(&self, check: Check, row: LogRow, history: usize) {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        let key = format!("{}:{}", row.hostname, row.port);
        let f =
            servers.entry(key).or_insert_with(|| ServerFindings { hostname: row.hostname.clone(), port: row.port, ..Default::default() });
        let failed = row.error.is_some();
        match check {
            Check::Connect if failed => f.connect_errors += 1,
            Check::Ping if failed => f.ping_errors += 1,
            Check::Ping => f.last_ping_us = Some(row.success_time_us),
            Check::ReplicationLag if !failed => f.replication_lag = row.value,
            _ => {}
        }
        let log = &mut f.logs[check.index()];
        while log.len() >= history.max(1) {
            log.pop_front();
        }
        log.push_back(row);
    }

    /// `check`'s log rows of every server, oldest first per server.
    pub fn log(&self, check: Check) -> Vec<LogRow> {
        let servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers.values().flat_map(|f| f.logs[check.index()].iter().cloned()).collect()
    }

    /// Every server's summary (without the logs).
    pub fn servers(&self) -> Vec<ServerFindings> {
        let servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers.values().map(|f| ServerFindings { logs: Default::default(), ..f.clone() }).collect()
    }

    /// Forgets the servers not in `names` (`host:port`): gone from the config.
    pub fn retain(&self, names: &[&str]) {
        self.servers.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| names.contains(&k.as_str()));
        self.login_warned.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| names.contains(&k.as_str()));
    }

    /// A server's verdict changed.
    pub fn verdict_changed(&self) {
        self.verdicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Changes with every verdict change.
    pub fn verdicts(&self) -> u64 {
        self.verdicts.load(Ordering::Relaxed)
    }

    /// Whether a refusal of the monitor login by `server` is to be warned about now (at most
    /// once per `LOGIN_WARN_EVERY` per server).
    pub fn warn_login(&self, server: &str) -> bool {
        let mut warned = self.login_warned.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match warned.get(server) {
            Some(at) if now.duration_since(*at) < LOGIN_WARN_EVERY => false,
            _ => {
                warned.insert(server.to_string(), now);
                true
            }
        }
    }

    /// The server accepted the monitor login: a later refusal is warned about at once.
    pub fn login_accepted(&self, server: &str) {
        self.login_warned.lock().unwrap_or_else(|p| p.into_inner()).remove(server);
    }
}

/// Now, in µs since the epoch (the logs' `time_start_us`).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(port: u16, error: Option<&str>) -> LogRow {
        LogRow {
            hostname: "db".into(),
            port,
            time_start_us: now_us(),
            success_time_us: if error.is_some() { 0 } else { 120 },
            value: None,
            gtid: None,
            error: error.map(String::from),
        }
    }

    #[test]
    fn logs_keep_the_latest_rows_per_server() {
        let f = Findings::default();
        for i in 0..10 {
            f.record(Check::Ping, row(1, (i % 2 == 0).then_some("down")), 3);
            f.record(Check::Ping, row(2, None), 3);
        }
        assert_eq!(f.log(Check::Ping).len(), 6, "3 rows for each of 2 servers");
        let s = f.servers();
        assert_eq!((s[0].ping_errors, s[0].last_ping_us), (5, Some(120)));
        f.retain(&["db:2"]);
        assert_eq!(f.log(Check::Ping).len(), 3);
        assert!(f.log(Check::Connect).is_empty());
    }

    #[test]
    fn login_warnings_are_throttled_per_server() {
        let f = Findings::default();
        assert!(f.warn_login("db:1"));
        assert!(!f.warn_login("db:1"), "not again within a minute");
        assert!(f.warn_login("db:2"));
        f.login_accepted("db:1");
        assert!(f.warn_login("db:1"), "a new refusal after an accepted login is said at once");
    }
}
