//! Opening a backend connection: greeting, optional TLS, authentication (mysql_native_password
//! and caching_sha2_password with fast path, full auth over TLS or RSA, auth switch), and a
//! small text-protocol query helper for sluice's own queries (reading accounts, KILL).

use super::Server;
use super::{state, Login};
use crate::net::{Conn, Stream};
use proto::auth;
use proto::errors::*;
use proto::handshake::{self, ClientHello, ServerGreeting};
use proto::packet;
use proto::CapabilityFlags;
use std::sync::Arc;
use std::time::{Duration, Instant};
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

impl Credential {
    /// A configured password (`[monitor]`, `[[mysql_users]]`): none when empty.
    pub fn from_password(password: &str) -> Credential {
        if password.is_empty() {
            Credential::Empty
        } else {
            Credential::Plain(password.to_string())
        }
    }
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
    Connect { server: String, source: std::io::Error },
    #[error("Can't connect to backend server '{server}' (timed out after {ms} ms)")]
    Timeout { server: String, ms: u128 },
    /// The backend refused (bad credentials, unknown database…): its ERR payload, for the client.
    #[error("backend server '{server}' refused the login: {message}")]
    Rejected { server: String, code: u16, sqlstate: [u8; 5], message: ServerMessage },
    #[error("backend server '{server}': {what}")]
    Protocol { server: String, what: String },
    #[error("Lost connection to backend server '{server}' ({source})")]
    Lost { server: String, source: std::io::Error },
    #[error("{0}")]
    Unavailable(#[from] super::NoServer),
}

/// An error message as the server sent it: in the connection's character set (latin1, sjis…),
/// so kept as bytes for the client; shown lossily as UTF-8 in logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMessage(Box<[u8]>);

impl ServerMessage {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for ServerMessage {
    fn from(bytes: &[u8]) -> Self {
        ServerMessage(bytes.into())
    }
}

impl From<String> for ServerMessage {
    fn from(text: String) -> Self {
        ServerMessage(text.into_bytes().into())
    }
}

impl std::fmt::Display for ServerMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl BackendError {
    /// The error a client gets for this failure: the backend's own when it refused; otherwise
    /// a server code (a client library's 2000–2999 would read as a malformed packet).
    pub fn client_error(&self) -> (u16, [u8; 5]) {
        match self {
            BackendError::Rejected { code, sqlstate, .. } => (*code, *sqlstate),
            // The backend connection is gone or cannot be made (down, restarting): what a
            // direct client sees as a lost connection or a failed connect. 1927, as MaxScale
            // answers; retry logic (and mysqltest's wait_until_connected_again) takes it.
            BackendError::Lost { .. } | BackendError::Connect { .. } | BackendError::Timeout { .. } => {
                (ER_CONNECTION_KILLED, *SQLSTATE_CONNECTION_KILLED)
            }
            // No usable server in the hostgroup, a full pool, a backend speaking nonsense.
            BackendError::Protocol { .. } | BackendError::Unavailable(_) => (ER_PROXY_NO_BACKEND, *SQLSTATE_GENERAL),
        }
    }
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
    /// MariaDB extended capabilities the client negotiated.
    pub mariadb_caps: u32,
    pub timeout: Duration,
}

impl<'a> ConnectParams<'a> {
    /// sluice's own connections (reading accounts, KILL): no client capabilities, attributes
    /// or schema, utf8mb4.
    pub fn internal(server: &'a Server, username: &'a str, credential: &'a Credential, timeout: Duration) -> Self {
        ConnectParams {
            server,
            username,
            credential,
            database: None,
            collation: 45,
            capabilities: internal_capabilities(),
            attrs: &[],
            mariadb_caps: 0,
            timeout,
        }
    }
}

/// An authenticated backend connection.
pub struct Backend {
    pub conn: Conn,
    pub server: Server,
    /// The backend's thread id (its CONNECTION_ID()).
    pub thread_id: u32,
    pub capabilities: CapabilityFlags,
    pub mariadb_caps: u32,
    pub greeting: ServerGreeting,
    /// The login it was opened with (its pool key).
    pub login: Arc<Login>,
    /// The session state it is in (schema, variables), as sluice set or read it.
    pub state: Arc<state::State>,
    /// Server status flags of the last complete reply.
    pub status: u16,
    /// LAST_INSERT_ID() here, as far as OK packets told.
    pub last_insert_id: u64,
    /// The server's OK to the login (its session-state information tells clients their
    /// character set): answered to each client that starts a session on this connection.
    pub login_ok: Vec<u8>,
    /// The OS thread id of the server thread serving it, for the server-time probe: 0 until
    /// learned (its first statement timed with the probe attached), u32::MAX if the server
    /// would not say (`probe::TID_QUERIES`).
    pub probe_tid: u32,
    /// Counted against its server's max_connections; goes back to the pool.
    pub pooled: bool,
    /// In an unknown protocol state (a reply cut short): closed, never reused.
    pub broken: bool,
    /// Carries state of a client that is gone (temporary tables, locks…): reset before reuse.
    pub needs_reset: bool,
    pub created: Instant,
    pub idle_since: Instant,
    /// The pool's privilege epoch when it logged in (`ServerPool::epoch`).
    pub epoch: u64,
    /// Prepared statements this connection has, by registry entry.
    pub statements: super::prepared::Statements,
    /// The runtime whose I/O driver the socket is registered with: it is kept running while
    /// the connection is open (`RuntimeTag`).
    pub runtime: Option<Arc<super::RuntimeTag>>,
    /// The pool shard of the worker that opened it: in per-core mode it goes back there after
    /// serving a session of another worker (`checkin`).
    pub home: usize,
}

impl Backend {
    pub fn idle_for(&self) -> Duration {
        self.idle_since.elapsed()
    }

