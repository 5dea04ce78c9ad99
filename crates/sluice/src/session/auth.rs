//! ② session, login half: the greeting, TLS upgrade, and verifying the client's password
//! (mysql_native_password; caching_sha2_password fast path, full auth over TLS or with RSA;
//! auth switch for anything else). Also used by COM_CHANGE_USER.

use crate::datapath::DataPath;
use crate::net::{Conn, Stream};
use crate::pool::{Credential, ServerMessage};
use crate::throttle;
use crate::users::{Account, ClientHost, Refusal, Unverified, User};
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
pub async fn login(data: &Arc<DataPath>, stream: Stream, peer: SocketAddr, id: u32, directory: Directory) -> Result<Login, LoginError> {
    let mut client = Conn::new(stream);
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
        let tcp = client.stream.into_tcp().await?;
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
        capabilities,
        collation: hello.collation,
        peer,
        directory,
    };
    match authenticate(data, &mut client, &mut seq, attempt).await? {
        Ok((user, credential)) => Ok(Login { client, hello, capabilities, user, credential, nonce, mariadb_caps, seq }),
        Err(denied) => {
            let mut out = Vec::new();
            denied.write(&mut out, &mut seq);
            client.write_all(&out).await?;
            Err(LoginError::Denied(denied.message.to_string()))
        }
    }
}

/// One authentication attempt, from a handshake response or a COM_CHANGE_USER.
pub struct Attempt<'a> {
    pub user: &'a str,
    pub plugin: &'a str,
    pub reply: &'a [u8],
    pub nonce: &'a [u8; 20],
    /// What the client negotiated (CLIENT_PLUGIN_AUTH: it can be switched to another plugin;
    /// CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS: the server may let it in with an expired password).
    pub capabilities: CapabilityFlags,
    /// The client's collation: the server's refusals come in its character set.
    pub collation: u8,
    pub peer: SocketAddr,
    pub directory: Directory,
}

/// Why a login or COM_CHANGE_USER was refused: the error packet the client gets. The message
/// is bytes: a backend's is in the login's character set, not always UTF-8.
#[derive(Debug, Clone)]
pub struct Denied {
    pub code: u16,
    pub sqlstate: [u8; 5],
    pub message: ServerMessage,
}

impl Denied {
    /// ER_ACCESS_DENIED_ERROR, naming the client as the server does.
    fn access(user: &str, host: &ClientHost, used_password: bool) -> Denied {
        let using = if used_password { "YES" } else { "NO" };
        Denied {
            code: ER_ACCESS_DENIED_ERROR,
            sqlstate: *SQLSTATE_ACCESS_DENIED,
            message: format!("Access denied for user '{user}'@'{host}' (using password: {using})").into(),
        }
    }

    /// ER_HOST_IS_BLOCKED, MariaDB's text.
    fn blocked(host: &ClientHost) -> Denied {
        Denied {
            code: ER_HOST_IS_BLOCKED,
            sqlstate: *SQLSTATE_GENERAL,
            message: format!("Host '{host}' is blocked because of many connection errors; unblock with 'mariadb-admin flush-hosts'").into(),
        }
    }

    /// What MariaDB answers a COM_CHANGE_USER after three failed ones on the connection
    /// (MDEV-3915), without checking it.
    pub fn change_user_limit() -> Denied {
        Denied { code: ER_UNKNOWN_COM_ERROR, sqlstate: *SQLSTATE_UNKNOWN_COM, message: "Unknown command".to_string().into() }
    }

    /// The backend could not be asked (down, or the accounts could not be read).
    fn backend(code: u16, message: String) -> Denied {
        Denied { code, sqlstate: *SQLSTATE_GENERAL, message: message.into() }
    }

