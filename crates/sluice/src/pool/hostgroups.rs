//! ⑤ pool: the servers of each hostgroup, and which one a statement uses: among ONLINE ones
//! the monitor has not shunned (below their max_connections), the one with the fewest
//! statements running per unit of weight. Each server owns its connection pool.
//!
//! `Hostgroups` is part of the config snapshot and rebuilt at each reload; a server that stays
//! (same hostgroup, host and port) keeps its pool and its running count, whose status and
//! max_connections the reload updates in place so connections already checked out see them
//! when they come back.

use crate::config::{Config, ServerStatus};

use super::{Generations, Health, ServerPool, Waiters};
use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Where a statement goes first: of the servers of `group` that take new statements (ONLINE,
/// not shunned), the one with the fewest statements running per unit of weight, ties drawn by
/// weight (`pick_usable`). A server kept busy by long statements gets new ones last; idle
/// servers share them by weight, and a server back from a drain gets its share at once.
pub fn pick_online(group: &[Server]) -> Option<&Server> {
    pick_usable(group, Server::accepts_new)
}

/// Of the servers of `group` that are `usable` (ONLINE, not shunned, and not one a connect
/// just failed on), the one with the fewest statements running per unit of weight (MaxScale's
/// LEAST_CURRENT_OPERATIONS), ties drawn by weight.
pub fn pick_usable(group: &[Server], usable: impl Fn(&Server) -> bool) -> Option<&Server> {
    let usable = || group.iter().filter(|s| usable(s));
    if group.len() == 1 {
        // Nothing to compare (a writer hostgroup, mostly): no counter is read.
        return usable().next();
    }
    // (running, weight) of a server; a/b < c/d compared as a·d < c·b, with no division.
    let load = |s: &Server| (u64::from(s.running.0.load(Ordering::Relaxed)), u64::from(s.weight.max(1)));
    let mut least: Option<(&Server, (u64, u64))> = None;
    for s in usable() {
        let (r, w) = load(s);
        if least.is_none_or(|(_, (lr, lw))| r * lw < lr * w) {
            least = Some((s, (r, w)));
        }
    }
    let (first, (lr, lw)) = least?;
    // The counts move meanwhile: if no server ties any more, the one found stands.
    by_weight(usable().filter(|s| {
        let (r, w) = load(s);
        r * lw == lr * w
    }))
    .or(Some(first))
}

/// One of `candidates`, each as likely as its weight (0 counts as 1).
fn by_weight<'a>(candidates: impl Iterator<Item = &'a Server> + Clone) -> Option<&'a Server> {
    let total: u64 = candidates.clone().map(|s| u64::from(s.weight.max(1))).sum();
    if total == 0 {
        return None;
    }
    let mut ticket = draw() % total;
    for s in candidates {
        let w = u64::from(s.weight.max(1));
        if ticket < w {
            return Some(s);
        }
        ticket -= w;
    }
    None
}

thread_local! {
    /// xorshift64 state, seeded per thread (never 0).
    static DRAW: Cell<u64> = Cell::new(RandomState::new().build_hasher().finish() | 1);
}

/// A pseudo-random number from this thread's own generator: a pick per statement shares no
/// cache line between workers, as a global counter would.
fn draw() -> u64 {
    DRAW.with(|c| {
        let mut x = c.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.set(x);
        x
    })
}

/// Statements running on one server now (sluice's own causal waits too), across workers and
/// snapshots: what `pick_online` compares.
#[derive(Debug, Default)]
pub struct Running(AtomicU32);

/// One statement counted as running on its server until dropped.
pub struct RunningStatement(Arc<Running>);

