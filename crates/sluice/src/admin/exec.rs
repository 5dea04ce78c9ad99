//! Side path, admin port: carries out one admin statement. Plain SQL runs on the SQLite tables
//! (statistics tables are filled first from the live counters); LOAD … TO RUNTIME reads a layer
//! into a whole new configuration, validates it and swaps it in (`Control::apply`), then shows it
//! in the runtime_* tables; the other LOAD/SAVE forms copy rows between layers.

use super::fence::Fence;
use super::AdminPort;
use super::{AdminCommand, AdminError, Layer, Module, Output, StatsTable, Store};
use crate::config::{Config, FileConfig};
use crate::control::ReloadError;
use crate::snapshot::Snapshot;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

/// The admin port's state: the store and where `LOAD … FROM CONFIG` reads.
pub struct Admin {
    store: Mutex<Store>,
    /// The store's fence, reachable while a statement holds the store (to interrupt it).
    fence: Arc<Fence>,
    config_file: Option<PathBuf>,
    /// A reload put a configuration in force while the store was busy: the memory and runtime
    /// tables are rewritten from the running configuration before the store is next used.
    stale: AtomicBool,
    /// What runtime_mysql_servers shows: the snapshot in force and the monitor's verdicts
    /// (`Findings::verdicts`) when it was last written.
    shown: Mutex<(Weak<Snapshot>, u64)>,
}

impl Admin {
    pub fn new(store: Store, config_file: Option<PathBuf>) -> Admin {
        Admin { fence: store.fence(), store: Mutex::new(store), config_file, stale: AtomicBool::new(false), shown: Mutex::default() }
    }

    /// The store as it is, for tests and start-up (admin statements go through `lock`).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store for an admin statement: brought up to date with a reload that happened while
    /// it was busy, with the limits in force.
    fn lock(&self, port: &AdminPort) -> MutexGuard<'_, Store> {
        let mut store = self.store();
        self.refresh_if_stale(port, &mut store);
        self.show_live_servers(port, &mut store);
        if let Err(e) = store.set_limits(port.control.snapshot().config.proxy.admin_memory_limit_bytes) {
            tracing::warn!("admin: the store's memory limit could not be set: {e}");
        }
        store
    }

    /// Stops the running admin statement and every later one (shutdown).
    pub fn interrupt(&self) {
        self.fence.interrupt();
    }

    /// After a reload (SIGHUP): the memory and runtime tables show the running configuration,
    /// now if the store is free, else before its next use. Never waits for an admin statement.
    pub fn reloaded(&self, port: &AdminPort) {
        self.stale.store(true, Ordering::SeqCst);
        match self.store.try_lock() {
            Ok(mut store) => self.refresh_if_stale(port, &mut store),
            Err(TryLockError::Poisoned(p)) => self.refresh_if_stale(port, &mut p.into_inner()),
            Err(TryLockError::WouldBlock) => tracing::debug!("reload: the admin tables are updated after the running admin statement"),
        }
    }

    /// runtime_mysql_servers shows the servers in force, and which the monitor shunned: it is
    /// rewritten when either changed since (the monitor's moves between replication hostgroups
    /// are reloads no admin statement made).
    fn show_live_servers(&self, port: &AdminPort, store: &mut Store) {
        let data = &port.control.data;
        let snapshot = data.live.load_full();
        let verdicts = data.health.verdicts();
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.0.ptr_eq(&Arc::downgrade(&snapshot)) && shown.1 == verdicts {
            return;
        }
        let shunned: Vec<(u32, &str, u16)> = snapshot
            .hostgroups
            .servers()
            .iter()
            .filter(|s| s.pool.status() == crate::config::ServerStatus::Online && s.pool.health() != crate::pool::Health::Healthy)
            .map(|s| (s.hostgroup, s.hostname.as_str(), s.port))
            .collect();
        let written = store
            .write_runtime(Module::MysqlServers, &in_force(&snapshot.config, Layer::Runtime))
            .and_then(|()| store.show_shunned(&shunned));
        match written {
            Ok(()) => *shown = (Arc::downgrade(&snapshot), verdicts),
            Err(e) => tracing::warn!("admin: runtime_mysql_servers could not be brought up to date: {e}"),
        }
    }

    fn refresh_if_stale(&self, port: &AdminPort, store: &mut Store) {
        if !self.stale.swap(false, Ordering::SeqCst) {
            return;
        }
        let config = &port.control.snapshot().config;
        let written = store
            .seed(&Module::ALL, &in_force(config, Layer::Memory), &[Layer::Memory])
            .and_then(|()| store.seed(&Module::ALL, &in_force(config, Layer::Runtime), &[Layer::Runtime]));
        if let Err(e) = written {
            tracing::warn!("reload: in force, but the admin tables could not be updated: {e}");
        }
    }
}

