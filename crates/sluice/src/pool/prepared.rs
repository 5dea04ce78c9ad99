//! ⑤ pool: prepared statements across pooled connections.
//!
//! A client's statement ids are sluice's own (`session::prepared`); each names an `Entry` of
//! the `Registry`, keyed by (backend user, schema at prepare, text), which every session of that
//! user shares. A backend connection prepares an entry the first time a statement of it runs
//! there and remembers its own statement id in `Statements`, so the same text from any session
//! reuses it. Both are bounded: the registry keeps at most `max_statements` entries (those no
//! client holds open are dropped first in, first out), a connection keeps at most
//! `max_statements_per_connection` (the least recently used is closed on the server).

use super::{Backend, BackendError};
use proto::command::{COM_INIT_DB, COM_STMT_CLOSE, COM_STMT_PREPARE};
use proto::errors::ER_MAX_PREPARED_STMT_COUNT_REACHED;
use proto::frame::write_command;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What sluice knows of one prepared statement text, whichever connection runs it.
#[derive(Debug)]
pub struct Entry {
    /// Never reused: a connection's statements are keyed by it.
    pub id: u64,
    user: Box<str>,
    /// The default database at prepare: a connection prepares the statement there, as the
    /// statement's unqualified names were resolved there.
    pub schema: Option<Box<str>>,
    pub sql: Box<[u8]>,
    /// Parameters, from the server's first PREPARE_OK (fixed by the text).
    pub params: u16,
    /// What running it may do to the session (pins, variables to read back).
    pub effects: sql::effects::Effects,
    /// The text's digest, computed once here rather than at each execute (statistics).
    pub digest: u64,
    pub digest_text: Box<[u8]>,
    /// Its routing hint and read/write class, read once here: each execute is routed by them.
    pub route: crate::route::Known,
}

impl Entry {
    fn is(&self, user: &str, schema: Option<&str>, sql: &[u8], params: u16) -> bool {
        &*self.user == user && self.schema.as_deref() == schema && &*self.sql == sql && self.params == params
    }
}

/// The registry is full of statements clients hold open (the server's
/// ER_MAX_PREPARED_STMT_COUNT_REACHED situation).
#[derive(Debug)]
pub struct Full {
    pub cap: usize,
}

/// Entries shared by every session, in shards with their own short lock (taken on prepare
/// only; executing goes through the session's own handle).
pub struct Registry {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::hash::RandomState,
    entries: AtomicUsize,
    /// Statements open in client sessions now.
    open: AtomicUsize,
    next_id: AtomicU64,
    cap: usize,
}

#[derive(Default)]
struct Shard {
    by_key: HashMap<u64, Arc<Entry>>,
    /// Keys in insertion order: eviction takes the oldest no client holds.
    order: VecDeque<u64>,
}

const SHARDS: usize = 16;

