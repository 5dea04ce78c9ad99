//! ② session: owns one client connection for its whole life. After login, the command loop
//! reads a command and sends it down the data path (`statement`: classify → rules → route →
//! checkout → exec), with KILL, COM_CHANGE_USER and unsupported commands answered here.
//! Backend connections come from the pool per statement (`multiplex`) unless pinned.

mod auth;
mod cached;
mod causal;
mod kill;
mod multiplex;
mod observe;
mod prepared;
mod prepared_sharded;
mod processlist_table;
mod replay;
mod sharded;
mod split;
mod statement;
mod status;
mod xa;

use crate::datapath::DataPath;
use crate::exec::{self, ExecError, Outcome};
use crate::pool::{self, state, Backend, BackendError, Credential};
use crate::registry::SessionHandle;
use crate::stats::Counter;
use crate::users::User;
use multiplex::Held;
use proto::command::*;
use proto::errors::*;
use proto::response::Reply;
use proto::CapabilityFlags;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

pub use auth::{login, offered_capabilities, Directory, Login};
pub use multiplex::pin_counts;

/// A logged-in client and the backend connections serving it.
struct Session {
    data: Arc<DataPath>,
    id: u32,
    peer: SocketAddr,
    client: crate::net::Conn,
    /// What the client negotiated; its backend connections repeat it.
    negotiated: Negotiated,
    nonce: [u8; 20],
    user: User,
    /// How sluice logs in to backends for this client (the pool key).
    login: Arc<pool::Login>,
    /// The privilege epoch it logged in under: only connections opened since serve it.
    generation: pool::Generation,
    /// The session's replayable state: schema, character set, variables.
    state: Arc<state::State>,
    /// Backend connections the session keeps (pinned, or all when multiplexing is off); at
    /// most one per hostgroup. Empty between statements when multiplexing.
    held: Vec<Held>,
    /// The last write the session committed on a writer with causal reads (`causal`).
    watermark: Option<causal::Watermark>,
    /// The transaction on a writer, for replay after its connection is lost (`replay`).
    journal: replay::Journal,
    /// LAST_INSERT_ID() as the session's own statements set it.
    last_insert_id: u64,
    /// Prepared statements, by sluice's statement id.
    statements: prepared::ClientStatements,
    /// Status flags of the last reply, for sluice's own OK packets.
    status: u16,
    origin: statement::Origin,
    /// The config snapshot in force, re-read only when a reload swapped it (one atomic load
    /// per command); `snap` is what the current command runs under.
    live: arc_swap::Cache<Arc<arc_swap::ArcSwap<crate::datapath::Snapshot>>, Arc<crate::datapath::Snapshot>>,
    snap: Arc<crate::datapath::Snapshot>,
    /// Bounds of every exchange, from `snap`.
    limits: exec::Limits,
    plan_scratch: crate::plan::PlanScratch,
    handle: Arc<SessionHandle>,
    /// Scratch space for packets sluice writes itself.
    out: Vec<u8>,
    /// The rest of the current request when it was too large to hold (`max_buffered_packet`),
    /// still on the client socket: relayed by the forward, else read and dropped before any
    /// answer (which needs its last sequence id).
    tail: Option<proto::frame::Tail>,
    /// The plan asks exec to watch that rest (`Plan::watch_tail`); reset by each forward.
    watch_tail: bool,
    /// When the current command arrived, while statements are timed (`[probe] enabled`).
    received: Option<std::time::Instant>,
    /// The client's stream is out of step (a request could not be read to its end): the
    /// session ends.
    client_broken: bool,
    /// The idle-client timer (wait_timeout), armed once and moved only when it fires early: each
    /// wait for a command stamps `last_request` and leaves the timer wheel alone.
    idle: IdleTimer,
    /// When the current command's statement was observed to end (`observed`), taken by the
    /// next wait for a command as its idle start and read by `settle`: the clock is read once
    /// at a statement's end, not again for each.
    ended: EndStamp,
    /// Counts this session in `clients` until it ends.
    _counted: ClientCount,
    /// Counts it among its user's sessions (`mysql_users.max_connections`).
    user_slot: Option<crate::limits::UserSlot>,
    /// Failed COM_CHANGE_USERs on this connection (the server refuses a fourth).
    failed_change_user: u8,
    /// The tables the session's writes hold for the result cache until their transaction
    /// ends (`cached`).
    write_marks: crate::cache::WriteMarks,
    /// The transaction's branches on shards (`xa`).
    xa: Option<xa::Txn>,
    /// The open transaction wrote (or, read with no shard map, may have written) on the default
    /// side: it cannot take branches on shards.
    local_writes: bool,
}

/// One logged-in client in `DataPath::clients`; released on drop.
struct ClientCount(Arc<DataPath>);

