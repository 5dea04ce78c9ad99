//! ⑥ exec: sends a client's request to its backend and streams the reply back unchanged.
//!
//! Bytes are forwarded as they arrive; the `proto::response::Scanner` watches packet headers to
//! find the reply's end. A bounded buffer with high/low watermarks sits between the two sockets:
//! above the high watermark sluice stops reading the backend until the client has drained it
//! below the low one, so a slow client costs at most the high watermark in memory.
//!
//! Both ends are watched while a reply is awaited, without a system call of their own on the
//! normal path (the reactor's readiness is enough): a client that closes its connection ends the
//! exchange at once (the session then kills the statement); while the backend is not read (the
//! client is slow) a reset from the server still ends it at once, so its connection's slot is
//! freed; and a client that accepts nothing for `Limits::stall` is given up, as the server gives
//! up on it after `net_write_timeout`.

pub mod binary;
pub mod merge;

use crate::net::{Conn, Stream, READ_CHUNK};
use bytes::Buf;
use proto::frame::Tail;
use proto::response::{Event, Reply, Scanner};
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Packet-format facts of a backend connection that decide how its replies are scanned.
#[derive(Debug, Clone, Copy, Default)]
pub struct Format {
    pub deprecate_eof: bool,
    pub mariadb_caps: u32,
    /// The connection's status flags before the request: a reply that carries none (a lone
    /// ERR) leaves them as they were, rather than reading as "autocommit off".
    pub status: u16,
}

#[derive(Debug, Clone, Copy)]
pub struct Watermarks {
    pub high: usize,
    pub low: usize,
}

/// How a session's exchanges are bounded: built once per session, again when a reload
/// changes the settings.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The reply buffer between the two sockets.
    pub watermarks: Watermarks,
    /// The largest client packet: `[proxy] max_allowed_packet`, else the backend's own.
    pub max_packet: usize,
    /// How long a client may accept none of the reply bytes sluice holds for it before it is
    /// given up (the server's `net_write_timeout`).
    pub stall: Duration,
    /// Client packets larger than this are relayed as they arrive, not held whole.
    pub max_buffered: usize,
}

/// MariaDB's default `net_write_timeout`: the stall bound unless the session set its own.
pub const DEFAULT_STALL: Duration = Duration::from_secs(60);

/// Bytes a client may send ahead (its next command) while a reply is awaited that sluice reads
/// early to tell them from a closed connection; past this, it stops watching that client.
const PIPELINED_MAX: usize = 64 << 10;

use crate::config::{MAX_ALLOWED_PACKET_CEILING, MIN_BUFFERED_PACKET};

impl Limits {
    /// The limits `proxy` sets; `backend_max_packet` is the backend's max_allowed_packet
    /// (0: not known yet), used when the config sets none.
    pub fn from_config(proxy: &crate::config::ProxySection, backend_max_packet: usize) -> Limits {
        let max_packet = match (proxy.max_allowed_packet, backend_max_packet) {
            (Some(n), _) => n,
            (None, 0) => MAX_ALLOWED_PACKET_CEILING,
            (None, n) => n,
        };
        Limits {
            watermarks: Watermarks { high: proxy.buffer_high_watermark, low: proxy.buffer_low_watermark },
            max_packet: max_packet.min(MAX_ALLOWED_PACKET_CEILING),
            max_buffered: proxy.max_buffered_packet.clamp(MIN_BUFFERED_PACKET, proto::frame::MAX_CHUNK - 1),
            stall: DEFAULT_STALL,
        }
    }
}

/// One request to forward.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Whole packets, as the client framed them.
    pub packets: &'a [u8],
    /// How the reply is shaped; `None` for commands the server never answers
    /// (COM_STMT_CLOSE, SEND_LONG_DATA).
    pub reply: Option<Reply>,
    /// The backend connection's packet format.
    pub format: Format,
    /// The rest of a client packet too large to hold (`packets` is its head), still on the
    /// client socket: relayed to the backend as it arrives, before the reply.
    pub tail: Option<Tail>,
    /// Watch the tail for words sluice must see before a backend does (`KeywordWatch`): a
    /// statement text whose rest could hide a KILL.
    pub watch_tail: bool,
    /// Note when the request went and when the reply's first bytes came and went on
    /// (`Outcome::timing`; the server-time probe is on).
    pub timed: bool,
}

