//! KILL [HARD|SOFT] [QUERY|CONNECTION] <id> and COM_PROCESS_KILL: the id is the one sluice
//! announced to the target client (or the backend thread serving it now). Privileges follow
//! the server's rule — your own sessions, or any with SUPER / CONNECTION ADMIN, which the
//! server itself is asked about. The target session kills its own running statement, so the
//! KILL QUERY reaches exactly that statement's backend connection, whichever it is.

use super::multiplex::Needs;
use super::{Flow, Session};
use crate::config::MonitorSection;
use crate::pool::Server;
use crate::pool::{self, BackendError, Credential, Login};
use proto::errors::*;
use sql::classify::KillScope;
use std::sync::Arc;
use std::time::Duration;

/// Does the server let this session's user kill other users' threads?
const MAY_KILL_OTHERS: &str = "SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES \
     WHERE PRIVILEGE_TYPE IN ('SUPER', 'CONNECTION ADMIN') \
     AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')";

impl Session {
    /// Answers a KILL. False when the session must end (it killed itself).
    pub(super) async fn kill(&mut self, target: u64, scope: KillScope, hard: Option<bool>, seq: u8) -> Flow {
        let Some(handle) = self.data.registry.find(target) else {
            self.reply_err(seq, ER_NO_SUCH_THREAD, SQLSTATE_GENERAL, &format!("Unknown thread id: {target}")).await;
            return Flow::Continue;
        };
        if handle.user != self.user.name {
            match self.may_kill_others().await {
                Ok(true) => {}
                Ok(false) => {
                    self.reply_err(seq, ER_KILL_DENIED_ERROR, SQLSTATE_GENERAL, &format!("You are not owner of thread {target}")).await;
                    return Flow::Continue;
                }
                Err(e) => return self.reply_backend_error(seq, &e).await,
            }
        }
        handle.request_kill_query(hard);
        if scope == KillScope::Connection {
            handle.kill();
            if handle.id == self.id {
                self.reply_err(seq, 1927, b"70100", "Connection was killed").await;
                return Flow::End;
            }
            // Answer once the target's client connection is closed, as the server does
            // (bounded: a target stuck writing to a slow client must not hold us).
            let _ = tokio::time::timeout(Duration::from_secs(2), handle.closed()).await;
        }
        self.reply_ok(seq, "").await
    }

    async fn may_kill_others(&mut self) -> Result<bool, BackendError> {
        let mut held = self.acquire(self.unrouted_hostgroup(), 1, Needs::default()).await?;
        let rows = held.backend.query(MAY_KILL_OTHERS).await;
        if let Err(e) = &rows {
            held.backend.note_failure(e);
        }
        self.settle(held);
        Ok(rows?.first().and_then(|r| r.first().cloned().flatten()).is_some_and(|n| n != "0"))
    }
}

/// Kills the statement running on `thread` of `server` with the session's own `login`, from a
/// short-lived side connection; the session awaits it before its connection serves anyone else.
/// A login may always kill its own threads, but it may be unable to open that side connection
/// (its max_user_connections, the server's max_connections, a credential sluice cannot replay):
/// then the `[monitor]` login, when there is one, tries (it needs CONNECTION ADMIN or SUPER).
pub(super) fn kill_query(
    server: &Server,
    thread: u32,
    login: &Arc<Login>,
    monitor: Option<&MonitorSection>,
    hard: Option<bool>,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    let (server, login) = (server.clone(), login.clone());
    let monitor = monitor.filter(|m| !m.username.is_empty()).map(monitor_login);
    let modifier = match hard {
        Some(true) => "HARD ",
        Some(false) => "SOFT ",
        None => "",
    };
    let sql = format!("KILL {modifier}QUERY {thread}");
    tokio::spawn(async move {
        let Err(e) = run_on(&server, &login, &sql, timeout).await else { return };
        match monitor {
            Some(monitor) => match run_on(&server, &monitor, &sql, timeout).await {
                Ok(()) => tracing::debug!("{sql} on {} as {} failed ({e}); the [monitor] login did it", server.name, login.username),
                Err(e2) => tracing::warn!("{sql} on {} failed as {} ({e}) and as the [monitor] login ({e2})", server.name, login.username),
            },
            None => tracing::warn!("{sql} on {} failed: {e}", server.name),
        }
    })
}

/// The `[monitor]` credentials as a login for `run_on`.
fn monitor_login(m: &MonitorSection) -> Login {
    let credential = if m.password.is_empty() { Credential::Empty } else { Credential::Plain(m.password.clone()) };
    Login {
        username: m.username.clone(),
        credential,
        capabilities: proto::CapabilityFlags::empty(),
        mariadb_caps: 0,
        collation: 45,
        attrs: Vec::new(),
    }
}

/// Runs one statement on `server` over a short-lived connection with `login`.
async fn run_on(server: &Server, login: &Login, sql: &str, timeout: Duration) -> Result<(), BackendError> {
    let params = pool::ConnectParams::internal(server, &login.username, &login.credential, timeout);
    let mut conn = pool::connect(&params).await?;
    let r = conn.query(sql).await;
    conn.quit().await;
    r.map(|_| ())
}
