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

use super::compile::{Pattern, Proven, Rule};
use aho_corasick::AhoCorasick;
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, Look};
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
    /// Indexes the `members` of one chain; `proven[pos]` is set for rules whose candidacy
    /// alone proves a regex.
    pub fn build(rules: &[Rule], members: &[u32], proven: &mut [Proven]) -> Chain {
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
                if let Some(lits) = r.match_pattern.as_deref().and_then(Pattern::literals) {
                    if let Some(exact) = pattern.add(lits, pos) {
                        if exact {
                            proven[pos as usize] = Proven::MatchPattern;
                        }
                        continue;
                    }
                }
                if let Some(lits) = r.match_digest.as_deref().and_then(Pattern::literals) {
                    if let Some(exact) = digest_text.add(lits, pos) {
                        if exact {
                            proven[pos as usize] = Proven::MatchDigest;
                        }
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
        // (A lookup in an empty map returns before hashing.)
        for v in [self.by_digest.get(&p.digest), self.by_user.get(p.user), self.by_schema.get(p.schema)].into_iter().flatten() {
            out.extend_from_slice(v);
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

/// The literals every match of a regex starts with, ASCII-lower-cased, as the index files it.
/// Worked out once, when the pattern compiles (`Pattern::literals`).
#[derive(Debug, Clone)]
pub struct PrefixLiterals {
    /// `^`-anchored: the trie; otherwise the Aho-Corasick automaton.
    anchored: bool,
    /// Finding a literal proves the regex: the literals are exactly its matches, and have no
    /// letters whose case the folding could blur.
    exact: bool,
    folded: Vec<Vec<u8>>,
}

impl PrefixLiterals {
    /// `None` when the regex has no usable literals (some match starts with none of them).
    pub fn of(hir: &Hir) -> Option<PrefixLiterals> {
        let anchored = hir.properties().look_set_prefix().contains(Look::Start);
        let seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
        let lits = seq.literals()?;
        if lits.is_empty() || lits.iter().any(|l| l.as_bytes().is_empty()) {
            return None;
        }
        let exact = seq.is_exact() && lits.iter().all(|l| !l.as_bytes().iter().any(u8::is_ascii_alphabetic));
        let mut folded: Vec<Vec<u8>> = lits.iter().map(|l| l.as_bytes().to_ascii_lowercase()).collect();
        folded.sort();
        folded.dedup();
        Some(PrefixLiterals { anchored, exact, folded })
    }
}

#[derive(Default)]
struct LiteralsBuilder {
    trie: TrieBuilder,
    ac_literals: Vec<Vec<u8>>,
    ac_rules: Vec<Vec<u32>>,
    ac_ids: HashMap<Vec<u8>, usize>,
}

impl LiteralsBuilder {
    /// Files the rule under its regex's literals; whether finding one proves the regex.
    fn add(&mut self, lits: &PrefixLiterals, pos: u32) -> Option<bool> {
        for lit in &lits.folded {
            if lits.anchored {
                self.trie.insert(lit, pos);
            } else {
                let next = self.ac_literals.len();
                let id = *self.ac_ids.entry(lit.clone()).or_insert(next);
                if id == next {
                    self.ac_literals.push(lit.clone());
                    self.ac_rules.push(Vec::new());
                }
                self.ac_rules.get_mut(id)?.push(pos);
            }
        }
        Some(lits.exact)
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
        Literals { trie: self.trie.freeze(), ac }
    }
}

/// A byte trie over lower-cased literals; each node lists the rules whose literal ends there.
/// Built as nodes with their own vectors, then flattened (`freeze`) so a walk touches a few
/// contiguous arrays.
#[derive(Debug)]
struct TrieBuilder {
    nodes: Vec<BuildNode>,
}

#[derive(Debug, Default)]
struct BuildNode {
    /// (byte, child), sorted by byte.
    next: Vec<(u8, u32)>,
    rules: Vec<u32>,
}

impl Default for TrieBuilder {
    fn default() -> Self {
        TrieBuilder { nodes: vec![BuildNode::default()] }
    }
}

impl TrieBuilder {
    fn insert(&mut self, lit: &[u8], pos: u32) {
        let mut node = 0usize;
        for &b in lit {
            let i = match self.nodes[node].next.binary_search_by_key(&b, |&(k, _)| k) {
                Ok(i) => i,
                Err(i) => {
                    let child = self.nodes.len() as u32;
                    self.nodes.push(BuildNode::default());
                    self.nodes[node].next.insert(i, (b, child));
                    i
                }
            };
            node = self.nodes[node].next[i].1 as usize;
        }
        self.nodes[node].rules.push(pos);
    }

    fn freeze(self) -> Trie {
        let mut t = Trie::default();
        for n in &self.nodes {
            t.nodes
                .push(FlatNode { edges: (t.edges.len() as u32, n.next.len() as u32), rules: (t.rules.len() as u32, n.rules.len() as u32) });
            t.edges.extend_from_slice(&n.next);
            t.rules.extend_from_slice(&n.rules);
        }
        t
    }
}

#[derive(Debug, Default)]
struct Trie {
    nodes: Vec<FlatNode>,
    /// (byte, child node) runs, sorted by byte within a node.
    edges: Vec<(u8, u32)>,
    rules: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct FlatNode {
    /// (start, len) in `edges` and in `rules`.
    edges: (u32, u32),
    rules: (u32, u32),
}

impl Trie {
    /// Every rule whose literal is a prefix of `text` (ASCII case folded).
    fn walk(&self, text: &[u8], out: &mut Vec<u32>) {
        let Some(mut node) = self.nodes.first().copied() else {
            return;
        };
        for &b in text {
            let b = b.to_ascii_lowercase();
            let (start, len) = (node.edges.0 as usize, node.edges.1 as usize);
            let Some(&(_, child)) = self.edges[start..start + len].iter().find(|e| e.0 >= b).filter(|e| e.0 == b) else {
                return;
            };
            node = self.nodes[child as usize];
            let (start, len) = (node.rules.0 as usize, node.rules.1 as usize);
            out.extend_from_slice(&self.rules[start..start + len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern's literals, as `Pattern::new` works them out.
    fn of(source: &str, caseless: bool) -> Option<PrefixLiterals> {
        Pattern::new(source, caseless).ok()?.literals().cloned()
    }

    fn lits(srcs: &[(&str, bool)], text: &str) -> Vec<u32> {
        let mut b = LiteralsBuilder::default();
        for (i, (s, caseless)) in srcs.iter().enumerate() {
            let l = of(s, *caseless).unwrap_or_else(|| panic!("{s} has literals"));
            assert!(b.add(&l, i as u32).is_some());
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
        let exact = |s: &str| of(s, true).map(|l| l.exact);
        assert_eq!(exact(r".*"), None);
        assert_eq!(exact(r"^(a|)"), None);
        assert_eq!(exact(r"^SELECT (?!x)"), None, "look-around is for the backtracking engine");
        assert_eq!(exact(r"^/\* 000"), Some(true), "exact and letterless: the literal is the match");
        assert_eq!(exact(r"^/\* 000 x"), Some(false));
        assert_eq!(exact(r"^/\* 0+"), Some(false));
    }
}
