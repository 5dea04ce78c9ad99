//! The admin store's tables (side path: admin port): ProxySQL's names, columns, types, defaults
//! and CHECK constraints for the configuration sluice supports, and its statistics tables.

use super::{Layer, Module};

/// Bumped when a disk table changes shape; a disk file from a newer sluice is refused, one from
/// an older sluice gains the columns added since (`Store::open`). 2: `mysql_servers.
/// max_replication_lag`, `mysql_replication_hostgroups.causal_reads_timeout_ms`. 3: the
/// statement limits of `mysql_users` and `mysql_query_rules` (`max_concurrent_queries`,
/// `max_queries_per_second`). 4: the sharding tables (`shard_databases`, `shard_nodes`,
/// `sharded_tables`). 5: `shard_databases.single_tables`.
pub const SCHEMA_VERSION: i64 = 5;

/// The first version with the sharding tables: a disk file older than it held its sharding in
/// the config file only (`Store::sharding_predates_disk`).
pub(crate) const SHARDING_SINCE: i64 = 4;

const MYSQL_SERVERS: &str = "
    hostgroup_id INT CHECK (hostgroup_id >= 0) NOT NULL DEFAULT 0,
    hostname VARCHAR NOT NULL,
    port INT CHECK (port >= 0 AND port <= 65535) NOT NULL DEFAULT 3306,
    gtid_port INT CHECK ((gtid_port <> port OR gtid_port = 0) AND gtid_port >= 0 AND gtid_port <= 65535) NOT NULL DEFAULT 0,
    status VARCHAR CHECK (UPPER(status) IN ('ONLINE', 'SHUNNED', 'OFFLINE_SOFT', 'OFFLINE_HARD')) NOT NULL DEFAULT 'ONLINE',
    weight INT CHECK (weight >= 0 AND weight <= 10000000) NOT NULL DEFAULT 1,
    compression INT CHECK (compression IN (0, 1)) NOT NULL DEFAULT 0,
    max_connections INT CHECK (max_connections >= 0) NOT NULL DEFAULT 1000,
    max_replication_lag INT CHECK (max_replication_lag >= 0 AND max_replication_lag <= 126144000) NOT NULL DEFAULT 0,
    use_ssl INT CHECK (use_ssl IN (0, 1)) NOT NULL DEFAULT 0,
    max_latency_ms INT UNSIGNED CHECK (max_latency_ms >= 0) NOT NULL DEFAULT 0,
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (hostgroup_id, hostname, port)";

const MYSQL_SERVERS_SSL_PARAMS: &str = "
    hostname VARCHAR NOT NULL,
    port INT CHECK (port >= 0 AND port <= 65535) NOT NULL DEFAULT 3306,
    username VARCHAR NOT NULL DEFAULT '',
    ssl_ca VARCHAR NOT NULL DEFAULT '',
    ssl_cert VARCHAR NOT NULL DEFAULT '',
    ssl_key VARCHAR NOT NULL DEFAULT '',
    ssl_capath VARCHAR NOT NULL DEFAULT '',
    ssl_crl VARCHAR NOT NULL DEFAULT '',
    ssl_crlpath VARCHAR NOT NULL DEFAULT '',
    ssl_cipher VARCHAR NOT NULL DEFAULT '',
    tls_version VARCHAR NOT NULL DEFAULT '',
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (hostname, port, username)";

/// ProxySQL's columns, then sluice's `causal_reads` and `causal_reads_timeout_ms`.
const MYSQL_REPLICATION_HOSTGROUPS: &str = "
    writer_hostgroup INT CHECK (writer_hostgroup >= 0) NOT NULL PRIMARY KEY,
    reader_hostgroup INT NOT NULL CHECK (reader_hostgroup <> writer_hostgroup AND reader_hostgroup >= 0),
    check_type VARCHAR CHECK (LOWER(check_type) IN ('read_only', 'innodb_read_only', 'super_read_only', 'read_only|innodb_read_only', 'read_only&innodb_read_only')) NOT NULL DEFAULT 'read_only',
    comment VARCHAR NOT NULL DEFAULT '',
    causal_reads VARCHAR CHECK (LOWER(causal_reads) IN ('off', 'local', 'global')) NOT NULL DEFAULT 'local',
    causal_reads_timeout_ms INT CHECK (causal_reads_timeout_ms >= 0) NOT NULL DEFAULT 2000,
    UNIQUE (reader_hostgroup)";

