//! Statements that name sessions, answered by sluice from its own sessions: KILL [HARD|SOFT]
//! [CONNECTION|QUERY] <id | CONNECTION_ID() | USER name>, KILL QUERY ID n, COM_PROCESS_KILL,
//! SHOW [FULL] PROCESSLIST and COM_PROCESS_INFO. The ids a client sees (greeting,
//! CONNECTION_ID(), SHOW PROCESSLIST) are sluice's session ids, and KILL takes only those: with
//! multiplexing, a backend thread serves whichever client runs a statement on it, so no KILL
//! text may reach a backend. Text that could run a KILL sluice cannot resolve (an expression id,
//! KILL among other statements, dynamic SQL sluice cannot read) is refused
//! (`sql::classify::intercept`). Prepared ones (COM_STMT_PREPARE) are answered here too, at
//! each execute (`prepared.rs`).
//!
//! Privileges follow the server's rules, asked of the server with the killer's own login
//! (SHOW GRANTS): a user may kill its own sessions, others need SUPER or CONNECTION ADMIN;
//! SHOW PROCESSLIST lists other users' sessions only with PROCESS. The target session kills
//! its own running statement, so the KILL QUERY reaches exactly that statement's backend
//! connection, whichever it is.

use super::multiplex::Needs;
use super::{Flow, Session};
use crate::config::MonitorSection;
use crate::pool::Server;
use crate::pool::{self, Backend, BackendError, Credential, Login};
use crate::registry::{KillQuery, SessionHandle};
use crate::stats::Counter;
use proto::errors::*;
use sql::classify::{refusal, Dynamic, Intercept, Kill, KillScope, KillTarget};
use std::sync::Arc;
use std::time::Duration;

const ER_QUERY_INTERRUPTED: u16 = 1317;
const ER_BAD_FIELD_ERROR: u16 = 1054;
const ER_SUBQUERIES_NOT_SUPPORTED: u16 = 1970;
const ER_NO_SUCH_QUERY: u16 = 1957;
const ER_KILL_QUERY_DENIED_ERROR: u16 = 1979;
const SQLSTATE_INTERRUPTED: &[u8; 5] = b"70100";

/// How long a KILL CONNECTION waits for its targets' client connections to close before it
/// answers (the server answers once they are; a target stuck writing to a slow client must
/// not hold the killer).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The server privileges that change what KILL and SHOW PROCESSLIST may reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Privileges {
    /// SUPER or CONNECTION ADMIN: kill other users' sessions.
    kill_others: bool,
    /// PROCESS: see other users' sessions.
    process: bool,
}

impl Privileges {
    /// From SHOW GRANTS (which includes the current role's): global grants only (`ON *.*`).
    fn from_grants<'a>(lines: impl IntoIterator<Item = &'a str>) -> Privileges {
        let mut p = Privileges::default();
        for line in lines {
            let Some(rest) = line.strip_prefix("GRANT ") else { continue };
            let Some(end) = rest.find(" ON *.* TO ") else { continue };
            for privilege in rest[..end].split(',').map(str::trim) {
                let all = privilege.eq_ignore_ascii_case("ALL PRIVILEGES") || privilege.eq_ignore_ascii_case("ALL");
                p.kill_others |= all || ["SUPER", "CONNECTION ADMIN", "CONNECTION_ADMIN"].iter().any(|k| privilege.eq_ignore_ascii_case(k));
                p.process |= all || privilege.eq_ignore_ascii_case("PROCESS");
            }
        }
        p
    }
}

/// A KILL id given as text (a user variable's value, a string parameter), converted to an
/// unsigned integer as the server converts it: a negative number wraps, a fraction rounds,
/// anything else is 0.
pub(super) fn thread_id_from_text(text: &[u8]) -> u64 {
    let text = std::str::from_utf8(text).unwrap_or("").trim();
    text.parse::<u64>()
        .ok()
        .or_else(|| text.parse::<i64>().ok().map(|i| i as u64))
        .or_else(|| text.parse::<f64>().ok().filter(|f| f.is_finite()).map(|f| f.round() as i64 as u64))
        .unwrap_or(0)
}

/// The user variable a dynamic SQL expression's value is read through (`expression_runs`).
const DYNAMIC_VALUE: &str = "@`sluice dynamic sql`";

/// An error of an expression sluice evaluated with a statement of its own, as the client's
/// `statement` (KILL, EXECUTE IMMEDIATE, PREPARE..FROM) has it on the server.
fn named_as(e: BackendError, statement: &str) -> BackendError {
    let BackendError::Rejected { server, code, sqlstate, message } = e else { return e };
    let bytes = message.as_bytes();
    let message = match code {
        // "Unknown column 'x' in 'SET'": the place is the client's statement.
        ER_BAD_FIELD_ERROR => match bytes.windows(5).rposition(|w| w == b" in '") {
            Some(at) => [&bytes[..at], b" in '", statement.as_bytes(), b"'"].concat().as_slice().into(),
            None => message,
        },
        ER_SUBQUERIES_NOT_SUPPORTED => format!("{statement} does not support subqueries or stored functions").as_bytes().into(),
        _ => message,
    };
    BackendError::Rejected { server, code, sqlstate, message }
}

fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    hex.chunks(2)
        .map(|pair| match pair {
            [h, l] => Some(digit(*h)? << 4 | digit(*l)?),
            _ => None,
        })
        .collect()
}

impl Session {
    /// Carries out a statement sluice answers itself (`Intercept::answered_by_sluice`).
    pub(super) async fn intercepted(&mut self, intercept: Intercept, seq: u8) -> Flow {
        match intercept {
            Intercept::Kill(k) => self.kill_statement(k, seq).await,
            Intercept::Processlist { full } => self.processlist(full, "Query", false, seq).await,
            Intercept::Refuse(why) => self.refuse(seq, why).await,
            // Checked before forwarding (`check_dynamic_sql`).
            Intercept::Dynamic(_) => Flow::Continue,
        }
    }

