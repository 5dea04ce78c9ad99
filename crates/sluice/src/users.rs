//! Who may log in: users from the config, and optionally the backend's own accounts, read from
//! the backend at each login (`BackendAccounts`) so a login through sluice succeeds exactly when
//! the server would take it now. Used by ② session at login and COM_CHANGE_USER only.
//!
//! No plain-text password of a backend account is ever held: its mysql_native_password hash
//! (SHA1(SHA1(pw))) verifies the client, and the verification itself yields SHA1(pw), which is
//! what logging in to the backend as that user takes.

use crate::config::{Config, UserRow};
use crate::pool::Credential;
use proto::auth;
use std::collections::HashMap;
use std::net::IpAddr;

/// How a user's password is known.
#[derive(Clone)]
pub enum Secret {
    Empty,
    Plain { password: String, stage2: [u8; 20], sha2: [u8; 32] },
    NativeHash { stage2: [u8; 20] },
}

impl Secret {
    pub fn from_config(password: &str) -> Secret {
        if password.is_empty() {
            Secret::Empty
        } else if let Some(stage2) = auth::parse_native_hash(password) {
            Secret::NativeHash { stage2 }
        } else {
            Secret::Plain {
                password: password.to_string(),
                stage2: auth::native_stage2(&auth::native_stage1(password.as_bytes())),
                sha2: auth::sha2_digest(password.as_bytes()),
            }
        }
    }

    /// Checks a mysql_native_password reply; on success, what logs in to the backend.
    pub fn verify_native(&self, nonce: &[u8], reply: &[u8]) -> Option<Credential> {
        match self {
            Secret::Empty => reply.is_empty().then_some(Credential::Empty),
            Secret::Plain { password, stage2, .. } => {
                auth::native_verify(stage2, nonce, reply).map(|_| Credential::Plain(password.clone()))
            }
            Secret::NativeHash { stage2 } => auth::native_verify(stage2, nonce, reply).map(Credential::Stage1),
        }
    }

    /// Checks a caching_sha2_password fast-path reply. `Err(())` when this secret cannot take
    /// the fast path (only its hash is known) and full authentication is needed.
    #[allow(clippy::result_unit_err)]
    pub fn verify_sha2_fast(&self, nonce: &[u8], reply: &[u8]) -> Result<Option<Credential>, ()> {
        match self {
            Secret::Empty => Ok(reply.is_empty().then_some(Credential::Empty)),
            Secret::Plain { password, sha2, .. } => Ok(auth::sha2_verify(sha2, nonce, reply).then(|| Credential::Plain(password.clone()))),
            Secret::NativeHash { .. } => Err(()),
        }
    }

    /// Checks a password received in clear (over TLS, or RSA-decrypted).
    pub fn verify_plain(&self, given: &[u8]) -> Option<Credential> {
        match self {
            Secret::Empty => given.is_empty().then_some(Credential::Empty),
            Secret::Plain { password, .. } => (password.as_bytes() == given).then(|| Credential::Plain(password.clone())),
            Secret::NativeHash { stage2 } => {
                let s1 = auth::native_stage1(given);
                (auth::native_stage2(&s1) == *stage2).then_some(Credential::Stage1(s1))
            }
        }
    }

    pub fn has_plain(&self) -> bool {
        matches!(self, Secret::Plain { .. })
    }

    /// Whether `credential` (what a connection logged in to the backend with) is this password.
    pub fn accepts(&self, credential: &Credential) -> bool {
        let stage2 = match credential {
            Credential::Empty => return matches!(self, Secret::Empty),
            Credential::Plain(p) => auth::native_stage2(&auth::native_stage1(p.as_bytes())),
            Credential::Stage1(s1) => auth::native_stage2(s1),
        };
        match self {
            Secret::Empty => false,
            Secret::Plain { stage2: s, .. } | Secret::NativeHash { stage2: s } => *s == stage2,
        }
    }
}

/// A login sluice accepts.
#[derive(Clone)]
pub struct User {
    pub name: String,
    pub secret: Secret,
    pub default_hostgroup: u32,
    pub default_schema: Option<String>,
    /// Separate backend login, when configured.
    pub backend_login: Option<(String, String)>,
    pub from_backend: bool,
    /// Its sessions at once (`mysql_users.max_connections`); none for the backend's own
    /// accounts, which the server limits itself.
    pub max_connections: Option<u32>,
    /// Its statements running at once and per second, over all its sessions.
    pub caps: crate::limits::Caps,
}

