//! Side path: sluice's own look at the backends — the greeting profile at start-up and the
//! backend's accounts for `backend_users` (read with the `[monitor]` login).

use crate::datapath::DataPath;
use crate::pool::{self, Credential};
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

/// Reads (user, host, plugin, native hash) rows from mysql.user with the monitor login.
pub async fn load_accounts(data: &DataPath) -> anyhow::Result<Vec<(String, String, String, String)>> {
    let snapshot = data.live.load_full();
    let monitor = snapshot.config.monitor.clone().unwrap_or_default();
    let server = snapshot.hostgroups.pick(snapshot.config.proxy.backend_users_hostgroup)?;
    let credential = if monitor.password.is_empty() { Credential::Empty } else { Credential::Plain(monitor.password.clone()) };
    let params = pool::ConnectParams::internal(server, &monitor.username, &credential, snapshot.config.connect_timeout());
    let mut conn = pool::connect(&params).await?;
    let rows =
        conn.query("SELECT User, Host, plugin, IF(authentication_string = '', Password, authentication_string) FROM mysql.user").await;
    conn.quit().await;
    Ok(rows?
        .into_iter()
        .filter_map(|r| {
            let mut it = r.into_iter();
            Some((it.next()??, it.next()??, it.next()?.unwrap_or_default(), it.next()?.unwrap_or_default()))
        })
        .collect())
}
