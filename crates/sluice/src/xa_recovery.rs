//! Recovery of transactions across shards (XA; `shard::xa` has their ids and recovery log): at
//! start and every few seconds, each server of a logical database's hostgroups is asked for its
//! prepared branches (XA RECOVER); those the log says were decided are committed, the others
//! rolled back, and a branch whose id does not carry this database's prefix, or that a live
//! session is still committing, is never touched. Beside `monitor`: it needs the servers, the
//! snapshot and the statistics, which the shard map (a data-path module) must not import.

use crate::pool::{self, Server};
use crate::shard::xa::{in_flight, log, prefix, valid_gtrid, xid, XaLog, RECOVERY_INTERVAL};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// What one recovery pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub committed: u64,
    pub rolled_back: u64,
}

/// One recovery pass over every logical database with a recovery log, as `login`.
pub async fn recover(snap: &crate::datapath::Snapshot, username: &str, credential: &pool::Credential) -> Recovered {
    let mut total = Recovered::default();
    let timeout = snap.config.connect_timeout();
    for db in &snap.shards.databases {
        let Some(path) = db.xa_log.as_deref() else { continue };
        let log = match log(path) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("XA recovery of `{}`: {e}", db.name);
                continue;
            }
        };
        let prefix = prefix(db);
        let mut hostgroups: Vec<u32> = db.nodes.iter().map(|n| n.hostgroup).collect();
        hostgroups.sort_unstable();
        hostgroups.dedup();
        let mut servers: Vec<Server> = snap.hostgroups.servers().iter().filter(|s| hostgroups.contains(&s.hostgroup)).cloned().collect();
        servers.dedup_by(|a, b| a.name == b.name);
        let decided_before = log.decided();
        let mut seen: HashSet<String> = HashSet::new();
        let mut all_reached = true;
        for server in &servers {
            match recover_server(server, username, credential, timeout, &prefix, &log, &mut seen).await {
                Ok(r) => {
                    total.committed += r.committed;
                    total.rolled_back += r.rolled_back;
                }
                Err(e) => {
                    all_reached = false;
                    tracing::warn!("XA recovery of `{}` on {}: {e}", db.name, server.name);
                }
            }
        }
        // A decision no server holds a branch of any more, and no session is committing: done.
        if all_reached {
            for g in decided_before {
                if !seen.contains(&g) && !in_flight(&g) {
                    log.end(&g);
                }
            }
        }
    }
    total
}

async fn recover_server(
    server: &Server,
    username: &str,
    credential: &pool::Credential,
    timeout: Duration,
    prefix: &str,
    log: &XaLog,
    seen: &mut HashSet<String>,
) -> Result<Recovered, String> {
    let params = pool::ConnectParams::internal(server, username, credential, timeout);
    let mut conn = pool::connect(&params).await.map_err(|e| e.to_string())?;
    let result = async {
        let mut done = Recovered::default();
        let rows = conn.query("XA RECOVER").await.map_err(|e| e.to_string())?;
        for row in rows {
            let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
            let (format_id, gtrid_len, data) = (field(0), field(1).parse::<usize>().unwrap_or(0), field(3));
            let (Some(gtrid), Some(bqual)) = (data.get(..gtrid_len), data.get(gtrid_len..)) else { continue };
            // Only branches of this database's transactions, with ids sluice can have made.
            if format_id != "1" || !gtrid.starts_with(prefix) || !valid_gtrid(gtrid) || !valid_gtrid(bqual) {
                continue;
            }
            seen.insert(gtrid.to_string());
            if in_flight(gtrid) {
                continue;
            }
            let commit = log.is_decided(gtrid);
            let sql = format!("XA {} {}", if commit { "COMMIT" } else { "ROLLBACK" }, xid(gtrid, bqual));
            match conn.query(&sql).await {
                Ok(_) => {
                    tracing::info!("XA recovery on {}: {sql}", server.name);
                    if commit {
                        done.committed += 1;
                    } else {
                        done.rolled_back += 1;
                    }
                }
                // Still attached to a connection the server has not seen go: the next pass.
                Err(e) => tracing::info!("XA recovery on {}: {sql} failed ({e}); trying again later", server.name),
            }
        }
        Ok(done)
    }
    .await;
    conn.quit().await;
    result
}

/// Recovery at start, then every `RECOVERY_INTERVAL`, until shutdown. It logs in with the
/// `[monitor]` credentials.
pub async fn recover_loop(data: Arc<crate::datapath::DataPath>, stop: tokio_util::sync::CancellationToken) {
    let mut tick = tokio::time::interval(RECOVERY_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    loop {
        tokio::select! {
            _ = data.shutdown.cancelled() => return,
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let snap = data.snapshot().clone();
        if snap.shards.databases.iter().all(|d| d.xa_log.is_none()) {
            continue;
        }
        let Some(m) = snap.config.monitor.as_ref().filter(|m| !m.username.is_empty()) else {
            if !warned {
                tracing::warn!("XA recovery needs the [monitor] login: prepared cross-shard transactions left by a crash stay unresolved");
                warned = true;
            }
            continue;
        };
        let credential = pool::Credential::from_password(&m.password);
        let r = recover(&snap, &m.username, &credential).await;
        data.stats.add(crate::stats::Counter::XaRecoveredCommits, r.committed);
        data.stats.add(crate::stats::Counter::XaRecoveredRollbacks, r.rolled_back);
    }
}
