//! Side path: sluice's own look at the backends, on its own thread and connections — the
//! greeting profile at start-up, each server's health (`checks`: connect, ping, replication
//! lag; a failing or lagging server is shunned) and the roles of the servers of replication
//! hostgroups (`roles`: read_only). What it finds goes to `health::Findings`. (The backend's
//! accounts are read by `accounts`.)

mod checks;
mod roles;

use crate::config::MonitorSection;
use crate::datapath::DataPath;
use crate::pool::{Backend, BackendError, Server};
use std::sync::Arc;
use std::time::Duration;

/// Runs the monitor until shutdown: the health checks and the role following.
pub async fn run(control: Arc<crate::control::Control>) {
    tokio::join!(checks::watch_servers(control.data.clone()), roles::follow_roles(control));
}

/// The `[monitor]` settings in force when a login is configured: the monitor checks nothing
/// without one.
fn settings(config: &crate::config::Config) -> Option<&MonitorSection> {
    config.monitor.as_ref().filter(|m| !m.username.is_empty())
}

/// How a monitor connect to a server ended.
enum Reach {
    Up(Box<Backend>),
    /// The server answered but refused the monitor login (or spoke nonsense): it is up, the
    /// checks that need a login are skipped.
    Refused(String),
    /// No answer: refused, unreachable or timed out.
    Down(String),
}

/// Opens a monitor connection to `server` with the `[monitor]` login. A refused login is
/// warned about (naming the server and its error) at most once a minute per server.
async fn open(server: &Server, monitor: &MonitorSection, health: &crate::health::Findings) -> Reach {
    let credential = crate::pool::Credential::from_password(&monitor.password);
    let timeout = Duration::from_millis(monitor.connect_timeout_ms);
    let params = crate::pool::ConnectParams::internal(server, &monitor.username, &credential, timeout);
    match crate::pool::connect(&params).await {
        Ok(b) => {
            health.login_accepted(&server.name);
            Reach::Up(Box::new(b))
        }
        Err(e @ (BackendError::Connect { .. } | BackendError::Timeout { .. } | BackendError::Lost { .. })) => Reach::Down(e.to_string()),
        Err(e) => {
            if health.warn_login(&server.name) {
                tracing::warn!(
                    "monitor: {} refused the [monitor] login `{}`: {e}; its read_only and replication lag checks are skipped                      (the server answers, so it is not shunned); said again at most once a minute",
                    server.name,
                    monitor.username
                );
            }
            Reach::Refused(e.to_string())
        }
    }
}

/// Runs one of the monitor's queries on `link` within `timeout`; `Err` names what failed.
async fn ask(link: &mut Backend, sql: &str, timeout: Duration) -> Result<(Vec<String>, Vec<Vec<Option<String>>>), String> {
    match tokio::time::timeout(timeout, link.query_named(sql)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// Reads one backend's greeting at start-up so the first clients are greeted like the server
/// (version, capabilities, collation). Best effort: a backend that is down is reported later.
pub fn probe_profile(data: &DataPath) {
    let Some((hostname, port, addr)) = data.snapshot().hostgroups.servers().first().map(|s| (s.hostname.clone(), s.port, s.name.clone()))
    else {
        return;
    };
    let greeting = (|| -> Option<proto::handshake::ServerGreeting> {
        use std::io::Read;
        let mut s: Box<dyn Read> = match crate::config::socket_path(&hostname) {
            Some(path) => {
                let s = std::os::unix::net::UnixStream::connect(path).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
                Box::new(s)
            }
            None => {
                let sa = std::net::ToSocketAddrs::to_socket_addrs(&(hostname.as_str(), port)).ok()?.next()?;
                let s = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(1)).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
                Box::new(s)
            }
        };
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
