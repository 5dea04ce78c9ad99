//! Side path, admin port: carries out one admin statement. Plain SQL runs on the SQLite tables
//! (statistics tables are filled first from the live counters); LOAD … TO RUNTIME reads a layer
//! into a whole new configuration, validates it and swaps it in (`Shared::apply`), then shows it
//! in the runtime_* tables; the other LOAD/SAVE forms copy rows between layers.

use super::{AdminCommand, AdminError, Layer, Module, Output, StatsTable, Store};
use crate::config::FileConfig;
use crate::reload::ReloadError;
use crate::server::Shared;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

/// The admin port's state: the store and where `LOAD … FROM CONFIG` reads.
pub struct Admin {
    store: Mutex<Store>,
    config_file: Option<PathBuf>,
}

impl Admin {
    pub fn new(store: Store, config_file: Option<PathBuf>) -> Admin {
        Admin { store: Mutex::new(store), config_file }
    }

    /// The store, for tests and start-up.
    pub fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs one admin statement (blocking: SQLite).
pub fn execute(shared: &Shared, sql: &str) -> Result<Output, AdminError> {
    if crate::throttle::is_flush_hosts(sql) {
        shared.throttle.flush();
        return Ok(DONE);
    }
    let admin = &shared.admin;
    let mut store = admin.store();
    match super::parse(sql) {
        Some(AdminCommand::Move { module, from, to: Layer::Runtime }) => load_to_runtime(shared, &mut store, module, from),
        Some(AdminCommand::Move { module, from: Layer::Runtime, to }) => {
            store.seed(&[module], &shared.snapshot().config.to_file(), &[to]).map(|_| DONE)
        }
        Some(AdminCommand::Move { module, from, to }) => store.copy(module, from, to).map(|_| DONE),
        Some(AdminCommand::LoadFromConfig(module)) => load_from_config(admin, &mut store, module),
        Some(AdminCommand::ShowProcesslist { full }) => Ok(processlist(shared, full)),
        Some(cmd) => {
            fill(shared, &mut store, cmd.stats_needed())?;
            Ok(store.answer(&cmd)?.unwrap_or(DONE))
        }
        None => {
            fill(shared, &mut store, &super::stats_tables_referenced(sql))?;
            match store.query(sql) {
                // Drivers end their own transactions (autocommit off): one SQLite did not open.
                Err(AdminError::Sql(m)) if m.contains("no transaction is active") && ends_transaction(sql) => Ok(DONE),
                other => other,
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
fn load_to_runtime(shared: &Shared, store: &mut Store, module: Module, from: Layer) -> Result<Output, AdminError> {
    let started = Instant::now();
    let running = shared.live.load_full();
    let mut file = running.config.to_file();
    store.read(from, module, &mut file).map_err(|e| AdminError::Unsupported(format!("LOAD {module} TO RUNTIME refused: {e}")))?;
    let config = file
        .clone()
        .validate_after(Some(&running.config), None, None)
        .map_err(|e| AdminError::Unsupported(format!("LOAD {module} TO RUNTIME refused: {}", super::describe_config_error(&file, &e))))?;
    let applied = shared.apply(config).map_err(|e| {
        let why = match &e {
            ReloadError::Invalid(c) => super::describe_config_error(&file, c),
            ReloadError::Unusable(m) => m.clone(),
        };
        AdminError::Unsupported(format!("LOAD {module} TO RUNTIME refused: {why}"))
    })?;
    let elapsed = started.elapsed();
    store.write_runtime(module, &shared.snapshot().config.to_file())?;
    tracing::info!(module = module.name(), ms = elapsed.as_secs_f64() * 1e3, "admin: LOAD TO RUNTIME");
    for setting in applied.need_restart {
        tracing::warn!("admin: LOAD {module} TO RUNTIME: {setting} changes at the next start");
    }
    Ok(DONE)
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

/// Refreshes the statistics tables a statement reads.
fn fill(shared: &Shared, store: &mut Store, tables: &[StatsTable]) -> Result<(), AdminError> {
    for &t in tables {
        store.fill_stats(t, super::stats_rows::rows(shared, t))?;
    }
    Ok(())
}

/// SHOW [FULL] PROCESSLIST: the client sessions, what they run and where.
fn processlist(shared: &Shared, full: bool) -> Output {
    let snapshot = shared.snapshot();
    let columns =
        ["Id", "User", "cli_host", "cli_port", "db", "Command", "Time_ms", "hostgroup", "srv_host", "srv_port", "backend_thread", "Info"];
    let rows = shared
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
                (Some(_), true) => Some(a.info.clone()),
                (Some(_), false) => Some(a.info.chars().take(100).collect()),
            };
            vec![
                Some(h.id.to_string()),
                Some(h.user.clone()),
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
