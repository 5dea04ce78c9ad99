//! Side path, monitor: the roles of the servers of replication hostgroups (read_only), and
//! their moves between a pair's writer and reader hostgroups.

use super::{ask, open, settings, Reach};
use crate::config::MonitorSection;
use crate::health::{now_us, Check, LogRow};
use crate::pool::{Backend, Server};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Follows the roles of the servers of each `[[mysql_replication_hostgroups]]` pair, as
/// ProxySQL's read_only monitor: every `read_only_interval_ms` each server of a pair's writer
/// and reader hostgroups is asked (with the `[monitor]` login, on a connection kept between
/// checks) whether it is read-only (the pair's `check_type`); a writable server found in the
/// reader hostgroup moves to the writer hostgroup and a read-only one in the writer hostgroup
/// to the reader hostgroup (a writer that is read-only at start-up too), through a reload
/// (`Control::apply`) like an admin's LOAD. A server that does not answer keeps its place.
/// Each answer goes to the read_only log.
pub async fn follow_roles(control: Arc<crate::control::Control>) {
    let mut links: HashMap<Arc<str>, Backend> = HashMap::new();
    let shutdown = control.data.shutdown.clone();
    let mut interval = Duration::from_millis(crate::config::MonitorSection::default().read_only_interval_ms);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let snapshot = control.data.live.load_full();
        let config = &snapshot.config;
        let Some(monitor) = settings(config) else { continue };
        interval = Duration::from_millis(monitor.read_only_interval_ms);
        if config.replication_hostgroups.is_empty() {
            links.clear();
            continue;
        }
        let mut moves: Vec<(String, u16, u32, u32)> = Vec::new();
        for pair in &config.replication_hostgroups {
            let in_pair = snapshot
                .hostgroups
                .servers()
                .iter()
                .filter(|s| s.hostgroup == pair.writer_hostgroup || s.hostgroup == pair.reader_hostgroup);
            for server in in_pair {
                let Some(read_only) = read_only(&mut links, server, monitor, &pair.check_type, &control.data.health).await else {
                    continue;
                };
                let (from, to) = match (server.hostgroup == pair.writer_hostgroup, read_only) {
                    (true, true) => (pair.writer_hostgroup, pair.reader_hostgroup),
                    (false, false) => (pair.reader_hostgroup, pair.writer_hostgroup),
                    _ => continue,
                };
                if !moves.iter().any(|m| m.0 == server.hostname && m.1 == server.port && m.2 == from) {
                    moves.push((server.hostname.clone(), server.port, from, to));
                    let why = if read_only {
                        format!("is read-only ({}): moved from writer hostgroup {from} to reader hostgroup {to}", pair.check_type)
                    } else {
                        format!("is writable ({} off): moved from reader hostgroup {from} to writer hostgroup {to}", pair.check_type)
                    };
                    tracing::warn!("monitor: {} {why}", server.name);
                }
            }
        }
        links.retain(|name, _| snapshot.hostgroups.servers().iter().any(|s| s.name == *name));
        if moves.is_empty() {
            continue;
        }
        // The moves go onto the config in force now, not the one this round began with: the
        // round awaited every server's answer, and a change applied meanwhile (a SWITCHOVER's
        // final roles, an admin's LOAD) must not be undone by writing the older config back.
        // A move the change already made, or made moot, finds no row left in `from`.
        let mut fc = control.data.live.load().config.to_file();
        for (hostname, port, from, to) in &moves {
            let same = |r: &crate::config::ServerRow| r.hostname == *hostname && r.port == *port;
            if fc.mysql_servers.iter().any(|r| same(r) && r.hostgroup_id == *to) {
                // Listed in both hostgroups: it leaves the one it no longer belongs to.
                fc.mysql_servers.retain(|r| !(same(r) && r.hostgroup_id == *from));
            } else if let Some(r) = fc.mysql_servers.iter_mut().find(|r| same(r) && r.hostgroup_id == *from) {
                r.hostgroup_id = *to;
            }
        }
        let applied = fc.validate(None, None).map_err(|e| e.to_string()).and_then(|c| control.apply(c).map_err(|e| e.to_string()));
        if let Err(e) = applied {
            tracing::warn!("monitor: moving servers between replication hostgroups was refused: {e}");
        }
    }
}

/// Whether `server` is read-only by `check_type`, on the monitor's kept connection to it
/// (opened on first use, dropped after a failure); `None` when it cannot tell. Logged in the
/// read_only log.
async fn read_only(
    links: &mut HashMap<Arc<str>, Backend>,
    server: &Server,
    monitor: &MonitorSection,
    check_type: &str,
    health: &crate::health::Findings,
) -> Option<bool> {
    let started = (now_us(), Instant::now());
    let log = |value: Option<bool>, error: Option<String>| LogRow {
        hostname: server.hostname.clone(),
        port: server.port,
        time_start_us: started.0,
        success_time_us: if error.is_none() { started.1.elapsed().as_micros() as u64 } else { 0 },
        value: value.map(i64::from),
        gtid: None,
        error,
    };
    let history = monitor.history_rows as usize;
    if !links.contains_key(&server.name) {
        match open(server, monitor, health).await {
            Reach::Up(b) => {
                links.insert(server.name.clone(), *b);
            }
            Reach::Refused(e) | Reach::Down(e) => {
                health.record(Check::ReadOnly, log(None, Some(e)), history);
                return None;
            }
        }
    }
    let link = links.get_mut(&server.name)?;
    // Asked alone: MariaDB 10.11 answers @@read_only as 0 in a statement that reads a table.
    let timeout = Duration::from_millis(monitor.ping_timeout_ms);
    let row = match ask(link, "SELECT @@global.read_only, @@global.innodb_read_only", timeout).await {
        Ok((_, rows)) => rows.into_iter().next(),
        Err(e) => {
            links.remove(&server.name);
            health.record(Check::ReadOnly, log(None, Some(e)), history);
            return None;
        }
    };
    let Some(row) = row else {
        health.record(Check::ReadOnly, log(None, Some("read_only: no row".into())), history);
        return None;
    };
    let flag = |i: usize| row.get(i).cloned().flatten().is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("ON"));
    let (read_only, innodb) = (flag(0), flag(1));
    let answer = match check_type.to_ascii_lowercase().as_str() {
        "innodb_read_only" => innodb,
        "read_only|innodb_read_only" => read_only || innodb,
        "read_only&innodb_read_only" => read_only && innodb,
        // read_only, and super_read_only (MySQL's; MariaDB has read_only alone).
        _ => read_only,
    };
    health.record(Check::ReadOnly, log(Some(answer), None), history);
    Some(answer)
}