    /// `PREPARE s FROM …` / `EXECUTE IMMEDIATE …` of a user variable or an expression: whether
    /// the text it would run may run. `Ok(None)`: the statement goes on to the backend as it
    /// is; `Ok(Some(sql))`: as `sql`, which carries the expression's value in its place;
    /// `Err`: the session was answered.
    pub(super) async fn check_dynamic_sql(&mut self, dynamic: &Dynamic, seq: u8) -> Result<Option<Vec<u8>>, Flow> {
        let checked = match dynamic {
            Dynamic::Variable(name) => self.variable_runs(name).await.map(|why| (why, None)),
            Dynamic::Expression { head, expression, tail, prepare } => self.expression_runs(head, expression, tail, *prepare).await,
            // Checked by the server as it runs, behind guards sluice put in the text.
            Dynamic::Guarded { sql, .. } => Ok((None, Some(sql.clone()))),
        };
        match checked {
            Ok((None, sql)) => Ok(sql),
            Ok((Some(why), _)) => Err(self.refuse(seq, why).await),
            Err(e) => Err(self.reply_backend_error(seq, &e).await),
        }
    }

    /// The server reads this session's backslashes as escapes: its status flags say
    /// NO_BACKSLASH_ESCAPES is off, and its client character set is one where a backslash
    /// byte is always a backslash (not sjis, cp932, gbk, big5 or gb18030, whose characters
    /// may end in one).
    pub(super) fn backslash_escapes(&self) -> bool {
        const TRAIL_BACKSLASH: [&str; 5] = ["sjis", "cp932", "gbk", "big5", "gb18030"];
        // Login collations (handshake ids) of latin1, utf8mb3, utf8mb4, binary and ascii.
        fn plain_collation(id: u16) -> bool {
            matches!(id, 5 | 8 | 11 | 15 | 31 | 33 | 45..=49 | 63 | 65 | 83 | 94 | 192..=215 | 223..=247)
        }
        let charset_ok = match self.state.var("character_set_client") {
            // Planned with every statement: compared in place, nothing allocated.
            Some(set) => !TRAIL_BACKSLASH.iter().any(|c| set.as_bytes().windows(c.len()).any(|w| w.eq_ignore_ascii_case(c.as_bytes()))),
            None => plain_collation(self.state.collation),
        };
        charset_ok && self.status & proto::StatusFlags::SERVER_STATUS_NO_BACKSLASH_ESCAPES.bits() == 0
    }

    /// The session set `@@pseudo_thread_id` itself (SUPER or BINLOG REPLAY): reads of it are
    /// the server's, not the session id.
    pub(super) fn pseudo_thread_id_set(&self) -> bool {
        self.state.var("pseudo_thread_id").is_some()
    }

    /// `sql` with the session's id for CONNECTION_ID() and @@pseudo_thread_id
    /// (`plan::rewrite_connection_id`), for a statement that is not planned.
    pub(super) fn with_session_ids(&self, sql: Vec<u8>) -> Vec<u8> {
        crate::plan::rewrite_connection_id(&sql, self.id, !self.pseudo_thread_id_set(), false).unwrap_or(sql)
    }

    pub(super) async fn refuse(&mut self, seq: u8, why: &str) -> Flow {
        self.reply_err(seq, ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, why).await;
        Flow::Continue
    }

    /// A KILL: in a text, or a prepared one executed (its `?` already bound to the id).
    pub(super) async fn kill_statement(&mut self, k: Kill, seq: u8) -> Flow {
        match k.target {
            KillTarget::Id(id) => self.kill(id, k.scope, k.hard, seq).await,
            KillTarget::Own => self.kill(self.id.into(), k.scope, k.hard, seq).await,
            KillTarget::User { name, host } => self.kill_user(name, host, k.scope, k.hard, seq).await,
            KillTarget::QueryId(id) => self.kill_query_id(id, k.hard, seq).await,
            // `?` outside a prepared statement: a syntax error on the server too.
            KillTarget::Parameter { .. } => self.refuse(seq, refusal::KILL_FORM).await,
            KillTarget::Expression { text, query_id } => {
                let scope = match (k.scope, query_id) {
                    (_, true) => "QUERY ID ",
                    (KillScope::Query, false) => "QUERY ",
                    (KillScope::Connection, false) => "",
                };
                let statement = format!("KILL {}{scope}{text}", kill_modifier(k.hard));
                let id = match self.evaluate_kill_id(&statement, &text).await {
                    Ok(id) => id,
                    Err(e) => return self.reply_backend_error(seq, &e).await,
                };
                match query_id {
                    true => self.kill_query_id(id, k.hard, seq).await,
                    false => self.kill(id, k.scope, k.hard, seq).await,
                }
            }
        }
    }