    pub fn age(&self) -> Duration {
        self.age_at(Instant::now())
    }

    /// The age at `now`, a time the caller already read.
    pub fn age_at(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.created)
    }

    /// Closes without waiting: COM_QUIT if the socket takes it at once (so the server does
    /// not log an aborted connection), then the socket closes.
    pub fn close(mut self) {
        if !self.conn.stream.is_tls() {
            self.conn.stream.try_write_now(&[1, 0, 0, 0, proto::command::COM_QUIT]);
        }
    }

    /// A transaction is open, or may be (autocommit off): the session stays on this connection.
    pub fn in_transaction(&self) -> bool {
        use proto::StatusFlags as S;
        self.status & S::SERVER_STATUS_IN_TRANS.bits() != 0 || self.status & S::SERVER_STATUS_AUTOCOMMIT.bits() == 0
    }

    /// Whether this idle connection is still open, checked at the cost its idleness warrants:
    /// one idle less than `check_after` (used a moment ago) only through the reactor's
    /// readiness (`looks_closed`, no system call per statement), one idle longer by asking the
    /// socket (`is_alive`). For pooled connections and those a session keeps alike.
    pub fn still_open(&mut self, check_after: Duration) -> bool {
        if self.idle_for() < check_after {
            !self.looks_closed()
        } else {
            self.is_alive()
        }
    }

    /// Whether the reactor saw anything arrive on this idle connection (a close, or the
    /// server's error before it closes), asking the socket only then: no system call for a
    /// connection nothing happened to. Readiness a read left set (one that filled its buffer)
    /// also leads to the socket. A close the reactor has not seen yet is not noticed here:
    /// `still_open` asks the socket itself once a connection has been idle a while.
    fn looks_closed(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // Pending registers the no-op waker: nothing waits on an idle connection, and the
        // next read registers its own.
        match self.conn.stream.poll_read_ready(&mut cx) {
            std::task::Poll::Pending => false,
            std::task::Poll::Ready(_) => !self.is_alive(),
        }
    }

    /// False when the server has closed this (idle) connection or said something unasked.
    pub fn is_alive(&mut self) -> bool {
        // The socket itself is asked (a non-blocking peek): tokio's cached readiness may not
        // have seen a close that arrived while the worker was busy.
        self.conn.stream.peek_alive()
    }

    /// The type byte of a column definition this connection received.
    pub fn column_type(&self, def: &[u8]) -> Option<u8> {
        column_type(def, self.mariadb_caps)
    }

    /// The server is MariaDB (by its greeting's version), not MySQL: they name GTID positions,
    /// replication status and thread views differently.
    pub fn is_mariadb(&self) -> bool {
        self.greeting.server_version.contains("MariaDB")
    }

