//! The backend's own accounts (`backend_users`), read from the backend at each login over one
//! connection with the `[monitor]` login, so a login through sluice succeeds exactly when the
//! server would take it now; and idle pooled connections of changed accounts closed. The rows
//! and how they decide a login are `users`'.

use crate::pool::{self, Backend, BackendError, Credential};
use crate::snapshot::Snapshot;
use crate::users::{AccountRow, ClientHost, Lookup, LookupFailed, Refusal, ServerPolicy, Unverified};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Lookups waiting for the accounts connection, and the largest number answered by one query.
const MAX_BATCH: usize = 256;

/// The configuration in force (`DataPath::live`).
pub type Live = arc_swap::ArcSwap<Snapshot>;

/// The backend's accounts (`backend_users`), read when a login needs them: one connection with
/// the `[monitor]` login answers every login's question, the questions that queued up while it
/// was busy together in one query, so a login storm costs the backend one query at a time.
#[derive(Default)]
pub struct BackendAccounts {
    waiting: std::sync::Mutex<Vec<Question>>,
    link: tokio::sync::Mutex<Option<AccountsLink>>,
    /// Whether the server resolves client names: 0 not known yet, 1 yes, 2 no
    /// (skip_name_resolve), 3 could not be read (taken as yes, MariaDB's default).
    names: AtomicU8,
    last_recheck: std::sync::Mutex<Option<Instant>>,
    /// `Lookup::digest` per name, as first read since the last recheck: a recheck that reads
    /// another one (privileges changed directly on the server) renews pooled connections.
    digests: std::sync::Mutex<HashMap<String, u64>>,
}

/// Names whose digest is remembered at most (a login storm of distinct names forgets them).
const MAX_DIGESTS: usize = 4096;

struct Question {
    name: String,
    answer: oneshot::Sender<Result<Lookup, LookupFailed>>,
}

impl BackendAccounts {
    /// The rows that decide a login as `name` now, read from the backend.
    pub async fn lookup(&self, live: &Live, name: &str) -> Result<Lookup, LookupFailed> {
        self.lookup_many(live, &[name]).await.pop().unwrap_or_else(|| Err(LookupFailed { code: 0, message: String::new() }))
    }