impl User {
    fn from_row(row: &UserRow) -> User {
        User {
            name: row.username.clone(),
            secret: Secret::from_config(&row.password),
            default_hostgroup: row.default_hostgroup,
            default_schema: row.default_schema.clone().filter(|s| !s.is_empty()),
            backend_login: row.backend_username.clone().map(|u| (u, row.backend_password.clone().unwrap_or_default())),
            from_backend: false,
            max_connections: Some(row.max_connections),
            caps: crate::limits::Caps { max_concurrent: row.max_concurrent_queries, per_second: row.max_queries_per_second },
        }
    }

    /// The backend login to use once the client has proved `credential`.
    pub fn backend_credential(&self, credential: Credential) -> (String, Credential) {
        match &self.backend_login {
            Some((u, p)) => (u.clone(), Credential::from_password(p)),
            None => (self.name.clone(), credential),
        }
    }
}

/// The users of the config in force (the backend's accounts live beside it, in `DataPath`).
pub struct Users {
    configured: HashMap<String, User>,
}

impl Users {
    pub fn from_config(config: &Config) -> Users {
        let configured = config.users.iter().filter(|u| u.active).map(|u| (u.username.clone(), User::from_row(u))).collect();
        Users { configured }
    }

    pub fn configured(&self, name: &str) -> Option<&User> {
        self.configured.get(name)
    }

    /// A configured user whose backend login sluice holds whole (a password in plain text or
    /// none, or a separate backend login), the first by name: how sluice reaches the backend
    /// for itself when no `[monitor]` login is configured. Its hostgroup, login and credential.
    pub fn own_login(&self) -> Option<(u32, String, Credential)> {
        let mut users: Vec<&User> = self.configured.values().collect();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        users.into_iter().find_map(|u| {
            let credential = match (&u.backend_login, &u.secret) {
                // The separate backend login replaces the client's credential.
                (Some(_), _) => Credential::Empty,
                (None, Secret::Empty) => Credential::Empty,
                (None, Secret::Plain { password, .. }) => Credential::Plain(password.clone()),
                (None, Secret::NativeHash { .. }) => return None,
            };
            let (login, credential) = u.backend_credential(credential);
            Some((u.default_hostgroup, login, credential))
        })
    }
}

/// A client as the server names it in messages and matches it against account hosts:
/// `localhost` for 127.0.0.1 and ::1 when the server resolves names (MariaDB's default), else
/// its IP address. sluice does not look other addresses' names up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientHost {
    pub ip: IpAddr,
    pub name: Option<&'static str>,
}

impl ClientHost {
    pub fn new(ip: IpAddr, resolve_names: bool) -> ClientHost {
        let ip = ip.to_canonical();
        let loopback = ip == IpAddr::from([127, 0, 0, 1]) || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
        ClientHost { ip, name: (resolve_names && loopback).then_some("localhost") }
    }
}

impl std::fmt::Display for ClientHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.ip),
        }
    }
}

/// One account of the backend (a row of MariaDB's mysql.global_priv), as far as logging in goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountRow {
    pub user: String,
    pub host: String,
    /// How the account authenticates, in order (`IDENTIFIED VIA a OR b`): (plugin,
    /// authentication string).
    pub methods: Vec<(String, String)>,
    pub locked: bool,
    /// `PASSWORD EXPIRE` was run (MariaDB keeps password_last_changed = 0).
    pub expired: bool,
    /// Days a password lives: `None` for the server's default_password_lifetime, 0 for ever.
    pub lifetime_days: Option<i64>,
    /// REQUIRE: 0 nothing, 1 SSL, 2 X509, 3 ISSUER/SUBJECT/CIPHER.
    pub ssl_type: u8,
    pub is_role: bool,
    /// A hash of the whole row (mysql.global_priv's `Priv`: global privileges, lock, limits…),
    /// to notice a change made directly on the server; 0 when read from mysql.user.
    pub digest: u64,
}

