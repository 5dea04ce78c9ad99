//! ② session ↔ ⑤ pool: which backend connection serves a statement, bringing it in line with
//! the session's state, and whether the session keeps it afterwards (pinned) or hands it back.
//!
//! What is pinned is decided from the server's own signals first (status flags: transaction;
//! SERVER_SESSION_STATE_CHANGED where the client tracks session state) and from the statement
//! text for what the server does not report (`sql::effects`). Settings that can be replayed —
//! schema, character set, session variables, user variables — never pin: they are read back
//! after the statement that changed them and replayed, differences only, on the next connection.

use super::Session;
use crate::exec::Outcome;
use crate::pool::{self, state, Backend, BackendError};
use proto::errors::ER_ACCESS_DENIED_ERROR;
use proto::StatusFlags;
use sql::effects::{self, Effects};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

/// The server's refusals of a login whose account changed: expired password, locked.
const ER_MUST_CHANGE_PASSWORD_LOGIN: u16 = 1862;
const ER_ACCOUNT_HAS_BEEN_LOCKED: u16 = 4151;

/// A backend connection the session is using or keeps, and why it keeps it.
pub(super) struct Held {
    /// Boxed: it moves from the pool through the acquire steps and back on every statement.
    pub backend: Box<Backend>,
    pub pins: Pins,
    /// The session kept it after its last statement (its pin was counted then).
    kept: bool,
}

/// Facts about a connection's server-side session that tie the client to it.
#[derive(Debug, Default, Clone)]
pub(super) struct Pins {
    pub transaction: bool,
    pub temp_tables: bool,
    pub table_locks: bool,
    pub named_locks: i32,
    pub xa: bool,
    pub handler: bool,
    /// SET TRANSACTION (no scope): holds until a transaction has begun and ended.
    pub next_transaction: bool,
    /// A SAVEPOINT under autocommit=0: the server keeps it though its status flags may not
    /// show a transaction yet (none before a transactional table is touched). Holds until
    /// COMMIT, ROLLBACK or autocommit=1.
    pub savepoints: bool,
    next_transaction_started: bool,
    /// Text-protocol prepared statements (PREPARE … FROM), by name.
    pub text_prepared: Vec<Box<str>>,
    /// A prepared statement has an open cursor or long data waiting.
    pub statement: bool,
    /// The next statement must run here too: SQL_CALC_FOUND_ROWS or a one-shot variable, or
    /// warnings or an error (SHOW WARNINGS, GET DIAGNOSTICS read them from this connection).
    pub next_statement: bool,
    /// State changed in a way sluice cannot follow (SET ROLE, an unparsed SET, a change the
    /// server reported that the text does not explain): kept for the session's life.
    pub untracked: bool,
    /// A query rule with multiplex = 0 matched.
    pub rule: bool,
}

/// Why a session keeps a connection (counted per worker; stats read them later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinReason {
    Transaction,
    TempTable,
    TableLock,
    NamedLock,
    Xa,
    Handler,
    NextTransaction,
    Savepoint,
    TextPrepare,
    Statement,
    NextStatement,
    Untracked,
    Rule,
    MultiplexingOff,
}

pub const PIN_REASONS: usize = 14;

impl PinReason {
    pub const ALL: [PinReason; PIN_REASONS] = [
        PinReason::Transaction,
        PinReason::TempTable,
        PinReason::TableLock,
        PinReason::NamedLock,
        PinReason::Xa,
        PinReason::Handler,
        PinReason::NextTransaction,
        PinReason::Savepoint,
        PinReason::TextPrepare,
        PinReason::Statement,
        PinReason::NextStatement,
        PinReason::Untracked,
        PinReason::Rule,
        PinReason::MultiplexingOff,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PinReason::Transaction => "transaction",
            PinReason::TempTable => "temporary_table",
            PinReason::TableLock => "lock_tables",
            PinReason::NamedLock => "get_lock",
            PinReason::Xa => "xa",
            PinReason::Handler => "handler",
            PinReason::NextTransaction => "set_transaction",
            PinReason::Savepoint => "savepoint",
            PinReason::TextPrepare => "text_prepare",
            PinReason::Statement => "prepared_cursor_or_long_data",
            PinReason::NextStatement => "found_rows_one_shot_or_diagnostics",
            PinReason::Untracked => "untracked_state",
            PinReason::Rule => "query_rule",
            PinReason::MultiplexingOff => "multiplexing_off",
        }
    }
}

