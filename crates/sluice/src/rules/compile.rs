//! ③ rules, load time: `[[mysql_query_rules]]` rows → checked, compiled `Rule`s. Every error
//! names the rule_id and the column, and nothing half-built survives it.

use super::index::PrefixLiterals;
use super::QueryRuleRow;
use regex_automata::meta;
use std::borrow::Cow;
use std::sync::Arc;

/// A rule that failed to compile: which one, which column, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// Position of the row in the rows given to `compile`.
    pub index: usize,
    pub rule_id: u32,
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule_id {}: {}: {}", self.rule_id, self.field, self.message)
    }
}

/// A compiled regular expression. ProxySQL users write PCRE: `regex-automata`'s meta engine
/// (what the `regex` crate wraps) takes what it can, in linear time; look-around and
/// back-references fall back to `fancy-regex`.
///
/// Both run without Unicode mode, like PCRE without UTF-8: bytes are matched as bytes (queries
/// need not be valid UTF-8) and CASELESS folds ASCII letters.
#[derive(Debug)]
pub enum Pattern {
    /// With the literals the rule index files it under (worked out once, kept with the
    /// compiled pattern, which a reload reuses when the source did not change).
    Linear {
        re: meta::Regex,
        literals: Option<PrefixLiterals>,
    },
    Backtracking(fancy_regex::Regex),
}

/// The linear engine: parsed once (the tree also gives the index its literals), then compiled
/// with `regex::bytes::Regex`'s settings but no fully compiled DFA. regex builds one for every
/// small pattern when any crate in the build enables regex-automata's `dfa-build` (fancy-regex
/// and tracing-subscriber do): it was two thirds of a LOAD of 10,000 rules. The lazy DFA that
/// searches instead is as fast once warm.
fn linear(source: &str, caseless: bool) -> Result<(meta::Regex, Option<PrefixLiterals>), String> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .case_insensitive(caseless)
        .build()
        .parse(source)
        .map_err(|e| e.to_string())?;
    let re =
        meta::Builder::new().configure(meta::Config::new().dfa(false).utf8_empty(false)).build_from_hir(&hir).map_err(|e| e.to_string())?;
    Ok((re, PrefixLiterals::of(&hir)))
}

impl Pattern {
    pub fn new(source: &str, caseless: bool) -> Result<Pattern, String> {
        match linear(source, caseless) {
            Ok((re, literals)) => Ok(Pattern::Linear { re, literals }),
            Err(linear_err) => {
                let flags = if caseless { "(?i)" } else { "" };
                match fancy_regex::Regex::new(&format!("{flags}(?:{source})")) {
                    Ok(re) => Ok(Pattern::Backtracking(re)),
                    // Report the engine that got furthest: the backtracking one when the linear
                    // one only balked at a feature the other has.
                    Err(fancy_err) => {
                        let detail = if linear_err.contains("look-around") || linear_err.contains("backreferences") {
                            fancy_err.to_string()
                        } else {
                            linear_err.trim().to_string()
                        };
                        Err(format!("unsupported regular expression: {detail}"))
                    }
                }
            }
        }
    }

    /// What the rule index files a linear pattern under; `None` for backtracking patterns and
    /// those without usable literals.
    pub fn literals(&self) -> Option<&PrefixLiterals> {
        match self {
            Pattern::Linear { literals, .. } => literals.as_ref(),
            Pattern::Backtracking(_) => None,
        }
    }

    /// Unanchored search, as ProxySQL's PartialMatch.
    pub fn is_match(&self, text: &[u8]) -> bool {
        match self {
            Pattern::Linear { re, .. } => re.is_match(text),
            // fancy-regex works on str: invalid UTF-8 is matched in its lossy form.
            Pattern::Backtracking(re) => re.is_match(&String::from_utf8_lossy(text)).unwrap_or(false),
        }
    }

    /// `text` with the first match (all with `global`) replaced; `None` when nothing matched.
    /// `replacement` is in the `regex` crate's syntax (`${1}`, `$$`; see `pcre_replacement`).
    pub fn replace(&self, text: &[u8], replacement: &str, global: bool) -> Option<Vec<u8>> {
        match self {
            Pattern::Linear { re, .. } => {
                let mut out = Vec::with_capacity(text.len() + replacement.len());
                let (mut last, mut matched) = (0, false);
                for caps in re.captures_iter(text) {
                    let Some(m) = caps.get_match() else { continue };
                    matched = true;
                    out.extend_from_slice(text.get(last..m.start())?);
                    caps.interpolate_bytes_into(text, replacement.as_bytes(), &mut out);
                    last = m.end();
                    if !global {
                        break;
                    }
                }
                if !matched {
                    return None;
                }
                out.extend_from_slice(text.get(last..)?);
                Some(out)
            }
            Pattern::Backtracking(re) => {
                let s = std::str::from_utf8(text).ok()?;
                if !re.is_match(s).unwrap_or(false) {
                    return None;
                }
                let out = if global { re.replace_all(s, replacement) } else { re.replace(s, replacement) };
                Some(out.into_owned().into_bytes())
            }
        }
    }
}

