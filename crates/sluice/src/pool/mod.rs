//! ⑤ pool: backend connections kept per server, per worker and per backend login, shared by
//! client sessions. A session checks a connection out for a statement (or for as long as it
//! is pinned) and hands it back; `state` brings a connection in line with the session's
//! state first. Capacity is `max_connections` per server across workers; when a hostgroup is
//! full, checkouts wait in a queue up to `checkout_timeout_ms`.
//!
//! Workers: in per-core mode a connection belongs to the runtime that opened it, so a worker
//! takes from its own shard, and borrows another's idle connection only when it cannot open
//! one (it goes back to its own shard after); with the work-stealing runtime any shard will
//! do, the local one first. Each shard has its own short lock, so workers do not contend on
//! the query path.

pub mod backend;
pub mod hostgroups;
pub mod prepared;
pub mod state;

pub use backend::{connect, Backend, BackendError, ConnectParams, Credential, ServerMessage};

use crate::config::{PoolSection, ServerStatus};
use crate::stats::Counter;
pub use hostgroups::{Hostgroups, NoServer, Server};
use proto::CapabilityFlags;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How sluice logs in to a backend for a client: the pool key (username, credential and the
/// capabilities that shape the protocol), plus what a new connection is opened with.
#[derive(Debug)]
pub struct Login {
    pub username: String,
    pub credential: Credential,
    pub capabilities: CapabilityFlags,
    pub mariadb_caps: u32,
    /// The login collation: part of the key, as the server may map an id it does not know
    /// (MySQL 8's 255) to its own default at login, which no SET can name.
    pub collation: u8,
    /// Attributes of the client that first opened a connection for this key.
    pub attrs: Vec<(String, String)>,
}

impl Login {
    /// The client capabilities that shape the protocol or the server's behaviour after login,
    /// and so split the pool; handshake-only bits (TLS, attributes, connect-with-db) do not.
    pub fn key_capabilities(client: CapabilityFlags) -> CapabilityFlags {
        use CapabilityFlags as C;
        let shaping = C::CLIENT_LONG_PASSWORD
            | C::CLIENT_FOUND_ROWS
            | C::CLIENT_LONG_FLAG
            | C::CLIENT_NO_SCHEMA
            | C::CLIENT_ODBC
            | C::CLIENT_LOCAL_FILES
            | C::CLIENT_IGNORE_SPACE
            | C::CLIENT_PROTOCOL_41
            | C::CLIENT_INTERACTIVE
            | C::CLIENT_IGNORE_SIGPIPE
            | C::CLIENT_TRANSACTIONS
            | C::CLIENT_MULTI_STATEMENTS
            | C::CLIENT_MULTI_RESULTS
            | C::CLIENT_PS_MULTI_RESULTS
            | C::CLIENT_SESSION_TRACK
            | C::CLIENT_DEPRECATE_EOF
            // Decides whether the server lets a login with an expired password in (sandbox).
            | C::CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS;
        (client & shaping) | C::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | C::CLIENT_CONNECT_ATTRS | C::CLIENT_PLUGIN_AUTH
    }

    /// True when a connection opened for `self` can serve `other`.
    pub fn same_key(&self, other: &Login) -> bool {
        self.username == other.username
            && self.credential == other.credential
            && self.capabilities == other.capabilities
            && self.mariadb_caps == other.mariadb_caps
            && self.collation == other.collation
    }
}

/// The privilege epoch, shared by every server (`Hostgroups`), and the epochs the open
/// sessions logged in under.
///
/// A statement that changes accounts, privileges or global variables (or the account recheck
/// seeing such a change made on the server) starts a new epoch. A connection opened in an
/// older one logged in with what changed: it never serves a session that logged in later. It
/// goes on serving the sessions that logged in before, as their own connection to the server
/// would go on (the server may refuse their login for a new one now: a new password, a
/// dropped account), and is closed once no open session of its user logged in at or before
/// its epoch.
#[derive(Default)]
pub struct Generations {
    epoch: AtomicU64,
    /// Open sessions per backend user name: how many logged in under each epoch. Locked at
    /// login and logout, and for connections of a past epoch; never for current ones.
    sessions: Mutex<HashMap<String, BTreeMap<u64, u32>>>,
}

impl Generations {
    /// The epoch now.
    pub fn current(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// A new epoch: no connection open now serves a session that logs in from now on.
    pub fn renew(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// A session of backend user `username` logs in now: its generation, until dropped.
    pub fn enter(self: &Arc<Self>, username: &str) -> Generation {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        // Read under the lock: a connection found unused by every session stays unused.
        let epoch = self.current();
        let epochs = match sessions.get_mut(username) {
            Some(epochs) => epochs,
            None => sessions.entry(username.to_string()).or_default(),
        };
        *epochs.entry(epoch).or_insert(0) += 1;
        Generation { generations: self.clone(), username: username.into(), epoch }
    }

    /// Whether an open session of `username` logged in at or before `epoch`: a connection of
    /// that user opened in `epoch` may serve it.
    fn serves_a_session(&self, username: &str, epoch: u64) -> bool {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(username).and_then(|s| s.keys().next()).is_some_and(|&oldest| oldest <= epoch)
    }

    /// Where `b` stands: only a connection of a past epoch takes the lock.
    fn standing(&self, b: &Backend) -> Standing {
        if b.epoch == self.current() {
            Standing::Current
        } else if self.serves_a_session(&b.login.username, b.epoch) {
            Standing::KeptForSessions
        } else {
            Standing::Retired
        }
    }
}

/// A pooled connection's epoch against the open sessions (`Generations::standing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Current,
    /// Of a past epoch, and open sessions of its user logged in at or before it: it stays for
    /// them whatever its idle time and age, as they may not be able to open another.
    KeptForSessions,
    /// Of a past epoch that no open session can use: closed.
    Retired,
}

/// The epoch a session logged in under (`Generations::enter`): only connections opened since
/// serve it. Counted in `Generations` until dropped.
pub struct Generation {
    generations: Arc<Generations>,
    username: Box<str>,
    pub epoch: u64,
}

impl Generation {
    /// A newer epoch began since this session logged in.
    pub fn is_past(&self) -> bool {
        self.epoch != self.generations.current()
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        let mut sessions = self.generations.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(epochs) = sessions.get_mut(&*self.username) {
            if let Some(n) = epochs.get_mut(&self.epoch) {
                *n -= 1;
                if *n == 0 {
                    epochs.remove(&self.epoch);
                }
            }
            if epochs.is_empty() {
                sessions.remove(&*self.username);
            }
        }
    }
}

/// Checkouts waiting for a connection to a hostgroup, woken when one is returned or closed.
#[derive(Default)]
pub struct Waiters {
    count: AtomicUsize,
    notify: Notify,
}

impl Waiters {
    fn wake_one(&self) {
        if self.count.load(Ordering::Acquire) > 0 {
            self.notify.notify_one();
        }
    }
}

/// The monitor's verdict on a server, beside its configured status: runtime state, changed
/// without a reload (`ServerPool::set_health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Failed `ping_max_failures` checks in a row: no new statements until a check succeeds.
    Shunned,
    /// A replica lagging more than its max_replication_lag: out of the read set until it
    /// catches up.
    ShunnedReplicationLag,
}

/// One server's pooled connections, and its live status and limit (kept across reloads).
pub struct ServerPool {
    /// Stable for the server's life in the config, whatever reloads happen (statistics key).
    pub id: u32,
    /// Idle connections per worker, most recently used last.
    shards: Box<[Mutex<Vec<Idle>>]>,
    /// Pooled connections open or being opened: never above `max`.
    slots: AtomicU32,
    max: AtomicU32,
    /// `ServerStatus` as a number: a reload changes it under connections in use.
    status: AtomicU8,
    /// `Health` as a number: the monitor changes it, no reload involved.
    health: AtomicU8,
    pub(crate) waiters: Arc<Waiters>,
    /// Connections opened and failed to open, and the most in use at once (statistics; touched
    /// at connect time only).
    pub connects_ok: std::sync::atomic::AtomicU64,
    pub connects_failed: std::sync::atomic::AtomicU64,
    pub max_used: AtomicU32,
    /// Logins that have used this server, for keeping `min_idle` connections warm.
    logins: Mutex<Vec<Arc<Login>>>,
    /// Privilege epoch, shared by every server (`Hostgroups`).
    generations: Arc<Generations>,
}

/// An idle connection, with the session state it last served named beside it: a checkout's
/// first look (the connection that last served this session) compares these in one pass over
/// the list instead of reaching into every connection for it (a cache miss each, at 64
/// sessions half of that look's time). Exact: the connection holds that state, so no other
/// state can be at its address while the connection is here. Boxed: a connection moves from
/// here through a statement's acquire steps and back on every statement, as a pointer
/// instead of its 400-odd bytes at each step.
struct Idle {
    /// The address of the connection's `state`: compared, never followed.
    served: usize,
    backend: Box<Backend>,
}

impl Idle {
    fn new(backend: Box<Backend>) -> Idle {
        Idle { served: Arc::as_ptr(&backend.state) as usize, backend }
    }
}

impl std::ops::Deref for Idle {
    type Target = Backend;
    fn deref(&self) -> &Backend {
        &self.backend
    }
}

impl std::ops::DerefMut for Idle {
    fn deref_mut(&mut self) -> &mut Backend {
        &mut self.backend
    }
}

/// Whether an idle connection can serve a session of `login` that logged in in epoch
/// `since`: a session can move a connection into its schema (COM_INIT_DB), never out of one,
/// and takes no connection that logged in before it.
fn fits(b: &Backend, login: &Login, has_schema: bool, since: u64) -> bool {
    b.login.same_key(login) && (has_schema || b.state.schema.is_none()) && b.epoch >= since
}

impl ServerPool {
    pub fn new(
        status: ServerStatus,
        max_connections: u32,
        shards: usize,
        waiters: Arc<Waiters>,
        generations: Arc<Generations>,
    ) -> ServerPool {
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        ServerPool {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: (0..shards.max(1)).map(|_| Mutex::new(Vec::new())).collect(),
            slots: AtomicU32::new(0),
            max: AtomicU32::new(max_connections),
            status: AtomicU8::new(status as u8),
            health: AtomicU8::new(Health::Healthy as u8),
            waiters,
            connects_ok: Default::default(),
            connects_failed: Default::default(),
            max_used: AtomicU32::new(0),
            logins: Mutex::new(Vec::new()),
            generations,
        }
    }

    /// The privilege epoch now: connections opened under an older one serve no new session.
    pub fn epoch(&self) -> u64 {
        self.generations.current()
    }

    /// After a statement changed accounts, privileges or global variables: no pooled
    /// connection open now (on any server) serves a session that logs in from now on; each
    /// closes once the sessions that logged in before it are gone (`Generations`).
    pub fn renew_connections(&self) {
        self.generations.renew();
    }

    pub fn status(&self) -> ServerStatus {
        match self.status.load(Ordering::Relaxed) {
            0 => ServerStatus::Online,
            1 => ServerStatus::OfflineSoft,
            _ => ServerStatus::OfflineHard,
        }
    }

    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            0 => Health::Healthy,
            1 => Health::Shunned,
            _ => Health::ShunnedReplicationLag,
        }
    }

    /// ONLINE in the config and healthy: new statements may use it.
    pub fn accepts_new(&self) -> bool {
        self.status() == ServerStatus::Online && self.health() == Health::Healthy
    }

    /// The monitor's new verdict; true when it changed. A shunned server's idle connections
    /// close now, those in use when they come back (pinned sessions finish, as OFFLINE_SOFT);
    /// waiters look again when it is healthy again.
    pub fn set_health(&self, health: Health) -> bool {
        let changed = self.health.swap(health as u8, Ordering::Relaxed) != health as u8;
        if changed && health != Health::Healthy {
            self.close_idle();
        }
        if changed {
            self.waiters.notify.notify_waiters();
        }
        changed
    }

    /// The status the admin port and /metrics show: the configured one, or the monitor's
    /// verdict on an ONLINE server (ProxySQL's names).
    pub fn status_name(&self) -> &'static str {
        match (self.status(), self.health()) {
            (ServerStatus::Online, Health::Healthy) => "ONLINE",
            (ServerStatus::Online, Health::Shunned) => "SHUNNED",
            (ServerStatus::Online, Health::ShunnedReplicationLag) => "SHUNNED_REPLICATION_LAG",
            (ServerStatus::OfflineSoft, _) => "OFFLINE_SOFT",
            (ServerStatus::OfflineHard, _) => "OFFLINE_HARD",
        }
    }

    pub fn max(&self) -> u32 {
        self.max.load(Ordering::Relaxed)
    }

    /// A reload's new status and max_connections. Waiters look again: a server may have come
    /// online or grown.
    pub(crate) fn set_limits(&self, status: ServerStatus, max_connections: u32) {
        self.status.store(status as u8, Ordering::Relaxed);
        self.max.store(max_connections, Ordering::Relaxed);
        self.waiters.notify.notify_waiters();
    }

    /// Closes every idle connection (a server leaving the config).
    pub(crate) fn close_idle(&self) {
        for shard in self.shards.iter() {
            let idle: Vec<Idle> = shard.lock().map(|mut s| s.drain(..).collect()).unwrap_or_default();
            for b in idle {
                b.backend.close();
            }
        }
    }

    /// Connections open (idle or in use) now.
    pub fn open(&self) -> u32 {
        self.slots.load(Ordering::Relaxed)
    }

    pub fn idle(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.len())).sum()
    }

    /// Reserves room for one more connection.
    pub(crate) fn reserve(&self) -> bool {
        let max = self.max();
        self.slots.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_ok()
    }

    /// A closed pooled connection's room is free again.
    pub(crate) fn released_slot(&self) {
        self.slots.fetch_sub(1, Ordering::AcqRel);
        self.waiters.wake_one();
    }

    /// An idle connection for `login` from the worker's own shard (or any shard when the
    /// runtime shares connections), preferring the one that last served `state`. `lend`:
    /// from the other workers' shards only (per-core mode, when nothing else is left).
    fn take_idle(&self, req: &Request<'_>, has_schema: bool, lend: bool) -> Option<Box<Backend>> {
        let own = shard_index() % self.shards.len();
        let others = move |i: &usize| (req.any_shard || lend) && *i != own;
        let order = (!lend).then_some(own).into_iter().chain((0..self.shards.len()).filter(others));
        let state = req.state;
        let fits = |b: &Backend| fits(b, req.login, has_schema, req.since);
        // The connection that last served the session first, in every shard it may take from:
        // a session whose task moved to another worker keeps what it left there (ROW_COUNT(),
        // LAST_INSERT_ID(), status counters) as on its own connection to the server.
        for i in order.clone() {
            let Ok(mut idle) = self.shards[i].lock() else { continue };
            let served_here = |b: &Idle| {
                debug_assert_eq!(b.served, Arc::as_ptr(&b.state) as usize, "an idle connection's state changed in the pool");
                b.served == Arc::as_ptr(state) as usize
            };
            if let Some(i) = idle.iter().rposition(|b| served_here(b) && fits(b)) {
                return Some(idle.remove(i).backend);
            }
        }
        for i in order {
            let Ok(mut idle) = self.shards[i].lock() else { continue };
            if let Some(i) = idle.iter().rposition(|b| fits(b)) {
                return Some(idle.remove(i).backend);
            }
        }
        None
    }

    /// Closes one idle connection that cannot serve `req` (another login's, one in a schema a
    /// session without one cannot leave, or one of a past epoch) to make room; any worker's, as
    /// a full server must not starve one worker. Connections of a past epoch that open sessions
    /// may need (their login may not work any more) go last. One that fits, returned since the
    /// caller looked, is left for the caller's next look.
    fn evict_other(&self, req: &Request<'_>, has_schema: bool) -> bool {
        for spare_kept in [true, false] {
            for i in 0..self.shards.len() {
                let Ok(mut idle) = self.shards[i].lock() else { continue };
                // Kept for open sessions: spared on the first pass.
                let spared = |b: &Backend| spare_kept && self.generations.standing(b) == Standing::KeptForSessions;
                let evictable = |b: &Backend| !fits(b, req.login, has_schema, req.since) && !spared(b);
                if let Some(pos) = idle.iter().position(|b| evictable(b)) {
                    let b = idle.remove(pos).backend;
                    drop(idle);
                    tracing::debug!(thread = b.thread_id, user = %b.login.username, "closing an idle connection to make room for another login");
                    b.close();
                    return true;
                }
            }
        }
        false
    }

    /// The logins of idle connections and of those kept warm (`min_idle`).
    pub fn idle_logins(&self) -> Vec<Arc<Login>> {
        let mut out: Vec<Arc<Login>> = self.logins.lock().map(|l| l.clone()).unwrap_or_default();
        for shard in self.shards.iter() {
            if let Ok(idle) = shard.lock() {
                out.extend(idle.iter().map(|b| b.login.clone()));
            }
        }
        out
    }

    /// Closes the idle connections whose login is `stale` (a backend account dropped or given
    /// a new password) and stops keeping such logins warm. With `spare_sessions`, connections
    /// that open sessions of their epoch may still need stay (`Generations`). Returns how many
    /// closed.
    pub fn close_idle_logins(&self, spare_sessions: bool, stale: impl Fn(&Login) -> bool) -> usize {
        if let Ok(mut logins) = self.logins.lock() {
            logins.retain(|l| !stale(l));
        }
        let mut closed = 0;
        for shard in self.shards.iter() {
            let gone: Vec<Idle> = match shard.lock() {
                Ok(mut idle) => {
                    let (gone, kept) = idle.drain(..).partition(|b| {
                        stale(&b.login) && !(spare_sessions && self.generations.serves_a_session(&b.login.username, b.epoch))
                    });
                    *idle = kept;
                    gone
                }
                Err(_) => Vec::new(),
            };
            closed += gone.len();
            gone.into_iter().for_each(|b| b.backend.close());
        }
        closed
    }

    fn remember(&self, login: &Arc<Login>) {
        if let Ok(mut l) = self.logins.lock() {
            if !l.iter().any(|k| k.same_key(login)) {
                l.push(login.clone());
            }
        }
    }
}