impl Pins {
    /// The first reason the connection must stay with the session, if any.
    pub fn reason(&self) -> Option<PinReason> {
        let reasons = [
            (self.transaction, PinReason::Transaction),
            (self.temp_tables, PinReason::TempTable),
            (self.table_locks, PinReason::TableLock),
            (self.named_locks > 0, PinReason::NamedLock),
            (self.xa, PinReason::Xa),
            (self.handler, PinReason::Handler),
            (self.next_transaction, PinReason::NextTransaction),
            (self.savepoints, PinReason::Savepoint),
            (!self.text_prepared.is_empty(), PinReason::TextPrepare),
            (self.statement, PinReason::Statement),
            (self.next_statement, PinReason::NextStatement),
            (self.untracked, PinReason::Untracked),
            (self.rule, PinReason::Rule),
        ];
        reasons.into_iter().find(|(on, _)| *on).map(|(_, r)| r)
    }

    /// The connection holds the session's transaction and nothing else of it.
    pub fn only_transaction(&self) -> bool {
        Pins { transaction: false, ..self.clone() }.reason().is_none()
    }

    /// State that dies with the connection's server session (what a reset must clear).
    fn server_state(&self) -> bool {
        self.temp_tables || self.table_locks || self.named_locks > 0 || self.xa || self.handler || !self.text_prepared.is_empty()
    }

    /// Learns from a statement that completed without error, with `status` its reply's flags.
    fn follow(&mut self, e: &Effects, status: u16) {
        self.next_statement = e.flags & (effects::CALC_FOUND_ROWS | effects::ONE_SHOT) != 0;
        if e.flags == 0 && e.named_locks == 0 && e.prepared.is_empty() && e.deallocated.is_empty() {
            return;
        }
        if e.flags & effects::TRANSACTION_END != 0 {
            self.savepoints = false;
        }
        // After a transaction end in the same text (`COMMIT; SAVEPOINT s`) the savepoint stands.
        if e.flags & effects::SAVEPOINT != 0 && keeps_savepoints(status) {
            self.savepoints = true;
        }
        self.temp_tables |= e.flags & effects::TEMP_TABLE != 0;
        if e.flags & effects::LOCK_TABLES != 0 {
            self.table_locks = true;
        }
        if e.flags & effects::UNLOCK_TABLES != 0 {
            self.table_locks = false;
        }
        self.named_locks = if e.flags & effects::RELEASE_ALL_LOCKS != 0 { 0 } else { (self.named_locks + e.named_locks).max(0) };
        if e.flags & effects::XA_BEGIN != 0 {
            self.xa = true;
        }
        if e.flags & effects::XA_END != 0 {
            self.xa = false;
        }
        self.handler |= e.flags & effects::HANDLER_OPEN != 0;
        if e.flags & effects::NEXT_TRANSACTION != 0 {
            self.next_transaction = true;
            self.next_transaction_started = false;
        }
        self.untracked |= e.flags & (effects::SET_ROLE | effects::UNKNOWN_SET) != 0;
        for name in &e.deallocated {
            self.text_prepared.retain(|n| n != name);
        }
        for name in &e.prepared {
            if !self.text_prepared.contains(name) {
                self.text_prepared.push(name.clone());
            }
        }
    }

    /// Learns the transaction state from the status flags of a complete reply.
    pub fn follow_status(&mut self, status: u16) {
        let in_trans = status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0;
        if !keeps_savepoints(status) {
            self.savepoints = false;
        }
        if self.next_transaction {
            if in_trans {
                self.next_transaction_started = true;
            } else if self.next_transaction_started {
                self.next_transaction = false;
            }
        }
        self.transaction = in_trans;
    }
}

/// Variables that make the server record the session's statements (SHOW PROFILES): while they
/// are set, every statement sluice ran on the connection would show.
const OBSERVES_STATEMENTS: [&str; 2] = ["profiling", "profiling_history_size"];