impl Drop for RunningStatement {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A backend server as the data path uses it.
#[derive(Clone)]
pub struct Server {
    pub hostgroup: u32,
    pub hostname: String,
    pub port: u16,
    /// `host:port`, the name in every message about this server (shared: sessions hand it to
    /// the registry at every hostgroup switch).
    pub name: Arc<str>,
    pub weight: u32,
    /// Seconds of replication lag above which the monitor shuns it in a reader hostgroup; 0: never.
    pub max_replication_lag: u32,
    /// Idle connections, the count of open ones (at most max_connections), and the server's
    /// live status: shared by every snapshot the server is in.
    pub pool: Arc<ServerPool>,
    /// Kept with the pool across reloads: statements in flight end on the old snapshot.
    running: Arc<Running>,
    /// The only server of its hostgroup: nothing compares its running count, so none is kept.
    alone: bool,
    /// Its hostgroup is no replication pair's reader hostgroup (whose reads the writer takes
    /// when no replica can serve): when the monitor has shunned every server of it, clients
    /// still try them (`Hostgroups::group`), as ProxySQL does.
    last_resort: bool,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Server {
    /// Counts a statement as running here until the returned value is dropped (not on a
    /// server alone in its hostgroup, a writer mostly: no choice reads it there).
    pub fn run_statement(&self) -> Option<RunningStatement> {
        if self.alone {
            return None;
        }
        self.running.0.fetch_add(1, Ordering::Relaxed);
        Some(RunningStatement(self.running.clone()))
    }

    /// ONLINE and not shunned by the monitor: new statements may use it (OFFLINE_SOFT and
    /// SHUNNED let pinned sessions finish).
    pub fn accepts_new(&self) -> bool {
        self.pool.accepts_new()
    }

    /// ONLINE but shunned by the monitor for failed connects or pings (not for replication
    /// lag), in a hostgroup whose clients have nowhere else to go: worth a try when no server
    /// of the hostgroup accepts new statements. The monitor may not have seen it come back yet
    /// (it checks every few seconds; a restart takes less).
    pub fn last_resort(&self) -> bool {
        self.last_resort && self.pool.status() == ServerStatus::Online && self.pool.health() == Health::Shunned
    }

    /// May take new statements: `accepts_new`, or, when its hostgroup has only shunned servers
    /// (`Hostgroups::only_last_resort`), `last_resort`.
    pub fn usable(&self, only_last_resort: bool) -> bool {
        if only_last_resort {
            self.last_resort()
        } else {
            self.accepts_new()
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (hostgroup {})", self.name, self.hostgroup)
    }
}

/// Servers grouped by hostgroup (each group contiguous, in file order).
pub struct Hostgroups {
    servers: Vec<Server>,
    /// The privilege epoch every server's pool shares (`ServerPool::epoch`): a change through
    /// one server reaches the others by replication, and their connections too logged in before.
    generations: Arc<Generations>,
}

impl Hostgroups {
    /// The privilege epoch, and the epochs open sessions logged in under (kept across reloads).
    pub fn generations(&self) -> &Arc<Generations> {
        &self.generations
    }

    pub fn from_config(config: &Config) -> anyhow::Result<Hostgroups> {
        Hostgroups::rebuild(config, None)
    }

    /// The servers of `config`; those also in `old` keep their pool (and hostgroups their
    /// waiters). Nothing in `old` changes: `adopt` puts the new statuses and limits in force.
    pub fn rebuild(config: &Config, old: Option<&Hostgroups>) -> anyhow::Result<Hostgroups> {
        let mut rows: Vec<&crate::config::ServerRow> = config.servers.iter().collect();
        rows.sort_by_key(|s| s.hostgroup_id);
        let mut servers: Vec<Server> = Vec::new();
        let mut waiters = Arc::new(Waiters::default());
        let generations = old.map(|o| o.generations.clone()).unwrap_or_default();
        for s in rows {
            let tls = if s.use_ssl { Some(crate::tls::client_config(s.ssl_ca.as_deref())?) } else { None };
            let previous = old.and_then(|o| o.find(s.hostgroup_id, &s.hostname, s.port));
            if servers.last().is_none_or(|l| l.hostgroup != s.hostgroup_id) {
                let group_waiters = old.and_then(|o| o.group_members(s.hostgroup_id).first().map(|s| s.pool.waiters.clone()));
                waiters = group_waiters.unwrap_or_default();
            }
            let (pool, running) = match previous {
                Some(p) => (p.pool.clone(), p.running.clone()),
                None => {
                    let pool = ServerPool::new(s.status, s.max_connections, config.workers, waiters.clone(), generations.clone());
                    (Arc::new(pool), Arc::default())
                }
            };
            servers.push(Server {
                hostgroup: s.hostgroup_id,
                hostname: s.hostname.clone(),
                port: s.port,
                name: crate::config::server_address(&s.hostname, s.port).into(),
                weight: s.weight,
                max_replication_lag: s.max_replication_lag,
                pool,
                running,
                alone: false,
                last_resort: !config.replication_hostgroups.iter().any(|r| r.reader_hostgroup == s.hostgroup_id),
                tls,
            });
        }
        for group in servers.chunk_by_mut(|a, b| a.hostgroup == b.hostgroup) {
            if let [only] = group {
                only.alone = true;
            }
        }
        Ok(Hostgroups { servers, generations })
    }

    /// Puts this (new) snapshot's server statuses and limits in force, and retires the servers
    /// of `old` that are gone: their idle connections close, busy ones close when returned.
    pub fn adopt(&self, config: &Config, old: &Hostgroups) {
        for row in &config.servers {
            if let Some(s) = self.find(row.hostgroup_id, &row.hostname, row.port) {
                s.pool.set_limits(row.status, row.max_connections);
                if row.status != ServerStatus::Online {
                    // Drained: what is idle closes now, what is in use when it comes back.
                    s.pool.close_idle();
                }
            }
        }
        for s in old.servers() {
            if self.find(s.hostgroup, &s.hostname, s.port).is_none() {
                s.pool.set_limits(ServerStatus::OfflineHard, s.pool.max());
                s.pool.close_idle();
            }
        }
    }

    fn find(&self, hostgroup: u32, hostname: &str, port: u16) -> Option<&Server> {
        self.group_members(hostgroup).iter().find(|s| s.hostname == hostname && s.port == port)
    }

    /// The servers of `hostgroup`, whatever their status.
    fn group_members(&self, hostgroup: u32) -> &[Server] {
        let start = self.servers.partition_point(|s| s.hostgroup < hostgroup);
        let len = self.servers[start..].partition_point(|s| s.hostgroup == hostgroup);
        &self.servers[start..start + len]
    }

    /// The servers of `hostgroup`, or why there are none to use.
    pub fn group(&self, hostgroup: u32) -> Result<&[Server], NoServer> {
        let group = self.group_members(hostgroup);
        if group.is_empty() {
            return Err(NoServer::NoSuchHostgroup(hostgroup));
        }
        if !group.iter().any(|s| s.accepts_new() || s.last_resort()) {
            return Err(NoServer::NoneOnline(hostgroup));
        }
        Ok(group)
    }

    /// Whether a checkout in `group` (from `group`) must use its `last_resort` servers: none
    /// accepts new statements.
    pub fn only_last_resort(group: &[Server]) -> bool {
        !group.iter().any(Server::accepts_new)
    }

    /// An ONLINE server of `hostgroup`, by weight, for sluice's own connections (not pooled,
    /// and carrying no client statement: running counts do not concern them).
    pub fn pick(&self, hostgroup: u32) -> Result<&Server, NoServer> {
        let group = self.group(hostgroup)?;
        let last_resort = Hostgroups::only_last_resort(group);
        by_weight(group.iter().filter(|s| s.usable(last_resort))).ok_or(NoServer::NoneOnline(hostgroup))
    }

    /// Reserves room for a new pooled connection on a `usable` server of `group` that has
    /// room, chosen by weight among those: plain weight, as this chooses where a connection
    /// opens, not where a statement runs (`pick_usable` chose that first, and only when its
    /// server has no room does a checkout come here).
    pub fn reserve_by_weight<'a>(&self, group: &'a [Server], usable: impl Fn(&Server) -> bool) -> Option<&'a Server> {
        let room = || group.iter().filter(|s| usable(s) && s.pool.open() < s.pool.max());
        // Room can vanish between the look and the reservation: try the others then.
        let first = by_weight(room())?;
        if first.pool.reserve() {
            return Some(first);
        }
        room().find(|s| s.pool.reserve())
    }

