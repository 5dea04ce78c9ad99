//! ② session, a statement the shard map sends to several shards: one connection per shard
//! (each from the pool, in line with the session's state, as `acquire` gives them), the
//! shards' statements sent and their replies merged by `exec::merge`, then every connection
//! handed back (or closed, when its reply was not read to its end).

use super::multiplex::{Held, Needs};
use super::{Flow, Session};
use crate::exec::merge::{self, Shard, Source};
use crate::plan::{self, Plan};
use crate::pool::BackendError;
use crate::shard::plan::ShardPlan;
use proto::errors::{ER_PROXY_NO_BACKEND, SQLSTATE_GENERAL};
use proto::frame::Frame;
use std::sync::atomic::AtomicU8;

/// Query execution was interrupted (KILL QUERY, a timeout).
const ER_QUERY_INTERRUPTED: u16 = 1317;

/// MariaDB's extended column metadata: one more string in each column definition.
const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;

/// How a cross-shard statement runs: the rule's retries and timeout, the digest text its
/// statistics go under (`None`: the planned statement's), and whether rows go out in the binary
/// protocol (a prepared statement's execute).
pub(super) struct Run {
    pub retries: u32,
    pub timeout: Option<std::time::Duration>,
    pub digest_text: Option<Vec<u8>>,
    pub binary: bool,
}

