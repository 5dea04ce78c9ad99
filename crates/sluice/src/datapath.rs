//! The data path's handle (①–⑥): what every client session reads — the configuration in
//! force (`Snapshot`), the session registry, the shared prepared statements, the statistics
//! sink, the greeting profile and the stop signal. Nothing here is locked on the query path,
//! and nothing here knows the control side (admin, http, reload) or the runtime.

use crate::accounts::BackendAccounts;
use crate::config::RuntimeKind;
use crate::registry::Registry;
pub use crate::snapshot::Snapshot;
use crate::tls::RsaKeys;
use proto::handshake::ServerGreeting;
use proto::CapabilityFlags;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use tokio_util::sync::CancellationToken;

/// What clients are told about "the server": learned from the backends' greetings.
#[derive(Clone, Debug)]
pub struct Profile {
    pub server_version: String,
    pub capabilities: CapabilityFlags,
    pub mariadb_caps: u32,
    pub collation: u8,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            server_version: "5.5.5-10.11.0-MariaDB-sluice".into(),
            capabilities: crate::pool::backend::passthrough_capabilities(),
            mariadb_caps: 0,
            collation: 45,
        }
    }
}

/// The data path's handle, shared by every session.
pub struct DataPath {
    /// The configuration in force; a reload swaps it.
    pub live: Arc<arc_swap::ArcSwap<Snapshot>>,
    /// The backend's own accounts, while `proxy.backend_users` is on.
    pub backend_accounts: BackendAccounts,
    /// Failed logins per client address and user.
    pub throttle: crate::throttle::LoginThrottle,
    rsa: OnceLock<Option<RsaKeys>>,
    pub registry: Registry,
    /// Prepared statements shared by every session (`pool::prepared`).
    pub statements: Arc<crate::pool::prepared::Registry>,
    profile: RwLock<Profile>,
    /// Cancelled at shutdown: listeners, idle sessions and side tasks stop.
    pub shutdown: CancellationToken,
    /// Set at shutdown; sessions check it between commands.
    closing: AtomicBool,
    /// Logged-in client connections open now.
    pub clients: AtomicUsize,
    /// Client connections still in their handshake.
    pub handshakes: crate::listener::Handshakes,
    /// The backend's max_allowed_packet, learned on the first client login (0: not yet);
    /// the default of `[proxy] max_allowed_packet`.
    pub backend_max_packet: AtomicUsize,
    /// Statistics: per-worker counters merged when read.
    pub stats: Arc<crate::stats::Stats>,
    /// The result cache (query rules' cache_ttl), kept across reloads.
    pub cache: Arc<crate::cache::QueryCache>,
    /// The server-time probe (`[probe]`): read after each statement's reply while enabled.
    pub probe: Arc<crate::probe::Probe>,
    /// What the monitor found (its logs and per-server summaries), for the admin and HTTP sides.
    pub health: Arc<crate::health::Findings>,
    /// Mirroring's bounds (query rules' mirror_hostgroup), kept across reloads.
    pub mirror: Arc<crate::mirror::Mirror>,
    /// Logged-in sessions per user, for `mysql_users.max_connections`.
    pub user_connections: Arc<crate::limits::UserConnections>,
    /// The runtime kind, fixed at start (per-core workers take connections only from their
    /// own pool shard).
    pub runtime: RuntimeKind,
    /// The io_uring data path's counters (per-core workers' rings; zero on epoll).
    pub io_uring: Arc<crate::net::uring::Totals>,
}

impl DataPath {
    pub fn new(snapshot: Snapshot) -> DataPath {
        let config = &snapshot.config;
        let stats = Arc::new(crate::stats::Stats::new(&config.stats));
        let cache = crate::cache::QueryCache::new(&config.cache, stats.clone());
        cache.apply(&config.cache, config.rules_cache());
        DataPath {
            statements: Arc::new(crate::pool::prepared::Registry::new(config.pool.max_statements)),
            cache: Arc::new(cache),
            mirror: Arc::new(crate::mirror::Mirror::new(&config.mirror)),
            user_connections: Arc::default(),
            probe: Arc::default(),
            stats,
            health: Arc::default(),
            runtime: config.proxy.runtime,
            io_uring: Arc::default(),
            live: Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            backend_accounts: BackendAccounts::default(),
            throttle: Default::default(),
            rsa: OnceLock::new(),
            registry: Registry::default(),
            profile: RwLock::new(Profile::default()),
            shutdown: CancellationToken::new(),
            closing: AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            handshakes: Default::default(),
            backend_max_packet: AtomicUsize::new(0),
        }
    }

    /// The configuration in force now (cheap; for paths outside a session's command loop).
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.live.load()
    }

    /// True once shutdown began: sessions end after their current statement.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Tells the data path to stop: idle sessions end now, busy ones after their statement.
    pub fn begin_shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        self.shutdown.cancel();
        self.registry.close_all();
    }

    pub fn profile(&self) -> Profile {
        self.profile.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// Keeps the greeting in line with what backends actually say (checked at connect only).
    pub fn learn_profile(&self, g: &ServerGreeting) {
        let changed = self
            .profile
            .read()
            .is_ok_and(|p| p.server_version != g.server_version || p.capabilities != g.capabilities || p.mariadb_caps != g.mariadb_caps);
        if changed {
            if let Ok(mut p) = self.profile.write() {
                *p = Profile {
                    server_version: g.server_version.clone(),
                    capabilities: g.capabilities,
                    mariadb_caps: g.mariadb_caps,
                    collation: g.collation,
                };
            }
        }
    }

    /// The RSA keys for caching_sha2_password without TLS, made on first use.
    pub fn rsa_keys(&self) -> Option<&RsaKeys> {
        self.rsa
            .get_or_init(|| {
                let r = match &self.snapshot().config.tls.rsa_key {
                    Some(path) => RsaKeys::load(path),
                    None => RsaKeys::generate(),
                };
                r.map_err(|e| tracing::error!("RSA keys: {e:#}")).ok()
            })
            .as_ref()
    }
}
