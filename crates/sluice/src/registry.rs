//! Live client sessions by the id sluice gave them, so `KILL <id>` from one session can reach
//! another's backend thread. Touched at connect, disconnect, KILL and when a session moves to
//! another hostgroup's connection (a pointer copy under the session's own lock).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

pub struct SessionHandle {
    pub id: u32,
    pub user: String,
    /// (server name, backend thread id) of the connection serving the session now.
    backend: Mutex<Option<(Arc<str>, u32)>>,
    killed: AtomicBool,
    kill: Notify,
    /// Set once the session has closed its client connection.
    closed: AtomicBool,
    closed_notify: Notify,
}

impl SessionHandle {
    pub fn set_backend(&self, server: &Arc<str>, thread_id: u32) {
        if let Ok(mut b) = self.backend.lock() {
            *b = Some((server.clone(), thread_id));
        }
    }

    pub fn backend(&self) -> Option<(Arc<str>, u32)> {
        self.backend.lock().ok().and_then(|b| b.clone())
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

    pub fn register(&self, id: u32, user: &str) -> Arc<SessionHandle> {
        let h = Arc::new(SessionHandle {
            id,
            user: user.to_string(),
            backend: Mutex::new(None),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
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

    pub fn len(&self) -> usize {
        self.sessions.lock().map_or(0, |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