thread_local! {
    /// This worker thread's shard; set when the worker starts.
    static SHARD: Cell<usize> = const { Cell::new(0) };
    /// The runtime this worker thread belongs to.
    static RUNTIME: std::cell::RefCell<Option<Arc<RuntimeTag>>> = const { std::cell::RefCell::new(None) };
}

fn shard_index() -> usize {
    SHARD.with(|s| s.get())
}

/// Makes the calling thread worker `i` (its pool shard) of the runtime `runtime`.
pub fn set_worker(i: usize, runtime: Option<Arc<RuntimeTag>>) {
    SHARD.with(|s| s.set(i));
    RUNTIME.with(|r| *r.borrow_mut() = runtime);
}

/// A worker runtime, as its connections see it. A socket is registered with the I/O driver of
/// the runtime that opened it; when the worker count changes, the old runtime is `retired` (its
/// connections are closed instead of pooled) and kept running until `open` falls to 0.
#[derive(Debug, Default)]
pub struct RuntimeTag {
    pub retired: std::sync::atomic::AtomicBool,
    /// Backend connections opened on this runtime and not yet dropped.
    pub open: AtomicUsize,
}

impl RuntimeTag {
    /// The calling worker's runtime, counting one more connection on it.
    fn current() -> Option<Arc<RuntimeTag>> {
        let tag = RUNTIME.with(|r| r.borrow().clone())?;
        tag.open.fetch_add(1, Ordering::AcqRel);
        Some(tag)
    }