/// What a matching rule changes in the decision (`None`: no change).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Actions {
    pub destination_hostgroup: Option<u32>,
    pub cache_ttl: Option<u32>,
    pub timeout: Option<u32>,
    pub retries: Option<u32>,
    pub delay: Option<u32>,
    pub mirror_hostgroup: Option<u32>,
    /// ProxySQL's mirror_flagOUT: the chain the mirrored copy is evaluated again from.
    pub mirror_flag_out: Option<i64>,
    pub error_msg: Option<Box<str>>,
    pub ok_msg: Option<Box<str>>,
    pub multiplex: Option<u8>,
    pub log: Option<bool>,
    /// The statement limit of the last matching rule that has one (`limits`).
    pub limit: Option<crate::limits::RuleLimit>,
}

impl Actions {
    /// Takes every action `later` sets: a later matching rule overrides field by field.
    pub fn merge(&mut self, later: &Actions) {
        macro_rules! take {
            ($($f:ident),*) => {$(if later.$f.is_some() { self.$f = later.$f.clone(); })*};
        }
        take!(
            destination_hostgroup,
            cache_ttl,
            timeout,
            retries,
            delay,
            mirror_hostgroup,
            mirror_flag_out,
            error_msg,
            ok_msg,
            multiplex,
            log,
            limit
        );
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAddr {
    Exact(Box<str>),
    /// `10.0.%`: the text before the `%`.
    Prefix(Box<str>),
}

#[derive(Debug)]
pub struct Rule {
    pub rule_id: u32,
    pub username: Option<Box<str>>,
    pub schemaname: Option<Box<str>>,
    pub client_addr: Option<ClientAddr>,
    pub proxy_addr: Option<Box<str>>,
    pub proxy_port: Option<u16>,
    pub digest: Option<u64>,
    pub match_digest: Option<Arc<Pattern>>,
    pub match_pattern: Option<Arc<Pattern>>,
    /// CASELESS, for the prefilter (which reads the regexes' own sources).
    pub caseless: bool,
    pub negate: bool,
    pub global: bool,
    pub flag_in: i64,
    pub flag_out: Option<i64>,
    /// In the `regex` crate's syntax (`$1`), translated from PCRE's (`\1`).
    pub replace: Option<Box<str>>,
    pub actions: Actions,
    pub apply: bool,
}

/// Which of a rule's regexes being a candidate already proves (its literals are the whole regex).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Proven {
    #[default]
    Nothing,
    MatchPattern,
    MatchDigest,
}

/// The session facts a rule can test besides the statement.
pub struct Who<'a> {
    pub user: &'a str,
    pub schema: &'a str,
    /// The client's IP as text; empty when unknown (then client_addr rules match, as in ProxySQL).
    pub client_addr: &'a str,
    pub proxy_addr: &'a str,
    pub proxy_port: u16,
}

impl Rule {
    /// Everything ProxySQL tests, in its order; `text` is the statement as rewritten so far.
    pub fn matches(&self, who: &Who, digest: u64, digest_text: &[u8], text: &[u8]) -> bool {
        self.matches_except(who, digest, digest_text, text, Proven::Nothing)
    }

    /// `matches`, skipping the regex the index has already proven.
    pub fn matches_except(&self, who: &Who, digest: u64, digest_text: &[u8], text: &[u8], proven: Proven) -> bool {
        if self.username.as_deref().is_some_and(|u| u != who.user) {
            return false;
        }
        if self.schemaname.as_deref().is_some_and(|s| s != who.schema) {
            return false;
        }
        if let Some(a) = &self.client_addr {
            if !who.client_addr.is_empty() {
                let ok = match a {
                    ClientAddr::Exact(ip) => **ip == *who.client_addr,
                    ClientAddr::Prefix(p) => who.client_addr.starts_with(&**p),
                };
                if !ok {
                    return false;
                }
            }
        }
        if self.proxy_addr.as_deref().is_some_and(|a| !who.proxy_addr.is_empty() && a != who.proxy_addr) {
            return false;
        }
        if self.proxy_port.is_some_and(|p| p != who.proxy_port) {
            return false;
        }
        if self.digest.is_some_and(|d| d != digest) {
            return false;
        }
        if let Some(p) = &self.match_digest {
            if proven != Proven::MatchDigest && p.is_match(digest_text) == self.negate {
                return false;
            }
        }
        if let Some(p) = &self.match_pattern {
            if proven != Proven::MatchPattern && p.is_match(text) == self.negate {
                return false;
            }
        }
        true
    }
}

