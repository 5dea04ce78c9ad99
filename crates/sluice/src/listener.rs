//! ① listener: binds the client ports (and the admin and HTTP ports beside them) and accepts
//! connections, handing each to a worker. The set of ports follows the config: a reload binds
//! the new ones before anything else changes (a port that cannot be bound refuses the reload)
//! and stops accepting on the removed ones, whose sessions go on. The connection limits are
//! enforced when the session starts (it needs to answer with a MySQL error packet): handshakes
//! in progress (`Handshakes`, in all and per client address) before the greeting, then
//! logged-in clients after the login (inside TLS, as the server answers).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// What a port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Client,
    Admin,
    Http,
}

/// Takes each accepted connection of one kind.
pub type HandOff = Arc<dyn Fn(tokio::net::TcpStream, SocketAddr) + Send + Sync>;

struct Port {
    kind: Kind,
    /// As configured (`127.0.0.1:0` stays that, whatever port it got).
    configured: SocketAddr,
    bound: SocketAddr,
    /// The bound socket; its accept task works on a duplicate, so the task can move to
    /// another runtime without closing the port.
    socket: std::net::TcpListener,
    /// Stops the accept task; `None` until one runs.
    task: Option<CancellationToken>,
}

/// The open ports, and where their connections go once the runtime runs.
#[derive(Default)]
pub struct Listeners {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    ports: Vec<Port>,
    runtime: Option<(tokio::runtime::Handle, CancellationToken)>,
    hand_offs: Vec<(Kind, HandOff)>,
}

impl Listeners {
    /// Opens the ports `config` names and closes those it no longer names. All new ports are
    /// bound before anything changes; on error nothing changes.
    pub fn reconcile(&self, config: &crate::config::Config) -> Result<(), String> {
        let mut wanted: Vec<(Kind, SocketAddr)> = config.listen.iter().map(|&a| (Kind::Client, a)).collect();
        for (kind, addr) in [(Kind::Admin, &config.proxy.admin_listen), (Kind::Http, &config.proxy.http_listen)] {
            // Validated already: "" is off.
            wanted.extend(addr.parse::<SocketAddr>().ok().map(|a| (kind, a)));
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh: Vec<Port> = Vec::new();
        for &(kind, addr) in &wanted {
            let open = |p: &Port| p.kind == kind && p.configured == addr;
            if inner.ports.iter().any(open) || fresh.iter().any(open) {
                continue;
            }
            let l = bind(addr).map_err(|e| format!("cannot listen on {addr} ({kind:?} port): {e}"))?;
            let bound = l.local_addr().map_err(|e| format!("cannot listen on {addr} ({kind:?} port): {e}"))?;
            tracing::info!(address = %bound, ?kind, "listening");
            fresh.push(Port { kind, configured: addr, bound, socket: l, task: None });
        }
        inner.ports.retain(|p| {
            let keep = wanted.contains(&(p.kind, p.configured));
            if !keep {
                tracing::info!(address = %p.bound, kind = ?p.kind, "no longer listening");
                if let Some(t) = &p.task {
                    t.cancel();
                }
            }
            keep
        });
        inner.ports.extend(fresh);
        inner.start_pending();
        Ok(())
    }

    /// Accepts on `runtime` from now on, handing connections of each kind to its hand-off
    /// (accept tasks already running elsewhere move there).
    pub fn run(&self, runtime: tokio::runtime::Handle, shutdown: CancellationToken, hand_offs: Vec<(Kind, HandOff)>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for p in inner.ports.iter_mut() {
            if let Some(t) = p.task.take() {
                t.cancel();
            }
        }
        inner.runtime = Some((runtime, shutdown));
        inner.hand_offs = hand_offs;
        inner.start_pending();
    }

    /// Closes every port (shutdown): new connections are refused from now on.
    pub fn close_all(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for p in inner.ports.drain(..) {
            if let Some(t) = &p.task {
                t.cancel();
            }
        }
        inner.runtime = None;
    }

    /// The bound addresses of `kind`, in config order.
    pub fn addrs(&self, kind: Kind) -> Vec<SocketAddr> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.ports.iter().filter(|p| p.kind == kind).map(|p| p.bound).collect()
    }
}