/// When a timed request's steps happened, for sluice's own share of the statement's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    /// Just before the request was written to the backend.
    pub sending: Option<Instant>,
    /// The reply's first bytes read from the backend.
    pub first_read: Option<Instant>,
    /// Its first bytes written to the client.
    pub first_write: Option<Instant>,
}

/// How a forwarded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    pub error: bool,
    /// Server status flags of the last OK/EOF.
    pub status: u16,
    /// LAST_INSERT_ID() as an OK packet reported it (0: unchanged).
    pub last_insert_id: u64,
    /// Warnings of the last OK/EOF.
    pub warnings: u16,
    /// For statistics: rows in result sets, rows affected, the ERR code (0: none), reply bytes.
    pub rows: u64,
    pub affected_rows: u64,
    pub error_code: u16,
    pub reply_bytes: u64,
    /// Filled in for a timed request.
    pub timing: Timing,
    /// The statement's time split (the session fills it in from `timing` and the probe).
    pub split: Option<crate::stats::Split>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The backend closed or failed before its reply ended. `reply_seq` is the sequence id an
    /// ERR packet must carry to end the reply cleanly, when the stream stopped between packets;
    /// then the whole packets received and not yet written are left in the backend's read
    /// buffer, for the caller to pass on after an error packet once it has let the backend go
    /// (the client may be slow to take them).
    /// `before_reply`: nothing of the reply had come (so none of it reached the client).
    #[error("lost the backend connection during the reply")]
    BackendLost { reply_seq: Option<u8>, before_reply: bool },
    /// The backend sent something that is not a valid reply.
    #[error("backend protocol error: {0}")]
    BackendProtocol(proto::ProtoError),
    /// The client closed or failed. `running`: the reply had not ended, so the statement may
    /// still be running on the backend.
    #[error("client connection lost")]
    ClientLost { running: bool },
    /// The client accepted none of the reply for `Limits::stall`.
    #[error("the client read nothing of the reply for {0:?}")]
    ClientStalled(Duration),
    #[error("client protocol error: {0}")]
    ClientProtocol(String),
    /// A relayed statement's unread rest holds a word sluice must check (KILL…): it was
    /// not sent whole, so the backend connection has half a packet; `seq` is its last chunk's id.
    #[error("a relayed statement holds a word sluice must check")]
    TailRefused { seq: u8 },
    /// A relayed client packet grew past max_allowed_packet; `seq` is its last chunk's id.
    #[error("client packet larger than max_allowed_packet")]
    ClientPacketTooLarge { seq: u8 },
}

/// A checksum of a reply's packets without their sequence ids (which depend on the request's
/// framing, not on the answer): two replies with the same checksum said the same. Fed the
/// reply's bytes in order, in pieces of any size.
#[derive(Default)]
pub struct ReplyChecksum {
    hasher: xxhash_rust::xxh3::Xxh3,
    header: [u8; 4],
    header_len: usize,
    payload_left: usize,
}

impl ReplyChecksum {
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.hasher.update(&bytes[..n]);
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (4 - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len == 4 {
                // The length, not the sequence id.
                self.hasher.update(&self.header[..3]);
                self.payload_left = self.header[0] as usize | (self.header[1] as usize) << 8 | (self.header[2] as usize) << 16;
                self.header_len = 0;
            }
        }
    }

    pub fn finish(&self) -> u64 {
        self.hasher.digest()
    }
}

/// What else a reply's bytes are fed to as they stream: the replay journal's checksum, the
/// result cache's capture; and, for a statement on a shard, the logical names its column
/// definitions are given back.
#[derive(Default)]
pub struct Tap<'a> {
    pub checksum: Option<&'a mut ReplyChecksum>,
    pub capture: Option<&'a mut crate::cache::Capture>,
    pub rename: Option<RenameColumns<'a>>,
}

/// A shard's column definitions given its logical database's names (`shard::LogicalNames`):
/// the client sees `shop` and `t_log` where the shard says `ds_2` and `t_log_1`.
#[derive(Debug, Clone, Copy)]
pub struct RenameColumns<'a> {
    /// The shard's database: the schema its columns name.
    pub node_database: &'a str,
    pub names: &'a crate::shard::LogicalNames,
}