impl ClientCount {
    /// Counts a client that just logged in, unless `max_connections` are logged in already.
    fn admit(data: &Arc<DataPath>) -> Option<ClientCount> {
        let max = data.snapshot().config.proxy.max_connections;
        if data.clients.fetch_add(1, std::sync::atomic::Ordering::AcqRel) >= max {
            data.clients.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            return None;
        }
        Some(ClientCount(data.clone()))
    }
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Commands whose large packets are relayed as they arrive (planned from their head); others
/// are read whole, up to `MAX_WHOLE_PACKET`.
fn streams(cmd: u8) -> bool {
    matches!(cmd, COM_QUERY | COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE | COM_STMT_SEND_LONG_DATA)
}

/// The largest packet of a command sluice must read whole (COM_STMT_PREPARE, COM_CHANGE_USER…).
const MAX_WHOLE_PACKET: usize = proto::frame::MAX_CHUNK - 1;

/// How long a new connection may wait for a handshake slot (`max_handshakes`,
/// `max_handshakes_per_host`) before it is refused with 1040.
const HANDSHAKE_SLOT_WAIT: Duration = Duration::from_secs(2);

/// Serves one client connection until it ends. Never panics on client input; every error ends
/// this session only.
pub async fn run(data: Arc<DataPath>, stream: crate::net::Stream, peer: SocketAddr) {
    let local = stream.local_addr().ok();
    let (max_handshakes, per_host) = {
        let proxy = &data.snapshot().config.proxy;
        (proxy.max_handshakes, proxy.max_handshakes_per_host)
    };
    // Full of handshakes, in all or from this address: refused before the greeting, as the
    // server refuses a connection it cannot even take. A full max_connections is told after
    // the login (`start`), inside TLS, as the server tells it: a TLS client cannot trust an
    // error sent in the clear (libmariadb: "Received error packet before completion of TLS
    // handshake").
    let slot = data
        .handshakes
        .begin_within(peer.ip(), max_handshakes, per_host, HANDSHAKE_SLOT_WAIT)
        .await
        .inspect_err(|why| debug!(%peer, "handshake refused: {why:?}"));
    let Ok(slot) = slot else {
        data.stats.add(Counter::AccessDeniedMaxConnections, 1);
        let mut conn = crate::net::Conn::new(stream);
        let _ = conn.write_all(&too_many_before_greeting()).await;
        return;
    };
    let id = data.registry.next_id();
    match start(&data, stream, peer, local, id, slot).await {
        Ok(mut session) => {
            data.stats.add(Counter::ClientConnectionsCreated, 1);
            session.command_loop().await;
            session.data.registry.unregister(id);
            // The client's socket closes first, as on the server: a KILL's issuer is
            // answered only once its target is gone.
            session.release_all();
            let handle = session.handle.clone();
            drop(session);
            handle.mark_closed();
        }
        Err(e) => {
            data.stats.add(Counter::ClientConnectionsAborted, 1);
            debug!(id, %peer, "login ended: {e}");
        }
    }
}

/// ER_CON_COUNT_ERROR in place of the greeting, as MariaDB sends it: no SQLSTATE, as nothing
/// is negotiated yet (clients show HY000).
fn too_many_before_greeting() -> Vec<u8> {
    const MESSAGE: &[u8] = b"Too many connections";
    let mut out = Vec::with_capacity(7 + MESSAGE.len());
    out.extend_from_slice(&(3 + MESSAGE.len() as u32).to_le_bytes()[..3]);
    out.push(0);
    out.push(0xFF);
    out.extend_from_slice(&ER_CON_COUNT_ERROR.to_le_bytes());
    out.extend_from_slice(MESSAGE);
    out
}

async fn start(
    data: &Arc<DataPath>,
    stream: crate::net::Stream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    id: u32,
    handshake: crate::listener::HandshakeSlot<'_>,
) -> Result<Session, String> {
    let timeout = std::time::Duration::from_millis(data.snapshot().config.proxy.client_connect_timeout_ms);
    let login = match tokio::time::timeout(timeout, auth::login(data, stream, peer, id, auth::Directory::Clients)).await {
        Ok(r) => r.map_err(|e| e.to_string())?,
        Err(_) => return Err(format!("no login within {} ms", timeout.as_millis())),
    };
    drop(handshake);
    let auth::Login { mut client, hello, capabilities, user, credential, nonce, mariadb_caps, mut seq } = login;
    // Logged in: from now on the client counts toward max_connections.
    let Some(counted) = ClientCount::admit(data) else {
        data.stats.add(Counter::AccessDeniedMaxConnections, 1);
        let mut out = Vec::new();
        proto::packet::write_err(&mut out, &mut seq, ER_CON_COUNT_ERROR, SQLSTATE_CONN_COUNT, "Too many connections");
        let _ = client.write_all(&out).await;
        return Err("max_connections reached".into());
    };
    let user_slot = match admit_user(data, &user) {
        Ok(slot) => slot,
        Err(message) => {
            let mut out = Vec::new();
            proto::packet::write_err(&mut out, &mut seq, ER_TOO_MANY_USER_CONNECTIONS, SQLSTATE_NOT_SUPPORTED, &message);
            let _ = client.write_all(&out).await;
            return Err(message);
        }
    };
    let database = hello.database.clone().or_else(|| user.default_schema.clone());
    let negotiated = Negotiated { capabilities, mariadb_caps, collation: hello.collation, attrs: hello.attrs.clone() };
    let origin = statement::Origin {
        client_ip: peer.ip().to_string(),
        proxy_addr: local.map(|a| a.ip().to_string()).unwrap_or_default(),
        proxy_port: local.map_or(0, |a| a.port()),
    };
    // Registered before the client hears OK: from then on, KILL with its id must find it.
    let handle = data.registry.register(id, &user.name, peer);
    let snap = data.live.load_full();
    let login = backend_login(&user, credential, &negotiated);
    let generation = snap.hostgroups.generations().enter(&login.username);
    let mut session = Session {
        data: data.clone(),
        id,
        peer,
        login,
        generation,
        state: multiplex::initial_state(database.as_deref(), negotiated.collation),
        held: Vec::new(),
        xa: None,
        local_writes: false,
        watermark: None,
        journal: Default::default(),
        last_insert_id: 0,
        statements: prepared::ClientStatements::new(data.statements.clone()),
        status: proto::StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits(),
        client,
        negotiated,
        nonce,
        user,
        origin,
        live: arc_swap::Cache::new(data.live.clone()),
        snap,
        limits: exec::Limits::from_config(
            &data.snapshot().config.proxy,
            data.backend_max_packet.load(std::sync::atomic::Ordering::Relaxed),
        ),
        plan_scratch: Default::default(),
        handle,
        out: Vec::new(),
        tail: None,
        watch_tail: false,
        received: None,
        client_broken: false,
        idle: IdleTimer::default(),
        ended: Default::default(),
        _counted: counted,
        user_slot,
        failed_change_user: 0,
        write_marks: crate::cache::WriteMarks::new(data.cache.generations.clone()),
    };
    // A connection in the user's default hostgroup, in the requested schema, proves the login
    // and the schema to the backend before the client hears OK (waiting for a writer, as a
    // statement does, while a replication pair has none).
    match session.acquire_unrouted(0).await {
        Ok(mut held) => {
            if session.snap.config.proxy.max_allowed_packet.is_none() {
                session.learn_max_packet(&mut held.backend).await;
            }
            session.status = held.backend.status;
            debug!(id, %peer, user = %session.user.name, backend = %held.backend.server.name, thread = held.backend.thread_id, tls = session.client.stream.is_tls(), "session started");
            // The server's own login OK, naming this session's schema: its session-state
            // part tells clients (libmysqlclient) which character set they got.
            let ok = proto::packet::ok_with_schema(&held.backend.login_ok, session.state.schema.as_deref());
            session.settle(held);
            session.out.clear();
            match ok {
                Some(ok) if session.negotiated.capabilities.contains(CapabilityFlags::CLIENT_SESSION_TRACK) => {
                    proto::handshake::write_raw(&mut session.out, &mut seq, &ok)
                }
                _ => proto::packet::write_ok_message(&mut session.out, &mut seq, session.status, b""),
            }
            if let Err(e) = session.client.write_all(&session.out).await {
                data.registry.unregister(id);
                session.release_all();
                return Err(e.to_string());
            }
            Ok(session)
        }
        Err(e) => {
            data.registry.unregister(id);
            session.out.clear();
            write_backend_error(&mut session.out, &mut seq, &e);
            let _ = session.client.write_all(&session.out).await;
            Err(e.to_string())
        }
    }
}

/// Counts a session of `user` against its `mysql_users.max_connections` (the backend's own
/// accounts have none here); the error message when it has that many already.
fn admit_user(data: &DataPath, user: &User) -> Result<Option<crate::limits::UserSlot>, String> {
    let Some(max) = user.max_connections else { return Ok(None) };
    match data.user_connections.admit(&user.name, max) {
        Some(slot) => Ok(Some(slot)),
        None => {
            data.stats.add(Counter::AccessDeniedMaxUserConnections, 1);
            debug!(user = %user.name, max, "login refused: the user's max_connections are in use");
            Err(crate::limits::too_many_message(&user.name))
        }
    }
}

/// The pool key for a client's backend connections.
fn backend_login(user: &User, credential: Credential, client: &Negotiated) -> Arc<pool::Login> {
    let (username, credential) = user.backend_credential(credential);
    Arc::new(pool::Login {
        username,
        credential,
        capabilities: pool::Login::key_capabilities(client.capabilities),
        mariadb_caps: client.mariadb_caps,
        collation: client.collation,
        attrs: client.attrs.clone(),
    })
}

/// What a client negotiated at login (or last COM_CHANGE_USER).
#[derive(Clone)]
struct Negotiated {
    capabilities: CapabilityFlags,
    mariadb_caps: u32,
    collation: u8,
    attrs: Vec<(String, String)>,
}

/// A backend error as the client sees it: the backend's own ERR (its bytes) when it refused,
/// otherwise an error naming the server.
fn write_backend_error(out: &mut Vec<u8>, seq: &mut u8, e: &BackendError) {
    let (code, sqlstate) = e.client_error();
    match e {
        BackendError::Rejected { message, .. } => proto::packet::write_err_bytes(out, seq, code, &sqlstate, message.as_bytes()),
        _ => proto::packet::write_err(out, seq, code, &sqlstate, &e.to_string()),
    }
}

/// The error code the client sees for `e`.
fn backend_error_code(e: &BackendError) -> u16 {
    e.client_error().0
}

/// How a forwarded exchange ended (`Session::exchange`).
enum Forwarded {
    Done(Outcome),
    /// The backend connection was lost before any of the reply came; nothing was written to
    /// the client. `seq` is the sequence id the reply starts with.
    LostBeforeReply {
        seq: u8,
    },
    /// The session must end (the client was told what it could be told).
    Ended,
}

/// The error for a backend connection lost during a statement: 1927, as a direct client
/// sees a lost connection (see `BackendError::client_error`).
fn write_lost(out: &mut Vec<u8>, mut seq: u8, server: &str) {
    let msg = format!("Lost connection to backend server '{server}' during query");
    proto::packet::write_err(out, &mut seq, ER_CONNECTION_KILLED, SQLSTATE_CONNECTION_KILLED, &msg);
}

/// Whether the session goes on after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
enum Flow {
    Continue,
    /// The session ends (the client left, was killed, or could not be answered).
    End,
}

impl Flow {
    /// Continue when the client could be written to, else end.
    fn written(ok: bool) -> Flow {
        if ok {
            Flow::Continue
        } else {
            Flow::End
        }
    }
}

/// How the reply to a command is shaped, or how sluice handles the command itself.
enum Route {
    Forward(Reply),
    /// COM_STMT_*: sluice's statement ids (`prepared`).
    Statement,
    Quit,
    Kill,
    /// SHOW PROCESSLIST by command: answered from sluice's sessions (`kill`).
    ProcessInfo,
    ChangeUser,
    Unsupported,
}

fn route_command(cmd: u8) -> Route {
    match cmd {
        COM_QUERY => Route::Forward(Reply::Query),
        COM_PROCESS_INFO => Route::ProcessInfo,
        COM_STMT_PREPARE
        | COM_STMT_EXECUTE
        | COM_STMT_BULK_EXECUTE
        | COM_STMT_FETCH
        | COM_STMT_CLOSE
        | COM_STMT_RESET
        | COM_STMT_SEND_LONG_DATA => Route::Statement,
        COM_FIELD_LIST => Route::Forward(Reply::FieldList),
        COM_PING | COM_INIT_DB | COM_STATISTICS | COM_SET_OPTION | COM_RESET_CONNECTION | COM_DEBUG | COM_REFRESH | COM_SHUTDOWN
        | COM_CREATE_DB | COM_DROP_DB => Route::Forward(Reply::Single),
        COM_QUIT => Route::Quit,
        COM_PROCESS_KILL => Route::Kill,
        COM_CHANGE_USER => Route::ChangeUser,
        _ => Route::Unsupported,
    }
}

impl Session {
    /// Where commands that are not routed statements go (`route::default_target`): COM_PING,
    /// COM_INIT_DB, prepared statements, the login's first connection.
    fn unrouted_hostgroup(&self) -> u32 {
        crate::route::default_target(self.user.default_hostgroup).hostgroup()
    }

