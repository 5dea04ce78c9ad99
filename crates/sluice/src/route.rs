//! ④ route: from a hostgroup to one of its servers (ONLINE ones below their max_connections,
//! chosen by weight).

use crate::config::{Config, ServerStatus};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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
    pub status: ServerStatus,
    pub max_connections: u32,
    /// Backend connections open to this server now (counted at connect and close only).
    pub open: Arc<AtomicU32>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (hostgroup {})", self.name, self.hostgroup)
    }
}

/// Servers grouped by hostgroup.
pub struct Hostgroups {
    servers: Vec<Server>,
    /// Spreads picks among equal weights without shared state per query: each pick reads
    /// a per-call counter; contention is only at connect time.
    next: AtomicU64,
}

impl Hostgroups {
    pub fn from_config(config: &Config) -> anyhow::Result<Hostgroups> {
        let mut servers = Vec::new();
        for s in &config.servers {
            let tls = if s.use_ssl { Some(crate::tls::client_config(s.ssl_ca.as_deref())?) } else { None };
            servers.push(Server {
                hostgroup: s.hostgroup_id,
                hostname: s.hostname.clone(),
                port: s.port,
                name: format!("{}:{}", s.hostname, s.port).into(),
                weight: s.weight,
                status: s.status,
                max_connections: s.max_connections,
                open: Arc::new(AtomicU32::new(0)),
                tls,
            });
        }
        Ok(Hostgroups { servers, next: AtomicU64::new(0) })
    }

    /// An ONLINE server of `hostgroup` with room for a connection, chosen by weight.
    pub fn pick(&self, hostgroup: u32) -> Result<&Server, NoServer> {
        let online = || self.servers.iter().filter(|s| s.hostgroup == hostgroup && s.status == ServerStatus::Online);
        if online().next().is_none() {
            return Err(if self.has(hostgroup) { NoServer::NoneOnline(hostgroup) } else { NoServer::NoSuchHostgroup(hostgroup) });
        }
        let room = || online().filter(|s| s.open.load(Ordering::Relaxed) < s.max_connections);
        let total: u64 = room().map(|s| s.weight.max(1) as u64).sum();
        if total == 0 {
            return Err(NoServer::AllFull(hostgroup));
        }
        let mut ticket = self.next.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15) % total;
        for s in room() {
            let w = s.weight.max(1) as u64;
            if ticket < w {
                return Ok(s);
            }
            ticket -= w;
        }
        Err(NoServer::AllFull(hostgroup))
    }

    pub fn has(&self, hostgroup: u32) -> bool {
        self.servers.iter().any(|s| s.hostgroup == hostgroup)
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    pub fn find(&self, name: &str) -> Option<&Server> {
        self.servers.iter().find(|s| &*s.name == name)
    }
}

/// Why no server of a hostgroup can take a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoServer {
    #[error("hostgroup {0} has no servers")]
    NoSuchHostgroup(u32),
    #[error("hostgroup {0} has no ONLINE server")]
    NoneOnline(u32),
    #[error("every ONLINE server of hostgroup {0} is at its max_connections")]
    AllFull(u32),
}