impl<'a> RenameColumns<'a> {
    pub fn of(target: &'a crate::shard::plan::ShardStatement) -> Self {
        RenameColumns { node_database: &target.database, names: &target.names }
    }

    pub fn of_names(names: &'a crate::shard::ShardNames) -> Self {
        RenameColumns { node_database: &names.node_database, names: &names.names }
    }

    /// A whole reply (`wire`: packets with their headers, as a prepare's answer) with every
    /// column definition in it renamed (they are the packets whose catalog is `def`).
    pub fn packets(&self, wire: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(wire.len() + 256);
        let mut rest = wire;
        while let Ok(Some(f)) = proto::frame::frame(rest, usize::MAX) {
            let packet = &rest[..f.wire_len];
            match f.single_payload(rest).filter(|p| p.starts_with(b"\x03def")) {
                Some(def) => {
                    let mut seq = f.first_seq;
                    proto::frame::write_packet(&mut out, &mut seq, &self.column(def));
                }
                None => out.extend_from_slice(packet),
            }
            rest = &rest[f.wire_len..];
        }
        out.extend_from_slice(rest);
        out
    }

    /// `def` renamed, or as it is when it names nothing of the shard's own.
    pub fn column<'d>(&self, def: &'d [u8]) -> std::borrow::Cow<'d, [u8]> {
        match self.names.rename_column(self.node_database, def) {
            Some(renamed) => std::borrow::Cow::Owned(renamed),
            None => std::borrow::Cow::Borrowed(def),
        }
    }
}

impl Tap<'_> {
    fn feed(&mut self, bytes: &[u8]) {
        if let Some(sum) = self.checksum.as_deref_mut() {
            sum.feed(bytes);
        }
        if let Some(capture) = self.capture.as_deref_mut() {
            capture.feed(bytes);
        }
    }
}

/// Sends `request` and streams the reply, feeding it to `tap` too.
pub async fn forward(
    client: &mut Conn,
    backend: &mut Conn,
    request: Request<'_>,
    limits: &Limits,
    mut tap: Tap<'_>,
) -> Result<Outcome, ExecError> {
    let Request { packets, reply, format, tail, watch_tail, timed } = request;
    let mut timing = Timing { sending: timed.then(Instant::now), ..Timing::default() };
    // The reply continues the sequence from the request's last chunk.
    let mut request_seq = proto::frame::frame(packets, usize::MAX).ok().flatten().map_or(0, |f| f.last_seq);
    if backend.write_all(packets).await.is_err() {
        // Half a request: the client is still sending the rest, no clean answer is possible.
        let reply_seq = tail.is_none().then(|| request_seq.wrapping_add(1));
        return Err(ExecError::BackendLost { reply_seq, before_reply: true });
    }
    if let Some(tail) = tail {
        let watch = watch_tail.then(|| sql::classify::KeywordWatch::after(packets.last().copied()));
        request_seq = relay_tail(client, backend, tail, watch).await?;
    }
    let Some(reply) = reply else {
        return Ok(Outcome::default());
    };
    let mut scanner = Scanner::new(reply, format.deprecate_eof).with_mariadb_capabilities(format.mariadb_caps).with_status(format.status);
    let mut reply_bytes = 0;
    if let (Some(rename), Reply::Query) = (tap.rename, reply) {
        rename_head(client, backend, rename, request_seq, timed.then_some(&mut timing)).await?;
    }
    loop {
        let step = match stream_reply(
            client,
            backend,
            &mut scanner,
            limits,
            request_seq,
            &mut reply_bytes,
            &mut tap,
            timed.then_some(&mut timing),
        )
        .await
        {
            Err(ExecError::BackendLost { reply_seq, .. }) => {
                return Err(ExecError::BackendLost { reply_seq, before_reply: reply_bytes == 0 })
            }
            step => step?,
        };
        match step {
            Event::Done { error } => {
                return Ok(Outcome {
                    error,
                    status: scanner.status(),
                    last_insert_id: scanner.last_insert_id(),
                    warnings: scanner.warnings(),
                    rows: scanner.rows(),
                    affected_rows: scanner.affected_rows(),
                    error_code: scanner.error_code(),
                    reply_bytes,
                    timing,
                    split: None,
                });
            }
            Event::LocalInfile => {
                let last = relay_infile(client, backend, limits).await?;
                scanner.after_infile(last);
            }
            // stream_reply returns only at the reply's end or an infile request.
            Event::More => return Err(ExecError::BackendProtocol(proto::ProtoError::Unexpected("reply scanning stopped early"))),
        }
    }
}