impl Session {
    /// Answers `EXPLAIN SHARDING`: one row per shard (its database, hostgroup, statement) and
    /// the merge.
    pub(super) async fn explain_sharding(&mut self, rows: &[crate::plan::ExplainRow], seq: u8) -> Flow {
        use proto::codec::{write_lenenc, write_lenenc_str};
        use proto::frame::PacketBuilder;
        use proto::resultset::{write_text_row, CHARSET_UTF8, TYPE_VAR_STRING};
        let deprecate_eof = self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_DEPRECATE_EOF);
        let extended = self.negotiated.mariadb_caps & MARIADB_CLIENT_EXTENDED_METADATA != 0;
        let mut out = Vec::new();
        let mut seq = seq;
        let names = ["shard", "hostgroup", "statement", "merge"];
        let b = PacketBuilder::begin(&mut out);
        write_lenenc(&mut out, names.len() as u64);
        b.finish(&mut out, &mut seq);
        for name in names {
            let b = PacketBuilder::begin(&mut out);
            for field in [&b"def"[..], b"", b"", b"", name.as_bytes(), name.as_bytes()] {
                write_lenenc_str(&mut out, field);
            }
            if extended {
                write_lenenc_str(&mut out, b"");
            }
            out.push(0x0C);
            out.extend_from_slice(&CHARSET_UTF8.to_le_bytes());
            out.extend_from_slice(&4096u32.to_le_bytes());
            out.push(TYPE_VAR_STRING);
            out.extend_from_slice(&[0, 0, 0, 0, 0]);
            b.finish(&mut out, &mut seq);
        }
        let status = self.status;
        if !deprecate_eof {
            proto::packet::write_eof(&mut out, &mut seq, 0, status);
        }
        for r in rows {
            let hostgroup = r.hostgroup.to_string();
            let values = [r.shard.as_bytes(), hostgroup.as_bytes(), r.statement.as_bytes(), r.merge.as_bytes()];
            write_text_row(&mut out, &mut seq, values.map(Some));
        }
        if deprecate_eof {
            let ok = proto::packet::Ok { status, ..Default::default() };
            proto::packet::write_ok(&mut out, &mut seq, proto::packet::EOF_HEADER, &ok, b"");
        } else {
            proto::packet::write_eof(&mut out, &mut seq, 0, status);
        }
        Flow::written(self.client.write_all(&out).await.is_ok())
    }

    /// Carries out a plan whose statement runs on several shards.
    /// In a transaction (`in_transaction`) it runs on the transaction's XA branches (`session::xa`).
    pub(super) async fn forward_sharded(
        &mut self,
        plan: Plan,
        sharded: Box<ShardPlan>,
        frame: Frame,
        seq: u8,
        in_transaction: bool,
    ) -> Flow {
        let watch = self.watch_query(&frame, &plan);
        // Statement limits (user's, rule's) count a fan-out as one statement.
        let Some(_limits) = self.admit_query(&plan, &watch, &frame, seq).await else { return Flow::Continue };
        self.client.consume(frame.wire_len);
        let run = Run { retries: plan.retries(), timeout: plan.timeout(), digest_text: None, binary: false };
        if in_transaction {
            self.run_xa(&sharded, &watch, run, seq).await
        } else {
            self.run_sharded(&sharded, &watch, run, seq).await
        }
    }

    /// Runs `sharded` (the client's request already consumed) and writes its merged reply.
    ///
    /// At most `max_connections` shards are read at once: past that, the shards of the earlier
    /// batches are read whole first, one batch after another, their replies held within
    /// `max_buffered` bytes (`early_batches`), and the merge takes them with the last batch's
    /// live connections.
    pub(super) async fn run_sharded(&mut self, sharded: &ShardPlan, watch: &super::observe::Watch, run: Run, seq: u8) -> Flow {
        let Run { retries, timeout, digest_text, binary } = run;
        let digest_text = digest_text.as_deref().unwrap_or(&self.plan_scratch.digest_text).to_vec();
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let requests: Vec<Vec<u8>> = sharded.targets.iter().map(|t| plan::query_packet(t.sql.as_bytes(), 0).to_vec()).collect();
        self.handle.clear_kill_query();
        let live_from = sharded.targets.len().saturating_sub(sharded.max_connections.max(1));
        let early = match self.early_batches(sharded, &requests, live_from, retries, deadline).await {
            Ok(early) => early,
            Err(Batches::Interrupted) => {
                let sent_seq = AtomicU8::new(seq);
                return self.reply_interrupted(watch, &digest_text, &sent_seq, "Query execution was interrupted").await;
            }
            Err(Batches::Backend(e)) => return self.reply_unsent(watch, &digest_text, seq, &e).await,
            Err(Batches::OverBudget) => {
                let outcome = crate::exec::Outcome { error: true, error_code: ER_PROXY_NO_BACKEND, ..Default::default() };
                self.observed(watch, None, &outcome, 0, &digest_text, b"");
                let message = format!(
                    "this statement reads {} shards, more than max_connections_per_query ({}) at once, so sluice reads them in \
                     batches and holds the earlier batches' replies: they exceed max_merge_buffer_bytes ({} bytes); narrow the \
                     statement with the sharding key or a LIMIT, or raise either setting",
                    sharded.targets.len(),
                    sharded.max_connections,
                    sharded.max_buffered
                );
                self.reply_err(seq, ER_PROXY_NO_BACKEND, SQLSTATE_GENERAL, &message).await;
                return Flow::Continue;
            }
        };
        let live = &sharded.targets[live_from..];
        let mut held = match self.acquire_all(live, retries).await {
            Ok(held) => held,
            Err(e) => return self.reply_unsent(watch, &digest_text, seq, &e).await,
        };
        let mut ends: Vec<(u16, bool)> = Vec::with_capacity(held.len());
        let sent_seq = std::sync::atomic::AtomicU8::new(seq);
        let remaining = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let result = {
            let label = |t: &crate::shard::plan::ShardStatement| format!("`{}` (hostgroup {})", t.database, t.hostgroup);
            let mut shards: Vec<Shard> = early
                .into_iter()
                .zip(&sharded.targets)
                .map(|((packets, format), t)| Shard {
                    format,
                    status: format.status,
                    finished: true,
                    label: label(t),
                    source: Source::Held(packets),
                })
                .collect();
            shards.extend(held.iter_mut().zip(live).map(|(h, t)| Shard {
                format: h.backend.format(),
                status: h.backend.status,
                finished: false,
                label: label(t),
                source: Source::Live(&mut h.backend.conn),
            }));
            let result = self.merge_interruptible(&mut shards, &requests, sharded, seq, &sent_seq, binary, remaining).await;
            ends.extend(shards[live_from..].iter().map(|s| (s.status, s.finished)));
            result
        };
        let Some(result) = result else {
            // KILL QUERY (or the rule's timeout): the shards' statements are killed, their
            // connections closed, and the client's reply ends with an error.
            self.abandon(held).await;
            return self.reply_interrupted(watch, &digest_text, &sent_seq, "Query execution was interrupted").await;
        };
        // A reply not read to its end leaves its connection mid-stream: closed, never pooled.
        for (h, (status, finished)) in held.iter_mut().zip(&ends) {
            h.backend.status = *status;
            h.backend.broken |= !finished;
        }
        let outcome = match result {
            Ok(o) => o,
            Err(merge::ClientGone) => {
                // Nobody waits for the shards' statements any more: they are stopped.
                self.abandon(held).await;
                return Flow::End;
            }
        };
        // An error carries no status flags: the session's stay as they were.
        if !outcome.error {
            self.status = outcome.status;
        }
        // LAST_INSERT_ID() reads what the OK said (a generated key's too), on any connection.
        if !outcome.error && outcome.last_insert_id != 0 {
            self.last_insert_id = outcome.last_insert_id;
        }
        let server = held.first().map(|h| h.backend.server.clone());
        let sent = sharded.targets.first().map_or(&b""[..], |t| t.sql.as_bytes());
        self.observed(watch, server.as_ref(), &outcome, requests.iter().map(Vec::len).sum(), &digest_text, sent);
        for h in held {
            self.hand_back(h);
        }
        Flow::Continue
    }

    /// The replies of `targets[..upto]`, read whole batch by batch (`max_connections` shards,
    /// so connections at once, per batch), with each reply's packet format. Stops at the
    /// query's memory budget, KILL QUERY or `deadline`.
    async fn early_batches(
        &mut self,
        sharded: &ShardPlan,
        requests: &[Vec<u8>],
        upto: usize,
        retries: u32,
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<(std::collections::VecDeque<Vec<u8>>, crate::exec::Format)>, Batches> {
        let mut budget = sharded.max_buffered;
        let mut replies = Vec::with_capacity(upto);
        let batch_size = sharded.max_connections.max(1);
        let mut start = 0;
        while start < upto {
            let batch = start..(start + batch_size).min(upto);
            start = batch.end;
            let mut held = self.acquire_all(&sharded.targets[batch.clone()], retries).await.map_err(Batches::Backend)?;
            let remaining = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            let read = {
                let reading = async {
                    // Every request of the batch first, so that its shards work at once.
                    for (h, request) in held.iter_mut().zip(&requests[batch.clone()]) {
                        if h.backend.conn.write_all(request).await.is_err() {
                            h.backend.broken = true;
                        }
                    }
                    let mut read = Vec::with_capacity(held.len());
                    for h in held.iter_mut() {
                        let format = h.backend.format();
                        match merge::read_whole(&mut h.backend.conn, format, &mut budget).await {
                            Ok(reply) => read.push(Some((reply, format))),
                            Err(merge::OverBudget) => {
                                read.push(None);
                                break;
                            }
                        }
                    }
                    read
                };
                tokio::select! {
                    biased;
                    r = reading => Some(r),
                    _ = self.handle.kill_query_requested() => None,
                    _ = super::sleep_or_never(remaining) => None,
                }
            };
            let Some(read) = read else {
                self.abandon(held).await;
                return Err(Batches::Interrupted);
            };
            let over = read.last().is_some_and(Option::is_none) || read.len() < held.len();
            let mut read = read.into_iter();
            for mut h in held {
                match read.next().flatten() {
                    Some((reply, format)) => {
                        h.backend.broken |= !reply.complete;
                        if let Some(status) = reply.complete.then(|| last_status(&reply, format)).flatten() {
                            h.backend.status = status;
                        }
                        replies.push((reply.packets, crate::exec::Format { status: h.backend.status, ..format }));
                    }
                    // Not read to its end: its reply is still on the way.
                    None => h.backend.broken = true,
                }
                self.hand_back(h);
            }
            if over {
                return Err(Batches::OverBudget);
            }
        }
        Ok(replies)
    }

    /// A pooled connection for each target, in order; on a failure, those taken go back.
    async fn acquire_all(&mut self, targets: &[crate::shard::plan::ShardStatement], retries: u32) -> Result<Vec<Held>, BackendError> {
        let mut held: Vec<Held> = Vec::with_capacity(targets.len());
        for target in targets {
            match self.acquire(target.hostgroup, retries, Needs::default()).await {
                Ok(h) => held.push(h),
                Err(e) => {
                    for h in held {
                        self.settle(h);
                    }
                    return Err(e);
                }
            }
        }
        Ok(held)
    }

    /// A fan-out that failed before its reply began: observed, and the backend's error sent.
    async fn reply_unsent(&mut self, watch: &super::observe::Watch, digest_text: &[u8], seq: u8, e: &BackendError) -> Flow {
        let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(e), ..Default::default() };
        self.observed(watch, None, &outcome, 0, digest_text, b"");
        self.reply_backend_error(seq, e).await
    }

    /// Shards' connections whose statements nobody waits for any more (KILL QUERY, a timeout,
    /// the client gone): the statements are killed and the connections closed.
    async fn abandon(&mut self, held: Vec<Held>) {
        let killable: Vec<_> = held.iter().map(|h| (h.backend.server.clone(), h.backend.thread_id)).collect();
        self.kill_shard_statements(&killable).await;
        for mut h in held {
            h.backend.broken = true;
            self.release(h);
        }
    }

    /// A shard's connection after its statement: closed when its reply was not read to its end
    /// (or it failed), else kept or pooled as any.
    fn hand_back(&mut self, h: Held) {
        if h.backend.broken {
            self.release(h);
        } else {
            self.settle(h);
        }
    }
}