    /// The server's refusal before any password (MariaDB's texts).
    fn refusal(refusal: Refusal, user: &str, host: &ClientHost) -> Denied {
        let (code, sqlstate, message) = match refusal {
            Refusal::SecureAuth => (
                ER_SERVER_IS_IN_SECURE_AUTH_MODE,
                *SQLSTATE_GENERAL,
                format!(
                    "Server is running in --secure-auth mode, but '{user}'@'{host}' has a password in the old format; please change \
                     the password to the new format"
                ),
            ),
            Refusal::PluginNotLoaded(plugin) => (ER_PLUGIN_IS_NOT_LOADED, *SQLSTATE_GENERAL, format!("Plugin '{plugin}' is not loaded")),
            Refusal::NotSupportedAuthMode => (
                ER_NOT_SUPPORTED_AUTH_MODE,
                *SQLSTATE_CONN_COUNT,
                "Client does not support authentication protocol requested by server; consider upgrading MariaDB client".to_string(),
            ),
        };
        Denied { code, sqlstate, message: message.into() }
    }

    pub fn write(&self, out: &mut Vec<u8>, seq: &mut u8) {
        proto::packet::write_err_bytes(out, seq, self.code, &self.sqlstate, self.message.as_bytes());
    }
}

/// MariaDB's "Host '%s' is blocked because of many connection errors".
const ER_HOST_IS_BLOCKED: u16 = 1129;

/// Runs the plugin exchange, throttled per client address and user (`throttle`); each refusal
/// is logged and counted. Outer error: the connection failed. Inner error: the refusal.
pub async fn authenticate(
    data: &Arc<DataPath>,
    client: &mut Conn,
    seq: &mut u8,
    a: Attempt<'_>,
) -> Result<Result<(User, Credential), Denied>, LoginError> {
    let key = throttle::Key::new(a.directory == Directory::Admin, a.peer.ip(), a.user);
    let limits = throttle::Limits::from_config(&data.snapshot().config.proxy);
    let outcome = match data.throttle.admit(&key, &limits) {
        throttle::Admission::Blocked => Err(Denied::blocked(&client_host(data, &a).await)),
        admission => {
            if let throttle::Admission::At(when) = admission {
                tokio::time::sleep_until(when.into()).await;
            }
            verify(data, client, seq, &a).await?
        }
    };
    match &outcome {
        Ok(_) => data.throttle.succeeded(&key),
        Err(denied) if denied.code == ER_ACCESS_DENIED_ERROR => {
            let counter = match a.directory {
                Directory::Clients => crate::stats::Counter::AccessDeniedWrongPassword,
                Directory::Admin => crate::stats::Counter::AdminAccessDenied,
            };
            data.stats.add(counter, 1);
            tracing::info!(client = %a.peer.ip(), user = a.user, "login refused: {}", denied.message);
            if data.throttle.failed(&key, &limits) {
                tracing::warn!(client = %a.peer.ip(), user = a.user, failures = limits.max_errors, "blocking this address for this user until FLUSH HOSTS on the admin port");
            }
        }
        Err(denied) => tracing::info!(client = %a.peer.ip(), user = a.user, code = denied.code, "login refused: {}", denied.message),
    }
    Ok(outcome)
}

/// The client as the server names it (only needed for a refusal or a backend account: it may
/// take reading a setting from the backend once).
async fn client_host(data: &DataPath, a: &Attempt<'_>) -> ClientHost {
    match a.directory {
        Directory::Clients => data.backend_accounts.client_host(&data.live, a.peer.ip()).await,
        // The admin port is sluice's own server, which resolves no names.
        Directory::Admin => ClientHost::new(a.peer.ip(), false),
    }
}

/// ER_ACCESS_DENIED_ERROR for this attempt.
async fn access_denied(data: &DataPath, a: &Attempt<'_>, reply: &[u8]) -> Result<Result<(User, Credential), Denied>, LoginError> {
    Ok(Err(Denied::access(a.user, &client_host(data, a).await, !reply.is_empty())))
}