    /// KILL [HARD|SOFT] [CONNECTION|QUERY] <session id>, and COM_PROCESS_KILL. False when the
    /// session must end (it killed itself).
    pub(super) async fn kill(&mut self, target: u64, scope: KillScope, hard: Option<bool>, seq: u8) -> Flow {
        let Some(handle) = self.data.registry.find(target) else {
            self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &format!("Unknown thread id: {target}")).await;
            return Flow::Continue;
        };
        if *handle.user() != *self.user.name {
            match self.privileges().await {
                Ok(p) if p.kill_others => {}
                Ok(_) => {
                    self.reply_err(seq, ER_KILL_DENIED_ERROR, SQLSTATE_GENERAL, &format!("You are not owner of thread {target}")).await;
                    return Flow::Continue;
                }
                Err(e) => return self.reply_backend_error(seq, &e).await,
            }
        }
        if handle.id == self.id {
            // As on the server: the running statement is the KILL itself.
            return match scope {
                KillScope::Query => {
                    self.reply_err(seq, ER_QUERY_INTERRUPTED, SQLSTATE_INTERRUPTED, "Query execution was interrupted").await;
                    Flow::Continue
                }
                KillScope::Connection => {
                    handle.kill();
                    self.reply_err(seq, ER_CONNECTION_KILLED, SQLSTATE_INTERRUPTED, "Connection was killed").await;
                    Flow::End
                }
            };
        }
        // Killed first: a session woken by the request in its statement then ends the backend
        // connection too (`kill_connection`).
        if scope == KillScope::Connection {
            handle.kill();
        }
        handle.request_kill_query(hard.into());
        if scope == KillScope::Connection {
            let _ = tokio::time::timeout(CLOSE_WAIT, handle.closed()).await;
        }
        self.reply_ok(seq, "").await
    }

    /// KILL [HARD|SOFT] [CONNECTION|QUERY] USER name[@host]: every session of that user (from
    /// that client host), the killer's own included; the OK counts them. Another user's
    /// sessions need the privilege, or nothing is killed.
    async fn kill_user(&mut self, name: Option<String>, host: Option<String>, scope: KillScope, hard: Option<bool>, seq: u8) -> Flow {
        let name = name.unwrap_or_else(|| self.user.name.clone());
        let from_host = |h: &SessionHandle| {
            host.as_deref().is_none_or(|host| {
                host.eq_ignore_ascii_case(&h.peer.ip().to_string()) || (h.peer.ip().is_loopback() && host.eq_ignore_ascii_case("localhost"))
            })
        };
        let targets: Vec<_> = self.data.registry.sessions().into_iter().filter(|h| *h.user() == *name && from_host(h)).collect();
        if !targets.is_empty() && name != self.user.name {
            match self.privileges().await {
                Ok(p) if p.kill_others => {}
                Ok(_) => {
                    let msg = format!("Operation KILL USER failed for {name}@{}", host.as_deref().unwrap_or("%"));
                    self.reply_err(seq, ER_KILL_DENIED_ERROR, SQLSTATE_GENERAL, &msg).await;
                    return Flow::Continue;
                }
                Err(e) => return self.reply_backend_error(seq, &e).await,
            }
        }
        let mut killed_self = false;
        for h in &targets {
            if h.id == self.id {
                killed_self = scope == KillScope::Connection;
                continue;
            }
            if scope == KillScope::Connection {
                h.kill();
            }
            h.request_kill_query(hard.into());
        }
        if scope == KillScope::Connection {
            let others = targets.iter().filter(|h| h.id != self.id);
            let _ = tokio::time::timeout(CLOSE_WAIT, async {
                for h in others {
                    h.closed().await;
                }
            })
            .await;
        }
        let written = self.reply_ok_rows(seq, targets.len() as u64).await;
        if killed_self {
            // The server answers, then ends the killer's own connection.
            self.handle.kill();
            return Flow::End;
        }
        Flow::written(written)
    }

    /// KILL [HARD|SOFT] QUERY ID n: query ids are the backends' (information_schema.PROCESSLIST
    /// shows them). The servers running sluice's sessions' statements are asked, with the
    /// killer's login, which thread runs query n; the session running there kills that query,
    /// and only it (`KILL QUERY ID n` on that server), so a statement that ended meanwhile
    /// takes no other with it.
    async fn kill_query_id(&mut self, query_id: u64, hard: Option<bool>, seq: u8) -> Flow {
        let unknown = format!("Unknown query id: {query_id}");
        // Ids beyond what a kill request carries name no query a server has run.
        if query_id == 0 || query_id > u64::MAX >> 2 {
            self.reply_err(seq, ER_NO_SUCH_QUERY, SQLSTATE_GENERAL, &unknown).await;
            return Flow::Continue;
        }
        let running: Vec<(Arc<SessionHandle>, u32, u32)> = self
            .data
            .registry
            .sessions()
            .into_iter()
            .filter(|h| h.id != self.id && h.activity().started.is_some())
            .filter_map(|h| h.backend().map(|(pool, thread)| (h, pool, thread)))
            .collect();
        let mut pools: Vec<u32> = running.iter().map(|r| r.1).collect();
        pools.sort_unstable();
        pools.dedup();
        let timeout = self.snap.config.connect_timeout();
        // Without PROCESS the killer's login sees only its own threads, where the server would
        // answer 1979 for another user's query: the [monitor] login looks too.
        let monitor = self.snap.config.monitor.as_ref().filter(|m| !m.username.is_empty()).map(monitor_login);
        let sql = format!("SELECT ID FROM information_schema.PROCESSLIST WHERE QUERY_ID = {query_id}");
        let mut target = None;
        'pools: for pool_id in pools {
            let Some(server) = self.snap.hostgroups.servers().iter().find(|s| s.pool.id == pool_id).cloned() else { continue };
            for login in std::iter::once(&*self.login).chain(monitor.as_ref()) {
                let threads = match rows_on(&server, login, &sql, timeout).await {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::warn!("finding query id {query_id} on {} as {} failed: {e}", server.name, login.username);
                        continue;
                    }
                };
                let thread = threads.first().and_then(|r| r.first().cloned().flatten()).and_then(|t| t.parse::<u32>().ok());
                if let Some(found) = thread.and_then(|t| running.iter().find(|r| r.1 == pool_id && r.2 == t)) {
                    target = Some(found.0.clone());
                    break 'pools;
                }
            }
        }
        let Some(handle) = target else {
            self.reply_err(seq, ER_NO_SUCH_QUERY, SQLSTATE_GENERAL, &unknown).await;
            return Flow::Continue;
        };
        if *handle.user() != *self.user.name {
            match self.privileges().await {
                Ok(p) if p.kill_others => {}
                Ok(_) => {
                    let msg = format!("You are not owner of query {query_id}");
                    self.reply_err(seq, ER_KILL_QUERY_DENIED_ERROR, SQLSTATE_GENERAL, &msg).await;
                    return Flow::Continue;
                }
                Err(e) => return self.reply_backend_error(seq, &e).await,
            }
        }
        handle.request_kill_query(KillQuery { hard, query_id });
        self.reply_ok(seq, "").await
    }

    /// One of sluice's own statements on the session's connection (in the session's state, as
    /// the client's own statement would run, and interruptible as it is): its rows.
    async fn query_on_session(&mut self, sql: impl AsRef<[u8]>) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        let mut held = self.acquire(self.unrouted_hostgroup(), 1, Needs::default()).await?;
        let rows = self.interruptible(&mut held.backend, sql.as_ref()).await;
        if let Err(e) = &rows {
            held.backend.note_failure(e);
        }
        self.settle(held);
        rows
    }

    /// Runs `sql` on `backend` as a forwarded statement runs (`Session::forward`): a KILL QUERY
    /// of this session (another client's, or the shutdown's once its timeout passed) kills it
    /// on the server, a KILL CONNECTION ends that backend connection, and so does a client that
    /// leaves meanwhile; the statement's end is awaited either way, and it ends with the
    /// server's error.
    async fn interruptible(&mut self, backend: &mut Backend, sql: &[u8]) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        self.handle.clear_kill_query();
        let (server, thread) = (backend.server.clone(), backend.thread_id);
        let (timeout, monitor) = (self.snap.config.connect_timeout(), self.snap.config.monitor.as_ref());
        let mut killer = None;
        let rows = {
            let run = backend.query(sql);
            tokio::pin!(run);
            let gone = crate::exec::client_gone(&mut self.client);
            tokio::pin!(gone);
            loop {
                tokio::select! {
                    biased;
                    rows = &mut run => break rows,
                    request = self.handle.kill_query_requested(), if killer.is_none() => {
                        self.data.stats.add(Counter::KilledBackendQueries, 1);
                        killer = Some(if self.handle.is_killed() {
                            kill_connection(&server, thread, &self.login, monitor, request.hard, timeout)
                        } else {
                            kill_query(&server, thread, &self.login, monitor, request, timeout)
                        });
                    }
                    _ = &mut gone, if killer.is_none() => {
                        self.data.stats.add(Counter::KilledBackendQueries, 1);
                        killer = Some(kill_connection(&server, thread, &self.login, monitor, None, timeout));
                    }
                }
            }
        };
        let Some(killer) = killer else { return rows };
        // Bounded: connecting and KILL each take at most about the connect timeout.
        let _ = tokio::time::timeout(timeout * 3, killer).await;
        // A statement that still returned (SLEEP() returns 1 when killed) was interrupted all
        // the same: the server answers it with 1317.
        let message = b"Query execution was interrupted".as_slice().into();
        rows.and(Err(BackendError::Rejected {
            server: server.name.to_string(),
            code: ER_QUERY_INTERRUPTED,
            sqlstate: *SQLSTATE_INTERRUPTED,
            message,
        }))
    }

    /// The killer's global privileges, asked of the server on the session's own connection
    /// (so a role it enabled counts). Not cached: KILL and SHOW PROCESSLIST are rare, and the
    /// answer then follows SET ROLE and COM_CHANGE_USER.
    pub(super) async fn privileges(&mut self) -> Result<Privileges, BackendError> {
        let rows = self.query_on_session("SHOW GRANTS").await;
        let rows = rows?;
        Ok(Privileges::from_grants(rows.iter().filter_map(|r| r.first()?.as_deref())))
    }

    /// PREPARE … FROM @v / EXECUTE IMMEDIATE @v alone: the variable's value, read on a
    /// connection in the session's state, is the statement that would run. The refusal if it
    /// is one sluice must not pass on.
    async fn variable_runs(&mut self, name: &str) -> Result<Option<&'static str>, BackendError> {
        // NULL: the server refuses to prepare it.
        let Some(text) = self.variable_text(name).await? else { return Ok(None) };
        Ok(sql::classify::intercept(&text).map(|i| sql::classify::dynamic_refusal(&i)))
    }

    /// PREPARE … FROM / EXECUTE IMMEDIATE of any other expression: its value, evaluated once by
    /// the session's connection, is the statement that would run. The refusal if it is one
    /// sluice must not pass on, else the statement to send: the client's with that value, as a
    /// literal in the value's own character set, in the expression's place (it cannot change
    /// between the check and the run, and nothing is evaluated twice). The expression's errors
    /// are the server's, as the client's statement would have them.
    async fn expression_runs(
        &mut self,
        head: &[u8],
        expression: &[u8],
        tail: &[u8],
        prepare: bool,
    ) -> Result<(Option<&'static str>, Option<Vec<u8>>), BackendError> {
        // EXECUTE … USING takes an expression under the rules the statement applies to its
        // own (no subquery or stored function), with the same errors.
        let mut set = format!("EXECUTE IMMEDIATE 'SET {DYNAMIC_VALUE} = ?' USING ").into_bytes();
        set.extend_from_slice(expression);
        let set = self.with_session_ids(set);
        let statement = if prepare { "PREPARE..FROM" } else { "EXECUTE IMMEDIATE" };
        let read =
            format!("SELECT CHARSET({DYNAMIC_VALUE}), HEX(CAST({DYNAMIC_VALUE} AS BINARY)), HEX(CONVERT({DYNAMIC_VALUE} USING utf8mb4))");
        // One connection for the three: the variable lives in its server session.
        let mut held = self.acquire(self.unrouted_hostgroup(), 1, Needs::default()).await?;
        let rows = match self.interruptible(&mut held.backend, &set).await {
            Err(e) => Err(named_as(e, statement)),
            Ok(_) => {
                let rows = self.interruptible(&mut held.backend, read.as_bytes()).await;
                // Unset at once: the variable is sluice's, not the client's.
                let unset = self.interruptible(&mut held.backend, format!("SET {DYNAMIC_VALUE} = NULL").as_bytes()).await;
                rows.and_then(|rows| unset.map(|_| rows))
            }
        };
        if let Err(e) = &rows {
            held.backend.note_failure(e);
        }
        self.settle(held);
        let row = rows?.into_iter().next().unwrap_or_default();
        let value = match row.as_slice() {
            [Some(charset), Some(bytes), Some(utf8)] if charset.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') => {
                let Some(text) = decode_hex(utf8.as_bytes()) else { return Ok((Some(refusal::DYNAMIC_UNSEEN), None)) };
                if let Some(i) = sql::classify::intercept(&text) {
                    return Ok((Some(sql::classify::dynamic_refusal(&i)), None));
                }
                // CONNECTION_ID() in the text it runs is the session's id, as in a statement.
                match crate::plan::rewrite_connection_id(&text, self.id, !self.pseudo_thread_id_set(), false) {
                    Some(with_id) => format!("_utf8mb4 X'{}'", crate::pool::state::hex(&with_id)),
                    None => format!("_{charset} X'{bytes}'"),
                }
            }
            // NULL: the server refuses to run it, as it refuses the expression.
            _ => "NULL".into(),
        };
        let sql = [head, value.as_bytes(), tail].concat();
        let sql = self.with_session_ids(sql);
        if sql.len() >= proto::frame::MAX_CHUNK {
            return Ok((Some(refusal::DYNAMIC_UNSEEN), None));
        }
        Ok((None, Some(sql)))
    }

    /// The value of a KILL's id expression, evaluated by the session's connection,
    /// CONNECTION_ID() meaning the session, and converted as the server converts a KILL id.
    /// The expression runs as the server would run it in the KILL: as an EXECUTE … USING
    /// parameter, which the server refuses as it refuses KILL's (a subquery or a stored
    /// function, before anything is evaluated); its errors are the server's, named as the
    /// KILL's.
    async fn evaluate_kill_id(&mut self, statement: &str, expression: &str) -> Result<u64, BackendError> {
        self.check_kill_syntax(statement).await?;
        let sql = self.with_session_ids(format!("EXECUTE IMMEDIATE 'SELECT ?' USING {expression}").into_bytes());
        let rows = self.query_on_session(&sql).await.map_err(|e| named_as(e, "KILL"))?;
        Ok(rows.first().and_then(|r| r.first().cloned().flatten()).map_or(0, |v| thread_id_from_text(v.as_bytes())))
    }

    /// The server's syntax check of a KILL, without running it: prepared on the session's
    /// connection (a prepare evaluates nothing) and closed. `EXECUTE … USING` takes a list
    /// where KILL takes one expression, so `KILL 1, 2` must get the server's 1064 here.
    async fn check_kill_syntax(&mut self, sql: &str) -> Result<(), BackendError> {
        let mut held = self.acquire(self.unrouted_hostgroup(), 1, Needs::default()).await?;
        let mut reply = Vec::new();
        let checked = match held.backend.prepare_for_client(sql.as_bytes(), &mut reply).await {
            Ok(ok) => held.backend.close_statements(&[ok.id]).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &checked {
            held.backend.note_failure(e);
        }
        self.settle(held);
        checked
    }

    /// A user variable's value as text (its bytes, whatever its character set), from the
    /// session's connection; `None` for NULL (or a variable never set).
    async fn variable_text(&mut self, name: &str) -> Result<Option<Vec<u8>>, BackendError> {
        let sql = format!("SELECT HEX(CONVERT(@`{}` USING utf8mb4))", name.replace('`', "``"));
        let rows = self.query_on_session(&sql).await;
        let hex = rows?.into_iter().next().and_then(|r| r.into_iter().next().flatten());
        Ok(hex.and_then(|h| decode_hex(h.as_bytes())))
    }

    /// An OK carrying an affected-row count, with the session's status flags.
    async fn reply_ok_rows(&mut self, mut seq: u8, rows: u64) -> bool {
        use proto::StatusFlags as S;
        let session_flags = S::SERVER_STATUS_IN_TRANS
            | S::SERVER_STATUS_AUTOCOMMIT
            | S::SERVER_STATUS_NO_BACKSLASH_ESCAPES
            | S::SERVER_STATUS_IN_TRANS_READONLY;
        let ok = proto::packet::Ok { affected_rows: rows, status: self.status & session_flags.bits(), ..Default::default() };
        self.out.clear();
        proto::packet::write_ok(&mut self.out, &mut seq, proto::packet::OK_HEADER, &ok, b"");
        self.client.write_all(&self.out).await.is_ok()
    }

    /// COM_PROCESS_INFO: SHOW PROCESSLIST by command. False when the session must end.
    pub(super) async fn process_info(&mut self, seq: u8) -> Flow {
        self.handle.begin(b"SHOW PROCESSLIST", &self.state, self.unrouted_hostgroup());
        self.processlist(false, "Processlist", false, seq).await
    }

    /// SHOW [FULL] PROCESSLIST from sluice's sessions: Id is the session id KILL takes, Host
    /// the client's address, Info the statement it runs. The column definitions are the
    /// server's own (asked with the same statement on the session's connection), and so are
    /// State and Progress of statements running on that server. Without PROCESS, only the
    /// user's own sessions are listed, as the server does.
    /// `own_command`: the Command the session's own row shows (the server's name for how it
    /// was asked: "Query" for the statement, "Processlist" for COM_PROCESS_INFO, "Execute"
    /// for a prepared one). `binary`: rows in the binary protocol (the reply to an execute).
    pub(super) async fn processlist(&mut self, full: bool, own_command: &'static str, binary: bool, seq: u8) -> Flow {
        let answered = self.answer_processlist(full, own_command, binary, seq).await;
        self.handle.end();
        match answered {
            Ok(written) => Flow::written(written),
            Err(e) => self.reply_backend_error(seq, &e).await,
        }
    }

    async fn answer_processlist(&mut self, full: bool, own_command: &'static str, binary: bool, seq: u8) -> Result<bool, BackendError> {
        let privileges = self.privileges().await?;
        let sql: &[u8] = if full { b"SHOW FULL PROCESSLIST" } else { b"SHOW PROCESSLIST" };
        let run = self.run_for_client(self.unrouted_hostgroup(), 1, binary, |_| sql.to_vec()).await?;
        let (server, pool_id, deprecate_eof, types) = (run.result, run.pool, run.deprecate_eof, run.types);
        let names: Vec<&[u8]> = server.columns.iter().map(|c| proto::resultset::column_name(c).unwrap_or_default()).collect();
        let column = |name: &str| names.iter().position(|n| n.eq_ignore_ascii_case(name.as_bytes()));
        let (id_col, state_col, progress_col, info_col) = (column("Id"), column("State"), column("Progress"), column("Info"));
        // State and Progress of the threads this server showed, by thread id.
        let server_row = |thread: u32| {
            server.rows.iter().find(|r| id_col.and_then(|i| r.get(i)?.as_deref()).is_some_and(|id| id == thread.to_string().as_bytes()))
        };
        let rows: Vec<Vec<Option<Vec<u8>>>> = self
            .visible_sessions(privileges, own_command, full)
            .into_iter()
            .map(|session| {
                let on_this_server = session.running_on.filter(|&(pool, _)| pool == pool_id).and_then(|(_, thread)| server_row(thread));
                let from_server = |col: Option<usize>| on_this_server.and_then(|r| r.get(col?).cloned().flatten());
                names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| match name.to_ascii_lowercase().as_slice() {
                        b"id" => Some(session.id.to_string().into_bytes()),
                        b"user" => Some(session.user.as_bytes().to_vec()),
                        b"host" => Some(session.host.clone().into_bytes()),
                        b"db" => session.db.as_deref().map(|s| s.as_bytes().to_vec()),
                        b"command" => Some(session.command.as_bytes().to_vec()),
                        b"time" => Some(session.time.to_string().into_bytes()),
                        b"state" => Some(from_server(state_col).unwrap_or_default()),
                        // Another session's running statement as the server shows it (the
                        // statement a CALL is running, no trailing `;`).
                        b"info" if session.id != self.id => from_server(info_col).or_else(|| session.info.clone()),
                        b"info" => session.info.clone(),
                        b"progress" => Some(from_server(progress_col).unwrap_or_else(|| b"0.000".to_vec())),
                        // A column sluice does not know: as the server showed it for that thread.
                        _ => from_server(Some(i)),
                    })
                    .collect()
            })
            .collect();
        let shape = ResultShape { deprecate_eof, binary, types: &types };
        Ok(self.send_result(&server.columns, &rows, server.status, &shape, seq).await)
    }

    /// Writes a result set sluice built: the server's column definitions, `rows` as text or
    /// binary rows, the terminator the client negotiated. Whether the client took it.
    pub(super) async fn send_result(
        &mut self,
        columns: &[Vec<u8>],
        rows: &[Vec<Option<Vec<u8>>>],
        status: u16,
        shape: &ResultShape<'_>,
        mut seq: u8,
    ) -> bool {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let b = proto::frame::PacketBuilder::begin(&mut out);
        proto::codec::write_lenenc(&mut out, columns.len() as u64);
        b.finish(&mut out, &mut seq);
        for c in columns {
            proto::frame::write_packet(&mut out, &mut seq, c);
        }
        if !shape.deprecate_eof {
            proto::packet::write_eof(&mut out, &mut seq, 0, status);
        }
        for row in rows {
            let values = row.iter().map(|v| v.as_deref());
            if shape.binary {
                proto::resultset::write_binary_row_from_text(&mut out, &mut seq, shape.types, values);
            } else {
                proto::resultset::write_text_row(&mut out, &mut seq, values);
            }
        }
        if shape.deprecate_eof {
            let ok = proto::packet::Ok { status, ..Default::default() };
            proto::packet::write_ok(&mut out, &mut seq, proto::packet::EOF_HEADER, &ok, b"");
        } else {
            proto::packet::write_eof(&mut out, &mut seq, 0, status);
        }
        let written = self.client.write_all(&out).await.is_ok();
        self.out = out;
        written
    }
}

