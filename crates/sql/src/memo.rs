//! The digest memo, part of step ③ (rules) input: statements of one shape that differ only in
//! their literal values have one digest, so a worker keeps each recent shape's digest with the
//! statement it came from (the template) and checks a new statement against the template
//! instead of digesting it again. In place, with caches cold between statements, digesting
//! costs several times what checking a template does (BENCHMARKS.md, issue 5).
//!
//! A template is the statement's bytes with its literal tokens (strings, numbers, hex/bit
//! literals) as holes. A statement matches when every byte outside the holes is the same and
//! each hole holds exactly one token of the hole's kind that starts with the same byte (any
//! digit for a digit). Then the lexer yields the same tokens but for literal values, and the
//! digest reads of a literal only its kind and where it sits, so the digest is the template's:
//! the memo never changes a digest, it only skips computing it.
//!
//! Why the first byte: the token before a hole may look at the byte after it (`1e` before a
//! sign or digit, a word before a digit). Same first byte class, same token before.
//!
//! Bounded: 2 × 256 templates of at most `MAX_TEMPLATE_LEN` bytes and `MAX_HOLES` literals;
//! other statements are digested directly. A template is built on its shape's second sight, so
//! a stream of one-off statements costs a key and a slot, and a shape whose template keeps
//! failing (IN lists of changing length under one key) is rebuilt only now and then until it
//! matches again.
//!
//! A template may also carry a note (`digest_noted`): what the caller read from the template's
//! text that holds for every statement it matches, such as facts that depend on the tokens and
//! not on literal values. The note is made when the template is built, from the template's
//! text, and handed back with each match.

use std::ops::Range;

use crate::digest::{digest_into, Digest};
use crate::lexer::{equal, in_range, is_word_byte, word_bytes, Kind, Lexer, HIGH};

/// Statements longer than this are digested directly.
pub const MAX_TEMPLATE_LEN: usize = 2048;
/// Nor is a template kept for a statement with more literals than this (bulk rows and long
/// IN lists, whose length rarely repeats). With the length cap: at most ~3 MB per worker.
const MAX_HOLES: usize = 128;
/// Sets of two templates each (a power of two).
const SETS: usize = 256;
/// Failed matches in a row after which a slot's template is rebuilt only every
/// `REBUILD_EVERY`th time (until it matches again): a shape that keeps changing under one key
/// costs a failed match, and rarely a build.
const MAX_STRIKES: u32 = 3;
const REBUILD_EVERY: u32 = 16;

/// One worker's memo. Not shared: each worker thread has its own, so no lock. `N`: the notes
/// its templates carry (`digest_noted`; none by default).
pub struct DigestMemo<N = ()> {
    /// Each set's two shape keys, apart from the slots: a lookup reads one cache line.
    keys: Vec<[u64; 2]>,
    slots: Vec<Slot<N>>,
    tick: u32,
    /// Statements whose digest came from a template.
    pub hits: u64,
    /// Statements digested (no template, or it did not match).
    pub misses: u64,
}

struct Slot<N> {
    /// A template is here (else the key has been seen once).
    built: bool,
    strikes: u32,
    /// Last use, for replacing the older of a set's two slots.
    used: u32,
    /// The template's bytes, then its digest text: one allocation, read in one go.
    bytes: Vec<u8>,
    raw_len: usize,
    holes: Vec<Hole>,
    id: u64,
    comment: Option<(usize, usize)>,
    /// The caller's note on the template (`digest_noted`).
    note: Option<N>,
}

impl<N> Default for Slot<N> {
    fn default() -> Self {
        Slot { built: false, strikes: 0, used: 0, bytes: Vec::new(), raw_len: 0, holes: Vec::new(), id: 0, comment: None, note: None }
    }
}

impl<N> Default for DigestMemo<N> {
    fn default() -> Self {
        DigestMemo { keys: Vec::new(), slots: Vec::new(), tick: 0, hits: 0, misses: 0 }
    }
}

/// A literal token of the template.
#[derive(Clone, Copy)]
struct Hole {
    start: u32,
    end: u32,
    kind: Kind,
    first: u8,
}

