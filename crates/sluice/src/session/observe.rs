//! ② session → statistics, query log and processlist: what a statement leaves behind. One
//! place, so text statements and prepared ones are counted alike. Everything written on the
//! query path goes to this thread's own counters (`stats`) or a bounded queue (`querylog`).

use super::Session;
use crate::exec::Outcome;
use crate::stats::{Command, StatementRecord};
use std::time::Instant;

/// A statement being watched, from its start to the end of its reply.
pub(super) struct Watch {
    pub started: Instant,
    pub hostgroup: u32,
    pub command: Command,
    /// 0 when digests are off and no rule needed one.
    pub digest: u64,
    /// The rule that asked for a query-log line (`log = 1`).
    pub log_rule: Option<u32>,
}

impl Session {
    /// Whether the next statement's digest is wanted by statistics.
    pub(super) fn digests_on(&self) -> bool {
        self.data.stats.digests_on()
    }

    /// Starts watching a statement about to go to `hostgroup` (shown in SHOW PROCESSLIST from
    /// now on).
    pub(super) fn watch(&self, text: &[u8], command: Command, digest: u64, hostgroup: u32, log_rule: Option<u32>) -> Watch {
        let started = Instant::now();
        self.handle.begin_at(text, &self.state, hostgroup, started);
        Watch { started, hostgroup, command, digest, log_rule }
    }

    /// The statement ended with `outcome` on `server` (`None`: it never reached one).
    /// `digest_text` is the normalized text behind `w.digest`; `query` the text sent.
    pub(super) fn observed(
        &self,
        w: &Watch,
        server: Option<&crate::pool::Server>,
        outcome: &Outcome,
        request_len: usize,
        digest_text: &[u8],
        query: &[u8],
    ) {
        let ended = Instant::now();
        self.ended.set(ended);
        self.handle.end_at(ended);
        let duration_us = ended.saturating_duration_since(w.started).as_micros() as u64;
        let schema = self.state.schema.as_deref().unwrap_or("");
        self.data.stats.record(&StatementRecord {
            hostgroup: w.hostgroup,
            server: server.map_or(0, |s| s.pool.id),
            user: &self.user.name,
            schema,
            digest: w.digest,
            digest_text,
            command: w.command,
            duration_us,
            rows_sent: outcome.rows,
            rows_affected: outcome.affected_rows,
            error: outcome.error,
            bytes_sent: request_len as u64,
            bytes_recv: outcome.reply_bytes,
            ended,
            split: outcome.split,
        });
        let Some(log) = self.snap.query_log.as_deref() else { return };
        if w.log_rule.is_some() || log.enabled() {
            // A rule asked for the line, but nothing computed the digest: do it now.
            let mut text = Vec::new();
            let digest = if w.digest == 0 { sql::digest::digest_into(query, &mut text).id } else { w.digest };
            log.log(&crate::querylog::LogEntry {
                time: std::time::SystemTime::now() - ended.saturating_duration_since(w.started),
                user: &self.user.name,
                schema,
                client: self.peer,
                hostgroup: Some(w.hostgroup),
                server: server.map(|s| &*s.name),
                digest,
                query,
                duration_us,
                rows_sent: outcome.rows,
                rows_affected: outcome.affected_rows,
                error: outcome.error.then_some(crate::querylog::QueryError { code: outcome.error_code, message: None }),
                rule: w.log_rule,
            });
        }
    }
}
