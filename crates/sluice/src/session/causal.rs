//! ② session: causal reads under the read/write split (`causal_reads` of
//! `[[mysql_replication_hostgroups]]`): a session's read after its own write goes to a replica
//! only once that replica has applied the write.
//!
//! The watermark lives in the session, not in a backend connection, so multiplexing keeps it:
//! after a statement that may have written commits on the writer, the session reads the GTID
//! it committed there (`@@last_gtid`, MariaDB). Before a read on a replica that has not
//! confirmed it, the replica waits for it (`MASTER_GTID_WAIT`, at most `CAUSAL_WAIT`); a
//! replica that does not catch up in time hands the read to the writer.
//!
//! `global` (every session sees every acknowledged write) is served as `local` for now.

use super::multiplex::Held;
use super::Session;
use crate::config::CausalReads;
use crate::exec::Outcome;
use proto::StatusFlags;
use std::time::Duration;

/// How long a replica may take to apply the session's last write before the writer answers
/// the read instead.
pub(super) const CAUSAL_WAIT: Duration = Duration::from_secs(2);

/// The last write the session committed, and the servers (pool ids) known to have applied it.
#[derive(Debug, Default)]
pub(super) struct Watermark {
    gtid: String,
    confirmed: Vec<u32>,
}

impl Session {
    /// The causal-reads mode of the user's replication pair, if its writer is `hostgroup`.
    fn causal_mode(&self, writer: u32) -> CausalReads {
        let pair = self.snap.config.replication_hostgroups.iter().find(|r| r.writer_hostgroup == writer);
        pair.map_or(CausalReads::Off, |r| r.causal_reads)
    }

    /// After a statement on `held`: when it ran on the writer of a pair with causal reads, may
    /// have written (not a read by `sql::rw`) and left no transaction open, the GTID it
    /// committed becomes the session's watermark.
    pub(super) async fn note_write(&mut self, held: &mut Held, text: &[u8], outcome: &Outcome) {
        let writer = held.backend.server.hostgroup;
        if outcome.error
            || outcome.status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0
            || self.causal_mode(writer) == CausalReads::Off
            || sql::rw::class(text) != sql::rw::Class::Write
        {
            return;
        }
        match held.backend.query("SELECT @@last_gtid").await {
            Ok(rows) => {
                let gtid = rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).unwrap_or_default();
                if !gtid.is_empty() && self.watermark.as_ref().is_none_or(|w| w.gtid != gtid) {
                    self.watermark = Some(Watermark { gtid, confirmed: Vec::new() });
                }
            }
            Err(e) => held.backend.note_failure(&e),
        }
    }

    /// Before a read on a replica: true when `held`'s server has applied the session's last
    /// write (waiting up to `CAUSAL_WAIT` for it); false when the writer must answer instead.
    pub(super) async fn caught_up(&mut self, held: &mut Held) -> bool {
        let Some(w) = &self.watermark else { return true };
        let pool = held.backend.server.pool.id;
        if w.confirmed.contains(&pool) {
            return true;
        }
        // A GTID list is digits, '-' and ','; anything else is not quoted into SQL.
        if !w.gtid.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b',') {
            return false;
        }
        let sql = format!("SELECT MASTER_GTID_WAIT('{}', {})", w.gtid, CAUSAL_WAIT.as_secs_f32());
        match held.backend.query(&sql).await {
            Ok(rows) if rows.first().and_then(|r| r.first()).is_some_and(|v| v.as_deref() == Some("0")) => {
                if let Some(w) = &mut self.watermark {
                    w.confirmed.push(pool);
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                held.backend.note_failure(&e);
                false
            }
        }
    }
}