impl AccountRow {
    /// A row of mysql.global_priv: its `Priv` column is JSON.
    pub fn from_global_priv(user: String, host: String, privileges: &str) -> Option<AccountRow> {
        let v: serde_json::Value = serde_json::from_str(privileges).ok()?;
        let text = |o: &serde_json::Value, key: &str| o.get(key).and_then(|x| x.as_str()).unwrap_or("").to_string();
        let top = (text(&v, "plugin"), text(&v, "authentication_string"));
        let methods = match v.get("auth_or").and_then(|a| a.as_array()) {
            // `{}` in the list stands for the top-level method.
            Some(alternatives) => alternatives
                .iter()
                .map(|m| {
                    if m.as_object().is_some_and(|o| o.is_empty()) {
                        top.clone()
                    } else {
                        (text(m, "plugin"), text(m, "authentication_string"))
                    }
                })
                .collect(),
            None => vec![top],
        };
        Some(AccountRow {
            user,
            host,
            methods,
            locked: v.get("account_locked").and_then(|x| x.as_bool()).unwrap_or(false),
            expired: v.get("password_last_changed").and_then(|x| x.as_i64()) == Some(0),
            lifetime_days: v.get("password_lifetime").and_then(|x| x.as_i64()).filter(|d| *d >= 0),
            ssl_type: v.get("ssl_type").and_then(|x| x.as_u64()).map_or(0, |t| t.min(3) as u8),
            is_role: v.get("is_role").and_then(|x| x.as_bool()).unwrap_or(false),
            digest: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                privileges.hash(&mut h);
                h.finish()
            },
        })
    }
}

/// `Lookup::digest` over `rows`.
pub fn rows_digest(rows: &[AccountRow], name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    rows.iter().filter(|r| r.user == name).fold(0u64, |sum, r| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&r.host, r.digest).hash(&mut h);
        sum.wrapping_add(h.finish())
    })
}

/// What the server adds to the rows when it decides a login.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerPolicy {
    /// The rows carry the accounts' state (lock, expiry, TLS), as mysql.global_priv does. Read
    /// from mysql.user instead, they do not: every login is then proven on the backend.
    pub state_known: bool,
    pub default_password_lifetime: i64,
    /// max_password_errors is set: the server counts wrong passwords per account and blocks
    /// it, which only its own logins show.
    pub password_errors_limited: bool,
    /// userstat is on: the server counts each account's refused logins (USER_STATISTICS).
    pub userstat: bool,
}

/// The backend's rows that decide a login as one name: its own and the anonymous accounts.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    pub rows: Vec<AccountRow>,
    pub policy: ServerPolicy,
}

/// A backend account a login matched, and how far its row vouches for the login.
pub struct Account {
    pub user: User,
    /// The account's REQUIRE (`AccountRow::ssl_type`).
    pub ssl_type: u8,
    /// The row alone cannot say whether the server takes the login now (locked, a password
    /// that expires, or the state not read): a fresh login to the backend decides.
    pub prove: bool,
    /// The server counts this account's refused logins (max_password_errors, userstat): a
    /// password sluice refuses is refused by the server too, which counts it and answers.
    pub failures_counted: bool,
}

/// Reading the backend's accounts failed: the error a client gets instead.
#[derive(Clone, Debug)]
pub struct LookupFailed {
    pub code: u16,
    pub message: String,
}

impl Lookup {
    /// What the rows of `name` say beyond its passwords, as one number (`AccountRow::digest`,
    /// with each row's host): it changes when the account's global privileges change.
    pub fn digest(&self, name: &str) -> u64 {
        rows_digest(&self.rows, name)
    }

    /// The account the server would pick for `name` from `client` — the most specific host
    /// first, anonymous accounts included, as in MariaDB's account order — if sluice can check
    /// its password (mysql_native_password or none). Sessions go to `hostgroup`.
    pub fn account(&self, name: &str, client: &ClientHost, hostgroup: u32) -> Option<Account> {
        let row = self.matching_row(name, client)?;
        let secret = row.methods.iter().find_map(|(plugin, hash)| native_secret(plugin, hash))?;
        let expiring = row.expired
            || match row.lifetime_days {
                Some(days) => days > 0,
                None => self.policy.default_password_lifetime > 0,
            };
        Some(Account {
            user: User {
                name: name.to_string(),
                secret,
                default_hostgroup: hostgroup,
                default_schema: None,
                backend_login: None,
                from_backend: true,
                max_connections: None,
                caps: Default::default(),
            },
            ssl_type: row.ssl_type,
            prove: !self.policy.state_known || row.locked || expiring || self.policy.password_errors_limited,
            failures_counted: self.policy.password_errors_limited || self.policy.userstat,
        })
    }

