//! ② session, one COM_QUERY through the data path: `plan` (classify → ③ rules → ④ route,
//! synchronous) → ⑤ acquire (a pooled connection in line with the session's state) → ⑥ exec
//! → settle (keep it if pinned, else back to the pool).

use super::cached::Lookup;
use super::multiplex::{Held, Needs};
use super::{Flow, Forwarded, Session};
use crate::exec::{ReplyChecksum, Tap};
use crate::firewall::Verdict;
use crate::plan::{self, Action, Plan};
use crate::pool::BackendError;
use crate::rules::Who;
use crate::stats::Counter;
use proto::errors::*;
use proto::frame::Frame;
use proto::response::Reply;
use std::time::Duration;
use tracing::debug;

/// What may be done with a statement whose backend was lost before its reply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunAgain {
    No,
    /// On another connection (an autocommit read).
    Elsewhere,
    /// After its transaction is replayed on a new connection to the writer.
    AfterReplay,
}

/// How often a statement waiting for a writer looks again.
const WRITER_RECHECK: Duration = Duration::from_millis(100);

/// A failure of a new connection that says no server of the hostgroup can be used now (none
/// ONLINE, none can be reached, or one went as it was being set up), which a promotion may
/// end; not a refused login or a full pool.
fn no_writer(e: &BackendError) -> bool {
    matches!(
        e,
        BackendError::Unavailable(crate::pool::NoServer::NoneOnline(_))
            | BackendError::Connect { .. }
            | BackendError::Timeout { .. }
            | BackendError::Lost { .. }
    )
}

/// Where the client is and which listener it came in through, for client_addr/proxy_port rules.
pub(super) struct Origin {
    pub client_ip: String,
    pub proxy_addr: String,
    pub proxy_port: u16,
}

impl Origin {
    /// What rules may test about a session with this login and schema, coming from here.
    pub(super) fn who<'a>(&'a self, user: &'a str, schema: Option<&'a str>) -> Who<'a> {
        Who { user, schema: schema.unwrap_or(""), client_addr: &self.client_ip, proxy_addr: &self.proxy_addr, proxy_port: self.proxy_port }
    }
}

