//! `SWITCHOVER TO 'host:port' [FOR HOSTGROUP n]` (side path: admin port): a planned change of
//! writer in a `[[mysql_replication_hostgroups]]` pair, with the `[monitor]` login on the
//! servers. Steps, each named in the error that stops it:
//!
//! 1. `offline_soft`: the old writer leaves new statements (a reload); writes wait for a writer
//!    (`[pool] writer_wait_ms`), reads go on on the replicas;
//! 2. `drain`: its connections in use end (at most `DRAIN_WAIT`; past it, what still runs there
//!    can no longer write once step 3 is done, so nothing acknowledged is lost);
//! 3. `read_only`: `SET GLOBAL read_only = 1` on it, and its `@@gtid_binlog_pos` is read;
//! 4. `catch_up`: the candidate applies that position (`MASTER_GTID_WAIT`, at most
//!    `CATCH_UP_WAIT`);
//! 5. `promote`: `STOP SLAVE` and `SET GLOBAL read_only = 0` on the candidate;
//! 6. `roles`: the candidate moves to the writer hostgroup and the old writer to the reader
//!    hostgroup, both ONLINE (a reload, as the role monitor's);
//! 7. `repoint`: with `[monitor] replication_user` set, the old writer and the other replicas
//!    replicate from the candidate; without, the answer says it is left to the operator.
//!
//! A failure before step 6 rolls back what was done: the candidate read-only and replicating
//! again, the old writer writable, the config as it was.

use crate::config::{Config, MonitorSection, ReplicationHostgroupRow, ServerStatus};
use crate::control::Control;
use crate::pool::{self, Backend, Server};
use std::time::{Duration, Instant};

/// How long the old writer's statements in progress may take to end.
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// How long the candidate may take to apply the old writer's last transaction.
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// A `host:port` server of the pair, as the config names it.
#[derive(Debug, Clone)]
struct Member {
    hostname: String,
    port: u16,
    name: String,
}

impl Member {
    fn of(s: &Server) -> Member {
        Member { hostname: s.hostname.clone(), port: s.port, name: s.name.to_string() }
    }
}