/// The running configuration as a layer's tables show it: `mysql-threads` is the worker count
/// in force (in memory, only where the configuration leaves it to the number of cores).
pub(crate) fn in_force(config: &Config, layer: Layer) -> FileConfig {
    let mut file = config.to_file();
    match layer {
        Layer::Runtime => file.proxy.workers = Some(config.workers),
        _ => {
            file.proxy.workers.get_or_insert(config.workers);
        }
    }
    file
}

/// Runs one admin statement (blocking: SQLite) within `admin-statement_timeout_ms`.
pub fn execute(port: &AdminPort, sql: &str) -> Result<Output, AdminError> {
    if crate::throttle::is_flush_hosts(sql) {
        port.control.data.throttle.flush();
        return Ok(DONE);
    }
    let admin = &port.tables;
    let mut store = admin.lock(port);
    if admin.fence.stopping() {
        return Err(AdminError::Refused("sluice is shutting down".into()));
    }
    let timeout = port.control.snapshot().config.proxy.admin_statement_timeout_ms;
    admin.fence.take_stopped();
    admin.fence.set_deadline((timeout > 0).then(|| Duration::from_millis(timeout)));
    let out = run(port, &mut store, sql).map_err(|e| store.explain(e));
    admin.fence.clear_deadline();
    out
}

fn run(port: &AdminPort, store: &mut Store, sql: &str) -> Result<Output, AdminError> {
    let admin = &port.tables;
    match super::parse(sql) {
        Some(AdminCommand::Move { module, from, to: Layer::Runtime }) => load_to_runtime(port, store, module, from),
        Some(AdminCommand::Move { module, from: Layer::Runtime, to }) => {
            store.seed(&[module], &in_force(&port.control.snapshot().config, to), &[to]).map(|_| DONE)
        }
        Some(AdminCommand::Move { module, from, to }) => store.copy(module, from, to).map(|_| DONE),
        Some(AdminCommand::LoadFromConfig(module)) => load_from_config(admin, store, module),
        Some(AdminCommand::ShowProcesslist { full }) => Ok(processlist(port, full)),
        Some(AdminCommand::Switchover { to, hostgroup }) => switchover(port, store, &to, hostgroup),
        Some(cmd) => {
            fill(port, store, cmd.stats_needed())?;
            Ok(store.answer(&cmd)?.unwrap_or(DONE))
        }
        None => {
            let outputs = store.query_filling(sql, &mut |t| Some(super::stats_rows::rows(&port.control.data, t)));
            match outputs {
                Ok(mut outputs) => Ok(outputs.pop().unwrap_or(DONE)),
                // Drivers end their own transactions (autocommit off): one SQLite did not open.
                Err(AdminError::Sql(m)) if m.contains("no transaction is active") && ends_transaction(sql) => Ok(DONE),
                Err(e) => Err(e),
            }
        }
    }
}

const DONE: Output = Output::Done { affected: 0 };

fn ends_transaction(sql: &str) -> bool {
    let word = sql.trim().trim_end_matches(';').trim();
    word.eq_ignore_ascii_case("COMMIT") || word.eq_ignore_ascii_case("ROLLBACK")
}

/// LOAD `module` TO RUNTIME: the running config with `module` replaced by `from`'s rows, checked
/// whole and put in force; the runtime tables then show it. Refused: nothing changes.
fn load_to_runtime(port: &AdminPort, store: &mut Store, module: Module, from: Layer) -> Result<Output, AdminError> {
    let started = Instant::now();
    let running = port.control.data.live.load_full();
    let refused = |why: String| AdminError::Unsupported(format!("LOAD {module} TO RUNTIME refused: {why}"));
    // Bounded before anything is built from the rows.
    let max = running.config.proxy.admin_max_rows_per_table;
    for (table, rows) in store.count_rows(from, module)? {
        if rows > max {
            return Err(refused(format!("{table} holds {rows} rows, more than admin-max_rows_per_table allows ({max})")));
        }
    }
    let mut file = running.config.to_file();
    store.read(from, module, &mut file).map_err(|e| refused(e.to_string()))?;
    let config =
        file.clone().validate_after(Some(&running.config), None, None).map_err(|e| refused(super::describe_config_error(&file, &e)))?;
    let applied = port.control.apply(config).map_err(|e| {
        refused(match &e {
            ReloadError::Invalid(c) => super::describe_config_error(&file, c),
            ReloadError::Unusable(m) => m.clone(),
        })
    })?;
    let elapsed = started.elapsed();
    // In force now: the runtime tables must show it, whatever the statement's time limit.
    port.tables.fence.clear_deadline();
    store.write_runtime(module, &in_force(&port.control.snapshot().config, Layer::Runtime))?;
    tracing::info!(module = module.name(), ms = elapsed.as_secs_f64() * 1e3, "admin: LOAD TO RUNTIME");
    for setting in applied.need_restart {
        tracing::warn!("admin: LOAD {module} TO RUNTIME: {setting} changes at the next start");
    }
    Ok(DONE)
}