impl DigestMemo {
    pub fn new() -> Self {
        Self::default()
    }

    /// The digest of `sql`, its text in `out`: what `digest_into` returns, from a template
    /// when one matches.
    pub fn digest(&mut self, sql: &[u8], out: &mut Vec<u8>) -> Digest {
        self.digest_noted(sql, out, |_| None).0
    }
}

impl<N: Copy> DigestMemo<N> {
    /// A memo whose templates carry notes.
    pub fn with_notes() -> Self {
        Self::default()
    }

    /// `digest`, with the note of the template `sql` matched or was just made into: `note`
    /// of the template's text, called once when the template is built. `None` when no template
    /// served `sql` (then nothing is known of it).
    pub fn digest_noted(&mut self, sql: &[u8], out: &mut Vec<u8>, note: impl FnOnce(&[u8]) -> Option<N>) -> (Digest, Option<N>) {
        if sql.len() > MAX_TEMPLATE_LEN {
            self.misses += 1;
            return (digest_into(sql, out), None);
        }
        if self.slots.is_empty() {
            self.keys = vec![[0; 2]; SETS];
            self.slots.resize_with(SETS * 2, Slot::default);
        }
        self.tick = self.tick.wrapping_add(1);
        let key = shape_key(sql);
        let set = key as usize & (SETS - 1);
        let Some(keys) = self.keys.get_mut(set) else { return (digest_into(sql, out), None) };
        let older = |a: Option<&Slot<N>>, b: Option<&Slot<N>>| a.map_or(0, |s| s.used) > b.map_or(0, |s| s.used);
        let (way, found) = match *keys {
            [k, _] if k == key => (0, true),
            [_, k] if k == key => (1, true),
            // Not here: the less recently used of the two makes room.
            _ => (usize::from(older(self.slots.get(set * 2), self.slots.get(set * 2 + 1))), false),
        };
        if let Some(k) = keys.get_mut(way) {
            *k = key;
        }
        let Some(slot) = self.slots.get_mut(set * 2 + way) else { return (digest_into(sql, out), None) };
        slot.used = self.tick;
        if found && slot.built {
            if let Some(first_comment) = slot.matches(sql) {
                slot.strikes = 0;
                out.clear();
                out.extend_from_slice(slot.bytes.get(slot.raw_len..).unwrap_or_default());
                self.hits += 1;
                return (Digest { id: slot.id, first_comment }, slot.note);
            }
            slot.strikes = slot.strikes.wrapping_add(1);
        }
        self.misses += 1;
        let d = digest_into(sql, out);
        if !found {
            // First sight here: the template is built if the shape comes again.
            slot.built = false;
            slot.strikes = 0;
        } else if slot.strikes <= MAX_STRIKES || slot.strikes % REBUILD_EVERY == 0 {
            slot.build(sql, out, &d);
            if slot.built {
                slot.note = note(sql);
                return (d, slot.note);
            }
        }
        (d, None)
    }
}