/// Who the client claims to be, and whether its reply proves it.
async fn verify(
    data: &Arc<DataPath>,
    client: &mut Conn,
    seq: &mut u8,
    a: &Attempt<'_>,
) -> Result<Result<(User, Credential), Denied>, LoginError> {
    let mut out = Vec::new();
    let mut plugin = a.plugin.to_string();
    let mut reply = a.reply.to_vec();
    // A plugin sluice does not speak: switch the client to the announced one.
    if plugin != MYSQL_NATIVE_PASSWORD && plugin != CACHING_SHA2_PASSWORD {
        if !a.capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) {
            return access_denied(data, a, &reply).await;
        }
        plugin = data.snapshot().config.proxy.default_auth_plugin.clone();
        handshake::write_auth_switch(&mut out, seq, &plugin, a.nonce);
        client.write_all(&out).await?;
        out.clear();
        let (last, r) = client.read_packet(1 << 16).await?;
        *seq = last.wrapping_add(1);
        reply = r;
    }
    let (found, unverified) = match a.directory {
        Directory::Clients => match find_account(data, a).await {
            Ok(Found::Account(account)) => (Some(account), None),
            Ok(Found::Missing(unverified)) => (None, unverified),
            Err(refused) => return Ok(Err(refused)),
        },
        Directory::Admin => {
            (admin_user(data, a.user).map(|user| Account { user, ssl_type: 0, prove: false, failures_counted: false }), None)
        }
    };
    // caching_sha2 clients whose account has only a native hash give their password in full.
    let mut clear: Option<Vec<u8>> = None;
    if plugin == CACHING_SHA2_PASSWORD && !reply.is_empty() && found.as_ref().is_some_and(|f| !f.user.secret.has_plain()) {
        clear = Some(match full_auth(data, client, seq, a.nonce).await? {
            Some(pw) => pw,
            None => return access_denied(data, a, &reply).await,
        });
    }
    let Some(account) = found else { return Ok(Err(refused(data, a, &reply, unverified).await)) };
    let verified = match (&clear, plugin.as_str()) {
        (Some(pw), _) => account.user.secret.verify_plain(pw),
        (None, MYSQL_NATIVE_PASSWORD) => account.user.secret.verify_native(a.nonce, &reply),
        (None, _) => account.user.secret.verify_sha2_fast(a.nonce, &reply).unwrap_or_default(),
    };
    let Some(credential) = verified else {
        if account.failures_counted {
            return Ok(Err(refused_by_server(data, &account.user, a, !reply.is_empty()).await));
        }
        return access_denied(data, a, &reply).await;
    };
    // REQUIRE SSL needs the client's own connection in TLS; REQUIRE X509 and the like need a
    // client certificate, which sluice does not ask for.
    let tls_ok = match account.ssl_type {
        0 => true,
        1 => client.stream.is_tls(),
        _ => false,
    };
    if !tls_ok {
        return access_denied(data, a, &reply).await;
    }
    if account.prove {
        if let Err(refused) = prove(data, &account.user, &credential, a, !reply.is_empty()).await {
            return Ok(Err(refused));
        }
    }
    if plugin == CACHING_SHA2_PASSWORD && clear.is_none() && !reply.is_empty() {
        handshake::write_auth_more_data(&mut out, seq, &[auth::SHA2_FAST_AUTH_SUCCESS]);
        client.write_all(&out).await?;
    }
    Ok(Ok((account.user, credential)))
}

/// What a login's name leads to.
enum Found {
    /// A configured user, or a backend account sluice can verify.
    Account(Account),
    /// None; with `backend_users`, what the server's refusal depends on.
    Missing(Option<Unverified>),
}

/// A configured user, else (with `backend_users`) the backend's account as it is now. `Err`:
/// the backend's accounts could not be read.
async fn find_account(data: &Arc<DataPath>, a: &Attempt<'_>) -> Result<Found, Denied> {
    let name = a.user;
    let hostgroup = {
        let snapshot = data.snapshot();
        if let Some(user) = snapshot.users.configured(name) {
            return Ok(Found::Account(Account { user: user.clone(), ssl_type: 0, prove: false, failures_counted: false }));
        }
        if !snapshot.config.proxy.backend_users {
            return Ok(Found::Missing(None));
        }
        snapshot.config.proxy.backend_users_hostgroup
    };
    let lookup = data.backend_accounts.lookup(&data.live, name).await.map_err(|e| Denied::backend(e.code, e.message))?;
    let host = client_host(data, a).await;
    Ok(match lookup.account(name, &host, hostgroup) {
        Some(account) => Found::Account(account),
        None => Found::Missing(Some(lookup.unverified(name, &host))),
    })
}