    /// The row the server picks for `name` from `client`: the most specific host first,
    /// anonymous accounts included.
    fn matching_row(&self, name: &str, client: &ClientHost) -> Option<&AccountRow> {
        self.rows
            .iter()
            .filter(|r| !r.is_role && (r.user == name || r.user.is_empty()) && host_matches(&r.host, client))
            // On a tie MariaDB puts `localhost` before `127.0.0.1`: the greater host string.
            .max_by(|a, b| (host_sort(&a.host), !a.user.is_empty(), &a.host).cmp(&(host_sort(&b.host), !b.user.is_empty(), &b.host)))
    }

    /// For a login `account` found nothing sluice can verify for: what the server's refusal
    /// depends on.
    pub fn unverified(&self, name: &str, client: &ClientHost) -> Unverified {
        match self.matching_row(name, client) {
            Some(row) => Unverified::Plugin(row.methods.first().map(|(plugin, _)| plugin.clone()).unwrap_or_default()),
            None => Unverified::NoAccount,
        }
    }

    /// Whether a connection logged in as `name` with `credential` could not log in again: the
    /// account is gone, or none of its passwords is this one. False when sluice cannot tell (a
    /// plugin it cannot check).
    pub fn outdated(&self, name: &str, credential: &Credential) -> bool {
        let mut unknown = false;
        for row in self.rows.iter().filter(|r| r.user == name && !r.is_role) {
            for (plugin, hash) in &row.methods {
                match native_secret(plugin, hash) {
                    Some(secret) if secret.accepts(credential) => return false,
                    Some(_) => {}
                    None => unknown = true,
                }
            }
        }
        !unknown
    }
}

/// What decides how the server refuses a login that no account sluice can verify matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unverified {
    /// The account the server picks authenticates with this plugin (its first method).
    Plugin(String),
    /// No account matches: the server picks one of its accounts by a hash of the name and
    /// lets the login fail the way that account's would (MDEV-3909: unknown names cannot be
    /// told from known ones).
    NoAccount,
}

/// How the server refuses a login before any password is checked, where it does not answer
/// ER_ACCESS_DENIED_ERROR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// ER_SERVER_IS_IN_SECURE_AUTH_MODE: a mysql_old_password account under secure_auth.
    SecureAuth,
    /// ER_PLUGIN_IS_NOT_LOADED: the account's authentication plugin is not loaded.
    PluginNotLoaded(String),
    /// ER_NOT_SUPPORTED_AUTH_MODE: a plugin other than the native ones, for a client that
    /// cannot be switched to another plugin.
    NotSupportedAuthMode,
}

impl Refusal {
    /// The server's refusal of a login to an account of `plugin`, given whether secure_auth is
    /// on, whether the plugin is loaded and whether the client can switch plugins; `None` when
    /// it goes on to check the password (and refuses with ER_ACCESS_DENIED_ERROR).
    pub fn of(plugin: &str, secure_auth: bool, loaded: bool, client_plugin_auth: bool) -> Option<Refusal> {
        match plugin {
            "" | "mysql_native_password" => None,
            "mysql_old_password" => secure_auth.then_some(Refusal::SecureAuth),
            _ if !client_plugin_auth => Some(Refusal::NotSupportedAuthMode),
            _ if !loaded => Some(Refusal::PluginNotLoaded(plugin.to_string())),
            _ => None,
        }
    }
}

/// MariaDB's hash of a user name, for the account it stands an unknown name in for
/// (find_mpvio_user: latin1_swedish_ci's hash_sort from nr1 = 1, nr2 = 4): over the name's
/// weights in that collation, trailing spaces' weight left out.
pub fn unknown_name_hash(weights: &[u8]) -> u64 {
    let end = weights.iter().rposition(|&w| w != b' ').map_or(0, |i| i + 1);
    let (mut nr1, mut nr2) = (1u64, 4u64);
    for &w in &weights[..end] {
        nr1 ^= ((nr1 & 63).wrapping_add(nr2)).wrapping_mul(u64::from(w)).wrapping_add(nr1 << 8);
        nr2 = nr2.wrapping_add(3);
    }
    nr1
}

/// Sorts one user's rows as the server orders its accounts of one name: the most specific
/// host first, then by host, descending.
pub fn sort_as_server(rows: &mut [AccountRow]) {
    rows.sort_by(|a, b| (host_sort(&b.host), b.host.as_bytes()).cmp(&(host_sort(&a.host), a.host.as_bytes())));
}

