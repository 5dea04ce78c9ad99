//! Invalidation by table: a generation per table slot, bumped by every write through sluice.
//!
//! A table (schema and name, any case) hashes to one of `SLOTS` slots; two tables sharing a
//! slot only invalidate each other more often. Each slot has a generation and a count of the
//! writes in progress on it; one more slot stands for "every table" (a write sluice cannot
//! list). A write raises its slots' generations and counts itself in before it is sent, and
//! raises them again and counts itself out after its transaction ends (`WriteMarks`):
//!
//! - a cached result records the generations of its tables when its SELECT began, and is
//!   served only while they are unchanged: the first raise, before the write reaches the server,
//!   makes every earlier result unservable, so none is served once the write's OK is out;
//! - a result is stored only if no write is in progress on its tables and their generations
//!   did not move since its SELECT began: a SELECT that overlapped a write (and may have read
//!   before it) stores nothing.
//!
//! Atomics only: no lock and no allocation on either side.

use sql::tables::TableName;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

/// Table slots (a power of two).
pub const SLOTS: usize = 4096;

#[derive(Default)]
struct Slot {
    generation: AtomicU64,
    writing: AtomicU32,
}

/// The generations of every table slot, and of "every table".
pub struct Generations {
    slots: Box<[Slot]>,
    all: Slot,
}

impl Default for Generations {
    fn default() -> Self {
        Generations { slots: (0..SLOTS).map(|_| Slot::default()).collect(), all: Slot::default() }
    }
}

/// The slot of a table: `name.schema`, or `default_schema` for an unqualified name.
pub fn slot_of(name: &TableName, default_schema: &[u8]) -> u16 {
    let mut h = Xxh3::new();
    let mut lower = [0u8; 64];
    for part in [name.schema.unwrap_or(default_schema), b"\0", name.name] {
        for chunk in part.chunks(lower.len()) {
            let out = &mut lower[..chunk.len()];
            out.copy_from_slice(chunk);
            out.make_ascii_lowercase();
            h.update(out);
        }
    }
    (h.digest() as usize % SLOTS) as u16
}

/// The generations a SELECT's tables had when it began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    all: u64,
    tables: Box<[(u16, u64)]>,
}

impl Stamp {
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Stamp>() + self.tables.len() * std::mem::size_of::<(u16, u64)>()
    }
}

impl Generations {
    fn slot(&self, i: u16) -> &Slot {
        // `slot_of` stays below SLOTS; any other index means "every table".
        self.slots.get(usize::from(i)).unwrap_or(&self.all)
    }

    /// The generations of `slots` now.
    pub fn stamp(&self, slots: &[u16]) -> Stamp {
        Stamp { all: self.all.generation.load(SeqCst), tables: slots.iter().map(|&s| (s, self.slot(s).generation.load(SeqCst))).collect() }
    }

    /// A result stamped so is still what the server would answer (no write since).
    pub fn current(&self, stamp: &Stamp) -> bool {
        self.all.generation.load(SeqCst) == stamp.all && stamp.tables.iter().all(|&(s, g)| self.slot(s).generation.load(SeqCst) == g)
    }

    /// A SELECT stamped so at its start may store its result: no write in progress on its
    /// tables, and none began or ended since.
    pub fn may_store(&self, stamp: &Stamp) -> bool {
        let idle = |s: &Slot| s.writing.load(SeqCst) == 0;
        idle(&self.all) && stamp.tables.iter().all(|&(s, _)| idle(self.slot(s))) && self.current(stamp)
    }

    fn begin(&self, s: &Slot) {
        s.writing.fetch_add(1, SeqCst);
        s.generation.fetch_add(1, SeqCst);
    }

    fn end(&self, s: &Slot) {
        s.generation.fetch_add(1, SeqCst);
        s.writing.fetch_sub(1, SeqCst);
    }
}

/// The table slots a session's writes hold, from before its first write is sent until its
/// transaction ends (`release`, or drop): results of those tables stored before are no longer
/// served, and none is stored meanwhile. Dropped (the session ended), it is released.
pub struct WriteMarks {
    generations: Arc<Generations>,
    slots: Vec<u16>,
    all: bool,
}

impl Drop for WriteMarks {
    fn drop(&mut self) {
        self.release();
    }
}

impl WriteMarks {
    pub fn new(generations: Arc<Generations>) -> WriteMarks {
        WriteMarks { generations, slots: Vec::new(), all: false }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && !self.all
    }

    /// Marks `slots` (or every table), each once per transaction. Returns whether anything
    /// new was marked.
    pub fn mark(&mut self, slots: impl IntoIterator<Item = u16>, everything: bool) -> bool {
        let generations = &*self.generations;
        let mut marked = false;
        if everything && !self.all {
            generations.begin(&generations.all);
            self.all = true;
            marked = true;
        }
        for s in slots {
            if !self.slots.contains(&s) {
                generations.begin(generations.slot(s));
                self.slots.push(s);
                marked = true;
            }
        }
        marked
    }

    /// The transaction ended: the marks are raised once more and dropped.
    pub fn release(&mut self) {
        let generations = &*self.generations;
        for s in self.slots.drain(..) {
            generations.end(generations.slot(s));
        }
        if std::mem::take(&mut self.all) {
            generations.end(&generations.all);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &'static str) -> TableName<'static> {
        TableName { schema: None, name: name.as_bytes() }
    }

    #[test]
    fn slots_ignore_case_and_resolve_the_schema() {
        let qualified = TableName { schema: Some(b"Shop"), name: b"Orders" };
        assert_eq!(slot_of(&qualified, b"other"), slot_of(&t("orders"), b"shop"));
        assert_ne!(slot_of(&t("orders"), b"shop"), slot_of(&t("orders"), b"other"));
        let long = "x".repeat(200);
        let upper = long.to_uppercase();
        assert_eq!(
            slot_of(&TableName { schema: None, name: long.as_bytes() }, b"d"),
            slot_of(&TableName { schema: None, name: upper.as_bytes() }, b"d")
        );
    }

    #[test]
    fn a_write_makes_earlier_results_stale_and_overlapping_ones_unstorable() {
        let g = Arc::new(Generations::default());
        let (a, b) = (slot_of(&t("a"), b"d"), slot_of(&t("b"), b"d"));
        let before = g.stamp(&[a]);
        let other = g.stamp(&[b]);
        let mut marks = WriteMarks::new(g.clone());
        assert!(marks.mark([a], false));
        assert!(!marks.mark([a], false), "once per transaction");
        assert!(!g.current(&before), "stale from the moment the write is marked");
        let during = g.stamp(&[a]);
        assert!(!g.may_store(&during), "a write is in progress");
        assert!(g.may_store(&other) && g.current(&other), "other tables are untouched");
        marks.release();
        assert!(marks.is_empty());
        assert!(!g.may_store(&during), "began during the write: may have read before it");
        let after = g.stamp(&[a]);
        assert!(g.may_store(&after));
    }

    #[test]
    fn a_write_to_every_table_invalidates_all() {
        let g = Arc::new(Generations::default());
        let s = g.stamp(&[slot_of(&t("a"), b"d")]);
        let none = g.stamp(&[]);
        let mut marks = WriteMarks::new(g.clone());
        marks.mark([], true);
        assert!(!g.current(&s) && !g.current(&none));
        assert!(!g.may_store(&g.stamp(&[])));
        // Dropped (the session ended mid-transaction): released.
        drop(marks);
        assert!(g.may_store(&g.stamp(&[])));
    }
}