impl Registry {
    pub fn new(cap: usize) -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: std::hash::RandomState::new(),
            entries: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            cap,
        }
    }

    /// Distinct statements kept now.
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts a statement a client opens; refused beyond the cap, as the server refuses beyond
    /// max_prepared_stmt_count.
    pub fn open_handle(&self) -> Result<(), Full> {
        count_below(&self.open, self.cap).then_some(()).ok_or(Full { cap: self.cap })
    }

    pub fn close_handles(&self, n: usize) {
        self.open.fetch_sub(n, Ordering::AcqRel);
    }

    /// The entry for `sql` prepared by `user` in `schema`, created if new (`params` from the
    /// server's PREPARE_OK).
    pub fn entry(&self, user: &str, schema: Option<&str>, sql: &[u8], params: u16) -> Result<Arc<Entry>, Full> {
        let key = self.hasher.hash_one((user, schema, sql));
        let shard_index = key as usize % SHARDS;
        {
            let shard = lock(&self.shards[shard_index]);
            if let Some(e) = shard.by_key.get(&key) {
                if e.is(user, schema, sql, params) {
                    return Ok(e.clone());
                }
            }
        }
        // Room for one more: counted now, or taken over from an entry evicted for it.
        if !count_below(&self.entries, self.cap) && !self.evict_one(shard_index) {
            return Err(Full { cap: self.cap });
        }
        let mut digest_text = Vec::new();
        let digest = sql::digest::digest_into(sql, &mut digest_text).id;
        let entry = Arc::new(Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            digest,
            digest_text: digest_text.into(),
            user: user.into(),
            schema: schema.map(Into::into),
            sql: sql.into(),
            params,
            effects: sql::effects::effects(sql),
            route: crate::route::Known::of(sql),
        });
        let mut shard = lock(&self.shards[shard_index]);
        match shard.by_key.get(&key) {
            // Another session registered it meanwhile: share that one.
            Some(e) if e.is(user, schema, sql, params) => {
                self.entries.fetch_sub(1, Ordering::AcqRel);
                Ok(e.clone())
            }
            // A 64-bit hash collision (or a changed parameter count): this statement goes
            // unshared rather than displacing the other.
            Some(_) => {
                self.entries.fetch_sub(1, Ordering::AcqRel);
                Ok(entry)
            }
            None => {
                shard.by_key.insert(key, entry.clone());
                shard.order.push_back(key);
                Ok(entry)
            }
        }
    }

    /// Drops the oldest entry no client holds, from `first`'s shard or, failing that, any
    /// other (one lock at a time). Its place in the count goes to the caller's new entry.
    fn evict_one(&self, first: usize) -> bool {
        (0..SHARDS).any(|i| {
            let mut shard = lock(&self.shards[(first + i) % SHARDS]);
            let Shard { by_key, order } = &mut *shard;
            for _ in 0..order.len() {
                let Some(key) = order.pop_front() else { break };
                match by_key.get(&key) {
                    Some(e) if Arc::strong_count(e) == 1 => {
                        by_key.remove(&key);
                        return true;
                    }
                    Some(_) => order.push_back(key),
                    None => {}
                }
            }
            false
        })
    }
}

/// Adds one to `counter` unless it is at `cap` already.
fn count_below(counter: &AtomicUsize, cap: usize) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1)).is_ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The statements one backend connection has prepared, by entry.
#[derive(Default)]
pub struct Statements {
    slots: HashMap<u64, Slot>,
    clock: u64,
}

/// One statement prepared on a connection.
pub struct Slot {
    /// The server's statement id on this connection.
    pub id: u32,
    /// The parameter types this statement last executed with here (the server reuses them
    /// when an execute does not send types); `None` when unknown.
    pub types: Option<Arc<[u8]>>,
    used: u64,
}

impl Statements {
    /// The statement prepared here for `entry`, marked as just used.
    pub fn get(&mut self, entry: u64) -> Option<&mut Slot> {
        self.clock += 1;
        let slot = self.slots.get_mut(&entry)?;
        slot.used = self.clock;
        Some(slot)
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Forgets every statement (the server session was reset: they are gone there).
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    /// Forgets `entry`'s statement; its id, for COM_STMT_CLOSE.
    pub fn remove(&mut self, entry: u64) -> Option<u32> {
        self.slots.remove(&entry).map(|s| s.id)
    }

    /// Records `id` for `entry`; returns the server statement ids to close: the one it replaces,
    /// and the least recently used beyond `cap`.
    fn insert(&mut self, entry: u64, id: u32, cap: usize) -> Vec<u32> {
        self.clock += 1;
        let mut close: Vec<u32> = self.slots.insert(entry, Slot { id, types: None, used: self.clock }).map(|s| s.id).into_iter().collect();
        while self.slots.len() > cap.max(1) {
            let Some((&oldest, _)) = self.slots.iter().min_by_key(|(_, s)| s.used) else { break };
            close.extend(self.remove(oldest));
        }
        close
    }
}

/// The fixed part of a server's reply to COM_STMT_PREPARE.
#[derive(Debug, Clone, Copy)]
pub struct PrepareOk {
    pub id: u32,
    pub columns: u16,
    pub params: u16,
    pub warnings: u16,
}

impl Backend {
    /// Prepares `sql` for a client and leaves the server's whole reply in `out` as the client
    /// must see it (the statement id is still the server's; the caller rewrites it).
    pub async fn prepare_for_client(&mut self, sql: &[u8], out: &mut Vec<u8>) -> Result<PrepareOk, BackendError> {
        let mut request = Vec::with_capacity(sql.len() + 5);
        write_command(&mut request, 0, COM_STMT_PREPARE, sql);
        self.conn.write_all(&request).await.map_err(|e| self.lost(e))?;
        self.read_prepare_reply(Some(out)).await
    }