/// ProxySQL's columns, then sluice's `backend_username`, `backend_password` and statement
/// limits.
const MYSQL_USERS: &str = "
    username VARCHAR NOT NULL,
    password VARCHAR,
    active INT CHECK (active IN (0, 1)) NOT NULL DEFAULT 1,
    use_ssl INT CHECK (use_ssl IN (0, 1)) NOT NULL DEFAULT 0,
    default_hostgroup INT NOT NULL DEFAULT 0,
    default_schema VARCHAR,
    schema_locked INT CHECK (schema_locked IN (0, 1)) NOT NULL DEFAULT 0,
    transaction_persistent INT CHECK (transaction_persistent IN (0, 1)) NOT NULL DEFAULT 1,
    fast_forward INT CHECK (fast_forward IN (0, 1)) NOT NULL DEFAULT 0,
    backend INT CHECK (backend IN (0, 1)) NOT NULL DEFAULT 1,
    frontend INT CHECK (frontend IN (0, 1)) NOT NULL DEFAULT 1,
    max_connections INT CHECK (max_connections >= 0) NOT NULL DEFAULT 10000,
    attributes VARCHAR CHECK (JSON_VALID(attributes) OR attributes = '') NOT NULL DEFAULT '',
    comment VARCHAR NOT NULL DEFAULT '',
    backend_username VARCHAR DEFAULT NULL,
    backend_password VARCHAR DEFAULT NULL,
    max_concurrent_queries INT CHECK (max_concurrent_queries >= 0) NOT NULL DEFAULT 0,
    max_queries_per_second INT CHECK (max_queries_per_second >= 0) NOT NULL DEFAULT 0,
    PRIMARY KEY (username, backend),
    UNIQUE (username, frontend)";

const MYSQL_QUERY_RULES: &str = "
    rule_id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    active INT CHECK (active IN (0, 1)) NOT NULL DEFAULT 0,
    username VARCHAR,
    schemaname VARCHAR,
    flagIN INT CHECK (flagIN >= 0) NOT NULL DEFAULT 0,
    client_addr VARCHAR,
    proxy_addr VARCHAR,
    proxy_port INT CHECK (proxy_port >= 0 AND proxy_port <= 65535),
    digest VARCHAR,
    match_digest VARCHAR,
    match_pattern VARCHAR,
    negate_match_pattern INT CHECK (negate_match_pattern IN (0, 1)) NOT NULL DEFAULT 0,
    re_modifiers VARCHAR DEFAULT 'CASELESS',
    flagOUT INT CHECK (flagOUT >= 0),
    replace_pattern VARCHAR CHECK (replace_pattern IS NULL OR match_pattern IS NOT NULL),
    destination_hostgroup INT DEFAULT NULL,
    cache_ttl INT CHECK (cache_ttl > 0),
    cache_empty_result INT CHECK (cache_empty_result IN (0, 1)) DEFAULT NULL,
    cache_timeout INT CHECK (cache_timeout >= 0),
    reconnect INT CHECK (reconnect IN (0, 1)) DEFAULT NULL,
    timeout INT UNSIGNED CHECK (timeout >= 0),
    retries INT CHECK (retries >= 0 AND retries <= 1000),
    delay INT UNSIGNED CHECK (delay >= 0),
    next_query_flagIN INT UNSIGNED,
    mirror_flagOUT INT UNSIGNED,
    mirror_hostgroup INT UNSIGNED,
    error_msg VARCHAR,
    OK_msg VARCHAR,
    sticky_conn INT CHECK (sticky_conn IN (0, 1)),
    multiplex INT CHECK (multiplex IN (0, 1, 2)),
    gtid_from_hostgroup INT UNSIGNED,
    log INT CHECK (log IN (0, 1)),
    apply INT CHECK (apply IN (0, 1)) NOT NULL DEFAULT 0,
    attributes VARCHAR CHECK (JSON_VALID(attributes) OR attributes = '') NOT NULL DEFAULT '',
    comment VARCHAR,
    max_concurrent_queries INT CHECK (max_concurrent_queries >= 0),
    max_queries_per_second INT CHECK (max_queries_per_second >= 0)";

