//! ② session, login half: the greeting, TLS upgrade, and verifying the client's password
//! (mysql_native_password; caching_sha2_password fast path, full auth over TLS or with RSA;
//! auth switch for anything else). Also used by COM_CHANGE_USER.

use crate::datapath::DataPath;
use crate::net::{Conn, Stream};
use crate::pool::Credential;
use crate::users::User;
use proto::auth::{self, CACHING_SHA2_PASSWORD, MYSQL_NATIVE_PASSWORD};
use proto::errors::*;
use proto::handshake::{self, ClientHello, Greeting};
use proto::CapabilityFlags;
use std::net::SocketAddr;
use std::sync::Arc;

/// Why a login ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("client went away during login: {0}")]
    Io(#[from] std::io::Error),
    #[error("client sent a bad handshake: {0}")]
    Protocol(String),
    #[error("access denied for {0}")]
    Denied(String),
}

/// A client that has proved who it is.
pub struct Login {
    pub client: Conn,
    pub hello: ClientHello,
    pub capabilities: CapabilityFlags,
    pub user: User,
    pub credential: Credential,
    pub nonce: [u8; 20],
    /// MariaDB extended capabilities both sides agreed on.
    pub mariadb_caps: u32,
    /// Sequence id for the packet that ends the login (OK or ERR).
    pub seq: u8,
}

pub fn offered_capabilities(data: &DataPath, tls: bool) -> CapabilityFlags {
    let mut caps = crate::pool::backend::passthrough_capabilities() & data.profile().capabilities;
    caps |= CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_SECURE_CONNECTION | CapabilityFlags::CLIENT_PLUGIN_AUTH;
    if tls {
        caps |= CapabilityFlags::CLIENT_SSL;
    }
    caps
}

/// Whose logins a port accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directory {
    /// Client ports: the config's users, and the backend's accounts when enabled.
    Clients,
    /// The admin port: `proxy.admin_credentials`.
    Admin,
}

/// Greets the client, upgrades to TLS if asked, and authenticates it against `directory`.
pub async fn login(
    data: &Arc<DataPath>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    id: u32,
    directory: Directory,
) -> Result<Login, LoginError> {
    let mut client = Conn::new(Stream::Tcp(tcp));
    let snapshot = data.live.load_full();
    let nonce = auth::make_nonce(rand::random());
    let offered = offered_capabilities(data, snapshot.tls.is_some());
    let profile = data.profile();
    // The admin port writes its own result sets, in the plain MySQL format (no MariaDB
    // extended metadata in column definitions).
    let offered_mariadb = match directory {
        Directory::Clients => profile.mariadb_caps & crate::pool::backend::MARIADB_PASSTHROUGH,
        Directory::Admin => 0,
    };
    let version = snapshot.config.proxy.server_version.clone().unwrap_or_else(|| profile.server_version.clone());
    let mut out = Vec::with_capacity(128);
    handshake::write_greeting(
        &mut out,
        &Greeting {
            server_version: version.as_bytes(),
            connection_id: id,
            nonce,
            capabilities: offered,
            collation: profile.collation,
            status: proto::StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits(),
            auth_plugin: &snapshot.config.proxy.default_auth_plugin,
            mariadb_caps: offered_mariadb,
        },
    );
    client.write_all(&out).await?;

    let (mut seq, mut payload) = client.read_packet_unbuffered(1 << 16).await?;
    if handshake::is_ssl_request(&payload) {
        let Some(acceptor) = &snapshot.tls else {
            return Err(LoginError::Protocol("SSL requested but not offered".into()));
        };
        let Stream::Tcp(tcp) = client.stream else { unreachable!("login starts on plain TCP") };
        let tls = acceptor.accept(tcp).await?;
        client = Conn::new(Stream::ServerTls(Box::new(tls)));
        (seq, payload) = client.read_packet(1 << 16).await?;
    }
    let hello = handshake::parse_client_hello(&payload).map_err(|e| LoginError::Protocol(e.to_string()))?;
    let capabilities = hello.capabilities & offered;
    let mariadb_caps = hello.mariadb_caps & offered_mariadb;
    let mut seq = seq.wrapping_add(1);
    let plugin = if capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) {
        hello.auth_plugin.clone().unwrap_or_else(|| MYSQL_NATIVE_PASSWORD.into())
    } else {
        MYSQL_NATIVE_PASSWORD.into()
    };
    let attempt = Attempt {
        user: &hello.user,
        plugin: &plugin,
        reply: &hello.auth_response,
        nonce: &nonce,
        can_switch: capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH),
        peer,
        directory,
    };
    match authenticate(data, &mut client, &mut seq, attempt).await? {
        Ok((user, credential)) => Ok(Login { client, hello, capabilities, user, credential, nonce, mariadb_caps, seq }),
        Err(denied) => {
            let counter = match directory {
                Directory::Clients => crate::stats::Counter::AccessDeniedWrongPassword,
                Directory::Admin => crate::stats::Counter::AdminAccessDenied,
            };
            data.stats.add(counter, 1);
            let mut out = Vec::new();
            proto::packet::write_err(&mut out, &mut seq, ER_ACCESS_DENIED_ERROR, SQLSTATE_ACCESS_DENIED, &denied);
            client.write_all(&out).await?;
            Err(LoginError::Denied(denied))
        }
    }
}