    pub fn has(&self, hostgroup: u32) -> bool {
        self.servers.iter().any(|s| s.hostgroup == hostgroup)
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }
}

/// Why no server of a hostgroup can take a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoServer {
    #[error("hostgroup {0} has no servers")]
    NoSuchHostgroup(u32),
    #[error("hostgroup {0} has no ONLINE server")]
    NoneOnline(u32),
    #[error("no connection to hostgroup {hostgroup} came free within {waited_ms} ms (every ONLINE server is at its max_connections)")]
    Exhausted { hostgroup: u32, waited_ms: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(port: u16, weight: u32) -> Server {
        let pool = ServerPool::new(ServerStatus::Online, 10, 1, Arc::default(), Arc::default());
        let name = format!("127.0.0.1:{port}").into();
        Server {
            hostgroup: 20,
            hostname: "127.0.0.1".into(),
            port,
            name,
            weight,
            max_replication_lag: 0,
            pool: Arc::new(pool),
            running: Arc::default(),
            alone: false,
            last_resort: false,
            tls: None,
        }
    }

    fn picks(group: &[Server]) -> std::collections::BTreeMap<u16, u32> {
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..1000 {
            *seen.entry(pick_online(group).map_or(0, |s| s.port)).or_insert(0) += 1;
        }
        seen
    }

    #[test]
    fn the_least_busy_server_per_weight_gets_the_statement() {
        let group = [server(1, 1), server(2, 1)];
        let idle = picks(&group);
        assert!(idle[&1] > 350 && idle[&2] > 350, "idle servers share: {idle:?}");
        let busy = group[0].run_statement();
        assert_eq!(picks(&group), [(2, 1000)].into(), "the busy one gets none");
        let both = group[1].run_statement();
        let tied = picks(&group);
        assert!(tied[&1] > 350 && tied[&2] > 350, "as busy: drawn again: {tied:?}");
        drop((busy, both));
        assert_eq!(group[0].running.0.load(Ordering::Relaxed), 0, "counted down when done");

        // Weight 3 against 1: three running there weigh as one here; idle, drawn 3 to 1.
        let group = [server(1, 3), server(2, 1)];
        let idle = picks(&group);
        assert!(idle[&1] > 650 && idle[&2] > 150, "by weight: {idle:?}");
        let running: Vec<_> = (0..2).map(|_| group[0].run_statement()).collect();
        let one = group[1].run_statement();
        assert_eq!(picks(&group), [(1, 1000)].into(), "2/3 < 1/1");
        drop((running, one));
        // Only ONLINE servers count.
        group[0].pool.set_limits(ServerStatus::OfflineSoft, 10);
        assert_eq!(picks(&group), [(2, 1000)].into());
    }

    #[test]
    fn only_servers_that_share_a_hostgroup_count_running_statements() {
        let text = "[[mysql_users]]\nusername = \"u\"\npassword = \"\"\ndefault_hostgroup = 10\n\
            [[mysql_servers]]\nhostgroup_id = 10\nhostname = \"a\"\n\
            [[mysql_servers]]\nhostgroup_id = 20\nhostname = \"b\"\n\
            [[mysql_servers]]\nhostgroup_id = 20\nhostname = \"c\"\n";
        let config = crate::config::FileConfig::parse(text).unwrap().validate(None, Some(text)).unwrap();
        let hostgroups = Hostgroups::from_config(&config).unwrap();
        let counted: Vec<bool> = hostgroups.servers().iter().map(|s| s.run_statement().is_some()).collect();
        assert_eq!(counted, [false, true, true], "the writer alone in 10 keeps no count");
    }
}