/// Carries out a switchover to `candidate` (`host:port`) in the pair whose writer hostgroup is
/// `hostgroup` (else the pair whose reader hostgroup holds the candidate). The answer says
/// what was done; an error names the step and the server.
pub async fn switchover(control: &Control, candidate: &str, hostgroup: Option<u32>) -> Result<String, String> {
    let snapshot = control.snapshot();
    let config = &snapshot.config;
    let refused = |why: String| format!("SWITCHOVER refused: {why}");
    let monitor = config
        .monitor
        .clone()
        .filter(|m| !m.username.is_empty())
        .ok_or_else(|| refused("it needs the [monitor] login (mysql-monitor_username) to reach the servers".into()))?;
    let servers = snapshot.hostgroups.servers();
    let is_candidate = |s: &&Server| &*s.name == candidate;
    let pair = pick_pair(config, servers, candidate, hostgroup).map_err(refused)?;
    let Some(new) = servers.iter().filter(is_candidate).find(|s| s.hostgroup == pair.reader_hostgroup) else {
        return Err(refused(format!(
            "{candidate} is not a server of reader hostgroup {} (the replicas of writer hostgroup {})",
            pair.reader_hostgroup, pair.writer_hostgroup
        )));
    };
    let old: Vec<&Server> = servers.iter().filter(|s| s.hostgroup == pair.writer_hostgroup && &*s.name != candidate).collect();
    let Some(&old_writer) = old.first() else {
        return Err(refused(format!("writer hostgroup {} has no server to switch over from", pair.writer_hostgroup)));
    };
    if old.len() > 1 {
        return Err(refused(format!("writer hostgroup {} has {} servers; a switchover moves from one", pair.writer_hostgroup, old.len())));
    }
    let timeout = config.connect_timeout();
    let step = |name: &str, server: &str, e: String| format!("SWITCHOVER failed at step {name} on {server}: {e}");
    let mut old_link = link(old_writer, &monitor, timeout).await.map_err(|e| step("connect", &old_writer.name, e))?;
    let mut new_link = link(new, &monitor, timeout).await.map_err(|e| step("connect", &new.name, e))?;
    let (old_m, new_m) = (Member::of(old_writer), Member::of(new));
    let original = config.clone();
    let mut undo = Undo { control, original: &original, old_read_only: false, new_promoted: false };

    // 1. offline_soft.
    let drained = with_servers(config, |rows| {
        for r in rows.iter_mut().filter(|r| r.hostgroup_id == pair.writer_hostgroup && same(r, &old_m)) {
            r.status = ServerStatus::OfflineSoft;
        }
    });
    apply(control, drained).map_err(|e| step("offline_soft", &old_m.name, e))?;
    // 2. drain.
    let deadline = Instant::now() + DRAIN_WAIT;
    while old_writer.pool.open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let busy = old_writer.pool.open();
    // 3. read_only.
    let position = async {
        old_link.query("SET GLOBAL read_only = 1").await?;
        old_link.query("SELECT @@global.gtid_binlog_pos").await
    };
    undo.old_read_only = true;
    let position = match position.await {
        Ok(rows) => rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).unwrap_or_default(),
        Err(e) => return Err(undo.with(&mut old_link, &mut new_link, step("read_only", &old_m.name, e.to_string())).await),
    };
    // 4. catch_up: a GTID list is digits, '-' and ','; nothing else is quoted into SQL.
    if !position.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b',') {
        let e = format!("an unexpected @@gtid_binlog_pos {position:?}");
        return Err(undo.with(&mut old_link, &mut new_link, step("read_only", &old_m.name, e)).await);
    }
    let wait = format!("SELECT MASTER_GTID_WAIT('{position}', {})", CATCH_UP_WAIT.as_secs());
    match new_link.query(&wait).await {
        Ok(rows) if rows.first().and_then(|r| r.first()).is_some_and(|v| v.as_deref() == Some("0")) => {}
        Ok(_) => {
            let e = format!("it did not apply {position} within {CATCH_UP_WAIT:?}");
            return Err(undo.with(&mut old_link, &mut new_link, step("catch_up", &new_m.name, e)).await);
        }
        Err(e) => return Err(undo.with(&mut old_link, &mut new_link, step("catch_up", &new_m.name, e.to_string())).await),
    }
    // 5. promote.
    undo.new_promoted = true;
    if let Err(e) = new_link.query("STOP SLAVE").await.and(new_link.query("SET GLOBAL read_only = 0").await) {
        return Err(undo.with(&mut old_link, &mut new_link, step("promote", &new_m.name, e.to_string())).await);
    }
    // 6. roles: the two servers swap hostgroups, ONLINE.
    let swapped = with_servers(&original, |rows| {
        for r in rows.iter_mut() {
            if r.hostgroup_id == pair.writer_hostgroup && same(r, &old_m) {
                r.hostgroup_id = pair.reader_hostgroup;
                r.status = ServerStatus::Online;
            } else if r.hostgroup_id == pair.reader_hostgroup && same(r, &new_m) {
                r.hostgroup_id = pair.writer_hostgroup;
                r.status = ServerStatus::Online;
            }
        }
    });
    if let Err(e) = apply(control, swapped) {
        return Err(undo.with(&mut old_link, &mut new_link, step("roles", "the config", e)).await);
    }
    tracing::warn!("admin: SWITCHOVER: {} is the writer of hostgroup {} now, {} a reader", new_m.name, pair.writer_hostgroup, old_m.name);
    // The candidate keeps no replication settings of its own (it would replicate again at a
    // restart otherwise).
    let _ = new_link.query("RESET SLAVE ALL").await;
    // 7. repoint.
    let mut said = format!(
        "{} is the writer of hostgroup {}; {} is in reader hostgroup {}",
        new_m.name, pair.writer_hostgroup, old_m.name, pair.reader_hostgroup
    );
    if busy > 0 {
        said.push_str(&format!(
            " ({busy} connections were still in use on {} after {DRAIN_WAIT:?}; their writes failed read-only)",
            old_m.name
        ));
    }
    let others: Vec<Member> = servers
        .iter()
        .filter(|s| s.hostgroup == pair.reader_hostgroup && &*s.name != candidate)
        .map(Member::of)
        .filter(|m| !(m.hostname == old_m.hostname && m.port == old_m.port))
        .collect();
    if monitor.replication_user.is_empty() {
        said.push_str("; replication was not re-pointed ([monitor] replication_user is not set): point the old writer and the other replicas at the new writer");
        return Ok(said);
    }
    if crate::config::socket_path(&new_m.hostname).is_some() {
        // CHANGE MASTER TO takes a host and port: another machine cannot use a socket path.
        said.push_str(&format!(
            "; replication was not re-pointed ({} is a Unix socket path, which replicas cannot replicate from): point the old writer and the other replicas at the new writer",
            new_m.name
        ));
        return Ok(said);
    }
    let mut failed = Vec::new();
    if let Err(e) = repoint(&mut old_link, &new_m, &monitor, "current_pos").await {
        failed.push(format!("{}: {e}", old_m.name));
    }
    for other in &others {
        let Some(server) = servers.iter().find(|s| s.hostname == other.hostname && s.port == other.port) else { continue };
        let result = match link(server, &monitor, timeout).await {
            Ok(mut l) => repoint(&mut l, &new_m, &monitor, "slave_pos").await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            failed.push(format!("{}: {e}", other.name));
        }
    }
    if failed.is_empty() {
        said.push_str(&format!("; {} other server(s) replicate from it", 1 + others.len()));
    } else {
        said.push_str(&format!("; re-pointing failed at step repoint on {}", failed.join("; ")));
    }
    Ok(said)
}

