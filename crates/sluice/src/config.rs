//! Configuration: the TOML file (sections named after ProxySQL's admin tables) and the
//! quick-start flags, validated into one immutable `Config`. Feeds every step ①–⑥.
//!
//! A bad file is reported as `FILE:LINE: [section] field `name`: what is wrong`, and nothing
//! starts (exit code 2).

pub use crate::firewall::{FirewallRuleRow, FirewallSection, FirewallUserRow, SqliFingerprintRow};
use crate::lenient::{bool_or_int, yes};
pub use crate::rules::QueryRuleRow;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How sessions are spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// One tokio runtime per worker thread; a session never leaves its worker. Measured: less
    /// CPU per statement than `Steal` with many concurrent clients, more with a lone one, and
    /// its worker count changes only at a restart (BENCHMARKS.md, "the final accounting").
    PerCore,
    /// One work-stealing tokio runtime shared by all workers: the default, for its worker
    /// count that changes live and its lone-client latency.
    #[default]
    Steal,
}

/// How the workers do socket I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[derive(clap::ValueEnum)]
pub enum IoEngine {
    /// io_uring for the plain TCP connections of per-core workers, when the kernel allows it
    /// (else epoll, said in the log); epoll with the work-stealing runtime and for TLS.
    #[default]
    Auto,
    /// epoll everywhere.
    Epoll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServerStatus {
    #[default]
    Online,
    OfflineSoft,
    OfflineHard,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySection {
    /// Addresses the client listener binds.
    pub listen: Vec<String>,
    /// Worker threads; default: the number of cores.
    pub workers: Option<usize>,
    pub runtime: RuntimeKind,
    /// Socket I/O: "auto" (io_uring on per-core workers where available) or "epoll".
    pub io: IoEngine,
    /// Version string in the greeting; default: the backend's own.
    pub server_version: Option<String>,
    /// Plugin announced in the greeting: mysql_native_password or caching_sha2_password.
    pub default_auth_plugin: String,
    /// Logged-in client connections at once; more get ER_CON_COUNT_ERROR.
    pub max_connections: usize,
    /// Client connections still in their handshake (not logged in) at once, in all and from
    /// one client address; more get ER_CON_COUNT_ERROR. They do not count toward
    /// `max_connections`.
    pub max_handshakes: usize,
    pub max_handshakes_per_host: usize,
    /// A client must finish its handshake and login within this (MariaDB's connect_timeout).
    pub client_connect_timeout_ms: u64,
    /// A logged-in client idle (between statements) longer than this is disconnected, as the
    /// server's wait_timeout does (ProxySQL's mysql-wait_timeout, in ms); 0: never. A client's
    /// own `SET wait_timeout` (seconds) is kept when it sets one.
    pub wait_timeout_ms: u64,
    /// Backend connect and login.
    pub connect_timeout_ms: u64,
    /// Per-session reply buffer: stop reading the backend above `high`, resume below `low`.
    pub buffer_high_watermark: usize,
    pub buffer_low_watermark: usize,
    /// Largest client packet accepted (bytes); default: the backend's own max_allowed_packet.
    pub max_allowed_packet: Option<usize>,
    /// Client packets (statements, execute and long data) larger than this are relayed to the
    /// backend as they arrive instead of being held whole; rules see their first this-many bytes.
    pub max_buffered_packet: usize,
    /// On SIGTERM, how long in-flight statements may take to finish.
    pub shutdown_timeout_ms: u64,
    /// Accept the backend's own accounts (needs `[monitor]` credentials to read mysql.user).
    pub backend_users: bool,
    /// Hostgroup whose servers the backend's accounts are read from and routed to.
    pub backend_users_hostgroup: u32,
    /// How often idle pooled connections are checked against the backend's accounts (closed
    /// when their account was dropped or got a new password). Logins always read the account.
    pub backend_users_refresh_ms: u64,
    /// Failed logins in a row from one client address as one user after which that pair is
    /// refused with ER_HOST_IS_BLOCKED (1129) until FLUSH HOSTS on the admin port; 0: never.
    pub max_connect_errors: u32,
    /// After a failed login, the next attempt of the same address and user waits this long,
    /// doubling with each further failure (up to 32 times); 0: no wait.
    pub login_failure_delay_ms: u64,
    /// The admin SQL port (ProxySQL's admin interface); "" turns it off.
    pub admin_listen: String,
    /// `user:password` pairs for the admin port (and the HTTP port off loopback), separated by
    /// `;`. The default admin:admin is refused when either listens beyond loopback.
    pub admin_credentials: String,
    /// HTTP: /metrics, /healthz, /readyz, JSON and the dashboard; "" turns it off.
    pub http_listen: String,
    /// The longest one admin statement may run (0: no limit); longer ones are stopped.
    pub admin_statement_timeout_ms: u64,
    /// The most memory the admin store (SQLite) may use, and the largest result an admin
    /// statement may return.
    pub admin_memory_limit_bytes: u64,
    /// The most rows `LOAD … TO RUNTIME` accepts in one table.
    pub admin_max_rows_per_table: u64,
    /// Holds `sluice.db`, the admin port's saved configuration (SAVE … TO DISK). Without it the
    /// disk layer lives in memory until the process ends.
    pub datadir: Option<PathBuf>,
}

/// The shortest and longest monitor interval or timeout (ms): a shorter one would keep the
/// servers busy answering the monitor, a longer one is a mistake (a day).
pub const MONITOR_MIN_MS: u64 = 10;
pub const MONITOR_MAX_MS: u64 = 86_400_000;

/// The most `[proxy] wait_timeout_ms` can be: the server's own wait_timeout limit (a year).
pub const WAIT_TIMEOUT_MAX_MS: u64 = 31_536_000_000;

/// The most `max_allowed_packet` can be, as on the server (1 GiB).
pub const MAX_ALLOWED_PACKET_CEILING: usize = 1 << 30;

/// The least `max_buffered_packet` can be: a statement's head must hold what sluice reads
/// (an execute's parameter types: up to 65,535 × 2 bytes after its NULL bitmap).
pub const MIN_BUFFERED_PACKET: usize = 256 << 10;

impl Default for ProxySection {
    fn default() -> Self {
        ProxySection {
            listen: vec!["127.0.0.1:6033".into()],
            workers: None,
            runtime: RuntimeKind::default(),
            io: IoEngine::default(),
            server_version: None,
            default_auth_plugin: proto::auth::MYSQL_NATIVE_PASSWORD.into(),
            max_connections: 10_000,
            max_handshakes: 1_000,
            max_handshakes_per_host: 100,
            client_connect_timeout_ms: 5_000,
            wait_timeout_ms: 28_800_000,
            connect_timeout_ms: 5_000,
            buffer_high_watermark: 1 << 20,
            buffer_low_watermark: 256 << 10,
            max_allowed_packet: None,
            max_buffered_packet: 4 << 20,
            shutdown_timeout_ms: 10_000,
            backend_users: false,
            backend_users_hostgroup: 0,
            backend_users_refresh_ms: 1_000,
            max_connect_errors: 100,
            login_failure_delay_ms: 100,
            admin_listen: "127.0.0.1:6032".into(),
            admin_credentials: "admin:admin".into(),
            http_listen: "127.0.0.1:6070".into(),
            admin_statement_timeout_ms: 10_000,
            admin_memory_limit_bytes: 512 << 20,
            admin_max_rows_per_table: 10_000,
            datadir: None,
        }
    }
}

/// Client-side TLS. Without a certificate, a self-signed one is generated at start-up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    pub enabled: bool,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Optional PEM file of the RSA key used for caching_sha2_password without TLS; generated if absent.
    pub rsa_key: Option<PathBuf>,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection { enabled: true, cert: None, key: None, rsa_key: None }
    }
}

/// Backend connection pooling, multiplexing and prepared statements (docs/pooling.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolSection {
    /// Hand a client's backend connection back to the pool after each statement unless the
    /// session is pinned (transaction, locks, temporary tables…). Off: a session keeps the
    /// connections it uses until it ends (they still come from and return to the pool).
    pub multiplexing: bool,
    /// Idle connections kept open per server and backend login, opened ahead of need.
    pub min_idle: u32,
    /// An idle connection unused this long is closed (down to `min_idle`).
    pub max_idle_ms: u64,
    /// A connection older than this is closed when it next falls idle.
    pub max_lifetime_ms: u64,
    /// How long a statement waits for a connection when every server of its hostgroup is at
    /// max_connections; then it fails with an error naming the hostgroup.
    pub checkout_timeout_ms: u64,
    /// How long a statement for the writer hostgroup of a `[[mysql_replication_hostgroups]]`
    /// pair waits, before anything is sent, for a writer it can use (the old one back, or a
    /// promoted replica moved in by the role monitor or an admin) when none can be used; then
    /// it fails as it would at once (0: no wait).
    pub writer_wait_ms: u64,
    /// An idle connection is checked for a server-side close before reuse (the socket asked,
    /// one system call) once it has been idle this long (0: always); one idle less long is
    /// checked only if the reactor saw something arrive on it. The same for a connection a
    /// session keeps, idle since its previous statement.
    pub check_idle_after_ms: u64,
    /// Prepared statements kept open per backend connection; the least recently used is
    /// closed beyond this.
    pub max_statements_per_connection: usize,
    /// Distinct prepared statements (user, schema, text) whose metadata sluice keeps.
    pub max_statements: usize,
}

impl Default for PoolSection {
    fn default() -> Self {
        PoolSection {
            multiplexing: true,
            min_idle: 0,
            max_idle_ms: 60_000,
            max_lifetime_ms: 3_600_000,
            checkout_timeout_ms: 10_000,
            writer_wait_ms: 10_000,
            check_idle_after_ms: 1000,
            max_statements_per_connection: 256,
            max_statements: 20_000,
        }
    }
}

/// Query statistics (`stats`): what is counted per statement.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsSection {
    /// Per-digest statistics (stats_mysql_query_digest). Off, a statement costs no digest.
    pub digests: bool,
    /// Digests kept per worker; the least used is evicted (and counted) beyond this.
    pub max_digests_per_worker: usize,
    /// Longest digest text kept (bytes).
    pub max_digest_length: usize,
    /// A statement taking at least this long counts in Slow_queries.
    pub long_query_time_ms: u64,
}

impl Default for StatsSection {
    fn default() -> Self {
        StatsSection { digests: true, max_digests_per_worker: 5_000, max_digest_length: 2_048, long_query_time_ms: 1_000 }
    }
}

/// The result cache's independent parts (`cache`): each holds `max_memory_bytes / CACHE_SHARDS`.
pub const CACHE_SHARDS: usize = 16;

/// The smallest `[cache] max_memory_bytes`.
pub const MIN_CACHE_MEMORY: usize = 1 << 20;

