//! Live client sessions by the id sluice gave them, so `KILL <id>` from one session can reach
//! another and SHOW PROCESSLIST can list them. Touched at connect, disconnect and KILL; the
//! backend connection serving a session is one atomic store per change, in the session's own
//! handle. Ids are sluice's only: a backend thread id names no session (with multiplexing,
//! that thread serves whichever client runs a statement on it).

use atomic_waker::AtomicWaker;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::sync::Notify;

/// Resolves with the first `Some` of `check`, woken through `slot`. `check` runs again after
/// the waker is registered, so a signal stored between the first look and the registration is
/// not missed. One task may wait on a slot at a time.
///
/// The waker is registered once per wait, not at every poll (a session's selects poll these
/// waits several times per statement): a later poll with the same waker only looks. That is
/// sound because a signal stores its value before it wakes, so a slot emptied by a wake always
/// leaves a value for the next look; and the wait owns its value (nobody else takes or clears
/// it while the wait lives). The waker is known by its data and vtable, as `Waker::will_wake`
/// compares them, kept as addresses so the wait stays `Send`.
async fn wait_on<T>(slot: &AtomicWaker, mut check: impl FnMut() -> Option<T>) -> T {
    let mut registered: Option<(usize, usize)> = None;
    std::future::poll_fn(|cx| {
        if let Some(v) = check() {
            return Poll::Ready(v);
        }
        let waker = cx.waker();
        let identity = (waker.data() as usize, std::ptr::from_ref(waker.vtable()) as usize);
        if registered == Some(identity) {
            return Poll::Pending;
        }
        slot.register(waker);
        registered = Some(identity);
        check().map_or(Poll::Pending, Poll::Ready)
    })
    .await
}

pub struct SessionHandle {
    pub id: u32,
    /// The session's user (COM_CHANGE_USER changes it).
    user: Mutex<Arc<str>>,
    pub peer: std::net::SocketAddr,
    /// What the session is doing, for SHOW PROCESSLIST: written by the session at each
    /// statement's start and end (its own lock; readers are rare).
    activity: Mutex<Activity>,
    /// server (pool id) << 32 | backend thread id of the connection serving the session now;
    /// 0 when it holds none.
    backend: AtomicU64,
    killed: AtomicBool,
    /// Only the session's own task waits for a KILL (at every statement): one waker slot,
    /// not a waiter list with its lock to join and leave each time.
    kill: AtomicWaker,
    /// A KILL QUERY for the statement running now (`KillQuery::encode`; 0: none).
    kill_query: AtomicU64,
    kill_query_notify: AtomicWaker,
    /// Set once the session has closed its client connection.
    closed: AtomicBool,
    closed_notify: Notify,
}

/// A session's current statement, as SHOW PROCESSLIST shows it.
#[derive(Default, Clone)]
pub struct Activity {
    /// The session's state when the statement began (its schema).
    pub state: Option<std::sync::Arc<crate::pool::state::State>>,
    pub hostgroup: u32,
    /// When the running statement began; `None` between statements.
    pub started: Option<std::time::Instant>,
    /// When the last statement ended (or the session began), for an idle session's Time.
    pub idle_since: Option<std::time::Instant>,
    /// The running statement's text (its first `INFO_MAX` bytes, as sent: decoded only when
    /// shown, `info_text`).
    pub info: Vec<u8>,
}

impl Activity {
    /// The running statement's text as SHOW PROCESSLIST shows it (bytes that are not UTF-8,
    /// or a character cut at `INFO_MAX`, become U+FFFD).
    pub fn info_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.info)
    }
}

/// Longest statement text kept for SHOW PROCESSLIST.
const INFO_MAX: usize = 4096;

impl SessionHandle {
    /// A statement begins: one uncontended lock and a copy of (at most 4 KiB of) its text.
    pub fn begin(&self, text: &[u8], state: &std::sync::Arc<crate::pool::state::State>, hostgroup: u32) {
        self.begin_at(text, state, hostgroup, std::time::Instant::now());
    }

    /// As `begin`, with the time the caller already read (one clock read per statement).
    pub fn begin_at(&self, text: &[u8], state: &std::sync::Arc<crate::pool::state::State>, hostgroup: u32, now: std::time::Instant) {
        let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.info.clear();
        a.info.extend_from_slice(&text[..text.len().min(INFO_MAX)]);
        if !a.state.as_ref().is_some_and(|s| Arc::ptr_eq(s, state)) {
            a.state = Some(state.clone());
        }
        a.hostgroup = hostgroup;
        a.started = Some(now);
    }