/// ProxySQL's firewall tables (docs/firewall.md).
const MYSQL_FIREWALL_WHITELIST_USERS: &str = "
    active INT CHECK (active IN (0, 1)) NOT NULL DEFAULT 1,
    username VARCHAR NOT NULL,
    client_address VARCHAR NOT NULL DEFAULT '',
    mode VARCHAR CHECK (UPPER(mode) IN ('OFF', 'DETECTING', 'PROTECTING')) NOT NULL DEFAULT 'OFF',
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (username, client_address)";

const MYSQL_FIREWALL_WHITELIST_RULES: &str = "
    active INT CHECK (active IN (0, 1)) NOT NULL DEFAULT 1,
    username VARCHAR NOT NULL,
    client_address VARCHAR NOT NULL DEFAULT '',
    schemaname VARCHAR NOT NULL DEFAULT '',
    flagIN INT NOT NULL DEFAULT 0,
    digest VARCHAR NOT NULL,
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (username, client_address, schemaname, flagIN, digest)";

const MYSQL_FIREWALL_WHITELIST_SQLI_FINGERPRINTS: &str = "
    active INT CHECK (active IN (0, 1)) NOT NULL DEFAULT 1,
    fingerprint VARCHAR NOT NULL,
    PRIMARY KEY (fingerprint)";

/// sluice's sharding tables (docs/sharding.md): `[[shard_databases]]` without its nodes, which
/// are rows of `shard_nodes`, and `[[sharded_tables]]`. Lists are text: `broadcast_tables` and
/// `boundaries` comma-separated, `lists` one list per shard separated by `;`, `single_tables`
/// `table=node_database` pairs comma-separated.
const SHARD_DATABASES: &str = "
    name VARCHAR NOT NULL PRIMARY KEY,
    broadcast_tables VARCHAR NOT NULL DEFAULT '',
    single_tables VARCHAR DEFAULT '',
    max_connections_per_query INT CHECK (max_connections_per_query >= 1) NOT NULL DEFAULT 16,
    key_worker_id INT CHECK (key_worker_id >= 0 AND key_worker_id <= 1023) NOT NULL DEFAULT 0,
    max_merge_buffer_bytes INT CHECK (max_merge_buffer_bytes >= 0) NOT NULL DEFAULT 67108864,
    max_statement_bytes INT CHECK (max_statement_bytes >= 1024) NOT NULL DEFAULT 1048576,
    xa_log VARCHAR,
    comment VARCHAR NOT NULL DEFAULT ''";

const SHARD_NODES: &str = "
    database VARCHAR NOT NULL,
    node_index INT CHECK (node_index >= 0) NOT NULL,
    hostgroup INT CHECK (hostgroup >= 0) NOT NULL,
    node_database VARCHAR NOT NULL,
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (database, node_index)";

const SHARDED_TABLES: &str = "
    database VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,
    sharding_column VARCHAR NOT NULL,
    algorithm VARCHAR NOT NULL DEFAULT 'mod',
    tables_per_node INT CHECK (tables_per_node >= 1) NOT NULL DEFAULT 1,
    boundaries VARCHAR NOT NULL DEFAULT '',
    lists VARCHAR NOT NULL DEFAULT '',
    binding_group VARCHAR,
    generated_key VARCHAR,
    database_expression VARCHAR,
    table_expression VARCHAR,
    comment VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (database, table_name)";

const GLOBAL_VARIABLES: &str = "
    variable_name VARCHAR NOT NULL PRIMARY KEY,
    variable_value VARCHAR NOT NULL";

/// The configuration tables, each with its module (variables: both variable modules).
pub(crate) const CONFIG_TABLES: &[(&str, &str)] = &[
    ("mysql_servers", MYSQL_SERVERS),
    ("mysql_servers_ssl_params", MYSQL_SERVERS_SSL_PARAMS),
    ("mysql_replication_hostgroups", MYSQL_REPLICATION_HOSTGROUPS),
    ("mysql_users", MYSQL_USERS),
    ("mysql_query_rules", MYSQL_QUERY_RULES),
    ("mysql_firewall_whitelist_users", MYSQL_FIREWALL_WHITELIST_USERS),
    ("mysql_firewall_whitelist_rules", MYSQL_FIREWALL_WHITELIST_RULES),
    ("mysql_firewall_whitelist_sqli_fingerprints", MYSQL_FIREWALL_WHITELIST_SQLI_FINGERPRINTS),
    ("shard_databases", SHARD_DATABASES),
    ("shard_nodes", SHARD_NODES),
    ("sharded_tables", SHARDED_TABLES),
    ("global_variables", GLOBAL_VARIABLES),
];