/// A statement on one shard: the head of its result set (column count and definitions) read
/// whole into the backend's read buffer and renamed there (`RenameColumns`), so that
/// `stream_reply` scans and sends it with the rows, in the same writes. Any other reply (OK,
/// ERR, LOCAL INFILE) is left as it is. The head is a few packets: this costs a copy of them,
/// not of the rows, and no system call of its own.
async fn rename_head(
    client: &mut Conn,
    backend: &mut Conn,
    rename: RenameColumns<'_>,
    request_seq: u8,
    timing: Option<&mut Timing>,
) -> Result<(), ExecError> {
    let lost = || ExecError::BackendLost { reply_seq: Some(request_seq.wrapping_add(1)), before_reply: true };
    let mut timing = timing;
    // The client is watched while the head is awaited, as `stream_reply` watches it.
    let mut watch_client = true;
    // Frames of the head: (start, wire length), once all are in the buffer.
    let mut frames: Vec<(usize, usize)> = Vec::new();
    loop {
        frames.clear();
        match head_frames(&backend.rbuf, &mut frames) {
            Head::Complete => break,
            Head::NotRows => return Ok(()),
            Head::Partial => {}
        }
        if backend.rbuf.capacity() - backend.rbuf.len() < READ_CHUNK / 4 {
            backend.rbuf.reserve(READ_CHUNK);
        }
        let Conn { stream, rbuf } = &mut *backend;
        poll_fn(|cx| {
            if watch_client {
                match watch_client_side(client, cx) {
                    Watch::Quiet => {}
                    Watch::Gone => return Poll::Ready(Err(ExecError::ClientLost { running: true })),
                    Watch::Stop => watch_client = false,
                }
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, rbuf) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(Err(lost())),
                Poll::Ready(Ok(_)) => Poll::Ready(Ok(())),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        if let Some(t) = timing.as_deref_mut().filter(|t| t.first_read.is_none()) {
            t.first_read = Some(Instant::now());
        }
    }
    let end = frames.last().map_or(0, |&(at, len)| at + len);
    let mut renamed = bytes::BytesMut::with_capacity(backend.rbuf.len() + 64 * frames.len());
    for (k, &(at, len)) in frames.iter().enumerate() {
        let wire = &backend.rbuf[at..at + len];
        let def = wire.get(proto::frame::HEADER_LEN..).unwrap_or_default();
        match (k > 0).then(|| rename.names.rename_column(rename.node_database, def)).flatten() {
            Some(payload) => {
                let mut out = Vec::with_capacity(payload.len() + proto::frame::HEADER_LEN);
                let mut seq = wire[3];
                proto::frame::write_packet(&mut out, &mut seq, &payload);
                renamed.extend_from_slice(&out);
            }
            None => renamed.extend_from_slice(wire),
        }
    }
    renamed.extend_from_slice(&backend.rbuf[end..]);
    backend.rbuf = renamed;
    Ok(())
}

/// How much of a result set's head a buffer holds.
enum Head {
    /// The column count and every column definition (`frames`).
    Complete,
    /// Not all of it yet.
    Partial,
    /// The reply is no result set (or a packet of 16 MiB or more): nothing to rename.
    NotRows,
}

/// Finds the head's frames (start, wire length) at the front of `buf`.
fn head_frames(buf: &[u8], frames: &mut Vec<(usize, usize)>) -> Head {
    let mut at = 0;
    let mut count = None;
    loop {
        let f = match proto::frame::frame(&buf[at..], proto::frame::MAX_CHUNK - 1) {
            Ok(Some(f)) if f.chunks == 1 => f,
            Ok(Some(_)) | Err(_) => return Head::NotRows,
            Ok(None) => return Head::Partial,
        };
        if count.is_none() {
            let payload = &buf[at + proto::frame::HEADER_LEN..at + f.wire_len];
            count = match payload.first() {
                None | Some(&0x00 | &0xFB | &0xFF) => return Head::NotRows,
                Some(_) => match proto::codec::read_lenenc(payload) {
                    Some((n, _)) => Some(n),
                    None => return Head::NotRows,
                },
            };
        }
        frames.push((at, f.wire_len));
        at += f.wire_len;
        if count.is_some_and(|n| frames.len() as u64 > n) {
            return Head::Complete;
        }
    }
}

/// Relays the client's LOCAL INFILE data packets to the backend up to the empty packet that
/// ends them; returns that packet's sequence id. A packet larger than `max_buffered` is relayed
/// as it arrives.
async fn relay_infile(client: &mut Conn, backend: &mut Conn, limits: &Limits) -> Result<u8, ExecError> {
    loop {
        let (frame, tail) = match client.read_request(limits.max_packet, limits.max_buffered).await {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => return Err(ExecError::ClientLost { running: true }),
        };
        let res = backend.write_all(&client.rbuf[..frame.wire_len]).await;
        client.consume(frame.wire_len);
        if res.is_err() {
            return Err(ExecError::BackendLost { reply_seq: None, before_reply: false });
        }
        if let Some(tail) = tail {
            relay_tail(client, backend, tail, None).await?;
        } else if frame.payload_len == 0 {
            return Ok(frame.last_seq);
        }
    }
}

/// Client bytes read at a time while relaying the rest of a large packet.
const RELAY_CHUNK: usize = 64 << 10;

/// Relays the rest of a client packet whose head was sent, as it arrives, holding at most
/// `RELAY_CHUNK` of it; returns its last chunk's sequence id. Bytes after its end stay in the
/// client's buffer (a pipelined command). With a `watch`, bytes are checked before they are
/// sent: a keyword in them stops the relay, the rest of the packet is read and dropped, and the
/// backend, which has half a packet, never runs it (`TailRefused`).
pub async fn relay_tail(
    client: &mut Conn,
    backend: &mut Conn,
    mut tail: Tail,
    mut watch: Option<sql::classify::KeywordWatch>,
) -> Result<u8, ExecError> {
    loop {
        if !client.rbuf.is_empty() {
            let fed = match watch.as_mut() {
                Some(w) => tail.feed_with(&client.rbuf, |payload| w.feed(payload)),
                None => tail.feed(&client.rbuf),
            };
            let (n, done) = fed.map_err(|_| ExecError::ClientPacketTooLarge { seq: tail.last_seq() })?;
            if watch.as_mut().is_some_and(|w| w.found(done)) {
                client.consume(n);
                let seq = if done { tail.last_seq() } else { discard_tail(client, tail).await? };
                return Err(ExecError::TailRefused { seq });
            }
            if n > 0 {
                let res = backend.write_all(&client.rbuf[..n]).await;
                client.consume(n);
                if res.is_err() {
                    return Err(ExecError::BackendLost { reply_seq: None, before_reply: false });
                }
            }
            if done {
                return Ok(tail.last_seq());
            }
        }
        read_some(client).await?;
    }
}

/// Reads and drops the rest of a client packet sluice does not forward; returns its last
/// chunk's sequence id.
pub async fn discard_tail(client: &mut Conn, mut tail: Tail) -> Result<u8, ExecError> {
    loop {
        if !client.rbuf.is_empty() {
            let (n, done) = tail.feed(&client.rbuf).map_err(|_| ExecError::ClientPacketTooLarge { seq: tail.last_seq() })?;
            client.consume(n);
            if done {
                return Ok(tail.last_seq());
            }
        }
        read_some(client).await?;
    }
}

async fn read_some(client: &mut Conn) -> Result<(), ExecError> {
    if client.rbuf.capacity() - client.rbuf.len() < RELAY_CHUNK / 4 {
        client.rbuf.reserve(RELAY_CHUNK);
    }
    match client.stream.read_buf(&mut client.rbuf).await {
        Ok(0) | Err(_) => Err(ExecError::ClientLost { running: false }),
        Ok(_) => Ok(()),
    }
}

/// What `stream_reply`'s read-and-write step stopped for.
enum Step {
    /// The reply ended (or asks for a local file) and all of it reached the client.
    Done(Event),
    /// Only the client's side can move: the buffer is at the high watermark, or the reply has
    /// ended and its tail waits for the client (`drain`).
    Drain,
}

/// Streams reply bytes from `backend` to `client` until the scanner reports the end of the
/// reply or a LOCAL INFILE request. Reading and writing overlap; the buffer is bounded.
/// `timing`: note when the reply's first bytes are read and written.
#[allow(clippy::too_many_arguments)]
async fn stream_reply(
    client: &mut Conn,
    backend: &mut Conn,
    scanner: &mut Scanner,
    limits: &Limits,
    request_seq: u8,
    reply_bytes: &mut u64,
    tap: &mut Tap<'_>,
    mut timing: Option<&mut Timing>,
) -> Result<Event, ExecError> {
    let Conn { stream: bstream, rbuf: buf } = backend;
    let wm = limits.watermarks;
    // buf[..scanned] belongs to this reply and waits to be written; buf[scanned..] is unscanned.
    let mut scanned = 0usize;
    let mut event = Event::More;
    let mut watch_client = true;
    let result = loop {
        let step = poll_fn(|cx| {
            // Once per wake, not per chunk: the client's readiness (no system call while it
            // sends nothing).
            if watch_client && event == Event::More {
                match watch_client_side(client, cx) {
                    Watch::Quiet => {}
                    Watch::Gone => return Poll::Ready(Err(Failed(ExecError::ClientLost { running: true }))),
                    Watch::Stop => watch_client = false,
                }
            }
            loop {
                if event == Event::More && scanned < buf.len() {
                    match scanner.feed(&buf[scanned..]) {
                        Ok((used, ev)) => {
                            tap.feed(&buf[scanned..scanned + used]);
                            scanned += used;
                            *reply_bytes += used as u64;
                            event = ev;
                            if ev != Event::More && scanned < buf.len() {
                                return Poll::Ready(Err(Failed(ExecError::BackendProtocol(proto::ProtoError::Unexpected(
                                    "bytes after the end of a reply",
                                )))));
                            }
                        }
                        Err(e) => return Poll::Ready(Err(Failed(ExecError::BackendProtocol(e)))),
                    }
                }
                let mut progress = false;
                if scanned > 0 {
                    match Pin::new(&mut client.stream).poll_write(cx, &buf[..scanned]) {
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                            return Poll::Ready(Err(Failed(ExecError::ClientLost { running: event == Event::More })))
                        }
                        Poll::Ready(Ok(n)) => {
                            buf.advance(n);
                            scanned -= n;
                            progress = true;
                            if let Some(t) = timing.as_deref_mut().filter(|t| t.first_write.is_none()) {
                                t.first_write = Some(Instant::now());
                            }
                        }
                        Poll::Pending if event != Event::More => return Poll::Ready(Ok(Step::Drain)),
                        Poll::Pending => {}
                    }
                }
                if event != Event::More && scanned == 0 {
                    return match Pin::new(&mut client.stream).poll_flush(cx) {
                        Poll::Ready(Ok(())) => Poll::Ready(Ok(Step::Done(event))),
                        Poll::Ready(Err(_)) => Poll::Ready(Err(Failed(ExecError::ClientLost { running: false }))),
                        Poll::Pending => Poll::Ready(Ok(Step::Drain)),
                    };
                }
                if event == Event::More {
                    if buf.len() >= wm.high {
                        return Poll::Ready(Ok(Step::Drain));
                    }
                    let spare = buf.capacity() - buf.len();
                    if spare < READ_CHUNK / 4 {
                        buf.reserve((wm.high - buf.len()).clamp(READ_CHUNK / 4, 4 * READ_CHUNK));
                    }
                    match tokio_util::io::poll_read_buf(Pin::new(&mut *bstream), cx, buf) {
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(Lost)),
                        Poll::Ready(Ok(_)) => {
                            progress = true;
                            if let Some(t) = timing.as_deref_mut().filter(|t| t.first_read.is_none()) {
                                t.first_read = Some(Instant::now());
                            }
                        }
                        Poll::Pending => {}
                    }
                }
                if !progress {
                    return Poll::Pending;
                }
            }
        })
        .await;
        match step {
            Ok(Step::Done(ev)) => break Ok(ev),
            Ok(Step::Drain) => {
                let ended = event != Event::More;
                let first_write = timing.as_deref_mut().map(|t| &mut t.first_write);
                match drain(&mut client.stream, bstream, buf, &mut scanned, ended, limits, first_write).await {
                    Ok(()) if ended => break Ok(event),
                    Ok(()) => {}
                    Err(Drained::BackendReset) => break Err(Lost),
                    Err(Drained::Failed(e)) => break Err(Failed(e)),
                }
            }
            Err(e) => break Err(e),
        }
    };
    let result = match result {
        Ok(ev) => Ok(ev),
        Err(Lost) => {
            // The backend ended before the reply did. The whole packets not yet written stay
            // in `buf` for the caller to pass on, followed by an error in place of the packet
            // in progress — unless part of that one already went out.
            let cut = scanner.cut(request_seq).filter(|&(partial, _)| partial <= scanned);
            buf.truncate(cut.map_or(0, |(partial, _)| scanned - partial));
            Err(ExecError::BackendLost { reply_seq: cut.map(|(_, seq)| seq), before_reply: false })
        }
        Err(Failed(e)) => Err(e),
    };
    if buf.is_empty() && buf.capacity() > 256 << 10 {
        *buf = bytes::BytesMut::new();
    }
    result
}