/// SWITCHOVER: carried out on the runtime the admin port runs on (this is one of its blocking
/// threads); the servers' tables then show the new roles, in memory and at runtime.
fn switchover(port: &AdminPort, store: &mut Store, to: &str, hostgroup: Option<u32>) -> Result<Output, AdminError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| AdminError::Unsupported("SWITCHOVER needs sluice's runtime".into()))?;
    let done = runtime.block_on(super::switchover::switchover(&port.control, to, hostgroup));
    // Whatever happened, the tables show the servers as they are now.
    port.tables.fence.clear_deadline();
    let config = port.control.snapshot().config.clone();
    store.seed(&[Module::MysqlServers], &in_force(&config, Layer::Memory), &[Layer::Memory])?;
    store.write_runtime(Module::MysqlServers, &in_force(&config, Layer::Runtime))?;
    let message = done.map_err(AdminError::Unsupported)?;
    Ok(Output::Rows { columns: vec!["switchover".into()], rows: vec![vec![Some(message)]] })
}

/// LOAD `module` FROM CONFIG: the config file's rows into memory.
fn load_from_config(admin: &Admin, store: &mut Store, module: Module) -> Result<Output, AdminError> {
    let Some(path) = &admin.config_file else {
        return Err(AdminError::Unsupported("sluice was started without --config: there is no file to load from".into()));
    };
    let text = std::fs::read_to_string(path).map_err(|e| AdminError::Unsupported(format!("{}: {e}", path.display())))?;
    let file = FileConfig::parse(&text).map_err(|e| AdminError::Unsupported(format!("{}: {}", path.display(), e.message())))?;
    store.seed(&[module], &file, &[Layer::Memory])?;
    Ok(DONE)
}

/// Refreshes the statistics tables a command reads.
fn fill(port: &AdminPort, store: &mut Store, tables: &[StatsTable]) -> Result<(), AdminError> {
    for &t in tables {
        store.fill_stats(t, super::stats_rows::rows(&port.control.data, t))?;
    }
    Ok(())
}

/// SHOW [FULL] PROCESSLIST: the client sessions, what they run and where.
fn processlist(port: &AdminPort, full: bool) -> Output {
    let snapshot = port.control.snapshot();
    let columns =
        ["Id", "User", "cli_host", "cli_port", "db", "Command", "Time_ms", "hostgroup", "srv_host", "srv_port", "backend_thread", "Info"];
    let rows = port
        .control
        .data
        .registry
        .sessions()
        .into_iter()
        .map(|h| {
            let a = h.activity();
            let server = h.backend().and_then(|(pool, thread)| {
                snapshot.hostgroups.servers().iter().find(|s| s.pool.id == pool).map(|s| (s.hostname.clone(), s.port, thread))
            });
            let info = match (a.started, full) {
                (None, _) => None,
                (Some(_), true) => Some(a.info_text().into_owned()),
                (Some(_), false) => Some(a.info_text().chars().take(100).collect()),
            };
            vec![
                Some(h.id.to_string()),
                Some(h.user().to_string()),
                Some(h.peer.ip().to_string()),
                Some(h.peer.port().to_string()),
                a.state.as_ref().and_then(|s| s.schema.as_deref().map(str::to_string)),
                Some(if a.started.is_some() { "Query" } else { "Sleep" }.to_string()),
                a.started.map(|t| t.elapsed().as_millis().to_string()),
                a.started.map(|_| a.hostgroup.to_string()),
                server.as_ref().map(|s| s.0.clone()),
                server.as_ref().map(|s| s.1.to_string()),
                server.as_ref().map(|s| s.2.to_string()),
                info,
            ]
        })
        .collect();
    Output::Rows { columns: columns.iter().map(|c| c.to_string()).collect(), rows }
}