/// The tables a module's rows live in.
pub(crate) fn module_tables(module: Module) -> &'static [&'static str] {
    match module {
        Module::MysqlServers => &["mysql_servers", "mysql_servers_ssl_params", "mysql_replication_hostgroups"],
        Module::MysqlUsers => &["mysql_users"],
        Module::MysqlQueryRules => &["mysql_query_rules"],
        Module::MysqlFirewall => {
            &["mysql_firewall_whitelist_users", "mysql_firewall_whitelist_rules", "mysql_firewall_whitelist_sqli_fingerprints"]
        }
        Module::Sharding => &["shard_databases", "shard_nodes", "sharded_tables"],
        Module::MysqlVariables | Module::AdminVariables => &["global_variables"],
    }
}

/// The rows of a module's table that belong to it (`global_variables` is shared).
pub(crate) fn module_filter(module: Module) -> &'static str {
    match module {
        Module::MysqlVariables => "variable_name NOT GLOB 'admin-*'",
        Module::AdminVariables => "variable_name GLOB 'admin-*'",
        _ => "1",
    }
}

/// The qualified name of a config table in a layer: `main.mysql_servers`,
/// `disk.mysql_servers`, `main.runtime_mysql_servers`.
pub(crate) fn qualified(layer: Layer, table: &str) -> String {
    match layer {
        Layer::Memory => format!("main.{table}"),
        Layer::Disk => format!("disk.{table}"),
        Layer::Runtime => format!("main.runtime_{table}"),
    }
}

/// Every `CREATE TABLE IF NOT EXISTS` for the three layers and the statistics.
pub(crate) fn create_statements() -> Vec<String> {
    let mut out = Vec::new();
    for layer in [Layer::Memory, Layer::Disk, Layer::Runtime] {
        for (table, body) in CONFIG_TABLES {
            out.push(format!("CREATE TABLE IF NOT EXISTS {} ({body})", qualified(layer, table)));
        }
    }
    for t in StatsTable::ALL {
        out.push(format!("CREATE TABLE IF NOT EXISTS {}.{} ({})", t.schema(), t.name(), t.body()));
    }
    out
}

/// A statistics table the integrator fills before a statement reads it. They live in the
/// attached in-memory `stats` schema (`stats.stats_mysql_global` and `stats_mysql_global` both
/// name it), and the monitor's logs in `monitor` (`monitor.mysql_server_ping_log`), as in
/// ProxySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatsTable {
    QueryDigest,
    /// Reading it returns the digests and resets them (ProxySQL's semantics; the integrator's part).
    QueryDigestReset,
    ConnectionPool,
    CommandsCounters,
    QueryRules,
    Global,
    /// sluice's: (Variable_Name, per_second_1s, per_second_10s, per_second_60s).
    Rates,
    /// sluice's: why sessions were pinned to a backend connection, and how often.
    MultiplexPins,
    /// The monitor's logs (`health::Findings`): the latest `[monitor] history_rows` checks
    /// of each server.
    ConnectLog,
    PingLog,
    ReadOnlyLog,
    ReplicationLagLog,
}

const DIGEST_COLUMNS: &str = "
    hostgroup INT,
    schemaname VARCHAR NOT NULL,
    username VARCHAR NOT NULL,
    client_address VARCHAR NOT NULL,
    digest VARCHAR NOT NULL,
    digest_text VARCHAR NOT NULL,
    count_star INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    sum_time INTEGER NOT NULL,
    min_time INTEGER NOT NULL,
    max_time INTEGER NOT NULL,
    sum_rows_affected INTEGER NOT NULL,
    sum_rows_sent INTEGER NOT NULL,
    p50_us INTEGER NOT NULL,
    p95_us INTEGER NOT NULL,
    p99_us INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    server_count INTEGER NOT NULL,
    server_time_us INTEGER NOT NULL,
    server_p50_us INTEGER NOT NULL,
    server_p99_us INTEGER NOT NULL,
    proxy_count INTEGER NOT NULL,
    proxy_time_us INTEGER NOT NULL,
    PRIMARY KEY (hostgroup, schemaname, username, client_address, digest)";

/// stats_mysql_commands_counters: the command, its totals, then the latency buckets.
const COMMAND_COLUMNS: [&str; 15] = {
    let b = crate::stats::BUCKET_COLUMNS;
    ["Command", "Total_Time_us", "Total_cnt", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]
};