    pub fn deprecate_eof(&self) -> bool {
        self.capabilities.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    /// What the reply scanner must know about this connection's packet formats.
    pub fn format(&self) -> crate::exec::Format {
        crate::exec::Format { deprecate_eof: self.deprecate_eof(), mariadb_caps: self.mariadb_caps, status: self.status }
    }

    /// Runs a statement whose result is small and returns its rows as text (NULL as `None`).
    /// For sluice's own queries only: client traffic is streamed by `exec`.
    pub async fn query(&mut self, sql: impl AsRef<[u8]>) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        let (rows, _) = self.query_columns(sql).await?;
        Ok(rows.into_iter().map(|r| r.into_iter().map(|c| c.value.map(|v| String::from_utf8_lossy(&v).into_owned())).collect()).collect())
    }

    /// Runs one of sluice's own statements and returns the rows of its result sets with each
    /// column's type, and the status flags of its last reply.
    pub async fn query_columns(&mut self, sql: impl AsRef<[u8]>) -> Result<(Vec<Vec<state::Column>>, u16), BackendError> {
        let sql = sql.as_ref();
        let mut out = Vec::with_capacity(sql.len() + 5);
        proto::frame::write_command(&mut out, 0, proto::command::COM_QUERY, sql);
        self.conn.write_all(&out).await.map_err(|e| self.lost(e))?;
        let mut rows = Vec::new();
        loop {
            let more = self.read_result(&mut rows).await?;
            if more & proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() == 0 {
                return Ok((rows, more));
            }
        }
    }

    /// Runs one of sluice's own statements that returns one small result set (SHOW … STATUS):
    /// its column names and its rows as text (NULL as `None`).
    pub async fn query_named(&mut self, sql: &str) -> Result<(Vec<String>, Vec<Vec<Option<String>>>), BackendError> {
        let mut out = Vec::with_capacity(sql.len() + 5);
        proto::frame::write_command(&mut out, 0, proto::command::COM_QUERY, sql.as_bytes());
        self.conn.write_all(&out).await.map_err(|e| self.lost(e))?;
        let (mut rows, mut names) = (Vec::new(), Vec::new());
        self.read_result_named(&mut rows, Some(&mut names)).await?;
        let text = |c: state::Column| c.value.map(|v| String::from_utf8_lossy(&v).into_owned());
        Ok((names, rows.into_iter().map(|r| r.into_iter().map(text).collect()).collect()))
    }

    /// Reads one result (OK, ERR or a text result set) into `rows`; returns its status flags.
    pub(super) async fn read_result(&mut self, rows: &mut Vec<Vec<state::Column>>) -> Result<u16, BackendError> {
        self.read_result_named(rows, None).await
    }

    /// `read_result`, also giving the result set's column names to `names`.
    async fn read_result_named(
        &mut self,
        rows: &mut Vec<Vec<state::Column>>,
        mut names: Option<&mut Vec<String>>,
    ) -> Result<u16, BackendError> {
        let max = 1 << 30;
        let server = self.server.name.to_string();
        let proto_err = |what: &str| BackendError::Protocol { server: server.clone(), what: what.to_string() };
        let (_, p) = self.conn.read_packet(max).await.map_err(|e| self.lost(e))?;
        match p.first() {
            Some(0x00) => {
                let ok = packet::parse_ok(&p).map_err(|_| proto_err("bad OK"))?;
                self.status = ok.status;
                Ok(ok.status)
            }
            Some(0xFF) => Err(rejected(&server, &p)),
            _ => {
                let (cols, _) = proto::codec::read_lenenc(&p).ok_or_else(|| proto_err("bad column count"))?;
                let mut types = Vec::with_capacity(cols as usize);
                for _ in 0..cols {
                    let (_, def) = self.conn.read_packet(max).await.map_err(|e| self.lost(e))?;
                    types.push(column_type(&def, self.mariadb_caps).ok_or_else(|| proto_err("bad column definition"))?);
                    if let Some(names) = names.as_deref_mut() {
                        let name = proto::resultset::column_name(&def).ok_or_else(|| proto_err("bad column definition"))?;
                        names.push(String::from_utf8_lossy(name).into_owned());
                    }
                }
                if !self.deprecate_eof() {
                    self.conn.read_packet(max).await.map_err(|e| self.lost(e))?;
                }
                loop {
                    let (_, r) = self.conn.read_packet(max).await.map_err(|e| self.lost(e))?;
                    if r.first() == Some(&0xFE) && r.len() < proto::frame::MAX_CHUNK {
                        let status = packet::terminator_status(&r, self.deprecate_eof()).map_err(|_| proto_err("bad EOF"))?;
                        self.status = status;
                        return Ok(status);
                    }
                    if r.first() == Some(&0xFF) {
                        return Err(rejected(&server, &r));
                    }
                    let mut row = Vec::with_capacity(types.len());
                    let mut rest = &r[..];
                    for &type_id in &types {
                        if rest.first() == Some(&0xFB) {
                            row.push(state::Column { type_id, value: None });
                            rest = &rest[1..];
                        } else {
                            let (v, n) = proto::codec::read_lenenc_str(rest).ok_or_else(|| proto_err("bad row"))?;
                            row.push(state::Column { type_id, value: Some(v.to_vec()) });
                            rest = &rest[n..];
                        }
                    }
                    rows.push(row);
                }
            }
        }
    }

