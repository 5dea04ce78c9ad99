//! Live client sessions by the id sluice gave them, so `KILL <id>` from one session can reach
//! another. Touched at connect, disconnect and KILL; the backend connection serving a session
//! is one atomic store per change, in the session's own handle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

pub struct SessionHandle {
    pub id: u32,
    pub user: String,
    pub peer: std::net::SocketAddr,
    /// What the session is doing, for SHOW PROCESSLIST: written by the session at each
    /// statement's start and end (its own lock; readers are rare).
    activity: Mutex<Activity>,
    /// server (pool id) << 32 | backend thread id of the connection serving the session now;
    /// 0 when it holds none.
    backend: AtomicU64,
    killed: AtomicBool,
    kill: Notify,
    /// A KILL QUERY for the statement running now: 0 none, else `KillQuery` + 1.
    kill_query: AtomicU8,
    kill_query_notify: Notify,
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
    /// The running statement's text (the first `INFO_MAX` bytes).
    pub info: String,
}

/// Longest statement text kept for SHOW PROCESSLIST.
const INFO_MAX: usize = 4096;

impl SessionHandle {
    /// A statement begins: one uncontended lock and a copy of (at most 4 KiB of) its text.
    pub fn begin(&self, text: &[u8], state: &std::sync::Arc<crate::pool::state::State>, hostgroup: u32) {
        let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.info.clear();
        a.info.push_str(&String::from_utf8_lossy(&text[..text.len().min(INFO_MAX)]));
        if !a.state.as_ref().is_some_and(|s| Arc::ptr_eq(s, state)) {
            a.state = Some(state.clone());
        }
        a.hostgroup = hostgroup;
        a.started = Some(std::time::Instant::now());
    }

    /// The statement ended.
    pub fn end(&self) {
        let mut a = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        a.started = None;
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
    pub fn request_kill_query(&self, hard: Option<bool>) {
        let v = match hard {
            None => 1,
            Some(false) => 2,
            Some(true) => 3,
        };
        self.kill_query.store(v, Ordering::Release);
        self.kill_query_notify.notify_one();
    }

    /// Resolves when a KILL QUERY was asked for; returns its HARD/SOFT modifier.
    pub async fn kill_query_requested(&self) -> Option<bool> {
        loop {
            match self.kill_query.swap(0, Ordering::AcqRel) {
                0 => self.kill_query_notify.notified().await,
                1 => return None,
                2 => return Some(false),
                _ => return Some(true),
            }
        }
    }

    /// Forgets a KILL QUERY that came between statements (the server ignores those too).
    pub fn clear_kill_query(&self) {
        self.kill_query.store(0, Ordering::Release);
    }

    /// Asks the session to end (after KILL CONNECTION reached its backend).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Resolves once `kill` has been called.
    pub async fn killed(&self) {
        while !self.is_killed() {
            self.kill.notified().await;
        }
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
            user: user.to_string(),
            peer,
            activity: Mutex::new(Activity::default()),
            backend: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            kill_query: AtomicU8::new(0),
            kill_query_notify: Notify::new(),
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

    /// A session by the id sluice announced, or else by its backend thread id (what
    /// CONNECTION_ID() returns on a backend that was asked directly).
    pub fn find(&self, id: u64) -> Option<Arc<SessionHandle>> {
        let sessions = self.sessions.lock().ok()?;
        if let Some(h) = u32::try_from(id).ok().and_then(|id| sessions.get(&id)) {
            return Some(h.clone());
        }
        sessions.values().find(|h| h.backend().is_some_and(|(_, t)| t as u64 == id)).cloned()
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