    fn retired(b: &Backend) -> bool {
        b.runtime.as_ref().is_some_and(|r| r.retired.load(Ordering::Acquire))
    }
}

/// What a checkout needs to know beyond the hostgroup.
pub struct Request<'a> {
    pub login: &'a Arc<Login>,
    /// The session's state: a connection that last served it needs no sync.
    pub state: &'a Arc<state::State>,
    pub settings: &'a PoolSection,
    pub connect_timeout: Duration,
    /// Connections may move between workers (work-stealing runtime).
    pub any_shard: bool,
    /// The epoch the session logged in under (`Generation`): connections opened before it
    /// do not serve it.
    pub since: u64,
    /// Where checkouts and connects are counted (this thread's counters).
    pub stats: &'a crate::stats::Stats,
}

/// A connection to a server of `hostgroup` for `req.login`: on a server drawn by weight, an
/// idle one (checked alive) or a new one if it has room; else another server's idle one, else
/// a new one where there is room, else (per-core) another worker's idle one, else the first
/// to come free within the checkout timeout.
/// A server a connect fails on is left out and the others are tried (a dead server may still
/// be ONLINE: nothing told sluice yet); the last failure is returned when none is left.
/// The connection is not yet in line with the session's state.
pub async fn checkout(hostgroups: &Hostgroups, hostgroup: u32, req: &Request<'_>) -> Result<Box<Backend>, BackendError> {
    let has_schema = req.state.schema.is_some();
    // Read once an idle connection was not at hand (most checkouts never need it).
    let mut deadline: Option<Instant> = None;
    let check_after = Duration::from_millis(req.settings.check_idle_after_ms);
    let mut waiting: Option<&Waiters> = None;
    // Pool ids of servers a connect failed on in this checkout (allocated only on a failure).
    let mut failed: Vec<u32> = Vec::new();
    let result = loop {
        let servers = match hostgroups.group(hostgroup) {
            Ok(s) => s,
            Err(e) => break Err(e.into()),
        };
        // Every server shunned for failed checks: they are tried all the same (a connect that
        // works ends the shun at once; one that fails is the client's answer).
        let last_resort = Hostgroups::only_last_resort(servers);
        let usable = |s: &Server| s.usable(last_resort) && !failed.contains(&s.pool.id);
        // 1. A server by weight: its idle connection, else a new one if it has room.
        let preferred = hostgroups::pick_usable(servers, usable);
        let mut found = preferred.and_then(|s| live_idle(s, req, has_schema, check_after, false));
        let mut to_open = None;
        if found.is_none() {
            to_open = preferred.filter(|s| s.pool.reserve());
            if to_open.is_none() {
                // 2. Any other server's idle connection.
                let mut others = servers.iter().filter(|s| usable(s) && !preferred.is_some_and(|p| std::ptr::eq(p, *s)));
                found = others.find_map(|s| live_idle(s, req, has_schema, check_after, false));
            }
        }
        // 3. Room for a new one (by weight).
        if found.is_none() && to_open.is_none() {
            to_open = hostgroups.reserve_by_weight(servers, usable);
        }
        if found.is_none() && to_open.is_none() && !req.any_shard {
            // 4. Per-core: another worker's idle connection, lent for this checkout (its I/O
            // stays with the worker that opened it, and it goes back there afterwards): a
            // worker whose own connections are all busy must not wait while the other's sit
            // idle, nor close them to open its own.
            found = servers.iter().filter(|s| usable(s)).find_map(|s| live_idle(s, req, has_schema, check_after, true));
        }
        if let Some(b) = found {
            if waiting.is_none() {
                req.stats.add(Counter::ConnPoolGetConnImmediate, 1);
            }
            break Ok(b);
        }
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_millis(req.settings.checkout_timeout_ms));
        // 5. Room made by closing another login's idle one.
        let to_open =
            to_open.or_else(|| servers.iter().filter(|s| usable(s)).find(|s| s.pool.evict_other(req, has_schema) && s.pool.reserve()));
        if let Some(server) = to_open {
            match open(server, req).await {
                Err(e) if connect_failed(&e) && servers.iter().any(|o| usable(o) && !std::ptr::eq(o, server)) => {
                    tracing::debug!(server = %server.name, hostgroup, "connect failed, trying the other servers of the hostgroup: {e}");
                    failed.push(server.pool.id);
                    continue;
                }
                r => break r,
            }
        }
        if !failed.is_empty() && !servers.iter().any(usable) {
            // Every ONLINE server failed to connect: nothing to wait for.
            break Err(BackendError::Unavailable(NoServer::NoneOnline(hostgroup)));
        }
        // 6. Wait for a connection to come back or close: queue up, look once more (one may
        // have come back meanwhile), then sleep until woken or the deadline.
        let Some(waiters) = waiting else {
            let w = &*servers[0].pool.waiters;
            w.count.fetch_add(1, Ordering::AcqRel);
            waiting = Some(w);
            continue;
        };
        let notified = waiters.notify.notified();
        if tokio::time::timeout_at(deadline.into(), notified).await.is_err() {
            break Err(BackendError::Unavailable(NoServer::Exhausted { hostgroup, waited_ms: req.settings.checkout_timeout_ms }));
        }
    };
    req.stats.add(if result.is_ok() { Counter::ConnPoolGetConnSuccess } else { Counter::ConnPoolGetConnFailure }, 1);
    if let Some(w) = waiting {
        w.count.fetch_sub(1, Ordering::AcqRel);
        // A wake-up this checkout did not use goes to the next waiter.
        if result.is_err() {
            w.wake_one();
        }
    }
    result
}

