//! The running proxy: state shared by all sessions, the workers that run them (either one
//! current-thread runtime per worker, or one work-stealing runtime), and start/stop.

use crate::config::{Config, RuntimeKind};
use crate::listener::{HandOff, Kind, Listeners};
use crate::registry::Registry;
use crate::reload::Snapshot;
use crate::tls::RsaKeys;
use crate::users::BackendAccounts;
use proto::handshake::ServerGreeting;
use proto::CapabilityFlags;
use std::net::SocketAddr;
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
    /// The configuration in force; a reload swaps it (`reload`), sessions pick the new one up
    /// at their next command (in-flight statements finish under the old one).
    pub live: Arc<arc_swap::ArcSwap<Snapshot>>,
    /// Serializes reloads (never taken on the query path).
    pub(crate) reload_lock: std::sync::Mutex<()>,
    pub listeners: Listeners,
    /// The backend's own accounts, while `proxy.backend_users` is on.
    pub backend_accounts: BackendAccounts,
    /// Failed logins per client address and user.
    pub throttle: crate::throttle::LoginThrottle,
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
    /// Statistics: per-worker counters merged when read.
    pub stats: Arc<crate::stats::Stats>,
    /// The admin port's tables (ProxySQL's memory / disk / runtime layers).
    pub admin: crate::admin::exec::Admin,
    /// Worker threads of the runtime taking new sessions (a reload may change it, `Generation`).
    workers: AtomicUsize,
    /// The runtime kind, fixed at start.
    pub runtime: RuntimeKind,
    /// Work-stealing runtimes started by reloads that changed the worker count, joined at shutdown.
    generations: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Retires the runtime taking new sessions when the worker count changes.
    current_generation: std::sync::Mutex<Option<Generation>>,
    /// This `Shared` itself, for sessions started by a reload.
    me: OnceLock<std::sync::Weak<Shared>>,
}

impl Shared {
    /// Worker threads of the runtime taking new sessions.
    pub fn workers(&self) -> usize {
        self.workers.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes the worker count (work-stealing runtime): a new runtime with `workers` threads
    /// takes every new connection from now on; the old one keeps its sessions until they end,
    /// and its backend connections (whose sockets its I/O driver serves) until they close:
    /// they are not pooled again. Nothing is dropped.
    pub(crate) fn change_workers(&self, workers: usize) -> anyhow::Result<()> {
        let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else { anyhow::bail!("sluice is stopping") };
        let thread = start_generation(&me, workers)?;
        self.generations.lock().unwrap_or_else(|p| p.into_inner()).push(thread);
        tracing::info!(workers, "worker count changed: new sessions run on the new workers; existing ones finish where they are");
        Ok(())
    }

    /// Runtimes started by worker-count changes that are still running (a retired one stops
    /// once its sessions and connections are gone).
    pub fn later_runtimes_running(&self) -> usize {
        self.generations.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|t| !t.is_finished()).count()
    }

    /// The configuration in force now (cheap; for paths outside a session's command loop).
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.live.load()
    }

    /// True once shutdown began: sessions end after their current statement.
    pub fn closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Begins shutdown: no new connections; idle sessions end now, busy ones after their statement.
    pub fn begin_shutdown(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Release);
        self.shutdown.cancel();
        self.listeners.close_all();
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

/// A running sluice. Dropping it does not stop it; call `shutdown`.
pub struct Server {
    pub shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds the listeners and starts the workers. Returns once clients can connect.
    pub fn start(config: Config) -> anyhow::Result<Server> {
        Server::start_with(config, &crate::admin::startup::StartOptions::default())
    }

