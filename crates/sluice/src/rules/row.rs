//! ③ rules: a rule as the config file and the admin tables write it.

use crate::lenient::{bool_or_int, caseless, string_or_int, yes};
use serde::{Deserialize, Serialize};

/// A `[[mysql_query_rules]]` row (ProxySQL's mysql_query_rules columns; docs/rules.md).
/// Integer actions left out (or negative, as ProxySQL stores "no change") change nothing.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QueryRuleRow {
    pub rule_id: u32,
    /// Unlike ProxySQL's table default (0), a rule written in the file is active unless it says otherwise.
    #[serde(default = "yes", deserialize_with = "bool_or_int")]
    pub active: bool,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub schemaname: Option<String>,
    /// An exact client IP, or a prefix ending in `%` (`10.0.%`).
    #[serde(default)]
    pub client_addr: Option<String>,
    #[serde(default)]
    pub proxy_addr: Option<String>,
    #[serde(default)]
    pub proxy_port: Option<i64>,
    /// A digest id, `0x…` as ProxySQL shows it (or a decimal number).
    #[serde(default, deserialize_with = "string_or_int")]
    pub digest: Option<String>,
    #[serde(default)]
    pub match_digest: Option<String>,
    #[serde(default)]
    pub match_pattern: Option<String>,
    #[serde(default, deserialize_with = "bool_or_int")]
    pub negate_match_pattern: bool,
    /// Comma-separated: CASELESS, GLOBAL. ProxySQL's default is CASELESS.
    #[serde(default = "caseless")]
    pub re_modifiers: String,
    #[serde(default, rename = "flagIN", alias = "flagin", alias = "flag_in")]
    pub flag_in: i64,
    #[serde(default, rename = "flagOUT", alias = "flagout", alias = "flag_out")]
    pub flag_out: Option<i64>,
    #[serde(default)]
    pub replace_pattern: Option<String>,
    #[serde(default)]
    pub destination_hostgroup: Option<i64>,
    #[serde(default)]
    pub cache_ttl: Option<i64>,
    #[serde(default)]
    pub timeout: Option<i64>,
    #[serde(default)]
    pub retries: Option<i64>,
    #[serde(default)]
    pub delay: Option<i64>,
    #[serde(default)]
    pub mirror_hostgroup: Option<i64>,
    /// The mirrored copy is evaluated again from this flagIN (its own destination, rewrite).
    #[serde(default, rename = "mirror_flagOUT", alias = "mirror_flagout", alias = "mirror_flag_out")]
    pub mirror_flag_out: Option<i64>,
    /// sluice's: statements this rule matched running at once, in all; more get 1226.
    #[serde(default)]
    pub max_concurrent_queries: Option<i64>,
    /// sluice's: statements this rule matched started per second, in all; more get 1226.
    #[serde(default)]
    pub max_queries_per_second: Option<i64>,
    #[serde(default)]
    pub error_msg: Option<String>,
    #[serde(default, rename = "OK_msg", alias = "ok_msg")]
    pub ok_msg: Option<String>,
    #[serde(default)]
    pub multiplex: Option<i64>,
    #[serde(default)]
    pub log: Option<i64>,
    #[serde(default, deserialize_with = "bool_or_int")]
    pub apply: bool,
    #[serde(default)]
    pub comment: String,
}
