//! ③ rules: (user, schema, client, digest, text) → `Decision`, with ProxySQL's mysql_query_rules
//! semantics (docs/rules.md) and a cost that does not grow with the rule count.
//!
//! ProxySQL scans its rule list in rule_id order, skipping rules of other flagIN chains; a
//! match applies its actions (later matches override earlier ones), a flagOUT switches chain
//! and the scan goes on forward, `apply` stops it, `replace_pattern` rewrites the text later
//! rules see. `RuleSet::evaluate` returns exactly that scan's result, but visits only the
//! candidates the index (`index.rs`) finds in one pass over the text; `evaluate_ordered` is
//! the plain scan, kept as the reference the property tests compare against.

pub mod compile;
mod hits;
mod index;
mod row;

pub use compile::{compile, Actions, Rule, RuleError, Who};

use compile::Proven;
use hits::Hits;
use index::{Chain, Probe};
pub use row::QueryRuleRow;

/// One statement as the rules see it.
pub struct Query<'a> {
    pub who: &'a Who<'a>,
    pub text: &'a [u8],
    pub digest: u64,
    pub digest_text: &'a [u8],
}

/// What the rules decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The matched rules' actions, later rules overriding earlier ones field by field
    /// (`None`: no rule said).
    pub actions: Actions,
    /// The statement after replace_pattern rewrites.
    pub rewritten: Option<Vec<u8>>,
    /// rule_id of the last rule that matched.
    pub last_rule: Option<u32>,
    /// The flag the rules left the statement with (ProxySQL's flagIN at the end of the
    /// evaluation: the last flagOUT taken, else where it started); the firewall's rules match it.
    pub flag: i64,
}

impl Decision {
    fn take(&mut self, rule: &Rule) {
        self.actions.merge(&rule.actions);
        self.last_rule = Some(rule.rule_id);
    }

    /// Applies a matched rule's rewrite to the current text; true when it replaced something.
    fn rewrite(&mut self, rule: &Rule, original: &[u8]) -> bool {
        let (Some(rep), Some(p)) = (&rule.replace, &rule.match_pattern) else {
            return false;
        };
        let current = self.rewritten.as_deref().unwrap_or(original);
        match p.replace(current, rep, rule.global) {
            Some(new) => {
                self.rewritten = Some(new);
                true
            }
            None => false,
        }
    }
}

/// Reusable per-session buffers, so evaluation does not allocate.
#[derive(Default)]
pub struct Scratch {
    candidates: Vec<u32>,
}

/// The compiled, indexed rules. Immutable; a reload builds a new one.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// (flagIN, chain), sorted by flagIN; a handful in practice.
    chains: Vec<(i64, Chain)>,
    /// Per rule: the regex the index proves when it offers the rule as a candidate.
    proven: Vec<Proven>,
    /// Some rule tests the digest: only then is it computed.
    needs_digest: bool,
    /// Some rule has a statement limit: only then are prepared executes evaluated (`limits`).
    has_limits: bool,
    hits: Hits,
    /// Every pattern of the rows, active or not, for the next reload to reuse.
    patterns: compile::Patterns,
}

impl Default for RuleSet {
    fn default() -> Self {
        RuleSet {
            rules: Vec::new(),
            chains: Vec::new(),
            proven: Vec::new(),
            needs_digest: false,
            has_limits: false,
            hits: Hits::new(0),
            patterns: Default::default(),
        }
    }
}

impl RuleSet {
    /// Compiles and indexes `rows`; `hostgroup_exists` checks destination hostgroups.
    pub fn new(rows: &[QueryRuleRow], hostgroup_exists: &dyn Fn(u32) -> bool) -> Result<RuleSet, RuleError> {
        RuleSet::after(rows, hostgroup_exists, None)
    }

