//! ② session: owns one client connection for its whole life. After login, the command loop
//! reads a command and sends it down the data path (`statement`: classify → rules → route →
//! checkout → exec), with KILL, COM_CHANGE_USER and unsupported commands answered here.

mod auth;
mod kill;
mod statement;

use crate::exec::{self, ExecError, Outcome, Watermarks};
use crate::pool::{self, Backend, BackendError, Credential};
use crate::registry::SessionHandle;
use crate::server::Shared;
use crate::users::User;
use proto::command::*;
use proto::errors::*;
use proto::response::Reply;
use proto::CapabilityFlags;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::debug;

pub use auth::offered_capabilities;

/// A logged-in client and the backend connections serving it.
struct Session {
    shared: Arc<Shared>,
    id: u32,
    peer: SocketAddr,
    client: crate::net::Conn,
    /// What the client negotiated; its backend connections repeat it.
    negotiated: Negotiated,
    nonce: [u8; 20],
    user: User,
    /// How sluice logs in to backends for this client: (username, credential).
    backend_login: (String, Credential),
    /// The connection serving the current statement.
    backend: Backend,
    /// Connections to other hostgroups this session has used, idle (at most one per hostgroup).
    others: Vec<Backend>,
    /// The default database, as the server accepted it (login, COM_INIT_DB, USE).
    schema: Option<String>,
    origin: statement::Origin,
    rules: statement::RulesState,
    handle: Arc<SessionHandle>,
    /// Scratch space for packets sluice writes itself.
    out: Vec<u8>,
}

/// Serves one client connection until it ends. Never panics on client input; every error ends
/// this session only.
pub async fn run(shared: Arc<Shared>, tcp: tokio::net::TcpStream, peer: SocketAddr) {
    crate::net::tune(&tcp);
    let id = shared.registry.next_id();
    let local = tcp.local_addr().ok();
    if shared.clients.fetch_add(1, std::sync::atomic::Ordering::AcqRel) >= shared.config.proxy.max_connections {
        let mut out = Vec::new();
        proto::packet::write_err(&mut out, &mut 0, ER_CON_COUNT_ERROR, SQLSTATE_CONN_COUNT, "Too many connections");
        let mut conn = crate::net::Conn::new(crate::net::Stream::Tcp(tcp));
        let _ = conn.write_all(&out).await;
    } else {
        match start(&shared, tcp, peer, local, id).await {
            Ok(mut session) => {
                session.command_loop().await;
                session.shared.registry.unregister(id);
                // The client's socket closes first, as on the server: a KILL's issuer is
                // answered only once its target is gone.
                let Session { client, backend, others, handle, .. } = session;
                drop(client);
                handle.mark_closed();
                for b in others {
                    b.quit().await;
                }
                backend.quit().await;
            }
            Err(e) => debug!(id, %peer, "login ended: {e}"),
        }
    }
    shared.clients.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
}

async fn start(
    shared: &Arc<Shared>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    id: u32,
) -> Result<Session, String> {
    let timeout = std::time::Duration::from_millis(shared.config.proxy.client_connect_timeout_ms);
    let login = match tokio::time::timeout(timeout, auth::login(shared, tcp, peer, id)).await {
        Ok(r) => r.map_err(|e| e.to_string())?,
        Err(_) => return Err(format!("no login within {} ms", timeout.as_millis())),
    };
    let auth::Login { mut client, hello, capabilities, user, credential, nonce, mariadb_caps, mut seq } = login;
    let backend_login = user.backend_credential(credential);
    let database = hello.database.clone().or_else(|| user.default_schema.clone());
    let negotiated = Negotiated { capabilities, mariadb_caps, collation: hello.collation, attrs: hello.attrs.clone() };
    let mut out = Vec::new();
    let connected = connect_backend(shared, user.default_hostgroup, &backend_login, database.as_deref(), &negotiated).await;
    match connected {
        Ok((backend, ok)) => {
            // Registered before the client hears OK: from then on, KILL with its id must find it.
            let handle = shared.registry.register(id, &user.name);
            handle.set_backend(&backend.server.name, backend.thread_id);
            proto::handshake::write_raw(&mut out, &mut seq, &ok);
            if let Err(e) = client.write_all(&out).await {
                shared.registry.unregister(id);
                return Err(e.to_string());
            }
            out.clear();
            debug!(id, %peer, user = %user.name, backend = %backend.server.name, thread = backend.thread_id, tls = client.stream.is_tls(), "session started");
            let origin = statement::Origin {
                client_ip: peer.ip().to_string(),
                proxy_addr: local.map(|a| a.ip().to_string()).unwrap_or_default(),
                proxy_port: local.map_or(0, |a| a.port()),
            };
            let rules = statement::RulesState {
                cache: arc_swap::Cache::new(shared.rules.clone()),
                scratch: Default::default(),
                digest_text: Vec::new(),
            };
            let schema = backend.schema.clone();
            Ok(Session {
                shared: shared.clone(),
                id,
                peer,
                client,
                negotiated,
                nonce,
                user,
                backend_login,
                backend,
                others: Vec::new(),
                schema,
                origin,
                rules,
                handle,
                out,
            })
        }
        Err(e) => {
            write_backend_error(&mut out, &mut seq, &e);
            let _ = client.write_all(&out).await;
            Err(e.to_string())
        }
    }
}