/// One authentication attempt, from a handshake response or a COM_CHANGE_USER.
pub struct Attempt<'a> {
    pub user: &'a str,
    pub plugin: &'a str,
    pub reply: &'a [u8],
    pub nonce: &'a [u8; 20],
    pub can_switch: bool,
    pub peer: SocketAddr,
    pub directory: Directory,
}

/// Runs the plugin exchange. Outer error: the connection failed. Inner error: access denied,
/// with the message for ER_ACCESS_DENIED_ERROR.
pub async fn authenticate(
    data: &Arc<DataPath>,
    client: &mut Conn,
    seq: &mut u8,
    a: Attempt<'_>,
) -> Result<Result<(User, Credential), String>, LoginError> {
    let denied = |used_password: bool| {
        format!("Access denied for user '{}'@'{}' (using password: {})", a.user, a.peer.ip(), if used_password { "YES" } else { "NO" })
    };
    let mut out = Vec::new();
    let mut plugin = a.plugin.to_string();
    let mut reply = a.reply.to_vec();
    // A plugin sluice does not speak: switch the client to the announced one.
    if plugin != MYSQL_NATIVE_PASSWORD && plugin != CACHING_SHA2_PASSWORD {
        if !a.can_switch {
            return Ok(Err(denied(!reply.is_empty())));
        }
        plugin = data.snapshot().config.proxy.default_auth_plugin.clone();
        handshake::write_auth_switch(&mut out, seq, &plugin, a.nonce);
        client.write_all(&out).await?;
        out.clear();
        let (last, r) = client.read_packet(1 << 16).await?;
        *seq = last.wrapping_add(1);
        reply = r;
    }
    let mut user = match a.directory {
        Directory::Clients => find_user(data, a.user, a.peer.ip(), false).await,
        Directory::Admin => admin_user(data, a.user),
    };
    // caching_sha2 clients whose account has only a native hash give their password in full.
    let mut clear: Option<Vec<u8>> = None;
    if plugin == CACHING_SHA2_PASSWORD && !reply.is_empty() && user.as_ref().is_some_and(|u| !u.secret.has_plain()) {
        clear = Some(match full_auth(data, client, seq, a.nonce).await? {
            Some(pw) => pw,
            None => return Ok(Err(denied(true))),
        });
    }
    for retry in [false, true] {
        if retry {
            // Unknown user or wrong password: the backend's accounts may have changed.
            if a.directory == Directory::Admin || !data.snapshot().config.proxy.backend_users {
                break;
            }
            user = find_user(data, a.user, a.peer.ip(), true).await;
        }
        let Some(u) = &user else { continue };
        let verified = match (&clear, plugin.as_str()) {
            (Some(pw), _) => u.secret.verify_plain(pw),
            (None, MYSQL_NATIVE_PASSWORD) => u.secret.verify_native(a.nonce, &reply),
            (None, _) => u.secret.verify_sha2_fast(a.nonce, &reply).unwrap_or_default(),
        };
        if let Some(credential) = verified {
            if plugin == CACHING_SHA2_PASSWORD && clear.is_none() && !reply.is_empty() {
                handshake::write_auth_more_data(&mut out, seq, &[auth::SHA2_FAST_AUTH_SUCCESS]);
                client.write_all(&out).await?;
            }
            return Ok(Ok((u.clone(), credential)));
        }
    }
    Ok(Err(denied(!reply.is_empty())))
}

