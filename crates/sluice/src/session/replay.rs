//! ② session ↔ ⑥ exec: transaction replay (MaxScale's `transaction_replay`). While a session
//! is in a transaction on the writer hostgroup of a `[[mysql_replication_hostgroups]]` pair,
//! the statements it sent (COM_QUERY texts, up to `JOURNAL_LIMIT` bytes) and a checksum of each
//! reply (`exec::ReplyChecksum`) are kept. When the transaction's connection is lost and every
//! statement so far was a read (`sql::rw`), they are run again on a new connection to the
//! writer (waiting for one as a write does); if every reply is the same, the session goes on
//! as if nothing happened. Otherwise the client gets error 1927 saying the transaction was
//! rolled back and why it could not be replayed: never a silent duplicate or lost write.

use super::multiplex::{Held, Needs};
use super::Session;
use crate::exec::ReplyChecksum;
use crate::pool::{Backend, BackendError};
use crate::stats::Counter;
use bytes::Buf;
use proto::response::{Event, Reply, Scanner};
use proto::StatusFlags;
use sql::lexer::{Kind, Lexer};
use tokio::io::AsyncReadExt;

/// The most request bytes a transaction's journal holds; beyond, replay is off for it.
pub(super) const JOURNAL_LIMIT: usize = 1 << 20;

/// The journal of the session's transaction on a writer.
#[derive(Debug, Default)]
pub(super) struct Journal {
    /// A transaction is being followed.
    open: bool,
    /// The writer hostgroup it runs in, and its connection (pool id, thread id): a statement
    /// on another connection is another transaction.
    hostgroup: u32,
    connection: (u32, u32),
    /// The requests so far, back to back, as the client framed them.
    requests: Vec<u8>,
    /// Per statement: where its request ends in `requests`, and its reply's checksum (`None`
    /// for the BEGIN that opened the transaction: its OK says nothing else).
    entries: Vec<(usize, Option<u64>)>,
    /// Why the transaction cannot be replayed (`None`: it can).
    refused: Option<&'static str>,
    /// Its connection (to this server) closed while the client was between statements:
    /// replayed before the next one.
    pub lost: Option<std::sync::Arc<str>>,
}

impl Journal {
    /// A replayable transaction is being followed: replies are to be checksummed.
    pub fn replayable(&self) -> bool {
        self.open && self.refused.is_none()
    }

    /// A transaction on `held`'s connection is being followed (replayable or not), and that
    /// connection holds nothing else a new one would lack (temporary tables, locks…).
    pub fn follows(&self, held: &Held) -> bool {
        let b = &held.backend;
        self.open && self.connection == (b.server.pool.id, b.thread_id) && held.pins.only_transaction()
    }

    /// Learns from a statement (`request`, whole COM_QUERY packets) that ran on `backend`, a
    /// connection to a pair's writer, with the reply's `checksum` (if taken) and `status`.
    pub fn note(&mut self, backend: &Backend, request: &[u8], checksum: Option<u64>, status: u16) {
        if status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() == 0 {
            *self = Journal::default();
            return;
        }
        let connection = (backend.server.pool.id, backend.thread_id);
        if self.open && self.connection != connection {
            *self = Journal::default();
        }
        if !self.open {
            *self = Journal { open: true, hostgroup: backend.server.hostgroup, connection, ..Journal::default() };
        }
        if self.refused.is_some() {
            return;
        }
        let text = request.get(5..).unwrap_or_default();
        let first = self.entries.is_empty();
        let read = sql::rw::class(text) == sql::rw::Class::Read;
        self.refused = if !(read || (first && opens_transaction_only(text))) {
            Some("the transaction wrote (or ran something other than reads)")
        } else if checksum.is_none() && read {
            Some("a read's reply was not recorded")
        } else if self.requests.len() + request.len() > JOURNAL_LIMIT {
            Some("the transaction's statements exceed 1 MiB")
        } else {
            None
        };
        if self.refused.is_some() {
            self.requests = Vec::new();
            self.entries = Vec::new();
            return;
        }
        self.requests.extend_from_slice(request);
        self.entries.push((self.requests.len(), checksum));
    }

    /// Replay is off for this transaction (a command sluice does not journal ran in it).
    pub fn refuse(&mut self, why: &'static str) {
        if self.open && self.refused.is_none() {
            self.refused = Some(why);
            self.requests = Vec::new();
            self.entries = Vec::new();
        }
    }

    /// The statements and their checksums, in order.
    fn statements(&self) -> impl Iterator<Item = (&[u8], Option<u64>)> {
        let starts = std::iter::once(0).chain(self.entries.iter().map(|e| e.0));
        starts.zip(&self.entries).map(|(start, &(end, sum))| (&self.requests[start..end], sum))
    }
}

/// `BEGIN [WORK]` or `START TRANSACTION [characteristics]`, alone.
fn opens_transaction_only(sql: &[u8]) -> bool {
    let mut toks = Lexer::new(sql).filter(|t| t.kind != Kind::Comment);
    let Some(first) = toks.next() else { return false };
    let word = |t: &sql::lexer::Token, w: &str| sql::classify::is_word(t, sql, w);
    let opens = word(&first, "BEGIN") || (word(&first, "START") && toks.next().is_some_and(|t| word(&t, "TRANSACTION")));
    // A `;` may end it; nothing may follow.
    opens && toks.skip_while(|t| t.text(sql) != b";").nth(1).is_none()
}