/// Whether a session with these status flags can hold savepoints: in a transaction, or with
/// autocommit off (autocommit=1 outside a transaction keeps none).
fn keeps_savepoints(status: u16) -> bool {
    status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0 || status & StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits() == 0
}

/// Pins counted by reason, per worker thread (single writer; summed when read).
pub mod pin_counts {
    use super::{AtomicU64, Ordering, PinReason, PIN_REASONS};
    use std::sync::{Arc, Mutex};

    type Counters = Arc<[AtomicU64; PIN_REASONS]>;
    static ALL: Mutex<Vec<Counters>> = Mutex::new(Vec::new());

    thread_local! {
        static LOCAL: Counters = {
            let c: Counters = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
            if let Ok(mut all) = ALL.lock() {
                all.push(c.clone());
            }
            c
        };
    }

    pub fn count(reason: PinReason) {
        LOCAL.with(|c| {
            let c = &c[reason as usize];
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
    }

    /// (reason, count) over every worker, for the stats tables.
    pub fn by_reason() -> Vec<(&'static str, u64)> {
        PinReason::ALL.iter().map(|r| r.name()).zip(totals()).collect()
    }

    /// Totals by reason over every worker.
    fn totals() -> [u64; PIN_REASONS] {
        let mut t = [0; PIN_REASONS];
        if let Ok(all) = ALL.lock() {
            for c in all.iter() {
                for (i, v) in c.iter().enumerate() {
                    t[i] += v.load(Ordering::Relaxed);
                }
            }
        }
        t
    }
}

/// What an acquired connection needs before the statement: whether it may be the one whose
/// LAST_INSERT_ID() the statement reads.
#[derive(Default, Clone, Copy)]
pub(super) struct Needs {
    pub last_insert_id: bool,
}

impl Session {
    fn pool_request<'a>(&'a self) -> pool::Request<'a> {
        pool::Request {
            login: &self.login,
            state: &self.state,
            settings: &self.snap.config.pool,
            connect_timeout: self.snap.config.connect_timeout(),
            any_shard: self.data.runtime == crate::config::RuntimeKind::Steal,
            since: self.generation.epoch,
            stats: &self.data.stats,
        }
    }

    /// The hostgroup of a connection the session keeps for state it holds there.
    pub(super) fn kept_hostgroup(&self) -> Option<u32> {
        self.held.iter().find(|h| h.pins.reason().is_some()).map(|h| h.backend.server.hostgroup)
    }

    /// The connection for a statement to `hostgroup`: the one an open transaction holds (it
    /// serves every statement, as ProxySQL's transaction_persistent), else the one the session
    /// keeps for that hostgroup, else one from the pool. Connecting is retried `retries` more
    /// times (nothing was sent yet). The connection is in line with the session's state.
    pub(super) async fn acquire(&mut self, hostgroup: u32, retries: u32, needs: Needs) -> Result<Held, BackendError> {
        let kept = self
            .held
            .iter()
            .position(|h| h.pins.transaction)
            .or_else(|| self.held.iter().position(|h| h.backend.server.hostgroup == hostgroup));
        let mut held = match kept {
            Some(i) => {
                let mut h = self.held.swap_remove(i);
                // Checked as a pooled connection is (no system call per statement in a
                // transaction).
                let check_after = Duration::from_millis(self.snap.config.pool.check_idle_after_ms);
                if !h.backend.still_open(check_after) {
                    // Its server closed it while the session kept it: what lived there is gone,
                    // as on a direct connection, which would have been closed too. Its
                    // transaction too: the session is out of it.
                    if h.pins.transaction {
                        self.status &= !StatusFlags::SERVER_STATUS_IN_TRANS.bits();
                    }
                    let server = h.backend.server.name.to_string();
                    return Err(BackendError::Lost { server, source: std::io::ErrorKind::ConnectionReset.into() });
                }
                h
            }
            None => Held { backend: self.pool_checkout(hostgroup, retries).await?, pins: Pins::default(), kept: false },
        };
        if let Err(e) = self.sync(&mut held.backend, needs).await {
            self.release(held);
            return Err(e);
        }
        self.handle.set_backend(held.backend.server.pool.id, held.backend.thread_id);
        Ok(held)
    }