    /// `lookup` for several names, in their order. Each caller waits for the accounts
    /// connection; whoever gets it first asks for every name queued so far and answers them
    /// all, so the others usually find their answer ready.
    pub async fn lookup_many(&self, live: &Live, names: &[&str]) -> Vec<Result<Lookup, LookupFailed>> {
        let mut pending: Vec<(usize, oneshot::Receiver<_>)> = names.iter().enumerate().map(|(i, n)| (i, self.ask(n))).collect();
        let mut answers: Vec<Option<Result<Lookup, LookupFailed>>> = (0..names.len()).map(|_| None).collect();
        while !pending.is_empty() {
            let mut link = self.link.lock().await;
            pending.retain_mut(|(i, rx)| match rx.try_recv() {
                Ok(answer) => {
                    answers[*i] = Some(answer);
                    false
                }
                // The login that took the question gave up halfway (its client went away): ask again.
                Err(oneshot::error::TryRecvError::Closed) => {
                    *rx = self.ask(names[*i]);
                    true
                }
                Err(oneshot::error::TryRecvError::Empty) => true,
            });
            if pending.is_empty() {
                break;
            }
            let batch: Vec<Question> = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
                let n = waiting.len().min(MAX_BATCH);
                waiting.drain(..n).collect()
            };
            if !batch.is_empty() {
                self.answer(live, &mut link, batch).await;
            }
        }
        let lost =
            || Err(LookupFailed { code: proto::errors::ER_PROXY_NO_BACKEND, message: "reading the backend's accounts failed".into() });
        answers.into_iter().map(|a| a.unwrap_or_else(lost)).collect()
    }

    fn ask(&self, name: &str) -> oneshot::Receiver<Result<Lookup, LookupFailed>> {
        let (answer, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).push(Question { name: name.to_string(), answer });
        rx
    }

    /// Reads the rows for every name of `batch` in one query and answers each question.
    async fn answer(&self, live: &Live, link: &mut Option<AccountsLink>, batch: Vec<Question>) {
        let mut names: Vec<&str> = batch.iter().map(|q| q.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let read = read_accounts(live, link, &names).await;
        if let Some(l) = link.as_ref() {
            self.names.store(if l.resolves_names { 1 } else { 2 }, Ordering::Relaxed);
        }
        if let Ok((rows, _)) = &read {
            let mut digests = self.digests.lock().unwrap_or_else(|p| p.into_inner());
            if digests.len() + names.len() > MAX_DIGESTS {
                digests.clear();
            }
            for name in &names {
                digests.entry(name.to_string()).or_insert_with(|| crate::users::rows_digest(rows, name));
            }
        }
        for q in batch {
            let answer = match &read {
                Ok((rows, policy)) => Ok(Lookup {
                    rows: rows.iter().filter(|r| r.user == q.name || r.user.is_empty()).cloned().collect(),
                    policy: policy.clone(),
                }),
                Err(e) => Err(e.clone()),
            };
            let _ = q.answer.send(answer);
        }
    }

    /// `ip` as the backend server would name it. Whether the server resolves names is read once,
    /// with the `[monitor]` login, else with a configured user's (`Users::own_login`); when it
    /// cannot be read, it is taken to (MariaDB's default).
    pub async fn client_host(&self, live: &Live, ip: IpAddr) -> ClientHost {
        if self.names.load(Ordering::Relaxed) == 0 {
            let mut link = self.link.lock().await;
            if self.names.load(Ordering::Relaxed) == 0 {
                let monitor = live.load().config.monitor.as_ref().is_some_and(|m| !m.username.is_empty());
                let read = if monitor {
                    open_link(live, &mut link).await.map(|l| l.resolves_names).map_err(|e| e.message)
                } else {
                    resolves_names_as_a_user(live).await
                };
                let known = match read {
                    Ok(true) => 1,
                    Ok(false) => 2,
                    Err(e) => {
                        tracing::warn!("cannot read the backend's name resolution setting: {e}");
                        3
                    }
                };
                self.names.store(known, Ordering::Relaxed);
            }
        }
        ClientHost::new(ip, self.names.load(Ordering::Relaxed) != 2)
    }

    /// Closes idle pooled connections whose backend account is gone or whose password changed
    /// (unless sessions that logged in before still use them), and stops keeping such logins
    /// warm: at most once per `backend_users_refresh_ms` (the pool's upkeep calls it every
    /// second). New logins never get such a connection anyway: each is checked against the
    /// account as it is, and a changed account starts a new epoch (`pool::Generations`).
    pub async fn recheck_pooled(&self, live: &Live) {
        let snapshot = live.load_full();
        let proxy = &snapshot.config.proxy;
        if !proxy.backend_users {
            return;
        }
        {
            let mut last = self.last_recheck.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < Duration::from_millis(proxy.backend_users_refresh_ms)) {
                return;
            }
            *last = Some(Instant::now());
        }
        // Configured users' logins are the config's business.
        let mut names: Vec<String> = snapshot
            .hostgroups
            .servers()
            .iter()
            .flat_map(|s| s.pool.idle_logins())
            .map(|l| l.username.clone())
            .filter(|name| snapshot.users.configured(name).is_none())
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return;
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let answers = self.lookup_many(live, &refs).await;
        let lookups: HashMap<&str, Lookup> =
            refs.iter().zip(answers).filter_map(|(name, answer)| answer.ok().map(|l| (*name, l))).collect();
        let changed: Vec<&str> = {
            let mut digests = self.digests.lock().unwrap_or_else(|p| p.into_inner());
            let mut changed = Vec::new();
            for (name, lookup) in &lookups {
                let now = lookup.digest(name);
                if digests.insert(name.to_string(), now).is_some_and(|before| before != now) {
                    changed.push(*name);
                }
            }
            changed
        };
        if !changed.is_empty() {
            // Global privileges are fixed at login: every connection that logged in before is
            // closed instead of reused (idle ones at their next checkout).
            tracing::info!(accounts = ?changed, "backend accounts changed on the server: pooled connections are renewed");
            if let Some(server) = snapshot.hostgroups.servers().first() {
                server.pool.renew_connections();
            }
        }
        for server in snapshot.hostgroups.servers() {
            // Sessions that logged in before the change keep theirs, as on the server.
            let closed = server.pool.close_idle_logins(true, |login| {
                lookups.get(login.username.as_str()).is_some_and(|l| l.outdated(&login.username, &login.credential))
            });
            if closed > 0 {
                tracing::info!(server = %server.name, closed, "closed idle connections of backend accounts that were dropped or got a new password");
            }
        }
    }

    /// How the server refuses a login as `name` that no account sluice can verify matched,
    /// before it checks any password (`Refusal`); `None` for ER_ACCESS_DENIED_ERROR, or when
    /// the server cannot be asked. For an unknown name the server stands in the account a hash
    /// of the name picks (`users::unknown_name_hash`): read from mysql.global_priv, in the
    /// server's order.
    pub async fn refusal(&self, live: &Live, name: &str, basis: Unverified, client_plugin_auth: bool) -> Option<Refusal> {
        let timeout = live.load().config.connect_timeout() * 2;
        let mut slot = self.link.lock().await;
        let asked = tokio::time::timeout(timeout, async {
            if !slot.as_mut().is_some_and(|l| usable(live, l)) {
                *slot = Some(connect_link(live).await.ok()?);
            }
            let link = slot.as_mut()?;
            let plugin = match basis {
                Unverified::Plugin(plugin) => plugin,
                Unverified::NoAccount if link.source == AccountSource::GlobalPriv => stand_in_plugin(&mut link.backend, name).await?,
                Unverified::NoAccount => return None,
            };
            let quoted = hex_literal(plugin.as_bytes());
            let sql = format!(
                "SELECT @@global.secure_auth, (SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_TYPE = 'AUTHENTICATION' \
                 AND PLUGIN_STATUS = 'ACTIVE' AND PLUGIN_NAME = {quoted})"
            );
            let rows = link.backend.query(&sql).await.ok()?;
            let row = rows.first()?;
            let flag = |i: usize| row.get(i).and_then(|v| v.as_deref()).is_some_and(|v| v != "0");
            Refusal::of(&plugin, flag(0), flag(1), client_plugin_auth)
        })
        .await;
        asked.unwrap_or_else(|_| {
            *slot = None;
            None
        })
    }
}

