//! The configuration in force as the data path reads it (`Snapshot`): built whole at start-up
//! and by each reload, swapped in by `control`, held by `datapath::DataPath`.

use crate::config::Config;
use crate::pool::Hostgroups;
use crate::querylog::QueryLog;
use crate::users::Users;
use std::sync::Arc;

/// The configuration in force, as the data path reads it: servers and their pools, users,
/// compiled rules, settings. A reload builds a whole new one and swaps it in (`control`);
/// sessions pick it up at their next command, so a statement in flight finishes under the
/// snapshot it started with.
pub struct Snapshot {
    pub config: Config,
    pub hostgroups: Hostgroups,
    pub users: Users,
    /// Client-side TLS, rebuilt when `[tls]` changes.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// The query log when `[querylog]` names a file; kept (and its settings changed in place)
    /// across reloads.
    pub query_log: Option<Arc<QueryLog>>,
    /// `[[shard_databases]]` and `[[sharded_tables]]` compiled for routing.
    pub shards: crate::shard::ShardMap,
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
        let shards = crate::shard::ShardMap::build(&config.shard_databases, &config.sharded_tables);
        Ok(Snapshot { config, hostgroups, users, tls, query_log, shards })
    }
}
