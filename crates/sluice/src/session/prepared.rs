//! ② session: the client's prepared statements (COM_STMT_*). Their ids are sluice's own; each
//! names a registry entry (`pool::prepared`), so a statement runs on whichever pooled
//! connection serves the session, prepared there on first use. Parameter types the client sent
//! once are sent again by sluice where the connection's statement last ran with others (a
//! client with a statement cache sends them only on its first execute).
//!
//! COM_STMT_PREPARE runs where the session's unrouted commands go (the metadata is the same
//! on every server of a replication pair); each execute is routed (④ `route`) by the hint and
//! read/write class its prepare read, as a COM_QUERY of its text would be: under the split a
//! read runs on a replica (prepared there on first use) after the same causal check.
//!
//! A statement with an open cursor or long data waiting holds server state on one connection:
//! it pins the session there until the cursor is read out, the statement is reset, closed or
//! executed; fetch, reset and close go to that connection's hostgroup.
//!
//! KILL and SHOW PROCESSLIST name sluice's sessions, so a prepared one never reaches a server:
//! sluice answers the prepare itself and carries the statement out at each execute (a `?` in
//! KILL is bound then), as it does their text (`kill.rs`).

use super::cached::Lookup;
use super::multiplex::{Held, Needs};
use super::{Flow, Session};
use crate::pool::prepared::{Entry, Registry};
use crate::route::{self, Routed};
use proto::command::*;
use proto::errors::*;
use proto::frame::Frame;
use proto::response::Reply;
use proto::StatusFlags;
use sql::classify::{Intercept, Kill, KillTarget};
use std::collections::HashMap;
use std::sync::Arc;

/// A session's open statements.
pub(super) struct ClientStatements {
    by_id: HashMap<u32, ClientStatement>,
    /// Statements sluice answers itself (same id space).
    answered: HashMap<u32, AnsweredStatement>,
    last_id: u32,
    /// Statements with an open cursor or long data waiting.
    pinning: u32,
    registry: Arc<Registry>,
}

struct ClientStatement {
    entry: Arc<Entry>,
    /// Parameter types of the client's last execute that sent them.
    types: Option<Arc<[u8]>>,
    cursor: bool,
    long_data: bool,
    /// The hostgroup of the connection holding its cursor or long data (while it has them).
    held_in: u32,
    /// A rule's cache_ttl at its prepare: its executes' results are cached (`cached`).
    cache_ttl: Option<u32>,
}

impl ClientStatement {
    fn pins(&self) -> bool {
        self.cursor || self.long_data
    }
}

/// A prepared KILL, SHOW PROCESSLIST or SHOW STATUS: answered by sluice at each execute.
struct AnsweredStatement {
    what: Answered,
    /// The text, for the session's own row in SHOW PROCESSLIST while it runs.
    text: Box<[u8]>,
    /// The type of the `?` (KILL's id) from the client's last execute that sent it.
    param_type: Option<u8>,
}

enum Answered {
    Kill(Kill),
    Processlist {
        full: bool,
    },
    /// SHOW STATUS (session/status.rs): run on the server at each execute.
    Status,
    /// A SELECT of INFORMATION_SCHEMA.PROCESSLIST (session/processlist_table.rs): rewritten
    /// and run at each execute.
    ProcesslistSelect,
    /// A statement on sharded tables (prepared_sharded.rs): planned and run at each execute.
    Sharded(Box<super::prepared_sharded::ShardedStatement>),
}

impl Answered {
    fn params(&self) -> u16 {
        matches!(self, Answered::Kill(Kill { target: KillTarget::Parameter { .. }, .. })) as u16
    }
}

impl ClientStatements {
    pub fn new(registry: Arc<Registry>) -> Self {
        ClientStatements { by_id: HashMap::new(), answered: HashMap::new(), last_id: 0, pinning: 0, registry }
    }

    /// Some statement holds server state on the connection that ran it.
    pub fn pin(&self) -> bool {
        self.pinning > 0
    }

    fn next_id(&mut self) -> u32 {
        loop {
            self.last_id = self.last_id.wrapping_add(1).max(1);
            if !self.by_id.contains_key(&self.last_id) && !self.answered.contains_key(&self.last_id) {
                return self.last_id;
            }
        }
    }

    fn add(&mut self, entry: Arc<Entry>, cache_ttl: Option<u32>) -> u32 {
        let id = self.next_id();
        self.by_id.insert(id, ClientStatement { entry, types: None, cursor: false, long_data: false, held_in: 0, cache_ttl });
        id
    }

    /// Changes a statement's cursor or long-data state, keeping `pinning` true.
    fn update<R>(&mut self, id: u32, f: impl FnOnce(&mut ClientStatement) -> R) -> Option<R> {
        let s = self.by_id.get_mut(&id)?;
        let before = s.pins();
        let r = f(s);
        self.pinning = self.pinning + s.pins() as u32 - before as u32;
        Some(r)
    }

    fn remove(&mut self, id: u32) -> Option<ClientStatement> {
        if self.answered.remove(&id).is_some() {
            self.registry.close_handles(1);
            return None;
        }
        let s = self.by_id.remove(&id)?;
        self.pinning -= s.pins() as u32;
        self.registry.close_handles(1);
        Some(s)
    }