/// Accounts that can log in (roles cannot), in mysql.global_priv.
const NOT_A_ROLE: &str = "IFNULL(JSON_EXTRACT(Priv, '$.is_role'), 'false') <> 'true'";

/// The plugin of the account the server stands in for the unknown name `name`: the one at
/// `unknown_name_hash(name) % accounts` in its accounts ordered by name, then as
/// `users::sort_as_server`.
async fn stand_in_plugin(backend: &mut Backend, name: &str) -> Option<String> {
    // The name's bytes as latin1, as the server hashes them.
    let sql = format!(
        "SELECT COUNT(*), HEX(WEIGHT_STRING(CONVERT({} USING latin1) COLLATE latin1_swedish_ci)) FROM mysql.global_priv WHERE {NOT_A_ROLE}",
        hex_literal(name.as_bytes())
    );
    let rows = backend.query(&sql).await.ok()?;
    let row = rows.first()?;
    let count: u64 = row.first()?.as_deref()?.parse().ok()?;
    let weights = from_hex(row.get(1)?.as_deref().unwrap_or_default())?;
    // No account at all: the server answers ER_ACCESS_DENIED_ERROR.
    let index = crate::users::unknown_name_hash(&weights).checked_rem(count)?;
    // That account's name, its accounts and how many accounts sort before them.
    let sql = format!(
        "SELECT g.User, g.Host, g.Priv, (SELECT COUNT(*) FROM mysql.global_priv b WHERE {NOT_A_ROLE} \
         AND CAST(b.User AS BINARY) < CAST(g.User AS BINARY)) FROM mysql.global_priv g JOIN (SELECT User FROM mysql.global_priv \
         WHERE {NOT_A_ROLE} ORDER BY CAST(User AS BINARY) LIMIT {index}, 1) n ON g.User = n.User WHERE {NOT_A_ROLE}"
    );
    let rows = backend.query(&sql).await.ok()?;
    let before: u64 = rows.first()?.get(3)?.as_deref()?.parse().ok()?;
    let mut accounts: Vec<AccountRow> = rows
        .into_iter()
        .filter_map(|r| {
            let mut it = r.into_iter();
            let (user, host, privileges) = (it.next()??, it.next()??, it.next()??);
            AccountRow::from_global_priv(user, host, &privileges)
        })
        .collect();
    crate::users::sort_as_server(&mut accounts);
    let account = accounts.get(usize::try_from(index.checked_sub(before)?).ok()?)?;
    Some(account.methods.first().map(|(plugin, _)| plugin.clone()).unwrap_or_default())
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()).collect()
}

/// `bytes` as a hex literal: any bytes are only data in SQL.
fn hex_literal(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 3);
    s.push_str("X'");
    for b in bytes {
        s.push_str(&format!("{b:02X}"));
    }
    s.push('\'');
    s
}

/// sluice's connection for reading the backend's accounts (`BackendAccounts`), with the
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
                "SELECT User, Host, Priv, @@global.default_password_lifetime, @@global.max_password_errors, @@global.userstat \
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
    live: &Live,
    link: &mut Option<AccountsLink>,
    names: &[&str],
) -> Result<(Vec<AccountRow>, ServerPolicy), LookupFailed> {
    let names: Vec<&str> = names.iter().copied().filter(|n| n.chars().count() <= MAX_USER_NAME).collect();
    let timeout = live.load().config.connect_timeout();
    match tokio::time::timeout(timeout * 2, read_accounts_inner(live, link, &names)).await {
        Ok(r) => r,
        Err(_) => {
            *link = None;
            Err(LookupFailed {
                code: proto::errors::ER_PROXY_NO_BACKEND,
                message: format!("reading the backend's accounts timed out after {} ms", (timeout * 2).as_millis()),
            })
        }
    }
}

