//! The firewall (docs/firewall.md): ProxySQL's allowlist of statement digests per user, and an
//! SQL-injection heuristic (`sqli`).
//!
//! - `[[mysql_firewall_whitelist_users]]`: a user (and client address, '' for any) in mode OFF
//!   (everything runs), DETECTING (everything runs; a digest not on the list is logged once and
//!   counted) or PROTECTING (a digest not on the list gets an error and never reaches a server).
//!   With the firewall on, a user with no row is PROTECTING with an empty list, as in ProxySQL.
//! - `[[mysql_firewall_whitelist_rules]]`: the digests a user may run, per client address and
//!   schema.
//! - `[[mysql_firewall_whitelist_sqli_fingerprints]]`: heuristic fingerprints never flagged.
//!
//! The rows are compiled into a `Firewall` held by the config snapshot: a statement's check is
//! a few hash lookups by `&str` and `u64` on an immutable value, with no lock and no allocation
//! (the statement path reads the snapshot it already holds). A digest logged in DETECTING mode
//! is remembered in a fixed table of atomics, so each new one gives one line.

pub mod sqli;

use crate::lenient::{bool_or_int, yes};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// ProxySQL's `mysql-firewall_whitelist_errormsg` default.
pub const DEFAULT_ERRORMSG: &str = "Firewall blocked this query";

/// `[firewall]`: the switches (ProxySQL's global variables `mysql-firewall_whitelist_enabled`,
/// `mysql-firewall_whitelist_errormsg` and `mysql-automatic_detect_sqli`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallSection {
    /// The allowlist is enforced (users' modes apply).
    #[serde(default, deserialize_with = "bool_or_int")]
    pub enabled: bool,
    /// The error a PROTECTING user's unlisted statement gets.
    #[serde(default = "default_errormsg")]
    pub errormsg: String,
    /// The SQL-injection heuristic: statements it flags get an error (on the allowlist, or
    /// from an OFF user, they are not checked).
    #[serde(default, deserialize_with = "bool_or_int")]
    pub sqli: bool,
}

fn default_errormsg() -> String {
    DEFAULT_ERRORMSG.into()
}

impl Default for FirewallSection {
    fn default() -> Self {
        FirewallSection { enabled: false, errormsg: default_errormsg(), sqli: false }
    }
}

/// A user's firewall mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
pub enum Mode {
    #[default]
    #[serde(rename = "OFF", alias = "off")]
    Off,
    #[serde(rename = "DETECTING", alias = "detecting")]
    Detecting,
    #[serde(rename = "PROTECTING", alias = "protecting")]
    Protecting,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "OFF",
            Mode::Detecting => "DETECTING",
            Mode::Protecting => "PROTECTING",
        }
    }

    /// ProxySQL's spellings, in any case.
    pub fn parse(s: &str) -> Option<Mode> {
        [Mode::Off, Mode::Detecting, Mode::Protecting].into_iter().find(|m| m.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// A `[[mysql_firewall_whitelist_users]]` row (ProxySQL's columns).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallUserRow {
    #[serde(default = "yes", deserialize_with = "bool_or_int")]
    pub active: bool,
    pub username: String,
    /// The client's IP exactly, or '' for any address.
    #[serde(default)]
    pub client_address: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub comment: String,
}

/// A `[[mysql_firewall_whitelist_rules]]` row: `digest` may run for this user, client address
/// ('' any), schema and flagIN.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallRuleRow {
    #[serde(default = "yes", deserialize_with = "bool_or_int")]
    pub active: bool,
    pub username: String,
    #[serde(default)]
    pub client_address: String,
    /// The session's schema ('' when it has none).
    #[serde(default)]
    pub schemaname: String,
    #[serde(default, rename = "flagIN", alias = "flagin", alias = "flag_in")]
    pub flag_in: i64,
    /// `0x…` as stats_mysql_query_digest shows it.
    pub digest: String,
    #[serde(default)]
    pub comment: String,
}

/// A `[[mysql_firewall_whitelist_sqli_fingerprints]]` row.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SqliFingerprintRow {
    #[serde(default = "yes", deserialize_with = "bool_or_int")]
    pub active: bool,
    pub fingerprint: String,
}