impl StatsTable {
    pub const ALL: [StatsTable; 12] = [
        StatsTable::QueryDigest,
        StatsTable::QueryDigestReset,
        StatsTable::ConnectionPool,
        StatsTable::CommandsCounters,
        StatsTable::QueryRules,
        StatsTable::Global,
        StatsTable::Rates,
        StatsTable::MultiplexPins,
        StatsTable::ConnectLog,
        StatsTable::PingLog,
        StatsTable::ReadOnlyLog,
        StatsTable::ReplicationLagLog,
    ];

    /// The attached schema it lives in.
    pub fn schema(self) -> &'static str {
        match self {
            StatsTable::ConnectLog | StatsTable::PingLog | StatsTable::ReadOnlyLog | StatsTable::ReplicationLagLog => "monitor",
            _ => "stats",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StatsTable::QueryDigest => "stats_mysql_query_digest",
            StatsTable::QueryDigestReset => "stats_mysql_query_digest_reset",
            StatsTable::ConnectionPool => "stats_mysql_connection_pool",
            StatsTable::CommandsCounters => "stats_mysql_commands_counters",
            StatsTable::QueryRules => "stats_mysql_query_rules",
            StatsTable::Global => "stats_mysql_global",
            StatsTable::Rates => "stats_rates",
            StatsTable::MultiplexPins => "stats_mysql_multiplex_pins",
            StatsTable::ConnectLog => "mysql_server_connect_log",
            StatsTable::PingLog => "mysql_server_ping_log",
            StatsTable::ReadOnlyLog => "mysql_server_read_only_log",
            StatsTable::ReplicationLagLog => "mysql_server_replication_lag_log",
        }
    }

    /// The columns, in order: what each row given to `Store::fill_stats` holds.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            StatsTable::QueryDigest | StatsTable::QueryDigestReset => &[
                "hostgroup",
                "schemaname",
                "username",
                "client_address",
                "digest",
                "digest_text",
                "count_star",
                "first_seen",
                "last_seen",
                "sum_time",
                "min_time",
                "max_time",
                "sum_rows_affected",
                "sum_rows_sent",
                // sluice's, after ProxySQL's columns: latency percentiles and error count.
                "p50_us",
                "p95_us",
                "p99_us",
                "errors",
                // The server-time probe's (docs/probe.md): the server's own time and sluice's.
                "server_count",
                "server_time_us",
                "server_p50_us",
                "server_p99_us",
                "proxy_count",
                "proxy_time_us",
            ],
            StatsTable::ConnectionPool => &[
                "hostgroup",
                "srv_host",
                "srv_port",
                "status",
                "ConnUsed",
                "ConnFree",
                "ConnOK",
                "ConnERR",
                "MaxConnUsed",
                "Queries",
                "Queries_GTID_sync",
                "Bytes_data_sent",
                "Bytes_data_recv",
                "Latency_us",
            ],
            StatsTable::CommandsCounters => &COMMAND_COLUMNS,
            StatsTable::QueryRules => &["rule_id", "hits"],
            StatsTable::Global => &["Variable_Name", "Variable_Value"],
            StatsTable::Rates => &["Variable_Name", "per_second_1s", "per_second_10s", "per_second_60s"],
            StatsTable::MultiplexPins => &["reason", "count"],
            StatsTable::ConnectLog => &["hostname", "port", "time_start_us", "connect_success_time_us", "connect_error"],
            StatsTable::PingLog => &["hostname", "port", "time_start_us", "ping_success_time_us", "ping_error"],
            StatsTable::ReadOnlyLog => &["hostname", "port", "time_start_us", "success_time_us", "read_only", "error"],
            // sluice's last column: the replica's GTID position.
            StatsTable::ReplicationLagLog => &["hostname", "port", "time_start_us", "success_time_us", "repl_lag", "error", "gtid_pos"],
        }
    }

    fn body(self) -> String {
        match self {
            StatsTable::QueryDigest | StatsTable::QueryDigestReset => DIGEST_COLUMNS.into(),
            StatsTable::ConnectionPool => "hostgroup INT, srv_host VARCHAR, srv_port INT, status VARCHAR, ConnUsed INT, ConnFree INT, \
                 ConnOK INT, ConnERR INT, MaxConnUsed INT, Queries INT, Queries_GTID_sync INT, Bytes_data_sent INT, \
                 Bytes_data_recv INT, Latency_us INT"
                .into(),
            StatsTable::CommandsCounters => {
                let counts: Vec<String> = self.columns()[1..].iter().map(|c| format!("{c} INT NOT NULL")).collect();
                format!("Command VARCHAR NOT NULL PRIMARY KEY, {}", counts.join(", "))
            }
            StatsTable::QueryRules => "rule_id INTEGER PRIMARY KEY, hits INT NOT NULL".into(),
            StatsTable::Global => "Variable_Name VARCHAR NOT NULL PRIMARY KEY, Variable_Value VARCHAR NOT NULL".into(),
            StatsTable::Rates => "Variable_Name VARCHAR NOT NULL PRIMARY KEY, per_second_1s REAL NOT NULL, \
                 per_second_10s REAL NOT NULL, per_second_60s REAL NOT NULL"
                .into(),
            StatsTable::MultiplexPins => "reason VARCHAR NOT NULL PRIMARY KEY, count INT NOT NULL".into(),
            StatsTable::ConnectLog => "hostname VARCHAR NOT NULL, port INT NOT NULL DEFAULT 3306, time_start_us INT NOT NULL DEFAULT 0, \
                 connect_success_time_us INT DEFAULT 0, connect_error VARCHAR"
                .into(),
            StatsTable::PingLog => "hostname VARCHAR NOT NULL, port INT NOT NULL DEFAULT 3306, time_start_us INT NOT NULL DEFAULT 0, \
                 ping_success_time_us INT DEFAULT 0, ping_error VARCHAR"
                .into(),
            StatsTable::ReadOnlyLog => "hostname VARCHAR NOT NULL, port INT NOT NULL DEFAULT 3306, time_start_us INT NOT NULL DEFAULT 0, \
                 success_time_us INT DEFAULT 0, read_only INT DEFAULT 1, error VARCHAR"
                .into(),
            StatsTable::ReplicationLagLog => "hostname VARCHAR NOT NULL, port INT NOT NULL DEFAULT 3306, \
                 time_start_us INT NOT NULL DEFAULT 0, success_time_us INT DEFAULT 0, repl_lag INT DEFAULT 0, error VARCHAR, \
                 gtid_pos VARCHAR"
                .into(),
        }
    }
}

