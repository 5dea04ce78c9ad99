//! Side path: sluice's own look at the backends — the greeting profile at start-up. (The
//! backend's accounts are read by `accounts`.)

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
