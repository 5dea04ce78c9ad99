//! Opening a backend connection: greeting, optional TLS, authentication (mysql_native_password
//! and caching_sha2_password with fast path, full auth over TLS or RSA, auth switch), and a
//! small text-protocol query helper for sluice's own queries (reading accounts, KILL).

use crate::net::{tune, Conn, Stream};
use crate::route::Server;
use proto::auth;
use proto::handshake::{self, ClientHello, ServerGreeting};
use proto::packet;
use proto::CapabilityFlags;
use std::time::Duration;
use tokio::net::TcpStream;

/// What sluice knows that lets it log in to a backend as a user.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Empty,
    /// The plain-text password (configured users only).
    Plain(String),
    /// SHA1(password), derived from the client's own login: enough for mysql_native_password.
    Stage1([u8; 20]),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Empty => "Empty",
            Credential::Plain(_) => "Plain(..)",
            Credential::Stage1(_) => "Stage1(..)",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("Can't connect to backend server '{server}' ({source})")]
    Connect {
        server: String,
        source: std::io::Error,
    },
    #[error("Can't connect to backend server '{server}' (timed out after {ms} ms)")]
    Timeout { server: String, ms: u128 },
    /// The backend refused (bad credentials, unknown database…): its ERR payload, for the client.
    #[error("backend server '{server}' refused the login: {message}")]
    Rejected {
        server: String,
        code: u16,
        sqlstate: [u8; 5],
        message: String,
    },
    #[error("backend server '{server}': {what}")]
    Protocol { server: String, what: String },
    #[error("Lost connection to backend server '{server}' ({source})")]
    Lost {
        server: String,
        source: std::io::Error,
    },
}

/// Everything needed to open one backend connection.
pub struct ConnectParams<'a> {
    pub server: &'a Server,
    pub username: &'a str,
    pub credential: &'a Credential,
    pub database: Option<&'a str>,
    pub collation: u8,
    /// The capabilities the client negotiated with sluice; the backend connection uses the same.
    pub capabilities: CapabilityFlags,
    pub attrs: &'a [(String, String)],
    pub timeout: Duration,
}

/// An authenticated backend connection.
pub struct Backend {
    pub conn: Conn,
    pub server: Server,
    /// The backend's thread id (its CONNECTION_ID()).
    pub thread_id: u32,
    pub capabilities: CapabilityFlags,
    pub greeting: ServerGreeting,
}

impl Backend {
    pub fn deprecate_eof(&self) -> bool {
        self.capabilities
            .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    /// Runs a statement whose result is small and returns its rows as text (NULL as `None`).
    /// For sluice's own queries only: client traffic is streamed by `exec`.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        let server = self.server.name.clone();
        let lost = |e| BackendError::Lost {
            server: server.clone(),
            source: e,
        };
        let proto_err = |what: &str| BackendError::Protocol {
            server: server.clone(),
            what: what.to_string(),
        };
        let mut out = Vec::new();
        let mut seq = 0;
        let mut payload = vec![proto::command::COM_QUERY];
        payload.extend_from_slice(sql.as_bytes());
        proto::frame::write_packet(&mut out, &mut seq, &payload);
        self.conn.write_all(&out).await.map_err(lost)?;
        let max = 1 << 30;
        let mut rows = Vec::new();
        loop {
            let (_, p) = self.conn.read_packet(max).await.map_err(lost)?;
            match p.first() {
                Some(0x00) => {
                    let ok = packet::parse_ok(&p).map_err(|_| proto_err("bad OK"))?;
                    if ok.status & proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() == 0 {
                        return Ok(rows);
                    }
                }
                Some(0xFF) => {
                    let e = packet::parse_err(&p).map_err(|_| proto_err("bad ERR"))?;
                    return Err(BackendError::Rejected {
                        server: server.clone(),
                        code: e.code,
                        sqlstate: e.sqlstate,
                        message: String::from_utf8_lossy(e.message).into_owned(),
                    });
                }
                _ => {
                    let (cols, _) = proto::codec::read_lenenc(&p)
                        .ok_or_else(|| proto_err("bad column count"))?;
                    for _ in 0..cols {
                        self.conn.read_packet(max).await.map_err(lost)?;
                    }
                    if !self.deprecate_eof() {
                        self.conn.read_packet(max).await.map_err(lost)?;
                    }
                    loop {
                        let (_, r) = self.conn.read_packet(max).await.map_err(lost)?;
                        if r.first() == Some(&0xFE) && r.len() < proto::frame::MAX_CHUNK {
                            let status = packet::terminator_status(&r, self.deprecate_eof())
                                .map_err(|_| proto_err("bad EOF"))?;
                            if status & proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() == 0 {
                                return Ok(rows);
                            }
                            break;
                        }
                        if r.first() == Some(&0xFF) {
                            return Err(proto_err("error inside a result set"));
                        }
                        let mut row = Vec::with_capacity(cols as usize);
                        let mut rest = &r[..];
                        for _ in 0..cols {
                            if rest.first() == Some(&0xFB) {
                                row.push(None);
                                rest = &rest[1..];
                            } else {
                                let (v, n) = proto::codec::read_lenenc_str(rest)
                                    .ok_or_else(|| proto_err("bad row"))?;
                                row.push(Some(String::from_utf8_lossy(v).into_owned()));
                                rest = &rest[n..];
                            }
                        }
                        rows.push(row);
                    }
                }
            }
        }
    }