/// How `send_result` writes a result set: the terminator the client negotiated
/// (CLIENT_DEPRECATE_EOF), and binary rows of these column types (the reply to an execute).
pub(super) struct ResultShape<'a> {
    pub deprecate_eof: bool,
    pub binary: bool,
    pub types: &'a [u8],
}

/// One of sluice's sessions as SHOW PROCESSLIST and INFORMATION_SCHEMA.PROCESSLIST show it.
pub(super) struct SessionRow {
    pub id: u32,
    pub user: Arc<str>,
    /// `localhost:port` for a loopback client, as the server names it, else `address:port`.
    pub host: String,
    pub db: Option<String>,
    pub command: &'static str,
    /// Seconds in the current statement, or idle.
    pub time: u64,
    /// The statement running (`full`: whole, else its first 100 characters).
    pub info: Option<Vec<u8>>,
    /// The server pool and thread id its statement runs on, while one runs.
    pub running_on: Option<(u32, u32)>,
}

impl Session {
    /// The sessions this session may see (all with PROCESS, else its user's), itself
    /// included. `own_command`: the Command its own row shows.
    pub(super) fn visible_sessions(&self, privileges: Privileges, own_command: &'static str, full: bool) -> Vec<SessionRow> {
        let me = self.user.name.clone();
        let mut rows = Vec::new();
        for h in self.data.registry.sessions() {
            let user = h.user();
            if !privileges.process && *user != *me {
                continue;
            }
            let a = h.activity();
            let running = a.started.is_some();
            let since = a.started.or(a.idle_since);
            let db = if h.id == self.id { self.state.schema.clone() } else { a.state.as_ref().and_then(|s| s.schema.clone()) };
            let host = match h.peer.ip() {
                ip if ip.is_loopback() => format!("localhost:{}", h.peer.port()),
                ip => format!("{ip}:{}", h.peer.port()),
            };
            let info = running.then(|| {
                let text = a.info_text();
                let mut end = if full { text.len() } else { text.len().min(100) };
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.as_bytes()[..end].to_vec()
            });
            let command = if h.id == self.id {
                own_command
            } else if h.is_killed() {
                "Killed"
            } else if running {
                "Query"
            } else {
                "Sleep"
            };
            rows.push(SessionRow {
                id: h.id,
                user,
                host,
                db: db.map(|d| d.to_string()),
                command,
                time: since.map_or(0, |t| t.elapsed().as_secs()),
                info,
                running_on: h.backend().filter(|_| running),
            });
        }
        rows
    }
}