/// The result cache (`cache`): what query rules with `cache_ttl` store is bounded here; a
/// rule with cache_ttl needs nothing else.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSection {
    /// Memory for cached results, in all (entries, their statement texts and bookkeeping);
    /// the least recently used are evicted beyond it.
    pub max_memory_bytes: usize,
    /// A larger result is not stored (its reply still streams to the client).
    pub max_entry_bytes: usize,
}

impl Default for CacheSection {
    fn default() -> Self {
        CacheSection { max_memory_bytes: 64 << 20, max_entry_bytes: 1 << 20 }
    }
}

/// Mirroring (`mirror`): what query rules with `mirror_hostgroup` send to a second hostgroup,
/// in the background, results discarded (docs/traffic.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MirrorSection {
    /// Mirrored statements waiting or running at once, in all; more are dropped (counted in
    /// Mirror_dropped), never waited for.
    pub queue_size: usize,
    /// Mirrored statements running at once (each holds a connection of the mirror hostgroup).
    pub concurrency: usize,
    /// Mirror writes too (INSERT, UPDATE, DDL…), not only reads. Off by default: a mirror that
    /// is a production server must not receive writes because a rule matched too much.
    pub writes: bool,
    /// A mirrored statement running longer is abandoned (its connection closed; counted in
    /// Mirror_failed).
    pub timeout_ms: u64,
}

impl Default for MirrorSection {
    fn default() -> Self {
        MirrorSection { queue_size: 1_024, concurrency: 8, writes: false, timeout_ms: 10_000 }
    }
}

/// The server-time probe (`probe`, docs/probe.md): eBPF programs in the kernel measure how
/// long the backend server itself spent on each statement, and sluice times its own part of
/// each statement (proxy time). Off by default.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSection {
    #[serde(deserialize_with = "bool_or_int")]
    pub enabled: bool,
    /// How the server's commands are seen.
    pub method: ProbeMethod,
    /// The server's binary; default: each local backend's own (/proc/PID/exe of the process
    /// listening on its port).
    pub binary: Option<String>,
    /// The function probed; default: `dispatch_command` (its C++ name, any signature).
    pub symbol: Option<String>,
}

/// How the probe sees the server's commands (docs/probe.md, "Two methods").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProbeMethod {
    /// `socket` where the kernel has its tracepoints (Linux 6.3+), else `dispatch`.
    #[default]
    Auto,
    /// The kernel's socket tracepoints in the server's processes: a command runs from the
    /// receive of its bytes to its reply's last send. Cheaper for the server than uprobes;
    /// every process's socket calls pay a little while it is attached (docs/probe.md, "Cost").
    Socket,
    /// Uprobes on the server's command dispatch (`binary`, `symbol`).
    Dispatch,
}

/// The JSON-lines query log (`querylog`): every statement when `enabled`, else only those a
/// query rule with `log = 1` matched.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryLogSection {
    pub enabled: bool,
    /// The log file; rotated files get `.1`, `.2`… appended. Needed for rule `log = 1` too.
    pub path: Option<PathBuf>,
    /// Rotate when the file reaches this size.
    pub max_file_bytes: u64,
    /// Rotated files kept.
    pub max_files: u32,
    /// Longest query text written (bytes; 0: no text at all).
    pub max_query_length: usize,
    /// Events queued for the writer; beyond this they are dropped and counted.
    pub queue: usize,
}

impl Default for QueryLogSection {
    fn default() -> Self {
        QueryLogSection { enabled: false, path: None, max_file_bytes: 100 << 20, max_files: 5, max_query_length: 4_096, queue: 16_384 }
    }
}

/// The account sluice uses for its own backend queries (reading mysql.user, health checks),
/// and how often the monitor checks the servers (ProxySQL's `mysql-monitor_*` settings).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonitorSection {
    pub username: String,
    pub password: String,
    /// How often each server gets a new monitor connection (logged in, then closed).
    pub connect_interval_ms: u64,
    /// How often each server is pinged on the monitor's kept connection.
    pub ping_interval_ms: u64,
    /// How often the servers of replication hostgroups are asked whether they are read-only.
    pub read_only_interval_ms: u64,
    /// How often the readers of replication hostgroups are asked for their replication lag.
    pub replication_lag_interval_ms: u64,
    /// A monitor connect (and login) that takes longer has failed.
    pub connect_timeout_ms: u64,
    /// A ping (or a read_only / lag query) that takes longer has failed.
    pub ping_timeout_ms: u64,
    /// Failed connects or pings in a row after which a server is SHUNNED.
    pub ping_max_failures: u32,
    /// The lag a replica counts as when it reports none (its IO or SQL thread stopped):
    /// -1 keeps it in the read set, any other value is compared with its max_replication_lag.
    pub slave_lag_when_null: i64,
    /// Rows each monitor log table keeps per server (the latest).
    pub history_rows: u32,
    /// The login replicas use to replicate from a new writer after a `SWITCHOVER` (CHANGE
    /// MASTER TO … MASTER_USER); empty: re-pointing replication is left to the operator.
    pub replication_user: String,
    pub replication_password: String,
}

impl Default for MonitorSection {
    fn default() -> Self {
        MonitorSection {
            username: String::new(),
            password: String::new(),
            connect_interval_ms: 60_000,
            ping_interval_ms: 10_000,
            read_only_interval_ms: 1_000,
            replication_lag_interval_ms: 10_000,
            connect_timeout_ms: 600,
            ping_timeout_ms: 1_000,
            ping_max_failures: 3,
            slave_lag_when_null: 60,
            history_rows: 100,
            replication_user: String::new(),
            replication_password: String::new(),
        }
    }
}

impl MonitorSection {
    /// The monitor's login and settings: `username` alone (other settings at their defaults).
    pub fn login(username: &str, password: &str) -> MonitorSection {
        MonitorSection { username: username.into(), password: password.into(), ..MonitorSection::default() }
    }
}

/// A `[[mysql_servers]]` row (ProxySQL's mysql_servers columns).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRow {
    pub hostgroup_id: u32,
    /// A host name or address, or (starting with `/`) the path of the server's Unix socket,
    /// as ProxySQL reads its `hostname` column.
    pub hostname: String,
    /// Ignored for a Unix socket.
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default)]
    pub status: ServerStatus,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default = "default_server_max_connections")]
    pub max_connections: u32,
    /// Seconds of replication lag above which the monitor takes this server out of its reader
    /// hostgroup (SHUNNED_REPLICATION_LAG) until it catches up; 0: never.
    #[serde(default)]
    pub max_replication_lag: u32,
    #[serde(default, deserialize_with = "bool_or_int")]
    pub use_ssl: bool,
    /// PEM file of CA certificates to verify the server with; without it, the certificate is not verified.
    #[serde(default)]
    pub ssl_ca: Option<PathBuf>,
    #[serde(default)]
    pub comment: String,
}

impl ServerRow {
    /// The server's Unix socket, when `hostname` names one.
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        socket_path(&self.hostname)
    }
}

/// `hostname` as the path of a Unix socket: it starts with `/` (ProxySQL's rule).
pub fn socket_path(hostname: &str) -> Option<&std::path::Path> {
    hostname.starts_with('/').then(|| std::path::Path::new(hostname))
}

/// How messages, metrics and the admin tables name a server: `host:port`, or the socket's
/// path alone (its port means nothing).
pub fn server_address(hostname: &str, port: u16) -> String {
    match socket_path(hostname) {
        Some(_) => hostname.to_string(),
        None => format!("{hostname}:{port}"),
    }
}

/// A `[[mysql_replication_hostgroups]]` row (ProxySQL's columns, and `causal_reads`): a writer
/// hostgroup and its reader hostgroup. With one, the statements of a user whose default
/// hostgroup is the writer's are split: reads to the readers, everything else to the writer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationHostgroupRow {
    pub writer_hostgroup: u32,
    pub reader_hostgroup: u32,
    /// How the monitor tells a writer from a replica: `read_only`, `innodb_read_only`,
    /// `super_read_only` (ProxySQL's values; MariaDB has `read_only`).
    #[serde(default = "default_check_type")]
    pub check_type: String,
    /// Read-your-writes across pooled connections: `off`, `local` (a session sees its own
    /// writes) or `global` (every session sees every acknowledged write).
    #[serde(default)]
    pub causal_reads: CausalReads,
    /// How long a replica may take to apply what a read must see before the writer answers it.
    #[serde(default = "default_causal_reads_timeout_ms")]
    pub causal_reads_timeout_ms: u32,
    #[serde(default)]
    pub comment: String,
}

fn default_causal_reads_timeout_ms() -> u32 {
    2000
}

/// MaxScale's `causal_reads` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CausalReads {
    Off,
    /// What an application written against one server assumes: its own writes are visible.
    #[default]
    Local,
    Global,
}

impl CausalReads {
    pub fn name(self) -> &'static str {
        match self {
            CausalReads::Off => "off",
            CausalReads::Local => "local",
            CausalReads::Global => "global",
        }
    }
}

/// ProxySQL's `check_type` values.
pub const CHECK_TYPES: [&str; 5] =
    ["read_only", "innodb_read_only", "super_read_only", "read_only|innodb_read_only", "read_only&innodb_read_only"];

fn default_check_type() -> String {
    "read_only".into()
}

/// A `[[mysql_users]]` row (ProxySQL's mysql_users columns).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserRow {
    pub username: String,
    /// Plain text, or the mysql_native_password hash `*` + 40 hex digits.
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub default_hostgroup: u32,
    #[serde(default)]
    pub default_schema: Option<String>,
    #[serde(default = "yes", deserialize_with = "bool_or_int")]
    pub active: bool,
    /// Log in to backends as someone else (plain-text password required).
    #[serde(default)]
    pub backend_username: Option<String>,
    #[serde(default)]
    pub backend_password: Option<String>,
    /// Logged-in client connections of this user at once; more get ER_TOO_MANY_USER_CONNECTIONS
    /// (1203), as the server's max_user_connections. ProxySQL's column and default.
    #[serde(default = "default_user_max_connections")]
    pub max_connections: u32,
    /// This user's statements running at once, over all its sessions; more are refused with
    /// ER_USER_LIMIT_REACHED (1226). 0: no limit.
    #[serde(default)]
    pub max_concurrent_queries: u32,
    /// This user's statements started per second, over all its sessions (a second's worth may
    /// come at once); more are refused with 1226. 0: no limit.
    #[serde(default)]
    pub max_queries_per_second: u32,
    #[serde(default)]
    pub comment: String,
}

