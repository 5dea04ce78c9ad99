//! The admin port's store (side path: admin port): ProxySQL-compatible config tables in an
//! embedded SQLite, with ProxySQL's three layers.
//!
//! - **memory** (`main.mysql_servers`, …): what an admin edits with plain SQL;
//! - **disk** (`disk.mysql_servers`, …): `<datadir>/sluice.db` attached as `disk` (in memory
//!   without a datadir); `SAVE … TO DISK` / `LOAD … FROM DISK` copy between the two;
//! - **runtime** (`main.runtime_mysql_servers`, …): a picture of what is live, rewritten by the
//!   integrator after every successful `LOAD … TO RUNTIME`.
//!
//! `LOAD … TO RUNTIME` is: `Store::read` (memory tables → a `FileConfig`), then
//! `FileConfig::validate`, then the swap, then `Store::write_runtime`. Statistics tables live in
//! an attached in-memory `stats` schema (reachable unqualified, as in ProxySQL) and are filled by
//! the integrator just before a statement that reads them runs (SQLite's authorizer says which
//! it reads, `fence`).
//!
//! The admin's SQL cannot touch files, runs at most `admin-statement_timeout_ms`, and SQLite's
//! memory is capped (`fence`, `Store::set_limits`).
//!
//! Where sluice differs from ProxySQL's tables:
//! - `mysql_users` has two extra columns at the end, `backend_username` and `backend_password`
//!   (NULL by default), so INSERTs that name their columns work unchanged;
//! - a server's `ssl_ca` lives in ProxySQL's own `mysql_servers_ssl_params` table (a row with
//!   `username = ''` for the server's hostname and port); other TLS columns there are ignored;
//! - global variables: see `variables` for the naming rules.

pub mod commands;
pub mod exec;
pub(crate) mod fence;
mod rows;
mod schema;
pub mod session;
pub mod startup;
pub(crate) mod stats_rows;
pub mod store;
mod switchover;
pub mod variables;

pub use commands::{parse, AdminCommand};
pub use schema::StatsTable;
pub use store::{Cell, Output, Store};

use crate::config::{ConfigError, FileConfig};
use std::sync::Arc;

/// The admin side's handle: the control side, and the admin tables it shows and edits.
pub struct AdminPort {
    pub control: Arc<crate::control::Control>,
    pub tables: exec::Admin,
}

/// A slice of the configuration that LOAD and SAVE move as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    /// `mysql_servers` and `mysql_servers_ssl_params`.
    MysqlServers,
    MysqlUsers,
    MysqlQueryRules,
    /// The three `mysql_firewall_whitelist_*` tables.
    MysqlFirewall,
    /// `shard_databases`, `shard_nodes` and `sharded_tables`.
    Sharding,
    /// `global_variables` rows not named `admin-*`: ProxySQL's `mysql-*` and sluice's `sluice-*`.
    MysqlVariables,
    /// `global_variables` rows named `admin-*`.
    AdminVariables,
}

impl Module {
    pub const ALL: [Module; 7] = [
        Module::MysqlServers,
        Module::MysqlUsers,
        Module::MysqlQueryRules,
        Module::MysqlFirewall,
        Module::Sharding,
        Module::MysqlVariables,
        Module::AdminVariables,
    ];

    /// As the admin commands spell it: `MYSQL SERVERS`, `ADMIN VARIABLES`…
    pub fn name(self) -> &'static str {
        match self {
            Module::MysqlServers => "MYSQL SERVERS",
            Module::MysqlUsers => "MYSQL USERS",
            Module::MysqlQueryRules => "MYSQL QUERY RULES",
            Module::MysqlFirewall => "MYSQL FIREWALL",
            Module::Sharding => "SHARDING",
            Module::MysqlVariables => "MYSQL VARIABLES",
            Module::AdminVariables => "ADMIN VARIABLES",
        }
    }
}

impl std::fmt::Display for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// ProxySQL's configuration layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Memory,
    Disk,
    Runtime,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Memory => "MEMORY",
            Layer::Disk => "DISK",
            Layer::Runtime => "RUNTIME",
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A table row that cannot become configuration: names the row by its primary key, then the
/// field: `mysql_query_rules rule_id=7: match_pattern: …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// `mysql_servers (hostgroup_id=2, hostname='db1', port=3306)`, `global_variables
    /// variable_name='mysql-threads'`, or just the table when no row is involved.
    pub row: String,
    /// The column or variable; may be empty.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.row, self.message)
        } else {
            write!(f, "{}: {}: {}", self.row, self.field, self.message)
        }
    }
}

impl std::error::Error for RowError {}

impl RowError {
    pub(crate) fn new(row: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        RowError { row: row.into(), field: field.into(), message: message.into() }
    }
}

/// Opening the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("datadir {0}: not a directory")]
    NoDatadir(std::path::PathBuf),
    #[error("{path}: {message}")]
    Disk { path: String, message: String },
    #[error("admin store: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// What an admin statement or a layer operation can fail with; the message is what the admin
