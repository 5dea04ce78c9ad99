//! ③ rules, the index: per flagIN chain, the rules a query can possibly match, found in one
//! pass over the text whatever the rule count.
//!
//! Each rule is filed under the most selective necessary condition it has:
//! 1. an exact `digest` → hash map;
//! 2. a regex every match of which starts with one of a few literals (from regex-syntax's
//!    extractor): anchored at `^` → a prefix trie walked from the first byte; unanchored →
//!    an Aho-Corasick automaton over the text (match_pattern) or the digest text (match_digest);
//! 3. a username or schemaname → hash map;
//! 4. otherwise "always".
//!
//! Candidates are a superset of the matching rules; the full test still runs on each, in
//! rule_id order, so the result is exactly the ordered scan's.

use super::compile::Rule;
use aho_corasick::AhoCorasick;
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::Look;
use std::collections::HashMap;

/// The rules of one flagIN chain, indexed. Rule numbers are positions in the rule set.
#[derive(Debug, Default)]
pub struct Chain {
    always: Vec<u32>,
    by_digest: HashMap<u64, Vec<u32>>,
    by_user: HashMap<Box<str>, Vec<u32>>,
    by_schema: HashMap<Box<str>, Vec<u32>>,
    /// On the statement text (which a rewrite can change).
    pattern: Literals,
    /// On the digest text.
    digest_text: Literals,
}

/// What a query offers to the index.
pub struct Probe<'a> {
    pub user: &'a str,
    pub schema: &'a str,
    pub digest: u64,
    pub digest_text: &'a [u8],
    pub text: &'a [u8],
}

impl Chain {
    pub fn build(rules: &[Rule], members: &[u32]) -> Chain {
        let mut c = Chain::default();
        let mut pattern = LiteralsBuilder::default();
        let mut digest_text = LiteralsBuilder::default();
        for &pos in members {
            let r = &rules[pos as usize];
            if let Some(d) = r.digest {
                c.by_digest.entry(d).or_default().push(pos);
                continue;
            }
            // A negated pattern matches when the literal is absent: no use as a filter.
            if !r.negate {
                if let Some(src) = &r.match_pattern_src {
                    if pattern.add(src, r.caseless, pos) {
                        continue;
                    }
                }
                if let Some(src) = &r.match_digest_src {
                    if digest_text.add(src, r.caseless, pos) {
                        continue;
                    }
                }
            }
            if let Some(u) = &r.username {
                c.by_user.entry(u.clone()).or_default().push(pos);
            } else if let Some(s) = &r.schemaname {
                c.by_schema.entry(s.clone()).or_default().push(pos);
            } else {
                c.always.push(pos);
            }
        }
        c.pattern = pattern.build();
        c.digest_text = digest_text.build();
        c
    }