/// How `stream_reply`'s loop ended early.
enum Stop {
    /// The backend closed, failed or was reset before the reply ended.
    Lost,
    Failed(ExecError),
}
use Stop::{Failed, Lost};

/// Why `drain` stopped early.
enum Drained {
    /// The server reset the connection while it was not being read.
    BackendReset,
    Failed(ExecError),
}

/// Writes held reply bytes to the client, with the backend not read: down to the low
/// watermark, or all of them (and a flush) once the reply has `ended`. Meanwhile a reset from
/// the server (its own `net_write_timeout`, a shutdown) ends the exchange at once, so the
/// backend connection's slot is freed while the client still holds its bytes; and a client
/// that takes nothing for `limits.stall` is given up. A reset is seen through the error
/// readiness the reactor reports, which the unread data does not mask; a plain FIN cannot
/// arrive before the data ahead of it is read, and the stall bound covers it.
async fn drain(
    client: &mut Stream,
    bstream: &Stream,
    buf: &mut bytes::BytesMut,
    scanned: &mut usize,
    ended: bool,
    limits: &Limits,
    mut first_write: Option<&mut Option<Instant>>,
) -> Result<(), Drained> {
    let reset = bstream.error();
    tokio::pin!(reset);
    let mut last_progress = Instant::now();
    let stall = tokio::time::sleep(limits.stall);
    tokio::pin!(stall);
    loop {
        // Some(n): n bytes written; None: everything written and flushed.
        let client_side = async {
            if *scanned > 0 {
                client.write(&buf[..*scanned]).await.map(Some)
            } else {
                client.flush().await.map(|()| None)
            }
        };
        tokio::select! {
            biased;
            r = client_side => match r {
                Ok(None) => return Ok(()),
                Ok(Some(0)) | Err(_) => return Err(Drained::Failed(ExecError::ClientLost { running: !ended })),
                Ok(Some(n)) => {
                    buf.advance(n);
                    *scanned -= n;
                    last_progress = Instant::now();
                    if let Some(w) = first_write.as_deref_mut().filter(|w| w.is_none()) {
                        *w = Some(last_progress);
                    }
                    if !ended && buf.len() <= limits.watermarks.low {
                        return Ok(());
                    }
                }
            },
            _ = &mut reset, if !ended => return Err(Drained::BackendReset),
            _ = &mut stall => {
                if last_progress.elapsed() >= limits.stall {
                    return Err(Drained::Failed(ExecError::ClientStalled(limits.stall)));
                }
                stall.as_mut().reset((last_progress + limits.stall).into());
            }
        }
    }
}

