//! KILL [QUERY|CONNECTION] <id> and COM_PROCESS_KILL: the id is the one sluice announced to the
//! target client (or that target's backend thread id); the KILL runs on the target's backend
//! server with the killer's own login, so the server's privilege rules decide.

use super::Session;
use crate::pool::{self, BackendError, Credential};
use crate::route::Server;
use proto::errors::*;
use sql::classify::KillScope;

impl Session {
    /// Answers a KILL. False when the session must end (it killed itself).
    pub(super) async fn kill(&mut self, target: u64, scope: KillScope, hard: Option<bool>, seq: u8) -> bool {
        let unknown = format!("Unknown thread id: {target}");
        let Some(handle) = self.shared.registry.find(target) else {
            self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &unknown).await;
            return true;
        };
        let Some((server_name, thread)) = handle.backend() else {
            self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &unknown).await;
            return true;
        };
        let Some(server) = self.shared.hostgroups.find(&server_name).cloned() else {
            self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &unknown).await;
            return true;
        };
        let modifier = match hard {
            Some(true) => "HARD ",
            Some(false) => "SOFT ",
            None => "",
        };
        let what = if scope == KillScope::Query { "QUERY" } else { "CONNECTION" };
        let sql = format!("KILL {modifier}{what} {thread}");
        match run_on(&server, &self.backend_login, &sql, self.shared.config.connect_timeout()).await {
            Ok(_) => {
                if scope == KillScope::Connection {
                    handle.kill();
                    if handle.id == self.id {
                        self.reply_err(seq, 1927, b"70100", "Connection was killed").await;
                        return false;
                    }
                    // Answer once the target's client connection is closed, as the server does
                    // (bounded: a target stuck writing to a slow client must not hold us).
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), handle.closed()).await;
                }
                self.reply_ok(seq, "").await
            }
            Err(BackendError::Rejected { code: ER_KILL_DENIED_ERROR, .. }) => {
                self.reply_err(seq, ER_KILL_DENIED_ERROR, SQLSTATE_GENERAL, &format!("You are not owner of thread {target}")).await;
                true
            }
            Err(BackendError::Rejected { code: ER_NO_SUCH_THREAD, .. }) => {
                self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &unknown).await;
                true
            }
            Err(BackendError::Rejected { code, sqlstate, message, .. }) => {
                self.reply_err(seq, code, &sqlstate, &message).await;
                true
            }
            Err(e) => {
                self.reply_err(seq, CR_CONN_HOST_ERROR, SQLSTATE_GENERAL, &e.to_string()).await;
                true
            }
        }
    }
}

/// Runs one statement (a KILL) on `server` over a short-lived connection with `login`.
pub(super) async fn run_on(
    server: &Server,
    login: &(String, Credential),
    sql: &str,
    timeout: std::time::Duration,
) -> Result<(), BackendError> {
    let params = pool::ConnectParams::internal(server, &login.0, &login.1, timeout);
    let (mut conn, _) = pool::connect(&params).await?;
    let r = conn.query(sql).await;
    conn.quit().await;
    r.map(|_| ())
}
