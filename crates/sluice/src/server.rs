//! The running proxy: state shared by all sessions, the workers that run them (either one
//! current-thread runtime per worker, or one work-stealing runtime), and start/stop.

use crate::config::{Config, RuntimeKind};
use crate::listener;
use crate::registry::Registry;
use crate::route::Hostgroups;
use crate::rules::{RuleError, RuleSet};
use crate::tls::RsaKeys;
use crate::users::{User, Users};
use proto::handshake::ServerGreeting;
use proto::CapabilityFlags;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

/// Read-mostly state every session sees. Nothing here is locked on the query path.
pub struct Shared {
    pub config: Config,
    pub hostgroups: Arc<Hostgroups>,
    /// The query rules in force; a reload swaps them, sessions pick the new set up at their
    /// next statement (in-flight statements finish under the old one).
    pub rules: Arc<arc_swap::ArcSwap<RuleSet>>,
    pub users: Users,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    rsa: OnceLock<Option<RsaKeys>>,
    pub registry: Registry,
    /// Prepared statements shared by every session (`pool::prepared`).
    pub statements: Arc<crate::pool::prepared::Registry>,
    profile: RwLock<Profile>,
    /// Stops the listeners and workers.
    pub shutdown: CancellationToken,
    /// Set at shutdown; sessions check it between commands.
    closing: std::sync::atomic::AtomicBool,
    /// Client connections open now.
    pub clients: AtomicUsize,
}

impl Shared {
    /// True once shutdown began: sessions end after their current statement.
    pub fn closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Begins shutdown: no new connections; idle sessions end now, busy ones after their statement.
    pub fn begin_shutdown(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Release);
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

    /// Compiles `rows` and puts them in force, or changes nothing and says which rule is wrong.
    /// Destinations are checked against the running hostgroups.
    pub fn load_rules(&self, rows: &[crate::config::QueryRuleRow]) -> Result<usize, RuleError> {
        let rules = RuleSet::new(rows, &|hg| self.hostgroups.has(hg))?;
        let n = rules.len();
        warn_inactive_columns(rows);
        self.rules.store(Arc::new(rules));
        Ok(n)
    }

    /// The RSA keys for caching_sha2_password without TLS, made on first use.
    pub fn rsa_keys(&self) -> Option<&RsaKeys> {
        self.rsa
            .get_or_init(|| {
                let r = match &self.config.tls.rsa_key {
                    Some(path) => RsaKeys::load(path),
                    None => RsaKeys::generate(),
                };
                r.map_err(|e| tracing::error!("RSA keys: {e:#}")).ok()
            })
            .as_ref()
    }

    /// Looks a login name up: config users, then the backend's accounts (reloaded when
    /// `reload` is set or the name is unknown, at most once per refresh interval).
    pub async fn find_user(&self, name: &str, client: IpAddr, reload: bool) -> Option<User> {
        if let Some(u) = self.users.configured(name) {
            return Some(u.clone());
        }
        let accounts = self.users.backend.as_ref()?;
        let found = self.users.from_backend(name, client);
        if found.is_some() && !reload {
            return found;
        }
        if accounts.reload(crate::monitor::load_accounts(self)).await {
            return self.users.from_backend(name, client);
        }
        found
    }
}

