//! ② session, a transaction on shards: each shard a statement of the transaction reaches is a
//! branch (`XA START` on a connection the transaction keeps until it ends), later statements on
//! that shard run on it, and COMMIT is one phase on one branch, else two phases with the
//! decision in the recovery log (`shard::xa`) before any branch commits.
//!
//! The session's other side (its connection to the default hostgroup, where BEGIN went) may
//! only read while branches exist: its writes could not commit atomically with them.

use super::multiplex::Held;
use super::sharded::Run;
use super::{Flow, Session};
use crate::exec::merge::Shard;
use crate::plan;
use crate::pool::{BackendError, Server};
use crate::shard::plan::{Merge, ShardPlan, ShardStatement};
use crate::shard::xa::{self as shard_xa, InFlight, XaLog};
use crate::stats::Counter;
use proto::errors::SQLSTATE_NOT_SUPPORTED;
use proto::frame::Frame;
use proto::response::Reply;
use proto::StatusFlags;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

const ER_NOT_SUPPORTED_YET: u16 = 1235;
/// XA_RBROLLBACK: the transaction branch was rolled back.
const ER_XA_RBROLLBACK: u16 = 1402;
const SQLSTATE_XA_RBROLLBACK: &[u8; 5] = b"XA100";
/// XAER_RMERR: the outcome is not what the client asked for yet.
const ER_XAER_RMERR: u16 = 1397;
const SQLSTATE_XAER_RMERR: &[u8; 5] = b"XAE03";

/// A statement on shards in a transaction that wrote to unsharded tables first.
pub(super) const AFTER_LOCAL_WRITES: &str = "this transaction wrote to unsharded tables (or ran statements before the shard map \
     was loaded, which count as writes), which cannot commit atomically with its statements on shards; COMMIT first";

/// The refusal of a statement that may write beside a transaction's branches.
pub(super) const BESIDE_BRANCHES: &str = "in a transaction with statements on shards, sluice runs only reads beside them: this \
     statement may write or commit implicitly, which cannot be atomic with the shards' XA branches; COMMIT or ROLLBACK first";

/// A session's transaction on shards.
pub(super) struct Txn {
    /// The logical database (index in the shard map) its branches are of.
    db: usize,
    gtrid: InFlight,
    log: Option<Arc<XaLog>>,
    branches: Vec<Branch>,
    /// Its branches were rolled back under it (a lost shard, a failed write on some shards):
    /// only ROLLBACK ends it.
    doomed: Option<String>,
}

struct Branch {
    hostgroup: u32,
    database: String,
    bqual: String,
    held: Held,
}

impl Branch {
    fn label(&self) -> String {
        format!("`{}` (hostgroup {})", self.database, self.hostgroup)
    }
}

/// What the client is told when a transaction statement cannot be done.
pub(super) struct XaError {
    code: u16,
    sqlstate: [u8; 5],
    message: String,
}

impl XaError {
    fn refused(message: String) -> XaError {
        XaError { code: ER_NOT_SUPPORTED_YET, sqlstate: *SQLSTATE_NOT_SUPPORTED, message }
    }

    fn rolled_back(why: &str) -> XaError {
        XaError {
            code: ER_XA_RBROLLBACK,
            sqlstate: *SQLSTATE_XA_RBROLLBACK,
            message: format!("the transaction was rolled back on every shard: {why}"),
        }
    }

    fn backend(e: &BackendError, label: &str) -> XaError {
        let (code, sqlstate) = e.client_error();
        XaError { code, sqlstate, message: format!("{e} (shard {label})") }
    }
}

/// How a transaction-control statement ends the transaction.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Control {
    Commit,
    Rollback,
}

/// The statement's words (code tokens that are words, comments skipped), as written: they are
/// compared with keywords ignoring ASCII case. Nothing is allocated: this runs on every
/// statement of every transaction.
fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    sql::lexer::code_tokens(text).filter(|t| t.kind == sql::lexer::Kind::Word).map(move |t| t.text(text))
}

/// Whether the statement's first word is one of `keywords` (upper case).
fn first_word_in(text: &[u8], keywords: &[&str]) -> bool {
    words(text).next().is_some_and(|w| keywords.iter().any(|k| w.eq_ignore_ascii_case(k.as_bytes())))
}