/// The secret of a mysql_native_password method (or of an account without a password).
/// unix_socket, ed25519, gssapi…: the stored data cannot verify a MySQL-protocol login.
fn native_secret(plugin: &str, hash: &str) -> Option<Secret> {
    match (plugin, hash) {
        ("mysql_native_password" | "", "") => Some(Secret::Empty),
        ("mysql_native_password" | "", h) => auth::parse_native_hash(h).map(|stage2| Secret::NativeHash { stage2 }),
        _ => None,
    }
}

/// Whether an account's host part matches `client`, as MariaDB's compare_hostname: `ip/netmask`,
/// or a `%`/`_` pattern matching the client's host name (case-insensitive) or its IP address;
/// an empty host matches any client.
fn host_matches(pattern: &str, client: &ClientHost) -> bool {
    if pattern.is_empty() {
        return true;
    }
    if let Some((net, mask)) = pattern.split_once('/') {
        return match (net.parse::<std::net::Ipv4Addr>(), mask.parse::<std::net::Ipv4Addr>(), client.ip) {
            (Ok(n), Ok(m), IpAddr::V4(c)) => u32::from(c) & u32::from(m) == u32::from(n) & u32::from(m),
            _ => false,
        };
    }
    client.name.is_some_and(|name| like(pattern.as_bytes(), name.as_bytes(), true))
        || like(pattern.as_bytes(), client.ip.to_string().as_bytes(), false)
}

/// SQL LIKE with `\` escaping the next character.
fn like(p: &[u8], s: &[u8], fold_case: bool) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'%'), _) => like(&p[1..], s, fold_case) || (!s.is_empty() && like(p, &s[1..], fold_case)),
        (Some(b'_'), Some(_)) => like(&p[1..], &s[1..], fold_case),
        (Some(b'\\'), Some(b)) if p.len() > 1 => p[1] == *b && like(&p[2..], &s[1..], fold_case),
        (Some(a), Some(b)) if a == b || (fold_case && a.eq_ignore_ascii_case(b)) => like(&p[1..], &s[1..], fold_case),
        _ => false,
    }
}

