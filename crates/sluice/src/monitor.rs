//! Side path: sluice's own look at the backends — the greeting profile at start-up and the
//! backend's accounts for `backend_users`, read at each login over one connection with the
//! `[monitor]` login (`AccountsLink`).

use crate::pool::{self, Backend, BackendError, Credential};
use crate::server::Shared;
use crate::users::{AccountRow, LookupFailed, ServerPolicy};
use std::sync::Arc;
use std::time::Duration;

/// Reads one backend's greeting at start-up so the first clients are greeted like the server
/// (version, capabilities, collation). Best effort: a backend that is down is reported later.
pub fn probe_profile(shared: &Shared) {
    let Some(addr) = shared.snapshot().hostgroups.servers().first().map(|s| format!("{}:{}", s.hostname, s.port)) else {
        return;
    };
    let greeting = (|| -> Option<proto::handshake::ServerGreeting> {
        use std::io::Read;
        let sa = std::net::ToSocketAddrs::to_socket_addrs(&addr).ok()?.next()?;
        let mut s = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut header = [0u8; 4];
        s.read_exact(&mut header).ok()?;
        let (len, _) = proto::frame::header(&header)?;
        let mut payload = vec![0; len.min(1024)];
        s.read_exact(&mut payload).ok()?;
        proto::handshake::parse_greeting(&payload).ok()
    })();
    match greeting {
        Some(g) => shared.learn_profile(&g),
        None => tracing::warn!("backend {addr} did not answer at start-up; greeting clients with defaults"),
    }
}

/// sluice's connection for reading the backend's accounts (`users::BackendAccounts`), with the
/// `[monitor]` login on a server of `backend_users_hostgroup`.
pub struct AccountsLink {
    backend: Backend,
    /// The server and login it was opened with: after a reload that changes them, another opens.
    identity: (Arc<str>, String, String),
    source: AccountSource,
    /// The server resolves client names (skip_name_resolve is off): 127.0.0.1 is `localhost`.
    pub resolves_names: bool,
}

/// Where a server keeps its accounts: MariaDB 10.4+ in mysql.global_priv (with their state:
/// lock, expiry, TLS); older servers and MySQL in mysql.user, read without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AccountSource {
    GlobalPriv,
    UserTable,
    UserTableWithoutPassword,
}

impl AccountSource {
    fn next(self) -> Option<AccountSource> {
        match self {
            AccountSource::GlobalPriv => Some(AccountSource::UserTable),
            AccountSource::UserTable => Some(AccountSource::UserTableWithoutPassword),
            AccountSource::UserTableWithoutPassword => None,
        }
    }

    /// The query for the accounts named `names` and the anonymous ones (`''`), names as hex
    /// literals so any bytes a client sent are only data.
    fn query(self, names: &[&str]) -> String {
        let mut list = String::from("''");
        for name in names.iter().filter(|n| !n.is_empty()) {
            list.push_str(",X'");
            for b in name.as_bytes() {
                list.push_str(&format!("{b:02X}"));
            }
            list.push('\'');
        }
        match self {
            AccountSource::GlobalPriv => format!(
                "SELECT User, Host, Priv, @@global.default_password_lifetime, @@global.max_password_errors \
                 FROM mysql.global_priv WHERE User IN ({list})"
            ),
            AccountSource::UserTable => format!(
                "SELECT User, Host, plugin, IF(authentication_string = '', Password, authentication_string) FROM mysql.user WHERE User IN ({list})"
            ),
            AccountSource::UserTableWithoutPassword => {
                format!("SELECT User, Host, plugin, authentication_string FROM mysql.user WHERE User IN ({list})")
            }
        }
    }
}

/// Names longer than MariaDB's (128 characters) match no account: not sent.
const MAX_USER_NAME: usize = 128;

/// Reads the rows of the accounts named `names` (and the anonymous ones) over `link`, opening
/// it if needed; a link the server closed is reopened once.
pub async fn read_accounts(
    shared: &Shared,
    link: &mut Option<AccountsLink>,
    names: &[&str],
) -> Result<(Vec<AccountRow>, ServerPolicy), LookupFailed> {
    let names: Vec<&str> = names.iter().copied().filter(|n| n.chars().count() <= MAX_USER_NAME).collect();
    let timeout = shared.snapshot().config.connect_timeout();
    match tokio::time::timeout(timeout * 2, read_accounts_inner(shared, link, &names)).await {
        Ok(r) => r,
        Err(_) => {
            *link = None;
            Err(LookupFailed {
                code: proto::errors::CR_CONN_HOST_ERROR,
                message: format!("reading the backend's accounts timed out after {} ms", (timeout * 2).as_millis()),
            })
        }
    }
}

async fn read_accounts_inner(
    shared: &Shared,
    slot: &mut Option<AccountsLink>,
    names: &[&str],
) -> Result<(Vec<AccountRow>, ServerPolicy), LookupFailed> {
    let mut reopened = false;
    loop {
        let kept = slot.take().and_then(|mut l| if usable(shared, &mut l) { Some(l) } else { None });
        let mut link = match kept {
            Some(l) => l,
            None => {
                reopened = true;
                connect_link(shared).await?
            }
        };
        match link.backend.query(&link.source.query(names)).await {
            Ok(rows) => {
                let read = parse_rows(link.source, rows);
                *slot = Some(link);
                return Ok(read);
            }
            // No such table, column or variable, or no right to read it: the next source.
            Err(BackendError::Rejected { code: 1142 | 1146 | 1054 | 1193, message, .. }) if link.source.next().is_some() => {
                let next = link.source.next().unwrap_or(link.source);
                tracing::info!("reading accounts from {:?} failed ({message}); trying {next:?}", link.source);
                if next == AccountSource::UserTable {
                    tracing::warn!("the [monitor] login cannot read mysql.global_priv: every backend account's login is proven by a login to the backend (GRANT SELECT ON mysql.global_priv TO the monitor user to avoid it)");
                }
                link.source = next;
                *slot = Some(link);
            }
            Err(e @ BackendError::Rejected { .. }) => {
                *slot = Some(link);
                return Err(failed(&e));
            }
            // The server closed the idle link (wait_timeout, restart): once more on a new one.
            Err(e) if !reopened => {
                tracing::debug!("accounts connection lost ({e}); reopening");
                reopened = true;
            }
            Err(e) => return Err(failed(&e)),
        }
    }
}