/// What a client negotiated at login (or last COM_CHANGE_USER).
#[derive(Clone)]
struct Negotiated {
    capabilities: CapabilityFlags,
    mariadb_caps: u32,
    collation: u8,
    attrs: Vec<(String, String)>,
}

/// Picks a server of `hostgroup` and logs in to it as the client's backend login.
async fn connect_backend(
    shared: &Shared,
    hostgroup: u32,
    login: &(String, Credential),
    database: Option<&str>,
    client: &Negotiated,
) -> Result<(Backend, Vec<u8>), BackendError> {
    let server = shared.hostgroups.pick(hostgroup)?;
    let params = pool::ConnectParams {
        server,
        username: &login.0,
        credential: &login.1,
        database,
        collation: client.collation,
        capabilities: client.capabilities - CapabilityFlags::CLIENT_SSL,
        attrs: &client.attrs,
        mariadb_caps: client.mariadb_caps,
        timeout: shared.config.connect_timeout(),
    };
    let (backend, ok) = pool::connect(&params).await?;
    shared.learn_profile(&backend.greeting);
    Ok((backend, ok))
}

/// A backend error as the client sees it: the backend's own ERR when it refused, otherwise
/// an error naming the server.
fn write_backend_error(out: &mut Vec<u8>, seq: &mut u8, e: &BackendError) {
    match e {
        BackendError::Rejected { code, sqlstate, message, .. } => proto::packet::write_err(out, seq, *code, sqlstate, message),
        BackendError::Unavailable(_) => proto::packet::write_err(out, seq, ER_PROXY_NO_BACKEND, SQLSTATE_GENERAL, &e.to_string()),
        _ => proto::packet::write_err(out, seq, CR_CONN_HOST_ERROR, SQLSTATE_GENERAL, &e.to_string()),
    }
}

/// How the reply to a command is shaped, or how sluice handles the command itself.
enum Route {
    Forward(Option<Reply>),
    Quit,
    Kill,
    ChangeUser,
    Unsupported,
}

/// Commands on a prepared statement (its id lives on one backend connection).
fn is_statement_command(cmd: u8) -> bool {
    matches!(
        cmd,
        COM_STMT_PREPARE
            | COM_STMT_EXECUTE
            | COM_STMT_BULK_EXECUTE
            | COM_STMT_FETCH
            | COM_STMT_CLOSE
            | COM_STMT_RESET
            | COM_STMT_SEND_LONG_DATA
    )
}

fn route_command(cmd: u8, payload: &[u8]) -> Route {
    match cmd {
        COM_QUERY | COM_PROCESS_INFO => Route::Forward(Some(Reply::Query)),
        COM_STMT_EXECUTE => {
            let cursor = payload.get(5).is_some_and(|f| f & CURSOR_TYPE_READ_ONLY != 0);
            Route::Forward(Some(Reply::Execute { cursor }))
        }
        COM_STMT_BULK_EXECUTE => Route::Forward(Some(Reply::Execute { cursor: false })),
        COM_STMT_PREPARE => Route::Forward(Some(Reply::Prepare)),
        COM_STMT_FETCH => Route::Forward(Some(Reply::Fetch)),
        COM_FIELD_LIST => Route::Forward(Some(Reply::FieldList)),
        COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA => Route::Forward(None),
        COM_PING | COM_INIT_DB | COM_STATISTICS | COM_STMT_RESET | COM_SET_OPTION | COM_RESET_CONNECTION | COM_DEBUG | COM_REFRESH
        | COM_SHUTDOWN | COM_CREATE_DB | COM_DROP_DB => Route::Forward(Some(Reply::Single)),
        COM_QUIT => Route::Quit,
        COM_PROCESS_KILL => Route::Kill,
        COM_CHANGE_USER => Route::ChangeUser,
        _ => Route::Unsupported,
    }
}