async fn read_accounts_inner(
    live: &Live,
    slot: &mut Option<AccountsLink>,
    names: &[&str],
) -> Result<(Vec<AccountRow>, ServerPolicy), LookupFailed> {
    let mut reopened = false;
    loop {
        let kept = slot.take().and_then(|mut l| if usable(live, &mut l) { Some(l) } else { None });
        let mut link = match kept {
            Some(l) => l,
            None => {
                reopened = true;
                connect_link(live).await?
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
pub async fn open_link<'a>(live: &Live, slot: &'a mut Option<AccountsLink>) -> Result<&'a AccountsLink, LookupFailed> {
    if !slot.as_mut().is_some_and(|l| usable(live, l)) {
        *slot = Some(connect_link(live).await?);
    }
    slot.as_ref().ok_or_else(|| LookupFailed { code: proto::errors::ER_PROXY_NO_BACKEND, message: "no accounts connection".into() })
}

/// Still open, opened under the config in force, and not keeping a retired runtime alive.
fn usable(live: &Live, link: &mut AccountsLink) -> bool {
    let retired = link.backend.runtime.as_ref().is_some_and(|r| r.retired.load(std::sync::atomic::Ordering::Acquire));
    !retired && !link.backend.broken && current_identity(live).is_some_and(|id| id == link.identity) && link.backend.is_alive()
}

fn current_identity(live: &Live) -> Option<(Arc<str>, String, String)> {
    let snapshot = live.load();
    let monitor = snapshot.config.monitor.as_ref()?;
    let server = snapshot.hostgroups.pick(snapshot.config.proxy.backend_users_hostgroup).ok()?;
    Some((server.name.clone(), monitor.username.clone(), monitor.password.clone()))
}

async fn connect_link(live: &Live) -> Result<AccountsLink, LookupFailed> {
    let snapshot = live.load_full();
    let monitor = snapshot.config.monitor.clone().unwrap_or_default();
    let server = snapshot.hostgroups.pick(snapshot.config.proxy.backend_users_hostgroup).map_err(|e| failed(&e.into()))?;
    let credential = Credential::from_password(&monitor.password);
    let params = pool::ConnectParams::internal(server, &monitor.username, &credential, snapshot.config.connect_timeout());
    let mut backend = pool::connect(&params).await.map_err(|e| failed(&e))?;
    let resolves_names = resolves_names(&mut backend).await.map_err(|e| failed(&e))?;
    Ok(AccountsLink {
        backend,
        identity: (server.name.clone(), monitor.username, monitor.password),
        source: AccountSource::GlobalPriv,
        resolves_names,
    })
}

/// Whether the server names clients by their host names (skip_name_resolve off).
async fn resolves_names(backend: &mut Backend) -> Result<bool, BackendError> {
    let skip = backend.query("SELECT @@skip_name_resolve").await?;
    Ok(skip.first().and_then(|r| r.first()).and_then(|v| v.as_deref()) == Some("0"))
}

/// `resolves_names` on a connection of its own with a configured user's login (no `[monitor]`).
async fn resolves_names_as_a_user(live: &Live) -> Result<bool, String> {
    let snapshot = live.load_full();
    let (hostgroup, username, credential) =
        snapshot.users.own_login().ok_or("no [monitor] login, and no configured user whose backend password sluice holds")?;
    let server = snapshot.hostgroups.pick(hostgroup).map_err(|e| e.to_string())?;
    let params = pool::ConnectParams::internal(server, &username, &credential, snapshot.config.connect_timeout());
    let mut backend = pool::connect(&params).await.map_err(|e| e.to_string())?;
    let resolves = resolves_names(&mut backend).await.map_err(|e| e.to_string());
    backend.quit().await;
    resolves
}

fn failed(e: &BackendError) -> LookupFailed {
    let (code, _) = e.client_error();
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
                policy.userstat = it.next().flatten().is_some_and(|v| v == "1");
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
            vec![vec![
                Some("u".into()),
                Some("%".into()),
                Some(r#"{"account_locked":true}"#.into()),
                Some("0".into()),
                Some("10".into()),
                Some("1".into()),
            ]],
        );
        assert!(rows[0].locked && policy.state_known && policy.password_errors_limited && policy.userstat);
        let (rows, policy) = parse_rows(
            AccountSource::UserTable,
            vec![vec![Some("u".into()), Some("%".into()), Some("mysql_native_password".into()), Some("*AB".into())]],
        );
        assert_eq!(rows[0].methods, vec![("mysql_native_password".to_string(), "*AB".to_string())]);
        assert!(!policy.state_known);
    }
}
