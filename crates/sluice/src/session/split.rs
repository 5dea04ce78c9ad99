//! ② session → the server-time probe (`[probe]`, docs/probe.md): a timed statement's split
//! into sluice's own time and the server's. Two hooks of `exchange`: before the request, the
//! backend connection learns once which server thread serves it; after the reply, the probe's
//! slot for that thread gives the server time.

use super::Session;
use crate::exec::Timing;
use crate::pool::Backend;
use crate::probe::{TID_NONE, TID_QUERIES, TID_UNKNOWN};
use crate::stats::Split;
use std::time::Instant;
use tracing::debug;

impl Session {
    /// Once per backend connection, while the probe is attached: asks the server which of its
    /// threads serves the connection (its OS thread id). One round trip, before the
    /// connection's first timed statement, not counted in the statement's proxy time: it moves
    /// `received` on by the time it took.
    pub(super) async fn learn_server_thread(&mut self, backend: &mut Backend) {
        if backend.probe_tid != TID_UNKNOWN || !self.data.probe.attached() {
            return;
        }
        if !self.data.probe.covers(&backend.server.hostname, backend.server.port) {
            // The probe runs, but not for this server (not on this machine): not asked again.
            backend.probe_tid = TID_NONE;
            return;
        }
        let started = Instant::now();
        self.learn(backend).await;
        if let Some(r) = self.received.as_mut() {
            *r += started.elapsed();
        }
    }

    async fn learn(&self, backend: &mut Backend) {
        backend.probe_tid = TID_NONE;
        for sql in TID_QUERIES {
            match backend.query(sql).await {
                Ok(rows) => {
                    let tid = rows.first().and_then(|r| r.first()).and_then(|v| v.as_deref()).and_then(|v| v.parse::<u32>().ok());
                    if let Some(tid) = tid.filter(|&t| t != TID_UNKNOWN && t != TID_NONE) {
                        backend.probe_tid = tid;
                    }
                    debug!(id = self.id, thread = backend.thread_id, tid = backend.probe_tid, "probe: backend connection's server thread");
                    return;
                }
                // A server without that table or column: the next way, if any.
                Err(crate::pool::BackendError::Rejected { .. }) => continue,
                Err(e) => {
                    debug!(id = self.id, thread = backend.thread_id, "probe: could not learn the server thread: {e}");
                    return;
                }
            }
        }
    }

    /// A timed statement's split, once its reply has reached the client: sluice's time from
    /// the command's arrival to the request's write and from the reply's first bytes read to
    /// their write; the server's from the probe.
    pub(super) fn split(&self, backend: &Backend, timing: &Timing) -> Option<Split> {
        let received = self.received?;
        let sending = timing.sending?;
        let ended = Instant::now();
        let before = sending.saturating_duration_since(received);
        let after = match (timing.first_read, timing.first_write) {
            (Some(read), Some(write)) => write.saturating_duration_since(read),
            _ => std::time::Duration::ZERO,
        };
        let server_us = self.data.probe.server_time(backend.probe_tid, sending, ended);
        Some(Split { proxy_us: (before + after).as_micros() as u64, server_us })
    }
}