/// Compiled regexes by (source, CASELESS). A reload hands the running set's to the next, so
/// only patterns that changed are compiled again (compiling is most of a 10,000-rule LOAD).
pub type Patterns = std::collections::HashMap<(Box<str>, bool), Arc<Pattern>>;

/// Compiles the active rows, sorted by rule_id, reusing `known` patterns; also returns every
/// pattern of `rows`. `hostgroup_exists` checks destinations.
pub fn compile(
    rows: &[QueryRuleRow],
    hostgroup_exists: &dyn Fn(u32) -> bool,
    known: &Patterns,
) -> Result<(Vec<Rule>, Patterns), RuleError> {
    let mut patterns = Patterns::new();
    let mut seen = std::collections::HashMap::new();
    let mut rules = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        let err = |field: &'static str, message: String| RuleError { index, rule_id: row.rule_id, field, message };
        if row.rule_id == 0 {
            return Err(err("rule_id", "must be at least 1".into()));
        }
        if let Some(prev) = seen.insert(row.rule_id, index) {
            return Err(err("rule_id", format!("rule_id {} is already used by rule row {}", row.rule_id, prev + 1)));
        }
        // Inactive rows are checked too, so a mistake surfaces when it is written, not when the
        // rule is switched on.
        let rule = compile_row(row, hostgroup_exists, known, &mut patterns).map_err(|(field, message)| err(field, message))?;
        if row.active {
            rules.push(rule);
        }
    }
    rules.sort_by_key(|r| r.rule_id);
    Ok((rules, patterns))
}

type FieldError = (&'static str, String);

fn compile_row(
    row: &QueryRuleRow,
    hostgroup_exists: &dyn Fn(u32) -> bool,
    known: &Patterns,
    made: &mut Patterns,
) -> Result<Rule, FieldError> {
    let (mut caseless, mut global) = (false, false);
    for m in row.re_modifiers.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        match m.to_ascii_uppercase().as_str() {
            "CASELESS" => caseless = true,
            "GLOBAL" => global = true,
            _ => return Err(("re_modifiers", format!("unknown modifier `{m}` (CASELESS, GLOBAL)"))),
        }
    }
    let mut pattern = |field: &'static str, src: &Option<String>| -> Result<Option<Arc<Pattern>>, FieldError> {
        let Some(s) = non_empty(src) else { return Ok(None) };
        let key: (Box<str>, bool) = (s.into(), caseless);
        let p = match known.get(&key).or_else(|| made.get(&key)) {
            Some(p) => p.clone(),
            None => Arc::new(Pattern::new(s, caseless).map_err(|e| (field, e))?),
        };
        made.insert(key, p.clone());
        Ok(Some(p))
    };
    let match_digest = pattern("match_digest", &row.match_digest)?;
    let match_pattern = pattern("match_pattern", &row.match_pattern)?;
    let replace = match non_empty(&row.replace_pattern) {
        Some(_) if match_pattern.is_none() => return Err(("replace_pattern", "needs a match_pattern to replace".into())),
        Some(r) => Some(pcre_replacement(r).into()),
        None => None,
    };
    let digest = match non_empty(&row.digest) {
        Some(d) => Some(sql::digest::parse_id(d).ok_or(("digest", format!("`{d}` is not a digest id (0x + up to 16 hex digits)")))?),
        None => None,
    };
    let client_addr = non_empty(&row.client_addr).map(|a| match a.strip_suffix('%') {
        Some(prefix) => ClientAddr::Prefix(prefix.into()),
        None => ClientAddr::Exact(a.into()),
    });
    let hostgroup = |field: &'static str, v: Option<i64>| -> Result<Option<u32>, FieldError> {
        match unsigned(field, v)? {
            Some(hg) if !hostgroup_exists(hg) => Err((field, format!("hostgroup {hg} has no [[mysql_servers]] row"))),
            other => Ok(other),
        }
    };
    let actions = Actions {
        destination_hostgroup: hostgroup("destination_hostgroup", row.destination_hostgroup)?,
        cache_ttl: unsigned("cache_ttl", row.cache_ttl)?,
        timeout: unsigned("timeout", row.timeout)?,
        retries: match unsigned("retries", row.retries)? {
            Some(n) if n > 1000 => return Err(("retries", "must be at most 1000".into())),
            other => other,
        },
        delay: unsigned("delay", row.delay)?,
        mirror_hostgroup: hostgroup("mirror_hostgroup", row.mirror_hostgroup)?,
        mirror_flag_out: row.mirror_flag_out.filter(|f| *f >= 0),
        error_msg: row.error_msg.as_deref().map(Into::into),
        ok_msg: row.ok_msg.as_deref().map(Into::into),
        multiplex: match row.multiplex {
            Some(n @ 0..=2) => Some(n as u8),
            Some(n) if n < 0 => None,
            Some(n) => return Err(("multiplex", format!("must be 0, 1 or 2, got {n}"))),
            None => None,
        },
        log: match row.log {
            Some(0) => Some(false),
            Some(1) => Some(true),
            Some(n) if n < 0 => None,
            Some(n) => return Err(("log", format!("must be 0 or 1, got {n}"))),
            None => None,
        },
        limit: {
            let caps = crate::limits::Caps {
                max_concurrent: unsigned("max_concurrent_queries", row.max_concurrent_queries)?.unwrap_or(0),
                per_second: unsigned("max_queries_per_second", row.max_queries_per_second)?.unwrap_or(0),
            };
            (!caps.is_none()).then(|| crate::limits::RuleLimit { rule_id: row.rule_id, caps, counters: Default::default() })
        },
    };
    let proxy_port = match row.proxy_port {
        Some(p) if p < 0 => None,
        Some(p) => Some(u16::try_from(p).map_err(|_| ("proxy_port", format!("{p} is not a port")))?),
        None => None,
    };
    Ok(Rule {
        rule_id: row.rule_id,
        username: non_empty(&row.username).map(Into::into),
        schemaname: non_empty(&row.schemaname).map(Into::into),
        client_addr,
        proxy_addr: non_empty(&row.proxy_addr).map(Into::into),
        proxy_port,
        digest,
        match_digest,
        match_pattern,
        caseless,
        negate: row.negate_match_pattern,
        global,
        flag_in: row.flag_in,
        flag_out: row.flag_out.filter(|f| *f >= 0),
        replace,
        actions,
        apply: row.apply,
    })
}