/// The pair a switchover to `candidate` concerns.
fn pick_pair<'a>(
    config: &'a Config,
    servers: &[Server],
    candidate: &str,
    hostgroup: Option<u32>,
) -> Result<&'a ReplicationHostgroupRow, String> {
    let pairs = &config.replication_hostgroups;
    match hostgroup {
        Some(h) => pairs
            .iter()
            .find(|p| p.writer_hostgroup == h)
            .ok_or_else(|| format!("hostgroup {h} is not the writer hostgroup of a [[mysql_replication_hostgroups]] row")),
        None => {
            let of = |p: &&ReplicationHostgroupRow| servers.iter().any(|s| &*s.name == candidate && s.hostgroup == p.reader_hostgroup);
            let mut found = pairs.iter().filter(of);
            match (found.next(), found.next()) {
                (Some(p), None) => Ok(p),
                (Some(_), Some(_)) => Err(format!("{candidate} is a reader of several pairs: say FOR HOSTGROUP <writer hostgroup>")),
                (None, _) if pairs.is_empty() => Err("there is no [[mysql_replication_hostgroups]] pair".into()),
                (None, _) => Err(format!("{candidate} is not a server of any pair's reader hostgroup")),
            }
        }
    }
}

fn same(r: &crate::config::ServerRow, m: &Member) -> bool {
    r.hostname == m.hostname && r.port == m.port
}

/// `config` with its server rows changed by `edit`.
fn with_servers(config: &Config, edit: impl FnOnce(&mut Vec<crate::config::ServerRow>)) -> crate::config::FileConfig {
    let mut fc = config.to_file();
    edit(&mut fc.mysql_servers);
    fc
}

/// Checks and puts `fc` in force, as a LOAD does.
fn apply(control: &Control, fc: crate::config::FileConfig) -> Result<(), String> {
    let config = fc.validate(None, None).map_err(|e| e.to_string())?;
    control.apply(config).map(|_| ()).map_err(|e| e.to_string())
}

/// A connection with the `[monitor]` login.
async fn link(server: &Server, monitor: &MonitorSection, timeout: Duration) -> Result<Backend, String> {
    let credential = pool::Credential::from_password(&monitor.password);
    let params = pool::ConnectParams::internal(server, &monitor.username, &credential, timeout);
    pool::connect(&params).await.map_err(|e| e.to_string())
}

/// Points the server on `link` at `to` with the replication login (GTID `mode`).
async fn repoint(link: &mut Backend, to: &Member, monitor: &MonitorSection, mode: &str) -> Result<(), pool::BackendError> {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('\'', "\\'");
    link.query("STOP SLAVE").await?;
    link.query(&format!(
        "CHANGE MASTER TO MASTER_HOST='{}', MASTER_PORT={}, MASTER_USER='{}', MASTER_PASSWORD='{}', MASTER_USE_GTID={mode}",
        quote(&to.hostname),
        to.port,
        quote(&monitor.replication_user),
        quote(&monitor.replication_password)
    ))
    .await?;
    link.query("START SLAVE").await?;
    Ok(())
}

/// What a failed switchover rolls back.
struct Undo<'a> {
    control: &'a Control,
    original: &'a Config,
    old_read_only: bool,
    new_promoted: bool,
}

impl Undo<'_> {
    /// Rolls back, and returns `error` with what could not be rolled back.
    async fn with(&self, old: &mut Backend, new: &mut Backend, error: String) -> String {
        let mut left = Vec::new();
        if self.new_promoted {
            if let Err(e) = new.query("SET GLOBAL read_only = 1").await.and(new.query("START SLAVE").await) {
                left.push(format!("the candidate could not be made a replica again ({e})"));
            }
        }
        if self.old_read_only {
            if let Err(e) = old.query("SET GLOBAL read_only = 0").await {
                left.push(format!("the old writer could not be made writable again ({e})"));
            }
        }
        if let Err(e) = self.control.apply(self.original.clone()) {
            left.push(format!("the config could not be restored ({e})"));
        }
        tracing::warn!("admin: {error}; rolled back");
        if left.is_empty() {
            format!("{error}; rolled back")
        } else {
            format!("{error}; rollback incomplete: {}", left.join("; "))
        }
    }
}