    /// Sends `request` (whole COM_QUERY packets as a client framed them) and reads every
    /// result it produces without keeping any row: a mirrored statement (`mirror`). The first
    /// error the server reports is returned once the replies are read; LOAD DATA LOCAL is
    /// answered with an empty file.
    pub async fn discard_reply(&mut self, request: &[u8]) -> Result<(), BackendError> {
        const MAX: usize = 1 << 30;
        self.conn.write_all(request).await.map_err(|e| self.lost(e))?;
        let server = self.server.name.to_string();
        let proto_err = |what: &str| BackendError::Protocol { server: server.clone(), what: what.to_string() };
        loop {
            let (seq, p) = self.conn.read_packet(MAX).await.map_err(|e| self.lost(e))?;
            let status = match p.first() {
                Some(0x00) => packet::parse_ok(&p).map_err(|_| proto_err("bad OK"))?.status,
                Some(0xFF) => return Err(rejected(&server, &p)),
                Some(0xFB) => {
                    // LOAD DATA LOCAL INFILE: the mirror gets no file (an empty one).
                    self.conn.write_all(&[0, 0, 0, seq.wrapping_add(1)]).await.map_err(|e| self.lost(e))?;
                    continue;
                }
                _ => {
                    let (cols, _) = proto::codec::read_lenenc(&p).ok_or_else(|| proto_err("bad column count"))?;
                    for _ in 0..cols {
                        self.conn.read_packet(MAX).await.map_err(|e| self.lost(e))?;
                    }
                    if !self.deprecate_eof() {
                        self.conn.read_packet(MAX).await.map_err(|e| self.lost(e))?;
                    }
                    loop {
                        let (_, r) = self.conn.read_packet(MAX).await.map_err(|e| self.lost(e))?;
                        match r.first() {
                            Some(0xFE) if r.len() < proto::frame::MAX_CHUNK => {
                                break packet::terminator_status(&r, self.deprecate_eof()).map_err(|_| proto_err("bad EOF"))?;
                            }
                            Some(0xFF) => return Err(rejected(&server, &r)),
                            _ => {}
                        }
                    }
                }
            };
            self.status = status;
            if status & proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() == 0 {
                return Ok(());
            }
        }
    }