/// The server could not be reached (down, restarting, unreachable), as opposed to refusing
/// the login: another server of the hostgroup may serve.
pub fn connect_failed(e: &BackendError) -> bool {
    matches!(e, BackendError::Connect { .. } | BackendError::Timeout { .. } | BackendError::Lost { .. })
}

/// An idle connection of `server` that fits, checked for a server-side close if it sat long
/// enough (dead ones are closed on the way).
fn live_idle(server: &Server, req: &Request<'_>, has_schema: bool, check_after: Duration, lend: bool) -> Option<Box<Backend>> {
    while let Some(mut b) = server.pool.take_idle(req, has_schema, lend) {
        if b.still_open(check_after) {
            return Some(b);
        }
        tracing::debug!(server = %server.name, thread = b.thread_id, "idle pooled connection was closed by the server; dropped");
        b.close();
    }
    None
}

/// Opens a pooled connection on `server`, whose slot is already reserved.
async fn open(server: &Server, req: &Request<'_>) -> Result<Box<Backend>, BackendError> {
    let login = req.login;
    // Read before logging in: a change that lands during the login makes this connection stale.
    let epoch = server.pool.epoch();
    let params = ConnectParams {
        server,
        username: &login.username,
        credential: &login.credential,
        database: req.state.schema.as_deref(),
        collation: login.collation,
        capabilities: login.capabilities - CapabilityFlags::CLIENT_SSL,
        attrs: &login.attrs,
        mariadb_caps: login.mariadb_caps,
        timeout: req.connect_timeout,
    };
    match connect(&params).await {
        Ok(mut b) => {
            req.stats.add(Counter::ServerConnectionsCreated, 1);
            if server.last_resort() && server.pool.set_health(Health::Healthy) {
                // Tried as the last resort, and it answers: back before the monitor's next check.
                tracing::warn!("{} (hostgroup {}) is ONLINE again: a client's connection to it succeeded", server.name, server.hostgroup);
            }
            server.pool.connects_ok.fetch_add(1, Ordering::Relaxed);
            server.pool.max_used.fetch_max(server.pool.open(), Ordering::Relaxed);
            server.pool.remember(login);
            b.login = login.clone();
            b.pooled = true;
            b.epoch = epoch;
            Ok(Box::new(b))
        }
        Err(e) => {
            req.stats.add(Counter::ServerConnectionsAborted, 1);
            server.pool.connects_failed.fetch_add(1, Ordering::Relaxed);
            server.pool.released_slot();
            Err(e)
        }
    }
}

