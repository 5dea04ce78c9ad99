//! ② session, one statement through the data path: classify (KILL, USE, session effects) →
//! ③ rules (decision) → ④ route (the hostgroup; an open transaction keeps its connection) →
//! ⑤ acquire (a pooled connection in line with the session's state) → ⑥ exec → settle (keep
//! it if pinned, else back to the pool).

use super::multiplex::Needs;
use super::Session;
use crate::rules::{Decision, Query, RuleSet, Scratch, Who};
use proto::command::*;
use proto::errors::*;
use proto::frame::Frame;
use proto::response::Reply;
use std::time::Duration;

/// Where the client is and which listener it came in through, for client_addr/proxy_port rules.
pub(super) struct Origin {
    pub client_ip: String,
    pub proxy_addr: String,
    pub proxy_port: u16,
}

impl Origin {
    /// What rules may test about a session with this login and schema, coming from here.
    fn who<'a>(&'a self, user: &'a str, schema: Option<&'a str>) -> Who<'a> {
        Who { user, schema: schema.unwrap_or(""), client_addr: &self.client_ip, proxy_addr: &self.proxy_addr, proxy_port: self.proxy_port }
    }
}

thread_local! {
    /// Recent statement shapes' digests, one memo per worker thread: the sessions a worker
    /// runs share their shapes, and no lock is taken.
    static DIGEST_MEMO: std::cell::RefCell<sql::memo::DigestMemo> = std::cell::RefCell::new(sql::memo::DigestMemo::new());
}

/// The per-session state rules need, borrowed apart from the rest of the session.
pub(super) struct RulesState {
    pub scratch: Scratch,
    pub digest_text: Vec<u8>,
}

impl RulesState {
    /// `text`'s digest into `digest_text` when `stats` or the rules want it (0: not computed).
    fn digest(&mut self, rules: &RuleSet, text: &[u8], stats: bool) -> u64 {
        if stats || rules.needs_digest() {
            DIGEST_MEMO.with_borrow_mut(|memo| memo.digest(text, &mut self.digest_text).id)
        } else {
            self.digest_text.clear();
            0
        }
    }

    /// The rules' decision on `text` (whose digest, if computed, is `digest`); `None` when no
    /// rules are loaded.
    fn decide(&mut self, rules: &RuleSet, who: &Who, text: &[u8], digest: u64) -> Option<Decision> {
        if rules.is_empty() {
            return None;
        }
        Some(rules.evaluate(&Query { who, text, digest, digest_text: &self.digest_text }, &mut self.scratch))
    }
}