/// client sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// SQLite refused the statement (syntax, constraint, no such table…): its own message.
    #[error("{0}")]
    Sql(String),
    /// A row cannot be written or read as configuration.
    #[error("{0}")]
    Row(#[from] RowError),
    /// A request this store does not carry out (the message says why).
    #[error("{0}")]
    Unsupported(String),
    /// Refused or stopped by the admin port's limits: file access, the statement time limit,
    /// the memory limit, shutdown (the message says which).
    #[error("{0}")]
    Refused(String),
}

impl From<rusqlite::Error> for AdminError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            // `Store::explain` names the limit.
            Some(rusqlite::ErrorCode::OutOfMemory) => AdminError::Sql("out of memory".into()),
            _ => AdminError::Sql(e.to_string()),
        }
    }
}

/// Quotes a string value the way SQL would: `'it''s'`.
pub(crate) fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `mysql_servers (hostgroup_id=2, hostname='db1', port=3306)`.
pub(crate) fn server_key(hostgroup_id: impl std::fmt::Display, hostname: &str, port: impl std::fmt::Display) -> String {
    format!("mysql_servers (hostgroup_id={hostgroup_id}, hostname={}, port={port})", quoted(hostname))
}

/// `mysql_replication_hostgroups writer_hostgroup=0`.
pub(crate) fn replication_key(writer_hostgroup: impl std::fmt::Display) -> String {
    format!("mysql_replication_hostgroups writer_hostgroup={writer_hostgroup}")
}

/// `mysql_users username='app'`.
pub(crate) fn user_key(username: &str) -> String {
    format!("mysql_users username={}", quoted(username))
}

/// `mysql_query_rules rule_id=7`.
pub(crate) fn rule_key(rule_id: impl std::fmt::Display) -> String {
    format!("mysql_query_rules rule_id={rule_id}")
}

/// `mysql_firewall_whitelist_users (username='app', client_address='')`.
pub(crate) fn firewall_user_key(username: &str, client_address: &str) -> String {
    format!("mysql_firewall_whitelist_users (username={}, client_address={})", quoted(username), quoted(client_address))
}

/// `mysql_firewall_whitelist_rules (username='app', client_address='', schemaname='shop',
/// flagIN=0, digest='0x…')`.
pub(crate) fn firewall_rule_key(username: &str, client_address: &str, schemaname: &str, flag_in: &str, digest: &str) -> String {
    format!(
        "mysql_firewall_whitelist_rules (username={}, client_address={}, schemaname={}, flagIN={flag_in}, digest={})",
        quoted(username),
        quoted(client_address),
        quoted(schemaname),
        quoted(digest)
    )
}

/// `mysql_firewall_whitelist_sqli_fingerprints fingerprint='T&1o1'`.
pub(crate) fn fingerprint_key(fingerprint: &str) -> String {
    format!("mysql_firewall_whitelist_sqli_fingerprints fingerprint={}", quoted(fingerprint))
}

/// `shard_databases name='shop'`.
pub(crate) fn shard_database_key(name: &str) -> String {
    format!("shard_databases name={}", quoted(name))
}

/// `shard_nodes (database='shop', node_index=2)`.
pub(crate) fn shard_node_key(database: &str, node_index: impl std::fmt::Display) -> String {
    format!("shard_nodes (database={}, node_index={node_index})", quoted(database))
}

/// `sharded_tables (database='shop', table_name='t_order')`.
pub(crate) fn sharded_table_key(database: &str, table: &str) -> String {
    format!("sharded_tables (database={}, table_name={})", quoted(database), quoted(table))
}

/// Names row `index` of a module's rows in `fc` by its primary key, as `RowError` does; for the
/// variable modules (no rows) the table's name. The integrator turns the `mysql_users[3]` of a
/// validation error into this.
pub fn describe_row(module: Module, fc: &FileConfig, index: usize) -> String {
    let missing = |table: &str| format!("{table} row {index} (no such row)");
    match module {
        Module::MysqlServers => {
            fc.mysql_servers.get(index).map_or_else(|| missing("mysql_servers"), |s| server_key(s.hostgroup_id, &s.hostname, s.port))
        }
        Module::MysqlUsers => fc.mysql_users.get(index).map_or_else(|| missing("mysql_users"), |u| user_key(&u.username)),
        Module::MysqlQueryRules => fc.mysql_query_rules.get(index).map_or_else(|| missing("mysql_query_rules"), |r| rule_key(r.rule_id)),
        Module::MysqlFirewall => "the firewall tables".into(),
        Module::Sharding => "the sharding tables".into(),
        Module::MysqlVariables | Module::AdminVariables => "global_variables".into(),
    }
}