/// What `Session::run_for_client` brought back: the result, the server pool it came from, and
/// how the client takes it (its terminator, and the column types for binary rows).
pub(super) struct ClientResult {
    pub result: RawResult,
    pub pool: u32,
    pub deprecate_eof: bool,
    pub types: Vec<u8>,
}

impl Session {
    /// Runs a statement whose result sluice edits before the client gets it (SHOW PROCESSLIST,
    /// SHOW STATUS, INFORMATION_SCHEMA.PROCESSLIST) on a connection of `hostgroup`; `sql`
    /// builds its text for that connection. The session follows its status flags. `binary`:
    /// the column types are wanted, for rows in the binary protocol.
    pub(super) async fn run_for_client(
        &mut self,
        hostgroup: u32,
        retries: u32,
        binary: bool,
        sql: impl FnOnce(&Backend) -> Vec<u8>,
    ) -> Result<ClientResult, BackendError> {
        let mut held = self.acquire(hostgroup, retries, Needs::default()).await?;
        let text = sql(&held.backend);
        let server = read_raw_result(&mut held.backend, &text).await;
        if let Err(e) = &server {
            held.backend.note_failure(e);
        }
        let (pool, deprecate_eof) = (held.backend.server.pool.id, held.backend.deprecate_eof());
        let types: Vec<u8> = match &server {
            Ok(r) if binary => r.columns.iter().map(|c| held.backend.column_type(c).unwrap_or(proto::resultset::TYPE_VAR_STRING)).collect(),
            _ => Vec::new(),
        };
        self.settle(held);
        let result = server?;
        self.status = result.status;
        Ok(ClientResult { result, pool, deprecate_eof, types })
    }
}

