//! stats (beside ①–⑥): the global counters, named as ProxySQL's stats_mysql_global names them
//! (sluice's own ones in the same style).

/// A global counter. Every one only grows; `Stats::add` bumps it on the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Statements finished. `Stats::record` counts these itself.
    Questions,
    SlowQueries,
    ClientConnectionsCreated,
    ClientConnectionsAborted,
    ServerConnectionsCreated,
    ServerConnectionsAborted,
    ConnPoolGetConnImmediate,
    ConnPoolGetConnSuccess,
    ConnPoolGetConnFailure,
    ComFrontendStmtPrepare,
    ComFrontendStmtExecute,
    ComFrontendStmtClose,
    AccessDeniedWrongPassword,
    AccessDeniedMaxConnections,
    QueriesBackendsBytesSent,
    QueriesBackendsBytesRecv,
    BackendQueryTimeNsec,
    KilledBackendQueries,
    GeneratedErrorPackets,
    /// Digest entries evicted to stay within max_digests_per_worker. `Stats::record` counts
    /// these itself.
    DigestEvictions,
    /// Failed logins on the admin port and the HTTP port (not in Access_Denied_Wrong_Password,
    /// which counts clients').
    AdminAccessDenied,
    /// Statements that found no usable writer and waited for one (`[pool] writer_wait_ms`).
    WriterWaits,
    /// Of those, the ones that gave up: no writer came within the wait.
    WriterWaitTimeouts,
    /// Autocommit reads run again after their backend connection was lost before the reply.
    ReadsRunAgain,
    /// Transactions replayed on a new writer connection after theirs was lost.
    TransactionsReplayed,
    /// Transactions whose connection was lost and that could not be replayed (the client got
    /// an error and the transaction was rolled back).
    TransactionReplaysFailed,
    /// Reads that waited on a replica for the session's causal position (MASTER_GTID_WAIT).
    CausalReadWaits,
    /// Reads the writer answered because no replica had applied the causal position in time.
    CausalReadsOnWriter,
    /// Result cache (`cache`): lookups of statements a rule's cache_ttl made cacheable…
    QueryCacheGet,
    /// …of those, the ones served from the cache.
    QueryCacheGetOk,
    /// Results stored.
    QueryCacheSet,
    /// Reply bytes stored, and served from the cache.
    QueryCacheBytesIn,
    QueryCacheBytesOut,
    /// Entries dropped because they expired or a write invalidated them.
    QueryCachePurged,
    /// Entries evicted (least recently used) to stay within `[cache] max_memory_bytes`.
    QueryCacheEvicted,
    /// Writes through sluice that invalidated cached results (of their tables, or all).
    QueryCacheInvalidations,
    /// Firewall (`firewall`): statements checked and let through (allowlisted, an OFF user,
    /// or nothing flagged)…
    FirewallAllowed,
    /// …refused because a PROTECTING user's digest is not on the allowlist…
    FirewallBlocked,
    /// …run though not on the allowlist (DETECTING)…
    FirewallDetected,
    /// …refused because the SQL-injection heuristic flagged them.
    FirewallSqli,
    /// Logins refused because their user had `mysql_users.max_connections` sessions open.
    AccessDeniedMaxUserConnections,
    /// Client sessions closed for being idle beyond their wait_timeout.
    ClientIdleTimeouts,
    /// Mirroring (`mirror`): statements a rule's mirror_hostgroup queued for the mirror…
    MirrorQueued,
    /// …not queued because `[mirror] queue_size` were waiting or running already…
    MirrorDropped,
    /// …run on the mirror hostgroup (results discarded)…
    MirrorCompleted,
    /// …and those that found no connection, were refused by the mirror or timed out.
    MirrorFailed,
    /// Statements refused for a user's or a query rule's max_concurrent_queries…
    QueryLimitConcurrentRefused,
    /// …or max_queries_per_second.
    QueryLimitRateRefused,
    /// Transactions on shards (`shard::xa`) committed: on one shard (ONE PHASE) or several…
    XaCommits,
    /// …rolled back (ROLLBACK, a failed PREPARE, a lost branch, the client gone)…
    XaRollbacks,
    /// …and branches recovery committed or rolled back after a crash or a lost connection.
    XaRecoveredCommits,
    XaRecoveredRollbacks,
}