/// The rows and section the firewall is built from, checked: (row's table and index, column,
/// message) of the first problem.
pub fn check(
    users: &[FirewallUserRow],
    rules: &[FirewallRuleRow],
    fingerprints: &[SqliFingerprintRow],
    section: &FirewallSection,
) -> Option<(&'static str, Option<usize>, &'static str, String)> {
    let address = |a: &str| a.is_empty() || a.parse::<std::net::IpAddr>().is_ok();
    if section.errormsg.is_empty() {
        return Some(("firewall", None, "errormsg", "must not be empty".into()));
    }
    for (i, u) in users.iter().enumerate() {
        let at = |column, message: String| Some(("mysql_firewall_whitelist_users", Some(i), column, message));
        if u.username.is_empty() {
            return at("username", "must not be empty".into());
        }
        if !address(&u.client_address) {
            return at("client_address", format!("`{}` is not an IP address or ''", u.client_address));
        }
        if users[..i].iter().any(|o| o.username == u.username && o.client_address == u.client_address) {
            return at("username", format!("`{}` with client_address `{}` is listed twice", u.username, u.client_address));
        }
    }
    for (i, r) in rules.iter().enumerate() {
        let at = |column, message: String| Some(("mysql_firewall_whitelist_rules", Some(i), column, message));
        if r.username.is_empty() {
            return at("username", "must not be empty".into());
        }
        if !address(&r.client_address) {
            return at("client_address", format!("`{}` is not an IP address or ''", r.client_address));
        }
        if r.flag_in < 0 {
            return at("flagIN", format!("{} is negative", r.flag_in));
        }
        if sql::digest::parse_id(&r.digest).is_none() {
            return at("digest", format!("`{}` is not a digest (0x and up to 16 hex digits, as stats_mysql_query_digest shows)", r.digest));
        }
    }
    for (i, f) in fingerprints.iter().enumerate() {
        let at = |message: String| Some(("mysql_firewall_whitelist_sqli_fingerprints", Some(i), "fingerprint", message));
        if f.fingerprint.is_empty() || f.fingerprint.len() > sqli::FINGERPRINT_MAX || !f.fingerprint.is_ascii() {
            return at(format!("`{}` is not a fingerprint (1 to {} ASCII characters, as logged)", f.fingerprint, sqli::FINGERPRINT_MAX));
        }
    }
    None
}

/// An allowlisted digest's other key columns.
#[derive(Debug)]
struct Allowed {
    username: Box<str>,
    client_address: Box<str>,
    schemaname: Box<str>,
    flag_in: i64,
}

/// What the firewall decided about one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On the allowlist, or the user's mode is OFF (or only the heuristic is on, and it found
    /// nothing).
    Allowed,
    /// DETECTING: not on the allowlist; it runs.
    Detected,
    /// PROTECTING: not on the allowlist; it gets `errormsg`.
    Blocked,
    /// The heuristic flagged it; it gets an error naming the fingerprint.
    Sqli(sqli::Finding),
}

/// The statement being checked.
pub struct Statement<'a> {
    pub username: &'a str,
    pub client_address: &'a str,
    pub schemaname: &'a str,
    pub digest: u64,
    /// The flag the query rules left it with (`rules::Decision::flag`): a rule's `flagIN`
    /// must equal it, as in ProxySQL.
    pub flag: i64,
    pub text: &'a [u8],
    /// Its normalized text (for the DETECTING line); may be empty.
    pub digest_text: &'a [u8],
}

/// Slots of the table of digests already logged.
const SEEN_SLOTS: usize = 4096;
/// Slots looked at for one key before giving up (a full table logs nothing more).
const SEEN_PROBES: usize = 8;

/// The compiled firewall. Immutable but for the logged-digests table.
#[derive(Debug)]
pub struct Firewall {
    enabled: bool,
    /// Some rule's flagIN is not 0.
    uses_flags: bool,
    sqli: bool,
    errormsg: Box<str>,
    /// username → (client address, mode); active rows only.
    users: HashMap<Box<str>, Vec<(Box<str>, Mode)>>,
    /// digest → the rows that allow it.
    rules: HashMap<u64, Vec<Allowed>>,
    fingerprints: HashSet<Box<str>>,
    /// (user, digest) keys logged in DETECTING mode; 0 is an empty slot.
    seen: Box<[AtomicU64]>,
}

impl Default for Firewall {
    fn default() -> Self {
        Firewall::build(&[], &[], &[], &FirewallSection::default())
    }
}

impl Firewall {
    /// Builds from rows `check` accepted (a row it would refuse is skipped).
    pub fn build(
        users: &[FirewallUserRow],
        rules: &[FirewallRuleRow],
        fingerprints: &[SqliFingerprintRow],
        section: &FirewallSection,
    ) -> Firewall {
        let mut by_user: HashMap<Box<str>, Vec<(Box<str>, Mode)>> = HashMap::new();
        for u in users.iter().filter(|u| u.active) {
            by_user.entry(u.username.as_str().into()).or_default().push((u.client_address.as_str().into(), u.mode));
        }
        let mut by_digest: HashMap<u64, Vec<Allowed>> = HashMap::new();
        for r in rules.iter().filter(|r| r.active) {
            let Some(digest) = sql::digest::parse_id(&r.digest) else { continue };
            by_digest.entry(digest).or_default().push(Allowed {
                username: r.username.as_str().into(),
                client_address: r.client_address.as_str().into(),
                schemaname: r.schemaname.as_str().into(),
                flag_in: r.flag_in,
            });
        }
        let enabled = section.enabled;
        let uses_flags = by_digest.values().flatten().any(|r| r.flag_in != 0);
        // Only the tables of an enabled feature cost anything to keep.
        let seen = if enabled { (0..SEEN_SLOTS).map(|_| AtomicU64::new(0)).collect() } else { Box::default() };
        Firewall {
            enabled,
            uses_flags,
            sqli: section.sqli,
            errormsg: section.errormsg.as_str().into(),
            users: by_user,
            rules: by_digest,
            fingerprints: fingerprints.iter().filter(|f| f.active).map(|f| f.fingerprint.as_str().into()).collect(),
            seen,
        }
    }

