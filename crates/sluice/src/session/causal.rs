//! ② session: causal reads under the read/write split (`causal_reads` of
//! `[[mysql_replication_hostgroups]]`): a read goes to a replica only once that replica has
//! applied what the read must see, else the writer answers it.
//!
//! - `local`: what the session itself wrote. The watermark lives in the session, not in a
//!   backend connection, so multiplexing keeps it: after a statement that may have written
//!   commits on the writer, the session reads the GTID it committed there (`@@last_gtid`).
//! - `global`: everything the writer had acknowledged when the read came (MaxScale's
//!   `global`): before each read on a replica, one more statement reads the writer's
//!   `@@gtid_binlog_pos`.
//!
//! A replica that has not confirmed the watermark waits for it (`MASTER_GTID_WAIT`, at most the
//! pair's `causal_reads_timeout_ms`); one that does not catch up in time hands the read to the
//! writer. A MySQL server (greeting without "MariaDB") is asked `@@gtid_executed` and
//! `WAIT_FOR_EXECUTED_GTID_SET` instead; that path is untested here (no MySQL 8 server to test
//! against).

use super::multiplex::{Held, Needs};
use super::Session;
use crate::config::{CausalReads, ReplicationHostgroupRow};
use crate::exec::Outcome;
use crate::pool::Backend;
use crate::stats::Counter;
use proto::StatusFlags;

/// The last write the session must see, and the servers (pool ids) known to have applied it.
#[derive(Debug, Default)]
pub(super) struct Watermark {
    gtid: String,
    confirmed: Vec<u32>,
}

impl Session {
    /// The user's replication pair, if its writer is `writer`.
    fn pair(&self, writer: u32) -> Option<&ReplicationHostgroupRow> {
        self.snap.config.replication_hostgroups.iter().find(|r| r.writer_hostgroup == writer)
    }

    /// After a statement on `held`: when it ran on the writer of a pair with causal reads
    /// `local`, may have written (`writes`: not a read by `sql::rw`) and left no transaction
    /// open, the GTID it committed becomes the session's watermark.
    pub(super) async fn note_write(&mut self, held: &mut Held, writes: impl FnOnce() -> bool, outcome: &Outcome) {
        let writer = held.backend.server.hostgroup;
        if outcome.error
            || outcome.status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0
            || self.pair(writer).is_none_or(|p| p.causal_reads != CausalReads::Local)
            || !writes()
        {
            return;
        }
        // MySQL has no GTID of the session's own: its executed set covers it.
        let sql = if held.backend.is_mariadb() { "SELECT @@last_gtid" } else { "SELECT @@gtid_executed" };
        if let Some(gtid) = read_position(&mut held.backend, sql).await {
            self.raise_watermark(gtid);
        }
    }

    /// A new watermark: no server is known to have applied it yet.
    fn raise_watermark(&mut self, gtid: String) {
        if !gtid.is_empty() && self.watermark.as_ref().is_none_or(|w| w.gtid != gtid) {
            self.watermark = Some(Watermark { gtid, confirmed: Vec::new() });
        }
    }

    /// Before a read on `held`, a replica of the pair whose writer is `writer`: true when its
    /// server has applied what the read must see (waiting up to the pair's timeout); false when
    /// the writer must answer instead.
    pub(super) async fn caught_up(&mut self, held: &mut Held, writer: u32) -> bool {
        let Some(pair) = self.pair(writer) else { return true };
        let (mode, timeout_ms) = (pair.causal_reads, pair.causal_reads_timeout_ms);
        match mode {
            CausalReads::Off => return true,
            CausalReads::Local => {}
            CausalReads::Global => {
                let position = self.writer_position(writer).await;
                // The writer's connection served the session meanwhile: `held` serves it again
                // (KILL and SHOW PROCESSLIST find the statement's backend by it).
                self.handle.set_backend(held.backend.server.pool.id, held.backend.thread_id);
                let Some(position) = position else { return false };
                self.raise_watermark(position);
            }
        }
        let Some(w) = &self.watermark else { return true };
        let pool = held.backend.server.pool.id;
        if w.confirmed.contains(&pool) {
            return true;
        }
        // A GTID list is hex digits, ':', '-', ',' and newlines (MySQL's); nothing else is
        // quoted into SQL.
        if !w.gtid.bytes().all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'-' | b',' | b'\n')) {
            return false;
        }
        let seconds = f64::from(timeout_ms) / 1000.0;
        let sql = if held.backend.is_mariadb() {
            format!("SELECT MASTER_GTID_WAIT('{}', {seconds})", w.gtid)
        } else {
            format!("SELECT WAIT_FOR_EXECUTED_GTID_SET('{}', {seconds})", w.gtid)
        };
        // The wait is a read waiting there: counted, so other reads go to a replica that keeps up.
        let _running = held.backend.server.run_statement();
        self.data.stats.add(Counter::CausalReadWaits, 1);
        // Both answer 0 once the position is applied (MariaDB -1, MySQL 1 on a timeout).
        if read_position(&mut held.backend, &sql).await.as_deref() != Some("0") {
            return false;
        }
        if let Some(w) = &mut self.watermark {
            w.confirmed.push(pool);
        }
        true
    }

    /// `global`: what the writer has acknowledged now (its binary log's GTID position), read on
    /// one of its connections; `None` when it could not be read.
    async fn writer_position(&mut self, writer: u32) -> Option<String> {
        let mut held = self.acquire(writer, 0, Needs::default()).await.ok()?;
        let sql = if held.backend.is_mariadb() { "SELECT @@gtid_binlog_pos" } else { "SELECT @@gtid_executed" };
        let position = read_position(&mut held.backend, sql).await;
        self.settle(held);
        position
    }
}

/// The one value `sql` returns on `b` (empty for NULL); `None` when it failed.
async fn read_position(b: &mut Backend, sql: &str) -> Option<String> {
    match b.query(sql).await {
        Ok(rows) => Some(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).unwrap_or_default()),
        Err(e) => {
            b.note_failure(&e);
            None
        }
    }
}