    /// Candidate rules after position `after` (all when `None`), sorted, into `out`.
    pub fn candidates(&self, p: &Probe, after: Option<u32>, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.always);
        if !self.by_digest.is_empty() {
            if let Some(v) = self.by_digest.get(&p.digest) {
                out.extend_from_slice(v);
            }
        }
        if !self.by_user.is_empty() {
            if let Some(v) = self.by_user.get(p.user) {
                out.extend_from_slice(v);
            }
        }
        if !self.by_schema.is_empty() {
            if let Some(v) = self.by_schema.get(p.schema) {
                out.extend_from_slice(v);
            }
        }
        self.pattern.candidates(p.text, out);
        self.digest_text.candidates(p.digest_text, out);
        if let Some(a) = after {
            out.retain(|&r| r > a);
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// Literal prefilters for one text: a prefix trie for `^`-anchored regexes and an
/// Aho-Corasick automaton for the rest. Both fold ASCII case (a superset is fine).
#[derive(Debug, Default)]
struct Literals {
    trie: Trie,
    ac: Option<(AhoCorasick, Vec<Vec<u32>>)>,
}

impl Literals {
    fn candidates(&self, text: &[u8], out: &mut Vec<u32>) {
        self.trie.walk(text, out);
        if let Some((ac, rules)) = &self.ac {
            for m in ac.find_overlapping_iter(text) {
                out.extend_from_slice(&rules[m.pattern().as_usize()]);
            }
        }
    }
}

#[derive(Default)]
struct LiteralsBuilder {
    trie: Trie,
    ac_literals: Vec<Vec<u8>>,
    ac_rules: Vec<Vec<u32>>,
    ac_ids: HashMap<Vec<u8>, usize>,
}

impl LiteralsBuilder {
    /// Files the rule under its regex's literals; false when it has no usable ones.
    fn add(&mut self, source: &str, caseless: bool, pos: u32) -> bool {
        let Some(hir) = super::compile::Pattern::hir(source, caseless) else {
            return false;
        };
        let anchored = hir.properties().look_set_prefix().contains(Look::Start);
        let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
        let Some(lits) = seq.literals() else {
            return false;
        };
        if lits.is_empty() || lits.iter().any(|l| l.as_bytes().is_empty()) {
            return false;
        }
        let mut folded: Vec<Vec<u8>> = lits.iter().map(|l| l.as_bytes().to_ascii_lowercase()).collect();
        folded.sort();
        folded.dedup();
        for lit in folded {
            if anchored {
                self.trie.insert(&lit, pos);
            } else {
                let next = self.ac_literals.len();
                let id = *self.ac_ids.entry(lit.clone()).or_insert(next);
                if id == next {
                    self.ac_literals.push(lit);
                    self.ac_rules.push(Vec::new());
                }
                self.ac_rules[id].push(pos);
            }
        }
        true
    }

    fn build(self) -> Literals {
        let ac = if self.ac_literals.is_empty() {
            None
        } else {
            // Building cannot fail for non-empty literal sets within the default limits; if it
            // ever did, every such rule would be lost, so fall back to no automaton loudly.
            match AhoCorasick::builder().ascii_case_insensitive(true).build(&self.ac_literals) {
                Ok(ac) => Some((ac, self.ac_rules)),
                Err(e) => {
                    tracing::error!("query rules: literal automaton not built ({e}); rules with inner literals will not match");
                    None
                }
            }
        };
        Literals { trie: self.trie, ac }
    }
}

/// A byte trie over lower-cased literals; each node lists the rules whose literal ends there.
#[derive(Debug)]
struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    /// (byte, child) sorted by byte; few children per node in practice.
    next: Vec<(u8, u32)>,
    rules: Vec<u32>,
}

impl Default for Trie {
    fn default() -> Self {
        Trie { nodes: vec![TrieNode::default()] }
    }
}

impl Trie {
    fn insert(&mut self, lit: &[u8], pos: u32) {
        let mut node = 0usize;
        for &b in lit {
            let i = match self.nodes[node].next.binary_search_by_key(&b, |&(k, _)| k) {
                Ok(i) => i,
                Err(i) => {
                    let child = self.nodes.len() as u32;
                    self.nodes.push(TrieNode::default());
                    self.nodes[node].next.insert(i, (b, child));
                    i
                }
            };
            node = self.nodes[node].next[i].1 as usize;
        }
        self.nodes[node].rules.push(pos);
    }

    /// Every rule whose literal is a prefix of `text` (ASCII case folded).
    fn walk(&self, text: &[u8], out: &mut Vec<u32>) {
        if self.nodes[0].next.is_empty() {
            return;
        }
        let mut node = &self.nodes[0];
        for &b in text {
            let b = b.to_ascii_lowercase();
            match node.next.binary_search_by_key(&b, |&(k, _)| k) {
                Ok(i) => node = &self.nodes[node.next[i].1 as usize],
                Err(_) => return,
            }
            out.extend_from_slice(&node.rules);
            if node.next.is_empty() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(srcs: &[(&str, bool)], text: &str) -> Vec<u32> {
        let mut b = LiteralsBuilder::default();
        for (i, (s, caseless)) in srcs.iter().enumerate() {
            assert!(b.add(s, *caseless, i as u32), "{s} has literals");
        }
        let l = b.build();
        let mut out = Vec::new();
        l.candidates(text.as_bytes(), &mut out);
        out.sort();
        out
    }

    #[test]
    fn anchored_literals_use_the_trie() {
        let srcs: Vec<String> = (0..200).map(|i| format!(r"^/\* {i:03}")).collect();
        let srcs: Vec<(&str, bool)> = srcs.iter().map(|s| (s.as_str(), true)).collect();
        assert_eq!(lits(&srcs, "/* 199 */ select 1"), vec![199]);
        assert_eq!(lits(&srcs, "/* 000 */ select 1"), vec![0]);
        assert_eq!(lits(&srcs, " /* 000 */ select 1"), Vec::<u32>::new());
    }

    #[test]
    fn unanchored_and_caseless_literals_use_the_automaton() {
        assert_eq!(lits(&[("FOR UPDATE$", true), ("^select", true)], "SELECT a FROM t for update"), vec![0, 1]);
        assert_eq!(lits(&[("(foo|bar)baz", false)], "xxBARBAZ"), vec![0]);
    }

    #[test]
    fn patterns_without_literals_are_not_filed() {
        let mut b = LiteralsBuilder::default();
        assert!(!b.add(r".*", true, 0));
        assert!(!b.add(r"^\w+", true, 0));
        assert!(!b.add(r"^SELECT (?!x)", true, 0), "look-around is for the backtracking engine");
    }
}