/// A text result set as the server sent it: column definition packets untouched, rows as
/// values (NULL as `None`).
pub(super) struct RawResult {
    pub columns: Vec<Vec<u8>>,
    pub rows: Vec<Vec<Option<Vec<u8>>>>,
    pub status: u16,
}

/// Runs one of sluice's own statements that returns one result set, keeping the server's
/// column definitions as they are (they are in the format the client negotiated: its backend
/// connections repeat its capabilities).
pub(super) async fn read_raw_result(backend: &mut Backend, sql: &[u8]) -> Result<RawResult, BackendError> {
    let server = backend.server.name.to_string();
    let lost = |e: std::io::Error| BackendError::Lost { server: server.clone(), source: e };
    let protocol = |what: &str| BackendError::Protocol { server: server.clone(), what: what.into() };
    let mut out = Vec::with_capacity(sql.len() + 5);
    proto::frame::write_command(&mut out, 0, proto::command::COM_QUERY, sql);
    backend.conn.write_all(&out).await.map_err(lost)?;
    let max = 1 << 30;
    let (_, first) = backend.conn.read_packet(max).await.map_err(lost)?;
    match first.first() {
        Some(0xFF) => {
            let e = proto::packet::parse_err(&first).map_err(|_| protocol("malformed error packet"))?;
            return Err(BackendError::Rejected { server: server.clone(), code: e.code, sqlstate: e.sqlstate, message: e.message.into() });
        }
        Some(0x00) | None => return Err(protocol("no result set")),
        _ => {}
    }
    let (count, _) = proto::codec::read_lenenc(&first).ok_or_else(|| protocol("bad column count"))?;
    let mut columns = Vec::new();
    for _ in 0..count {
        columns.push(backend.conn.read_packet(max).await.map_err(lost)?.1);
    }
    if !backend.deprecate_eof() {
        backend.conn.read_packet(max).await.map_err(lost)?;
    }
    let mut rows = Vec::new();
    loop {
        let (_, r) = backend.conn.read_packet(max).await.map_err(lost)?;
        if r.first() == Some(&0xFE) && r.len() < proto::frame::MAX_CHUNK {
            let status = proto::packet::terminator_status(&r, backend.deprecate_eof()).map_err(|_| protocol("bad EOF"))?;
            backend.status = status;
            return Ok(RawResult { columns, rows, status });
        }
        if r.first() == Some(&0xFF) {
            return Err(protocol("error inside a result set"));
        }
        let mut row = Vec::with_capacity(columns.len());
        let mut rest = &r[..];
        for _ in 0..columns.len() {
            if rest.first() == Some(&proto::resultset::NULL_VALUE) {
                row.push(None);
                rest = &rest[1..];
            } else {
                let (v, n) = proto::codec::read_lenenc_str(rest).ok_or_else(|| protocol("bad row"))?;
                row.push(Some(v.to_vec()));
                rest = &rest[n..];
            }
        }
        rows.push(row);
    }
}

