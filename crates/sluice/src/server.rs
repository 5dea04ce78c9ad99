//! The runtime: the workers that run sessions (either one current-thread runtime per worker,
//! or one work-stealing runtime), the side tasks they schedule, and start/stop. It wires the
//! three handles together: the data path (`datapath`), the control side (`control`) and the
//! admin port (`admin`).

use crate::admin::AdminPort;
use crate::config::{Config, RuntimeKind};
use crate::control::{Control, Workers};
use crate::datapath::{DataPath, Snapshot};
use crate::listener::{HandOff, Kind, Listeners};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The runtime: the workers that run sessions, and their changes (`control::Workers`).
pub struct Runtime {
    data: Arc<DataPath>,
    control: Arc<Control>,
    admin: Arc<AdminPort>,
    /// Worker threads of the runtime taking new sessions (a reload may change it, `Generation`).
    workers: AtomicUsize,
    /// Work-stealing runtimes started by reloads that changed the worker count, joined at shutdown.
    generations: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Retires the runtime taking new sessions when the worker count changes.
    current_generation: std::sync::Mutex<Option<Generation>>,
    /// This runtime itself, for sessions started by a reload.
    me: OnceLock<std::sync::Weak<Runtime>>,
}

impl Workers for Runtime {
    fn count(&self) -> usize {
        self.workers.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new runtime with `workers` threads takes every new connection from now on; the old
    /// one keeps its sessions until they end, and its backend connections (whose sockets its
    /// I/O driver serves) until they close: they are not pooled again. Nothing is dropped.
    fn change(&self, workers: usize) -> anyhow::Result<()> {
        let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else { anyhow::bail!("sluice is stopping") };
        let thread = start_generation(&me, workers)?;
        self.generations.lock().unwrap_or_else(|p| p.into_inner()).push(thread);
        tracing::info!(workers, "worker count changed: new sessions run on the new workers; existing ones finish where they are");
        Ok(())
    }

    fn later_runtimes_running(&self) -> usize {
        self.generations.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|t| !t.is_finished()).count()
    }
}

/// A running sluice. Dropping it does not stop it; call `shutdown`.
pub struct Server {
    /// The data path's handle (what sessions read).
    pub data: Arc<DataPath>,
    /// The control side's handle (reloads, ports, workers).
    pub control: Arc<Control>,
    /// The admin port's tables.
    pub admin: Arc<AdminPort>,
    runtime: Arc<Runtime>,
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
        let (tables, config) = crate::admin::startup::open(config, options)?;
        let (workers, runtime_kind, io) = (config.workers, config.proxy.runtime, config.proxy.io);
        let listeners = Listeners::default();
        listeners.reconcile(&config).map_err(|e| anyhow::anyhow!(e))?;
        let data = Arc::new(DataPath::new(Snapshot::build(config, None)?));
        let control = Arc::new(Control::new(data.clone(), listeners));
        let admin = Arc::new(AdminPort { control: control.clone(), tables });
        let runtime = Arc::new(Runtime {
            data: data.clone(),
            control: control.clone(),
            admin: admin.clone(),
            workers: AtomicUsize::new(workers),
            generations: std::sync::Mutex::new(Vec::new()),
            current_generation: std::sync::Mutex::new(None),
            me: OnceLock::new(),
        });
        let _ = runtime.me.set(Arc::downgrade(&runtime));
        let as_workers: Arc<dyn Workers> = runtime.clone();
        control.attach_workers(Arc::downgrade(&as_workers));
        crate::monitor::probe_profile(&data);
        let uring = runtime_kind == RuntimeKind::PerCore && io == crate::config::IoEngine::Auto && uring_available();
        let mut threads = match runtime_kind {
            RuntimeKind::PerCore => start_per_core(&runtime, uring)?,
            RuntimeKind::Steal => vec![start_generation(&runtime, workers)?],
        };
        threads.push(start_monitor(control.clone())?);
        threads.push(start_probe(data.clone())?);
        let io = if uring { "io_uring" } else { "epoll" };
        tracing::info!(listen = ?control.listeners.addrs(Kind::Client), workers, runtime = ?runtime_kind, io, "sluice started");
        Ok(Server { data, control, admin, runtime, threads })
    }

    /// The first client port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs()[0]
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.control.listeners.addrs(Kind::Client)
    }

    /// Stops accepting, lets in-flight statements finish (up to the shutdown timeout), then
    /// kills the statements still running on the backends, closes every session and returns:
    /// within the shutdown timeout plus a few seconds, whatever a task is doing.
    pub fn shutdown(self) {
        self.control.listeners.close_all();
        self.data.begin_shutdown();
        let deadline = std::time::Instant::now() + self.data.snapshot().config.shutdown_timeout() + KILL_GRACE + RUNTIME_STOP + JOIN_SLACK;
        let later: Vec<JoinHandle<()>> = std::mem::take(&mut *self.runtime.generations.lock().unwrap_or_else(|p| p.into_inner()));
        for t in self.threads.into_iter().chain(later) {
            // Each runtime stops itself within its bounds; this one is the last resort, so
            // that a thread stuck outside tokio cannot keep the process alive.
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!(thread = ?t.thread().name(), "a runtime thread did not stop in time; leaving it");
            }
        }
    }
}