    /// Sends COM_INIT_DB and a statement together (one round trip) and reads both replies.
    /// The first error is returned, after every reply was read.
    pub async fn run_batch(&mut self, init_db: Option<&str>, sql: Option<&str>) -> Result<(), BackendError> {
        let mut out = Vec::new();
        for (cmd, body) in [(proto::command::COM_INIT_DB, init_db), (proto::command::COM_QUERY, sql)] {
            if let Some(body) = body {
                proto::frame::write_command(&mut out, 0, cmd, body.as_bytes());
            }
        }
        self.conn.write_all(&out).await.map_err(|e| self.lost(e))?;
        let mut first_error = None;
        let mut rows = Vec::new();
        for _ in 0..(init_db.is_some() as usize + sql.is_some() as usize) {
            match self.read_result(&mut rows).await {
                Ok(_) => {}
                Err(e @ BackendError::Rejected { .. }) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Returns the server session to its state right after login (COM_RESET_CONNECTION, or
    /// COM_CHANGE_USER with the same login where the server lacks it).
    pub async fn reset(&mut self) -> Result<(), BackendError> {
        // Whatever the outcome, the server's statements are gone or unknown.
        self.statements.clear();
        self.conn.write_all(&[1, 0, 0, 0, proto::command::COM_RESET_CONNECTION]).await.map_err(|e| self.lost(e))?;
        let (_, p) = self.conn.read_packet(1 << 24).await.map_err(|e| self.lost(e))?;
        match p.first() {
            Some(0x00) => {
                self.status = packet::parse_ok(&p).map_or(self.status, |o| o.status);
                Ok(())
            }
            Some(0xFF) if packet::parse_err(&p).is_ok_and(|e| e.code == proto::errors::ER_UNKNOWN_COM_ERROR) => {
                let login = self.login.clone();
                let schema = self.state.schema.clone();
                self.change_user(&login.username, &login.credential, schema.as_deref(), login.collation as u16, &login.attrs).await?;
                Ok(())
            }
            Some(0xFF) => Err(rejected(&self.server.name, &p)),
            _ => Err(BackendError::Protocol {
                server: self.server.name.to_string(),
                what: "unexpected reply to COM_RESET_CONNECTION".into(),
            }),
        }
    }

    /// After one of sluice's own exchanges failed: anything but the server's refusal leaves
    /// the connection mid-reply, so it is closed rather than reused.
    pub fn note_failure(&mut self, e: &BackendError) {
        self.broken |= !matches!(e, BackendError::Rejected { .. });
    }

    pub(super) fn lost(&self, e: std::io::Error) -> BackendError {
        BackendError::Lost { server: self.server.name.to_string(), source: e }
    }

    /// Says goodbye politely (COM_QUIT) and closes.
    pub async fn quit(mut self) {
        let _ = self.conn.write_all(&[1, 0, 0, 0, proto::command::COM_QUIT]).await;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if self.pooled {
            self.server.pool.released_slot();
        }
        if let Some(r) = &self.runtime {
            r.open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// Capabilities sluice cannot carry between client and backend: compression, TLS (each side
/// has its own), and MySQL 8 extensions that change packet formats it does not parse.
pub fn unsupported_capabilities() -> CapabilityFlags {
    use CapabilityFlags as C;
    C::CLIENT_COMPRESS
        | C::CLIENT_SSL
        | C::CLIENT_ZSTD_COMPRESSION_ALGORITHM
        | C::CLIENT_QUERY_ATTRIBUTES
        | C::CLIENT_OPTIONAL_RESULTSET_METADATA
        | C::CLIENT_PROGRESS_OBSOLETE
        | C::CLIENT_SSL_VERIFY_SERVER_CERT
}

/// Capabilities sluice carries through unchanged from client to backend.
pub fn passthrough_capabilities() -> CapabilityFlags {
    CapabilityFlags::all() - unsupported_capabilities()
}

/// MariaDB extended capabilities sluice understands: progress reports, bulk execute and
/// extended metadata (not COM_MULTI, not bulk unit results). Not metadata caching: a client's
/// statement runs on whichever connection is free, whose server statement may already have
/// sent changed metadata to another client, so every execute must carry its metadata.
pub const MARIADB_PASSTHROUGH: u32 = proto::response::MARIADB_CLIENT_PROGRESS | (1 << 2) | (1 << 3);

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
        (auth::MYSQL_NATIVE_PASSWORD, Credential::Stage1(s1)) => Some(auth::native_scramble(s1, nonce).to_vec()),
        (auth::CACHING_SHA2_PASSWORD, Credential::Plain(p)) => Some(auth::sha2_scramble(p.as_bytes(), nonce).to_vec()),
        (auth::MYSQL_CLEAR_PASSWORD, Credential::Plain(p)) if tls => Some([p.as_bytes(), &[0]].concat()),
        (auth::MYSQL_CLEAR_PASSWORD, Credential::Empty) if tls => Some(vec![0]),
        _ => None,
    }
}

/// Connects and authenticates. The server's login OK stays with the connection (`login_ok`).
pub async fn connect(p: &ConnectParams<'_>) -> Result<Backend, BackendError> {
    let server = p.server.name.to_string();
    match tokio::time::timeout(p.timeout, connect_inner(p)).await {
        Ok(Err(e)) => {
            warn_login_failed(&server, p.username, &e);
            Err(e)
        }
        Ok(r) => r,
        Err(_) => Err(BackendError::Timeout { server, ms: p.timeout.as_millis() }),
    }
}

/// How often the same failed login (server, user, error code) is logged at most.
const LOGIN_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Failed logins warned about, by (server, user, error code): when last, and how many since.
type LoginWarnings = std::collections::HashMap<(String, String, u16), (Instant, u64)>;
static LOGIN_WARNINGS: std::sync::Mutex<Option<LoginWarnings>> = std::sync::Mutex::new(None);

/// Logs a login the backend refused (its error code and message) or that sluice could not
/// complete, at warn: otherwise a client sees only the server's error and the log says nothing.
/// The same failure is logged once per interval, with how many were left out meanwhile.
fn warn_login_failed(server: &str, user: &str, e: &BackendError) {
    let (code, what) = match e {
        BackendError::Rejected { code, sqlstate, message, .. } => {
            (*code, format!("error {code} ({}): {message}", String::from_utf8_lossy(sqlstate)))
        }
        BackendError::Protocol { what, .. } => (0, what.clone()),
        _ => return,
    };
    let repeated = {
        let mut warned = LOGIN_WARNINGS.lock().unwrap_or_else(|p| p.into_inner());
        let warned = warned.get_or_insert_with(Default::default);
        if warned.len() >= 4096 {
            warned.retain(|_, (last, _)| last.elapsed() < LOGIN_WARNING_INTERVAL);
            if warned.len() >= 4096 {
                warned.clear();
            }
        }
        let now = Instant::now();
        match warned.get_mut(&(server.to_string(), user.to_string(), code)) {
            Some((last, since)) if now.duration_since(*last) < LOGIN_WARNING_INTERVAL => {
                *since += 1;
                return;
            }
            Some((last, since)) => {
                *last = now;
                std::mem::take(since)
            }
            None => {
                warned.insert((server.to_string(), user.to_string(), code), (now, 0));
                0
            }
        }
    };
    if repeated > 0 {
        tracing::warn!(server, user, "backend login failed: {what} ({repeated} more times since this was last logged)");
    } else {
        tracing::warn!(server, user, "backend login failed: {what}");
    }
}

async fn connect_inner(p: &ConnectParams<'_>) -> Result<Backend, BackendError> {
    let server = &*p.server.name;
    let lost = |e| BackendError::Lost { server: server.to_string(), source: e };
    let protocol = |what: String| BackendError::Protocol { server: server.to_string(), what };
    let refused = |e| BackendError::Connect { server: server.to_string(), source: e };
    let stream = match crate::config::socket_path(&p.server.hostname) {
        Some(path) => Stream::from_tokio_unix(tokio::net::UnixStream::connect(path).await.map_err(refused)?).map_err(lost)?,
        None => {
            let tcp = TcpStream::connect((p.server.hostname.as_str(), p.server.port)).await.map_err(refused)?;
            Stream::from_tokio(tcp).map_err(lost)?
        }
    };
    let mut conn = Conn::new(stream);
    let (seq, payload) = conn.read_packet(1 << 16).await.map_err(lost)?;
    if payload.first() == Some(&0xFF) {
        return Err(rejected(server, &payload));
    }
    let greeting = handshake::parse_greeting(&payload).map_err(|e| protocol(e.to_string()))?;
    let mut caps = (p.capabilities & passthrough_capabilities() & greeting.capabilities)
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION;
    if greeting.capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) {
        caps |= CapabilityFlags::CLIENT_PLUGIN_AUTH;
    }
    let wanted = p.capabilities & passthrough_capabilities() & !CapabilityFlags::CLIENT_CONNECT_WITH_DB;
    let missing = wanted - greeting.capabilities;
    if missing
        .intersects(CapabilityFlags::CLIENT_DEPRECATE_EOF | CapabilityFlags::CLIENT_MULTI_RESULTS | CapabilityFlags::CLIENT_SESSION_TRACK)
    {
        return Err(protocol(format!("does not support capabilities the client negotiated: {missing:?}")));
    }
    let mut seq = seq.wrapping_add(1);
    // Everything the HandshakeResponse will say is settled before an SSLRequest repeats it.
    let (plugin, reply) = first_reply(&greeting, p.credential, p.server.tls.is_some());
    let mut hello = ClientHello {
        capabilities: caps,
        max_packet: 1 << 30,
        collation: p.collation,
        user: p.username.to_string(),
        auth_response: reply,
        database: p.database.map(str::to_string),
        auth_plugin: Some(plugin.clone()),
        attrs: p.attrs.to_vec(),
        mariadb_caps: p.mariadb_caps & greeting.mariadb_caps & MARIADB_PASSTHROUGH,
    };
    let mut out = Vec::new();
    if let Some(tls) = &p.server.tls {
        if !greeting.capabilities.contains(CapabilityFlags::CLIENT_SSL) {
            return Err(protocol("use_ssl is set but the server does not offer TLS".into()));
        }
        hello.capabilities |= CapabilityFlags::CLIENT_SSL;
        handshake::write_ssl_request(&mut out, &mut seq, &hello);
        conn.write_all(&out).await.map_err(lost)?;
        out.clear();
        let tcp = conn.stream.into_tcp().await.map_err(lost)?;
        let name = rustls::pki_types::ServerName::try_from(p.server.hostname.clone())
            .unwrap_or_else(|_| rustls::pki_types::ServerName::try_from("localhost").expect("static name"));
        let tls_stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| protocol(format!("TLS handshake failed: {e}")))?;
        conn = Conn::new(Stream::ClientTls(Box::new(tls_stream)));
    }
    let is_tls = conn.stream.is_tls();
    handshake::write_client_hello(&mut out, &mut seq, &hello);
    conn.write_all(&out).await.map_err(lost)?;
    let login = AuthLogin { server, username: p.username, credential: p.credential, is_tls };
    let ok = auth_exchange(&mut conn, &login, plugin, greeting.nonce.clone()).await?;
    let status = packet::parse_ok(&ok).map_or(greeting.status, |o| o.status);
    let now = Instant::now();
    let backend = Backend {
        conn,
        server: p.server.clone(),
        thread_id: greeting.connection_id,
        capabilities: hello.capabilities,
        mariadb_caps: hello.mariadb_caps,
        login: Arc::new(Login {
            username: p.username.to_string(),
            credential: p.credential.clone(),
            capabilities: p.capabilities,
            mariadb_caps: p.mariadb_caps,
            collation: p.collation,
            attrs: Vec::new(),
        }),
        state: Arc::new(state::State::new(p.database, p.collation as u16)),
        status,
        last_insert_id: 0,
        login_ok: ok,
        probe_tid: 0,
        pooled: false,
        broken: false,
        needs_reset: false,
        created: now,
        idle_since: now,
        epoch: 0,
        statements: Default::default(),
        runtime: super::RuntimeTag::current(),
        home: super::shard_index(),
        greeting,
    };
    Ok(backend)
}

/// The plugin and reply to open an authentication with: the server's announced plugin when
/// the credential can answer it, else mysql_native_password (the server switches if needed).
fn first_reply(greeting: &ServerGreeting, credential: &Credential, is_tls: bool) -> (String, Vec<u8>) {
    let announced = if greeting.auth_plugin.is_empty() { auth::MYSQL_NATIVE_PASSWORD } else { greeting.auth_plugin.as_str() };
    match auth_reply(announced, credential, &greeting.nonce, is_tls) {
        Some(r) => (announced.to_string(), r),
        None => {
            let native = auth::MYSQL_NATIVE_PASSWORD;
            (native.to_string(), auth_reply(native, credential, &greeting.nonce, is_tls).unwrap_or_default())
        }
    }
}

/// Who is logging in, for the authentication exchange.
struct AuthLogin<'a> {
    server: &'a str,
    username: &'a str,
    credential: &'a Credential,
    is_tls: bool,
}

/// Answers the server's authentication packets (auth switch, caching_sha2 fast path or full
/// authentication) after the first reply was sent; returns the final OK payload.
async fn auth_exchange(conn: &mut Conn, login: &AuthLogin<'_>, mut plugin: String, mut nonce: Vec<u8>) -> Result<Vec<u8>, BackendError> {
    let lost = |e| BackendError::Lost { server: login.server.to_string(), source: e };
    let protocol = |what: String| BackendError::Protocol { server: login.server.to_string(), what };
    let mut out = Vec::new();
    loop {
        let (last, payload) = conn.read_packet(1 << 24).await.map_err(lost)?;
        let mut seq = last.wrapping_add(1);
        out.clear();
        match payload.first() {
            Some(0x00) => return Ok(payload),
            Some(0xFF) => return Err(rejected(login.server, &payload)),
            Some(0xFE) => {
                let (new_plugin, new_nonce) = handshake::parse_auth_switch(&payload).map_err(|e| protocol(e.to_string()))?;
                let reply = auth_reply(&new_plugin, login.credential, &new_nonce, login.is_tls).ok_or_else(|| {
                    protocol(format!(
                        "the account `{}` uses {new_plugin}, which sluice cannot answer with the credentials it has",
                        login.username
                    ))
                })?;
                plugin = new_plugin;
                nonce = new_nonce;
                handshake::write_raw(&mut out, &mut seq, &reply);
            }
            Some(0x01) if plugin == auth::CACHING_SHA2_PASSWORD => match payload.get(1) {
                Some(&auth::SHA2_FAST_AUTH_SUCCESS) => continue,
                Some(&auth::SHA2_PERFORM_FULL_AUTH) => {
                    let Credential::Plain(pw) = login.credential else {
                        return Err(protocol(format!(
                            "caching_sha2_password full authentication for `{}` needs the plain-text password in the config",
                            login.username
                        )));
                    };
                    if login.is_tls {
                        handshake::write_raw(&mut out, &mut seq, &[pw.as_bytes(), &[0]].concat());
                    } else {
                        handshake::write_raw(&mut out, &mut seq, &[auth::SHA2_REQUEST_PUBLIC_KEY]);
                        conn.write_all(&out).await.map_err(lost)?;
                        out.clear();
                        let (last, key) = conn.read_packet(1 << 16).await.map_err(lost)?;
                        seq = last.wrapping_add(1);
                        let pem = key.get(1..).ok_or_else(|| protocol("empty public key".into()))?;
                        let mut secret = [pw.as_bytes(), &[0]].concat();
                        auth::xor_with_nonce(&mut secret, &nonce);
                        let ct = rsa_encrypt(pem, &secret).ok_or_else(|| protocol("cannot use the server's RSA public key".into()))?;
                        handshake::write_raw(&mut out, &mut seq, &ct);
                    }
                }
                _ => return Err(protocol("unexpected caching_sha2_password message".into())),
            },
            _ => return Err(protocol(format!("unexpected packet during authentication (plugin {plugin})"))),
        }
        conn.write_all(&out).await.map_err(lost)?;
    }
}

impl Backend {
    /// COM_CHANGE_USER on this connection: the server resets the session and logs the new user
    /// in, exactly as it would for the client directly. Returns the server's OK payload.
    pub async fn change_user(
        &mut self,
        username: &str,
        credential: &Credential,
        database: Option<&str>,
        collation: u16,
        attrs: &[(String, String)],
    ) -> Result<Vec<u8>, BackendError> {
        self.statements.clear();
        let is_tls = self.conn.stream.is_tls();
        let (plugin, reply) = first_reply(&self.greeting, credential, is_tls);
        let cu = handshake::ChangeUser {
            user: username.to_string(),
            auth_response: reply,
            database: database.map(str::to_string),
            collation: Some(collation),
            auth_plugin: Some(plugin.clone()),
            attrs: attrs.to_vec(),
        };
        let mut out = Vec::new();
        handshake::write_change_user(&mut out, &cu, self.capabilities);
        let server = self.server.name.to_string();
        self.conn.write_all(&out).await.map_err(|e| BackendError::Lost { server: server.clone(), source: e })?;
        let login = AuthLogin { server: &server, username, credential, is_tls };
        let r = auth_exchange(&mut self.conn, &login, plugin, self.greeting.nonce.clone()).await;
        if let Err(e) = &r {
            warn_login_failed(&server, username, e);
        }
        r
    }
}

/// The type byte of a column definition (MariaDB's extended metadata, when negotiated, adds a
/// string before the fixed fields).
fn column_type(def: &[u8], mariadb_caps: u32) -> Option<u8> {
    let mut rest = def;
    let strings = if mariadb_caps & MARIADB_CLIENT_EXTENDED_METADATA != 0 { 7 } else { 6 };
    for _ in 0..strings {
        let (_, n) = proto::codec::read_lenenc_str(rest)?;
        rest = rest.get(n..)?;
    }
    // Length of the fixed fields (0x0c), character set (2), column length (4), then the type.
    rest.get(7).copied()
}

const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;

pub(super) fn rejected(server: &str, payload: &[u8]) -> BackendError {
    match packet::parse_err(payload) {
        Ok(e) => BackendError::Rejected { server: server.to_string(), code: e.code, sqlstate: e.sqlstate, message: e.message.into() },
        Err(_) => BackendError::Protocol { server: server.to_string(), what: "malformed error packet".into() },
    }
}

/// RSA-OAEP (SHA-1) encryption with a PEM public key, as MySQL clients do for caching_sha2.
fn rsa_encrypt(pem: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::rsa::{OaepPublicEncryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1};
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::SubjectPublicKeyInfoDer::from_pem_slice(pem).ok()?;
    let key = OaepPublicEncryptingKey::new(PublicEncryptingKey::from_der(der.as_ref()).ok()?).ok()?;
    let mut out = vec![0; key.ciphertext_size()];
    Some(key.encrypt(&OAEP_SHA1_MGF1SHA1, data, &mut out, None).ok()?.to_vec())
}