/// Plain `COMMIT [WORK]` or `ROLLBACK [WORK]`.
pub(super) fn control(text: &[u8]) -> Option<Control> {
    let mut w = words(text);
    let (first, second, more) = (w.next()?, w.next(), w.next().is_some());
    let all = sql::lexer::code_tokens(text).count();
    let plain = match second {
        None => all <= 2,
        Some(b) => b.eq_ignore_ascii_case(b"WORK") && !more && all <= 3,
    };
    if !plain {
        None
    } else if first.eq_ignore_ascii_case(b"COMMIT") {
        Some(Control::Commit)
    } else if first.eq_ignore_ascii_case(b"ROLLBACK") {
        Some(Control::Rollback)
    } else {
        None
    }
}

/// Statements that neither write nor end a transaction implicitly: what may run on the
/// default side beside branches.
pub(super) fn harmless(text: &[u8]) -> bool {
    let first = words(text).next().unwrap_or_default();
    let is = |k: &str| first.eq_ignore_ascii_case(k.as_bytes());
    if ["SHOW", "DESCRIBE", "DESC", "EXPLAIN", "HELP", "USE"].iter().any(|k| is(k)) {
        true
    } else if is("SET") {
        // Any spelling (`@@autocommit`, `@@session.autocommit`) would commit implicitly.
        !text.windows(b"autocommit".len()).any(|w| w.eq_ignore_ascii_case(b"autocommit"))
    } else {
        sql::rw::class(text) == sql::rw::Class::Read
    }
}

/// A statement that may write on the default side (so the transaction cannot take branches).
pub(super) fn local_write(text: &[u8]) -> bool {
    const NOT_WRITES: &[&str] =
        &["BEGIN", "START", "COMMIT", "ROLLBACK", "SET", "SAVEPOINT", "RELEASE", "USE", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "HELP"];
    !first_word_in(text, NOT_WRITES) && sql::rw::class(text) != sql::rw::Class::Read
}

/// What a statement in a transaction without branches says of the transaction's writes on the
/// default side (`Session::local_writes`): only a shard map makes them matter (a statement on
/// shards after them is refused), so without one nothing is read and the statement counts as a
/// write, in case a reload adds a map before the transaction ends.
pub(super) fn counts_as_local_write(shards: &crate::shard::ShardMap, text: &[u8]) -> bool {
    shards.is_empty() || local_write(text)
}

/// DDL: it would end the transaction implicitly on a server.
fn ddl(text: &str) -> bool {
    first_word_in(text.as_bytes(), &["CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"])
}

impl Txn {
    /// Closes every branch's connection: the server rolls back a branch not prepared when its
    /// connection goes; one prepared stays for recovery (not decided: rolled back).
    fn close(self, stats: &crate::stats::Stats) {
        if !self.branches.is_empty() {
            stats.add(Counter::XaRollbacks, 1);
        }
        for b in self.branches {
            b.held.backend.close();
        }
    }
}

impl Session {
    /// The session leaves (disconnect, KILL, COM_RESET_CONNECTION, COM_CHANGE_USER): its
    /// transaction on shards is rolled back by closing its branches.
    pub(super) fn abandon_xa(&mut self) {
        if let Some(txn) = self.xa.take() {
            debug!(id = self.id, gtrid = txn.gtrid.gtrid(), "session left its transaction on shards: rolled back");
            txn.close(&self.data.stats);
        }
    }

    /// Rolls the branches back under the transaction (closing them) and leaves it doomed.
    fn doom(&mut self, why: String) {
        if let Some(txn) = self.xa.as_mut() {
            warn!(id = self.id, gtrid = txn.gtrid.gtrid(), "transaction on shards rolled back: {why}");
            let branches = std::mem::take(&mut txn.branches);
            self.data.stats.add(Counter::XaRollbacks, 1);
            for b in branches {
                b.held.backend.close();
            }
            if let Some(txn) = self.xa.as_mut() {
                txn.doomed = Some(why);
            }
        }
    }

