//! ⑥ exec: sends a client's request to its backend and streams the reply back unchanged.
//!
//! Bytes are forwarded as they arrive; the `proto::response::Scanner` watches packet headers to
//! find the reply's end. A bounded buffer with high/low watermarks sits between the two sockets:
//! above the high watermark sluice stops reading the backend until the client has drained it
//! below the low one, so a slow client costs at most the high watermark in memory.

use crate::net::{Conn, Stream, READ_CHUNK};
use bytes::Buf;
use proto::frame::Tail;
use proto::response::{Event, Reply, Scanner};
use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Packet-format facts of a backend connection that decide how its replies are scanned.
#[derive(Debug, Clone, Copy, Default)]
pub struct Format {
    pub deprecate_eof: bool,
    pub mariadb_caps: u32,
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
    /// Client packets larger than this are relayed as they arrive, not held whole.
    pub max_buffered: usize,
}

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
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The backend closed or failed before its reply ended. `reply_seq` is the sequence id an
    /// ERR packet must carry to end the reply cleanly, when the stream stopped between packets.
    #[error("lost the backend connection during the reply")]
    BackendLost { reply_seq: Option<u8> },
    /// The backend sent something that is not a valid reply.
    #[error("backend protocol error: {0}")]
    BackendProtocol(proto::ProtoError),
    /// The client closed or failed.
    #[error("client connection lost")]
    ClientLost,
    #[error("client protocol error: {0}")]
    ClientProtocol(String),
    /// A relayed client packet grew past max_allowed_packet; `seq` is its last chunk's id.
    #[error("client packet larger than max_allowed_packet")]
    ClientPacketTooLarge { seq: u8 },
}