/// A login no account sluice can verify matched: refused as the server would refuse it before
/// any password (an old_password account under secure_auth, a plugin it has not loaded, for an
/// unknown name too: MDEV-3909), else with ER_ACCESS_DENIED_ERROR.
async fn refused(data: &DataPath, a: &Attempt<'_>, reply: &[u8], unverified: Option<Unverified>) -> Denied {
    let host = client_host(data, a).await;
    if let Some(basis) = unverified {
        let plugin_auth = a.capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH);
        if let Some(refusal) = data.backend_accounts.refusal(&data.live, a.user, basis, plugin_auth).await {
            return Denied::refusal(refusal, a.user, &host);
        }
    }
    Denied::access(a.user, &host, !reply.is_empty())
}

/// Logs in to the backend as the client's user on a new connection, so the server itself says
/// whether it takes the login now (a locked account, an expired password with or without the
/// client's CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS, max_password_errors…). On success, idle pooled
/// connections of this login are closed: the session's first connection is a new one, which
/// carries the server's verdict (an expired password's sandbox mode).
async fn prove(data: &DataPath, user: &User, credential: &Credential, a: &Attempt<'_>, used_password: bool) -> Result<(), Denied> {
    let (username, credential) = user.backend_credential(credential.clone());
    match server_login(data, user, &username, &credential, a).await {
        Ok(backend) => {
            backend.quit().await;
            for s in data.live.load().hostgroups.servers() {
                s.pool.close_idle_logins(false, |login| login.username == username && login.credential == credential);
            }
            Ok(())
        }
        Err(e) => Err(server_refusal(data, a, e, used_password).await),
    }
}

/// A password sluice refused, for an account whose refused logins the server counts
/// (`Account::failures_counted`): the server gets the same login with a password that cannot
/// be right (the client's reply was made for sluice's nonce, not the server's), empty when the
/// client's was, so it counts the failure as it would a direct one (one server attempt per
/// client attempt, after sluice's own delay) and its answer is the client's: ER_USER_IS_BLOCKED
/// once max_password_errors is reached.
async fn refused_by_server(data: &DataPath, user: &User, a: &Attempt<'_>, used_password: bool) -> Denied {
    let wrong = if used_password { Credential::Stage1(rand::random()) } else { Credential::Empty };
    match server_login(data, user, &user.name, &wrong, a).await {
        // A random SHA1 that is the password: sluice's refusal stands.
        Ok(backend) => {
            backend.quit().await;
            Denied::access(a.user, &client_host(data, a).await, used_password)
        }
        Err(e @ crate::pool::BackendError::Rejected { .. }) => server_refusal(data, a, e, used_password).await,
        // The server cannot be asked: the password is wrong all the same.
        Err(_) => Denied::access(a.user, &client_host(data, a).await, used_password),
    }
}

/// A new connection to a server of `user`'s hostgroup as `username`, with the client's
/// CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS and character set, as its own login would be.
async fn server_login(
    data: &DataPath,
    user: &User,
    username: &str,
    credential: &Credential,
    a: &Attempt<'_>,
) -> Result<crate::pool::Backend, crate::pool::BackendError> {
    let snapshot = data.live.load_full();
    let server = snapshot.hostgroups.pick(user.default_hostgroup)?;
    let expired_ok = CapabilityFlags::CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS;
    let mut params = crate::pool::ConnectParams::internal(server, username, credential, snapshot.config.connect_timeout());
    params.capabilities = (params.capabilities - expired_ok) | (a.capabilities & expired_ok);
    // The server's refusal in the client's character set, as it would answer the client.
    params.collation = a.collation;
    crate::pool::connect(&params).await
}

/// The server's refusal of `server_login` as the client gets it: ER_ACCESS_DENIED_ERROR naming
/// the client (the server named sluice), any other as the server sent it, and a server that
/// could not be asked as such.
async fn server_refusal(data: &DataPath, a: &Attempt<'_>, e: crate::pool::BackendError, used_password: bool) -> Denied {
    match e {
        crate::pool::BackendError::Rejected { code: ER_ACCESS_DENIED_ERROR, .. } => {
            Denied::access(a.user, &client_host(data, a).await, used_password)
        }
        crate::pool::BackendError::Rejected { code, sqlstate, message, .. } => Denied { code, sqlstate, message },
        e => {
            let (code, sqlstate) = e.client_error();
            Denied { code, sqlstate, message: e.to_string().into() }
        }
    }
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
        max_connections: None,
        caps: Default::default(),
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
