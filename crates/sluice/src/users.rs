//! Who may log in: users from the config, and optionally the backend's own accounts (read from
//! mysql.user with the monitor account, MaxScale-style). Used by ② session at login only.
//!
//! No plain-text password of a backend account is ever held: its mysql_native_password hash
//! (SHA1(SHA1(pw))) verifies the client, and the verification itself yields SHA1(pw), which is
//! what logging in to the backend as that user takes.

use crate::config::{Config, UserRow};
use crate::pool::Credential;
use proto::auth;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

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
        }
    }

    /// The backend login to use once the client has proved `credential`.
    pub fn backend_credential(&self, credential: Credential) -> (String, Credential) {
        match &self.backend_login {
            Some((u, p)) if p.is_empty() => (u.clone(), Credential::Empty),
            Some((u, p)) => (u.clone(), Credential::Plain(p.clone())),
            None => (self.name.clone(), credential),
        }
    }
}

/// An account read from the backend's mysql.user.
#[derive(Clone)]
struct Account {
    host: String,
    secret: Secret,
}

/// The backend's accounts, reloaded on demand (an unknown user or a failed login), at most
/// once per refresh interval. Kept across config reloads; used while `backend_users` is on.
#[derive(Default)]
pub struct BackendAccounts {
    accounts: RwLock<Arc<HashMap<String, Vec<Account>>>>,
    last_load: tokio::sync::Mutex<Option<Instant>>,
}

/// The users of the config in force (the backend's accounts live beside it, in `Shared`).
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
}

impl BackendAccounts {
    /// A backend account matching `name` from `client`'s address, if loaded; its sessions go
    /// to `hostgroup`.
    pub fn find(&self, name: &str, client: IpAddr, hostgroup: u32) -> Option<User> {
        let map = self.accounts.read().ok()?.clone();
        let candidates = map.get(name)?;
        let mut best: Option<&Account> = None;
        for a in candidates.iter().filter(|a| host_matches(&a.host, client)) {
            if best.is_none_or(|b| specificity(&a.host) > specificity(&b.host)) {
                best = Some(a);
            }
        }
        best.map(|a| User {
            name: name.to_string(),
            secret: a.secret.clone(),
            default_hostgroup: hostgroup,
            default_schema: None,
            backend_login: None,
            from_backend: true,
        })
    }

    /// Reloads unless the last load was less than `refresh` ago. Returns whether it loaded.
    pub async fn reload(
        &self,
        refresh: Duration,
        load: impl std::future::Future<Output = anyhow::Result<Vec<(String, String, String, String)>>>,
    ) -> bool {
        let mut last = self.last_load.lock().await;
        if last.is_some_and(|t| t.elapsed() < refresh) {
            return false;
        }
        *last = Some(Instant::now());
        match load.await {
            Ok(rows) => {
                let mut map: HashMap<String, Vec<Account>> = HashMap::new();
                for (user, host, plugin, hash) in rows {
                    let secret = match (plugin.as_str(), hash.as_str()) {
                        ("mysql_native_password" | "", "") => Secret::Empty,
                        ("mysql_native_password" | "", h) => match auth::parse_native_hash(h) {
                            Some(stage2) => Secret::NativeHash { stage2 },
                            None => continue,
                        },
                        // unix_socket, ed25519, gssapi…: the hash (if any) cannot verify a MySQL-protocol login.
                        _ => continue,
                    };
                    map.entry(user).or_default().push(Account { host, secret });
                }
                tracing::debug!(accounts = map.len(), "loaded backend accounts");
                if let Ok(mut w) = self.accounts.write() {
                    *w = Arc::new(map);
                }
                true
            }
            Err(e) => {
                tracing::warn!("cannot load the backend's accounts: {e:#}");
                false
            }
        }
    }
}

/// MySQL host patterns: `%` and `_` wildcards, `localhost`, and `ip/netmask`.
fn host_matches(pattern: &str, client: IpAddr) -> bool {
    if pattern == "localhost" {
        return client.is_loopback();
    }
    if let Some((net, mask)) = pattern.split_once('/') {
        return match (net.parse::<std::net::Ipv4Addr>(), mask.parse::<std::net::Ipv4Addr>(), client) {
            (Ok(n), Ok(m), IpAddr::V4(c)) => u32::from(c) & u32::from(m) == u32::from(n) & u32::from(m),
            _ => false,
        };
    }
    like(pattern.as_bytes(), client.to_string().as_bytes())
}

fn like(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'%'), _) => like(&p[1..], s) || (!s.is_empty() && like(p, &s[1..])),
        (Some(b'_'), Some(_)) => like(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => like(&p[1..], &s[1..]),
        _ => false,
    }
}

/// More specific host patterns win, as in MySQL's account ordering.
fn specificity(host: &str) -> (bool, usize) {
    (!host.contains(['%', '_']), host.len() - host.matches(['%', '_']).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(host_matches("%", lo));
        assert!(host_matches("localhost", lo));
        assert!(host_matches("127.0.0.%", lo));
        assert!(host_matches("127.0.0.0/255.0.0.0", lo));
        assert!(!host_matches("10.%", lo));
        assert!(specificity("127.0.0.1") > specificity("127.0.0.%"));
        assert!(specificity("127.0.0.%") > specificity("%"));
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
