//! Side path, admin port: one admin connection. The login is the client ports' own handshake
//! (TLS, mysql_native_password, caching_sha2_password) against `proxy.admin_credentials`; then
//! each COM_QUERY is answered by `admin::exec::execute` (SQLite tables, LOAD/SAVE, stats).

use super::AdminError;
use super::AdminPort;
use crate::session::{login, Directory};
use proto::command::*;
use proto::errors::*;
use std::net::SocketAddr;
use std::sync::Arc;

/// The code of a refused admin statement: 1105 (ER_UNKNOWN_ERROR), as ProxySQL's admin uses
/// for SQLite's errors, which have no MySQL code of their own.
const ER_ADMIN_REFUSED: u16 = 1105;

/// Serves one admin connection until it ends.
pub async fn run(port: Arc<AdminPort>, tcp: tokio::net::TcpStream, peer: SocketAddr) {
    crate::net::tune(&tcp);
    let stream = crate::net::Stream::Tcp(tcp);
    let id = port.control.data.registry.next_id();
    let timeout = std::time::Duration::from_millis(port.control.snapshot().config.proxy.client_connect_timeout_ms);
    let login = match tokio::time::timeout(timeout, login(&port.control.data, stream, peer, id, Directory::Admin)).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return tracing::debug!(%peer, "admin login ended: {e}"),
        Err(_) => return tracing::debug!(%peer, "admin login timed out"),
    };
    tracing::info!(%peer, user = %login.user.name, "admin session started");
    let deprecate_eof = login.capabilities.contains(proto::CapabilityFlags::CLIENT_DEPRECATE_EOF);
    let mut client = login.client;
    let mut out = Vec::new();
    let mut seq = login.seq;
    let status = proto::StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits();
    proto::packet::write_ok_message(&mut out, &mut seq, status, b"");
    if client.write_all(&out).await.is_err() {
        return;
    }
    loop {
        let frame = tokio::select! {
            _ = port.control.data.shutdown.cancelled() => return,
            f = client.read_frame(64 << 20) => match f {
                Ok(Some(f)) => f,
                _ => return,
            },
        };
        let payload = frame.payload(&client.rbuf).into_owned();
        client.consume(frame.wire_len);
        let mut seq = frame.last_seq.wrapping_add(1);
        out.clear();
        match payload.first().copied() {
            Some(COM_QUIT) | None => return,
            Some(COM_QUERY) => {
                let sql = String::from_utf8_lossy(&payload[1..]).into_owned();
                let on_thread = port.clone();
                // SQLite work is blocking: keep it off the async workers. At shutdown it is
                // interrupted, so the runtime (which waits for blocking work) can stop.
                let mut job = tokio::task::spawn_blocking(move || super::exec::execute(&on_thread, &sql));
                let answer = tokio::select! {
                    done = &mut job => done,
                    _ = port.control.data.shutdown.cancelled() => {
                        port.tables.interrupt();
                        job.await
                    }
                };
                let answer = answer.unwrap_or_else(|_| Err(AdminError::Unsupported("the admin statement failed inside sluice".into())));
                match answer {
                    Ok(output) => output.write(&mut out, &mut seq, status, deprecate_eof),
                    Err(e) => proto::packet::write_err(&mut out, &mut seq, ER_ADMIN_REFUSED, SQLSTATE_GENERAL, &e.to_string()),
                }
            }
            Some(COM_PING | COM_INIT_DB | COM_RESET_CONNECTION | COM_SET_OPTION) => {
                proto::packet::write_ok_message(&mut out, &mut seq, status, b"");
            }
            Some(cmd) => {
                let msg = format!("{} is not supported on the admin port", proto::command::name(cmd));
                proto::packet::write_err(&mut out, &mut seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, &msg);
            }
        }
        if client.write_all(&out).await.is_err() {
            return;
        }
    }
}