    /// Some allowlist rule has a flagIN other than 0: the statement's flag must be known
    /// (a prepared statement's execute evaluates the query rules for it).
    pub fn uses_flags(&self) -> bool {
        self.uses_flags
    }

    /// Whether statements are checked at all (the statement path's only cost when it is off).
    pub fn active(&self) -> bool {
        self.enabled || self.sqli
    }

    /// The allowlist is enforced (statements need their digest).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn errormsg(&self) -> &str {
        &self.errormsg
    }

    /// The user's mode: the row for its client address, else the row for '' ; PROTECTING
    /// when it has neither (ProxySQL: an unlisted user is blocked).
    fn mode(&self, username: &str, client_address: &str) -> Mode {
        let Some(rows) = self.users.get(username) else { return Mode::Protecting };
        let exact = rows.iter().find(|(a, _)| &**a == client_address);
        exact.or_else(|| rows.iter().find(|(a, _)| a.is_empty())).map_or(Mode::Protecting, |(_, m)| *m)
    }

    fn listed(&self, s: &Statement) -> bool {
        let Some(rows) = self.rules.get(&s.digest) else { return false };
        rows.iter().any(|r| {
            &*r.username == s.username
                && (r.client_address.is_empty() || &*r.client_address == s.client_address)
                && &*r.schemaname == s.schemaname
                && r.flag_in == s.flag
        })
    }

    /// The heuristic's finding, unless its fingerprint is allowlisted.
    fn injection(&self, text: &[u8]) -> Option<sqli::Finding> {
        sqli::scan(text).filter(|f| !self.fingerprints.contains(f.fingerprint()))
    }

    /// The verdict on one statement (call only when `active`). Logs a DETECTING digest the
    /// first time, and a heuristic finding each time.
    pub fn check(&self, s: &Statement) -> Verdict {
        let mut verdict = Verdict::Allowed;
        if self.enabled {
            let mode = self.mode(s.username, s.client_address);
            if mode == Mode::Off || self.listed(s) {
                return Verdict::Allowed;
            }
            // Logged once per user and digest in either mode: a client retrying in a loop must
            // not flood the log (the counters count each).
            if self.first_time(s.username, s.digest) {
                let what = match mode {
                    Mode::Protecting => "firewall: refused a statement not on the allowlist (PROTECTING)",
                    _ => "firewall: a statement not on the allowlist ran (DETECTING)",
                };
                tracing::warn!(
                    user = s.username,
                    client = s.client_address,
                    schema = s.schemaname,
                    digest = %sql::digest::format_id(s.digest),
                    digest_text = %String::from_utf8_lossy(s.digest_text),
                    "{what}"
                );
            }
            if mode == Mode::Protecting {
                return Verdict::Blocked;
            }
            verdict = Verdict::Detected;
        }
        if self.sqli {
            if let Some(f) = self.injection(s.text) {
                tracing::error!(
                    user = s.username,
                    client = s.client_address,
                    fingerprint = f.fingerprint(),
                    kind = f.kind(),
                    query = %String::from_utf8_lossy(&s.text[..s.text.len().min(1024)]),
                    "firewall: SQL injection detected"
                );
                return Verdict::Sqli(f);
            }
        }
        verdict
    }

    /// True the first time (user, digest) is seen under this firewall, as far as the table
    /// remembers: a lossy set of atomics (no lock; a full neighbourhood logs nothing more).
    fn first_time(&self, username: &str, digest: u64) -> bool {
        if self.seen.is_empty() {
            return true;
        }
        let key = (xxhash_rust::xxh3::xxh3_64_with_seed(username.as_bytes(), digest)).max(1);
        let start = (key as usize) % self.seen.len();
        for i in 0..SEEN_PROBES {
            let slot = &self.seen[(start + i) % self.seen.len()];
            // A plain load first: a digest seen before (the usual case) writes nothing, so
            // workers do not pass the slot's cache line between them.
            let mut current = slot.load(Ordering::Relaxed);
            loop {
                if current == key {
                    return false;
                }
                if current != 0 {
                    break;
                }
                match slot.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return true,
                    Err(now) => current = now,
                }
            }
        }
        false
    }

    /// The error a blocked statement gets.
    pub fn message(&self, verdict: &Verdict) -> Option<Box<str>> {
        match verdict {
            Verdict::Blocked => Some(self.errormsg.clone()),
            Verdict::Sqli(f) => Some(format!("SQL injection detected ({}, fingerprint '{}')", f.kind(), f.fingerprint()).into()),
            Verdict::Allowed | Verdict::Detected => None,
        }
    }
}

#[cfg(test)]
mod tests;