    /// A connection for `hostgroup` from the pool, never one the session keeps; connecting is
    /// retried `retries` more times.
    async fn pool_checkout(&mut self, hostgroup: u32, retries: u32) -> Result<Box<Backend>, BackendError> {
        let mut attempt = 0;
        let backend = loop {
            match pool::checkout(&self.snap.hostgroups, hostgroup, &self.pool_request()).await {
                Ok(b) => break b,
                Err(BackendError::Rejected {
                    server,
                    code: code @ (ER_ACCESS_DENIED_ERROR | ER_MUST_CHANGE_PASSWORD_LOGIN | ER_ACCOUNT_HAS_BEEN_LOCKED),
                    sqlstate,
                    message,
                }) if self.generation.is_past() => {
                    // The account changed on the server since this session logged in
                    // (a new password, dropped, locked): the connections of its login
                    // go on serving it, but the server refuses that login for a new one.
                    let message = format!(
                        "{message} (sluice: this session needs a new backend connection, and the server no longer \
                         accepts the login it started with, as the account changed; reconnect)"
                    );
                    return Err(BackendError::Rejected { server, code, sqlstate, message: message.as_bytes().into() });
                }
                Err(e @ (BackendError::Rejected { .. } | BackendError::Unavailable(_))) => return Err(e),
                Err(e) if attempt >= retries => return Err(e),
                Err(e) => debug!(id = self.id, hostgroup, "connect failed, retrying: {e}"),
            }
            attempt += 1;
        };
        Ok(backend)
    }

    /// A new connection from the pool for `hostgroup`, in line with the session's state, that
    /// the session does not keep among its own (a branch of a transaction on shards).
    pub(super) async fn checkout_synced(&mut self, hostgroup: u32, retries: u32) -> Result<Held, BackendError> {
        let mut held = Held { backend: self.pool_checkout(hostgroup, retries).await?, pins: Pins::default(), kept: false };
        if let Err(e) = self.sync(&mut held.backend, Needs::default()).await {
            pool::checkin(held.backend, &self.snap.config.pool);
            return Err(e);
        }
        Ok(held)
    }

    /// Brings `b` in line with the session: a reset if a gone client left state on it, then
    /// the schema and the differing variables in one pipelined round trip.
    async fn sync(&mut self, b: &mut Backend, needs: Needs) -> Result<(), BackendError> {
        if b.needs_reset || self.state.needs_login_charset(&b.state) {
            if let Err(e) = reset(b).await {
                b.note_failure(&e);
                return Err(e);
            }
        }
        let last_insert_id = (needs.last_insert_id && b.last_insert_id != self.last_insert_id).then_some(self.last_insert_id);
        if Arc::ptr_eq(&b.state, &self.state) && last_insert_id.is_none() {
            return Ok(());
        }
        let want = &*self.state;
        let init_db = want.schema.as_deref().filter(|db| b.state.schema.as_deref() != Some(*db));
        let set = want.set_statement(&b.state, last_insert_id);
        if init_db.is_some() || set.is_some() {
            debug!(id = self.id, thread = b.thread_id, schema = ?init_db, set = ?set, "bringing a pooled connection in line");
            if let Err(e) = b.run_batch(init_db, set.as_deref()).await {
                // Part of the batch may have applied: the connection's state is unknown now.
                b.needs_reset = true;
                b.note_failure(&e);
                return Err(e);
            }
        }
        b.state = self.state.clone();
        if let Some(id) = last_insert_id {
            b.last_insert_id = id;
        }
        Ok(())
    }