impl Session {
    /// A COM_QUERY. False when the session must end.
    pub(super) async fn query(&mut self, frame: Frame, seq: u8) -> bool {
        let digests_on = self.digests_on();
        let (decision, kill, use_db, effects, request, digest, command) = {
            // A statement split over 16 MiB packets is joined only when rules must read it all;
            // otherwise its first chunk tells all sluice needs (KILL, USE).
            let payload = match frame.single_payload(&self.client.rbuf) {
                Some(p) => std::borrow::Cow::Borrowed(p),
                None if !self.snap.config.rules.is_empty() => frame.payload(&self.client.rbuf),
                None => std::borrow::Cow::Borrowed(frame.first_chunk(&self.client.rbuf)),
            };
            let text = payload.get(1..).unwrap_or_default();
            let kill = self.intercept(&frame, text);
            let answered = kill.as_ref().is_some_and(sql::classify::Intercept::answered_by_sluice);
            let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
            let rules = &self.snap.config.rules;
            let digest = if answered { 0 } else { self.rules.digest(rules, text, digests_on) };
            let command = crate::stats::Command::from_sql(text);
            let decision = if answered { None } else { self.rules.decide(rules, &who, text, digest) };
            let text = decision.as_ref().and_then(|d| d.rewritten.as_deref()).unwrap_or(text);
            let use_db = sql::classify::parse_use(text);
            let effects = sql::effects::effects(text);
            // The text the backend gets: the rules' rewrite, and sluice's id for CONNECTION_ID().
            let with_id = if frame.chunks == 1 { sql::classify::rewrite_connection_id(text, self.id) } else { None };
            let rewritten = decision.as_ref().is_some_and(|d| d.rewritten.is_some());
            // The reply's sequence ids follow the request's last chunk, and replies stream
            // through unchanged: a rewrite must not change the number of 16 MiB chunks.
            if rewritten && chunks(text.len() + 1) != frame.chunks {
                return self.refuse_rewrite(frame, seq, decision.and_then(|d| d.last_rule)).await;
            }
            let request = match with_id {
                Some(sql) => Some(query_packet(&sql, frame.first_seq)),
                None if rewritten => Some(query_packet(text, frame.first_seq)),
                None => None,
            };
            (decision, kill, use_db, effects, request, digest, command)
        };
        if let Some(k) = kill {
            if let Some(go_on) = self.intercepted(k, seq).await {
                self.client.consume(frame.wire_len);
                return go_on;
            }
        }
        let decision = decision.unwrap_or_default();
        let hostgroup = decision.actions.destination_hostgroup.unwrap_or(self.user.default_hostgroup);
        let log_rule = decision.actions.log.filter(|&on| on).and(decision.last_rule);
        let watch = {
            let text = frame.first_chunk(&self.client.rbuf);
            self.watch(text.get(1..).unwrap_or_default(), command, digest, hostgroup, log_rule)
        };
        // Answered by a rule: counted and logged like any statement, with no server.
        let blocked = decision.actions.error_msg.as_deref().map(|m| (m, true));
        if let Some((msg, error)) = blocked.or(decision.actions.ok_msg.as_deref().map(|m| (m, false))) {
            let code = if error { ER_NOT_ALLOWED_COMMAND } else { 0 };
            let outcome = crate::exec::Outcome { error, error_code: code, ..Default::default() };
            let text = frame.first_chunk(&self.client.rbuf);
            self.observed(&watch, None, &outcome, 0, &self.rules.digest_text, text.get(1..).unwrap_or_default());
            self.client.consume(frame.wire_len);
            if error {
                self.reply_err(seq, code, SQLSTATE_NOT_SUPPORTED, msg).await;
                return true;
            }
            return self.reply_ok(seq, msg).await;
        }
        let needs = Needs { last_insert_id: effects.flags & sql::effects::USES_LAST_INSERT_ID != 0 };
        let mut held = match self.acquire(hostgroup, decision.actions.retries.unwrap_or(1), needs).await {
            Ok(h) => h,
            Err(e) => {
                let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                let text = frame.first_chunk(&self.client.rbuf);
                self.observed(&watch, None, &outcome, 0, &self.rules.digest_text, text.get(1..).unwrap_or_default());
                self.client.consume(frame.wire_len);
                return self.reply_backend_error(seq, &e).await;
            }
        };
        if decision.actions.multiplex == Some(0) {
            held.pins.rule = true;
        }
        if let Some(ms) = decision.actions.delay.filter(|&ms| ms > 0) {
            tokio::time::sleep(Duration::from_millis(ms.into())).await;
        }
        let request = match request {
            Some(r) => {
                self.client.consume(frame.wire_len);
                r
            }
            None => self.client.rbuf.split_to(frame.wire_len).freeze(),
        };
        let timeout = decision.actions.timeout.filter(|&ms| ms > 0).map(|ms| Duration::from_millis(ms.into()));
        let Some(outcome) = self.forward(&mut held.backend, &request, Some(Reply::Query), timeout).await else { return false };
        let sent = request.get(5..request.len().min(4 + proto::frame::MAX_CHUNK)).unwrap_or_default();
        self.observed(&watch, Some(&held.backend.server), &outcome, request.len(), &self.rules.digest_text, sent);
        self.after_statement(&mut held, &effects, &outcome, use_db).await;
        self.settle(held);
        true
    }

    /// COM_STMT_PREPARE text a rule blocks with error_msg: the message.
    pub(super) fn blocked(&mut self, text: &[u8]) -> Option<Box<str>> {
        let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
        let rules = &self.snap.config.rules;
        let digest = self.rules.digest(rules, text, false);
        self.rules.decide(rules, &who, text, digest)?.actions.error_msg
    }

    async fn refuse_rewrite(&mut self, frame: Frame, seq: u8, rule: Option<u32>) -> bool {
        self.client.consume(frame.wire_len);
        let rule = rule.map_or(String::new(), |r| format!(" (rule_id {r})"));
        let msg = format!("sluice cannot apply a rewrite that moves a statement across a 16 MiB packet boundary{rule}");
        self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, &msg).await;
        true
    }
}

/// Packets a payload of `len` bytes takes (a payload of exactly 16 MiB − 1 needs an empty tail).
fn chunks(len: usize) -> usize {
    len / proto::frame::MAX_CHUNK + 1
}

fn query_packet(sql: &[u8], seq: u8) -> bytes::Bytes {
    let mut buf = Vec::with_capacity(sql.len() + 5);
    proto::frame::write_command(&mut buf, seq, COM_QUERY, sql);
    bytes::Bytes::from(buf)
}