    /// Records that `id` on this connection is `entry`'s statement, closing the statements
    /// it displaces.
    pub async fn remember_statement(&mut self, entry: u64, id: u32, cap: usize) -> Result<(), BackendError> {
        let close = self.statements.insert(entry, id, cap);
        self.close_statements(&close).await
    }

    /// Closes server statements (COM_STMT_CLOSE has no reply).
    pub async fn close_statements(&mut self, ids: &[u32]) -> Result<(), BackendError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut out = Vec::with_capacity(ids.len() * 9);
        for id in ids {
            write_command(&mut out, 0, COM_STMT_CLOSE, &id.to_le_bytes());
        }
        self.conn.write_all(&out).await.map_err(|e| self.lost(e))
    }

    /// The server's id here for `entry`, preparing it now if this connection has not (in the
    /// entry's schema, then back to the session's, in one round trip).
    pub async fn statement_id(&mut self, entry: &Entry, cap: usize) -> Result<u32, BackendError> {
        if let Some(slot) = self.statements.get(entry.id) {
            return Ok(slot.id);
        }
        let ok = match self.prepare_entry(entry).await {
            Err(BackendError::Rejected { code: ER_MAX_PREPARED_STMT_COUNT_REACHED, .. }) if !self.statements.is_empty() => {
                // The server's own limit: this connection's statements are sluice's cache and
                // can be prepared again when needed.
                let ids: Vec<u32> = std::mem::take(&mut self.statements.slots).into_values().map(|s| s.id).collect();
                self.close_statements(&ids).await?;
                self.prepare_entry(entry).await?
            }
            r => r?,
        };
        self.remember_statement(entry.id, ok.id, cap).await?;
        Ok(ok.id)
    }

    async fn prepare_entry(&mut self, entry: &Entry) -> Result<PrepareOk, BackendError> {
        let here = self.state.schema.clone();
        // Unqualified names were resolved in the entry's schema; a connection without a
        // schema cannot return to having none, so it prepares where it is.
        let detour = entry.schema.as_deref().filter(|s| here.is_some() && here.as_deref() != Some(*s));
        let mut out = Vec::with_capacity(entry.sql.len() + 64);
        if let (Some(there), Some(here)) = (detour, here.as_deref()) {
            write_command(&mut out, 0, COM_INIT_DB, there.as_bytes());
            write_command(&mut out, 0, COM_STMT_PREPARE, &entry.sql);
            write_command(&mut out, 0, COM_INIT_DB, here.as_bytes());
        } else {
            write_command(&mut out, 0, COM_STMT_PREPARE, &entry.sql);
        }
        self.conn.write_all(&out).await.map_err(|e| self.lost(e))?;
        if detour.is_none() {
            return self.read_prepare_reply(None).await;
        }
        let mut rows = Vec::new();
        let to = self.read_result(&mut rows).await;
        let ok = self.read_prepare_reply(None).await;
        let back = self.read_result(&mut rows).await;
        if let Err(e) = back {
            // The connection is in an unknown schema now.
            self.needs_reset = true;
            return Err(e);
        }
        if let Err(e) = to {
            // Prepared in the wrong schema, if at all: not kept.
            if let Ok(wrong) = ok {
                self.close_statements(&[wrong.id]).await?;
            }
            return Err(e);
        }
        ok
    }

