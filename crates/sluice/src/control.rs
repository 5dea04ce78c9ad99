//! Side path: the control side's handle — live reconfiguration. A reload builds a whole new
//! `Snapshot`, checks it, puts its ports and worker count in force and swaps it in
//! atomically; a rejected reload changes nothing. The admin port (`admin`), SIGHUP and the
//! HTTP side reach the running proxy through a `Control`.

use crate::config::{Config, ConfigError, RuntimeKind};
use crate::datapath::{DataPath, Snapshot};
use crate::listener::Listeners;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The runtime's workers, as the control side may change them (implemented by `server`).
pub trait Workers: Send + Sync {
    /// Worker threads of the runtime taking new sessions.
    fn count(&self) -> usize;
    /// Moves new sessions to a runtime with `workers` threads (work-stealing runtime only).
    fn change(&self, workers: usize) -> anyhow::Result<()>;
    /// Runtimes started by worker-count changes that are still running.
    fn later_runtimes_running(&self) -> usize;
}

/// The control side's handle.
pub struct Control {
    pub data: Arc<DataPath>,
    pub listeners: Listeners,
    /// Serializes reloads (never taken on the query path).
    reload_lock: Mutex<()>,
    workers: OnceLock<Weak<dyn Workers>>,
}

/// Why a reload was refused. The running configuration stays as it was.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// A field is wrong; `field` is its path (`mysql_query_rules[3].match_pattern`).
    #[error("{0}")]
    Invalid(ConfigError),
    /// The config is valid but cannot be put in force (a certificate, a port).
    #[error("{0}")]
    Unusable(String),
}

/// What a reload changed, for its caller to report.
#[derive(Debug, Default)]
pub struct Applied {
    /// Settings that take effect only at the next start.
    pub need_restart: Vec<&'static str>,
}

impl Control {
    pub fn new(data: Arc<DataPath>, listeners: Listeners) -> Control {
        Control { data, listeners, reload_lock: Mutex::new(()), workers: OnceLock::new() }
    }

    /// Connects the runtime's workers (once, at start).
    pub fn attach_workers(&self, workers: Weak<dyn Workers>) {
        let _ = self.workers.set(workers);
    }

    fn workers_handle(&self) -> Option<Arc<dyn Workers>> {
        self.workers.get().and_then(Weak::upgrade)
    }

    /// Worker threads of the runtime taking new sessions.
    pub fn workers(&self) -> usize {
        self.workers_handle().map_or(0, |w| w.count())
    }

    /// Runtimes started by worker-count changes that are still running.
    pub fn later_runtimes_running(&self) -> usize {
        self.workers_handle().map_or(0, |w| w.later_runtimes_running())
    }

    /// The configuration in force now.
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.data.snapshot()
    }

    /// Builds `config`'s snapshot and puts it in force: servers (added, drained, removed),
    /// users, rules, settings, listeners, the worker count. One reload at a time.
    pub fn apply(&self, mut config: Config) -> Result<Applied, ReloadError> {
        let _one_at_a_time = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.snapshot();
        let runtime = self.data.runtime;
        let mut applied = Applied::default();
        let workers = self.workers();
        let new_workers = (config.workers != workers).then_some(config.workers);
        if new_workers.is_some() && runtime == RuntimeKind::PerCore {
            // Per-core workers own their connections for life: a new count needs a restart.
            applied.need_restart.push("proxy.workers");
            config.workers = workers;
        }
        if config.proxy.runtime != runtime {
            applied.need_restart.push("proxy.runtime");
        }
        if config.proxy.io != old.config.proxy.io {
            applied.need_restart.push("proxy.io");
        }
        if config.proxy.datadir != old.config.proxy.datadir {
            applied.need_restart.push("proxy.datadir");
        }
        let snapshot = Snapshot::build(config, Some(&old)).map_err(|e| ReloadError::Unusable(format!("{e:#}")))?;
        // Ports first: a port that cannot be bound refuses the whole reload. (The query log's
        // settings, applied while building, are the one thing a refusal here leaves changed.)
        self.listeners.reconcile(&snapshot.config).map_err(ReloadError::Unusable)?;
        if let Some(n) = new_workers.filter(|_| runtime == RuntimeKind::Steal) {
            let Some(w) = self.workers_handle() else { return Err(ReloadError::Unusable("sluice is stopping".into())) };
            w.change(n).map_err(|e| ReloadError::Unusable(format!("proxy.workers: {e:#}")))?;
        }
        snapshot.hostgroups.adopt(&snapshot.config, &old.hostgroups);
        self.data.stats.apply(&snapshot.config.stats);
        self.data.cache.apply(&snapshot.config.cache, snapshot.config.rules_cache());
        self.data.mirror.apply(&snapshot.config.mirror);
        self.data.live.store(Arc::new(snapshot));
        Ok(applied)
    }
}