    /// In a transaction, or with autocommit off (the next statement may begin one), as the
    /// last reply's status flags said: the read/write split keeps such a session on the writer.
    fn may_be_in_transaction(&self) -> bool {
        self.status & proto::StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0
            || self.status & proto::StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits() == 0
            || self.xa.is_some()
    }

    fn max_packet(&self) -> usize {
        self.limits.max_packet
    }

    /// `[proxy] max_allowed_packet` defaults to the backend's own: read once, on the first
    /// login's connection, so sluice refuses a packet where the server would.
    async fn learn_max_packet(&mut self, backend: &mut Backend) {
        use std::sync::atomic::Ordering;
        if self.data.backend_max_packet.load(Ordering::Relaxed) != 0 {
            return;
        }
        let value = match backend.query("SELECT @@max_allowed_packet").await {
            Ok(rows) => rows.first().and_then(|r| r.first()).and_then(|v| v.as_deref()).and_then(|v| v.parse::<usize>().ok()),
            Err(e) => {
                backend.note_failure(&e);
                None
            }
        };
        match value {
            Some(n) if n > 0 => {
                debug!(max_allowed_packet = n, server = %backend.server.name, "learned the backend's max_allowed_packet");
                self.data.backend_max_packet.store(n, Ordering::Relaxed);
                self.limits = exec::Limits::from_config(&self.snap.config.proxy, n);
            }
            _ => debug!(server = %backend.server.name, "could not read the backend's max_allowed_packet; keeping 1 GiB"),
        }
    }