impl Session {
    /// How a statement on `backend` is journaled: `None` when not at all (not a pair's
    /// writer), else whether its reply is checksummed — in a replayable transaction, or one the
    /// statement may open (autocommit off; a BEGIN needs none).
    pub(super) fn journaling(&self, backend: &Backend) -> Option<bool> {
        let pairs = &self.snap.config.replication_hostgroups;
        if pairs.is_empty() || !pairs.iter().any(|r| r.writer_hostgroup == backend.server.hostgroup) {
            return None;
        }
        let autocommit_off = self.status & StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits() == 0;
        Some(self.journal.replayable() || autocommit_off || self.status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0)
    }

    /// The transaction's connection was lost: its statements run again on a new connection to
    /// the writer (waiting for one as a write does). Ok with that connection, in the
    /// transaction again, when every reply is the same; else the error the client gets (the
    /// session is then out of the transaction).
    pub(super) async fn replay(&mut self, lost_on: &str, needs: Needs) -> Result<Held, BackendError> {
        let journal = std::mem::take(&mut self.journal);
        let outcome = match journal.refused {
            _ if !journal.open => Err("the transaction was not followed".to_string()),
            Some(why) => Err(why.to_string()),
            None => self.rerun_all(&journal, needs).await,
        };
        let counter = if outcome.is_ok() { Counter::TransactionsReplayed } else { Counter::TransactionReplaysFailed };
        self.data.stats.add(counter, 1);
        match outcome {
            Ok(held) => {
                tracing::info!(
                    id = self.id,
                    server = lost_on,
                    statements = journal.entries.len(),
                    "transaction replayed on {}",
                    held.backend.server.name
                );
                self.journal = Journal { connection: (held.backend.server.pool.id, held.backend.thread_id), ..journal };
                Ok(held)
            }
            Err(why) => {
                self.status &= !StatusFlags::SERVER_STATUS_IN_TRANS.bits();
                let message = format!("in a transaction, which was rolled back; sluice could not replay it: {why}");
                Err(BackendError::Lost { server: lost_on.to_string(), source: std::io::Error::other(message) })
            }
        }
    }

    async fn rerun_all(&mut self, journal: &Journal, needs: Needs) -> Result<Held, String> {
        let mut held = match self.wait_for_writer(journal.hostgroup, 0, needs).await {
            Ok(h) => h,
            Err(e) => return Err(format!("no writer could be reached ({e})")),
        };
        let mut status = 0;
        for (request, checksum) in journal.statements() {
            let failed = match rerun(&mut held.backend, request).await {
                Ok((sum, s, error)) => {
                    status = s;
                    if error || checksum.is_some_and(|c| c != sum) {
                        Some("a statement's result differs on the new writer")
                    } else {
                        None
                    }
                }
                Err(_) => Some("the new writer was lost during the replay"),
            };
            if let Some(why) = failed {
                // Its transaction is half replayed: the connection is closed, not pooled.
                held.backend.broken = true;
                self.release(held);
                return Err(why.to_string());
            }
        }
        held.backend.status = status;
        held.pins.follow_status(status);
        if !held.pins.transaction {
            held.backend.broken = true;
            self.release(held);
            return Err("the replayed statements left no transaction open".to_string());
        }
        Ok(held)
    }
}

/// Runs one journaled request on `b` and reads its whole reply: its checksum, status flags and
/// whether it was an error.
async fn rerun(b: &mut Backend, request: &[u8]) -> Result<(u64, u16, bool), BackendError> {
    let lost = |b: &Backend, e: std::io::Error| BackendError::Lost { server: b.server.name.to_string(), source: e };
    if let Err(e) = b.conn.write_all(request).await {
        return Err(lost(b, e));
    }
    let mut scanner = Scanner::new(Reply::Query, b.deprecate_eof()).with_mariadb_capabilities(b.mariadb_caps);
    let mut sum = ReplyChecksum::default();
    loop {
        if !b.conn.rbuf.is_empty() {
            let (used, event) = scanner
                .feed(&b.conn.rbuf)
                .map_err(|e| BackendError::Protocol { server: b.server.name.to_string(), what: e.to_string() })?;
            sum.feed(&b.conn.rbuf[..used]);
            b.conn.rbuf.advance(used);
            match event {
                Event::Done { error } => return Ok((sum.finish(), scanner.status(), error)),
                Event::LocalInfile => {
                    return Err(BackendError::Protocol { server: b.server.name.to_string(), what: "LOCAL INFILE in a replay".into() })
                }
                Event::More => {}
            }
        }
        b.conn.rbuf.reserve(16 << 10);
        match b.conn.stream.read_buf(&mut b.conn.rbuf).await {
            Ok(0) => return Err(lost(b, std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(lost(b, e)),
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::opens_transaction_only;

    #[test]
    fn only_a_bare_transaction_start_opens_a_journal_without_a_checksum() {
        for yes in
            ["BEGIN", "begin work", "START TRANSACTION", "start transaction with consistent snapshot, read only", "BEGIN;", "/* c */ BEGIN"]
        {
            assert!(opens_transaction_only(yes.as_bytes()), "{yes}");
        }
        for no in ["BEGIN; INSERT INTO t VALUES (1)", "SELECT 1", "START SLAVE", "COMMIT", ""] {
            assert!(!opens_transaction_only(no.as_bytes()), "{no}");
        }
    }
}