    /// Reads a PREPARE reply: PREPARE_OK, then its parameter and column definitions. With
    /// `out`, the packets are appended as they came (headers included).
    async fn read_prepare_reply(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<PrepareOk, BackendError> {
        let (seq, first) = self.conn.read_packet(1 << 24).await.map_err(|e| self.lost(e))?;
        if first.first() == Some(&0xFF) {
            return Err(super::backend::rejected(&self.server.name, &first));
        }
        if first.first() != Some(&0x00) || first.len() < 12 {
            return Err(BackendError::Protocol { server: self.server.name.to_string(), what: "malformed PREPARE_OK".into() });
        }
        let u16_at = |i: usize| u16::from_le_bytes([first[i], first[i + 1]]);
        let ok = PrepareOk {
            id: u32::from_le_bytes([first[1], first[2], first[3], first[4]]),
            columns: u16_at(5),
            params: u16_at(7),
            warnings: u16_at(10),
        };
        if let Some(out) = out.as_deref_mut() {
            proto::frame::write_packet(out, &mut seq.clone(), &first);
        }
        let eof = !self.deprecate_eof() as usize;
        let follow = |n: u16| if n > 0 { n as usize + eof } else { 0 };
        for _ in 0..follow(ok.params) + follow(ok.columns) {
            let (seq, p) = self.conn.read_packet(1 << 24).await.map_err(|e| self.lost(e))?;
            if let Some(out) = out.as_deref_mut() {
                proto::frame::write_packet(out, &mut seq.clone(), &p);
            }
        }
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_shares_entries_and_evicts_what_no_client_holds() {
        let r = Registry::new(3);
        let a = r.entry("u", Some("db"), b"SELECT ?", 1).unwrap();
        let again = r.entry("u", Some("db"), b"SELECT ?", 1).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert!(!Arc::ptr_eq(&a, &r.entry("u", Some("other"), b"SELECT ?", 1).unwrap()));
        assert!(!Arc::ptr_eq(&a, &r.entry("v", Some("db"), b"SELECT ?", 1).unwrap()));
        assert_eq!(r.len(), 3);
        // Full: the oldest entry no client holds goes ("u"/"other"), `a` stays.
        let d = r.entry("u", None, b"SELECT 4", 0).unwrap();
        assert_eq!(r.len(), 3);
        assert!(Arc::ptr_eq(&a, &r.entry("u", Some("db"), b"SELECT ?", 1).unwrap()));
        drop(again);
        // ("v", "db") goes; then every entry is held by a client: no room.
        let w = r.entry("w", None, b"SELECT 0", 0).unwrap();
        assert_eq!(r.len(), 3);
        assert!(r.entry("w", None, b"SELECT 9", 0).is_err());
        drop((a, d, w));
    }

    #[test]
    fn open_handles_are_capped() {
        let r = Registry::new(2);
        assert!(r.open_handle().is_ok() && r.open_handle().is_ok());
        assert!(r.open_handle().is_err());
        r.close_handles(1);
        assert!(r.open_handle().is_ok());
    }

    #[test]
    fn connection_statements_close_the_least_recently_used() {
        let mut s = Statements::default();
        assert!(s.insert(1, 10, 2).is_empty());
        assert!(s.insert(2, 20, 2).is_empty());
        assert_eq!(s.get(1).map(|s| s.id), Some(10));
        assert_eq!(s.insert(3, 30, 2), vec![20]);
        assert_eq!(s.insert(1, 11, 2), vec![10]);
        assert_eq!(s.slots.len(), 2);
        assert!(s.get(2).is_none());
    }
}
