//! Side path: live reconfiguration. A `Snapshot` is everything a statement reads from the
//! configuration (servers and their pools, users, compiled rules, settings). A reload builds a
//! whole new one, checks it, and swaps it in atomically; sessions pick it up at their next
//! command, so a statement in flight finishes under the snapshot it started with. A rejected
//! reload changes nothing.

use crate::config::{Config, ConfigError};
use crate::querylog::QueryLog;
use crate::route::Hostgroups;
use crate::server::Shared;
use crate::users::Users;
use std::sync::Arc;

/// The configuration in force, as the data path reads it.
pub struct Snapshot {
    pub config: Config,
    pub hostgroups: Hostgroups,
    pub users: Users,
    /// Client-side TLS, rebuilt when `[tls]` changes.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// The query log when `[querylog]` names a file; kept (and its settings changed in place)
    /// across reloads.
    pub query_log: Option<Arc<QueryLog>>,
}

impl Snapshot {
    /// Builds the snapshot for `config`; servers that `old` has too keep their pools.
    pub fn build(config: Config, old: Option<&Snapshot>) -> anyhow::Result<Snapshot> {
        let hostgroups = Hostgroups::rebuild(&config, old.map(|o| &o.hostgroups))?;
        let tls = match old {
            Some(o) if o.config.tls == config.tls => o.tls.clone(),
            _ if config.tls.enabled => {
                Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(config.tls.cert.as_deref(), config.tls.key.as_deref())?))
            }
            _ => None,
        };
        let users = Users::from_config(&config);
        let settings = &config.querylog;
        let query_log = match (settings.path.as_ref(), old.and_then(|o| o.query_log.as_ref())) {
            (None, _) => None,
            (Some(_), Some(log)) => {
                log.apply(settings).map_err(|e| anyhow::anyhow!("querylog.path: {e}"))?;
                Some(log.clone())
            }
            (Some(path), None) => {
                Some(Arc::new(QueryLog::start(settings).map_err(|e| anyhow::anyhow!("querylog.path {}: {e}", path.display()))?))
            }
        };
        Ok(Snapshot { config, hostgroups, users, tls, query_log })
    }
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

impl Shared {
    /// Builds `config`'s snapshot and puts it in force: servers (added, drained, removed),
    /// users, rules, settings, listeners, the worker count. One reload at a time.
    pub fn apply(&self, mut config: Config) -> Result<Applied, ReloadError> {
        let _one_at_a_time = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.snapshot();
        let mut applied = Applied::default();
        let new_workers = (config.workers != self.workers()).then_some(config.workers);
        if new_workers.is_some() && self.runtime == crate::config::RuntimeKind::PerCore {
            // Per-core workers own their connections for life: a new count needs a restart.
            applied.need_restart.push("proxy.workers");
            config.workers = self.workers();
        }
        if config.proxy.runtime != self.runtime {
            applied.need_restart.push("proxy.runtime");
        }
        if config.proxy.datadir != old.config.proxy.datadir {
            applied.need_restart.push("proxy.datadir");
        }
        let snapshot = Snapshot::build(config, Some(&old)).map_err(|e| ReloadError::Unusable(format!("{e:#}")))?;
        // Ports first: a port that cannot be bound refuses the whole reload. (The query log's
        // settings, applied while building, are the one thing a refusal here leaves changed.)
        self.listeners.reconcile(&snapshot.config).map_err(ReloadError::Unusable)?;
        if let Some(n) = new_workers.filter(|_| self.runtime == crate::config::RuntimeKind::Steal) {
            self.change_workers(n).map_err(|e| ReloadError::Unusable(format!("proxy.workers: {e:#}")))?;
        }
        snapshot.hostgroups.adopt(&snapshot.config, &old.hostgroups);
        self.stats.apply(&snapshot.config.stats);
        crate::server::warn_inactive_columns(&snapshot.config.query_rules);
        self.live.store(Arc::new(snapshot));
        Ok(applied)
    }
}