impl Session {
    /// The plan for a COM_QUERY in `frame`: no socket is touched.
    fn plan(&mut self, frame: &Frame) -> Plan {
        // A statement larger than max_buffered_packet is planned from its head (`frame`
        // covers only that; the rest is relayed unread): KILL, USE, rules and the digest see it.
        let payload = frame.first_chunk(&self.client.rbuf);
        let whole = self.tail.is_none() && frame.chunks == 1;
        let stmt = plan::Statement { text: payload.get(1..).unwrap_or_default(), whole, chunks: frame.chunks, first_seq: frame.first_seq };
        let facts = plan::Facts {
            who: self.origin.who(&self.user.name, self.state.schema.as_deref()),
            session_id: self.id,
            pseudo_thread_id_set: self.pseudo_thread_id_set(),
            default_hostgroup: self.user.default_hostgroup,
            // The allowlist is keyed by digest.
            digests_on: self.digests_on() || self.snap.config.firewall_compiled.enabled(),
            multi_statements: self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_MULTI_STATEMENTS),
            in_transaction: self.may_be_in_transaction(),
            kept_hostgroup: self.kept_hostgroup(),
            replication: &self.snap.config.replication_hostgroups,
            backslash_escapes: self.backslash_escapes(),
            shards: &self.snap.shards,
        };
        let mut plan = plan::plan(&stmt, &facts, &self.snap.config.rules, &mut self.plan_scratch);
        // The firewall sees what reaches a server: a statement sluice answers alone is not checked.
        if self.snap.config.firewall_compiled.active() && matches!(plan.action, Action::Forward | Action::ShowStatus) {
            if let Some(message) = self.firewall(stmt.text, plan.digest, &self.plan_scratch.digest_text, plan.decision.flag) {
                plan.action = Action::Answer { error: true, message };
            }
        }
        plan
    }

    /// The firewall's verdict on a statement, counted; the error it gets when it is refused.
    pub(super) fn firewall(&self, text: &[u8], digest: u64, digest_text: &[u8], flag: i64) -> Option<Box<str>> {
        let fw = &self.snap.config.firewall_compiled;
        let verdict = fw.check(&crate::firewall::Statement {
            username: &self.user.name,
            client_address: &self.origin.client_ip,
            schemaname: self.state.schema.as_deref().unwrap_or(""),
            digest,
            flag,
            text,
            digest_text,
        });
        let counter = match verdict {
            Verdict::Allowed => Counter::FirewallAllowed,
            Verdict::Detected => Counter::FirewallDetected,
            Verdict::Blocked => Counter::FirewallBlocked,
            Verdict::Sqli(_) => Counter::FirewallSqli,
        };
        self.data.stats.add(counter, 1);
        fw.message(&verdict)
    }

    /// A COM_QUERY: planned, then carried out.
    pub(super) async fn query(&mut self, frame: Frame, seq: u8) -> Flow {
        let mut plan = self.plan(&frame);
        let hostgroup = plan.hostgroup();
        if self.status & proto::StatusFlags::SERVER_STATUS_IN_TRANS.bits() == 0 && self.xa.is_none() {
            self.local_writes = false;
        }
        match plan.action {
            Action::Forward if plan.sharded.is_some() => {
                let in_transaction = self.may_be_in_transaction();
                if in_transaction && self.local_writes {
                    self.client.consume(frame.wire_len);
                    self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, super::xa::AFTER_LOCAL_WRITES).await;
                    return Flow::Continue;
                }
                match plan.sharded.take() {
                    Some(sharded) => self.forward_sharded(plan, sharded, frame, seq, in_transaction).await,
                    None => Flow::Continue,
                }
            }
            Action::Forward => {
                if self.xa.is_some() {
                    let text = frame.first_chunk(&self.client.rbuf).get(1..).unwrap_or_default().to_vec();
                    if let Some(flow) = self.beside_xa(&text, &frame, seq).await {
                        return flow;
                    }
                } else if !self.local_writes && self.may_be_in_transaction() {
                    // Read until the transaction's first write, then not at all.
                    let text = frame.first_chunk(&self.client.rbuf).get(1..).unwrap_or_default();
                    self.local_writes = super::xa::counts_as_local_write(&self.snap.shards, text);
                }
                self.forward_query(&mut plan, frame, seq).await
            }
            Action::Intercept(intercept) => {
                if matches!(intercept, sql::classify::Intercept::Processlist { .. }) {
                    // The session's own row shows the statement, as on the server.
                    let text = frame.first_chunk(&self.client.rbuf);
                    self.handle.begin(text.get(1..).unwrap_or_default(), &self.state, hostgroup);
                }
                self.client.consume(frame.wire_len);
                self.intercepted(intercept, seq).await
            }
            Action::ShowStatus => {
                let text = match plan.decision.rewritten.as_deref() {
                    Some(t) => t.to_vec(),
                    None => frame.first_chunk(&self.client.rbuf).get(1..).unwrap_or_default().to_vec(),
                };
                self.handle.begin(&text, &self.state, hostgroup);
                self.client.consume(frame.wire_len);
                self.show_status(&text, hostgroup, plan.retries(), false, seq).await
            }
            Action::ExplainSharding(ref rows) => {
                self.client.consume(frame.wire_len);
                self.explain_sharding(rows, seq).await
            }
            Action::Refuse { code, ref message } => {
                self.client.consume(frame.wire_len);
                self.reply_err(seq, code, SQLSTATE_NOT_SUPPORTED, message).await;
                Flow::Continue
            }
            Action::Answer { error, ref message } => {
                // Answered by a rule: counted and logged like any statement, with no server.
                let watch = self.watch_query(&frame, &plan);
                let code = if error { ER_NOT_ALLOWED_COMMAND } else { 0 };
                let outcome = crate::exec::Outcome { error, error_code: code, ..Default::default() };
                self.observe_unsent(&watch, &outcome, &frame);
                self.client.consume(frame.wire_len);
                if error {
                    self.reply_err(seq, code, SQLSTATE_NOT_SUPPORTED, message).await;
                    return Flow::Continue;
                }
                self.reply_ok(seq, message).await
            }
        }
    }

    /// Sends a planned statement to its target and streams the reply. The plan is borrowed,
    /// not moved in: this future is created (and copied) for every statement.
    async fn forward_query(&mut self, plan: &mut Plan, frame: Frame, seq: u8) -> Flow {
        if let Some(dynamic) = plan.dynamic_sql.take() {
            match self.check_dynamic_sql(&dynamic, seq).await {
                Ok(sent) => plan.rewrite = sent.map(|sql| plan::query_packet(&sql, frame.first_seq)).or(plan.rewrite.take()),
                Err(answered) => {
                    self.client.consume(frame.wire_len);
                    return answered;
                }
            }
        }
        let watch = self.watch_query(&frame, plan);
        // Statement limits (user's, rule's): counted running until this statement ends.
        let Some(_limits) = self.admit_query(plan, &watch, &frame, seq).await else { return Flow::Continue };
        // The result cache, only when a rule gave the statement a cache_ttl.
        let mut lookup = Lookup::Bypass;
        if let Some(ttl) = plan.decision.actions.cache_ttl.filter(|&ms| ms > 0) {
            if self.tail.is_none() && frame.chunks == 1 {
                let text = match &plan.rewrite {
                    Some(packet) => packet.get(5..).unwrap_or_default(),
                    None => frame.first_chunk(&self.client.rbuf).get(1..).unwrap_or_default(),
                };
                lookup = self.cache_lookup(text, ttl, plan.hostgroup());
            }
        }
        let (miss, mut capture) = match lookup {
            Lookup::Bypass => (None, None),
            Lookup::Miss(miss, capture) => (Some(miss), Some(capture)),
            Lookup::Hit(reply) => {
                let outcome = crate::exec::Outcome { rows: reply.rows, status: self.status, ..Default::default() };
                self.observe_unsent(&watch, &outcome, &frame);
                self.client.consume(frame.wire_len);
                return Flow::written(self.serve_cached(&reply, frame.last_seq).await);
            }
        };
        // INFORMATION_SCHEMA.PROCESSLIST shows sluice's sessions: who they are is read first.
        let mut processlist = None;
        if plan.processlist {
            match self.processlist_rows().await {
                Ok(rows) => processlist = Some(rows),
                Err(e) => {
                    self.client.consume(frame.wire_len);
                    return self.reply_backend_error(seq, &e).await;
                }
            }
        }
        let needs = Needs { last_insert_id: plan.reads_last_insert_id() };
        let mut held = match self.acquire_routed(plan.routed, plan.retries(), needs).await {
            Ok(h) => h,
            Err(e) => {
                let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                self.observe_unsent(&watch, &outcome, &frame);
                self.client.consume(frame.wire_len);
                return self.reply_backend_error(seq, &e).await;
            }
        };
        if plan.pins_connection() {
            held.pins.rule = true;
        }
        if let Some(delay) = plan.delay() {
            tokio::time::sleep(delay).await;
        }
        if let Some(rows) = processlist {
            let text = match &plan.rewrite {
                Some(packet) => packet.get(5..).unwrap_or_default(),
                None => frame.first_chunk(&self.client.rbuf).get(1..).unwrap_or_default(),
            };
            if let Some(sent) = super::processlist_table::with_sessions(text, &rows, &held.backend, self.id) {
                if sent.len() < proto::frame::MAX_CHUNK {
                    plan.rewrite = Some(plan::query_packet(&sent, frame.first_seq));
                }
            }
        }
        let timeout = plan.timeout();
        let request = match plan.rewrite.take() {
            Some(r) => {
                self.client.consume(frame.wire_len);
                r
            }
            None => self.client.rbuf.split_to(frame.wire_len).freeze(),
        };
        self.watch_tail = plan.watch_tail;
        // Only a request held whole can be sent again.
        let whole = self.tail.is_none();
        let mut journaling = self.journaling(&held.backend);
        let mut checksum = journaling.unwrap_or(false).then(ReplyChecksum::default);
        // The text as sent (its first chunk): what the cache keys and a write marks.
        let sent = request.get(5..request.len().min(4 + proto::frame::MAX_CHUNK)).unwrap_or_default();
        self.mark_writes(sent, whole && frame.chunks == 1);
        let rename = plan.shard_names.as_ref().map(crate::exec::RenameColumns::of_names);
        let tap = Tap { checksum: checksum.as_mut(), capture: capture.as_mut(), rename };
        let outcome = match self.exchange(&mut held.backend, &request, Some(Reply::Query), timeout, whole, tap).await {
            Forwarded::Done(o) => o,
            Forwarded::Ended => return Flow::End,
            Forwarded::LostBeforeReply { seq } => {
                // Run again elsewhere, uncached.
                capture = None;
                let lost_on = held.backend.server.name.clone();
                let again = self.run_again(&held, &request);
                self.release(held);
                let reacquired = match again {
                    RunAgain::No => {
                        let _ = self.reply_lost(seq, &lost_on).await;
                        return Flow::End;
                    }
                    // An autocommit read whose server went before answering: once more, on
                    // another server if the lost one cannot be reached any more.
                    RunAgain::Elsewhere => self.acquire_routed(plan.routed, plan.retries(), needs).await,
                    // A read in a transaction of reads: the transaction first.
                    RunAgain::AfterReplay => self.replay(&lost_on, needs).await,
                };
                debug!(id = self.id, server = %lost_on, "backend lost before the reply to a read; running it again");
                if again == RunAgain::Elsewhere {
                    self.data.stats.add(Counter::ReadsRunAgain, 1);
                }
                held = match reacquired {
                    Ok(h) => h,
                    Err(e) => {
                        let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                        self.observed(&watch, None, &outcome, 0, &self.plan_scratch.digest_text, b"");
                        if again == RunAgain::AfterReplay {
                            // Why the transaction could not be replayed; the session goes on.
                            return self.reply_backend_error(seq, &e).await;
                        }
                        // No other server: the client learns of the loss, as it would have.
                        let _ = self.reply_lost(seq, &lost_on).await;
                        return Flow::End;
                    }
                };
                held.pins.rule = plan.pins_connection();
                journaling = self.journaling(&held.backend);
                checksum = journaling.unwrap_or(false).then(ReplyChecksum::default);
                let tap = Tap { checksum: checksum.as_mut(), capture: None, rename };
                match self.exchange(&mut held.backend, &request, Some(Reply::Query), timeout, false, tap).await {
                    Forwarded::Done(o) => o,
                    Forwarded::LostBeforeReply { .. } | Forwarded::Ended => return Flow::End,
                }
            }
        };
        if journaling.is_some() {
            self.journal.note(&held.backend, &request, checksum.map(|c| c.finish()), outcome.status);
        }
        let actions = &plan.decision.actions;
        if actions.mirror_hostgroup.is_some() || actions.mirror_flag_out.is_some() {
            self.mirror(plan, &request, whole && frame.chunks == 1 && !outcome.error);
        }
        if let (Some(miss), Some(capture)) = (miss, capture) {
            if !outcome.error {
                self.cache_store(miss, capture, sent, &held);
            }
        }
        self.observed(&watch, Some(&held.backend.server), &outcome, request.len(), &self.plan_scratch.digest_text, sent);
        self.after_statement(&mut held, &plan.effects, &outcome, plan.use_db.take()).await;
        self.note_write(&mut held, || sql::rw::class(sent) == sql::rw::Class::Write, &outcome).await;
        self.settle(held);
        self.settle_writes();
        Flow::Continue
    }

    /// The connection for a routed statement (a COM_QUERY's plan, a prepared statement's
    /// execute): its target's, else (a read the split sent to the readers) the writer's when no
    /// reader is usable or none has applied what the read must see in time (causal reads). A
    /// replication pair's writer hostgroup with no usable server is waited for
    /// (`acquire_writer`).
    pub(super) async fn acquire_routed(&mut self, routed: crate::route::Routed, retries: u32, needs: Needs) -> Result<Held, BackendError> {
        let acquired = self.acquire_writer(routed.target.hostgroup(), retries, needs).await;
        let Some(writer) = routed.fallback else { return acquired };
        match acquired {
            Err(BackendError::Unavailable(_) | BackendError::Connect { .. } | BackendError::Timeout { .. }) => {
                self.acquire_writer(writer, retries, needs).await
            }
            Ok(mut held) if held.backend.server.hostgroup != writer => {
                if self.caught_up(&mut held, writer).await {
                    return Ok(held);
                }
                self.data.stats.add(Counter::CausalReadsOnWriter, 1);
                self.settle(held);
                self.acquire_writer(writer, retries, needs).await
            }
            other => other,
        }
    }

    /// `acquire`, where for the writer hostgroup of a `[[mysql_replication_hostgroups]]` pair
    /// with no server that can be used (none ONLINE, every connect failing) the statement
    /// waits up to `[pool] writer_wait_ms` for one, re-reading the config in force (the role
    /// monitor or a SWITCHOVER moves a promoted replica in). Nothing of the statement has been
    /// sent: a statement lost on a server is never sent again here. A connection the session
    /// keeps (a transaction, temporary tables…) is not waited for: what it held is gone.
    pub(super) async fn acquire_writer(&mut self, hostgroup: u32, retries: u32, needs: Needs) -> Result<Held, BackendError> {
        if let Some(lost_on) = self.journal.lost.take() {
            // The transaction's connection closed while the client was between statements.
            return self.replay(&lost_on, needs).await;
        }
        let followed = self.held.iter().any(|h| h.pins.transaction && self.journal.follows(h));
        match self.wait_for_writer(hostgroup, retries, needs).await {
            // The transaction's connection is gone: replayed, or the client is told why not.
            Err(BackendError::Lost { server, .. }) if followed => self.replay(&server, needs).await,
            other => other,
        }
    }

    /// `acquire`, waiting for a usable writer as `acquire_writer` says (no replay).
    pub(super) async fn wait_for_writer(&mut self, hostgroup: u32, retries: u32, needs: Needs) -> Result<Held, BackendError> {
        let kept = self.held.iter().any(|h| h.pins.transaction || h.backend.server.hostgroup == hostgroup);
        let first = match self.acquire(hostgroup, retries, needs).await {
            Err(e) if !kept && no_writer(&e) && self.is_writer_hostgroup(hostgroup) => e,
            other => return other,
        };
        let wait = Duration::from_millis(self.snap.config.pool.writer_wait_ms);
        if wait.is_zero() {
            return Err(first);
        }
        let deadline = tokio::time::Instant::now() + wait;
        debug!(id = self.id, hostgroup, "no usable writer ({first}); waiting up to {wait:?} for one");
        self.data.stats.add(Counter::WriterWaits, 1);
        let mut last = first;
        while tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = self.handle.killed() => break,
                _ = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + WRITER_RECHECK)) => {}
            }
            self.follow_reload();
            match self.acquire(hostgroup, 0, needs).await {
                Err(e) if no_writer(&e) => last = e,
                other => return other,
            }
        }
        self.data.stats.add(Counter::WriterWaitTimeouts, 1);
        Err(last)
    }

    /// A connection for what is not a routed statement (the login's proof, COM_STMT_PREPARE,
    /// COM_PING, COM_INIT_DB, COM_CHANGE_USER…): in the user's default hostgroup; while that
    /// is a replication pair's writer hostgroup with no usable writer, a replica of the pair
    /// (reads go on during a failover), else the writer waited for.
    pub(super) async fn acquire_unrouted(&mut self, retries: u32) -> Result<Held, BackendError> {
        let hostgroup = self.unrouted_hostgroup();
        let first = match self.acquire(hostgroup, retries, Needs::default()).await {
            Err(e) if no_writer(&e) => e,
            other => return other,
        };
        let pair = self.snap.config.replication_hostgroups.iter().find(|r| r.writer_hostgroup == hostgroup);
        let Some(reader) = pair.map(|p| p.reader_hostgroup) else { return Err(first) };
        match self.acquire(reader, retries, Needs::default()).await {
            Ok(held) => Ok(held),
            Err(_) => self.wait_for_writer(hostgroup, retries, Needs::default()).await,
        }
    }

    /// Whether `hostgroup` is the writer hostgroup of a replication pair.
    fn is_writer_hostgroup(&self, hostgroup: u32) -> bool {
        self.snap.config.replication_hostgroups.iter().any(|r| r.writer_hostgroup == hostgroup)
    }

    /// Whether a statement lost before its reply may run again: a read (`sql::rw`) in
    /// autocommit outside a transaction, on a connection holding nothing of the session's; or
    /// a read in a transaction of reads that can be replayed. Never a write.
    fn run_again(&self, held: &Held, request: &[u8]) -> RunAgain {
        use proto::StatusFlags as S;
        let text = request.get(5..).unwrap_or_default();
        if sql::rw::class(text) != sql::rw::Class::Read {
            return RunAgain::No;
        }
        let in_transaction = self.status & S::SERVER_STATUS_IN_TRANS.bits() != 0 || self.status & S::SERVER_STATUS_AUTOCOMMIT.bits() == 0;
        if !in_transaction && held.pins.reason().is_none() {
            RunAgain::Elsewhere
        } else if held.pins.transaction && self.journal.follows(held) && self.journal.replayable() {
            RunAgain::AfterReplay
        } else {
            RunAgain::No
        }
    }

    /// `enter_limits` for a COM_QUERY's plan: `None` when it was refused, answered with 1226
    /// and observed here (the frame consumed).
    pub(super) async fn admit_query(
        &mut self,
        plan: &Plan,
        watch: &super::observe::Watch,
        frame: &Frame,
        seq: u8,
    ) -> Option<[Option<crate::limits::Running>; 2]> {
        match self.enter_limits(plan.decision.actions.limit.as_ref()) {
            Ok(guards) => Some(guards),
            Err(message) => {
                let outcome = crate::exec::Outcome { error: true, error_code: ER_USER_LIMIT_REACHED, ..Default::default() };
                self.observe_unsent(watch, &outcome, frame);
                self.client.consume(frame.wire_len);
                self.reply_err(seq, ER_USER_LIMIT_REACHED, SQLSTATE_NOT_SUPPORTED, &message).await;
                None
            }
        }
    }

    /// Admits a statement under its user's and its rule's statement limits (`limits`): the
    /// guards that count it running, or the 1226 message of the one reached.
    pub(super) fn enter_limits(&self, rule: Option<&crate::limits::RuleLimit>) -> Result<[Option<crate::limits::Running>; 2], String> {
        if self.user.caps.is_none() && rule.is_none() {
            return Ok([None, None]);
        }
        let refused = |e: crate::limits::Exceeded| {
            let c = match e {
                crate::limits::Exceeded::Concurrent(_) => Counter::QueryLimitConcurrentRefused,
                crate::limits::Exceeded::Rate(_) => Counter::QueryLimitRateRefused,
            };
            self.data.stats.add(c, 1);
            debug!(id = self.id, user = %self.user.name, "statement refused: {e:?}");
        };
        let user = match self.user_slot.as_ref().filter(|_| !self.user.caps.is_none()) {
            Some(slot) => slot.counters().enter(self.user.caps).map_err(|e| {
                refused(e);
                crate::limits::user_limit_message(&self.user.name, e)
            })?,
            None => None,
        };
        let rule = match rule {
            Some(r) => r.counters.enter(r.caps).map_err(|e| {
                refused(e);
                crate::limits::rule_limit_message(r.rule_id, e)
            })?,
            None => None,
        };
        Ok([user, rule])
    }

    /// Offers a statement the primary ran to the mirror hostgroup a rule named (`mirror`),
    /// when it was read whole, succeeded and is safe to run apart from the session
    /// (`mirror::eligible`). Never waits: the offer queues or drops.
    ///
    /// With a mirror_flagOUT the copy is evaluated again from that chain, as ProxySQL does: its
    /// rewrite applies to the copy, and it goes to mirror_hostgroup if the rule set one, else
    /// to the destination_hostgroup of that evaluation, else to the user's default hostgroup.
    fn mirror(&self, plan: &Plan, request: &bytes::Bytes, ran_whole: bool) {
        let text = request.get(5..).unwrap_or_default();
        if !ran_whole || !crate::mirror::eligible(&self.snap.config.mirror, plan.command, text, &plan.effects) {
            return;
        }
        let actions = &plan.decision.actions;
        let (mut hostgroup, mut request) = (actions.mirror_hostgroup, request.clone());
        if let Some(flag) = actions.mirror_flag_out {
            let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
            let q = crate::rules::Query { who: &who, text, digest: plan.digest, digest_text: &self.plan_scratch.digest_text };
            let again = self.snap.config.rules.evaluate_from(flag, &q, &mut Default::default());
            hostgroup = hostgroup.or(again.actions.destination_hostgroup);
            if let Some(rewritten) = again.rewritten {
                // The copy is a statement of its own now: as safe to mirror, or not mirrored.
                let (command, effects) = (crate::stats::Command::from_sql(&rewritten), sql::effects::effects(&rewritten));
                if !crate::mirror::eligible(&self.snap.config.mirror, command, &rewritten, &effects) {
                    return;
                }
                request = plan::query_packet(&rewritten, 0);
            }
        }
        let hostgroup = hostgroup.unwrap_or(self.user.default_hostgroup);
        let job = crate::mirror::Job {
            request,
            hostgroup,
            login: self.login.clone(),
            state: self.state.clone(),
            since: self.generation.epoch,
            snap: self.snap.clone(),
            any_shard: self.data.runtime == crate::config::RuntimeKind::Steal,
        };
        self.data.mirror.offer(job, crate::mirror::Context { stats: &self.data.stats, shutdown: &self.data.shutdown });
    }

    /// Starts watching a planned statement (its first chunk is what SHOW PROCESSLIST shows).
    pub(super) fn watch_query(&self, frame: &Frame, plan: &Plan) -> super::observe::Watch {
        let text = frame.first_chunk(&self.client.rbuf);
        self.watch(text.get(1..).unwrap_or_default(), plan.command, plan.digest, plan.hostgroup(), plan.log_rule())
    }

    /// A statement that ended before reaching a backend (answered by a rule, or no connection
    /// could be had), as the client sent it.
    fn observe_unsent(&self, watch: &super::observe::Watch, outcome: &crate::exec::Outcome, frame: &Frame) {
        let text = frame.first_chunk(&self.client.rbuf);
        self.observed(watch, None, outcome, 0, &self.plan_scratch.digest_text, text.get(1..).unwrap_or_default());
    }

    /// The rules' actions on COM_STMT_PREPARE text (error_msg, cache_ttl).
    /// What the rules in force say of an execute of `entry` (evaluated by the text and digest
    /// read at its prepare): its statement limit and its flag for the firewall. So a limit or
    /// an allowlist a reload brings reaches statements pooled clients prepared long before.
    /// Evaluated only when some rule has a limit or some allowlist rule a flagIN.
    pub(super) fn execute_decision(&mut self, sql: &[u8], digest: u64, digest_text: &[u8]) -> crate::rules::Decision {
        if !self.needs_execute_decision() {
            return Default::default();
        }
        let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
        self.plan_scratch.digest_text.clear();
        self.plan_scratch.digest_text.extend_from_slice(digest_text);
        self.plan_scratch.decide(&self.snap.config.rules, &who, sql, digest)
    }

    /// Some rule has a limit, or some allowlist rule a flagIN: executes evaluate the rules.
    pub(super) fn needs_execute_decision(&self) -> bool {
        let config = &self.snap.config;
        config.rules.has_limits() || config.firewall_compiled.enabled() && config.firewall_compiled.uses_flags()
    }

    pub(super) fn prepare_decision(&mut self, text: &[u8]) -> crate::rules::Decision {
        let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
        plan::prepare_decision(text, &who, &self.snap.config.rules, &mut self.plan_scratch)
    }
}