/// Why the early batches of a fan-out past the connection budget did not all read.
enum Batches {
    Backend(BackendError),
    OverBudget,
    Interrupted,
}

/// The status flags a whole reply ended with (its OK or its result set's terminator).
fn last_status(reply: &merge::HeldReply, format: crate::exec::Format) -> Option<u16> {
    let last = reply.packets.back()?;
    match last.first() {
        Some(&proto::packet::OK_HEADER) if reply.packets.len() == 1 => proto::packet::parse_ok(last).ok().map(|ok| ok.status),
        Some(&proto::packet::EOF_HEADER) => proto::packet::terminator_status(last, format.deprecate_eof).ok(),
        _ => None,
    }
}

impl Session {
    /// Runs a merge until it ends, the session's KILL QUERY or `timeout`: `None` when it was
    /// interrupted (the shards' replies are then left mid-stream: `Shard::finished`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn merge_interruptible(
        &mut self,
        shards: &mut [Shard<'_>],
        requests: &[Vec<u8>],
        sharded: &ShardPlan,
        seq: u8,
        sent_seq: &AtomicU8,
        binary: bool,
        timeout: Option<std::time::Duration>,
    ) -> Option<Result<crate::exec::Outcome, merge::ClientGone>> {
        // Boxed, so that it can be dropped (and its borrows end) when the merge is abandoned.
        let rename = sharded.targets.first().map(crate::exec::RenameColumns::of);
        let fanout = merge::Fanout { requests, merge: &sharded.merge, seq, sent_seq, binary, rename };
        let mut merging = Box::pin(merge::run(&mut self.client, shards, fanout));
        tokio::select! {
            biased;
            r = &mut merging => Some(r),
            _ = self.handle.kill_query_requested() => None,
            _ = super::sleep_or_never(timeout) => None,
        }
    }

