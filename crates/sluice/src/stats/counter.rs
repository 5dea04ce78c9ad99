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
    ComBackendStmtPrepare,
    ComBackendStmtExecute,
    ComBackendStmtClose,
    AccessDeniedWrongPassword,
    AccessDeniedMaxConnections,
    AccessDeniedMaxUserConnections,
    QueriesBackendsBytesSent,
    QueriesBackendsBytesRecv,
    QueriesFrontendsBytesSent,
    QueriesFrontendsBytesRecv,
    BackendQueryTimeNsec,
    KilledBackendConnections,
    KilledBackendQueries,
    GeneratedErrorPackets,
    MaxConnectTimeouts,
    BackendOfflineDuringQuery,
    UnexpectedFrontendComQuit,
    QueryCacheCountGet,
    QueryCacheCountGetOk,
    QueryCacheCountSet,
    /// Query-log events dropped because the writer's queue was full.
    QueryLogDropped,
    /// Digest entries evicted to stay within max_digests_per_worker. `Stats::record` counts
    /// these itself.
    DigestEvictions,
}

impl Counter {
    /// Every counter, in declaration order; `Counter as usize` indexes it.
    pub const ALL: [Counter; 34] = [
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
        Counter::ComBackendStmtPrepare,
        Counter::ComBackendStmtExecute,
        Counter::ComBackendStmtClose,
        Counter::AccessDeniedWrongPassword,
        Counter::AccessDeniedMaxConnections,
        Counter::AccessDeniedMaxUserConnections,
        Counter::QueriesBackendsBytesSent,
        Counter::QueriesBackendsBytesRecv,
        Counter::QueriesFrontendsBytesSent,
        Counter::QueriesFrontendsBytesRecv,
        Counter::BackendQueryTimeNsec,
        Counter::KilledBackendConnections,
        Counter::KilledBackendQueries,
        Counter::GeneratedErrorPackets,
        Counter::MaxConnectTimeouts,
        Counter::BackendOfflineDuringQuery,
        Counter::UnexpectedFrontendComQuit,
        Counter::QueryCacheCountGet,
        Counter::QueryCacheCountGetOk,
        Counter::QueryCacheCountSet,
        Counter::QueryLogDropped,
        Counter::DigestEvictions,
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
            Counter::ComBackendStmtPrepare => "Com_backend_stmt_prepare",
            Counter::ComBackendStmtExecute => "Com_backend_stmt_execute",
            Counter::ComBackendStmtClose => "Com_backend_stmt_close",
            Counter::AccessDeniedWrongPassword => "Access_Denied_Wrong_Password",
            Counter::AccessDeniedMaxConnections => "Access_Denied_Max_Connections",
            Counter::AccessDeniedMaxUserConnections => "Access_Denied_Max_User_Connections",
            Counter::QueriesBackendsBytesSent => "Queries_backends_bytes_sent",
            Counter::QueriesBackendsBytesRecv => "Queries_backends_bytes_recv",
            Counter::QueriesFrontendsBytesSent => "Queries_frontends_bytes_sent",
            Counter::QueriesFrontendsBytesRecv => "Queries_frontends_bytes_recv",
            Counter::BackendQueryTimeNsec => "Backend_query_time_nsec",
            Counter::KilledBackendConnections => "mysql_killed_backend_connections",
            Counter::KilledBackendQueries => "mysql_killed_backend_queries",
            Counter::GeneratedErrorPackets => "generated_error_packets",
            Counter::MaxConnectTimeouts => "max_connect_timeouts",
            Counter::BackendOfflineDuringQuery => "backend_offline_during_query",
            Counter::UnexpectedFrontendComQuit => "mysql_unexpected_frontend_com_quit",
            Counter::QueryCacheCountGet => "Query_Cache_count_GET",
            Counter::QueryCacheCountGetOk => "Query_Cache_count_GET_OK",
            Counter::QueryCacheCountSet => "Query_Cache_count_SET",
            Counter::QueryLogDropped => "Query_log_events_dropped",
            Counter::DigestEvictions => "Query_digest_evictions",
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
