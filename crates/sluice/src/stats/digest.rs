//! stats (beside ①–⑥): one thread's stats_mysql_query_digest entries, keyed by (hostgroup,
//! user, schema, digest), bounded by sampled least-used eviction; also the table readers merge
//! every thread's entries into.
//!
//! A hit hashes the key from the borrowed strings and compares the stored ones: no allocation.
//! An insert makes one allocation for the strings and one for the histogram (or reuses the
//! evicted entry's histogram).

use super::{DigestRow, StatementRecord};
use hashbrown::HashTable;
use hdrhistogram::Histogram;
use std::borrow::Cow;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Per-entry latency histogram: 1 µs to 10 min at 1 significant figure, u32 counts. Values of
/// 32 µs and up land in buckets 1/16 of a power of two wide, so a percentile is within ~6% of
/// the true value (exact below 32 µs); longer statements count as 10 min in the percentiles
/// (max_time stays exact). 432 counters × 4 B = 1,728 B: with the 224-byte struct, an entry
/// is about 1,950 B plus its user, schema and text (the `entry_size` test).
const HIST_LOW_US: u64 = 1;
const HIST_HIGH_US: u64 = 600_000_000;
const HIST_SIGFIG: u8 = 1;

/// Entries looked at per eviction (Redis's default sample): the least used of them goes.
const EVICTION_SAMPLE: usize = 5;

fn new_hist() -> Option<Histogram<u32>> {
    Histogram::new_with_bounds(HIST_LOW_US, HIST_HIGH_US, HIST_SIGFIG).ok()
}

/// A digest key, borrowed from the statement.
#[derive(Clone, Copy)]
struct Key<'a> {
    hostgroup: u32,
    user: &'a str,
    schema: &'a str,
    digest: u64,
}

impl Key<'_> {
    fn hash(&self) -> u64 {
        let seed = self.digest ^ u64::from(self.hostgroup).rotate_left(32);
        // The user's hash seeds the schema's, so (u, s) and (s, u) differ.
        xxh3_64_with_seed(self.schema.as_bytes(), xxh3_64_with_seed(self.user.as_bytes(), seed))
    }
}

#[derive(Clone)]
pub(crate) struct Entry {
    hash: u64,
    digest: u64,
    hostgroup: u32,
    /// user, schema and digest text in one allocation.
    strings: Box<str>,
    user_len: usize,
    schema_len: usize,
    count: u64,
    first_seen: u64,
    last_seen: u64,
    sum_time: u64,
    min_time: u64,
    max_time: u64,
    rows_sent: u64,
    rows_affected: u64,
    errors: u64,
    /// `None` only if the histogram could not be made (it always can with the bounds above).
    hist: Option<Histogram<u32>>,
    /// Time splits (the probe on), made at the first: 8 bytes per entry until then.
    split: Option<Box<SplitTimes>>,
}

/// An entry's time splits: sluice's own time, the server's and its histogram.
#[derive(Clone, Default)]
struct SplitTimes {
    proxy_count: u64,
    proxy_sum: u64,
    server_count: u64,
    server_sum: u64,
    server_max: u64,
    server: Option<Histogram<u32>>,
}

impl SplitTimes {
    fn add(&mut self, s: &super::Split) {
        self.proxy_count += 1;
        self.proxy_sum += s.proxy_us;
        if let Some(us) = s.server_us {
            self.server_count += 1;
            self.server_sum += us;
            self.server_max = self.server_max.max(us);
            if self.server.is_none() {
                self.server = new_hist();
            }
            if let Some(h) = &mut self.server {
                h.saturating_record(us);
            }
        }
    }