impl Counter {
    /// Every counter, in declaration order; `Counter as usize` indexes it.
    pub const ALL: [Counter; 52] = [
        Counter::Questions,
        Counter::SlowQueries,
        Counter::ClientConnectionsCreated,
        Counter::ClientConnectionsAborted,
        Counter::ServerConnectionsCreated,
        Counter::ServerConnectionsAborted,
        Counter::ConnPoolGetConnImmediate,
        Counter::ConnPoolGetConnSuccess,
        Counter::ConnPoolGetConnFailure,
        Counter::ComFrontendStmtPrepare,
        Counter::ComFrontendStmtExecute,
        Counter::ComFrontendStmtClose,
        Counter::AccessDeniedWrongPassword,
        Counter::AccessDeniedMaxConnections,
        Counter::QueriesBackendsBytesSent,
        Counter::QueriesBackendsBytesRecv,
        Counter::BackendQueryTimeNsec,
        Counter::KilledBackendQueries,
        Counter::GeneratedErrorPackets,
        Counter::DigestEvictions,
        Counter::AdminAccessDenied,
        Counter::WriterWaits,
        Counter::WriterWaitTimeouts,
        Counter::ReadsRunAgain,
        Counter::TransactionsReplayed,
        Counter::TransactionReplaysFailed,
        Counter::CausalReadWaits,
        Counter::CausalReadsOnWriter,
        Counter::QueryCacheGet,
        Counter::QueryCacheGetOk,
        Counter::QueryCacheSet,
        Counter::QueryCacheBytesIn,
        Counter::QueryCacheBytesOut,
        Counter::QueryCachePurged,
        Counter::QueryCacheEvicted,
        Counter::QueryCacheInvalidations,
        Counter::FirewallAllowed,
        Counter::FirewallBlocked,
        Counter::FirewallDetected,
        Counter::FirewallSqli,
        Counter::AccessDeniedMaxUserConnections,
        Counter::ClientIdleTimeouts,
        Counter::MirrorQueued,
        Counter::MirrorDropped,
        Counter::MirrorCompleted,
        Counter::MirrorFailed,
        Counter::QueryLimitConcurrentRefused,
        Counter::QueryLimitRateRefused,
        Counter::XaCommits,
        Counter::XaRollbacks,
        Counter::XaRecoveredCommits,
        Counter::XaRecoveredRollbacks,
    ];
    pub const COUNT: usize = Counter::ALL.len();

    /// The Variable_Name in stats_mysql_global.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Questions => "Questions",
            Counter::SlowQueries => "Slow_queries",
            Counter::ClientConnectionsCreated => "Client_Connections_created",
            Counter::ClientConnectionsAborted => "Client_Connections_aborted",
            Counter::ServerConnectionsCreated => "Server_Connections_created",
            Counter::ServerConnectionsAborted => "Server_Connections_aborted",
            Counter::ConnPoolGetConnImmediate => "ConnPool_get_conn_immediate",
            Counter::ConnPoolGetConnSuccess => "ConnPool_get_conn_success",
            Counter::ConnPoolGetConnFailure => "ConnPool_get_conn_failure",
            Counter::ComFrontendStmtPrepare => "Com_frontend_stmt_prepare",
            Counter::ComFrontendStmtExecute => "Com_frontend_stmt_execute",
            Counter::ComFrontendStmtClose => "Com_frontend_stmt_close",
            Counter::AccessDeniedWrongPassword => "Access_Denied_Wrong_Password",
            Counter::AccessDeniedMaxConnections => "Access_Denied_Max_Connections",
            Counter::QueriesBackendsBytesSent => "Queries_backends_bytes_sent",
            Counter::QueriesBackendsBytesRecv => "Queries_backends_bytes_recv",
            Counter::BackendQueryTimeNsec => "Backend_query_time_nsec",
            Counter::KilledBackendQueries => "mysql_killed_backend_queries",
            Counter::GeneratedErrorPackets => "generated_error_packets",
            Counter::DigestEvictions => "Query_digest_evictions",
            Counter::AdminAccessDenied => "Admin_Access_Denied_Wrong_Password",
            Counter::WriterWaits => "Writer_waits",
            Counter::WriterWaitTimeouts => "Writer_wait_timeouts",
            Counter::ReadsRunAgain => "Reads_run_again",
            Counter::TransactionsReplayed => "Transactions_replayed",
            Counter::TransactionReplaysFailed => "Transaction_replays_failed",
            Counter::CausalReadWaits => "Causal_read_waits",
            Counter::CausalReadsOnWriter => "Causal_reads_on_writer",
            Counter::QueryCacheGet => "Query_Cache_count_GET",
            Counter::QueryCacheGetOk => "Query_Cache_count_GET_OK",
            Counter::QueryCacheSet => "Query_Cache_count_SET",
            Counter::QueryCacheBytesIn => "Query_Cache_bytes_IN",
            Counter::QueryCacheBytesOut => "Query_Cache_bytes_OUT",
            Counter::QueryCachePurged => "Query_Cache_Purged",
            Counter::QueryCacheEvicted => "Query_Cache_Evicted",
            Counter::QueryCacheInvalidations => "Query_Cache_Invalidations",
            Counter::FirewallAllowed => "Firewall_allowed",
            Counter::FirewallBlocked => "Firewall_blocked",
            Counter::FirewallDetected => "Firewall_detected",
            Counter::FirewallSqli => "Firewall_sqli_blocked",
            Counter::AccessDeniedMaxUserConnections => "Access_Denied_Max_User_Connections",
            Counter::ClientIdleTimeouts => "Client_Connections_idle_timeout",
            Counter::MirrorQueued => "Mirror_queued",
            Counter::MirrorDropped => "Mirror_dropped",
            Counter::MirrorCompleted => "Mirror_completed",
            Counter::MirrorFailed => "Mirror_failed",
            Counter::QueryLimitConcurrentRefused => "Query_limit_concurrent_refused",
            Counter::QueryLimitRateRefused => "Query_limit_rate_refused",
            Counter::XaCommits => "Shard_xa_commits",
            Counter::XaRollbacks => "Shard_xa_rollbacks",
            Counter::XaRecoveredCommits => "Shard_xa_recovered_commits",
            Counter::XaRecoveredRollbacks => "Shard_xa_recovered_rollbacks",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_declaration_order_and_names_are_unique() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{c:?}");
        }
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Counter::COUNT);
    }
}