    /// The session's state changed (USE, COM_INIT_DB, SET, a reset): what SHOW PROCESSLIST
    /// and INFORMATION_SCHEMA.PROCESSLIST show of it follows at once, not at its next statement.
    pub fn publish_state(&self, state: &std::sync::Arc<crate::pool::state::State>) {
        let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.state = Some(state.clone());
    }

    /// The statement ended.
    pub fn end(&self) {
        self.end_at(std::time::Instant::now());
    }

    /// As `end`, with the time the caller already read.
    pub fn end_at(&self, now: std::time::Instant) {
        let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.started = None;
        a.idle_since = Some(now);
    }

    pub fn user(&self) -> Arc<str> {
        self.user.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// COM_CHANGE_USER: KILL's ownership rule and SHOW PROCESSLIST see the new user.
    pub fn set_user(&self, user: &str) {
        *self.user.lock().unwrap_or_else(|p| p.into_inner()) = user.into();
    }

    pub fn activity(&self) -> Activity {
        self.activity.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_backend(&self, server: u32, thread_id: u32) {
        self.backend.store(((server as u64) << 32) | thread_id as u64, Ordering::Release);
    }

    pub fn clear_backend(&self) {
        self.backend.store(0, Ordering::Release);
    }

    /// (server pool id, thread id) of the backend connection serving the session now.
    pub fn backend(&self) -> Option<(u32, u32)> {
        match self.backend.load(Ordering::Acquire) {
            0 => None,
            v => Some(((v >> 32) as u32, v as u32)),
        }
    }

    /// Asks the session to kill the statement it is running (it does so itself, so the KILL
    /// reaches that statement's connection and no other's).
    pub fn request_kill_query(&self, request: KillQuery) {
        self.kill_query.store(request.encode(), Ordering::Release);
        self.kill_query_notify.wake();
    }

    /// Resolves when a KILL QUERY was asked for. Awaited by the session's own task only.
    pub async fn kill_query_requested(&self) -> KillQuery {
        // Looked at first, taken only when there: most looks find none.
        let take = || (self.kill_query.load(Ordering::Acquire) != 0).then(|| self.kill_query.swap(0, Ordering::AcqRel));
        wait_on(&self.kill_query_notify, || take().and_then(KillQuery::decode)).await
    }

    /// Forgets a KILL QUERY that came between statements (the server ignores those too).
    pub fn clear_kill_query(&self) {
        self.kill_query.store(0, Ordering::Release);
    }

    /// Asks the session to end (after KILL CONNECTION reached its backend).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.wake();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Resolves once `kill` has been called. Awaited by the session's own task only.
    pub async fn killed(&self) {
        wait_on(&self.kill, || self.is_killed().then_some(())).await
    }

    /// The session has closed its client connection.
    pub fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.closed_notify.notify_waiters();
    }

    /// Resolves once the session has closed its client connection (the server closes a killed
    /// connection before it answers the KILL; clients rely on that order).
    pub async fn closed(&self) {
        loop {
            let notified = self.closed_notify.notified();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// A KILL QUERY a session carries out on the backend connection running its statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KillQuery {
    /// `Some(true)` for HARD, `Some(false)` for SOFT.
    pub hard: Option<bool>,
    /// `KILL QUERY ID n`: only the statement with this server query id (0: whatever runs).
    pub query_id: u64,
}

impl From<Option<bool>> for KillQuery {
    fn from(hard: Option<bool>) -> Self {
        KillQuery { hard, query_id: 0 }
    }
}

impl KillQuery {
    /// One word, so a request is stored and taken whole: the modifier in the low two bits
    /// (never 0), the query id above them.
    fn encode(self) -> u64 {
        let modifier = match self.hard {
            None => 1,
            Some(false) => 2,
            Some(true) => 3,
        };
        (self.query_id << 2) | modifier
    }

    fn decode(v: u64) -> Option<KillQuery> {
        let hard = match v & 3 {
            0 => return None,
            1 => None,
            2 => Some(false),
            _ => Some(true),
        };
        Some(KillQuery { hard, query_id: v >> 2 })
    }
}

pub struct Registry {
    next_id: AtomicU32,
    sessions: Mutex<HashMap<u32, Arc<SessionHandle>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry { next_id: AtomicU32::new(1), sessions: Mutex::new(HashMap::new()) }
    }
}

impl Registry {
    /// A fresh session id (never 0, skipping ids still in use after wrap-around).
    pub fn next_id(&self) -> u32 {
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id != 0 && !self.sessions.lock().is_ok_and(|s| s.contains_key(&id)) {
                return id;
            }
        }
    }

    pub fn register(&self, id: u32, user: &str, peer: std::net::SocketAddr) -> Arc<SessionHandle> {
        let h = Arc::new(SessionHandle {
            id,
            user: Mutex::new(user.into()),
            peer,
            activity: Mutex::new(Activity { idle_since: Some(std::time::Instant::now()), ..Activity::default() }),
            backend: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            kill: AtomicWaker::new(),
            kill_query: AtomicU64::new(0),
            kill_query_notify: AtomicWaker::new(),
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
        });
        if let Ok(mut s) = self.sessions.lock() {
            s.insert(id, h.clone());
        }
        h
    }

    pub fn unregister(&self, id: u32) {
        if let Ok(mut s) = self.sessions.lock() {
            s.remove(&id);
        }
    }

    /// A session by the id sluice announced. Never by a backend thread id: that thread may be
    /// serving any client at this moment.
    pub fn find(&self, id: u64) -> Option<Arc<SessionHandle>> {
        let id = u32::try_from(id).ok()?;
        self.sessions.lock().ok()?.get(&id).cloned()
    }

    /// Asks every session to end (shutdown): idle ones at once, busy ones after their statement.
    pub fn close_all(&self) {
        if let Ok(sessions) = self.sessions.lock() {
            for h in sessions.values() {
                h.kill();
            }
        }
    }

    /// Every live session, by id.
    pub fn sessions(&self) -> Vec<Arc<SessionHandle>> {
        let mut v: Vec<_> = self.sessions.lock().map(|s| s.values().cloned().collect()).unwrap_or_default();
        v.sort_by_key(|h| h.id);
        v
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().map_or(0, |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_query_requests_round_trip() {
        for hard in [None, Some(false), Some(true)] {
            for query_id in [0, 1, 12345, u64::MAX >> 2] {
                let k = KillQuery { hard, query_id };
                assert_eq!(KillQuery::decode(k.encode()), Some(k));
            }
        }
        assert_eq!(KillQuery::decode(0), None);
    }

    #[test]
    fn sessions_are_found_by_their_own_id_only() {
        let r = Registry::default();
        let peer = "127.0.0.1:5000".parse().unwrap();
        let a = r.register(r.next_id(), "alice", peer);
        let b = r.register(r.next_id(), "bob", peer);
        // b runs on backend thread `a.id`: KILL a.id still means a, and thread 77 means no one.
        b.set_backend(1, a.id);
        a.set_backend(1, 77);
        assert_eq!(r.find(a.id as u64).map(|h| h.id), Some(a.id));
        assert!(r.find(77).is_none());
        assert!(r.find(u64::from(u32::MAX) + 1 + a.id as u64).is_none());
        b.set_user("carol");
        assert_eq!(&*r.find(b.id as u64).unwrap().user(), "carol");
    }

    /// A waker that counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_kill_wait_registers_once_yet_wakes_whichever_waker_polled_it_last() {
        use std::future::Future;
        let r = Registry::default();
        let h = r.register(r.next_id(), "alice", "127.0.0.1:5000".parse().unwrap());
        let (a, b) = (Arc::new(Counting(0.into())), Arc::new(Counting(0.into())));
        let (wa, wb) = (std::task::Waker::from(a.clone()), std::task::Waker::from(b.clone()));

        // KILL CONNECTION: polled twice by one waker, then by another; the last one is woken.
        let mut killed = std::pin::pin!(h.killed());
        assert!(killed.as_mut().poll(&mut std::task::Context::from_waker(&wa)).is_pending());
        assert!(killed.as_mut().poll(&mut std::task::Context::from_waker(&wa)).is_pending());
        assert!(killed.as_mut().poll(&mut std::task::Context::from_waker(&wb)).is_pending());
        h.kill();
        assert_eq!((a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)), (0, 1));
        assert!(killed.as_mut().poll(&mut std::task::Context::from_waker(&wb)).is_ready());

        // KILL QUERY: a request that came while the wait was registered is woken and taken
        // whole, even when a later poll by the same waker skipped registering.
        let mut query = std::pin::pin!(h.kill_query_requested());
        assert!(query.as_mut().poll(&mut std::task::Context::from_waker(&wa)).is_pending());
        assert!(query.as_mut().poll(&mut std::task::Context::from_waker(&wa)).is_pending());
        let asked = KillQuery { hard: Some(true), query_id: 42 };
        h.request_kill_query(asked);
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(query.as_mut().poll(&mut std::task::Context::from_waker(&wa)), std::task::Poll::Ready(asked));
        assert!(h.kill_query.load(Ordering::SeqCst) == 0, "the request is taken, not left for the next statement");
    }
}