/// Hands a connection back to its server's pool (the worker's shard), or closes it when it
/// is broken, past its lifetime, or its server is no longer ONLINE.
pub fn checkin(b: Box<Backend>, settings: &PoolSection) {
    checkin_to(b, settings, shard_index(), Instant::now());
}

/// `checkin` of a connection whose last use ended at `now` (a session passes its statement's
/// observed end: one clock read fewer per statement). That is a moment before the checkin, so
/// the connection counts as idle a little longer (never less), and against `max_lifetime_ms`
/// as some microseconds younger, nothing at the scale of a lifetime.
pub fn checkin_at(b: Box<Backend>, settings: &PoolSection, now: Instant) {
    checkin_to(b, settings, shard_index(), now);
}

fn checkin_to(mut b: Box<Backend>, settings: &PoolSection, shard: usize, now: Instant) {
    // Bytes buffered past the last reply would answer the next user's statement: never reuse.
    let unread = !b.conn.rbuf.is_empty() || b.conn.stream.has_unread();
    let standing = b.server.pool.generations.standing(&b);
    let old = b.age_at(now) > Duration::from_millis(settings.max_lifetime_ms) && standing != Standing::KeptForSessions;
    let stale = standing == Standing::Retired;
    if !b.pooled || b.broken || unread || old || stale || !b.server.accepts_new() || RuntimeTag::retired(&b) {
        tracing::debug!(server = %b.server.name, thread = b.thread_id, broken = b.broken, unread, old, stale, "closing a connection instead of pooling it");
        b.close();
        return;
    }
    b.idle_since = now;
    b.conn.stream.watch_idle();
    let pool = b.server.pool.clone();
    // Per-core: back to the worker whose reactor (or ring) its socket is on.
    let shard = if b.runtime.is_some() { b.home } else { shard };
    let i = shard % pool.shards.len();
    match pool.shards[i].lock() {
        Ok(mut idle) => idle.push(Idle::new(b)),
        Err(_) => return,
    }
    pool.waiters.wake_one();
}

