//! Side path: sluice's own look at the backends — the greeting profile at start-up, and the
//! roles of the servers of replication hostgroups (`follow_roles`). (The backend's accounts are
//! read by `accounts`.)

use crate::datapath::DataPath;
use std::time::Duration;

/// Reads one backend's greeting at start-up so the first clients are greeted like the server
/// (version, capabilities, collation). Best effort: a backend that is down is reported later.
pub fn probe_profile(data: &DataPath) {
    let Some(addr) = data.snapshot().hostgroups.servers().first().map(|s| format!("{}:{}", s.hostname, s.port)) else {
        return;
    };
    let greeting = (|| -> Option<proto::handshake::ServerGreeting> {
        use std::io::Read;
        let sa = std::net::ToSocketAddrs::to_socket_addrs(&addr).ok()?.next()?;
        let mut s = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut header = [0u8; 4];
        s.read_exact(&mut header).ok()?;
        let (len, _) = proto::frame::header(&header)?;
        let mut payload = vec![0; len.min(1024)];
        s.read_exact(&mut payload).ok()?;
        proto::handshake::parse_greeting(&payload).ok()
    })();
    match greeting {
        Some(g) => data.learn_profile(&g),
        None => tracing::warn!("backend {addr} did not answer at start-up; greeting clients with defaults"),
    }
}

/// How often the monitor asks the servers of each replication pair for their role.
pub const ROLE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Follows the roles of the servers of each `[[mysql_replication_hostgroups]]` pair, as
/// ProxySQL's read_only monitor: every `ROLE_CHECK_INTERVAL` each server of a pair's writer and
/// reader hostgroups is asked (with the `[monitor]` login, on a connection kept between checks)
/// whether it is read-only (the pair's `check_type`); a writable server found in the reader
/// hostgroup moves to the writer hostgroup and a read-only one in the writer hostgroup to the
/// reader hostgroup, through a reload (`Control::apply`) like an admin's LOAD. A server that
/// does not answer keeps its place.
pub async fn follow_roles(control: std::sync::Arc<crate::control::Control>) {
    let mut links: std::collections::HashMap<std::sync::Arc<str>, crate::pool::Backend> = std::collections::HashMap::new();
    let shutdown = control.data.shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(ROLE_CHECK_INTERVAL) => {}
        }
        let snapshot = control.snapshot();
        let config = &snapshot.config;
        let Some(monitor) = config.monitor.as_ref().filter(|m| !m.username.is_empty()) else { continue };
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
                let Some(read_only) = read_only(&mut links, server, monitor, &pair.check_type, config.connect_timeout()).await else {
                    continue;
                };
                let (from, to) = match (server.hostgroup == pair.writer_hostgroup, read_only) {
                    (true, true) => (pair.writer_hostgroup, pair.reader_hostgroup),
                    (false, false) => (pair.reader_hostgroup, pair.writer_hostgroup),
                    _ => continue,
                };
                moves.push((server.hostname.clone(), server.port, from, to));
            }
        }
        if moves.is_empty() {
            continue;
        }
        let mut fc = config.to_file();
        for (hostname, port, from, to) in &moves {
            let same = |r: &crate::config::ServerRow| r.hostname == *hostname && r.port == *port;
            if fc.mysql_servers.iter().any(|r| same(r) && r.hostgroup_id == *to) {
                // Listed in both hostgroups: it leaves the one it no longer belongs to.
                fc.mysql_servers.retain(|r| !(same(r) && r.hostgroup_id == *from));
            } else if let Some(r) = fc.mysql_servers.iter_mut().find(|r| same(r) && r.hostgroup_id == *from) {
                r.hostgroup_id = *to;
            }
            let role = if fc.mysql_replication_hostgroups.iter().any(|p| p.writer_hostgroup == *to) { "writable" } else { "read-only" };
            tracing::warn!("monitor: {hostname}:{port} is {role}: moved from hostgroup {from} to {to}");
        }
        let applied = fc.validate(None, None).map_err(|e| e.to_string()).and_then(|c| control.apply(c).map_err(|e| e.to_string()));
        if let Err(e) = applied {
            tracing::warn!("monitor: moving servers between replication hostgroups was refused: {e}");
        }
    }
}

/// Whether `server` is read-only by `check_type`, on the monitor's kept connection to it
/// (opened on first use, dropped after a failure); `None` when it cannot tell.
async fn read_only(
    links: &mut std::collections::HashMap<std::sync::Arc<str>, crate::pool::Backend>,
    server: &crate::pool::Server,
    monitor: &crate::config::MonitorSection,
    check_type: &str,
    timeout: Duration,
) -> Option<bool> {
    if !links.contains_key(&server.name) {
        let credential = crate::pool::Credential::from_password(&monitor.password);
        let params = crate::pool::ConnectParams::internal(server, &monitor.username, &credential, timeout);
        match crate::pool::connect(&params).await {
            Ok(b) => {
                links.insert(server.name.clone(), b);
            }
            Err(e) => {
                tracing::debug!("monitor: cannot reach {}: {e}", server.name);
                return None;
            }
        }
    }
    let link = links.get_mut(&server.name)?;
    // Asked alone: MariaDB 10.11 answers @@read_only as 0 in a statement that reads a table.
    let answer = tokio::time::timeout(timeout, link.query("SELECT @@global.read_only, @@global.innodb_read_only")).await;
    let row = match answer {
        Ok(Ok(rows)) => rows.into_iter().next()?,
        Ok(Err(e)) => {
            tracing::debug!("monitor: {} did not say its role: {e}", server.name);
            links.remove(&server.name);
            return None;
        }
        Err(_) => {
            links.remove(&server.name);
            return None;
        }
    };
    let flag = |i: usize| row.get(i).cloned().flatten().is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("ON"));
    let (read_only, innodb) = (flag(0), flag(1));
    Some(match check_type.to_ascii_lowercase().as_str() {
        "innodb_read_only" => innodb,
        "read_only|innodb_read_only" => read_only || innodb,
        "read_only&innodb_read_only" => read_only && innodb,
        // read_only, and super_read_only (MySQL's; MariaDB has read_only alone).
        _ => read_only,
    })
}