/// Kills the statement running on `thread` of `server` with the session's own `login`, from a
/// short-lived side connection; the session awaits it before its connection serves anyone
/// else. With a query id, only that statement (`KILL QUERY ID`).
///
/// A login may always kill its own threads, but it may be unable to open that side connection
/// (its max_user_connections, the server's max_connections, a credential sluice cannot replay):
/// then the `[monitor]` login, when there is one, tries (it needs CONNECTION ADMIN or SUPER).
pub(super) fn kill_query(
    server: &Server,
    thread: u32,
    login: &Arc<Login>,
    monitor: Option<&MonitorSection>,
    request: impl Into<KillQuery>,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    let request = request.into();
    let modifier = kill_modifier(request.hard);
    let sql = match request.query_id {
        0 => format!("KILL {modifier}QUERY {thread}"),
        id => format!("KILL {modifier}QUERY ID {id}"),
    };
    kill_on(server, login, monitor, sql, timeout)
}

/// Ends backend connection `thread` of `server` (its statement with it), as `kill_query` does
/// a statement: for a session killed by KILL CONNECTION while its statement runs. A KILL QUERY
/// would not do: the server can lose one that lands while a stored program moves from one
/// statement to the next (`LOOP DO 1; END LOOP` runs on), never a KILL CONNECTION.
pub(super) fn kill_connection(
    server: &Server,
    thread: u32,
    login: &Arc<Login>,
    monitor: Option<&MonitorSection>,
    hard: Option<bool>,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    let sql = format!("KILL {}CONNECTION {thread}", kill_modifier(hard));
    kill_on(server, login, monitor, sql, timeout)
}

