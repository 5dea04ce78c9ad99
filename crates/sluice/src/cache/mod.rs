//! The result cache (beside ⑥ exec): replies to SELECTs a query rule's `cache_ttl` marks
//! cacheable, kept as the server's packets and served again without a backend while they are
//! fresh (TTL) and no write through sluice touched their tables (`tables`).
//!
//! Entries are keyed by everything that changes a reply's bytes: the login, schema, target
//! hostgroup, statement text, the session's tracked settings (character sets, collation,
//! sql_mode, time_zone… every variable the session set) and the client's capability flags
//! (CLIENT_DEPRECATE_EOF, MariaDB's extended metadata…). `SHARDS` independent LRU maps, each
//! behind its own mutex, bound the memory together (`[cache] max_memory_bytes`); a statement
//! with no cache_ttl never reaches this module.

mod reply;
pub mod tables;

pub use reply::{CachedReply, Capture};
pub use tables::{Generations, Stamp, WriteMarks};

use crate::config::CacheSection;
use crate::stats::{Counter, Stats};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// Independent parts of the cache (each its own lock and LRU order).
pub const SHARDS: usize = crate::config::CACHE_SHARDS;

/// Bookkeeping bytes counted per entry beside its reply, text and stamp.
const ENTRY_OVERHEAD: usize = 96;

/// What a cached reply must match, beside its statement text.
pub struct KeyParts<'a> {
    pub user: &'a str,
    pub schema: &'a str,
    pub hostgroup: u32,
    /// The session's login collation and the variables it set (`pool::state::State`).
    pub collation: u16,
    pub vars: &'a [(Box<str>, Box<str>)],
    pub capabilities: u32,
    pub mariadb_caps: u32,
}

/// An entry's key: a 128-bit hash of its `KeyParts` and text (the text is compared too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(u128);

impl Key {
    pub fn new(parts: &KeyParts, text: &[u8]) -> Key {
        let mut h = Xxh3::new();
        let mut field = |b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        field(parts.user.as_bytes());
        field(parts.schema.as_bytes());
        field(&parts.hostgroup.to_le_bytes());
        field(&parts.capabilities.to_le_bytes());
        field(&parts.mariadb_caps.to_le_bytes());
        field(&parts.collation.to_le_bytes());
        for (name, value) in parts.vars {
            field(name.as_bytes());
            field(value.as_bytes());
        }
        field(text);
        Key(h.digest128())
    }

    fn shard(self) -> usize {
        (self.0 as usize) % SHARDS
    }
}

struct Entry {
    text: Box<[u8]>,
    reply: Arc<CachedReply>,
    stamp: Stamp,
    expires: Instant,
    bytes: usize,
}

struct Shard {
    entries: lru::LruCache<Key, Entry>,
    bytes: usize,
}

/// The cache: shared by every session (`DataPath::cache`), kept across reloads.
pub struct QueryCache {
    shards: Box<[Mutex<Shard>]>,
    pub generations: Arc<Generations>,
    max_memory: AtomicUsize,
    max_entry: AtomicUsize,
    entries: AtomicUsize,
    bytes: AtomicUsize,
    /// A rule with cache_ttl has been loaded since start: from then on writes through sluice
    /// mark their tables (before, there is nothing to invalidate).
    in_use: AtomicBool,
    stats: Arc<Stats>,
}

/// A lookup that found nothing fresh: what storing its result needs.
pub struct Miss {
    pub key: Key,
    pub stamp: Stamp,
    pub ttl: Duration,
}