/// What the client did while its reply was awaited.
pub(crate) enum Watch {
    /// Nothing (or bytes it sent ahead, kept in its read buffer).
    Quiet,
    /// It closed its connection (EOF with nothing sent ahead) or reset it.
    Gone,
    /// It sent a lot ahead, or ahead and then EOF (a COM_QUIT after its last statement, say):
    /// stop watching; the reply goes out as usual.
    Stop,
}

/// Resolves when the client goes while sluice runs a statement of its own for it (as
/// `watch_client_side`); never when it sent its next command ahead.
pub async fn client_gone(client: &mut Conn) {
    let mut watching = true;
    poll_fn(|cx| match watching {
        false => Poll::Pending,
        true => match watch_client_side(client, cx) {
            Watch::Gone => Poll::Ready(()),
            Watch::Stop => {
                watching = false;
                Poll::Pending
            }
            Watch::Quiet => Poll::Pending,
        },
    })
    .await
}

/// Has the client gone while its reply is awaited? The reactor's readiness answers without a
/// system call while the client sends nothing (its command's read drained its socket). Once it
/// is readable, what it sent ahead — its next command — is read into its buffer, where the
/// command loop finds it; only an EOF or error with nothing pending means gone.
pub(crate) fn watch_client_side(client: &mut Conn, cx: &mut Context<'_>) -> Watch {
    loop {
        match client.stream.poll_read_ready(cx) {
            Poll::Pending => return Watch::Quiet,
            Poll::Ready(Err(_)) => return Watch::Gone,
            Poll::Ready(Ok(())) => {}
        }
        if client.rbuf.len() >= PIPELINED_MAX {
            return Watch::Stop;
        }
        if client.rbuf.capacity() - client.rbuf.len() < 1024 {
            client.rbuf.reserve(4096);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut client.stream), cx, &mut client.rbuf) {
            Poll::Pending => return Watch::Quiet,
            Poll::Ready(Ok(0)) if client.rbuf.is_empty() => return Watch::Gone,
            Poll::Ready(Ok(0)) => return Watch::Stop,
            Poll::Ready(Err(_)) => return Watch::Gone,
            Poll::Ready(Ok(_)) => {}
        }
    }
}