impl<N> Slot<N> {
    fn build(&mut self, sql: &[u8], text: &[u8], d: &Digest) {
        self.holes.clear();
        self.built = false;
        self.note = None;
        for t in Lexer::new(sql) {
            if matches!(t.kind, Kind::String | Kind::Number | Kind::HexOrBit) {
                if self.holes.len() == MAX_HOLES {
                    return;
                }
                let first = sql.get(t.start).copied().unwrap_or(0);
                // Positions fit: templates are at most MAX_TEMPLATE_LEN bytes.
                self.holes.push(Hole { start: t.start as u32, end: t.end as u32, kind: t.kind, first });
            }
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(sql);
        self.bytes.extend_from_slice(text);
        self.raw_len = sql.len();
        self.id = d.id;
        self.comment = d.first_comment.as_ref().map(|r| (r.start, r.end));
        self.built = true;
    }

    /// `Some(first comment range in sql)` when `sql` is this template with other literals.
    fn matches(&self, sql: &[u8]) -> Option<Option<Range<usize>>> {
        // `r` walks the template, `s` the statement; between holes they differ by a shift.
        let raw = self.bytes.get(..self.raw_len)?;
        let (mut r, mut s) = (0usize, 0usize);
        let mut comment_shift = None;
        for h in &self.holes {
            let (start, end) = (h.start as usize, h.end as usize);
            let same = raw.get(r..start)?;
            if sql.get(s..s + same.len())? != same {
                return None;
            }
            if let Some((a, _)) = self.comment {
                if comment_shift.is_none() && a < start {
                    comment_shift = Some(s as isize - r as isize);
                }
            }
            s += same.len();
            let first = *sql.get(s)?;
            if first != h.first && !(first.is_ascii_digit() && h.first.is_ascii_digit()) {
                return None;
            }
            let t = Lexer::at(sql, s).next()?;
            if t.kind != h.kind || t.start != s {
                return None;
            }
            (r, s) = (end, t.end);
        }
        if sql.get(s..)? != raw.get(r..)? {
            return None;
        }
        let shift = comment_shift.unwrap_or(s as isize - r as isize);
        Some(self.comment.map(|(a, b)| a.saturating_add_signed(shift)..b.saturating_add_signed(shift)))
    }
}

/// Which template to try: a hash of the bytes before the first literal-looking byte (a quote,
/// or a digit that does not continue a word), at most 64, and of those after the last quote or
/// digit, at most 32. Equal for statements that differ only in literal values (but for rare
/// literal forms, which then just miss); the match itself decides.
fn shape_key(sql: &[u8]) -> u64 {
    let p = head_len(sql);
    let q = tail_start(sql, sql.len().saturating_sub(32).max(p));
    let head = sql.get(..p).unwrap_or_default();
    let tail = sql.get(q..).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64_with_seed(tail, xxhash_rust::xxh3::xxh3_64(head))
}

/// The bytes of ASCII `y` (high bits clear) that are quotes or digits, as high bits.
#[inline(always)]
fn quotes_digits(y: u64) -> (u64, u64) {
    (equal(y, b'\'') | equal(y, b'"'), in_range(y, b'0', b'9'))
}

/// Where the head of `shape_key` ends. Eight bytes at a time (SWAR): a byte loop here cost
/// more than the whole template match.
fn head_len(sql: &[u8]) -> usize {
    let n = sql.len().min(64);
    let mut p = 0;
    // High bit set: the byte before the chunk is a word byte.
    let mut carry = 0u64;
    while let Some(b) = sql.get(p..p + 8).filter(|_| p + 8 <= n).and_then(|b| b.first_chunk::<8>()) {
        let x = u64::from_le_bytes(*b);
        let ascii = !x & HIGH;
        let y = x & !HIGH;
        let (quote, digit) = quotes_digits(y);
        let (quote, digit) = (quote & ascii, digit & ascii);
        let word = word_bytes(x);
        let after_word = (word << 8) | carry;
        let stop = quote | (digit & !after_word);
        if stop != 0 {
            return p + (stop.trailing_zeros() / 8) as usize;
        }
        carry = (word >> 56) & 0x80;
        p += 8;
    }
    let mut in_word = carry != 0;
    while let Some(&c) = sql.get(p).filter(|_| p < n) {
        if c == b'\'' || c == b'"' || (c.is_ascii_digit() && !in_word) {
            break;
        }
        in_word = is_word_byte(c);
        p += 1;
    }
    p
}

/// Where the tail of `shape_key` starts: just after the last quote or digit at or after `lo`.
fn tail_start(sql: &[u8], lo: usize) -> usize {
    let mut q = sql.len();
    while q >= lo + 8 {
        let Some(b) = sql.get(q - 8..q).and_then(|b| b.first_chunk::<8>()) else { break };
        let x = u64::from_le_bytes(*b);
        let (quote, digit) = quotes_digits(x & !HIGH);
        let hit = (quote | digit) & !x & HIGH;
        if hit != 0 {
            return q - 8 + (8 - hit.leading_zeros() / 8) as usize;
        }
        q -= 8;
    }
    while q > lo {
        let c = sql.get(q - 1).copied().unwrap_or(0);
        if c == b'\'' || c == b'"' || c.is_ascii_digit() {
            break;
        }
        q -= 1;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::digest;

    /// The memo's answer, checked against a direct digest.
    #[track_caller]
    fn same(memo: &mut DigestMemo, sql: &str) {
        let mut out = Vec::new();
        let got = memo.digest(sql.as_bytes(), &mut out);
        let (text, want) = digest(sql);
        assert_eq!(String::from_utf8_lossy(&out), text, "digest text of {sql:?}");
        assert_eq!(got, want, "digest of {sql:?}");
    }

    #[test]
    fn a_templates_note_is_made_once_from_its_text_and_served_with_each_match() {
        let mut m = DigestMemo::<usize>::with_notes();
        let mut made = Vec::new();
        let mut noted = |sql: &str| {
            let (_, note) = m.digest_noted(sql.as_bytes(), &mut Vec::new(), |t| {
                made.push(String::from_utf8_lossy(t).into_owned());
                Some(t.len())
            });
            note
        };
        assert_eq!(noted("SELECT c FROM t WHERE id=5"), None, "first sight: no template");
        assert_eq!(noted("SELECT c FROM t WHERE id=77"), Some(27), "built from this text");
        assert_eq!(noted("SELECT c FROM t WHERE id=123456"), Some(27), "the template's note");
        // No match: rebuilt from this text (a rebuild's note is its own).
        assert_eq!(noted("SELECT c FROM t WHERE id='x'"), Some(28));
        assert_eq!(noted("SELECT c FROM t WHERE id='a much longer string'"), Some(28));
        assert_eq!(made, ["SELECT c FROM t WHERE id=77", "SELECT c FROM t WHERE id='x'"], "made once per build");
    }

    #[test]
    fn a_shape_seen_twice_is_then_served_by_its_template() {
        let mut m = DigestMemo::new();
        for (i, id) in [5012, 7, 99999, 0, 12].into_iter().enumerate() {
            same(&mut m, &format!("SELECT c FROM sbtest1 WHERE id={id}"));
            // Seen once (key), twice (template built), then matched.
            assert_eq!(m.hits, i.saturating_sub(1) as u64);
        }
        // Other tables and shapes have their own templates.
        for round in 0..3 {
            for t in 1..=4 {
                same(&mut m, &format!("SELECT c FROM sbtest{t} WHERE id BETWEEN {} AND {}", 100 * round, 100 * round + 99));
                same(&mut m, &format!("SELECT c FROM sbtest{t} WHERE id BETWEEN {} AND {} ORDER BY c", round, round + 1));
                same(&mut m, &format!("SELECT SUM(k) FROM sbtest{t} WHERE id BETWEEN {round} AND 9"));
            }
        }
        assert_eq!(m.hits, 3 + 12);
        same(&mut m, "BEGIN");
        same(&mut m, "BEGIN");
        same(&mut m, "BEGIN");
        assert_eq!(m.hits, 16);
    }

    #[test]
    fn strings_and_comments() {
        let mut m = DigestMemo::new();
        for v in ["'a'", "'bb'", "''", "'it''s'", "'x\\'y'", "\"dq\""] {
            same(&mut m, &format!("/* app:1 */ UPDATE t SET name = {v} /* mid */ WHERE id = 42 -- end\n"));
            same(&mut m, &format!("SELECT * FROM t WHERE a = {v} AND b IN (1, 2, 3) LIMIT 10"));
        }
        // A different quote is not the same hole: digested, and still right.
        assert!(m.hits >= 4, "{}", m.hits);
    }

    #[test]
    fn near_misses_are_digested() {
        let mut m = DigestMemo::new();
        let base = "SELECT a FROM t WHERE x = 1 AND y = 'q'";
        for _ in 0..3 {
            same(&mut m, base);
        }
        let hits = m.hits;
        // Each differs from the template in more than literal values; each must come out as
        // its own digest.
        for sql in [
            "SELECT a FROM t WHERE x = 1e AND y = 'q'",
            "SELECT a FROM t WHERE x = 1abc AND y = 'q'",
            "SELECT a FROM t WHERE x = 0x1F AND y = 'q'",
            "SELECT a FROM t WHERE x = 1 AND y = 'q' 'r'",
            "SELECT a FROM t WHERE x = 1.5.5 AND y = 'q'",
            "SELECT a FROM t WHERE x = 1 AND y = \"q\"",
            "SELECT a FROM t WHERE x = 1 AND y = 'q",
            "SELECT a FROM t WHERE x = 1 AND y = 'q'x'",
            "SELECT a FROM t WHERE x = -1 AND y = 'q'",
            "SELECT a FROM t WHERE x = .5 AND y = 'q'",
            "SELECT a FROM t WHERE x = 1 AND y = 'q' ",
            "SELECT a FROM t WHERE x = 1/**/AND y = 'q'",
            "SELECT a FROM t WHERE x = 1-- AND y = 'q'",
        ] {
            same(&mut m, sql);
        }
        // The near misses shared the base's key and took its slot; the base shape gets its
        // template back within REBUILD_EVERY statements.
        for i in 0..REBUILD_EVERY {
            same(&mut m, &format!("SELECT a FROM t WHERE x = {i} AND y = 'zz'"));
        }
        assert!(m.hits > hits);
    }

    #[test]
    fn statements_with_many_literals_get_no_template() {
        let mut m = DigestMemo::new();
        let many = format!("SELECT * FROM t WHERE a IN ({})", vec!["1"; MAX_HOLES + 1].join(","));
        for _ in 0..3 {
            same(&mut m, &many);
        }
        assert_eq!(m.hits, 0);
        let few = format!("SELECT * FROM u WHERE a IN ({})", vec!["2"; MAX_HOLES].join(","));
        for _ in 0..3 {
            same(&mut m, &few);
        }
        assert_eq!(m.hits, 1);
    }

    #[test]
    fn long_statements_bypass_the_memo() {
        let mut m = DigestMemo::new();
        let long = format!("SELECT * FROM t WHERE a IN ({})", vec!["1"; 2000].join(","));
        for _ in 0..3 {
            same(&mut m, &long);
        }
        assert_eq!(m.hits, 0);
    }

    /// The plain byte loops `head_len` and `tail_start` stand for.
    fn head_len_plain(sql: &[u8]) -> usize {
        let mut in_word = false;
        for (p, &c) in sql.iter().enumerate().take(64) {
            if c == b'\'' || c == b'"' || (c.is_ascii_digit() && !in_word) {
                return p;
            }
            in_word = is_word_byte(c);
        }
        sql.len().min(64)
    }

    fn tail_start_plain(sql: &[u8], lo: usize) -> usize {
        (lo..sql.len()).rev().find(|&i| matches!(sql[i], b'\'' | b'"' | b'0'..=b'9')).map_or(lo, |i| i + 1)
    }

    proptest::proptest! {
        #[test]
        fn swar_scans_match_byte_loops(b in proptest::collection::vec(proptest::sample::select(&b"ab_$9 0'\"\xb0\xe9.=("[..]), 0..100), lo in 0..100usize) {
            proptest::prop_assert_eq!(head_len(&b), head_len_plain(&b));
            let lo = lo.min(b.len());
            proptest::prop_assert_eq!(tail_start(&b, lo), tail_start_plain(&b, lo));
        }
    }

    #[test]
    fn keys_ignore_literal_values() {
        assert_eq!(shape_key(b"SELECT c FROM sbtest1 WHERE id=5"), shape_key(b"SELECT c FROM sbtest1 WHERE id=123456"));
        assert_ne!(shape_key(b"SELECT c FROM sbtest1 WHERE id=5"), shape_key(b"SELECT c FROM sbtest2 WHERE id=5"));
        assert_ne!(
            shape_key(b"SELECT c FROM t WHERE id BETWEEN 1 AND 2"),
            shape_key(b"SELECT c FROM t WHERE id BETWEEN 1 AND 2 ORDER BY c")
        );
        assert_eq!(shape_key(b"UPDATE t SET s='a' WHERE id=1"), shape_key(b"UPDATE t SET s='bcd' WHERE id=1000"));
    }
}