    /// Registers a statement on sharded tables (its handle already counted).
    pub(super) fn add_sharded(&mut self, statement: super::prepared_sharded::ShardedStatement, text: &[u8]) -> u32 {
        let id = self.next_id();
        let what = Answered::Sharded(Box::new(statement));
        self.answered.insert(id, AnsweredStatement { what, text: text.into(), param_type: None });
        id
    }

    pub(super) fn sharded_mut(&mut self, id: u32) -> Option<&mut super::prepared_sharded::ShardedStatement> {
        match &mut self.answered.get_mut(&id)?.what {
            Answered::Sharded(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn remove_answered(&mut self, id: u32) {
        self.remove(id);
    }

    /// Every statement closes (COM_RESET_CONNECTION, COM_CHANGE_USER), as on the server.
    pub fn clear(&mut self) {
        self.registry.close_handles(self.by_id.len() + self.answered.len());
        self.by_id.clear();
        self.answered.clear();
        self.pinning = 0;
    }
}

impl Drop for ClientStatements {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What a cached execute's result is keyed by beside the session's settings: the statement's
/// text, the parameter types in force (the client's last sent ones) and the execute's flags,
/// null bitmap and values (`payload` after its command byte and statement id).
fn execute_key_text(sql: &[u8], types: Option<&[u8]>, payload: &[u8]) -> Vec<u8> {
    let types = types.unwrap_or_default();
    let params = payload.get(5..).unwrap_or_default();
    let mut keyed = Vec::with_capacity(8 + sql.len() + types.len() + params.len() + 16);
    for part in [&b"EXECUTE"[..], sql, types, params] {
        keyed.extend_from_slice(&(part.len() as u64).to_le_bytes());
        keyed.extend_from_slice(part);
    }
    keyed
}

/// The statement id a COM_STMT_* packet names (payload bytes 1..5).
fn statement_id(payload: &[u8]) -> Option<u32> {
    payload.get(1..5).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes the backend's statement id over the client's in a single-chunk or first-chunk packet.
pub(super) fn set_statement_id(packet: &mut [u8], id: u32) {
    packet[5..9].copy_from_slice(&id.to_le_bytes());
}

/// Where an execute's parameter types are (payload offset) and whether the client sent them.
fn types_in(cmd: u8, payload: &[u8], params: usize) -> Option<(usize, bool)> {
    if params == 0 {
        return None;
    }
    if cmd == COM_STMT_BULK_EXECUTE {
        // Flags (2 bytes); 128: types follow.
        let flags = u16::from_le_bytes([*payload.get(5)?, *payload.get(6)?]);
        return Some((7, flags & BULK_SEND_TYPES != 0));
    }
    // Flags, iteration count, NULL bitmap, new-params-bound flag, then the types.
    let bound_at = 10 + params.div_ceil(8);
    Some((bound_at + 1, *payload.get(bound_at)? == 1))
}

const BULK_SEND_TYPES: u16 = 128;

/// An execute payload with `types` added (new-params-bound = 1, or the bulk flag), for a
/// connection whose statement last ran with other types.
fn with_types(cmd: u8, payload: &[u8], types_at: usize, types: &[u8]) -> Option<Vec<u8>> {
    let mut p = Vec::with_capacity(payload.len() + types.len());
    if cmd == COM_STMT_BULK_EXECUTE {
        let flags = u16::from_le_bytes([payload[5], payload[6]]) | BULK_SEND_TYPES;
        p.extend_from_slice(&payload[..5]);
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(types);
        p.extend_from_slice(payload.get(7..)?);
    } else {
        let bound_at = types_at - 1;
        p.extend_from_slice(payload.get(..bound_at)?);
        p.push(1);
        p.extend_from_slice(types);
        p.extend_from_slice(payload.get(bound_at + 1..)?);
    }
    Some(p)
}

impl Session {
    /// A COM_STMT_* command. False when the session must end.
    pub(super) async fn statement_command(&mut self, cmd: u8, frame: Frame, seq: u8) -> Flow {
        let counter = match cmd {
            COM_STMT_PREPARE => Some(crate::stats::Counter::ComFrontendStmtPrepare),
            COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => Some(crate::stats::Counter::ComFrontendStmtExecute),
            COM_STMT_CLOSE => Some(crate::stats::Counter::ComFrontendStmtClose),
            _ => None,
        };
        if let Some(c) = counter {
            self.data.stats.add(c, 1);
        }
        if cmd == COM_STMT_PREPARE {
            return self.prepare(frame, seq).await;
        }
        let Some(id) = statement_id(frame.first_chunk(&self.client.rbuf)) else {
            self.client.consume(frame.wire_len);
            if !matches!(cmd, COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA) {
                let msg = format!("Incorrect arguments to {}", handler_name(cmd));
                self.reply_err(seq, ER_WRONG_ARGUMENTS, SQLSTATE_GENERAL, &msg).await;
            }
            return Flow::Continue;
        };
        if self.statements.answered.contains_key(&id) {
            return self.answered_command(cmd, id, frame, seq).await;
        }
        if !self.statements.by_id.contains_key(&id) {
            self.client.consume(frame.wire_len);
            // COM_STMT_CLOSE and SEND_LONG_DATA have no reply, whatever happens.
            if !matches!(cmd, COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA) {
                let msg = format!("Unknown prepared statement handler ({id}) given to {}", handler_name(cmd));
                self.reply_err(seq, ER_UNKNOWN_STMT_HANDLER, SQLSTATE_GENERAL, &msg).await;
            }
            return Flow::Continue;
        }
        match cmd {
            COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => self.execute(cmd, id, frame, seq).await,
            COM_STMT_FETCH => self.fetch(id, frame, seq).await,
            COM_STMT_SEND_LONG_DATA => self.long_data(id, frame).await,
            COM_STMT_RESET => self.reset_statement(id, frame, seq).await,
            _ => {
                self.client.consume(frame.wire_len);
                self.close_statement(id).await;
                Flow::Continue
            }
        }
    }

    /// COM_STMT_PREPARE: prepared on the connection serving the session; the client gets the
    /// server's reply with sluice's statement id.
    async fn prepare(&mut self, frame: Frame, seq: u8) -> Flow {
        let text = frame.payload(&self.client.rbuf).get(1..).unwrap_or_default().to_vec();
        self.client.consume(frame.wire_len);
        let mut cache_ttl = None;
        let mut flag = 0;
        if !self.snap.config.rules.is_empty() {
            let decision = self.prepare_decision(&text);
            // A rule's error_msg comes before the firewall's, as in ProxySQL.
            if let Some(msg) = decision.actions.error_msg {
                self.reply_err(seq, ER_NOT_ALLOWED_COMMAND, SQLSTATE_NOT_SUPPORTED, &msg).await;
                return Flow::Continue;
            }
            cache_ttl = decision.actions.cache_ttl.filter(|&ms| ms > 0);
            flag = decision.flag;
        }
        if self.snap.config.firewall_compiled.active() {
            let snap = self.snap.clone();
            let digest =
                if snap.config.firewall_compiled.enabled() { self.plan_scratch.digest(&snap.config.rules, &text, true) } else { 0 };
            if let Some(msg) = self.firewall(&text, digest, &self.plan_scratch.digest_text, flag) {
                self.reply_err(seq, ER_NOT_ALLOWED_COMMAND, SQLSTATE_NOT_SUPPORTED, &msg).await;
                return Flow::Continue;
            }
        }
        if self.snap.shards.mentions(&text) {
            // Routed at each execute by its parameters' values.
            if let Some(flow) = self.prepare_sharded(&text, seq).await {
                return flow;
            }
        }
        let text = match sql::classify::intercept_as(&text, self.backslash_escapes()) {
            Some(Intercept::Kill(k)) => return self.prepare_answered(Answered::Kill(k), text, seq).await,
            Some(Intercept::Processlist { full }) => return self.prepare_answered(Answered::Processlist { full }, text, seq).await,
            Some(Intercept::Refuse(why)) => return self.refuse(seq, why).await,
            // A compound statement can be prepared: its dynamic SQL stays behind its guards.
            Some(Intercept::Dynamic(sql::classify::Dynamic::Guarded { sql, .. })) => sql,
            // Other dynamic SQL cannot be prepared at all: the server says so itself.
            Some(Intercept::Dynamic(_)) | None if sql::classify::show_status(&text) => {
                return self.prepare_answered(Answered::Status, text, seq).await
            }
            Some(Intercept::Dynamic(_)) | None if super::processlist_table::prepared_processlist_select(&text) => {
                return self.prepare_answered(Answered::ProcesslistSelect, text, seq).await
            }
            Some(Intercept::Dynamic(_)) | None => text,
        };
        let sql = self.with_session_ids(text);
        let mut held = match self.acquire_unrouted(1).await {
            Ok(h) => h,
            Err(e) => return self.reply_backend_error(seq, &e).await,
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        match held.backend.prepare_for_client(&sql, &mut out).await {
            Ok(ok) => {
                held.pins.next_statement = ok.warnings > 0;
                // Counted as an open statement first, then registered.
                let registry = &self.data.statements;
                let registered = registry.open_handle().and_then(|()| {
                    registry
                        .entry(&self.login.username, self.state.schema.as_deref(), &sql, ok.params)
                        .inspect_err(|_| registry.close_handles(1))
                });
                match registered {
                    Ok(entry) => {
                        let cap = self.snap.config.pool.max_statements_per_connection;
                        if let Err(e) = held.backend.remember_statement(entry.id, ok.id, cap).await {
                            held.backend.note_failure(&e);
                        }
                        set_statement_id(&mut out, self.statements.add(entry, cache_ttl));
                    }
                    Err(full) => {
                        if let Err(e) = held.backend.close_statements(&[ok.id]).await {
                            held.backend.note_failure(&e);
                        }
                        out.clear();
                        let msg = format!(
                            "Can't create more than max_prepared_stmt_count statements (current value: {}; sluice's [pool] max_statements)",
                            full.cap
                        );
                        proto::packet::write_err(
                            &mut out,
                            &mut seq.clone(),
                            ER_MAX_PREPARED_STMT_COUNT_REACHED,
                            SQLSTATE_NOT_SUPPORTED,
                            &msg,
                        );
                    }
                }
            }
            Err(e) => {
                held.backend.note_failure(&e);
                held.pins.next_statement = true;
                out.clear();
                super::write_backend_error(&mut out, &mut seq.clone(), &e);
            }
        }
        let written = self.client.write_all(&out).await.is_ok();
        self.out = out;
        self.settle(held);
        Flow::written(written)
    }

    /// COM_STMT_EXECUTE and COM_STMT_BULK_EXECUTE, on whichever connection serves the session.
    async fn execute(&mut self, cmd: u8, id: u32, frame: Frame, seq: u8) -> Flow {
        // The allowlist judges each execute too, so a statement prepared before the user's mode
        // or list changed meets the list in force (the heuristic read its text at the prepare:
        // an empty text here).
        let decision = match self.statements.by_id.get(&id).map(|s| s.entry.clone()) {
            Some(entry) => self.execute_decision(&entry.sql, entry.digest, &entry.digest_text),
            None => Default::default(),
        };
        if self.snap.config.firewall_compiled.enabled() {
            if let Some(entry) = self.statements.by_id.get(&id).map(|s| s.entry.clone()) {
                if let Some(msg) = self.firewall(b"", entry.digest, &entry.digest_text, decision.flag) {
                    self.client.consume(frame.wire_len);
                    self.reply_err(seq, ER_NOT_ALLOWED_COMMAND, SQLSTATE_NOT_SUPPORTED, &msg).await;
                    return Flow::Continue;
                }
            }
        }
        // Beside a transaction's branches on shards only reads run, and a prepared COMMIT or
        // ROLLBACK ends the branches first, as a text one does; a write here keeps the
        // transaction from taking branches (`session::xa`).
        if self.xa.is_some() {
            if let Some(entry) = self.statements.by_id.get(&id).map(|s| s.entry.clone()) {
                if let Some(flow) = self.beside_xa(&entry.sql, &frame, seq).await {
                    return flow;
                }
            }
        } else if !self.local_writes && self.may_be_in_transaction() {
            let shards = &self.snap.shards;
            self.local_writes = self.statements.by_id.get(&id).is_some_and(|s| super::xa::counts_as_local_write(shards, &s.entry.sql));
        }
        let payload = frame.first_chunk(&self.client.rbuf);
        let Some(stmt) = self.statements.by_id.get_mut(&id) else { return Flow::Continue };
        let entry = stmt.entry.clone();
        let params = entry.params as usize;
        let types_at = types_in(cmd, payload, params);
        if let Some((at, true)) = types_at {
            if let Some(sent) = payload.get(at..at + 2 * params) {
                if stmt.types.as_deref() != Some(sent) {
                    stmt.types = Some(sent.into());
                }
            }
        }
        let client_types = stmt.types.clone();
        let cursor = cmd == COM_STMT_EXECUTE && payload.get(5).is_some_and(|f| f & CURSOR_TYPE_READ_ONLY != 0);
        // The result cache: an execute of a statement a rule gave a cache_ttl, its parameters
        // all in this packet (no cursor, no long data), keyed by its text, types and values.
        let cached_execute = match stmt.cache_ttl {
            Some(ttl) if cmd == COM_STMT_EXECUTE && !cursor && !stmt.long_data && self.tail.is_none() && frame.chunks == 1 => {
                Some((ttl, execute_key_text(&entry.sql, client_types.as_deref(), payload)))
            }
            _ => None,
        };
        let needs = Needs { last_insert_id: entry.effects.flags & sql::effects::USES_LAST_INSERT_ID != 0 };
        let digest = if self.digests_on() { entry.digest } else { 0 };
        let routed = self.route_execute(&entry);
        let watch = self.watch(&entry.sql, crate::stats::Command::from_sql(&entry.sql), digest, routed.target.hostgroup(), None);
        // Statement limits (user's, rule's) apply to each execute as to a text statement.
        let _limits = match self.enter_limits(decision.actions.limit.as_ref()) {
            Ok(guards) => guards,
            Err(message) => {
                let outcome = crate::exec::Outcome { error: true, error_code: ER_USER_LIMIT_REACHED, ..Default::default() };
                self.observed(&watch, None, &outcome, 0, &entry.digest_text, &entry.sql);
                self.client.consume(frame.wire_len);
                self.reply_err(seq, ER_USER_LIMIT_REACHED, SQLSTATE_NOT_SUPPORTED, &message).await;
                return Flow::Continue;
            }
        };
        let lookup = match &cached_execute {
            Some((ttl, keyed)) => self.cache_lookup_as(&entry.sql, keyed, *ttl, routed.target.hostgroup()),
            None => Lookup::Bypass,
        };
        let (miss, mut capture) = match lookup {
            Lookup::Bypass => (None, None),
            Lookup::Miss(miss, capture) => (Some(miss), Some(capture)),
            Lookup::Hit(reply) => {
                let outcome = crate::exec::Outcome { rows: reply.rows, status: self.status, ..Default::default() };
                self.observed(&watch, None, &outcome, 0, &entry.digest_text, &entry.sql);
                self.client.consume(frame.wire_len);
                // Executing closes the statement's cursor, if it had one.
                self.statements.update(id, |s| s.cursor = false);
                return Flow::written(self.serve_cached(&reply, frame.last_seq).await);
            }
        };
        let mut held = match self.acquire_routed(routed, 1, needs).await {
            Ok(h) => h,
            Err(e) => {
                let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                self.observed(&watch, None, &outcome, 0, &entry.digest_text, &entry.sql);
                self.client.consume(frame.wire_len);
                return self.reply_backend_error(seq, &e).await;
            }
        };
        let cap = self.snap.config.pool.max_statements_per_connection;
        let backend_id = match held.backend.statement_id(&entry, cap).await {
            Ok(b) => b,
            Err(e) => {
                let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                self.observed(&watch, Some(&held.backend.server), &outcome, 0, &entry.digest_text, &entry.sql);
                self.client.consume(frame.wire_len);
                held.backend.note_failure(&e);
                held.pins.next_statement = true;
                let written = self.reply_backend_error(seq, &e).await;
                self.settle(held);
                return written;
            }
        };
        // The server reuses a statement's last types when an execute sends none: send the
        // client's own if the statement here last ran with others.
        let slot_types = held.backend.statements.get(entry.id).and_then(|s| s.types.clone());
        let inject = match (types_at, &client_types) {
            (Some((at, false)), Some(t)) if slot_types.as_deref() != Some(&**t) => Some((at, t.clone())),
            _ => None,
        };
        let rebuilt = match (&inject, self.tail) {
            (None, _) => None,
            (Some((at, t)), None) => {
                let payload = frame.payload(&self.client.rbuf);
                with_types(cmd, &payload, *at, t)
                    // Replies follow the request's last sequence id: the chunk count must not change.
                    .filter(|p| p.len() / proto::frame::MAX_CHUNK == payload.len() / proto::frame::MAX_CHUNK)
                    .map(|p| (p, None))
            }
            // A relayed execute: the types go into its head, whose header announces them.
            (Some((at, t)), Some(tail)) if tail.first_len() + t.len() < proto::frame::MAX_CHUNK => {
                with_types(cmd, frame.first_chunk(&self.client.rbuf), *at, t).map(|p| (p, Some(tail.first_len() + t.len())))
            }
            (Some(_), Some(_)) => {
                // The types would move every 16 MiB chunk boundary of a packet sluice relays
                // unread (and change the chunk count the reply's sequence ids follow).
                let outcome = crate::exec::Outcome { error: true, error_code: ER_NOT_SUPPORTED_YET, ..Default::default() };
                self.observed(&watch, Some(&held.backend.server), &outcome, 0, &entry.digest_text, &entry.sql);
                self.client.consume(frame.wire_len);
                let msg = "sluice cannot resend parameter types with an execute of 16 MiB or more: send them with this execute";
                self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, msg).await;
                self.settle_statement(held);
                return Flow::Continue;
            }
        };
        let request = match rebuilt {
            Some((mut p, announced)) => {
                self.client.consume(frame.wire_len);
                p[1..5].copy_from_slice(&backend_id.to_le_bytes());
                let mut buf = Vec::with_capacity(p.len() + 8);
                match announced {
                    Some(len) => {
                        buf.extend_from_slice(&proto::frame::encode_header(len, frame.first_seq));
                        buf.extend_from_slice(&p);
                    }
                    None => proto::frame::write_packet(&mut buf, &mut frame.first_seq.clone(), &p),
                }
                bytes::Bytes::from(buf)
            }
            None => self.request_for(frame, backend_id),
        };
        let sent_types = matches!(types_at, Some((_, true))) || inject.is_some();
        // Executing closes the statement's cursor, if it had one.
        self.statements.update(id, |s| s.cursor = false);
        let reply = if cmd == COM_STMT_EXECUTE { Reply::Execute { cursor } } else { Reply::Execute { cursor: false } };
        if entry.route.class != sql::rw::Class::Read {
            self.mark_writes(&entry.sql, true);
        }
        let tap = crate::exec::Tap { checksum: None, capture: capture.as_mut(), rename: None };
        let outcome = match self.exchange(&mut held.backend, &request, Some(reply), None, false, tap).await {
            super::Forwarded::Done(o) => o,
            super::Forwarded::LostBeforeReply { .. } | super::Forwarded::Ended => return Flow::End,
        };
        if let (Some(miss), Some(capture), Some((_, keyed))) = (miss, capture, &cached_execute) {
            if !outcome.error {
                self.cache_store(miss, capture, keyed, &held);
            }
        }
        self.observed(&watch, Some(&held.backend.server), &outcome, request.len(), &entry.digest_text, &entry.sql);
        if let Some(slot) = held.backend.statements.get(entry.id) {
            if outcome.error {
                slot.types = None;
            } else if sent_types {
                slot.types = client_types;
            }
        }
        let opened = cursor && !outcome.error && outcome.status & StatusFlags::SERVER_STATUS_CURSOR_EXISTS.bits() != 0;
        let hostgroup = held.backend.server.hostgroup;
        self.statements.update(id, |s| {
            s.long_data = false;
            s.cursor = opened;
            s.held_in = hostgroup;
        });
        // A prepared `USE db` names its schema as the text one does: the session follows it even
        // on a connection it keeps for state it cannot read back (SHOW PROCESSLIST's db).
        let use_db = (entry.effects.flags & sql::effects::USE_SCHEMA != 0).then(|| sql::classify::parse_use(&entry.sql)).flatten();
        self.after_statement(&mut held, &entry.effects, &outcome, use_db).await;
        self.note_write(&mut held, || entry.route.class == sql::rw::Class::Write, &outcome).await;
        self.settle_statement(held);
        self.settle_writes();
        Flow::Continue
    }

    /// COM_STMT_FETCH: on the connection holding the statement's cursor.
    async fn fetch(&mut self, id: u32, frame: Frame, seq: u8) -> Flow {
        let Some((entry, held_in)) = self.statements.by_id.get(&id).filter(|s| s.cursor).map(|s| (s.entry.clone(), s.held_in)) else {
            self.client.consume(frame.wire_len);
            return self.reply_no_cursor(id, seq).await;
        };
        let mut held = match self.acquire(held_in, 0, Needs::default()).await {
            Ok(h) => h,
            Err(e) => {
                self.client.consume(frame.wire_len);
                self.statements.update(id, |s| s.cursor = false);
                return self.reply_backend_error(seq, &e).await;
            }
        };
        let Some(backend_id) = held.backend.statements.get(entry.id).map(|s| s.id) else {
            // Not the connection the cursor was opened on (it was lost): the cursor is gone.
            self.client.consume(frame.wire_len);
            self.statements.update(id, |s| s.cursor = false);
            self.settle_statement(held);
            return self.reply_no_cursor(id, seq).await;
        };
        let request = self.request_for(frame, backend_id);
        let Some(outcome) = self.forward(&mut held.backend, &request, Some(Reply::Fetch), None).await else { return Flow::End };
        if outcome.status & StatusFlags::SERVER_STATUS_LAST_ROW_SENT.bits() != 0 {
            self.statements.update(id, |s| s.cursor = false);
        }
        held.pins.follow_status(outcome.status);
        self.settle_statement(held);
        Flow::Continue
    }

    /// COM_STMT_SEND_LONG_DATA (no reply): the data waits on one connection for the execute.
    async fn long_data(&mut self, id: u32, frame: Frame) -> Flow {
        let Some(entry) = self.statements.by_id.get(&id).map(|s| s.entry.clone()) else { return Flow::Continue };
        // Where the execute will go (it follows the data: the session keeps this connection).
        let routed = self.route_execute(&entry);
        let Ok(mut held) = self.acquire_routed(routed, 1, Needs::default()).await else {
            // Nowhere to keep it; the execute reports the failure.
            self.client.consume(frame.wire_len);
            return Flow::Continue;
        };
        let cap = self.snap.config.pool.max_statements_per_connection;
        let backend_id = match held.backend.statement_id(&entry, cap).await {
            Ok(b) => b,
            Err(e) => {
                self.client.consume(frame.wire_len);
                held.backend.note_failure(&e);
                self.settle(held);
                return Flow::Continue;
            }
        };
        let request = self.request_for(frame, backend_id);
        if self.forward(&mut held.backend, &request, None, None).await.is_none() {
            return Flow::End;
        }
        let hostgroup = held.backend.server.hostgroup;
        self.statements.update(id, |s| {
            s.long_data = true;
            s.held_in = hostgroup;
        });
        self.settle_statement(held);
        Flow::Continue
    }

    /// COM_STMT_RESET: clears long data and closes the cursor, on the connection holding
    /// them; with neither, there is nothing on any server to reset.
    async fn reset_statement(&mut self, id: u32, frame: Frame, seq: u8) -> Flow {
        let Some((entry, held_in)) = self.statements.by_id.get(&id).filter(|s| s.pins()).map(|s| (s.entry.clone(), s.held_in)) else {
            self.client.consume(frame.wire_len);
            return self.reply_ok(seq, "").await;
        };
        self.statements.update(id, |s| {
            s.cursor = false;
            s.long_data = false;
        });
        let mut held = match self.acquire(held_in, 0, Needs::default()).await {
            Ok(h) => h,
            Err(_) => {
                // The connection holding them is gone, and they with it.
                self.client.consume(frame.wire_len);
                return self.reply_ok(seq, "").await;
            }
        };
        let Some(backend_id) = held.backend.statements.get(entry.id).map(|s| s.id) else {
            self.client.consume(frame.wire_len);
            self.settle_statement(held);
            return self.reply_ok(seq, "").await;
        };
        let request = self.request_for(frame, backend_id);
        let Some(outcome) = self.forward(&mut held.backend, &request, Some(Reply::Single), None).await else { return Flow::End };
        held.pins.follow_status(outcome.status);
        self.settle_statement(held);
        Flow::Continue
    }

    /// COM_STMT_CLOSE (no reply). The server statement stays prepared on its connections for
    /// other sessions, unless it holds a cursor or long data: then it is closed there.
    async fn close_statement(&mut self, id: u32) {
        let Some(stmt) = self.statements.remove(id) else { return };
        if !stmt.pins() {
            return;
        }
        let Ok(mut held) = self.acquire(stmt.held_in, 0, Needs::default()).await else { return };
        if let Some(backend_id) = held.backend.statements.remove(stmt.entry.id) {
            if let Err(e) = held.backend.close_statements(&[backend_id]).await {
                held.backend.note_failure(&e);
            }
        }
        self.settle_statement(held);
    }
}

impl Session {
    /// COM_STMT_PREPARE of a KILL or SHOW PROCESSLIST: sluice's own statement, answered as
    /// the server answers its prepare (no columns until executed; a `?` described as the
    /// server describes it).
    async fn prepare_answered(&mut self, what: Answered, text: Vec<u8>, seq: u8) -> Flow {
        if let Err(full) = self.data.statements.open_handle() {
            let msg = format!(
                "Can't create more than max_prepared_stmt_count statements (current value: {}; sluice's [pool] max_statements)",
                full.cap
            );
            self.reply_err(seq, ER_MAX_PREPARED_STMT_COUNT_REACHED, SQLSTATE_NOT_SUPPORTED, &msg).await;
            return Flow::Continue;
        }
        let params = what.params();
        let id = self.statements.next_id();
        self.statements.answered.insert(id, AnsweredStatement { what, text: text.into(), param_type: None });
        let mut seq = self.finish_request(seq).await;
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let mut ok = vec![0x00];
        ok.extend_from_slice(&id.to_le_bytes());
        ok.extend_from_slice(&0u16.to_le_bytes()); // columns
        ok.extend_from_slice(&params.to_le_bytes());
        ok.extend_from_slice(&[0, 0, 0]); // filler, warnings
        proto::frame::write_packet(&mut out, &mut seq, &ok);
        if params > 0 {
            proto::frame::write_packet(&mut out, &mut seq, UNTYPED_PARAMETER);
            if !self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_DEPRECATE_EOF) {
                proto::packet::write_eof(&mut out, &mut seq, 0, self.status & StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits());
            }
        }
        let written = self.client.write_all(&out).await.is_ok();
        self.out = out;
        Flow::written(written)
    }

    /// A COM_STMT_* command for a statement sluice answers itself.
    async fn answered_command(&mut self, cmd: u8, id: u32, frame: Frame, seq: u8) -> Flow {
        if matches!(self.statements.answered.get(&id).map(|s| &s.what), Some(Answered::Sharded(_))) {
            return self.sharded_command(cmd, id, frame, seq).await;
        }
        let payload = frame.first_chunk(&self.client.rbuf);
        let param = match cmd {
            COM_STMT_EXECUTE => self.statements.answered.get_mut(&id).and_then(|s| bound_parameter(s, payload)),
            _ => None,
        };
        self.client.consume(frame.wire_len);
        match cmd {
            COM_STMT_EXECUTE => {}
            COM_STMT_CLOSE => {
                self.statements.remove(id);
                return Flow::Continue;
            }
            // Nothing waits on a server for it: no long data kept, nothing to reset.
            COM_STMT_SEND_LONG_DATA => return Flow::Continue,
            COM_STMT_RESET => return self.reply_ok(seq, "").await,
            COM_STMT_FETCH => return self.reply_no_cursor(id, seq).await,
            _ => {
                let msg = "This command is not supported in the prepared statement protocol yet";
                self.reply_err(seq, ER_UNSUPPORTED_PS, SQLSTATE_GENERAL, msg).await;
                return Flow::Continue;
            }
        }
        let Some(stmt) = self.statements.answered.get(&id) else { return Flow::Continue };
        match &stmt.what {
            Answered::Processlist { full } => {
                let full = *full;
                self.handle.begin(&stmt.text.clone(), &self.state, self.unrouted_hostgroup());
                self.processlist(full, "Execute", true, seq).await
            }
            Answered::Status => {
                let text = stmt.text.clone();
                let hostgroup = self.unrouted_hostgroup();
                self.handle.begin(&text, &self.state, hostgroup);
                self.show_status(&text, hostgroup, 1, true, seq).await
            }
            Answered::ProcesslistSelect => {
                let text = stmt.text.clone();
                self.handle.begin(&text, &self.state, self.unrouted_hostgroup());
                self.execute_processlist_select(&text, seq).await
            }
            // Dispatched at the top.
            Answered::Sharded(_) => Flow::Continue,
            Answered::Kill(k) => {
                let mut k = k.clone();
                if let KillTarget::Parameter { query_id } = k.target {
                    // The server converts the value to an unsigned integer (NULL, text that is
                    // no number: 0; a fraction rounds).
                    let value = param.unwrap_or(0);
                    k.target = if query_id { KillTarget::QueryId(value) } else { KillTarget::Id(value) };
                }
                self.kill_statement(k, seq).await
            }
        }
    }
}

/// The value an execute binds to a prepared KILL's `?`, as the server converts it to a thread
/// id; `None` when it has no parameter. Remembers the parameter's type (a client sends it with
/// its first execute only).
fn bound_parameter(stmt: &mut AnsweredStatement, payload: &[u8]) -> Option<u64> {
    if stmt.what.params() == 0 {
        return None;
    }
    // Flags, iteration count, a 1-byte NULL bitmap, new-params-bound, [type], value.
    let null = payload.get(10)? & 1 != 0;
    let mut at = 12;
    if *payload.get(11)? == 1 {
        stmt.param_type = Some(*payload.get(12)?);
        at = 14;
    }
    if null {
        return Some(0);
    }
    let value = payload.get(at..)?;
    let unsigned_int = |n: usize| value.get(..n).map(|b| b.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64));
    let signed = |n: usize| unsigned_int(n).map(|u| ((u << (64 - 8 * n)) as i64 >> (64 - 8 * n)) as u64);
    Some(match stmt.param_type? {
        proto::resultset::TYPE_TINY => signed(1)?,
        proto::resultset::TYPE_SHORT | proto::resultset::TYPE_YEAR => signed(2)?,
        proto::resultset::TYPE_LONG | proto::resultset::TYPE_INT24 => signed(4)?,
        proto::resultset::TYPE_LONGLONG => unsigned_int(8)?,
        proto::resultset::TYPE_FLOAT => f32::from_le_bytes(value.get(..4)?.try_into().ok()?).round() as i64 as u64,
        proto::resultset::TYPE_DOUBLE => f64::from_le_bytes(value.get(..8)?.try_into().ok()?).round() as i64 as u64,
        _ => {
            let (text, _) = proto::codec::read_lenenc_str(value)?;
            super::kill::thread_id_from_text(text)
        }
    })
}

/// The definition the server sends for a `?` it cannot type: named `?`, binary, type NULL.
const UNTYPED_PARAMETER: &[u8] = b"\x03def\x00\x00\x00\x01?\x00\x0c\x3f\x00\x00\x00\x00\x00\x06\x80\x00\x00\x00\x00";

impl Session {
    /// Where an execute of `entry` goes: its hint, else the split by its class (both read at
    /// prepare), else the default hostgroup, with the session's transaction and kept
    /// connections as for a COM_QUERY. Rules do not route prepared statements.
    fn route_execute(&self, entry: &Entry) -> Routed {
        route::route(&route::Facts {
            decision: &crate::rules::Decision::default(),
            default_hostgroup: self.user.default_hostgroup,
            statement: route::Statement::Known(entry.route),
            in_transaction: self.may_be_in_transaction(),
            kept_hostgroup: self.kept_hostgroup(),
            replication: &self.snap.config.replication_hostgroups,
        })
    }

    /// The client's packet for `frame`, naming the server's statement `backend_id` instead.
    fn request_for(&mut self, frame: Frame, backend_id: u32) -> bytes::Bytes {
        let mut packet = self.client.rbuf.split_to(frame.wire_len);
        set_statement_id(&mut packet, backend_id);
        packet.freeze()
    }

    /// After a statement command: the connection stays with the session while one of its
    /// statements holds a cursor or long data there.
    fn settle_statement(&mut self, mut held: Held) {
        held.pins.statement = self.statements.pin();
        self.settle(held);
    }

    async fn reply_no_cursor(&mut self, id: u32, seq: u8) -> Flow {
        let msg = format!("The statement ({id}) has no open cursor.");
        self.reply_err(seq, ER_STMT_HAS_NO_OPEN_CURSOR, SQLSTATE_GENERAL, &msg).await;
        Flow::Continue
    }
}

/// The server's name for the handler of a statement command, as its errors say.
fn handler_name(cmd: u8) -> &'static str {
    match cmd {
        COM_STMT_EXECUTE => "mysqld_stmt_execute",
        COM_STMT_BULK_EXECUTE => "mysqld_stmt_bulk_execute",
        COM_STMT_FETCH => "mysqld_stmt_fetch",
        COM_STMT_RESET => "mysqld_stmt_reset",
        COM_STMT_SEND_LONG_DATA => "mysqld_stmt_send_long_data",
        _ => "mysqld_stmt_close",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_found_and_added() {
        // Execute, 2 parameters: flags, iterations, 1-byte NULL bitmap, bound = 0, values.
        let mut exec = vec![COM_STMT_EXECUTE, 7, 0, 0, 0, 0, 1, 0, 0, 0, 0b00, 0, 0xAA];
        assert_eq!(types_in(COM_STMT_EXECUTE, &exec, 2), Some((12, false)));
        assert_eq!(types_in(COM_STMT_EXECUTE, &exec, 0), None);
        let added = with_types(COM_STMT_EXECUTE, &exec, 12, &[3, 0, 253, 0]).unwrap();
        assert_eq!(added, vec![COM_STMT_EXECUTE, 7, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 0, 253, 0, 0xAA]);
        assert_eq!(types_in(COM_STMT_EXECUTE, &added, 2), Some((12, true)));
        // Truncated: nothing to find.
        exec.truncate(11);
        assert_eq!(types_in(COM_STMT_EXECUTE, &exec, 2), None);
        // Bulk: flags 0 → types added after the flags, flag 128 set.
        let bulk = vec![COM_STMT_BULK_EXECUTE, 7, 0, 0, 0, 0, 0, 0xBB];
        assert_eq!(types_in(COM_STMT_BULK_EXECUTE, &bulk, 1), Some((7, false)));
        let added = with_types(COM_STMT_BULK_EXECUTE, &bulk, 7, &[3, 0]).unwrap();
        assert_eq!(added, vec![COM_STMT_BULK_EXECUTE, 7, 0, 0, 0, 128, 0, 3, 0, 0xBB]);
        assert_eq!(types_in(COM_STMT_BULK_EXECUTE, &added, 1), Some((7, true)));
    }
}