/// An admin login from `proxy.admin_credentials` (read at each login: a reload applies at once).
fn admin_user(data: &DataPath, name: &str) -> Option<User> {
    let snapshot = data.snapshot();
    let logins = crate::config::admin_logins(&snapshot.config.proxy.admin_credentials).ok()?;
    let (user, password) = logins.into_iter().find(|(u, _)| *u == name)?;
    Some(User {
        name: user.to_string(),
        secret: crate::users::Secret::from_config(password),
        default_hostgroup: 0,
        default_schema: None,
        backend_login: None,
        from_backend: false,
    })
}

/// caching_sha2_password full authentication: the password in clear over TLS, or RSA-encrypted.
async fn full_auth(data: &Arc<DataPath>, client: &mut Conn, seq: &mut u8, nonce: &[u8; 20]) -> Result<Option<Vec<u8>>, LoginError> {
    let mut out = Vec::new();
    handshake::write_auth_more_data(&mut out, seq, &[auth::SHA2_PERFORM_FULL_AUTH]);
    client.write_all(&out).await?;
    let (last, mut pw) = client.read_packet(1 << 16).await?;
    *seq = last.wrapping_add(1);
    if !client.stream.is_tls() {
        if pw != [auth::SHA2_REQUEST_PUBLIC_KEY] {
            // A password in clear over plain TCP is refused, as MySQL does.
            return Ok(None);
        }
        let Some(keys) = data.rsa_keys() else {
            return Ok(None);
        };
        out.clear();
        handshake::write_auth_more_data(&mut out, seq, &keys.public_pem);
        client.write_all(&out).await?;
        let (last, ct) = client.read_packet(1 << 16).await?;
        *seq = last.wrapping_add(1);
        let Some(mut plain) = keys.decrypt(&ct) else {
            return Ok(None);
        };
        auth::xor_with_nonce(&mut plain, nonce);
        pw = plain;
    }
    if pw.last() == Some(&0) {
        pw.pop();
    }
    Ok(Some(pw))
}

/// Looks a login name up: config users, then the backend's accounts (reloaded when `reload`
/// is set or the name is unknown, at most once per refresh interval).
async fn find_user(data: &DataPath, name: &str, client: std::net::IpAddr, reload: bool) -> Option<User> {
    let (refresh, hostgroup) = {
        let snap = data.snapshot();
        if let Some(u) = snap.users.configured(name) {
            return Some(u.clone());
        }
        let p = &snap.config.proxy;
        if !p.backend_users {
            return None;
        }
        (std::time::Duration::from_millis(p.backend_users_refresh_ms), p.backend_users_hostgroup)
    };
    let found = data.backend_accounts.find(name, client, hostgroup);
    if found.is_some() && !reload {
        return found;
    }
    if data.backend_accounts.reload(refresh, crate::monitor::load_accounts(data)).await {
        return data.backend_accounts.find(name, client, hostgroup);
    }
    found
}