/// The monitor's own thread (side path: it never shares a runtime with sessions): the servers'
/// health checks and the replication hostgroups' roles, until shutdown.
fn start_monitor(control: Arc<Control>) -> anyhow::Result<JoinHandle<()>> {
    runtime_thread("sluice-monitor".into(), move || {
        let tokio_rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return tracing::error!("monitor: cannot build runtime: {e}"),
        };
        tokio_rt.block_on(crate::monitor::run(control));
        stop_runtime(tokio_rt);
    })
}

/// The server-time probe's thread (side path): puts `[probe]` in force once a second (loads
/// and attaches on first use, follows the backends' processes), until shutdown. The query
/// path only reads what it set up.
fn start_probe(data: Arc<DataPath>) -> anyhow::Result<JoinHandle<()>> {
    runtime_thread("sluice-probe".into(), move || {
        while !data.closing() {
            let snapshot = data.snapshot();
            let mut servers: Vec<(String, u16)> = snapshot.config.servers.iter().map(|s| (s.hostname.clone(), s.port)).collect();
            servers.sort_unstable();
            servers.dedup();
            data.probe.tick(&snapshot.config.probe, &servers);
            drop(snapshot);
            for _ in 0..10 {
                if data.closing() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

fn runtime_thread(name: String, f: impl FnOnce() + Send + 'static) -> anyhow::Result<JoinHandle<()>> {
    Ok(std::thread::Builder::new().name(name).spawn(f)?)
}

/// How long sessions get, once the shutdown timeout has passed, to kill the statements they
/// still run on the backends (a side connection and a KILL QUERY each).
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long a runtime waits for its blocking tasks (admin statements) when it is dropped.
const RUNTIME_STOP: Duration = Duration::from_millis(500);
/// Margin for `Server::shutdown` on top of the bounds above.
const JOIN_SLACK: Duration = Duration::from_secs(1);

/// Waits for a worker's sessions after shutdown was asked, at most the shutdown timeout; then
/// each session still in a statement kills it on its backend (with its own login, else the
/// monitor's) and ends, for at most `KILL_GRACE`. The caller then drops the runtime with
/// `stop_runtime`, which closes whatever is left.
async fn drain(tracker: TaskTracker, data: &DataPath, sessions: bool) {
    tracker.close();
    if tokio::time::timeout(data.snapshot().config.shutdown_timeout(), tracker.wait()).await.is_ok() || !sessions {
        return;
    }
    tracing::warn!(sessions = tracker.len(), "shutdown timeout reached: killing the statements still running and closing every session");
    // A session between statements forgets the request; one in a statement kills it.
    for h in data.registry.sessions() {
        h.request_kill_query(None::<bool>.into());
    }
    let _ = tokio::time::timeout(KILL_GRACE, tracker.wait()).await;
}

/// Drops a runtime that ran sessions: its tasks are dropped (their sockets closed) and its
/// blocking tasks get `RUNTIME_STOP`, so a stuck task cannot hold the process.
fn stop_runtime(rt: tokio::runtime::Runtime) {
    rt.shutdown_timeout(RUNTIME_STOP);
}

/// Whether per-core workers can do their sessions' I/O through io_uring here; when not, says
/// why in the log (they use epoll).
fn uring_available() -> bool {
    match crate::net::uring::check() {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("io_uring is not available ({e}): per-core workers use epoll");
            false
        }
    }
}

/// One current-thread runtime per worker; the acceptor thread hands each connection to the
/// next worker, where its session stays for its whole life. With `uring`, each worker has its
/// own ring (`net::uring`) for its sessions' plain TCP connections.
fn start_per_core(rt: &Arc<Runtime>, uring: bool) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let mut senders = Vec::new();
    for w in 0..rt.count() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        senders.push(tx);
        let data = rt.data.clone();
        threads.push(runtime_thread(format!("sluice-worker-{w}"), move || {
            let mut builder = tokio::runtime::Builder::new_current_thread();
            let ring = match uring.then(|| crate::net::uring::install(data.io_uring.clone())) {
                Some(Ok(ring)) => {
                    builder.on_thread_park(crate::net::uring::before_park);
                    Some(ring)
                }
                Some(Err(e)) => {
                    tracing::warn!("worker {w}: io_uring setup failed ({e}): this worker uses epoll");
                    None
                }
                None => None,
            };
            let tokio_rt = match builder.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("worker {w}: cannot build runtime: {e}"),
            };
            crate::pool::set_worker(w, None);
            tokio_rt.block_on(async move {
                if let Some(ring) = ring {
                    tokio::spawn(crate::net::uring::drive(ring));
                }
                let tracker = TaskTracker::new();
                tokio::spawn(maintain_pools(data.clone(), w, data.shutdown.clone()));
                loop {
                    tokio::select! {
                        _ = data.shutdown.cancelled() => break,
                        next = rx.recv() => match next {
                            Some((std_stream, peer)) => match crate::net::Stream::plain(std_stream) {
                                Ok(s) => { tracker.spawn(crate::session::run(data.clone(), s, peer)); }
                                Err(e) => tracing::warn!("worker {w}: {e}"),
                            },
                            None => break,
                        }
                    }
                }
                drain(tracker, &data, true).await;
            });
            stop_runtime(tokio_rt);
            crate::net::uring::close_current(RUNTIME_STOP);
        })?);
    }
    let rt = rt.clone();
    threads.push(runtime_thread("sluice-acceptor".into(), move || {
        let tokio_rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
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
        let data = rt.data.clone();
        rt.control.listeners.run(tokio_rt.handle().clone(), data.shutdown.clone(), hand_offs(&rt, hand_off, &side));
        tokio_rt.block_on(async {
            tokio::spawn(sample_rates(data.clone(), data.shutdown.clone()));
            tokio::spawn(crate::xa_recovery::recover_loop(data.clone(), data.shutdown.clone()));
            data.shutdown.cancelled().await;
            drain(side, &data, false).await;
        });
        stop_runtime(tokio_rt);
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
fn start_generation(rt: &Arc<Runtime>, workers: usize) -> anyhow::Result<JoinHandle<()>> {
    let tag = Arc::new(crate::pool::RuntimeTag::default());
    let next_worker = Arc::new(AtomicUsize::new(0));
    let thread_tag = tag.clone();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("sluice-worker")
        .on_thread_start(move || {
            crate::pool::set_worker(next_worker.fetch_add(1, std::sync::atomic::Ordering::Relaxed), Some(thread_tag.clone()))
        })
        .enable_all()
        .build()?;
    let retire = CancellationToken::new();
    let tracker = TaskTracker::new();
    let data = rt.data.clone();
    let (sessions, spawner) = (tracker.clone(), data.clone());
    let hand_off: HandOff = Arc::new(move |stream: tokio::net::TcpStream, peer: SocketAddr| {
        crate::net::tune(&stream);
        sessions.spawn(crate::session::run(spawner.clone(), crate::net::Stream::Tcp(stream), peer));
    });
    rt.control.listeners.run(tokio_rt.handle().clone(), data.shutdown.clone(), hand_offs(rt, hand_off, &tracker));
    let previous =
        rt.current_generation.lock().unwrap_or_else(|p| p.into_inner()).replace(Generation { retire: retire.clone(), tag: tag.clone() });
    if let Some(old) = previous {
        old.tag.retired.store(true, std::sync::atomic::Ordering::Release);
        old.retire.cancel();
    }
    rt.workers.store(workers, std::sync::atomic::Ordering::Relaxed);
    runtime_thread("sluice-runtime".into(), move || {
        tokio_rt.block_on(async move {
            for w in 0..workers {
                tokio::spawn(maintain_pools(data.clone(), w, retire.clone()));
            }
            tokio::spawn(sample_rates(data.clone(), retire.clone()));
            tokio::spawn(crate::xa_recovery::recover_loop(data.clone(), retire.clone()));
            tokio::select! {
                _ = data.shutdown.cancelled() => drain(tracker, &data, true).await,
                _ = retire.cancelled() => {
                    tracker.close();
                    tokio::select! {
                        _ = data.shutdown.cancelled() => drain(tracker, &data, true).await,
                        _ = async {
                            tracker.wait().await;
                            while tag.open.load(std::sync::atomic::Ordering::Acquire) > 0 {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                        } => tracing::info!(workers, "retired workers stopped (their sessions ended)"),
                    }
                }
            }
        });
        stop_runtime(tokio_rt);
    })
}

/// Where each kind of port's connections go: client sessions to `clients`; admin sessions
/// and HTTP connections to tasks tracked by `side` (they end at shutdown like client sessions).
fn hand_offs(rt: &Arc<Runtime>, clients: HandOff, side: &TaskTracker) -> Vec<(Kind, HandOff)> {
    let (admin, admin_tasks) = (rt.admin.clone(), side.clone());
    let admin: HandOff = Arc::new(move |stream, peer| {
        admin_tasks.spawn(crate::admin::session::run(admin.clone(), stream, peer));
    });
    let (data, http_tasks) = (rt.data.clone(), side.clone());
    let http: HandOff = Arc::new(move |stream, peer| {
        http_tasks.spawn(crate::http::serve(data.clone(), stream, peer));
    });
    vec![(Kind::Client, clients), (Kind::Admin, admin), (Kind::Http, http)]
}

/// Samples the counters once a second for the per-second rates (`SHOW STATUS RATE`), until
/// `stop`.
async fn sample_rates(data: Arc<DataPath>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            t = tick.tick() => data.stats.sample(t.into_std()),
        }
    }
}

/// Once a second, one worker's share of pool upkeep (`pool::maintain`) under the config in
/// force at each round, until `stop` (its runtime retired) or shutdown.
async fn maintain_pools(data: Arc<DataPath>, shard: usize, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = data.shutdown.cancelled() => break,
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        if shard == 0 {
            // Idle pooled connections of accounts changed on the backend are closed.
            data.backend_accounts.recheck_pooled(&data.live).await;
        }
        let snapshot = data.live.load_full();
        crate::pool::maintain(&snapshot.hostgroups, &snapshot.config.pool, snapshot.config.connect_timeout(), &data.stats, shard).await;
    }
}