    /// KILL QUERY of each shard statement of an interrupted merge (server, thread id), each
    /// wait bounded by the connect timeout.
    pub(super) async fn kill_shard_statements(&self, killable: &[(crate::pool::Server, u32)]) {
        self.data.stats.add(crate::stats::Counter::KilledBackendQueries, killable.len() as u64);
        let connect_timeout = self.snap.config.connect_timeout();
        let monitor = self.snap.config.monitor.as_ref();
        let kills: Vec<_> =
            killable.iter().map(|(s, t)| super::kill::kill_query(s, *t, &self.login, monitor, None, connect_timeout)).collect();
        for k in kills {
            let _ = tokio::time::timeout(connect_timeout * 3, k).await;
        }
    }

    /// Ends an interrupted merge's reply with error 1317 (`message`), where the merge left the
    /// sequence, and observes it.
    pub(super) async fn reply_interrupted(
        &mut self,
        watch: &super::observe::Watch,
        digest_text: &[u8],
        sent_seq: &AtomicU8,
        message: &str,
    ) -> Flow {
        let outcome = crate::exec::Outcome { error: true, error_code: ER_QUERY_INTERRUPTED, ..Default::default() };
        self.observed(watch, None, &outcome, 0, digest_text, b"");
        let mut out = Vec::new();
        let mut seq = sent_seq.load(std::sync::atomic::Ordering::Relaxed);
        proto::packet::write_err(&mut out, &mut seq, ER_QUERY_INTERRUPTED, b"70100", message);
        Flow::written(self.client.write_all(&out).await.is_ok())
    }
}