/// Rephrases a validation error of a `FileConfig` built from the admin tables in the tables'
/// terms: `mysql_query_rules[3].match_pattern` becomes `mysql_query_rules rule_id=7:
/// match_pattern: …`, and `proxy.workers` becomes the variable `mysql-threads`.
pub fn describe_config_error(fc: &FileConfig, e: &ConfigError) -> String {
    let field = e.field.as_str();
    if let Some(rest) = field.strip_prefix("mysql_replication_hostgroups[") {
        if let Some((index, column)) = rest.split_once(']') {
            let row = index.parse::<usize>().ok().and_then(|i| fc.mysql_replication_hostgroups.get(i));
            if let Some(r) = row {
                return format!("{}: {}: {}", replication_key(r.writer_hostgroup), column.trim_start_matches('.'), e.message);
            }
        }
    }
    if let Some(located) = describe_firewall_error(fc, field, &e.message) {
        return located;
    }
    if let Some(located) = describe_sharding_error(fc, field, &e.message) {
        return located;
    }
    let rows =
        [("mysql_servers", Module::MysqlServers), ("mysql_users", Module::MysqlUsers), ("mysql_query_rules", Module::MysqlQueryRules)];
    for (table, module) in rows {
        let Some(rest) = field.strip_prefix(table) else { continue };
        if rest.is_empty() {
            return format!("{table}: {}", e.message);
        }
        let Some((index, column)) = rest.strip_prefix('[').and_then(|r| r.split_once(']')) else { continue };
        let Ok(index) = index.parse::<usize>() else { continue };
        let column = column.trim_start_matches('.');
        // The rules' messages start with their own `rule_id N: `, which the key already says.
        let message = match (module, fc.mysql_query_rules.get(index)) {
            (Module::MysqlQueryRules, Some(r)) => {
                e.message.strip_prefix(&format!("rule_id {}: ", r.rule_id)).unwrap_or(&e.message).to_string()
            }
            _ => e.message.clone(),
        };
        let row = describe_row(module, fc, index);
        return if column.is_empty() { format!("{row}: {message}") } else { format!("{row}: {column}: {message}") };
    }
    if let Some((section, rest)) = field.split_once('.') {
        let name = rest.split('[').next().unwrap_or(rest);
        if let Some(v) = variables::by_field(section, name) {
            return format!("global_variables variable_name={}: {}", quoted(&v.name), e.message);
        }
    }
    e.to_string()
}

/// A firewall row's validation error (`mysql_firewall_whitelist_rules[2].digest`) named by the
/// row's primary key; `[firewall]` fields by their variables.
fn describe_firewall_error(fc: &FileConfig, field: &str, message: &str) -> Option<String> {
    let (table, rest) = field.split_once('[')?;
    let (index, column) = rest.split_once(']')?;
    let index: usize = index.parse().ok()?;
    let column = column.trim_start_matches('.');
    let row = match table {
        "mysql_firewall_whitelist_users" => {
            fc.mysql_firewall_whitelist_users.get(index).map(|u| firewall_user_key(&u.username, &u.client_address))
        }
        "mysql_firewall_whitelist_rules" => fc
            .mysql_firewall_whitelist_rules
            .get(index)
            .map(|r| firewall_rule_key(&r.username, &r.client_address, &r.schemaname, &r.flag_in.to_string(), &r.digest)),
        "mysql_firewall_whitelist_sqli_fingerprints" => {
            fc.mysql_firewall_whitelist_sqli_fingerprints.get(index).map(|f| fingerprint_key(&f.fingerprint))
        }
        _ => return None,
    }?;
    Some(format!("{row}: {column}: {message}"))
}

/// A sharding row's validation error in the tables' terms: `shard_databases[0].nodes[1].hostgroup`
/// is `shard_nodes (database='shop', node_index=1): hostgroup: …`, `sharded_tables[2].table` is
/// `sharded_tables (…): table_name: …`; the file's `[[section]]` names become table names.
fn describe_sharding_error(fc: &FileConfig, field: &str, message: &str) -> Option<String> {
    let message = message.replace("[[", "").replace("]]", "");
    let (table, rest) = field.split_once('[')?;
    let (index, column) = rest.split_once(']')?;
    let index: usize = index.parse().ok()?;
    let column = column.trim_start_matches('.');
    match table {
        "shard_databases" => {
            let d = fc.shard_databases.get(index)?;
            if let Some(node) = column.strip_prefix("nodes[") {
                let (j, node_column) = node.split_once(']')?;
                let node_column = match node_column.trim_start_matches('.') {
                    "database" => "node_database",
                    other => other,
                };
                return Some(format!("{}: {node_column}: {message}", shard_node_key(&d.name, j)));
            }
            let column = if column == "nodes" { "shard_nodes" } else { column };
            Some(format!("{}: {column}: {message}", shard_database_key(&d.name)))
        }
        "sharded_tables" => {
            let t = fc.sharded_tables.get(index)?;
            let column = if column == "table" { "table_name" } else { column };
            Some(format!("{}: {column}: {message}", sharded_table_key(&t.database, &t.table)))
        }
        _ => None,
    }
}