/// One round of upkeep for one worker's shard of every server's pool: closes idle
/// connections past `max_idle_ms` or their lifetime or closed by the server, and opens
/// connections up to `min_idle` per known login. The runtime runs it once a second.
pub async fn maintain(
    hostgroups: &Hostgroups,
    settings: &PoolSection,
    connect_timeout: Duration,
    stats: &crate::stats::Stats,
    shard: usize,
) {
    for server in hostgroups.servers() {
        let pool = &server.pool;
        let i = shard % pool.shards.len();
        let expired: Vec<Box<Backend>> = match pool.shards[i].lock() {
            Ok(mut idle) => {
                let max_idle = Duration::from_millis(settings.max_idle_ms);
                let lifetime = Duration::from_millis(settings.max_lifetime_ms);
                let keep = settings.min_idle as usize;
                let mut out = Vec::new();
                let mut n = 0;
                while n < idle.len() {
                    let surplus = idle.len() > keep;
                    let b = &mut idle[n];
                    let standing = pool.generations.standing(b);
                    let kept = standing == Standing::KeptForSessions;
                    let stale = (surplus && b.idle_for() > max_idle && !kept)
                        || (b.age() > lifetime && !kept)
                        || standing == Standing::Retired
                        || !b.is_alive()
                        || !b.server.accepts_new()
                        || RuntimeTag::retired(b);
                    if stale {
                        out.push(idle.remove(n).backend);
                    } else {
                        n += 1;
                    }
                }
                out
            }
            Err(_) => Vec::new(),
        };
        for b in expired {
            tracing::debug!(server = %b.server.name, thread = b.thread_id, "closing an idle connection (idle too long, too old, predating a privilege change, closed by the server or its server not ONLINE)");
            b.quit().await;
        }
        if settings.min_idle == 0 || !server.accepts_new() {
            continue;
        }
        let logins: Vec<Arc<Login>> = pool.logins.lock().map(|l| l.clone()).unwrap_or_default();
        for login in logins {
            let idle = pool.shards[i].lock().map_or(0, |s| s.iter().filter(|b| b.login.same_key(&login)).count());
            for _ in idle..settings.min_idle as usize {
                if !pool.reserve() {
                    break;
                }
                let state = Arc::new(state::State::new(None, login.collation as u16));
                let req = Request { login: &login, state: &state, settings, connect_timeout, any_shard: false, since: pool.epoch(), stats };
                match open(server, &req).await {
                    Ok(b) => checkin_to(b, settings, shard, Instant::now()),
                    Err(e) => {
                        tracing::debug!(server = %server.name, "min_idle connection failed: {e}");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_past_epoch_serves_the_sessions_that_logged_in_before_it() {
        let g = Arc::new(Generations::default());
        let old = g.enter("alice");
        let bob = g.enter("bob");
        g.renew();
        let new = g.enter("alice");
        assert!(old.is_past() && !new.is_past());
        // Connections of epoch 0 serve alice's old session; bob's session is no use to alice's.
        assert!(g.serves_a_session("alice", 0));
        drop(old);
        assert!(!g.serves_a_session("alice", 0), "only a later session of alice is left");
        assert!(g.serves_a_session("alice", 1));
        assert!(g.serves_a_session("bob", 0));
        drop((new, bob));
        assert!(g.sessions.lock().unwrap().is_empty(), "nothing left behind");
    }
}
