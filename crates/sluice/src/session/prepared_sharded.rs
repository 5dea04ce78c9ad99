//! ② session, prepared statements on sharded and broadcast tables (docs/sharding.md): sluice
//! answers COM_STMT_PREPARE itself, with the parameter and column definitions a server gives
//! for the statement on its first shard, and keeps the statement as a template. Each
//! COM_STMT_EXECUTE binds its parameters into the template as literals, plans the text as a
//! COM_QUERY of it would be (route by the key's value, rewrite, merge), runs it on the shards
//! as text and sends the rows in the binary protocol.

use super::sharded::Run;
use super::{Flow, Session};
use crate::shard::params::{bind, bind_bulk, BulkError, Template, BULK_UNIT_RESULTS};
use crate::shard::plan::{self, Merge, ShardPlan, Sharding};
use proto::command::*;
use proto::errors::*;
use proto::frame::Frame;
use std::sync::Arc;

/// An execute's parameters as literals: one row (`literals`), or a bulk execute's `rows`.
struct Bound {
    literals: Vec<String>,
    rows: Vec<Vec<String>>,
    sent_types: Option<Vec<u8>>,
    flags: u8,
}

/// A prepared statement on sharded tables.
pub(super) struct ShardedStatement {
    template: Arc<Template>,
    /// Parsed once, when its placeholders can be placed in the AST (else the text is planned).
    parsed: Option<Arc<plan::Parsed>>,
    /// The schema at its prepare: its unqualified tables are that schema's, as on a server.
    schema: String,
    /// The parameter types of the client's last execute that sent them.
    types: Option<Vec<u8>>,
    /// COM_STMT_SEND_LONG_DATA, per parameter, until the next execute or reset.
    long: Vec<Option<Vec<u8>>>,
    digest: u64,
    digest_text: Vec<u8>,
}

/// The cursor flags of COM_STMT_EXECUTE.
const CURSOR_TYPE_READ_ONLY: u8 = 1;