fn kill_modifier(hard: Option<bool>) -> &'static str {
    match hard {
        Some(true) => "HARD ",
        Some(false) => "SOFT ",
        None => "",
    }
}

/// Runs a KILL statement on `server` from a side connection of `login`, else of the monitor.
fn kill_on(
    server: &Server,
    login: &Arc<Login>,
    monitor: Option<&MonitorSection>,
    sql: String,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    let (server, login) = (server.clone(), login.clone());
    let monitor = monitor.filter(|m| !m.username.is_empty()).map(monitor_login);
    tokio::spawn(async move {
        let Err(e) = rows_on(&server, &login, &sql, timeout).await else { return };
        match monitor {
            Some(monitor) => match rows_on(&server, &monitor, &sql, timeout).await {
                Ok(_) => tracing::debug!("{sql} on {} as {} failed ({e}); the [monitor] login did it", server.name, login.username),
                Err(e2) => tracing::warn!("{sql} on {} failed as {} ({e}) and as the [monitor] login ({e2})", server.name, login.username),
            },
            None => tracing::warn!("{sql} on {} failed: {e}", server.name),
        }
    })
}

/// The `[monitor]` credentials as a login for `rows_on`.
pub(super) fn monitor_login(m: &MonitorSection) -> Login {
    let credential = Credential::from_password(&m.password);
    Login {
        username: m.username.clone(),
        credential,
        capabilities: proto::CapabilityFlags::empty(),
        mariadb_caps: 0,
        collation: 45,
        attrs: Vec::new(),
    }
}

/// Runs one statement on `server` over a short-lived connection with `login`; its rows.
pub(super) async fn rows_on(
    server: &Server,
    login: &Login,
    sql: &str,
    timeout: Duration,
) -> Result<Vec<Vec<Option<String>>>, BackendError> {
    let params = pool::ConnectParams::internal(server, &login.username, &login.credential, timeout);
    let mut conn = pool::connect(&params).await?;
    let r = conn.query(sql).await;
    conn.quit().await;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_ids_from_text_convert_as_the_server_converts_them() {
        assert_eq!(thread_id_from_text(b" 42 "), 42);
        assert_eq!(thread_id_from_text(b"-1"), u64::MAX);
        assert_eq!(thread_id_from_text(b"99.7"), 100);
        assert_eq!(thread_id_from_text(b"abc"), 0);
        assert_eq!(thread_id_from_text(b"\xff"), 0);
    }

    #[test]
    fn privileges_from_show_grants() {
        let p = |lines: &[&str]| Privileges::from_grants(lines.iter().copied());
        assert_eq!(
            p(&["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"]),
            Privileges { kill_others: true, process: true }
        );
        assert_eq!(p(&["GRANT USAGE ON *.* TO `pb`@`%`", "GRANT SELECT ON `test`.* TO `pb`@`%`"]), Privileges::default());
        assert_eq!(
            p(&["GRANT `r` TO `pb`@`%`", "GRANT SELECT, PROCESS ON *.* TO `r`", "GRANT PROCESS ON `x`.* TO `pb`@`%`"]),
            Privileges { kill_others: false, process: true }
        );
        assert_eq!(p(&["GRANT RELOAD, CONNECTION ADMIN ON *.* TO `a`@`%`"]), Privileges { kill_others: true, process: false });
        assert_eq!(p(&["GRANT SUPER ON *.* TO `a`@`%` IDENTIFIED BY PASSWORD '*AB'"]), Privileges { kill_others: true, process: false });
    }

    #[test]
    fn hex_decodes() {
        assert_eq!(decode_hex(b"4B494C4C"), Some(b"KILL".to_vec()));
        assert_eq!(decode_hex(b"4"), None);
        assert_eq!(decode_hex(b"ZZ"), None);
    }
}