    /// Learns what a completed statement did to the session (pins, state, LAST_INSERT_ID),
    /// reading back changed variables when it set any. False when the read-back failed, so the
    /// connection is kept (pinned) rather than replayed wrongly.
    pub(super) async fn after_statement(&mut self, held: &mut Held, e: &Effects, outcome: &Outcome, use_db: Option<String>) {
        if e.flags & (effects::ACCOUNTS | effects::GLOBALS) != 0 {
            // Pooled connections logged in with the old account, privileges or global defaults:
            // none is reused. Even after an error, as part of a multi-statement text may have
            // applied.
            debug!(id = self.id, "accounts, privileges or globals changed: pooled connections are renewed");
            held.backend.server.pool.renew_connections();
            // This session keeps its own server session, as it would on the server: its login
            // privileges and session values, and a login that may no longer work (its own
            // password changed).
            held.pins.untracked = true;
        }
        held.pins.follow_status(outcome.status);
        if outcome.error {
            held.pins.next_statement = true;
            return;
        }
        if outcome.last_insert_id != 0 {
            self.last_insert_id = outcome.last_insert_id;
            held.backend.last_insert_id = outcome.last_insert_id;
        }
        held.pins.follow(e, outcome.status);
        held.pins.next_statement |= outcome.warnings > 0;
        // After DROP DATABASE the server may have unset the default database: asked too.
        let read_db = e.flags & (effects::USE_SCHEMA | effects::DROP_SCHEMA) != 0 && use_db.is_none();
        if let Some(db) = use_db {
            // `USE db` alone: no need to ask the server where the session is.
            self.set_schema(&mut held.backend, db);
        }
        if !read_db && e.sysvars.is_empty() && e.user_vars.is_empty() {
            let tracks_state = self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_SESSION_TRACK);
            // The server says the session changed, and nothing in the text explains it (a
            // stored procedure setting a variable, say): keep the connection.
            let changed = outcome.status & StatusFlags::SERVER_SESSION_STATE_CHANGED.bits() != 0;
            if changed && tracks_state && e.flags & effects::CHARSET == 0 {
                held.pins.untracked = true;
            }
            return;
        }
        // A read-back is a statement of sluice's own on the client's server session. It uses
        // no table, so MariaDB keeps the warnings SHOW WARNINGS reads (tested), but with
        // profiling on it would show in SHOW PROFILES: then the session keeps the connection
        // instead (as it does already when its state is one sluice cannot follow).
        // Without a read-back after DROP DATABASE, the connection's default database is unknown:
        // the session keeps it, and it is never pooled again.
        let schema_unknown = e.flags & effects::DROP_SCHEMA != 0;
        // After GET DIAGNOSTICS, a read-back would reset the diagnostics area (ROW_COUNT,
        // NUMBER) that the next GET DIAGNOSTICS reads again.
        let diagnostics = e.flags & effects::DIAGNOSTICS != 0;
        if held.pins.untracked || diagnostics || e.sysvars.iter().any(|v| OBSERVES_STATEMENTS.contains(&&**v)) {
            debug!(id = self.id, "keeping the connection: a read-back would show to the client");
            held.pins.untracked = true;
            held.backend.broken |= schema_unknown;
            return;
        }
        if let Err(why) = self.read_back(&mut held.backend, e, read_db).await {
            debug!(id = self.id, "session state read-back failed ({why}); keeping the connection");
            held.pins.untracked = true;
            held.backend.broken |= schema_unknown;
        }
    }

    /// Reads the session's new schema and variable values from the connection that changed
    /// them, and makes them the session's state.
    async fn read_back(&mut self, b: &mut Backend, e: &Effects, use_db: bool) -> Result<(), String> {
        let names: Vec<Box<str>> =
            e.sysvars.iter().filter(|v| v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')).cloned().collect();
        if names.len() != e.sysvars.len() {
            return Err("a variable name sluice cannot read back".into());
        }
        if names.iter().any(|n| &**n == "timestamp") {
            // Its read-back value would freeze the clock if replayed (SET timestamp = DEFAULT).
            return Err("timestamp cannot be replayed".into());
        }
        let mut sql = state::readback_sql(&names, &e.user_vars).unwrap_or_else(|| "SELECT 1".into());
        if use_db {
            sql.push_str(", DATABASE()");
        }
        let (rows, status) = b.query_columns(&sql).await.map_err(|e| {
            b.note_failure(&e);
            e.to_string()
        })?;
        b.status = status;
        let row = rows.first().ok_or("read-back returned no row")?;
        let mut next = (*self.state).clone();
        next.apply_readback(&names, &e.user_vars, row)?;
        if use_db {
            next.schema = row.last().and_then(|c| c.value.as_deref()).map(|v| String::from_utf8_lossy(v).into());
        }
        self.state = Arc::new(next);
        b.state = self.state.clone();
        self.handle.publish_state(&self.state);
        Ok(())
    }

    /// The server accepted `db` as the default database of the session on `b`.
    pub(super) fn set_schema(&mut self, b: &mut Backend, db: String) {
        let mut next = (*self.state).clone();
        next.schema = Some(db.into());
        self.state = Arc::new(next);
        b.state = self.state.clone();
        self.handle.publish_state(&self.state);
    }

    /// After a statement: the session keeps the connection if something pins it (or
    /// multiplexing is off), else it goes back to the pool.
    pub(super) fn settle(&mut self, held: Held) {
        let reason = held.pins.reason().or((!self.snap.config.pool.multiplexing).then_some(PinReason::MultiplexingOff));
        match reason {
            Some(r) => {
                if !held.kept {
                    pin_counts::count(r);
                    debug!(id = self.id, thread = held.backend.thread_id, reason = r.name(), "session pinned to its backend connection");
                }
                let mut held = held;
                held.kept = true;
                // Idle from here until the session's next statement (`acquire` checks it): from
                // the statement's observed end when there was one (earlier, so never less idle).
                held.backend.idle_since = self.ended.get().unwrap_or_else(Instant::now);
                self.held.push(held);
            }
            None => self.release(held),
        }
    }

    /// Hands a connection back to the pool (reset before its next use if it carries server
    /// state the session leaves behind).
    pub(super) fn release(&mut self, mut held: Held) {
        if held.pins.server_state() || held.pins.untracked {
            held.backend.needs_reset = true;
        }
        if self.held.is_empty() {
            self.handle.clear_backend();
        }
        // Idle since the statement's observed end when there was one (as `settle` says).
        let now = self.ended.get().unwrap_or_else(Instant::now);
        pool::checkin_at(held.backend, &self.snap.config.pool, now);
    }

    /// Gives back every kept connection (session end, COM_CHANGE_USER, COM_RESET_CONNECTION):
    /// whatever server state they hold is the old session's (table locks, a transaction,
    /// GET_LOCK locks), which must end now as it would with a direct connection, so each is
    /// reset at once, in the background, and pooled only once the server confirmed the reset.
    pub(super) fn release_all(&mut self) {
        self.abandon_xa();
        for h in std::mem::take(&mut self.held) {
            if h.pins.xa {
                // Closed, not reset: the server keeps an XA transaction the connection
                // prepared (XA RECOVER finds it) and rolls back one it did not, as for a
                // direct client that leaves; after COM_RESET_CONNECTION, MariaDB refuses the
                // connection's next transactional write (1031).
                h.backend.close();
                continue;
            }
            reset_then_checkin(h.backend, self.snap.clone());
        }
        self.handle.clear_backend();
    }
}