/// Opens the accounts link now unless `slot` holds a usable one.
pub async fn open_link<'a>(shared: &Shared, slot: &'a mut Option<AccountsLink>) -> Result<&'a AccountsLink, LookupFailed> {
    if !slot.as_mut().is_some_and(|l| usable(shared, l)) {
        *slot = Some(connect_link(shared).await?);
    }
    slot.as_ref().ok_or_else(|| LookupFailed { code: proto::errors::CR_CONN_HOST_ERROR, message: "no accounts connection".into() })
}

/// Still open, opened under the config in force, and not keeping a retired runtime alive.
fn usable(shared: &Shared, link: &mut AccountsLink) -> bool {
    let retired = link.backend.runtime.as_ref().is_some_and(|r| r.retired.load(std::sync::atomic::Ordering::Acquire));
    !retired && !link.backend.broken && current_identity(shared).is_some_and(|id| id == link.identity) && link.backend.is_alive()
}

fn current_identity(shared: &Shared) -> Option<(Arc<str>, String, String)> {
    let snapshot = shared.snapshot();
    let monitor = snapshot.config.monitor.as_ref()?;
    let server = snapshot.hostgroups.pick(snapshot.config.proxy.backend_users_hostgroup).ok()?;
    Some((server.name.clone(), monitor.username.clone(), monitor.password.clone()))
}

async fn connect_link(shared: &Shared) -> Result<AccountsLink, LookupFailed> {
    let snapshot = shared.live.load_full();
    let monitor = snapshot.config.monitor.clone().unwrap_or_default();
    let server = snapshot.hostgroups.pick(snapshot.config.proxy.backend_users_hostgroup).map_err(|e| failed(&e.into()))?;
    let credential = if monitor.password.is_empty() { Credential::Empty } else { Credential::Plain(monitor.password.clone()) };
    let params = pool::ConnectParams::internal(server, &monitor.username, &credential, snapshot.config.connect_timeout());
    let mut backend = pool::connect(&params).await.map_err(|e| failed(&e))?;
    let skip = backend.query("SELECT @@skip_name_resolve").await.map_err(|e| failed(&e))?;
    let resolves_names = skip.first().and_then(|r| r.first()).and_then(|v| v.as_deref()) == Some("0");
    Ok(AccountsLink {
        backend,
        identity: (server.name.clone(), monitor.username, monitor.password),
        source: AccountSource::GlobalPriv,
        resolves_names,
    })
}

fn failed(e: &BackendError) -> LookupFailed {
    let code = match e {
        BackendError::Rejected { code, .. } => *code,
        BackendError::Unavailable(_) => proto::errors::ER_PROXY_NO_BACKEND,
        _ => proto::errors::CR_CONN_HOST_ERROR,
    };
    tracing::warn!("cannot read the backend's accounts: {e}");
    LookupFailed { code, message: format!("cannot read the backend's accounts: {e}") }
}

fn parse_rows(source: AccountSource, rows: Vec<Vec<Option<String>>>) -> (Vec<AccountRow>, ServerPolicy) {
    let mut policy = ServerPolicy { state_known: source == AccountSource::GlobalPriv, ..Default::default() };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut it = row.into_iter();
        let (Some(Some(user)), Some(Some(host))) = (it.next(), it.next()) else { continue };
        let third = it.next().flatten().unwrap_or_default();
        match source {
            AccountSource::GlobalPriv => {
                policy.default_password_lifetime = it.next().flatten().and_then(|v| v.parse().ok()).unwrap_or(0);
                policy.password_errors_limited =
                    it.next().flatten().and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n < u64::from(u32::MAX));
                out.extend(AccountRow::from_global_priv(user, host, &third));
            }
            AccountSource::UserTable | AccountSource::UserTableWithoutPassword => {
                let hash = it.next().flatten().unwrap_or_default();
                out.push(AccountRow { user, host, methods: vec![(third, hash)], ..Default::default() });
            }
        }
    }
    (out, policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_queries_quote_names_as_hex() {
        let q = AccountSource::GlobalPriv.query(&["a'b", ""]);
        assert!(q.ends_with("WHERE User IN ('',X'612762')"), "{q}");
        let (rows, policy) = parse_rows(
            AccountSource::GlobalPriv,
            vec![vec![Some("u".into()), Some("%".into()), Some(r#"{"account_locked":true}"#.into()), Some("0".into()), Some("10".into())]],
        );
        assert!(rows[0].locked && policy.state_known && policy.password_errors_limited);
        let (rows, policy) = parse_rows(
            AccountSource::UserTable,
            vec![vec![Some("u".into()), Some("%".into()), Some("mysql_native_password".into()), Some("*AB".into())]],
        );
        assert_eq!(rows[0].methods, vec![("mysql_native_password".to_string(), "*AB".to_string())]);
        assert!(!policy.state_known);
    }
}