/// Sends `request` and streams the reply.
pub async fn forward(client: &mut Conn, backend: &mut Conn, request: Request<'_>, limits: &Limits) -> Result<Outcome, ExecError> {
    let Request { packets, reply, format, tail } = request;
    // The reply continues the sequence from the request's last chunk.
    let mut request_seq = proto::frame::frame(packets, usize::MAX).ok().flatten().map_or(0, |f| f.last_seq);
    if backend.write_all(packets).await.is_err() {
        // Half a request: the client is still sending the rest, no clean answer is possible.
        let reply_seq = tail.is_none().then(|| request_seq.wrapping_add(1));
        return Err(ExecError::BackendLost { reply_seq });
    }
    if let Some(tail) = tail {
        request_seq = relay_tail(client, backend, tail).await?;
    }
    let Some(reply) = reply else {
        return Ok(Outcome::default());
    };
    let mut scanner = Scanner::new(reply, format.deprecate_eof).with_mariadb_capabilities(format.mariadb_caps);
    let mut reply_bytes = 0;
    loop {
        match stream_reply(&mut client.stream, backend, &mut scanner, limits.watermarks, request_seq, &mut reply_bytes).await? {
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

/// Relays the client's LOCAL INFILE data packets to the backend up to the empty packet that
/// ends them; returns that packet's sequence id. A packet larger than `max_buffered` is relayed
/// as it arrives.
async fn relay_infile(client: &mut Conn, backend: &mut Conn, limits: &Limits) -> Result<u8, ExecError> {
    loop {
        let (frame, tail) = match client.read_request(limits.max_packet, limits.max_buffered).await {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => return Err(ExecError::ClientLost),
        };
        let res = backend.write_all(&client.rbuf[..frame.wire_len]).await;
        client.consume(frame.wire_len);
        if res.is_err() {
            return Err(ExecError::BackendLost { reply_seq: None });
        }
        if let Some(tail) = tail {
            relay_tail(client, backend, tail).await?;
        } else if frame.payload_len == 0 {
            return Ok(frame.last_seq);
        }
    }
}

/// Client bytes read at a time while relaying the rest of a large packet.
const RELAY_CHUNK: usize = 64 << 10;

/// Relays the rest of a client packet whose head was sent, as it arrives, holding at most
/// `RELAY_CHUNK` of it; returns its last chunk's sequence id. Bytes after its end stay in the
/// client's buffer (a pipelined command).
pub async fn relay_tail(client: &mut Conn, backend: &mut Conn, mut tail: Tail) -> Result<u8, ExecError> {
    loop {
        if !client.rbuf.is_empty() {
            let (n, done) = tail.feed(&client.rbuf).map_err(|_| ExecError::ClientPacketTooLarge { seq: tail.last_seq() })?;
            if n > 0 {
                let res = backend.write_all(&client.rbuf[..n]).await;
                client.consume(n);
                if res.is_err() {
                    return Err(ExecError::BackendLost { reply_seq: None });
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
        Ok(0) | Err(_) => Err(ExecError::ClientLost),
        Ok(_) => Ok(()),
    }
}

/// Streams reply bytes from `backend` to `client` until the scanner reports the end of the
/// reply or a LOCAL INFILE request. Reading and writing overlap; the buffer is bounded.
async fn stream_reply(
    client: &mut Stream,
    backend: &mut Conn,
    scanner: &mut Scanner,
    wm: Watermarks,
    request_seq: u8,
    reply_bytes: &mut u64,
) -> Result<Event, ExecError> {
    let Conn { stream: bstream, rbuf: buf } = backend;
    // buf[..scanned] belongs to this reply and waits to be written; buf[scanned..] is unscanned.
    let mut scanned = 0usize;
    let mut event = Event::More;
    let mut reading = true;
    let result = poll_fn(|cx| loop {
        if event == Event::More && scanned < buf.len() {
            match scanner.feed(&buf[scanned..]) {
                Ok((used, ev)) => {
                    scanned += used;
                    *reply_bytes += used as u64;
                    event = ev;
                    if ev != Event::More && scanned < buf.len() {
                        return Poll::Ready(Err(ExecError::BackendProtocol(proto::ProtoError::Unexpected(
                            "bytes after the end of a reply",
                        ))));
                    }
                }
                Err(e) => return Poll::Ready(Err(ExecError::BackendProtocol(e))),
            }
        }
        let mut progress = false;
        if scanned > 0 {
            match Pin::new(&mut *client).poll_write(cx, &buf[..scanned]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(ExecError::ClientLost)),
                Poll::Ready(Ok(n)) => {
                    buf.advance(n);
                    scanned -= n;
                    progress = true;
                }
                Poll::Pending => {}
            }
        }
        if event != Event::More && scanned == 0 {
            return match Pin::new(&mut *client).poll_flush(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(event)),
                Poll::Ready(Err(_)) => Poll::Ready(Err(ExecError::ClientLost)),
                Poll::Pending => Poll::Pending,
            };
        }
        if event == Event::More {
            if buf.len() >= wm.high {
                reading = false;
            } else if buf.len() <= wm.low {
                reading = true;
            }
            if reading {
                let spare = buf.capacity() - buf.len();
                if spare < READ_CHUNK / 4 {
                    buf.reserve((wm.high - buf.len()).clamp(READ_CHUNK / 4, 4 * READ_CHUNK));
                }
                match tokio_util::io::poll_read_buf(Pin::new(&mut *bstream), cx, buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        // Everything scanned up to a packet boundary may still go to the client.
                        let reply_seq = if scanner.at_packet_boundary() {
                            Some(if scanner.packets() == 0 { request_seq } else { scanner.last_seq() }.wrapping_add(1))
                        } else {
                            None
                        };
                        return Poll::Ready(Err(ExecError::BackendLost { reply_seq }));
                    }
                    Poll::Ready(Ok(_)) => progress = true,
                    Poll::Pending => {}
                }
            }
        }
        if !progress {
            return Poll::Pending;
        }
    })
    .await;
    if let Err(ExecError::BackendLost { reply_seq: Some(_) }) = &result {
        // Whole packets already received still reach the client before the error.
        let whole = scanned.min(buf.len());
        if client.write_all(&buf[..whole]).await.is_err() {
            return Err(ExecError::ClientLost);
        }
        buf.clear();
    }
    if buf.is_empty() && buf.capacity() > 256 << 10 {
        *buf = bytes::BytesMut::new();
    }
    result
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
