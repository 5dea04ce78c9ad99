//! ① listener: binds the client ports and accepts connections until shutdown, handing each to
//! a worker. The connection limit is enforced when the session starts (it needs to answer with
//! a MySQL error packet).

use std::net::SocketAddr;
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

/// Accepts on every listener until `shutdown`; `hand_off` takes each new connection.
pub async fn accept_all(
    listeners: Vec<std::net::TcpListener>,
    shutdown: &CancellationToken,
    hand_off: impl Fn(tokio::net::TcpStream, SocketAddr),
) {
    let listeners: Vec<tokio::net::TcpListener> = listeners.into_iter().filter_map(|l| tokio::net::TcpListener::from_std(l).ok()).collect();
    let accept_any = || futures_select_all(listeners.iter().map(|l| Box::pin(l.accept())).collect::<Vec<_>>());
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = accept_any() => match r {
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

/// The first of several accept futures to complete.
async fn futures_select_all<F, T>(mut futs: Vec<std::pin::Pin<Box<F>>>) -> T
where
    F: std::future::Future<Output = T>,
{
    std::future::poll_fn(|cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
