//! Byte streams on both sides of sluice: plain TCP or TLS, with a read buffer and
//! packet-at-a-time reading (check-then-parse: nothing is copied until a packet is whole).

use bytes::{Buf, BytesMut};
use proto::frame::{self, Frame, Tail};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// A client or backend connection: TCP, or TLS over TCP.
pub enum Stream {
    Tcp(TcpStream),
    ServerTls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    ClientTls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Tcp(_))
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::ServerTls(s) => s.get_ref().0,
            Stream::ClientTls(s) => s.get_ref().0,
        }
    }

    /// Reads what has already arrived, without waiting: `WouldBlock` when nothing has. Through
    /// TLS, records that carry no data (session tickets) are absorbed and read as `WouldBlock`;
    /// a close_notify or EOF reads as `Ok(0)`.
    pub fn try_read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Stream::Tcp(s) = self {
            return s.try_read(buf);
        }
        let mut rb = ReadBuf::new(buf);
        match Pin::new(self).poll_read(&mut Context::from_waker(std::task::Waker::noop()), &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// The cipher suite in use, for logs and tests.
    pub fn tls_cipher(&self) -> Option<String> {
        let suite = match self {
            Stream::Tcp(_) => None,
            Stream::ServerTls(s) => s.get_ref().1.negotiated_cipher_suite(),
            Stream::ClientTls(s) => s.get_ref().1.negotiated_cipher_suite(),
        };
        suite.map(|s| format!("{:?}", s.suite()))
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::ServerTls($s) => $e,
            Stream::ClientTls($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::ServerTls(s) => s.is_write_vectored(),
            Stream::ClientTls(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// Initial read buffer: enough for typical commands and small replies; grows on demand
/// and is shrunk back after large traffic so idle sessions stay small.
pub const READ_CHUNK: usize = 16 << 10;
const SHRINK_ABOVE: usize = 256 << 10;

/// A stream with its read buffer.
pub struct Conn {
    pub stream: Stream,
    pub rbuf: BytesMut,
}

impl Conn {
    pub fn new(stream: Stream) -> Self {
        Conn { stream, rbuf: BytesMut::new() }
    }

    /// Reads until a whole logical packet is at the front of `rbuf`; `Ok(None)` on a clean EOF
    /// between packets. The caller looks at `&rbuf[..frame.wire_len]`, then calls `consume`.
    pub async fn read_frame(&mut self, max_payload: usize) -> io::Result<Option<Frame>> {
        Ok(self.read_request(max_payload, usize::MAX).await?.map(|(f, _)| f))
    }

    /// Like `read_frame`, but a packet whose payload is larger than `head` (< 16 MiB) is
    /// returned once its first `head` payload bytes are in: the frame covers those, and the
    /// `Tail` follows the rest, still on the socket, for relaying (memory stays bounded by
    /// `head` whatever `max_payload` allows).
    pub async fn read_request(&mut self, max_payload: usize, head: usize) -> io::Result<Option<(Frame, Option<Tail>)>> {
        loop {
            let found = if head == usize::MAX {
                frame::frame(&self.rbuf, max_payload).map(|f| f.map(|f| (f, None)))
            } else {
                frame::frame_or_head(&self.rbuf, max_payload, head)
            };
            match found {
                Ok(Some(f)) => return Ok(Some(f)),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let spare = self.rbuf.capacity() - self.rbuf.len();
            if spare < READ_CHUNK / 4 {
                // A large packet announces its size: room for all of it (or its head) at once,
                // rather than doubling the buffer (and copying it) on the way.
                let missing = frame::missing(&self.rbuf, head);
                self.rbuf.reserve(missing.max(READ_CHUNK));
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                return if self.rbuf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside a packet"))
                };
            }
        }
    }

    /// Drops `n` bytes from the front of the read buffer (a packet just handled).
    pub fn consume(&mut self, n: usize) {
        self.rbuf.advance(n);
        if self.rbuf.is_empty() && self.rbuf.capacity() > SHRINK_ABOVE {
            self.rbuf = BytesMut::new();
        }
    }

    /// Reads one packet with exact-size reads, leaving nothing buffered: used before a TLS
    /// upgrade, whose first bytes must reach the TLS layer untouched.
    pub async fn read_packet_unbuffered(&mut self, max_payload: usize) -> io::Result<(u8, Vec<u8>)> {
        debug_assert!(self.rbuf.is_empty());
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header).await?;
        let (len, seq) = frame::header(&header).unwrap_or((0, 0));
        if len > max_payload || len >= frame::MAX_CHUNK {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "handshake packet too large"));
        }
        let mut payload = vec![0; len];
        self.stream.read_exact(&mut payload).await?;
        Ok((seq, payload))
    }

    /// Reads one packet (joined if split) and returns (sequence id of its last chunk, payload).
    pub async fn read_packet(&mut self, max_payload: usize) -> io::Result<(u8, Vec<u8>)> {
        let f = self.read_frame(max_payload).await?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"))?;
        let payload = f.payload(&self.rbuf).into_owned();
        self.consume(f.wire_len);
        Ok((f.last_seq, payload))
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        if self.stream.is_tls() {
            self.stream.flush().await?;
        }
        Ok(())
    }
}

/// Sets the socket options every connection gets.
pub fn tune(s: &TcpStream) {
    let _ = s.set_nodelay(true);
    let sock = socket2::SockRef::from(s);
    let _ = sock.set_keepalive(true);
}