impl Session {
    fn max_packet(&self) -> usize {
        self.shared.config.proxy.max_allowed_packet
    }

    fn watermarks(&self) -> Watermarks {
        Watermarks { high: self.shared.config.proxy.buffer_high_watermark, low: self.shared.config.proxy.buffer_low_watermark }
    }

    async fn command_loop(&mut self) {
        loop {
            // Shutdown and KILL both arrive through this session's own handle (no shared waiter
            // list on the query path); the flag catches a shutdown that began during login.
            if self.shared.closing() {
                return;
            }
            let read = tokio::select! {
                biased;
                _ = self.handle.killed() => return,
                r = self.client.read_frame(self.max_packet()) => r,
                _ = self.backend.conn.stream.tcp().readable() => {
                    if self.backend_spoke_while_idle().await {
                        continue;
                    }
                    return;
                }
            };
            let frame = match read {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        let msg = "Got a packet bigger than 'max_allowed_packet' bytes";
                        self.reply_err(1, ER_NET_PACKET_TOO_LARGE, b"08S01", msg).await;
                    }
                    return;
                }
            };
            // The first chunk's payload is enough to decide; split packets (≥ 16 MiB) only
            // ever continue a COM_QUERY or COM_STMT_* payload.
            let first_len = proto::frame::header(&self.client.rbuf).map_or(0, |(l, _)| l);
            let payload = &self.client.rbuf[4..4 + first_len];
            let Some(&cmd) = payload.first() else {
                self.client.consume(frame.wire_len);
                self.reply_err(1, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Unknown command").await;
                continue;
            };
            let seq = frame.last_seq.wrapping_add(1);
            if cmd == COM_QUERY {
                if !self.query(frame, seq).await {
                    return;
                }
                continue;
            }
            let rewritten = match cmd {
                COM_STMT_PREPARE if frame.chunks == 1 => sql::classify::rewrite_connection_id(&payload[1..], self.id),
                _ => None,
            };
            let init_db = (cmd == COM_INIT_DB).then(|| String::from_utf8_lossy(&payload[1..]).into_owned());
            match route_command(cmd, payload) {
                Route::Forward(reply) => {
                    if is_statement_command(cmd) {
                        if cmd == COM_STMT_PREPARE && self.rules.active() {
                            let text = frame.payload(&self.client.rbuf).get(1..).unwrap_or_default().to_vec();
                            if let Some(msg) = self.blocked(&text) {
                                self.client.consume(frame.wire_len);
                                self.reply_err(seq, ER_NOT_ALLOWED_COMMAND, SQLSTATE_NOT_SUPPORTED, &msg).await;
                                continue;
                            }
                        }
                        // Statement ids belong to one backend connection: the default hostgroup's.
                        if let Err(e) = self.checkout(self.user.default_hostgroup, 1).await {
                            self.client.consume(frame.wire_len);
                            if reply.is_some() {
                                self.reply_backend_error(seq, &e).await;
                            }
                            continue;
                        }
                    }
                    let request = match rewritten {
                        Some(sql) => {
                            self.client.consume(frame.wire_len);
                            let mut buf = Vec::with_capacity(sql.len() + 5);
                            let packet = proto::frame::PacketBuilder::begin(&mut buf);
                            buf.push(cmd);
                            buf.extend_from_slice(&sql);
                            packet.finish(&mut buf, &mut frame.first_seq.clone());
                            bytes::Bytes::from(buf)
                        }
                        None => self.client.rbuf.split_to(frame.wire_len).freeze(),
                    };
                    match self.forward(&request, reply).await {
                        None => return,
                        Some(o) if !o.error => {
                            if let Some(db) = init_db {
                                self.backend.schema = Some(db.clone());
                                self.schema = Some(db);
                            }
                            if cmd == COM_RESET_CONNECTION {
                                // The client asked for a clean session: connections to other
                                // hostgroups carry the old state, so they go.
                                for b in self.others.drain(..) {
                                    b.quit().await;
                                }
                            }
                        }
                        Some(_) => {}
                    }
                }
                Route::Quit => return,
                Route::Kill => {
                    let id = payload.get(1..5).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    self.client.consume(frame.wire_len);
                    match id {
                        Some(id) => {
                            if !self.kill(id as u64, sql::classify::KillScope::Connection, None, seq).await {
                                return;
                            }
                        }
                        None => self.reply_err(seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Malformed COM_PROCESS_KILL").await,
                    }
                }
                Route::ChangeUser => {
                    let payload = frame.payload(&self.client.rbuf).into_owned();
                    self.client.consume(frame.wire_len);
                    if !self.change_user(&payload, seq).await {
                        return;
                    }
                }
                Route::Unsupported => {
                    self.client.consume(frame.wire_len);
                    debug!(id = self.id, command = proto::command::name(cmd), "unsupported command");
                    self.reply_err(seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Unknown command").await;
                }
            }
        }
    }

    /// The backend sent something between commands: normally it is closing the connection
    /// (wait_timeout, KILL from elsewhere, shutdown), perhaps after an error packet (MySQL 8's
    /// ER_CLIENT_INTERACTION_TIMEOUT). Pass on what it said and report whether the session
    /// goes on, so the client sees the server's own behaviour.
    async fn backend_spoke_while_idle(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        match self.backend.conn.stream.try_read_now(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Ok(0) | Err(_) => {
                debug!(id = self.id, backend = %self.backend.server.name, "backend closed an idle session");
                false
            }
            Ok(n) => {
                debug!(id = self.id, bytes = n, "unsolicited bytes from the backend; passing them on");
                let _ = self.client.write_all(&buf[..n]).await;
                true
            }
        }
    }

    /// Forwards one request to the current backend and streams its reply. `None` when the
    /// session must end.
    async fn forward(&mut self, request: &[u8], reply: Option<Reply>) -> Option<Outcome> {
        let format = self.backend.format();
        let wm = self.watermarks();
        let max = self.max_packet();
        match exec::forward(&mut self.client, &mut self.backend.conn, request, reply, format, wm, max).await {
            Ok(o) => {
                if reply.is_some() && !o.error {
                    self.backend.status = o.status;
                }
                Some(o)
            }
            Err(e @ (ExecError::BackendLost { .. } | ExecError::BackendProtocol(_))) if !self.handle.is_killed() => {
                let reply_seq = match e {
                    ExecError::BackendLost { reply_seq } => reply_seq,
                    _ => None,
                };
                debug!(id = self.id, backend = %self.backend.server.name, "backend lost during a reply");
                if let Some(seq) = reply_seq {
                    let msg = format!("Lost connection to backend server '{}' during query", self.backend.server.name);
                    self.reply_err(seq, CR_SERVER_LOST, SQLSTATE_GENERAL, &msg).await;
                }
                None
            }
            Err(e) => {
                debug!(id = self.id, "session ends: {e}");
                None
            }
        }
    }

    async fn reply_err(&mut self, mut seq: u8, code: u16, sqlstate: &[u8; 5], msg: &str) {
        self.out.clear();
        proto::packet::write_err(&mut self.out, &mut seq, code, sqlstate, msg);
        let _ = self.client.write_all(&self.out).await;
    }

    /// A backend failure as the client sees it (`write_backend_error`). False when the client
    /// could not be told.
    async fn reply_backend_error(&mut self, mut seq: u8, e: &BackendError) -> bool {
        self.out.clear();
        write_backend_error(&mut self.out, &mut seq, e);
        self.client.write_all(&self.out).await.is_ok()
    }

    /// An OK of sluice's own (KILL, a rule's OK_msg), with the backend's status flags.
    async fn reply_ok(&mut self, mut seq: u8, message: &str) -> bool {
        self.out.clear();
        proto::packet::write_ok_message(&mut self.out, &mut seq, self.backend.status, message.as_bytes());
        self.client.write_all(&self.out).await.is_ok()
    }

    /// COM_CHANGE_USER: verify the new login, open a backend connection for it, replace the old
    /// one (the new session starts clean, as on the server). False when the session must end.
    async fn change_user(&mut self, payload: &[u8], mut seq: u8) -> bool {
        let cu = match proto::handshake::parse_change_user(payload, self.negotiated.capabilities) {
            Ok(cu) => cu,
            Err(_) => {
                self.reply_err(seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Malformed COM_CHANGE_USER").await;
                return true;
            }
        };
        let plugin = cu.auth_plugin.clone().unwrap_or_else(|| proto::auth::MYSQL_NATIVE_PASSWORD.into());
        let attempt = auth::Attempt {
            user: &cu.user,
            plugin: &plugin,
            reply: &cu.auth_response,
            nonce: &self.nonce,
            can_switch: self.negotiated.capabilities.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH),
            peer: self.peer,
        };
        let authenticated = auth::authenticate(&self.shared, &mut self.client, &mut seq, attempt).await;
        // Whatever the outcome, the server resets the session: connections to other hostgroups
        // hold the old one, so they go.
        for b in self.others.drain(..) {
            b.quit().await;
        }
        let (user, credential) = match authenticated {
            Ok(Ok(v)) => v,
            Ok(Err(denied)) => {
                // The server resets the session even for a failed COM_CHANGE_USER; let it fail
                // there too (with a reply no password can produce) so the session matches.
                let collation = cu.collation.unwrap_or(self.negotiated.collation as u16);
                let impossible = Credential::Stage1([0; 20]);
                let attrs = self.negotiated.attrs.clone();
                match self.backend.change_user(&cu.user, &impossible, cu.database.as_deref(), collation, &attrs).await {
                    Err(BackendError::Rejected { .. }) => {
                        self.reply_err(seq, ER_ACCESS_DENIED_ERROR, SQLSTATE_ACCESS_DENIED, &denied).await;
                        return true;
                    }
                    // Anything else (even an OK, which cannot happen) ends the session.
                    _ => {
                        self.reply_err(seq, ER_ACCESS_DENIED_ERROR, SQLSTATE_ACCESS_DENIED, &denied).await;
                        return false;
                    }
                }
            }
            Err(_) => return false,
        };
        let login = user.backend_credential(credential);
        let collation = cu.collation.unwrap_or(self.negotiated.collation as u16);
        let negotiated = Negotiated {
            collation: collation as u8,
            attrs: if cu.attrs.is_empty() { self.negotiated.attrs.clone() } else { cu.attrs.clone() },
            ..self.negotiated.clone()
        };
        let database = cu.database.clone().or_else(|| user.default_schema.clone());
        if user.default_hostgroup != self.backend.server.hostgroup {
            // The new user lives elsewhere: a fresh connection there, the old one closed.
            let connected = connect_backend(&self.shared, user.default_hostgroup, &login, database.as_deref(), &negotiated).await;
            return match connected {
                Ok((backend, ok)) => {
                    let old = std::mem::replace(&mut self.backend, backend);
                    old.quit().await;
                    self.handle.set_backend(&self.backend.server.name, self.backend.thread_id);
                    self.finish_change_user(user, login, negotiated, &ok, seq).await
                }
                Err(e) => self.reply_backend_error(seq, &e).await,
            };
        }
        // Same backend: a real COM_CHANGE_USER, so the server resets the session its own way.
        match self.backend.change_user(&login.0, &login.1, database.as_deref(), collation, &negotiated.attrs).await {
            Ok(ok) => {
                self.backend.schema = database;
                self.finish_change_user(user, login, negotiated, &ok, seq).await
            }
            Err(BackendError::Rejected { code, sqlstate, message, .. }) => {
                self.reply_err(seq, code, &sqlstate, &message).await;
                true
            }
            Err(e) => {
                let msg = e.to_string();
                self.reply_err(seq, CR_SERVER_LOST, SQLSTATE_GENERAL, &msg).await;
                false
            }
        }
    }

    async fn finish_change_user(
        &mut self,
        user: User,
        login: (String, Credential),
        negotiated: Negotiated,
        ok: &[u8],
        mut seq: u8,
    ) -> bool {
        self.user = user;
        self.backend_login = login;
        self.negotiated = negotiated;
        self.schema = self.backend.schema.clone();
        if let Ok(o) = proto::packet::parse_ok(ok) {
            self.backend.status = o.status;
        }
        self.out.clear();
        proto::handshake::write_raw(&mut self.out, &mut seq, ok);
        self.client.write_all(&self.out).await.is_ok()
    }
}