#[cfg(test)]
mod head_tests {
    use super::{head_frames, Head};

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![payload.len() as u8, 0, 0, seq];
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn a_result_sets_head_is_found_whole_or_not_yet() {
        let mut reply = packet(1, &[2]);
        reply.extend(packet(2, b"\x03def\x04ds_2"));
        reply.extend(packet(3, b"\x03def\x04ds_2"));
        reply.extend(packet(4, &[0xFE, 0, 0, 2, 0]));
        let mut frames = Vec::new();
        assert!(matches!(head_frames(&reply, &mut frames), Head::Complete));
        assert_eq!(frames, [(0, 5), (5, 13), (18, 13)]);
        for cut in [0, 3, 5, 20, 30] {
            frames.clear();
            assert!(matches!(head_frames(&reply[..cut], &mut frames), Head::Partial), "cut at {cut}");
        }
        for other in [packet(1, &[0, 0, 0, 2, 0]), packet(1, b"\xff\x15\x04#28000"), packet(1, b"\xfbfile")] {
            frames.clear();
            assert!(matches!(head_frames(&other, &mut frames), Head::NotRows));
        }
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::ReplyChecksum;

    #[test]
    fn a_reply_checksum_ignores_sequence_ids_and_piece_sizes() {
        let reply = [1u8, 0, 0, 1, 0x01, 2, 0, 0, 2, b'h', b'i', 0, 0, 0, 3];
        let whole = {
            let mut c = ReplyChecksum::default();
            c.feed(&reply);
            c.finish()
        };
        let mut pieces = ReplyChecksum::default();
        reply.chunks(2).for_each(|p| pieces.feed(p));
        assert_eq!(pieces.finish(), whole, "pieces of any size");
        let mut renumbered = reply;
        (renumbered[3], renumbered[8], renumbered[14]) = (5, 6, 7);
        let mut c = ReplyChecksum::default();
        c.feed(&renumbered);
        assert_eq!(c.finish(), whole, "sequence ids do not count");
        let mut other = reply;
        other[10] = b'o';
        let mut c = ReplyChecksum::default();
        c.feed(&other);
        assert_ne!(c.finish(), whole, "the payload does");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_allowed_packet_is_the_configs_else_the_backends_within_1_gib() {
        let mut proxy = crate::config::ProxySection::default();
        assert_eq!(Limits::from_config(&proxy, 0).max_packet, 1 << 30, "not learned yet");
        assert_eq!(Limits::from_config(&proxy, 16 << 20).max_packet, 16 << 20);
        assert_eq!(Limits::from_config(&proxy, 4 << 30).max_packet, 1 << 30);
        proxy.max_allowed_packet = Some(64 << 20);
        assert_eq!(Limits::from_config(&proxy, 16 << 20).max_packet, 64 << 20);
        assert_eq!(Limits::from_config(&proxy, 16 << 20).max_buffered, 4 << 20);
    }
}