/// How specific a host pattern is, as MariaDB sorts accounts (get_sort): a host without
/// wildcards first, then by how late its first wildcard comes; a lone `%` and an empty host last.
fn host_sort(host: &str) -> u8 {
    let bytes = host.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 2,
            b'%' | b'_' => {
                let position = i + 1;
                let lone_percent = position == 1 && bytes[i] == b'%' && bytes.len() == 1;
                return (if lone_percent { position } else { position + 1 }).min(127) as u8;
            }
            _ => i += 1,
        }
    }
    if bytes.is_empty() {
        0
    } else {
        128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(ip: &str, resolve: bool) -> ClientHost {
        ClientHost::new(ip.parse().unwrap(), resolve)
    }

    #[test]
    fn host_patterns_as_mariadb_matches_them() {
        let lo = client("127.0.0.1", true);
        assert_eq!(lo.to_string(), "localhost");
        assert!(host_matches("%", &lo));
        assert!(host_matches("", &lo));
        assert!(host_matches("localhost", &lo));
        assert!(host_matches("LOCAL%", &lo));
        assert!(host_matches("127.0.0.%", &lo));
        assert!(host_matches("127.0.0.0/255.0.0.0", &lo));
        assert!(!host_matches("10.%", &lo));
        // Without name resolution (skip_name_resolve), `localhost` is only the socket.
        let ip_only = client("127.0.0.1", false);
        assert_eq!(ip_only.to_string(), "127.0.0.1");
        assert!(!host_matches("localhost", &ip_only));
        assert!(host_matches("127.0.0.1", &ip_only));
        // Only 127.0.0.1 and ::1 are `localhost` (as MariaDB's is_ip_loopback); v4-mapped is v4.
        assert_eq!(client("127.0.0.2", true).to_string(), "127.0.0.2");
        assert_eq!(client("::1", true).to_string(), "localhost");
        assert_eq!(client("::ffff:10.0.0.7", true).to_string(), "10.0.0.7");
        assert!(host_matches("10.0.0._", &client("::ffff:10.0.0.7", true)));
        assert!(!host_matches("10\\%", &client("10.0.0.7", false)));
        assert!(host_sort("127.0.0.1") > host_sort("127.0.0.%"));
        assert!(host_sort("127.0.0.%") > host_sort("1%"));
        assert!(host_sort("1%") > host_sort("%"));
        assert!(host_sort("%") > host_sort(""));
    }

    fn row(user: &str, host: &str, privileges: &str) -> AccountRow {
        AccountRow::from_global_priv(user.into(), host.into(), privileges).unwrap()
    }

    #[test]
    fn the_most_specific_account_decides_anonymous_ones_included() {
        let pw = auth::format_native_hash(&auth::native_stage2(&auth::native_stage1(b"pw")));
        let named =
            row("u", "%", &format!(r#"{{"plugin":"mysql_native_password","authentication_string":"{pw}","password_last_changed":5}}"#));
        let anonymous = row("", "localhost", "{}");
        let policy = ServerPolicy { state_known: true, ..Default::default() };
        let lookup = Lookup { rows: vec![named.clone(), anonymous], policy: policy.clone() };
        // From 127.0.0.1 with name resolution, ''@localhost is more specific than u@'%' (as on the server).
        let a = lookup.account("u", &client("127.0.0.1", true), 7).unwrap();
        assert!(matches!(a.user.secret, Secret::Empty));
        assert_eq!(a.user.default_hostgroup, 7);
        let a = lookup.account("u", &client("10.1.1.1", true), 0).unwrap();
        assert!(matches!(a.user.secret, Secret::NativeHash { .. }) && !a.prove);
        assert!(lookup.account("nobody", &client("10.1.1.1", true), 0).is_none());
        // Locked, expired, expiring, or read without its state: proven on the backend.
        for extra in [r#","account_locked":true"#, r#","password_lifetime":30"#] {
            let json = format!(r#"{{"plugin":"mysql_native_password","authentication_string":"{pw}"{extra}}}"#);
            let l = Lookup { rows: vec![row("u", "%", &json)], policy: policy.clone() };
            assert!(l.account("u", &client("10.1.1.1", true), 0).unwrap().prove, "{extra}");
        }
        let expired = row("u", "%", &format!(r#"{{"authentication_string":"{pw}","password_last_changed":0}}"#));
        assert!(expired.expired);
        let l = Lookup { rows: vec![named.clone()], policy: ServerPolicy { default_password_lifetime: 90, ..policy.clone() } };
        assert!(l.account("u", &client("10.1.1.1", true), 0).unwrap().prove);
        let l = Lookup { rows: vec![named.clone()], policy: ServerPolicy::default() };
        assert!(l.account("u", &client("10.1.1.1", true), 0).unwrap().prove);
        // Roles never log in; other plugins cannot be checked; `auth_or` alternatives can.
        let l = Lookup { rows: vec![row("u", "%", r#"{"is_role":true}"#)], policy: policy.clone() };
        assert!(l.account("u", &client("10.1.1.1", true), 0).is_none());
        let l = Lookup { rows: vec![row("u", "%", r#"{"plugin":"ed25519","authentication_string":"x"}"#)], policy: policy.clone() };
        assert!(l.account("u", &client("10.1.1.1", true), 0).is_none());
        let either =
            format!(r#"{{"plugin":"mysql_native_password","authentication_string":"{pw}","auth_or":[{{"plugin":"unix_socket"}},{{}}]}}"#);
        let l = Lookup { rows: vec![row("u", "%", &either)], policy };
        assert!(matches!(l.account("u", &client("10.1.1.1", true), 0).unwrap().user.secret, Secret::NativeHash { .. }));
    }

    #[test]
    fn pooled_logins_are_outdated_when_the_account_changed() {
        let s1 = auth::native_stage1(b"pw");
        let pw = auth::format_native_hash(&auth::native_stage2(&s1));
        let lookup = Lookup { rows: vec![row("u", "%", &format!(r#"{{"authentication_string":"{pw}"}}"#))], policy: Default::default() };
        assert!(!lookup.outdated("u", &Credential::Stage1(s1)));
        assert!(!lookup.outdated("u", &Credential::Plain("pw".into())));
        assert!(lookup.outdated("u", &Credential::Stage1(auth::native_stage1(b"old"))));
        assert!(lookup.outdated("u", &Credential::Empty));
        assert!(lookup.outdated("gone", &Credential::Empty));
        let other = Lookup { rows: vec![row("u", "%", r#"{"plugin":"ed25519"}"#)], policy: Default::default() };
        assert!(!other.outdated("u", &Credential::Empty), "a plugin sluice cannot check: left alone");
    }

    #[test]
    fn refusals_before_the_password_as_mariadb() {
        // Values MariaDB 10.11 was seen to pick with (the name's weights in latin1_swedish_ci
        // are its upper-case bytes).
        assert_eq!(unknown_name_hash(b"USER_0"), 762637141093168);
        assert_eq!(unknown_name_hash(b"N2X  "), 42588547, "trailing spaces do not count");
        let mut rows = vec![row("u", "%", "{}"), row("u", "localhost", "{}"), row("u", "10.0.%", "{}"), row("u", "127.0.0.1", "{}")];
        sort_as_server(&mut rows);
        let hosts: Vec<&str> = rows.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["localhost", "127.0.0.1", "10.0.%", "%"]);
        let lookup = Lookup { rows: vec![row("u", "%", r#"{"plugin":"mysql_old_password"}"#)], policy: Default::default() };
        let client = client("10.1.1.1", true);
        assert_eq!(lookup.unverified("u", &client), Unverified::Plugin("mysql_old_password".into()));
        assert_eq!(lookup.unverified("v", &client), Unverified::NoAccount);
        assert_eq!(Refusal::of("mysql_old_password", true, true, true), Some(Refusal::SecureAuth));
        assert_eq!(Refusal::of("mysql_old_password", false, true, true), None);
        assert_eq!(Refusal::of("ed25519", true, false, true), Some(Refusal::PluginNotLoaded("ed25519".into())));
        assert_eq!(Refusal::of("ed25519", true, true, false), Some(Refusal::NotSupportedAuthMode));
        assert_eq!(Refusal::of("ed25519", true, true, true), None);
        assert_eq!(Refusal::of("", true, false, false), None);
    }

    #[test]
    fn own_login_is_a_configured_login_sluice_holds_whole() {
        let user = |name: &str, password: &str, backend: Option<(&str, &str)>| User {
            name: name.into(),
            secret: Secret::from_config(password),
            default_hostgroup: 3,
            default_schema: None,
            backend_login: backend.map(|(u, p)| (u.into(), p.into())),
            from_backend: false,
            max_connections: None,
            caps: Default::default(),
        };
        let users = |list: Vec<User>| Users { configured: list.into_iter().map(|u| (u.name.clone(), u)).collect() };
        let hash = auth::format_native_hash(&auth::native_stage2(&auth::native_stage1(b"pw")));
        assert_eq!(users(vec![user("a", &hash, None)]).own_login(), None, "a hash alone does not log in");
        let some = users(vec![user("a", &hash, None), user("c", "pw", None), user("b", &hash, Some(("svc", "s")))]);
        assert_eq!(some.own_login(), Some((3, "svc".into(), Credential::Plain("s".into()))));
        assert_eq!(
            users(vec![user("c", "pw", None), user("d", "", None)]).own_login(),
            Some((3, "c".into(), Credential::Plain("pw".into())))
        );
    }

    #[test]
    fn secrets_verify_and_derive_backend_credentials() {
        let nonce = auth::make_nonce([7; 20]);
        let reply = auth::native_scramble(&auth::native_stage1(b"pw"), &nonce);
        let hashed = Secret::from_config(&auth::format_native_hash(&auth::native_stage2(&auth::native_stage1(b"pw"))));
        assert_eq!(hashed.verify_native(&nonce, &reply), Some(Credential::Stage1(auth::native_stage1(b"pw"))));
        assert_eq!(hashed.verify_native(&nonce, &[0; 20]), None);
        assert_eq!(hashed.verify_plain(b"pw"), Some(Credential::Stage1(auth::native_stage1(b"pw"))));
        assert!(hashed.verify_sha2_fast(&nonce, &[0; 32]).is_err());
        let plain = Secret::from_config("pw");
        assert_eq!(plain.verify_native(&nonce, &reply), Some(Credential::Plain("pw".into())));
        assert_eq!(plain.verify_sha2_fast(&nonce, &auth::sha2_scramble(b"pw", &nonce)), Ok(Some(Credential::Plain("pw".into()))));
        assert_eq!(Secret::from_config("").verify_native(&nonce, &[]), Some(Credential::Empty));
        assert_eq!(Secret::from_config("").verify_native(&nonce, &reply), None);
    }
}