/// Resets a connection a session leaves while it holds that session's server state, then
/// pools it; one the reset fails on (or that cannot be reset) is closed, so the server ends
/// that state either way.
fn reset_then_checkin(mut b: Box<Backend>, snap: Arc<crate::datapath::Snapshot>) {
    b.needs_reset = true;
    let runtime = match tokio::runtime::Handle::try_current() {
        Ok(r) if b.pooled && !b.broken => r,
        // Closed by the checkin (broken, not pooled), or reset before its next use.
        _ => return pool::checkin(b, &snap.config.pool),
    };
    runtime.spawn(async move {
        let limit = snap.config.connect_timeout();
        let outcome = tokio::time::timeout(limit, reset(&mut b)).await;
        match outcome {
            Ok(Ok(())) => return pool::checkin(b, &snap.config.pool),
            Ok(Err(e)) => debug!(thread = b.thread_id, "resetting a connection a session left failed ({e}); closing it"),
            Err(_) => debug!(thread = b.thread_id, "resetting a connection a session left timed out; closing it"),
        }
        b.close();
    });
}

/// COM_RESET_CONNECTION (COM_CHANGE_USER with the same login on servers without it): the
/// server session returns to its state right after login, keeping the schema.
async fn reset(b: &mut Backend) -> Result<(), BackendError> {
    b.reset().await?;
    b.needs_reset = false;
    b.state = Arc::new(state::State::new(b.state.schema.as_deref(), b.login.collation as u16));
    b.last_insert_id = 0;
    Ok(())
}

/// The state a session starts in: its login's schema and collation.
pub(super) fn initial_state(schema: Option<&str>, collation: u8) -> Arc<state::State> {
    Arc::new(state::State::new(schema, collation as u16))
}