    /// Says goodbye politely (COM_QUIT) and closes.
    pub async fn quit(mut self) {
        let _ = self
            .conn
            .write_all(&[1, 0, 0, 0, proto::command::COM_QUIT])
            .await;
    }
}

/// Capabilities sluice can carry through unchanged from client to backend.
pub fn passthrough_capabilities() -> CapabilityFlags {
    use CapabilityFlags as C;
    C::CLIENT_LONG_PASSWORD
        | C::CLIENT_FOUND_ROWS
        | C::CLIENT_LONG_FLAG
        | C::CLIENT_CONNECT_WITH_DB
        | C::CLIENT_NO_SCHEMA
        | C::CLIENT_ODBC
        | C::CLIENT_LOCAL_FILES
        | C::CLIENT_IGNORE_SPACE
        | C::CLIENT_PROTOCOL_41
        | C::CLIENT_INTERACTIVE
        | C::CLIENT_IGNORE_SIGPIPE
        | C::CLIENT_TRANSACTIONS
        | C::CLIENT_SECURE_CONNECTION
        | C::CLIENT_MULTI_STATEMENTS
        | C::CLIENT_MULTI_RESULTS
        | C::CLIENT_PS_MULTI_RESULTS
        | C::CLIENT_PLUGIN_AUTH
        | C::CLIENT_CONNECT_ATTRS
        | C::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | C::CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS
        | C::CLIENT_SESSION_TRACK
        | C::CLIENT_DEPRECATE_EOF
}

/// Capabilities of sluice's own backend connections (monitor queries, KILL): no client quirks
/// such as CLIENT_NO_SCHEMA, which would forbid `db.table` names.
pub fn internal_capabilities() -> CapabilityFlags {
    use CapabilityFlags as C;
    passthrough_capabilities()
        - (C::CLIENT_NO_SCHEMA
            | C::CLIENT_ODBC
            | C::CLIENT_LOCAL_FILES
            | C::CLIENT_IGNORE_SPACE
            | C::CLIENT_FOUND_ROWS
            | C::CLIENT_INTERACTIVE)
}

/// The reply to an auth request for `plugin`, or `None` when the credential cannot produce one.
fn auth_reply(plugin: &str, cred: &Credential, nonce: &[u8], tls: bool) -> Option<Vec<u8>> {
    match (plugin, cred) {
        (_, Credential::Empty) if plugin != auth::MYSQL_CLEAR_PASSWORD => Some(Vec::new()),
        (auth::MYSQL_NATIVE_PASSWORD, Credential::Plain(p)) => {
            Some(auth::native_scramble(&auth::native_stage1(p.as_bytes()), nonce).to_vec())
        }
        (auth::MYSQL_NATIVE_PASSWORD, Credential::Stage1(s1)) => {
            Some(auth::native_scramble(s1, nonce).to_vec())
        }
        (auth::CACHING_SHA2_PASSWORD, Credential::Plain(p)) => {
            Some(auth::sha2_scramble(p.as_bytes(), nonce).to_vec())
        }
        (auth::MYSQL_CLEAR_PASSWORD, Credential::Plain(p)) if tls => {
            Some([p.as_bytes(), &[0]].concat())
        }
        (auth::MYSQL_CLEAR_PASSWORD, Credential::Empty) if tls => Some(vec![0]),
        _ => None,
    }
}