impl Inner {
    fn start_pending(&mut self) {
        let Some((runtime, shutdown)) = &self.runtime else { return };
        for p in self.ports.iter_mut().filter(|p| p.task.is_none()) {
            let Some(hand_off) = self.hand_offs.iter().find(|(k, _)| *k == p.kind).map(|(_, h)| h.clone()) else { continue };
            let l = match p.socket.try_clone() {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(address = %p.bound, "cannot accept: {e}");
                    continue;
                }
            };
            tracing::debug!(address = %p.bound, kind = ?p.kind, "accepting");
            let stop = CancellationToken::new();
            p.task = Some(stop.clone());
            let shutdown = shutdown.clone();
            runtime.spawn(async move {
                let Ok(l) = tokio::net::TcpListener::from_std(l) else { return };
                accept(l, stop, shutdown, hand_off).await;
            });
        }
    }
}

/// Accepts on one port until it is removed or sluice shuts down.
async fn accept(l: tokio::net::TcpListener, stop: CancellationToken, shutdown: CancellationToken, hand_off: HandOff) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shutdown.cancelled() => return,
            r = l.accept() => match r {
                Ok((stream, peer)) => hand_off(stream, peer),
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Client connections still in their handshake (greeting sent, login not done), counted in
/// all and per client address. They do not count toward `max_connections`, so sockets left
/// half-open cannot keep logged-in clients out, and one address cannot take every slot.
#[derive(Default)]
pub struct Handshakes {
    total: AtomicUsize,
    /// Only touched when a connection starts or ends its handshake, never per statement.
    by_host: Mutex<HashMap<IpAddr, usize>>,
    /// Woken when a slot frees, for connections waiting for one (`begin_within`).
    freed: tokio::sync::Notify,
}

/// Why a handshake was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooMany {
    Handshakes,
    FromHost,
}

impl Handshakes {
    /// A slot for a handshake from `ip`, held until the guard drops; `Err` when `max` are in
    /// progress, or `per_host` from `ip`.
    pub fn begin(&self, ip: IpAddr, max: usize, per_host: usize) -> Result<HandshakeSlot<'_>, TooMany> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= max {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(TooMany::Handshakes);
        }
        let mut hosts = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        let n = hosts.entry(ip).or_insert(0);
        if *n >= per_host {
            drop(hosts);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(TooMany::FromHost);
        }
        *n += 1;
        Ok(HandshakeSlot { handshakes: self, ip })
    }

    /// `begin`, waiting up to `wait` for a slot: a burst of connections from one client (a
    /// pool filling up) is greeted as slots free rather than refused, while sockets that never
    /// finish their handshake still cannot keep others out for longer than that.
    pub async fn begin_within(&self, ip: IpAddr, max: usize, per_host: usize, wait: Duration) -> Result<HandshakeSlot<'_>, TooMany> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before trying, so a slot freed in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.begin(ip, max, per_host) {
                Ok(slot) => return Ok(slot),
                Err(why) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(why);
                    }
                }
            }
        }
    }

    /// Handshakes in progress now.
    pub fn in_progress(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

/// One handshake in progress; dropping it frees the slot.
pub struct HandshakeSlot<'a> {
    handshakes: &'a Handshakes,
    ip: IpAddr,
}

impl Drop for HandshakeSlot<'_> {
    fn drop(&mut self) {
        let mut hosts = self.handshakes.by_host.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = hosts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                hosts.remove(&self.ip);
            }
        }
        if hosts.is_empty() && hosts.capacity() > 1024 {
            // After a burst, give the table's memory back.
            hosts.shrink_to_fit();
        }
        drop(hosts);
        self.handshakes.total.fetch_sub(1, Ordering::AcqRel);
        self.handshakes.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_limited_in_all_and_per_host() {
        let h = Handshakes::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = h.begin(a, 3, 2).unwrap();
        let _a2 = h.begin(a, 3, 2).unwrap();
        assert_eq!(h.begin(a, 3, 2).err(), Some(TooMany::FromHost));
        let b1 = h.begin(b, 3, 2).unwrap();
        assert_eq!(h.begin(b, 3, 2).err(), Some(TooMany::Handshakes));
        assert_eq!(h.in_progress(), 3);
        drop(a1);
        drop(b1);
        assert_eq!(h.in_progress(), 1);
        let _a3 = h.begin(a, 3, 2).unwrap();
        let _b2 = h.begin(b, 3, 2).unwrap();
        assert_eq!(h.by_host.lock().unwrap().len(), 2);
    }
}