/// ProxySQL stores "unset" as NULL or a negative number.
fn unsigned(field: &'static str, v: Option<i64>) -> Result<Option<u32>, FieldError> {
    match v {
        Some(n) if n < 0 => Ok(None),
        Some(n) => u32::try_from(n).map(Some).map_err(|_| (field, format!("{n} is too large"))),
        None => Ok(None),
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// PCRE/RE2 replacement syntax (`\1`, `\\`) → the `regex` crate's (`${1}`, `$$`).
pub fn pcre_replacement(r: &str) -> Cow<'_, str> {
    if !r.contains(['\\', '$']) {
        return Cow::Borrowed(r);
    }
    let mut out = String::with_capacity(r.len() + 8);
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' => match chars.peek() {
                Some(d) if d.is_ascii_digit() => {
                    out.push_str("${");
                    out.push(*d);
                    out.push('}');
                    chars.next();
                }
                Some('\\') => {
                    out.push('\\');
                    chars.next();
                }
                _ => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcre_features_fall_back_or_are_rejected() {
        assert!(matches!(Pattern::new(r"^/\* 000", true).unwrap(), Pattern::Linear { .. }));
        assert!(matches!(Pattern::new(r"^SELECT (?!.*FOR UPDATE)", true).unwrap(), Pattern::Backtracking(_)));
        assert!(matches!(Pattern::new(r"(a)\1", false).unwrap(), Pattern::Backtracking(_)));
        let e = Pattern::new(r"^SELECT (", true).unwrap_err();
        assert!(e.contains("unsupported regular expression"), "{e}");
    }

    #[test]
    fn caseless_is_ascii_and_bytes_need_not_be_utf8() {
        let p = Pattern::new("^select", true).unwrap();
        assert!(p.is_match(b"SELECT 1") && p.is_match(b"Select \xff"));
        assert!(!Pattern::new("^select", false).unwrap().is_match(b"SELECT 1"));
        assert!(Pattern::new("é", false).unwrap().is_match("café".as_bytes()));
    }

    #[test]
    fn replacement_syntax_is_translated() {
        assert_eq!(pcre_replacement(r"SELECT \1 FROM \2"), "SELECT ${1} FROM ${2}");
        assert_eq!(pcre_replacement(r"a$b\\c"), r"a$$b\c");
        let p = Pattern::new(r"(\w+) FROM t1", true).unwrap();
        assert_eq!(p.replace(b"SELECT a FROM t1", &pcre_replacement(r"\1 FROM t2"), false).unwrap(), b"SELECT a FROM t2");
        let p = Pattern::new("t1", false).unwrap();
        assert_eq!(p.replace(b"t1 t1", "t2", true).unwrap(), b"t2 t2");
        assert_eq!(p.replace(b"t1 t1", "t2", false).unwrap(), b"t2 t1");
        assert_eq!(p.replace(b"x", "t2", false), None);
    }
}
