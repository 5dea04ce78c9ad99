//! ④ route: from a hostgroup to one of its servers (ONLINE ones below their max_connections,
//! chosen by weight). Each server owns its connection pool (⑤).

use crate::config::{Config, ServerStatus};
use crate::pool::{ServerPool, Waiters};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A backend server as the data path uses it.
#[derive(Clone)]
pub struct Server {
    /// Its place in `Hostgroups::servers()`.
    pub index: usize,
    pub hostgroup: u32,
    pub hostname: String,
    pub port: u16,
    /// `host:port`, the name in every message about this server (shared: sessions hand it to
    /// the registry at every hostgroup switch).
    pub name: Arc<str>,
    pub weight: u32,
    pub status: ServerStatus,
    pub max_connections: u32,
    /// Idle connections and the count of open ones (at most max_connections).
    pub pool: Arc<ServerPool>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Server {
    /// ONLINE: new statements may use it (OFFLINE_SOFT lets pinned sessions finish).
    pub fn accepts_new(&self) -> bool {
        self.status == ServerStatus::Online
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
    /// Spreads picks among equal weights without shared state per query: each pick reads
    /// a per-call counter; contention is only at connect time.
    next: AtomicU64,
}

impl Hostgroups {
    pub fn from_config(config: &Config) -> anyhow::Result<Hostgroups> {
        let mut rows: Vec<&crate::config::ServerRow> = config.servers.iter().collect();
        rows.sort_by_key(|s| s.hostgroup_id);
        let mut servers: Vec<Server> = Vec::new();
        let mut waiters = Arc::new(Waiters::default());
        for s in rows {
            let tls = if s.use_ssl { Some(crate::tls::client_config(s.ssl_ca.as_deref())?) } else { None };
            if servers.last().is_some_and(|l| l.hostgroup != s.hostgroup_id) {
                waiters = Arc::new(Waiters::default());
            }
            servers.push(Server {
                index: servers.len(),
                hostgroup: s.hostgroup_id,
                hostname: s.hostname.clone(),
                port: s.port,
                name: format!("{}:{}", s.hostname, s.port).into(),
                weight: s.weight,
                status: s.status,
                max_connections: s.max_connections,
                pool: Arc::new(ServerPool::new(s.max_connections, config.workers, waiters.clone())),
                tls,
            });
        }
        Ok(Hostgroups { servers, next: AtomicU64::new(0) })
    }

    /// The servers of `hostgroup`, or why there are none to use.
    pub fn group(&self, hostgroup: u32) -> Result<&[Server], NoServer> {
        let start = self.servers.partition_point(|s| s.hostgroup < hostgroup);
        let len = self.servers[start..].partition_point(|s| s.hostgroup == hostgroup);
        let group = &self.servers[start..start + len];
        if group.is_empty() {
            return Err(NoServer::NoSuchHostgroup(hostgroup));
        }
        if !group.iter().any(Server::accepts_new) {
            return Err(NoServer::NoneOnline(hostgroup));
        }
        Ok(group)
    }

    /// An ONLINE server of `hostgroup`, by weight (for sluice's own connections, which are
    /// not pooled).
    pub fn pick(&self, hostgroup: u32) -> Result<&Server, NoServer> {
        let group = self.group(hostgroup)?;
        self.by_weight(group.iter().filter(|s| s.accepts_new())).ok_or(NoServer::NoneOnline(hostgroup))
    }

    /// Reserves room for a new pooled connection on an ONLINE server of `group` that has room,
    /// chosen by weight among those.
    pub fn reserve_by_weight<'a>(&self, group: &'a [Server]) -> Option<&'a Server> {
        let room = || group.iter().filter(|s| s.accepts_new() && s.pool.open() < s.max_connections);
        // Room can vanish between the look and the reservation: try the others then.
        let first = self.by_weight(room())?;
        if first.pool.reserve() {
            return Some(first);
        }
        room().find(|s| s.pool.reserve())
    }

    /// One of `candidates`, each as likely as its weight (spread without shared state per
    /// query: a counter read at connect time only).
    fn by_weight<'a>(&self, candidates: impl Iterator<Item = &'a Server> + Clone) -> Option<&'a Server> {
        let total: u64 = candidates.clone().map(|s| s.weight.max(1) as u64).sum();
        if total == 0 {
            return None;
        }
        let mut ticket = self.next.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15) % total;
        for s in candidates {
            let w = s.weight.max(1) as u64;
            if ticket < w {
                return Some(s);
            }
            ticket -= w;
        }
        None
    }

    pub fn has(&self, hostgroup: u32) -> bool {
        self.servers.iter().any(|s| s.hostgroup == hostgroup)
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    pub fn get(&self, index: usize) -> Option<&Server> {
        self.servers.get(index)
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