    /// `start`, with the admin store's start-up choices: the configuration saved in the
    /// datadir wins over `config` unless `options.initial` (`admin::startup`).
    pub fn start_with(config: Config, options: &crate::admin::startup::StartOptions) -> anyhow::Result<Server> {
        let (admin, config) = crate::admin::startup::open(config, options)?;
        let (workers, runtime) = (config.workers, config.proxy.runtime);
        warn_inactive_columns(&config.query_rules);
        let stats_settings = config.stats.clone();
        let listeners = Listeners::default();
        listeners.reconcile(&config).map_err(|e| anyhow::anyhow!(e))?;
        let shared = Arc::new(Shared {
            statements: Arc::new(crate::pool::prepared::Registry::new(config.pool.max_statements)),
            live: Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::build(config, None)?)),
            reload_lock: std::sync::Mutex::new(()),
            listeners,
            backend_accounts: BackendAccounts::default(),
            throttle: Default::default(),
            rsa: OnceLock::new(),
            registry: Registry::default(),
            profile: RwLock::new(Profile::default()),
            shutdown: CancellationToken::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            stats: Arc::new(crate::stats::Stats::new(&stats_settings)),
            admin,
            workers: AtomicUsize::new(workers),
            runtime,
            generations: std::sync::Mutex::new(Vec::new()),
            current_generation: std::sync::Mutex::new(None),
            me: OnceLock::new(),
        });
        let _ = shared.me.set(Arc::downgrade(&shared));
        crate::monitor::probe_profile(&shared);
        let threads = match runtime {
            RuntimeKind::PerCore => start_per_core(&shared)?,
            RuntimeKind::Steal => vec![start_generation(&shared, workers)?],
        };
        tracing::info!(listen = ?shared.listeners.addrs(Kind::Client), workers, ?runtime, "sluice started");
        Ok(Server { shared, threads })
    }

    /// The first client port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs()[0]
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared.listeners.addrs(Kind::Client)
    }

    /// Stops accepting, lets in-flight statements finish (up to the shutdown timeout), then
    /// closes every session and returns.
    pub fn shutdown(self) {
        self.shared.begin_shutdown();
        let later: Vec<JoinHandle<()>> = std::mem::take(&mut *self.shared.generations.lock().unwrap_or_else(|p| p.into_inner()));
        for t in self.threads.into_iter().chain(later) {
            let _ = t.join();
        }
    }
}