fn default_user_max_connections() -> u32 {
    10_000
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub proxy: ProxySection,
    #[serde(default)]
    pub tls: TlsSection,
    #[serde(default)]
    pub monitor: Option<MonitorSection>,
    #[serde(default)]
    pub pool: PoolSection,
    #[serde(default)]
    pub stats: StatsSection,
    #[serde(default)]
    pub querylog: QueryLogSection,
    #[serde(default)]
    pub cache: CacheSection,
    /// The firewall's switches (docs/firewall.md).
    #[serde(default)]
    pub firewall: FirewallSection,
    #[serde(default)]
    pub mirror: MirrorSection,
    #[serde(default)]
    pub probe: ProbeSection,
    #[serde(default)]
    pub mysql_servers: Vec<ServerRow>,
    #[serde(default)]
    pub mysql_replication_hostgroups: Vec<ReplicationHostgroupRow>,
    #[serde(default)]
    pub mysql_users: Vec<UserRow>,
    #[serde(default)]
    pub mysql_query_rules: Vec<QueryRuleRow>,
    /// The firewall's allowlist (docs/firewall.md): users and their modes, allowed digests,
    /// heuristic fingerprints not to flag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mysql_firewall_whitelist_users: Vec<FirewallUserRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mysql_firewall_whitelist_rules: Vec<FirewallRuleRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mysql_firewall_whitelist_sqli_fingerprints: Vec<SqliFingerprintRow>,
    /// Sharding (docs/sharding.md): logical databases and their data nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shard_databases: Vec<ShardDatabaseRow>,
    /// Sharding: the tables of a logical database split over its data nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sharded_tables: Vec<ShardedTableRow>,
}

/// A `[[shard_databases]]` row: a logical database whose sharded tables live on data nodes,
/// each a database on a hostgroup (node `i` is `ds_i` in the docs).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShardDatabaseRow {
    /// The database clients name (their schema, or `name.table`).
    pub name: String,
    /// The data nodes, in shard order.
    pub nodes: Vec<ShardNode>,
    /// Tables with a whole copy on every node: reads go to the first node, writes to all.
    #[serde(default)]
    pub broadcast_tables: Vec<String>,
    /// Single tables: each a whole table on one node, named by the node's `database`
    /// (`t_audit = "ds_1"`). Statements on them go to that node.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub single_tables: std::collections::BTreeMap<String, String>,
    /// The most backend connections one statement may use at once (the per-query
    /// connection budget): a statement that needs more shards is refused.
    #[serde(default = "default_max_connections_per_query")]
    pub max_connections_per_query: u32,
    /// This sluice's worker id in the keys it generates (0–1023): sluice instances writing the
    /// same tables need different ones.
    #[serde(default)]
    pub key_worker_id: u16,
    /// The per-query memory budget of a merge that must hold rows (merged groups sorted by an
    /// aggregate): past it the statement ends with an error.
    #[serde(default = "default_max_merge_buffer_bytes")]
    pub max_merge_buffer_bytes: u64,
    /// The largest statement naming a sharded or broadcast table that sluice parses: its
    /// syntax tree takes about 200 bytes per byte of text, so a client must not be able to
    /// make sluice parse megabytes at will.
    #[serde(default = "default_max_statement_bytes")]
    pub max_statement_bytes: u64,
    /// The recovery log of transactions across several of its shards (XA): without it, such a
    /// transaction is refused (one shard's needs none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xa_log: Option<String>,
}

fn default_max_merge_buffer_bytes() -> u64 {
    64 << 20
}

fn default_max_statement_bytes() -> u64 {
    1 << 20
}

fn default_max_connections_per_query() -> u32 {
    16
}

/// One data node: a database on a hostgroup.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShardNode {
    pub hostgroup: u32,
    pub database: String,
}

/// A `[[sharded_tables]]` row: a table of a logical database split by one column.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedTableRow {
    /// The `[[shard_databases]]` name it belongs to.
    pub database: String,
    pub table: String,
    pub sharding_column: String,
    /// `mod`, `hash_mod`, `range`, `list` or `inline` (docs/sharding.md).
    pub algorithm: String,
    /// Physical tables per node: 1 keeps the table's own name; more are `table_0`…`table_{n-1}`
    /// on each node. Shards = nodes × tables_per_node.
    #[serde(default = "one")]
    pub tables_per_node: u32,
    /// `range`: ascending boundaries; shard `i` holds keys from boundary `i-1` (inclusive) to
    /// boundary `i` (exclusive). One fewer than the shards.
    #[serde(default)]
    pub boundaries: Vec<i64>,
    /// `list`: the keys of each shard, one list per shard.
    #[serde(default)]
    pub lists: Vec<Vec<i64>>,
    /// Tables of one binding group have the same shards for the same key, so their joins on
    /// the key stay on one shard.
    #[serde(default)]
    pub binding_group: Option<String>,
    /// A BIGINT column sluice fills with a Snowflake-style key (time, worker id, sequence) when
    /// an INSERT leaves it out; as the sharding column, the key also picks the shard.
    #[serde(default)]
    pub generated_key: Option<String>,
    /// `inline`: the template naming a row's node by its database, ShardingSphere-style
    /// (`ds_${user_id % 2}`): integer arithmetic on the sharding column inside `${…}`.
    #[serde(default)]
    pub database_expression: Option<String>,
    /// `inline`: the template naming its physical table on the node (`t_order_${user_id / 2 % 2}`);
    /// needed with tables_per_node > 1.
    #[serde(default)]
    pub table_expression: Option<String>,
}

fn default_port() -> u16 {
    3306
}
fn one() -> u32 {
    1
}
fn default_server_max_connections() -> u32 {
    1000
}
/// The validated configuration everything else reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub proxy: ProxySection,
    pub listen: Vec<SocketAddr>,
    pub workers: usize,
    pub tls: TlsSection,
    pub monitor: Option<MonitorSection>,
    pub pool: PoolSection,
    pub stats: StatsSection,
    pub querylog: QueryLogSection,
    pub cache: CacheSection,
    pub firewall: FirewallSection,
    pub firewall_users: Vec<FirewallUserRow>,
    pub firewall_rules: Vec<FirewallRuleRow>,
    pub firewall_fingerprints: Vec<SqliFingerprintRow>,
    /// The firewall rows and section compiled (`firewall::Firewall`).
    pub firewall_compiled: std::sync::Arc<crate::firewall::Firewall>,
    pub mirror: MirrorSection,
    pub probe: ProbeSection,
    pub servers: Vec<ServerRow>,
    pub replication_hostgroups: Vec<ReplicationHostgroupRow>,
    pub users: Vec<UserRow>,
    pub query_rules: Vec<QueryRuleRow>,
    /// `query_rules` compiled and indexed.
    pub rules: std::sync::Arc<crate::rules::RuleSet>,
    /// Sharding, compiled into `snapshot::Snapshot::shards`.
    pub shard_databases: Vec<ShardDatabaseRow>,
    pub sharded_tables: Vec<ShardedTableRow>,
}

impl Config {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.proxy.connect_timeout_ms)
    }
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.proxy.shutdown_timeout_ms)
    }

    /// The sections and rows in force, as the file (and the admin tables) spell them.
    pub fn to_file(&self) -> FileConfig {
        FileConfig {
            proxy: self.proxy.clone(),
            tls: self.tls.clone(),
            monitor: self.monitor.clone(),
            pool: self.pool.clone(),
            stats: self.stats.clone(),
            querylog: self.querylog.clone(),
            cache: self.cache.clone(),
            firewall: self.firewall.clone(),
            mysql_firewall_whitelist_users: self.firewall_users.clone(),
            mysql_firewall_whitelist_rules: self.firewall_rules.clone(),
            mysql_firewall_whitelist_sqli_fingerprints: self.firewall_fingerprints.clone(),
            mirror: self.mirror.clone(),
            probe: self.probe.clone(),
            mysql_servers: self.servers.clone(),
            mysql_replication_hostgroups: self.replication_hostgroups.clone(),
            mysql_users: self.users.clone(),
            mysql_query_rules: self.query_rules.clone(),
            shard_databases: self.shard_databases.clone(),
            sharded_tables: self.sharded_tables.clone(),
        }
    }

    /// Whether an active query rule has a cache_ttl (the result cache is used).
    pub fn rules_cache(&self) -> bool {
        self.query_rules.iter().any(|r| r.active && r.cache_ttl.is_some_and(|ms| ms > 0))
    }

    /// True when `other` differs from this config in its query rules at most (command-line
    /// overrides of workers, runtime and io aside).
    pub fn same_except_rules(&self, other: &Config) -> bool {
        let mut proxy = other.proxy.clone();
        proxy.workers = self.proxy.workers;
        proxy.runtime = self.proxy.runtime;
        proxy.io = self.proxy.io;
        self.proxy == proxy
            && self.tls == other.tls
            && self.monitor == other.monitor
            && self.pool == other.pool
            && self.servers == other.servers
            && self.users == other.users
            && self.shard_databases == other.shard_databases
            && self.sharded_tables == other.sharded_tables
    }
}

impl Config {
    /// The start-up checks of what the configuration names outside itself: `resolve` runs
    /// them, and start-up runs them on a configuration saved in the datadir.
    pub fn check_resources(&self) -> Result<(), ConfigError> {
        match self.resource_problems().first() {
            Some(p) => Err(locate_problem(None, None, p)),
            None => Ok(()),
        }
    }