/// Connects and authenticates. The backend's OK payload is returned so the client can be
/// answered with the server's own status flags and session-state information.
pub async fn connect(p: &ConnectParams<'_>) -> Result<(Backend, Vec<u8>), BackendError> {
    let server = p.server.name.clone();
    match tokio::time::timeout(p.timeout, connect_inner(p)).await {
        Ok(r) => r,
        Err(_) => Err(BackendError::Timeout {
            server,
            ms: p.timeout.as_millis(),
        }),
    }
}

async fn connect_inner(p: &ConnectParams<'_>) -> Result<(Backend, Vec<u8>), BackendError> {
    let server = &p.server.name;
    let lost = |e| BackendError::Lost {
        server: server.clone(),
        source: e,
    };
    let protocol = |what: String| BackendError::Protocol {
        server: server.clone(),
        what,
    };
    let tcp = TcpStream::connect((p.server.hostname.as_str(), p.server.port))
        .await
        .map_err(|e| BackendError::Connect {
            server: server.clone(),
            source: e,
        })?;
    tune(&tcp);
    let mut conn = Conn::new(Stream::Tcp(tcp));
    let (seq, payload) = conn.read_packet(1 << 16).await.map_err(lost)?;
    if payload.first() == Some(&0xFF) {
        return Err(rejected(server, &payload));
    }
    let greeting = handshake::parse_greeting(&payload).map_err(|e| protocol(e.to_string()))?;
    let mut caps = (p.capabilities & passthrough_capabilities() & greeting.capabilities)
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION;
    if greeting
        .capabilities
        .contains(CapabilityFlags::CLIENT_PLUGIN_AUTH)
    {
        caps |= CapabilityFlags::CLIENT_PLUGIN_AUTH;
    }
    let wanted =
        p.capabilities & passthrough_capabilities() & !CapabilityFlags::CLIENT_CONNECT_WITH_DB;
    let missing = wanted - greeting.capabilities;
    if missing.intersects(
        CapabilityFlags::CLIENT_DEPRECATE_EOF
            | CapabilityFlags::CLIENT_MULTI_RESULTS
            | CapabilityFlags::CLIENT_SESSION_TRACK,
    ) {
        return Err(protocol(format!(
            "does not support capabilities the client negotiated: {missing:?}"
        )));
    }
    let mut seq = seq.wrapping_add(1);
    let mut hello = ClientHello {
        capabilities: caps,
        max_packet: 1 << 30,
        collation: p.collation,
        user: p.username.to_string(),
        auth_response: Vec::new(),
        database: p.database.map(str::to_string),
        auth_plugin: None,
        attrs: p.attrs.to_vec(),
    };
    let mut out = Vec::new();
    if let Some(tls) = &p.server.tls {
        if !greeting.capabilities.contains(CapabilityFlags::CLIENT_SSL) {
            return Err(protocol(
                "use_ssl is set but the server does not offer TLS".into(),
            ));
        }
        hello.capabilities |= CapabilityFlags::CLIENT_SSL;
        handshake::write_ssl_request(&mut out, &mut seq, &hello);
        conn.write_all(&out).await.map_err(lost)?;
        out.clear();
        let Stream::Tcp(tcp) = conn.stream else {
            unreachable!("fresh connection is plain TCP")
        };
        let name = rustls::pki_types::ServerName::try_from(p.server.hostname.clone())
            .unwrap_or_else(|_| {
                rustls::pki_types::ServerName::try_from("localhost").expect("static name")
            });
        let tls_stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| protocol(format!("TLS handshake failed: {e}")))?;
        conn = Conn::new(Stream::ClientTls(Box::new(tls_stream)));
    }
    let is_tls = conn.stream.is_tls();
    let mut plugin = if greeting.auth_plugin.is_empty() {
        auth::MYSQL_NATIVE_PASSWORD.to_string()
    } else {
        greeting.auth_plugin.clone()
    };
    let mut nonce = greeting.nonce.clone();
    let reply = match auth_reply(&plugin, p.credential, &nonce, is_tls) {
        Some(r) => r,
        None => {
            // Offer native; the server switches us to the account's plugin if it differs.
            plugin = auth::MYSQL_NATIVE_PASSWORD.to_string();
            auth_reply(&plugin, p.credential, &nonce, is_tls).unwrap_or_default()
        }
    };
    hello.auth_plugin = Some(plugin.clone());
    hello.auth_response = reply;
    handshake::write_client_hello(&mut out, &mut seq, &hello);
    conn.write_all(&out).await.map_err(lost)?;
    loop {
        let (last, payload) = conn.read_packet(1 << 24).await.map_err(lost)?;
        let mut seq = last.wrapping_add(1);
        out.clear();
        match payload.first() {
            Some(0x00) => {
                let backend = Backend {
                    conn,
                    server: p.server.clone(),
                    thread_id: greeting.connection_id,
                    capabilities: hello.capabilities,
                    greeting,
                };
                return Ok((backend, payload));
            }
            Some(0xFF) => return Err(rejected(server, &payload)),
            Some(0xFE) => {
                let (new_plugin, new_nonce) =
                    handshake::parse_auth_switch(&payload).map_err(|e| protocol(e.to_string()))?;
                let reply = auth_reply(&new_plugin, p.credential, &new_nonce, is_tls).ok_or_else(|| {
                    protocol(format!("the account `{}` uses {new_plugin}, which sluice cannot answer with the credentials it has", p.username))
                })?;
                plugin = new_plugin;
                nonce = new_nonce;
                handshake::write_raw(&mut out, &mut seq, &reply);
            }
            Some(0x01) if plugin == auth::CACHING_SHA2_PASSWORD => match payload.get(1) {
                Some(&auth::SHA2_FAST_AUTH_SUCCESS) => continue,
                Some(&auth::SHA2_PERFORM_FULL_AUTH) => {
                    let Credential::Plain(pw) = p.credential else {
                        return Err(protocol(format!(
                            "caching_sha2_password full authentication for `{}` needs the plain-text password in the config",
                            p.username
                        )));
                    };
                    if is_tls {
                        handshake::write_raw(&mut out, &mut seq, &[pw.as_bytes(), &[0]].concat());
                    } else {
                        handshake::write_raw(&mut out, &mut seq, &[auth::SHA2_REQUEST_PUBLIC_KEY]);
                        conn.write_all(&out).await.map_err(lost)?;
                        out.clear();
                        let (last, key) = conn.read_packet(1 << 16).await.map_err(lost)?;
                        seq = last.wrapping_add(1);
                        let pem = key
                            .get(1..)
                            .ok_or_else(|| protocol("empty public key".into()))?;
                        let mut secret = [pw.as_bytes(), &[0]].concat();
                        auth::xor_with_nonce(&mut secret, &nonce);
                        let ct = rsa_encrypt(pem, &secret).ok_or_else(|| {
                            protocol("cannot use the server's RSA public key".into())
                        })?;
                        handshake::write_raw(&mut out, &mut seq, &ct);
                    }
                }
                _ => return Err(protocol("unexpected caching_sha2_password message".into())),
            },
            _ => {
                return Err(protocol(format!(
                    "unexpected packet during authentication (plugin {plugin})"
                )))
            }
        }
        conn.write_all(&out).await.map_err(lost)?;
    }
}

fn rejected(server: &str, payload: &[u8]) -> BackendError {
    match packet::parse_err(payload) {
        Ok(e) => BackendError::Rejected {
            server: server.to_string(),
            code: e.code,
            sqlstate: e.sqlstate,
            message: String::from_utf8_lossy(e.message).into_owned(),
        },
        Err(_) => BackendError::Protocol {
            server: server.to_string(),
            what: "malformed error packet".into(),
        },
    }
}

/// RSA-OAEP (SHA-1) encryption with a PEM public key, as MySQL clients do for caching_sha2.
fn rsa_encrypt(pem: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::rsa::{OaepPublicEncryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1};
    let der = rustls_pemfile::public_keys(&mut std::io::BufReader::new(pem))
        .next()?
        .ok()?;
    let key =
        OaepPublicEncryptingKey::new(PublicEncryptingKey::from_der(der.as_ref()).ok()?).ok()?;
    let mut out = vec![0; key.ciphertext_size()];
    Some(
        key.encrypt(&OAEP_SHA1_MGF1SHA1, data, &mut out, None)
            .ok()?
            .to_vec(),
    )
}