/// The statistics tables `sql` names as identifiers (not in strings or comments), except the
/// `_reset` one. SQLite's authorizer reports the tables a statement reads, but not one joined
/// `USING (…)` or `NATURAL` with no other column read: those are filled on this evidence.
/// Reading `stats_mysql_query_digest_reset` clears the digests, so only the authorizer's exact
/// word counts for it.
pub(crate) fn stats_tables_named(sql: &str) -> Vec<StatsTable> {
    let mut out = Vec::new();
    for tok in sql::lexer::code_tokens(sql.as_bytes()) {
        let text = sql.get(tok.start..tok.end).unwrap_or("");
        let name = match tok.kind {
            sql::lexer::Kind::Word => text,
            sql::lexer::Kind::QuotedIdent => text.trim_matches('`'),
            sql::lexer::Kind::String if text.starts_with('"') => text.trim_matches('"'),
            _ => continue,
        };
        let found = StatsTable::ALL.iter().find(|t| **t != StatsTable::QueryDigestReset && t.name().eq_ignore_ascii_case(name));
        if let Some(t) = found.filter(|t| !out.contains(*t)) {
            out.push(*t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_stats_tables() {
        assert_eq!(
            stats_tables_named("SELECT * FROM stats_mysql_global JOIN `stats_rates` USING (Variable_Name)"),
            [StatsTable::Global, StatsTable::Rates]
        );
        assert!(stats_tables_named("SELECT 'stats_mysql_global' /* stats_rates */ -- stats_mysql_query_rules").is_empty());
        assert!(stats_tables_named("SELECT * FROM stats_mysql_query_digest_reset").is_empty());
    }

    #[test]
    fn stats_columns_match_bodies() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for t in StatsTable::ALL {
            conn.execute_batch(&format!("CREATE TABLE {} ({})", t.name(), t.body())).unwrap();
            let stmt = conn.prepare(&format!("SELECT * FROM {}", t.name())).unwrap();
            assert_eq!(stmt.column_names(), t.columns(), "{}", t.name());
        }
    }
}
