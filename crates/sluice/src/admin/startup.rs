//! Side path, admin port: which configuration sluice starts with, and keeping the admin tables
//! in line when the file is reloaded (SIGHUP).
//!
//! Precedence (docs/admin.md): the first start on a datadir seeds memory and disk from the
//! file; later starts take the configuration saved in `<datadir>/sluice.db` (SAVE … TO DISK)
//! and ignore the file's rows and settings, saying so in the log, unless started with
//! `--initial`. Command-line flags override both.

use super::exec::Admin;
use super::AdminPort;
use super::{Layer, Module, Store};
use crate::config::{Config, ConfigError, Overrides};
use crate::control::{Applied, ReloadError};
use std::path::PathBuf;

/// How `Server::start_with` treats the admin store.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Reseed the saved configuration from the file (ProxySQL's --initial).
    pub initial: bool,
    /// The file `LOAD … FROM CONFIG` and SIGHUP read.
    pub config_file: Option<PathBuf>,
    /// Command-line settings, applied over whichever configuration wins.
    pub overrides: Overrides,
}

/// Opens the store and decides the configuration to start with.
pub fn open(file: Config, opts: &StartOptions) -> anyhow::Result<(Admin, Config)> {
    let datadir = file.proxy.datadir.clone();
    let (mut store, fresh) = Store::open(datadir.as_deref())?;
    let db = datadir.as_ref().map(|d| d.join("sluice.db").display().to_string());
    let config = if fresh || opts.initial {
        if let (Some(db), true) = (&db, !fresh) {
            tracing::warn!("--initial: the configuration saved in {db} is replaced by the file's");
        }
        store.seed(&Module::ALL, &file.to_file(), &[Layer::Memory, Layer::Disk])?;
        file
    } else {
        let mut saved = file.to_file();
        if store.sharding_predates_disk() {
            // Saved before the sharding tables existed: its sharding was the file's.
            store.seed(&[Module::Sharding], &saved, &[Layer::Disk])?;
            tracing::info!(
                "{}: saved by an older sluice without the sharding tables; they start with the file's sharding",
                db.as_deref().unwrap_or("")
            );
        }
        for m in Module::ALL {
            store
                .read(Layer::Disk, m, &mut saved)
                .map_err(|e| anyhow::anyhow!("the configuration saved in {}: {e}", db.as_deref().unwrap_or("")))?;
        }
        saved.proxy.datadir = datadir.clone();
        // Checked as the file is, command line included; a problem is a configuration error.
        let config = saved.clone().resolve(&opts.overrides, None, None).map_err(|e| ConfigError {
            file: None,
            line: None,
            field: String::new(),
            message: format!("the configuration saved in {}: {}", db.as_deref().unwrap_or(""), super::describe_config_error(&saved, &e)),
        })?;
        for m in Module::ALL {
            store.copy(m, Layer::Disk, Layer::Memory)?;
        }
        tracing::info!(
            "configuration from {} (saved with SAVE … TO DISK); the config file's rows and settings are not used (start with --initial to reseed from the file)",
            db.as_deref().unwrap_or("")
        );
        config
    };
    let runtime = super::exec::in_force(&config, Layer::Runtime);
    for m in Module::ALL {
        store.write_runtime(m, &runtime)?;
    }
    store.show_workers(config.workers)?;
    store.set_limits(config.proxy.admin_memory_limit_bytes)?;
    Ok((Admin::new(store, opts.config_file.clone()), config))
}

/// SIGHUP: puts the file's configuration in force (all modules, as `LOAD … FROM CONFIG` then
/// `LOAD … TO RUNTIME` would), then shows it in the memory and runtime tables: at once if no
/// admin statement is running, else right after it (a reload never waits for one).
pub fn apply_file(port: &AdminPort, config: Config) -> Result<Applied, ReloadError> {
    let applied = port.control.apply(config)?;
    port.tables.reloaded(port);
    Ok(applied)
}