/// A running sluice. Dropping it does not stop it; call `shutdown`.
pub struct Server {
    pub shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds the listeners and starts the workers. Returns once clients can connect.
    pub fn start(config: Config) -> anyhow::Result<Server> {
        let hostgroups = Hostgroups::from_config(&config)?;
        let tls = if config.tls.enabled {
            Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(config.tls.cert.as_deref(), config.tls.key.as_deref())?))
        } else {
            None
        };
        let users = Users::from_config(&config);
        let listeners = config
            .listen
            .iter()
            .map(|a| listener::bind(*a).map_err(|e| anyhow::anyhow!("cannot listen on {a}: {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let addrs = listeners.iter().map(|l| l.local_addr()).collect::<Result<Vec<_>, _>>()?;
        warn_inactive_columns(&config.query_rules);
        let shared = Arc::new(Shared {
            rules: Arc::new(arc_swap::ArcSwap::new(config.rules.clone())),
            hostgroups: Arc::new(hostgroups),
            users,
            tls,
            rsa: OnceLock::new(),
            registry: Registry::default(),
            statements: Arc::new(crate::pool::prepared::Registry::new(config.pool.max_statements)),
            profile: RwLock::new(Profile::default()),
            shutdown: CancellationToken::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            config,
        });
        crate::monitor::probe_profile(&shared);
        let threads = match shared.config.proxy.runtime {
            RuntimeKind::PerCore => start_per_core(&shared, listeners)?,
            RuntimeKind::Steal => start_stealing(&shared, listeners)?,
        };
        tracing::info!(listen = ?addrs, workers = shared.config.workers, runtime = ?shared.config.proxy.runtime, "sluice started");
        Ok(Server { shared, addrs, threads })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, lets in-flight statements finish (up to the shutdown timeout), then
    /// closes every session and returns.
    pub fn shutdown(self) {
        self.shared.begin_shutdown();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Rule columns sluice accepts but does not act on yet: said once per load, not per query.
fn warn_inactive_columns(rows: &[crate::config::QueryRuleRow]) {
    for r in rows.iter().filter(|r| r.active) {
        let pending = [
            ("cache_ttl", r.cache_ttl.is_some_and(|v| v >= 0), "the result cache"),
            ("mirror_hostgroup", r.mirror_hostgroup.is_some_and(|v| v >= 0), "mirroring"),
            ("log", r.log.is_some_and(|v| v >= 0), "the query log"),
        ];
        for (column, set, feature) in pending {
            if set {
                tracing::warn!(rule_id = r.rule_id, "query rule column `{column}` is accepted but has no effect until {feature} lands");
            }
        }
    }
}

fn runtime_thread(name: String, f: impl FnOnce() + Send + 'static) -> anyhow::Result<JoinHandle<()>> {
    Ok(std::thread::Builder::new().name(name).spawn(f)?)
}

/// Waits for a worker's sessions after shutdown was asked, at most the shutdown timeout.
async fn drain(tracker: TaskTracker, shared: &Shared) {
    tracker.close();
    let _ = tokio::time::timeout(shared.config.shutdown_timeout(), tracker.wait()).await;
}

/// One current-thread runtime per worker; the acceptor hands each connection to the next
/// worker, where its session stays for its whole life.
fn start_per_core(shared: &Arc<Shared>, listeners: Vec<std::net::TcpListener>) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let mut senders = Vec::new();
    for w in 0..shared.config.workers {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        senders.push(tx);
        let shared = shared.clone();
        threads.push(runtime_thread(format!("sluice-worker-{w}"), move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("worker {w}: cannot build runtime: {e}"),
            };
            crate::pool::set_worker(w);
            rt.block_on(async move {
                let tracker = TaskTracker::new();
                tokio::spawn(maintain_pool(shared.clone(), w));
                loop {
                    tokio::select! {
                        _ = shared.shutdown.cancelled() => break,
                        next = rx.recv() => match next {
                            Some((std_stream, peer)) => match tokio::net::TcpStream::from_std(std_stream) {
                                Ok(s) => { tracker.spawn(crate::session::run(shared.clone(), s, peer)); }
                                Err(e) => tracing::warn!("worker {w}: {e}"),
                            },
                            None => break,
                        }
                    }
                }
                drain(tracker, &shared).await;
            });
        })?);
    }
    let shared = shared.clone();
    threads.push(runtime_thread("sluice-acceptor".into(), move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return tracing::error!("acceptor: cannot build runtime: {e}"),
        };
        rt.block_on(async move {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let hand_off = |stream: tokio::net::TcpStream, peer: SocketAddr| {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % senders.len();
                if let Ok(std_stream) = stream.into_std() {
                    let _ = senders[i].send((std_stream, peer));
                }
            };
            listener::accept_all(listeners, &shared.shutdown, hand_off).await;
        });
    })?);
    Ok(threads)
}

/// Keeps worker `shard`'s pooled connections fresh until shutdown.
async fn maintain_pool(shared: Arc<Shared>, shard: usize) {
    let settings = shared.config.pool.clone();
    crate::pool::maintain(shared.hostgroups.clone(), settings, shared.config.connect_timeout(), shard, shared.shutdown.clone()).await;
}

/// One multi-threaded work-stealing runtime with `workers` threads.
fn start_stealing(shared: &Arc<Shared>, listeners: Vec<std::net::TcpListener>) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let next_worker = Arc::new(AtomicUsize::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(shared.config.workers)
        .thread_name("sluice-worker")
        .on_thread_start(move || crate::pool::set_worker(next_worker.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
        .enable_all()
        .build()?;
    let shared = shared.clone();
    Ok(vec![runtime_thread("sluice-runtime".into(), move || {
        rt.block_on(async move {
            for w in 0..shared.config.workers {
                tokio::spawn(maintain_pool(shared.clone(), w));
            }
            let tracker = TaskTracker::new();
            let spawn = |stream: tokio::net::TcpStream, peer: SocketAddr| {
                tracker.spawn(crate::session::run(shared.clone(), stream, peer));
            };
            listener::accept_all(listeners, &shared.shutdown, spawn).await;
            drain(tracker.clone(), &shared).await;
        });
    })?])
}
