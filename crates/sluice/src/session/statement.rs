//! ② session, one COM_QUERY through the data path: `plan` (classify → ③ rules → ④ route,
//! synchronous) → ⑤ acquire (a pooled connection in line with the session's state) → ⑥ exec
//! → settle (keep it if pinned, else back to the pool).

use super::multiplex::Needs;
use super::{Flow, Session};
use crate::plan::{self, Action, Plan};
use crate::rules::Who;
use proto::errors::*;
use proto::frame::Frame;
use proto::response::Reply;

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
            default_hostgroup: self.user.default_hostgroup,
            digests_on: self.digests_on(),
            multi_statements: self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_MULTI_STATEMENTS),
            in_transaction: self.may_be_in_transaction(),
            kept_hostgroup: self.kept_hostgroup(),
            replication: &self.snap.config.replication_hostgroups,
        };
        plan::plan(&stmt, &facts, &self.snap.config.rules, &mut self.plan_scratch)
    }

    /// A COM_QUERY: planned, then carried out.
    pub(super) async fn query(&mut self, frame: Frame, seq: u8) -> Flow {
        let plan = self.plan(&frame);
        let hostgroup = plan.hostgroup();
        match plan.action {
            Action::Forward => self.forward_query(plan, frame, seq).await,
            Action::Intercept(intercept) => {
                if matches!(intercept, sql::classify::Intercept::Processlist { .. }) {
                    // The session's own row shows the statement, as on the server.
                    let text = frame.first_chunk(&self.client.rbuf);
                    self.handle.begin(text.get(1..).unwrap_or_default(), &self.state, hostgroup);
                }
                self.client.consume(frame.wire_len);
                self.intercepted(intercept, seq).await
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

    /// Sends a planned statement to its target and streams the reply.
    async fn forward_query(&mut self, mut plan: Plan, frame: Frame, seq: u8) -> Flow {
        if let Some(variable) = plan.dynamic_sql.take() {
            if let Some(answered) = self.check_dynamic_sql(&variable, seq).await {
                self.client.consume(frame.wire_len);
                return answered;
            }
        }
        let watch = self.watch_query(&frame, &plan);
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
        let timeout = plan.timeout();
        let request = match plan.rewrite {
            Some(r) => {
                self.client.consume(frame.wire_len);
                r
            }
            None => self.client.rbuf.split_to(frame.wire_len).freeze(),
        };
        self.watch_tail = plan.watch_tail;
        let Some(outcome) = self.forward(&mut held.backend, &request, Some(Reply::Query), timeout).await else { return Flow::End };
        let sent = request.get(5..request.len().min(4 + proto::frame::MAX_CHUNK)).unwrap_or_default();
        self.observed(&watch, Some(&held.backend.server), &outcome, request.len(), &self.plan_scratch.digest_text, sent);
        self.after_statement(&mut held, &plan.effects, &outcome, plan.use_db).await;
        self.note_write(&mut held, || sql::rw::class(sent) == sql::rw::Class::Write, &outcome).await;
        self.settle(held);
        Flow::Continue
    }

    /// The connection for a routed statement (a COM_QUERY's plan, a prepared statement's
    /// execute): its target's, else (a read the split sent to the readers) the writer's when no
    /// reader is usable or none has applied what the read must see in time (causal reads).
    pub(super) async fn acquire_routed(
        &mut self,
        routed: crate::route::Routed,
        retries: u32,
        needs: Needs,
    ) -> Result<super::multiplex::Held, crate::pool::BackendError> {
        let acquired = self.acquire(routed.target.hostgroup(), retries, needs).await;
        let Some(writer) = routed.fallback else { return acquired };
        match acquired {
            Err(crate::pool::BackendError::Unavailable(_)) => self.acquire(writer, retries, needs).await,
            Ok(mut held) if held.backend.server.hostgroup != writer => {
                if self.caught_up(&mut held, writer).await {
                    return Ok(held);
                }
                self.settle(held);
                self.acquire(writer, retries, needs).await
            }
            other => other,
        }
    }

    /// Starts watching a planned statement (its first chunk is what SHOW PROCESSLIST shows).
    fn watch_query(&self, frame: &Frame, plan: &Plan) -> super::observe::Watch {
        let text = frame.first_chunk(&self.client.rbuf);
        self.watch(text.get(1..).unwrap_or_default(), plan.command, plan.digest, plan.hostgroup(), plan.log_rule())
    }

    /// A statement that ended before reaching a backend (answered by a rule, or no connection
    /// could be had), as the client sent it.
    fn observe_unsent(&self, watch: &super::observe::Watch, outcome: &crate::exec::Outcome, frame: &Frame) {
        let text = frame.first_chunk(&self.client.rbuf);
        self.observed(watch, None, outcome, 0, &self.plan_scratch.digest_text, text.get(1..).unwrap_or_default());
    }

    /// COM_STMT_PREPARE text a rule blocks with error_msg: the message.
    pub(super) fn blocked(&mut self, text: &[u8]) -> Option<Box<str>> {
        let who = self.origin.who(&self.user.name, self.state.schema.as_deref());
        plan::prepare_blocked(text, &who, &self.snap.config.rules, &mut self.plan_scratch)
    }
}