    /// The branch of each target (its index in the transaction), started where needed.
    async fn branches(&mut self, targets: &[ShardStatement], retries: u32) -> Result<Vec<usize>, XaError> {
        let snap = self.snap.clone();
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            let Some(db) =
                snap.shards.databases.iter().position(|d| d.nodes.iter().any(|n| n.hostgroup == t.hostgroup && n.database == t.database))
            else {
                return Err(XaError::refused(format!("shard `{}` is not in the shard map in force", t.database)));
            };
            let logical = &snap.shards.databases[db];
            if self.xa.is_none() {
                let log = match logical.xa_log.as_deref() {
                    Some(path) => Some(shard_xa::log(path).map_err(XaError::refused)?),
                    None => None,
                };
                let gtrid = InFlight::new(&shard_xa::new_gtrid(logical));
                self.xa = Some(Txn { db, gtrid, log, branches: Vec::new(), doomed: None });
            }
            let Some(txn) = self.xa.as_mut() else { return Err(XaError::refused("no transaction".into())) };
            if txn.db != db {
                let first = snap.shards.databases.get(txn.db).map_or("", |d| d.name.as_str());
                return Err(XaError::refused(format!(
                    "a transaction on shards stays within one logical database: it has branches in `{first}`, and this statement \
                     reaches `{}`",
                    logical.name
                )));
            }
            if let Some(i) = txn.branches.iter().position(|b| b.hostgroup == t.hostgroup && b.database == t.database) {
                out.push(i);
                continue;
            }
            if !txn.branches.is_empty() && txn.log.is_none() {
                return Err(XaError::refused(format!(
                    "this transaction would span several shards of `{}`, which needs a recovery log for its two-phase commit: \
                     set shard_databases.xa_log",
                    logical.name
                )));
            }
            let bqual = format!("b{}", txn.branches.len());
            let start = format!("XA START {}", shard_xa::xid(txn.gtrid.gtrid(), &bqual));
            let label = format!("`{}` (hostgroup {})", t.database, t.hostgroup);
            let mut held = self.checkout_synced(t.hostgroup, retries).await.map_err(|e| XaError::backend(&e, &label))?;
            if let Err(e) = held.backend.query(&start).await {
                held.backend.note_failure(&e);
                // The connection's state is the pool's to judge: an error packet leaves it usable.
                if matches!(e, BackendError::Rejected { .. }) {
                    self.release(held);
                } else {
                    held.backend.close();
                }
                return Err(XaError::backend(&e, &label));
            }
            let Some(txn) = self.xa.as_mut() else { return Err(XaError::refused("no transaction".into())) };
            debug!(id = self.id, "{start} on {label}");
            txn.branches.push(Branch { hostgroup: t.hostgroup, database: t.database.clone(), bqual, held });
            out.push(txn.branches.len() - 1);
        }
        Ok(out)
    }

    /// Runs `sharded` (the client's request already consumed) on the transaction's branches,
    /// opening those it needs, and writes the reply: a text statement's, or a prepared
    /// execute's in the binary protocol (`run.binary`, always through the merge).
    pub(super) async fn run_xa(&mut self, sharded: &ShardPlan, watch: &super::observe::Watch, run: Run, seq: u8) -> Flow {
        let Run { retries, timeout, digest_text, binary } = run;
        let digest_text = digest_text.as_deref().unwrap_or(&self.plan_scratch.digest_text).to_vec();
        let refusal = if let Some(why) = self.xa.as_ref().and_then(|t| t.doomed.clone()) {
            Some(XaError::rolled_back(&format!("{why}; only ROLLBACK ends it")))
        } else if sharded.targets.len() > sharded.max_connections {
            // A branch keeps its connection until the transaction ends: no batches.
            Some(XaError::refused(format!(
                "this statement needs {} shards, more than max_connections_per_query ({}) allows in a transaction \
                 (each shard's XA branch keeps its connection until COMMIT); narrow it with the sharding key",
                sharded.targets.len(),
                sharded.max_connections
            )))
        } else if sharded.targets.first().is_some_and(|t| ddl(&t.sql)) {
            Some(XaError::refused(
                "sluice does not run DDL on sharded tables inside a transaction (it would commit implicitly); COMMIT first".into(),
            ))
        } else {
            None
        };
        let branches = match refusal {
            Some(e) => Err(e),
            None => self.branches(&sharded.targets, retries).await,
        };
        let idx = match branches {
            Ok(i) => i,
            Err(e) => {
                if self.xa.as_ref().is_some_and(|t| t.branches.is_empty() && t.doomed.is_none()) {
                    self.xa = None;
                }
                let outcome = crate::exec::Outcome { error: true, error_code: e.code, ..Default::default() };
                self.observed(watch, None, &outcome, 0, &digest_text, b"");
                self.reply_err(seq, e.code, &e.sqlstate, &e.message).await;
                return Flow::Continue;
            }
        };
        let Some(mut txn) = self.xa.take() else { return Flow::Continue };
        let in_trans = StatusFlags::SERVER_STATUS_IN_TRANS.bits();
        // (An INSERT with generated keys is merged: the merge's OK carries the first key.)
        let relayed = !binary && !matches!(sharded.merge, Merge::Inserted { .. });
        if let ([i], [target], true) = (idx.as_slice(), sharded.targets.as_slice(), relayed) {
            // One shard: its reply relayed as it is, as the one-target path does.
            let request = plan::query_packet(target.sql.as_bytes(), seq.wrapping_sub(1));
            let Some(b) = txn.branches.get_mut(*i) else { return Flow::Continue };
            let tap = crate::exec::Tap { rename: Some(crate::exec::RenameColumns::of(target)), ..Default::default() };
            let outcome = match self.exchange(&mut b.held.backend, &request, Some(Reply::Query), timeout, false, tap).await {
                super::Forwarded::Done(o) => Some(o),
                super::Forwarded::LostBeforeReply { .. } | super::Forwarded::Ended => None,
            };
            let Some(outcome) = outcome else {
                // The branch's connection (or the client) is gone: so is the transaction.
                txn.close(&self.data.stats);
                return Flow::End;
            };
            self.observed(watch, Some(&b.held.backend.server), &outcome, request.len(), &digest_text, request.get(5..).unwrap_or_default());
            self.status |= in_trans;
            self.xa = Some(txn);
            return Flow::Continue;
        }
        let requests: Vec<Vec<u8>> = sharded.targets.iter().map(|t| plan::query_packet(t.sql.as_bytes(), 0).to_vec()).collect();
        let sent_seq = std::sync::atomic::AtomicU8::new(seq);
        let killable: Vec<(Server, u32)> =
            idx.iter().filter_map(|&i| txn.branches.get(i)).map(|b| (b.held.backend.server.clone(), b.held.backend.thread_id)).collect();
        self.handle.clear_kill_query();
        let mut ends: Vec<(u16, bool)> = Vec::with_capacity(idx.len());
        let result = {
            let mut slots: Vec<Option<&mut Branch>> = txn.branches.iter_mut().map(Some).collect();
            let mut shards: Vec<Shard> = Vec::with_capacity(idx.len());
            for &i in &idx {
                if let Some(b) = slots.get_mut(i).and_then(Option::take) {
                    shards.push(Shard {
                        format: b.held.backend.format(),
                        status: b.held.backend.status,
                        finished: false,
                        label: format!("`{}` (hostgroup {})", b.database, b.hostgroup),
                        source: crate::exec::merge::Source::Live(&mut b.held.backend.conn),
                    });
                }
            }
            let result = self.merge_interruptible(&mut shards, &requests, sharded, seq, &sent_seq, binary, timeout).await;
            ends.extend(shards.iter().map(|s| (s.status, s.finished)));
            result
        };
        for (&i, (status, finished)) in idx.iter().zip(&ends) {
            if let Some(b) = txn.branches.get_mut(i) {
                b.held.backend.status = *status;
                b.held.backend.broken |= !finished;
            }
        }
        let Some(result) = result else {
            // KILL QUERY or the rule's timeout: the shards' statements are killed, and with
            // their connections closed the transaction's branches go too.
            self.kill_shard_statements(&killable).await;
            self.xa = Some(txn);
            self.doom("a statement of it was interrupted".into());
            let message = "Query execution was interrupted; the transaction was rolled back on every shard";
            return self.reply_interrupted(watch, &digest_text, &sent_seq, message).await;
        };
        let Ok(outcome) = result else {
            txn.close(&self.data.stats);
            return Flow::End;
        };
        let server = txn.branches.get(idx[0]).map(|b| b.held.backend.server.clone());
        let sent = sharded.targets.first().map_or(&b""[..], |t| t.sql.as_bytes());
        self.observed(watch, server.as_ref(), &outcome, requests.iter().map(Vec::len).sum(), &digest_text, sent);
        let lost = txn.branches.iter().any(|b| b.held.backend.broken);
        let partial_write = outcome.error && matches!(sharded.merge, Merge::Ok { .. } | Merge::Inserted { .. });
        self.xa = Some(txn);
        if lost || partial_write {
            // A shard's branch is gone, or a write applied on some shards only: the transaction
            // cannot commit what the client meant.
            let why = if lost { "a shard's connection was lost during a statement" } else { "a write failed on some of its shards" };
            self.doom(why.into());
        } else {
            self.status = outcome.status | in_trans;
            if outcome.last_insert_id != 0 {
                self.last_insert_id = outcome.last_insert_id;
            }
        }
        Flow::Continue
    }

    /// A statement that names no sharded table, in a transaction with branches: COMMIT and
    /// ROLLBACK end the branches first (then go to the default side as usual); statements that
    /// neither write nor commit implicitly run; the rest is refused. `None`: forward it.
    pub(super) async fn beside_xa(&mut self, text: &[u8], frame: &Frame, seq: u8) -> Option<Flow> {
        self.xa.as_ref()?;
        match control(text) {
            Some(Control::Rollback) => {
                self.xa_rollback().await;
                None
            }
            Some(Control::Commit) => match self.xa_commit().await {
                Ok(()) => None,
                Err(e) => {
                    self.rollback_local().await;
                    self.client.consume(frame.wire_len);
                    self.reply_err(seq, e.code, &e.sqlstate, &e.message).await;
                    Some(Flow::Continue)
                }
            },
            None if harmless(text) => None,
            None => {
                self.client.consume(frame.wire_len);

                self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, BESIDE_BRANCHES).await;
                Some(Flow::Continue)
            }
        }
    }

    /// After a failed COMMIT: the default side's transaction ends too, as the client was told.
    async fn rollback_local(&mut self) {
        let in_trans = StatusFlags::SERVER_STATUS_IN_TRANS.bits();
        let Some(i) = self.held.iter().position(|h| h.pins.transaction) else {
            self.status &= !in_trans;
            return;
        };
        let mut held = self.held.swap_remove(i);
        match held.backend.query_columns("ROLLBACK").await {
            Ok((_, status)) => {
                held.backend.status = status;
                held.pins.follow_status(status);
                self.status = status;
                self.settle(held);
            }
            Err(e) => {
                held.backend.note_failure(&e);
                held.backend.broken = true;
                self.status &= !in_trans;
                self.release(held);
            }
        }
    }

    /// ROLLBACK: every branch ended and rolled back; one that fails is closed (the server rolls
    /// back an unprepared branch whose connection goes).
    pub(super) async fn xa_rollback(&mut self) {
        let Some(txn) = self.xa.take() else { return };
        if !txn.branches.is_empty() {
            self.data.stats.add(Counter::XaRollbacks, 1);
        }
        for mut b in txn.branches {
            let xid = shard_xa::xid(txn.gtrid.gtrid(), &b.bqual);
            let mut ok = true;
            for sql in [format!("XA END {xid}"), format!("XA ROLLBACK {xid}")] {
                if let Err(e) = b.held.backend.query(&sql).await {
                    debug!(id = self.id, "{sql} on {}: {e}; closing it", b.label());
                    ok = false;
                    break;
                }
            }
            if ok {
                self.release(b.held);
            } else {
                b.held.backend.close();
            }
        }
    }

    /// COMMIT of the branches: one phase on one branch; else XA END and PREPARE on all, the
    /// decision logged (fsynced), then XA COMMIT on each. Ok only once every branch committed.
    pub(super) async fn xa_commit(&mut self) -> Result<(), XaError> {
        let Some(txn) = self.xa.take() else { return Ok(()) };
        if let Some(why) = &txn.doomed {
            return Err(XaError::rolled_back(why));
        }
        let Txn { gtrid, log, branches, .. } = txn;
        let g = gtrid.gtrid().to_string();
        let mut live: Vec<Branch> = Vec::with_capacity(branches.len());
        let mut failure = None;
        // XA END on each (state IDLE), then PREPARE on each unless one phase.
        let one_phase = branches.len() == 1;
        for mut b in branches {
            if failure.is_none() {
                let xid = shard_xa::xid(&g, &b.bqual);
                let mut steps = vec![format!("XA END {xid}")];
                if !one_phase {
                    steps.push(format!("XA PREPARE {xid}"));
                }
                for sql in steps {
                    if let Err(e) = b.held.backend.query(&sql).await {
                        b.held.backend.note_failure(&e);
                        b.held.backend.broken = true;
                        failure = Some(format!("{sql} failed on shard {}: {e}", b.label()));
                        break;
                    }
                }
            }
            live.push(b);
        }
        if let Some(why) = failure {
            self.rollback_branches(&g, live).await;
            return Err(XaError::rolled_back(&why));
        }
        if one_phase {
            let Some(mut b) = live.pop() else { return Ok(()) };
            let sql = format!("XA COMMIT {} ONE PHASE", shard_xa::xid(&g, &b.bqual));
            let label = b.label();
            return match b.held.backend.query(&sql).await {
                Ok(_) => {
                    self.data.stats.add(Counter::XaCommits, 1);
                    self.release(b.held);
                    Ok(())
                }
                Err(e @ BackendError::Rejected { .. }) => {
                    b.held.backend.close();
                    self.data.stats.add(Counter::XaRollbacks, 1);
                    Err(XaError::rolled_back(&format!("{sql} failed on shard {label}: {e}")))
                }
                Err(e) => {
                    b.held.backend.close();
                    Err(XaError {
                        code: ER_XAER_RMERR,
                        sqlstate: *SQLSTATE_XAER_RMERR,
                        message: format!(
                            "the connection to shard {label} was lost during its COMMIT: whether it committed is unknown ({e})"
                        ),
                    })
                }
            };
        }
        shard_xa::failpoint("xa_after_prepare");
        let Some(log) = log else {
            self.rollback_branches(&g, live).await;
            return Err(XaError::rolled_back("no recovery log (shard_databases.xa_log)"));
        };
        let decided = {
            let (log, g) = (log.clone(), g.clone());
            tokio::task::spawn_blocking(move || log.decide(&g)).await.unwrap_or_else(|e| Err(e.to_string()))
        };
        if let Err(e) = decided {
            self.rollback_branches(&g, live).await;
            return Err(XaError::rolled_back(&format!("the commit decision could not be logged: {e}")));
        }
        shard_xa::failpoint("xa_after_decision");
        let total = live.len();
        let mut pending = Vec::new();
        // Test-only (`xa_commit_elsewhere`): the last branch's connection fails at its commit.
        let lose_last = shard_xa::failpoint_on("xa_commit_elsewhere");
        for (i, mut b) in live.into_iter().enumerate() {
            let xid = shard_xa::xid(&g, &b.bqual);
            let sql = format!("XA COMMIT {xid}");
            let committed = if lose_last && i + 1 == total {
                Err(BackendError::Protocol { server: b.held.backend.server.name.to_string(), what: "failpoint xa_commit_elsewhere".into() })
            } else {
                b.held.backend.query(&sql).await
            };
            match committed {
                Ok(_) => self.release(b.held),
                Err(e) => {
                    // Decided: it must commit. Its connection goes, and a fresh one to the same
                    // server commits the branch the server then holds as prepared.
                    warn!(id = self.id, "{sql} on {} failed ({e}); committing it from a new connection", b.label());
                    let server = b.held.backend.server.clone();
                    let label = b.label();
                    b.held.backend.close();
                    if !self.commit_elsewhere(&server, &sql).await {
                        pending.push(label);
                    }
                }
            }
        }
        if pending.is_empty() {
            self.data.stats.add(Counter::XaCommits, 1);
            tokio::task::spawn_blocking(move || log.end(&g));
            return Ok(());
        }
        // `gtrid` drops here: recovery finishes the commit from the log.
        Err(XaError {
            code: ER_XAER_RMERR,
            sqlstate: *SQLSTATE_XAER_RMERR,
            message: format!(
                "the transaction is decided and committed on {} of {total} shards; shard(s) {} could not be reached, and sluice's \
                 recovery will commit them from its log",
                total - pending.len(),
                pending.join(", ")
            ),
        })
    }

    /// XA COMMIT of a decided branch from a new connection (the session's login, then the
    /// `[monitor]` one), retried while the server may still hold the old connection.
    async fn commit_elsewhere(&self, server: &Server, sql: &str) -> bool {
        let timeout = self.snap.config.connect_timeout();
        let monitor = self.snap.config.monitor.as_ref().filter(|m| !m.username.is_empty()).map(super::kill::monitor_login);
        for attempt in 0..10 {
            for login in std::iter::once(&*self.login).chain(monitor.as_ref()) {
                match super::kill::rows_on(server, login, sql, timeout).await {
                    Ok(_) => return true,
                    Err(e) => debug!(id = self.id, attempt, "{sql} on {} as {}: {e}", server.name, login.username),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// Rolls back branches after a failed END or PREPARE: XA ROLLBACK where the connection
    /// still works (it ends an idle or prepared branch); a branch still active is ended first.
    async fn rollback_branches(&mut self, g: &str, branches: Vec<Branch>) {
        self.data.stats.add(Counter::XaRollbacks, 1);
        for mut b in branches {
            let xid = shard_xa::xid(g, &b.bqual);
            if b.held.backend.broken {
                // Unprepared: the server rolls it back as the connection goes; prepared:
                // recovery does (no decision was logged).
                b.held.backend.close();
                continue;
            }
            let _ = b.held.backend.query(format!("XA END {xid}")).await;
            match b.held.backend.query(format!("XA ROLLBACK {xid}")).await {
                Ok(_) => self.release(b.held),
                Err(_) => b.held.backend.close(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_commit_and_rollback_end_the_branches() {
        assert!(control(b"COMMIT") == Some(Control::Commit));
        assert!(control(b"commit work;") == Some(Control::Commit));
        assert!(control(b"/* x */ ROLLBACK") == Some(Control::Rollback));
        assert!(control(b"COMMIT AND CHAIN").is_none());
        assert!(control(b"ROLLBACK TO SAVEPOINT s").is_none());
        assert!(control(b"COMMIT; INSERT INTO t VALUES (1)").is_none());
        assert!(control(b"COMMIT WORK WORK").is_none() && control(b"WORK").is_none() && control(b"").is_none());
    }

    #[test]
    fn beside_branches_only_reads_run() {
        for ok in ["SELECT * FROM plain", "SHOW TABLES", "SET @x = 1", "DESCRIBE plain", "/* c */ show tables", "(select 1)"] {
            assert!(harmless(ok.as_bytes()), "{ok}");
        }
        for refused in [
            "INSERT INTO plain VALUES (1)",
            "SET autocommit = 1",
            "SET @@session.autocommit=1",
            "set @@SESSION.AutoCommit=1",
            "BEGIN",
            "CREATE TABLE x (a INT)",
            "SAVEPOINT s",
        ] {
            assert!(!harmless(refused.as_bytes()), "{refused}");
        }
        assert!(local_write(b"UPDATE plain SET a = 1"));
        assert!(local_write(b"/* c */ delete from plain") && local_write(b"select 1 into @x"));
        assert!(!local_write(b"BEGIN") && !local_write(b"SET autocommit = 0") && !local_write(b"SELECT 1"));
        assert!(!local_write(b"start transaction read only") && !local_write(b"  -- c\n use db") && !local_write(b"desc plain"));
        assert!(ddl("create table t (a int)") && ddl("/* c */ DROP TABLE t") && !ddl("SELECT 1"));
    }
}
