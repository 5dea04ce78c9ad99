//! Byte streams on both sides of sluice: plain TCP or TLS (or a backend's Unix socket), with a
//! read buffer and packet-at-a-time reading (check-then-parse: nothing is copied until a packet is whole).

pub mod uring;

use bytes::{Buf, BytesMut};
use proto::frame::{self, Frame, Tail};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A client or backend connection: TCP (or a backend's Unix socket) on epoll or on the worker's
/// io_uring ring, or TLS over TCP (always on epoll).
pub enum Stream {
    Tcp(TcpStream),
    Uring(uring::UringStream),
    Unix(UnixStream),
    ServerTls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    ClientTls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// A plain TCP connection, on this worker's io_uring ring when it has one (per-core
    /// workers where io_uring is available: `net::uring`), else on epoll.
    pub fn plain(tcp: std::net::TcpStream) -> io::Result<Stream> {
        tune(&tcp);
        match uring::current() {
            Some(ring) => Ok(Stream::Uring(uring::UringStream::new(tcp, ring)?)),
            None => {
                tcp.set_nonblocking(true)?;
                Ok(Stream::Tcp(TcpStream::from_std(tcp)?))
            }
        }
    }

    /// As `plain`, for a socket tokio opened (a backend connection).
    pub fn from_tokio(tcp: TcpStream) -> io::Result<Stream> {
        tune(&tcp);
        match uring::current() {
            Some(ring) => Ok(Stream::Uring(uring::UringStream::new(tcp.into_std()?, ring)?)),
            None => Ok(Stream::Tcp(tcp)),
        }
    }

    /// A backend's Unix socket, on this worker's ring when it has one, else on epoll.
    pub fn from_tokio_unix(unix: UnixStream) -> io::Result<Stream> {
        match uring::current() {
            Some(ring) => Ok(Stream::Uring(uring::UringStream::new(unix.into_std()?, ring)?)),
            None => Ok(Stream::Unix(unix)),
        }
    }

    /// The plain TCP socket, on epoll, for a TLS handshake: what was written is sent first
    /// (the io_uring stream holds no bytes by then: the packet before a handshake is read with
    /// exact-size reads).
    pub async fn into_tcp(self) -> io::Result<TcpStream> {
        match self {
            Stream::Tcp(tcp) => Ok(tcp),
            Stream::Uring(s) => {
                std::future::poll_fn(|cx| s.poll_sent(cx)).await?;
                TcpStream::from_std(s.into_std()?)
            }
            Stream::Unix(_) => Err(io::Error::other("sluice does not use TLS over a Unix socket")),
            _ => Err(io::Error::other("the connection is already TLS")),
        }
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self.socket() {
            Socket::Epoll(tcp) => tcp.local_addr(),
            Socket::Uring(s) => s.socket().local_addr()?.as_socket().ok_or_else(no_ip),
            Socket::Unix(_) => Err(no_ip()),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::ServerTls(_) | Stream::ClientTls(_))
    }

    /// The socket under the stream (under TLS too), and how it is driven.
    fn socket(&self) -> Socket<'_> {
        match self {
            Stream::Tcp(s) => Socket::Epoll(s),
            Stream::Uring(s) => Socket::Uring(s),
            Stream::Unix(s) => Socket::Unix(s),
            Stream::ServerTls(s) => Socket::Epoll(s.get_ref().0),
            Stream::ClientTls(s) => Socket::Epoll(s.get_ref().0),
        }
    }

    /// Ready once a read would not wait (bytes, end of stream or an error). On epoll, the
    /// reactor's readiness, no system call; on io_uring, a receive in flight (started here if
    /// none is), whose result the next read takes.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.socket() {
            Socket::Epoll(tcp) => tcp.poll_read_ready(cx),
            Socket::Uring(s) => s.poll_read_ready(cx),
            Socket::Unix(u) => u.poll_read_ready(cx),
        }
    }

    /// Bytes received and not yet read (on io_uring, in the stream's own buffer).
    pub fn has_unread(&self) -> bool {
        matches!(self, Stream::Uring(s) if s.has_unread())
    }

    /// An idle connection (pooled, or kept between statements) is watched for a close as epoll
    /// watches every registered socket: on io_uring, a receive is left in flight, so that
    /// `poll_read_ready` (the pool's check at checkout) learns of a close without a system call.
    pub fn watch_idle(&self) {
        if let Stream::Uring(s) = self {
            let _ = s.poll_read_ready(&mut Context::from_waker(std::task::Waker::noop()));
        }
    }

    pub async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Resolves when the socket reports an error (a reset) while it is not being read: the
    /// reactor's error readiness on epoll, a poll operation on io_uring.
    pub async fn error(&self) {
        match self.socket() {
            Socket::Epoll(tcp) => {
                let _ = tcp.ready(tokio::io::Interest::ERROR).await;
            }
            Socket::Uring(s) => std::future::poll_fn(|cx| s.poll_error(cx)).await,
            Socket::Unix(u) => {
                let _ = u.ready(tokio::io::Interest::ERROR).await;
            }
        }
    }

    /// Whether an idle connection is still open and has said nothing, asking the socket itself
    /// (a non-blocking peek) rather than readiness a busy worker may not have seen yet. On
    /// io_uring the socket is asked even while a receive is in flight: its completion may not
    /// be handed out yet, and an end of stream stays readable by a peek after the receive took
    /// what came before it.
    pub fn peek_alive(&mut self) -> bool {
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let peeked = match self.socket() {
            Socket::Epoll(tcp) => socket2::SockRef::from(tcp).peek(&mut probe),
            // Bytes, an end or an error already received: it spoke, or it is gone.
            Socket::Uring(s) if s.has_news() => return false,
            Socket::Uring(s) => socket2::SockRef::from(s.socket()).peek(&mut probe),
            Socket::Unix(u) => socket2::SockRef::from(u).peek(&mut probe),
        };
        match peeked {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Ok(0) | Err(_) => false,
            // Through TLS, bytes may be a record with no data (a session ticket).
            Ok(_) if self.is_tls() => {
                let mut b = [0u8; 64];
                matches!(self.try_read_now(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            Ok(_) => false,
        }
    }

    /// Writes `bytes` without waiting (a COM_QUIT on the way out): on epoll if the socket takes
    /// them at once, on io_uring if the stream's send buffer does; true if so.
    pub fn try_write_now(&mut self, bytes: &[u8]) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self {
            Stream::Tcp(s) => s.try_write(bytes).is_ok_and(|n| n == bytes.len()),
            Stream::Unix(s) => s.try_write(bytes).is_ok_and(|n| n == bytes.len()),
            Stream::Uring(s) => matches!(Pin::new(s).poll_write(&mut cx, bytes), Poll::Ready(Ok(n)) if n == bytes.len()),
            _ => false,
        }
    }

    /// Reads what has already arrived, without waiting: `WouldBlock` when nothing has. Through
    /// TLS, records that carry no data (session tickets) are absorbed and read as `WouldBlock`;
    /// a close_notify or EOF reads as `Ok(0)`.
    pub fn try_read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => return s.try_read(buf),
            Stream::Unix(s) => return s.try_read(buf),
            Stream::Uring(s) => return s.try_read_now(buf),
            _ => {}
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
            Stream::Tcp(_) | Stream::Uring(_) | Stream::Unix(_) => None,
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
            Stream::Uring($s) => $e,
            Stream::Unix($s) => $e,
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
            Stream::Uring(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
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

fn no_ip() -> io::Error {
    io::Error::other("a Unix socket has no IP address")
}

/// Sets the socket options every connection gets.
pub fn tune(s: &impl std::os::fd::AsFd) {
    let sock = socket2::SockRef::from(s);
    let _ = sock.set_tcp_nodelay(true);
    let _ = sock.set_keepalive(true);
}

/// The socket under a stream: TCP driven by tokio's reactor (plain or under TLS) or by the
/// worker's ring, or a Unix socket on the reactor.
enum Socket<'a> {
    Epoll(&'a TcpStream),
    Uring(&'a uring::UringStream),
    Unix(&'a UnixStream),
}