    /// Reads and drops what is left of the current request on the client socket (a
    /// relayed request's rest that was not forwarded); `seq` becomes the id an answer to it
    /// carries. On failure the session ends after this answer.
    async fn finish_request(&mut self, seq: u8) -> u8 {
        let Some(tail) = self.tail.take() else { return seq };
        match exec::discard_tail(&mut self.client, tail).await {
            Ok(last) => last.wrapping_add(1),
            Err(e) => {
                debug!(id = self.id, "could not read the rest of a request: {e}");
                self.client_broken = true;
                seq
            }
        }
    }

    async fn command_loop(&mut self) {
        loop {
            // Shutdown and KILL both arrive through this session's own handle (no shared waiter
            // list on the query path); the flag catches a shutdown that began during login.
            if self.data.closing() {
                return;
            }
            // What a handler left of a large request is read (and dropped) before the next one.
            self.finish_request(0).await;
            if self.client_broken {
                return;
            }
            // A wait_timeout the client set is kept here: its server session may be on no
            // connection while it is idle, so the server cannot keep it.
            // Else `[proxy] wait_timeout_ms` (0: none).
            let configured = self.snap.config.proxy.wait_timeout_ms;
            let idle_limit = self
                .state
                .var("wait_timeout")
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .or((configured > 0).then(|| Duration::from_millis(configured)));
            let (max_packet, max_buffered) = (self.max_packet(), self.limits.max_buffered);
            // Idle from now: the previous command has been answered (when it was a statement,
            // since its observed end, a moment ago).
            self.idle.last_request = self.ended.take().unwrap_or_else(Instant::now);
            let read = tokio::select! {
                biased;
                _ = self.handle.killed() => return,
                r = self.client.read_request(max_packet, max_buffered) => r,
                _ = self.idle.expired(idle_limit) => {
                    debug!(id = self.id, "client idle beyond its wait_timeout; closing");
                    self.data.stats.add(Counter::ClientIdleTimeouts, 1);
                    return;
                }
                _ = held_readable(&self.held) => {
                    if self.backend_spoke_while_idle().await == Flow::Continue {
                        continue;
                    }
                    return;
                }
            };
            let (mut frame, tail) = match read {
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
            // The command runs under the config in force when it arrived.
            self.follow_reload();
            self.received = self.snap.config.probe.enabled.then(std::time::Instant::now);
            self.tail = tail;
            if let Some(tail) = tail {
                let cmd = frame.first_chunk(&self.client.rbuf).first().copied().unwrap_or(0);
                if !streams(cmd) {
                    if tail.split() {
                        let msg = format!(
                            "Got a packet bigger than 'max_allowed_packet' bytes (sluice reads {} whole, up to 16 MiB)",
                            proto::command::name(cmd)
                        );
                        self.client.consume(frame.wire_len);
                        self.reply_err(1, ER_NET_PACKET_TOO_LARGE, b"08S01", &msg).await;
                        continue;
                    }
                    // Under 16 MiB: read whole, as it needs to be.
                    self.tail = None;
                    let whole = tokio::select! {
                        biased;
                        _ = self.handle.killed() => return,
                        r = self.client.read_frame(MAX_WHOLE_PACKET.min(self.max_packet())) => r,
                    };
                    frame = match whole {
                        Ok(Some(f)) => f,
                        _ => return,
                    };
                }
            }
            // The first chunk's payload is enough to decide; split packets (≥ 16 MiB) only
            // ever continue a COM_QUERY or COM_STMT_* payload.
            let payload = frame.first_chunk(&self.client.rbuf);
            let Some(&cmd) = payload.first() else {
                self.client.consume(frame.wire_len);
                self.reply_err(1, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Unknown command").await;
                continue;
            };
            let seq = frame.last_seq.wrapping_add(1);
            if cmd == COM_QUERY {
                if self.query(frame, seq).await == Flow::End {
                    return;
                }
                continue;
            }
            if cmd != COM_PING {
                if self.journal.lost.is_some() {
                    // The transaction's connection is gone and only a text statement can be
                    // told so (some commands have no reply): the session ends, as it would
                    // have on a direct connection.
                    debug!(id = self.id, "transaction lost before {}; closing the session", proto::command::name(cmd));
                    return;
                }
                self.journal.refuse("a command other than a text statement ran in it");
            }
            let init_db = (cmd == COM_INIT_DB).then(|| String::from_utf8_lossy(&payload[1..]).into_owned());
            match route_command(cmd) {
                Route::Statement => {
                    if self.statement_command(cmd, frame, seq).await == Flow::End {
                        return;
                    }
                }
                Route::Forward(reply) => {
                    let mut held = match self.acquire_unrouted(1).await {
                        Ok(h) => h,
                        Err(e) => {
                            self.client.consume(frame.wire_len);
                            if self.reply_backend_error(seq, &e).await == Flow::End {
                                return;
                            }
                            continue;
                        }
                    };
                    let request = self.client.rbuf.split_to(frame.wire_len).freeze();
                    if cmd == COM_DROP_DB {
                        self.mark_all_written();
                    }
                    let Some(outcome) = self.forward(&mut held.backend, &request, Some(reply), None).await else { return };
                    if !outcome.error {
                        self.after_command(cmd, init_db, &mut held);
                    }
                    held.pins.follow_status(outcome.status);
                    self.settle(held);
                    self.settle_writes();
                }
                Route::Quit => return,
                Route::ProcessInfo => {
                    self.client.consume(frame.wire_len);
                    if self.process_info(seq).await == Flow::End {
                        return;
                    }
                }
                Route::Kill => {
                    let id = payload.get(1..5).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    self.client.consume(frame.wire_len);
                    match id {
                        Some(id) => {
                            if self.kill(id as u64, sql::classify::KillScope::Connection, None, seq).await == Flow::End {
                                return;
                            }
                        }
                        None => self.reply_err(seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Malformed COM_PROCESS_KILL").await,
                    }
                }
                Route::ChangeUser => {
                    let payload = frame.payload(&self.client.rbuf).into_owned();
                    self.client.consume(frame.wire_len);
                    if self.change_user(&payload, seq).await == Flow::End {
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

    /// What a command other than COM_QUERY did to the session, once the server accepted it.
    fn after_command(&mut self, cmd: u8, init_db: Option<String>, held: &mut Held) {
        match cmd {
            COM_INIT_DB => {
                if let Some(db) = init_db {
                    self.set_schema(&mut held.backend, db);
                }
            }
            COM_RESET_CONNECTION => {
                // A clean session: the connections the session kept carry the old one, and
                // the server closed every prepared statement on this one.
                self.release_all();
                self.statements.clear();
                held.backend.statements.clear();
                self.last_insert_id = 0;
                held.pins = Default::default();
                held.backend.last_insert_id = 0;
                held.backend.state = Arc::new(state::State::new(self.state.schema.as_deref(), held.backend.login.collation as u16));
                self.state = Arc::new(state::State::new(self.state.schema.as_deref(), self.negotiated.collation as u16));
            }
            // Multi-statement support is a property of the server session that no reset
            // clears: this connection stays with the session and is closed after it.
            COM_SET_OPTION => {
                held.pins.untracked = true;
                held.backend.broken = true;
            }
            _ => {}
        }
    }

    /// A backend the session keeps sent something between commands: normally it is closing
    /// the connection (wait_timeout, KILL from elsewhere, shutdown), perhaps after an error
    /// packet (MySQL 8's ER_CLIENT_INTERACTION_TIMEOUT). Pass on what it said and report
    /// whether the session goes on, so the client sees the server's own behaviour.
    async fn backend_spoke_while_idle(&mut self) -> Flow {
        let mut buf = [0u8; 4096];
        let Some(held) = self.held.first_mut() else { return Flow::Continue };
        match held.backend.conn.stream.try_read_now(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Flow::Continue,
            Ok(0) | Err(_) if self.journal.follows(held) => {
                // A followed transaction: replayed on a writer before the next statement if
                // it only read, else the next statement is told it was rolled back.
                debug!(id = self.id, backend = %held.backend.server.name, "backend closed a session's transaction; replay pending");
                let held = self.held.swap_remove(0);
                self.journal.lost = Some(held.backend.server.name.clone());
                self.release(held);
                Flow::Continue
            }
            Ok(0) | Err(_) => {
                debug!(id = self.id, backend = %held.backend.server.name, "backend closed an idle session");
                held.backend.broken = true;
                Flow::End
            }
            // An error packet (the server explaining why it closes): passed on.
            Ok(n) if buf.get(4) == Some(&0xFF) => {
                debug!(id = self.id, bytes = n, "error packet from the backend between commands; passing it on");
                let _ = self.client.write_all(&buf[..n]).await;
                Flow::Continue
            }
            // Anything else would answer the client's next command: the connection is out of
            // step, and what the session kept there cannot be trusted. End it.
            Ok(n) => {
                tracing::warn!(id = self.id, bytes = n, backend = %held.backend.server.name, thread = held.backend.thread_id, "unexpected bytes from a backend between commands; closing the session");
                held.backend.broken = true;
                Flow::End
            }
        }
    }

    /// Forwards one request to `backend` and streams its reply. A KILL QUERY for this session
    /// (or the rule's `timeout`) is carried out by the session itself while the reply is
    /// awaited, and waited for before the connection can serve anyone else; so is the kill of a
    /// statement whose client went away before its reply ended (ProxySQL's
    /// kill_backend_connection_when_disconnect). `None` when the session must end; the backend
    /// connection is then marked broken, so it is never pooled again.
    async fn forward(&mut self, backend: &mut Backend, request: &[u8], reply: Option<Reply>, timeout: Option<Duration>) -> Option<Outcome> {
        match self.exchange(backend, request, reply, timeout, false, exec::Tap::default()).await {
            Forwarded::Done(o) => Some(o),
            Forwarded::LostBeforeReply { .. } | Forwarded::Ended => None,
        }
    }

    /// `forward`, where with `may_retry` a backend lost before any of its reply came is
    /// reported (`LostBeforeReply`) instead of answered, so the caller may run the request
    /// elsewhere or answer the loss itself (`reply_lost`); and the reply is fed to `checksum`.
    async fn exchange(
        &mut self,
        backend: &mut Backend,
        request: &[u8],
        reply: Option<Reply>,
        timeout: Option<Duration>,
        may_retry: bool,
        tap: exec::Tap<'_>,
    ) -> Forwarded {
        let timed = self.received.is_some();
        if timed {
            self.learn_server_thread(backend).await;
        }
        // Counted while it runs: the pool sends new statements to the least busy server.
        let _running = backend.server.run_statement();
        let format = backend.format();
        self.handle.clear_kill_query();
        let timeout = sleep_or_never(timeout);
        tokio::pin!(timeout);
        let tail = self.tail.take();
        let watch_tail = std::mem::take(&mut self.watch_tail);
        let connect_timeout = self.snap.config.connect_timeout();
        let monitor = self.snap.config.monitor.as_ref();
        // The client's own net_write_timeout, when it set one, bounds how long it may stall.
        let stall =
            self.state.var("net_write_timeout").and_then(|v| v.parse::<u64>().ok()).map_or(exec::DEFAULT_STALL, Duration::from_secs);
        let limits = exec::Limits { stall, ..self.limits };
        let mut killer: Option<tokio::task::JoinHandle<()>> = None;
        let result = {
            // Borrowed field by field: nothing is cloned per statement for a KILL that rarely comes.
            let (handle, login, thread) = (&self.handle, &self.login, backend.thread_id);
            let server = &backend.server;
            let exchange = exec::forward(
                &mut self.client,
                &mut backend.conn,
                exec::Request { packets: request, reply, format, tail, watch_tail, timed },
                &limits,
                tap,
            );
            tokio::pin!(exchange);
            loop {
                tokio::select! {
                    biased;
                    r = &mut exchange => break r,
                    hard = handle.kill_query_requested(), if killer.is_none() => {
                        self.data.stats.add(Counter::KilledBackendQueries, 1);
                        // KILL CONNECTION of this session ends its backend connection too.
                        killer = Some(if handle.is_killed() {
                            kill::kill_connection(server, thread, login, monitor, hard.hard, connect_timeout)
                        } else {
                            kill::kill_query(server, thread, login, monitor, hard, connect_timeout)
                        });
                    }
                    _ = &mut timeout, if killer.is_none() => {
                        self.data.stats.add(Counter::KilledBackendQueries, 1);
                        debug!(id = handle.id, thread, "query rule timeout reached: KILL QUERY");
                        killer = Some(kill::kill_query(server, thread, login, monitor, None, connect_timeout));
                    }
                }
            }
        };
        if let (Err(ExecError::ClientLost { running: true }), None) = (&result, &killer) {
            // Nobody waits for this statement's reply any more: stop it on the server, which
            // would run it to its end otherwise.
            self.data.stats.add(Counter::KilledBackendQueries, 1);
            debug!(id = self.id, thread = backend.thread_id, "client gone during its statement: KILL QUERY");
            killer = Some(kill::kill_query(&backend.server, backend.thread_id, &self.login, monitor, None, connect_timeout));
        }
        if let Some(k) = killer {
            // Bounded: connecting and KILL each take at most about the connect timeout.
            let _ = tokio::time::timeout(connect_timeout * 3, k).await;
        }
        match result {
            Ok(mut o) => {
                if timed {
                    o.split = self.split(backend, &o.timing);
                }
                if reply.is_some() && !o.error {
                    backend.status = o.status;
                }
                if reply.is_some() {
                    self.status = o.status;
                }
                Forwarded::Done(o)
            }
            Err(e @ (ExecError::BackendLost { .. } | ExecError::BackendProtocol(_))) if !self.handle.is_killed() => {
                backend.broken = true;
                let (lost, reply_seq, before_reply) = match e {
                    ExecError::BackendLost { reply_seq, before_reply } => (true, reply_seq, before_reply),
                    _ => (false, None, false),
                };
                debug!(id = self.id, backend = %backend.server.name, "backend lost during a reply");
                // The server is done with this connection: its slot is free now, though the
                // client may take its time reading what is left.
                if lost && backend.pooled {
                    backend.pooled = false;
                    backend.server.pool.released_slot();
                }
                if let (true, true, Some(seq)) = (may_retry, before_reply, reply_seq) {
                    return Forwarded::LostBeforeReply { seq };
                }
                if let Some(seq) = reply_seq {
                    // The whole packets received before the loss, then the error.
                    let received = std::mem::take(&mut backend.conn.rbuf);
                    self.data.stats.add(Counter::GeneratedErrorPackets, 1);
                    self.out.clear();
                    write_lost(&mut self.out, seq, &backend.server.name);
                    let write = async {
                        self.client.write_all(&received).await?;
                        self.client.write_all(&self.out).await
                    };
                    if tokio::time::timeout(stall, write).await.is_err() {
                        debug!(
                            id = self.id,
                            "the client did not take the rest of its reply within {stall:?} after its backend was lost; closing"
                        );
                    }
                }
                Forwarded::Ended
            }
            Err(ExecError::TailRefused { seq }) => {
                // The backend holds half a packet: that connection ends, and with it any
                // transaction on it, so the session ends too, after saying why.
                backend.broken = true;
                let msg = format!(
                    "sluice refuses a statement larger than max_buffered_packet ({} bytes) whose unread part holds KILL, PREPARE, \
                     EXECUTE IMMEDIATE or PROCESSLIST: it was not run; send it as smaller statements",
                    self.limits.max_buffered
                );
                self.reply_err(seq.wrapping_add(1), ER_NOT_SUPPORTED_YET, SQLSTATE_NOT_SUPPORTED, &msg).await;
                Forwarded::Ended
            }
            Err(ExecError::ClientPacketTooLarge { seq }) => {
                backend.broken = true;
                let msg = "Got a packet bigger than 'max_allowed_packet' bytes";
                self.reply_err(seq.wrapping_add(1), ER_NET_PACKET_TOO_LARGE, b"08S01", msg).await;
                Forwarded::Ended
            }
            Err(e) => {
                backend.broken = true;
                debug!(id = self.id, "session ends: {e}");
                Forwarded::Ended
            }
        }
    }

    /// Takes the config in force if a reload swapped it (one atomic load).
    fn follow_reload(&mut self) {
        let current = self.live.load();
        if !Arc::ptr_eq(current, &self.snap) {
            self.snap = current.clone();
            // A reloaded user row's statement limits apply to its open sessions too.
            if let Some(u) = self.snap.users.configured(&self.user.name).filter(|_| !self.user.from_backend) {
                self.user.caps = u.caps;
            }
            self.limits =
                exec::Limits::from_config(&self.snap.config.proxy, self.data.backend_max_packet.load(std::sync::atomic::Ordering::Relaxed));
        }
    }

    /// Tells the client its backend was lost before any of the reply to its request came
    /// (`Forwarded::LostBeforeReply`, not run again elsewhere); `seq` is the reply's.
    async fn reply_lost(&mut self, seq: u8, server: &str) -> Flow {
        self.data.stats.add(Counter::GeneratedErrorPackets, 1);
        self.out.clear();
        write_lost(&mut self.out, seq, server);
        Flow::written(self.client.write_all(&self.out).await.is_ok())
    }

    async fn reply_err(&mut self, seq: u8, code: u16, sqlstate: &[u8; 5], msg: &str) {
        self.reply_err_bytes(seq, code, sqlstate, msg.as_bytes()).await;
    }

    /// `reply_err` with a message that may not be UTF-8 (a server's).
    async fn reply_err_bytes(&mut self, seq: u8, code: u16, sqlstate: &[u8; 5], msg: &[u8]) {
        let mut seq = self.finish_request(seq).await;
        self.data.stats.add(Counter::GeneratedErrorPackets, 1);
        self.out.clear();
        proto::packet::write_err_bytes(&mut self.out, &mut seq, code, sqlstate, msg);
        let _ = self.client.write_all(&self.out).await;
    }

    /// A backend failure as the client sees it (`write_backend_error`). False when the client
    /// could not be told.
    async fn reply_backend_error(&mut self, seq: u8, e: &BackendError) -> Flow {
        let mut seq = self.finish_request(seq).await;
        if !matches!(e, BackendError::Rejected { .. }) {
            self.data.stats.add(Counter::GeneratedErrorPackets, 1);
        }
        self.out.clear();
        write_backend_error(&mut self.out, &mut seq, e);
        Flow::written(self.client.write_all(&self.out).await.is_ok())
    }

    /// An OK of sluice's own (KILL, a rule's OK_msg), with the status flags of the last reply.
    async fn reply_ok(&mut self, seq: u8, message: &str) -> Flow {
        let mut seq = self.finish_request(seq).await;
        self.out.clear();
        // Only the flags that describe the session: the last reply's others (more results,
        // cursor, session state changed…) would promise what this OK does not carry.
        use proto::StatusFlags as S;
        let session_flags = S::SERVER_STATUS_IN_TRANS
            | S::SERVER_STATUS_AUTOCOMMIT
            | S::SERVER_STATUS_NO_BACKSLASH_ESCAPES
            | S::SERVER_STATUS_IN_TRANS_READONLY;
        let status = self.status & session_flags.bits();
        proto::packet::write_ok_message(&mut self.out, &mut seq, status, message.as_bytes());
        Flow::written(self.client.write_all(&self.out).await.is_ok())
    }

    /// COM_CHANGE_USER: verify the new login, then start a clean session for it on a pooled
    /// connection (the kept ones hold the old session and are reset before reuse), as the
    /// server resets the session. False when the session must end.
    async fn change_user(&mut self, payload: &[u8], mut seq: u8) -> Flow {
        let cu = match proto::handshake::parse_change_user(payload, self.negotiated.capabilities) {
            Ok(cu) => cu,
            Err(_) => {
                self.reply_err(seq, ER_UNKNOWN_COM_ERROR, SQLSTATE_UNKNOWN_COM, "Malformed COM_CHANGE_USER").await;
                return Flow::Continue;
            }
        };
        let plugin = cu.auth_plugin.clone().unwrap_or_else(|| proto::auth::MYSQL_NATIVE_PASSWORD.into());
        let attempt = auth::Attempt {
            user: &cu.user,
            plugin: &plugin,
            reply: &cu.auth_response,
            nonce: &self.nonce,
            capabilities: self.negotiated.capabilities,
            collation: cu.collation.map_or(self.negotiated.collation, |c| c as u8),
            peer: self.peer,
            directory: auth::Directory::Clients,
        };
        // As MariaDB (MDEV-3915): after three failures, COM_CHANGE_USER is refused unchecked.
        let authenticated = if self.failed_change_user >= 3 {
            Ok(Err(auth::Denied::change_user_limit()))
        } else {
            auth::authenticate(&self.data, &mut self.client, &mut seq, attempt).await
        };
        // Whatever the outcome, the server resets the session.
        self.release_all();
        self.statements.clear();
        self.last_insert_id = 0;
        let collation = cu.collation.map_or(self.negotiated.collation, |c| c as u8);
        let (user, credential) = match authenticated {
            Ok(Ok(v)) => v,
            Ok(Err(denied)) => {
                // The server resets a session whose COM_CHANGE_USER failed to its global
                // defaults (character set included), keeping the user and schema.
                self.state = Arc::new(state::State::new(self.state.schema.as_deref(), 0));
                // The server answers a failed COM_CHANGE_USER only after a second.
                self.failed_change_user = self.failed_change_user.saturating_add(1);
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.reply_err_bytes(seq, denied.code, &denied.sqlstate, denied.message.as_bytes()).await;
                return Flow::Continue;
            }
            Err(_) => return Flow::End,
        };
        if user.name != self.user.name {
            match admit_user(&self.data, &user) {
                Ok(slot) => self.user_slot = slot,
                Err(message) => {
                    // Refused as the server refuses it: the session stays, reset, with its user.
                    self.state = Arc::new(state::State::new(self.state.schema.as_deref(), 0));
                    self.reply_err(seq, ER_TOO_MANY_USER_CONNECTIONS, SQLSTATE_NOT_SUPPORTED, &message).await;
                    return Flow::Continue;
                }
            }
        }
        let negotiated = Negotiated {
            collation,
            attrs: if cu.attrs.is_empty() { self.negotiated.attrs.clone() } else { cu.attrs.clone() },
            ..self.negotiated.clone()
        };
        let database = cu.database.clone().or_else(|| user.default_schema.clone());
        self.login = backend_login(&user, credential, &negotiated);
        self.generation = self.snap.hostgroups.generations().enter(&self.login.username);
        self.state = multiplex::initial_state(database.as_deref(), collation);
        self.handle.publish_state(&self.state);
        self.user = user;
        self.handle.set_user(&self.user.name);
        self.negotiated = negotiated;
        match self.acquire_unrouted(0).await {
            Ok(held) => {
                self.status = held.backend.status;
                self.settle(held);
                self.reply_ok(seq, "").await
            }
            Err(e) => self.reply_backend_error(seq, &e).await,
        }
    }
}

/// Sleeps for `limit`, or forever without one (a `select!` arm that may not apply).
/// Sleeps for `limit`, or for ever when there is none.
pub(super) async fn sleep_or_never(limit: Option<Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// An instant a session notes through `&self` (an atomic: the session is shared by reference
/// across awaits): nanoseconds after a process-wide origin, 0 for none.
struct EndStamp(std::sync::atomic::AtomicU64);

impl Default for EndStamp {
    fn default() -> Self {
        // The origin is read before any instant the stamp holds.
        std::sync::LazyLock::force(&CLOCK_ORIGIN);
        EndStamp(Default::default())
    }
}

static CLOCK_ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

impl EndStamp {
    fn set(&self, at: Instant) {
        let ns = at.saturating_duration_since(*CLOCK_ORIGIN).as_nanos();
        self.0.store(u64::try_from(ns).unwrap_or(u64::MAX).max(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> Option<Instant> {
        let ns = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (ns != 0).then(|| *CLOCK_ORIGIN + Duration::from_nanos(ns))
    }

    fn take(&self) -> Option<Instant> {
        let at = self.get();
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
        at
    }
}

/// A session's idle-client timer. Arming a tokio timer for each wait between statements would
/// take the timer wheel's lock twice per statement; this one is armed once, and when it fires it
/// checks the time of the last request and moves itself if the client was not idle that long.
struct IdleTimer {
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The limit the timer was armed for (a client's SET wait_timeout changes it).
    armed_for: Option<Duration>,
    /// When the session began waiting for its current command (the last one was answered).
    last_request: Instant,
}

impl Default for IdleTimer {
    fn default() -> Self {
        IdleTimer { timer: None, armed_for: None, last_request: Instant::now() }
    }
}

impl IdleTimer {
    /// Resolves once no request has come for `limit` (never with no limit).
    async fn expired(&mut self, limit: Option<Duration>) {
        let Some(limit) = limit else { return std::future::pending().await };
        let deadline = tokio::time::Instant::from_std(self.last_request + limit);
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if self.armed_for != Some(limit) {
            timer.as_mut().reset(deadline);
            self.armed_for = Some(limit);
        }
        loop {
            timer.as_mut().await;
            let deadline = self.last_request + limit;
            if Instant::now() >= deadline {
                return;
            }
            timer.as_mut().reset(tokio::time::Instant::from_std(deadline));
        }
    }
}

/// Resolves when the first connection the session keeps becomes readable between commands
/// (the server closing it); never when it keeps none.
async fn held_readable(held: &[Held]) {
    match held.first() {
        Some(h) => {
            let _ = h.backend.conn.stream.readable().await;
        }
        None => std::future::pending().await,
    }
}