    /// The datadir, certificates and keys, CA files and the query log's place: each must be
    /// usable, as start-up will use it.
    fn resource_problems(&self) -> Vec<Problem> {
        use PathPart::{Index, Key};
        let mut out = Vec::new();
        if let Some(dir) = &self.proxy.datadir {
            if let Err(what) = writable_dir(dir) {
                out.push(problem(vec![Key("proxy"), Key("datadir")], what));
            }
            let db = dir.join("sluice.db");
            if db.exists() {
                if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(&db) {
                    out.push(problem(vec![Key("proxy"), Key("datadir")], format!("`{}`: cannot open for writing: {e}", db.display())));
                }
            }
        }
        if self.tls.enabled {
            if let (Some(cert), Some(key)) = (&self.tls.cert, &self.tls.key) {
                let unreadable = [("cert", cert), ("key", key)].into_iter().find_map(|(f, p)| readable(p).err().map(|e| (f, e)));
                if let Some((field, what)) = unreadable {
                    out.push(problem(vec![Key("tls"), Key(field)], what));
                } else if let Err(e) = crate::tls::server_config(Some(cert), Some(key)) {
                    let what = format!("{e:#}");
                    let field = if what.starts_with("tls.key") { "key" } else { "cert" };
                    out.push(problem(vec![Key("tls"), Key(field)], unprefixed(&what, &["tls.cert ", "tls.key ", "tls: "])));
                }
            }
        }
        if let Some(path) = &self.tls.rsa_key {
            if let Err(what) = readable(path) {
                out.push(problem(vec![Key("tls"), Key("rsa_key")], what));
            } else if let Err(e) = crate::tls::RsaKeys::load(path) {
                out.push(problem(vec![Key("tls"), Key("rsa_key")], unprefixed(&format!("{e:#}"), &["tls.rsa_key "])));
            }
        }
        for (i, s) in self.servers.iter().enumerate() {
            let Some(ca) = s.ssl_ca.as_ref().filter(|_| s.use_ssl) else { continue };
            let at = vec![Key("mysql_servers"), Index(i), Key("ssl_ca")];
            match std::fs::read(ca) {
                Err(e) => out.push(problem(at, format!("`{}`: cannot read: {e}", ca.display()))),
                Ok(pem) => {
                    use rustls_pki_types::{pem::PemObject, CertificateDer};
                    match CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>() {
                        Err(e) => out.push(problem(at, format!("`{}`: not PEM certificates: {e}", ca.display()))),
                        Ok(certs) if certs.is_empty() => out.push(problem(at, format!("`{}`: no certificate found", ca.display()))),
                        Ok(_) => {
                            if let Err(e) = crate::tls::client_config(Some(ca)) {
                                out.push(problem(at, format!("{e:#}")));
                            }
                        }
                    }
                }
            }
        }
        if let Some(path) = &self.querylog.path {
            let usable = if path.exists() {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map(drop)
                    .map_err(|e| format!("`{}`: cannot append: {e}", path.display()))
            } else {
                match path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    Some(dir) => writable_dir(dir).map_err(|what| format!("`{}`: {what}", path.display())),
                    None => writable_dir(Path::new(".")).map_err(|what| format!("`{}`: {what}", path.display())),
                }
            };
            if let Err(what) = usable {
                out.push(problem(vec![Key("querylog"), Key("path")], what));
            }
        }
        out
    }
}

/// A file that can be read (as start-up will read it).
fn readable(path: &Path) -> Result<(), String> {
    std::fs::File::open(path).map(drop).map_err(|e| format!("`{}`: cannot read: {e}", path.display()))
}

/// An existing directory this process can create files in (tried with a file made and removed).
fn writable_dir(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(format!("`{}` does not exist", dir.display())),
        Err(e) => return Err(format!("`{}`: {e}", dir.display())),
        Ok(m) if !m.is_dir() => return Err(format!("`{}` is not a directory", dir.display())),
        Ok(_) => {}
    }
    let probe = dir.join(format!(".sluice-check-{}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("`{}` is not writable: {e}", dir.display())),
    }
}

/// `what` without the field name the TLS helpers start their messages with.
fn unprefixed(what: &str, prefixes: &[&str]) -> String {
    prefixes.iter().find_map(|p| what.strip_prefix(p)).unwrap_or(what).to_string()
}

/// Settings given on the command line: they win over the file and the saved configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub workers: Option<usize>,
    pub runtime: Option<RuntimeKind>,
    pub io: Option<IoEngine>,
    pub admin_listen: Option<String>,
    pub http_listen: Option<String>,
}

impl Overrides {
    /// Puts the command-line settings over `fc`, before it is validated: the configuration
    /// checked is the one that runs.
    pub fn apply_to(&self, fc: &mut FileConfig) {
        if let Some(w) = self.workers {
            fc.proxy.workers = Some(w);
        }
        if let Some(r) = self.runtime {
            fc.proxy.runtime = r;
        }
        if let Some(io) = self.io {
            fc.proxy.io = io;
        }
        if let Some(a) = &self.admin_listen {
            fc.proxy.admin_listen = a.clone();
        }
        if let Some(a) = &self.http_listen {
            fc.proxy.http_listen = a.clone();
        }
    }

    /// The flag that set `field` (`proxy.admin_listen` → `--admin-listen`), if one did.
    fn flag_for(&self, field: &str) -> Option<&'static str> {
        match field {
            "proxy.workers" if self.workers.is_some() => Some("--workers"),
            "proxy.runtime" if self.runtime.is_some() => Some("--runtime"),
            "proxy.io" if self.io.is_some() => Some("--io"),
            "proxy.admin_listen" if self.admin_listen.is_some() => Some("--admin-listen"),
            "proxy.http_listen" if self.http_listen.is_some() => Some("--http-listen"),
            _ => None,
        }
    }
}

/// A configuration error, located in its file when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: Option<PathBuf>,
    pub line: Option<usize>,
    /// `[section] field `name`` or `mysql_users[2].password`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{}:{}: ", file.display(), line)?,
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            _ => {}
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A semantic problem found after parsing: (path to the field, message).
struct Problem {
    path: Vec<PathPart>,
    message: String,
}

enum PathPart {
    Key(&'static str),
    Index(usize),
    /// A key that is data (a table name in `single_tables`).
    Name(String),
}

fn problem(path: Vec<PathPart>, message: impl Into<String>) -> Problem {
    Problem { path, message: message.into() }
}

impl FileConfig {
    pub fn parse(src: &str) -> Result<FileConfig, toml::de::Error> {
        toml::from_str(src)
    }

    /// Checks what types cannot: references between rows, address syntax, hash syntax, and
    /// settings that are unsafe together. Every source goes through it: the file (with the
    /// command line over it), the saved configuration, SIGHUP and `LOAD … TO RUNTIME`. Each
    /// section has its own method; the query rules are checked by compiling them.
    fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        self.check_proxy(&mut out);
        self.check_exposure(&mut out);
        self.check_tls(&mut out);
        self.check_pool(&mut out);
        self.check_stats(&mut out);
        self.check_querylog(&mut out);
        self.check_cache(&mut out);
        self.check_firewall(&mut out);
        self.check_mirror(&mut out);
        self.check_monitor(&mut out);
        self.check_servers(&mut out);
        self.check_replication_hostgroups(&mut out);
        self.check_users(&mut out);
        self.check_sharding(&mut out);
        out
    }

    /// `[proxy]`, its own fields and the rows `backend_users` needs.
    fn check_proxy(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        let at = |k| vec![Key("proxy"), Key(k)];
        let proxy = &self.proxy;
        if proxy.listen.is_empty() {
            out.push(problem(at("listen"), "at least one address is needed"));
        }
        for (i, a) in proxy.listen.iter().enumerate() {
            if a.parse::<SocketAddr>().is_err() {
                out.push(problem(vec![Key("proxy"), Key("listen"), Index(i)], format!("`{a}` is not an IP:port address")));
            }
        }
        for (field, addr) in [("admin_listen", &proxy.admin_listen), ("http_listen", &proxy.http_listen)] {
            if !addr.is_empty() && addr.parse::<SocketAddr>().is_err() {
                out.push(problem(at(field), format!("`{addr}` is not an IP:port address (\"\" turns it off)")));
            }
        }
        if let Err(message) = admin_logins(&proxy.admin_credentials) {
            out.push(problem(at("admin_credentials"), message));
        }
        if proxy.workers == Some(0) {
            out.push(problem(at("workers"), "must be at least 1"));
        }
        let plugin = proxy.default_auth_plugin.as_str();
        if plugin != proto::auth::MYSQL_NATIVE_PASSWORD && plugin != proto::auth::CACHING_SHA2_PASSWORD {
            out.push(problem(
                at("default_auth_plugin"),
                format!("`{plugin}` is not supported (mysql_native_password or caching_sha2_password)"),
            ));
        }
        if proxy.max_allowed_packet.is_some_and(|n| !(1024..=MAX_ALLOWED_PACKET_CEILING).contains(&n)) {
            out.push(problem(at("max_allowed_packet"), "must be from 1024 to 1073741824 (1 GiB)"));
        }
        if !(MIN_BUFFERED_PACKET..proto::frame::MAX_CHUNK).contains(&proxy.max_buffered_packet) {
            out.push(problem(at("max_buffered_packet"), "must be from 262144 to 16777214"));
        }
        if proxy.wait_timeout_ms > WAIT_TIMEOUT_MAX_MS {
            out.push(problem(
                at("wait_timeout_ms"),
                format!("must be at most {WAIT_TIMEOUT_MAX_MS} (a year, the server's limit); 0 turns it off"),
            ));
        }
        if proxy.max_handshakes == 0 || proxy.max_handshakes_per_host == 0 {
            out.push(problem(at("max_handshakes"), "max_handshakes and max_handshakes_per_host must be at least 1"));
        }
        if proxy.buffer_low_watermark >= proxy.buffer_high_watermark || proxy.buffer_high_watermark < 16 << 10 {
            out.push(problem(at("buffer_high_watermark"), "must be at least 16384 and above buffer_low_watermark"));
        }
        if proxy.backend_users && self.monitor.as_ref().is_none_or(|m| m.username.is_empty()) {
            out.push(problem(at("backend_users"), "needs a [monitor] section with a username to read the backend's accounts"));
        }
        if proxy.backend_users && !self.mysql_servers.iter().any(|s| s.hostgroup_id == proxy.backend_users_hostgroup) {
            out.push(problem(
                at("backend_users_hostgroup"),
                format!("hostgroup {} has no [[mysql_servers]] row", proxy.backend_users_hostgroup),
            ));
        }
    }

    /// The default admin:admin guards the admin port and the HTTP port (Basic auth off
    /// loopback): refused when either listens beyond loopback, wherever the address came from.
    fn check_exposure(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        let Ok(logins) = admin_logins(&self.proxy.admin_credentials) else { return };
        if !logins.iter().any(|(u, p)| *u == "admin" && *p == "admin") {
            return;
        }
        let exposed = [("admin_listen", &self.proxy.admin_listen), ("http_listen", &self.proxy.http_listen)]
            .into_iter()
            .find(|(_, addr)| addr.parse::<SocketAddr>().is_ok_and(|a| !a.ip().is_loopback()));
        if let Some((field, addr)) = exposed {
            out.push(problem(
                vec![Key("proxy"), Key("admin_credentials")],
                format!("the default admin:admin is refused while {field} (`{addr}`) is not a loopback address; choose your own"),
            ));
        }
    }