    fn absorb(&mut self, o: SplitTimes) {
        self.proxy_count += o.proxy_count;
        self.proxy_sum += o.proxy_sum;
        self.server_count += o.server_count;
        self.server_sum += o.server_sum;
        self.server_max = self.server_max.max(o.server_max);
        match (&mut self.server, o.server) {
            (Some(mine), Some(theirs)) => {
                let _ = mine.add(&theirs);
            }
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    fn percentile(&self, q: f64) -> u64 {
        self.server.as_ref().map_or(0, |h| h.value_at_quantile(q)).min(self.server_max)
    }
}

impl Entry {
    fn new(key: &Key<'_>, hash: u64, text: &str, now: u64, hist: Option<Histogram<u32>>) -> Entry {
        let mut strings = String::with_capacity(key.user.len() + key.schema.len() + text.len());
        strings.push_str(key.user);
        strings.push_str(key.schema);
        strings.push_str(text);
        Entry {
            hash,
            digest: key.digest,
            hostgroup: key.hostgroup,
            strings: strings.into_boxed_str(),
            user_len: key.user.len(),
            schema_len: key.schema.len(),
            count: 0,
            first_seen: now,
            last_seen: now,
            sum_time: 0,
            min_time: u64::MAX,
            max_time: 0,
            rows_sent: 0,
            rows_affected: 0,
            errors: 0,
            hist,
            split: None,
        }
    }

    fn user(&self) -> &str {
        self.strings.get(..self.user_len).unwrap_or_default()
    }
    fn schema(&self) -> &str {
        self.strings.get(self.user_len..self.user_len + self.schema_len).unwrap_or_default()
    }
    fn text(&self) -> &str {
        self.strings.get(self.user_len + self.schema_len..).unwrap_or_default()
    }

    /// Whether this entry is `key`'s: same digest and hostgroup, and the same 64-bit hash over
    /// all four, which tells user and schema apart (as ProxySQL's digest map does) without
    /// reading the strings, a cache miss per statement.
    fn is(&self, hash: u64, key: &Key<'_>) -> bool {
        self.hash == hash && self.digest == key.digest && self.hostgroup == key.hostgroup
    }

    fn key(&self) -> Key<'_> {
        Key { hostgroup: self.hostgroup, user: self.user(), schema: self.schema(), digest: self.digest }
    }

    fn add(&mut self, q: &StatementRecord<'_>, now: u64) {
        self.count += 1;
        self.last_seen = now;
        self.sum_time += q.duration_us;
        self.min_time = self.min_time.min(q.duration_us);
        self.max_time = self.max_time.max(q.duration_us);
        self.rows_sent += q.rows_sent;
        self.rows_affected += q.rows_affected;
        self.errors += u64::from(q.error);
        if let Some(h) = &mut self.hist {
            h.saturating_record(q.duration_us);
        }
        if let Some(split) = &q.split {
            self.split.get_or_insert_with(Box::default).add(split);
        }
    }

    /// Folds another thread's entry for the same key into this one.
    fn absorb(&mut self, o: Entry) {
        self.count += o.count;
        self.first_seen = self.first_seen.min(o.first_seen);
        self.last_seen = self.last_seen.max(o.last_seen);
        self.sum_time += o.sum_time;
        self.min_time = self.min_time.min(o.min_time);
        self.max_time = self.max_time.max(o.max_time);
        self.rows_sent += o.rows_sent;
        self.rows_affected += o.rows_affected;
        self.errors += o.errors;
        match (&mut self.hist, o.hist) {
            // Same bounds on both sides, so the add cannot fail.
            (Some(mine), Some(theirs)) => {
                let _ = mine.add(&theirs);
            }
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
        match (&mut self.split, o.split) {
            (Some(mine), Some(theirs)) => mine.absorb(*theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    pub(crate) fn row(&self) -> DigestRow {
        // A bucket's highest equivalent value can exceed the largest value seen.
        let pct = |q: f64| self.hist.as_ref().map_or(0, |h| h.value_at_quantile(q)).min(self.max_time);
        let split = self.split.as_deref();
        DigestRow {
            hostgroup: self.hostgroup,
            schemaname: self.schema().to_owned(),
            username: self.user().to_owned(),
            digest: self.digest,
            digest_text: self.text().to_owned(),
            count_star: self.count,
            first_seen: self.first_seen,
            last_seen: self.last_seen,
            sum_time_us: self.sum_time,
            min_time_us: if self.count == 0 { 0 } else { self.min_time },
            max_time_us: self.max_time,
            p50_us: pct(0.50),
            p95_us: pct(0.95),
            p99_us: pct(0.99),
            sum_rows_sent: self.rows_sent,
            sum_rows_affected: self.rows_affected,
            errors: self.errors,
            server_count: split.map_or(0, |s| s.server_count),
            server_time_us: split.map_or(0, |s| s.server_sum),
            server_p50_us: split.map_or(0, |s| s.percentile(0.50)),
            server_p99_us: split.map_or(0, |s| s.percentile(0.99)),
            proxy_count: split.map_or(0, |s| s.proxy_count),
            proxy_time_us: split.map_or(0, |s| s.proxy_sum),
        }
    }

    /// Bytes this entry holds: the struct, its strings and its histogram's counters.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.strings.len()
            + self.hist.as_ref().map_or(0, |h| h.distinct_values() * std::mem::size_of::<u32>())
    }
}

/// `text` cut to at most `max` bytes at a character boundary (invalid UTF-8 replaced).
fn truncated(text: &[u8], max: usize) -> Cow<'_, str> {
    let cut = text.get(..max).unwrap_or(text);
    match std::str::from_utf8(cut) {
        Ok(s) => Cow::Borrowed(s),
        // Only the cut split a character: keep what comes before it.
        Err(e) if e.error_len().is_none() => {
            Cow::Borrowed(cut.get(..e.valid_up_to()).and_then(|v| std::str::from_utf8(v).ok()).unwrap_or_default())
        }
        Err(_) => String::from_utf8_lossy(cut),
    }
}

#[derive(Default)]
pub(crate) struct DigestTable {
    entries: Vec<Entry>,
    /// Positions in `entries`, hashed by the entry's key hash.
    index: HashTable<u32>,
    /// xorshift state for eviction sampling.
    rng: u64,
}

impl DigestTable {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn find(&self, hash: u64, key: &Key<'_>) -> Option<usize> {
        let entries = &self.entries;
        self.index.find(hash, |&i| entries.get(i as usize).is_some_and(|e| e.is(hash, key))).map(|&i| i as usize)
    }

    fn push(&mut self, e: Entry) {
        let pos = self.entries.len() as u32;
        let hash = e.hash;
        self.entries.push(e);
        let entries = &self.entries;
        self.index.insert_unique(hash, pos, |&i| entries.get(i as usize).map_or(0, |e| e.hash));
    }

    /// Removes the entry at `pos`; the last entry takes its place.
    fn remove_at(&mut self, pos: usize) -> Option<Entry> {
        let hash = self.entries.get(pos)?.hash;
        if let Ok(slot) = self.index.find_entry(hash, |&i| i as usize == pos) {
            slot.remove();
        }
        let last = self.entries.len() - 1;
        let gone = self.entries.swap_remove(pos);
        if pos != last {
            if let Some(moved) = self.entries.get(pos).map(|e| e.hash) {
                if let Some(slot) = self.index.find_mut(moved, |&i| i as usize == last) {
                    *slot = pos as u32;
                }
            }
        }
        Some(gone)
    }

    fn next_random(&mut self) -> u64 {
        if self.rng == 0 {
            self.rng = 0x9E37_79B9_7F4A_7C15;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Evicts the least used of a few randomly chosen entries (fewest statements, then the
    /// longest unseen): O(1), and close to LFU once the table holds hot and cold digests.
    fn evict_one(&mut self) -> Option<Entry> {
        let n = self.entries.len() as u64;
        if n == 0 {
            return None;
        }
        let mut victim: Option<(usize, u64, u64)> = None;
        // A table no bigger than the sample is scanned whole.
        let whole = n as usize <= EVICTION_SAMPLE;
        for k in 0..EVICTION_SAMPLE.min(n as usize) {
            let pos = if whole { k } else { (self.next_random() % n) as usize };
            let Some(e) = self.entries.get(pos) else { continue };
            if victim.is_none_or(|(_, count, seen)| (e.count, e.last_seen) < (count, seen)) {
                victim = Some((pos, e.count, e.last_seen));
            }
        }
        self.remove_at(victim?.0)
    }

    /// Counts one statement. Returns the entries evicted to make room (0 on a hit).
    pub(crate) fn record(&mut self, q: &StatementRecord<'_>, now: u64, cap: usize, max_text: usize) -> u64 {
        let key = Key { hostgroup: q.hostgroup, user: q.user, schema: q.schema, digest: q.digest };
        let hash = key.hash();
        if let Some(pos) = self.find(hash, &key) {
            if let Some(e) = self.entries.get_mut(pos) {
                e.add(q, now);
            }
            return 0;
        }
        if cap == 0 {
            return 0;
        }
        // Loops only after the cap was lowered; then the table shrinks to it at once.
        let mut evicted = 0;
        let mut spare = None;
        while self.entries.len() >= cap {
            let Some(gone) = self.evict_one() else { break };
            evicted += 1;
            spare = gone.hist;
        }
        let hist = match spare {
            Some(mut h) => {
                h.reset();
                Some(h)
            }
            None => new_hist(),
        };
        let mut e = Entry::new(&key, hash, &truncated(q.digest_text, max_text), now, hist);
        e.add(q, now);
        self.push(e);
        evicted
    }

    /// Folds `e` into the entry with its key, or adds it; beyond `cap` entries evicts first
    /// and returns how many went.
    pub(crate) fn absorb(&mut self, e: Entry, cap: usize) -> u64 {
        let found = self.find(e.hash, &e.key());
        if let Some(mine) = found.and_then(|pos| self.entries.get_mut(pos)) {
            mine.absorb(e);
            return 0;
        }
        let mut evicted = 0;
        while self.entries.len() >= cap.max(1) {
            if self.evict_one().is_none() {
                break;
            }
            evicted += 1;
        }
        self.push(e);
        evicted
    }

    /// Copies of every entry (for a reader, under this thread's lock).
    pub(crate) fn snapshot(&self) -> Vec<Entry> {
        self.entries.clone()
    }

    /// Every entry, leaving the table empty (its index keeps its capacity). `fresh` becomes
    /// the new entry vector, so the caller can allocate it before taking the lock.
    pub(crate) fn take(&mut self, fresh: Vec<Entry>) -> Vec<Entry> {
        self.index.clear();
        std::mem::replace(&mut self.entries, fresh)
    }

    pub(crate) fn into_entries(self) -> Vec<Entry> {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Command;

    fn ev<'a>(user: &'a str, digest: u64, text: &'a [u8], us: u64) -> StatementRecord<'a> {
        StatementRecord {
            hostgroup: 1,
            server: 0,
            user,
            schema: "db",
            digest,
            digest_text: text,
            command: Command::Select,
            duration_us: us,
            rows_sent: 1,
            rows_affected: 0,
            error: false,
            bytes_sent: 0,
            bytes_recv: 0,
            ended: std::time::Instant::now(),
            split: None,
        }
    }

    #[test]
    fn hit_updates_and_key_includes_every_part() {
        let mut t = DigestTable::default();
        assert_eq!(t.record(&ev("u", 7, b"select ?", 10), 100, 10, 100), 0);
        assert_eq!(t.record(&ev("u", 7, b"ignored on a hit", 30), 105, 10, 100), 0);
        assert_eq!(t.len(), 1);
        t.record(&ev("v", 7, b"select ?", 10), 100, 10, 100);
        t.record(&StatementRecord { hostgroup: 2, ..ev("u", 7, b"select ?", 10) }, 100, 10, 100);
        t.record(&StatementRecord { schema: "other", ..ev("u", 7, b"select ?", 10) }, 100, 10, 100);
        // ("u", "db") and ("ud", "b") concatenate alike but are different keys.
        t.record(&StatementRecord { user: "ud", schema: "b", ..ev("u", 7, b"select ?", 10) }, 100, 10, 100);
        t.record(&ev("u", 8, b"select ?", 10), 100, 10, 100);
        assert_eq!(t.len(), 6);
        let rows: Vec<_> = t.snapshot().iter().map(Entry::row).collect();
        let r = &rows[0];
        assert_eq!((r.count_star, r.sum_time_us, r.min_time_us, r.max_time_us), (2, 40, 10, 30));
        assert_eq!((r.first_seen, r.last_seen, r.sum_rows_sent), (100, 105, 2));
        assert_eq!((r.username.as_str(), r.schemaname.as_str(), r.digest_text.as_str()), ("u", "db", "select ?"));
        assert!(r.p50_us >= 9 && r.p50_us <= 10, "{}", r.p50_us);
        assert_eq!(r.p99_us, 30);
    }

    #[test]
    fn time_splits_are_summed_apart_from_the_statements_without_one() {
        use crate::stats::Split;
        let mut t = DigestTable::default();
        t.record(&ev("u", 7, b"select ?", 250), 100, 10, 100);
        assert_eq!(t.snapshot()[0].row().server_count, 0, "no split, no server time");
        let split = |proxy_us, server_us| Some(Split { proxy_us, server_us });
        t.record(&StatementRecord { split: split(20, Some(200)), ..ev("u", 7, b"select ?", 250) }, 101, 10, 100);
        t.record(&StatementRecord { split: split(30, Some(100)), ..ev("u", 7, b"select ?", 150) }, 102, 10, 100);
        t.record(&StatementRecord { split: split(10, None), ..ev("u", 7, b"select ?", 50) }, 103, 10, 100);
        let r = t.snapshot()[0].row();
        assert_eq!((r.count_star, r.server_count, r.server_time_us, r.proxy_count, r.proxy_time_us), (4, 2, 300, 3, 60));
        // Within the histogram's precision, never above the largest.
        assert!((100..=106).contains(&r.server_p50_us) && r.server_p99_us == 200, "{r:?}");
        // Merged across threads like the rest of the entry.
        let mut all = DigestTable::default();
        for e in t.snapshot().into_iter().chain(t.snapshot()) {
            all.absorb(e, usize::MAX);
        }
        let r = all.snapshot()[0].row();
        assert_eq!((r.server_count, r.server_time_us, r.proxy_count, r.proxy_time_us, r.server_p99_us), (4, 600, 6, 120, 200));
    }

    #[test]
    fn text_truncates_at_a_char_boundary() {
        assert_eq!(truncated("héllo".as_bytes(), 2), "h");
        assert_eq!(truncated("héllo".as_bytes(), 3), "hé");
        assert_eq!(truncated(b"abc", 10), "abc");
        assert_eq!(truncated(b"a\xffb", 10), "a\u{fffd}b");
        let mut t = DigestTable::default();
        t.record(&ev("u", 1, "select 'é'".as_bytes(), 1), 0, 10, 9);
        assert_eq!(t.snapshot()[0].row().digest_text, "select '");
    }

    #[test]
    fn eviction_keeps_the_cap_and_prefers_the_least_used() {
        let mut t = DigestTable::default();
        for _ in 0..100 {
            t.record(&ev("u", 1, b"hot", 1), 0, 4, 100);
        }
        let mut evicted = 0;
        for d in 2..1000 {
            evicted += t.record(&ev("u", d, b"cold", 1), 0, 4, 100);
            assert!(t.len() <= 4);
        }
        assert_eq!(evicted, 998 - 3);
        // The hot entry is sampled often enough that it survives a long stream of cold ones.
        assert!(t.snapshot().iter().any(|e| e.digest == 1 && e.count == 100));
        // The index still finds every entry after all the swap_removes.
        for e in t.snapshot() {
            assert_eq!(t.find(e.hash, &e.key()).map(|p| t.entries[p].digest), Some(e.digest));
        }
        // Lowering the cap shrinks the table on the next insert.
        evicted = t.record(&ev("u", 5000, b"new", 1), 0, 2, 100);
        assert_eq!((evicted, t.len()), (3, 2));
        assert_eq!(t.record(&ev("u", 5001, b"new", 1), 0, 0, 100), 0, "cap 0 adds nothing");
    }

    #[test]
    fn entry_size() {
        let mut t = DigestTable::default();
        t.record(&ev("sbtest", 1, b"SELECT c FROM sbtest1 WHERE id=?", 1), 0, 10, 100);
        let e = &t.snapshot()[0];
        let bytes = e.footprint();
        // Documented in HIST_* and in the module's report: about 2 KB plus the text.
        assert!(bytes < 2_048, "{bytes} bytes");
        assert_eq!(e.hist.as_ref().map(|h| h.distinct_values()), Some(432));
    }
}