    /// `new` for a reload: the patterns `running` already compiled are reused.
    pub fn after(rows: &[QueryRuleRow], hostgroup_exists: &dyn Fn(u32) -> bool, running: Option<&RuleSet>) -> Result<RuleSet, RuleError> {
        let none = compile::Patterns::new();
        let (rules, patterns) = compile(rows, hostgroup_exists, running.map_or(&none, |r| &r.patterns))?;
        let mut flags: Vec<i64> = rules.iter().map(|r| r.flag_in).collect();
        flags.sort_unstable();
        flags.dedup();
        let mut proven = vec![Proven::Nothing; rules.len()];
        let chains = flags
            .into_iter()
            .map(|f| {
                let members: Vec<u32> = (0..rules.len() as u32).filter(|&i| rules[i as usize].flag_in == f).collect();
                (f, Chain::build(&rules, &members, &mut proven))
            })
            .collect();
        let needs_digest = rules.iter().any(|r| r.digest.is_some() || r.match_digest.is_some());
        let has_limits = rules.iter().any(|r| r.actions.limit.is_some());
        Ok(RuleSet { hits: Hits::new(rules.len()), needs_digest, has_limits, rules, chains, proven, patterns })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn needs_digest(&self) -> bool {
        self.needs_digest
    }

    /// Some rule limits the statements it matches (`max_concurrent_queries`, `max_queries_per_second`).
    pub fn has_limits(&self) -> bool {
        self.has_limits
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// (rule_id, hits) for every active rule, in rule_id order.
    pub fn hits(&self) -> Vec<(u32, u64)> {
        self.rules.iter().map(|r| r.rule_id).zip(self.hits.totals()).collect()
    }

    fn chain(&self, flag: i64) -> Option<&Chain> {
        self.chains.binary_search_by_key(&flag, |(f, _)| *f).ok().map(|i| &self.chains[i].1)
    }

    /// The decision for `q`, counting hits on this thread.
    pub fn evaluate(&self, q: &Query, scratch: &mut Scratch) -> Decision {
        if self.rules.is_empty() {
            return Decision::default();
        }
        self.hits.with_local(|bump| self.evaluate_indexed(q, scratch, bump))
    }

    /// The decision for a mirrored copy of `q` (ProxySQL's mirror_flagOUT): the rules evaluated
    /// again from chain `flag`, hits not counted.
    pub fn evaluate_from(&self, flag: i64, q: &Query, scratch: &mut Scratch) -> Decision {
        self.evaluate_indexed_from(flag, q, scratch, &mut |_| {})
    }

    /// The indexed evaluation; `matched` is told every matching rule's position, in order.
    pub fn evaluate_indexed(&self, q: &Query, scratch: &mut Scratch, matched: &mut dyn FnMut(usize)) -> Decision {
        self.evaluate_indexed_from(0, q, scratch, matched)
    }

    fn evaluate_indexed_from(&self, start: i64, q: &Query, scratch: &mut Scratch, matched: &mut dyn FnMut(usize)) -> Decision {
        let mut d = Decision::default();
        let mut flag = start;
        let mut after: Option<u32> = None;
        'chains: while let Some(chain) = self.chain(flag) {
            let text = d.rewritten.as_deref().unwrap_or(q.text);
            let probe = Probe { user: q.who.user, schema: q.who.schema, digest: q.digest, digest_text: q.digest_text, text };
            chain.candidates(&probe, after, &mut scratch.candidates);
            for i in 0..scratch.candidates.len() {
                let pos = scratch.candidates[i];
                let rule = &self.rules[pos as usize];
                let text = d.rewritten.as_deref().unwrap_or(q.text);
                if !rule.matches_except(q.who, q.digest, q.digest_text, text, self.proven[pos as usize]) {
                    continue;
                }
                matched(pos as usize);
                d.take(rule);
                let rewrote = d.rewrite(rule, q.text);
                if rule.apply {
                    flag = rule.flag_out.unwrap_or(flag);
                    break 'chains;
                }
                match rule.flag_out {
                    // Another chain, from the next rule on (ProxySQL does not restart the scan).
                    Some(out) if out != flag => {
                        flag = out;
                        after = Some(pos);
                        continue 'chains;
                    }
                    // Same chain, but the text changed: find candidates again for what follows.
                    _ if rewrote => {
                        after = Some(pos);
                        continue 'chains;
                    }
                    _ => {}
                }
            }
            break;
        }
        d.flag = flag;
        d
    }

    /// ProxySQL's ordered scan over every rule: the reference for the index.
    pub fn evaluate_ordered(&self, q: &Query, matched: &mut dyn FnMut(usize)) -> Decision {
        let mut d = Decision::default();
        let mut flag = 0i64;
        for (pos, rule) in self.rules.iter().enumerate() {
            if rule.flag_in != flag {
                continue;
            }
            let text = d.rewritten.as_deref().unwrap_or(q.text);
            if !rule.matches(q.who, q.digest, q.digest_text, text) {
                continue;
            }
            matched(pos);
            d.take(rule);
            d.rewrite(rule, q.text);
            if let Some(out) = rule.flag_out {
                flag = out;
            }
            if rule.apply {
                break;
            }
        }
        d.flag = flag;
        d
    }
}

#[cfg(test)]
mod tests;