    /// `[tls]`.
    fn check_tls(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            out.push(problem(vec![Key("tls"), Key(if self.tls.cert.is_some() { "key" } else { "cert" })], "cert and key go together"));
        }
    }

    /// `[pool]`.
    fn check_pool(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        for (field, value) in
            [("max_statements_per_connection", self.pool.max_statements_per_connection), ("max_statements", self.pool.max_statements)]
        {
            if value == 0 {
                out.push(problem(vec![Key("pool"), Key(field)], "must be at least 1"));
            }
        }
    }

    /// `[stats]`.
    fn check_stats(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        if self.stats.max_digests_per_worker == 0 {
            out.push(problem(vec![Key("stats"), Key("max_digests_per_worker")], "must be at least 1"));
        }
    }

    /// `[cache]`: room for at least one entry, and an entry no larger than the whole.
    fn check_cache(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        let c = &self.cache;
        if c.max_memory_bytes < MIN_CACHE_MEMORY {
            out.push(problem(vec![Key("cache"), Key("max_memory_bytes")], format!("must be at least {MIN_CACHE_MEMORY} (1 MiB)")));
        }
        if c.max_entry_bytes == 0 {
            out.push(problem(vec![Key("cache"), Key("max_entry_bytes")], "must be at least 1"));
        } else if c.max_entry_bytes > c.max_memory_bytes / CACHE_SHARDS {
            let most = c.max_memory_bytes / CACHE_SHARDS;
            out.push(problem(
                vec![Key("cache"), Key("max_entry_bytes")],
                format!("must be at most max_memory_bytes / {} ({most}): the cache is kept in that many parts", CACHE_SHARDS),
            ));
        } else if c.max_entry_bytes >= proto::frame::MAX_CHUNK {
            out.push(problem(vec![Key("cache"), Key("max_entry_bytes")], "must be under 16 MiB"));
        }
    }

    /// `[firewall]` and the firewall's rows (`firewall::check`).
    fn check_firewall(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        let found = crate::firewall::check(
            &self.mysql_firewall_whitelist_users,
            &self.mysql_firewall_whitelist_rules,
            &self.mysql_firewall_whitelist_sqli_fingerprints,
            &self.firewall,
        );
        if let Some((table, index, column, message)) = found {
            let mut path = vec![Key(table)];
            path.extend(index.map(Index));
            path.push(Key(column));
            out.push(problem(path, message));
        }
    }

    /// `[mirror]`: room for one statement, a timeout that can end one.
    fn check_mirror(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        let m = &self.mirror;
        if m.concurrency == 0 {
            out.push(problem(vec![Key("mirror"), Key("concurrency")], "must be at least 1"));
        }
        if m.queue_size < m.concurrency {
            out.push(problem(vec![Key("mirror"), Key("queue_size")], format!("must be at least concurrency ({})", m.concurrency)));
        }
        if !(1..=MONITOR_MAX_MS).contains(&m.timeout_ms) {
            out.push(problem(vec![Key("mirror"), Key("timeout_ms")], format!("must be from 1 to {MONITOR_MAX_MS} (a day)")));
        }
    }

    /// `[querylog]`.
    fn check_querylog(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        if self.querylog.enabled && self.querylog.path.is_none() {
            out.push(problem(vec![Key("querylog"), Key("path")], "is needed when the query log is enabled"));
        }
    }

    /// `[monitor]`: intervals and timeouts of at least 10 ms, bounds that are not 0.
    fn check_monitor(&self, out: &mut Vec<Problem>) {
        use PathPart::Key;
        let Some(m) = &self.monitor else { return };
        let at = |k| vec![Key("monitor"), Key(k)];
        let times = [
            ("connect_interval_ms", m.connect_interval_ms),
            ("ping_interval_ms", m.ping_interval_ms),
            ("read_only_interval_ms", m.read_only_interval_ms),
            ("replication_lag_interval_ms", m.replication_lag_interval_ms),
            ("connect_timeout_ms", m.connect_timeout_ms),
            ("ping_timeout_ms", m.ping_timeout_ms),
        ];
        for (field, ms) in times {
            if !(MONITOR_MIN_MS..=MONITOR_MAX_MS).contains(&ms) {
                out.push(problem(at(field), format!("{ms} is out of range ({MONITOR_MIN_MS} to {MONITOR_MAX_MS} ms)")));
            }
        }
        if m.ping_max_failures == 0 {
            out.push(problem(at("ping_max_failures"), "must be at least 1"));
        }
        if !(1..=10_000).contains(&m.history_rows) {
            out.push(problem(at("history_rows"), format!("{} is out of range (1 to 10000)", m.history_rows)));
        }
        if m.slave_lag_when_null < -1 {
            out.push(problem(at("slave_lag_when_null"), "must be -1 (keep the replica) or a lag in seconds"));
        }
    }

    /// `[[mysql_servers]]`.
    fn check_servers(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        if self.mysql_servers.is_empty() {
            out.push(problem(vec![Key("mysql_servers")], "at least one [[mysql_servers]] row is needed"));
        }
        for (i, s) in self.mysql_servers.iter().enumerate() {
            let at = |k| vec![Key("mysql_servers"), Index(i), Key(k)];
            if s.hostname.trim().is_empty() {
                out.push(problem(at("hostname"), "must not be empty"));
            }
            if s.port == 0 && s.socket_path().is_none() {
                out.push(problem(at("port"), "must not be 0"));
            }
            if s.use_ssl && s.socket_path().is_some() {
                out.push(problem(at("use_ssl"), format!("{} is a Unix socket: sluice does not use TLS over one", s.hostname)));
            }
            if s.max_connections == 0 {
                out.push(problem(at("max_connections"), "must be at least 1"));
            }
            let dup =
                self.mysql_servers[..i].iter().any(|o| o.hostgroup_id == s.hostgroup_id && o.hostname == s.hostname && o.port == s.port);
            if dup {
                out.push(problem(
                    at("hostname"),
                    format!("{} is already in hostgroup {}", server_address(&s.hostname, s.port), s.hostgroup_id),
                ));
            }
        }
    }

    /// A hostgroup statements may be sent to: one with servers, or one of a replication pair
    /// (empty while the monitor has moved its servers to the other).
    fn hostgroup_exists(&self, hostgroup: u32) -> bool {
        self.mysql_servers.iter().any(|s| s.hostgroup_id == hostgroup)
            || self.mysql_replication_hostgroups.iter().any(|r| r.writer_hostgroup == hostgroup || r.reader_hostgroup == hostgroup)
    }

    /// `[[mysql_replication_hostgroups]]`: each hostgroup in one pair at most, servers in one
    /// of the two (either may be empty: the monitor moves servers between them by role).
    fn check_replication_hostgroups(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        let rows = &self.mysql_replication_hostgroups;
        for (i, r) in rows.iter().enumerate() {
            let at = |k| vec![Key("mysql_replication_hostgroups"), Index(i), Key(k)];
            if r.reader_hostgroup == r.writer_hostgroup {
                out.push(problem(at("reader_hostgroup"), format!("must differ from writer_hostgroup ({})", r.writer_hostgroup)));
            }
            let listed = |hg: u32| self.mysql_servers.iter().any(|s| s.hostgroup_id == hg);
            if !listed(r.writer_hostgroup) && !listed(r.reader_hostgroup) && !self.mysql_servers.is_empty() {
                let message = format!("neither hostgroup {} nor {} has a [[mysql_servers]] row", r.writer_hostgroup, r.reader_hostgroup);
                out.push(problem(at("writer_hostgroup"), message));
            }
            if !CHECK_TYPES.contains(&r.check_type.to_ascii_lowercase().as_str()) {
                out.push(problem(at("check_type"), format!("`{}` is not one of {}", r.check_type, CHECK_TYPES.join(", "))));
            }
            for (column, hostgroup) in [("writer_hostgroup", r.writer_hostgroup), ("reader_hostgroup", r.reader_hostgroup)] {
                if let Some(j) = rows[..i].iter().position(|o| o.writer_hostgroup == hostgroup || o.reader_hostgroup == hostgroup) {
                    out.push(problem(at(column), format!("hostgroup {hostgroup} is already in mysql_replication_hostgroups row {j}")));
                }
            }
        }
    }

    /// `[[mysql_users]]`.
    fn check_users(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        if self.mysql_users.is_empty() && !self.proxy.backend_users {
            out.push(problem(vec![Key("mysql_users")], "at least one [[mysql_users]] row is needed (or proxy.backend_users = true)"));
        }
        for (i, u) in self.mysql_users.iter().enumerate() {
            let at = |k| vec![Key("mysql_users"), Index(i), Key(k)];
            if u.username.is_empty() {
                out.push(problem(at("username"), "must not be empty"));
            }
            if self.mysql_users[..i].iter().any(|o| o.username == u.username) {
                out.push(problem(at("username"), format!("user `{}` is defined twice", u.username)));
            }
            if u.password.starts_with('*') && u.password.len() == 41 && proto::auth::parse_native_hash(&u.password).is_none() {
                out.push(problem(at("password"), "looks like a mysql_native_password hash but is not `*` + 40 hex digits"));
            }
            if !self.hostgroup_exists(u.default_hostgroup) && !self.mysql_servers.is_empty() {
                out.push(problem(at("default_hostgroup"), format!("hostgroup {} has no [[mysql_servers]] row", u.default_hostgroup)));
            }
            if u.max_connections == 0 {
                out.push(problem(at("max_connections"), "must be at least 1 (leave it out for 10000)"));
            }
            if u.backend_password.is_some() && u.backend_username.is_none() {
                out.push(problem(at("backend_password"), "needs backend_username"));
            }
            if u.backend_password.as_deref().is_some_and(|p| proto::auth::parse_native_hash(p).is_some()) {
                out.push(problem(at("backend_password"), "must be plain text: sluice logs in to the backend with it"));
            }
        }
    }

    /// `shard_databases[i].single_tables`: each names one node of its database (by the node's
    /// `database`, which must name no other node) and is no sharded or broadcast table of it.
    fn check_single_tables(&self, i: usize, d: &ShardDatabaseRow, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key, Name};
        let names: Vec<&str> = d.nodes.iter().map(|n| n.database.as_str()).collect();
        for (k, (table, node)) in d.single_tables.iter().enumerate() {
            let at = || vec![Key("shard_databases"), Index(i), Key("single_tables"), Name(table.clone())];
            if table.trim().is_empty() {
                out.push(problem(at(), "a single table needs a name"));
                continue;
            }
            if let Some((other, _)) = d.single_tables.iter().take(k).find(|(o, _)| o.eq_ignore_ascii_case(table)) {
                out.push(problem(at(), format!("`{other}` and `{table}` are one table (table names compare without case)")));
            }
            let at_node: Vec<usize> = d.nodes.iter().enumerate().filter(|(_, n)| n.database == *node).map(|(j, _)| j).collect();
            match at_node.as_slice() {
                [] => out.push(problem(at(), format!("`{node}` is no node of `{}` ({})", d.name, names.join(", ")))),
                [_] => {}
                several => {
                    let list: Vec<String> = several.iter().map(|j| format!("node {j} (hostgroup {})", d.nodes[*j].hostgroup)).collect();
                    out.push(problem(
                        at(),
                        format!(
                            "`{node}` names {} of `{}`: a single table's node is named by its database, which must then be \
                             unique among the nodes",
                            list.join(" and "),
                            d.name
                        ),
                    ));
                }
            }
            if d.broadcast_tables.iter().any(|b| b.eq_ignore_ascii_case(table)) {
                out.push(problem(at(), format!("`{table}` is also a broadcast table of `{}`", d.name)));
            }
            let sharded =
                self.sharded_tables.iter().position(|t| t.database.eq_ignore_ascii_case(&d.name) && t.table.eq_ignore_ascii_case(table));
            if let Some(j) = sharded {
                out.push(problem(at(), format!("`{table}` is also a sharded table of `{}` (sharded_tables[{j}])", d.name)));
            }
        }
    }

    /// `[[shard_databases]]` and `[[sharded_tables]]`: names unique, nodes on hostgroups that
    /// exist, algorithms with what they need, binding groups alike.
    fn check_sharding(&self, out: &mut Vec<Problem>) {
        use PathPart::{Index, Key};
        for (i, d) in self.shard_databases.iter().enumerate() {
            let at = |k| vec![Key("shard_databases"), Index(i), Key(k)];
            if d.name.is_empty() {
                out.push(problem(at("name"), "must not be empty"));
            }
            if self.shard_databases[..i].iter().any(|o| o.name.eq_ignore_ascii_case(&d.name)) {
                out.push(problem(at("name"), format!("logical database `{}` is defined twice", d.name)));
            }
            if d.nodes.is_empty() {
                out.push(problem(at("nodes"), "at least one node is needed"));
            }
            for (j, n) in d.nodes.iter().enumerate() {
                let at = |k| vec![Key("shard_databases"), Index(i), Key("nodes"), Index(j), Key(k)];
                if n.database.is_empty() {
                    out.push(problem(at("database"), "must not be empty"));
                }
                if !self.hostgroup_exists(n.hostgroup) && !self.mysql_servers.is_empty() {
                    out.push(problem(at("hostgroup"), format!("hostgroup {} has no [[mysql_servers]] row", n.hostgroup)));
                }
                if d.nodes[..j].iter().any(|o| o.hostgroup == n.hostgroup && o.database == n.database) {
                    out.push(problem(at("database"), format!("node {}.{} is listed twice", n.hostgroup, n.database)));
                }
            }
            if d.max_statement_bytes < 1024 {
                out.push(problem(at("max_statement_bytes"), "must be at least 1024"));
            }
            if d.max_connections_per_query == 0 {
                out.push(problem(at("max_connections_per_query"), "must be at least 1"));
            }
            if d.key_worker_id > 1023 {
                out.push(problem(at("key_worker_id"), "must be from 0 to 1023"));
            }
            if let Some(log) = d.xa_log.as_deref().filter(|l| !l.is_empty()) {
                if self.shard_databases[..i].iter().any(|o| o.xa_log.as_deref() == Some(log)) {
                    out.push(problem(at("xa_log"), "another shard database has this recovery log; each needs its own"));
                }
            }
            self.check_single_tables(i, d, out);
        }
        for (i, t) in self.sharded_tables.iter().enumerate() {
            let at = |k| vec![Key("sharded_tables"), Index(i), Key(k)];
            let Some(db) = self.shard_databases.iter().find(|d| d.name.eq_ignore_ascii_case(&t.database)) else {
                out.push(problem(at("database"), format!("`{}` has no [[shard_databases]] row", t.database)));
                continue;
            };
            if t.table.is_empty() {
                out.push(problem(at("table"), "must not be empty"));
            }
            if t.sharding_column.is_empty() {
                out.push(problem(at("sharding_column"), "must not be empty"));
            }
            let same = |o: &ShardedTableRow| o.database.eq_ignore_ascii_case(&t.database) && o.table.eq_ignore_ascii_case(&t.table);
            if self.sharded_tables[..i].iter().any(same) {
                out.push(problem(at("table"), format!("`{}.{}` is sharded twice", t.database, t.table)));
            }
            if db.broadcast_tables.iter().any(|b| b.eq_ignore_ascii_case(&t.table)) {
                out.push(problem(at("table"), format!("`{}` is also a broadcast table of `{}`", t.table, t.database)));
            }
            if t.tables_per_node == 0 {
                out.push(problem(at("tables_per_node"), "must be at least 1"));
            }
            if t.generated_key.as_deref() == Some("") {
                out.push(problem(at("generated_key"), "must name a column"));
            }
            let shards = db.nodes.len() * t.tables_per_node.max(1) as usize;
            if t.algorithm != "inline" {
                for (field, v) in [("database_expression", &t.database_expression), ("table_expression", &t.table_expression)] {
                    if v.is_some() {
                        out.push(problem(at(field), format!("is for algorithm inline, not {}", t.algorithm)));
                    }
                }
            }
            match t.algorithm.as_str() {
                "mod" | "hash_mod" => {}
                "inline" => {
                    let nodes: Vec<String> = db.nodes.iter().map(|n| n.database.clone()).collect();
                    let tables = crate::shard_expr::physical_names(&t.table, t.tables_per_node as usize);
                    let compile =
                        |e: &String, names: &[String], what| crate::shard_expr::Picker::compile(e, &t.sharding_column, names, what);
                    let node = t.database_expression.as_ref().map(|e| compile(e, &nodes, "node"));
                    let table = t.table_expression.as_ref().map(|e| compile(e, &tables, "table"));
                    if t.database_expression.is_none() {
                        out.push(problem(at("database_expression"), "inline needs a template naming the node (`ds_${user_id % 2}`)"));
                    } else if let Some(Err(e)) = node {
                        out.push(problem(at("database_expression"), e.to_string()));
                    }
                    if t.table_expression.is_none() && t.tables_per_node > 1 {
                        out.push(problem(at("table_expression"), "inline with tables_per_node > 1 needs a template naming the table"));
                    } else if let Some(Err(e)) = table {
                        out.push(problem(at("table_expression"), e.to_string()));
                    }
                }
                "range" => {
                    if t.boundaries.len() + 1 != shards {
                        let message =
                            format!("range needs {} boundaries for {shards} shards, not {}", shards.saturating_sub(1), t.boundaries.len());
                        out.push(problem(at("boundaries"), message));
                    } else if t.boundaries.windows(2).any(|w| w[0] >= w[1]) {
                        out.push(problem(at("boundaries"), "must be strictly ascending"));
                    }
                }
                "list" => {
                    if t.lists.len() != shards {
                        out.push(problem(at("lists"), format!("list needs one list per shard ({shards}), not {}", t.lists.len())));
                    }
                    let mut seen = std::collections::HashSet::new();
                    if let Some(v) = t.lists.iter().flatten().find(|v| !seen.insert(**v)) {
                        out.push(problem(at("lists"), format!("key {v} is in two lists")));
                    }
                }
                other => out.push(problem(at("algorithm"), format!("`{other}` is not one of mod, hash_mod, range, list, inline"))),
            }
            if let Some(group) = &t.binding_group {
                let first = self.sharded_tables[..i].iter().find(|o| o.binding_group.as_ref() == Some(group));
                if let Some(o) = first {
                    let alike = o.database.eq_ignore_ascii_case(&t.database)
                        && o.algorithm == t.algorithm
                        && o.tables_per_node == t.tables_per_node
                        && o.boundaries == t.boundaries
                        && o.lists == t.lists
                        && o.database_expression == t.database_expression
                        && o.table_expression.as_ref().map(|e| e.replacen(&o.table, "", 1))
                            == t.table_expression.as_ref().map(|e| e.replacen(&t.table, "", 1));
                    if !alike {
                        let message = format!(
                            "`{}` must shard like `{}` (same database, algorithm, tables_per_node, boundaries, lists and expressions) to be in binding group `{group}`",
                            t.table, o.table
                        );
                        out.push(problem(at("binding_group"), message));
                    }
                }
            }
        }
    }

    /// Validates and resolves into a `Config`. `src` (the file text) is used to locate problems.
    pub fn validate(self, file: Option<&Path>, src: Option<&str>) -> Result<Config, ConfigError> {
        self.validate_after(None, file, src)
    }

    /// `validate` for a reload: when the rules and the set of hostgroups are those of
    /// `running`, its compiled rules are kept (no recompiling 10,000 rules for a servers
    /// change, and their hit counters go on, as in ProxySQL).
    pub fn validate_after(self, running: Option<&Config>, file: Option<&Path>, src: Option<&str>) -> Result<Config, ConfigError> {
        if let Some(p) = self.problems().into_iter().next() {
            return Err(locate_problem(file, src, &p));
        }
        let hostgroups = |servers: &[ServerRow]| servers.iter().map(|s| s.hostgroup_id).collect::<std::collections::BTreeSet<_>>();
        let reuse =
            running.filter(|r| r.query_rules == self.mysql_query_rules && hostgroups(&r.servers) == hostgroups(&self.mysql_servers));
        let rules = match reuse {
            Some(r) => r.rules.clone(),
            None => std::sync::Arc::new(self.compile_rules(running).map_err(|p| locate_problem(file, src, &p))?),
        };
        // A reload that leaves the firewall as it was keeps it, and the digests it has logged.
        let same_firewall = running.filter(|r| {
            r.firewall == self.firewall
                && r.firewall_users == self.mysql_firewall_whitelist_users
                && r.firewall_rules == self.mysql_firewall_whitelist_rules
                && r.firewall_fingerprints == self.mysql_firewall_whitelist_sqli_fingerprints
        });
        let firewall_compiled = match same_firewall {
            Some(r) => r.firewall_compiled.clone(),
            None => std::sync::Arc::new(crate::firewall::Firewall::build(
                &self.mysql_firewall_whitelist_users,
                &self.mysql_firewall_whitelist_rules,
                &self.mysql_firewall_whitelist_sqli_fingerprints,
                &self.firewall,
            )),
        };
        let listen = self.proxy.listen.iter().filter_map(|a| a.parse().ok()).collect();
        let workers = self.proxy.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Ok(Config {
            listen,
            workers,
            tls: self.tls,
            monitor: self.monitor,
            pool: self.pool,
            stats: self.stats,
            querylog: self.querylog,
            cache: self.cache,
            firewall: self.firewall,
            firewall_users: self.mysql_firewall_whitelist_users,
            firewall_rules: self.mysql_firewall_whitelist_rules,
            firewall_fingerprints: self.mysql_firewall_whitelist_sqli_fingerprints,
            firewall_compiled,
            mirror: self.mirror,
            probe: self.probe,
            servers: self.mysql_servers,
            replication_hostgroups: self.mysql_replication_hostgroups,
            users: self.mysql_users,
            query_rules: self.mysql_query_rules,
            rules,
            shard_databases: self.shard_databases,
            sharded_tables: self.sharded_tables,
            proxy: self.proxy,
        })
    }

    /// What start-up does with a configuration, `--check` and SIGHUP too: the command line put
    /// over it, validated whole, then the files and directories it names checked (without
    /// binding ports). A problem with a setting the command line gave is named by its flag.
    pub fn resolve(mut self, overrides: &Overrides, file: Option<&Path>, src: Option<&str>) -> Result<Config, ConfigError> {
        overrides.apply_to(&mut self);
        let by_flag = |e: ConfigError| match overrides.flag_for(&e.field) {
            Some(flag) => ConfigError { file: None, line: None, field: flag.into(), message: e.message },
            None => e,
        };
        let config = self.validate(file, src).map_err(by_flag)?;
        match config.resource_problems().first() {
            Some(p) => Err(locate_problem(file, src, p)),
            None => Ok(config),
        }
    }

    /// The query rules, compiled: the same step the admin port's LOAD will take.
    fn compile_rules(&self, running: Option<&Config>) -> Result<crate::rules::RuleSet, Problem> {
        let exists = |hg: u32| self.hostgroup_exists(hg);
        crate::rules::RuleSet::after(&self.mysql_query_rules, &exists, running.map(|r| &*r.rules)).map_err(|e| {
            use PathPart::{Index, Key};
            problem(vec![Key("mysql_query_rules"), Index(e.index), Key(e.field)], format!("rule_id {}: {}", e.rule_id, e.message))
        })
    }
}