/// Rule columns sluice accepts but does not act on yet: said once per load, not per query.
pub(crate) fn warn_inactive_columns(rows: &[crate::config::QueryRuleRow]) {
    for r in rows.iter().filter(|r| r.active) {
        let pending = [
            ("cache_ttl", r.cache_ttl.is_some_and(|v| v >= 0), "the result cache"),
            ("mirror_hostgroup", r.mirror_hostgroup.is_some_and(|v| v >= 0), "mirroring"),
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
    let _ = tokio::time::timeout(shared.snapshot().config.shutdown_timeout(), tracker.wait()).await;
}

/// One current-thread runtime per worker; the acceptor thread hands each connection to the
/// next worker, where its session stays for its whole life.
fn start_per_core(shared: &Arc<Shared>) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let mut senders = Vec::new();
    for w in 0..shared.workers() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        senders.push(tx);
        let shared = shared.clone();
        threads.push(runtime_thread(format!("sluice-worker-{w}"), move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("worker {w}: cannot build runtime: {e}"),
            };
            crate::pool::set_worker(w, None);
            rt.block_on(async move {
                let tracker = TaskTracker::new();
                tokio::spawn(crate::pool::maintain(shared.clone(), w, shared.shutdown.clone()));
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
        let next = AtomicUsize::new(0);
        let hand_off: HandOff = Arc::new(move |stream: tokio::net::TcpStream, peer: SocketAddr| {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % senders.len();
            if let Ok(std_stream) = stream.into_std() {
                let _ = senders[i].send((std_stream, peer));
            }
        });
        let side = TaskTracker::new();
        shared.listeners.run(rt.handle().clone(), shared.shutdown.clone(), hand_offs(&shared, hand_off, &side));
        rt.block_on(async {
            tokio::spawn(sample_rates(shared.clone(), shared.shutdown.clone()));
            shared.shutdown.cancelled().await;
            drain(side, &shared).await;
        });
    })?);
    Ok(threads)
}

/// A work-stealing runtime taking new sessions, until a worker-count change retires it.
struct Generation {
    retire: CancellationToken,
    tag: Arc<crate::pool::RuntimeTag>,
}

/// Starts a work-stealing runtime with `workers` threads and makes it take every new
/// connection (retiring the one that did). Its thread runs until shutdown, or once retired,
/// until its sessions have ended and the backend connections opened on it are closed.
fn start_generation(shared: &Arc<Shared>, workers: usize) -> anyhow::Result<JoinHandle<()>> {
    let tag = Arc::new(crate::pool::RuntimeTag::default());
    let next_worker = Arc::new(AtomicUsize::new(0));
    let thread_tag = tag.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("sluice-worker")
        .on_thread_start(move || {
            crate::pool::set_worker(next_worker.fetch_add(1, std::sync::atomic::Ordering::Relaxed), Some(thread_tag.clone()))
        })
        .enable_all()
        .build()?;
    let retire = CancellationToken::new();
    let tracker = TaskTracker::new();
    let (sessions, spawner) = (tracker.clone(), shared.clone());
    let hand_off: HandOff = Arc::new(move |stream: tokio::net::TcpStream, peer: SocketAddr| {
        sessions.spawn(crate::session::run(spawner.clone(), stream, peer));
    });
    shared.listeners.run(rt.handle().clone(), shared.shutdown.clone(), hand_offs(shared, hand_off, &tracker));
    let previous = shared
        .current_generation
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .replace(Generation { retire: retire.clone(), tag: tag.clone() });
    if let Some(old) = previous {
        old.tag.retired.store(true, std::sync::atomic::Ordering::Release);
        old.retire.cancel();
    }
    shared.workers.store(workers, std::sync::atomic::Ordering::Relaxed);
    let shared = shared.clone();
    runtime_thread("sluice-runtime".into(), move || {
        rt.block_on(async move {
            for w in 0..workers {
                tokio::spawn(crate::pool::maintain(shared.clone(), w, retire.clone()));
            }
            tokio::spawn(sample_rates(shared.clone(), retire.clone()));
            tokio::select! {
                _ = shared.shutdown.cancelled() => drain(tracker, &shared).await,
                _ = retire.cancelled() => {
                    tracker.close();
                    tokio::select! {
                        _ = shared.shutdown.cancelled() => drain(tracker, &shared).await,
                        _ = async {
                            tracker.wait().await;
                            while tag.open.load(std::sync::atomic::Ordering::Acquire) > 0 {
                                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            }
                        } => tracing::info!(workers, "retired workers stopped (their sessions ended)"),
                    }
                }
            }
        });
    })
}

/// Where each kind of port's connections go: client sessions to `clients`; admin sessions
/// and HTTP connections to tasks tracked by `side` (they end at shutdown like client sessions).
fn hand_offs(shared: &Arc<Shared>, clients: HandOff, side: &TaskTracker) -> Vec<(Kind, HandOff)> {
    let (admin_shared, admin_tasks) = (shared.clone(), side.clone());
    let admin: HandOff = Arc::new(move |stream, peer| {
        admin_tasks.spawn(crate::admin::session::run(admin_shared.clone(), stream, peer));
    });
    let (http_shared, http_tasks) = (shared.clone(), side.clone());
    let http: HandOff = Arc::new(move |stream, peer| {
        http_tasks.spawn(crate::http::serve(http_shared.clone(), stream, peer));
    });
    vec![(Kind::Client, clients), (Kind::Admin, admin), (Kind::Http, http)]
}

/// Samples the counters once a second for the per-second rates (`SHOW STATUS RATE`), until
/// `stop`.
async fn sample_rates(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            t = tick.tick() => shared.stats.sample(t.into_std()),
        }
    }
}