impl Session {
    /// COM_STMT_PREPARE of `text`, which names a sharded or broadcast table. `None` when the
    /// statement is not on the shards after all (the name was something else): prepared as usual.
    pub(super) async fn prepare_sharded(&mut self, text: &[u8], seq: u8) -> Option<Flow> {
        let schema: String = self.state.schema.as_deref().unwrap_or_default().to_string();
        let template = Template::new(text);
        // What sluice would refuse whatever the values is refused now.
        match plan::plan_unbound(&self.snap.shards, &schema, text) {
            Sharding::NotSharded => return None,
            Sharding::Refused(why) => return Some(self.refuse(seq, &why).await),
            Sharding::Single(_) | Sharding::Fanout(_) => {}
        }
        let Some(first) = plan::first_shard(&self.snap.shards, &schema, text) else {
            return Some(self.refuse(seq, "sluice could not parse a statement that names a sharded or broadcast table").await);
        };
        if let Err(full) = self.data.statements.open_handle() {
            let msg = format!(
                "Can't create more than max_prepared_stmt_count statements (current value: {}; sluice's [pool] max_statements)",
                full.cap
            );
            self.reply_err(seq, ER_MAX_PREPARED_STMT_COUNT_REACHED, SQLSTATE_NOT_SUPPORTED, &msg).await;
            return Some(Flow::Continue);
        }
        // The server's description of the statement on one shard: its parameters and columns
        // are every shard's (the schema names the shard's database, as the text path's do).
        let mut held = match self.acquire(first.hostgroup, 1, super::multiplex::Needs::default()).await {
            Ok(h) => h,
            Err(e) => {
                self.data.statements.close_handles(1);
                return Some(self.reply_backend_error(seq, &e).await);
            }
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let prepared = held.backend.prepare_for_client(first.sql.as_bytes(), &mut out).await;
        let mut registered = false;
        match prepared {
            Ok(ok) => {
                if let Err(e) = held.backend.close_statements(&[ok.id]).await {
                    held.backend.note_failure(&e);
                }
                if usize::from(ok.params) == template.params() {
                    let digest = if self.digests_on() { self.plan_scratch.digest(&self.snap.config.rules, text, true) } else { 0 };
                    let statement = ShardedStatement {
                        long: vec![None; template.params()],
                        parsed: plan::parse_template(text, template.params()).map(Arc::new),
                        template: Arc::new(template),
                        schema,
                        types: None,
                        digest,
                        digest_text: if digest != 0 { self.plan_scratch.digest_text.clone() } else { Vec::new() },
                    };
                    let id = self.statements.add_sharded(statement, text);
                    super::prepared::set_statement_id(&mut out, id);
                    out = crate::exec::RenameColumns::of(&first).packets(&out);
                    registered = true;
                } else {
                    out.clear();
                    let msg = format!(
                        "sluice found {} parameters in this statement where the server found {}; it cannot bind them",
                        template.params(),
                        ok.params
                    );
                    proto::packet::write_err(&mut out, &mut seq.clone(), ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, &msg);
                }
            }
            Err(e) => {
                held.backend.note_failure(&e);
                out.clear();
                super::write_backend_error(&mut out, &mut seq.clone(), &e);
            }
        }
        if !registered {
            self.data.statements.close_handles(1);
        }
        let written = self.client.write_all(&out).await.is_ok();
        self.out = out;
        self.settle(held);
        Some(Flow::written(written))
    }

    /// A COM_STMT_* command (but PREPARE) for a statement on sharded tables.
    pub(super) async fn sharded_command(&mut self, cmd: u8, id: u32, frame: Frame, seq: u8) -> Flow {
        match cmd {
            COM_STMT_EXECUTE => self.execute_sharded(id, frame, seq, false).await,
            COM_STMT_BULK_EXECUTE => self.execute_sharded(id, frame, seq, true).await,
            COM_STMT_SEND_LONG_DATA => {
                // Statement id (4), parameter (2), data: kept until the execute.
                let payload = frame.payload(&self.client.rbuf);
                if let (Some(s), Some(p)) = (self.statements.sharded_mut(id), payload.get(5..7)) {
                    let param = usize::from(u16::from_le_bytes([p[0], p[1]]));
                    if let Some(slot) = s.long.get_mut(param) {
                        slot.get_or_insert_with(Vec::new).extend_from_slice(payload.get(7..).unwrap_or_default());
                    }
                }
                self.client.consume(frame.wire_len);
                Flow::Continue
            }
            COM_STMT_RESET => {
                self.client.consume(frame.wire_len);
                if let Some(s) = self.statements.sharded_mut(id) {
                    s.long.iter_mut().for_each(|l| *l = None);
                }
                self.reply_ok(seq, "").await
            }
            COM_STMT_CLOSE => {
                self.client.consume(frame.wire_len);
                self.statements.remove_answered(id);
                Flow::Continue
            }
            COM_STMT_FETCH => {
                self.client.consume(frame.wire_len);
                let msg = format!("The statement ({id}) has no open cursor.");
                self.reply_err(seq, ER_STMT_HAS_NO_OPEN_CURSOR, SQLSTATE_GENERAL, &msg).await;
                Flow::Continue
            }
            _ => {
                self.client.consume(frame.wire_len);
                let msg = format!("sluice does not run command {cmd:#04x} on a statement on sharded tables");
                self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, &msg).await;
                Flow::Continue
            }
        }
    }