/// `admin_credentials` as (user, password) pairs: `user:password` separated by `;`.
pub fn admin_logins(credentials: &str) -> Result<Vec<(&str, &str)>, String> {
    credentials
        .split(';')
        .filter(|c| !c.trim().is_empty())
        .map(|c| match c.split_once(':') {
            Some((u, p)) if !u.trim().is_empty() => Ok((u.trim(), p)),
            _ => Err(format!("`{c}` is not user:password")),
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| if v.is_empty() { Err("at least one user:password is needed".into()) } else { Ok(v) })
}

fn field_name(path: &[PathPart]) -> String {
    let mut s = String::new();
    for p in path {
        match p {
            PathPart::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathPart::Name(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathPart::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn locate_problem(file: Option<&Path>, src: Option<&str>, p: &Problem) -> ConfigError {
    let line = src.and_then(|src| {
        let root = toml::de::DeTable::parse(src).ok()?;
        let root = toml::de::DeValue::Table(root.into_inner());
        // Walk as far down the path as the document goes; report the deepest thing found.
        let mut value = &root;
        let mut span = None;
        for part in &p.path {
            let next = match part {
                PathPart::Key(k) => value.get(*k),
                PathPart::Name(k) => value.get(k.as_str()),
                PathPart::Index(i) => value.get(*i),
            };
            match next {
                Some(n) => {
                    value = n.get_ref();
                    span = Some(n.span());
                }
                None => break,
            }
        }
        span.map(|r| line_of(src, r.start))
    });
    ConfigError { file: file.map(Path::to_path_buf), line, field: field_name(&p.path), message: p.message.clone() }
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Turns a TOML/serde error into `line` + `[section] field `name``.
fn locate_parse_error(file: &Path, src: &str, e: &toml::de::Error) -> ConfigError {
    let (line, field) = match e.span() {
        Some(span) => {
            let line = line_of(src, span.start);
            let lines: Vec<&str> = src.lines().collect();
            let text = lines.get(line - 1).copied().unwrap_or("");
            let section =
                lines[..line.saturating_sub(1).min(lines.len())].iter().rev().map(|l| l.trim()).find(|l| l.starts_with('[')).unwrap_or("");
            let key = text.split_once('=').map(|(k, _)| k.trim()).unwrap_or("");
            let field = match (section.is_empty(), key.is_empty()) {
                (_, true) => section.to_string(),
                (true, false) => format!("field `{key}`"),
                (false, false) => format!("{section} field `{key}`"),
            };
            (Some(line), field)
        }
        None => (None, String::new()),
    };
    ConfigError { file: Some(file.to_path_buf()), line, field, message: e.message().trim().to_string() }
}

/// Reads a config file and resolves it with the command line over it (`FileConfig::resolve`).
pub fn load_file(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: Some(path.to_path_buf()),
        line: None,
        field: String::new(),
        message: format!("cannot read: {e}"),
    })?;
    let parsed = FileConfig::parse(&src).map_err(|e| locate_parse_error(path, &src, &e))?;
    parsed.resolve(overrides, Some(path), Some(&src))
}

/// The quick-start form: one backend, one user who is both the client and the backend login.
pub fn quick_start(listen: Vec<String>, backend: &str, user: &str, password: &str) -> Result<Config, ConfigError> {
    let err = |field: &str, message: String| ConfigError { file: None, line: None, field: field.into(), message };
    let (host, port) = match backend.rsplit_once(':') {
        // A Unix socket (its port is 0, as ProxySQL shows one).
        _ if socket_path(backend).is_some() => (backend, 0),
        Some((h, p)) => {
            (h.trim_matches(|c| c == '[' || c == ']'), p.parse::<u16>().map_err(|_| err("--backend", format!("`{backend}`: bad port")))?)
        }
        None => (backend, 3306),
    };
    let mut fc = FileConfig::default();
    if !listen.is_empty() {
        fc.proxy.listen = listen;
    }
    fc.mysql_servers.push(ServerRow {
        hostgroup_id: 0,
        hostname: host.to_string(),
        port,
        status: ServerStatus::Online,
        weight: 1,
        max_connections: default_server_max_connections(),
        max_replication_lag: 0,
        use_ssl: false,
        ssl_ca: None,
        comment: String::new(),
    });
    // Every account of the backend can log in, as on a direct connection: the accounts are
    // read with this login (a password given as a hash cannot log in, so then only this user).
    if proto::auth::parse_native_hash(password).is_none() {
        fc.proxy.backend_users = true;
        fc.monitor = Some(MonitorSection::login(user, password));
    }
    fc.mysql_users.push(UserRow {
        username: user.to_string(),
        password: password.to_string(),
        default_hostgroup: 0,
        default_schema: None,
        active: true,
        backend_username: None,
        backend_password: None,
        max_connections: default_user_max_connections(),
        max_concurrent_queries: 0,
        max_queries_per_second: 0,
        comment: String::new(),
    });
    fc.validate(None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[proxy]
listen = ["127.0.0.1:6033"]
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = 3306
[[mysql_users]]
username = "root"
password = ""
default_hostgroup = 0
"#;

    fn load(src: &str) -> Result<Config, ConfigError> {
        let path = Path::new("sluice.toml");
        let fc = FileConfig::parse(src).map_err(|e| locate_parse_error(path, src, &e))?;
        fc.validate(Some(path), Some(src))
    }

    #[test]
    fn issue_example_loads() {
        let c = load(GOOD).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:6033".parse::<SocketAddr>().unwrap()]);
        assert_eq!(c.servers[0].weight, 1);
        assert!(c.users[0].active);
        assert!(c.workers >= 1);
    }

    #[test]
    fn the_probe_section_is_off_by_default() {
        let c = load(GOOD).unwrap();
        assert_eq!(c.probe, ProbeSection { enabled: false, method: ProbeMethod::Auto, binary: None, symbol: None });
        let with = format!("{GOOD}[probe]\nenabled = true\nbinary = \"/usr/sbin/mariadbd\"\nsymbol = \"dispatch_command\"\n");
        let c = load(&with).unwrap();
        assert!(c.probe.enabled);
        assert_eq!((c.probe.binary.as_deref(), c.probe.symbol.as_deref()), (Some("/usr/sbin/mariadbd"), Some("dispatch_command")));
        assert_eq!(load(&format!("{GOOD}[probe]\nenabled = 1\n")).map(|c| c.probe.enabled).ok(), Some(true), "1 as in ProxySQL");
        let e = load(&format!("{GOOD}[probe]\npid = 7\n")).unwrap_err();
        assert!(e.to_string().contains("unknown field `pid`"), "{e}");
        let method = |m: &str| load(&format!("{GOOD}[probe]\nmethod = \"{m}\"\n")).map(|c| c.probe.method);
        assert_eq!(method("socket").ok(), Some(ProbeMethod::Socket));
        assert_eq!(method("dispatch").ok(), Some(ProbeMethod::Dispatch));
        let e = method("kprobe").unwrap_err().to_string();
        assert!(e.contains("unknown variant `kprobe`") && e.contains("auto"), "{e}");
    }

    #[test]
    fn the_cache_section_is_checked_field_by_field() {
        let c = load(GOOD).unwrap();
        assert_eq!(c.cache, CacheSection { max_memory_bytes: 64 << 20, max_entry_bytes: 1 << 20 }, "defaults");
        assert!(!c.rules_cache());
        let with = |fields: &str| format!("{GOOD}[cache]\n{fields}\n");
        assert_eq!(load(&with("max_memory_bytes = 2097152\nmax_entry_bytes = 4096")).unwrap().cache.max_memory_bytes, 2 << 20);
        let cases = [
            ("max_memory_bytes = 1000", "cache.max_memory_bytes", "at least 1048576"),
            ("max_entry_bytes = 0", "cache.max_entry_bytes", "at least 1"),
            ("max_memory_bytes = 1048576\nmax_entry_bytes = 1048576", "cache.max_entry_bytes", "at most max_memory_bytes / 16 (65536)"),
            ("max_memory_bytes = -1", "[cache] field `max_memory_bytes`", "invalid value"),
            ("ttl = 5", "[cache] field `ttl`", "unknown field `ttl`"),
        ];
        for (fields, field, message) in cases {
            let e = load(&with(fields)).unwrap_err();
            assert!(e.field.contains(field) && e.to_string().contains(message), "{fields}: {e}");
        }
        let rule = format!("{GOOD}[[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_digest = \"^SELECT\"\ncache_ttl = 500\n");
        assert!(load(&rule).unwrap().rules_cache(), "a rule with cache_ttl needs no other setting");
    }

    #[test]
    fn mirror_and_limit_settings_are_checked_field_by_field() {
        let c = load(GOOD).unwrap();
        assert_eq!(c.mirror, MirrorSection { queue_size: 1024, concurrency: 8, writes: false, timeout_ms: 10_000 }, "defaults");
        assert_eq!((c.proxy.wait_timeout_ms, c.users[0].max_connections), (28_800_000, 10_000), "ProxySQL's defaults");
        let mirror = |fields: &str| format!("{GOOD}[mirror]\n{fields}\n");
        let proxy = |fields: &str| GOOD.replace("[proxy]\n", &format!("[proxy]\n{fields}\n"));
        let user = |fields: &str| format!("{GOOD}{fields}\n");
        assert!(load(&mirror("queue_size = 2\nconcurrency = 2\nwrites = true")).unwrap().mirror.writes);
        assert_eq!(load(&proxy("wait_timeout_ms = 0")).unwrap().proxy.wait_timeout_ms, 0, "0 turns it off");
        assert_eq!(load(&user("max_connections = 5")).unwrap().users[0].max_connections, 5);
        let cases = [
            (mirror("concurrency = 0"), "mirror.concurrency", "at least 1"),
            (mirror("queue_size = 4\nconcurrency = 8"), "mirror.queue_size", "at least concurrency (8)"),
            (mirror("timeout_ms = 0"), "mirror.timeout_ms", "must be from 1"),
            (mirror("writes = 2"), "[mirror] field `writes`", "invalid type"),
            (mirror("size = 5"), "[mirror] field `size`", "unknown field `size`"),
            (proxy("wait_timeout_ms = 31536000001"), "proxy.wait_timeout_ms", "at most 31536000000"),
            (user("max_connections = 0"), "mysql_users[0].max_connections", "at least 1"),
            (user("max_connections = -1"), "max_connections", "invalid value"),
        ];
        for (text, field, message) in cases {
            let e = load(&text).unwrap_err();
            assert!(e.field.contains(field) && e.to_string().contains(message), "{text}: {e}");
        }
    }

    #[test]
    fn proxysql_style_ints_for_booleans() {
        let src =
            GOOD.replace("port = 3306", "port = 3306\nuse_ssl = 1").replace("default_hostgroup = 0", "default_hostgroup = 0\nactive = 0");
        let c = load(&src).unwrap();
        assert!(c.servers[0].use_ssl);
        assert!(!c.users[0].active);
        let e = load(&GOOD.replace("port = 3306", "port = 3306\nuse_ssl = 7")).unwrap_err();
        assert_eq!(e.line, Some(8));
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let e = load(&GOOD.replace("hostgroup_id = 0", "hostgrup_id = 0")).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("sluice.toml:5: [[mysql_servers]]"), "{text}");
        assert!(text.contains("hostgrup_id"), "{text}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = load(&GOOD.replace("port = 3306", "port = \"x\"")).unwrap_err();
        assert_eq!(e.line, Some(7));
        assert!(e.field.contains("`port`"), "{e}");
    }

    #[test]
    fn a_server_may_be_a_unix_socket() {
        let socket = GOOD.replace("hostname = \"127.0.0.1\"\nport = 3306", "hostname = \"/run/mysqld/mysqld.sock\"\nport = 0");
        let c = load(&socket).unwrap();
        assert_eq!(c.servers[0].socket_path(), Some(Path::new("/run/mysqld/mysqld.sock")));
        assert_eq!(server_address(&c.servers[0].hostname, c.servers[0].port), "/run/mysqld/mysqld.sock");
        assert_eq!(server_address("db1", 3307), "db1:3307");
        // Port 0 means nothing but for a socket.
        let e = load(&GOOD.replace("port = 3306", "port = 0")).unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("mysql_servers[0].port", "must not be 0"));
        // TLS over a socket is refused, naming the field.
        let e = load(&socket.replace("port = 0", "port = 0\nuse_ssl = 1")).unwrap_err();
        assert_eq!(e.field, "mysql_servers[0].use_ssl");
        assert!(e.message.contains("/run/mysqld/mysqld.sock is a Unix socket"), "{e}");
        let q = quick_start(vec![], "/run/mysqld/mysqld.sock", "app", "").unwrap();
        assert_eq!((q.servers[0].hostname.as_str(), q.servers[0].port), ("/run/mysqld/mysqld.sock", 0));
    }

    #[test]
    fn semantic_problems_are_located() {
        let e = load(&GOOD.replace("default_hostgroup = 0", "default_hostgroup = 5")).unwrap_err();
        assert_eq!(e.line, Some(11), "{e}");
        assert_eq!(e.field, "mysql_users[0].default_hostgroup");
        assert!(e.message.contains("hostgroup 5"));
        let e = load(&GOOD.replace("[\"127.0.0.1:6033\"]", "[\"localhost\"]")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(3), "proxy.listen[0]"));
        let e = load(&GOOD.replace("password = \"\"", &format!("password = \"*{}\"", "Z".repeat(40)))).unwrap_err();
        assert_eq!(e.field, "mysql_users[0].password");
    }

    #[test]
    fn quick_start_builds_one_server_and_user() {
        let c = quick_start(vec!["127.0.0.1:0".into()], "127.0.0.1:3307", "app", "pw").unwrap();
        assert_eq!((c.servers[0].hostname.as_str(), c.servers[0].port), ("127.0.0.1", 3307));
        assert_eq!(c.users[0].username, "app");
        // The backend's accounts log in too, read with the same login (not with a hashed password).
        assert!(c.proxy.backend_users);
        assert_eq!(c.monitor.as_ref().map(|m| (m.username.as_str(), m.password.as_str())), Some(("app", "pw")));
        let hashed = quick_start(vec![], "127.0.0.1", "app", "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9").unwrap();
        assert!(!hashed.proxy.backend_users);
        assert!(quick_start(vec![], "127.0.0.1:x", "a", "").is_err());
    }

    fn resolve(src: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        let path = Path::new("sluice.toml");
        FileConfig::parse(src).unwrap().resolve(overrides, Some(path), Some(src))
    }

    #[test]
    fn default_admin_credentials_are_refused_off_loopback_from_the_file_or_a_flag() {
        let exposed = |e: ConfigError| {
            assert_eq!(e.field, "proxy.admin_credentials", "{e}");
            assert!(e.message.contains("admin:admin"), "{e}");
        };
        exposed(load(&GOOD.replace("[proxy]", "[proxy]\nadmin_listen = \"0.0.0.0:6032\"")).unwrap_err());
        exposed(load(&GOOD.replace("[proxy]", "[proxy]\nhttp_listen = \"0.0.0.0:6070\"")).unwrap_err());
        let flag = Overrides { admin_listen: Some("0.0.0.0:7032".into()), ..Overrides::default() };
        exposed(resolve(GOOD, &flag).unwrap_err());
        let flag = Overrides { http_listen: Some("[::]:7070".into()), ..Overrides::default() };
        exposed(resolve(GOOD, &flag).unwrap_err());
        // Credentials of one's own make both fine; so does a loopback address.
        let own = GOOD.replace("[proxy]", "[proxy]\nadmin_credentials = \"ops:s3cret\"");
        assert!(resolve(&own, &flag).is_ok());
        let flag = Overrides { http_listen: Some("127.0.0.2:7070".into()), ..Overrides::default() };
        assert!(resolve(GOOD, &flag).is_ok());
        // The same check refuses it when it comes through the admin port (any later validate).
        let mut fc = FileConfig::parse(GOOD).unwrap();
        fc.proxy.http_listen = "0.0.0.0:6070".into();
        exposed(fc.validate_after(None, None, None).unwrap_err());
    }

    #[test]
    fn a_bad_flag_is_named_by_the_flag() {
        let flag = Overrides { admin_listen: Some("nowhere".into()), ..Overrides::default() };
        let e = resolve(GOOD, &flag).unwrap_err();
        assert_eq!((e.field.as_str(), e.line, e.file.as_deref()), ("--admin-listen", None, None), "{e}");
        assert!(e.to_string().starts_with("--admin-listen: `nowhere` is not an IP:port address"), "{e}");
        let e = resolve(GOOD, &Overrides { workers: Some(0), ..Overrides::default() }).unwrap_err();
        assert_eq!(e.to_string(), "--workers: must be at least 1");
        let c = resolve(GOOD, &Overrides { workers: Some(3), http_listen: Some(String::new()), ..Overrides::default() }).unwrap();
        assert_eq!((c.workers, c.proxy.http_listen.as_str()), (3, ""));
    }

    #[test]
    fn files_the_config_names_are_checked_as_start_up_uses_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let at = |field: &str, value: String| GOOD.replace("[proxy]", &format!("[proxy]\n{field} = \"{value}\""));
        let e = resolve(&at("datadir", format!("{d}/missing")), &Overrides::default()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(3), "proxy.datadir"), "{e}");
        assert!(e.message.contains("does not exist"), "{e}");
        assert!(resolve(&at("datadir", d.to_string()), &Overrides::default()).is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, "not a certificate").unwrap();
        let e = resolve(&at("datadir", file.display().to_string()), &Overrides::default()).unwrap_err();
        assert!(e.message.contains("is not a directory"), "{e}");

        let tls = |cert: &str, key: &str| format!("{GOOD}[tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n");
        let e = resolve(&tls(&format!("{d}/none.pem"), &format!("{d}/none.pem")), &Overrides::default()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(13), "tls.cert"), "{e}");
        assert!(e.message.contains("cannot read"), "{e}");
        let e = resolve(&tls(&file.display().to_string(), &file.display().to_string()), &Overrides::default()).unwrap_err();
        assert_eq!(e.field, "tls.cert", "{e}");
        assert!(e.message.contains("no certificate"), "{e}");
        // Not checked when TLS is off, as start-up does not read them then.
        let off = tls(&format!("{d}/none.pem"), &format!("{d}/none.pem")).replace("[tls]", "[tls]\nenabled = false");
        assert!(resolve(&off, &Overrides::default()).is_ok());

        let rsa = format!("{GOOD}[tls]\nrsa_key = \"{}\"\n", file.display());
        let e = resolve(&rsa, &Overrides::default()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(13), "tls.rsa_key"), "{e}");

        let ca = GOOD.replace("port = 3306", &format!("port = 3306\nuse_ssl = 1\nssl_ca = \"{d}/ca.pem\""));
        let e = resolve(&ca, &Overrides::default()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(9), "mysql_servers[0].ssl_ca"), "{e}");
        assert!(resolve(&ca.replace("use_ssl = 1", "use_ssl = 0"), &Overrides::default()).is_ok());

        let log = |path: String| format!("{GOOD}[querylog]\npath = \"{path}\"\n");
        let e = resolve(&log(format!("{d}/no/such/dir/q.log")), &Overrides::default()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(13), "querylog.path"), "{e}");
        assert!(resolve(&log(format!("{d}/q.log")), &Overrides::default()).is_ok());
        assert!(!dir.path().join("q.log").exists(), "checking does not create the log");
    }

    #[test]
    fn problems_deep_in_arrays_are_located() {
        let src = GOOD.replace("listen = [\"127.0.0.1:6033\"]", "listen = [\n  \"127.0.0.1:6033\",\n  \"nowhere\",\n]");
        let e = load(&src).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(5), "proxy.listen[1]"), "{e}");
        let two = format!("{GOOD}[[mysql_users]]\nusername = \"app\"\n\ndefault_hostgroup = 9\n");
        let e = load(&two).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(15), "mysql_users[1].default_hostgroup"), "{e}");
        // A field left out: the row's own line.
        let e = load(&GOOD.replace("hostgroup_id = 0", "hostgroup_id = 1").replace("default_hostgroup = 0\n", "")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(8), "mysql_users[0].default_hostgroup"), "{e}");
    }
}