impl QueryCache {
    pub fn new(settings: &CacheSection, stats: Arc<Stats>) -> QueryCache {
        let cache = QueryCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard { entries: lru::LruCache::unbounded(), bytes: 0 })).collect(),
            generations: Arc::default(),
            max_memory: AtomicUsize::new(0),
            max_entry: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            in_use: AtomicBool::new(false),
            stats,
        };
        cache.apply(settings, false);
        cache
    }

    /// The settings of a configuration put in force; `rules_cache` says whether one of its
    /// query rules has a cache_ttl. A smaller bound evicts at the next store in each shard.
    pub fn apply(&self, settings: &CacheSection, rules_cache: bool) {
        self.max_memory.store(settings.max_memory_bytes, Relaxed);
        self.max_entry.store(settings.max_entry_bytes.min(settings.max_memory_bytes / SHARDS), Relaxed);
        if rules_cache {
            self.in_use.store(true, Relaxed);
        }
    }

    /// Whether writes must mark their tables (one relaxed load: the cost of the cache for a
    /// session that never uses it).
    pub fn in_use(&self) -> bool {
        self.in_use.load(Relaxed)
    }

    /// The largest reply stored.
    pub fn max_entry_bytes(&self) -> usize {
        self.max_entry.load(Relaxed)
    }

    /// Entries and bytes held now.
    pub fn entries(&self) -> usize {
        self.entries.load(Relaxed)
    }
    pub fn memory_bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    fn shard(&self, key: Key) -> std::sync::MutexGuard<'_, Shard> {
        // A panic while holding a shard cannot leave it inconsistent in a way that matters
        // here (counts are recomputed on removal): carry on.
        self.shards[key.shard()].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh reply for `key` and `text`, else what storing one needs (`slots`: the table
    /// slots of the statement, stamped now, before it is sent).
    pub fn get(&self, key: Key, text: &[u8], slots: &[u16], ttl: Duration) -> Result<Arc<CachedReply>, Miss> {
        self.stats.add(Counter::QueryCacheGet, 1);
        let now = Instant::now();
        {
            let mut shard = self.shard(key);
            if let Some(e) = shard.entries.get(&key) {
                if &*e.text == text && e.expires > now && self.generations.current(&e.stamp) {
                    let reply = e.reply.clone();
                    drop(shard);
                    self.stats.add(Counter::QueryCacheGetOk, 1);
                    self.stats.add(Counter::QueryCacheBytesOut, reply.bytes() as u64);
                    return Ok(reply);
                }
                // Expired, invalidated, or another text under the same hash: dropped.
                if let Some(e) = shard.entries.pop(&key) {
                    self.forget(&mut shard, &e);
                    self.stats.add(Counter::QueryCachePurged, 1);
                }
            }
        }
        Err(Miss { key, stamp: self.generations.stamp(slots), ttl })
    }

    /// Stores a reply for a miss, unless a write overlapped its SELECT or it is too large. (A
    /// write that begins right after the check finds the entry already stale: `get` checks
    /// the stamp.) Evicts the least recently used entries of its shard to stay within the bound.
    pub fn put(&self, miss: Miss, text: &[u8], reply: CachedReply) -> bool {
        let bytes = reply.bytes() + text.len() + miss.stamp.bytes() + ENTRY_OVERHEAD;
        let shard_bound = self.max_memory.load(Relaxed) / SHARDS;
        if bytes > shard_bound || reply.bytes() > self.max_entry_bytes() || !self.generations.may_store(&miss.stamp) {
            return false;
        }
        let reply_len = reply.bytes() as u64;
        let entry = Entry { text: text.into(), reply: Arc::new(reply), stamp: miss.stamp, expires: Instant::now() + miss.ttl, bytes };
        let mut evicted = 0;
        {
            let mut shard = self.shard(miss.key);
            if let Some(old) = shard.entries.put(miss.key, entry) {
                self.forget(&mut shard, &old);
            }
            shard.bytes += bytes;
            self.bytes.fetch_add(bytes, Relaxed);
            self.entries.fetch_add(1, Relaxed);
            while shard.bytes > shard_bound {
                let Some((_, old)) = shard.entries.pop_lru() else { break };
                self.forget(&mut shard, &old);
                evicted += 1;
            }
        }
        self.stats.add(Counter::QueryCacheEvicted, evicted);
        self.stats.add(Counter::QueryCacheSet, 1);
        self.stats.add(Counter::QueryCacheBytesIn, reply_len);
        true
    }

    fn forget(&self, shard: &mut Shard, e: &Entry) {
        shard.bytes -= e.bytes;
        self.bytes.fetch_sub(e.bytes, Relaxed);
        self.entries.fetch_sub(1, Relaxed);
    }

    /// A write through sluice marked tables (for the counter).
    pub fn invalidated(&self) {
        self.stats.add(Counter::QueryCacheInvalidations, 1);
    }
}

#[cfg(test)]
mod tests;