    /// COM_STMT_EXECUTE: the parameters bound into the template, planned, run on the shards,
    /// the rows sent in the binary protocol. COM_STMT_BULK_EXECUTE (`bulk`): each row of
    /// parameters a row of one multi-row INSERT (`plan::plan_parsed_rows`).
    async fn execute_sharded(&mut self, id: u32, frame: Frame, seq: u8, bulk: bool) -> Flow {
        if self.tail.is_some() || frame.chunks != 1 {
            self.client.consume(frame.wire_len);
            return self.refuse(seq, "sluice cannot shard a statement larger than max_buffered_packet or 16 MiB").await;
        }
        let backslash_escapes = self.backslash_escapes();
        let max_text = self.snap.shards.max_statement_bytes;
        let payload = frame.payload(&self.client.rbuf);
        let Some(s) = self.statements.sharded_mut(id) else {
            self.client.consume(frame.wire_len);
            return Flow::Continue;
        };
        let bound = if bulk {
            let flags = payload.get(5..7).map_or(0, |f| u16::from_le_bytes([f[0], f[1]]));
            match bind_bulk(&payload, s.template.params(), s.types.as_deref(), backslash_escapes, max_text) {
                _ if flags & BULK_UNIT_RESULTS != 0 => Err((
                    ER_NOT_SUPPORTED_YET,
                    "sluice does not send per-row results of COM_STMT_BULK_EXECUTE on sharded tables yet".to_string(),
                )),
                Ok((rows, sent_types)) => Ok(Bound { literals: Vec::new(), sent_types, flags: 0, rows }),
                Err(BulkError::Bad(m)) => Err((ER_WRONG_ARGUMENTS, m)),
                Err(BulkError::TooLarge(m)) => Err((ER_NOT_SUPPORTED_YET, m)),
            }
        } else {
            bind(&payload, s.template.params(), s.types.as_deref(), &s.long, backslash_escapes)
                .map(|b| Bound { literals: b.literals, sent_types: b.sent_types, flags: b.flags, rows: Vec::new() })
                .map_err(|m| (ER_WRONG_ARGUMENTS, m))
        };
        drop(payload);
        self.client.consume(frame.wire_len);
        // An execute uses the long data up, whatever its outcome (as on the server).
        s.long.iter_mut().for_each(|l| *l = None);
        let bound = match bound {
            Ok(b) => b,
            Err((code, msg)) => {
                let sqlstate = if code == ER_WRONG_ARGUMENTS { SQLSTATE_GENERAL } else { SQLSTATE_NOT_SUPPORTED };
                self.reply_err(seq, code, sqlstate, &msg).await;
                return Flow::Continue;
            }
        };
        if let Some(t) = bound.sent_types {
            s.types = Some(t);
        }
        let (template, parsed, schema) = (s.template.clone(), s.parsed.clone(), s.schema.clone());
        let (digest, digest_text) = (s.digest, s.digest_text.clone());
        // The allowlist and the statement limits judge each execute, as an unsharded one's.
        let decision =
            if self.needs_execute_decision() { self.execute_decision(&template.text(), digest, &digest_text) } else { Default::default() };
        if self.snap.config.firewall_compiled.enabled() {
            if let Some(msg) = self.firewall(b"", digest, &digest_text, decision.flag) {
                self.reply_err(seq, ER_NOT_ALLOWED_COMMAND, SQLSTATE_NOT_SUPPORTED, &msg).await;
                return Flow::Continue;
            }
        }
        let _limits = match self.enter_limits(decision.actions.limit.as_ref()) {
            Ok(guards) => guards,
            Err(message) => {
                self.reply_err(seq, ER_USER_LIMIT_REACHED, SQLSTATE_NOT_SUPPORTED, &message).await;
                return Flow::Continue;
            }
        };
        if bound.flags & CURSOR_TYPE_READ_ONLY != 0 {
            return self
                .refuse(seq, "sluice does not open cursors on sharded or broadcast tables yet (CURSOR_TYPE_READ_ONLY); execute without one")
                .await;
        }
        let in_transaction = self.may_be_in_transaction();
        if in_transaction && self.local_writes {
            return self.refuse(seq, super::xa::AFTER_LOCAL_WRITES).await;
        }
        let text = template.fill(bound.rows.first().unwrap_or(&bound.literals));
        let planned = match (&parsed, bulk) {
            (Some(p), true) => plan::plan_parsed_rows(&self.snap.shards, &schema, p, &bound.rows),
            (None, true) => Sharding::Refused("sluice cannot run COM_STMT_BULK_EXECUTE on this statement; execute each row".into()),
            (Some(p), false) => plan::plan_parsed(&self.snap.shards, &schema, p, &bound.literals),
            (None, false) => plan::plan(&self.snap.shards, &schema, &text),
        };
        let sharded = match planned {
            Sharding::Refused(why) => return self.refuse(seq, &why).await,
            Sharding::NotSharded => return self.refuse(seq, "sluice found no sharded table in this statement at its execute").await,
            Sharding::Single(one) => ShardPlan::one(one, Merge::One),
            Sharding::Fanout(p) => p,
        };
        let hostgroup = sharded.targets.first().map_or(0, |t| t.hostgroup);
        let digest = if self.digests_on() { digest } else { 0 };
        let watch = self.watch(&text, crate::stats::Command::from_sql(&text), digest, hostgroup, None);
        self.mark_writes(&text, true);
        let run = Run { retries: 1, timeout: None, digest_text: Some(digest_text), binary: true };
        // In a transaction: on its XA branches, as a text statement would be (`session::xa`).
        let flow =
            if in_transaction { self.run_xa(&sharded, &watch, run, seq).await } else { self.run_sharded(&sharded, &watch, run, seq).await };
        self.settle_writes();
        flow
    }
}
